/* mlav_fastdiv (src/common/fastdiv.h), the flash kernel's page lookup: equal to `/` for every
 * divisor a page size can be and dividends over the whole valid range [0, 2^31). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "../src/common/fastdiv.h"

static uint64_t next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void check_divisor(uint32_t d, uint64_t *rng)
{
    const mlav_fastdiv f = mlav_fastdiv_make(d);
    const uint32_t top = 0x7fffffffu;
    /* small dividends, each side of the first multiples, the top of the range, random ones */
    for (uint32_t n = 0; n < 4096; n++)
        if (mlav_fastdiv_div(n, f) != n / d)
            fail_msg("d=%u n=%u: %u, want %u", d, n, mlav_fastdiv_div(n, f), n / d);
    for (uint32_t k = 1; k < 64; k++) {
        const uint64_t m = (uint64_t)k * d;
        for (int64_t e = -1; e <= 1; e++) {
            const uint64_t n = m + (uint64_t)e;
            if (n <= top && mlav_fastdiv_div((uint32_t)n, f) != (uint32_t)n / d)
                fail_msg("d=%u n=%llu", d, (unsigned long long)n);
        }
    }
    const uint32_t q_top = top / d; /* the last multiple below 2^31 and its neighbours */
    for (int64_t e = -1; e <= 1; e++) {
        const uint64_t n = (uint64_t)q_top * d + (uint64_t)e;
        if (n <= top && mlav_fastdiv_div((uint32_t)n, f) != (uint32_t)n / d)
            fail_msg("d=%u n=%llu", d, (unsigned long long)n);
    }
    for (uint32_t n = top - 4096; n < top; n++)
        if (mlav_fastdiv_div(n, f) != n / d)
            fail_msg("d=%u n=%u", d, n);
    if (mlav_fastdiv_div(top, f) != top / d)
        fail_msg("d=%u n=%u", d, top);
    for (int i = 0; i < 2000; i++) {
        const uint32_t n = (uint32_t)(next(rng) & top);
        if (mlav_fastdiv_div(n, f) != n / d)
            fail_msg("d=%u n=%u", d, n);
    }
}

static void test_fastdiv_all_small_divisors(void **state)
{
    (void)state;
    uint64_t rng = 0x5eed;
    for (uint32_t d = 1; d <= 1100; d++)
        check_divisor(d, &rng);
}

static void test_fastdiv_large_and_odd_divisors(void **state)
{
    (void)state;
    uint64_t rng = 0xfeed;
    /* page_size is at most 2^20 (validate.c); past it, every power of two and its neighbours */
    for (uint32_t s = 10; s <= 31; s++) {
        const uint64_t p = (uint64_t)1 << s;
        for (int64_t e = -1; e <= 1; e++)
            if (p + (uint64_t)e <= 0x80000000ull)
                check_divisor((uint32_t)(p + (uint64_t)e), &rng);
    }
    for (int i = 0; i < 300; i++)
        check_divisor(1 + (uint32_t)(next(&rng) % (1u << 20)), &rng);
    check_divisor(1000003u, &rng);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fastdiv_all_small_divisors),
        cmocka_unit_test(test_fastdiv_large_and_odd_divisors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
