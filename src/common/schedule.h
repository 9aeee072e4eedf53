/* The split-KV scheduler of the flash path: a pure host function from the lengths and the
 * device's parallelism to a list of blocks, unit-tested on the CPU (tests/test_schedule.c). */
#ifndef MLAV_COMMON_SCHEDULE_H
#define MLAV_COMMON_SCHEDULE_H

#include <stdint.h>

#include "../core/problem.h"
#include "hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One block of the flash kernel: rows [mtile*rows_per_tile, +rows_per_tile) of request b's
 * folded (token, head) rows against its KV rows [kv_begin, kv_end): the rows the plan's rank
 * reads (its local rows with a KV shard, src/common/shard.h; every row without), which may be
 * none (kv_begin == kv_end: a rank holding no row of the request writes its empty state), while
 * `prefix` stays the request's global prefix, against which the kernel judges visibility at
 * each local row's global position. slot < 0: the block owns
 * every KV row of the request and writes out/lse directly; else it writes a partial state into
 * workspace slot `slot` for the combine kernel. */
typedef struct mlav_split_item {
    int32_t b, mtile, kv_begin, kv_end, slot;
    int32_t q_start, q_len, prefix; /* request b's, carried so a block starts without a chain
                                       of dependent loads through q_indptr and kv_lens */
} mlav_split_item;

/* One combine task: merge the `nsplit` partial states of (b, mtile), held in slots
 * slot0 + s * slot_stride for s < nsplit. */
typedef struct mlav_combine_item {
    int32_t b, mtile, nsplit, slot0, slot_stride;
    int32_t q_start, rows, pad; /* request b's first token and folded row count q_len * H */
} mlav_combine_item;

typedef struct mlav_schedule {
    int32_t n_items, n_combine, n_slots;
    int32_t chunk_keys;         /* the target KV rows per split chosen for this problem */
    mlav_split_item *items;     /* [n_items], ordered split-major, m-tile fastest, so blocks that
                                   read the same KV rows are handed out together and share L2
                                   (in the first wave only: docs/PERFORMANCE.md, "B 16: a
                                   split's row tiles at the L2") */
    mlav_combine_item *combine; /* [n_combine] */
    int32_t *splits;            /* [B] splits per request (0 when q_len is 0) */
} mlav_schedule;

typedef struct mlav_schedule_params {
    int32_t rows_per_tile;  /* M rows per block */
    int32_t key_align;      /* split boundaries are multiples of this (the kernel's KV tile) */
    int32_t min_chunk;      /* fewest KV rows worth a split (amortises loading Q) */
    int32_t max_splits;     /* most splits of one request (bounds the combine's work) */
    int32_t target_blocks;  /* blocks resident at once: SMs x blocks per SM (one wave) */
    int32_t block_cost_keys; /* a block's fixed cost (prologue, epilogue) in KV rows of loop
                                work: with it the plan weighs longer splits, and up to more_waves
                                more waves of shorter ones, against the fewest whole waves of the
                                shortest (mlav_schedule_model_time); 0 keeps those */
    int32_t split_cost_keys; /* the combine's cost per split of the most split item, in KV rows
                                of loop work (the model's second term) */
    int32_t more_waves;     /* with a block cost, the most waves beyond the fewest that the plan
                               weighs (each a model run over its blocks: host time) */
    int32_t shares;         /* 1: with a block cost, the exact plan also weighs equal shares of
                               the batch's KV tiles across requests (schedule_shares.h) and keeps
                               them where they model at most 0.97 of the uniform schedule's time
                               in whole tiles (mlav_schedule_tile_time);
                               0: the uniform schedule only. Plans for limits ignore it. */
} mlav_schedule_params;

/* Splits of a request with kv KV rows at a target chunk: capped at max_splits, then evened out
 * and re-counted so that alignment leaves no empty split; *per = KV rows per split. The one split
 * rule of both schedules (this one and the engine step's, schedule_step.h, on the host and the
 * device). In 32-bit unsigned arithmetic (kv and chunk are below 2^31, so no sum below
 * overflows): the device scheduler evaluates it for every request at every chunk it weighs, and
 * a 64-bit division costs several times a 32-bit one there. */
MLAV_HD int64_t mlav_schedule_splits(int64_t kv64, int64_t chunk64, int32_t key_align,
                                     int32_t max_splits, int64_t *per)
{
    const uint32_t kv = kv64 < 1 ? 1u : (uint32_t)kv64, chunk = (uint32_t)chunk64;
    const uint32_t ka = (uint32_t)key_align;
    uint32_t s = (kv + chunk - 1) / chunk;
    if (s > (uint32_t)max_splits)
        s = (uint32_t)max_splits;
    const uint32_t pr = ((kv + s - 1) / s + ka - 1) / ka * ka;
    *per = pr;
    return (kv + pr - 1) / pr;
}

/* Build the schedule. Returns MLAV_OK, MLAV_ERR_INVALID_ARG (bad params) or
 * MLAV_ERR_OUT_OF_MEMORY. Free with mlav_schedule_free. */
mlav_status mlav_schedule_build(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                mlav_schedule *out);
void mlav_schedule_free(mlav_schedule *s);

/* The schedule's modelled time, in KV rows of loop work: its blocks go, in item order, to the
 * first of target_blocks slots to come free (as the GPU hands out blocks), each costing
 * block_cost_keys plus its KV rows; then the combine, split_cost_keys per split of its most split
 * item. -1 when out of host memory. */
int64_t mlav_schedule_model_time(const mlav_schedule *s, const mlav_schedule_params *sp);

/* The same with each block's KV rows rounded up to whole key_align tiles (the kernel's tile: a
 * partial last tile costs it a whole one). The exact plan weighs equal shares against the
 * uniform schedule by it (schedule_shares.h). */
int64_t mlav_schedule_tile_time(const mlav_schedule *s, const mlav_schedule_params *sp);

/* The first term of either: when the last of `n` blocks `items` (in that order) ends, each
 * block's KV rows rounded up to key_align tiles where `whole_tiles`. */
int64_t mlav_schedule_dispatch_time(const mlav_split_item *items, int64_t n,
                                    const mlav_schedule_params *sp, int whole_tiles);

/* mlav_schedule_model_time of the schedule at `chunk` KV rows per split (a built schedule's
 * chunk_keys), without building it: how mlav_schedule_build compares its candidates. It walks the
 * blocks in the order the build lays them out, so the two must agree (tests/test_schedule.c checks
 * every built schedule). -1 when out of host memory. */
int64_t mlav_schedule_model_chunk(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                  int64_t chunk);

#ifdef __cplusplus
}
#endif

#endif
