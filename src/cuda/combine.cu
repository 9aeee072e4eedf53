/* The split combine: merge the partial states of one (request, row tile) with the shared merge
 * math (merge.h: the same mlav_merge_weights the CPU backend and mlav_merge_states use). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/merge.h"
#include "flash.h"

namespace {

constexpr int DL = MLAV_FLASH_DL, BM = MLAV_FLASH_BLOCK_M;
constexpr int THREADS = 128;
constexpr int MAX_SPLITS = 64; /* the plan caps splits per request at this */

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

/* One block per combine item; warp w merges rows w, w + 4, ...; lane l owns columns 4l + 128k. */
template <typename T> __global__ void __launch_bounds__(THREADS) combine_kernel(const mlav_flash_params p)
{
    const mlav_combine_item it = p.combine[blockIdx.x];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int q_start = it.q_start, M = it.rows;
    const int n = it.nsplit;
    for (int r = warp; r < BM; r += THREADS / 32) {
        const int m = it.mtile * BM + r;
        if (m >= M)
            break;
        float lse_s[MAX_SPLITS], w[MAX_SPLITS];
        for (int s = 0; s < n; s++)
            lse_s[s] = p.part_lse[(size_t)(it.slot0 + s * it.slot_stride) * BM + r];
        const float lse = mlav_merge_weights(n, lse_s, w);
        T *out = static_cast<T *>(p.out) + ((size_t)q_start * p.H + m) * DL;
        for (int d = lane * 4; d < DL; d += 128) {
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int s = 0; s < n; s++) {
                if (w[s] == 0.0f) /* an empty split: weight 0, and 0 * its state is not read */
                    continue;
                const float4 v = *reinterpret_cast<const float4 *>(
                    p.part_o + ((size_t)(it.slot0 + s * it.slot_stride) * BM + r) * DL + d);
                acc.x += w[s] * v.x;
                acc.y += w[s] * v.y;
                acc.z += w[s] * v.z;
                acc.w += w[s] * v.w;
            }
            out[d] = from_float<T>(acc.x);
            out[d + 1] = from_float<T>(acc.y);
            out[d + 2] = from_float<T>(acc.z);
            out[d + 3] = from_float<T>(acc.w);
        }
        if (p.lse && lane == 0)
            p.lse[(size_t)q_start * p.H + m] = lse;
    }
}

} // namespace

mlav_status mlav_combine_launch(mlav_dtype dtype, const mlav_flash_params *fp, cudaStream_t stream)
{
    if (dtype == MLAV_DTYPE_BF16)
        combine_kernel<__nv_bfloat16><<<fp->n_combine, THREADS, 0, stream>>>(*fp);
    else if (dtype == MLAV_DTYPE_F32)
        combine_kernel<float><<<fp->n_combine, THREADS, 0, stream>>>(*fp);
    else
        combine_kernel<__half><<<fp->n_combine, THREADS, 0, stream>>>(*fp);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
