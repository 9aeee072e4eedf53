/* The math warpgroups' tensor-core stages on the shared operands (smem_layout.cuh), shared by
 * the kernel (kernel.cuh) and its check (tests/test_sm90_layouts_gpu.cu), so that the check runs
 * the kernel's descriptors and layouts:
 *   s_tile : S = Q K^T for the warpgroup's 32 of the tile's 64 keys, fp32 [64 x 32];
 *   store_p: a warpgroup's 16-bit P (its 32 keys) into a P tile; store_p_stsm: a whole tile's
 *            by stmatrix (seesaw/);
 *   pv_tile: O += P V for the warpgroup's 256 of the 512 output columns, fp32 [64 x 256].
 * Math warpgroup w (0, 1) scores keys [32 w, +32) and owns output columns [256 w, +256). */
#ifndef MLAV_CUDA_SM90_STAGES_CUH
#define MLAV_CUDA_SM90_STAGES_CUH

#include "smem_layout.cuh"
#include "wgmma.cuh"

namespace mlav90 {

constexpr int MATH_WGS = 2;
constexpr int S_KEYS = TILE_N / MATH_WGS;      /* 32 keys scored per warpgroup */
constexpr int O_COLS = DL / MATH_WGS;          /* 256 output columns per warpgroup */
constexpr int S_REGS = S_KEYS / 2;             /* 16 fp32 accumulators per thread */
constexpr int O_REGS = O_COLS / 2;             /* 128 */
constexpr int K_STEPS = W / 16;                /* 36 k16 steps of S */
constexpr int PV_STEPS = TILE_N / 16;          /* 4 k16 steps of P V */

/* S (fragments of m64n32: s[4 j + e] is row 16 warp + g + 8 (e >> 1), key 32 w + 8 j + 2 t +
 * (e & 1), g = lane / 4, t = lane % 4) from Q at shared address `sq` and the KV tile at `stage`:
 * issues and commits its 36 wgmmas as one group; `s` may be read after a wgmma_wait that covers
 * the group and fence_regs(s). */
template <typename T>
__device__ __forceinline__ void s_issue(float (&s)[S_REGS], uint32_t sq, uint32_t stage, int w)
{
    pin_regs(s); /* the accumulators' last accesses stay before the warpgroup fence */
    wgmma_fence();
    const uint32_t qd = desc_lo_k(sq), kd = desc_lo_k(stage + (uint32_t)w * (S_KEYS * 128));
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ks++) {
        const uint32_t kb = (uint32_t)(ks >> 2) * BLOCK_BYTES + (uint32_t)(ks & 3) * 32u;
        wgmma_ops<T, 0>::m64n32k16(s, desc_at(qd, kb), desc_at(kd, kb), ks != 0);
    }
    wgmma_commit();
}

/* s_issue, then wait for it. */
template <typename T>
__device__ __forceinline__ void s_tile(float (&s)[S_REGS], uint32_t sq, uint32_t stage, int w)
{
    s_issue<T>(s, sq, stage, w);
    wgmma_wait<0>();
    fence_regs(s);
}

/* This thread's P values (an S fragment: s_tile's layout over N / 2 keys from key0, converted to
 * T by `pack`, two keys a word) into the P tile at `sp`: 64 rows x 64 keys, one swizzled column
 * block. The caller fences the proxy and syncs the warpgroups that read it before pv_tile. */
template <int N, typename Pack>
__device__ __forceinline__ void store_p(unsigned char *sp, const float (&pv)[N], int key0,
                                        int warp, int lane, Pack pack)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < N / 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = 16 * warp + g + 8 * h, key = key0 + 8 * j + 2 * t;
            *reinterpret_cast<uint32_t *>(sp + sw128_elem(r, key)) =
                pack(pv[4 * j + 2 * h], pv[4 * j + 2 * h + 1]);
        }
}

/* store_p for a whole tile's P (fragments of m64n64, N = 32) at shared address `sp`, by
 * stmatrix: four m8n8.x4 stores a warp instead of 16 32-bit stores a thread. Store q takes key
 * blocks 2q and 2q + 1 (matrix m: key block 2q + m / 2, rows 8 (m % 2) .. of the warp's 16), so
 * register m holds pv[4 j + 2 h], pv[4 j + 2 h + 1], j = 2q + m / 2, h = m % 2: the fragment's
 * own pairs; lane l gives the 16-byte row of matrix l / 8, row l % 8, in the swizzled tile. */
template <int N, typename Pack>
__device__ __forceinline__ void store_p_stsm(uint32_t sp, const float (&pv)[N], int warp, int lane,
                                             Pack pack)
{
    static_assert(N == 32, "a whole 64-key tile's fragment");
    const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int q = 0; q < N / 8; q++) {
        uint32_t r[4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int j = 2 * q + (m >> 1), h = m & 1;
            r[m] = pack(pv[4 * j + 2 * h], pv[4 * j + 2 * h + 1]);
        }
        const uint32_t a = sp + sw128_elem(16 * warp + rr + 8 * (mi & 1), 8 * (2 * q + (mi >> 1)));
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a),
                     "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                     : "memory");
    }
}

/* O += P V (fragments of m64n256: o[4 j + e] is row 16 warp + g + 8 (e >> 1), column
 * 256 w + 8 j + 2 t + (e & 1)) from P at `sp` and V, the KV tile's first 512 features at
 * `stage`, read MN-major: issues and commits its 4 wgmmas as one group (pv_tile also waits). */
template <typename T>
__device__ __forceinline__ void pv_issue(float (&o)[O_REGS], uint32_t sp, uint32_t stage, int w)
{
    pin_regs(o); /* the rescale of O stays before the warpgroup fence */
    wgmma_fence();
    const uint32_t pd = desc_lo_k(sp);
    const uint32_t vd = desc_lo_mn(stage + (uint32_t)w * (O_COLS / COL_BLOCK) * BLOCK_BYTES,
                                   BLOCK_BYTES);
#pragma unroll
    for (int ks = 0; ks < PV_STEPS; ks++)
        wgmma_ops<T, 1>::m64n256k16(o, desc_at(pd, (uint32_t)ks * 32u),
                                    desc_at(vd, (uint32_t)ks * (16 * 128)), 1);
    wgmma_commit();
}

/* pv_issue with P from registers `pa` (pack_a: 4 a k16 step), which the hardware reads
 * asynchronously: the caller keeps them unchanged until a wait covers the group (pin_u32 after
 * it). */
template <typename T>
__device__ __forceinline__ void pv_rs_issue(float (&o)[O_REGS], const uint32_t (&pa)[16],
                                            uint32_t stage, int w)
{
    pin_regs(o);
    wgmma_fence();
    const uint32_t vd = desc_lo_mn(stage + (uint32_t)w * (O_COLS / COL_BLOCK) * BLOCK_BYTES,
                                   BLOCK_BYTES);
#pragma unroll
    for (int ks = 0; ks < PV_STEPS; ks++) {
        const uint32_t a[4] = {pa[4 * ks], pa[4 * ks + 1], pa[4 * ks + 2], pa[4 * ks + 3]};
        wgmma_ops<T, 1>::m64n256k16_rs(o, a, desc_at(vd, (uint32_t)ks * (16 * 128)), 1);
    }
    wgmma_commit();
}

template <typename T>
__device__ __forceinline__ void pv_tile(float (&o)[O_REGS], uint32_t sp, uint32_t stage, int w)
{
    pv_issue<T>(o, sp, stage, w);
    wgmma_wait<0>();
    fence_regs(o);
}

} // namespace mlav90

#endif
