/* The split-KV scheduler: balance KV rows across blocks so one long request fills the GPU. */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

void mlav_schedule_free(mlav_schedule *s)
{
    if (!s)
        return;
    free(s->items);
    free(s->combine);
    free(s->splits);
    memset(s, 0, sizeof *s);
}

mlav_status mlav_schedule_build(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                mlav_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (sp->rows_per_tile < 1 || sp->key_align < 1 || sp->min_chunk < 1 || sp->max_splits < 1 ||
        sp->target_blocks < 1)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "schedule parameters must be positive");

    /* Work in (row tile x KV row) units: every block costs about its KV rows, since it always
     * processes a full tile of M rows. */
    int64_t work = 0;
    for (int32_t b = 0; b < p->B; b++) {
        int64_t rows = (int64_t)mlav_info_q_len(p, b) * p->H;
        work += ceil_div(rows, sp->rows_per_tile) * p->kv_lens[b];
    }
    int64_t chunk = ceil_div(work > 0 ? work : 1, sp->target_blocks);
    if (chunk < sp->min_chunk)
        chunk = sp->min_chunk;
    chunk = ceil_div(chunk, sp->key_align) * sp->key_align;
    if (chunk > INT32_MAX)
        chunk = (INT32_MAX / sp->key_align) * sp->key_align;
    out->chunk_keys = (int32_t)chunk;

    out->splits = calloc((size_t)p->B, sizeof(int32_t));
    if (!out->splits)
        goto oom;
    int64_t n_items = 0, n_combine = 0, n_slots = 0;
    for (int32_t b = 0; b < p->B; b++) {
        int64_t rows = (int64_t)mlav_info_q_len(p, b) * p->H;
        if (rows == 0)
            continue;
        int64_t mt = ceil_div(rows, sp->rows_per_tile);
        int64_t s = ceil_div(p->kv_lens[b], chunk);
        if (s > sp->max_splits)
            s = sp->max_splits;
        if (s < 1)
            s = 1;
        /* even out the splits, then drop any that became empty through alignment */
        int64_t per = ceil_div(ceil_div(p->kv_lens[b], s), sp->key_align) * sp->key_align;
        s = ceil_div(p->kv_lens[b], per);
        if (s < 1)
            s = 1;
        out->splits[b] = (int32_t)s;
        n_items += s * mt;
        if (s > 1) {
            n_combine += mt;
            n_slots += s * mt;
        }
    }
    if (n_items > INT32_MAX || n_slots > INT32_MAX) {
        mlav_schedule_free(out);
        return mlav_set_error(MLAV_ERR_UNSUPPORTED, "the problem needs too many blocks");
    }
    out->items = calloc((size_t)(n_items ? n_items : 1), sizeof(mlav_split_item));
    out->combine = calloc((size_t)(n_combine ? n_combine : 1), sizeof(mlav_combine_item));
    if (!out->items || !out->combine)
        goto oom;

    int32_t it = 0, ci = 0, slot = 0;
    for (int32_t b = 0; b < p->B; b++) {
        int32_t s = out->splits[b];
        if (s == 0)
            continue;
        int64_t rows = (int64_t)mlav_info_q_len(p, b) * p->H;
        int32_t mt = (int32_t)ceil_div(rows, sp->rows_per_tile);
        int64_t per = ceil_div(ceil_div(p->kv_lens[b], s), sp->key_align) * sp->key_align;
        for (int32_t k = 0; k < s; k++) {
            int64_t begin = k * per, end = begin + per;
            if (end > p->kv_lens[b])
                end = p->kv_lens[b];
            for (int32_t m = 0; m < mt; m++)
                out->items[it++] = (mlav_split_item){
                    .b = b, .mtile = m, .kv_begin = (int32_t)begin, .kv_end = (int32_t)end,
                    .slot = s > 1 ? slot + k * mt + m : -1, .q_start = p->q_indptr[b],
                    .q_len = mlav_info_q_len(p, b), .prefix = mlav_info_prefix(p, b)};
        }
        if (s > 1) {
            for (int32_t m = 0; m < mt; m++)
                out->combine[ci++] = (mlav_combine_item){
                    .b = b, .mtile = m, .nsplit = s, .slot0 = slot + m, .slot_stride = mt,
                    .q_start = p->q_indptr[b], .rows = (int32_t)rows};
            slot += s * mt;
        }
    }
    out->n_items = it;
    out->n_combine = ci;
    out->n_slots = slot;
    return MLAV_OK;
oom:
    mlav_schedule_free(out);
    return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory scheduling splits");
}
