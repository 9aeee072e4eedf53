/* Plans for limits (engine steps): creation, the per-step update and run, and the host path of
 * the backends that keep a step's lengths in a host workspace (cpu, reference). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/schedule_step.h"
#include "plan.h"
#include "validate.h"

/* The host path's step region: the header, then q_indptr [max_batch + 1], kv_lens [max_batch]. */
static size_t host_step_bytes(const mlav_limits *lim)
{
    return sizeof(mlav_step_header) + sizeof(int32_t) * (2 * (size_t)lim->max_batch + 1);
}

static int32_t *host_step_q_indptr(void *ws)
{
    return (int32_t *)((char *)ws + sizeof(mlav_step_header));
}

static int32_t *host_step_kv_lens(void *ws, const mlav_limits *lim)
{
    return host_step_q_indptr(ws) + lim->max_batch + 1;
}

static int host_path(const mlav_plan *plan)
{
    return plan->ops->plan_limits == NULL;
}

/* A new plan's id: unique per plan made in this process (a counter), through a bijective mix
 * so that ids of consecutive plans differ in every byte, and never 0 or all ones (what a zeroed
 * or 0xff-filled workspace holds where a header's owner would be). */
static uint64_t next_plan_id(void)
{
    static atomic_uint_fast64_t counter;
    for (;;) {
        uint64_t z = (uint64_t)atomic_fetch_add(&counter, 1) + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        if (z != 0 && z != UINT64_MAX)
            return z;
    }
}

/* Whether the workspace's step header was written by this plan: its id and limits. */
static int header_is_plans(const mlav_plan *plan, const mlav_step_header *hdr)
{
    return hdr->owner == plan->id &&
           memcmp(&hdr->limits, &plan->limits, sizeof plan->limits) == 0;
}

static mlav_status foreign_step(const mlav_plan *plan, const mlav_step_header *hdr)
{
    if (hdr->owner == 0 || hdr->owner == UINT64_MAX)
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "no mlav_plan_update of this plan wrote this workspace (its step "
                              "header is blank): update it before running");
    return mlav_set_error(MLAV_ERR_WORKSPACE,
                          "the workspace holds a step written by another plan (limits "
                          "max_batch %d, max_tokens %d, max_q_len %d, max_kv_len %d; this plan's "
                          "are %d, %d, %d, %d): a workspace belongs to the plan whose update "
                          "wrote it last",
                          hdr->limits.max_batch, hdr->limits.max_tokens, hdr->limits.max_q_len,
                          hdr->limits.max_kv_len, plan->limits.max_batch,
                          plan->limits.max_tokens, plan->limits.max_q_len,
                          plan->limits.max_kv_len);
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
    info->total_kv = (int64_t)lim->max_batch * lim->max_kv_len;
    return MLAV_OK;
}

static mlav_status plan_backend(const mlav_backend_ops *ops, mlav_plan *plan)
{
    if (ops->plan_limits)
        return ops->plan_limits(&plan->info, &plan->limits, plan->id, &plan->state,
                                &plan->workspace_bytes);
    if (ops->workspace_memory != MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED, "the %s backend has no plan for limits",
                              ops->name);
    plan->state = NULL;
    plan->workspace_bytes = host_step_bytes(&plan->limits);
    return MLAV_OK;
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
    plan->id = next_plan_id();
    plan->ops = ctx->ops;
    s = plan_backend(plan->ops, plan);
    if (s == MLAV_ERR_UNSUPPORTED && ctx->is_auto && plan->ops->id != MLAV_BACKEND_CPU) {
        snprintf(ctx->note, sizeof ctx->note,
                 "AUTO: %s does not support this plan for limits (%s); falling back to cpu",
                 plan->ops->name, mlav_get_error());
        plan->ops = mlav_backend_lookup(MLAV_BACKEND_CPU);
        s = plan_backend(plan->ops, plan);
    }
    if (s != MLAV_OK) {
        if (plan->state)
            plan->ops->plan_limits_free(plan->state);
        free(plan);
        return s;
    }
    *out = plan;
    return MLAV_OK;
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

/* Host lengths against the limits: the first broken rule, as a sentence. */
static mlav_status check_host_lengths(const mlav_limits *lim, const mlav_lengths *len)
{
    const int32_t B = len->batch;
    if (!len->q_indptr || (B > 0 && !len->kv_lens))
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "lengths.q_indptr and kv_lens must not be "
                                                    "NULL");
    if (len->q_indptr[0] != 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "q_indptr[0] = %d must be 0",
                              len->q_indptr[0]);
    for (int32_t b = 0; b < B; b++) {
        const int64_t q = (int64_t)len->q_indptr[b + 1] - len->q_indptr[b];
        const int64_t kv = len->kv_lens[b];
        if (q < 0)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "q_indptr is decreasing at request %d (%d then %d)", b,
                                  len->q_indptr[b], len->q_indptr[b + 1]);
        if (q > lim->max_q_len)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "request %d has q_len %lld, past limits.max_q_len = %d", b,
                                  (long long)q, lim->max_q_len);
        if (q > 0 && kv < q)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "kv_lens[%d] = %lld is less than q_len %lld (the draft rows "
                                  "must be in the cache)",
                                  b, (long long)kv, (long long)q);
        if (q > 0 && kv > lim->max_kv_len)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "kv_lens[%d] = %lld is past limits.max_kv_len = %d", b,
                                  (long long)kv, lim->max_kv_len);
    }
    if (len->q_indptr[B] > lim->max_tokens)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "q_indptr[batch] = %d tokens is past limits.max_tokens = %d",
                              len->q_indptr[B], lim->max_tokens);
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
    mlav_status s = mlav_workspace_check(plan, workspace, workspace_bytes);
    if (s != MLAV_OK)
        return s;
    if (len->memory == MLAV_MEM_HOST) {
        s = check_host_lengths(&plan->limits, len);
        if (s != MLAV_OK)
            return s;
    } else if (!len->q_indptr || (len->batch > 0 && !len->kv_lens)) {
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "lengths.q_indptr and kv_lens must not be "
                                                    "NULL");
    }
    if (!host_path(plan))
        return plan->ops->update(&plan->info, plan->state, len, workspace, workspace_bytes,
                                 stream);
    if (len->memory != MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the %s backend takes host lengths (MLAV_MEM_HOST)",
                              plan->ops->name);
    mlav_step_header *hdr = workspace;
    memset(hdr, 0, sizeof *hdr);
    hdr->bad = INT32_MAX;
    hdr->batch = len->batch;
    hdr->owner = plan->id;
    hdr->limits = plan->limits;
    memcpy(host_step_q_indptr(workspace), len->q_indptr,
           sizeof(int32_t) * (size_t)(len->batch + 1));
    /* a padding request (q_len 0) is skipped: its kv_len (which may be anything) is kept as 0,
     * so that the run reads none of its page ids */
    int32_t *kv = host_step_kv_lens(workspace, &plan->limits);
    for (int32_t b = 0; b < len->batch; b++)
        kv[b] = len->q_indptr[b + 1] > len->q_indptr[b] ? len->kv_lens[b] : 0;
    return MLAV_OK;
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
    mlav_status s = mlav_workspace_check(plan, workspace, workspace_bytes);
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
    if (!header_is_plans(plan, &hdr))
        return foreign_step(plan, &hdr);
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

/* The host path's run: a plan of the step made from the lengths in the workspace, which must
 * be this plan's step (its header) and still keep within its limits (the caller owns the
 * workspace and may have written over it since the update). */
static mlav_status host_step_run(const mlav_plan *plan, const mlav_tensors *t, void *workspace)
{
    const mlav_step_header *hdr = workspace;
    if (!header_is_plans(plan, hdr))
        return foreign_step(plan, hdr);
    if (hdr->batch < 0 || hdr->batch > plan->limits.max_batch)
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "the workspace's step has batch %d, outside [0, limits.max_batch = "
                              "%d]: was it written over since its update?",
                              hdr->batch, plan->limits.max_batch);
    /* an empty step runs an empty problem: the tensors are checked as for any run */
    const int32_t zero[2] = {0, 0};
    const int32_t batch = hdr->batch > 0 ? hdr->batch : 1;
    const mlav_lengths len = {MLAV_MEM_HOST, hdr->batch,
                              hdr->batch > 0 ? host_step_q_indptr(workspace) : zero,
                              hdr->batch > 0 ? host_step_kv_lens(workspace, &plan->limits) : zero};
    mlav_status s = check_host_lengths(&plan->limits, &len);
    if (s == MLAV_OK) {
        for (int32_t b = 0; b < len.batch && s == MLAV_OK; b++)
            if (len.q_indptr[b + 1] == len.q_indptr[b] && len.kv_lens[b] != 0)
                s = mlav_set_error(MLAV_ERR_INVALID_ARG, "padding request %d has kv_len %d",
                                   b, len.kv_lens[b]);
    }
    if (s != MLAV_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mlav_get_error());
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "the workspace's step breaks the rules its update checked (%s): "
                              "was it written over since?",
                              why);
    }
    mlav_problem p = {
        .num_heads = plan->info.H, .d_latent = plan->info.Dl, .d_rope = plan->info.Dr,
        .softmax_scale = plan->info.scale, .dtype = plan->info.dtype,
        .kv_dtype = plan->info.kv_dtype, .page_size = plan->info.page_size, .batch = batch,
        .q_indptr = len.q_indptr, .kv_lens = len.kv_lens, .max_pages = plan->info.max_pages};
    mlav_problem_info info;
    s = mlav_problem_validate(&p, &info);
    if (s != MLAV_OK)
        return s;
    /* the masks' row stride is the plan's (limits.max_q_len), not the step's */
    info.mask_words = plan->info.mask_words;
    s = mlav_tensors_validate(&info, t);
    if (s != MLAV_OK || info.T == 0) {
        mlav_problem_info_free(&info);
        return s;
    }
    void *state = NULL, *ws = NULL;
    size_t bytes = 0;
    if (s == MLAV_OK)
        s = plan->ops->plan(&info, &state, &bytes);
    if (s == MLAV_OK && bytes > 0 && !(ws = plan->ops->workspace_alloc(bytes)))
        s = mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "could not allocate a %zu-byte workspace "
                                                   "for this step", bytes);
    if (s == MLAV_OK)
        s = plan->ops->run(&info, state, t, ws, bytes, NULL);
    if (ws)
        plan->ops->workspace_free(ws);
    if (state)
        plan->ops->plan_free(state);
    mlav_problem_info_free(&info);
    return s;
}

mlav_status mlav_step_run(const mlav_plan *plan, const mlav_tensors *t, void *workspace,
                          size_t workspace_bytes, void *stream)
{
    mlav_status s = mlav_workspace_check(plan, workspace, workspace_bytes);
    if (s != MLAV_OK)
        return s;
    if (host_path(plan)) {
        if (t && t->memory == MLAV_MEM_DEVICE)
            return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                                  "the %s backend cannot read MLAV_MEM_DEVICE tensors",
                                  plan->ops->name);
        return host_step_run(plan, t, workspace);
    }
    if (t && t->memory == MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "a %s plan for limits runs on MLAV_MEM_DEVICE tensors (the step's "
                              "lengths are on the device)",
                              plan->ops->name);
    s = mlav_tensors_validate(&plan->info, t);
    if (s != MLAV_OK)
        return s;
    return plan->ops->run_limits(&plan->info, plan->state, t, workspace, workspace_bytes, stream);
}
