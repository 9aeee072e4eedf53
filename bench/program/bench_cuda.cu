/* The GPU half of `mlaverify bench`: device buffers, CUDA-graph replays timed with events after
 * an L2 flush, and the ceilings (register-only mma.sync rate, device copy bandwidth). */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "mlaverify_internal.h"
#include "bench_cuda.h"

#define BENCH_CHECK(call)                                                                    \
    do {                                                                                     \
        cudaError_t bench_e_ = (call);                                                       \
        if (bench_e_ != cudaSuccess)                                                         \
            bench_die(bench_e_, #call, __FILE__, __LINE__);                                  \
    } while (0)

[[noreturn]] static void bench_die(cudaError_t e, const char *what, const char *file, int line)
{
    fprintf(stderr, "mlaverify bench: %s failed: %s (%s) at %s:%d\n", what,
            cudaGetErrorName(e), cudaGetErrorString(e), file, line);
    exit(2);
}

/* Process-wide state: one device, one stream, one flush buffer, two events. */
static struct {
    int open;
    cudaStream_t stream;
    int4 *flush;             /* 2x L2 bytes, read (or written: --l2 dirty) before every replay */
    size_t flush_vec;        /* its length in int4 */
    unsigned *flush_sink;    /* written only if an impossible value shows up: keeps reads alive */
    int flush_blocks;
    cudaEvent_t start, stop;
} g;

/* ---- L2 flush ------------------------------------------------------------------------------ */
/* Reading (rather than writing, as a memset would) 2x the L2 leaves it full of clean lines, so
 * the timed kernel never pays for write-backs of the flush buffer. */
__global__ void bench_flush_kernel(const int4 *buf, size_t n, unsigned *sink)
{
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int4 v = buf[i];
        acc ^= (unsigned)(v.x ^ v.y ^ v.z ^ v.w);
    }
    if (acc == 0x9e3779b9u) /* the buffer is zero: never true */
        *sink = acc;
}

static void flush_l2(int mode)
{
    if (mode == BENCH_L2_WARM)
        return;
    if (mode == BENCH_L2_DIRTY) { /* zeros over zeros: the buffer stays what the reader expects */
        BENCH_CHECK(cudaMemsetAsync(g.flush, 0, g.flush_vec * sizeof(int4), g.stream));
        return;
    }
    bench_flush_kernel<<<g.flush_blocks, 512, 0, g.stream>>>(g.flush, g.flush_vec, g.flush_sink);
    BENCH_CHECK(cudaGetLastError());
}

/* ---- device info ----------------------------------------------------------------------------- */
static void read_driver_version(char *buf, size_t len)
{
    snprintf(buf, len, "?");
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f)
        return;
    char line[512];
    if (fgets(line, sizeof line, f)) {
        /* "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build
         * ...": the wording varies between driver flavours, so take the first token shaped
         * like a version number (digits and dots, at least one dot) */
        for (char *tok = strtok(line, " \t\n"); tok; tok = strtok(nullptr, " \t\n")) {
            size_t n = strspn(tok, "0123456789.");
            if (n == strlen(tok) && strchr(tok, '.') && tok[0] != '.' && n < len) {
                snprintf(buf, len, "%s", tok);
                break;
            }
        }
    }
    fclose(f);
}

extern "C" void bench_gpu_open(bench_gpu_info *info)
{
    memset(info, 0, sizeof *info);
    BENCH_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    info->l2_bytes = (size_t)prop.l2CacheSize;
    info->mem_bytes = prop.totalGlobalMem;
    BENCH_CHECK(cudaDriverGetVersion(&info->driver_api));
    BENCH_CHECK(cudaRuntimeGetVersion(&info->runtime_api));
    read_driver_version(info->driver, sizeof info->driver);

    BENCH_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    BENCH_CHECK(cudaEventCreate(&g.start));
    BENCH_CHECK(cudaEventCreate(&g.stop));
    size_t bytes = std::max<size_t>(2 * info->l2_bytes, (size_t)64 << 20);
    void *p = nullptr;
    BENCH_CHECK(cudaMalloc(&p, bytes));
    BENCH_CHECK(cudaMemset(p, 0, bytes));
    g.flush = (int4 *)p;
    g.flush_vec = bytes / sizeof(int4);
    BENCH_CHECK(cudaMalloc(&g.flush_sink, sizeof(unsigned)));
    g.flush_blocks = 4 * info->sm_count;
    g.open = 1;
}

extern "C" void bench_gpu_close(void)
{
    if (!g.open)
        return;
    BENCH_CHECK(cudaStreamSynchronize(g.stream));
    BENCH_CHECK(cudaFree((void *)g.flush));
    BENCH_CHECK(cudaFree(g.flush_sink));
    BENCH_CHECK(cudaEventDestroy(g.start));
    BENCH_CHECK(cudaEventDestroy(g.stop));
    BENCH_CHECK(cudaStreamDestroy(g.stream));
    g.open = 0;
}

/* ---- buffers --------------------------------------------------------------------------------- */
extern "C" void *bench_gpu_alloc(size_t bytes)
{
    void *p = nullptr;
    BENCH_CHECK(cudaMalloc(&p, bytes ? bytes : 256));
    return p;
}

extern "C" void bench_gpu_free(void *ptr)
{
    if (ptr)
        BENCH_CHECK(cudaFree(ptr));
}

extern "C" void bench_gpu_upload(void *dst, const void *src, size_t bytes)
{
    BENCH_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

__device__ __forceinline__ float bench_uniform(uint64_t seed, size_t i)
{
    /* splitmix64 of (seed, index): every element independent, no state between threads */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / 16777216.0 * 2.0 - 1.0);
}

/* The same uniform values in any storage dtype, rounded to nearest even by the library's one
 * conversion rule; an FP8 cache's values are over the scale, quantized (their value is the byte
 * times kv_scale = scale). */
__global__ void bench_fill_kernel(void *p, int dtype, size_t n, float fp8_scale, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = bench_uniform(seed, i);
        mlav_store_from_f32(p, dtype, i, dtype == MLAV_DTYPE_FP8_E4M3 ? v / fp8_scale : v);
    }
}

extern "C" void bench_gpu_fill_random(void *ptr, size_t n, mlav_dtype dtype, float fp8_scale,
                                      uint64_t seed)
{
    const int blocks = 1024, threads = 256;
    bench_fill_kernel<<<blocks, threads, 0, g.stream>>>(ptr, (int)dtype, n, fp8_scale, seed);
    BENCH_CHECK(cudaGetLastError());
    BENCH_CHECK(cudaStreamSynchronize(g.stream));
}

/* ---- timing a plan ---------------------------------------------------------------------------- */
/* One body (library calls enqueued on g.stream) made ready to replay: a direct call first (its
 * status is what the caller reports; UNSUPPORTED = "n/a"), then one capture into a CUDA graph.
 * Global mode: any call unsafe under capture inside the body fails the capture, which is the
 * API's promise being checked; the body's direct calls are then timed instead. */
struct replay {
    std::function<mlav_status()> body;
    cudaGraphExec_t exec = nullptr;

    mlav_status prepare(bench_timing *out)
    {
        memset(out, 0, sizeof *out);
        mlav_status s = body();
        if (s != MLAV_OK)
            return s;
        BENCH_CHECK(cudaStreamSynchronize(g.stream));
        cudaGraph_t graph = nullptr;
        BENCH_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeGlobal));
        mlav_status cs = body();
        cudaError_t ce = cudaStreamEndCapture(g.stream, &graph);
        if (cs == MLAV_OK && ce == cudaSuccess && graph) {
            BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            out->graph = 1;
        } else {
            fprintf(stderr,
                    "mlaverify bench: graph capture of mlav_run failed (%s: %s; end capture: %s):"
                    " timing direct calls\n",
                    mlav_status_string(cs), cs == MLAV_OK ? "" : mlav_last_error(nullptr),
                    cudaGetErrorName(ce));
            /* clear the capture error so the next checked call is clean */
            (void)cudaGetLastError();
        }
        if (graph)
            BENCH_CHECK(cudaGraphDestroy(graph));
        return MLAV_OK;
    }
    void launch()
    {
        if (exec) {
            BENCH_CHECK(cudaGraphLaunch(exec, g.stream));
            return;
        }
        mlav_status rs = body();
        if (rs != MLAV_OK) {
            fprintf(stderr, "mlaverify bench: mlav_run failed on a repeat: %s: %s\n",
                    mlav_status_string(rs), mlav_last_error(nullptr));
            exit(2);
        }
    }
    ~replay()
    {
        if (exec)
            (void)cudaGraphExecDestroy(exec);
    }
};

/* Time `n` bodies: each made ready (replay::prepare) and warmed up, then timed replay by replay,
 * each preceded by an L2 flush outside its timed events. Several bodies take turns of TURN
 * replays in ABBA order (A B, B A, ...), each turn opened by an untimed replay, so that bodies
 * compared with each other see the same GPU. Timed one after the other, a long tensor-bound point
 * heats the card: on an H100 at B 1, H 64, q_len 64, 131k the later body's time read 1.10x the
 * earlier's (its clocks sampled at 1,680-1,755 MHz, 1,980 at rest) where, in turns, the two
 * matched.
 * Alternated replay by replay instead, the first replay of a graph after the other's ran up to
 * 7 us longer at short points, more for one graph than the other (docs/PERFORMANCE.md#engine-path).
 * The turns stop at min_reps timed replays a body, or past it at max_reps or n x max_seconds.
 * Returns the first body's failing status. */
static mlav_status time_turns(replay *bodies, int n, const bench_reps *reps,
                              bench_timing *const *out)
{
    constexpr int TURN = 5;
    for (int b = 0; b < n; b++) {
        mlav_status s = bodies[b].prepare(out[b]);
        if (s != MLAV_OK)
            return s;
    }
    for (int i = 0; i < 3; i++) /* warm-up: clocks, instruction cache, TLB */
        for (int b = 0; b < n; b++)
            bodies[b].launch();
    BENCH_CHECK(cudaStreamSynchronize(g.stream));

    std::vector<std::vector<double>> us((size_t)n);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0;; r++) {
        for (int k = 0; k < n; k++) {
            const int b = r % 2 ? n - 1 - k : k;
            if (n > 1) /* the turn's untimed opening replay */
                bodies[b].launch();
            for (int i = 0; i < (n > 1 ? TURN : 1); i++) {
                flush_l2(reps->l2);
                BENCH_CHECK(cudaEventRecord(g.start, g.stream));
                bodies[b].launch();
                BENCH_CHECK(cudaEventRecord(g.stop, g.stream));
                BENCH_CHECK(cudaEventSynchronize(g.stop));
                float ms = 0.0f;
                BENCH_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
                us[(size_t)b].push_back(1000.0 * ms);
            }
        }
        double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const int done = (int)us[0].size();
        if (done >= reps->min_reps && (done >= reps->max_reps || spent >= n * reps->max_seconds))
            break;
    }
    for (int b = 0; b < n; b++) {
        std::vector<double> &v = us[(size_t)b];
        std::sort(v.begin(), v.end());
        const size_t m = v.size();
        out[b]->reps = (int)m;
        out[b]->min_us = v[0];
        out[b]->max_us = v[m - 1];
        out[b]->median_us = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    }
    return MLAV_OK;
}

extern "C" mlav_status bench_gpu_time(const mlav_plan *plan, const mlav_tensors *t,
                                      void *workspace, size_t workspace_bytes,
                                      const bench_reps *reps, bench_timing *out)
{
    replay r[1];
    r[0].body = [=]() { return mlav_run(plan, t, workspace, workspace_bytes, g.stream); };
    bench_timing *o[1] = {out};
    return time_turns(r, 1, reps, o);
}

extern "C" mlav_status bench_gpu_time_steps(const bench_exact_run *exact, const mlav_plan *plan,
                                            const mlav_lengths *len, const mlav_tensors *t,
                                            void *workspace, size_t workspace_bytes,
                                            const bench_reps *reps, bench_timing *step,
                                            bench_timing *run, bench_timing *exact_run,
                                            bench_timing *update)
{
    mlav_status s;
    {
        replay r[1];
        r[0].body = [=]() {
            mlav_status u = mlav_plan_update(plan, len, workspace, workspace_bytes, g.stream);
            return u != MLAV_OK ? u : mlav_run(plan, t, workspace, workspace_bytes, g.stream);
        };
        bench_timing *o[1] = {step};
        s = time_turns(r, 1, reps, o);
    }
    if (s != MLAV_OK)
        return s;
    /* the workspace holds the step's schedule now: the run alone, in turns with the exact
     * plan's run of the same point, and the update alone */
    {
        replay r[2];
        r[0].body = [=]() { return mlav_run(plan, t, workspace, workspace_bytes, g.stream); };
        r[1].body = [=]() {
            return mlav_run(exact->plan, exact->t, exact->workspace, exact->workspace_bytes,
                            g.stream);
        };
        bench_timing *o[2] = {run, exact_run};
        s = time_turns(r, 2, reps, o);
    }
    if (s != MLAV_OK)
        return s;
    {
        replay r[1];
        r[0].body = [=]() {
            return mlav_plan_update(plan, len, workspace, workspace_bytes, g.stream);
        };
        bench_timing *o[1] = {update};
        s = time_turns(r, 1, reps, o);
    }
    if (s != MLAV_OK)
        return s;
    int32_t bad = -1;
    return mlav_plan_step_status(plan, workspace, workspace_bytes, g.stream, &bad);
}

/* ---- ceiling 1: mma.sync rate ---------------------------------------------------------------- */
/* Independent accumulators per warp: enough MMAs in flight to cover the tensor pipe's latency,
 * with no shared memory or global loads in the loop, so only the MMA issue rate limits it. */
#define BENCH_MMA_ACC 8
#define BENCH_MMA_THREADS 256

__global__ void __launch_bounds__(BENCH_MMA_THREADS)
    bench_mma_kernel(int iters, float *sink)
{
    /* small nonzero BF16 operands (not zeros, which draw less power and run faster), varied
     * per lane; products stay far from overflow over any iteration count used here */
    uint32_t lane = threadIdx.x & 31u;
    uint32_t a0 = 0x3c003c00u + lane, a1 = 0x3c013c02u ^ lane, a2 = 0x3b803c00u + (lane << 16),
             a3 = 0x3c003b80u;
    uint32_t b0 = 0x3b003b00u + lane, b1 = 0x3b013b02u;
    float acc[BENCH_MMA_ACC][4];
#pragma unroll
    for (int k = 0; k < BENCH_MMA_ACC; k++)
        acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0f;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int k = 0; k < BENCH_MMA_ACC; k++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(acc[k][0]), "+f"(acc[k][1]), "+f"(acc[k][2]), "+f"(acc[k][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < BENCH_MMA_ACC; k++)
        s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
    if (s == -1.0f) /* never: the sums are positive; keeps the results live */
        sink[blockIdx.x] = s;
}

extern "C" double bench_gpu_mma_tflops(void)
{
    int dev = 0, sms = 0, per_sm = 0;
    BENCH_CHECK(cudaGetDevice(&dev));
    BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    BENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bench_mma_kernel,
                                                              BENCH_MMA_THREADS, 0));
    per_sm = std::max(1, std::min(per_sm, 4));
    int blocks = sms * per_sm;
    float *sink = (float *)bench_gpu_alloc((size_t)blocks * sizeof(float));
    const int iters = 16384;
    double flop = 2.0 * 16 * 8 * 16 * BENCH_MMA_ACC * (double)iters * (BENCH_MMA_THREADS / 32) *
                  blocks;
    bench_mma_kernel<<<blocks, BENCH_MMA_THREADS, 0, g.stream>>>(iters, sink); /* warm-up */
    BENCH_CHECK(cudaGetLastError());
    std::vector<double> rate;
    for (int r = 0; r < 7; r++) {
        BENCH_CHECK(cudaEventRecord(g.start, g.stream));
        bench_mma_kernel<<<blocks, BENCH_MMA_THREADS, 0, g.stream>>>(iters, sink);
        BENCH_CHECK(cudaGetLastError());
        BENCH_CHECK(cudaEventRecord(g.stop, g.stream));
        BENCH_CHECK(cudaEventSynchronize(g.stop));
        float ms = 0.0f;
        BENCH_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
        rate.push_back(flop / (ms * 1e-3) / 1e12);
    }
    bench_gpu_free(sink);
    std::sort(rate.begin(), rate.end());
    return rate[rate.size() / 2];
}

/* ---- ceiling 2: copy bandwidth ---------------------------------------------------------------- */
extern "C" double bench_gpu_copy_gbps(void)
{
    const size_t bytes = (size_t)1 << 30; /* 1 GiB each way: far past any L2 */
    void *src = bench_gpu_alloc(bytes), *dst = bench_gpu_alloc(bytes);
    BENCH_CHECK(cudaMemsetAsync(src, 1, bytes, g.stream));
    BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.stream)); /* warm */
    std::vector<double> rate;
    for (int r = 0; r < 9; r++) {
        BENCH_CHECK(cudaEventRecord(g.start, g.stream));
        BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.stream));
        BENCH_CHECK(cudaEventRecord(g.stop, g.stream));
        BENCH_CHECK(cudaEventSynchronize(g.stop));
        float ms = 0.0f;
        BENCH_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
        rate.push_back(2.0 * (double)bytes / (ms * 1e-3) / 1e9);
    }
    bench_gpu_free(src);
    bench_gpu_free(dst);
    std::sort(rate.begin(), rate.end());
    return rate[rate.size() / 2];
}
