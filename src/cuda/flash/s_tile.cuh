/* The S stage: this warp's partial scores of one KV tile over its quarter of the depth, for the
 * group's 32 rows x 16 keys: the rope k-step (Q from shared memory), then KSTEPS latent k-steps
 * (Q from registers), four chains of MMAs; each K fragment (16 keys x 16 deep) feeds both
 * m-tiles. s[i][j] is block (m-tile i ^ own_m, n-tile j ^ own_n); the group's exchange
 * (softmax.cuh) finishes the sums.
 *
 * An FP8 cache (docs/DESIGN.md#fp8-kv): the tiles stay e4m3 bytes in shared memory, gathered
 * like 16-bit ones (16-byte cp.async, half the chunks), and are converted in registers as the
 * loop's ldmatrix reads them: one ldmatrix.x4 of bytes gives four B fragments where one of a
 * 16-bit tile gives two, and every MMA runs in F16 (e4m3 -> f16 is one instruction per pair,
 * -> bf16 four; BF16 q is converted once per block: q_to_f16). The fragment layouts
 * (docs/PERFORMANCE.md#fp8-kv, checked on the host by bench/diag/fp8_fragments.py):
 *   K: ldmatrix of 8 keys x 16 bytes gives lane (g, t) depths 4t .. 4t + 3 of key g, so the
 *      k16 step takes its depths in the order PI = 0 1 4 5 8 9 12 13 2 3 6 7 10 11 14 15, and
 *      Q's A fragments follow PI (one 8-byte load per row and step).
 *   V: pv_tile.cuh.
 * An earlier FP8 instance converted each tile into a 16-bit tile in shared memory, on the
 * loop's chain, and ran at 0.76-0.96 of the BF16 cache's speed (docs/PERFORMANCE.md#fp8-kv). */
#ifndef MLAV_CUDA_FLASH_S_TILE_CUH
#define MLAV_CUDA_FLASH_S_TILE_CUH

#include "../convert.cuh"
#include "../mma.cuh"
#include "traits.cuh"

namespace mlav {
namespace flash {

/* The two K B fragments (b0, b1) of one n8 tile and k16 step from the register an ldmatrix of
 * raw bytes gave this lane, converted by the KV element type's kv_bytes (convert.cuh): depths
 * 4t, 4t + 1 are k = 2t, 2t + 1 and depths 4t + 2, 4t + 3 are k = 2t + 8, 2t + 9 (the order
 * PI). */
template <typename Tr>
__device__ __forceinline__ void k_fragment_fp8(uint32_t r, uint32_t &b0, uint32_t &b1)
{
    mlav::kv_bytes<typename Tr::kv_type>::to_half2x2(r, b0, b1);
}

/* The S stage's arrays (fragments in flight), declared by the kernel where the loop declares
 * its others: as arrays of the stage function, their registers came to ptxas in another order,
 * and it allocated the main loop anew (docs/PERFORMANCE.md#ptxas). Which ones: those that keep
 * every family's PTX as it was (FP8: the rope step's rk and b stay the function's). */
template <bool FP8, int MT> struct s_tile_regs { /* 16-bit K: fragments, loaded two ahead */
    uint32_t bk[3][4];
    uint32_t qa[MT][4];
};
template <int MT> struct s_tile_regs<true, MT> { /* FP8 K: raw registers, converted in use */
    uint32_t qa[MT][4];
    uint32_t braw[2][4];
    uint32_t b2[2][4];
};

/* s = this warp's partial S of the tile in ring buffer `sK`; sQ: rope Q ([BM][QP_STRIDE]);
 * k_off, a_row, a_col: the lane's fragment offsets (kernel.cuh). */
template <typename Tr>
__device__ __forceinline__ void s_tile(float (&s)[Tr::MT][Tr::NTS][4],
                                       const uint32_t (&qf)[Tr::MT][Tr::KSTEPS][4],
                                       const typename Tr::q_type *sQ,
                                       const typename Tr::kv_elem *sK, int grp, int dq, int own_m,
                                       int g, int qd, int k_off, int a_row, int a_col,
                                       s_tile_regs<Tr::FP8, Tr::MT> &sr)
{
    using T = typename Tr::q_type;
    using MTY = mlav::mma_type<typename Tr::mma_t>;
    constexpr int MT = Tr::MT, NTS = Tr::NTS, KSTEPS = Tr::KSTEPS, DL = Tr::DL;
    constexpr int GROUP_ROWS = Tr::GROUP_ROWS, ROPE_Q = Tr::ROPE_Q, COLS_Q = Tr::COLS_Q;
    constexpr int QP_STRIDE = Tr::smem::QP_STRIDE;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int n = 0; n < NTS; n++)
            s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
    if constexpr (Tr::FP8) {
        /* the rope k-step: Q (F16, order PI) by 8-byte loads, K by an ldmatrix.x2 of
         * bytes; then the latent k-steps, two per ldmatrix.x4 of bytes (loaded two
         * ahead), converted as they are used */
        uint32_t(&qa)[MT][4] = sr.qa;
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const T *qr = sQ + (grp * GROUP_ROWS + (i ^ own_m) * 16 + g) * QP_STRIDE +
                          dq * ROPE_Q + qd * 4;
            const uint2 a = *reinterpret_cast<const uint2 *>(qr);
            const uint2 c = *reinterpret_cast<const uint2 *>(qr + 8 * QP_STRIDE);
            qa[i][0] = a.x;
            qa[i][1] = c.x;
            qa[i][2] = a.y;
            qa[i][3] = c.y;
        }
        uint32_t rk[2];
        mlav::ldsm_x2(rk, sK + k_off + DL + dq * ROPE_Q);
        const uint8_t *kb8 = sK + k_off + dq * COLS_Q;
        constexpr int KPAIRS = KSTEPS / 2, KP_AHEAD = 2;
        static_assert(KP_AHEAD == 2, "s_tile_regs");
        uint32_t(&braw)[KP_AHEAD][4] = sr.braw;
#pragma unroll
        for (int kp = 0; kp < KP_AHEAD; kp++)
            mlav::ldsm_x4(braw[kp], kb8 + kp * 32);
        {
            uint32_t b[4];
            k_fragment_fp8<Tr>(rk[0], b[0], b[1]);
            k_fragment_fp8<Tr>(rk[1], b[2], b[3]);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                MTY::mma(s[i][0], qa[i], b[0], b[1]);
                MTY::mma(s[i][1], qa[i], b[2], b[3]);
            }
        }
#pragma unroll
        for (int kp = 0; kp < KPAIRS; kp++) {
            const int slot = kp % KP_AHEAD;
            /* b[h]: k-step 2 kp + h, n-tiles 0 ([0], [1]) and 1 ([2], [3]) */
            uint32_t(&b)[2][4] = sr.b2;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                k_fragment_fp8<Tr>(braw[slot][2 * h], b[h][0], b[h][1]);
                k_fragment_fp8<Tr>(braw[slot][2 * h + 1], b[h][2], b[h][3]);
            }
            if (kp + KP_AHEAD < KPAIRS)
                mlav::ldsm_x4(braw[slot], kb8 + (kp + KP_AHEAD) * 32);
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    MTY::mma(s[i][0], qf[i][2 * kp + h], b[h][0], b[h][1]);
                    MTY::mma(s[i][1], qf[i][2 * kp + h], b[h][2], b[h][3]);
                }
        }
    } else {
        /* K fragments loaded two steps ahead in the source (ptxas keeps one) */
        const T *kbase = sK + k_off + dq * COLS_Q;
        constexpr int K_AHEAD = 2;
        static_assert(K_AHEAD == 2, "s_tile_regs");
        uint32_t(&bk)[K_AHEAD + 1][4] = sr.bk;
        {
            uint32_t(&qa)[MT][4] = sr.qa;
#pragma unroll
            for (int i = 0; i < MT; i++)
                mlav::ldsm_x4(qa[i], sQ + (grp * GROUP_ROWS + (i ^ own_m) * 16 + a_row) *
                                             QP_STRIDE + dq * ROPE_Q + a_col);
            mlav::ldsm_x4(bk[K_AHEAD], sK + k_off + DL + dq * ROPE_Q);
#pragma unroll
            for (int st = 0; st < K_AHEAD; st++)
                mlav::ldsm_x4(bk[st], kbase + st * 16);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                MTY::mma(s[i][0], qa[i], bk[K_AHEAD][0], bk[K_AHEAD][1]);
                MTY::mma(s[i][1], qa[i], bk[K_AHEAD][2], bk[K_AHEAD][3]);
            }
        }
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
            const int slot = kk % K_AHEAD;
#pragma unroll
            for (int i = 0; i < MT; i++) {
                MTY::mma(s[i][0], qf[i][kk], bk[slot][0], bk[slot][1]);
                MTY::mma(s[i][1], qf[i][kk], bk[slot][2], bk[slot][3]);
            }
            if (kk + K_AHEAD < KSTEPS)
                mlav::ldsm_x4(bk[slot], kbase + (kk + K_AHEAD) * 16);
        }
    }
}

} // namespace flash
} // namespace mlav

#endif
