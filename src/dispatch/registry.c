/* The registry of compiled-in backends, backend names, and AUTO selection. CUDA first, CPU
 * last, as a preference order; the reference oracle is never picked by AUTO. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const mlav_backend_ops *const registry[] = {
#ifdef MLAV_WITH_CUDA
    &mlav_backend_cuda_ops,
    &mlav_backend_cuda_naive_ops,
#endif
    &mlav_backend_cpu_ops,
    &mlav_backend_reference_ops,
};

const mlav_backend_ops *mlav_backend_lookup(mlav_backend id)
{
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (registry[i]->id == id)
            return registry[i];
    return NULL;
}

int mlav_backend_compiled(mlav_backend b)
{
    return b == MLAV_BACKEND_AUTO || mlav_backend_lookup(b) != NULL;
}

static const struct {
    mlav_backend id;
    const char *name;
} names[] = {
    {MLAV_BACKEND_AUTO, "auto"},       {MLAV_BACKEND_CPU, "cpu"},
    {MLAV_BACKEND_CUDA, "cuda"},       {MLAV_BACKEND_CUDA_NAIVE, "cuda-naive"},
    {MLAV_BACKEND_REFERENCE, "reference"},
};

const char *mlav_backend_name(mlav_backend b)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].id == b)
            return names[i].name;
    return "?";
}

mlav_status mlav_backend_from_name(const char *name, mlav_backend *out)
{
    if (!name || !out)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "backend name and output must not be NULL");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i].name, name) == 0) {
            *out = names[i].id;
            return MLAV_OK;
        }
    return mlav_set_error(MLAV_ERR_INVALID_ARG,
                          "unknown backend '%s' (expected auto, cpu, cuda, cuda-naive or "
                          "reference)",
                          name);
}

#ifndef MLAV_WITH_CUDA
int mlav_cuda_device_count(void)
{
    return 0;
}

mlav_status mlav_cuda_device_describe(int index, char *buf, size_t buf_len)
{
    (void)index;
    if (buf && buf_len)
        buf[0] = '\0';
    return mlav_set_error(MLAV_ERR_NO_DEVICE, "this library was built without CUDA");
}
#endif
