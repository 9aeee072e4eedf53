/* An engine's loop on the CPU backend: one plan for the engine's limits, made once; at every step
 * new host lengths (mlav_plan_update), then one mlav_run per layer on tensors of the limits'
 * shapes. The same calls run on CUDA with device lengths inside one CUDA graph
 * (engine_loop_cuda.c). Each step's layers are checked against a one-shot fp64 reference run of
 * the step's exact lengths.
 *
 *   cc engine_loop_cpu.c $(pkg-config --cflags --libs mlaverify) -lm && ./a.out
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mlaverify.h>

enum { H = 16, DL = 512, DR = 64, W = DL + DR, PAGE = 16, LAYERS = 2, STEPS = 4 };
enum { MAX_BATCH = 4, MAX_Q_LEN = 8, MAX_TOKENS = MAX_BATCH * MAX_Q_LEN, MAX_KV_LEN = 512 };
enum { MAX_PAGES = MAX_KV_LEN / PAGE, NUM_PAGES = MAX_BATCH * MAX_PAGES };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float uniform(void) /* [-1, 1) */
{
    return (float)((double)next_u32() / 1073741824.0 - 1.0);
}

static int fail(const char *what, mlav_status s, const mlav_context *ctx)
{
    fprintf(stderr, "%s: %s: %s\n", what, mlav_status_string(s), mlav_last_error(ctx));
    return 1;
}

/* One step's layers against a one-shot fp64 reference run of its exact lengths: 0, or 1 after
 * a sentence. */
static int check_step(mlav_context *ref, const mlav_problem *shape, int32_t batch,
                      const int32_t *q_indptr, const int32_t *kv_lens, float *const *q,
                      float *const *kv, const int32_t *page_table, const uint32_t *mask,
                      float *const *out, float *const *lse)
{
    static int step;
    static float ref_out[MAX_TOKENS * H * DL], ref_lse[MAX_TOKENS * H];
    mlav_problem p = *shape;
    p.batch = batch;
    p.q_indptr = q_indptr;
    p.kv_lens = kv_lens;
    double err = 0.0;
    for (int l = 0; l < LAYERS; l++) {
        mlav_tensors t = {.memory = MLAV_MEM_HOST, .q = q[l], .kv_cache = kv[l],
                          .num_pages = NUM_PAGES, .page_table = page_table,
                          .tree_mask = mask, .out = ref_out, .lse = ref_lse};
        mlav_status s = mlav_verify(ref, &p, &t);
        if (s != MLAV_OK)
            return fail("mlav_verify(reference)", s, ref);
        for (size_t i = 0; i < (size_t)q_indptr[batch] * H * DL; i++)
            err = fmax(err, fabs((double)out[l][i] - ref_out[i]));
        for (size_t i = 0; i < (size_t)q_indptr[batch] * H; i++)
            err = fmax(err, fabs((double)lse[l][i] - ref_lse[i]));
    }
    printf("step %d: %d requests, %d tokens, kv_lens", step, batch, q_indptr[batch]);
    for (int32_t b = 0; b < batch; b++)
        printf(" %d", kv_lens[b]);
    printf("; %d layers, max |diff| vs reference %.2e\n", LAYERS, err);
    if (!(err < 1e-3))
        return fprintf(stderr, "step %d: MISMATCH\n", step), 1;
    step++;
    return 0;
}

int main(void)
{
    const float scale = 1.0f / sqrtf(192.0f);
    const int32_t words = mlav_tree_mask_words(MAX_Q_LEN);
    /* every layer's tensors at the limits' shapes, allocated once */
    float *q[LAYERS], *kv[LAYERS], *out[LAYERS], *lse[LAYERS];
    int32_t *page_table = calloc(MAX_BATCH * MAX_PAGES, sizeof(int32_t));
    uint32_t *mask = calloc((size_t)MAX_TOKENS * words, sizeof(uint32_t));
    if (!page_table || !mask)
        return fprintf(stderr, "out of memory\n"), 1;
    for (int l = 0; l < LAYERS; l++) {
        q[l] = malloc(sizeof(float) * MAX_TOKENS * H * W);
        kv[l] = malloc(sizeof(float) * NUM_PAGES * PAGE * W);
        out[l] = malloc(sizeof(float) * MAX_TOKENS * H * DL);
        lse[l] = malloc(sizeof(float) * MAX_TOKENS * H);
        if (!q[l] || !kv[l] || !out[l] || !lse[l])
            return fprintf(stderr, "out of memory\n"), 1;
        for (size_t i = 0; i < (size_t)NUM_PAGES * PAGE * W; i++)
            kv[l][i] = uniform();
    }

    mlav_context *ctx, *ref;
    mlav_status s = mlav_context_create(&ctx, MLAV_BACKEND_CPU);
    if (s != MLAV_OK || (s = mlav_context_create(&ref, MLAV_BACKEND_REFERENCE)) != MLAV_OK)
        return fail("mlav_context_create", s, NULL);
    mlav_limits lim = {.max_batch = MAX_BATCH, .max_tokens = MAX_TOKENS,
                       .max_q_len = MAX_Q_LEN, .max_kv_len = MAX_KV_LEN};
    mlav_problem shape = {.num_heads = H, .d_latent = DL, .d_rope = DR, .softmax_scale = scale,
                          .dtype = MLAV_DTYPE_F32, .page_size = PAGE, .max_pages = MAX_PAGES};
    mlav_plan *plan;
    s = mlav_plan_create_for_limits(ctx, &shape, &lim, &plan);         /* once */
    if (s != MLAV_OK)
        return fail("mlav_plan_create_for_limits", s, ctx);
    size_t ws_bytes = mlav_plan_workspace_bytes(plan);                 /* every step's bound */
    void *ws = ws_bytes ? aligned_alloc(256, (ws_bytes + 255) / 256 * 256) : NULL;
    if (ws_bytes && !ws)
        return fprintf(stderr, "out of memory\n"), 1;

    for (int step = 0; step < STEPS; step++) {
        int32_t batch = 1 + (int32_t)(next_u32() % MAX_BATCH), q_indptr[MAX_BATCH + 1] = {0};
        int32_t kv_lens[MAX_BATCH];
        for (int32_t b = 0; b < batch; b++) {   /* this step's drafts and prefixes */
            int32_t q_len = 1 + (int32_t)(next_u32() % MAX_Q_LEN);
            q_indptr[b + 1] = q_indptr[b] + q_len;
            kv_lens[b] = q_len + (int32_t)(next_u32() % (MAX_KV_LEN - q_len + 1));
            for (int32_t i = 0; i < MAX_PAGES; i++)   /* request b owns pages b, b + 4, ... */
                page_table[b * MAX_PAGES + i] = b + MAX_BATCH * i;
            for (int32_t i = 0; i < q_len; i++) {     /* a chain: node i sees nodes 0..i */
                uint32_t *row = mask + (size_t)(q_indptr[b] + i) * words;
                memset(row, 0, sizeof(uint32_t) * words);
                for (int32_t j = 0; j <= i; j++)
                    row[j / 32] |= 1u << (j % 32);
            }
        }
        for (int l = 0; l < LAYERS; l++)
            for (size_t i = 0; i < (size_t)q_indptr[batch] * H * W; i++)
                q[l][i] = uniform();

        mlav_lengths len = {MLAV_MEM_HOST, batch, q_indptr, kv_lens};
        s = mlav_plan_update(plan, &len, ws, ws_bytes, NULL);          /* every step */
        if (s != MLAV_OK)
            return fail("mlav_plan_update", s, ctx);
        for (int l = 0; l < LAYERS; l++) {                             /* every layer */
            mlav_tensors t = {.memory = MLAV_MEM_HOST, .q = q[l], .kv_cache = kv[l],
                              .num_pages = NUM_PAGES, .page_table = page_table,
                              .tree_mask = mask, .out = out[l], .lse = lse[l]};
            if ((s = mlav_run(plan, &t, ws, ws_bytes, NULL)) != MLAV_OK)
                return fail("mlav_run", s, ctx);
        }
        if (check_step(ref, &shape, batch, q_indptr, kv_lens, q, kv, page_table, mask, out,
                       lse) != 0)
            return 1;
    }
    printf("engine loop on %s: %d steps ok\n", mlav_backend_name(mlav_plan_backend(plan)), STEPS);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    mlav_context_free(ref);
    free(ws), free(page_table), free(mask);
    for (int l = 0; l < LAYERS; l++)
        free(q[l]), free(kv[l]), free(out[l]), free(lse[l]);
    return 0;
}
