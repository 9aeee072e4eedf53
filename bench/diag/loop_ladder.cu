/* The flash kernel's per-tile instruction mix, built up one piece at a time, to measure what each
 * piece costs and what rate the mix can reach at all on this GPU: a "ladder" of synthetic loops
 * with the product kernel's shapes (64 rows, 16-key tiles, two groups of 4 warps, Q fragments and
 * the O accumulator in registers, the same shared-memory layout and ldmatrix patterns), one
 * block per SM, no masking, no rescale, no epilogue.
 *   rung 1  the 68 MMAs of a warp-tile (S: 4 chains of 9; P V: 32) with K, rope Q, P and V
 *           fragments from shared memory by ldmatrix, as the kernel loads them (the register-only
 *           rate is main()'s first line)
 *   rung 2  + the S reduce-scatter through shared memory, the softmax weights, P stored, and the
 *           group's two barriers per tile (exchange, vote)
 *   rung 3  + the page-size-1 gather by cp.async into the 4-buffer ring two tiles ahead, one
 *           page id a tile ahead, and the "tile full" barriers between the groups
 *   rung 4  rung 3 without rung 2's exchange and barriers (the gather alone on top of rung 1)
 *   rung 5  rung 1 plus the group's two barriers per tile, without the exchange and softmax
 *   rung 6  rung 3 rotated to one group barrier per tile: S of tile t, its exchange stores, one
 *           barrier (which also publishes P of tile t - 1 and carries the vote), P V of tile t - 1,
 *           then tile t's softmax. Needs the exchange and P areas twice (114,688 B in all, past
 *           sm_120's 101,376: a what-if, not a kernel) and, in a real kernel, a fifth KV buffer:
 *           here the gather may overwrite a buffer the other group still reads, which costs
 *           nothing in time and the values are not used
 *   rung 7  rung 6 without the gather (rung 2 rotated)
 *   rung 8  rung 4 with a flat gather: the tile's 16 x 72 chunks in order over the block's
 *           threads, so that a warp's copy covers 512 contiguous bytes of one row (or two) in
 *           global and shared memory, not 256 bytes of each of two rows; every warp holds the
 *           tile's 16 page ids in lanes 0-15 and takes a chunk's by shuffle
 *   rung 9  rung 3 with the flat gather
 *   rung 10 rung 2 with the exchange in 16 bits (8 bytes per lane and slot instead of 16): what
 *           halving the exchange's shared-memory traffic would buy (fp16 partial scores are not
 *           accurate enough for a kernel; a what-if)
 *   rung 11 rung 2 without the exchange's stores and loads (barriers, softmax and P kept; the
 *           three S blocks not exchanged are summed into a sink, or ptxas drops their MMAs)
 * Every rung cycles through the 4 KV buffers and stores one word per warp and tile, so that
 * ptxas can neither merge the loads of consecutive tiles nor the S of identical tiles (a first
 * version without them ran "faster than the tensor pipe": ptxas had computed S once per four
 * tiles).
 * Each rung runs with both groups (8 warps, 2 per scheduler) and with group 0 alone (4 warps).
 * Diagnostic only; results are not attention.
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc/cuda -o loop_ladder bench/diag/loop_ladder.cu
 *   ./loop_ladder [tiles per block (1024)] [operand fill (1)] [pool rows (262144)] */
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#include "mma.cuh"

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

namespace {
using T = __nv_bfloat16;
using MTY = mlav::mma_type<T>;
constexpr int W = 576, DL = 512, RS = W + 8, BN = 16, STAGES = 4, AHEAD = 2;
constexpr int QUARTERS = 4, GROUP_ROWS = 32, MT = 2, NTS = 2, COLS_Q = 128, KSTEPS = 8;
constexpr int ROPE_Q = 16, QPS = 64 + 8, PS = BN + 8, CHUNKS = W / 8;
constexpr int SKV = BN * RS, SX = 2 * QUARTERS * 3 * 32 * 4, SP = 2 * GROUP_ROWS * PS;
constexpr int SQ = 64 * QPS;
constexpr size_t SMEM = (size_t)STAGES * SKV * 2 + SX * 4 + SP * 2 + SQ * 2;
constexpr size_t SMEM_ROT = SMEM + SX * 4 + SP * 2; /* rungs 6, 7: second exchange and P areas */
constexpr size_t smem_of(int rung) { return rung == 6 || rung == 7 ? SMEM_ROT : SMEM; }

template <int RUNG, int GROUPS>
__global__ void __launch_bounds__(256, 1)
ladder(const T *pool, const int32_t *ptab, const T *init, int n_tiles, long long *cycles,
       float *sink)
{
    constexpr bool SYNC = RUNG == 2 || RUNG == 3 || RUNG == 9 || RUNG == 10 || RUNG == 11;
    constexpr bool XHALF = RUNG == 10, NOXCH = RUNG == 11;
    constexpr bool GATHER = RUNG == 3 || RUNG == 4 || RUNG == 6 || RUNG == 8 || RUNG == 9;
    constexpr bool BARS = RUNG == 5, ROT = RUNG == 6 || RUNG == 7, FLAT = RUNG == 8 || RUNG == 9;
    constexpr int NT = GROUPS * 128, TPR = NT / BN, STEPS = (CHUNKS + TPR - 1) / TPR;
    extern __shared__ __align__(16) unsigned char smem[];
    T *sKV = reinterpret_cast<T *>(smem);
    float *sX = reinterpret_cast<float *>(sKV + STAGES * SKV);
    T *sP = reinterpret_cast<T *>(sX + SX);
    T *sQ = sP + SP;
    const int tid = threadIdx.x, lane = tid & 31;
    const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    const int grp = warp / QUARTERS, dq = warp % QUARTERS, own_m = dq >> 1, own_n = dq & 1;
    const int g = lane >> 2, qd = lane & 3;
    const int bar = 1 + grp;
    const auto full_bar = [](int group, int stage) { return 3 + group * STAGES + stage; };
    /* operand values from the host (the fill mode: tensor-core speed may depend on them) */
    for (int i = tid; i < (int)(SMEM / 2); i += NT)
        reinterpret_cast<T *>(smem)[i] = init[i];
    __syncthreads();
    const uint32_t *init32 = reinterpret_cast<const uint32_t *>(init);

    const int32_t *bt = ptab + (size_t)blockIdx.x * n_tiles * BN;
    /* the row whose page id this thread loads: its own row, or (flat) row lane % 16 */
    const int g_row = FLAT ? (tid & 15) : tid / TPR, g_part = tid % TPR;
    const auto gather = [&](int stage, int32_t pg) {
        if (FLAT) {
#pragma unroll
            for (int k = 0; k < (BN * CHUNKS + NT - 1) / NT; k++) {
                const int c = tid + k * NT, row = c / CHUNKS, ch = c % CHUNKS;
                if (c < BN * CHUNKS) { /* warp-uniform: BN * CHUNKS is a multiple of 32 */
                    const int32_t pr = __shfl_sync(0xffffffffu, pg, row);
                    mlav::cp_async16(sKV + stage * SKV + row * RS + ch * 8,
                                     pool + (size_t)pr * W + ch * 8, 16);
                }
            }
            return;
        }
        T *d = sKV + stage * SKV + g_row * RS + g_part * 8;
        const T *s = pool + (size_t)pg * W + g_part * 8;
#pragma unroll
        for (int k = 0; k < STEPS; k++)
            if (g_part + k * TPR < CHUNKS)
                mlav::cp_async16(d + k * TPR * 8, s + k * TPR * 8, 16);
    };
    int32_t pg_next = 0;
    if (GATHER) {
        gather(0, bt[g_row]);
        mlav::cp_async_commit();
        gather(1, bt[BN + g_row]);
        mlav::cp_async_commit();
        pg_next = bt[2 * BN + g_row];
    }

    uint32_t qf[MT][KSTEPS][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                qf[i][kk][r] = init32[((i * KSTEPS + kk) * 4 + r) * 32 + lane];
    float o[MT][COLS_Q / 8][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int n = 0; n < COLS_Q / 8; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    float run_sum = 0.0f, s_sink = 0.0f;

    const int k_off =
        (((lane & 7) + ((lane >> 4) << 3)) ^ (own_n << 3)) * RS + ((lane >> 3) & 1) * 8;
    const int v_off = ((lane & 7) + ((lane >> 3) & 1) * 8) * RS + dq * COLS_Q + (lane >> 4) * 8;
    float *xg = sX + grp * (QUARTERS * 3 * 32 * 4);
    T *pg = sP + grp * GROUP_ROWS * PS;
    T *p_mine = pg + (own_m * 16 + g) * PS + own_n * 8 + qd * 2;
    /* rotated rungs: the second exchange and P areas, past the product's layout */
    float *sX1 = reinterpret_cast<float *>(smem + SMEM);
    T *sP1 = reinterpret_cast<T *>(sX1 + SX);
    const int x_alt = (int)(sX1 - sX), p_alt = (int)(sP1 - sP); /* offsets to the second areas */
    const int a_row = lane & 15, a_col = (lane >> 4) * 8;
    const int start_bar = 3 + GROUPS * STAGES;
    if (GATHER) {
        mlav::cp_async_wait<AHEAD - 1>();
        if (GROUPS == 2)
            mlav::named_barrier_arrive(full_bar(grp ^ 1, 0), NT);
    }
    if ((SYNC || ROT) && GROUPS == 2 && grp == 1)
        mlav::named_barrier(start_bar, NT);
    const auto pv = [&](const T *sK, const T *pgt) {
        uint32_t pa[MT][4];
        const T *vbase = sK + v_off;
#pragma unroll
        for (int i = 0; i < MT; i++)
            mlav::ldsm_x4(pa[i], pgt + ((i ^ own_m) * 16 + a_row) * PS + a_col);
#pragma unroll
        for (int st = 0; st < 8; st += 2) {
            uint32_t b0[4], b1[4];
            mlav::ldsm_x4_trans(b0, vbase + st * 16);
            mlav::ldsm_x4_trans(b1, vbase + (st + 1) * 16);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                MTY::mma(o[i][2 * st], pa[i], b0[0], b0[1]);
                MTY::mma(o[i][2 * st + 1], pa[i], b0[2], b0[3]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++) {
                MTY::mma(o[i][2 * st + 2], pa[i], b1[0], b1[1]);
                MTY::mma(o[i][2 * st + 3], pa[i], b1[2], b1[3]);
            }
        }
    };
    bool over_prev = false;
    __syncwarp();
    const long long c0 = clock64();

    for (int t = 0; t < n_tiles; t++) {
        const int stage = t % STAGES;
        if (GATHER)
            mlav::named_barrier(full_bar(grp, stage), GROUPS == 2 ? NT : 128);
        const T *sK = sKV + stage * SKV;
        float s[MT][NTS][4];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int n = 0; n < NTS; n++)
                s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
        {
            const T *kbase = sK + k_off + dq * COLS_Q;
            uint32_t bk[3][4];
            uint32_t qa[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
                mlav::ldsm_x4(qa[i], sQ + (grp * GROUP_ROWS + (i ^ own_m) * 16 + a_row) * QPS +
                                         dq * ROPE_Q + a_col);
            mlav::ldsm_x4(bk[2], sK + k_off + DL + dq * ROPE_Q);
            mlav::ldsm_x4(bk[0], kbase);
            mlav::ldsm_x4(bk[1], kbase + 16);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                MTY::mma(s[i][0], qa[i], bk[2][0], bk[2][1]);
                MTY::mma(s[i][1], qa[i], bk[2][2], bk[2][3]);
            }
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                const int slot = kk % 2;
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    MTY::mma(s[i][0], qf[i][kk], bk[slot][0], bk[slot][1]);
                    MTY::mma(s[i][1], qf[i][kk], bk[slot][2], bk[slot][3]);
                }
                if (kk + 2 < KSTEPS)
                    mlav::ldsm_x4(bk[slot], kbase + (kk + 2) * 16);
            }
        }
        if (GATHER) {
            if (t + AHEAD < n_tiles)
                gather((t + AHEAD) % STAGES, pg_next);
            pg_next = t + AHEAD + 1 < n_tiles ? bt[(t + AHEAD + 1) * BN + g_row] : 0;
            mlav::cp_async_commit();
        }
        if (ROT) {
            const int xo = (t & 1) * x_alt, po = (t & 1) * p_alt;
#pragma unroll
            for (int x = 1; x < QUARTERS; x++) {
                const float *v = s[x >> 1][x & 1];
                *reinterpret_cast<float4 *>(xg + xo + (((dq ^ x) * 3 + x - 1) * 32 + lane) * 4) =
                    make_float4(v[0], v[1], v[2], v[3]);
            }
            float sv[4] = {s[0][0][0], s[0][0][1], s[0][0][2], s[0][0][3]};
            /* one barrier: X(t) and P(t - 1) visible, and the vote of tile t - 1 */
            if (mlav::named_barrier_or(bar, 128, over_prev))
                s_sink += 1.0f;
            if (GROUPS == 2 && grp == 0 && t == 0)
                mlav::named_barrier_arrive(start_bar, NT);
            if (t > 0)
                pv(sKV + ((t - 1) % STAGES) * SKV, pg + ((t - 1) & 1) * p_alt);
#pragma unroll
            for (int slot = 0; slot < 3; slot++) {
                const float4 v = *reinterpret_cast<const float4 *>(
                    xg + xo + ((dq * 3 + slot) * 32 + lane) * 4);
                sv[0] += v.x, sv[1] += v.y, sv[2] += v.z, sv[3] += v.w;
            }
            float pvv[4];
            bool over = false;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                sv[e] *= 0.06f;
                over |= sv[e] > 1e30f;
                pvv[e] = mlav::exp2_fast(sv[e] - 1.0f);
            }
            *reinterpret_cast<uint32_t *>(p_mine + po) = MTY::pack(pvv[0], pvv[1]);
            *reinterpret_cast<uint32_t *>(p_mine + po + 8 * PS) = MTY::pack(pvv[2], pvv[3]);
            over_prev = over;
            run_sum += pvv[0] + pvv[1] + pvv[2] + pvv[3];
        } else if (SYNC) {
#pragma unroll
            for (int x = 1; x < QUARTERS && !NOXCH; x++) {
                const float *v = s[x >> 1][x & 1];
                if (XHALF) {
                    const __half2 lo = __floats2half2_rn(v[0], v[1]);
                    const __half2 hi = __floats2half2_rn(v[2], v[3]);
                    *reinterpret_cast<uint2 *>(xg + (((dq ^ x) * 3 + x - 1) * 32 + lane) * 2) =
                        make_uint2(*reinterpret_cast<const uint32_t *>(&lo),
                                   *reinterpret_cast<const uint32_t *>(&hi));
                } else {
                    *reinterpret_cast<float4 *>(xg + (((dq ^ x) * 3 + x - 1) * 32 + lane) * 4) =
                        make_float4(v[0], v[1], v[2], v[3]);
                }
            }
            float sv[4] = {s[0][0][0], s[0][0][1], s[0][0][2], s[0][0][3]};
            if (NOXCH)
                s_sink += s[0][1][0] + s[1][0][1] + s[1][1][2];
            mlav::named_barrier(bar, 128);
            if (GROUPS == 2 && grp == 0 && t == 0)
                mlav::named_barrier_arrive(start_bar, NT);
#pragma unroll
            for (int slot = 0; slot < 3 && !NOXCH; slot++) {
                if (XHALF) {
                    const uint2 u =
                        *reinterpret_cast<const uint2 *>(xg + ((dq * 3 + slot) * 32 + lane) * 2);
                    const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
                    const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
                    sv[0] += lo.x, sv[1] += lo.y, sv[2] += hi.x, sv[3] += hi.y;
                } else {
                    const float4 v =
                        *reinterpret_cast<const float4 *>(xg + ((dq * 3 + slot) * 32 + lane) * 4);
                    sv[0] += v.x, sv[1] += v.y, sv[2] += v.z, sv[3] += v.w;
                }
            }
            float pv[4];
            bool over = false;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                sv[e] *= 0.06f;
                over |= sv[e] > 1e30f;
                pv[e] = mlav::exp2_fast(sv[e] - 1.0f);
            }
            *reinterpret_cast<uint32_t *>(p_mine) = MTY::pack(pv[0], pv[1]);
            *reinterpret_cast<uint32_t *>(p_mine + 8 * PS) = MTY::pack(pv[2], pv[3]);
            if (mlav::named_barrier_or(bar, 128, over))
                s_sink += 1.0f;
            run_sum += pv[0] + pv[1] + pv[2] + pv[3];
        } else {
            s_sink += s[0][0][0] + s[1][1][3] + s[0][1][1] + s[1][0][2];
            if (BARS) {
                mlav::named_barrier(bar, 128);
                mlav::named_barrier(bar, 128);
            }
        }
        if (!SYNC && !ROT && lane == 0) /* see the top: keeps ptxas from merging tiles */
            xg[warp] = (float)t;
        if (GATHER) {
            mlav::cp_async_wait<AHEAD - 1>();
            if (GROUPS == 2 && t + 1 < n_tiles)
                mlav::named_barrier_arrive(full_bar(grp ^ 1, (t + 1) % STAGES), NT);
        }
        if (!ROT)
            pv(sK, pg);
    }
    if (ROT && n_tiles > 0) { /* the last tile's P V */
        mlav::named_barrier(bar, 128);
        pv(sKV + ((n_tiles - 1) % STAGES) * SKV, pg + ((n_tiles - 1) & 1) * p_alt);
    }
    __syncwarp();
    const long long c1 = clock64();
    mlav::cp_async_wait<0>();
    float acc = run_sum + s_sink;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int n = 0; n < COLS_Q / 8; n++)
            acc += o[i][n][0] + o[i][n][1] + o[i][n][2] + o[i][n][3];
    if (acc == -12345.0f)
        sink[blockIdx.x * NT + tid] = acc;
    if (tid == 0)
        cycles[blockIdx.x] = c1 - c0;
}

template <int RUNG, int GROUPS>
void run(const T *pool, const int32_t *ptab, const T *init, int n_tiles, int sms,
         long long *d_cyc, float *sink, double peak_tflops)
{
    auto kern = ladder<RUNG, GROUPS>;
    constexpr size_t smem = smem_of(RUNG);
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, kern));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    kern<<<sms, GROUPS * 128, smem>>>(pool, ptab, init, n_tiles, d_cyc, sink);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> ms_all;
    std::vector<long long> cyc(sms), med_all;
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(a));
        kern<<<sms, GROUPS * 128, smem>>>(pool, ptab, init, n_tiles, d_cyc, sink);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        ms_all.push_back(ms);
        CK(cudaMemcpy(cyc.data(), d_cyc, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
        std::sort(cyc.begin(), cyc.end());
        med_all.push_back(cyc[sms / 2]);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(ms_all.begin(), ms_all.end());
    std::sort(med_all.begin(), med_all.end());
    const double ms = ms_all[2];
    const double flop = (double)sms * n_tiles * (GROUPS * 32) * BN * 2.0 * (W + DL);
    const double tf = flop / (ms * 1e-3) / 1e12;
    /* medians of five launches: cycles per tile (of block medians), rate against the ceiling */
    printf("rung %d  groups %d  regs %3d  local %4zu B  cycles/tile %7.1f  %6.1f TFLOP/s  %.3f of "
           "ceiling\n",
           RUNG, GROUPS, fa.numRegs, (size_t)fa.localSizeBytes, (double)med_all[2] / n_tiles, tf,
           tf / peak_tflops);
}

/* the register-only rate; a, b from `init` when given, else the constants of bench_cuda.cu's
 * ceiling loop */
template <int ACC> __global__ void mma_peak(int iters, const uint32_t *init, float *sink)
{
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t a[4] = {0x3c003c00u + lane, 0x3c013c02u ^ lane, 0x3b803c00u, 0x3c003b80u};
    uint32_t b0 = 0x3b003b00u + lane, b1 = 0x3b013b02u;
    if (init) {
        for (int r = 0; r < 4; r++)
            a[r] = init[r * 32 + lane];
        b0 = init[128 + lane], b1 = init[160 + lane];
    }
    float acc[ACC][4] = {};
    for (int it = 0; it < iters; it++)
#pragma unroll
        for (int i = 0; i < ACC; i++)
            MTY::mma(acc[i], a, b0, b1);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ACC; i++)
        s += acc[i][0] + acc[i][1] + acc[i][2] + acc[i][3];
    if (s == -1.0f)
        sink[blockIdx.x] = s;
}
} // namespace

/* operand fills: 0 = the old constant pattern (small normals, every 13th zero), 1 = uniform
 * [-1, 1), 2 = zeros, 3 = uniform [-1, 1) with every other element zero */
static std::vector<T> make_fill(int mode, size_t n)
{
    std::vector<T> v(n);
    uint64_t x = 0x9E3779B97F4A7C15ull * (mode + 1);
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const float u = (float)((x >> 40) / 16777216.0 * 2.0 - 1.0);
        float f = 0.0f;
        if (mode == 0)
            f = 0.001f * (float)((i * 7) % 13);
        else if (mode == 1)
            f = u;
        else if (mode == 3)
            f = (i & 1) ? 0.0f : u;
        v[i] = __float2bfloat16(f);
    }
    return v;
}

static double peak_run(int sms, const uint32_t *init, float *sink)
{
    const int iters = 8192;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    mma_peak<4><<<sms, 256>>>(iters, init, sink);
    CK(cudaGetLastError());
    CK(cudaEventRecord(a));
    for (int r = 0; r < 5; r++)
        mma_peak<4><<<sms, 256>>>(iters, init, sink);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return 5.0 * sms * 256 / 32 * 4.0 * iters * 4096 / (ms * 1e-3) / 1e12;
}

int main(int argc, char **argv)
{
    const int n_tiles = argc > 1 ? atoi(argv[1]) : 1024;
    const int fill = argc > 2 ? atoi(argv[2]) : 1;
    /* pool rows: 2^18 (302 MB) puts every gather in DRAM, as for a lone request (q_len 1); 2^14
     * (19 MB) keeps the pool in the L2, as when 9 or 33 row tiles share each KV range */
    const size_t pool_rows = argc > 3 ? (size_t)atol(argv[3]) : (size_t)1 << 18;
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("%s, %d SMs, %d tiles per block, %zu B shared memory per block, fill %d, pool %zu rows "
           "(%.1f MB)\n",
           prop.name, sms, n_tiles, SMEM, fill, pool_rows, pool_rows * W * 2 / 1e6);
    T *pool, *init;
    int32_t *ptab;
    long long *d_cyc;
    float *sink;
    const size_t ptab_n = (size_t)sms * n_tiles * BN;
    CK(cudaMalloc(&pool, pool_rows * W * sizeof(T)));
    CK(cudaMalloc(&ptab, ptab_n * sizeof(int32_t)));
    CK(cudaMalloc(&d_cyc, sizeof(long long) * sms));
    CK(cudaMalloc(&sink, sizeof(float) * sms * 256));
    CK(cudaMalloc(&init, SMEM));
    {
        const std::vector<T> f = make_fill(fill, SMEM / 2);
        CK(cudaMemcpy(init, f.data(), SMEM, cudaMemcpyHostToDevice));
        /* the pool repeats the fill, so gathered tiles hold the same kind of values */
        for (size_t r0 = 0; r0 < pool_rows * W; r0 += SMEM / 2) {
            const size_t n = std::min(SMEM / 2, pool_rows * W - r0);
            CK(cudaMemcpy(pool + r0, f.data(), n * sizeof(T), cudaMemcpyHostToDevice));
        }
    }
    std::vector<int32_t> h(ptab_n);
    uint64_t x = 12345;
    for (auto &v : h) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v = (int32_t)((x >> 33) % pool_rows);
    }
    CK(cudaMemcpy(ptab, h.data(), ptab_n * sizeof(int32_t), cudaMemcpyHostToDevice));

    /* the ceiling in this run: 8 warps per SM, 4 accumulators each, the constants of the
     * bench's ceiling loop; then the same loop on this fill's values */
    const double peak = peak_run(sms, nullptr, sink);
    printf("mma.sync register-only, 8 warps/SM, 4 accumulators: constants %.1f TFLOP/s, "
           "this fill %.1f TFLOP/s\n",
           peak, peak_run(sms, reinterpret_cast<const uint32_t *>(init), sink));

    run<1, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<2, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<3, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<4, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<5, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<6, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<7, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<8, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<9, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<10, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<11, 2>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<1, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<2, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<3, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<4, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<5, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<6, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<7, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<8, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<9, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<10, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    run<11, 1>(pool, ptab, init, n_tiles, sms, d_cyc, sink, peak);
    CK(cudaFree(pool));
    CK(cudaFree(init));
    CK(cudaFree(ptab));
    CK(cudaFree(d_cyc));
    CK(cudaFree(sink));
    return 0;
}
