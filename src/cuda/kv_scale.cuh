/* An FP8 cache's scale as every CUDA kernel reads and applies it (the flash, F32 and naive split
 * kernels, the combine): one read rule and one split of the scale into the parts that enter the
 * output separately. */
#ifndef MLAV_CUDA_KV_SCALE_CUH
#define MLAV_CUDA_KV_SCALE_CUH

#include "../core/problem.h"

namespace mlav {

/* The scale of this run: the device value when the run gave one (read by the kernel, so a
 * captured graph follows it), else the host value. One that is not finite and > 0 becomes NaN,
 * so that every row that sees a key comes out NaN (the header's rule: no host read of a device
 * scale). A cache that is not FP8 passes (NULL, 1). */
__device__ __forceinline__ float kv_scale_read(const float *ptr, float value)
{
    const float v = ptr ? __ldg(ptr) : value;
    return MLAV_KV_SCALE_OK(v) ? v : __int_as_float(0x7fc00000);
}

/* The scale on the output, kv_scale = mant x 2^pexp with mant in [1, 2): 1 / l takes the
 * mantissa, and the power of two pw = 2^pexp (2^-149 .. 2^127, exact) is applied on its own as
 * the output is stored, so that 1 / l x kv_scale never rounds as a subnormal (kv_scale 2^-126
 * over 2^17 keys kept 6 bits of it), nor does any value but the output itself: a split's
 * partial state is kept without pw, which the combine applies once (combine.cu). */
struct out_scale {
    float mant, pw;
    int pexp;
};
__device__ __forceinline__ out_scale out_scale_of(float kv_scale)
{
    int e;
    const float m = frexpf(kv_scale, &e);
    return {2.0f * m, ldexpf(1.0f, e - 1), e - 1};
}

/* The score factor of BF16 q over an FP8 cache, 2^shift x scale_log2 x kv_scale (unshift =
 * 2^shift from the block's Q conversion to F16, q_to_f16.cuh, shift in [-126, 113]), as the two
 * factors the scores are multiplied by: a power of two `a` and `b`, splitting the factor's
 * exponent in halves. Taken in the order 2^shift, then scale_log2 x kv_scale, a large shift with
 * a small kv_scale overflowed the scores to inf (and the softmax to NaN) where their true values
 * are small: q near BF16's top over a kv_scale of 2^-126 scores 2^33 x 2^113 before the scale.
 * With halves, neither product passes fp32's range unless the score itself does (|dot| < 2^35
 * with F16 operands), and a factor that underflows belongs to scores far below any softmax's
 * resolution. Per block, in the prologue. A bad kv_scale (NaN, from kv_scale_read) stays NaN. */
__device__ __forceinline__ void fp8_score_factors(float unshift, float scale_log2, float kv_scale,
                                                  float &a, float &b)
{
    int e;
    const float m = frexpf(kv_scale, &e); /* kv_scale = m 2^e, m in [0.5, 1) */
    const int E = ((int)(__float_as_uint(unshift) >> 23) - 127) + e, h = E / 2;
    a = ldexpf(1.0f, E - h);
    b = ldexpf(scale_log2 * m, h);
}

/* A 16-bit plan's partial state of a row and 128 columns over an FP8 cache: the scale's power of
 * two 2^pexp (out_scale) goes into part_scale as far as it stays a normal fp32 (the combine's
 * weights take it: a subnormal one kept a few bits at kv_scale 2^-126), the rest into the fp16
 * values, which have 29 binades of room below 2^15. `ex`: the biased exponent (>= 15) of the
 * largest |O / l| x mant, by which sc = 2^(141 - ex) / l (x mant) and ps = 2^(ex - 141) were
 * chosen; both are rewritten here. */
__device__ __forceinline__ void fp8_part_scale(int ex, int pexp, float &sc, float &ps)
{
    const int tx = ex - 141 + pexp, tc = min(max(tx, -126), 127);
    ps = __uint_as_float((uint32_t)(tc + 127) << 23);
    if (tx < tc)
        sc *= ldexpf(1.0f, tx - tc);
}

} // namespace mlav

#endif
