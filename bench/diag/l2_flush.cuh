/* The L2 flush of the engine-step diagnostics (step_costs.cu), as the benchmark
 * flushes (bench/program/bench_cuda.cu): a read of twice the L2, which leaves clean lines, so no
 * write-back lands in what is timed after it. */
#ifndef MLAV_DIAG_L2_FLUSH_CUH
#define MLAV_DIAG_L2_FLUSH_CUH

#include <cuda_runtime.h>

__global__ void l2_flush_kernel(const int4 *p, size_t n, int *sink)
{
    int acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc ^= p[i].x ^ p[i].w;
    if (acc == 0x7fffffff) /* never: keeps the reads */
        *sink = acc;
}

struct l2_flusher {
    int4 *buf = nullptr;
    size_t n = 0;
    int *sink = nullptr;

    /* for the device's L2 (cudaGetDeviceProperties' l2CacheSize); false on a CUDA error */
    bool make(size_t l2_bytes)
    {
        n = 2 * l2_bytes / sizeof(int4);
        return cudaMalloc(&buf, n * sizeof(int4)) == cudaSuccess &&
               cudaMemset(buf, 1, n * sizeof(int4)) == cudaSuccess &&
               cudaMalloc(&sink, sizeof(int)) == cudaSuccess;
    }
    void run(cudaStream_t st) const
    {
        l2_flush_kernel<<<264, 512, 0, st>>>(buf, n, sink);
    }
    void release()
    {
        cudaFree(buf);
        cudaFree(sink);
    }
};

#endif
