/* The producer warpgroup's loads: Q once per block and the paged KV tiles, 16-byte cp.async
 * copies into the swizzled layout (smem_layout.cuh), published by the copying threads themselves
 * (publish_copies, sync.cuh); and the sanitizing pass that tiles with hidden keys need before P V.
 *
 * Each of the 128 producer threads owns one row of the 64 (row = thread / 2) and every other
 * 16-byte chunk of it (36 of 72): one page lookup per thread and tile, whatever the page size
 * (page_size 1 is a gather of 64 unrelated rows), and two neighbouring threads cover 32
 * contiguous bytes per copy. */
#ifndef MLAV_CUDA_SM90_GATHER_CUH
#define MLAV_CUDA_SM90_GATHER_CUH

#include <stdint.h>

#include "../flash.h"
#include "smem_layout.cuh"
#include "sync.cuh"

namespace mlav90 {

constexpr int PRODUCER_THREADS = 128;
constexpr int CHUNKS_PER_THREAD = ROW_CHUNKS / 2; /* 36 */
static_assert(PRODUCER_THREADS == 2 * TILE_N && PRODUCER_THREADS == 2 * BM, "two threads a row");

/* The page id of KV row j, 0 past kv_end (where nothing is read). */
__device__ __forceinline__ int32_t kv_page_of(const int32_t *ptab, int j, int kv_end,
                                              const mlav_flash_params &p)
{
    return j < kv_end ? ptab[mlav_fastdiv_div((uint32_t)j, p.page_div)] : 0;
}

/* Where KV row j is read from: its page's slot, or the plan's NaN row for a page id outside the
 * pool (the legal kernel's rule: mlaverify.h), or row 0 of the pool for a row past kv_end, which
 * is zero-filled without being read. 32-bit index arithmetic and one 64-bit product. */
template <typename T>
__device__ __forceinline__ const T *kv_row_src(const T *kv, int32_t page, int j, bool live,
                                               const mlav_flash_params &p)
{
    const uint32_t pg = (uint32_t)page, uj = (uint32_t)j;
    const uint32_t slot = uj - mlav_fastdiv_div(uj, p.page_div) * (uint32_t)p.page_size;
    const T *base = live && pg >= p.page_limit ? static_cast<const T *>(p.nan_row) : kv;
    const size_t off = live && pg < p.page_limit ? (size_t)pg * p.page_elems + slot * W : 0;
    return base + off;
}

/* This thread's half of one 576-element row into row `r` of a 64-row operand at shared address
 * `dst` (16 bytes a copy; `live` false: zero-filled, `src` not read). */
template <typename T>
__device__ __forceinline__ void copy_row_half(uint32_t dst, const T *src, bool live, int r, int h)
{
    const int bytes = live ? 16 : 0;
#pragma unroll
    for (int k = 0; k < CHUNKS_PER_THREAD; k++) {
        const int c = h + 2 * k;
        cp_async16(dst + sw128_chunk(r, c), src + c * 8, bytes);
    }
}

/* Q's 64 rows (m0 + r of the request's M folded rows, whose first is q at row q_start * H;
 * rows past M zero-filled) into the Q region. `pt`: the producer thread, 0..127. */
template <typename T>
__device__ __forceinline__ void load_q(uint32_t sq, const T *qg, int m0, int M, int pt)
{
    const int r = pt >> 1, h = pt & 1;
    const bool live = m0 + r < M;
    copy_row_half(sq, qg + (live ? (size_t)(m0 + r) * W : 0), live, r, h);
}

/* KV rows j0 .. j0 + 63 into a stage; this thread's row j0 + pt / 2, whose page id `page` was
 * looked up ahead (kv_page_of). */
template <typename T>
__device__ __forceinline__ void load_kv_tile(uint32_t stage, const T *kv, int32_t page, int j0,
                                             int kv_end, const mlav_flash_params &p, int pt)
{
    const int r = pt >> 1, h = pt & 1;
    const int j = j0 + r;
    const bool live = j < kv_end;
    copy_row_half(stage, kv_row_src(kv, page, j, live, p), live, r, h);
}

/* Whether KV tile [j0, j0 + 64) needs its V part sanitized before P V: it holds draft keys,
 * which some rows may not see, or rows past the split end (the legal kernel's rule for its
 * tiles). */
__device__ __forceinline__ bool tile_has_hidden_keys(int j0, int prefix, int kv_end)
{
    return !(j0 + TILE_N <= prefix && j0 + TILE_N <= kv_end);
}

/* Zero the Inf and NaN elements of the V part (features 0..511, column blocks 0..7, the first
 * 64 KB of the stage) of a tile with hidden keys, by `nthreads` threads (thread `i`), after every
 * S product of the tile has read K and before P V reads V. Exact for the same reason as the
 * legal kernel's fragment sanitizing: c_kv is also the key, so a row that sees a non-finite key
 * has a non-finite score, and a row that does not gives it weight 0, which times Inf or NaN on
 * the tensor cores would otherwise reach rows that do not see the key. `exp_mask`: the 16-bit
 * type's exponent bits. */
__device__ __forceinline__ void sanitize_v(unsigned char *stage, uint32_t exp_mask, int i,
                                           int nthreads)
{
    constexpr int V_CHUNKS = (DL / COL_BLOCK) * (int)BLOCK_BYTES / 16; /* 4096 */
    const uint32_t m2 = exp_mask | (exp_mask << 16);
    for (int c = i; c < V_CHUNKS; c += nthreads) {
        uint4 *q = reinterpret_cast<uint4 *>(stage) + c;
        uint4 v = *q;
        uint32_t *w = reinterpret_cast<uint32_t *>(&v);
        bool any = false;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const uint32_t x = w[e] & m2;
            const uint32_t lo = (x & 0xffffu) == exp_mask ? 0xffff0000u : 0xffffffffu;
            const uint32_t hi = (x >> 16) == exp_mask ? 0x0000ffffu : 0xffffffffu;
            any |= (lo & hi) != 0xffffffffu;
            w[e] &= lo & hi;
        }
        if (any)
            *q = v;
    }
}

} // namespace mlav90

#endif
