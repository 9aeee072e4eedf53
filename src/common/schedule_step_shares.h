/* Equal shares in the step rule (schedule_step.h): the arithmetic that the host's build
 * (schedule_step_shares.c, for mlav_step_schedule_build) and the device scheduler's
 * (src/cuda/schedule_step_shares.cuh) share, so that both write the same bytes.
 *
 * The exact plan's second candidate (schedule_shares.c) cuts the batch's KV tiles, the requests'
 * end to end, into P equal parts, a block for each request a part touches and row tile, and
 * weighs part counts with the block-by-block dispatch model. A step has no room for that model
 * (one thread block, a few microseconds), so it takes one part count and a closed form that is
 * the dispatch model's time for it:
 * - P = target_blocks / mt parts (at most the batch's tiles): each part's first pieces, one per
 *   row tile, fill one wave;
 * - the pieces go out by when each would start if its part had an SM of its own for each row
 *   tile (the part's KV rows before it, and a block's fixed cost for each piece before it), then
 *   by part. The GPU hands a block to the SM that comes free first, which at a piece's start is
 *   the one that ran its part's pieces before it; so the schedule ends with its longest part,
 *   max_j (tiles_j ka + pieces_j block_cost), plus the combine's split cost for its most split
 *   request. The SMs no part's first pieces take only end some parts sooner.
 * It applies where every request with rows has the same row tiles (as the exact plan's rule),
 * to an unsharded step of 2 to P requests with rows (so that the pieces' order is a sort of at
 * most P - 1 later pieces), and is taken where it models at most 0.97 of the uniform
 * schedule's closed form (mlav_step_model), the margin the exact plan keeps. */
#ifndef MLAV_COMMON_SCHEDULE_STEP_SHARES_H
#define MLAV_COMMON_SCHEDULE_STEP_SHARES_H

#include <stdint.h>

#include "hd.h"
#include "schedule_step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most parts of a step's shares: the device scheduler's arrays (requests, parts and pieces)
 * are sized by it; a device of more blocks a wave per row tile keeps the uniform schedule. */
#define MLAV_STEP_SHARES_MAX_PARTS 256

/* The parts of a step of mt row tiles a request and N KV tiles in all, or 0 where shares do
 * not apply to `n` requests with rows. */
static MLAV_HD int64_t mlav_step_shares_parts(int64_t n, int64_t mt, int64_t N,
                                              int32_t target_blocks)
{
    int64_t P = mt > 0 ? target_blocks / mt : 0;
    P = P < N ? P : N;
    return n >= 2 && n <= P && P <= MLAV_STEP_SHARES_MAX_PARTS ? P : 0;
}

/* Part j's first tile: floor(N j / P) (N j < 2^52: exact through mlav_step_div). */
static MLAV_HD int64_t mlav_step_part_begin(int64_t N, int64_t P, int64_t j)
{
    return mlav_step_div(N * j, P);
}

/* The part of tile t: the largest j with part_begin(j) <= t, ceil((t + 1) P / N) - 1. */
static MLAV_HD int64_t mlav_step_part_of(int64_t N, int64_t P, int64_t t)
{
    return mlav_step_div((t + 1) * P - 1, N);
}

/* The packed request whose tiles hold tile t: the last i < n with first[i] <= t (first: the
 * requests' first tiles in the sequence, increasing). */
static MLAV_HD int32_t mlav_step_shares_owner(const int64_t *first, int32_t n, int64_t t)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) >> 1;
        if (first[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* When a part's r-th piece, `into` tiles into the part, would start on the part's own SM. */
static MLAV_HD int64_t mlav_step_piece_start(int64_t into, int32_t r,
                                             const mlav_schedule_params *sp)
{
    return into * sp->key_align + (int64_t)r * sp->block_cost_keys;
}

/* Part j's time in the closed form: its tiles and a fixed cost for each of its pieces. */
static MLAV_HD int64_t mlav_step_part_time(int64_t tiles, int64_t pieces,
                                           const mlav_schedule_params *sp)
{
    return tiles * sp->key_align + pieces * sp->block_cost_keys;
}

/* Whether equal shares of modelled time `t` are taken over the uniform schedule's `uniform`: at
 * most 0.97 of it, the margin past the model's error at the points measured
 * (docs/PERFORMANCE.md#schedule); at most 0.98 where the uniform schedule is one wave that leaves
 * SMs idle (`one_wave`), where there is no dispatch order to mis-model and the idle SMs are
 * certain (B 16 at two row tiles a request, 131k: 128 blocks on 132 SMs). The one rule of the
 * exact plan (schedule.c, keep_shares; schedule_shares.c's bound) and of a step (here, and the
 * device's step_shares, which pass one_wave 0: a step's closed form was not measured there);
 * uniform below INT64_MAX / 100. */
static MLAV_HD int mlav_shares_win(int64_t t, int64_t uniform, int one_wave)
{
    return t * 100 <= uniform * (one_wave ? 98 : 97);
}

/* ---- the host's build (schedule_step_shares.c) ------------------------------------------- */

/* A piece that starts inside its part (a request's first): its start (mlav_step_piece_start),
 * part and request. */
typedef struct mlav_step_shares_later {
    int64_t start;
    int32_t part, req;
} mlav_step_shares_later;

/* The build's arrays, in the caller's step scratch (schedule_step.c): each packed request's
 * first tile in the batch's sequence, pieces and first slot; each part's pieces past its first;
 * the later pieces; the pieces in dispatch order. */
typedef struct mlav_step_shares_scratch {
    int64_t first[MLAV_STEP_SHARES_MAX_PARTS + 1];
    int32_t count[MLAV_STEP_SHARES_MAX_PARTS], slot0[MLAV_STEP_SHARES_MAX_PARTS];
    int32_t inside[MLAV_STEP_SHARES_MAX_PARTS];
    mlav_step_shares_later later[MLAV_STEP_SHARES_MAX_PARTS];
    int32_t piece_req[2 * MLAV_STEP_SHARES_MAX_PARTS], piece_k[2 * MLAV_STEP_SHARES_MAX_PARTS];
    int64_t piece_t0[2 * MLAV_STEP_SHARES_MAX_PARTS], piece_t1[2 * MLAV_STEP_SHARES_MAX_PARTS];
} mlav_step_shares_scratch;

/* An unsharded step's requests with rows, packed in request order (the step rule's: KV rows at
 * least 1, row tiles, the request), with the step's lengths and heads. */
typedef struct mlav_step_shares_batch {
    int32_t n;
    const uint32_t *kv;
    const int32_t *tiles, *b;
    const int32_t *q_indptr, *kv_lens;
    int32_t H;
} mlav_step_shares_batch;

/* What a build wrote: its counts, the most splits of a request, the parts' longest in keys. */
typedef struct mlav_step_shares_made {
    int32_t items, combine, slots, most, chunk_keys;
} mlav_step_shares_made;

/* Equal shares in place of the uniform schedule, whose closed form (mlav_step_model) is
 * `uniform`, where they apply and win: items and combine items as mlav_step_schedule_build
 * writes them (past the counts untouched), *made, and 1; else 0, nothing written. */
int mlav_step_shares_build(const mlav_step_shares_batch *r, const mlav_schedule_params *sp,
                           const mlav_step_bounds *bd, int64_t uniform, mlav_split_item *items,
                           mlav_combine_item *combine, mlav_step_shares_scratch *sc,
                           mlav_step_shares_made *made);

#ifdef __cplusplus
}
#endif

#endif
