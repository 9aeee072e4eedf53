/* The flash split kernel's compile-time shape: one traits type per instance family (q/out type,
 * KV element type, head dims), from which every stage (the .cuh files of src/cuda/flash) takes
 * its tile sizes, warp layout and shared-memory layout. A family is one instantiation file
 * (flash/instantiations/) and one row of the launch table (flash/launch.cu).
 *
 * Block layout (8 warps): two groups of 4 warps, each owning 32 rows. Warp w is quarter
 * dq = w % 4 of group w / 4. A group syncs its warps on its own named barrier; the two groups
 * meet only through per-tile "full" barriers (kernel.cuh), and run staggered, so one group's
 * exchange and softmax overlap the other's MMAs.
 *   Q          : warp dq keeps the A fragments of its group's 32 rows x latent columns
 *                [COLS_Q dq, +COLS_Q) in registers for the whole split (loaded through shared
 *                memory in the prologue); the rope part of Q (64 rows x DR) sits in shared
 *                memory, DR / 4 columns per warp. So the S loop reads K from shared memory, and
 *                each K fragment feeds two m16 tiles.
 *   S = Q K^T  : each warp sums its quarter of the depth for 32 rows x 16 keys, then the group
 *                reduce-scatters the partial sums through shared memory: warp dq finishes S block
 *                (rows 16 (dq / 2), keys 8 (dq % 2)) and turns it into P.
 *   O += P V   : P goes through shared memory (the group's 32 x 16 tile); warp dq owns output
 *                columns [COLS_Q dq, +COLS_Q) of all 32 rows (128 fp32 registers at Dl = 512),
 *                so each V fragment also feeds two m16 tiles.
 * Against 16 rows per warp, P in registers and 32-key tiles this halves the K and V bytes read
 * from shared memory per MMA; it was no faster at long prefixes, only at short ones: the time goes
 * to latency chains, not bandwidth (docs/PERFORMANCE.md#kernel). Each warp orders its m-tiles (and
 * its S n-tiles) so that the block it finishes comes first: register indices stay compile-time,
 * with no selects. O (128) and Q (64) leave ~60 of 255 registers for fragments in flight.
 * Registers bound residency at one block (8 warps) per SM. */
#ifndef MLAV_CUDA_FLASH_TRAITS_CUH
#define MLAV_CUDA_FLASH_TRAITS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "../flash.h" /* with the device facts' header: MLAV_SM120_SMEM_LIMIT */
#include "../mma.cuh"

namespace mlav {
namespace flash {

/* The head dims of one row of q and of the cache: Dl latent columns (the output's, and V's) and
 * Dr rope columns. */
template <int DL_, int DR_> struct head_dims {
    static constexpr int DL = DL_, DR = DR_;
};
/* The DeepSeek-V3 / Kimi K2 latent layout. */
using mla_512_64 = head_dims<512, 64>;

/* An FP8 E4M3 cache's element type (cuda_fp8.h): its tiles stay e4m3 bytes in shared memory and
 * are converted in registers (pv_tile.cuh, s_tile.cuh; mlav::kv_bytes<e4m3>, convert.cuh). */
using e4m3 = __nv_fp8_e4m3;

/* T: q and out (BF16 or F16). Kv: the cache's element, T or e4m3. Dims: head_dims. */
template <typename T, typename Kv, typename Dims = mla_512_64> struct traits {
    using q_type = T;
    using out_type = T;
    using kv_type = Kv;
    /* A one-byte (FP8) cache (docs/DESIGN.md#fp8-kv): raw tiles, converted in registers by the
     * element type's mlav::kv_bytes (convert.cuh), and every MMA in F16 (for BF16 q too:
     * q_to_f16, prologue.cuh) */
    static constexpr bool FP8 = sizeof(Kv) == 1;
    static_assert(FP8 || std::is_same<Kv, T>::value, "a 16-bit cache holds q's type");
    using mma_t = std::conditional_t<FP8, __half, T>; /* the MMA operands' type (Q, K, P, V) */
    using kv_elem = std::conditional_t<FP8, uint8_t, T>; /* a KV tile's unit in shared memory */
    /* BF16 q over an FP8 cache: Q is converted to F16 once per block (prologue.cuh) */
    static constexpr bool Q_TO_F16 = FP8 && !std::is_same<T, __half>::value;

    static constexpr int DL = Dims::DL, DR = Dims::DR, W = DL + DR;
    static constexpr int BM = 64;              /* folded (token, head) rows per block */
    static constexpr int BN = 16;              /* KV rows per pipeline tile */
    static constexpr int NT = 256;             /* threads: GROUPS x QUARTERS warps */
    static constexpr int STAGES = 4;           /* KV tile buffers */
    static constexpr int AHEAD = 2;            /* tiles gathered ahead of the one in use */
    static constexpr int GROUPS = 2;           /* independent warp groups per block */
    static constexpr int QUARTERS = 4;         /* warps per group */
    static constexpr int GROUP_ROWS = BM / GROUPS; /* 32 */
    static constexpr int GROUP_THREADS = 32 * QUARTERS;
    static constexpr int COLS_Q = DL / QUARTERS; /* each warp's latent columns (S depth, O cols) */
    static constexpr int KSTEPS = COLS_Q / 16;   /* k16 steps of S from Q in registers */
    static constexpr int ROPE_Q = DR / QUARTERS; /* each warp's rope columns, one k16 step */
    static constexpr int MT = GROUP_ROWS / 16;   /* m16 tiles per group: 2 */
    static constexpr int NTS = BN / 8;           /* n8 tiles of S per tile: 2 */
    /* A gather overwrites the buffer of tile t + AHEAD - STAGES, which both groups must be past
     * (kernel.cuh's "tile full" barriers). */
    static_assert(STAGES >= AHEAD + 2, "pipeline");
    static_assert(NT == GROUPS * GROUP_THREADS && MT * NTS == QUARTERS,
                  "each warp finishes exactly one S block of its group");
    static_assert(COLS_Q % 16 == 0 && ROPE_Q == 16 && BN == 16, "MMA tiling");

    /* 16-bit tiles: rows padded to W + 8 elements (73 16-byte chunks at W = 576), so that the 8
     * row addresses of every ldmatrix fall in distinct bank groups */
    static constexpr int RS = W + 8;
    static constexpr int SKV_ELEMS = BN * RS;
    static constexpr int QPS = DR + 8;       /* rope Q row stride: 144 bytes, conflict-free */
    static constexpr int PS = BN + 8;        /* P row stride: 48 bytes, conflict-free ldmatrix */
    static constexpr int QSS = DL + 8;       /* latent Q staging stride (the prologue) */
    /* FP8 tiles, in bytes: rows W + 16 apart (37 16-byte chunks, odd, at W = 576), so that the 8
     * row addresses of every ldmatrix fall in distinct bank groups */
    static constexpr int RAW_RS = W + 16;
    static constexpr int RAW_TILE_BYTES = BN * RAW_RS;
    static constexpr int QSS8 = DL + 16; /* FP8: latent Q staging stride, 264 words (8 mod 32):
                                          * the 8-byte fragment loads of a half warp hit 32 banks */
    static constexpr int QPS8 = DR + 16; /* FP8: rope Q stride, 40 words, likewise */
    /* this family's: a KV tile's row stride and size in kv_elem units */
    static constexpr int KV_RS = FP8 ? RAW_RS : RS;
    static constexpr int KV_TILE_ELEMS = FP8 ? RAW_TILE_BYTES : SKV_ELEMS;

    /* [grp][dest][slot][lane] */
    static constexpr int SX_FLOATS = GROUPS * QUARTERS * (QUARTERS - 1) * 32 * 4;
    static constexpr int SP_ELEMS = GROUPS * GROUP_ROWS * PS;
    static constexpr int SQ_ELEMS = BM * QPS;
    static constexpr int SROW_FLOATS = GROUPS * QUARTERS * 16; /* [grp][warp][16 rows] */
    static_assert((STAGES * SKV_ELEMS * 2) % 16 == 0 && (SP_ELEMS * 2) % 16 == 0 &&
                      (SQ_ELEMS * 2) % 16 == 0,
                  "alignment");
    /* Output staging (the epilogue), per warp in a free KV buffer: 8 rows of COLS_Q 16-bit values
     * (T for the final output, fp16 for partial states), rows padded so that the fragment writes
     * hit 32 distinct banks per warp; FP8: each lane writes 4 consecutive dims as one 8-byte
     * store, rows STAGE8_STRIDE apart */
    static constexpr int STAGE_T_STRIDE = COLS_Q + 8; /* 16-bit elements */
    static constexpr int STAGE8_STRIDE = COLS_Q + 16;
    static constexpr int STAGE_STRIDE = FP8 ? STAGE8_STRIDE : STAGE_T_STRIDE;
    static constexpr int STAGE_WARP_BYTES = 8 * STAGE_T_STRIDE * 2;
    static_assert(COLS_Q == MLAV_FLASH_SCALE_COLS, "part_scale holds one scale per warp's columns");
    static_assert(QUARTERS * STAGE_WARP_BYTES <= SKV_ELEMS * 2 && STAGE_WARP_BYTES % 16 == 0 &&
                      (SKV_ELEMS * 2) % 16 == 0,
                  "one KV buffer stages a group's output");
    static_assert(QUARTERS * 8 * STAGE8_STRIDE * 2 <= RAW_TILE_BYTES && RAW_TILE_BYTES % 16 == 0,
                  "one raw KV buffer stages a group's output");
    static constexpr int QPE_CHUNKS = BM * DR / 8; /* 16-byte chunks of rope Q per block: 512 */
    static_assert(QPE_CHUNKS % NT == 0, "rope Q load mapping");
    static constexpr int QL_CHUNKS = BM * DL / 8; /* of latent Q: 4096 */
    static_assert(QL_CHUNKS % NT == 0 &&
                      BM * QSS * 2 <= (STAGES - 1) * SKV_ELEMS * 2 + SX_FLOATS * 4,
                  "latent Q staging fits in KV buffers 1-3 and the exchange area");
    /* The gather gives each KV row of a tile to NT / BN threads: a thread looks up one page id
     * per tile and issues its 16-byte chunks part, part + 16, ... (5 or 4 of the 72 at W = 576)
     * at fixed offsets, so 16 neighbours cover 256 contiguous bytes per step. */
    static constexpr int GATHER_TPR = NT / BN;
    static_assert(NT % BN == 0, "gather mapping");

    /* The dynamic shared memory, region by region: byte offsets from the base, in this order
     * (each region's size is a multiple of 16 bytes, so every one stays 16-byte aligned for
     * cp.async, ldmatrix and the float4 exchange). */
    struct smem {
        /* one KV tile buffer: BN rows of RS 16-bit elements, or of RAW_RS e4m3 bytes */
        static constexpr size_t KV_TILE = FP8 ? (size_t)RAW_TILE_BYTES : (size_t)SKV_ELEMS * 2;
        /* the KV ring: STAGES tiles, gathered AHEAD tiles ahead by cp.async; also the prologue's
         * latent Q staging (below) and the epilogue's output staging (a free buffer) */
        static constexpr size_t KV = 0, KV_BYTES = STAGES * KV_TILE;
        /* the S reduce-scatter: fp32 partial scores [grp][dest warp][slot][lane] of float4 */
        static constexpr size_t X = KV + KV_BYTES, X_BYTES = (size_t)SX_FLOATS * 4;
        /* P, the A operand of P V: [grp][GROUP_ROWS][PS] 16-bit weights */
        static constexpr size_t P = X + X_BYTES, P_BYTES = (size_t)SP_ELEMS * 2;
        /* latent Q staging in the prologue: [BM][QS_STRIDE], over KV buffers 1.. and the exchange
         * area (FP8: and the P tiles and beyond, its raw buffers being half the size), which
         * follow each other and are unused until tile 1's gather and the first exchange */
        static constexpr int QS_STRIDE = FP8 ? QSS8 : QSS;
        static constexpr size_t Q_STAGE = KV + KV_TILE,
                                Q_STAGE_END = Q_STAGE + (size_t)BM * QS_STRIDE * 2;
        /* the rope part of Q, the rope k-step's A operand in every tile: [BM][QP_STRIDE] */
        static constexpr int QP_STRIDE = FP8 ? QPS8 : QPS;
        static constexpr size_t Q = FP8 ? Q_STAGE_END : P + P_BYTES,
                                Q_BYTES = (size_t)BM * QP_STRIDE * 2;
        /* row maxima of a vote's exchange: [grp][warp][16 rows] */
        static constexpr size_t MAX = Q + Q_BYTES, MAX_BYTES = (size_t)SROW_FLOATS * 4;
        /* row sums of the two key halves, met in the epilogue: [grp][warp][16 rows] */
        static constexpr size_t L = MAX + MAX_BYTES, L_BYTES = (size_t)SROW_FLOATS * 4;
        static constexpr size_t TOTAL = L + L_BYTES;
        static_assert(FP8 ? Q_STAGE_END >= P + P_BYTES : Q_STAGE_END <= P,
                      "latent Q staging ends before the P tiles (FP8: before rope Q)");
        static_assert(TOTAL <= MLAV_SM120_SMEM_LIMIT, "flash kernel must fit sm_120");
        static_assert(X % 16 == 0 && Q % 16 == 0, "alignment");
    };
};

/* Named barrier ids (0 is __syncthreads; the hardware has 16): one per group for its 4 warps
 * (the exchange, the vote, the epilogue's row sums), one "tile full" per group and KV buffer (the
 * other group's 128 threads arrive when their copies of the tile have landed; kernel.cuh), one
 * for the staggered start (group 1 waits for group 0's first S). */
template <typename Tr> struct barriers {
    static constexpr int GROUP0 = 1;                             /* group g: group(g) */
    static constexpr int FULL0 = GROUP0 + Tr::GROUPS;            /* group g, buffer b: full(g, b) */
    static constexpr int START = FULL0 + Tr::GROUPS * Tr::STAGES; /* the staggered start */
    static_assert(START <= 15, "named barrier ids 1..15");
    static constexpr int group(int grp) { return GROUP0 + grp; }
    static constexpr int full(int grp, int buf) { return FULL0 + grp * Tr::STAGES + buf; }
};

/* The instance families of the launch table (flash/launch.cu). */
template <typename T> using family_16 = traits<T, T>;
template <typename T> using family_e4m3 = traits<T, e4m3>;

} // namespace flash
} // namespace mlav

#endif
