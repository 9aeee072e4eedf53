/* mlaverify bench --plot: the flash backend's rows drawn by gnuplot, which is looked up on PATH
 * when the run starts (it is not a build dependency). The data go inline (gnuplot datablocks),
 * the PNG to a temporary file renamed into place only when gnuplot succeeded, so a failed plot
 * leaves no empty PNG behind. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "mlaverify.h"

const char *bench_find_gnuplot(void)
{
    static char path[4096];
    const char *p = getenv("PATH");
    if (!p || !*p)
        p = "/usr/local/bin:/usr/bin:/bin";
    while (*p) {
        const char *colon = strchr(p, ':');
        const size_t len = colon ? (size_t)(colon - p) : strlen(p);
        /* an empty PATH entry is the current directory */
        int n = snprintf(path, sizeof path, "%.*s/gnuplot", (int)(len ? len : 1), len ? p : ".");
        if (n > 0 && (size_t)n < sizeof path && access(path, X_OK) == 0)
            return path;
        if (!colon)
            break;
        p = colon + 1;
    }
    return NULL;
}

/* A series: the points of one line (same B, H, q_len, page size, dtypes). */
static int same_series(const bench_config *a, const bench_config *b)
{
    return a->B == b->B && a->H == b->H && a->q_len == b->q_len && a->page_size == b->page_size &&
           a->dtype == b->dtype && a->kv_dtype == b->kv_dtype && a->spread == b->spread;
}

/* Characters that would end a gnuplot string or be read as markup, out of a label. */
static void plain(char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\'' || *s == '\\' || *s == '\n')
            *s = ' ';
}

static void write_script(FILE *g, const char *tmp, const bench_opts *o, int flash,
                         const bench_config *cfg, int ncfg, const bench_result *res,
                         const bench_ceilings *ceil)
{
    const int nb = o->num_backends;
    const int gpu = bench_is_gpu_backend(o->backends[flash]);
    /* what varies across the drawn rows goes into each line's title */
    int vary_b = 0, vary_page = 0, vary_dtype = 0, vary_kv = 0, all_positive = 1, first = -1;
    for (int i = 0; i < ncfg; i++) {
        if (res[i * nb + flash].status != MLAV_OK)
            continue;
        if (first < 0)
            first = i;
        vary_b |= cfg[i].B != cfg[first].B;
        vary_page |= cfg[i].page_size != cfg[first].page_size;
        vary_dtype |= cfg[i].dtype != cfg[first].dtype;
        vary_kv |= cfg[i].kv_dtype != cfg[first].kv_dtype || cfg[i].spread != cfg[first].spread;
        all_positive &= cfg[i].prefix > 0;
    }
    char device[300];
    snprintf(device, sizeof device, "%s", gpu ? ceil->gpu_name : ceil->cpu_name);
    plain(device);
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "  set terminal pngcairo size 1200,1100 font ',10' noenhanced\n"
               "} else {\n"
               "  set terminal png size 1200,1100 noenhanced\n"
               "}\n"
               "set output '%s'\n", tmp);

    /* one datablock per series: prefix, median us, fraction of the nearer ceiling */
    int nseries = 0;
    char *done = calloc((size_t)ncfg, 1);
    char titles[BENCH_MAX_POINTS][96];
    for (int i = 0; i < ncfg && done && nseries < BENCH_MAX_POINTS; i++) {
        if (done[i] || res[i * nb + flash].status != MLAV_OK)
            continue;
        fprintf(g, "$s%d << EOD\n", nseries);
        for (int j = i; j < ncfg; j++) {
            const bench_result *r = &res[j * nb + flash];
            if (done[j] || r->status != MLAV_OK || !same_series(&cfg[j], &cfg[i]))
                continue;
            done[j] = 1;
            fprintf(g, "%lld %.6g %.6g\n", (long long)cfg[j].prefix, r->time_us,
                    r->frac_mma > r->frac_bw ? r->frac_mma : r->frac_bw);
        }
        fprintf(g, "EOD\n");
        const bench_config *c = &cfg[i];
        int n = snprintf(titles[nseries], sizeof titles[0], "H %d, q_len %d", c->H, c->q_len);
        if (vary_b)
            n += snprintf(titles[nseries] + n, sizeof titles[0] - (size_t)n, ", B %d", c->B);
        if (vary_page)
            n += snprintf(titles[nseries] + n, sizeof titles[0] - (size_t)n, ", page %d",
                          c->page_size);
        if (vary_dtype)
            n += snprintf(titles[nseries] + n, sizeof titles[0] - (size_t)n, ", %s",
                          mlav_dtype_name(c->dtype));
        if (vary_kv)
            snprintf(titles[nseries] + n, sizeof titles[0] - (size_t)n, ", kv %s%s",
                     mlav_dtype_name(c->kv_dtype), c->spread > 0 ? ", mixed" : "");
        nseries++;
    }
    free(done);

    fprintf(g, "set multiplot layout 2,1 title \"mlaverify bench: %s on %s, %s x %d\"\n",
            mlav_backend_name(o->backends[flash]), device, mlav_dtype_name(cfg[first].dtype),
            o->Dl + o->Dr);
    fprintf(g, "set grid xtics ytics mxtics mytics lc rgb '#dddddd'\n"
               "set key outside right top\n"
               "set xlabel 'prefix (KV rows before the draft)'\n"
               "%s\n"
               "set logscale y\n"
               "set ylabel 'time per verify (us, median)'\n",
            all_positive ? "set logscale x" : "unset logscale x");
    for (int panel = 0; panel < 2; panel++) {
        if (panel == 1)
            fprintf(g, "unset logscale y\nset yrange [0:*]\n"
                       "set ylabel 'fraction of the nearer ceiling (max of frac_mma, frac_bw)'\n");
        fprintf(g, "plot ");
        for (int s = 0; s < nseries; s++)
            fprintf(g, "%s$s%d using 1:%d with linespoints pt 7 ps 0.7 lc %d title '%s'",
                    s ? ", \\\n     " : "", s, panel ? 3 : 2, s + 1, titles[s]);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\nunset output\n");
}

int bench_plot(const bench_opts *o, int flash, const bench_config *cfg, int ncfg,
               const bench_result *res, const bench_ceilings *ceil)
{
    int any = 0;
    for (int i = 0; i < ncfg; i++)
        any |= res[i * o->num_backends + flash].status == MLAV_OK;
    if (!any) {
        fprintf(stderr, "mlaverify bench: --plot: no point was measured on %s: nothing to draw, "
                        "no PNG written\n", mlav_backend_name(o->backends[flash]));
        return -1;
    }
    const char *gnuplot = bench_find_gnuplot();
    if (!gnuplot || strchr(gnuplot, '\'') || strchr(o->plot, '\'')) {
        fprintf(stderr, "mlaverify bench: --plot: %s\n",
                gnuplot ? "a path with a single quote in it cannot be handed to gnuplot"
                        : "gnuplot is no longer on PATH");
        return -1;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", o->plot) >= (int)sizeof tmp) {
        fprintf(stderr, "mlaverify bench: --plot: the file name is too long\n");
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "mlaverify bench: --plot: cannot create a file beside %s: %s\n", o->plot,
                strerror(errno));
        return -1;
    }
    /* mkstemp's 0600 would make the PNG private: the mode a plain fopen would give instead */
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    close(fd);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s'", gnuplot);
    FILE *g = popen(cmd, "w");
    if (!g) {
        fprintf(stderr, "mlaverify bench: --plot: cannot run %s: %s\n", gnuplot, strerror(errno));
        remove(tmp);
        return -1;
    }
    write_script(g, tmp, o, flash, cfg, ncfg, res, ceil);
    const int status = pclose(g);
    FILE *f = fopen(tmp, "rb");
    long size = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fclose(f);
    }
    if (status != 0 || size <= 0 || rename(tmp, o->plot) != 0) {
        fprintf(stderr, "mlaverify bench: --plot: gnuplot (%s) did not draw %s (status %d, %ld "
                        "bytes): no PNG written\n", gnuplot, o->plot, status, size);
        remove(tmp);
        return -1;
    }
    printf("# plot: %s (gnuplot %s)\n", o->plot, gnuplot);
    return 0;
}
