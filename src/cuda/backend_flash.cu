/* The `cuda` backend: plans the split-KV schedule, keeps it on the device, and launches the
 * flash verify and combine kernels. Everything that allocates or synchronizes is in plan.
 * One plan state and one configuration (flash_config) serve both kinds of plan; the launch
 * shape is the plan's option (flash_launch): a plan for one problem makes its update at plan
 * time and keeps that problem's exact launches, a plan for limits (engine steps) gets each
 * step's schedule in the workspace from mlav_plan_update, on the host or on the device, and
 * launches grids sized by the limits. */
#include <stdlib.h>
#include <string.h>

#include "../common/combine_shape.h"
#include "../common/shard.h"
#include "cuda_offload.h"
#include "flash.h"
#include "flash_family.h"
#include "mma.cuh"
#include "staging_ring.h"
#ifdef MLAV_WITH_SM90
#include "sm90/flash_sm90.h"
#endif

namespace {

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Everything the backend launches, decided once per plan from the problem (or the limits) and
 * the device: kernels, their instances, the combine's kind, width and spreading, PDL, and the
 * workspace's partial-state sizes. */
struct flash_config {
    mlav_cuda_device dev;
    int blocks_per_sm;
    mlav_schedule_params sp;
    /* the combine's column blocks and kind (mlav_combine_kind); a plan for limits' are the
     * limits' and size only its reservation: each step's are in the step header */
    int combine_col_blocks;
    int combine_smem;             /* the combine launch's spreading reservation (combine.cu) */
    int pdl;                      /* launch the combine as a programmatic dependent (sm_90+) */
    int all_groups;               /* the split kernel's instance (mlav_flash_all_groups) */
    int combine_kind;
    int kv_fp8;                   /* the cache is FP8 E4M3 (the split kernel's FP8 instances) */
    int combine_grid;             /* plans for limits: the combine launch's blocks */
    int sm90_seesaw;              /* the sm_90a family's seesaw kernel (flash_family.h) */
    int sm90_keys;                /* the sm_90a family's keys kernel: its rows, or 0 */
    int sm90_l2_first;            /* the seesaw's 16-bit KV copies under evict_first
                                   * (flash_family.h) */
    int sm90_early_s;             /* the seesaw's WG0 issues each pair's S_A in the pair before
                                   * (flash_family.h) */
    int sm90_staged;              /* the sm_90a family's FP8 cache staged as F16 before its
                                   * seesaw kernel (plans for one problem: flash_family.h) */
    int combine_step;             /* plans for limits: the step combine's instance
                                   * (MLAV_COMBINE_STEP_DENSE or _ROOMY, flash.h) */
    mlav_flash_family family;     /* the split kernel's family (flash_family.h) */
    mlav_fastdiv page_div;        /* KV row / page_size (the gather's page lookup) */
    size_t part_o_bytes;          /* workspace: the partial outputs */
    size_t part_lse_bytes;        /* then the partial lse */
    size_t part_scale_bytes;      /* then part_scale: 16-bit plans only, 0 for F32 */
};

/* The device, the split kernel's family (the sm_90a one where flash_family.h's rule gives it
 * for the plan's shape, or the limits', and it runs the dtypes), its residency and the
 * schedule's parameters. `max_q_len` picks the legal kernel's instance: the plan's longest
 * draft, or the limits'. */
mlav_status config_device(const mlav_problem_info *p, int32_t max_q_len, int more_waves,
                          flash_config *c)
{
    if (p->Dl != MLAV_FLASH_DL || p->Dr != MLAV_FLASH_DR)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the flash kernel is built for Dl = %d, Dr = %d (got %d, %d); use "
                              "cuda-naive or cpu",
                              MLAV_FLASH_DL, MLAV_FLASH_DR, p->Dl, p->Dr);
    mlav_status s = mlav_cuda_device_query(&c->dev);
    if (s != MLAV_OK)
        return s;
    c->kv_fp8 = p->kv_dtype == MLAV_DTYPE_FP8_E4M3;
    c->family = MLAV_FLASH_FAMILY_LEGAL;
#ifdef MLAV_WITH_SM90
    if (mlav_flash_family_for_plan(c->dev.cc_major, c->dev.cc_minor,
                                   (int64_t)p->max_q_len * p->H, p->total_kv, c->dev.sm_count,
                                   c->kv_fp8, p->scale, p->shard.ranks > 1) ==
            MLAV_FLASH_FAMILY_SM90 &&
        mlav_flash_sm90_supported(p->dtype, p->kv_dtype, &c->dev) == MLAV_OK) {
        s = mlav_flash_sm90_prepare(p->dtype, p->kv_dtype, &c->dev, &c->blocks_per_sm);
        if (s != MLAV_OK)
            return s;
        c->family = MLAV_FLASH_FAMILY_SM90;
        c->sp = mlav_flash_sm90_schedule_params(c->dev.sm_count, c->blocks_per_sm);
    }
#endif
    if (c->family == MLAV_FLASH_FAMILY_LEGAL) {
        s = mlav_flash_prepare(p->dtype, p->kv_dtype, &c->dev, &c->blocks_per_sm);
        if (s != MLAV_OK)
            return s;
        c->sp = mlav_flash_schedule_params(c->dev.sm_count, c->blocks_per_sm);
    }
    c->sp.more_waves = more_waves;
    c->page_div = mlav_fastdiv_make((uint32_t)p->page_size);
    c->pdl = c->dev.cc_major >= 9;
    c->all_groups = mlav_flash_all_groups(max_q_len, p->H);
    return MLAV_OK;
}

/* The combine's shape for items of at most `max_nsplit` splits over `combine_items` row tiles,
 * `working` of whose rows do work, and the workspace for `n_slots` partial states; `step`: 0, or
 * a plan for limits' combine instance (MLAV_COMBINE_STEP_). */
mlav_status config_combine(const mlav_problem_info *p, int max_nsplit, int64_t combine_items,
                           int64_t working, int64_t n_slots, int step, flash_config *c)
{
    c->combine_col_blocks =
        mlav_combine_col_blocks(combine_items * MLAV_FLASH_BLOCK_M, max_nsplit, &c->dev);
    c->combine_kind = mlav_combine_kind(max_nsplit);
    c->combine_smem = 0;
    c->combine_grid = 0;
    /* a plan for limits reserves for its longest steps' kind and column blocks (its steps take
     * theirs within that: mlav_combine_step_shape) */
    if (c->pdl && (step || c->combine_kind != MLAV_COMBINE_ROWS)) {
        const int64_t spread_rows =
            mlav_combine_spread_rows(combine_items, MLAV_FLASH_BLOCK_M, working, step);
        mlav_status s = mlav_combine_spread_smem(spread_rows * c->combine_col_blocks,
                                                 c->combine_kind, step, &c->dev,
                                                 &c->combine_smem);
        if (s != MLAV_OK)
            return s;
    }
    /* partial outputs: fp32 for F32 plans, fp16 with a scale per row and 128 columns otherwise
     * (flash/epilogue.cuh) */
    const size_t rows = (size_t)n_slots * MLAV_FLASH_BLOCK_M;
    const bool f32 = p->dtype == MLAV_DTYPE_F32;
    c->part_o_bytes = align256((f32 ? sizeof(float) : sizeof(uint16_t)) * rows * MLAV_FLASH_DL);
    c->part_lse_bytes = align256(sizeof(float) * rows);
    c->part_scale_bytes =
        f32 ? 0 : align256(sizeof(float) * rows * (MLAV_FLASH_DL / MLAV_FLASH_SCALE_COLS));
    return MLAV_OK;
}

size_t config_part_bytes(const flash_config *c)
{
    return c->part_o_bytes + c->part_lse_bytes + c->part_scale_bytes;
}

/* The plan's rows for bad input the host cannot see (device tensors): the NaN row a page id
 * outside the pool reads, then the row of bad page ids a page-table row index outside the table
 * gives (page_row.cuh). One allocation of bad_rows_bytes(max_pages). */
static size_t nan_row_bytes(void)
{
    return align256(sizeof(uint32_t) * MLAV_FLASH_W);
}
static size_t bad_rows_bytes(int32_t max_pages)
{
    return nan_row_bytes() + align256(sizeof(int32_t) * (size_t)max_pages);
}
static const int32_t *bad_pages_of(const void *bad_rows)
{
    return reinterpret_cast<const int32_t *>(static_cast<const char *>(bad_rows) +
                                             nan_row_bytes());
}

/* What the gather reads for a page id outside the pool, in the cache's dtype, and max_pages
 * page ids of -1 after it, into `d_rows` (bad_rows_bytes). */
mlav_status write_bad_rows(mlav_dtype kv_dtype, int32_t max_pages, void *d_rows)
{
    uint32_t nan_row[MLAV_FLASH_W];
    const uint32_t nan2 =
        kv_dtype == MLAV_DTYPE_FP8_E4M3 ? 0x7f7f7f7fu /* e4m3fn NaN bytes */
        : kv_dtype == MLAV_DTYPE_F16
            ? (uint32_t)mlav::mma_type<__half>::nan_bits * 0x10001u
            : (uint32_t)mlav::mma_type<__nv_bfloat16>::nan_bits *
                  0x10001u; /* BF16; also an F32 NaN (0x7fc07fc0) */
    for (int i = 0; i < MLAV_FLASH_W; i++)
        nan_row[i] = nan2;
    MLAV_CUDA_TRY(cudaMemcpy(d_rows, nan_row, sizeof nan_row, cudaMemcpyHostToDevice));
    MLAV_CUDA_TRY(cudaMemset(static_cast<char *>(d_rows) + nan_row_bytes(), 0xff,
                             sizeof(int32_t) * (size_t)max_pages));
    /* a memset may return early, and the runs' streams need not wait for the legacy one */
    MLAV_CUDA_TRY(cudaStreamSynchronize(0));
    return MLAV_OK;
}

#ifdef MLAV_WITH_SM90
/* A staged cache's pages and table (src/common/staged_pages.h) for the plan's lengths, built on
 * the host and copied to `d_pages` and `d_table`, plan-owned; *sg names them. */
mlav_status write_staging(const mlav_problem_info *p, int32_t n_pages, int32_t max_pages,
                          void *d_pages, void *d_table, mlav_sm90_staging *sg)
{
    const size_t pages_bytes = sizeof(mlav_staged_page) * (size_t)n_pages;
    const size_t table_bytes = sizeof(int32_t) * (size_t)p->B * (size_t)max_pages;
    void *h = malloc(pages_bytes + table_bytes);
    if (!h)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a cuda plan");
    mlav_staged_page *pages = static_cast<mlav_staged_page *>(h);
    int32_t *table = reinterpret_cast<int32_t *>(static_cast<char *>(h) + pages_bytes);
    mlav_staged_fill(p->B, p->kv_lens, max_pages, pages, table);
    cudaError_t e = cudaMemcpy(d_pages, pages, pages_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(d_table, table, table_bytes, cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess)
        return mlav_cuda_error(e, "cudaMemcpy of a staged cache's pages", __FILE__, __LINE__);
    sg->pages = static_cast<const mlav_staged_page *>(d_pages);
    sg->table = static_cast<const int32_t *>(d_table);
    sg->n_pages = n_pages;
    sg->max_pages = max_pages;
    return MLAV_OK;
}
#endif

/* The launch parameters of one run: the configuration, the tensors, the partial states at
 * `part` in the workspace, and the schedule's arrays. */
mlav_flash_params make_params(const mlav_problem_info *p, const flash_config *c,
                              const mlav_tensors *t, void *part, const void *nan_row,
                              const mlav_split_item *items, int32_t n_items,
                              const mlav_combine_item *combine, int32_t n_combine)
{
    mlav_flash_params fp;
    memset(&fp, 0, sizeof fp);
    fp.q = t->q;
    fp.kv = t->kv_cache;
    fp.page_table = t->page_table;
    fp.page_table_rows = t->page_table_rows;
    fp.page_table_num_rows = t->page_table_num_rows;
    fp.tree_mask = t->tree_mask;
    fp.out = t->out;
    fp.lse = t->lse;
    char *ws = static_cast<char *>(part);
    fp.part_o = part;
    fp.part_lse = ws ? reinterpret_cast<float *>(ws + c->part_o_bytes) : NULL;
    fp.part_scale = ws && c->part_scale_bytes
                        ? reinterpret_cast<float *>(ws + c->part_o_bytes + c->part_lse_bytes)
                        : NULL;
    fp.items = items;
    fp.combine = combine;
    fp.n_items = n_items;
    fp.n_combine = n_combine;
    fp.combine_col_blocks = c->combine_col_blocks;
    fp.H = p->H;
    fp.page_size = p->page_size;
    fp.page_div = c->page_div;
    fp.page_elems = (uint32_t)p->page_size * MLAV_FLASH_W; /* page_size <= 2^20: fits */
    fp.page_limit = t->num_pages < ((int64_t)1 << 31) ? (uint32_t)t->num_pages : 1u << 31;
    fp.nan_row = nan_row;
    fp.bad_pages = bad_pages_of(nan_row);
    fp.max_pages = p->max_pages;
    fp.mask_words = p->mask_words;
    fp.num_pages = t->num_pages;
    fp.scale_log2 = p->scale * MLAV_LOG2E;
    fp.pdl = c->pdl;
    /* the FP8 scale: the run's device value if it gave one (the kernel reads and checks it),
     * else the host value dispatch checked */
    fp.kv_scale_ptr = c->kv_fp8 ? t->kv_scale_ptr : NULL;
    fp.kv_scale = c->kv_fp8 ? t->kv_scale : 1.0f;
    fp.shard = p->shard;
    return fp;
}

/* The launch choices of the configuration that no kernel reads. */
mlav_flash_launch_opts launch_opts(const flash_config *c)
{
    mlav_flash_launch_opts lo;
    lo.all_groups = c->all_groups;
    lo.combine_kind = c->combine_kind;
    lo.combine_smem = c->combine_smem;
    lo.kv_fp8 = c->kv_fp8;
    lo.combine_grid = c->combine_grid;
    lo.sm90_seesaw = c->sm90_seesaw;
    lo.sm90_keys = c->sm90_keys;
    lo.sm90_l2_first = c->sm90_l2_first;
    lo.sm90_staged = c->sm90_staged;
    lo.sm90_early_s = c->sm90_early_s;
    return lo;
}

/* ---- the plan: one state, two launch shapes -------------------------------------------------- */

/* Which launches a plan makes. A plan for one problem makes its update at plan time: its
 * schedule is built on the host from its lengths (schedule.c) and kept on the device, and its
 * launches are that schedule's exact grids with the split kernel's plain instances. A plan for
 * limits gets each step's schedule in the workspace (mlav_plan_update) and launches grids sized
 * by the limits, with the STEP instances, whose blocks past the step exit at once. */
enum flash_launch { FLASH_LAUNCH_EXACT, FLASH_LAUNCH_STEP };

struct flash_state {
    flash_launch launch;
    flash_config cfg;
    void *d_nan_row;              /* [W] NaN of the cache's dtype (mlav_flash_params.nan_row),
                                     then the bad page ids (write_bad_rows) */
    /* FLASH_LAUNCH_EXACT: the schedule, and one device allocation for its arrays and the rows
     * above */
    mlav_schedule sched;
    void *d_buf;
    mlav_split_item *d_items;
    mlav_combine_item *d_combine;
#ifdef MLAV_WITH_SM90
    mlav_sm90_staging staging_f16; /* cfg.sm90_staged: its pages and table, in d_buf */
    size_t staged_off;             /* the staged pool's offset in the workspace */
#endif
    /* FLASH_LAUNCH_STEP */
    int32_t H;
    mlav_shard shard;             /* the plan's KV shard: host updates schedule its rows */
    mlav_limits lim;
    unsigned long long owner;     /* the plan's id, stamped into every step header it writes */
    mlav_step_bounds bd;
    size_t region_bytes;          /* the step region at the start of the workspace */
    mlav_fastdiv ka_div;          /* the device scheduler's division by key_align */
    /* host updates: each step region scheduled into a pinned slot of region_bytes and copied
     * to the workspace */
    mlav_staging_ring staging;
    mlav_step_scratch *scratch;   /* the host rule's scratch, used under the ring's lock */
};

void flash_free(void *state)
{
    flash_state *st = static_cast<flash_state *>(state);
    if (!st)
        return;
    mlav_staging_ring_free(&st->staging);
    free(st->scratch);
    if (st->d_buf)
        cudaFree(st->d_buf);
    else if (st->d_nan_row)
        cudaFree(st->d_nan_row);
    mlav_schedule_free(&st->sched);
    free(st);
}

/* A plan for one problem: its update now, into plan-owned memory, and its exact launch shape
 * (FLASH_LAUNCH_EXACT). */
mlav_status exact_plan_into(const mlav_problem_info *p, flash_state *st, size_t *ws)
{
    mlav_status s = config_device(p, p->max_q_len, MLAV_FLASH_MORE_WAVES, &st->cfg);
    if (s != MLAV_OK)
        return s;
    s = mlav_schedule_build(p, &st->cfg.sp, &st->sched);
    if (s != MLAV_OK)
        return s;

    const mlav_schedule *sc = &st->sched;
#ifdef MLAV_WITH_SM90
    st->cfg.sm90_seesaw = mlav_flash_sm90_seesaw_of(sc->items, sc->n_items, st->cfg.kv_fp8,
                                                    p->scale);
    st->cfg.sm90_keys =
        st->cfg.family == MLAV_FLASH_FAMILY_SM90
            ? mlav_flash_sm90_keys_rule((int64_t)p->max_q_len * p->H, st->cfg.kv_fp8, p->scale)
            : 0;
    st->cfg.sm90_l2_first = mlav_flash_sm90_l2_first(p->total_kv, p->W, st->cfg.kv_fp8);
    /* how many row tiles read each KV row, on average: the staging's and the S order's measure */
    const int64_t row_tile_keys = mlav_row_tile_keys(p->B, p->q_indptr, p->kv_lens, p->H);
    st->cfg.sm90_staged = st->cfg.family == MLAV_FLASH_FAMILY_SM90 && st->cfg.sm90_keys == 0 &&
                          mlav_flash_sm90_staged_rule(row_tile_keys, p->total_kv, st->cfg.kv_fp8,
                                                      p->scale, st->cfg.sm90_seesaw);
    st->cfg.sm90_early_s =
        st->cfg.family == MLAV_FLASH_FAMILY_SM90 &&
        mlav_flash_sm90_early_s_rule(row_tile_keys, p->total_kv, p->B, st->cfg.kv_fp8,
                                     st->cfg.sm90_seesaw);
    int32_t stage_pages = 0, stage_max = 0;
    if (st->cfg.sm90_staged && mlav_staged_count(p->B, p->kv_lens, &stage_pages, &stage_max))
        st->cfg.sm90_staged = 0; /* past int32 rows: the unstaged kernel reads the cache */
#endif
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
    s = config_combine(p, max_nsplit, sc->n_combine, working, sc->n_slots, 0, &st->cfg);
    if (s != MLAV_OK)
        return s;
    size_t off_comb = align256(sizeof(mlav_split_item) * (size_t)sc->n_items);
    size_t off_nan = off_comb + align256(sizeof(mlav_combine_item) * (size_t)sc->n_combine);
    size_t total = off_nan + bad_rows_bytes(p->max_pages);
#ifdef MLAV_WITH_SM90
    /* a staged cache's pages and table, after the bad rows */
    const size_t off_stage = total;
    const size_t stage_pages_bytes = align256(sizeof(mlav_staged_page) * (size_t)stage_pages);
    const size_t stage_table_bytes = sizeof(int32_t) * (size_t)p->B * (size_t)stage_max;
    if (st->cfg.sm90_staged)
        total += stage_pages_bytes + align256(stage_table_bytes);
#endif
    MLAV_CUDA_TRY(cudaMalloc(&st->d_buf, total));
    char *base = static_cast<char *>(st->d_buf);
    st->d_items = reinterpret_cast<mlav_split_item *>(base);
    st->d_combine = reinterpret_cast<mlav_combine_item *>(base + off_comb);
    st->d_nan_row = base + off_nan;
    s = write_bad_rows(p->kv_dtype, p->max_pages, st->d_nan_row);
    if (s != MLAV_OK)
        return s;
#ifdef MLAV_WITH_SM90
    if (st->cfg.sm90_staged) {
        s = write_staging(p, stage_pages, stage_max, base + off_stage,
                          base + off_stage + stage_pages_bytes, &st->staging_f16);
        if (s != MLAV_OK)
            return s;
    }
#endif
    if (sc->n_items)
        MLAV_CUDA_TRY(cudaMemcpy(st->d_items, sc->items,
                                 sizeof(mlav_split_item) * (size_t)sc->n_items,
                                 cudaMemcpyHostToDevice));
    if (sc->n_combine)
        MLAV_CUDA_TRY(cudaMemcpy(st->d_combine, sc->combine,
                                 sizeof(mlav_combine_item) * (size_t)sc->n_combine,
                                 cudaMemcpyHostToDevice));
    *ws = sc->n_slots ? config_part_bytes(&st->cfg) : 0;
#ifdef MLAV_WITH_SM90
    /* the staged pool after the partial states, 256-aligned (a TMA map's base: 16) */
    st->staged_off = align256(*ws);
    if (st->cfg.sm90_staged)
        *ws = st->staged_off + mlav_flash_sm90_staged_bytes(stage_pages);
#endif
    return MLAV_OK;
}

mlav_status flash_run_device(const mlav_problem_info *p, const void *state,
                             const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                             cudaStream_t stream)
{
    (void)workspace_bytes; /* dispatch checked it against the plan */
    const flash_state *st = static_cast<const flash_state *>(state);
    const mlav_flash_params fp =
        make_params(p, &st->cfg, t, workspace, st->d_nan_row, st->d_items, st->sched.n_items,
                    st->d_combine, st->sched.n_combine);
    /* kernels run on this plan's device; the caller's current device must be it */
    const mlav_flash_launch_opts lo = launch_opts(&st->cfg);
#ifdef MLAV_WITH_SM90
    if (st->cfg.sm90_staged) {
        mlav_flash_params sfp;
        const mlav_status s = mlav_flash_sm90_stage(
            &fp, &st->staging_f16, static_cast<char *>(workspace) + st->staged_off, &sfp, stream);
        return s != MLAV_OK ? s : mlav_flash_sm90_launch(p->dtype, &sfp, &lo, 0, stream);
    }
    if (st->cfg.family == MLAV_FLASH_FAMILY_SM90)
        return mlav_flash_sm90_launch(p->dtype, &fp, &lo, 0, stream);
#endif
    return mlav_flash_launch(p->dtype, &fp, &lo, 0, stream);
}


/* ---- plans for limits: the step in the workspace --------------------------------------------- */

/* The step region's arrays (schedule_step.h): header, items, combine. */
mlav_split_item *region_items(void *region)
{
    return reinterpret_cast<mlav_split_item *>(static_cast<char *>(region) +
                                               sizeof(mlav_step_header));
}

mlav_combine_item *region_combine(void *region, const mlav_step_bounds *bd)
{
    return reinterpret_cast<mlav_combine_item *>(region_items(region) + bd->max_items);
}

/* A plan for limits: the launch shape fixed by the limits (FLASH_LAUNCH_STEP), the workspace's
 * step region, and the staging of host updates. */
mlav_status limits_plan_into(const mlav_problem_info *shape, const mlav_limits *lim,
                             uint64_t owner, flash_state *st, size_t *ws)
{
    st->lim = *lim;
    st->owner = owner;
    st->H = shape->H;
    st->shard = shape->shard;
    mlav_status s = config_device(shape, lim->max_q_len, MLAV_FLASH_MORE_WAVES, &st->cfg);
    if (s != MLAV_OK)
        return s;
    st->cfg.sp = mlav_step_params(shape->H, lim, st->cfg.sp);
    st->bd = mlav_step_bounds_of(shape->H, lim, &st->cfg.sp);
#ifdef MLAV_WITH_SM90
    /* the sm_90a kernel's rule on the limits (flash_family.h) */
    st->cfg.sm90_seesaw = mlav_flash_sm90_seesaw_limits(
        mlav_step_ceil_div((int64_t)lim->max_tokens * shape->H, MLAV_FLASH_BLOCK_M),
        lim->max_kv_len, st->bd.max_tiles, st->cfg.sp.target_blocks, st->bd.max_items,
        st->cfg.kv_fp8, shape->scale);
    st->cfg.sm90_keys = st->cfg.family == MLAV_FLASH_FAMILY_SM90
                            ? mlav_flash_sm90_keys_rule((int64_t)lim->max_q_len * shape->H,
                                                        st->cfg.kv_fp8, shape->scale)
                            : 0;
    st->cfg.sm90_l2_first = mlav_flash_sm90_l2_first((int64_t)lim->max_batch * lim->max_kv_len,
                                                     shape->W, st->cfg.kv_fp8);
    st->cfg.sm90_early_s =
        st->cfg.family == MLAV_FLASH_FAMILY_SM90 &&
        mlav_flash_sm90_early_s_rule(
            mlav_step_ceil_div((int64_t)lim->max_q_len * shape->H, MLAV_FLASH_BLOCK_M) *
                lim->max_kv_len,
            lim->max_kv_len, 1, st->cfg.kv_fp8, st->cfg.sm90_seesaw);
#endif
    /* the most splits a request within the limits can take */
    int64_t most = mlav_step_ceil_div(lim->max_kv_len, st->cfg.sp.min_chunk);
    if (most > st->cfg.sp.max_splits)
        most = st->cfg.sp.max_splits;
    const int64_t working = (int64_t)lim->max_tokens * shape->H;
    const int64_t max_rows = (int64_t)st->bd.max_combine * MLAV_FLASH_BLOCK_M;
    st->cfg.combine_step = mlav_combine_step_instance(max_rows, &st->cfg.dev);
    s = config_combine(shape, (int)most, st->bd.max_combine, working, st->bd.max_slots,
                       st->cfg.combine_step, &st->cfg);
    if (s != MLAV_OK)
        return s;
    mlav_combine_step_shape(&st->cfg.dev, st->cfg.combine_step, st->cfg.combine_smem, max_rows,
                            st->bd.combine_wave, &st->cfg.combine_grid);
    st->ka_div = mlav_fastdiv_make((uint32_t)st->cfg.sp.key_align);
    s = mlav_step_schedule_prepare();
    if (s != MLAV_OK)
        return s;
    st->region_bytes = align256(sizeof(mlav_step_header) +
                                sizeof(mlav_split_item) * (size_t)st->bd.max_items +
                                sizeof(mlav_combine_item) * (size_t)st->bd.max_combine);
    MLAV_CUDA_TRY(cudaMalloc(&st->d_nan_row, bad_rows_bytes(shape->max_pages)));
    s = write_bad_rows(shape->kv_dtype, shape->max_pages, st->d_nan_row);
    if (s != MLAV_OK)
        return s;
    /* the slots' tails past the combine items are never written: the ring zeroes them, as the
     * device scheduler writes them, so both updates copy the same region */
    s = mlav_staging_ring_make(&st->staging, st->region_bytes, 0);
    if (s != MLAV_OK)
        return s;
    st->scratch = static_cast<mlav_step_scratch *>(malloc(mlav_step_scratch_bytes()));
    if (!st->scratch)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a cuda plan");
    *ws = st->region_bytes + config_part_bytes(&st->cfg);
    return MLAV_OK;
}

/* The device check of mlav_cuda_run_mapped, for the update (which maps nothing). */
mlav_status step_check_device(const flash_state *st)
{
    int dev = -1;
    MLAV_CUDA_TRY(cudaGetDevice(&dev));
    return mlav_cuda_check_plan_device("cuda", st->cfg.dev.device, dev);
}

/* Host lengths (checked by dispatch): schedule into a staging slot, copy it on the stream. */
mlav_status step_update_host(flash_state *st, const mlav_lengths *len, void *ws,
                             cudaStream_t stream)
{
    mlav_staging_slot slot;
    mlav_status s = mlav_staging_ring_acquire(&st->staging, &slot);
    if (s != MLAV_OK)
        return s;
    mlav_step_header *hdr = static_cast<mlav_step_header *>(slot.host);
    mlav_step_schedule_build(len->batch, len->q_indptr, len->kv_lens, st->shard, st->H, &st->lim,
                             &st->cfg.sp, &st->bd, hdr, region_items(slot.host),
                             region_combine(slot.host, &st->bd), st->scratch);
    hdr->owner = st->owner;
    hdr->limits = st->lim;
    const cudaError_t e =
        cudaMemcpyAsync(ws, slot.host, st->region_bytes, cudaMemcpyHostToDevice, stream);
    if (e != cudaSuccess)
        s = mlav_cuda_error(e, "cudaMemcpyAsync of a host update", __FILE__, __LINE__);
    return mlav_staging_ring_release(&st->staging, &slot, stream, s);
}

mlav_status step_update(const mlav_problem_info *shape, const void *state,
                        const mlav_lengths *len, void *ws, size_t ws_bytes, void *stream_)
{
    (void)ws_bytes;
    flash_state *st = const_cast<flash_state *>(static_cast<const flash_state *>(state));
    cudaStream_t stream = static_cast<cudaStream_t>(stream_);
    mlav_status s = step_check_device(st);
    if (s != MLAV_OK)
        return s;
    if (len->memory == MLAV_MEM_HOST) {
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        MLAV_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
        if (cap != cudaStreamCaptureStatusNone)
            return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                                  "an update with host lengths cannot be captured (its schedule "
                                  "is built at the call); pass device lengths, or update before "
                                  "each replay");
        return step_update_host(st, len, ws, stream);
    }
    mlav_step_sched_params sp;
    sp.q_indptr = len->q_indptr;
    sp.kv_lens = len->kv_lens;
    sp.batch = len->batch;
    sp.H = shape->H;
    sp.lim = st->lim;
    sp.sp = st->cfg.sp;
    sp.bd = st->bd;
    sp.hdr = static_cast<mlav_step_header *>(ws);
    sp.items = region_items(ws);
    sp.combine = region_combine(ws, &st->bd);
    sp.ka_div = st->ka_div;
    sp.region_bytes = st->region_bytes;
    sp.owner = st->owner;
    sp.shard = st->shard;
    return mlav_step_schedule_launch(&sp, stream);
}

mlav_status step_run_device(const mlav_problem_info *shape, const void *state,
                            const mlav_tensors *t, void *ws, size_t ws_bytes, cudaStream_t stream)
{
    (void)ws_bytes;
    const flash_state *st = static_cast<const flash_state *>(state);
    char *part = static_cast<char *>(ws) + st->region_bytes;
    mlav_flash_params fp =
        make_params(shape, &st->cfg, t, part, st->d_nan_row, region_items(ws), st->bd.max_items,
                    region_combine(ws, &st->bd), st->bd.max_combine);
    /* a step of at most half as many blocks as SMs runs them one per TPC, on the grid's even
     * blocks (flash/features.cuh, step_item_index), where the grid has a block per SM and its
     * blocks fill both warp groups: only there was one per TPC faster
     * (docs/PERFORMANCE.md#engine-steps) */
    fp.step_spread = st->cfg.all_groups && st->bd.max_items >= st->cfg.dev.sm_count
                         ? st->cfg.dev.sm_count / 2 + 1
                         : 0;
    /* whatever the workspace holds, the kernels run only this plan's step, within its limits */
    fp.step_owner = st->owner;
    fp.step_lim = st->lim;
    fp.step_max_slots = st->bd.max_slots;
    const mlav_flash_launch_opts lo = launch_opts(&st->cfg);
#ifdef MLAV_WITH_SM90
    if (st->cfg.family == MLAV_FLASH_FAMILY_SM90)
        return mlav_flash_sm90_launch(shape->dtype, &fp, &lo, st->cfg.combine_step, stream);
#endif
    return mlav_flash_launch(shape->dtype, &fp, &lo, st->cfg.combine_step, stream);
}

/* ---- the table's functions ------------------------------------------------------------------ */

mlav_status flash_plan(const mlav_problem_info *p, const mlav_limits *lim, uint64_t owner,
                       void **state, size_t *ws)
{
    *state = NULL;
    *ws = 0;
    flash_state *st = static_cast<flash_state *>(calloc(1, sizeof(flash_state)));
    if (!st)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a cuda plan");
    st->launch = mlav_info_has_lengths(p) ? FLASH_LAUNCH_EXACT : FLASH_LAUNCH_STEP;
    mlav_status s = st->launch == FLASH_LAUNCH_EXACT ? exact_plan_into(p, st, ws)
                                                     : limits_plan_into(p, lim, owner, st, ws);
    if (s != MLAV_OK) {
        flash_free(st);
        return s;
    }
    *state = st;
    return MLAV_OK;
}

mlav_status flash_update(const mlav_problem_info *shape, const void *state,
                         const mlav_lengths *len, void *ws, size_t ws_bytes, void *stream)
{
    if (static_cast<const flash_state *>(state)->launch != FLASH_LAUNCH_STEP)
        return mlav_set_error(MLAV_ERR_INTERNAL, "a cuda update of a plan for one problem");
    return step_update(shape, state, len, ws, ws_bytes, stream);
}

mlav_status flash_run(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                      void *ws, size_t ws_bytes, void *stream)
{
    const flash_state *st = static_cast<const flash_state *>(state);
    return mlav_cuda_run_mapped(p, state, t, ws, ws_bytes, stream,
                                st->launch == FLASH_LAUNCH_EXACT ? flash_run_device
                                                                 : step_run_device,
                                st->cfg.dev.device, "cuda");
}

} // namespace

extern "C" const mlav_backend_ops mlav_backend_cuda_ops = {
    "cuda",         MLAV_BACKEND_CUDA, MLAV_MEM_DEVICE,           mlav_cuda_available,
    flash_plan,     flash_update,      flash_run,                 flash_free,
    mlav_cuda_workspace_alloc,         mlav_cuda_workspace_free,  mlav_cuda_step_read,
};
