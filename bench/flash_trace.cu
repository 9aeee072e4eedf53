/* Phase timeline of the flash kernel: builds verify_flash.cu with MLAV_FLASH_TRACE (lane 0 of
 * each warp stamps the SM clock at eight points of each KV tile), runs one reference-workload
 * problem (B = 1, BF16, page_size 1 shuffled, random data), and prints per warp the median
 * cycles of each phase and of the whole tile, plus a raw timeline of a few tiles. A diagnostic
 * for bench/NOTES.md, not part of the library: stall samples say where warps wait, this says
 * how long each phase of a tile takes and how the two warp groups line up.
 *
 *   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -Iinclude -DMLAV_WITH_CUDA \
 *        -Xptxas=--register-usage-level=10 -o flash_trace \
 *        bench/flash_trace.cu src/cuda/cuda_device.cu src/cuda/combine.cu \
 *        src/cuda/verify_flash_f32.cu src/dispatch/error.c src/common/schedule.c
 *   ./flash_trace Q_LEN PREFIX [H] [SEED]
 * With -DFLASH_TIMING_ONLY the kernel is built without the stamps and only the timing line is
 * printed: the stamps perturb ptxas's schedule (e039263 at q33/131k on the H200: 2902 us
 * stamped, 2409 us not), so variants are ranked by timing-only builds or `mlaverify bench`,
 * never by a traced build. With -DFLASH_PHASES_ONLY the loop has no stamps; thread 0 of each
 * block stamps kernel entry, loop entry, loop exit and kernel end (verify_flash.cu's
 * FLASH_PHASE), and the harness prints a block's fixed cost (prologue, epilogue), its loop time
 * per tile, and the spread of block start times, for one more L2-flushed run.
 *
 * Points of tile t (verify_flash.cu's loop): 0 the loop head, 1 after the "full" barrier,
 * 2 after the S MMAs and the gather of tile t + 2 are issued, 3 after the S exchange stores (the
 * S MMAs done), 4 after the exchange barrier, 5 after the softmax and its vote barrier, 6 after
 * the cp.async wait for tile t + 1, 7 after the P V MMAs are issued. */
#if defined(FLASH_PHASES_ONLY) /* four stamps per block, none in the loop */
#define MLAV_FLASH_PHASES 1
#elif !defined(FLASH_TIMING_ONLY) /* -DFLASH_TIMING_ONLY: the product kernel, timed without stamps */
#define MLAV_FLASH_TRACE 1
#endif
#include "../src/cuda/verify_flash.cu"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CHECK(call)                                                                              \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)
#define CHECK_MLAV(call)                                                                         \
    do {                                                                                         \
        mlav_status s_ = (call);                                                                 \
        if (s_ != MLAV_OK) {                                                                     \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, mlav_get_error());      \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)
extern "C" const char *mlav_get_error(void);

static uint64_t rng_state;
static uint32_t rng()
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* a uniform value in [-1, 1) as BF16 bits (truncated) */
static uint16_t rand_bf16()
{
    const float f = (float)rng() / 2147483648.0f - 1.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}


int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s Q_LEN PREFIX [H] [SEED]\n", argv[0]);
        return 2;
    }
    const int q_len = atoi(argv[1]), prefix = atoi(argv[2]);
    const int H = argc > 3 ? atoi(argv[3]) : 64;
    rng_state = argc > 4 ? strtoull(argv[4], NULL, 10) : 12345;
    const int kv_len = prefix + q_len;
    printf("flash_trace q_len %d prefix %d H %d seed %llu\n", q_len, prefix, H,
           (unsigned long long)rng_state);

    int32_t q_indptr[2] = {0, q_len}, kv_lens[1] = {kv_len};
    mlav_problem_info p = {};
    p.H = H;
    p.Dl = DL;
    p.Dr = DR;
    p.W = W;
    p.scale = 1.0f / sqrtf((float)W);
    p.dtype = MLAV_DTYPE_BF16;
    p.page_size = 1;
    p.B = 1;
    p.max_pages = kv_len;
    p.T = q_len;
    p.max_q_len = q_len;
    p.mask_words = (q_len + 31) / 32;
    p.max_kv_len = kv_len;
    p.total_kv = kv_len;
    p.q_indptr = q_indptr;
    p.kv_lens = kv_lens;

    mlav_cuda_device dev;
    CHECK_MLAV(mlav_cuda_device_query(&dev));
    int bps = 0;
    CHECK_MLAV(mlav_flash_prepare(MLAV_DTYPE_BF16, &dev, &bps));
    const mlav_schedule_params sp = mlav_flash_schedule_params(dev.sm_count, bps);
    mlav_schedule sc;
    CHECK_MLAV(mlav_schedule_build(&p, &sp, &sc));
    printf("%d blocks (%d per SM, %d SMs), %d keys per split\n", sc.n_items, bps, dev.sm_count,
           sc.chunk_keys);

    /* data: uniform values in [-1, 1) as BF16, rows of the pool in a shuffled order */
    const size_t q_elems = (size_t)q_len * H * W, kv_elems = (size_t)kv_len * W;
    std::vector<uint16_t> hq(q_elems), hkv(kv_elems);
    for (auto &x : hq)
        x = rand_bf16();
    for (auto &x : hkv)
        x = rand_bf16();
    std::vector<int32_t> ptab(kv_len);
    for (int i = 0; i < kv_len; i++)
        ptab[i] = i;
    for (int i = kv_len - 1; i > 0; i--)
        std::swap(ptab[i], ptab[rng() % (uint32_t)(i + 1)]);

    void *dq, *dkv, *dout, *dtab, *ditems, *dnan;
    float *dlse, *dpo, *dpl, *dps;
    CHECK(cudaMalloc(&dq, q_elems * 2));
    CHECK(cudaMalloc(&dkv, kv_elems * 2));
    CHECK(cudaMalloc(&dout, (size_t)q_len * H * DL * 2));
    CHECK(cudaMalloc(&dlse, (size_t)q_len * H * 4));
    CHECK(cudaMalloc(&dtab, (size_t)kv_len * 4));
    CHECK(cudaMalloc(&ditems, sizeof(mlav_split_item) * sc.n_items));
    CHECK(cudaMalloc(&dnan, W * 2));
    CHECK(cudaMalloc(&dpo, sizeof(float) * (size_t)std::max(sc.n_slots, 1) * BM * DL));
    CHECK(cudaMalloc(&dpl, sizeof(float) * (size_t)std::max(sc.n_slots, 1) * BM));
    CHECK(cudaMalloc(&dps, sizeof(float) * (size_t)std::max(sc.n_slots, 1) * BM * (DL / MLAV_FLASH_SCALE_COLS)));
    CHECK(cudaMemcpy(dq, hq.data(), q_elems * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dkv, hkv.data(), kv_elems * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dtab, ptab.data(), (size_t)kv_len * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(ditems, sc.items, sizeof(mlav_split_item) * sc.n_items,
                     cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dnan, 0xff, W * 2));

    mlav_flash_params fp = {};
    fp.q = dq;
    fp.kv = dkv;
    fp.page_table = static_cast<int32_t *>(dtab);
    fp.out = dout;
    fp.lse = dlse;
    fp.part_o = dpo;
    fp.part_lse = dpl;
    fp.part_scale = dps;
    fp.items = static_cast<mlav_split_item *>(ditems);
    fp.n_items = sc.n_items;
    fp.n_combine = 0; /* the split kernel only */
    fp.H = H;
    fp.page_size = 1;
    fp.page_div = mlav_fastdiv_make(1);
    fp.page_elems = W;
    fp.page_limit = (uint32_t)kv_len;
    fp.nan_row = dnan;
    fp.max_pages = kv_len;
    fp.mask_words = p.mask_words;
    fp.num_pages = kv_len;
    fp.scale_log2 = p.scale * MLAV_LOG2E;

    /* the instance the plan would pick (backend_flash.cu) */
    fp.all_groups = mlav_flash_all_groups(q_len, H);
    const auto launch = [&](const mlav_flash_params &f) {
        if (f.all_groups)
            flash_verify_kernel<__nv_bfloat16, true><<<sc.n_items, NT, SMEM_BYTES>>>(f);
        else
            flash_verify_kernel<__nv_bfloat16, false><<<sc.n_items, NT, SMEM_BYTES>>>(f);
    };
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++)
        launch(fp);
    CHECK(cudaGetLastError());
    /* the split kernel alone, each launch timed on its own after a 256 MB memset that evicts L2
     * (as `mlaverify bench` flushes it), median of 21 */
    void *flush;
    const size_t flush_bytes = (size_t)256 << 20;
    CHECK(cudaMalloc(&flush, flush_bytes));
    const auto flushed_run_us = [&](int fill) { /* one launch after an L2-evicting memset */
        CHECK(cudaMemset(flush, fill, flush_bytes));
        CHECK(cudaEventRecord(e0));
        launch(fp);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        return ms * 1000.0f;
    };
    std::vector<float> times;
    for (int i = 0; i < 21; i++)
        times.push_back(flushed_run_us(i));
    std::sort(times.begin(), times.end());
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev.device));
    printf("split kernel alone, L2 flushed: median %.1f us (min %.1f) (attribute clock %d MHz)\n",
           times[times.size() / 2], times[0], clock_khz / 1000);

#if defined(FLASH_TIMING_ONLY)
    CHECK(cudaFree(flush));
    return 0;
#elif defined(FLASH_PHASES_ONLY)
    {
        const float us = flushed_run_us(0);
        CHECK(cudaFree(flush));
        static unsigned long long ns[PHASE_BLOCKS][PHASE_POINTS];
        static long long clk[PHASE_BLOCKS][PHASE_POINTS];
        CHECK(cudaMemcpyFromSymbol(ns, flash_phase_ns, sizeof ns));
        CHECK(cudaMemcpyFromSymbol(clk, flash_phase_clk, sizeof clk));
        const int nb = std::min(sc.n_items, PHASE_BLOCKS);
        unsigned long long first = ~0ull, last = 0;
        for (int b = 0; b < nb; b++) {
            first = std::min(first, ns[b][0]);
            last = std::max(last, ns[b][3]);
        }
        std::vector<double> start, pro, loop, tile, epi, pro_q, pro_rest, epi_bar, epi_lse, epi_out;
        for (int b = 0; b < nb; b++) {
            const mlav_split_item it = sc.items[b];
            const int nt = (it.kv_end - it.kv_begin + BN - 1) / BN;
            start.push_back((double)(ns[b][0] - first) / 1000.0);
            pro.push_back((double)(clk[b][1] - clk[b][0]));
            loop.push_back((double)(clk[b][2] - clk[b][1]));
            tile.push_back(nt > 0 ? (double)(clk[b][2] - clk[b][1]) / nt : 0.0);
            epi.push_back((double)(clk[b][3] - clk[b][2]));
            pro_q.push_back((double)(clk[b][4] - clk[b][0]));
            pro_rest.push_back((double)(clk[b][1] - clk[b][4]));
            epi_bar.push_back((double)(clk[b][5] - clk[b][2]));
            epi_lse.push_back((double)(clk[b][6] - clk[b][5]));
            epi_out.push_back((double)(clk[b][3] - clk[b][6]));
        }
        const auto pct = [](std::vector<double> v, double q) {
            std::sort(v.begin(), v.end());
            return v[(size_t)(q * (double)(v.size() - 1))];
        };
        printf("phases of one more L2-flushed run: kernel %.1f us (events), first block entry to "
               "last block end %.1f us (global timer)\n",
               us, (double)(last - first) / 1000.0);
        printf("%-28s %10s %10s %10s\n", "per block", "min", "median", "max");
        printf("%-28s %10.2f %10.2f %10.2f\n", "entry after first (us)", pct(start, 0),
               pct(start, 0.5), pct(start, 1));
        printf("%-28s %10.0f %10.0f %10.0f\n", "prologue (cycles)", pct(pro, 0), pct(pro, 0.5),
               pct(pro, 1));
        printf("%-28s %10.0f %10.0f %10.0f\n", "loop (cycles)", pct(loop, 0), pct(loop, 0.5),
               pct(loop, 1));
        printf("%-28s %10.0f %10.0f %10.0f\n", "loop per tile (cycles)", pct(tile, 0),
               pct(tile, 0.5), pct(tile, 1));
        printf("%-28s %10.0f %10.0f %10.0f\n", "epilogue, warp 0 (cycles)", pct(epi, 0),
               pct(epi, 0.5), pct(epi, 1));
        /* the pieces, each a median over blocks on its own (they need not add up exactly) */
        const struct {
            const char *name;
            const std::vector<double> &v;
        } part[] = {{"  to Q and tile 0 landed", pro_q},
                    {"  then to loop entry", pro_rest},
                    {"  exit to row-sum barrier", epi_bar},
                    {"  then lse written", epi_lse},
                    {"  then O stored", epi_out}};
        for (const auto &x : part)
            printf("%-28s %10.0f %10.0f %10.0f\n", x.name, pct(x.v, 0), pct(x.v, 0.5),
                   pct(x.v, 1));
    }
    mlav_schedule_free(&sc);
    return 0;
#else
    CHECK(cudaFree(flush));
    const auto median = [](std::vector<unsigned> v) -> unsigned {
        if (v.empty())
            return 0;
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
    };
    static unsigned tr[TRACE_BLOCKS][NT / 32][TRACE_TILES][TRACE_POINTS];
    CHECK(cudaMemset(dout, 0, 4)); /* keep the trace run separate from the timed ones */
    launch(fp);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpyFromSymbol(tr, flash_trace, sizeof tr));

    static const char *phase[8] = {"fullbar", "S+gather", "xchg-st", "xbar",
                                   "smax",    "cpwait",   "PV",      "tail"};
    const int nb = std::min(sc.n_items, 4);
    for (int blk = 0; blk < nb; blk++) {
        const mlav_split_item it = sc.items[blk];
        const int nt = std::min((it.kv_end - it.kv_begin + BN - 1) / BN, TRACE_TILES);
        const int t0 = std::min(4, nt / 4), t1 = nt - 1 - std::min(4, nt / 4);
        printf("\nblock %d (m-tile %d, keys %d..%d, %d tiles; medians over tiles %d..%d, cycles)\n",
               blk, it.mtile, it.kv_begin, it.kv_end, nt, t0, t1 - 1);
        printf("warp");
        for (int k = 0; k < 8; k++)
            printf(" %9s", phase[k]);
        printf(" %9s\n", "period");
        for (int w = 0; w < NT / 32; w++) {
            std::vector<unsigned> d[9];
            for (int t = t0; t < t1; t++) {
                const unsigned *a = tr[blk][w][t], *n = tr[blk][w][t + 1];
                for (int k = 0; k < 7; k++)
                    d[k].push_back(a[k + 1] - a[k]);
                d[7].push_back(n[0] - a[7]);
                d[8].push_back(n[0] - a[0]);
            }
            printf("%4d", w);
            for (int k = 0; k < 9; k++)
                printf(" %9u", median(d[k]));
            printf("\n");
        }
        std::vector<unsigned> off;
        for (int t = t0; t < t1; t++)
            off.push_back(tr[blk][4][t][0] - tr[blk][0][t][0]);
        printf("group 1 head - group 0 head: median %u cycles\n", median(off));
    }
    /* raw timeline of block 0, three tiles from its middle, relative to warp 0's first stamp */
    {
        const mlav_split_item it = sc.items[0];
        const int nt = std::min((it.kv_end - it.kv_begin + BN - 1) / BN, TRACE_TILES);
        const int ta = std::max(0, nt / 2 - 1), tb = std::min(nt, ta + 3);
        const unsigned base = tr[0][0][ta][0];
        printf("\nblock 0 raw stamps (cycles from warp 0 at tile %d's head)\n", ta);
        for (int t = ta; t < tb; t++)
            for (int w = 0; w < NT / 32; w++) {
                printf("t%-4d w%d", t, w);
                for (int k = 0; k < 8; k++)
                    printf(" %7d", (int)(tr[0][w][t][k] - base));
                printf("\n");
            }
    }
    mlav_schedule_free(&sc);
    return 0;
#endif
}
