/* The backend table: what every backend implements, and what dispatch knows of it. The
 * validated problem and the error sentence it uses are the core floor's (src/core/problem.h).
 * Dispatch validates every input before a backend sees it, so backends may assume a valid
 * problem (mlav_problem_info) and valid tensors, and only check what is theirs to know
 * (dims they support, residency, alignment, workspace). */
#ifndef MLAV_DISPATCH_BACKEND_H
#define MLAV_DISPATCH_BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/problem.h"
#include "mlaverify.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlav_backend_ops {
    const char *name;                  /* as in mlav_backend_name() */
    mlav_backend id;
    mlav_memory workspace_memory;      /* where run's workspace must live */
    /* MLAV_OK if the backend can run here at all (device present...); else a status and err. */
    mlav_status (*available)(void);
    /* Check the problem is supported, schedule it; *state is freed by plan_free.
     * Returns MLAV_ERR_UNSUPPORTED with a sentence (mlav_set_error) for dims it cannot do. */
    mlav_status (*plan)(const mlav_problem_info *p, void **state, size_t *workspace_bytes);
    /* Run on validated tensors. `t->memory` residency rules are the backend's to enforce. */
    mlav_status (*run)(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                       void *workspace, size_t workspace_bytes, void *stream);
    void (*plan_free)(void *state);
    /* Allocate / free `bytes` of workspace where it must live (used by mlav_verify only). */
    void *(*workspace_alloc)(size_t bytes);
    void (*workspace_free)(void *ptr);
    /* Plans for limits (engine steps, steps.c). NULL plan_limits: the backend runs them through
     * dispatch's host path (the step's lengths kept in the workspace, a plan of the step made at
     * each run), which only host-memory backends can take. `shape` is the plan's info with the
     * limits in place of lengths (B = max_batch, T = max_tokens, max_q_len, max_kv_len; no
     * q_indptr or kv_lens arrays). */
    mlav_status (*plan_limits)(const mlav_problem_info *shape, const mlav_limits *lim,
                               uint64_t owner, void **state, size_t *workspace_bytes);
    void (*plan_limits_free)(void *state);
    /* Write one step's schedule into the workspace on `stream`, its header stamped with the
     * plan's `owner` id and limits (mlav_step_header); host lengths were checked against the
     * limits by dispatch. */
    mlav_status (*update)(const mlav_problem_info *shape, const void *state,
                          const mlav_lengths *len, void *workspace, size_t workspace_bytes,
                          void *stream);
    /* Run the workspace's step on validated tensors: nothing of a step whose header another
     * plan (or no update) wrote, and no read or write past the plan's limits whatever the
     * workspace holds. */
    mlav_status (*run_limits)(const mlav_problem_info *shape, const void *state,
                              const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                              void *stream);
    /* Copy the step header's `bytes` (sizeof mlav_step_header, schedule_step.h) from the
     * workspace, ordered on `stream`; synchronizes. NULL: the workspace is host memory. */
    mlav_status (*step_read)(const void *workspace, void *stream, void *header, size_t bytes);
} mlav_backend_ops;

/* Host workspace helpers for the CPU backends (256-byte aligned, as the API promises). */
void *mlav_host_workspace_alloc(size_t bytes);
void mlav_host_workspace_free(void *ptr);

/* Backends, registered in src/dispatch/registry.c (CUDA ones only when built with CUDA). */
extern const mlav_backend_ops mlav_backend_cpu_ops;
extern const mlav_backend_ops mlav_backend_reference_ops;
#ifdef MLAV_WITH_CUDA
extern const mlav_backend_ops mlav_backend_cuda_ops;
extern const mlav_backend_ops mlav_backend_cuda_naive_ops;
#endif

/* The ops of a compiled-in backend, or NULL. */
const mlav_backend_ops *mlav_backend_lookup(mlav_backend id);

#ifdef __cplusplus
}
#endif

#endif
