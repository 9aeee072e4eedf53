/* mlaverify bench, the ceilings: measured in the same run (cblas_sgemm and a parallel memcpy on
 * the CPU; mma.sync and a device copy on a GPU, through bench_cuda.h) and the machine lines of
 * the run's header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#include "bench.h"
#include "mlaverify.h"
#ifdef MLAV_WITH_CUDA
#include "bench_cuda.h"
#endif

/* Commas would break the CSV. */
void bench_sanitize(char *s)
{
    for (; *s; s++)
        if (*s == ',' || *s == '\n')
            *s = ' ';
}

/* The CPU FLOP ceiling: one cblas_sgemm of the verify's score-product shape at the reference
 * point H=64 q_len 9 prefix 16384 (M = H*q_len = 576 rows, N = kv_len = 16393 columns,
 * K = W + Dl = 1088), row-major, fp32. One untimed warm-up call, then best of 3, FLOP/s. Every
 * CPU row's frac_mma divides by this one host-wide rate, as GPU rows divide by the mma.sync rate. */
static double cpu_sgemm_rate(void)
{
    const int M = BENCH_SGEMM_M, N = BENCH_SGEMM_N, K = BENCH_SGEMM_K;
    float *A = bench_host_alloc((size_t)M * K * sizeof(float));
    float *Bm = bench_host_alloc((size_t)K * N * sizeof(float));
    float *C = bench_host_alloc((size_t)M * N * sizeof(float));
    double best = 0.0;
    if (A && Bm && C) {
        for (size_t i = 0; i < (size_t)M * K; i++)
            A[i] = (float)(i % 7) * 0.125f;
        for (size_t i = 0; i < (size_t)K * N; i++)
            Bm[i] = (float)(i % 5) * 0.25f;
        for (int r = 0; r < 4; r++) {
            double a = bench_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, Bm, N,
                        0.0f, C, N);
            double rate = 2.0 * M * (double)N * K / (bench_now_s() - a);
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
    char *src = bench_host_alloc(bytes), *dst = bench_host_alloc(bytes);
    double best = 0.0;
    if (src && dst) {
        int nt = omp_get_max_threads();
        memset(src, 1, bytes);
        memset(dst, 0, bytes);
        for (int r = 0; r < 4; r++) {
            double a = bench_now_s();
#pragma omp parallel for schedule(static)
            for (int i = 0; i < nt; i++) {
                size_t chunk = bytes / (size_t)nt, off = (size_t)i * chunk;
                memcpy(dst + off, src + off, i == nt - 1 ? bytes - off : chunk);
            }
            double rate = 2.0 * (double)bytes / (bench_now_s() - a);
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
    bench_sanitize(buf);
}

void bench_measure_ceilings(const bench_opts *o, bench_ceilings *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->gpu_name, sizeof c->gpu_name, "none");
    cpu_model(c->cpu_name, sizeof c->cpu_name);
    int any_gpu = 0;
    for (int b = 0; b < o->num_backends; b++)
        any_gpu |= bench_is_gpu_backend(o->backends[b]);
    (void)any_gpu;
    printf("# mlaverify bench %s: Dl=%d Dr=%d, %s mask, shuffled pages, %d..%d reps (cap %.1f s/point)\n",
           mlav_version_string(), o->Dl, o->Dr, o->tree ? "random draft-tree" : "causal chain",
           o->min_reps, o->reps, o->max_seconds);
#ifdef MLAV_WITH_CUDA
    if (any_gpu) {
        bench_gpu_info gi;
        bench_gpu_open(&gi);
        snprintf(c->gpu_name, sizeof c->gpu_name, "%s", gi.name);
        bench_sanitize(c->gpu_name);
        printf("# gpu: %s, cc %d.%d, %d SMs, L2 %.0f MiB, %.0f GiB; driver %s (CUDA %d.%d), "
               "runtime %d.%d\n",
               gi.name, gi.cc_major, gi.cc_minor, gi.sm_count, gi.l2_bytes / 1048576.0,
               gi.mem_bytes / 1073741824.0, gi.driver, gi.driver_api / 1000,
               gi.driver_api % 1000 / 10, gi.runtime_api / 1000, gi.runtime_api % 1000 / 10);
        fflush(stdout);
        c->mma_tflops = bench_gpu_mma_tflops();
        c->copy_gbps = bench_gpu_copy_gbps();
        printf("# ceilings (measured now): mma.sync m16n8k16 bf16 %.1f TFLOP/s (register-only); "
               "device copy %.0f GB/s (read + write, 1 GiB)\n", c->mma_tflops, c->copy_gbps);
        if (o->l2 == BENCH_L2_WARM)
            printf("# GPU times: CUDA-graph replay of mlav_run, L2 NOT flushed (--l2 warm: a "
                   "diagnostic, not the protocol), CUDA events, median\n");
        else
            printf("# GPU times: CUDA-graph replay of mlav_run, L2 (%.0f MiB) flushed by a %.0f "
                   "MiB %s before each, CUDA events, median\n", gi.l2_bytes / 1048576.0,
                   2.0 * gi.l2_bytes / 1048576.0,
                   o->l2 == BENCH_L2_DIRTY ? "write (--l2 dirty: its lines left dirty, as "
                                             "triton's do_bench leaves them)"
                                           : "read");
    }
#endif
    int any_cpu = 0;
    for (int b = 0; b < o->num_backends; b++)
        any_cpu |= !bench_is_gpu_backend(o->backends[b]);
    if (any_cpu) {
        printf("# cpu: %s, %d OpenMP threads; clock_gettime, median\n", c->cpu_name,
               omp_get_max_threads());
        fflush(stdout);
        c->cpu_bw = cpu_copy_rate();
        c->sgemm = cpu_sgemm_rate();
        printf("# cpu ceilings (measured now): cblas_sgemm M=%d N=%d K=%d fp32 %.1f GFLOP/s "
               "(best of 3); memcpy %.1f GB/s (read + write, 256 MiB)\n", BENCH_SGEMM_M, BENCH_SGEMM_N,
               BENCH_SGEMM_K, c->sgemm / 1e9, c->cpu_bw / 1e9);
    }

}
