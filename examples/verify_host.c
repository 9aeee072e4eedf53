/* One verify step on host memory, one call: mlav_verify on AUTO (the CUDA backend when a GPU is
 * present, which maps host tensors to the device and back; else the CPU backend), checked
 * against the fp64 reference backend.
 *
 * Two requests after their prefixes: an EAGLE-style draft tree of 5 nodes and a chain of 3
 * (DFlash / top-1 drafts), DeepSeek-V3's head shape (Dl 512 + Dr 64, 16 heads here), F32
 * tensors, page size 16 with the pages shuffled in the pool as an engine's allocator leaves
 * them.
 *
 *   cc verify_host.c $(pkg-config --cflags --libs mlaverify) -lm && ./a.out
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <mlaverify.h>

enum { H = 16, DL = 512, DR = 64, W = DL + DR, PAGE = 16, B = 2 };

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float uniform(void) /* [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / 8388608.0 - 1.0);
}

static int fail(const char *what, mlav_status s, const mlav_context *ctx)
{
    fprintf(stderr, "%s: %s: %s\n", what, mlav_status_string(s), mlav_last_error(ctx));
    return 1;
}

int main(void)
{
    /* request 0: a tree (node i's parent), request 1: a chain; local indices per request */
    const int32_t parents[] = {-1, 0, 0, 1, 1, /* request 1 */ -1, 0, 1};
    const int32_t q_indptr[B + 1] = {0, 5, 8};
    const int32_t prefix[B] = {100, 37};
    int32_t kv_lens[B];
    for (int b = 0; b < B; b++)
        kv_lens[b] = prefix[b] + q_indptr[b + 1] - q_indptr[b];
    const int32_t T = q_indptr[B];

    /* the page pool: each request's pages at shuffled ids, as an engine's allocator leaves them */
    const int32_t max_pages = (kv_lens[0] + PAGE - 1) / PAGE; /* the longer request's */
    int32_t perm[2 * 8], page_table[B * 8] = {0};               /* unused slots: any id */
    int64_t num_pages = 0;
    for (int b = 0; b < B; b++)
        num_pages += (kv_lens[b] + PAGE - 1) / PAGE;
    for (int32_t i = 0; i < num_pages; i++)
        perm[i] = i;
    for (int32_t i = (int32_t)num_pages - 1; i > 0; i--) {     /* Fisher-Yates */
        int32_t j = (int32_t)((uniform() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (int b = 0, next = 0; b < B; b++)
        for (int32_t i = 0; i * PAGE < kv_lens[b]; i++)
            page_table[b * max_pages + i] = perm[next++];

    float *q = malloc(sizeof(float) * T * H * W);
    float *kv = malloc(sizeof(float) * num_pages * PAGE * W);
    float *out = malloc(sizeof(float) * T * H * DL), *lse = malloc(sizeof(float) * T * H);
    float *ref_out = malloc(sizeof(float) * T * H * DL), *ref_lse = malloc(sizeof(float) * T * H);
    if (!q || !kv || !out || !lse || !ref_out || !ref_lse)
        return fprintf(stderr, "out of memory\n"), 1;
    for (int64_t i = 0; i < (int64_t)T * H * W; i++)
        q[i] = uniform();
    for (int64_t i = 0; i < num_pages * PAGE * W; i++)
        kv[i] = uniform();

    /* the draft trees as a packed mask: row i sees itself and its ancestors */
    const int32_t words = mlav_tree_mask_words(5); /* the longest draft */
    uint32_t mask[8 * 1];
    for (int b = 0; b < B; b++) {
        mlav_status s = mlav_tree_mask_from_parents(q_indptr[b + 1] - q_indptr[b],
                                                     parents + q_indptr[b], words,
                                                     mask + (size_t)q_indptr[b] * words);
        if (s != MLAV_OK)
            return fail("mlav_tree_mask_from_parents", s, NULL);
    }

    /* [readme:verify] */
    mlav_context *ctx;
    mlav_status s = mlav_context_create(&ctx, MLAV_BACKEND_AUTO);  /* CUDA if present, else CPU */
    if (s != MLAV_OK)
        return fail("mlav_context_create", s, NULL);
    mlav_problem p = {
        .num_heads = H, .d_latent = DL, .d_rope = DR, .softmax_scale = 1.0f / sqrtf(192.0f),
        .dtype = MLAV_DTYPE_F32, .page_size = PAGE, .batch = B,
        .q_indptr = q_indptr, .kv_lens = kv_lens,   /* host arrays: [B+1], [B] */
        .max_pages = max_pages,                     /* page_table's row stride */
    };
    mlav_tensors t = {
        .memory = MLAV_MEM_HOST,                    /* host memory: mapped to a GPU and back */
        .q = q,                                     /* [T, H, Dl+Dr] */
        .kv_cache = kv, .num_pages = num_pages,     /* [num_pages, page_size, Dl+Dr] */
        .page_table = page_table,                   /* [B, max_pages] int32 */
        .tree_mask = mask,                          /* [T, words] uint32, NULL = causal chain */
        .out = out, .lse = lse,                     /* [T, H, Dl], [T, H] float32: written */
    };
    s = mlav_verify(ctx, &p, &t);                   /* plan, workspace, run, free */
    if (s != MLAV_OK)
        return fail("mlav_verify", s, ctx);
    /* [/readme] */
    printf("backend %s (%s)\n", mlav_backend_name(mlav_context_backend(ctx)),
           mlav_context_note(ctx));

    /* the same step on the fp64 oracle */
    mlav_context *ref;
    if ((s = mlav_context_create(&ref, MLAV_BACKEND_REFERENCE)) != MLAV_OK)
        return fail("mlav_context_create(reference)", s, NULL);
    t.out = ref_out;
    t.lse = ref_lse;
    if ((s = mlav_verify(ref, &p, &t)) != MLAV_OK)
        return fail("mlav_verify(reference)", s, ref);
    double err = 0.0, lerr = 0.0;
    for (int64_t i = 0; i < (int64_t)T * H * DL; i++)
        err = fmax(err, fabs((double)out[i] - ref_out[i]));
    for (int64_t i = 0; i < (int64_t)T * H; i++)
        lerr = fmax(lerr, fabs((double)lse[i] - ref_lse[i]));
    const int ok = err < 1e-3 && lerr < 1e-3;
    printf("%d tokens x %d heads: max |out - reference| %.2e, max |lse - reference| %.2e: %s\n",
           T, H, err, lerr, ok ? "ok" : "MISMATCH");

    mlav_context_free(ref);
    mlav_context_free(ctx);
    free(q), free(kv), free(out), free(lse), free(ref_out), free(ref_lse);
    return ok ? 0 : 1;
}
