/* The one table of dtype names (mlav_dtype_alias, mlav_dtype_parse): the canonical names first,
 * as mlav_dtype_name gives them, then the aliases engines and frameworks use. */
#include <ctype.h>
#include <string.h>

#include "problem.h"

static const struct {
    const char *name;
    mlav_dtype d;
} names[] = {
    {"f32", MLAV_DTYPE_F32},         {"bf16", MLAV_DTYPE_BF16},
    {"f16", MLAV_DTYPE_F16},         {"fp8_e4m3", MLAV_DTYPE_FP8_E4M3},
    {"fp32", MLAV_DTYPE_F32},        {"float32", MLAV_DTYPE_F32},
    {"float", MLAV_DTYPE_F32},       {"bfloat16", MLAV_DTYPE_BF16},
    {"fp16", MLAV_DTYPE_F16},        {"float16", MLAV_DTYPE_F16},
    {"half", MLAV_DTYPE_F16},        {"fp8", MLAV_DTYPE_FP8_E4M3},
    {"e4m3", MLAV_DTYPE_FP8_E4M3},   {"float8_e4m3fn", MLAV_DTYPE_FP8_E4M3},
    {"f8_e4m3", MLAV_DTYPE_FP8_E4M3},
};

const char *mlav_dtype_alias(int32_t i, mlav_dtype *d)
{
    if (i < 0 || (size_t)i >= sizeof names / sizeof names[0])
        return NULL;
    if (d)
        *d = names[i].d;
    return names[i].name;
}

mlav_status mlav_dtype_parse(const char *name, mlav_dtype *d)
{
    if (!name || !d)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "name and d must not be NULL");
    const char *n = strncmp(name, "torch.", 6) == 0 ? name + 6 : name;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *a = names[i].name, *b = n;
        while (*a && tolower((unsigned char)*b) == *a) {
            a++;
            b++;
        }
        if (!*a && !*b) {
            *d = names[i].d;
            return MLAV_OK;
        }
    }
    return mlav_set_error(MLAV_ERR_INVALID_ARG,
                          "dtype \"%.64s\" is not one of f32, bf16, f16, fp8_e4m3 (or their "
                          "aliases: mlav_dtype_alias)",
                          name);
}
