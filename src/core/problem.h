/* The core floor every layer stands on: the validated problem (what dispatch's validation
 * makes of a mlav_problem, and what backends, the scheduler and the tools read), the per-thread
 * error sentence, and the names of the API's enums (error.c). It includes nothing of the
 * library but the public header, so src/common, the backends and dispatch can all use it
 * without including each other. */
#ifndef MLAV_CORE_PROBLEM_H
#define MLAV_CORE_PROBLEM_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A KV shard (mlav_problem's shard fields), normalised by validation: ranks >= 1 (1: every
 * row, the identity), 0 <= rank < ranks, stripe >= 1. The mapping is src/common/shard.h's. */
typedef struct mlav_shard {
    int32_t ranks, rank, stripe;
} mlav_shard;

/* A validated problem, owned by the plan: the host arrays are copied and the derived lengths
 * computed once, so backends never recompute them. */
typedef struct mlav_problem_info {
    int32_t H, Dl, Dr, W;      /* heads, latent dim, rope dim, W = Dl + Dr (row width) */
    float scale;               /* softmax scale */
    mlav_dtype dtype;          /* q and out */
    mlav_dtype kv_dtype;       /* kv_cache: dtype, or MLAV_DTYPE_FP8_E4M3 (never 0-as-same) */
    int32_t page_size;
    int32_t B;                 /* requests */
    int32_t max_pages;         /* page_table row stride */
    int32_t T;                 /* total query tokens, q_indptr[B] */
    int32_t max_q_len;
    int32_t mask_words;        /* ceil(max_q_len / 32), at least 1 */
    int64_t max_kv_len;
    int64_t total_kv;          /* sum of the KV rows read: kv_len, or its rows on the rank */
    mlav_shard shard;          /* the rank's KV shard ({1, 0, 1}: every row) */
    int32_t *q_indptr;         /* [B+1], copied */
    int32_t *kv_lens;          /* [B], copied */
} mlav_problem_info;

/* Per-thread error sentence (error.c). mlav_set_error returns `s` so that a failure is one
 * line: `return mlav_set_error(MLAV_ERR_INVALID_ARG, "kv_lens[%d] = %d < q_len %d", ...);` */
mlav_status mlav_set_error(mlav_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The current thread's error sentence. */
const char *mlav_get_error(void);

/* Whether an FP8 cache's kv_scale is usable: finite and > 0 (NaN fails both comparisons). The
 * rule of the host check (mlav_kv_scale_host below) and of the kernels that read a device scale,
 * which turn a bad one into NaN. */
#define MLAV_KV_SCALE_OK(v) ((v) > 0.0f && (v) <= 3.402823466e38f)
/* (A macro, not an inline function: as a function returning int it changed three instructions
 * of the flash kernel's FP8 instances, whose measured code this keeps byte for byte;
 * docs/PERFORMANCE.md#ptxas.) */

/* The FP8 KV scale of a run whose scale the host can read (tensors.kv_scale, or a host
 * kv_scale_ptr), checked: finite and > 0, else MLAV_ERR_INVALID_ARG with a sentence. 1 for a
 * 16/32-bit cache. A device kv_scale_ptr is the kernels' to read (MLAV_ERR_INTERNAL here). */
mlav_status mlav_kv_scale_host(const mlav_problem_info *p, const mlav_tensors *t, float *scale);

/* Row count of request b, and its prefix length. */
static inline int32_t mlav_info_q_len(const mlav_problem_info *p, int32_t b)
{
    return p->q_indptr[b + 1] - p->q_indptr[b];
}
static inline int32_t mlav_info_prefix(const mlav_problem_info *p, int32_t b)
{
    return p->kv_lens[b] - mlav_info_q_len(p, b);
}

/* Request b's row of the page table: row page_table_rows[b] of a table shared by every request
 * when the tensors give one, else row b. Host tables only (validation checked the index); the
 * kernels have their own form, which turns an index outside the table into NaN rows. */
static inline const int32_t *mlav_page_row(const mlav_problem_info *p, const mlav_tensors *t,
                                           int32_t b)
{
    const int64_t row = t->page_table_rows ? (int64_t)t->page_table_rows[b] : (int64_t)b;
    return t->page_table + (size_t)row * (size_t)p->max_pages;
}

/* Rows of the page table the tensors describe: page_table_num_rows with a row index, else B. */
static inline int64_t mlav_page_table_rows_of(const mlav_problem_info *p, const mlav_tensors *t)
{
    return t->page_table_rows ? t->page_table_num_rows : (int64_t)p->B;
}

#ifdef __cplusplus
}
#endif

#endif
