/* The prologue stage: the block's Q, once per split. Rope Q (64 rows x DR) goes to shared
 * memory for the whole split; latent Q (64 rows x DL) is staged in shared memory and read into
 * each warp's A fragments, which stay in registers for the whole split. BF16 q over an FP8 cache
 * is converted to F16 here (q_to_f16), and its power of two folded into the score factors. */
#ifndef MLAV_CUDA_FLASH_PROLOGUE_CUH
#define MLAV_CUDA_FLASH_PROLOGUE_CUH

#include "../mma.cuh"
#include "../q_to_f16.cuh"
#include "traits.cuh"

namespace mlav {
namespace flash {

/* Issue the cp.async copies of the block's Q (rows past the request zero-filled): rope Q into
 * `sQ` ([BM][QP_STRIDE]), then latent Q into the staging area `qs` ([BM][QS_STRIDE]). Q rows of a
 * request are contiguous: (token, head) folds to row q_start * H + m, and qg is row q_start * H.
 * Latent Q goes through shared memory by 16 coalesced 16-byte copies per thread, then into the A
 * fragments with 4-byte shared loads (q_fragments). Loaded straight from global memory it took
 * 64 four-byte loads per thread, each touching 8 rows, and the first S MMA waited on them. Read
 * back by ldmatrix instead of 4-byte loads, the prologue was as fast but the loop slower:
 * ldmatrix writes aligned register quads, and ptxas then allocated the loop differently
 * (docs/PERFORMANCE.md#ptxas). The staging area is KV buffers 1-3 and the S exchange area (FP8:
 * and the P tiles and beyond, traits::smem), contiguous and unused until tile 1's gather and the
 * first exchange; tile 0's gather goes to buffer 0 meanwhile, tile 1's after the reads. */
template <typename Tr>
__device__ __forceinline__ void load_q_async(typename Tr::q_type *sQ, typename Tr::q_type *qs,
                                             const typename Tr::q_type *qg, int m0, int M, int tid)
{
    using SL = typename Tr::smem;
    constexpr int DL = Tr::DL, DR = Tr::DR, W = Tr::W, NT = Tr::NT;
#pragma unroll
    for (int c = 0; c < Tr::QPE_CHUNKS / NT; c++) {
        const int idx = tid + c * NT, r = idx / (DR / 8), ch = idx % (DR / 8);
        const bool ok = m0 + r < M;
        mlav::cp_async16(sQ + r * SL::QP_STRIDE + ch * 8,
                         qg + (ok ? (size_t)(m0 + r) * W + DL + ch * 8 : 0), ok ? 16 : 0);
    }
    constexpr int QS_STRIDE = SL::QS_STRIDE;
#pragma unroll
    for (int c = 0; c < Tr::QL_CHUNKS / NT; c++) {
        const int idx = tid + c * NT, r = idx / (DL / 8), ch = idx % (DL / 8);
        const bool ok = m0 + r < M;
        mlav::cp_async16(qs + r * QS_STRIDE + ch * 8,
                         qg + (ok ? (size_t)(m0 + r) * W + ch * 8 : 0), ok ? 16 : 0);
    }
}

/* This warp's latent A fragments from the staging area, once the copies have landed. qf[i] is
 * m-tile i ^ own_m of the group (own block first); the A fragment of k-step kk holds rows g,
 * g + 8 at columns 2 qd (+1) and 2 qd + 8 (+1) of the warp's quarter (rows 260 words apart: the
 * 32 lanes of each load hit 32 distinct banks). FP8: at columns 4 qd .. 4 qd + 3, the depth
 * order PI of the raw K fragments (s_tile.cuh), one 8-byte load per row (rows 264 words apart:
 * conflict-free per half warp). */
template <typename Tr>
__device__ __forceinline__ void q_fragments(uint32_t (&qf)[Tr::MT][Tr::KSTEPS][4],
                                            const typename Tr::q_type *qs, int grp, int dq,
                                            int own_m, int g, int qd)
{
    using T = typename Tr::q_type;
    constexpr int QS_STRIDE = Tr::smem::QS_STRIDE;
    if constexpr (Tr::FP8) {
#pragma unroll
        for (int i = 0; i < Tr::MT; i++) {
            const T *q0 = qs + (grp * Tr::GROUP_ROWS + (i ^ own_m) * 16 + g) * QS_STRIDE +
                          dq * Tr::COLS_Q + qd * 4;
#pragma unroll
            for (int kk = 0; kk < Tr::KSTEPS; kk++) {
                const uint2 a = *reinterpret_cast<const uint2 *>(q0 + kk * 16);
                const uint2 c = *reinterpret_cast<const uint2 *>(q0 + 8 * QS_STRIDE + kk * 16);
                qf[i][kk][0] = a.x;
                qf[i][kk][1] = c.x;
                qf[i][kk][2] = a.y;
                qf[i][kk][3] = c.y;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < Tr::MT; i++) {
            const uint32_t *q0 = reinterpret_cast<const uint32_t *>(
                qs + (grp * Tr::GROUP_ROWS + (i ^ own_m) * 16 + g) * QS_STRIDE + dq * Tr::COLS_Q +
                qd * 2);
            const uint32_t *q1 = q0 + 8 * QS_STRIDE / 2;
#pragma unroll
            for (int kk = 0; kk < Tr::KSTEPS; kk++) {
                qf[i][kk][0] = q0[kk * 8];
                qf[i][kk][1] = q1[kk * 8];
                qf[i][kk][2] = q0[kk * 8 + 4];
                qf[i][kk][3] = q1[kk * 8 + 4];
            }
        }
    }
}

/* BF16 q over an FP8 cache: the block's Q (the latent A fragments in `qf`, and rope Q in `sQ`,
 * rows QPS8 apart) from BF16 to F16, times 2^-shift, so that the block's largest |q| lands in
 * [2^14, 2^15) (F16 ends at 65504, BF16 at 3.4e38); returns 2^shift, which the scores take back
 * before the score scale (two multiplies, not one folded factor, so that no input makes the
 * factor overflow where the scores do not: kv_scale.cuh, fp8_score_factors). The rule and its
 * exactness: q_to_f16.cuh. The largest is taken over finite values; Inf and NaN convert as
 * themselves. `red`: 16 words of shared scratch. Two __syncthreads (three with Inf or NaN in Q):
 * the maximum, and the rope chunks, which every thread converts in place for the whole block. */
template <typename Tr>
__device__ __forceinline__ float q_to_f16(uint32_t (&qf)[Tr::MT][Tr::KSTEPS][4], __half *sQ,
                                          uint32_t *red, int tid, int warp, int lane)
{
    constexpr int MT = Tr::MT, KSTEPS = Tr::KSTEPS, NT = Tr::NT, DR = Tr::DR;
    constexpr int QPS8 = Tr::QPS8, QPE_CHUNKS = Tr::QPE_CHUNKS;
    /* this thread's largest |x| as BF16 bits (|x| orders like its bits), per 16-bit half with
     * one packed max per word; over the block by q_block_absmax (`finite`: only values below Inf
     * count, its second round, taken only by a block whose Q has Inf or NaN) */
    const auto block_fold = [&](bool finite) {
        const auto fold = [finite](uint32_t m, uint32_t w) {
            return mlav::q_bf16_absmax_fold(m, w, finite);
        };
        uint32_t m2 = 0;
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    m2 = fold(m2, qf[i][kk][r]);
#pragma unroll
        for (int c = 0; c < QPE_CHUNKS / NT; c++) {
            const int idx = tid + c * NT, r = idx / (DR / 8), ch = idx % (DR / 8);
            const uint4 v = *reinterpret_cast<const uint4 *>(sQ + r * QPS8 + ch * 8);
            m2 = fold(fold(fold(fold(m2, v.x), v.y), v.z), v.w);
        }
        return m2;
    };
    const uint32_t mb = mlav::q_block_absmax<NT / 32>(
        block_fold, [] { __syncthreads(); }, red, warp, lane);
    const int shift = mlav::q_f16_shift(mb); /* the rule: q_to_f16.cuh */
    const float down = mlav::q_f16_down(shift);
    const auto cvt = [down](uint32_t w) { return mlav::q_bf16x2_to_f16x2(w, down); };
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                qf[i][kk][r] = cvt(qf[i][kk][r]);
#pragma unroll
    for (int c = 0; c < QPE_CHUNKS / NT; c++) { /* this thread's rope chunks, in place */
        const int idx = tid + c * NT, r = idx / (DR / 8), ch = idx % (DR / 8);
        uint4 *q = reinterpret_cast<uint4 *>(sQ + r * QPS8 + ch * 8);
        const uint4 v = *q;
        *q = make_uint4(cvt(v.x), cvt(v.y), cvt(v.z), cvt(v.w));
    }
    __syncthreads(); /* rope Q is F16 for every warp */
    return mlav::q_f16_unshift(shift);
}

} // namespace flash
} // namespace mlav

#endif
