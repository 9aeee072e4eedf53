/* The CUDA device layer both CUDA backends and their kernels stand on (cuda_device.cu): error
 * checking that becomes a status and a sentence with file:line, device facts read at run time
 * (never hard-coded), the shared-memory limit every launch is checked against, and device
 * workspaces. The run on device or mapped host tensors is cuda_offload.h's.
 * Included by CUDA code only. */
#ifndef MLAV_CUDA_DEVICE_H
#define MLAV_CUDA_DEVICE_H

#include <cuda_runtime.h>

#include "../dispatch/backend.h"

/* sm_120's opt-in limit of shared memory per block (dynamic + static). Every kernel launch
 * checks against min(this, the device's own limit), so a run on a larger GPU also proves the
 * kernel fits an RTX PRO 6000 / RTX 5090. */
#define MLAV_SM120_SMEM_LIMIT 101376

/* Turn a failed CUDA call into MLAV_ERR_CUDA with the call, the error and file:line. */
mlav_status mlav_cuda_error(cudaError_t e, const char *what, const char *file, int line);
#define MLAV_CUDA_TRY(call)                                                                  \
    do {                                                                                     \
        cudaError_t mlav_e_ = (call);                                                        \
        if (mlav_e_ != cudaSuccess)                                                          \
            return mlav_cuda_error(mlav_e_, #call, __FILE__, __LINE__);                      \
    } while (0)

/* Facts about the current device, read once per plan. */
typedef struct mlav_cuda_device {
    int device;           /* ordinal */
    int cc_major, cc_minor;
    int sm_count;
    size_t smem_optin;    /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
    size_t smem_limit;    /* min(smem_optin, MLAV_SM120_SMEM_LIMIT): what our kernels may use */
    size_t smem_per_sm;   /* cudaDevAttrMaxSharedMemoryPerMultiprocessor */
    size_t smem_reserved; /* cudaDevAttrReservedSharedMemoryPerBlock: the runtime's own share */
    size_t l2_bytes;
} mlav_cuda_device;

/* Read the current device's facts; MLAV_ERR_NO_DEVICE if none of cc >= 8.0. */
mlav_status mlav_cuda_device_query(mlav_cuda_device *dev);

/* MLAV_OK if a device of cc >= 8.0 is present (the ops' `available`). */
mlav_status mlav_cuda_available(void);

/* Check that a kernel's shared memory fits the sm_120 limit and raise its dynamic limit.
 * `func` is the kernel (a `const void *`), `static_bytes` from cudaFuncGetAttributes. */
mlav_status mlav_cuda_prepare_kernel(const void *func, size_t dynamic_bytes,
                                     const mlav_cuda_device *dev, const char *name);

/* Device workspace for mlav_verify. */
void *mlav_cuda_workspace_alloc(size_t bytes);
void mlav_cuda_workspace_free(void *ptr);

/* The ops' step_read of a plan for limits whose step header starts its device workspace: copy
 * `bytes` of it to `header` on `stream`, and synchronize the stream. */
mlav_status mlav_cuda_step_read(const void *workspace, void *stream, void *header, size_t bytes);

#endif
