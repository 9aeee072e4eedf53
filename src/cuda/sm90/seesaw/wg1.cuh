/* The seesaw kernel's WG1: tile B of each pair. */
#ifndef MLAV_CUDA_SM90_SEESAW_WG1_CUH
#define MLAV_CUDA_SM90_SEESAW_WG1_CUH

#include "s_product.cuh"
#include "softmax.cuh"

namespace mlav90 {
namespace seesaw {

/* WG1: tile B of each pair, output columns [256, 512). */
template <typename T, typename Kv, bool GATHER, bool CLEAN, typename Score, typename Feed>
__device__ __forceinline__ void wg1_pairs(const mlav_flash_params &p, const block_ctx &c,
                                          unsigned char *smem, uint32_t base, uint64_t *full,
                                          const Feed &f, float (&o)[O_REGS],
                                          float (&m_run)[2], float (&l_run)[2], int wt,
                                          const Score &score, int t_begin, int t_end)
{
    using MT = mma_t<T, Kv>;
    using TY = mlav::mma_type<MT>;
    const int warp = wt >> 5, lane = wt & 31, t4 = lane & 3;
    const int r0 = 16 * warp + (lane >> 2);
    const float *sref = reinterpret_cast<const float *>(smem + smem_ss::REF);
    float *smax_m = reinterpret_cast<float *>(smem + smem_ss::MAXM);
    const uint32_t sq = base + smem_ss::Q, sa = base + smem_ss::KV, sb = sa + OPERAND_BYTES;
    uint64_t *full_a = full, *full_b = full + W_BLOCKS;
    uint64_t *hand = full + STAGES * W_BLOCKS; /* smem_ss::HAND */
    for (int t = t_begin; t < t_end; t += 2) {
        const bool has_b = CLEAN || t + 1 < c.n_tiles;
        float x[X_REGS];
        float tm[2] = {-INFINITY, -INFINITY};
        bool hidden = false;
        if (has_b) {
            s_of_tile<T, Kv, 1>(x, sq, sb, full_b, t + 1, wt);
            wgmma_wait<0>();
            fence_regs(x);
            hidden = scores<CLEAN>(x, tm, p, c, c.kv_begin + (t + 1) * TILE_N, r0, t4, score);
        }
        handover_wait<HAND_REF>(hand, t);
        float m[2], f1[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            m[h] = mlav::next_ref(sref[r0 + 8 * h], tm[h]);
            if (t4 == 0)
                smax_m[r0 + 8 * h] = m[h];
            f1[h] = mlav::ref_factor(m_run[h], m[h]);
            l_run[h] *= f1[h];
            m_run[h] = m[h];
        }
        handover_arrive<HAND_M>(hand);
        /* the next pair's page ids (refill's page0 and ids), looked up under this pair's softmax
         * and P V */
        const int32_t pg2 = tile_page<GATHER>(f.ptab, c, t + 2, p);
        const int32_t pg3 = tile_page<GATHER>(f.ptab, c, t + 3, p);
        const row_ids_t<Kv, GATHER> ids = pair_rows<Kv, GATHER>(f.ptab, c, t + 2, p, wt);
        const int32_t pg5 = tile_page<!fp8_kv<Kv>>(f.ptab, c, t + 5, p);
        rescale_o(o, f1);
        uint32_t pr[16]; /* P_B as wgmma's register A (pack_a), held until its wait */
        if (has_b) {
            if (hidden) { /* every thread's sanitized rows before this warpgroup's P_B V_B */
                sanitize_v_lean(smem + smem_ss::KV + OPERAND_BYTES, TY::exp_mask,
                                hidden_v_rows(c.kv_begin + (t + 1) * TILE_N, c.prefix,
                                              c.kv_end),
                                wt, WG_THREADS);
                fence_proxy_async();
                wg_barrier(1);
            }
            exponentiate(x, m, score.k);
            pack_a(pr, x, TY::pack);
            pv_rs_issue<MT>(o, pr, sb, 1);
            store_p_stsm(sb + P_SLOT, x, warp, lane, TY::pack); /* for WG0's P_B V_B */
            fence_proxy_async();                     /* P_B, V_B sanitized: for wgmma */
            handover_arrive<HAND_PB>(hand);
            add_row_sums(x, l_run);
        }
        handover_wait<HAND_PA>(hand, t);
        pv_issue<MT>(o, sa + P_SLOT, sa, 1);
        if (has_b) {
            wgmma_wait<1>(); /* O_R += P_B V_B: this warpgroup's last read of stage 1 */
            pin_u32(pr);
            /* stage 1's blocks 4..7: read only by this warpgroup (S_B, P_B V_B) */
            if (t + 3 < c.n_tiles)
                refill<Kv, PART_R, GATHER>(p, c, f, sb, full_b, t + 3, wt, pg3, ids, 1);
            if constexpr (fp8_kv<Kv>)
                prefetch_fp8_tile<Kv>(p, c, t + 5, pg5, wt);
        }
        wgmma_wait<0>();
        fence_regs(o);
        /* stage 0's blocks 4..7 and P's slot: this warpgroup's P_A V_A was their last reader
         * (WG0's S_A and P_A V_A completed before PA) */
        if (t + 2 < c.n_tiles)
            refill<Kv, PART_R | PART_P, GATHER>(p, c, f, sa, full_a, t + 2, wt, pg2, ids, 0);
    }
}

} // namespace seesaw
} // namespace mlav90

#endif
