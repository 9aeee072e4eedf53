/* The bundle generator behind `mlaverify gen`: seeded, deterministic problems with shuffled,
 * NaN-poisoned pages, expectations from the fp64 oracle, only decisive tokens, and draft tokens
 * that make accepted paths of chosen depths. Also fills in the expectations of an inputs-only
 * bundle (captured from an engine, written by golden/write_bundle.py). */
#ifndef MLAV_BUNDLE_GEN_H
#define MLAV_BUNDLE_GEN_H

#include <stdint.h>

#include "bundle.h"
#include "mlaverify.h"

#define MLAV_GEN_MAX_REQUESTS 64

/* The default scale of an FP8 cache (`--kv-scale`). The drawn KV values are uniform in [-1, 1),
 * so their e4m3 bytes reach 224, half of e4m3's largest 448: nothing saturates, and only
 * values below 2^-6 / 224 (about 7e-5: a few in 10^5) are e4m3 subnormals, so that decoding
 * path is exercised without dominating. 1/224 is not a power of two, nor exact in BF16 or
 * F16, so a backend that rounds the scale is not hidden by an exact product: rounded to BF16
 * it fails the committed BF16 FP8 bundles' lse tolerance, rounded to F16 the F32 one's
 * (golden/FORMAT.md, section 3). */
#define MLAV_GEN_KV_SCALE (1.0f / 224.0f)

typedef enum mlav_tree_kind {
    MLAV_TREE_CHAIN = 0, /* parents[i] = i - 1: a DFlash block or a top-1 EAGLE chain */
    MLAV_TREE_BUSHY = 1, /* parents among the first four nodes: wide and shallow (depth <= 3) */
    MLAV_TREE_DEEP = 2   /* parent is the previous node 2 times in 3, else any earlier node */
} mlav_tree_kind;

/* How deep the accepted path should go (draft tokens are chosen to make it so). */
#define MLAV_ACCEPT_AUTO (-1)    /* by request index: full, partial, none, full, ... */
#define MLAV_ACCEPT_NONE (-2)    /* only the root */
#define MLAV_ACCEPT_PARTIAL (-3) /* half the depth of the deepest node */
#define MLAV_ACCEPT_FULL (-4)    /* down to the deepest node */
                                 /* >= 0: that depth (capped at the deepest node's) */

typedef struct mlav_gen_request {
    int32_t q_len;  /* draft nodes, root included, >= 1 */
    int32_t prefix; /* KV rows before the draft nodes, >= 0 */
    mlav_tree_kind tree;
    int32_t accept; /* MLAV_ACCEPT_* or a depth */
} mlav_gen_request;

typedef struct mlav_gen_params {
    uint64_t seed; /* everything is a function of the parameters and this */
    int32_t H, Dl, Dr;
    mlav_dtype dtype;      /* of q (and out) */
    mlav_dtype kv_dtype;   /* of the cache: MLAV_DTYPE_FP8_E4M3, or dtype (0, the default,
                              also means dtype, as in mlav_problem) */
    float kv_scale;        /* FP8 only: each value v is stored as e4m3(v / kv_scale) */
    int32_t page_size;
    int32_t vocab;
    uint64_t readout_seed; /* defaults to seed */
    int32_t spare_pages;   /* unused NaN pages shuffled into the pool, >= 1 */
    float softmax_scale;   /* defaults to 1/sqrt(192) (DeepSeek-V3's qk head dim) */
    int32_t B;
    mlav_gen_request req[MLAV_GEN_MAX_REQUESTS];
    const char *expect_from; /* an inputs bundle to complete, or NULL to generate */
    int32_t readout_tries;   /* --expect-from: readout seeds tried for the most decisive */
    char source[2048];       /* the command line (output path left out), for the metadata */
} mlav_gen_params;

typedef struct mlav_gen_stats {
    int32_t redraws;         /* query rows drawn again because their token was not decisive */
    int32_t indecisive;      /* tokens left below the decisive margin (--expect-from only) */
    double min_margin_ratio; /* smallest margin / required margin over decisive tokens */
    int32_t readout_tries;   /* readout seeds tried (--expect-from) */
} mlav_gen_stats;

void mlav_gen_defaults(mlav_gen_params *p);

/* Parse `mlaverify gen` options (argv[0] is the first option, not "gen"); *out_path is the
 * one positional argument. Fills p->source. Returns MLAV_OK or MLAV_ERR_INVALID_ARG with a
 * sentence. */
mlav_status mlav_gen_parse_args(int argc, char **argv, mlav_gen_params *p, const char **out_path);

/* The usage text of `mlaverify gen`. */
const char *mlav_gen_usage(void);

/* Generate a bundle (b is filled; free with mlav_bundle_free). Returns MLAV_OK,
 * MLAV_ERR_INVALID_ARG (bad parameters), MLAV_ERR_OUT_OF_MEMORY, MLAV_ERR_INTERNAL. */
mlav_status mlav_gen_bundle(const mlav_gen_params *p, mlav_bundle *b, mlav_gen_stats *st);

/* Complete an inputs bundle in place: expectations from the fp64 oracle, the readout seed
 * (from b->readout_seed on, p->readout_tries of them) that leaves the fewest indecisive
 * tokens, and draft tokens when it has none. */
mlav_status mlav_gen_expect(const mlav_gen_params *p, mlav_bundle *b, mlav_gen_stats *st);

/* Either of the above as p says, then write to out_path. */
mlav_status mlav_gen_run(const mlav_gen_params *p, const char *out_path, mlav_gen_stats *st,
                         mlav_bundle *written);

#endif
