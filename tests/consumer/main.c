/* A program outside the project that uses an installed mlaverify: checks the header matches
 * the library and that a tiny verify gives the exactly known answer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <mlaverify.h>

enum { H = 2, DL = 512, DR = 64, W = DL + DR, PREFIX = 3, QLEN = 2, KV = PREFIX + QLEN };

/* Run one backend; with q = 0 every score is 0, so token i (seeing PREFIX + i + 1 rows under the
 * causal chain) must get the mean of those rows and lse = log(count): exact, no oracle needed. */
static int run_backend(mlav_backend b)
{
    static float q[QLEN * H * W], kv[KV * W], out[QLEN * H * DL], lse[QLEN * H];
    int32_t page_table[KV], q_indptr[2] = {0, QLEN}, kv_lens[1] = {KV};
    for (int j = 0; j < KV; j++) {
        page_table[j] = KV - 1 - j; /* reversed pages: the lookup must go through the table */
        for (int d = 0; d < W; d++)
            kv[(KV - 1 - j) * W + d] = (float)(j + 1) + (float)d / 1024.0f;
    }
    mlav_problem p = {.num_heads = H, .d_latent = DL, .d_rope = DR, .softmax_scale = 0.0625f,
                      .dtype = MLAV_DTYPE_F32, .page_size = 1, .batch = 1,
                      .q_indptr = q_indptr, .kv_lens = kv_lens, .max_pages = KV};
    mlav_tensors t = {.memory = MLAV_MEM_HOST, .q = q, .kv_cache = kv, .num_pages = KV,
                      .page_table = page_table, .tree_mask = NULL, .out = out, .lse = lse};
    mlav_context *ctx = NULL;
    mlav_status s = mlav_context_create(&ctx, b);
    if (s == MLAV_OK)
        s = mlav_verify(ctx, &p, &t);
    if (s != MLAV_OK) {
        printf("%s: %s: %s\n", mlav_backend_name(b), mlav_status_string(s), mlav_last_error(ctx));
        mlav_context_free(ctx);
        return s == MLAV_ERR_UNSUPPORTED ? 2 : 1;
    }
    mlav_context_free(ctx);
    double worst = 0.0;
    for (int i = 0; i < QLEN; i++) {
        int seen = PREFIX + i + 1;
        for (int h = 0; h < H; h++) {
            for (int d = 0; d < DL; d++) {
                double want = 0.0;
                for (int j = 0; j < seen; j++)
                    want += (double)(j + 1) + (double)d / 1024.0;
                want /= seen;
                worst = fmax(worst, fabs(out[(i * H + h) * DL + d] - want));
            }
            worst = fmax(worst, fabs(lse[i * H + h] - log((double)seen)));
        }
    }
    printf("%s: max error %.3g\n", mlav_backend_name(b), worst);
    return worst <= 1e-4 ? 0 : 1;
}

int main(void)
{
    if (mlav_version_number() != MLAV_VERSION_NUMBER) {
        printf("header %d but library %u\n", MLAV_VERSION_NUMBER, mlav_version_number());
        return 1;
    }
    printf("mlaverify %s\n", mlav_version_string());
    if (run_backend(MLAV_BACKEND_REFERENCE) != 0)
        return 1;
    /* the fast CPU backend must agree once it exists; UNSUPPORTED is tolerated until then */
    int rc = run_backend(MLAV_BACKEND_CPU);
    return rc == 1 ? 1 : 0;
}
