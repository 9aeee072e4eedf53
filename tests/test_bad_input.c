/* Every bad-input rule returns its status and a sentence, and writes nothing (canaries intact,
 * out and lse still poisoned). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/dtype.h"
#include "mlaverify.h"
#include "test_util.h"

/* A small valid problem: two requests (q 3 and 2, prefix 5 and 0), page size 2, explicit mask;
 * max_pages = 5 (capacity 10 rows per request). */
static tu_problem *base_problem(void)
{
    tu_case c = {.H = 2, .Dl = 8, .Dr = 4, .page_size = 2, .B = 2, .dtype = MLAV_DTYPE_F32,
                 .q_lens = {3, 2}, .prefixes = {5, 0}, .tree = TU_BUSHY, .seed = tu_seed()};
    tu_problem *p = tu_make(&c);
    assert_int_equal(p->prob.max_pages, 5);
    return p;
}

static void expect_fail(mlav_status got, mlav_status want, const char *keyword,
                        const char *what)
{
    if (got != want)
        fail_msg("%s: got %s, expected %s (%s)", what, mlav_status_string(got),
                 mlav_status_string(want), mlav_last_error(NULL));
    const char *msg = mlav_last_error(NULL);
    if (!msg || !*msg)
        fail_msg("%s: no error sentence", what);
    if (keyword && !strstr(msg, keyword))
        fail_msg("%s: the sentence \"%s\" does not mention \"%s\"", what, msg, keyword);
    print_message("  %-40s %s: %s\n", what, mlav_status_string(got), msg);
}

/* Nothing written: guards intact, every out and lse element still NaN. */
static void expect_untouched(const tu_problem *p, const char *what)
{
    char msg[128];
    if (!tu_untouched(p, msg, sizeof msg))
        fail_msg("%s: %s", what, msg);
}

static mlav_context *context(mlav_backend b)
{
    mlav_context *ctx = NULL;
    mlav_status s = mlav_context_create(&ctx, b);
    if (s != MLAV_OK)
        fail_msg("context %s: %s", mlav_backend_name(b), mlav_last_error(NULL));
    return ctx;
}

/* A bad problem fails at plan time, and through mlav_verify too. */
static void plan_rule(mlav_context *ctx, const tu_problem *p, const mlav_problem *bad,
                      mlav_status want, const char *keyword, const char *what)
{
    mlav_plan *plan = (mlav_plan *)(uintptr_t)1; /* must come back NULL */
    expect_fail(mlav_plan_create(ctx, bad, &plan), want, keyword, what);
    assert_null(plan);
    mlav_tensors t = tu_tensors(p);
    expect_fail(mlav_verify(ctx, bad, &t), want, keyword, what);
    expect_untouched(p, what);
}

static void test_bad_input_problem(void **state)
{
    (void)state;
    tu_problem *p = base_problem();
    const mlav_backend backends[] = {MLAV_BACKEND_CPU, MLAV_BACKEND_REFERENCE};
    for (int k = 0; k < 2; k++) {
        mlav_context *ctx = context(backends[k]);
        mlav_problem b;
        int32_t qi[3], kl[2];
#define RESET() (b = p->prob, memcpy(qi, p->q_indptr, sizeof qi), memcpy(kl, p->kv_lens, sizeof kl), \
                 b.q_indptr = qi, b.kv_lens = kl)
        plan_rule(ctx, p, NULL, MLAV_ERR_INVALID_ARG, "problem", "problem NULL");
        RESET(), b.num_heads = 0;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "num_heads", "num_heads = 0");
        RESET(), b.num_heads = 4097;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "num_heads", "num_heads = 4097");
        RESET(), b.d_latent = 0;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "d_latent", "d_latent = 0");
        RESET(), b.d_latent = 16385;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "d_latent", "d_latent too large");
        RESET(), b.d_rope = -1;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "d_rope", "d_rope = -1");
        RESET(), b.d_rope = 16385;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "d_rope", "d_rope too large");
        RESET(), b.softmax_scale = NAN;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "softmax_scale", "softmax_scale NaN");
        RESET(), b.softmax_scale = INFINITY;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "softmax_scale", "softmax_scale Inf");
        RESET(), b.dtype = (mlav_dtype)3;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "dtype", "dtype = 3");
        RESET(), b.dtype = (mlav_dtype)-1;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "dtype", "dtype = -1");
        RESET(), b.page_size = 0;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "page_size", "page_size = 0");
        RESET(), b.page_size = -4;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "page_size", "page_size < 0");
        RESET(), b.page_size = (1 << 20) + 1;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "page_size", "page_size too large");
        RESET(), b.batch = 0;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "batch", "batch = 0");
        RESET(), b.batch = -1;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "batch", "batch < 0");
        RESET(), b.batch = (1 << 20) + 1;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "batch", "batch too large");
        RESET(), b.max_pages = 0;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "max_pages", "max_pages = 0");
        RESET(), b.max_pages = -3;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "max_pages", "max_pages < 0");
        RESET(), b.q_indptr = NULL;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "q_indptr", "q_indptr NULL");
        RESET(), b.kv_lens = NULL;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "kv_lens", "kv_lens NULL");
        RESET(), qi[0] = 1;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "q_indptr[0]", "q_indptr[0] = 1");
        RESET(), qi[2] = 1; /* {0, 3, 1}: q_len of request 1 would be -2 */
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "decreasing", "q_indptr decreasing");
        RESET(), kl[1] = 1; /* q_len 2 */
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "kv_lens[1]", "kv_len < q_len");
        RESET(), kl[0] = -1;
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "kv_lens[0]", "kv_len negative");
        RESET(), kl[0] = 11; /* capacity 5 pages x 2 */
        plan_rule(ctx, p, &b, MLAV_ERR_INVALID_ARG, "max_pages * page_size",
                  "kv_len > max_pages * page_size");
#undef RESET
        /* T x H past the row limit (2^40): 2^30 tokens x 4096 heads */
        int32_t big_qi[2] = {0, 1 << 30}, big_kl[1] = {1 << 30};
        mlav_problem big = {.num_heads = 4096, .d_latent = 8, .d_rope = 0,
                            .softmax_scale = 1.0f, .dtype = MLAV_DTYPE_F32,
                            .page_size = 1 << 20, .batch = 1, .q_indptr = big_qi,
                            .kv_lens = big_kl, .max_pages = 1024};
        plan_rule(ctx, p, &big, MLAV_ERR_INVALID_ARG, "T * H", "T x H too many rows");
        mlav_context_free(ctx);
    }
    tu_free(p);
}

/* A bad tensor set fails at run time (and through mlav_verify), before anything is written. */
typedef struct run_env {
    mlav_context *ctx;
    mlav_plan *plan;
    void *ws;
    size_t bytes;
    tu_problem *p;
} run_env;

static void run_rule(const run_env *e, const mlav_tensors *bad, mlav_status want,
                     const char *keyword, const char *what)
{
    expect_fail(mlav_run(e->plan, bad, e->ws, e->bytes, NULL), want, keyword, what);
    expect_untouched(e->p, what);
    expect_fail(mlav_verify(e->ctx, &e->p->prob, bad), want, keyword, what);
    expect_untouched(e->p, what);
}

static void test_bad_input_tensors(void **state)
{
    (void)state;
    const mlav_backend backends[] = {MLAV_BACKEND_CPU, MLAV_BACKEND_REFERENCE};
    for (int k = 0; k < 2; k++) {
        run_env e = {.p = base_problem(), .ctx = context(backends[k])};
        tu_problem *p = e.p;
        assert_int_equal(mlav_plan_create(e.ctx, &p->prob, &e.plan), MLAV_OK);
        e.bytes = mlav_plan_workspace_bytes(e.plan);
        assert_int_equal(posix_memalign(&e.ws, 256, e.bytes + 256), 0);

        const size_t pt_len = (size_t)p->prob.batch * (size_t)p->prob.max_pages;
        int32_t *pt = malloc(sizeof(int32_t) * pt_len);
        const size_t mask_len = (size_t)p->q_indptr[2]; /* one word per row */
        uint32_t *mask = malloc(sizeof(uint32_t) * mask_len);
        assert_non_null(pt);
        assert_non_null(mask);
        mlav_tensors t;
#define RESET() (t = tu_tensors(p), memcpy(pt, p->page_table, sizeof(int32_t) * pt_len), \
                 memcpy(mask, p->tree_mask, sizeof(uint32_t) * mask_len), t.page_table = pt, \
                 t.tree_mask = mask)

        expect_fail(mlav_run(e.plan, NULL, e.ws, e.bytes, NULL), MLAV_ERR_INVALID_ARG,
                    "tensors", "tensors NULL");
        expect_untouched(p, "tensors NULL");
        RESET(), t.memory = (mlav_memory)7;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "memory", "memory = 7");
        RESET(), t.q = NULL;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "q and out", "q NULL");
        RESET(), t.out = NULL;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "q and out", "out NULL");
        RESET(), t.kv_cache = NULL;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "kv_cache", "kv_cache NULL");
        RESET(), t.page_table = NULL;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "page_table", "page_table NULL");
        RESET(), t.num_pages = 0;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "num_pages", "num_pages = 0");
        RESET(), t.num_pages = -5;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "num_pages", "num_pages < 0");
        RESET(), t.num_pages = ((int64_t)1 << 39) + 1; /* x page_size 2 > 2^40 rows */
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "num_pages", "num_pages x page_size too many");
        RESET(), pt[1] = -1;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "page_table[0][1]", "page id -1");
        RESET(), pt[p->prob.max_pages] = (int32_t)p->num_pages; /* request 1, page 0 */
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "page_table[1][0]", "page id = num_pages");
        RESET(), pt[2] = INT32_MAX;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "page_table[0][2]", "page id INT32_MAX");
        RESET(), t.num_pages = 1; /* the ids in use are up to num_pages - 1 of the pool */
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "num_pages", "pool smaller than the ids");
        RESET(), mask[3] |= 1u << 2; /* request 1 (q_len 2), node 0: bit 2 */
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "q_len", "mask bit = q_len");
        RESET(), mask[0] |= 1u << 31; /* request 0 (q_len 3), node 0: bit 31 */
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "q_len", "mask bit 31");
        RESET(), t.memory = MLAV_MEM_DEVICE;
        run_rule(&e, &t, MLAV_ERR_UNSUPPORTED, "host", "device memory on a CPU backend");

        /* workspace rules (mlav_run only: mlav_verify allocates its own) */
        RESET();
        if (e.bytes > 0) { /* the reference backend needs none */
            expect_fail(mlav_run(e.plan, &t, NULL, e.bytes, NULL), MLAV_ERR_WORKSPACE, "NULL",
                        "workspace NULL");
            expect_untouched(p, "workspace NULL");
            expect_fail(mlav_run(e.plan, &t, e.ws, e.bytes - 1, NULL), MLAV_ERR_WORKSPACE,
                        "smaller", "workspace one byte short");
            expect_untouched(p, "workspace one byte short");
            expect_fail(mlav_run(e.plan, &t, e.ws, 0, NULL), MLAV_ERR_WORKSPACE, "smaller",
                        "workspace of 0 bytes");
            expect_untouched(p, "workspace of 0 bytes");
            expect_fail(mlav_run(e.plan, &t, (char *)e.ws + 64, e.bytes, NULL),
                        MLAV_ERR_WORKSPACE, "aligned", "workspace misaligned");
            expect_untouched(p, "workspace misaligned");
        }
        expect_fail(mlav_run(NULL, &t, e.ws, e.bytes, NULL), MLAV_ERR_INVALID_ARG, "plan",
                    "plan NULL");
        expect_untouched(p, "plan NULL");

        /* not errors: a garbage id in a page-table slot past kv_len, and no mask bits beyond
         * q_len in padding words (there are none here) */
        RESET(), pt[p->prob.max_pages - 1] = -99;
        assert_int_equal(mlav_run(e.plan, &t, e.ws, e.bytes, NULL), MLAV_OK);
        assert_true(tu_guards_ok(p));
        tu_poison(p);
#undef RESET
        free(pt);
        free(mask);
        free(e.ws);
        mlav_plan_free(e.plan);
        mlav_context_free(e.ctx);
        tu_free(p);
    }
}

/* Outputs aliasing inputs or each other (issue 26, item 6): refused, whatever the residency,
 * from byte ranges alone. Every tensor is a copy in one arena, so an aliased pointer stays
 * inside memory the test owns: [page_table][tree_mask][q][kv_cache][out][lse]. */
static void test_bad_input_overlap(void **state)
{
    (void)state;
    const mlav_backend backends[] = {MLAV_BACKEND_CPU, MLAV_BACKEND_REFERENCE};
    for (int k = 0; k < 2; k++) {
        run_env e = {.p = base_problem(), .ctx = context(backends[k])};
        tu_problem *p = e.p;
        assert_int_equal(mlav_plan_create(e.ctx, &p->prob, &e.plan), MLAV_OK);
        e.bytes = mlav_plan_workspace_bytes(e.plan);
        assert_int_equal(posix_memalign(&e.ws, 256, e.bytes + 256), 0);

        const size_t pt_n = (size_t)p->prob.batch * (size_t)p->prob.max_pages;
        const size_t mask_n = (size_t)p->q_indptr[2]; /* one word per row */
        const size_t n = pt_n + mask_n + p->q_elems + p->kv_elems + p->out_elems + p->lse_elems;
        float *arena = malloc(sizeof(float) * n);
        float *saved = malloc(sizeof(float) * n);
        assert_non_null(arena);
        assert_non_null(saved);
        int32_t *pt = (int32_t *)(void *)arena;
        uint32_t *mask = (uint32_t *)(void *)(arena + pt_n);
        float *q = arena + pt_n + mask_n, *kv = q + p->q_elems, *out = kv + p->kv_elems;
        float *lse = out + p->out_elems;
        memcpy(pt, p->page_table, sizeof(int32_t) * pt_n);
        memcpy(mask, p->tree_mask, sizeof(uint32_t) * mask_n);
        memcpy(q, p->q, sizeof(float) * p->q_elems);
        memcpy(kv, p->kv, sizeof(float) * p->kv_elems);
        memcpy(saved, arena, sizeof(float) * n);
        mlav_tensors t;
#define RESET() (t = tu_tensors(p), t.page_table = pt, t.tree_mask = mask, t.q = q, \
                 t.kv_cache = kv)
#define ALIAS(field, ptr, what) \
    (RESET(), t.field = (ptr), run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "overlaps", what), \
     assert_memory_equal(arena, saved, sizeof(float) * n))
        ALIAS(out, q, "out == q");
        ALIAS(out, q + p->q_elems - 1, "out starts on q's last element");
        ALIAS(out, kv + 24, "out inside kv_cache");
        ALIAS(out, (float *)(void *)(pt + 1), "out over page_table");
        ALIAS(out, (float *)(void *)mask, "out over tree_mask");
        ALIAS(lse, q + 4, "lse inside q");
        ALIAS(lse, kv, "lse == kv_cache");
        ALIAS(lse, (float *)(void *)mask, "lse over tree_mask");
        ALIAS(lse, (float *)t.out + 3, "lse inside out");
        /* device residency: the same ranges, no dereference (refused before the cpu says it
         * needs host memory) */
        RESET(), t.out = kv + 8, t.memory = MLAV_MEM_DEVICE;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "overlaps", "device out inside kv_cache");
        RESET(), t.lse = (float *)t.out, t.memory = MLAV_MEM_DEVICE;
        run_rule(&e, &t, MLAV_ERR_INVALID_ARG, "overlaps", "device lse == out");
        assert_memory_equal(arena, saved, sizeof(float) * n);
#undef ALIAS
        /* not errors: outputs that only touch the inputs' ends, and lse right after out */
        RESET(), t.out = out, t.lse = lse;
        assert_int_equal(mlav_run(e.plan, &t, e.ws, e.bytes, NULL), MLAV_OK);
        RESET(), t.out = out, t.lse = out + p->out_elems;
        assert_int_equal(mlav_run(e.plan, &t, e.ws, e.bytes, NULL), MLAV_OK);
        RESET(), t.out = out, t.lse = NULL;
        assert_int_equal(mlav_run(e.plan, &t, e.ws, e.bytes, NULL), MLAV_OK);
        assert_memory_equal(arena, saved, sizeof(float) * (n - p->out_elems - p->lse_elems));
#undef RESET
        free(arena);
        free(saved);
        free(e.ws);
        mlav_plan_free(e.plan);
        mlav_context_free(e.ctx);
        tu_free(p);
    }
}

/* The documented rule (mlaverify.h, mlav_context_free): a plan does not reference its context
 * after creation, so the context may be freed first and the plan still runs, gives the
 * oracle's answer and frees cleanly (ASan in CI sees any use after free). AUTO too: its
 * fallback note is written into the context during mlav_plan_create only. */
static void test_context_freed_before_plan(void **state)
{
    (void)state;
    const mlav_backend backends[] = {MLAV_BACKEND_CPU, MLAV_BACKEND_REFERENCE,
                                     MLAV_BACKEND_AUTO};
    for (int k = 0; k < 3; k++) {
        tu_problem *p = base_problem();
        mlav_context *ctx = context(backends[k]);
        mlav_plan *plan = NULL;
        assert_int_equal(mlav_plan_create(ctx, &p->prob, &plan), MLAV_OK);
        mlav_context_free(ctx);
        size_t bytes = mlav_plan_workspace_bytes(plan);
        void *ws = NULL;
        assert_int_equal(posix_memalign(&ws, 256, bytes + 256), 0);
        mlav_tensors t = tu_tensors(p);
        assert_int_equal(mlav_run(plan, &t, ws, bytes, NULL), MLAV_OK);
        assert_true(mlav_plan_backend(plan) != MLAV_BACKEND_AUTO);
        tu_reference(p);
        char msg[256];
        if (!tu_compare(p, tu_out_tol(MLAV_DTYPE_F32), tu_lse_tol(MLAV_DTYPE_F32), msg,
                        sizeof msg))
            fail_msg("%s after its context was freed: %s", mlav_backend_name(backends[k]), msg);
        mlav_plan_free(plan);
        free(ws);
        tu_free(p);
    }
}

/* Context, plan and name rules. */
static void test_bad_input_context(void **state)
{
    (void)state;
    tu_problem *p = base_problem();
    mlav_context *ctx = NULL;
    expect_fail(mlav_context_create(NULL, MLAV_BACKEND_CPU), MLAV_ERR_INVALID_ARG, "ctx",
                "context_create(NULL)");
    expect_fail(mlav_context_create(&ctx, (mlav_backend)99), MLAV_ERR_INVALID_ARG, "backend",
                "backend = 99");
    assert_null(ctx);
    expect_fail(mlav_context_create(&ctx, (mlav_backend)-1), MLAV_ERR_INVALID_ARG, "backend",
                "backend = -1");
    assert_null(ctx);

    if (!mlav_backend_compiled(MLAV_BACKEND_CUDA)) {
        expect_fail(mlav_context_create(&ctx, MLAV_BACKEND_CUDA), MLAV_ERR_NO_DEVICE, "cuda",
                    "cuda without CUDA built in");
        expect_fail(mlav_context_create(&ctx, MLAV_BACKEND_CUDA_NAIVE), MLAV_ERR_NO_DEVICE,
                    "cuda", "cuda-naive without CUDA built in");
        assert_null(ctx);
    } else if (mlav_cuda_device_count() == 0) {
        mlav_status s = mlav_context_create(&ctx, MLAV_BACKEND_CUDA);
        assert_int_not_equal(s, MLAV_OK);
        expect_fail(s, s, NULL, "cuda without a device");
        assert_null(ctx);
    }

    mlav_backend b = (mlav_backend)77;
    expect_fail(mlav_backend_from_name("bogus", &b), MLAV_ERR_INVALID_ARG, "bogus",
                "backend name 'bogus'");
    expect_fail(mlav_backend_from_name("CPU", &b), MLAV_ERR_INVALID_ARG, "CPU",
                "backend name 'CPU' (names are lower case)");
    expect_fail(mlav_backend_from_name("", &b), MLAV_ERR_INVALID_ARG, NULL, "backend name ''");
    expect_fail(mlav_backend_from_name(NULL, &b), MLAV_ERR_INVALID_ARG, NULL, "backend name NULL");
    expect_fail(mlav_backend_from_name("cpu", NULL), MLAV_ERR_INVALID_ARG, NULL,
                "backend output NULL");
    assert_int_equal(b, 77);
    const mlav_backend all[] = {MLAV_BACKEND_AUTO, MLAV_BACKEND_CPU, MLAV_BACKEND_CUDA,
                                MLAV_BACKEND_CUDA_NAIVE, MLAV_BACKEND_REFERENCE};
    for (int k = 0; k < 5; k++) {
        assert_int_equal(mlav_backend_from_name(mlav_backend_name(all[k]), &b), MLAV_OK);
        assert_int_equal(b, all[k]);
    }
    assert_string_equal(mlav_backend_name((mlav_backend)99), "?");
    assert_string_equal(mlav_dtype_name((mlav_dtype)9), "?");
    assert_int_equal(mlav_dtype_size((mlav_dtype)9), 0);

    /* the one table of dtype names: the canonical names first, each alias parsed to its dtype
     * in any case and with a "torch." prefix; anything else refused with a sentence */
    mlav_dtype dt = MLAV_DTYPE_F32, dt2;
    int n_alias = 0;
    for (const char *nm; (nm = mlav_dtype_alias(n_alias, &dt)) != NULL; n_alias++) {
        char up[64], torch[80];
        size_t k = 0;
        for (; nm[k] && k + 1 < sizeof up; k++)
            up[k] = (char)toupper((unsigned char)nm[k]);
        up[k] = '\0';
        snprintf(torch, sizeof torch, "torch.%s", nm);
        assert_int_equal(mlav_dtype_parse(nm, &dt2), MLAV_OK);
        assert_int_equal(dt2, dt);
        assert_int_equal(mlav_dtype_parse(up, &dt2), MLAV_OK);
        assert_int_equal(dt2, dt);
        assert_int_equal(mlav_dtype_parse(torch, &dt2), MLAV_OK);
        assert_int_equal(dt2, dt);
        if (n_alias < 4) /* the canonical names first, in mlav_dtype order */
            assert_string_equal(nm, mlav_dtype_name((mlav_dtype)n_alias));
    }
    assert_true(n_alias >= 8);
    assert_null(mlav_dtype_alias(-1, &dt));
    expect_fail(mlav_dtype_parse("fp8_e5m2", &dt2), MLAV_ERR_INVALID_ARG, "fp8_e5m2",
                "an unknown dtype name");
    expect_fail(mlav_dtype_parse("bf1", &dt2), MLAV_ERR_INVALID_ARG, "bf1", "a prefix of a name");
    expect_fail(mlav_dtype_parse("bf16x", &dt2), MLAV_ERR_INVALID_ARG, "bf16x", "a longer name");
    expect_fail(mlav_dtype_parse("", &dt2), MLAV_ERR_INVALID_ARG, NULL, "an empty name");
    expect_fail(mlav_dtype_parse(NULL, &dt2), MLAV_ERR_INVALID_ARG, NULL, "a NULL name");
    expect_fail(mlav_dtype_parse("bf16", NULL), MLAV_ERR_INVALID_ARG, NULL, "a NULL output");
    assert_non_null(mlav_status_string((mlav_status)99));

    /* MLAV_BACKEND: validated when AUTO reads it, ignored for an explicit backend */
    const char *saved = getenv("MLAV_BACKEND");
    char *saved_copy = saved ? strdup(saved) : NULL;
    assert_int_equal(setenv("MLAV_BACKEND", "bogus", 1), 0);
    expect_fail(mlav_context_create(&ctx, MLAV_BACKEND_AUTO), MLAV_ERR_INVALID_ARG, "bogus",
                "MLAV_BACKEND=bogus");
    assert_null(ctx);
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_CPU), MLAV_OK);
    assert_int_equal(mlav_context_backend(ctx), MLAV_BACKEND_CPU);
    mlav_context_free(ctx);
    assert_int_equal(setenv("MLAV_BACKEND", "cpu", 1), 0);
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_AUTO), MLAV_OK);
    assert_int_equal(mlav_context_backend(ctx), MLAV_BACKEND_CPU);
    assert_non_null(strstr(mlav_context_note(ctx), "MLAV_BACKEND"));
    mlav_context_free(ctx);
    if (saved_copy)
        setenv("MLAV_BACKEND", saved_copy, 1);
    else
        unsetenv("MLAV_BACKEND");
    free(saved_copy);

    /* plan and verify without a context or an output slot */
    mlav_plan *plan = NULL;
    expect_fail(mlav_plan_create(NULL, &p->prob, &plan), MLAV_ERR_INVALID_ARG, "ctx",
                "plan_create(ctx NULL)");
    assert_null(plan);
    ctx = context(MLAV_BACKEND_CPU);
    expect_fail(mlav_plan_create(ctx, &p->prob, NULL), MLAV_ERR_INVALID_ARG, "plan",
                "plan_create(plan NULL)");
    mlav_tensors t = tu_tensors(p);
    expect_fail(mlav_verify(NULL, &p->prob, &t), MLAV_ERR_INVALID_ARG, "ctx",
                "verify(ctx NULL)");
    expect_fail(mlav_verify(ctx, &p->prob, NULL), MLAV_ERR_INVALID_ARG, "tensors",
                "verify(tensors NULL)");
    expect_untouched(p, "context rules");
    /* the NULL-tolerant accessors */
    mlav_plan_free(NULL);
    mlav_context_free(NULL);
    assert_int_equal(mlav_plan_workspace_bytes(NULL), 0);
    mlav_context_free(ctx);
    tu_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input_problem),
        cmocka_unit_test(test_bad_input_tensors),
        cmocka_unit_test(test_bad_input_overlap),
        cmocka_unit_test(test_bad_input_context),
        cmocka_unit_test(test_context_freed_before_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
