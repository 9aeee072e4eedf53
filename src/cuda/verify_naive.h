/* The naive baseline kernel's launcher (verify_naive.cu), used by backend_naive.cu. */
#ifndef MLAV_CUDA_VERIFY_NAIVE_H
#define MLAV_CUDA_VERIFY_NAIVE_H

#include <cuda_runtime.h>

#include "cuda_device.h"

/* Threads per block: 8 warps, each scoring its own keys in pass 1; in pass 2 groups of threads
 * stride the latent columns and split the keys between the groups. */
#define MLAV_NAIVE_THREADS 256

/* The kernel that runs a problem (by q dtype and cache dtype, and vector loads when the dims
 * allow them: 16 bytes of a 32/16-bit cache, 8 of an FP8 one), for mlav_cuda_prepare_kernel and
 * the launch, and its name for sentences. */
const void *mlav_naive_kernel(const mlav_problem_info *p);
const char *mlav_naive_kernel_name(const mlav_problem_info *p);

/* Dynamic shared memory of one block, fp32: the query row and the longest request's score row
 * ((W + max_kv_len) * 4 bytes), or pass 2's partial sums if larger (at most 8 KiB). */
size_t mlav_naive_smem_bytes(const mlav_problem_info *p);

/* A plan for limits' step as the kernel reads it: the workspace's step region in its lengths
 * form (src/common/step_region.h), and the plan it must have been written by. */
typedef struct mlav_naive_step {
    void *region;     /* device: the start of the workspace */
    uint64_t owner;   /* the plan's id */
    mlav_limits lim;  /* the plan's limits */
} mlav_naive_step;

/* Launch one block per (token, head) on `stream` with device tensors `t` (q, kv_cache and out
 * 16-byte aligned); bad_pages [max_pages] of -1 is the row a device page-table row index outside
 * the table reads (page_row.cuh). A plan for one problem: `step` NULL, q_indptr [B+1] and
 * kv_lens [B] the plan's device copies, `p` the problem. A plan for limits: q_indptr and kv_lens
 * NULL, `step` the workspace's step, `p` the shape (T = max_tokens: a fixed grid); blocks of
 * rows past the step's tokens, of a request with q_len 0 or refused by the limits, or of a
 * workspace another plan (or no update) wrote, return at once, reading and writing nothing.
 * An FP8 cache's scale is t->kv_scale_ptr (device, read by the kernel) or else t->kv_scale
 * (checked here). Asynchronous; checks the launch. */
mlav_status mlav_naive_launch(const mlav_problem_info *p, const int32_t *q_indptr,
                              const int32_t *kv_lens, const int32_t *bad_pages,
                              const mlav_naive_step *step, const mlav_tensors *t,
                              size_t smem_bytes, cudaStream_t stream);

/* A plan for limits' update: write the step of q_indptr [batch+1] and kv_lens [batch] (memory
 * the device reads: device memory, or pinned host memory) into step->region on `stream`, stamped
 * with the plan, every request checked against the limits on the device as the flash backend's
 * scheduler checks them (schedule_step.h): the header's `bad` gets the first refused request, or
 * `batch` for a refused q_indptr. Asynchronous, capturable; checks the launch. */
mlav_status mlav_naive_step_write(const int32_t *q_indptr, const int32_t *kv_lens, int32_t batch,
                                  const mlav_naive_step *step, cudaStream_t stream);

#endif
