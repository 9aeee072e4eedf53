/* The keys kernel's epilogue: the slices met and the outputs written as write_output
 * does. */
#ifndef MLAV_CUDA_SM90_KEYS_EPILOGUE_CUH
#define MLAV_CUDA_SM90_KEYS_EPILOGUE_CUH

#include "../../reference_max.cuh"
#include "traits.cuh"

namespace mlav90 {
namespace keys {

/* The epilogue, after every copy landed and every warp's loop ended (the ring free): each row's
 * sum over its slice's keys, the slices' references and sums through shared memory, each slice's
 * O^T at the rows' common reference into [slice][row][dim] in the ring, then per row (warps
 * warp, warp + 8) the slices summed in slice order and written as write_output does: the final
 * output and lse, or the split's fp16 partial with part_scale (a warp a row, a lane 4 dims of
 * each 128-column block) and part_lse. */
template <typename T, int NR>
__device__ __forceinline__ void epilogue(const mlav_flash_params &p, const block_ctx &c,
                                         unsigned char *smem, float (&o)[GROUPS * 4][NR / 8][4],
                                         const float (&m_run)[NR / 8][2],
                                         float (&l_run)[NR / 8][2], const mlav::out_scale &osc,
                                         const lane_ctx &l)
{
    using SL = smem_k<NR>;
    constexpr int NTN = NR / 8;
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float s = l_run[n][e];
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            s += __shfl_xor_sync(0xffffffffu, s, 8);
            s += __shfl_xor_sync(0xffffffffu, s, 16);
            l_run[n][e] = s;
        }
    float *sm_m = reinterpret_cast<float *>(smem + SL::ML), *sm_l = sm_m + SLICES * NR;
    if (l.hf == 0 && l.g == 0) { /* both halves of a slice hold the same values */
#pragma unroll
        for (int n = 0; n < NTN; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                sm_m[l.sl * NR + 8 * n + 2 * l.t4 + e] = m_run[n][e];
                sm_l[l.sl * NR + 8 * n + 2 * l.t4 + e] = l_run[n][e];
            }
    }
    __syncthreads();
    float *os = reinterpret_cast<float *>(smem + SL::KV);
    const auto row_max = [&](int r) {
        float mx = sm_m[r];
#pragma unroll
        for (int s = 1; s < SLICES; s++)
            mx = fmaxf(mx, sm_m[s * NR + r]);
        return mx;
    };
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = 8 * n + 2 * l.t4 + e;
            const float fs = mlav::ref_factor(m_run[n][e], row_max(r));
            float *row = os + (l.sl * NR + r) * OSTR;
#pragma unroll
            for (int u = 0; u < GROUPS; u++)
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    row[keys_dim(l.hf, u, s, l.g)] = o[4 * u + s][n][e] * fs;
                    row[keys_dim(l.hf, u, s, l.g + 8)] = o[4 * u + s][n][e + 2] * fs;
                }
        }
    __syncthreads();
    using OTY = mlav::mma_type<T>;
    const bool final_out = c.slot < 0;
#pragma unroll
    for (int r = l.warp; r < NR; r += WARPS) {
        const int m = c.m0 + r;
        if (m >= c.M)
            continue; /* warp-uniform */
        const float mx = row_max(r);
        float sum = 0.0f;
#pragma unroll
        for (int s = 0; s < SLICES; s++)
            sum += sm_l[s * NR + r] * mlav::ref_factor(sm_m[s * NR + r], mx);
        float inv = sum > 0.0f ? 1.0f / sum : (sum == 0.0f ? 0.0f : sum); /* NaN stays NaN */
        inv = sum == 0.0f ? 0.0f : inv * osc.mant; /* the scale's power of two: osc.pw */
        if (l.lane == 0) {
            const float lse = mlav_finish_lse(mx * LN2F, sum);
            if (!final_out)
                p.part_lse[(size_t)c.slot * BM + r] = lse;
            else if (p.lse)
                p.lse[(size_t)c.q_start * p.H + m] = lse;
        }
#pragma unroll
        for (int cb = 0; cb < DL / MLAV_FLASH_SCALE_COLS; cb++) {
            const int d = MLAV_FLASH_SCALE_COLS * cb + 4 * l.lane;
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int s = 0; s < SLICES; s++) {
                const float4 x = *reinterpret_cast<const float4 *>(os + (s * NR + r) * OSTR + d);
                v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
            }
            if (final_out) {
                T *out = static_cast<T *>(p.out) + ((size_t)c.q_start * p.H + m) * DL + d;
                *reinterpret_cast<uint2 *>(out) =
                    make_uint2(OTY::pack(v[0] * inv * osc.pw, v[1] * inv * osc.pw),
                               OTY::pack(v[2] * inv * osc.pw, v[3] * inv * osc.pw));
            } else {
                uint32_t mb = 0;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    mb = max(mb, __float_as_uint(v[i]) & 0x7fffffffu);
                mb = __reduce_max_sync(0xffffffffu, mb);
                float sc, ps;
                partial_scale<true>(mb, inv, osc.pexp, sc, ps);
                if (l.lane == 0)
                    p.part_scale[((size_t)c.slot * BM + r) * (DL / MLAV_FLASH_SCALE_COLS) + cb] =
                        ps;
                __half *po =
                    static_cast<__half *>(p.part_o) + ((size_t)c.slot * BM + r) * DL + d;
                *reinterpret_cast<uint2 *>(po) =
                    make_uint2(mlav::mma_type<__half>::pack(v[0] * sc, v[1] * sc),
                               mlav::mma_type<__half>::pack(v[2] * sc, v[3] * sc));
            }
        }
    }
}

} // namespace keys
} // namespace mlav90

#endif
