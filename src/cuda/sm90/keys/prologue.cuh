/* The keys kernel's prologue: the block's rows of q into shared memory as F16. */
#ifndef MLAV_CUDA_SM90_KEYS_PROLOGUE_CUH
#define MLAV_CUDA_SM90_KEYS_PROLOGUE_CUH

#include "traits.cuh"

namespace mlav90 {
namespace keys {

/* The block's NR rows of q (rows past M zero) into Q as F16: BF16 q by q_to_f16.cuh's rule (the
 * largest finite |q| of the block in [2^14, 2^15)); returns 2^shift (1 for F16 q). */
template <typename T, int NR>
__device__ __forceinline__ float load_q_f16(const mlav_flash_params &p, const block_ctx &c,
                                            unsigned char *smem, uint32_t *red, int tid)
{
    constexpr int CHUNKS = NR * (W / 8), PER = (CHUNKS + THREADS - 1) / THREADS;
    constexpr bool CONV = !std::is_same<T, __half>::value;
    const T *qg = static_cast<const T *>(p.q) + ((size_t)c.q_start * p.H + c.m0) * W;
    uint4 v[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int f = tid + THREADS * i, r = f / (W / 8);
        v[i] = make_uint4(0, 0, 0, 0);
        if (f < CHUNKS && c.m0 + r < c.M)
            v[i] = *reinterpret_cast<const uint4 *>(qg + (size_t)f * 8);
    }
    float down = 1.0f, unshift = 1.0f;
    if constexpr (CONV) {
        const auto fold = [&](bool finite) {
            uint32_t m2 = 0;
#pragma unroll
            for (int i = 0; i < PER; i++) {
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].x, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].y, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].z, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].w, finite);
            }
            return m2;
        };
        const uint32_t mb = mlav::q_block_absmax<WARPS>(
            fold, [] { __syncthreads(); }, red, tid >> 5, tid & 31);
        const int shift = mlav::q_f16_shift(mb);
        down = mlav::q_f16_down(shift);
        unshift = mlav::q_f16_unshift(shift);
    }
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int f = tid + THREADS * i, r = f / (W / 8), k = f % (W / 8);
        if (f < CHUNKS) {
            uint4 h = v[i];
            if constexpr (CONV)
                h = make_uint4(mlav::q_bf16x2_to_f16x2(v[i].x, down),
                               mlav::q_bf16x2_to_f16x2(v[i].y, down),
                               mlav::q_bf16x2_to_f16x2(v[i].z, down),
                               mlav::q_bf16x2_to_f16x2(v[i].w, down));
            /* rows QS halves apart (8 mod 16 bytes): two 8-byte stores */
            uint2 *d =
                reinterpret_cast<uint2 *>(smem + smem_k<NR>::Q + ((size_t)r * QS + 8 * k) * 2);
            d[0] = make_uint2(h.x, h.y);
            d[1] = make_uint2(h.z, h.w);
        }
    }
    return unshift;
}

} // namespace keys
} // namespace mlav90

#endif
