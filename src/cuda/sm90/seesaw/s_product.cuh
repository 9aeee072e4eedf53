/* The seesaw kernel's S products: S = Q K^T of a tile block by block as it lands, an FP8
 * tile made F16 first. */
#ifndef MLAV_CUDA_SM90_SEESAW_S_PRODUCT_CUH
#define MLAV_CUDA_SM90_SEESAW_S_PRODUCT_CUH

#include "refill.cuh"

namespace mlav90 {
namespace seesaw {

/* S = Q K^T over the whole 64-key tile at `stage` (fragments of m64n64: x[4 j + e] is row
 * 16 warp + g + 8 (e >> 1), key 8 j + 2 t + (e & 1)): issues and commits its 36 wgmmas, the 4
 * of column block k once the tile's block k has landed (`full`: the stage's 9 barriers, phase
 * parity `parity`), so the product starts with the first block. Each wait is followed by this
 * thread's proxy fence: a block gathered without waits (refill) holds generic-proxy writes that
 * landed on their own, which wgmma reads through the async proxy. WAIT false: the tile is ready
 * (fp8_tile_ready), no waits. LEAD: the first of V's 8 column blocks S takes (then on, cyclically,
 * the rope block last): 4 for WG1, whose own refill is stage 1's blocks 4..7 while WG0 refills
 * 0..3 and 8 last in a pair (after its P_B V_B), so that S_B starts on what has
 * landed first; 0 for WG0, whose own refill is 0..3. */
template <typename T, bool WAIT = true, int LEAD = 0, int I0 = 0, int I1 = W_BLOCKS>
__device__ __forceinline__ void s_issue_full(float (&x)[X_REGS], uint32_t sq, uint32_t stage,
                                             uint64_t *full, uint32_t parity)
{
    static_assert(LEAD >= 0 && LEAD < W_BLOCKS - 1, "LEAD: one of V's column blocks");
    /* the descriptors' low words opaque here, so that ptxas adds each offset where it is used
     * instead of keeping 72 descriptors in registers across the loop of tiles */
    uint32_t qd = desc_lo_k(sq), kd = desc_lo_k(stage);
    asm volatile("" : "+r"(qd), "+r"(kd));
    pin_regs(x);
    wgmma_fence();
#pragma unroll
    for (int i = I0; i < I1; i++) {
        const int kb = i < W_BLOCKS - 1 ? (i + LEAD) % (W_BLOCKS - 1) : i;
        if constexpr (WAIT) {
            mbar_wait_flat(&full[kb], parity);
            fence_proxy_async();
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const uint32_t off = (uint32_t)kb * BLOCK_BYTES + (uint32_t)kk * 32u;
            wgmma_ops<T, 0>::m64n64k16(x, desc_at(qd, off), desc_at(kd, off),
                                       i != 0 || kk != 0);
        }
    }
    wgmma_commit();
}

/* An FP8 cache's tile at `stage`, raw (refill), made F16 for its owner's S and for the other
 * warpgroup's P V (which read it after a hand-over from this warpgroup): every block landed
 * (`full`, parity `parity`: every copy of either warpgroup), this thread's share converted in
 * place (fp8_convert_tile, by whole warps in the copies' mapping, which either warpgroup may run
 * once the tile has landed), its proxy fence, then warpgroup w's barrier, after which its S
 * issues without waits. */
__device__ __forceinline__ void fp8_tile_ready(uint32_t stage, uint64_t *full, uint32_t parity,
                                               int w, int wt)
{
#pragma unroll
    for (int kb = 0; kb < W_BLOCKS; kb++)
        mbar_wait_flat(&full[kb], parity);
    fp8_convert_tile<true>(stage, wt);
    fence_proxy_async();
    wg_barrier(w);
}

/* WG0's S of a 16-bit cache's tile t in two parts (FlashMLA's order): blocks 0..3 (HEAD) queued
 * behind the pair before's P_B V_B, the rest once that has completed and stage 1's refill is
 * issued. */
template <typename T, typename Kv, bool HEAD>
__device__ __forceinline__ void s_of_tile_part(float (&x)[X_REGS], uint32_t sq, uint32_t stage,
                                               uint64_t *full, int t)
{
    const uint32_t parity = (uint32_t)((t / 2) & 1);
    if constexpr (HEAD)
        s_issue_full<mma_t<T, Kv>, true, 0, 0, 4>(x, sq, stage, full, parity);
    else
        s_issue_full<mma_t<T, Kv>, true, 0, 4, W_BLOCKS>(x, sq, stage, full, parity);
}

/* The S product of this warpgroup's tile t at `stage`: an FP8 cache's once the tile is made F16
 * (fp8_tile_ready), a 16-bit one's block by block, each block fenced for wgmma after its wait
 * (any tile may have been gathered: refill; which one depends on the tile's page id, which the
 * reader does not hold). On the H200 the fences of TMA tiles cost 1.1% over 48 page-64 points
 * (0.999 without them, 1.011 with, against the tree before gathered refills:
 * docs/PERFORMANCE.md#hopper). */
template <typename T, typename Kv, int W>
__device__ __forceinline__ void s_of_tile(float (&x)[X_REGS], uint32_t sq, uint32_t stage,
                                          uint64_t *full, int t, int wt)
{
    const uint32_t parity = (uint32_t)((t / 2) & 1);
    if constexpr (fp8_kv<Kv>) {
        fp8_tile_ready(stage, full, parity, W, wt);
        s_issue_full<mma_t<T, Kv>, false>(x, sq, stage, full, parity);
    } else {
        s_issue_full<mma_t<T, Kv>, true, first_block(W == 0 ? PART_L : PART_R)>(x, sq, stage,
                                                                                full, parity);
    }
}

} // namespace seesaw
} // namespace mlav90

#endif
