/* The exact plan's split-KV schedule: the step rule (schedule_step.c, the one candidate search
 * and item writer) weighed by this file's block-by-block dispatch model. */
#include "schedule.h"

#include "schedule_shares.h"
#include "schedule_step.h"
#include "schedule_step_shares.h"
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

/* The dispatch model's walk: the requests that have rows, in the order the rule lays out their
 * blocks (schedule_step.c's writer: request-major, split, m-tile fastest), each with its row
 * tiles and splits at `chunk`. blocks_at counts its blocks and model_at dispatches them; the
 * tests hold the walk to every built schedule (mlav_schedule_model_chunk against
 * mlav_schedule_model_time). A request's blocks
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

int64_t mlav_schedule_dispatch_time(const mlav_split_item *items, int64_t n,
                                    const mlav_schedule_params *sp, int whole_tiles)
{
    const int64_t a = whole_tiles ? sp->key_align : 1;
    const int64_t slots = sp->target_blocks < n ? sp->target_blocks : n;
    if (slots < 1)
        return 0;
    dispatch d = {.free_at = malloc((size_t)slots * sizeof(int64_t))};
    if (!d.free_at)
        return -1;
    dispatch_reset(&d, slots);
    for (int64_t i = 0; i < n; i++)
        dispatch_block(&d, sp->block_cost_keys +
                               (items[i].kv_end - items[i].kv_begin + a - 1) / a * a);
    free(d.free_at);
    return d.end;
}

static int64_t model_time(const mlav_schedule *s, const mlav_schedule_params *sp, int whole_tiles)
{
    int64_t combine = 0; /* the combine: split_cost_keys per split of its most split item */
    for (int32_t c = 0; c < s->n_combine; c++)
        if ((int64_t)sp->split_cost_keys * s->combine[c].nsplit > combine)
            combine = (int64_t)sp->split_cost_keys * s->combine[c].nsplit;
    const int64_t t = mlav_schedule_dispatch_time(s->items, s->n_items, sp, whole_tiles);
    return t < 0 ? -1 : t + combine;
}

int64_t mlav_schedule_model_time(const mlav_schedule *s, const mlav_schedule_params *sp)
{
    return model_time(s, sp, 0);
}

int64_t mlav_schedule_tile_time(const mlav_schedule *s, const mlav_schedule_params *sp)
{
    return model_time(s, sp, 1);
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

/* The dispatch weight's context: the problem, its parameters and target_blocks slots. */
typedef struct {
    const mlav_problem_info *p;
    const mlav_schedule_params *sp;
    dispatch *d;
} dispatch_weight;

static int64_t dispatch_time(const void *ctx, int64_t chunk)
{
    const dispatch_weight *w = ctx;
    return model_at(w->p, w->sp, chunk, w->d);
}

/* The equal-shares candidate in place of the uniform schedule *out where it models within the
 * margin of its time (mlav_shares_win; 0.98 where *out is one wave that leaves SMs idle): the
 * model's ranking is trusted only past its error at the points measured
 * (docs/PERFORMANCE.md#schedule). Both weighed in whole tiles (mlav_schedule_tile_time): a cut
 * can move a request's partial last tile into a long block, which the kernel pays as a whole
 * tile; by keys such cuts looked shorter than the uniform schedule with the same longest block
 * in tiles, and ran slower (B 1, q_len 16, 4096: docs/PERFORMANCE.md#hopper). */
static mlav_status keep_shares(const mlav_problem_info *p, const mlav_schedule_params *sp,
                               mlav_schedule *out)
{
    const int64_t uniform = mlav_schedule_tile_time(out, sp);
    const int one_wave = out->n_items < sp->target_blocks;
    int64_t t;
    mlav_schedule sh;
    const mlav_status s = mlav_schedule_shares(p, sp, uniform, one_wave, &t, &sh);
    if (s != MLAV_OK || uniform < 0) {
        mlav_schedule_free(out);
        mlav_schedule_free(&sh);
        return s != MLAV_OK ? s
                            : mlav_set_error(MLAV_ERR_OUT_OF_MEMORY,
                                             "out of host memory scheduling splits");
    }
    if (t >= 0 && mlav_shares_win(t, uniform, one_wave)) {
        mlav_schedule_free(out);
        *out = sh;
    } else {
        mlav_schedule_free(&sh);
    }
    return MLAV_OK;
}

mlav_status mlav_schedule_build(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                mlav_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (sp->rows_per_tile < 1 || sp->key_align < 1 || sp->min_chunk < 1 || sp->max_splits < 1 ||
        sp->target_blocks < 1 || sp->block_cost_keys < 0 || sp->split_cost_keys < 0 ||
        sp->more_waves < 0 || sp->more_waves > 64)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "schedule parameters must be positive (the "
                                                    "two costs and more_waves non-negative, "
                                                    "more_waves at most 64)");

    /* The step rule (schedule_step.h), written once: first the smallest chunk whose blocks fit
     * in whole waves of target_blocks, as few waves as the unsplit batch allows: blocks of one
     * split size finish together, and a wave that is only a few blocks over (15 splits x 9 row
     * tiles = 135 blocks on 132 SMs) doubles the time (v2, docs/PERFORMANCE.md#schedule). With
     * no block cost that chunk is the schedule. */
    if (sp->block_cost_keys == 0)
        return mlav_step_schedule_exact(p, sp, NULL, out);

    /* Then the rule's other candidates, weighed by this model (mlav_schedule_model_time,
     * evaluated without building: model_at), the shortest kept:
     * - splits of twice and four times that chunk, where the many short splits' blocks and
     *   combine cost more than their parallelism gives (a lone q_len 1 request at prefix 4096,
     *   docs/PERFORMANCE.md#schedule);
     * - up to more_waves more waves of shorter splits, where the fewest waves leave SMs idle
     *   (9 row tiles x 14 splits = 126 blocks on 132 SMs; 16 requests x 9 row tiles = 144 row
     *   tiles, whose fewest waves are 3 splits in 3.3 waves and whose shortest modelled time is
     *   7 splits in 7.6) and the splits are long enough that a block's fixed cost is worth
     *   paying again: at short prefixes it is not, and the model rejects them there too
     *   (docs/PERFORMANCE.md#schedule, where the model's predictions meet the measurements).
     * The exact plan weighs by the block-by-block dispatch, where a plan for limits weighs by
     * the rule's closed form: the two pick different chunks for some problems, and an exact
     * plan's launch shape is what its performance was measured at. */
    dispatch d = {.free_at = malloc((size_t)sp->target_blocks * sizeof(int64_t))};
    if (!d.free_at)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory scheduling splits");
    const dispatch_weight dw = {p, sp, &d};
    const mlav_step_weight w = {dispatch_time, &dw};
    const mlav_status s = mlav_step_schedule_exact(p, sp, &w, out);
    free(d.free_at);
    if (s != MLAV_OK || !sp->shares)
        return s;
    return keep_shares(p, sp, out);
}
