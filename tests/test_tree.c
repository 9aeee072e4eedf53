/* Draft-tree helpers against hand-worked examples: the mask from parents, greedy acceptance. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "mlaverify.h"
#include "../src/common/visibility.h"

#define GARBAGE 0xDEADBEEFu

static void expect_invalid(mlav_status s, const char *what)
{
    if (s != MLAV_ERR_INVALID_ARG)
        fail_msg("%s: got %s, expected MLAV_ERR_INVALID_ARG", what, mlav_status_string(s));
    const char *msg = mlav_last_error(NULL);
    if (!msg || !*msg)
        fail_msg("%s: no error sentence", what);
    print_message("  %s -> %s\n", what, msg);
}

/* Build the mask into a buffer pre-filled with garbage and compare every word. */
static void expect_mask(int32_t q_len, const int32_t *parents, int32_t words,
                        const uint32_t *expect)
{
    uint32_t mask[64 * 4];
    assert_true((size_t)q_len * (size_t)words <= sizeof mask / sizeof mask[0]);
    for (size_t k = 0; k < sizeof mask / sizeof mask[0]; k++)
        mask[k] = GARBAGE;
    assert_int_equal(mlav_tree_mask_from_parents(q_len, parents, words, mask), MLAV_OK);
    for (int32_t i = 0; i < q_len; i++)
        for (int32_t w = 0; w < words; w++)
            if (mask[i * words + w] != expect[i * words + w])
                fail_msg("row %d word %d: 0x%08x, expected 0x%08x", i, w, mask[i * words + w],
                         expect[i * words + w]);
    /* nothing written past the q_len x words rows */
    assert_int_equal(mask[q_len * words], GARBAGE);
}

static void test_tree_mask_words(void **state)
{
    (void)state;
    assert_int_equal(mlav_tree_mask_words(0), 1);
    assert_int_equal(mlav_tree_mask_words(1), 1);
    assert_int_equal(mlav_tree_mask_words(32), 1);
    assert_int_equal(mlav_tree_mask_words(33), 2);
    assert_int_equal(mlav_tree_mask_words(64), 2);
    assert_int_equal(mlav_tree_mask_words(65), 3);
}

/* A chain: node i sees 0..i. */
static void test_tree_mask_chain(void **state)
{
    (void)state;
    const int32_t parents[5] = {-1, 0, 1, 2, 3};
    const uint32_t expect[5] = {0x1, 0x3, 0x7, 0xF, 0x1F};
    expect_mask(5, parents, 1, expect);
    /* a single node */
    const int32_t root[1] = {-1};
    const uint32_t one[1] = {0x1};
    expect_mask(1, root, 1, one);
}

/*        0
 *      / | \
 *     1  2  6
 *    / \  \
 *   3   4  5        */
static void test_tree_mask_bushy(void **state)
{
    (void)state;
    const int32_t parents[7] = {-1, 0, 0, 1, 1, 2, 0};
    const uint32_t expect[7] = {
        0x01,                       /* {0} */
        0x03,                       /* {0,1} */
        0x05,                       /* {0,2} */
        0x0B,                       /* {0,1,3} */
        0x13,                       /* {0,1,4} */
        0x25,                       /* {0,2,5} */
        0x41,                       /* {0,6} */
    };
    expect_mask(7, parents, 1, expect);
    /* more words than needed: the extra ones are cleared */
    uint32_t wide[7 * 3];
    for (int i = 0; i < 7; i++) {
        wide[i * 3] = expect[i];
        wide[i * 3 + 1] = wide[i * 3 + 2] = 0;
    }
    expect_mask(7, parents, 3, wide);
}

/* 40 nodes over two words: a chain 0..35, then 36 under 35, 37 under the root, 38 under 37,
 * 39 under 33. */
static void test_tree_mask_two_words(void **state)
{
    (void)state;
    int32_t parents[40];
    uint32_t expect[40 * 2];
    for (int32_t i = 0; i < 36; i++) {
        parents[i] = i - 1;
        /* bits 0..i */
        expect[i * 2] = i >= 31 ? 0xFFFFFFFFu : (uint32_t)((1ull << (i + 1)) - 1);
        expect[i * 2 + 1] = i >= 32 ? (uint32_t)((1ull << (i - 31)) - 1) : 0;
    }
    parents[36] = 35, parents[37] = 0, parents[38] = 37, parents[39] = 33;
    expect[36 * 2] = 0xFFFFFFFFu, expect[36 * 2 + 1] = 0x1F;   /* 0..36 */
    expect[37 * 2] = 0x1, expect[37 * 2 + 1] = 0x20;           /* {0, 37} */
    expect[38 * 2] = 0x1, expect[38 * 2 + 1] = 0x60;           /* {0, 37, 38} */
    expect[39 * 2] = 0xFFFFFFFFu, expect[39 * 2 + 1] = 0x83;   /* 0..33, 39 */
    /* spot checks of the formula above against hand arithmetic */
    assert_int_equal(expect[35 * 2 + 1], 0xF);
    assert_int_equal(expect[31 * 2], 0xFFFFFFFFu);
    assert_int_equal(expect[31 * 2 + 1], 0);
    assert_int_equal(expect[32 * 2 + 1], 0x1);
    expect_mask(40, parents, 2, expect);
}

typedef struct accept_case {
    const char *what;
    int32_t q_len;
    int32_t parents[8], draft[8], target[8];
    int32_t accepted[8], n, bonus;
} accept_case;

static void test_tree_accept_greedy(void **state)
{
    (void)state;
    static const accept_case cases[] = {
        {"depth 0: no child matches", 3, {-1, 0, 1}, {10, 11, 12}, {99, 12, 13},
         {0, -1, -1}, 1, 99},
        {"partial chain", 4, {-1, 0, 1, 2}, {10, 11, 12, 13}, {11, 12, 77, 88},
         {0, 1, 2, -1}, 3, 77},
        {"full chain", 4, {-1, 0, 1, 2}, {10, 11, 12, 13}, {11, 12, 13, 50},
         {0, 1, 2, 3}, 4, 50},
        /* children 1 and 2 both carry the target 7: the lower index wins, even though the
           path through 2 would be longer */
        {"first matching child wins", 5, {-1, 0, 0, 1, 2}, {5, 7, 7, 8, 9}, {7, 1, 9, 4, 2},
         {0, 1, -1, -1, -1}, 2, 1},
        {"first match then deeper", 5, {-1, 0, 0, 1, 2}, {5, 7, 7, 8, 9}, {7, 8, 9, 1, 2},
         {0, 1, 3, -1, -1}, 3, 1},
        {"a later sibling matches", 4, {-1, 0, 0, 0}, {0, 4, 5, 6}, {6, 0, 0, 42},
         {0, 3, -1, -1}, 2, 42},
        /* a grandchild carrying the token does not count: only children are looked at */
        {"grandchild not a child", 3, {-1, 0, 1}, {1, 2, 3}, {3, 3, 3}, {0, -1, -1}, 1, 3},
        {"bushy, depth 3", 8, {-1, 0, 0, 1, 1, 2, 4, 4}, {0, 1, 2, 3, 4, 5, 6, 7},
         {1, 4, 0, 0, 7, 0, 0, 9}, {0, 1, 4, 7, -1, -1, -1, -1}, 4, 9},
        {"root only", 1, {-1}, {3}, {8}, {0}, 1, 8},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const accept_case *c = &cases[k];
        int32_t accepted[8], n = -5, bonus = -5;
        for (int i = 0; i < 8; i++)
            accepted[i] = 1234;
        mlav_status s = mlav_tree_accept_greedy(c->q_len, c->parents, c->draft, c->target,
                                                accepted, &n, &bonus);
        if (s != MLAV_OK)
            fail_msg("%s: %s", c->what, mlav_last_error(NULL));
        if (n != c->n || bonus != c->bonus)
            fail_msg("%s: %d accepted, bonus %d; expected %d, %d", c->what, n, bonus, c->n,
                     c->bonus);
        for (int32_t i = 0; i < c->q_len; i++)
            if (accepted[i] != c->accepted[i])
                fail_msg("%s: accepted[%d] = %d, expected %d", c->what, i, accepted[i],
                         c->accepted[i]);
        for (int32_t i = c->q_len; i < 8; i++)
            assert_int_equal(accepted[i], 1234); /* nothing past q_len */
    }
}

static void test_tree_bad_parents(void **state)
{
    (void)state;
    uint32_t mask[8 * 2];
    for (int k = 0; k < 16; k++)
        mask[k] = GARBAGE;
    const int32_t root_not_minus1[3] = {0, 0, 1};
    const int32_t self_parent[3] = {-1, 0, 2};
    const int32_t forward[4] = {-1, 3, 0, 1};
    const int32_t negative[3] = {-1, 0, -1};
    const int32_t below_minus1[3] = {-1, -7, 0};
    const int32_t ok[3] = {-1, 0, 0};
    expect_invalid(mlav_tree_mask_from_parents(3, root_not_minus1, 1, mask), "parents[0] = 0");
    expect_invalid(mlav_tree_mask_from_parents(3, self_parent, 1, mask), "parents[2] = 2");
    expect_invalid(mlav_tree_mask_from_parents(4, forward, 1, mask), "parents[1] = 3");
    expect_invalid(mlav_tree_mask_from_parents(3, negative, 1, mask), "parents[2] = -1");
    expect_invalid(mlav_tree_mask_from_parents(3, below_minus1, 1, mask), "parents[1] = -7");
    expect_invalid(mlav_tree_mask_from_parents(0, ok, 1, mask), "q_len = 0");
    expect_invalid(mlav_tree_mask_from_parents(-2, ok, 1, mask), "q_len < 0");
    expect_invalid(mlav_tree_mask_from_parents(3, NULL, 1, mask), "parents NULL");
    expect_invalid(mlav_tree_mask_from_parents(3, ok, 1, NULL), "mask NULL");
    expect_invalid(mlav_tree_mask_from_parents(3, ok, 0, mask), "words = 0");
    int32_t chain33[33];
    for (int i = 0; i < 33; i++)
        chain33[i] = i - 1;
    expect_invalid(mlav_tree_mask_from_parents(33, chain33, 1, mask), "33 nodes in 1 word");
    for (int k = 0; k < 16; k++)
        assert_int_equal(mask[k], GARBAGE); /* a rejected call writes nothing */

    int32_t draft[4] = {0}, target[4] = {0}, accepted[4] = {7, 7, 7, 7}, n = 7, bonus = 7;
    expect_invalid(mlav_tree_accept_greedy(3, root_not_minus1, draft, target, accepted, &n,
                                           &bonus),
                   "accept: parents[0] = 0");
    expect_invalid(mlav_tree_accept_greedy(4, forward, draft, target, accepted, &n, &bonus),
                   "accept: parents[1] = 3");
    expect_invalid(mlav_tree_accept_greedy(3, self_parent, draft, target, accepted, &n, &bonus),
                   "accept: parents[2] = 2");
    expect_invalid(mlav_tree_accept_greedy(0, ok, draft, target, accepted, &n, &bonus),
                   "accept: q_len = 0");
    expect_invalid(mlav_tree_accept_greedy(3, NULL, draft, target, accepted, &n, &bonus),
                   "accept: parents NULL");
    expect_invalid(mlav_tree_accept_greedy(3, ok, NULL, target, accepted, &n, &bonus),
                   "accept: draft NULL");
    expect_invalid(mlav_tree_accept_greedy(3, ok, draft, NULL, accepted, &n, &bonus),
                   "accept: target NULL");
    expect_invalid(mlav_tree_accept_greedy(3, ok, draft, target, NULL, &n, &bonus),
                   "accept: accepted NULL");
    expect_invalid(mlav_tree_accept_greedy(3, ok, draft, target, accepted, NULL, &bonus),
                   "accept: num_accepted NULL");
    expect_invalid(mlav_tree_accept_greedy(3, ok, draft, target, accepted, &n, NULL),
                   "accept: bonus NULL");
    for (int k = 0; k < 4; k++)
        assert_int_equal(accepted[k], 7);
    assert_int_equal(n, 7);
    assert_int_equal(bonus, 7);
}

/* mlav_draft_word (the sm_90a kernels' lookup, a word of keys at a time) gives each key what
 * mlav_draft_visible (the rule every other backend reads) gives it: chains of 1-100 nodes and
 * random masks of 1-4 words, every node and every word. */
static void test_tree_draft_word_matches_visible(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    uint32_t mask[100 * 4];
    for (int32_t q_len = 1; q_len <= 100; q_len++) {
        const int32_t words = mlav_tree_mask_words(q_len);
        for (size_t k = 0; k < (size_t)q_len * (size_t)words; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            mask[k] = (uint32_t)x;
        }
        for (int m = 0; m < 2; m++) {
            const uint32_t *mk = m ? mask : NULL;
            for (int32_t i = 0; i < q_len; i++)
                for (int32_t w = 0; w < words; w++) {
                    const uint32_t got = mlav_draft_word(mk, words, i, i, w);
                    for (int32_t b = 0; b < 32 && 32 * w + b < q_len; b++)
                        if (((got >> b) & 1u) != (uint32_t)mlav_draft_visible(mk, words, i, i,
                                                                              32 * w + b))
                            fail_msg("%s q_len %d node %d key %d: word 0x%08x", m ? "mask" : "chain",
                                     q_len, i, 32 * w + b, got);
                }
        }
    }
}

/* mlav_rows_visible64 (the sm_90a kernels' mask, 64 rows a word) gives each row what
 * mlav_kv_visible (the rule every other backend reads) gives it, and 0 from kv_end on: chains
 * and random masks of 1-100 nodes, prefixes and split ends on either side of the draft keys,
 * words loaded as the kernels load them (from the first row's draft word, 0 past the drafts). */
static void test_tree_rows_visible64_matches_visible(void **state)
{
    (void)state;
    uint64_t x = 0x2545f4914f6cdd1dull;
#define NEXT() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    uint32_t mask[100 * 4];
    for (int trial = 0; trial < 4000; trial++) {
        const int32_t q_len = 1 + (int32_t)(NEXT() % 100);
        const int32_t words = mlav_tree_mask_words(q_len);
        for (size_t k = 0; k < (size_t)q_len * (size_t)words; k++)
            mask[k] = (uint32_t)NEXT();
        const uint32_t *mk = trial & 1 ? mask : NULL;
        const int32_t prefix = (int32_t)(NEXT() % 300);
        const int32_t kv_end = prefix - 150 + (int32_t)(NEXT() % (uint64_t)(150 + q_len + 1));
        if (kv_end <= 0)
            continue;
        const int32_t j0 = (int32_t)(NEXT() % (uint64_t)(kv_end + 64)); /* rows j0 .. j0 + 63 */
        const int32_t i = (int32_t)(NEXT() % (uint64_t)q_len);
        const int32_t k0 = j0 - prefix, w0 = k0 > 0 ? k0 >> 5 : 0, drafts = kv_end - prefix;
        uint32_t w[3];
        for (int k = 0; k < 3; k++)
            w[k] = 32 * (w0 + k) < drafts ? mlav_draft_word(mk, words, i, i, w0 + k) : 0u;
        const uint64_t got = mlav_rows_visible64(w[0], w[1], w[2], j0, prefix, kv_end);
        for (int32_t o = 0; o < 64; o++) {
            const int32_t j = j0 + o;
            const bool want = j < kv_end && mlav_kv_visible(mk, words, i, i, prefix, j);
            if (((got >> o) & 1u) != (uint64_t)want)
                fail_msg("%s q_len %d node %d prefix %d kv_end %d rows from %d: row %d is %d, "
                         "mlav_kv_visible says %d",
                         mk ? "mask" : "chain", q_len, i, prefix, kv_end, j0, j,
                         (int)((got >> o) & 1u), (int)want);
        }
    }
#undef NEXT
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_mask_words),
        cmocka_unit_test(test_tree_mask_chain),
        cmocka_unit_test(test_tree_mask_bushy),
        cmocka_unit_test(test_tree_mask_two_words),
        cmocka_unit_test(test_tree_accept_greedy),
        cmocka_unit_test(test_tree_bad_parents),
        cmocka_unit_test(test_tree_draft_word_matches_visible),
        cmocka_unit_test(test_tree_rows_visible64_matches_visible),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
