/* mlaverify bench, the command line: usage, every numeric option through one range-checked
 * parser, and the backend list. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_cuda.h" /* bench_l2 */
#include "mlaverify.h"

int bench_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mlaverify bench: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(mlaverify bench --help lists the options)\n");
    return 2;
}

void bench_usage(FILE *f)
{
    fprintf(f,
        "usage: mlaverify bench [--preset reference|full|production|cpu] [--backend LIST]\n"
        "                       [--heads LIST] [--qlen LIST] [--prefix LIST] [--batch N]\n"
        "                       [--page-size N] [--dtype bf16|f16|f32] [--kv-dtype LIST]\n"
        "                       [--tree tree|chain] [--reps N] [--min-reps N]\n"
        "                       [--max-seconds S] [--csv FILE] [--plot FILE.png]\n"
        "                       [--l2 flush|dirty|warm] [--prefix-spread F] [--list]\n"
        "                       [--engine C] [--engine-csv FILE]\n"
        "  --backend LIST    comma-separated: cuda, cuda-naive, cpu, reference\n"
        "                    (default: cuda,cuda-naive with a CUDA device, else cpu)\n"
        "  --preset NAME     reference: B=1 H=64 bf16 page_size 1 (shuffled), q_len 1,9,33,\n"
        "                      prefix 256..131072 (the default with a CUDA device)\n"
        "                    full: reference plus H=16 and H=128, B=8 H=16 q_len 9 prefix 4096\n"
        "                      and 32768, and page_size 64 at the reference workload\n"
        "                    production: B=1 H=8,16,64 q_len 1,9,16,64 prefix 4096, 32768,\n"
        "                      131072, then B=16 and 32 at H=8,16 q_len 16 prefix 4096 and\n"
        "                      32768 with prefixes spread 0.5 (mixed lengths)\n"
        "                    cpu: full's points up to prefix 16384 (49 points: B=1 H=16,64,128\n"
        "                      q_len 1,9,33 prefix 256..16384, B=8 H=16 q_len 9 prefix 4096,\n"
        "                      page_size 64 at H=64), for the CPU backend (the default without\n"
        "                      a CUDA device)\n"
        "                    a preset cannot be combined with --heads/--qlen/--prefix/--batch/\n"
        "                    --page-size/--dtype/--prefix-spread, which build a grid of their own\n"
        "  --kv-dtype LIST   the KV cache's dtype, comma-separated: same (the q dtype, or\n"
        "                    its name) and fp8 (fp8_e4m3, kv_scale 1/%.0f). Each point runs\n"
        "                    once per entry, back to back, on every backend; its rows gain kv\n"
        "                    and fp8_speedup (flash_us with the q-dtype cache / with the FP8\n"
        "                    one: > 1 is FP8 faster); GB/s and frac_bw count the row's own KV\n"
        "                    bytes. Allowed with a preset\n"
        "  --reps N          replays per point (default 50); a point stops earlier once\n"
        "                    --max-seconds (default 2) of timing have passed, but never before\n"
        "                    --min-reps (default 10)\n"
        "  --csv FILE        one row per backend and point:\n"
        "                    backend,gpu,batch,heads,q_len,prefix,page_size,dtype,time_us,tflops,\n"
        "                    gbps,frac_mma,frac_bw (with --kv-dtype: then kv_dtype,fp8_speedup)\n"
        "  --plot FILE.png   draw the flash backend's rows with gnuplot (found on PATH when\n"
        "                    the run starts): time and the fraction of the nearer ceiling\n"
        "                    (max of frac_mma and frac_bw) against prefix, one line per\n"
        "                    H x q_len. The CSV's min_us,max_us (last columns) and the table's\n"
        "                    flash_min..max_us are the fastest and slowest rep: the spread\n"
        "                    of a noisy host\n"
        "  --prefix-spread F request b's prefix is prefix x (1 + F u_b), u_b drawn uniformly from\n"
        "                    [-1, 1] (seeded: the same batch every run), 0 <= F < 1: an engine's\n"
        "                    batch of mixed lengths; the prefix column is the nominal (mean)\n"
        "                    prefix, FLOPs and bytes count the drawn lengths\n"
        "  --l2 MODE         the L2 before each GPU replay: flush (default) reads twice its size,\n"
        "                    leaving clean lines; dirty writes twice its size, leaving dirty\n"
        "                    lines the kernel's misses write back (as triton's do_bench and the\n"
        "                    FlashMLA harness flush); warm leaves it as the last replay left it\n"
        "                    (a diagnostic: shows how much of a short point is cold misses)\n"
        "  --engine C        also time every cuda point as an engine runs it: a plan for limits\n"
        "                    of C >= 1 times the point's lengths (tokens, longest draft, longest\n"
        "                    kv_len), device lengths, CUDA graphs of update+run, the run alone\n"
        "                    (each further layer) and the update alone (the device scheduler),\n"
        "                    printed after each row against the plan for the exact lengths,\n"
        "                    whose run is timed again in turns with the run alone (so that\n"
        "                    both see the same clocks: exact_us below)\n"
        "                    (an FP8 cache's scale a device kv_scale_ptr there, as engines hold\n"
        "                    it; a host kv_scale in the plain runs)\n"
        "  --engine-csv FILE the engine rows: batch,heads,q_len,prefix,page_size,dtype,capacity,\n"
        "                    exact_us,step_us,run_us,update_us,run_over_exact (with --kv-dtype:\n"
        "                    then kv_dtype)\n"
        "  --list            print the points (batch heads q_len prefix page_size dtype, with\n"
        "                    --kv-dtype then kv_dtype) and exit\n"
        "Numbers are decimal integers: heads 1..4096, qlen 1..65536, prefix 0..2^30, batch\n"
        "1..256, page-size 1..2^20, reps and min-reps 1..10^6; anything else is refused.\n"
        "GPU times: CUDA-graph replays of mlav_run on device tensors, L2 flushed before each,\n"
        "CUDA events, median. CPU times: clock_gettime, median. Runs longer than 2 s print\n"
        "progress on stderr (point i/N, elapsed, an estimate of the rest). Ceilings are\n"
        "measured in the same run: mma.sync BF16 rate and device copy bandwidth on a GPU; on the\n"
        "CPU, cblas_sgemm M=576 N=16393 K=1088 (the H=64 q_len 9 prefix 16384 score product)\n"
        "and a parallel memcpy.\n",
        1.0 / BENCH_KV_SCALE);
}

int bench_parse_i64(const char *s, int64_t lo, int64_t hi, const char *opt, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    /* strtoll skips blanks and takes a sign; the options take plain digits only */
    if (end == s || *end || *s == ' ' || *s == '\t' || *s == '+') {
        bench_usage_error("%s: '%s' is not a decimal integer", opt, s);
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        bench_usage_error("%s: %s is out of range (%lld to %lld)", opt, s,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* A comma-separated list of integers in [lo, hi]: its length (>= 1), or -1 after a sentence. */
static int parse_int_list(const char *s, int64_t *out, int max, int64_t lo, int64_t hi,
                          const char *opt)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item) {
            bench_usage_error("%s: bad list '%s' (%s)", opt, s,
                    len ? "an item too long" : "an empty item");
            return -1;
        }
        if (n == max) {
            bench_usage_error("%s: more than %d values in '%s'", opt, max, s);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (bench_parse_i64(item, lo, hi, opt, &out[n]) != 0)
            return -1;
        n++;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

/* --kv-dtype LIST into a->kv: 0, or -1 after a sentence. Whether a named dtype is the points' q
 * dtype is bench_points' to check (a grid's --dtype may come later on the line). */
static int parse_kv_list(const char *s, bench_args *a)
{
    char list[128];
    if (strlen(s) >= sizeof list) {
        bench_usage_error("--kv-dtype: '%s' is too long", s);
        return -1;
    }
    snprintf(list, sizeof list, "%s", s);
    a->nkv = 0;
    const char *p = list;
    for (char *comma; p; p = comma ? comma + 1 : NULL) {
        comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        int kv;
        mlav_dtype kd; /* the library's one table of names (mlav_dtype_alias) */
        if (!strcmp(p, "same"))
            kv = BENCH_KV_SAME;
        else if (*p && mlav_dtype_parse(p, &kd) == MLAV_OK)
            kv = (int)kd;
        else {
            bench_usage_error("--kv-dtype: %s%s%s in '%s' (same, bf16, f16, f32, "
                            "fp8)", *p ? "unknown dtype '" : "an empty entry", p, *p ? "'" : "",
                    s);
            return -1;
        }
        if (a->nkv == BENCH_MAX_KV) {
            bench_usage_error("--kv-dtype: more than %d entries in '%s' (the q "
                            "dtype's cache and fp8)", BENCH_MAX_KV, s);
            return -1;
        }
        a->kv[a->nkv++] = kv;
    }
    return 0;
}

int bench_parse_args(int argc, char **argv, bench_args *a)
{
    memset(a, 0, sizeof *a);
    a->o = (bench_opts){.Dl = 512, .Dr = 64, .reps = 50, .min_reps = 10, .max_seconds = 2.0,
                        .tree = 1, .seed = 0x6d6c6176u};
    a->batch = 1;
    a->page = 1;
    a->dtype = MLAV_DTYPE_BF16;
    a->kv[0] = BENCH_KV_SAME;
    a->nkv = 1;
    bench_opts *o = &a->o;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            bench_usage(stdout);
            return 1;
        }
        if (!strcmp(arg, "--list")) {
            a->list_only = 1;
            continue;
        }
        if (i + 1 >= argc) {
            bench_usage_error("'%s' needs a value, or is not an option", arg);
            return 2;
        }
        const char *v = argv[++i];
        int64_t x;
        if (!strcmp(arg, "--preset")) {
            a->preset = v;
        } else if (!strcmp(arg, "--backend")) {
            a->backend_list = v;
        } else if (!strcmp(arg, "--heads")) {
            a->nh = parse_int_list(v, a->heads, BENCH_MAX_LIST, 1, BENCH_MAX_HEADS, "--heads");
            a->grid_opts = 1;
        } else if (!strcmp(arg, "--qlen")) {
            a->nq = parse_int_list(v, a->qlens, BENCH_MAX_LIST, 1, BENCH_MAX_QLEN, "--qlen");
            a->grid_opts = 1;
        } else if (!strcmp(arg, "--prefix")) {
            a->np = parse_int_list(v, a->prefixes, BENCH_MAX_LIST, 0, BENCH_MAX_PREFIX,
                                   "--prefix");
            a->grid_opts = 1;
        } else if (!strcmp(arg, "--batch")) {
            if (bench_parse_i64(v, 1, BENCH_MAX_BATCH, "--batch", &a->batch) != 0)
                return 2;
            a->grid_opts = 1;
        } else if (!strcmp(arg, "--page-size")) {
            if (bench_parse_i64(v, 1, BENCH_MAX_PAGE_SIZE, "--page-size", &a->page) != 0)
                return 2;
            a->grid_opts = 1;
        } else if (!strcmp(arg, "--dtype")) {
            a->grid_opts = 1;
            mlav_dtype qd; /* the library's one table of names; q is never FP8 */
            if (mlav_dtype_parse(v, &qd) == MLAV_OK && qd != MLAV_DTYPE_FP8_E4M3)
                a->dtype = qd;
            else {
                bench_usage_error("unknown dtype '%s' (bf16, f16, f32)", v);
                return 2;
            }
        } else if (!strcmp(arg, "--kv-dtype")) {
            if (parse_kv_list(v, a) != 0)
                return 2;
            o->kv_columns = 1;
        } else if (!strcmp(arg, "--tree")) {
            if (strcmp(v, "tree") && strcmp(v, "chain")) {
                bench_usage_error("--tree takes tree or chain");
                return 2;
            }
            o->tree = !strcmp(v, "tree");
        } else if (!strcmp(arg, "--reps")) {
            if (bench_parse_i64(v, 1, BENCH_MAX_REPS, "--reps", &x) != 0)
                return 2;
            o->reps = (int)x;
        } else if (!strcmp(arg, "--min-reps")) {
            if (bench_parse_i64(v, 1, BENCH_MAX_REPS, "--min-reps", &x) != 0)
                return 2;
            o->min_reps = (int)x;
        } else if (!strcmp(arg, "--max-seconds")) {
            char *end;
            o->max_seconds = strtod(v, &end);
            if (end == v || *end || !(o->max_seconds >= 0.0 && o->max_seconds <= 86400.0)) {
                bench_usage_error("bad --max-seconds '%s' (0 to 86400)", v);
                return 2;
            }
        } else if (!strcmp(arg, "--l2")) {
            if (!strcmp(v, "flush")) {
                o->l2 = BENCH_L2_FLUSH;
            } else if (!strcmp(v, "warm")) {
                o->l2 = BENCH_L2_WARM;
            } else if (!strcmp(v, "dirty")) {
                o->l2 = BENCH_L2_DIRTY;
            } else {
                bench_usage_error("--l2 takes flush, dirty or warm");
                return 2;
            }
        } else if (!strcmp(arg, "--prefix-spread")) {
            char *end;
            o->spread = strtod(v, &end);
            if (end == v || *end || !(o->spread >= 0.0 && o->spread < 1.0)) {
                bench_usage_error("--prefix-spread takes F with 0 <= F < 1");
                return 2;
            }
            a->grid_opts = 1;
        } else if (!strcmp(arg, "--csv")) {
            o->csv = v;
        } else if (!strcmp(arg, "--plot")) {
            size_t n = strlen(v);
            if (n < 5 || strcmp(v + n - 4, ".png")) {
                bench_usage_error("--plot takes a FILE.png ('%s' given)", v);
                return 2;
            }
            o->plot = v;
        } else if (!strcmp(arg, "--engine")) {
            char *end;
            o->engine = strtod(v, &end);
            if (end == v || *end || !(o->engine >= 1.0 && o->engine <= 16.0)) {
                bench_usage_error("--engine takes a capacity factor C with 1 <= C "
                                "<= 16");
                return 2;
            }
        } else if (!strcmp(arg, "--engine-csv")) {
            o->engine_csv = v;
        } else {
            bench_usage_error("unknown option '%s'", arg);
            return 2;
        }
        if (a->nh < 0 || a->nq < 0 || a->np < 0)
            return 2;
    }
    if (o->min_reps > o->reps)
        o->min_reps = o->reps;
    if (a->preset && a->grid_opts) {
        bench_usage_error("--preset cannot be combined with grid options");
        return 2;
    }
    return 0;
}

int bench_resolve_backends(bench_args *a, int ndev)
{
    bench_opts *o = &a->o;
    char list[256];
    snprintf(list, sizeof list, "%s",
             a->backend_list ? a->backend_list : ndev > 0 ? "cuda,cuda-naive" : "cpu");
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        mlav_backend b;
        if (mlav_backend_from_name(tok, &b) != MLAV_OK || b == MLAV_BACKEND_AUTO) {
            fprintf(stderr,
                    "mlaverify bench: unknown backend '%s' (cuda, cuda-naive, cpu, reference)\n",
                    tok);
            return 2;
        }
        if (o->num_backends == BENCH_MAX_BACKENDS) {
            bench_usage_error("at most %d backends", BENCH_MAX_BACKENDS);
            return 2;
        }
        if (!mlav_backend_compiled(b)) {
            bench_usage_error("backend %s is not compiled into this build", tok);
            return 2;
        }
        if (bench_is_gpu_backend(b) && ndev == 0) {
            fprintf(stderr,
                    "mlaverify bench: backend %s needs a CUDA device (cc >= 8.0); none found\n",
                    tok);
            return 2;
        }
        o->backends[o->num_backends++] = b;
    }
#ifndef MLAV_WITH_CUDA
    for (int b = 0; b < o->num_backends; b++)
        if (bench_is_gpu_backend(o->backends[b])) {
            bench_usage_error("this build has no CUDA support");
            return 2;
        }
#endif
    return 0;
}
