/* The internal interface of `mlaverify bench`, split by job: bench_options.c (the command line),
 * bench_points.c (the point lists, presets and each point's layout), bench_timing.c (host tensors
 * and the timing of one point), bench_ceilings.c (the measured ceilings and the machine lines),
 * bench_print.c (the table and the CSV); cmd_bench.c runs them in order. */
#ifndef MLAV_BENCH_PROGRAM_BENCH_H
#define MLAV_BENCH_PROGRAM_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mlaverify.h"

#define BENCH_MAX_LIST 32
#define BENCH_MAX_BACKENDS 4
#define BENCH_MAX_POINTS 512
#define BENCH_MAX_KV 2   /* --kv-dtype: the q dtype's cache and the FP8 one */
#define BENCH_KV_SAME -1 /* a --kv-dtype entry: the cache has the point's q dtype */

/* The FP8 cache's scale. The bench fills every cache with uniform values u in [-1, 1); an FP8
 * cache stores e4m3(u / BENCH_KV_SCALE). A power of two, so u / scale is exact and e4m3's rounding
 * is the only one: the FP8 cache holds the 16-bit cache's values to 3 mantissa bits, and both runs
 * of a point see the same scores (the same softmax, the same rescale votes). |u| / scale < 256
 * stays below e4m3's 448 (no saturation; an engine's amax / 448 calibration would give 1/448) and
 * puts the bytes in e4m3's normal binades 2^-6 .. 2^7, subnormal only for |u| < 2^-14. */
#define BENCH_KV_SCALE (1.0f / 256.0f)

/* The ranges of the numeric options, checked when they are parsed (bench_options.c). */
#define BENCH_MAX_HEADS 4096             /* the library's limit (validate.c) */
#define BENCH_MAX_QLEN 65536
#define BENCH_MAX_PREFIX ((int64_t)1 << 30) /* x 1.5 spread + q_len stays below 2^31 */
#define BENCH_MAX_BATCH 256              /* bench_layout's fixed arrays */
#define BENCH_MAX_PAGE_SIZE (1 << 20)    /* the library's limit */
#define BENCH_MAX_REPS 1000000

/* One benchmark point. Dl, Dr fixed for a run; all requests of a batch have the same lengths. */
typedef struct bench_config {
    int32_t B, H, q_len, page_size;
    int64_t prefix;
    mlav_dtype dtype;
    mlav_dtype kv_dtype;    /* the cache's: `dtype` itself or MLAV_DTYPE_FP8_E4M3 (--kv-dtype) */
    double spread;          /* the point's own --prefix-spread (a preset's mixed batches); < 0:
                               the command line's */
} bench_config;

/* One (config, backend) measurement. */
typedef struct bench_result {
    mlav_status status;     /* MLAV_OK, or why it is "n/a" (MLAV_ERR_UNSUPPORTED) */
    double time_us;         /* median */
    double min_us, max_us;  /* the fastest and slowest timed rep: the spread a noisy host shows */
    int reps;
    double tflops, gbps, frac_mma, frac_bw;
    /* --engine: the same point through a plan for limits (cuda only; bench_engine.c) */
    mlav_status engine_status; /* MLAV_OK when measured */
    double step_us;         /* one CUDA graph of mlav_plan_update (device lengths) + mlav_run */
    double run_us;          /* mlav_run alone on the updated workspace: each further layer */
    double exact_run_us;    /* the exact plan's mlav_run, timed in turns with run_us (the run /
                               exact ratio's denominator; time_us was timed alone) */
    double update_us;       /* mlav_plan_update alone: the device scheduler */
} bench_result;

typedef struct bench_opts {
    mlav_backend backends[BENCH_MAX_BACKENDS];
    int num_backends;
    int32_t Dl, Dr;
    int reps, min_reps;
    double max_seconds;
    const char *csv;
    const char *plot;       /* --plot FILE.png (gnuplot; bench_plot.c) */
    int tree;               /* 1: random draft tree mask; 0: causal chain (tree_mask = NULL) */
    int l2;                 /* bench_l2 (bench_cuda.h): the L2 before each GPU replay (--l2) */
    double spread;          /* --prefix-spread: request b's prefix is prefix * (1 + spread * u_b),
                               u_b uniform in [-1, 1] (0: every request the same) */
    uint64_t seed;
    double engine;          /* --engine C: also time each cuda point through a plan for limits
                               whose lengths are C >= 1 times the point's (0: not) */
    const char *engine_csv; /* --engine-csv FILE */
    int kv_columns;         /* 1: --kv-dtype given: the list, the table and the CSVs carry each
                               row's KV dtype (and the FP8 rows' speedup) */
} bench_opts;

/* The command line as parsed, before the backends and points are resolved. */
typedef struct bench_args {
    bench_opts o;
    const char *preset, *backend_list; /* NULL: not given */
    int64_t heads[BENCH_MAX_LIST], qlens[BENCH_MAX_LIST], prefixes[BENCH_MAX_LIST];
    int nh, nq, np;    /* list lengths; 0: not given */
    int grid_opts;     /* 1: a grid option was given (not allowed with a preset) */
    int list_only;     /* --list */
    int64_t batch, page;
    mlav_dtype dtype;
    int kv[BENCH_MAX_KV]; /* --kv-dtype: BENCH_KV_SAME or a mlav_dtype, in the order given */
    int nkv;              /* entries; the default is one, BENCH_KV_SAME */
} bench_args;

/* The ceilings measured in this run (0 where not measured). */
typedef struct bench_ceilings {
    double mma_tflops, copy_gbps; /* GPU: mma.sync TFLOP/s, device copy GB/s */
    double sgemm, cpu_bw;         /* CPU: cblas_sgemm FLOP/s, memcpy bytes/s */
    char gpu_name[256], cpu_name[256];
} bench_ceilings;

/* Host-side description shared by all backends of a config: lengths, a shuffled page table
 * (so KV rows are scattered like SGLang's token pool) and the draft-tree mask. */
typedef struct bench_layout {
    int32_t q_indptr[BENCH_MAX_BATCH + 1], kv_lens[BENCH_MAX_BATCH];
    int32_t max_pages, words;
    int64_t num_pages;
    size_t kv_bytes;         /* the cache's bytes: kv_elems x mlav_dtype_size(kv_dtype) */
    int32_t *page_table;     /* [B, max_pages]: request b's pages, then zeros it never reads */
    double flops, bytes;     /* the work: 2 H q_len kv_len (2 Dl + Dr) summed over requests; the
                                bytes that must move once: every prefix's KV (in the cache's
                                dtype), q and out */
    uint32_t *tree_mask;     /* [T, words] or NULL */
    mlav_problem prob;
    size_t q_elems, kv_elems, out_elems, lse_elems;
} bench_layout;

static inline uint64_t bench_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline int bench_is_gpu_backend(mlav_backend b)
{
    return b == MLAV_BACKEND_CUDA || b == MLAV_BACKEND_CUDA_NAIVE;
}

/* ---- bench_options.c ---- */
void bench_usage(FILE *f);
/* A usage error of `mlaverify bench`, in the form of the command's other subcommands (the
 * sentence, then a line pointing at --help; tests/cli/conventions.sh checks both): returns 2. */
int bench_usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* A decimal integer in [lo, hi], all of `s` (strtoll, overflow checked); on failure prints a
 * sentence naming the option and returns -1. */
int bench_parse_i64(const char *s, int64_t lo, int64_t hi, const char *opt, int64_t *out);
/* Parse argv into `a` (defaults first). Returns 0 to go on, 1 after --help (exit 0), 2 on a
 * usage error (a sentence printed). */
int bench_parse_args(int argc, char **argv, bench_args *a);
/* Resolve --backend (or the default for `ndev` devices) into a->o.backends; 0 or 2. */
int bench_resolve_backends(bench_args *a, int ndev);

/* ---- bench_points.c ---- */
/* The points of a preset or of the --heads/--qlen/--prefix grid, each once per --kv-dtype entry
 * (consecutive, in the order given); -1 after a sentence on an unknown preset or a KV dtype the
 * points' q dtype cannot have. */
int bench_points(const bench_args *a, int any_gpu, bench_config *cfg, int max);
/* 1 when two configs are the same point but for the KV dtype. */
int bench_same_point(const bench_config *a, const bench_config *b);
/* The index of cfg[i]'s point with the q dtype's cache (among its consecutive KV variants), or -1
 * when cfg[i] has that cache itself or the run has none. */
int bench_same_kv_index(const bench_config *cfg, int n, int i);
/* The layout of one point (0), or -1 (out of memory or too long; a sentence printed). Free
 * with bench_layout_free whatever it returned. */
int bench_layout_make(bench_layout *L, const bench_config *c, const bench_opts *o);
void bench_layout_free(bench_layout *L);

/* ---- bench_timing.c ---- */
double bench_now_s(void);
void *bench_host_alloc(size_t bytes);
/* Time every backend on one point into row[0..num_backends); 0, or 2 after a sentence on a
 * failure that is not "unsupported". Frees what it allocates on every path. */
/* `index` seeds the values: the KV variants of one point get the same index, hence the same q and
 * (to FP8's precision) the same cache. */
int bench_measure_point(const bench_config *c, int index, const bench_opts *o,
                        mlav_context *const *ctx, const bench_ceilings *ceil, bench_result *row);

/* ---- bench_engine.c ---- */
/* Time point `c` (layout L, device tensors `dt` of the exact plan, `exact` that plan ready to run:
 * a bench_exact_run) through a plan for limits on ctx: limits = o->engine x the point's lengths
 * (tokens, longest draft, longest kv_len; the same batch), device lengths, the timings of
 * bench_gpu_time_steps, into r's engine fields. 0, or 2 after a sentence on a failure that is
 * not "unsupported". */
int bench_measure_engine(const bench_config *c, const bench_layout *L, const bench_opts *o,
                         mlav_context *ctx, const void *dt, const void *exact, bench_result *r);

/* ---- bench_ceilings.c ---- */
enum { BENCH_SGEMM_M = 576, BENCH_SGEMM_N = 16393, BENCH_SGEMM_K = 1088 };
/* Commas and newlines to spaces: the CSV's cells. */
void bench_sanitize(char *s);
/* Print the run's header lines and measure the ceilings of the backends' kinds. */
void bench_measure_ceilings(const bench_opts *o, bench_ceilings *c);

/* ---- bench_plot.c ---- */
/* The gnuplot executable on PATH (a static buffer), or NULL. */
const char *bench_find_gnuplot(void);
/* Draw the flash backend's rows into o->plot: time and the fraction of the nearer ceiling
 * against prefix, one line per H x q_len (and B, page size, dtypes where those vary). Written
 * to a temporary file renamed into place, so a failure leaves no PNG. 0, or -1 after a
 * sentence. */
int bench_plot(const bench_opts *o, int flash, const bench_config *cfg, int ncfg,
               const bench_result *res, const bench_ceilings *ceil);

/* ---- bench_progress.c ---- */
/* Progress on stderr after point `done` of `total` (the KV variants of a point count once;
 * cfg[last] the last measured, cfg[next..ncfg) still to come; res every result): the elapsed
 * time and an estimate of the rest, from each backend's time at the last point scaled by each
 * point's work and capped by the stopping rule. Quiet for the first two seconds of points, so
 * short runs print nothing. */
void bench_progress(const bench_opts *o, const bench_config *cfg, int ncfg, int last, int next,
                    int done, int total, double t0, const bench_result *res);

/* ---- bench_print.c ---- */
void bench_print_list(const bench_config *cfg, int n, const bench_opts *o);
void bench_print_roles(const bench_opts *o, int *flash, int *naive);
void bench_print_group(const bench_config *c, const bench_opts *o);
/* rs: flash's result at the same point with the q dtype's cache (an FP8 row's baseline) or NULL. */
void bench_print_row(const bench_config *c, const bench_opts *o, const bench_result *rf,
                     const bench_result *rn, const bench_result *rs, int flash_gpu);
int bench_write_csv(const char *path, const bench_opts *o, const bench_config *cfg, int ncfg,
                    const bench_result *res, const bench_ceilings *ceil);
/* The engine table's line of one point (--engine), and its CSV. */
void bench_print_engine(const bench_config *c, const bench_result *r);
int bench_write_engine_csv(const char *path, const bench_opts *o, const bench_config *cfg,
                           int ncfg, const bench_result *res, const bench_ceilings *ceil);

#endif
