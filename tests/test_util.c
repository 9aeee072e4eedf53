/* Shared test fixtures: see test_util.h. */
#include "test_util.h"
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/common/dtype.h"
#include "../src/cpu/oracle.h"
#include "../src/dispatch/validate.h"

#define TU_GUARD 64
#define TU_GUARD_BYTE 0xA5

uint64_t tu_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_uniform(uint64_t *x)
{
    return (double)(tu_next(x) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

uint64_t tu_seed(void)
{
    const char *env = getenv("MLAV_TEST_SEED");
    if (env && *env)
        return strtoull(env, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    return tu_next(&s);
}

double tu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *tu_xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) {
        fprintf(stderr, "test_util: out of memory (%zu x %zu)\n", n, sz);
        abort();
    }
    return p;
}

static void fill_parents(tu_tree tree, int32_t q_len, int32_t *parents, uint64_t *rng)
{
    for (int32_t i = 0; i < q_len; i++) {
        if (i == 0)
            parents[i] = -1;
        else if (tree == TU_CHAIN_NULL || tree == TU_CHAIN)
            parents[i] = i - 1;
        else if (tree == TU_BUSHY) {
            int32_t fan = i < 4 ? i : 4;
            parents[i] = (int32_t)(tu_next(rng) % (uint64_t)fan);
        } else {
            parents[i] = (tu_next(rng) % 3 == 0) ? (int32_t)(tu_next(rng) % (uint64_t)i) : i - 1;
        }
    }
}

void tu_poison(tu_problem *p)
{
    size_t esz = mlav_dtype_size(p->c.dtype);
    size_t out_bytes = p->out_elems * esz, lse_bytes = p->lse_elems * sizeof(float);
    memset(p->out_alloc, TU_GUARD_BYTE, TU_GUARD);
    memset(p->out_alloc + TU_GUARD + out_bytes, TU_GUARD_BYTE, TU_GUARD);
    memset(p->lse_alloc, TU_GUARD_BYTE, TU_GUARD);
    memset(p->lse_alloc + TU_GUARD + lse_bytes, TU_GUARD_BYTE, TU_GUARD);
    for (size_t k = 0; k < p->out_elems; k++)
        mlav_store_from_f32(p->out, (int)p->c.dtype, k, NAN);
    for (size_t k = 0; k < p->lse_elems; k++)
        p->lse[k] = NAN;
}

int tu_guards_ok(const tu_problem *p)
{
    size_t esz = mlav_dtype_size(p->c.dtype);
    size_t out_bytes = p->out_elems * esz, lse_bytes = p->lse_elems * sizeof(float);
    const unsigned char *g[4] = {p->out_alloc, p->out_alloc + TU_GUARD + out_bytes, p->lse_alloc,
                                 p->lse_alloc + TU_GUARD + lse_bytes};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < TU_GUARD; i++)
            if (g[k][i] != TU_GUARD_BYTE)
                return 0;
    return 1;
}

int tu_untouched(const tu_problem *p, char *msg, size_t msg_len)
{
    if (!tu_guards_ok(p)) {
        snprintf(msg, msg_len, "a guard canary around out or lse was overwritten");
        return 0;
    }
    for (size_t k = 0; k < p->out_elems; k++)
        if (!isnan(mlav_load_as_f32(p->out, (int)p->c.dtype, k))) {
            snprintf(msg, msg_len, "out[%zu] was written", k);
            return 0;
        }
    for (size_t k = 0; k < p->lse_elems; k++)
        if (!isnan(p->lse[k])) {
            snprintf(msg, msg_len, "lse[%zu] was written", k);
            return 0;
        }
    return 1;
}

/* Store KV value v as element i of the cache: divided by the scale and quantized for FP8 (the
 * way an engine's quantizer fills it), else rounded to the dtype. NaN is NaN (0x7f in FP8). */
static void kv_store(const tu_problem *p, size_t i, float v)
{
    const int fp8 = p->kv_dtype == MLAV_DTYPE_FP8_E4M3;
    if (fp8 && isnan(v))
        ((uint8_t *)p->kv)[i] = 0x7f;
    else
        mlav_store_from_f32(p->kv, (int)p->kv_dtype, i, fp8 ? v / p->kv_scale : v);
}

tu_problem *tu_make(const tu_case *c)
{
    tu_problem *p = tu_xcalloc(1, sizeof *p);
    p->c = *c;
    uint64_t rng = c->seed;
    const int32_t W = c->Dl + c->Dr, B = c->B, ps = c->page_size;
    const int dt = (int)c->dtype;
    p->kv_dtype = c->kv_dtype == MLAV_DTYPE_F32 ? c->dtype : c->kv_dtype;
    p->kv_esz = mlav_dtype_size(p->kv_dtype);
    p->kv_scale = 1.0f;
    if (p->kv_dtype == MLAV_DTYPE_FP8_E4M3) {
        /* its own stream, so that the other draws of a seed are those of a 16-bit case */
        uint64_t srng = c->seed ^ 0x6b765f7363616c65ull;
        p->kv_scale = c->kv_scale > 0.0f
                          ? c->kv_scale
                          : (float)exp2(-6.0 + 4.0 * (tu_uniform(&srng) + 1.0)); /* [2^-6, 2^2) */
        p->c.kv_scale = p->kv_scale;
    }

    int32_t max_q = 0, max_pages = 1;
    p->q_indptr[0] = 0;
    for (int32_t b = 0; b < B; b++) {
        p->q_indptr[b + 1] = p->q_indptr[b] + c->q_lens[b];
        p->kv_lens[b] = c->prefixes[b] + c->q_lens[b];
        if (c->q_lens[b] > max_q)
            max_q = c->q_lens[b];
        int32_t pages = (p->kv_lens[b] + ps - 1) / ps;
        if (pages + 1 > max_pages)
            max_pages = pages + 1; /* one spare column, filled with a poisoned page id */
    }
    const int32_t T = p->q_indptr[B];
    const int32_t words = mlav_tree_mask_words(max_q);

    /* pool: every request's pages, plus a few unused NaN pages, shuffled */
    int64_t used = 0;
    for (int32_t b = 0; b < B; b++)
        used += (p->kv_lens[b] + ps - 1) / ps;
    p->num_pages = used + 3;
    int32_t *perm = tu_xcalloc((size_t)p->num_pages, sizeof(int32_t));
    for (int64_t i = 0; i < p->num_pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = p->num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(tu_next(&rng) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    p->page_table = tu_xcalloc((size_t)B * (size_t)max_pages, sizeof(int32_t));
    int64_t next = 0;
    for (int32_t b = 0; b < B; b++) {
        int32_t pages = (p->kv_lens[b] + ps - 1) / ps;
        for (int32_t k = 0; k < max_pages; k++)
            p->page_table[(size_t)b * (size_t)max_pages + (size_t)k] =
                k < pages ? perm[next++] : perm[p->num_pages - 1]; /* unused slots: a NaN page */
    }

    size_t esz = mlav_dtype_size(c->dtype);
    p->kv_elems = (size_t)p->num_pages * (size_t)ps * (size_t)W;
    p->kv = tu_xcalloc(p->kv_elems, p->kv_esz);
    for (size_t k = 0; k < p->kv_elems; k++)
        kv_store(p, k, NAN);
    for (int32_t b = 0; b < B; b++)
        for (int32_t j = 0; j < p->kv_lens[b]; j++) {
            size_t row = (size_t)p->page_table[(size_t)b * (size_t)max_pages + (size_t)(j / ps)] *
                             (size_t)ps + (size_t)(j % ps);
            for (int32_t d = 0; d < W; d++)
                kv_store(p, row * (size_t)W + (size_t)d, (float)tu_uniform(&rng));
        }
    p->q_elems = (size_t)T * (size_t)c->H * (size_t)W;
    p->q = tu_xcalloc(p->q_elems, esz);
    for (size_t k = 0; k < p->q_elems; k++)
        mlav_store_from_f32(p->q, dt, k, (float)tu_uniform(&rng));

    p->parents = tu_xcalloc((size_t)(T ? T : 1), sizeof(int32_t));
    if (c->tree != TU_CHAIN_NULL)
        p->tree_mask = tu_xcalloc((size_t)(T ? T : 1) * (size_t)words, sizeof(uint32_t));
    for (int32_t b = 0; b < B; b++) {
        int32_t q_len = c->q_lens[b];
        if (q_len == 0)
            continue;
        int32_t *par = p->parents + p->q_indptr[b];
        fill_parents(c->tree, q_len, par, &rng);
        if (p->tree_mask &&
            mlav_tree_mask_from_parents(q_len, par, words,
                                        p->tree_mask + (size_t)p->q_indptr[b] * (size_t)words) !=
                MLAV_OK) {
            fprintf(stderr, "test_util: bad tree: %s\n", mlav_last_error(NULL));
            abort();
        }
    }

    p->out_elems = (size_t)T * (size_t)c->H * (size_t)c->Dl;
    p->lse_elems = (size_t)T * (size_t)c->H;
    p->out_alloc = tu_xcalloc(p->out_elems * esz + 2 * TU_GUARD, 1);
    p->lse_alloc = tu_xcalloc(p->lse_elems * sizeof(float) + 2 * TU_GUARD, 1);
    p->out = p->out_alloc + TU_GUARD;
    p->lse = (float *)(void *)(p->lse_alloc + TU_GUARD);
    tu_poison(p);

    p->prob = (mlav_problem){
        .num_heads = c->H,
        .d_latent = c->Dl,
        .d_rope = c->Dr,
        .softmax_scale = (float)(1.0 / sqrt(192.0)),
        .dtype = c->dtype,
        .page_size = ps,
        .batch = B,
        .q_indptr = p->q_indptr,
        .kv_lens = p->kv_lens,
        .max_pages = max_pages,
        .kv_dtype = c->kv_dtype,
    };
    free(perm);
    return p;
}

void tu_rising_scores(tu_problem *p, int32_t period)
{
    if (period < 1)
        return;
    const tu_case *c = &p->c;
    const int32_t W = c->Dl + c->Dr, ps = c->page_size;
    const double amp = 0.25;
    /* q . base has a standard deviation of amp * sqrt(W) / 3 (uniform q in [-1, 1)); 2.1 nats
     * per 16 keys is ~3 log2 units */
    const double step = 2.1 / (16.0 * (double)p->prob.softmax_scale * amp * sqrt((double)W) / 3.0);
    uint64_t rng = c->seed ^ 0x5eed0f12a3b4c5d6ull;
    double *base = tu_xcalloc((size_t)W, sizeof(double));
    for (int32_t d = 0; d < W; d++)
        base[d] = amp * tu_uniform(&rng);
    for (int32_t b = 0; b < c->B; b++)
        for (int32_t j = 0; j < p->kv_lens[b]; j++) {
            const size_t row =
                (size_t)p->page_table[(size_t)b * (size_t)p->prob.max_pages + (size_t)(j / ps)] *
                    (size_t)ps +
                (size_t)(j % ps);
            const double ramp = 1.0 + (double)(j % period) * step;
            for (int32_t d = 0; d < W; d++)
                kv_store(p, row * (size_t)W + (size_t)d,
                         (float)(ramp * base[d] + amp * tu_uniform(&rng)));
        }
    free(base);
}

void tu_scale_magnitudes(tu_problem *p, int e)
{
    const int dt = (int)p->c.dtype, kdt = (int)p->kv_dtype;
    const float up = ldexpf(1.0f, e), down = ldexpf(1.0f, -e);
    if (p->kv_dtype == MLAV_DTYPE_FP8_E4M3) { /* e4m3 has no room for 2^100: the scale moves */
        p->kv_scale *= up;
        p->c.kv_scale = p->kv_scale;
    } else {
        for (size_t i = 0; i < p->kv_elems; i++) /* the NaN pages stay NaN */
            mlav_store_from_f32(p->kv, kdt, i, mlav_load_as_f32(p->kv, kdt, i) * up);
    }
    for (size_t i = 0; i < p->q_elems; i++)
        mlav_store_from_f32(p->q, dt, i, mlav_load_as_f32(p->q, dt, i) * down);
}

void tu_free(tu_problem *p)
{
    if (!p)
        return;
    free(p->parents);
    free(p->page_table);
    free(p->tree_mask);
    free(p->q);
    free(p->kv);
    free(p->out_alloc);
    free(p->lse_alloc);
    free(p->ref_out);
    free(p->ref_lse);
    free(p);
}

mlav_tensors tu_tensors(const tu_problem *p)
{
    return (mlav_tensors){
        .memory = MLAV_MEM_HOST,
        .q = p->q,
        .kv_cache = p->kv,
        .num_pages = p->num_pages,
        .page_table = p->page_table,
        .tree_mask = p->tree_mask,
        .out = p->out,
        .lse = p->lse,
        .kv_scale = p->c.kv_scale_ptr ? 0.0f : p->kv_scale,
        .kv_scale_ptr = p->c.kv_scale_ptr ? &p->kv_scale : NULL,
    };
}

void tu_reference(tu_problem *p)
{
    mlav_problem_info info;
    if (mlav_problem_validate(&p->prob, &info) != MLAV_OK) {
        fprintf(stderr, "test_util: invalid test problem: %s\n", mlav_last_error(NULL));
        abort();
    }
    free(p->ref_out);
    free(p->ref_lse);
    p->ref_out = tu_xcalloc(p->out_elems, sizeof(double));
    p->ref_lse = tu_xcalloc(p->lse_elems, sizeof(double));
    mlav_tensors t = tu_tensors(p);
    if (mlav_oracle_compute(&info, &t, p->ref_out, p->ref_lse) != MLAV_OK) {
        fprintf(stderr, "test_util: oracle failed: %s\n", mlav_last_error(NULL));
        abort();
    }
    mlav_problem_info_free(&info);
}

double tu_out_tol(mlav_dtype d)
{
    return d == MLAV_DTYPE_F32 ? 1e-5 : 5e-3;
}

double tu_lse_tol(mlav_dtype d)
{
    return d == MLAV_DTYPE_F32 ? 1e-5 : 1e-3;
}

/* The largest |lse - the oracle's| over the finite ones, and where (*at); -1 and the index of the
 * first row whose NaN or Inf differs from the oracle's, if one does. */
static double lse_worst(const tu_problem *p, size_t *at)
{
    double worst = 0.0;
    *at = 0;
    for (size_t k = 0; k < p->lse_elems; k++) {
        double got = p->lse[k], ref = p->ref_lse[k];
        if (isnan(got) != isnan(ref) || (isinf(ref) && got != ref) || (isinf(got) && got != ref)) {
            *at = k;
            return -1.0;
        }
        if (isnan(ref) || isinf(ref))
            continue;
        if (fabs(got - ref) > worst) {
            worst = fabs(got - ref);
            *at = k;
        }
    }
    return worst;
}

int tu_compare(const tu_problem *p, double out_tol, double lse_tol, char *msg, size_t msg_len)
{
    const int dt = (int)p->c.dtype;
    const size_t dl = (size_t)p->c.Dl;
    double num = 0.0, den = 0.0, far = -1.0;
    size_t far_k = 0;
    for (size_t k = 0; k < p->out_elems; k++) {
        double got = mlav_load_as_f32(p->out, dt, k), ref = p->ref_out[k];
        if (isnan(got) != isnan(ref)) {
            snprintf(msg, msg_len, "out[%zu] (row %zu, col %zu) = %g but the oracle says %g", k,
                     k / dl, k % dl, got, ref);
            return 0;
        }
        if (isnan(ref))
            continue;
        num += (got - ref) * (got - ref);
        den += ref * ref;
        if (!(fabs(got - ref) <= far)) {
            far = fabs(got - ref);
            far_k = k;
        }
    }
    double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    size_t lk;
    double worst = lse_worst(p, &lk);
    if (!(rel <= out_tol)) {
        /* where, and whether lse agrees: which of the scores and the values went wrong */
        snprintf(msg, msg_len,
                 "out rel-L2 error %.3g exceeds %.3g (largest at row %zu, col %zu: %g, the "
                 "oracle %g; lse max abs error %.3g at row %zu%s)",
                 rel, out_tol, far_k / dl, far_k % dl, mlav_load_as_f32(p->out, dt, far_k),
                 p->ref_out[far_k], worst, lk, worst < 0.0 ? ": a NaN or Inf differs" : "");
        return 0;
    }
    if (worst < 0.0) {
        snprintf(msg, msg_len, "lse[%zu] = %g but the oracle says %g", lk, p->lse[lk],
                 p->ref_lse[lk]);
        return 0;
    }
    if (!(worst <= lse_tol)) {
        snprintf(msg, msg_len, "lse max abs error %.3g exceeds %.3g (row %zu: %g, the oracle %g)",
                 worst, lse_tol, lk, p->lse[lk], p->ref_lse[lk]);
        return 0;
    }
    if (!tu_guards_ok(p)) {
        snprintf(msg, msg_len, "a guard canary around out or lse was overwritten");
        return 0;
    }
    snprintf(msg, msg_len, "out rel-L2 %.3g, lse max abs %.3g", rel, worst);
    return 1;
}

void tu_case_name(const tu_case *c, char *buf, size_t len)
{
    static const char *trees[] = {"chain(null)", "chain", "bushy", "deep"};
    int n = snprintf(buf, len, "h=%d,dims=%d+%d,q=", c->H, c->Dl, c->Dr);
    for (int32_t b = 0; b < c->B && n > 0 && (size_t)n < len; b++)
        n += snprintf(buf + n, len - (size_t)n, "%s%d", b ? "+" : "", c->q_lens[b]);
    n += snprintf(buf + n, len - (size_t)n, ",prefix=");
    for (int32_t b = 0; b < c->B && n > 0 && (size_t)n < len; b++)
        n += snprintf(buf + n, len - (size_t)n, "%s%d", b ? "+" : "", c->prefixes[b]);
    n += snprintf(buf + n, len - (size_t)n, ",page=%d,%s,%s", c->page_size,
                  mlav_dtype_name(c->dtype), trees[c->tree]);
    const int fp8 = c->kv_dtype == MLAV_DTYPE_FP8_E4M3;
    if (fp8 && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ",kv=fp8_e4m3%s",
                      c->kv_scale_ptr ? ",kv_scale_ptr" : "");
    if (n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ",seed=0x%llx", (unsigned long long)c->seed);
    if (fp8 && c->kv_scale > 0.0f && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ",kv_scale=%.6g", (double)c->kv_scale);
}

mlav_context *tu_context_or_skip(mlav_backend b)
{
    if (!mlav_backend_compiled(b)) {
        print_message("%s is not compiled in: skipped\n", mlav_backend_name(b));
        skip();
    }
    mlav_context *ctx = NULL;
    const mlav_status s = mlav_context_create(&ctx, b);
    if (s == MLAV_ERR_NO_DEVICE) {
        print_message("%s: %s: skipped\n", mlav_backend_name(b), mlav_last_error(NULL));
        skip();
    }
    if (s != MLAV_OK)
        fail_msg("mlav_context_create(%s): %s: %s", mlav_backend_name(b), mlav_status_string(s),
                 mlav_last_error(NULL));
    return ctx;
}

void tu_require_device(void)
{
    if (mlav_cuda_device_count() == 0) {
        print_message("no CUDA device of compute capability >= 8.0: skipped\n");
        skip();
    }
}

uint64_t tu_seeded(const char *what)
{
    const uint64_t seed = tu_seed();
    print_message("  %s: seed 0x%016llx (MLAV_TEST_SEED=0x%016llx reruns it)\n", what,
                  (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

int tu_no_device_skip(int rc)
{
    if (rc == 0 && mlav_cuda_device_count() == 0) {
        printf("no CUDA device of cc >= 8.0: reported to ctest as skipped (exit 77)\n");
        return 77;
    }
    return rc;
}
