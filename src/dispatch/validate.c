/* Input validation: every rule gets a status and a sentence naming the offending value. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/shard.h"
#include "validate.h"

/* Limits that keep every size product far from overflow (T*H*W*4 < 2^62) while being far above
 * any real model (Kimi K2: H 64, W 576; contexts of a few million tokens). */
#define MLAV_MAX_HEADS 4096
#define MLAV_MAX_DIM 16384
#define MLAV_MAX_BATCH (1 << 20)
#define MLAV_MAX_PAGE_SIZE (1 << 20)
#define MLAV_MAX_ROWS ((int64_t)1 << 40) /* rows of the pool (pages * page_size) */
/* Folded query rows (T * H): the backends index a request's (token, head) rows with 32-bit
 * integers (the CUDA split and combine items) and the CPU plan's work list grows with them, so
 * a larger count would overflow one and make the other allocate without bound; 2^31 - 1 rows is
 * already terabytes of `out` at any real width. */
#define MLAV_MAX_QUERY_ROWS ((int64_t)INT32_MAX)

void mlav_problem_info_free(mlav_problem_info *info)
{
    if (!info)
        return;
    free(info->q_indptr);
    free(info->kv_lens);
    info->q_indptr = info->kv_lens = NULL;
}

mlav_dtype mlav_problem_kv_dtype(const mlav_problem *p)
{
    return p->kv_dtype == MLAV_DTYPE_F32 ? p->dtype : p->kv_dtype;
}

mlav_status mlav_problem_validate(const mlav_problem *p, mlav_problem_info *info)
{
    memset(info, 0, sizeof *info);
    if (!p)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "problem must not be NULL");
    if (p->num_heads < 1 || p->num_heads > MLAV_MAX_HEADS)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "num_heads = %d is outside [1, %d]",
                              p->num_heads, MLAV_MAX_HEADS);
    if (p->d_latent < 1 || p->d_latent > MLAV_MAX_DIM)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "d_latent = %d is outside [1, %d]",
                              p->d_latent, MLAV_MAX_DIM);
    if (p->d_rope < 0 || p->d_rope > MLAV_MAX_DIM)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "d_rope = %d is outside [0, %d]", p->d_rope,
                              MLAV_MAX_DIM);
    if (!isfinite(p->softmax_scale))
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "softmax_scale = %g is not finite",
                              (double)p->softmax_scale);
    if (mlav_dtype_size(p->dtype) == 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "dtype = %d is not a mlav_dtype",
                              (int)p->dtype);
    if (p->dtype == MLAV_DTYPE_FP8_E4M3)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "dtype = fp8_e4m3: only the KV cache may be FP8 (kv_dtype); q and "
                              "out are f32, bf16 or f16");
    const mlav_dtype kv_dtype = mlav_problem_kv_dtype(p);
    if (kv_dtype != p->dtype && kv_dtype != MLAV_DTYPE_FP8_E4M3)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "kv_dtype = %d (%s) with dtype %s: the cache has the q dtype or "
                              "is fp8_e4m3",
                              (int)p->kv_dtype, mlav_dtype_name(p->kv_dtype),
                              mlav_dtype_name(p->dtype));
    if (p->page_size < 1 || p->page_size > MLAV_MAX_PAGE_SIZE)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "page_size = %d is outside [1, %d]",
                              p->page_size, MLAV_MAX_PAGE_SIZE);
    if (p->batch < 1 || p->batch > MLAV_MAX_BATCH)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "batch = %d is outside [1, %d]", p->batch,
                              MLAV_MAX_BATCH);
    if (p->max_pages < 1)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "max_pages = %d must be >= 1", p->max_pages);
    if (p->shard_ranks < 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "shard_ranks = %d must be >= 0 (0 or 1: not sharded)",
                              p->shard_ranks);
    if (p->shard_rank < 0 || p->shard_rank >= (p->shard_ranks > 1 ? p->shard_ranks : 1))
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "shard_rank = %d is outside [0, %d)",
                              p->shard_rank, p->shard_ranks > 1 ? p->shard_ranks : 1);
    if (p->shard_stripe < 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "shard_stripe = %d must be >= 0 (0 means 1 row per stripe)",
                              p->shard_stripe);
    /* ranks x stripe is formed in int64 (two int32 factors cannot overflow it), and every
     * mapped row stays below the global kv_len, so no local or global row overflows either */
    const mlav_shard shard = {p->shard_ranks > 1 ? p->shard_ranks : 1, p->shard_rank,
                              p->shard_stripe > 0 ? p->shard_stripe : 1};
    if (!p->q_indptr || !p->kv_lens)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "q_indptr and kv_lens must not be NULL");
    if (p->q_indptr[0] != 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "q_indptr[0] = %d must be 0", p->q_indptr[0]);

    int64_t capacity = (int64_t)p->max_pages * p->page_size;
    int32_t max_q = 0;
    int64_t max_kv = 0, total_kv = 0;
    for (int32_t b = 0; b < p->batch; b++) {
        int64_t q_len = (int64_t)p->q_indptr[b + 1] - p->q_indptr[b];
        if (q_len < 0)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "q_indptr is decreasing at request %d (%d then %d)", b,
                                  p->q_indptr[b], p->q_indptr[b + 1]);
        int64_t kv = p->kv_lens[b];
        if (kv < q_len)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "kv_lens[%d] = %lld is less than q_len %lld (the draft rows "
                                  "must be in the cache)",
                                  b, (long long)kv, (long long)q_len);
        const int64_t held = mlav_shard_rows(shard, kv); /* the rows the rank reads */
        if (held > capacity && shard.ranks > 1)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "kv_lens[%d] = %lld puts %lld rows on shard rank %d of %d "
                                  "(stripe %d), more than max_pages * page_size = %lld",
                                  b, (long long)kv, (long long)held, shard.rank, shard.ranks,
                                  shard.stripe, (long long)capacity);
        if (held > capacity)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "kv_lens[%d] = %lld exceeds max_pages * page_size = %lld", b,
                                  (long long)kv, (long long)capacity);
        if (q_len > max_q)
            max_q = (int32_t)q_len;
        if (kv > max_kv)
            max_kv = kv;
        total_kv += held;
    }
    int32_t T = p->q_indptr[p->batch];
    int32_t W = p->d_latent + p->d_rope;
    if ((int64_t)T * p->num_heads > MLAV_MAX_QUERY_ROWS)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "T * H = %lld query rows is too many (at most %lld)",
                              (long long)T * p->num_heads, (long long)MLAV_MAX_QUERY_ROWS);

    info->H = p->num_heads;
    info->Dl = p->d_latent;
    info->Dr = p->d_rope;
    info->W = W;
    info->scale = p->softmax_scale;
    info->dtype = p->dtype;
    info->kv_dtype = kv_dtype;
    info->page_size = p->page_size;
    info->B = p->batch;
    info->max_pages = p->max_pages;
    info->T = T;
    info->max_q_len = max_q;
    info->mask_words = mlav_tree_mask_words(max_q);
    info->max_kv_len = max_kv;
    info->total_kv = total_kv;
    info->shard = shard;
    info->q_indptr = malloc(sizeof(int32_t) * (size_t)(p->batch + 1));
    info->kv_lens = malloc(sizeof(int32_t) * (size_t)p->batch);
    if (!info->q_indptr || !info->kv_lens) {
        mlav_problem_info_free(info);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory copying the lengths");
    }
    memcpy(info->q_indptr, p->q_indptr, sizeof(int32_t) * (size_t)(p->batch + 1));
    memcpy(info->kv_lens, p->kv_lens, sizeof(int32_t) * (size_t)p->batch);
    return MLAV_OK;
}

/* A tensor's byte range [lo, hi), from the validated shapes; hi saturates rather than wrap. */
typedef struct byte_range {
    const char *name;
    uintptr_t lo, hi;
} byte_range;

static byte_range range_of(const char *name, const void *ptr, uint64_t bytes)
{
    uintptr_t lo = (uintptr_t)ptr;
    uintptr_t hi = bytes > (uint64_t)(UINTPTR_MAX - lo) ? UINTPTR_MAX : lo + (uintptr_t)bytes;
    return (byte_range){name, lo, ptr ? hi : lo}; /* NULL: empty, overlaps nothing */
}

/* The outputs (out, lse) may not share a byte with an input (q, kv_cache, page_table,
 * tree_mask) or with each other: the backends read inputs after writing outputs (a later tile,
 * another thread's split), so an overlap gives a wrong answer rather than an in-place one.
 * Pure pointer arithmetic on the sizes the shapes give (nothing is dereferenced), so device
 * pointers are checked the same way: in one address space (CUDA's unified addressing), ranges
 * that overlap are the same memory. */
static mlav_status check_overlap(const mlav_problem_info *p, const mlav_tensors *t)
{
    const uint64_t esz = mlav_dtype_size(p->dtype), kv_esz = mlav_dtype_size(p->kv_dtype);
    const int fp8 = p->kv_dtype == MLAV_DTYPE_FP8_E4M3;
    const uint64_t qh = (uint64_t)p->T * (uint64_t)p->H; /* folded query rows */
    const int has_kv = p->total_kv > 0, has_q = p->T > 0;
    const byte_range out = range_of("out", has_q ? t->out : NULL, qh * (uint64_t)p->Dl * esz);
    const byte_range lse = range_of("lse", has_q ? t->lse : NULL, qh * sizeof(float));
    const byte_range in[] = {
        range_of("q", has_q ? t->q : NULL, qh * (uint64_t)p->W * esz),
        range_of("kv_cache", has_kv ? t->kv_cache : NULL,
                 (uint64_t)t->num_pages * (uint64_t)p->page_size * (uint64_t)p->W * kv_esz),
        range_of("page_table", has_kv ? t->page_table : NULL,
                 (uint64_t)mlav_page_table_rows_of(p, t) * (uint64_t)p->max_pages *
                     sizeof(int32_t)),
        range_of("page_table_rows", has_kv ? t->page_table_rows : NULL,
                 (uint64_t)p->B * sizeof(int32_t)),
        range_of("tree_mask", has_q ? t->tree_mask : NULL,
                 (uint64_t)p->T * (uint64_t)p->mask_words * sizeof(uint32_t)),
        range_of("kv_scale_ptr", fp8 ? t->kv_scale_ptr : NULL, sizeof(float)),
        lse, /* out against lse; lse against itself is skipped below */
    };
    const byte_range outs[2] = {out, lse};
    for (int o = 0; o < 2; o++) {
        if (outs[o].lo == outs[o].hi)
            continue;
        for (size_t k = 0; k < sizeof in / sizeof in[0]; k++) {
            if (o == 1 && k == sizeof in / sizeof in[0] - 1)
                continue;
            if (in[k].lo < in[k].hi && outs[o].lo < in[k].hi && in[k].lo < outs[o].hi)
                return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                      "tensors.%s [%p, +%llu bytes) overlaps tensors.%s [%p, "
                                      "+%llu bytes): outputs may not alias inputs or each "
                                      "other",
                                      outs[o].name, (void *)outs[o].lo,
                                      (unsigned long long)(outs[o].hi - outs[o].lo), in[k].name,
                                      (void *)in[k].lo,
                                      (unsigned long long)(in[k].hi - in[k].lo));
        }
    }
    return MLAV_OK;
}

mlav_status mlav_tensors_validate(const mlav_problem_info *p, const mlav_tensors *t)
{
    if (!t)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "tensors must not be NULL");
    if (t->memory != MLAV_MEM_HOST && t->memory != MLAV_MEM_DEVICE)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "tensors.memory = %d is not a mlav_memory",
                              (int)t->memory);
    if (p->T > 0 && (!t->q || !t->out))
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "q and out must not be NULL (T = %d)", p->T);
    if (p->total_kv > 0) {
        if (!t->kv_cache || !t->page_table)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "kv_cache and page_table must not be NULL");
        if (t->num_pages < 1)
            return mlav_set_error(MLAV_ERR_INVALID_ARG, "num_pages = %lld must be >= 1",
                                  (long long)t->num_pages);
        if (t->num_pages > MLAV_MAX_ROWS / p->page_size)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "num_pages = %lld times page_size %d is too many rows",
                                  (long long)t->num_pages, p->page_size);
        /* a row index is an int32, and the table's bytes must stay far from overflow */
        if (t->page_table_rows &&
            (t->page_table_num_rows < 1 || t->page_table_num_rows > INT32_MAX ||
             t->page_table_num_rows > MLAV_MAX_ROWS / p->max_pages))
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "page_table_num_rows = %lld must be in [1, %lld] for "
                                  "max_pages %d (with page_table_rows set)",
                                  (long long)t->page_table_num_rows,
                                  (long long)(MLAV_MAX_ROWS / p->max_pages < INT32_MAX
                                                  ? MLAV_MAX_ROWS / p->max_pages
                                                  : INT32_MAX),
                                  p->max_pages);
    }
    mlav_status s = check_overlap(p, t);
    if (s != MLAV_OK)
        return s;
    if (p->kv_dtype == MLAV_DTYPE_FP8_E4M3) {
        if (t->kv_scale_ptr && (uintptr_t)t->kv_scale_ptr % sizeof(float) != 0)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "tensors.kv_scale_ptr = %p is not 4-byte aligned",
                                  (const void *)t->kv_scale_ptr);
        if (t->memory == MLAV_MEM_HOST || !t->kv_scale_ptr) {
            float v;
            s = mlav_kv_scale_host(p, t, &v);
            if (s != MLAV_OK)
                return s;
        }
    }
    if (t->memory == MLAV_MEM_DEVICE)
        return MLAV_OK; /* the device-resident tables are the kernels' to guard */

    /* Host tensors are read and written through typed pointers: one off its element alignment
     * is undefined behaviour in C (and a vectorised loop may fault on it), so it is refused.
     * Only the pointers this problem uses are looked at. */
    const size_t esz = mlav_dtype_size(p->dtype), kv_esz = mlav_dtype_size(p->kv_dtype);
    const struct {
        const void *ptr;
        const char *name;
        size_t align;
        int used;
    } host[] = {
        {t->q, "q", esz, p->T > 0},
        {t->out, "out", esz, p->T > 0},
        {t->lse, "lse", sizeof(float), p->T > 0},
        {t->tree_mask, "tree_mask", sizeof(uint32_t), p->T > 0},
        {t->kv_cache, "kv_cache", kv_esz, p->total_kv > 0},
        {t->page_table, "page_table", sizeof(int32_t), p->total_kv > 0},
        {t->page_table_rows, "page_table_rows", sizeof(int32_t), p->total_kv > 0},
    };
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        if (host[i].used && host[i].ptr && (uintptr_t)host[i].ptr % host[i].align != 0)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "tensors.%s = %p is not %zu-byte aligned (host tensors must be "
                                  "aligned to their element size)",
                                  host[i].name, host[i].ptr, host[i].align);

    for (int32_t b = 0; b < p->B; b++) {
        int64_t pages =
            (mlav_shard_rows(p->shard, p->kv_lens[b]) + p->page_size - 1) / p->page_size;
        if (pages == 0)
            continue; /* page_table may be NULL when no request has a KV row: no row to form */
        int64_t r = b;
        if (t->page_table_rows) {
            r = t->page_table_rows[b];
            if (r < 0 || r >= t->page_table_num_rows)
                return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                      "page_table_rows[%d] = %lld is outside [0, "
                                      "page_table_num_rows = %lld)",
                                      b, (long long)r, (long long)t->page_table_num_rows);
        }
        const int32_t *row = mlav_page_row(p, t, b);
        for (int64_t k = 0; k < pages; k++) {
            if (row[k] >= 0 && row[k] < t->num_pages)
                continue;
            if (t->page_table_rows)
                return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                      "page_table[%lld][%lld] = %d (request %d's row, by "
                                      "page_table_rows) is outside [0, num_pages = %lld)",
                                      (long long)r, (long long)k, row[k], b,
                                      (long long)t->num_pages);
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "page_table[%d][%lld] = %d is outside [0, num_pages = %lld)", b,
                                  (long long)k, row[k], (long long)t->num_pages);
        }
    }
    if (t->tree_mask) {
        for (int32_t b = 0; b < p->B; b++) {
            int32_t q_len = mlav_info_q_len(p, b);
            for (int32_t i = 0; i < q_len; i++) {
                const uint32_t *row =
                    t->tree_mask + (size_t)(p->q_indptr[b] + i) * (size_t)p->mask_words;
                for (int32_t w = 0; w < p->mask_words; w++) {
                    uint32_t valid = 0xffffffffu;
                    int32_t first = w * 32;
                    if (first >= q_len)
                        valid = 0;
                    else if (q_len - first < 32)
                        valid = (1u << (q_len - first)) - 1u;
                    if (row[w] & ~valid)
                        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                              "tree_mask row %d (request %d, node %d) marks a "
                                              "node >= q_len %d",
                                              p->q_indptr[b] + i, b, i, q_len);
                }
            }
        }
    }
    return MLAV_OK;
}
