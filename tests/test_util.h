/* Shared test fixtures: random verify problems with shuffled pages, NaN-poisoned unused pages,
 * poisoned outputs behind guard canaries, and the comparison against the fp64 oracle. A case may
 * have an FP8 (e4m3) cache with its own scale, given as a value or through kv_scale_ptr. */
#ifndef MLAV_TEST_UTIL_H
#define MLAV_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"

typedef enum tu_tree {
    TU_CHAIN_NULL = 0, /* causal chain, tree_mask = NULL */
    TU_CHAIN = 1,      /* causal chain as explicit mask bits */
    TU_BUSHY = 2,      /* every node's parent drawn from the first few nodes: wide, shallow */
    TU_DEEP = 3        /* random parents, biased to the previous node: deep, branching */
} tu_tree;

#define TU_MAX_B 16

typedef struct tu_case {
    int32_t H, Dl, Dr, page_size, B;
    mlav_dtype dtype;     /* q and out */
    int32_t q_lens[TU_MAX_B];
    int32_t prefixes[TU_MAX_B];
    tu_tree tree;
    uint64_t seed;
    mlav_dtype kv_dtype;  /* the cache: MLAV_DTYPE_FP8_E4M3, or 0 (as mlav_problem has it): dtype */
    float kv_scale;       /* FP8: the scale; 0 draws one from the seed, log-uniform in [2^-6, 2^2]
                             (tu_make writes the one drawn into its copy, tu_problem.c, so that
                             tu_case_name(&p->c, ...) prints it) */
    int kv_scale_ptr;     /* FP8: pass the scale through tensors.kv_scale_ptr (&tu_problem.kv_scale),
                             with tensors.kv_scale 0, which must then be ignored */
} tu_case;

/* One materialised problem, all in host memory. */
typedef struct tu_problem {
    tu_case c;
    mlav_problem prob;
    mlav_dtype kv_dtype;  /* the cache's dtype, resolved (never 0-as-same) */
    size_t kv_esz;        /* its element size */
    float kv_scale;       /* FP8: the scale (1 otherwise); tensors read it from here */
    int32_t q_indptr[TU_MAX_B + 1], kv_lens[TU_MAX_B];
    int32_t *parents;     /* [T] local parent of each node */
    int32_t *page_table;  /* [B, max_pages], shuffled ids */
    uint32_t *tree_mask;  /* [T, words] or NULL */
    int64_t num_pages;
    void *q, *kv;         /* dtype, kv_dtype */
    size_t q_elems, kv_elems, out_elems, lse_elems;
    /* outputs, each inside a guarded allocation: [guard][payload][guard] */
    unsigned char *out_alloc, *lse_alloc;
    void *out;
    float *lse;
    double *ref_out, *ref_lse; /* fp64 oracle, filled by tu_reference */
} tu_problem;

/* splitmix64: the one generator of the tests (seed printed on failure). */
uint64_t tu_next(uint64_t *state);
double tu_uniform(uint64_t *state); /* [-1, 1) */

/* A fresh seed: MLAV_TEST_SEED from the environment if set, else time-based. */
uint64_t tu_seed(void);

/* Seconds on a monotonic clock (for a test that reports where its time went). */
double tu_now_s(void);

/* Build a problem (aborts the test on allocation failure). Unused pool pages and the slack past
 * kv_len in a request's last page are NaN (0x7f in an FP8 cache). out/lse are poisoned (NaN)
 * between 64-byte guards. An FP8 cache holds uniform [-1, 1) values divided by the scale and
 * quantized (mlav_f32_to_e4m3): its KV values are the 16-bit cases' to within e4m3 rounding,
 * whatever the scale, so scores are as spread as theirs. */
tu_problem *tu_make(const tu_case *c);
void tu_free(tu_problem *p);

/* Rewrite every request's KV rows (keys and values) as ramp(j) * base + noise, with ramp(j) =
 * 1 + (j mod period) * step, base and noise uniform in [-0.25, 0.25) (seeded from the case),
 * and step chosen so that a typical row's score climbs (or falls, by the sign of q . base) by
 * ~3 log2 units per 16 keys. Within each period the running maxima of many rows move again and
 * again, each row at its own tiles: an online softmax's rescale paths run, which random inputs
 * (scores within a few units) never reach after the first tile. Unused pages stay NaN; a
 * period below 1 leaves the problem as it is. */
void tu_rising_scores(tu_problem *p, int32_t period);

/* Scale every value of the pool by 2^e and every query by 2^-e, exactly (powers of two on
 * values whose magnitudes stay inside the dtype's normal range): the scores, the softmax and
 * lse are unchanged, and out is scaled by 2^e. Far from 1, this reaches the range handling of
 * whatever holds intermediate outputs (e = 100: |out| near 1e30 for BF16; -100: near 1e-30).
 * An FP8 cache keeps its bytes and has its kv_scale scaled by 2^e. */
void tu_scale_magnitudes(tu_problem *p, int e);

/* Host-memory tensors for the problem (with its kv_scale, or kv_scale_ptr as the case says). */
mlav_tensors tu_tensors(const tu_problem *p);

/* Re-poison out and lse (NaN) and re-arm the guards. */
void tu_poison(tu_problem *p);

/* Run the fp64 oracle into ref_out / ref_lse. */
void tu_reference(tu_problem *p);

/* Compare out/lse with the oracle: NaN positions must match first, then rel-L2 of out <= out_tol
 * and max |lse - ref| <= lse_tol (rows with -inf must be -inf); guards must be intact.
 * Returns 1 on success, else 0 with a message in `msg`. */
int tu_compare(const tu_problem *p, double out_tol, double lse_tol, char *msg, size_t msg_len);

/* Guards around out and lse intact? */
int tu_guards_ok(const tu_problem *p);

/* Nothing written: guards intact and every out and lse element still the NaN poison (tu_poison).
 * Returns 1, or 0 with what was written in `msg`. */
int tu_untouched(const tu_problem *p, char *msg, size_t msg_len);

/* A context for backend b, or a cmocka skip with the reason (not compiled in, no device); any
 * other failure fails the test. */
mlav_context *tu_context_or_skip(mlav_backend b);

/* Skip the calling cmocka case (saying so) when no CUDA device of cc >= 8.0 is present. */
void tu_require_device(void);

/* tu_seed(), printed with `what` and how to rerun it (MLAV_TEST_SEED). */
uint64_t tu_seeded(const char *what);

/* A GPU test's exit status: a passing run on a machine without a CUDA device of cc >= 8.0 (or
 * a build without CUDA), where every case skipped inside cmocka, becomes 77, which ctest reads
 * as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt) instead of Passed. */
int tu_no_device_skip(int rc);

/* A checked CUDA call in a GPU test (which includes cuda_runtime_api.h and cmocka): a failure
 * fails the test with the call, the error and file:line. */
#define TU_CK(call)                                                                          \
    do {                                                                                     \
        cudaError_t ck_e_ = (call);                                                          \
        if (ck_e_ != cudaSuccess)                                                            \
            fail_msg("%s failed: %s (%s:%d)", #call, cudaGetErrorString(ck_e_), __FILE__,    \
                     __LINE__);                                                              \
    } while (0)

/* A checked library call in a test: a status other than MLAV_OK fails the test with the call,
 * the status, the library's sentence and file:line. */
#define TU_OK(call)                                                                          \
    do {                                                                                     \
        mlav_status ok_s_ = (call);                                                          \
        if (ok_s_ != MLAV_OK)                                                                \
            fail_msg("%s: %s: %s (%s:%d)", #call, mlav_status_string(ok_s_),                 \
                     mlav_last_error(NULL), __FILE__, __LINE__);                             \
    } while (0)

/* calloc that aborts the test program when the host is out of memory (fixtures only). */
void *tu_xcalloc(size_t n, size_t size);

/* The tolerances of docs/DESIGN.md#bundles for a dtype. */
double tu_out_tol(mlav_dtype d);
double tu_lse_tol(mlav_dtype d);

/* "h=64,q=9+1,prefix=4097+0,page=1,bf16,bushy,seed=0x..."; an FP8 cache adds ",kv=fp8_e4m3"
 * (and ",kv_scale_ptr") before the seed and ",kv_scale=..." after it, when known. */
void tu_case_name(const tu_case *c, char *buf, size_t len);

#endif
