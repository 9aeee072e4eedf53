/* The gather stage: KV tiles of BN rows fetched through the page table by 16-byte cp.async into
 * a ring buffer of shared memory (the kernel issues them AHEAD tiles ahead). A 16-bit cache and
 * an FP8 one go the same way, in 16-byte chunks of their elements (traits::kv_elem: T, or e4m3
 * bytes, 36 chunks per row at W = 576 so a thread issues 3 or 2), into rows traits::KV_RS
 * elements apart. */
#ifndef MLAV_CUDA_FLASH_GATHER_CUH
#define MLAV_CUDA_FLASH_GATHER_CUH

#include "../mma.cuh"
#include "traits.cuh"

namespace mlav {
namespace flash {

/* The page id of KV row j (0 past kv_end, where nothing is read). Issued one tile before the
 * gather that uses it, into the one register the loop carries (pg_next). With two ids in
 * flight (two tiles ahead) ptxas rotated them through register copies, which can wait for the
 * load; one is faster from 16k on (docs/PERFORMANCE.md#decisions). */
__device__ __forceinline__ int32_t lookup_page(const int32_t *ptab, int j, int kv_end,
                                               const mlav_flash_params &p)
{
    return j < kv_end ? ptab[mlav_fastdiv_div((uint32_t)j, p.page_div)] : 0;
}

/* Where this thread's share of KV row j comes from. Rows past kv_end are zero-filled without
 * reading (their scores are masked to -inf, and 0 * 0 keeps P V clean; the source address is
 * then row 0 of the pool, never read); a page id outside the pool reads the plan's NaN row
 * (NaN of the dtype, or 0x7f bytes), never out of bounds. Branch-free 32-bit index arithmetic,
 * one 64-bit product: the gather runs every tile for every thread, so its address code is on
 * the loop's path (docs/PERFORMANCE.md#decisions). page_elems and W count elements, 16-bit or
 * bytes. */
template <typename Tr>
__device__ __forceinline__ const typename Tr::kv_elem *
kv_row_src(const typename Tr::kv_elem *kv, int32_t page, int j, bool live,
           const mlav_flash_params &p)
{
    using E = typename Tr::kv_elem;
    const uint32_t pg = (uint32_t)page, uj = (uint32_t)j;
    const uint32_t slot = uj - mlav_fastdiv_div(uj, p.page_div) * (uint32_t)p.page_size;
    const E *base = live && pg >= p.page_limit ? static_cast<const E *>(p.nan_row) : kv;
    const size_t off = live && pg < p.page_limit ? (size_t)pg * p.page_elems + slot * Tr::W : 0;
    return base + off;
}

/* Gather this thread's share (chunks part, part + GATHER_TPR, ...) of KV row j into row `row`
 * of a ring buffer `dst`. */
template <typename Tr>
__device__ __forceinline__ void gather_kv_row(typename Tr::kv_elem *dst,
                                              const typename Tr::kv_elem *kv, int32_t page, int j,
                                              int kv_end, const mlav_flash_params &p, int row,
                                              int part)
{
    using E = typename Tr::kv_elem;
    constexpr int CE = 16 / (int)sizeof(E); /* elements per 16-byte chunk */
    constexpr int NCH = Tr::W / CE, STEPS = (NCH + Tr::GATHER_TPR - 1) / Tr::GATHER_TPR;
    E *d = dst + row * Tr::KV_RS + part * CE;
    const bool live = j < kv_end;
    const E *src = kv_row_src<Tr>(kv, page, j, live, p) + part * CE;
    const int bytes = live ? 16 : 0;
#pragma unroll
    for (int k = 0; k < STEPS; k++)
        if (part + k * Tr::GATHER_TPR < NCH)
            mlav::cp_async16(d + k * Tr::GATHER_TPR * CE, src + k * Tr::GATHER_TPR * CE, bytes);
}

} // namespace flash
} // namespace mlav

#endif
