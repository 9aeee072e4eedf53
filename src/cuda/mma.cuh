/* The sm_80+ instructions the flash path is built from - mma.sync, ldmatrix, cp.async, named
 * barriers, and griddepcontrol on sm_90+ - and nothing newer, so the same code is legal on
 * sm_120 (no wgmma, TMA, tcgen05, clusters). */
#ifndef MLAV_CUDA_MMA_CUH
#define MLAV_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace mlav {

/* A compile-time flag as a type, to instantiate a generic lambda twice (std::bool_constant
 * without the standard library header in device code). */
template <bool B> struct bool_constant {
    static constexpr bool value = B;
};

/* Per storage type: the tensor-core MMA, packing two floats into one operand register, a NaN
 * bit pattern and the exponent mask that tells Inf and NaN. */
template <typename T> struct mma_type;

template <> struct mma_type<__nv_bfloat16> {
    /* D = A x B + D, m16n8k16, A row-major 16x16, B "col" 16x8, fp32 accumulate */
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static constexpr uint16_t nan_bits = 0x7fc0;
    static constexpr uint16_t exp_mask = 0x7f80; /* all set: Inf or NaN */
};

template <> struct mma_type<__half> {
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static constexpr uint16_t nan_bits = 0x7e00;
    static constexpr uint16_t exp_mask = 0x7c00;
};

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* Two 8x8 b16 matrices; lanes 8i..8i+7 (i < 2) give the row addresses of matrix i. */
__device__ __forceinline__ void ldsm_x2(uint32_t r[2], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* 16-byte global->shared copy that bypasses L1; src_bytes = 0 zero-fills without reading. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* 2^x on the special-function unit, subnormals flushed: exp2f's range fix-up costs three more
 * instructions per element (docs/PERFORMANCE.md#decisions), and a
 * softmax weight below 2^-126 is noise. -inf gives +0, NaN stays NaN. */
__device__ __forceinline__ float exp2_fast(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Barrier for `count` threads on named barrier `id` (1..15; 0 is __syncthreads). */
__device__ __forceinline__ void named_barrier(int id, int count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count));
}

/* Count this thread's arrival at named barrier `id` (of `count` threads) without waiting: the
 * producer side of a producer/consumer pair of named barriers. */
__device__ __forceinline__ void named_barrier_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count));
}

/* Barrier for `count` threads on named barrier `id` that also returns whether `pred` held on
 * any of them (bar.red.or: one round trip for the sync and the vote). */
__device__ __forceinline__ bool named_barrier_or(int id, int count, bool pred)
{
    uint32_t any;
    asm volatile("{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n"
                 " bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(any)
                 : "r"((uint32_t)pred), "r"(id), "r"(count));
    return any != 0;
}

/* Programmatic dependent launch (sm_90+, sm_120 included; a no-op below, where the launch
 * attribute is never set). A split kernel lets its dependent (the combine) be launched early, so
 * the combine's launch and prologue overlap the split kernel's tail; the combine waits for the
 * whole split grid to finish, and its writes to be visible, before reading any partial state. */
__device__ __forceinline__ void launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_primary()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

} // namespace mlav

#endif
