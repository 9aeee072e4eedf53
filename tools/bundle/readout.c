/* The token readout, the decisive rule and batch acceptance: see readout.h. */
#include "readout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"

/* R rows generated per block: up to 64, at most 256 KB of floats (64 rows of a 1024-token
 * vocab), cache-resident while every token's logits take them in. */
#define READOUT_BLOCK_ROWS 64
#define READOUT_BLOCK_FLOATS 65536

/* Top-1 token and top-1 minus top-2 margin of one row of logits; -1 and NaN if one is NaN. */
static void argmax_row(const double *l, int64_t V, int32_t *token, double *margin)
{
    double best = -INFINITY, second = -INFINITY;
    int32_t arg = -1;
    for (int64_t v = 0; v < V; v++) {
        if (isnan(l[v])) {
            *token = -1;
            *margin = NAN;
            return;
        }
        if (arg < 0 || l[v] > best) { /* strict: ties keep the lowest v */
            second = best;
            best = l[v];
            arg = (int32_t)v;
        } else if (l[v] > second) {
            second = l[v];
        }
    }
    *token = arg;
    *margin = best - second;
}

int32_t mlav_readout_node_block(int32_t T, int32_t vocab)
{
    int64_t nb = MLAV_READOUT_LOGIT_DOUBLES / (vocab > 0 ? vocab : 1);
    nb = nb < 1 ? 1 : nb;
    return T < nb ? (T > 0 ? T : 1) : (int32_t)nb;
}

mlav_status mlav_readout_tokens(int32_t T, int64_t N, int32_t vocab, uint64_t seed,
                                const double *out, int32_t *tokens, double *margins)
{
    const int64_t V = vocab;
    int64_t block = READOUT_BLOCK_FLOATS / V;
    block = block < 1 ? 1 : block > READOUT_BLOCK_ROWS ? READOUT_BLOCK_ROWS : block;
    /* a small R (few heads x dims, as in a big-vocab bundle of tiny rows) is drawn once and
     * kept for every node block instead of drawn again for each */
    const int resident = N * V <= MLAV_READOUT_RESIDENT_FLOATS;
    if (resident)
        block = N > 0 ? N : 1;
    /* nodes are read out a block at a time: memory is node_block x vocab doubles, not T x
     * vocab (a 30 KB bundle of 600 nodes and vocab 2^20 asked for 4.9 GB). A large R is
     * drawn again for each node block: T / node_block passes of the draws next to T passes of
     * the sums, and node_block is 64 nodes or more for vocabs up to 32768. */
    const int32_t nb = mlav_readout_node_block(T, vocab);
    double *logits = malloc(sizeof(double) * (size_t)nb * (size_t)V);
    float *R = malloc(sizeof(float) * (size_t)block * (size_t)V);
    if (!logits || !R) {
        free(logits);
        free(R);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of memory for the readout");
    }
    for (int32_t t0 = 0; t0 < T; t0 += nb) {
        const int32_t nt = T - t0 < nb ? T - t0 : nb;
        memset(logits, 0, sizeof(double) * (size_t)nt * (size_t)V);
        for (int64_t r0 = 0; r0 < N; r0 += block) {
            const int64_t nr = N - r0 < block ? N - r0 : block;
            /* splitmix64 is counter based: draw k is a pure function of k, so R can be made in
             * parallel and in blocks without changing a bit */
            if (!resident || t0 == 0) {
#pragma omp parallel for schedule(static)
                for (int64_t i = 0; i < nr * V; i++)
                    R[i] = mlav_readout_r(seed, (uint64_t)(r0 * V + i));
            }
                /* each logit is summed over rows in ascending (h, d) order whatever the
                 * threading and the blocking */
#pragma omp parallel for schedule(static)
            for (int32_t t = 0; t < nt; t++) {
                double *l = logits + (size_t)t * (size_t)V;
                const double *o = out + (size_t)(t0 + t) * (size_t)N + (size_t)r0;
                for (int64_t r = 0; r < nr; r++) {
                    const double a = o[r];
                    const float *Rr = R + (size_t)r * (size_t)V;
                    for (int64_t v = 0; v < V; v++)
                        l[v] += a * (double)Rr[v];
                }
            }
        }
        for (int32_t t = 0; t < nt; t++) {
            double m;
            argmax_row(logits + (size_t)t * (size_t)V, V, &tokens[t0 + t], &m);
            if (margins)
                margins[t0 + t] = m;
        }
    }
    free(logits);
    free(R);
    return MLAV_OK;
}

double mlav_out_tolerance(mlav_dtype d)
{
    return d == MLAV_DTYPE_F32 ? 1e-5 : 5e-3;
}

double mlav_lse_tolerance(mlav_dtype d)
{
    return d == MLAV_DTYPE_F32 ? 1e-5 : 1e-3;
}

double mlav_required_margin(mlav_dtype d, const float *out_row, int64_t N)
{
    double ss = 0.0;
    for (int64_t k = 0; k < N; k++)
        ss += (double)out_row[k] * (double)out_row[k];
    /* an entry of R_a - R_b has variance 2/3 (R uniform on [-1, 1)): a noise vector e moves the
     * margin by e . (R_a - R_b), of standard deviation ||e|| sqrt(2/3) */
    return MLAV_DECISIVE_K * mlav_out_tolerance(d) * sqrt(ss) * sqrt(2.0 / 3.0);
}

mlav_status mlav_accept_all(const mlav_bundle *b, const int32_t *tokens, int32_t *accept)
{
    for (size_t k = 0; k < (size_t)b->B * (size_t)b->max_q_len; k++)
        accept[k] = -1;
    for (int32_t r = 0; r < b->B; r++) {
        int32_t off = b->q_indptr[r], q_len = mlav_bundle_q_len(b, r), n, bonus;
        mlav_status s = mlav_tree_accept_greedy(
            q_len, b->tree_parents + off, b->draft_tokens + off, tokens + off,
            accept + (size_t)r * (size_t)b->max_q_len, &n, &bonus);
        if (s != MLAV_OK)
            return s;
    }
    return MLAV_OK;
}
