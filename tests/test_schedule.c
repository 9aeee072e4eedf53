/* The split-KV scheduler (a pure host function) against its invariants, on random batches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../src/common/schedule.h"
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
