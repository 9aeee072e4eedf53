/* The flash plan's split schedule without a GPU: for each point, the blocks, splits and modelled
 * time (mlav_schedule_model_time, in KV rows of loop work) that the plan picks when it weighs up
 * to MW more waves, for each MW given; then random engine-like batches (B 8-64, H 16-128, q_len
 * 1-9, prefixes 1024-32767 drawn per request), each MW's mean modelled time against the first
 * MW's, and the mean host time of one mlav_schedule_build. The H200's parameters (132 SMs, one
 * block per SM) and the flash plan's constants (src/cuda/flash.h) unless changed below.
 * docs/PERFORMANCE.md#schedule, session 13: the model's ratios at the batched points matched the H200 within
 * ~1% (0.914 measured at 16 x (H 64, q_len 9), prefix 8192, against 0.913 modelled).
 *   cc -O2 -std=c11 -Iinclude -o schedule_choices bench/diag/schedule_choices.c \
 *      src/common/schedule.c src/core/error.c
 *   ./schedule_choices [MW ...]            (default: 2 8; 2 is the plan before session 13) */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../src/common/schedule.h"

enum { SMS = 132, MAX_B = 64, MAX_MW = 8, BATCHES = 2000 };

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static mlav_schedule_params params(int more_waves)
{
    /* src/cuda/flash.h's mlav_flash_schedule_params on the H200 */
    return (mlav_schedule_params){.rows_per_tile = 64, .key_align = 32, .min_chunk = 32,
                                  .max_splits = 256, .target_blocks = SMS,
                                  .block_cost_keys = 128, .split_cost_keys = 1,
                                  .more_waves = more_waves};
}

/* A batch of B requests: q_indptr and kv_lens filled by the caller. */
static mlav_problem_info batch(int32_t B, int32_t H, int32_t *q_indptr, int32_t *kv_lens)
{
    mlav_problem_info p = {.H = H, .Dl = 512, .Dr = 64, .W = 576, .page_size = 1, .B = B,
                           .q_indptr = q_indptr, .kv_lens = kv_lens, .T = q_indptr[B]};
    for (int32_t b = 0; b < B; b++) {
        const int32_t q = q_indptr[b + 1] - q_indptr[b];
        p.max_q_len = q > p.max_q_len ? q : p.max_q_len;
        p.max_kv_len = kv_lens[b] > p.max_kv_len ? kv_lens[b] : p.max_kv_len;
    }
    return p;
}

static int64_t model(const mlav_problem_info *p, int mw, int32_t *blocks, int32_t *splits,
                     double *us)
{
    const mlav_schedule_params sp = params(mw);
    mlav_schedule s;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (mlav_schedule_build(p, &sp, &s) != MLAV_OK) {
        fprintf(stderr, "schedule_choices: mlav_schedule_build failed\n");
        exit(1);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (us)
        *us += (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    const int64_t t = mlav_schedule_model_time(&s, &sp);
    if (blocks)
        *blocks = s.n_items;
    if (splits)
        *splits = s.splits[0];
    mlav_schedule_free(&s);
    return t;
}

int main(int argc, char **argv)
{
    int mw[MAX_MW] = {2, 8}, nmw = 2;
    if (argc > 1) {
        nmw = 0;
        for (int i = 1; i < argc && nmw < MAX_MW; i++)
            mw[nmw++] = atoi(argv[i]);
    }
    /* uniform batches: the bench's points (B, H, q_len, prefix) */
    static const int32_t pts[][4] = {
        {1, 64, 9, 16384},  {1, 64, 9, 131072}, {1, 64, 33, 131072}, {1, 64, 1, 131072},
        {8, 16, 9, 32768},  {32, 16, 4, 4096},  {15, 64, 9, 4096},   {15, 64, 9, 32768},
        {16, 64, 9, 2048},  {16, 64, 9, 8192},  {16, 64, 9, 32768},  {8, 128, 9, 4096},
        {8, 128, 9, 16384}, {5, 64, 33, 16384}, {24, 16, 9, 16384},  {12, 64, 4, 16384},
        {20, 64, 2, 32768}};
    printf("%3s %4s %3s %7s", "B", "H", "q", "prefix");
    for (int m = 0; m < nmw; m++)
        printf(" | mw %-2d blocks splits   model  ratio", mw[m]);
    printf("\n");
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        int32_t q_indptr[MAX_B + 1], kv_lens[MAX_B];
        const int32_t B = pts[i][0];
        for (int32_t b = 0; b <= B; b++)
            q_indptr[b] = b * pts[i][2];
        for (int32_t b = 0; b < B; b++)
            kv_lens[b] = pts[i][3] + pts[i][2];
        const mlav_problem_info p = batch(B, pts[i][1], q_indptr, kv_lens);
        printf("%3d %4d %3d %7d", B, pts[i][1], pts[i][2], pts[i][3]);
        int64_t t0 = 0;
        for (int m = 0; m < nmw; m++) {
            int32_t blocks, splits;
            const int64_t t = model(&p, mw[m], &blocks, &splits, NULL);
            t0 = m == 0 ? t : t0;
            printf(" |       %6d %6d %7lld  %.3f", blocks, splits, (long long)t,
                   (double)t / (double)t0);
        }
        printf("\n");
    }
    /* random engine-like batches */
    static const int32_t Bs[] = {8, 16, 32, 64}, Hs[] = {16, 32, 64, 128}, Qs[] = {1, 2, 4, 9};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    double ratio[MAX_MW] = {0}, us[MAX_MW] = {0}, best[MAX_MW] = {0};
    int gain3[MAX_MW] = {0}; /* batches modelled at least 3% shorter than with mw[0] */
    for (int n = 0; n < BATCHES; n++) {
        int32_t q_indptr[MAX_B + 1] = {0}, kv_lens[MAX_B];
        const uint64_t r = xorshift(&x);
        const int32_t B = Bs[r % 4], H = Hs[(r >> 8) % 4], q = Qs[(r >> 16) % 4];
        for (int32_t b = 0; b < B; b++) {
            q_indptr[b + 1] = q_indptr[b] + q;
            kv_lens[b] = q + 1024 + (int32_t)(xorshift(&x) % 31744);
        }
        const mlav_problem_info p = batch(B, H, q_indptr, kv_lens);
        int64_t t0 = 0;
        for (int m = 0; m < nmw; m++) {
            const int64_t t = model(&p, mw[m], NULL, NULL, &us[m]);
            t0 = m == 0 ? t : t0;
            const double r = (double)t / (double)t0;
            ratio[m] += r;
            best[m] = n == 0 || r < best[m] ? r : best[m];
            gain3[m] += r <= 0.97;
        }
    }
    printf("\n%d random batches (B 8-64, H 16-128, q_len 1-9, prefixes 1024-32767):\n", BATCHES);
    for (int m = 0; m < nmw; m++)
        printf("  mw %2d: mean modelled time %.4f of mw %d's, best %.3f, %d at most 0.97; %.1f us "
               "per plan\n", mw[m], ratio[m] / BATCHES, mw[0], best[m], gain3[m], us[m] / BATCHES);
    return 0;
}
