/* The seesaw kernel's shape: its threads and warpgroups, named barriers and hand-overs, P's
 * slot and the shared-memory regions. The design is seesaw/kernel.cuh's comment. */
#ifndef MLAV_CUDA_SM90_SEESAW_TRAITS_CUH
#define MLAV_CUDA_SM90_SEESAW_TRAITS_CUH

#include "../mask.cuh"
#include "../write_output.cuh"
#include "../score.cuh"

namespace mlav90 {
namespace seesaw {

constexpr int THREADS = 256;
constexpr int WG_THREADS = 128;
constexpr int X_REGS = TILE_N / 2; /* 32 fp32 accumulators of S a thread (m64n64) */
/* named barriers: each warpgroup's own (BAR_WG0 + w, 128 threads), the epilogue's staging */
constexpr int BAR_WG0 = 1, BAR_STAGE0 = 4;
/* the hand-overs between the warpgroups, mbarriers hand[HAND_REF ..]: a pair's four, then an
 * item's two (HAND_END: both warpgroups') */
enum handover { HAND_REF, HAND_M, HAND_PB, HAND_PA, HAND_Q, HAND_END, HANDOVERS };
/* P's slot in a stage: the last column block (K's rope, features 512..575) */
constexpr uint32_t P_SLOT = (uint32_t)(W_BLOCKS - 1) * BLOCK_BYTES;
static_assert(THREADS == MATH_THREADS, "write_output takes two math warpgroups");
static_assert(DL == (W_BLOCKS - 1) * COL_BLOCK, "V is the first 8 column blocks, P's slot the 9th");

/* Regions, byte offsets from the 1024-byte-aligned base: Q and the two stages as the producer
 * kernel's (smem_layout.cuh's smem90). */
struct smem_ss {
    static constexpr uint32_t Q = 0;
    static constexpr uint32_t KV = Q + OPERAND_BYTES;
    static constexpr uint32_t REF = KV + STAGES * OPERAND_BYTES; /* [64] fp32: ref0 */
    static constexpr uint32_t MAXM = REF + BM * 4;               /* [64] fp32: M */
    static constexpr uint32_t SUM = MAXM + BM * 4;               /* [2][64] fp32 */
    static constexpr uint32_t BAR = SUM + 2 * BM * 4;            /* full[STAGES][W_BLOCKS] */
    static constexpr uint32_t HAND = BAR + STAGES * W_BLOCKS * 8; /* hand[HANDOVERS] */
    /* BF16 q over an FP8 cache: Q's maximum (q_tile_to_f16's 8 words), its power of two */
    static constexpr uint32_t QRED = HAND + HANDOVERS * 8;
    static constexpr uint32_t Q_UNSHIFT = QRED + 8 * 4;
    static constexpr uint32_t END = Q_UNSHIFT + 8;
    static constexpr uint32_t BYTES = ((END + 15) / 16) * 16 + 1024;
};
static_assert(smem_ss::KV % 1024 == 0 && STAGE_WG_BYTES * 2 <= OPERAND_BYTES,
              "swizzle atoms 1024-aligned; the epilogue's staging in Q's region");
static_assert(smem_ss::BYTES <= 232448, "the sm_90 opt-in limit per block");

} // namespace seesaw
} // namespace mlav90

#endif
