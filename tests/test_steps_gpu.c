/* Engine steps on CUDA graphs: a plan for limits, one graph captured once (the update with
 * device lengths, then the runs of every layer) and replayed for 200 steps while requests grow,
 * finish and arrive, each layer of each step checked against the fp64 oracle, with the workspace
 * NaN-poisoned before every replay; a second graph of the runs alone, fed by host updates,
 * gives bit-identical results (the host and the device build the same schedule); device
 * lengths past the limits leave the refused request's rows untouched and say so through
 * mlav_plan_step_status. An FP8 cache's layers take their scales as a host value (captured once)
 * and through a device kv_scale_ptr whose value changes every step under the same graph.
 * MLAV_TEST_STEPS sets the step count (the suite's memcheck runs fewer).
 * Skips without CUDA built in or without a device of cc >= 8.0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/combine_shape.h"
#include "../src/common/schedule_step.h"
#include "mlaverify.h"
#include "steps_fixture.h"
#include "test_util.h"

#ifdef MLAV_WITH_CUDA
#include "test_cuda_util.h"

#define CK TU_CK /* test_util.h */
#define OK TU_OK /* test_util.h */

typedef struct dev_engine {
    void *q[SF_MAX_LAYERS], *kv[SF_MAX_LAYERS], *out[SF_MAX_LAYERS];
    float *lse[SF_MAX_LAYERS];
    int32_t *pt, *qi, *kvl;
    uint32_t *mask;
    float *kv_scale; /* [layers]: the FP8 scales kv_scale_ptr points at (steps_fixture.h) */
} dev_engine;

static void to_device(const sf_engine *e, const dev_engine *d, cudaStream_t st)
{
    for (int l = 0; l < e->layers; l++) {
        CK(cudaMemcpyAsync(d->q[l], e->q[l], e->q_bytes, cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(d->kv[l], e->kv[l], e->kv_bytes, cudaMemcpyHostToDevice, st));
        CK(cudaMemsetAsync(d->out[l], 0xff, e->out_bytes, st)); /* NaN in every dtype */
        CK(cudaMemsetAsync(d->lse[l], 0xff, e->lse_bytes, st));
    }
    CK(cudaMemcpyAsync(d->pt, e->page_table, e->pt_bytes, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(d->mask, e->mask, e->mask_bytes, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(d->qi, e->q_indptr, sizeof(int32_t) * (e->lim.max_batch + 1),
                       cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(d->kvl, e->kv_lens, sizeof(int32_t) * e->lim.max_batch,
                       cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(d->kv_scale, e->kv_scale, sizeof(float) * e->layers,
                       cudaMemcpyHostToDevice, st));
}

/* The host tensors' scales (sf_tensors), the pointer one moved to the device copy. */
static mlav_tensors dev_tensors(const sf_engine *e, const dev_engine *d, int l)
{
    const mlav_tensors h = sf_tensors(e, l);
    mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = d->q[l], .kv_cache = d->kv[l],
                      .num_pages = e->num_pages, .page_table = d->pt, .tree_mask = d->mask,
                      .out = d->out[l], .lse = d->lse[l], .kv_scale = h.kv_scale,
                      .kv_scale_ptr = h.kv_scale_ptr ? d->kv_scale + l : NULL};
    return t;
}

static int steps_wanted(void)
{
    const char *s = getenv("MLAV_TEST_STEPS");
    return s && atoi(s) > 0 ? atoi(s) : 200;
}

/* Steps that graph_loop takes for certain when asked (FORCE_KINDS): one at a time, between
 * random ones, each meant for one kind of the step's combine (combine_shape.h) with H = 8 and
 * draft lengths up to 2 on 129 SMs or more (132: the H200, 188: sm_120); on such a device each
 * kind must occur. A lone request past 16k keys takes 129 or more splits (the wide block
 * combine); one of 3,000 keys 47 (the block combine); three of 600, 19 each (the row kind). */
static const struct {
    int32_t live, prefix;
} forced_steps[] = {{1, 16390}, {1, 3000}, {3, 600}};
enum { FORCED = sizeof forced_steps / sizeof forced_steps[0] };

/* What graph_loop forces: nothing, the combine kinds (forced_steps, between random steps), or
 * every step a full batch of one draft length with prefixes within 50% of two thirds of the
 * limit (the steps on which the sm_90a family's plans may take equal shares,
 * src/common/schedule_step_shares.h). */
enum { FORCE_NONE, FORCE_KINDS, FORCE_SHARES };

/* Whether the step the workspace holds (the header copied out as `hdr`) is equal shares': its
 * blocks not request-major. */
static int step_is_shares(const void *ws, const mlav_step_header *hdr, cudaStream_t st)
{
    if (hdr->n_items < 2)
        return 0;
    mlav_split_item *it = malloc(sizeof *it * (size_t)hdr->n_items);
    assert_non_null(it);
    CK(cudaMemcpyAsync(it, (const char *)ws + sizeof *hdr, sizeof *it * (size_t)hdr->n_items,
                       cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    int shares = 0;
    for (int32_t i = 1; i < hdr->n_items && !shares; i++)
        shares = it[i].b < it[i - 1].b;
    free(it);
    return shares;
}

static void graph_loop(mlav_backend be, int32_t H, int32_t page_size, mlav_dtype dtype,
                       mlav_dtype kv_dtype, const mlav_limits *lim, int force)
{
    tu_require_device();
    const uint64_t seed = tu_seed();
    const int layers = 2;
    /* a forced step's fp64 check over 16k keys, or a full batch's, is the cost: fewer steps */
    const int cap = force == FORCE_KINDS ? 60 : force == FORCE_SHARES ? 8 : INT32_MAX;
    const int steps = steps_wanted() > cap ? cap : steps_wanted();
    int shares = 0;
    uint64_t prng = seed ^ 0x5a5a5a5aull;
    int kinds[3] = {0, 0, 0};
    sf_engine *e = sf_make(lim, H, 512, 64, page_size, dtype, kv_dtype, layers, seed);
    const char *kv = e->kv_dtype == dtype ? "" : ",kv=fp8_e4m3";
    mlav_context *ctx;
    OK(mlav_context_create(&ctx, be));
    const mlav_problem shape = sf_shape(e);
    mlav_plan *plan;
    OK(mlav_plan_create_for_limits(ctx, &shape, lim, &plan));
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    void *ws = tu_dmalloc(bytes), *ws2 = tu_dmalloc(bytes);
    dev_engine d;
    for (int l = 0; l < layers; l++) {
        d.q[l] = tu_dmalloc(e->q_bytes);
        d.kv[l] = tu_dmalloc(e->kv_bytes);
        d.out[l] = tu_dmalloc(e->out_bytes);
        d.lse[l] = tu_dmalloc(e->lse_bytes);
    }
    d.pt = tu_dmalloc(e->pt_bytes);
    d.mask = tu_dmalloc(e->mask_bytes);
    d.qi = tu_dmalloc(sizeof(int32_t) * (lim->max_batch + 1));
    d.kvl = tu_dmalloc(sizeof(int32_t) * lim->max_batch);
    d.kv_scale = tu_dmalloc(sizeof(float) * layers);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    /* graph A: the update from device lengths and every layer's run; graph B: the runs alone,
     * on a second workspace fed by host updates */
    const mlav_lengths dlen = {MLAV_MEM_DEVICE, lim->max_batch, d.qi, d.kvl};
    cudaGraph_t ga, gb;
    cudaGraphExec_t xa, xb;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    OK(mlav_plan_update(plan, &dlen, ws, bytes, st));
    for (int l = 0; l < layers; l++) {
        const mlav_tensors t = dev_tensors(e, &d, l);
        OK(mlav_run(plan, &t, ws, bytes, st));
    }
    CK(cudaStreamEndCapture(st, &ga));
    CK(cudaGraphInstantiate(&xa, ga, 0));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    /* a host update cannot be captured */
    sf_step(e, 1);
    const mlav_lengths hl = sf_lengths(e);
    assert_int_equal(mlav_plan_update(plan, &hl, ws2, bytes, st), MLAV_ERR_UNSUPPORTED);
    for (int l = 0; l < layers; l++) {
        const mlav_tensors t = dev_tensors(e, &d, l);
        OK(mlav_run(plan, &t, ws2, bytes, st));
    }
    CK(cudaStreamEndCapture(st, &gb));
    CK(cudaGraphInstantiate(&xb, gb, 0));

    unsigned char *oa = malloc(e->out_bytes), *ob = malloc(e->out_bytes);
    float *la = malloc(e->lse_bytes), *lb = malloc(e->lse_bytes);
    assert_true(oa && ob && la && lb);
    int refused_steps = 0;
    double oracle_s = 0.0;
    const double loop_t0 = tu_now_s();
    for (int s = 0; s < steps; s++) {
        /* the graph's batch is max_batch: slots past the live requests padded */
        const int forced =
            force == FORCE_SHARES || (force == FORCE_KINDS && s % (FORCED + 1) < FORCED);
        if (force == FORCE_SHARES) {
            int32_t *prefix = malloc(sizeof(int32_t) * (size_t)lim->max_batch);
            assert_non_null(prefix);
            const int32_t mid = (lim->max_kv_len - lim->max_q_len) / 3;
            for (int32_t b = 0; b < lim->max_batch; b++)
                prefix[b] = mid + (int32_t)(tu_next(&prng) % (uint64_t)(2 * mid));
            e->q_all = lim->max_q_len;
            sf_step_prefixes(e, lim->max_batch, prefix, 1);
            e->q_all = 0;
            free(prefix);
        } else if (forced) {
            const int f = s % (FORCED + 1);
            int32_t prefix[3];
            for (int32_t b = 0; b < forced_steps[f].live; b++)
                prefix[b] = forced_steps[f].prefix;
            sf_step_prefixes(e, forced_steps[f].live, prefix, 1);
        } else {
            sf_step(e, 1);
        }
        to_device(e, &d, st);
        /* every 10th step, one live request's device kv_len past the limits; every 25th, a
         * decreasing q_indptr: refused on the device, recorded in the workspace */
        int32_t skip = -1;
        if (forced) {
            /* no refusals in a forced step */
        } else if (s % 10 == 5 && e->live > 1) {
            skip = (int32_t)(s % e->live);
            const int32_t over = lim->max_kv_len + 1;
            CK(cudaMemcpyAsync(d.kvl + skip, &over, sizeof over, cudaMemcpyHostToDevice, st));
        } else if (s % 25 == 12 && e->live > 1) {
            skip = -2;
            const int32_t dec = e->q_indptr[1] + 1; /* q_indptr[1] > q_indptr[2]? make it so */
            CK(cudaMemcpyAsync(d.qi + 1, &dec, sizeof dec, cudaMemcpyHostToDevice, st));
            const int32_t zero = 0;
            CK(cudaMemcpyAsync(d.qi + 2, &zero, sizeof zero, cudaMemcpyHostToDevice, st));
        }
        CK(cudaMemsetAsync(ws, 0xff, bytes, st));
        CK(cudaGraphLaunch(xa, st));
        mlav_step_header hdr;
        CK(cudaMemcpyAsync(&hdr, ws, sizeof hdr, cudaMemcpyDeviceToHost, st));
        int32_t bad = 0;
        const mlav_status ss = mlav_plan_step_status(plan, ws, bytes, st, &bad);
        if (hdr.n_combine > 0 && hdr.combine_kind >= 0 && hdr.combine_kind < 3)
            kinds[hdr.combine_kind]++;
        if (force == FORCE_SHARES)
            shares += step_is_shares(ws, &hdr, st);
        if (skip == -1) {
            OK(ss);
            assert_int_equal(bad, -1);
        } else {
            assert_int_equal(ss, MLAV_ERR_INVALID_ARG);
            assert_int_equal(bad, skip >= 0 ? skip : e->batch);
            refused_steps++;
        }
        /* each layer's oracle once a step: graph A's result and graph B's are checked against it */
        sf_ref ref[SF_MAX_LAYERS] = {{0}};
        for (int l = 0; l < layers; l++) {
            CK(cudaMemcpyAsync(oa, d.out[l], e->out_bytes, cudaMemcpyDeviceToHost, st));
            CK(cudaMemcpyAsync(la, d.lse[l], e->lse_bytes, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            char msg[256];
            const double t0 = tu_now_s();
            if (skip != -2 && !sf_reference(e, l, &ref[l], msg, sizeof msg))
                fail_msg("step %d layer %d: %s (seed 0x%llx)", s, l, msg,
                         (unsigned long long)seed);
            oracle_s += tu_now_s() - t0;
            if (!sf_check_ref(e, &ref[l], oa, la, skip, msg, sizeof msg))
                fail_msg("%s h=%d page=%d %s%s step %d layer %d (%d live, %d tokens, refused "
                         "%d, kv_scale %g): %s (seed 0x%llx)",
                         mlav_backend_name(be), H, page_size, mlav_dtype_name(dtype), kv, s, l,
                         e->live,
                         e->q_indptr[e->batch], skip, (double)e->kv_scale[l], msg,
                         (unsigned long long)seed);
        }
        if (skip != -1) {
            for (int l = 0; l < layers; l++)
                sf_ref_free(&ref[l]);
            continue;
        }
        /* the same step through a host update and graph B: the same bits */
        for (int l = 0; l < layers; l++) {
            CK(cudaMemsetAsync(d.out[l], 0xff, e->out_bytes, st));
            CK(cudaMemsetAsync(d.lse[l], 0xff, e->lse_bytes, st));
        }
        CK(cudaMemsetAsync(ws2, 0xff, bytes, st));
        const mlav_lengths len = sf_lengths(e);
        OK(mlav_plan_update(plan, &len, ws2, bytes, st));
        CK(cudaGraphLaunch(xb, st));
        for (int l = 0; l < layers; l++) {
            CK(cudaMemcpyAsync(ob, d.out[l], e->out_bytes, cudaMemcpyDeviceToHost, st));
            CK(cudaMemcpyAsync(lb, d.lse[l], e->lse_bytes, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            char msg[256];
            if (!sf_check_ref(e, &ref[l], ob, lb, -1, msg, sizeof msg))
                fail_msg("%s host update, step %d layer %d: %s (seed 0x%llx)",
                         mlav_backend_name(be), s, l, msg, (unsigned long long)seed);
            sf_ref_free(&ref[l]);
        }
        /* graph A's result of this layer set is in oa/la only for the last layer: compare it */
        if (memcmp(oa, ob, e->out_bytes) != 0 || memcmp(la, lb, e->lse_bytes) != 0)
            fail_msg("step %d: the device-length and host-length schedules gave different bits "
                     "(seed 0x%llx)",
                     s, (unsigned long long)seed);
    }
    print_message("%s h=%d page=%d %s%s: %d steps, %d with refused lengths, %d in equal "
                  "shares; combine kinds rows %d, blocks %d, wide %d; %.1f s, the oracle %.1f s "
                  "of it; seed 0x%llx\n",
                  mlav_backend_name(be), H, page_size, mlav_dtype_name(dtype), kv, steps,
                  refused_steps, shares, kinds[0], kinds[1], kinds[2], tu_now_s() - loop_t0,
                  oracle_s, (unsigned long long)seed);
#ifdef MLAV_WITH_SM90
    if (force == FORCE_SHARES) {
        /* the sm_90a family, which cc 9.0 runs for these steps' 128 rows a request unless
         * MLAV_FLASH_FAMILY=legal, takes shares at most of them (37 of 50 such steps by the
         * host rule on 132 SMs) */
        int dev = 0, major = 0, minor = 0;
        CK(cudaGetDevice(&dev));
        CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        const char *family = getenv("MLAV_FLASH_FAMILY");
        if (be == MLAV_BACKEND_CUDA && major == 9 && minor == 0 &&
            !(family && strcmp(family, "legal") == 0))
            assert_true(shares > 0);
    }
#endif
    if (force == FORCE_KINDS) {
        int dev = 0, sms = 0;
        CK(cudaGetDevice(&dev));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (sms >= 129) /* each of the step combine's paths ran, and was checked above */
            assert_true(kinds[MLAV_COMBINE_ROWS] > 0 && kinds[MLAV_COMBINE_BLOCKS] > 0 &&
                        kinds[MLAV_COMBINE_BLOCKS_WIDE] > 0);
    }
    free(oa);
    free(ob);
    free(la);
    free(lb);
    CK(cudaGraphExecDestroy(xa));
    CK(cudaGraphExecDestroy(xb));
    CK(cudaGraphDestroy(ga));
    CK(cudaGraphDestroy(gb));
    CK(cudaStreamDestroy(st));
    for (int l = 0; l < layers; l++) {
        cudaFree(d.q[l]);
        cudaFree(d.kv[l]);
        cudaFree(d.out[l]);
        cudaFree(d.lse[l]);
    }
    cudaFree(d.pt);
    cudaFree(d.mask);
    cudaFree(d.qi);
    cudaFree(d.kvl);
    cudaFree(d.kv_scale);
    cudaFree(ws);
    cudaFree(ws2);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    sf_free(e);
}

static void test_steps_graph_h16_page1_bf16(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 8, .max_tokens = 64, .max_q_len = 16,
                             .max_kv_len = 1000};
    graph_loop(MLAV_BACKEND_CUDA, 16, 1, MLAV_DTYPE_BF16, 0, &lim, FORCE_NONE);
}

static void test_steps_graph_h8_page64_f16(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 4, .max_tokens = 80, .max_q_len = 40,
                             .max_kv_len = 2500};
    graph_loop(MLAV_BACKEND_CUDA, 8, 64, MLAV_DTYPE_F16, 0, &lim, FORCE_NONE);
}

static void test_steps_graph_h64_page16_f32(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 3, .max_tokens = 12, .max_q_len = 9, .max_kv_len = 600};
    graph_loop(MLAV_BACKEND_CUDA, 64, 16, MLAV_DTYPE_F32, 0, &lim, FORCE_NONE);
}

/* The production mix: BF16 q, an FP8 cache (one layer's scale a captured host value, the
 * other's a device tensor redrawn every step), pages of 64, a tree per request. */
static void test_steps_graph_h16_page64_bf16_fp8(void **state)
{
    (void)state;
    /* the fp64 check on the host is the test's cost: sized like the other three, which took
     * 102 s together on the H200 host (2e230bd) */
    const mlav_limits lim = {.max_batch = 4, .max_tokens = 40, .max_q_len = 16,
                             .max_kv_len = 1500};
    graph_loop(MLAV_BACKEND_CUDA, 16, 64, MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3, &lim,
               FORCE_NONE);
}

/* The step combine's three kinds (combine.cu's combine_step_kernel) under one graph: steps
 * forced to each (forced_steps) between random ones, a lone request up to 16k keys. */
static void test_steps_graph_h8_page1_bf16_kinds(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 3, .max_tokens = 6, .max_q_len = 2,
                             .max_kv_len = 16400};
    graph_loop(MLAV_BACKEND_CUDA, 8, 1, MLAV_DTYPE_BF16, 0, &lim, FORCE_KINDS);
}

/* Full batches of one draft length (FORCE_SHARES): where the plan is the sm_90a family's, most
 * of these steps' schedules are equal shares (schedule_step_shares.h), checked against the
 * oracle like any other, and through the host update for the same bits. 32 x (H 16, q_len 8)
 * at prefixes 1.5k-4.5k: ~28 GFLOP a layer of fp64 work. */
static void test_steps_graph_h16_page64_bf16_shares(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 32, .max_tokens = 256, .max_q_len = 8,
                             .max_kv_len = 4600};
    graph_loop(MLAV_BACKEND_CUDA, 16, 64, MLAV_DTYPE_BF16, 0, &lim, FORCE_SHARES);
}

/* cuda-naive's plans for limits under the same graphs: the fixed grid of max_tokens x H blocks,
 * the step's lengths read on the device (device lengths captured, then host updates), refused
 * requests and a refused q_indptr writing nothing; three dtypes, pages of 1, 16 and 64, an FP8
 * cache with a host scale and a device one. */
static void test_steps_graph_naive_h16_page1_bf16(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 8, .max_tokens = 64, .max_q_len = 16,
                             .max_kv_len = 1000};
    graph_loop(MLAV_BACKEND_CUDA_NAIVE, 16, 1, MLAV_DTYPE_BF16, 0, &lim, FORCE_NONE);
}

static void test_steps_graph_naive_h64_page16_f32(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 3, .max_tokens = 12, .max_q_len = 9, .max_kv_len = 600};
    graph_loop(MLAV_BACKEND_CUDA_NAIVE, 64, 16, MLAV_DTYPE_F32, 0, &lim, FORCE_NONE);
}

static void test_steps_graph_naive_h16_page64_bf16_fp8(void **state)
{
    (void)state;
    const mlav_limits lim = {.max_batch = 4, .max_tokens = 40, .max_q_len = 16,
                             .max_kv_len = 1500};
    graph_loop(MLAV_BACKEND_CUDA_NAIVE, 16, 64, MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3, &lim,
               FORCE_NONE);
}

/* A run on a workspace that no update has written, of 0xff bytes (counts of -1, an unknown
 * combine kind) or zeroed: nothing runs, nothing is written, no fault (the step header's counts
 * are checked on the device, by the split kernel and by the combine). */
static void test_steps_run_before_update(void **state)
{
    const mlav_backend be = *(const mlav_backend *)*state;
    tu_require_device();
    mlav_context *ctx;
    OK(mlav_context_create(&ctx, be));
    const mlav_limits lim = {.max_batch = 4, .max_tokens = 32, .max_q_len = 16,
                             .max_kv_len = 2000};
    const int32_t H = 16, W = 576, page = 64, max_pages = (lim.max_kv_len + page - 1) / page;
    const mlav_problem shape = {.num_heads = H, .d_latent = 512, .d_rope = 64,
                                .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16,
                                .page_size = page, .max_pages = max_pages};
    mlav_plan *plan;
    OK(mlav_plan_create_for_limits(ctx, &shape, &lim, &plan));
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    const int64_t pages = (int64_t)lim.max_batch * max_pages;
    const size_t rows = (size_t)lim.max_tokens * H; /* BF16 q and out, fp32 lse */
    const size_t q_bytes = rows * W * 2, kv_bytes = (size_t)pages * page * W * 2;
    const size_t out_bytes = rows * 512 * 2, lse_bytes = rows * 4;
    void *ws = tu_dmalloc(bytes), *q = tu_dmalloc(q_bytes), *kv = tu_dmalloc(kv_bytes);
    void *out = tu_dmalloc(out_bytes), *lse = tu_dmalloc(lse_bytes);
    int32_t *pt = tu_dmalloc(sizeof(int32_t) * (size_t)lim.max_batch * max_pages);
    CK(cudaMemset(q, 0, q_bytes));
    CK(cudaMemset(kv, 0, kv_bytes));
    CK(cudaMemset(pt, 0, sizeof(int32_t) * (size_t)lim.max_batch * max_pages));
    unsigned char *ho = tu_xcalloc(out_bytes, 1), *hl = tu_xcalloc(lse_bytes, 1);
    static const int fills[2] = {0xff, 0x00};
    for (int f = 0; f < 2; f++) {
        CK(cudaMemset(ws, fills[f], bytes));
        CK(cudaMemset(out, 0xa5, out_bytes));
        CK(cudaMemset(lse, 0xa5, lse_bytes));
        const mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = q, .kv_cache = kv,
                                .num_pages = pages, .page_table = pt, .out = out, .lse = lse};
        OK(mlav_run(plan, &t, ws, bytes, NULL));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(ho, out, out_bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hl, lse, lse_bytes, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < out_bytes; i++)
            if (ho[i] != 0xa5)
                fail_msg("%s, workspace of 0x%02x bytes: out written at byte %zu",
                         mlav_backend_name(be), fills[f], i);
        for (size_t i = 0; i < lse_bytes; i++)
            if (hl[i] != 0xa5)
                fail_msg("%s, workspace of 0x%02x bytes: lse written at byte %zu",
                         mlav_backend_name(be), fills[f], i);
        /* and the step status says that no update of this plan wrote it */
        int32_t bad = 7;
        assert_int_equal(mlav_plan_step_status(plan, ws, bytes, NULL, &bad), MLAV_ERR_WORKSPACE);
        assert_int_equal(bad, -1);
    }
    free(ho);
    free(hl);
    cudaFree(ws);
    cudaFree(q);
    cudaFree(kv);
    cudaFree(out);
    cudaFree(lse);
    cudaFree(pt);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
}

/* The device data of a small BF16 engine for the hostile cases below: H 16, page 64, causal
 * chains, every page id valid; out and lse of exactly `lim`'s sizes (compute-sanitizer sees a
 * write past them), followed by nothing. */
typedef struct hostile_dev {
    mlav_limits lim;
    int32_t max_pages;
    int64_t pages;
    size_t out_bytes, lse_bytes;
    void *q, *kv, *out;
    float *lse;
    int32_t *pt;
} hostile_dev;

enum { HD_H = 16, HD_PAGE = 64, HD_W = 576, HD_DL = 512 };

static mlav_problem hostile_shape(int32_t max_pages)
{
    const mlav_problem shape = {.num_heads = HD_H, .d_latent = HD_DL, .d_rope = HD_W - HD_DL,
                                .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16,
                                .page_size = HD_PAGE, .max_pages = max_pages};
    return shape;
}

static void hostile_make(hostile_dev *d, const mlav_limits *lim, int32_t max_pages,
                         uint64_t *rng)
{
    d->lim = *lim;
    d->max_pages = max_pages;
    d->pages = (int64_t)lim->max_batch * max_pages;
    const size_t rows = (size_t)lim->max_tokens * HD_H;
    const size_t q_bytes = rows * HD_W * 2, kv_bytes = (size_t)d->pages * HD_PAGE * HD_W * 2;
    d->out_bytes = rows * HD_DL * 2;
    d->lse_bytes = rows * 4;
    d->q = tu_dmalloc(q_bytes);
    d->kv = tu_dmalloc(kv_bytes);
    d->out = tu_dmalloc(d->out_bytes);
    d->lse = tu_dmalloc(d->lse_bytes);
    d->pt = tu_dmalloc(sizeof(int32_t) * (size_t)d->pages);
    /* BF16 values in [-1, 1): random upper halves of small floats */
    uint16_t *h = tu_xcalloc(kv_bytes / 2, 2);
    for (size_t i = 0; i < kv_bytes / 2; i++)
        h[i] = (uint16_t)(0x3c00u + (tu_next(rng) % 0x380u)) | (uint16_t)(tu_next(rng) & 0x8000u);
    CK(cudaMemcpy(d->kv, h, kv_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d->q, h, q_bytes, cudaMemcpyHostToDevice));
    free(h);
    int32_t *pt = tu_xcalloc((size_t)d->pages, sizeof(int32_t));
    for (int64_t i = 0; i < d->pages; i++)
        pt[i] = (int32_t)((i * 7919) % d->pages);
    CK(cudaMemcpy(d->pt, pt, sizeof(int32_t) * (size_t)d->pages, cudaMemcpyHostToDevice));
    free(pt);
}

static void hostile_free(hostile_dev *d)
{
    cudaFree(d->q);
    cudaFree(d->kv);
    cudaFree(d->out);
    cudaFree(d->lse);
    cudaFree(d->pt);
}

/* Tensors of d's q and pool, with the outputs `o` (a plan's own, exactly its size). */
static mlav_tensors hostile_tensors(const hostile_dev *d, const hostile_dev *o)
{
    const mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = d->q, .kv_cache = d->kv,
                            .num_pages = d->pages, .page_table = d->pt, .out = o->out,
                            .lse = o->lse};
    return t;
}

/* Whether o's outputs hold nothing but the byte `fill`. */
static int hostile_untouched(const hostile_dev *o, int fill)
{
    CK(cudaDeviceSynchronize());
    unsigned char *h = tu_xcalloc(o->out_bytes + o->lse_bytes, 1);
    CK(cudaMemcpy(h, o->out, o->out_bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h + o->out_bytes, o->lse, o->lse_bytes, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (size_t i = 0; i < o->out_bytes + o->lse_bytes && ok; i++)
        ok = h[i] == fill;
    free(h);
    return ok;
}

static void hostile_poison(const hostile_dev *o, int fill)
{
    CK(cudaMemset(o->out, fill, o->out_bytes));
    CK(cudaMemset(o->lse, fill, o->lse_bytes));
}

/* A workspace belongs to the plan whose update wrote it last (mlaverify.h): plan B (smaller
 * limits, outputs of exactly its sizes) running on plan A's step runs nothing (before: it wrote
 * A's rows past B's out and faulted the stream), and B's step_status says MLAV_ERR_WORKSPACE;
 * likewise A on B's step, and a second plan of A's limits on A's step; A's own run works. A's
 * step written over (its items moved past the limits, then random bytes) under its intact
 * header runs nothing past A's outputs. Host and device updates alike. Under compute-sanitizer
 * memcheck (bench/gpu-suite.sh): no access past any buffer. */
static void test_steps_foreign_workspace_gpu(void **state)
{
    const mlav_backend be = *(const mlav_backend *)*state;
    tu_require_device();
    const uint64_t seed = tu_seed();
    uint64_t rng = seed;
    mlav_context *ctx;
    OK(mlav_context_create(&ctx, be));
    const mlav_limits la = {.max_batch = 8, .max_tokens = 64, .max_q_len = 8,
                            .max_kv_len = 4000};
    const mlav_limits lb = {.max_batch = 2, .max_tokens = 8, .max_q_len = 4, .max_kv_len = 300};
    const int32_t max_pages = (la.max_kv_len + HD_PAGE - 1) / HD_PAGE;
    const mlav_problem shape = hostile_shape(max_pages);
    hostile_dev A, B;
    hostile_make(&A, &la, max_pages, &rng);
    hostile_make(&B, &lb, max_pages, &rng);
    mlav_plan *pa, *pa2, *pb;
    OK(mlav_plan_create_for_limits(ctx, &shape, &la, &pa));
    OK(mlav_plan_create_for_limits(ctx, &shape, &la, &pa2));
    OK(mlav_plan_create_for_limits(ctx, &shape, &lb, &pb));
    const size_t ba = mlav_plan_workspace_bytes(pa), bb = mlav_plan_workspace_bytes(pb);
    const size_t bytes = ba > bb ? ba : bb;
    void *ws = tu_dmalloc(bytes);
    /* A's step: eight requests of 8 tokens, long prefixes (splits, combines) */
    int32_t qa[9], ka[8];
    qa[0] = 0;
    for (int b = 0; b < 8; b++) {
        qa[b + 1] = qa[b] + 8;
        ka[b] = 8 + (int32_t)(tu_next(&rng) % (uint64_t)(la.max_kv_len - 8));
    }
    const int32_t qb[3] = {0, 4, 7}, kb[2] = {250, 3};
    int32_t *dqa = tu_dmalloc(sizeof qa), *dka = tu_dmalloc(sizeof ka);
    int32_t *dqb = tu_dmalloc(sizeof qb), *dkb = tu_dmalloc(sizeof kb);
    CK(cudaMemcpy(dqa, qa, sizeof qa, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dka, ka, sizeof ka, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqb, qb, sizeof qb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkb, kb, sizeof kb, cudaMemcpyHostToDevice));
    const mlav_tensors ta = hostile_tensors(&A, &A), tb = hostile_tensors(&A, &B);
    for (int dev = 0; dev < 2; dev++) {
        const mlav_lengths lena = {dev ? MLAV_MEM_DEVICE : MLAV_MEM_HOST, 8, dev ? dqa : qa,
                                   dev ? dka : ka};
        const mlav_lengths lenb = {dev ? MLAV_MEM_DEVICE : MLAV_MEM_HOST, 2, dev ? dqb : qb,
                                   dev ? dkb : kb};
        const char *how = dev ? "device" : "host";
        print_message("%s, %s update\n", mlav_backend_name(be), how);
        CK(cudaMemset(ws, 0x5a, bytes));
        OK(mlav_plan_update(pa, &lena, ws, bytes, NULL));
        /* B and A2 on A's step */
        hostile_poison(&B, 0xa5);
        OK(mlav_run(pb, &tb, ws, bytes, NULL));
        if (!hostile_untouched(&B, 0xa5))
            fail_msg("%s update: plan B wrote on plan A's step (seed 0x%llx)", how,
                     (unsigned long long)seed);
        int32_t bad = 7;
        assert_int_equal(mlav_plan_step_status(pb, ws, bytes, NULL, &bad), MLAV_ERR_WORKSPACE);
        assert_int_equal(bad, -1);
        hostile_poison(&A, 0xa5);
        OK(mlav_run(pa2, &ta, ws, bytes, NULL));
        if (!hostile_untouched(&A, 0xa5))
            fail_msg("%s update: plan A2 wrote on plan A's step", how);
        assert_int_equal(mlav_plan_step_status(pa2, ws, bytes, NULL, NULL), MLAV_ERR_WORKSPACE);
        /* A on its own step */
        OK(mlav_plan_step_status(pa, ws, bytes, NULL, &bad));
        assert_int_equal(bad, -1);
        OK(mlav_run(pa, &ta, ws, bytes, NULL));
        if (hostile_untouched(&A, 0xa5))
            fail_msg("%s update: plan A wrote nothing on its own step", how);
        /* A on B's step */
        OK(mlav_plan_update(pb, &lenb, ws, bytes, NULL));
        hostile_poison(&A, 0xa5);
        OK(mlav_run(pa, &ta, ws, bytes, NULL));
        if (!hostile_untouched(&A, 0xa5))
            fail_msg("%s update: plan A wrote on plan B's step", how);
        assert_int_equal(mlav_plan_step_status(pa, ws, bytes, NULL, NULL), MLAV_ERR_WORKSPACE);
        OK(mlav_plan_step_status(pb, ws, bytes, NULL, NULL));
    }
    /* A's step written over under its own header: items moved past the limits (q_start past
     * max_tokens, slot past the partial states, request past max_batch), then random bytes */
    const mlav_lengths lena = {MLAV_MEM_HOST, 8, qa, ka};
    OK(mlav_plan_update(pa, &lena, ws, bytes, NULL));
    CK(cudaDeviceSynchronize());
    unsigned char *h = tu_xcalloc(ba, 1);
    CK(cudaMemcpy(h, ws, ba, cudaMemcpyDeviceToHost));
    mlav_step_header hdr;
    memcpy(&hdr, h, sizeof hdr);
    if (be == MLAV_BACKEND_CUDA) {
        assert_true(hdr.n_items > 0);
        mlav_split_item *it = (mlav_split_item *)(h + sizeof hdr);
        for (int32_t i = 0; i < hdr.n_items; i++) {
            switch (i % 4) {
            case 0: it[i].q_start += la.max_tokens; break;
            case 1: it[i].b += la.max_batch; break;
            case 2: it[i].slot = it[i].slot < 0 ? -2 : it[i].slot + (1 << 20); break;
            default: it[i].kv_end += la.max_kv_len; break;
            }
        }
        CK(cudaMemcpy(ws, h, ba, cudaMemcpyHostToDevice));
        hostile_poison(&A, 0xa5);
        OK(mlav_run(pa, &ta, ws, bytes, NULL));
        CK(cudaDeviceSynchronize());
    } else {
        /* cuda-naive's step is its lengths (step_region.h): kv_lens past the limits, then
         * q_lens past them, under the intact header are requests the kernel refuses: nothing
         * is written (without its check, a score row past shared memory) */
        int32_t *q = (int32_t *)(h + sizeof hdr), *kv = q + la.max_batch + 1;
        for (int32_t b = 0; b < 8; b++)
            kv[b] = b % 2 ? la.max_kv_len + 1 + b : INT32_MAX - b;
        CK(cudaMemcpy(ws, h, ba, cudaMemcpyHostToDevice));
        hostile_poison(&A, 0xa5);
        OK(mlav_run(pa, &ta, ws, bytes, NULL));
        if (!hostile_untouched(&A, 0xa5))
            fail_msg("cuda-naive: a step of kv_lens past the limits wrote rows");
        for (int32_t b = 0; b <= 8; b++)
            q[b] = b * (la.max_q_len + 1); /* q_len past the limits */
        for (int32_t b = 0; b < 8; b++)
            kv[b] = la.max_q_len + 1;
        CK(cudaMemcpy(ws, h, ba, cudaMemcpyHostToDevice));
        OK(mlav_run(pa, &ta, ws, bytes, NULL));
        if (!hostile_untouched(&A, 0xa5))
            fail_msg("cuda-naive: a step of q_lens past the limits wrote rows");
    }
    for (int round = 0; round < 4; round++) {
        for (size_t i = sizeof hdr; i < ba; i++)
            h[i] = (unsigned char)tu_next(&rng);
        memcpy(h, &hdr, sizeof hdr);
        CK(cudaMemcpy(ws, h, ba, cudaMemcpyHostToDevice));
        OK(mlav_run(pa, &ta, ws, bytes, NULL));
        CK(cudaDeviceSynchronize());
    }
    free(h);
    cudaFree(ws);
    cudaFree(dqa);
    cudaFree(dka);
    cudaFree(dqb);
    cudaFree(dkb);
    mlav_plan_free(pa);
    mlav_plan_free(pa2);
    mlav_plan_free(pb);
    hostile_free(&A);
    hostile_free(&B);
    mlav_context_free(ctx);
}

/* Padding requests (q_len 0) with garbage lengths (negative, past the limits, INT32_MAX) and
 * page ids (-1, past the pool), through host and device lengths: the live requests' rows come
 * out bit for bit as in the step without the padding, the padding's rows are not written, and
 * step_status says every request was taken. */
static void test_steps_padding_garbage_gpu(void **state)
{
    const mlav_backend be = *(const mlav_backend *)*state;
    tu_require_device();
    const uint64_t seed = tu_seed();
    uint64_t rng = seed;
    mlav_context *ctx;
    OK(mlav_context_create(&ctx, be));
    const mlav_limits lim = {.max_batch = 8, .max_tokens = 32, .max_q_len = 4,
                             .max_kv_len = 3000};
    const int32_t max_pages = (lim.max_kv_len + HD_PAGE - 1) / HD_PAGE;
    const mlav_problem shape = hostile_shape(max_pages);
    hostile_dev D;
    hostile_make(&D, &lim, max_pages, &rng);
    mlav_plan *plan;
    OK(mlav_plan_create_for_limits(ctx, &shape, &lim, &plan));
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    void *ws = tu_dmalloc(bytes);
    const mlav_tensors t = hostile_tensors(&D, &D);
    /* three live requests, then five padding slots */
    int32_t qi[9] = {0, 4, 5, 8, 8, 8, 8, 8, 8};
    int32_t kv[8] = {2900, 5, 1200, -1, INT32_MAX, lim.max_kv_len + 1, INT32_MIN, 0};
    unsigned char *ref = tu_xcalloc(D.out_bytes + D.lse_bytes, 1);
    unsigned char *got = tu_xcalloc(D.out_bytes + D.lse_bytes, 1);
    /* the reference: the live requests alone */
    const mlav_lengths live = {MLAV_MEM_HOST, 3, qi, kv};
    hostile_poison(&D, 0xa5);
    OK(mlav_plan_update(plan, &live, ws, bytes, NULL));
    OK(mlav_run(plan, &t, ws, bytes, NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(ref, D.out, D.out_bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ref + D.out_bytes, D.lse, D.lse_bytes, cudaMemcpyDeviceToHost));
    /* the padding slots' page-table rows: -1 and ids past the pool */
    int32_t *pt = tu_xcalloc((size_t)D.pages, sizeof(int32_t));
    CK(cudaMemcpy(pt, D.pt, sizeof(int32_t) * (size_t)D.pages, cudaMemcpyDeviceToHost));
    for (int32_t b = 3; b < 8; b++)
        for (int32_t j = 0; j < max_pages; j++)
            pt[(size_t)b * max_pages + j] = j % 2 ? -1 : (int32_t)D.pages + j;
    CK(cudaMemcpy(D.pt, pt, sizeof(int32_t) * (size_t)D.pages, cudaMemcpyHostToDevice));
    free(pt);
    int32_t *dqi = tu_dmalloc(sizeof qi), *dkv = tu_dmalloc(sizeof kv);
    CK(cudaMemcpy(dqi, qi, sizeof qi, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkv, kv, sizeof kv, cudaMemcpyHostToDevice));
    for (int dev = 0; dev < 2; dev++) {
        const mlav_lengths len = {dev ? MLAV_MEM_DEVICE : MLAV_MEM_HOST, 8, dev ? dqi : qi,
                                  dev ? dkv : kv};
        hostile_poison(&D, 0xa5);
        OK(mlav_plan_update(plan, &len, ws, bytes, NULL));
        OK(mlav_run(plan, &t, ws, bytes, NULL));
        int32_t bad = 7;
        OK(mlav_plan_step_status(plan, ws, bytes, NULL, &bad));
        assert_int_equal(bad, -1);
        CK(cudaMemcpy(got, D.out, D.out_bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(got + D.out_bytes, D.lse, D.lse_bytes, cudaMemcpyDeviceToHost));
        if (memcmp(ref, got, D.out_bytes + D.lse_bytes) != 0)
            fail_msg("%s, %s lengths: the padded step's outputs differ from the live requests' "
                     "(seed 0x%llx)", mlav_backend_name(be), dev ? "device" : "host",
                     (unsigned long long)seed);
    }
    free(ref);
    free(got);
    cudaFree(dqi);
    cudaFree(dkv);
    cudaFree(ws);
    mlav_plan_free(plan);
    hostile_free(&D);
    mlav_context_free(ctx);
}

/* The device scheduler against the host rule, byte for byte: random steps, from one request to
 * 2,048, single tokens to long drafts, short and long KV, a third of them of one draft length
 * (equal shares' steps, schedule_step_shares.h), with refused requests and broken q_indptr among
 * them; each step's update from device lengths and from host lengths into two
 * workspaces poisoned alike must leave the same bytes (the step region, zero-padded to its
 * alignment, and the poison after it). No attention runs: the schedules alone. The steps:
 * steps_fixture.h's sf_random_lengths. */
static void schedule_bytes(int32_t H, const mlav_limits *lim, int steps, uint64_t *rng,
                           uint64_t seed)
{
    mlav_context *ctx;
    OK(mlav_context_create(&ctx, MLAV_BACKEND_CUDA));
    const mlav_problem shape = {.num_heads = H, .d_latent = 512, .d_rope = 64,
                                .softmax_scale = 0.1f, .dtype = MLAV_DTYPE_BF16, .page_size = 64,
                                .max_pages = (lim->max_kv_len + 63) / 64};
    mlav_plan *plan;
    OK(mlav_plan_create_for_limits(ctx, &shape, lim, &plan));
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    /* the region is a few hundred KB at most here: compare the first MiB (or all of it) */
    const size_t cmp = bytes < ((size_t)1 << 20) ? bytes : ((size_t)1 << 20);
    void *wa = tu_dmalloc(bytes), *wb = tu_dmalloc(bytes);
    int32_t *qi = tu_xcalloc((size_t)lim->max_batch + 1, sizeof(int32_t));
    int32_t *kvl = tu_xcalloc((size_t)lim->max_batch, sizeof(int32_t));
    int32_t *dqi = tu_dmalloc(sizeof(int32_t) * ((size_t)lim->max_batch + 1));
    int32_t *dkv = tu_dmalloc(sizeof(int32_t) * (size_t)lim->max_batch);
    unsigned char *ha = tu_xcalloc(cmp, 1), *hb = tu_xcalloc(cmp, 1);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int refused = 0, broken = 0, compared = 0, shares = 0;
    for (int s = 0; s < steps; s++) {
        const sf_drawn dr = sf_random_lengths(lim, rng, qi, kvl);
        const int32_t batch = dr.batch;
        refused += dr.past;
        broken += dr.broken;
        CK(cudaMemcpyAsync(dqi, qi, sizeof(int32_t) * ((size_t)batch + 1),
                           cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(dkv, kvl, sizeof(int32_t) * (size_t)batch, cudaMemcpyHostToDevice, st));
        CK(cudaMemsetAsync(wa, 0xa5, cmp, st));
        CK(cudaMemsetAsync(wb, 0xa5, cmp, st));
        const mlav_lengths dl = {MLAV_MEM_DEVICE, batch, dqi, dkv};
        const mlav_lengths hl = {MLAV_MEM_HOST, batch, qi, kvl};
        OK(mlav_plan_update(plan, &dl, wa, bytes, st));
        const mlav_status hs = mlav_plan_update(plan, &hl, wb, bytes, st);
        if (hs != MLAV_OK) {
            /* the host path refuses bad lengths at the call (dispatch's checks); the device
             * path takes them and records them in the header: nothing to compare */
            assert_int_equal(hs, MLAV_ERR_INVALID_ARG);
            CK(cudaStreamSynchronize(st));
            continue;
        }
        CK(cudaMemcpyAsync(ha, wa, cmp, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(hb, wb, cmp, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        compared++;
        { /* the blocks of equal shares are not request-major (schedule_step_shares.h) */
            const mlav_step_header *hh = (const mlav_step_header *)hb;
            const mlav_split_item *it = (const mlav_split_item *)(hb + sizeof *hh);
            const int32_t n = hh->n_items;
            for (int32_t i = 1; i < n && (sizeof *hh + (size_t)(i + 1) * sizeof *it) <= cmp; i++)
                if (it[i].b < it[i - 1].b) {
                    shares++;
                    break;
                }
        }
        if (memcmp(ha, hb, cmp) != 0) {
            size_t at = 0;
            while (ha[at] == hb[at])
                at++;
            fail_msg("H=%d limits (%d, %d, %d, %d) step %d, batch %d: the device schedule differs "
                     "from the host's at byte %zu (seed 0x%llx)",
                     H, lim->max_batch, lim->max_tokens, lim->max_q_len, lim->max_kv_len, s, batch,
                     at, (unsigned long long)seed);
        }
    }
    print_message("H=%d limits (%d, %d, %d, %d): %d of %d steps compared, alike, %d of them "
                  "equal shares (the others refused by the host: %d with a request past the "
                  "limits, %d with a broken q_indptr), seed 0x%llx\n",
                  H, lim->max_batch, lim->max_tokens, lim->max_q_len, lim->max_kv_len, compared,
                  steps, shares, refused, broken, (unsigned long long)seed);
    assert_true(compared > steps / 2); /* the comparison is the test: most steps must reach it */
    CK(cudaStreamDestroy(st));
    free(qi);
    free(kvl);
    free(ha);
    free(hb);
    cudaFree(dqi);
    cudaFree(dkv);
    cudaFree(wa);
    cudaFree(wb);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
}

static void test_step_schedule_device_matches_host(void **state)
{
    (void)state;
    tu_require_device();
    const uint64_t seed = tu_seed();
    uint64_t rng = seed;
    const mlav_limits l1 = {.max_batch = 64, .max_tokens = 1024, .max_q_len = 64,
                            .max_kv_len = 200000};
    const mlav_limits l2 = {.max_batch = 2048, .max_tokens = 4096, .max_q_len = 16,
                            .max_kv_len = 140000};
    const mlav_limits l3 = {.max_batch = 1, .max_tokens = 64, .max_q_len = 64,
                            .max_kv_len = 1 << 21};
    const mlav_limits l4 = {.max_batch = 32, .max_tokens = 512, .max_q_len = 16,
                            .max_kv_len = 50000};
    schedule_bytes(8, &l1, 400, &rng, seed);
    schedule_bytes(16, &l2, 150, &rng, seed);
    schedule_bytes(128, &l3, 300, &rng, seed);
    schedule_bytes(64, &l4, 300, &rng, seed);
}

/* AUTO's one fallback rule serves both constructors: where the cuda backend declines (dims
 * other than 512 + 64), a plan for one problem and a plan for limits alike are made on the cpu,
 * and the context's note says which kind was declined and why; the plan for limits then runs an
 * engine step on the cpu against the oracle. */
static void test_steps_auto_fallback(void **state)
{
    (void)state;
    tu_require_device();
    const char *env = getenv("MLAV_BACKEND");
    char *saved = env ? strdup(env) : NULL;
    unsetenv("MLAV_BACKEND");
    mlav_context *ctx;
    OK(mlav_context_create(&ctx, MLAV_BACKEND_AUTO));
    assert_int_equal(mlav_context_backend(ctx), MLAV_BACKEND_CUDA);
    const mlav_limits lim = {3, 24, 8, 300};
    const uint64_t seed = tu_seed();
    sf_engine *e = sf_make(&lim, 4, 64, 16, 16, MLAV_DTYPE_BF16, 0, 1, seed);
    const mlav_problem shape = sf_shape(e);
    mlav_plan *lp;
    OK(mlav_plan_create_for_limits(ctx, &shape, &lim, &lp));
    assert_int_equal(mlav_plan_backend(lp), MLAV_BACKEND_CPU);
    assert_non_null(strstr(mlav_context_note(ctx), "plan for limits"));
    assert_non_null(strstr(mlav_context_note(ctx), "falling back to cpu"));
    sf_step(e, 0);
    mlav_problem p = shape;
    p.batch = e->batch;
    p.q_indptr = e->q_indptr;
    p.kv_lens = e->kv_lens;
    mlav_plan *xp;
    OK(mlav_plan_create(ctx, &p, &xp));
    assert_int_equal(mlav_plan_backend(xp), MLAV_BACKEND_CPU);
    assert_non_null(strstr(mlav_context_note(ctx), "this problem"));
    const size_t bytes = mlav_plan_workspace_bytes(lp);
    void *ws = aligned_alloc(256, (bytes + 255) / 256 * 256);
    assert_non_null(ws);
    const mlav_lengths len = sf_lengths(e);
    OK(mlav_plan_update(lp, &len, ws, bytes, NULL));
    const mlav_tensors t = sf_tensors(e, 0);
    sf_poison(e);
    OK(mlav_run(lp, &t, ws, bytes, NULL));
    char msg[256];
    if (!sf_check(e, 0, e->out[0], e->lse[0], msg, sizeof msg))
        fail_msg("AUTO's cpu plan for limits: %s (seed 0x%llx)", msg, (unsigned long long)seed);
    free(ws);
    mlav_plan_free(xp);
    mlav_plan_free(lp);
    mlav_context_free(ctx);
    sf_free(e);
    if (saved) {
        setenv("MLAV_BACKEND", saved, 1);
        free(saved);
    }
}

int main(void)
{
    static mlav_backend cuda = MLAV_BACKEND_CUDA, naive = MLAV_BACKEND_CUDA_NAIVE;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_graph_h16_page1_bf16),
        cmocka_unit_test(test_steps_graph_h8_page64_f16),
        cmocka_unit_test(test_steps_graph_h64_page16_f32),
        cmocka_unit_test(test_steps_graph_h16_page64_bf16_fp8),
        cmocka_unit_test(test_steps_graph_h8_page1_bf16_kinds),
        cmocka_unit_test(test_steps_graph_h16_page64_bf16_shares),
        cmocka_unit_test(test_steps_graph_naive_h16_page1_bf16),
        cmocka_unit_test(test_steps_graph_naive_h64_page16_f32),
        cmocka_unit_test(test_steps_graph_naive_h16_page64_bf16_fp8),
        cmocka_unit_test(test_steps_auto_fallback),
        cmocka_unit_test_prestate(test_steps_run_before_update, &cuda),
        cmocka_unit_test_prestate(test_steps_run_before_update, &naive),
        cmocka_unit_test(test_step_schedule_device_matches_host),
        cmocka_unit_test_prestate(test_steps_foreign_workspace_gpu, &cuda),
        cmocka_unit_test_prestate(test_steps_foreign_workspace_gpu, &naive),
        cmocka_unit_test_prestate(test_steps_padding_garbage_gpu, &cuda),
        cmocka_unit_test_prestate(test_steps_padding_garbage_gpu, &naive),
    };
    /* MLAV_TEST_FILTER=*schedule* (wildcards * and ?) runs a subset */
    const char *filter = getenv("MLAV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#else

static void test_steps_gpu_not_built(void **state)
{
    (void)state;
    print_message("built without CUDA: skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_steps_gpu_not_built)};
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#endif
