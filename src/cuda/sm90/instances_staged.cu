/* The seesaw kernel over an FP8 E4M3 cache staged as F16 (staged_kv.cu; Kv = e4m3_staged:
 * kernel.cuh), BF16 and F16 q, plans for one problem, in its own translation unit beside the
 * other instances (launch_sm90.cu launches it through mlav_flash_sm90_staged_seesaw). */
#include "flash_sm90.h"
#include "seesaw/kernel.cuh"

const void *mlav_flash_sm90_staged_seesaw(mlav_dtype dtype)
{
    using namespace mlav90;
    return dtype == MLAV_DTYPE_BF16
               ? reinterpret_cast<const void *>(
                     &seesaw::flash_sm90_seesaw_kernel<__nv_bfloat16, e4m3_staged, false>)
               : reinterpret_cast<const void *>(
                     &seesaw::flash_sm90_seesaw_kernel<__half, e4m3_staged, false>);
}
