/* Register-level helpers of the keys kernel: movmatrix's 8x8 transpose and the zeroing of
 * non-finite F16 halves (its shared loads by address: lds16, lds8, lds4 in ../gather.cuh). */
#ifndef MLAV_CUDA_SM90_KEYS_FRAGMENTS_CUH
#define MLAV_CUDA_SM90_KEYS_FRAGMENTS_CUH

#include "traits.cuh"

namespace mlav90 {
namespace keys {

/* The transpose of an 8x8 matrix of halves held in the C-pair layout (lane g, t: row g, cols
 * 2 t, 2 t + 1), in the same layout: how K's fragments become V^T's and S^T's become P^T's. */
__device__ __forceinline__ uint32_t movtrans(uint32_t a)
{
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
    return d;
}

/* Zero the Inf and NaN halves of an F16 pair (exponent all ones). */
__device__ __forceinline__ uint32_t finite_or_zero(uint32_t w)
{
    const uint32_t lo = (w & 0x7c00u) == 0x7c00u ? 0xffff0000u : 0xffffffffu;
    const uint32_t hi = (w & 0x7c000000u) == 0x7c000000u ? 0x0000ffffu : 0xffffffffu;
    return w & lo & hi;
}

} // namespace keys
} // namespace mlav90

#endif
