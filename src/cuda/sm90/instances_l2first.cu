/* The seesaw kernel's instances over a 16-bit cache whose KV copies take the L2 evict_first
 * policy (BF16 and F16; plans for one problem and for limits; under the pool's map or gathered),
 * in their own translation unit so that they compile beside the plain ones (launch_sm90.cu),
 * which launches them through mlav_flash_sm90_l2first_seesaw. */
#include "flash_sm90.h"
#include "seesaw/kernel.cuh"

const void *mlav_flash_sm90_l2first_seesaw(mlav_dtype dtype, int step, int gather)
{
    using mlav90::seesaw::instance_16bit;
    return dtype == MLAV_DTYPE_BF16
               ? instance_16bit<__nv_bfloat16, true, false>(step != 0, gather != 0)
               : instance_16bit<__half, true, false>(step != 0, gather != 0);
}
