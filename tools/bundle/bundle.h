/* A golden bundle (docs/DESIGN.md#bundles, golden/FORMAT.md): the named tensors of one verify
 * problem and its expectations, read from and written to a safetensors file, with every
 * shape, length and index checked so that nothing downstream can read out of bounds. */
#ifndef MLAV_BUNDLE_BUNDLE_H
#define MLAV_BUNDLE_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"
#include "tool_status.h"

#define MLAV_BUNDLE_FORMAT "mlaverify-bundle"
#define MLAV_BUNDLE_VERSION 1
#define MLAV_BUNDLE_MAX_VOCAB (1 << 20)
/* Longest request a bundle may hold. The checker builds the dense tree mask the API takes,
 * T x mlav_tree_mask_words(max_q_len) words: at 4096 that is 512 bytes per node, against at
 * least ~30 bytes per node of file, so a bundle's mask stays within ~20x its size (a 3.6 MB
 * chain of 100k nodes asked for 1.24 GB). 4096 is 64 times the largest tree an engine
 * verifies (EAGLE/Medusa trees are tens of nodes); gen refuses longer requests too. */
#define MLAV_BUNDLE_MAX_Q_LEN 4096

/* What a reader demands. */
typedef enum mlav_bundle_mode {
    MLAV_BUNDLE_FULL = 0,  /* every tensor, expectations included (what `check` reads) */
    MLAV_BUNDLE_INPUTS = 1 /* expectations (all five) and draft_tokens may be absent
                              (what `gen --expect-from` reads) */
} mlav_bundle_mode;

typedef struct mlav_bundle {
    /* __metadata__ */
    int32_t H, Dl, Dr, W;  /* num_heads, d_latent, d_rope; W = Dl + Dr */
    int32_t vocab;         /* readout vocabulary, [2, MLAV_BUNDLE_MAX_VOCAB] */
    uint64_t readout_seed; /* splitmix64 start of the readout matrix R */
    char *source;          /* how it was made; owned, never NULL after a read */
    /* sizes taken from the tensors' shapes */
    mlav_dtype dtype;             /* of q (and of a backend's out) */
    mlav_dtype kv_dtype;          /* of kv_cache: MLAV_DTYPE_FP8_E4M3, or dtype (0, F32, also
                                     means dtype, as in mlav_problem: a bundle built field by
                                     field has a q-dtype cache); a read sets it to one of the
                                     two, mlav_bundle_kv_dtype resolves it */
    float kv_scale;               /* FP8 only: a KV element's value is e4m3(byte) x kv_scale
                                     (the kv_scale tensor); 0 for a 16/32-bit cache */
    int32_t T, B;                 /* query tokens (tree nodes), requests */
    int32_t page_size, max_pages; /* kv_cache dim 1, page_table dim 1 */
    int64_t num_pages;            /* kv_cache dim 0 */
    int32_t max_q_len;            /* longest request: expect_accept's row length */
    float softmax_scale;
    /* inputs */
    void *q;               /* [T, H, W] dtype */
    void *kv_cache;        /* [num_pages, page_size, W] kv_dtype */
    int32_t *page_table;   /* [B, max_pages] */
    int32_t *q_indptr;     /* [B+1] */
    int32_t *kv_lens;      /* [B] */
    int32_t *tree_parents; /* [T] local parent, -1 for each root */
    int32_t *draft_tokens; /* [T]; NULL only in an inputs bundle without them */
    /* expectations: all set, or all NULL (inputs bundle) */
    float *expect_out;      /* [T, H, Dl] */
    float *expect_lse;      /* [T, H] */
    int32_t *expect_tokens; /* [T], -1 where the oracle's out row is NaN */
    int32_t *expect_accept; /* [B, max_q_len], -1 padded */
    float *expect_margin;   /* [T] */
} mlav_bundle;

/* Read and validate a bundle. MLAV_ERR_FORMAT with a sentence naming the tensor (or metadata
 * key) and the problem, MLAV_ERR_IO, MLAV_ERR_OUT_OF_MEMORY. On failure `b` is empty. */
mlav_status mlav_bundle_read(const char *path, mlav_bundle_mode mode, mlav_bundle *b);

/* Check the values of a bundle whose arrays match its sizes: lengths, page ids, parents,
 * token ids, acceptance paths. MLAV_OK or MLAV_ERR_FORMAT. */
mlav_status mlav_bundle_validate(const mlav_bundle *b, mlav_bundle_mode mode);

/* Write a bundle (expectations written when present). MLAV_OK, MLAV_ERR_IO,
 * MLAV_ERR_OUT_OF_MEMORY. */
mlav_status mlav_bundle_write(const char *path, const mlav_bundle *b);

void mlav_bundle_free(mlav_bundle *b);

/* Set this thread's error sentence to "<prefix>: <the current sentence>" and return `s` (the
 * current sentence cannot be an argument of mlav_set_error, which writes over it). */
mlav_status mlav_bundle_wrap_error(mlav_status s, const char *prefix);

static inline int32_t mlav_bundle_q_len(const mlav_bundle *b, int32_t r)
{
    return b->q_indptr[r + 1] - b->q_indptr[r];
}

/* The verify problem of a bundle (points into b's arrays). */
mlav_problem mlav_bundle_problem(const mlav_bundle *b);

/* The dtype of the bundle's kv_cache (kv_dtype resolved). */
mlav_dtype mlav_bundle_kv_dtype(const mlav_bundle *b);

/* The host tensors of a bundle's run (q, kv_cache, page table and, for an FP8 cache,
 * kv_scale), with the given mask (NULL: a causal chain), out and lse (may be NULL). */
mlav_tensors mlav_bundle_tensors(const mlav_bundle *b, const uint32_t *mask, void *out,
                                 float *lse);

/* The packed tree mask [T, mlav_tree_mask_words(max_q_len)] from tree_parents (malloc'd). */
mlav_status mlav_bundle_tree_mask(const mlav_bundle *b, uint32_t **mask);

/* "h=8 bf16 page=16 B=3 q=1+9+33 prefix=0+100+700"; an FP8 cache adds its scale after the
 * dtype: "h=8 bf16 kv=fp8_e4m3*0.00446429 page=64 ..." */
void mlav_bundle_describe(const mlav_bundle *b, char *buf, size_t len);

/* The safetensors dtype name of a mlav_dtype ("F32", "BF16", "F16", "F8_E4M3"). */
const char *mlav_bundle_dtype_name(mlav_dtype d);

#endif
