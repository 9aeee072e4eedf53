/* The exact plan's equal-shares candidate (src/common/schedule_shares.c): what the kernels and the
 * combine rely on, in any block order; when the plan takes it; and its cases by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../src/common/schedule.h"
#include "../src/common/schedule_shares.h"
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
        assert_int_equal(mlav_schedule_shares(&info, &sp, INT64_MAX, &t_sh, &sh), MLAV_OK);
        if (t_sh >= 0) {
            check_cover(&info, &sp, &sh, seed);
            assert_int_equal(mlav_schedule_tile_time(&sh, &sp), t_sh);
        }
        const int64_t ts = mlav_schedule_tile_time(&s, &sp), tu = mlav_schedule_tile_time(&u, &sp);
        const int same = s.n_items == u.n_items &&
                         !memcmp(s.items, u.items, (size_t)s.n_items * sizeof(mlav_split_item));
        if (same) {
            assert_true(t_sh < 0 || t_sh * 100 > tu * 97); /* kept uniform only without a gain */
            uniform++;
        } else {
            assert_true(t_sh >= 0 && ts == t_sh && ts * 100 <= tu * 97);
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
 * 71 tiles in two or three blocks, which models at 0.85 of the time or less. B 16, H 8, q_len 1,
 * 131072 (one wave of 128 blocks either way, 0.977 modelled) keeps the uniform schedule, and so
 * does B 1, H 64, q_len 16, 4096: 8 parts of 8 and 9 tiles against 7 splits of 9 and one of 2,
 * the same longest block in whole tiles (by keys shares modelled 0.947 and measured 1.29x the
 * uniform schedule's time on the H200). */
static void test_shares_harness_points(void **state)
{
    (void)state;
    const struct {
        int32_t B, H, q, prefix, shares;
        double at_most; /* shares' modelled time over the uniform one's, in whole tiles */
    } pts[] = {{16, 64, 9, 4096, 1, 0.85}, {16, 16, 9, 4096, 1, 0.92}, {16, 128, 9, 4096, 1, 0.92},
               {16, 8, 1, 131072, 0, 1.0}, {1, 128, 16, 131072, 0, 1.0}, {1, 64, 16, 4096, 0, 1.0}};
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
            assert_true(s.n_items < u.n_items);
        } else {
            assert_int_equal(s.n_items, u.n_items);
            assert_memory_equal(s.items, u.items, (size_t)s.n_items * sizeof(mlav_split_item));
        }
        mlav_schedule_free(&s);
        mlav_schedule_free(&u);
        mlav_problem_info_free(&info);
    }
}

/* Three requests of 3, 2 and 1 tiles (64 keys each), one row tile, 3 parts of 2 tiles on a
 * device of 3 blocks: part 0 is request 0's tiles 0-1, part 1 its tile 2 and request 1's tile 0,
 * part 2 request 1's tile 1 and request 2's tile 0. Round 0 (each part's first piece, by part):
 * (0, [0, 128)), (0, [128, 192)), (1, [64, 128)); round 1 longest first, then by part: (1, [0,
 * 64)), (2, [0, 64)). Slots: request 0's two pieces 0 and 1, request 1's 2 and 3; request 2 is
 * one piece, unsplit. */
static void test_shares_by_hand(void **state)
{
    (void)state;
    int32_t q_indptr[4] = {0, 1, 2, 3}, kv_lens[3] = {192, 128, 64};
    mlav_problem prob = {.num_heads = 64, .d_latent = 512, .d_rope = 64, .softmax_scale = 0.1f,
                         .dtype = MLAV_DTYPE_BF16, .page_size = 1, .batch = 3,
                         .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = 1 << 10};
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&prob, &info), MLAV_OK);
    mlav_schedule_params sp = sm90_params();
    sp.target_blocks = 3; /* weighs 2 to 6 parts: 3 and 4 model least, the first is kept */
    sp.block_cost_keys = 0;
    int64_t t;
    mlav_schedule s;
    assert_int_equal(mlav_schedule_shares(&info, &sp, INT64_MAX, &t, &s), MLAV_OK);
    check_cover(&info, &sp, &s, 0);
    const int32_t want[5][4] = {{0, 0, 128, 0}, {0, 128, 192, 1}, {1, 64, 128, 3},
                                {1, 0, 64, 2}, {2, 0, 64, -1}}; /* b, kv_begin, kv_end, slot */
    assert_int_equal(s.n_items, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(s.items[i].b, want[i][0]);
        assert_int_equal(s.items[i].kv_begin, want[i][1]);
        assert_int_equal(s.items[i].kv_end, want[i][2]);
        assert_int_equal(s.items[i].slot, want[i][3]);
    }
    /* each block costs its keys; slots free at 128, 64, 64: (1, [0, 64)) and (2, [0, 64)) end
     * at 128; the combine 1 x 2 splits */
    assert_int_equal(t, 128 + 2);
    assert_int_equal(mlav_schedule_tile_time(&s, &sp), t);
    mlav_schedule_free(&s);
    mlav_problem_info_free(&info);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_random_batches),
        cmocka_unit_test(test_shares_harness_points),
        cmocka_unit_test(test_shares_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
