/* Where the work distributor puts a grid's blocks: each block records its SM (%smid), the
 * working ones spin long enough that all of them are resident together, and the table says how
 * many SMs and TPCs (SM ids 2k and 2k + 1 taken as one TPC) the working blocks took and the most
 * on one SM. Two cases of plans for limits, whose grid is fixed for every step while a step uses
 * only some of its blocks (docs/PERFORMANCE.md#engine-steps, session 20):
 *   - the split kernel's residency (256 threads, one block per SM): a small step's blocks at the
 *     head of a grid of 3 x SMs, against a grid of their own size, and on the even blocks
 *     (mlav_step_item_of_block). On the H200: 65 blocks leading a grid of 396 on 33 TPCs, a
 *     grid of 65 on 61, the even blocks on 65;
 *   - the step combine's (128 threads, k blocks per SM held by dynamic shared memory): a step's
 *     blocks at the head of a one-wave grid and at its end, against a grid of their own size
 *     at the residency the exact plan would reserve. On the H200: the leading 512 of 792 at 6
 *     per SM up to 6 on one SM, the trailing 512 up to 4.
 * Standalone (no library):
 *   nvcc -O3 -arch=sm_90 -o block_placement bench/diag/block_placement.cu && ./block_placement */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "cuda_check.cuh"

__device__ unsigned sm_id()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

/* Block b records its SM; a working block (work[b] != 0) then spins for `cycles`, so that every
 * working block of the grid is resident at once; the others exit, as blocks past a step do. */
__global__ void probe(const int *work, int *sm, long long cycles)
{
    extern __shared__ char pad[]; /* the residency is set by its size */
    if (threadIdx.x == 0)
        sm[blockIdx.x] = (int)sm_id();
    if (!work[blockIdx.x])
        return;
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0)
        pad[0] = 0;
}

static int *d_work, *d_sm;

/* Launch `grid` blocks of `threads` with `smem` bytes, the blocks in `work` working; print where
 * the working ones ran. */
static void place(const char *what, int grid, int threads, int smem, const std::vector<int> &work)
{
    std::vector<int> sm(grid);
    CK(cudaMemcpy(d_work, work.data(), sizeof(int) * grid, cudaMemcpyHostToDevice));
    probe<<<grid, threads, smem>>>(d_work, d_sm, 40000);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(sm.data(), d_sm, sizeof(int) * grid, cudaMemcpyDeviceToHost));
    std::map<int, int> per_sm, per_tpc;
    int n = 0;
    for (int b = 0; b < grid; b++)
        if (work[b]) {
            per_sm[sm[b]]++;
            per_tpc[sm[b] / 2]++;
            n++;
        }
    int most = 0;
    for (const auto &x : per_sm)
        most = std::max(most, x.second);
    printf("  %-44s grid %5d, %4d working: %3zu SMs, %3zu TPCs, at most %d on one SM\n", what,
           grid, n, per_sm.size(), per_tpc.size(), most);
}

static std::vector<int> first(int grid, int n)
{
    std::vector<int> w(grid, 0);
    std::fill(w.begin(), w.begin() + n, 1);
    return w;
}

static std::vector<int> last(int grid, int n)
{
    std::vector<int> w(grid, 0);
    std::fill(w.end() - n, w.end(), 1);
    return w;
}

static std::vector<int> even(int grid, int n)
{
    std::vector<int> w(grid, 0);
    for (int i = 0; i < n; i++)
        w[2 * i] = 1;
    return w;
}

/* Dynamic shared memory that holds a 128-thread block to k per SM. */
static int smem_for(int k, int smem_per_sm, int reserved)
{
    return (smem_per_sm / k - reserved) & ~127;
}

int main()
{
    int dev = 0, sms = 0, smem_sm = 0, reserved = 0, optin = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    const int most_grid = 8 * sms;
    CK(cudaMalloc(&d_work, sizeof(int) * most_grid));
    CK(cudaMalloc(&d_sm, sizeof(int) * most_grid));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("%s, %d SMs\n", prop.name, sms);

    /* one block per SM: more than half the SM's shared memory */
    const int one = std::min(optin, smem_sm / 2 + 1024);
    const int small = sms / 2 - 1, big = 3 * sms;
    printf("split kernel's residency (256 threads, 1 block per SM), a step of %d blocks:\n", small);
    place("a grid of the step's own size", small, 256, one, first(small, small));
    place("the step leading a grid of 3 x SMs", big, 256, one, first(big, small));
    place("the step on that grid's even blocks", big, 256, one, even(big, small));

    const int blocks = 4 * sms - 16;
    printf("step combine's residency (128 threads), a step of %d blocks:\n", blocks);
    char what[64];
    snprintf(what, sizeof what, "a grid of the step's own size, 4 per SM");
    place(what, blocks, 128, smem_for(4, smem_sm, reserved), first(blocks, blocks));
    for (int k = 6; k <= 8; k += 2) {
        const int smem = smem_for(k, smem_sm, reserved);
        snprintf(what, sizeof what, "leading a grid of %d x SMs, %d per SM", k, k);
        place(what, k * sms, 128, smem, first(k * sms, blocks));
        snprintf(what, sizeof what, "trailing a grid of %d x SMs, %d per SM", k, k);
        place(what, k * sms, 128, smem, last(k * sms, blocks));
    }
    CK(cudaFree(d_work));
    CK(cudaFree(d_sm));
    return 0;
}
