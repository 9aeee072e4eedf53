/* The visibility rule (docs/DESIGN.md#math), written once: the fp64 oracle, the CPU backend and
 * the CUDA kernels (naive, flash, flash F32, and the sm_90a family's word and 64-row forms) all
 * call these, so no two can disagree on which key a query sees.
 *
 * Request b has q_len query (draft) nodes and kv_len KV rows, the last q_len of which are the
 * draft nodes' own keys: prefix = kv_len - q_len. KV row j is visible to the request's node i when
 * j < prefix (the committed prefix is visible to every node) or, for draft key k = j - prefix,
 * when bit k of row q_indptr[b] + i of the packed tree mask [T, mask_words] is set; a NULL mask is
 * the causal chain, node i sees draft keys k <= i. */
#ifndef MLAV_COMMON_VISIBILITY_H
#define MLAV_COMMON_VISIBILITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hd.h"

/* Whether draft key k (0 <= k < q_len) is visible to the request's node i, whose global query
 * index is q (row q of mask [T, mask_words]; may be NULL: the causal chain k <= i). The shape (an
 * if, a bool per branch) keeps the flash kernel's main loop as measured: other forms can change
 * how ptxas allocates it (docs/PERFORMANCE.md#ptxas; check with bench/diag/sass_identity.py). */
static MLAV_HD bool mlav_draft_visible(const uint32_t *mask, int32_t mask_words, int64_t q,
                                       int32_t i, int32_t k)
{
    if (mask)
        return (mask[(size_t)q * (size_t)mask_words + (size_t)(k >> 5)] >> (k & 31)) & 1u;
    return k <= i;
}

/* Draft keys 32 w .. 32 w + 31 as node i sees them, a bit each (bit b: mlav_draft_visible of key
 * 32 w + b): with a mask its word w (w < mask_words), else the chain's keys k <= i. For a
 * kernel that loads the few words a tile's keys need at once, where a lookup per key costs a
 * load each on the tile's critical path (docs/PERFORMANCE.md#hopper). */
static MLAV_HD uint32_t mlav_draft_word(const uint32_t *mask, int32_t mask_words, int64_t q,
                                        int32_t i, int32_t w)
{
    if (mask)
        return mask[(size_t)q * (size_t)mask_words + (size_t)w];
    const int32_t n = i - 32 * w + 1; /* the chain's keys of this word: 32 w .. i */
    return n <= 0 ? 0u : n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}

/* Bits 0 .. n - 1 of a 64-bit word, n clamped to [0, 64]. */
static MLAV_HD uint64_t mlav_low_bits64(int32_t n)
{
    return n <= 0 ? 0u : n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1u;
}

/* KV rows j0 .. j0 + 63 as node i sees them, a bit each (bit o: mlav_kv_visible of row j0 + o;
 * rows at or past kv_end 0): the prefix's rows, and the draft rows that the words w0, w1, w2 of
 * its draft mask set, where w0 is mlav_draft_word's word (j0 - prefix) >> 5 for j0 > prefix and
 * word 0 otherwise, w1 and w2 the next two (0 past the mask's words; w2 is read only for j0 >=
 * prefix). For a kernel that masks a tile's scores a bit each (the sm_90a kernels'
 * mask_scores), from words it loaded at once. */
static MLAV_HD uint64_t mlav_rows_visible64(uint32_t w0, uint32_t w1, uint32_t w2, int32_t j0,
                                            int32_t prefix, int32_t kv_end)
{
    const int32_t k0 = j0 - prefix; /* row j0 as a draft key */
    uint64_t d;                     /* the draft bits, bit o for row j0 + o */
    if (k0 >= 0) {
        const int32_t sh = k0 & 31;
        const uint32_t lo = (uint32_t)((((uint64_t)w1 << 32) | w0) >> sh);
        const uint32_t hi = (uint32_t)((((uint64_t)w2 << 32) | w1) >> sh);
        d = ((uint64_t)hi << 32) | lo;
    } else {
        d = -k0 >= 64 ? 0u : (((uint64_t)w1 << 32) | w0) << -k0;
    }
    return (mlav_low_bits64(prefix - j0) | d) & mlav_low_bits64(kv_end - j0);
}

/* Whether KV row j (0 <= j < kv_len) is visible to node i (global query index q) of a request
 * whose committed prefix is `prefix` rows long. */
static MLAV_HD bool mlav_kv_visible(const uint32_t *mask, int32_t mask_words, int64_t q,
                                    int32_t i, int64_t prefix, int64_t j)
{
    return j < prefix || mlav_draft_visible(mask, mask_words, q, i, (int32_t)(j - prefix));
}

#endif
