/* The token readout of docs/DESIGN.md#bundles, the decisive-margin rule, and greedy acceptance
 * over a whole batch: the part of the bundle format that turns `out` into tokens the same way
 * for the generator and for every backend's check. */
#ifndef MLAV_BUNDLE_READOUT_H
#define MLAV_BUNDLE_READOUT_H

#include <stdint.h>

#include "bundle.h"
#include "mlaverify.h"

/* A token is decisive when its margin is at least this many times the logit change the out
 * tolerance can cause (golden/FORMAT.md, "Decisive tokens"). */
#define MLAV_DECISIVE_K 20.0

/* Element k of the readout matrix R[h][d][v] (k = (h*Dl + d)*vocab + v): the (k+1)-th draw of
 * a splitmix64 stream that starts at `seed`. Every draw is a 24-bit grid value in [-1, 1),
 * exact in float. */
static inline float mlav_readout_r(uint64_t seed, uint64_t k)
{
    uint64_t z = seed + (k + 1u) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / 16777216.0 * 2.0 - 1.0);
}

/* The readout's logits take at most this many doubles at once (16 MiB): nodes are read out in
 * blocks of max(1, this / vocab), so its memory is O(block x vocab) doubles plus the rows of R
 * in hand, whatever T is (at the largest vocab, 2^20, a block is 2 nodes). */
#define MLAV_READOUT_LOGIT_DOUBLES ((int64_t)1 << 21)
/* An R of at most this many floats (16 MiB: H x Dl x vocab) is drawn once and kept; a larger
 * one is drawn in blocks of up to 64 rows (max(2^16, vocab) floats, at most 4 MiB), again for
 * each node block. In all, at most 32 MiB. */
#define MLAV_READOUT_RESIDENT_FLOATS ((int64_t)1 << 22)

/* Nodes per block of the readout for T nodes and `vocab` (1 to T). */
int32_t mlav_readout_node_block(int32_t T, int32_t vocab);

/* Tokens of T out rows of N = H*Dl values each (row-major [T, H, Dl], as doubles):
 * logits[t][v] = sum_{h,d} out[t][h][d] * R[h][d][v] accumulated in double in (h, d) order;
 * tokens[t] = argmax (ties to the lowest v), margins[t] = top-1 minus top-2 logit (may be
 * NULL). A row whose logits hold NaN gets token -1 and margin NaN. Memory: node_block x vocab
 * doubles of logits and at most 16 MiB of R (32 MiB in all), never T x vocab.
 * Returns MLAV_OK or MLAV_ERR_OUT_OF_MEMORY. */
mlav_status mlav_readout_tokens(int32_t T, int64_t N, int32_t vocab, uint64_t seed,
                                const double *out, int32_t *tokens, double *margins);

/* The tolerances of docs/DESIGN.md#bundles: out rel-L2 and lse max abs error, per dtype. */
double mlav_out_tolerance(mlav_dtype d);
double mlav_lse_tolerance(mlav_dtype d);

/* The margin a token needs to be decisive: K * out_tol(dtype) * ||out_row||_2 * sqrt(2/3),
 * from the F32 out row as stored in a bundle (N values). NaN if the row holds NaN. */
double mlav_required_margin(mlav_dtype d, const float *out_row, int64_t N);

/* Greedy acceptance (mlav_tree_accept_greedy) of every request of `b` under target `tokens`
 * [T]: accept [B, max_q_len], -1 padded. Tokens of -1 match no draft token.
 * Returns MLAV_OK or the helper's status. */
mlav_status mlav_accept_all(const mlav_bundle *b, const int32_t *tokens, int32_t *accept);

#endif
