/* The flash split kernel's family of F16 q and out over an F16 cache (traits.cuh): every
 * combination of its features (features.cuh), one row of the launch table (launch.cu). */
#include "instantiate.cuh"

namespace mlav {
namespace flash {

extern const family family_f16 =
    family_of<family_16<__half>>(MLAV_DTYPE_F16, MLAV_DTYPE_F16);

} // namespace flash
} // namespace mlav
