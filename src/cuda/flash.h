/* Parameters and launchers of the flash verify path (the split kernel in src/cuda/flash,
 * combine.cu), used by backend_flash.cu. Plain structs; strides in elements; pointers are
 * device. */
#ifndef MLAV_CUDA_FLASH_H
#define MLAV_CUDA_FLASH_H

#include <cuda_runtime.h>

#include "../common/fastdiv.h"
#include "../common/schedule.h"
#include "../common/schedule_step.h"
#include "cuda_device.h"

/* The flash kernel's shape as the plan, the schedule and the combine read it: the DeepSeek-V3 /
 * Kimi K2 latent layout. The kernel takes its own from its traits (flash/traits.cuh), and the
 * launch table (flash/launch.cu) checks that every family has this one. */
#define MLAV_FLASH_DL 512
#define MLAV_FLASH_DR 64
#define MLAV_FLASH_W (MLAV_FLASH_DL + MLAV_FLASH_DR)
#define MLAV_FLASH_BLOCK_M 64    /* folded (token, head) rows per block */
#define MLAV_FLASH_BLOCK_N 16    /* KV rows per pipeline tile */
#define MLAV_FLASH_SPLIT_ALIGN 32 /* split boundaries and the shortest split, in KV rows */
#define MLAV_FLASH_THREADS 256   /* 8 warps: 2 groups of 32 rows x 4 warps (depth / columns) */
#define MLAV_FLASH_SCALE_COLS 128 /* columns per part_scale entry (one warp's output columns) */
#define MLAV_LOG2E 1.4426950408889634f
/* Most splits of one request: the plan's cap and the combine's shared-memory arrays (two splits
 * per thread). 256 lets a lone 64-row request (q_len 1, H = 64) fill one block per SM of an
 * sm_120 (170-188 SMs), and on 132 SMs take the 129th split that a prefix of 2^k keys plus its
 * draft rows needs to keep whole 32-key splits of 2^k / 128 keys (128 rounded every split up by
 * a tile: 125 splits of 1056 keys at q_len 1, prefix 131072). */
#define MLAV_FLASH_MAX_SPLITS 256
/* A split block's fixed cost in KV rows of loop work, for the schedule's choice of waves
 * (mlav_schedule_params.block_cost_keys), fitted to measured one- against two-wave ratios: 128
 * keeps every choice that measured faster and none that measured slower
 * (docs/PERFORMANCE.md#schedule). */
#define MLAV_FLASH_BLOCK_COST_KEYS 128
/* The combine's cost per split (mlav_schedule_params.split_cost_keys), fitted to a lone q_len 1
 * request in fewer splits against 129 (docs/PERFORMANCE.md#schedule). */
#define MLAV_FLASH_SPLIT_COST_KEYS 1
/* The most waves beyond the fewest that the plan weighs (mlav_schedule_params.more_waves). A
 * batch whose row tiles a little exceed the SMs (16 requests x 9 row tiles = 144 on 132) is best
 * in 6 more. Over random engine-like batches 16 gain almost nothing over 8 for much more host
 * time per plan (bench/diag/schedule_choices.c; docs/PERFORMANCE.md#schedule). */
#define MLAV_FLASH_MORE_WAVES 8

/* The device scheduler's parameters (schedule_step.cu): one step's lengths to its schedule. */
typedef struct mlav_step_sched_params {
    const int32_t *q_indptr;     /* [batch + 1] device */
    const int32_t *kv_lens;      /* [batch] device */
    int32_t batch, H;
    mlav_limits lim;
    mlav_schedule_params sp;
    mlav_step_bounds bd;
    mlav_step_header *hdr;       /* the workspace's step region */
    mlav_split_item *items;      /* [bd.max_items] */
    mlav_combine_item *combine;  /* [bd.max_combine] */
    mlav_fastdiv ka_div;         /* division by sp.key_align */
    size_t region_bytes;         /* the step region, zero past the combine items */
    unsigned long long owner;    /* the plan's id, stamped into the header with lim */
    mlav_shard shard;            /* the plan's KV shard: kv_lens are global, the splits are
                                    over the rank's rows of each request (src/common/shard.h) */
} mlav_step_sched_params;

/* Once per device before its first launch (a plan for limits' creation): the device scheduler's
 * shared memory is past the 48 KB a kernel gets unasked. */
mlav_status mlav_step_schedule_prepare(void);

/* Launch the device scheduler (one block) on `stream`. */
mlav_status mlav_step_schedule_launch(const mlav_step_sched_params *p, cudaStream_t stream);

/* The parameters of the split kernels (flash/kernel.cuh, verify_flash_f32.cu) and the combine
 * (combine.cu), by value, one struct for all: the kernels read interleaved fields, and a struct
 * per kernel would move the parameter offsets of fields the split kernel's main loop reads (H,
 * scale_log2, the gather's page fields), which changes its machine code
 * (docs/PERFORMANCE.md#ptxas). Host-only choices go in mlav_flash_launch_opts instead. */
typedef struct mlav_flash_params {
    const void *q;                  /* [T, H, W] */
    const void *kv;                 /* [num_pages, page_size, W] */
    const int32_t *page_table;      /* [B, max_pages] */
    const uint32_t *tree_mask;      /* [T, mask_words], NULL = causal */
    void *out;                      /* [T, H, Dl] */
    float *lse;                     /* [T, H], may be NULL */
    void *part_o;                   /* [n_slots, BLOCK_M, Dl] partial outputs O / l (workspace):
                                     * fp32 for F32 plans; fp16 for 16-bit plans, scaled by the
                                     * inverse of part_scale */
    float *part_lse;                /* [n_slots, BLOCK_M] */
    const mlav_split_item *items;   /* [n_items] */
    const mlav_combine_item *combine; /* [n_combine] */
    int32_t n_items, n_combine;
    int32_t H, page_size, max_pages, mask_words;
    mlav_fastdiv page_div;          /* KV row / page_size, branch-free (fastdiv.h) */
    uint32_t page_elems;            /* page_size * W: elements from one page to the next */
    uint32_t page_limit;            /* min(num_pages, 2^31): a page id is valid iff (uint32) id < it */
    const void *nan_row;            /* [W] NaN of the dtype: what a page id outside the pool reads */
    int32_t pdl;                    /* 1: launch the combine as a programmatic dependent (sm_90+);
                                     * read by the launch only, kept here so that the fields
                                     * after it keep their parameter offsets */
    int32_t combine_col_blocks;     /* 1, 2, 4 or 16 column blocks per row (combine.cu; a plan
                                     * for limits' combine takes each step's from its header) */
    int64_t num_pages;
    float scale_log2;               /* softmax_scale * log2(e): scores go through exp2 */
    float *part_scale;              /* [n_slots, BLOCK_M, Dl / SCALE_COLS] 16-bit plans: a power
                                     * of two per row and column block that restores the fp16 part_o
                                     * values; NULL for F32 plans (last, so that adding it left the
                                     * offsets of the fields the kernel's loop reads unchanged) */
    const float *kv_scale_ptr;      /* FP8 KV: [1] device, the run's kv_scale, or NULL: then
                                     * kv_scale (after part_scale for the same reason) */
    float kv_scale;                 /* FP8 KV: the scale as a value (mlav_tensors.kv_scale) */
    int32_t step_spread;            /* plans for limits: SMs / 2 + 1 where the split grid has a
                                     * block per SM and its blocks fill both warp groups, else 0:
                                     * a step of fewer blocks runs them one per TPC
                                     * (flash/features.cuh, step_item_index) */
    const int32_t *page_table_rows; /* [B] device, or NULL: request b's page-table row
                                     * (page_row.cuh) */
    int64_t page_table_num_rows;    /* rows of page_table when page_table_rows is set */
    const int32_t *bad_pages;       /* [max_pages] of -1, plan-owned: the row a device index
                                     * outside the table reads (page_row.cuh) */
    /* Plans for limits (0 for a plan for one problem): the running plan's id, which the step
     * header must carry for any item to run (a workspace another plan, or no update, wrote runs
     * nothing), and the bounds every item is checked against before it reads or writes
     * (mlav_step_item_fits), whatever the workspace holds. After the fields the kernels read
     * before, for their offsets. */
    unsigned long long step_owner;
    mlav_limits step_lim;
    int32_t step_max_slots;
    /* The plan's KV shard (src/common/shard.h; ranks 1: every row): an item's KV rows are the
     * rank's local rows and its prefix the global one; the kernels take the rank's prefix rows
     * as the prefix tiles and judge a draft tile's keys at their global rows. Last, for the
     * offsets of the fields before it. */
    mlav_shard shard;
} mlav_flash_params;

/* Whether a split item of a plan for limits stays within the plan's own limits: its request
 * (b < max_batch), its rows (q_start + q_len <= max_tokens, q_len <= max_q_len, the row tile
 * within q_len x H), its KV rows (within prefix + q_len <= max_kv_len) and its partial state
 * (slot < max_slots). Such an item reads q, the page table, the mask and the cache only within
 * the limits' shapes and writes out, lse or its slot only within theirs. */
static __host__ __device__ __forceinline__ bool mlav_step_item_fits(const mlav_split_item &x,
                                                                    const mlav_flash_params &p)
{
    /* 32-bit unsigned compares (a negative field wraps past every bound): q_len <= max_q_len
     * bounds q_len x H below 2^31 (the limits' rule), and each difference or sum is formed only
     * of terms the compares before it bounded. An empty range (a KV shard's rank holding no row
     * of the request) runs no tile and writes the empty state. With 64-bit
     * products and signed pairs of compares the check made two STEP instances spill on sm_120. */
    const mlav_limits &l = p.step_lim;
    return (uint32_t)x.b < (uint32_t)l.max_batch &&
           (uint32_t)x.q_len - 1u < (uint32_t)l.max_q_len &&
           (uint32_t)x.q_start <= (uint32_t)(l.max_tokens - x.q_len) &&
           (uint32_t)x.mtile <= (uint32_t)(x.q_len * p.H - 1) / MLAV_FLASH_BLOCK_M &&
           (uint32_t)x.prefix <= (uint32_t)(l.max_kv_len - x.q_len) &&
           (uint32_t)x.kv_begin <= (uint32_t)x.kv_end && x.kv_end <= x.prefix + x.q_len &&
           (uint32_t)x.slot + 1u <= (uint32_t)p.step_max_slots;
}

/* The same for a combine item: its rows within max_tokens x H and max_q_len x H, its splits'
 * slots within max_slots, at most MLAV_FLASH_MAX_SPLITS of them. */
static __host__ __device__ __forceinline__ bool mlav_step_combine_fits(const mlav_combine_item &c,
                                                                       const mlav_flash_params &p)
{
    /* unsigned compares as mlav_step_item_fits' (max_tokens x H below 2^31, so q_start x H +
     * rows below 2^32 once both are bounded) */
    const mlav_limits &l = p.step_lim;
    return (uint32_t)c.nsplit - 2u < (uint32_t)MLAV_FLASH_MAX_SPLITS - 1u &&
           (uint32_t)c.rows - 1u < (uint32_t)(l.max_q_len * p.H) &&
           (uint32_t)c.q_start <= (uint32_t)l.max_tokens &&
           (uint32_t)c.q_start * (uint32_t)p.H + (uint32_t)c.rows <=
               (uint32_t)(l.max_tokens * p.H) &&
           (uint32_t)c.mtile <= (uint32_t)(c.rows - 1) / MLAV_FLASH_BLOCK_M &&
           (uint32_t)c.slot0 < (uint32_t)p.step_max_slots &&
           (uint32_t)c.slot_stride - 1u < (uint32_t)p.step_max_slots &&
           (uint64_t)(uint32_t)c.slot0 +
                   (uint64_t)(uint32_t)(c.nsplit - 1) * (uint32_t)c.slot_stride <
               (uint64_t)(uint32_t)p.step_max_slots;
}

/* A plan's launch choices that no kernel reads (backend_flash.cu's flash_config holds them), so
 * that they take no room in the kernels' parameters. */
typedef struct mlav_flash_launch_opts {
    int32_t all_groups;   /* which split-kernel instance runs: 1 = every warp group computes, also
                           * one past its request's rows (mlav_flash_all_groups;
                           * flash/features.cuh) */
    int32_t combine_kind; /* which combine runs (mlav_combine_kind): a warp per row, or a block per
                           * row and column block (combine.cu); a plan for limits launches
                           * combine_step_kernel, which takes each step's kind from its header */
    int32_t combine_smem; /* dynamic shared memory of a block combine launch, reserved and unused:
                           * it spreads the blocks over the SMs (combine.cu) */
    int32_t kv_fp8;       /* 1: the cache is FP8 E4M3 (the split kernel's FP8 instances) */
    int32_t combine_grid; /* a plan for limits: blocks of its one combine launch, the most any
                           * step takes (mlav_combine_step_shape) */
    int32_t sm90_seesaw;  /* the sm_90a family: 1 = its seesaw kernel (sm90/seesaw/;
                           * mlav_flash_sm90_seesaw_rule), 0 = its producer kernel
                           * (sm90/kernel.cuh) */
    int32_t sm90_keys;    /* the sm_90a family over an FP8 cache: 8 or 16 = its keys kernel
                           * (sm90/keys/) for blocks of at most that many rows, 0 = not */
    int32_t sm90_l2_first; /* the seesaw kernel over a 16-bit cache: 1 = its KV copies under
                            * the L2 evict_first policy (mlav_flash_sm90_l2_first) */
    int32_t sm90_early_s;  /* the seesaw kernel over a 16-bit cache: 1 = its WG0 issues each
                            * pair's S_A in the pair before (mlav_flash_sm90_early_s_rule) */
    int32_t sm90_staged;  /* the sm_90a family over an FP8 cache: 1 = the params' cache is its
                           * F16 staging (sm90/staged_kv.cu), read by the seesaw kernel's
                           * staged instance; the combine still applies the FP8 scale */
} mlav_flash_launch_opts;

/* Whether the split kernel should run every warp group, also those whose 32 rows lie past their
 * request's: yes as soon as a request fills more than one group (H x q_len > 32), since a block
 * then takes as long as its full groups anyway and the loop without branches is faster; no when
 * every request fits in one group, where the idle group would only slow the other down. */
static inline int mlav_flash_all_groups(int32_t max_q_len, int32_t H)
{
    return (int64_t)max_q_len * H > MLAV_FLASH_BLOCK_M / 2;
}

/* The split schedule of the flash kernel on a device with `sm_count` SMs and `blocks_per_sm`
 * resident blocks (backend_flash.cu's plan).
 * Whole waves of resident blocks: the splits of a request are equal, so a wave is balanced, and
 * with one 8-warp block per SM a second wave doubles the per-block prologue at short prefixes
 * (docs/PERFORMANCE.md#schedule); more waves only where the fewest leave SMs idle and the
 * splits are long (block_cost_keys). Splits go down to 32 keys (two KV tiles): with one 8-warp
 * block per SM 64 rows x 32 keys take microseconds, so at short prefixes latency, not the
 * combine, decides: fewer, longer splits were never faster (docs/PERFORMANCE.md#schedule). */
static inline mlav_schedule_params mlav_flash_schedule_params(int sm_count, int blocks_per_sm)
{
    mlav_schedule_params sp;
    sp.rows_per_tile = MLAV_FLASH_BLOCK_M;
    sp.key_align = MLAV_FLASH_SPLIT_ALIGN;
    sp.min_chunk = MLAV_FLASH_SPLIT_ALIGN;
    sp.max_splits = MLAV_FLASH_MAX_SPLITS;
    sp.target_blocks = sm_count * blocks_per_sm;
    sp.block_cost_keys = MLAV_FLASH_BLOCK_COST_KEYS;
    sp.split_cost_keys = MLAV_FLASH_SPLIT_COST_KEYS;
    sp.more_waves = MLAV_FLASH_MORE_WAVES;
    sp.shares = 0;
    return sp;
}

/* Dynamic shared memory of the flash kernel (a 16-bit cache, or `kv_fp8`). */
size_t mlav_flash_smem_bytes(int kv_fp8);
/* Check the kernel for `dtype` (q, out) and `kv_dtype` (the cache) fits the sm_120 limit and
 * raise its dynamic smem limit; also returns its resident blocks per SM through *blocks_per_sm. */
mlav_status mlav_flash_prepare(mlav_dtype dtype, mlav_dtype kv_dtype, const mlav_cuda_device *dev,
                               int *blocks_per_sm);
/* Launch the split kernel then (if any) the combine kernel on `stream`. `step`: a plan for
 * limits (its combine's MLAV_COMBINE_STEP_ instance), whose grids run past the step's schedule
 * (items with b < 0; the combine's, past the blocks of the step header's combine shape). */
mlav_status mlav_flash_launch(mlav_dtype dtype, const mlav_flash_params *fp,
                              const mlav_flash_launch_opts *lo, int step, cudaStream_t stream);
/* The F32 variant (verify_flash_f32.cu): CUDA-core FMA on the same schedule and combine, for
 * exactness checks; no tensor cores, no shared memory. */
mlav_status mlav_flash_f32_prepare(int kv_fp8, const mlav_cuda_device *dev, int *blocks_per_sm);
mlav_status mlav_flash_f32_launch(const mlav_flash_params *fp, int kv_fp8, cudaStream_t stream);
/* Column blocks per row for the combine of `rows` rows whose items have at most `max_nsplit`
 * splits, on this device (combine.cu; the rule: mlav_combine_col_blocks_for). */
int mlav_combine_col_blocks(int64_t rows, int max_nsplit, const mlav_cuda_device *dev);
/* The combine of a plan for limits (`step` below; 0: a plan for one problem) in one of two
 * instances (combine.cu, combine_step_kernel): at 8 blocks per SM, whose registers spill, or at
 * 6, whose do not. mlav_combine_step_instance picks the roomy one for limits of at most
 * `max_rows` combined rows (combine items x BLOCK_M) that fit one wave of it. */
enum { MLAV_COMBINE_STEP_DENSE = 1, MLAV_COMBINE_STEP_ROOMY = 2 };
int mlav_combine_step_instance(int64_t max_rows, const mlav_cuda_device *dev);
/* Dynamic shared memory for a block combine launch (`kind`: MLAV_COMBINE_BLOCKS or _WIDE), or
 * with `step` for the combine of a plan for limits, of `blocks` working blocks that caps its
 * resident blocks per SM at an even spread, and the kernel's limit raised to it; 0 when no cap
 * is needed or possible (combine.cu; the rule and why: mlav_combine_spread_bytes). */
mlav_status mlav_combine_spread_smem(int64_t blocks, int kind, int step,
                                     const mlav_cuda_device *dev, int *bytes);
/* A plan for limits' combine launch (instance `step`) with `combine_smem` reserved and at most
 * `max_rows` combined rows (combine items x BLOCK_M): the resident blocks of each combine kind
 * from which a step's column blocks are chosen (mlav_step_bounds.combine_wave: the exact plan's,
 * capped at what the step launch keeps resident) and the launch's 1-D grid, the most blocks any
 * step takes. */
void mlav_combine_step_shape(const mlav_cuda_device *dev, int step, int combine_smem,
                             int64_t max_rows, int32_t wave[3], int32_t *grid);
/* The combine kernel alone (combine.cu). */
mlav_status mlav_combine_launch(mlav_dtype dtype, const mlav_flash_params *fp,
                                const mlav_flash_launch_opts *lo, int step, cudaStream_t stream);

#endif
