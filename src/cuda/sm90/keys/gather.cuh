/* The keys kernel's gather: each tile's page ids and its 64 raw rows into the ring by
 * cp.async. */
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

/* The same page id copied into this thread's slot of tile t (`pages`: the PAGE region), 0 past
 * kv_end (`my_pages`: the thread's slot of tile 0), by cp.async in the group being filled: no
 * register waits for the page table. At page_size 1 each of a tile's rows has its own id, and a
 * load into a register whose store into shared memory waited for it held the warp ~L2 latency a
 * tile (Nsight Compute: 2.6-4.1 of 8.0-9.7 cycles between a warp's instructions on an H100); by
 * cp.async the FP8 cache took 0.67-0.73x the time at B 16, 131k (docs/PERFORMANCE.md#hopper).
 * Issued with the gather of tile t - AHEAD, it is read by the gather of tile t, AHEAD tiles
 * later: the same thread, after its wait for that group. */
__device__ __forceinline__ void tile_row_page_async(const mlav_flash_params &p, const block_ctx &c,
                                                    const int32_t *ptab, uint32_t my_pages, int t,
                                                    int tid)
{
    const int j = c.kv_begin + t * KT + (tid >> 2);
    const bool live = j < c.kv_end;
    const uint32_t k = live ? mlav_fastdiv_div((uint32_t)j, p.page_div) : 0u;
    cp_async4(my_pages + (uint32_t)(t % KSTAGES) * (THREADS * 4u), ptab + k, live ? 4 : 0);
}

/* Tile t's 64 raw rows into its stage: row tid / 4 (page id `page`: tile_row_page) by threads
 * 4 r .. 4 r + 3, each the 16-byte chunks 4 k + tid % 4 (64 contiguous bytes a row a step),
 * zero-filled past kv_end. */
__device__ __forceinline__ void gather_tile(const mlav_flash_params &p, const block_ctx &c,
                                            int32_t page, uint32_t ring, int t, int tid)
{
    const int r = tid >> 2, part = tid & 3;
    const int j = c.kv_begin + t * KT + r;
    const bool live = j < c.kv_end;
    const uint8_t *src =
        kv_row_src(static_cast<const uint8_t *>(p.kv), page, j, live, p) + part * 16;
    const uint32_t dst = ring + (uint32_t)(t % KSTAGES) * TILE_BYTES + (uint32_t)r * W +
                         (uint32_t)part * 16;
#pragma unroll
    for (int k = 0; k < W / 64; k++)
        cp_async16(dst + 64u * k, src + 64 * k, live ? 16 : 0);
}

} // namespace keys
} // namespace mlav90

#endif
