/* mlaverify bench, the output: the point list, the table (a group line per B/H/page/dtype, a row
 * per point: flash against its naive baseline) and the CSV that bench/plot.gp reads. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "mlaverify.h"

static void fmt_time(char *buf, size_t len, const bench_result *r)
{
    if (r && r->status == MLAV_OK)
        snprintf(buf, len, "%.1f", r->time_us);
    else
        snprintf(buf, len, "n/a");
}

int bench_write_csv(const char *path, const bench_opts *o, const bench_config *cfg, int ncfg,
                    const bench_result *res, const bench_ceilings *ceil)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mlaverify bench: cannot write %s\n", path);
        return -1;
    }
    /* --kv-dtype's columns go last, so that readers of the columns before (plot.gp, ab.sh) read
     * either form */
    /* min_us,max_us last of all: the spread of the reps whose median is time_us */
    fprintf(f, "backend,gpu,batch,heads,q_len,prefix,page_size,dtype,time_us,tflops,gbps,"
               "frac_mma,frac_bw%s,min_us,max_us\n", o->kv_columns ? ",kv_dtype,fp8_speedup" : "");
    /* backend outer: each (backend, q_len) line of the plot is a contiguous block of rows */
    for (int b = 0; b < o->num_backends; b++)
        for (int i = 0; i < ncfg; i++) {
            const bench_config *c = &cfg[i];
            const bench_result *r = &res[i * o->num_backends + b];
            fprintf(f, "%s,%s,%d,%d,%d,%lld,%d,%s,", mlav_backend_name(o->backends[b]),
                    bench_is_gpu_backend(o->backends[b]) ? ceil->gpu_name : ceil->cpu_name, c->B, c->H, c->q_len,
                    (long long)c->prefix, c->page_size, mlav_dtype_name(c->dtype));
            if (r->status == MLAV_OK)
                fprintf(f, "%.3f,%.3f,%.2f,%.4f,%.4f", r->time_us, r->tflops, r->gbps,
                        r->frac_mma, r->frac_bw);
            else
                fprintf(f, "nan,nan,nan,nan,nan");
            if (o->kv_columns) {
                const int j = bench_same_kv_index(cfg, ncfg, i);
                const bench_result *rs = j >= 0 ? &res[j * o->num_backends + b] : NULL;
                fprintf(f, ",%s,", mlav_dtype_name(c->kv_dtype));
                if (rs && rs->status == MLAV_OK && r->status == MLAV_OK)
                    fprintf(f, "%.4f", rs->time_us / r->time_us);
                else
                    fprintf(f, "nan");
            }
            if (r->status == MLAV_OK)
                fprintf(f, ",%.3f,%.3f\n", r->min_us, r->max_us);
            else
                fprintf(f, ",nan,nan\n");
        }
    if (fclose(f) != 0) {
        fprintf(stderr, "mlaverify bench: error writing %s\n", path);
        return -1;
    }
    return 0;
}

void bench_print_list(const bench_config *cfg, int n, const bench_opts *o)
{
    printf("# batch heads q_len prefix page_size dtype%s (%d points)\n",
           o->kv_columns ? " kv_dtype" : "", n);
    for (int i = 0; i < n; i++) {
        printf("%d %d %d %lld %d %s", cfg[i].B, cfg[i].H, cfg[i].q_len,
               (long long)cfg[i].prefix, cfg[i].page_size, mlav_dtype_name(cfg[i].dtype));
        if (o->kv_columns)
            printf(" %s", mlav_dtype_name(cfg[i].kv_dtype));
        printf("\n");
    }
}

/* Table roles: flash = the fast backend (cuda, else cpu), naive = its baseline (-1: none). */
void bench_print_roles(const bench_opts *o, int *flash_out, int *naive_out)
{
    int flash = -1, naive = -1;
    for (int b = 0; b < o->num_backends; b++) {
        mlav_backend id = o->backends[b];
        if (flash < 0 && (id == MLAV_BACKEND_CUDA || id == MLAV_BACKEND_CPU))
            flash = b;
        if (naive < 0 && (id == MLAV_BACKEND_CUDA_NAIVE || id == MLAV_BACKEND_REFERENCE))
            naive = b;
    }
    if (flash < 0)
        flash = naive, naive = -1;
    printf("# flash_us = %s, naive_us = %s; TFLOP/s, GB/s and fractions of the ceilings are flash's; "
           "reps = naive/flash\n", mlav_backend_name(o->backends[flash]),
           naive >= 0 ? mlav_backend_name(o->backends[naive]) : "(none)");
    if (o->kv_columns)
        printf("# kv: the cache's dtype, each point's rows back to back with every backend on that "
               "cache; fp8_speedup = flash_us with the q-dtype cache / with the FP8 one; GB/s and "
               "frac_bw count the row's KV bytes; an FP8 cache holds uniform [-1, 1) values / "
               "kv_scale, kv_scale = 1/%.0f (a host value; --engine: a device kv_scale_ptr)\n",
               1.0 / BENCH_KV_SCALE);
    fflush(stdout);
    *flash_out = flash;
    *naive_out = naive;
}

void bench_print_group(const bench_config *c, const bench_opts *o)
{
    /* a preset's mixed batches carry their own spread */
    const double spread = c->spread >= 0.0 ? c->spread : o->spread;
    printf("\n## B=%d H=%d page_size=%d %s", c->B, c->H, c->page_size, mlav_dtype_name(c->dtype));
    if (spread > 0.0)
        printf(", each request's prefix drawn from prefix x [%.2f, %.2f]", 1.0 - spread,
               1.0 + spread);
    printf("\n");
    if (o->kv_columns)
        printf("%7s %6s %8s %8s %11s %11s %8s %8s %8s %8s %8s %11s %7s %21s\n", "streams", "q_len",
               "prefix", "kv", "naive_us", "flash_us", "speedup", "TFLOP/s", "GB/s", "frac_mma",
               "frac_bw", "fp8_speedup", "reps", "flash_min..max_us");
    else
        printf("%7s %6s %8s %11s %11s %8s %8s %8s %8s %8s %7s %21s\n", "streams", "q_len",
               "prefix", "naive_us", "flash_us", "speedup", "TFLOP/s", "GB/s", "frac_mma",
               "frac_bw", "reps", "flash_min..max_us");
}

void bench_print_row(const bench_config *c, const bench_opts *o, const bench_result *rf,
                     const bench_result *rn, const bench_result *rs, int flash_gpu)
{
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
    char range[48] = "-";
    if (rf->status == MLAV_OK)
        snprintf(range, sizeof range, "%.1f..%.1f", rf->min_us, rf->max_us);
    char tput[64];
    snprintf(tput, sizeof tput, "%8s %8s %8s %8s", "-", "-", "-", "-");
    if (rf->status == MLAV_OK)
        /* a CPU runs at tenths of a TFLOP/s: three decimals there, one on a GPU */
        snprintf(tput, sizeof tput, "%8.*f %8.1f %8.3f %8.3f", flash_gpu ? 1 : 3, rf->tflops,
                 rf->gbps, rf->frac_mma, rf->frac_bw);
    if (o->kv_columns) {
        char fs[32] = "-";
        if (rs && rs->status == MLAV_OK && rf->status == MLAV_OK)
            snprintf(fs, sizeof fs, "%.2fx", rs->time_us / rf->time_us);
        printf("%7d %6d %8lld %8s %11s %11s %8s %s %11s %7s %21s\n", c->B, c->q_len,
               (long long)c->prefix, mlav_dtype_name(c->kv_dtype), tn, tf, sp, tput, fs, reps,
               range);
    } else {
        printf("%7d %6d %8lld %11s %11s %8s %s %7s %21s\n", c->B, c->q_len, (long long)c->prefix,
               tn, tf, sp, tput, reps, range);
    }
    fflush(stdout);
}

void bench_print_engine(const bench_config *c, const bench_result *r)
{
    (void)c;
    if (r->engine_status != MLAV_OK) {
        printf("    engine: n/a (%s)\n", mlav_status_string(r->engine_status));
        return;
    }
    /* run and exact timed in turns (bench_gpu_time_steps), not the table's exact time */
    printf("    engine: update+run %.1f us, run %.1f us (%.3f of exact %.1f), update %.1f us\n",
           r->step_us, r->run_us, r->run_us / r->exact_run_us, r->exact_run_us, r->update_us);
}

int bench_write_engine_csv(const char *path, const bench_opts *o, const bench_config *cfg,
                           int ncfg, const bench_result *res, const bench_ceilings *ceil)
{
    (void)ceil;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mlaverify bench: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "batch,heads,q_len,prefix,page_size,dtype,capacity,exact_us,step_us,run_us,"
               "update_us,run_over_exact%s\n", o->kv_columns ? ",kv_dtype" : "");
    for (int b = 0; b < o->num_backends; b++) {
        if (o->backends[b] != MLAV_BACKEND_CUDA)
            continue;
        for (int i = 0; i < ncfg; i++) {
            const bench_config *c = &cfg[i];
            const bench_result *r = &res[i * o->num_backends + b];
            fprintf(f, "%d,%d,%d,%lld,%d,%s,%.2f,", c->B, c->H, c->q_len, (long long)c->prefix,
                    c->page_size, mlav_dtype_name(c->dtype), o->engine);
            if (r->status == MLAV_OK && r->engine_status == MLAV_OK)
                fprintf(f, "%.3f,%.3f,%.3f,%.3f,%.4f", r->exact_run_us, r->step_us, r->run_us,
                        r->update_us, r->run_us / r->exact_run_us);
            else
                fprintf(f, "nan,nan,nan,nan,nan");
            if (o->kv_columns)
                fprintf(f, ",%s", mlav_dtype_name(c->kv_dtype));
            fprintf(f, "\n");
        }
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "mlaverify bench: error writing %s\n", path);
        return -1;
    }
    return 0;
}
