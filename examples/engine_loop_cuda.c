/* An engine's loop on a GPU: one plan for the engine's limits, one CUDA graph captured once
 * (the step's schedule from device lengths, then every layer's run), replayed at every step
 * after the step's lengths, mask and queries are written into the graph's fixed buffers. No
 * host work per step but those copies. Each step is checked against a one-shot fp64 reference
 * run of its exact lengths on the host. Exits 77 (skipped) without a CUDA device.
 *
 *   cc engine_loop_cuda.c $(pkg-config --cflags --libs mlaverify) -I/usr/local/cuda/include \
 *      -L/usr/local/cuda/lib64 -lcudart -lm && ./a.out
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <mlaverify.h>

enum { H = 16, DL = 512, DR = 64, W = DL + DR, PAGE = 1, LAYERS = 2, STEPS = 4 };
enum { MAX_BATCH = 4, MAX_Q_LEN = 8, MAX_TOKENS = MAX_BATCH * MAX_Q_LEN, MAX_KV_LEN = 1024 };
enum { MAX_PAGES = MAX_KV_LEN / PAGE, NUM_PAGES = MAX_BATCH * MAX_PAGES };

static uint64_t rng_state = 0xD1B54A32D192ED03ull;
static uint32_t next_u32(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* bf16 bits of a uniform value in [-1, 1) (round to nearest even; the values are finite) */
static uint16_t uniform_bf16(void)
{
    float f = (float)((double)next_u32() / 1073741824.0 - 1.0);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#define CUDA_OK(call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__,    \
                    __LINE__);                                                               \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

static int fail(const char *what, mlav_status s, const mlav_context *ctx)
{
    fprintf(stderr, "%s: %s: %s\n", what, mlav_status_string(s), mlav_last_error(ctx));
    return 1;
}

/* The next step's lengths (batch random, padded to MAX_BATCH with q_len 0), a chain mask and
 * every layer's queries (on the host and copied into the graph's q buffers): its batch, or -1
 * after a sentence. */
static int32_t next_step(int32_t *q_indptr, int32_t *kv_lens, uint32_t *mask, int32_t words,
                         uint16_t *const *hq, void *const *dq, cudaStream_t stream)
{
    int32_t batch = 1 + (int32_t)(next_u32() % MAX_BATCH);
    q_indptr[0] = 0;
    for (int32_t b = 0; b < MAX_BATCH; b++) {
        int32_t q_len = b < batch ? 1 + (int32_t)(next_u32() % MAX_Q_LEN) : 0;
        q_indptr[b + 1] = q_indptr[b] + q_len;
        kv_lens[b] = b < batch ? q_len + (int32_t)(next_u32() % (MAX_KV_LEN - q_len + 1)) : 0;
        for (int32_t i = 0; i < q_len; i++) {
            uint32_t *row = mask + (size_t)(q_indptr[b] + i) * words;
            memset(row, 0, sizeof(uint32_t) * words);
            for (int32_t j = 0; j <= i; j++)
                row[j / 32] |= 1u << (j % 32);
        }
    }
    const size_t n = (size_t)q_indptr[MAX_BATCH] * H * W;
    for (int l = 0; l < LAYERS; l++) {
        for (size_t i = 0; i < n; i++)
            hq[l][i] = uniform_bf16();
        cudaError_t e = cudaMemcpyAsync(dq[l], hq[l], n * 2, cudaMemcpyHostToDevice, stream);
        if (e != cudaSuccess) {
            fprintf(stderr, "cudaMemcpyAsync: %s\n", cudaGetErrorString(e));
            return -1;
        }
    }
    return batch;
}

/* Every layer's out and lse of the step against a one-shot fp64 reference run of its exact
 * lengths on the host: 0, or 1 after a sentence. */
static int check_step(const mlav_problem *shape, int32_t batch, const int32_t *q_indptr,
                      const int32_t *kv_lens, uint16_t *const *hq, uint16_t *const *hkv,
                      void *const *dout, void *const *dlse, const int32_t *page_table,
                      const uint32_t *mask)
{
    static int step;
    static uint16_t hout[MAX_TOKENS * H * DL], ref_out[MAX_TOKENS * H * DL];
    static float hlse[MAX_TOKENS * H], ref_lse[MAX_TOKENS * H];
    const int32_t T = q_indptr[batch];
    mlav_context *ref;
    mlav_status s = mlav_context_create(&ref, MLAV_BACKEND_REFERENCE);
    if (s != MLAV_OK)
        return fail("mlav_context_create(reference)", s, NULL);
    mlav_problem p = *shape;
    p.batch = batch;
    p.q_indptr = q_indptr;
    p.kv_lens = kv_lens;
    double err = 0.0;
    for (int l = 0; l < LAYERS; l++) {
        CUDA_OK(cudaMemcpy(hout, dout[l], (size_t)T * H * DL * 2, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(hlse, dlse[l], (size_t)T * H * 4, cudaMemcpyDeviceToHost));
        mlav_tensors t = {.memory = MLAV_MEM_HOST, .q = hq[l], .kv_cache = hkv[l],
                          .num_pages = NUM_PAGES, .page_table = page_table,
                          .tree_mask = mask, .out = ref_out, .lse = ref_lse};
        if ((s = mlav_verify(ref, &p, &t)) != MLAV_OK)
            return fail("mlav_verify(reference)", s, ref);
        for (size_t i = 0; i < (size_t)T * H * DL; i++)
            err = fmax(err, fabs((double)bf16_to_float(hout[i]) - bf16_to_float(ref_out[i])));
        for (size_t i = 0; i < (size_t)T * H; i++)
            err = fmax(err, fabs((double)hlse[i] - ref_lse[i]));
    }
    mlav_context_free(ref);
    printf("step %d: %d requests (graph of %d), %d tokens; %d layers, max |diff| vs reference "
           "%.2e\n", step, batch, MAX_BATCH, T, LAYERS, err);
    if (!(err < 2e-2))
        return fprintf(stderr, "step %d: MISMATCH\n", step), 1;
    step++;
    return 0;
}

int main(void)
{
    if (mlav_cuda_device_count() == 0) {
        printf("no CUDA device (cc >= 8.0): skipped\n");
        return 77;
    }
    const float scale = 1.0f / sqrtf(192.0f);
    const int32_t words = mlav_tree_mask_words(MAX_Q_LEN);
    const size_t q_elems = (size_t)MAX_TOKENS * H * W, kv_elems = (size_t)NUM_PAGES * PAGE * W;
    const size_t out_elems = (size_t)MAX_TOKENS * H * DL, lse_elems = (size_t)MAX_TOKENS * H;

    /* host copies: the inputs of every layer (for the reference too) and the step's arrays */
    uint16_t *hq[LAYERS], *hkv[LAYERS];
    int32_t *page_table = malloc(sizeof(int32_t) * MAX_BATCH * MAX_PAGES);
    uint32_t *mask = calloc((size_t)MAX_TOKENS * words, sizeof(uint32_t));
    if (!page_table || !mask)
        return fprintf(stderr, "out of memory\n"), 1;
    for (int32_t b = 0; b < MAX_BATCH; b++) /* request b owns pages b, b + 4, b + 8, ... */
        for (int32_t i = 0; i < MAX_PAGES; i++)
            page_table[b * MAX_PAGES + i] = b + MAX_BATCH * i;

    /* the graph's fixed device buffers */
    void *dq[LAYERS], *dkv[LAYERS], *dout[LAYERS], *dlse[LAYERS];
    int32_t *d_q_indptr, *d_kv_lens, *d_page_table;
    uint32_t *d_mask;
    for (int l = 0; l < LAYERS; l++) {
        hq[l] = malloc(q_elems * 2);
        hkv[l] = malloc(kv_elems * 2);
        if (!hq[l] || !hkv[l])
            return fprintf(stderr, "out of memory\n"), 1;
        for (size_t i = 0; i < kv_elems; i++)
            hkv[l][i] = uniform_bf16();
        CUDA_OK(cudaMalloc(&dq[l], q_elems * 2));
        CUDA_OK(cudaMalloc(&dkv[l], kv_elems * 2));
        CUDA_OK(cudaMalloc(&dout[l], out_elems * 2));
        CUDA_OK(cudaMalloc(&dlse[l], lse_elems * 4));
        CUDA_OK(cudaMemcpy(dkv[l], hkv[l], kv_elems * 2, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMalloc((void **)&d_q_indptr, sizeof(int32_t) * (MAX_BATCH + 1)));
    CUDA_OK(cudaMalloc((void **)&d_kv_lens, sizeof(int32_t) * MAX_BATCH));
    CUDA_OK(cudaMalloc((void **)&d_page_table, sizeof(int32_t) * MAX_BATCH * MAX_PAGES));
    CUDA_OK(cudaMalloc((void **)&d_mask, sizeof(uint32_t) * MAX_TOKENS * words));
    CUDA_OK(cudaMemcpy(d_page_table, page_table, sizeof(int32_t) * MAX_BATCH * MAX_PAGES,
                       cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));

    /* [readme:engine-cuda] */
    mlav_context *ctx;
    mlav_status s = mlav_context_create(&ctx, MLAV_BACKEND_CUDA);
    if (s != MLAV_OK)
        return fail("mlav_context_create", s, NULL);
    mlav_limits lim = {.max_batch = MAX_BATCH, .max_tokens = MAX_TOKENS,
                       .max_q_len = MAX_Q_LEN, .max_kv_len = MAX_KV_LEN};
    mlav_problem shape = {.num_heads = H, .d_latent = DL, .d_rope = DR, .softmax_scale = scale,
                          .dtype = MLAV_DTYPE_BF16, .page_size = PAGE, .max_pages = MAX_PAGES};
    mlav_plan *plan;
    if ((s = mlav_plan_create_for_limits(ctx, &shape, &lim, &plan)) != MLAV_OK)    /* once */
        return fail("mlav_plan_create_for_limits", s, ctx);
    size_t ws_bytes = mlav_plan_workspace_bytes(plan);            /* the bound of every step */
    void *ws;
    CUDA_OK(cudaMalloc(&ws, ws_bytes));                                             /* once */

    /* capture once: the schedule from the device lengths, then every layer's run */
    mlav_lengths len = {MLAV_MEM_DEVICE, MAX_BATCH, d_q_indptr, d_kv_lens};  /* pad: q_len 0 */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    s = mlav_plan_update(plan, &len, ws, ws_bytes, stream);
    for (int l = 0; s == MLAV_OK && l < LAYERS; l++) {
        mlav_tensors t = {.memory = MLAV_MEM_DEVICE, .q = dq[l], .kv_cache = dkv[l],
                          .num_pages = NUM_PAGES, .page_table = d_page_table,
                          .tree_mask = d_mask, .out = dout[l], .lse = dlse[l]};
        s = mlav_run(plan, &t, ws, ws_bytes, stream);
    }
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    if (s != MLAV_OK)
        return fail("capturing mlav_plan_update + mlav_run", s, ctx);
    CUDA_OK(cudaGraphInstantiateWithFlags(&exec, graph, 0));

    for (int step = 0; step < STEPS; step++) {
        int32_t q_indptr[MAX_BATCH + 1], kv_lens[MAX_BATCH];    /* padded with q_len 0 */
        int32_t batch = next_step(q_indptr, kv_lens, mask, words, hq, dq, stream);
        if (batch < 0)
            return 1;
        /* write the step's lengths and mask into the graph's buffers, then replay */
        CUDA_OK(cudaMemcpyAsync(d_q_indptr, q_indptr, sizeof q_indptr, cudaMemcpyHostToDevice,
                                stream));
        CUDA_OK(cudaMemcpyAsync(d_kv_lens, kv_lens, sizeof kv_lens, cudaMemcpyHostToDevice,
                                stream));
        CUDA_OK(cudaMemcpyAsync(d_mask, mask, sizeof(uint32_t) * q_indptr[MAX_BATCH] * words,
                                cudaMemcpyHostToDevice, stream));
        CUDA_OK(cudaGraphLaunch(exec, stream));
        int32_t bad;
        if ((s = mlav_plan_step_status(plan, ws, ws_bytes, stream, &bad)) != MLAV_OK)
            return fail("mlav_plan_step_status", s, ctx);             /* after the step */
        if (check_step(&shape, batch, q_indptr, kv_lens, hq, hkv, dout, dlse, page_table,
                       mask) != 0)
            return 1;
    }
    /* [/readme] */
    printf("engine loop on %s, one CUDA graph: %d steps ok\n",
           mlav_backend_name(mlav_plan_backend(plan)), STEPS);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    mlav_plan_free(plan);
    mlav_context_free(ctx);
    cudaFree(ws), cudaFree(d_q_indptr), cudaFree(d_kv_lens), cudaFree(d_page_table);
    cudaFree(d_mask);
    for (int l = 0; l < LAYERS; l++) {
        cudaFree(dq[l]), cudaFree(dkv[l]), cudaFree(dout[l]), cudaFree(dlse[l]);
        free(hq[l]), free(hkv[l]);
    }
    free(page_table), free(mask);
    return 0;
}
