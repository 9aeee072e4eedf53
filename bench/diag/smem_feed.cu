/* How many shared-memory bytes per mma.sync can one SM feed at the tensor rate? A loop of 16
 * m16n8k16 BF16 MMAs per warp (8 independent accumulators, 8 warps per block, one block per SM:
 * the flash kernel's shape) plus U units of operand traffic, swept over U. Each unit's result is
 * the B operand of the MMAs, so ptxas can neither drop it nor hoist it (check the loop with
 * bench/diag/sass_loops.py). Units, per warp:
 *   ldsm    : one ldmatrix.x4 (512 bytes read, 4 wavefronts), as the kernel reads K, V and P
 *   lds     : one ld.shared.v4 (512 bytes read), as the S exchange reads its partial sums
 *   sts+lds : one st.shared.v4 and one ld.shared.v4 (1,024 bytes), the exchange's round trip
 *   sts     : one st.shared.v4 (512 bytes written; the B operand is then the stored values)
 *   cp.async: one 16-byte cp.async per lane from a buffer in the L2 (512 bytes written), one
 *             commit group per iteration and up to 16 in flight (about 3,000 cycles of the
 *             tensor-bound loop, so the L2's latency is covered; the copies' data is never read,
 *             so slots may be overwritten while in flight)
 *   cp.ca   : as cp.async, through the L1 (.ca) instead of around it (.cg)
 *   cp.zf   : as cp.async, with the source size in a register (the zero-fill form the flash
 *             kernel's gather uses)
 *   bulk    : lane 0 issues one 512-byte cp.async.bulk (the bulk-copy engine, sm_90 and sm_120)
 *             from the same buffer, completing on an mbarrier; 28 iterations in flight
 *   bulk1   : as bulk, but the iteration's U units are one copy of U x 512 bytes
 *   movm    : four movmatrix.trans (a register transpose of 512 bytes, nothing read: does it
 *             share the shared-memory pipe?)
 * Prints cycles per iteration (median over blocks, clock64) and TFLOP/s from events, as a
 * fraction of the unit-free loop measured in the same run. No correctness: values are bit
 * patterns, only the issue rate counts. Built by hand, like the other .cu files here (sm_90 or
 * later: the bulk kinds need it):
 *   nvcc -O3 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_120,code=sm_120 \
 *        -o smem_feed bench/diag/smem_feed.cu && ./smem_feed
 * H200 results and what they say about the flash kernel: docs/PERFORMANCE.md#smem-feed. */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));           \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

namespace {

constexpr int WARPS = 8, MMAS = 16, ACC = 8, ITERS = 4096;
constexpr int REGION = 8192; /* bytes per warp (16 slots of 512), 64 KB per block */
enum { LDSM, LDS, STSLDS, STS, CPASYNC, CPCA, CPZF, BULK, BULK1, MOVM, KINDS };
const char *kind_name[KINDS] = {"ldsm", "lds", "sts+lds", "sts", "cp.async", "cp.ca", "cp.zf",
                                "bulk", "bulk1", "movm"};
__host__ __device__ constexpr bool is_cp(int k) { return k == CPASYNC || k == CPCA || k == CPZF; }

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* One unit: four 32-bit registers of B operand (two m16n8k16 B fragments). */
/* `stride` is 512 at run time, a kernel argument so that ptxas cannot prove that two slots of an
 * unrolled loop are the same address and load once (a first build with the stride a constant
 * loaded 2 of 8 units per iteration at U = 8). */
template <int KIND>
__device__ __forceinline__ void unit(uint32_t (&r)[4], uint32_t region, int slot, uint32_t lane,
                                     uint32_t seed, uint32_t stride, const uint4 *gsrc) {
    uint32_t addr = region + ((uint32_t)slot * stride & (REGION - 1)) + lane * 16u;
    if (KIND == LDSM) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    } else if (KIND == LDS) {
        asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    } else if (KIND == STSLDS) {
        /* store to the slot after the one read, so the load never waits on its own store */
        uint32_t st = region + ((uint32_t)(slot + 1) * stride & (REGION - 1)) + lane * 16u;
        asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(st), "r"(seed),
                     "r"(seed ^ 1u), "r"(seed ^ 2u), "r"(seed ^ 3u)
                     : "memory");
        asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
    } else if (is_cp(KIND)) {
#pragma unroll
        for (int i = 0; i < 4; i++) r[i] = seed + (uint32_t)(i + 4 * slot) * 0x00010001u;
        const uint4 *src = gsrc + (((uint32_t)slot * stride & (REGION - 1)) >> 4) + lane;
        if (KIND == CPASYNC)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(src) : "memory");
        else if (KIND == CPCA)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(src) : "memory");
        else /* src bytes from a run-time value: 16, as stride / 32 */
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src),
                         "r"(stride >> 5)
                         : "memory");
    } else if (KIND == BULK || KIND == BULK1) {
#pragma unroll
        for (int i = 0; i < 4; i++) r[i] = seed + (uint32_t)(i + 4 * slot) * 0x00010001u;
        /* the copies are issued by the loop, which owns the mbarriers */
    } else if (KIND == STS) {
#pragma unroll
        for (int i = 0; i < 4; i++) r[i] = seed + (uint32_t)(i + 4 * slot) * 0x00010001u;
        asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                     "r"(r[2]), "r"(r[3])
                     : "memory");
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++)
            asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n"
                         : "=r"(r[i])
                         : "r"(seed + (uint32_t)(i + 4 * slot) * 0x00010001u));
    }
}

constexpr int BARS = 32, BULK_AHEAD = 28; /* mbarriers per warp (bulk), after the warps' regions */

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity)
                 : "memory");
}

/* U units per iteration, double-buffered one iteration ahead (the kernel loads its fragments
 * ahead too). MMA m uses B fragment m mod 2U, so with U units each fragment feeds 8 / U MMAs;
 * U <= 8, or some units would feed no MMA and ptxas would drop them. */
template <int KIND, int U>
__global__ void __launch_bounds__(WARPS * 32, 1) feed(int iters, uint32_t stride,
                                                      const uint4 *gbuf, float *sink,
                                                      long long *cycles) {
    extern __shared__ __align__(16) uint32_t smem[];
    for (int i = threadIdx.x; i < WARPS * REGION / 4; i += blockDim.x)
        smem[i] = 0x3c003c00u ^ (uint32_t)(i & 0x00ff00ffu); /* small finite bf16 pairs */
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const uint32_t region = (uint32_t)__cvta_generic_to_shared(smem) + warp * REGION;
    const uint32_t bars = (uint32_t)__cvta_generic_to_shared(smem) + WARPS * REGION + warp * BARS * 8;
    constexpr bool bulk = KIND == BULK || KIND == BULK1;
    if (bulk && lane == 0) {
        for (int i = 0; i < BARS; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bars + i * 8) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const uint4 *gsrc = gbuf + (size_t)(blockIdx.x * WARPS + warp) * (REGION / 16);
    uint32_t a[ACC][4];
#pragma unroll
    for (int i = 0; i < ACC; i++) /* distinct per accumulator, or ptxas merges them */
#pragma unroll
        for (int j = 0; j < 4; j++) a[i][j] = (0x3c003c00u + lane * 0x00010001u) ^ (uint32_t)(i * 4 + j);
    float c[ACC][4] = {};
    static_assert(U <= MMAS / 2, "every unit feeds an MMA");
    constexpr int UB = U > 0 ? U : 1;
    uint32_t cur[UB][4], nxt[UB][4];
#pragma unroll
    for (int u = 0; u < UB; u++)
#pragma unroll
        for (int j = 0; j < 4; j++) cur[u][j] = nxt[u][j] = 0x3b003b00u ^ (lane + u * 4 + j);
#pragma unroll
    for (int u = 0; u < U; u++) unit<KIND>(cur[u], region, u, lane, lane, stride, gsrc);
    __syncwarp();
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        if (bulk) {
            const uint32_t bar = bars + (it % BARS) * 8;
            if (lane == 0) {
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                             "r"(U * 512)
                             : "memory");
                constexpr int copies = KIND == BULK ? U : 1, bytes = U * 512 / copies;
#pragma unroll
                for (int u = 0; u < copies; u++) {
                    /* k x 512 modulo a multiple of 512 that keeps the copy inside the region */
                    const uint32_t off =
                        (uint32_t)((it + 1) * copies + u) * stride % (uint32_t)(REGION - bytes + 512);
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                                 " [%0], [%1], %3, [%2];\n" ::"r"(region + off),
                                 "l"(gsrc + off / 16), "r"(bar), "n"(bytes)
                                 : "memory");
                }
            }
            if (it >= BULK_AHEAD)
                mbar_wait(bars + ((it - BULK_AHEAD) % BARS) * 8, ((it - BULK_AHEAD) / BARS) & 1);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            unit<KIND>(nxt[u], region, (it + 1) * U + u, lane, lane ^ (uint32_t)it, stride, gsrc);
        if (is_cp(KIND)) {
            asm volatile("cp.async.commit_group;\n" ::: "memory");
            asm volatile("cp.async.wait_group 15;\n" ::: "memory");
        }
#pragma unroll
        for (int m = 0; m < MMAS; m++) {
            const int f = U > 0 ? m % (2 * U) : 0;
            mma(c[m % ACC], a[m % ACC], cur[f / 2][2 * (f % 2)], cur[f / 2][2 * (f % 2) + 1]);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < 4; j++) cur[u][j] = nxt[u][j];
    }
    long long t1 = clock64();
    if (is_cp(KIND)) asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (bulk) /* no copy may be in flight when the block exits */
        for (int it = iters > BULK_AHEAD ? iters - BULK_AHEAD : 0; it < iters; it++)
            mbar_wait(bars + (it % BARS) * 8, (it / BARS) & 1);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ACC; i++) s += c[i][0] + c[i][1] + c[i][2] + c[i][3];
    if (s == 12345.f) sink[blockIdx.x] = s; /* keeps every MMA live */
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

struct result {
    double cyc_per_iter, tflops;
};

/* what every launch needs */
struct setup {
    int sms;
    size_t smem;
    const uint4 *gbuf; /* [sms][WARPS][REGION / 16]: the cp.async source, 17 MB on the H200 */
    float *sink;
    long long *cyc; /* [sms] */
};

template <int KIND, int U> int measure(const setup &s, result *out) {
    auto k = feed<KIND, U>;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s.smem));
    k<<<s.sms, WARPS * 32, s.smem>>>(64, 512u, s.gbuf, s.sink, s.cyc); /* warm-up */
    CK(cudaGetLastError());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 5;
    CK(cudaEventRecord(e0));
    for (int r = 0; r < reps; r++) k<<<s.sms, WARPS * 32, s.smem>>>(ITERS, 512u, s.gbuf, s.sink, s.cyc);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    std::vector<long long> cyc(s.sms);
    CK(cudaMemcpy(cyc.data(), s.cyc, s.sms * sizeof(long long), cudaMemcpyDeviceToHost));
    std::sort(cyc.begin(), cyc.end());
    double flop = (double)reps * s.sms * WARPS * ITERS * MMAS * 2.0 * 16 * 8 * 16;
    out->cyc_per_iter = (double)cyc[s.sms / 2] / ITERS;
    out->tflops = flop / (ms * 1e-3) / 1e12;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return 0;
}

/* bytes of shared-memory traffic per unit, per warp */
int unit_bytes(int kind) { return kind == STSLDS ? 1024 : kind == MOVM ? 0 : 512; }

template <int KIND, int U> int row(const setup &s, const result &base) {
    result r;
    if (measure<KIND, U>(s, &r)) return 1;
    double bpm = (double)U * unit_bytes(KIND) / MMAS;                   /* per MMA, per warp */
    double bpc = (double)U * unit_bytes(KIND) * WARPS / r.cyc_per_iter; /* per SM and cycle */
    printf("%-8s %2d %7.0f %9.1f %9.1f %7.3f %9.1f\n", kind_name[KIND], U, bpm, r.cyc_per_iter,
           r.tflops, r.tflops / base.tflops, bpc);
    return 0;
}

template <int KIND> int sweep(const setup &s, const result &base) {
    return row<KIND, 1>(s, base) || row<KIND, 2>(s, base) || row<KIND, 3>(s, base) ||
           row<KIND, 4>(s, base) || row<KIND, 5>(s, base) || row<KIND, 6>(s, base) ||
           row<KIND, 8>(s, base);
}

} // namespace

int main() {
    int dev = 0, sms = 0, per_sm = 0, optin = 0, clk = 0;
    CK(cudaGetDevice(&dev));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));
    /* more than half an SM's shared memory: one block per SM, as the flash kernel runs */
    size_t smem = std::max<size_t>((size_t)WARPS * (REGION + BARS * 8), (size_t)per_sm / 2 + 1024);
    if (smem > (size_t)optin) {
        fprintf(stderr, "needs %zu bytes of shared memory per block, device allows %d\n", smem, optin);
        return 1;
    }
    setup s{sms, smem, nullptr, nullptr, nullptr};
    uint4 *gbuf;
    const size_t gbytes = (size_t)sms * WARPS * REGION;
    CK(cudaMalloc(&gbuf, gbytes));
    CK(cudaMemset(gbuf, 0x3c, gbytes));
    s.gbuf = gbuf;
    CK(cudaMalloc(&s.sink, sms * sizeof(float)));
    CK(cudaMalloc(&s.cyc, sms * sizeof(long long)));
    printf("%s, sm_%d%d, %d SMs, %d kHz max clock; %d warps x %d MMAs per iteration, %zu B smem\n",
           p.name, p.major, p.minor, sms, clk, WARPS, MMAS, smem);
    result base;
    if (measure<LDSM, 0>(s, &base)) return 1;
    printf("kind   units  B/mma  cyc/iter    TFLOP/s  of base  B/clk/SM\n");
    printf("%-8s %2d %7d %9.1f %9.1f %7.3f %9.1f\n", "none", 0, 0, base.cyc_per_iter, base.tflops,
           1.0, 0.0);
    if (sweep<LDSM>(s, base) || sweep<LDS>(s, base) || sweep<STSLDS>(s, base) ||
        sweep<STS>(s, base) || sweep<CPASYNC>(s, base) || sweep<CPCA>(s, base) ||
        sweep<CPZF>(s, base) || sweep<BULK>(s, base) ||
        sweep<BULK1>(s, base) ||
        sweep<MOVM>(s, base))
        return 1;
    return 0;
}
