/* The `cuda` backend: plans the split-KV schedule, keeps it on the device, and launches the
 * flash verify and combine kernels. Everything that allocates or synchronizes is in plan. */
#include <stdlib.h>
#include <string.h>

#include "../common/combine_shape.h"
#include "flash.h"
#include "mma.cuh"

namespace {

struct flash_state {
    mlav_cuda_device dev;
    int blocks_per_sm;
    int combine_col_blocks;
    int combine_smem;             /* the combine launch's spreading reservation (combine.cu) */
    int pdl;                      /* launch the combine as a programmatic dependent (sm_90+) */
    int all_groups;               /* the split kernel's instance (mlav_flash_all_groups) */
    int combine_kind;             /* which combine kernel (mlav_combine_kind) */
    mlav_schedule sched;
    void *d_buf;                  /* one device allocation for the arrays below */
    mlav_split_item *d_items;
    mlav_combine_item *d_combine;
    void *d_nan_row;              /* [W] NaN of the plan's dtype (mlav_flash_params.nan_row) */
    mlav_fastdiv page_div;        /* KV row / page_size (the gather's page lookup) */
    size_t part_o_bytes;          /* workspace, first: the partial outputs */
    size_t part_lse_bytes;        /* then the partial lse */
    size_t part_scale_bytes;      /* then part_scale: 16-bit plans only, 0 for F32 */
};

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

void flash_free(void *state)
{
    flash_state *st = static_cast<flash_state *>(state);
    if (!st)
        return;
    if (st->d_buf)
        cudaFree(st->d_buf);
    mlav_schedule_free(&st->sched);
    free(st);
}

mlav_status flash_plan_into(const mlav_problem_info *p, flash_state *st, size_t *ws)
{
    if (p->Dl != MLAV_FLASH_DL || p->Dr != MLAV_FLASH_DR)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the flash kernel is built for Dl = %d, Dr = %d (got %d, %d); use "
                              "cuda-naive or cpu",
                              MLAV_FLASH_DL, MLAV_FLASH_DR, p->Dl, p->Dr);
    mlav_status s = mlav_cuda_device_query(&st->dev);
    if (s != MLAV_OK)
        return s;
    s = mlav_flash_prepare(p->dtype, &st->dev, &st->blocks_per_sm);
    if (s != MLAV_OK)
        return s;

    const mlav_schedule_params sp =
        mlav_flash_schedule_params(st->dev.sm_count, st->blocks_per_sm);
    s = mlav_schedule_build(p, &sp, &st->sched);
    if (s != MLAV_OK)
        return s;

    const mlav_schedule *sc = &st->sched;
    st->page_div = mlav_fastdiv_make((uint32_t)p->page_size);
    /* the combine's items: their most splits, and their rows that do work (a row tile's rows
     * past its request return at once) */
    int max_nsplit = 0;
    int64_t working = 0;
    for (int32_t i = 0; i < sc->n_combine; i++) {
        const mlav_combine_item *c = &sc->combine[i];
        const int32_t left = c->rows - c->mtile * MLAV_FLASH_BLOCK_M;
        max_nsplit = c->nsplit > max_nsplit ? c->nsplit : max_nsplit;
        working += left < MLAV_FLASH_BLOCK_M ? left : MLAV_FLASH_BLOCK_M;
    }
    st->combine_col_blocks =
        mlav_combine_col_blocks((int64_t)sc->n_combine * MLAV_FLASH_BLOCK_M, max_nsplit, &st->dev);
    st->pdl = st->dev.cc_major >= 9;
    st->all_groups = mlav_flash_all_groups(p->max_q_len, p->H);
    st->combine_kind = mlav_combine_kind(max_nsplit);
    if (st->pdl && st->combine_kind != MLAV_COMBINE_ROWS) {
        s = mlav_combine_spread_smem(working * st->combine_col_blocks, st->combine_kind, &st->dev,
                                     &st->combine_smem);
        if (s != MLAV_OK)
            return s;
    }
    size_t off_comb = align256(sizeof(mlav_split_item) * (size_t)sc->n_items);
    size_t off_nan = off_comb + align256(sizeof(mlav_combine_item) * (size_t)sc->n_combine);
    size_t total = off_nan + align256(sizeof(uint32_t) * MLAV_FLASH_W);
    MLAV_CUDA_TRY(cudaMalloc(&st->d_buf, total));
    char *base = static_cast<char *>(st->d_buf);
    st->d_items = reinterpret_cast<mlav_split_item *>(base);
    st->d_combine = reinterpret_cast<mlav_combine_item *>(base + off_comb);
    st->d_nan_row = base + off_nan;
    {
        /* what the gather reads for a page id outside the pool, in the plan's dtype */
        uint32_t nan_row[MLAV_FLASH_W];
        const uint32_t nan2 =
            p->dtype == MLAV_DTYPE_F16 ? (uint32_t)mlav::mma_type<__half>::nan_bits * 0x10001u
                                       : (uint32_t)mlav::mma_type<__nv_bfloat16>::nan_bits *
                                             0x10001u; /* BF16; also an F32 NaN (0x7fc07fc0) */
        for (int i = 0; i < MLAV_FLASH_W; i++)
            nan_row[i] = nan2;
        MLAV_CUDA_TRY(cudaMemcpy(st->d_nan_row, nan_row, sizeof nan_row, cudaMemcpyHostToDevice));
    }
    if (sc->n_items)
        MLAV_CUDA_TRY(cudaMemcpy(st->d_items, sc->items,
                                 sizeof(mlav_split_item) * (size_t)sc->n_items,
                                 cudaMemcpyHostToDevice));
    if (sc->n_combine)
        MLAV_CUDA_TRY(cudaMemcpy(st->d_combine, sc->combine,
                                 sizeof(mlav_combine_item) * (size_t)sc->n_combine,
                                 cudaMemcpyHostToDevice));
    /* partial outputs: fp32 for F32 plans, fp16 with a scale per row and 128 columns otherwise
     * (verify_flash.cu's epilogue) */
    const size_t rows = (size_t)sc->n_slots * MLAV_FLASH_BLOCK_M;
    const bool f32 = p->dtype == MLAV_DTYPE_F32;
    st->part_o_bytes = align256((f32 ? sizeof(float) : sizeof(uint16_t)) * rows * MLAV_FLASH_DL);
    st->part_lse_bytes = align256(sizeof(float) * rows);
    st->part_scale_bytes =
        f32 ? 0 : align256(sizeof(float) * rows * (MLAV_FLASH_DL / MLAV_FLASH_SCALE_COLS));
    *ws = sc->n_slots ? st->part_o_bytes + st->part_lse_bytes + st->part_scale_bytes : 0;
    return MLAV_OK;
}

mlav_status flash_plan(const mlav_problem_info *p, void **state, size_t *ws)
{
    *state = NULL;
    *ws = 0;
    flash_state *st = static_cast<flash_state *>(calloc(1, sizeof(flash_state)));
    if (!st)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a cuda plan");
    mlav_status s = flash_plan_into(p, st, ws);
    if (s != MLAV_OK) {
        flash_free(st);
        return s;
    }
    *state = st;
    return MLAV_OK;
}

mlav_status flash_run_device(const mlav_problem_info *p, const void *state,
                             const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                             cudaStream_t stream)
{
    (void)workspace_bytes; /* dispatch checked it against the plan */
    const flash_state *st = static_cast<const flash_state *>(state);
    mlav_flash_params fp;
    memset(&fp, 0, sizeof fp);
    fp.q = t->q;
    fp.kv = t->kv_cache;
    fp.page_table = t->page_table;
    fp.tree_mask = t->tree_mask;
    fp.out = t->out;
    fp.lse = t->lse;
    char *ws = static_cast<char *>(workspace);
    fp.part_o = workspace;
    fp.part_lse = ws ? reinterpret_cast<float *>(ws + st->part_o_bytes) : NULL;
    fp.part_scale = ws && st->part_scale_bytes
                        ? reinterpret_cast<float *>(ws + st->part_o_bytes + st->part_lse_bytes)
                        : NULL;
    fp.items = st->d_items;
    fp.combine = st->d_combine;
    fp.n_items = st->sched.n_items;
    fp.n_combine = st->sched.n_combine;
    fp.combine_col_blocks = st->combine_col_blocks;
    fp.combine_smem = st->combine_smem;
    fp.H = p->H;
    fp.page_size = p->page_size;
    fp.page_div = st->page_div;
    fp.page_elems = (uint32_t)p->page_size * MLAV_FLASH_W; /* page_size <= 2^20: fits */
    fp.page_limit = t->num_pages < ((int64_t)1 << 31) ? (uint32_t)t->num_pages : 1u << 31;
    fp.nan_row = st->d_nan_row;
    fp.max_pages = p->max_pages;
    fp.mask_words = p->mask_words;
    fp.num_pages = t->num_pages;
    fp.scale_log2 = p->scale * MLAV_LOG2E;
    fp.pdl = st->pdl;
    fp.all_groups = st->all_groups;
    fp.combine_kind = st->combine_kind;
    /* kernels run on this plan's device; the caller's current device must be it */
    return mlav_flash_launch(p->dtype, &fp, stream);
}

mlav_status flash_run(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                      void *workspace, size_t workspace_bytes, void *stream)
{
    return mlav_cuda_run_mapped(p, state, t, workspace, workspace_bytes, stream, flash_run_device,
                                static_cast<const flash_state *>(state)->dev.device, "cuda");
}

} // namespace

extern "C" const mlav_backend_ops mlav_backend_cuda_ops = {
    "cuda", MLAV_BACKEND_CUDA, MLAV_MEM_DEVICE, mlav_cuda_available, flash_plan, flash_run,
    flash_free, mlav_cuda_workspace_alloc, mlav_cuda_workspace_free,
};
