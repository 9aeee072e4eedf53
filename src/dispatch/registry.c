/* The registry of compiled-in backends, backend names, and AUTO selection. CUDA first, CPU
 * last, as a preference order; the reference oracle is never picked by AUTO. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "plan.h"

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

/* AUTO's order of preference: the fast GPU path, then the CPU. */
static const mlav_backend auto_order[] = {MLAV_BACKEND_CUDA, MLAV_BACKEND_CPU};

const mlav_backend_ops *mlav_auto_first(char *note, size_t n)
{
    const mlav_backend_ops *cuda = mlav_backend_lookup(MLAV_BACKEND_CUDA);
    if (!cuda) {
        snprintf(note, n, "AUTO: built without CUDA; using cpu");
    } else if (cuda->available() != MLAV_OK) {
        snprintf(note, n, "AUTO: cuda unavailable (%s); using cpu", mlav_get_error());
    } else {
        snprintf(note, n, "AUTO: using cuda");
        return cuda;
    }
    return mlav_auto_next(cuda);
}

const mlav_backend_ops *mlav_auto_next(const mlav_backend_ops *tried)
{
    const size_t n = sizeof auto_order / sizeof auto_order[0];
    size_t k = 0;
    while (k < n && (!tried || auto_order[k] != tried->id))
        k++;
    for (k = k < n ? k + 1 : 0; k < n; k++) {
        const mlav_backend_ops *ops = mlav_backend_lookup(auto_order[k]);
        if (ops)
            return ops;
    }
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
