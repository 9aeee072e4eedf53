/* The cross-backend harness: every compiled-in backend (cpu; cuda and cuda-naive where the
 * library was built with CUDA) over one table of random cases, each against the fp64 oracle
 * (tu_reference: the reference backend's definition of truth). Per case and backend one cmocka
 * test, named by backend and parameters; the error metric is the dtype's (docs/DESIGN.md#bundles:
 * rel-L2 of out <= 1e-5 F32, 5e-3 BF16/F16; max |lse - ref| <= 1e-5 F32, 1e-3 BF16/F16), after the
 * NaN positions match. The fixture NaN-poisons unused KV pages and the slack of each last page,
 * poisons out/lse (NaN) between guard canaries; the workspace, and on the GPU every device
 * buffer, is NaN-poisoned between canaries here too. A backend that is not compiled in, a
 * missing device and a shape a backend is documented not to take are skip()s with the reason.
 * FP8 (e4m3) caches run through the same checks under every q dtype, at the q dtype's tolerance,
 * their scale drawn per case (printed) and given as a value or through kv_scale_ptr.
 * Inputs are fresh each run: case k uses seed base + k, base printed (MLAV_TEST_SEED=base
 * reproduces a run), and every failure names the case with its seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mlaverify.h"
#include "test_util.h"

#ifdef MLAV_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- the case table ------------------------------------------------------------------------ */

typedef struct bcase {
    tu_case c;
    int lse_null; /* run with lse = NULL (the kernel must skip it) */
} bcase;

#define CASE(h, dl, dr, page, dt, tr, nb, qs, ps)                                              \
    {.c = {.H = h, .Dl = dl, .Dr = dr, .page_size = page, .B = nb, .dtype = MLAV_DTYPE_##dt,   \
           .q_lens = qs, .prefixes = ps, .tree = tr}}
#define CASE_NO_LSE(h, dl, dr, page, dt, tr, nb, qs, ps) /* the same, run with lse = NULL */   \
    {.c = {.H = h, .Dl = dl, .Dr = dr, .page_size = page, .B = nb, .dtype = MLAV_DTYPE_##dt,   \
           .q_lens = qs, .prefixes = ps, .tree = tr},                                          \
     .lse_null = 1}
/* An FP8 (e4m3) cache under q dtype dt, its scale drawn from the seed (test_util.h), given as a
 * value, or (_PTR) through tensors.kv_scale_ptr: host memory on a host run, a device copy on a
 * device run */
#define CASE_FP8(h, dl, dr, page, dt, tr, nb, qs, ps)                                          \
    {.c = {.H = h, .Dl = dl, .Dr = dr, .page_size = page, .B = nb, .dtype = MLAV_DTYPE_##dt,   \
           .q_lens = qs, .prefixes = ps, .tree = tr, .kv_dtype = MLAV_DTYPE_FP8_E4M3}}
#define CASE_FP8_PTR(h, dl, dr, page, dt, tr, nb, qs, ps)                                      \
    {.c = {.H = h, .Dl = dl, .Dr = dr, .page_size = page, .B = nb, .dtype = MLAV_DTYPE_##dt,   \
           .q_lens = qs, .prefixes = ps, .tree = tr, .kv_dtype = MLAV_DTYPE_FP8_E4M3,          \
           .kv_scale_ptr = 1}}
#define Q(...) {__VA_ARGS__}

/* Every value of every axis appears: H {1,2,3,4,5,8,16,64,128}, q_len {0,1,2,4,5,9,17,33,64,65,
 * 100} (up to 4 mask words), prefix {0,1,255,4097,...}, page {1,3,5,7,16,64}, dims (512,64),
 * (64,16) and odd ones, three dtypes, four tree kinds, batches of 1 to 5 mixed requests (some
 * with q_len 0). No cartesian product: the oracle's fp64 loops are what take the time. The first
 * twenty are the CPU backend's former grid, the rest the CUDA backends' (tests/test_cpu_backend.c
 * and tests/test_cuda_gpu.c before the harness); each backend now runs them all. */
static const bcase cases[] = {
    /* small dims (64, 16) */
    CASE(1, 64, 16, 1, F32, TU_CHAIN_NULL, 1, Q(1), Q(0)),
    CASE(8, 64, 16, 3, BF16, TU_CHAIN, 3, Q(2, 9, 1), Q(1, 255, 0)),
    CASE(16, 64, 16, 16, F16, TU_BUSHY, 2, Q(33, 9), Q(4097, 255)),
    CASE(64, 64, 16, 64, F32, TU_DEEP, 1, Q(64), Q(255)),
    CASE(128, 64, 16, 1, BF16, TU_DEEP, 2, Q(9, 33), Q(1, 0)),
    CASE(64, 64, 16, 64, F16, TU_CHAIN_NULL, 4, Q(9, 9, 9, 9), Q(4097, 0, 255, 1)),
    CASE(16, 64, 16, 3, F32, TU_DEEP, 3, Q(1, 64, 2), Q(255, 4097, 0)),
    CASE(8, 64, 16, 16, BF16, TU_BUSHY, 3, Q(0, 5, 64), Q(3, 0, 1)), /* a q_len = 0 request */
    CASE(128, 64, 16, 1, F32, TU_BUSHY, 1, Q(64), Q(255)),           /* 8192 rows: row blocks */
    CASE(3, 1, 5, 64, F32, TU_CHAIN, 2, Q(9, 2), Q(300, 2)),         /* Dl = 1, page > kv */
    CASE(5, 33, 0, 7, BF16, TU_DEEP, 1, Q(33), Q(600)),              /* Dr = 0, odd sizes */
    CASE(4, 64, 16, 16, BF16, TU_BUSHY, 2, Q(100, 65), Q(300, 0)),   /* 4 and 3 mask words */
    /* the reference dims (512, 64) */
    CASE(8, 512, 64, 64, BF16, TU_BUSHY, 1, Q(9), Q(4097)),
    CASE(64, 512, 64, 1, BF16, TU_CHAIN_NULL, 1, Q(9), Q(255)),
    CASE(16, 512, 64, 16, F32, TU_CHAIN, 2, Q(33, 1), Q(1, 4097)),
    CASE(128, 512, 64, 3, F16, TU_DEEP, 1, Q(2), Q(255)),
    CASE(1, 512, 64, 1, F32, TU_BUSHY, 1, Q(64), Q(4097)),
    CASE(64, 512, 64, 64, BF16, TU_DEEP, 1, Q(33), Q(1)), /* 2112 rows: several row blocks */
    CASE(16, 512, 64, 1, F16, TU_CHAIN_NULL, 3, Q(1, 9, 2), Q(0, 1000, 4097)),
    CASE(64, 512, 64, 1, BF16, TU_BUSHY, 1, Q(9), Q(4097)), /* the reference workload, shorter */
    /* the CUDA grid's: every fourth with lse = NULL, as there */
    CASE(8, 512, 64, 1, BF16, TU_BUSHY, 1, Q(9), Q(255)),
    CASE(16, 512, 64, 64, BF16, TU_DEEP, 2, Q(33, 1), Q(4097, 0)),
    CASE(64, 512, 64, 16, F16, TU_CHAIN, 3, Q(2, 9, 1), Q(1, 255, 0)),
    CASE_NO_LSE(128, 512, 64, 3, BF16, TU_DEEP, 1, Q(64), Q(255)),
    CASE(1, 64, 16, 3, F32, TU_CHAIN_NULL, 5, Q(1, 2, 9, 33, 64), Q(0, 1, 255, 4097, 3)),
    CASE(8, 64, 16, 1, F32, TU_BUSHY, 2, Q(33, 64), Q(4097, 1)),
    CASE(16, 64, 16, 64, F16, TU_DEEP, 3, Q(64, 9, 33), Q(0, 255, 1)),
    CASE_NO_LSE(64, 512, 64, 1, F32, TU_CHAIN_NULL, 2, Q(9, 33), Q(4097, 255)),
    CASE(128, 64, 16, 16, BF16, TU_CHAIN_NULL, 4, Q(1, 1, 1, 1), Q(4097, 255, 1, 0)),
    CASE(8, 512, 64, 16, BF16, TU_BUSHY, 3, Q(0, 9, 0), Q(5, 255, 0)),
    CASE(16, 512, 64, 64, F16, TU_BUSHY, 1, Q(64), Q(0)),
    CASE_NO_LSE(64, 64, 16, 3, F32, TU_DEEP, 2, Q(2, 2), Q(4097, 1)),
    /* every request within one warp group (H x q_len <= 32): the flash kernel's instance that
     * skips idle groups; the cases with H x q_len > 32 somewhere run the one where idle groups
     * compute (and must write nothing: their rows are the next request's), as does the next
     * one, where H = 8 puts one request within a group and two past it */
    CASE(16, 512, 64, 1, BF16, TU_CHAIN_NULL, 2, Q(1, 2), Q(4097, 300)),
    CASE(8, 512, 64, 64, BF16, TU_DEEP, 3, Q(4, 9, 33), Q(3000, 100, 1)),
    /* trees past 64 nodes: 4 and 3 mask words per row */
    CASE_NO_LSE(8, 512, 64, 16, BF16, TU_BUSHY, 2, Q(100, 65), Q(600, 33)),
    /* odd dims: rows are not 16-byte aligned (cuda-naive takes any dims) */
    CASE(2, 100, 7, 5, BF16, TU_DEEP, 2, Q(5, 17), Q(37, 0)),
    /* FP8 (e4m3) caches under each q dtype: the reference dims (the flash kernel's), page sizes
     * 1, 64 and odd ones, chains and trees, mixed batches, the scale as a value and through
     * kv_scale_ptr; then small and odd dims (flash refuses them, cuda-naive's 8-byte loads take
     * rows whose segments are multiples of 8 bytes, its scalar loads the rest) */
    CASE_FP8(16, 512, 64, 64, F32, TU_BUSHY, 2, Q(9, 1), Q(4097, 0)),
    CASE_FP8(64, 512, 64, 1, BF16, TU_CHAIN_NULL, 1, Q(9), Q(255)),
    CASE_FP8(8, 512, 64, 64, F16, TU_DEEP, 3, Q(33, 2, 9), Q(1, 300, 4097)),
    CASE_FP8(16, 512, 64, 5, BF16, TU_CHAIN, 4, Q(1, 9, 17, 0), Q(600, 0, 33, 5)),
    CASE_FP8_PTR(8, 512, 64, 16, BF16, TU_BUSHY, 2, Q(64, 5), Q(255, 1000)),
    CASE_FP8_PTR(16, 512, 64, 1, F16, TU_DEEP, 2, Q(17, 4), Q(3000, 64)),
    CASE_FP8_PTR(8, 512, 64, 64, F32, TU_CHAIN_NULL, 2, Q(2, 33), Q(0, 700)),
    CASE_FP8(8, 64, 16, 1, BF16, TU_DEEP, 3, Q(9, 1, 33), Q(255, 4097, 0)),
    CASE_FP8_PTR(4, 64, 16, 3, F32, TU_BUSHY, 2, Q(100, 5), Q(40, 300)), /* 4 mask words */
    CASE_FP8(2, 100, 7, 7, F16, TU_DEEP, 2, Q(5, 17), Q(37, 0)),
    CASE_FP8(5, 33, 0, 1, BF16, TU_CHAIN, 1, Q(9), Q(600)),
    CASE_FP8(3, 40, 8, 64, F32, TU_CHAIN_NULL, 2, Q(3, 2), Q(90, 0)),
};
#define N_CASES (sizeof cases / sizeof cases[0])

static const mlav_backend backends[] = {MLAV_BACKEND_CPU, MLAV_BACKEND_CUDA,
                                        MLAV_BACKEND_CUDA_NAIVE};
#define N_BACKENDS (sizeof backends / sizeof backends[0])

/* ---- one problem per case, shared by its backends ------------------------------------------ */

static uint64_t base_seed;
static tu_problem *cached;     /* the problem of case cached_k with its oracle, or NULL */
static size_t cached_k;

/* The tests run case by case, backend by backend: build case k's problem (and its oracle, the
 * slow part) once for all its backends. */
static tu_problem *case_problem(size_t k)
{
    if (cached && cached_k == k)
        return cached;
    if (cached)
        tu_free(cached);
    tu_case c = cases[k].c;
    c.seed = base_seed + k;
    cached = tu_make(&c);
    cached_k = k;
    tu_reference(cached);
    return cached;
}

static int group_setup(void **state)
{
    (void)state;
    base_seed = tu_seed();
    printf("  base seed 0x%llx (case k uses base + k; MLAV_TEST_SEED=base reproduces)\n",
           (unsigned long long)base_seed);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (cached)
        tu_free(cached);
    cached = NULL;
    return 0;
}

/* ---- guarded, NaN-poisoned buffers in host or device memory -------------------------------- */

enum { GUARD = 256, GUARD_BYTE = 0xA5 }; /* 256: the payload keeps cudaMalloc's alignment */

typedef struct gbuf {
    unsigned char *base; /* [GUARD][payload: bytes, 0xFF = NaN in every dtype][GUARD] */
    size_t bytes;
    int device;
} gbuf;

static void gbuf_fill(const gbuf *g, size_t at, int byte, size_t n)
{
#ifdef MLAV_WITH_CUDA
    if (g->device) {
        if (cudaMemset(g->base + at, byte, n) != cudaSuccess)
            fail_msg("cudaMemset of %zu bytes failed", n);
        return;
    }
#endif
    memset(g->base + at, byte, n);
}

/* A poisoned payload of `bytes` between canaries; returns the payload. */
static void *gbuf_make(gbuf *g, size_t bytes, int device)
{
    g->bytes = bytes;
    g->device = device;
    g->base = NULL;
    const size_t all = bytes + 2 * GUARD;
#ifdef MLAV_WITH_CUDA
    if (device && cudaMalloc((void **)&g->base, all) != cudaSuccess)
        fail_msg("cudaMalloc of %zu bytes failed", all);
#endif
    if (!device && posix_memalign((void **)&g->base, GUARD, all) != 0)
        fail_msg("no host memory for a %zu-byte buffer", all);
    gbuf_fill(g, 0, GUARD_BYTE, GUARD);
    gbuf_fill(g, GUARD, 0xFF, bytes);
    gbuf_fill(g, GUARD + bytes, GUARD_BYTE, GUARD);
    return g->base + GUARD;
}

#ifdef MLAV_WITH_CUDA
/* Copy host data into a device payload, or a device payload out to host memory. */
static void gbuf_upload(const gbuf *g, const void *host)
{
    cudaError_t e = cudaMemcpy(g->base + GUARD, host, g->bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        fail_msg("cudaMemcpy of %zu bytes in failed: %s", g->bytes, cudaGetErrorString(e));
}

static void gbuf_download(const gbuf *g, void *host)
{
    cudaError_t e = cudaMemcpy(host, g->base + GUARD, g->bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        fail_msg("cudaMemcpy of %zu bytes out failed: %s", g->bytes, cudaGetErrorString(e));
}

/* A device copy of `bytes` of host data, between canaries. */
static void *gbuf_device_copy(gbuf *g, const void *host, size_t bytes)
{
    void *payload = gbuf_make(g, bytes, 1);
    gbuf_upload(g, host);
    return payload;
}
#endif

static int gbuf_guards_ok(const gbuf *g)
{
    const unsigned char *lo = g->base, *hi = g->base + GUARD + g->bytes;
#ifdef MLAV_WITH_CUDA
    unsigned char h[2 * GUARD];
    if (g->device) {
        if (cudaMemcpy(h, lo, GUARD, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(h + GUARD, hi, GUARD, cudaMemcpyDeviceToHost) != cudaSuccess)
            fail_msg("cudaMemcpy of a guard failed");
        lo = h, hi = h + GUARD;
    }
#endif
    int ok = 1;
    for (size_t k = 0; k < GUARD; k++)
        ok &= lo[k] == GUARD_BYTE && hi[k] == GUARD_BYTE;
    return ok;
}

static void gbuf_free(gbuf *g)
{
#ifdef MLAV_WITH_CUDA
    if (g->device) {
        (void)cudaFree(g->base);
        g->base = NULL;
        return;
    }
#endif
    free(g->base);
    g->base = NULL;
}

/* ---- one checked run ------------------------------------------------------------------------ */

static int is_cuda(mlav_backend b)
{
    return b == MLAV_BACKEND_CUDA || b == MLAV_BACKEND_CUDA_NAIVE;
}

/* Whether backend b is documented to refuse p (MLAV_ERR_UNSUPPORTED, then a skip): the flash
 * kernel is built for dims (512, 64) only; cuda-naive keeps the query row and a request's whole
 * score row in fp32 shared memory, within min(the device's opt-in limit, sm_120's 101376 B). */
static int may_refuse(mlav_backend b, const tu_problem *p)
{
    if (b == MLAV_BACKEND_CUDA)
        return p->c.Dl != 512 || p->c.Dr != 64;
#ifdef MLAV_WITH_CUDA
    if (b == MLAV_BACKEND_CUDA_NAIVE) {
        int dev = 0, optin = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
                cudaSuccess)
            fail_msg("cannot read the device's shared memory limit");
        const size_t limit = optin < 101376 ? (size_t)optin : 101376;
        int32_t kv = 0;
        for (int32_t r = 0; r < p->c.B; r++)
            kv = p->kv_lens[r] > kv ? p->kv_lens[r] : kv;
        return ((size_t)(p->c.Dl + p->c.Dr) + (size_t)kv) * sizeof(float) + 1024 > limit;
    }
#endif
    return 0;
}

/* Run plan on p, the tensors in host memory (device = 0) or copied to the device (1, on a
 * non-blocking stream), and compare with the oracle; every buffer's guards must hold. */
static void check_run(const mlav_plan *plan, mlav_backend b, tu_problem *p, int device,
                      int lse_null, const char *name)
{
    const char *mode = device ? "device" : "host";
    const size_t ws_bytes = mlav_plan_workspace_bytes(plan);
    gbuf ws;
    void *w = gbuf_make(&ws, ws_bytes, mlav_plan_workspace_memory(plan) == MLAV_MEM_DEVICE);
    tu_poison(p);
    mlav_tensors t = tu_tensors(p);
    gbuf d[7]; /* q, kv, kv_scale_ptr, page_table, tree_mask, out, lse on the device */
    int nd = 0;
    void *stream = NULL;
#ifdef MLAV_WITH_CUDA
    cudaStream_t st = NULL;
    if (device) {
        const size_t esz = mlav_dtype_size(p->c.dtype);
        int32_t max_q = 0;
        for (int32_t r = 0; r < p->c.B; r++)
            max_q = p->c.q_lens[r] > max_q ? p->c.q_lens[r] : max_q;
        t.q = gbuf_device_copy(&d[nd++], p->q, p->q_elems * esz);
        t.kv_cache = gbuf_device_copy(&d[nd++], p->kv, p->kv_elems * p->kv_esz);
        if (t.kv_scale_ptr) /* the scale as an engine keeps it: a device tensor the run reads */
            t.kv_scale_ptr = gbuf_device_copy(&d[nd++], &p->kv_scale, sizeof(float));
        t.page_table = gbuf_device_copy(&d[nd++], p->page_table,
                                        (size_t)p->c.B * (size_t)p->prob.max_pages *
                                            sizeof(int32_t));
        if (p->tree_mask) /* else NULL: the causal chain */
            t.tree_mask = gbuf_device_copy(&d[nd++], p->tree_mask,
                                           (size_t)p->q_indptr[p->c.B] *
                                               (size_t)mlav_tree_mask_words(max_q) *
                                               sizeof(uint32_t));
        t.memory = MLAV_MEM_DEVICE;
        t.out = gbuf_make(&d[nd++], p->out_elems * esz, 1);
        t.lse = gbuf_make(&d[nd++], p->lse_elems * sizeof(float), 1);
        if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
            fail_msg("cudaStreamCreateWithFlags failed");
        stream = st;
    }
    if (is_cuda(b) && cudaDeviceSynchronize() != cudaSuccess) /* the memsets and copies land */
        fail_msg("cudaDeviceSynchronize failed");
#endif
    if (lse_null)
        t.lse = NULL;
    mlav_status s = mlav_run(plan, &t, w, ws_bytes, stream);
    if (s != MLAV_OK)
        fail_msg("%s %s [%s]: mlav_run returned %s: %s", mlav_backend_name(b), mode, name,
                 mlav_status_string(s), mlav_last_error(NULL));
#ifdef MLAV_WITH_CUDA
    if (device) {
        if (cudaStreamSynchronize(st) != cudaSuccess || cudaStreamDestroy(st) != cudaSuccess)
            fail_msg("%s device [%s]: the run's stream failed", mlav_backend_name(b), name);
        gbuf_download(&d[nd - 2], p->out);
        gbuf_download(&d[nd - 1], p->lse);
    }
#endif
    for (int k = 0; k < nd; k++) {
        if (!gbuf_guards_ok(&d[k]))
            fail_msg("%s device [%s]: a write outside device buffer %d", mlav_backend_name(b),
                     name, k);
        gbuf_free(&d[k]);
    }
    if (!gbuf_guards_ok(&ws))
        fail_msg("%s %s [%s]: a write outside the workspace", mlav_backend_name(b), mode, name);
    gbuf_free(&ws);
    if (lse_null) /* nothing to compare: the oracle's, so that out is checked */
        for (size_t k = 0; k < p->lse_elems; k++)
            p->lse[k] = (float)p->ref_lse[k];
    char msg[512];
    if (!tu_compare(p, tu_out_tol(p->c.dtype), tu_lse_tol(p->c.dtype), msg, sizeof msg))
        fail_msg("%s %s [%s]: %s", mlav_backend_name(b), mode, name, msg);
    if (p->kv_dtype == MLAV_DTYPE_FP8_E4M3)
        printf("  ok %s %s%s,kv_scale=%.6g%s: %s\n", mlav_backend_name(b), mode,
               lse_null ? ",lse=NULL" : "", (double)p->kv_scale,
               p->c.kv_scale_ptr ? " (kv_scale_ptr)" : "", msg);
    else
        printf("  ok %s %s%s: %s\n", mlav_backend_name(b), mode, lse_null ? ",lse=NULL" : "",
               msg);
}

/* ---- the test: one backend, one case -------------------------------------------------------- */

typedef struct entry {
    size_t k;
    mlav_backend b;
} entry;

static void test_backends_case(void **state)
{
    const entry *e = *state;
    const mlav_backend b = e->b;
    mlav_context *ctx = tu_context_or_skip(b);
    tu_problem *p = case_problem(e->k);
    char name[512];
    tu_case_name(&p->c, name, sizeof name);
    mlav_plan *plan = NULL;
    mlav_status s = mlav_plan_create(ctx, &p->prob, &plan);
    if (s == MLAV_ERR_UNSUPPORTED && may_refuse(b, p)) {
        print_message("%s [%s]: unsupported: %s: skipped\n", mlav_backend_name(b), name,
                      mlav_last_error(NULL));
        mlav_context_free(ctx);
        skip();
    }
    if (s != MLAV_OK)
        fail_msg("%s [%s]: mlav_plan_create returned %s: %s", mlav_backend_name(b), name,
                 mlav_status_string(s), mlav_last_error(NULL));
    assert_int_equal(mlav_plan_backend(plan), b);
    check_run(plan, b, p, 0, cases[e->k].lse_null, name);
    if (is_cuda(b)) /* the CUDA backends take device tensors too (run's asynchronous form) */
        check_run(plan, b, p, 1, cases[e->k].lse_null, name);
    mlav_plan_free(plan);
    mlav_context_free(ctx);
}

int main(void)
{
    static entry entries[N_CASES * N_BACKENDS];
    static char names[N_CASES * N_BACKENDS][400];
    static struct CMUnitTest tests[N_CASES * N_BACKENDS];
    size_t n = 0;
    for (size_t k = 0; k < N_CASES; k++) {
        char buf[300];
        tu_case_name(&cases[k].c, buf, sizeof buf);
        char *seed = strstr(buf, ",seed="); /* the seed is drawn when the run starts */
        if (seed)
            *seed = '\0';
        for (size_t j = 0; j < N_BACKENDS; j++, n++) {
            entries[n] = (entry){k, backends[j]};
            snprintf(names[n], sizeof names[n], "test_backends(%s,%s%s)",
                     mlav_backend_name(backends[j]), buf,
                     cases[k].lse_null ? ",lse=NULL" : "");
            tests[n] = (struct CMUnitTest){names[n], test_backends_case, NULL, NULL, &entries[n]};
        }
    }
    /* MLAV_TEST_FILTER=*cpu,* (wildcards * and ?) runs a subset */
    const char *filter = getenv("MLAV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return _cmocka_run_group_tests("backends", tests, n, group_setup, group_teardown);
}
