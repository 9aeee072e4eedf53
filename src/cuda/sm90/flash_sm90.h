/* The Hopper (sm_90a) flash kernel family: the legal split kernel's contract (mlav_flash_params,
 * its split items, out / lse for an unsplit item and the fp16 partial for a split one, merged by
 * combine.cu unchanged) on wgmma, in two kernels: one with a producer warpgroup (kernel.cuh) and
 * the seesaw kernel of two math warpgroups that refill their own stages (seesaw/), which a
 * launch takes by mlav_flash_launch_opts.sm90_seesaw; and for an FP8 cache's blocks of at most 16
 * rows the keys kernel (keys/, mma.sync with the keys on M: mlav_flash_launch_opts.sm90_keys).
 * Built only with MLAV_WITH_SM90.
 * Runs: BF16 and F16 q with a cache of the same dtype or FP8 E4M3 (kv_scale a host value or
 * kv_scale_ptr; its tiles converted to F16 in shared memory, as wgmma takes no MN-major 8-bit B
 * and no mixed types: gather.cuh); any page size, page ids outside the pool (NaN rows), a
 * shared page table (page_table_rows), trees and chains, split and unsplit items, PDL, plans for
 * one problem and plans for limits (step != 0: the STEP instance, which takes its item as the
 * legal STEP instance does). F32 stays on the FMA path. A caller checks mlav_flash_sm90_supported (cc 9.0,
 * dtypes, shared memory). */
#ifndef MLAV_CUDA_SM90_FLASH_SM90_H
#define MLAV_CUDA_SM90_FLASH_SM90_H

#include <cuda.h> /* CUtensorMap (a type: the driver is reached through the runtime) */

#include "../../common/staged_pages.h"
#include "../flash.h"
#include "../flash_family.h"

/* The split schedule for the Hopper kernel: the legal kernel's parameters
 * (mlav_flash_schedule_params) with splits aligned to, and at least, its 64-key tile, so that no
 * split ends in a half-empty tile (the kernel runs any split; 32-key splits cost it a whole
 * tile each), and its own block cost. Which of the two schedules is faster where is measured by
 * bench/diag/sm90_timing. */
static inline mlav_schedule_params mlav_flash_sm90_schedule_params(int sm_count, int blocks_per_sm)
{
    mlav_schedule_params sp = mlav_flash_schedule_params(sm_count, blocks_per_sm);
    sp.key_align = MLAV_FLASH_SM90_TILE_N;
    sp.min_chunk = MLAV_FLASH_SM90_TILE_N;
    sp.block_cost_keys = MLAV_FLASH_SM90_BLOCK_COST_KEYS;
    sp.shares = 1;
    return sp;
}

/* mlav_flash_sm90_seesaw_rule (flash_family.h) for a schedule's items (the 64-key tiles of all
 * of them, over their count) over a cache that is FP8 E4M3 or not (kv_fp8), at the plan's
 * softmax scale. */
static inline int mlav_flash_sm90_seesaw_of(const mlav_split_item *items, int32_t n_items,
                                            int kv_fp8, float scale)
{
    int64_t tile_rows = 0;
    for (int32_t i = 0; i < n_items; i++)
        tile_rows += (items[i].kv_end - items[i].kv_begin + MLAV_FLASH_SM90_TILE_N - 1) /
                     MLAV_FLASH_SM90_TILE_N;
    return mlav_flash_sm90_seesaw_rule(tile_rows, n_items, kv_fp8, scale);
}

/* Whether this device and these dtypes can run the Hopper kernel: MLAV_OK, or
 * MLAV_ERR_UNSUPPORTED with a sentence (not cc 9.0, another dtype, too little shared memory). */
mlav_status mlav_flash_sm90_supported(mlav_dtype dtype, mlav_dtype kv_dtype,
                                      const mlav_cuda_device *dev);

/* Once per device: the checks above, the kernels' shared-memory attribute (past the 48 KB a
 * kernel gets unasked; 227 KB opt-in), and their resident blocks per SM (1) through
 * *blocks_per_sm, for the schedule (mlav_flash_schedule_params). */
mlav_status mlav_flash_sm90_prepare(mlav_dtype dtype, mlav_dtype kv_dtype,
                                    const mlav_cuda_device *dev, int *blocks_per_sm);

/* Launch the split kernel then (if any) the combine on `stream`: mlav_flash_launch's contract
 * (`step`: a plan for limits, its grid of fp->n_items blocks running past the step's schedule),
 * (lo->kv_fp8: the FP8 E4M3 instances; with lo->sm90_staged, fp's cache is the staged pool of
 * mlav_flash_sm90_stage and the seesaw kernel its staged instance), for BF16 and F16 plans
 * (otherwise MLAV_ERR_UNSUPPORTED). */
mlav_status mlav_flash_sm90_launch(mlav_dtype dtype, const mlav_flash_params *fp,
                                   const mlav_flash_launch_opts *lo, int step,
                                   cudaStream_t stream);

/* The launch's tensor map of the KV pool for the producer's TMA tiles (kv_tensor_map.h):
 * *on = 1 and the map encoded where the pool qualifies (a 16-bit cache, kv_fp8 == 0, page_size a
 * multiple of 64, and MLAV90_TMA), else *on = 0 and a zeroed map (every tile by cp.async).
 * MLAV_OK, or MLAV_ERR_CUDA with a sentence where the driver's encoder cannot be reached or
 * refuses the pool. */
mlav_status mlav_flash_sm90_kv_map(const mlav_flash_params *fp, int kv_fp8, CUtensorMap *map,
                                   int *on);

/* The FP8 E4M3 cache's instance for q's dtype (BF16 or F16) and plan kind (step != 0: a plan
 * for limits), as a kernel address for cudaLaunchKernel (instances_e4m3.cu; launch_sm90.cu's
 * table). */
const void *mlav_flash_sm90_e4m3_kernel(mlav_dtype dtype, int step);

/* The same for the FP8 E4M3 cache's seesaw kernel (sm90/seesaw/). */
const void *mlav_flash_sm90_e4m3_seesaw(mlav_dtype dtype, int step);

/* The seesaw kernel over a 16-bit cache of q's dtype whose KV copies take the L2 evict_first
 * policy (mlav_flash_launch_opts.sm90_l2_first), for a plan kind (step) and a launch that gathers
 * every tile or not (gather: its GATHER instance), as a kernel address (instances_l2first.cu). */
const void *mlav_flash_sm90_l2first_seesaw(mlav_dtype dtype, int step, int gather);

/* The seesaw kernel over a 16-bit cache of q's dtype whose WG0 issues each pair's S_A in the pair
 * before (EARLY_S: mlav_flash_launch_opts.sm90_early_s), for a plan kind (step), a launch that
 * gathers every tile or not (gather) and an L2 policy (l2_first), as a kernel address
 * (instances_early.cu, instances_early_l2first.cu). */
const void *mlav_flash_sm90_early_seesaw(mlav_dtype dtype, int step, int gather, int l2_first);
const void *mlav_flash_sm90_early_l2first_seesaw(mlav_dtype dtype, int step, int gather);

/* The seesaw kernel over an FP8 E4M3 cache staged as F16 (e4m3_staged: block.cuh) for q's
 * dtype, in a plan for one problem (instances_staged.cu). */
const void *mlav_flash_sm90_staged_seesaw(mlav_dtype dtype);

/* A plan's FP8 cache staged as F16 before the seesaw kernel (staged_kv.cu;
 * mlav_flash_sm90_staged_rule): its pages (src/common/staged_pages.h) and their table, both
 * device arrays the plan owns, and their counts. */
typedef struct mlav_sm90_staging {
    const mlav_staged_page *pages; /* [n_pages] */
    const int32_t *table;          /* [batch, max_pages] */
    int32_t n_pages, max_pages;
} mlav_sm90_staging;

/* Bytes of a staged pool of n_pages pages (64 rows of 576 F16 values each). */
static inline size_t mlav_flash_sm90_staged_bytes(int32_t n_pages)
{
    return (size_t)n_pages * MLAV_STAGED_PAGE_ROWS * MLAV_FLASH_W * 2;
}

/* Stage fp's FP8 cache on `stream`: each of sg's pages converted to F16 into `pool`
 * (mlav_flash_sm90_staged_bytes, 16-byte aligned), its rows read through fp's page table as the
 * kernels read them (a page id outside the pool: the NaN row's values), rows past a request's
 * end zero; and *staged, fp with the staged pool as its cache (page_size 64, sg's table), for
 * mlav_flash_sm90_launch with lo->sm90_staged. */
mlav_status mlav_flash_sm90_stage(const mlav_flash_params *fp, const mlav_sm90_staging *sg,
                                  void *pool, mlav_flash_params *staged, cudaStream_t stream);

/* The keys kernel (sm90/keys/) over an FP8 E4M3 cache for q's dtype, whose blocks hold at most
 * `rows` (8 or 16) rows, and plan kind (step != 0: a plan for limits): its address, threads a
 * block and dynamic shared memory (instances_keys.cu). */
typedef struct mlav_sm90_keys_shape {
    const void *kernel;
    unsigned threads, smem;
} mlav_sm90_keys_shape;
mlav_sm90_keys_shape mlav_flash_sm90_keys(mlav_dtype dtype, int rows, int step);

#endif
