/* The backend table: what every backend implements, and what dispatch knows of it. The
 * validated problem and the error sentence it uses are the core floor's (src/core/problem.h).
 * Dispatch validates every input before a backend sees it, so backends may assume a valid
 * problem (mlav_problem_info) and valid tensors, and only check what is theirs to know
 * (dims they support, residency, alignment, workspace).
 *
 * One family of plan functions serves both kinds of plan: a plan for limits (engine steps) is
 * made once, each step's lengths reach it through `update`, and `run` runs the last update's
 * step; a plan for one problem is a plan for limits (the problem's sizes as its limits) whose
 * update the backend does inside `plan`, into memory the plan owns, so that its runs need no
 * update and the backend may keep that problem's exact launch shape (docs/DESIGN.md#backends). */
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
    /* Make a plan; *state is freed by `free`. `p` is the plan's validated problem: for a plan of
     * one problem its lengths too (mlav_info_has_lengths: q_indptr, kv_lens and the derived
     * lengths, which `lim` repeats), whose update the backend makes here; for a plan for limits
     * the shape with the limits in place of lengths (B = max_batch, T = max_tokens, max_q_len,
     * max_kv_len, total_kv = B x max_kv_len; no arrays). `owner` is the plan's id, stamped into
     * every step header its updates write. Returns MLAV_ERR_UNSUPPORTED with a sentence for what
     * it cannot do (dims, a plan for limits); may allocate and synchronize. */
    mlav_status (*plan)(const mlav_problem_info *p, const mlav_limits *lim, uint64_t owner,
                        void **state, size_t *workspace_bytes);
    /* Write one step's schedule into the workspace on `stream` (plans for limits only). Dispatch
     * checked the lengths against the limits (host ones in full) and, where the workspace is
     * host memory, already wrote the step region (step.h) before the `workspace` it passes. */
    mlav_status (*update)(const mlav_problem_info *shape, const void *state,
                          const mlav_lengths *len, void *workspace, size_t workspace_bytes,
                          void *stream);
    /* Run on validated tensors: the plan's problem, or the workspace's step. `p` is what the
     * tensors were validated against: the plan's problem; for a plan for limits with a host
     * workspace the step read from it (its lengths in the workspace, the limits' mask row
     * stride); with a device workspace the shape. Residency rules are the backend's; nothing of
     * a step another plan (or no update) wrote runs, and nothing past the plan's limits is read
     * or written, whatever the workspace holds. Allocates nothing on device tensors. */
    mlav_status (*run)(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                       void *workspace, size_t workspace_bytes, void *stream);
    void (*free)(void *state);
    /* Allocate / free `bytes` of workspace where it must live (used by mlav_verify only). */
    void *(*workspace_alloc)(size_t bytes);
    void (*workspace_free)(void *ptr);
    /* Copy the step header's `bytes` (sizeof mlav_step_header, schedule_step.h) from a device
     * workspace, ordered on `stream`; synchronizes. NULL: the workspace is host memory. */
    mlav_status (*step_read)(const void *workspace, void *stream, void *header, size_t bytes);
} mlav_backend_ops;

/* Whether a plan's validated problem carries its lengths (a plan for one problem) or is the
 * shape of a plan for limits. */
static inline int mlav_info_has_lengths(const mlav_problem_info *p)
{
    return p->q_indptr != NULL;
}

/* One step's problem: the shape's fields with a step's host lengths (the arrays are not copied)
 * and the lengths derived from them; the mask row stride stays the shape's (the limits'
 * max_q_len), as the step's tensors keep the limits' shapes. Allocates nothing. */
void mlav_step_info(const mlav_problem_info *shape, int32_t batch, const int32_t *q_indptr,
                    const int32_t *kv_lens, mlav_problem_info *step);

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
