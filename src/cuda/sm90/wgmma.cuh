/* wgmma (sm_90a warpgroup MMA) as the Hopper kernel uses it: shared-memory matrix descriptors of
 * the 128-byte-swizzled layouts (smem_layout.cuh), the warpgroup fence / commit / wait, and the
 * two instruction shapes, for BF16 and F16 operands with fp32 accumulators:
 *   m64n32k16  S = Q K^T: A (Q) and B (K) both K-major from shared memory;
 *   m64n64k16  the same over 64 keys (the seesaw kernel, seesaw/);
 *   m64n256k16 O += P V: A (P) K-major, B (V) MN-major (TRANS_B = 1: the KV tile's rows are
 *              keys, the reduction dimension of P V, and its features, V's columns, are
 *              contiguous).
 * Accumulator fragments (PTX ISA, "wgmma register fragment, m64nNk16 D"): warp w of the
 * warpgroup holds rows 16 w + g and 16 w + g + 8 (g = lane / 4); register 4 j + e holds column
 * 8 j + 2 (lane % 4) + (e & 1) of row 16 w + g + 8 (e >> 1). */
#ifndef MLAV_CUDA_SM90_WGMMA_CUH
#define MLAV_CUDA_SM90_WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "sync.cuh"

namespace mlav90 {

/* A matrix descriptor of a 128B-swizzled operand (layout type 1, bits 62-63) starting at shared
 * address `addr` (bits 0-13: addr / 16), with leading (bits 16-29) and stride (bits 32-45) byte
 * offsets in 16-byte units. The swizzle atoms (8 rows x 128 bytes) must be 1024-byte aligned in
 * the shared window, so the base offset (bits 49-51) is 0; a start address inside an atom (the
 * k16 steps of a K-major operand, 32 bytes apart) is swizzled by the hardware as the stores
 * were. K-major: LBO is unused (1 by convention), SBO = 1024 (from one 8-row group to the next).
 * MN-major: LBO = the bytes from one 64-element column block to the next, SBO = 1024 (from one
 * 8-row group of the reduction dimension to the next).
 * Held as two words: the low one (desc_lo: the start address and LBO) and DESC_HI (SBO 1024, the
 * swizzle), so that the operand `off` bytes further is one 32-bit add to the low word (desc_at):
 * inside the shared window addr / 16 stays below 2^14, so no carry reaches LBO. The kernels take
 * a low word per operand base and step it: built whole from each address, a descriptor took 11
 * uniform instructions beside its wgmma (docs/PERFORMANCE.md#hopper). */
constexpr uint32_t DESC_HI = ((1024u >> 4) & 0x3fffu) | (1u << 30);
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr, uint32_t lbo_bytes)
{
    return ((addr & 0x3ffffu) >> 4) | (((lbo_bytes >> 4) & 0x3fffu) << 16);
}
/* K-major (LBO unused: 1) and MN-major (LBO: the column blocks' distance) low words */
__device__ __forceinline__ uint32_t desc_lo_k(uint32_t addr)
{
    return desc_lo(addr, 16);
}
__device__ __forceinline__ uint32_t desc_lo_mn(uint32_t addr, uint32_t block_bytes)
{
    return desc_lo(addr, block_bytes);
}
/* The descriptor of the operand `off` bytes (a multiple of 16) past the one of low word `lo`. */
__device__ __forceinline__ uint64_t desc_at(uint32_t lo, uint32_t off)
{
    return ((uint64_t)DESC_HI << 32) | (uint64_t)(lo + (off >> 4));
}

/* Before the first wgmma and between any register access to an accumulator and a wgmma that
 * uses it. */
__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Pin an accumulator array's registers at this point of the program, so that the compiler
 * moves no access to them across a wgmma, its commit or its wait: after a wait, where no group
 * is in flight (it counts as a write of the registers). */
template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* Before a wgmma_fence: the accumulators' last writes stay before it (a read of each, so that
 * it defines nothing while another group is in flight; ptxas serializes the wgmmas when a
 * non-wgmma instruction writes a wgmma accumulator inside a pipeline stage, C7515). */
template <int N> __device__ __forceinline__ void pin_regs(const float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" ::"f"(d[i]) : "memory");
}

/* The same for 32-bit registers (a register-A wgmma's operands, held until its wait). */
template <int N> __device__ __forceinline__ void pin_u32(const uint32_t (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" ::"r"(d[i]) : "memory");
}

/* The instructions, per operand type. TRANS_B: 0 = B K-major, 1 = B MN-major. */
template <typename T, int TRANS_B> struct wgmma_ops;

/* The 128 accumulators of an m64n256 product: their operands in the instruction and their
 * constraints. */
#define MLAV90_D128                                                                                \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "             \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "             \
    "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "             \
    "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, "             \
    "%66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "             \
    "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, "             \
    "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "                 \
    "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "               \
    "%124, %125, %126, %127"
#define MLAV90_D128_OUT                                                                            \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),        \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),                  \
    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),                  \
    "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),                  \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),                  \
    "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),                  \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),                  \
    "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),                  \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),                  \
    "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),                  \
    "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]),                  \
    "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),                  \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),                  \
    "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),                  \
    "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),                  \
    "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),              \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),            \
    "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),            \
    "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),            \
    "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/* One operand type's instructions: T the CUDA type, PTX its name in wgmma ("bf16", "f16"). */
#define MLAV90_WGMMA_OPS(T, PTX)                                                                  \
template <int TRANS_B> struct wgmma_ops<T, TRANS_B> {                                             \
    static __device__ __forceinline__ void m64n32k16(float (&d)[16], uint64_t da,                 \
                                               uint64_t db, uint32_t accumulate)                  \
    {                                                                                             \
        asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %18, 0;\n"                               \
                     " wgmma.mma_async.sync.aligned.m64n32k16.f32." PTX "." PTX " {"              \
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "    \
                     "%16, %17, p, 1, 1, 0, %19;\n}\n"                                            \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),    \
                       "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),  \
                       "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                         \
                     : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_B));                          \
    }                                                                                             \
    /* m64n64k16, S over a whole 64-key tile (seesaw/s_product.cuh) */                            \
    static __device__ __forceinline__ void m64n64k16(float (&d)[32], uint64_t da,                 \
                                               uint64_t db, uint32_t accumulate)                  \
    {                                                                                             \
        asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %34, 0;\n"                               \
                     " wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " {"              \
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "                         \
                     "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "               \
                     "%24, %25, %26, %27, %28, %29, %30, %31"                                     \
                     "}, %32, %33, p, 1, 1, 0, %35;\n}\n"                                         \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]),                \
                       "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),                \
                       "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),           \
                       "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),           \
                       "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),           \
                       "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),           \
                       "+f"(d[30]), "+f"(d[31])                                                   \
                     : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_B));                          \
    }                                                                                             \
    static __device__ __forceinline__ void m64n256k16(float (&d)[128], uint64_t da,               \
                                               uint64_t db, uint32_t accumulate)                  \
    {                                                                                             \
        asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %130, 0;\n"                              \
                     " wgmma.mma_async.sync.aligned.m64n256k16.f32." PTX "." PTX " {"             \
                     MLAV90_D128 "}, %128, %129, p, 1, 1, 0, %131;\n}\n"                           \
                     : MLAV90_D128_OUT                                                            \
                     : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_B));                          \
    }                                                                                             \
    /* m64n256k16 with A from registers: per k16 step, 4 registers of two 16-bit values (the S
     * accumulators' fragment packed: seesaw/softmax.cuh, pack_a) */                               \
    static __device__ __forceinline__ void m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], \
                                                  uint64_t db, uint32_t accumulate)               \
    {                                                                                             \
        asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %133, 0;\n"                              \
                     " wgmma.mma_async.sync.aligned.m64n256k16.f32." PTX "." PTX " {"             \
                     MLAV90_D128 "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"         \
                     : MLAV90_D128_OUT                                                            \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate),     \
                       "n"(TRANS_B));                                                             \
    }                                                                                             \
};

MLAV90_WGMMA_OPS(__nv_bfloat16, "bf16")
MLAV90_WGMMA_OPS(__half, "f16")
#undef MLAV90_WGMMA_OPS
#undef MLAV90_D128
#undef MLAV90_D128_OUT
} // namespace mlav90

#endif
