/* The GPU half of `mlaverify bench` (bench_cuda.cu), as a small C interface: device buffers,
 * graph-replay timing with an L2 flush before every replay, and the two measured ceilings.
 * Every CUDA call inside is checked; a failure prints the call, the error and file:line and
 * exits with status 2 (this is the command-line tool, never the library). */
#ifndef MLAV_BENCH_PROGRAM_BENCH_CUDA_H
#define MLAV_BENCH_PROGRAM_BENCH_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bench_gpu_info {
    char name[256];         /* cudaDeviceProp.name, e.g. "NVIDIA H200" */
    char driver[64];        /* NVIDIA driver version from /proc/driver/nvidia/version, or "?" */
    int cc_major, cc_minor;
    int sm_count;
    int driver_api;         /* cudaDriverGetVersion: 13000 = CUDA 13.0 */
    int runtime_api;        /* cudaRuntimeGetVersion */
    size_t l2_bytes;        /* read from the device: sizes the flush buffer */
    size_t mem_bytes;
} bench_gpu_info;

/* The L2 before each timed replay (--l2). FLUSH, the protocol: 2x the L2 read, so it holds clean
 * lines of another buffer. DIRTY: 2x the L2 written (a memset, as triton's do_bench zeroes its
 * 256 MB and so the FlashMLA harness), so it holds dirty lines that the timed kernel's misses
 * write back. WARM: left as the previous replay left it (a diagnostic of cold misses). */
typedef enum bench_l2 { BENCH_L2_FLUSH = 0, BENCH_L2_WARM = 1, BENCH_L2_DIRTY = 2 } bench_l2;

/* How many replays to time: stop at max_reps, or once max_seconds of timing have passed, but
 * never before min_reps. */
typedef struct bench_reps {
    int min_reps, max_reps;
    double max_seconds;
    int l2;                 /* bench_l2: the L2 before each replay */
} bench_reps;

typedef struct bench_timing {
    double median_us;       /* median of the timed replays */
    double min_us, max_us;  /* the fastest and the slowest */
    int reps;               /* replays timed */
    int graph;              /* 1: CUDA graph replays; 0: capture failed, direct mlav_run calls */
} bench_timing;

/* Select device 0, describe it, allocate the L2 flush buffer (2x the L2) and a stream. */
void bench_gpu_open(bench_gpu_info *info);
void bench_gpu_close(void);

/* Ceiling 1: register-only mma.sync m16n8k16 BF16 (fp32 accumulate) on every SM, TFLOP/s. */
double bench_gpu_mma_tflops(void);
/* Ceiling 2: device-to-device cudaMemcpyAsync of 1 GiB, bytes read + written per second / 1e9. */
double bench_gpu_copy_gbps(void);

/* Device memory (cudaMalloc: 256-byte aligned, as mlav_run's workspace must be). */
void *bench_gpu_alloc(size_t bytes);
void bench_gpu_free(void *ptr);
void bench_gpu_upload(void *dst, const void *src, size_t bytes);
/* Fill `n` elements of `dtype` with uniform values in [-1, 1) drawn from `seed`, on the device. An
 * FP8_E4M3 buffer holds each value divided by `fp8_scale`, quantized (a cache whose kv_scale is
 * fp8_scale: byte x kv_scale is the value to e4m3's precision); other dtypes ignore fp8_scale. */
void bench_gpu_fill_random(void *ptr, size_t n, mlav_dtype dtype, float fp8_scale, uint64_t seed);

/* Time `plan` on device-resident tensors: one direct run (its status is returned as is, so
 * MLAV_ERR_UNSUPPORTED means "n/a"), capture into a CUDA graph, warm up, then replays each
 * preceded by an L2 flush outside the timed events. */
mlav_status bench_gpu_time(const mlav_plan *plan, const mlav_tensors *t, void *workspace,
                           size_t workspace_bytes, const bench_reps *reps, bench_timing *out);

/* The exact plan of a point, ready to run: what the engine path's run is timed against. */
typedef struct bench_exact_run {
    const mlav_plan *plan;
    const mlav_tensors *t;
    void *workspace;
    size_t workspace_bytes;
} bench_exact_run;

/* Time a plan for limits as an engine runs it, with `len` device lengths: `step` is one graph
 * of mlav_plan_update then mlav_run (one layer's step), `run` the run alone on the updated
 * workspace (every further layer's cost), timed in turns with `exact`'s run of the same
 * point (`exact_run`: what run / exact divides by), `update` the update alone (the device
 * scheduler). Returns the first failing status; MLAV_ERR_INVALID_ARG when the device refused a
 * length. */
mlav_status bench_gpu_time_steps(const bench_exact_run *exact, const mlav_plan *plan,
                                 const mlav_lengths *len, const mlav_tensors *t, void *workspace,
                                 size_t workspace_bytes, const bench_reps *reps,
                                 bench_timing *step, bench_timing *run, bench_timing *exact_run,
                                 bench_timing *update);

#ifdef __cplusplus
}
#endif

#endif
