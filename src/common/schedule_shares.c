/* Equal shares of the batch's KV tiles across requests: the exact plan's second candidate
 * (mlav_schedule_build, where mlav_schedule_params.shares asks for it).
 *
 * The uniform schedule (schedule_step.c's writer) splits every request at one chunk, so a
 * batch whose row tiles do not fill whole waves of the SMs leaves some of them a block short: 16
 * requests x 9 row tiles at prefix 4096 run 576 blocks of 16 tiles in 4.36 waves, the busiest SM
 * 5 blocks (81 tiles and 5 blocks' fixed cost) where an equal share is 71 tiles. Here every row
 * tile index m reads the batch's KV tiles as one sequence (the requests' tiles end to end), cut
 * into P equal parts; a part is a block per request it touches, for every m. So the blocks of
 * part j read the same KV rows for every m at once (their L2 reuse, as the uniform schedule's
 * split-major order gives), and a request spans a few parts instead of one fixed chunk each.
 * Blocks go out each part's first (part-major, m fastest), then the later pieces in one of two
 * orders, both weighed:
 * - by start: when each would start if every part had an SM of its own for each m (its pieces
 *   back to back, each with its fixed cost), then by part. The GPU hands the next block to the
 *   SM that comes free first, which at a piece's start is the one that ran its part's pieces
 *   before it, so the schedule ends with its longest part (the step rule's closed form,
 *   schedule_step_shares.h). Where parts have three pieces, rounds modelled 1.13x and 1.24x it
 *   (32 x (H 16, q_len 16) and 64 x (H 8, q_len 16) at 32k, prefixes spread 50%);
 * - in rounds: the parts' second pieces longest first, then the third: where some SMs take no
 *   part's first block, or the first blocks fill more than a wave, the free SMs take the longest
 *   and this can model shorter (27 x (H 16, q_len 12) at 2,048: 0.968 of by start).
 * On 3,000 random batches of 2-64 requests (H 8-128, q_len 1-16, prefixes 1k-128k spread 0-100%)
 * weighing both modelled 0.988 of rounds alone (geomean), never longer, at 25-173 us a plan on
 * the 2-core VM at bench/diag/schedule_choices --shares' batches, where rounds alone took 23-170
 * (both past the lower bound that skips the part counts that cannot win).
 * The plan weighs a handful of part counts around whole waves with the dispatch model in whole
 * tiles (mlav_schedule_tile_time) and keeps this schedule only where it models clearly faster than
 * the uniform one. Only for batches whose requests with rows have the same row tiles, unsharded
 * (else NULL: the uniform schedule stands). */
#include "schedule_shares.h"

#include "schedule_step.h"
#include "schedule_step_shares.h"
#include "shard.h"

#include <stdlib.h>
#include <string.h>

/* A part's piece of one request: KV tiles [t0, t1) of request b, its k-th piece (in KV order),
 * in the part's r-th place; `start`, when it would start on its part's own SM: the part's tiles
 * before it in KV rows and a block's fixed cost for each piece before it. */
typedef struct {
    int32_t b, k, r, part;
    int64_t t0, t1, start;
} piece;

/* The batch as this rule sees it: the requests with rows, each's KV tiles and first tile in the
 * joint sequence. */
typedef struct {
    int32_t n, mt;   /* requests with rows, their row tiles (the same for all) */
    int32_t *b;      /* [n] the request */
    int64_t *kv;     /* [n] its KV rows */
    int64_t *first;  /* [n + 1] each's first tile in the sequence; first[n]: all tiles */
} share_batch;

/* The pieces of P parts, part by part (order_pieces puts them in dispatch order); *n_pieces
 * their count, *most the most pieces of one request (0 when none is split). 0 when a request
 * would take more than max_splits pieces. `pc` holds at least P + n pieces. */
static int cut(const share_batch *sb, const mlav_schedule_params *sp, int64_t P, piece *pc,
               int64_t *n_pieces, int32_t *most, int32_t *count)
{
    const int64_t N = sb->first[sb->n];
    int64_t n = 0;
    int32_t i = 0;
    memset(count, 0, (size_t)sb->n * sizeof(int32_t));
    for (int64_t j = 0; j < P; j++) {
        const int64_t a0 = N * j / P, e = N * (j + 1) / P;
        int64_t a = a0;
        for (int32_t r = 0; a < e; r++) {
            while (sb->first[i + 1] <= a)
                i++;
            const int64_t end = sb->first[i + 1] < e ? sb->first[i + 1] : e;
            if (count[i] == sp->max_splits)
                return 0;
            pc[n++] = (piece){.b = i, .k = count[i]++, .r = r, .part = (int32_t)j, .t0 = a,
                              .t1 = end, .start = mlav_step_piece_start(a - a0, r, sp)};
            a = end;
        }
    }
    *most = 0;
    for (int32_t k = 0; k < sb->n; k++)
        if (count[k] > 1 && count[k] > *most)
            *most = count[k];
    *n_pieces = n;
    return 1;
}

/* Dispatch order: by start, then by part. */
static int piece_order(const void *x, const void *y)
{
    const piece *a = x, *b = y;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return a->part < b->part ? -1 : a->part > b->part;
}

/* Rounds: the parts' second pieces longest first, then the third. */
static int round_order(const void *x, const void *y)
{
    const piece *a = x, *b = y;
    if (a->r != b->r)
        return a->r < b->r ? -1 : 1;
    if (a->t1 - a->t0 != b->t1 - b->t0)
        return a->t1 - a->t0 > b->t1 - b->t0 ? -1 : 1;
    return a->part < b->part ? -1 : a->part > b->part;
}

/* Whether pc[0..n) is sorted by `order`. */
static int in_order(const piece *pc, int64_t n, int (*order)(const void *, const void *))
{
    for (int64_t k = 1; k < n; k++)
        if (order(&pc[k - 1], &pc[k]) > 0)
            return 0;
    return 1;
}

/* `pc` (cut's, by part) into dispatch order, by start (piece_order) or in rounds (round_order):
 * each part's first piece keeps its order at the front and only the later ones (a few per
 * request) are sorted, behind them; `tmp` holds n pieces. */
static void order_pieces(piece *pc, int64_t n, piece *tmp, int rounds)
{
    int64_t front = 0, back = 0;
    for (int64_t k = 0; k < n; k++)
        if (pc[k].r == 0)
            pc[front++] = pc[k];
        else
            tmp[back++] = pc[k];
    memcpy(pc + front, tmp, (size_t)back * sizeof(piece));
    qsort(pc + front, (size_t)back, sizeof(piece), rounds ? round_order : piece_order);
}

/* The schedule of P parts: its items (for every piece, m fastest), combine items and splits. */
static mlav_status write_shares(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                const share_batch *sb, const piece *pc, int64_t n_pieces,
                                const int32_t *count, int64_t P, mlav_schedule *out)
{
    memset(out, 0, sizeof *out);
    const int32_t mt = sb->mt;
    int64_t slots = 0, n_combine = 0;
    for (int32_t i = 0; i < sb->n; i++)
        if (count[i] > 1) {
            slots += (int64_t)count[i] * mt;
            n_combine += mt;
        }
    if (n_pieces * mt > INT32_MAX || slots > INT32_MAX)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "too many blocks for one schedule");
    const int64_t n_items = n_pieces * mt;
    out->items = calloc((size_t)(n_items > 0 ? n_items : 1), sizeof(mlav_split_item));
    out->combine = calloc((size_t)(n_combine ? n_combine : 1), sizeof(mlav_combine_item));
    out->splits = calloc((size_t)(p->B > 0 ? p->B : 1), sizeof(int32_t));
    int32_t *slot0 = malloc((size_t)(sb->n > 0 ? sb->n : 1) * sizeof(int32_t));
    if (!out->items || !out->combine || !out->splits || !slot0) {
        free(slot0);
        mlav_schedule_free(out);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory scheduling splits");
    }
    /* slots: request by request, piece k of row tile m at slot0 + k mt + m (the uniform
     * writer's layout); the combine items in the same order */
    int32_t slot = 0, c = 0;
    for (int32_t i = 0; i < sb->n; i++) {
        const int32_t b = sb->b[i], q = mlav_info_q_len(p, b);
        out->splits[b] = count[i];
        slot0[i] = count[i] > 1 ? slot : -1;
        if (count[i] < 2)
            continue;
        for (int32_t m = 0; m < mt; m++)
            out->combine[c++] = (mlav_combine_item){.b = b, .mtile = m, .nsplit = count[i],
                                                    .slot0 = slot + m, .slot_stride = mt,
                                                    .q_start = p->q_indptr[b],
                                                    .rows = (int32_t)((int64_t)q * p->H)};
        slot += count[i] * mt;
    }
    int64_t n = 0;
    for (int64_t k = 0; k < n_pieces; k++) {
        const piece *x = &pc[k];
        const int32_t b = sb->b[x->b], q = mlav_info_q_len(p, b);
        const int64_t kv = sb->kv[x->b], base = sb->first[x->b];
        const int64_t end = (x->t1 - base) * sp->key_align;
        for (int32_t m = 0; m < mt; m++)
            out->items[n++] = (mlav_split_item){
                .b = b, .mtile = m, .kv_begin = (int32_t)((x->t0 - base) * sp->key_align),
                .kv_end = (int32_t)(end < kv ? end : kv),
                .slot = slot0[x->b] < 0 ? -1 : slot0[x->b] + x->k * mt + m,
                .q_start = p->q_indptr[b], .q_len = q, .prefix = p->kv_lens[b] - q};
    }
    free(slot0);
    out->n_items = (int32_t)n;
    out->n_combine = c;
    out->n_slots = slot;
    /* a part's keys */
    const int64_t share = mlav_step_ceil_div(sb->first[sb->n], P) * sp->key_align;
    out->chunk_keys = (int32_t)(share < INT32_MAX ? share : INT32_MAX);
    return MLAV_OK;
}

/* The modelled time of P parts' pieces `pc` in dispatch order (mlav_schedule_tile_time of the
 * schedule write_shares would write): their blocks' KV lengths in `it` (room for n_pieces x mt). */
static int64_t model_pieces(const share_batch *sb, const mlav_schedule_params *sp,
                            const piece *pc, int64_t n_pieces, int32_t most, mlav_split_item *it)
{
    int64_t n = 0;
    for (int64_t k = 0; k < n_pieces; k++) {
        const int32_t b = sb->b[pc[k].b];
        const int64_t kv = sb->kv[pc[k].b], base = sb->first[pc[k].b];
        const int64_t end = (pc[k].t1 - base) * sp->key_align;
        const mlav_split_item x = {.b = b, .kv_begin = (int32_t)((pc[k].t0 - base) * sp->key_align),
                                   .kv_end = (int32_t)(end < kv ? end : kv)};
        for (int32_t m = 0; m < sb->mt; m++)
            it[n++] = x;
    }
    const int64_t t = mlav_schedule_dispatch_time(it, n, sp, 1);
    return t < 0 ? -1 : t + (int64_t)sp->split_cost_keys * most;
}

/* mlav_schedule_shares, or with P > 0 mlav_schedule_shares_at: that part count alone, in the
 * order `rounds` says, neither bound nor beat weighed. */
static mlav_status shares(const mlav_problem_info *p, const mlav_schedule_params *sp,
                          int64_t beat, int one_wave, int64_t fixed_p, int fixed_rounds,
                          int64_t *model, mlav_schedule *out)
{
    memset(out, 0, sizeof *out);
    *model = -1;
    if (p->shard.ranks > 1 || p->B < 1)
        return MLAV_OK;
    share_batch sb = {0, 0, malloc((size_t)p->B * sizeof(int32_t)),
                      malloc((size_t)p->B * sizeof(int64_t)),
                      malloc((size_t)(p->B + 1) * sizeof(int64_t))};
    int32_t *count = malloc((size_t)p->B * sizeof(int32_t));
    piece *pc = NULL;
    mlav_split_item *it = NULL;
    mlav_status st = MLAV_OK;
    if (!sb.b || !sb.kv || !sb.first || !count)
        goto oom;
    sb.first[0] = 0;
    for (int32_t b = 0; b < p->B; b++) {
        const int32_t q = mlav_info_q_len(p, b);
        if (q <= 0)
            continue;
        const int32_t mt = (int32_t)mlav_step_tiles(q, p->H, sp->rows_per_tile);
        const int64_t kv = mlav_info_kv_rows(p, b);
        if ((sb.n > 0 && mt != sb.mt) || kv < 1)
            goto done; /* row tiles that differ, or a request without keys: not this rule's */
        sb.mt = mt;
        sb.b[sb.n] = b;
        sb.kv[sb.n] = kv;
        sb.first[sb.n + 1] = sb.first[sb.n] + mlav_step_ceil_div(kv, sp->key_align);
        sb.n++;
    }
    if (sb.n == 0)
        goto done;
    /* no schedule ends before every SM has had its share of the keys and of one block per row
     * tile: where `beat` is within 3% of that, there is nothing to weigh */
    int64_t keys = 0;
    for (int32_t i = 0; i < sb.n; i++)
        keys += sb.kv[i];
    const int64_t bound =
        mlav_step_ceil_div((keys + (int64_t)sb.n * sp->block_cost_keys) * sb.mt, sp->target_blocks);
    if (fixed_p <= 0 && beat < INT64_MAX / 100 && !mlav_shares_win(bound, beat, one_wave))
        goto done;

    /* the part counts weighed: those whose first round fills one to four waves, and one part
     * fewer and more (a round of P x mt blocks just over a wave doubles it) */
    const int64_t N = sb.first[sb.n], G = sp->target_blocks;
    int64_t cand[12], nc = 0;
    for (int64_t w = 1; w <= 4 && fixed_p <= 0; w++)
        for (int64_t d = -1; d <= 1; d++) {
            int64_t P = w * G / sb.mt + d;
            P = P < 1 ? 1 : P > N ? N : P; /* at least a part, at most a tile each */
            if (nc == 0 || cand[nc - 1] < P)
                cand[nc++] = P;
        }
    if (fixed_p > 0)
        cand[nc++] = fixed_p < N ? fixed_p : N;
    pc = malloc(2 * (size_t)(cand[nc - 1] + sb.n) * sizeof(piece));
    it = malloc((size_t)(cand[nc - 1] + sb.n) * (size_t)sb.mt * sizeof(mlav_split_item));
    if (!pc || !it)
        goto oom;
    piece *tmp = pc + cand[nc - 1] + sb.n;
    int64_t best_p = 0;
    int best_r = 0;
    for (int64_t c = 0; c < nc; c++) {
        int64_t n_pieces;
        int32_t most;
        if (!cut(&sb, sp, cand[c], pc, &n_pieces, &most, count))
            continue;
        /* no order ends before its blocks' tiles and fixed costs spread evenly over the slots:
         * past the best so far, it would not be taken */
        const int64_t blocks = n_pieces * sb.mt, slots = blocks < G ? blocks : G;
        const int64_t even = mlav_step_ceil_div(
            (N * sp->key_align + n_pieces * sp->block_cost_keys) * sb.mt, slots);
        if (*model >= 0 && even + (int64_t)sp->split_cost_keys * most >= *model)
            continue;
        for (int rounds = 0; rounds < 2; rounds++) {
            if (fixed_p > 0 && rounds != fixed_rounds)
                continue;
            order_pieces(pc, n_pieces, tmp, rounds);
            if (rounds && fixed_p <= 0 && in_order(pc, n_pieces, piece_order))
                break; /* the same order as by start, weighed already */
            const int64_t t = model_pieces(&sb, sp, pc, n_pieces, most, it);
            if (t < 0)
                goto oom;
            if (*model < 0 || t < *model) {
                *model = t;
                best_p = cand[c];
                best_r = rounds;
            }
        }
    }
    if (best_p > 0) {
        int64_t n_pieces;
        int32_t most;
        cut(&sb, sp, best_p, pc, &n_pieces, &most, count);
        order_pieces(pc, n_pieces, tmp, best_r);
        st = write_shares(p, sp, &sb, pc, n_pieces, count, best_p, out);
    }
    goto done;
oom:
    st = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory scheduling splits");
done:
    if (st != MLAV_OK)
        *model = -1;
    free(it);
    free(pc);
    free(count);
    free(sb.b);
    free(sb.kv);
    free(sb.first);
    return st;
}

mlav_status mlav_schedule_shares(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                 int64_t beat, int one_wave, int64_t *model,
                                 mlav_schedule *out)
{
    return shares(p, sp, beat, one_wave, 0, 0, model, out);
}

mlav_status mlav_schedule_shares_at(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                    int64_t parts, int rounds, int64_t *model, mlav_schedule *out)
{
    return shares(p, sp, INT64_MAX, 0, parts > 0 ? parts : 1, rounds != 0, model, out);
}
