/* mlaverify bench, the timing: host tensors, the CPU stopping rule (clock_gettime, median) and
 * the measurement of one point on every backend (the GPU's graph replays are bench_cuda.cu's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlaverify_internal.h"
#include "bench.h"
#include "mlaverify.h"
#ifdef MLAV_WITH_CUDA
#include "bench_cuda.h"
#endif

double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Uniform values in [-1, 1); an FP8 buffer holds them divided by BENCH_KV_SCALE (bench.h says
 * why), as bench_gpu_fill_random's does on the device. */
static void host_fill(void *p, size_t n, mlav_dtype d, uint64_t seed)
{
    const float div = d == MLAV_DTYPE_FP8_E4M3 ? BENCH_KV_SCALE : 1.0f;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = seed + i;
        float v = (float)((double)(bench_splitmix64(&x) >> 40) / 16777216.0 * 2.0 - 1.0);
        mlav_store_from_f32(p, (int)d, i, v / div);
    }
}

void *bench_host_alloc(size_t bytes)
{
    /* 256-byte aligned, as mlav_run's workspace must be; size rounded to the alignment */
    size_t n = (bytes + 255) / 256 * 256;
    return aligned_alloc(256, n ? n : 256);
}

typedef struct host_tensors {
    void *q, *kv, *out;
    float *lse;
} host_tensors;

static int host_tensors_make(host_tensors *h, const bench_layout *L, uint64_t seed)
{
    const mlav_dtype d = L->prob.dtype;
    const size_t es = mlav_dtype_size(d);
    h->q = bench_host_alloc(L->q_elems * es);
    h->kv = bench_host_alloc(L->kv_bytes);
    h->out = bench_host_alloc(L->out_elems * es);
    h->lse = bench_host_alloc(L->lse_elems * sizeof(float));
    if (!h->q || !h->kv || !h->out || !h->lse)
        return -1;
    host_fill(h->q, L->q_elems, d, seed);
    host_fill(h->kv, L->kv_elems, L->prob.kv_dtype, seed ^ 0x5bd1e995u);
    return 0;
}

static void host_tensors_free(host_tensors *h)
{
    free(h->q), free(h->kv), free(h->out), free(h->lse);
    memset(h, 0, sizeof *h);
}

/* Time a plan on host tensors: one untimed run, then reps by the same stopping rule as the GPU. */
static mlav_status cpu_time(const mlav_plan *plan, const mlav_tensors *t, const bench_opts *o,
                            bench_result *r)
{
    size_t wsb = mlav_plan_workspace_bytes(plan);
    void *ws = wsb ? bench_host_alloc(wsb) : NULL;
    if (wsb && !ws)
        return MLAV_ERR_OUT_OF_MEMORY;
    mlav_status s = mlav_run(plan, t, ws, wsb, NULL);
    double *us = s == MLAV_OK ? malloc((size_t)o->reps * sizeof(double)) : NULL;
    if (s == MLAV_OK && !us)
        s = MLAV_ERR_OUT_OF_MEMORY;
    int n = 0;
    double t0 = bench_now_s();
    while (s == MLAV_OK) {
        double a = bench_now_s();
        s = mlav_run(plan, t, ws, wsb, NULL);
        us[n++] = 1e6 * (bench_now_s() - a);
        if (n >= o->min_reps && (n >= o->reps || bench_now_s() - t0 >= o->max_seconds))
            break;
    }
    if (s == MLAV_OK) {
        r->time_us = median(us, n); /* sorts us */
        r->min_us = us[0];
        r->max_us = us[n - 1];
        r->reps = n;
    }
    free(us);
    free(ws);
    return s;
}

/* Time every backend on one point: the layout, the tensors where each kind of backend reads
 * them, a plan per backend (a fallback to another backend is "n/a", never timed under the wrong
 * name), the stopping rule, and the rates against the ceilings. */
int bench_measure_point(const bench_config *c, int index, const bench_opts *o,
                        mlav_context *const *ctx, const bench_ceilings *ceil, bench_result *row)
{
    int any_gpu = 0, any_cpu = 0, rc = 0;
    for (int b = 0; b < o->num_backends; b++) {
        any_gpu |= bench_is_gpu_backend(o->backends[b]);
        any_cpu |= !bench_is_gpu_backend(o->backends[b]);
    }
    bench_layout L;
    host_tensors ht = {0};
    if (bench_layout_make(&L, c, o) != 0) {
        bench_layout_free(&L);
        return 2;
    }
    const double flops = L.flops, bytes = L.bytes;
    uint64_t seed = o->seed + (uint64_t)index * 1000003u;
#ifndef MLAV_WITH_CUDA
    (void)any_gpu; /* GPU backends are refused before this without CUDA */
#endif
#ifdef MLAV_WITH_CUDA
    size_t es = mlav_dtype_size(c->dtype);
    mlav_tensors dt = {0};
    void *dq = NULL, *dkv = NULL, *dout = NULL, *dlse = NULL, *dpt = NULL, *dmask = NULL;
    if (any_gpu) {
        dq = bench_gpu_alloc(L.q_elems * es);
        dkv = bench_gpu_alloc(L.kv_bytes);
        dout = bench_gpu_alloc(L.out_elems * es);
        dlse = bench_gpu_alloc(L.lse_elems * sizeof(float));
        const size_t ptb = (size_t)c->B * (size_t)L.max_pages * sizeof(int32_t);
        dpt = bench_gpu_alloc(ptb);
        bench_gpu_fill_random(dq, L.q_elems, c->dtype, 1.0f, seed);
        bench_gpu_fill_random(dkv, L.kv_elems, c->kv_dtype, BENCH_KV_SCALE,
                              seed ^ 0x5bd1e995u);
        bench_gpu_upload(dpt, L.page_table, ptb);
        if (L.tree_mask) {
            size_t mb = (size_t)c->B * c->q_len * L.words * sizeof(uint32_t);
            dmask = bench_gpu_alloc(mb);
            bench_gpu_upload(dmask, L.tree_mask, mb);
        }
        /* the plain runs give an FP8 cache's scale as a host value (--engine: a device one) */
        dt = (mlav_tensors){.memory = MLAV_MEM_DEVICE, .q = dq, .kv_cache = dkv,
                            .num_pages = L.num_pages, .page_table = dpt, .tree_mask = dmask,
                            .out = dout, .lse = dlse, .kv_scale = BENCH_KV_SCALE};
    }
#endif
    mlav_tensors htt = {0};
    if (any_cpu) {
        if (host_tensors_make(&ht, &L, seed) != 0) {
            fprintf(stderr, "mlaverify bench: out of host memory\n");
            rc = 2;
            goto done;
        }
        htt = (mlav_tensors){.memory = MLAV_MEM_HOST, .q = ht.q, .kv_cache = ht.kv,
                             .num_pages = L.num_pages, .page_table = L.page_table,
                             .tree_mask = L.tree_mask, .out = ht.out, .lse = ht.lse,
                             .kv_scale = BENCH_KV_SCALE};
    }

    for (int b = 0; b < o->num_backends; b++) {
        bench_result *r = &row[b];
        mlav_plan *plan = NULL;
        r->status = mlav_plan_create(ctx[b], &L.prob, &plan);
        int gpu = bench_is_gpu_backend(o->backends[b]);
        if (r->status == MLAV_OK && mlav_plan_backend(plan) != o->backends[b])
            r->status = MLAV_ERR_UNSUPPORTED; /* never time a fallback under another name */
        if (r->status == MLAV_OK) {
            if (gpu) {
#ifdef MLAV_WITH_CUDA
                size_t wsb = mlav_plan_workspace_bytes(plan);
                void *ws = bench_gpu_alloc(wsb);
                bench_reps rp = {o->min_reps, o->reps, o->max_seconds, o->l2};
                bench_timing tm;
                r->status = bench_gpu_time(plan, &dt, ws, wsb, &rp, &tm);
                r->time_us = tm.median_us;
                r->min_us = tm.min_us;
                r->max_us = tm.max_us;
                r->reps = tm.reps;
                r->engine_status = MLAV_ERR_UNSUPPORTED;
                /* the exact plan's workspace stays until the engine rows' turns are timed */
                const bench_exact_run exact = {plan, &dt, ws, wsb};
                int erc = 0;
                if (r->status == MLAV_OK && o->engine > 0 && o->backends[b] == MLAV_BACKEND_CUDA)
                    erc = bench_measure_engine(c, &L, o, ctx[b], &dt, &exact, r);
                bench_gpu_free(ws);
                if (erc != 0) {
                    mlav_plan_free(plan);
                    rc = 2;
                    goto done;
                }
#endif
            } else {
                r->status = cpu_time(plan, &htt, o, r);
            }
        }
        if (r->status != MLAV_OK && r->status != MLAV_ERR_UNSUPPORTED) {
            fprintf(stderr,
                    "mlaverify bench: %s failed at B=%d H=%d q_len=%d prefix=%lld kv %s: %s: %s\n",
                    mlav_backend_name(o->backends[b]), c->B, c->H, c->q_len,
                    (long long)c->prefix, mlav_dtype_name(c->kv_dtype),
                    mlav_status_string(r->status), mlav_last_error(NULL));
            mlav_plan_free(plan);
            rc = 2;
            goto done;
        }
        if (r->status == MLAV_OK) {
            double sec = r->time_us * 1e-6;
            double mma = gpu ? ceil->mma_tflops * 1e12 : ceil->sgemm;
            double bw = gpu ? ceil->copy_gbps * 1e9 : ceil->cpu_bw;
            r->tflops = flops / sec / 1e12;
            r->gbps = bytes / sec / 1e9;
            r->frac_mma = mma > 0 ? flops / sec / mma : 0.0;
            r->frac_bw = bw > 0 ? bytes / sec / bw : 0.0;
        }
        mlav_plan_free(plan);
    }
done:
#ifdef MLAV_WITH_CUDA
    if (any_gpu) {
        bench_gpu_free(dq), bench_gpu_free(dkv), bench_gpu_free(dout), bench_gpu_free(dlse);
        bench_gpu_free(dpt), bench_gpu_free(dmask);
    }
#endif
    host_tensors_free(&ht);
    bench_layout_free(&L);
    return rc;
}
