/* The keys kernel's S^T stage: the scores of a warp's 16 keys of a tile over its half of
 * the features, the slice's two halves added, and the mask. */
#ifndef MLAV_CUDA_SM90_KEYS_S_TILE_CUH
#define MLAV_CUDA_SM90_KEYS_S_TILE_CUH

#include "fragments.cuh"

namespace mlav90 {
namespace keys {

/* One k16 step of S^T: the A fragment from two e4m3 words (keys g and g + 8, bytes e = 0..3 of
 * the step), Q's B fragments of each n-tile from `qa` (row g's halves of the step). */
template <int NTN>
__device__ __forceinline__ void s_step(float (&sacc)[NTN][4], uint32_t (&a)[4], uint32_t kg,
                                       uint32_t kg8, uint32_t qa)
{
    mlav::e4m3x4_to_half2x2(kg, a[0], a[2]);
    mlav::e4m3x4_to_half2x2(kg8, a[1], a[3]);
#pragma unroll
    for (int n = 0; n < NTN; n++) {
        const uint2 b = lds8(qa + (uint32_t)n * 8u * QS * 2u);
        mlav::mma_type<__half>::mma(sacc[n], a, b.x, b.y);
    }
}

/* S^T of the warp's 16 keys of the tile at `stage` over its half of the features (keys g, g + 8
 * at rows kg, kg + 8 of the tile), then the slice's two halves added (the pair's 64-thread
 * barrier, id 1 + slice): the scores of keys g, g + 8 for rows 8 n + 2 t4 (+ 1). K's latent A
 * fragments stay in kf for O^T (o_tile). */
template <int NTN>
__device__ __forceinline__ void s_tile(float (&sacc)[NTN][4], uint32_t (&kf)[GROUPS][4][4],
                                       uint32_t stage, const lane_ctx &l)
{
    const uint32_t kg = stage + (uint32_t)(16 * l.sl + l.g) * W, kg8 = kg + 8u * W;
    /* two accumulators, even and odd k16 steps: two MMA chains of 9 steps a n8 tile instead of
     * one of 18, each MMA waiting on the one two steps back */
    float s2[NTN][4];
#pragma unroll
    for (int n = 0; n < NTN; n++) {
        sacc[n][0] = sacc[n][1] = sacc[n][2] = sacc[n][3] = 0.0f;
        s2[n][0] = s2[n][1] = s2[n][2] = s2[n][3] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < GROUPS; u++) {
        const uint32_t off = (uint32_t)(256 * l.hf + 64 * u + 16 * l.t4);
        const uint4 wa = lds16(kg + off), wb = lds16(kg8 + off);
        const uint32_t ra[4] = {wa.x, wa.y, wa.z, wa.w}, rb[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int s = 0; s < 4; s++)
            s_step<NTN>(s & 1 ? s2 : sacc, kf[u][s], ra[s], rb[s],
                        l.q_lat + (uint32_t)(64 * u + 4 * s) * 2u);
    }
    /* the rope's 8 bytes at rope_feature, as lane_ctx's q_rope */
    const uint32_t off = (uint32_t)rope_feature(l.t4, l.hf);
    const uint2 wa = lds8(kg + off), wb = lds8(kg8 + off);
    uint32_t a[4];
    s_step<NTN>(sacc, a, wa.x, wb.x, l.q_rope);
    s_step<NTN>(s2, a, wa.y, wb.y, l.q_rope + 8u);
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            sacc[n][e] += s2[n][e];
#pragma unroll
    for (int n = 0; n < NTN; n++)
        l.x_mine[n * WARPS * 32] = make_float4(sacc[n][0], sacc[n][1], sacc[n][2], sacc[n][3]);
    named_barrier(1 + l.sl, 64);
#pragma unroll
    for (int n = 0; n < NTN; n++) {
        const float4 v = l.x_mine[l.x_other + n * WARPS * 32];
        sacc[n][0] += v.x, sacc[n][1] += v.y, sacc[n][2] += v.z, sacc[n][3] += v.w;
    }
}

/* The slice's scores in place (keys j_s + g (+ 8), rows 8 n + 2 t4 (+ 1)): `score` of each key
 * its row sees, -inf for the others (keys past kv_end; draft keys the row's mask hides, by
 * mlav_kv_visible; rows past M see every key before kv_end: Q = 0 there, never written). */
template <int NTN, typename Score>
__device__ __forceinline__ void mask_tile(float (&sacc)[NTN][4], const mlav_flash_params &p,
                                          const block_ctx &c, int j_s, const lane_ctx &l,
                                          const Score &score)
{
    if (j_s + 16 <= c.prefix && j_s + 16 <= c.kv_end) {
#pragma unroll
        for (int n = 0; n < NTN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sacc[n][e] = score(sacc[n][e]);
        return;
    }
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = j_s + l.g + 8 * (e >> 1), m = c.m0 + 8 * n + 2 * l.t4 + (e & 1);
            bool vis = j < c.kv_end;
            if (vis && m < c.M && j >= c.prefix) {
                const int i = m / p.H;
                vis = mlav_kv_visible(p.tree_mask, p.mask_words, c.q_start + i, i, c.prefix, j);
            }
            sacc[n][e] = vis ? score(sacc[n][e]) : -INFINITY;
        }
}

} // namespace keys
} // namespace mlav90

#endif
