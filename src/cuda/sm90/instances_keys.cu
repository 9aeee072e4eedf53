/* The keys kernel's instances (keys/kernel.cuh: an FP8 E4M3 cache, blocks of at most 8 or 16 rows,
 * BF16 and F16 q, plans for one problem and plans for limits), in their own translation unit;
 * launch_sm90.cu launches them through mlav_flash_sm90_keys. */
#include "flash_sm90.h"
#include "keys/kernel.cuh"

namespace {

template <typename T, bool STEP> const void *keys_of(int rows)
{
    using namespace mlav90::keys;
    return rows <= 8 ? reinterpret_cast<const void *>(&flash_sm90_keys_kernel<T, 8, STEP>)
                     : reinterpret_cast<const void *>(&flash_sm90_keys_kernel<T, 16, STEP>);
}

template <typename T> const void *keys_for(int rows, int step)
{
    return step ? keys_of<T, true>(rows) : keys_of<T, false>(rows);
}

} // namespace

mlav_sm90_keys_shape mlav_flash_sm90_keys(mlav_dtype dtype, int rows, int step)
{
    mlav_sm90_keys_shape k;
    k.kernel = dtype == MLAV_DTYPE_BF16 ? keys_for<__nv_bfloat16>(rows, step)
                                        : keys_for<__half>(rows, step);
    k.threads = mlav90::keys::THREADS;
    k.smem = rows <= 8 ? mlav90::keys::smem_k<8>::BYTES : mlav90::keys::smem_k<16>::BYTES;
    return k;
}
