/* The Hopper family's host side: which device and dtypes it serves, the kernels' shared-memory
 * attribute, and the launch (the split kernel, then the legal path's combine). The 16-bit
 * caches' instances are compiled here, the FP8 cache's in instances_e4m3.cu. */
#include "flash_sm90.h"
#include "kernel.cuh"
#include "kv_tensor_map.h"
#include "seesaw/kernel.cuh"

static_assert(mlav90::TILE_N == MLAV_FLASH_SM90_TILE_N, "the schedule's tile is the kernel's");

namespace {

/* The instance for a dtype (BF16 or F16), a cache of that dtype, and a plan kind (step: a plan
 * for limits). */
template <typename T> const void *kernel_of(bool step)
{
    return step ? reinterpret_cast<const void *>(&mlav90::flash_sm90_kernel<T, T, true>)
                : reinterpret_cast<const void *>(&mlav90::flash_sm90_kernel<T, T, false>);
}

/* The launch table: q's dtype, the cache's (its own, or FP8 E4M3), the plan kind. */
const void *kernel_for(mlav_dtype dtype, bool kv_fp8, bool step)
{
    if (kv_fp8)
        return mlav_flash_sm90_e4m3_kernel(dtype, step ? 1 : 0);
    return dtype == MLAV_DTYPE_BF16 ? kernel_of<__nv_bfloat16>(step) : kernel_of<__half>(step);
}

/* The seesaw instance (seesaw/kernel.cuh) for a dtype, a cache of that dtype, a plan kind, whether
 * the launch gathers every tile (a 16-bit cache whose pool has no map of tiles: its GATHER
 * instance), the L2 policy of a 16-bit cache's copies and WG0's order (early: EARLY_S); an FP8
 * cache's from instances_e4m3.cu, the evict_first ones from instances_l2first.cu, the EARLY_S
 * ones from instances_early.cu. */
const void *seesaw_for(mlav_dtype dtype, bool kv_fp8, bool step, bool gather, bool l2_first,
                       bool early)
{
    if (kv_fp8)
        return mlav_flash_sm90_e4m3_seesaw(dtype, step ? 1 : 0);
    if (early)
        return mlav_flash_sm90_early_seesaw(dtype, step ? 1 : 0, gather ? 1 : 0, l2_first ? 1 : 0);
    if (l2_first)
        return mlav_flash_sm90_l2first_seesaw(dtype, step ? 1 : 0, gather ? 1 : 0);
    using mlav90::seesaw::instance_16bit;
    return dtype == MLAV_DTYPE_BF16 ? instance_16bit<__nv_bfloat16, false, false>(step, gather)
                                    : instance_16bit<__half, false, false>(step, gather);
}

} // namespace

mlav_status mlav_flash_sm90_supported(mlav_dtype dtype, mlav_dtype kv_dtype,
                                      const mlav_cuda_device *dev)
{
    if (dev->cc_major != 9 || dev->cc_minor != 0)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the sm_90a kernels need a cc 9.0 device, this one is cc %d.%d",
                              dev->cc_major, dev->cc_minor);
    if ((dtype != MLAV_DTYPE_BF16 && dtype != MLAV_DTYPE_F16) ||
        (kv_dtype != dtype && kv_dtype != MLAV_DTYPE_FP8_E4M3))
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the sm_90a kernels take BF16 or F16 q with a cache of the same "
                              "dtype or FP8 E4M3");
    if (dev->smem_optin < (size_t)mlav90::smem90::BYTES)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the sm_90a kernel needs %u bytes of shared memory per block, this "
                              "device allows %zu",
                              (unsigned)mlav90::smem90::BYTES, dev->smem_optin);
    return MLAV_OK;
}

mlav_status mlav_flash_sm90_prepare(mlav_dtype dtype, mlav_dtype kv_dtype,
                                    const mlav_cuda_device *dev, int *blocks_per_sm)
{
    *blocks_per_sm = 0;
    mlav_status s = mlav_flash_sm90_supported(dtype, kv_dtype, dev);
    if (s != MLAV_OK)
        return s;
    /* both instances (a plan picks one at launch); their resources are the same, and the
     * schedule is built for the smaller residency */
    for (int k = 0; k < 2; k++) {
        const void *f = kernel_for(dtype, kv_dtype == MLAV_DTYPE_FP8_E4M3, k != 0);
        MLAV_CUDA_TRY(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)mlav90::smem90::BYTES));
        int n = 0;
        MLAV_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, mlav90::THREADS,
                                                                    mlav90::smem90::BYTES));
        *blocks_per_sm = k == 0 || n < *blocks_per_sm ? n : *blocks_per_sm;
    }
    /* the seesaw instances, which a launch takes where its plan asks
     * (mlav_flash_launch_opts.sm90_seesaw, sm90_l2_first, sm90_early_s) */
    for (int k = 0; k < 16; k++) {
        const void *f = seesaw_for(dtype, kv_dtype == MLAV_DTYPE_FP8_E4M3, k & 1, k >> 1 & 1,
                                   k >> 2 & 1, k >> 3);
        MLAV_CUDA_TRY(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)mlav90::seesaw::smem_ss::BYTES));
        int n = 0;
        MLAV_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, f, mlav90::seesaw::THREADS, mlav90::seesaw::smem_ss::BYTES));
        *blocks_per_sm = n < *blocks_per_sm ? n : *blocks_per_sm;
    }
    /* the keys kernel's instances (an FP8 cache's plans whose requests have few rows), and the
     * seesaw kernel's over the cache staged as F16 (plans whose rows many row tiles read) */
    if (kv_dtype == MLAV_DTYPE_FP8_E4M3) {
        const void *f = mlav_flash_sm90_staged_seesaw(dtype);
        MLAV_CUDA_TRY(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)mlav90::seesaw::smem_ss::BYTES));
        int n = 0;
        MLAV_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, f, mlav90::seesaw::THREADS, mlav90::seesaw::smem_ss::BYTES));
        *blocks_per_sm = n < *blocks_per_sm ? n : *blocks_per_sm;
        for (int k4 = 0; k4 < 4; k4++) {
            const mlav_sm90_keys_shape k = mlav_flash_sm90_keys(dtype, k4 & 1 ? 16 : 8, k4 >> 1);
            MLAV_CUDA_TRY(cudaFuncSetAttribute(
                k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k.smem));
            int n = 0;
            MLAV_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k.kernel,
                                                                        (int)k.threads, k.smem));
            *blocks_per_sm = n < *blocks_per_sm ? n : *blocks_per_sm;
        }
    }
    if (*blocks_per_sm < 1)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "flash_sm90 cannot be resident on this device (0 blocks per SM)");
    /* the driver's tensor-map encoder resolved here, once, so that a launch (perhaps under a
     * stream capture) only reads the cached pointer (an FP8 cache's too: its staged pool) */
    if (MLAV90_TMA) {
        mlav90::kv_map_encoder encode = nullptr;
        MLAV_CUDA_TRY(mlav90::kv_map_encoder_get(&encode));
    }
    return MLAV_OK;
}

mlav_status mlav_flash_sm90_launch(mlav_dtype dtype, const mlav_flash_params *fp,
                                   const mlav_flash_launch_opts *lo, int step,
                                   cudaStream_t stream)
{
    if (dtype != MLAV_DTYPE_BF16 && dtype != MLAV_DTYPE_F16)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the sm_90a kernels run BF16 and F16 plans (a cache of the same "
                              "dtype or FP8 E4M3)");
    if (fp->shard.ranks > 1) /* its mask takes the item's rows as global ones */
        return mlav_set_error(MLAV_ERR_INTERNAL,
                              "a KV shard reached the sm_90a kernels (the family rule sends "
                              "sharded plans to the legal family)");
    if (fp->n_items > 0) {
        /* the pool's tensor map, a __grid_constant__ parameter beside the flag that lets the
         * producer use it: encoded per launch on the host, no device work (a graph keeps the
         * map of its capture, as it keeps fp) */
        CUtensorMap kv_map;
        int kv_tma = 0;
        const bool staged = lo->kv_fp8 && lo->sm90_staged; /* fp's cache: 16-bit, staged */
        mlav_status ms = mlav_flash_sm90_kv_map(fp, lo->kv_fp8 && !staged, &kv_map, &kv_tma);
        if (ms != MLAV_OK)
            return ms;
        void *args[3] = {const_cast<mlav_flash_params *>(fp), &kv_map, &kv_tma};
        if (lo->sm90_keys != 0 && lo->sm90_keys != 8 && lo->sm90_keys != 16)
            return mlav_set_error(MLAV_ERR_INTERNAL,
                                  "the keys kernel has instances of 8 and 16 rows, not %d",
                                  (int)lo->sm90_keys);
        const mlav_sm90_keys_shape keys = lo->sm90_keys && lo->kv_fp8
                                              ? mlav_flash_sm90_keys(dtype, lo->sm90_keys, step)
                                              : mlav_sm90_keys_shape{NULL, 0, 0};
        if (staged && (step || !lo->sm90_seesaw || keys.kernel))
            return mlav_set_error(MLAV_ERR_INTERNAL,
                                  "a staged FP8 cache runs the seesaw kernel of a plan for one "
                                  "problem only");
        if (staged)
            MLAV_CUDA_TRY(cudaLaunchKernel(mlav_flash_sm90_staged_seesaw(dtype),
                                           dim3((unsigned)fp->n_items),
                                           dim3(mlav90::seesaw::THREADS), args,
                                           mlav90::seesaw::smem_ss::BYTES, stream));
        else if (keys.kernel)
            MLAV_CUDA_TRY(cudaLaunchKernel(keys.kernel, dim3((unsigned)fp->n_items),
                                           dim3(keys.threads), args, keys.smem, stream));
        else if (lo->sm90_seesaw)
            MLAV_CUDA_TRY(cudaLaunchKernel(seesaw_for(dtype, lo->kv_fp8 != 0, step != 0,
                                                      kv_tma == 0, lo->sm90_l2_first != 0,
                                                      lo->sm90_early_s != 0),
                                           dim3((unsigned)fp->n_items),
                                           dim3(mlav90::seesaw::THREADS), args,
                                           mlav90::seesaw::smem_ss::BYTES, stream));
        else
            MLAV_CUDA_TRY(cudaLaunchKernel(kernel_for(dtype, lo->kv_fp8 != 0, step != 0),
                                           dim3((unsigned)fp->n_items),
                                           dim3(mlav90::THREADS), args, mlav90::smem90::BYTES,
                                           stream));
        MLAV_CUDA_TRY(cudaGetLastError());
    }
    if (fp->n_combine > 0)
        return mlav_combine_launch(dtype, fp, lo, step, stream);
    return MLAV_OK;
}
