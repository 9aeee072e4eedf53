/* The visibility mask of the sm_90a producer and seesaw kernels' S fragments: the draft mask's
 * words toward the L1, the scores masked in place, and the fragment's row maxima. */
#ifndef MLAV_CUDA_SM90_MASK_CUH
#define MLAV_CUDA_SM90_MASK_CUH

#include "block.cuh"

namespace mlav90 {

/* This thread's rows' words of the draft mask for the block's first draft key toward the L1, at
 * the block's start: a tile with hidden keys reads them (mask_scores) after its S, on the tile's
 * path, where a miss to DRAM (the mask is tiny and easily evicted) would wait there. Nothing for a
 * chain or a block of prefix keys (docs/PERFORMANCE.md#hopper: a request's last tile). */
__device__ __forceinline__ void prefetch_draft_words(const mlav_flash_params &p, const block_ctx &c,
                                                     int r0)
{
    if (!p.tree_mask || c.kv_end <= c.prefix)
        return;
    const int w0 = max(c.kv_begin - c.prefix, 0) >> 5;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = c.m0 + r0 + 8 * h;
        if (m < c.M) {
            const uint32_t *a =
                p.tree_mask + (size_t)(c.q_start + m / p.H) * (size_t)p.mask_words + w0;
            asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
        }
    }
}

/* An S fragment's scores in place (m64nN fragments: x[4 j + e] is row r0 + 8 (e >> 1) of the
 * block, key j0 + key0 + 8 j + 2 t4 + (e & 1)): `score` of each key its row sees, -inf for the
 * others (rows past M, keys past kv_end, draft keys its tree-mask row hides). A tile [j0, j0 + 64)
 * of prefix keys only is seen whole by every row (rows past M hold Q = 0 and are never
 * written). Returns whether the tile has hidden keys (its V then sanitized: sanitize_v). */
template <int N, typename Score>
__device__ __forceinline__ bool mask_scores(float (&x)[N], const mlav_flash_params &p,
                                            const block_ctx &c, int j0, int key0, int r0, int t4,
                                            Score score)
{
    const bool hidden = tile_has_hidden_keys(j0, c.prefix, c.kv_end);
    if (!hidden) {
#pragma unroll
        for (int i = 0; i < N; i++)
            x[i] = score(x[i]);
    } else {
        /* the fragment's 2 N keys span at most NW words of a row's draft mask: loaded up front,
         * together (a lookup per key put a load per draft key and element on the tile's path) */
        constexpr int NW = 2 * N / 32 + 1;
        const int k_first = j0 + key0;       /* the fragment's first key */
        const int k0 = k_first - c.prefix;   /* ... as a draft key */
        const int w0 = k0 > 0 ? k0 >> 5 : 0;
        const int drafts = c.kv_end - c.prefix; /* draft keys this block reads */
        int row_i[2];
        uint32_t word[2][NW];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = c.m0 + r0 + 8 * h;
            row_i[h] = m < c.M ? m / p.H : -1;
#pragma unroll
            for (int w = 0; w < NW; w++)
                word[h][w] = row_i[h] >= 0 && 32 * (w0 + w) < drafts
                                 ? mlav_draft_word(p.tree_mask, p.mask_words,
                                                   c.q_start + row_i[h], row_i[h], w0 + w)
                                 : 0u;
        }
        /* each row's visibility of the fragment's keys as bits (mlav_rows_visible64, bit o: key
         * j0 + key0 + o), from this thread's first key (o = 2 t4); then a bit test a score: a
         * test of each key's index made this path 878 instructions of each seesaw loop's code;
         * the instances' code 104 KB -> 86 KB and on the H200 0.986x the time at page 64, 0.979x
         * at page 1, 0.983x with trees (docs/PERFORMANCE.md#hopper) */
        static_assert(2 * N <= 64, "a fragment's keys in one 64-bit word");
        uint64_t vis[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const auto wd = [&](int w) { return w < NW ? word[h][w] : 0u; };
            const uint64_t v =
                mlav_rows_visible64(wd(0), wd(1), wd(2), k_first, c.prefix, c.kv_end);
            vis[h] = row_i[h] >= 0 ? v >> (2 * t4) : 0ull;
        }
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int b = 8 * (i >> 2) + (i & 1); /* key 8 j + 2 t4 + e of the fragment */
            x[i] = (vis[(i >> 1) & 1] >> b) & 1ull ? score(x[i]) : -INFINITY;
        }
    }
    return hidden;
}

/* The maxima of an S fragment's two rows (mask_scores' layout) over the fragment's keys of the
 * 4 threads of a quad, the same in each of them. */
template <int N>
__device__ __forceinline__ void fragment_row_max(const float (&x)[N], float (&tm)[2])
{
    tm[0] = tm[1] = -INFINITY;
#pragma unroll
    for (int i = 0; i < N; i++)
        tm[(i >> 1) & 1] = fmaxf(tm[(i >> 1) & 1], x[i]);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        tm[h] = fmaxf(tm[h], __shfl_xor_sync(0xffffffffu, tm[h], 1));
        tm[h] = fmaxf(tm[h], __shfl_xor_sync(0xffffffffu, tm[h], 2));
    }
}

} // namespace mlav90

#endif
