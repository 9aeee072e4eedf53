/* Concurrency on the GPU: host threads, each with its own context and its own cudaStream_t, run
 * one shared plan at once (device pointers, several runs in flight per stream, then the offload
 * mode), and every result is bit-identical to a single-threaded run on one stream; no run writes
 * past its out/lse. Skips without CUDA built in or without a device of cc >= 8.0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify.h"
#include "test_util.h"

#ifdef MLAV_WITH_CUDA
#include <cuda_runtime_api.h>

#define N_THREADS 4
#define IN_FLIGHT 3 /* runs queued on a stream before it is synchronized, each to its own out */
#define ROUNDS 2
#define GUARD 256   /* device bytes of 0xA5 before and after every out and lse */
#define GUARD_BYTE 0xA5

#define CK TU_CK /* test_util.h */

/* A device allocation [guard][payload][guard]. */
typedef struct dguard {
    unsigned char *base;
    void *p;
    size_t bytes;
} dguard;

/* The shared, read-only device inputs and the single-threaded result of one problem. */
typedef struct shared {
    mlav_backend backend;
    tu_problem *p;
    mlav_plan *plan;
    void *q, *kv;
    int32_t *pt;
    uint32_t *mask;
    size_t out_bytes, lse_bytes;
    unsigned char *out_ref;
    float *lse_ref;
} shared;

typedef struct report {
    int runs, failures;
    char first[320];
} report;

typedef struct thread_arg {
    shared *s;
    int id;
    report r;
} thread_arg;

static void note(report *r, const char *fmt, ...)
{
    r->failures++;
    if (r->first[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first, sizeof r->first, fmt, ap);
    va_end(ap);
}

static int32_t max_q_of(const tu_problem *p)
{
    int32_t m = 0;
    for (int32_t b = 0; b < p->c.B; b++)
        m = p->c.q_lens[b] > m ? p->c.q_lens[b] : m;
    return m;
}

/* cudaMalloc from any thread; returns NULL (and notes why) instead of failing the test. */
static void *dmalloc_r(size_t bytes, report *r)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        note(r, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static int dguard_new(dguard *g, size_t bytes, report *r)
{
    g->bytes = bytes;
    g->base = dmalloc_r(bytes + 2 * GUARD, r);
    g->p = g->base ? g->base + GUARD : NULL;
    return g->base && cudaMemset(g->base, GUARD_BYTE, bytes + 2 * GUARD) == cudaSuccess;
}

/* Copy the payload back; check the guards. 1 if intact. */
static int dguard_fetch(const dguard *g, void *host, cudaStream_t st, report *r)
{
    unsigned char *h = malloc(g->bytes + 2 * GUARD);
    if (!h) {
        note(r, "out of host memory");
        return 0;
    }
    cudaError_t e = cudaMemcpyAsync(h, g->base, g->bytes + 2 * GUARD, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) {
        note(r, "copy back: %s", cudaGetErrorString(e));
        free(h);
        return 0;
    }
    int ok = 1;
    for (size_t i = 0; i < GUARD; i++)
        ok &= h[i] == GUARD_BYTE && h[GUARD + g->bytes + i] == GUARD_BYTE;
    memcpy(host, h + GUARD, g->bytes);
    free(h);
    return ok;
}

/* Inputs on the device once; the single-threaded result: one thread, one stream, one run. */
static int setup_shared(shared *s, mlav_backend backend, const tu_case *c)
{
    memset(s, 0, sizeof *s);
    s->backend = backend;
    s->p = tu_make(c);
    const tu_problem *p = s->p;
    mlav_context *ctx = NULL;
    assert_int_equal(mlav_context_create(&ctx, backend), MLAV_OK);
    mlav_status st = mlav_plan_create(ctx, &p->prob, &s->plan);
    if (st == MLAV_ERR_UNSUPPORTED) { /* cuda-naive: a score row past shared memory */
        char name[200];
        tu_case_name(c, name, sizeof name);
        printf("*** SKIP %s %s: %s\n", mlav_backend_name(backend), name, mlav_last_error(NULL));
        mlav_context_free(ctx);
        tu_free(s->p);
        return 0;
    }
    assert_int_equal(st, MLAV_OK);
    mlav_context_free(ctx); /* a plan outlives its context */

    const size_t esz = mlav_dtype_size(c->dtype);
    const size_t pt_bytes = sizeof(int32_t) * (size_t)p->prob.batch * (size_t)p->prob.max_pages;
    const size_t mask_bytes = p->tree_mask ? sizeof(uint32_t) * (size_t)p->q_indptr[c->B] *
                                                 (size_t)mlav_tree_mask_words(max_q_of(p))
                                           : 0;
    s->out_bytes = p->out_elems * esz;
    s->lse_bytes = p->lse_elems * sizeof(float);
    CK(cudaMalloc(&s->q, p->q_elems * esz));
    CK(cudaMalloc(&s->kv, p->kv_elems * p->kv_esz));
    CK(cudaMalloc((void **)&s->pt, pt_bytes));
    CK(cudaMemcpy(s->q, p->q, p->q_elems * esz, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s->kv, p->kv, p->kv_elems * p->kv_esz, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s->pt, p->page_table, pt_bytes, cudaMemcpyHostToDevice));
    if (mask_bytes) {
        CK(cudaMalloc((void **)&s->mask, mask_bytes));
        CK(cudaMemcpy(s->mask, p->tree_mask, mask_bytes, cudaMemcpyHostToDevice));
    }
    CK(cudaDeviceSynchronize()); /* pageable copies land before non-blocking streams read */

    report r = {0};
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    dguard out, lse;
    assert_true(dguard_new(&out, s->out_bytes, &r));
    assert_true(dguard_new(&lse, s->lse_bytes, &r));
    const size_t ws_bytes = mlav_plan_workspace_bytes(s->plan);
    void *ws = ws_bytes ? dmalloc_r(ws_bytes, &r) : NULL;
    CK(cudaDeviceSynchronize());
    mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = s->q, .kv_cache = s->kv,
                      .num_pages = p->num_pages, .page_table = s->pt, .tree_mask = s->mask,
                      .out = out.p, .lse = lse.p};
    st = mlav_run(s->plan, &t, ws, ws_bytes, stream);
    if (st != MLAV_OK)
        fail_msg("single-threaded %s run: %s: %s", mlav_backend_name(backend),
                 mlav_status_string(st), mlav_last_error(NULL));
    s->out_ref = malloc(s->out_bytes);
    s->lse_ref = malloc(s->lse_bytes);
    assert_non_null(s->out_ref);
    assert_non_null(s->lse_ref);
    assert_true(dguard_fetch(&out, s->out_ref, stream, &r));
    assert_true(dguard_fetch(&lse, s->lse_ref, stream, &r));
    assert_int_equal(r.failures, 0);
    /* the reference itself is right: against the fp64 oracle, at the DESIGN tolerance */
    tu_reference(s->p);
    memcpy(s->p->out, s->out_ref, s->out_bytes);
    memcpy(s->p->lse, s->lse_ref, s->lse_bytes);
    char msg[256];
    if (!tu_compare(s->p, tu_out_tol(c->dtype), tu_lse_tol(c->dtype), msg, sizeof msg))
        fail_msg("single-threaded %s run vs the oracle: %s", mlav_backend_name(backend), msg);
    CK(cudaFree(out.base));
    CK(cudaFree(lse.base));
    if (ws)
        CK(cudaFree(ws));
    CK(cudaStreamDestroy(stream));
    return 1;
}

static void free_shared(shared *s)
{
    mlav_plan_free(s->plan);
    cudaFree(s->q);
    cudaFree(s->kv);
    cudaFree(s->pt);
    if (s->mask)
        cudaFree(s->mask);
    free(s->out_ref);
    free(s->lse_ref);
    tu_free(s->p);
}

/* One host thread: its own context and stream; IN_FLIGHT device-pointer runs queued before one
 * synchronization (each into its own guarded out/lse and workspace), then one offload run. */
static void *thread_main(void *arg)
{
    thread_arg *a = arg;
    shared *s = a->s;
    report *r = &a->r;
    const tu_problem *p = s->p;
    mlav_context *ctx = NULL;
    cudaStream_t stream = NULL;
    if (mlav_context_create(&ctx, s->backend) != MLAV_OK) {
        note(r, "thread %d: context: %s", a->id, mlav_last_error(NULL));
        return NULL;
    }
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        note(r, "thread %d: no stream", a->id);
        mlav_context_free(ctx);
        return NULL;
    }
    const size_t ws_bytes = mlav_plan_workspace_bytes(s->plan);
    dguard out[IN_FLIGHT], lse[IN_FLIGHT];
    void *ws[IN_FLIGHT];
    memset(out, 0, sizeof out);
    memset(lse, 0, sizeof lse);
    memset(ws, 0, sizeof ws);
    unsigned char *h_out = malloc(s->out_bytes);
    float *h_lse = malloc(s->lse_bytes);
    int ok = h_out && h_lse;
    for (int k = 0; ok && k < IN_FLIGHT; k++) {
        ok = dguard_new(&out[k], s->out_bytes, r) && dguard_new(&lse[k], s->lse_bytes, r);
        if (ok && ws_bytes)
            ok = (ws[k] = dmalloc_r(ws_bytes, r)) != NULL;
    }
    if (ok && cudaDeviceSynchronize() != cudaSuccess) /* the guard memsets are done */
        ok = 0;
    for (int round = 0; ok && round < ROUNDS; round++) {
        for (int k = 0; k < IN_FLIGHT; k++) {
            mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = s->q, .kv_cache = s->kv,
                              .num_pages = p->num_pages, .page_table = s->pt,
                              .tree_mask = s->mask, .out = out[k].p, .lse = lse[k].p};
            mlav_status st = mlav_run(s->plan, &t, ws[k], ws_bytes, stream);
            r->runs++;
            if (st != MLAV_OK)
                note(r, "thread %d: run: %s: %s", a->id, mlav_status_string(st),
                     mlav_last_error(ctx));
        }
        for (int k = 0; k < IN_FLIGHT; k++) {
            int intact = dguard_fetch(&out[k], h_out, stream, r);
            intact &= dguard_fetch(&lse[k], h_lse, stream, r);
            if (!intact)
                note(r, "thread %d round %d slot %d: a guard was written", a->id, round, k);
            if (memcmp(h_out, s->out_ref, s->out_bytes) != 0 ||
                memcmp(h_lse, s->lse_ref, s->lse_bytes) != 0)
                note(r, "thread %d round %d slot %d: out/lse differ from the single-threaded "
                     "run", a->id, round, k);
        }
    }
    /* offload mode: host tensors mapped on this thread's stream (allocates, synchronizes) */
    if (ok) {
        mlav_tensors t = tu_tensors(p);
        t.out = h_out;
        t.lse = h_lse;
        memset(h_out, 0xFF, s->out_bytes);
        mlav_status st = mlav_run(s->plan, &t, ws[0], ws_bytes, stream);
        r->runs++;
        if (st != MLAV_OK)
            note(r, "thread %d: offload run: %s: %s", a->id, mlav_status_string(st),
                 mlav_last_error(ctx));
        else if (memcmp(h_out, s->out_ref, s->out_bytes) != 0 ||
                 memcmp(h_lse, s->lse_ref, s->lse_bytes) != 0)
            note(r, "thread %d: offload out/lse differ from the single-threaded run", a->id);
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess)
        note(r, "thread %d: stream error %s", a->id, cudaGetErrorString(cudaGetLastError()));
    for (int k = 0; k < IN_FLIGHT; k++) {
        if (out[k].base)
            cudaFree(out[k].base);
        if (lse[k].base)
            cudaFree(lse[k].base);
        if (ws[k])
            cudaFree(ws[k]);
    }
    free(h_out);
    free(h_lse);
    cudaStreamDestroy(stream);
    mlav_context_free(ctx);
    return NULL;
}

static void streams_on(mlav_backend backend, const tu_case *c)
{
    shared s;
    if (!setup_shared(&s, backend, c))
        return;
    pthread_t th[N_THREADS];
    thread_arg args[N_THREADS];
    for (int k = 0; k < N_THREADS; k++) {
        args[k] = (thread_arg){.s = &s, .id = k};
        assert_int_equal(pthread_create(&th[k], NULL, thread_main, &args[k]), 0);
    }
    for (int k = 0; k < N_THREADS; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    CK(cudaDeviceSynchronize());
    char name[200];
    tu_case_name(c, name, sizeof name);
    int runs = 0;
    for (int k = 0; k < N_THREADS; k++) {
        runs += args[k].r.runs;
        if (args[k].r.failures)
            fail_msg("%s %s: %d failures; first: %s", mlav_backend_name(backend), name,
                     args[k].r.failures, args[k].r.first);
    }
    printf("  ok %-10s %s: %d threads x own stream, %d runs bit-identical to one thread\n",
           mlav_backend_name(backend), name, N_THREADS, runs);
    fflush(stdout);
    free_shared(&s);
}

/* The flash kernel at its dims: a long prefix (split-KV + combine), a tree, page 1 and 64. */
static void test_cuda_streams_flash(void **state)
{
    (void)state;
    tu_require_device();
    const uint64_t seed = tu_seed();
    const tu_case cases[2] = {
        {.H = 16, .Dl = 512, .Dr = 64, .page_size = 1, .B = 3, .dtype = MLAV_DTYPE_BF16,
         .q_lens = {9, 33, 1}, .prefixes = {4100, 300, 0}, .tree = TU_DEEP, .seed = seed},
        {.H = 8, .Dl = 512, .Dr = 64, .page_size = 64, .B = 2, .dtype = MLAV_DTYPE_F32,
         .q_lens = {5, 12}, .prefixes = {2000, 64}, .tree = TU_CHAIN_NULL, .seed = seed + 1},
    };
    for (int i = 0; i < 2; i++)
        streams_on(MLAV_BACKEND_CUDA, &cases[i]);
}

/* The naive kernel: other dims, F16. */
static void test_cuda_streams_naive(void **state)
{
    (void)state;
    tu_require_device();
    const tu_case c = {.H = 4, .Dl = 64, .Dr = 16, .page_size = 16, .B = 2,
                       .dtype = MLAV_DTYPE_F16, .q_lens = {7, 3}, .prefixes = {900, 10},
                       .tree = TU_BUSHY, .seed = tu_seed()};
    streams_on(MLAV_BACKEND_CUDA_NAIVE, &c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_streams_flash),
        cmocka_unit_test(test_cuda_streams_naive),
    };
    /* ctest reads 77 as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt): without a device
     * every GPU case skips inside cmocka, which would otherwise show as Passed */
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#else /* built without CUDA */

static void test_cuda_streams_not_built(void **state)
{
    (void)state;
    print_message("built without CUDA: skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_streams_not_built),
    };
    /* ctest reads 77 as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt): without a device
     * every GPU case skips inside cmocka, which would otherwise show as Passed */
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#endif
