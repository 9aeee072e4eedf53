/* Concurrency on the CPU backends: one plan shared by many threads (pthreads, and OpenMP threads
 * whose runs nest inside their parallel region), one context per thread, runs, one-shot verifies
 * and failing calls interleaved; every result is bit-identical to a single-threaded run, no write
 * escapes out/lse, and each thread's error sentence is its own. Run under ThreadSanitizer by CI
 * (scripts/sanitize.sh tsan); see docs/RELIABILITY.md for what TSan covers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify.h"
#include "test_util.h"

#define N_PTHREADS 6
#define N_OMP_THREADS 4
#define ITERS 3
#define GUARD 64
#define GUARD_BYTE 0x5A

/* The shared work: a few problems, their plans (made on the main thread) and single-threaded
 * results, for one backend. */
typedef struct shared {
    mlav_backend backend;
    int n;
    tu_problem *p[3];
    mlav_plan *plan[3];
    unsigned char *out_ref[3];
    float *lse_ref[3];
    pthread_barrier_t barrier;
} shared;

/* What one thread saw; the main thread asserts on it (cmocka's failures cannot leave a thread). */
typedef struct report {
    int runs, mismatches, guard_breaks, bad_status, wrong_sentence;
    char first[256];
} report;

static void note(report *r, int *counter, const char *fmt, ...)
{
    (*counter)++;
    if (r->first[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first, sizeof r->first, fmt, ap);
    va_end(ap);
}

static size_t out_bytes(const tu_problem *p)
{
    return p->out_elems * mlav_dtype_size(p->c.dtype);
}

static void setup_shared(shared *s, mlav_backend backend)
{
    memset(s, 0, sizeof *s);
    s->backend = backend;
    const uint64_t seed = tu_seed();
    /* one long request for the cpu backend's KV splits and merges; several requests of mixed
     * lengths; a causal chain without a mask */
    const tu_case cases[3] = {
        {.H = 8, .Dl = 64, .Dr = 16, .page_size = 16, .B = 2, .dtype = MLAV_DTYPE_BF16,
         .q_lens = {7, 3}, .prefixes = {1500, 20}, .tree = TU_DEEP, .seed = seed},
        {.H = 4, .Dl = 32, .Dr = 8, .page_size = 1, .B = 4, .dtype = MLAV_DTYPE_F32,
         .q_lens = {9, 1, 33, 4}, .prefixes = {100, 0, 300, 45}, .tree = TU_BUSHY,
         .seed = seed + 1},
        {.H = 2, .Dl = 48, .Dr = 0, .page_size = 64, .B = 2, .dtype = MLAV_DTYPE_F16,
         .q_lens = {5, 12}, .prefixes = {700, 64}, .tree = TU_CHAIN_NULL, .seed = seed + 2},
    };
    /* the fp64 oracle is slow: smaller work for it */
    s->n = backend == MLAV_BACKEND_REFERENCE ? 2 : 3;
    mlav_context *ctx = NULL;
    assert_int_equal(mlav_context_create(&ctx, backend), MLAV_OK);
    for (int i = 0; i < s->n; i++) {
        tu_case c = cases[i];
        if (backend == MLAV_BACKEND_REFERENCE)
            c.prefixes[0] /= 8;
        s->p[i] = tu_make(&c);
        assert_int_equal(mlav_plan_create(ctx, &s->p[i]->prob, &s->plan[i]), MLAV_OK);
        /* the single-threaded result: one caller, nothing else running */
        mlav_tensors t = tu_tensors(s->p[i]);
        assert_int_equal(mlav_verify(ctx, &s->p[i]->prob, &t), MLAV_OK);
        s->out_ref[i] = malloc(out_bytes(s->p[i]));
        s->lse_ref[i] = malloc(sizeof(float) * s->p[i]->lse_elems);
        assert_non_null(s->out_ref[i]);
        assert_non_null(s->lse_ref[i]);
        memcpy(s->out_ref[i], s->p[i]->out, out_bytes(s->p[i]));
        memcpy(s->lse_ref[i], s->p[i]->lse, sizeof(float) * s->p[i]->lse_elems);
        /* and the shared plan agrees with the one-shot path before any thread starts */
        void *ws = NULL;
        size_t bytes = mlav_plan_workspace_bytes(s->plan[i]);
        assert_int_equal(posix_memalign(&ws, 256, bytes + 256), 0);
        tu_poison(s->p[i]);
        assert_int_equal(mlav_run(s->plan[i], &t, ws, bytes, NULL), MLAV_OK);
        assert_memory_equal(s->p[i]->out, s->out_ref[i], out_bytes(s->p[i]));
        free(ws);
    }
    /* the plans outlive the context that made them: a plan is independent once created */
    mlav_context_free(ctx);
}

static void free_shared(shared *s)
{
    for (int i = 0; i < s->n; i++) {
        mlav_plan_free(s->plan[i]);
        free(s->out_ref[i]);
        free(s->lse_ref[i]);
        tu_free(s->p[i]);
    }
}

/* One thread's share: its own context, workspace and output buffers (guarded), the shared
 * plans; runs and one-shot verifies alternate. */
static void work(shared *s, int id, int use_barrier, report *r)
{
    mlav_context *ctx = NULL;
    if (mlav_context_create(&ctx, s->backend) != MLAV_OK) {
        note(r, &r->bad_status, "thread %d: no context: %s", id, mlav_last_error(NULL));
        return;
    }
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < s->n; i++) {
            const tu_problem *p = s->p[i];
            const size_t ob = out_bytes(p), lb = sizeof(float) * p->lse_elems;
            unsigned char *out = malloc(ob + 2 * GUARD), *lse = malloc(lb + 2 * GUARD);
            size_t bytes = mlav_plan_workspace_bytes(s->plan[i]);
            void *ws = NULL;
            if (!out || !lse || posix_memalign(&ws, 256, bytes + 256) != 0) {
                note(r, &r->bad_status, "thread %d: out of memory", id);
                free(out);
                free(lse);
                break;
            }
            memset(out, GUARD_BYTE, ob + 2 * GUARD);
            memset(lse, GUARD_BYTE, lb + 2 * GUARD);
            mlav_tensors t = tu_tensors(p);
            t.out = out + GUARD;
            t.lse = (float *)(void *)(lse + GUARD);
            mlav_status st = ((it + id) & 1) ? mlav_verify(ctx, &p->prob, &t)
                                             : mlav_run(s->plan[i], &t, ws, bytes, NULL);
            r->runs++;
            if (st != MLAV_OK)
                note(r, &r->bad_status, "thread %d problem %d: %s: %s", id, i,
                     mlav_status_string(st), mlav_last_error(ctx));
            else if (memcmp(out + GUARD, s->out_ref[i], ob) != 0 ||
                     memcmp(lse + GUARD, s->lse_ref[i], lb) != 0)
                note(r, &r->mismatches, "thread %d problem %d iteration %d: out/lse differ from "
                     "the single-threaded run", id, i, it);
            for (size_t g = 0; g < GUARD; g++)
                if (out[g] != GUARD_BYTE || out[GUARD + ob + g] != GUARD_BYTE ||
                    lse[g] != GUARD_BYTE || lse[GUARD + lb + g] != GUARD_BYTE) {
                    note(r, &r->guard_breaks, "thread %d problem %d: a guard was written", id, i);
                    break;
                }
            free(ws);
            free(out);
            free(lse);
        }
        /* A failing call of our own, while the others fail with theirs: the sentence each
         * thread reads back names its own bad page id (errors are per thread). */
        const tu_problem *p = s->p[0];
        size_t npt = (size_t)p->prob.batch * (size_t)p->prob.max_pages;
        int32_t *pt = malloc(sizeof(int32_t) * npt);
        if (!pt) {
            note(r, &r->bad_status, "thread %d: out of memory", id);
            break;
        }
        memcpy(pt, p->page_table, sizeof(int32_t) * npt);
        pt[0] = -1000 - id;
        mlav_tensors t = tu_tensors(p);
        t.page_table = pt; /* out is the shared problem's: refused calls write nothing */
        mlav_status st = mlav_run(s->plan[0], &t, NULL, 0, NULL);
        if (use_barrier)
            pthread_barrier_wait(&s->barrier); /* every thread has failed before any reads */
        char want[64];
        snprintf(want, sizeof want, "= %d ", -1000 - id);
        if (st != MLAV_ERR_INVALID_ARG)
            note(r, &r->bad_status, "thread %d: a bad page id gave %s", id,
                 mlav_status_string(st));
        else if (!strstr(mlav_last_error(ctx), want))
            note(r, &r->wrong_sentence, "thread %d read \"%s\", not its own error", id,
                 mlav_last_error(ctx));
        free(pt);
    }
    mlav_context_free(ctx);
}

typedef struct thread_arg {
    shared *s;
    int id;
    report r;
} thread_arg;

static void *thread_main(void *arg)
{
    thread_arg *a = arg;
    work(a->s, a->id, 1, &a->r);
    return NULL;
}

static void check_reports(const report *r, int n, const char *what)
{
    int runs = 0;
    for (int k = 0; k < n; k++) {
        runs += r[k].runs;
        if (r[k].mismatches || r[k].guard_breaks || r[k].bad_status || r[k].wrong_sentence)
            fail_msg("%s: %d mismatches, %d guard breaks, %d bad statuses, %d wrong sentences; "
                     "first: %s",
                     what, r[k].mismatches, r[k].guard_breaks, r[k].bad_status,
                     r[k].wrong_sentence, r[k].first);
    }
    print_message("  %s: %d runs, all bit-identical to the single-threaded run\n", what, runs);
}

static void pthreads_on(mlav_backend backend)
{
    shared s;
    setup_shared(&s, backend);
    assert_int_equal(pthread_barrier_init(&s.barrier, NULL, N_PTHREADS), 0);
    pthread_t th[N_PTHREADS];
    thread_arg args[N_PTHREADS];
    for (int k = 0; k < N_PTHREADS; k++) {
        args[k] = (thread_arg){.s = &s, .id = k};
        assert_int_equal(pthread_create(&th[k], NULL, thread_main, &args[k]), 0);
    }
    for (int k = 0; k < N_PTHREADS; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    report r[N_PTHREADS];
    for (int k = 0; k < N_PTHREADS; k++)
        r[k] = args[k].r;
    char what[64];
    snprintf(what, sizeof what, "%d pthreads on %s", N_PTHREADS, mlav_backend_name(backend));
    check_reports(r, N_PTHREADS, what);
    pthread_barrier_destroy(&s.barrier);
    free_shared(&s);
}

static void test_concurrency_pthreads_cpu(void **state)
{
    (void)state;
    pthreads_on(MLAV_BACKEND_CPU);
}

static void test_concurrency_pthreads_reference(void **state)
{
    (void)state;
    pthreads_on(MLAV_BACKEND_REFERENCE);
}

/* OpenMP threads as the callers: the library's own parallel regions nest inside the caller's
 * (inactive, one thread, unless the caller enabled nesting) and must give the same bits. */
static void omp_on(mlav_backend backend)
{
    shared s;
    setup_shared(&s, backend);
    report r[N_OMP_THREADS];
    memset(r, 0, sizeof r);
    int team = 0;
#pragma omp parallel num_threads(N_OMP_THREADS)
    {
#pragma omp single
        team = omp_get_num_threads();
        /* no barrier inside work(): OpenMP may give us fewer threads than asked */
        int id = omp_get_thread_num();
        work(&s, id, 0, &r[id]);
    }
    char what[64];
    snprintf(what, sizeof what, "%d OpenMP threads on %s", team, mlav_backend_name(backend));
    check_reports(r, team, what);
    free_shared(&s);
}

static void test_concurrency_openmp_cpu(void **state)
{
    (void)state;
    omp_on(MLAV_BACKEND_CPU);
}

static void test_concurrency_openmp_reference(void **state)
{
    (void)state;
    omp_on(MLAV_BACKEND_REFERENCE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrency_pthreads_cpu),
        cmocka_unit_test(test_concurrency_pthreads_reference),
        cmocka_unit_test(test_concurrency_openmp_cpu),
        cmocka_unit_test(test_concurrency_openmp_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
