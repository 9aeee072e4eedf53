/* Conversions between fp32 and the element types (F32, BF16, F16), written once for every kernel
 * that reads or writes them: the combine and naive kernels' outputs, the bench's input fill.
 * from_float rounds to nearest even (__float2bfloat16 and __float2half are the _rn forms). */
#ifndef MLAV_CUDA_CONVERT_CUH
#define MLAV_CUDA_CONVERT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

} // namespace mlav

#endif
