/* mlaverify bench, the points: the presets, the --heads/--qlen/--prefix grid, and the layout of
 * one point (lengths, a shuffled page table, the draft-tree mask, the work it counts). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mlaverify.h"

static const int64_t ref_prefixes[6] = {256, 1024, 4096, 16384, 65536, 131072};
static const int32_t ref_qlens[] = {1, 9, 33};

/* Append the grid heads x q_lens x prefixes (q_len outer, prefix inner: one CSV run per line). */
static int add_grid(bench_config *out, int n, int max, int32_t B, int32_t H, int32_t page,
                    mlav_dtype d, const int32_t *qs, int nq, const int64_t *ps, int np)
{
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < np; j++) {
            if (n == max)
                return n;
            out[n++] = (bench_config){.B = B, .H = H, .q_len = qs[i], .page_size = page,
                                      .prefix = ps[j], .dtype = d, .kv_dtype = d,
                                      .spread = -1.0};
        }
    return n;
}

static int preset_configs(const char *name, bench_config *out, int max)
{
    int n = 0;
    const mlav_dtype bf = MLAV_DTYPE_BF16;
    if (!strcmp(name, "reference") || !strcmp(name, "full")) {
        n = add_grid(out, n, max, 1, 64, 1, bf, ref_qlens, 3, ref_prefixes, 6);
        if (!strcmp(name, "full")) {
            n = add_grid(out, n, max, 1, 16, 1, bf, ref_qlens, 3, ref_prefixes, 6);
            n = add_grid(out, n, max, 1, 128, 1, bf, ref_qlens, 3, ref_prefixes, 6);
            static const int32_t q9[] = {9};
            static const int64_t batch_ps[] = {4096, 32768};
            n = add_grid(out, n, max, 8, 16, 1, bf, q9, 1, batch_ps, 2);
            n = add_grid(out, n, max, 1, 64, 64, bf, ref_qlens, 3, ref_prefixes, 6);
        }
        return n;
    }
    if (!strcmp(name, "production")) {
        /* the shapes engines run: TP-sharded heads (Kimi K2's 64 and DeepSeek-V3's 128 over
         * TP8: 8 and 16 per GPU) and 64, a lone request with chains of 1 and 9, DFlash blocks of
         * 16 and EAGLE trees of 64, then batches of mixed lengths */
        static const int32_t hs[] = {8, 16, 64}, qs[] = {1, 9, 16, 64};
        static const int64_t ps[] = {4096, 32768, 131072};
        for (int h = 0; h < 3; h++)
            n = add_grid(out, n, max, 1, hs[h], 1, bf, qs, 4, ps, 3);
        static const int32_t bs[] = {16, 32}, q16[] = {16};
        static const int64_t bps[] = {4096, 32768};
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < 2; h++) {
                const int first = n;
                n = add_grid(out, n, max, bs[b], hs[h], 1, bf, q16, 1, bps, 2);
                for (int i = first; i < n; i++)
                    out[i].spread = 0.5;
            }
        return n;
    }
    if (!strcmp(name, "cpu")) {
        /* the CPU table covers full's points up to prefix 16384, in full's order */
        n = preset_configs("full", out, max);
        int k = 0;
        for (int i = 0; i < n; i++)
            if (out[i].prefix <= 16384)
                out[k++] = out[i];
        return k;
    }
    bench_usage_error("unknown preset '%s' (reference, full, production, cpu)", name);
    return -1;
}

static int base_points(const bench_args *a, int any_gpu, bench_config *cfg, int max)
{
    if (a->preset || !a->grid_opts)
        return preset_configs(a->preset ? a->preset : any_gpu ? "reference" : "cpu", cfg, max);
    int32_t hs[BENCH_MAX_LIST], qs[BENCH_MAX_LIST];
    int64_t prefixes[BENCH_MAX_LIST];
    int nh = a->nh, nq = a->nq, np = a->np;
    /* every value was range-checked when parsed: the narrowing below cannot wrap */
    for (int i = 0; i < nh; i++)
        hs[i] = (int32_t)a->heads[i];
    for (int i = 0; i < nq; i++)
        qs[i] = (int32_t)a->qlens[i];
    for (int i = 0; i < np; i++)
        prefixes[i] = a->prefixes[i];
    if (!nh)
        hs[0] = 64, nh = 1;
    if (!nq)
        qs[0] = 1, qs[1] = 9, qs[2] = 33, nq = 3;
    if (!np) {
        for (int i = 0; i < 6; i++)
            prefixes[i] = ref_prefixes[i];
        np = any_gpu ? 6 : 3;
    }
    int n = 0;
    for (int i = 0; i < nh; i++)
        n = add_grid(cfg, n, max, (int32_t)a->batch, hs[i], (int32_t)a->page, a->dtype, qs, nq,
                     prefixes, np);
    return n;
}

int bench_points(const bench_args *a, int any_gpu, bench_config *cfg, int max)
{
    static bench_config base[BENCH_MAX_POINTS];
    const int bmax = max / a->nkv < BENCH_MAX_POINTS ? max / a->nkv : BENCH_MAX_POINTS;
    const int nb = base_points(a, any_gpu, base, bmax);
    if (nb < 0)
        return -1;
    /* each point once per KV dtype, back to back: the variants meet the same clocks and heat */
    int n = 0;
    for (int i = 0; i < nb; i++)
        for (int k = 0; k < a->nkv; k++) {
            bench_config c = base[i];
            if (a->kv[k] == BENCH_KV_SAME || a->kv[k] == (int)c.dtype)
                c.kv_dtype = c.dtype;
            else if (a->kv[k] == MLAV_DTYPE_FP8_E4M3)
                c.kv_dtype = MLAV_DTYPE_FP8_E4M3;
            else {
                fprintf(stderr, "mlaverify bench: --kv-dtype %s with q dtype %s: the cache has "
                                "the q dtype (same) or is fp8\n",
                        mlav_dtype_name((mlav_dtype)a->kv[k]), mlav_dtype_name(c.dtype));
                return -1;
            }
            for (int j = n - k; j < n; j++)
                if (cfg[j].kv_dtype == c.kv_dtype) {
                    fprintf(stderr, "mlaverify bench: --kv-dtype names the %s cache twice\n",
                            mlav_dtype_name(c.kv_dtype));
                    return -1;
                }
            cfg[n++] = c;
        }
    return n;
}

int bench_same_point(const bench_config *a, const bench_config *b)
{
    return a->B == b->B && a->H == b->H && a->q_len == b->q_len &&
           a->page_size == b->page_size && a->prefix == b->prefix && a->dtype == b->dtype &&
           a->spread == b->spread;
}

int bench_same_kv_index(const bench_config *cfg, int n, int i)
{
    if (cfg[i].kv_dtype == cfg[i].dtype)
        return -1;
    for (int j = i - 1; j >= 0 && bench_same_point(&cfg[j], &cfg[i]); j--)
        if (cfg[j].kv_dtype == cfg[j].dtype)
            return j;
    for (int j = i + 1; j < n && bench_same_point(&cfg[j], &cfg[i]); j++)
        if (cfg[j].kv_dtype == cfg[j].dtype)
            return j;
    return -1;
}

/* Request b's prefix: the config's, or with a spread, drawn around it (the same batch for every
 * run and backend of a config). */
static int64_t request_prefix(const bench_config *c, const bench_opts *o, int b)
{
    const double spread = c->spread >= 0.0 ? c->spread : o->spread;
    if (spread <= 0.0)
        return c->prefix;
    uint64_t x = o->seed ^ 0x9E3779B97F4A7C15ull * (uint64_t)(b + 1) ^ (uint64_t)c->prefix;
    const double u = (double)(bench_splitmix64(&x) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    const int64_t p = llround((double)c->prefix * (1.0 + spread * u));
    return p < 0 ? 0 : p;
}

int bench_layout_make(bench_layout *L, const bench_config *c, const bench_opts *o)
{
    memset(L, 0, sizeof *L);
    if (c->B > BENCH_MAX_BATCH) {
        fprintf(stderr, "mlaverify bench: batch %d > %d\n", c->B, BENCH_MAX_BATCH);
        return -1;
    }
    int64_t pages[BENCH_MAX_BATCH], max_pages = 0, num_pages = 0;
    const int32_t T = c->B * c->q_len;
    /* the one place the bench sizes a KV element: the traffic below and the cache it allocates */
    const size_t kv_es = mlav_dtype_size(c->kv_dtype);
    const double es = (double)mlav_dtype_size(c->dtype), row = o->Dl + o->Dr;
    for (int b = 0; b < c->B; b++) {
        const int64_t prefix = request_prefix(c, o, b), kv = prefix + c->q_len;
        if (kv > INT32_MAX) {
            fprintf(stderr, "mlaverify bench: too long a request\n");
            return -1;
        }
        L->q_indptr[b + 1] = L->q_indptr[b] + c->q_len;
        L->kv_lens[b] = (int32_t)kv;
        pages[b] = (kv + c->page_size - 1) / c->page_size;
        max_pages = pages[b] > max_pages ? pages[b] : max_pages;
        num_pages += pages[b];
        L->flops += 2.0 * c->H * c->q_len * (double)kv * (double)(o->Dl + o->Dr + o->Dl);
        L->bytes += (double)kv_es * (double)prefix * row;
    }
    L->bytes += es * (double)T * c->H * (row + o->Dl);
    if (max_pages > INT32_MAX || num_pages > INT32_MAX) {
        fprintf(stderr, "mlaverify bench: too many pages\n");
        return -1;
    }
    L->max_pages = (int32_t)max_pages;
    L->num_pages = num_pages;
    uint64_t rng = o->seed ^ (uint64_t)c->prefix * 31u ^ (uint64_t)c->q_len;
    /* Fisher-Yates over all page ids, dealt out to the requests in order */
    int32_t *ids = malloc((size_t)num_pages * sizeof(int32_t));
    L->page_table = calloc((size_t)c->B * (size_t)max_pages, sizeof(int32_t));
    if (!ids || !L->page_table) {
        free(ids);
        fprintf(stderr, "mlaverify bench: out of host memory\n");
        return -1;
    }
    for (int64_t i = 0; i < num_pages; i++)
        ids[i] = (int32_t)i;
    for (int64_t i = num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(bench_splitmix64(&rng) % (uint64_t)(i + 1));
        int32_t tmp = ids[i];
        ids[i] = ids[j];
        ids[j] = tmp;
    }
    for (int64_t b = 0, k = 0; b < c->B; k += pages[b], b++)
        memcpy(L->page_table + b * max_pages, ids + k, (size_t)pages[b] * sizeof(int32_t));
    free(ids);
    L->words = mlav_tree_mask_words(c->q_len);
    if (o->tree && c->q_len > 0) {
        L->tree_mask = calloc((size_t)T * (size_t)L->words, sizeof(uint32_t));
        int32_t *parents = malloc((size_t)c->q_len * sizeof(int32_t));
        if (!L->tree_mask || !parents) {
            free(parents);
            fprintf(stderr, "mlaverify bench: out of host memory\n");
            return -1;
        }
        /* half the nodes continue the previous one, half branch off an earlier node: a tree
         * with both depth and width, like EAGLE's */
        for (int b = 0; b < c->B; b++) {
            parents[0] = -1;
            for (int i = 1; i < c->q_len; i++)
                parents[i] = (bench_splitmix64(&rng) & 1) ? i - 1 : (int32_t)(bench_splitmix64(&rng) % (uint64_t)i);
            if (mlav_tree_mask_from_parents(c->q_len, parents, L->words,
                                            L->tree_mask + (size_t)b * c->q_len * L->words) != MLAV_OK) {
                fprintf(stderr, "mlaverify bench: tree mask: %s\n", mlav_last_error(NULL));
                free(parents);
                return -1;
            }
        }
        free(parents);
    }
    L->prob = (mlav_problem){.num_heads = c->H, .d_latent = o->Dl, .d_rope = o->Dr,
                             .softmax_scale = 1.0f / sqrtf(192.0f), .dtype = c->dtype,
                             .page_size = c->page_size, .batch = c->B,
                             .q_indptr = L->q_indptr, .kv_lens = L->kv_lens,
                             .max_pages = L->max_pages, .kv_dtype = c->kv_dtype};
    size_t W = (size_t)(o->Dl + o->Dr);
    L->q_elems = (size_t)T * (size_t)c->H * W;
    L->kv_elems = (size_t)L->num_pages * (size_t)c->page_size * W;
    L->kv_bytes = L->kv_elems * kv_es;
    L->out_elems = (size_t)T * (size_t)c->H * (size_t)o->Dl;
    L->lse_elems = (size_t)T * (size_t)c->H;
    return 0;
}

void bench_layout_free(bench_layout *L)
{
    free(L->page_table);
    free(L->tree_mask);
}

