/* The split combine: merge the partial states of one (request, row tile) with the shared merge
 * math (merge.h: the same mlav_merge_weights the CPU backend and mlav_merge_states use). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/merge.h"
#include "flash.h"

namespace {

constexpr int DL = MLAV_FLASH_DL, BM = MLAV_FLASH_BLOCK_M;
constexpr int THREADS = 128;
constexpr int MAX_SPLITS = MLAV_FLASH_MAX_SPLITS;

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_float(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_float(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ float from_float(float v)
{
    return v;
}

/* One block per (combine item, row): 128 threads x 4 columns cover the 512 output columns.
 * The weights are computed once per row into shared memory; each thread's loop over the
 * splits is unrolled so several partial loads are in flight (a serial chain of dependent loads,
 * one block per row tile, made the first version slower than the whole split kernel). */
template <typename T>
__global__ void __launch_bounds__(THREADS) combine_kernel(const mlav_flash_params p)
{
    static_assert(THREADS * 4 == DL, "one float4 of columns per thread");
    __shared__ float s_lse[MAX_SPLITS], s_w[MAX_SPLITS], s_merged;
    const mlav_combine_item it = p.combine[blockIdx.x];
    const int r = blockIdx.y, m = it.mtile * BM + r;
    if (m >= it.rows)
        return; /* uniform over the block */
    const int n = it.nsplit;
    for (int s = threadIdx.x; s < n; s += THREADS)
        s_lse[s] = p.part_lse[(size_t)(it.slot0 + s * it.slot_stride) * BM + r];
    __syncthreads();
    if (threadIdx.x == 0)
        s_merged = mlav_merge_weights(n, s_lse, s_w);
    __syncthreads();

    const int d = threadIdx.x * 4;
    const float *part = p.part_o + ((size_t)it.slot0 * BM + r) * DL + d;
    const size_t stride = (size_t)it.slot_stride * BM * DL;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
    for (int s = 0; s < n; s++) {
        /* an empty split holds o = 0 with weight 0, so no branch is needed here */
        const float4 v = *reinterpret_cast<const float4 *>(part + s * stride);
        const float w = s_w[s];
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
    }
    T *out = static_cast<T *>(p.out) + ((size_t)it.q_start * p.H + m) * DL + d;
    out[0] = from_float<T>(acc.x);
    out[1] = from_float<T>(acc.y);
    out[2] = from_float<T>(acc.z);
    out[3] = from_float<T>(acc.w);
    if (p.lse && threadIdx.x == 0)
        p.lse[(size_t)it.q_start * p.H + m] = s_merged;
}

} // namespace

mlav_status mlav_combine_launch(mlav_dtype dtype, const mlav_flash_params *fp, cudaStream_t stream)
{
    const dim3 grid((unsigned)fp->n_combine, BM);
    if (dtype == MLAV_DTYPE_BF16)
        combine_kernel<__nv_bfloat16><<<grid, THREADS, 0, stream>>>(*fp);
    else if (dtype == MLAV_DTYPE_F32)
        combine_kernel<float><<<grid, THREADS, 0, stream>>>(*fp);
    else
        combine_kernel<__half><<<grid, THREADS, 0, stream>>>(*fp);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
