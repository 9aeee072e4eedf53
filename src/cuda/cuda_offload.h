/* The run both CUDA backends share (cuda_offload.cu): device tensors checked and handed to the
 * backend's launch as they are, host tensors mapped to the device around it (offload style).
 * Included by the backends' .cu files. */
#ifndef MLAV_CUDA_OFFLOAD_H
#define MLAV_CUDA_OFFLOAD_H

#include "cuda_device.h"

/* A backend's run on device-resident tensors (all pointers device memory), on `stream`. */
typedef mlav_status (*mlav_cuda_run_fn)(const mlav_problem_info *p, const void *state,
                                        const mlav_tensors *dev_tensors, void *workspace,
                                        size_t workspace_bytes, cudaStream_t stream);

/* A plan holds device arrays of the device it was made on (plan_device), so it runs there only:
 * MLAV_OK when current_device is plan_device, else MLAV_ERR_INVALID_ARG with a sentence naming
 * both ("cuda plan made on device 0, current device is 1: ..."). A pure function (the ordinals
 * are the caller's), so that it is testable without two GPUs; C linkage for the tests. */
extern "C" mlav_status mlav_cuda_check_plan_device(const char *backend, int plan_device,
                                                   int current_device);

/* The common `run` of both CUDA backends: first the device check above (plan_device: the
 * ordinal the plan was made on, backend: its name for the sentence); then, with MLAV_MEM_DEVICE
 * tensors, check each pointer really is device memory and aligned (q, kv_cache, out: 16 bytes;
 * the rest 4), then call fn asynchronously. With MLAV_MEM_HOST tensors, map them to the device
 * (allocate, copy), call fn, copy out/lse back, synchronize the stream and free (offload
 * style). */
mlav_status mlav_cuda_run_mapped(const mlav_problem_info *p, const void *state,
                                 const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                                 void *stream, mlav_cuda_run_fn fn, int plan_device,
                                 const char *backend);

#endif
