/* Contexts, plans and runs: backend selection (AUTO, MLAV_BACKEND), validation, then the
 * backend's table. Nothing here knows a kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "plan.h"
#include "validate.h"


void *mlav_host_workspace_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes ? bytes : 256) != 0)
        return NULL;
    return p;
}

void mlav_host_workspace_free(void *ptr)
{
    free(ptr);
}

/* AUTO: the first available of CUDA then CPU. */
static const mlav_backend_ops *pick_auto(char *note, size_t n)
{
    const mlav_backend_ops *cuda = mlav_backend_lookup(MLAV_BACKEND_CUDA);
    if (!cuda) {
        snprintf(note, n, "AUTO: built without CUDA; using cpu");
    } else if (cuda->available() != MLAV_OK) {
        snprintf(note, n, "AUTO: cuda unavailable (%s); using cpu", mlav_get_error());
    } else {
        snprintf(note, n, "AUTO: using cuda");
        return cuda;
    }
    return mlav_backend_lookup(MLAV_BACKEND_CPU);
}

mlav_status mlav_context_create(mlav_context **out, mlav_backend want)
{
    if (!out)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "ctx must not be NULL");
    *out = NULL;
    if (want < MLAV_BACKEND_AUTO || want > MLAV_BACKEND_REFERENCE)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "backend = %d is not a mlav_backend",
                              (int)want);
    mlav_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a context");

    const char *env = getenv("MLAV_BACKEND");
    if (want == MLAV_BACKEND_AUTO && env && *env) {
        mlav_backend forced;
        if (mlav_backend_from_name(env, &forced) != MLAV_OK) {
            free(ctx);
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "MLAV_BACKEND='%s' is not auto, cpu, cuda, cuda-naive or "
                                  "reference",
                                  env);
        }
        if (forced != MLAV_BACKEND_AUTO) {
            want = forced;
            snprintf(ctx->note, sizeof ctx->note, "MLAV_BACKEND=%s overrides AUTO", env);
        }
    }
    if (want == MLAV_BACKEND_AUTO) {
        ctx->ops = pick_auto(ctx->note, sizeof ctx->note);
        ctx->is_auto = 1;
    } else {
        ctx->ops = mlav_backend_lookup(want);
        if (!ctx->ops) {
            free(ctx);
            return mlav_set_error(MLAV_ERR_NO_DEVICE,
                                  "backend %s is not compiled into this library",
                                  mlav_backend_name(want));
        }
        mlav_status s = ctx->ops->available();
        if (s != MLAV_OK) {
            free(ctx);
            return s; /* the backend set the sentence */
        }
        if (!ctx->note[0])
            snprintf(ctx->note, sizeof ctx->note, "%s asked for explicitly", ctx->ops->name);
    }
    *out = ctx;
    return MLAV_OK;
}

void mlav_context_free(mlav_context *ctx)
{
    free(ctx);
}

mlav_backend mlav_context_backend(const mlav_context *ctx)
{
    return ctx ? ctx->ops->id : MLAV_BACKEND_AUTO;
}

const char *mlav_context_note(const mlav_context *ctx)
{
    return ctx ? ctx->note : "";
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
    plan->ops = ctx->ops;
    s = plan->ops->plan(&plan->info, &plan->state, &plan->workspace_bytes);
    if (s == MLAV_ERR_UNSUPPORTED && ctx->is_auto && plan->ops->id != MLAV_BACKEND_CPU) {
        /* AUTO promised an answer: fall back to the CPU and say why. */
        snprintf(ctx->note, sizeof ctx->note, "AUTO: %s does not support this problem (%s); "
                 "falling back to cpu", plan->ops->name, mlav_get_error());
        plan->ops = mlav_backend_lookup(MLAV_BACKEND_CPU);
        s = plan->ops->plan(&plan->info, &plan->state, &plan->workspace_bytes);
    }
    if (s != MLAV_OK) {
        mlav_problem_info_free(&plan->info);
        free(plan);
        return s;
    }
    *out = plan;
    return MLAV_OK;
}

void mlav_plan_free(mlav_plan *plan)
{
    if (!plan)
        return;
    if (plan->state && plan->for_limits)
        plan->ops->plan_limits_free(plan->state);
    else if (plan->state)
        plan->ops->plan_free(plan->state);
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

mlav_status mlav_workspace_check(const mlav_plan *plan, const void *ws, size_t bytes)
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

mlav_status mlav_run(const mlav_plan *plan, const mlav_tensors *t, void *workspace,
                     size_t workspace_bytes, void *stream)
{
    if (!plan)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "plan must not be NULL");
    if (plan->for_limits)
        return mlav_step_run(plan, t, workspace, workspace_bytes, stream);
    mlav_status s = mlav_tensors_validate(&plan->info, t);
    if (s != MLAV_OK)
        return s;
    if (plan->workspace_bytes > 0 &&
        (s = mlav_workspace_check(plan, workspace, workspace_bytes)) != MLAV_OK)
        return s;
    return plan->ops->run(&plan->info, plan->state, t, workspace, workspace_bytes, stream);
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
