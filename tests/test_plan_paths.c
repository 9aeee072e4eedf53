/* One plan path: a plan for one problem is a plan for limits whose update ran at plan time, so
 * on every CPU backend an exact plan and a plan for limits updated with the same lengths give
 * the same bits; a plan for limits plans once and schedules once per update, and a run neither
 * plans nor allocates (this executable is linked with the allocator wrapped: tests/CMakeLists.txt);
 * a workspace whose schedule was written over since its update is refused, not followed. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/internal/mlaverify_internal.h"
#include "mlaverify.h"
#include "steps_fixture.h"
#include "test_util.h"

/* The allocator, wrapped (-Wl,--wrap=...) for every object of this executable, the static
 * library included: while `refuse` is set, every allocation fails and is counted. */
static atomic_int refuse;
static atomic_long refused;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);

static int refusing(void)
{
    if (!atomic_load(&refuse))
        return 0;
    atomic_fetch_add(&refused, 1);
    return 1;
}
void *__wrap_malloc(size_t n)
{
    return refusing() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t size)
{
    return refusing() ? NULL : __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t n)
{
    return refusing() ? NULL : __real_realloc(p, n);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    return refusing() ? ENOMEM : __real_posix_memalign(p, align, n);
}
void *__wrap_aligned_alloc(size_t align, size_t n)
{
    return refusing() ? NULL : __real_aligned_alloc(align, n);
}

/* mlav_run with every allocation refused: it must neither need nor try one. */
static mlav_status run_without_allocator(const mlav_plan *plan, const mlav_tensors *t, void *ws,
                                         size_t bytes)
{
    atomic_store(&refused, 0);
    atomic_store(&refuse, 1);
    const mlav_status s = mlav_run(plan, t, ws, bytes, NULL);
    atomic_store(&refuse, 0);
    if (atomic_load(&refused) != 0)
        fail_msg("mlav_run on %s tried %ld allocations", mlav_backend_name(mlav_plan_backend(plan)),
                 (long)atomic_load(&refused));
    return s;
}

static void *ws_alloc(size_t bytes)
{
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    assert_non_null(p);
    return p;
}

/* max_q_len <= 32: the limits' mask rows are one word, as every step's exact problem's are, so
 * both plans read the same tensors */
static const mlav_limits LIM = {.max_batch = 7, .max_tokens = 60, .max_q_len = 12,
                                .max_kv_len = 900};

/* The step's exact problem: the engine's shape with the step's lengths. */
static mlav_problem step_problem(const sf_engine *e)
{
    mlav_problem p = sf_shape(e);
    p.batch = e->batch;
    p.q_indptr = e->q_indptr;
    p.kv_lens = e->kv_lens;
    return p;
}

static void same_bits(mlav_backend be, mlav_dtype dtype, mlav_dtype kv_dtype, int32_t H,
                      int32_t Dl, int32_t Dr)
{
    const uint64_t seed = tu_seed();
    sf_engine *e = sf_make(&LIM, H, Dl, Dr, 16, dtype, kv_dtype, 2, seed);
    mlav_context *ctx;
    assert_int_equal(mlav_context_create(&ctx, be), MLAV_OK);
    const mlav_problem shape = sf_shape(e);
    mlav_plan *lp;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &lp), MLAV_OK);
    const size_t lbytes = mlav_plan_workspace_bytes(lp);
    void *lws = ws_alloc(lbytes);
    void *out = malloc(e->out_bytes);
    float *lse = malloc(e->lse_bytes);
    assert_true(out && lse);
    for (int s = 0; s < 6; s++) {
        sf_step(e, s % 2);
        const mlav_problem p = step_problem(e);
        mlav_plan *xp;
        assert_int_equal(mlav_plan_create(ctx, &p, &xp), MLAV_OK);
        const size_t xbytes = mlav_plan_workspace_bytes(xp);
        void *xws = ws_alloc(xbytes);
        const mlav_lengths len = sf_lengths(e);
        assert_int_equal(mlav_plan_update(lp, &len, lws, lbytes, NULL), MLAV_OK);
        for (int l = 0; l < e->layers; l++) {
            const mlav_tensors t = sf_tensors(e, l);
            sf_poison(e);
            assert_int_equal(run_without_allocator(xp, &t, xws, xbytes), MLAV_OK);
            memcpy(out, e->out[l], e->out_bytes);
            memcpy(lse, e->lse[l], e->lse_bytes);
            sf_poison(e);
            if (run_without_allocator(lp, &t, lws, lbytes) != MLAV_OK)
                fail_msg("%s: %s (seed 0x%llx)", mlav_backend_name(be), mlav_last_error(NULL),
                         (unsigned long long)seed);
            if (memcmp(out, e->out[l], e->out_bytes) != 0 ||
                memcmp(lse, e->lse[l], e->lse_bytes) != 0)
                fail_msg("%s %s%s H %d step %d layer %d: the plan for limits' bits differ from "
                         "the exact plan's (seed 0x%llx)",
                         mlav_backend_name(be), mlav_dtype_name(dtype),
                         kv_dtype == MLAV_DTYPE_FP8_E4M3 ? ",kv=fp8_e4m3" : "", H, s, l,
                         (unsigned long long)seed);
            char msg[256];
            if (!sf_check(e, l, e->out[l], e->lse[l], msg, sizeof msg))
                fail_msg("%s step %d layer %d: %s (seed 0x%llx)", mlav_backend_name(be), s, l,
                         msg, (unsigned long long)seed);
        }
        free(xws);
        mlav_plan_free(xp);
    }
    free(out);
    free(lse);
    free(lws);
    mlav_plan_free(lp);
    mlav_context_free(ctx);
    sf_free(e);
}

static void test_same_bits_cpu(void **state)
{
    (void)state;
    same_bits(MLAV_BACKEND_CPU, MLAV_DTYPE_F32, 0, 4, 64, 16);
    same_bits(MLAV_BACKEND_CPU, MLAV_DTYPE_BF16, 0, 16, 64, 16);
    same_bits(MLAV_BACKEND_CPU, MLAV_DTYPE_F16, MLAV_DTYPE_FP8_E4M3, 8, 128, 32);
}

static void test_same_bits_reference(void **state)
{
    (void)state;
    same_bits(MLAV_BACKEND_REFERENCE, MLAV_DTYPE_F32, 0, 4, 64, 16);
    same_bits(MLAV_BACKEND_REFERENCE, MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3, 2, 32, 8);
}

/* The cpu backend plans a plan for limits once, schedules at each update, and at a run does
 * neither (a run used to plan the step and allocate its workspace: one plan per run and layer);
 * a plan for one problem plans and schedules once. */
static void test_cpu_runs_do_not_plan(void **state)
{
    (void)state;
    const uint64_t seed = tu_seed();
    sf_engine *e = sf_make(&LIM, 4, 64, 16, 16, MLAV_DTYPE_F32, 0, 2, seed);
    mlav_context *ctx;
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_CPU), MLAV_OK);
    long plans0, sched0, plans, sched;
    mlav_cpu_plan_counts(&plans0, &sched0);
    const mlav_problem shape = sf_shape(e);
    mlav_plan *lp;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &lp), MLAV_OK);
    mlav_cpu_plan_counts(&plans, &sched);
    assert_int_equal(plans - plans0, 1);
    assert_int_equal(sched - sched0, 0);
    const size_t bytes = mlav_plan_workspace_bytes(lp);
    void *ws = ws_alloc(bytes);
    for (int s = 0; s < 3; s++) {
        sf_step(e, 0);
        const mlav_lengths len = sf_lengths(e);
        assert_int_equal(mlav_plan_update(lp, &len, ws, bytes, NULL), MLAV_OK);
        for (int r = 0; r < 3; r++)
            for (int l = 0; l < e->layers; l++) {
                const mlav_tensors t = sf_tensors(e, l);
                assert_int_equal(mlav_run(lp, &t, ws, bytes, NULL), MLAV_OK);
            }
        mlav_cpu_plan_counts(&plans, &sched);
        assert_int_equal(plans - plans0, 1);
        assert_int_equal(sched - sched0, s + 1);
    }
    const mlav_problem p = step_problem(e);
    mlav_plan *xp;
    assert_int_equal(mlav_plan_create(ctx, &p, &xp), MLAV_OK);
    const size_t xbytes = mlav_plan_workspace_bytes(xp);
    void *xws = ws_alloc(xbytes);
    for (int l = 0; l < e->layers; l++) {
        const mlav_tensors t = sf_tensors(e, l);
        assert_int_equal(mlav_run(xp, &t, xws, xbytes, NULL), MLAV_OK);
    }
    mlav_cpu_plan_counts(&plans, &sched);
    assert_int_equal(plans - plans0, 2);
    assert_int_equal(sched - sched0, 4);
    free(xws);
    free(ws);
    mlav_plan_free(xp);
    mlav_plan_free(lp);
    mlav_context_free(ctx);
    sf_free(e);
}

/* The cpu backend's schedule lives in the workspace after dispatch's step region (the header,
 * q_indptr [max_batch + 1], kv_lens [max_batch], rounded up to 256 bytes): a byte of it written
 * over since the update, whether it points outside the step or only changes a cost, is refused
 * (MLAV_ERR_WORKSPACE) and nothing is written; the update's own schedule runs as before. */
static void test_cpu_schedule_written_over(void **state)
{
    (void)state;
    const uint64_t seed = tu_seed();
    sf_engine *e = sf_make(&LIM, 4, 64, 16, 16, MLAV_DTYPE_F32, 0, 1, seed);
    mlav_context *ctx;
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_CPU), MLAV_OK);
    const mlav_problem shape = sf_shape(e);
    mlav_plan *lp;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &LIM, &lp), MLAV_OK);
    const size_t bytes = mlav_plan_workspace_bytes(lp);
    unsigned char *ws = ws_alloc(bytes);
    const int32_t prefixes[3] = {700, 3, 260};
    sf_step_prefixes(e, 3, prefixes, 0);
    const mlav_lengths len = sf_lengths(e);
    const size_t region = (sizeof(mlav_step_header) +
                           sizeof(int32_t) * (2 * (size_t)LIM.max_batch + 1) + 255) / 256 * 256;
    /* bytes of the schedule's header (its counts), of its first item (request, rows, first
     * row, keys) and of that item's cost */
    const size_t at[] = {0, 4, 8, 12, 64, 68, 72, 96, 104};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        assert_int_equal(mlav_plan_update(lp, &len, ws, bytes, NULL), MLAV_OK);
        ws[region + at[k]] ^= 0x40;
        const mlav_tensors t = sf_tensors(e, 0);
        sf_poison(e);
        const mlav_status s = mlav_run(lp, &t, ws, bytes, NULL);
        if (s != MLAV_ERR_WORKSPACE || !strstr(mlav_last_error(NULL), "written over"))
            fail_msg("byte %zu of the schedule flipped: %s, \"%s\" (seed 0x%llx)", at[k],
                     mlav_status_string(s), mlav_last_error(NULL), (unsigned long long)seed);
        ws[region + at[k]] ^= 0x40;
        assert_int_equal(mlav_run(lp, &t, ws, bytes, NULL), MLAV_OK);
        char msg[256];
        if (!sf_check(e, 0, e->out[0], e->lse[0], msg, sizeof msg))
            fail_msg("after byte %zu: %s (seed 0x%llx)", at[k], msg, (unsigned long long)seed);
    }
    free(ws);
    mlav_plan_free(lp);
    mlav_context_free(ctx);
    sf_free(e);
}

/* The batch limit of a plan for limits is the library's to say. */
static void test_limits_max_batch(void **state)
{
    (void)state;
    assert_int_equal(mlav_limits_max_batch(), 2048);
    mlav_context *ctx;
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_CPU), MLAV_OK);
    mlav_problem shape = {.num_heads = 2, .d_latent = 8, .d_rope = 0, .softmax_scale = 0.5f,
                          .dtype = MLAV_DTYPE_F32, .page_size = 4, .max_pages = 100};
    mlav_limits lim = {mlav_limits_max_batch(), 2048, 4, 100};
    mlav_plan *plan = NULL;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &lim, &plan), MLAV_OK);
    mlav_plan_free(plan);
    lim.max_batch++;
    assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &lim, &plan),
                     MLAV_ERR_INVALID_ARG);
    mlav_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits_cpu),
        cmocka_unit_test(test_same_bits_reference),
        cmocka_unit_test(test_cpu_runs_do_not_plan),
        cmocka_unit_test(test_cpu_schedule_written_over),
        cmocka_unit_test(test_limits_max_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
