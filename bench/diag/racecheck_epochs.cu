/* Does compute-sanitizer's racecheck report a hazard across a barrier of the whole block when
 * the block's two warpgroups have passed different numbers of named barriers of their own
 * before it? Without this library: the pattern of the seesaw kernel's two reports
 * (docs/PERFORMANCE.md#hopper, "Racecheck and synccheck"), where every output matched the oracle:
 *   - the epilogue's row sums: each warpgroup stores its rows' sums, a bar.sync of all 256
 *     threads (named barrier 3), each thread loads the other warpgroup's sum; before it, WG0 has
 *     passed two barriers of its own a pair of tiles, WG1 one;
 *   - Q's power of two (BF16 q over an FP8 cache): thread 0 of WG0 stores it after WG0's own
 *     barriers (q_tile_to_f16), __syncthreads, every thread loads it; WG1 has passed none.
 * Here a block of 256 threads: warpgroup w passes EXTRA_w barriers of its own (bar.sync 1 + w,
 * 128), then both exchanges above, each checked. Run under racecheck with several pairs:
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o racecheck_epochs bench/diag/racecheck_epochs.cu
 *   compute-sanitizer --tool racecheck --error-exitcode 99 ./racecheck_epochs EXTRA0 EXTRA1
 * A hazard with EXTRA0 != EXTRA1 and none with EXTRA0 == EXTRA1 says that the tool pairs block
 * barriers by each thread's count of barriers passed, not by the barrier's identity. */
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "cuda_check.cuh"

namespace {

constexpr int THREADS = 256, WG = 128;

__device__ __forceinline__ void named_barrier(int id, int count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* out[0]: threads whose row-sum exchange read a wrong value; out[1]: the same for the value
 * thread 0 stored before __syncthreads; out[2]: wrong reads inside a warpgroup */
__global__ void __launch_bounds__(THREADS) exchange(int extra0, int extra1, int *out)
{
    __shared__ float sums[THREADS];
    __shared__ float unshift;
    __shared__ float scratch[2][WG];
    const int tid = threadIdx.x, w = tid / WG, wt = tid % WG;
    const int extra = w == 0 ? extra0 : extra1;
    /* the warpgroup's own barriers, each ordering a store and a load inside the warpgroup */
    for (int i = 0; i < extra; i++) {
        scratch[w][wt] = (float)(i + wt);
        named_barrier(1 + w, WG);
        if (scratch[w][(wt + 1) % WG] != (float)(i + (wt + 1) % WG))
            atomicAdd(&out[2], 1);
        named_barrier(1 + w, WG);
    }
    if (tid == 0)
        unshift = 0.25f + (float)blockIdx.x;
    __syncthreads();
    if (unshift != 0.25f + (float)blockIdx.x)
        atomicAdd(&out[1], 1);
    sums[tid] = (float)(3 * tid + 1);
    named_barrier(3, THREADS);
    const int other = (tid + WG) % THREADS;
    if (sums[other] != (float)(3 * other + 1))
        atomicAdd(&out[0], 1);
}

} // namespace

int main(int argc, char **argv)
{
    const int extra0 = argc > 1 ? atoi(argv[1]) : 1, extra1 = argc > 2 ? atoi(argv[2]) : 0;
    int *d = nullptr, h[3] = {0, 0, 0};
    CK(cudaMalloc(&d, sizeof h));
    CK(cudaMemset(d, 0, sizeof h));
    exchange<<<2, THREADS>>>(extra0, extra1, d);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    printf("racecheck_epochs: WG0 %d own barriers, WG1 %d: wrong reads: row sums %d, thread 0's "
           "value %d, inside a warpgroup %d\n",
           extra0, extra1, h[0], h[1], h[2]);
    return h[0] || h[1] || h[2] ? 1 : 0;
}
