/* A page table shared by every request (mlav_tensors.page_table_rows): request b reads row
 * page_table_rows[b] of a [num_rows, max_pages] table, as an engine's req_to_token indexed by
 * req_pool_indices. On every compiled-in backend with host tensors (the CUDA ones through the
 * offload mapping, which gathers the rows), each case is run twice on the same backend: with its
 * own [B, max_pages] table, and with the same rows scattered through a larger shared table whose
 * other rows are page ids far outside the pool. Both must match the fp64 oracle, and each other
 * bit for bit (the rows are the same, so nothing else may differ). Host indices outside the
 * table, a row count below 1, and a misaligned index array are refused before anything is
 * written. Device indices are test_page_rows_gpu.c's. Fresh seed per run (printed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mlaverify.h"
#include "test_util.h"

static const mlav_backend backends[] = {MLAV_BACKEND_REFERENCE, MLAV_BACKEND_CPU,
                                        MLAV_BACKEND_CUDA, MLAV_BACKEND_CUDA_NAIVE};

#define QS(...) .q_lens = {__VA_ARGS__}
#define PS(...) .prefixes = {__VA_ARGS__}

static const tu_case cases[] = {
    {.H = 8, .Dl = 512, .Dr = 64, .page_size = 1, .B = 4, .dtype = MLAV_DTYPE_BF16,
     .tree = TU_BUSHY, QS(9, 1, 0, 4), PS(300, 17, 40, 0)},
    {.H = 16, .Dl = 512, .Dr = 64, .page_size = 16, .B = 3, .dtype = MLAV_DTYPE_F32,
     .tree = TU_DEEP, QS(5, 9, 2), PS(1000, 64, 255)},
    {.H = 4, .Dl = 512, .Dr = 64, .page_size = 64, .B = 2, .dtype = MLAV_DTYPE_BF16,
     .tree = TU_CHAIN_NULL, QS(16, 3), PS(4097, 130), .kv_dtype = MLAV_DTYPE_FP8_E4M3},
    {.H = 3, .Dl = 64, .Dr = 16, .page_size = 7, .B = 5, .dtype = MLAV_DTYPE_F16,
     .tree = TU_CHAIN, QS(2, 0, 7, 1, 3), PS(50, 9, 0, 333, 20)},
};

/* A shared table of `rows` rows holding p's rows at a shuffled index each (rows > B); every
 * other row is page ids far outside the pool, so a request that read the wrong row would be
 * refused on the host or NaN on the device. */
typedef struct shared_table {
    int32_t *table; /* [rows, max_pages] */
    int32_t *index; /* [B] */
    int64_t rows;
} shared_table;

static shared_table make_shared(const tu_problem *p, uint64_t *rng)
{
    const int32_t B = p->c.B, mp = p->prob.max_pages;
    shared_table s;
    s.rows = 2 * (int64_t)B + 3;
    s.table = tu_xcalloc((size_t)s.rows * (size_t)mp, sizeof(int32_t));
    s.index = tu_xcalloc((size_t)B, sizeof(int32_t));
    for (size_t k = 0; k < (size_t)s.rows * (size_t)mp; k++)
        s.table[k] = (int32_t)(p->num_pages + 1000 + (int64_t)(k % 7));
    int32_t *perm = tu_xcalloc((size_t)s.rows, sizeof(int32_t));
    for (int32_t r = 0; r < s.rows; r++)
        perm[r] = r;
    for (int32_t r = (int32_t)s.rows - 1; r > 0; r--) {
        int32_t k = (int32_t)(tu_next(rng) % (uint64_t)(r + 1)), tmp = perm[r];
        perm[r] = perm[k];
        perm[k] = tmp;
    }
    for (int32_t b = 0; b < B; b++) {
        s.index[b] = perm[b];
        memcpy(s.table + (size_t)perm[b] * (size_t)mp, p->page_table + (size_t)b * (size_t)mp,
               sizeof(int32_t) * (size_t)mp);
    }
    free(perm);
    return s;
}

static void free_shared(shared_table *s)
{
    free(s->table);
    free(s->index);
}

static int open_plan(mlav_backend b, const tu_problem *p, mlav_context **ctx, mlav_plan **plan)
{
    if (!mlav_backend_compiled(b) || mlav_context_create(ctx, b) != MLAV_OK)
        return 0; /* not built in, or no device: nothing to run there */
    mlav_status s = mlav_plan_create(*ctx, &p->prob, plan);
    if (s == MLAV_ERR_UNSUPPORTED) { /* a shape the backend documents it does not take */
        mlav_context_free(*ctx);
        return 0;
    }
    if (s != MLAV_OK)
        fail_msg("%s: mlav_plan_create: %s: %s", mlav_backend_name(b), mlav_status_string(s),
                 mlav_last_error(NULL));
    return 1;
}

/* One run: on a host workspace through mlav_run, else (a CUDA plan) through mlav_verify, which
 * allocates the device workspace. */
static mlav_status run_any(mlav_context *ctx, const mlav_plan *plan, const tu_problem *p,
                           const mlav_tensors *t)
{
    const size_t ws_bytes = mlav_plan_workspace_bytes(plan);
    if (ws_bytes && mlav_plan_workspace_memory(plan) != MLAV_MEM_HOST)
        return mlav_verify(ctx, &p->prob, t);
    void *ws = ws_bytes ? aligned_alloc(256, (ws_bytes + 255) & ~(size_t)255) : NULL;
    if (ws_bytes)
        assert_non_null(ws);
    mlav_status s = mlav_run(plan, t, ws, ws_bytes, NULL);
    free(ws);
    return s;
}

static void check_case(const tu_case *base, size_t k, uint64_t seed)
{
    tu_case c = *base;
    c.seed = seed + k;
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    uint64_t rng = c.seed ^ 0x5eedu;
    shared_table sh = make_shared(p, &rng);
    char name[256], msg[512];
    tu_case_name(&p->c, name, sizeof name);
    const size_t out_bytes = p->out_elems * mlav_dtype_size(c.dtype);
    unsigned char *own_out = tu_xcalloc(out_bytes, 1);
    float *own_lse = tu_xcalloc(p->lse_elems, sizeof(float));

    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
        mlav_context *ctx = NULL;
        mlav_plan *plan = NULL;
        if (!open_plan(backends[i], p, &ctx, &plan))
            continue;
        const char *bn = mlav_backend_name(backends[i]);

        tu_poison(p);
        mlav_tensors t = tu_tensors(p);
        mlav_status s = run_any(ctx, plan, p, &t);
        if (s != MLAV_OK)
            fail_msg("%s %s: own table: %s: %s", bn, name, mlav_status_string(s),
                     mlav_last_error(NULL));
        if (!tu_compare(p, tu_out_tol(c.dtype), tu_lse_tol(c.dtype), msg, sizeof msg))
            fail_msg("%s %s: own table against the oracle: %s", bn, name, msg);
        memcpy(own_out, p->out, out_bytes);
        memcpy(own_lse, p->lse, p->lse_elems * sizeof(float));

        tu_poison(p);
        t.page_table = sh.table;
        t.page_table_rows = sh.index;
        t.page_table_num_rows = sh.rows;
        s = run_any(ctx, plan, p, &t);
        if (s != MLAV_OK)
            fail_msg("%s %s: shared table: %s: %s", bn, name, mlav_status_string(s),
                     mlav_last_error(NULL));
        if (!tu_compare(p, tu_out_tol(c.dtype), tu_lse_tol(c.dtype), msg, sizeof msg))
            fail_msg("%s %s: shared table against the oracle: %s", bn, name, msg);
        if (memcmp(own_out, p->out, out_bytes) != 0 ||
            memcmp(own_lse, p->lse, p->lse_elems * sizeof(float)) != 0)
            fail_msg("%s %s: the shared table's result differs from the own table's", bn, name);

        /* refusals, each before anything is written */
        int32_t keep = -1, victim = -1;
        for (int32_t b = 0; b < c.B && victim < 0; b++)
            if (p->kv_lens[b] > 0)
                victim = b;
        if (victim >= 0) {
            const int32_t bad_index[] = {(int32_t)sh.rows, -1};
            keep = sh.index[victim];
            for (size_t v = 0; v < 2; v++) {
                sh.index[victim] = bad_index[v];
                tu_poison(p);
                s = run_any(ctx, plan, p, &t);
                if (s != MLAV_ERR_INVALID_ARG || !strstr(mlav_last_error(NULL), "page_table_rows"))
                    fail_msg("%s %s: index %d: got %s (%s), want MLAV_ERR_INVALID_ARG naming "
                             "page_table_rows",
                             bn, name, bad_index[v], mlav_status_string(s),
                             mlav_last_error(NULL));
                if (!tu_untouched(p, msg, sizeof msg))
                    fail_msg("%s %s: a refused run wrote: %s", bn, name, msg);
            }
            sh.index[victim] = keep;
            /* a row the index names that holds page ids outside the pool */
            const int32_t spare = (int32_t)sh.rows - 1;
            int used = 0;
            for (int32_t b = 0; b < c.B; b++)
                used |= sh.index[b] == spare;
            if (!used) {
                sh.index[victim] = spare;
                tu_poison(p);
                s = run_any(ctx, plan, p, &t);
                if (s != MLAV_ERR_INVALID_ARG || !tu_untouched(p, msg, sizeof msg))
                    fail_msg("%s %s: a row of bad page ids: got %s (%s)", bn, name,
                             mlav_status_string(s), mlav_last_error(NULL));
                sh.index[victim] = keep;
            }
            const int64_t bad_rows[] = {0, -5};
            for (size_t v = 0; v < 2; v++) {
                t.page_table_num_rows = bad_rows[v];
                tu_poison(p);
                s = run_any(ctx, plan, p, &t);
                if (s != MLAV_ERR_INVALID_ARG ||
                    !strstr(mlav_last_error(NULL), "page_table_num_rows"))
                    fail_msg("%s %s: page_table_num_rows %lld: got %s (%s)", bn, name,
                             (long long)bad_rows[v], mlav_status_string(s),
                             mlav_last_error(NULL));
                if (!tu_untouched(p, msg, sizeof msg))
                    fail_msg("%s %s: a refused run wrote: %s", bn, name, msg);
            }
            t.page_table_num_rows = sh.rows;
            /* a misaligned index array (host tensors are typed pointers) */
            int32_t *shifted = tu_xcalloc((size_t)c.B + 1, sizeof(int32_t));
            const int32_t *mis = (const int32_t *)(const void *)((const char *)shifted + 2);
            t.page_table_rows = mis;
            tu_poison(p);
            s = run_any(ctx, plan, p, &t);
            if (s != MLAV_ERR_INVALID_ARG || !tu_untouched(p, msg, sizeof msg))
                fail_msg("%s %s: misaligned page_table_rows: got %s (%s)", bn, name,
                         mlav_status_string(s), mlav_last_error(NULL));
            free(shifted);
            t.page_table_rows = sh.index;
        }
        mlav_plan_free(plan);
        mlav_context_free(ctx);
    }
    free(own_out);
    free(own_lse);
    free_shared(&sh);
    tu_free(p);
}

static void test_shared_page_table(void **state)
{
    (void)state;
    const uint64_t seed = tu_seed();
    printf("test_page_rows: seed base 0x%llx (MLAV_TEST_SEED reproduces it)\n",
           (unsigned long long)seed);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        check_case(&cases[k], k, seed);
}

/* The index is read only for requests that have KV rows: a request with kv_len 0 may carry
 * any index, as a padded batch's do. */
static void test_unused_index_ignored(void **state)
{
    (void)state;
    tu_case c = {.H = 2, .Dl = 64, .Dr = 16, .page_size = 4, .B = 2, .dtype = MLAV_DTYPE_F32,
                 .tree = TU_CHAIN_NULL, QS(3, 0), PS(10, 0)};
    c.seed = tu_seed();
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    uint64_t rng = c.seed;
    shared_table sh = make_shared(p, &rng);
    sh.index[1] = -123456; /* request 1 has no KV row */
    mlav_context *ctx = NULL;
    assert_int_equal(mlav_context_create(&ctx, MLAV_BACKEND_CPU), MLAV_OK);
    tu_poison(p);
    mlav_tensors t = tu_tensors(p);
    t.page_table = sh.table;
    t.page_table_rows = sh.index;
    t.page_table_num_rows = sh.rows;
    mlav_status s = mlav_verify(ctx, &p->prob, &t);
    if (s != MLAV_OK)
        fail_msg("mlav_verify: %s: %s", mlav_status_string(s), mlav_last_error(NULL));
    char msg[512];
    if (!tu_compare(p, tu_out_tol(c.dtype), tu_lse_tol(c.dtype), msg, sizeof msg))
        fail_msg("against the oracle: %s", msg);
    mlav_context_free(ctx);
    free_shared(&sh);
    tu_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_page_table),
        cmocka_unit_test(test_unused_index_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
