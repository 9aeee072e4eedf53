/* Equal shares: the exact plan's candidate (src/common/schedule_shares.c) and the step rule's
 * (src/common/schedule_step_shares.h): what the kernels and the combine rely on, in any block
 * order; when each is taken; and their cases by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "../src/common/schedule.h"
#include "../src/common/schedule_shares.h"
#include "../src/common/schedule_step.h"
#include "../src/dispatch/validate.h"
#include "test_util.h"

/* The H200's sm_90a plan parameters (src/cuda/sm90/flash_sm90.h): 64-row and 64-key tiles, one
 * block on each of 132 SMs, a block's fixed cost of five tiles. */
static mlav_schedule_params sm90_params(void)
{
    return (mlav_schedule_params){.rows_per_tile = 64, .key_align = 64, .min_chunk = 64,
                                  .max_splits = 256, .target_blocks = 132,
                                  .block_cost_keys = 320, .split_cost_keys = 1, .more_waves = 8,
                                  .shares = 1};
}

/* The invariants of any schedule, whatever its blocks' order: each row tile of each request
 * with rows covers its KV rows [0, kv) once, in key_align pieces that meet; splits[b] pieces for
 * every row tile; slot -1 for an unsplit request, else each slot written once, the k-th piece
 * (in KV order) of row tile m at the combine item's slot0 + k slot_stride; one combine item per
 * row tile of a split request; each item's request fields. */
static void check_cover(const mlav_problem_info *p, const mlav_schedule_params *sp,
                        const mlav_schedule *s, uint64_t seed)
{
    int32_t *seen = calloc((size_t)s->n_slots + 1, sizeof(int32_t));
    assert_non_null(seen);
    int64_t items = 0, combine = 0;
    for (int32_t b = 0; b < p->B; b++) {
        const int32_t q = mlav_info_q_len(p, b);
        const int64_t rows = (int64_t)q * p->H;
        const int32_t mt = (int32_t)((rows + sp->rows_per_tile - 1) / sp->rows_per_tile);
        if (rows == 0) {
            assert_int_equal(s->splits[b], 0);
            continue;
        }
        const int32_t ns = s->splits[b];
        assert_true(ns >= 1 && ns <= sp->max_splits);
        items += (int64_t)ns * mt;
        combine += ns > 1 ? mt : 0;
        for (int32_t m = 0; m < mt; m++) {
            const mlav_combine_item *ci = NULL;
            for (int32_t c = 0; c < s->n_combine; c++)
                if (s->combine[c].b == b && s->combine[c].mtile == m)
                    ci = &s->combine[c];
            assert_true((ci != NULL) == (ns > 1));
            if (ci) {
                assert_int_equal(ci->nsplit, ns);
                assert_int_equal(ci->q_start, p->q_indptr[b]);
                assert_int_equal(ci->rows, (int32_t)rows);
            }
            int32_t at = 0;
            for (int32_t k = 0; k < ns; k++) { /* the piece that starts at `at` */
                const mlav_split_item *x = NULL;
                for (int32_t i = 0; i < s->n_items && !x; i++)
                    if (s->items[i].b == b && s->items[i].mtile == m && s->items[i].kv_begin == at)
                        x = &s->items[i];
                if (!x)
                    fail_msg("seed 0x%llx: request %d, row tile %d: no piece starts at %d",
                             (unsigned long long)seed, b, m, at);
                assert_true(x->kv_end > x->kv_begin);
                assert_int_equal(x->kv_begin % sp->key_align, 0);
                assert_int_equal(x->q_start, p->q_indptr[b]);
                assert_int_equal(x->q_len, q);
                assert_int_equal(x->prefix, p->kv_lens[b] - q);
                if (ci) {
                    assert_int_equal(x->slot, ci->slot0 + k * ci->slot_stride);
                    assert_true(x->slot >= 0 && x->slot < s->n_slots);
                    seen[x->slot]++;
                } else {
                    assert_int_equal(x->slot, -1);
                }
                at = x->kv_end;
            }
            assert_int_equal(at, p->kv_lens[b]);
        }
    }
    assert_int_equal(s->n_items, items);
    assert_int_equal(s->n_combine, combine);
    for (int32_t k = 0; k < s->n_slots; k++)
        assert_int_equal(seen[k], 1);
    free(seen);
}

/* The first n items are want's rows: request, kv_begin, kv_end, slot. */
static void expect_items(const mlav_split_item *items, int n, const int32_t (*want)[4])
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(items[i].b, want[i][0]);
        assert_int_equal(items[i].kv_begin, want[i][1]);
        assert_int_equal(items[i].kv_end, want[i][2]);
        assert_int_equal(items[i].slot, want[i][3]);
    }
}

/* B requests of q_len q at prefix `prefix` each, H heads. */
static mlav_problem_info uniform_batch(int32_t B, int32_t H, int32_t q, int32_t prefix,
                                       int32_t *q_indptr, int32_t *kv_lens)
{
    q_indptr[0] = 0;
    for (int32_t b = 0; b < B; b++) {
        q_indptr[b + 1] = q_indptr[b] + q;
        kv_lens[b] = prefix + q;
    }
    mlav_problem prob = {.num_heads = H, .d_latent = 512, .d_rope = 64, .softmax_scale = 0.1f,
                         .dtype = MLAV_DTYPE_BF16, .page_size = 1, .batch = B,
                         .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = 1 << 24};
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
    return info;
}

/* B requests of one token each at KV lengths kv_lens, 64 heads (the hand-made cases). */
static mlav_problem_info token_batch(int32_t B, int32_t *q_indptr, int32_t *kv_lens)
{
    for (int32_t b = 0; b <= B; b++)
        q_indptr[b] = b;
    mlav_problem prob = {.num_heads = 64, .d_latent = 512, .d_rope = 64, .softmax_scale = 0.1f,
                         .dtype = MLAV_DTYPE_BF16, .page_size = 1, .batch = B,
                         .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = 1 << 24};
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
    return info;
}

/* Random batches of one q_len (so the rule applies) and of mixed ones: every schedule the plan
 * builds with shares weighed holds the invariants, is the uniform one or models at most 0.97 of
 * its time, and where the rule does not apply is the uniform one. */
static void test_shares_random_batches(void **state)
{
    (void)state;
    const uint64_t seed = tu_seeded("test_shares_random_batches");
    uint64_t rng = seed;
    int kept = 0, uniform = 0;
    for (int iter = 0; iter < 400; iter++) {
        const int32_t B = 1 + (int32_t)(tu_next(&rng) % 24);
        const int mixed = iter % 4 == 3;
        const int32_t q0 = 1 + (int32_t)(tu_next(&rng) % 20);
        int32_t q_indptr[25] = {0}, kv_lens[24];
        for (int32_t b = 0; b < B; b++) {
            const int32_t q = mixed ? (int32_t)(tu_next(&rng) % 20) : q0;
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = q + (int32_t)(tu_next(&rng) % (iter % 3 ? 9000 : 140000));
        }
        mlav_problem prob = {.num_heads = 1 + (int32_t)(tu_next(&rng) % 128), .d_latent = 512,
                             .d_rope = 64, .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16,
                             .page_size = 1, .batch = B, .q_indptr = q_indptr,
                             .kv_lens = kv_lens, .max_pages = 1 << 24};
        mlav_problem_info info;
        assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
        mlav_schedule_params sp = sm90_params();
        sp.target_blocks = 1 + (int32_t)(tu_next(&rng) % 300);
        sp.block_cost_keys = 64 * (1 + (int32_t)(tu_next(&rng) % 8));
        sp.max_splits = 2 + (int32_t)(tu_next(&rng) % 255);
        mlav_schedule s, u, sh;
        assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
        check_cover(&info, &sp, &s, seed);
        mlav_schedule_params up = sp;
        up.shares = 0;
        assert_int_equal(mlav_schedule_build(&info, &up, &u), MLAV_OK);
        int64_t t_sh;
        assert_int_equal(mlav_schedule_shares(&info, &sp, INT64_MAX, 0, &t_sh, &sh), MLAV_OK);
        if (t_sh >= 0) {
            check_cover(&info, &sp, &sh, seed);
            assert_int_equal(mlav_schedule_tile_time(&sh, &sp), t_sh);
        }
        const int64_t ts = mlav_schedule_tile_time(&s, &sp), tu = mlav_schedule_tile_time(&u, &sp);
        const int same = s.n_items == u.n_items &&
                         !memcmp(s.items, u.items, (size_t)s.n_items * sizeof(mlav_split_item));
        /* the margin: 0.97, or 0.98 where the uniform schedule is one wave leaving SMs idle */
        const int one_wave = u.n_items < sp.target_blocks;
        if (same) {
            /* kept uniform only without a gain past the margin */
            assert_true(t_sh < 0 || t_sh * 100 > tu * (one_wave ? 98 : 97));
            uniform++;
        } else {
            assert_true(t_sh >= 0 && ts == t_sh && ts * 100 <= tu * (one_wave ? 98 : 97));
            kept++;
        }
        /* mixed row tiles: not this rule's */
        int32_t mt0 = -1, differ = 0;
        for (int32_t b = 0; b < B; b++) {
            const int64_t rows = (int64_t)mlav_info_q_len(&info, b) * info.H;
            if (rows == 0)
                continue;
            const int32_t mt = (int32_t)((rows + 63) / 64);
            differ |= mt0 >= 0 && mt != mt0;
            mt0 = mt;
        }
        if (differ)
            assert_true(t_sh < 0 && same);
        mlav_schedule_free(&s);
        mlav_schedule_free(&u);
        mlav_schedule_free(&sh);
        mlav_problem_info_free(&info);
    }
    printf("  shares kept in %d of 400 batches, the uniform schedule in %d\n", kept, uniform);
    assert_true(kept > 0 && uniform > 0); /* both outcomes exercised */
}

/* The peer harness's points where FlashMLA leads most (docs/PERFORMANCE.md#hopper), on the
 * H200's parameters: B 16, H 64, q_len 9, 4096 is 144 row tiles of 65 tiles, uniformly 576
 * blocks of 16.25 tiles in 4.36 waves (the busiest SM 5 blocks); in shares each SM's is about
 * 71 tiles in two or three blocks, which models at 0.85 of the time or less. At B 16, 131072
 * with one to four row tiles a request the uniform schedule is one wave of 128 blocks on 132 SMs:
 * shares fill them (146-192 blocks) at 0.975-0.979 modelled, inside the one-wave margin of 0.98,
 * and are taken (H 8, q_len 1 and 9); H 64, q_len 9 there, 1,296 blocks in ten waves, models
 * 0.973 but ran 1.09x in shares (docs/PERFORMANCE.md#schedule), and keeps the uniform schedule,
 * as does B 1, H 64, q_len 16, 4096: 8 parts of 8 and 9 tiles against 7 splits of 9 and one of 2,
 * the same longest block in whole tiles (by keys shares modelled 0.947 and measured 1.29x the
 * uniform schedule's time on the H200). */
static void test_shares_harness_points(void **state)
{
    (void)state;
    const struct {
        int32_t B, H, q, prefix, shares;
        double at_most; /* shares' modelled time over the uniform one's, in whole tiles */
    } pts[] = {{16, 64, 9, 4096, 1, 0.85},  {16, 16, 9, 4096, 1, 0.92},
               {16, 128, 9, 4096, 1, 0.92}, {16, 8, 1, 131072, 1, 0.98},
               {16, 8, 9, 131072, 1, 0.98}, {16, 64, 9, 131072, 0, 1.0},
               {1, 128, 16, 131072, 0, 1.0}, {1, 64, 16, 4096, 0, 1.0}};
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        int32_t q_indptr[17], kv_lens[16];
        mlav_problem_info info =
            uniform_batch(pts[i].B, pts[i].H, pts[i].q, pts[i].prefix, q_indptr, kv_lens);
        mlav_schedule_params sp = sm90_params(), up = sm90_params();
        up.shares = 0;
        mlav_schedule s, u;
        assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
        assert_int_equal(mlav_schedule_build(&info, &up, &u), MLAV_OK);
        check_cover(&info, &sp, &s, 0);
        const double r =
            (double)mlav_schedule_tile_time(&s, &sp) / (double)mlav_schedule_tile_time(&u, &sp);
        printf("B %d H %d q_len %d prefix %d: %d blocks (uniform %d), modelled %.3f\n", pts[i].B,
               pts[i].H, pts[i].q, pts[i].prefix, s.n_items, u.n_items, r);
        if (pts[i].shares) {
            assert_true(r <= pts[i].at_most);
            /* fewer blocks where the uniform schedule takes waves, more where it leaves SMs idle */
            assert_true(u.n_items < sp.target_blocks ? s.n_items > u.n_items
                                                     : s.n_items < u.n_items);
        } else {
            assert_int_equal(s.n_items, u.n_items);
            assert_memory_equal(s.items, u.items, (size_t)s.n_items * sizeof(mlav_split_item));
        }
        mlav_schedule_free(&s);
        mlav_schedule_free(&u);
        mlav_problem_info_free(&info);
    }
}

/* The exact plan's equal shares of a hand-made batch on `sp`: its items (b, kv_begin, kv_end,
 * slot), each block covering its KV rows once, and its model `t`, which mlav_schedule_tile_time
 * gives too. */
static void expect_shares(mlav_problem_info *info, const mlav_schedule_params *sp,
                          const int32_t (*want)[4], int n, int64_t t_want)
{
    int64_t t;
    mlav_schedule s;
    assert_int_equal(mlav_schedule_shares(info, sp, INT64_MAX, 0, &t, &s), MLAV_OK);
    check_cover(info, sp, &s, 0);
    assert_int_equal(s.n_items, n);
    expect_items(s.items, n, want);
    assert_int_equal(t, t_want);
    assert_int_equal(mlav_schedule_tile_time(&s, sp), t);
    mlav_schedule_free(&s);
    mlav_problem_info_free(info);
}

/* Three requests of 3, 2 and 1 tiles (64 keys each), one row tile, 3 parts of 2 tiles on a
 * device of 3 blocks: part 0 is request 0's tiles 0-1, part 1 its tile 2 and request 1's tile 0,
 * part 2 request 1's tile 1 and request 2's tile 0. First each part's first piece, by part:
 * (0, [0, 128)), (0, [128, 192)), (1, [64, 128)); then the second pieces, which both start a tile
 * into their parts (no block cost here), by part: (1, [0, 64)), (2, [0, 64)). Slots: request 0's
 * two pieces 0 and 1, request 1's 2 and 3; request 2 is one piece, unsplit. */
static void test_shares_by_hand(void **state)
{
    (void)state;
    int32_t q_indptr[4], kv_lens[3] = {192, 128, 64};
    mlav_problem_info info = token_batch(3, q_indptr, kv_lens);
    mlav_schedule_params sp = sm90_params();
    sp.target_blocks = 3; /* weighs 2 to 6 parts: 3 and 4 model least, the first is kept */
    sp.block_cost_keys = 0;
    const int32_t want[5][4] = {{0, 0, 128, 0}, {0, 128, 192, 1}, {1, 64, 128, 3},
                                {1, 0, 64, 2}, {2, 0, 64, -1}}; /* b, kv_begin, kv_end, slot */
    /* each block costs its keys; slots free at 128, 64, 64: (1, [0, 64)) and (2, [0, 64)) end
     * at 128; the combine 1 x 2 splits */
    expect_shares(&info, &sp, want, 5, 128 + 2);
}

/* Four requests of 1, 1, 16 and 2 tiles, one row tile, a device of 2 blocks, a block's fixed
 * cost of 320 keys: 2 parts of 10 tiles model least (of the 1 to 9 weighed). Part 0 is request
 * 0, request 1 and request 2's tiles 0-7 (its pieces start at 0, 64 + 320 and 128 + 640); part 1
 * request 2's tiles 8-15 and request 3 (at 0 and 512 + 320). By start, part 0's pieces run back
 * to back on the SM that ran its first and part 1's on the other: part 0's three blocks end at
 * 3 x 320 + 640 = 1600, the schedule's time (+2: request 2's two splits in the combine). In rounds
 * with the longest piece first, part 1's second piece (2 tiles) would go before part 0's second
 * (1 tile), to the SM of part 0, and part 0's third would end at 1664. */
static void test_shares_by_start(void **state)
{
    (void)state;
    int32_t q_indptr[5], kv_lens[4] = {64, 64, 1024, 128};
    mlav_problem_info info = token_batch(4, q_indptr, kv_lens);
    mlav_schedule_params sp = sm90_params();
    sp.target_blocks = 2;
    const int32_t want[5][4] = {{0, 0, 64, -1}, {2, 512, 1024, 1}, {1, 0, 64, -1},
                                {2, 0, 512, 0}, {3, 0, 128, -1}}; /* b, kv_begin, kv_end, slot */
    expect_shares(&info, &sp, want, 5, 1600 + 2);
}

/* A step's schedule, built by the step rule for limits that just hold the batch, into `s` (its
 * items and combine items in caller arrays; splits[b] from the combine items: the counts of
 * check_cover). */
typedef struct {
    mlav_split_item items[8192];
    mlav_combine_item combine[2048];
    int32_t splits[64];
    mlav_step_header h;
} step_out;

static void step_build(const mlav_problem_info *p, const mlav_schedule_params *base, step_out *o,
                       mlav_schedule *s)
{
    int32_t max_q = 1, max_kv = 16;
    for (int32_t b = 0; b < p->B; b++) {
        max_q = mlav_info_q_len(p, b) > max_q ? mlav_info_q_len(p, b) : max_q;
        max_kv = p->kv_lens[b] > max_kv ? p->kv_lens[b] : max_kv;
    }
    const mlav_limits lim = {p->B, p->T > 0 ? p->T : 1, max_q, max_kv};
    const mlav_schedule_params sp = mlav_step_params(p->H, &lim, *base);
    const mlav_step_bounds bd = mlav_step_bounds_of(p->H, &lim, &sp);
    assert_true(bd.max_items <= 8192 && bd.max_combine <= 2048 && p->B <= 64);
    mlav_step_scratch *scratch = malloc(mlav_step_scratch_bytes());
    assert_non_null(scratch);
    mlav_step_schedule_build(p->B, p->q_indptr, p->kv_lens, (mlav_shard){1, 0, 1}, p->H, &lim,
                             &sp, &bd, &o->h, o->items, o->combine, scratch);
    free(scratch);
    for (int32_t i = o->h.n_items; i < bd.max_items; i++)
        assert_int_equal(o->items[i].b, -1);
    for (int32_t b = 0; b < p->B; b++)
        o->splits[b] = mlav_info_q_len(p, b) > 0;
    for (int32_t c = 0; c < o->h.n_combine; c++)
        o->splits[o->combine[c].b] = o->combine[c].nsplit;
    *s = (mlav_schedule){.n_items = o->h.n_items, .n_combine = o->h.n_combine,
                         .n_slots = o->h.n_slots, .chunk_keys = o->h.chunk_keys,
                         .items = o->items, .combine = o->combine, .splits = o->splits};
}

/* Whether a step schedule is the shares' (its blocks not request-major), and if so the closed
 * form's time, derived here from the batch alone: P = target_blocks / mt parts of the requests'
 * tiles end to end, each part's tiles and a block's cost for every request it touches, the
 * longest; plus the split cost for the most parts one request touches. */
static int step_took_shares(const mlav_problem_info *p, const mlav_schedule_params *sp,
                            const mlav_schedule *s, int64_t *closed)
{
    int took = 0;
    for (int32_t i = 1; i < s->n_items; i++)
        took |= s->items[i].b < s->items[i - 1].b;
    if (!took)
        return 0;
    int64_t first[65] = {0}, N = 0;
    int32_t mt = 0, n = 0;
    for (int32_t b = 0; b < p->B; b++)
        if (mlav_info_q_len(p, b) > 0) {
            mt = (int32_t)((mlav_info_q_len(p, b) * (int64_t)p->H + 63) / 64);
            N += (p->kv_lens[b] + sp->key_align - 1) / sp->key_align;
            first[++n] = N;
        }
    const int64_t P = sp->target_blocks / mt < N ? sp->target_blocks / mt : N;
    int64_t t = 0, most = 0;
    for (int64_t j = 0; j < P; j++) {
        const int64_t a = N * j / P, e = N * (j + 1) / P;
        int64_t pieces = 0;
        for (int32_t i = 0; i < n; i++)
            pieces += first[i] < e && first[i + 1] > a;
        const int64_t tj = (e - a) * sp->key_align + pieces * sp->block_cost_keys;
        t = tj > t ? tj : t;
    }
    for (int32_t i = 0; i < n; i++) {
        int64_t parts = 0;
        for (int64_t j = 0; j < P; j++)
            parts += first[i] < N * (j + 1) / P && first[i + 1] > N * j / P;
        most = parts > 1 && parts > most ? parts : most;
    }
    *closed = t + sp->split_cost_keys * most;
    return 1;
}

/* Random engine-like steps on the H200's sm_90a parameters (2-64 requests, mostly of one
 * q_len, prefixes spread around 1k-128k): every step schedule holds the invariants; where it is
 * the shares', the dispatch model gives at most the closed form's time (its longest part: the
 * SMs no part's first blocks take only end parts sooner), which the test derives itself, and
 * the exact plan's cut at the same part count, by start (mlav_schedule_shares_at), writes the
 * same schedule. */
static void test_step_shares_random(void **state)
{
    (void)state;
    const uint64_t seed = tu_seeded("test_step_shares_random");
    uint64_t rng = seed;
    int took = 0, kept = 0;
    double lg = 0.0;
    static step_out o;
    for (int it = 0; it < 600; it++) {
        const int32_t B = 2 + (int32_t)(tu_next(&rng) % 63), H = 8 << (tu_next(&rng) % 5);
        const int32_t q0 = 1 + (int32_t)(tu_next(&rng) % 16), ragged = tu_next(&rng) % 6 == 0;
        const int32_t prefix = 1024 << (tu_next(&rng) % 8);
        const double spread = (double)(tu_next(&rng) % 90) / 100.0;
        int32_t q_indptr[65], kv_lens[64];
        q_indptr[0] = 0;
        for (int32_t b = 0; b < B; b++) {
            const int32_t q = tu_next(&rng) % 25 == 0 ? 0
                              : ragged                ? 1 + (int32_t)(tu_next(&rng) % 16)
                                                      : q0;
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = q + 1 + (int32_t)(prefix * (1.0 + spread * tu_uniform(&rng)));
        }
        mlav_problem prob = {.num_heads = H, .d_latent = 512, .d_rope = 64,
                             .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16, .page_size = 1,
                             .batch = B, .q_indptr = q_indptr, .kv_lens = kv_lens,
                             .max_pages = 1 << 24};
        mlav_problem_info info;
        assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
        mlav_schedule_params sp = sm90_params(), up = sm90_params();
        up.shares = 0;
        mlav_schedule s, u;
        step_build(&info, &sp, &o, &s);
        check_cover(&info, &sp, &s, seed);
        int64_t closed;
        if (step_took_shares(&info, &sp, &s, &closed)) {
            const int64_t t = mlav_schedule_tile_time(&s, &sp);
            if (t > closed)
                fail_msg("seed 0x%llx, step %d: shares modelled %lld, past their closed form %lld",
                         (unsigned long long)seed, it, (long long)t, (long long)closed);
            /* the exact plan's cut at the step's part count, later pieces by start: the same
             * schedule, byte for byte, from the other implementation */
            int32_t mt = 0;
            for (int32_t b = 0; b < B && !mt; b++)
                mt = q_indptr[b + 1] > q_indptr[b]
                         ? (int32_t)(((int64_t)(q_indptr[b + 1] - q_indptr[b]) * H + 63) / 64)
                         : 0;
            int64_t xt;
            mlav_schedule x;
            assert_int_equal(mlav_schedule_shares_at(&info, &sp, sp.target_blocks / mt, 0, &xt, &x),
                             MLAV_OK);
            if (x.n_items != s.n_items || x.n_combine != s.n_combine || x.n_slots != s.n_slots ||
                x.chunk_keys != s.chunk_keys ||
                memcmp(x.items, s.items, sizeof *x.items * (size_t)s.n_items) != 0 ||
                memcmp(x.combine, s.combine, sizeof *x.combine * (size_t)s.n_combine) != 0)
                fail_msg("seed 0x%llx, step %d: the step's shares differ from the exact plan's cut "
                         "at %d parts by start",
                         (unsigned long long)seed, it, sp.target_blocks / mt);
            assert_int_equal(xt, t);
            mlav_schedule_free(&x);
            static step_out uo;
            step_build(&info, &up, &uo, &u);
            lg += log((double)t / (double)mlav_schedule_tile_time(&u, &sp));
            took++;
        } else {
            kept++;
        }
        mlav_problem_info_free(&info);
    }
    printf("  shares taken in %d of 600 steps (modelled %.3f of the uniform schedule's time, "
           "geomean), the uniform schedule in %d\n",
           took, took ? exp(lg / took) : 1.0, kept);
    assert_true(took > 0 && kept > 0);
}

/* Three requests of 2, 2 and 10 tiles (128, 128, 640 keys), one row tile each, a device of 3
 * blocks: 3 parts of tiles [0, 4), [4, 9), [9, 14). Part 0 is requests 0 and 1 (the second
 * starts 2 tiles and a block into the part: 2 x 64 + 320), parts 1 and 2 request 2's tiles 0-4
 * and 5-9. The closed form: part 0 4 x 64 + 2 x 320 = 896 (the others 640), + 2 for request 2's
 * two splits: 898, against the uniform schedule's 960 (a block each: 320 + 640), 0.935 of it.
 * In the dispatch model (3 slots): part 0's first block ends at 448, parts 1 and 2 at 640,
 * request 1's block then on the first slot at 896. */
static void test_step_shares_by_hand(void **state)
{
    (void)state;
    int32_t q_indptr[4], kv_lens[3] = {128, 128, 640};
    mlav_problem_info info = token_batch(3, q_indptr, kv_lens);
    mlav_schedule_params sp = sm90_params();
    sp.target_blocks = 3;
    static step_out o;
    mlav_schedule s;
    step_build(&info, &sp, &o, &s);
    check_cover(&info, &sp, &s, 0);
    assert_int_equal(o.h.n_items, 4);
    assert_int_equal(o.h.n_combine, 1);
    assert_int_equal(o.h.n_slots, 2);
    assert_int_equal(o.h.chunk_keys, 5 * 64);
    const int32_t want[4][4] = {{0, 0, 128, -1}, {2, 0, 320, 0}, {2, 320, 640, 1},
                                {1, 0, 128, -1}}; /* b, kv_begin, kv_end, slot */
    expect_items(o.items, 4, want);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(o.items[i].mtile, 0);
        assert_int_equal(o.items[i].q_start, want[i][0]);
        assert_int_equal(o.items[i].q_len, 1);
        assert_int_equal(o.items[i].prefix, kv_lens[want[i][0]] - 1);
    }
    const mlav_combine_item c = o.combine[0];
    assert_true(c.b == 2 && c.mtile == 0 && c.nsplit == 2 && c.slot0 == 0 && c.slot_stride == 1 &&
                c.q_start == 2 && c.rows == 64);
    int64_t closed;
    assert_true(step_took_shares(&info, &sp, &s, &closed));
    assert_int_equal(closed, 898);
    assert_int_equal(mlav_schedule_tile_time(&s, &sp), 898);
    /* without shares weighed: the uniform schedule, a block a request */
    sp.shares = 0;
    step_build(&info, &sp, &o, &s);
    assert_int_equal(o.h.n_items, 3);
    for (int i = 0; i < 3; i++)
        assert_true(o.items[i].b == i && o.items[i].kv_begin == 0 &&
                    o.items[i].kv_end == kv_lens[i]);
    mlav_problem_info_free(&info);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_random_batches),
        cmocka_unit_test(test_shares_harness_points),
        cmocka_unit_test(test_shares_by_hand),
        cmocka_unit_test(test_shares_by_start),
        cmocka_unit_test(test_step_shares_random),
        cmocka_unit_test(test_step_shares_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
