/* Engine steps on the CPU backends: one plan for limits serves 200 steps of an engine's loop
 * (requests growing, finishing and arriving, padded batches, fresh trees; an FP8 cache with one
 * layer's scale as a value and the other's through kv_scale_ptr, redrawn every step), each layer
 * of each step checked against the fp64 oracle; host lengths past the limits refused with a sentence;
 * the step rule's schedules cover every request's rows and KV rows exactly once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/schedule_step.h"
#include "mlaverify.h"
#include "steps_fixture.h"
#include "test_util.h"

/* A host workspace as the API asks for one: 256-byte aligned. */
static void *ws_alloc(size_t bytes)
{
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    assert_non_null(p);
    return p;
}

static const mlav_limits LIM = {.max_batch = 6, .max_tokens = 40, .max_q_len = 16,
                                .max_kv_len = 400};

static void engine_loop(mlav_backend backend, mlav_dtype dtype, mlav_dtype kv_dtype, int steps)
{
    const uint64_t seed = tu_seed();
    sf_engine *e = sf_make(&LIM, 4, 64, 16, 16, dtype, kv_dtype, 2, seed);
    const char *kv = e->kv_dtype == dtype ? "" : ",kv=fp8_e4m3";
    mlav_context *ctx;
    assert_int_equal(mlav_context_create(&ctx, backend), MLAV_OK);
    mlav_problem shape = sf_shape(e);
    mlav_plan *plan;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &plan), MLAV_OK);
    mlav_limits got;
    assert_int_equal(mlav_plan_limits(plan, &got), MLAV_OK);
    assert_memory_equal(&got, &LIM, sizeof got);
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    void *ws = ws_alloc(bytes);
    memset(ws, 0xff, bytes); /* NaN poison */
    for (int s = 0; s < steps; s++) {
        sf_step(e, s % 3 == 0); /* every third step padded to max_batch, as a graph would be */
        sf_poison(e);
        const mlav_lengths len = sf_lengths(e);
        assert_int_equal(mlav_plan_update(plan, &len, ws, bytes, NULL), MLAV_OK);
        for (int l = 0; l < e->layers; l++) {
            const mlav_tensors t = sf_tensors(e, l);
            mlav_status st = mlav_run(plan, &t, ws, bytes, NULL);
            if (st != MLAV_OK)
                fail_msg("%s %s%s step %d layer %d: %s (seed 0x%llx)",
                         mlav_backend_name(backend), mlav_dtype_name(dtype), kv, s, l,
                         mlav_last_error(NULL), (unsigned long long)seed);
            char msg[256];
            if (!sf_check(e, l, e->out[l], e->lse[l], msg, sizeof msg))
                fail_msg("%s %s%s step %d layer %d (batch %d, %d live, %d tokens, kv_scale %g): "
                         "%s (seed 0x%llx)",
                         mlav_backend_name(backend), mlav_dtype_name(dtype), kv, s, l, e->batch,
                         e->live, e->q_indptr[e->batch], (double)e->kv_scale[l], msg,
                         (unsigned long long)seed);
        }
        int32_t bad = 0;
        assert_int_equal(mlav_plan_step_status(plan, ws, bytes, NULL, &bad), MLAV_OK);
        assert_int_equal(bad, -1);
    }
    free(ws);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    sf_free(e);
}

static void test_steps_engine_loop_cpu_f32(void **state)
{
    (void)state;
    engine_loop(MLAV_BACKEND_CPU, MLAV_DTYPE_F32, 0, 200);
}

static void test_steps_engine_loop_cpu_bf16(void **state)
{
    (void)state;
    engine_loop(MLAV_BACKEND_CPU, MLAV_DTYPE_BF16, 0, 60);
}

static void test_steps_engine_loop_cpu_bf16_fp8(void **state)
{
    (void)state;
    engine_loop(MLAV_BACKEND_CPU, MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3, 60);
}

static void test_steps_engine_loop_reference_f16(void **state)
{
    (void)state;
    engine_loop(MLAV_BACKEND_REFERENCE, MLAV_DTYPE_F16, 0, 30);
}

/* An update refused: the status, and a sentence containing `words`. */
static void refused(const mlav_plan *plan, const mlav_lengths *len, void *ws, size_t bytes,
                    mlav_status want, const char *words)
{
    assert_int_equal(mlav_plan_update(plan, len, ws, bytes, NULL), want);
    if (!strstr(mlav_last_error(NULL), words))
        fail_msg("the sentence '%s' does not say '%s'", mlav_last_error(NULL), words);
}

static void test_steps_bad_host_lengths(void **state)
{
    (void)state;
    mlav_context *ctx;
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_CPU), MLAV_OK);
    mlav_problem shape = {.num_heads = 2, .d_latent = 8, .d_rope = 0, .softmax_scale = 0.5f,
                          .dtype = MLAV_DTYPE_F32, .page_size = 4, .max_pages = 100};
    mlav_plan *plan;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &plan), MLAV_OK);
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    void *ws = ws_alloc(bytes);
    int32_t qi[8] = {0, 4, 8}, kv[8] = {10, 20};
    mlav_lengths len = {MLAV_MEM_HOST, 2, qi, kv};
    assert_int_equal(mlav_plan_update(plan, &len, ws, bytes, NULL), MLAV_OK);

    len.batch = 7;
    refused(plan, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "max_batch");
    len.batch = -1;
    refused(plan, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "batch");
    len.batch = 2;
    qi[2] = 30; /* q_len 26 > 16 */
    refused(plan, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "max_q_len");
    qi[2] = 8;
    kv[1] = 401;
    refused(plan, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "max_kv_len");
    kv[1] = 3; /* < q_len 4 */
    refused(plan, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "less than q_len");
    kv[1] = 20;
    qi[1] = 9; /* decreasing */
    refused(plan, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "decreasing");
    qi[1] = 4;
    qi[0] = 1;
    refused(plan, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "q_indptr[0]");
    qi[0] = 0;
    int32_t qi3[4] = {0, 16, 32, 48}, kv3[3] = {16, 16, 16}; /* 48 tokens > 40 */
    mlav_lengths many = {MLAV_MEM_HOST, 3, qi3, kv3};
    refused(plan, &many, ws, bytes, MLAV_ERR_INVALID_ARG, "max_tokens");
    mlav_lengths dev = {MLAV_MEM_DEVICE, 2, qi, kv};
    refused(plan, &dev, ws, bytes, MLAV_ERR_UNSUPPORTED, "host lengths");
    refused(plan, &len, ws, bytes - 1, MLAV_ERR_WORKSPACE, "smaller");
    refused(plan, &len, NULL, bytes, MLAV_ERR_WORKSPACE, "NULL");
    refused(plan, &len, (char *)ws + 4, bytes, MLAV_ERR_WORKSPACE, "aligned");
    mlav_lengths nulls = {MLAV_MEM_HOST, 2, NULL, kv};
    refused(plan, &nulls, ws, bytes, MLAV_ERR_INVALID_ARG, "NULL");
    mlav_lengths badmem = {(mlav_memory)7, 2, qi, kv};
    refused(plan, &badmem, ws, bytes, MLAV_ERR_INVALID_ARG, "mlav_memory");
    /* a refused update leaves the last good step in place */
    int32_t bad = 0;
    assert_int_equal(mlav_plan_step_status(plan, ws, bytes, NULL, &bad), MLAV_OK);
    assert_int_equal(bad, -1);
    /* device tensors on a CPU plan for limits */
    float dummy[64];
    mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = dummy, .kv_cache = dummy, .num_pages = 1,
                      .page_table = qi, .out = dummy};
    assert_int_equal(mlav_run(plan, &t, ws, bytes, NULL), MLAV_ERR_UNSUPPORTED);

    /* a plan for one problem takes no update */
    mlav_problem one = shape;
    one.batch = 2;
    one.q_indptr = qi;
    one.kv_lens = kv;
    mlav_plan *exact;
    assert_int_equal(mlav_plan_create(ctx, &one, &exact), MLAV_OK);
    refused(exact, &len, ws, bytes, MLAV_ERR_INVALID_ARG, "for_limits");
    mlav_limits l;
    assert_int_equal(mlav_plan_limits(exact, &l), MLAV_ERR_INVALID_ARG);
    mlav_plan_free(exact);
    free(ws);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
}

static void test_steps_bad_limits(void **state)
{
    (void)state;
    mlav_context *ctx;
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_CPU), MLAV_OK);
    mlav_problem shape = {.num_heads = 2, .d_latent = 8, .d_rope = 0, .softmax_scale = 0.5f,
                          .dtype = MLAV_DTYPE_F32, .page_size = 4, .max_pages = 100};
    const struct {
        mlav_limits lim;
        const char *words;
    } cases[] = {
        {{0, 10, 4, 100}, "max_batch"},
        {{mlav_limits_max_batch() + 1, 10, 4, 100}, "max_batch"},
        {{2, 0, 1, 100}, "max_tokens"},
        {{2, 10, 11, 100}, "max_q_len"},
        {{2, 10, 0, 100}, "max_q_len"},
        {{2, 10, 4, 3}, "max_kv_len"},
        {{2, 10, 4, 401}, "max_pages"}, /* past max_pages * page_size = 400 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mlav_plan *plan = (mlav_plan *)&cases; /* must be reset to NULL */
        assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &cases[i].lim, &plan),
                         MLAV_ERR_INVALID_ARG);
        assert_null(plan);
        if (!strstr(mlav_last_error(NULL), cases[i].words))
            fail_msg("case %zu: '%s' does not say '%s'", i, mlav_last_error(NULL),
                     cases[i].words);
    }
    mlav_plan *plan;
    assert_int_equal(mlav_plan_create_for_limits(ctx, NULL, &LIM, &plan), MLAV_ERR_INVALID_ARG);
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, NULL, &plan), MLAV_ERR_INVALID_ARG);
    shape.num_heads = 0;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &plan), MLAV_ERR_INVALID_ARG);
    mlav_context_free(ctx);
}

/* ---- hostile use of plans for limits (cpu and reference: the host path) ---------------------- */

static const mlav_backend HOST_BACKENDS[] = {MLAV_BACKEND_CPU, MLAV_BACKEND_REFERENCE};

/* A run refused: the status, a sentence containing `words`, and out/lse still their NaN poison
 * (n_out elements of dtype, n_lse floats). */
static void run_refused(const mlav_plan *plan, const mlav_tensors *t, void *ws, size_t bytes,
                        mlav_status want, const char *words, const char *what)
{
    const mlav_status s = mlav_run(plan, t, ws, bytes, NULL);
    if (s != want)
        fail_msg("%s: mlav_run gave %s, expected %s (%s)", what, mlav_status_string(s),
                 mlav_status_string(want), mlav_last_error(NULL));
    if (words && !strstr(mlav_last_error(NULL), words))
        fail_msg("%s: the sentence '%s' does not say '%s'", what, mlav_last_error(NULL), words);
}

static int all_nan_bytes(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != 0xff)
            return 0;
    return 1;
}

/* Layer 0's out and lse still sf_poison's NaN (F32 engines). */
static int untouched(const sf_engine *e)
{
    const float *o = e->out[0];
    for (size_t i = 0; i < e->out_bytes / sizeof(float); i++)
        if (!isnan(o[i]))
            return 0;
    for (size_t i = 0; i < e->lse_bytes / sizeof(float); i++)
        if (!isnan(e->lse[0][i]))
            return 0;
    return 1;
}

/* A workspace belongs to the plan whose update wrote it last. Plan B (smaller limits) running on
 * plan A's step, with out and lse of exactly B's limits' sizes, is refused (MLAV_ERR_WORKSPACE)
 * and writes nothing (before the provenance check it wrote all of A's rows past B's out); A on
 * B's step likewise (it mixed B's q_indptr with A's stale kv_lens: a wrong answer with
 * MLAV_OK); a second plan of the same limits too; step_status says so for each; a workspace no
 * update wrote (zeroed, 0xff) is refused; a step written over past the limits since its update
 * is refused; the owner's own runs go on as before. */
static void test_steps_foreign_workspace(void **state)
{
    (void)state;
    const uint64_t seed = tu_seed();
    const mlav_limits LB = {.max_batch = 2, .max_tokens = 8, .max_q_len = 4, .max_kv_len = 200};
    for (size_t k = 0; k < sizeof HOST_BACKENDS / sizeof HOST_BACKENDS[0]; k++) {
        const mlav_backend be = HOST_BACKENDS[k];
        sf_engine *e = sf_make(&LIM, 2, 32, 8, 16, MLAV_DTYPE_F32, 0, 1, seed);
        mlav_context *ctx;
        assert_int_equal(mlav_context_create(&ctx, be), MLAV_OK);
        const mlav_problem shape = sf_shape(e);
        mlav_plan *a, *a2, *b;
        assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &a), MLAV_OK);
        assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &a2), MLAV_OK);
        assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LB, &b), MLAV_OK);
        const size_t ba = mlav_plan_workspace_bytes(a), bb = mlav_plan_workspace_bytes(b);
        const size_t bytes = ba > bb ? ba : bb;
        void *ws = ws_alloc(bytes);
        /* B's outputs of exactly its limits' sizes (ASan sees a write past them) */
        const size_t b_out = (size_t)LB.max_tokens * (size_t)e->H * (size_t)e->Dl * e->esz;
        const size_t b_lse = (size_t)LB.max_tokens * (size_t)e->H * sizeof(float);
        void *out_b = malloc(b_out);
        float *lse_b = malloc(b_lse);
        assert_true(out_b && lse_b);
        memset(out_b, 0xff, b_out);
        memset(lse_b, 0xff, b_lse);
        mlav_tensors tb = sf_tensors(e, 0);
        tb.out = out_b;
        tb.lse = lse_b;
        char what[96];

        /* a workspace no update wrote */
        for (int fill = 0; fill < 2; fill++) {
            memset(ws, fill ? 0xff : 0x00, bytes);
            snprintf(what, sizeof what, "%s, run before any update (0x%02x)",
                     mlav_backend_name(be), fill ? 0xff : 0);
            const mlav_tensors ta = sf_tensors(e, 0);
            sf_poison(e);
            run_refused(a, &ta, ws, bytes, MLAV_ERR_WORKSPACE, "no mlav_plan_update", what);
            assert_true(untouched(e));
            int32_t bad = 7;
            assert_int_equal(mlav_plan_step_status(a, ws, bytes, NULL, &bad), MLAV_ERR_WORKSPACE);
            assert_int_equal(bad, -1);
        }

        /* A's step (its first rows long, past B's limits), run by B, A2, and by A */
        const int32_t prefixes[6] = {150, 120, 3, 0, 60, 9};
        sf_step_prefixes(e, 6, prefixes, 0);
        const mlav_lengths la = sf_lengths(e);
        assert_true(e->q_indptr[e->batch] > LB.max_tokens);
        assert_int_equal(mlav_plan_update(a, &la, ws, bytes, NULL), MLAV_OK);
        snprintf(what, sizeof what, "%s, plan B on plan A's step", mlav_backend_name(be));
        run_refused(b, &tb, ws, bytes, MLAV_ERR_WORKSPACE, "another plan", what);
        assert_true(all_nan_bytes(out_b, b_out) && all_nan_bytes(lse_b, b_lse));
        int32_t bad = 7;
        assert_int_equal(mlav_plan_step_status(b, ws, bytes, NULL, &bad), MLAV_ERR_WORKSPACE);
        assert_int_equal(bad, -1);
        sf_poison(e);
        mlav_tensors ta = sf_tensors(e, 0);
        snprintf(what, sizeof what, "%s, plan A2 (same limits) on plan A's step",
                 mlav_backend_name(be));
        run_refused(a2, &ta, ws, bytes, MLAV_ERR_WORKSPACE, "another plan", what);
        assert_true(untouched(e));
        assert_int_equal(mlav_plan_step_status(a2, ws, bytes, NULL, NULL), MLAV_ERR_WORKSPACE);
        /* the owner's run */
        assert_int_equal(mlav_plan_step_status(a, ws, bytes, NULL, &bad), MLAV_OK);
        assert_int_equal(bad, -1);
        assert_int_equal(mlav_run(a, &ta, ws, bytes, NULL), MLAV_OK);
        char msg[256];
        if (!sf_check(e, 0, e->out[0], e->lse[0], msg, sizeof msg))
            fail_msg("%s, A on its own step: %s (seed 0x%llx)", mlav_backend_name(be), msg,
                     (unsigned long long)seed);

        /* B's step, run by A */
        const int32_t qb[3] = {0, 3, 5}, kb[2] = {40, 2};
        const mlav_lengths lb = {MLAV_MEM_HOST, 2, qb, kb};
        assert_int_equal(mlav_plan_update(b, &lb, ws, bytes, NULL), MLAV_OK);
        sf_poison(e);
        snprintf(what, sizeof what, "%s, plan A on plan B's step", mlav_backend_name(be));
        run_refused(a, &ta, ws, bytes, MLAV_ERR_WORKSPACE, "another plan", what);
        assert_true(untouched(e));
        assert_int_equal(mlav_plan_step_status(a, ws, bytes, NULL, NULL), MLAV_ERR_WORKSPACE);
        assert_int_equal(mlav_plan_step_status(b, ws, bytes, NULL, NULL), MLAV_OK);

        /* A's step written over since its update: a kv_len past the limits, a batch past them */
        assert_int_equal(mlav_plan_update(a, &la, ws, bytes, NULL), MLAV_OK);
        /* after the header: q_indptr [max_batch + 1], then kv_lens */
        int32_t *words = (int32_t *)((char *)ws + sizeof(mlav_step_header));
        const int32_t keep = words[LIM.max_batch + 1];
        words[LIM.max_batch + 1] = LIM.max_kv_len + 1;
        sf_poison(e);
        snprintf(what, sizeof what, "%s, a kv_len written over", mlav_backend_name(be));
        run_refused(a, &ta, ws, bytes, MLAV_ERR_WORKSPACE, "written over", what);
        assert_true(untouched(e));
        words[LIM.max_batch + 1] = keep;
        ((int32_t *)ws)[1] = LIM.max_batch + 1; /* the header's batch */
        snprintf(what, sizeof what, "%s, a batch written over", mlav_backend_name(be));
        run_refused(a, &ta, ws, bytes, MLAV_ERR_WORKSPACE, "written over", what);
        assert_true(untouched(e));

        free(out_b);
        free(lse_b);
        free(ws);
        mlav_plan_free(a);
        mlav_plan_free(a2);
        mlav_plan_free(b);
        mlav_context_free(ctx);
        sf_free(e);
    }
}

/* Padding requests (q_len 0), as engines pad a graph's batch: whatever their kv_len (negative,
 * past the limits, INT32_MAX) and page ids (-1, past the pool), the update takes the step and
 * the run skips them, on the host path as on the device one (before: the run refused the whole
 * step). */
static void test_steps_padding_garbage(void **state)
{
    (void)state;
    const uint64_t seed = tu_seed();
    const int32_t garbage[] = {-1, -100000, LIM.max_kv_len + 1, INT32_MAX, INT32_MIN};
    for (size_t k = 0; k < sizeof HOST_BACKENDS / sizeof HOST_BACKENDS[0]; k++) {
        const mlav_backend be = HOST_BACKENDS[k];
        sf_engine *e = sf_make(&LIM, 2, 32, 8, 16, MLAV_DTYPE_F32, 0, 1, seed);
        mlav_context *ctx;
        assert_int_equal(mlav_context_create(&ctx, be), MLAV_OK);
        const mlav_problem shape = sf_shape(e);
        mlav_plan *plan;
        assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &plan), MLAV_OK);
        const size_t bytes = mlav_plan_workspace_bytes(plan);
        void *ws = ws_alloc(bytes);
        int32_t kv[LIM.max_batch];
        int padded = 0;
        for (int s = 0; s < 40 || !padded; s++) {
            sf_step(e, 1);
            if (e->live == e->batch) {
                if (s > 400)
                    fail_msg("no padded step in 400 (seed 0x%llx)", (unsigned long long)seed);
                continue;
            }
            padded++;
            memcpy(kv, e->kv_lens, sizeof(int32_t) * (size_t)e->batch);
            for (int32_t b = e->live; b < e->batch; b++) {
                kv[b] = garbage[(size_t)(s + b) % (sizeof garbage / sizeof garbage[0])];
                for (int32_t j = 0; j < e->max_pages; j++)
                    e->page_table[(size_t)b * (size_t)e->max_pages + (size_t)j] =
                        (s + j) % 2 ? -1 : (int32_t)e->num_pages + j;
            }
            mlav_lengths len = sf_lengths(e);
            len.kv_lens = kv;
            const mlav_status su = mlav_plan_update(plan, &len, ws, bytes, NULL);
            if (su != MLAV_OK)
                fail_msg("%s step %d: update of a padded step: %s: %s", mlav_backend_name(be), s,
                         mlav_status_string(su), mlav_last_error(NULL));
            sf_poison(e);
            const mlav_tensors t = sf_tensors(e, 0);
            const mlav_status sr = mlav_run(plan, &t, ws, bytes, NULL);
            if (sr != MLAV_OK)
                fail_msg("%s step %d (%d live of %d): run of a padded step: %s: %s (seed 0x%llx)",
                         mlav_backend_name(be), s, e->live, e->batch, mlav_status_string(sr),
                         mlav_last_error(NULL), (unsigned long long)seed);
            char msg[256];
            if (!sf_check(e, 0, e->out[0], e->lse[0], msg, sizeof msg))
                fail_msg("%s step %d: %s (seed 0x%llx)", mlav_backend_name(be), s, msg,
                         (unsigned long long)seed);
            int32_t bad = 7;
            assert_int_equal(mlav_plan_step_status(plan, ws, bytes, NULL, &bad), MLAV_OK);
            assert_int_equal(bad, -1);
        }
        free(ws);
        mlav_plan_free(plan);
        mlav_context_free(ctx);
        sf_free(e);
    }
}

/* One tensor validation for every run: after an update of batch 0, or of padding alone (no
 * token), mlav_run(plan, NULL, ...) and tensors of an invalid memory kind are refused as an
 * exact plan refuses them (before: MLAV_OK); good tensors run and write nothing. */
static void test_steps_empty_step_tensors(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof HOST_BACKENDS / sizeof HOST_BACKENDS[0]; k++) {
        const mlav_backend be = HOST_BACKENDS[k];
        sf_engine *e = sf_make(&LIM, 2, 32, 8, 16, MLAV_DTYPE_F32, 0, 1, tu_seed());
        mlav_context *ctx;
        assert_int_equal(mlav_context_create(&ctx, be), MLAV_OK);
        const mlav_problem shape = sf_shape(e);
        mlav_plan *plan;
        assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &plan), MLAV_OK);
        const size_t bytes = mlav_plan_workspace_bytes(plan);
        void *ws = ws_alloc(bytes);
        const int32_t qi[4] = {0, 0, 0, 0}, kv[3] = {5, -1, 0};
        for (int32_t batch = 0; batch <= 3; batch += 3) {
            const mlav_lengths len = {MLAV_MEM_HOST, batch, qi, kv};
            assert_int_equal(mlav_plan_update(plan, &len, ws, bytes, NULL), MLAV_OK);
            char what[96];
            snprintf(what, sizeof what, "%s, step of batch %d, no token", mlav_backend_name(be),
                     batch);
            run_refused(plan, NULL, ws, bytes, MLAV_ERR_INVALID_ARG, "NULL", what);
            mlav_tensors t = sf_tensors(e, 0);
            t.memory = (mlav_memory)7;
            run_refused(plan, &t, ws, bytes, MLAV_ERR_INVALID_ARG, "mlav_memory", what);
            t.memory = MLAV_MEM_HOST;
            sf_poison(e);
            assert_int_equal(mlav_run(plan, &t, ws, bytes, NULL), MLAV_OK);
            assert_true(untouched(e));
        }
        /* as an exact plan of no token refuses them */
        mlav_problem one = shape;
        const int32_t kv0[3] = {0, 0, 0};
        one.batch = 3;
        one.q_indptr = qi;
        one.kv_lens = kv0;
        mlav_plan *exact;
        assert_int_equal(mlav_plan_create(ctx, &one, &exact), MLAV_OK);
        assert_int_equal(mlav_run(exact, NULL, NULL, 0, NULL), MLAV_ERR_INVALID_ARG);
        mlav_plan_free(exact);
        free(ws);
        mlav_plan_free(plan);
        mlav_context_free(ctx);
        sf_free(e);
    }
}

/* The step rule's schedule: within the bounds, every (request, row tile) covers its KV rows
 * [0, kv_len) exactly once in split order, slots distinct, one combine item per split row tile
 * whose slots are its splits', padding past the counts, refused requests skipped. */
static void test_steps_schedule_rule(void **state)
{
    (void)state;
    uint64_t seed = tu_seed(), rng = seed;
    const mlav_limits lim = {.max_batch = 64, .max_tokens = 512, .max_q_len = 64,
                             .max_kv_len = 1 << 20};
    const int Hs[] = {8, 16, 64, 128};
    const mlav_schedule_params sps[] = {
        {64, 32, 32, 256, 132, 128, 1, 2, 0}, /* the flash plan's on an H200 */
        {64, 32, 32, 256, 188, 128, 1, 2, 0}, /* an RTX PRO 6000's 188 SMs */
        {64, 32, 32, 8, 4, 0, 0, 0, 0},       /* few splits, few SMs, no costs */
    };
    mlav_split_item *items = malloc(sizeof *items * 200000);
    mlav_combine_item *comb = malloc(sizeof *comb * 200000);
    uint8_t *seen = malloc(200000);
    mlav_step_scratch *scratch = malloc(mlav_step_scratch_bytes());
    assert_non_null(items);
    assert_non_null(scratch);
    for (int round = 0; round < 300; round++) {
        const int H = Hs[tu_next(&rng) % 4];
        const mlav_schedule_params *sp = &sps[tu_next(&rng) % 3];
        const mlav_step_bounds bd = mlav_step_bounds_of(H, &lim, sp);
        assert_true(bd.max_items <= 200000 && bd.max_combine <= 200000);
        int32_t batch = 1 + (int32_t)(tu_next(&rng) % 64), qi[65], kv[64], t = 0;
        qi[0] = 0;
        int32_t refuse = (int32_t)(tu_next(&rng) % 8) == 0 ? (int32_t)(tu_next(&rng) % batch) : -1;
        for (int32_t b = 0; b < batch; b++) {
            int32_t q = (int32_t)(tu_next(&rng) % 9); /* 0: padding */
            if (b == refuse && q == 0)
                q = 1; /* a padding slot (q_len 0) is never refused */
            if (t + q > lim.max_tokens)
                q = 0;
            if (b == refuse && q == 0)
                refuse = -1;
            const int32_t pf = (int32_t)(tu_next(&rng) % (tu_next(&rng) % 2 ? 300000 : 3000));
            kv[b] = b == refuse ? lim.max_kv_len + 1 : pf + q;
            qi[b + 1] = (t += q);
        }
        mlav_step_header h;
        mlav_step_schedule_build(batch, qi, kv, (mlav_shard){1, 0, 1}, H, &lim, sp, &bd, &h,
                                 items, comb, scratch);
        assert_true(h.n_items <= bd.max_items && h.n_combine <= bd.max_combine);
        assert_true(h.n_slots <= bd.max_slots);
        assert_int_equal(h.batch, batch);
        assert_int_equal(h.bad, refuse >= 0 ? refuse : INT32_MAX);
        for (int32_t i = h.n_items; i < bd.max_items; i++)
            assert_int_equal(items[i].b, -1);
        for (int32_t i = h.n_combine; i < bd.max_combine; i++)
            assert_true(comb[i].b == -1 && comb[i].rows == 0);
        memset(seen, 0, (size_t)h.n_slots);
        int32_t it = 0, ci = 0;
        for (int32_t b = 0; b < batch; b++) {
            const int32_t q = qi[b + 1] - qi[b];
            if (q == 0 || b == refuse)
                continue;
            const int32_t mt = (q * H + 63) / 64;
            int32_t end = 0, ns = 0;
            while (end < kv[b]) { /* the splits, in order, each with its mt row tiles */
                for (int32_t m = 0; m < mt; m++, it++) {
                    assert_true(it < h.n_items);
                    const mlav_split_item *x = &items[it];
                    assert_int_equal(x->b, b);
                    assert_int_equal(x->mtile, m);
                    assert_int_equal(x->kv_begin, end);
                    assert_true(x->kv_end > x->kv_begin && x->kv_end <= kv[b]);
                    assert_int_equal(x->q_start, qi[b]);
                    assert_int_equal(x->q_len, q);
                    assert_int_equal(x->prefix, kv[b] - q);
                    if (m > 0)
                        assert_int_equal(x->kv_end, items[it - 1].kv_end);
                    if (x->slot >= 0) {
                        assert_true(x->slot < h.n_slots && !seen[x->slot]);
                        seen[x->slot] = 1;
                    }
                }
                end = items[it - 1].kv_end;
                ns++;
            }
            assert_true(ns <= sp->max_splits);
            if (ns == 1) {
                assert_int_equal(items[it - 1].slot, -1);
                continue;
            }
            for (int32_t m = 0; m < mt; m++, ci++) {
                const mlav_combine_item *c = &comb[ci];
                assert_true(c->b == b && c->mtile == m && c->nsplit == ns);
                assert_true(c->q_start == qi[b] && c->rows == q * H);
                for (int32_t k = 0; k < ns; k++)
                    assert_int_equal(items[it - ns * mt + k * mt + m].slot,
                                     c->slot0 + k * c->slot_stride);
            }
        }
        if (it != h.n_items || ci != h.n_combine)
            fail_msg("round %d: %d items and %d combine items expected, %d and %d built (seed "
                     "0x%llx)",
                     round, it, ci, h.n_items, h.n_combine, (unsigned long long)seed);
    }
    free(items);
    free(comb);
    free(seen);
    free(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_engine_loop_cpu_f32),
        cmocka_unit_test(test_steps_engine_loop_cpu_bf16),
        cmocka_unit_test(test_steps_engine_loop_cpu_bf16_fp8),
        cmocka_unit_test(test_steps_engine_loop_reference_f16),
        cmocka_unit_test(test_steps_bad_host_lengths),
        cmocka_unit_test(test_steps_bad_limits),
        cmocka_unit_test(test_steps_schedule_rule),
        cmocka_unit_test(test_steps_foreign_workspace),
        cmocka_unit_test(test_steps_padding_garbage),
        cmocka_unit_test(test_steps_empty_step_tensors),
    };
    const char *filter = getenv("MLAV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
