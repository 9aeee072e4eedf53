/* The LSE merge of attention states, written once: the CPU backend's split merge, the CUDA
 * combine kernel and mlav_merge_states all call these, so CPU and GPU cannot drift apart.
 *
 * A state over a KV range is (o, lse) with o the softmax-weighted average of V over the range
 * and lse = log(sum exp(s)). Merging n states: m = max lse_i; w_i = exp(lse_i - m);
 * lse = m + log(sum w_i); o = sum (w_i / sum w) o_i. Empty states have lse = -inf and weight 0;
 * if every state is empty, the weights are all 0 and lse stays -inf (the "max falls back to 0"
 * rule keeps exp() away from -inf - -inf = NaN). */
#ifndef MLAV_COMMON_MERGE_H
#define MLAV_COMMON_MERGE_H

#include <math.h>

#include "hd.h"

/* The merge rules element by element, so that a parallel merge (combine.cu: one thread per
 * state, reductions for the max, the NaN flag and the sum) applies exactly the rules of the serial
 * one below. m is the largest lse, nan whether any lse is NaN, sum the sum of the weights. */
static MLAV_HD float mlav_merge_weight(float lse, float m, int nan)
{
    if (nan)
        return NAN;
    return m == -INFINITY ? 0.0f : expf(lse - m); /* an +inf lse: inf - inf = NaN, propagated */
}
static MLAV_HD float mlav_merge_normalize(float w, float sum)
{
    return sum > 0.0f ? w / sum : (sum == 0.0f ? 0.0f : NAN); /* all empty: 0; NaN stays */
}
static MLAV_HD float mlav_merge_lse(float m, float sum, int nan)
{
    if (nan)
        return NAN;
    return m == -INFINITY ? -INFINITY : m + logf(sum);
}

/* Turn lse[0..n) into normalised weights w[0..n) (w_i >= 0, sum 1, or all 0 when every state is
 * empty) and return the merged lse. NaN in any lse yields NaN weights and a NaN lse. */
static MLAV_HD float mlav_merge_weights(int n, const float *lse, float *w)
{
    float m = -INFINITY;
    int nan = 0;
    for (int i = 0; i < n; i++) {
        m = fmaxf(m, lse[i]);
        nan |= lse[i] != lse[i];
    }
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        w[i] = mlav_merge_weight(lse[i], m, nan);
        sum += w[i];
    }
    for (int i = 0; i < n; i++)
        w[i] = mlav_merge_normalize(w[i], sum);
    return mlav_merge_lse(m, sum, nan);
}

/* Online-softmax rescale of a running state by a new running max, for tile loops:
 * returns exp(old_max - new_max), 0 when old_max is -inf (nothing accumulated yet). */
static MLAV_HD float mlav_rescale_factor(float old_max, float new_max)
{
    return old_max == -INFINITY ? 0.0f : expf(old_max - new_max);
}

/* lse of a finished running state: max + log(sum), -inf for an empty row. */
static MLAV_HD float mlav_finish_lse(float row_max, float row_sum)
{
    return row_sum > 0.0f ? row_max + logf(row_sum) : (row_sum == 0.0f ? -INFINITY : NAN);
}

#endif
