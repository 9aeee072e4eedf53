/* The "keys" kernel: the split kernel's contract (sm90/kernel.cuh) for an FP8 E4M3 cache where a
 * block has at most NR (8 or 16) folded rows, with the keys on the MMA's M side: S^T = K Q^T and
 * O^T = V^T P^T by mma.sync m16n8k16, K's e4m3 bytes converted in registers as the A operand and
 * V^T's A fragments made from K's by movmatrix, so that no F16 copy of a tile is written to or
 * read from shared memory. The seesaw kernel (sm90/seesaw/) converts each FP8 tile to F16 in
 * place and reads it back through wgmma: 372,736 bytes of shared-memory traffic a 64-key tile,
 * which at 128 bytes a cycle bounds it at 1.56x the BF16 cache where the BF16 cache is DRAM-bound
 * (docs/PERFORMANCE.md#hopper, "FP8 cache"); here a tile costs its landing (36,864), its one
 * read as K (36,864), Q's fragments (36,864 at 8 rows, 73,728 at 16) and the partial scores'
 * exchange.
 *
 * Block: 256 threads, 8 warps. Warp w takes the keys of slice s = w % 4 (keys 16 s .. 16 s + 15
 * of each 64-key tile) and half h = w / 4 of the features: latent 256 h .. 256 h + 255 and half
 * the rope for S, and V's dims 256 h .. 256 h + 255 for O. The two warps of a slice add their
 * partial S^T through shared memory (a 64-thread barrier each), so both hold the same scores,
 * references and row sums; the four slices keep independent softmax states (their own
 * references) and meet once, in the epilogue.
 *
 * Feature order. Within a 64-feature latent group, thread (g, t) (g = lane / 4, t = lane % 4) takes
 * the 16 contiguous bytes at 16 t of its keys' rows; of the rope, the 8 at 512 + 16 t + 8 h
 * (rope_feature, traits.cuh, says why). Word s of them is k16 step s, its bytes e = 0..3 the A
 * fragment's columns 2 t, 2 t + 1 (e 0, 1) and 2 t + 8, 2 t + 9 (e 2, 3). The dot product is the
 * same in any order, and Q's B fragments read the same physical features (b0: e 0, 1; b1: e 2, 3:
 * one 8-byte load). For O^T, the 16 M rows of the m-tile made from step s of group u are those
 * logical columns: row k is physical dim
 * 256 h + 64 u + 16 (k & 7) / 2 + 4 s + ((k & 1) | (k >> 3) << 1) (keys_dim).
 *
 * Fragments (PTX ISA, mma.m16n8k16): A a0 (row g, cols 2t, 2t+1), a1 (row g+8, same), a2 (row
 * g, cols 2t+8, 2t+9), a3 (row g+8, same); B b0 (k 2t, 2t+1; col g), b1 (k 2t+8, 2t+9; col g);
 * C c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8). movmatrix.trans takes an 8x8 matrix in the
 * C-pair layout (row g, cols 2t, 2t+1) to its transpose in the same layout. So:
 *   S^T (keys x rows) C: key g (+8), rows 8 n + 2 t (+1);
 *   P^T's B for keys 0-7 = trans(pack(c0, c1)), keys 8-15 = trans(pack(c2, c3));
 *   V^T's A = (trans(K a0), trans(K a2), trans(K a1), trans(K a3)).
 *
 * Pipeline: 4 stages of raw 64-key tiles (576 bytes a row, contiguous: the 16-byte loads of a
 * quarter warp, rows g and g + 1 at 16 t, fall on distinct banks), 3 ahead, by bulk copies (a
 * tile inside one page by thread 0, else a row by its first thread, whose page id it copied by
 * cp.async three tiles before), each stage's bytes awaited on its mbarrier, one block barrier a
 * tile.
 * Hidden keys: scores -inf (mask as mlav_kv_visible), and draft keys' non-finite V values zeroed
 * in registers (the seesaw's sanitize_v rule). Epilogue: each slice's O^T rescaled to the rows'
 * common reference, summed through shared memory in slice order, written as write_output does
 * (the final output and lse, or the split's fp16 partial, part_scale and part_lse). */
#ifndef MLAV_CUDA_SM90_KEYS_KERNEL_CUH
#define MLAV_CUDA_SM90_KEYS_KERNEL_CUH

#include "../score.cuh"
#include "epilogue.cuh"
#include "gather.cuh"
#include "o_tile.cuh"
#include "prologue.cuh"
#include "s_tile.cuh"
#include "softmax.cuh"

namespace mlav90 {
namespace keys {

/* The kernel. NR: the most rows of any block (8 or 16); STEP as sm90/kernel.cuh's flash_sm90_kernel
 * (a plan for limits: the block's item from the step's schedule, step_item_index). The sequence:
 * tiles 0..2's gathers and tiles 3..5's page ids, Q (load_q_f16), the scores' factors; per tile
 * its landing, the gather of tile t + 3 and the page ids of tile t + 6, s_tile, mask_tile,
 * softmax_tile, o_tile; the epilogue. */
template <typename T, int NR, bool STEP>
__global__ void __launch_bounds__(THREADS, 1)
    flash_sm90_keys_kernel(const mlav_flash_params p, const __grid_constant__ CUtensorMap kv_map,
                           const int kv_tma)
{
    using SL = smem_k<NR>;
    constexpr int NTN = NR / 8; /* n8 tiles of rows */
    constexpr bool Q_TO_F16 = !std::is_same<T, __half>::value;
    (void)kv_map;
    (void)kv_tma;
    const int32_t step_ix = STEP ? mlav::flash::step_item_index(p) : 0;
    if (STEP && step_ix < 0)
        return; /* past the step's schedule, or an item past the plan's limits */
    extern __shared__ __align__(16) unsigned char keys_smem[];
    unsigned char *smem = keys_smem;
    const uint32_t base = smem_u32(smem), ring = base + SL::KV;
    mlav::launch_dependents(); /* the combine may launch now; it waits for this grid's end */
    const block_ctx c = block_ctx_of(p.items[STEP ? (uint32_t)step_ix : blockIdx.x], p);
    const lane_ctx l = lane_ctx_of<NR>(smem, base);
    const int32_t *ptab = mlav_page_row_dev(p.page_table, p.page_table_rows,
                                            p.page_table_num_rows, p.max_pages, p.bad_pages, c.b);
    /* tiles 0..AHEAD - 1 gathered with their page ids read here; each later tile's page ids
     * copied into shared memory with the gather AHEAD tiles before the one that reads them */
    const uint32_t row_slot = base + SL::PAGE + (uint32_t)(l.tid >> 2) * 4u; /* its row's */
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + SL::FULL);
    if (l.tid == 0) {
#pragma unroll
        for (int s = 0; s < KSTAGES; s++)
            mbar_init(full + s, 1); /* thread 0's arrive.expect_tx a tile */
        fence_proxy_async();        /* the initialization visible to the copies' complete_tx */
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < AHEAD; t++) {
        if (t < c.n_tiles)
            gather_tile(p, c, tile_row_page(p, c, ptab, t, l.tid), ring, full, t, l.tid);
        if (t + AHEAD < c.n_tiles)
            tile_row_page_async(p, c, ptab, row_slot, t + AHEAD, l.tid);
        cp_async_commit();
    }
    const float unshift =
        load_q_f16<T, NR>(p, c, smem, reinterpret_cast<uint32_t *>(smem + SL::RED), l.tid);

    /* the scores' factors and the output's (score.cuh's score_ctx, over an FP8 cache) */
    score_ctx<Q_TO_F16> score = {1.0f, p.scale_log2};
    const float ks = mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale);
    const mlav::out_scale osc = mlav::out_scale_of(ks);
    if constexpr (Q_TO_F16)
        mlav::fp8_score_factors(unshift, p.scale_log2, ks, score.qa, score.sf);
    else
        score.sf = p.scale_log2 * ks;
    score.template set_factor<true>();

    float o[GROUPS * 4][NTN][4];
#pragma unroll
    for (int i = 0; i < GROUPS * 4; i++)
#pragma unroll
        for (int n = 0; n < NTN; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    float m_run[NTN][2], l_run[NTN][2]; /* rows 8 n + 2 t4 + e: references (log2), sums */
#pragma unroll
    for (int n = 0; n < NTN; n++)
        m_run[n][0] = m_run[n][1] = -INFINITY, l_run[n][0] = l_run[n][1] = 0.0f;

    for (int t = 0; t < c.n_tiles; t++) {
        cp_async_wait<AHEAD - 1>();                  /* this thread's page ids of tile t + AHEAD */
        mbar_wait(full + t % KSTAGES, (uint32_t)(t / KSTAGES) & 1u); /* tile t's bytes */
        __syncthreads(); /* everyone's ids and zeroed rows; and tile t - 1's reads are done */
        if (t + AHEAD < c.n_tiles)
            gather_tile(p, c, lds4(row_slot + (uint32_t)((t + AHEAD) % KSTAGES) * (KT * 4u)),
                        ring, full, t + AHEAD, l.tid);
        if (t + 2 * AHEAD < c.n_tiles)
            tile_row_page_async(p, c, ptab, row_slot, t + 2 * AHEAD, l.tid);
        cp_async_commit();

        const int j_s = c.kv_begin + t * KT + 16 * l.sl; /* the slice's first key */
        float sacc[NTN][4];
        uint32_t kf[GROUPS][4][4]; /* K's latent A fragments: V^T's after movmatrix */
        s_tile<NTN>(sacc, kf, ring + (uint32_t)(t % KSTAGES) * TILE_BYTES, l);
        mask_tile<NTN>(sacc, p, c, j_s, l, score);
        uint32_t pb[NTN][2];
        softmax_tile<NTN>(sacc, o, m_run, l_run, score.k, pb);
        o_tile<NTN>(o, kf, pb, j_s, c.prefix, l);
    }
    cp_async_wait<0>();
    epilogue<T, NR>(p, c, smem, o, m_run, l_run, osc, l);
}

} // namespace keys
} // namespace mlav90

#endif
