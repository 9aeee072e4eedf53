#include "shard_fixture.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../src/common/dtype.h"

/* The layout of the contract (include/mlaverify.h, mlav_problem's shard fields), spelled out
 * here rather than taken from src/common/shard.h, so that a wrong library mapping disagrees
 * with the test's instead of agreeing with itself. */
static int32_t owner_of(int64_t g, int32_t ranks, int32_t stripe)
{
    return (int32_t)((g / stripe) % ranks);
}
static int64_t local_of(int64_t g, int32_t ranks, int32_t stripe)
{
    return g / ((int64_t)stripe * ranks) * stripe + g % stripe;
}

int64_t sh_rows_of(int64_t n, int32_t ranks, int32_t rank, int32_t stripe)
{
    int64_t k = 0;
    for (int64_t g = 0; g < n; g++)
        k += owner_of(g, ranks, stripe) == rank;
    return k;
}

sh_rank *sh_rank_make(const tu_problem *p, int32_t ranks, int32_t rank, int32_t stripe,
                      uint64_t seed)
{
    sh_rank *r = tu_xcalloc(1, sizeof *r);
    r->ranks = ranks, r->rank = rank, r->stripe = stripe;
    const tu_case *c = &p->c;
    const int32_t B = c->B, ps = c->page_size, W = c->Dl + c->Dr;
    int64_t used = 0;
    int32_t most = 1;
    for (int32_t b = 0; b < B; b++) {
        r->rows[b] = (int32_t)sh_rows_of(p->kv_lens[b], ranks, rank, stripe);
        const int32_t pages = (r->rows[b] + ps - 1) / ps;
        used += pages;
        most = pages + 1 > most ? pages + 1 : most; /* a spare column: a NaN page's id */
    }
    r->max_pages = most;
    r->num_pages = used + 2;
    int32_t *perm = tu_xcalloc((size_t)r->num_pages, sizeof(int32_t));
    for (int64_t i = 0; i < r->num_pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = r->num_pages - 1; i > 0; i--) {
        const int64_t j = (int64_t)(tu_next(&seed) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    r->page_table = tu_xcalloc((size_t)B * (size_t)most, sizeof(int32_t));
    int64_t next = 0;
    for (int32_t b = 0; b < B; b++) {
        const int32_t pages = (r->rows[b] + ps - 1) / ps;
        for (int32_t k = 0; k < most; k++)
            r->page_table[(size_t)b * (size_t)most + (size_t)k] =
                k < pages ? perm[next++] : perm[r->num_pages - 1];
    }
    free(perm);

    /* the pool: NaN everywhere (0x7f in an FP8 cache), then each held row copied from the
     * global pool to its local row's slot */
    const size_t row_bytes = (size_t)W * p->kv_esz;
    r->kv_bytes = (size_t)r->num_pages * (size_t)ps * row_bytes;
    r->kv = tu_xcalloc(r->kv_bytes, 1);
    const size_t elems = (size_t)r->num_pages * (size_t)ps * (size_t)W;
    for (size_t k = 0; k < elems; k++) {
        if (p->kv_dtype == MLAV_DTYPE_FP8_E4M3)
            ((uint8_t *)r->kv)[k] = 0x7f;
        else
            mlav_store_from_f32(r->kv, (int)p->kv_dtype, k, NAN);
    }
    for (int32_t b = 0; b < B; b++)
        for (int64_t g = 0; g < p->kv_lens[b]; g++) {
            if (owner_of(g, ranks, stripe) != rank)
                continue;
            const int64_t l = local_of(g, ranks, stripe);
            const int32_t *grow = p->page_table + (size_t)b * (size_t)p->prob.max_pages;
            const int32_t *lrow = r->page_table + (size_t)b * (size_t)most;
            const size_t src = (size_t)grow[g / ps] * (size_t)ps + (size_t)(g % ps);
            const size_t dst = (size_t)lrow[l / ps] * (size_t)ps + (size_t)(l % ps);
            memcpy((char *)r->kv + dst * row_bytes, (const char *)p->kv + src * row_bytes,
                   row_bytes);
        }

    r->prob = p->prob;
    r->prob.max_pages = most;
    r->prob.shard_ranks = ranks;
    r->prob.shard_rank = rank;
    r->prob.shard_stripe = stripe;
    const size_t esz = mlav_dtype_size(c->dtype);
    r->out = tu_xcalloc(p->out_elems ? p->out_elems : 1, esz);
    r->lse = tu_xcalloc(p->lse_elems ? p->lse_elems : 1, sizeof(float));
    for (size_t k = 0; k < p->out_elems; k++)
        mlav_store_from_f32(r->out, (int)c->dtype, k, NAN);
    for (size_t k = 0; k < p->lse_elems; k++)
        r->lse[k] = NAN;
    return r;
}

void sh_rank_free(sh_rank *r)
{
    if (!r)
        return;
    free(r->page_table);
    free(r->kv);
    free(r->out);
    free(r->lse);
    free(r);
}

mlav_tensors sh_rank_tensors(const tu_problem *p, const sh_rank *r)
{
    mlav_tensors t = tu_tensors(p);
    t.kv_cache = r->kv;
    t.num_pages = r->num_pages;
    t.page_table = r->page_table;
    t.out = r->out;
    t.lse = r->lse;
    return t;
}

mlav_status sh_merge(tu_problem *p, sh_rank *const *ranks, int32_t n)
{
    const size_t rows = p->lse_elems, dim = (size_t)p->c.Dl;
    float *outs = tu_xcalloc((size_t)n * rows * dim + 1, sizeof(float));
    float *lses = tu_xcalloc((size_t)n * rows + 1, sizeof(float));
    float *out = tu_xcalloc(rows * dim + 1, sizeof(float));
    for (int32_t s = 0; s < n; s++) {
        for (size_t k = 0; k < rows * dim; k++)
            outs[(size_t)s * rows * dim + k] = mlav_load_as_f32(ranks[s]->out, (int)p->c.dtype, k);
        memcpy(lses + (size_t)s * rows, ranks[s]->lse, rows * sizeof(float));
    }
    mlav_status st = MLAV_OK;
    if (rows > 0)
        st = mlav_merge_states_stacked(MLAV_MEM_HOST, MLAV_DTYPE_F32, n, (int64_t)rows,
                                       (int32_t)dim, outs, lses, out, p->lse, NULL);
    if (st == MLAV_OK)
        for (size_t k = 0; k < rows * dim; k++)
            mlav_store_from_f32(p->out, (int)p->c.dtype, k, out[k]);
    free(outs);
    free(lses);
    free(out);
    return st;
}

tu_case sh_draw_case(uint64_t *rng, int32_t H, int32_t Dl, int32_t Dr, int32_t page_size,
                     mlav_dtype dtype, mlav_dtype kv_dtype, int32_t max_prefix)
{
    tu_case c = {.H = H, .Dl = Dl, .Dr = Dr, .page_size = page_size, .dtype = dtype,
                 .kv_dtype = kv_dtype};
    c.B = 1 + (int32_t)(tu_next(rng) % 4);
    int any = 0;
    for (int32_t b = 0; b < c.B; b++) {
        c.q_lens[b] = (int32_t)(tu_next(rng) % 7);
        const int32_t prefix = (int32_t)(tu_next(rng) % (uint64_t)(max_prefix + 1));
        c.prefixes[b] = tu_next(rng) % 4 == 0 ? 0 : prefix;
        any |= c.q_lens[b] > 0;
    }
    if (!any)
        c.q_lens[tu_next(rng) % (uint64_t)c.B] = 1 + (int32_t)(tu_next(rng) % 6);
    c.tree = (tu_tree)(tu_next(rng) % 4);
    c.seed = tu_next(rng);
    return c;
}

int32_t sh_stripe(const tu_problem *p, int32_t ranks, int kind, uint64_t *rng)
{
    if (kind == 0)
        return 1;
    if (kind == 1)
        return p->c.page_size;
    int32_t most = 1;
    for (int32_t b = 0; b < p->c.B; b++)
        most = p->kv_lens[b] > most ? p->kv_lens[b] : most;
    return (most + ranks - 1) / ranks + (int32_t)(tu_next(rng) % 4);
}

/* One rank's run: mlav_verify, or a plan for limits of its shard updated with host lengths. */
static mlav_status run_rank(mlav_context *ctx, const tu_problem *p, sh_rank *r, int for_limits)
{
    const mlav_tensors t = sh_rank_tensors(p, r);
    if (!for_limits)
        return mlav_verify(ctx, &r->prob, &t);
    mlav_limits lim = {.max_batch = p->c.B, .max_tokens = p->q_indptr[p->c.B], .max_q_len = 1,
                       .max_kv_len = 1};
    for (int32_t b = 0; b < p->c.B; b++) {
        lim.max_q_len = p->c.q_lens[b] > lim.max_q_len ? p->c.q_lens[b] : lim.max_q_len;
        lim.max_kv_len = p->kv_lens[b] > lim.max_kv_len ? p->kv_lens[b] : lim.max_kv_len;
    }
    /* the mask's row stride is the limits' max_q_len: the case's own (its widest request) */
    mlav_plan *plan = NULL;
    mlav_status s = mlav_plan_create_for_limits(ctx, &r->prob, &lim, &plan);
    if (s != MLAV_OK)
        return s;
    const size_t bytes = mlav_plan_workspace_bytes(plan);
    void *ws = NULL;
    if (bytes && posix_memalign(&ws, 256, bytes) != 0) {
        mlav_plan_free(plan);
        return MLAV_ERR_OUT_OF_MEMORY;
    }
    const mlav_lengths len = {.memory = MLAV_MEM_HOST, .batch = p->c.B,
                              .q_indptr = p->q_indptr, .kv_lens = p->kv_lens};
    s = mlav_plan_update(plan, &len, ws, bytes, NULL);
    if (s == MLAV_OK)
        s = mlav_run(plan, &t, ws, bytes, NULL);
    free(ws);
    mlav_plan_free(plan);
    return s;
}

int sh_verify_merged(mlav_context *ctx, tu_problem *p, int32_t ranks, int32_t stripe,
                     int for_limits, uint64_t seed, char *msg, size_t msg_len)
{
    sh_rank *r[8] = {0};
    int ok = ranks >= 2 && ranks <= 8;
    if (!ok)
        snprintf(msg, msg_len, "sh_verify_merged takes 2..8 ranks, not %d", ranks);
    for (int32_t k = 0; ok && k < ranks; k++) {
        r[k] = sh_rank_make(p, ranks, k, stripe, seed + (uint64_t)k);
        const mlav_status s = run_rank(ctx, p, r[k], for_limits);
        if (s != MLAV_OK) {
            snprintf(msg, msg_len, "rank %d of %d (stripe %d%s): status %d: %s", k, ranks,
                     stripe, for_limits ? ", plan for limits" : "", (int)s,
                     mlav_last_error(NULL));
            ok = 0;
        }
    }
    if (ok) {
        tu_poison(p);
        const mlav_status s = sh_merge(p, r, ranks);
        if (s != MLAV_OK) {
            snprintf(msg, msg_len, "merge: status %d: %s", (int)s, mlav_last_error(NULL));
            ok = 0;
        }
    }
    if (ok) {
        char inner[400];
        ok = tu_compare(p, tu_out_tol(p->c.dtype), tu_lse_tol(p->c.dtype), inner, sizeof inner);
        if (!ok)
            snprintf(msg, msg_len, "%d ranks, stripe %d%s: merged state against the oracle "
                     "of the whole cache: %s", ranks, stripe,
                     for_limits ? ", plan for limits" : "", inner);
    }
    for (int32_t k = 0; k < ranks; k++)
        sh_rank_free(r[k]);
    return ok;
}

int sh_run_grid(mlav_backend backend, const sh_grid *g)
{
    mlav_context *ctx = tu_context_or_skip(backend);
    uint64_t rng = tu_seeded(mlav_backend_name(backend));
    const int32_t page_sizes[] = {1, 16, 64};
    int n = 0, empties = 0;
    char msg[800], name[300];
    for (int32_t ranks = 2; ranks <= 4; ranks++)
        for (size_t ps = 0; ps < 3; ps++)
            for (int kind = 0; kind < 3; kind++)
                for (int rep = 0; rep < 2; rep++, n++) {
                    const sh_kind *k = &g->kinds[n % g->n_kinds];
                    const tu_case c = sh_draw_case(&rng, g->H[rep], g->Dl, g->Dr, page_sizes[ps],
                                                   k->dtype, k->kv_dtype, g->max_prefix);
                    tu_problem *p = tu_make(&c);
                    tu_reference(p);
                    const int32_t stripe = sh_stripe(p, ranks, kind, &rng);
                    if (!sh_verify_merged(ctx, p, ranks, stripe, rep == g->limits_rep,
                                          tu_next(&rng), msg, sizeof msg)) {
                        tu_case_name(&p->c, name, sizeof name);
                        fail_msg("%s: %s: %s", mlav_backend_name(backend), name, msg);
                    }
                    for (int32_t r = 0; r < ranks; r++)
                        for (int32_t b = 0; b < c.B; b++)
                            empties += c.q_lens[b] > 0 &&
                                       sh_rows_of(p->kv_lens[b], ranks, r, stripe) == 0;
                    tu_free(p);
                }
    print_message("%s: %d cases, %d empty rank states\n", mlav_backend_name(backend), n,
                  empties);
    mlav_context_free(ctx);
    return empties;
}
