/* What the generator's files share: the seeded streams, oracle and readout rows, the decisive
 * ratio, draft tokens and the expectations' store. Internal to tools/bundle. */
#ifndef MLAV_BUNDLE_GEN_INTERNAL_H
#define MLAV_BUNDLE_GEN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify_internal.h"
#include "bundle.h"
#include "gen.h"

/* One independent splitmix64 stream per purpose and index, so that redrawing one query row or
 * changing one request leaves every other draw as it was. */
enum {
    STREAM_TREE = 1,
    STREAM_PAGES = 2,
    STREAM_KV = 3,
    STREAM_Q = 4,
    STREAM_DRAFT = 5,
    STREAM_KV_REDRAW = 6
};

static inline uint64_t mlav_gen_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t mlav_gen_next64(uint64_t *x)
{
    return mlav_gen_mix64(*x += 0x9E3779B97F4A7C15ull);
}

static inline uint64_t mlav_gen_stream(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b)
{
    return mlav_gen_mix64(
        seed ^ mlav_gen_mix64(purpose * 0x632BE59BD9B4E019ull ^
                              mlav_gen_mix64(a * 0x8CB92BA72F3D8DD7ull ^
                                             mlav_gen_mix64(b + 0x2545F4914F6CDD1Dull))));
}

/* uniform in [-1, 1) on a 2^-52 grid */
static inline double mlav_gen_uniform(uint64_t *x)
{
    return (double)(mlav_gen_next64(x) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static inline uint32_t mlav_gen_below(uint64_t *x, uint32_t n)
{
    return (uint32_t)(mlav_gen_next64(x) % n);
}

/* calloc that records MLAV_ERR_OUT_OF_MEMORY in *s (once) on failure. */
void *mlav_gen_alloc(size_t n, size_t size, mlav_status *s);

/* Which request token t belongs to. */
int32_t mlav_gen_request_of(const mlav_bundle *b, int32_t t);

/* Recompute the oracle's out64 / lse64 rows of the tokens list[0..n) only (bit-identical to a
 * full run). info and mask: the whole problem's. */
mlav_status mlav_gen_oracle_rows(const mlav_bundle *b, const mlav_problem_info *info,
                                 const uint32_t *mask, const int32_t *list, int32_t n,
                                 double *out64, double *lse64);

/* Tokens and margins of the rows list[0..n) (all rows when list is NULL) from fp64 out. */
mlav_status mlav_gen_readout_rows(const mlav_bundle *b, uint64_t seed, const double *out64,
                                  const int32_t *list, int32_t n, int32_t *tokens, double *margins);

/* Margin of token t over the margin it needs to be decisive (>= 1: decisive), judged on the
 * F32 values the bundle will store. row32: scratch of H*Dl floats. */
double mlav_gen_margin_ratio(const mlav_bundle *b, const double *out64, const int32_t *tokens,
                             const double *margins, int32_t t, float *row32);

/* Draft tokens for accepted paths of the depths `reqs` ask for (NULL: the default rotation). */
mlav_status mlav_gen_choose_drafts(const mlav_bundle *b, const mlav_gen_request *reqs,
                                   uint64_t seed, const int32_t *tokens);

/* Store the expectations (F32 out and lse, tokens, margins, acceptance) into b. */
mlav_status mlav_gen_store_expectations(mlav_bundle *b, const double *out64, const double *lse64,
                                        const int32_t *tokens, const double *margins);

#endif
