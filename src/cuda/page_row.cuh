/* The kernels' form of mlav_page_row (src/core/problem.h): request b's row of the page table,
 * row page_table_rows[b] of a table shared by every request, or row b. A device row index cannot
 * be checked on the host without a synchronization, so one outside [0, num_rows) gives the
 * plan's row of bad page ids (`bad_pages`, max_pages entries of -1): the request's keys then
 * read as NaN, exactly as a page id outside the pool does (mlaverify.h). Choosing the row, not
 * marking each page id, leaves the gather loop's code as it is (docs/PERFORMANCE.md#page-rows). */
#ifndef MLAV_CUDA_PAGE_ROW_CUH
#define MLAV_CUDA_PAGE_ROW_CUH

#include <stdint.h>

__device__ __forceinline__ const int32_t *mlav_page_row_dev(const int32_t *page_table,
                                                           const int32_t *rows, int64_t num_rows,
                                                           int32_t max_pages,
                                                           const int32_t *bad_pages, int b)
{
    if (!rows)
        return page_table + (size_t)b * (size_t)max_pages;
    const int64_t r = rows[b];
    return r >= 0 && r < num_rows ? page_table + (size_t)r * (size_t)max_pages : bad_pages;
}

#endif
