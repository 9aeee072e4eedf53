/* The flash split kernel's family of BF16 q and out over a BF16 cache (traits.cuh): every
 * combination of its features (features.cuh), one row of the launch table (launch.cu). */
#include "instantiate.cuh"

namespace mlav {
namespace flash {

extern const family family_bf16 =
    family_of<family_16<__nv_bfloat16>>(MLAV_DTYPE_BF16, MLAV_DTYPE_BF16);

} // namespace flash
} // namespace mlav
