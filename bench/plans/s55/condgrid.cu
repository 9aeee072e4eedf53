// What the engine path's blocks past a step cost, and what a grid chosen on the device would cost
// instead (docs/PERFORMANCE.md#engine-path, "B 1 at 4096: the blocks past the step").
//
// A graph replays L layers of: split kernel (items of equal length, a block an SM by its shared
// memory, blocks past the step's n items exit at once), then a one-block "combine". The step's
// item count n is written on the device by a one-block "scheduler" at the graph's start.
//   max     the split kernel at the limits' grid (G blocks, G - n of them past the step): today;
//   exact   at n blocks (a plan for one problem: the floor);
//   switch  a conditional SWITCH node a layer, the scheduler setting every layer's value to the
//           step's waves - 1, each body the split kernel at that many waves (needs CUDA 12.8);
//   if      IF/ELSE nodes: one wave, or the limits' grid.
// Prints us a replay (least of R rounds of K replays) and a layer (/ L).
// Build: nvcc -O3 -arch=sm_90a -std=c++17 condgrid.cu -o condgrid
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static __device__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void sched(int *d_n, int n, int waves_sm, const cudaGraphConditionalHandle *h, int nh,
                      int mode)
{
    if (threadIdx.x != 0)
        return;
    *d_n = n;
    const int waves = (n + waves_sm - 1) / waves_sm;
    for (int i = 0; i < nh; ++i)
        cudaGraphSetConditional(h[i], mode == 0 ? (unsigned)(waves - 1) : (unsigned)(waves > 1));
}

__global__ void split(const int *d_n, unsigned spin_ns, float *out)
{
    extern __shared__ float smem[];
    const int n = *d_n;
    if ((int)blockIdx.x >= n)
        return;
    const unsigned long long t0 = now_ns();
    float acc = 0.f;
    while (now_ns() - t0 < spin_ns)
        acc += smem[threadIdx.x];
    if (threadIdx.x == 0)
        out[blockIdx.x] = acc;
}

__global__ void combine(float *out) { if (threadIdx.x == 0) out[0] += 1.f; }

struct Cfg {
    int n, G, L, smem, sm;
    unsigned spin;
    int *d_n;
    float *out;
};

static void add_split(cudaGraph_t g, cudaGraphNode_t *node, const cudaGraphNode_t *dep, int ndep,
                      const Cfg &c, int grid)
{
    cudaKernelNodeParams p = {};
    void *args[] = {(void *)&c.d_n, (void *)&c.spin, (void *)&c.out};
    p.func = (void *)split;
    p.gridDim = dim3(grid);
    p.blockDim = dim3(256);
    p.sharedMemBytes = c.smem;
    p.kernelParams = args;
    CK(cudaGraphAddKernelNode(node, g, dep, ndep, &p));
}

static void add_combine(cudaGraph_t g, cudaGraphNode_t *node, const cudaGraphNode_t *dep,
                        const Cfg &c)
{
    cudaKernelNodeParams p = {};
    void *args[] = {(void *)&c.out};
    p.func = (void *)combine;
    p.gridDim = dim3(1);
    p.blockDim = dim3(32);
    p.kernelParams = args;
    CK(cudaGraphAddKernelNode(node, g, dep, 1, &p));
}

// mode: 0 max, 1 exact, 2 switch, 3 if/else
static double run(const Cfg &c, int mode, int K, int R)
{
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    std::vector<cudaGraphConditionalHandle> hs(c.L);
    cudaGraphConditionalHandle *d_h = nullptr;
    if (mode >= 2) {
        for (int i = 0; i < c.L; ++i)
            CK(cudaGraphConditionalHandleCreate(&hs[i], g, 0, 0));
        CK(cudaMalloc(&d_h, sizeof(cudaGraphConditionalHandle) * c.L));
        CK(cudaMemcpy(d_h, hs.data(), sizeof(cudaGraphConditionalHandle) * c.L,
                      cudaMemcpyHostToDevice));
    }
    cudaGraphNode_t prev;
    {
        cudaKernelNodeParams p = {};
        int nh = mode >= 2 ? c.L : 0, md = mode == 2 ? 0 : 1, n = c.n;
        void *args[] = {(void *)&c.d_n, (void *)&n, (void *)&c.sm, (void *)&d_h, (void *)&nh,
                        (void *)&md};
        p.func = (void *)sched;
        p.gridDim = dim3(1);
        p.blockDim = dim3(32);
        p.kernelParams = args;
        CK(cudaGraphAddKernelNode(&prev, g, nullptr, 0, &p));
    }
    const int waves_max = (c.G + c.sm - 1) / c.sm;
    for (int l = 0; l < c.L; ++l) {
        cudaGraphNode_t s;
        if (mode == 0 || mode == 1) {
            add_split(g, &s, &prev, 1, c, mode == 0 ? c.G : c.n);
        } else {
            cudaGraphNodeParams cp = {};
            cp.type = cudaGraphNodeTypeConditional;
            cp.conditional.handle = hs[l];
            cp.conditional.type = mode == 2 ? cudaGraphCondTypeSwitch : cudaGraphCondTypeIf;
            cp.conditional.size = mode == 2 ? waves_max : 2;
            CK(cudaGraphAddNode(&s, g, &prev, nullptr, 1, &cp));
            for (unsigned b = 0; b < cp.conditional.size; ++b) {
                cudaGraphNode_t k;
                const int grid = mode == 2 ? (int)(b + 1) * c.sm : (b == 0 ? c.G : c.sm);
                add_split(cp.conditional.phGraph_out[b], &k, nullptr, 0, c, grid);
            }
        }
        add_combine(g, &prev, &s, c);
    }
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 5; ++i)
        CK(cudaGraphLaunch(ge, st));
    double best = 1e30;
    for (int r = 0; r < R; ++r) {
        CK(cudaEventRecord(a, st));
        for (int i = 0; i < K; ++i)
            CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (ms * 1e3 / K < best)
            best = ms * 1e3 / K;
    }
    CK(cudaGetLastError());
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    if (d_h)
        CK(cudaFree(d_h));
    return best;
}

int main(int argc, char **argv)
{
    int dev = 0, sm;
    CK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    const int smem = 200 * 1024;
    CK(cudaFuncSetAttribute(split, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    Cfg c;
    c.sm = sm;
    c.smem = smem;
    c.G = 3 * sm;
    c.L = argc > 1 ? atoi(argv[1]) : 8;
    CK(cudaMalloc(&c.d_n, sizeof(int)));
    CK(cudaMalloc(&c.out, sizeof(float) * 4 * sm));
    CK(cudaMemset(c.out, 0, sizeof(float) * 4 * sm));
    printf("%s, %d SMs; grid at the limits %d blocks; %d layers a replay; us a layer "
           "(least of 5 rounds of 50 replays)\n", prop.name, sm, c.G, c.L);
    printf("%6s %8s %9s %9s %9s %9s %11s %11s\n", "items", "spin_us", "max", "exact", "switch",
           "if", "max-exact", "switch-ex");
    const int ns[] = {sm - 4, sm, sm + 20, 2 * sm, 3 * sm};
    const unsigned spins[] = {2000, 10000, 25000};
    for (unsigned spin : spins)
        for (int n : ns) {
            c.n = n;
            c.spin = spin;
            double t[4];
            for (int m = 0; m < 4; ++m)
                t[m] = run(c, m, 50, 5) / c.L;
            printf("%6d %8.1f %9.2f %9.2f %9.2f %9.2f %11.2f %11.2f\n", n, spin / 1e3, t[0],
                   t[1], t[2], t[3], t[0] - t[1], t[2] - t[1]);
        }
    return 0;
}
