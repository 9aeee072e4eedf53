/* The lengths form of a step region: a step header (schedule_step.h), then the step's q_indptr
 * [max_batch + 1] and kv_lens [max_batch], a padding request's (q_len 0) kv_len kept as 0.
 * Backends that keep no schedule of their own take a step in this form: dispatch writes it at
 * the start of a host workspace (src/dispatch/step.c), cuda-naive's update on the device
 * (src/cuda/verify_naive.cu). One layout, so that one header check and one reading serve both. */
#ifndef MLAV_COMMON_STEP_REGION_H
#define MLAV_COMMON_STEP_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "hd.h"
#include "schedule_step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the region for `lim`, rounded up to 256 so that what follows it stays aligned. */
static MLAV_HD size_t mlav_step_region_bytes(const mlav_limits *lim)
{
    const size_t n =
        sizeof(mlav_step_header) + sizeof(int32_t) * (2 * (size_t)lim->max_batch + 1);
    return (n + 255) / 256 * 256;
}

static MLAV_HD int32_t *mlav_step_region_q_indptr(void *region)
{
    return (int32_t *)((char *)region + sizeof(mlav_step_header));
}

static MLAV_HD int32_t *mlav_step_region_kv_lens(void *region, const mlav_limits *lim)
{
    return mlav_step_region_q_indptr(region) + lim->max_batch + 1;
}

#ifdef __cplusplus
}
#endif

#endif
