/* The seesaw kernel's softmax stages: the clean pairs, the scores and their mask, P, its row
 * sums, P as wgmma's register A, and O's rescale. */
#ifndef MLAV_CUDA_SM90_SEESAW_SOFTMAX_CUH
#define MLAV_CUDA_SM90_SEESAW_SOFTMAX_CUH

#include "traits.cuh"

namespace mlav90 {
namespace seesaw {

/* How many of the block's leading tiles hide no key (tile_has_hidden_keys false for each: it
 * ends at or before both the prefix and kv_end); a partial tile at kv_end is not one. */
__device__ __forceinline__ int clean_tiles(const block_ctx &c)
{
    const int lim = c.prefix < c.kv_end ? c.prefix : c.kv_end;
    const int n = lim > c.kv_begin ? (lim - c.kv_begin) / TILE_N : 0;
    return n < c.n_tiles ? n : c.n_tiles;
}

/* The scores of the tile at KV row j0 in place (the visibility mask: mask_scores, with what
 * score_ctx applies before the maxima), and their row maxima times the factor exponentiate
 * applies (`score.k`); returns whether the tile has hidden keys (V to sanitize). */
template <bool CLEAN, typename Score>
__device__ __forceinline__ bool scores(float (&x)[X_REGS], float (&tm)[2],
                                       const mlav_flash_params &p, const block_ctx &c, int j0,
                                       int r0, int t4, const Score &score)
{
    bool hidden = false;
    if constexpr (CLEAN) { /* clean_tiles': no key hidden */
#pragma unroll
        for (int i = 0; i < X_REGS; i++)
            x[i] = score(x[i]);
    } else {
        hidden = mask_scores(x, p, c, j0, 0, r0, t4, score);
    }
    fragment_row_max(x, tm);
#pragma unroll
    for (int h = 0; h < 2; h++)
        tm[h] *= score.k;
    return hidden;
}

/* Scores to P (in place) against reference `m` per row: exp2 of k x score - m (scores: k the
 * factor of raw scores, 1 for scaled ones). Their row sums are add_row_sums', after P V's issue. */
__device__ __forceinline__ void exponentiate(float (&x)[X_REGS], const float (&m)[2], float k)
{
    float neg[2]; /* -m */
#pragma unroll
    for (int h = 0; h < 2; h++)
        neg[h] = m[h] == -INFINITY ? 0.0f : -m[h]; /* no -inf - -inf */
#pragma unroll
    for (int i = 0; i < X_REGS; i++)
        x[i] = mlav::exp2_fast(fmaf(x[i], k, neg[(i >> 1) & 1]));
}

/* P's row sums (exponentiate's) added to `l`, in key order: off the path from S's completion to
 * P V's issue, where each warpgroup's tensor work waits. */
__device__ __forceinline__ void add_row_sums(const float (&x)[X_REGS], float (&l)[2])
{
#pragma unroll
    for (int i = 0; i < X_REGS; i++)
        l[(i >> 1) & 1] += x[i];
}

/* P (an S fragment of m64n64, exponentiated) as wgmma's register A for the P V product's four
 * k16 steps: step ks's registers r = 0..3 hold rows g, g + 8, g, g + 8 at keys 16 ks + 2 t
 * (+ 8 for r = 2, 3), i.e. x[8 ks + 2 r] and x[8 ks + 2 r + 1], two keys a word. */
template <typename Pack>
__device__ __forceinline__ void pack_a(uint32_t (&pr)[16], const float (&x)[X_REGS], Pack pack)
{
#pragma unroll
    for (int i = 0; i < 16; i++)
        pr[i] = pack(x[2 * i], x[2 * i + 1]);
}

/* O times its rows' factors; skipped in a warp whose 16 rows all keep theirs (factor 1). */
__device__ __forceinline__ void rescale_o(float (&o)[O_REGS], const float (&f)[2])
{
    if (__any_sync(0xffffffffu, f[0] != 1.0f || f[1] != 1.0f)) {
#pragma unroll
        for (int i = 0; i < O_REGS; i++)
            o[i] *= f[(i >> 1) & 1];
    }
}

} // namespace seesaw
} // namespace mlav90

#endif
