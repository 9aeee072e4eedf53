/* The seesaw kernel's WG0: tile A of each pair. */
#ifndef MLAV_CUDA_SM90_SEESAW_WG0_CUH
#define MLAV_CUDA_SM90_SEESAW_WG0_CUH

#include "s_product.cuh"
#include "softmax.cuh"

namespace mlav90 {
namespace seesaw {

/* WG0: tile A of each pair, output columns [0, 256). EARLY_S (a 16-bit cache's instance, by the
 * plan's rule: mlav_flash_sm90_early_s_rule): each pair's S_A is issued at the end of the pair
 * before, its blocks 0..3 queued behind that pair's P_B V_B and the rest once stage 1's refill is
 * issued (FlashMLA's order), so that the tensor pipe has the next S_A while WG0 waits for P_B V_B
 * and refills. It pays where many row tiles read each KV tile over long requests (tensor-bound);
 * where few do, and at 4096 keys, it was slower, likely as the head's waits for blocks still
 * landing hold back stage 1's refill (the figures: MLAV_SM90_EARLY_S_MIN_ROW_TILES,
 * flash_family.h). */
template <typename T, typename Kv, bool GATHER, bool CLEAN, bool EARLY_S, typename Score,
          typename Feed>
__device__ __forceinline__ void wg0_pairs(const mlav_flash_params &p, const block_ctx &c,
                                          unsigned char *smem, uint32_t base, uint64_t *full,
                                          const Feed &f, float (&o)[O_REGS],
                                          float (&m_run)[2], float (&l_run)[2], int wt,
                                          const Score &score, int t_begin, int t_end)
{
    using MT = mma_t<T, Kv>;
    using TY = mlav::mma_type<MT>;
    const int warp = wt >> 5, lane = wt & 31, t4 = lane & 3;
    const int r0 = 16 * warp + (lane >> 2);
    float *sref = reinterpret_cast<float *>(smem + smem_ss::REF);
    const float *smax_m = reinterpret_cast<const float *>(smem + smem_ss::MAXM);
    const uint32_t sq = base + smem_ss::Q, sa = base + smem_ss::KV, sb = sa + OPERAND_BYTES;
    uint64_t *full_a = full, *full_b = full + W_BLOCKS;
    uint64_t *hand = full + STAGES * W_BLOCKS; /* smem_ss::HAND */
    /* EARLY: a pair's S_A issued in the pair before (NEXT: a pair that has a next one in this
     * loop); an FP8 tile is converted first (fp8_tile_ready), at the top of its own pair */
    constexpr bool EARLY = EARLY_S && !fp8_kv<Kv>;
    float x[X_REGS];
    auto pair = [&](int t, auto next) {
        constexpr bool NEXT = decltype(next)::value;
        const bool has_b = CLEAN || NEXT || t + 1 < c.n_tiles;
        if constexpr (!EARLY) {
            s_of_tile<T, Kv, 0>(x, sq, sa, full_a, t, wt);
            wgmma_wait<0>();
            fence_regs(x);
        }
        float tm[2];
        const bool hidden = scores<CLEAN>(x, tm, p, c, c.kv_begin + t * TILE_N, r0, t4, score);
        float ref0[2], f0[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ref0[h] = mlav::next_ref(m_run[h], tm[h]);
            if (t4 == 0)
                sref[r0 + 8 * h] = ref0[h];
            f0[h] = mlav::ref_factor(m_run[h], ref0[h]);
            l_run[h] *= f0[h];
        }
        handover_arrive<HAND_REF>(hand);
        if (hidden) /* K read (S completed); V_A before either warpgroup's P V */
            sanitize_v_lean(smem + smem_ss::KV, TY::exp_mask,
                            hidden_v_rows(c.kv_begin + t * TILE_N, c.prefix, c.kv_end), wt,
                            WG_THREADS);
        rescale_o(o, f0);
        exponentiate(x, ref0, score.k);
        store_p_stsm(sa + P_SLOT, x, warp, lane, TY::pack);
        fence_proxy_async(); /* P_A, V_A sanitized: for wgmma */
        wg_barrier(0);
        pv_issue<MT>(o, sa + P_SLOT, sa, 0);
        add_row_sums(x, l_run); /* at ref0, before f1 */
        /* the next pair's page ids (refill's page0 and ids), looked up under this pair's P V */
        const int32_t pg2 = tile_page<GATHER>(f.ptab, c, t + 2, p);
        const int32_t pg3 = tile_page<GATHER>(f.ptab, c, t + 3, p);
        const row_ids_t<Kv, GATHER> ids = pair_rows<Kv, GATHER>(f.ptab, c, t + 2, p, wt);
        const int32_t pg4 = tile_page<!fp8_kv<Kv>>(f.ptab, c, t + 4, p);
        handover_wait<HAND_M>(hand, t);
        float m[2], f1[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            m[h] = smax_m[r0 + 8 * h];
            f1[h] = mlav::ref_factor(ref0[h], m[h]);
            l_run[h] *= f1[h];
            m_run[h] = m[h];
        }
        wgmma_wait<0>();
        fence_regs(o);
        rescale_o(o, f1);
        /* every warp's reads of P_A completed before its rewrite at the pair's reference */
        wg_barrier(0);
        if (__any_sync(0xffffffffu, f1[0] != 1.0f || f1[1] != 1.0f)) {
#pragma unroll
            for (int i = 0; i < X_REGS; i++)
                x[i] *= f1[(i >> 1) & 1];
            store_p_stsm(sa + P_SLOT, x, warp, lane, TY::pack);
        }
        fence_proxy_async();
        handover_arrive<HAND_PA>(hand);
        /* stage 0's blocks 0..3: read only by this warpgroup (S_A, P_A V_A), both completed */
        if (t + 2 < c.n_tiles)
            refill<Kv, PART_L, GATHER>(p, c, f, sa, full_a, t + 2, wt, pg2, ids, 0);
        if constexpr (fp8_kv<Kv>)
            prefetch_fp8_tile<Kv>(p, c, t + 4, pg4, wt);
        if (has_b) {
            handover_wait<HAND_PB>(hand, t);
            pv_issue<MT>(o, sb + P_SLOT, sb, 0);
            if constexpr (NEXT) { /* the next S_A's blocks 0..3 queued behind P_B V_B */
                s_of_tile_part<T, Kv, true>(x, sq, sa, full_a, t + 2);
                wgmma_wait<1>();
            } else {
                wgmma_wait<0>();
            }
            fence_regs(o);
        }
        /* stage 1's blocks 0..3 and P's slot: their last readers, this warpgroup's P_B V_B and
         * WG1's S_B (before PB), completed; WG1 multiplies P_B from registers. Out of the block
         * above: inside it, ptxas spilled. */
        if (t + 3 < c.n_tiles)
            refill<Kv, PART_L | PART_P, GATHER>(p, c, f, sb, full_b, t + 3, wt, pg3, ids, 1);
        if constexpr (NEXT) { /* the rest of the next S_A, once stage 1's refill is issued */
            s_of_tile_part<T, Kv, false>(x, sq, sa, full_a, t + 2);
            wgmma_wait<0>();
            fence_regs(x);
        }
    };
    int t = t_begin;
    if constexpr (EARLY) {
        if (t < t_end) {
            s_of_tile<T, Kv, 0>(x, sq, sa, full_a, t, wt);
            wgmma_wait<0>();
            fence_regs(x);
        }
        for (; t + 2 < t_end; t += 2)
            pair(t, std::true_type{});
        if (t < t_end)
            pair(t, std::false_type{});
    } else {
        for (; t < t_end; t += 2)
            pair(t, std::false_type{});
    }
}

} // namespace seesaw
} // namespace mlav90

#endif
