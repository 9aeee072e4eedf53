/* The engine loop of the engine-step tests (steps_fixture.h). */
#include "steps_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/dtype.h"
#include "../src/cpu/oracle.h"
#include "../src/dispatch/validate.h"
#include "test_util.h"

static int32_t draw(sf_engine *e, int32_t lo, int32_t hi) /* [lo, hi] */
{
    return lo + (int32_t)(tu_next(&e->rng) % (uint64_t)(hi - lo + 1));
}

/* A scale in [2^-6, 2^2), log-uniform. */
static float draw_kv_scale(sf_engine *e)
{
    return (float)exp2(-6.0 + 4.0 * (tu_uniform(&e->rng) + 1.0));
}

static int fp8(const sf_engine *e)
{
    return e->kv_dtype == MLAV_DTYPE_FP8_E4M3;
}

sf_engine *sf_make(const mlav_limits *lim, int32_t H, int32_t Dl, int32_t Dr, int32_t page_size,
                   mlav_dtype dtype, mlav_dtype kv_dtype, int32_t layers, uint64_t seed)
{
    sf_engine *e = tu_xcalloc(1, sizeof *e);
    e->lim = *lim;
    e->H = H;
    e->Dl = Dl;
    e->Dr = Dr;
    e->W = Dl + Dr;
    e->page_size = page_size;
    e->max_pages = (lim->max_kv_len + page_size - 1) / page_size;
    e->words = mlav_tree_mask_words(lim->max_q_len);
    e->layers = layers;
    e->dtype = dtype;
    e->kv_dtype = kv_dtype == MLAV_DTYPE_F32 ? dtype : kv_dtype;
    e->scale = 1.0f / sqrtf((float)(e->W > 192 ? 192 : e->W));
    e->num_pages = (int64_t)lim->max_batch * e->max_pages + 3;
    e->esz = mlav_dtype_size(dtype);
    e->kv_esz = mlav_dtype_size(e->kv_dtype);
    e->q_bytes = (size_t)lim->max_tokens * H * e->W * e->esz;
    e->kv_bytes = (size_t)e->num_pages * page_size * e->W * e->kv_esz;
    e->out_bytes = (size_t)lim->max_tokens * H * Dl * e->esz;
    e->lse_bytes = (size_t)lim->max_tokens * H * sizeof(float);
    e->pt_bytes = (size_t)lim->max_batch * e->max_pages * sizeof(int32_t);
    e->mask_bytes = (size_t)lim->max_tokens * e->words * sizeof(uint32_t);
    for (int l = 0; l < layers; l++) {
        e->q[l] = tu_xcalloc(1, e->q_bytes);
        e->kv[l] = tu_xcalloc(1, e->kv_bytes);
        e->out[l] = tu_xcalloc(1, e->out_bytes);
        e->lse[l] = tu_xcalloc(1, e->lse_bytes);
    }
    e->page_table = tu_xcalloc(1, e->pt_bytes);
    e->mask = tu_xcalloc(1, e->mask_bytes);
    e->q_indptr = tu_xcalloc((size_t)lim->max_batch + 1, sizeof(int32_t));
    e->kv_lens = tu_xcalloc((size_t)lim->max_batch, sizeof(int32_t));
    e->prefix = tu_xcalloc((size_t)lim->max_batch, sizeof(int32_t));
    e->parents = tu_xcalloc((size_t)lim->max_tokens, sizeof(int32_t));
    e->page_owner = tu_xcalloc((size_t)e->num_pages, sizeof(int32_t));
    e->rng = seed;
    e->live = 0;
    for (int l = 0; l < layers; l++)
        e->kv_scale[l] = fp8(e) ? draw_kv_scale(e) : 1.0f;
    return e;
}

void sf_free(sf_engine *e)
{
    if (!e)
        return;
    for (int l = 0; l < e->layers; l++) {
        free(e->q[l]);
        free(e->kv[l]);
        free(e->out[l]);
        free(e->lse[l]);
    }
    free(e->page_table);
    free(e->mask);
    free(e->q_indptr);
    free(e->kv_lens);
    free(e->prefix);
    free(e->parents);
    free(e->page_owner);
    free(e);
}

static void fill(sf_engine *e, void *buf, size_t elems, float amp)
{
    for (size_t i = 0; i < elems; i++)
        mlav_store_from_f32(buf, e->dtype, i, (float)tu_uniform(&e->rng) * amp);
}

static void fill_step(sf_engine *e, int32_t live, int pad);

void sf_step(sf_engine *e, int pad)
{
    const mlav_limits *L = &e->lim;
    /* the live requests accept part of their last draft, some finish, new ones arrive */
    int32_t live = 0;
    for (int32_t b = 0; b < e->live; b++) {
        const int32_t q = e->q_indptr[b + 1] - e->q_indptr[b];
        int32_t p = e->prefix[b] + (q > 0 ? draw(e, 1, q) : 0);
        if (draw(e, 0, 9) == 0 || p + L->max_q_len > L->max_kv_len)
            continue; /* finished */
        e->prefix[live++] = p;
    }
    while (live < L->max_batch && draw(e, 0, 2) != 0) {
        /* mostly short, sometimes long prefixes (several splits), sometimes none */
        const int32_t room = L->max_kv_len - L->max_q_len;
        const int32_t kind = draw(e, 0, 3);
        e->prefix[live++] = kind == 0 ? 0 : kind == 1 ? draw(e, 0, room) : draw(e, 0, room / 8);
    }
    if (live == 0)
        e->prefix[live++] = draw(e, 0, L->max_kv_len - L->max_q_len);
    fill_step(e, live, pad);
}

void sf_step_prefixes(sf_engine *e, int32_t live, const int32_t *prefix, int pad)
{
    for (int32_t b = 0; b < live; b++)
        e->prefix[b] = prefix[b];
    fill_step(e, live, pad);
}

/* The step of `live` requests of prefixes e->prefix: drafts, trees, pages and values. */
static void fill_step(sf_engine *e, int32_t live, int pad)
{
    const mlav_limits *L = &e->lim;
    e->live = live;
    e->batch = pad ? L->max_batch : live;

    /* drafts within max_q_len and, all together, max_tokens */
    int32_t t = 0;
    e->q_indptr[0] = 0;
    for (int32_t b = 0; b < e->batch; b++) {
        int32_t q = 0;
        if (b < live) {
            const int32_t left = L->max_tokens - t - (live - 1 - b); /* one each for the rest */
            q = draw(e, 1, left < L->max_q_len ? left : L->max_q_len);
            if (e->q_all > 0)
                q = e->q_all < left ? e->q_all : left;
            if (q < 1)
                q = 1;
        }
        e->kv_lens[b] = b < live ? e->prefix[b] + q : 0;
        e->q_indptr[b + 1] = (t += q);
    }
    /* a fresh tree (or chain) per request */
    memset(e->mask, 0, e->mask_bytes);
    for (int32_t b = 0; b < live; b++) {
        const int32_t q0 = e->q_indptr[b], q = e->q_indptr[b + 1] - q0;
        const int chain = draw(e, 0, 2) == 0;
        for (int32_t i = 0; i < q; i++)
            e->parents[q0 + i] = i == 0 ? -1 : chain ? i - 1 : draw(e, 0, i - 1);
        if (mlav_tree_mask_from_parents(q, e->parents + q0, e->words,
                                        e->mask + (size_t)q0 * e->words) != MLAV_OK)
            abort();
    }
    /* pages: shuffled over the pool, so rows are scattered */
    for (int64_t k = 0; k < e->num_pages; k++)
        e->page_owner[k] = -1;
    for (size_t i = 0; i < (size_t)L->max_batch * e->max_pages; i++)
        e->page_table[i] = (int32_t)(tu_next(&e->rng) % (uint64_t)e->num_pages); /* unused slots */
    for (int32_t b = 0; b < live; b++) {
        const int32_t pages = (e->kv_lens[b] + e->page_size - 1) / e->page_size;
        for (int32_t k = 0; k < pages; k++) {
            int64_t id;
            do
                id = (int64_t)(tu_next(&e->rng) % (uint64_t)e->num_pages);
            while (e->page_owner[id] >= 0);
            e->page_owner[id] = b;
            e->page_table[(size_t)b * e->max_pages + k] = (int32_t)id;
        }
    }
    /* values: q and the used rows random, everything else of the pool NaN (0x7f in FP8); an
     * FP8 value is stored divided by its layer's scale, as a quantizer fills the cache */
    const float nan = nanf("");
    const size_t row = (size_t)e->W;
    for (int l = 0; l < e->layers; l++) {
        if (fp8(e) && l % 2 == 1)
            e->kv_scale[l] = draw_kv_scale(e);
        const float kv_div = fp8(e) ? e->kv_scale[l] : 1.0f;
        fill(e, e->q[l], (size_t)t * e->H * row, 1.0f);
        for (int64_t k = 0; k < e->num_pages; k++)
            for (int32_t s = 0; s < e->page_size; s++)
                for (size_t d = 0; d < row; d++)
                    mlav_store_from_f32(e->kv[l], e->kv_dtype,
                                        ((size_t)k * e->page_size + s) * row + d, nan);
        for (int32_t b = 0; b < live; b++)
            for (int32_t j = 0; j < e->kv_lens[b]; j++) {
                const size_t id = (size_t)e->page_table[(size_t)b * e->max_pages +
                                                        j / e->page_size];
                const size_t base = (id * e->page_size + (size_t)(j % e->page_size)) * row;
                for (size_t d = 0; d < row; d++)
                    mlav_store_from_f32(e->kv[l], e->kv_dtype, base + d,
                                        (float)tu_uniform(&e->rng) / kv_div);
            }
    }
}

void sf_poison(sf_engine *e)
{
    const float nan = nanf("");
    for (int l = 0; l < e->layers; l++) {
        const size_t n = e->out_bytes / e->esz;
        for (size_t i = 0; i < n; i++)
            mlav_store_from_f32(e->out[l], e->dtype, i, nan);
        for (size_t i = 0; i < e->lse_bytes / sizeof(float); i++)
            e->lse[l][i] = nan;
    }
}

mlav_lengths sf_lengths(const sf_engine *e)
{
    mlav_lengths len = {MLAV_MEM_HOST, e->batch, e->q_indptr, e->kv_lens};
    return len;
}

mlav_problem sf_shape(const sf_engine *e)
{
    mlav_problem p = {
        .num_heads = e->H, .d_latent = e->Dl, .d_rope = e->Dr, .softmax_scale = e->scale,
        .dtype = e->dtype, .page_size = e->page_size, .max_pages = e->max_pages,
        .kv_dtype = e->kv_dtype};
    return p;
}

mlav_tensors sf_tensors(const sf_engine *e, int l)
{
    mlav_tensors t = {
        .memory = MLAV_MEM_HOST, .q = e->q[l], .kv_cache = e->kv[l], .num_pages = e->num_pages,
        .page_table = e->page_table, .tree_mask = e->mask, .out = e->out[l], .lse = e->lse[l],
        .kv_scale = e->kv_scale[l],
        .kv_scale_ptr = fp8(e) && l % 2 == 1 ? &e->kv_scale[l] : NULL};
    if (t.kv_scale_ptr)
        t.kv_scale = 0.0f; /* to be ignored: a backend that read it would fail the check */
    return t;
}

int sf_check(const sf_engine *e, int l, const void *out, const float *lse, char *msg, size_t n)
{
    return sf_check_skip(e, l, out, lse, -1, msg, n);
}

int sf_check_skip(const sf_engine *e, int l, const void *out, const float *lse, int32_t skip,
                  char *msg, size_t n)
{
    sf_ref ref = {0};
    if (skip != -2 && !sf_reference(e, l, &ref, msg, n)) /* -2: nothing ran, nothing to compare */
        return 0;
    const int ok = sf_check_ref(e, &ref, out, lse, skip, msg, n);
    sf_ref_free(&ref);
    return ok;
}

int sf_reference(const sf_engine *e, int l, sf_ref *ref, char *msg, size_t n)
{
    const int32_t T = e->q_indptr[e->batch], H = e->H, Dl = e->Dl;
    *ref = (sf_ref){0};
    if (T == 0)
        return 1;
    /* the oracle on the step's exact problem, its masks repacked to the step's own words */
    int32_t max_q = 0;
    for (int32_t b = 0; b < e->batch; b++)
        if (e->q_indptr[b + 1] - e->q_indptr[b] > max_q)
            max_q = e->q_indptr[b + 1] - e->q_indptr[b];
    const int32_t words = mlav_tree_mask_words(max_q);
    uint32_t *mask = tu_xcalloc((size_t)T * words, sizeof(uint32_t));
    for (int32_t r = 0; r < T; r++)
        memcpy(mask + (size_t)r * words, e->mask + (size_t)r * e->words, words * sizeof(uint32_t));
    mlav_problem p = sf_shape(e);
    p.batch = e->batch;
    p.q_indptr = e->q_indptr;
    p.kv_lens = e->kv_lens;
    mlav_problem_info info;
    if (mlav_problem_validate(&p, &info) != MLAV_OK) {
        snprintf(msg, n, "the fixture drew an invalid step: %s", mlav_last_error(NULL));
        free(mask);
        return 0;
    }
    mlav_tensors t = sf_tensors(e, l);
    t.tree_mask = mask;
    ref->T = T;
    ref->out = tu_xcalloc((size_t)T * H * Dl, sizeof(double));
    ref->lse = tu_xcalloc((size_t)T * H, sizeof(double));
    const int ok = mlav_oracle_compute(&info, &t, ref->out, ref->lse) == MLAV_OK;
    if (!ok) {
        snprintf(msg, n, "the oracle failed: %s", mlav_last_error(NULL));
        sf_ref_free(ref);
    }
    mlav_problem_info_free(&info);
    free(mask);
    return ok;
}

void sf_ref_free(sf_ref *ref)
{
    free(ref->out);
    free(ref->lse);
    *ref = (sf_ref){0};
}

int sf_check_ref(const sf_engine *e, const sf_ref *ref, const void *out, const float *lse,
                 int32_t skip, char *msg, size_t n)
{
    const int32_t T = skip == -2 ? 0 : e->q_indptr[e->batch], H = e->H, Dl = e->Dl;
    if (T != 0 && ref->T != T) {
        snprintf(msg, n, "the reference is of %d tokens, the step of %d", ref->T, T);
        return 0;
    }
    /* the refused request's rows: untouched */
    const size_t r0 = skip >= 0 ? (size_t)e->q_indptr[skip] * H : 0;
    const size_t r1 = skip >= 0 ? (size_t)e->q_indptr[skip + 1] * H : 0;
    for (size_t r = r0; r < r1; r++) {
        if (!isnan(lse[r])) {
            snprintf(msg, n, "lse row %zu of refused request %d was written", r, skip);
            return 0;
        }
        for (size_t d = 0; d < (size_t)Dl; d++)
            if (!isnan(mlav_load_as_f32(out, (int)e->dtype, r * Dl + d))) {
                snprintf(msg, n, "out row %zu of refused request %d was written", r, skip);
                return 0;
            }
    }
    const int dt = (int)e->dtype;
    /* rows past the step's tokens were not to be written */
    for (size_t k = (size_t)T * H * Dl; k < e->out_bytes / e->esz; k++)
        if (!isnan(mlav_load_as_f32(out, dt, k))) {
            snprintf(msg, n, "out[%zu], past the step's %d tokens, was written", k, T);
            return 0;
        }
    for (size_t k = (size_t)T * H; k < e->lse_bytes / sizeof(float); k++)
        if (!isnan(lse[k])) {
            snprintf(msg, n, "lse[%zu], past the step's %d tokens, was written", k, T);
            return 0;
        }
    if (T == 0)
        return 1;
    const double *ref_out = ref->out, *ref_lse = ref->lse;
    int ok = 1;
    double num = 0.0, den = 0.0, worst = 0.0;
    for (size_t k = 0; ok && k < (size_t)T * H * Dl; k++) {
        const double got = mlav_load_as_f32(out, dt, k), rv = ref_out[k];
        if (k / Dl >= r0 && k / Dl < r1)
            continue;
        if (isnan(got) != isnan(rv)) {
            snprintf(msg, n, "out[%zu] (token %zu, head %zu) = %g but the oracle says %g", k,
                     k / ((size_t)H * Dl), k / Dl % H, got, rv);
            ok = 0;
        } else if (!isnan(rv)) {
            num += (got - rv) * (got - rv);
            den += rv * rv;
        }
    }
    for (size_t k = 0; ok && k < (size_t)T * H; k++) {
        const double got = lse[k], rv = ref_lse[k];
        if (k >= r0 && k < r1)
            continue;
        if (isnan(got) != isnan(rv) || (isinf(rv) && got != rv) || (isinf(got) && got != rv)) {
            snprintf(msg, n, "lse[%zu] = %g but the oracle says %g", k, got, rv);
            ok = 0;
        } else if (!isnan(rv) && !isinf(rv) && fabs(got - rv) > worst) {
            worst = fabs(got - rv);
        }
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    if (ok && !(rel <= tu_out_tol(e->dtype))) {
        snprintf(msg, n, "out rel-L2 error %.3g exceeds %.3g", rel, tu_out_tol(e->dtype));
        ok = 0;
    }
    if (ok && !(worst <= tu_lse_tol(e->dtype))) {
        snprintf(msg, n, "lse max abs error %.3g exceeds %.3g", worst, tu_lse_tol(e->dtype));
        ok = 0;
    }
    return ok;
}

static uint32_t below(uint64_t *rng, uint32_t n)
{
    return n ? (uint32_t)(tu_next(rng) % n) : 0;
}

sf_drawn sf_random_lengths(const mlav_limits *lim, uint64_t *rng, int32_t *qi, int32_t *kvl)
{
    sf_drawn d = {0, 0, 0, 0};
    const int32_t scale = 1 << below(rng, 12);
    d.batch =
        1 + (int32_t)below(rng, (uint32_t)(scale < lim->max_batch ? scale : lim->max_batch));
    const int32_t per_q = lim->max_tokens / d.batch;
    const int short_kv = below(rng, 3) == 0;
    const int32_t top_q = per_q < lim->max_q_len ? per_q : lim->max_q_len;
    d.engine = below(rng, 3) == 0;
    const int32_t q_all = 1 + (int32_t)below(rng, (uint32_t)(top_q > 0 ? top_q : 1));
    const int32_t around = 1 + (int32_t)below(rng, (uint32_t)lim->max_kv_len / 2);
    qi[0] = 0;
    for (int32_t b = 0; b < d.batch; b++) {
        int32_t q = (int32_t)below(rng, (uint32_t)top_q + 1);
        if (below(rng, 4) == 0)
            q = q > 0 ? 1 : 0; /* single tokens */
        if (d.engine)
            q = top_q > 0 && below(rng, 20) ? q_all : 0;
        const int32_t top =
            short_kv ? (lim->max_kv_len < 700 ? lim->max_kv_len : 700) : lim->max_kv_len;
        qi[b + 1] = qi[b] + q;
        kvl[b] = d.engine ? q + around / 2 + (int32_t)below(rng, (uint32_t)around)
                          : q + (int32_t)below(rng, (uint32_t)(top - q) + 1);
    }
    if ((d.past = below(rng, 10) == 0))
        kvl[below(rng, (uint32_t)d.batch)] = lim->max_kv_len + 1 + (int32_t)below(rng, 100);
    if ((d.broken = below(rng, 50) == 0))
        qi[1 + below(rng, (uint32_t)d.batch)] -= 1 + (int32_t)below(rng, 5);
    return d;
}
