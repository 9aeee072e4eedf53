/* mlav_merge_states_stacked and mlav_merge_state_in_place on host memory, every dtype, against
 * the fp64 merge (merge_fixture.h) with fresh random states; the NaN and empty-state rules; the
 * aliasing rules; and a status and a sentence, with nothing written, for every bad argument. */
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
#include "merge_fixture.h"
#include "mlaverify.h"
#include "test_util.h"

static const mlav_dtype DTYPES[] = {MLAV_DTYPE_F32, MLAV_DTYPE_BF16, MLAV_DTYPE_F16};
static const int32_t COUNTS[] = {1, 2, 3, 7, 64};

#define GUARD 64
#define GUARD_BYTE 0xA5

/* An output buffer between guards of GUARD_BYTE, its payload poisoned with 0xFF (NaN in every
 * dtype), so that a write outside it, or a missing write, is seen. */
typedef struct guarded {
    unsigned char *base;
    void *p;
    size_t bytes;
} guarded;

static guarded guarded_alloc(size_t bytes)
{
    guarded g = {tu_xcalloc(bytes + 2 * GUARD, 1), NULL, bytes};
    memset(g.base, GUARD_BYTE, bytes + 2 * GUARD);
    g.p = g.base + GUARD;
    memset(g.p, 0xFF, bytes);
    return g;
}

static int guards_ok(const guarded *g)
{
    for (size_t i = 0; i < GUARD; i++)
        if (g->base[i] != GUARD_BYTE || g->base[GUARD + g->bytes + i] != GUARD_BYTE)
            return 0;
    return 1;
}

static int untouched(const guarded *g)
{
    for (size_t i = 0; i < g->bytes; i++)
        if (((const unsigned char *)g->p)[i] != 0xFF)
            return 0;
    return guards_ok(g);
}

/* Every dtype and count, tokens x heads rows and dims from 1 up: the stacked merge against the
 * fp64 merge, its outputs between intact guards; with lse NULL the same out, bit for bit. */
static void test_stacked_random(void **state)
{
    (void)state;
    uint64_t rng = tu_seeded("stacked");
    char msg[512];
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++)
        for (size_t c = 0; c < sizeof COUNTS / sizeof COUNTS[0]; c++) {
            const int64_t tokens = 1 + (int64_t)(tu_next(&rng) % 6), heads = 1 + tu_next(&rng) % 8;
            const int32_t dims[] = {1, 7, 64, 130};
            const int32_t dim = dims[tu_next(&rng) % 4];
            mf_states s = mf_alloc(DTYPES[t], COUNTS[c], tokens * heads, dim);
            mf_fill(&s, &rng, 1);
            guarded out = guarded_alloc(mf_out_bytes(&s));
            guarded lse = guarded_alloc(sizeof(float) * (size_t)s.rows);
            mlav_status st = mlav_merge_states_stacked(MLAV_MEM_HOST, s.dtype, s.n, s.rows, dim,
                                                       s.outs, s.lses, out.p, lse.p, NULL);
            if (st != MLAV_OK)
                fail_msg("stacked: %s", mlav_last_error(NULL));
            if (!mf_check(&s, out.p, lse.p, msg, sizeof msg))
                fail_msg("stacked: %s", msg);
            assert_true(guards_ok(&out) && guards_ok(&lse));

            guarded out2 = guarded_alloc(mf_out_bytes(&s));
            assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, s.dtype, s.n, s.rows, dim,
                                                       s.outs, s.lses, out2.p, NULL, NULL),
                             MLAV_OK);
            assert_memory_equal(out.p, out2.p, out.bytes);
            assert_true(guards_ok(&out2));
            free(out.base);
            free(out2.base);
            free(lse.base);
            mf_free(&s);
        }
}

/* The in-place pair: state a += state b equals the stacked merge of [a, b] bit for bit (one host
 * loop), so the fp64 check of the stacked merge covers it; out and lse stay inside a's bytes. */
static void test_in_place_random(void **state)
{
    (void)state;
    uint64_t rng = tu_seeded("in place");
    char msg[512];
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++) {
        mf_states s = mf_alloc(DTYPES[t], 2, 37, 65);
        mf_fill(&s, &rng, 1);
        const size_t ob = mf_out_bytes(&s), lb = sizeof(float) * (size_t)s.rows;
        guarded a = guarded_alloc(ob), al = guarded_alloc(lb);
        memcpy(a.p, s.outs, ob);
        memcpy(al.p, s.lses, lb);
        mlav_status st = mlav_merge_state_in_place(MLAV_MEM_HOST, s.dtype, s.rows, s.dim, a.p,
                                                   al.p, (const char *)s.outs + ob,
                                                   s.lses + s.rows, NULL);
        if (st != MLAV_OK)
            fail_msg("in place: %s", mlav_last_error(NULL));
        if (!mf_check(&s, a.p, al.p, msg, sizeof msg))
            fail_msg("in place: %s", msg);
        assert_true(guards_ok(&a) && guards_ok(&al));
        void *o = tu_xcalloc(ob, 1);
        float *l = tu_xcalloc((size_t)s.rows, sizeof(float));
        assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, s.dtype, 2, s.rows, s.dim,
                                                   s.outs, s.lses, o, l, NULL),
                         MLAV_OK);
        assert_memory_equal(a.p, o, ob);
        assert_memory_equal(al.p, l, lb);
        free(o);
        free(l);
        free(a.base);
        free(al.base);
        mf_free(&s);
    }
}

/* mlav_merge_states (F32, an array of pointers) is the stacked merge's loop: equal bit for bit. */
static void test_pointer_array_form_is_the_same_merge(void **state)
{
    (void)state;
    uint64_t rng = tu_seeded("pointer array");
    mf_states s = mf_alloc(MLAV_DTYPE_F32, 7, 23, 33);
    mf_fill(&s, &rng, 1);
    const float *outs[7], *lses[7];
    for (int i = 0; i < 7; i++) {
        outs[i] = (const float *)s.outs + (size_t)i * 23 * 33;
        lses[i] = s.lses + (size_t)i * 23;
    }
    float o1[23 * 33], l1[23], o2[23 * 33], l2[23];
    assert_int_equal(mlav_merge_states(7, 23, 33, outs, lses, o1, l1), MLAV_OK);
    assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, MLAV_DTYPE_F32, 7, 23, 33, s.outs,
                                               s.lses, o2, l2, NULL),
                     MLAV_OK);
    assert_memory_equal(o1, o2, sizeof o1);
    assert_memory_equal(l1, l2, sizeof l1);
    mf_free(&s);
}

/* out over the first state and lse over the first lse: the same merge as into fresh buffers. */
static void test_alias_first_state(void **state)
{
    (void)state;
    uint64_t rng = tu_seeded("aliasing");
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++) {
        mf_states s = mf_alloc(DTYPES[t], 7, 19, 40);
        mf_fill(&s, &rng, 1);
        const size_t ob = mf_out_bytes(&s);
        void *o = tu_xcalloc(ob, 1);
        float *l = tu_xcalloc((size_t)s.rows, sizeof(float));
        assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, s.dtype, s.n, s.rows, s.dim,
                                                   s.outs, s.lses, o, l, NULL),
                         MLAV_OK);
        assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, s.dtype, s.n, s.rows, s.dim,
                                                   s.outs, s.lses, s.outs, s.lses, NULL),
                         MLAV_OK);
        assert_memory_equal(s.outs, o, ob);
        assert_memory_equal(s.lses, l, sizeof(float) * (size_t)s.rows);
        free(o);
        free(l);
        mf_free(&s);
    }
}

/* The rules, by hand, in every dtype: a row of empty states is 0 / -inf whatever their o holds;
 * a NaN lse or a +inf lse makes its row NaN; a real state among empty ones with NaN o is that
 * state bit for bit; a NaN in a weighted state's o is NaN in that element only. */
static void test_nan_and_empty_rules(void **state)
{
    (void)state;
    enum { N = 3, ROWS = 5, DIM = 4 };
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++) {
        const int dt = (int)DTYPES[t];
        mf_states s = mf_alloc(DTYPES[t], N, ROWS, DIM);
        const float L[N][ROWS] = {{-INFINITY, 0.5f, 1.0f, -INFINITY, 0.25f},
                                  {-INFINITY, NAN, INFINITY, 1.5f, 0.25f},
                                  {-INFINITY, 0.5f, 0.0f, -INFINITY, -1.0f}};
        for (int i = 0; i < N; i++)
            for (int r = 0; r < ROWS; r++) {
                s.lses[i * ROWS + r] = L[i][r];
                for (int d = 0; d < DIM; d++) {
                    float v = L[i][r] == -INFINITY ? NAN : 0.125f * (float)(1 + i + r + d);
                    if (i == 1 && r == 4 && d == 2)
                        v = NAN;
                    mlav_store_from_f32(s.outs, dt, (size_t)(i * ROWS + r) * DIM + d, v);
                }
            }
        guarded out = guarded_alloc(mf_out_bytes(&s)), lse = guarded_alloc(sizeof(float) * ROWS);
        assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, s.dtype, N, ROWS, DIM, s.outs,
                                                   s.lses, out.p, lse.p, NULL),
                         MLAV_OK);
        const float *l = lse.p;
        for (int d = 0; d < DIM; d++) {
            assert_true(mlav_load_as_f32(out.p, dt, (size_t)d) == 0.0f);
            assert_true(isnan(mlav_load_as_f32(out.p, dt, (size_t)(1 * DIM + d))));
            assert_true(isnan(mlav_load_as_f32(out.p, dt, (size_t)(2 * DIM + d))));
            assert_true(mlav_load_as_f32(out.p, dt, (size_t)(3 * DIM + d)) ==
                        mlav_load_as_f32(s.outs, dt, (size_t)(1 * ROWS + 3) * DIM + d));
            assert_true(isnan(mlav_load_as_f32(out.p, dt, (size_t)(4 * DIM + d))) == (d == 2));
        }
        assert_true(l[0] == -INFINITY && isnan(l[1]) && isnan(l[2]) && l[3] == 1.5f);
        assert_true(isfinite(l[4]));
        assert_true(guards_ok(&out) && guards_ok(&lse));
        free(out.base);
        free(lse.base);
        mf_free(&s);
    }
}

/* rows = 0 writes nothing; dim = 0 writes lse only. */
static void test_empty_shapes(void **state)
{
    (void)state;
    float o[2] = {1.0f, 2.0f}, l[2] = {0.0f, 0.0f};
    guarded out = guarded_alloc(8), lse = guarded_alloc(8);
    assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, MLAV_DTYPE_F32, 2, 0, 1, o, l,
                                               out.p, lse.p, NULL),
                     MLAV_OK);
    assert_true(untouched(&out) && untouched(&lse));
    assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_HOST, MLAV_DTYPE_F32, 2, 1, 0, o, l,
                                               out.p, lse.p, NULL),
                     MLAV_OK);
    assert_true(untouched(&out));
    assert_true(fabsf(((float *)lse.p)[0] - logf(2.0f)) < 1e-6f);
    free(out.base);
    free(lse.base);
}

static void expect(mlav_status got, mlav_status want, const char *what, const guarded *out,
                   const guarded *lse)
{
    if (got != want)
        fail_msg("%s: got %s, expected %s (%s)", what, mlav_status_string(got),
                 mlav_status_string(want), mlav_last_error(NULL));
    const char *m = mlav_last_error(NULL);
    if (!m || !*m)
        fail_msg("%s: no sentence", what);
    if (!untouched(out) || !untouched(lse))
        fail_msg("%s: an output was written", what);
    print_message("  %s -> %s\n", what, m);
}

/* Every bad argument of both forms: a status, a sentence, nothing written. */
static void test_refusals(void **state)
{
    (void)state;
    enum { N = 3, ROWS = 4, DIM = 8 };
    static float outs[N * ROWS * DIM + 8], lses[N * ROWS + 8];
    guarded out = guarded_alloc(sizeof(float) * ROWS * DIM), lse = guarded_alloc(4 * ROWS);
    const mlav_memory H = MLAV_MEM_HOST;
    const mlav_dtype F = MLAV_DTYPE_F32;
    const mlav_status INV = MLAV_ERR_INVALID_ARG;
#define STACKED(mem, dt, n, rows, dim, o, l, po, pl)                                          \
    mlav_merge_states_stacked(mem, dt, n, rows, dim, o, l, po, pl, NULL)
    expect(STACKED((mlav_memory)7, F, N, ROWS, DIM, outs, lses, out.p, lse.p), INV, "memory 7",
           &out, &lse);
    expect(STACKED(H, MLAV_DTYPE_FP8_E4M3, N, ROWS, DIM, outs, lses, out.p, lse.p), INV,
           "dtype fp8", &out, &lse);
    expect(STACKED(H, (mlav_dtype)9, N, ROWS, DIM, outs, lses, out.p, lse.p), INV, "dtype 9",
           &out, &lse);
    expect(STACKED(H, F, 0, ROWS, DIM, outs, lses, out.p, lse.p), INV, "num_states 0", &out,
           &lse);
    expect(STACKED(H, F, -1, ROWS, DIM, outs, lses, out.p, lse.p), INV, "num_states -1", &out,
           &lse);
    expect(STACKED(H, F, MLAV_MERGE_MAX_STATES + 1, ROWS, DIM, outs, lses, out.p, lse.p), INV,
           "num_states past the most", &out, &lse);
    expect(STACKED(H, F, N, -1, DIM, outs, lses, out.p, lse.p), INV, "rows -1", &out, &lse);
    expect(STACKED(H, F, N, ROWS, -1, outs, lses, out.p, lse.p), INV, "dim -1", &out, &lse);
    expect(STACKED(H, F, N, INT64_MAX / 2, DIM, outs, lses, out.p, lse.p), INV,
           "rows past the address space", &out, &lse);
    expect(STACKED(H, F, N, ROWS, DIM, NULL, lses, out.p, lse.p), INV, "outs NULL", &out, &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, NULL, out.p, lse.p), INV, "lses NULL", &out, &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, NULL, lse.p), INV, "out NULL", &out, &lse);
    expect(STACKED(H, F, N, ROWS, DIM, (char *)outs + 2, lses, out.p, lse.p), INV,
           "outs misaligned", &out, &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, (char *)out.p + 1, lse.p), INV,
           "out misaligned", &out, &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, out.p, (float *)((char *)lse.p + 2)), INV,
           "lse misaligned", &out, &lse);
    expect(STACKED(H, MLAV_DTYPE_BF16, N, ROWS, DIM, outs, lses, (char *)out.p + 1, lse.p), INV,
           "bf16 out misaligned", &out, &lse);
    /* overlaps: only out == outs and lse == lses are allowed */
    float *o1 = outs + ROWS * DIM, *l1 = lses + ROWS;
    float *po = out.p, *pl = lse.p;
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, o1, pl), INV, "out = the second state", &out,
           &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, outs + 1, pl), INV, "out inside outs", &out,
           &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs + 4, lses, outs, pl), INV, "out before outs", &out,
           &lse);
    expect(STACKED(H, F, N, ROWS, 1, outs, lses, lses + 4, pl), INV, "out over lses", &out,
           &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, po, l1), INV, "lse = the second lse", &out,
           &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, po, lses + 1), INV, "lse inside lses", &out,
           &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, po, outs + 5), INV, "lse over outs", &out,
           &lse);
    expect(STACKED(H, F, N, ROWS, DIM, outs, lses, po, po + 3), INV, "lse over out", &out, &lse);
#undef STACKED

#define IN_PLACE(mem, dt, rows, dim, a, al, b, bl)                                            \
    mlav_merge_state_in_place(mem, dt, rows, dim, a, al, b, bl, NULL)
    expect(IN_PLACE((mlav_memory)-1, F, ROWS, DIM, po, pl, outs, lses), INV, "memory -1", &out,
           &lse);
    expect(IN_PLACE(H, MLAV_DTYPE_FP8_E4M3, ROWS, DIM, po, pl, outs, lses), INV, "dtype fp8",
           &out, &lse);
    expect(IN_PLACE(H, F, -2, DIM, po, pl, outs, lses), INV, "rows -2", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, -2, po, pl, outs, lses), INV, "dim -2", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, NULL, pl, outs, lses), INV, "out NULL", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, NULL, outs, lses), INV, "lse NULL", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, pl, NULL, lses), INV, "other_out NULL", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, pl, outs, NULL), INV, "other_lse NULL", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, pl, po, lses), INV, "other_out = out", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, pl, po + 1, lses), INV, "other_out inside out", &out,
           &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, pl, outs, pl), INV, "other_lse = lse", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, pl, pl, lses), INV, "other_out over lse", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, pl, outs, po), INV, "other_lse over out", &out, &lse);
    expect(IN_PLACE(H, F, ROWS, DIM, po, po + ROWS * DIM - 1, outs, lses), INV,
           "lse over out's end", &out, &lse);
#undef IN_PLACE

    /* the pointer-array form: out over a state other than the first, lse over out */
    const float *ptrs[N] = {outs, o1, outs + 2 * ROWS * DIM}, *lptrs[N] = {lses, l1, l1 + ROWS};
    expect(mlav_merge_states(N, ROWS, DIM, ptrs, lptrs, o1 + 1, pl), INV,
           "pointer array: out inside outs[1]", &out, &lse);
    expect(mlav_merge_states(N, ROWS, DIM, ptrs, lptrs, po, l1), INV,
           "pointer array: lse = lses[1]", &out, &lse);
    expect(mlav_merge_states(N, ROWS, DIM, ptrs, lptrs, po, po + 2), INV,
           "pointer array: lse over out", &out, &lse);

    /* device memory: a build without CUDA cannot; with CUDA, host pointers are not device
     * memory (or there is no device) */
    const mlav_status st = mlav_merge_states_stacked(MLAV_MEM_DEVICE, F, N, ROWS, DIM, outs, lses,
                                                     po, pl, NULL);
#ifdef MLAV_WITH_CUDA
    expect(st, mlav_cuda_device_count() > 0 ? INV : st, "device memory of host pointers", &out,
           &lse);
    assert_int_not_equal(st, MLAV_OK);
#else
    expect(st, MLAV_ERR_UNSUPPORTED, "device memory without CUDA", &out, &lse);
    expect(mlav_merge_state_in_place(MLAV_MEM_DEVICE, F, ROWS, DIM, po, pl, outs, lses, NULL),
           MLAV_ERR_UNSUPPORTED, "in place, device memory without CUDA", &out, &lse);
#endif
    free(out.base);
    free(lse.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stacked_random),
        cmocka_unit_test(test_in_place_random),
        cmocka_unit_test(test_pointer_array_form_is_the_same_merge),
        cmocka_unit_test(test_alias_first_state),
        cmocka_unit_test(test_nan_and_empty_rules),
        cmocka_unit_test(test_empty_shapes),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
