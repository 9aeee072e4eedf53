/* mlav_merge_states: the public host merge, on the one copy of the merge math (merge.h). */
#include <math.h>
#include <stdlib.h>

#include "../core/problem.h"
#include "merge.h"

#define MLAV_MERGE_MAX_STATES 4096

mlav_status mlav_merge_states(int32_t num_states, int64_t rows, int32_t dim,
                              const float *const *outs, const float *const *lses, float *out,
                              float *lse)
{
    if (num_states < 1 || num_states > MLAV_MERGE_MAX_STATES)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "num_states = %d is outside [1, %d]",
                              num_states, MLAV_MERGE_MAX_STATES);
    if (rows < 0 || dim < 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "rows = %lld and dim = %d must be >= 0",
                              (long long)rows, dim);
    if (!outs || !lses || !out || !lse)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "outs, lses, out and lse must not be NULL");
    for (int32_t i = 0; i < num_states; i++)
        if (!outs[i] || !lses[i])
            return mlav_set_error(MLAV_ERR_INVALID_ARG, "outs[%d] or lses[%d] is NULL", i, i);

    float stack_l[64], stack_w[64];
    float *l = stack_l, *w = stack_w;
    if (num_states > 64) {
        l = malloc(sizeof(float) * 2 * (size_t)num_states);
        if (!l)
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory merging states");
        w = l + num_states;
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int32_t i = 0; i < num_states; i++)
            l[i] = lses[i][r];
        float merged = mlav_merge_weights(num_states, l, w);
        /* element by element, reading every input before writing: out may alias outs[0] */
        for (int32_t d = 0; d < dim; d++) {
            size_t k = (size_t)r * (size_t)dim + (size_t)d;
            float acc = 0.0f;
            for (int32_t i = 0; i < num_states; i++)
                if (w[i] != 0.0f || w[i] != w[i]) /* an empty state's o is not read: 0*NaN */
                    acc += w[i] * outs[i][k];
            out[k] = acc;
        }
        lse[r] = merged;
    }
    if (l != stack_l)
        free(l);
    return MLAV_OK;
}
