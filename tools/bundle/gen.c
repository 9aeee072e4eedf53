/* The generator behind `mlaverify gen`: see gen.h and golden/FORMAT.md ("How gen draws"). */
#include "gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"
#include "gen_internal.h"
#include "readout.h"

/* A token that stays indecisive after this many query draws means a broken rule, not bad luck
 * (each draw is decisive with probability ~0.6 at BF16, ~1 at F32). */
#define MAX_DRAWS 256

/* Queries are uniform in [-Q_AMPLITUDE, Q_AMPLITUDE), KV rows in [-1, 1): with the DeepSeek
 * scale 1/sqrt(192) the scores then spread over about +-1.2 (one sigma), so attention is
 * neither flat nor one-hot, as in a real model. */
#define Q_AMPLITUDE 2.0

/* ---- parameters ---------------------------------------------------------------------------- */

void mlav_gen_defaults(mlav_gen_params *p)
{
    memset(p, 0, sizeof *p);
    p->seed = 1;
    p->H = 8;
    p->Dl = 512;
    p->Dr = 64;
    p->dtype = MLAV_DTYPE_BF16;
    p->kv_dtype = MLAV_DTYPE_F32; /* the q dtype */
    p->kv_scale = MLAV_GEN_KV_SCALE;
    p->page_size = 16;
    p->vocab = 256;
    p->readout_seed = 1;
    p->spare_pages = 3;
    p->softmax_scale = (float)(1.0 / sqrt(192.0));
    p->B = 1;
    p->req[0] = (mlav_gen_request){
        .q_len = 9, .prefix = 256, .tree = MLAV_TREE_DEEP, .accept = MLAV_ACCEPT_AUTO};
    p->readout_tries = 64;
    snprintf(p->source, sizeof p->source, "mlaverify gen");
}

/* The cache dtype the parameters ask for (kv_dtype resolved as mlav_problem's is). */
static mlav_dtype gen_kv_dtype(const mlav_gen_params *p)
{
    return mlav_problem_kv_dtype(&(mlav_problem){.dtype = p->dtype, .kv_dtype = p->kv_dtype});
}

static mlav_status check_params(const mlav_gen_params *p)
{
    if (p->H < 1 || p->H > 4096 || p->Dl < 1 || p->Dl > 16384 || p->Dr < 0 || p->Dr > 16384)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "heads %d, d_latent %d, d_rope %d: expected [1, 4096], [1, 16384], "
                              "[0, 16384]",
                              p->H, p->Dl, p->Dr);
    if (mlav_dtype_size(p->dtype) == 0 || p->dtype == MLAV_DTYPE_FP8_E4M3)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "dtype %d is not f32, bf16 or f16",
                              (int)p->dtype);
    const mlav_dtype kv_dtype = gen_kv_dtype(p);
    if (kv_dtype != p->dtype && kv_dtype != MLAV_DTYPE_FP8_E4M3)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "kv dtype %s with dtype %s: the cache has the q dtype or is fp8",
                              mlav_dtype_name(kv_dtype), mlav_dtype_name(p->dtype));
    if (kv_dtype == MLAV_DTYPE_FP8_E4M3 && !(isfinite(p->kv_scale) && p->kv_scale > 0.0f))
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "kv scale %g must be finite and > 0",
                              (double)p->kv_scale);
    if (p->page_size < 1 || p->page_size > (1 << 20))
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "page size %d is outside [1, 2^20]",
                              p->page_size);
    if (p->vocab < 2 || p->vocab > MLAV_BUNDLE_MAX_VOCAB)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "vocab %d is outside [2, %d]", p->vocab,
                              MLAV_BUNDLE_MAX_VOCAB);
    if (p->spare_pages < 1 || p->spare_pages > 65536)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "spare pages %d is outside [1, 65536] (unused page-table slots "
                              "point at a spare NaN page)",
                              p->spare_pages);
    if (!isfinite(p->softmax_scale) || p->softmax_scale <= 0.0f)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "softmax scale %g must be finite and > 0",
                              (double)p->softmax_scale);
    if (p->B < 1 || p->B > MLAV_GEN_MAX_REQUESTS)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "%d requests: expected 1 to %d", p->B,
                              MLAV_GEN_MAX_REQUESTS);
    int64_t rows = 0, T = 0;
    for (int32_t r = 0; r < p->B; r++) {
        const mlav_gen_request *q = &p->req[r];
        if (q->q_len < 1 || q->q_len > MLAV_BUNDLE_MAX_Q_LEN || q->prefix < 0 ||
            q->prefix > (1 << 28))
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "request %d: q_len %d must be in [1, %d] (a bundle's limit) and "
                                  "prefix %d in [0, 2^28]",
                                  r, q->q_len, MLAV_BUNDLE_MAX_Q_LEN, q->prefix);
        int64_t kv = (int64_t)q->q_len + q->prefix;
        rows += (kv + p->page_size - 1) / p->page_size * p->page_size;
        T += q->q_len;
    }
    rows += (int64_t)p->spare_pages * p->page_size;
    /* KV rows are addressed by int32 page ids of page-size-1 views in the redraw path */
    if (rows >= INT32_MAX || T * p->H >= INT32_MAX)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "the problem is too large to generate");
    return MLAV_OK;
}

/* ---- building blocks ----------------------------------------------------------------------- */

static void fill_parents(mlav_tree_kind kind, int32_t n, int32_t *par, uint64_t *rng)
{
    par[0] = -1;
    for (int32_t i = 1; i < n; i++) {
        if (kind == MLAV_TREE_CHAIN)
            par[i] = i - 1;
        else if (kind == MLAV_TREE_BUSHY)
            par[i] = (int32_t)mlav_gen_below(rng, (uint32_t)(i < 4 ? i : 4));
        else
            par[i] =
                mlav_gen_below(rng, 3) != 0 ? i - 1 : (int32_t)mlav_gen_below(rng, (uint32_t)i);
    }
}

static void draw_q(const mlav_gen_params *p, mlav_bundle *b, int32_t t, int32_t draw)
{
    uint64_t rng = mlav_gen_stream(p->seed, STREAM_Q, (uint64_t)t, (uint64_t)draw);
    const size_t n = (size_t)b->H * (size_t)b->W, base = (size_t)t * n;
    for (size_t k = 0; k < n; k++)
        mlav_store_from_f32(b->q, (int)b->dtype, base + k,
                            (float)(Q_AMPLITUDE * mlav_gen_uniform(&rng)));
}

/* KV rows token t sees: its request's prefix plus the nodes its mask row marks. */
static int64_t visible_rows(const mlav_bundle *b, const uint32_t *mask, int32_t t)
{
    const int32_t r = mlav_gen_request_of(b, t), words = mlav_tree_mask_words(b->max_q_len);
    int64_t n = b->kv_lens[r] - mlav_bundle_q_len(b, r);
    for (int32_t w = 0; w < words; w++)
        for (uint32_t x = mask[(size_t)t * (size_t)words + (size_t)w]; x; x &= x - 1)
            n++;
    return n;
}

/* Mark the tokens of t's request whose mask sees node t (t itself included). */
static void mark_descendants(const mlav_bundle *b, const uint32_t *mask, int32_t t, char *marks)
{
    const int32_t r = mlav_gen_request_of(b, t), words = mlav_tree_mask_words(b->max_q_len);
    const int32_t i = t - b->q_indptr[r];
    for (int32_t c = t; c < b->q_indptr[r + 1]; c++)
        if ((mask[(size_t)c * (size_t)words + (size_t)(i / 32)] >> (i % 32)) & 1u)
            marks[c] = 1;
}

/* Store KV value v as element i of the pool: an FP8 cache holds e4m3(v / kv_scale), whose
 * value e4m3 x kv_scale is what the oracle and every backend then see. */
static void store_kv(mlav_bundle *b, size_t i, double v)
{
    if (b->kv_dtype == MLAV_DTYPE_FP8_E4M3)
        v /= (double)b->kv_scale;
    mlav_store_from_f32(b->kv_cache, (int)b->kv_dtype, i, (float)v);
}

/* Draw node t's own KV row (its draft row, after the prefix) again. */
static void draw_kv_row(const mlav_gen_params *p, mlav_bundle *b, int32_t t, int32_t draw)
{
    const int32_t r = mlav_gen_request_of(b, t);
    const int64_t j = b->kv_lens[r] - mlav_bundle_q_len(b, r) + (t - b->q_indptr[r]);
    const size_t row =
        (size_t)b->page_table[(size_t)r * (size_t)b->max_pages + (size_t)(j / b->page_size)] *
            (size_t)b->page_size +
        (size_t)(j % b->page_size);
    uint64_t rng = mlav_gen_stream(p->seed, STREAM_KV_REDRAW, (uint64_t)t, (uint64_t)draw);
    for (int32_t d = 0; d < b->W; d++)
        store_kv(b, row * (size_t)b->W + (size_t)d, mlav_gen_uniform(&rng));
}

/* ---- generation ---------------------------------------------------------------------------- */

/* Lengths, trees and the shuffled page table. */
static mlav_status layout(const mlav_gen_params *p, mlav_bundle *b)
{
    mlav_status s = MLAV_OK;
    const int32_t B = p->B, ps = p->page_size;
    b->H = p->H;
    b->Dl = p->Dl;
    b->Dr = p->Dr;
    b->W = p->Dl + p->Dr;
    b->vocab = p->vocab;
    b->readout_seed = p->readout_seed;
    b->dtype = p->dtype;
    b->kv_dtype = gen_kv_dtype(p);
    b->kv_scale = b->kv_dtype == MLAV_DTYPE_FP8_E4M3 ? p->kv_scale : 0.0f;
    b->page_size = ps;
    b->softmax_scale = p->softmax_scale;
    b->B = B;
    b->source = mlav_gen_alloc(strlen(p->source) + 1, 1, &s);
    b->q_indptr = mlav_gen_alloc((size_t)B + 1, sizeof(int32_t), &s);
    b->kv_lens = mlav_gen_alloc((size_t)B, sizeof(int32_t), &s);
    if (s != MLAV_OK)
        return s;
    memcpy(b->source, p->source, strlen(p->source) + 1);
    int64_t used = 0;
    int32_t max_pages = 1;
    for (int32_t r = 0; r < B; r++) {
        b->q_indptr[r + 1] = b->q_indptr[r] + p->req[r].q_len;
        b->kv_lens[r] = p->req[r].prefix + p->req[r].q_len;
        if (p->req[r].q_len > b->max_q_len)
            b->max_q_len = p->req[r].q_len;
        int32_t pages = (b->kv_lens[r] + ps - 1) / ps;
        used += pages;
        if (pages + 1 > max_pages)
            max_pages = pages + 1; /* a spare column, pointing at a NaN page */
    }
    b->T = b->q_indptr[B];
    b->max_pages = max_pages;
    b->num_pages = used + p->spare_pages;

    b->tree_parents = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
    b->draft_tokens = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
    int32_t *perm = mlav_gen_alloc((size_t)b->num_pages, sizeof(int32_t), &s);
    b->page_table = mlav_gen_alloc((size_t)B * (size_t)max_pages, sizeof(int32_t), &s);
    if (s != MLAV_OK) {
        free(perm);
        return s;
    }
    for (int32_t r = 0; r < B; r++) {
        uint64_t rng = mlav_gen_stream(p->seed, STREAM_TREE, (uint64_t)r, 0);
        fill_parents(p->req[r].tree, p->req[r].q_len, b->tree_parents + b->q_indptr[r], &rng);
    }
    /* shuffled page ids; the spare ones stay NaN and fill every unused page-table slot */
    for (int64_t i = 0; i < b->num_pages; i++)
        perm[i] = (int32_t)i;
    uint64_t prng = mlav_gen_stream(p->seed, STREAM_PAGES, 0, 0);
    for (int64_t i = b->num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(mlav_gen_next64(&prng) % (uint64_t)(i + 1));
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    int64_t next = 0;
    for (int32_t r = 0; r < B; r++) {
        int32_t pages = (b->kv_lens[r] + ps - 1) / ps;
        for (int32_t k = 0; k < max_pages; k++)
            b->page_table[(size_t)r * (size_t)max_pages + (size_t)k] =
                k < pages ? perm[next++] : perm[used];
    }
    free(perm);
    return MLAV_OK;
}

/* The pool (NaN everywhere, then each request's rows) and the queries. */
static mlav_status fill(const mlav_gen_params *p, mlav_bundle *b)
{
    mlav_status s = MLAV_OK;
    const int32_t ps = b->page_size;
    const size_t kv_elems = (size_t)b->num_pages * (size_t)ps * (size_t)b->W;
    b->kv_cache = mlav_gen_alloc(kv_elems, mlav_dtype_size(b->kv_dtype), &s);
    b->q = mlav_gen_alloc((size_t)b->T * (size_t)b->H * (size_t)b->W,
                          mlav_dtype_size(b->dtype), &s);
    if (s != MLAV_OK)
        return s;
    for (size_t k = 0; k < kv_elems; k++) /* NaN poison: an FP8 cache's is the byte 0x7f */
        store_kv(b, k, NAN);
    for (int32_t r = 0; r < b->B; r++) {
        uint64_t rng = mlav_gen_stream(p->seed, STREAM_KV, (uint64_t)r, 0);
        for (int32_t j = 0; j < b->kv_lens[r]; j++) {
            size_t row =
                (size_t)b->page_table[(size_t)r * (size_t)b->max_pages + (size_t)(j / ps)] *
                    (size_t)ps +
                (size_t)(j % ps);
            for (int32_t d = 0; d < b->W; d++)
                store_kv(b, row * (size_t)b->W + (size_t)d, mlav_gen_uniform(&rng));
        }
    }
    for (int32_t t = 0; t < b->T; t++)
        draw_q(p, b, t, 0);
    return MLAV_OK;
}

/* The oracle over the whole problem, then rounds of redraws: every token that is not decisive
 * gets its query (or, for a lone root, its KV row) drawn again and its rows recomputed, until
 * every token is decisive. Leaves the final out64, lse64, tokens and margins. */
static mlav_status make_decisive(const mlav_gen_params *p, mlav_bundle *b,
                                 const mlav_problem_info *info, const uint32_t *mask, double *out64,
                                 double *lse64, int32_t *tokens, double *margins,
                                 mlav_gen_stats *st)
{
    mlav_status s = MLAV_OK;
    int32_t *draws = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
    int32_t *list = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
    char *redo = mlav_gen_alloc((size_t)b->T, 1, &s);
    float *row32 = mlav_gen_alloc((size_t)b->H * (size_t)b->Dl, sizeof(float), &s);
    if (s == MLAV_OK) {
        mlav_tensors t = mlav_bundle_tensors(b, mask, NULL, NULL);
        s = mlav_oracle_compute(info, &t, out64, lse64);
    }
    if (s == MLAV_OK)
        s = mlav_gen_readout_rows(b, b->readout_seed, out64, NULL, 0, tokens, margins);
    int32_t n = 0;
    for (int32_t t = 0; s == MLAV_OK && t < b->T; t++)
        list[n++] = t;
    while (s == MLAV_OK && n > 0) {
        memset(redo, 0, (size_t)b->T);
        for (int32_t k = 0; k < n; k++) {
            int32_t t = list[k];
            double ratio = mlav_gen_margin_ratio(b, out64, tokens, margins, t, row32);
            if (ratio >= 1.0) {
                if (ratio < st->min_margin_ratio)
                    st->min_margin_ratio = ratio;
                continue;
            }
            if (++draws[t] >= MAX_DRAWS) {
                /* not a bug but a request no draw can satisfy: with few out values per node
                 * (H x Dl of 1) or an extreme scale the margin rarely reaches K x the noise */
                s = mlav_set_error(MLAV_ERR_INVALID_ARG,
                                   "token %d stayed indecisive after %d draws: with H x Dl = %lld "
                                   "out values per node, vocab %d and softmax scale %g no redraw "
                                   "gives it the decisive margin (%.0fx the %s noise bound); use "
                                   "more heads or a larger d_latent, or a scale nearer "
                                   "1/sqrt(d_latent + d_rope)",
                                   t, MAX_DRAWS, (long long)b->H * b->Dl, b->vocab,
                                   (double)b->softmax_scale, MLAV_DECISIVE_K,
                                   mlav_dtype_name(b->dtype));
                break;
            }
            st->redraws++;
            if (visible_rows(b, mask, t) == 1) {
                /* a root with no prefix sees only its own KV row: its out is that row whatever
                 * the query, so the row is drawn again, and every descendant that sees it
                 * recomputed */
                draw_kv_row(p, b, t, draws[t]);
                mark_descendants(b, mask, t, redo);
            } else {
                draw_q(p, b, t, draws[t]);
            }
            redo[t] = 1;
        }
        n = 0;
        for (int32_t t = 0; s == MLAV_OK && t < b->T; t++)
            if (redo[t])
                list[n++] = t;
        if (s == MLAV_OK && n > 0)
            s = mlav_gen_oracle_rows(b, info, mask, list, n, out64, lse64);
        if (s == MLAV_OK && n > 0)
            s = mlav_gen_readout_rows(b, b->readout_seed, out64, list, n, tokens, margins);
    }
    free(draws);
    free(list);
    free(redo);
    free(row32);
    return s;
}

mlav_status mlav_gen_bundle(const mlav_gen_params *p, mlav_bundle *b, mlav_gen_stats *st)
{
    memset(b, 0, sizeof *b);
    memset(st, 0, sizeof *st);
    st->min_margin_ratio = INFINITY;
    mlav_status s = check_params(p);
    if (s == MLAV_OK)
        s = layout(p, b);
    if (s == MLAV_OK)
        s = fill(p, b);
    if (s != MLAV_OK) {
        mlav_bundle_free(b);
        return s;
    }
    mlav_problem prob = mlav_bundle_problem(b);
    mlav_problem_info info;
    if ((s = mlav_problem_validate(&prob, &info)) != MLAV_OK) {
        mlav_bundle_free(b);
        return s;
    }
    const size_t rows = (size_t)b->T * (size_t)b->H;
    uint32_t *mask = NULL;
    double *out64 = mlav_gen_alloc(rows * (size_t)b->Dl, sizeof(double), &s);
    double *lse64 = mlav_gen_alloc(rows, sizeof(double), &s);
    double *margins = mlav_gen_alloc((size_t)b->T, sizeof(double), &s);
    int32_t *tokens = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
    if (s == MLAV_OK)
        s = mlav_bundle_tree_mask(b, &mask);
    if (s == MLAV_OK)
        s = make_decisive(p, b, &info, mask, out64, lse64, tokens, margins, st);
    if (s == MLAV_OK)
        s = mlav_gen_choose_drafts(b, p->req, p->seed, tokens);
    if (s == MLAV_OK)
        s = mlav_gen_store_expectations(b, out64, lse64, tokens, margins);
    if (s == MLAV_OK && mlav_bundle_validate(b, MLAV_BUNDLE_FULL) != MLAV_OK)
        s = mlav_bundle_wrap_error(MLAV_ERR_INTERNAL, "generated an invalid bundle");
    mlav_problem_info_free(&info);
    free(mask);
    free(out64);
    free(lse64);
    free(margins);
    free(tokens);
    if (s != MLAV_OK)
        mlav_bundle_free(b);
    return s;
}

mlav_status mlav_gen_run(const mlav_gen_params *p, const char *out_path, mlav_gen_stats *st,
                         mlav_bundle *written)
{
    mlav_bundle b;
    mlav_status s;
    if (p->expect_from) {
        s = mlav_bundle_read(p->expect_from, MLAV_BUNDLE_INPUTS, &b);
        if (s == MLAV_OK) {
            s = mlav_gen_expect(p, &b, st);
            if (s != MLAV_OK)
                mlav_bundle_free(&b);
        }
    } else {
        s = mlav_gen_bundle(p, &b, st);
    }
    if (s != MLAV_OK)
        return s;
    s = mlav_bundle_write(out_path, &b);
    if (s == MLAV_OK && written)
        *written = b;
    else
        mlav_bundle_free(&b);
    return s;
}
