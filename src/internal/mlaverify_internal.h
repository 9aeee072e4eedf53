/* What the tools (tools/bundle, tools/cli) and the lab (bench/program, bench/diag) take from
 * inside the library, beyond the public API of include/mlaverify.h: the one door through which
 * they reach it, so that no tool names a path into a backend and each rule still exists once.
 *
 *   the validated problem    mlav_problem_info and its helpers, mlav_kv_scale_host, the
 *                            per-thread error sentence (mlav_set_error, mlav_get_error)
 *   validation               mlav_problem_validate / _info_free, mlav_problem_kv_dtype,
 *                            mlav_tensors_validate: a bundle is checked by the library's rules
 *   the fp64 oracle          mlav_oracle_compute, mlav_visible, mlav_kv_row_index: the
 *                            generator's expectations
 *   dtype conversions        mlav_load_as_f32, mlav_store_from_f32, mlav_f32_to_e4m3 ... (host
 *                            and device: the bench fills its inputs with them)
 *   the split schedule rule  schedule.h and schedule_step.h (the schedule diagnostics), and in
 *                            CUDA code the flash kernel's schedule parameters
 *   the cpu backend's counts mlav_cpu_plan_counts: plans made and schedules built, for the tests
 *                            that hold a run to neither
 *
 * None of it is ABI: the shared library keeps these symbols hidden, and whoever includes this
 * header links the static library (the CMake target mlaverify_internal does both). It is not
 * installed; a program built against an installed mlaverify uses include/mlaverify.h alone. */
#ifndef MLAV_INTERNAL_H
#define MLAV_INTERNAL_H

#include "mlaverify.h"

#include "../common/dtype.h"
#include "../common/schedule.h"
#include "../common/schedule_step.h"
#include "../core/problem.h"
#include "../cpu/oracle.h"
#include "../cpu/verify_blas.h"
#include "../dispatch/validate.h"
#include "../cuda/flash_family.h" /* the family rule's constants (host-only header) */
#ifdef __CUDACC__
#include "../cuda/flash.h"
#endif

#endif
