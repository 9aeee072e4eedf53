/* What a cluster launch costs a kernel of one block per SM, as the sm_90a seesaw kernel is (256
 * threads, more than half an SM's shared memory): what any launch of it in clusters would pay
 * before its clusters gain anything (the seesaw's clusters of a split's row tiles were measured
 * and dropped: docs/PERFORMANCE.md, "B 16: a split's row tiles at the L2"). A cluster's blocks
 * share a GPC, so a size that does not divide a GPC's SMs leaves some idle; how many, the
 * occupancy API says and a launch shows. For each size 1-8:
 *   - the clusters the device holds at once (cudaOccupancyMaxActiveClusters), the SMs they take
 *     and those left idle;
 *   - a launch of that many clusters whose blocks wait for each other: the SMs they ran on, and
 *     whether all were resident together;
 *   - a grid of 4 x SMs blocks (the seesaw's four waves at B 16, H 16, q_len 9, 131k) that each
 *     spin SPIN_US microseconds, timed: the waves the idle SMs add, where the size divides it.
 * Standalone (no library):
 *   nvcc -O3 -arch=sm_90 -o cluster_placement bench/diag/cluster_placement.cu
 *   ./cluster_placement
 */
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "cuda_check.cuh"

constexpr int THREADS = 256;
constexpr double SPIN_US = 50.0;

__device__ unsigned sm_id()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

__device__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Block b records its SM. With `arrived`, it then waits (at most 10 ms) until every block of
 * the grid has arrived, and records whether they all did: resident together. Else it spins
 * `spin_ns`. */
__global__ void probe(int *sm, int *together, int *arrived, unsigned long long spin_ns)
{
    extern __shared__ char pad[]; /* the residency is set by its size */
    if (threadIdx.x != 0)
        return;
    sm[blockIdx.x] = (int)sm_id();
    const unsigned long long t0 = now_ns();
    if (arrived) {
        atomicAdd(arrived, 1);
        int n = 0;
        while ((n = atomicAdd(arrived, 0)) < (int)gridDim.x && now_ns() - t0 < 10000000ull) {
        }
        together[blockIdx.x] = n >= (int)gridDim.x;
    } else {
        while (now_ns() - t0 < spin_ns) {
        }
    }
    pad[0] = 0;
}

static cudaLaunchConfig_t config(int blocks, int cluster, int smem, cudaLaunchAttribute *attr)
{
    *attr = cudaLaunchAttribute{};
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)cluster;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

int main()
{
    int dev = 0, sms = 0, smem_sm = 0, optin = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("%s, %d SMs\n", prop.name, sms);
    if (prop.major < 9) {
        printf("clusters need cc 9.0 or later; this device is cc %d.%d\n", prop.major,
               prop.minor);
        return 0;
    }
    /* one block per SM: more than half the SM's shared memory */
    const int smem = optin < smem_sm / 2 + 1024 ? optin : smem_sm / 2 + 1024;
    CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int grid4 = 4 * sms;
    int *d_sm, *d_together, *d_arrived;
    CK(cudaMalloc(&d_sm, sizeof(int) * grid4));
    CK(cudaMalloc(&d_together, sizeof(int) * grid4));
    CK(cudaMalloc(&d_arrived, sizeof(int)));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    printf("size | clusters at once | SMs held | idle | resident together on | %d blocks of "
           "%.0f us\n",
           grid4, SPIN_US);
    float base_ms = 0.f;
    for (int c = 1; c <= 8; c++) {
        cudaLaunchAttribute attr;
        cudaLaunchConfig_t cfg = config(c, c, smem, &attr);
        int n = 0;
        CK(cudaOccupancyMaxActiveClusters(&n, probe, &cfg));
        printf("%4d | %16d | %8d | %4d |", c, n, n * c, sms - n * c);
        if (n < 1) {
            printf(" none\n");
            continue;
        }
        /* n clusters, each block waiting for all: where they ran, and whether together */
        cfg = config(n * c, c, smem, &attr);
        CK(cudaMemset(d_arrived, 0, sizeof(int)));
        CK(cudaLaunchKernelEx(&cfg, probe, d_sm, d_together, d_arrived, 0ull));
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        std::vector<int> sm(n * c), together(n * c);
        CK(cudaMemcpy(sm.data(), d_sm, sizeof(int) * n * c, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(together.data(), d_together, sizeof(int) * n * c,
                      cudaMemcpyDeviceToHost));
        int all = 1;
        for (int t : together)
            all &= t;
        printf(" %3zu SMs, %-9s |", std::set<int>(sm.begin(), sm.end()).size(),
               all ? "all" : "not all");
        if (grid4 % c) {
            printf(" (size does not divide the grid)\n");
            continue;
        }
        /* the four-wave grid, timed (a warm-up launch first) */
        cfg = config(grid4, c, smem, &attr);
        float ms = 0.f;
        for (int rep = 0; rep < 2; rep++) {
            CK(cudaEventRecord(e0));
            CK(cudaLaunchKernelEx(&cfg, probe, d_sm, d_together, (int *)nullptr,
                                  (unsigned long long)(SPIN_US * 1000.0)));
            CK(cudaGetLastError());
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
        }
        if (c == 1)
            base_ms = ms;
        printf(" %7.1f us, %.3fx size 1's\n", ms * 1000.f, base_ms > 0.f ? ms / base_ms : 0.f);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(d_sm));
    CK(cudaFree(d_together));
    CK(cudaFree(d_arrived));
    return 0;
}
