/* Shared memory of the Hopper kernel: Q, two KV stages and P in the 128-byte-swizzled K-major
 * layout wgmma reads, plus the row exchanges and the mbarriers.
 *
 * An operand of R rows (Q: 64 (token, head) rows; a KV tile: 64 keys; P: 64 rows) and C 16-bit
 * columns is stored as C / 64 column blocks, one after the other, each R rows x 128 bytes; within
 * a block, 16-byte chunk c of row r sits at r * 128 + ((c ^ (r % 8)) * 16) (the 128B swizzle:
 * 8 rows x 128 bytes form one 1024-byte atom). So S = Q K^T reads Q and K K-major (k16 step s of
 * column block b starts at b * R * 128 + 32 s), and O += P V reads the KV tile MN-major as V: 64
 * features per column block (LBO = a block, 64 x 128 bytes), 8 keys per atom (SBO = 1024), the
 * k16 step s of keys at 2048 s. An FP8 cache's tiles are staged raw in their own stage and
 * converted there to F16 (gather.cuh), so they take no more room than a 16-bit cache's: the
 * layout is the same for both, 231,472 bytes of the 232,448 the sm_90 opt-in allows. */
#ifndef MLAV_CUDA_SM90_SMEM_LAYOUT_CUH
#define MLAV_CUDA_SM90_SMEM_LAYOUT_CUH

#include <stddef.h>
#include <stdint.h>

#include "../flash.h"

namespace mlav90 {

constexpr int W = MLAV_FLASH_W, DL = MLAV_FLASH_DL, BM = MLAV_FLASH_BLOCK_M;
constexpr int TILE_N = 64;                 /* keys per KV tile (MLAV_FLASH_SM90_TILE_N) */
constexpr int STAGES = 2;                  /* KV tiles in the ring */
constexpr int COL_BLOCK = 64;              /* 16-bit elements per swizzled column block */
constexpr int W_BLOCKS = W / COL_BLOCK;    /* 9 */
constexpr int ROW_CHUNKS = W / 8;          /* 16-byte chunks per row: 72 */
constexpr uint32_t BLOCK_BYTES = 64 * 128; /* one column block of 64 rows */
constexpr uint32_t OPERAND_BYTES = W_BLOCKS * BLOCK_BYTES; /* 64 rows x 576: 73,728 */
static_assert(BM == 64 && TILE_N == 64 && W % COL_BLOCK == 0, "64-row operands");

/* Byte offset of 16-byte chunk `c` (0..71) of row `r` in a 64-row operand. */
__host__ __device__ constexpr uint32_t sw128_chunk(int r, int c)
{
    return (uint32_t)(c >> 3) * BLOCK_BYTES + (uint32_t)r * 128u +
           ((uint32_t)((c & 7) ^ (r & 7)) << 4);
}

/* Byte offset of 16-bit element (r, col) in a 64-row operand. */
__host__ __device__ constexpr uint32_t sw128_elem(int r, int col)
{
    return sw128_chunk(r, col >> 3) + (uint32_t)(col & 7) * 2u;
}

/* Regions, byte offsets from the 1024-byte-aligned base. */
struct smem90 {
    static constexpr uint32_t Q = 0;
    static constexpr uint32_t KV = Q + OPERAND_BYTES;          /* stage s at KV + s x OPERAND */
    static constexpr uint32_t P = KV + STAGES * OPERAND_BYTES;  /* 64 rows x 64 keys: one block */
    static constexpr uint32_t MAX = P + BLOCK_BYTES;            /* [2 warpgroups][64 rows] fp32 */
    static constexpr uint32_t SUM = MAX + 2 * BM * 4;           /* [2][64] fp32 */
    static constexpr uint32_t BAR = SUM + 2 * BM * 4;           /* full[STAGES], empty[STAGES], q */
    /* BF16 q over an FP8 cache: the power of two the producer took out of Q (a float) */
    static constexpr uint32_t Q_UNSHIFT = BAR + (2 * STAGES + 1) * 8;
    static constexpr uint32_t END = Q_UNSHIFT + 8;
    /* the launch's dynamic size: the regions and room to align the base to 1024 bytes */
    static constexpr uint32_t BYTES = ((END + 15) / 16) * 16 + 1024;
};
static_assert(smem90::P % 1024 == 0 && smem90::KV % 1024 == 0, "swizzle atoms 1024-aligned");
static_assert(smem90::BYTES <= 232448, "the sm_90 opt-in limit per block (227 KB)");
static_assert(smem90::BYTES == 231472, "the size docs/PERFORMANCE.md and the comment above give");

} // namespace mlav90

#endif
