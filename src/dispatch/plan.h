/* What a context and a plan hold (context.c: contexts; registry.c: AUTO's order; plan.c: plans,
 * updates and runs; step.c: a plan's step in its workspace). */
#ifndef MLAV_DISPATCH_PLAN_H
#define MLAV_DISPATCH_PLAN_H

#include "backend.h"

struct mlav_context {
    const mlav_backend_ops *ops; /* the backend this context runs */
    int is_auto;                 /* chosen by AUTO: plans may fall back (registry.c's order) */
    char note[512];              /* how the backend was chosen */
};

/* One kind of plan: a plan for limits, or a plan for one problem (the problem's sizes as its
 * limits, its update made at plan time by the backend, into memory the plan owns). */
struct mlav_plan {
    const mlav_backend_ops *ops;
    mlav_problem_info info;      /* one problem: with its lengths; for limits: the shape */
    mlav_limits limits;
    int for_limits;              /* made by mlav_plan_create_for_limits: updated per step */
    uint64_t id;                 /* unique per plan made, stamped into the step header of every
                                    workspace it updates (step.c) */
    void *state;                 /* the backend's */
    size_t workspace_bytes;      /* what the caller allocates: region_bytes + the backend's */
    size_t region_bytes;         /* the step region dispatch keeps at the start of a host
                                    workspace (plans for limits of host backends), else 0 */
};

/* AUTO (registry.c): the backend AUTO tries first, and the one it falls back to when `tried`
 * declines a plan (MLAV_ERR_UNSUPPORTED); NULL when there is none. The one order of
 * preference: cuda, then cpu; never cuda-naive or reference. */
const mlav_backend_ops *mlav_auto_first(char *note, size_t n);
const mlav_backend_ops *mlav_auto_next(const mlav_backend_ops *tried);

#endif
