/* Attention states for the merge tests (test_merge_states.c on the host, test_merge_gpu.c on the
 * device): random stacked states with empty and NaN rows, their fp64 merge, and the bound a
 * merge in fp32 rounded to the dtype must meet against it. */
#ifndef MLAV_TESTS_MERGE_FIXTURE_H
#define MLAV_TESTS_MERGE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"

typedef struct mf_states {
    mlav_dtype dtype;
    int32_t n;
    int64_t rows;
    int32_t dim;
    size_t es;   /* element size of dtype */
    void *outs;  /* [n, rows, dim] dtype */
    float *lses; /* [n, rows] */
} mf_states;

/* Allocate n states of [rows, dim] dtype (zeroed). */
mf_states mf_alloc(mlav_dtype dtype, int32_t n, int64_t rows, int32_t dim);
void mf_free(mf_states *s);

/* Random states: o uniform [-1, 1) in the dtype, lse uniform [-4, 4); about one (state, row) in
 * five empty (lse -inf, o NaN: a merge that reads it is caught); with `special` also row 0 all
 * empty, row 1 with a NaN lse in its last state and row 2 with a +inf lse in its first (both
 * NaN rows by the merge rules), when rows allow. */
void mf_fill(mf_states *s, uint64_t *rng, int special);

/* Bytes of the merged out [rows, dim] dtype. */
size_t mf_out_bytes(const mf_states *s);

/* Check a merge of `s` (out [rows, dim] dtype, lse [rows] or NULL) against the fp64 merge:
 * NaN exactly where the rules put it (a NaN or +inf lse in any state of a row makes the row NaN;
 * NaN o of a weighted state makes its element NaN), rows whose states are all empty 0 and -inf,
 * and elsewhere
 *   |out - ref| <= (2n + 32) 2^-24 sum_i |w_i o_i| + u |ref| (+ 2^-25 for F16's subnormals)
 *   |lse - ref| <= (n + 8) 2^-24 (|ref| + 1)
 * with u the dtype's unit roundoff (0 for F32, whose fp32 sum is the result; 2^-8 BF16, 2^-11
 * F16): fp32 products and sums, expf and logf within an ulp or two, one rounding to the dtype.
 * With n = 1 the merge must return the state itself, bit for bit. Returns 1, or 0 with the first
 * failure in msg. */
int mf_check(const mf_states *s, const void *out, const float *lse, char *msg, size_t len);

#endif
