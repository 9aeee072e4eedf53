/* Draft-tree helpers: the mask from a parent array, and greedy acceptance. */
#include <string.h>

#include "../core/problem.h"

int32_t mlav_tree_mask_words(int32_t max_q_len)
{
    return max_q_len <= 32 ? 1 : (int32_t)(((int64_t)max_q_len + 31) / 32);
}

/* parents[0] = -1 and 0 <= parents[i] < i: the rule both helpers rely on (it makes every walk
 * up the tree end at the root in fewer than q_len steps). */
static mlav_status check_parents(int32_t q_len, const int32_t *parents)
{
    if (q_len < 1)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "q_len = %d must be >= 1", q_len);
    if (!parents)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "parents must not be NULL");
    if (parents[0] != -1)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "parents[0] = %d must be -1 (the root)",
                              parents[0]);
    for (int32_t i = 1; i < q_len; i++)
        if (parents[i] < 0 || parents[i] >= i)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "parents[%d] = %d must be in [0, %d) (a node's parent comes "
                                  "before it)",
                                  i, parents[i], i);
    return MLAV_OK;
}

mlav_status mlav_tree_mask_from_parents(int32_t q_len, const int32_t *parents, int32_t words,
                                        uint32_t *mask)
{
    mlav_status s = check_parents(q_len, parents);
    if (s != MLAV_OK)
        return s;
    if (!mask)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "mask must not be NULL");
    if (words < mlav_tree_mask_words(q_len))
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "words = %d is fewer than the %d a %d-node tree needs", words,
                              mlav_tree_mask_words(q_len), q_len);
    memset(mask, 0, sizeof(uint32_t) * (size_t)q_len * (size_t)words);
    for (int32_t i = 0; i < q_len; i++) {
        uint32_t *row = mask + (size_t)i * (size_t)words;
        /* parents come first, so row i = row parents[i] plus bit i */
        if (i > 0)
            memcpy(row, mask + (size_t)parents[i] * (size_t)words, sizeof(uint32_t) * (size_t)words);
        row[i / 32] |= 1u << (i % 32);
    }
    return MLAV_OK;
}

mlav_status mlav_tree_accept_greedy(int32_t q_len, const int32_t *parents,
                                    const int32_t *draft_tokens, const int32_t *target_tokens,
                                    int32_t *accepted, int32_t *num_accepted,
                                    int32_t *bonus_token)
{
    mlav_status s = check_parents(q_len, parents);
    if (s != MLAV_OK)
        return s;
    if (!draft_tokens || !target_tokens || !accepted || !num_accepted || !bonus_token)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "draft_tokens, target_tokens, accepted, num_accepted and "
                              "bonus_token must not be NULL");
    for (int32_t i = 0; i < q_len; i++)
        accepted[i] = -1;
    int32_t n = 0, node = 0;
    accepted[n++] = 0;
    for (;;) {
        int32_t next = -1;
        /* children of `node` have larger indices: the first match is the lowest child */
        for (int32_t c = node + 1; c < q_len; c++)
            if (parents[c] == node && draft_tokens[c] == target_tokens[node]) {
                next = c;
                break;
            }
        if (next < 0)
            break;
        accepted[n++] = next;
        node = next;
    }
    *num_accepted = n;
    *bonus_token = target_tokens[node];
    return MLAV_OK;
}
