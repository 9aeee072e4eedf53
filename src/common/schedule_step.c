/* The host side of the step rule (schedule_step.h): the bounds of a plan for limits, and one
 * step's schedule built into fixed arrays, as the device scheduler builds it. */
#include "schedule_step.h"

#include <string.h>

/* A step's most row tiles: each request at most tiles(max_q_len); all of them at most the
 * tokens' rows rounded up once per request that has any. */
static int64_t max_tiles_of(int32_t H, const mlav_limits *lim, int32_t rows_per_tile)
{
    const int64_t by_batch =
        (int64_t)lim->max_batch * mlav_step_tiles(lim->max_q_len, H, rows_per_tile);
    const int64_t nonempty = lim->max_batch < lim->max_tokens ? lim->max_batch : lim->max_tokens;
    const int64_t by_tokens =
        mlav_step_ceil_div((int64_t)lim->max_tokens * H, rows_per_tile) + nonempty;
    return by_batch < by_tokens ? by_batch : by_tokens;
}

mlav_schedule_params mlav_step_params(int32_t H, const mlav_limits *lim,
                                      mlav_schedule_params base)
{
    base.more_waves = max_tiles_of(H, lim, base.rows_per_tile) >= base.target_blocks
                          ? MLAV_STEP_MORE_WAVES
                          : MLAV_STEP_MORE_WAVES_FEW;
    return base;
}

mlav_step_bounds mlav_step_bounds_of(int32_t H, const mlav_limits *lim,
                                     const mlav_schedule_params *sp)
{
    mlav_step_bounds bd;
    const int64_t tiles = max_tiles_of(H, lim, sp->rows_per_tile);
    /* the rule's most blocks: the fewest whole waves of the unsplit batch, plus more_waves */
    int64_t items =
        (mlav_step_ceil_div(tiles, sp->target_blocks) + sp->more_waves) * sp->target_blocks;
    if (items > tiles * sp->max_splits)
        items = tiles * sp->max_splits;
    bd.max_tiles = (int32_t)tiles;
    bd.max_items = (int32_t)items;
    bd.max_combine = (int32_t)tiles;
    bd.max_slots = (int32_t)items;
    return bd;
}

/* Evaluation of the accepted requests at `chunk`. */
static mlav_step_eval eval_at(int32_t batch, const int64_t *tiles, const int32_t *kv_lens,
                              int64_t chunk, const mlav_schedule_params *sp)
{
    mlav_step_eval e = {0, 0, 0};
    for (int32_t b = 0; b < batch; b++)
        mlav_step_eval_add(&e, tiles[b], kv_lens[b], chunk, sp->key_align, sp->max_splits);
    return e;
}

typedef struct {
    int32_t batch;
    const int64_t *tiles;
    const int32_t *kv_lens;
    const mlav_schedule_params *sp;
} blocks_ctx;

static int64_t blocks_of(int64_t chunk, const void *ctx)
{
    const blocks_ctx *c = ctx;
    return eval_at(c->batch, c->tiles, c->kv_lens, chunk, c->sp).blocks;
}

/* The smallest chunk (a key_align multiple in [min_chunk, max_kv]) whose blocks fit `cap`.
 * `*top` (in key_align units) bounds the search from above and gets the answer: a larger cap's
 * answer is never above a smaller one's, so the searches for more waves start below the last
 * (the same answers as searching the whole range, as the device scheduler does). */
static int64_t chunk_for_cap(int32_t batch, const int64_t *tiles, const int32_t *kv_lens,
                             int64_t max_kv, int64_t cap, const mlav_schedule_params *sp,
                             int64_t *top)
{
    const int64_t ka = sp->key_align;
    int64_t lo = mlav_step_ceil_div(sp->min_chunk, ka), hi = mlav_step_ceil_div(max_kv, ka);
    if (hi < lo)
        hi = lo;
    if (*top >= lo && *top < hi)
        hi = *top;
    const blocks_ctx c = {batch, tiles, kv_lens, sp};
    *top = mlav_schedule_smallest_chunk(lo, hi, ka, cap, blocks_of, &c);
    int64_t chunk = *top * ka;
    if (chunk > INT32_MAX)
        chunk = (INT32_MAX / ka) * ka;
    return chunk;
}

void mlav_step_schedule_build(int32_t batch, const int32_t *q_indptr, const int32_t *kv_lens,
                              int32_t H, const mlav_limits *lim, const mlav_schedule_params *sp,
                              const mlav_step_bounds *bd, mlav_step_header *hdr,
                              mlav_split_item *items, mlav_combine_item *combine)
{
    memset(hdr, 0, sizeof *hdr);
    hdr->bad = INT32_MAX;
    hdr->batch = batch;
    int global_ok = batch == 0 || (q_indptr[0] == 0 && q_indptr[batch] <= lim->max_tokens);
    for (int32_t b = 0; b < batch && global_ok; b++)
        global_ok = q_indptr[b + 1] >= q_indptr[b];
    if (!global_ok)
        hdr->bad = batch;

    /* row tiles of every accepted request (0: skipped), on the stack: batch <= 2048 */
    int64_t tiles[MLAV_STEP_MAX_BATCH];
    int64_t max_kv = 1, work = 0, all_tiles = 0;
    for (int32_t b = 0; b < batch; b++) {
        tiles[b] = 0;
        if (!global_ok)
            continue;
        const int64_t q = (int64_t)q_indptr[b + 1] - q_indptr[b];
        if (!mlav_step_request_ok(q, kv_lens[b], lim->max_q_len, lim->max_kv_len)) {
            if (b < hdr->bad)
                hdr->bad = b;
            continue;
        }
        tiles[b] = mlav_step_tiles(q, H, sp->rows_per_tile);
        if (tiles[b] > 0 && kv_lens[b] > max_kv)
            max_kv = kv_lens[b];
        work += tiles[b] * kv_lens[b];
        all_tiles += tiles[b];
    }

    int64_t best_chunk = 0;
    if (all_tiles > 0) {
        const int64_t S = sp->target_blocks;
        const int64_t cap0 = mlav_step_ceil_div(all_tiles, S) * S;
        int64_t top = -1;
        const int64_t chunk0 = chunk_for_cap(batch, tiles, kv_lens, max_kv, cap0, sp, &top);
        int64_t cands[2 + 1 + 64], n = 0, last = chunk0;
        cands[n++] = chunk0;
        for (int k = 1; k <= 2; k++)
            if ((chunk0 << k) <= INT32_MAX)
                cands[n++] = chunk0 << k;
        for (int32_t k = 1; k <= sp->more_waves && k <= 64; k++) {
            const int64_t c = chunk_for_cap(batch, tiles, kv_lens, max_kv, cap0 + k * S, sp, &top);
            if (c >= last)
                continue; /* no shorter split fits this many waves */
            last = c;
            cands[n++] = c;
        }
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            const mlav_step_eval e = eval_at(batch, tiles, kv_lens, cands[i], sp);
            const int64_t t =
                mlav_step_model(&e, work, sp->target_blocks, sp->block_cost_keys,
                                sp->split_cost_keys);
            if (best < 0 || t < best) {
                best = t;
                best_chunk = cands[i];
            }
        }
    }

    /* the blocks in the exact plan's order: request-major, split, m-tile fastest */
    int32_t it = 0, ci = 0, slot = 0;
    for (int32_t b = 0; b < batch && best_chunk > 0; b++) {
        if (tiles[b] == 0)
            continue;
        int64_t per;
        const int32_t s = (int32_t)mlav_schedule_splits(kv_lens[b], best_chunk, sp->key_align,
                                                    sp->max_splits, &per);
        const int32_t mt = (int32_t)tiles[b];
        const int32_t q = q_indptr[b + 1] - q_indptr[b];
        for (int32_t k = 0; k < s; k++) {
            const int64_t begin = k * per;
            const int64_t end = begin + per < kv_lens[b] ? begin + per : kv_lens[b];
            for (int32_t m = 0; m < mt; m++)
                items[it++] = (mlav_split_item){
                    .b = b, .mtile = m, .kv_begin = (int32_t)begin, .kv_end = (int32_t)end,
                    .slot = s > 1 ? slot + k * mt + m : -1, .q_start = q_indptr[b],
                    .q_len = q, .prefix = kv_lens[b] - q};
        }
        if (s > 1) {
            for (int32_t m = 0; m < mt; m++)
                combine[ci++] = (mlav_combine_item){
                    .b = b, .mtile = m, .nsplit = s, .slot0 = slot + m, .slot_stride = mt,
                    .q_start = q_indptr[b], .rows = q * H};
            slot += s * mt;
        }
    }
    hdr->n_items = it;
    hdr->n_combine = ci;
    hdr->n_slots = slot;
    hdr->chunk_keys = (int32_t)best_chunk;
    for (int32_t i = it; i < bd->max_items; i++)
        items[i] = (mlav_split_item){.b = -1};
    for (int32_t i = ci; i < bd->max_combine; i++)
        combine[i] = (mlav_combine_item){.b = -1};
}
