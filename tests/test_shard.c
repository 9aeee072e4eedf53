/* Context-parallel (sharded) verify on the CPU backends: R ranks simulated in one process, each
 * holding every I-th stripe of every request's KV rows in its own pages (NaN-poisoned around
 * them), verified on its own, the partial states merged with mlav_merge_states_stacked (F32) and
 * compared with the fp64 oracle of the whole cache; R in {2, 3, 4}, stripes 1, page_size and a
 * contiguous chunk, page sizes 1, 16, 64, random ragged batches, trees and causal chains, prefix
 * 0, ranks that hold no row of a request; plans for one problem and plans for limits with host
 * lengths. Then the split schedules of a shard (the exact plan's and the step rule's: the rank's
 * rows, the global prefix), the shard fields' validation sentences and the capacity rule. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/schedule.h"
#include "../src/common/schedule_step.h"
#include "../src/common/shard.h"
#include "../src/dispatch/validate.h"
#include "mlaverify.h"
#include "shard_fixture.h"
#include "test_util.h"

static const sh_kind KINDS[] = {{MLAV_DTYPE_F32, 0},
                                {MLAV_DTYPE_BF16, 0},
                                {MLAV_DTYPE_F16, 0},
                                {MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3}};

/* The grid (sh_run_grid) on `backend` at small dims, H 2, prefixes up to 160; on the cpu
 * backend the second case of each cell through a plan for limits. */
static void shard_grid(mlav_backend backend)
{
    const sh_grid g = {KINDS, (int)(sizeof KINDS / sizeof KINDS[0]), {2, 2}, 32, 8, 160,
                       backend == MLAV_BACKEND_CPU ? 1 : -1};
    /* the grid reached a rank holding nothing of a request */
    assert_true(sh_run_grid(backend, &g) > 0);
}

static void test_shard_cpu(void **state)
{
    (void)state;
    shard_grid(MLAV_BACKEND_CPU);
}

static void test_shard_reference(void **state)
{
    (void)state;
    shard_grid(MLAV_BACKEND_REFERENCE);
}

/* shard_ranks 1 (any stripe) is the unsharded verify, bit for bit. */
static void test_shard_one_rank(void **state)
{
    (void)state;
    uint64_t rng = tu_seeded("one rank");
    mlav_context *ctx = tu_context_or_skip(MLAV_BACKEND_CPU);
    const tu_case c = sh_draw_case(&rng, 2, 32, 8, 16, MLAV_DTYPE_BF16, 0, 100);
    tu_problem *p = tu_make(&c);
    const size_t bytes = p->out_elems * 2;
    mlav_tensors t = tu_tensors(p);
    assert_int_equal(mlav_verify(ctx, &p->prob, &t), MLAV_OK);
    unsigned char *want = tu_xcalloc(bytes + 1, 1);
    memcpy(want, p->out, bytes);
    mlav_problem one = p->prob;
    one.shard_ranks = 1;
    one.shard_stripe = 7;
    tu_poison(p);
    assert_int_equal(mlav_verify(ctx, &one, &t), MLAV_OK);
    assert_memory_equal(want, p->out, bytes);
    free(want);
    tu_free(p);
    mlav_context_free(ctx);
}

/* src/common/shard.h against the layout spelled out: the rank's row count of every prefix
 * [0, n), and each held row's global row, in 64-bit and the kernels' 32-bit form, up to rows
 * near 2^31 and stripes whose span passes 2^32. */
static void test_shard_mapping(void **state)
{
    (void)state;
    uint64_t rng = tu_seeded("mapping");
    for (int round = 0; round < 300; round++) {
        const int32_t ranks = 2 + (int32_t)(tu_next(&rng) % 7);
        const int32_t rank = (int32_t)(tu_next(&rng) % (uint64_t)ranks);
        const int32_t stripe = round % 3 == 0 ? 1 + (int32_t)(tu_next(&rng) % 100)
                                              : 1 + (int32_t)(tu_next(&rng) % INT32_MAX);
        const mlav_shard s = {ranks, rank, stripe};
        /* a window of global rows [g0, g0 + 300) below 2^31, its rows counted from the layout */
        const int64_t g0 = (int64_t)(tu_next(&rng) % ((uint64_t)INT32_MAX - 300));
        int64_t before = mlav_shard_rows(s, g0), held = before;
        for (int64_t g = g0; g < g0 + 300; g++) {
            if ((g / stripe) % ranks != rank) {
                assert_int_equal(mlav_shard_rows(s, g + 1), held);
                continue;
            }
            const int64_t l = g / ((int64_t)stripe * ranks) * stripe + g % stripe;
            assert_int_equal(l, held); /* the rank's rows below g: its local row */
            assert_int_equal(mlav_shard_global(s, l), g);
            assert_int_equal(mlav_shard_global32(s, (uint32_t)l), (uint32_t)g);
            assert_int_equal(mlav_shard_rows(s, g + 1), ++held);
        }
        if (g0 < 10000) /* from 0: the count itself */
            assert_int_equal(before, sh_rows_of(g0, ranks, rank, stripe));
    }
    const mlav_shard none = {1, 0, 7}, zero = {0, 0, 0};
    assert_int_equal(mlav_shard_rows(none, 12345), 12345);
    assert_int_equal(mlav_shard_global(zero, 99), 99);
    assert_int_equal(mlav_shard_global32(none, 4000000000u), 4000000000u);
}

/* Each request's items (per row tile) tile exactly the rank's rows [0, n_r(kv_len)) in order
 * (one empty item where the rank holds none) and carry the global prefix. */
static void check_items(const mlav_split_item *items, int32_t n_items, int32_t batch,
                        const int32_t *qi, const int32_t *kv, int32_t H, int32_t ranks,
                        int32_t rank, int32_t stripe)
{
    int32_t it = 0;
    for (int32_t b = 0; b < batch; b++) {
        const int32_t q = qi[b + 1] - qi[b];
        if (q == 0)
            continue;
        const int64_t held = sh_rows_of(kv[b], ranks, rank, stripe);
        const int32_t mt = (q * H + 63) / 64;
        int64_t end = 0;
        do {
            for (int32_t m = 0; m < mt; m++, it++) {
                assert_true(it < n_items);
                const mlav_split_item *x = &items[it];
                assert_int_equal(x->b, b);
                assert_int_equal(x->mtile, m);
                assert_int_equal(x->kv_begin, end);
                assert_true(x->kv_end <= held && (x->kv_end > x->kv_begin || held == 0));
                assert_int_equal(x->prefix, kv[b] - q);
            }
            end = items[it - 1].kv_end;
        } while (end < held);
    }
    assert_int_equal(it, n_items);
}

/* The exact schedule (mlav_schedule_build on a validated sharded problem) and the step rule
 * (mlav_step_schedule_build, the CUDA plan's host update; the device scheduler is its twin, held
 * to the same bytes by tests/test_steps_gpu.c and exercised sharded by test_shard_gpu) split the
 * rank's rows. */
static void test_shard_schedules(void **state)
{
    (void)state;
    uint64_t rng = tu_seeded("schedules");
    const mlav_schedule_params sp = {64, 32, 32, 256, 132, 128, 1, 2, 0};
    const mlav_limits lim = {.max_batch = 8, .max_tokens = 64, .max_q_len = 8,
                             .max_kv_len = 5000};
    const mlav_step_bounds bd = mlav_step_bounds_of(16, &lim, &sp);
    mlav_split_item *items = tu_xcalloc((size_t)bd.max_items, sizeof *items);
    mlav_combine_item *comb = tu_xcalloc((size_t)bd.max_combine + 1, sizeof *comb);
    mlav_step_scratch *scratch = tu_xcalloc(1, mlav_step_scratch_bytes());
    for (int round = 0; round < 200; round++) {
        const int32_t ranks = 2 + (int32_t)(tu_next(&rng) % 3);
        const int32_t rank = (int32_t)(tu_next(&rng) % (uint64_t)ranks);
        const int32_t stripes[] = {1, 16, 64, 2500};
        const int32_t stripe = stripes[tu_next(&rng) % 4];
        int32_t batch = 1 + (int32_t)(tu_next(&rng) % 8), qi[9] = {0}, kv[8];
        for (int32_t b = 0; b < batch; b++) {
            const int32_t q = (int32_t)(tu_next(&rng) % 9);
            kv[b] = q + (int32_t)(tu_next(&rng) % (tu_next(&rng) % 2 ? 4992 : 40));
            qi[b + 1] = qi[b] + q;
        }
        const mlav_shard sh = {ranks, rank, stripe};
        mlav_step_header h;
        mlav_step_schedule_build(batch, qi, kv, sh, 16, &lim, &sp, &bd, &h, items, comb,
                                 scratch);
        assert_int_equal(h.bad, INT32_MAX);
        check_items(items, h.n_items, batch, qi, kv, 16, ranks, rank, stripe);

        if (qi[batch] == 0)
            continue;
        const mlav_problem prob = {.num_heads = 16, .d_latent = 512, .d_rope = 64,
                                   .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16,
                                   .page_size = 1, .batch = batch, .q_indptr = qi,
                                   .kv_lens = kv, .max_pages = 5000, .shard_ranks = ranks,
                                   .shard_rank = rank, .shard_stripe = stripe};
        mlav_problem_info info;
        assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
        mlav_schedule sc;
        assert_int_equal(mlav_schedule_build(&info, &sp, &sc), MLAV_OK);
        check_items(sc.items, sc.n_items, batch, qi, kv, 16, ranks, rank, stripe);
        mlav_schedule_free(&sc);
        mlav_problem_info_free(&info);
    }
    free(items);
    free(comb);
    free(scratch);
}

static void expect_invalid(mlav_context *ctx, const mlav_problem *prob, const char *needle)
{
    mlav_plan *plan = NULL;
    assert_int_equal(mlav_plan_create(ctx, prob, &plan), MLAV_ERR_INVALID_ARG);
    assert_null(plan);
    const char *why = mlav_last_error(NULL);
    if (!strstr(why, needle))
        fail_msg("the sentence \"%s\" does not name %s", why, needle);
}

/* Bad shard fields get MLAV_ERR_INVALID_ARG and a sentence; the capacity rule is the rank's
 * rows (n_r(kv_len) <= max_pages * page_size), for one problem and for limits alike. */
static void test_shard_validation(void **state)
{
    (void)state;
    mlav_context *ctx = tu_context_or_skip(MLAV_BACKEND_CPU);
    const int32_t q_indptr[2] = {0, 2}, kv_lens[1] = {100};
    mlav_problem prob = {.num_heads = 2, .d_latent = 32, .d_rope = 8, .softmax_scale = 0.1f,
                         .dtype = MLAV_DTYPE_F32, .page_size = 16, .batch = 1,
                         .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = 7};
    mlav_problem bad = prob;
    bad.shard_ranks = -1;
    expect_invalid(ctx, &bad, "shard_ranks = -1");
    bad = prob;
    bad.shard_ranks = 4, bad.shard_rank = 4;
    expect_invalid(ctx, &bad, "shard_rank = 4");
    bad.shard_rank = -1;
    expect_invalid(ctx, &bad, "shard_rank = -1");
    bad = prob;
    bad.shard_rank = 1; /* not sharded: only rank 0 */
    expect_invalid(ctx, &bad, "shard_rank = 1");
    bad = prob;
    bad.shard_ranks = 2, bad.shard_stripe = -3;
    expect_invalid(ctx, &bad, "shard_stripe = -3");

    /* 100 rows over 4 ranks, stripe 16: rank 0 holds rows 0-15 and 64-79 (32), rank 2 holds
     * 32-47 and 96-99 (20), rank 3 48-63 (16). Two pages of 16 hold rank 0's; one is short. */
    mlav_problem s = prob;
    s.shard_ranks = 4, s.shard_stripe = 16, s.max_pages = 2;
    mlav_plan *plan = NULL;
    for (int32_t r = 0; r < 4; r++) {
        s.shard_rank = r;
        assert_int_equal(mlav_plan_create(ctx, &s, &plan), MLAV_OK);
        mlav_plan_free(plan);
        plan = NULL;
    }
    s.max_pages = 1;
    s.shard_rank = 3; /* 16 rows: fits one page */
    assert_int_equal(mlav_plan_create(ctx, &s, &plan), MLAV_OK);
    mlav_plan_free(plan);
    plan = NULL;
    s.shard_rank = 2; /* 20 rows */
    expect_invalid(ctx, &s, "puts 20 rows on shard rank 2 of 4");

    /* limits: max_kv_len is global; its rows on the rank must fit the page table */
    mlav_limits lim = {.max_batch = 2, .max_tokens = 4, .max_q_len = 2, .max_kv_len = 100};
    s.max_pages = 2;
    s.shard_rank = 0;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &s, &lim, &plan), MLAV_OK);
    mlav_plan_free(plan);
    plan = NULL;
    s.max_pages = 1;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &s, &lim, &plan), MLAV_ERR_INVALID_ARG);
    assert_null(plan);
    assert_non_null(strstr(mlav_last_error(NULL), "shard rank 0 of 4"));
    s.shard_stripe = 0; /* 0 means 1: 25 rows each */
    s.max_pages = 2;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &s, &lim, &plan), MLAV_OK);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_mapping),
        cmocka_unit_test(test_shard_validation),
        cmocka_unit_test(test_shard_one_rank),
        cmocka_unit_test(test_shard_schedules),
        cmocka_unit_test(test_shard_cpu),
        cmocka_unit_test(test_shard_reference),
    };
    return cmocka_run_group_tests_name("shard", tests, NULL, NULL);
}
