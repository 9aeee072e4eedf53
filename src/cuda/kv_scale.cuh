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

} // namespace mlav

#endif
