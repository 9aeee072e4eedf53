/* PLACEHOLDER: the OpenMP + OpenBLAS backend (being written). */
#include "../dispatch/backend.h"

static mlav_status cpu_available(void) { return MLAV_OK; }
static mlav_status cpu_plan(const mlav_problem_info *p, void **state, size_t *ws)
{
    (void)p, (void)state, (void)ws;
    return mlav_set_error(MLAV_ERR_UNSUPPORTED, "cpu backend not written yet");
}
static mlav_status cpu_run(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                           void *w, size_t wb, void *s)
{
    (void)p, (void)state, (void)t, (void)w, (void)wb, (void)s;
    return MLAV_ERR_UNSUPPORTED;
}
static void cpu_free(void *s) { (void)s; }
const mlav_backend_ops mlav_backend_cpu_ops = {
    "cpu", MLAV_BACKEND_CPU, MLAV_MEM_HOST, cpu_available, cpu_plan, cpu_run, cpu_free,
    mlav_host_workspace_alloc, mlav_host_workspace_free,
};
