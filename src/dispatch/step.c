/* A plan's step: plan ids, the step header's provenance, the rules of host lengths, and the step
 * region at the start of a host workspace. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../common/shard.h"
#include "step.h"

/* Ids pass through a bijective mix, so that ids of consecutive plans differ in every byte, and
 * are never 0 or all ones (what a zeroed or 0xff-filled workspace holds where a header's owner
 * would be). */
uint64_t mlav_next_plan_id(void)
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

int mlav_step_header_is_plans(const mlav_plan *plan, const mlav_step_header *hdr)
{
    return hdr->owner == plan->id &&
           memcmp(&hdr->limits, &plan->limits, sizeof plan->limits) == 0;
}

mlav_status mlav_step_foreign(const mlav_plan *plan, const mlav_step_header *hdr)
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

mlav_status mlav_step_check_lengths(const mlav_limits *lim, const mlav_lengths *len)
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

void mlav_step_info(const mlav_problem_info *shape, int32_t batch, const int32_t *q_indptr,
                    const int32_t *kv_lens, mlav_problem_info *step)
{
    *step = *shape;
    step->B = batch;
    step->q_indptr = (int32_t *)q_indptr; /* read only: the info's arrays are not const */
    step->kv_lens = (int32_t *)kv_lens;
    step->T = q_indptr[batch];
    step->max_q_len = 0;
    step->max_kv_len = 0;
    step->total_kv = 0;
    for (int32_t b = 0; b < batch; b++) {
        const int32_t q = q_indptr[b + 1] - q_indptr[b];
        step->max_q_len = q > step->max_q_len ? q : step->max_q_len;
        step->max_kv_len = kv_lens[b] > step->max_kv_len ? kv_lens[b] : step->max_kv_len;
        step->total_kv += mlav_shard_rows(shape->shard, kv_lens[b]);
    }
}

/* ---- the step region of a host workspace -------------------------------------------------- */

void mlav_step_region_write(const mlav_plan *plan, const mlav_lengths *len, void *workspace,
                            mlav_lengths *written)
{
    mlav_step_header *hdr = workspace;
    memset(hdr, 0, sizeof *hdr);
    hdr->bad = INT32_MAX;
    hdr->batch = len->batch;
    hdr->owner = plan->id;
    hdr->limits = plan->limits;
    int32_t *q = mlav_step_region_q_indptr(workspace);
    int32_t *kv = mlav_step_region_kv_lens(workspace, &plan->limits);
    memcpy(q, len->q_indptr, sizeof(int32_t) * (size_t)(len->batch + 1));
    for (int32_t b = 0; b < len->batch; b++)
        kv[b] = len->q_indptr[b + 1] > len->q_indptr[b] ? len->kv_lens[b] : 0;
    *written = (mlav_lengths){MLAV_MEM_HOST, len->batch, q, kv};
}

mlav_status mlav_step_region_read(const mlav_plan *plan, void *workspace,
                                  mlav_problem_info *step)
{
    const mlav_step_header *hdr = workspace;
    if (!mlav_step_header_is_plans(plan, hdr))
        return mlav_step_foreign(plan, hdr);
    if (hdr->batch < 0 || hdr->batch > plan->limits.max_batch)
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "the workspace's step has batch %d, outside [0, limits.max_batch = "
                              "%d]: was it written over since its update?",
                              hdr->batch, plan->limits.max_batch);
    const mlav_lengths len = {MLAV_MEM_HOST, hdr->batch, mlav_step_region_q_indptr(workspace),
                              mlav_step_region_kv_lens(workspace, &plan->limits)};
    mlav_status s = mlav_step_check_lengths(&plan->limits, &len);
    for (int32_t b = 0; b < len.batch && s == MLAV_OK; b++)
        if (len.q_indptr[b + 1] == len.q_indptr[b] && len.kv_lens[b] != 0)
            s = mlav_set_error(MLAV_ERR_INVALID_ARG, "padding request %d has kv_len %d", b,
                               len.kv_lens[b]);
    if (s != MLAV_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mlav_get_error());
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "the workspace's step breaks the rules its update checked (%s): "
                              "was it written over since?",
                              why);
    }
    mlav_step_info(&plan->info, len.batch, len.q_indptr, len.kv_lens, step);
    return MLAV_OK;
}
