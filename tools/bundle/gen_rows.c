/* The generator's row work: the fp64 oracle and the readout over chosen tokens only, and the
 * decisive ratio, so that a redrawn query costs its own rows, not the whole problem. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"
#include "gen_internal.h"
#include "readout.h"

void *mlav_gen_alloc(size_t n, size_t size, mlav_status *s)
{
    void *p = calloc(n ? n : 1, size);
    if (!p && *s == MLAV_OK)
        *s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory generating a bundle");
    return p;
}

/* Which request a token belongs to. */
int32_t mlav_gen_request_of(const mlav_bundle *b, int32_t t)
{
    int32_t r = 0;
    while (b->q_indptr[r + 1] <= t)
        r++;
    return r;
}

/* Oracle rows of the tokens in list[0..n) only. Each token becomes a one-node request over a
 * page-size-1 view of the pool whose page table lists exactly the KV rows the token sees, in
 * ascending order: the oracle then does the very same double sums in the same order as for the
 * whole problem, so the rows are bit-identical to a full run (the tests check this). */
mlav_status mlav_gen_oracle_rows(const mlav_bundle *b, const mlav_problem_info *info,
                                 const uint32_t *mask, const int32_t *list, int32_t n,
                                 double *out64, double *lse64)
{
    mlav_status s = MLAV_OK;
    const size_t esz = mlav_dtype_size(b->dtype), qrow = (size_t)b->H * (size_t)b->W;
    int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int32_t *kv = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *req = malloc(sizeof(int32_t) * (size_t)n);
    void *qsub = malloc(esz * qrow * (size_t)n);
    double *o = malloc(sizeof(double) * (size_t)n * (size_t)b->H * (size_t)b->Dl);
    double *l = malloc(sizeof(double) * (size_t)n * (size_t)b->H);
    int32_t *pt = NULL;
    if (!indptr || !kv || !req || !qsub || !o || !l) {
        s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory redrawing queries");
        goto done;
    }
    int32_t maxvis = 1;
    for (int32_t k = 0; k < n; k++) {
        int32_t t = list[k], r = mlav_gen_request_of(b, t);
        req[k] = r;
        int32_t i = t - b->q_indptr[r], c = 0;
        for (int64_t j = 0; j < b->kv_lens[r]; j++)
            c += mlav_visible(info, mask, r, i, j);
        kv[k] = c;
        indptr[k] = k;
        if (c > maxvis)
            maxvis = c;
        memcpy((char *)qsub + (size_t)k * qrow * esz, (const char *)b->q + (size_t)t * qrow * esz,
               qrow * esz);
    }
    indptr[n] = n;
    pt = malloc(sizeof(int32_t) * (size_t)n * (size_t)maxvis);
    if (!pt) {
        s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory redrawing queries");
        goto done;
    }
    for (int32_t k = 0; k < n; k++) {
        int32_t r = req[k], i = list[k] - b->q_indptr[r], c = 0;
        const int32_t *pt_row = b->page_table + (size_t)r * (size_t)info->max_pages;
        for (int64_t j = 0; j < b->kv_lens[r]; j++)
            if (mlav_visible(info, mask, r, i, j))
                pt[(size_t)k * (size_t)maxvis + (size_t)c++] =
                    (int32_t)mlav_kv_row_index(info, pt_row, j);
        for (; c < maxvis; c++)
            pt[(size_t)k * (size_t)maxvis + (size_t)c] = 0;
    }
    mlav_problem sub = {
        .num_heads = b->H,
        .d_latent = b->Dl,
        .d_rope = b->Dr,
        .softmax_scale = b->softmax_scale,
        .dtype = b->dtype,
        .page_size = 1,
        .batch = n,
        .q_indptr = indptr,
        .kv_lens = kv,
        .max_pages = maxvis,
        .kv_dtype = b->kv_dtype,
    };
    mlav_problem_info sinfo;
    if ((s = mlav_problem_validate(&sub, &sinfo)) != MLAV_OK)
        goto done;
    mlav_tensors t = {
        .memory = MLAV_MEM_HOST,
        .q = qsub,
        .kv_cache = b->kv_cache,
        .num_pages = b->num_pages * b->page_size,
        .page_table = pt,
        .tree_mask = NULL,
        .kv_scale = b->kv_scale,
    };
    s = mlav_oracle_compute(&sinfo, &t, o, l);
    mlav_problem_info_free(&sinfo);
    if (s != MLAV_OK)
        goto done;
    const size_t orow = (size_t)b->H * (size_t)b->Dl;
    for (int32_t k = 0; k < n; k++) {
        memcpy(out64 + (size_t)list[k] * orow, o + (size_t)k * orow, sizeof(double) * orow);
        memcpy(lse64 + (size_t)list[k] * (size_t)b->H, l + (size_t)k * (size_t)b->H,
               sizeof(double) * (size_t)b->H);
    }
done:
    free(indptr);
    free(kv);
    free(req);
    free(qsub);
    free(o);
    free(l);
    free(pt);
    return s;
}

/* Tokens and margins of the rows in list[0..n) (all rows when list is NULL), read out from the
 * oracle's fp64 out. */
mlav_status mlav_gen_readout_rows(const mlav_bundle *b, uint64_t seed, const double *out64,
                                  const int32_t *list, int32_t n, int32_t *tokens, double *margins)
{
    const int64_t N = (int64_t)b->H * b->Dl;
    if (!list)
        return mlav_readout_tokens(b->T, N, b->vocab, seed, out64, tokens, margins);
    /* calloc: gcc cannot see that the copy below fills every row */
    double *rows = calloc((size_t)n * (size_t)N, sizeof(double));
    int32_t *tk = malloc(sizeof(int32_t) * (size_t)n);
    double *mg = malloc(sizeof(double) * (size_t)n);
    mlav_status s = MLAV_OK;
    if (!rows || !tk || !mg)
        s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory for the readout");
    for (int32_t k = 0; s == MLAV_OK && k < n; k++)
        memcpy(rows + (size_t)k * (size_t)N, out64 + (size_t)list[k] * (size_t)N,
               sizeof(double) * (size_t)N);
    if (s == MLAV_OK)
        s = mlav_readout_tokens(n, N, b->vocab, seed, rows, tk, mg);
    for (int32_t k = 0; s == MLAV_OK && k < n; k++) {
        tokens[list[k]] = tk[k];
        margins[list[k]] = mg[k];
    }
    free(rows);
    free(tk);
    free(mg);
    return s;
}

/* Margin / required margin of token t, judged on the F32 values a bundle stores (so the check,
 * which only has those, reaches the same verdict). 0 for a NaN row. */
double mlav_gen_margin_ratio(const mlav_bundle *b, const double *out64, const int32_t *tokens,
                             const double *margins, int32_t t, float *row32)
{
    const int64_t N = (int64_t)b->H * b->Dl;
    if (tokens[t] < 0)
        return 0.0;
    for (int64_t k = 0; k < N; k++)
        row32[k] = (float)out64[(size_t)t * (size_t)N + (size_t)k];
    double need = mlav_required_margin(b->dtype, row32, N);
    double m = (double)(float)margins[t];
    if (!(need > 0.0))
        return m > 0.0 ? INFINITY : 0.0;
    return m / need;
}
