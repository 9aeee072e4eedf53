/* The fp64 oracle and the `reference` backend built on it. Every score, weight and sum is a
 * double; the only rounding is the final store to the output dtype. An FP8 KV element is
 * dequantized exactly: double(e4m3) x double(kv_scale) (4 by 24 significant bits fit a double). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../common/dtype.h"
#include "oracle.h"

#include "../dispatch/backend.h" /* the reference backend's table */

/* Keys scored at once: the oracle makes an online softmax over blocks of this many keys, so
 * its memory is O(block + W) doubles per thread whatever kv_len is (a two-pass softmax over a
 * kv_len-long score row took 16 GiB per thread at kv_len INT32_MAX). */
#define ORACLE_BLOCK 1024

/* Keys taken together by the loops below: the scores of ORACLE_KEYS keys are four independent
 * chains of adds side by side, each summed over d in order as it would be alone (the same value
 * to the bit), and their values are added to o in key order for every d (the same sums too). */
#define ORACLE_KEYS 4

/* The two loops are written once and instantiated per cache dtype (ORACLE_BY_DTYPE): with kdt a
 * constant, mlav_load_as_f32's dtype branch leaves the inner loops (1.4x on a BF16 cache, where
 * the keys four at a time alone gave 1.07x). */
#if defined(__GNUC__)
#define ORACLE_INLINE static inline __attribute__((always_inline))
#else
#define ORACLE_INLINE static inline
#endif
#define ORACLE_BY_DTYPE(kdt, call)                                                             \
    switch (kdt) {                                                                             \
    case MLAV_DTYPE_F32: call(MLAV_DTYPE_F32); break;                                          \
    case MLAV_DTYPE_BF16: call(MLAV_DTYPE_BF16); break;                                        \
    case MLAV_DTYPE_F16: call(MLAV_DTYPE_F16); break;                                          \
    case MLAV_DTYPE_FP8_E4M3: call(MLAV_DTYPE_FP8_E4M3); break;                                \
    default: call(kdt); break; /* a dtype without its own instance: the same loops, branching */ \
    }

/* KV element i's value in double: the stored element times kv_scale (1 unless FP8). An FP8
 * cache's come from `e4m3`, each byte's value times kv_scale (the same double: its branches on
 * random bytes cost more than the load). */
ORACLE_INLINE double kv_value(const void *kv, int kdt, size_t i, double kv_scale,
                              const double *e4m3)
{
    if (kdt == MLAV_DTYPE_FP8_E4M3)
        return e4m3[((const uint8_t *)kv)[i]];
    return (double)mlav_load_as_f32(kv, kdt, i) * kv_scale;
}

/* acc[k] = q . KV row at base[k] (W elements, summed over d in order) for k < n <= ORACLE_KEYS. */
ORACLE_INLINE void dot_keys_of(const double *q, const void *kv, int kdt, const size_t *base,
                               int n, int32_t W, double kv_scale, const double *e4m3,
                               double *acc)
{
    if (n == ORACLE_KEYS) {
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        for (int32_t d = 0; d < W; d++) {
            a0 += q[d] * kv_value(kv, kdt, base[0] + (size_t)d, kv_scale, e4m3);
            a1 += q[d] * kv_value(kv, kdt, base[1] + (size_t)d, kv_scale, e4m3);
            a2 += q[d] * kv_value(kv, kdt, base[2] + (size_t)d, kv_scale, e4m3);
            a3 += q[d] * kv_value(kv, kdt, base[3] + (size_t)d, kv_scale, e4m3);
        }
        acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
        return;
    }
    for (int k = 0; k < n; k++) {
        double a = 0.0;
        for (int32_t d = 0; d < W; d++)
            a += q[d] * kv_value(kv, kdt, base[k] + (size_t)d, kv_scale, e4m3);
        acc[k] = a;
    }
}

/* o[d] += w[k] x the value row at base[k] (its first Dl elements), k = 0 .. n - 1 in order. */
ORACLE_INLINE void add_values_of(double *o, const void *kv, int kdt, const size_t *base,
                                 const double *w, int n, int32_t Dl, double kv_scale,
                                 const double *e4m3)
{
    for (int32_t d = 0; d < Dl; d++) {
        double od = o[d];
        for (int k = 0; k < n; k++)
            od += w[k] * kv_value(kv, kdt, base[k] + (size_t)d, kv_scale, e4m3);
        o[d] = od;
    }
}

static void dot_keys(const double *q, const void *kv, int kdt, const size_t *base, int n,
                     int32_t W, double kv_scale, const double *e4m3, double *acc)
{
#define DOT_KEYS(K) dot_keys_of(q, kv, K, base, n, W, kv_scale, e4m3, acc)
    ORACLE_BY_DTYPE(kdt, DOT_KEYS)
#undef DOT_KEYS
}

static void add_values(double *o, const void *kv, int kdt, const size_t *base, const double *w,
                       int n, int32_t Dl, double kv_scale, const double *e4m3)
{
#define ADD_VALUES(K) add_values_of(o, kv, K, base, w, n, Dl, kv_scale, e4m3)
    ORACLE_BY_DTYPE(kdt, ADD_VALUES)
#undef ADD_VALUES
}

/* Doubles of one thread's scratch: a block of scores, then the query row. */
static size_t oracle_thread_doubles(const mlav_problem_info *p)
{
    return ORACLE_BLOCK + (size_t)p->W;
}

/* The oracle on `nthreads` threads (0: OpenMP's default); `scratch` holds nthreads x
 * oracle_thread_doubles, or is NULL, and then each thread allocates its own. */
static mlav_status oracle_compute(const mlav_problem_info *p, const mlav_tensors *t,
                                  double *out64, double *lse64, double *scratch, int nthreads)
{
    const int32_t H = p->H, Dl = p->Dl, W = p->W;
    const int dt = (int)p->dtype, kdt = (int)p->kv_dtype;
    float kv_scale_f;
    mlav_status status = mlav_kv_scale_host(p, t, &kv_scale_f); /* 1 for a 16/32-bit cache */
    if (status != MLAV_OK)
        return status;
    const double kv_scale = (double)kv_scale_f;
    double e4m3[256];
    for (int v = 0; v < 256; v++)
        e4m3[v] = (double)mlav_e4m3_to_f32((uint8_t)v) * kv_scale;

#pragma omp parallel num_threads(nthreads > 0 ? nthreads : omp_get_max_threads())
    {
        double *mine = scratch ? scratch + (size_t)omp_get_thread_num() * oracle_thread_doubles(p)
                               : NULL;
        double *s = mine ? mine : malloc(sizeof(double) * ORACLE_BLOCK);
        double *q = mine ? mine + ORACLE_BLOCK : malloc(sizeof(double) * (size_t)W);
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
            int64_t kv_len = mlav_shard_rows(p->shard, p->kv_lens[b]); /* the rows read */
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
                size_t kb[ORACLE_KEYS];
                int64_t kc[ORACLE_KEYS];
                int nk = 0;
                for (int64_t c = 0; c < n; c++) {
                    int64_t j = j0 + c;
                    if (mlav_visible(p, t->tree_mask, b, i, j)) {
                        kc[nk] = c;
                        kb[nk++] = mlav_kv_row_index(p, pt_row, j) * (size_t)W;
                    } else {
                        s[c] = -INFINITY;
                    }
                    if (nk < ORACLE_KEYS && c + 1 < n)
                        continue;
                    double acc[ORACLE_KEYS];
                    dot_keys(q, t->kv_cache, kdt, kb, nk, W, kv_scale, e4m3, acc);
                    for (int k = 0; k < nk; k++) {
                        const double sc = acc[k] * (double)p->scale;
                        s[kc[k]] = sc;
                        if (sc != sc)
                            nan = 1;
                        else if (sc > mb)
                            mb = sc;
                    }
                    nk = 0;
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
                double vw[ORACLE_KEYS];
                size_t vb[ORACLE_KEYS];
                int nv = 0;
                for (int64_t c = 0; c < n; c++) {
                    if (s[c] != -INFINITY) {
                        const double w = exp(s[c] - m);
                        sum += w;
                        vw[nv] = w;
                        vb[nv++] = mlav_kv_row_index(p, pt_row, j0 + c) * (size_t)W;
                    }
                    if (nv == ORACLE_KEYS || (nv > 0 && c + 1 == n)) {
                        add_values(o, t->kv_cache, kdt, vb, vw, nv, Dl, kv_scale, e4m3);
                        nv = 0;
                    }
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
        if (!mine) {
            free(s);
            free(q);
        }
    }
    if (status != MLAV_OK)
        return mlav_set_error(status, "out of host memory in the oracle");
    return MLAV_OK;
}

mlav_status mlav_oracle_compute(const mlav_problem_info *p, const mlav_tensors *t, double *out64,
                                double *lse64)
{
    return oracle_compute(p, t, out64, lse64, NULL, 0);
}

/* ---- the `reference` backend ----------------------------------------------------------- */

/* Its plan is the most rows a run computes and the threads it runs on; its workspace holds the
 * fp64 results of those rows and each thread's scratch, so that a run allocates nothing. A plan
 * for limits has no schedule: dispatch keeps the step's lengths in the workspace. */
typedef struct ref_state {
    int nthreads;
    size_t rows;    /* most (token, head) rows of a run */
} ref_state;

static size_t ref_out_doubles(const ref_state *st, int32_t Dl)
{
    return st->rows * (size_t)Dl + 1;
}

static mlav_status ref_available(void)
{
    return MLAV_OK;
}

static mlav_status ref_plan(const mlav_problem_info *p, const mlav_limits *lim, uint64_t owner,
                            void **state, size_t *ws)
{
    (void)owner;
    ref_state *st = calloc(1, sizeof *st);
    if (!st)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a reference plan");
    st->nthreads = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
    st->rows = (size_t)lim->max_tokens * (size_t)p->H;
    *state = st;
    *ws = sizeof(double) * (ref_out_doubles(st, p->Dl) + st->rows + 1 +
                            (size_t)st->nthreads * oracle_thread_doubles(p));
    return MLAV_OK;
}

static mlav_status ref_update(const mlav_problem_info *shape, const void *state,
                              const mlav_lengths *len, void *workspace, size_t workspace_bytes,
                              void *stream)
{
    /* the step is its lengths, which dispatch keeps in the workspace's step region */
    (void)shape, (void)state, (void)len, (void)workspace, (void)workspace_bytes, (void)stream;
    return MLAV_OK;
}

static mlav_status ref_run(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                           void *workspace, size_t workspace_bytes, void *stream)
{
    (void)stream;
    const ref_state *st = state;
    if (t->memory != MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the reference backend runs on host memory only");
    const size_t rows = (size_t)p->T * (size_t)p->H;
    if (rows > st->rows || !workspace ||
        workspace_bytes < sizeof(double) * (ref_out_doubles(st, p->Dl) + st->rows + 1 +
                                            (size_t)st->nthreads * oracle_thread_doubles(p)))
        return mlav_set_error(MLAV_ERR_INTERNAL, "the reference run's %zu rows or workspace do "
                                                 "not fit its plan", rows);
    double *out64 = workspace;
    double *lse64 = out64 + ref_out_doubles(st, p->Dl);
    double *scratch = lse64 + st->rows + 1;
    mlav_status s = oracle_compute(p, t, out64, lse64, scratch, st->nthreads);
    if (s == MLAV_OK) {
        for (size_t k = 0; k < rows * (size_t)p->Dl; k++)
            mlav_store_from_f32(t->out, (int)p->dtype, k, (float)out64[k]);
        if (t->lse)
            for (size_t k = 0; k < rows; k++)
                t->lse[k] = (float)lse64[k];
    }
    return s;
}

static void ref_free(void *state)
{
    free(state);
}

const mlav_backend_ops mlav_backend_reference_ops = {
    .name = "reference",
    .id = MLAV_BACKEND_REFERENCE,
    .workspace_memory = MLAV_MEM_HOST,
    .available = ref_available,
    .plan = ref_plan,
    .update = ref_update,
    .run = ref_run,
    .free = ref_free,
    .workspace_alloc = mlav_host_workspace_alloc,
    .workspace_free = mlav_host_workspace_free,
};
