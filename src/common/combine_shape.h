/* The split combine's launch shape as pure functions of the device's numbers: column blocks
 * per row, and the shared-memory reservation that spreads its blocks over the SMs. combine.cu
 * calls them with what it queries from the device; tests/test_combine_shape.c checks them on
 * the CPU with the numbers of an H200 and of sm_120. C, C++ and (the kind and column blocks,
 * which the device scheduler of engine steps applies) CUDA device code. */
#ifndef MLAV_COMMON_COMBINE_SHAPE_H
#define MLAV_COMMON_COMBINE_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "hd.h"

/* The combine kernel's shapes (combine.cu): splits per thread loaded with the lse values, ahead
 * of the weights, and the most column blocks per row. */
#define MLAV_COMBINE_PRELOAD 8
#define MLAV_COMBINE_MAX_COL_BLOCKS 16
/* Most splits per item for the row combine (combine.cu: a warp per row, a lane per split). */
#define MLAV_COMBINE_ROW_MAX_SPLITS 32
/* Threads of a block of the block combine: its weights take one split per thread up to this,
 * two up to twice this (the instance for the longest q_len 1 requests). */
#define MLAV_COMBINE_THREADS 128

/* Which combine kernel merges items of at most `max_nsplit` splits (combine.cu): the row combine
 * where a lane per split suffices; else the block combine, in its instance with one split per
 * thread for the weights where that suffices: one instance for every split count needs more
 * registers and slows the common items (docs/PERFORMANCE.md#combine). */
enum { MLAV_COMBINE_ROWS = 0, MLAV_COMBINE_BLOCKS = 1, MLAV_COMBINE_BLOCKS_WIDE = 2 };
static MLAV_HD int mlav_combine_kind(int max_nsplit)
{
    if (max_nsplit <= MLAV_COMBINE_ROW_MAX_SPLITS)
        return MLAV_COMBINE_ROWS;
    return max_nsplit <= MLAV_COMBINE_THREADS ? MLAV_COMBINE_BLOCKS : MLAV_COMBINE_BLOCKS_WIDE;
}

/* Column blocks per combined row for `rows` rows whose items have at most `max_nsplit` splits,
 * when `wave` blocks are resident at once: 16 (max_col) where that takes every split group to
 * one batch of `preload` loads from four or more and the grid still fits the wave (a lone
 * 64-row request split 113 to 128 ways); else the most of 4, 2 that fit the wave; else 1.
 * 16 column blocks pay only where they save a whole batch of loads; with fewer splits the extra
 * blocks cost more than they spread, and 8 never paid (docs/PERFORMANCE.md#combine). */
static MLAV_HD int mlav_combine_col_blocks_for(int64_t rows, int max_nsplit, int64_t wave,
                                              int preload, int max_col)
{
    if (max_nsplit > (preload - 1) * max_col && rows * max_col <= wave)
        return max_col;
    for (int q = 4; q > 1; q /= 2)
        if (rows * q <= wave)
            return q;
    return 1;
}

/* Rows whose blocks a combine's shared-memory reservation spreads (mlav_combine_spread_bytes of
 * these rows times the column blocks) for `combine_items` row tiles of `rows_per_tile`, `working`
 * of whose rows do work. An exact plan: its working rows (a block of a row past its request
 * returns before it holds an SM for long). A plan for limits (`step` nonzero): every row of its
 * row tiles, because a step's grid maps each one and the step chooses its column blocks within
 * the wave this reservation leaves (mlav_combine_step_shape, mlav_step_combine_shape): reserved
 * for its working rows alone, B 1, H 8, q_len 9 leaves 3 blocks an SM (72 rows x 4 column blocks
 * on 132 SMs), so its 128 rows take 2 column blocks where the exact plan takes 4
 * (docs/PERFORMANCE.md#hopper, "Engine path"). */
static inline int64_t mlav_combine_spread_rows(int64_t combine_items, int rows_per_tile,
                                               int64_t working, int step)
{
    return step ? combine_items * rows_per_tile : working;
}

/* Dynamic shared memory (a multiple of 128 bytes) that caps a grid of `blocks` blocks at
 * k = ceil(blocks / sm_count) resident per SM, or less where one block may not reserve enough
 * (its static + dynamic bytes stay within smem_limit: on an H200, sm_120's limit allows no
 * fewer than 2 per SM). 0 when no cap is needed (k >= per_sm, the uncapped blocks per SM) or
 * possible. per_sm: occupancy without a reservation; smem_per_sm and reserved:
 * cudaDevAttrMaxSharedMemoryPerMultiprocessor and cudaDevAttrReservedSharedMemoryPerBlock;
 * static_bytes: the kernel's static shared memory. Why (docs/PERFORMANCE.md#combine):
 * under PDL the combine grid launches while the split grid holds most SMs, and uncapped its blocks
 * crowd onto the SMs that are free first. */
static inline size_t mlav_combine_spread_bytes(int64_t blocks, int sm_count, int per_sm,
                                               size_t smem_per_sm, size_t reserved,
                                               size_t static_bytes, size_t smem_limit)
{
    if (blocks < 1 || sm_count < 1 || per_sm < 1)
        return 0;
    const int64_t k = (blocks + sm_count - 1) / sm_count;
    if (k >= per_sm)
        return 0;
    size_t per_block = smem_per_sm / (size_t)k; /* a footprint that lets k blocks fit */
    if (per_block > smem_limit + reserved)
        per_block = smem_limit + reserved;
    const size_t fixed = static_bytes + reserved;
    if (per_block <= fixed)
        return 0;
    return (per_block - fixed) & ~(size_t)127;
}

#endif
