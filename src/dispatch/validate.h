/* Input validation shared by every backend: one sentence per rule of docs/DESIGN.md#validation. */
#ifndef MLAV_DISPATCH_VALIDATE_H
#define MLAV_DISPATCH_VALIDATE_H

#include "backend.h"

/* Check a problem and fill `info` (allocating its arrays; free with mlav_problem_info_free). */
mlav_status mlav_problem_validate(const mlav_problem *p, mlav_problem_info *info);
void mlav_problem_info_free(mlav_problem_info *info);
/* The dtype of a problem's kv_cache: kv_dtype, where 0 (F32, a zero-initialised field) means the
 * q dtype (mlav_problem.kv_dtype). */
mlav_dtype mlav_problem_kv_dtype(const mlav_problem *p);

/* Check the tensors of one run against a validated problem. Host-resident page tables and masks
 * are read; device-resident ones are the kernels' to guard (an out-of-range page id reads as
 * NaN, never out of bounds). */
mlav_status mlav_tensors_validate(const mlav_problem_info *p, const mlav_tensors *t);


#endif
