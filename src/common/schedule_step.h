/* The split schedule's one rule: its candidate search and item writer, which the host update
 * of an engine step (schedule_step.c), the device scheduler (src/cuda/schedule_step_kernel.cuh)
 * and the exact plan (mlav_schedule_build, through mlav_step_schedule_exact) all follow, and the
 * bounds that fix a plan for limits' launch shape and workspace for every step within its
 * limits.
 *
 * The candidates: the fewest whole waves of the shortest splits, splits of twice and four times
 * that chunk, and up to more_waves more waves of shorter ones. The exact plan weighs them by its
 * block-by-block dispatch model (schedule.c, host only); a step by a closed form that needs no
 * dispatch, each candidate weighed by
 *   (waves - 1) x (block_cost + mean block) + block_cost + longest block + split_cost x most
 * splits: every wave but the last at the mean, the last at the longest block. That is the
 * dispatch model's time wherever a step's blocks are of one length (one request, or a batch of
 * equal ones), and keeps the tail of a batch of mixed lengths in view (on the production
 * preset's batches of 16 and 32 requests, prefixes spread 0.5, the schedules it picks model
 * within 1.3% of the exact plan's; weighing the waves at the mean alone, 4-24% over). It needs
 * sums and maxima over the requests only, so one thread block evaluates it in parallel. Where
 * the parameters weigh equal shares (the sm_90a family's), a step may take them in place of the
 * chosen chunk: schedule_step_shares.h. */
#ifndef MLAV_COMMON_SCHEDULE_STEP_H
#define MLAV_COMMON_SCHEDULE_STEP_H

#include <stdint.h>

#include "combine_shape.h"
#include "hd.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most requests of a plan for limits (mlav_limits_max_batch): the device scheduler keeps a
 * prefix sum per request in shared memory, and the host rule's scratch is sized by it. */
#define MLAV_STEP_MAX_BATCH 2048

/* The step region at the start of a plan for limits' workspace: this header, then (CUDA) the
 * items and combine items of the step, or (host workspaces) the step's lengths and then the
 * backend's schedule (src/dispatch/step.h). A workspace belongs to the plan whose update wrote it
 * last: the header carries that plan's id and limits (`owner`, `limits`), which dispatch checks
 * before a run on a host workspace reads the step and the CUDA kernels compare
 * with the running plan's before they read an item, so that another plan's step (laid out for
 * other limits), or a workspace no update wrote, runs nothing. */
typedef struct mlav_step_header {
    int32_t bad;        /* INT32_MAX: every request taken; else the first refused request, or
                           `batch` when q_indptr itself was refused */
    int32_t batch;      /* requests of the step */
    int32_t n_items, n_combine, n_slots; /* of the step (the launches are sized by the bounds) */
    int32_t chunk_keys; /* the chosen KV rows per split (0 when nothing runs) */
    /* the step's combine, by the exact plan's rules (combine_shape.h) on the step's combine
     * items: which kind (mlav_combine_kind of their most splits) and column blocks per row; the
     * plan's one combine launch follows them (combine.cu) */
    int32_t combine_kind, combine_col_blocks;
    uint64_t owner;     /* the writing plan's id (mlav_step_owner_of; never 0 or all ones) */
    mlav_limits limits; /* the writing plan's limits */
    int32_t reserved[2]; /* zero: the items that follow stay 16-byte aligned */
} mlav_step_header;

#ifdef __cplusplus
static_assert(sizeof(mlav_step_header) == 64, "the step header is 64 bytes");
#else
_Static_assert(sizeof(mlav_step_header) == 64, "the step header is 64 bytes");
#endif

/* The most a step within the limits can need: fixed at plan time. */
typedef struct mlav_step_bounds {
    int32_t max_tiles;   /* row tiles of one step */
    int32_t max_items;   /* split blocks: the split kernel's grid */
    int32_t max_combine; /* combine items: the combine's grid */
    int32_t max_slots;   /* partial states in the workspace */
    /* resident blocks of each combine kind's kernel on the device (mlav_combine_kind; set by
     * the backend, 0 where unknown), from which a step's column blocks are chosen as the exact
     * plan chooses them (mlav_combine_col_blocks_for) */
    int32_t combine_wave[3];
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

/* ---- one evaluation of the rule at a chunk, as the host and the device both make it ----------
 * A chunk is k key_align units. The rule divides a request's kk = ceil(kv / ka) by k and twice
 * by its splits at every chunk it weighs: as a multiply, floor((kk - 1) / d) = floor(x / d) for
 * x = kk - 1/2, which is at least 1 / (2d) from every integer ((2 kk - 1) / (2d), an odd
 * numerator), while x * fl(1 / d) is within x / d * 2^-52 < 2^-21 / d of x / d (x < 2^31): the
 * truncation is exact, for every d < 2^31, with room for any double rounding. fl(1 / d) must be
 * correctly rounded: for d <= MLAV_STEP_INV_MAX the caller's table (the host's compiler
 * constants, the device's correctly rounded reciprocals in shared memory), above it a division. */
#define MLAV_STEP_INV_MAX 256

static MLAV_HD double mlav_step_inv(const double *inv, uint32_t d)
{
#ifdef __CUDA_ARCH__
    /* every d the rule divides by is a split count, at most max_splits, which the device
     * scheduler requires to be at most MLAV_STEP_INV_MAX: no division in its code */
    return inv[d];
#else
    return d <= MLAV_STEP_INV_MAX ? inv[d] : 1.0 / (double)d;
#endif
}

/* 1 / x for the searches' guesses, which choose only where to probe (never a verdict): on the
 * device the approximate reciprocal (two instructions, where a rounded division is some forty
 * with its slow path, on the scheduler's serial chain: docs/PERFORMANCE.md#engine-steps). */
static MLAV_HD double mlav_step_guess_recip(double x)
{
#ifdef __CUDA_ARCH__
    return (double)__fdividef(1.0f, (float)x);
#else
    return 1.0 / x;
#endif
}

/* floor((kk - 1) / d) for x = kk - 1/2 and inv = fl(1 / d). */
static MLAV_HD uint32_t mlav_step_floor_div(double x, double inv)
{
    return (uint32_t)(x * inv);
}

/* mlav_schedule_splits' recount at s splits (before it) of a request of kv KV rows: the
 * splits; *q_out = per / ka = ceil(kk / s). */
static MLAV_HD uint32_t mlav_step_recount(uint32_t kv, double x, uint32_t s, uint32_t ka,
                                          const double *inv, uint32_t *q_out)
{
    const uint32_t q = mlav_step_floor_div(x, mlav_step_inv(inv, s)) + 1;
    *q_out = q;
    if ((uint64_t)s * (s - 1) * ka > kv)
        return (kv + q * ka - 1) / (q * ka);
    return s;
}

/* mlav_schedule_splits of that request at the chunk k ka, ik = fl(1 / k): the splits; *s_out
 * gets the splits before the recount, *q_out the split length in ka units. */
static MLAV_HD uint32_t mlav_step_splits_of(uint32_t kv, double x, double ik, uint32_t ka,
                                            uint32_t max_s, const double *inv, uint32_t *s_out,
                                            uint32_t *q_out)
{
    uint32_t s = mlav_step_floor_div(x, ik) + 1;
    s = s < max_s ? s : max_s;
    *s_out = s;
    return mlav_step_recount(kv, x, s, ka, inv, q_out);
}

/* The last chunk k at which a request of s > 1 splits (before the recount) keeps them:
 * ceil(kk / (s - 1)) - 1 (its first is q = ceil(kk / s), below max_splits). The plateau of a
 * probe is where every request keeps its splits; the host's probes and the device scheduler's
 * both bound it by this. */
static MLAV_HD uint32_t mlav_step_last_of(double x, uint32_t s, const double *inv)
{
    return mlav_step_floor_div(x, mlav_step_inv(inv, s - 1));
}

/* An evaluation being summed over requests (mlav_step_probe_add), in any order: the evaluation
 * at k, the plateau of k around it over which every request keeps its splits, and the change of
 * blocks just past each end (the host's probes; the device scheduler's learn the plateau
 * alone, src/cuda/schedule_step_kernel.cuh). */
typedef struct mlav_step_probe {
    int64_t blocks;
    int64_t below, above;   /* the change of blocks at left - 1 and right + 1 (the ties') */
    uint32_t most, unsplit; /* most splits of a split request; longest unsplit request */
    uint32_t split_q;       /* longest split, in ka units */
    uint32_t left, right;   /* the plateau: the requests' bounds so far */
} mlav_step_probe;

/* The probe, finished: blocks(k) = e.blocks for every k in [left, right]; below (above) the
 * blocks at left - 1 (right + 1), -1 where there is no such k. */
typedef struct mlav_step_plateau {
    mlav_step_eval e;
    int64_t left, right;
    int64_t below, above;
} mlav_step_plateau;

static MLAV_HD mlav_step_probe mlav_step_probe_start(void)
{
    mlav_step_probe p = {0, 0, 0, 0, 0, 0, 0, UINT32_MAX};
    return p;
}

/* Add a request of `tiles` row tiles (> 0) and kv KV rows (x as above) at k, ik = fl(1 / k).
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
static MLAV_HD void mlav_step_probe_add(mlav_step_probe *p, uint32_t kv, double x, int64_t tiles,
                                        double ik, uint32_t ka, uint32_t max_s,
                                        const double *inv)
{
    uint32_t s, q, q2;
    const uint32_t ns = mlav_step_splits_of(kv, x, ik, ka, max_s, inv, &s, &q);
    p->blocks += tiles * ns;
    if (ns > 1) {
        p->most = ns > p->most ? ns : p->most;
        p->split_q = q > p->split_q ? q : p->split_q;
    } else {
        p->unsplit = kv > p->unsplit ? kv : p->unsplit;
    }
    if (s < max_s && q >= p->left) {
        int64_t d = 0;
        if (q > 1) {
            const uint32_t kk = (uint32_t)(x + 0.5);
            uint32_t s1 =
                (uint64_t)kk <= (uint64_t)(s + 1) * (q - 1) ? s + 1 : (kk - 1) / (q - 1) + 1;
            s1 = s1 < max_s ? s1 : max_s;
            d = tiles * ((int64_t)mlav_step_recount(kv, x, s1, ka, inv, &q2) - ns);
        }
        p->below = q > p->left ? d : p->below + d;
        p->left = q;
    }
    if (s > 1) {
        const uint32_t last = mlav_step_last_of(x, s, inv);
        if (last <= p->right) {
            const uint32_t kk = (uint32_t)(x + 0.5);
            const uint32_t s2 = (uint64_t)kk > (uint64_t)(s - 2) * (last + 1)
                                    ? s - 1
                                    : (kk - 1) / (last + 1) + 1;
            const int64_t d = tiles * ((int64_t)mlav_step_recount(kv, x, s2, ka, inv, &q2) - ns);
            p->above = last < p->right ? d : p->above + d;
            p->right = last;
        }
    }
}

static MLAV_HD mlav_step_plateau mlav_step_probe_finish(const mlav_step_probe *p, uint32_t ka)
{
    mlav_step_plateau r;
    const int64_t split_len = (int64_t)p->split_q * ka;
    r.e.blocks = p->blocks;
    r.e.longest = split_len > (int64_t)p->unsplit ? split_len : (int64_t)p->unsplit;
    r.e.most = (int32_t)p->most;
    r.left = p->left;
    r.right = p->right == UINT32_MAX ? INT64_MAX : p->right;
    r.below = p->left > 1 ? p->blocks + p->below : -1;
    r.above = p->right < UINT32_MAX ? p->blocks + p->above : -1;
    return r;
}

/* ---- one chunk search of the rule ------------------------------------------------------------
 * The smallest k in [lo, hi) with blocks(k ka) <= cap, else hi (blocks never grows with k, so
 * the answer is one, however it is searched for). The range [L, R] holds the answer: L - 1
 * fails (when hasL) and R passes or is hi. Each probe's plateau narrows it
 * (mlav_step_range_learn), and the next probe is guessed (mlav_step_range_guess). The guesses
 * only choose where to probe; the answer is the probes' verdicts. */
typedef struct mlav_step_range {
    int64_t L, R, fL, fR; /* fL: blocks at L - 1; fR: at R */
    int hasL;             /* a failing k is known */
    int has;              /* found is the evaluation at R */
    mlav_step_eval found;
} mlav_step_range;

static MLAV_HD mlav_step_range mlav_step_range_start(int64_t lo, int64_t hi, int64_t all_tiles)
{
    mlav_step_range q;
    q.L = lo;
    q.R = hi;
    q.fL = 0;
    q.fR = all_tiles; /* at hi every request is one split */
    q.hasL = 0;
    q.has = 0;
    q.found.blocks = 0;
    q.found.longest = 0;
    q.found.most = 0;
    return q;
}

/* blocks(k) = v for every k in [k0, k1]; e: the evaluation there, when known. */
static MLAV_HD void mlav_step_range_learn(mlav_step_range *q, int64_t cap, int64_t k0,
                                          int64_t k1, int64_t v, const mlav_step_eval *e)
{
    if (v <= cap) { /* passes: the answer is at most k0 */
        const int64_t nr = k0 > q->L ? k0 : q->L;
        if (nr < q->R) {
            q->R = nr;
            q->fR = v;
            q->has = e != 0 && nr <= k1; /* nr > k1: lo, past the fact */
            if (q->has)
                q->found = *e;
        }
    } else { /* fails: the answer is past k1 */
        const int64_t nl = k1 < q->R ? k1 + 1 : q->R;
        if (nl > q->L) {
            q->L = nl;
            q->fL = v;
            q->hasL = 1;
        }
    }
}

/* Learn a probe's plateau and the k just past both its ends. */
static MLAV_HD void mlav_step_range_learn_plateau(mlav_step_range *q, int64_t cap,
                                                  const mlav_step_plateau *pr)
{
    mlav_step_range_learn(q, cap, pr->left, pr->right, pr->e.blocks, &pr->e);
    if (pr->below >= 0)
        mlav_step_range_learn(q, cap, pr->left - 1, pr->left - 1, pr->below, 0);
    if (pr->above >= 0)
        mlav_step_range_learn(q, cap, pr->right + 1, pr->right + 1, pr->above, 0);
}

/* The next k to probe (L <= k < R; the range is open, L < R), at the step-th guess of a search
 * whose range was w0 wide: a secant in 1 / k (blocks is near a + b / k) through the range's
 * ends; one-sided, through R and (pk, pf), a probe past R with fewer blocks (pk < 0: none: every
 * row tile split at the mean rows of loop work). Safeguards: a bisection when a two-sided range
 * has not shrunk to a quarter after two guesses; steps doubling away from R when one-sided. */
static MLAV_HD int64_t mlav_step_range_guess(const mlav_step_range *q, int64_t cap, int step,
                                             int64_t w0, int64_t pk, int64_t pf, int64_t work,
                                             int64_t all_tiles, int64_t ka)
{
    double k;
    const double uR = mlav_step_guess_recip((double)q->R), target = (double)cap + 0.5;
    if (q->hasL) {
        const double uL = mlav_step_guess_recip((double)(q->L - 1));
        k = mlav_step_guess_recip(uR + (target - (double)q->fR) * (uL - uR) *
                                           mlav_step_guess_recip((double)(q->fL - q->fR)));
    } else if (pk >= 0) {
        k = mlav_step_guess_recip(uR + (target - (double)q->fR) *
                                           (uR - mlav_step_guess_recip((double)pk)) *
                                           mlav_step_guess_recip((double)(q->fR - pf)));
    } else {
        k = (double)work * mlav_step_guess_recip((double)ka) *
            mlav_step_guess_recip((double)cap - 0.5 * (double)all_tiles);
    }
    if (step > 2 && q->hasL && (q->R - q->L) * 4 > w0)
        k = (double)(q->L + (q->R - q->L) / 2);
    else if (step > 2 && !q->hasL && step < 62 && k > (double)(q->R - ((int64_t)1 << step)))
        k = (double)(q->R - ((int64_t)1 << step));
    if (!(k < (double)(q->R - 1)))
        return q->R - 1;
    if (!(k > (double)q->L))
        return q->L;
    return (int64_t)(k + 0.5);
}

/* a / b for a >= 0, b > 0: the model's divisions. On the device a double division and one
 * correction where both are below 2^52 (exact: the quotient's error is below 1/2 before the
 * truncation), in place of a 64-bit integer division's long subroutine. */
MLAV_HD int64_t mlav_step_div(int64_t a, int64_t b)
{
#ifdef __CUDA_ARCH__
    if (a < ((int64_t)1 << 52) && b < ((int64_t)1 << 52)) {
        int64_t q = (int64_t)((double)a / (double)b);
        if (q * b > a)
            q--;
        else if ((q + 1) * b <= a)
            q++;
        return q;
    }
#endif
    return a / b;
}

/* The step model's time in KV rows of loop work (see the top of this file); `work` is the KV
 * rows of all row tiles, sum of tiles x kv, the same at every chunk. */
MLAV_HD int64_t mlav_step_model(const mlav_step_eval *e, int64_t work, int32_t target_blocks,
                                int32_t block_cost, int32_t split_cost)
{
    if (e->blocks == 0)
        return 0;
    const int64_t waves = mlav_step_div(e->blocks + target_blocks - 1, target_blocks);
    /* every wave but the last at the mean block, the last at the longest one (the dispatch
     * model's time when the blocks are of one length) */
    const int64_t t =
        (waves - 1) * (block_cost + mlav_step_div(work, e->blocks)) + block_cost + e->longest;
    return t + (int64_t)split_cost * e->most;
}

/* The step's combine shape into its header: the kind and column blocks the exact plan would
 * take for `n_combine` combine items of at most `most` splits (combine_shape.h; 0 and 1 when
 * nothing is combined), so that the plan's one combine launch merges like the exact plan's. */
static MLAV_HD void mlav_step_combine_shape(int32_t n_combine, int32_t most,
                                            int32_t rows_per_tile, const mlav_step_bounds *bd,
                                            mlav_step_header *hdr)
{
    const int kind = n_combine > 0 ? mlav_combine_kind(most) : 0;
    hdr->combine_kind = kind;
    hdr->combine_col_blocks =
        n_combine > 0 ? mlav_combine_col_blocks_for((int64_t)n_combine * rows_per_tile, most,
                                                    bd->combine_wave[kind], MLAV_COMBINE_PRELOAD,
                                                    MLAV_COMBINE_MAX_COL_BLOCKS)
                      : 1;
}

/* Whether a request's lengths fit a plan's limits (q_len 0 always does: it is skipped). */
MLAV_HD int mlav_step_request_ok(int64_t q_len, int64_t kv, int32_t max_q_len, int32_t max_kv)
{
    return q_len == 0 || (q_len > 0 && q_len <= max_q_len && kv >= q_len && kv <= max_kv);
}

/* The split item that block t of a plan for limits' fixed grid runs, for a step of n items
 * (its header's count), or -1 past them: t itself, or, for a step of fewer items than `spread`
 * (0: never), item t / 2 on the even blocks and none on the odd ones (t / 2 + spread >= n), so
 * that each of a small step's blocks has a TPC to itself (flash/features.cuh, step_item_index,
 * says why). Each item < n has exactly one block when the grid has at least 2 (spread - 1)
 * blocks (the backend gives spread = SMs / 2 + 1 only to grids of a block per SM or more;
 * tests/test_schedule.c). Any n, also a header no update wrote (0 or -1), gives items below
 * n only. Branch-free: see step_item_index. */
MLAV_HD int32_t mlav_step_item_of_block(uint32_t t, int32_t n, uint32_t spread)
{
    const uint32_t s = (uint32_t)n < spread; /* n < 0: 0 */
    const uint32_t i = (t >> s) + (t & s) * spread;
    return (int32_t)i < n ? (int32_t)i : -1;
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

/* Build one step's schedule on the host by the rule above (equal shares included) into fixed
 * arrays sized by the bounds (no allocation): header, items [max_items] (past n_items: b = -1,
 * which the split kernel skips) and combine [max_combine] (past n_combine: nsplit = 0, which the
 * combine skips). Requests whose lengths break the limits are skipped and the first is recorded
 * in header->bad; a q_indptr not starting at 0, decreasing or past max_tokens leaves the
 * schedule empty. The device scheduler writes the same bytes. `scratch` (mlav_step_scratch_bytes,
 * any alignment malloc gives) is the caller's, used by one build at a time. kv_lens are global;
 * with a KV shard (`shard`, src/common/shard.h; {1, 0, 1} or zeroes: none) the splits are over
 * the rank's rows of each request, as mlav_schedule_build's are. */
void mlav_step_schedule_build(int32_t batch, const int32_t *q_indptr, const int32_t *kv_lens,
                              mlav_shard shard, int32_t H, const mlav_limits *lim,
                              const mlav_schedule_params *sp,
                              const mlav_step_bounds *bd, mlav_step_header *hdr,
                              mlav_split_item *items, mlav_combine_item *combine,
                              mlav_step_scratch *scratch);

/* A weight of the rule's candidate chunks other than the step's closed form (mlav_step_model):
 * time(ctx, chunk), the modelled time of the schedule at `chunk` in KV rows of loop work, which
 * must be at least its loop work and fixed costs spread evenly over target_blocks slots
 * ((work + blocks x block_cost_keys) / target_blocks, the bound by which the search skips a
 * candidate that cannot win): the exact plan's dispatch simulation (schedule.c). */
typedef struct mlav_step_weight {
    int64_t (*time)(const void *ctx, int64_t chunk);
    const void *ctx;
} mlav_step_weight;

/* The rule for one problem, of any batch (host): the exact plan's schedule (mlav_schedule_build
 * calls it), the candidates weighed by `w`, or, with w NULL, the fewest waves' chunk alone; no
 * limits, every request with rows taken; a problem with none gets the shortest chunk and no
 * items. MLAV_OK, MLAV_ERR_UNSUPPORTED (too many blocks) or MLAV_ERR_OUT_OF_MEMORY; free with
 * mlav_schedule_free. */
mlav_status mlav_step_schedule_exact(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                     const mlav_step_weight *w, mlav_schedule *out);

#ifdef __cplusplus
}
#endif

#endif
