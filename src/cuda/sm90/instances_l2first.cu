/* The seesaw kernel's instances over a 16-bit cache whose KV copies take the L2 evict_first
 * policy (BF16 and F16; plans for one problem and for limits; under the pool's map or gathered),
 * in their own translation unit so that they compile beside the plain ones (launch_sm90.cu),
 * which launches them through mlav_flash_sm90_l2first_seesaw. */
#include "flash_sm90.h"
#include "seesaw.cuh"

namespace {

template <typename T, bool STEP> const void *l2first_of(int gather)
{
    using namespace mlav90::seesaw;
    return gather ? reinterpret_cast<const void *>(
                        &flash_sm90_seesaw_kernel<T, T, STEP, true, true>)
                  : reinterpret_cast<const void *>(
                        &flash_sm90_seesaw_kernel<T, T, STEP, false, true>);
}

template <typename T> const void *l2first_of(int step, int gather)
{
    return step ? l2first_of<T, true>(gather) : l2first_of<T, false>(gather);
}

} // namespace

const void *mlav_flash_sm90_l2first_seesaw(mlav_dtype dtype, int step, int gather)
{
    return dtype == MLAV_DTYPE_BF16 ? l2first_of<__nv_bfloat16>(step, gather)
                                    : l2first_of<__half>(step, gather);
}
