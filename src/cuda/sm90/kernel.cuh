/* The Hopper split kernel: one block per mlav_split_item (64 folded (token, head) rows, KV rows
 * [kv_begin, kv_end)), 384 threads in three warpgroups.
 *   WG0, the producer (registers given back): Q once, then the KV tiles of 64 keys x 576
 *        through the page table into a 2-stage ring (gather.cuh), each stage published on its
 *        "full" mbarrier (produce); it refills a stage when both math warpgroups have arrived
 *        on its "empty" mbarrier.
 *   WG1, WG2, math warpgroup w = 0, 1 (registers taken): per tile, S for keys [32 w, +32)
 *        (stages.cuh), scale and visibility mask, the row maxima of both halves met through
 *        shared memory (named barrier 1), the online-softmax rescale of O, P of its keys into
 *        the shared P tile (named barrier 2), then O += P V for output columns [256 w, +256).
 *        The next tile's S is issued during this tile's softmax when that tile has landed, so
 *        the tensor cores run it under the softmax (consume).
 * The running reference maximum moves by reference_max.cuh's rule, the same in
 * both warpgroups (both decide from the same two shared values); each keeps the row sums of its
 * own keys, met in the epilogue. The epilogue writes what the legal kernel writes
 * (flash/epilogue.cuh): out and lse for an unsplit item, else the fp16 partial scaled per 128
 * columns by part_scale, with part_lse.
 * An FP8 E4M3 cache (Kv = __nv_fp8_e4m3): the producer converts each tile to F16 in its stage
 * (gather.cuh) and, for BF16 q, the Q tile to F16 times 2^-shift (q_to_f16.cuh), so the products
 * run on F16 operands; the scale is applied as the legal kernel applies it (kv_scale.cuh): the
 * scores take scale_log2 x kv_scale (with BF16 q, and 2^shift, as fp8_score_factors' two
 * factors), the output its mantissa through 1 / l and its power of two at the store (a partial
 * state: in part_scale, fp8_part_scale). */
#ifndef MLAV_CUDA_SM90_KERNEL_CUH
#define MLAV_CUDA_SM90_KERNEL_CUH

#include "mask.cuh"
#include "write_output.cuh"

namespace mlav90 {

constexpr int THREADS = 384;
/* 128 x 56 + 256 x 224 = 384 x 168, the block's registers (the producer's 4 page ids and row
 * addresses a tile spilled at 40) */
constexpr int PRODUCER_REGS = 56;
constexpr int MATH_REGS = 224;
/* named barriers: of the two math warpgroups (1, 2), and of each math warpgroup alone (3, 4) */
constexpr int BAR_MAX = 1, BAR_P = 2, BAR_EPILOGUE0 = 3;
/* of the producer warpgroup (BF16 q over an FP8 cache: Q's maximum, q_tile_to_f16) */
constexpr int BAR_PRODUCER = 5;
static_assert(PRODUCER_THREADS * PRODUCER_REGS + MATH_THREADS * MATH_REGS <= 65536,
              "the register file");

/* How a block's producer feeds the ring, each its own instance of produce (a path compiled in
 * costs the others: the TMA path cost gathered tiles 4% at q_len 1 (up to 14%), the early
 * page-id lookup 1-3% at page_size 1, both measured on the H200):
 *   late_ids: gathered, tile t + 3's page ids looked up after tile t + 2's gather (an FP8 cache,
 *             pages of fewer than 64 rows);
 *   gather:   gathered, those ids looked up before the wait for a free stage (pages of 64 rows
 *             or more);
 *   tma:      as gather, and whole tiles inside one page by TMA (a 16-bit cache under a tensor
 *             map, a request of more than 64 rows, whose tiles several blocks read). */
enum class feed { late_ids, gather, tma };

/* WG0: Q, then every KV tile of the item into the 2-stage ring. Each thread tracks its own
 * copies as cp.async groups (Q, then a group per tile) and publishes a stage itself once they
 * have landed (publish_copies: the writer's proxy fence, then its arrival on the stage's "full"
 * barrier, 128 arrivals a phase). Tile t + 1 is published as soon as it lands, before the
 * producer waits for the math warpgroups to release tile t's stage and gathers tile t + 2 into
 * it: so the math warpgroups never wait for a gather issue, and each tile is gathered one tile
 * time ahead of its use. An FP8 cache: each thread converts its chunks of a tile to F16 in place
 * once they have landed, before it publishes the stage (fp8_convert_tile); BF16 q over it: the
 * Q tile to F16 before Q is published, its power of two left at smem90::Q_UNSHIFT.
 * A 16-bit cache whose launch holds the pool's tensor map (`kv_tma`, MLAV90_TMA), in a block of a
 * request of more than 64 rows (feed::tma): a tile inside one page and the split is copied by
 * TMA instead (kv_tile_by_tma, the same answer in every producer thread), which publishes it as
 * it is issued: thread 0's arrival expects its bytes, the others' are plain, and the phase
 * completes when the bytes land; such a tile is not published again when its turn comes
 * (tma_next). It still commits a cp.async group, empty, so that the prologue's wait_group counts
 * (Q, tile 0, tile 1) stay those of the gathered tiles.
 * No proxy fence precedes a TMA refill of a stage: what was in it before was read by wgmma
 * (async proxy, complete at the readers' wgmma_wait) or by the sanitizing pass (generic reads,
 * their values consumed), and written by the sanitizing pass (generic, each writer's
 * fence.proxy.async before its P V) or by cp.async (generic, each writer's publish_copies
 * fence) or by TMA (async); every one of those comes before an arrival (release) on the
 * stage's "empty" barrier, or before the "full" arrival the math warpgroups acquired before
 * theirs, and the TMA copy is issued after thread 0's wait (acquire) on it: the proxy fences
 * already stand between the generic accesses and the release, so the chain orders them before
 * the async-proxy writes of the refill. */
template <typename T, typename Kv, feed F>
__device__ __forceinline__ void produce(const mlav_flash_params &p, const block_ctx &c,
                                        uint32_t base, uint64_t *full, uint64_t *empty,
                                        uint64_t *qbar, const CUtensorMap *kv_map, int pt)
{
    const T *qg = static_cast<const T *>(p.q) + (size_t)c.q_start * p.H * W;
    const int32_t *ptab = mlav_page_row_dev(p.page_table, p.page_table_rows,
                                            p.page_table_num_rows, p.max_pages, p.bad_pages, c.b);
    constexpr bool FP8 = fp8_kv<Kv>;
    constexpr bool TMA = F == feed::tma && !FP8 && MLAV90_TMA != 0; /* this instance's TMA path */
    constexpr bool EARLY_IDS = F != feed::late_ids && !FP8;
    using E = std::conditional_t<FP8, uint8_t, T>; /* the unit the gather addresses */
    const E *kv = static_cast<const E *>(p.kv);
    const int n = c.n_tiles;
    int32_t page0[ROWS_PER_THREAD], page1[ROWS_PER_THREAD], page_next[ROWS_PER_THREAD],
        page_after[ROWS_PER_THREAD];
    kv_pages_of(page0, ptab, c.kv_begin, c.kv_end, p, pt);
    kv_pages_of(page1, ptab, c.kv_begin + TILE_N, c.kv_end, p, pt);
    if constexpr (TMA)
        if (pt == 0)
            tensormap_prefetch(kv_map);
    load_q(base + smem90::Q, qg, c.m0, c.M, pt);
    cp_async_commit();
    /* a tile's copy into `stage`: by TMA (published as issued; true returned) or gathered */
    const auto load_tile = [&](uint32_t stage, uint64_t *bar,
                               const int32_t(&pages)[ROWS_PER_THREAD], int j0) {
        if constexpr (TMA) {
            if (kv_tile_by_tma(pages[0], j0, c.kv_end, p)) {
                load_kv_tile_tma(stage, kv_map, bar, pages[0], j0, p, pt);
                cp_async_commit(); /* empty: the group counts stay a gathered tile's */
                return true;
            }
        }
        load_kv_tile(stage, kv, pages, j0, c.kv_end, p, pt);
        cp_async_commit();
        return false;
    };
    static_assert(STAGES == 2, "the prologue fills both stages");
    bool tma0 = false, tma_next = false; /* tiles 0 and t + 1: by TMA, already published */
    if (n > 0)
        tma0 = load_tile(base + smem90::KV, &full[0], page0, c.kv_begin);
    if (n > 1)
        tma_next = load_tile(base + smem90::KV + OPERAND_BYTES, &full[1], page1,
                             c.kv_begin + TILE_N);
    kv_pages_of(page_next, ptab, c.kv_begin + 2 * TILE_N, c.kv_end, p, pt);
    if (n > 1)
        cp_async_wait<2>();
    else if (n == 1)
        cp_async_wait<1>();
    else
        cp_async_wait<0>();
    if constexpr (FP8 && !std::is_same<T, __half>::value) {
        unsigned char *smem = smem_base();
        const float unshift = q_tile_to_f16<BAR_PRODUCER>(
            base + smem90::Q, reinterpret_cast<uint32_t *>(smem + smem90::MAX), pt);
        if (pt == 0)
            *reinterpret_cast<float *>(smem + smem90::Q_UNSHIFT) = unshift;
    }
    publish_copies(qbar);
    if (n > 0 && !tma0) {
        if (n > 1)
            cp_async_wait<1>();
        else
            cp_async_wait<0>();
        if constexpr (FP8)
            fp8_convert_tile<false>(base + smem90::KV, pt);
        publish_copies(&full[0]);
    }
    if (n > 2)
        prefetch_kv_tile(kv, page_next, c.kv_begin + 2 * TILE_N, c.kv_end, p, pt);
    for (int t = 0; t + 1 < n; t++) {
        if (!tma_next) {
            cp_async_wait<0>(); /* tile t + 1 */
            if constexpr (FP8)
                fp8_convert_tile<false>(
                    base + smem90::KV + (uint32_t)((t + 1) % STAGES) * OPERAND_BYTES, pt);
            publish_copies(&full[(t + 1) % STAGES]);
        }
        if (t + 2 < n) {
            const int s = t % STAGES;
            const int j0 = c.kv_begin + (t + 2) * TILE_N;
            /* tile t + 3's page ids, asked for before the wait for a free stage, which hides
             * their latency: looked up after tile t + 2's gather, they held its publication
             * (the prefetch below reads them). Not with an FP8 cache, whose producer has no
             * registers for both tiles' ids across the wait (it spilled), nor over pages of
             * fewer than 64 rows (feed::late_ids) */
            if constexpr (EARLY_IDS)
                kv_pages_of(page_after, ptab, j0 + TILE_N, c.kv_end, p, pt);
            mbar_wait(&empty[s], (uint32_t)((t / STAGES) & 1)); /* tile t's stage is free */
            tma_next = load_tile(base + smem90::KV + (uint32_t)s * OPERAND_BYTES, &full[s],
                                 page_next, j0);
            if constexpr (!EARLY_IDS)
                kv_pages_of(page_after, ptab, j0 + TILE_N, c.kv_end, p, pt);
            /* tile t + 3 to the L2 while tile t + 2 lands */
            if (t + 3 < n)
                prefetch_kv_tile(kv, page_after, j0 + TILE_N, c.kv_end, p, pt);
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; i++)
                page_next[i] = page_after[i];
        }
    }
}

/* WG1 / WG2: the tiles' products and softmax, then the epilogue. */
template <typename T, typename Kv>
__device__ __forceinline__ void consume(const mlav_flash_params &p, const block_ctx &c,
                                        unsigned char *smem, uint32_t base, uint64_t *full,
                                        uint64_t *empty, uint64_t *qbar, int w, int wt)
{
    constexpr bool FP8 = fp8_kv<Kv>, Q_TO_F16 = FP8 && !std::is_same<T, __half>::value;
    using MT = mma_t<T, Kv>;         /* the products' operands: Q, K, P, V */
    using TY = mlav::mma_type<MT>;
    const int warp = wt >> 5, lane = wt & 31, g = lane >> 2, t4 = lane & 3;
    float *smax = reinterpret_cast<float *>(smem + smem90::MAX);
    float *ssum = reinterpret_cast<float *>(smem + smem90::SUM);
    const int r0 = 16 * warp + g; /* this thread's rows: r0 (h = 0) and r0 + 8 (h = 1) */
    prefetch_draft_words(p, c, r0);

    float o[O_REGS];
#pragma unroll
    for (int i = 0; i < O_REGS; i++)
        o[i] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}; /* reference maxima, log2 units */
    float l_run[2] = {0.0f, 0.0f};           /* this thread's keys of its warpgroup's half */
    const uint32_t sq = base + smem90::Q, sp = base + smem90::P;
    const auto stage_of = [&](int t) {
        return base + smem90::KV + (uint32_t)(t % STAGES) * OPERAND_BYTES;
    };
    const auto parity_of = [](int t) { return (uint32_t)((t / STAGES) & 1); };
    /* S of the next tile accumulates in xn while this tile's softmax runs (see the loop) */
    float xn[S_REGS];
#pragma unroll
    for (int i = 0; i < S_REGS; i++)
        xn[i] = 0.0f;
    /* O's zeros are written here, not sunk under the first S group, whose flight a write of
     * another wgmma's accumulators would serialize (C7515) */
    fence_regs(o);
    mbar_wait(qbar, 0);
    /* The scores' factors: scale_log2; FP8: scale_log2 x kv_scale, with BF16 q as the two factors
     * qa, sf of fp8_score_factors (Q's power of two back). The output's: out_scale. */
    [[maybe_unused]] float qa = 1.0f, sf = p.scale_log2;
    [[maybe_unused]] mlav::out_scale osc = {1.0f, 1.0f, 0};
    if constexpr (FP8) {
        const float ks = mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale);
        osc = mlav::out_scale_of(ks);
        if constexpr (Q_TO_F16)
            mlav::fp8_score_factors(*reinterpret_cast<const float *>(smem + smem90::Q_UNSHIFT),
                                    p.scale_log2, ks, qa, sf);
        else
            sf = p.scale_log2 * ks;
    }
    const auto score = [&](float x) {
        if constexpr (Q_TO_F16)
            return x * qa * sf;
        else if constexpr (FP8)
            return x * sf;
        else
            return x * p.scale_log2;
    };
    if (c.n_tiles > 0) {
        mbar_wait(&full[0], parity_of(0)); /* published: publish_copies */
        s_issue<MT>(xn, sq, stage_of(0), w);
    }

    /* Per tile t: S(t) was issued before (in tile t - 1, or above); its scores, the row maxima
     * met through shared memory, O's rescale, P of this half into the P tile, then P V. S(t + 1)
     * is issued right after the rescale when tile t + 1 has landed for every math thread (the
     * maxima barrier's vote), so the tensor cores run it under the rest of this tile's softmax
     * and P V queues behind it; otherwise after P V, so a late tile never holds this one's
     * P V. */
    for (int t = 0; t < c.n_tiles; t++) {
        const int s = t % STAGES;
        const uint32_t stage = stage_of(t);
        wgmma_wait<0>(); /* S(t), and P V (t - 1) */
        fence_regs(xn);
        fence_regs(o);
        if (t > 0)
            mbar_arrive(&empty[(t - 1) % STAGES]); /* both products of tile t - 1 are done */
        float x[S_REGS];
#pragma unroll
        for (int i = 0; i < S_REGS; i++)
            x[i] = xn[i];

        const bool hidden =
            mask_scores(x, p, c, c.kv_begin + t * TILE_N, S_KEYS * w, r0, t4, score);
        /* the row maxima of this half, then of the tile */
        float tm[2];
        fragment_row_max(x, tm);
#pragma unroll
        for (int h = 0; h < 2; h++)
            if (t4 == 0)
                smax[w * BM + r0 + 8 * h] = tm[h];
        const bool next = t + 1 < c.n_tiles;
        const bool landed = next && mbar_test(&full[(t + 1) % STAGES], parity_of(t + 1));
        /* both halves' S done, K read; whether every math thread has seen tile t + 1 land */
        const bool early = named_barrier_and(BAR_MAX, MATH_THREADS, landed);
        if (hidden)
            sanitize_v(smem + smem90::KV + (uint32_t)s * OPERAND_BYTES, TY::exp_mask,
                       hidden_v_rows(c.kv_begin + t * TILE_N, c.prefix, c.kv_end), wt + 128 * w,
                       MATH_THREADS);
        float alpha[2], ref[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + 8 * h;
            const float tile_max = fmaxf(smax[r], smax[BM + r]);
            const float new_max = mlav::next_ref(m_run[h], tile_max);
            alpha[h] = mlav::ref_factor(m_run[h], new_max);
            m_run[h] = new_max;
            ref[h] = new_max == -INFINITY ? 0.0f : new_max; /* no -inf - -inf */
            l_run[h] *= alpha[h];
        }
        /* O moves only when a row's reference does (alpha exactly 1 otherwise), in a warp whose
         * 16 rows all keep theirs the 128 multiplies are skipped */
        if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
            for (int i = 0; i < O_REGS; i++)
                o[i] *= alpha[(i >> 1) & 1];
        }
        /* after O's rescale: with an accumulator written while a wgmma group is in flight,
         * ptxas serializes the wgmmas (C7515) */
        if (early)
            s_issue<MT>(xn, sq, stage_of(t + 1), w);
        float pv[S_REGS];
#pragma unroll
        for (int i = 0; i < S_REGS; i++) {
            pv[i] = mlav::exp2_fast(x[i] - ref[(i >> 1) & 1]);
            l_run[(i >> 1) & 1] += pv[i];
        }
        store_p(smem + smem90::P, pv, S_KEYS * w, warp, lane, TY::pack);
        fence_proxy_async(); /* P (and a sanitized V) for wgmma's reads */
        named_barrier(BAR_P, MATH_THREADS);
        pv_issue<MT>(o, sp, stage, w);
        if (next && !early) {
            mbar_wait(&full[(t + 1) % STAGES], parity_of(t + 1));
            s_issue<MT>(xn, sq, stage_of(t + 1), w);
        }
    }
    wgmma_wait<0>();
    fence_regs(o);

    write_output<T, Kv, BAR_EPILOGUE0>(p, c, smem, o, m_run, l_run, osc, ssum, w, warp, lane,
                                       [] { named_barrier(BAR_MAX, MATH_THREADS); });
}

/* STEP: the instance of plans for limits, whose fixed grid runs past the step's schedule: a
 * block takes its item by the legal STEP instance's rule (mlav::flash::step_item_index: the step
 * header's owner and count, the TPC spread, mlav_step_item_fits) and a block past the step, or
 * whose item lies outside the plan's limits, exits before anything else. */
template <typename T, typename Kv, bool STEP>
__global__ void __launch_bounds__(THREADS, 1)
    flash_sm90_kernel(const mlav_flash_params p, const __grid_constant__ CUtensorMap kv_map,
                      const int kv_tma)
{
    static_assert(!scaled_kv<Kv> || fp8_kv<Kv>, "a staged cache runs the seesaw kernel only");
    const int32_t step_ix = STEP ? mlav::flash::step_item_index(p) : 0;
    if (STEP && step_ix < 0)
        return; /* past the step's schedule, or an item past the plan's limits */
    unsigned char *smem = smem_base();
    const uint32_t base = smem_u32(smem);
    uint64_t *bars = reinterpret_cast<uint64_t *>(smem + smem90::BAR);
    uint64_t *full = bars, *empty = bars + STAGES, *qbar = bars + 2 * STAGES;
    mlav::launch_dependents(); /* the combine may launch now; it waits for this grid's end */
    const mlav_split_item item = p.items[STEP ? (uint32_t)step_ix : blockIdx.x];
    const int tid = threadIdx.x;
    /* through a shuffle, so that ptxas knows the warpgroup index warp-uniform */
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], PRODUCER_THREADS);
            mbar_init(&empty[s], MATH_THREADS);
        }
        mbar_init(qbar, PRODUCER_THREADS);
        /* the barriers' initialization (generic proxy) visible to the TMA copies' complete_tx
         * (async proxy) on them */
        if constexpr (MLAV90_TMA && !fp8_kv<Kv>)
            fence_proxy_async();
    }
    __syncthreads();
    const block_ctx c = block_ctx_of(item, p);
    if (wg == 0) {
        regs_dealloc<PRODUCER_REGS>();
        /* TMA only where several blocks read each tile (the request's rows span more than one
         * block; measured on the H200: 0.96x the time there, 0.89x at best, nothing to gain
         * where one block streams each tile); the feeds: produce's comment */
        if (MLAV90_TMA && !fp8_kv<Kv> && kv_tma && c.M > BM)
            produce<T, Kv, feed::tma>(p, c, base, full, empty, qbar, &kv_map, tid);
        else if (!fp8_kv<Kv> && p.page_size >= TILE_N)
            produce<T, Kv, feed::gather>(p, c, base, full, empty, qbar, &kv_map, tid);
        else
            produce<T, Kv, feed::late_ids>(p, c, base, full, empty, qbar, &kv_map, tid);
    } else {
        regs_alloc<MATH_REGS>();
        consume<T, Kv>(p, c, smem, base, full, empty, qbar, wg - 1, tid - 128 * wg);
    }
}

} // namespace mlav90

#endif
