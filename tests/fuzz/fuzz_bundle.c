/* libFuzzer target for the golden-bundle reader: any bytes give MLAV_OK or MLAV_ERR_FORMAT with a
 * sentence; what is accepted (FP8 caches with their kv_scale included) survives describe, mask,
 * write + re-read, and a check on the cpu and reference backends. */
#define _GNU_SOURCE /* memfd_create: the input becomes a file without touching the disk */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bundle.h"
#include "check.h"
#include "readout.h"
#include "mlaverify.h"

/* A check costs the attention (T x H x kv x W) plus the readout (T x H x Dl x vocab): a bundle
 * made of a few kilobytes can ask for billions of those, which would only measure patience. */
#define FUZZ_MAX_WORK 4000000.0

/* A broken invariant: print it and abort, which libFuzzer (and the replay driver) report. */
#define FUZZ_REQUIRE(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_bundle: " __VA_ARGS__);                                          \
            fprintf(stderr, " [%s:%d: %s]\n", __FILE__, __LINE__, #cond);                          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int in_fd = -1, out_fd = -1;
static char in_path[64], out_path[64];
static mlav_context *ctx_cpu, *ctx_ref;

/* An in-memory file named through /proc, so the reader's own fopen path is what is fuzzed. */
static int mem_file(const char *name, char *path, size_t len)
{
    int fd = memfd_create(name, 0);
    if (fd < 0) {
        perror("fuzz_bundle: memfd_create");
        abort();
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

static void put_file(int fd, const uint8_t *data, size_t size)
{
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz_bundle: writing the input");
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    in_fd = mem_file("bundle-in", in_path, sizeof in_path);
    out_fd = mem_file("bundle-out", out_path, sizeof out_path);
    if (mlav_context_create(&ctx_cpu, MLAV_BACKEND_CPU) != MLAV_OK ||
        mlav_context_create(&ctx_ref, MLAV_BACKEND_REFERENCE) != MLAV_OK) {
        fprintf(stderr, "fuzz_bundle: no context: %s\n", mlav_last_error(NULL));
        abort();
    }
    return 0;
}

static double check_work(const mlav_bundle *b)
{
    double work = (double)b->T * b->H * b->Dl * b->vocab;
    for (int32_t r = 0; r < b->B; r++)
        work += (double)mlav_bundle_q_len(b, r) * b->H * (double)b->kv_lens[r] * b->W;
    return work;
}

/* Everything downstream of a successful read must hold up too. */
static void exercise(const mlav_bundle *b, mlav_bundle_mode mode)
{
    char text[256];
    mlav_bundle_describe(b, text, sizeof text);
    FUZZ_REQUIRE(strlen(text) < sizeof text, "describe overran");

    /* the bounds docs/RELIABILITY.md states (issue 26), on every accepted shape: the dense mask
     * is at most 512 bytes a node, the readout's logits at most 16 MiB whatever T is (the
     * allocations themselves are held under -malloc_limit_mb by scripts/fuzz.sh) */
    FUZZ_REQUIRE(b->max_q_len >= 1 && b->max_q_len <= MLAV_BUNDLE_MAX_Q_LEN,
                 "an accepted bundle has a request of %d nodes", b->max_q_len);
    FUZZ_REQUIRE(mlav_tree_mask_words(b->max_q_len) <= MLAV_BUNDLE_MAX_Q_LEN / 32,
                 "mask rows of %d words", mlav_tree_mask_words(b->max_q_len));
    const int32_t nb = mlav_readout_node_block(b->T, b->vocab);
    FUZZ_REQUIRE(nb >= 1 && nb <= b->T && (int64_t)nb * b->vocab <= MLAV_READOUT_LOGIT_DOUBLES,
                 "readout blocks of %d nodes x vocab %d", nb, b->vocab);

    uint32_t *mask = NULL;
    mlav_status s = mlav_bundle_tree_mask(b, &mask);
    FUZZ_REQUIRE(s == MLAV_OK, "an accepted bundle's tree gives no mask: %s",
                 mlav_last_error(NULL));
    free(mask);

    /* written and read back, it is the same bundle */
    FUZZ_REQUIRE(ftruncate(out_fd, 0) == 0, "cannot empty the output file");
    s = mlav_bundle_write(out_path, b);
    FUZZ_REQUIRE(s == MLAV_OK, "an accepted bundle cannot be written: %s", mlav_last_error(NULL));
    mlav_bundle again;
    s = mlav_bundle_read(out_path, mode, &again);
    FUZZ_REQUIRE(s == MLAV_OK, "a rewritten bundle is refused: %s", mlav_last_error(NULL));
    FUZZ_REQUIRE(again.T == b->T && again.B == b->B && again.H == b->H && again.W == b->W &&
                     again.num_pages == b->num_pages && again.page_size == b->page_size &&
                     again.vocab == b->vocab && again.readout_seed == b->readout_seed &&
                     mlav_bundle_kv_dtype(&again) == mlav_bundle_kv_dtype(b) &&
                     memcmp(&again.kv_scale, &b->kv_scale, sizeof b->kv_scale) == 0,
                 "the rewritten bundle differs");
    FUZZ_REQUIRE(memcmp(again.q_indptr, b->q_indptr, sizeof(int32_t) * ((size_t)b->B + 1)) == 0 &&
                     memcmp(again.kv_lens, b->kv_lens, sizeof(int32_t) * (size_t)b->B) == 0 &&
                     memcmp(again.tree_parents, b->tree_parents, sizeof(int32_t) * (size_t)b->T) ==
                         0,
                 "the rewritten bundle's lengths differ");
    mlav_bundle_free(&again);

    if (mode == MLAV_BUNDLE_FULL && check_work(b) <= FUZZ_MAX_WORK) {
        mlav_check_result r;
        mlav_check_bundle(ctx_ref, b, &r);
        FUZZ_REQUIRE(r.verdict != MLAV_VERDICT_UNSUPPORTED, "reference declined: %s", r.reason);
        mlav_check_bundle(ctx_cpu, b, &r);
        FUZZ_REQUIRE(r.verdict != MLAV_VERDICT_UNSUPPORTED, "cpu declined: %s", r.reason);
        /* a FAIL verdict is fine (the expectations are fuzzed too); a guard overwrite is not */
        FUZZ_REQUIRE(!strstr(r.reason, "guard"), "cpu wrote outside out/lse: %s", r.reason);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (in_fd < 0)
        LLVMFuzzerInitialize(NULL, NULL);
    put_file(in_fd, data, size);
    static const mlav_bundle_mode modes[2] = {MLAV_BUNDLE_FULL, MLAV_BUNDLE_INPUTS};
    for (int m = 0; m < 2; m++) {
        mlav_bundle b;
        mlav_status s = mlav_bundle_read(in_path, modes[m], &b);
        if (s != MLAV_OK) {
            /* a status the reader promises, with a sentence, and nothing left allocated */
            FUZZ_REQUIRE(s == MLAV_ERR_FORMAT || s == MLAV_ERR_OUT_OF_MEMORY,
                         "unexpected status %s: %s", mlav_tool_status_string(s),
                         mlav_last_error(NULL));
            FUZZ_REQUIRE(mlav_last_error(NULL)[0] != '\0', "%s without a sentence",
                         mlav_tool_status_string(s));
            FUZZ_REQUIRE(b.q == NULL && b.kv_cache == NULL && b.source == NULL,
                         "a failed read left data behind");
            continue;
        }
        exercise(&b, modes[m]);
        mlav_bundle_free(&b);
    }
    return 0;
}
