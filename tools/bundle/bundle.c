/* Golden bundles: the named tensors, their shapes and values checked, read and write. */
#include "bundle.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"
#include "safetensors.h"

/* Dims limits of the library's validation (validate.c), restated so a bundle that passes here
 * is a problem mlav_problem_validate accepts. */
#define MAX_HEADS 4096
#define MAX_DIM 16384

static const char *const tensor_names[] = {
    "q",
    "kv_cache",
    "page_table",
    "q_indptr",
    "kv_lens",
    "tree_parents",
    "draft_tokens",
    "softmax_scale",
    "kv_scale",
    "expect_out",
    "expect_lse",
    "expect_tokens",
    "expect_accept",
    "expect_margin",
};
static const char *const expect_names[] = {"expect_out", "expect_lse", "expect_tokens",
                                           "expect_accept", "expect_margin"};
#define N_EXPECT ((int)(sizeof expect_names / sizeof expect_names[0]))

const char *mlav_bundle_dtype_name(mlav_dtype d)
{
    switch (d) {
    case MLAV_DTYPE_F32: return "F32";
    case MLAV_DTYPE_BF16: return "BF16";
    case MLAV_DTYPE_F16: return "F16";
    case MLAV_DTYPE_FP8_E4M3: return "F8_E4M3";
    }
    return "?";
}

void mlav_bundle_free(mlav_bundle *b)
{
    if (!b)
        return;
    free(b->source);
    free(b->q);
    free(b->kv_cache);
    free(b->page_table);
    free(b->q_indptr);
    free(b->kv_lens);
    free(b->tree_parents);
    free(b->draft_tokens);
    free(b->expect_out);
    free(b->expect_lse);
    free(b->expect_tokens);
    free(b->expect_accept);
    free(b->expect_margin);
    memset(b, 0, sizeof *b);
}

mlav_status mlav_bundle_wrap_error(mlav_status s, const char *prefix)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", mlav_get_error());
    return mlav_set_error(s, "%s: %s", prefix, why);
}

/* ---- metadata ----------------------------------------------------------------------------- */

/* A decimal integer with nothing else around it (no sign, no spaces): what the writers emit. */
static int parse_u64(const char *s, uint64_t *v)
{
    if (!s || !*s || *s < '0' || *s > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end)
        return 0;
    *v = x;
    return 1;
}

static mlav_status meta_int(const mlav_st_file *f, const char *key, int64_t lo, int64_t hi,
                            int32_t *out)
{
    const char *v = mlav_st_meta_get(f, key);
    uint64_t x;
    if (!v)
        return mlav_set_error(MLAV_ERR_FORMAT, "metadata '%s' is missing", key);
    if (!parse_u64(v, &x) || (int64_t)x < lo || (int64_t)x > hi || x > (uint64_t)INT32_MAX)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "metadata '%s' = \"%.32s\" is not a decimal integer in [%lld, %lld]",
                              key, v, (long long)lo, (long long)hi);
    *out = (int32_t)x;
    return MLAV_OK;
}

static mlav_status read_metadata(const mlav_st_file *f, mlav_bundle *b)
{
    const char *format = mlav_st_meta_get(f, "format");
    if (!format)
        return mlav_set_error(MLAV_ERR_FORMAT, "metadata 'format' is missing: not a mlaverify "
                                               "bundle (expected \"" MLAV_BUNDLE_FORMAT "\")");
    if (strcmp(format, MLAV_BUNDLE_FORMAT) != 0)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "metadata 'format' is \"%.64s\", not \"" MLAV_BUNDLE_FORMAT "\"",
                              format);
    const char *version = mlav_st_meta_get(f, "version");
    uint64_t v;
    if (!version)
        return mlav_set_error(MLAV_ERR_FORMAT, "metadata 'version' is missing");
    if (!parse_u64(version, &v) || v != MLAV_BUNDLE_VERSION)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "bundle version \"%.32s\" is unknown: this mlaverify reads version "
                              "%d",
                              version, MLAV_BUNDLE_VERSION);
    mlav_status s;
    if ((s = meta_int(f, "num_heads", 1, MAX_HEADS, &b->H)) != MLAV_OK ||
        (s = meta_int(f, "d_latent", 1, MAX_DIM, &b->Dl)) != MLAV_OK ||
        (s = meta_int(f, "d_rope", 0, MAX_DIM, &b->Dr)) != MLAV_OK ||
        (s = meta_int(f, "vocab", 2, MLAV_BUNDLE_MAX_VOCAB, &b->vocab)) != MLAV_OK)
        return s;
    b->W = b->Dl + b->Dr;
    const char *seed = mlav_st_meta_get(f, "readout_seed");
    if (!seed)
        return mlav_set_error(MLAV_ERR_FORMAT, "metadata 'readout_seed' is missing");
    if (!parse_u64(seed, &b->readout_seed))
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "metadata 'readout_seed' = \"%.32s\" is not a decimal integer in "
                              "[0, 2^64)",
                              seed);
    const char *source = mlav_st_meta_get(f, "source");
    size_t n = source ? strlen(source) + 1 : 1;
    b->source = malloc(n);
    if (!b->source)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(b->source, source ? source : "", n);
    return MLAV_OK;
}

/* ---- tensors ------------------------------------------------------------------------------ */

/* "[9, 16, 576]"; a negative (any) dim reads "?" */
static void shape_text(int32_t rank, const int64_t *shape, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int32_t i = 0; i < rank && n < len; i++) {
        if (shape[i] < 0)
            n += (size_t)snprintf(buf + n, len - n, "%s?", i ? ", " : "");
        else
            n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* Check a tensor's dtype and shape. `names` says what each dim is ("T", "num_heads", ...) for
 * the sentence; want[k] < 0 means "any". */
static mlav_status expect_tensor(const mlav_st_tensor *t, const char *dtype, int32_t rank,
                                 const int64_t *want, const char *names)
{
    if (strcmp(t->dtype, dtype) != 0)
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor '%s' has dtype %s, expected %s", t->name,
                              t->dtype, dtype);
    int ok = t->rank == rank;
    for (int32_t k = 0; ok && k < rank; k++)
        ok = want[k] < 0 || t->shape[k] == want[k];
    if (!ok) {
        char got[160], exp[160];
        shape_text(t->rank, t->shape, got, sizeof got);
        shape_text(rank, want, exp, sizeof exp);
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor '%s' has shape %s, expected %s = %s",
                              t->name, got, names, exp);
    }
    return MLAV_OK;
}

/* Move a tensor's data into the bundle (the container no longer owns it). */
static void *take(mlav_st_tensor *t)
{
    void *d = t->data;
    t->data = NULL;
    return d;
}

static mlav_status from_container(mlav_st_file *f, mlav_bundle_mode mode, mlav_bundle *b)
{
    mlav_status s = read_metadata(f, b);
    if (s != MLAV_OK)
        return s;
    for (int32_t i = 0; i < f->num_tensors; i++) {
        int known = 0;
        for (size_t k = 0; k < sizeof tensor_names / sizeof tensor_names[0]; k++)
            known |= strcmp(f->tensors[i].name, tensor_names[k]) == 0;
        if (!known)
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "unknown tensor '%.64s' (a bundle holds q, kv_cache, page_table, "
                                  "q_indptr, kv_lens, tree_parents, draft_tokens, softmax_scale, "
                                  "kv_scale (FP8 caches) and expect_out, expect_lse, "
                                  "expect_tokens, expect_accept, expect_margin)",
                                  f->tensors[i].name);
    }
    static const char *const required[] = {"q",       "kv_cache",     "page_table",   "q_indptr",
                                           "kv_lens", "tree_parents", "softmax_scale"};
    for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
        if (!mlav_st_find(f, required[k]))
            return mlav_set_error(MLAV_ERR_FORMAT, "missing tensor '%s'", required[k]);
    int n_expect = 0;
    for (int k = 0; k < N_EXPECT; k++)
        n_expect += mlav_st_find(f, expect_names[k]) != NULL;
    if (mode == MLAV_BUNDLE_FULL || n_expect > 0) {
        for (int k = 0; k < N_EXPECT; k++)
            if (!mlav_st_find(f, expect_names[k]))
                return mlav_set_error(MLAV_ERR_FORMAT,
                                      mode == MLAV_BUNDLE_FULL
                                          ? "missing tensor '%s' (a bundle to check needs its "
                                            "expectations: add them with mlaverify gen "
                                            "--expect-from)"
                                          : "missing tensor '%s' (the other expectations are "
                                            "present)",
                                      expect_names[k]);
    }
    if (mode == MLAV_BUNDLE_FULL && !mlav_st_find(f, "draft_tokens"))
        return mlav_set_error(MLAV_ERR_FORMAT, "missing tensor 'draft_tokens'");

    /* q fixes dtype and T; kv_cache the pool; page_table B and max_pages */
    mlav_st_tensor *q = mlav_st_find(f, "q");
    if (!strcmp(q->dtype, "F32"))
        b->dtype = MLAV_DTYPE_F32;
    else if (!strcmp(q->dtype, "BF16"))
        b->dtype = MLAV_DTYPE_BF16;
    else if (!strcmp(q->dtype, "F16"))
        b->dtype = MLAV_DTYPE_F16;
    else
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor 'q' has dtype %s, expected BF16, F16 or F32",
                              q->dtype);
    const char *dt = q->dtype;
    int64_t w3[3] = {-1, b->H, b->W};
    if ((s = expect_tensor(q, dt, 3, w3, "[T, num_heads, d_latent + d_rope]")) != MLAV_OK)
        return s;
    if (q->shape[0] < 1 || q->shape[0] > INT32_MAX)
        return mlav_set_error(MLAV_ERR_FORMAT, "tensor 'q' has %lld rows (T); expected 1 to %d",
                              (long long)q->shape[0], INT32_MAX);
    b->T = (int32_t)q->shape[0];

    /* the cache has q's dtype, or is FP8 with its scale beside it (and only then) */
    mlav_st_tensor *kv = mlav_st_find(f, "kv_cache"), *ks = mlav_st_find(f, "kv_scale");
    if (!strcmp(kv->dtype, "F8_E4M3"))
        b->kv_dtype = MLAV_DTYPE_FP8_E4M3;
    else if (!strcmp(kv->dtype, dt))
        b->kv_dtype = b->dtype;
    else
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor 'kv_cache' has dtype %s but q has %s: they share one dtype, "
                              "or the cache is F8_E4M3 (with a kv_scale tensor)",
                              kv->dtype, dt);
    if (b->kv_dtype == MLAV_DTYPE_FP8_E4M3 && !ks)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor 'kv_cache' is F8_E4M3 but there is no tensor 'kv_scale': an "
                              "FP8 element's value is e4m3(byte) x kv_scale, so the bundle "
                              "carries its scale (F32 [1])");
    if (b->kv_dtype != MLAV_DTYPE_FP8_E4M3 && ks)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor 'kv_scale' is only for an F8_E4M3 kv_cache; this one is %s",
                              kv->dtype);
    if (ks) {
        if (strcmp(ks->dtype, "F32") != 0 ||
            !(ks->rank == 0 || (ks->rank == 1 && ks->shape[0] == 1)))
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "tensor 'kv_scale' must be one F32 value of shape [1]");
        memcpy(&b->kv_scale, ks->data, sizeof(float));
    }
    int64_t wkv[3] = {-1, -1, b->W};
    if ((s = expect_tensor(kv, kv->dtype, 3, wkv, "[num_pages, page_size, d_latent + d_rope]")) !=
        MLAV_OK)
        return s;
    if (kv->shape[0] < 1 || kv->shape[1] < 1 || kv->shape[1] > INT32_MAX)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor 'kv_cache' has %lld pages of %lld rows; both must be >= 1",
                              (long long)kv->shape[0], (long long)kv->shape[1]);
    b->num_pages = kv->shape[0];
    b->page_size = (int32_t)kv->shape[1];

    mlav_st_tensor *pt = mlav_st_find(f, "page_table");
    int64_t wpt[2] = {-1, -1};
    if ((s = expect_tensor(pt, "I32", 2, wpt, "[B, max_pages]")) != MLAV_OK)
        return s;
    if (pt->shape[0] < 1 || pt->shape[1] < 1 || pt->shape[0] >= INT32_MAX ||
        pt->shape[1] > INT32_MAX)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor 'page_table' has shape [%lld, %lld]; B and max_pages must "
                              "be >= 1",
                              (long long)pt->shape[0], (long long)pt->shape[1]);
    b->B = (int32_t)pt->shape[0];
    b->max_pages = (int32_t)pt->shape[1];

    int64_t wB1[1] = {(int64_t)b->B + 1}, wB[1] = {b->B}, wT[1] = {b->T};
    mlav_st_tensor *qi = mlav_st_find(f, "q_indptr"), *kl = mlav_st_find(f, "kv_lens");
    mlav_st_tensor *tp = mlav_st_find(f, "tree_parents"), *dtk = mlav_st_find(f, "draft_tokens");
    mlav_st_tensor *sc = mlav_st_find(f, "softmax_scale");
    if ((s = expect_tensor(qi, "I32", 1, wB1, "[B + 1] (B = page_table rows)")) != MLAV_OK ||
        (s = expect_tensor(kl, "I32", 1, wB, "[B] (B = page_table rows)")) != MLAV_OK ||
        (s = expect_tensor(tp, "I32", 1, wT, "[T] (T = q rows)")) != MLAV_OK ||
        (dtk && (s = expect_tensor(dtk, "I32", 1, wT, "[T] (T = q rows)")) != MLAV_OK))
        return s;
    if (strcmp(sc->dtype, "F32") != 0 || !(sc->rank == 0 || (sc->rank == 1 && sc->shape[0] == 1)))
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "tensor 'softmax_scale' must be one F32 value of shape [1]");
    memcpy(&b->softmax_scale, sc->data, sizeof(float));

    b->q = take(q);
    b->kv_cache = take(kv);
    b->page_table = take(pt);
    b->q_indptr = take(qi);
    b->kv_lens = take(kl);
    b->tree_parents = take(tp);
    b->draft_tokens = dtk ? take(dtk) : NULL;

    /* q_indptr's values fix max_q_len, which expect_accept's shape needs */
    if (b->q_indptr[0] != 0)
        return mlav_set_error(MLAV_ERR_FORMAT, "q_indptr[0] = %d, expected 0", b->q_indptr[0]);
    for (int32_t r = 0; r < b->B; r++) {
        int64_t len = (int64_t)b->q_indptr[r + 1] - b->q_indptr[r];
        if (len < 1)
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "q_indptr gives request %d a q_len of %lld: every request has at "
                                  "least its root node",
                                  r, (long long)len);
        if (len > MLAV_BUNDLE_MAX_Q_LEN)
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "q_indptr gives request %d a q_len of %lld, more than the %d a "
                                  "bundle may hold (the dense tree mask the check builds grows "
                                  "as q_len^2)",
                                  r, (long long)len, MLAV_BUNDLE_MAX_Q_LEN);
        if (len > b->max_q_len)
            b->max_q_len = (int32_t)len;
    }
    if (b->q_indptr[b->B] != b->T)
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "q_indptr[B = %d] = %d but q has T = %d rows: the lengths disagree",
                              b->B, b->q_indptr[b->B], b->T);

    if (n_expect > 0) {
        mlav_st_tensor *eo = mlav_st_find(f, "expect_out"), *el = mlav_st_find(f, "expect_lse");
        mlav_st_tensor *et = mlav_st_find(f, "expect_tokens");
        mlav_st_tensor *ea = mlav_st_find(f, "expect_accept");
        mlav_st_tensor *em = mlav_st_find(f, "expect_margin");
        int64_t weo[3] = {b->T, b->H, b->Dl}, wel[2] = {b->T, b->H};
        int64_t wea[2] = {b->B, b->max_q_len};
        if ((s = expect_tensor(eo, "F32", 3, weo, "[T, num_heads, d_latent]")) != MLAV_OK ||
            (s = expect_tensor(el, "F32", 2, wel, "[T, num_heads]")) != MLAV_OK ||
            (s = expect_tensor(et, "I32", 1, wT, "[T]")) != MLAV_OK ||
            (s = expect_tensor(ea, "I32", 2, wea, "[B, max_q_len]")) != MLAV_OK ||
            (s = expect_tensor(em, "F32", 1, wT, "[T]")) != MLAV_OK)
            return s;
        b->expect_out = take(eo);
        b->expect_lse = take(el);
        b->expect_tokens = take(et);
        b->expect_accept = take(ea);
        b->expect_margin = take(em);
    }
    return MLAV_OK;
}

mlav_status mlav_bundle_validate(const mlav_bundle *b, mlav_bundle_mode mode)
{
    if (!b->q || !b->kv_cache || !b->page_table || !b->q_indptr || !b->kv_lens || !b->tree_parents)
        return mlav_set_error(MLAV_ERR_FORMAT, "the bundle lacks an input tensor");
    if (mode == MLAV_BUNDLE_FULL && (!b->draft_tokens || !b->expect_out))
        return mlav_set_error(MLAV_ERR_FORMAT, "the bundle lacks draft_tokens or expectations");
    if (!isfinite(b->softmax_scale))
        return mlav_set_error(MLAV_ERR_FORMAT, "softmax_scale = %g is not finite",
                              (double)b->softmax_scale);
    if (mlav_bundle_kv_dtype(b) == MLAV_DTYPE_FP8_E4M3 &&
        !(isfinite(b->kv_scale) && b->kv_scale > 0.0f))
        return mlav_set_error(MLAV_ERR_FORMAT,
                              "kv_scale = %g must be finite and > 0 (an FP8 element's value is "
                              "e4m3(byte) x kv_scale)",
                              (double)b->kv_scale);
    int64_t capacity = (int64_t)b->max_pages * b->page_size;
    for (int32_t r = 0; r < b->B; r++) {
        int32_t q_len = mlav_bundle_q_len(b, r), kv = b->kv_lens[r];
        if (kv < q_len || kv > capacity)
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "kv_lens[%d] = %d must be in [q_len = %d, max_pages * page_size "
                                  "= %lld]",
                                  r, kv, q_len, (long long)capacity);
        int64_t pages = ((int64_t)kv + b->page_size - 1) / b->page_size;
        const int32_t *row = b->page_table + (size_t)r * (size_t)b->max_pages;
        for (int64_t k = 0; k < pages; k++)
            if (row[k] < 0 || row[k] >= b->num_pages)
                return mlav_set_error(MLAV_ERR_FORMAT,
                                      "page_table[%d][%lld] = %d is outside [0, num_pages = %lld) "
                                      "(kv_cache's first dim)",
                                      r, (long long)k, row[k], (long long)b->num_pages);
        const int32_t *par = b->tree_parents + b->q_indptr[r];
        for (int32_t i = 0; i < q_len; i++) {
            int ok = i == 0 ? par[0] == -1 : (par[i] >= 0 && par[i] < i);
            if (!ok)
                return mlav_set_error(MLAV_ERR_FORMAT,
                                      "tree_parents[%d] = %d (request %d, node %d) must be %s",
                                      b->q_indptr[r] + i, par[i], r, i,
                                      i == 0 ? "-1 (the root)" : "a node before it, in [0, node)");
        }
    }
    for (int32_t t = 0; b->draft_tokens && t < b->T; t++)
        if (b->draft_tokens[t] < 0 || b->draft_tokens[t] >= b->vocab)
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "draft_tokens[%d] = %d is outside [0, vocab = %d)", t,
                                  b->draft_tokens[t], b->vocab);
    if (!b->expect_out)
        return MLAV_OK;
    for (int32_t t = 0; t < b->T; t++) {
        int32_t tok = b->expect_tokens[t];
        float m = b->expect_margin[t];
        if (tok < -1 || tok >= b->vocab)
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "expect_tokens[%d] = %d is outside [0, vocab = %d) (or -1 for a "
                                  "NaN row)",
                                  t, tok, b->vocab);
        if (tok >= 0 ? !(isfinite(m) && m >= 0.0f) : !isnan(m))
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "expect_margin[%d] = %g must be finite and >= 0 (NaN only where "
                                  "expect_tokens is -1)",
                                  t, (double)m);
        /* -1 means "the oracle's out row is not finite, so no token": on any other row it
         * would switch that node's token and path checks off */
        if (tok == -1) {
            const float *row = b->expect_out + (size_t)t * (size_t)b->H * (size_t)b->Dl;
            int finite = 1;
            for (size_t k = 0; finite && k < (size_t)b->H * (size_t)b->Dl; k++)
                finite = isfinite(row[k]);
            if (finite)
                return mlav_set_error(MLAV_ERR_FORMAT,
                                      "expect_tokens[%d] = -1 but expect_out's row %d is finite: "
                                      "-1 (no token) is only for a row whose out is NaN or "
                                      "infinite, where the readout has no argmax",
                                      t, t);
        }
    }
    for (int32_t r = 0; r < b->B; r++) {
        int32_t q_len = mlav_bundle_q_len(b, r);
        const int32_t *row = b->expect_accept + (size_t)r * (size_t)b->max_q_len;
        const int32_t *par = b->tree_parents + b->q_indptr[r];
        if (row[0] != 0)
            return mlav_set_error(MLAV_ERR_FORMAT,
                                  "expect_accept[%d][0] = %d: every accepted path starts at node 0",
                                  r, row[0]);
        int ended = 0;
        for (int32_t k = 1; k < b->max_q_len; k++) {
            if (row[k] == -1) {
                ended = 1;
                continue;
            }
            if (ended || k >= q_len || row[k] < 0 || row[k] >= q_len || par[row[k]] != row[k - 1])
                return mlav_set_error(
                    MLAV_ERR_FORMAT,
                    "expect_accept[%d][%d] = %d is not a child of the node before "
                    "it on a path from the root, nor -1 padding",
                    r, k, row[k]);
        }
    }
    return MLAV_OK;
}

mlav_status mlav_bundle_read(const char *path, mlav_bundle_mode mode, mlav_bundle *b)
{
    memset(b, 0, sizeof *b);
    mlav_st_file f;
    mlav_status s = mlav_st_read(path, &f);
    if (s != MLAV_OK)
        return s;
    s = from_container(&f, mode, b);
    mlav_st_free(&f);
    if (s == MLAV_OK)
        s = mlav_bundle_validate(b, mode);
    if (s == MLAV_OK) {
        /* the library's own rules, so that every bundle read is a problem it accepts */
        mlav_problem p = mlav_bundle_problem(b);
        mlav_problem_info info;
        s = mlav_problem_validate(&p, &info);
        mlav_problem_info_free(&info);
        if (s != MLAV_OK)
            s = mlav_bundle_wrap_error(MLAV_ERR_FORMAT, "not a valid verify problem");
    }
    if (s != MLAV_OK)
        mlav_bundle_free(b);
    return s;
}

/* ---- writing ------------------------------------------------------------------------------ */

static mlav_status add_copy(mlav_st_file *f, const char *name, const char *dtype, int32_t rank,
                            const int64_t *shape, const void *src, size_t bytes)
{
    void *d = malloc(bytes ? bytes : 1);
    if (!d)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory writing '%s'", name);
    memcpy(d, src, bytes);
    return mlav_st_add_tensor(f, name, dtype, rank, shape, d);
}

mlav_status mlav_bundle_write(const char *path, const mlav_bundle *b)
{
    mlav_st_file f = {0};
    char num[32];
    mlav_status s = MLAV_OK;
#define META(k, fmt, v)                                                                            \
    do {                                                                                           \
        snprintf(num, sizeof num, fmt, v);                                                         \
        if (s == MLAV_OK)                                                                          \
            s = mlav_st_add_meta(&f, k, num);                                                      \
    } while (0)
    s = mlav_st_add_meta(&f, "format", MLAV_BUNDLE_FORMAT);
    META("version", "%d", MLAV_BUNDLE_VERSION);
    META("num_heads", "%d", b->H);
    META("d_latent", "%d", b->Dl);
    META("d_rope", "%d", b->Dr);
    META("vocab", "%d", b->vocab);
    META("readout_seed", "%llu", (unsigned long long)b->readout_seed);
#undef META
    if (s == MLAV_OK)
        s = mlav_st_add_meta(&f, "source", b->source ? b->source : "");

    const size_t T = (size_t)b->T, B = (size_t)b->B, H = (size_t)b->H;
    const mlav_dtype kv_dtype = mlav_bundle_kv_dtype(b);
    const size_t esz = mlav_dtype_size(b->dtype), kv_esz = mlav_dtype_size(kv_dtype);
    const char *dt = mlav_bundle_dtype_name(b->dtype);
    const int fp8 = kv_dtype == MLAV_DTYPE_FP8_E4M3;
    int64_t one[1] = {1}, sB1[1] = {b->B + 1}, sB[1] = {b->B}, sT[1] = {b->T};
    int64_t spt[2] = {b->B, b->max_pages}, sacc[2] = {b->B, b->max_q_len};
    int64_t slse[2] = {b->T, b->H}, sout[3] = {b->T, b->H, b->Dl};
    int64_t sq[3] = {b->T, b->H, b->W}, skv[3] = {b->num_pages, b->page_size, b->W};
    /* 4-byte tensors first, then q, then kv_cache (2 or 1 bytes an element): every tensor
     * then starts aligned to its element size without the gaps safetensors forbids */
    if (s == MLAV_OK)
        s = add_copy(&f, "softmax_scale", "F32", 1, one, &b->softmax_scale, 4);
    if (s == MLAV_OK && fp8)
        s = add_copy(&f, "kv_scale", "F32", 1, one, &b->kv_scale, 4);
    if (s == MLAV_OK)
        s = add_copy(&f, "q_indptr", "I32", 1, sB1, b->q_indptr, 4 * (B + 1));
    if (s == MLAV_OK)
        s = add_copy(&f, "kv_lens", "I32", 1, sB, b->kv_lens, 4 * B);
    if (s == MLAV_OK)
        s = add_copy(&f, "page_table", "I32", 2, spt, b->page_table, 4 * B * (size_t)b->max_pages);
    if (s == MLAV_OK)
        s = add_copy(&f, "tree_parents", "I32", 1, sT, b->tree_parents, 4 * T);
    if (s == MLAV_OK && b->draft_tokens)
        s = add_copy(&f, "draft_tokens", "I32", 1, sT, b->draft_tokens, 4 * T);
    if (s == MLAV_OK && b->expect_out) {
        s = add_copy(&f, "expect_tokens", "I32", 1, sT, b->expect_tokens, 4 * T);
        if (s == MLAV_OK)
            s = add_copy(&f, "expect_accept", "I32", 2, sacc, b->expect_accept,
                         4 * B * (size_t)b->max_q_len);
        if (s == MLAV_OK)
            s = add_copy(&f, "expect_margin", "F32", 1, sT, b->expect_margin, 4 * T);
        if (s == MLAV_OK)
            s = add_copy(&f, "expect_lse", "F32", 2, slse, b->expect_lse, 4 * T * H);
        if (s == MLAV_OK)
            s = add_copy(&f, "expect_out", "F32", 3, sout, b->expect_out,
                         4 * T * H * (size_t)b->Dl);
    }
    if (s == MLAV_OK)
        s = add_copy(&f, "q", dt, 3, sq, b->q, esz * T * H * (size_t)b->W);
    if (s == MLAV_OK)
        s = add_copy(&f, "kv_cache", mlav_bundle_dtype_name(kv_dtype), 3, skv, b->kv_cache,
                     kv_esz * (size_t)b->num_pages * (size_t)b->page_size * (size_t)b->W);
    if (s == MLAV_OK)
        s = mlav_st_write(path, &f);
    mlav_st_free(&f);
    return s;
}

/* ---- views -------------------------------------------------------------------------------- */

mlav_problem mlav_bundle_problem(const mlav_bundle *b)
{
    return (mlav_problem){
        .num_heads = b->H,
        .d_latent = b->Dl,
        .d_rope = b->Dr,
        .softmax_scale = b->softmax_scale,
        .dtype = b->dtype,
        .page_size = b->page_size,
        .batch = b->B,
        .q_indptr = b->q_indptr,
        .kv_lens = b->kv_lens,
        .max_pages = b->max_pages,
        .kv_dtype = b->kv_dtype,
    };
}

mlav_dtype mlav_bundle_kv_dtype(const mlav_bundle *b)
{
    const mlav_problem p = mlav_bundle_problem(b);
    return mlav_problem_kv_dtype(&p);
}

mlav_tensors mlav_bundle_tensors(const mlav_bundle *b, const uint32_t *mask, void *out,
                                 float *lse)
{
    return (mlav_tensors){
        .memory = MLAV_MEM_HOST,
        .q = b->q,
        .kv_cache = b->kv_cache,
        .num_pages = b->num_pages,
        .page_table = b->page_table,
        .tree_mask = mask,
        .out = out,
        .lse = lse,
        .kv_scale = b->kv_scale,
    };
}

mlav_status mlav_bundle_tree_mask(const mlav_bundle *b, uint32_t **mask)
{
    int32_t words = mlav_tree_mask_words(b->max_q_len);
    *mask = calloc((size_t)b->T * (size_t)words, sizeof(uint32_t));
    if (!*mask)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory for the tree mask");
    for (int32_t r = 0; r < b->B; r++) {
        mlav_status s =
            mlav_tree_mask_from_parents(mlav_bundle_q_len(b, r), b->tree_parents + b->q_indptr[r],
                                        words, *mask + (size_t)b->q_indptr[r] * (size_t)words);
        if (s != MLAV_OK) {
            free(*mask);
            *mask = NULL;
            char where[32];
            snprintf(where, sizeof where, "request %d", r);
            return mlav_bundle_wrap_error(MLAV_ERR_FORMAT, where);
        }
    }
    return MLAV_OK;
}

void mlav_bundle_describe(const mlav_bundle *b, char *buf, size_t len)
{
    /* long batches are cut after a few requests: the line must stay readable */
    const int32_t shown = b->B < 6 ? b->B : 6;
    size_t n = (size_t)snprintf(buf, len, "h=%d %s ", b->H, mlav_dtype_name(b->dtype));
    if (mlav_bundle_kv_dtype(b) == MLAV_DTYPE_FP8_E4M3 && n < len)
        n += (size_t)snprintf(buf + n, len - n, "kv=%s*%g ", mlav_dtype_name(b->kv_dtype),
                              (double)b->kv_scale);
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, "page=%d B=%d q=", b->page_size, b->B);
    for (int32_t r = 0; r < shown && n < len; r++)
        n += (size_t)snprintf(buf + n, len - n, "%s%d", r ? "+" : "", mlav_bundle_q_len(b, r));
    if (b->B > shown && n < len)
        n += (size_t)snprintf(buf + n, len - n, "+...");
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, " prefix=");
    for (int32_t r = 0; r < shown && n < len; r++)
        n += (size_t)snprintf(buf + n, len - n, "%s%d", r ? "+" : "",
                              b->kv_lens[r] - mlav_bundle_q_len(b, r));
    if (b->B > shown && n < len)
        snprintf(buf + n, len - n, "+...");
    if (b->Dl != 512 || b->Dr != 64) { /* only unusual dims are worth the space */
        size_t m = strlen(buf);
        if (m < len)
            snprintf(buf + m, len - m, " dims=%d+%d", b->Dl, b->Dr);
    }
}
