/* An engine's verify loop for the engine-step tests (test_steps.c on the CPU backends,
 * test_steps_gpu.c on CUDA graphs): fixed buffers sized by a plan's limits, requests that grow
 * by their accepted drafts, finish and arrive, a fresh draft tree per request and step, and the
 * check of each step's outputs against the fp64 oracle run on the step's exact problem. An FP8
 * (e4m3) cache gives each layer its own scale: even layers as a host value (fixed for the
 * engine's lifetime, as a captured graph keeps it), odd ones through kv_scale_ptr (redrawn every
 * step, as an engine's scale tensor may change under a graph that reads it). */
#ifndef MLAV_TESTS_STEPS_FIXTURE_H
#define MLAV_TESTS_STEPS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"

#define SF_MAX_LAYERS 4

typedef struct sf_engine {
    mlav_limits lim;
    int32_t H, Dl, Dr, W, page_size, max_pages, words, layers;
    mlav_dtype dtype;     /* q and out */
    mlav_dtype kv_dtype;  /* the pools: dtype, or MLAV_DTYPE_FP8_E4M3 */
    float scale;
    float kv_scale[SF_MAX_LAYERS]; /* FP8: each layer's scale (see above), in [2^-6, 2^2) */
    int64_t num_pages;
    size_t esz, kv_esz, q_bytes, kv_bytes, out_bytes, lse_bytes, pt_bytes, mask_bytes;
    /* host buffers for the engine's lifetime; each layer has its own q, pool, out, lse */
    void *q[SF_MAX_LAYERS], *kv[SF_MAX_LAYERS], *out[SF_MAX_LAYERS];
    float *lse[SF_MAX_LAYERS];
    int32_t *page_table;  /* [max_batch, max_pages] */
    uint32_t *mask;       /* [max_tokens, words(limits.max_q_len)] */
    /* this step: `batch` slots, live requests first, then padding (q_len 0, kv_len 0) */
    int32_t batch, live;
    int32_t *q_indptr, *kv_lens, *prefix; /* [max_batch + 1], [max_batch], [max_batch] */
    int32_t *parents;                     /* [max_tokens] */
    int32_t *page_owner;                  /* [num_pages]: slot using the page, or -1 */
    int32_t q_all; /* > 0: every live request's draft length (within max_tokens), else drawn */
    uint64_t rng;
} sf_engine;

/* An engine of `layers` layers within `lim`, q and out of `dtype`, pools of `kv_dtype` (0 or
 * dtype: the same; or MLAV_DTYPE_FP8_E4M3). The pool has enough pages for every slot at
 * max_kv_len, plus a few never used (NaN). */
sf_engine *sf_make(const mlav_limits *lim, int32_t H, int32_t Dl, int32_t Dr, int32_t page_size,
                   mlav_dtype dtype, mlav_dtype kv_dtype, int32_t layers, uint64_t seed);
void sf_free(sf_engine *e);

/* The next step: every live request accepts 1..q_len of its drafts (its prefix grows), some
 * finish, new ones arrive; a fresh draft (random tree or chain) per request; pages handed out
 * in shuffled order; new q and KV values (FP8: uniform values divided by the layer's scale,
 * quantized; odd layers' scales redrawn first); unused pages and the slack past kv_len NaN. With
 * `pad` the step's batch is max_batch (slots past the live requests padded), else the live
 * count. */
void sf_step(sf_engine *e, int pad);

/* A step of `live` requests (1 .. max_batch) with the given prefixes (each at most max_kv_len -
 * max_q_len), drafts and values drawn as by sf_step: a step an engine test wants for certain. */
void sf_step_prefixes(sf_engine *e, int32_t live, const int32_t *prefix, int pad);

/* NaN into every layer's out and lse. */
void sf_poison(sf_engine *e);

/* Check layer `l`'s out/lse (host copies of the step's results, [max_tokens] rows) against the
 * fp64 oracle on the step's exact problem: NaN positions match, rel-L2 and lse within the
 * dtype's tolerance, rows past the step's tokens still poisoned. 1 if so, else 0 and `msg`. */
int sf_check(const sf_engine *e, int l, const void *out, const float *lse, char *msg, size_t n);
/* The same, where request `skip` was refused: its rows must still be poisoned (NaN), the
 * others are checked as above; skip = -2: nothing at all may have been written. */
int sf_check_skip(const sf_engine *e, int l, const void *out, const float *lse, int32_t skip,
                  char *msg, size_t n);

/* The two halves of sf_check_skip, for a step whose layer is checked more than once (one graph's
 * result, then another's): the oracle's result for layer `l` of the step as it is now (T 0 and
 * no buffers for a step of no tokens; 1, or 0 and `msg`), which must be freed, and a check
 * against it as sf_check_skip's. */
typedef struct sf_ref {
    int32_t T;   /* the step's tokens when it was computed */
    double *out; /* [T, H, Dl] */
    double *lse; /* [T, H] */
} sf_ref;
int sf_reference(const sf_engine *e, int l, sf_ref *ref, char *msg, size_t n);
void sf_ref_free(sf_ref *ref);
int sf_check_ref(const sf_engine *e, const sf_ref *ref, const void *out, const float *lse,
                 int32_t skip, char *msg, size_t n);

/* What sf_random_lengths drew: the batch, and whether the step is an engine's (one draft
 * length, prefixes around one length), has a request past the limits, or a broken q_indptr. */
typedef struct sf_drawn {
    int32_t batch;
    int engine, past, broken;
} sf_drawn;
/* One step's random lengths within `lim`, as the device scheduler's tests draw them
 * (test_steps_gpu's schedule_bytes, test_step_schedule_emulated): batch sizes spread over the
 * scales, lengths within the limits but for a few; a third of the steps as engines run them
 * (where the sm_90a family's plans may take equal shares); one in 10 with a request past the
 * limits, one in 50 with q_indptr refused as a whole. q_indptr: max_batch + 1, kv_lens:
 * max_batch. */
sf_drawn sf_random_lengths(const mlav_limits *lim, uint64_t *rng, int32_t *q_indptr,
                           int32_t *kv_lens);

/* The step's lengths in host memory. */
mlav_lengths sf_lengths(const sf_engine *e);
/* The shape of the engine's plan for limits. */
mlav_problem sf_shape(const sf_engine *e);
/* Host tensors of layer l (FP8: its scale as a value, or through kv_scale_ptr with
 * tensors.kv_scale 0, see above). */
mlav_tensors sf_tensors(const sf_engine *e, int l);

#endif
