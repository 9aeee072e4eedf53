/* Status names, version, and the per-thread error sentence behind mlav_last_error(). */
#include <stdarg.h>
#include <stdio.h>

#include "problem.h"

static _Thread_local char last_error[1024];

mlav_status mlav_set_error(mlav_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

const char *mlav_get_error(void)
{
    return last_error;
}

const char *mlav_last_error(const struct mlav_context *ctx)
{
    (void)ctx; /* per thread, not per context: a shared plan reports to each thread its own */
    return last_error;
}

const char *mlav_status_string(mlav_status s)
{
    switch (s) {
    case MLAV_OK: return "MLAV_OK";
    case MLAV_ERR_INVALID_ARG: return "MLAV_ERR_INVALID_ARG";
    case MLAV_ERR_UNSUPPORTED: return "MLAV_ERR_UNSUPPORTED";
    case MLAV_ERR_OUT_OF_MEMORY: return "MLAV_ERR_OUT_OF_MEMORY";
    case MLAV_ERR_WORKSPACE: return "MLAV_ERR_WORKSPACE";
    case MLAV_ERR_NO_DEVICE: return "MLAV_ERR_NO_DEVICE";
    case MLAV_ERR_CUDA: return "MLAV_ERR_CUDA";
    case MLAV_ERR_INTERNAL: return "MLAV_ERR_INTERNAL";
    }
    return "MLAV_ERR_UNKNOWN";
}

unsigned mlav_version_number(void)
{
    return MLAV_VERSION_NUMBER;
}

#define MLAV_STR2(x) #x
#define MLAV_STR(x) MLAV_STR2(x)
const char *mlav_version_string(void)
{
    return MLAV_STR(MLAV_VERSION_MAJOR) "." MLAV_STR(MLAV_VERSION_MINOR) "." MLAV_STR(
        MLAV_VERSION_PATCH);
}

size_t mlav_dtype_size(mlav_dtype d)
{
    switch (d) {
    case MLAV_DTYPE_F32: return 4;
    case MLAV_DTYPE_BF16: return 2;
    case MLAV_DTYPE_F16: return 2;
    case MLAV_DTYPE_FP8_E4M3: return 1;
    }
    return 0;
}

const char *mlav_dtype_name(mlav_dtype d)
{
    switch (d) {
    case MLAV_DTYPE_F32: return "f32";
    case MLAV_DTYPE_BF16: return "bf16";
    case MLAV_DTYPE_F16: return "f16";
    case MLAV_DTYPE_FP8_E4M3: return "fp8_e4m3";
    }
    return "?";
}
