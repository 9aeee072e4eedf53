/* What a context and a plan hold (context.c: plans for one problem; steps.c: plans for
 * limits). */
#ifndef MLAV_DISPATCH_PLAN_H
#define MLAV_DISPATCH_PLAN_H

#include "backend.h"

struct mlav_context {
    const mlav_backend_ops *ops; /* the backend this context runs */
    int is_auto;                 /* chosen by AUTO: plans may fall back to the CPU */
    char note[512];              /* how the backend was chosen */
};

struct mlav_plan {
    const mlav_backend_ops *ops;
    mlav_problem_info info;      /* the problem; for limits, the shape (backend.h) */
    void *state;
    size_t workspace_bytes;
    int for_limits;              /* made by mlav_plan_create_for_limits */
    mlav_limits limits;
    uint64_t id;                 /* plans for limits: unique per plan made, stamped into the
                                    step header of every workspace it updates (steps.c) */
};

/* The workspace rules of mlav_run and mlav_plan_update: present, large enough, 256-byte
 * aligned (context.c). */
mlav_status mlav_workspace_check(const mlav_plan *plan, const void *ws, size_t bytes);

/* mlav_run of a plan for limits (steps.c). */
mlav_status mlav_step_run(const mlav_plan *plan, const mlav_tensors *t, void *workspace,
                          size_t workspace_bytes, void *stream);

#endif
