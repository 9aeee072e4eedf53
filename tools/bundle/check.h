/* Checking a golden bundle on a backend: run it, compare out/lse with the oracle's expectations
 * at the tolerances of docs/DESIGN.md#bundles, read tokens out the bundle's way and compare tokens
 * and greedy acceptance exactly. Shared by `mlaverify check` and the tests. */
#ifndef MLAV_BUNDLE_CHECK_H
#define MLAV_BUNDLE_CHECK_H

#include <stdint.h>

#include "bundle.h"
#include "mlaverify.h"

typedef enum mlav_verdict {
    MLAV_VERDICT_PASS = 0,
    MLAV_VERDICT_FAIL = 1,
    MLAV_VERDICT_UNSUPPORTED = 2 /* the backend declined the bundle's dims: not a pass */
} mlav_verdict;

typedef struct mlav_check_result {
    mlav_verdict verdict;
    mlav_backend backend;      /* the backend that ran (AUTO resolved, fallback included) */
    char shape[200];           /* mlav_bundle_describe; "" if the bundle did not load */
    double out_rel_l2;         /* NaN when not measured */
    double lse_max_abs;        /* NaN when not measured */
    int32_t tokens_ok;         /* decisive tokens reproduced */
    int32_t tokens_checked;    /* decisive tokens compared (all of a generated bundle's) */
    int32_t tokens_indecisive; /* tokens below the decisive margin: not compared */
    int32_t accept_ok;         /* requests whose accepted path matched */
    int32_t accept_checked;    /* requests compared (every consulted token decisive) */
    char reason[768];          /* why not PASS (the first failure found); "" on PASS */
} mlav_check_result;

/* Check bundle `b` (read in MLAV_BUNDLE_FULL mode) on ctx's backend; fills `r`. */
void mlav_check_bundle(mlav_context *ctx, const mlav_bundle *b, mlav_check_result *r);

/* Read `path` and check it: a bundle that does not load is a FAIL whose reason is the
 * reader's sentence. */
void mlav_check_file(mlav_context *ctx, const char *path, mlav_check_result *r);

/* "PASS", "FAIL", "UNSUPPORTED" */
const char *mlav_verdict_name(mlav_verdict v);

#endif
