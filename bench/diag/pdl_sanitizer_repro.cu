/* Does compute-sanitizer's racecheck stall on programmatic dependent launch across streams,
 * without this library? A stand-alone copy of the launch pattern of `test_cuda_streams_gpu`
 * (docs/PERFORMANCE.md#racecheck-stall; session 12: under racecheck that test stalled in 3 of 11 runs with the
 * combine's programmatic launch, in none of 11 without it, and never outside the sanitizer).
 * An H200 diagnostic (its 120 KB blocks do not fit an sm_120):
 *   - a primary kernel of several waves (one 120 KB block per SM), which triggers its dependents
 *     at entry, as the split kernels do, then works in shared memory with block barriers;
 *   - a dependent kernel of many small blocks, launched with programmatic stream serialization,
 *     which waits (griddepcontrol.wait) before it reads the primary's output, as the combine does;
 *   - 4 host threads, each with its own non-blocking stream, 3 pairs in flight before a copy back
 *     and a stream synchronization, a cudaMalloc/cudaFree per round (the test's offload mode).
 * Each pair's result is checked. A run that never ends under racecheck reproduces the stall
 * without our kernels; PDL=0 in the environment launches the dependent without the attribute.
 * A second argument, FEATURES, adds what our kernels add to that pattern, one bit each:
 *   1: the primary's block is two groups that meet only through named barriers (bar.arrive on
 *      the other group's, bar.sync on their own, four ids per group in rotation, as the split
 *      kernel's "tile full" barriers), each group's steps fenced by its own named barrier;
 *   2: the primary stages its input by cp.async (else by plain loads and stores);
 *   4: the dependent reserves dynamic shared memory (as the block combine does to spread its
 *      blocks) and meets at a block barrier.
 * (Session 12 ran the plain form: 23 racecheck runs without a stall.)
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o pdl_sanitizer_repro bench/diag/pdl_sanitizer_repro.cu
 *   compute-sanitizer --tool racecheck ./pdl_sanitizer_repro [ROUNDS (4)] [FEATURES (0..7)] */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <vector>
#include <cuda_runtime.h>

#include "cuda_check.cuh"

namespace {

constexpr int THREADS = 256, SMEM = 120 * 1024, STEPS = 32, DEP_THREADS = 128, IN_FLIGHT = 3;

__global__ void __launch_bounds__(THREADS) primary(float *out, int salt)
{
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    extern __shared__ float sm[];
    const int n = SMEM / 4, tid = threadIdx.x;
    for (int i = tid; i < n; i += THREADS)
        sm[i] = (float)((i + salt) & 7);
    __syncthreads();
    float acc = 0.0f;
    for (int s = 0; s < STEPS; s++) {
        acc += sm[(tid * 33 + s * 97) % n];
        __syncthreads();
        sm[(tid * 7 + s * 131) % n] = acc;
        __syncthreads();
    }
    if (tid == 0)
        out[blockIdx.x] = (float)(blockIdx.x + salt);
    (void)acc;
}

__global__ void __launch_bounds__(DEP_THREADS) dependent(const float *in, float *out, int n)
{
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    const int i = blockIdx.x * DEP_THREADS + threadIdx.x;
    if (i < n)
        out[i] = in[i] + 1.0f;
}

constexpr int GROUP = THREADS / 2, STAGES = 4, DEP_SMEM = 32 * 1024;

__device__ __forceinline__ void bar_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* Two groups of 128 threads, each working in its own half of shared memory, staged by cp.async
 * from `src`; the groups meet only through "full" barriers 1 + 4 g + s % 4 (group g syncs on
 * its own, the other group arrives on it a step ahead), each group's own work between barriers
 * 9 + g. A group leads by at most a step, so no barrier id is reused before its last phase. */
__global__ void __launch_bounds__(THREADS)
primary_features(float *out, const float4 *src, int salt, int feat)
{
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    extern __shared__ float sm[];
    const int tid = threadIdx.x, g = tid / GROUP, t = tid % GROUP;
    const int half = SMEM / 8; /* floats per group */
    float *mine = sm + g * half;
    const bool named = feat & 1, async = feat & 2;
    const auto full = [](int group, int step) { return 1 + STAGES * group + step % STAGES; };
    if (named)
        bar_arrive(full(g ^ 1, 0), THREADS);
    float acc = 0.0f;
    for (int s = 0; s < STEPS; s++) {
        if (named)
            bar_sync(full(g, s), THREADS);
        else
            __syncthreads();
        float *slot = mine + (s % 8) * GROUP * 4 + t * 4;
        const float4 *from = src + (blockIdx.x * STEPS + s) % 4096 * GROUP + t;
        if (async) {
            const unsigned dst = (unsigned)__cvta_generic_to_shared(slot);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(from));
            asm volatile("cp.async.commit_group;\n" ::);
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        } else {
            *reinterpret_cast<float4 *>(slot) = *from;
        }
        if (named)
            bar_sync(9 + g, GROUP);
        else
            __syncthreads();
        acc += mine[((s % 8) * GROUP * 4 + (t * 5 + s) % (GROUP * 4))];
        if (named)
            bar_sync(9 + g, GROUP);
        else
            __syncthreads();
        if (named && s + 1 < STEPS)
            bar_arrive(full(g ^ 1, s + 1), THREADS);
    }
    __syncthreads();
    if (tid == 0)
        out[blockIdx.x] = (float)(blockIdx.x + salt);
    (void)acc;
}

__global__ void __launch_bounds__(DEP_THREADS) dependent_features(const float *in, float *out, int n)
{
    extern __shared__ float reserved[]; /* as the block combine: reserved to spread the blocks */
    __shared__ float red[DEP_THREADS];
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    const int i = blockIdx.x * DEP_THREADS + threadIdx.x;
    red[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    if (i < n)
        out[i] = red[threadIdx.x] + 1.0f;
    (void)reserved;
}

struct arg {
    int id, rounds, primary_blocks, dep_blocks, pdl, features, errors;
    const float4 *src;
};

void *thread_main(void *p)
{
    arg *a = static_cast<arg *>(p);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int n = a->primary_blocks;
    float *mid[IN_FLIGHT], *res[IN_FLIGHT];
    for (int k = 0; k < IN_FLIGHT; k++) {
        CK(cudaMalloc(&mid[k], n * sizeof(float)));
        CK(cudaMalloc(&res[k], (size_t)a->dep_blocks * DEP_THREADS * sizeof(float)));
    }
    std::vector<float> h(n);
    for (int r = 0; r < a->rounds; r++) {
        for (int k = 0; k < IN_FLIGHT; k++) {
            const int salt = a->id * 1000 + r * 10 + k;
            cudaLaunchConfig_t c1 = {};
            c1.gridDim = dim3(n);
            c1.blockDim = dim3(THREADS);
            c1.dynamicSmemBytes = SMEM;
            c1.stream = st;
            if (a->features & 3)
                CK(cudaLaunchKernelEx(&c1, primary_features, mid[k], a->src, salt, a->features));
            else
                CK(cudaLaunchKernelEx(&c1, primary, mid[k], salt));
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cudaLaunchConfig_t c2 = {};
            c2.gridDim = dim3(a->dep_blocks);
            c2.blockDim = dim3(DEP_THREADS);
            c2.stream = st;
            c2.attrs = at;
            c2.numAttrs = a->pdl ? 1 : 0;
            if (a->features & 4) {
                c2.dynamicSmemBytes = DEP_SMEM;
                CK(cudaLaunchKernelEx(&c2, dependent_features, (const float *)mid[k], res[k], n));
            } else {
                CK(cudaLaunchKernelEx(&c2, dependent, (const float *)mid[k], res[k], n));
            }
        }
        for (int k = 0; k < IN_FLIGHT; k++) {
            CK(cudaMemcpyAsync(h.data(), res[k], n * sizeof(float), cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            const int salt = a->id * 1000 + r * 10 + k;
            for (int i = 0; i < n; i++)
                a->errors += h[i] != (float)(i + salt) + 1.0f;
        }
        void *tmp; /* the test's offload mode allocates and frees while other threads run */
        CK(cudaMalloc(&tmp, 1 << 20));
        CK(cudaMemsetAsync(tmp, 0, 1 << 20, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaFree(tmp));
    }
    for (int k = 0; k < IN_FLIGHT; k++) {
        CK(cudaFree(mid[k]));
        CK(cudaFree(res[k]));
    }
    CK(cudaStreamDestroy(st));
    return nullptr;
}

} // namespace

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 4;
    const char *e = getenv("PDL");
    const int pdl = !(e && strcmp(e, "0") == 0);
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int features = argc > 2 ? atoi(argv[2]) : 0;
    CK(cudaFuncSetAttribute(primary, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    CK(cudaFuncSetAttribute(primary_features, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    float4 *src = nullptr; /* the primary's cp.async source: 4096 x GROUP float4 */
    CK(cudaMalloc(&src, sizeof(float4) * 4096 * GROUP));
    CK(cudaMemset(src, 0, sizeof(float4) * 4096 * GROUP));
    const int nthreads = 4;
    arg a[nthreads];
    pthread_t th[nthreads];
    for (int i = 0; i < nthreads; i++) {
        /* three waves of one block per SM; the dependent grid 9 blocks per SM */
        a[i] = {i, rounds, 3 * sms, 9 * sms, pdl, features, 0, src};
        pthread_create(&th[i], nullptr, thread_main, &a[i]);
    }
    int errors = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], nullptr);
        errors += a[i].errors;
    }
    CK(cudaFree(src));
    printf("pdl %d, features %d, %d threads x %d rounds x %d pairs: %d wrong values\n", pdl,
           features, nthreads, rounds, IN_FLIGHT, errors);
    return errors != 0;
}
