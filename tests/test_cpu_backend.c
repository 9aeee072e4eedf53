/* The OpenMP + OpenBLAS CPU backend against the fp64 oracle, on fresh random problems: what is
 * particular to it (NaN rows, arbitrary masks, workspace, threads, shared plans, long prefixes,
 * rising scores, extreme magnitudes). Its grid of random cases is tests/test_backends.c's, with
 * the other backends'. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/dtype.h"
#include "../src/cpu/oracle.h"
#include "mlaverify.h"
#include "test_util.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static mlav_context *cpu_context(void)
{
    mlav_context *ctx = NULL;
    mlav_status s = mlav_context_create(&ctx, MLAV_BACKEND_CPU);
    if (s != MLAV_OK)
        fail_msg("cpu context: %s: %s", mlav_status_string(s), mlav_last_error(NULL));
    assert_int_equal(mlav_context_backend(ctx), MLAV_BACKEND_CPU);
    return ctx;
}

static void *ws_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes ? bytes : 256) != 0)
        fail_msg("no memory for a %zu-byte workspace", bytes);
    return p;
}

/* Plan, run with a caller-owned workspace, free; returns run's status. */
static mlav_status run_cpu(const tu_problem *p, const mlav_tensors *t)
{
    mlav_context *ctx = cpu_context();
    mlav_plan *plan = NULL;
    mlav_status s = mlav_plan_create(ctx, &p->prob, &plan);
    if (s != MLAV_OK)
        fail_msg("plan: %s: %s", mlav_status_string(s), mlav_last_error(NULL));
    assert_int_equal(mlav_plan_backend(plan), MLAV_BACKEND_CPU);
    assert_int_equal(mlav_plan_workspace_memory(plan), MLAV_MEM_HOST);
    size_t bytes = mlav_plan_workspace_bytes(plan);
    void *ws = ws_alloc(bytes);
    s = mlav_run(plan, t, ws, bytes, NULL);
    free(ws);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    return s;
}

/* Fails the test with the case name (and so its seed) unless out/lse match the oracle. */
static void expect_match(const tu_problem *p, const char *what)
{
    char name[512], msg[512];
    tu_case_name(&p->c, name, sizeof name);
    if (!tu_compare(p, tu_out_tol(p->c.dtype), tu_lse_tol(p->c.dtype), msg, sizeof msg))
        fail_msg("%s [%s]: %s", what, name, msg);
    print_message("  %s: %s\n", what, msg);
}

/* ---- cases ---------------------------------------------------------------------------------- */

#define Q(...) {__VA_ARGS__}
#define CASE(h, dl, dr, page, dt, tr, qs, ps, b)                                                 \
    {.H = h, .Dl = dl, .Dr = dr, .page_size = page, .B = b, .dtype = MLAV_DTYPE_##dt,            \
     .q_lens = qs, .prefixes = ps, .tree = tr}

/* ---- NaN stays in the rows it touches ------------------------------------------------------ */

/* Address of element d of KV row j of request b in the fixture's pool. */
static size_t kv_elem(const tu_problem *p, int32_t b, int64_t j, int32_t d)
{
    const tu_case *c = &p->c;
    size_t page = (size_t)p->page_table[(size_t)b * (size_t)p->prob.max_pages +
                                        (size_t)(j / c->page_size)];
    size_t row = page * (size_t)c->page_size + (size_t)(j % c->page_size);
    return row * (size_t)(c->Dl + c->Dr) + (size_t)d;
}

/* NaN stays in the rows it touches: NaN in the k_pe of a prefix row poisons its whole request;
 * NaN in the c_kv of one draft node poisons exactly the rows whose nodes see it (the rows that
 * do not see it must not get 0 x NaN); NaN in one q element poisons that (token, head) only. */
static void test_cpu_backend_nan_rows(void **state)
{
    (void)state;
    const mlav_dtype dts[] = {MLAV_DTYPE_F32, MLAV_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        tu_case c = CASE(4, 64, 16, 3, F32, TU_BUSHY, Q(9, 17, 5), Q(100, 700, 40), 3);
        c.dtype = dts[k];
        c.seed = tu_seed();
        tu_problem *p = tu_make(&c);
        const int dt = (int)c.dtype;
        const int32_t W = c.Dl + c.Dr;
        mlav_store_from_f32(p->kv, dt, kv_elem(p, 0, 17, c.Dl + 2), NAN);
        mlav_store_from_f32(p->kv, dt, kv_elem(p, 1, c.prefixes[1] + 3, 7), NAN);
        size_t qrow = (size_t)(p->q_indptr[1] + 10) * (size_t)c.H + 1;
        mlav_store_from_f32(p->q, dt, qrow * (size_t)W + 5, NAN);
        tu_reference(p);
        mlav_tensors t = tu_tensors(p);
        assert_int_equal(run_cpu(p, &t), MLAV_OK);
        expect_match(p, "NaN rows");
        /* the test must mean something: request 0 all NaN, request 1 partly, request 2 clean */
        size_t nan1 = 0;
        for (int32_t b = 0; b < 3; b++)
            for (int32_t r = p->q_indptr[b] * c.H; r < p->q_indptr[b + 1] * c.H; r++) {
                int bad = isnan(p->ref_lse[r]);
                if (b == 0)
                    assert_true(bad);
                else if (b == 2)
                    assert_false(bad);
                else
                    nan1 += (size_t)bad;
            }
        assert_true(nan1 > 1 && nan1 < (size_t)(17 * c.H));
        tu_free(p);
    }
}

/* Any mask is accepted, not only trees: random bits, a node that does not see itself, and rows
 * that see nothing at all (out = 0, lse = -inf where the prefix is empty too). */
static void test_cpu_backend_arbitrary_masks(void **state)
{
    (void)state;
    const mlav_dtype dts[] = {MLAV_DTYPE_F32, MLAV_DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        tu_case c = CASE(8, 64, 16, 16, F32, TU_CHAIN, Q(40, 9, 64, 3), Q(0, 300, 0, 1), 4);
        c.dtype = dts[k];
        c.seed = tu_seed();
        tu_problem *p = tu_make(&c);
        uint64_t rng = c.seed ^ 0x3a5cull;
        const int32_t words = mlav_tree_mask_words(64);
        for (int32_t b = 0; b < c.B; b++)
            for (int32_t i = 0; i < c.q_lens[b]; i++) {
                uint32_t *row = p->tree_mask + (size_t)(p->q_indptr[b] + i) * (size_t)words;
                for (int32_t w = 0; w < words; w++)
                    row[w] = 0;
                if (i % 5 == 2)
                    continue; /* this node sees no draft node at all */
                for (int32_t n = 0; n < c.q_lens[b]; n++)
                    if (tu_next(&rng) % 10 < 3)
                        row[n / 32] |= 1u << (n % 32);
            }
        tu_reference(p);
        mlav_tensors t = tu_tensors(p);
        assert_int_equal(run_cpu(p, &t), MLAV_OK);
        expect_match(p, "arbitrary masks");
        size_t empty = 0;
        for (size_t r = 0; r < p->lse_elems; r++)
            empty += p->ref_lse[r] == -INFINITY;
        assert_true(empty >= (size_t)(8 * c.H)); /* rows 2, 7 of request 0 at least */
        tu_free(p);
    }
}

/* ---- workspace, one-shot, sharing ---------------------------------------------------------- */

static void test_cpu_backend_workspace(void **state)
{
    (void)state;
    tu_case c = CASE(16, 64, 16, 16, BF16, TU_BUSHY, Q(9, 3), Q(1000, 20), 2);
    c.seed = tu_seed();
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    mlav_context *ctx = cpu_context();
    mlav_plan *plan = NULL;
    assert_int_equal(mlav_plan_create(ctx, &p->prob, &plan), MLAV_OK);
    size_t bytes = mlav_plan_workspace_bytes(plan);
    assert_true(bytes > 0);
    void *ws = ws_alloc(bytes);
    mlav_tensors t = tu_tensors(p);

    /* one byte short: refused, nothing written */
    assert_int_equal(mlav_run(plan, &t, ws, bytes - 1, NULL), MLAV_ERR_WORKSPACE);
    assert_true(strlen(mlav_last_error(ctx)) > 0);
    assert_true(tu_guards_ok(p));
    for (size_t k = 0; k < p->out_elems; k++)
        assert_true(isnan(mlav_load_as_f32(p->out, (int)c.dtype, k)));
    assert_int_equal(mlav_run(plan, &t, NULL, bytes, NULL), MLAV_ERR_WORKSPACE);

    /* the exact size works, twice, bit for bit the same */
    assert_int_equal(mlav_run(plan, &t, ws, bytes, NULL), MLAV_OK);
    expect_match(p, "explicit workspace");
    size_t ob = p->out_elems * mlav_dtype_size(c.dtype);
    unsigned char *first = malloc(ob);
    assert_non_null(first);
    memcpy(first, p->out, ob);
    tu_poison(p);
    assert_int_equal(mlav_run(plan, &t, ws, bytes, NULL), MLAV_OK);
    assert_memory_equal(first, p->out, ob);

    /* lse may be NULL */
    tu_poison(p);
    t.lse = NULL;
    assert_int_equal(mlav_run(plan, &t, ws, bytes, NULL), MLAV_OK);
    assert_memory_equal(first, p->out, ob);
    for (size_t k = 0; k < p->lse_elems; k++)
        assert_true(isnan(p->lse[k]));

    free(first);
    free(ws);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    tu_free(p);
}

static void test_cpu_backend_verify_one_shot(void **state)
{
    (void)state;
    tu_case c = CASE(8, 64, 16, 1, F16, TU_DEEP, Q(33, 1), Q(2000, 5), 2);
    c.seed = tu_seed();
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    mlav_context *ctx = cpu_context();
    mlav_tensors t = tu_tensors(p);
    assert_int_equal(mlav_verify(ctx, &p->prob, &t), MLAV_OK);
    expect_match(p, "mlav_verify");
    mlav_context_free(ctx);
    tu_free(p);
}

/* Plans made for more threads than cores: more splits, so the merge of many partial states
 * runs; a plan made for one thread has none. Both must match the oracle. */
static void test_cpu_backend_thread_counts(void **state)
{
    (void)state;
    tu_case c = CASE(16, 64, 16, 16, BF16, TU_CHAIN, Q(9, 2), Q(4097, 3000), 2);
    c.seed = tu_seed();
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    int saved = omp_get_max_threads();
    const int counts[] = {1, 3, 16};
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(counts[k]);
        tu_poison(p);
        mlav_tensors t = tu_tensors(p);
        mlav_status s = run_cpu(p, &t);
        omp_set_num_threads(saved);
        assert_int_equal(s, MLAV_OK);
        char what[64];
        snprintf(what, sizeof what, "plan for %d threads", counts[k]);
        expect_match(p, what);
    }
    tu_free(p);
}

/* One immutable plan, several threads, each with its own workspace and outputs. */
typedef struct shared_job {
    const mlav_plan *plan;
    mlav_tensors t;
    void *ws;
    size_t bytes;
    mlav_status status;
} shared_job;

static void *shared_worker(void *arg)
{
    shared_job *j = arg;
    for (int rep = 0; rep < 3 && j->status == MLAV_OK; rep++)
        j->status = mlav_run(j->plan, &j->t, j->ws, j->bytes, NULL);
    return NULL;
}

#define SHARED_THREADS 4

static void test_cpu_backend_shared_plan(void **state)
{
    (void)state;
    tu_case c = CASE(8, 64, 16, 3, BF16, TU_BUSHY, Q(9, 17), Q(3000, 500), 2);
    c.seed = tu_seed();
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    mlav_context *ctx = cpu_context();
    mlav_plan *plan = NULL;
    assert_int_equal(mlav_plan_create(ctx, &p->prob, &plan), MLAV_OK);
    size_t bytes = mlav_plan_workspace_bytes(plan);
    size_t ob = p->out_elems * mlav_dtype_size(c.dtype), lb = p->lse_elems * sizeof(float);

    /* the single-threaded answer every thread must reproduce bit for bit */
    mlav_tensors t = tu_tensors(p);
    void *ws0 = ws_alloc(bytes);
    assert_int_equal(mlav_run(plan, &t, ws0, bytes, NULL), MLAV_OK);
    expect_match(p, "shared plan, first run");
    free(ws0);

    shared_job jobs[SHARED_THREADS];
    for (int k = 0; k < SHARED_THREADS; k++) {
        jobs[k] = (shared_job){.plan = plan, .t = t, .ws = ws_alloc(bytes), .bytes = bytes};
        jobs[k].t.out = malloc(ob);
        jobs[k].t.lse = malloc(lb);
        assert_non_null(jobs[k].t.out);
        assert_non_null(jobs[k].t.lse);
    }

    /* pthreads: each mlav_run opens its own OpenMP team */
    pthread_t th[SHARED_THREADS];
    for (int k = 0; k < SHARED_THREADS; k++)
        assert_int_equal(pthread_create(&th[k], NULL, shared_worker, &jobs[k]), 0);
    for (int k = 0; k < SHARED_THREADS; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    for (int k = 0; k < SHARED_THREADS; k++) {
        assert_int_equal(jobs[k].status, MLAV_OK);
        assert_memory_equal(jobs[k].t.out, p->out, ob);
        assert_memory_equal(jobs[k].t.lse, p->lse, lb);
        memset(jobs[k].t.out, 0xff, ob);
        memset(jobs[k].t.lse, 0xff, lb);
    }

    /* OpenMP threads: each call runs nested (a team of one, unless nesting is enabled) */
#pragma omp parallel for num_threads(SHARED_THREADS) schedule(static, 1)
    for (int k = 0; k < SHARED_THREADS; k++)
        shared_worker(&jobs[k]);
    for (int k = 0; k < SHARED_THREADS; k++) {
        assert_int_equal(jobs[k].status, MLAV_OK);
        assert_memory_equal(jobs[k].t.out, p->out, ob);
        assert_memory_equal(jobs[k].t.lse, p->lse, lb);
        free(jobs[k].t.out);
        free(jobs[k].t.lse);
        free(jobs[k].ws);
    }
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    tu_free(p);
}

/* A 200k-token prefix runs in a workspace that does not grow with the prefix. */
static void test_cpu_backend_long_prefix(void **state)
{
    (void)state;
    tu_case c = CASE(1, 64, 16, 1, BF16, TU_CHAIN_NULL, Q(9), Q(200000), 1);
    c.seed = tu_seed();
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    mlav_context *ctx = cpu_context();
    mlav_plan *plan = NULL;
    assert_int_equal(mlav_plan_create(ctx, &p->prob, &plan), MLAV_OK);
    size_t bytes = mlav_plan_workspace_bytes(plan);
    size_t kv_bytes = p->kv_elems * mlav_dtype_size(c.dtype);
    print_message("long prefix: workspace %zu bytes for a %zu-byte KV cache\n", bytes, kv_bytes);
    /* threads x (tile + rows) scratch plus the split partials: far below the KV itself */
    assert_true(bytes < (size_t)8 << 20);
    assert_true(bytes < kv_bytes / 4);

    /* the same plan with twice the prefix needs the same workspace */
    int32_t kv2[1] = {p->kv_lens[0] * 2};
    mlav_problem prob2 = p->prob;
    prob2.kv_lens = kv2;
    prob2.max_pages = kv2[0];
    mlav_plan *plan2 = NULL;
    assert_int_equal(mlav_plan_create(ctx, &prob2, &plan2), MLAV_OK);
    assert_true(mlav_plan_workspace_bytes(plan2) <= bytes);
    mlav_plan_free(plan2);

    void *ws = ws_alloc(bytes);
    mlav_tensors t = tu_tensors(p);
    assert_int_equal(mlav_run(plan, &t, ws, bytes, NULL), MLAV_OK);
    expect_match(p, "200k prefix");
    free(ws);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    tu_free(p);
}

/* ---- scores whose running max keeps moving --------------------------------------------------- */

/* Rising scores (tu_rising_scores): the online softmax rescales its running output many times
 * per row, by factors far from 1, at different tiles in different rows. */
static void test_cpu_backend_rising_scores(void **state)
{
    (void)state;
    static const tu_case rising[] = {
        CASE(16, 512, 64, 1, BF16, TU_BUSHY, Q(9, 1), Q(3000, 500), 2),
        CASE(8, 512, 64, 16, F32, TU_CHAIN, Q(33), Q(2000), 1),
        CASE(64, 512, 64, 64, F16, TU_DEEP, Q(9), Q(1500), 1),
    };
    for (size_t i = 0; i < sizeof rising / sizeof rising[0]; i++) {
        tu_case c = rising[i];
        c.seed = tu_seed();
        tu_problem *p = tu_make(&c);
        tu_rising_scores(p, 64);
        tu_reference(p);
        mlav_tensors t = tu_tensors(p);
        assert_int_equal(run_cpu(p, &t), MLAV_OK);
        expect_match(p, "rising scores");
        tu_free(p);
    }
}

/* Values near 1e30 and 1e-30 (tu_scale_magnitudes): the same softmax, out scaled by 2^+-100. */
static void test_cpu_backend_extreme_magnitudes(void **state)
{
    (void)state;
    static const tu_case cases[] = {
        CASE(16, 512, 64, 1, BF16, TU_BUSHY, Q(9, 1), Q(700, 300), 2),
        CASE(8, 512, 64, 16, F32, TU_CHAIN, Q(33), Q(900), 1),
    };
    static const int exps[] = {100, -100};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
            tu_case c = cases[i];
            c.seed = tu_seed();
            tu_problem *p = tu_make(&c);
            tu_scale_magnitudes(p, exps[k]);
            tu_reference(p);
            mlav_tensors t = tu_tensors(p);
            assert_int_equal(run_cpu(p, &t), MLAV_OK);
            expect_match(p, exps[k] > 0 ? "values x 2^100" : "values x 2^-100");
            tu_free(p);
        }
}

/* Device-resident tensors are for CUDA contexts: the CPU backend says so and writes nothing. */
static void test_cpu_backend_device_memory(void **state)
{
    (void)state;
    tu_case c = CASE(2, 64, 16, 1, F32, TU_CHAIN_NULL, Q(2), Q(10), 1);
    c.seed = tu_seed();
    tu_problem *p = tu_make(&c);
    mlav_tensors t = tu_tensors(p);
    t.memory = MLAV_MEM_DEVICE;
    assert_int_equal(run_cpu(p, &t), MLAV_ERR_UNSUPPORTED);
    assert_true(strlen(mlav_last_error(NULL)) > 0);
    assert_true(tu_guards_ok(p));
    for (size_t k = 0; k < p->out_elems; k++)
        assert_true(isnan(mlav_load_as_f32(p->out, (int)c.dtype, k)));
    tu_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_backend_nan_rows),
        cmocka_unit_test(test_cpu_backend_arbitrary_masks),
        cmocka_unit_test(test_cpu_backend_workspace),
        cmocka_unit_test(test_cpu_backend_verify_one_shot),
        cmocka_unit_test(test_cpu_backend_thread_counts),
        cmocka_unit_test(test_cpu_backend_shared_plan),
        cmocka_unit_test(test_cpu_backend_long_prefix),
        cmocka_unit_test(test_cpu_backend_rising_scores),
        cmocka_unit_test(test_cpu_backend_extreme_magnitudes),
        cmocka_unit_test(test_cpu_backend_device_memory),
    };
    return cmocka_run_group_tests_name("cpu_backend", tests, NULL, NULL);
}
