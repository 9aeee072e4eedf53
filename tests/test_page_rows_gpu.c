/* A page table shared by every request (mlav_tensors.page_table_rows) with device tensors: the
 * kernels read request b's row page_table_rows[b] of a [num_rows, max_pages] table.
 *   - exact plans on cuda and cuda-naive: the rows scattered through a larger table (the other
 *     rows page ids far outside the pool) give the own table's result bit for bit, and the
 *     oracle's; a device index outside the table (num_rows, -1) makes that request's rows NaN
 *     and leaves the others exact (nothing read outside the table: memcheck in the suite);
 *   - a plan for limits (cuda, cuda-naive) in one CUDA graph: the update from device lengths
 *     and every layer's run, captured once and replayed while the table's rows move to new
 *     places at every step (only the B indices change on the device), each layer of each step
 *     against the oracle.
 * Fresh seed per run (printed). Skips without CUDA built in or without a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mlaverify.h"
#include "steps_fixture.h"
#include "test_util.h"

#ifdef MLAV_WITH_CUDA
#include <math.h>

#include "test_cuda_util.h"

#define CK TU_CK
#define OK TU_OK /* test_util.h */

/* A shuffled placement of `n` rows among `rows` (n <= rows). */
static void shuffle_rows(int32_t *place, int32_t n, int32_t rows, uint64_t *rng)
{
    int32_t *perm = tu_xcalloc((size_t)rows, sizeof(int32_t));
    for (int32_t r = 0; r < rows; r++)
        perm[r] = r;
    for (int32_t r = rows - 1; r > 0; r--) {
        int32_t k = (int32_t)(tu_next(rng) % (uint64_t)(r + 1)), t = perm[r];
        perm[r] = perm[k];
        perm[k] = t;
    }
    memcpy(place, perm, sizeof(int32_t) * (size_t)n);
    free(perm);
}

/* [rows, mp] filled with page ids outside the pool, then row place[b] = own row b. */
static int32_t *scatter_table(const int32_t *own, int32_t B, int32_t mp, const int32_t *place,
                              int32_t rows, int64_t num_pages)
{
    int32_t *t = tu_xcalloc((size_t)rows * (size_t)mp, sizeof(int32_t));
    for (size_t k = 0; k < (size_t)rows * (size_t)mp; k++)
        t[k] = (int32_t)(num_pages + 77 + (int64_t)(k % 5));
    for (int32_t b = 0; b < B; b++)
        memcpy(t + (size_t)place[b] * (size_t)mp, own + (size_t)b * (size_t)mp,
               sizeof(int32_t) * (size_t)mp);
    return t;
}

static const tu_case exact_cases[] = {
    {.H = 16, .Dl = 512, .Dr = 64, .page_size = 1, .B = 3, .dtype = MLAV_DTYPE_BF16,
     .tree = TU_BUSHY, .q_lens = {9, 1, 4}, .prefixes = {700, 3000, 64}},
    {.H = 8, .Dl = 512, .Dr = 64, .page_size = 64, .B = 2, .dtype = MLAV_DTYPE_BF16,
     .tree = TU_CHAIN_NULL, .q_lens = {16, 2}, .prefixes = {5000, 100},
     .kv_dtype = MLAV_DTYPE_FP8_E4M3},
    {.H = 4, .Dl = 512, .Dr = 64, .page_size = 16, .B = 3, .dtype = MLAV_DTYPE_F32,
     .tree = TU_DEEP, .q_lens = {5, 3, 7}, .prefixes = {300, 40, 1000}},
};

static void exact_case(const tu_case *base, uint64_t seed)
{
    tu_case c = *base;
    c.seed = seed;
    tu_problem *p = tu_make(&c);
    tu_reference(p);
    char name[256], msg[512];
    tu_case_name(&p->c, name, sizeof name);
    const int32_t B = c.B, mp = p->prob.max_pages, rows = 2 * B + 5;
    uint64_t rng = seed ^ 0xabcdu;
    int32_t *place = tu_xcalloc((size_t)B, sizeof(int32_t));
    shuffle_rows(place, B, rows, &rng);
    int32_t *shared = scatter_table(p->page_table, B, mp, place, rows, p->num_pages);
    const size_t esz = mlav_dtype_size(c.dtype);
    const size_t out_bytes = p->out_elems * esz, lse_bytes = p->lse_elems * sizeof(float);
    /* the mask's words per row: the longest draft's, as the fixture lays it out */
    int32_t max_q = 0;
    for (int32_t b = 0; b < B; b++)
        max_q = c.q_lens[b] > max_q ? c.q_lens[b] : max_q;
    const size_t mbytes =
        p->tree_mask ? (size_t)p->q_indptr[B] * (size_t)mlav_tree_mask_words(max_q) * 4 : 0;

    void *dq = tu_dcopy(p->q, p->q_elems * esz), *dkv = tu_dcopy(p->kv, p->kv_elems * p->kv_esz);
    int32_t *dpt = tu_dcopy(p->page_table, (size_t)B * (size_t)mp * sizeof(int32_t));
    int32_t *dshared = tu_dcopy(shared, (size_t)rows * (size_t)mp * sizeof(int32_t));
    int32_t *dplace = tu_dcopy(place, (size_t)B * sizeof(int32_t));
    uint32_t *dmask = p->tree_mask ? tu_dcopy(p->tree_mask, mbytes) : NULL;
    void *dout = tu_dmalloc(out_bytes);
    float *dlse = tu_dmalloc(lse_bytes);
    unsigned char *own_out = tu_xcalloc(out_bytes, 1);
    float *own_lse = tu_xcalloc(p->lse_elems, sizeof(float));
    double *ref_out = tu_xcalloc(p->out_elems, sizeof(double));
    double *ref_lse = tu_xcalloc(p->lse_elems, sizeof(double));
    memcpy(ref_out, p->ref_out, p->out_elems * sizeof(double));
    memcpy(ref_lse, p->ref_lse, p->lse_elems * sizeof(double));

    const mlav_backend backends[] = {MLAV_BACKEND_CUDA, MLAV_BACKEND_CUDA_NAIVE};
    for (size_t k = 0; k < 2; k++) {
        mlav_context *ctx;
        mlav_plan *plan;
        OK(mlav_context_create(&ctx, backends[k]));
        mlav_status s = mlav_plan_create(ctx, &p->prob, &plan);
        if (s == MLAV_ERR_UNSUPPORTED) {
            mlav_context_free(ctx);
            continue;
        }
        OK(s);
        const char *bn = mlav_backend_name(backends[k]);
        const size_t ws_bytes = mlav_plan_workspace_bytes(plan);
        void *ws = tu_dmalloc(ws_bytes);
        mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = dq, .kv_cache = dkv,
                          .num_pages = p->num_pages, .page_table = dpt, .tree_mask = dmask,
                          .out = dout, .lse = dlse, .kv_scale = p->kv_scale};
        for (int pass = 0; pass < 4; pass++) {
            /* 0: own table; 1: shared table; 2, 3: request 0's index num_rows, then -1 */
            if (pass >= 1) {
                t.page_table = dshared;
                t.page_table_rows = dplace;
                t.page_table_num_rows = rows;
            }
            if (pass >= 2) {
                const int32_t bad = pass == 2 ? rows : -1;
                CK(cudaMemcpy(dplace, &bad, sizeof bad, cudaMemcpyHostToDevice));
                for (int32_t tok = p->q_indptr[0]; tok < p->q_indptr[1]; tok++)
                    for (int32_t h = 0; h < c.H; h++) {
                        const size_t row = (size_t)tok * (size_t)c.H + (size_t)h;
                        p->ref_lse[row] = NAN;
                        for (int32_t d = 0; d < c.Dl; d++)
                            p->ref_out[row * (size_t)c.Dl + (size_t)d] = NAN;
                    }
            }
            CK(cudaMemset(dout, 0xff, out_bytes));
            CK(cudaMemset(dlse, 0xff, lse_bytes));
            CK(cudaDeviceSynchronize());
            OK(mlav_run(plan, &t, ws, ws_bytes, NULL));
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(p->out, dout, out_bytes, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(p->lse, dlse, lse_bytes, cudaMemcpyDeviceToHost));
            if (!tu_compare(p, tu_out_tol(c.dtype), tu_lse_tol(c.dtype), msg, sizeof msg))
                fail_msg("%s %s pass %d: against the oracle: %s", bn, name, pass, msg);
            if (pass == 0) {
                memcpy(own_out, p->out, out_bytes);
                memcpy(own_lse, p->lse, lse_bytes);
            } else if (pass == 1 && (memcmp(own_out, p->out, out_bytes) != 0 ||
                                     memcmp(own_lse, p->lse, lse_bytes) != 0)) {
                fail_msg("%s %s: the shared table's result differs from the own table's", bn,
                         name);
            }
        }
        /* back to the good index and the oracle's rows for the next backend */
        CK(cudaMemcpy(dplace, place, sizeof(int32_t), cudaMemcpyHostToDevice));
        memcpy(p->ref_out, ref_out, p->out_elems * sizeof(double));
        memcpy(p->ref_lse, ref_lse, p->lse_elems * sizeof(double));
        CK(cudaFree(ws));
        mlav_plan_free(plan);
        mlav_context_free(ctx);
    }
    void *all[] = {dq, dkv, dpt, dshared, dplace, dmask, dout, dlse};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (all[k])
            CK(cudaFree(all[k]));
    free(own_out);
    free(own_lse);
    free(ref_out);
    free(ref_lse);
    free(shared);
    free(place);
    tu_free(p);
}

static void test_page_rows_exact(void **state)
{
    (void)state;
    tu_require_device();
    const uint64_t seed = tu_seed();
    printf("test_page_rows_gpu: seed base 0x%llx\n", (unsigned long long)seed);
    for (size_t k = 0; k < sizeof exact_cases / sizeof exact_cases[0]; k++)
        exact_case(&exact_cases[k], seed + k);
}

static void test_page_rows_graph(void **state)
{
    const mlav_backend be = *(const mlav_backend *)*state;
    tu_require_device();
    const uint64_t seed = tu_seed();
    printf("test_page_rows_gpu graph, %s: seed 0x%llx\n", mlav_backend_name(be),
           (unsigned long long)seed);
    const mlav_limits lim = {.max_batch = 8, .max_tokens = 8 * 9, .max_q_len = 9,
                             .max_kv_len = 3000};
    const int layers = 2, steps = 40;
    sf_engine *e = sf_make(&lim, 16, 512, 64, 1, MLAV_DTYPE_BF16, MLAV_DTYPE_BF16, layers, seed);
    const int32_t mp = e->max_pages, rows = 2 * lim.max_batch + 3;
    mlav_context *ctx;
    OK(mlav_context_create(&ctx, be));
    const mlav_problem shape = sf_shape(e);
    mlav_plan *plan;
    OK(mlav_plan_create_for_limits(ctx, &shape, &lim, &plan));
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    void *ws = tu_dmalloc(bytes);
    void *dq[2], *dkv[2], *dout[2];
    float *dlse[2];
    for (int l = 0; l < layers; l++) {
        dq[l] = tu_dmalloc(e->q_bytes);
        dkv[l] = tu_dmalloc(e->kv_bytes);
        dout[l] = tu_dmalloc(e->out_bytes);
        dlse[l] = tu_dmalloc(e->lse_bytes);
    }
    int32_t *dshared = tu_dmalloc((size_t)rows * (size_t)mp * sizeof(int32_t));
    int32_t *dplace = tu_dmalloc((size_t)lim.max_batch * sizeof(int32_t));
    uint32_t *dmask = tu_dmalloc(e->mask_bytes);
    int32_t *dqi = tu_dmalloc(sizeof(int32_t) * (size_t)(lim.max_batch + 1));
    int32_t *dkvl = tu_dmalloc(sizeof(int32_t) * (size_t)lim.max_batch);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    const mlav_lengths dlen = {MLAV_MEM_DEVICE, lim.max_batch, dqi, dkvl};
    cudaGraph_t g;
    cudaGraphExec_t x;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    OK(mlav_plan_update(plan, &dlen, ws, bytes, st));
    for (int l = 0; l < layers; l++) {
        const mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = dq[l], .kv_cache = dkv[l],
                                .num_pages = e->num_pages, .page_table = dshared,
                                .page_table_rows = dplace, .page_table_num_rows = rows,
                                .tree_mask = dmask, .out = dout[l], .lse = dlse[l]};
        OK(mlav_run(plan, &t, ws, bytes, st));
    }
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&x, g, 0));

    uint64_t rng = seed ^ 0x77u;
    int32_t *place = tu_xcalloc((size_t)lim.max_batch, sizeof(int32_t));
    unsigned char *ho = malloc(e->out_bytes);
    float *hl = malloc(e->lse_bytes);
    assert_true(ho && hl);
    char msg[512];
    for (int s = 0; s < steps; s++) {
        sf_step(e, 1);
        shuffle_rows(place, lim.max_batch, rows, &rng);
        int32_t *shared =
            scatter_table(e->page_table, lim.max_batch, mp, place, rows, e->num_pages);
        for (int l = 0; l < layers; l++) {
            CK(cudaMemcpyAsync(dq[l], e->q[l], e->q_bytes, cudaMemcpyHostToDevice, st));
            CK(cudaMemcpyAsync(dkv[l], e->kv[l], e->kv_bytes, cudaMemcpyHostToDevice, st));
            CK(cudaMemsetAsync(dout[l], 0xff, e->out_bytes, st));
            CK(cudaMemsetAsync(dlse[l], 0xff, e->lse_bytes, st));
        }
        CK(cudaMemcpyAsync(dshared, shared, (size_t)rows * (size_t)mp * sizeof(int32_t),
                           cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(dplace, place, (size_t)lim.max_batch * sizeof(int32_t),
                           cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(dmask, e->mask, e->mask_bytes, cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(dqi, e->q_indptr, sizeof(int32_t) * (size_t)(lim.max_batch + 1),
                           cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(dkvl, e->kv_lens, sizeof(int32_t) * (size_t)lim.max_batch,
                           cudaMemcpyHostToDevice, st));
        CK(cudaGraphLaunch(x, st));
        CK(cudaStreamSynchronize(st));
        free(shared);
        int32_t bad = -2;
        OK(mlav_plan_step_status(plan, ws, bytes, st, &bad));
        assert_int_equal(bad, -1);
        for (int l = 0; l < layers; l++) {
            CK(cudaMemcpy(ho, dout[l], e->out_bytes, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hl, dlse[l], e->lse_bytes, cudaMemcpyDeviceToHost));
            if (!sf_check(e, l, ho, hl, msg, sizeof msg))
                fail_msg("%s step %d layer %d (seed 0x%llx): %s", mlav_backend_name(be), s, l,
                         (unsigned long long)seed, msg);
        }
    }
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    for (int l = 0; l < layers; l++) {
        CK(cudaFree(dq[l]));
        CK(cudaFree(dkv[l]));
        CK(cudaFree(dout[l]));
        CK(cudaFree(dlse[l]));
    }
    void *all[] = {ws, dshared, dplace, dmask, dqi, dkvl};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        CK(cudaFree(all[k]));
    free(place);
    free(ho);
    free(hl);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    sf_free(e);
}

int main(void)
{
    static mlav_backend cuda = MLAV_BACKEND_CUDA, naive = MLAV_BACKEND_CUDA_NAIVE;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_rows_exact),
        cmocka_unit_test_prestate(test_page_rows_graph, &cuda),
        cmocka_unit_test_prestate(test_page_rows_graph, &naive),
    };
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#else

static void test_page_rows_gpu_not_built(void **state)
{
    (void)state;
    print_message("built without CUDA: skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_page_rows_gpu_not_built)};
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#endif
