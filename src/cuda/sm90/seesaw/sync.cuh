/* The seesaw kernel's synchronization between and within its warpgroups: a warpgroup's own
 * barrier and the hand-overs' mbarriers. */
#ifndef MLAV_CUDA_SM90_SEESAW_SYNC_CUH
#define MLAV_CUDA_SM90_SEESAW_SYNC_CUH

#include "traits.cuh"

namespace mlav90 {
namespace seesaw {

/* This warpgroup's own 128-thread barrier (compile-time ids: a computed one makes ptxas reserve
 * all 16). */
__device__ __forceinline__ void wg_barrier(int w)
{
    if (w == 0)
        named_barrier(BAR_WG0, WG_THREADS);
    else
        named_barrier(BAR_WG0 + 1, WG_THREADS);
}

/* Hand-over H from this warpgroup to the other: its shared-memory writes before, released. */
template <handover H> __device__ __forceinline__ void handover_arrive(uint64_t *hand)
{
    mbar_arrive(&hand[H]);
}

/* The other side of hand-over H, in the pair of tiles that starts at tile t (even): the other
 * warpgroup's writes before its arrival, acquired. The wait's loop inside its asm (no branch
 * for the compiler while a P V product is in flight). */
template <handover H> __device__ __forceinline__ void handover_wait(uint64_t *hand, int t)
{
    mbar_wait_flat(&hand[H], (uint32_t)((t / 2) & 1));
}

} // namespace seesaw
} // namespace mlav90

#endif
