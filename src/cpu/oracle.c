/* The fp64 oracle and the `reference` backend built on it. Every score, weight and sum is a
 * double; the only rounding is the final store to the output dtype. An FP8 KV element is
 * dequantized exactly: double(e4m3) x double(kv_scale) (4 by 24 significant bits fit a double). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/dtype.h"
#include "oracle.h"

#include "../dispatch/backend.h" /* the reference backend's table */

/* Keys scored at once: the oracle makes an online softmax over blocks of this many keys, so
 * its memory is O(block + W) doubles per thread whatever kv_len is (a two-pass softmax over a
 * kv_len-long score row took 16 GiB per thread at kv_len INT32_MAX). */
#define ORACLE_BLOCK 1024

/* KV element i's value in double: the stored element times kv_scale (1 unless FP8). */
static double kv_value(const void *kv, int kdt, size_t i, double kv_scale)
{
    return (double)mlav_load_as_f32(kv, kdt, i) * kv_scale;
}

mlav_status mlav_oracle_compute(const mlav_problem_info *p, const mlav_tensors *t, double *out64,
                                double *lse64)
{
    const int32_t H = p->H, Dl = p->Dl, W = p->W;
    const int dt = (int)p->dtype, kdt = (int)p->kv_dtype;
    float kv_scale_f;
    mlav_status status = mlav_kv_scale_host(p, t, &kv_scale_f); /* 1 for a 16/32-bit cache */
    if (status != MLAV_OK)
        return status;
    const double kv_scale = (double)kv_scale_f;

#pragma omp parallel
    {
        double *s = malloc(sizeof(double) * ORACLE_BLOCK);
        double *q = malloc(sizeof(double) * (size_t)W);
        if (!s || !q) {
#pragma omp atomic write
            status = MLAV_ERR_OUT_OF_MEMORY;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t row = 0; row < (int64_t)p->T * H; row++) {
            if (!s || !q)
                continue;
            int32_t tok = (int32_t)(row / H);
            int32_t b = 0;
            while (p->q_indptr[b + 1] <= tok)
                b++;
            int32_t i = tok - p->q_indptr[b];
            int64_t kv_len = p->kv_lens[b];
            const int32_t *pt_row = kv_len > 0 ? mlav_page_row(p, t, b) : NULL;
            for (int32_t d = 0; d < W; d++)
                q[d] = mlav_load_as_f32(t->q, dt, (size_t)row * (size_t)W + (size_t)d);

            /* online softmax: m the running max, sum and o relative to exp(-m) */
            double *o = out64 + (size_t)row * (size_t)Dl;
            for (int32_t d = 0; d < Dl; d++)
                o[d] = 0.0;
            double m = -INFINITY, sum = 0.0;
            int nan = 0;
            for (int64_t j0 = 0; j0 < kv_len && !nan; j0 += ORACLE_BLOCK) {
                int64_t n = kv_len - j0 < ORACLE_BLOCK ? kv_len - j0 : ORACLE_BLOCK;
                double mb = -INFINITY;
                for (int64_t c = 0; c < n; c++) {
                    int64_t j = j0 + c;
                    if (!mlav_visible(p, t->tree_mask, b, i, j)) {
                        s[c] = -INFINITY;
                        continue;
                    }
                    size_t base = mlav_kv_row_index(p, pt_row, j) * (size_t)W;
                    double acc = 0.0;
                    for (int32_t d = 0; d < W; d++)
                        acc += q[d] * kv_value(t->kv_cache, kdt, base + (size_t)d, kv_scale);
                    s[c] = acc * (double)p->scale;
                    if (s[c] != s[c])
                        nan = 1;
                    else if (s[c] > mb)
                        mb = s[c];
                }
                if (nan || mb == INFINITY) { /* the row's result is NaN: stop here */
                    nan = 1;
                    break;
                }
                if (mb == -INFINITY)
                    continue; /* nothing visible in this block */
                if (mb > m) {
                    /* rescale what was summed so far to the new max (nothing yet: alpha 0) */
                    double alpha = m == -INFINITY ? 0.0 : exp(m - mb);
                    sum *= alpha;
                    for (int32_t d = 0; d < Dl; d++)
                        o[d] *= alpha;
                    m = mb;
                }
                for (int64_t c = 0; c < n; c++) {
                    if (s[c] == -INFINITY)
                        continue;
                    double w = exp(s[c] - m);
                    sum += w;
                    size_t base = mlav_kv_row_index(p, pt_row, j0 + c) * (size_t)W;
                    for (int32_t d = 0; d < Dl; d++)
                        o[d] += w * kv_value(t->kv_cache, kdt, base + (size_t)d, kv_scale);
                }
            }
            if (nan) {
                for (int32_t d = 0; d < Dl; d++)
                    o[d] = NAN;
                if (lse64)
                    lse64[row] = NAN;
                continue;
            }
            if (m == -INFINITY) { /* no visible key */
                if (lse64)
                    lse64[row] = -INFINITY;
                continue;
            }
            for (int32_t d = 0; d < Dl; d++)
                o[d] /= sum;
            if (lse64)
                lse64[row] = m + log(sum);
        }
        free(s);
        free(q);
    }
    if (status != MLAV_OK)
        return mlav_set_error(status, "out of host memory in the oracle");
    return MLAV_OK;
}

/* ---- the `reference` backend ----------------------------------------------------------- */

static mlav_status ref_available(void)
{
    return MLAV_OK;
}

static mlav_status ref_plan(const mlav_problem_info *p, void **state, size_t *ws)
{
    (void)p;
    *state = NULL;
    *ws = 0;
    return MLAV_OK;
}

static mlav_status ref_run(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                           void *workspace, size_t workspace_bytes, void *stream)
{
    (void)state, (void)workspace, (void)workspace_bytes, (void)stream;
    if (t->memory != MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the reference backend runs on host memory only");
    size_t rows = (size_t)p->T * (size_t)p->H;
    double *out64 = malloc(sizeof(double) * (rows * (size_t)p->Dl + 1));
    double *lse64 = malloc(sizeof(double) * (rows + 1));
    if (!out64 || !lse64) {
        free(out64);
        free(lse64);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for the oracle");
    }
    mlav_status s = mlav_oracle_compute(p, t, out64, lse64);
    if (s == MLAV_OK) {
        for (size_t k = 0; k < rows * (size_t)p->Dl; k++)
            mlav_store_from_f32(t->out, (int)p->dtype, k, (float)out64[k]);
        if (t->lse)
            for (size_t k = 0; k < rows; k++)
                t->lse[k] = (float)lse64[k];
    }
    free(out64);
    free(lse64);
    return s;
}

static void ref_plan_free(void *state)
{
    (void)state;
}

const mlav_backend_ops mlav_backend_reference_ops = {
    .name = "reference",
    .id = MLAV_BACKEND_REFERENCE,
    .workspace_memory = MLAV_MEM_HOST,
    .available = ref_available,
    .plan = ref_plan,
    .run = ref_run,
    .plan_free = ref_plan_free,
    .workspace_alloc = mlav_host_workspace_alloc,
    .workspace_free = mlav_host_workspace_free,
};
