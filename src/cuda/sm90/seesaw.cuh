/* The "seesaw" Hopper kernel: the split kernel's contract (kernel.cuh) with 256 threads, two math
 * warpgroups and no producer warpgroup, for any pool of a 16-bit or FP8 E4M3 cache whose launch
 * asks for it (mlav_flash_launch_opts.sm90_seesaw, set by mlav_flash_sm90_seesaw_rule; every
 * other launch keeps kernel.cuh's kernel).
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
 * issued by the warpgroup's thread 0; any other (page_size 1, across pages, the split's last
 * partial tile, a page id outside the pool: the plan's NaN row; every tile of an FP8 cache, raw)
 * is gathered by the refilling warpgroup's 128 threads through kv_row_src (gather.cuh), which do
 * not wait for their copies: each copy's landing is an arrival on its block's barrier. Each
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
 *   Both could be the block's barrier (bar.sync of 256 threads, as in kernel.cuh), and were:
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
 * barriers, as in kernel.cuh's produce.
 * Convergence: a TMA refill is issued by thread 0 alone; its warp reconverges (__syncwarp)
 *   before it goes on: the named barriers after it are bar.sync, .aligned, which every thread
 *   of a warp must execute together.
 * Registers: WG1's P_B V_B takes P_B from registers (pack_a), held until its wait; no
 * accumulator is written while a group is in flight (C7515: ptxas would serialize them; the
 * build reports none). ptxas reports (C7519) a warpgroup arrive injected after each block's wait
 * inside S: a fence, not a wait. */
#ifndef MLAV_CUDA_SM90_SEESAW_CUH
#define MLAV_CUDA_SM90_SEESAW_CUH

#include "kernel.cuh"
#include "score.cuh"

namespace mlav90 {
namespace seesaw {

constexpr int THREADS = 256;
constexpr int WG_THREADS = 128;
constexpr int X_REGS = TILE_N / 2; /* 32 fp32 accumulators of S a thread (m64n64) */
/* named barriers: each warpgroup's own (BAR_WG0 + w, 128 threads), the epilogue's staging */
constexpr int BAR_WG0 = 1, BAR_STAGE0 = 4;
/* the hand-overs between the warpgroups, mbarriers hand[HAND_REF ..]: a pair's four, then an
 * item's two (HAND_END: both warpgroups') */
enum handover { HAND_REF, HAND_M, HAND_PB, HAND_PA, HAND_Q, HAND_END, HANDOVERS };
/* P's slot in a stage: the last column block (K's rope, features 512..575) */
constexpr uint32_t P_SLOT = (uint32_t)(W_BLOCKS - 1) * BLOCK_BYTES;
static_assert(THREADS == MATH_THREADS, "write_output takes two math warpgroups");
static_assert(DL == (W_BLOCKS - 1) * COL_BLOCK, "V is the first 8 column blocks, P's slot the 9th");

/* Regions, byte offsets from the 1024-byte-aligned base: Q and the two stages as kernel.cuh's. */
struct smem_ss {
    static constexpr uint32_t Q = 0;
    static constexpr uint32_t KV = Q + OPERAND_BYTES;
    static constexpr uint32_t REF = KV + STAGES * OPERAND_BYTES; /* [64] fp32: ref0 */
    static constexpr uint32_t MAXM = REF + BM * 4;               /* [64] fp32: M */
    static constexpr uint32_t SUM = MAXM + BM * 4;               /* [2][64] fp32 */
    static constexpr uint32_t BAR = SUM + 2 * BM * 4;            /* full[STAGES][W_BLOCKS] */
    static constexpr uint32_t HAND = BAR + STAGES * W_BLOCKS * 8; /* hand[HANDOVERS] */
    /* BF16 q over an FP8 cache: Q's maximum (q_tile_to_f16's 8 words), its power of two */
    static constexpr uint32_t QRED = HAND + HANDOVERS * 8;
    static constexpr uint32_t Q_UNSHIFT = QRED + 8 * 4;
    static constexpr uint32_t END = Q_UNSHIFT + 8;
    static constexpr uint32_t BYTES = ((END + 15) / 16) * 16 + 1024;
};
static_assert(smem_ss::KV % 1024 == 0 && STAGE_WG_BYTES * 2 <= OPERAND_BYTES,
              "swizzle atoms 1024-aligned; the epilogue's staging in Q's region");
static_assert(smem_ss::BYTES <= 232448, "the sm_90 opt-in limit per block");

/* This warpgroup's own 128-thread barrier (compile-time ids: a computed one makes ptxas reserve
 * all 16). */
__device__ __forceinline__ void wg_barrier(int w)
{
    if (w == 0)
        named_barrier(BAR_WG0, WG_THREADS);
    else
        named_barrier(BAR_WG0 + 1, WG_THREADS);
}

/* Hand-over H from this warpgroup to the other: its shared-memory writes before, released. */
template <handover H> __device__ __forceinline__ void handover_arrive(uint64_t *hand)
{
    mbar_arrive(&hand[H]);
}

/* The other side of hand-over H, in the pair of tiles that starts at tile t (even): the other
 * warpgroup's writes before its arrival, acquired. The wait's loop inside its asm (no branch
 * for the compiler while a P V product is in flight). */
template <handover H> __device__ __forceinline__ void handover_wait(uint64_t *hand, int t)
{
    mbar_wait_flat(&hand[H], (uint32_t)((t / 2) & 1));
}

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
template <typename T, bool WAIT = true, int LEAD = 0>
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
    for (int i = 0; i < W_BLOCKS; i++) {
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

/* What a warpgroup needs to refill a stage, and how a 16-bit cache's copies ask the L2 to keep
 * their lines: L2_FIRST (an instance's, by the plan's rule: mlav_flash_sm90_l2_first) with the
 * evict_first policy `l2`, else plainly. The plain copies are the instance without it, not a
 * branch: with the policy as a launch argument the tensor-bound points took 1.02-1.035x the time
 * on an H100 also where it was off (docs/PERFORMANCE.md#hopper). */
template <bool L2_FIRST> struct feed_ctx {
    const int32_t *ptab;
    const CUtensorMap *map;
    bool tma;    /* the launch holds the pool's map */
    uint64_t l2; /* L2_FIRST: l2_policy_evict_first() */

    __device__ __forceinline__ void copy16(uint32_t dst, const void *src, int src_bytes) const
    {
        if constexpr (L2_FIRST)
            cp_async16_hint(dst, src, src_bytes, l2);
        else
            cp_async16(dst, src, src_bytes);
    }
    __device__ __forceinline__ void tile_block(uint32_t dst, int32_t x, int32_t y,
                                               uint64_t *bar) const
    {
        if constexpr (L2_FIRST)
            tma_load_2d_hint(dst, map, x, y, bar, l2);
        else
            tma_load_2d(dst, map, x, y, bar);
    }
};

/* The column blocks of a stage each refill copies (bit k: block k): V's left half (K's features
 * 0..255), its right half (256..511), and P's slot (K's rope). */
constexpr uint32_t PART_L = 0x00fu, PART_R = 0x0f0u, PART_P = 0x100u, PART_ALL = 0x1ffu;

/* The page ids of the rows a warpgroup's threads gather in the pair of tiles (t, t + 1), one a
 * thread, each in the warp of the threads that gather its row: lane l of warp v holds row
 * 4 v + (l & 3) + 16 ((l >> 2) & 3) of tile t + (l >> 4) (gather_row_id). Looked up a pair
 * ahead, so that a gathered refill (page_size 1: every tile) issues its copies without a
 * dependent load; one register where each row's id would take 8. None where both tiles lie in
 * one page each (kv_tile_in_one_page: refill then takes the tile's first page id). */
__device__ __forceinline__ int32_t pair_row_ids(const int32_t *ptab, const block_ctx &c, int t,
                                                const mlav_flash_params &p, int wt)
{
    const int j0 = c.kv_begin + t * TILE_N;
    if (kv_tile_in_one_page(j0, p) && kv_tile_in_one_page(j0 + TILE_N, p))
        return 0; /* refill takes each tile's first page id: no load */
    const int v = wt >> 5, l = wt & 31;
    const int row = 4 * v + (l & 3) + 16 * ((l >> 2) & 3);
    return kv_page_of(ptab, c.kv_begin + (t + (l >> 4)) * TILE_N + row, c.kv_end, p);
}

/* What a warpgroup looks up a pair ahead for its gathered refills: the page ids
 * (pair_row_ids), or in a GATHER instance each row's source itself (pair_row_srcs). */
template <typename Kv, bool GATHER>
using row_ids_t = std::conditional_t<GATHER, const Kv *, int32_t>;

/* A GATHER instance's pair_row_ids: each row's source (kv_row_src: its page's slot, the NaN row,
 * or for a row past kv_end row 0, not read), so that a refill's rows need no address arithmetic
 * of their own: looked up under the pair's products, the dependent steps from the page id's load
 * to the 64-bit product wait there instead of in the refill (docs/PERFORMANCE.md#hopper). */
template <typename Kv>
__device__ __forceinline__ const Kv *pair_row_srcs(const int32_t *ptab, const block_ctx &c, int t,
                                                   const mlav_flash_params &p, int wt)
{
    const int v = wt >> 5, l = wt & 31;
    const int j = c.kv_begin + (t + (l >> 4)) * TILE_N + 4 * v + (l & 3) + 16 * ((l >> 2) & 3);
    return kv_row_src(static_cast<const Kv *>(p.kv), kv_page_of(ptab, j, c.kv_end, p), j,
                      j < c.kv_end, p);
}

/* The look-up of an instance's kind (row_ids_t) for the pair at tile t. */
template <typename Kv, bool GATHER>
__device__ __forceinline__ row_ids_t<Kv, GATHER> pair_rows(const int32_t *ptab, const block_ctx &c,
                                                           int t, const mlav_flash_params &p,
                                                           int wt)
{
    if constexpr (GATHER)
        return pair_row_srcs<Kv>(ptab, c, t, p, wt);
    else
        return pair_row_ids(ptab, c, t, p, wt);
}

/* Row i's source of gather thread wt in tile k of the pair (pair_row_srcs), from its lane. */
template <typename Kv>
__device__ __forceinline__ const Kv *gather_row_src(const Kv *srcs, int k, int i, int wt)
{
    const int lane = ((wt & 31) >> 3) | (i << 2) | (k << 4);
    const uint64_t a = reinterpret_cast<uint64_t>(srcs);
    const uint32_t lo = __shfl_sync(0xffffffffu, (uint32_t)a, lane);
    const uint32_t hi = __shfl_sync(0xffffffffu, (uint32_t)(a >> 32), lane);
    return reinterpret_cast<const Kv *>(((uint64_t)hi << 32) | lo);
}

/* The page id of gather thread wt's row i (row wt / 8 + 16 i: gather.cuh's mapping) in tile k
 * (0, 1) of the pair whose ids are `ids` (pair_row_ids), from the lane that holds it. */
__device__ __forceinline__ int32_t gather_row_id(int32_t ids, int k, int i, int wt)
{
    return __shfl_sync(0xffffffffu, ids, ((wt & 31) >> 3) | (i << 2) | (k << 4));
}

/* The column blocks MASK of tile t of the item (tile k of its pair) into `stage` by a
 * warpgroup (thread wt of 128), each published on its own barrier of `full` (the stage's 9, 128
 * arrivals a phase):
 *   by TMA where kv_tile_by_tma allows (a 16-bit cache under the pool's map; the answer the
 *   same in every thread and for every part: `page0`, the page id of the tile's first row,
 *   looked up by the caller ahead), thread 0 arriving with a block's bytes expected then
 *   copying it (its expect_tx and the phase's 128 arrivals at once), its warp reconverged
 *   after;
 *   else gathered (gather.cuh's mapping, each row's page id `page0` in a tile inside one page,
 *   else from `ids`: gather_row_id): each thread's copies, then its cp_async_arrive_on of each
 *   block (one of the phase's 128 arrivals, made when its copies land). No thread waits for a
 *   copy: the tile's readers do (s_issue_full, or fp8_tile_ready), as they wait for TMA. An FP8
 *   cache's tiles are always gathered, raw (gather.cuh: a row's raw chunk l + 8 k into column
 *   block 2 k + 1, the fifth into the last), and made F16 by fp8_tile_ready. */
template <typename Kv, uint32_t MASK, bool GATHER = false, typename Feed>
__device__ __forceinline__ void refill(const mlav_flash_params &p, const block_ctx &c,
                                       const Feed &f, uint32_t stage, uint64_t *full, int t,
                                       int wt, int32_t page0, row_ids_t<Kv, GATHER> ids, int k)
{
    constexpr bool FP8 = fp8_kv<Kv>;
    static_assert(!FP8 || ((MASK ^ (MASK >> 1)) & 0x55u) == 0,
                  "an FP8 raw chunk k lands in block 2 k + 1 and becomes F16 in 2 k and 2 k + 1: "
                  "parts of whole pairs");
    const int j0 = c.kv_begin + t * TILE_N;
    if constexpr (!FP8 && !GATHER) {
        if (f.tma && kv_tile_by_tma(page0, j0, c.kv_end, p)) {
            if (wt == 0) {
                const int32_t y = page0 * p.page_size + (int32_t)kv_slot_of(j0, p);
#pragma unroll
                for (int kb = 0; kb < W_BLOCKS; kb++)
                    if (MASK >> kb & 1u) {
                        mbar_arrive_expect_tx_n(&full[kb], BLOCK_BYTES, WG_THREADS);
                        f.tile_block(stage + (uint32_t)kb * BLOCK_BYTES, kb * COL_BLOCK, y,
                                     &full[kb]);
                    }
            }
            __syncwarp();
            return;
        }
    }
    const uint32_t d0 = FP8 ? gather_dst_fp8(stage, wt) : gather_dst(stage, wt);
    const bool one_page = kv_tile_in_one_page(j0, p); /* every row's page id: page0 */
    /* GATHER (a 16-bit cache without the map of tiles: every tile gathered, page_size 1 among
     * them): each row's source from the lane that looked it up a pair ahead (pair_row_srcs),
     * the rows unrolled so that their shuffles overlap; elsewhere (a pool under the map, whose
     * gathered tiles are the few partial ones; an FP8 cache, whose instances spill more
     * unrolled) a row at a time from its page id, as unrolled those instances ran slower
     * (docs/PERFORMANCE.md#hopper) */
#pragma unroll((FP8 || !GATHER) ? 1 : ROWS_PER_THREAD)
    for (int i = 0; i < ROWS_PER_THREAD; i++) {
        const int j = j0 + wt / ROW_LANES + ROW_STEP * i;
        const bool live = j < c.kv_end;
        const int bytes = live ? 16 : 0;
        int32_t page = 0;
        if constexpr (!GATHER)
            page = one_page ? page0 : gather_row_id(ids, k, i, wt);
        const uint32_t d = d0 + (uint32_t)(i * ROW_STEP) * 128u;
        if constexpr (GATHER) {
            const Kv *src = gather_row_src(ids, k, i, wt) + (wt % ROW_LANES) * 8;
#pragma unroll
            for (int kb = 0; kb < W_BLOCKS; kb++)
                if (MASK >> kb & 1u)
                    f.copy16(d + (uint32_t)kb * BLOCK_BYTES, src + kb * COL_BLOCK, bytes);
        } else if constexpr (FP8) {
            const uint8_t *src = kv_row_src(static_cast<const uint8_t *>(p.kv), page, j, live, p) +
                                 (wt % ROW_LANES) * 16;
#pragma unroll
            for (int kk = 0; kk < RAW_LANE_CHUNKS; kk++)
                if (MASK >> (2 * kk) & 1u)
                    cp_async16(d + (uint32_t)(2 * kk) * BLOCK_BYTES, src + kk * ROW_LANES * 16,
                               bytes);
            if ((MASK >> (W_BLOCKS - 1) & 1u) && fp8_fifth(wt))
                cp_async16(gather_dst_fp8_fifth(stage, wt) + (uint32_t)(i * ROW_STEP) * 128u,
                           src + RAW_LANE_CHUNKS * ROW_LANES * 16, bytes);
        } else {
            const Kv *src = kv_row_src(static_cast<const Kv *>(p.kv), page, j, live, p) +
                            (wt % ROW_LANES) * 8;
#pragma unroll
            for (int kb = 0; kb < W_BLOCKS; kb++)
                if (MASK >> kb & 1u)
                    f.copy16(d + (uint32_t)kb * BLOCK_BYTES, src + kb * COL_BLOCK, bytes);
        }
    }
    /* each block's previous phase (tile t - 2's), complete long since (its readers waited for
     * it before the hand-over this refill follows), waited here too: so that each arriving
     * thread has seen the phase it arrives after itself (compute-sanitizer's synccheck asks
     * for it; it costs a test a block) */
    if (t >= STAGES) {
#pragma unroll
        for (int kb = 0; kb < W_BLOCKS; kb++)
            if (MASK >> kb & 1u)
                mbar_wait_flat(&full[kb], (uint32_t)(((t - STAGES) / STAGES) & 1));
    }
#pragma unroll
    for (int kb = 0; kb < W_BLOCKS; kb++)
        if (MASK >> kb & 1u)
            cp_async_arrive_on(&full[kb]);
}

/* The first column block of a part's mask (s_issue_full's LEAD: a warpgroup's own refill). */
constexpr int first_block(uint32_t mask)
{
    int k = 0;
    while (!(mask >> k & 1u))
        k++;
    return k;
}

/* An FP8 cache's tile t of the item asked of the L2 a pair before its refill, by one bulk prefetch
 * from thread 0 of the warpgroup that will refill it (`page`: the page id of its first row,
 * looked up under the pair's products), where the tile lies in one page, before kv_end, inside
 * the pool (kv_tile_by_tma's condition: its 36,864 bytes contiguous). An FP8 tile's refill is
 * issued the moment its stage frees and its owner waits for the whole tile before converting
 * it, so part of each tile's DRAM latency sat on the pair's path: on the H200 the FP8 instances
 * took 0.993x the time with the prefetch over the harness's 120 shapes, 0.974-0.977x at B 16,
 * q_len 1, 131k (docs/PERFORMANCE.md#hopper). A 16-bit tile's twice the bytes keep its loop
 * bound by bandwidth, where the seesaw's L2 prefetch cost time. */
template <typename Kv>
__device__ __forceinline__ void prefetch_fp8_tile(const mlav_flash_params &p, const block_ctx &c,
                                                  int t, int32_t page, int wt)
{
    const int j0 = c.kv_begin + t * TILE_N;
    if (wt == 0 && t < c.n_tiles && kv_tile_by_tma(page, j0, c.kv_end, p))
        prefetch_l2(kv_row_src(static_cast<const Kv *>(p.kv), page, j0, true, p),
                    (uint32_t)(TILE_N * W * sizeof(Kv)));
    __syncwarp();
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

/* WG0: tile A of each pair, output columns [0, 256). */
template <typename T, typename Kv, bool GATHER, bool CLEAN, typename Score, typename Feed>
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
    for (int t = t_begin; t < t_end; t += 2) {
        const bool has_b = CLEAN || t + 1 < c.n_tiles;
        float x[X_REGS];
        s_of_tile<T, Kv, 0>(x, sq, sa, full_a, t, wt);
        wgmma_wait<0>();
        fence_regs(x);
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
        const int32_t pg2 =
            GATHER ? 0 : kv_page_of(f.ptab, c.kv_begin + (t + 2) * TILE_N, c.kv_end, p);
        const int32_t pg3 =
            GATHER ? 0 : kv_page_of(f.ptab, c.kv_begin + (t + 3) * TILE_N, c.kv_end, p);
        const row_ids_t<Kv, GATHER> ids = pair_rows<Kv, GATHER>(f.ptab, c, t + 2, p, wt);
        const int32_t pg4 =
            fp8_kv<Kv> ? kv_page_of(f.ptab, c.kv_begin + (t + 4) * TILE_N, c.kv_end, p) : 0;
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
            wgmma_wait<0>();
            fence_regs(o);
        }
        /* stage 1's blocks 0..3 and P's slot: their last readers, this warpgroup's P_B V_B and
         * WG1's S_B (before PB), completed; WG1 multiplies P_B from registers. Out of the block
         * above: inside it, ptxas spilled. */
        if (t + 3 < c.n_tiles)
            refill<Kv, PART_L | PART_P, GATHER>(p, c, f, sb, full_b, t + 3, wt, pg3, ids, 1);
    }
}

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
        const int32_t pg2 =
            GATHER ? 0 : kv_page_of(f.ptab, c.kv_begin + (t + 2) * TILE_N, c.kv_end, p);
        const int32_t pg3 =
            GATHER ? 0 : kv_page_of(f.ptab, c.kv_begin + (t + 3) * TILE_N, c.kv_end, p);
        const row_ids_t<Kv, GATHER> ids = pair_rows<Kv, GATHER>(f.ptab, c, t + 2, p, wt);
        const int32_t pg5 =
            fp8_kv<Kv> ? kv_page_of(f.ptab, c.kv_begin + (t + 5) * TILE_N, c.kv_end, p) : 0;
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

/* The kernel; STEP as kernel.cuh's flash_sm90_kernel. Kv: the cache's element type (T, or
 * __nv_fp8_e4m3: every tile gathered raw and made F16 by its owner, BF16 q made F16 by WG0 in the
 * prologue, the scale as kernel.cuh applies it; or e4m3_staged, an FP8 cache's pages staged as
 * F16 before the launch: its tiles as a 16-bit cache's, q and the scale as FP8's). A 16-bit
 * cache's tile goes by TMA where the launch holds the pool's map (kv_tma) and the tile allows,
 * else it is gathered. GATHER: the instance of a 16-bit cache's launch without the map (its
 * gather's rows unrolled: refill). L2_FIRST: a 16-bit cache's copies under the L2 evict_first
 * policy (feed_ctx). */
template <typename T, typename Kv, bool STEP, bool GATHER = false, bool L2_FIRST = false>
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
    f.l2 = L2_FIRST ? l2_policy_evict_first() : 0;
    /* tiles 0 and 1: their first rows' page ids, and the rows' ids of the pair */
    const int32_t pg0 = GATHER ? 0 : kv_page_of(f.ptab, c.kv_begin, c.kv_end, p);
    const int32_t pg1 = GATHER ? 0 : kv_page_of(f.ptab, c.kv_begin + TILE_N, c.kv_end, p);
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

    /* the scores' factors and the output's (kernel.cuh's consume) */
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
     * top of the mask as bits (kernel.cuh's mask_scores; 0.986x alone). An FP8 cache has no
     * GATHER instance (static_assert above). docs/PERFORMANCE.md#hopper. */
    const int t_clean = GATHER ? clean_tiles(c) & ~1 : 0;
    if (w == 0) {
        if constexpr (GATHER)
            wg0_pairs<T, Kv, GATHER, true>(p, c, smem, base, full, f, o, m_run, l_run, wt, score,
                                           0, t_clean);
        wg0_pairs<T, Kv, GATHER, false>(p, c, smem, base, full, f, o, m_run, l_run, wt, score,
                                        t_clean, c.n_tiles);
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
 * every tile (gather: the GATHER instance) and an L2 policy (L2_FIRST), as a kernel address:
 * launch_sm90.cu compiles the plain ones, instances_l2first.cu the evict_first ones. */
template <typename T, bool L2_FIRST> const void *instance_16bit(bool step, bool gather)
{
    if (gather)
        return step ? reinterpret_cast<const void *>(
                          &flash_sm90_seesaw_kernel<T, T, true, true, L2_FIRST>)
                    : reinterpret_cast<const void *>(
                          &flash_sm90_seesaw_kernel<T, T, false, true, L2_FIRST>);
    return step ? reinterpret_cast<const void *>(
                      &flash_sm90_seesaw_kernel<T, T, true, false, L2_FIRST>)
                : reinterpret_cast<const void *>(
                      &flash_sm90_seesaw_kernel<T, T, false, false, L2_FIRST>);
}

} // namespace seesaw
} // namespace mlav90

#endif
