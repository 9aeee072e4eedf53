/* Which split-kernel family the cuda backend runs: the rule, written once for the backend's
 * plans and for `mlaverify info` (mlav_cuda_device_describe). */
#ifndef MLAV_CUDA_FLASH_FAMILY_H
#define MLAV_CUDA_FLASH_FAMILY_H

#include "mlaverify.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mlav_flash_family {
    MLAV_FLASH_FAMILY_LEGAL = 0, /* mma.sync, cp.async: sm_80 to sm_120 (flash/) */
    MLAV_FLASH_FAMILY_SM90 = 1,  /* wgmma and a producer warpgroup: sm_90a only (sm90/) */
} mlav_flash_family;

/* The family a device of compute capability major.minor gets for the plans the sm_90a family
 * runs (BF16 or F16 q over a cache of the same dtype or FP8 E4M3): the sm_90a
 * family on cc 9.0 where this library was built with it, unless the environment variable
 * MLAV_FLASH_FAMILY is "legal" (for A/B runs and tests). `why` (may be NULL) gets a sentence
 * that says why. Every other plan (F32) runs the legal family. */
mlav_flash_family mlav_flash_family_of(int cc_major, int cc_minor, const char **why);

/* The Hopper kernels' KV tile, in keys. */
#define MLAV_FLASH_SM90_TILE_N 64

/* A block's fixed cost in the Hopper kernels, in KV rows of loop work, for their schedule
 * (mlav_flash_sm90_schedule_params; the legal kernel's is MLAV_FLASH_BLOCK_COST_KEYS): five
 * 64-key tiles. On the H200 ~18% of the seesaw kernel's stall samples at 240 items of 13 tiles
 * lie outside its loop of tiles (the prologue's Q and first tiles, the epilogue); with 320
 * against 128 the plans that change ran at 0.93-0.99 of the time (one of 44 production points
 * 1.03), production exact plans 0.996-0.997 geomean (docs/PERFORMANCE.md#hopper). */
#define MLAV_FLASH_SM90_BLOCK_COST_KEYS 320

/* The fewest 64-key tiles a block (or an SM) must have on average for the sm_90a kernels' longer
 * prologue to pay: on the H200 the seesaw kernel took 1.07-1.14x the producer kernel's time at 4
 * tiles a block and 0.93-0.94x at 7.9 (B 1, q_len 1 and 16, 32k), the sm_90a family 1.00-1.03x
 * the legal one's at 4 (q_len 1, H 8 and 16) and 0.91-0.93x at 8.1 (B 16, q_len 1, 4k);
 * docs/PERFORMANCE.md#hopper. 6 splits the interval, in which nothing was measured. */
#define MLAV_SM90_MIN_TILES 6

/* The fewest 64-row x 64-key tiles an SM an FP8 cache's batch that the keys kernel does not take
 * must read for the sm_90a family (its seesaw kernel, which converts each tile on its reader's
 * path): on the H200 it took 1.12-1.57x the legal family's time at 1-7.8 tiles an SM (B 16, H 8
 * and 16, q_len 1, 4k; B 1, H 128, q_len 1, 4k; B 1, H 8 and 16, q_len 16, 4k), 0.93x at 7.8
 * (B 1, H 8, q_len 16, 32k) and 0.73-0.97x from 15.5
 * (`git show d89d2b7:bench/results/2026-12-02-h200-s30`, call 3). */
#define MLAV_SM90_FP8_MIN_TILES 8

/* The same for a batch whose requests have more than 64 rows (two row tiles or more): at 7.8
 * tiles an SM (B 1, 32k, H 128 q_len 1, H 64 q_len 2, H 8 q_len 9 and 16; B 1, 4k, H 64 q_len 16)
 * the seesaw kernel took 0.91-0.94x the legal family's FP8 time on the H200 and 0.93-0.96x on an
 * H100, at 3.9-4.4 (B 1, 4k, H 128 q_len 4, H 64 q_len 9) 1.01-1.10x; one row tile at 7.8 tiles
 * (B 16, 4k, H 16 q_len 2 and 4, H 8 q_len 4, H 64 q_len 1) 1.01-1.24x, so
 * MLAV_SM90_FP8_MIN_TILES stays there (the FlashMLA harness's fp8keys and fp8legal variants at
 * 3fc5103: docs/PERFORMANCE.md#hopper). 6 splits the interval, in which nothing was measured. */
#define MLAV_SM90_FP8_WIDE_MIN_TILES 6

/* The fewest 64-key tiles an SM a batch of requests of 9 to 16 rows over an FP8 cache must read
 * for the sm_90a family's keys kernel (its 8-row instance takes any batch), at page_size 64
 * against the legal family's FP8 path: on the H200 the 16-row instance took 0.74x the time at
 * 7.8 tiles an SM (B 16, H 16 q_len 1 and H 8 q_len 2, 4k), 0.87x at 3.9 (B 1, H 16, 32k) and
 * 1.14x at 0.5 (B 1, 4k), the 8-row one 0.62x, 0.74x and 0.94x; on an H100 the 16-row one
 * 0.84-0.87x, 1.02-1.04x and 1.10-1.15x, the 8-row one 0.78-0.99x (docs/PERFORMANCE.md#hopper,
 * "FP8 cache"). Where the H200's and the H100's lines cross 1 (~2.3 and ~4.3 tiles, straight
 * between the points), nothing was measured; 3 takes the H200's gain at 3.9 for the H100's loss
 * of 2-4% there. */
#define MLAV_SM90_KEYS16_MIN_TILES 3

/* The fewest 64-row tiles that read each KV row of an FP8 cache, on average over the batch's KV
 * rows (mlav_row_tile_keys over total_kv), for a plan for one problem on the seesaw
 * kernel to stage its pages as F16 before the kernel (mlav_flash_sm90_staged_rule). On an
 * H100 staging took 0.75-0.78x the unstaged time at 8 and 9 row tiles, 0.66-0.68x at 16-18 and
 * 0.61-0.64x at 32; below 8 the pass is a larger share of the time (by arithmetic 0.90-1.01x at
 * 4 on the H200), so 4 stays unstaged (docs/PERFORMANCE.md#hopper, "FP8 cache"). */
#define MLAV_SM90_FP8_STAGED_MIN_ROW_TILES 8

/* The fewest 64-row tiles that read each KV row of a 16-bit cache, on average over the batch's
 * KV rows (mlav_row_tile_keys over total_kv), and the fewest KV rows a request on average,
 * for a plan's seesaw kernel to issue each pair's S_A in the pair before
 * (mlav_flash_sm90_early_s_rule). On an H100 (two builds of the same code, 2-4 samples a
 * shape, geomeans by batch and prefix, where unchanged shapes read 0.999-1.010) that took
 * 0.970-0.993x the time from 32k with 16 to 32 row tiles, 0.974-0.988x at 8-9 but 1.015x at B 1,
 * 32k, and 1.025-1.040x at 4096 with 16 or more; 1.00-1.18x at 2-4 row tiles, where the queued
 * S_A waits for blocks still landing (docs/PERFORMANCE.md#hopper). Nothing measured at 5-7 row
 * tiles or between 4096 and 32768 rows. */
#define MLAV_SM90_EARLY_S_MIN_ROW_TILES 8
#define MLAV_SM90_EARLY_S_MIN_KV 32768

/* The family a plan gets: mlav_flash_family_of's, except where the legal family measured faster
 * (docs/PERFORMANCE.md#hopper), unless MLAV_FLASH_FAMILY is "sm90" (so that tests reach the
 * sm_90a family with them). An FP8 E4M3 cache (kv_fp8) that the keys kernel takes
 * (mlav_flash_sm90_keys_rule: requests of at most 16 folded rows, max_q_len x H, and a positive
 * `scale`) keeps the sm_90a family at 8 rows at most, and from MLAV_SM90_KEYS16_MIN_TILES 64-key
 * tiles an SM at 9-16 rows (total_kv, the batch's KV rows, or a plan for limits' max_batch x
 * max_kv_len; sm_count SMs). Otherwise the legal family takes requests of at most 32 rows whose
 * batch reads fewer than MLAV_SM90_MIN_TILES 64-key tiles an SM, and an FP8 cache whose batch
 * reads fewer than MLAV_SM90_FP8_MIN_TILES tiles of 64 rows x 64 keys an SM
 * (MLAV_SM90_FP8_WIDE_MIN_TILES where a request has more than 64 rows)
 * (ceil(rows_per_request / 64) x total_kv / 64, over sm_count). A KV shard (sharded nonzero)
 * always runs the legal family: the sm_90a kernel does not map a shard's rows (its mask loop
 * with the map ran unsharded plans up to 1.04x slower). */
mlav_flash_family mlav_flash_family_for_plan(int cc_major, int cc_minor, int64_t rows_per_request,
                                             int64_t total_kv, int sm_count, int kv_fp8,
                                             float scale, int sharded);

/* Within the sm_90a family, whether a plan's launches take the seesaw kernel (sm90/seesaw/:
 * two math warpgroups on alternate tiles, no producer) rather than the producer kernel
 * (sm90/kernel.cuh): for an FP8 E4M3 cache (kv_fp8 nonzero: the producer's conversion held its
 * ring), and where the blocks average at least MLAV_SM90_MIN_TILES KV tiles (tile_rows, the
 * 64-key tiles of all blocks, over n_items), whatever their rows and page size; the producer
 * kernel, whose blocks start sooner, below. The environment variable MLAV_SM90_KERNEL (read at
 * plan time) overrides it for A/B runs and tests: "seesaw" takes the seesaw kernel for every
 * launch, "producer" never. Either way a plan whose softmax_scale is <= 0 takes the producer
 * kernel: the seesaw kernel keeps one-factor scores raw through their rows' maxima, which are
 * the maxima of the scaled scores only for a factor > 0, and 0 x a masked key's -inf is NaN
 * (sm90/score.cuh, score_ctx). */
int mlav_flash_sm90_seesaw_rule(int64_t tile_rows, int64_t n_items, int kv_fp8, float scale);

/* The same rule for a plan for limits, which knows its limits rather than its items: row_tiles
 * (the limits' rows in 64-row tiles) times the 64-key tiles of max_kv_len, over the items of the
 * step rule's fewest whole waves of target_blocks (the unsplit batch's `max_tiles` blocks
 * rounded up to waves; at most `max_items`, the grid's). Over the grid's items, which count the
 * more waves a step may take, the rule took the producer kernel where the exact plan of the
 * limits' own lengths takes the seesaw (6 of the production preset's 36 single requests at
 * limits of their own lengths; docs/PERFORMANCE.md#hopper). */
int mlav_flash_sm90_seesaw_limits(int64_t row_tiles, int64_t max_kv_len, int64_t max_tiles,
                                  int64_t target_blocks, int64_t max_items, int kv_fp8,
                                  float scale);

/* Within the sm_90a family, the keys kernel's instance for a plan over an FP8 E4M3 cache
 * (sm90/keys/: the keys on the MMA's M side, K and V converted in registers, for blocks of at
 * most 16 rows): 8 or 16, the fewest rows that hold every request's max_rows (max_q_len x H: the
 * problem's, or a plan for limits' own), or 0 for the seesaw's or producer's rule. Taken for a
 * cache that is FP8 (kv_fp8), requests of at most 16 rows and a softmax_scale > 0 (its scores
 * stay raw through the maxima, as the seesaw's: mlav_flash_sm90_seesaw_rule): on an H100 it took
 * 0.56-0.73x the seesaw's time at every such point the family rule gives the sm_90a family (B 1,
 * 131k; B 16, 32k and 131k; docs/PERFORMANCE.md#hopper). MLAV_SM90_KERNEL=seesaw or producer
 * (read at plan time) turns it off, for A/B runs and tests. */
int mlav_flash_sm90_keys_rule(int64_t max_rows, int kv_fp8, float scale);

/* Within the sm_90a family's seesaw kernel (seesaw != 0), whether a plan for one problem over an
 * FP8 E4M3 cache (kv_fp8) stages the pages it reads as F16 in its workspace before the kernel
 * (sm90/staged_kv.cu; 2 bytes a KV element read), so that each KV tile is converted once, not
 * once by each 64-row tile that reads it: where its KV rows are read by at least
 * MLAV_SM90_FP8_STAGED_MIN_ROW_TILES row tiles on average (row_tile_keys, by
 * mlav_row_tile_keys, over total_kv) and softmax_scale > 0. MLAV_SM90_KERNEL (read at
 * plan time) "staged" stages every such plan of the seesaw kernel, "seesaw" or "producer" none,
 * for A/B runs and tests. Plans for limits do not stage. */
int mlav_flash_sm90_staged_rule(int64_t row_tile_keys, int64_t total_kv, int kv_fp8, float scale,
                                int seesaw);

/* Within the sm_90a family's seesaw kernel (seesaw != 0), whether a plan over a 16-bit cache
 * (kv_fp8 zero) takes the instances whose WG0 issues each pair's S_A in the pair
 * before (mlav_flash_launch_opts.sm90_early_s): where its KV rows are read by at least
 * MLAV_SM90_EARLY_S_MIN_ROW_TILES row tiles on average (row_tile_keys, by
 * mlav_row_tile_keys, over total_kv) and its batch's requests hold at least
 * MLAV_SM90_EARLY_S_MIN_KV rows on average (total_kv over batch). MLAV_SM90_EARLY_S (read at plan
 * time) "1" takes them for every such plan of the seesaw kernel, "0" for none, for A/B runs and
 * tests. A plan for limits asks as one request at max_q_len and max_kv_len (row_tile_keys
 * ceil(max_q_len x H / 64) x max_kv_len, total_kv max_kv_len, batch 1): an engine's verify steps
 * run at their draft length, the limits' (the production preset's H 64, q_len 9 to 64 among
 * them), and its engine path should keep pace with the exact plan; its steps far below
 * max_kv_len take the order where it lost (4096). */
int mlav_flash_sm90_early_s_rule(int64_t row_tile_keys, int64_t total_kv, int32_t batch,
                                 int kv_fp8, int seesaw);

/* The most KV bytes a plan reads (each request's rows once) for which the seesaw kernel's copies
 * of a 16-bit cache take the L2 evict_first policy, as FlashMLA's TMA loads do
 * (mlav_flash_sm90_l2_first). On the H200 after the harness's flush (256 MB zeroed: an L2 of
 * dirty lines) the policy took 0.935-0.95x the time at B 16, 4096 (76 MB) where memory-bound,
 * 0.89-0.91x at page_size 1, and 0.957-0.991x at B 1, 131k (151 MB); 1.00x after a read flush and
 * where tensor-bound. Its copies at evict_normal took 1.02-1.05x at B 16 from 32k (604 MB and
 * more), where the plain ones stay (docs/PERFORMANCE.md#hopper). */
#define MLAV_SM90_L2_FIRST_BYTES (256ll << 20)
/* Whether a plan's seesaw launches stream their KV with the L2 evict_first policy (the
 * instances of sm90/instances_l2first.cu): a 16-bit cache (kv_fp8 zero; the FP8 instances took
 * 1.006-1.021x the time with it on the H200) whose KV rows read, kv_rows of W elements, total at
 * most MLAV_SM90_L2_FIRST_BYTES. A plan for limits asks with its most rows (max_batch x
 * max_kv_len), so that no step it runs reads more. */
int mlav_flash_sm90_l2_first(int64_t kv_rows, int32_t W, int kv_fp8);
/* The family's name, as `mlaverify info` prints it. */
const char *mlav_flash_family_name(mlav_flash_family f);

#ifdef __cplusplus
}
#endif

#endif
