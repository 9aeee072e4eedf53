/* The device merge of attention states: what merge_states.c (which validates every argument)
 * hands the CUDA kernel of src/cuda/merge_states.cu, defined only in a build with CUDA. */
#ifndef MLAV_COMMON_MERGE_STATES_H
#define MLAV_COMMON_MERGE_STATES_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One merge of `n` states, validated. State 0's o and lse are at o0 and l0; state i >= 1's at
 * o1 + (i - 1) * o_step elements and l1 + (i - 1) * l_step: a stacked tensor is o1 = o0 +
 * rows * dim (o_step the same), the in-place pair is o0 = out, o1 = other_out. Pointers to
 * device memory of the current device; lse may be NULL (not written). */
typedef struct mlav_merge_job {
    mlav_dtype dtype; /* of o and out: F32, BF16 or F16 */
    int32_t n;        /* 1 .. MLAV_MERGE_MAX_STATES */
    int64_t rows;     /* >= 0 (0: nothing is launched) */
    int32_t dim;      /* >= 0 */
    const void *o0, *o1;
    size_t o_step;
    const float *l0, *l1;
    size_t l_step;
    void *out;
    float *lse;
} mlav_merge_job;

/* Check that each named pointer is memory of the current device, then queue the merge on
 * `stream` (a cudaStream_t). Status and a sentence that starts with `fn` on failure; nothing
 * synchronized. */
mlav_status mlav_cuda_merge_states(const char *fn, const mlav_merge_job *job,
                                   const void *const *pointers, const char *const *names,
                                   int num_pointers, void *stream);

/* Check that each named pointer is memory of the current device (merge_states.cu). */
mlav_status mlav_cuda_check_device_pointers(const char *fn, const void *const *pointers,
                                            const char *const *names, int num_pointers);

/* The exchange of mlav_cp_merge_states (src/nccl/, defined only in a build with NCCL): the
 * communicator's rank count in *ranks, after checking that its device is the current one; and
 * the all-gathers of the R ranks' states, o_bytes of o and l_bytes of l from each rank, queued on
 * `stream` as one NCCL group. Status and a sentence that starts with `fn` on failure. */
mlav_status mlav_nccl_ranks(const char *fn, void *comm, int *ranks);
mlav_status mlav_nccl_gather_states(const char *fn, void *comm, size_t o_bytes, const void *o,
                                    void *gathered_o, size_t l_bytes, const float *l,
                                    float *gathered_l, void *stream);

#ifdef __cplusplus
}
#endif

#endif
