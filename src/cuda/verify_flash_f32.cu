/* The F32 flash path: CUDA-core FMA in fp32 on the flash schedule (same split items, same
 * partial states, same combine), so F32 bundles check to 1e-5 on the `cuda` backend. It exists
 * for exactness, not speed: tensor cores have no fp32 mode that meets 1e-5 without split-TF32
 * tricks, and production KV caches are BF16. One warp per row; lane l owns columns l + 32k.
 * An FP8 cache (the FP8 instance) is decoded exactly (mlav_e4m3_to_f32) and its scale applied
 * in fp32 to the scores and the output, as the 16-bit kernel does. */
#include <math.h>

#include "../common/dtype.h"
#include "../common/merge.h"
#include "../common/shard.h"
#include "../common/visibility.h"
#include "flash.h"
#include "kv_scale.cuh"
#include "page_row.cuh"
#include "mma.cuh"

namespace {

constexpr int DL = MLAV_FLASH_DL, W = MLAV_FLASH_W, BM = MLAV_FLASH_BLOCK_M;
constexpr int THREADS = 256;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Element k of a KV row: fp32, or an e4m3 byte (unscaled). */
__device__ __forceinline__ float kv_elem(const float *row, int k)
{
    return row[k];
}
__device__ __forceinline__ float kv_elem(const uint8_t *row, int k)
{
    return mlav_e4m3_to_f32(row[k]);
}

template <typename KV>
__global__ void __launch_bounds__(THREADS) flash_f32_kernel(const mlav_flash_params p)
{
    constexpr bool FP8 = sizeof(KV) == 1;
    mlav::launch_dependents(); /* the combine may launch now; it waits for this grid's end */
    /* a plan for limits (step_owner set): only the items of a step header this plan wrote, and
     * only those within its limits (flash.h), whatever the workspace holds */
    if (p.step_owner) {
        const mlav_step_header *h = reinterpret_cast<const mlav_step_header *>(p.items) - 1;
        if (*reinterpret_cast<const unsigned long long *>(&h->owner) != p.step_owner ||
            (int32_t)blockIdx.x >= h->n_items)
            return;
    }
    const mlav_split_item item = p.items[blockIdx.x];
    if (item.b < 0 || (p.step_owner && !mlav_step_item_fits(item, p)))
        return; /* past the schedule of a plan for limits (schedule_step.h); the F32 variant is
                   for exactness, so one check serves both kinds of plan */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int b = item.b;
    const int q_start = item.q_start, prefix = item.prefix;
    const int M = item.q_len * p.H;
    const KV *kv = static_cast<const KV *>(p.kv);
    const float kv_scale = FP8 ? mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale) : 1.0f;
    /* FP8: the output takes 1 / l x the scale's mantissa, then its power of two on its own
     * (kv_scale.cuh); a split's partial state without the power, which the combine applies */
    const mlav::out_scale kv_out =
        FP8 ? mlav::out_scale_of(kv_scale) : mlav::out_scale{1.0f, 1.0f, 0};
    const float kv_mant = kv_out.mant, kv_pow = kv_out.pw;
    const int32_t *ptab = mlav_page_row_dev(p.page_table, p.page_table_rows,
                                            p.page_table_num_rows, p.max_pages, p.bad_pages, b);

    for (int r = warp; r < BM; r += THREADS / 32) {
        const int m = item.mtile * BM + r;
        if (m >= M)
            break;
        const int i = m / p.H;
        const float *qr = static_cast<const float *>(p.q) + ((size_t)q_start * p.H + m) * W;
        float qv[W / 32], acc[DL / 32];
#pragma unroll
        for (int k = 0; k < W / 32; k++)
            qv[k] = qr[lane + 32 * k];
        /* FP8: the row's q times 2^-s so that its largest finite |q| is below 2^100, where a dot
         * product with e4m3 values (|x| <= 448, W terms) stays finite; 2^s goes back into the
         * score factor, split into halves with the scales' (fp8_factors): huge q over a tiny
         * kv_scale has finite scores that the unshifted dot product overflowed */
        float f1 = 1.0f, f2 = p.scale_log2 * kv_scale;
        if constexpr (FP8) {
            float mq = 0.0f;
#pragma unroll
            for (int k = 0; k < W / 32; k++)
                mq = fabsf(qv[k]) <= 3.402823466e38f ? fmaxf(mq, fabsf(qv[k])) : mq;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                mq = fmaxf(mq, __shfl_xor_sync(0xffffffffu, mq, o));
            int eq;
            frexpf(mq, &eq);
            const int sh = eq > 100 ? eq - 100 : 0;
            if (sh > 0) {
                const float down = ldexpf(1.0f, -sh);
#pragma unroll
                for (int k = 0; k < W / 32; k++)
                    qv[k] *= down;
            }
            int e;
            const float m = frexpf(kv_scale, &e);
            const int E = sh + e, h = E / 2;
            f1 = ldexpf(1.0f, E - h);
            f2 = ldexpf(p.scale_log2 * m, h);
        }
#pragma unroll
        for (int k = 0; k < DL / 32; k++)
            acc[k] = 0.0f;
        float run_max = -INFINITY, run_sum = 0.0f;
        for (int j = item.kv_begin; j < item.kv_end; j++) {
            /* j: the rank's row with a KV shard, judged at its global row */
            if (!mlav_kv_visible(p.tree_mask, p.mask_words, q_start + i, i, prefix,
                                 mlav_shard_global(p.shard, j)))
                continue;
            const int32_t page = ptab[j / p.page_size];
            const bool bad = page < 0 || page >= p.num_pages; /* reads as NaN, never OOB */
            const KV *row =
                kv + ((size_t)(bad ? 0 : page) * p.page_size + (size_t)(j % p.page_size)) * W;
            float dot = 0.0f;
            if (!bad) {
#pragma unroll
                for (int k = 0; k < W / 32; k++)
                    dot = fmaf(qv[k], kv_elem(row, lane + 32 * k), dot);
            }
            const float s = bad ? NAN : warp_sum(dot) * f1 * f2;
            const float new_max = fmaxf(run_max, s);
            const float alpha = run_max == -INFINITY ? 0.0f : exp2f(run_max - new_max);
            const float w = exp2f(s - (new_max == -INFINITY ? 0.0f : new_max));
            run_sum = run_sum * alpha + w;
            run_max = new_max;
#pragma unroll
            for (int k = 0; k < DL / 32; k++)
                acc[k] = acc[k] * alpha + w * (bad ? NAN : kv_elem(row, lane + 32 * k));
        }
        const float lse = mlav_finish_lse(run_max * LN2, run_sum);
        const float inv =
            run_sum > 0.0f ? kv_mant / run_sum : (run_sum == 0.0f ? 0.0f : run_sum * kv_mant);
        if (item.slot < 0) {
            float *out = static_cast<float *>(p.out) + ((size_t)q_start * p.H + m) * DL;
#pragma unroll
            for (int k = 0; k < DL / 32; k++)
                out[lane + 32 * k] = acc[k] * inv * kv_pow;
            if (p.lse && lane == 0)
                p.lse[(size_t)q_start * p.H + m] = lse;
        } else {
            float *po = static_cast<float *>(p.part_o) + ((size_t)item.slot * BM + r) * DL;
#pragma unroll
            for (int k = 0; k < DL / 32; k++)
                po[lane + 32 * k] = acc[k] * inv;
            if (lane == 0)
                p.part_lse[(size_t)item.slot * BM + r] = lse;
        }
    }
}

} // namespace

mlav_status mlav_flash_f32_prepare(int kv_fp8, const mlav_cuda_device *dev, int *blocks_per_sm)
{
    const void *f = kv_fp8 ? reinterpret_cast<const void *>(&flash_f32_kernel<uint8_t>)
                           : reinterpret_cast<const void *>(&flash_f32_kernel<float>);
    mlav_status s = mlav_cuda_prepare_kernel(f, 0, dev, "flash_verify_f32");
    if (s != MLAV_OK)
        return s;
    MLAV_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, f, THREADS, 0));
    return MLAV_OK;
}

mlav_status mlav_flash_f32_launch(const mlav_flash_params *fp, int kv_fp8, cudaStream_t stream)
{
    if (kv_fp8)
        flash_f32_kernel<uint8_t><<<fp->n_items, THREADS, 0, stream>>>(*fp);
    else
        flash_f32_kernel<float><<<fp->n_items, THREADS, 0, stream>>>(*fp);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
