/* The split-KV scheduler: balance KV rows across blocks so one long request fills the GPU. */
#include "schedule.h"

#include "shard.h"

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

/* The schedule's walk, written once: the requests that have rows, in build order, each with its
 * row tiles and splits at `chunk`. blocks_at counts its blocks, build_at lays them out and model_at
 * dispatches them, so the three cannot disagree on which blocks a chunk makes. A request's blocks
 * are its splits k in [0, ns), each over the row tiles m in [0, mt): block (k, m) covers KV rows
 * [walk_begin(w, k), walk_end(w, k)) of row tile m. */
typedef struct {
    const mlav_problem_info *p;
    const mlav_schedule_params *sp;
    int64_t chunk;
    int32_t b;       /* the request; -1 before the first walk_next */
    int64_t rows;    /* its rows, q_len * H (> 0) */
    int64_t mt;      /* its row tiles */
    int64_t ns, per; /* its splits and KV rows per split (the last may be shorter) */
} walk;

static inline walk walk_start(const mlav_problem_info *p, const mlav_schedule_params *sp,
                              int64_t chunk)
{
    return (walk){.p = p, .sp = sp, .chunk = chunk, .b = -1};
}

/* Step to the next request with rows; 0 when there is none. */
static inline int walk_next(walk *w)
{
    while (++w->b < w->p->B) {
        w->rows = (int64_t)mlav_info_q_len(w->p, w->b) * w->p->H;
        if (w->rows <= 0)
            continue;
        w->mt = ceil_div(w->rows, w->sp->rows_per_tile);
        w->ns = mlav_schedule_splits(mlav_info_kv_rows(w->p, w->b), w->chunk, w->sp->key_align,
                                     w->sp->max_splits, &w->per);
        return 1;
    }
    return 0;
}

static inline int64_t walk_begin(const walk *w, int64_t k)
{
    return k * w->per;
}

static inline int64_t walk_end(const walk *w, int64_t k)
{
    const int64_t end = k * w->per + w->per, kv = mlav_info_kv_rows(w->p, w->b);
    return end < kv ? end : kv;
}

/* Blocks of the whole batch at a chunk. */
static int64_t blocks_at(const mlav_problem_info *p, const mlav_schedule_params *sp, int64_t chunk)
{
    int64_t n = 0;
    for (walk w = walk_start(p, sp, chunk); walk_next(&w);)
        n += w.mt * w.ns;
    return n;
}

int64_t mlav_schedule_smallest_chunk(int64_t lo, int64_t hi, int64_t key_align, int64_t cap,
                                     int64_t (*blocks)(int64_t chunk, const void *ctx),
                                     const void *ctx)
{
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (blocks(mid * key_align, ctx) <= cap)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

typedef struct {
    const mlav_problem_info *p;
    const mlav_schedule_params *sp;
} blocks_ctx;

static int64_t blocks_of(int64_t chunk, const void *ctx)
{
    const blocks_ctx *c = ctx;
    return blocks_at(c->p, c->sp, chunk);
}

/* The smallest chunk (most parallelism) whose blocks fit in `cap` blocks, in whole key_align
 * multiples. */
static int64_t chunk_for_cap(const mlav_problem_info *p, const mlav_schedule_params *sp,
                             int64_t max_kv, int64_t cap)
{
    const int64_t ka = sp->key_align;
    int64_t lo = ceil_div(sp->min_chunk, ka), hi = ceil_div(max_kv, ka);
    if (hi < lo)
        hi = lo;
    const blocks_ctx c = {p, sp};
    int64_t chunk = mlav_schedule_smallest_chunk(lo, hi, ka, cap, blocks_of, &c) * ka;
    if (chunk > INT32_MAX)
        chunk = (INT32_MAX / ka) * ka;
    return chunk;
}

/* The schedule at one chunk. */
static mlav_status build_at(const mlav_problem_info *p, const mlav_schedule_params *sp,
                            int64_t chunk, mlav_schedule *out)
{
    memset(out, 0, sizeof *out);
    out->chunk_keys = (int32_t)chunk;
    out->splits = calloc((size_t)p->B, sizeof(int32_t));
    if (!out->splits)
        goto oom;
    int64_t n_items = 0, n_combine = 0, n_slots = 0;
    for (walk w = walk_start(p, sp, chunk); walk_next(&w);) {
        out->splits[w.b] = (int32_t)w.ns;
        n_items += w.ns * w.mt;
        if (w.ns > 1) {
            n_combine += w.mt;
            n_slots += w.ns * w.mt;
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
    for (walk w = walk_start(p, sp, chunk); walk_next(&w);) {
        const int32_t b = w.b, s = (int32_t)w.ns, mt = (int32_t)w.mt;
        for (int32_t k = 0; k < s; k++) {
            const int32_t begin = (int32_t)walk_begin(&w, k), end = (int32_t)walk_end(&w, k);
            for (int32_t m = 0; m < mt; m++)
                out->items[it++] = (mlav_split_item){
                    .b = b, .mtile = m, .kv_begin = begin, .kv_end = end,
                    .slot = s > 1 ? slot + k * mt + m : -1, .q_start = p->q_indptr[b],
                    .q_len = mlav_info_q_len(p, b), .prefix = mlav_info_prefix(p, b)};
        }
        if (s > 1) {
            for (int32_t m = 0; m < mt; m++)
                out->combine[ci++] = (mlav_combine_item){
                    .b = b, .mtile = m, .nsplit = s, .slot0 = slot + m, .slot_stride = mt,
                    .q_start = p->q_indptr[b], .rows = (int32_t)w.rows};
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

/* The model's dispatch: when each of `slots` block slots comes free (a min-heap), and the
 * latest end so far. */
typedef struct {
    int64_t *free_at, slots, end;
} dispatch;

static void dispatch_reset(dispatch *d, int64_t slots)
{
    memset(d->free_at, 0, (size_t)slots * sizeof(int64_t));
    d->slots = slots;
    d->end = 0;
}

/* A block costing `cost` goes to the slot that comes free first: sift its new time down. */
static void dispatch_block(dispatch *d, int64_t cost)
{
    const int64_t done = d->free_at[0] + cost;
    d->end = done > d->end ? done : d->end;
    int64_t k = 0;
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= d->slots)
            break;
        if (c + 1 < d->slots && d->free_at[c + 1] < d->free_at[c])
            c++;
        if (d->free_at[c] >= done)
            break;
        d->free_at[k] = d->free_at[c];
        k = c;
    }
    d->free_at[k] = done;
}

int64_t mlav_schedule_model_time(const mlav_schedule *s, const mlav_schedule_params *sp)
{
    int64_t combine = 0; /* the combine: split_cost_keys per split of its most split item */
    for (int32_t c = 0; c < s->n_combine; c++)
        if ((int64_t)sp->split_cost_keys * s->combine[c].nsplit > combine)
            combine = (int64_t)sp->split_cost_keys * s->combine[c].nsplit;
    const int64_t slots = sp->target_blocks < s->n_items ? sp->target_blocks : s->n_items;
    if (slots < 1)
        return combine;
    dispatch d = {.free_at = malloc((size_t)slots * sizeof(int64_t))};
    if (!d.free_at)
        return -1;
    dispatch_reset(&d, slots);
    for (int32_t i = 0; i < s->n_items; i++)
        dispatch_block(&d, sp->block_cost_keys + (s->items[i].kv_end - s->items[i].kv_begin));
    free(d.free_at);
    return d.end + combine;
}

/* mlav_schedule_model_time of build_at's schedule at `chunk`, without building it: the same
 * blocks in the same order. `d` holds target_blocks slots. */
static int64_t model_at(const mlav_problem_info *p, const mlav_schedule_params *sp, int64_t chunk,
                        dispatch *d)
{
    const int64_t n = blocks_at(p, sp, chunk);
    dispatch_reset(d, sp->target_blocks < n ? sp->target_blocks : n);
    int64_t most = 0;
    for (walk w = walk_start(p, sp, chunk); walk_next(&w);) {
        if (w.ns > 1 && w.ns > most)
            most = w.ns;
        for (int64_t k = 0; k < w.ns; k++) {
            const int64_t cost = sp->block_cost_keys + (walk_end(&w, k) - walk_begin(&w, k));
            for (int64_t m = 0; m < w.mt; m++)
                dispatch_block(d, cost);
        }
    }
    return d->end + (int64_t)sp->split_cost_keys * most;
}

int64_t mlav_schedule_model_chunk(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                  int64_t chunk)
{
    dispatch d = {.free_at = malloc((size_t)sp->target_blocks * sizeof(int64_t))};
    if (!d.free_at)
        return -1;
    const int64_t t = model_at(p, sp, chunk, &d);
    free(d.free_at);
    return t;
}

mlav_status mlav_schedule_build(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                mlav_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (sp->rows_per_tile < 1 || sp->key_align < 1 || sp->min_chunk < 1 || sp->max_splits < 1 ||
        sp->target_blocks < 1 || sp->block_cost_keys < 0 || sp->split_cost_keys < 0 ||
        sp->more_waves < 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "schedule parameters must be positive (the "
                                                    "two costs and more_waves non-negative)");

    /* First the smallest chunk whose blocks fit in whole waves of target_blocks, as few waves as
     * the unsplit batch allows: blocks of one split size finish together, and a wave that is only
     * a few blocks over (15 splits x 9 row tiles = 135 blocks on 132 SMs) doubles the time
     * (v2, docs/PERFORMANCE.md#schedule). */
    int64_t max_kv = 1;
    for (int32_t b = 0; b < p->B; b++)
        if (mlav_info_q_len(p, b) > 0 && mlav_info_kv_rows(p, b) > max_kv)
            max_kv = mlav_info_kv_rows(p, b);
    const int64_t cap = ceil_div(blocks_at(p, sp, ceil_div(max_kv, sp->key_align) * sp->key_align),
                                 sp->target_blocks) *
                        sp->target_blocks;
    const int64_t chunk0 = chunk_for_cap(p, sp, max_kv, cap);
    if (sp->block_cost_keys == 0)
        return build_at(p, sp, chunk0, out);

    /* Then the model (mlav_schedule_model_time, evaluated without building: model_at) weighs
     * more chunks and keeps the shortest:
     * - splits of twice and four times that chunk, where the many short splits' blocks and
     *   combine cost more than their parallelism gives (a lone q_len 1 request at prefix 4096,
     *   docs/PERFORMANCE.md#schedule);
     * - up to more_waves more waves of shorter splits, where the fewest waves leave SMs idle
     *   (9 row tiles x 14 splits = 126 blocks on 132 SMs; 16 requests x 9 row tiles = 144 row
     *   tiles, whose fewest waves are 3 splits in 3.3 waves and whose shortest modelled time is
     *   7 splits in 7.6) and the splits are long enough that a block's fixed cost is worth
     *   paying again: at short prefixes it is not, and the model rejects them there too
     *   (docs/PERFORMANCE.md#schedule, where the model's predictions meet the measurements). */
    dispatch d = {.free_at = malloc((size_t)sp->target_blocks * sizeof(int64_t))};
    if (!d.free_at)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory scheduling splits");
    int64_t best = model_at(p, sp, chunk0, &d), best_chunk = chunk0, last = chunk0;
    int64_t work = 0; /* KV rows of loop work over all blocks, the same at every chunk */
    for (int32_t b = 0; b < p->B; b++)
        work += ceil_div((int64_t)mlav_info_q_len(p, b) * p->H, sp->rows_per_tile) *
                mlav_info_kv_rows(p, b);
    for (int64_t k = 0; k < 2 + (int64_t)sp->more_waves; k++) {
        int64_t c;
        if (k < 2) {
            c = chunk0 << (k + 1);
        } else {
            c = chunk_for_cap(p, sp, max_kv, cap + (k - 1) * (int64_t)sp->target_blocks);
            if (c >= last)
                continue; /* no shorter split fits this many waves (min_chunk, max_splits) */
            last = c;
            /* no schedule of n blocks ends before its work and fixed costs spread evenly over
             * the slots, and n only grows with more waves: past the best, stop */
            const int64_t n = blocks_at(p, sp, c);
            if ((work + n * sp->block_cost_keys) / sp->target_blocks >= best)
                break;
        }
        if (c > INT32_MAX)
            continue;
        const int64_t t = model_at(p, sp, c, &d);
        if (t < best) {
            best = t;
            best_chunk = c;
        }
    }
    free(d.free_at);
    return build_at(p, sp, best_chunk, out); /* only the winner is built */
}
