/* test_sm90_layouts_gpu (ctest, GPU): the Hopper kernel's shared-memory layouts, descriptors and paged gather on known
 * random data (sm_90a only). One block of the kernel's shape (a producer warpgroup and two math
 * warpgroups) gathers Q (64 x 576) and one KV tile (64 keys x 576) through a page table with the
 * kernel's loads (gather.cuh) and hand-over (publish_copies, mbarriers), computes S = Q K^T with
 * the kernel's s_tile (m64n32k16, each math warpgroup 32 keys), stores a given P with the
 * kernel's store_p and computes O = P V with its pv_tile (m64n256k16, V read MN-major, each
 * warpgroup 256 columns), and compares S and O with an fp64 host reference: max abs and
 * relative error per product, PASS/FAIL; the exit status is nonzero on any FAIL. Cases: BF16
 * and F16, page_size 1 (shuffled rows) and 64 (shuffled pages), a whole tile and one whose split
 * ends inside it (rows past the end read as zeros); and an FP8 E4M3 cache (random bytes, every
 * finite e4m3 value, subnormals included) under F16 q and under BF16 q scaled by 2^100, gathered
 * raw and converted to F16 in the stage by the kernel's FP8 gather (its stage first filled with
 * NaN, so that an F16 chunk the conversion leaves unwritten fails), Q converted to F16 times
 * 2^-shift (q_tile_to_f16) and S taken back by 2^shift. And the TMA tile (a 16-bit cache, a
 * tile inside one page: load_kv_tile_tma through the pool's tensor map, kv_tensor_map.h) byte
 * for byte against the cp.async gather of the same tile and both against the layout, at a
 * page's start, its middle and a slot of no alignment, in pages of 64, 128 and 256 rows; and
 * the rule (kv_tile_by_tma) refusing a tile across pages, a split's partial last tile and a
 * page id outside the pool. Exits 77 (skipped) without a cc 9.0 device.
 * Run: test_sm90_layouts_gpu [seed]. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <vector>

#include <type_traits>

#include "../src/common/dtype.h"
#include "gather.cuh"
#include "stages.cuh"
extern "C" { /* C headers without C++ guards */
#include <cmocka.h>
#include "test_util.h"
}

using namespace mlav90;

/* TU_CK's fail_msg outside a cmocka test prints the call, the error and file:line and exits
 * with a nonzero status */
#define CK TU_CK

template <typename T> __device__ uint32_t pack2(float a, float b);
template <> __device__ uint32_t pack2<__nv_bfloat16>(float a, float b)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ uint32_t pack2<__half>(float a, float b)
{
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* s_out [64][64] fp32, p_in [64][64] fp32 (converted to the products' type by store_p), o_out
 * [64][512] fp32. T: q's type; Kv: the cache's (T, or one byte: FP8 E4M3, products in F16);
 * u_out: BF16 q over FP8, the 2^shift Q was divided by. */
template <typename T, typename Kv = T, typename MT = std::conditional_t<sizeof(Kv) == 1, __half, T>>
__global__ void __launch_bounds__(384, 1)
    check_kernel(const mlav_flash_params p, const T *q, int j0, int kv_end, float *s_out,
                 const float *p_in, float *o_out, float *u_out)
{
    constexpr bool FP8 = sizeof(Kv) == 1;
    using E = std::conditional_t<FP8, uint8_t, T>;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~(uintptr_t)1023);
    const uint32_t base = smem_u32(smem);
    uint64_t *bars = reinterpret_cast<uint64_t *>(smem + smem90::BAR);
    uint64_t *full = bars, *qbar = bars + 2 * STAGES;
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    if (tid == 0) {
        mbar_init(full, PRODUCER_THREADS);
        mbar_init(qbar, PRODUCER_THREADS);
    }
    __syncthreads();
    if (wg == 0) {
        const int pt = tid;
        if constexpr (FP8) { /* NaN (F16 and BF16) wherever the gather leaves a chunk unwritten */
            for (uint32_t i = (uint32_t)pt; i < OPERAND_BYTES / 16; i += PRODUCER_THREADS)
                reinterpret_cast<uint4 *>(smem + smem90::KV)[i] =
                    make_uint4(~0u, ~0u, ~0u, ~0u);
            asm volatile("bar.sync 5, 128;\n" ::: "memory");
        }
        load_q(base + smem90::Q, q, 0, BM, pt);
        cp_async_commit();
        int32_t pages[ROWS_PER_THREAD];
        kv_pages_of(pages, p.page_table, j0, kv_end, p, pt);
        load_kv_tile(base + smem90::KV, static_cast<const E *>(p.kv), pages, j0, kv_end, p, pt);
        cp_async_commit();
        cp_async_wait<1>();
        if constexpr (FP8 && !std::is_same<T, __half>::value) {
            const float u = q_tile_to_f16<5>(base + smem90::Q,
                                             reinterpret_cast<uint32_t *>(smem + smem90::MAX), pt);
            if (pt == 0)
                *u_out = u;
        }
        publish_copies(qbar);
        cp_async_wait<0>();
        if constexpr (FP8)
            fp8_convert_tile<true>(base + smem90::KV, pt);
        publish_copies(full);
        return;
    }
    const int w = wg - 1, wt = tid - 128 * wg, warp = wt >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    mbar_wait(qbar, 0);
    mbar_wait(full, 0);
    float s[S_REGS];
#pragma unroll
    for (int i = 0; i < S_REGS; i++)
        s[i] = 0.0f;
    fence_regs(s); /* the zeros are written before the warpgroup fence */
    s_tile<MT>(s, base + smem90::Q, base + smem90::KV, w);
    float pv[S_REGS];
#pragma unroll
    for (int j = 0; j < S_REGS / 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = 16 * warp + g + 8 * (e >> 1), key = S_KEYS * w + 8 * j + 2 * t + (e & 1);
            s_out[r * TILE_N + key] = s[4 * j + e];
            pv[4 * j + e] = p_in[r * TILE_N + key];
        }
    store_p(smem + smem90::P, pv, S_KEYS * w, warp, lane, pack2<MT>);
    fence_proxy_async();
    named_barrier(1, 256);
    float o[O_REGS];
#pragma unroll
    for (int i = 0; i < O_REGS; i++)
        o[i] = 0.0f;
    fence_regs(o);
    pv_tile<MT>(o, base + smem90::P, base + smem90::KV, w);
#pragma unroll
    for (int j = 0; j < O_REGS / 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = 16 * warp + g + 8 * (e >> 1), col = O_COLS * w + 8 * j + 2 * t + (e & 1);
            o_out[r * DL + col] = o[4 * j + e];
        }
}

/* One KV tile at row j0 gathered twice by the producer's loads: into stage 0 by cp.async
 * (load_kv_tile) and, where the kernel's rule (kv_tile_by_tma) gives the tile to TMA, into
 * stage 1 by load_kv_tile_tma through `map`, stage 1 first filled with 0xff bytes so that a byte
 * the boxes leave unwritten shows. out: both stages (OPERAND_BYTES each), then the rule's
 * answer as a word. 128 threads, the producer warpgroup. */
__global__ void __launch_bounds__(PRODUCER_THREADS, 1)
    tma_check_kernel(const mlav_flash_params p, const __grid_constant__ CUtensorMap map, int j0,
                     int kv_end, uint4 *out)
{
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~(uintptr_t)1023);
    const uint32_t base = smem_u32(smem);
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + smem90::BAR);
    const int pt = threadIdx.x;
    if (pt == 0) {
        mbar_init(&full[0], PRODUCER_THREADS);
        mbar_init(&full[1], PRODUCER_THREADS);
        fence_proxy_async(); /* the initialization visible to the boxes' complete_tx */
    }
    for (uint32_t i = (uint32_t)pt; i < OPERAND_BYTES / 16; i += PRODUCER_THREADS)
        reinterpret_cast<uint4 *>(smem + smem90::KV + OPERAND_BYTES)[i] =
            make_uint4(~0u, ~0u, ~0u, ~0u);
    fence_proxy_async(); /* the fill (generic) before the boxes' writes (async proxy) */
    __syncthreads();
    int32_t pages[ROWS_PER_THREAD];
    kv_pages_of(pages, p.page_table, j0, kv_end, p, pt);
    const bool tma = kv_tile_by_tma(pages[0], j0, kv_end, p);
    load_kv_tile(base + smem90::KV, static_cast<const uint16_t *>(p.kv), pages, j0, kv_end, p,
                 pt);
    cp_async_commit();
    cp_async_wait<0>();
    publish_copies(&full[0]);
    if (tma)
        load_kv_tile_tma(base + smem90::KV + OPERAND_BYTES, &map, &full[1], pages[0], j0, p, pt);
    mbar_wait(&full[0], 0);
    if (tma)
        mbar_wait(&full[1], 0);
    for (uint32_t i = (uint32_t)pt; i < 2 * OPERAND_BYTES / 16; i += PRODUCER_THREADS)
        out[i] = reinterpret_cast<const uint4 *>(smem + smem90::KV)[i];
    if (pt == 0)
        out[2 * OPERAND_BYTES / 16] = make_uint4(tma ? 1u : 0u, 0u, 0u, 0u);
}

/* The kernel parameters of a pool of num_pages pages of page_size rows at `kv` under the page
 * table `pt` (max_pages ids), as the launch sets them for the producer's loads. */
static mlav_flash_params pool_params(const void *kv, const int32_t *pt, int page_size,
                                     int max_pages, int num_pages, const void *nan_row)
{
    mlav_flash_params p = {};
    p.kv = kv;
    p.page_table = pt;
    p.page_size = page_size;
    p.max_pages = max_pages;
    p.page_div = mlav_fastdiv_make((uint32_t)page_size);
    p.page_elems = (uint32_t)page_size * W;
    p.page_limit = (uint32_t)num_pages;
    p.nan_row = nan_row;
    p.num_pages = num_pages;
    return p;
}

/* The TMA tile against the cp.async one, byte for byte, and both against the layout
 * (smem_layout.cuh: chunk c of the tile's row r at sw128_chunk(r, c)) of the pool's rows: a
 * 16-bit pool of random values, pages shuffled, page_size ps, the tile at KV row j0 of a split
 * ending at kv_end; `bad`: the tile's page id replaced by one past the pool. want_tma: the rule's
 * expected answer (a tile inside one page and the split, of a valid page). Returns failures. */
static int run_tma_case(int ps, int j0, int kv_end, bool bad, bool want_tma, uint64_t seed)
{
    uint64_t st = seed * 0x9e3779b97f4a7c15ull + (uint64_t)ps * 131 + (uint64_t)j0 + 7;
    const auto next = [&]() {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        return st;
    };
    const int max_pages = (kv_end + ps - 1) / ps;
    const int num_pages = max_pages + 3;
    std::vector<int32_t> perm(num_pages);
    for (int i = 0; i < num_pages; i++)
        perm[i] = i;
    for (int i = num_pages - 1; i > 0; i--) {
        const int k = (int)(next() % (uint64_t)(i + 1));
        const int x = perm[i];
        perm[i] = perm[k];
        perm[k] = x;
    }
    if (bad)
        perm[j0 / ps] = num_pages + 2;
    std::vector<uint16_t> hkv((size_t)num_pages * ps * W);
    for (auto &x : hkv)
        x = (uint16_t)next();
    uint16_t *dkv;
    int32_t *dpt;
    uint16_t *dnan;
    uint4 *dout;
    const size_t out_words = 2 * OPERAND_BYTES / 16 + 1;
    CK(cudaMalloc(&dkv, hkv.size() * 2));
    CK(cudaMalloc(&dpt, max_pages * sizeof(int32_t)));
    CK(cudaMalloc(&dnan, W * 2));
    CK(cudaMalloc(&dout, out_words * 16));
    CK(cudaMemcpy(dkv, hkv.data(), hkv.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpt, perm.data(), max_pages * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemset(dnan, 0xff, W * 2));
    CK(cudaMemset(dout, 0, out_words * 16));
    const mlav_flash_params p = pool_params(dkv, dpt, ps, max_pages, num_pages, dnan);
    int fails = 0;
    /* the host's rule and encoding, as the launch (kv_tensor_map.cu) uses them */
    if (!kv_map_fits(true, ps, num_pages, dkv) || kv_map_fits(false, ps, num_pages, dkv) ||
        kv_map_fits(true, ps + 32, num_pages, dkv)) {
        printf("FAIL: tma page_size %d: kv_map_fits (a 16-bit pool of pages of whole tiles only)\n",
               ps);
        fails++;
    }
    CUtensorMap map;
    kv_map_encoder encode = nullptr;
    CK(kv_map_encoder_get(&encode));
    const CUresult r = kv_map_encode(encode, &map, dkv, (uint64_t)num_pages * ps);
    if (r != CUDA_SUCCESS) {
        printf("FAIL: tma page_size %d: cuTensorMapEncodeTiled returned %d\n", ps, (int)r);
        exit(1);
    }
    CK(cudaFuncSetAttribute(tma_check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem90::BYTES));
    tma_check_kernel<<<1, PRODUCER_THREADS, smem90::BYTES>>>(p, map, j0, kv_end, dout);
    CK(cudaGetLastError());
    for (long spins = 0; cudaStreamQuery(0) == cudaErrorNotReady; spins++) {
        if (spins > 30000) {
            printf("FAIL: tma page_size %d j0 %d: the kernel did not finish in 30 s (deadlock?)\n",
                   ps, j0);
            exit(1);
        }
        usleep(1000);
    }
    CK(cudaDeviceSynchronize());
    std::vector<unsigned char> h(out_words * 16);
    CK(cudaMemcpy(h.data(), dout, h.size(), cudaMemcpyDeviceToHost));
    const unsigned char *s0 = h.data(), *s1 = h.data() + OPERAND_BYTES;
    const bool tma = h[2 * OPERAND_BYTES] != 0;
    if (tma != want_tma) {
        printf("FAIL: tma page_size %d j0 %d kv_end %d%s: the rule gave the tile to %s\n", ps, j0,
               kv_end, bad ? " (bad page id)" : "", tma ? "TMA" : "cp.async");
        fails++;
    }
    /* the cp.async stage against the layout of the pool's rows (zeros past kv_end, the NaN row
     * for a bad page id), and the TMA stage against the cp.async one */
    long bad_ca = 0, bad_tma = 0;
    for (int rr = 0; rr < TILE_N; rr++) {
        const int j = j0 + rr;
        const bool live = j < kv_end;
        const int32_t pg = perm[j / ps];
        const bool valid = pg >= 0 && pg < num_pages;
        for (int c = 0; c < ROW_CHUNKS; c++) {
            const uint32_t at = sw128_chunk(rr, c);
            for (int b = 0; b < 16; b++) {
                unsigned char want = 0;
                if (live) {
                    const size_t row = (size_t)pg * ps + (size_t)(j % ps);
                    const uint16_t v =
                        valid ? hkv[row * W + (size_t)c * 8 + b / 2] : (uint16_t)0xffffu;
                    want = (unsigned char)(b % 2 ? v >> 8 : v & 0xff);
                }
                bad_ca += s0[at + b] != want;
                if (tma)
                    bad_tma += s1[at + b] != s0[at + b];
            }
        }
    }
    printf("tma   page_size %3d j0 %3d kv_end %3d%-16s by %-8s  cp.async stage %s (%ld bytes "
           "wrong)%s",
           ps, j0, kv_end, bad ? " (bad page id)" : "", tma ? "TMA" : "cp.async",
           bad_ca ? "FAIL" : "PASS", bad_ca, tma ? "" : "\n");
    if (tma)
        printf(", TMA stage = cp.async stage %s (%ld bytes differ)\n", bad_tma ? "FAIL" : "PASS",
               bad_tma);
    fails += bad_ca != 0;
    fails += bad_tma != 0;
    cudaFree(dkv);
    cudaFree(dpt);
    cudaFree(dnan);
    cudaFree(dout);
    return fails;
}

static uint64_t rng_state;
static double urand(void) /* [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

template <typename T> static T to_t(float x);
template <> __nv_bfloat16 to_t<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __half to_t<__half>(float x) { return __float2half_rn(x); }
template <typename T> static float from_t(T x);
template <> float from_t<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> float from_t<__half>(__half x) { return __half2float(x); }

/* |err| <= tol * (sum of |terms| of the dot product) + 1e-30, the bound of an fp32 sum of 16-bit
 * products in any order: tol = depth x 2^-24 with room. */
struct err_stat {
    double max_abs = 0, max_rel = 0;
    bool ok = true;
    void add(double got, double ref, double mag, int depth)
    {
        const double a = fabs(got - ref);
        const double bound = (double)depth * ldexp(1.0, -23) * mag + 1e-30;
        if (!(a <= bound)) /* NaN fails */
            ok = false;
        if (a > max_abs || a != a)
            max_abs = a;
        const double rel = mag > 0 ? a / mag : a;
        if (rel > max_rel || rel != rel)
            max_rel = rel;
    }
};

/* T: q's type; Kv: the cache's (T, or uint8_t: FP8 E4M3 bytes); q_exp: q scaled by 2^q_exp. */
template <typename T, typename Kv = T>
static int run_case(const char *tname, int page_size, int tail, uint64_t seed, int q_exp = 0)
{
    constexpr bool FP8 = sizeof(Kv) == 1;
    using MT = std::conditional_t<FP8, __half, T>; /* the products' type */
    rng_state = seed * 0x9e3779b97f4a7c15ull + (uint64_t)page_size * 77 + (uint64_t)tail + 1;
    const int j0 = 192; /* the tile's first KV row: a split start, a multiple of 32 */
    const int kv_len = j0 + TILE_N;
    const int kv_end = kv_len - tail;
    const int max_pages = (kv_len + page_size - 1) / page_size;
    const int num_pages = max_pages + 5;
    /* a shuffled page table: logical page i lives in physical page perm[i] */
    std::vector<int32_t> perm(num_pages);
    for (int i = 0; i < num_pages; i++)
        perm[i] = i;
    for (int i = num_pages - 1; i > 0; i--) {
        const int k = (int)((urand() + 1.0) * 0.5 * (i + 1)) % (i + 1);
        const int x = perm[i];
        perm[i] = perm[k];
        perm[k] = x;
    }
    std::vector<T> hq((size_t)BM * W);
    std::vector<Kv> hkv((size_t)num_pages * page_size * W);
    for (auto &x : hq)
        x = to_t<T>(ldexpf((float)urand(), q_exp));
    for (auto &x : hkv) {
        if constexpr (FP8) { /* any byte but the two NaN ones */
            do
                x = (uint8_t)((urand() + 1.0) * 128.0);
            while ((x & 0x7f) == 0x7f);
        } else {
            x = to_t<T>((float)urand());
        }
    }
    std::vector<float> hp((size_t)BM * TILE_N);
    for (auto &x : hp)
        x = (float)(urand() + 1.0) * 0.5f;
    std::vector<Kv> nan_row(W);
    for (auto &x : nan_row) {
        if constexpr (FP8)
            x = 0x7f;
        else
            x = to_t<T>(NAN);
    }

    T *dq;
    Kv *dkv, *dnan;
    int32_t *dpt;
    float *ds, *dp, *dout, *du;
    CK(cudaMalloc(&dq, hq.size() * sizeof(T)));
    CK(cudaMalloc(&dkv, hkv.size() * sizeof(Kv)));
    CK(cudaMalloc(&dnan, W * sizeof(Kv)));
    CK(cudaMalloc(&du, sizeof(float)));
    CK(cudaMalloc(&dpt, max_pages * sizeof(int32_t)));
    CK(cudaMalloc(&ds, (size_t)BM * TILE_N * 4));
    CK(cudaMalloc(&dp, (size_t)BM * TILE_N * 4));
    CK(cudaMalloc(&dout, (size_t)BM * DL * 4));
    CK(cudaMemcpy(dq, hq.data(), hq.size() * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkv, hkv.data(), hkv.size() * sizeof(Kv), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dnan, nan_row.data(), W * sizeof(Kv), cudaMemcpyHostToDevice));
    const float one = 1.0f;
    CK(cudaMemcpy(du, &one, sizeof one, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpt, perm.data(), max_pages * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dp, hp.data(), hp.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(ds, 0xff, (size_t)BM * TILE_N * 4));
    CK(cudaMemset(dout, 0xff, (size_t)BM * DL * 4));

    mlav_flash_params p = pool_params(dkv, dpt, page_size, max_pages, num_pages, dnan);
    using KvDev = std::conditional_t<FP8, __nv_fp8_e4m3, T>;
    CK(cudaFuncSetAttribute(check_kernel<T, KvDev>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem90::BYTES));
    check_kernel<T, KvDev><<<1, 384, smem90::BYTES>>>(p, dq, j0, kv_end, ds, dp, dout, du);
    CK(cudaGetLastError());
    /* at most 30 s: a deadlocked kernel (an mbarrier phase never completed) ends the run */
    for (long spins = 0; cudaStreamQuery(0) == cudaErrorNotReady; spins++) {
        if (spins > 30000) {
            printf("FAIL: %s page_size %d: the kernel did not finish in 30 s (deadlock?)\n",
                   tname, page_size);
            exit(1);
        }
        usleep(1000);
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> hs((size_t)BM * TILE_N), ho((size_t)BM * DL);
    CK(cudaMemcpy(hs.data(), ds, hs.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ho.data(), dout, ho.size() * 4, cudaMemcpyDeviceToHost));
    float unshift = 1.0f; /* BF16 q over FP8: S as computed is the true S times 2^-shift */
    CK(cudaMemcpy(&unshift, du, sizeof unshift, cudaMemcpyDeviceToHost));
    for (auto &x : hs)
        x *= unshift;

    /* the reference: key n of the tile is KV row j0 + n, zero past kv_end */
    const auto kv_at = [&](int n, int d) -> double {
        const int j = j0 + n;
        if (j >= kv_end)
            return 0.0;
        const size_t row = (size_t)perm[j / page_size] * page_size + j % page_size;
        if constexpr (FP8)
            return mlav_e4m3_to_f32(hkv[row * W + d]);
        else
            return from_t<T>(hkv[row * W + d]);
    };
    err_stat es[2], eo[2];
    std::vector<double> rs((size_t)BM * TILE_N), ro((size_t)BM * DL);
    for (int r = 0; r < BM; r++)
        for (int n = 0; n < TILE_N; n++) {
            double acc = 0, mag = 0;
            for (int d = 0; d < W; d++) {
                const double x = (double)from_t<T>(hq[(size_t)r * W + d]) * kv_at(n, d);
                acc += x;
                mag += fabs(x);
            }
            rs[(size_t)r * TILE_N + n] = acc;
            es[n / S_KEYS].add(hs[(size_t)r * TILE_N + n], acc, mag, W);
        }
    for (int r = 0; r < BM; r++)
        for (int c = 0; c < DL; c++) {
            double acc = 0, mag = 0;
            for (int n = 0; n < TILE_N; n++) {
                const double x =
                    (double)from_t<MT>(to_t<MT>(hp[(size_t)r * TILE_N + n])) * kv_at(n, c);
                acc += x;
                mag += fabs(x);
            }
            ro[(size_t)r * DL + c] = acc;
            eo[c / O_COLS].add(ho[(size_t)r * DL + c], acc, mag, TILE_N);
        }
    /* on a failure, the first few wrong elements and where (if anywhere) the reference holds
     * the value the kernel gave: a layout or descriptor error shows as a permutation */
    const auto explain = [&](const char *what, const std::vector<float> &got,
                             const std::vector<double> &ref, int cols) {
        int shown = 0;
        for (size_t i = 0; i < got.size() && shown < 4; i++) {
            const double g = got[i], e = ref[i];
            if (fabs(g - e) <= 1e-3 * (fabs(e) + 1e-2))
                continue;
            long at = -1;
            for (size_t k = 0; k < ref.size() && at < 0; k++)
                if (fabs(g - ref[k]) <= 1e-3 * (fabs(ref[k]) + 1e-2))
                    at = (long)k;
            printf("    %s (row %zu, col %zu): got %.6g, want %.6g; ", what, i / cols, i % cols, g,
                   e);
            if (at >= 0)
                printf("the reference's (row %ld, col %ld) holds it\n", at / cols, at % cols);
            else
                printf("no reference element holds it\n");
            shown++;
        }
    };
    if (!es[0].ok || !es[1].ok)
        explain("S", hs, rs, TILE_N);
    if (!eo[0].ok || !eo[1].ok)
        explain("O", ho, ro, DL);
    int fails = 0;
    const char *names[4] = {"S keys 0-31 (wg 0)", "S keys 32-63 (wg 1)", "O cols 0-255 (wg 0)",
                            "O cols 256-511 (wg 1)"};
    const err_stat *all[4] = {&es[0], &es[1], &eo[0], &eo[1]};
    for (int i = 0; i < 4; i++) {
        printf("%-5s page_size %2d kv_end %3d  %-22s max abs %.3e  max rel %.3e  %s\n", tname,
               page_size, kv_end, names[i], all[i]->max_abs, all[i]->max_rel,
               all[i]->ok ? "PASS" : "FAIL");
        fails += !all[i]->ok;
    }
    cudaFree(dq);
    cudaFree(dkv);
    cudaFree(dnan);
    cudaFree(dpt);
    cudaFree(ds);
    cudaFree(dp);
    cudaFree(dout);
    cudaFree(du);
    return fails;
}

int main(int argc, char **argv)
{
    const uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 0x5eed90a1ull;
    int dev = 0, n = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_sm90_layouts_gpu: no CUDA device, skipped\n");
        return 77;
    }
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("test_sm90_layouts_gpu: seed 0x%llx, device %s (cc %d.%d), shared memory %u bytes\n",
           (unsigned long long)seed, prop.name, prop.major, prop.minor, (unsigned)smem90::BYTES);
    if (prop.major != 9 || prop.minor != 0) {
        printf("skipped: needs a cc 9.0 device (sm_90a code)\n");
        return 77;
    }
    int fails = 0;
    for (int ps : {1, 64})
        for (int tail : {0, 24}) {
            fails += run_case<__nv_bfloat16>("bf16", ps, tail, seed);
            fails += run_case<__half>("f16", ps, tail, seed);
            fails += run_case<__half, uint8_t>("f16/e4m3", ps, tail, seed);
            fails += run_case<__nv_bfloat16, uint8_t>("bf16/e4m3", ps, tail, seed, 100);
        }
    /* whole tiles inside a page by TMA (at a page's start, its middle, a slot of no alignment),
     * and the rule's refusals: a tile across pages, a split's partial last tile, a page id
     * outside the pool (MLAV90_TMA=0: the path compiled out, nothing to check) */
    if (MLAV90_TMA) {
        fails += run_tma_case(64, 192, 256, false, true, seed);
        fails += run_tma_case(128, 192, 320, false, true, seed);
        fails += run_tma_case(128, 40, 320, false, true, seed);
        fails += run_tma_case(256, 160, 600, false, true, seed);
        fails += run_tma_case(128, 96, 320, false, false, seed);
        fails += run_tma_case(64, 192, 250, false, false, seed);
        fails += run_tma_case(64, 192, 256, true, false, seed);
    } else {
        printf("tma   the TMA path compiled out (MLAV90_TMA=0): nothing to check\n");
    }
    printf("%s (%d failed products and checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
