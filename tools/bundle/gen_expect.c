/* Expectations: the oracle's answers stored in a bundle, draft tokens that make accepted paths
 * of chosen depths, and the completion of a captured inputs bundle (`gen --expect-from`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"
#include "gen_internal.h"
#include "readout.h"

/* Draft tokens giving each request an accepted path of the depth asked for: the nodes on the
 * path carry their parent's target token; every other node a different token, so the walk
 * neither leaves the path early nor goes past its end. */
mlav_status mlav_gen_choose_drafts(const mlav_bundle *b, const mlav_gen_request *reqs,
                                   uint64_t seed, const int32_t *tokens)
{
    int32_t *depth = malloc(sizeof(int32_t) * (size_t)b->max_q_len);
    char *on_path = malloc((size_t)b->max_q_len);
    if (!depth || !on_path) {
        free(depth);
        free(on_path);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory choosing draft tokens");
    }
    const uint32_t V = (uint32_t)b->vocab;
    for (int32_t r = 0; r < b->B; r++) {
        const int32_t off = b->q_indptr[r], n = mlav_bundle_q_len(b, r);
        const int32_t *par = b->tree_parents + off, *tok = tokens + off;
        int32_t *draft = b->draft_tokens + off;
        int32_t deepest = 0;
        depth[0] = 0;
        for (int32_t i = 1; i < n; i++) {
            depth[i] = depth[par[i]] + 1;
            if (depth[i] > depth[deepest])
                deepest = i;
        }
        int32_t mode = reqs ? reqs[r].accept : MLAV_ACCEPT_AUTO;
        if (mode == MLAV_ACCEPT_AUTO)
            mode = r % 3 == 0   ? MLAV_ACCEPT_FULL
                   : r % 3 == 1 ? MLAV_ACCEPT_PARTIAL
                                : MLAV_ACCEPT_NONE;
        int32_t maxd = depth[deepest], d;
        if (mode == MLAV_ACCEPT_NONE)
            d = 0;
        else if (mode == MLAV_ACCEPT_FULL)
            d = maxd;
        else if (mode == MLAV_ACCEPT_PARTIAL)
            d = maxd / 2;
        else
            d = mode < maxd ? mode : maxd;
        memset(on_path, 0, (size_t)n);
        int32_t node = deepest;
        while (depth[node] > d)
            node = par[node];
        for (; node >= 0; node = par[node])
            on_path[node] = 1;
        uint64_t rng = mlav_gen_stream(seed, STREAM_DRAFT, (uint64_t)r, 0);
        draft[0] = (int32_t)mlav_gen_below(&rng, V);
        for (int32_t c = 1; c < n; c++) {
            int32_t want = tok[par[c]];
            if (on_path[c] && want >= 0) {
                draft[c] = want;
            } else {
                int32_t v = (int32_t)mlav_gen_below(&rng, V - 1);
                draft[c] = want >= 0 && v >= want ? v + 1 : v;
            }
        }
    }
    free(depth);
    free(on_path);
    return MLAV_OK;
}

/* Expectations from the fp64 out/lse and the readout: floats, tokens, margins, acceptance. */
mlav_status mlav_gen_store_expectations(mlav_bundle *b, const double *out64, const double *lse64,
                                        const int32_t *tokens, const double *margins)
{
    mlav_status s = MLAV_OK;
    const size_t rows = (size_t)b->T * (size_t)b->H;
    if (!b->expect_out) {
        b->expect_out = mlav_gen_alloc(rows * (size_t)b->Dl, sizeof(float), &s);
        b->expect_lse = mlav_gen_alloc(rows, sizeof(float), &s);
        b->expect_tokens = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
        b->expect_margin = mlav_gen_alloc((size_t)b->T, sizeof(float), &s);
        b->expect_accept = mlav_gen_alloc((size_t)b->B * (size_t)b->max_q_len, sizeof(int32_t), &s);
        if (s != MLAV_OK)
            return s;
    }
    for (size_t k = 0; k < rows * (size_t)b->Dl; k++)
        b->expect_out[k] = (float)out64[k];
    for (size_t k = 0; k < rows; k++)
        b->expect_lse[k] = (float)lse64[k];
    for (int32_t t = 0; t < b->T; t++) {
        b->expect_tokens[t] = tokens[t];
        b->expect_margin[t] = (float)margins[t];
    }
    return mlav_accept_all(b, tokens, b->expect_accept);
}

/* ---- expectations for a captured bundle --------------------------------------------------- */

mlav_status mlav_gen_expect(const mlav_gen_params *p, mlav_bundle *b, mlav_gen_stats *st)
{
    memset(st, 0, sizeof *st);
    st->min_margin_ratio = INFINITY;
    mlav_problem prob = mlav_bundle_problem(b);
    mlav_problem_info info;
    mlav_status s = mlav_problem_validate(&prob, &info);
    if (s != MLAV_OK)
        return s;
    const size_t rows = (size_t)b->T * (size_t)b->H;
    const int64_t N = (int64_t)b->H * b->Dl;
    uint32_t *mask = NULL;
    double *out64 = mlav_gen_alloc(rows * (size_t)b->Dl, sizeof(double), &s);
    double *lse64 = mlav_gen_alloc(rows, sizeof(double), &s);
    double *margins = mlav_gen_alloc((size_t)b->T, sizeof(double), &s);
    double *best_margins = mlav_gen_alloc((size_t)b->T, sizeof(double), &s);
    int32_t *tokens = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
    int32_t *best_tokens = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
    float *row32 = mlav_gen_alloc((size_t)N, sizeof(float), &s);
    if (s == MLAV_OK)
        s = mlav_bundle_tree_mask(b, &mask);
    if (s == MLAV_OK) {
        mlav_tensors t = mlav_bundle_tensors(b, mask, NULL, NULL);
        s = mlav_oracle_compute(&info, &t, out64, lse64);
    }
    /* captured queries cannot be redrawn; the readout seed can: keep the first seed that
     * leaves the fewest tokens indecisive */
    const uint64_t seed0 = b->readout_seed;
    int32_t best = -1;
    const int32_t tries = p->readout_tries > 0 ? p->readout_tries : 1;
    for (int32_t k = 0; s == MLAV_OK && k < tries; k++) {
        s = mlav_gen_readout_rows(b, seed0 + (uint64_t)k, out64, NULL, 0, tokens, margins);
        int32_t indecisive = 0;
        for (int32_t t = 0; s == MLAV_OK && t < b->T; t++)
            indecisive += mlav_gen_margin_ratio(b, out64, tokens, margins, t, row32) < 1.0;
        st->readout_tries = k + 1;
        if (best < 0 || indecisive < st->indecisive) {
            best = k;
            st->indecisive = indecisive;
            memcpy(best_tokens, tokens, sizeof(int32_t) * (size_t)b->T);
            memcpy(best_margins, margins, sizeof(double) * (size_t)b->T);
        }
        if (indecisive == 0)
            break;
    }
    if (s == MLAV_OK) {
        b->readout_seed = seed0 + (uint64_t)best;
        for (int32_t t = 0; t < b->T; t++) {
            double ratio = mlav_gen_margin_ratio(b, out64, best_tokens, best_margins, t, row32);
            if (ratio >= 1.0 && ratio < st->min_margin_ratio)
                st->min_margin_ratio = ratio;
        }
        if (!b->draft_tokens) {
            b->draft_tokens = mlav_gen_alloc((size_t)b->T, sizeof(int32_t), &s);
            if (s == MLAV_OK)
                s = mlav_gen_choose_drafts(b, NULL, b->readout_seed, best_tokens);
        }
    }
    if (s == MLAV_OK)
        s = mlav_gen_store_expectations(b, out64, lse64, best_tokens, best_margins);
    if (s == MLAV_OK) {
        /* provenance: what the inputs said, then how the expectations were added */
        size_t n = strlen(b->source) + strlen(p->source) + 32;
        char *src = malloc(n);
        if (!src) {
            s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory");
        } else {
            snprintf(src, n, "%s%sexpectations: %s", b->source, b->source[0] ? "; " : "",
                     p->source);
            free(b->source);
            b->source = src;
        }
    }
    if (s == MLAV_OK && mlav_bundle_validate(b, MLAV_BUNDLE_FULL) != MLAV_OK)
        s = mlav_bundle_wrap_error(MLAV_ERR_INTERNAL, "completed an invalid bundle");
    mlav_problem_info_free(&info);
    free(mask);
    free(out64);
    free(lse64);
    free(margins);
    free(best_margins);
    free(tokens);
    free(best_tokens);
    free(row32);
    return s;
}
