/* A plan's step (plans for limits): the header that says which plan's update wrote a workspace,
 * the step region dispatch keeps at the start of a host workspace (the step's lengths, which a
 * run checks and validates its tensors against), and the rules host lengths must keep. */
#ifndef MLAV_DISPATCH_STEP_H
#define MLAV_DISPATCH_STEP_H

#include "../common/schedule_step.h"
#include "../common/step_region.h"
#include "plan.h"

/* A new plan's id: unique per plan made in this process, never 0 or all ones. */
uint64_t mlav_next_plan_id(void);

/* Host lengths against the limits: the first broken rule, as a sentence. */
mlav_status mlav_step_check_lengths(const mlav_limits *lim, const mlav_lengths *len);

/* Write a step's host lengths (checked) into the region, stamped with the plan: a padding
 * request's (q_len 0) kv_len is kept as 0, so that no run reads its page ids. *written gets the
 * lengths as the region holds them. */
void mlav_step_region_write(const mlav_plan *plan, const mlav_lengths *len, void *workspace,
                            mlav_lengths *written);

/* The step a host workspace holds, as a problem (its arrays point into the workspace; nothing
 * is allocated): MLAV_ERR_WORKSPACE when another plan's update (or none) wrote it, or when it
 * breaks the rules its update checked (written over since). */
mlav_status mlav_step_region_read(const mlav_plan *plan, void *workspace,
                                  mlav_problem_info *step);

/* Whether a step header was written by this plan (its id and limits), and the sentence when
 * not (MLAV_ERR_WORKSPACE). */
int mlav_step_header_is_plans(const mlav_plan *plan, const mlav_step_header *hdr);
mlav_status mlav_step_foreign(const mlav_plan *plan, const mlav_step_header *hdr);

#endif
