/* The flash verify kernel: one block per (request, 64-row tile of folded token x head rows, KV
 * split), tensor cores through mma.sync, 16-key KV tiles gathered through the page table by
 * cp.async into a 4-buffer ring (two tiles ahead), online softmax, and a partial state per split
 * for combine.cu. Its shape is the family's traits (traits.cuh: tile sizes, warp layout, shared
 * memory), its instances the features (features.cuh); the body below is the sequence of stages:
 *   prologue (prologue.cuh)  page ids, Q copies, KV tiles 0 and 1 (gather.cuh), Q fragments
 *   per KV tile              S (s_tile.cuh), gather of tile t + 2, exchange + scale/mask +
 *                            online softmax (softmax.cuh), P V (pv_tile.cuh)
 *   epilogue (epilogue.cuh)  lse and O, or the split's partial state
 * Included by one instantiation file per family (flash/instantiations/), which compile in
 * parallel; ptxas's register usage level follows them there (src/cuda/CMakeLists.txt). ptxas
 * allocates the main loop as one piece, and any change in the order of the operations it is
 * given may move its speed (docs/PERFORMANCE.md#ptxas), so the stages are written to inline into
 * the operations of the loop they were cut from: scalars by value, the arrays of the former body
 * code declared here (the stages' *_regs), the former lambdas with reference parameters, the
 * per-lane offsets and the group-start barrier here (docs/DESIGN.md#extending). */
#ifndef MLAV_CUDA_FLASH_KERNEL_CUH
#define MLAV_CUDA_FLASH_KERNEL_CUH

#include <math.h>

#include "../kv_scale.cuh"
#include "../mma.cuh"
#include "../page_row.cuh"
#include "epilogue.cuh"
#include "features.cuh"
#include "gather.cuh"
#include "prologue.cuh"
#include "pv_tile.cuh"
#include "s_tile.cuh"
#include "softmax.cuh"
#include "traits.cuh"

namespace mlav {
namespace flash {
namespace {

template <typename Tr, typename F>
__global__ void __launch_bounds__(Tr::NT, 1) verify_kernel(const mlav_flash_params p)
{
    using T = typename Tr::q_type;
    using E = typename Tr::kv_elem;
    using MmaT = typename Tr::mma_t;
    using SL = typename Tr::smem;
    using BAR = barriers<Tr>;
    constexpr bool FP8 = Tr::FP8;
    constexpr int NT = Tr::NT, BN = Tr::BN, STAGES = Tr::STAGES, AHEAD = Tr::AHEAD;
    constexpr int QUARTERS = Tr::QUARTERS, GROUP_ROWS = Tr::GROUP_ROWS, PS = Tr::PS;
    const int32_t step_ix = F::STEP ? step_item_index(p) : 0;
    if (F::STEP && step_ix < 0)
        return; /* past the step's schedule, or an item past the plan's limits */
    extern __shared__ __align__(16) unsigned char smem[];
    E *ring = reinterpret_cast<E *>(smem + SL::KV); /* the KV tiles: [STAGES][KV_TILE_ELEMS] */
    float *sX = reinterpret_cast<float *>(smem + SL::X);
    MmaT *sP = reinterpret_cast<MmaT *>(smem + SL::P);
    T *sQ = reinterpret_cast<T *>(smem + SL::Q); /* rope part of Q: [BM][SL::QP_STRIDE] */
    float *sMax = reinterpret_cast<float *>(smem + SL::MAX);
    float *sL = reinterpret_cast<float *>(smem + SL::L);

    mlav::launch_dependents(); /* the combine may launch now; it waits for this grid's end */
    /* blockIdx.x read here, not above, keeps the non-STEP instances' sm_120 code as it was */
    const mlav_split_item item = p.items[F::STEP ? (uint32_t)step_ix : blockIdx.x];
    /* This thread, and the block's rows and keys. Plain locals handed to the stages one by one:
     * read through a struct, ptxas was given a different order of the same operations, and
     * allocated the main loop anew (docs/PERFORMANCE.md#ptxas). */
    const int tid = threadIdx.x, lane = tid & 31;
    /* through a shuffle, so that ptxas can prove the warp index and everything derived from it
     * (group, quarter, barrier ids, row offsets) warp-uniform and keep it in uniform registers.
     * Together with V fragments in pairs (pv_tile.cuh) it is faster at long prefixes; neither
     * change alone paid (docs/PERFORMANCE.md#decisions). */
    const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    const int grp = warp / QUARTERS, dq = warp % QUARTERS; /* warp dq of group grp */
    const int own_m = dq >> 1, own_n = dq & 1; /* the S block this warp finishes */
    const int g = lane >> 2, qd = lane & 3;    /* MMA fragment row and column pair */
    const int b = item.b;
    const int q_start = item.q_start, prefix = item.prefix;
    /* With a KV shard the block's KV rows are the rank's local rows and `prefix` the request's
     * global prefix: the rank's prefix rows are its first mlav_shard_rows(prefix) (the map is
     * increasing, src/common/shard.h), the prefix tiles' bound; without one, the prefix itself. */
    const int local_prefix = p.shard.ranks > 1 ? (int)mlav_shard_rows(p.shard, prefix) : prefix;
    const int M = item.q_len * p.H; /* folded rows of this request */
    const int m0 = item.mtile * Tr::BM;
    const int gm0 = m0 + grp * GROUP_ROWS; /* this group's first row */
    const int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const int n_tiles = (kv_end - kv_begin + BN - 1) / BN;
    const E *kv = static_cast<const E *>(p.kv);
    /* FP8: the scale multiplies the scores (with softmax_scale) and the output (through inv in
     * the epilogue), in fp32 outside the products */
    const float fp8_scale = FP8 ? mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale) : 1.0f;
    float fp8_scale_log2 = FP8 ? p.scale_log2 * fp8_scale : 0.0f;
    /* BF16 q over an FP8 cache: the power of two q_to_f16 took out of Q, put back into the scores
     * (with fp8_scale_log2: fp8_score_factors) */
    float q_unshift = 1.0f;
    const T *qg = static_cast<const T *>(p.q) + (size_t)q_start * p.H * Tr::W;
    const int32_t *ptab = F::ROWS ? mlav_page_row_dev(p.page_table, p.page_table_rows,
                                                      p.page_table_num_rows, p.max_pages,
                                                      p.bad_pages, b)
                                  : p.page_table + (size_t)b * p.max_pages;
    /* a group past the request's rows skips the MMAs unless ALL_GROUPS; its warps still gather
     * and meet every "full" barrier of the other group. Computing, it writes nothing: the
     * epilogue writes rows below M only, and its rows see Q = 0 (their scores, NaN where a key
     * holds Inf or NaN, stay in its own rows, its own vote and its own exchange). */
    const bool active = F::ALL_GROUPS || gm0 < M;
    const int bar = BAR::group(grp); /* the group's named barrier */

    /* Prologue. The page-id lookups are issued first; the loop keeps one a tile ahead. */
    const int g_row = tid / Tr::GATHER_TPR, g_part = tid % Tr::GATHER_TPR;
    int32_t pg_first[AHEAD];
#pragma unroll
    for (int s = 0; s < AHEAD; s++)
        pg_first[s] = lookup_page(ptab, kv_begin + s * BN + g_row, kv_end, p);
    int32_t pg_next = lookup_page(ptab, kv_begin + AHEAD * BN + g_row, kv_end, p);
    T *const qs = reinterpret_cast<T *>(smem + SL::Q_STAGE); /* [BM][SL::QS_STRIDE] */
    load_q_async<Tr>(sQ, qs, qg, m0, M, tid);
    mlav::cp_async_commit(); /* rope Q and latent Q */
    gather_kv_row<Tr>(ring, kv, pg_first[0], kv_begin + g_row, kv_end, p, g_row, g_part);
    mlav::cp_async_commit(); /* tile 0 */
    mlav::cp_async_wait<1>();
    __syncthreads(); /* every thread's Q copies have landed */
    uint32_t qf[Tr::MT][Tr::KSTEPS][4];
    q_fragments<Tr>(qf, qs, grp, dq, own_m, g, qd);
    __syncthreads(); /* the staging area is free again */
    if constexpr (Tr::Q_TO_F16)
        fp8_score_factors(q_to_f16<Tr>(qf, reinterpret_cast<__half *>(sQ),
                                       reinterpret_cast<uint32_t *>(sMax), tid, warp, lane),
                          p.scale_log2, fp8_scale, q_unshift, fp8_scale_log2);
    gather_kv_row<Tr>(ring + Tr::KV_TILE_ELEMS, kv, pg_first[1], kv_begin + BN + g_row, kv_end,
                      p, g_row, g_part);
    mlav::cp_async_commit(); /* tile 1 */
    static_assert(AHEAD == 2, "the prologue gathers tiles 0 and 1");

    /* This thread's output rows: o[i][n][2 rr + (0, 1)] is row g + 8 rr of m-tile i ^ own_m,
     * k = 2 i + rr in ref_max; k = 0, 1 are the rows of the S block the warp finishes. */
    float o[Tr::MT][Tr::COLS_Q / 8][4];
#pragma unroll
    for (int i = 0; i < Tr::MT; i++)
#pragma unroll
        for (int n = 0; n < Tr::COLS_Q / 8; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    /* reference max of those rows (log2 units: score * scale * log2(e)), the same in all four
     * warps of the group */
    float ref_max[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    float run_sum[2] = {0.0f, 0.0f}; /* the S block's rows, this thread's keys; summed at the end */

    /* per-lane ldmatrix offsets into a KV tile (elements). K, non-transposed: key rows of n-tile
     * own_n first. V, transposed: this warp's output columns. FP8, in bytes: matrix i of an x4
     * is keys 8 (i & 1) .. + 7 (K: of n-tile own_n first) at bytes 16 (i >> 1) .. + 15 of the
     * step (K: two k16 steps of both n-tiles; V: the even and odd tiles of two 16-dim chunks).
     * Both forms written out, the family's picked at the stages' calls: as one expression or a
     * function, ptxas was given its terms in another order (docs/PERFORMANCE.md#ptxas). */
    const int k_off = (((lane & 7) + ((lane >> 4) << 3)) ^ (own_n << 3)) * Tr::RS +
                      ((lane >> 3) & 1) * 8;
    const int v_off =
        ((lane & 7) + ((lane >> 3) & 1) * 8) * Tr::RS + dq * Tr::COLS_Q + (lane >> 4) * 8;
    const int k8_off = (((lane & 7) + ((lane >> 3) & 1) * 8) ^ (own_n << 3)) * Tr::RAW_RS +
                       (lane >> 4) * 16;
    const int v8_off = ((lane & 7) + ((lane >> 3) & 1) * 8) * Tr::RAW_RS + dq * Tr::COLS_Q +
                       (lane >> 4) * 16;
    float *xg = sX + grp * (QUARTERS * (QUARTERS - 1) * 32 * 4); /* the group's exchange */
    MmaT *pg = sP + grp * GROUP_ROWS * PS;                       /* the group's P tile */
    MmaT *p_mine = pg + (own_m * 16 + g) * PS + own_n * 8 + qd * 2;
    /* A fragments from shared memory (P, rope Q): lanes 0-15 rows, lanes 16-31 the k + 8 half */
    const int a_row = lane & 15, a_col = (lane >> 4) * 8;

    /* The two groups meet only through "tile full" barriers, not a block-wide barrier per tile:
     * tile t is full when every thread's copies of it have landed. Each thread waits for its own
     * copies of tile t + 1 in the middle of tile t (before P V) and then arrives, without waiting,
     * at the other group's barrier for that tile; at the head of tile t + 1 it syncs on its own
     * group's, which completes with the other group's 128 arrivals. So a group runs at most about
     * half a tile ahead of the other, and its softmax can overlap the other's MMAs. The same
     * bound makes the buffer reuse safe without an "empty" barrier: a gather at tile t writes the
     * buffer of tile t + AHEAD - STAGES = t - 2, and the other group is then past the middle of
     * tile t - 1. Barrier ids: barriers (traits.cuh). */
    mlav::cp_async_wait<AHEAD - 1>(); /* this thread's part of tile 0 (and of rope Q) landed */
    /* an item of no tile (a KV shard's rank holding no row of the request) leaves no arrival
     * that no group would sync on; it goes straight to the epilogue's empty state */
    if (n_tiles > 0)
        mlav::named_barrier_arrive(BAR::full(grp ^ 1, 0), NT);
    /* Group 1 starts once group 0 has its first S, so the groups run staggered (ping-pong): one
     * group's exchange and softmax overlap the other's MMAs, and the full barriers keep the
     * offset bounded (faster than starting together: docs/PERFORMANCE.md#kernel). */
    if (grp == 1 && n_tiles > 0) /* group 0 (always active) arrives in its first tile */
        mlav::named_barrier(BAR::START, NT);
    for (int t = 0; t < n_tiles; t++) {
        mlav::named_barrier(BAR::full(grp, t % STAGES), NT); /* tile t visible to this group */
        const E *sK = ring + (t % STAGES) * Tr::KV_TILE_ELEMS;
        const int j_base = kv_begin + t * BN;
        const bool prefix_only = j_base + BN <= local_prefix && j_base + BN <= kv_end;

        float s[Tr::MT][Tr::NTS][4];
        s_tile_regs<FP8, Tr::MT> ssr;
        if (active)
            s_tile<Tr>(s, qf, sQ, sK, grp, dq, own_m, g, qd, FP8 ? k8_off : k_off, a_row, a_col,
                       ssr);
        /* The gather of tile t + 2 goes after the S MMAs are issued, so that its copies queue
         * under them. Issued before S, they filled the memory pipe, and the S ldmatrix address
         * code, which ptxas rebuilds from the thread index (S2R) every tile, waited behind them
         * (docs/PERFORMANCE.md#decisions). */
        if (t + AHEAD < n_tiles) {
            const int j_row = kv_begin + (t + AHEAD) * BN + g_row;
            gather_kv_row<Tr>(ring + ((t + AHEAD) % STAGES) * Tr::KV_TILE_ELEMS, kv, pg_next,
                              j_row, kv_end, p, g_row, g_part);
        }
        pg_next = lookup_page(ptab, kv_begin + (t + AHEAD + 1) * BN + g_row, kv_end, p);
        mlav::cp_async_commit();
        if (active) {
            exchange_scatter<Tr>(s, xg, dq, lane);
            float sv[4] = {s[0][0][0], s[0][0][1], s[0][0][2], s[0][0][3]};
            mlav::named_barrier(bar, Tr::GROUP_THREADS);
            if (grp == 0 && t == 0) /* group 1's staggered start */
                mlav::named_barrier_arrive(BAR::START, NT);
            exchange_gather<Tr>(sv, xg, dq, lane);
            softmax_regs sr;
            scale_mask<Tr>(sv, prefix_only, j_base, q_unshift, fp8_scale_log2, p, gm0, M,
                           q_start, local_prefix, prefix, kv_end, own_m, own_n, g, qd, sr);
            online_softmax<Tr>(sv, ref_max, run_sum, o, p_mine, sMax, grp, dq, own_m, g, qd, bar,
                               sr);
        }

        /* this thread's part of tile t + 1 has landed: tell the other group */
        mlav::cp_async_wait<AHEAD - 1>();
        if (t + 1 < n_tiles)
            mlav::named_barrier_arrive(BAR::full(grp ^ 1, (t + 1) % STAGES), NT);
        if (active) {
            if (prefix_only)
                pv_tile<Tr, false>(o, pg, sK, own_m, FP8 ? v8_off : v_off, a_row, a_col);
            else
                pv_tile<Tr, true>(o, pg, sK, own_m, FP8 ? v8_off : v_off, a_row, a_col);
        }
    }
    mlav::cp_async_wait<0>();
    if (!active)
        return;
    epilogue_regs er;
    epilogue<Tr>(p, o, ref_max, run_sum, sL, ring, item.slot, fp8_scale, M, m0, gm0, q_start,
                 n_tiles, warp, tid, bar, er);
}

} // namespace
} // namespace flash
} // namespace mlav

#endif
