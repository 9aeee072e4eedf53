/* sm90_timing: the Hopper split kernel (src/cuda/sm90) beside the legal one on the same launch
 * parameters, at production points: BF16, B {1, 16} x H {8, 16, 64, 128} x q_len {1, 16} x
 * prefix {4096, 32768, 131072}, causal chains, page_size 64 with shuffled pages; and at B {1, 16}
 * x H {8, 128} x q_len 16 x prefix 32768 a random tree mask, and page_size 1 with shuffled rows
 * (the issue's tree-against-chain and page-1-against-64 comparisons). Three variants a point:
 * the legal kernel and the sm90 kernel on the legal schedule, and the sm90 kernel on its own
 * (splits aligned to 64 keys). Each launch (split kernel and combine) is captured in a CUDA
 * graph and replayed with the L2 flushed before each replay (a read of twice the L2), CUDA
 * events around the replay; median of the replays. It also prints the largest difference of
 * the sm90 outputs from the legal ones (relative to the largest |out|) and whether lse agrees,
 * as a sanity check, not a test (tests/test_sm90_gpu holds the kernel to the oracle). Needs a
 * cc 9.0 device; `sm90_timing [reps] [filter-H]`. Built with the tests (it reaches into
 * src/cuda/sm90 as they do), not run by ctest; `MLAV_FLASH_FAMILY=legal mlaverify bench` gives
 * the families' A/B through the public API. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "../common/combine_shape.h"
#include "flash_sm90.h"
#include "../bench/diag/l2_flush.cuh"
#include "mlaverify_internal.h"
extern "C" { /* C headers without C++ guards */
#include <cmocka.h>
#include "test_util.h"
}

/* TU_CK's fail_msg outside a cmocka test prints the call, the error and file:line and exits
 * with a nonzero status */
#define CK TU_CK
#define MK(call)                                                                                 \
    do {                                                                                         \
        mlav_status s_ = (call);                                                                 \
        if (s_ != MLAV_OK) {                                                                     \
            fprintf(stderr, "%s: %s\n", #call, mlav_get_error());                                \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

/* uniform [-1, 1) BF16 from a hash of the index */
__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        p[i] = __float2bfloat16_rn((float)(x >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

struct point {
    int B, H, q_len, prefix, page_size, tree; /* tree: a random tree mask, else the chain */
};

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    const int only_h = argc > 2 ? atoi(argv[2]) : 0;
    mlav_cuda_device dev;
    MK(mlav_cuda_device_query(&dev));
    if (dev.cc_major != 9 || dev.cc_minor != 0) {
        printf("SKIP: needs a cc 9.0 device\n");
        return 0;
    }
    int bps90 = 0, bps = 0;
    MK(mlav_flash_sm90_prepare(MLAV_DTYPE_BF16, MLAV_DTYPE_BF16, &dev, &bps90));
    MK(mlav_flash_prepare(MLAV_DTYPE_BF16, MLAV_DTYPE_BF16, &dev, &bps));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev.device));
    l2_flusher fl;
    CK(fl.make((size_t)prop.l2CacheSize) ? cudaSuccess : cudaGetLastError());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    std::vector<point> pts;
    for (int B : {1, 16})
        for (int H : {8, 16, 64, 128})
            for (int ql : {1, 16})
                for (int pre : {4096, 32768, 131072})
                    if (!only_h || H == only_h)
                        pts.push_back({B, H, ql, pre, 64, 0});
    /* the issue's other comparisons: a random tree against the chain, page_size 1 (shuffled
     * rows) against 64 */
    for (int B : {1, 16})
        for (int H : {8, 128})
            if (!only_h || H == only_h) {
                pts.push_back({B, H, 16, 32768, 64, 1});
                pts.push_back({B, H, 16, 32768, 1, 0});
            }
    printf("sm90_timing: %s, %d SMs, %d replays per family and point (median), L2 flushed\n",
           prop.name, dev.sm_count, reps);
    printf("%3s %4s %3s %7s %4s %5s | %9s %9s %7s %9s %7s | %10s %s\n", "B", "H", "q", "prefix",
           "page", "mask", "legal_us", "sm90_us", "ratio", "sm90/64", "ratio", "max_rel_d", "lse");
    double log_sum = 0, log_sum64 = 0;
    int n_pts = 0;
    for (const point &pt : pts) {
        const int B = pt.B, H = pt.H, W = MLAV_FLASH_W;
        std::vector<int32_t> q_indptr(B + 1), kv_lens(B);
        for (int b = 0; b < B; b++) {
            q_indptr[b + 1] = q_indptr[b] + pt.q_len;
            kv_lens[b] = pt.prefix + pt.q_len;
        }
        const int T = q_indptr[B];
        const int max_pages = (kv_lens[0] + pt.page_size - 1) / pt.page_size;
        mlav_problem_info info;
        memset(&info, 0, sizeof info);
        info.H = H;
        info.Dl = MLAV_FLASH_DL;
        info.Dr = MLAV_FLASH_DR;
        info.W = W;
        info.scale = 1.0f / sqrtf(192.0f);
        info.dtype = info.kv_dtype = MLAV_DTYPE_BF16;
        info.page_size = pt.page_size;
        info.B = B;
        info.max_pages = max_pages;
        info.T = T;
        info.max_q_len = pt.q_len;
        info.mask_words = (pt.q_len + 31) / 32;
        info.max_kv_len = kv_lens[0];
        info.total_kv = (int64_t)kv_lens[0] * B;
        info.q_indptr = q_indptr.data();
        info.kv_lens = kv_lens.data();
        /* device tensors: a shuffled pool of exactly the pages used */
        const int64_t num_pages = (int64_t)max_pages * B;
        std::vector<int32_t> ptab((size_t)num_pages);
        for (int64_t i = 0; i < num_pages; i++)
            ptab[i] = (int32_t)i;
        uint64_t r = 0x5eedull + (uint64_t)pt.prefix * 131 + (uint64_t)B * 7 + (uint64_t)H;
        for (int64_t i = num_pages - 1; i > 0; i--) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const int64_t k = (int64_t)((r >> 33) % (uint64_t)(i + 1));
            std::swap(ptab[i], ptab[k]);
        }
        const size_t q_elems = (size_t)T * H * W, kv_elems = (size_t)num_pages * pt.page_size * W;
        /* a random tree: node i's parent is drawn from 0 .. i - 1, and its mask row is its
         * parent's plus itself (the same tree in every request) */
        uint32_t *dmask = NULL;
        if (pt.tree) {
            const int words = info.mask_words;
            std::vector<uint32_t> node((size_t)pt.q_len * words, 0u), mask((size_t)T * words);
            for (int i = 0; i < pt.q_len; i++) {
                if (i > 0) {
                    r = r * 6364136223846793005ull + 1442695040888963407ull;
                    const int par = (int)((r >> 33) % (uint64_t)i);
                    for (int w = 0; w < words; w++)
                        node[(size_t)i * words + w] = node[(size_t)par * words + w];
                }
                node[(size_t)i * words + i / 32] |= 1u << (i % 32);
            }
            for (int t = 0; t < T; t++)
                for (int w = 0; w < words; w++)
                    mask[(size_t)t * words + w] = node[(size_t)(t % pt.q_len) * words + w];
            CK(cudaMalloc(&dmask, mask.size() * 4));
            CK(cudaMemcpy(dmask, mask.data(), mask.size() * 4, cudaMemcpyHostToDevice));
        }
        __nv_bfloat16 *dq, *dkv, *dnan;
        int32_t *dpt, *dbad;
        CK(cudaMalloc(&dq, q_elems * 2));
        CK(cudaMalloc(&dkv, kv_elems * 2));
        fill_bf16<<<1024, 256>>>(dq, q_elems, 1);
        fill_bf16<<<1024, 256>>>(dkv, kv_elems, 2);
        CK(cudaMalloc(&dpt, ptab.size() * 4));
        CK(cudaMemcpy(dpt, ptab.data(), ptab.size() * 4, cudaMemcpyHostToDevice));
        std::vector<uint16_t> nan_row(W, 0x7fc0);
        CK(cudaMalloc(&dnan, W * 2));
        CK(cudaMemcpy(dnan, nan_row.data(), W * 2, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dbad, (size_t)max_pages * 4));
        CK(cudaMemset(dbad, 0xff, (size_t)max_pages * 4));
        CK(cudaDeviceSynchronize());

        /* the variants: 0 legal, 1 sm90, both on the legal schedule; 2 sm90 on its own
         * schedule (splits aligned to its 64-key tile) */
        constexpr int NV = 3;
        float us[NV];
        std::vector<__nv_bfloat16> o_first;
        std::vector<float> l_first;
        double dmax[NV] = {0, 0, 0}, lmax[NV] = {0, 0, 0}, omax = 0;
        for (int v = 0; v < NV; v++) {
            const int f = v > 0; /* the family */
            const mlav_schedule_params sp =
                v == 2 ? mlav_flash_sm90_schedule_params(dev.sm_count, bps90)
                       : mlav_flash_schedule_params(dev.sm_count, bps);
            mlav_schedule sch;
            memset(&sch, 0, sizeof sch);
            MK(mlav_schedule_build(&info, &sp, &sch));
            const size_t rows = (size_t)std::max(sch.n_slots, 1) * MLAV_FLASH_BLOCK_M;
            const size_t po = align256(2 * rows * MLAV_FLASH_DL), pl = align256(4 * rows),
                         ps = align256(4 * rows * (MLAV_FLASH_DL / MLAV_FLASH_SCALE_COLS));
            __nv_bfloat16 *dout;
            float *dlse;
            char *ws;
            CK(cudaMalloc(&dout, (size_t)T * H * MLAV_FLASH_DL * 2));
            CK(cudaMalloc(&dlse, (size_t)T * H * 4));
            CK(cudaMalloc(&ws, po + pl + ps));
            mlav_split_item *ditems;
            mlav_combine_item *dcomb;
            CK(cudaMalloc(&ditems, sizeof(mlav_split_item) * (size_t)std::max(sch.n_items, 1)));
            CK(cudaMalloc(&dcomb, sizeof(mlav_combine_item) * (size_t)std::max(sch.n_combine, 1)));
            CK(cudaMemcpy(ditems, sch.items, sizeof(mlav_split_item) * (size_t)sch.n_items,
                          cudaMemcpyHostToDevice));
            if (sch.n_combine)
                CK(cudaMemcpy(dcomb, sch.combine,
                              sizeof(mlav_combine_item) * (size_t)sch.n_combine,
                              cudaMemcpyHostToDevice));
            int max_nsplit = 1;
            for (int i = 0; i < sch.n_combine; i++)
                max_nsplit = std::max(max_nsplit, (int)sch.combine[i].nsplit);

            mlav_flash_params fp;
            memset(&fp, 0, sizeof fp);
            fp.q = dq;
            fp.kv = dkv;
            fp.page_table = dpt;
            fp.tree_mask = dmask;
            fp.out = dout;
            fp.lse = dlse;
            fp.part_o = ws;
            fp.part_lse = (float *)(ws + po);
            fp.part_scale = (float *)(ws + po + pl);
            fp.items = ditems;
            fp.combine = dcomb;
            fp.n_items = sch.n_items;
            fp.n_combine = sch.n_combine;
            fp.H = H;
            fp.page_size = pt.page_size;
            fp.max_pages = max_pages;
            fp.mask_words = info.mask_words;
            fp.page_div = mlav_fastdiv_make((uint32_t)pt.page_size);
            fp.page_elems = (uint32_t)pt.page_size * W;
            fp.page_limit = (uint32_t)num_pages;
            fp.nan_row = dnan;
            fp.bad_pages = dbad;
            fp.num_pages = num_pages;
            fp.scale_log2 = info.scale * MLAV_LOG2E;
            fp.kv_scale = 1.0f;
            fp.pdl = 1;
            fp.combine_col_blocks = mlav_combine_col_blocks(
                (int64_t)sch.n_combine * MLAV_FLASH_BLOCK_M, max_nsplit, &dev);
            mlav_flash_launch_opts lo;
            memset(&lo, 0, sizeof lo);
            lo.all_groups = mlav_flash_all_groups(pt.q_len, H);
            lo.combine_kind = mlav_combine_kind(max_nsplit);
            /* the sm_90a kernel the backend would pick (flash_family.h's rule, or
             * MLAV_SM90_KERNEL's choice) */
            lo.sm90_seesaw = mlav_flash_sm90_seesaw_of(sch.items, sch.n_items, 0, info.scale);
            if (lo.combine_kind != MLAV_COMBINE_ROWS)
                MK(mlav_combine_spread_smem((int64_t)sch.n_combine * fp.combine_col_blocks,
                                            lo.combine_kind, 0, &dev, &lo.combine_smem));
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            const mlav_status s = f ? mlav_flash_sm90_launch(MLAV_DTYPE_BF16, &fp, &lo, 0, st)
                                    : mlav_flash_launch(MLAV_DTYPE_BF16, &fp, &lo, 0, st);
            CK(cudaStreamEndCapture(st, &g));
            if (s != MLAV_OK) {
                fprintf(stderr, "launch: %s\n", mlav_get_error());
                return 2;
            }
            CK(cudaGraphInstantiate(&ge, g, 0));
            std::vector<float> t;
            for (int k = 0; k < reps + 2; k++) {
                fl.run(st);
                CK(cudaEventRecord(e0, st));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(e1, st));
                /* at most 30 s: a deadlocked kernel ends the run with a sentence */
                for (long spins = 0; cudaEventQuery(e1) == cudaErrorNotReady; spins++) {
                    if (spins > 30000) {
                        printf("FAIL: variant %d did not finish in 30 s (deadlock?)\n", v);
                        exit(1);
                    }
                    usleep(1000);
                }
                CK(cudaEventSynchronize(e1));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (k >= 2)
                    t.push_back(ms * 1000.0f);
            }
            us[v] = median(t);
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
            /* sanity: each variant's outputs against the legal kernel's */
            const size_t on = (size_t)T * H * MLAV_FLASH_DL, ln = (size_t)T * H;
            std::vector<__nv_bfloat16> o(on);
            std::vector<float> l(ln);
            CK(cudaMemcpy(o.data(), dout, on * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(l.data(), dlse, ln * 4, cudaMemcpyDeviceToHost));
            if (v == 0) {
                o_first = o;
                l_first = l;
                for (size_t i = 0; i < on; i++)
                    omax = std::max(omax, (double)fabs(__bfloat162float(o[i])));
            } else {
                for (size_t i = 0; i < on; i++) {
                    const double a = __bfloat162float(o_first[i]), b = __bfloat162float(o[i]);
                    dmax[v] = (a == a && b == b) ? std::max(dmax[v], fabs(a - b)) : INFINITY;
                }
                for (size_t i = 0; i < ln; i++)
                    lmax[v] = (l_first[i] == l_first[i] && l[i] == l[i])
                                  ? std::max(lmax[v], (double)fabs(l_first[i] - l[i]))
                                  : INFINITY;
            }
            cudaFree(dout);
            cudaFree(dlse);
            cudaFree(ws);
            cudaFree(ditems);
            cudaFree(dcomb);
            mlav_schedule_free(&sch);
        }
        const double ratio = us[0] / us[1], ratio64 = us[0] / us[2];
        if (!pt.tree && pt.page_size == 64) { /* the geomeans: the chain, page 64 grid */
            log_sum += log(ratio);
            log_sum64 += log(ratio64);
            n_pts++;
        }
        const double d = std::max(dmax[1], dmax[2]), dl = std::max(lmax[1], lmax[2]);
        printf("%3d %4d %3d %7d %4d %5s | %9.1f %9.1f %7.3f %9.1f %7.3f | %10.2e %s\n", B, H,
               pt.q_len, pt.prefix, pt.page_size, pt.tree ? "tree" : "chain", us[0], us[1],
               ratio, us[2], ratio64, omax > 0 ? d / omax : d, dl <= 1e-3 ? "ok" : "DIFFERS");
        fflush(stdout);
        cudaFree(dq);
        cudaFree(dkv);
        cudaFree(dpt);
        cudaFree(dnan);
        cudaFree(dbad);
        cudaFree(dmask);
    }
    printf("geomean legal time / sm90 time over the %d chain, page-64 points: %.3f (legal "
           "schedule), %.3f (splits aligned to 64 keys)\n",
           n_pts, exp(log_sum / std::max(n_pts, 1)), exp(log_sum64 / std::max(n_pts, 1)));
    fl.release();
    return 0;
}
