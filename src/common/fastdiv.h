/* Division by a run-time constant as a multiply-high, an add and a shift (Granlund and
 * Montgomery's round-up method): the flash kernel's page lookup, `KV row / page_size`, without
 * a branch for every page size (a shift works only for powers of two; a real division costs
 * ~20 instructions). Valid for dividends 0 <= n < 2^31, which every KV row index is. */
#ifndef MLAV_COMMON_FASTDIV_H
#define MLAV_COMMON_FASTDIV_H

#include <stdint.h>

#include "hd.h"

typedef struct mlav_fastdiv {
    uint32_t mul;   /* floor(2^32 (2^shift - d) / d) + 1 */
    uint32_t shift; /* ceil(log2 d) */
} mlav_fastdiv;

/* The constants for divisor d, 1 <= d <= 2^31 (host code: the plan computes them). */
static inline mlav_fastdiv mlav_fastdiv_make(uint32_t d)
{
    mlav_fastdiv f;
    uint32_t l = 0;
    while (((uint64_t)1 << l) < d)
        l++;
    /* (2^l - d) < d, so the product stays below 2^63 and mul below 2^32 */
    f.mul = (uint32_t)(((((uint64_t)1 << l) - d) << 32) / d + 1);
    f.shift = l;
    return f;
}

/* n / d for 0 <= n < 2^31: t <= n, so t + n cannot wrap. */
static MLAV_HD uint32_t mlav_fastdiv_div(uint32_t n, mlav_fastdiv f)
{
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(n, f.mul);
#else
    const uint32_t t = (uint32_t)(((uint64_t)n * f.mul) >> 32);
#endif
    return (t + n) >> f.shift;
}

#endif
