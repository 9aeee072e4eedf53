/* Checking a bundle on a backend: see check.h. */
#include "check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"
#include "readout.h"

/* Canary bytes on both sides of out and lse: a backend that writes past them fails. */
#define GUARD 64
#define GUARD_BYTE 0xA5

const char *mlav_verdict_name(mlav_verdict v)
{
    switch (v) {
    case MLAV_VERDICT_PASS: return "PASS";
    case MLAV_VERDICT_FAIL: return "FAIL";
    case MLAV_VERDICT_UNSUPPORTED: return "UNSUPPORTED";
    }
    return "?";
}

/* Record the first failure only: later ones are usually its consequences. */
static void fail(mlav_check_result *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void fail(mlav_check_result *r, const char *fmt, ...)
{
    if (r->verdict == MLAV_VERDICT_FAIL && r->reason[0])
        return;
    r->verdict = MLAV_VERDICT_FAIL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
}

static int guards_intact(const unsigned char *alloc, size_t payload)
{
    for (size_t i = 0; i < GUARD; i++)
        if (alloc[i] != GUARD_BYTE || alloc[GUARD + payload + i] != GUARD_BYTE)
            return 0;
    return 1;
}

/* Node t's place for a sentence: "node 12 (request 1, local 3)". */
static void where(const mlav_bundle *b, int32_t t, char *buf, size_t len)
{
    int32_t r = 0;
    while (b->q_indptr[r + 1] <= t)
        r++;
    snprintf(buf, len, "node %d (request %d, local %d)", t, r, t - b->q_indptr[r]);
}

static void compare_out_lse(const mlav_bundle *b, const void *out, const float *lse,
                            mlav_check_result *r)
{
    const size_t rows = (size_t)b->T * (size_t)b->H, per_token = (size_t)b->H * (size_t)b->Dl;
    /* rel-L2 per request, the worst one reported: over the whole batch, a prefix-0 request
     * (out = one KV row, large and exact) would hide a long request's error behind its norm */
    int32_t worst_req = 0;
    r->out_rel_l2 = 0.0;
    for (int32_t q = 0; q < b->B; q++) {
        double num = 0.0, den = 0.0;
        for (size_t k = (size_t)b->q_indptr[q] * per_token;
             k < (size_t)b->q_indptr[q + 1] * per_token; k++) {
            double got = mlav_load_as_f32(out, (int)b->dtype, k), ref = b->expect_out[k];
            /* NaN positions first: a NaN where the oracle has a number is a failure no
             * tolerance may hide (and a number where it has NaN, a read that skipped poison) */
            if (isnan(got) != isnan(ref)) {
                char w[96];
                where(b, (int32_t)(k / per_token), w, sizeof w);
                fail(r, "out of %s, head %zu, col %zu is %g but the oracle says %g", w,
                     (k / (size_t)b->Dl) % (size_t)b->H, k % (size_t)b->Dl, got, ref);
            }
            if (isnan(got) || isnan(ref))
                continue;
            num += (got - ref) * (got - ref);
            den += ref * ref;
        }
        double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(rel <= r->out_rel_l2)) { /* NaN sticks */
            r->out_rel_l2 = rel;
            worst_req = q;
        }
    }
    const double out_tol = mlav_out_tolerance(b->dtype), lse_tol = mlav_lse_tolerance(b->dtype);
    if (!(r->out_rel_l2 <= out_tol))
        fail(r, "out rel-L2 error %.3g (request %d) exceeds the %s tolerance %.0e", r->out_rel_l2,
             worst_req, mlav_dtype_name(b->dtype), out_tol);

    double worst = 0.0;
    size_t worst_at = 0;
    for (size_t k = 0; k < rows; k++) {
        double got = lse[k], ref = b->expect_lse[k];
        if (isnan(got) != isnan(ref) || (isinf(ref) && got != ref) || (isinf(got) && got != ref)) {
            char w[96];
            where(b, (int32_t)(k / (size_t)b->H), w, sizeof w);
            fail(r, "lse of %s, head %zu is %g but the oracle says %g", w, k % (size_t)b->H, got,
                 ref);
            continue;
        }
        if (isnan(ref) || isinf(ref))
            continue;
        if (fabs(got - ref) > worst) {
            worst = fabs(got - ref);
            worst_at = k;
        }
    }
    r->lse_max_abs = worst;
    if (!(worst <= lse_tol)) {
        char w[96];
        where(b, (int32_t)(worst_at / (size_t)b->H), w, sizeof w);
        fail(r, "lse max abs error %.3g (%s, head %zu) exceeds the %s tolerance %.0e", worst, w,
             worst_at % (size_t)b->H, mlav_dtype_name(b->dtype), lse_tol);
    }
}

static void path_text(const int32_t *row, int32_t n, char *buf, size_t len)
{
    size_t m = 0;
    buf[0] = '\0';
    for (int32_t k = 0; k < n && row[k] >= 0 && m < len; k++)
        m += (size_t)snprintf(buf + m, len - m, "%s%d", k ? "," : "", row[k]);
}

static void compare_tokens(const mlav_bundle *b, const void *out, mlav_check_result *r)
{
    const int64_t N = (int64_t)b->H * b->Dl;
    const size_t n = (size_t)b->T * (size_t)N;
    double *o64 = malloc(sizeof(double) * (n + 1));
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)b->T);
    int32_t *accept = malloc(sizeof(int32_t) * ((size_t)b->B * (size_t)b->max_q_len + 1));
    char *decisive = malloc((size_t)b->T);
    if (!o64 || !tokens || !accept || !decisive) {
        fail(r, "out of memory for the readout");
        goto done;
    }
    /* the backend's own out, in its dtype, widened exactly: the readout sees what an engine
     * would sample from */
    for (size_t k = 0; k < n; k++)
        o64[k] = mlav_load_as_f32(out, (int)b->dtype, k);
    if (mlav_readout_tokens(b->T, N, b->vocab, b->readout_seed, o64, tokens, NULL) != MLAV_OK) {
        fail(r, "%s", mlav_get_error());
        goto done;
    }
    for (int32_t t = 0; t < b->T; t++) {
        double need = mlav_required_margin(b->dtype, b->expect_out + (size_t)t * (size_t)N, N);
        decisive[t] = b->expect_tokens[t] >= 0 && (double)b->expect_margin[t] >= need;
        if (!decisive[t]) {
            r->tokens_indecisive++;
            continue;
        }
        r->tokens_checked++;
        if (tokens[t] == b->expect_tokens[t]) {
            r->tokens_ok++;
        } else {
            char w[96];
            where(b, t, w, sizeof w);
            fail(r,
                 "token after %s is %d, expected %d (oracle margin %.3g, %.1fx the decisive "
                 "minimum)",
                 w, tokens[t], b->expect_tokens[t], (double)b->expect_margin[t],
                 need > 0 ? (double)b->expect_margin[t] / need : INFINITY);
        }
    }
    if (mlav_accept_all(b, tokens, accept) != MLAV_OK) {
        fail(r, "acceptance: %s", mlav_get_error());
        goto done;
    }
    for (int32_t q = 0; q < b->B; q++) {
        const int32_t *want = b->expect_accept + (size_t)q * (size_t)b->max_q_len;
        const int32_t *got = accept + (size_t)q * (size_t)b->max_q_len;
        /* the walk reads the token of every node on the expected path: if one of them is not
         * decisive, a different path is not evidence of a bug */
        int consulted_decisive = 1;
        for (int32_t k = 0; k < b->max_q_len && want[k] >= 0; k++)
            consulted_decisive &= decisive[b->q_indptr[q] + want[k]];
        if (!consulted_decisive)
            continue;
        r->accept_checked++;
        if (memcmp(want, got, sizeof(int32_t) * (size_t)b->max_q_len) == 0) {
            r->accept_ok++;
        } else {
            char pw[256], pg[256];
            path_text(want, b->max_q_len, pw, sizeof pw);
            path_text(got, b->max_q_len, pg, sizeof pg);
            fail(r, "request %d accepted path %s, expected %s", q, pg, pw);
        }
    }
done:
    free(o64);
    free(tokens);
    free(accept);
    free(decisive);
}

void mlav_check_bundle(mlav_context *ctx, const mlav_bundle *b, mlav_check_result *r)
{
    memset(r, 0, sizeof *r);
    r->verdict = MLAV_VERDICT_PASS;
    r->backend = mlav_context_backend(ctx);
    r->out_rel_l2 = NAN;
    r->lse_max_abs = NAN;
    mlav_bundle_describe(b, r->shape, sizeof r->shape);
    if (!b->expect_out || !b->draft_tokens) {
        fail(r, "the bundle has no expectations: add them with mlaverify gen --expect-from");
        return;
    }
    mlav_problem p = mlav_bundle_problem(b);
    mlav_plan *plan = NULL;
    mlav_status s = mlav_plan_create(ctx, &p, &plan);
    if (s == MLAV_ERR_UNSUPPORTED) {
        r->verdict = MLAV_VERDICT_UNSUPPORTED;
        snprintf(r->reason, sizeof r->reason, "%s", mlav_last_error(ctx));
        return;
    }
    if (s != MLAV_OK) {
        fail(r, "plan failed: %s: %s", mlav_status_string(s), mlav_last_error(ctx));
        return;
    }
    r->backend = mlav_plan_backend(plan);
    mlav_plan_free(plan);

    const size_t esz = mlav_dtype_size(b->dtype);
    const size_t rows = (size_t)b->T * (size_t)b->H;
    const size_t out_bytes = rows * (size_t)b->Dl * esz, lse_bytes = rows * sizeof(float);
    unsigned char *out_alloc = malloc(out_bytes + 2 * GUARD);
    unsigned char *lse_alloc = malloc(lse_bytes + 2 * GUARD);
    uint32_t *mask = NULL;
    if (!out_alloc || !lse_alloc) {
        fail(r, "out of memory for out and lse");
        goto done;
    }
    if (mlav_bundle_tree_mask(b, &mask) != MLAV_OK) {
        fail(r, "%s", mlav_get_error());
        goto done;
    }
    memset(out_alloc, GUARD_BYTE, out_bytes + 2 * GUARD);
    memset(lse_alloc, GUARD_BYTE, lse_bytes + 2 * GUARD);
    void *out = out_alloc + GUARD;
    float *lse = (float *)(void *)(lse_alloc + GUARD);
    /* NaN-poisoned outputs: a row the backend forgets to write cannot pass */
    for (size_t k = 0; k < rows * (size_t)b->Dl; k++)
        mlav_store_from_f32(out, (int)b->dtype, k, NAN);
    for (size_t k = 0; k < rows; k++)
        lse[k] = NAN;
    /* an FP8 cache's scale goes with it: the expectations are over e4m3(byte) x kv_scale */
    mlav_tensors t = mlav_bundle_tensors(b, mask, out, lse);
    s = mlav_verify(ctx, &p, &t);
    if (s == MLAV_ERR_UNSUPPORTED) {
        r->verdict = MLAV_VERDICT_UNSUPPORTED;
        snprintf(r->reason, sizeof r->reason, "%s", mlav_last_error(ctx));
        goto done;
    }
    if (s != MLAV_OK) {
        fail(r, "run failed: %s: %s", mlav_status_string(s), mlav_last_error(ctx));
        goto done;
    }
    if (!guards_intact(out_alloc, out_bytes) || !guards_intact(lse_alloc, lse_bytes))
        fail(r, "the backend wrote outside out or lse (a guard canary changed)");
    compare_out_lse(b, out, lse, r);
    compare_tokens(b, out, r);
done:
    free(out_alloc);
    free(lse_alloc);
    free(mask);
}

void mlav_check_file(mlav_context *ctx, const char *path, mlav_check_result *r)
{
    mlav_bundle b;
    mlav_status s = mlav_bundle_read(path, MLAV_BUNDLE_FULL, &b);
    if (s != MLAV_OK) {
        memset(r, 0, sizeof *r);
        r->backend = mlav_context_backend(ctx);
        r->out_rel_l2 = NAN;
        r->lse_max_abs = NAN;
        r->verdict = MLAV_VERDICT_FAIL;
        snprintf(r->reason, sizeof r->reason, "%s: %s", mlav_tool_status_string(s),
                 mlav_get_error());
        return;
    }
    mlav_check_bundle(ctx, &b, r);
    mlav_bundle_free(&b);
}
