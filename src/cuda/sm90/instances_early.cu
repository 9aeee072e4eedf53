/* The seesaw kernel's instances over a 16-bit cache whose WG0 issues each pair's S_A in the pair
 * before (EARLY_S: wg0_pairs), plain L2 policy (BF16 and F16; plans for one problem and for
 * limits; under the pool's map or gathered), in their own translation unit so that they compile
 * beside the others; the evict_first ones are in instances_early_l2first.cu. */
#include "flash_sm90.h"
#include "seesaw/kernel.cuh"

const void *mlav_flash_sm90_early_seesaw(mlav_dtype dtype, int step, int gather, int l2_first)
{
    if (l2_first)
        return mlav_flash_sm90_early_l2first_seesaw(dtype, step, gather);
    using mlav90::seesaw::instance_16bit;
    return dtype == MLAV_DTYPE_BF16
               ? instance_16bit<__nv_bfloat16, false, true>(step != 0, gather != 0)
               : instance_16bit<__half, false, true>(step != 0, gather != 0);
}
