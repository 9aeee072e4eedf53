/* The flash split kernel's launch table: one family per (q/out dtype, KV dtype), each the
 * instances of one traits type for every combination of features, indexed by feature_index
 * (features.cuh). Each family is defined by its instantiation file (flash/instantiations/) and
 * listed once in launch.cu's table. */
#ifndef MLAV_CUDA_FLASH_LAUNCH_H
#define MLAV_CUDA_FLASH_LAUNCH_H

#include <stddef.h>

#include "../flash.h"
#include "features.cuh"

namespace mlav {
namespace flash {

struct family {
    mlav_dtype dtype;                    /* q and out */
    mlav_dtype kv_dtype;                 /* the cache */
    size_t smem_bytes;                   /* dynamic shared memory of every instance */
    int threads;                         /* block size of every instance */
    const void *kernels[FEATURE_COUNT];  /* [feature_index] */
};

extern const family family_bf16, family_f16, family_bf16_e4m3, family_f16_e4m3;

} // namespace flash
} // namespace mlav

#endif
