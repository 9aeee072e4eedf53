/* The split schedule of one engine step (plans for limits): the rule that the host update
 * (schedule_step.c) and the device scheduler (src/cuda/schedule_step.cu) both follow, so that
 * the two build the same schedule from the same lengths, and the bounds that fix a plan's launch
 * shape and workspace for every step within its limits.
 *
 * The rule is the exact-length plan's search (schedule.c) with a model that needs no block-by-
 * block dispatch: the fewest whole waves of the shortest splits, splits of twice and four times
 * that chunk, and up to more_waves more waves of shorter ones, each weighed by
 *   (waves - 1) x (block_cost + mean block) + block_cost + longest block + split_cost x most
 * splits: every wave but the last at the mean, the last at the longest block. That is the
 * dispatch model's time wherever a step's blocks are of one length (one request, or a batch of
 * equal ones), and keeps the tail of a batch of mixed lengths in view (on the production
 * preset's batches of 16 and 32 requests, prefixes spread 0.5, the schedules it picks model
 * within 1.3% of the exact plan's; weighing the waves at the mean alone, 4-24% over). It needs
 * sums and maxima over the requests only, so one thread block evaluates it in parallel. */
#ifndef MLAV_COMMON_SCHEDULE_STEP_H
#define MLAV_COMMON_SCHEDULE_STEP_H

#include <stdint.h>

#include "hd.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The step region at the start of a plan for limits' workspace: this header, then (CUDA) the
 * items and combine items of the step, or (CPU backends) the step's lengths. */
typedef struct mlav_step_header {
    int32_t bad;        /* INT32_MAX: every request taken; else the first refused request, or
                           `batch` when q_indptr itself was refused */
    int32_t batch;      /* requests of the step */
    int32_t n_items, n_combine, n_slots; /* of the step (the launches are sized by the bounds) */
    int32_t chunk_keys; /* the chosen KV rows per split (0 when nothing runs) */
    int32_t pad[2];
} mlav_step_header;

/* The most a step within the limits can need: fixed at plan time. */
typedef struct mlav_step_bounds {
    int32_t max_tiles;   /* row tiles of one step */
    int32_t max_items;   /* split blocks: the split kernel's grid */
    int32_t max_combine; /* combine items: the combine's grid */
    int32_t max_slots;   /* partial states in the workspace */
} mlav_step_bounds;

/* The row tiles, splits and longest block of a schedule at one chunk, summed over requests. */
typedef struct mlav_step_eval {
    int64_t blocks;  /* split blocks */
    int64_t longest; /* KV rows of the longest block */
    int32_t most;    /* most splits of a split request (0 when none is split) */
} mlav_step_eval;

MLAV_HD int64_t mlav_step_ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Add one request of `tiles` row tiles and kv KV rows to an evaluation at `chunk`. */
MLAV_HD void mlav_step_eval_add(mlav_step_eval *e, int64_t tiles, int64_t kv, int64_t chunk,
                                int32_t key_align, int32_t max_splits)
{
    if (tiles == 0)
        return;
    int64_t per;
    const int64_t s = mlav_schedule_splits(kv, chunk, key_align, max_splits, &per);
    const int64_t len = s > 1 ? per : kv;
    e->blocks += tiles * s;
    e->longest = len > e->longest ? len : e->longest;
    if (s > 1 && s > e->most)
        e->most = (int32_t)s;
}

/* Merge two evaluations (the device scheduler's reductions). */
MLAV_HD void mlav_step_eval_merge(mlav_step_eval *e, const mlav_step_eval *o)
{
    e->blocks += o->blocks;
    e->longest = o->longest > e->longest ? o->longest : e->longest;
    e->most = o->most > e->most ? o->most : e->most;
}

/* The step model's time in KV rows of loop work (see the top of this file); `work` is the KV
 * rows of all row tiles, sum of tiles x kv, the same at every chunk. */
MLAV_HD int64_t mlav_step_model(const mlav_step_eval *e, int64_t work, int32_t target_blocks,
                                int32_t block_cost, int32_t split_cost)
{
    if (e->blocks == 0)
        return 0;
    const int64_t waves = mlav_step_ceil_div(e->blocks, target_blocks);
    /* every wave but the last at the mean block, the last at the longest one (the dispatch
     * model's time when the blocks are of one length) */
    const int64_t t = (waves - 1) * (block_cost + work / e->blocks) + block_cost + e->longest;
    return t + (int64_t)split_cost * e->most;
}

/* Whether a request's lengths fit a plan's limits (q_len 0 always does: it is skipped). */
MLAV_HD int mlav_step_request_ok(int64_t q_len, int64_t kv, int32_t max_q_len, int32_t max_kv)
{
    return q_len == 0 || (q_len > 0 && q_len <= max_q_len && kv >= q_len && kv <= max_kv);
}

/* Row tiles of a request of q_len tokens and H heads. */
MLAV_HD int64_t mlav_step_tiles(int64_t q_len, int32_t H, int32_t rows_per_tile)
{
    return mlav_step_ceil_div(q_len * H, rows_per_tile);
}

/* The most waves beyond the fewest that a plan for limits weighs: each one adds a wave of
 * blocks to the fixed split grid for every step, and a block past a step's schedule still costs
 * its dispatch. More waves pay where the limits' row tiles fill the SMs already (32 x H 16 x
 * q_len 16 at prefixes 16k-49k: 4 more model 1.013 of the exact plan, 2 more 1.090;
 * bench/diag/schedule_choices); alone, a step's longest block decides. The device scheduler
 * sizes its arrays by the larger. */
#define MLAV_STEP_MORE_WAVES 4
#define MLAV_STEP_MORE_WAVES_FEW 2

/* The schedule parameters of a plan for limits: `base` (the exact plan's, for the device) with
 * more_waves chosen from the limits' row tiles as above (host). */
mlav_schedule_params mlav_step_params(int32_t H, const mlav_limits *lim,
                                      mlav_schedule_params base);

/* The host rule's scratch: a step's accepted requests, packed, for up to MLAV_STEP_MAX_BATCH
 * (~40 KB). The caller owns it (a plan for limits keeps one and uses it under its lock), so that
 * a host update takes neither an allocation nor that much of the caller's stack. */
typedef struct mlav_step_scratch mlav_step_scratch;
size_t mlav_step_scratch_bytes(void);

/* The bounds of every step within `lim` for H heads under `sp` (host). */
mlav_step_bounds mlav_step_bounds_of(int32_t H, const mlav_limits *lim,
                                     const mlav_schedule_params *sp);

/* Build one step's schedule on the host by the rule above into fixed arrays sized by the bounds
 * (no allocation): header, items [max_items] (past n_items: b = -1, which the split kernel skips)
 * and combine [max_combine] (past n_combine: nsplit = 0, which the combine skips). Requests whose
 * lengths break the limits are skipped and the first is recorded in header->bad; a q_indptr not
 * starting at 0, decreasing or past max_tokens leaves the schedule empty. The device scheduler
 * writes the same bytes. `scratch` (mlav_step_scratch_bytes, any alignment malloc gives) is the
 * caller's, used by one build at a time. */
void mlav_step_schedule_build(int32_t batch, const int32_t *q_indptr, const int32_t *kv_lens,
                              int32_t H, const mlav_limits *lim, const mlav_schedule_params *sp,
                              const mlav_step_bounds *bd, mlav_step_header *hdr,
                              mlav_split_item *items, mlav_combine_item *combine,
                              mlav_step_scratch *scratch);

#ifdef __cplusplus
}
#endif

#endif
