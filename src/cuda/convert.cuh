/* Conversions between fp32 and the element types (F32, BF16, F16), written once for every kernel
 * that reads or writes them: the combine and naive kernels' outputs, the bench's input fill.
 * from_float rounds to nearest even (__float2bfloat16 and __float2half are the _rn forms). And
 * the FP8 KV cache's e4m3 bytes to F16 (the flash kernel's K and V fragments). */
#ifndef MLAV_CUDA_CONVERT_CUH
#define MLAV_CUDA_CONVERT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace mlav {

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_float<__half>(float v)
{
    return __float2half_rn(v);
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

/* Two e4m3fn bytes (element 0 in the low byte) as a packed F16 pair (element 0 in the low half).
 * Exact: every e4m3 value, subnormals included, is a normal F16, and NaN stays NaN.
 * One instruction from sm_89 on (cvt.rn.f16x2.e4m3x2; on sm_90 an F2FP unpack), emulated by
 * cuda_fp8.h on sm_80. The flash kernel's FP8 instances convert K and V fragments with it. */
__device__ __forceinline__ __half2_raw e4m3x2_to_half2(uint16_t two)
{
    return __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
}

/* Four e4m3fn bytes as two packed F16 pairs: bytes 0, 1 into *lo, bytes 2, 3 into *hi. From sm_89
 * on the halves go to the conversions as the word's two 16-bit halves (mov.b32 {lo, hi}), so no
 * shift extracts the upper pair: through the 16-bit argument of __nv_cvt_fp8x2_to_halfraw2, a
 * (w >> 16) stayed a SHF before each upper conversion (sm_90 SASS). */
__device__ __forceinline__ void e4m3x4_to_half2x2(uint32_t w, uint32_t &lo, uint32_t &hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
        " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
#else
    const __half2_raw a = e4m3x2_to_half2((uint16_t)(w & 0xffffu));
    const __half2_raw b = e4m3x2_to_half2((uint16_t)(w >> 16));
    lo = (uint32_t)a.x | ((uint32_t)a.y << 16);
    hi = (uint32_t)b.x | ((uint32_t)b.y << 16);
#endif
}

/* A one-byte cache element type's four bytes as two packed F16 pairs, as the flash kernel's K
 * and V fragments convert them (flash/s_tile.cuh, flash/pv_tile.cuh): one specialization per
 * KV element type, named by the family's traits (flash/traits.cuh). */
template <typename KV> struct kv_bytes;
template <> struct kv_bytes<__nv_fp8_e4m3> {
    static __device__ __forceinline__ void to_half2x2(uint32_t w, uint32_t &lo, uint32_t &hi)
    {
        e4m3x4_to_half2x2(w, lo, hi);
    }
};

} // namespace mlav

#endif
