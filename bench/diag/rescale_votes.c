/* How often does the flash kernel's rescale vote run after a split's first tile? A host model of
 * its lazy reference max (per 32-row group, 16-key tile, RESCALE_SLACK 8 log2 units) on the test
 * fixtures' data: random (period 0) and tu_rising_scores (period N). docs/PERFORMANCE.md#rescale (v4).
 *   built with the tests: build/bench/diag/rescale_votes 64; build/bench/diag/rescale_votes 0 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "mlaverify_internal.h"
#include "test_util.h"
int main(int argc, char **argv)
{
    int period = argc > 1 ? atoi(argv[1]) : 64;
    tu_case c = {.H = 64, .Dl = 512, .Dr = 64, .page_size = 1, .B = 1, .dtype = MLAV_DTYPE_BF16,
                 .q_lens = {9}, .prefixes = {4000}, .tree = TU_CHAIN_NULL, .seed = 12345};
    tu_problem *p = tu_make(&c);
    if (period > 0) tu_rising_scores(p, period);
    const int W = 576, M = c.H * c.q_lens[0], K = c.prefixes[0];
    const double sl2 = p->prob.softmax_scale * 1.4426950408889634;
    float *s = malloc(sizeof(float) * (size_t)M * K);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < K; j++) {
            size_t row = (size_t)p->page_table[j];
            double d = 0;
            for (int k = 0; k < W; k++)
                d += (double)mlav_load_as_f32(p->q, (int)c.dtype, (size_t)m * W + k) *
                     mlav_load_as_f32(p->kv, (int)c.dtype, row * W + k);
            s[(size_t)m * K + j] = (float)(d * sl2);
        }
    for (int chunk = 32; chunk <= 1024; chunk *= 2) {
        long events = 0, groups = 0;
        for (int g0 = 0; g0 < M; g0 += 32)
            for (int b0 = 0; b0 < K; b0 += chunk) {
                float ref[32];
                for (int r = 0; r < 32; r++) ref[r] = -INFINITY;
                groups++;
                for (int t0 = b0; t0 < b0 + chunk && t0 < K; t0 += 16) {
                    int over = 0;
                    float tm[32];
                    for (int r = 0; r < 32 && g0 + r < M; r++) {
                        tm[r] = -INFINITY;
                        for (int j = t0; j < t0 + 16 && j < K; j++)
                            tm[r] = fmaxf(tm[r], s[(size_t)(g0 + r) * K + j]);
                        over |= tm[r] > ref[r] + 8.0f;
                    }
                    if (over) {
                        if (t0 > b0) events++;
                        for (int r = 0; r < 32 && g0 + r < M; r++)
                            if (tm[r] > ref[r] + 8.0f) ref[r] = fmaxf(ref[r], tm[r]);
                    }
                }
            }
        printf("period %d chunk %4d: %ld votes after a split's first tile over %ld (group, split) pairs\n",
               period, chunk, events, groups);
    }
    tu_free(p);
    return 0;
}
