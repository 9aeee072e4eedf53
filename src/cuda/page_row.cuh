/* The kernels' form of mlav_page_row (src/core/problem.h): request b's row of the page table,
 * row page_table_rows[b] of a table shared by every request, or row b. A device row index cannot
 * be checked on the host without a synchronization, so one outside [0, num_rows) reads row 0
 * and sets `bad` to the sign bit: OR-ed into every page id the row gives, it puts each one
 * outside the pool (negative, or >= 2^31 >= page_limit as uint32), and the request's keys then
 * read as NaN, exactly as a page id outside the pool does (mlaverify.h). */
#ifndef MLAV_CUDA_PAGE_ROW_CUH
#define MLAV_CUDA_PAGE_ROW_CUH

#include <stdint.h>

__device__ __forceinline__ const int32_t *mlav_page_row_dev(const int32_t *page_table,
                                                           const int32_t *rows, int64_t num_rows,
                                                           int32_t max_pages, int b, int32_t &bad)
{
    int64_t r = b;
    bad = 0;
    if (rows) {
        r = rows[b];
        if (r < 0 || r >= num_rows) {
            r = 0;
            bad = INT32_MIN;
        }
    }
    return page_table + (size_t)r * (size_t)max_pages;
}

#endif
