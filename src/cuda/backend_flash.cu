/* PLACEHOLDER (being written): the flash verify backend's ops table. */
#include "cuda_backend.h"

static mlav_status flash_plan(const mlav_problem_info *p, void **state, size_t *ws)
{
    (void)p;
    *state = NULL;
    *ws = 0;
    return mlav_set_error(MLAV_ERR_UNSUPPORTED, "the flash verify kernel is not written yet");
}
static mlav_status flash_run(const mlav_problem_info *, const void *, const mlav_tensors *, void *,
                             size_t, void *)
{
    return MLAV_ERR_UNSUPPORTED;
}
static void flash_free(void *) {}

extern "C" const mlav_backend_ops mlav_backend_cuda_ops = {
    "cuda", MLAV_BACKEND_CUDA, MLAV_MEM_DEVICE, mlav_cuda_available, flash_plan, flash_run,
    flash_free, mlav_cuda_workspace_alloc, mlav_cuda_workspace_free,
};
