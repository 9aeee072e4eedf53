/* The producer warpgroup's loads: Q once per block and the paged KV tiles, 16-byte cp.async
 * copies into the swizzled layout (smem_layout.cuh), published by the copying threads themselves
 * (publish_copies, sync.cuh); an FP8 cache's tiles copied raw and converted to F16 in place, and
 * BF16 q over it converted to F16 (below); and the sanitizing pass that tiles with hidden keys
 * need before P V.
 *
 * Eight neighbouring producer threads share a row, each copying every eighth 16-byte chunk of it
 * (9 of 72, one per 128-byte column block), so a warp's copy instruction moves 4 whole rows' 128
 * contiguous bytes, full cache lines; a thread covers rows q, q + 16, q + 32, q + 48 (q = thread
 * / 8), 36 copies and 4 page lookups a tile. With two threads a row (32 bytes of 16 rows per
 * instruction, one lookup a tile) a shuffled page_size 1 pool ran at half the speed of page_size
 * 64 once it outgrew the L2: each row's lines were requested a sector at a time across 36
 * instructions. The chunks a thread writes all sit at one swizzled position of their 128-byte
 * row pieces (row % 8 is the same for its 4 rows), so its shared addresses are a base plus
 * constants. A 16-bit cache's tiles that lie inside one page and the split go by TMA instead
 * (load_kv_tile_tma, below), where the launch built the pool's tensor map. */
#ifndef MLAV_CUDA_SM90_GATHER_CUH
#define MLAV_CUDA_SM90_GATHER_CUH

#include <stdint.h>

#include "../convert.cuh"
#include "../flash.h"
#include "../q_to_f16.cuh"
#include "kv_tensor_map.h"
#include "smem_layout.cuh"
#include "sync.cuh"

namespace mlav90 {

constexpr int PRODUCER_THREADS = 128;
constexpr int ROW_LANES = 8;                                /* threads a row */
constexpr int ROW_STEP = PRODUCER_THREADS / ROW_LANES;      /* 16: rows between a thread's rows */
constexpr int ROWS_PER_THREAD = TILE_N / ROW_STEP;          /* 4 */
constexpr int CHUNKS_PER_ROW = ROW_CHUNKS / ROW_LANES;      /* 9: one per column block */
static_assert(ROW_LANES == 8 && CHUNKS_PER_ROW == W_BLOCKS && TILE_N == BM &&
                  ROW_STEP % 8 == 0,
              "a thread's chunks: one per column block, at one swizzled position");

/* The page id of KV row j, 0 past kv_end (where nothing is read). */
__device__ __forceinline__ int32_t kv_page_of(const int32_t *ptab, int j, int kv_end,
                                              const mlav_flash_params &p)
{
    return j < kv_end ? ptab[mlav_fastdiv_div((uint32_t)j, p.page_div)] : 0;
}

/* The page ids of this thread's 4 rows of the tile starting at KV row j0. */
__device__ __forceinline__ void kv_pages_of(int32_t (&pages)[ROWS_PER_THREAD], const int32_t *ptab,
                                            int j0, int kv_end, const mlav_flash_params &p, int pt)
{
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; i++)
        pages[i] = kv_page_of(ptab, j0 + pt / ROW_LANES + ROW_STEP * i, kv_end, p);
}

/* KV row j's slot inside its page. */
__device__ __forceinline__ uint32_t kv_slot_of(int j, const mlav_flash_params &p)
{
    const uint32_t uj = (uint32_t)j;
    return uj - mlav_fastdiv_div(uj, p.page_div) * (uint32_t)p.page_size;
}

/* Where KV row j is read from: its page's slot, or the plan's NaN row for a page id outside the
 * pool (the legal kernel's rule: mlaverify.h), or row 0 of the pool for a row past kv_end, which
 * is zero-filled without being read. 32-bit index arithmetic and one 64-bit product. */
template <typename T>
__device__ __forceinline__ const T *kv_row_src(const T *kv, int32_t page, int j, bool live,
                                               const mlav_flash_params &p)
{
    const uint32_t pg = (uint32_t)page, slot = kv_slot_of(j, p);
    const T *base = live && pg >= p.page_limit ? static_cast<const T *>(p.nan_row) : kv;
    const size_t off = live && pg < p.page_limit ? (size_t)pg * p.page_elems + slot * W : 0;
    return base + off;
}

/* This thread's shared address of its first chunk in a 64-row operand at `op`: row pt / 8,
 * column block 0, chunk position pt % 8 swizzled by the row. */
__device__ __forceinline__ uint32_t gather_dst(uint32_t op, int pt)
{
    const int r = pt / ROW_LANES, c = pt % ROW_LANES;
    return op + sw128_chunk(r, c);
}

/* This thread's 9 chunks of one 576-element row (its i-th, row pt / 8 + 16 i) from `src`
 * (16 bytes a copy; `live` false: zero-filled, `src` not read). */
template <typename T>
__device__ __forceinline__ void copy_row_part(uint32_t dst0, const T *src, bool live, int i,
                                              int pt)
{
    const int bytes = live ? 16 : 0;
    const T *s = src + (pt % ROW_LANES) * 8;
    const uint32_t d = dst0 + (uint32_t)(i * ROW_STEP) * 128u;
#pragma unroll
    for (int k = 0; k < CHUNKS_PER_ROW; k++)
        cp_async16(d + (uint32_t)k * BLOCK_BYTES, s + k * COL_BLOCK, bytes);
}

/* Q's 64 rows (m0 + r of the request's M folded rows, whose first is q at row q_start * H;
 * rows past M zero-filled) into the Q region. `pt`: the producer thread, 0..127. */
template <typename T>
__device__ __forceinline__ void load_q(uint32_t sq, const T *qg, int m0, int M, int pt)
{
    const uint32_t d0 = gather_dst(sq, pt);
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; i++) {
        const int r = pt / ROW_LANES + ROW_STEP * i;
        const bool live = m0 + r < M;
        copy_row_part(d0, qg + (live ? (size_t)(m0 + r) * W : 0), live, i, pt);
    }
}

/* KV rows j0 .. j0 + 63 into a stage; this thread's rows j0 + pt / 8 + 16 i, whose page ids
 * were looked up ahead (kv_pages_of). */
template <typename T>
__device__ __forceinline__ void load_kv_tile(uint32_t stage, const T *kv,
                                             const int32_t (&pages)[ROWS_PER_THREAD], int j0,
                                             int kv_end, const mlav_flash_params &p, int pt)
{
    const uint32_t d0 = gather_dst(stage, pt);
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; i++) {
        const int j = j0 + pt / ROW_LANES + ROW_STEP * i;
        const bool live = j < kv_end;
        copy_row_part(d0, kv_row_src(kv, pages[i], j, live, p), live, i, pt);
    }
}

/* ---- Whole tiles by TMA (a 16-bit cache, MLAV90_TMA) ------------------------------------------
 * A tile whose 64 rows lie in one page is 64 contiguous rows of the pool: 9 boxes of the pool's
 * tensor map (kv_tensor_map.h), one per column block, each copied by the tensor memory
 * accelerator straight into its column block of the stage in the 128B swizzle, from one thread,
 * completing on the stage's "full" barrier by transaction bytes. The other tiles (across pages,
 * a split's last partial tile, whose rows past kv_end cp.async zero-fills, a page id outside the
 * pool, which reads the plan's NaN row) keep the gather above. */

/* Whether the 64 rows from KV row j0 lie in one page (a page_size of at least 64, j0 at a slot
 * that leaves room): then every row's page id is the first's. */
__device__ __forceinline__ bool kv_tile_in_one_page(int j0, const mlav_flash_params &p)
{
    return (int)kv_slot_of(j0, p) + TILE_N <= p.page_size;
}

/* Whether the tile at KV row j0 is copied by TMA, in a block whose launch holds the pool's map
 * (which says the pool's pages hold whole tiles: kv_map_fits): the tile's rows inside one page
 * and before kv_end, its page id inside the pool. `page`: this thread's first row's page id
 * (kv_pages_of), the tile's when it lies in one page, so the answer is the same for every
 * producer thread without a vote. */
__device__ __forceinline__ bool kv_tile_by_tma(int32_t page, int j0, int kv_end,
                                               const mlav_flash_params &p)
{
    return kv_tile_in_one_page(j0, p) && j0 + TILE_N <= kv_end && (uint32_t)page < p.page_limit;
}

/* KV rows j0 .. j0 + 63 (one page's, `page`: kv_tile_by_tma) into a stage by TMA, published on
 * `full` (its count of PRODUCER_THREADS arrivals, as a gathered tile's): producer thread 0
 * arrives with the tile's 73,728 bytes expected, then issues the 9 copies that complete them;
 * the other threads arrive at once. The phase completes when the bytes have landed, so nothing
 * publishes this tile later. `map`: the generic address of the kernel's __grid_constant__ map,
 * whose row coordinate is page x page_size + the row's slot (kv_map_fits: it fits an int32). */
__device__ __forceinline__ void load_kv_tile_tma(uint32_t stage, const CUtensorMap *map,
                                                 uint64_t *full, int32_t page, int j0,
                                                 const mlav_flash_params &p, int pt)
{
    if (pt != 0) {
        mbar_arrive(full);
        return;
    }
    const int32_t y = page * p.page_size + (int32_t)kv_slot_of(j0, p);
    mbar_arrive_expect_tx(full, OPERAND_BYTES);
#pragma unroll
    for (int k = 0; k < W_BLOCKS; k++)
        tma_load_2d(stage + (uint32_t)k * BLOCK_BYTES, map, k * COL_BLOCK, y, full);
}

/* Ask the L2 for this thread's rows of the tile starting at KV row j0 (the first of a row's 8
 * threads asks for the whole row, one bulk prefetch), whose page ids were looked up: the
 * producer does it a tile before it gathers the tile, so that two tiles are in flight from
 * memory while the ring holds two in shared memory. Rows past kv_end are not asked for; a page
 * id outside the pool asks for the NaN row. Only with pages of at least a tile, whose rows are
 * contiguous: over page_size 1 (rows scattered over the pool) the 64 row prefetches a tile cost
 * more than they hide (B 16, H 128, q_len 16, 32768: 12% slower with them,
 * docs/PERFORMANCE.md#hopper); pages of 2 to 63 rows, unmeasured, are taken as page_size 1. */
template <typename T>
__device__ __forceinline__ void prefetch_kv_tile(const T *kv,
                                                 const int32_t (&pages)[ROWS_PER_THREAD], int j0,
                                                 int kv_end, const mlav_flash_params &p, int pt)
{
    if (pt % ROW_LANES != 0 || p.page_size < TILE_N)
        return;
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; i++) {
        const int j = j0 + pt / ROW_LANES + ROW_STEP * i;
        if (j < kv_end)
            prefetch_l2(kv_row_src(kv, pages[i], j, true, p), (uint32_t)(W * sizeof(T)));
    }
}

/* ---- An FP8 E4M3 cache ------------------------------------------------------------------------
 * Its tiles reach the math warpgroups as F16 in the layout above, so the stages do not change
 * (wgmma takes neither an 8-bit MN-major B, which V is, nor mixed operand types; e4m3 converts
 * to F16 exactly, subnormals included, and NaN stays NaN: convert.cuh). Each thread copies its
 * share of a row's 576 bytes into the stage itself by 16-byte cp.async, and the tile is
 * converted in place once it has landed (fp8_convert_tile); the layout has no staging memory to
 * spare (smem_layout.cuh).
 * Eight threads a row, as the 16-bit gather: lane l = pt % 8 copies raw chunks l, l + 8,
 * l + 16, l + 24 (features 16 (l + 8 k) ..) and lanes 0..3 also 32 + l, so a warp's copy moves 4
 * rows' 128 contiguous bytes (the fifth 64). The raw 128 bytes of features 128 k .. 128 k + 127
 * land whole in one row piece of column block 2 k + 1 (chunk l at position l, swizzled by the
 * row), the fifth's 64 in the upper half of block 8's, so each copy instruction writes whole
 * 128-byte row pieces: with raw chunk c at F16 chunk 2c's place (every other 16 bytes), half of
 * every row piece written, the H200 profile showed half of the shared wavefronts and half of the
 * L2 sectors of the FP8 seesaw kernel excessive, the kernel at 24% of DRAM bandwidth. Raw chunk
 * l + 8 k converts to F16 chunks 2 l + 16 k and 2 l + 16 k + 1: column block l / 4 + 2 k,
 * positions 2 (l % 4) ^ (r % 8) and that ^ 1, over raw bytes of the same row piece (block
 * 2 k + 1) that other lanes of the row read: a row's lanes (one warp) read their raw chunks of a
 * row piece before any of them writes it (__syncwarp between). A thread's raw chunks and its F16
 * outputs each sit at a base plus 2 k column blocks. */
constexpr int RAW_ROW_CHUNKS = W / 16;                 /* 36 16-byte chunks of e4m3 a row */
constexpr int RAW_LANE_CHUNKS = RAW_ROW_CHUNKS / ROW_LANES; /* 4 a lane; lanes 0..3 a fifth */
static_assert(RAW_ROW_CHUNKS == RAW_LANE_CHUNKS * ROW_LANES + ROW_LANES / 2 &&
                  2 * RAW_LANE_CHUNKS == W_BLOCKS - 1,
              "raw chunk l + 8k of a row in column block 2k + 1, the fifth in the last");

/* Shared memory at a shared-space address: 16, 8 and 4 bytes. */
__device__ __forceinline__ uint4 lds16(uint32_t a)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a)
                 : "memory");
    return v;
}

__device__ __forceinline__ uint2 lds8(uint32_t a)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
    return v;
}

__device__ __forceinline__ int32_t lds4(uint32_t a)
{
    int32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
    return v;
}

/* 16 zero bytes at shared address `dst`. */
__device__ __forceinline__ void sts16_zero(uint32_t dst)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0u) : "memory");
}

__device__ __forceinline__ void sts16(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z),
                 "r"(w)
                 : "memory");
}

/* This thread's shared address of its first raw chunk (l = pt % 8 of row pt / 8) in a stage at
 * `op`: column block 1, position l swizzled by the row; chunk l + 8 k at + 2 k blocks. */
__device__ __forceinline__ uint32_t gather_dst_fp8(uint32_t op, int pt)
{
    return op + sw128_chunk(pt / ROW_LANES, ROW_LANES + pt % ROW_LANES);
}

/* Its fifth raw chunk (lanes 0..3, raw chunk 32 + l): column block 8, position 4 + l swizzled
 * (the upper half of the row piece whose F16 it becomes). */
__device__ __forceinline__ uint32_t gather_dst_fp8_fifth(uint32_t op, int pt)
{
    return op + sw128_chunk(pt / ROW_LANES, 8 * (W_BLOCKS - 1) + ROW_LANES / 2 + pt % ROW_LANES);
}

/* The shared address of this thread's first F16 output chunk (raw chunk l's: F16 chunk 2 l of
 * row pt / 8); raw chunk l + 8 k's at + 2 k blocks, each with its partner at ^ 16. */
__device__ __forceinline__ uint32_t fp8_out_dst(uint32_t op, int pt)
{
    return op + sw128_chunk(pt / ROW_LANES, 2 * (pt % ROW_LANES));
}

/* Whether this thread copies a fifth raw chunk of its rows (bytes 512 .. 575). */
__device__ __forceinline__ bool fp8_fifth(int pt)
{
    return pt % ROW_LANES < ROW_LANES / 2;
}

/* KV rows j0 .. j0 + 63 of an FP8 cache (`kv`: its bytes) into a stage, raw (fp8_convert_tile
 * converts them once landed); this thread's rows as load_kv_tile's. */
__device__ __forceinline__ void load_kv_tile(uint32_t stage, const uint8_t *kv,
                                             const int32_t (&pages)[ROWS_PER_THREAD], int j0,
                                             int kv_end, const mlav_flash_params &p, int pt)
{
    const uint32_t d0 = gather_dst_fp8(stage, pt), f0 = gather_dst_fp8_fifth(stage, pt);
    const bool fifth = fp8_fifth(pt);
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; i++) {
        const int j = j0 + pt / ROW_LANES + ROW_STEP * i;
        const bool live = j < kv_end;
        const int bytes = live ? 16 : 0;
        const uint8_t *src = kv_row_src(kv, pages[i], j, live, p) + (pt % ROW_LANES) * 16;
        const uint32_t rows = (uint32_t)(i * ROW_STEP) * 128u;
#pragma unroll
        for (int k = 0; k < RAW_LANE_CHUNKS; k++)
            cp_async16(d0 + rows + (uint32_t)(2 * k) * BLOCK_BYTES, src + k * ROW_LANES * 16,
                       bytes);
        if (fifth)
            cp_async16(f0 + rows, src + RAW_LANE_CHUNKS * ROW_LANES * 16, bytes);
    }
}

/* One raw chunk `v` (16 e4m3 values) to its two F16 chunks, at `a` and a ^ 16. */
__device__ __forceinline__ void fp8_convert_chunk(uint32_t a, const uint4 &v)
{
    uint32_t h[8];
    mlav::e4m3x4_to_half2x2(v.x, h[0], h[1]);
    mlav::e4m3x4_to_half2x2(v.y, h[2], h[3]);
    mlav::e4m3x4_to_half2x2(v.z, h[4], h[5]);
    mlav::e4m3x4_to_half2x2(v.w, h[6], h[7]);
    sts16(a, h[0], h[1], h[2], h[3]);
    sts16(a ^ 16u, h[4], h[5], h[6], h[7]);
}

/* The raw chunks this thread copied (load_kv_tile's mapping; any full warp of threads pt may
 * convert a landed tile) of the tile in `stage` to F16, in place, after the tile has landed and
 * before its readers: every chunk, live or not (a row past kv_end was zero-filled raw, and its
 * F16 must be zeros too, not the last tile's values). Called by whole warps: the row's lanes
 * read a row piece's raw chunks before any lane writes it (__syncwarp). ROW_BATCH: a row's 4-5
 * chunks read together, then written (their loads in flight together; 20 registers), else a
 * chunk at a time (the producer warpgroup's 56 registers). */
template <bool ROW_BATCH>
__device__ __forceinline__ void fp8_convert_tile(uint32_t stage, int pt)
{
    const uint32_t d0 = gather_dst_fp8(stage, pt), f0 = gather_dst_fp8_fifth(stage, pt);
    const uint32_t o0 = fp8_out_dst(stage, pt);
    const bool fifth = fp8_fifth(pt);
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; i++) {
        const uint32_t rows = (uint32_t)(i * ROW_STEP) * 128u;
        if constexpr (ROW_BATCH) {
            uint4 v[RAW_LANE_CHUNKS + 1];
#pragma unroll
            for (int k = 0; k < RAW_LANE_CHUNKS; k++)
                v[k] = lds16(d0 + rows + (uint32_t)(2 * k) * BLOCK_BYTES);
            if (fifth)
                v[RAW_LANE_CHUNKS] = lds16(f0 + rows);
            __syncwarp();
#pragma unroll
            for (int k = 0; k < RAW_LANE_CHUNKS; k++)
                fp8_convert_chunk(o0 + rows + (uint32_t)(2 * k) * BLOCK_BYTES, v[k]);
            if (fifth)
                fp8_convert_chunk(o0 + rows + (uint32_t)(2 * RAW_LANE_CHUNKS) * BLOCK_BYTES,
                                  v[RAW_LANE_CHUNKS]);
        } else {
#pragma unroll
            for (int k = 0; k <= RAW_LANE_CHUNKS; k++) {
                const bool on = k < RAW_LANE_CHUNKS || fifth;
                uint4 v = make_uint4(0u, 0u, 0u, 0u);
                if (on)
                    v = lds16(k < RAW_LANE_CHUNKS ? d0 + rows + (uint32_t)(2 * k) * BLOCK_BYTES
                                                  : f0 + rows);
                __syncwarp();
                if (on)
                    fp8_convert_chunk(o0 + rows + (uint32_t)(2 * k) * BLOCK_BYTES, v);
            }
        }
    }
}

/* BF16 q over an FP8 cache: the Q tile at `sq` to F16 in place by the producer warpgroup, by the
 * rule of q_to_f16.cuh (times 2^-shift, the largest finite |q| of the block's 64 rows in
 * [2^14, 2^15)), once every producer thread's Q copies have landed; returns 2^shift, which the
 * scores take back (kv_scale.cuh, fp8_score_factors). Each thread reads and converts the chunks
 * it copied (load_q); the block's maximum meets through `red` (8 words of shared scratch) and
 * the producer's named barrier BAR, once (twice when Q holds Inf or NaN). */
template <int BAR>
__device__ __forceinline__ float q_tile_to_f16(uint32_t sq, uint32_t *red, int pt)
{
    const uint32_t d0 = gather_dst(sq, pt);
    const auto fold = [&](bool finite) {
        uint32_t m2 = 0;
#pragma unroll
        for (int i = 0; i < ROWS_PER_THREAD; i++)
#pragma unroll
            for (int k = 0; k < CHUNKS_PER_ROW; k++) {
                const uint4 v =
                    lds16(d0 + (uint32_t)(i * ROW_STEP) * 128u + (uint32_t)k * BLOCK_BYTES);
                m2 = mlav::q_bf16_absmax_fold(m2, v.x, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v.y, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v.z, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v.w, finite);
            }
        return m2;
    };
    const auto meet = [] {
        asm volatile("bar.sync %0, %1;\n" ::"n"(BAR), "n"(PRODUCER_THREADS) : "memory");
    };
    const uint32_t mb =
        mlav::q_block_absmax<PRODUCER_THREADS / 32>(fold, meet, red, pt >> 5, pt & 31);
    const int shift = mlav::q_f16_shift(mb);
    const float down = mlav::q_f16_down(shift);
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; i++)
#pragma unroll
        for (int k = 0; k < CHUNKS_PER_ROW; k++) {
            const uint32_t a = d0 + (uint32_t)(i * ROW_STEP) * 128u + (uint32_t)k * BLOCK_BYTES;
            const uint4 v = lds16(a);
            sts16(a, mlav::q_bf16x2_to_f16x2(v.x, down), mlav::q_bf16x2_to_f16x2(v.y, down),
                  mlav::q_bf16x2_to_f16x2(v.z, down), mlav::q_bf16x2_to_f16x2(v.w, down));
        }
    return mlav::q_f16_unshift(shift);
}

/* Whether KV tile [j0, j0 + 64) has keys some rows do not see (the legal kernel's rule for its
 * tiles): draft keys, or rows past the split end. Its scores are masked key by key, and its
 * draft rows' V sanitized before P V (hidden_v_rows). */
__device__ __forceinline__ bool tile_has_hidden_keys(int j0, int prefix, int kv_end)
{
    return !(j0 + TILE_N <= prefix && j0 + TILE_N <= kv_end);
}

/* sanitize_v's work on one 16-byte chunk `q` of V (`m2`: the exponent mask in both halves). */
__device__ __forceinline__ void sanitize_chunk(uint4 *q, uint32_t exp_mask, uint32_t m2)
{
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

/* The rows of tile [j0, j0 + 64) that sanitize_v reads: its draft keys [prefix, kv_end), the
 * only rows some query rows may not see that hold data. A row past kv_end holds zeros (the
 * gathers zero-fill it; TMA copies only tiles before kv_end), and a prefix row is seen by every
 * row. */
struct v_rows {
    int lo, hi;
};

__device__ __forceinline__ v_rows hidden_v_rows(int j0, int prefix, int kv_end)
{
    return {max(prefix - j0, 0), min(kv_end - j0, TILE_N)};
}

/* Zero the Inf and NaN elements of the V part (features 0..511, column blocks 0..7, the first
 * 64 KB of the stage) of rows `r` of a tile with hidden keys, by `nthreads` threads (thread `i`),
 * after every S product of the tile has read K and before P V reads V. Exact for the same reason
 * as the legal kernel's fragment sanitizing: c_kv is also the key, so a row that sees a
 * non-finite key has a non-finite score, and a row that does not gives it weight 0, which times
 * Inf or NaN on the tensor cores would otherwise reach rows that do not see the key.
 * `exp_mask`: the 16-bit type's exponent bits. A row's 128 bytes of a column block are one
 * swizzled line, so rows lo..hi - 1 of each block are 16 (hi - lo) chunks from row lo's. */
__device__ __forceinline__ void sanitize_v(unsigned char *stage, uint32_t exp_mask, v_rows r,
                                           int i, int nthreads)
{
    const uint32_t m2 = exp_mask | (exp_mask << 16);
    const int chunks = (r.hi - r.lo) * (128 / 16);
#pragma unroll
    for (int kb = 0; kb < DL / COL_BLOCK; kb++) {
        uint4 *q = reinterpret_cast<uint4 *>(stage + kb * BLOCK_BYTES) + r.lo * (128 / 16);
        for (int c = i; c < chunks; c += nthreads)
            sanitize_chunk(q + c, exp_mask, m2);
    }
}

/* sanitize_v a chunk at a time (not unrolled), for a caller whose registers are full. */
__device__ __forceinline__ void sanitize_v_lean(unsigned char *stage, uint32_t exp_mask,
                                                v_rows r, int i, int nthreads)
{
    const uint32_t m2 = exp_mask | (exp_mask << 16);
    const int chunks = (r.hi - r.lo) * (128 / 16);
#pragma unroll 1
    for (int kb = 0; kb < DL / COL_BLOCK; kb++) {
        uint4 *q = reinterpret_cast<uint4 *>(stage + kb * BLOCK_BYTES) + r.lo * (128 / 16);
#pragma unroll 1
        for (int c = i; c < chunks; c += nthreads)
            sanitize_chunk(q + c, exp_mask, m2);
    }
}

} // namespace mlav90

#endif
