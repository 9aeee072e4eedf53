/* The online softmax's lazy reference maximum, one rule for every flash kernel (the legal
 * family's softmax stage, the sm_90a split, seesaw and keys kernels). A row's P is
 * 2^(score - reference); the reference moves only when a tile's maximum passes it by more than
 * RESCALE_SLACK, so most tiles rescale nothing, and any reference gives the same softmax (the
 * lse adds it back: merge.h's mlav_finish_lse). */
#ifndef MLAV_CUDA_REFERENCE_MAX_CUH
#define MLAV_CUDA_REFERENCE_MAX_CUH

#include <math.h>

#include "mma.cuh"

namespace mlav {

/* log2 units a score may pass the reference before it moves: P stays <= 256, far inside BF16
 * and F16, and a row sum (at most 256 a key) inside fp32. With the exact maximum, rising scores
 * (tests/test_sm90_gpu) moved it nearly every tile, and the sm_90a kernel's lse was 2-4x further
 * from the oracle than the legal kernel's. */
constexpr float RESCALE_SLACK = 8.0f;

/* The reference after a tile whose row maximum is `tile_max`, from `m`. */
__device__ __forceinline__ float next_ref(float m, float tile_max)
{
    return tile_max > m + RESCALE_SLACK ? fmaxf(m, tile_max) : m;
}

/* The factor that takes values of reference `from` to reference `to` (0 from no reference). */
__device__ __forceinline__ float ref_factor(float from, float to)
{
    return from == -INFINITY ? 0.0f : exp2_fast(from - to);
}

} // namespace mlav

#endif
