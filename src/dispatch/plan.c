/* Plans, updates and runs: one creation path, one validation path and one run path for both
 * kinds of plan. A plan for one problem is a plan for limits (the problem's sizes as its limits)
 * whose update the backend makes at plan time; a plan for limits gets each step's lengths from
 * mlav_plan_update. Nothing here knows a kernel or a schedule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/shard.h"
#include "plan.h"
#include "step.h"
#include "validate.h"

int32_t mlav_limits_max_batch(void)
{
    return MLAV_STEP_MAX_BATCH;
}

/* The shape of a plan for limits: the problem's fields checked as mlav_plan_create checks them
 * (through a one-request problem at the limits), then the limits in place of lengths. */
static mlav_status shape_validate(const mlav_problem *shape, const mlav_limits *lim,
                                  mlav_problem_info *info)
{
    if (!shape || !lim)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "shape and limits must not be NULL");
    if (lim->max_batch < 1 || lim->max_batch > MLAV_STEP_MAX_BATCH)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "limits.max_batch = %d is outside [1, %d]",
                              lim->max_batch, MLAV_STEP_MAX_BATCH);
    if (lim->max_tokens < 1)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "limits.max_tokens = %d must be >= 1",
                              lim->max_tokens);
    if (lim->max_q_len < 1 || lim->max_q_len > lim->max_tokens)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "limits.max_q_len = %d is outside [1, max_tokens = %d]",
                              lim->max_q_len, lim->max_tokens);
    if (lim->max_kv_len < lim->max_q_len)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "limits.max_kv_len = %d is less than max_q_len = %d",
                              lim->max_kv_len, lim->max_q_len);
    mlav_problem one = *shape;
    const int32_t q_indptr[2] = {0, lim->max_q_len}, kv_lens[1] = {lim->max_kv_len};
    one.batch = 1;
    one.q_indptr = q_indptr;
    one.kv_lens = kv_lens;
    mlav_status s = mlav_problem_validate(&one, info);
    if (s != MLAV_OK)
        return s;
    mlav_problem_info_free(info); /* the shape keeps no lengths */
    if ((int64_t)lim->max_tokens * info->H > INT32_MAX)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "limits.max_tokens * H = %lld query rows is too many (at most %d)",
                              (long long)lim->max_tokens * info->H, INT32_MAX);
    info->B = lim->max_batch;
    info->T = lim->max_tokens;
    info->max_q_len = lim->max_q_len;
    info->mask_words = mlav_tree_mask_words(lim->max_q_len);
    info->max_kv_len = lim->max_kv_len;
    info->total_kv = (int64_t)lim->max_batch * mlav_shard_rows(info->shard, lim->max_kv_len);
    return MLAV_OK;
}

/* The backend's plan of `plan` (its info, limits and id set), and the workspace it reports with
 * the step region of a host workspace before it. */
static mlav_status backend_plan(mlav_plan *plan)
{
    size_t bytes = 0;
    plan->state = NULL;
    plan->region_bytes = plan->for_limits && plan->ops->workspace_memory == MLAV_MEM_HOST
                             ? mlav_step_region_bytes(&plan->limits)
                             : 0;
    mlav_status s =
        plan->ops->plan(&plan->info, &plan->limits, plan->id, &plan->state, &bytes);
    if (s != MLAV_OK) {
        if (plan->state)
            plan->ops->free(plan->state);
        plan->state = NULL;
        return s;
    }
    plan->workspace_bytes = plan->region_bytes + bytes;
    return MLAV_OK;
}

/* Both public constructors end here: the backend's plan, and on an AUTO context, where the
 * backend declines, the next of AUTO's order (which says why in the context's note). */
static mlav_status plan_make(mlav_context *ctx, mlav_plan *plan, mlav_plan **out)
{
    plan->id = mlav_next_plan_id();
    plan->ops = ctx->ops;
    mlav_status s = backend_plan(plan);
    const mlav_backend_ops *next;
    while (s == MLAV_ERR_UNSUPPORTED && ctx->is_auto && (next = mlav_auto_next(plan->ops))) {
        snprintf(ctx->note, sizeof ctx->note, "AUTO: %s does not support this %s (%s); "
                 "falling back to %s", plan->ops->name,
                 plan->for_limits ? "plan for limits" : "problem", mlav_get_error(), next->name);
        plan->ops = next;
        s = backend_plan(plan);
    }
    if (s != MLAV_OK) {
        mlav_problem_info_free(&plan->info);
        free(plan);
        return s;
    }
    *out = plan;
    return MLAV_OK;
}

mlav_status mlav_plan_create(mlav_context *ctx, const mlav_problem *p, mlav_plan **out)
{
    if (!ctx || !out)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "ctx and plan must not be NULL");
    *out = NULL;
    mlav_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a plan");
    mlav_status s = mlav_problem_validate(p, &plan->info);
    if (s != MLAV_OK) {
        free(plan);
        return s;
    }
    /* the problem's sizes are its limits (internal: mlav_plan_limits refuses this plan) */
    plan->limits = (mlav_limits){.max_batch = plan->info.B,
                                 .max_tokens = plan->info.T,
                                 .max_q_len = plan->info.max_q_len,
                                 .max_kv_len = (int32_t)plan->info.max_kv_len};
    return plan_make(ctx, plan, out);
}

mlav_status mlav_plan_create_for_limits(mlav_context *ctx, const mlav_problem *shape,
                                        const mlav_limits *limits, mlav_plan **out)
{
    if (!ctx || !out)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "ctx and plan must not be NULL");
    *out = NULL;
    mlav_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a plan");
    mlav_status s = shape_validate(shape, limits, &plan->info);
    if (s != MLAV_OK) {
        free(plan);
        return s;
    }
    plan->for_limits = 1;
    plan->limits = *limits;
    return plan_make(ctx, plan, out);
}

void mlav_plan_free(mlav_plan *plan)
{
    if (!plan)
        return;
    if (plan->state)
        plan->ops->free(plan->state);
    mlav_problem_info_free(&plan->info);
    free(plan);
}

mlav_backend mlav_plan_backend(const mlav_plan *plan)
{
    return plan ? plan->ops->id : MLAV_BACKEND_AUTO;
}

size_t mlav_plan_workspace_bytes(const mlav_plan *plan)
{
    return plan ? plan->workspace_bytes : 0;
}

mlav_memory mlav_plan_workspace_memory(const mlav_plan *plan)
{
    return plan ? plan->ops->workspace_memory : MLAV_MEM_HOST;
}

mlav_status mlav_plan_limits(const mlav_plan *plan, mlav_limits *limits)
{
    if (!plan || !limits)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "plan and limits must not be NULL");
    if (!plan->for_limits)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "the plan was made for one problem, not for "
                                                    "limits");
    *limits = plan->limits;
    return MLAV_OK;
}

/* The workspace rules of mlav_run and mlav_plan_update: present, large enough, 256-byte
 * aligned. */
static mlav_status workspace_check(const mlav_plan *plan, const void *ws, size_t bytes)
{
    if (!ws)
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "workspace is NULL but the plan needs %zu bytes",
                              plan->workspace_bytes);
    if (bytes < plan->workspace_bytes)
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "workspace of %zu bytes is smaller than the %zu the plan needs",
                              bytes, plan->workspace_bytes);
    if ((uintptr_t)ws % 256 != 0)
        return mlav_set_error(MLAV_ERR_WORKSPACE, "workspace %p is not 256-byte aligned", ws);
    return MLAV_OK;
}

mlav_status mlav_plan_update(const mlav_plan *plan, const mlav_lengths *len, void *workspace,
                             size_t workspace_bytes, void *stream)
{
    if (!plan || !len)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "plan and lengths must not be NULL");
    if (!plan->for_limits)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "mlav_plan_update takes a plan made by "
                                                    "mlav_plan_create_for_limits");
    if (len->memory != MLAV_MEM_HOST && len->memory != MLAV_MEM_DEVICE)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "lengths.memory = %d is not a mlav_memory",
                              (int)len->memory);
    if (len->batch < 0 || len->batch > plan->limits.max_batch)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "lengths.batch = %d is outside [0, limits.max_batch = %d]",
                              len->batch, plan->limits.max_batch);
    mlav_status s = workspace_check(plan, workspace, workspace_bytes);
    if (s != MLAV_OK)
        return s;
    if (len->memory == MLAV_MEM_HOST) {
        s = mlav_step_check_lengths(&plan->limits, len);
        if (s != MLAV_OK)
            return s;
    } else if (!len->q_indptr || (len->batch > 0 && !len->kv_lens)) {
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "lengths.q_indptr and kv_lens must not be "
                                                    "NULL");
    }
    if (!plan->region_bytes)
        return plan->ops->update(&plan->info, plan->state, len, workspace, workspace_bytes,
                                 stream);
    if (len->memory != MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the %s backend takes host lengths (MLAV_MEM_HOST)",
                              plan->ops->name);
    mlav_lengths written;
    mlav_step_region_write(plan, len, workspace, &written);
    return plan->ops->update(&plan->info, plan->state, &written,
                             (char *)workspace + plan->region_bytes,
                             workspace_bytes - plan->region_bytes, stream);
}

mlav_status mlav_plan_step_status(const mlav_plan *plan, const void *workspace,
                                  size_t workspace_bytes, void *stream, int32_t *bad_request)
{
    if (bad_request)
        *bad_request = -1;
    if (!plan)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "plan must not be NULL");
    if (!plan->for_limits)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "the plan was made for one problem, not for "
                                                    "limits");
    mlav_status s = workspace_check(plan, workspace, workspace_bytes);
    if (s != MLAV_OK)
        return s;
    mlav_step_header hdr;
    if (plan->ops->step_read) {
        s = plan->ops->step_read(workspace, stream, &hdr, sizeof hdr);
        if (s != MLAV_OK)
            return s;
    } else {
        memcpy(&hdr, workspace, sizeof hdr);
    }
    if (!mlav_step_header_is_plans(plan, &hdr))
        return mlav_step_foreign(plan, &hdr);
    const int32_t bad = hdr.bad, batch = hdr.batch;
    if (bad == INT32_MAX)
        return MLAV_OK;
    if (bad_request)
        *bad_request = bad;
    if (bad >= batch)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "the last step's q_indptr was refused (it "
                                                    "must start at 0, not decrease and end "
                                                    "within limits.max_tokens): nothing ran");
    return mlav_set_error(MLAV_ERR_INVALID_ARG,
                          "the last step refused request %d (q_len or kv_len past the limits, "
                          "or kv_len < q_len): its rows were not written",
                          bad);
}

/* What a run's tensors are checked against: the plan's problem; for a plan for limits with a
 * host workspace, the step the workspace holds (read in place); with a device workspace, the
 * shape, whose tensors must be device memory (the step's lengths are on the device). */
static mlav_status run_problem(const mlav_plan *plan, const mlav_tensors *t, void *workspace,
                               size_t workspace_bytes, mlav_problem_info *step,
                               const mlav_problem_info **p)
{
    *p = &plan->info;
    if (!plan->for_limits)
        return MLAV_OK;
    mlav_status s = workspace_check(plan, workspace, workspace_bytes);
    if (s != MLAV_OK)
        return s;
    if (plan->region_bytes) {
        if (t && t->memory == MLAV_MEM_DEVICE)
            return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                                  "the %s backend cannot read MLAV_MEM_DEVICE tensors",
                                  plan->ops->name);
        s = mlav_step_region_read(plan, workspace, step);
        *p = step;
        return s;
    }
    if (t && t->memory == MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "a %s plan for limits runs on MLAV_MEM_DEVICE tensors (the step's "
                              "lengths are on the device)",
                              plan->ops->name);
    return MLAV_OK;
}

mlav_status mlav_run(const mlav_plan *plan, const mlav_tensors *t, void *workspace,
                     size_t workspace_bytes, void *stream)
{
    if (!plan)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "plan must not be NULL");
    mlav_problem_info step;
    const mlav_problem_info *p;
    mlav_status s = run_problem(plan, t, workspace, workspace_bytes, &step, &p);
    if (s == MLAV_OK)
        s = mlav_tensors_validate(p, t);
    if (s == MLAV_OK && plan->workspace_bytes > 0)
        s = workspace_check(plan, workspace, workspace_bytes);
    if (s != MLAV_OK)
        return s;
    return plan->ops->run(p, plan->state, t,
                          workspace ? (char *)workspace + plan->region_bytes : NULL,
                          workspace ? workspace_bytes - plan->region_bytes : 0, stream);
}

mlav_status mlav_verify(mlav_context *ctx, const mlav_problem *p, const mlav_tensors *t)
{
    mlav_plan *plan = NULL;
    mlav_status s = mlav_plan_create(ctx, p, &plan);
    if (s != MLAV_OK)
        return s;
    void *ws = NULL;
    if (plan->workspace_bytes > 0) {
        ws = plan->ops->workspace_alloc(plan->workspace_bytes);
        if (!ws) {
            mlav_plan_free(plan);
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY,
                                  "could not allocate a %zu-byte workspace for %s",
                                  plan->workspace_bytes, plan->ops->name);
        }
    }
    s = mlav_run(plan, t, ws, plan->workspace_bytes, NULL);
    if (ws)
        plan->ops->workspace_free(ws);
    mlav_plan_free(plan);
    return s;
}
