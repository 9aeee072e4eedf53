/* BF16 q over an FP8 cache: the rule by which a block's Q goes to F16 for the F16 tensor-core
 * products with the cache's e4m3 values (both kernel families: flash/prologue.cuh on the legal
 * kernel's Q fragments, sm90/gather.cuh on the Hopper kernel's shared Q tile). Q is multiplied by
 * 2^-shift, so that the block's largest finite |q| lands in [2^14, 2^15) (F16 ends at 65504, BF16
 * at 3.4e38), and the scores take 2^shift back (kv_scale.cuh, fp8_score_factors). Exact for every
 * element down to 2^-28 of the block's largest (a normal F16 holds BF16's 8 significant bits);
 * smaller ones round as F16 subnormals, far below the rounding of the dot product they enter. */
#ifndef MLAV_CUDA_Q_TO_F16_CUH
#define MLAV_CUDA_Q_TO_F16_CUH

#include <cuda_fp16.h>
#include <stdint.h>

namespace mlav {

/* The running largest |x| of two BF16 halves `m` (as bits: |x| orders like its bits) folded with
 * the two BF16 values of `w`, per 16-bit half; `finite`: an Inf or NaN half counts as 0. */
__device__ __forceinline__ uint32_t q_bf16_absmax_fold(uint32_t m, uint32_t w, bool finite)
{
    w &= 0x7fff7fffu;
    if (finite)
        w &= __vcmpltu2(w, 0x7f807f80u);
    return __vmaxu2(m, w);
}

/* The block's largest |x| as BF16 bits, for q_f16_shift: `fold(finite)` gives this thread's two
 * running maxima (q_bf16_absmax_fold over its words), met over the warp and then over the block's
 * WARPS warps through `red` (2 x WARPS words: red[WARPS x round + warp]) around `meet()`, the
 * block's barrier. A block whose q holds Inf or NaN (the first round's maximum, block-uniform)
 * takes a second round over its finite values only. */
template <int WARPS, typename Fold, typename Meet>
__device__ __forceinline__ uint32_t q_block_absmax(const Fold &fold, const Meet &meet,
                                                   uint32_t *red, int warp, int lane)
{
    const auto round_max = [&](bool finite, int round) {
        const uint32_t m2 = fold(finite);
        uint32_t m = __reduce_max_sync(0xffffffffu, max(m2 & 0xffffu, m2 >> 16));
        if (lane == 0)
            red[WARPS * round + warp] = m;
        meet();
#pragma unroll
        for (int w = 0; w < WARPS; w++)
            m = max(m, red[WARPS * round + w]);
        return m;
    };
    const uint32_t mb = round_max(false, 0);
    return mb >= 0x7f80u ? round_max(true, 1) : mb;
}

/* The shift for a block whose largest |x| has the BF16 bits `mb` (Inf or NaN: the caller takes
 * the largest finite one instead): |x| < 2^(e - 126) for BF16 biased exponent e, so 2^-(e - 141)
 * puts the largest in [2^14, 2^15); at least -126 so that 2^shift and 2^-shift stay normal. */
__device__ __forceinline__ int q_f16_shift(uint32_t mb)
{
    return max((int)(mb >> 7) - 141, -126);
}

/* 2^-shift, the factor on Q; and 2^shift, the one the scores take back. */
__device__ __forceinline__ float q_f16_down(int shift)
{
    return __uint_as_float((uint32_t)(127 - shift) << 23);
}
__device__ __forceinline__ float q_f16_unshift(int shift)
{
    return __uint_as_float((uint32_t)(127 + shift) << 23);
}

/* Two BF16 values (element 0 in the low half) to two F16, times `down`. */
__device__ __forceinline__ uint32_t q_bf16x2_to_f16x2(uint32_t w, float down)
{
    const __half2 h =
        __floats2half2_rn(__uint_as_float(w << 16) * down, __uint_as_float(w & 0xffff0000u) * down);
    return *reinterpret_cast<const uint32_t *>(&h);
}

} // namespace mlav

#endif
