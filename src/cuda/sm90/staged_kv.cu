/* An FP8 E4M3 cache staged as F16 before the seesaw kernel (mlav_flash_sm90_stage, flash_sm90.h):
 * where many 64-row tiles read each KV tile (H x q_len of 512 and more), the seesaw kernel's
 * conversion of each tile in shared memory, once by every row tile, holds it at ~0.62 of the
 * BF16 cache's speed (docs/PERFORMANCE.md#hopper, "FP8 cache": shared memory caps it there); a
 * pass that converts each page once, 3 bytes a KV element of traffic, leaves the kernel the BF16
 * cache's work on F16 tiles by TMA. e4m3 to F16 is exact (convert.cuh), so the products see the
 * values the unstaged kernel converts. */
#include "flash_sm90.h"
#include "gather.cuh"

#include "../page_row.cuh"

namespace {

constexpr int STAGE_THREADS = 256;
constexpr int RAW_CHUNKS = mlav90::W / 8;                       /* 8-byte chunks of a raw row */
constexpr int PAGE_CHUNKS = MLAV_STAGED_PAGE_ROWS * RAW_CHUNKS; /* 4,608 */
constexpr int CHUNKS_PER_THREAD = PAGE_CHUNKS / STAGE_THREADS;  /* 18 */
static_assert(PAGE_CHUNKS % STAGE_THREADS == 0, "a page's chunks split evenly over the block");
static_assert(MLAV_STAGED_PAGE_ROWS == mlav90::TILE_N, "a staged page is one TMA tile");

/* 8 bytes that the pass reads once: not kept in L1. */
__device__ __forceinline__ uint2 ld_stream8(const void *src)
{
    return __ldcs(static_cast<const uint2 *>(src));
}

/* One staged page a block: the page's 64 rows x 72 raw chunks of 8 bytes, chunk k = 72 r + c of
 * row r by thread k mod 256, so that a warp's loads read 256 contiguous bytes of a row and its
 * stores write 512 contiguous bytes of the staged page; all 18 loads of a thread issued before
 * its first store. Raw chunk c of row r becomes F16 values 8 c .. 8 c + 7 of the staged row, the
 * page's 16-byte chunk k. */
__global__ void __launch_bounds__(STAGE_THREADS)
    stage_e4m3_kernel(const mlav_flash_params p, const mlav_staged_page *pages, uint4 *pool)
{
    const mlav_staged_page pg = pages[blockIdx.x];
    const int32_t *ptab = mlav_page_row_dev(p.page_table, p.page_table_rows,
                                            p.page_table_num_rows, p.max_pages, p.bad_pages, pg.b);
    const uint8_t *kv = static_cast<const uint8_t *>(p.kv);
    const int kv_end = pg.j0 + pg.rows;
    uint2 raw[CHUNKS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_THREAD; i++) {
        const int k = (int)threadIdx.x + STAGE_THREADS * i;
        const int r = k / RAW_CHUNKS, c = k - r * RAW_CHUNKS, j = pg.j0 + r;
        raw[i] = make_uint2(0u, 0u); /* rows past the request's end: F16 zeros */
        if (r < pg.rows)
            raw[i] = ld_stream8(
                mlav90::kv_row_src(kv, mlav90::kv_page_of(ptab, j, kv_end, p), j, true, p) +
                8 * c);
    }
    uint4 *dst = pool + (size_t)blockIdx.x * PAGE_CHUNKS;
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_THREAD; i++) {
        uint4 v;
        mlav::e4m3x4_to_half2x2(raw[i].x, v.x, v.y);
        mlav::e4m3x4_to_half2x2(raw[i].y, v.z, v.w);
        dst[(int)threadIdx.x + STAGE_THREADS * i] = v;
    }
}

} // namespace

mlav_status mlav_flash_sm90_stage(const mlav_flash_params *fp, const mlav_sm90_staging *sg,
                                  void *pool, mlav_flash_params *staged, cudaStream_t stream)
{
    if (reinterpret_cast<uintptr_t>(pool) % 16 != 0 || (sg->n_pages > 0 && pool == nullptr))
        return mlav_set_error(MLAV_ERR_INTERNAL,
                              "the staged pool at %p is not 16-byte aligned workspace", pool);
    if (sg->n_pages > 0) {
        stage_e4m3_kernel<<<(unsigned)sg->n_pages, STAGE_THREADS, 0, stream>>>(
            *fp, sg->pages, static_cast<uint4 *>(pool));
        MLAV_CUDA_TRY(cudaGetLastError());
    }
    *staged = *fp;
    staged->kv = pool;
    staged->page_table = sg->table;
    staged->page_table_rows = NULL;
    staged->page_table_num_rows = 0;
    staged->max_pages = sg->max_pages;
    staged->page_size = MLAV_STAGED_PAGE_ROWS;
    staged->page_div = mlav_fastdiv_make(MLAV_STAGED_PAGE_ROWS);
    staged->page_elems = MLAV_STAGED_PAGE_ROWS * MLAV_FLASH_W;
    staged->page_limit = (uint32_t)sg->n_pages;
    staged->num_pages = sg->n_pages;
    return MLAV_OK;
}
