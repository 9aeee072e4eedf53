/* The keys kernel's shape: its threads, tiles and ring, its shared memory, the dims of
 * its O^T m-tiles (keys_dim) and a thread's place in the block (lane_ctx). The design is
 * keys/kernel.cuh's comment. */
#ifndef MLAV_CUDA_SM90_KEYS_TRAITS_CUH
#define MLAV_CUDA_SM90_KEYS_TRAITS_CUH

#include "../block.cuh"
#include "../write_output.cuh"

namespace mlav90 {
namespace keys {

constexpr int THREADS = 256, WARPS = 8, SLICES = 4;
constexpr int KT = TILE_N;                   /* keys a tile: 64, four 16-key slices */
constexpr int KSTAGES = 4, AHEAD = 3;        /* raw tiles in the ring; gathered ahead */
constexpr uint32_t TILE_BYTES = KT * W;      /* 36,864 */
constexpr int GROUPS = DL / 2 / 64;          /* a warp's latent groups of 64 features: 4 */
constexpr int QS = W + 4;                    /* Q's row stride in halves: 1,160 bytes, 8 mod 128 */
constexpr int OSTR = DL + 4;                 /* the epilogue's O rows, floats */
static_assert(KSTAGES >= AHEAD + 1, "tile t's gather writes the stage of tile t - 1 at the latest");

template <int NR> struct smem_k {
    static_assert(NR == 8 || NR == 16, "8 or 16 rows");
    static constexpr uint32_t KV = 0;                                /* [KSTAGES][64][576] e4m3 */
    static constexpr uint32_t Q = KV + KSTAGES * TILE_BYTES;         /* [NR][QS] F16 */
    /* [NR / 8][8][32] float4: n8 tile n of warp w's lane at [n][w][lane], 16 bytes a lane apart
     * (as [w][lane][n] they were 32 at 16 rows, two lanes a bank group: 2 wavefronts a phase) */
    static constexpr uint32_t X = Q + ((NR * QS * 2 + 15) / 16) * 16;
    static constexpr uint32_t ML = X + WARPS * 32 * (NR / 2) * 4;    /* [2][SLICES][NR] fp32 */
    static constexpr uint32_t RED = ML + 2 * SLICES * NR * 4;        /* [16] u32: Q's maximum */
    /* [KSTAGES][KT] int32: the page id of row r of tile t in slot t % KSTAGES, r */
    static constexpr uint32_t PAGE = RED + 16 * 4;
    /* [KSTAGES] u64: stage s's barrier, its phase complete when tile t's bytes (t % KSTAGES = s)
     * have landed */
    static constexpr uint32_t FULL = PAGE + KSTAGES * KT * 4;
    static constexpr uint32_t BYTES = FULL + KSTAGES * 8;
    static_assert(FULL % 8 == 0, "mbarriers are 8-byte aligned");
    static_assert(SLICES * NR * OSTR * 4 <= Q, "the epilogue's O in the ring");
    static_assert(BYTES <= 232448, "the sm_90 opt-in limit per block");
};

/* The physical dim of row k (0..15) of the O^T m-tile of latent group u, step s, half h. */
__host__ __device__ constexpr int keys_dim(int h, int u, int s, int k)
{
    return 256 * h + 64 * u + 16 * ((k & 7) >> 1) + 4 * s + ((k & 1) | ((k >> 3) << 1));
}

/* The first of the 8 rope features lane column pair t4 of feature half hf scores (Q's and K's
 * alike; any split of the 64 serves, the halves' sums meet in s_tile's exchange): t4's 32 bytes
 * apart, hf's 16, so that with Q's rows 8 mod 128 bytes apart the 16 lanes of an 8-byte load's
 * phase (g 0-3) meet each bank once; t4 16 bytes apart met each twice. */
__host__ __device__ constexpr int rope_feature(int t4, int hf)
{
    return DL + 16 * t4 + 8 * hf;
}

/* A thread's place in the block: its warp's key slice and feature half, its fragment row g and
 * column pair t4, and the shared addresses it reads a tile through. */
struct lane_ctx {
    int tid, warp, lane, sl, hf, g, t4;
    /* Q's row g at this lane's first latent (rope) feature: latent 256 hf + 16 t4 (+ 64 u),
     * rope rope_feature (s_tile reads K's bytes alike) */
    uint32_t q_lat, q_rope;
    float4 *x_mine;         /* this lane's slot of the slices' exchange, its n8 tile 0's */
    int x_other;            /* the slice's other warp (warp ^ 4), in float4s from x_mine */
};

template <int NR>
__device__ __forceinline__ lane_ctx lane_ctx_of(unsigned char *smem, uint32_t base)
{
    lane_ctx l;
    l.tid = threadIdx.x;
    l.lane = l.tid & 31;
    l.warp = __shfl_sync(0xffffffffu, l.tid >> 5, 0); /* warp-uniform */
    l.sl = l.warp & 3;
    l.hf = l.warp >> 2;
    l.g = l.lane >> 2;
    l.t4 = l.lane & 3;
    l.q_lat = base + smem_k<NR>::Q + (uint32_t)(l.g * QS + 256 * l.hf + 16 * l.t4) * 2u;
    l.q_rope = base + smem_k<NR>::Q + (uint32_t)(l.g * QS + rope_feature(l.t4, l.hf)) * 2u;
    l.x_mine = reinterpret_cast<float4 *>(smem + smem_k<NR>::X) + (l.warp * 32 + l.lane);
    l.x_other = (l.hf ? -4 : 4) * 32;
    return l;
}

} // namespace keys
} // namespace mlav90

#endif
