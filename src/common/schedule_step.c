/* The host side of the step rule (schedule_step.h): the bounds of a plan for limits, and one
 * step's schedule built into fixed arrays, as the device scheduler builds it. */
#include "schedule_step.h"

#include <stdlib.h>
#include <string.h>

#include "combine_shape.h"
#include "fastdiv.h"
#include "schedule_step_shares.h"
#include "shard.h"

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
    bd.combine_wave[0] = bd.combine_wave[1] = bd.combine_wave[2] = 0;
    return bd;
}

/* The accepted requests (row tiles > 0), packed, in request order: the chunk searches, the
 * weighing and the item writer read only these. A step's live in the caller's scratch
 * (mlav_step_scratch, schedule_step.h); an exact plan's, of any batch, in an allocation. */
typedef struct {
    int32_t n;
    uint32_t *kv;   /* the rows the rank reads, at least 1 */
    double *x;      /* kk - 1/2, kk = ceil(kv / key_align) (see floor_div) */
    int32_t *tiles; /* row tiles */
    int32_t *b;     /* the request */
} step_reqs;

struct mlav_step_scratch {
    uint32_t kv[MLAV_STEP_MAX_BATCH];
    double x[MLAV_STEP_MAX_BATCH];
    int32_t tiles[MLAV_STEP_MAX_BATCH];
    int32_t b[MLAV_STEP_MAX_BATCH];
    mlav_step_shares_scratch shares;
};

size_t mlav_step_scratch_bytes(void)
{
    return sizeof(struct mlav_step_scratch);
}

/* 1 / d for the splits up to MLAV_STEP_INV_MAX (schedule_step.h): the compiler's correctly
 * rounded constants. */
#define STEP_INV4(d) 1.0 / (d), 1.0 / ((d) + 1), 1.0 / ((d) + 2), 1.0 / ((d) + 3)
#define STEP_INV16(d) STEP_INV4(d), STEP_INV4((d) + 4), STEP_INV4((d) + 8), STEP_INV4((d) + 12)
#define STEP_INV64(d)                                                                              \
    STEP_INV16(d), STEP_INV16((d) + 16), STEP_INV16((d) + 32), STEP_INV16((d) + 48)
static const double step_inv[MLAV_STEP_INV_MAX + 1] = {0.0, STEP_INV64(1), STEP_INV64(65),
                                                       STEP_INV64(129), STEP_INV64(193)};

/* The rule's evaluation at the chunk k ka (k ka < 2^31) over the accepted requests, with no
 * division per request, and its plateau (schedule_step.h). */
static mlav_step_plateau probe_at(const step_reqs *r, int64_t k, const mlav_schedule_params *sp)
{
    const uint32_t ka = (uint32_t)sp->key_align, max_s = (uint32_t)sp->max_splits;
    const double ik = 1.0 / (double)k;
    mlav_step_probe p = mlav_step_probe_start();
    for (int32_t i = 0; i < r->n; i++)
        mlav_step_probe_add(&p, r->kv[i], r->x[i], r->tiles[i], ik, ka, max_s, step_inv);
    return mlav_step_probe_finish(&p, ka);
}

/* The chunk searches of the rule: for each j < n, the smallest k in [lo, hi) with blocks(k ka)
 * <= cap0 + j S, else hi (mlav_step_range, schedule_step.h). The host makes them one after
 * another, each probe narrowing every search's range, and its one-sided guesses go through
 * the probe past R whose blocks are nearest R's less one wave. On random batches of 64 requests
 * (bench/diag/schedule_choices' kind), 11.4 probes for the 5 searches, where bisections
 * evaluated the rule 48 times. */
enum { STEP_SEARCHES = 1 + 64, STEP_PROBES = 128 };

static void chunk_searches(const step_reqs *r, int64_t work, int64_t all_tiles, int64_t lo,
                           int64_t hi, int64_t cap0, int n, const mlav_schedule_params *sp,
                           mlav_step_range *q)
{
    const int64_t S = sp->target_blocks, ka = sp->key_align;
    /* the probes so far (k, blocks), for one-sided guesses; hi's blocks are every row tile */
    int64_t pk[STEP_PROBES], pf[STEP_PROBES];
    int np = 0;
    pk[np] = hi;
    pf[np++] = all_tiles;
    for (int j = 0; j < n; j++)
        q[j] = mlav_step_range_start(lo, hi, all_tiles);
    for (int j = 0; j < n; j++) {
        const int64_t cap = cap0 + j * S, w0 = q[j].R - q[j].L;
        for (int step = 1; q[j].L < q[j].R; step++) {
            int c = -1;
            int64_t cd = 0;
            for (int i = 0; i < np && !q[j].hasL; i++) {
                if (pk[i] <= q[j].R || pf[i] >= q[j].fR)
                    continue;
                const int64_t d = pf[i] - (q[j].fR - S);
                if (c < 0 || (d < 0 ? -d : d) < cd) {
                    c = i;
                    cd = d < 0 ? -d : d;
                }
            }
            const int64_t p = mlav_step_range_guess(&q[j], cap, step, w0, c >= 0 ? pk[c] : -1,
                                                    c >= 0 ? pf[c] : 0, work, all_tiles, ka);
            const mlav_step_plateau pr = probe_at(r, p, sp);
            if (np < STEP_PROBES) {
                pk[np] = p;
                pf[np++] = pr.e.blocks;
            }
            for (int i = 0; i < n; i++)
                mlav_step_range_learn_plateau(&q[i], cap0 + i * S, &pr);
        }
    }
}

/* A lower bound of mlav_step_model at a candidate chunk, without a pass over the requests: its
 * blocks come in at least wmin waves, at most bmax of them (so the mean block is at least work /
 * bmax), and the longest block and most splits are at least those of the longest request. */
static int64_t candidate_bound(int64_t max_kv, int64_t work, int64_t wmin, int64_t bmax,
                               int64_t chunk, const mlav_schedule_params *sp)
{
    int64_t per;
    const int64_t s = mlav_schedule_splits(max_kv, chunk, sp->key_align, sp->max_splits, &per);
    return (wmin - 1) * (sp->block_cost_keys + work / bmax) + sp->block_cost_keys +
           (s > 1 ? per : max_kv) + (int64_t)sp->split_cost_keys * (s > 1 ? s : 0);
}

/* The model's evaluation at a candidate chunk. */
static mlav_step_eval eval_at(const step_reqs *r, int64_t chunk, const mlav_schedule_params *sp)
{
    return probe_at(r, chunk / sp->key_align, sp).e;
}

/* The sums the search needs over the accepted requests. */
typedef struct {
    int64_t max_kv, work, all_tiles;
} step_sums;

/* Accept request b of q tokens and global kv_len (which fit: the caller checked) into r when it
 * has row tiles; 0 when its row tiles exceed int32 (an exact plan's too many blocks). */
static int pack_request(step_reqs *r, step_sums *m, int32_t b, int64_t q, int32_t kv_len,
                        mlav_shard shard, int32_t H, const mlav_schedule_params *sp,
                        mlav_fastdiv fka)
{
    const int64_t t = mlav_step_tiles(q, H, sp->rows_per_tile);
    if (t == 0)
        return 1;
    if (t > INT32_MAX)
        return 0;
    /* the rows the rank reads; none splits as one row would (mlav_schedule_splits) */
    const int64_t rows = mlav_shard_rows(shard, kv_len), kv = rows > 0 ? rows : 1;
    if (kv > m->max_kv)
        m->max_kv = kv;
    m->work += t * rows;
    m->all_tiles += t;
    r->kv[r->n] = (uint32_t)kv;
    r->x[r->n] = (double)(mlav_fastdiv_div((uint32_t)kv - 1, fka) + 1) - 0.5;
    r->tiles[r->n] = (int32_t)t;
    r->b[r->n++] = b;
    return 1;
}

/* The rule's chunk for the accepted requests (0 when none has rows): the smallest chunk fitting
 * the fewest whole waves, and, unless `fewest_only`, that chunk doubled and quadrupled and the
 * smallest fitting each of up to more_waves (at most 64) more waves, weighed by `w` (NULL: the
 * closed form, mlav_step_model), the first of the shortest kept; *model, where given, its
 * weight (-1 with no rows or `fewest_only`). */
static int64_t choose_chunk(const step_reqs *r, const step_sums *m,
                            const mlav_schedule_params *sp, const mlav_step_weight *w,
                            int fewest_only, int64_t *model)
{
    if (model)
        *model = -1;
    if (m->all_tiles == 0)
        return 0;
    const int64_t max_kv = m->max_kv, work = m->work, all_tiles = m->all_tiles;
    const int64_t S = sp->target_blocks, ka = sp->key_align;
    const int64_t cap0 = mlav_step_ceil_div(all_tiles, S) * S;
    int64_t lo = mlav_step_ceil_div(sp->min_chunk, ka), hi = mlav_step_ceil_div(max_kv, ka);
    if (hi < lo)
        hi = lo;
    /* the smallest chunk fitting cap0 + j S, j = 0 .. more_waves (at most 64) */
    const int n_s = fewest_only ? 1
                                : 1 + (sp->more_waves < 0   ? 0
                                       : sp->more_waves > 64 ? 64
                                                             : sp->more_waves);
    mlav_step_range q[STEP_SEARCHES];
    chunk_searches(r, work, all_tiles, lo, hi, cap0, n_s, sp, q);
    if (fewest_only)
        return q[0].L * ka <= INT32_MAX ? q[0].L * ka : (INT32_MAX / ka) * ka;
    /* the candidates in the rule's order; each with the fewest waves and most blocks it can
     * have (0: unknown), for a lower bound of its model (candidate_bound) */
    int64_t cands[2 + 1 + 64], wmin[2 + 1 + 64], bmax[2 + 1 + 64], n = 0, last = 0;
    int from[2 + 1 + 64]; /* the search whose probe evaluated the candidate, or -1 */
    for (int j = 0; j < n_s; j++) {
        int64_t c = q[j].L * ka;
        const int exact = c <= INT32_MAX; /* not clamped: k = q[j].L */
        if (!exact)
            c = (INT32_MAX / ka) * ka;
        if (j == 0) {
            for (int k = 0; k <= 2; k++)
                if ((c << k) <= INT32_MAX) {
                    cands[n] = c << k;
                    /* at least every row tile; at most cap0 (the chunk passes it) */
                    wmin[n] = exact ? cap0 / S : 0;
                    bmax[n] = exact ? cap0 : 0;
                    from[n++] = k == 0 && exact && q[0].has ? 0 : -1;
                }
        } else if (c >= last) {
            continue; /* no shorter split fits this many waves */
        } else {
            /* below the last candidate's: past cap0 + (j - 1) S, within cap0 + j S */
            cands[n] = c;
            wmin[n] = exact ? cap0 / S + j : 0;
            bmax[n] = exact ? cap0 + j * S : 0;
            from[n++] = exact && q[j].has ? j : -1;
        }
        last = c;
    }
    int64_t best = -1, best_chunk = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t t;
        if (!w) {
            if (from[i] < 0 && best >= 0 && bmax[i] > 0 &&
                candidate_bound(max_kv, work, wmin[i], bmax[i], cands[i], sp) >= best)
                continue; /* cannot be shorter than the best so far: it would not be taken */
            const mlav_step_eval e = from[i] >= 0 ? q[from[i]].found : eval_at(r, cands[i], sp);
            t = mlav_step_model(&e, work, sp->target_blocks, sp->block_cost_keys,
                                sp->split_cost_keys);
        } else {
            if (best >= 0) {
                /* no schedule of n blocks ends before its work and fixed costs spread evenly
                 * over the slots (mlav_step_weight): past the best, it would not be taken */
                const int64_t nb =
                    from[i] >= 0 ? q[from[i]].found.blocks : eval_at(r, cands[i], sp).blocks;
                if ((work + nb * sp->block_cost_keys) / S >= best)
                    continue;
            }
            t = w->time(w->ctx, cands[i]);
        }
        if (best < 0 || t < best) {
            best = t;
            best_chunk = cands[i];
        }
    }
    if (model)
        *model = best;
    return best_chunk;
}

/* The counts of a schedule's items. */
typedef struct {
    int64_t items, combine, slots;
    int32_t most; /* most splits of a split request */
} step_counts;

/* The blocks at `chunk` in the plan's order: request-major, split, m-tile fastest; the combine
 * items of each split request; splits[b] (when given) each request's splits. With items NULL
 * only the counts. */
static step_counts write_items(const step_reqs *r, const int32_t *q_indptr,
                               const int32_t *kv_lens, mlav_shard shard, int32_t H,
                               const mlav_schedule_params *sp, int64_t chunk,
                               mlav_split_item *items, mlav_combine_item *combine, int32_t *splits)
{
    step_counts c = {0, 0, 0, 0};
    int32_t slot = 0;
    const double ibest = chunk > 0 ? 1.0 / (double)(chunk / sp->key_align) : 0.0;
    for (int32_t i = 0; i < r->n && chunk > 0; i++) {
        const int32_t b = r->b[i], mt = r->tiles[i];
        uint32_t s0, q0;
        const int32_t s =
            (int32_t)mlav_step_splits_of(r->kv[i], r->x[i], ibest, (uint32_t)sp->key_align,
                                         (uint32_t)sp->max_splits, step_inv, &s0, &q0);
        if (splits)
            splits[b] = s;
        c.items += (int64_t)s * mt;
        if (s > 1) {
            c.combine += mt;
            c.slots += (int64_t)s * mt;
            c.most = s > c.most ? s : c.most;
        }
        if (!items)
            continue;
        const int32_t kv = (int32_t)mlav_shard_rows(shard, kv_lens[b]); /* may be 0 */
        const int64_t per = (int64_t)q0 * sp->key_align;
        const int32_t q = q_indptr[b + 1] - q_indptr[b];
        /* one item per (split, row tile), m-tile fastest: within a split only mtile and slot
         * step, by one each (slot stays -1 unsplit) */
        mlav_split_item x = {.b = b, .mtile = 0, .kv_begin = 0, .kv_end = 0,
                             .slot = s > 1 ? slot : -1, .q_start = q_indptr[b], .q_len = q,
                             .prefix = kv_lens[b] - q};
        const int32_t dslot = s > 1;
        mlav_split_item *out = items + (c.items - (int64_t)s * mt);
        for (int32_t k = 0; k < s; k++) {
            const int64_t begin = k * per;
            x.kv_begin = (int32_t)begin;
            x.kv_end = (int32_t)(begin + per < kv ? begin + per : kv);
            x.mtile = 0;
            for (int32_t m = 0; m < mt; m++) {
                *out++ = x;
                x.mtile++;
                x.slot += dslot;
            }
        }
        if (s > 1) {
            mlav_combine_item *co = combine + (c.combine - mt);
            for (int32_t m = 0; m < mt; m++)
                co[m] = (mlav_combine_item){.b = b, .mtile = m, .nsplit = s, .slot0 = slot + m,
                                            .slot_stride = mt, .q_start = q_indptr[b],
                                            .rows = (int32_t)((int64_t)q * H)};
            slot += s * mt;
        }
    }
    return c;
}

void mlav_step_schedule_build(int32_t batch, const int32_t *q_indptr, const int32_t *kv_lens,
                              mlav_shard shard, int32_t H, const mlav_limits *lim,
                              const mlav_schedule_params *sp,
                              const mlav_step_bounds *bd, mlav_step_header *hdr,
                              mlav_split_item *items, mlav_combine_item *combine,
                              mlav_step_scratch *scratch)
{
    memset(hdr, 0, sizeof *hdr);
    hdr->bad = INT32_MAX;
    hdr->batch = batch;
    int global_ok = batch == 0 || (q_indptr[0] == 0 && q_indptr[batch] <= lim->max_tokens);
    for (int32_t b = 0; b < batch && global_ok; b++)
        global_ok = q_indptr[b + 1] >= q_indptr[b];
    if (!global_ok)
        hdr->bad = batch;

    /* the accepted requests, packed into the caller's scratch: batch <= 2048 */
    step_reqs r = {0, scratch->kv, scratch->x, scratch->tiles, scratch->b};
    step_sums m = {1, 0, 0};
    const mlav_fastdiv fka = mlav_fastdiv_make((uint32_t)sp->key_align);
    for (int32_t b = 0; b < batch && global_ok; b++) {
        const int64_t q = (int64_t)q_indptr[b + 1] - q_indptr[b];
        if (!mlav_step_request_ok(q, kv_lens[b], lim->max_q_len, lim->max_kv_len)) {
            if (b < hdr->bad)
                hdr->bad = b;
            continue;
        }
        pack_request(&r, &m, b, q, kv_lens[b], shard, H, sp, fka); /* tiles within the bounds */
    }

    int64_t uniform;
    const int64_t best_chunk = choose_chunk(&r, &m, sp, NULL, 0, &uniform);
    const mlav_step_shares_batch sb = {r.n, r.kv, r.tiles, r.b, q_indptr, kv_lens, H};
    mlav_step_shares_made made;
    step_counts c;
    int64_t chunk = best_chunk;
    if (shard.ranks <= 1 &&
        mlav_step_shares_build(&sb, sp, bd, uniform, items, combine, &scratch->shares, &made)) {
        c = (step_counts){made.items, made.combine, made.slots, made.most};
        chunk = made.chunk_keys;
    } else {
        c = write_items(&r, q_indptr, kv_lens, shard, H, sp, best_chunk, items, combine, NULL);
    }
    hdr->n_items = (int32_t)c.items;
    hdr->n_combine = (int32_t)c.combine;
    hdr->n_slots = (int32_t)c.slots;
    hdr->chunk_keys = (int32_t)chunk;
    mlav_step_combine_shape(hdr->n_combine, c.most, sp->rows_per_tile, bd, hdr);
    for (int32_t i = hdr->n_items; i < bd->max_items; i++)
        items[i] = (mlav_split_item){.b = -1};
    for (int32_t i = hdr->n_combine; i < bd->max_combine; i++)
        combine[i] = (mlav_combine_item){.b = -1};
}

mlav_status mlav_step_schedule_exact(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                     const mlav_step_weight *w, mlav_schedule *out)
{
    memset(out, 0, sizeof *out);
    const size_t nb = p->B > 0 ? (size_t)p->B : 1;
    void *buf = malloc(nb * (sizeof(uint32_t) + sizeof(double) + 2 * sizeof(int32_t)));
    out->splits = calloc(nb, sizeof(int32_t));
    if (!buf || !out->splits)
        goto oom;
    step_reqs r = {0, NULL, (double *)buf, NULL, NULL};
    r.kv = (uint32_t *)(r.x + nb);
    r.tiles = (int32_t *)(r.kv + nb);
    r.b = r.tiles + nb;
    step_sums m = {1, 0, 0};
    const mlav_fastdiv fka = mlav_fastdiv_make((uint32_t)sp->key_align);
    for (int32_t b = 0; b < p->B; b++)
        if (!pack_request(&r, &m, b, mlav_info_q_len(p, b), p->kv_lens[b], p->shard, p->H, sp,
                          fka))
            goto too_many;

    int64_t chunk = choose_chunk(&r, &m, sp, w, w == NULL, NULL);
    if (chunk == 0) /* no request has rows: the shortest chunk, which schedules nothing */
        chunk = mlav_step_ceil_div(sp->min_chunk, sp->key_align) * sp->key_align;
    out->chunk_keys = (int32_t)chunk;
    const step_counts c =
        write_items(&r, p->q_indptr, p->kv_lens, p->shard, p->H, sp, chunk, NULL, NULL, NULL);
    if (c.items > INT32_MAX || c.slots > INT32_MAX)
        goto too_many;
    out->items = calloc((size_t)(c.items ? c.items : 1), sizeof(mlav_split_item));
    out->combine = calloc((size_t)(c.combine ? c.combine : 1), sizeof(mlav_combine_item));
    if (!out->items || !out->combine)
        goto oom;
    write_items(&r, p->q_indptr, p->kv_lens, p->shard, p->H, sp, chunk, out->items, out->combine,
                out->splits);
    out->n_items = (int32_t)c.items;
    out->n_combine = (int32_t)c.combine;
    out->n_slots = (int32_t)c.slots;
    free(buf);
    return MLAV_OK;
too_many:
    free(buf);
    mlav_schedule_free(out);
    return mlav_set_error(MLAV_ERR_UNSUPPORTED, "the problem needs too many blocks");
oom:
    free(buf);
    mlav_schedule_free(out);
    return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory scheduling splits");
}
