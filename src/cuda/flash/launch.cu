/* The flash split kernel's launch: its instance found in the table of families (launch.h) by
 * (dtype, KV dtype) and the plan's features, then the combine. The F32 plans' kernel
 * (verify_flash_f32.cu) goes through the same entry points. */
#include "../flash.h"
#include "launch.h"
#include "traits.cuh"

namespace mlav {
namespace flash {
namespace {

/* The plan (backend_flash.cu), the schedule and the combine read the kernel's shape from flash.h
 * (MLAV_FLASH_DL, _DR, _BLOCK_M, _SCALE_COLS: row tiles, partial-state rows and columns): every
 * family in the table must be instantiated with it. */
template <typename Tr> constexpr bool plan_shape()
{
    return Tr::DL == MLAV_FLASH_DL && Tr::DR == MLAV_FLASH_DR && Tr::BM == MLAV_FLASH_BLOCK_M &&
           Tr::BN == MLAV_FLASH_BLOCK_N && Tr::NT == MLAV_FLASH_THREADS &&
           Tr::COLS_Q == MLAV_FLASH_SCALE_COLS;
}
static_assert(plan_shape<family_16<__nv_bfloat16>>() && plan_shape<family_16<__half>>() &&
                  plan_shape<family_e4m3<__nv_bfloat16>>() && plan_shape<family_e4m3<__half>>(),
              "every family has the shape the plan and the combine are built for");

/* Every family the library is built with: one line per instantiation file. */
const family *const families[] = {&family_bf16, &family_f16, &family_bf16_e4m3,
                                  &family_f16_e4m3};

const family *family_for(mlav_dtype dtype, mlav_dtype kv_dtype)
{
    for (const family *f : families)
        if (f->dtype == dtype && f->kv_dtype == kv_dtype)
            return f;
    return nullptr;
}

/* The cache's dtype of a plan: FP8 E4M3, or q's. */
mlav_dtype kv_dtype_of(mlav_dtype dtype, int kv_fp8)
{
    return kv_fp8 ? MLAV_DTYPE_FP8_E4M3 : dtype;
}

} // namespace
} // namespace flash
} // namespace mlav

using mlav::flash::family;
using mlav::flash::family_for;

size_t mlav_flash_smem_bytes(int kv_fp8)
{
    /* every family of one cache kind has the same layout (traits.cuh) */
    const family *f =
        family_for(MLAV_DTYPE_BF16, mlav::flash::kv_dtype_of(MLAV_DTYPE_BF16, kv_fp8));
    return f->smem_bytes;
}

mlav_status mlav_flash_prepare(mlav_dtype dtype, mlav_dtype kv_dtype, const mlav_cuda_device *dev,
                               int *blocks_per_sm)
{
    const bool fp8 = kv_dtype == MLAV_DTYPE_FP8_E4M3;
    if (dtype == MLAV_DTYPE_F32)
        return mlav_flash_f32_prepare(fp8, dev, blocks_per_sm);
    const family *f = family_for(dtype, mlav::flash::kv_dtype_of(dtype, fp8));
    if (!f)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "flash_verify has no instance for q dtype %d over KV dtype %d",
                              (int)dtype, (int)kv_dtype);
    /* every instance of the family: a plan picks one at launch (its features); their resources
     * are the same, and the schedule is built for the smallest residency of them */
    *blocks_per_sm = 0;
    for (int k = 0; k < mlav::flash::FEATURE_COUNT; k++) {
        mlav_status s = mlav_cuda_prepare_kernel(f->kernels[k], f->smem_bytes, dev, "flash_verify");
        if (s != MLAV_OK)
            return s;
        int n = 0;
        MLAV_CUDA_TRY(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f->kernels[k], f->threads,
                                                          f->smem_bytes));
        *blocks_per_sm = k == 0 || n < *blocks_per_sm ? n : *blocks_per_sm;
    }
    if (*blocks_per_sm < 1)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "flash_verify cannot be resident on this device (0 blocks per SM)");
    return MLAV_OK;
}

mlav_status mlav_flash_launch(mlav_dtype dtype, const mlav_flash_params *fp,
                              const mlav_flash_launch_opts *lo, int step, cudaStream_t stream)
{
    if (fp->n_items > 0 && dtype == MLAV_DTYPE_F32) {
        mlav_status s = mlav_flash_f32_launch(fp, lo->kv_fp8, stream);
        if (s != MLAV_OK)
            return s;
    } else if (fp->n_items > 0) {
        const family *f = family_for(dtype, mlav::flash::kv_dtype_of(dtype, lo->kv_fp8));
        if (!f)
            return mlav_set_error(MLAV_ERR_UNSUPPORTED, "flash_verify has no instance for dtype %d",
                                  (int)dtype);
        const int k = mlav::flash::feature_index(lo->all_groups != 0, step != 0,
                                                 fp->page_table_rows != NULL);
        void *args[1] = {const_cast<mlav_flash_params *>(fp)};
        MLAV_CUDA_TRY(cudaLaunchKernel(f->kernels[k], dim3((unsigned)fp->n_items),
                                       dim3(f->threads), args, f->smem_bytes, stream));
        MLAV_CUDA_TRY(cudaGetLastError());
    }
    if (fp->n_combine > 0)
        return mlav_combine_launch(dtype, fp, lo, step, stream);
    return MLAV_OK;
}
