/* mlaverify bench, progress on stderr for long runs: point i/N, elapsed, the rest estimated. */
#include <stdio.h>

#include "bench.h"

/* The work of a point, up to a constant: every (row, head) against its kv_len. */
static double work(const bench_config *c)
{
    return (double)c->B * c->H * c->q_len * ((double)c->prefix + c->q_len + 1);
}

/* The seconds a backend that took `us` per run at `w_last` will take at a point of work `w`:
 * one untimed run, then reps until the stopping rule (bench_opts) ends them. */
static double point_seconds(const bench_opts *o, double us, double w_last, double w)
{
    const double run = 1e-6 * us * (w / w_last);
    double timed = run * o->reps;
    if (timed > o->max_seconds)
        timed = run * o->min_reps > o->max_seconds ? run * o->min_reps : o->max_seconds;
    return run + timed;
}

void bench_progress(const bench_opts *o, const bench_config *cfg, int ncfg, int last, int next,
                    int done, int total, double t0, const bench_result *res)
{
    const double elapsed = bench_now_s() - t0;
    if (elapsed < 2.0 || done >= total)
        return;
    /* from the last point measured on each backend, scaled by the work of each point left */
    double left = 0.0;
    const double w_last = work(&cfg[last]);
    for (int j = next; j < ncfg; j++)
        for (int b = 0; b < o->num_backends; b++) {
            const bench_result *r = &res[last * o->num_backends + b];
            if (r->status == MLAV_OK && w_last > 0)
                left += point_seconds(o, r->time_us, w_last, work(&cfg[j]));
        }
    fprintf(stderr, "mlaverify bench: point %d/%d (B=%d H=%d q_len %d prefix %lld) done, %.0f s "
                    "elapsed, about %.0f s left\n", done, total, cfg[last].B, cfg[last].H,
            cfg[last].q_len, (long long)cfg[last].prefix, elapsed, left);
}
