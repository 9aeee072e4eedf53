/* The split schedules, held byte for byte to a committed corpus (tests/data/schedule_corpus.txt):
 * for each of its seeded random problems, a 64-bit hash of the exact plan's schedule
 * (mlav_schedule_build: every item, every combine item, the splits per request and the counts)
 * and of the step rule's (mlav_step_schedule_build with limits around the problem: its header,
 * items and combine items). A change to either rule that moves one byte of one schedule fails
 * here, naming the seed and the problem.
 *
 * The problems: B 1-64 (and 2,049-4,096 for the exact plan, which has no batch limit), H 8-128,
 * q_len 0-16 (equal or ragged), prefixes 0-128k (spread log-uniformly, or all equal), KV shards
 * of 1-4 ranks with stripes 1 to 2,500, split alignments 32 and 64, the SM counts 132, 170 and
 * 188 at 1 or 2 blocks per SM, block cost 128 or 0 (the fewest-waves chunk alone).
 *
 * A second, wide class (seeds with the top bit set) varies what any caller may pass: max_splits
 * 1-1,024, min_chunk, more_waves 0-12, both costs, 32-128 rows per tile, and KV lengths up to
 * 2^31 - 65 (where the rule's 32-bit and double arithmetic meets its limits).
 *
 * A third, the shares class (seeds whose top 16 bits are 0x54a3), takes the sm_90a family's
 * parameters with equal shares weighed (src/common/schedule_shares.c for the exact plan,
 * schedule_step_shares.h for the step rule): engine-like batches of 2-64 requests, mostly of one
 * q_len, on 114 or 132 SMs, some sharded, some with few splits allowed.
 *
 * `test_schedule_corpus --write FILE [N [N_WIDE [N_SHARES]]]` writes a new corpus from the
 * current code (3,000, 1,000 and 1,000 problems by default): only when a schedule change is
 * meant, and then measured. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/schedule.h"
#include "../src/common/schedule_step.h"
#include "../src/common/shard.h"
#include "test_util.h"

#ifndef MLAV_SCHEDULE_CORPUS
#error "MLAV_SCHEDULE_CORPUS: the corpus file's path (tests/CMakeLists.txt)"
#endif

/* FNV-1a over 32-bit words. */
static uint64_t hash_words(uint64_t h, const int32_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t v = (uint32_t)w[i];
        for (int k = 0; k < 4; k++) {
            h ^= (v >> (8 * k)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

static uint64_t hash_items(uint64_t h, const mlav_split_item *it, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        const int32_t w[] = {it[i].b,     it[i].mtile,   it[i].kv_begin, it[i].kv_end,
                             it[i].slot,  it[i].q_start, it[i].q_len,    it[i].prefix};
        h = hash_words(h, w, sizeof w / sizeof w[0]);
    }
    return h;
}

static uint64_t hash_combine(uint64_t h, const mlav_combine_item *c, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        const int32_t w[] = {c[i].b,       c[i].mtile,   c[i].nsplit, c[i].slot0,
                             c[i].slot_stride, c[i].q_start, c[i].rows};
        h = hash_words(h, w, sizeof w / sizeof w[0]);
    }
    return h;
}

/* One problem of the corpus, a function of its seed alone (never change this generator: the
 * committed hashes are of its problems). */
typedef struct {
    mlav_schedule_params sp;
    mlav_shard shard;
    int32_t B, H, page_size;
    int32_t *qi, *kv;
    mlav_limits lim; /* for the step rule: the problem's lengths, some with room */
} corpus_case;

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int32_t pick(uint64_t *s, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(mix(s) % (uint64_t)(hi - lo + 1));
}

/* The shares class's parameters and lengths (over make_case's first draw, from a stream of its
 * own); *maxq and *maxkv the new lengths' longest. */
static void shares_case(uint64_t seed, corpus_case *c, int32_t *maxq, int32_t *maxkv)
{
    uint64_t w = seed ^ 0x7368617265ull;
    c->sp = (mlav_schedule_params){.rows_per_tile = 64, .key_align = 64, .min_chunk = 64,
                                   .max_splits = pick(&w, 0, 7) ? 256 : pick(&w, 1, 3),
                                   .target_blocks = pick(&w, 0, 3) ? 132 : 114,
                                   .block_cost_keys = 320, .split_cost_keys = 1,
                                   .more_waves = 8, .shares = 1};
    free(c->qi);
    free(c->kv);
    c->B = pick(&w, 0, 9) ? pick(&w, 2, 64) : 1;
    c->H = 8 << pick(&w, 0, 4);
    c->page_size = (int32_t[]){1, 64}[pick(&w, 0, 1)];
    const int32_t ranks = pick(&w, 0, 7) ? 1 : 2;
    c->shard = (mlav_shard){ranks, pick(&w, 0, ranks - 1), ranks > 1 ? 64 : 1};
    const int32_t ragged = pick(&w, 0, 5) == 0, q0 = pick(&w, 1, 16);
    const int32_t prefix = 1 << pick(&w, 10, 17), spread = pick(&w, 0, 100);
    c->qi = malloc(sizeof(int32_t) * (size_t)(c->B + 1));
    c->kv = malloc(sizeof(int32_t) * (size_t)c->B);
    c->qi[0] = 0;
    *maxq = *maxkv = 0;
    for (int32_t b = 0; b < c->B; b++) {
        int32_t q = ragged ? pick(&w, 1, 16) : q0;
        if (pick(&w, 0, 29) == 0)
            q = 0;
        const int32_t d = (int32_t)((int64_t)prefix * spread / 100);
        c->qi[b + 1] = c->qi[b] + q;
        c->kv[b] = prefix + pick(&w, -d, d) + q + 1;
        *maxq = q > *maxq ? q : *maxq;
        *maxkv = c->kv[b] > *maxkv ? c->kv[b] : *maxkv;
    }
}

static void make_case(uint64_t seed, corpus_case *c)
{
    uint64_t s = seed;
    static const int32_t sms[] = {132, 170, 188};
    c->sp = (mlav_schedule_params){.rows_per_tile = 64,
                                   .key_align = 32,
                                   .min_chunk = 32,
                                   .max_splits = 256,
                                   .target_blocks = sms[pick(&s, 0, 2)] * pick(&s, 1, 2),
                                   .block_cost_keys = 128,
                                   .split_cost_keys = 1,
                                   .more_waves = 8};
    if (pick(&s, 0, 3) == 0)
        c->sp.key_align = c->sp.min_chunk = 64;
    if (pick(&s, 0, 6) == 0)
        c->sp.block_cost_keys = 0;
    const int32_t kind = pick(&s, 0, 99);
    c->B = kind < 25 ? 1 : kind < 97 ? pick(&s, 2, 64) : pick(&s, 2049, 4096);
    c->H = 8 << pick(&s, 0, 4);
    c->page_size = (int32_t[]){1, 16, 64}[pick(&s, 0, 2)];
    const int32_t ranks = pick(&s, 0, 1) ? 1 : pick(&s, 2, 4);
    const int32_t stripes[] = {1, 16, 64, 2500, c->page_size};
    c->shard = (mlav_shard){ranks, pick(&s, 0, ranks - 1), ranks > 1 ? stripes[pick(&s, 0, 4)] : 1};
    const int32_t equal_q = pick(&s, 0, 2) == 0, equal_p = pick(&s, 0, 3) == 0;
    const int32_t qmax = pick(&s, 1, 16), pmax = pick(&s, 0, 17) == 17 ? 131072 : 1 << pick(&s, 0, 17);
    const int32_t q0 = pick(&s, 1, qmax), p0 = pick(&s, 0, pmax);
    c->qi = malloc(sizeof(int32_t) * (size_t)(c->B + 1));
    c->kv = malloc(sizeof(int32_t) * (size_t)c->B);
    c->qi[0] = 0;
    int32_t maxq = 0, maxkv = 0;
    for (int32_t b = 0; b < c->B; b++) {
        int32_t q = equal_q ? q0 : pick(&s, 1, qmax);
        if (pick(&s, 0, 39) == 0)
            q = 0;
        const int32_t p = equal_p ? p0 : pick(&s, 0, pick(&s, 0, 1) ? pmax : pmax / 8 + 1);
        c->qi[b + 1] = c->qi[b] + q;
        c->kv[b] = p + q;
        maxq = q > maxq ? q : maxq;
        maxkv = c->kv[b] > maxkv ? c->kv[b] : maxkv;
    }
    if (seed >> 63) {
        /* the wide class (seeds with the top bit): the parameters any caller may give and
         * lengths to 2^31 - 1, from a stream of its own so that the first class stays as it was */
        uint64_t w = seed ^ 0x77696465ull;
        c->sp.max_splits = (int32_t[]){1, 7, 64, 256, 300, 1024}[pick(&w, 0, 5)];
        c->sp.min_chunk = (int32_t[]){c->sp.key_align, 96, 1000, 1}[pick(&w, 0, 3)];
        c->sp.more_waves = pick(&w, 0, 12);
        c->sp.split_cost_keys = (int32_t[]){0, 1, 7}[pick(&w, 0, 2)];
        c->sp.block_cost_keys = (int32_t[]){0, 1, 128, 1000}[pick(&w, 0, 3)];
        c->sp.rows_per_tile = (int32_t[]){64, 32, 128}[pick(&w, 0, 2)];
        if (pick(&w, 0, 1) && c->B <= 8) { /* long KV */
            const int32_t top = INT32_MAX - 64;
            for (int32_t b = 0; b < c->B; b++) {
                const int32_t q = c->qi[b + 1] - c->qi[b];
                c->kv[b] = q + (pick(&w, 0, 3) ? top - q - pick(&w, 0, 1 << 20)
                                               : pick(&w, 0, 1 << pick(&w, 0, 30)));
                maxkv = c->kv[b] > maxkv ? c->kv[b] : maxkv;
            }
        }
    }
    if (seed >> 48 == 0x54a3)
        shares_case(seed, c, &maxq, &maxkv);
    const int32_t room = pick(&s, 0, 1);
    c->lim = (mlav_limits){.max_batch = c->B + room * pick(&s, 0, 8),
                           .max_tokens = (c->qi[c->B] > 0 ? c->qi[c->B] : 1) + room * pick(&s, 0, 64),
                           .max_q_len = (maxq > 0 ? maxq : 1) + room * pick(&s, 0, 4),
                           .max_kv_len = (maxkv > 16 ? maxkv : 16)};
    const int32_t kv_room = room * pick(&s, 0, 4096);
    c->lim.max_kv_len += kv_room < INT32_MAX - c->lim.max_kv_len ? kv_room : 0;
    if (c->lim.max_q_len > c->lim.max_tokens)
        c->lim.max_q_len = c->lim.max_tokens;
    if (c->lim.max_batch > MLAV_STEP_MAX_BATCH)
        c->lim.max_batch = MLAV_STEP_MAX_BATCH;
}

static uint64_t exact_hash(const corpus_case *c)
{
    int64_t total = 0, maxkv = 0;
    for (int32_t b = 0; b < c->B; b++) {
        total += mlav_shard_rows(c->shard, c->kv[b]);
        maxkv = c->kv[b] > maxkv ? c->kv[b] : maxkv;
    }
    const mlav_problem_info p = {.H = c->H, .Dl = 512, .Dr = 64, .W = 576, .scale = 0.1f,
                                 .page_size = c->page_size, .B = c->B, .T = c->qi[c->B],
                                 .max_q_len = 16, .mask_words = 1, .max_kv_len = maxkv,
                                 .total_kv = total, .shard = c->shard, .q_indptr = c->qi,
                                 .kv_lens = c->kv};
    mlav_schedule s;
    assert_int_equal(mlav_schedule_build(&p, &c->sp, &s), MLAV_OK);
    const int32_t counts[] = {s.n_items, s.n_combine, s.n_slots, s.chunk_keys};
    uint64_t h = hash_words(0xcbf29ce484222325ull, counts, 4);
    h = hash_items(h, s.items, s.n_items);
    h = hash_combine(h, s.combine, s.n_combine);
    h = hash_words(h, s.splits, (size_t)c->B);
    mlav_schedule_free(&s);
    return h;
}

/* 0 where the step rule does not apply (more requests than a plan for limits takes). */
static uint64_t step_hash(const corpus_case *c)
{
    if (c->B > MLAV_STEP_MAX_BATCH)
        return 0;
    const mlav_schedule_params sp = mlav_step_params(c->H, &c->lim, c->sp);
    mlav_step_bounds bd = mlav_step_bounds_of(c->H, &c->lim, &sp);
    bd.combine_wave[0] = bd.combine_wave[1] = bd.combine_wave[2] = sp.target_blocks;
    mlav_split_item *items = calloc((size_t)bd.max_items + 1, sizeof *items);
    mlav_combine_item *comb = calloc((size_t)bd.max_combine + 1, sizeof *comb);
    mlav_step_scratch *scratch = calloc(1, mlav_step_scratch_bytes());
    assert_non_null(items);
    assert_non_null(comb);
    assert_non_null(scratch);
    mlav_step_header h;
    mlav_step_schedule_build(c->B, c->qi, c->kv, c->shard, c->H, &c->lim, &sp, &bd, &h, items,
                             comb, scratch);
    const int32_t head[] = {h.bad,       h.batch,      h.n_items,      h.n_combine,
                            h.n_slots,   h.chunk_keys, h.combine_kind, h.combine_col_blocks,
                            bd.max_items, bd.max_combine, bd.max_slots, sp.more_waves};
    uint64_t x = hash_words(0xcbf29ce484222325ull, head, sizeof head / sizeof head[0]);
    x = hash_items(x, items, bd.max_items); /* the padding past n_items too */
    x = hash_combine(x, comb, bd.max_combine);
    free(items);
    free(comb);
    free(scratch);
    return x;
}

static void case_free(corpus_case *c)
{
    free(c->qi);
    free(c->kv);
}

static void describe(uint64_t seed, const corpus_case *c)
{
    print_error("seed %" PRIu64 ": B %d H %d shard %d/%d stripe %d target_blocks %d key_align %d "
                "block_cost %d; first requests (q_len, kv_len):",
                seed, c->B, c->H, c->shard.rank, c->shard.ranks, c->shard.stripe,
                c->sp.target_blocks, c->sp.key_align, c->sp.block_cost_keys);
    for (int32_t b = 0; b < c->B && b < 8; b++)
        print_error(" (%d, %d)", c->qi[b + 1] - c->qi[b], c->kv[b]);
    print_error("\n");
}

static void test_corpus(void **state)
{
    (void)state;
    FILE *f = fopen(MLAV_SCHEDULE_CORPUS, "r");
    if (!f)
        fail_msg("cannot open the corpus %s", MLAV_SCHEDULE_CORPUS);
    char line[256];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        uint64_t seed, he, hs;
        if (sscanf(line, "%" SCNu64 " %" SCNx64 " %" SCNx64, &seed, &he, &hs) != 3)
            fail_msg("corpus line %d unreadable: %s", n + 1, line);
        corpus_case c;
        make_case(seed, &c);
        const uint64_t ge = exact_hash(&c), gs = step_hash(&c);
        if (ge != he || gs != hs) {
            if (bad++ < 10) {
                print_error("%s schedule changed: ", ge != he ? "exact" : "step");
                describe(seed, &c);
            }
        }
        case_free(&c);
        n++;
    }
    fclose(f);
    print_message("  %d problems, %d schedules changed\n", n, bad);
    assert_true(n >= 5000);
    assert_int_equal(bad, 0);
}

static int write_corpus(const char *path, int n, int n_wide, int n_shares)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fprintf(f, "# seed, FNV-1a 64 of the exact schedule, of the step rule's (0: B > %d); "
               "tests/test_schedule_corpus.c\n",
            MLAV_STEP_MAX_BATCH);
    for (int i = 0; i < n + n_wide + n_shares; i++) {
        const uint64_t seed = i < n          ? 0x5c4ed01e00000000ull + (uint64_t)i * 7919u
                              : i < n + n_wide ? 0xa1de000000000000ull + (uint64_t)(i - n) * 7919u
                                             : 0x54a3000000000000ull +
                                                   (uint64_t)(i - n - n_wide) * 7919u;
        corpus_case c;
        make_case(seed, &c);
        fprintf(f, "%" PRIu64 " %016" PRIx64 " %016" PRIx64 "\n", seed, exact_hash(&c),
                step_hash(&c));
        case_free(&c);
    }
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--write") == 0)
        return write_corpus(argv[2], argc >= 4 ? atoi(argv[3]) : 3000,
                            argc >= 5 ? atoi(argv[4]) : 1000, argc >= 6 ? atoi(argv[5]) : 1000);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_corpus)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
