/* mlaverify bench, --engine: one point through a plan for limits as an engine runs it (device
 * lengths, CUDA graphs), against the plan for the point's exact lengths in the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mlaverify.h"
#ifdef MLAV_WITH_CUDA
#include "bench_cuda.h"
#endif

#ifdef MLAV_WITH_CUDA
int bench_measure_engine(const bench_config *c, const bench_layout *L, const bench_opts *o,
                         mlav_context *ctx, const void *dt_, const void *exact, bench_result *r)
{
    const mlav_tensors *dt = dt_;
    const double C = o->engine;
    int32_t max_kv = 0;
    for (int b = 0; b < c->B; b++)
        max_kv = L->kv_lens[b] > max_kv ? L->kv_lens[b] : max_kv;
    const int32_t T = L->q_indptr[c->B];
    mlav_limits lim = {.max_batch = c->B, .max_tokens = (int32_t)ceil(C * T),
                       .max_q_len = (int32_t)ceil(C * c->q_len),
                       .max_kv_len = (int32_t)fmin(ceil(C * max_kv), (double)INT32_MAX)};
    if (lim.max_q_len > lim.max_tokens)
        lim.max_q_len = lim.max_tokens;
    /* the limits' page table stride and mask words: the point's rows copied into them */
    const int32_t max_pages = (lim.max_kv_len + c->page_size - 1) / c->page_size;
    const int32_t words = mlav_tree_mask_words(lim.max_q_len);
    int32_t *pt = calloc((size_t)c->B * max_pages, sizeof(int32_t));
    /* q, out, lse and the mask of the limits' max_tokens rows (a plan for limits checks its
     * tensors, their overlaps too, at those sizes) */
    const int32_t MT = lim.max_tokens;
    uint32_t *mask = L->tree_mask ? calloc((size_t)MT * words, sizeof(uint32_t)) : NULL;
    if (!pt || (L->tree_mask && !mask)) {
        free(pt);
        free(mask);
        fprintf(stderr, "mlaverify bench: out of host memory\n");
        return 2;
    }
    for (int b = 0; b < c->B; b++)
        memcpy(pt + (size_t)b * max_pages, L->page_table + (size_t)b * L->max_pages,
               sizeof(int32_t) * L->max_pages);
    for (int32_t t = 0; mask && t < T; t++)
        memcpy(mask + (size_t)t * words, L->tree_mask + (size_t)t * L->words,
               sizeof(uint32_t) * L->words);
    void *dpt = bench_gpu_alloc(sizeof(int32_t) * (size_t)c->B * max_pages);
    void *dmask = mask ? bench_gpu_alloc(sizeof(uint32_t) * (size_t)MT * words) : NULL;
    const size_t es = mlav_dtype_size(c->dtype), rows = (size_t)MT * c->H;
    void *dq = bench_gpu_alloc(rows * (size_t)(o->Dl + o->Dr) * es);
    void *dout = bench_gpu_alloc(rows * (size_t)o->Dl * es);
    void *dlse = bench_gpu_alloc(rows * sizeof(float));
    bench_gpu_fill_random(dq, rows * (size_t)(o->Dl + o->Dr), c->dtype, 1.0f,
                          o->seed ^ 0x2545F491u);
    /* an FP8 cache's scale as an engine holds it: a device tensor the run reads (the plain
     * runs give it as a host value) */
    const int fp8 = c->kv_dtype == MLAV_DTYPE_FP8_E4M3;
    float *dscale = fp8 ? bench_gpu_alloc(sizeof(float)) : NULL;
    if (fp8) {
        const float scale = BENCH_KV_SCALE;
        bench_gpu_upload(dscale, &scale, sizeof scale);
    }
    void *dqi = bench_gpu_alloc(sizeof(int32_t) * (size_t)(c->B + 1));
    void *dkv = bench_gpu_alloc(sizeof(int32_t) * (size_t)c->B);
    bench_gpu_upload(dpt, pt, sizeof(int32_t) * (size_t)c->B * max_pages);
    if (mask)
        bench_gpu_upload(dmask, mask, sizeof(uint32_t) * (size_t)MT * words);
    bench_gpu_upload(dqi, L->q_indptr, sizeof(int32_t) * (size_t)(c->B + 1));
    bench_gpu_upload(dkv, L->kv_lens, sizeof(int32_t) * (size_t)c->B);
    free(pt);
    free(mask);

    mlav_problem shape = L->prob;
    shape.max_pages = max_pages;
    mlav_plan *plan = NULL;
    int rc = 0;
    r->engine_status = mlav_plan_create_for_limits(ctx, &shape, &lim, &plan);
    if (r->engine_status == MLAV_OK && mlav_plan_backend(plan) != MLAV_BACKEND_CUDA)
        r->engine_status = MLAV_ERR_UNSUPPORTED;
    if (r->engine_status == MLAV_OK) {
        const size_t wsb = mlav_plan_workspace_bytes(plan);
        void *ws = bench_gpu_alloc(wsb);
        mlav_tensors t = *dt;
        t.q = dq;
        t.out = dout;
        t.lse = dlse;
        t.page_table = dpt;
        t.tree_mask = dmask;
        t.kv_scale_ptr = dscale;
        const mlav_lengths len = {MLAV_MEM_DEVICE, c->B, dqi, dkv};
        bench_reps rp = {o->min_reps, o->reps, o->max_seconds, o->l2};
        bench_timing step, run, exact_run, upd;
        r->engine_status = bench_gpu_time_steps(exact, plan, &len, &t, ws, wsb, &rp, &step, &run,
                                                &exact_run, &upd);
        bench_gpu_free(ws);
        r->step_us = step.median_us;
        r->run_us = run.median_us;
        r->exact_run_us = exact_run.median_us;
        r->update_us = upd.median_us;
    }
    if (r->engine_status != MLAV_OK && r->engine_status != MLAV_ERR_UNSUPPORTED) {
        fprintf(stderr, "mlaverify bench: the plan for limits failed at B=%d H=%d q_len=%d "
                        "prefix=%lld kv %s: %s: %s\n",
                c->B, c->H, c->q_len, (long long)c->prefix, mlav_dtype_name(c->kv_dtype),
                mlav_status_string(r->engine_status), mlav_last_error(NULL));
        rc = 2;
    }
    mlav_plan_free(plan);
    bench_gpu_free(dpt);
    bench_gpu_free(dmask);
    bench_gpu_free(dq);
    bench_gpu_free(dout);
    bench_gpu_free(dlse);
    bench_gpu_free(dqi);
    bench_gpu_free(dkv);
    bench_gpu_free(dscale);
    return rc;
}
#else
int bench_measure_engine(const bench_config *c, const bench_layout *L, const bench_opts *o,
                         mlav_context *ctx, const void *dt, const void *exact, bench_result *r)
{
    (void)c, (void)L, (void)o, (void)ctx, (void)dt, (void)exact;
    r->engine_status = MLAV_ERR_UNSUPPORTED; /* graphs of device lengths: CUDA only */
    return 0;
}
#endif
