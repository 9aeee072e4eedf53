/* The split-KV scheduler (a pure host function) against its invariants, on random batches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../src/common/combine_shape.h"
#include "../src/common/schedule.h"
#include "../src/common/schedule_step.h"
#include "../src/dispatch/validate.h"
#include "test_util.h"

/* Check every invariant the flash kernel and the combine rely on. */
static void check_schedule(const mlav_problem_info *p, const mlav_schedule_params *sp,
                           const mlav_schedule *s, uint64_t seed)
{
    int32_t *seen_slot = calloc((size_t)s->n_slots + 1, sizeof(int32_t));
    assert_non_null(seen_slot);
    int32_t it = 0;
    for (int32_t b = 0; b < p->B; b++) {
        int64_t rows = (int64_t)mlav_info_q_len(p, b) * p->H;
        int32_t mt = (int32_t)((rows + sp->rows_per_tile - 1) / sp->rows_per_tile);
        if (rows == 0) {
            assert_int_equal(s->splits[b], 0);
            continue;
        }
        int32_t ns = s->splits[b];
        assert_true(ns >= 1 && ns <= sp->max_splits);
        /* items of request b: split-major, m-tile fastest, splits tile [0, kv_len) in order */
        int32_t expect_begin = 0;
        for (int32_t k = 0; k < ns; k++) {
            int32_t begin = -1, end = -1;
            for (int32_t m = 0; m < mt; m++, it++) {
                const mlav_split_item *x = &s->items[it];
                if (x->b != b || x->mtile != m) {
                    fprintf(stderr, "seed 0x%llx: item %d is (%d, %d), want (%d, %d)\n",
                            (unsigned long long)seed, it, x->b, x->mtile, b, m);
                    fail();
                }
                if (m == 0) {
                    begin = x->kv_begin;
                    end = x->kv_end;
                }
                assert_int_equal(x->kv_begin, begin);
                assert_int_equal(x->kv_end, end);
                if (ns == 1) {
                    assert_int_equal(x->slot, -1);
                } else {
                    assert_true(x->slot >= 0 && x->slot < s->n_slots);
                    seen_slot[x->slot]++;
                }
            }
            assert_int_equal(begin, expect_begin);
            assert_true(end > begin);
            assert_int_equal(begin % sp->key_align, 0);
            expect_begin = end;
        }
        assert_int_equal(expect_begin, p->kv_lens[b]);
    }
    assert_int_equal(it, s->n_items);
    for (int32_t k = 0; k < s->n_slots; k++)
        assert_int_equal(seen_slot[k], 1); /* every slot written exactly once */
    /* combine items name exactly the slots of their (b, mtile) */
    for (int32_t c = 0; c < s->n_combine; c++) {
        const mlav_combine_item *ci = &s->combine[c];
        assert_int_equal(ci->nsplit, s->splits[ci->b]);
        for (int32_t k = 0; k < ci->nsplit; k++) {
            int32_t slot = ci->slot0 + k * ci->slot_stride;
            int found = 0;
            for (int32_t i = 0; i < s->n_items; i++)
                if (s->items[i].slot == slot) {
                    assert_int_equal(s->items[i].b, ci->b);
                    assert_int_equal(s->items[i].mtile, ci->mtile);
                    found = 1;
                }
            assert_true(found);
        }
    }
    free(seen_slot);
    /* the build weighs candidate chunks by mlav_schedule_model_chunk, which walks the blocks
     * without building them: it must model exactly the schedule built at that chunk */
    const int64_t built = mlav_schedule_model_time(s, sp);
    const int64_t walked = mlav_schedule_model_chunk(p, sp, s->chunk_keys);
    if (built < 0 || walked != built)
        fail_msg("seed 0x%llx: chunk %d models %lld built, %lld walked", (unsigned long long)seed,
                 s->chunk_keys, (long long)built, (long long)walked);
}

/* The blocks fill whole waves: never more than the fewest waves the unsplit batch needs (a
 * wave only a few blocks over the device doubles the time), or, with a block cost, up to
 * more_waves more, and then only when the modelled time is shorter than the fewest waves'. */
static void check_whole_waves(const mlav_problem_info *p, const mlav_schedule_params *sp,
                              const mlav_schedule *s)
{
    int64_t tiles = 0;
    for (int32_t b = 0; b < p->B; b++) {
        int64_t rows = (int64_t)mlav_info_q_len(p, b) * p->H;
        tiles += (rows + sp->rows_per_tile - 1) / sp->rows_per_tile;
    }
    int64_t waves = (tiles + sp->target_blocks - 1) / sp->target_blocks;
    if (waves < 1)
        waves = 1;
    if (sp->block_cost_keys == 0) {
        assert_true(s->n_items <= waves * sp->target_blocks);
        return;
    }
    assert_true(s->n_items <= (waves + sp->more_waves) * sp->target_blocks);
    mlav_schedule_params fewest = *sp;
    fewest.block_cost_keys = 0;
    mlav_schedule f;
    assert_int_equal(mlav_schedule_build(p, &fewest, &f), MLAV_OK);
    const int64_t t = mlav_schedule_model_time(s, sp), tf = mlav_schedule_model_time(&f, sp);
    assert_true(t >= 0 && tf >= 0);
    assert_true(t <= tf);
    if (s->n_items > waves * sp->target_blocks)
        assert_true(t < tf); /* more waves only for a gain */
    mlav_schedule_free(&f);
}

static void test_schedule_random_batches(void **state)
{
    (void)state;
    uint64_t seed = tu_seed();
    printf("seed 0x%llx (MLAV_TEST_SEED to repeat)\n", (unsigned long long)seed);
    uint64_t rng = seed;
    for (int iter = 0; iter < 300; iter++) {
        int32_t B = 1 + (int32_t)(tu_next(&rng) % 8);
        int32_t q_indptr[9] = {0}, kv_lens[8];
        for (int32_t b = 0; b < B; b++) {
            int32_t q = (int32_t)(tu_next(&rng) % 40);
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = q + (int32_t)(tu_next(&rng) % (iter % 3 ? 5000 : 200000));
        }
        mlav_problem prob = {.num_heads = 1 + (int32_t)(tu_next(&rng) % 128), .d_latent = 512,
                             .d_rope = 64, .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16,
                             .page_size = 1, .batch = B, .q_indptr = q_indptr,
                             .kv_lens = kv_lens, .max_pages = 1 << 20};
        mlav_problem_info info;
        assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
        mlav_schedule_params sp = {.rows_per_tile = 32, .key_align = 16, .min_chunk = 128,
                                   .max_splits = 64,
                                   .target_blocks = 1 + (int32_t)(tu_next(&rng) % 2000),
                                   .block_cost_keys = iter % 2 ? (int32_t)(tu_next(&rng) % 600) : 0,
                                   .split_cost_keys = (int32_t)(tu_next(&rng) % 4),
                                   .more_waves = (int32_t)(tu_next(&rng) % 11)};
        mlav_schedule s;
        assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
        check_schedule(&info, &sp, &s, seed);
        check_whole_waves(&info, &sp, &s);
        mlav_schedule_free(&s);
        mlav_problem_info_free(&info);
    }
}

/* One long request must spread over the device: the reason split-KV exists. */
static void test_schedule_long_request_fills_device(void **state)
{
    (void)state;
    int32_t q_indptr[2] = {0, 9}, kv_lens[1] = {131072 + 9};
    mlav_problem prob = {.num_heads = 64, .d_latent = 512, .d_rope = 64, .softmax_scale = 0.1f,
                         .dtype = MLAV_DTYPE_BF16, .page_size = 1, .batch = 1,
                         .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = 131072 + 9};
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
    mlav_schedule_params sp = {.rows_per_tile = 32, .key_align = 16, .min_chunk = 128,
                               .max_splits = 64, .target_blocks = 2 * 132 * 2};
    mlav_schedule s;
    assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
    /* 18 row tiles x splits: most of one wave of 528 blocks, never a second */
    assert_true(s.n_items >= 264);
    assert_true(s.n_items <= 528);
    assert_true(s.splits[0] > 1);
    check_schedule(&info, &sp, &s, 0);
    mlav_schedule_free(&s);
    mlav_problem_info_free(&info);
}

/* The flash plan's parameters on a 132-SM device (64-row tiles, one block per SM): q_len 9 at
 * H = 64 is 9 row tiles; 14 splits fill 126 SMs, 15 would spill 3 blocks into a second wave. */
static void test_schedule_fits_one_wave(void **state)
{
    (void)state;
    const int32_t prefixes[] = {256, 1024, 4096, 16384, 65536, 131072};
    const int32_t qlens[] = {1, 9, 33};
    for (int qi = 0; qi < 3; qi++)
        for (int pi = 0; pi < 6; pi++) {
            int32_t q_indptr[2] = {0, qlens[qi]}, kv_lens[1] = {prefixes[pi] + qlens[qi]};
            mlav_problem prob = {.num_heads = 64, .d_latent = 512, .d_rope = 64,
                                 .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16,
                                 .page_size = 1, .batch = 1, .q_indptr = q_indptr,
                                 .kv_lens = kv_lens, .max_pages = kv_lens[0]};
            mlav_problem_info info;
            assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
            mlav_schedule_params sp = {.rows_per_tile = 64, .key_align = 32, .min_chunk = 32,
                                       .max_splits = 128, .target_blocks = 132};
            mlav_schedule s;
            assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
            check_schedule(&info, &sp, &s, 0);
            assert_true(s.n_items <= 132);
            /* and it uses most of the wave when the request is long enough to split (q_len 1 is
             * one row tile, held to 128 splits of whole 32-key tiles) */
            if (qlens[qi] > 1 && prefixes[pi] >= 16384 && s.n_items < 132 * 9 / 10)
                fail_msg("q_len %d prefix %d: %d blocks", qlens[qi], prefixes[pi], s.n_items);
            mlav_schedule_free(&s);
            mlav_problem_info_free(&info);
        }
}

/* The modelled time by hand: two requests, blocks dispatched in item order to the first free of
 * two slots, each costing block_cost_keys plus its KV rows. */
static void test_schedule_model_time_by_hand(void **state)
{
    (void)state;
    mlav_split_item items[4] = {
        {.kv_begin = 0, .kv_end = 100}, {.kv_begin = 100, .kv_end = 150},
        {.kv_begin = 0, .kv_end = 30}, {.kv_begin = 0, .kv_end = 80}};
    mlav_schedule s = {.n_items = 4, .items = items};
    mlav_schedule_params sp = {.target_blocks = 2, .block_cost_keys = 10};
    /* slot A: 0 -> 110 (100 rows); slot B: 0 -> 60 (50), 60 -> 100 (30), 100 -> 190 (80) */
    assert_int_equal(mlav_schedule_model_time(&s, &sp), 190);
    sp.target_blocks = 1;
    assert_int_equal(mlav_schedule_model_time(&s, &sp), 300);
    sp.target_blocks = 8; /* more slots than blocks */
    assert_int_equal(mlav_schedule_model_time(&s, &sp), 110);
    /* plus the combine: 3 keys per split of its most split item (2 splits) */
    mlav_combine_item comb[2] = {{.nsplit = 2}, {.nsplit = 1}};
    s.combine = comb;
    s.n_combine = 2;
    sp.split_cost_keys = 3;
    assert_int_equal(mlav_schedule_model_time(&s, &sp), 116);
}

/* The flash plan's choice of waves and splits on the H200 (132 SMs, one block per SM,
 * MLAV_FLASH_MAX_SPLITS = 256, MLAV_FLASH_BLOCK_COST_KEYS = 128, MLAV_FLASH_SPLIT_COST_KEYS = 1,
 * MLAV_FLASH_MORE_WAVES = 8), at the points where one wave was measured against two and three
 * and q_len 1 against more splits (session 10, docs/PERFORMANCE.md#schedule), and the batches of
 * 144 row tiles that more waves shorten (session 13): blocks per point, and so waves and splits. */
static void test_schedule_waves_h200(void **state)
{
    (void)state;
    static const struct {
        int32_t batch, heads, q_len, prefix, blocks;
    } want[] = {
        {1, 64, 9, 4096, 117},    {1, 64, 9, 16384, 126},  /* two waves measured 1.19, 1.06 */
        {1, 64, 9, 65536, 261},   {1, 64, 9, 131072, 261}, /* 0.99, 0.98; three 1.01, 0.99 */
        {1, 64, 33, 16384, 132},  {1, 64, 33, 131072, 132}, /* one wave is full */
        {1, 16, 9, 65536, 132},   {1, 64, 1, 131072, 129},  /* full; 129 whole 1024-key splits */
        {1, 64, 1, 65536, 129},   {1, 64, 1, 16384, 129},  /* 0.96, 0.99 of 121, 103 splits */
        {1, 64, 1, 4096, 65},     {1, 64, 1, 1024, 33},    /* 129 measured 1.07 */
        {1, 128, 9, 16384, 126},  {1, 128, 9, 65536, 396}, /* three waves 1.08, 0.99 */
        {8, 16, 9, 4096, 120},    {8, 16, 9, 32768, 264},  /* two waves 1.06, 0.94 */
        {16, 64, 9, 8192, 1008},  {16, 64, 9, 2048, 576},  /* 7 and 4 splits, not 3 and 3 */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int32_t q_indptr[17], kv_lens[16];
        for (int32_t b = 0; b <= want[i].batch; b++)
            q_indptr[b] = b * want[i].q_len;
        for (int32_t b = 0; b < want[i].batch; b++)
            kv_lens[b] = want[i].prefix + want[i].q_len;
        mlav_problem prob = {.num_heads = want[i].heads, .d_latent = 512, .d_rope = 64,
                             .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16, .page_size = 1,
                             .batch = want[i].batch, .q_indptr = q_indptr, .kv_lens = kv_lens,
                             .max_pages = kv_lens[0]};
        mlav_problem_info info;
        assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
        mlav_schedule_params sp = {.rows_per_tile = 64, .key_align = 32, .min_chunk = 32,
                                   .max_splits = 256, .target_blocks = 132,
                                   .block_cost_keys = 128, .split_cost_keys = 1,
                                   .more_waves = 8};
        mlav_schedule s;
        assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
        check_schedule(&info, &sp, &s, 0);
        check_whole_waves(&info, &sp, &s);
        if (s.n_items != want[i].blocks)
            fail_msg("B %d H %d q_len %d prefix %d: %d blocks, want %d", want[i].batch,
                     want[i].heads, want[i].q_len, want[i].prefix, s.n_items, want[i].blocks);
        mlav_schedule_free(&s);
        mlav_problem_info_free(&info);
    }
}

/* More waves weighed never lengthen the modelled time: the plan keeps the shortest of a
 * growing set of candidates, and its early stop (no schedule of n blocks ends before its work and
 * fixed costs spread over the slots) only drops candidates that cannot win. */
static void test_schedule_more_waves_never_longer(void **state)
{
    (void)state;
    uint64_t seed = tu_seed();
    printf("seed 0x%llx (MLAV_TEST_SEED to repeat)\n", (unsigned long long)seed);
    uint64_t rng = seed;
    for (int iter = 0; iter < 200; iter++) {
        int32_t B = 1 + (int32_t)(tu_next(&rng) % 32);
        int32_t q_indptr[33] = {0}, kv_lens[32];
        for (int32_t b = 0; b < B; b++) {
            int32_t q = 1 + (int32_t)(tu_next(&rng) % 12);
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = q + (int32_t)(tu_next(&rng) % 40000);
        }
        mlav_problem prob = {.num_heads = 8 << (tu_next(&rng) % 5), .d_latent = 512,
                             .d_rope = 64, .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16,
                             .page_size = 1, .batch = B, .q_indptr = q_indptr,
                             .kv_lens = kv_lens, .max_pages = 1 << 20};
        mlav_problem_info info;
        assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
        mlav_schedule_params sp = {.rows_per_tile = 64, .key_align = 32, .min_chunk = 32,
                                   .max_splits = 256,
                                   .target_blocks = 100 + (int32_t)(tu_next(&rng) % 100),
                                   .block_cost_keys = 128, .split_cost_keys = 1};
        int64_t prev = INT64_MAX;
        for (sp.more_waves = 0; sp.more_waves <= 10; sp.more_waves++) {
            mlav_schedule s;
            assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
            check_schedule(&info, &sp, &s, seed);
            check_whole_waves(&info, &sp, &s);
            const int64_t t = mlav_schedule_model_time(&s, &sp);
            if (t < 0 || t > prev)
                fail_msg("seed 0x%llx, batch %d: more_waves %d models %lld, %d modelled %lld",
                         (unsigned long long)seed, iter, sp.more_waves, (long long)t,
                         sp.more_waves - 1, (long long)prev);
            prev = t;
            mlav_schedule_free(&s);
        }
        mlav_problem_info_free(&info);
    }
}

/* A lone q_len 1 request at H = 64 is one row tile: its splits alone must fill an sm_120 of 188
 * SMs (MLAV_FLASH_MAX_SPLITS = 256; at 128, 60 SMs stayed idle). */
static void test_schedule_q1_fills_sm120(void **state)
{
    (void)state;
    int32_t q_indptr[2] = {0, 1}, kv_lens[1] = {131072 + 1};
    mlav_problem prob = {.num_heads = 64, .d_latent = 512, .d_rope = 64, .softmax_scale = 0.1f,
                         .dtype = MLAV_DTYPE_BF16, .page_size = 1, .batch = 1,
                         .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = kv_lens[0]};
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
    mlav_schedule_params sp = {.rows_per_tile = 64, .key_align = 32, .min_chunk = 32,
                               .max_splits = 256, .target_blocks = 188, .block_cost_keys = 128,
                               .split_cost_keys = 1, .more_waves = 8};
    mlav_schedule s;
    assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
    check_schedule(&info, &sp, &s, 0);
    assert_true(s.n_items > 180 && s.n_items <= 188);
    mlav_schedule_free(&s);
    mlav_problem_info_free(&info);
}

/* A short request is not split below min_chunk (loading Q would dominate). */
static void test_schedule_short_request_not_oversplit(void **state)
{
    (void)state;
    int32_t q_indptr[2] = {0, 1}, kv_lens[1] = {100};
    mlav_problem prob = {.num_heads = 8, .d_latent = 512, .d_rope = 64, .softmax_scale = 0.1f,
                         .dtype = MLAV_DTYPE_BF16, .page_size = 64, .batch = 1,
                         .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = 2};
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
    mlav_schedule_params sp = {.rows_per_tile = 32, .key_align = 16, .min_chunk = 128,
                               .max_splits = 64, .target_blocks = 10000};
    mlav_schedule s;
    assert_int_equal(mlav_schedule_build(&info, &sp, &s), MLAV_OK);
    assert_int_equal(s.splits[0], 1);
    assert_int_equal(s.n_items, 1);
    assert_int_equal(s.n_combine, 0);
    assert_int_equal(s.items[0].slot, -1);
    mlav_schedule_free(&s);
    mlav_problem_info_free(&info);
}

/* ---- the engine step's rule against its reference -------------------------------------------
 * mlav_step_schedule_build (src/common/schedule_step.c) finds the rule's chunks by probes that
 * narrow every search at once; the rule itself is the plain search below, kept here as it was
 * written before (5837fdc): a bisection per wave count (the host's), or with `exhaustive` the
 * definition both the bisection and the device scheduler's search must meet, the smallest
 * passing chunk over the whole range, found by trying each. The two paths must write the same
 * bytes (the device scheduler writes these too, and a GPU test compares it with the host). */

typedef struct {
    int32_t batch;
    const int64_t *tiles;
    const int32_t *kv_lens;
    const mlav_schedule_params *sp;
} ref_ctx;

/* The rule's evaluation at a chunk by its definition: mlav_schedule_splits per request. */
static mlav_step_eval ref_eval_at(const ref_ctx *c, int64_t chunk)
{
    mlav_step_eval e = {0, 0, 0};
    for (int32_t b = 0; b < c->batch; b++) {
        if (c->tiles[b] == 0)
            continue;
        int64_t per;
        const int64_t s = mlav_schedule_splits(c->kv_lens[b], chunk, c->sp->key_align,
                                               c->sp->max_splits, &per);
        const int64_t len = s > 1 ? per : c->kv_lens[b];
        e.blocks += c->tiles[b] * s;
        e.longest = len > e.longest ? len : e.longest;
        if (s > 1 && s > e.most)
            e.most = (int32_t)s;
    }
    return e;
}

/* The smallest k in [lo, hi) with blocks(k ka) <= cap, else hi. */
static int64_t ref_smallest(const ref_ctx *c, int64_t lo, int64_t hi, int64_t cap, int exhaustive)
{
    const int64_t ka = c->sp->key_align;
    if (exhaustive) {
        for (int64_t k = lo; k < hi; k++)
            if (ref_eval_at(c, k * ka).blocks <= cap)
                return k;
        return hi;
    }
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (ref_eval_at(c, mid * ka).blocks <= cap)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int64_t ref_chunk_for_cap(const ref_ctx *c, int64_t max_kv, int64_t cap, int64_t *top,
                                 int exhaustive)
{
    const int64_t ka = c->sp->key_align;
    int64_t lo = mlav_step_ceil_div(c->sp->min_chunk, ka), hi = mlav_step_ceil_div(max_kv, ka);
    if (hi < lo)
        hi = lo;
    if (!exhaustive && *top >= lo && *top < hi)
        hi = *top; /* the host's narrowing: a larger cap's answer is never above */
    *top = ref_smallest(c, lo, hi, cap, exhaustive);
    int64_t chunk = *top * ka;
    if (chunk > INT32_MAX)
        chunk = (INT32_MAX / ka) * ka;
    return chunk;
}

static void ref_step_schedule_build(int32_t batch, const int32_t *q_indptr,
                                    const int32_t *kv_lens, int32_t H, const mlav_limits *lim,
                                    const mlav_schedule_params *sp, const mlav_step_bounds *bd,
                                    mlav_step_header *hdr, mlav_split_item *items,
                                    mlav_combine_item *combine, int exhaustive)
{
    memset(hdr, 0, sizeof *hdr);
    hdr->bad = INT32_MAX;
    hdr->batch = batch;
    int global_ok = batch == 0 || (q_indptr[0] == 0 && q_indptr[batch] <= lim->max_tokens);
    for (int32_t b = 0; b < batch && global_ok; b++)
        global_ok = q_indptr[b + 1] >= q_indptr[b];
    if (!global_ok)
        hdr->bad = batch;
    static int64_t tiles[MLAV_STEP_MAX_BATCH];
    int64_t max_kv = 1, work = 0, all_tiles = 0;
    for (int32_t b = 0; b < batch; b++) {
        tiles[b] = 0;
        if (!global_ok)
            continue;
        const int64_t q = (int64_t)q_indptr[b + 1] - q_indptr[b];
        if (!mlav_step_request_ok(q, kv_lens[b], lim->max_q_len, lim->max_kv_len)) {
            if (b < hdr->bad)
                hdr->bad = b;
            continue;
        }
        tiles[b] = mlav_step_tiles(q, H, sp->rows_per_tile);
        if (tiles[b] > 0 && kv_lens[b] > max_kv)
            max_kv = kv_lens[b];
        work += tiles[b] * kv_lens[b];
        all_tiles += tiles[b];
    }
    const ref_ctx c = {batch, tiles, kv_lens, sp};
    int64_t best_chunk = 0;
    if (all_tiles > 0) {
        const int64_t S = sp->target_blocks;
        const int64_t cap0 = mlav_step_ceil_div(all_tiles, S) * S;
        int64_t top = -1;
        const int64_t chunk0 = ref_chunk_for_cap(&c, max_kv, cap0, &top, exhaustive);
        int64_t cands[2 + 1 + 64], n = 0, last = chunk0;
        cands[n++] = chunk0;
        for (int k = 1; k <= 2; k++)
            if ((chunk0 << k) <= INT32_MAX)
                cands[n++] = chunk0 << k;
        for (int32_t k = 1; k <= sp->more_waves && k <= 64; k++) {
            const int64_t ch = ref_chunk_for_cap(&c, max_kv, cap0 + k * S, &top, exhaustive);
            if (ch >= last)
                continue;
            last = ch;
            cands[n++] = ch;
        }
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            const mlav_step_eval e = ref_eval_at(&c, cands[i]);
            const int64_t t = mlav_step_model(&e, work, sp->target_blocks, sp->block_cost_keys,
                                              sp->split_cost_keys);
            if (best < 0 || t < best) {
                best = t;
                best_chunk = cands[i];
            }
        }
    }
    int32_t it = 0, ci = 0, slot = 0;
    for (int32_t b = 0; b < batch && best_chunk > 0; b++) {
        if (tiles[b] == 0)
            continue;
        int64_t per;
        const int32_t s = (int32_t)mlav_schedule_splits(kv_lens[b], best_chunk, sp->key_align,
                                                        sp->max_splits, &per);
        const int32_t mt = (int32_t)tiles[b];
        const int32_t q = q_indptr[b + 1] - q_indptr[b];
        for (int32_t k = 0; k < s; k++) {
            const int64_t begin = k * per;
            const int64_t end = begin + per < kv_lens[b] ? begin + per : kv_lens[b];
            for (int32_t m = 0; m < mt; m++)
                items[it++] = (mlav_split_item){
                    .b = b, .mtile = m, .kv_begin = (int32_t)begin, .kv_end = (int32_t)end,
                    .slot = s > 1 ? slot + k * mt + m : -1, .q_start = q_indptr[b],
                    .q_len = q, .prefix = kv_lens[b] - q};
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
    /* the combine as the exact plan's backend chooses it for these combine items: the kind of
     * their most splits, column blocks for all their rows at that kind's residency */
    int32_t most = 0;
    for (int32_t i = 0; i < ci; i++)
        most = combine[i].nsplit > most ? combine[i].nsplit : most;
    hdr->combine_kind = ci > 0 ? mlav_combine_kind(most) : 0;
    hdr->combine_col_blocks =
        ci > 0 ? mlav_combine_col_blocks_for((int64_t)ci * sp->rows_per_tile, most,
                                             bd->combine_wave[hdr->combine_kind],
                                             MLAV_COMBINE_PRELOAD, MLAV_COMBINE_MAX_COL_BLOCKS)
               : 1;
    for (int32_t i = it; i < bd->max_items; i++)
        items[i] = (mlav_split_item){.b = -1};
    for (int32_t i = ci; i < bd->max_combine; i++)
        combine[i] = (mlav_combine_item){.b = -1};
}

/* One engine-like step: lengths, limits and the flash plan's parameters drawn from `rng`. */
typedef struct {
    int32_t batch, H;
    int32_t q_indptr[MLAV_STEP_MAX_BATCH + 1], kv_lens[MLAV_STEP_MAX_BATCH];
    mlav_limits lim;
    mlav_schedule_params sp;
} step_case;

static uint64_t pick(uint64_t *rng, uint64_t n)
{
    return tu_next(rng) % n;
}

static void draw_step(uint64_t *rng, step_case *c)
{
    static const int32_t sms[] = {132, 170, 188}, heads[] = {8, 16, 32, 64, 128};
    const uint64_t r = pick(rng, 10);
    c->batch = r < 4   ? 1 + (int32_t)pick(rng, 16)
               : r < 7 ? 17 + (int32_t)pick(rng, 48)
               : r < 9 ? 65 + (int32_t)pick(rng, 448)
                       : 513 + (int32_t)pick(rng, MLAV_STEP_MAX_BATCH - 512);
    c->H = pick(rng, 4) ? heads[pick(rng, 5)] : 8 + (int32_t)pick(rng, 121);
    const int32_t max_q = 1 + (int32_t)(pick(rng, 3) ? pick(rng, 16) : pick(rng, 64));
    /* prefixes: short, long (131072+), or spread over a decade; some batches all alike (ties) */
    static const int32_t spans[] = {4096, 32768, 140000, 1 << 20};
    const int32_t span = spans[pick(rng, 4)], same = pick(rng, 6) == 0;
    const int32_t common = (int32_t)pick(rng, (uint64_t)span);
    int32_t t = 0, most_q = 1, most_kv = 1;
    c->q_indptr[0] = 0;
    for (int32_t b = 0; b < c->batch; b++) {
        int32_t q = 1 + (int32_t)pick(rng, (uint64_t)max_q);
        if (pick(rng, 10) == 0)
            q = 0; /* padding */
        if (same)
            q = max_q;
        const int32_t prefix = same ? common : (int32_t)pick(rng, (uint64_t)span);
        c->kv_lens[b] = prefix + q;
        c->q_indptr[b + 1] = (t += q);
        most_q = q > most_q ? q : most_q;
        most_kv = c->kv_lens[b] > most_kv ? c->kv_lens[b] : most_kv;
    }
    /* limits at or past the lengths; now and then too tight, so requests are refused */
    c->lim = (mlav_limits){.max_batch = c->batch + (int32_t)pick(rng, (uint64_t)c->batch + 1),
                           .max_tokens = (t > 0 ? t : 1) + (int32_t)pick(rng, 64),
                           .max_q_len = most_q + (int32_t)pick(rng, 4),
                           .max_kv_len = most_kv + (int32_t)pick(rng, 1000)};
    if (c->lim.max_batch > MLAV_STEP_MAX_BATCH)
        c->lim.max_batch = MLAV_STEP_MAX_BATCH;
    if (pick(rng, 12) == 0)
        c->lim.max_kv_len = most_kv / 2 > most_q ? most_kv / 2 : most_q;
    if (pick(rng, 12) == 0 && most_q > 1)
        c->lim.max_q_len = most_q - 1;
    if (pick(rng, 40) == 0)
        c->lim.max_tokens = t > 1 ? t - 1 : 1; /* q_indptr refused: nothing runs */
    /* the flash plan's parameters (src/cuda/flash.h) on 132-, 170- and 188-SM devices, and
     * others now and then: another tile, alignment, smallest chunk, split cap, costs */
    mlav_schedule_params base = {.rows_per_tile = 64, .key_align = 32, .min_chunk = 32,
                                 .max_splits = 256, .target_blocks = sms[pick(rng, 3)],
                                 .block_cost_keys = 128, .split_cost_keys = 1};
    if (pick(rng, 3) == 0) {
        static const int32_t rows[] = {32, 64, 128}, aligns[] = {16, 32, 48, 64},
                             splits[] = {1, 2, 8, 64, 255, 256, 257, 512};
        base.rows_per_tile = rows[pick(rng, 3)];
        base.key_align = aligns[pick(rng, 4)];
        base.min_chunk = pick(rng, 2) ? base.key_align : 1 + (int32_t)pick(rng, 4096);
        base.max_splits = splits[pick(rng, 8)];
        base.target_blocks *= 1 + (int32_t)pick(rng, 2);
        base.block_cost_keys = pick(rng, 4) ? 128 : (int32_t)pick(rng, 1000);
        base.split_cost_keys = (int32_t)pick(rng, 4);
    }
    c->sp = mlav_step_params(c->H, &c->lim, base);
    if (pick(rng, 8) == 0)
        c->sp.more_waves = (int32_t)pick(rng, 9);
}

/* Build c's step both ways into guarded buffers and compare every byte. */
static void check_step_case(const step_case *c, int exhaustive, uint64_t seed, int n,
                            mlav_split_item *items[2], mlav_combine_item *combine[2])
{
    mlav_step_bounds bd = mlav_step_bounds_of(c->H, &c->lim, &c->sp);
    /* the combine kinds' residency: unknown, an H200's uncapped (8, 8, 7 blocks per SM), or
     * capped by a reservation at 2 */
    static const int32_t per_sm[3][3] = {{0, 0, 0}, {8, 8, 7}, {2, 2, 2}};
    for (int k = 0; k < 3; k++)
        bd.combine_wave[k] = per_sm[(n % 3 + 3) % 3][k] * c->sp.target_blocks;
    const size_t ni = (size_t)bd.max_items + 1, nc = (size_t)bd.max_combine + 1;
    mlav_step_header h[2];
    for (int w = 0; w < 2; w++) { /* different garbage, a canary past the end */
        memset(h + w, 0x5a + w, sizeof h[w]);
        memset(items[w], 0xa5 + w, ni * sizeof(mlav_split_item));
        memset(combine[w], 0xa5 + w, nc * sizeof(mlav_combine_item));
    }
    /* the rule's scratch holds garbage: a build must not read what an earlier one left */
    mlav_step_scratch *scratch = malloc(mlav_step_scratch_bytes());
    assert_non_null(scratch);
    memset(scratch, 0x5a ^ (n & 0xff), mlav_step_scratch_bytes());
    mlav_step_schedule_build(c->batch, c->q_indptr, c->kv_lens, (mlav_shard){1, 0, 1}, c->H,
                             &c->lim, &c->sp, &bd, &h[0], items[0], combine[0], scratch);
    free(scratch);
    ref_step_schedule_build(c->batch, c->q_indptr, c->kv_lens, c->H, &c->lim, &c->sp, &bd, &h[1],
                            items[1], combine[1], exhaustive);
    const size_t bi = (ni - 1) * sizeof(mlav_split_item), bc = (nc - 1) * sizeof(mlav_combine_item);
    if (memcmp(&h[0], &h[1], sizeof h[0]) != 0 || memcmp(items[0], items[1], bi) != 0 ||
        memcmp(combine[0], combine[1], bc) != 0)
        fail_msg("seed 0x%llx case %d (B=%d, H=%d, max_q=%d, max_kv=%d, rows=%d, ka=%d, "
                 "min_chunk=%d, max_splits=%d, S=%d, costs %d/%d, mw=%d%s): chunk %d vs %d, "
                 "%d vs %d items, %d vs %d combine, bad %d vs %d, combine kind %d vs %d, "
                 "column blocks %d vs %d",
                 (unsigned long long)seed, n, c->batch, c->H, c->lim.max_q_len,
                 c->lim.max_kv_len, c->sp.rows_per_tile, c->sp.key_align, c->sp.min_chunk,
                 c->sp.max_splits, c->sp.target_blocks, c->sp.block_cost_keys,
                 c->sp.split_cost_keys, c->sp.more_waves, exhaustive ? ", exhaustive" : "",
                 h[0].chunk_keys, h[1].chunk_keys, h[0].n_items, h[1].n_items, h[0].n_combine,
                 h[1].n_combine, h[0].bad, h[1].bad, h[0].combine_kind, h[1].combine_kind,
                 h[0].combine_col_blocks, h[1].combine_col_blocks);
    /* the canaries past the bounds are untouched */
    const unsigned char *ci = (const unsigned char *)(items[0] + ni - 1),
                        *cc = (const unsigned char *)(combine[0] + nc - 1);
    for (size_t k = 0; k < sizeof(mlav_split_item); k++)
        if (ci[k] != 0xa5 || cc[k] != 0xa5)
            fail_msg("seed 0x%llx case %d: written past the bounds", (unsigned long long)seed, n);
}

/* The step rule's probes against the plain searches, on random engine-like steps (B 1-2048,
 * q_len 0-64, prefixes to 2^20, H 8-128, limits at or past the lengths and sometimes refusing,
 * 132, 170 and 188 SMs, the flash plan's parameters and others); where the whole range is cheap
 * to try, also against the exhaustive search. Then edge cases: a KV length near 2^31 with a
 * key_align that does not divide it (the chunk clamp), min_chunk past every length, no rows. */
static void test_schedule_step_rule_matches_reference(void **state)
{
    (void)state;
    uint64_t seed = tu_seed();
    printf("seed 0x%llx (MLAV_TEST_SEED to repeat)\n", (unsigned long long)seed);
    uint64_t rng = seed;
    enum { CAP = 1 << 20 };
    mlav_split_item *items[2];
    mlav_combine_item *combine[2];
    step_case *c = malloc(sizeof *c);
    assert_non_null(c);
    for (int w = 0; w < 2; w++) {
        items[w] = malloc(CAP * sizeof(mlav_split_item));
        combine[w] = malloc(CAP * sizeof(mlav_combine_item));
        assert_true(items[w] && combine[w]);
    }
    int cases = 0, exhaustive = 0;
    for (int n = 0; n < 2500; n++) {
        draw_step(&rng, c);
        const mlav_step_bounds bd = mlav_step_bounds_of(c->H, &c->lim, &c->sp);
        if (bd.max_items >= CAP || bd.max_combine >= CAP)
            continue;
        /* the exhaustive search tries every chunk below each answer: where that is cheap */
        int64_t most_kv = 1;
        for (int32_t b = 0; b < c->batch; b++)
            most_kv = c->kv_lens[b] > most_kv ? c->kv_lens[b] : most_kv;
        const int ex = (most_kv / c->sp.key_align + 1) * c->batch * (c->sp.more_waves + 1) <
                       4000000;
        check_step_case(c, 0, seed, n, items, combine);
        if (ex)
            check_step_case(c, 1, seed, n, items, combine);
        cases++;
        exhaustive += ex;
    }
    /* edge cases, each against both searches */
    static const struct {
        int32_t batch, q, kv, ka, min_chunk, max_splits;
    } edge[] = {
        {1, 1, INT32_MAX, 48, 48, 256},   {3, 9, INT32_MAX - 7, 48, 48, 256},
        {1, 64, INT32_MAX, 32, 32, 1},    {4, 2, 1000, 32, 1 << 20, 256},
        {8, 1, 33, 32, 32, 256},          {16, 1, 1, 32, 32, 256},
        {2, 16, 131072 + 16, 32, 32, 257}, {1, 1, 65, 64, 1, 512},
    };
    for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++) {
        c->batch = edge[e].batch;
        c->H = 16;
        c->q_indptr[0] = 0;
        for (int32_t b = 0; b < c->batch; b++) {
            c->q_indptr[b + 1] = c->q_indptr[b] + edge[e].q;
            c->kv_lens[b] = edge[e].kv - b; /* near-ties */
        }
        c->lim = (mlav_limits){c->batch, c->q_indptr[c->batch], edge[e].q, edge[e].kv};
        c->sp = (mlav_schedule_params){.rows_per_tile = 64, .key_align = edge[e].ka,
                                       .min_chunk = edge[e].min_chunk,
                                       .max_splits = edge[e].max_splits, .target_blocks = 132,
                                       .block_cost_keys = 128, .split_cost_keys = 1,
                                       .more_waves = 4};
        check_step_case(c, 0, seed, -1 - (int)e, items, combine);
        if ((int64_t)edge[e].kv / edge[e].ka * c->batch < 4000000)
            check_step_case(c, 1, seed, -1 - (int)e, items, combine);
    }
    /* one to three requests of one row tile on wide devices: splits around the cap (the
     * inverses' table ends at 256 splits) and short requests split to the smallest chunks */
    static const int32_t wide[] = {132, 264, 376, 512}, caps[] = {128, 255, 256, 257, 512};
    for (int w = 0; w < 4; w++)
        for (int m = 0; m < 5; m++)
            for (int32_t kv = 700; kv < 300000; kv = kv * 3 / 2 + 17) {
                c->batch = 1 + (kv % 3);
                c->H = 16;
                c->q_indptr[0] = 0;
                for (int32_t b = 0; b < c->batch; b++) {
                    c->q_indptr[b + 1] = b + 1;
                    c->kv_lens[b] = kv + b * (kv % 5);
                }
                c->lim = (mlav_limits){c->batch, c->batch, 1, kv + 2 * 4};
                c->sp = (mlav_schedule_params){.rows_per_tile = 64, .key_align = 16 << (kv % 3),
                                               .min_chunk = 1, .max_splits = caps[m],
                                               .target_blocks = wide[w],
                                               .block_cost_keys = 128, .split_cost_keys = 1,
                                               .more_waves = 4};
                check_step_case(c, 0, seed, -200 - kv, items, combine);
                check_step_case(c, 1, seed, -200 - kv, items, combine);
            }
    /* no request with rows, and an empty step */
    c->batch = 5;
    for (int32_t b = 0; b <= c->batch; b++)
        c->q_indptr[b] = 0;
    check_step_case(c, 0, seed, -100, items, combine);
    c->batch = 0;
    check_step_case(c, 0, seed, -101, items, combine);
    printf("%d steps matched the bisection, %d of them also the exhaustive search\n", cases,
           exhaustive);
    for (int w = 0; w < 2; w++) {
        free(items[w]);
        free(combine[w]);
    }
    free(c);
}

/* mlav_step_item_of_block: over every step size of a grid, each item below the step's count
 * has exactly one block and no block gets another; a step smaller than `spread` has its items on
 * the even blocks in order (one per TPC, flash/features.cuh); headers no update wrote run nothing.
 * Grids and spreads as the backend pairs them (spread = SMs / 2 + 1 on grids of SMs blocks or
 * more: the H200's 132 SMs, sm_120's 188 and 170, odd counts), and spread 0. */
static void test_step_item_of_block_covers_each_item_once(void **state)
{
    (void)state;
    static const uint32_t sms[] = {132, 188, 170, 7, 2, 1};
    static int hits[4096];
    for (size_t k = 0; k < sizeof sms / sizeof sms[0]; k++)
        for (int with = 0; with < 2; with++) {
            const uint32_t spread = with ? sms[k] / 2 + 1 : 0;
            for (uint32_t grid = sms[k]; grid <= 3 * sms[k] + 1; grid += sms[k] + 1)
                for (int32_t n = -1; n <= (int32_t)grid; n++) {
                    memset(hits, 0, sizeof hits);
                    for (uint32_t t = 0; t < grid; t++) {
                        const int32_t i = mlav_step_item_of_block(t, n, spread);
                        assert_true(i >= -1 && i < (n > 0 ? n : 0));
                        if (i < 0)
                            continue;
                        hits[i]++;
                        if ((uint32_t)n < spread && t != 2 * (uint32_t)i)
                            fail_msg("SMs %u grid %u n %d: item %d on block %u", sms[k], grid,
                                     n, i, t);
                    }
                    for (int32_t i = 0; i < n; i++)
                        if (hits[i] != 1)
                            fail_msg("SMs %u spread %u grid %u n %d: item %d has %d blocks",
                                     sms[k], spread, grid, n, i, hits[i]);
                }
        }
    /* 0xff bytes: -1 items at any spread, any block */
    assert_int_equal(mlav_step_item_of_block(0, -1, 67), -1);
    assert_int_equal(mlav_step_item_of_block(UINT32_MAX, -1, 67), -1);
    assert_int_equal(mlav_step_item_of_block(5, 0, 67), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_random_batches),
        cmocka_unit_test(test_schedule_long_request_fills_device),
        cmocka_unit_test(test_schedule_fits_one_wave),
        cmocka_unit_test(test_schedule_short_request_not_oversplit),
        cmocka_unit_test(test_schedule_model_time_by_hand),
        cmocka_unit_test(test_schedule_waves_h200),
        cmocka_unit_test(test_schedule_more_waves_never_longer),
        cmocka_unit_test(test_schedule_q1_fills_sm120),
        cmocka_unit_test(test_schedule_step_rule_matches_reference),
        cmocka_unit_test(test_step_item_of_block_covers_each_item_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
