/* Contexts: backend selection (AUTO, MLAV_BACKEND) and the host workspace helpers. Nothing here
 * knows a plan or a kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "plan.h"

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
        ctx->ops = mlav_auto_first(ctx->note, sizeof ctx->note);
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
