/* The fp64 oracle: the definition of truth every backend is checked against. */
#ifndef MLAV_CPU_ORACLE_H
#define MLAV_CPU_ORACLE_H

#include "../common/shard.h"
#include "../common/visibility.h"
#include "../core/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compute out [T, H, Dl] and lse [T, H] in double precision from host tensors `t` (its out and
 * lse fields are ignored; an FP8 cache's scale is mlav_kv_scale_host's). Plain loops, no BLAS:
 * slow and obviously right. lse64 may be NULL.
 * Returns MLAV_OK, MLAV_ERR_INVALID_ARG (a bad FP8 scale) or MLAV_ERR_OUT_OF_MEMORY. */
mlav_status mlav_oracle_compute(const mlav_problem_info *p, const mlav_tensors *t, double *out64,
                                double *lse64);

/* Whether the rank's KV row j (0 <= j < mlav_shard_rows(p->shard, kv_len); every row j <
 * kv_len when not sharded) of request b is visible to that request's query node i: the rule of
 * visibility.h at the row's global position, with request b's prefix and mask row. */
static inline int mlav_visible(const mlav_problem_info *p, const uint32_t *tree_mask, int32_t b,
                               int32_t i, int64_t j)
{
    return mlav_kv_visible(tree_mask, p->mask_words, (int64_t)p->q_indptr[b] + i, i,
                           mlav_info_prefix(p, b), mlav_shard_global(p->shard, j));
}

/* Address of (the rank's) KV row j in the pool, for a request whose page-table row is `pt_row`
 * (mlav_page_row; no bounds check: validation did it). */
static inline size_t mlav_kv_row_index(const mlav_problem_info *p, const int32_t *pt_row,
                                       int64_t j)
{
    int32_t page = pt_row[(size_t)(j / p->page_size)];
    return (size_t)page * (size_t)p->page_size + (size_t)(j % p->page_size);
}

#ifdef __cplusplus
}
#endif

#endif
