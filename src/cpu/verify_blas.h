/* What the `cpu` backend (verify_blas.c) tells the tests beyond its table. */
#ifndef MLAV_CPU_VERIFY_BLAS_H
#define MLAV_CPU_VERIFY_BLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Plans the cpu backend has made and schedules it has built in this process: a plan for limits
 * plans once and schedules at each update, a plan for one problem does both once, and a run
 * does neither. */
void mlav_cpu_plan_counts(long *plans, long *schedules);

#ifdef __cplusplus
}
#endif

#endif
