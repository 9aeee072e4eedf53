/* The seesaw kernel's refills: what a warpgroup needs to refill a stage, the page ids it looks
 * up a pair ahead, a part of a stage by TMA or gathered, and an FP8 tile asked of the L2. */
#ifndef MLAV_CUDA_SM90_SEESAW_REFILL_CUH
#define MLAV_CUDA_SM90_SEESAW_REFILL_CUH

#include "sync.cuh"

namespace mlav90 {
namespace seesaw {

/* What a warpgroup needs to refill a stage, and how a 16-bit cache's copies ask the L2 to keep
 * their lines: L2_FIRST (an instance's, by the plan's rule: mlav_flash_sm90_l2_first) with the
 * evict_first policy `l2`, else plainly. The plain copies are the instance without it, not a
 * branch: with the policy as a launch argument the tensor-bound points took 1.02-1.035x the time
 * on an H100 also where it was off (docs/PERFORMANCE.md#hopper). */
template <bool L2_FIRST> struct feed_ctx {
    const int32_t *ptab;
    const CUtensorMap *map;
    bool tma;    /* the launch holds the pool's map */
    bool lead;   /* warp 0 of its warpgroup: refill's TMA issue (set once, broadcast) */
    uint64_t l2; /* L2_FIRST: l2_policy_evict_first() */

    __device__ __forceinline__ void copy16(uint32_t dst, const void *src, int src_bytes) const
    {
        if constexpr (L2_FIRST)
            cp_async16_hint(dst, src, src_bytes, l2);
        else
            cp_async16(dst, src, src_bytes);
    }
    __device__ __forceinline__ void tile_block(uint32_t dst, int32_t x, int32_t y,
                                               uint64_t *bar) const
    {
        if constexpr (L2_FIRST)
            tma_load_2d_hint(dst, map, x, y, bar, l2);
        else
            tma_load_2d(dst, map, x, y, bar);
    }
};

/* The column blocks of a stage each refill copies (bit k: block k): V's left half (K's features
 * 0..255), its right half (256..511), and P's slot (K's rope). */
constexpr uint32_t PART_L = 0x00fu, PART_R = 0x0f0u, PART_P = 0x100u, PART_ALL = 0x1ffu;

/* The page ids of the rows a warpgroup's threads gather in the pair of tiles (t, t + 1), one a
 * thread, each in the warp of the threads that gather its row: lane l of warp v holds row
 * 4 v + (l & 3) + 16 ((l >> 2) & 3) of tile t + (l >> 4) (gather_row_id). Looked up a pair
 * ahead, so that a gathered refill (page_size 1: every tile) issues its copies without a
 * dependent load; one register where each row's id would take 8. None where both tiles lie in
 * one page each (kv_tile_in_one_page: refill then takes the tile's first page id). */
__device__ __forceinline__ int32_t pair_row_ids(const int32_t *ptab, const block_ctx &c, int t,
                                                const mlav_flash_params &p, int wt)
{
    const int j0 = c.kv_begin + t * TILE_N;
    if (kv_tile_in_one_page(j0, p) && kv_tile_in_one_page(j0 + TILE_N, p))
        return 0; /* refill takes each tile's first page id: no load */
    const int v = wt >> 5, l = wt & 31;
    const int row = 4 * v + (l & 3) + 16 * ((l >> 2) & 3);
    return kv_page_of(ptab, c.kv_begin + (t + (l >> 4)) * TILE_N + row, c.kv_end, p);
}

/* What a warpgroup looks up a pair ahead for its gathered refills: the page ids
 * (pair_row_ids), or in a GATHER instance each row's source itself (pair_row_srcs). */
template <typename Kv, bool GATHER>
using row_ids_t = std::conditional_t<GATHER, const Kv *, int32_t>;

/* The page id of tile t's first row (refill's page0, prefetch_fp8_tile's page), looked up ahead
 * of its use; 0 and no look-up where the instance has none (NONE: a GATHER instance, whose
 * refills take each row's source, or a 16-bit cache's, which asks the L2 for nothing). */
template <bool NONE>
__device__ __forceinline__ int32_t tile_page(const int32_t *ptab, const block_ctx &c, int t,
                                             const mlav_flash_params &p)
{
    return NONE ? 0 : kv_page_of(ptab, c.kv_begin + t * TILE_N, c.kv_end, p);
}

/* A GATHER instance's pair_row_ids: each row's source (kv_row_src: its page's slot, the NaN row,
 * or for a row past kv_end row 0, not read), so that a refill's rows need no address arithmetic
 * of their own: looked up under the pair's products, the dependent steps from the page id's load
 * to the 64-bit product wait there instead of in the refill (docs/PERFORMANCE.md#hopper). */
template <typename Kv>
__device__ __forceinline__ const Kv *pair_row_srcs(const int32_t *ptab, const block_ctx &c, int t,
                                                   const mlav_flash_params &p, int wt)
{
    const int v = wt >> 5, l = wt & 31;
    const int j = c.kv_begin + (t + (l >> 4)) * TILE_N + 4 * v + (l & 3) + 16 * ((l >> 2) & 3);
    return kv_row_src(static_cast<const Kv *>(p.kv), kv_page_of(ptab, j, c.kv_end, p), j,
                      j < c.kv_end, p);
}

/* The look-up of an instance's kind (row_ids_t) for the pair at tile t. */
template <typename Kv, bool GATHER>
__device__ __forceinline__ row_ids_t<Kv, GATHER> pair_rows(const int32_t *ptab, const block_ctx &c,
                                                           int t, const mlav_flash_params &p,
                                                           int wt)
{
    if constexpr (GATHER)
        return pair_row_srcs<Kv>(ptab, c, t, p, wt);
    else
        return pair_row_ids(ptab, c, t, p, wt);
}

/* Row i's source of gather thread wt in tile k of the pair (pair_row_srcs), from its lane. */
template <typename Kv>
__device__ __forceinline__ const Kv *gather_row_src(const Kv *srcs, int k, int i, int wt)
{
    const int lane = ((wt & 31) >> 3) | (i << 2) | (k << 4);
    const uint64_t a = reinterpret_cast<uint64_t>(srcs);
    const uint32_t lo = __shfl_sync(0xffffffffu, (uint32_t)a, lane);
    const uint32_t hi = __shfl_sync(0xffffffffu, (uint32_t)(a >> 32), lane);
    return reinterpret_cast<const Kv *>(((uint64_t)hi << 32) | lo);
}

/* The page id of gather thread wt's row i (row wt / 8 + 16 i: gather.cuh's mapping) in tile k
 * (0, 1) of the pair whose ids are `ids` (pair_row_ids), from the lane that holds it. */
__device__ __forceinline__ int32_t gather_row_id(int32_t ids, int k, int i, int wt)
{
    return __shfl_sync(0xffffffffu, ids, ((wt & 31) >> 3) | (i << 2) | (k << 4));
}

/* The column blocks MASK of tile t of the item (tile k of its pair) into `stage` by a
 * warpgroup (thread wt of 128), each published on its own barrier of `full` (the stage's 9, 128
 * arrivals a phase):
 *   by TMA where kv_tile_by_tma allows (a 16-bit cache under the pool's map; the answer the
 *   same in every thread and for every part: `page0`, the page id of the tile's first row,
 *   looked up by the caller ahead), one lane of warp 0 (elect.sync) arriving with a block's
 *   bytes expected then copying it (its expect_tx and the phase's 128 arrivals at once), its
 *   warp reconverged after;
 *   else gathered (gather.cuh's mapping, each row's page id `page0` in a tile inside one page,
 *   else from `ids`: gather_row_id): each thread's copies, then its cp_async_arrive_on of each
 *   block (one of the phase's 128 arrivals, made when its copies land). No thread waits for a
 *   copy: the tile's readers do (s_issue_full, or fp8_tile_ready), as they wait for TMA. An FP8
 *   cache's tiles are always gathered, raw (gather.cuh: a row's raw chunk l + 8 k into column
 *   block 2 k + 1, the fifth into the last), and made F16 by fp8_tile_ready. */
template <typename Kv, uint32_t MASK, bool GATHER = false, typename Feed>
__device__ __forceinline__ void refill(const mlav_flash_params &p, const block_ctx &c,
                                       const Feed &f, uint32_t stage, uint64_t *full, int t,
                                       int wt, int32_t page0, row_ids_t<Kv, GATHER> ids, int k)
{
    constexpr bool FP8 = fp8_kv<Kv>;
    static_assert(!FP8 || ((MASK ^ (MASK >> 1)) & 0x55u) == 0,
                  "an FP8 raw chunk k lands in block 2 k + 1 and becomes F16 in 2 k and 2 k + 1: "
                  "parts of whole pairs");
    const int j0 = c.kv_begin + t * TILE_N;
    if constexpr (!FP8 && !GATHER) {
        if (f.tma && kv_tile_by_tma(page0, j0, c.kv_end, p)) {
            /* one elected lane of warp 0 (f.lead: the warp's index broadcast, so that ptxas
             * sees it warp-uniform): ptxas issues its boxes without the loop over active lanes
             * it puts around a TMA copy under `wt == 0` (a box 3 instructions where 11); on an
             * H100 0.991x the time over 18 B 16 points from 32k (docs/PERFORMANCE.md#hopper) */
            if (f.lead && elect_one_sync()) {
                const int32_t y = page0 * p.page_size + (int32_t)kv_slot_of(j0, p);
#pragma unroll
                for (int kb = 0; kb < W_BLOCKS; kb++)
                    if (MASK >> kb & 1u) {
                        mbar_arrive_expect_tx_n(&full[kb], BLOCK_BYTES, WG_THREADS);
                        f.tile_block(stage + (uint32_t)kb * BLOCK_BYTES, kb * COL_BLOCK, y,
                                     &full[kb]);
                    }
            }
            __syncwarp();
            return;
        }
    }
    const uint32_t d0 = FP8 ? gather_dst_fp8(stage, wt) : gather_dst(stage, wt);
    const bool one_page = kv_tile_in_one_page(j0, p); /* every row's page id: page0 */
    /* GATHER (a 16-bit cache without the map of tiles: every tile gathered, page_size 1 among
     * them): each row's source from the lane that looked it up a pair ahead (pair_row_srcs),
     * the rows unrolled so that their shuffles overlap; elsewhere (a pool under the map, whose
     * gathered tiles are the few partial ones; an FP8 cache, whose instances spill more
     * unrolled) a row at a time from its page id, as unrolled those instances ran slower
     * (docs/PERFORMANCE.md#hopper) */
#pragma unroll((FP8 || !GATHER) ? 1 : ROWS_PER_THREAD)
    for (int i = 0; i < ROWS_PER_THREAD; i++) {
        const int j = j0 + wt / ROW_LANES + ROW_STEP * i;
        const bool live = j < c.kv_end;
        const int bytes = live ? 16 : 0;
        int32_t page = 0;
        if constexpr (!GATHER)
            page = one_page ? page0 : gather_row_id(ids, k, i, wt);
        const uint32_t d = d0 + (uint32_t)(i * ROW_STEP) * 128u;
        if constexpr (GATHER) {
            const Kv *src = gather_row_src(ids, k, i, wt) + (wt % ROW_LANES) * 8;
#pragma unroll
            for (int kb = 0; kb < W_BLOCKS; kb++)
                if (MASK >> kb & 1u)
                    f.copy16(d + (uint32_t)kb * BLOCK_BYTES, src + kb * COL_BLOCK, bytes);
        } else if constexpr (FP8) {
            const uint8_t *src = kv_row_src(static_cast<const uint8_t *>(p.kv), page, j, live, p) +
                                 (wt % ROW_LANES) * 16;
#pragma unroll
            for (int kk = 0; kk < RAW_LANE_CHUNKS; kk++)
                if (MASK >> (2 * kk) & 1u)
                    cp_async16(d + (uint32_t)(2 * kk) * BLOCK_BYTES, src + kk * ROW_LANES * 16,
                               bytes);
            if ((MASK >> (W_BLOCKS - 1) & 1u) && fp8_fifth(wt))
                cp_async16(gather_dst_fp8_fifth(stage, wt) + (uint32_t)(i * ROW_STEP) * 128u,
                           src + RAW_LANE_CHUNKS * ROW_LANES * 16, bytes);
        } else {
            const Kv *src = kv_row_src(static_cast<const Kv *>(p.kv), page, j, live, p) +
                            (wt % ROW_LANES) * 8;
#pragma unroll
            for (int kb = 0; kb < W_BLOCKS; kb++)
                if (MASK >> kb & 1u)
                    f.copy16(d + (uint32_t)kb * BLOCK_BYTES, src + kb * COL_BLOCK, bytes);
        }
    }
    /* each block's previous phase (tile t - 2's), complete long since (its readers waited for
     * it before the hand-over this refill follows), waited here too: so that each arriving
     * thread has seen the phase it arrives after itself (compute-sanitizer's synccheck asks
     * for it; it costs a test a block) */
    if (t >= STAGES) {
#pragma unroll
        for (int kb = 0; kb < W_BLOCKS; kb++)
            if (MASK >> kb & 1u)
                mbar_wait_flat(&full[kb], (uint32_t)(((t - STAGES) / STAGES) & 1));
    }
#pragma unroll
    for (int kb = 0; kb < W_BLOCKS; kb++)
        if (MASK >> kb & 1u)
            cp_async_arrive_on(&full[kb]);
}

/* The first column block of a part's mask (s_issue_full's LEAD: a warpgroup's own refill). */
constexpr int first_block(uint32_t mask)
{
    int k = 0;
    while (!(mask >> k & 1u))
        k++;
    return k;
}

/* An FP8 cache's tile t of the item asked of the L2 a pair before its refill, by one bulk prefetch
 * from thread 0 of the warpgroup that will refill it (`page`: the page id of its first row,
 * looked up under the pair's products), where the tile lies in one page, before kv_end, inside
 * the pool (kv_tile_by_tma's condition: its 36,864 bytes contiguous). An FP8 tile's refill is
 * issued the moment its stage frees and its owner waits for the whole tile before converting
 * it, so part of each tile's DRAM latency sat on the pair's path: on the H200 the FP8 instances
 * took 0.993x the time with the prefetch over the harness's 120 shapes, 0.974-0.977x at B 16,
 * q_len 1, 131k (docs/PERFORMANCE.md#hopper). A 16-bit tile's twice the bytes keep its loop
 * bound by bandwidth, where the seesaw's L2 prefetch cost time. */
template <typename Kv>
__device__ __forceinline__ void prefetch_fp8_tile(const mlav_flash_params &p, const block_ctx &c,
                                                  int t, int32_t page, int wt)
{
    const int j0 = c.kv_begin + t * TILE_N;
    if (wt == 0 && t < c.n_tiles && kv_tile_by_tma(page, j0, c.kv_end, p))
        prefetch_l2(kv_row_src(static_cast<const Kv *>(p.kv), page, j0, true, p),
                    (uint32_t)(TILE_N * W * sizeof(Kv)));
    __syncwarp();
}

} // namespace seesaw
} // namespace mlav90

#endif
