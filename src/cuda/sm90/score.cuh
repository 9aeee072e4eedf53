/* The factors that take an sm_90a kernel's raw scores (Q K^T) to log2 units, shared by the
 * seesaw (seesaw/) and keys (keys/) kernels. */
#ifndef MLAV_CUDA_SM90_SCORE_CUH
#define MLAV_CUDA_SM90_SCORE_CUH

namespace mlav90 {

/* The factors a raw score is multiplied by (kernel.cuh's consume): scale_log2, or over an FP8
 * cache scale_log2 x kv_scale, with BF16 q as fp8_score_factors' two (qa: Q's power of two
 * back). Where one factor, sf, scales the scores (RAW) they stay raw through the mask and the
 * rows' maxima, which are then scaled (the same values: rounding is monotone), and exponentiate
 * applies sf in its one FFMA a score; sf is then > 0 (the plan's kernel rule) or NaN (an FP8
 * scale that is not finite and > 0 reads as NaN), or 0 where an FP8 scale underflowed it. BF16
 * q's two factors scale each score before the maxima, and exponentiate's factor is 1. */
template <bool Q_TO_F16> struct score_ctx {
    static constexpr bool RAW = !Q_TO_F16;
    float qa, sf;
    float k; /* the factor exponentiate applies: sf where RAW, else 1 */
    /* what a score is multiplied by before the mask and the maxima */
    __device__ __forceinline__ float operator()(float v) const
    {
        if constexpr (RAW)
            return v;
        else
            return v * qa * sf;
    }
    /* k, once qa and sf are set. Over an FP8 cache, a factor that underflowed to 0 becomes
     * the least subnormal: k x score then rounds every score to 0 or within an ulp of it, exp2
     * of which is 1, as the scaled path's zeros give, where 0 x a masked key's -inf would be
     * NaN. (A 16-bit cache's factor is the plan's scale_log2, > 0: the plan's rule.) */
    template <bool FP8> __device__ __forceinline__ void set_factor()
    {
        if constexpr (!RAW)
            k = 1.0f;
        else if constexpr (FP8)
            k = sf == 0.0f ? 0x1p-149f : sf;
        else
            k = sf;
    }
};

} // namespace mlav90

#endif
