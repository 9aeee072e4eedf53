/* What an instantiation file does: the kernel's instances of one traits type for every
 * combination of features, as a row of the launch table (launch.h). */
#ifndef MLAV_CUDA_FLASH_INSTANTIATE_CUH
#define MLAV_CUDA_FLASH_INSTANTIATE_CUH

#include "../kernel.cuh"
#include "../launch.h"

namespace mlav {
namespace flash {

template <typename Tr, int I> const void *instance()
{
    using F = features<(I & 1) != 0, (I & 2) != 0, (I & 4) != 0>;
    static_assert(F::index == I, "the launch table's index");
    return reinterpret_cast<const void *>(&verify_kernel<Tr, F>);
}

template <typename Tr> family family_of(mlav_dtype dtype, mlav_dtype kv_dtype)
{
    static_assert(FEATURE_COUNT == 8, "every combination of the three features");
    return {dtype,
            kv_dtype,
            Tr::smem::TOTAL,
            Tr::NT,
            {instance<Tr, 0>(), instance<Tr, 1>(), instance<Tr, 2>(), instance<Tr, 3>(),
             instance<Tr, 4>(), instance<Tr, 5>(), instance<Tr, 6>(), instance<Tr, 7>()}};
}

} // namespace flash
} // namespace mlav

#endif
