/* The seesaw kernel's instances over a 16-bit cache whose WG0 issues each pair's S_A in the pair
 * before (EARLY_S) and whose KV copies take the L2 evict_first policy, beside
 * instances_early.cu's plain ones, which reach them through mlav_flash_sm90_early_seesaw. */
#include "flash_sm90.h"
#include "seesaw/kernel.cuh"

const void *mlav_flash_sm90_early_l2first_seesaw(mlav_dtype dtype, int step, int gather)
{
    using mlav90::seesaw::instance_16bit;
    return dtype == MLAV_DTYPE_BF16
               ? instance_16bit<__nv_bfloat16, true, true>(step != 0, gather != 0)
               : instance_16bit<__half, true, true>(step != 0, gather != 0);
}
