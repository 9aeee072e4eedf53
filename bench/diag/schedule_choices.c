/* The flash plan's split schedule without a GPU: for each point, the blocks, splits and modelled
 * time (mlav_schedule_model_time, in KV rows of loop work) that the plan picks when it weighs up
 * to MW more waves, for each MW given; then random engine-like batches (B 8-64, H 16-128, q_len
 * 1-9, prefixes 1024-32767 drawn per request), each MW's mean modelled time against the first
 * MW's, and the mean host time of one mlav_schedule_build. The H200's parameters (132 SMs, one
 * block per SM) and the flash plan's constants (src/cuda/flash.h) unless changed below. Last,
 * the engine step's rule against the plan at the production preset's points, and its host time
 * at B = 1, 16, 32, 64 and 2048.
 * docs/PERFORMANCE.md#schedule, session 13: the model's ratios at the batched points matched the H200 within
 * ~1% (0.914 measured at 16 x (H 64, q_len 9), prefix 8192, against 0.913 modelled).
 *   build/bench/diag/schedule_choices [MW ...]      (default: 2 8; 2 is the plan before session 13)
 *   build/bench/diag/schedule_choices --step-times  (only the host step times)
 *   build/bench/diag/schedule_choices --sm90        (only the sm_90a family's schedule at the
 *                                                    harness's B 16 points)
 *   build/bench/diag/schedule_choices --shares      (the sm_90a plan with and without equal
 *                                                    shares: the harness's 120 shapes, the
 *                                                    production preset's batches)
 *   build/bench/diag/schedule_choices --persist     (the sm_90a plan's B 16 harness shapes with
 *                                                    an SM's items in one block, FlashMLA's
 *                                                    persistent form, by the model)
 *   build/bench/diag/schedule_choices --steps-sm90  (the step rule against the sm_90a exact
 *                                                    plan at the production preset's points,
 *                                                    limits 1.0) */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <math.h>

#include "mlaverify_internal.h"

/* The step rule's scratch, one for the whole run (a plan for limits keeps one likewise). */
static mlav_step_scratch *rule_scratch(void)
{
    static mlav_step_scratch *s;
    if (!s && !(s = malloc(mlav_step_scratch_bytes()))) {
        fprintf(stderr, "schedule_choices: out of memory\n");
        exit(1);
    }
    return s;
}

enum { SMS = 132, MAX_B = 64, MAX_MW = 8, BATCHES = 2000 };

static void steps(void);
static void step_times(void);

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static mlav_schedule_params params(int more_waves)
{
    /* src/cuda/flash.h's mlav_flash_schedule_params on the H200 */
    return (mlav_schedule_params){.rows_per_tile = 64, .key_align = 32, .min_chunk = 32,
                                  .max_splits = 256, .target_blocks = SMS,
                                  .block_cost_keys = 128, .split_cost_keys = 1,
                                  .more_waves = more_waves};
}

/* A batch of B requests: q_indptr and kv_lens filled by the caller. */
static mlav_problem_info batch(int32_t B, int32_t H, int32_t *q_indptr, int32_t *kv_lens)
{
    mlav_problem_info p = {.H = H, .Dl = 512, .Dr = 64, .W = 576, .page_size = 1, .B = B,
                           .q_indptr = q_indptr, .kv_lens = kv_lens, .T = q_indptr[B]};
    for (int32_t b = 0; b < B; b++) {
        const int32_t q = q_indptr[b + 1] - q_indptr[b];
        p.max_q_len = q > p.max_q_len ? q : p.max_q_len;
        p.max_kv_len = kv_lens[b] > p.max_kv_len ? kv_lens[b] : p.max_kv_len;
    }
    return p;
}

static int64_t model(const mlav_problem_info *p, int mw, int32_t *blocks, int32_t *splits,
                     double *us)
{
    const mlav_schedule_params sp = params(mw);
    mlav_schedule s;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (mlav_schedule_build(p, &sp, &s) != MLAV_OK) {
        fprintf(stderr, "schedule_choices: mlav_schedule_build failed\n");
        exit(1);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (us)
        *us += (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    const int64_t t = mlav_schedule_model_time(&s, &sp);
    if (blocks)
        *blocks = s.n_items;
    if (splits)
        *splits = s.splits[0];
    mlav_schedule_free(&s);
    return t;
}

/* The bench's draw of request b's prefix under --prefix-spread (bench/program/bench_points.c), so that
 * the batches below are the production preset's. */
static int32_t spread_prefix(int64_t prefix, double spread, int b)
{
    uint64_t x = 0x6d6c6176u ^ 0x9E3779B97F4A7C15ull * (uint64_t)(b + 1) ^ (uint64_t)prefix;
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    return (int32_t)llround((double)prefix * (1.0 + spread * u));
}

/* Engine steps (src/common/schedule_step.h): the step rule's schedule for a plan for limits 1.5
 * times the lengths, against the plan's own (8 more waves), both timed by the plan's dispatch
 * model; then the host time of one step schedule at several batch sizes (step_times). */
static void steps(void)
{
    static const int32_t pts[][5] = {/* B, H, q_len, prefix, spread in % */
                                     {1, 8, 16, 4096, 0},   {1, 64, 16, 131072, 0},
                                     {1, 16, 64, 131072, 0}, {16, 8, 16, 4096, 50},
                                     {16, 8, 16, 32768, 50}, {16, 16, 16, 4096, 50},
                                     {16, 16, 16, 32768, 50}, {32, 8, 16, 4096, 50},
                                     {32, 8, 16, 32768, 50}, {32, 16, 16, 4096, 50},
                                     {32, 16, 16, 32768, 50}};
    static mlav_split_item items[1 << 14];
    static mlav_combine_item combine[1 << 12];
    printf("\nengine steps, limits 1.5 x the lengths (production preset points):\n");
    printf("%3s %4s %3s %7s | plan blocks   model | mw | step at %d more: blocks model ratio | "
           "at %d more\n", "B", "H", "q", "prefix", MLAV_STEP_MORE_WAVES_FEW, MLAV_STEP_MORE_WAVES);
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        const int32_t B = pts[i][0], H = pts[i][1], q = pts[i][2];
        int32_t q_indptr[MAX_B + 1] = {0}, kv_lens[MAX_B], max_kv = 0;
        for (int32_t b = 0; b < B; b++) {
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = spread_prefix(pts[i][3], pts[i][4] / 100.0, b) + q;
            max_kv = kv_lens[b] > max_kv ? kv_lens[b] : max_kv;
        }
        const mlav_problem_info p = batch(B, H, q_indptr, kv_lens);
        int32_t plan_blocks;
        const int64_t t_plan = model(&p, 8, &plan_blocks, NULL, NULL);
        const mlav_limits lim = {B, (int32_t)ceil(1.5 * q_indptr[B]), (int32_t)ceil(1.5 * q),
                                 (int32_t)ceil(1.5 * max_kv)};
        const mlav_schedule_params sp = mlav_step_params(H, &lim, params(0));
        printf("%3d %4d %3d %7d |      %6d %7lld |", B, H, q, pts[i][3], plan_blocks,
               (long long)t_plan);
        /* the rule's choice of waves, then the step's schedule and model at each choice */
        static const int mws[2] = {MLAV_STEP_MORE_WAVES_FEW, MLAV_STEP_MORE_WAVES};
        printf(" %2d", sp.more_waves);
        for (int m = 0; m < 2; m++) {
            mlav_schedule_params spm = sp;
            spm.more_waves = mws[m];
            const mlav_step_bounds bd = mlav_step_bounds_of(H, &lim, &spm);
            if (bd.max_items > (int32_t)(sizeof items / sizeof items[0]) ||
                bd.max_combine > (int32_t)(sizeof combine / sizeof combine[0])) {
                printf(" |    too many blocks");
                continue;
            }
            mlav_step_header h;
            mlav_step_schedule_build(B, q_indptr, kv_lens, (mlav_shard){1, 0, 1}, H, &lim, &spm,
                                     &bd, &h, items, combine, rule_scratch());
            const mlav_schedule st = {.n_items = h.n_items, .n_combine = h.n_combine,
                                      .n_slots = h.n_slots, .items = items, .combine = combine};
            const mlav_schedule_params model_sp = params(8);
            const int64_t t_step = mlav_schedule_model_time(&st, &model_sp);
            printf(" | %6d %7lld %.3f", h.n_items, (long long)t_step,
                   (double)t_step / (double)t_plan);
        }
        printf("\n");
    }
    step_times();
}

/* Host time of one step schedule (mlav_step_schedule_build: the rule and the item lists, the CPU
 * side of a CUDA host update) at B = 1, 16, 32, 64 and 2048: H = 16, 1-16 tokens, prefixes
 * 1000-61000 per request, limits {B, 16 B, 16, 100000}; the median (and range) over 51 runs of
 * the mean of many builds. */
static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void step_times(void)
{
    enum { MAXB = 2048, RUNS = 51 };
    static const int32_t Bs[] = {1, 16, 32, 64, 2048};
    static int32_t q_indptr[MAXB + 1], kv_lens[MAXB];
    static mlav_split_item items[1 << 14];
    static mlav_combine_item combine[1 << 14];
    printf("\nhost step schedule (mlav_step_schedule_build), H = 16, q_len 1-16, prefixes "
           "1000-61000, median of %d runs:\n", RUNS);
    for (size_t i = 0; i < sizeof Bs / sizeof Bs[0]; i++) {
        const int32_t B = Bs[i];
        uint64_t x = 12345; /* at B = 64, the batch the figures before this table came from */
        for (int32_t b = 0; b < B; b++) {
            const int32_t q = 1 + (int32_t)(xorshift(&x) % 16);
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = 1000 + (int32_t)(xorshift(&x) % 60000) + q;
        }
        const mlav_limits lim = {B, B * 16, 16, 100000};
        const mlav_schedule_params sp = mlav_step_params(16, &lim, params(0));
        const mlav_step_bounds bd = mlav_step_bounds_of(16, &lim, &sp);
        if (bd.max_items > (int32_t)(sizeof items / sizeof items[0]) ||
            bd.max_combine > (int32_t)(sizeof combine / sizeof combine[0])) {
            printf("  B = %4d: too many blocks\n", B);
            continue;
        }
        mlav_step_header h;
        const int n = B >= 1024 ? 20 : 2000; /* builds per run */
        double us[RUNS];
        for (int r = -1; r < RUNS; r++) { /* run -1 warms up */
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int k = 0; k < n; k++)
                mlav_step_schedule_build(B, q_indptr, kv_lens, (mlav_shard){1, 0, 1}, 16, &lim,
                                         &sp, &bd, &h, items, combine, rule_scratch());
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (r >= 0)
                us[r] = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
                         (double)(t1.tv_nsec - t0.tv_nsec)) / n / 1e3;
        }
        qsort(us, RUNS, sizeof us[0], cmp_double);
        printf("  B = %4d (mw %d, %5d blocks of %5d, chunk %6d): %8.2f us (%.2f-%.2f)\n", B,
               sp.more_waves, h.n_items, bd.max_items, h.chunk_keys, us[RUNS / 2], us[0],
               us[RUNS - 1]);
    }
}

/* The sm_90a family's schedule (src/cuda/sm90/flash_sm90.h: splits aligned to and at least its
 * 64-key tile, its block cost MLAV_FLASH_SM90_BLOCK_COST_KEYS, equal shares weighed, the plan's
 * other parameters) at the peer harness's B 16 points where FlashMLA leads most
 * (docs/PERFORMANCE.md#hopper): its items, their waves on the SMs and their tiles. */
static void sm90_points(void)
{
    static const int32_t pts[][4] = {{16, 16, 9, 4096},  {16, 16, 16, 4096}, {16, 8, 9, 4096},
                                     {16, 64, 9, 4096},  {16, 64, 16, 4096}, {16, 128, 16, 4096},
                                     {16, 16, 9, 32768}, {16, 8, 9, 131072}};
    mlav_schedule_params sp = params(8);
    sp.key_align = sp.min_chunk = MLAV_FLASH_SM90_TILE_N;
    sp.block_cost_keys = MLAV_FLASH_SM90_BLOCK_COST_KEYS;
    sp.shares = 1;
    printf("sm_90a schedule (%d SMs, one block each)\n%4s %4s %5s %7s | %6s %6s %7s %9s\n", SMS,
           "B", "H", "q_len", "prefix", "items", "waves", "combine", "tiles/it");
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        int32_t qi[17] = {0}, kv[16];
        for (int32_t b = 0; b < pts[i][0]; b++) {
            qi[b + 1] = qi[b] + pts[i][2];
            kv[b] = pts[i][3] + pts[i][2];
        }
        const mlav_problem_info p = batch(pts[i][0], pts[i][1], qi, kv);
        mlav_schedule s;
        if (mlav_schedule_build(&p, &sp, &s) != MLAV_OK) {
            fprintf(stderr, "schedule_choices: mlav_schedule_build failed\n");
            exit(1);
        }
        int64_t tiles = 0;
        for (int32_t k = 0; k < s.n_items; k++)
            tiles += (s.items[k].kv_end - s.items[k].kv_begin + 63) / 64;
        printf("%4d %4d %5d %7d | %6d %6.2f %7d %9.1f\n", pts[i][0], pts[i][1], pts[i][2],
               pts[i][3], s.n_items, (double)s.n_items / SMS, s.n_combine,
               (double)tiles / s.n_items);
        mlav_schedule_free(&s);
    }
}

/* The sm_90a plan's parameters on the H200, shares weighed or not. */
static mlav_schedule_params sm90_params(int shares)
{
    mlav_schedule_params sp = params(8);
    sp.key_align = sp.min_chunk = MLAV_FLASH_SM90_TILE_N;
    sp.block_cost_keys = MLAV_FLASH_SM90_BLOCK_COST_KEYS;
    sp.shares = shares;
    return sp;
}

/* One batch's sm_90a schedule with and without equal shares (src/common/schedule_shares.c): the
 * modelled time in whole tiles (mlav_schedule_tile_time, as the plan weighs them) of the plan's
 * pick over the uniform schedule's, their blocks, the host time of
 * one build each; printed where the pick differs (or always with `all`), under the config's
 * `prefix` (the requests' own: `prefixes`); the ratio returned. */
static double shares_point(int32_t B, int32_t H, int32_t q, int32_t prefix,
                           const int32_t *prefixes, int all)
{
    int32_t qi[MAX_B + 1], kv[MAX_B];
    qi[0] = 0;
    for (int32_t b = 0; b < B; b++) {
        qi[b + 1] = qi[b] + q;
        kv[b] = prefixes[b] + q;
    }
    const mlav_problem_info p = batch(B, H, qi, kv);
    double us[2] = {0, 0};
    int64_t t[2];
    int32_t n[2];
    for (int sh = 0; sh < 2; sh++) {
        const mlav_schedule_params sp = sm90_params(sh);
        mlav_schedule s;
        struct timespec t0, t1;
        const int reps = 50;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < reps; r++) {
            if (mlav_schedule_build(&p, &sp, &s) != MLAV_OK) {
                fprintf(stderr, "schedule_choices: mlav_schedule_build failed\n");
                exit(1);
            }
            if (r < reps - 1)
                mlav_schedule_free(&s);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        us[sh] = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) /
                 reps;
        t[sh] = mlav_schedule_tile_time(&s, &sp);
        n[sh] = s.n_items;
        mlav_schedule_free(&s);
    }
    const double r = (double)t[1] / (double)t[0];
    if (all || r != 1.0)
        printf("%4d %4d %5d %7d | %6d %6d %6.3f | %7.1f %7.1f\n", B, H, q, prefix, n[0], n[1],
               r, us[0], us[1]);
    return r;
}

/* Blocks that run several items back to back, as FlashMLA's decode kernel runs its partition's
 * requests: the sm_90a exact plan's items at the harness's 60 B 16 shapes, dealt in the plan's
 * order to the first free of the SMs, each item a block (its whole tiles and the block cost) or
 * each SM one block (the block cost once, then a tile, 64 keys, for each further item); the
 * modelled time of the second over the first. */
static int64_t dealt_time(const mlav_schedule *s, const mlav_schedule_params *sp, int persist,
                          int32_t *most)
{
    int64_t end[SMS] = {0};
    int32_t count[SMS] = {0};
    for (int32_t k = 0; k < s->n_items; k++) {
        int m = 0;
        for (int j = 1; j < SMS; j++)
            m = end[j] < end[m] ? j : m;
        const int64_t tiles =
            (s->items[k].kv_end - s->items[k].kv_begin + sp->key_align - 1) / sp->key_align;
        end[m] += tiles * sp->key_align +
                  (persist && count[m] > 0 ? sp->key_align : sp->block_cost_keys);
        count[m]++;
    }
    int64_t t = 0;
    *most = 0;
    for (int j = 0; j < SMS; j++) {
        t = end[j] > t ? end[j] : t;
        *most = count[j] > *most ? count[j] : *most;
    }
    return t;
}

static void persist_points(void)
{
    const mlav_schedule_params sp = sm90_params(1);
    static const int32_t Hs[] = {8, 16, 64, 128}, Qs[] = {1, 2, 4, 9, 16},
                         Ps[] = {4096, 32768, 131072};
    printf("sm_90a exact plan, B 16 (132 SMs): shapes where an SM takes more than one item\n"
           "%4s %5s %7s | %6s %5s | %9s\n", "H", "q_len", "prefix", "items", "most",
           "persist");
    double lg = 0.0;
    int changed = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int hi = 0; hi < 4; hi++)
            for (int qi = 0; qi < 5; qi++) {
                int32_t q_indptr[17] = {0}, kv_lens[16];
                for (int32_t b = 0; b < 16; b++) {
                    q_indptr[b + 1] = q_indptr[b] + Qs[qi];
                    kv_lens[b] = Ps[pi] + Qs[qi];
                }
                const mlav_problem_info p = batch(16, Hs[hi], q_indptr, kv_lens);
                mlav_schedule s;
                if (mlav_schedule_build(&p, &sp, &s) != MLAV_OK) {
                    fprintf(stderr, "schedule_choices: mlav_schedule_build failed\n");
                    exit(1);
                }
                int32_t most;
                const int64_t one = dealt_time(&s, &sp, 0, &most);
                const double r = (double)dealt_time(&s, &sp, 1, &most) / (double)one;
                lg += log(r);
                if (most > 1) {
                    changed++;
                    printf("%4d %5d %7d | %6d %5d | %9.4f\n", Hs[hi], Qs[qi], Ps[pi], s.n_items,
                           most, r);
                }
                mlav_schedule_free(&s);
            }
    printf("%d of 60 shapes change; geomean over the 60: %.4f\n", changed, exp(lg / 60));
}

/* --shares: the harness's 120 shapes (B {1, 16} x H {8, 16, 64, 128} x q_len {1, 2, 4, 9, 16} x
 * prefix {4096, 32768, 131072}), those whose pick changes and the geomean; single requests over
 * a wider grid (how many pick shares); then the production
 * preset's batches (16 and 32 requests, H 8 and 16, q_len 16, prefixes drawn within 50% of
 * 4096 and 32768 as the bench draws them). */
static void shares_points(void)
{
    printf("sm_90a schedule, equal shares weighed (132 SMs): rows where the pick changes\n"
           "%4s %4s %5s %7s | %6s %6s %6s | %7s %7s\n", "B", "H", "q_len", "prefix", "blocks",
           "shares", "model", "us", "us sh");
    static const int32_t Bs[] = {1, 16}, Hs[] = {8, 16, 64, 128}, Qs[] = {1, 2, 4, 9, 16},
                         Ps[] = {4096, 32768, 131072};
    double lg = 0.0;
    int n = 0;
    for (int bi = 0; bi < 2; bi++)
        for (int hi = 0; hi < 4; hi++)
            for (int qi = 0; qi < 5; qi++)
                for (int pi = 0; pi < 3; pi++) {
                    int32_t pre[MAX_B];
                    for (int32_t b = 0; b < Bs[bi]; b++)
                        pre[b] = Ps[pi];
                    lg += log(shares_point(Bs[bi], Hs[hi], Qs[qi], Ps[pi], pre, 0));
                    n++;
                }
    printf("geomean modelled time, pick / uniform, over the %d shapes: %.4f\n", n, exp(lg / n));
    /* single requests: a cut of one request is a split of it, and in whole tiles none should
     * model past the uniform schedule's evened-out splits (rows printed where one does) */
    static const int32_t h1[] = {8, 16, 32, 64, 128},
                         q1[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 64};
    int n1 = 0, picked = 0;
    int32_t last = 0;
    for (int hi = 0; hi < 5; hi++)
        for (int qi = 0; qi < 14; qi++)
            for (int32_t pf = 1024; pf <= 262144; pf = pf * 5 / 4) {
                const int32_t pre[1] = {pf};
                picked += shares_point(1, h1[hi], q1[qi], pf, pre, 0) != 1.0;
                n1++;
                last = pf;
            }
    printf("B 1 (H 8-128, q_len 1-64, prefix 1024 to %d by 1.25x): shares picked at %d of %d\n",
           last, picked, n1);
    printf("production preset's batches (prefix: the config's, drawn within 50%%)\n");
    static const int32_t pb[] = {16, 32}, ph[] = {8, 16}, pp[] = {4096, 32768};
    for (int bi = 0; bi < 2; bi++)
        for (int hi = 0; hi < 2; hi++)
            for (int pi = 0; pi < 2; pi++) {
                int32_t pre[MAX_B];
                for (int32_t b = 0; b < pb[bi]; b++)
                    pre[b] = spread_prefix(pp[pi], 0.5, b);
                shares_point(pb[bi], ph[hi], 16, pp[pi], pre, 1);
            }
}

/* --steps-sm90: the production preset's points (B 1: H 8, 16, 64 x q_len 1, 9, 16, 64 x prefix
 * 4096, 32768, 131072; B 16 and 32: H 8 and 16, q_len 16, prefixes drawn within 50% of 4096 and
 * 32768) through a plan for limits 1.0 on the sm_90a parameters: the step rule's schedule
 * (mlav_step_schedule_build, its equal shares weighed) against the exact plan's, each timed by
 * the exact plan's dispatch model (mlav_schedule_model_time): what the engine path's run / exact
 * owes to the schedule (docs/PERFORMANCE.md#hopper, "Engine path"). */
static void steps_sm90(void)
{
    static mlav_split_item items[1 << 14];
    static mlav_combine_item combine[1 << 12];
    const mlav_schedule_params sp = sm90_params(1);
    printf("sm_90a, limits 1.0: %3s %4s %3s %7s | exact items  model | step items  model | "
           "step / exact\n", "B", "H", "q", "prefix");
    static const int32_t hs[] = {8, 16, 64}, qs[] = {1, 9, 16, 64}, ps[] = {4096, 32768, 131072};
    static const int32_t pts[][3] = {{16, 8, 4096}, {16, 8, 32768}, {16, 16, 4096},
                                     {16, 16, 32768}, {32, 8, 4096}, {32, 8, 32768},
                                     {32, 16, 4096}, {32, 16, 32768}};
    const int n1 = 3 * 4 * 3, n = n1 + (int)(sizeof pts / sizeof pts[0]);
    for (int i = 0; i < n; i++) {
        const int32_t B = i < n1 ? 1 : pts[i - n1][0];
        const int32_t H = i < n1 ? hs[i / 12] : pts[i - n1][1];
        const int32_t q = i < n1 ? qs[i / 3 % 4] : 16;
        const int32_t prefix = i < n1 ? ps[i % 3] : pts[i - n1][2];
        int32_t q_indptr[MAX_B + 1] = {0}, kv_lens[MAX_B], max_kv = 0;
        for (int32_t b = 0; b < B; b++) {
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = (B > 1 ? spread_prefix(prefix, 0.5, b) : prefix) + q;
            max_kv = kv_lens[b] > max_kv ? kv_lens[b] : max_kv;
        }
        const mlav_problem_info p = batch(B, H, q_indptr, kv_lens);
        mlav_schedule s;
        if (mlav_schedule_build(&p, &sp, &s) != MLAV_OK) {
            fprintf(stderr, "schedule_choices: mlav_schedule_build failed\n");
            exit(1);
        }
        const int64_t t_exact = mlav_schedule_model_time(&s, &sp);
        const mlav_limits lim = {B, q_indptr[B], q, max_kv};
        const mlav_schedule_params ssp = mlav_step_params(H, &lim, sm90_params(1));
        const mlav_step_bounds bd = mlav_step_bounds_of(H, &lim, &ssp);
        if (bd.max_items > (int32_t)(sizeof items / sizeof items[0]) ||
            bd.max_combine > (int32_t)(sizeof combine / sizeof combine[0])) {
            fprintf(stderr, "schedule_choices: a step of too many blocks\n");
            exit(1);
        }
        mlav_step_header h;
        mlav_step_schedule_build(B, q_indptr, kv_lens, (mlav_shard){1, 0, 1}, H, &lim, &ssp, &bd,
                                 &h, items, combine, rule_scratch());
        const mlav_schedule st = {.n_items = h.n_items, .n_combine = h.n_combine,
                                  .n_slots = h.n_slots, .items = items, .combine = combine};
        const int64_t t_step = mlav_schedule_model_time(&st, &sp);
        printf("%23d %4d %3d %7d |       %6d %6lld |      %6d %6lld | %.3f\n", B, H, q, prefix,
               s.n_items, (long long)t_exact, h.n_items, (long long)t_step,
               (double)t_step / (double)t_exact);
        mlav_schedule_free(&s);
    }
}

int main(int argc, char **argv)
{
    int mw[MAX_MW] = {2, 8}, nmw = 2;
    if (argc == 2 && strcmp(argv[1], "--step-times") == 0) {
        step_times(); /* only the host step times */
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--sm90") == 0) {
        sm90_points();
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--shares") == 0) {
        shares_points();
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--persist") == 0) {
        persist_points();
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--steps-sm90") == 0) {
        steps_sm90();
        return 0;
    }
    if (argc > 1) {
        nmw = 0;
        for (int i = 1; i < argc && nmw < MAX_MW; i++)
            mw[nmw++] = atoi(argv[i]);
    }
    /* uniform batches: the bench's points (B, H, q_len, prefix) */
    static const int32_t pts[][4] = {
        {1, 64, 9, 16384},  {1, 64, 9, 131072}, {1, 64, 33, 131072}, {1, 64, 1, 131072},
        {8, 16, 9, 32768},  {32, 16, 4, 4096},  {15, 64, 9, 4096},   {15, 64, 9, 32768},
        {16, 64, 9, 2048},  {16, 64, 9, 8192},  {16, 64, 9, 32768},  {8, 128, 9, 4096},
        {8, 128, 9, 16384}, {5, 64, 33, 16384}, {24, 16, 9, 16384},  {12, 64, 4, 16384},
        {20, 64, 2, 32768}};
    printf("%3s %4s %3s %7s", "B", "H", "q", "prefix");
    for (int m = 0; m < nmw; m++)
        printf(" | mw %-2d blocks splits   model  ratio", mw[m]);
    printf("\n");
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        int32_t q_indptr[MAX_B + 1], kv_lens[MAX_B];
        const int32_t B = pts[i][0];
        for (int32_t b = 0; b <= B; b++)
            q_indptr[b] = b * pts[i][2];
        for (int32_t b = 0; b < B; b++)
            kv_lens[b] = pts[i][3] + pts[i][2];
        const mlav_problem_info p = batch(B, pts[i][1], q_indptr, kv_lens);
        printf("%3d %4d %3d %7d", B, pts[i][1], pts[i][2], pts[i][3]);
        int64_t t0 = 0;
        for (int m = 0; m < nmw; m++) {
            int32_t blocks, splits;
            const int64_t t = model(&p, mw[m], &blocks, &splits, NULL);
            t0 = m == 0 ? t : t0;
            printf(" |       %6d %6d %7lld  %.3f", blocks, splits, (long long)t,
                   (double)t / (double)t0);
        }
        printf("\n");
    }
    /* random engine-like batches */
    static const int32_t Bs[] = {8, 16, 32, 64}, Hs[] = {16, 32, 64, 128}, Qs[] = {1, 2, 4, 9};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    double ratio[MAX_MW] = {0}, us[MAX_MW] = {0}, best[MAX_MW] = {0};
    int gain3[MAX_MW] = {0}; /* batches modelled at least 3% shorter than with mw[0] */
    for (int n = 0; n < BATCHES; n++) {
        int32_t q_indptr[MAX_B + 1] = {0}, kv_lens[MAX_B];
        const uint64_t r = xorshift(&x);
        const int32_t B = Bs[r % 4], H = Hs[(r >> 8) % 4], q = Qs[(r >> 16) % 4];
        for (int32_t b = 0; b < B; b++) {
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = q + 1024 + (int32_t)(xorshift(&x) % 31744);
        }
        const mlav_problem_info p = batch(B, H, q_indptr, kv_lens);
        int64_t t0 = 0;
        for (int m = 0; m < nmw; m++) {
            const int64_t t = model(&p, mw[m], NULL, NULL, &us[m]);
            t0 = m == 0 ? t : t0;
            const double r = (double)t / (double)t0;
            ratio[m] += r;
            best[m] = n == 0 || r < best[m] ? r : best[m];
            gain3[m] += r <= 0.97;
        }
    }
    printf("\n%d random batches (B 8-64, H 16-128, q_len 1-9, prefixes 1024-32767):\n", BATCHES);
    for (int m = 0; m < nmw; m++)
        printf("  mw %2d: mean modelled time %.4f of mw %d's, best %.3f, %d at most 0.97; %.1f us "
               "per plan\n", mw[m], ratio[m] / BATCHES, mw[0], best[m], gain3[m], us[m] / BATCHES);
    steps();
    return 0;
}
