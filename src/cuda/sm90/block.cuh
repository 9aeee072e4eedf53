/* What every sm_90a kernel (producer, seesaw, keys) reads of its block: the math warpgroups'
 * threads, the cache's element types, the block's item (block_ctx) and the aligned shared-memory
 * base. */
#ifndef MLAV_CUDA_SM90_BLOCK_CUH
#define MLAV_CUDA_SM90_BLOCK_CUH

#include <math.h>

#include <type_traits>

#include "../../common/merge.h"
#include "../../common/visibility.h"
#include "../flash/features.cuh"
#include "../kv_scale.cuh"
#include "../mma.cuh"
#include "../page_row.cuh"
#include "../reference_max.cuh"
#include "gather.cuh"
#include "stages.cuh"

namespace mlav90 {

constexpr int MATH_THREADS = MATH_WGS * 128;

/* An FP8 E4M3 cache staged as F16 by a pass before the seesaw kernel (staged_kv.cu): the
 * kernel's Kv for it. Its tiles move as a 16-bit cache's (TMA where they allow), its scale and
 * BF16 q's conversion are the FP8 cache's. */
struct e4m3_staged {
    uint16_t bits; /* an F16 value, e4m3's exactly */
};

/* Whether Kv, the cache's element type, is FP8 (one byte): its tiles land raw and are made F16
 * in shared memory. */
template <typename Kv> constexpr bool fp8_kv = sizeof(Kv) == 1;
/* Whether Kv carries an FP8 cache's scale (raw, or staged as F16); the products' operand type
 * then F16. */
template <typename Kv>
constexpr bool scaled_kv = fp8_kv<Kv> || std::is_same<Kv, e4m3_staged>::value;
template <typename T, typename Kv> using mma_t = std::conditional_t<scaled_kv<Kv>, __half, T>;

struct block_ctx {
    int b, q_start, prefix, M, m0, kv_begin, kv_end, n_tiles, slot;
};

/* A block's item as both Hopper kernels read it: its rows (M = q_len x H folded rows, from m0),
 * its KV range and tiles, its partial-state slot (-1: unsplit). */
__device__ __forceinline__ block_ctx block_ctx_of(const mlav_split_item &item,
                                                  const mlav_flash_params &p)
{
    block_ctx c;
    c.b = item.b;
    c.q_start = item.q_start;
    c.prefix = item.prefix;
    c.M = item.q_len * p.H;
    c.m0 = item.mtile * BM;
    c.kv_begin = item.kv_begin;
    c.kv_end = item.kv_end;
    c.n_tiles = (item.kv_end - item.kv_begin + TILE_N - 1) / TILE_N;
    c.slot = item.slot;
    return c;
}

__device__ __forceinline__ unsigned char *smem_base()
{
    extern __shared__ unsigned char smem_raw[];
    return reinterpret_cast<unsigned char *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~(uintptr_t)1023);
}

} // namespace mlav90

#endif
