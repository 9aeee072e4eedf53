/* The exchange and softmax stage: the group's four warps meet their partial scores (a
 * reduce-scatter through shared memory), each warp scales and masks the S block it finishes, and
 * turns it into P against a lazy reference max, rescaling O only on a vote. */
#ifndef MLAV_CUDA_FLASH_SOFTMAX_CUH
#define MLAV_CUDA_FLASH_SOFTMAX_CUH

#include <math.h>

#include "../../common/merge.h"
#include "../../common/shard.h"
#include "../../common/visibility.h"
#include "../mma.cuh"
#include "../reference_max.cuh"
#include "traits.cuh"

namespace mlav {
namespace flash {

/* The exchange of the group's partial S, a reduce-scatter through shared memory (`xg`, the
 * group's area) around a group barrier that the kernel holds: block x = 2 i + j (x = 1..3)
 * belongs to warp dq ^ x and goes to its slot x - 1, [dest][slot][lane] of float4 (consecutive
 * lanes, consecutive 16 bytes: no bank conflicts); the sum order is fixed, so results are
 * deterministic. Before the barrier: this warp's blocks for the other three. */
template <typename Tr>
__device__ __forceinline__ void exchange_scatter(const float (&s)[Tr::MT][Tr::NTS][4], float *xg,
                                                 int dq, int lane)
{
#pragma unroll
    for (int x = 1; x < Tr::QUARTERS; x++) {
        const float *v = s[x >> 1][x & 1];
        *reinterpret_cast<float4 *>(xg + (((dq ^ x) * 3 + x - 1) * 32 + lane) * 4) =
            make_float4(v[0], v[1], v[2], v[3]);
    }
}

/* After the barrier: the other three warps' parts of this warp's block, added to its own in sv
 * (rows g, g + 8 x keys 2 qd, 2 qd + 1). */
template <typename Tr>
__device__ __forceinline__ void exchange_gather(float (&sv)[4], const float *xg, int dq, int lane)
{
#pragma unroll
    for (int slot = 0; slot < 3; slot++) {
        const float4 v = *reinterpret_cast<const float4 *>(xg + ((dq * 3 + slot) * 32 + lane) * 4);
        sv[0] += v.x;
        sv[1] += v.y;
        sv[2] += v.z;
        sv[3] += v.w;
    }
}

/* The softmax stage's arrays, declared by the kernel where the loop declares its others: as
 * arrays of the stage functions, their registers came to ptxas in another order, and it
 * allocated the main loop anew (docs/PERFORMANCE.md#ptxas). */
struct softmax_regs {
    int row_i[2];
    float pv[4], tm[2], alpha[4];
};

/* Scale the finished block's scores into log2 units and mask them (split end, tree). Key j (a
 * local row with a KV shard) is a prefix row below local_prefix, else the draft key of its
 * global row less the global prefix (src/common/shard.h; both the identity without a shard).
 * score_scale: p.scale_log2, or for an FP8 cache scale_log2 x kv_scale (fp8_scale_log2), after
 * BF16 q's power of two q_unshift (prologue.cuh; kv_scale.cuh, fp8_score_factors). */
template <typename Tr>
__device__ __forceinline__ void scale_mask(float (&sv)[4], bool prefix_only, int j_base,
                                           float q_unshift, float fp8_scale_log2,
                                           const mlav_flash_params &p, int gm0, int M, int q_start,
                                           int local_prefix, int prefix, int kv_end, int own_m,
                                           int own_n, int g,
                                           int qd, softmax_regs &sr)
{
    constexpr bool FP8 = Tr::FP8, Q_TO_F16 = Tr::Q_TO_F16;
    if (prefix_only) {
        /* a tile of prefix rows only: every key visible to every row (padding rows hold
         * Q = 0 and are never written, so they need no mask either) */
#pragma unroll
        for (int e = 0; e < 4; e++)
            sv[e] = (Q_TO_F16 ? sv[e] * q_unshift : sv[e]) * (FP8 ? fp8_scale_log2 : p.scale_log2);
    } else {
        /* the draft node of each of the S block's two rows, -1 for padding (computed
         * here, on the few tiles that need it, to spare two registers in the loop) */
        int(&row_i)[2] = sr.row_i;
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int m = gm0 + own_m * 16 + g + rr * 8;
            row_i[rr] = m < M ? m / p.H : -1;
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int rr = e >> 1, j = j_base + own_n * 8 + qd * 2 + (e & 1);
            bool vis = j < kv_end && row_i[rr] >= 0;
            if (vis && j >= local_prefix) {
                const int k =
                    (p.shard.ranks > 1 ? (int)mlav_shard_global32(p.shard, (uint32_t)j) : j) -
                    prefix;
                const int i = row_i[rr];
                vis = mlav_draft_visible(p.tree_mask, p.mask_words, q_start + i, i, k);
            }
            sv[e] = vis ? (Q_TO_F16 ? sv[e] * q_unshift : sv[e]) *
                              (FP8 ? fp8_scale_log2 : p.scale_log2)
                        : -INFINITY;
        }
    }
}

/* The P of this thread's four scores (rows r, r + 8 x two keys) against the reference maxima;
 * `over` says whether a score passed its reference by more than RESCALE_SLACK. */
__device__ __forceinline__ void softmax_weights(const float sv[4], const float ref[2], float pv[4],
                                                bool &over)
{
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float r = ref[e >> 1];
        over |= sv[e] > r + RESCALE_SLACK;
        pv[e] = mlav::exp2_fast(sv[e] - (r == -INFINITY ? 0.0f : r)); /* no -inf - -inf */
    }
}

/* Online softmax, the rule of mlav_rescale_factor (merge.h) in log2 units, against a lazy
 * reference max: P = 2^(s - ref) with the reference every warp of the group already holds,
 * written to the group's P tile at p_mine. Only when a score passes its reference by more than
 * RESCALE_SLACK (the first tile, or a new maximum) does the group vote, exchange row maxima
 * (sMax), move the reference, rescale O and redo P; any reference gives the same softmax, and
 * the lse adds it back. So the common tile needs two group barriers and no max exchange. */
template <typename Tr>
__device__ __forceinline__ void online_softmax(const float (&sv)[4], float (&ref_max)[4],
                                               float (&run_sum)[2],
                                               float (&o)[Tr::MT][Tr::COLS_Q / 8][4],
                                               typename Tr::mma_t *p_mine, float *sMax,
                                               int grp, int dq, int own_m, int g, int qd, int bar,
                                               softmax_regs &sr)
{
    using MTY = mlav::mma_type<typename Tr::mma_t>;
    constexpr int MT = Tr::MT, COLS_Q = Tr::COLS_Q, PS = Tr::PS, QUARTERS = Tr::QUARTERS;
    float(&pv)[4] = sr.pv;
    bool over = false;
    softmax_weights(sv, ref_max, pv, over);
    *reinterpret_cast<uint32_t *>(p_mine) = MTY::pack(pv[0], pv[1]);
    *reinterpret_cast<uint32_t *>(p_mine + 8 * PS) = MTY::pack(pv[2], pv[3]);
    if (mlav::named_barrier_or(bar, Tr::GROUP_THREADS, over)) {
        float(&tm)[2] = sr.tm;
        tm[0] = fmaxf(sv[0], sv[1]);
        tm[1] = fmaxf(sv[2], sv[3]);
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            tm[rr] = fmaxf(tm[rr], __shfl_xor_sync(0xffffffffu, tm[rr], 1));
            tm[rr] = fmaxf(tm[rr], __shfl_xor_sync(0xffffffffu, tm[rr], 2));
        }
        float *mx = sMax + grp * QUARTERS * 16;
        if (qd == 0) {
            mx[dq * 16 + g] = tm[0];
            mx[dq * 16 + g + 8] = tm[1];
        }
        mlav::named_barrier(bar, Tr::GROUP_THREADS);
        float(&alpha)[4] = sr.alpha;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int owner = 2 * ((k >> 1) ^ own_m), r16 = g + 8 * (k & 1);
            const float tile_max = fmaxf(mx[owner * 16 + r16], mx[(owner + 1) * 16 + r16]);
            const float new_max = mlav::next_ref(ref_max[k], tile_max);
            alpha[k] = mlav::ref_factor(ref_max[k], new_max);
            ref_max[k] = new_max;
        }
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int n = 0; n < COLS_Q / 8; n++) {
                o[i][n][0] *= alpha[2 * i];
                o[i][n][1] *= alpha[2 * i];
                o[i][n][2] *= alpha[2 * i + 1];
                o[i][n][3] *= alpha[2 * i + 1];
            }
        run_sum[0] *= alpha[0];
        run_sum[1] *= alpha[1];
        bool unused = false;
        softmax_weights(sv, ref_max, pv, unused);
        *reinterpret_cast<uint32_t *>(p_mine) = MTY::pack(pv[0], pv[1]);
        *reinterpret_cast<uint32_t *>(p_mine + 8 * PS) = MTY::pack(pv[2], pv[3]);
        mlav::named_barrier(bar, Tr::GROUP_THREADS);
    }
    run_sum[0] += pv[0] + pv[1];
    run_sum[1] += pv[2] + pv[3];
}

} // namespace flash
} // namespace mlav

#endif
