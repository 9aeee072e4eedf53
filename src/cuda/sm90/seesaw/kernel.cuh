/* The "seesaw" Hopper kernel: the split kernel's contract (sm90/kernel.cuh) with 256 threads, two
 * math warpgroups and no producer warpgroup, for any pool of a 16-bit or FP8 E4M3 cache whose
 * launch asks for it (mlav_flash_launch_opts.sm90_seesaw, set by mlav_flash_sm90_seesaw_rule;
 * every other launch keeps sm90/kernel.cuh's kernel). Its stages are this folder's files:
 * traits.cuh, sync.cuh, refill.cuh, s_product.cuh, softmax.cuh, wg0.cuh and wg1.cuh.
 *
 * The item's tiles go in pairs: tile A = 2i in stage 0, tile B = 2i + 1 in stage 1 (a last pair
 * of one tile has no B). WG0 owns A and output columns [0, 256), WG1 owns B and [256, 512):
 *   WG0: S_A = Q K_A^T (m64n64k16, the whole tile), its scores and row maxima, ref0 = the
 *        reference after A (the RESCALE_SLACK rule from the running one); O_L and its row sums
 *        rescaled to ref0, P_A into the P slot of stage 0, O_L += P_A V_A[:, 0:256]; then, with
 *        the pair's final reference M from WG1, O_L, its sums and P_A rescaled to M (P_A
 *        rewritten in its slot for WG1), and O_L += P_B V_B[:, 0:256].
 *   WG1: S_B = Q K_B^T, M = the reference after B from ref0; O_R and its sums rescaled to M,
 *        O_R += P_B V_B[:, 256:512] with P_B from registers (register-A wgmma: issued before
 *        P_B is stored, with no barrier of the warpgroup before it), P_B into the P slot of
 *        stage 1 for WG0; O_R += P_A V_A[:, 256:512].
 * So WG0's softmax of A runs under WG1's S_B and WG1's softmax under WG0's P V, and both keep
 * the same reference per row as main's kernel after every tile (the same rule, applied to A then
 * B), so the row sums of each warpgroup's own keys meet in the shared epilogue (write_output).
 * Scores: where one factor scales them (every instance but BF16 q over an FP8 cache) they stay
 * raw through the mask and the row maxima, which are then scaled (the same values: rounding is
 * monotone), and exponentiate applies the factor in its one FFMA a score (score_ctx); on the H200
 * 0.991x the time of scaling each score first (docs/PERFORMANCE.md#hopper). A softmax_scale
 * <= 0 (raw maxima that are the scaled minima, or a factor of 0) runs the producer kernel
 * (the plan's rule: mlav_flash_sm90_seesaw_rule).
 * Loops: a GATHER instance runs the block's leading pairs whose tiles hide no key (clean_tiles)
 * in a loop of their own, without the mask and V's sanitizing (CLEAN), then the rest in the
 * masked loop; the other instances run every pair in the masked loop (why: at the call).
 *
 * P's slot: a stage's last column block (K's features 512..575, read only by the S product of
 * that stage's owner): once S of the tile has completed it is free until the stage's refill, so
 * each pair has two P tiles without shared memory beyond Q and the two stages. P_A is read from
 * it by both warpgroups, P_B by WG0 only.
 *
 * Refill: no producer; each part of a stage is refilled by the warpgroup that is its last
 * reader, the moment that reader's wgmma has completed (refill, PART_*):
 *   stage 0, blocks 0..3 (V_A[:, 0:256]): read by WG0 only (S_A, P_A V_A); WG0 refills them with
 *     tile A + 2 once its P_A V_A has completed and P_A is handed over (hand-over PA).
 *   stage 0, blocks 4..8 (V_A[:, 256:512], P's slot): last read by WG1's P_A V_A (WG0's S_A and
 *     P_A V_A completed before PA); WG1 refills them after it.
 *   stage 1, blocks 4..7 (V_B[:, 256:512]): read by WG1 only (S_B, P_B V_B); WG1 refills them
 *     after its P_B V_B.
 *   stage 1, blocks 0..3 and 8 (V_B[:, 0:256], P_B): read by WG1's S_B (completed before
 *     hand-over PB) and WG0's P_B V_B; WG0 refills them after the latter.
 * A tile inside one page, the split and the pool of a launch that holds the pool's tensor map
 * (kv_tile_by_tma, the same answer in both warpgroups) goes by TMA, a box per column block
 * issued by one lane of the warpgroup's warp 0 chosen by elect.sync (refill says why); any
 * other (page_size 1, across pages, the split's last partial tile, a page id outside the pool:
 * the plan's NaN row; every tile of an FP8 cache, raw) is gathered by the refilling
 * warpgroup's 128 threads through kv_row_src (gather.cuh), which do not wait for their copies:
 * each copy's landing is an arrival on its block's barrier. Each
 * warpgroup looks up the page ids of the next pair's tiles (the first rows', and where a tile
 * crosses pages each row's, one a thread: pair_row_ids; in a GATHER instance each row's source,
 * pair_row_srcs) at the top of a pair, so that its refills issue without a dependent load. An
 * FP8 tile is made F16 in place by its owner once it has landed (fp8_tile_ready), before its S.
 * No L2 prefetch of a 16-bit cache's tiles: asking the L2 for the tile after next cost time
 * nearly everywhere (on the H200 its removal took 0.95x the time over 56 points, 0.86x at B 16,
 * q_len 1, 131k; docs/PERFORMANCE.md#hopper); an FP8 cache's tiles, half the bytes, are asked
 * for a pair ahead (prefetch_fp8_tile).
 *
 * Barriers.
 *   full[s][k] (mbarriers; stage s, column block k; 128 arrivals a phase): a TMA block: thread
 *     0's expect_tx of its 8,192 bytes and 128 arrivals at once, then its copy, the phase
 *     completing when they land; a gathered part: each of the refilling warpgroup's 128 threads
 *     arrives through cp.async.mbarrier.arrive.noinc, the hardware's arrival when that thread's
 *     copies have landed (cp_async_arrive_on). Those copies are generic-proxy writes, so the S
 *     reader fences (fence.proxy.async) after each block's wait, for wgmma's reads; the sanitizing
 *     and the FP8 conversion read them generically after the wait. Stage s holds tiles s, s + 2,
 *     ...: pair i waits for parity i & 1. S of a tile waits block by block (s_issue_full), so it
 *     starts with the first block landed (WG1's with block 4, its own refill's first); P V reads
 *     only blocks its S already waited for. WG0 waits on full[0][*], WG1 on full[1][*]; a
 *     gathering thread also waits for the block's previous phase (complete: the hand-overs order
 *     it) before it arrives.
 *   Hand-overs (mbarriers hand[], count 128): every thread of one warpgroup arrives (release,
 *   no wait), every thread of the other waits (acquire) for the phase of parity pair & 1; once
 *   a pair each:
 *     REF   WG0 arrives after writing ref0 (sref); WG1 waits, then reads it.
 *     M     WG1 arrives after writing M (smax_m); WG0 waits, then reads it.
 *     PB    WG1 arrives after writing P_B and (hidden keys) sanitizing V_B, and its proxy
 *           fence; WG0 waits before O_L += P_B V_B. Only in pairs with a tile B.
 *     PA    WG0 arrives after its O_L += P_A V_A completed, P_A rewritten to M and its proxy
 *           fence (V_A sanitized before, under the same fence); WG1 waits before
 *           O_R += P_A V_A.
 *   (PB is skipped only in an item's last pair, so pair i is its use i too.) A parity
 *   wait would miss a phase that two completions have passed, so each arrival of use i + 1 must
 *   follow every waiter's wait of use i. It does, thread by thread: REF(i + 1) arrivals follow
 *   the arriving thread's wait of M(i), whose phase completes only once each WG1 thread, after
 *   its REF(i) wait, has arrived; M(i + 1) follows WG1's wait of PA(i), each WG0 thread arriving
 *   at PA(i) after its M(i) wait; PA(i + 1) follows WG0's wait of M(i + 1), each WG1 thread
 *   arriving at M(i + 1) after its PA(i) wait; PB(i + 1) follows WG1's wait of REF(i + 1), each
 *   WG0 thread arriving at REF(i + 1) after its PB(i) wait. The
 *   shared values: sref is rewritten by WG0 after its wait of M(i), which WG1 arrives at after
 *   reading sref; smax_m by WG1 after its wait of PA(i), which WG0 arrives at after reading
 *   smax_m. Named barriers (bar.arrive on one side, bar.sync on the other) did the same and
 *   took 1.01x the time; compute-sanitizer's racecheck does not follow bar.arrive's ordering
 *   and reported the sref hand-over as a hazard, which it does not with mbarriers.
 *   Once an item each, also mbarriers:
 *     Q     WG0 arrives after BF16 q over an FP8 cache is made F16 and its power of two written
 *           (Q_UNSHIFT); WG1 waits before it reads the power of two. Only those instances.
 *     END   every thread of both warpgroups (count 256) arrives once its last wgmma has
 *           completed and its row sums are written, and waits: write_output's meeting.
 *   Both could be the block's barrier (bar.sync of 256 threads, as in sm90/kernel.cuh), and were:
 *   racecheck then reported the row sums and the power of two as hazards, with every output
 *   right and synccheck clean. It pairs a block barrier's passes by each thread's count of
 *   barriers passed: the warpgroups pass different numbers of their own below (WG0 two a pair,
 *   WG1 one), and with counts equal the same exchange reports nothing
 *   (bench/diag/racecheck_epochs.cu, run on the H200: docs/PERFORMANCE.md#hopper).
 *   BAR_WG0, BAR_WG1 (128 threads, one warpgroup): WG0's P_A stores before its own wgmma reads
 *     them, and every warp's reads of P_A completed before P_A's rewrite; WG1's sanitizing of
 *     V_B (a tile with hidden keys) before its P_B V_B; an FP8 tile's conversion before
 *     its S (fp8_tile_ready); BF16 q's maximum over an FP8 cache (q_tile_to_f16, WG0's).
 *     BAR_STAGE0 (+1): the epilogue's staging (write_output).
 * Proxies: P, sanitized V and a converted FP8 tile are generic writes read by wgmma (async
 * proxy): each writer fences (fence.proxy.async) before the barrier its readers pass. A refill's
 * writes (TMA: async; gather: generic, fenced by their S reader after its wait) come after the
 * part's last reads completed (wgmma_wait of the reading warpgroups, ordered by the barriers
 * above) and after the generic writes to it (P, sanitizing, conversion), fenced before those
 * barriers, as in sm90/kernel.cuh's produce.
 * Convergence: a TMA refill is issued by one elected lane alone; its warp reconverges
 *   (__syncwarp) before it goes on: the named barriers after it are bar.sync, .aligned, which
 *   every thread of a warp must execute together.
 * Registers: WG1's P_B V_B takes P_B from registers (pack_a), held until its wait; no
 * accumulator is written while a group is in flight (C7515: ptxas would serialize them; the
 * build reports none). ptxas reports (C7519) a warpgroup arrive injected after each block's wait
 * inside S: a fence, not a wait. */
#ifndef MLAV_CUDA_SM90_SEESAW_KERNEL_CUH
#define MLAV_CUDA_SM90_SEESAW_KERNEL_CUH

#include "wg0.cuh"
#include "wg1.cuh"

namespace mlav90 {
namespace seesaw {

/* The kernel; STEP as sm90/kernel.cuh's flash_sm90_kernel. Kv: the cache's element type (T, or
 * __nv_fp8_e4m3: every tile gathered raw and made F16 by its owner, BF16 q made F16 by WG0 in the
 * prologue, the scale as sm90/kernel.cuh applies it; or e4m3_staged, an FP8 cache's pages staged as
 * F16 before the launch: its tiles as a 16-bit cache's, q and the scale as FP8's). A 16-bit
 * cache's tile goes by TMA where the launch holds the pool's map (kv_tma) and the tile allows,
 * else it is gathered. GATHER: the instance of a 16-bit cache's launch without the map (its
 * gather's rows unrolled: refill). L2_FIRST: a 16-bit cache's copies under the L2 evict_first
 * policy (feed_ctx). EARLY_S: a 16-bit cache's WG0 issuing each pair's S_A in the pair before
 * (wg0_pairs). */
template <typename T, typename Kv, bool STEP, bool GATHER = false, bool L2_FIRST = false,
          bool EARLY_S = false>
__global__ void __launch_bounds__(THREADS, 1)
    flash_sm90_seesaw_kernel(const mlav_flash_params p, const __grid_constant__ CUtensorMap kv_map,
                             const int kv_tma)
{
    /* FP8: raw 8-bit tiles, converted here; SCALED: those or a staged cache's F16 tiles, with
     * the FP8 cache's scale and BF16 q made F16 */
    constexpr bool FP8 = fp8_kv<Kv>, SCALED = scaled_kv<Kv>;
    constexpr bool Q_TO_F16 = SCALED && !std::is_same<T, __half>::value;
    static_assert(!GATHER || !SCALED, "GATHER: a 16-bit cache's instance");
    static_assert(!L2_FIRST || !SCALED, "L2_FIRST: a 16-bit cache's instance");
    static_assert(!EARLY_S || !SCALED, "EARLY_S: a 16-bit cache's instance");
    const int32_t step_ix = STEP ? mlav::flash::step_item_index(p) : 0;
    if (STEP && step_ix < 0)
        return; /* past the step's schedule, or an item past the plan's limits */
    unsigned char *smem = smem_base();
    const uint32_t base = smem_u32(smem);
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + smem_ss::BAR);
    uint64_t *hand = full + STAGES * W_BLOCKS; /* smem_ss::HAND */
    mlav::launch_dependents(); /* the combine may launch now; it waits for this grid's end */
    const mlav_split_item item = p.items[STEP ? (uint32_t)step_ix : blockIdx.x];
    const int tid = threadIdx.x;
    const int w = __shfl_sync(0xffffffffu, tid / WG_THREADS, 0); /* warp-uniform */
    const int wt = tid - WG_THREADS * w;
    const bool tma = !FP8 && kv_tma != 0;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES * W_BLOCKS; s++)
            mbar_init(&full[s], WG_THREADS); /* each refilling thread, or thread 0 for all */
#pragma unroll
        for (int h = 0; h < HANDOVERS; h++) /* each arriving thread */
            mbar_init(&hand[h], h == HAND_END ? THREADS : WG_THREADS);
        fence_proxy_async(); /* the initialization visible to the TMA copies' complete_tx */
        if (tma)
            tensormap_prefetch(&kv_map);
    }
    __syncthreads();
    const block_ctx c = block_ctx_of(item, p);
    prefetch_draft_words(p, c, 16 * (wt >> 5) + ((wt & 31) >> 2)); /* mask_scores' rows */
    feed_ctx<L2_FIRST> f;
    f.ptab = mlav_page_row_dev(p.page_table, p.page_table_rows, p.page_table_num_rows,
                               p.max_pages, p.bad_pages, c.b);
    f.map = &kv_map;
    f.tma = tma;
    f.lead = __shfl_sync(0xffffffffu, wt >> 5, 0) == 0;
    f.l2 = L2_FIRST ? l2_policy_evict_first() : 0;
    /* tiles 0 and 1: their first rows' page ids, and the rows' ids of the pair */
    const int32_t pg0 = tile_page<GATHER>(f.ptab, c, 0, p);
    const int32_t pg1 = tile_page<GATHER>(f.ptab, c, 1, p);
    const row_ids_t<Kv, GATHER> ids = pair_rows<Kv, GATHER>(f.ptab, c, 0, p, wt);
    /* the prologue: Q by WG0 (then its copies landed, BF16 q over an FP8 cache made F16, and
     * fenced), tile 0 by WG0, tile 1 by WG1; the block barrier hands Q to both */
    if (w == 0) {
        const T *qg = static_cast<const T *>(p.q) + (size_t)c.q_start * p.H * W;
        load_q(base + smem_ss::Q, qg, c.m0, c.M, wt);
        cp_async_commit();
        if (c.n_tiles > 0)
            refill<Kv, PART_ALL, GATHER>(p, c, f, base + smem_ss::KV, full, 0, wt, pg0, ids, 0);
        cp_async_wait<0>();
        if constexpr (Q_TO_F16) {
            const float unshift = q_tile_to_f16<BAR_WG0>(
                base + smem_ss::Q, reinterpret_cast<uint32_t *>(smem + smem_ss::QRED), wt);
            if (wt == 0)
                *reinterpret_cast<float *>(smem + smem_ss::Q_UNSHIFT) = unshift;
            handover_arrive<HAND_Q>(hand);
        }
        fence_proxy_async();
    } else if (c.n_tiles > 1) {
        refill<Kv, PART_ALL, GATHER>(p, c, f, base + smem_ss::KV + OPERAND_BYTES, full + W_BLOCKS,
                                     1, wt, pg1, ids, 1);
    }
    __syncthreads();

    /* the scores' factors and the output's (sm90/kernel.cuh's consume) */
    score_ctx<Q_TO_F16> score = {1.0f, p.scale_log2};
    mlav::out_scale osc = {1.0f, 1.0f, 0};
    if constexpr (SCALED) {
        const float ks = mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale);
        osc = mlav::out_scale_of(ks);
        if constexpr (Q_TO_F16) {
            if (w == 1)
                mbar_wait(&hand[HAND_Q], 0);
            mlav::fp8_score_factors(*reinterpret_cast<const float *>(smem + smem_ss::Q_UNSHIFT),
                                    p.scale_log2, ks, score.qa, score.sf);
        } else {
            score.sf = p.scale_log2 * ks;
        }
    }
    score.template set_factor<SCALED>();
    float o[O_REGS];
#pragma unroll
    for (int i = 0; i < O_REGS; i++)
        o[i] = 0.0f;
    fence_regs(o);
    float m_run[2] = {-INFINITY, -INFINITY}; /* the reference maxima, log2 units */
    float l_run[2] = {0.0f, 0.0f};           /* the row sums of this warpgroup's own tiles */
    /* A GATHER instance (page_size 1 among others) runs the pairs whose tiles hide no key first,
     * in a loop without the mask's and V's sanitizing code, then the rest: on the H200 0.981x
     * the time at page 1 over the harness's 120 shapes (0.960 where H x q_len >= 256 from 32k;
     * up to 1.07x at six 4096 and 32k points). The TMA instances keep one loop: split, they
     * took 1.025x at page 64 (1.5-6 us more at short prefixes; 1.020x still with the clean loop
     * entered only from 32 clean tiles; 0.98 at B 16, H 128, q_len 16, 131k), and 0.997x on
     * top of the mask as bits (sm90/mask.cuh's mask_scores; 0.986x alone). An FP8 cache has no
     * GATHER instance (static_assert above). docs/PERFORMANCE.md#hopper. */
    const int t_clean = GATHER ? clean_tiles(c) & ~1 : 0;
    if (w == 0) {
        if constexpr (GATHER)
            wg0_pairs<T, Kv, GATHER, true, EARLY_S>(p, c, smem, base, full, f, o, m_run, l_run, wt,
                                                    score, 0, t_clean);
        wg0_pairs<T, Kv, GATHER, false, EARLY_S>(p, c, smem, base, full, f, o, m_run, l_run, wt,
                                                 score, t_clean, c.n_tiles);
    } else {
        if constexpr (GATHER)
            wg1_pairs<T, Kv, GATHER, true>(p, c, smem, base, full, f, o, m_run, l_run, wt, score,
                                           0, t_clean);
        wg1_pairs<T, Kv, GATHER, false>(p, c, smem, base, full, f, o, m_run, l_run, wt, score,
                                        t_clean, c.n_tiles);
    }
    uint64_t *end = &hand[HAND_END];
    write_output<T, Kv, BAR_STAGE0>(p, c, smem, o, m_run, l_run, osc,
                                    reinterpret_cast<float *>(smem + smem_ss::SUM), w, wt >> 5,
                                    wt & 31, [end] {
                                        mbar_arrive(end);
                                        mbar_wait(end, 0);
                                    });
}

/* The instance of a 16-bit cache of q's dtype T for a plan kind (step), a launch that gathers
 * every tile (gather: the GATHER instance), an L2 policy (L2_FIRST) and WG0's order (EARLY_S), as
 * a kernel address: launch_sm90.cu compiles the plain ones, instances_l2first.cu the evict_first
 * ones, instances_early.cu and instances_early_l2first.cu those of EARLY_S. */
template <typename T, bool L2_FIRST, bool EARLY_S>
const void *instance_16bit(bool step, bool gather)
{
    if (gather)
        return step ? reinterpret_cast<const void *>(
                          &flash_sm90_seesaw_kernel<T, T, true, true, L2_FIRST, EARLY_S>)
                    : reinterpret_cast<const void *>(
                          &flash_sm90_seesaw_kernel<T, T, false, true, L2_FIRST, EARLY_S>);
    return step ? reinterpret_cast<const void *>(
                      &flash_sm90_seesaw_kernel<T, T, true, false, L2_FIRST, EARLY_S>)
                : reinterpret_cast<const void *>(
                      &flash_sm90_seesaw_kernel<T, T, false, false, L2_FIRST, EARLY_S>);
}

} // namespace seesaw
} // namespace mlav90

#endif
