/* The staged pages of an FP8 cache (src/common/staged_pages.h): every request's KV rows staged
 * once, in order, 64 to a page, its table naming them and nothing else; the count's refusals;
 * the staging rule's measure. Random batches (the seed printed) and the edges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "../src/common/staged_pages.h"

static uint64_t next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Each request's rows 0 .. kv_len - 1 lie on its table's pages in order, each page's rows its
 * own and whole but the last, every page named once, -1 past a request's pages. */
static void check_layout(int32_t batch, const int32_t *kv_lens)
{
    int32_t n = -1, most = -1;
    assert_int_equal(mlav_staged_count(batch, kv_lens, &n, &most), 0);
    int64_t want_n = 0, want_most = 1;
    for (int32_t b = 0; b < batch; b++) {
        const int64_t k = (kv_lens[b] + 63) / 64;
        want_n += k;
        want_most = k > want_most ? k : want_most;
    }
    assert_int_equal(n, want_n);
    assert_int_equal(most, want_most);
    mlav_staged_page *pages = malloc(sizeof *pages * (size_t)(n ? n : 1));
    int32_t *table = malloc(sizeof *table * (size_t)batch * (size_t)most);
    char *seen = calloc((size_t)(n ? n : 1), 1);
    assert_non_null(pages);
    assert_non_null(table);
    assert_non_null(seen);
    mlav_staged_fill(batch, kv_lens, most, pages, table);
    for (int32_t b = 0; b < batch; b++) {
        const int32_t k = (kv_lens[b] + 63) / 64;
        for (int32_t j = 0; j < most; j++) {
            const int32_t id = table[(int64_t)b * most + j];
            if (j >= k) {
                assert_int_equal(id, -1);
                continue;
            }
            assert_true(id >= 0 && id < n);
            assert_int_equal(seen[id], 0);
            seen[id] = 1;
            assert_int_equal(pages[id].b, b);
            assert_int_equal(pages[id].j0, 64 * j);
            const int32_t rows = kv_lens[b] - 64 * j < 64 ? kv_lens[b] - 64 * j : 64;
            assert_int_equal(pages[id].rows, rows);
            assert_true(rows > 0);
        }
    }
    for (int32_t i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
    free(table);
    free(pages);
}

static void test_edges(void **state)
{
    (void)state;
    const int32_t one[] = {1}, page[] = {64}, past[] = {65}, empty[] = {0, 0};
    check_layout(1, one);
    check_layout(1, page);
    check_layout(1, past);
    check_layout(2, empty); /* no pages: the table of one column, all -1 */
    const int32_t mixed[] = {131073, 0, 4097, 63, 64, 128};
    check_layout(6, mixed);
}

static void test_random(void **state)
{
    (void)state;
    uint64_t seed = (uint64_t)time(NULL);
    printf("test_staged_pages seed %llu\n", (unsigned long long)seed);
    for (int it = 0; it < 200; it++) {
        const int32_t batch = 1 + (int32_t)(next(&seed) % 64);
        int32_t kv[64];
        for (int32_t b = 0; b < batch; b++)
            kv[b] = (int32_t)(next(&seed) % (next(&seed) % 2 ? 300 : 140000));
        check_layout(batch, kv);
    }
}

/* The count refuses a negative length and a staged pool whose rows pass int32. */
static void test_count_refuses(void **state)
{
    (void)state;
    int32_t n = 7, most = 7;
    const int32_t neg[] = {64, -1};
    assert_int_equal(mlav_staged_count(2, neg, &n, &most), -1);
    /* INT32_MAX / 64 pages at most (2^25 - 1): two requests that reach it, then one row more */
    const int32_t top = INT32_MAX / 64; /* 33,554,431 pages */
    int32_t *lens = malloc(sizeof *lens * 2);
    assert_non_null(lens);
    lens[0] = top * 64 - 64; /* top - 1 pages */
    lens[1] = 64;            /* the last page allowed */
    assert_int_equal(mlav_staged_count(2, lens, &n, &most), 0);
    assert_int_equal(n, top);
    lens[1] = 65; /* one page past */
    assert_int_equal(mlav_staged_count(2, lens, &n, &most), -1);
    free(lens);
}

/* The rule's measure: each request's 64-row tiles (ceil(q_len x H / 64)) times its kv_len. */
static void test_row_tile_keys(void **state)
{
    (void)state;
    const int32_t qi1[] = {0, 16}, kv1[] = {131088};
    assert_int_equal(mlav_row_tile_keys(1, qi1, kv1, 128), 32LL * 131088); /* H 128 */
    assert_int_equal(mlav_row_tile_keys(1, qi1, kv1, 8), 2LL * 131088);    /* 128 rows */
    const int32_t qi2[] = {0, 1, 1, 5}, kv2[] = {4097, 10, 4100};
    /* H 16: 16 rows (1 tile), 0 rows (0), 64 rows (1) */
    assert_int_equal(mlav_row_tile_keys(3, qi2, kv2, 16), 4097 + 4100);
    /* H 17: 17 rows (1), 0, 68 rows (2) */
    assert_int_equal(mlav_row_tile_keys(3, qi2, kv2, 17), 4097 + 2 * 4100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_count_refuses),
        cmocka_unit_test(test_row_tile_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
