/* The exact plan's equal-shares candidate (schedule_shares.c). */
#ifndef MLAV_COMMON_SCHEDULE_SHARES_H
#define MLAV_COMMON_SCHEDULE_SHARES_H

#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The batch's KV tiles in equal shares across requests, at the part count whose modelled time
 * in whole tiles (mlav_schedule_tile_time) is least: *model that time and *out the schedule, or
 * *model -1 and an empty *out where the rule does not apply (requests with rows whose row tiles
 * differ, a KV shard, no request with rows, a request past max_splits at every count weighed) or
 * where no schedule could model within the margin of `beat` (mlav_shares_win with `one_wave`: a
 * lower bound says so without weighing; INT64_MAX: always weigh). MLAV_OK, or
 * MLAV_ERR_OUT_OF_MEMORY (then *model -1). Free *out with mlav_schedule_free. */
mlav_status mlav_schedule_shares(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                 int64_t beat, int one_wave, int64_t *model,
                                 mlav_schedule *out);

/* The same cut at `parts` parts (at most the batch's tiles), its later pieces by start (rounds
 * 0) or in rounds (1): the schedule the plan would write for that choice, and its model; where
 * the rule does not apply, as above. For the tests, which hold a step's shares
 * (schedule_step_shares.h) to it. */
mlav_status mlav_schedule_shares_at(const mlav_problem_info *p, const mlav_schedule_params *sp,
                                    int64_t parts, int rounds, int64_t *model,
                                    mlav_schedule *out);

#ifdef __cplusplus
}
#endif

#endif
