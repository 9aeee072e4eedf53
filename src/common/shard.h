/* The KV shard mapping of context-parallel decode (mlav_problem's shard fields), written once:
 * validation, the schedules, the fp64 oracle, the CPU backend and the CUDA kernels all call
 * these, so no two can disagree on which global row a rank's local row is.
 *
 * Global row g of a request lives on rank (g / I) % R at local row (g / (I R)) I + g % I
 * (R ranks, stripe I). The local -> global map is increasing, so the rank's rows of the global
 * prefix [0, n) are exactly its local rows [0, mlav_shard_rows(s, n)): a local row l is a
 * committed-prefix row iff l < mlav_shard_rows(s, prefix), and otherwise draft key
 * mlav_shard_global(s, l) - prefix. With ranks 1 both maps are the identity, taken before any
 * division. */
#ifndef MLAV_COMMON_SHARD_H
#define MLAV_COMMON_SHARD_H

#include <stdint.h>

#include "../core/problem.h"
#include "hd.h"

/* The rank's rows among the global rows [0, n): (n / (I R)) I + clamp(n % (I R) - r I, 0, I). */
static MLAV_HD int64_t mlav_shard_rows(mlav_shard s, int64_t n)
{
    if (s.ranks <= 1)
        return n;
    const int64_t span = (int64_t)s.stripe * s.ranks;
    int64_t tail = n % span - (int64_t)s.rank * s.stripe;
    tail = tail < 0 ? 0 : (tail > s.stripe ? s.stripe : tail);
    return n / span * s.stripe + tail;
}

/* The global row of the rank's local row l. */
static MLAV_HD int64_t mlav_shard_global(mlav_shard s, int64_t l)
{
    if (s.ranks <= 1)
        return l;
    return l / s.stripe * ((int64_t)s.stripe * s.ranks) + (int64_t)s.rank * s.stripe +
           l % s.stripe;
}

/* mlav_shard_global in 32-bit unsigned arithmetic, for the kernels' masked keys: exact for a
 * row the rank holds of a request of fewer than 2^31 rows (every term is then below the global
 * row; a product that wraps is one by q = 0), wrapped but defined for any other. */
static MLAV_HD uint32_t mlav_shard_global32(mlav_shard s, uint32_t l)
{
    if (s.ranks <= 1)
        return l;
    const uint32_t stripe = (uint32_t)s.stripe, q = l / stripe;
    return q * (stripe * (uint32_t)s.ranks) + (uint32_t)s.rank * stripe + (l - q * stripe);
}

/* The KV rows request b's blocks read: its kv_len, or the rank's rows of it (host only). */
static inline int64_t mlav_info_kv_rows(const mlav_problem_info *p, int32_t b)
{
    return mlav_shard_rows(p->shard, p->kv_lens[b]);
}

#endif
