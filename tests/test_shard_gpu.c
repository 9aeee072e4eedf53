/* Context-parallel (sharded) verify on the CUDA backends: R ranks simulated on one device (each
 * rank's pages built from a global cache by tests/shard_fixture.c), each rank verified on its
 * own, the partial states merged and compared with the fp64 oracle of the whole cache.
 *  - a grid of plans for one problem on cuda and cuda-naive (host tensors, offload mode):
 *    R in {2, 3, 4}, stripes 1, page_size and a contiguous chunk, page sizes 1, 16 and 64,
 *    BF16, F16, F32 and an FP8 cache, requests of few and many rows (both flash families on
 *    cc 9.0: test_shard_gpu_legal runs it again under MLAV_FLASH_FAMILY=legal);
 *  - plans for limits with DEVICE lengths: each rank's update and run and the device merge
 *    (mlav_merge_states_stacked) captured once in one CUDA graph, replayed for steps whose
 *    lengths, trees and caches change, padded to the limits' batch; each step also updated from
 *    host lengths (the host rule) on a second workspace, whose run must give the same bits.
 * Every test skips without CUDA or a device of cc >= 8.0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mlaverify.h"
#include "shard_fixture.h"
#include "test_util.h"

#ifdef MLAV_WITH_CUDA
#include <math.h>

#include "test_cuda_util.h"

#define CK TU_CK

static const sh_kind KINDS[] = {{MLAV_DTYPE_BF16, 0},
                                {MLAV_DTYPE_F16, 0},
                                {MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3},
                                {MLAV_DTYPE_F32, 0}};

/* The grid (sh_run_grid) on `backend` with the flash kernel's dims (Dl 512, Dr 64), prefixes up
 * to 300, H 2 or 16 (a request of at most 32 rows, or more: on cc 9.0 the two sides of the
 * family rule), plans for one problem only. */
static void shard_grid(mlav_backend backend)
{
    const sh_grid g = {KINDS, (int)(sizeof KINDS / sizeof KINDS[0]), {2, 16}, 512, 64, 300, -1};
    sh_run_grid(backend, &g);
}

static void test_shard_gpu_cuda(void **state)
{
    (void)state;
    shard_grid(MLAV_BACKEND_CUDA);
}

static void test_shard_gpu_cuda_naive(void **state)
{
    (void)state;
    shard_grid(MLAV_BACKEND_CUDA_NAIVE);
}

#define MAXR 4

/* Plans for limits with device lengths under one captured graph: per rank the update and the
 * run, then the device merge of the ranks' stacked states, replayed for `steps` steps. */
static void graph_steps(int32_t ranks, int32_t page_size, int stripe_kind, mlav_dtype dtype,
                        mlav_dtype kv_dtype)
{
    mlav_context *ctx = tu_context_or_skip(MLAV_BACKEND_CUDA);
    uint64_t rng = tu_seeded("graph");
    const int32_t H = 16, W = 576, Dl = 512, steps = 12;
    const mlav_limits lim = {.max_batch = 4, .max_tokens = 24, .max_q_len = 6,
                             .max_kv_len = 400};
    const int32_t chunk = (lim.max_kv_len + ranks - 1) / ranks;
    const int32_t stripe = stripe_kind == 0 ? 1 : (stripe_kind == 1 ? page_size : chunk);
    /* the page-table stride: rank 0 holds the most rows of any kv_len */
    const int32_t mp =
        (int32_t)((sh_rows_of(lim.max_kv_len, ranks, 0, stripe) + page_size - 1) / page_size + 1);
    const int64_t pool_pages = (int64_t)lim.max_batch * mp + 2;
    const size_t esz = mlav_dtype_size(dtype);
    const mlav_dtype kvd = kv_dtype ? kv_dtype : dtype;
    const size_t kv_row = (size_t)W * mlav_dtype_size(kvd);
    const size_t out_rank = (size_t)lim.max_tokens * H * Dl * esz;
    const size_t lse_rank = (size_t)lim.max_tokens * H * sizeof(float);
    const float kv_scale = 0.5f; /* captured as a value: the same every step */

    void *dq = tu_dmalloc((size_t)lim.max_tokens * H * W * esz);
    /* max_q_len 6: one mask word a token */
    uint32_t *dmask = tu_dmalloc((size_t)lim.max_tokens * sizeof(uint32_t));
    int32_t *dqi = tu_dmalloc(sizeof(int32_t) * (lim.max_batch + 1));
    int32_t *dkvl = tu_dmalloc(sizeof(int32_t) * lim.max_batch);
    void *douts = tu_dmalloc(out_rank * (size_t)ranks), *dout = tu_dmalloc(out_rank);
    float *dlses = tu_dmalloc(lse_rank * (size_t)ranks), *dlse = tu_dmalloc(lse_rank);
    void *dkv[MAXR], *dws[MAXR], *dws2[MAXR];
    void *dout2 = tu_dmalloc(out_rank);
    float *dlse2 = tu_dmalloc(lse_rank);
    unsigned char *h1 = tu_xcalloc(out_rank + lse_rank, 1);
    unsigned char *h2 = tu_xcalloc(out_rank + lse_rank, 1);
    int32_t *dpt[MAXR];
    mlav_plan *plan[MAXR];
    size_t ws_bytes[MAXR];
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const mlav_lengths dlen = {MLAV_MEM_DEVICE, lim.max_batch, dqi, dkvl};

    /* the plans (which may synchronize) before the capture */
    for (int32_t r = 0; r < ranks; r++) {
        const mlav_problem shape = {.num_heads = H, .d_latent = Dl, .d_rope = 64,
                                    .softmax_scale = (float)(1.0 / sqrt(192.0)), .dtype = dtype,
                                    .page_size = page_size, .max_pages = mp, .kv_dtype = kv_dtype,
                                    .shard_ranks = ranks, .shard_rank = r,
                                    .shard_stripe = stripe};
        assert_int_equal(mlav_plan_create_for_limits(ctx, &shape, &lim, &plan[r]), MLAV_OK);
        ws_bytes[r] = mlav_plan_workspace_bytes(plan[r]);
        dws[r] = tu_dmalloc(ws_bytes[r]);
        dws2[r] = tu_dmalloc(ws_bytes[r]);
        dkv[r] = tu_dmalloc((size_t)pool_pages * page_size * kv_row);
        dpt[r] = tu_dmalloc(sizeof(int32_t) * lim.max_batch * mp);
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int32_t r = 0; r < ranks; r++) {
        const mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = dq, .kv_cache = dkv[r],
                                .num_pages = pool_pages, .page_table = dpt[r], .tree_mask = dmask,
                                .out = (char *)douts + out_rank * (size_t)r,
                                .lse = (float *)((char *)dlses + lse_rank * (size_t)r),
                                .kv_scale = kv_scale};
        assert_int_equal(mlav_plan_update(plan[r], &dlen, dws[r], ws_bytes[r], st), MLAV_OK);
        assert_int_equal(mlav_run(plan[r], &t, dws[r], ws_bytes[r], st), MLAV_OK);
    }
    assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_DEVICE, dtype, ranks,
                                               (int64_t)lim.max_tokens * H, Dl, douts, dlses,
                                               dout, dlse, st),
                     MLAV_OK);
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    /* the states' rows past a step's tokens are not written by the runs but read by the merge
     * (which covers max_tokens): zero states there, whose merged rows are not compared */
    CK(cudaMemsetAsync(douts, 0, out_rank * (size_t)ranks, st));
    CK(cudaMemsetAsync(dlses, 0, lse_rank * (size_t)ranks, st));

    char msg[800], name[300];
    int32_t *pt = tu_xcalloc((size_t)lim.max_batch * mp, sizeof(int32_t));
    int32_t qi[5], kvl[4];
    for (int32_t s = 0; s < steps; s++) {
        /* a step of 1..4 live requests (max_q_len 6, kv_len <= 400), padded to the batch */
        tu_case c = sh_draw_case(&rng, H, Dl, 64, page_size, dtype, kv_dtype, lim.max_kv_len - 6);
        c.tree = (tu_tree)(1 + (int)(tu_next(&rng) % 3)); /* a mask always: the graph holds one */
        c.kv_scale = kv_scale;
        tu_problem *p = tu_make(&c);
        tu_reference(p);
        const int32_t T = p->q_indptr[c.B];
        for (int32_t b = 0; b <= lim.max_batch; b++)
            qi[b] = p->q_indptr[b < c.B ? b : c.B];
        for (int32_t b = 0; b < lim.max_batch; b++)
            kvl[b] = b < c.B ? p->kv_lens[b] : 0;
        CK(cudaMemcpyAsync(dqi, qi, sizeof qi[0] * (lim.max_batch + 1), cudaMemcpyHostToDevice,
                           st));
        CK(cudaMemcpyAsync(dkvl, kvl, sizeof kvl[0] * lim.max_batch, cudaMemcpyHostToDevice,
                           st));
        CK(cudaMemcpyAsync(dq, p->q, (size_t)T * H * W * esz, cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(dmask, p->tree_mask, (size_t)T * sizeof(uint32_t),
                           cudaMemcpyHostToDevice, st));
        sh_rank *rk[MAXR];
        for (int32_t r = 0; r < ranks; r++) {
            rk[r] = sh_rank_make(p, ranks, r, stripe, tu_next(&rng));
            assert_true(rk[r]->num_pages <= pool_pages && rk[r]->max_pages <= mp);
            /* the rank's table re-strided to the plan's max_pages (spare columns: page 0) */
            memset(pt, 0, sizeof(int32_t) * (size_t)lim.max_batch * mp);
            for (int32_t b = 0; b < c.B; b++)
                memcpy(pt + (size_t)b * mp, rk[r]->page_table + (size_t)b * rk[r]->max_pages,
                       sizeof(int32_t) * (size_t)rk[r]->max_pages);
            CK(cudaMemcpyAsync(dpt[r], pt, sizeof(int32_t) * (size_t)lim.max_batch * mp,
                               cudaMemcpyHostToDevice, st));
            CK(cudaMemcpyAsync(dkv[r], rk[r]->kv, rk[r]->kv_bytes, cudaMemcpyHostToDevice, st));
        }
        CK(cudaMemsetAsync(dout, 0xff, out_rank, st)); /* NaN poison: a row not written shows */
        CK(cudaMemsetAsync(dlse, 0xff, lse_rank, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaStreamSynchronize(st));
        const mlav_lengths hlen = {MLAV_MEM_HOST, lim.max_batch, qi, kvl};
        for (int32_t r = 0; r < ranks; r++) {
            int32_t bad = 0;
            assert_int_equal(mlav_plan_step_status(plan[r], dws[r], ws_bytes[r], st, &bad),
                             MLAV_OK);
            assert_int_equal(bad, -1);
            /* the same step from host lengths (the host rule) on a second workspace: the
             * device rule's schedule, so the rank's state bit for bit */
            const mlav_tensors t2 = {.memory = MLAV_MEM_DEVICE, .q = dq, .kv_cache = dkv[r],
                                     .num_pages = pool_pages, .page_table = dpt[r],
                                     .tree_mask = dmask, .out = dout2, .lse = dlse2,
                                     .kv_scale = kv_scale};
            assert_int_equal(mlav_plan_update(plan[r], &hlen, dws2[r], ws_bytes[r], st),
                             MLAV_OK);
            assert_int_equal(mlav_run(plan[r], &t2, dws2[r], ws_bytes[r], st), MLAV_OK);
            CK(cudaStreamSynchronize(st));
            const size_t ob = (size_t)T * H * Dl * esz, lb = (size_t)T * H * sizeof(float);
            CK(cudaMemcpy(h1, (char *)douts + out_rank * (size_t)r, ob, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h1 + ob, (char *)dlses + lse_rank * (size_t)r, lb,
                          cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h2, dout2, ob, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h2 + ob, dlse2, lb, cudaMemcpyDeviceToHost));
            if (memcmp(h1, h2, ob + lb) != 0)
                fail_msg("graph step %d, rank %d of %d: the host update's run differs from the "
                         "device update's", s, r, ranks);
        }
        tu_poison(p);
        CK(cudaMemcpy(p->out, dout, p->out_elems * esz, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(p->lse, dlse, p->lse_elems * sizeof(float), cudaMemcpyDeviceToHost));
        if (!tu_compare(p, tu_out_tol(dtype), tu_lse_tol(dtype), msg, sizeof msg)) {
            tu_case_name(&p->c, name, sizeof name);
            fail_msg("graph step %d, %d ranks, stripe %d: %s: merged state against the oracle "
                     "of the whole cache: %s", s, ranks, stripe, name, msg);
        }
        for (int32_t r = 0; r < ranks; r++)
            sh_rank_free(rk[r]);
        tu_free(p);
    }
    free(pt);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    for (int32_t r = 0; r < ranks; r++) {
        mlav_plan_free(plan[r]);
        CK(cudaFree(dws[r]));
        CK(cudaFree(dws2[r]));
        CK(cudaFree(dkv[r]));
        CK(cudaFree(dpt[r]));
    }
    CK(cudaFree(dq));
    CK(cudaFree(dmask));
    CK(cudaFree(dqi));
    CK(cudaFree(dkvl));
    CK(cudaFree(douts));
    CK(cudaFree(dout));
    CK(cudaFree(dlses));
    CK(cudaFree(dlse));
    CK(cudaFree(dout2));
    CK(cudaFree(dlse2));
    free(h1);
    free(h2);
    CK(cudaStreamDestroy(st));
    mlav_context_free(ctx);
}

static void test_shard_gpu_graph_bf16_token(void **state)
{
    (void)state;
    graph_steps(2, 1, 0, MLAV_DTYPE_BF16, 0);
}

static void test_shard_gpu_graph_f16_page(void **state)
{
    (void)state;
    graph_steps(3, 16, 1, MLAV_DTYPE_F16, 0);
}

static void test_shard_gpu_graph_fp8_chunk(void **state)
{
    (void)state;
    graph_steps(4, 64, 2, MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3);
}

static void test_shard_gpu_graph_f32_token(void **state)
{
    (void)state;
    graph_steps(3, 16, 0, MLAV_DTYPE_F32, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_gpu_cuda),
        cmocka_unit_test(test_shard_gpu_cuda_naive),
        cmocka_unit_test(test_shard_gpu_graph_bf16_token),
        cmocka_unit_test(test_shard_gpu_graph_f16_page),
        cmocka_unit_test(test_shard_gpu_graph_fp8_chunk),
        cmocka_unit_test(test_shard_gpu_graph_f32_token),
    };
    const char *filter = getenv("MLAV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#else

static void test_shard_gpu_no_cuda(void **state)
{
    (void)state;
    print_message("built without CUDA: skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_shard_gpu_no_cuda)};
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#endif
