/* mlaverify bench: times the verify backends on the protocol of docs/PERFORMANCE.md#measure and
 * prints the classic table (docs/PERFORMANCE.md#results) with TFLOP/s, GB/s and the fractions of
 * ceilings measured in the same run; optionally a CSV for bench/plot.gp. Verify runs use the public
 * API only. This file runs the steps in order; each job is a bench_*.c file (bench.h). */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "bench_command.h"
#include "mlaverify.h"
#ifdef MLAV_WITH_CUDA
#include "bench_cuda.h"
#endif

int mlav_cmd_bench(int argc, char **argv)
{
    bench_args a;
    int rc = bench_parse_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (bench_resolve_backends(&a, mlav_cuda_device_count()) != 0)
        return 2;
    const bench_opts *o = &a.o;
    int any_gpu = 0, any_cuda = 0;
    for (int b = 0; b < o->num_backends; b++) {
        any_gpu |= bench_is_gpu_backend(o->backends[b]);
        any_cuda |= o->backends[b] == MLAV_BACKEND_CUDA;
    }
    if (o->engine > 0 && !any_cuda && !a.list_only)
        fprintf(stderr, "mlaverify bench: --engine times the engine path (a plan for limits, "
                        "device lengths, CUDA graphs) on the cuda backend only; %s has none, so "
                        "no engine rows are timed\n", mlav_backend_name(o->backends[0]));

    static bench_config cfg[BENCH_MAX_POINTS];
    const int ncfg = bench_points(&a, any_gpu, cfg, BENCH_MAX_POINTS);
    if (ncfg < 0)
        return 2;
    if (a.list_only) {
        bench_print_list(cfg, ncfg, o);
        return 0;
    }
    if (o->plot && !bench_find_gnuplot()) {
        fprintf(stderr, "mlaverify bench: --plot needs gnuplot, which is not on PATH (Debian: "
                        "apt-get install gnuplot-nox); nothing was measured\n");
        return 2;
    }

    /* from here every exit goes through `done`, which frees what was made */
    rc = 0;
    bench_result *res = calloc((size_t)ncfg * (size_t)o->num_backends + 1, sizeof *res);
    mlav_context *ctx[BENCH_MAX_BACKENDS] = {0};
    int gpu_open = 0;
    if (!res) {
        fprintf(stderr, "mlaverify bench: out of host memory\n");
        rc = 2;
        goto done;
    }
    for (int b = 0; b < o->num_backends; b++) {
        mlav_status s = mlav_context_create(&ctx[b], o->backends[b]);
        if (s != MLAV_OK) {
            fprintf(stderr, "mlaverify bench: %s context: %s: %s\n",
                    mlav_backend_name(o->backends[b]), mlav_status_string(s),
                    mlav_last_error(NULL));
            rc = 2;
            goto done;
        }
    }
    bench_ceilings ceil;
    bench_measure_ceilings(o, &ceil);
    gpu_open = any_gpu;
    int flash, naive;
    bench_print_roles(o, &flash, &naive);

    const bench_config *group = NULL;
    int npoints = 0;
    for (int i = 0; i < ncfg; i++)
        npoints += i == 0 || !bench_same_point(&cfg[i], &cfg[i - 1]);
    const double t0 = bench_now_s();
    /* point by point: its KV variants [i, e) are measured back to back, the first of them first at
     * even points and last at odd ones, so neither cache always follows the other; then printed
     * in the order given */
    for (int i = 0, e, point = 0; i < ncfg; i = e, point++) {
        for (e = i + 1; e < ncfg && bench_same_point(&cfg[e], &cfg[i]); e++)
            ;
        for (int k = 0; k < e - i; k++) {
            const int j = point % 2 ? e - 1 - k : i + k;
            bench_result *row = &res[j * o->num_backends];
            if (bench_measure_point(&cfg[j], point, o, ctx, &ceil, row) != 0) {
                rc = 2;
                goto done;
            }
        }
        for (int j = i; j < e; j++) {
            const bench_config *c = &cfg[j];
            if (!group || group->B != c->B || group->H != c->H ||
                group->page_size != c->page_size || group->dtype != c->dtype ||
                group->spread != c->spread) {
                group = c;
                bench_print_group(c, o);
            }
            const bench_result *row = &res[j * o->num_backends];
            const int s = bench_same_kv_index(cfg, ncfg, j);
            bench_print_row(c, o, &row[flash], naive >= 0 ? &row[naive] : NULL,
                            s >= 0 ? &res[s * o->num_backends + flash] : NULL,
                            bench_is_gpu_backend(o->backends[flash]));
            if (o->engine > 0 && o->backends[flash] == MLAV_BACKEND_CUDA)
                bench_print_engine(c, &row[flash]);
        }
        bench_progress(o, cfg, ncfg, e - 1, e, point + 1, npoints, t0, res);
    }
    if (o->csv && bench_write_csv(o->csv, o, cfg, ncfg, res, &ceil) != 0)
        rc = 2;
    if (o->plot && bench_plot(o, flash, cfg, ncfg, res, &ceil) != 0)
        rc = 2;
    if (o->engine > 0 && o->engine_csv &&
        bench_write_engine_csv(o->engine_csv, o, cfg, ncfg, res, &ceil) != 0)
        rc = 2;
done:
    for (int b = 0; b < o->num_backends; b++)
        mlav_context_free(ctx[b]);
#ifdef MLAV_WITH_CUDA
    if (gpu_open)
        bench_gpu_close();
#else
    (void)gpu_open;
#endif
    free(res);
    return rc;
}
