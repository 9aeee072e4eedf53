/* Device memory for the GPU tests (built where MLAV_WITH_CUDA): checked allocations and copies
 * that fail the calling cmocka case (test_util.h's TU_CK). */
#ifndef MLAV_TEST_CUDA_UTIL_H
#define MLAV_TEST_CUDA_UTIL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "test_util.h"

/* Device memory of at least 256 bytes (an empty buffer is still a pointer the library can be
 * given). */
static inline void *tu_dmalloc(size_t bytes)
{
    void *p = NULL;
    TU_CK(cudaMalloc(&p, bytes ? bytes : 256));
    return p;
}

/* A device copy of `bytes` host bytes. */
static inline void *tu_dcopy(const void *h, size_t bytes)
{
    void *d = tu_dmalloc(bytes);
    TU_CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

#endif
