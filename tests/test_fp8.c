/* FP8 (e4m3) KV caches: the format (every byte's value from its bit fields, round-to-nearest-even
 * quantization against a brute-force nearest value), the bad input that comes with it (scales,
 * dtypes, aliasing, alignment), NaN bytes that reach exactly the rows that see their key, and a
 * device kv_scale_ptr that is not finite and > 0 (NaN in every row that sees a key). Backend
 * tests run on every backend; without CUDA or a device the GPU ones skip with the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/dtype.h"
#include "mlaverify.h"
#include "test_util.h"

#ifdef MLAV_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static const mlav_backend backends[] = {MLAV_BACKEND_REFERENCE, MLAV_BACKEND_CPU,
                                        MLAV_BACKEND_CUDA, MLAV_BACKEND_CUDA_NAIVE};


static void expect_status(mlav_status got, mlav_status want, const char *w1, const char *w2,
                          const char *what)
{
    const char *msg = mlav_last_error(NULL);
    if (got != want)
        fail_msg("%s: got %s, expected %s (%s)", what, mlav_status_string(got),
                 mlav_status_string(want), got == MLAV_OK ? "" : msg);
    if (want == MLAV_OK)
        return;
    if (!msg || !*msg)
        fail_msg("%s: no error sentence", what);
    if ((w1 && !strstr(msg, w1)) || (w2 && !strstr(msg, w2)))
        fail_msg("%s: the sentence \"%s\" does not name \"%s\"%s%s", what, msg, w1,
                 w2 ? " and " : "", w2 ? w2 : "");
    print_message("  %-46s %s: %s\n", what, mlav_status_string(got), msg);
}

/* ---- the format ------------------------------------------------------------------------------ */

/* What e4m3fn defines for byte b, from its fields alone (sign, 4 exponent bits of bias 7, 3
 * mantissa bits; exponent 0 is subnormal, m x 2^-9; S.1111.111 is NaN; no infinities). */
static double e4m3_expected(unsigned b)
{
    const int sign = (b >> 7) & 1, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7)
        return NAN;
    const double mag = e == 0 ? ldexp((double)m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return sign ? -mag : mag;
}

static void test_fp8_decode_all_bytes(void **state)
{
    (void)state;
    uint8_t all[256];
    for (unsigned b = 0; b < 256; b++)
        all[b] = (uint8_t)b;
    for (unsigned b = 0; b < 256; b++) {
        const double want = e4m3_expected(b);
        const float got = mlav_e4m3_to_f32((uint8_t)b);
        const float loaded = mlav_load_as_f32(all, MLAV_DTYPE_FP8_E4M3, b);
        if (isnan(want)) {
            if (!isnan(got) || !isnan(loaded))
                fail_msg("byte 0x%02x is NaN, decoded as %g (loaded as %g)", b, (double)got,
                         (double)loaded);
            continue;
        }
        if ((double)got != want || !!signbit(got) != !!signbit(want) ||
            mlav_f32_to_bits(loaded) != mlav_f32_to_bits(got))
            fail_msg("byte 0x%02x: decoded as %.9g (loaded as %.9g), e4m3fn says %.9g", b,
                     (double)got, (double)loaded, want);
        /* every value is representable: quantizing it gives its byte back (-0 included) */
        if (mlav_f32_to_e4m3(got) != b)
            fail_msg("byte 0x%02x: %.9g quantizes to 0x%02x", b, (double)got,
                     mlav_f32_to_e4m3(got));
    }
    assert_true(e4m3_expected(0x7e) == 448.0 && mlav_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(mlav_e4m3_to_f32(0xfe) == -448.0f && mlav_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(mlav_e4m3_to_f32(0x08) == 0x1p-6f); /* the smallest normal */
}

/* The e4m3 byte nearest to finite x by brute force over the finite codes of x's sign: ties go to
 * the even code (mantissa lsb 0), |x| past 448 saturates to +-448. */
static uint8_t nearest_e4m3(float x)
{
    const unsigned sign = signbit(x) ? 0x80u : 0u;
    const double a = fabs((double)x);
    if (a >= 448.0)
        return (uint8_t)(sign | 0x7eu);
    unsigned best = 0;
    double dbest = INFINITY;
    for (unsigned c = 0; c < 0x7f; c++) {
        const double d = fabs(e4m3_expected(c) - a);
        if (d < dbest || (d == dbest && (c & 1u) == 0)) {
            best = c;
            dbest = d;
        }
    }
    return (uint8_t)(sign | best);
}

static void check_encode(float x, uint8_t want, const char *why)
{
    const uint8_t got = mlav_f32_to_e4m3(x);
    if (got != want)
        fail_msg("%s: %.9g quantizes to 0x%02x (%g), expected 0x%02x (%g)", why, (double)x, got,
                 (double)mlav_e4m3_to_f32(got), want, (double)mlav_e4m3_to_f32(want));
}

static void test_fp8_encode_rounding(void **state)
{
    (void)state;
    /* ties to even among normals: 1.0625 lies between 1.0 (m 0) and 1.125 (m 1) */
    check_encode(1.0625f, 0x38, "tie, even below");
    check_encode(1.1875f, 0x3a, "tie, even above"); /* between 1.125 (m 1) and 1.25 (m 2) */
    check_encode(-1.0625f, 0xb8, "negative tie");
    check_encode(1.0625f + 0x1p-20f, 0x39, "just past a tie");
    check_encode(15.5f, 0x58, "a tie rounding up into the next binade (15 is m 7: to 16)");
    /* subnormals: multiples of 2^-9; a tie with zero goes to zero */
    check_encode(0x1p-9f, 0x01, "the smallest subnormal");
    check_encode(0x1p-10f, 0x00, "half the smallest subnormal");
    check_encode(0x1.8p-10f, 0x01, "three quarters of the smallest subnormal");
    check_encode(0x1.8p-9f, 0x02, "subnormal tie 1.5, even above");
    check_encode(0x1.4p-8f, 0x02, "subnormal tie 2.5, even below");
    check_encode(7.5f * 0x1p-9f, 0x08, "a subnormal tie rounding to the smallest normal");
    check_encode(-0x1p-12f, 0x80, "a negative underflow is -0");
    check_encode(1e-30f, 0x00, "far below the subnormals");
    /* saturation at 448, infinities included (e4m3fn has none) */
    check_encode(448.0f, 0x7e, "the largest finite");
    check_encode(464.0f, 0x7e, "past 448 by half a step");
    check_encode(1e9f, 0x7e, "far past 448");
    check_encode(INFINITY, 0x7e, "+inf");
    check_encode(-INFINITY, 0xfe, "-inf");
    check_encode(-500.0f, 0xfe, "negative past 448");
    /* NaN stays NaN */
    assert_int_equal(mlav_f32_to_e4m3(NAN) & 0x7f, 0x7f);
    assert_int_equal(mlav_f32_to_e4m3(-NAN) & 0x7f, 0x7f);

    /* against the brute-force nearest: every midpoint between neighbouring codes and one float
     * either side of it, then random floats over every binade e4m3 reaches */
    for (unsigned c = 0; c < 0x7e; c++) {
        const float lo = (float)e4m3_expected(c), hi = (float)e4m3_expected(c + 1);
        const float mid = (lo + hi) / 2.0f; /* exact: two 4-bit values */
        const float pts[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            check_encode(pts[k], nearest_e4m3(pts[k]), "near a midpoint");
            check_encode(-pts[k], nearest_e4m3(-pts[k]), "near a negative midpoint");
        }
    }
    uint64_t seed = tu_seed(), rng = seed;
    for (int k = 0; k < 20000; k++) {
        const float x = (float)ldexp(tu_uniform(&rng), (int)(tu_next(&rng) % 24) - 13);
        if (mlav_f32_to_e4m3(x) != nearest_e4m3(x))
            fail_msg("%.9g quantizes to 0x%02x, the nearest is 0x%02x (seed 0x%llx)", (double)x,
                     mlav_f32_to_e4m3(x), nearest_e4m3(x), (unsigned long long)seed);
    }
}

/* The fixture's FP8 pool: every used row finite (its values quantized), every byte outside them
 * (unused pages, the slack past kv_len) 0x7f, so that a kernel reading past its page table or
 * its kv_len meets NaN; and its values are those of the scale it names. */
static void test_fp8_fixture_pool(void **state)
{
    (void)state;
    tu_case c = {.H = 2, .Dl = 24, .Dr = 8, .page_size = 7, .B = 3, .dtype = MLAV_DTYPE_BF16,
                 .q_lens = {3, 0, 5}, .prefixes = {10, 4, 0}, .tree = TU_DEEP, .seed = tu_seed(),
                 .kv_dtype = MLAV_DTYPE_FP8_E4M3};
    tu_problem *p = tu_make(&c);
    const size_t W = (size_t)(c.Dl + c.Dr), ps = (size_t)c.page_size;
    assert_true(p->kv_esz == 1 && p->kv_dtype == MLAV_DTYPE_FP8_E4M3);
    assert_true(p->kv_scale >= 0x1p-6f && p->kv_scale < 0x1p2f && p->c.kv_scale == p->kv_scale);
    unsigned char *used = tu_xcalloc(p->kv_elems / W, 1);
    double sum_sq = 0.0;
    size_t n = 0;
    for (int32_t b = 0; b < c.B; b++)
        for (int32_t j = 0; j < p->kv_lens[b]; j++) {
            const size_t row =
                (size_t)p->page_table[(size_t)b * (size_t)p->prob.max_pages + (size_t)j / ps] * ps +
                (size_t)j % ps;
            used[row] = 1;
            for (size_t d = 0; d < W; d++) {
                const float v = mlav_e4m3_to_f32(((const uint8_t *)p->kv)[row * W + d]);
                if (!isfinite(v))
                    fail_msg("request %d row %d [%zu] is not finite", b, j, d);
                sum_sq += (double)v * v * p->kv_scale * p->kv_scale;
                n++;
            }
        }
    /* uniform [-1, 1) values: a mean square near 1/3 once the scale is applied */
    if (!(fabs(sum_sq / (double)n - 1.0 / 3.0) < 0.05))
        fail_msg("mean square of the KV values %g, expected about 1/3 (kv_scale %g)",
                 sum_sq / (double)n, (double)p->kv_scale);
    for (size_t row = 0; row < p->kv_elems / W; row++)
        for (size_t d = 0; !used[row] && d < W; d++)
            if (((const uint8_t *)p->kv)[row * W + d] != 0x7f)
                fail_msg("unused pool row %zu [%zu] is 0x%02x, not 0x7f", row, d,
                         ((const uint8_t *)p->kv)[row * W + d]);
    free(used);
    tu_free(p);
}

/* ---- bad input ------------------------------------------------------------------------------- */

/* A small FP8 problem: two requests (q 3 and 2, prefix 5 and 0), explicit tree mask; the
 * reference dims, so that the flash kernel (which takes no other) runs it too. */
static tu_problem *small_fp8(mlav_dtype dtype)
{
    tu_case c = {.H = 2, .Dl = 512, .Dr = 64, .page_size = 2, .B = 2, .dtype = dtype,
                 .q_lens = {3, 2}, .prefixes = {5, 0}, .tree = TU_BUSHY, .seed = tu_seed(),
                 .kv_dtype = MLAV_DTYPE_FP8_E4M3};
    return tu_make(&c);
}

/* Nothing written: guards intact, every out and lse element still NaN. */
static void expect_untouched(const tu_problem *p, const char *what)
{
    char msg[128];
    if (!tu_untouched(p, msg, sizeof msg))
        fail_msg("%s: %s", what, msg);
}

/* kv_scale 0, -0, negative, NaN, +-Inf, as the host value and through a host kv_scale_ptr: refused
 * by plan + run and by mlav_verify on this backend (host tensors), the sentence naming kv_scale,
 * nothing written. A good scale then runs. */
static void test_fp8_bad_scale(void **state)
{
    const mlav_backend b = *(const mlav_backend *)*state;
    mlav_context *ctx = tu_context_or_skip(b);
    tu_problem *p = small_fp8(MLAV_DTYPE_BF16);
    mlav_plan *plan = NULL;
    assert_int_equal(mlav_plan_create(ctx, &p->prob, &plan), MLAV_OK);
    const size_t ws_bytes = mlav_plan_workspace_bytes(plan);
    void *ws = NULL;
    if (ws_bytes) {
        ws = mlav_plan_workspace_memory(plan) == MLAV_MEM_HOST
                 ? aligned_alloc(256, (ws_bytes + 255) / 256 * 256)
                 : NULL;
#ifdef MLAV_WITH_CUDA
        if (!ws)
            TU_CK(cudaMalloc(&ws, ws_bytes));
#endif
        assert_non_null(ws);
    }
    const float bad[] = {0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        for (int ptr = 0; ptr < 2; ptr++)
            for (int verify = 0; verify < 2; verify++) {
                char what[96];
                snprintf(what, sizeof what, "%s %s %g%s", mlav_backend_name(b),
                         ptr ? "*kv_scale_ptr" : "kv_scale", (double)bad[k],
                         verify ? " (verify)" : "");
                tu_poison(p);
                mlav_tensors t = tu_tensors(p);
                float scale = bad[k];
                t.kv_scale = ptr ? 1.0f : bad[k]; /* a good value beside a bad pointer */
                t.kv_scale_ptr = ptr ? &scale : NULL;
                const mlav_status s =
                    verify ? mlav_verify(ctx, &p->prob, &t) : mlav_run(plan, &t, ws, ws_bytes, NULL);
                expect_status(s, MLAV_ERR_INVALID_ARG, ptr ? "kv_scale_ptr" : "kv_scale",
                              "finite and > 0", what);
                expect_untouched(p, what);
            }
    /* the control: the scale it was built with runs, as a value and through the pointer */
    tu_reference(p);
    for (int ptr = 0; ptr < 2; ptr++) {
        tu_poison(p);
        mlav_tensors t = tu_tensors(p);
        t.kv_scale = ptr ? 0.0f : p->kv_scale;
        t.kv_scale_ptr = ptr ? &p->kv_scale : NULL;
        expect_status(mlav_run(plan, &t, ws, ws_bytes, NULL), MLAV_OK, NULL, NULL, "good scale");
        char msg[256];
        if (!tu_compare(p, tu_out_tol(p->c.dtype), tu_lse_tol(p->c.dtype), msg, sizeof msg))
            fail_msg("%s, good scale %g%s: %s", mlav_backend_name(b), (double)p->kv_scale,
                     ptr ? " (kv_scale_ptr)" : "", msg);
    }
    if (mlav_plan_workspace_memory(plan) == MLAV_MEM_HOST)
        free(ws);
#ifdef MLAV_WITH_CUDA
    else if (ws)
        TU_CK(cudaFree(ws));
#endif
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    tu_free(p);
}

/* FP8 is a cache dtype only; a cache has the q dtype or is FP8; an unknown kv_dtype is refused;
 * 0 and the q dtype itself mean the q dtype. */
static void test_fp8_bad_dtypes(void **state)
{
    (void)state;
    mlav_context *ctx = tu_context_or_skip(MLAV_BACKEND_CPU);
    tu_problem *p = small_fp8(MLAV_DTYPE_BF16);
    mlav_problem prob = p->prob;
    mlav_plan *plan = NULL;

    prob.dtype = MLAV_DTYPE_FP8_E4M3;
    expect_status(mlav_plan_create(ctx, &prob, &plan), MLAV_ERR_INVALID_ARG, "dtype",
                  "fp8_e4m3", "dtype = fp8_e4m3 (q and out)");
    assert_null(plan);
    prob.kv_dtype = MLAV_DTYPE_F32; /* FP8 q with a same-as-q cache: still refused */
    expect_status(mlav_plan_create(ctx, &prob, &plan), MLAV_ERR_INVALID_ARG, "dtype",
                  "fp8_e4m3", "dtype = fp8_e4m3, kv_dtype 0");
    const struct {
        mlav_dtype q, kv;
    } mixes[] = {
        {MLAV_DTYPE_BF16, MLAV_DTYPE_F16},
        {MLAV_DTYPE_F16, MLAV_DTYPE_BF16},
        {MLAV_DTYPE_F32, MLAV_DTYPE_BF16},
        {MLAV_DTYPE_BF16, (mlav_dtype)7},
        {MLAV_DTYPE_F32, (mlav_dtype)-1},
    };
    for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++) {
        prob = p->prob;
        prob.dtype = mixes[k].q;
        prob.kv_dtype = mixes[k].kv;
        char what[64];
        snprintf(what, sizeof what, "kv_dtype %d under %s q", (int)mixes[k].kv,
                 mlav_dtype_name(mixes[k].q));
        expect_status(mlav_plan_create(ctx, &prob, &plan), MLAV_ERR_INVALID_ARG, "kv_dtype",
                      NULL, what);
        assert_null(plan);
    }
    /* the same-as-q spellings are fine */
    const mlav_dtype same[] = {MLAV_DTYPE_F32, MLAV_DTYPE_BF16};
    for (size_t k = 0; k < 2; k++) {
        prob = p->prob;
        prob.kv_dtype = same[k];
        assert_int_equal(mlav_plan_create(ctx, &prob, &plan), MLAV_OK);
        mlav_plan_free(plan);
        plan = NULL;
    }
    mlav_context_free(ctx);
    tu_free(p);
}

/* out or lse overlapping kv_scale_ptr is refused (an FP8 cache reads it), with the scale's bytes
 * holding a good value; a 16-bit cache ignores kv_scale_ptr, overlap included. */
static void test_fp8_scale_ptr_overlap(void **state)
{
    (void)state;
    mlav_context *ctx = tu_context_or_skip(MLAV_BACKEND_CPU);
    tu_problem *p = small_fp8(MLAV_DTYPE_F32);
    mlav_tensors t = tu_tensors(p);
    float *in_out = (float *)p->out + 3, *in_lse = p->lse + 1;
    *in_out = *in_lse = p->kv_scale;
    t.kv_scale_ptr = in_out;
    expect_status(mlav_verify(ctx, &p->prob, &t), MLAV_ERR_INVALID_ARG, "kv_scale_ptr",
                  "overlaps", "out overlapping kv_scale_ptr");
    t.kv_scale_ptr = in_lse;
    expect_status(mlav_verify(ctx, &p->prob, &t), MLAV_ERR_INVALID_ARG, "kv_scale_ptr",
                  "overlaps", "lse overlapping kv_scale_ptr");
    assert_true(tu_guards_ok(p));
    tu_free(p);

    tu_case c = {.H = 2, .Dl = 8, .Dr = 4, .page_size = 2, .B = 1, .dtype = MLAV_DTYPE_F32,
                 .q_lens = {3}, .prefixes = {4}, .tree = TU_CHAIN, .seed = tu_seed()};
    p = tu_make(&c);
    t = tu_tensors(p);
    t.kv_scale_ptr = (float *)p->out + 3;
    expect_status(mlav_verify(ctx, &p->prob, &t), MLAV_OK, NULL, NULL,
                  "f32 cache, kv_scale_ptr inside out: ignored");
    tu_free(p);
    mlav_context_free(ctx);
}

/* An FP8 cache has 1-byte elements: a host kv_cache at any address is aligned (checked against
 * the oracle on every backend); a kv_scale_ptr off its 4-byte alignment is refused. */
static void test_fp8_alignment(void **state)
{
    const mlav_backend b = *(const mlav_backend *)*state;
    mlav_context *ctx = tu_context_or_skip(b);
    tu_problem *p = small_fp8(MLAV_DTYPE_F16);
    tu_reference(p);
    unsigned char *odd = tu_xcalloc(p->kv_elems + 8, 1);
    memcpy(odd + 1, p->kv, p->kv_elems);
    mlav_tensors t = tu_tensors(p);
    t.kv_cache = odd + 1;
    expect_status(mlav_verify(ctx, &p->prob, &t), MLAV_OK, NULL, NULL, "kv_cache at an odd address");
    char msg[256];
    if (!tu_compare(p, tu_out_tol(p->c.dtype), tu_lse_tol(p->c.dtype), msg, sizeof msg))
        fail_msg("%s, kv_cache at an odd address: %s", mlav_backend_name(b), msg);

    unsigned char scale_bytes[8];
    memcpy(scale_bytes + 1, &p->kv_scale, sizeof(float));
    tu_poison(p);
    t = tu_tensors(p);
    t.kv_scale_ptr = (const float *)(const void *)(scale_bytes + 1);
    expect_status(mlav_verify(ctx, &p->prob, &t), MLAV_ERR_INVALID_ARG, "kv_scale_ptr",
                  "aligned", "kv_scale_ptr at an odd address");
    expect_untouched(p, "kv_scale_ptr at an odd address");
    free(odd);
    tu_free(p);
    mlav_context_free(ctx);
}

/* ---- NaN bytes ------------------------------------------------------------------------------- */

/* Check that the rows marked in `nan_row` [T] are NaN in every out element and lse of every head,
 * and that all others are free of NaN and agree with the oracle. */
static void expect_nan_rows(const tu_problem *p, const int *nan_row, const char *what)
{
    const size_t H = (size_t)p->c.H, Dl = (size_t)p->c.Dl;
    for (size_t r = 0; r < p->lse_elems; r++) {
        const int want = nan_row[r / H];
        if (want != !!isnan(p->lse[r]))
            fail_msg("%s: lse of token %zu head %zu is %g, expected %s", what, r / H, r % H,
                     (double)p->lse[r], want ? "NaN" : "a number");
        for (size_t d = 0; d < Dl; d++) {
            const float v = mlav_load_as_f32(p->out, (int)p->c.dtype, r * Dl + d);
            if (want != !!isnan(v))
                fail_msg("%s: out of token %zu head %zu [%zu] is %g, expected %s", what, r / H,
                         r % H, d, (double)v, want ? "NaN" : "a number");
        }
    }
    char msg[256];
    if (!tu_compare(p, tu_out_tol(p->c.dtype), tu_lse_tol(p->c.dtype), msg, sizeof msg))
        fail_msg("%s: %s", what, msg);
    print_message("  %s: %s\n", what, msg);
}

/* A NaN byte (0x7f, or 0xff) in one visible KV row: in a draft key of a tree that some of its
 * request's nodes see (its c_kv, then its k_pe), then in a prefix row of the other request. The
 * NaN reaches exactly the rows that see that key, on this backend (host tensors). Dims (512, 64),
 * so the flash kernel takes the case too. */
static void test_fp8_nan_rows(void **state)
{
    const mlav_backend b = *(const mlav_backend *)*state;
    mlav_context *ctx = tu_context_or_skip(b);
    tu_case c = {.H = 4, .Dl = 512, .Dr = 64, .page_size = 16, .B = 2, .dtype = MLAV_DTYPE_BF16,
                 .q_lens = {9, 3}, .prefixes = {40, 20}, .tree = TU_DEEP, .seed = tu_seed(),
                 .kv_dtype = MLAV_DTYPE_FP8_E4M3};
    tu_problem *p = tu_make(&c);
    const int32_t T = p->q_indptr[2], words = mlav_tree_mask_words(9), W = c.Dl + c.Dr;
    /* request 0's draft node k with the fewest of its nodes seeing it beyond itself: seen by
     * some rows (itself), never by node 0 */
    int32_t seen[9] = {0}, k = 1;
    for (int32_t n = 1; n < 9; n++) {
        for (int32_t i = 0; i < 9; i++)
            seen[n] += (int32_t)((p->tree_mask[(size_t)i * words] >> n) & 1u);
        if (seen[n] > 1 && (seen[k] == 1 || seen[n] < seen[k]))
            k = n;
    }
    const int32_t best = seen[k];
    const int32_t ps = c.page_size, mp = p->prob.max_pages;
    const size_t row_k = (size_t)p->page_table[(size_t)(40 + k) / (size_t)ps] * (size_t)ps +
                         (size_t)((40 + k) % ps);
    const size_t row_pre = (size_t)p->page_table[(size_t)mp + 7 / (size_t)ps] * (size_t)ps + 7;
    uint8_t *kv = p->kv;
    int *nan_row = tu_xcalloc((size_t)T, sizeof(int));
    const struct {
        size_t at;
        uint8_t byte;
        const char *where;
    } hits[] = {
        {row_k * (size_t)W + 17, 0x7f, "0x7f in c_kv of a draft key"},
        {row_k * (size_t)W + (size_t)c.Dl + 5, 0xff, "0xff in k_pe of a draft key"},
        {row_pre * (size_t)W + 300, 0x7f, "0x7f in c_kv of a prefix row"},
    };
    for (size_t h = 0; h < sizeof hits / sizeof hits[0]; h++) {
        const uint8_t keep = kv[hits[h].at];
        kv[hits[h].at] = hits[h].byte;
        int count = 0;
        for (int32_t t = 0; t < T; t++) {
            if (h < 2) /* request 0's rows whose mask has bit k */
                nan_row[t] = t < 9 && ((p->tree_mask[(size_t)t * words + (size_t)(k / 32)] >>
                                        (k % 32)) & 1u);
            else /* every row of request 1 */
                nan_row[t] = t >= 9;
            count += nan_row[t];
        }
        assert_true(count > 0 && count < T);
        tu_reference(p);
        tu_poison(p);
        mlav_tensors t = tu_tensors(p);
        char what[160];
        if (h < 2)
            snprintf(what, sizeof what, "%s: %s (node %d, seen by %d of 9 nodes), seed 0x%llx",
                     mlav_backend_name(b), hits[h].where, k, best, (unsigned long long)c.seed);
        else
            snprintf(what, sizeof what, "%s: %s (request 1, row 7), seed 0x%llx",
                     mlav_backend_name(b), hits[h].where, (unsigned long long)c.seed);
        mlav_status s = mlav_verify(ctx, &p->prob, &t);
        if (s != MLAV_OK)
            fail_msg("%s: %s: %s", what, mlav_status_string(s), mlav_last_error(NULL));
        expect_nan_rows(p, nan_row, what);
        kv[hits[h].at] = keep;
    }
    free(nan_row);
    tu_free(p);
    mlav_context_free(ctx);
}

/* ---- extreme scales -------------------------------------------------------------------------- */

/* The smallest positive subnormal of an output dtype: the spacing of its values near 0. */
static double subnormal_step(mlav_dtype d)
{
    return d == MLAV_DTYPE_F32 ? 0x1p-149 : d == MLAV_DTYPE_BF16 ? 0x1p-133 : 0x1p-24;
}

/* The comparison of a result at an extreme scale with the fp64 oracle: nothing NaN or infinite;
 * out within the dtype's rel-L2 tolerance, each element's error first reduced by a few of the
 * dtype's subnormal steps (a result in the subnormal range keeps only the bits above that step,
 * in the oracle's own rounding as in ours: `steps`, one per partial state a split merges and
 * one for the store); lse within the tolerance plus its magnitude's share of fp32 (an lse near
 * 1e37 is held to the relative precision of its fp32 dot products, 2^-14 where their terms
 * cancel, not to 1e-3 absolute), or, where the terms cancel more, to the bound of an fp32 dot
 * product itself, (W + 1) 2^-24 x sum |q_d k_d| of the row's largest such sum (lse moves by no
 * more than its largest score does), twice that for the reordered sums of a blocked product. */
static double row_dot_bound(const tu_problem *p, size_t row)
{
    const int32_t H = p->c.H, W = p->c.Dl + p->c.Dr, ps = p->c.page_size;
    const int32_t tok = (int32_t)(row / (size_t)H);
    int32_t b = 0;
    while (p->q_indptr[b + 1] <= tok)
        b++;
    double most = 0.0;
    for (int32_t j = 0; j < p->kv_lens[b]; j++) {
        const int32_t page = p->page_table[(size_t)b * (size_t)p->prob.max_pages + (size_t)(j / ps)];
        const size_t kv0 = ((size_t)page * (size_t)ps + (size_t)(j % ps)) * (size_t)W;
        double sum = 0.0;
        for (int32_t d = 0; d < W; d++) {
            const double q = mlav_load_as_f32(p->q, (int)p->c.dtype, row * (size_t)W + (size_t)d);
            const double k =
                (double)mlav_e4m3_to_f32(((const uint8_t *)p->kv)[kv0 + (size_t)d]) * p->kv_scale;
            sum += fabs(q * k);
        }
        most = sum > most ? sum : most;
    }
    return most * (double)p->prob.softmax_scale;
}

static int compare_extreme(const tu_problem *p, double steps, char *msg, size_t len)
{
    const mlav_dtype dt = p->c.dtype;
    const double floor_abs = steps * subnormal_step(dt);
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < p->out_elems; k++) {
        const double got = mlav_load_as_f32(p->out, (int)dt, k), ref = p->ref_out[k];
        if (!isfinite(got)) {
            snprintf(msg, len, "out[%zu] = %g where the oracle's is %g", k, got, ref);
            return 0;
        }
        const double e = fabs(got - ref) > floor_abs ? fabs(got - ref) - floor_abs : 0.0;
        num += e * e;
        den += ref * ref;
    }
    const double rel = den > 0.0 ? sqrt(num / den) : (num > 0.0 ? INFINITY : 0.0);
    double worst = 0.0;
    for (size_t k = 0; k < p->lse_elems; k++) {
        const double got = p->lse[k], ref = p->ref_lse[k];
        /* an lse past fp32's range (scores of softmax_scale x kv_scale x dot beyond it) is the
         * infinity of its sign */
        const int over = fabs(ref) > FLT_MAX && isfinite(ref);
        if (ref == -INFINITY || over ? got != (ref > 0 ? INFINITY : -INFINITY) : !isfinite(got)) {
            snprintf(msg, len, "lse[%zu] = %g where the oracle's is %g", k, got, ref);
            return 0;
        }
        if (ref == -INFINITY || over)
            continue;
        const double dot_bound = 2.0 * (double)(p->c.Dl + p->c.Dr + 1) * 0x1p-24 *
                                 row_dot_bound(p, k);
        const double share = 0x1p-14 * fabs(ref) > dot_bound ? 0x1p-14 * fabs(ref) : dot_bound;
        const double d = fabs(got - ref) - share;
        worst = d > worst ? d : worst;
    }
    snprintf(msg, len, "out rel-L2 %.3g (beyond %g subnormal steps), lse err %.3g", rel, steps,
             worst);
    return rel <= tu_out_tol(dt) && worst <= tu_lse_tol(dt) && tu_guards_ok(p);
}

/* Every byte of the pool whose e4m3 value exceeds `cap` in magnitude replaced by the byte of
 * cap (of its sign); NaN bytes (unused pages) stay. */
static void cap_bytes(tu_problem *p, float cap)
{
    uint8_t *kv = p->kv;
    const uint8_t pos = mlav_f32_to_e4m3(cap), neg = mlav_f32_to_e4m3(-cap);
    for (size_t i = 0; i < p->kv_elems; i++) {
        const float v = mlav_e4m3_to_f32(kv[i]);
        if (v == v && fabsf(v) > cap)
            kv[i] = v > 0 ? pos : neg;
    }
}

/* Any finite kv_scale > 0 gives results within tolerance of the fp64 oracle wherever the oracle's
 * are representable (docs/DESIGN.md#fp8-kv): kv_scale FLT_MAX over bytes of magnitude <= 1/2
 * and small q (the softmax nearly one-hot, lse near 1e37), and on the CPU backends also with
 * q of magnitude 1 (scores past fp32's range: the out of the one-hot softmax, lse +-inf; the
 * CUDA kernels scale scores before their max is taken, so such rows are NaN there, which
 * docs/RELIABILITY.md records); 2^-126 (FLT_MIN) with q scaled up
 * by 2^126 (huge q whose scores are those of kv_scale 1: a dot product of q and the bytes alone
 * is past fp32's range); 2^-140 and 2^-149 (subnormal) with q up by 2^100. BF16 and F32 q (F16
 * q cannot be that large: its cases keep q and take the small scales as they are), a short
 * problem and one of splits, through plans for one problem with host tensors (on CUDA, the
 * offload path). */
static void test_fp8_scale_extremes(void **state)
{
    const mlav_backend b = *(const mlav_backend *)*state;
    mlav_context *ctx = tu_context_or_skip(b);
    const uint64_t seed = tu_seed();
    static const mlav_dtype dts[] = {MLAV_DTYPE_BF16, MLAV_DTYPE_F32, MLAV_DTYPE_F16};
    enum { S_MAX, S_MAX_Q1, S_MIN, S_2M140, S_2M149, S_CASES };
    static const char *names[S_CASES] = {"FLT_MAX", "FLT_MAX (q ~ 1)", "FLT_MIN", "2^-140",
                                         "2^-149"};
    const int gpu = b == MLAV_BACKEND_CUDA || b == MLAV_BACKEND_CUDA_NAIVE;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (int shape = 0; shape < 2; shape++)
            for (int sc = 0; sc < S_CASES; sc++) {
                const mlav_dtype dt = dts[d];
                if (dt == MLAV_DTYPE_F16 && (sc == S_MAX || sc == S_MAX_Q1))
                    continue; /* out near FLT_MAX is past F16's range: nothing representable */
                if (gpu && sc == S_MAX_Q1)
                    continue;
                tu_case c = {.H = 2, .Dl = 512, .Dr = 64, .page_size = 2, .B = 2, .dtype = dt,
                             .q_lens = {3, 2}, .prefixes = {5, 0}, .tree = TU_BUSHY,
                             .seed = seed + (uint64_t)(d * 16 + shape * 8 + sc),
                             .kv_dtype = MLAV_DTYPE_FP8_E4M3, .kv_scale = 1.0f};
                if (shape) { /* long enough for split-KV on the GPU and the CPU */
                    c.H = 8;
                    c.page_size = 16;
                    c.q_lens[0] = 4;
                    c.prefixes[0] = 3000;
                    c.prefixes[1] = 1200;
                }
                tu_problem *p = tu_make(&c);
                if (sc == S_MAX || sc == S_MAX_Q1) {
                    cap_bytes(p, 0.5f);
                    if (sc == S_MAX)
                        tu_scale_magnitudes(p, 10); /* q down by 2^10: scores near 0.3 */
                    p->kv_scale = FLT_MAX;
                } else if (dt == MLAV_DTYPE_F16) {
                    p->kv_scale = sc == S_MIN ? FLT_MIN : sc == S_2M140 ? 0x1p-140f : 0x1p-149f;
                } else if (sc == S_MIN) {
                    tu_scale_magnitudes(p, -126);
                } else {
                    tu_scale_magnitudes(p, -100);
                    p->kv_scale = sc == S_2M140 ? 0x1p-140f : 0x1p-149f;
                }
                p->c.kv_scale = p->kv_scale;
                tu_reference(p);
                tu_poison(p);
                mlav_tensors t = tu_tensors(p);
                char name[160], msg[256];
                tu_case_name(&p->c, name, sizeof name);
                mlav_plan *plan = NULL;
                mlav_status s = mlav_plan_create(ctx, &p->prob, &plan);
                if (s == MLAV_OK) {
                    const size_t ws_bytes = mlav_plan_workspace_bytes(plan);
                    void *ws = NULL;
                    if (ws_bytes && mlav_plan_workspace_memory(plan) == MLAV_MEM_HOST)
                        ws = aligned_alloc(256, (ws_bytes + 255) / 256 * 256);
#ifdef MLAV_WITH_CUDA
                    else if (ws_bytes)
                        TU_CK(cudaMalloc(&ws, ws_bytes));
#endif
                    s = mlav_run(plan, &t, ws, ws_bytes, NULL);
                    if (mlav_plan_workspace_memory(plan) == MLAV_MEM_HOST)
                        free(ws);
#ifdef MLAV_WITH_CUDA
                    else if (ws)
                        TU_CK(cudaFree(ws));
#endif
                    mlav_plan_free(plan);
                }
                if (s != MLAV_OK)
                    fail_msg("%s, kv_scale %s, %s: %s: %s", mlav_backend_name(b), names[sc], name,
                             mlav_status_string(s), mlav_last_error(NULL));
                if (!compare_extreme(p, 1.0, msg, sizeof msg))
                    fail_msg("%s, kv_scale %s, %s: %s", mlav_backend_name(b), names[sc], name,
                             msg);
                print_message("  %s, kv_scale %s, %s: %s\n", mlav_backend_name(b), names[sc],
                              name, msg);
                tu_free(p);
            }
    mlav_context_free(ctx);
}

/* ---- a device kv_scale_ptr (GPU backends) ---------------------------------------------------- */

/* Device tensors with the scale in device memory: the good scale agrees with the oracle (with
 * tensors.kv_scale 0, so the pointer is what was read); a device value that is not finite and
 * > 0 cannot be refused without a host read, so every row that sees a key is NaN (out and lse)
 * and a row that sees none is still empty (out 0, lse -inf). */
static void test_fp8_device_scale_gpu(void **state)
{
    const mlav_backend b = *(const mlav_backend *)*state;
    mlav_context *ctx = tu_context_or_skip(b);
#ifdef MLAV_WITH_CUDA
    tu_case c = {.H = 8, .Dl = 512, .Dr = 64, .page_size = 64, .B = 2, .dtype = MLAV_DTYPE_BF16,
                 .q_lens = {5, 4}, .prefixes = {0, 100}, .tree = TU_BUSHY, .seed = tu_seed(),
                 .kv_dtype = MLAV_DTYPE_FP8_E4M3};
    tu_problem *p = tu_make(&c);
    const int32_t words = mlav_tree_mask_words(5), T = p->q_indptr[2];
    /* request 0 has no prefix: its node 3 made to see nothing at all */
    for (int32_t w = 0; w < words; w++)
        p->tree_mask[3 * (size_t)words + (size_t)w] = 0;
    tu_reference(p);
    const size_t esz = mlav_dtype_size(c.dtype);
    const size_t q_bytes = p->q_elems * esz, kv_bytes = p->kv_elems * p->kv_esz;
    const size_t pt_bytes = (size_t)c.B * (size_t)p->prob.max_pages * sizeof(int32_t);
    const size_t mask_bytes = (size_t)T * (size_t)words * sizeof(uint32_t);
    const size_t out_bytes = p->out_elems * esz, lse_bytes = p->lse_elems * sizeof(float);
    void *dq, *dkv, *dpt, *dmask, *dout, *dlse, *dscale;
    TU_CK(cudaMalloc(&dq, q_bytes));
    TU_CK(cudaMalloc(&dkv, kv_bytes));
    TU_CK(cudaMalloc(&dpt, pt_bytes));
    TU_CK(cudaMalloc(&dmask, mask_bytes));
    TU_CK(cudaMalloc(&dout, out_bytes));
    TU_CK(cudaMalloc(&dlse, lse_bytes));
    TU_CK(cudaMalloc(&dscale, sizeof(float)));
    TU_CK(cudaMemcpy(dq, p->q, q_bytes, cudaMemcpyHostToDevice));
    TU_CK(cudaMemcpy(dkv, p->kv, kv_bytes, cudaMemcpyHostToDevice));
    TU_CK(cudaMemcpy(dpt, p->page_table, pt_bytes, cudaMemcpyHostToDevice));
    TU_CK(cudaMemcpy(dmask, p->tree_mask, mask_bytes, cudaMemcpyHostToDevice));
    const mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = dq, .kv_cache = dkv,
                            .num_pages = p->num_pages, .page_table = dpt, .tree_mask = dmask,
                            .out = dout, .lse = dlse, .kv_scale = 0.0f, .kv_scale_ptr = dscale};
    mlav_plan *plan = NULL;
    mlav_status s = mlav_plan_create(ctx, &p->prob, &plan);
    if (s != MLAV_OK)
        fail_msg("%s: mlav_plan_create: %s: %s", mlav_backend_name(b), mlav_status_string(s),
                 mlav_last_error(NULL));
    const size_t ws_bytes = mlav_plan_workspace_bytes(plan);
    void *ws = NULL;
    if (ws_bytes)
        TU_CK(cudaMalloc(&ws, ws_bytes));
    const float scales[] = {p->kv_scale, 0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY};
    int *nan_row = tu_xcalloc((size_t)T, sizeof(int));
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
        TU_CK(cudaMemcpy(dscale, &scales[k], sizeof(float), cudaMemcpyHostToDevice));
        TU_CK(cudaMemset(dout, 0xff, out_bytes));
        TU_CK(cudaMemset(dlse, 0xff, lse_bytes));
        s = mlav_run(plan, &t, ws, ws_bytes, NULL);
        if (s != MLAV_OK)
            fail_msg("%s, device scale %g: %s: %s", mlav_backend_name(b), (double)scales[k],
                     mlav_status_string(s), mlav_last_error(NULL));
        TU_CK(cudaDeviceSynchronize());
        TU_CK(cudaMemcpy(p->out, dout, out_bytes, cudaMemcpyDeviceToHost));
        TU_CK(cudaMemcpy(p->lse, dlse, lse_bytes, cudaMemcpyDeviceToHost));
        char what[96];
        snprintf(what, sizeof what, "%s, device scale %g", mlav_backend_name(b),
                 (double)scales[k]);
        if (k == 0) { /* the good one */
            char msg[256];
            if (!tu_compare(p, tu_out_tol(c.dtype), tu_lse_tol(c.dtype), msg, sizeof msg))
                fail_msg("%s (seed 0x%llx): %s", what, (unsigned long long)c.seed, msg);
            print_message("  %s: %s\n", what, msg);
            continue;
        }
        for (size_t r = 0; r < p->lse_elems; r++) {
            const int empty = r / (size_t)c.H == 3; /* token 3 sees no key */
            if (empty ? p->lse[r] != -INFINITY : !isnan(p->lse[r]))
                fail_msg("%s: lse of token %zu head %zu is %g, expected %s", what,
                         r / (size_t)c.H, r % (size_t)c.H, (double)p->lse[r],
                         empty ? "-inf" : "NaN");
            for (size_t d = 0; d < (size_t)c.Dl; d++) {
                const float v = mlav_load_as_f32(p->out, (int)c.dtype, r * (size_t)c.Dl + d);
                if (empty ? v != 0.0f : !isnan(v))
                    fail_msg("%s: out of token %zu head %zu [%zu] is %g, expected %s", what,
                             r / (size_t)c.H, r % (size_t)c.H, d, (double)v,
                             empty ? "0" : "NaN");
            }
        }
        print_message("  %s: NaN in every row that sees a key, the empty row empty\n", what);
    }
    free(nan_row);
    if (ws)
        TU_CK(cudaFree(ws));
    cudaFree(dq);
    cudaFree(dkv);
    cudaFree(dpt);
    cudaFree(dmask);
    cudaFree(dout);
    cudaFree(dlse);
    cudaFree(dscale);
    mlav_plan_free(plan);
    tu_free(p);
#endif
    mlav_context_free(ctx);
}

#ifdef MLAV_WITH_CUDA
/* Run p on the device, as a plan for one problem or (limits) as a plan for limits at exactly
 * its sizes (its lengths through a host update), with the scale `scale` in device memory
 * through kv_scale_ptr; out and lse back into p (exactly sized device buffers, so that
 * compute-sanitizer sees any write past them). */
static void run_device(mlav_context *ctx, tu_problem *p, int limits, float scale)
{
    const mlav_dtype dt = p->c.dtype;
    const size_t esz = mlav_dtype_size(dt);
    const int32_t T = p->q_indptr[p->c.B];
    int32_t max_q = 0, max_kv = 0;
    for (int32_t b = 0; b < p->c.B; b++) {
        const int32_t q = p->q_indptr[b + 1] - p->q_indptr[b];
        max_q = q > max_q ? q : max_q;
        max_kv = p->kv_lens[b] > max_kv ? p->kv_lens[b] : max_kv;
    }
    const size_t q_bytes = p->q_elems * esz, kv_bytes = p->kv_elems * p->kv_esz;
    const size_t pt_bytes = (size_t)p->c.B * (size_t)p->prob.max_pages * sizeof(int32_t);
    const size_t mask_bytes = (size_t)T * (size_t)mlav_tree_mask_words(max_q) * sizeof(uint32_t);
    const size_t out_bytes = p->out_elems * esz, lse_bytes = p->lse_elems * sizeof(float);
    void *dq, *dkv, *dpt, *dmask = NULL, *dout, *dlse, *dscale;
    TU_CK(cudaMalloc(&dq, q_bytes));
    TU_CK(cudaMalloc(&dkv, kv_bytes));
    TU_CK(cudaMalloc(&dpt, pt_bytes));
    TU_CK(cudaMalloc(&dout, out_bytes));
    TU_CK(cudaMalloc(&dlse, lse_bytes));
    TU_CK(cudaMalloc(&dscale, sizeof(float)));
    TU_CK(cudaMemcpy(dq, p->q, q_bytes, cudaMemcpyHostToDevice));
    TU_CK(cudaMemcpy(dkv, p->kv, kv_bytes, cudaMemcpyHostToDevice));
    TU_CK(cudaMemcpy(dpt, p->page_table, pt_bytes, cudaMemcpyHostToDevice));
    if (p->tree_mask) {
        TU_CK(cudaMalloc(&dmask, mask_bytes));
        TU_CK(cudaMemcpy(dmask, p->tree_mask, mask_bytes, cudaMemcpyHostToDevice));
    }
    TU_CK(cudaMemcpy(dscale, &scale, sizeof scale, cudaMemcpyHostToDevice));
    TU_CK(cudaMemset(dout, 0xff, out_bytes));
    TU_CK(cudaMemset(dlse, 0xff, lse_bytes));
    const mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = dq, .kv_cache = dkv,
                            .num_pages = p->num_pages, .page_table = dpt, .tree_mask = dmask,
                            .out = dout, .lse = dlse, .kv_scale = 0.0f, .kv_scale_ptr = dscale};
    mlav_plan *plan = NULL;
    mlav_status s;
    if (limits) {
        const mlav_limits lim = {.max_batch = p->c.B, .max_tokens = T, .max_q_len = max_q,
                                 .max_kv_len = max_kv};
        s = mlav_plan_create_for_limits(ctx, &p->prob, &lim, &plan);
    } else {
        s = mlav_plan_create(ctx, &p->prob, &plan);
    }
    if (s != MLAV_OK)
        fail_msg("plan: %s: %s", mlav_status_string(s), mlav_last_error(NULL));
    const size_t ws_bytes = mlav_plan_workspace_bytes(plan);
    void *ws = NULL;
    if (ws_bytes)
        TU_CK(cudaMalloc(&ws, ws_bytes));
    if (limits) {
        const mlav_lengths len = {MLAV_MEM_HOST, p->c.B, p->q_indptr, p->kv_lens};
        s = mlav_plan_update(plan, &len, ws, ws_bytes, NULL);
        if (s != MLAV_OK)
            fail_msg("update: %s: %s", mlav_status_string(s), mlav_last_error(NULL));
    }
    s = mlav_run(plan, &t, ws, ws_bytes, NULL);
    if (s != MLAV_OK)
        fail_msg("run: %s: %s", mlav_status_string(s), mlav_last_error(NULL));
    TU_CK(cudaDeviceSynchronize());
    TU_CK(cudaMemcpy(p->out, dout, out_bytes, cudaMemcpyDeviceToHost));
    TU_CK(cudaMemcpy(p->lse, dlse, lse_bytes, cudaMemcpyDeviceToHost));
    if (ws)
        TU_CK(cudaFree(ws));
    mlav_plan_free(plan);
    cudaFree(dq);
    cudaFree(dkv);
    cudaFree(dpt);
    cudaFree(dmask);
    cudaFree(dout);
    cudaFree(dlse);
    cudaFree(dscale);
}
#endif

/* The extreme scales of test_fp8_scale_extremes on the device path: device tensors, the scale
 * through a device kv_scale_ptr, a plan for one problem and a plan for limits (cuda: the STEP
 * instances; cuda-naive: its step read on the device), exactly sized outputs. Before the score factor was split (fp8_score_factors),
 * 2^-126 under q near 2^126 gave NaN lse and out on both kinds. A scale that is not finite and
 * > 0 (0, -1, NaN, Inf) makes every row NaN on both (each row here sees a key). */
static void test_fp8_scale_extremes_gpu(void **state)
{
    const mlav_backend b = *(const mlav_backend *)*state;
    mlav_context *ctx = tu_context_or_skip(b);
#ifdef MLAV_WITH_CUDA
    const uint64_t seed = tu_seed();
    static const mlav_dtype dts[] = {MLAV_DTYPE_BF16, MLAV_DTYPE_F32, MLAV_DTYPE_F16};
    enum { S_MAX, S_MIN, S_2M140, S_2M149, S_ZERO, S_NEG, S_NAN, S_INF, S_CASES };
    static const char *names[S_CASES] = {"FLT_MAX", "FLT_MIN", "2^-140", "2^-149",
                                         "0",       "-1",      "NaN",    "Inf"};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (int shape = 0; shape < 2; shape++)
            for (int sc = 0; sc < S_CASES; sc++)
                for (int limits = 0; limits < 2; limits++) {
                    const mlav_dtype dt = dts[d];
                    if (dt == MLAV_DTYPE_F16 && sc == S_MAX)
                        continue;
                    tu_case c = {.H = 2, .Dl = 512, .Dr = 64, .page_size = 2, .B = 2,
                                 .dtype = dt, .q_lens = {3, 2}, .prefixes = {5, 0},
                                 .tree = TU_BUSHY,
                                 .seed = seed + (uint64_t)(d * 64 + shape * 32 + sc * 2 + limits),
                                 .kv_dtype = MLAV_DTYPE_FP8_E4M3, .kv_scale = 1.0f};
                    if (shape) {
                        c.H = 8;
                        c.page_size = 16;
                        c.q_lens[0] = 4;
                        c.prefixes[0] = 3000;
                        c.prefixes[1] = 1200;
                    }
                    tu_problem *p = tu_make(&c);
                    float scale = 1.0f;
                    if (sc == S_MAX) {
                        cap_bytes(p, 0.5f);
                        tu_scale_magnitudes(p, 10);
                        scale = FLT_MAX;
                    } else if (sc >= S_ZERO) {
                        scale = sc == S_ZERO ? 0.0f : sc == S_NEG ? -1.0f
                                : sc == S_NAN ? NAN : INFINITY;
                    } else if (dt == MLAV_DTYPE_F16) {
                        scale = sc == S_MIN ? FLT_MIN : sc == S_2M140 ? 0x1p-140f : 0x1p-149f;
                    } else if (sc == S_MIN) {
                        tu_scale_magnitudes(p, -126);
                        scale = p->kv_scale;
                    } else {
                        tu_scale_magnitudes(p, -100);
                        scale = sc == S_2M140 ? 0x1p-140f : 0x1p-149f;
                    }
                    if (sc < S_ZERO) {
                        p->kv_scale = scale;
                        p->c.kv_scale = scale;
                        tu_reference(p);
                    }
                    char name[160], msg[256];
                    tu_case_name(&p->c, name, sizeof name);
                    run_device(ctx, p, limits, scale);
                    const char *kind = limits ? "plan for limits" : "plan";
                    if (sc >= S_ZERO) {
                        for (size_t r = 0; r < p->lse_elems; r++)
                            if (!isnan(p->lse[r]) ||
                                !isnan(mlav_load_as_f32(p->out, (int)dt, r * (size_t)c.Dl)))
                                fail_msg("%s %s, device kv_scale %s, %s: row %zu not NaN",
                                         mlav_backend_name(b), kind, names[sc], name, r);
                        tu_free(p);
                        continue;
                    }
                    if (!compare_extreme(p, 1.0, msg, sizeof msg))
                        fail_msg("%s %s, device kv_scale %s, %s: %s", mlav_backend_name(b), kind,
                                 names[sc], name, msg);
                    print_message("  %s %s, device kv_scale %s, %s: %s\n", mlav_backend_name(b),
                                  kind, names[sc], name, msg);
                    tu_free(p);
                }
#endif
    mlav_context_free(ctx);
}

int main(void)
{
    static struct CMUnitTest tests[32];
    static char names[32][96];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fp8_decode_all_bytes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fp8_encode_rounding);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fp8_fixture_pool);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fp8_bad_dtypes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fp8_scale_ptr_overlap);
    static const struct {
        CMUnitTestFunction f;
        const char *name;
        int gpu_only;
    } per_backend[] = {
        {test_fp8_bad_scale, "test_fp8_bad_scale", 0},
        {test_fp8_alignment, "test_fp8_alignment", 0},
        {test_fp8_nan_rows, "test_fp8_nan_rows", 0},
        {test_fp8_scale_extremes, "test_fp8_scale_extremes", 0},
        {test_fp8_device_scale_gpu, "test_fp8_device_scale_gpu", 1},
        {test_fp8_scale_extremes_gpu, "test_fp8_scale_extremes_gpu", 1},
    };
    for (size_t f = 0; f < sizeof per_backend / sizeof per_backend[0]; f++)
        for (size_t k = 0; k < sizeof backends / sizeof backends[0]; k++) {
            const mlav_backend b = backends[k];
            if (per_backend[f].gpu_only && b != MLAV_BACKEND_CUDA && b != MLAV_BACKEND_CUDA_NAIVE)
                continue;
            snprintf(names[n], sizeof names[n], "%s(%s)", per_backend[f].name,
                     mlav_backend_name(b));
            tests[n] = (struct CMUnitTest){names[n], per_backend[f].f, NULL, NULL,
                                           (void *)&backends[k]};
            n++;
        }
    const char *filter = getenv("MLAV_TEST_FILTER"); /* MLAV_TEST_FILTER=*nan_rows* */
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return _cmocka_run_group_tests("fp8", tests, n, NULL, NULL);
}
