/* Attention states for the merge tests, and their fp64 merge (merge_fixture.h). */
#include "merge_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/dtype.h"
#include "test_util.h"

mf_states mf_alloc(mlav_dtype dtype, int32_t n, int64_t rows, int32_t dim)
{
    mf_states s = {dtype, n, rows, dim, mlav_dtype_size(dtype), NULL, NULL};
    s.outs = tu_xcalloc((size_t)n * (size_t)rows * (size_t)dim, s.es);
    s.lses = tu_xcalloc((size_t)n * (size_t)rows, sizeof(float));
    return s;
}

void mf_free(mf_states *s)
{
    free(s->outs);
    free(s->lses);
    s->outs = NULL;
    s->lses = NULL;
}

size_t mf_out_bytes(const mf_states *s)
{
    return (size_t)s->rows * (size_t)s->dim * s->es;
}

static size_t o_index(const mf_states *s, int32_t i, int64_t r, int32_t d)
{
    return ((size_t)i * (size_t)s->rows + (size_t)r) * (size_t)s->dim + (size_t)d;
}

void mf_fill(mf_states *s, uint64_t *rng, int special)
{
    const int dt = (int)s->dtype;
    for (int32_t i = 0; i < s->n; i++)
        for (int64_t r = 0; r < s->rows; r++) {
            const int empty = tu_next(rng) % 5 == 0;
            s->lses[(size_t)i * (size_t)s->rows + (size_t)r] =
                empty ? -INFINITY : (float)(4.0 * tu_uniform(rng));
            for (int32_t d = 0; d < s->dim; d++)
                mlav_store_from_f32(s->outs, dt, o_index(s, i, r, d),
                                    empty ? NAN : (float)tu_uniform(rng));
        }
    if (!special)
        return;
    for (int32_t i = 0; i < s->n && s->rows > 0; i++) { /* row 0: every state empty */
        s->lses[(size_t)i * (size_t)s->rows] = -INFINITY;
        for (int32_t d = 0; d < s->dim; d++)
            mlav_store_from_f32(s->outs, dt, o_index(s, i, 0, d), NAN);
    }
    if (s->rows > 1)
        s->lses[(size_t)(s->n - 1) * (size_t)s->rows + 1] = NAN;
    if (s->rows > 2)
        s->lses[2] = INFINITY;
}

/* The unit roundoff of the dtype's final rounding (0 for F32: the fp32 sum is the result). */
static double unit_roundoff(mlav_dtype d)
{
    return d == MLAV_DTYPE_BF16 ? ldexp(1.0, -8) : d == MLAV_DTYPE_F16 ? ldexp(1.0, -11) : 0.0;
}

int mf_check(const mf_states *s, const void *out, const float *lse, char *msg, size_t len)
{
    const int dt = (int)s->dtype;
    const int32_t n = s->n;
    const double eps = ldexp(1.0, -24), u = unit_roundoff(s->dtype);
    const double tiny = s->dtype == MLAV_DTYPE_F16 ? ldexp(1.0, -25) : 0.0;
    double *w = tu_xcalloc((size_t)n, sizeof(double));
    int ok = 1;
    for (int64_t r = 0; r < s->rows && ok; r++) {
        double m = -INFINITY;
        int nan = 0;
        for (int32_t i = 0; i < n; i++) {
            const double l = s->lses[(size_t)i * (size_t)s->rows + (size_t)r];
            nan |= isnan(l) || l == INFINITY;
            m = l > m ? l : m;
        }
        double sum = 0.0;
        for (int32_t i = 0; i < n && !nan; i++) {
            const double l = s->lses[(size_t)i * (size_t)s->rows + (size_t)r];
            w[i] = m == -INFINITY ? 0.0 : exp(l - m);
            sum += w[i];
        }
        const double ref_lse = nan ? NAN : m == -INFINITY ? -INFINITY : m + log(sum);
        if (lse) {
            const double g = lse[r];
            const int bad = isnan(ref_lse)   ? !isnan(g)
                            : isinf(ref_lse) ? g != ref_lse
                                             : !(fabs(g - ref_lse) <=
                                                 (n + 8) * eps * (fabs(ref_lse) + 1.0)) ||
                                                   (n == 1 && g != s->lses[r]);
            if (bad) {
                snprintf(msg, len, "%s n=%d rows=%lld dim=%d: lse[%lld] = %.9g, fp64 %.9g",
                         mlav_dtype_name(s->dtype), n, (long long)s->rows, s->dim,
                         (long long)r, g, ref_lse);
                ok = 0;
                break;
            }
        }
        for (int32_t d = 0; d < s->dim; d++) {
            const size_t k = (size_t)r * (size_t)s->dim + (size_t)d;
            const double g = mlav_load_as_f32(out, dt, k);
            double ref = 0.0, mag = 0.0;
            if (nan) {
                ref = NAN;
            } else if (sum > 0.0) {
                for (int32_t i = 0; i < n; i++)
                    if (w[i] != 0.0) {
                        const double o = mlav_load_as_f32(s->outs, dt, o_index(s, i, r, d));
                        ref += w[i] / sum * o;
                        mag += fabs(w[i] / sum * o);
                    }
            }
            int bad;
            if (isnan(ref))
                bad = !isnan(g);
            else if (sum == 0.0)
                bad = g != 0.0; /* every state empty */
            else
                bad = !(fabs(g - ref) <= (2 * n + 32) * eps * mag + u * fabs(ref) + tiny) ||
                      (n == 1 && g != mlav_load_as_f32(s->outs, dt, k));
            if (bad) {
                snprintf(msg, len,
                         "%s n=%d rows=%lld dim=%d: out[%lld][%d] = %.9g, fp64 %.9g (|w o| sum "
                         "%.3g)",
                         mlav_dtype_name(s->dtype), n, (long long)s->rows, s->dim, (long long)r,
                         d, g, ref, mag);
                ok = 0;
                break;
            }
        }
    }
    free(w);
    return ok;
}
