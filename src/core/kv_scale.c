/* The FP8 KV scale of a run as the host sees it: one rule for every backend that reads it on the
 * host (dispatch's validation, the CPU backends, the CUDA offload path). */

#include "problem.h"

mlav_status mlav_kv_scale_host(const mlav_problem_info *p, const mlav_tensors *t, float *scale)
{
    *scale = 1.0f;
    if (p->kv_dtype != MLAV_DTYPE_FP8_E4M3)
        return MLAV_OK;
    const int from_ptr = t->kv_scale_ptr != NULL;
    if (from_ptr && t->memory != MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_INTERNAL, "kv_scale_ptr is device memory: it is the "
                                                 "kernels' to read");
    const float v = from_ptr ? *t->kv_scale_ptr : t->kv_scale;
    if (!MLAV_KV_SCALE_OK(v))
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s = %g: the FP8 KV scale must be finite and > 0 (a KV element "
                              "is e4m3(byte) x kv_scale)",
                              from_ptr ? "*tensors.kv_scale_ptr" : "tensors.kv_scale", (double)v);
    *scale = v;
    return MLAV_OK;
}
