/* The CUDA check of the standalone diagnostics: a failed call prints where and why and ends the
 * process (a diagnostic has nothing to clean up that the driver does not). */
#ifndef MLAV_DIAG_CUDA_CHECK_CUH
#define MLAV_DIAG_CUDA_CHECK_CUH

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                    cudaGetErrorString(e_));                                                  \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)

#endif
