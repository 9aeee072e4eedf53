/* The Hopper (sm_90a) split kernel against the fp64 oracle, beside the legal split kernel on the
 * same launch parameters: random problems (H in {8, 16, 64, 128}, q_len 1..16, chains and trees,
 * prefixes up to 32k, page_size 1 and 64, BF16 and F16 q over a cache of their dtype or FP8
 * E4M3 with its scale as a host value or a device pointer, NaN-poisoned unused pages), whose
 * schedules hold split items (a partial state merged by the combine) and unsplit ones (out and
 * lse written by the split kernel); and the producer's TMA tiles and their refusals (pages of
 * 64, 128 and 256 rows: test_sm90_tma_tiles). Every case runs the legal kernel, the sm_90a
 * producer kernel and the sm_90a seesaw kernel (its TMA tiles, its gathered ones and an FP8
 * cache's raw ones) on one schedule, and over an FP8 cache also the seesaw kernel on the cache
 * staged as F16 (every plan for one problem) and the keys kernel (requests of at most 16 rows).
 * Both families run through mlav_flash_params built here the way the cuda backend builds them
 * (src/cuda/backend_flash.cu), with the schedule of mlav_schedule_build, and each result is held
 * to the tolerances of the other GPU tests (tu_out_tol, tu_lse_tol). Skips (77) without a cc 9.0
 * device. MLAV_TEST_SEED fixes the seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
extern "C" {
#include <cmocka.h>
}

#include "../common/combine_shape.h"
#include "flash_sm90.h"
extern "C" { /* a C header without C++ guards */
#include "../dispatch/validate.h"
}
#include "mlaverify_internal.h"
extern "C" {
#include "test_util.h"
}

namespace {

int g_have_device = 0;

void *dalloc(size_t n)
{
    void *d = NULL;
    TU_CK(cudaMalloc(&d, n ? n : 16));
    return d;
}

void *dcopy(const void *h, size_t n)
{
    void *d = dalloc(n);
    if (n)
        TU_CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* Wait for the device, at most `seconds`: a kernel that deadlocks (an mbarrier phase never
 * completed) ends the program with a sentence rather than holding the suite until ctest's
 * timeout; exiting tears the context, and the kernel, down. */
void sync_or_exit(const char *what, double seconds)
{
    const cudaStream_t legacy = 0;
    cudaEvent_t ev;
    TU_CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    TU_CK(cudaEventRecord(ev, legacy));
    for (long spins = 0; cudaEventQuery(ev) == cudaErrorNotReady; spins++) {
        if (spins * 1e-3 > seconds) {
            fprintf(stderr, "%s: the device did not finish in %.0f s (a deadlocked kernel?)\n",
                    what, seconds);
            fflush(stdout);
            exit(1);
        }
        usleep(1000);
    }
    TU_CK(cudaEventDestroy(ev));
    TU_CK(cudaGetLastError());
}

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* How a run reaches the kernels, as flags: the page table's request b at row b (ROWS_NONE), or
 * at row B + 1 - b of a shared table of B + 2 rows through page_table_rows (ROWS_SHARED, the
 * ROWS instances); and the launch of a plan for one problem, or (STEP_LAUNCH) the step launch of
 * a plan for limits on the same schedule, as the device scheduler would lay it out: a step
 * header before the items (owner, counts, the combine's kind and column blocks), limits that
 * hold the problem, and grids past the step's items and combine blocks, whose extra blocks
 * must run nothing (the STEP instances and the step combine). An FP8 cache's scale: the host
 * value (mlav_flash_params.kv_scale), or (SCALE_DEVICE) the same value through kv_scale_ptr
 * with the host value 0, or (SCALE_NAN) a NaN through kv_scale_ptr. */
enum run_flags { ROWS_NONE = 0, ROWS_SHARED = 1, STEP_LAUNCH = 2, SCALE_DEVICE = 4, SCALE_NAN = 8 };
typedef int rows_mode;

/* Which kernel run_family launches: the legal family's, or the sm_90a family's producer kernel,
 * its seesaw kernel (mlav_flash_launch_opts.sm90_seesaw; over a 16-bit cache also with its
 * copies under the L2 evict_first policy: sm90_l2_first, the instances a plan of at most
 * MLAV_SM90_L2_FIRST_BYTES of KV takes; and with WG0 issuing each pair's S_A in the pair before,
 * under either policy: sm90_early_s), its keys kernel (sm90_keys: an FP8 cache, requests of
 * at most 16 rows) or its seesaw kernel over an FP8 cache staged as F16 first (sm90_staged:
 * mlav_flash_sm90_stage into a NaN-poisoned pool, a plan for one problem). */
enum run_kind {
    KIND_LEGAL,
    KIND_SM90,
    KIND_SEESAW,
    KIND_SEESAW_L2,
    KIND_SEESAW_EARLY,
    KIND_SEESAW_EARLY_L2,
    KIND_KEYS,
    KIND_STAGED
};

/* Run one kernel (run_kind) on problem `p` with schedule `sch` and compare. */
void run_family(tu_problem *p, const mlav_problem_info *info, const mlav_schedule *sch,
                const mlav_cuda_device *dev, int kind, const char *name, rows_mode rows)
{
    const int sm90 = kind != KIND_LEGAL;
    const char *label = kind == KIND_KEYS     ? "keys"
                        : kind == KIND_SEESAW ? "ss"
                        : kind == KIND_SEESAW_L2 ? "ss-l2"
                        : kind == KIND_SEESAW_EARLY ? "ss-early"
                        : kind == KIND_SEESAW_EARLY_L2 ? "ss-early-l2"
                        : kind == KIND_STAGED ? "stg"
                        : sm90                ? "sm90"
                                              : "legal";
    const size_t esz = 2;
    const int W = MLAV_FLASH_W;
    const int fp8 = p->kv_dtype == MLAV_DTYPE_FP8_E4M3;
    void *dq = dcopy(p->q, p->q_elems * esz);
    void *dkv = dcopy(p->kv, p->kv_elems * p->kv_esz);
    const size_t mp = (size_t)info->max_pages;
    int32_t *dpt = NULL, *drows = NULL;
    if (!(rows & ROWS_SHARED)) {
        dpt = (int32_t *)dcopy(p->page_table, sizeof(int32_t) * (size_t)info->B * mp);
    } else {
        /* rows 0 and 1 of the shared table hold bad ids (never selected) */
        const int nr = info->B + 2;
        int32_t *shared = (int32_t *)tu_xcalloc((size_t)nr * mp, sizeof(int32_t));
        int32_t *idx = (int32_t *)tu_xcalloc((size_t)info->B, sizeof(int32_t));
        for (size_t k = 0; k < 2 * mp; k++)
            shared[k] = -7;
        for (int b = 0; b < info->B; b++) {
            idx[b] = info->B + 1 - b;
            memcpy(shared + (size_t)idx[b] * mp, p->page_table + (size_t)b * mp,
                   mp * sizeof(int32_t));
        }
        dpt = (int32_t *)dcopy(shared, sizeof(int32_t) * (size_t)nr * mp);
        drows = (int32_t *)dcopy(idx, sizeof(int32_t) * (size_t)info->B);
        free(shared);
        free(idx);
    }
    uint32_t *dmask = p->tree_mask ? (uint32_t *)dcopy(p->tree_mask, sizeof(uint32_t) *
                                                                         (size_t)info->T *
                                                                         info->mask_words)
                                   : NULL;
    void *dout = dalloc(p->out_elems * esz);
    float *dlse = (float *)dalloc(p->lse_elems * sizeof(float));
    TU_CK(cudaMemset(dout, 0xff, p->out_elems * esz));
    TU_CK(cudaMemset(dlse, 0xff, p->lse_elems * sizeof(float)));
    /* the NaN row and the row of bad page ids */
    uint16_t nan_row[MLAV_FLASH_W];
    for (int i = 0; i < W; i++) /* FP8: its first W bytes, e4m3fn NaN */
        nan_row[i] = fp8 ? 0x7f7f : p->c.dtype == MLAV_DTYPE_F16 ? 0x7e00 : 0x7fc0;
    void *dnan = dcopy(nan_row, sizeof nan_row);
    int32_t *dbad = (int32_t *)dalloc(sizeof(int32_t) * (size_t)info->max_pages);
    TU_CK(cudaMemset(dbad, 0xff, sizeof(int32_t) * (size_t)info->max_pages));
    /* the partial states, NaN-poisoned: a combine that read a slot no split wrote fails */
    const size_t prow = (size_t)(sch->n_slots > 0 ? sch->n_slots : 1) * MLAV_FLASH_BLOCK_M;
    const size_t po = align256(2 * prow * MLAV_FLASH_DL), pl = align256(4 * prow),
                 ps = align256(4 * prow * (MLAV_FLASH_DL / MLAV_FLASH_SCALE_COLS));
    char *ws = (char *)dalloc(po + pl + ps);
    TU_CK(cudaMemset(ws, 0xff, po + pl + ps));
    int max_nsplit = 1;
    for (int i = 0; i < sch->n_combine; i++)
        max_nsplit = sch->combine[i].nsplit > max_nsplit ? sch->combine[i].nsplit : max_nsplit;
    const int step = (rows & STEP_LAUNCH) != 0;
    const int combine_kind = mlav_combine_kind(max_nsplit);
    const int col_blocks =
        mlav_combine_col_blocks((int64_t)sch->n_combine * MLAV_FLASH_BLOCK_M, max_nsplit, dev);
    const unsigned long long owner = 0x5eed90a15eed90a1ull;
    /* the items (after a step header with STEP_LAUNCH) and the combine items */
    const size_t hdr = step ? sizeof(mlav_step_header) : 0;
    const size_t items_bytes = sizeof(mlav_split_item) * (size_t)sch->n_items;
    unsigned char *hitems = (unsigned char *)tu_xcalloc(hdr + items_bytes + 16, 1);
    if (step) {
        mlav_step_header h;
        memset(&h, 0, sizeof h);
        h.bad = INT32_MAX;
        h.batch = info->B;
        h.n_items = sch->n_items;
        h.n_combine = sch->n_combine;
        h.n_slots = sch->n_slots;
        h.chunk_keys = sch->chunk_keys;
        h.combine_kind = combine_kind;
        h.combine_col_blocks = col_blocks;
        h.owner = owner;
        h.limits.max_batch = info->B;
        h.limits.max_tokens = info->T;
        h.limits.max_q_len = info->max_q_len;
        h.limits.max_kv_len = (int32_t)info->max_kv_len;
        memcpy(hitems, &h, sizeof h);
    }
    memcpy(hitems + hdr, sch->items, items_bytes);
    void *ditems_alloc = dcopy(hitems, hdr + items_bytes + 16);
    free(hitems);
    void *ditems = (unsigned char *)ditems_alloc + hdr;
    void *dcomb = dcopy(sch->combine, sizeof(mlav_combine_item) * (size_t)sch->n_combine);

    mlav_flash_params fp;
    memset(&fp, 0, sizeof fp);
    fp.q = dq;
    fp.kv = dkv;
    fp.page_table = dpt;
    fp.page_table_rows = drows;
    fp.page_table_num_rows = info->B + 2;
    fp.tree_mask = dmask;
    fp.out = dout;
    fp.lse = dlse;
    fp.part_o = ws;
    fp.part_lse = (float *)(ws + po);
    fp.part_scale = (float *)(ws + po + pl);
    fp.items = (const mlav_split_item *)ditems;
    fp.combine = (const mlav_combine_item *)dcomb;
    fp.n_items = sch->n_items + (step ? 5 : 0); /* a step's grid runs past its items */
    fp.n_combine = sch->n_combine;
    fp.H = info->H;
    fp.page_size = info->page_size;
    fp.max_pages = info->max_pages;
    fp.mask_words = info->mask_words;
    fp.page_div = mlav_fastdiv_make((uint32_t)info->page_size);
    fp.page_elems = (uint32_t)info->page_size * W;
    fp.page_limit = (uint32_t)p->num_pages;
    fp.nan_row = dnan;
    fp.bad_pages = dbad;
    fp.num_pages = p->num_pages;
    fp.scale_log2 = info->scale * MLAV_LOG2E;
    fp.kv_scale = fp8 ? p->kv_scale : 1.0f;
    float *dscale = NULL;
    if (fp8 && (rows & (SCALE_DEVICE | SCALE_NAN))) {
        const float v = (rows & SCALE_NAN) ? NAN : p->kv_scale;
        dscale = (float *)dcopy(&v, sizeof v);
        fp.kv_scale_ptr = dscale;
        fp.kv_scale = 0.0f; /* the pointer's value is the one read */
    }
    fp.combine_col_blocks = col_blocks;
    mlav_flash_launch_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.all_groups = mlav_flash_all_groups(info->max_q_len, info->H);
    lo.combine_kind = combine_kind;
    lo.kv_fp8 = fp8;
    lo.sm90_seesaw = kind == KIND_SEESAW || kind == KIND_SEESAW_L2 ||
                     kind == KIND_SEESAW_EARLY || kind == KIND_SEESAW_EARLY_L2 ||
                     kind == KIND_STAGED;
    lo.sm90_l2_first = kind == KIND_SEESAW_L2 || kind == KIND_SEESAW_EARLY_L2;
    lo.sm90_early_s = kind == KIND_SEESAW_EARLY || kind == KIND_SEESAW_EARLY_L2;
    lo.sm90_staged = kind == KIND_STAGED;
    lo.sm90_keys = kind == KIND_KEYS ? (info->max_q_len * info->H <= 8 ? 8 : 16) : 0;
    if (step) {
        fp.step_owner = owner;
        fp.step_lim.max_batch = info->B;
        fp.step_lim.max_tokens = info->T;
        fp.step_lim.max_q_len = info->max_q_len;
        fp.step_lim.max_kv_len = (int32_t)info->max_kv_len;
        fp.step_max_slots = sch->n_slots;
        /* the step combine's grid: the step's blocks last, 3 leading ones that run nothing */
        lo.combine_grid = sch->n_combine * MLAV_FLASH_BLOCK_M *
                              (combine_kind == MLAV_COMBINE_ROWS ? 1 : col_blocks) +
                          3;
    }
    const int step_arg = step ? MLAV_COMBINE_STEP_DENSE : 0;

    /* KIND_STAGED: the staged pages and table as the backend builds them
     * (src/common/staged_pages.h), the pool poisoned, the pass, then the launch on its params */
    mlav_flash_params run_fp = fp;
    void *dstage = NULL, *dpool = NULL;
    mlav_status s = MLAV_OK;
    if (kind == KIND_STAGED) {
        if (!fp8 || step)
            fail_msg("%s %s: staging is an FP8 cache's, in a plan for one problem", label, name);
        int32_t n_pages = 0, most = 0;
        if (mlav_staged_count(info->B, info->kv_lens, &n_pages, &most) != 0)
            fail_msg("%s %s: staged count refused", label, name);
        const size_t pb = align256(sizeof(mlav_staged_page) * (size_t)(n_pages ? n_pages : 1));
        const size_t tb = sizeof(int32_t) * (size_t)info->B * (size_t)most;
        char *h = (char *)tu_xcalloc(pb + tb, 1);
        mlav_staged_fill(info->B, info->kv_lens, most, (mlav_staged_page *)h,
                         (int32_t *)(h + pb));
        dstage = dcopy(h, pb + tb);
        free(h);
        const size_t pool_bytes = mlav_flash_sm90_staged_bytes(n_pages);
        dpool = dalloc(pool_bytes);
        TU_CK(cudaMemset(dpool, 0xff, pool_bytes ? pool_bytes : 16)); /* F16 NaN */
        mlav_sm90_staging sg;
        sg.pages = (const mlav_staged_page *)dstage;
        sg.table = (const int32_t *)((char *)dstage + pb);
        sg.n_pages = n_pages;
        sg.max_pages = most;
        s = mlav_flash_sm90_stage(&fp, &sg, dpool, &run_fp, 0);
    }
    if (s == MLAV_OK)
        s = sm90 ? mlav_flash_sm90_launch(info->dtype, &run_fp, &lo, step_arg, 0)
                 : mlav_flash_launch(info->dtype, &run_fp, &lo, step_arg, 0);
    if (s != MLAV_OK)
        fail_msg("%s %s: launch returned %s: %s", label, name,
                 mlav_status_string(s), mlav_get_error());
    sync_or_exit(label, 60.0);
    TU_CK(cudaDeviceSynchronize());
    tu_poison(p);
    TU_CK(cudaMemcpy(p->out, dout, p->out_elems * esz, cudaMemcpyDeviceToHost));
    TU_CK(cudaMemcpy(p->lse, dlse, p->lse_elems * sizeof(float), cudaMemcpyDeviceToHost));
    char msg[512];
    const int ok = tu_compare(p, tu_out_tol(p->c.dtype), tu_lse_tol(p->c.dtype), msg, sizeof msg);
    printf("  %-5s %s%s%s%s: items %d (combine %d, max splits %d): %s %s\n",
           label, name, (rows & ROWS_SHARED) ? ",rows" : "",
           step ? ",step" : "",
           (rows & SCALE_NAN) ? ",kv_scale_ptr NaN" : (rows & SCALE_DEVICE) ? ",kv_scale_ptr" : "",
           sch->n_items, sch->n_combine, max_nsplit, ok ? "ok" : "FAIL", msg);
    fflush(stdout);
    void *bufs[] = {dq,   dkv, dpt, drows,        dmask, dout,   dlse,  dnan,
                    dbad, ws,  ditems_alloc, dcomb, dscale, dstage, dpool};
    for (void *b : bufs)
        if (b)
            TU_CK(cudaFree(b));
    if (!ok)
        fail_msg("%s %s: %s", label, name, msg);
}

/* `p` (tu_reference run, its page table possibly edited since) through both families. */
void run_problem(tu_problem *p, const mlav_cuda_device *dev, rows_mode rows)
{
    const tu_case *c = &p->c;
    mlav_problem_info info;
    if (mlav_problem_validate(&p->prob, &info) != MLAV_OK)
        fail_msg("validate: %s", mlav_get_error());
    int bps = 0;
    if (mlav_flash_sm90_prepare(info.dtype, info.kv_dtype, dev, &bps) != MLAV_OK)
        fail_msg("sm90 prepare: %s", mlav_get_error());
    int bps_legal = 0;
    if (mlav_flash_prepare(info.dtype, info.kv_dtype, dev, &bps_legal) != MLAV_OK)
        fail_msg("legal prepare: %s", mlav_get_error());
    /* one schedule for both families, at the sm90 kernel's residency (1 block per SM, as the
     * legal's): the legal kernel's, or (by the case's seed, half the cases) the sm90 one with
     * splits aligned to 64 keys, which the legal kernel runs as well */
    const int sched64 = (int)(c->seed & 1);
    const mlav_schedule_params sp = sched64
                                        ? mlav_flash_sm90_schedule_params(dev->sm_count, bps)
                                        : mlav_flash_schedule_params(dev->sm_count, bps);
    mlav_schedule sch;
    memset(&sch, 0, sizeof sch);
    if (mlav_schedule_build(&info, &sp, &sch) != MLAV_OK)
        fail_msg("schedule: %s", mlav_get_error());
    char name[300];
    tu_case_name(c, name, sizeof name - 16);
    if (sched64)
        strcat(name, ",sched64");
    run_family(p, &info, &sch, dev, KIND_LEGAL, name, rows);
    run_family(p, &info, &sch, dev, KIND_SM90, name, rows);
    /* the seesaw kernel on every case: TMA tiles under the pool's tensor map, gathered ones
     * (any page size, bad pages, partial tiles) and an FP8 cache's raw tiles */
    run_family(p, &info, &sch, dev, KIND_SEESAW, name, rows);
    if (info.kv_dtype != MLAV_DTYPE_FP8_E4M3) {
        run_family(p, &info, &sch, dev, KIND_SEESAW_L2, name, rows);
        /* WG0's S_A a pair early (the plans of many row tiles a KV row), under one L2 policy
         * or the other by the case's seed */
        run_family(p, &info, &sch, dev, c->seed >> 1 & 1 ? KIND_SEESAW_EARLY_L2 : KIND_SEESAW_EARLY,
                   name, rows);
    }
    /* the keys kernel wherever it runs: an FP8 cache's plans whose requests have few rows */
    if (info.kv_dtype == MLAV_DTYPE_FP8_E4M3 && (int64_t)info.max_q_len * info.H <= 16)
        run_family(p, &info, &sch, dev, KIND_KEYS, name, rows);
    /* the seesaw kernel over the FP8 cache staged as F16, in every plan for one problem (the
     * backend's rule stages the wide ones: the pass and the kernel's reads run on any) */
    if (info.kv_dtype == MLAV_DTYPE_FP8_E4M3 && !(rows & STEP_LAUNCH))
        run_family(p, &info, &sch, dev, KIND_STAGED, name, rows);
    mlav_schedule_free(&sch);
    mlav_problem_info_free(&info);
}

void run_case(const tu_case *c, const mlav_cuda_device *dev, rows_mode rows)
{
    tu_problem *p = tu_make(c);
    tu_reference(p);
    run_problem(p, dev, rows);
    tu_free(p);
}

mlav_cuda_device device_or_fail(void)
{
    mlav_cuda_device dev;
    if (mlav_cuda_device_query(&dev) != MLAV_OK)
        fail_msg("device query: %s", mlav_get_error());
    return dev;
}

/* `cases` random problems (H from `heads`, q_len 1..16, or up to max_rows / H where max_rows > 0;
 * chains and trees, page_size 1 and 64, one long request with split items or a few short ones,
 * shared page tables, plans for limits), BF16 and F16 q over a cache of their dtype or (kv_dtype
 * FP8 E4M3) an FP8 one, whose kv_scale tu_make draws from the seed and every other case reads
 * through kv_scale_ptr. */
void random_cases(const char *name, mlav_dtype kv_dtype, const int *heads, int n_heads,
                  int max_rows, int cases)
{
    const mlav_cuda_device dev = device_or_fail();
    uint64_t seed = tu_seed();
    printf("%s: seed 0x%llx (MLAV_TEST_SEED to repeat)\n", name, (unsigned long long)seed);
    uint64_t st = seed;
    for (int k = 0; k < cases; k++) {
        tu_case c;
        memset(&c, 0, sizeof c);
        c.H = heads[k % n_heads];
        c.Dl = MLAV_FLASH_DL;
        c.Dr = MLAV_FLASH_DR;
        c.page_size = (k / n_heads) % 2 ? 64 : 1;
        c.dtype = (k / (2 * n_heads)) % 2 ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16;
        c.kv_dtype = kv_dtype;
        c.tree = (tu_tree)(tu_next(&st) % 4);
        c.seed = tu_next(&st);
        /* alternate one long request (split items) with a few short ones (mostly unsplit) */
        const int long_one = (k + k / n_heads) % 2 == 0; /* every H long and short */
        c.B = long_one ? 1 : 1 + (int)(tu_next(&st) % 4);
        const int max_q = max_rows > 0 ? max_rows / c.H : 16;
        for (int b = 0; b < c.B; b++) {
            c.q_lens[b] = 1 + (int)(tu_next(&st) % (uint64_t)max_q);
            c.prefixes[b] = long_one ? 1024 + (int)(tu_next(&st) % 31744)
                                     : (int)(tu_next(&st) % 700);
        }
        /* every third case through a shared page table (page_table_rows), every fourth as the
         * step of a plan for limits */
        const bool fp8 = kv_dtype == MLAV_DTYPE_FP8_E4M3;
        run_case(&c, &dev,
                 (k % 3 == 2 ? ROWS_SHARED : ROWS_NONE) | (k % 4 == 1 ? STEP_LAUNCH : 0) |
                     (fp8 && k % 2 ? SCALE_DEVICE : 0));
    }
}

/* random_cases' problems: H 8..128, q_len 1..16, 24 cases (MLAV_SM90_CASES: another count). */
void wide_cases(const char *name, mlav_dtype kv_dtype)
{
    const int heads[4] = {8, 16, 64, 128};
    random_cases(name, kv_dtype, heads, 4, 0,
                 getenv("MLAV_SM90_CASES") ? atoi(getenv("MLAV_SM90_CASES")) : 24);
}

void test_sm90_random(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    wide_cases("test_sm90_random", (mlav_dtype)0);
}

/* A case of H heads, page size ps, dtype dt, tree tr and n requests of the given draft
 * lengths and prefixes. */
tu_case make_case(int H, int ps, mlav_dtype dt, tu_tree tr, int n, const int *q_lens,
                  const int *prefixes, uint64_t seed)
{
    tu_case c;
    memset(&c, 0, sizeof c);
    c.H = H;
    c.Dl = MLAV_FLASH_DL;
    c.Dr = MLAV_FLASH_DR;
    c.page_size = ps;
    c.dtype = dt;
    c.tree = tr;
    c.B = n;
    c.seed = seed;
    for (int b = 0; b < n; b++) {
        c.q_lens[b] = q_lens[b];
        c.prefixes[b] = prefixes[b];
    }
    return c;
}

/* A NaN in a draft row's values (c_kv) reaches exactly the rows whose tree mask sees that row:
 * a hidden key's P = 0 times NaN on the tensor cores would be NaN, so the kernel sanitizes V
 * on such tiles (sanitize_v); the oracle says which rows are NaN and tu_compare requires the
 * NaN positions to match. Draft lengths 9 and 33 (two mask words); BF16 and F16 q, over a cache
 * of their dtype and over an FP8 one (an e4m3 NaN converts to an F16 NaN in the stage). */
void test_sm90_nonfinite_hidden_draft(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed();
    for (int k = 0; k < 4; k++) {
        const int q_lens[2] = {9, 33}, prefixes[2] = {300, 1000};
        tu_case c = make_case(8, 1, k % 2 ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16, TU_BUSHY, 2, q_lens,
                              prefixes, seed + k);
        c.kv_dtype = k >= 2 ? MLAV_DTYPE_FP8_E4M3 : (mlav_dtype)0;
        tu_problem *p = tu_make(&c);
        /* request 0: draft node 3, column 7; request 1: draft node 20, column 300 */
        const int32_t bad_node[2] = {3, 20}, bad_col[2] = {7, 300};
        for (int b = 0; b < 2; b++) {
            const int32_t j = c.prefixes[b] + bad_node[b], ps = c.page_size;
            const size_t row =
                (size_t)p->page_table[(size_t)b * (size_t)p->prob.max_pages + (size_t)(j / ps)] *
                    (size_t)ps +
                (size_t)(j % ps);
            mlav_store_from_f32(p->kv, (int)p->kv_dtype,
                                row * (size_t)(c.Dl + c.Dr) + (size_t)bad_col[b], NAN);
        }
        tu_reference(p);
        run_problem(p, &dev, ROWS_NONE);
        tu_free(p);
    }
}

/* Rising scores (tu_rising_scores): the running maxima of many rows move again and again inside
 * a split, so O's rescale runs after the first tile too, in some warps and not others (the
 * kernel skips it in a warp whose rows all keep their maximum). */
void test_sm90_rising_scores(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed();
    const int q1[1] = {9}, p1[1] = {4000}, q2[2] = {9, 33}, p2[2] = {3000, 700};
    const tu_case cases[3] = {
        make_case(64, 1, MLAV_DTYPE_BF16, TU_CHAIN_NULL, 1, q1, p1, seed),
        make_case(16, 16, MLAV_DTYPE_F16, TU_BUSHY, 2, q2, p2, seed + 1),
        make_case(128, 64, MLAV_DTYPE_BF16, TU_DEEP, 2, q2, p2, seed + 2),
    };
    for (int k = 0; k < 3; k++) {
        tu_problem *p = tu_make(&cases[k]);
        tu_rising_scores(p, 64);
        tu_reference(p);
        run_problem(p, &dev, ROWS_NONE);
        tu_free(p);
    }
}

/* Values near 1e30 and 1e-30 (tu_scale_magnitudes, out scaled by 2^+-100): the partial states
 * (fp16 with a power of two per row and 128 columns) must carry both. */
void test_sm90_extreme_magnitudes(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed();
    const int q1[1] = {9}, p1[1] = {1500}, q2[2] = {9, 33}, p2[2] = {700, 2000};
    for (int k = 0; k < 4; k++) {
        const tu_case c =
            k < 2 ? make_case(64, 1, MLAV_DTYPE_BF16, TU_BUSHY, 1, q1, p1, seed + k)
                  : make_case(16, 16, MLAV_DTYPE_BF16, TU_CHAIN, 2, q2, p2, seed + k);
        tu_problem *p = tu_make(&c);
        tu_scale_magnitudes(p, k % 2 ? -100 : 100);
        tu_reference(p);
        run_problem(p, &dev, ROWS_NONE);
        tu_free(p);
    }
}

/* Page ids outside the pool in prefix page `page_a` of request 0 (one past the pool) and
 * `page_c` of request 2 (negative), and the reference of both requests NaN: every row of them
 * sees those keys, which read as NaN rows (request 1 is untouched); then run_problem. */
void run_bad_page_ids(tu_problem *p, const mlav_cuda_device *dev, int page_a, int page_c)
{
    const int32_t mp = p->prob.max_pages;
    p->page_table[0 * mp + page_a] = (int32_t)p->num_pages + 5;
    p->page_table[2 * mp + page_c] = -3;
    for (int32_t b = 0; b < 3; b += 2)
        for (int32_t t = p->q_indptr[b]; t < p->q_indptr[b + 1]; t++)
            for (int32_t h = 0; h < p->prob.num_heads; h++) {
                const size_t row = (size_t)t * (size_t)p->prob.num_heads + (size_t)h;
                p->ref_lse[row] = NAN;
                for (int32_t d = 0; d < p->prob.d_latent; d++)
                    p->ref_out[row * (size_t)p->prob.d_latent + (size_t)d] = NAN;
            }
    run_problem(p, dev, ROWS_NONE);
}

/* Page ids outside the pool (one past it, and negative) in a prefix page of requests 0 and 2:
 * every row of both sees those keys, which read as NaN rows, so their out and lse are NaN
 * (tu_compare requires the NaN positions to match); request 1 is untouched. BF16 and F16 q, over
 * a cache of their dtype and over an FP8 one (whose NaN row is e4m3 NaN bytes). */
void test_sm90_bad_page_ids(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    for (int k = 0; k < 4; k++) {
        tu_case c;
        memset(&c, 0, sizeof c);
        c.H = 8;
        c.Dl = MLAV_FLASH_DL;
        c.Dr = MLAV_FLASH_DR;
        c.page_size = 16;
        c.B = 3;
        c.dtype = k % 2 ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16;
        c.kv_dtype = k >= 2 ? MLAV_DTYPE_FP8_E4M3 : (mlav_dtype)0;
        c.tree = TU_BUSHY;
        c.seed = tu_seed();
        const int q_lens[3] = {9, 9, 9}, prefixes[3] = {40, 300, 40};
        for (int b = 0; b < 3; b++) {
            c.q_lens[b] = q_lens[b];
            c.prefixes[b] = prefixes[b];
        }
        tu_problem *p = tu_make(&c);
        tu_reference(p);
        run_bad_page_ids(p, &dev, 0, 1);
        tu_free(p);
    }
}


/* Batches whose sm_90a plan takes equal shares of the KV tiles across requests
 * (src/common/schedule_shares.c: pieces of several requests in one part, of unequal lengths, in
 * rounds): each through the three kernels against the oracle, on the sm_90a schedule (an odd
 * seed: run_problem's sched64). Which shapes take shares depends on the SM count: on 132 SMs
 * (the H200) the last four do (the second did when shares were weighed by keys). At least one
 * must take them on this device, or the test would hold nothing. */
void test_sm90_shares(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed() | 1;
    printf("test_sm90_shares: seed 0x%llx\n", (unsigned long long)seed);
    int bps = 0;
    if (mlav_flash_sm90_prepare(MLAV_DTYPE_BF16, MLAV_DTYPE_BF16, &dev, &bps) != MLAV_OK)
        fail_msg("sm90 prepare: %s", mlav_get_error());
    const struct {
        int B, H, q, prefix, ps;
        mlav_dtype kv;
    } pts[] = {{3, 16, 13, 2048, 64, (mlav_dtype)0}, {3, 64, 4, 2048, 1, (mlav_dtype)0},
               {2, 128, 4, 1024, 64, MLAV_DTYPE_FP8_E4M3}, {3, 64, 9, 4096, 64, (mlav_dtype)0},
               /* shares on 132 SMs in whole tiles (the host's schedule says so): a chain, page
                * size 1 and an FP8 cache */
               {3, 128, 13, 1024, 64, (mlav_dtype)0}, {4, 64, 9, 4096, 1, (mlav_dtype)0},
               {4, 128, 9, 2048, 64, MLAV_DTYPE_FP8_E4M3}};
    int taken = 0;
    for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
        int q_lens[TU_MAX_B], prefixes[TU_MAX_B];
        for (int b = 0; b < pts[k].B; b++) {
            q_lens[b] = pts[k].q;
            prefixes[b] = pts[k].prefix + 37 * b; /* requests of unequal tiles */
        }
        tu_case c = make_case(pts[k].H, pts[k].ps, MLAV_DTYPE_BF16, k % 2 ? TU_BUSHY : TU_CHAIN,
                              pts[k].B, q_lens, prefixes, seed + 2 * k);
        c.kv_dtype = pts[k].kv;
        tu_problem *p = tu_make(&c);
        mlav_problem_info info;
        if (mlav_problem_validate(&p->prob, &info) != MLAV_OK)
            fail_msg("validate: %s", mlav_get_error());
        mlav_schedule_params sp = mlav_flash_sm90_schedule_params(dev.sm_count, bps), up = sp;
        up.shares = 0;
        mlav_schedule s, u;
        if (mlav_schedule_build(&info, &sp, &s) != MLAV_OK ||
            mlav_schedule_build(&info, &up, &u) != MLAV_OK)
            fail_msg("schedule: %s", mlav_get_error());
        const bool shares = s.n_items != u.n_items ||
                            memcmp(s.items, u.items, (size_t)s.n_items * sizeof s.items[0]) != 0;
        printf("  B %d H %d q_len %d prefix %d: %d blocks (uniform %d)%s\n", pts[k].B, pts[k].H,
               pts[k].q, pts[k].prefix, s.n_items, u.n_items, shares ? ", shares" : "");
        mlav_schedule_free(&s);
        mlav_schedule_free(&u);
        mlav_problem_info_free(&info);
        if (shares) {
            taken++;
            tu_reference(p);
            run_problem(p, &dev, ROWS_NONE);
        }
        tu_free(p);
    }
    if (taken == 0)
        fail_msg("no case took equal shares on this device (%d SMs)", dev.sm_count);
}
/* The producer's two ways of loading a KV tile of a 16-bit cache (kernel.cuh, gather.cuh): by
 * TMA a tile whose 64 rows lie inside one page and before the split's end (pages of a multiple
 * of 64 rows) of a request of more than 64 rows (H x q_len: the short requests' H 16, q_len 4
 * keeps the gather), by cp.async the others. page_size 64, 128 and 256, BF16 and F16, one long
 * request (split items) and a few short ones (unsplit, whose last tile is partial), each on
 * both schedules (seeds of both parities: run_problem picks the schedule by the seed): the
 * sm90 one's splits start at multiples of 64 (every whole tile inside a page: TMA), the legal
 * one's at multiples of 32 (at 32 past a page start of page_size 64 every tile crosses pages,
 * of 128 every other tile does); a page id outside the pool (past it, and negative) in a page
 * of whole tiles, whose rows read as NaN (the cp.async path); the pool's unused pages and the
 * slack past kv_len NaN (tu_make), which must not leak; the step of a plan for limits and a
 * shared page table; and an FP8 cache over pages of 128, which stays on cp.async.
 * MLAV_SM90_CASES=n (under compute-sanitizer) runs the first n of each group. */
void test_sm90_tma_tiles(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed() & ~(uint64_t)1;
    printf("test_sm90_tma_tiles: seed 0x%llx\n", (unsigned long long)seed);
    const int limit = getenv("MLAV_SM90_CASES") ? atoi(getenv("MLAV_SM90_CASES")) : 1 << 30;
    const int page_sizes[3] = {64, 128, 256};
    const int ql[1] = {9}, pl[1] = {4000}, qs[3] = {4, 16, 9}, ps3[3] = {700, 333, 1200};
    int k = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int d = 0; d < 2; d++)
            for (int shape = 0; shape < 2; shape++)
                for (int parity = 0; parity < 2 && k < limit; parity++, k++) {
                    const mlav_dtype dt = d ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16;
                    const uint64_t cs = seed + 2 * (uint64_t)k + (uint64_t)parity;
                    const tu_case c =
                        shape ? make_case(64, page_sizes[pi], dt, TU_DEEP, 1, ql, pl, cs)
                              : make_case(16, page_sizes[pi], dt, TU_BUSHY, 3, qs, ps3, cs);
                    run_case(&c, &dev,
                             (k % 5 == 1 ? STEP_LAUNCH : ROWS_NONE) |
                                 (k % 7 == 3 ? ROWS_SHARED : ROWS_NONE));
                }
    /* page ids outside the pool in prefix pages of requests 0 and 2 (test_sm90_bad_page_ids'
     * rule: every row of both is NaN), pages of 64 and 128 rows, both schedules */
    for (int e = 0; e < 4 && e < limit; e++) {
        const int ps = e / 2 ? 128 : 64;
        const int q3[3] = {9, 9, 9}, p3[3] = {300, 600, 400};
        const tu_case c = make_case(8, ps, e % 2 ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16, TU_CHAIN, 3,
                                    q3, p3, seed + 100 + (uint64_t)e);
        tu_problem *p = tu_make(&c);
        tu_reference(p);
        run_bad_page_ids(p, &dev, 1, 0);
        tu_free(p);
    }
    /* an FP8 cache over pages of whole tiles: no map, every tile gathered */
    for (int parity = 0; parity < 2 && parity < limit; parity++) {
        tu_case c = make_case(64, 128, MLAV_DTYPE_BF16, TU_CHAIN, 1, ql, pl,
                              seed + 200 + (uint64_t)parity);
        c.kv_dtype = MLAV_DTYPE_FP8_E4M3;
        run_case(&c, &dev, ROWS_NONE);
    }
}

/* wide_cases over an FP8 E4M3 cache. */
void test_sm90_fp8_random(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    wide_cases("test_sm90_fp8_random", MLAV_DTYPE_FP8_E4M3);
}

/* test_sm90_fp8_scale_extremes' problems: for BF16 and F16 q, kv_scale 1 and the ends of its
 * range with q scaled the other way (tu_scale_magnitudes), a short problem (H h_short, q_lens qs,
 * page_size 1, unsplit items) and a long one (H h_long, q_len ql, page_size 64, split items),
 * each through a plan for one problem and the step of a plan for limits, with the scale as a host
 * value and through kv_scale_ptr; the first `limit` problems. */
void scale_extremes(const mlav_cuda_device &dev, uint64_t seed, int h_short, const int (&qs)[2],
                    int h_long, int ql, int limit)
{
    const int ps[2] = {300, 40}, q1[1] = {ql}, pl[1] = {5000};
    int k = 0;
    for (int d = 0; d < 2; d++)
        for (int e = 0; e < 3; e++)
            for (int shape = 0; shape < 2 && k < limit; shape++, k++) {
                const mlav_dtype dt = d ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16;
                const int ex = e == 0 ? 0 : d ? (e == 1 ? -8 : 8) : (e == 1 ? -120 : 100);
                const uint64_t cs = seed + (uint64_t)(d * 8 + e * 2 + shape);
                tu_case c = shape ? make_case(h_long, 64, dt, TU_CHAIN, 1, q1, pl, cs)
                                  : make_case(h_short, 1, dt, TU_BUSHY, 2, qs, ps, cs);
                c.kv_dtype = MLAV_DTYPE_FP8_E4M3;
                c.kv_scale = 1.0f;
                tu_problem *p = tu_make(&c);
                tu_scale_magnitudes(p, ex);
                tu_reference(p);
                printf(" kv_scale 2^%d\n", ex);
                run_problem(p, &dev, (e + shape) % 2 ? STEP_LAUNCH : ROWS_NONE);
                run_problem(p, &dev, SCALE_DEVICE | ((e + shape) % 2 ? ROWS_NONE : STEP_LAUNCH));
                tu_free(p);
            }
}

/* An FP8 cache's scale at 1 and at the ends of its range, each with q scaled the other way
 * (tu_scale_magnitudes: the scores stay those of the scale drawn, out moves with the scale):
 * BF16 q, kv_scale 2^-120 under q near 2^120 (a dot product of q and the bytes alone is past
 * fp32's range: Q goes to F16 times 2^-shift, and the scores take 2^shift back with the scale
 * in two factors, fp8_score_factors; a split's partial state holds the scale's power of two in
 * part_scale only down to 2^-126, fp8_part_scale) and 2^100 under q near 2^-100; F16 q (whose
 * range ends near 2^16), 2^-8 and 2^8. A short problem of unsplit items and a long one of split
 * items, page_size 1 and 64, a plan for one problem and the step of a plan for limits, the scale
 * as a host value and through kv_scale_ptr. */
void test_sm90_fp8_scale_extremes(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed();
    printf("test_sm90_fp8_scale_extremes: seed 0x%llx\n", (unsigned long long)seed);
    const int qs[2] = {9, 4};
    scale_extremes(dev, seed, 16, qs, 64, 9, 1 << 30);
}

/* A device kv_scale that is not finite and > 0 (NaN here; kv_scale_read makes every bad one
 * NaN) cannot be refused without a host read: every row that sees a key is NaN, out and lse
 * (mlaverify.h). Every row here sees prefix keys. BF16 and F16 q, unsplit and split items, a plan
 * for one problem and the step of a plan for limits. */
void test_sm90_fp8_nan_scale(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed();
    const int qs[2] = {9, 4}, ps[2] = {300, 40}, ql[1] = {9}, pl[1] = {5000};
    for (int d = 0; d < 2; d++)
        for (int shape = 0; shape < 2; shape++) {
            const mlav_dtype dt = d ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16;
            const uint64_t cs = seed + (uint64_t)(d * 2 + shape);
            tu_case c = shape ? make_case(64, 64, dt, TU_BUSHY, 1, ql, pl, cs)
                              : make_case(16, 1, dt, TU_CHAIN, 2, qs, ps, cs);
            c.kv_dtype = MLAV_DTYPE_FP8_E4M3;
            tu_problem *p = tu_make(&c);
            tu_reference(p);
            for (size_t r = 0; r < p->lse_elems; r++) {
                p->ref_lse[r] = NAN;
                for (int32_t j = 0; j < c.Dl; j++)
                    p->ref_out[r * (size_t)c.Dl + (size_t)j] = NAN;
            }
            run_problem(p, &dev, SCALE_NAN | (shape ? STEP_LAUNCH : ROWS_NONE));
            tu_free(p);
        }
}

/* The keys kernel (sm90/keys/), which run_problem adds for an FP8 cache's plans of at most 16
 * rows a request (and which wide_cases reaches rarely): 20 random cases of H 1..16 with q_len up
 * to 16 / H (random_cases); the scale's extremes with q scaled the other way
 * (test_sm90_fp8_scale_extremes' pairs), plans for one problem and the step of a plan for limits;
 * page sizes 16, 128 and 256 (tiles across pages, whole tiles inside a page past its slot 0); and
 * a NaN in a draft row's values that some rows do not see (its V zeroed in registers: only
 * the rows whose mask sees that row are NaN). MLAV_SM90_CASES=n (under compute-sanitizer) runs
 * the first n of each group. */
void test_sm90_keys(void **state)
{
    (void)state;
    if (!g_have_device)
        skip();
    const int limit = getenv("MLAV_SM90_CASES") ? atoi(getenv("MLAV_SM90_CASES")) : 1 << 30;
    const int heads[5] = {1, 2, 4, 8, 16};
    random_cases("test_sm90_keys", MLAV_DTYPE_FP8_E4M3, heads, 5, 16, limit < 20 ? limit : 20);
    const mlav_cuda_device dev = device_or_fail();
    const uint64_t seed = tu_seed();
    const int qs[2] = {2, 1};
    scale_extremes(dev, seed + 40, 8, qs, 8, 2, limit);
    /* page sizes the random cases do not draw: 16 (every tile across pages, so a copy a row) and
     * 128 and 256 (whole tiles that start past slot 0 of their page: one bulk copy from inside
     * the page); a long request with split items and a short one, 16 rows (H 8, q_len 2) */
    const int page_sizes[3] = {16, 128, 256};
    for (int k = 0; k < 3 && k < limit; k++) {
        const int ql[2] = {2, 1}, pre[2] = {20000 + 77 * k, 700};
        tu_case c = make_case(8, page_sizes[k], k % 2 ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16,
                              k % 2 ? TU_BUSHY : TU_CHAIN, 2, ql, pre,
                              seed + 80 + (uint64_t)k);
        c.kv_dtype = MLAV_DTYPE_FP8_E4M3;
        run_case(&c, &dev, k == 1 ? STEP_LAUNCH : ROWS_NONE);
    }
    for (int d = 0; d < 2 && d < limit; d++) {
        const int q1[1] = {4}, p1[1] = {300};
        tu_case c = make_case(4, 1, d ? MLAV_DTYPE_F16 : MLAV_DTYPE_BF16, TU_BUSHY, 1, q1, p1,
                              seed + 60 + (uint64_t)d);
        c.kv_dtype = MLAV_DTYPE_FP8_E4M3;
        tu_problem *p = tu_make(&c);
        /* draft node 2's row (e4m3fn NaN at column 7) */
        const int32_t j = c.prefixes[0] + 2;
        const size_t row = (size_t)p->page_table[(size_t)j]; /* page_size 1 */
        mlav_store_from_f32(p->kv, (int)p->kv_dtype, row * (size_t)(c.Dl + c.Dr) + 7, NAN);
        tu_reference(p);
        run_problem(p, &dev, ROWS_NONE);
        tu_free(p);
    }
}

} // namespace

int main(void)
{
    int n = 0, dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaGetDevice(&dev) == cudaSuccess &&
        cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major == 9 && prop.minor == 0)
        g_have_device = 1;
    else
        printf("test_sm90_gpu: no cc 9.0 device, skipped\n");
    /* MLAV_TEST_FILTER=test_sm90_bad_page_ids (wildcards * and ?) runs a subset, e.g. under
     * compute-sanitizer */
    const char *filter = getenv("MLAV_TEST_FILTER");
    if (filter)
        cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sm90_random),
        cmocka_unit_test(test_sm90_bad_page_ids),
        cmocka_unit_test(test_sm90_nonfinite_hidden_draft),
        cmocka_unit_test(test_sm90_rising_scores),
        cmocka_unit_test(test_sm90_extreme_magnitudes),
        cmocka_unit_test(test_sm90_tma_tiles),
        cmocka_unit_test(test_sm90_shares),
        cmocka_unit_test(test_sm90_fp8_random),
        cmocka_unit_test(test_sm90_fp8_scale_extremes),
        cmocka_unit_test(test_sm90_fp8_nan_scale),
        cmocka_unit_test(test_sm90_keys),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc == 0 && !g_have_device ? 77 : rc;
}
