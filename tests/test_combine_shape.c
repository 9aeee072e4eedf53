/* The combine's launch shape (src/common/combine_shape.h), pure functions of the device's
 * numbers, checked on the CPU with the numbers of an H200 and of an sm_120 GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../src/common/combine_shape.h"
#include "test_util.h"

/* combine.cu's shapes, and the H200's numbers as the CUDA runtime reports them: 132 SMs, 8
 * resident combine blocks per SM (64 registers x 128 threads), 228 KiB of shared memory per SM,
 * 1 KiB reserved per block, 3,984 bytes of static shared memory, sm_120's per-block limit. */
enum { PRELOAD = MLAV_COMBINE_PRELOAD, MAX_COL = MLAV_COMBINE_MAX_COL_BLOCKS };
#define H200_SMS 132
#define H200_PER_SM 8
#define H200_SMEM_SM 233472u
#define RESERVED 1024u
#define STATIC_BYTES 3984u
#define SM120_LIMIT 101376u
/* an sm_120 part (RTX PRO 6000 Blackwell): 188 SMs; 100 KiB of shared memory per SM, taken as
 * the per-block limit (101,376 bytes) plus the 1 KiB reserved: no sm_120 host has run this */
#define SM120_SMS 188
#define SM120_SMEM_SM 102400u

static void test_combine_col_blocks_h200_points(void **state)
{
    (void)state;
    const int64_t wave = (int64_t)H200_PER_SM * H200_SMS; /* 1056 */
    /* a lone 64-row request: 16 column blocks only above 112 splits */
    assert_int_equal(mlav_combine_col_blocks_for(64, 128, wave, PRELOAD, MAX_COL), 16);
    assert_int_equal(mlav_combine_col_blocks_for(64, 125, wave, PRELOAD, MAX_COL), 16);
    assert_int_equal(mlav_combine_col_blocks_for(64, 113, wave, PRELOAD, MAX_COL), 16);
    assert_int_equal(mlav_combine_col_blocks_for(64, 112, wave, PRELOAD, MAX_COL), 4);
    assert_int_equal(mlav_combine_col_blocks_for(64, 103, wave, PRELOAD, MAX_COL), 4);
    assert_int_equal(mlav_combine_col_blocks_for(64, 9, wave, PRELOAD, MAX_COL), 4);
    /* two row tiles: 16 column blocks would take a second wave */
    assert_int_equal(mlav_combine_col_blocks_for(128, 128, wave, PRELOAD, MAX_COL), 4);
    /* q_len 9 x 64 heads: 576 rows, one column block; 8 row tiles, two */
    assert_int_equal(mlav_combine_col_blocks_for(576, 14, wave, PRELOAD, MAX_COL), 1);
    assert_int_equal(mlav_combine_col_blocks_for(512, 14, wave, PRELOAD, MAX_COL), 2);
    assert_int_equal(mlav_combine_col_blocks_for(2112, 4, wave, PRELOAD, MAX_COL), 1);
}

/* Over a grid of inputs: the answer is one of the kernel's shapes, fits the wave unless it is 1,
 * and is 16 only when every split group then sums at most PRELOAD splits. */
static void test_combine_col_blocks_invariants(void **state)
{
    (void)state;
    for (int64_t rows = 1; rows <= 4096; rows += rows < 128 ? 1 : 61)
        for (int n = 2; n <= 128; n++)
            for (int64_t wave = 132; wave <= 3008; wave += 292) {
                const int q = mlav_combine_col_blocks_for(rows, n, wave, PRELOAD, MAX_COL);
                assert_true(q == 1 || q == 2 || q == 4 || q == 16);
                if (q > 1)
                    assert_true(rows * q <= wave);
                if (q == 16)
                    assert_true((n + 15) / 16 <= PRELOAD);
                if (q < 4 && rows * 4 <= wave)
                    fail_msg("rows %lld, wave %lld: %d column blocks where 4 fit",
                             (long long)rows, (long long)wave, q);
            }
}

/* Resident blocks per SM with `dyn` bytes reserved, as the hardware counts them. */
static int64_t fit(size_t smem_sm, size_t dyn)
{
    return (int64_t)(smem_sm / (STATIC_BYTES + dyn + RESERVED));
}

static void test_combine_spread_h200_points(void **state)
{
    (void)state;
    /* q_len 1 at prefix 16k: 64 rows x 4 column blocks = 256 blocks, k = 2; one block may not
     * reserve half an SM (sm_120's limit), so the cap is 2 per SM through that limit */
    size_t d = mlav_combine_spread_bytes(256, H200_SMS, H200_PER_SM, H200_SMEM_SM, RESERVED,
                                         STATIC_BYTES, SM120_LIMIT);
    assert_int_equal(d, 97280);
    assert_int_equal(fit(H200_SMEM_SM, d), 2);
    /* q_len 9 x 64 heads: 576 blocks, k = 5, exactly */
    d = mlav_combine_spread_bytes(576, H200_SMS, H200_PER_SM, H200_SMEM_SM, RESERVED,
                                  STATIC_BYTES, SM120_LIMIT);
    assert_int_equal(d, 41600);
    assert_int_equal(fit(H200_SMEM_SM, d), 5);
    /* 1024 blocks (16 column blocks of a lone request): k = 8, the uncapped occupancy */
    assert_int_equal(mlav_combine_spread_bytes(1024, H200_SMS, H200_PER_SM, H200_SMEM_SM,
                                               RESERVED, STATIC_BYTES, SM120_LIMIT),
                     0);
    assert_int_equal(mlav_combine_spread_bytes(0, H200_SMS, H200_PER_SM, H200_SMEM_SM, RESERVED,
                                               STATIC_BYTES, SM120_LIMIT),
                     0);
    /* sm_120: 256 blocks on 188 SMs, k = 2 within its 100 KiB per SM */
    d = mlav_combine_spread_bytes(256, SM120_SMS, H200_PER_SM, SM120_SMEM_SM, RESERVED,
                                  STATIC_BYTES, SM120_LIMIT);
    assert_int_equal(d, 46080);
    assert_int_equal(fit(SM120_SMEM_SM, d), 2);
}

/* A plan for limits whose step is its limits takes the exact plan's column blocks: the plan
 * reserves (mlav_combine_spread_rows, mlav_combine_spread_bytes) for the column blocks the exact
 * rule chooses over its row tiles' rows, and the step chooses its own over the same rows within
 * the wave that reservation leaves (mlav_step_combine_shape's rule). Single requests of H heads
 * and q_len rows (one row tile of 64 rows per 64 rows), every kind of split count; the H200's
 * numbers, with the step instance's occupancy taken as the block combine's. */
static void test_combine_step_takes_exact_blocks(void **state)
{
    (void)state;
    const int heads[] = {8, 16, 32, 64, 128};
    const int splits[] = {4, 9, 32, 33, 113, 128, 200};
    const int64_t wave = (int64_t)H200_PER_SM * H200_SMS;
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
        for (int q_len = 1; q_len <= 16; q_len++)
            for (size_t n = 0; n < sizeof splits / sizeof splits[0]; n++) {
                const int64_t working = (int64_t)heads[h] * q_len;
                const int64_t items = (working + 63) / 64, rows = items * 64;
                const int exact = mlav_combine_col_blocks_for(rows, splits[n], wave, PRELOAD,
                                                              MAX_COL);
                const int64_t spread = mlav_combine_spread_rows(items, 64, working, 1);
                const size_t d = mlav_combine_spread_bytes(spread * exact, H200_SMS,
                                                           H200_PER_SM, H200_SMEM_SM, RESERVED,
                                                           STATIC_BYTES, SM120_LIMIT);
                int64_t per_sm = d ? fit(H200_SMEM_SM, d) : H200_PER_SM;
                per_sm = per_sm < H200_PER_SM ? per_sm : H200_PER_SM;
                const int step = mlav_combine_col_blocks_for(rows, splits[n], per_sm * H200_SMS,
                                                             PRELOAD, MAX_COL);
                if (step != exact)
                    fail_msg("H %d, q_len %d, %d splits: the step takes %d column blocks, the "
                             "exact plan %d",
                             heads[h], q_len, splits[n], step, exact);
            }
    /* the exact plan reserves for its working rows */
    assert_int_equal(mlav_combine_spread_rows(2, 64, 72, 0), 72);
}

/* On random device numbers and grids: a reservation never breaks the per-block limit, always
 * lets k blocks fit (so the grid stays one wave), and caps at k whenever the limit allows it. */
static void test_combine_spread_invariants(void **state)
{
    (void)state;
    const uint64_t seed = tu_seed();
    printf("  seed 0x%llx (MLAV_TEST_SEED reproduces)\n", (unsigned long long)seed);
    uint64_t x = seed;
    for (int i = 0; i < 100000; i++) {
        const int sms = 1 + (int)(tu_next(&x) % 200);
        const int per_sm = 1 + (int)(tu_next(&x) % 32);
        const size_t smem_sm = 16384 + tu_next(&x) % 233473;
        const size_t reserved = tu_next(&x) % 2 ? 1024 : 0;
        const size_t stat = tu_next(&x) % 16384;
        const size_t limit = 16384 + tu_next(&x) % (SM120_LIMIT - 16383);
        const int64_t blocks = (int64_t)(tu_next(&x) % 8192);
        const size_t d = mlav_combine_spread_bytes(blocks, sms, per_sm, smem_sm, reserved, stat,
                                                   limit);
        if (d == 0)
            continue;
        const int64_t k = (blocks + sms - 1) / sms;
        assert_true(k < per_sm);
        assert_int_equal(d % 128, 0);
        assert_true(stat + d <= limit);
        const int64_t n = (int64_t)(smem_sm / (stat + d + reserved));
        if (n < k)
            fail_msg("seed 0x%llx case %d: %lld blocks per SM fit, %lld needed",
                     (unsigned long long)seed, i, (long long)n, (long long)k);
        /* exactly k where the per-block limit did not stop the reservation and the 128-byte
         * rounding (under 128 bytes a block) cannot make room for one more */
        const size_t share = smem_sm / (size_t)k;
        if (share <= limit + reserved && share > 128 &&
            (size_t)(k + 1) * (share - 128) > smem_sm && n != k)
            fail_msg("seed 0x%llx case %d: %lld blocks per SM fit, cap %lld",
                     (unsigned long long)seed, i, (long long)n, (long long)k);
    }
}

/* Which combine kernel: the row combine up to a lane per split, the block combine's common
 * instance up to a thread per split, the wide one beyond (its weights take two per thread). */
static void test_combine_kind_boundaries(void **state)
{
    (void)state;
    assert_int_equal(mlav_combine_kind(1), MLAV_COMBINE_ROWS);
    assert_int_equal(mlav_combine_kind(MLAV_COMBINE_ROW_MAX_SPLITS), MLAV_COMBINE_ROWS);
    assert_int_equal(mlav_combine_kind(MLAV_COMBINE_ROW_MAX_SPLITS + 1), MLAV_COMBINE_BLOCKS);
    assert_int_equal(mlav_combine_kind(MLAV_COMBINE_THREADS), MLAV_COMBINE_BLOCKS);
    assert_int_equal(mlav_combine_kind(MLAV_COMBINE_THREADS + 1), MLAV_COMBINE_BLOCKS_WIDE);
    assert_int_equal(mlav_combine_kind(2 * MLAV_COMBINE_THREADS), MLAV_COMBINE_BLOCKS_WIDE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_combine_col_blocks_h200_points),
        cmocka_unit_test(test_combine_col_blocks_invariants),
        cmocka_unit_test(test_combine_spread_h200_points),
        cmocka_unit_test(test_combine_spread_invariants),
        cmocka_unit_test(test_combine_step_takes_exact_blocks),
        cmocka_unit_test(test_combine_kind_boundaries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
