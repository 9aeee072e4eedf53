/* The Hopper family's instances over an FP8 E4M3 cache (BF16 and F16 q; plans for one problem
 * and plans for limits; the producer and the seesaw kernel), in their own translation unit so
 * that they compile beside the 16-bit ones (launch_sm90.cu), which launches them through
 * mlav_flash_sm90_e4m3_kernel and mlav_flash_sm90_e4m3_seesaw. */
#include "flash_sm90.h"
#include "kernel.cuh"
#include "seesaw/kernel.cuh"

namespace {

template <typename T> const void *e4m3_kernel_of(int step)
{
    return step ? reinterpret_cast<const void *>(
                      &mlav90::flash_sm90_kernel<T, __nv_fp8_e4m3, true>)
                : reinterpret_cast<const void *>(
                      &mlav90::flash_sm90_kernel<T, __nv_fp8_e4m3, false>);
}

template <typename T> const void *e4m3_seesaw_of(int step)
{
    using namespace mlav90::seesaw;
    return step ? reinterpret_cast<const void *>(
                      &flash_sm90_seesaw_kernel<T, __nv_fp8_e4m3, true>)
                : reinterpret_cast<const void *>(
                      &flash_sm90_seesaw_kernel<T, __nv_fp8_e4m3, false>);
}

} // namespace

const void *mlav_flash_sm90_e4m3_kernel(mlav_dtype dtype, int step)
{
    return dtype == MLAV_DTYPE_BF16 ? e4m3_kernel_of<__nv_bfloat16>(step)
                                    : e4m3_kernel_of<__half>(step);
}

const void *mlav_flash_sm90_e4m3_seesaw(mlav_dtype dtype, int step)
{
    return dtype == MLAV_DTYPE_BF16 ? e4m3_seesaw_of<__nv_bfloat16>(step)
                                    : e4m3_seesaw_of<__half>(step);
}
