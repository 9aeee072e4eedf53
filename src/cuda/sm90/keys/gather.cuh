/* The keys kernel's gather: each tile's page ids into shared memory by cp.async, and its 64 raw
 * rows into the ring by bulk copies. */
#ifndef MLAV_CUDA_SM90_KEYS_GATHER_CUH
#define MLAV_CUDA_SM90_KEYS_GATHER_CUH

#include "traits.cuh"

namespace mlav90 {
namespace keys {

/* The page id of this thread's row of tile t (row tid / 4; 0 past kv_end). */
__device__ __forceinline__ int32_t tile_row_page(const mlav_flash_params &p, const block_ctx &c,
                                                 const int32_t *ptab, int t, int tid)
{
    return kv_page_of(ptab, c.kv_begin + t * KT + (tid >> 2), c.kv_end, p);
}

/* The page id of this thread's row of tile t copied into the row's slot of tile t (`row_slot`:
 * the row's slot of tile 0 in the PAGE region), 0 past kv_end, by cp.async in the group being
 * filled, by the row's first thread only (tid % 4 == 0): no register waits for the page table.
 * At page_size 1 each of a tile's rows has its own id, and a load into a register whose store
 * into shared memory waited for it held the warp ~L2 latency a tile (Nsight Compute: 2.6-4.1 of
 * 8.0-9.7 cycles between a warp's instructions on an H100); by cp.async the FP8 cache took
 * 0.67-0.73x the time at B 16, 131k (docs/PERFORMANCE.md#hopper). A 4-byte cp.async costs a
 * shared-memory wavefront a lane (8.0 M of the 16-row instance's 68.0 M at B 16, 131k, when all
 * four threads of a row copied its id), so one thread a row copies it. Issued with the gather of
 * tile t - AHEAD, it is read by the gather of tile t, AHEAD tiles later, by the row's four
 * threads after their waits for that group and the block barrier that follows them. */
__device__ __forceinline__ void tile_row_page_async(const mlav_flash_params &p, const block_ctx &c,
                                                    const int32_t *ptab, uint32_t row_slot, int t,
                                                    int tid)
{
    if (tid & 3)
        return;
    const int j = c.kv_begin + t * KT + (tid >> 2);
    const bool live = j < c.kv_end;
    const uint32_t k = live ? mlav_fastdiv_div((uint32_t)j, p.page_div) : 0u;
    cp_async4(row_slot + (uint32_t)(t % KSTAGES) * (KT * 4u), ptab + k, live ? 4 : 0);
}

/* Tile t's 64 raw rows into its stage by bulk copies (cp.async.bulk: the tensor memory
 * accelerator's, no load/store unit work and no register held by a copy in flight), reported on
 * the stage's barrier `full` (complete_tx), whose one expected arrival, thread 0's, adds the
 * tile's live bytes. Nsight Compute had the 16-row instance's 16-byte cp.async copies at 9.4 M of
 * its 68.0 M shared-memory wavefronts beyond the ideal, and the first instruction that reused
 * their address registers at 7.3% of its stall samples (B 16, 131k, page_size 64, an H100). A
 * whole tile inside one page of the pool (a page_size of at least 64; every row's page id, `page`,
 * the same) is 36,864 contiguous bytes there and here: one copy, thread 0's. Any other tile
 * (across pages, a split's last partial tile, a page id outside the pool, which reads the plan's
 * NaN row): a copy of 576 bytes a live row, row tid / 4's by thread 4 r (page id `page`: its
 * row's), and the rows past kv_end zeroed by their four threads' stores (no bulk copy zero-fills;
 * the block barrier before the tile's readers orders them). */
__device__ __forceinline__ void gather_tile(const mlav_flash_params &p, const block_ctx &c,
                                            int32_t page, uint32_t ring, uint64_t *full, int t,
                                            int tid)
{
    const uint8_t *kv = static_cast<const uint8_t *>(p.kv);
    const uint32_t stage = ring + (uint32_t)(t % KSTAGES) * TILE_BYTES;
    uint64_t *bar = full + t % KSTAGES;
    const int j0 = c.kv_begin + t * KT;
    const int live_rows = min(KT, c.kv_end - j0); /* >= 1: a block's tiles start before kv_end */
    if (tid == 0)
        mbar_arrive_expect_tx(bar, (uint32_t)live_rows * W);
    /* the stage's last readers (tile t - KSTAGES's, before the block barrier this follows) read
     * it through the generic proxy; each copying thread orders them before its async writes */
    if (live_rows == KT && (uint32_t)page < p.page_limit && kv_tile_in_one_page(j0, p)) {
        if (tid == 0) {
            fence_proxy_async();
            bulk_copy_g2s(stage, kv_row_src(kv, page, j0, true, p), TILE_BYTES, bar);
        }
        return;
    }
    const int r = tid >> 2;
    if (r < live_rows) {
        if ((tid & 3) == 0) {
            fence_proxy_async();
            bulk_copy_g2s(stage + (uint32_t)r * W, kv_row_src(kv, page, j0 + r, true, p), W, bar);
        }
    } else {
        const uint32_t dst = stage + (uint32_t)r * W + (uint32_t)(tid & 3) * 16;
#pragma unroll
        for (int k = 0; k < W / 64; k++)
            sts16_zero(dst + 64u * k);
    }
}

} // namespace keys
} // namespace mlav90

#endif
