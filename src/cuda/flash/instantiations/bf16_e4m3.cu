/* The flash split kernel's family of BF16 q and out over an FP8 E4M3 cache (traits.cuh): every
 * combination of its features (features.cuh), one row of the launch table (launch.cu). */
#include "instantiate.cuh"

namespace mlav {
namespace flash {

extern const family family_bf16_e4m3 =
    family_of<family_e4m3<__nv_bfloat16>>(MLAV_DTYPE_BF16, MLAV_DTYPE_FP8_E4M3);

} // namespace flash
} // namespace mlav
