/* The KV pool as a tensor map for the Hopper producer's TMA tiles (kernel.cuh, gather.cuh): a
 * 2-D tensor of 16-bit elements, 576 a row (inner) by num_pages x page_size rows, rows 1,152
 * bytes apart, read in boxes of 64 rows x 64 columns (128 bytes: one column block of a stage,
 * 8 KB) in the 128B swizzle, so that a box lands in exactly the layout of smem_layout.cuh. The
 * rule of which pools qualify, the map's encoding and the driver entry point it needs, in one
 * place for the launch (kv_tensor_map.cu) and the layouts test. Host code; the kernel needs only
 * the CUtensorMap type and MLAV90_TMA from here.
 *
 * MLAV90_TMA (default 1): 0 compiles the TMA path out of the kernel and leaves the map unbuilt,
 * every tile then gathered by cp.async, for an A/B of the same tree. */
#ifndef MLAV_CUDA_SM90_KV_TENSOR_MAP_H
#define MLAV_CUDA_SM90_KV_TENSOR_MAP_H

#include <cuda.h> /* the types only: the library reaches the driver through the runtime */
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>

#include "smem_layout.cuh"

#ifndef MLAV90_TMA
#define MLAV90_TMA 1
#endif

namespace mlav90 {

static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) >= 64, "the driver's map");
static_assert(COL_BLOCK * 2 == 128 && (uint32_t)TILE_N * COL_BLOCK * 2 == BLOCK_BYTES,
              "a box of 64 rows x 64 16-bit columns is one 128B-swizzled column block");

/* Whether the producer may read this pool's whole tiles by TMA: a 16-bit cache, pages of a
 * whole number of tiles (so that a tile inside a page is a box of contiguous rows), a 16-byte
 * aligned pool (the map's rule; cp.async wants it too), and a pool whose rows a copy's 32-bit
 * row coordinate reaches. Otherwise every tile is gathered by cp.async. */
inline bool kv_map_fits(bool kv_16bit, int32_t page_size, int64_t num_pages, const void *kv)
{
    if (!MLAV90_TMA || !kv_16bit || kv == nullptr || page_size <= 0 || page_size % TILE_N != 0 ||
        num_pages <= 0)
        return false;
    if (reinterpret_cast<uintptr_t>(kv) % 16 != 0)
        return false;
    return num_pages <= (int64_t)(INT32_MAX / page_size);
}

using kv_map_encoder = PFN_cuTensorMapEncodeTiled_v12000;

/* The driver's cuTensorMapEncodeTiled through the runtime's entry-point query (the library
 * does not link libcuda): cudaSuccess with *fn set, or the query's error, or
 * cudaErrorSymbolNotFound where the driver lacks it (*fn NULL then). Resolved once a process;
 * a failure is asked again next time. */
inline cudaError_t kv_map_encoder_get(kv_map_encoder *fn)
{
    static std::atomic<void *> cached{nullptr};
    void *f = cached.load(std::memory_order_acquire);
    if (f == nullptr) {
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                               cudaEnableDefault, &q);
#else
        const cudaError_t e =
            cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q);
#endif
        if (e != cudaSuccess) {
            *fn = nullptr;
            return e;
        }
        if (q != cudaDriverEntryPointSuccess || f == nullptr) {
            *fn = nullptr;
            return cudaErrorSymbolNotFound;
        }
        cached.store(f, std::memory_order_release);
    }
    *fn = reinterpret_cast<kv_map_encoder>(f);
    return cudaSuccess;
}

/* The map of a pool of `rows` rows of 576 16-bit elements at `kv` (kv_map_fits): boxes of
 * 64 x 64, 128B swizzle, L2 promotion of 256 bytes; no fill is ever needed (the producer copies
 * only whole tiles inside the pool). The element type is UINT16: the bytes move unchanged, BF16
 * or F16. */
inline CUresult kv_map_encode(kv_map_encoder fn, CUtensorMap *map, const void *kv, uint64_t rows)
{
    const cuuint64_t dims[2] = {(cuuint64_t)W, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)W * 2u}; /* bytes, of dimension 1 */
    const cuuint32_t box[2] = {(cuuint32_t)COL_BLOCK, (cuuint32_t)TILE_N};
    const cuuint32_t elem_strides[2] = {1, 1};
    return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void *>(kv), dims, strides, box,
              elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

} // namespace mlav90

#endif
