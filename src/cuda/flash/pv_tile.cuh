/* The P V stage: O += P V for this warp's output columns of the group's rows. P (the A operand)
 * comes from the group's P tile (softmax.cuh), m-tile i ^ own_m; V fragments of 16 keys x 16
 * columns, each feeding both m-tiles. Two instances: tiles with draft rows or rows past the split
 * end also zero the non-finite elements of each V fragment (SANITIZE, zero_nonfinite_fragment);
 * the common prefix tile does not pay for it.
 *
 * An FP8 cache: ldmatrix.trans of 8 keys x 16 bytes gives lane (g, t) keys 2t, 2t + 1 at dims
 * 2g, 2g + 1; one byte permute pairs the keys per dim: the B fragments of an even-dims and an
 * odd-dims n8 tile. O's tiles 2c and 2c + 1 hold the even and odd dims of 16-dim chunk c, so a
 * lane holds dims 16c + 4t .. 16c + 4t + 3 of its rows, which the epilogue writes in order
 * (docs/PERFORMANCE.md#fp8-kv, checked on the host by bench/diag/fp8_fragments.py). */
#ifndef MLAV_CUDA_FLASH_PV_TILE_CUH
#define MLAV_CUDA_FLASH_PV_TILE_CUH

#include "../convert.cuh"
#include "../mma.cuh"
#include "traits.cuh"

namespace mlav {
namespace flash {

/* The V B fragments of the even-dims (b[0], b[1]) and odd-dims (b[2], b[3]) n8 tiles of one
 * 16-dim chunk, from the two registers an ldmatrix.trans of raw bytes gave this lane (keys 0-7
 * and 8-15): each holds keys 2t, 2t + 1 (halves) at dims 2g, 2g + 1 (bytes), and the permute
 * pairs the keys per dim. */
template <typename Tr>
__device__ __forceinline__ void v_fragments_fp8(uint32_t r0, uint32_t r1, uint32_t b[4])
{
    using cvt = mlav::kv_bytes<typename Tr::kv_type>;
    cvt::to_half2x2(__byte_perm(r0, 0u, 0x3120), b[0], b[2]);
    cvt::to_half2x2(__byte_perm(r1, 0u, 0x3120), b[1], b[3]);
}

/* Zero the Inf and NaN elements of one V fragment (four registers of two elements each), on
 * tiles with draft rows or rows past the split end. Exact, because c_kv is also the key: a
 * non-finite c_kv element makes that key's score NaN or +-inf for every row, so a row that sees
 * the key comes out NaN (or gives it weight 0 at -inf) through the softmax, and a row that does
 * not has it masked; no row needs the value itself. Without this, P = 0 times NaN on the tensor
 * cores would carry a hidden draft row's NaN into rows that do not see it. Done on the fragment
 * in registers, so the tile in shared memory is never written after the gather (zeroed in place
 * between two block barriers, racecheck intermittently reported that pass against the other
 * group's P V reads; docs/PERFORMANCE.md#decisions). */
template <typename T> __device__ __forceinline__ void zero_nonfinite_fragment(uint32_t r[4])
{
    const uint32_t m = mlav::mma_type<T>::exp_mask;
#pragma unroll
    for (int h = 0; h < 4; h++) {
        const uint32_t lo = (r[h] & m) == m ? 0xffff0000u : 0xffffffffu;
        const uint32_t hi = ((r[h] >> 16) & m) == m ? 0x0000ffffu : 0xffffffffu;
        r[h] &= lo & hi;
    }
}

/* O's tiles 2 st .. 2 st + 3 from the B fragments of two 16-column steps (b0: tiles 2 st and
 * 2 st + 1 in [0, 1] and [2, 3]; b1 the next two), each for both m-tiles. */
template <typename Tr>
static __device__ inline void mma_two_steps(float (&o)[Tr::MT][Tr::COLS_Q / 8][4],
                                              const uint32_t (&pa)[Tr::MT][4],
                                              const uint32_t b0[4], const uint32_t b1[4], int st)
{
    using MTY = mlav::mma_type<typename Tr::mma_t>;
#pragma unroll
    for (int i = 0; i < Tr::MT; i++) {
        MTY::mma(o[i][2 * st], pa[i], b0[0], b0[1]);
        MTY::mma(o[i][2 * st + 1], pa[i], b0[2], b0[3]);
    }
#pragma unroll
    for (int i = 0; i < Tr::MT; i++) {
        MTY::mma(o[i][2 * st + 2], pa[i], b1[0], b1[1]);
        MTY::mma(o[i][2 * st + 3], pa[i], b1[2], b1[3]);
    }
}

/* FP8: raw V, two registers of an ldmatrix.x4.trans of bytes per 16-dim chunk: chunks st and
 * st + 1, each as the B fragments of its even ([0], [1]) and odd ([2], [3]) dims, which O's
 * tiles 2 st and 2 st + 1 take. */
template <typename Tr, bool SANITIZE>
static __device__ inline void pv_pair_fp8(float (&o)[Tr::MT][Tr::COLS_Q / 8][4],
                                            const uint32_t (&pa)[Tr::MT][4], const uint32_t r[4],
                                            int st)
{
    uint32_t b0[4], b1[4];
    v_fragments_fp8<Tr>(r[0], r[1], b0);
    v_fragments_fp8<Tr>(r[2], r[3], b1);
    if constexpr (SANITIZE) {
        zero_nonfinite_fragment<typename Tr::mma_t>(b0);
        zero_nonfinite_fragment<typename Tr::mma_t>(b1);
    }
    mma_two_steps<Tr>(o, pa, b0, b1, st);
}

/* O += P V of the tile in ring buffer `sK`; pg: the group's P tile; v_off, a_row, a_col: the
 * lane's fragment offsets (kernel.cuh). */
template <typename Tr, bool SANITIZE>
static __device__ inline void pv_tile(float (&o)[Tr::MT][Tr::COLS_Q / 8][4],
                                      typename Tr::mma_t *const &pg,
                                      const typename Tr::kv_elem *const &sK, const int &own_m,
                                      const int &v_off, const int &a_row, const int &a_col)
{
    using MTY = mlav::mma_type<typename Tr::mma_t>;
    constexpr int MT = Tr::MT, PS = Tr::PS;
    uint32_t pa[MT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
        mlav::ldsm_x4(pa[i], pg + ((i ^ own_m) * 16 + a_row) * PS + a_col);
    constexpr int PV_STEPS = Tr::COLS_Q / 16;
    const typename Tr::kv_elem *vbase = sK + v_off;
    if constexpr (Tr::FP8) {
        if constexpr (!SANITIZE) {
            /* the common tile: two loads, then 16 MMAs each */
#pragma unroll
            for (int st = 0; st < PV_STEPS; st += 4) {
                uint32_t r0[4], r1[4];
                mlav::ldsm_x4_trans(r0, vbase + st * 16);
                mlav::ldsm_x4_trans(r1, vbase + (st + 2) * 16);
                pv_pair_fp8<Tr, SANITIZE>(o, pa, r0, st);
                pv_pair_fp8<Tr, SANITIZE>(o, pa, r1, st + 2);
            }
        } else {
            /* a few tiles per split: one load ahead, sanitized, used */
            uint32_t rv[4];
            mlav::ldsm_x4_trans(rv, vbase);
#pragma unroll
            for (int st = 0; st < PV_STEPS; st += 2) {
                uint32_t r[4] = {rv[0], rv[1], rv[2], rv[3]};
                if (st + 2 < PV_STEPS)
                    mlav::ldsm_x4_trans(rv, vbase + (st + 2) * 16);
                pv_pair_fp8<Tr, SANITIZE>(o, pa, r, st);
            }
        }
    } else if constexpr (!SANITIZE) {
        /* the common tile: V fragments in pairs, two loads then eight MMAs, so the second
         * load's latency hides under the first fragment's MMAs (written as a look-ahead ring,
         * ptxas kept one fragment in flight) */
#pragma unroll
        for (int st = 0; st < PV_STEPS; st += 2) {
            uint32_t b0[4], b1[4];
            mlav::ldsm_x4_trans(b0, vbase + st * 16);
            mlav::ldsm_x4_trans(b1, vbase + (st + 1) * 16);
            mma_two_steps<Tr>(o, pa, b0, b1, st);
        }
    } else {
        /* a few tiles per split: each V fragment loaded one step ahead, sanitized, used (its
         * extra registers would otherwise shape the allocation of the whole loop: with three in
         * flight in both instances, long prefixes ran slower: docs/PERFORMANCE.md#decisions) */
        constexpr int PV_AHEAD = 1;
        uint32_t bv[PV_AHEAD][4];
#pragma unroll
        for (int st = 0; st < PV_AHEAD; st++)
            mlav::ldsm_x4_trans(bv[st], vbase + st * 16);
#pragma unroll
        for (int st = 0; st < PV_STEPS; st++) {
            const int slot = st % PV_AHEAD;
            zero_nonfinite_fragment<typename Tr::q_type>(bv[slot]);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                MTY::mma(o[i][2 * st], pa[i], bv[slot][0], bv[slot][1]);
                MTY::mma(o[i][2 * st + 1], pa[i], bv[slot][2], bv[slot][3]);
            }
            if (st + PV_AHEAD < PV_STEPS)
                mlav::ldsm_x4_trans(bv[slot], vbase + (st + PV_AHEAD) * 16);
        }
    }
}

} // namespace flash
} // namespace mlav

#endif
