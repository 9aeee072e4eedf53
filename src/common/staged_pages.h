/* The pages of an FP8 cache staged as F16 before the sm_90a seesaw kernel (src/cuda/sm90/
 * staged_kv.cu): every request's KV rows, in order, in pages of 64 rows of their own, so that the
 * kernel reads the staged pool as a 16-bit cache of page_size 64 through a table of its own.
 * Pure functions of a plan's lengths, on the host at plan time; tests/test_staged_pages.c checks
 * them on the CPU. */
#ifndef MLAV_COMMON_STAGED_PAGES_H
#define MLAV_COMMON_STAGED_PAGES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A staged page's rows per page: the sm_90a kernels' KV tile, whose whole tiles go by TMA. */
#define MLAV_STAGED_PAGE_ROWS 64

/* One staged page: request b's KV rows j0 .. j0 + rows - 1 (rows = 64, fewer on a request's
 * last page), staged at its index in the plan's list. */
typedef struct mlav_staged_page {
    int32_t b, j0, rows;
} mlav_staged_page;

/* The staged pages of `batch` requests of kv_lens[b] rows each: their count into *n_pages and
 * the most of one request into *max_pages (the staged table's row stride, at least 1). Returns
 * 0, or -1 where the count passes INT32_MAX / MLAV_STAGED_PAGE_ROWS (a staged row's index then
 * leaves int32, which the kernels' page arithmetic takes) or a length is negative. */
static inline int mlav_staged_count(int32_t batch, const int32_t *kv_lens, int32_t *n_pages,
                                    int32_t *max_pages)
{
    int64_t n = 0, most = 1;
    for (int32_t b = 0; b < batch; b++) {
        if (kv_lens[b] < 0)
            return -1;
        const int64_t k = ((int64_t)kv_lens[b] + MLAV_STAGED_PAGE_ROWS - 1) / MLAV_STAGED_PAGE_ROWS;
        n += k;
        most = k > most ? k : most;
        if (n > INT32_MAX / MLAV_STAGED_PAGE_ROWS)
            return -1;
    }
    *n_pages = (int32_t)n;
    *max_pages = (int32_t)most;
    return 0;
}

/* The staged pages (`pages`, n_pages of mlav_staged_count) and their table (`table`, batch x
 * max_pages: request b's j-th page id at b x max_pages + j, -1 past its pages): request 0's
 * pages first, each request's in row order. */
static inline void mlav_staged_fill(int32_t batch, const int32_t *kv_lens, int32_t max_pages,
                                    mlav_staged_page *pages, int32_t *table)
{
    int32_t k = 0;
    for (int32_t b = 0; b < batch; b++) {
        int32_t j = 0;
        for (int32_t j0 = 0; j0 < kv_lens[b]; j0 += MLAV_STAGED_PAGE_ROWS, j++) {
            const int32_t left = kv_lens[b] - j0;
            pages[k].b = b;
            pages[k].j0 = j0;
            pages[k].rows = left < MLAV_STAGED_PAGE_ROWS ? left : MLAV_STAGED_PAGE_ROWS;
            table[(int64_t)b * max_pages + j] = k++;
        }
        for (; j < max_pages; j++)
            table[(int64_t)b * max_pages + j] = -1;
    }
}

/* How many 64-row tiles of its request read each KV row, summed over the batch's rows: request
 * b's ceil(q_len x H / 64) times its kv_len. Over the batch's KV rows, the mean number of times a
 * row is read: for an FP8 cache, converted by the unstaged seesaw kernel (the staging rule's
 * measure); for a 16-bit one, how tensor-bound the seesaw is (the early-S rule's; flash_family.h).
 * Here beside the staging because the staging's page is the kernels' 64-row tile. */
static inline int64_t mlav_row_tile_keys(int32_t batch, const int32_t *q_indptr,
                                         const int32_t *kv_lens, int32_t H)
{
    int64_t s = 0;
    for (int32_t b = 0; b < batch; b++) {
        const int64_t rows = (int64_t)(q_indptr[b + 1] - q_indptr[b]) * H;
        s += (rows + MLAV_STAGED_PAGE_ROWS - 1) / MLAV_STAGED_PAGE_ROWS * kv_lens[b];
    }
    return s;
}

#ifdef __cplusplus
}
#endif

#endif
