/* For the 48 chain points of tests/sm90_timing.cu (page 64): the sm_90a schedule's items on the
 * H200 (132 SMs, one block each), their 64-key tiles a block, and the seesaw kernel's rule with
 * MLAV_SM90_KERNEL=auto (mlav_flash_sm90_seesaw_rule's thresholds). Built on the CPU against a
 * CUDA build's static library: see this folder's README. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"

int main(void)
{
    const int Bs[2] = {1, 16}, Hs[4] = {8, 16, 64, 128}, qs[2] = {1, 16};
    const long pre[3] = {4096, 32768, 131072};
    /* mlav_flash_sm90_schedule_params(132, 1): src/cuda/flash.h's constants (a CUDA header),
     * splits aligned to the sm_90a tile */
    const mlav_schedule_params sp = {.rows_per_tile = 64, .key_align = 64, .min_chunk = 64,
                                     .max_splits = 256, .target_blocks = 132,
                                     .block_cost_keys = 128, .split_cost_keys = 1,
                                     .more_waves = 8};
    for (int bi = 0; bi < 2; bi++)
        for (int hi = 0; hi < 4; hi++)
            for (int qi = 0; qi < 2; qi++)
                for (int pi = 0; pi < 3; pi++) {
                    const int B = Bs[bi], H = Hs[hi], q = qs[qi];
                    const long P = pre[pi];
                    mlav_problem_info p;
                    memset(&p, 0, sizeof p);
                    p.H = H;
                    p.Dl = 512;
                    p.Dr = 64;
                    p.W = 576;
                    p.page_size = 64;
                    p.B = B;
                    p.T = B * q;
                    p.max_q_len = q;
                    p.mask_words = 1;
                    p.max_kv_len = P + q;
                    p.total_kv = (P + q) * B;
                    p.shard.ranks = 1;
                    p.shard.stripe = 1;
                    p.max_pages = (int)((P + q + 63) / 64);
                    p.q_indptr = calloc((size_t)B + 1, sizeof(int32_t));
                    p.kv_lens = calloc((size_t)B, sizeof(int32_t));
                    for (int b = 0; b < B; b++) {
                        p.q_indptr[b + 1] = (b + 1) * q;
                        p.kv_lens[b] = (int)(P + q);
                    }
                    mlav_schedule s;
                    memset(&s, 0, sizeof s);
                    if (mlav_schedule_build(&p, &sp, &s) != MLAV_OK) {
                        printf("schedule failed\n");
                        return 1;
                    }
                    long tiles = 0;
                    for (int i = 0; i < s.n_items; i++)
                        tiles += (s.items[i].kv_end - s.items[i].kv_begin + 63) / 64;
                    const int rule = (long)q * H > 64 && s.n_items > 0 && tiles >= 8L * s.n_items;
                    printf("%d %d %d %ld items %d tiles/item %.1f rule %s\n", B, H, q, P,
                           s.n_items, (double)tiles / s.n_items, rule ? "seesaw" : "producer");
                    mlav_schedule_free(&s);
                    free(p.q_indptr);
                    free(p.kv_lens);
                }
    return 0;
}
