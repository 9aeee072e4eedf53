/* mlaverify bench: times the verify backends on the DESIGN.md protocol (section 5) and prints the
 * classic table (section 7) with TFLOP/s, GB/s and the fractions of ceilings measured in the
 * same run; optionally a CSV for bench/plot.gp. Verify runs use the public API only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <omp.h>

#include "../common/dtype.h"
#include "cli.h"
#include "mlaverify.h"
#ifdef MLAV_WITH_CUDA
#include "bench_cuda.h"
#endif

#define BENCH_MAX_LIST 32
#define BENCH_MAX_BACKENDS 4

/* One benchmark point. Dl, Dr fixed for a run; all requests of a batch have the same lengths. */
typedef struct bench_config {
    int32_t B, H, q_len, page_size;
    int64_t prefix;
    mlav_dtype dtype;
} bench_config;

/* One (config, backend) measurement. */
typedef struct bench_result {
    mlav_status status;     /* MLAV_OK, or why it is "n/a" (MLAV_ERR_UNSUPPORTED) */
    double time_us;         /* median */
    int reps;
    double tflops, gbps, frac_mma, frac_bw;
} bench_result;

typedef struct bench_opts {
    mlav_backend backends[BENCH_MAX_BACKENDS];
    int num_backends;
    int32_t Dl, Dr;
    int reps, min_reps;
    double max_seconds;
    const char *csv;
    int tree;               /* 1: random draft tree mask; 0: causal chain (tree_mask = NULL) */
    int warm_l2;            /* 1: no L2 flush before GPU replays (diagnostic, --l2 warm) */
    double spread;          /* --prefix-spread: request b's prefix is prefix * (1 + spread * u_b),
                               u_b uniform in [-1, 1] (0: every request the same) */
    uint64_t seed;
} bench_opts;

/* ---- small helpers ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: mlaverify bench [--preset reference|full|cpu] [--backend LIST]\n"
        "                       [--heads LIST] [--qlen LIST] [--prefix LIST] [--batch N]\n"
        "                       [--page-size N] [--dtype bf16|f16|f32] [--tree tree|chain]\n"
        "                       [--reps N] [--min-reps N] [--max-seconds S] [--csv FILE]\n"
        "                       [--l2 flush|warm] [--prefix-spread F] [--list]\n"
        "  --backend LIST    comma-separated: cuda, cuda-naive, cpu, reference\n"
        "                    (default: cuda,cuda-naive with a CUDA device, else cpu)\n"
        "  --preset NAME     reference: B=1 H=64 bf16 page_size 1 (shuffled), q_len 1,9,33,\n"
        "                      prefix 256..131072 (the default with a CUDA device)\n"
        "                    full: reference plus H=16 and H=128, B=8 H=16 q_len 9 prefix 4096\n"
        "                      and 32768, and page_size 64 at the reference workload\n"
        "                    cpu: full's points up to prefix 16384 (49 points: B=1 H=16,64,128\n"
        "                      q_len 1,9,33 prefix 256..16384, B=8 H=16 q_len 9 prefix 4096,\n"
        "                      page_size 64 at H=64), for the CPU backend (the default without\n"
        "                      a CUDA device)\n"
        "                    a preset cannot be combined with --heads/--qlen/--prefix/--batch/\n"
        "                    --page-size/--dtype/--prefix-spread, which build a grid of their own\n"
        "  --reps N          replays per point (default 50); a point stops earlier once\n"
        "                    --max-seconds (default 2) of timing have passed, but never before\n"
        "                    --min-reps (default 10)\n"
        "  --csv FILE        one row per backend and point:\n"
        "                    backend,gpu,batch,heads,q_len,prefix,page_size,dtype,time_us,tflops,\n"
        "                    gbps,frac_mma,frac_bw\n"
        "  --prefix-spread F request b's prefix is prefix x (1 + F u_b), u_b drawn uniformly from\n"
        "                    [-1, 1] (seeded: the same batch every run), 0 <= F < 1: an engine's\n"
        "                    batch of mixed lengths; the prefix column is the nominal (mean)\n"
        "                    prefix, FLOPs and bytes count the drawn lengths\n"
        "  --l2 warm         do not flush the L2 before each GPU replay (a diagnostic: shows how\n"
        "                    much of a short point is cold misses; default flush)\n"
        "  --list            print the points (batch heads q_len prefix page_size dtype) and exit\n"
        "GPU times: CUDA-graph replays of mlav_run on device tensors, L2 flushed before each,\n"
        "CUDA events, median. CPU times: clock_gettime, median. Ceilings are measured in the same\n"
        "run: mma.sync BF16 rate and device copy bandwidth on a GPU; on the CPU, cblas_sgemm\n"
        "M=576 N=16393 K=1088 (the H=64 q_len 9 prefix 16384 score product) and a parallel memcpy.\n");
}

static int parse_int_list(const char *s, int64_t *out, int max, int64_t lo, const char *what)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < lo || n == max) {
            fprintf(stderr, "mlaverify bench: bad %s list '%s'\n", what, s);
            return -1;
        }
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (n == 0)
        fprintf(stderr, "mlaverify bench: empty %s list\n", what);
    return n ? n : -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int is_gpu_backend(mlav_backend b)
{
    return b == MLAV_BACKEND_CUDA || b == MLAV_BACKEND_CUDA_NAIVE;
}

/* Commas would break the CSV. */
static void sanitize(char *s)
{
    for (; *s; s++)
        if (*s == ',' || *s == '\n')
            *s = ' ';
}

/* ---- the work of one config --------------------------------------------------------------- */

/* Request b's prefix: the config's, or with a spread, drawn around it (the same batch for every
 * run and backend of a config). */
static int64_t request_prefix(const bench_config *c, const bench_opts *o, int b)
{
    if (o->spread <= 0.0)
        return c->prefix;
    uint64_t x = o->seed ^ 0x9E3779B97F4A7C15ull * (uint64_t)(b + 1) ^ (uint64_t)c->prefix;
    const double u = (double)(splitmix64(&x) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    const int64_t p = llround((double)c->prefix * (1.0 + o->spread * u));
    return p < 0 ? 0 : p;
}

/* Host-side description shared by all backends of a config: lengths, a shuffled page table
 * (so KV rows are scattered like SGLang's token pool) and the draft-tree mask. */
typedef struct bench_layout {
    int32_t q_indptr[257], kv_lens[256];
    int32_t max_pages, words;
    int64_t num_pages;
    int32_t *page_table;     /* [B, max_pages]: request b's pages, then zeros it never reads */
    double flops, bytes;     /* the work: 2 H q_len kv_len (2 Dl + Dr) summed over requests; the
                                bytes that must move once: every prefix's KV, q and out */
    uint32_t *tree_mask;     /* [T, words] or NULL */
    mlav_problem prob;
    size_t q_elems, kv_elems, out_elems, lse_elems;
} bench_layout;

static int layout_make(bench_layout *L, const bench_config *c, const bench_opts *o)
{
    memset(L, 0, sizeof *L);
    if (c->B > 256) {
        fprintf(stderr, "mlaverify bench: batch %d > 256\n", c->B);
        return -1;
    }
    int64_t pages[256], max_pages = 0, num_pages = 0;
    const int32_t T = c->B * c->q_len;
    const double es = (double)mlav_dtype_size(c->dtype), row = o->Dl + o->Dr;
    for (int b = 0; b < c->B; b++) {
        const int64_t prefix = request_prefix(c, o, b), kv = prefix + c->q_len;
        if (kv > INT32_MAX) {
            fprintf(stderr, "mlaverify bench: too long a request\n");
            return -1;
        }
        L->q_indptr[b + 1] = L->q_indptr[b] + c->q_len;
        L->kv_lens[b] = (int32_t)kv;
        pages[b] = (kv + c->page_size - 1) / c->page_size;
        max_pages = pages[b] > max_pages ? pages[b] : max_pages;
        num_pages += pages[b];
        L->flops += 2.0 * c->H * c->q_len * (double)kv * (double)(o->Dl + o->Dr + o->Dl);
        L->bytes += es * (double)prefix * row;
    }
    L->bytes += es * (double)T * c->H * (row + o->Dl);
    if (max_pages > INT32_MAX || num_pages > INT32_MAX) {
        fprintf(stderr, "mlaverify bench: too many pages\n");
        return -1;
    }
    L->max_pages = (int32_t)max_pages;
    L->num_pages = num_pages;
    uint64_t rng = o->seed ^ (uint64_t)c->prefix * 31u ^ (uint64_t)c->q_len;
    /* Fisher-Yates over all page ids, dealt out to the requests in order */
    int32_t *ids = malloc((size_t)num_pages * sizeof(int32_t));
    L->page_table = calloc((size_t)c->B * (size_t)max_pages, sizeof(int32_t));
    if (!ids || !L->page_table) {
        free(ids);
        return -1;
    }
    for (int64_t i = 0; i < num_pages; i++)
        ids[i] = (int32_t)i;
    for (int64_t i = num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(&rng) % (uint64_t)(i + 1));
        int32_t tmp = ids[i];
        ids[i] = ids[j];
        ids[j] = tmp;
    }
    for (int64_t b = 0, k = 0; b < c->B; k += pages[b], b++)
        memcpy(L->page_table + b * max_pages, ids + k, (size_t)pages[b] * sizeof(int32_t));
    free(ids);
    L->words = mlav_tree_mask_words(c->q_len);
    if (o->tree && c->q_len > 0) {
        L->tree_mask = calloc((size_t)T * (size_t)L->words, sizeof(uint32_t));
        int32_t *parents = malloc((size_t)c->q_len * sizeof(int32_t));
        if (!L->tree_mask || !parents) {
            free(parents);
            return -1;
        }
        /* half the nodes continue the previous one, half branch off an earlier node: a tree
         * with both depth and width, like EAGLE's */
        for (int b = 0; b < c->B; b++) {
            parents[0] = -1;
            for (int i = 1; i < c->q_len; i++)
                parents[i] = (splitmix64(&rng) & 1) ? i - 1 : (int32_t)(splitmix64(&rng) % (uint64_t)i);
            if (mlav_tree_mask_from_parents(c->q_len, parents, L->words,
                                            L->tree_mask + (size_t)b * c->q_len * L->words) != MLAV_OK) {
                fprintf(stderr, "mlaverify bench: tree mask: %s\n", mlav_last_error(NULL));
                free(parents);
                return -1;
            }
        }
        free(parents);
    }
    L->prob = (mlav_problem){.num_heads = c->H, .d_latent = o->Dl, .d_rope = o->Dr,
                             .softmax_scale = 1.0f / sqrtf(192.0f), .dtype = c->dtype,
                             .page_size = c->page_size, .batch = c->B,
                             .q_indptr = L->q_indptr, .kv_lens = L->kv_lens,
                             .max_pages = L->max_pages};
    size_t W = (size_t)(o->Dl + o->Dr);
    L->q_elems = (size_t)T * (size_t)c->H * W;
    L->kv_elems = (size_t)L->num_pages * (size_t)c->page_size * W;
    L->out_elems = (size_t)T * (size_t)c->H * (size_t)o->Dl;
    L->lse_elems = (size_t)T * (size_t)c->H;
    return 0;
}

static void layout_free(bench_layout *L)
{
    free(L->page_table);
    free(L->tree_mask);
}

/* ---- CPU: host tensors, clock_gettime, sgemm and memcpy ceilings --------------------------- */

static void host_fill(void *p, size_t n, mlav_dtype d, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = seed + i;
        float v = (float)((double)(splitmix64(&x) >> 40) / 16777216.0 * 2.0 - 1.0);
        if (d == MLAV_DTYPE_F32)
            ((float *)p)[i] = v;
        else if (d == MLAV_DTYPE_BF16)
            ((uint16_t *)p)[i] = mlav_f32_to_bf16(v);
        else
            ((uint16_t *)p)[i] = mlav_f32_to_f16(v);
    }
}

static void *host_alloc(size_t bytes)
{
    /* 256-byte aligned, as mlav_run's workspace must be; size rounded to the alignment */
    size_t n = (bytes + 255) / 256 * 256;
    return aligned_alloc(256, n ? n : 256);
}

typedef struct host_tensors {
    void *q, *kv, *out;
    float *lse;
} host_tensors;

static int host_tensors_make(host_tensors *h, const bench_layout *L, mlav_dtype d, uint64_t seed)
{
    size_t es = mlav_dtype_size(d);
    h->q = host_alloc(L->q_elems * es);
    h->kv = host_alloc(L->kv_elems * es);
    h->out = host_alloc(L->out_elems * es);
    h->lse = host_alloc(L->lse_elems * sizeof(float));
    if (!h->q || !h->kv || !h->out || !h->lse)
        return -1;
    host_fill(h->q, L->q_elems, d, seed);
    host_fill(h->kv, L->kv_elems, d, seed ^ 0x5bd1e995u);
    return 0;
}

static void host_tensors_free(host_tensors *h)
{
    free(h->q), free(h->kv), free(h->out), free(h->lse);
    memset(h, 0, sizeof *h);
}

/* Time a plan on host tensors: one untimed run, then reps by the same stopping rule as the GPU. */
static mlav_status cpu_time(const mlav_plan *plan, const mlav_tensors *t, const bench_opts *o,
                            double *time_us, int *reps)
{
    size_t wsb = mlav_plan_workspace_bytes(plan);
    void *ws = wsb ? host_alloc(wsb) : NULL;
    if (wsb && !ws)
        return MLAV_ERR_OUT_OF_MEMORY;
    mlav_status s = mlav_run(plan, t, ws, wsb, NULL);
    double *us = s == MLAV_OK ? malloc((size_t)o->reps * sizeof(double)) : NULL;
    if (s == MLAV_OK && !us)
        s = MLAV_ERR_OUT_OF_MEMORY;
    int n = 0;
    double t0 = now_s();
    while (s == MLAV_OK) {
        double a = now_s();
        s = mlav_run(plan, t, ws, wsb, NULL);
        us[n++] = 1e6 * (now_s() - a);
        if (n >= o->min_reps && (n >= o->reps || now_s() - t0 >= o->max_seconds))
            break;
    }
    if (s == MLAV_OK) {
        *time_us = median(us, n);
        *reps = n;
    }
    free(us);
    free(ws);
    return s;
}

/* The CPU FLOP ceiling: one cblas_sgemm of the verify's score-product shape at the reference
 * point H=64 q_len 9 prefix 16384 (M = H*q_len = 576 rows, N = kv_len = 16393 columns,
 * K = W + Dl = 1088), row-major, fp32. One untimed warm-up call, then best of 3, FLOP/s. Every
 * CPU row's frac_mma divides by this one host-wide rate, as GPU rows divide by the mma.sync rate. */
enum { SGEMM_M = 576, SGEMM_N = 16393, SGEMM_K = 1088 };

static double cpu_sgemm_rate(void)
{
    const int M = SGEMM_M, N = SGEMM_N, K = SGEMM_K;
    float *A = host_alloc((size_t)M * K * sizeof(float));
    float *Bm = host_alloc((size_t)K * N * sizeof(float));
    float *C = host_alloc((size_t)M * N * sizeof(float));
    double best = 0.0;
    if (A && Bm && C) {
        for (size_t i = 0; i < (size_t)M * K; i++)
            A[i] = (float)(i % 7) * 0.125f;
        for (size_t i = 0; i < (size_t)K * N; i++)
            Bm[i] = (float)(i % 5) * 0.25f;
        for (int r = 0; r < 4; r++) {
            double a = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, Bm, N,
                        0.0f, C, N);
            double rate = 2.0 * M * (double)N * K / (now_s() - a);
            if (r > 0 && rate > best) /* r = 0 warms the threads up */
                best = rate;
        }
    }
    free(A), free(Bm), free(C);
    return best;
}

/* Host memory bandwidth: parallel memcpy of 256 MiB, bytes read + written per second. */
static double cpu_copy_rate(void)
{
    const size_t bytes = (size_t)256 << 20;
    char *src = host_alloc(bytes), *dst = host_alloc(bytes);
    double best = 0.0;
    if (src && dst) {
        int nt = omp_get_max_threads();
        memset(src, 1, bytes);
        memset(dst, 0, bytes);
        for (int r = 0; r < 4; r++) {
            double a = now_s();
#pragma omp parallel for schedule(static)
            for (int i = 0; i < nt; i++) {
                size_t chunk = bytes / (size_t)nt, off = (size_t)i * chunk;
                memcpy(dst + off, src + off, i == nt - 1 ? bytes - off : chunk);
            }
            double rate = 2.0 * (double)bytes / (now_s() - a);
            if (r > 0 && rate > best)
                best = rate;
        }
    }
    free(src), free(dst);
    return best;
}

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ')
                    p++;
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, len, "%s", p);
            }
            break;
        }
    }
    fclose(f);
    sanitize(buf);
}

/* ---- presets ---------------------------------------------------------------------------------- */

static const int64_t ref_prefixes[] = {256, 1024, 4096, 16384, 65536, 131072};
static const int32_t ref_qlens[] = {1, 9, 33};

/* Append the grid heads x q_lens x prefixes (q_len outer, prefix inner: one CSV run per line). */
static int add_grid(bench_config *out, int n, int max, int32_t B, int32_t H, int32_t page,
                    mlav_dtype d, const int32_t *qs, int nq, const int64_t *ps, int np)
{
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < np; j++) {
            if (n == max)
                return n;
            out[n++] = (bench_config){.B = B, .H = H, .q_len = qs[i], .page_size = page,
                                      .prefix = ps[j], .dtype = d};
        }
    return n;
}

static int preset_configs(const char *name, bench_config *out, int max)
{
    int n = 0;
    const mlav_dtype bf = MLAV_DTYPE_BF16;
    if (!strcmp(name, "reference") || !strcmp(name, "full")) {
        n = add_grid(out, n, max, 1, 64, 1, bf, ref_qlens, 3, ref_prefixes, 6);
        if (!strcmp(name, "full")) {
            n = add_grid(out, n, max, 1, 16, 1, bf, ref_qlens, 3, ref_prefixes, 6);
            n = add_grid(out, n, max, 1, 128, 1, bf, ref_qlens, 3, ref_prefixes, 6);
            static const int32_t q9[] = {9};
            static const int64_t batch_ps[] = {4096, 32768};
            n = add_grid(out, n, max, 8, 16, 1, bf, q9, 1, batch_ps, 2);
            n = add_grid(out, n, max, 1, 64, 64, bf, ref_qlens, 3, ref_prefixes, 6);
        }
        return n;
    }
    if (!strcmp(name, "cpu")) {
        /* issue 7: the CPU table covers full's points up to prefix 16384, in full's order */
        n = preset_configs("full", out, max);
        int k = 0;
        for (int i = 0; i < n; i++)
            if (out[i].prefix <= 16384)
                out[k++] = out[i];
        return k;
    }
    fprintf(stderr, "mlaverify bench: unknown preset '%s' (reference, full, cpu)\n", name);
    return -1;
}

/* ---- output ----------------------------------------------------------------------------------- */

static void fmt_time(char *buf, size_t len, const bench_result *r)
{
    if (r && r->status == MLAV_OK)
        snprintf(buf, len, "%.1f", r->time_us);
    else
        snprintf(buf, len, "n/a");
}

static int write_csv(const char *path, const bench_opts *o, const bench_config *cfg, int ncfg,
                     bench_result *res, const char *gpu_name, const char *cpu_name)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mlaverify bench: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "backend,gpu,batch,heads,q_len,prefix,page_size,dtype,time_us,tflops,gbps,"
               "frac_mma,frac_bw\n");
    /* backend outer: each (backend, q_len) line of the plot is a contiguous block of rows */
    for (int b = 0; b < o->num_backends; b++)
        for (int i = 0; i < ncfg; i++) {
            const bench_config *c = &cfg[i];
            const bench_result *r = &res[i * o->num_backends + b];
            fprintf(f, "%s,%s,%d,%d,%d,%lld,%d,%s,", mlav_backend_name(o->backends[b]),
                    is_gpu_backend(o->backends[b]) ? gpu_name : cpu_name, c->B, c->H, c->q_len,
                    (long long)c->prefix, c->page_size, mlav_dtype_name(c->dtype));
            if (r->status == MLAV_OK)
                fprintf(f, "%.3f,%.3f,%.2f,%.4f,%.4f\n", r->time_us, r->tflops, r->gbps,
                        r->frac_mma, r->frac_bw);
            else
                fprintf(f, "nan,nan,nan,nan,nan\n");
        }
    if (fclose(f) != 0) {
        fprintf(stderr, "mlaverify bench: error writing %s\n", path);
        return -1;
    }
    return 0;
}

/* ---- the command ------------------------------------------------------------------------------ */

int mlav_cmd_bench(int argc, char **argv)
{
    bench_opts o = {.Dl = 512, .Dr = 64, .reps = 50, .min_reps = 10, .max_seconds = 2.0,
                    .tree = 1, .seed = 0x6d6c6176u};
    const char *preset = NULL, *backend_list = NULL;
    int64_t heads[BENCH_MAX_LIST], qlens[BENCH_MAX_LIST], prefixes[BENCH_MAX_LIST];
    int nh = 0, nq = 0, np = 0, grid_opts = 0, list_only = 0;
    int64_t batch = 1, page = 1;
    mlav_dtype dtype = MLAV_DTYPE_BF16;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--list")) {
            list_only = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mlaverify bench: '%s' needs a value (or is unknown)\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        int64_t one[1];
        if (!strcmp(a, "--preset"))
            preset = v;
        else if (!strcmp(a, "--backend"))
            backend_list = v;
        else if (!strcmp(a, "--heads"))
            nh = parse_int_list(v, heads, BENCH_MAX_LIST, 1, "heads"), grid_opts = 1;
        else if (!strcmp(a, "--qlen"))
            nq = parse_int_list(v, qlens, BENCH_MAX_LIST, 1, "qlen"), grid_opts = 1;
        else if (!strcmp(a, "--prefix"))
            np = parse_int_list(v, prefixes, BENCH_MAX_LIST, 0, "prefix"), grid_opts = 1;
        else if (!strcmp(a, "--batch")) {
            if (parse_int_list(v, one, 1, 1, "batch") != 1)
                return 2;
            batch = one[0], grid_opts = 1;
        } else if (!strcmp(a, "--page-size")) {
            if (parse_int_list(v, one, 1, 1, "page-size") != 1)
                return 2;
            page = one[0], grid_opts = 1;
        } else if (!strcmp(a, "--dtype")) {
            grid_opts = 1;
            if (!strcmp(v, "bf16"))
                dtype = MLAV_DTYPE_BF16;
            else if (!strcmp(v, "f16"))
                dtype = MLAV_DTYPE_F16;
            else if (!strcmp(v, "f32"))
                dtype = MLAV_DTYPE_F32;
            else {
                fprintf(stderr, "mlaverify bench: unknown dtype '%s' (bf16, f16, f32)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--tree")) {
            if (strcmp(v, "tree") && strcmp(v, "chain")) {
                fprintf(stderr, "mlaverify bench: --tree takes tree or chain\n");
                return 2;
            }
            o.tree = !strcmp(v, "tree");
        } else if (!strcmp(a, "--reps")) {
            if (parse_int_list(v, one, 1, 1, "reps") != 1)
                return 2;
            o.reps = (int)one[0];
        } else if (!strcmp(a, "--min-reps")) {
            if (parse_int_list(v, one, 1, 1, "min-reps") != 1)
                return 2;
            o.min_reps = (int)one[0];
        } else if (!strcmp(a, "--max-seconds")) {
            char *end;
            o.max_seconds = strtod(v, &end);
            if (*end || !(o.max_seconds >= 0.0)) {
                fprintf(stderr, "mlaverify bench: bad --max-seconds '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--l2")) {
            if (strcmp(v, "flush") && strcmp(v, "warm")) {
                fprintf(stderr, "mlaverify bench: --l2 takes flush or warm\n");
                return 2;
            }
            o.warm_l2 = !strcmp(v, "warm");
        } else if (!strcmp(a, "--prefix-spread")) {
            char *end;
            o.spread = strtod(v, &end);
            if (*end || !(o.spread >= 0.0 && o.spread < 1.0)) {
                fprintf(stderr, "mlaverify bench: --prefix-spread takes F with 0 <= F < 1\n");
                return 2;
            }
            grid_opts = 1;
        } else if (!strcmp(a, "--csv"))
            o.csv = v;
        else {
            fprintf(stderr, "mlaverify bench: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (nh < 0 || nq < 0 || np < 0)
            return 2;
    }
    if (o.min_reps > o.reps)
        o.min_reps = o.reps;
    if (preset && grid_opts) {
        fprintf(stderr, "mlaverify bench: --preset cannot be combined with grid options\n");
        return 2;
    }
    int ndev = mlav_cuda_device_count();

    /* backends */
    char list[256];
    snprintf(list, sizeof list, "%s", backend_list ? backend_list : ndev > 0 ? "cuda,cuda-naive" : "cpu");
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        mlav_backend b;
        if (mlav_backend_from_name(tok, &b) != MLAV_OK || b == MLAV_BACKEND_AUTO) {
            fprintf(stderr, "mlaverify bench: unknown backend '%s' (cuda, cuda-naive, cpu, reference)\n", tok);
            return 2;
        }
        if (o.num_backends == BENCH_MAX_BACKENDS) {
            fprintf(stderr, "mlaverify bench: at most %d backends\n", BENCH_MAX_BACKENDS);
            return 2;
        }
        if (!mlav_backend_compiled(b)) {
            fprintf(stderr, "mlaverify bench: backend %s is not compiled into this build\n", tok);
            return 2;
        }
        if (is_gpu_backend(b) && ndev == 0) {
            fprintf(stderr, "mlaverify bench: backend %s needs a CUDA device (cc >= 8.0); none found\n", tok);
            return 2;
        }
        o.backends[o.num_backends++] = b;
    }
    int any_gpu = 0;
    for (int b = 0; b < o.num_backends; b++)
        any_gpu |= is_gpu_backend(o.backends[b]);
#ifndef MLAV_WITH_CUDA
    if (any_gpu) {
        fprintf(stderr, "mlaverify bench: this build has no CUDA support\n");
        return 2;
    }
#endif

    /* configs */
    enum { MAX_CFG = 512 };
    static bench_config cfg[MAX_CFG];
    int ncfg;
    if (preset || !grid_opts) {
        ncfg = preset_configs(preset ? preset : any_gpu ? "reference" : "cpu", cfg, MAX_CFG);
        if (ncfg < 0)
            return 2;
    } else {
        int32_t hs[BENCH_MAX_LIST], qs[BENCH_MAX_LIST];
        if (!nh)
            heads[0] = 64, nh = 1;
        if (!nq)
            qlens[0] = 1, qlens[1] = 9, qlens[2] = 33, nq = 3;
        if (!np) {
            for (int i = 0; i < 6; i++)
                prefixes[i] = ref_prefixes[i];
            np = any_gpu ? 6 : 3;
        }
        for (int i = 0; i < nh; i++)
            hs[i] = (int32_t)heads[i];
        for (int i = 0; i < nq; i++)
            qs[i] = (int32_t)qlens[i];
        ncfg = 0;
        for (int i = 0; i < nh; i++)
            ncfg = add_grid(cfg, ncfg, MAX_CFG, (int32_t)batch, hs[i], (int32_t)page, dtype, qs,
                            nq, prefixes, np);
    }

    if (list_only) {
        printf("# batch heads q_len prefix page_size dtype (%d points)\n", ncfg);
        for (int i = 0; i < ncfg; i++)
            printf("%d %d %d %lld %d %s\n", cfg[i].B, cfg[i].H, cfg[i].q_len,
                   (long long)cfg[i].prefix, cfg[i].page_size, mlav_dtype_name(cfg[i].dtype));
        return 0;
    }

    bench_result *res = calloc((size_t)ncfg * (size_t)o.num_backends, sizeof *res);
    mlav_context *ctx[BENCH_MAX_BACKENDS] = {0};
    if (!res)
        return 2;
    for (int b = 0; b < o.num_backends; b++) {
        mlav_status s = mlav_context_create(&ctx[b], o.backends[b]);
        if (s != MLAV_OK) {
            fprintf(stderr, "mlaverify bench: %s context: %s: %s\n", mlav_backend_name(o.backends[b]),
                    mlav_status_string(s), mlav_last_error(NULL));
            return 2;
        }
    }

    /* header lines and ceilings */
    char gpu_name[256] = "none", cpu_name[256];
    cpu_model(cpu_name, sizeof cpu_name);
    double mma_tflops = 0.0, copy_gbps = 0.0;
    printf("# mlaverify bench %s: Dl=%d Dr=%d, %s mask, shuffled pages, %d..%d reps (cap %.1f s/point)\n",
           mlav_version_string(), o.Dl, o.Dr, o.tree ? "random draft-tree" : "causal chain",
           o.min_reps, o.reps, o.max_seconds);
#ifdef MLAV_WITH_CUDA
    if (any_gpu) {
        bench_gpu_info gi;
        bench_gpu_open(&gi);
        snprintf(gpu_name, sizeof gpu_name, "%s", gi.name);
        sanitize(gpu_name);
        printf("# gpu: %s, cc %d.%d, %d SMs, L2 %.0f MiB, %.0f GiB; driver %s (CUDA %d.%d), "
               "runtime %d.%d\n",
               gi.name, gi.cc_major, gi.cc_minor, gi.sm_count, gi.l2_bytes / 1048576.0,
               gi.mem_bytes / 1073741824.0, gi.driver, gi.driver_api / 1000,
               gi.driver_api % 1000 / 10, gi.runtime_api / 1000, gi.runtime_api % 1000 / 10);
        fflush(stdout);
        mma_tflops = bench_gpu_mma_tflops();
        copy_gbps = bench_gpu_copy_gbps();
        printf("# ceilings (measured now): mma.sync m16n8k16 bf16 %.1f TFLOP/s (register-only); "
               "device copy %.0f GB/s (read + write, 1 GiB)\n", mma_tflops, copy_gbps);
        if (o.warm_l2)
            printf("# GPU times: CUDA-graph replay of mlav_run, L2 NOT flushed (--l2 warm: a "
                   "diagnostic, not the protocol), CUDA events, median\n");
        else
            printf("# GPU times: CUDA-graph replay of mlav_run, L2 (%.0f MiB) flushed by a %.0f "
                   "MiB read before each, CUDA events, median\n", gi.l2_bytes / 1048576.0,
                   2.0 * gi.l2_bytes / 1048576.0);
    }
#endif
    int any_cpu = 0;
    for (int b = 0; b < o.num_backends; b++)
        any_cpu |= !is_gpu_backend(o.backends[b]);
    double cpu_bw = 0.0, sgemm = 0.0;
    if (any_cpu) {
        printf("# cpu: %s, %d OpenMP threads; clock_gettime, median\n", cpu_name,
               omp_get_max_threads());
        fflush(stdout);
        cpu_bw = cpu_copy_rate();
        sgemm = cpu_sgemm_rate();
        printf("# cpu ceilings (measured now): cblas_sgemm M=%d N=%d K=%d fp32 %.1f GFLOP/s "
               "(best of 3); memcpy %.1f GB/s (read + write, 256 MiB)\n", SGEMM_M, SGEMM_N,
               SGEMM_K, sgemm / 1e9, cpu_bw / 1e9);
    }

    /* table roles: flash = the fast backend (cuda, else cpu), naive = its baseline */
    int flash = -1, naive = -1;
    for (int b = 0; b < o.num_backends; b++) {
        mlav_backend id = o.backends[b];
        if (flash < 0 && (id == MLAV_BACKEND_CUDA || id == MLAV_BACKEND_CPU))
            flash = b;
        if (naive < 0 && (id == MLAV_BACKEND_CUDA_NAIVE || id == MLAV_BACKEND_REFERENCE))
            naive = b;
    }
    if (flash < 0)
        flash = naive, naive = -1;
    printf("# flash_us = %s, naive_us = %s; TFLOP/s, GB/s and fractions of the ceilings are flash's; "
           "reps = naive/flash\n", mlav_backend_name(o.backends[flash]),
           naive >= 0 ? mlav_backend_name(o.backends[naive]) : "(none)");
    fflush(stdout);

    int rc = 0;
    const bench_config *group = NULL;
    for (int i = 0; i < ncfg; i++) {
        const bench_config *c = &cfg[i];
        if (!group || group->B != c->B || group->H != c->H || group->page_size != c->page_size ||
            group->dtype != c->dtype) {
            group = c;
            printf("\n## B=%d H=%d page_size=%d %s", c->B, c->H, c->page_size,
                   mlav_dtype_name(c->dtype));
            if (o.spread > 0.0)
                printf(", each request's prefix drawn from prefix x [%.2f, %.2f]", 1.0 - o.spread,
                       1.0 + o.spread);
            printf("\n");
            printf("%7s %6s %8s %11s %11s %8s %8s %8s %8s %8s %7s\n", "streams", "q_len", "prefix",
                   "naive_us", "flash_us", "speedup", "TFLOP/s", "GB/s", "frac_mma", "frac_bw",
                   "reps");
        }
        bench_layout L;
        if (layout_make(&L, c, &o) != 0) {
            fprintf(stderr, "mlaverify bench: out of host memory\n");
            return 2;
        }
        const double flops = L.flops, bytes = L.bytes;
        uint64_t seed = o.seed + (uint64_t)i * 1000003u;
#ifdef MLAV_WITH_CUDA
        size_t es = mlav_dtype_size(c->dtype);
        mlav_tensors dt = {0};
        void *dq = NULL, *dkv = NULL, *dout = NULL, *dlse = NULL, *dpt = NULL, *dmask = NULL;
        if (any_gpu) {
            dq = bench_gpu_alloc(L.q_elems * es);
            dkv = bench_gpu_alloc(L.kv_elems * es);
            dout = bench_gpu_alloc(L.out_elems * es);
            dlse = bench_gpu_alloc(L.lse_elems * sizeof(float));
            const size_t ptb = (size_t)c->B * (size_t)L.max_pages * sizeof(int32_t);
            dpt = bench_gpu_alloc(ptb);
            bench_gpu_fill_random(dq, L.q_elems, c->dtype, seed);
            bench_gpu_fill_random(dkv, L.kv_elems, c->dtype, seed ^ 0x5bd1e995u);
            bench_gpu_upload(dpt, L.page_table, ptb);
            if (L.tree_mask) {
                size_t mb = (size_t)c->B * c->q_len * L.words * sizeof(uint32_t);
                dmask = bench_gpu_alloc(mb);
                bench_gpu_upload(dmask, L.tree_mask, mb);
            }
            dt = (mlav_tensors){.memory = MLAV_MEM_DEVICE, .q = dq, .kv_cache = dkv,
                                .num_pages = L.num_pages, .page_table = dpt, .tree_mask = dmask,
                                .out = dout, .lse = dlse};
        }
#endif
        host_tensors ht = {0};
        mlav_tensors htt = {0};
        if (any_cpu) {
            if (host_tensors_make(&ht, &L, c->dtype, seed) != 0) {
                fprintf(stderr, "mlaverify bench: out of host memory\n");
                return 2;
            }
            htt = (mlav_tensors){.memory = MLAV_MEM_HOST, .q = ht.q, .kv_cache = ht.kv,
                                 .num_pages = L.num_pages, .page_table = L.page_table,
                                 .tree_mask = L.tree_mask, .out = ht.out, .lse = ht.lse};
        }

        for (int b = 0; b < o.num_backends; b++) {
            bench_result *r = &res[i * o.num_backends + b];
            mlav_plan *plan = NULL;
            r->status = mlav_plan_create(ctx[b], &L.prob, &plan);
            int gpu = is_gpu_backend(o.backends[b]);
            if (r->status == MLAV_OK && mlav_plan_backend(plan) != o.backends[b])
                r->status = MLAV_ERR_UNSUPPORTED; /* never time a fallback under another name */
            if (r->status == MLAV_OK) {
                if (gpu) {
#ifdef MLAV_WITH_CUDA
                    size_t wsb = mlav_plan_workspace_bytes(plan);
                    void *ws = bench_gpu_alloc(wsb);
                    bench_reps rp = {o.min_reps, o.reps, o.max_seconds, o.warm_l2};
                    bench_timing tm;
                    r->status = bench_gpu_time(plan, &dt, ws, wsb, &rp, &tm);
                    bench_gpu_free(ws);
                    r->time_us = tm.median_us;
                    r->reps = tm.reps;
#endif
                } else {
                    r->status = cpu_time(plan, &htt, &o, &r->time_us, &r->reps);
                }
            }
            if (r->status != MLAV_OK && r->status != MLAV_ERR_UNSUPPORTED) {
                fprintf(stderr, "mlaverify bench: %s failed at B=%d H=%d q_len=%d prefix=%lld: %s: %s\n",
                        mlav_backend_name(o.backends[b]), c->B, c->H, c->q_len,
                        (long long)c->prefix, mlav_status_string(r->status), mlav_last_error(NULL));
                return 2;
            }
            if (r->status == MLAV_OK) {
                double sec = r->time_us * 1e-6;
                double mma = gpu ? mma_tflops * 1e12 : sgemm, bw = gpu ? copy_gbps * 1e9 : cpu_bw;
                r->tflops = flops / sec / 1e12;
                r->gbps = bytes / sec / 1e9;
                r->frac_mma = mma > 0 ? flops / sec / mma : 0.0;
                r->frac_bw = bw > 0 ? bytes / sec / bw : 0.0;
            }
            mlav_plan_free(plan);
        }

        const bench_result *rf = &res[i * o.num_backends + flash];
        const bench_result *rn = naive >= 0 ? &res[i * o.num_backends + naive] : NULL;
        char tn[32], tf[32], sp[32] = "-", reps[32];
        fmt_time(tn, sizeof tn, rn);
        fmt_time(tf, sizeof tf, rf);
        if (rn && rn->status == MLAV_OK && rf->status == MLAV_OK)
            snprintf(sp, sizeof sp, "%.1fx", rn->time_us / rf->time_us);
        char rn_s[12] = "-", rf_s[12] = "-";
        if (rn && rn->status == MLAV_OK)
            snprintf(rn_s, sizeof rn_s, "%d", rn->reps);
        if (rf->status == MLAV_OK)
            snprintf(rf_s, sizeof rf_s, "%d", rf->reps);
        snprintf(reps, sizeof reps, "%s/%s", rn_s, rf_s);
        if (rf->status == MLAV_OK)
            /* a CPU runs at tenths of a TFLOP/s: three decimals there, one on a GPU */
            printf("%7d %6d %8lld %11s %11s %8s %8.*f %8.1f %8.3f %8.3f %7s\n", c->B, c->q_len,
                   (long long)c->prefix, tn, tf, sp, is_gpu_backend(o.backends[flash]) ? 1 : 3,
                   rf->tflops, rf->gbps, rf->frac_mma, rf->frac_bw, reps);
        else
            printf("%7d %6d %8lld %11s %11s %8s %8s %8s %8s %8s %7s\n", c->B, c->q_len,
                   (long long)c->prefix, tn, tf, sp, "-", "-", "-", "-", reps);
        fflush(stdout);

#ifdef MLAV_WITH_CUDA
        if (any_gpu) {
            bench_gpu_free(dq), bench_gpu_free(dkv), bench_gpu_free(dout), bench_gpu_free(dlse);
            bench_gpu_free(dpt), bench_gpu_free(dmask);
        }
#endif
        host_tensors_free(&ht);
        layout_free(&L);
    }

    if (o.csv && write_csv(o.csv, &o, cfg, ncfg, res, gpu_name, cpu_name) != 0)
        rc = 2;
    for (int b = 0; b < o.num_backends; b++)
        mlav_context_free(ctx[b]);
#ifdef MLAV_WITH_CUDA
    if (any_gpu)
        bench_gpu_close();
#endif
    free(res);
    return rc;
}
