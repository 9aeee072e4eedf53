/* The cuda backend's kernel rules that need no GPU (src/cuda/flash_family.h): which kernel of the
 * sm_90a family a plan's launches take. Host code, checked on the CPU; a build without CUDA has
 * no such rule, and the test passes with nothing to check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "test_util.h"
#ifdef MLAV_WITH_CUDA
#include "../src/cuda/flash_family.h"

/* B 16, H 128, q_len 16, 131072 keys on the H200's schedule: 512 items of 2,049 tiles on average;
 * B 1, H 16, q_len 16, 4096 keys: 132 items of 2 tiles (rule_points.c in
 * bench/results/2026-12-02-h200-s28 printed both) */
#define BIG_ROWS 2048
#define BIG_TILES (512LL * 2049)
#define BIG_ITEMS 512

/* Unset or anything but "auto" and "seesaw": the producer kernel, whatever the shape. */
static void test_seesaw_opt_in(void **state)
{
    (void)state;
    unsetenv("MLAV_SM90_KERNEL");
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_ROWS, BIG_TILES, BIG_ITEMS), 0);
    setenv("MLAV_SM90_KERNEL", "producer", 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_ROWS, BIG_TILES, BIG_ITEMS), 0);
    setenv("MLAV_SM90_KERNEL", "Seesaw", 1); /* not a value: the default */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_ROWS, BIG_TILES, BIG_ITEMS), 0);
    setenv("MLAV_SM90_KERNEL", "seesaw", 1); /* forced, small shapes too */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(8, 65, 65), 1);
    unsetenv("MLAV_SM90_KERNEL");
}

/* "auto": more than 64 folded rows and at least 8 tiles a block on average. */
static void test_seesaw_auto_boundaries(void **state)
{
    (void)state;
    setenv("MLAV_SM90_KERNEL", "auto", 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_ROWS, BIG_TILES, BIG_ITEMS), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(256, 264, 132), 0); /* B 1, H 16, q 16, 4k */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(65, 8 * 100, 100), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(64, 8 * 100, 100), 0);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(65, 8 * 100 - 1, 100), 0);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(65, 0, 0), 0); /* no items */
    unsetenv("MLAV_SM90_KERNEL");
}
#endif

static void test_nothing_without_cuda(void **state)
{
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef MLAV_WITH_CUDA
        cmocka_unit_test(test_seesaw_opt_in),
        cmocka_unit_test(test_seesaw_auto_boundaries),
#endif
        cmocka_unit_test(test_nothing_without_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
