/* The device scheduler's launch (its kernel: schedule_step_kernel.cuh). */
#include "schedule_step_kernel.cuh"

mlav_status mlav_step_schedule_prepare(void)
{
    /* the same size for every plan: raising the limit to it never lowers another's */
    MLAV_CUDA_TRY(cudaFuncSetAttribute(step_schedule_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)sizeof(sched_smem)));
    return MLAV_OK;
}

mlav_status mlav_step_schedule_launch(const mlav_step_sched_params *p, cudaStream_t stream)
{
    step_schedule_kernel<<<1, NTH, sizeof(sched_smem), stream>>>(*p);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
