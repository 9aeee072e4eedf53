/* The host side of the step rule (schedule_step.h): the bounds of a plan for limits, and one
 * step's schedule built into fixed arrays, as the device scheduler builds it. */
#include "schedule_step.h"

#include <string.h>

#include "fastdiv.h"

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

/* The accepted requests of a step (row tiles > 0), packed: the chunk searches and the model
 * read only these. The caller's scratch (mlav_step_scratch, schedule_step.h). */
struct mlav_step_scratch {
    int32_t n;
    uint32_t kv[MLAV_STEP_MAX_BATCH];
    double x[MLAV_STEP_MAX_BATCH]; /* kk - 1/2, kk = ceil(kv / key_align) (see floor_div) */
    int32_t tiles[MLAV_STEP_MAX_BATCH];
    int32_t b[MLAV_STEP_MAX_BATCH]; /* the request */
};
typedef struct mlav_step_scratch step_reqs;

size_t mlav_step_scratch_bytes(void)
{
    return sizeof(step_reqs);
}

/* One evaluation of the rule at a chunk of k key_align units, and the range [left, right] of k
 * around it over which every request keeps its splits, so that the evaluation holds there too. */
typedef struct {
    mlav_step_eval e; /* mlav_step_eval_add over the accepted requests */
    int64_t left, right;
    int64_t below, above; /* the blocks at left - 1 and right + 1 (-1: no such k) */
} step_probe;

/* The rule divides a request's kk = ceil(kv / ka) by the chunk (in ka units) and twice by its
 * splits at every chunk it weighs: as a multiply, floor((kk - 1) / d) = floor(x / d) for x =
 * kk - 1/2, which is at least 1 / (2d) from every integer ((2 kk - 1) / (2d), an odd
 * numerator), while x * fl(1 / d) is within x / d * 2^-52 < 2^-21 / d of x / d (x < 2^31): the
 * truncation is exact, for every d < 2^31, with room for any double rounding. 1 / d for the
 * splits up to 256 comes from a table (the compiler's correctly rounded constants). */
#define STEP_INV4(d) 1.0 / (d), 1.0 / ((d) + 1), 1.0 / ((d) + 2), 1.0 / ((d) + 3)
#define STEP_INV16(d) STEP_INV4(d), STEP_INV4((d) + 4), STEP_INV4((d) + 8), STEP_INV4((d) + 12)
#define STEP_INV64(d)                                                                              \
    STEP_INV16(d), STEP_INV16((d) + 16), STEP_INV16((d) + 32), STEP_INV16((d) + 48)
enum { STEP_INV_MAX = 256 };
static const double step_inv[STEP_INV_MAX + 1] = {0.0, STEP_INV64(1), STEP_INV64(65),
                                                  STEP_INV64(129), STEP_INV64(193)};

static inline double inv_of(uint32_t d)
{
    return d <= STEP_INV_MAX ? step_inv[d] : 1.0 / (double)d;
}

/* floor((kk - 1) / d) for x = kk - 1/2 and inv = fl(1 / d). */
static inline uint32_t floor_div(double x, double inv)
{
    return (uint32_t)(x * inv);
}

/* mlav_schedule_splits' recount at s splits (before it) of a request of kv KV rows: the
 * splits; *q_out = per / ka = ceil(kk / s). */
static inline uint32_t recount(uint32_t kv, double x, uint32_t s, uint32_t ka, uint32_t *q_out)
{
    const uint32_t q = floor_div(x, inv_of(s)) + 1;
    *q_out = q;
    if ((uint64_t)s * (s - 1) * ka > kv)
        return (kv + q * ka - 1) / (q * ka);
    return s;
}

/* mlav_schedule_splits of that request at the chunk k ka, ik = fl(1 / k): the splits; *s_out
 * gets the splits before the recount. */
static inline uint32_t splits_of(uint32_t kv, double x, double ik, uint32_t ka, uint32_t max_s,
                                 uint32_t *s_out, uint32_t *q_out)
{
    uint32_t s = floor_div(x, ik) + 1;
    s = s < max_s ? s : max_s;
    *s_out = s;
    return recount(kv, x, s, ka, q_out);
}

/* The change of blocks of a request of t row tiles and ns splits when it takes s_new before the
 * recount. */
static int64_t tie_change(uint32_t kv, double x, int64_t t, uint32_t ns, uint32_t s_new,
                          uint32_t ka)
{
    uint32_t q;
    return t * ((int64_t)recount(kv, x, s_new, ka, &q) - ns);
}

/* mlav_step_eval_add summed over the accepted requests at the chunk k ka (k ka < 2^31), with no
 * division per request; the plateau around k; and the blocks just past each end of it.
 * - The splits s = min(ceil(kv / (k ka)), max_splits) = min(ceil(kk / k), max_splits);
 * - mlav_schedule_splits' split length per = ceil(ceil(kv / s) / ka) ka = q ka, q = ceil(kk / s);
 * - its recount ceil(kv / per) gives s back whenever s (s - 1) ka <= kv (per < kv / s + ka, so
 *   (s - 1) per < kv); otherwise (short KV rows at many splits) it is divided out;
 * - the plateau: s < max_splits stays for every k >= q, s > 1 for every k <= last =
 *   ceil(kk / (s - 1)) - 1 (a request at max_splits stays below, one of 1 split above);
 * - past its ends only the requests at the bound change (the tie: q = left, or last = right): at
 *   k = left - 1 they take ceil(kk / (left - 1)) splits, s + 1 unless kk > (s + 1)(left - 1); at
 *   right + 1, ceil(kk / (right + 1)), s - 1 unless kk <= (s - 2)(right + 1). A request that
 *   meets the bound so far adds its change to the tie's; a new bound restarts it. */
static void probe_at(const step_reqs *r, int64_t k, const mlav_schedule_params *sp,
                     step_probe *out)
{
    const uint32_t ka = (uint32_t)sp->key_align, max_s = (uint32_t)sp->max_splits;
    const double ik = 1.0 / (double)k;
    int64_t blocks = 0, below = 0, above = 0;
    uint32_t most = 0, unsplit = 0, split_q = 0, left = 0, right = UINT32_MAX;
    for (int32_t i = 0; i < r->n; i++) {
        const uint32_t kv = r->kv[i];
        const double x = r->x[i];
        uint32_t s, q;
        const uint32_t ns = splits_of(kv, x, ik, ka, max_s, &s, &q);
        blocks += (int64_t)r->tiles[i] * ns;
        if (ns > 1) {
            most = ns > most ? ns : most;
            split_q = q > split_q ? q : split_q;
        } else {
            unsplit = kv > unsplit ? kv : unsplit;
        }
        if (s < max_s && q >= left) {
            int64_t d = 0;
            if (q > 1) {
                const uint32_t kk = (uint32_t)(x + 0.5);
                const uint32_t s1 =
                    (uint64_t)kk <= (uint64_t)(s + 1) * (q - 1) ? s + 1 : (kk - 1) / (q - 1) + 1;
                d = tie_change(kv, x, r->tiles[i], ns, s1 < max_s ? s1 : max_s, ka);
            }
            below = q > left ? d : below + d;
            left = q;
        }
        if (s > 1) {
            const uint32_t last = floor_div(x, inv_of(s - 1));
            if (last <= right) {
                const uint32_t kk = (uint32_t)(x + 0.5);
                const uint32_t s2 = (uint64_t)kk > (uint64_t)(s - 2) * (last + 1)
                                        ? s - 1
                                        : (kk - 1) / (last + 1) + 1;
                const int64_t d = tie_change(kv, x, r->tiles[i], ns, s2, ka);
                above = last < right ? d : above + d;
                right = last;
            }
        }
    }
    const int64_t split_len = (int64_t)split_q * ka;
    out->e = (mlav_step_eval){blocks, split_len > unsplit ? split_len : unsplit, (int32_t)most};
    out->left = left;
    out->right = right == UINT32_MAX ? INT64_MAX : right;
    out->below = left > 1 ? blocks + below : -1;
    out->above = right < UINT32_MAX ? blocks + above : -1;
}

/* The chunk searches of the rule: for each j < n, the smallest k in [lo, hi) with blocks(k ka)
 * <= cap0 + j S, else hi: what mlav_schedule_smallest_chunk's bisection gives for each, and the
 * device scheduler's search (blocks never grows with the chunk, so the answer is one). Each
 * probe narrows every search's range [L, R] (the answer inside; L - 1 fails, R passes or is hi)
 * by its plateau and the k just past its ends, and the next probe is guessed by a secant in 1 / k
 * through the range's ends (blocks is near a + b / k). Safeguards: a bisection when a two-sided
 * range has not shrunk to a quarter after two guesses, steps doubling away from R when
 * one-sided. The guesses only choose where to probe; the answers are the probes' verdicts. On
 * random batches of 64 requests (bench/diag/schedule_choices' kind), 11.4 probes for the 5
 * searches, where the bisections evaluated the rule 48 times. found[j] gets the evaluation at
 * the answer when a probe's plateau holds it (has[j]). */
enum { STEP_SEARCHES = 1 + 64, STEP_PROBES = 128 };

typedef struct {
    int n;
    int64_t cap0, S;
    int64_t L[STEP_SEARCHES], R[STEP_SEARCHES], fL[STEP_SEARCHES], fR[STEP_SEARCHES];
    int hasL[STEP_SEARCHES], *has;
    mlav_step_eval *found;
} step_search;

/* blocks(k) = v for every k in [k0, k1]; e: the evaluation there, when known. */
static void search_learn(step_search *q, int64_t k0, int64_t k1, int64_t v,
                         const mlav_step_eval *e)
{
    for (int i = 0; i < q->n; i++) {
        if (v <= q->cap0 + i * q->S) { /* passes: the answer is at most k0 */
            const int64_t nr = k0 > q->L[i] ? k0 : q->L[i];
            if (nr < q->R[i]) {
                q->R[i] = nr;
                q->fR[i] = v;
                q->has[i] = e != NULL && nr <= k1; /* nr > k1: lo, past the fact */
                if (q->has[i])
                    q->found[i] = *e;
            }
        } else { /* fails: the answer is past k1 */
            const int64_t nl = k1 < q->R[i] ? k1 + 1 : q->R[i];
            if (nl > q->L[i]) {
                q->L[i] = nl;
                q->fL[i] = v;
                q->hasL[i] = 1;
            }
        }
    }
}

static void chunk_searches(const step_reqs *r, int64_t work, int64_t all_tiles, int64_t lo,
                           int64_t hi, int64_t cap0, int n, const mlav_schedule_params *sp,
                           int64_t *ans, mlav_step_eval *found, int *has)
{
    const int64_t S = sp->target_blocks, ka = sp->key_align;
    step_search q;
    q.n = n;
    q.cap0 = cap0;
    q.S = S;
    q.has = has;
    q.found = found;
    /* the probes so far (k, blocks), for one-sided guesses; hi's blocks are every row tile */
    int64_t pk[STEP_PROBES], pf[STEP_PROBES];
    int np = 0;
    pk[np] = hi;
    pf[np++] = all_tiles;
    for (int j = 0; j < n; j++) {
        q.L[j] = lo;
        q.R[j] = hi;
        q.fR[j] = all_tiles;
        q.hasL[j] = 0;
        has[j] = 0;
    }
    int64_t *L = q.L, *R = q.R, *fL = q.fL, *fR = q.fR;
    for (int j = 0; j < n; j++) {
        const int64_t cap = cap0 + j * S, w0 = R[j] - L[j];
        for (int step = 1; L[j] < R[j]; step++) {
            double k; /* the guess */
            const double uR = 1.0 / (double)R[j], target = (double)cap + 0.5;
            if (q.hasL[j]) {
                const double uL = 1.0 / (double)(L[j] - 1);
                k = 1.0 / (uR + (target - (double)fR[j]) * (uL - uR) /
                                    (double)(fL[j] - fR[j]));
            } else {
                /* through R and the probe past it whose blocks are nearest R's less one wave */
                int c = -1;
                int64_t cd = 0;
                for (int i = 0; i < np; i++) {
                    if (pk[i] <= R[j] || pf[i] >= fR[j])
                        continue;
                    const int64_t d = pf[i] - (fR[j] - S);
                    if (c < 0 || (d < 0 ? -d : d) < cd) {
                        c = i;
                        cd = d < 0 ? -d : d;
                    }
                }
                if (c >= 0)
                    k = 1.0 / (uR + (target - (double)fR[j]) * (uR - 1.0 / (double)pk[c]) /
                                        (double)(fR[j] - pf[c]));
                else /* every row tile split at the mean rows of loop work */
                    k = (double)work / (double)ka / ((double)cap - 0.5 * (double)all_tiles);
            }
            if (step > 2 && q.hasL[j] && (R[j] - L[j]) * 4 > w0)
                k = (double)(L[j] + (R[j] - L[j]) / 2);
            else if (step > 2 && !q.hasL[j] && step < 62 &&
                     k > (double)(R[j] - ((int64_t)1 << step)))
                k = (double)(R[j] - ((int64_t)1 << step));
            int64_t p;
            if (!(k < (double)(R[j] - 1)))
                p = R[j] - 1;
            else if (!(k > (double)L[j]))
                p = L[j];
            else
                p = (int64_t)(k + 0.5);
            step_probe pr;
            probe_at(r, p, sp, &pr);
            if (np < STEP_PROBES) {
                pk[np] = p;
                pf[np++] = pr.e.blocks;
            }
            search_learn(&q, pr.left, pr.right, pr.e.blocks, &pr.e);
            if (pr.below >= 0)
                search_learn(&q, pr.left - 1, pr.left - 1, pr.below, NULL);
            if (pr.above >= 0)
                search_learn(&q, pr.right + 1, pr.right + 1, pr.above, NULL);
        }
        ans[j] = L[j];
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
    step_probe pr;
    probe_at(r, chunk / sp->key_align, sp, &pr);
    return pr.e;
}

void mlav_step_schedule_build(int32_t batch, const int32_t *q_indptr, const int32_t *kv_lens,
                              int32_t H, const mlav_limits *lim, const mlav_schedule_params *sp,
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
    step_reqs *const r = scratch;
    r->n = 0;
    const mlav_fastdiv fka = mlav_fastdiv_make((uint32_t)sp->key_align);
    int64_t max_kv = 1, work = 0, all_tiles = 0;
    for (int32_t b = 0; b < batch && global_ok; b++) {
        const int64_t q = (int64_t)q_indptr[b + 1] - q_indptr[b];
        if (!mlav_step_request_ok(q, kv_lens[b], lim->max_q_len, lim->max_kv_len)) {
            if (b < hdr->bad)
                hdr->bad = b;
            continue;
        }
        const int64_t t = mlav_step_tiles(q, H, sp->rows_per_tile);
        if (t == 0)
            continue;
        if (kv_lens[b] > max_kv)
            max_kv = kv_lens[b];
        work += t * kv_lens[b];
        all_tiles += t;
        r->kv[r->n] = (uint32_t)kv_lens[b];
        r->x[r->n] = (double)(mlav_fastdiv_div((uint32_t)kv_lens[b] - 1, fka) + 1) - 0.5;
        r->tiles[r->n] = (int32_t)t;
        r->b[r->n++] = b;
    }

    int64_t best_chunk = 0;
    if (all_tiles > 0) {
        const int64_t S = sp->target_blocks, ka = sp->key_align;
        const int64_t cap0 = mlav_step_ceil_div(all_tiles, S) * S;
        int64_t lo = mlav_step_ceil_div(sp->min_chunk, ka), hi = mlav_step_ceil_div(max_kv, ka);
        if (hi < lo)
            hi = lo;
        /* the smallest chunk fitting cap0 + j S, j = 0 .. more_waves (at most 64) */
        const int n_s = 1 + (sp->more_waves < 0 ? 0 : sp->more_waves > 64 ? 64 : sp->more_waves);
        int64_t ans[STEP_SEARCHES];
        mlav_step_eval found[STEP_SEARCHES];
        int has[STEP_SEARCHES];
        chunk_searches(r, work, all_tiles, lo, hi, cap0, n_s, sp, ans, found, has);
        /* the candidates in the rule's order; each with the fewest waves and most blocks it can
         * have (0: unknown), for a lower bound of its model (candidate_bound) */
        int64_t cands[2 + 1 + 64], wmin[2 + 1 + 64], bmax[2 + 1 + 64], n = 0, last = 0;
        int from[2 + 1 + 64]; /* the search whose probe evaluated the candidate, or -1 */
        for (int j = 0; j < n_s; j++) {
            int64_t c = ans[j] * ka;
            const int exact = c <= INT32_MAX; /* not clamped: k = ans[j] */
            if (!exact)
                c = (INT32_MAX / ka) * ka;
            if (j == 0) {
                for (int k = 0; k <= 2; k++)
                    if ((c << k) <= INT32_MAX) {
                        cands[n] = c << k;
                        /* at least every row tile; at most cap0 (the chunk passes it) */
                        wmin[n] = exact ? cap0 / S : 0;
                        bmax[n] = exact ? cap0 : 0;
                        from[n++] = k == 0 && exact && has[0] ? 0 : -1;
                    }
            } else if (c >= last) {
                continue; /* no shorter split fits this many waves */
            } else {
                /* below the last candidate's: past cap0 + (j - 1) S, within cap0 + j S */
                cands[n] = c;
                wmin[n] = exact ? cap0 / S + j : 0;
                bmax[n] = exact ? cap0 + j * S : 0;
                from[n++] = exact && has[j] ? j : -1;
            }
            last = c;
        }
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            if (from[i] < 0 && best >= 0 && bmax[i] > 0 &&
                candidate_bound(max_kv, work, wmin[i], bmax[i], cands[i], sp) >= best)
                continue; /* cannot be shorter than the best so far: it would not be taken */
            const mlav_step_eval e = from[i] >= 0 ? found[from[i]] : eval_at(r, cands[i], sp);
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
    const double ibest = best_chunk > 0 ? 1.0 / (double)(best_chunk / sp->key_align) : 0.0;
    for (int32_t i = 0; i < r->n && best_chunk > 0; i++) {
        const int32_t b = r->b[i], kv = (int32_t)r->kv[i], mt = r->tiles[i];
        uint32_t s0, q0;
        const int32_t s = (int32_t)splits_of(r->kv[i], r->x[i], ibest, (uint32_t)sp->key_align,
                                             (uint32_t)sp->max_splits, &s0, &q0);
        const int64_t per = (int64_t)q0 * sp->key_align;
        const int32_t q = q_indptr[b + 1] - q_indptr[b];
        /* one item per (split, row tile), m-tile fastest: within a split only mtile and slot
         * step, by one each (slot stays -1 unsplit) */
        mlav_split_item x = {.b = b, .mtile = 0, .kv_begin = 0, .kv_end = 0,
                             .slot = s > 1 ? slot : -1, .q_start = q_indptr[b], .q_len = q,
                             .prefix = kv - q};
        const int32_t dslot = s > 1;
        for (int32_t k = 0; k < s; k++) {
            const int64_t begin = k * per;
            x.kv_begin = (int32_t)begin;
            x.kv_end = (int32_t)(begin + per < kv ? begin + per : kv);
            x.mtile = 0;
            for (int32_t m = 0; m < mt; m++) {
                items[it++] = x;
                x.mtile++;
                x.slot += dslot;
            }
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
