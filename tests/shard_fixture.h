/* Context-parallel verify for the shard tests (test_shard.c on the CPU backends,
 * test_shard_gpu.c on the CUDA ones): one rank's copy of a global test problem (its KV rows
 * scattered into the rank's own pages, by a mapping written here independently of the
 * library's), the merge of the ranks' partial states into the problem's out / lse, and the grid
 * of random cases both tests run on their backends. */
#ifndef MLAV_TESTS_SHARD_FIXTURE_H
#define MLAV_TESTS_SHARD_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "test_util.h"

typedef struct sh_rank {
    int32_t ranks, rank, stripe;
    mlav_problem prob;    /* the global problem with this rank's shard and page-table stride */
    int32_t max_pages;    /* the rank's page_table row stride */
    int32_t *page_table;  /* [B, max_pages]: the rank's local rows, shuffled page ids */
    int64_t num_pages;
    void *kv;             /* [num_pages, page_size, W] kv dtype; unused slots NaN (0x7f FP8) */
    size_t kv_bytes;
    int32_t rows[TU_MAX_B]; /* the rank's rows of each request (counted, not by formula) */
    void *out;            /* [T, H, Dl] dtype, this rank's partial out (NaN-poisoned) */
    float *lse;           /* [T, H] */
} sh_rank;

/* The rank's copy of `p` (ranks >= 2, 0 <= rank < ranks, stripe >= 1), its pages shuffled by
 * `seed`. Aborts on allocation failure. */
sh_rank *sh_rank_make(const tu_problem *p, int32_t ranks, int32_t rank, int32_t stripe,
                      uint64_t seed);
void sh_rank_free(sh_rank *r);

/* Host tensors of the rank (its kv, page table and outputs; p's q, mask and kv scale). */
mlav_tensors sh_rank_tensors(const tu_problem *p, const sh_rank *r);

/* Merge the ranks' partial states (their out widened to F32, mlav_merge_states_stacked on the
 * host in F32) into p->out (rounded to the dtype) and p->lse. Returns the merge's status. */
mlav_status sh_merge(tu_problem *p, sh_rank *const *ranks, int32_t n);

#endif

/* A random case for the shard tests: 1..4 requests with ragged q_len (0..6, at least one
 * request with rows), prefixes up to max_prefix (about one in four 0), a random tree kind. */
tu_case sh_draw_case(uint64_t *rng, int32_t H, int32_t Dl, int32_t Dr, int32_t page_size,
                     mlav_dtype dtype, mlav_dtype kv_dtype, int32_t max_prefix);

/* The stripe of kind k: 0 -> 1 (token round robin), 1 -> page_size, 2 -> a contiguous chunk
 * (ceil(longest kv_len / ranks) plus 0..3 rows). */
int32_t sh_stripe(const tu_problem *p, int32_t ranks, int kind, uint64_t *rng);

/* The rank's rows among the global rows [0, n), counted from the layout. */
int64_t sh_rows_of(int64_t n, int32_t ranks, int32_t rank, int32_t stripe);

/* A case kind of the grid: q and out's dtype, and the cache's (0: the same). */
typedef struct sh_kind {
    mlav_dtype dtype, kv_dtype;
} sh_kind;

/* What a shard test's grid draws on: every (ranks 2..4, page size 1, 16, 64, stripe kind
 * 0..2 of sh_stripe), two random cases each (rep 0 and 1, heads H[rep]), the kinds in turn. */
typedef struct sh_grid {
    const sh_kind *kinds;
    int n_kinds;
    int32_t H[2];         /* heads of rep 0 and rep 1 */
    int32_t Dl, Dr;
    int32_t max_prefix;   /* sh_draw_case's */
    int limits_rep;       /* the rep run through a plan for limits (host lengths), or -1: none */
} sh_grid;

/* Run the grid on `backend` (a cmocka skip where it is not there): each case sharded and
 * merged against the oracle of the whole cache (sh_verify_merged); a failure fails the test
 * with the backend, the case and what failed. Returns how many (rank, request with nodes)
 * pairs of the grid had the rank hold no row of the request: its empty state. */
int sh_run_grid(mlav_backend backend, const sh_grid *g);

/* Run `p` sharded over `ranks` ranks on ctx's backend (host tensors: mlav_verify; with
 * `for_limits` a plan for limits of each rank's shard, updated with the step's host lengths),
 * merge the partial states and compare with the oracle of the whole cache (tu_reference must
 * have run) at the dtype's tolerance. Returns 1, or 0 with what failed in msg. */
int sh_verify_merged(mlav_context *ctx, tu_problem *p, int32_t ranks, int32_t stripe,
                     int for_limits, uint64_t seed, char *msg, size_t msg_len);
