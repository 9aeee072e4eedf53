/* The cuda backend's kernel rules that need no GPU (src/cuda/flash_family.h): which family a plan
 * gets on a cc 9.0 device and which kernel of the sm_90a family its launches take. Host code,
 * checked on the CPU; a build without CUDA has no such rule, and the test passes with nothing to
 * check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <math.h>
#include <cmocka.h>

#include "test_util.h"
#ifdef MLAV_WITH_CUDA
#include "../src/cuda/flash_family.h"

/* B 16, H 128, q_len 16, 131072 keys on the H200's schedule: 512 items of 2,049 tiles on average
 * (session 28's rule_points.c printed it: `git show 32154b4:bench/results/2026-12-02-h200-s28/`) */
#define BIG_TILES (512LL * 2049)
#define BIG_ITEMS 512
#define SCALE 0.0721688f /* 1/sqrt(192): a plan's usual softmax_scale */

/* MLAV_SM90_KERNEL: "seesaw" and "producer" force a kernel; unset or anything else, the rule. */
static void test_seesaw_env(void **state)
{
    (void)state;
    setenv("MLAV_SM90_KERNEL", "producer", 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_TILES, BIG_ITEMS, 0, SCALE), 0);
    setenv("MLAV_SM90_KERNEL", "seesaw", 1); /* forced, short blocks too */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(65, 65, 0, SCALE), 1);
    setenv("MLAV_SM90_KERNEL", "Seesaw", 1); /* not a value: the rule */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(65, 65, 0, SCALE), 0);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_TILES, BIG_ITEMS, 0, SCALE), 1);
    unsetenv("MLAV_SM90_KERNEL");
}

/* The keys kernel: an FP8 cache, requests of 1..16 rows and a positive scale, unless
 * MLAV_SM90_KERNEL forces the seesaw or producer kernel; the instance of 8 rows up to 8, else of
 * 16. */
static void test_keys_rule(void **state)
{
    (void)state;
    const char *unset_or_keys[] = {NULL, "keys", "Keys"};
    for (int e = 0; e < 3; e++) {
        if (unset_or_keys[e])
            setenv("MLAV_SM90_KERNEL", unset_or_keys[e], 1);
        else
            unsetenv("MLAV_SM90_KERNEL");
        assert_int_equal(mlav_flash_sm90_keys_rule(1, 1, SCALE), 8);
        assert_int_equal(mlav_flash_sm90_keys_rule(8, 1, SCALE), 8);   /* H 8, q_len 1 */
        assert_int_equal(mlav_flash_sm90_keys_rule(9, 1, SCALE), 16);
        assert_int_equal(mlav_flash_sm90_keys_rule(16, 1, SCALE), 16); /* H 16, q_len 1 */
        assert_int_equal(mlav_flash_sm90_keys_rule(17, 1, SCALE), 0);  /* the seesaw's */
        assert_int_equal(mlav_flash_sm90_keys_rule(0, 1, SCALE), 0);
        assert_int_equal(mlav_flash_sm90_keys_rule(8, 0, SCALE), 0);   /* a 16-bit cache */
        assert_int_equal(mlav_flash_sm90_keys_rule(8, 1, 0.0f), 0);
        assert_int_equal(mlav_flash_sm90_keys_rule(8, 1, -SCALE), 0);
        assert_int_equal(mlav_flash_sm90_keys_rule(8, 1, NAN), 0);
    }
    setenv("MLAV_SM90_KERNEL", "seesaw", 1); /* the A/B switches turn it off */
    assert_int_equal(mlav_flash_sm90_keys_rule(8, 1, SCALE), 0);
    setenv("MLAV_SM90_KERNEL", "producer", 1);
    assert_int_equal(mlav_flash_sm90_keys_rule(16, 1, SCALE), 0);
    unsetenv("MLAV_SM90_KERNEL");
}

/* The rule: at least MLAV_SM90_MIN_TILES (6) tiles a block on average, whatever the rows; an FP8
 * cache always (unless MLAV_SM90_KERNEL=producer). */
static void test_seesaw_rule_boundaries(void **state)
{
    (void)state;
    unsetenv("MLAV_SM90_KERNEL");
    assert_int_equal(MLAV_SM90_MIN_TILES, 6);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_TILES, BIG_ITEMS, 0, SCALE), 1);
    /* B 1, H 16, q 16, 4k */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(264, 132, 0, SCALE), 0);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(129 * 4, 129, 0, SCALE), 0);  /* B 1, q 1, 32k */
    /* B 1, H 8, q 16, 32k */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(1027, 130, 0, SCALE), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(6 * 100, 100, 0, SCALE), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(6 * 100 - 1, 100, 0, SCALE), 0);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(0, 0, 0, SCALE), 0); /* no items */
    /* an FP8 cache: the seesaw kernel at any tile count */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(264, 132, 1, SCALE), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_TILES, BIG_ITEMS, 1, SCALE), 1);
    setenv("MLAV_SM90_KERNEL", "producer", 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_TILES, BIG_ITEMS, 1, SCALE), 0);
    unsetenv("MLAV_SM90_KERNEL");
}

/* A softmax_scale <= 0 takes the producer kernel whatever the rule or MLAV_SM90_KERNEL says: the
 * seesaw kernel keeps one-factor scores raw through their rows' maxima (the scaled maxima only
 * for a factor > 0; 0 x a masked key's -inf is NaN). test_cuda_scale_signs runs such plans. */
static void test_seesaw_scale_sign(void **state)
{
    (void)state;
    static const float bad[] = {0.0f, -0.0f, -SCALE, -16.0f * SCALE};
    for (int e = 0; e < 2; e++) {
        if (e)
            setenv("MLAV_SM90_KERNEL", "seesaw", 1);
        else
            unsetenv("MLAV_SM90_KERNEL");
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_TILES, BIG_ITEMS, 0, bad[i]), 0);
            assert_int_equal(mlav_flash_sm90_seesaw_rule(264, 132, 1, bad[i]), 0); /* FP8 */
            assert_int_equal(mlav_flash_sm90_seesaw_limits(4, 32784, 4, 132, 396, 0, bad[i]), 0);
        }
        /* the least positive scale keeps the rule */
        assert_int_equal(mlav_flash_sm90_seesaw_rule(BIG_TILES, BIG_ITEMS, 0, 0x1p-149f), 1);
    }
    unsetenv("MLAV_SM90_KERNEL");
}

/* A plan for limits: its row tiles times its longest kv_len's tiles over the step rule's fewest
 * waves of 132 blocks, not over its grid (which counts two more waves): B 1, H 16, q_len 16,
 * 32k (4 row tiles, 513 key tiles, a grid of 396 items) takes the seesaw kernel, as the exact
 * plan of those lengths does; over the grid's items it took the producer kernel. */
static void test_seesaw_limits(void **state)
{
    (void)state;
    unsetenv("MLAV_SM90_KERNEL");
    assert_int_equal(mlav_flash_sm90_seesaw_limits(4, 32784, 4, 132, 396, 0, SCALE), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_rule(4 * 513, 396, 0, SCALE), 0); /* the grid's items */
    /* 4k: 260 */
    assert_int_equal(mlav_flash_sm90_seesaw_limits(4, 4112, 4, 132, 396, 0, SCALE), 0);
    /* 16 requests x 4 row tiles, prefixes up to 49k: one wave */
    assert_int_equal(mlav_flash_sm90_seesaw_limits(64, 49168, 64, 132, 396, 0, SCALE), 1);
    /* 200 row tiles: two waves (264 items), 6 x 264 / 200 = 7.9 key tiles the boundary */
    assert_int_equal(mlav_flash_sm90_seesaw_limits(200, 8 * 64, 200, 132, 792, 0, SCALE), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_limits(200, 7 * 64, 200, 132, 792, 0, SCALE), 0);
    /* a grid smaller than a wave (q_len 1: at most max_splits items): its items */
    assert_int_equal(mlav_flash_sm90_seesaw_limits(1, 65 * 64 * 6, 1, 132, 65, 0, SCALE), 1);
    assert_int_equal(mlav_flash_sm90_seesaw_limits(1, 65 * 64 * 6 - 64, 1, 132, 65, 0, SCALE), 0);
    /* no waves */
    assert_int_equal(mlav_flash_sm90_seesaw_limits(4, 32784, 4, 0, 396, 0, SCALE), 0);
    assert_int_equal(mlav_flash_sm90_seesaw_limits(4, 4112, 4, 132, 396, 1, SCALE), 1); /* FP8 */
    setenv("MLAV_SM90_KERNEL", "producer", 1);
    assert_int_equal(mlav_flash_sm90_seesaw_limits(4, 32784, 4, 132, 396, 0, SCALE), 0);
    unsetenv("MLAV_SM90_KERNEL");
}

/* The family on cc 9.0 (where the library has the sm_90a family): an FP8 cache the keys kernel
 * takes keeps the sm_90a family at 8 rows at most, and at 9-16 rows from 3 tiles an SM; else the
 * legal one for requests of at most 32 rows whose batch reads fewer than 6 tiles an SM, FP8
 * caches read as fewer than 8 tiles of 64 rows an SM (6 where a request has two row tiles or
 * more), and KV shards; MLAV_FLASH_FAMILY overrides.
 * Elsewhere, and without the sm_90a family, always the legal one. */
static void test_family_rule(void **state)
{
    (void)state;
    unsetenv("MLAV_FLASH_FAMILY");
    unsetenv("MLAV_SM90_KERNEL");
    const int sms = 132;
    const int64_t edge = (int64_t)MLAV_SM90_MIN_TILES * MLAV_FLASH_SM90_TILE_N * sms; /* 50,688 */
    assert_int_equal(mlav_flash_family_for_plan(8, 9, 2048, 1 << 24, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL); /* not cc 9.0 */
#ifdef MLAV_WITH_SM90
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 32769, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL); /* B 1, H 8, q 1, 32k */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 16 * 4097, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* B 16, H 8, q 1, 4k */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 32, edge - 1, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 32, edge, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 33, 4097, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* more rows: short batches too */
    /* an FP8 cache the keys kernel takes: at 8 rows any batch, at 9-16 from 3 tiles an SM */
    const int64_t keys_edge =
        (int64_t)MLAV_SM90_KEYS16_MIN_TILES * MLAV_FLASH_SM90_TILE_N * sms; /* 25,344 */
    assert_int_equal(MLAV_SM90_KEYS16_MIN_TILES, 3);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* B 1, H 8, q 1, 4k: 0.5 tiles an SM */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 1, 1, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 16 * 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* B 16, H 8, q 1, 4k: 7.8 */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 16, 16 * 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* B 16, H 16, q 1, 4k */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 16, 32769, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* B 1, H 16, q 1, 32k: 3.9 */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 16, 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL); /* B 1, H 16, q 1, 4k: 0.5 */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 9, keys_edge - 1, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 9, keys_edge, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90);
    /* ... not where the keys kernel does not run: a scale <= 0, or MLAV_SM90_KERNEL's seesaw */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 4097, sms, 1, 0.0f, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    setenv("MLAV_SM90_KERNEL", "seesaw", 1);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 16 * 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    unsetenv("MLAV_SM90_KERNEL");
    /* other FP8 caches: at least 8 tiles of 64 rows x 64 keys an SM */
    const int64_t fp8_edge = (int64_t)MLAV_SM90_FP8_MIN_TILES * MLAV_FLASH_SM90_TILE_N * sms;
    assert_int_equal(MLAV_SM90_FP8_MIN_TILES, 8);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 2048, 1 << 24, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 128, 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL); /* B 1, H 128, q 1, 4k: 2 row tiles */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 2048, 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* B 1, H 128, q 16, 4k: 15.5 */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 64, fp8_edge - 1, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 64, fp8_edge, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90);
    /* two row tiles a request or more: from 6 tiles an SM */
    const int64_t wide_edge = (int64_t)MLAV_SM90_FP8_WIDE_MIN_TILES * MLAV_FLASH_SM90_TILE_N * sms;
    assert_int_equal(MLAV_SM90_FP8_WIDE_MIN_TILES, 6);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 65, wide_edge / 2, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 65, wide_edge / 2 - 1, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 128, 32769, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90); /* B 1, H 128, q 1, 32k: 7.8 */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 576, 4105, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL); /* B 1, H 64, q 9, 4k: 4.4 */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 32, 16 * 4098, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL); /* B 16, H 16, q 2, 4k: 7.8, one row tile */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 2048, 1 << 24, sms, 0, SCALE, 1),
                     MLAV_FLASH_FAMILY_LEGAL); /* KV shard */
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 1 << 24, sms, 1, SCALE, 1),
                     MLAV_FLASH_FAMILY_LEGAL); /* KV shard, FP8 */
    setenv("MLAV_FLASH_FAMILY", "sm90", 1);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 16, 4097, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_SM90);
    setenv("MLAV_FLASH_FAMILY", "legal", 1);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 2048, 1 << 24, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 8, 1 << 24, sms, 1, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    unsetenv("MLAV_FLASH_FAMILY");
#else
    assert_int_equal(mlav_flash_family_for_plan(9, 0, 2048, 1 << 24, sms, 0, SCALE, 0),
                     MLAV_FLASH_FAMILY_LEGAL);
    (void)edge;
#endif
}

/* WG0's S_A a pair early: from MLAV_SM90_EARLY_S_MIN_ROW_TILES (8) 64-row tiles a KV row on
 * average and MLAV_SM90_EARLY_S_MIN_KV (32768) KV rows a request on average, a 16-bit cache, on
 * the seesaw kernel; MLAV_SM90_EARLY_S=1 takes it for every such plan, 0 for none, any other value
 * is the rule. */
static void test_early_s_rule(void **state)
{
    (void)state;
    unsetenv("MLAV_SM90_EARLY_S");
    assert_int_equal(MLAV_SM90_EARLY_S_MIN_ROW_TILES, 8);
    assert_int_equal(MLAV_SM90_EARLY_S_MIN_KV, 32768);
    const int64_t kv = 131073;
    /* H 128: q_len 4 (8 row tiles) and 16 (32) take it, q_len 2 (4) not; H 16, q_len 9 (3) not */
    assert_int_equal(mlav_flash_sm90_early_s_rule(8 * kv, kv, 1, 0, 1), 1);
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * kv, kv, 1, 0, 1), 1);
    assert_int_equal(mlav_flash_sm90_early_s_rule(4 * kv, kv, 1, 0, 1), 0);
    assert_int_equal(mlav_flash_sm90_early_s_rule(3 * kv, kv, 1, 0, 1), 0);
    assert_int_equal(mlav_flash_sm90_early_s_rule(8 * kv - 1, kv, 1, 0, 1), 0); /* the edge */
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * kv, kv, 1, 1, 1), 0);     /* FP8 */
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * kv, kv, 1, 0, 0), 0);     /* producer */
    assert_int_equal(mlav_flash_sm90_early_s_rule(0, 0, 1, 0, 1), 0);            /* no KV */
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * kv, kv, 0, 0, 1), 0);     /* no batch */
    /* KV rows a request on average: B 16 of 32768 takes it, of 4096 (or 32767) not */
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * 16 * 32768LL, 16 * 32768LL, 16, 0, 1), 1);
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * 16 * 4096LL, 16 * 4096LL, 16, 0, 1), 0);
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * (16 * 32768LL - 1), 16 * 32768LL - 1, 16,
                                                  0, 1),
                     0);
    setenv("MLAV_SM90_EARLY_S", "1", 1);
    assert_int_equal(mlav_flash_sm90_early_s_rule(kv, kv, 1, 0, 1), 1);
    assert_int_equal(mlav_flash_sm90_early_s_rule(4096, 4096, 1, 0, 1), 1); /* short too */
    assert_int_equal(mlav_flash_sm90_early_s_rule(kv, kv, 1, 1, 1), 0);
    assert_int_equal(mlav_flash_sm90_early_s_rule(kv, kv, 1, 0, 0), 0);
    setenv("MLAV_SM90_EARLY_S", "0", 1);
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * kv, kv, 1, 0, 1), 0);
    setenv("MLAV_SM90_EARLY_S", "yes", 1); /* not a value: the rule */
    assert_int_equal(mlav_flash_sm90_early_s_rule(32 * kv, kv, 1, 0, 1), 1);
    assert_int_equal(mlav_flash_sm90_early_s_rule(kv, kv, 1, 0, 1), 0);
    unsetenv("MLAV_SM90_EARLY_S");
}

/* The staging of an FP8 cache: from MLAV_SM90_FP8_STAGED_MIN_ROW_TILES (8) 64-row tiles a KV row
 * on average, on the seesaw kernel, a positive scale; MLAV_SM90_KERNEL=staged stages every such
 * plan, seesaw and producer none. The measure is mlav_row_tile_keys' (test_staged_pages). */
static void test_staged_rule(void **state)
{
    (void)state;
    unsetenv("MLAV_SM90_KERNEL");
    assert_int_equal(MLAV_SM90_FP8_STAGED_MIN_ROW_TILES, 8);
    const int64_t kv = 131073; /* B 1, 131k, q_len 1 */
    /* H 128: q_len 4 (8 row tiles) and 16 (32); q_len 2 (4 row tiles) not */
    assert_int_equal(mlav_flash_sm90_staged_rule(8 * kv, kv, 1, SCALE, 1), 1);
    assert_int_equal(mlav_flash_sm90_staged_rule(32 * kv, kv, 1, SCALE, 1), 1);
    assert_int_equal(mlav_flash_sm90_staged_rule(4 * kv, kv, 1, SCALE, 1), 0);
    assert_int_equal(mlav_flash_sm90_staged_rule(8 * kv - 1, kv, 1, SCALE, 1), 0); /* the edge */
    assert_int_equal(mlav_flash_sm90_staged_rule(32 * kv, kv, 0, SCALE, 1), 0); /* 16-bit */
    assert_int_equal(mlav_flash_sm90_staged_rule(32 * kv, kv, 1, SCALE, 0), 0); /* producer */
    assert_int_equal(mlav_flash_sm90_staged_rule(32 * kv, kv, 1, 0.0f, 1), 0);
    assert_int_equal(mlav_flash_sm90_staged_rule(32 * kv, kv, 1, NAN, 1), 0);
    assert_int_equal(mlav_flash_sm90_staged_rule(0, 0, 1, SCALE, 1), 0); /* no KV */
    setenv("MLAV_SM90_KERNEL", "staged", 1);
    assert_int_equal(mlav_flash_sm90_staged_rule(kv, kv, 1, SCALE, 1), 1);
    assert_int_equal(mlav_flash_sm90_staged_rule(kv, kv, 0, SCALE, 1), 0);
    assert_int_equal(mlav_flash_sm90_staged_rule(kv, kv, 1, -SCALE, 1), 0);
    /* it forces the seesaw kernel and turns the keys kernel off */
    assert_int_equal(mlav_flash_sm90_seesaw_rule(65, 65, 0, SCALE), 1);
    assert_int_equal(mlav_flash_sm90_keys_rule(8, 1, SCALE), 0);
    setenv("MLAV_SM90_KERNEL", "seesaw", 1);
    assert_int_equal(mlav_flash_sm90_staged_rule(32 * kv, kv, 1, SCALE, 1), 0);
    setenv("MLAV_SM90_KERNEL", "producer", 1);
    assert_int_equal(mlav_flash_sm90_staged_rule(32 * kv, kv, 1, SCALE, 1), 0);
    unsetenv("MLAV_SM90_KERNEL");
}

/* evict_first on the seesaw kernel's 16-bit KV copies up to MLAV_SM90_L2_FIRST_BYTES of KV a
 * plan (rows of 576 BF16 elements): B 16 at 4096 (76 MB) and B 1 at 131k (151 MB) take it, B 16
 * at 32k (604 MB) does not, nor an FP8 cache; the bound inclusive. */
static void test_l2_first_rule(void **state)
{
    (void)state;
    assert_int_equal(mlav_flash_sm90_l2_first(16LL * (4096 + 16), 576, 0), 1);
    assert_int_equal(mlav_flash_sm90_l2_first(131072 + 16, 576, 0), 1);
    assert_int_equal(mlav_flash_sm90_l2_first(16LL * (32768 + 1), 576, 0), 0);
    assert_int_equal(mlav_flash_sm90_l2_first(16LL * (4096 + 16), 576, 1), 0);
    const int64_t edge = MLAV_SM90_L2_FIRST_BYTES / (576 * 2);
    assert_int_equal(mlav_flash_sm90_l2_first(edge, 576, 0), 1);
    assert_int_equal(mlav_flash_sm90_l2_first(edge + 1, 576, 0), 0);
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
        cmocka_unit_test(test_seesaw_env),
        cmocka_unit_test(test_seesaw_rule_boundaries),
        cmocka_unit_test(test_keys_rule),
        cmocka_unit_test(test_seesaw_limits),
        cmocka_unit_test(test_seesaw_scale_sign),
        cmocka_unit_test(test_family_rule),
        cmocka_unit_test(test_staged_rule),
        cmocka_unit_test(test_early_s_rule),
        cmocka_unit_test(test_l2_first_rule),
#endif
        cmocka_unit_test(test_nothing_without_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
