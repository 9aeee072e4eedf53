/* mlav_merge_states: states over disjoint KV ranges merge into the unsplit attention. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/dtype.h"
#include "../src/cpu/oracle.h"
#include "../src/dispatch/validate.h"
#include "mlaverify.h"
#include "test_util.h"

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* The state of one (token, head) row over KV rows [j0, j1), in double, rounded to float: the
 * oracle's loops restricted to a range. No visible key: o = 0, lse = -inf. */
static void range_state(const mlav_problem_info *info, const tu_problem *p, int32_t b, int32_t i,
                        int32_t h, int64_t j0, int64_t j1, float *o, float *lse)
{
    const int32_t W = info->W, Dl = info->Dl, H = info->H;
    const int dt = (int)info->dtype;
    const int32_t *pt_row = p->page_table + (size_t)b * (size_t)info->max_pages;
    size_t qrow = ((size_t)(info->q_indptr[b] + i) * (size_t)H + (size_t)h) * (size_t)W;
    double m = -INFINITY;
    double *s = xmalloc(sizeof(double) * (size_t)(j1 > j0 ? j1 - j0 : 1));
    for (int64_t j = j0; j < j1; j++) {
        s[j - j0] = -INFINITY;
        if (!mlav_visible(info, p->tree_mask, b, i, j))
            continue;
        size_t krow = mlav_kv_row_index(info, pt_row, j) * (size_t)W;
        double acc = 0.0;
        for (int32_t d = 0; d < W; d++)
            acc += (double)mlav_load_as_f32(p->q, dt, qrow + (size_t)d) *
                   (double)mlav_load_as_f32(p->kv, dt, krow + (size_t)d);
        s[j - j0] = acc * (double)info->scale;
        if (s[j - j0] > m)
            m = s[j - j0];
    }
    double *acc = xmalloc(sizeof(double) * (size_t)Dl);
    for (int32_t d = 0; d < Dl; d++)
        acc[d] = 0.0;
    double sum = 0.0;
    if (m != -INFINITY) {
        for (int64_t j = j0; j < j1; j++) {
            if (s[j - j0] == -INFINITY)
                continue;
            double w = exp(s[j - j0] - m);
            sum += w;
            size_t krow = mlav_kv_row_index(info, pt_row, j) * (size_t)W;
            for (int32_t d = 0; d < Dl; d++)
                acc[d] += w * (double)mlav_load_as_f32(p->kv, dt, krow + (size_t)d);
        }
    }
    for (int32_t d = 0; d < Dl; d++)
        o[d] = sum > 0.0 ? (float)(acc[d] / sum) : 0.0f;
    *lse = sum > 0.0 ? (float)(m + log(sum)) : -INFINITY;
    free(acc);
    free(s);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Split every request's KV at `nstates - 1` random cuts (empty ranges allowed, one cut at the
 * prefix boundary so some ranges hold only draft rows: empty states for the rows that see none
 * of them), merge, and compare with the oracle's unsplit answer. */
static void split_and_merge(const tu_case *base, int32_t nstates)
{
    tu_case c = *base;
    c.seed = tu_seed();
    char name[512];
    tu_case_name(&c, name, sizeof name);
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&p->prob, &info), MLAV_OK);
    uint64_t rng = c.seed ^ 0x5eedull;
    const int32_t H = c.H, Dl = c.Dl;
    size_t empty_states = 0;

    for (int32_t b = 0; b < c.B; b++) {
        int32_t q_len = mlav_info_q_len(&info, b);
        int64_t kv = info.kv_lens[b], prefix = mlav_info_prefix(&info, b);
        int64_t rows = (int64_t)q_len * H;
        if (rows == 0)
            continue;
        int64_t *cuts = xmalloc(sizeof(int64_t) * (size_t)(nstates + 1));
        cuts[0] = 0;
        cuts[nstates] = kv;
        for (int32_t s = 1; s < nstates; s++)
            cuts[s] = s == 1 ? prefix : (int64_t)(tu_next(&rng) % (uint64_t)(kv + 1));
        qsort(cuts, (size_t)nstates + 1, sizeof(int64_t), cmp_i64);

        float **outs = xmalloc(sizeof(float *) * (size_t)nstates);
        float **lses = xmalloc(sizeof(float *) * (size_t)nstates);
        for (int32_t s = 0; s < nstates; s++) {
            outs[s] = xmalloc(sizeof(float) * (size_t)rows * (size_t)Dl);
            lses[s] = xmalloc(sizeof(float) * (size_t)rows);
            for (int64_t r = 0; r < rows; r++) {
                range_state(&info, p, b, (int32_t)(r / H), (int32_t)(r % H), cuts[s],
                            cuts[s + 1], outs[s] + (size_t)r * (size_t)Dl, &lses[s][r]);
                empty_states += lses[s][r] == -INFINITY;
            }
        }
        float *out = xmalloc(sizeof(float) * (size_t)rows * (size_t)Dl);
        float *lse = xmalloc(sizeof(float) * (size_t)rows);
        mlav_status st = mlav_merge_states(nstates, rows, Dl, (const float *const *)outs,
                                           (const float *const *)lses, out, lse);
        if (st != MLAV_OK)
            fail_msg("[%s] merge: %s", name, mlav_last_error(NULL));

        size_t row0 = (size_t)info.q_indptr[b] * (size_t)H;
        double num = 0.0, den = 0.0, worst = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            double rl = p->ref_lse[row0 + (size_t)r];
            if (isinf(rl)) {
                assert_true(lse[r] == (float)rl);
            } else {
                double e = fabs(lse[r] - rl);
                worst = e > worst ? e : worst;
            }
            for (int32_t d = 0; d < Dl; d++) {
                double ref = p->ref_out[(row0 + (size_t)r) * (size_t)Dl + (size_t)d];
                double got = out[(size_t)r * (size_t)Dl + (size_t)d];
                num += (got - ref) * (got - ref);
                den += ref * ref;
            }
        }
        double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(rel <= 1e-5) || !(worst <= 1e-5))
            fail_msg("[%s] request %d, %d states: out rel-L2 %.3g, lse max abs %.3g", name, b,
                     nstates, rel, worst);
        for (int32_t s = 0; s < nstates; s++) {
            free(outs[s]);
            free(lses[s]);
        }
        free(outs);
        free(lses);
        free(out);
        free(lse);
        free(cuts);
    }
    print_message("  [%s] %d states per request, %zu empty (row, state) pairs: ok\n", name,
                  nstates, empty_states);
    mlav_problem_info_free(&info);
    tu_free(p);
}

#define Q(...) {__VA_ARGS__}

static void test_merge_split_anywhere(void **state)
{
    (void)state;
    const tu_case a = {.H = 4, .Dl = 32, .Dr = 8, .page_size = 3, .B = 3,
                       .dtype = MLAV_DTYPE_F32, .q_lens = Q(9, 1, 17), .prefixes = Q(300, 50, 0),
                       .tree = TU_BUSHY};
    const tu_case b = {.H = 2, .Dl = 64, .Dr = 16, .page_size = 16, .B = 2,
                       .dtype = MLAV_DTYPE_BF16, .q_lens = Q(33, 5), .prefixes = Q(1000, 7),
                       .tree = TU_DEEP};
    split_and_merge(&a, 2);
    split_and_merge(&a, 5);
    split_and_merge(&b, 3);
    split_and_merge(&b, 9);
}

/* More states than the merge keeps on its stack (64): the heap path. */
static void test_merge_many_states(void **state)
{
    (void)state;
    const tu_case a = {.H = 2, .Dl = 16, .Dr = 4, .page_size = 1, .B = 1,
                       .dtype = MLAV_DTYPE_F32, .q_lens = Q(3), .prefixes = Q(400),
                       .tree = TU_CHAIN_NULL};
    split_and_merge(&a, 100);
}

/* A fixed random state of `rows` x `dim` with finite lse. */
static void random_state(uint64_t *rng, int64_t rows, int32_t dim, float *o, float *l)
{
    for (int64_t k = 0; k < rows * dim; k++)
        o[k] = (float)tu_uniform(rng);
    for (int64_t r = 0; r < rows; r++)
        l[r] = (float)(3.0 * tu_uniform(rng));
}

/* An empty state (lse = -inf) has weight 0: even NaN in its o is never read, and the merge of
 * one real state with empty ones is that state, bit for bit. */
static void test_merge_empty_states_ignored(void **state)
{
    (void)state;
    enum { ROWS = 7, DIM = 13 };
    uint64_t rng = tu_seed();
    float a[ROWS * DIM], la[ROWS], e[ROWS * DIM], le[ROWS], out[ROWS * DIM], lse[ROWS];
    random_state(&rng, ROWS, DIM, a, la);
    for (int k = 0; k < ROWS * DIM; k++)
        e[k] = NAN;
    for (int r = 0; r < ROWS; r++)
        le[r] = -INFINITY;
    const float *outs[3] = {e, a, e}, *lses[3] = {le, la, le};
    assert_int_equal(mlav_merge_states(3, ROWS, DIM, outs, lses, out, lse), MLAV_OK);
    assert_memory_equal(out, a, sizeof a);
    assert_memory_equal(lse, la, sizeof la);
}

static void test_merge_all_empty(void **state)
{
    (void)state;
    enum { ROWS = 3, DIM = 5 };
    float e1[ROWS * DIM], e2[ROWS * DIM], l1[ROWS], l2[ROWS], out[ROWS * DIM], lse[ROWS];
    for (int k = 0; k < ROWS * DIM; k++)
        e1[k] = NAN, e2[k] = 1.0f, out[k] = NAN;
    for (int r = 0; r < ROWS; r++)
        l1[r] = l2[r] = -INFINITY, lse[r] = NAN;
    const float *outs[2] = {e1, e2}, *lses[2] = {l1, l2};
    assert_int_equal(mlav_merge_states(2, ROWS, DIM, outs, lses, out, lse), MLAV_OK);
    for (int k = 0; k < ROWS * DIM; k++)
        assert_true(out[k] == 0.0f);
    for (int r = 0; r < ROWS; r++)
        assert_true(lse[r] == -INFINITY);
}

/* Two equal-lse states average; a NaN lse poisons its row only. */
static void test_merge_hand_worked(void **state)
{
    (void)state;
    float o1[4] = {1.0f, 2.0f, 5.0f, 5.0f}, o2[4] = {3.0f, 6.0f, 7.0f, 7.0f};
    float l1[2] = {0.5f, NAN}, l2[2] = {0.5f, 1.0f};
    float out[4], lse[2];
    const float *outs[2] = {o1, o2}, *lses[2] = {l1, l2};
    assert_int_equal(mlav_merge_states(2, 2, 2, outs, lses, out, lse), MLAV_OK);
    assert_float_equal(out[0], 2.0f, 1e-6f);
    assert_float_equal(out[1], 4.0f, 1e-6f);
    assert_float_equal(lse[0], 0.5f + logf(2.0f), 1e-6f);
    assert_true(isnan(out[2]) && isnan(out[3]) && isnan(lse[1]));
}

/* out may alias outs[0] and lse lses[0]. */
static void test_merge_aliasing(void **state)
{
    (void)state;
    enum { ROWS = 9, DIM = 33, N = 4 };
    uint64_t rng = tu_seed();
    static float o[N][ROWS * DIM], l[N][ROWS], out[ROWS * DIM], lse[ROWS];
    for (int s = 0; s < N; s++)
        random_state(&rng, ROWS, DIM, o[s], l[s]);
    l[2][4] = -INFINITY; /* one empty state in one row */
    const float *outs[N] = {o[0], o[1], o[2], o[3]}, *lses[N] = {l[0], l[1], l[2], l[3]};
    assert_int_equal(mlav_merge_states(N, ROWS, DIM, outs, lses, out, lse), MLAV_OK);
    assert_int_equal(mlav_merge_states(N, ROWS, DIM, outs, lses, o[0], l[0]), MLAV_OK);
    assert_memory_equal(o[0], out, sizeof out);
    assert_memory_equal(l[0], lse, sizeof lse);
}

/* rows = 0 and dim = 0 are empty merges, not errors. */
static void test_merge_empty_shapes(void **state)
{
    (void)state;
    float o[1] = {1.0f}, l[1] = {0.0f}, out[1] = {7.0f}, lse[1] = {7.0f};
    const float *outs[1] = {o}, *lses[1] = {l};
    assert_int_equal(mlav_merge_states(1, 0, 4, outs, lses, out, lse), MLAV_OK);
    assert_true(out[0] == 7.0f && lse[0] == 7.0f);
    assert_int_equal(mlav_merge_states(1, 1, 0, outs, lses, out, lse), MLAV_OK);
    assert_true(lse[0] == 0.0f);
}

static void expect_invalid(mlav_status s, const char *what)
{
    if (s != MLAV_ERR_INVALID_ARG)
        fail_msg("%s: got %s, expected MLAV_ERR_INVALID_ARG", what, mlav_status_string(s));
    const char *msg = mlav_last_error(NULL);
    if (!msg || !*msg)
        fail_msg("%s: no error sentence", what);
    print_message("  %s -> %s\n", what, msg);
}

static void test_merge_bad_arguments(void **state)
{
    (void)state;
    float o[4] = {0}, l[2] = {0}, out[4] = {9, 9, 9, 9}, lse[2] = {9, 9};
    const float *outs[2] = {o, o}, *lses[2] = {l, l};
    const float *outs_null[2] = {o, NULL}, *lses_null[2] = {NULL, l};
    expect_invalid(mlav_merge_states(0, 2, 2, outs, lses, out, lse), "num_states = 0");
    expect_invalid(mlav_merge_states(-3, 2, 2, outs, lses, out, lse), "num_states < 0");
    expect_invalid(mlav_merge_states(1 << 20, 2, 2, outs, lses, out, lse), "num_states huge");
    expect_invalid(mlav_merge_states(2, -1, 2, outs, lses, out, lse), "rows < 0");
    expect_invalid(mlav_merge_states(2, 2, -1, outs, lses, out, lse), "dim < 0");
    expect_invalid(mlav_merge_states(2, 2, 2, NULL, lses, out, lse), "outs NULL");
    expect_invalid(mlav_merge_states(2, 2, 2, outs, NULL, out, lse), "lses NULL");
    expect_invalid(mlav_merge_states(2, 2, 2, outs, lses, NULL, lse), "out NULL");
    expect_invalid(mlav_merge_states(2, 2, 2, outs, lses, out, NULL), "lse NULL");
    expect_invalid(mlav_merge_states(2, 2, 2, outs_null, lses, out, lse), "outs[1] NULL");
    expect_invalid(mlav_merge_states(2, 2, 2, outs, lses_null, out, lse), "lses[0] NULL");
    for (int k = 0; k < 4; k++)
        assert_true(out[k] == 9.0f);
    assert_true(lse[0] == 9.0f && lse[1] == 9.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_split_anywhere),
        cmocka_unit_test(test_merge_many_states),
        cmocka_unit_test(test_merge_empty_states_ignored),
        cmocka_unit_test(test_merge_all_empty),
        cmocka_unit_test(test_merge_hand_worked),
        cmocka_unit_test(test_merge_aliasing),
        cmocka_unit_test(test_merge_empty_shapes),
        cmocka_unit_test(test_merge_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
