/* The sm_90 synchronization the Hopper kernel is built from: mbarriers (the producer/consumer
 * ring of KV tiles), cp.async groups, the generic-to-async proxy fence that wgmma's
 * shared-memory reads need after ordinary stores and cp.async copies (both generic proxy),
 * named barriers and the warpgroup register reallocation. Raw PTX; sm_90a only (this directory
 * builds for 90a). */
#ifndef MLAV_CUDA_SM90_SYNC_CUH
#define MLAV_CUDA_SM90_SYNC_CUH

#include <stdint.h>

namespace mlav90 {

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* An mbarrier that completes a phase when `count` arrivals have been made. */
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
}

/* One arrival (release semantics at CTA scope: this thread's earlier writes are visible to a
 * thread that sees the phase complete). */
__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(
                     smem_u32(bar))
                 : "memory");
}

/* True in one lane of the warp (elect.sync over the whole warp, which every lane executes): a
 * region only that lane enters is one ptxas knows to be single-threaded, where it may issue a
 * TMA copy without the loop over active lanes it puts around one under any other condition. */
__device__ __forceinline__ bool elect_one_sync()
{
    uint32_t one;
    asm volatile("{\n .reg .b32 r;\n .reg .pred p;\n elect.sync r|p, 0xffffffff;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(one));
    return one != 0;
}

/* Wait until the phase of parity `parity` has completed (acquire at CTA scope). */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
    const uint32_t a = smem_u32(bar);
    uint32_t done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
    } while (!done);
}

/* mbar_wait with its loop inside the asm (labels scoped by the braces), so that the compiler sees
 * no branch: between the wgmmas of one group, a C++ loop split the accumulators' live range and
 * the compiler's copies made ptxas wait for the wgmmas in flight (C7517). */
__device__ __forceinline__ void mbar_wait_flat(uint64_t *bar, uint32_t parity)
{
    asm volatile("{\n .reg .pred p;\n"
                 "WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra WAIT;\n}\n" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

/* Whether the phase of parity `parity` has completed, without waiting (acquire when it has). */
__device__ __forceinline__ bool mbar_test(uint64_t *bar, uint32_t parity)
{
    uint32_t done;
    asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done != 0;
}

/* Ordinary (generic proxy) shared-memory writes, cp.async's included, made visible to this
 * thread's later async-proxy accesses: wgmma reads its shared operands through the async proxy. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void named_barrier(int id, int count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* This thread's arrival on named barrier `id` without waiting for it (the other side's threads
 * wait with named_barrier, `count` counting both sides): a one-way hand-over, release for this
 * thread's earlier shared-memory writes. */
__device__ __forceinline__ void named_barrier_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* A named barrier that also returns whether `pred` held on every participating thread (the
 * same answer for all of them). */
__device__ __forceinline__ bool named_barrier_and(int id, int count, bool pred)
{
    uint32_t all;
    asm volatile("{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n"
                 " bar.red.and.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(all)
                 : "r"((uint32_t)pred), "r"(id), "r"(count)
                 : "memory");
    return all != 0;
}

/* Warpgroup register reallocation: the producer gives registers back, the math warpgroups take
 * them (every warp of a warpgroup executes the same one). */
template <int N> __device__ __forceinline__ void regs_dealloc()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_alloc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* The L2 policy evict_first, for copies that stream data read once: their lines are the first
 * replaced, so that the stream recycles its own lines before other data's (dirty ones among
 * them, whose eviction costs a write-back). */
__device__ __forceinline__ uint64_t l2_policy_evict_first()
{
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

/* cp_async16 under an L2 policy (l2_policy_evict_first). */
__device__ __forceinline__ void cp_async16_hint(uint32_t dst, const void *src, int src_bytes,
                                                uint64_t policy)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
                 "l"(src), "r"(src_bytes), "l"(policy)
                 : "memory");
}

/* 4 bytes, zero-filled past src_bytes (0 or 4): .ca, the only form below 16 bytes. */
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* Ask the L2 to fetch `bytes` (a multiple of 16) at global address `src` (16-byte aligned),
 * without waiting and without a destination in shared memory. */
__device__ __forceinline__ void prefetch_l2(const void *src, uint32_t bytes)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Wait until at most N of this thread's committed cp.async groups are pending. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* One of the phase's expected arrivals on `bar`, made by the hardware once every cp.async this
 * thread has issued so far has landed, without the thread waiting (cp.async.mbarrier.arrive
 * .noinc: it counts against the init count, so a barrier that every thread of a warpgroup
 * arrives on this way is initialized with that many). The copies are generic-proxy writes: a
 * wgmma reader fences (fence_proxy_async) after it sees the phase complete. */
__device__ __forceinline__ void cp_async_arrive_on(uint64_t *bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar))
                 : "memory");
}

/* `count` arrivals on `bar` at once, after adding `bytes` to the transaction count the current
 * phase waits for (mbar_arrive_expect_tx's, for a barrier of more than one expected arrival). */
__device__ __forceinline__ void mbar_arrive_expect_tx_n(uint64_t *bar, uint32_t bytes,
                                                        uint32_t count)
{
    asm volatile("{\n .reg .b64 st;\n"
                 " mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
                 " mbarrier.arrive.release.cta.shared::cta.b64 st, [%0], %2;\n}\n"
                 :
                 : "r"(smem_u32(bar)), "r"(bytes), "r"(count)
                 : "memory");
}

/* An arrival that also adds `bytes` to the transaction count the current phase waits for: the
 * phase completes when every arrival has been made and as many bytes have been reported landed
 * (complete_tx) by the bulk copies issued on it. */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("{\n .reg .b64 st;\n"
                 " mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 :
                 : "r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

/* The tensor map's descriptor (a __grid_constant__ kernel parameter, `map` its generic address)
 * asked into the descriptor cache ahead of the first copy through it. */
__device__ __forceinline__ void tensormap_prefetch(const void *map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/* One box of a 2-D tensor map (`map`: the generic address of a __grid_constant__ CUtensorMap),
 * its box at element coordinates (x inner, y outer), copied by the tensor memory accelerator to
 * shared address `dst` in the map's swizzle (the 128B swizzle wants `dst` 1024-byte aligned);
 * its bytes are reported on `bar` (complete_tx), which an arrive.expect_tx of them precedes.
 * The copy's writes are async-proxy writes, visible to a thread that sees the phase complete. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *map, int32_t x, int32_t y,
                                            uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
                 : "memory");
}

/* tma_load_2d under an L2 policy (l2_policy_evict_first). */
__device__ __forceinline__ void tma_load_2d_hint(uint32_t dst, const void *map, int32_t x,
                                                 int32_t y, uint64_t *bar, uint64_t policy)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar)),
                 "l"(policy)
                 : "memory");
}

/* `bytes` (a multiple of 16) from global address `src` (16-byte aligned) to shared address `dst`
 * (16-byte aligned) by one bulk copy of the tensor memory accelerator, its bytes reported on
 * `bar` (complete_tx), which an arrive.expect_tx of them accounts for (before or after: the
 * transaction count may run negative). Async-proxy writes, visible to a thread that sees the
 * phase complete. */
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void *src, uint32_t bytes,
                                              uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

/* A producer thread's hand-over of shared memory it filled by cp.async to wgmma readers in other
 * threads: once its copies have landed (a cp_async_wait before), the proxy fence by the writer
 * itself, then its arrival (release) on the barrier the readers wait on (acquire). */
__device__ __forceinline__ void publish_copies(uint64_t *bar)
{
    fence_proxy_async();
    mbar_arrive(bar);
}

} // namespace mlav90

#endif
