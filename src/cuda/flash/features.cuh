/* The flash split kernel's feature flags: each one an instance of every family (the launch
 * table's index, flash/launch.cu), because each changes how ptxas allocates the main loop, and
 * the runs without the feature keep the code they were measured with.
 *
 * ALL_GROUPS: a group whose 32 rows lie past the request's (H x q_len not a multiple of 64)
 * still runs the loop's MMAs, on the zero Q rows the prologue loaded, and writes nothing. With
 * `active` a compile-time true the loop has no branches around S, the exchange, the softmax and
 * P V, and ptxas schedules it as one piece, faster from prefix 4096 on
 * (docs/PERFORMANCE.md#decisions). A block's time is that of its full groups anyway, as long as
 * some block has two (the plan's all_groups); the skipping instance is for plans where none does
 * (every request's H x q_len <= 32), where an idle group would take tensor time from the only
 * working one.
 * STEP: the instance of plans for limits, whose fixed grid runs past the step's schedule; a
 * block past it exits on the step header's count, a read that every block of an SM shares
 * (through L1), rather than on its own item, which would be a miss each (step_item_index). A
 * separate instance because the check alone makes ptxas allocate the main loop differently (4
 * of ~3,300 instructions more, the longest identical run 592 instead of the whole loop,
 * bench/diag/sass_identity.py on sm_90), so plans for one problem keep the code they were
 * measured with.
 * ROWS: the instance of a page table shared by every request (mlav_tensors.page_table_rows):
 * the row index's load before the first page lookup made ptxas allocate the whole kernel anew,
 * and the BF16 instances slower, with or without a row index given
 * (docs/PERFORMANCE.md#page-rows), so the runs without one keep their code. */
#ifndef MLAV_CUDA_FLASH_FEATURES_CUH
#define MLAV_CUDA_FLASH_FEATURES_CUH

#include <stdint.h>

#include "../flash.h"

namespace mlav {
namespace flash {

template <bool ALL_GROUPS_, bool STEP_, bool ROWS_> struct features {
    static constexpr bool ALL_GROUPS = ALL_GROUPS_, STEP = STEP_, ROWS = ROWS_;
    /* the launch table's index of the instance (feature_index) */
    static constexpr int index = (ALL_GROUPS ? 1 : 0) | (STEP ? 2 : 0) | (ROWS ? 4 : 0);
};
constexpr int FEATURE_COUNT = 8;
/* The launch table's index of the instance for a plan's choices. */
static inline int feature_index(bool all_groups, bool step, bool rows)
{
    return (all_groups ? 1 : 0) | (step ? 2 : 0) | (rows ? 4 : 0);
}

/* The item a block of a plan for limits' fixed grid runs, or -1 past the step's schedule (the
 * step header sits just before the items, schedule_step.h; the rule is
 * mlav_step_item_of_block). A step of at most half as many blocks as SMs runs them one per TPC,
 * on the grid's even blocks (p.step_spread). The work distributor gives a grid's first round of
 * blocks one per SM, consecutive blocks to the two SMs of a TPC, so the leading blocks of a grid
 * larger than the step pair up on half the TPCs, where a grid of the step's own size spreads
 * one per TPC, and a small step ran slower than the exact plan (docs/PERFORMANCE.md#engine-steps).
 * Branch-free with the one parameter: with a select between the two index forms, or a second
 * parameter, ptxas laid out the whole STEP instance anew (bench/diag/sass_identity.py), and that
 * instance ran slower (docs/PERFORMANCE.md#engine-steps). */
__device__ __forceinline__ int32_t step_item_index(const mlav_flash_params &p)
{
    /* a header another plan (or no update) wrote counts no item: its step is laid out for other
     * limits (the owner shares the header's 64 bytes, and so a line, with the count) */
    const mlav_step_header *h = reinterpret_cast<const mlav_step_header *>(p.items) - 1;
    const bool mine = __ldg(reinterpret_cast<const unsigned long long *>(&h->owner)) ==
                      p.step_owner;
    const int32_t ix = mlav_step_item_of_block(blockIdx.x, mine ? __ldg(&h->n_items) : 0,
                                               (uint32_t)p.step_spread);
    /* an item past the plan's limits (a workspace written over) runs nothing either: checked
     * here, before the block's state exists, and not after the item's load in the kernel, where
     * ptxas allocated the whole STEP instance anew and it ran 1.10-1.14 of 3445dec's time at
     * long prefixes (docs/PERFORMANCE.md#engine-steps) */
    return ix >= 0 && mlav_step_item_fits(p.items[ix], p) ? ix : -1;
}

} // namespace flash
} // namespace mlav

#endif
