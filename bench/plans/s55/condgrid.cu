// What the engine path's blocks past a step cost, and what a grid chosen on the device would cost
// instead (docs/PERFORMANCE.md#engine-path, "B 1 at 4096: the blocks past the step").
//
// A graph replays L layers of: split kernel (items of equal length, one block an SM by its shared
// memory, blocks past the step's n items exit at once), then a one-block "combine". Before each
// replay a one-block kernel outside the graph writes the step's n to device memory (an engine's
// step update; SGLang runs it outside the graph it replays). Graphs:
//   max     the split kernel at the limits' grid (G = 3 waves; today);
//   exact   at n blocks (a plan for one problem: the floor);
//   switch  a SWITCH node a layer, each body the split kernel at 1..3 waves, the value (waves - 1)
//           set by the graph's first node from the n in device memory (CUDA 12.8+);
//   upd-in  device-updatable split nodes (CUDA 12.4+) starting at one wave, their grid set by the
//           graph's first node from the same n;
//   upd-out the same nodes' grid set by the kernel outside the graph, with the n it writes: the
//           form SGLang's pattern needs (cuda_device_runtime_api.h asks only that the node be on
//           the calling kernel's device);
//   upd-max upd-out's nodes captured at the limits' grid: an update that does not take costs
//           time (max's), never items (the form a library would build).
// Session 57's run (H100): an update from outside did not take on the graph's first launch after
// instantiation (exactly one replay's items short past one wave, 8 and 61 layers), one from the
// graph's first node missed 46 of 183 node launches at 61 layers: the first launch's upload is
// suspected of writing the host's parameters over the update, so each graph is now uploaded
// (cudaGraphUpload) before its first update; `condgrid L noupload` leaves that out.
// Session 56's first run set the switch values from the kernel outside the graph too: an illegal
// memory access (a conditional handle is set by a kernel of its own graph), which ended the
// process's context; a mode that fails now resets the device and the others go on.
// Every replay's items and each split launch's grid are counted (atomics, the timed replays
// included): a graph whose items are not n x L a replay, or whose grids are not the mode's, is
// reported (-2, the counts printed).
// Prints us a layer: the least of R rounds of K replays, / L.
// Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 condgrid.cu -o condgrid
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "  %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            return -1.0;                                                                       \
        }                                                                                      \
    } while (0)

static __device__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

struct Setter {
    const int *d_n; // the step's n, written by the update outside the graph
    int sm;
    const cudaGraphConditionalHandle *h; // switch values to set
    int nh;
    cudaGraphDeviceNode_t *dn; // split nodes whose grid to set
    int ndn;
};

// the step's update outside the graph: n to device memory, and for upd-out the split nodes' grid
// (a node a thread: an engine's graph has a split node a layer, 61 in DeepSeek-V3)
__global__ void update(int *d_n, int n, int sm, const cudaGraphDeviceNode_t *dn, int ndn)
{
    if (threadIdx.x == 0)
        *d_n = n;
    const int waves = n < 1 ? 1 : (n + sm - 1) / sm;
    for (int i = threadIdx.x; i < ndn; i += blockDim.x)
        cudaGraphKernelNodeSetGridDim(dn[i], dim3(waves * sm));
}

__global__ void setter(Setter s)
{
    const int n = *s.d_n;
    const int waves = n < 1 ? 1 : (n + s.sm - 1) / s.sm;
    for (int i = threadIdx.x; i < s.nh; i += blockDim.x)
        cudaGraphSetConditional(s.h[i], (unsigned)(waves - 1));
    for (int i = threadIdx.x; i < s.ndn; i += blockDim.x)
        cudaGraphKernelNodeSetGridDim(s.dn[i], dim3(waves * s.sm));
}

__global__ void split(const int *d_n, unsigned spin_ns, float *out, unsigned *count,
                      unsigned long long *grids)
{
    extern __shared__ float smem[];
    const int n = *d_n;
    if (blockIdx.x == 0 && threadIdx.x == 0)
        atomicAdd(grids, (unsigned long long)gridDim.x);
    if ((int)blockIdx.x >= n)
        return;
    const unsigned long long t0 = now_ns();
    float acc = 0.f;
    while (now_ns() - t0 < spin_ns)
        acc += smem[threadIdx.x];
    if (threadIdx.x == 0) {
        out[blockIdx.x] = acc;
        atomicAdd(count, 1u);
    }
}

__global__ void combine(float *out) { if (threadIdx.x == 0) out[0] += 1.f; }

struct Cfg {
    int n, G, L, smem, sm;
    unsigned spin;
    int *d_n;
    float *out;
    unsigned *count;
    unsigned long long *grids;
    bool upload;
};

enum { MAX, EXACT, SWITCH, UPD_IN, UPD_OUT, UPD_MAX, MODES };
static const char *mode_name[MODES] = {"max", "exact", "switch", "upd-in", "upd-out", "upd-max"};

static cudaError_t add_split(cudaGraph_t g, cudaGraphNode_t *node, const cudaGraphNode_t *dep,
                             int ndep, const Cfg &c, int grid)
{
    cudaKernelNodeParams p = {};
    void *args[] = {(void *)&c.d_n, (void *)&c.spin, (void *)&c.out, (void *)&c.count,
                    (void *)&c.grids};
    p.func = (void *)split;
    p.gridDim = dim3(grid);
    p.blockDim = dim3(256);
    p.sharedMemBytes = c.smem;
    p.kernelParams = args;
    return cudaGraphAddKernelNode(node, g, dep, ndep, &p);
}

// us a layer, or -1 (an error, printed), or -2 (wrong item count)
static double run(const Cfg &c, int mode, int K, int R)
{
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    const int waves_max = (c.G + c.sm - 1) / c.sm;
    std::vector<cudaGraphConditionalHandle> hs(c.L);
    std::vector<cudaGraphDeviceNode_t> dns(c.L);
    cudaGraphConditionalHandle *d_h = nullptr;
    cudaGraphDeviceNode_t *d_dn = nullptr;
    CK(cudaMalloc(&d_h, sizeof(cudaGraphConditionalHandle) * c.L));
    CK(cudaMalloc(&d_dn, sizeof(cudaGraphDeviceNode_t) * c.L));
    const bool sw = mode == SWITCH;
    const bool upd = mode == UPD_IN || mode == UPD_OUT || mode == UPD_MAX;
    if (sw)
        for (int i = 0; i < c.L; ++i)
            CK(cudaGraphConditionalHandleCreate(&hs[i], g, 0, 0));
    Setter s_in = {c.d_n, c.sm, d_h, sw ? c.L : 0, d_dn, mode == UPD_IN ? c.L : 0};
    const int ndn_out = mode == UPD_OUT || mode == UPD_MAX ? c.L : 0;
    cudaGraphNode_t prev;
    {
        cudaKernelNodeParams p = {};
        void *args[] = {(void *)&s_in};
        p.func = (void *)setter;
        p.gridDim = dim3(1);
        p.blockDim = dim3(64);
        p.kernelParams = args;
        CK(cudaGraphAddKernelNode(&prev, g, nullptr, 0, &p));
    }
    for (int l = 0; l < c.L; ++l) {
        cudaGraphNode_t s;
        if (!sw) {
            // a device-updatable node starts at one wave, so that an update that does not take
            // shows as a wrong count past one wave, not as the limits' grid's time
            CK(add_split(g, &s, &prev, 1, c,
                         mode == EXACT ? c.n : upd && mode != UPD_MAX ? c.sm : c.G));
            if (upd) {
                cudaLaunchAttributeValue v = {};
                v.deviceUpdatableKernelNode.deviceUpdatable = 1;
                CK(cudaGraphKernelNodeSetAttribute(s, cudaLaunchAttributeDeviceUpdatableKernelNode,
                                                   &v));
                CK(cudaGraphKernelNodeGetAttribute(s, cudaLaunchAttributeDeviceUpdatableKernelNode,
                                                   &v));
                dns[l] = v.deviceUpdatableKernelNode.devNode;
            }
        } else {
            cudaGraphNodeParams cp = {};
            cp.type = cudaGraphNodeTypeConditional;
            cp.conditional.handle = hs[l];
            cp.conditional.type = cudaGraphCondTypeSwitch;
            cp.conditional.size = waves_max;
            CK(cudaGraphAddNode(&s, g, &prev, nullptr, 1, &cp));
            for (unsigned b = 0; b < cp.conditional.size; ++b) {
                cudaGraphNode_t k;
                const int grid = (int)(b + 1) * c.sm;
                CK(add_split(cp.conditional.phGraph_out[b], &k, nullptr, 0, c, grid));
            }
        }
        cudaKernelNodeParams p = {};
        void *args[] = {(void *)&c.out};
        p.func = (void *)combine;
        p.gridDim = dim3(1);
        p.blockDim = dim3(32);
        p.kernelParams = args;
        CK(cudaGraphAddKernelNode(&prev, g, &s, 1, &p));
    }
    CK(cudaMemcpy(d_h, hs.data(), sizeof(cudaGraphConditionalHandle) * c.L,
                  cudaMemcpyHostToDevice));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    if (upd) // the handles the graph's nodes gave (an update through a stale one miscounts)
        CK(cudaMemcpy(d_dn, dns.data(), sizeof(cudaGraphDeviceNode_t) * c.L,
                      cudaMemcpyHostToDevice));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (c.upload) { // the graph on the device before any update of its nodes
        CK(cudaGraphUpload(ge, st));
        CK(cudaStreamSynchronize(st));
    }
    auto replay = [&]() -> cudaError_t {
        update<<<1, 64, 0, st>>>(c.d_n, c.n, c.sm, d_dn, ndn_out);
        cudaError_t e = cudaGetLastError();
        return e != cudaSuccess ? e : cudaGraphLaunch(ge, st);
    };
    CK(cudaMemset(c.count, 0, sizeof(unsigned)));
    CK(cudaMemset(c.grids, 0, sizeof(unsigned long long)));
    for (int i = 0; i < 3; ++i)
        CK(replay());
    CK(cudaStreamSynchronize(st));
    unsigned count = 0;
    CK(cudaMemcpy(&count, c.count, sizeof count, cudaMemcpyDeviceToHost));
    const bool right = count == 3u * c.n * c.L;
    unsigned long long grids = 0;
    CK(cudaMemcpy(&grids, c.grids, sizeof grids, cudaMemcpyDeviceToHost));
    const int waves = (c.n + c.sm - 1) / c.sm;
    const unsigned long long grid_want =
        mode == MAX ? c.G : mode == EXACT ? c.n : (unsigned long long)waves * c.sm;
    const unsigned long long replays = 3ull + (unsigned long long)R * K;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    double best = 1e30;
    for (int r = 0; r < R; ++r) {
        CK(cudaEventRecord(a, st));
        for (int i = 0; i < K; ++i)
            CK(replay());
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (ms * 1e3 / K < best)
            best = ms * 1e3 / K;
    }
    CK(cudaGetLastError());
    unsigned total = 0;
    CK(cudaMemcpy(&total, c.count, sizeof total, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&grids, c.grids, sizeof grids, cudaMemcpyDeviceToHost));
    const bool right_all =
        total == replays * c.n * c.L && grids == replays * c.L * grid_want;
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaFree(d_h));
    CK(cudaFree(d_dn));
    if (!right)
        fprintf(stderr, "  %s, n %d: %u items ran in 3 replays, not %u\n", mode_name[mode], c.n,
                count, 3u * c.n * c.L);
    if (!right_all)
        fprintf(stderr, "  %s, n %d: %llu replays ran %u items on %llu blocks' grids, not %llu on "
                "%llu\n", mode_name[mode], c.n, replays, total, grids, replays * c.n * c.L,
                replays * c.L * grid_want);
    return right && right_all ? best / c.L : -2.0;
}

// the split kernel's shared memory and the buffers every graph uses (again after a reset)
static bool setup(Cfg &c)
{
    return cudaFuncSetAttribute(split, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem) ==
               cudaSuccess &&
           cudaMalloc(&c.d_n, sizeof(int)) == cudaSuccess &&
           cudaMalloc(&c.out, sizeof(float) * 4 * c.sm) == cudaSuccess &&
           cudaMalloc(&c.count, sizeof(unsigned)) == cudaSuccess &&
           cudaMalloc(&c.grids, sizeof(unsigned long long)) == cudaSuccess &&
           cudaMemset(c.out, 0, sizeof(float) * 4 * c.sm) == cudaSuccess;
}

int main(int argc, char **argv)
{
    int sm;
    if (cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess)
        return 1;
    cudaDeviceProp prop;
    int drv = 0, rt = 0;
    cudaGetDeviceProperties(&prop, 0);
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    const int smem = 200 * 1024;
    Cfg c;
    c.sm = sm;
    c.smem = smem;
    c.G = 3 * sm;
    c.L = argc > 1 ? atoi(argv[1]) : 8;
    c.upload = !(argc > 2 && !strcmp(argv[2], "noupload"));
    if (!setup(c))
        return 1;
    printf("%s, %d SMs, driver %d, runtime %d; the limits' grid %d blocks; %d layers a replay; "
           "graphs %suploaded before their first update;\n"
           "us a layer (least of 5 rounds of 40 replays; -1 error, -2 wrong item or grid count)\n",
           prop.name, sm, drv, rt, c.G, c.L, c.upload ? "" : "not ");
    printf("%6s %7s", "items", "spin_us");
    for (int m = 0; m < MODES; ++m)
        printf(" %10s", mode_name[m]);
    printf(" %9s %9s %9s %9s %9s\n", "max-ex", "sw-ex", "in-ex", "out-ex", "umax-ex");
    const int ns[] = {sm - 4, sm, sm + 20, 2 * sm, 3 * sm};
    const unsigned spins[] = {2000, 10000, 25000};
    for (unsigned spin : spins)
        for (int n : ns) {
            c.n = n;
            c.spin = spin;
            double t[MODES];
            for (int m = 0; m < MODES; ++m) {
                t[m] = run(c, m, 40, 5);
                if (t[m] == -1.0 && (cudaDeviceReset() != cudaSuccess || !setup(c)))
                    return 1; // a fault ends the context: start a fresh one for the next mode
            }
            printf("%6d %7.1f", n, spin / 1e3);
            for (int m = 0; m < MODES; ++m)
                printf(" %10.2f", t[m]);
            printf(" %9.2f %9.2f %9.2f %9.2f %9.2f\n", t[MAX] - t[EXACT], t[SWITCH] - t[EXACT],
                   t[UPD_IN] - t[EXACT], t[UPD_OUT] - t[EXACT], t[UPD_MAX] - t[EXACT]);
            fflush(stdout);
        }
    return 0;
}
