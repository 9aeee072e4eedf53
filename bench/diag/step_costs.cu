/* The engine step's own costs on a GPU host, from C (no binding in between), for a CUDA plan
 * for limits of 64 requests, H 16, q_len <= 16, kv_len <= 49152 (a production batch with
 * prefixes spread 0.5), at B = 1, 16, 32, 64 and 2048-request limits at B = 2048:
 *
 *   host update:  mlav_plan_update with host lengths, per call (its checks, the step rule into a
 *                 pinned staging slot, the copy and the event on the stream): 7 calls timed
 *                 back to back, then the stream drained outside the timing, so the staging
 *                 ring never waits; median over 300 groups. Beside it the CUDA calls it makes,
 *                 alone, timed the same way (the floor of any update through a staging copy):
 *                 all of them (a 64 KB copy, a ring of 8 events), the copy alone, the device
 *                 and capture queries, one event's synchronize and record. And the step rule
 *                 alone (mlav_step_schedule_build, compiled in, with the plan's parameters: its
 *                 chunk is printed beside the plan's), into ordinary memory and into pinned
 *                 memory as the update's staging slots are, timed the same way.
 *   scheduler:    mlav_plan_update with device lengths captured in a CUDA graph, replayed with
 *                 CUDA events around it, against a graph of one empty kernel timed the same way
 *                 in the same run (the replay's own overhead); L2 flushed before each replay
 *                 (a read of twice the L2) as the benchmark does. Median of 200 replays. And
 *                 warm: a graph of the update twice less the graph of one (the second finds
 *                 its code and data cached).
 *
 * The issue's budgets: 10 us for the host update at B = 64, 3 us for the scheduler. Run on the
 * GPU host:  build/bench/diag/step_costs */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"
#include "l2_flush.cuh"
#include "mlaverify_internal.h"

#define OK(call)                                                                              \
    do {                                                                                      \
        mlav_status s_ = (call);                                                              \
        if (s_ != MLAV_OK) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,                 \
                    mlav_status_string(s_), mlav_last_error(NULL));                           \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)

__global__ void empty_kernel() {}


static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* us per call of f, 7 calls a group (below the staging ring of 8), the stream drained between
 * groups outside the timing */
template <typename F> static double host_us(F f, cudaStream_t st)
{
    std::vector<double> us;
    for (int g = 0; g < 300; g++) {
        CK(cudaStreamSynchronize(st));
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 7; i++)
            f();
        const auto t1 = std::chrono::steady_clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 7);
    }
    CK(cudaStreamSynchronize(st));
    return median(us);
}


/* event-timed replays of a graph, L2 flushed before each */
static double replay_us(cudaGraphExec_t x, cudaStream_t st, const l2_flusher &fl)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> us;
    for (int i = 0; i < 203; i++) {
        fl.run(st);
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(x, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3)
            us.push_back(1000.0 * ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return median(us);
}

int main(void)
{
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        fprintf(stderr, "step_costs: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    l2_flusher fl;
    CK(fl.make((size_t)prop.l2CacheSize) ? cudaSuccess : cudaGetLastError());

    /* the replay's own overhead: one empty kernel in a graph */
    cudaGraph_t g;
    cudaGraphExec_t xe;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    empty_kernel<<<1, 32, 0, st>>>();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&xe, g, 0));
    const double empty = replay_us(xe, st, fl);
    printf("# step_costs on %s: host update (host lengths) per call and the CUDA calls it makes;\n"
           "# the device scheduler (device lengths) in a graph, L2 flushed, less an empty "
           "kernel's graph (%.2f us)\n",
           prop.name, empty);
    printf("%5s %5s %12s %13s %9s %10s %10s %8s %12s %14s %13s %13s %8s %10s\n", "limB", "B",
           "host_upd_us", "floor_calls_us", "copy_us", "query_us", "event_us", "rule_us",
           "rule_pin_us", "sched_graph_us", "sched_own_us", "sched_warm_us", "chunk",
           "rule_chunk");

    mlav_context *ctx;
    OK(mlav_context_create(&ctx, MLAV_BACKEND_CUDA));
    srand(7);
    const int cases[][2] = {{64, 1}, {64, 16}, {64, 32}, {64, 64}, {2048, 2048}};
    for (const auto &c : cases) {
        const int MB = c[0], B = c[1], H = 16, QL = 16, KV = 49152;
        const mlav_limits lim = {MB, MB * QL, QL, KV};
        mlav_problem shape = {};
        shape.num_heads = H;
        shape.d_latent = 512;
        shape.d_rope = 64;
        shape.softmax_scale = 0.07f;
        shape.dtype = MLAV_DTYPE_BF16;
        shape.page_size = 64;
        shape.max_pages = KV / 64;
        mlav_plan *plan;
        OK(mlav_plan_create_for_limits(ctx, &shape, &lim, &plan));
        const size_t bytes = mlav_plan_workspace_bytes(plan);
        void *ws;
        CK(cudaMalloc(&ws, bytes));
        std::vector<int32_t> qi(B + 1), kv(B);
        qi[0] = 0;
        for (int b = 0; b < B; b++) {
            const int q = 1 + rand() % QL;
            qi[b + 1] = qi[b] + q;
            int k = (int)((0.5 + (double)rand() / RAND_MAX) * 32768);
            kv[b] = std::min(std::max(k, q), KV);
        }
        int32_t *dqi, *dkv;
        CK(cudaMalloc(&dqi, sizeof(int32_t) * (B + 1)));
        CK(cudaMalloc(&dkv, sizeof(int32_t) * B));
        CK(cudaMemcpy(dqi, qi.data(), sizeof(int32_t) * (B + 1), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dkv, kv.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));
        const mlav_lengths hl = {MLAV_MEM_HOST, B, qi.data(), kv.data()};
        const mlav_lengths dl = {MLAV_MEM_DEVICE, B, dqi, dkv};

        OK(mlav_plan_update(plan, &hl, ws, bytes, st));
        const double hu = host_us([&]() { OK(mlav_plan_update(plan, &hl, ws, bytes, st)); }, st);
        /* the floor: what the host path calls, alone (a staging copy of 64 KB) */
        void *pin;
        const size_t region = 64 << 10;
        CK(cudaMallocHost(&pin, region));
        cudaEvent_t ev, ring[8];
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        for (auto &e : ring)
            CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        int next = 0;
        const double floor = host_us(
            [&]() {
                int d;
                cudaStreamCaptureStatus cs;
                CK(cudaGetDevice(&d));
                CK(cudaStreamIsCapturing(st, &cs));
                CK(cudaEventSynchronize(ring[next]));
                CK(cudaMemcpyAsync(ws, pin, region, cudaMemcpyHostToDevice, st));
                CK(cudaEventRecord(ring[next], st));
                next = (next + 1) % 8;
            },
            st);
        const double copy_only = host_us(
            [&]() { CK(cudaMemcpyAsync(ws, pin, region, cudaMemcpyHostToDevice, st)); }, st);
        const double query_only = host_us(
            [&]() {
                int d;
                cudaStreamCaptureStatus cs;
                CK(cudaGetDevice(&d));
                CK(cudaStreamIsCapturing(st, &cs));
            },
            st);
        const double event_only = host_us(
            [&]() {
                CK(cudaEventSynchronize(ev));
                CK(cudaEventRecord(ev, st));
            },
            st);
        /* the step rule alone, with the plan's parameters (the flash kernel's, one block per
         * SM: the chunk it picks is printed beside the plan's), into ordinary and pinned memory */
        const mlav_schedule_params sp =
            mlav_step_params(H, &lim, mlav_flash_schedule_params(prop.multiProcessorCount, 1));
        const mlav_step_bounds bd = mlav_step_bounds_of(H, &lim, &sp);
        const size_t rule_bytes = sizeof(mlav_step_header) +
                                  sizeof(mlav_split_item) * (size_t)bd.max_items +
                                  sizeof(mlav_combine_item) * (size_t)bd.max_combine;
        std::vector<char> plain(rule_bytes);
        void *pinned;
        CK(cudaMallocHost(&pinned, rule_bytes));
        mlav_step_scratch *scratch =
            static_cast<mlav_step_scratch *>(malloc(mlav_step_scratch_bytes()));
        if (!scratch) {
            fprintf(stderr, "step_costs: out of host memory\n");
            return 1;
        }
        mlav_step_header rule_hdr = {};
        const auto rule_into = [&](char *dst) {
            mlav_step_header *h = reinterpret_cast<mlav_step_header *>(dst);
            mlav_split_item *it = reinterpret_cast<mlav_split_item *>(dst + sizeof *h);
            mlav_step_schedule_build(B, qi.data(), kv.data(), mlav_shard{1, 0, 1}, H, &lim, &sp,
                                     &bd, h, it,
                                     reinterpret_cast<mlav_combine_item *>(it + bd.max_items),
                                     scratch);
            rule_hdr = *h;
        };
        const double rule_plain = host_us([&]() { rule_into(plain.data()); }, st);
        const double rule_pinned = host_us([&]() { rule_into(static_cast<char *>(pinned)); }, st);
        free(scratch);
        CK(cudaFreeHost(pinned));

        /* the device scheduler in a graph */
        cudaGraph_t gu;
        cudaGraphExec_t xu;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        OK(mlav_plan_update(plan, &dl, ws, bytes, st));
        CK(cudaStreamEndCapture(st, &gu));
        CK(cudaGraphInstantiate(&xu, gu, 0));
        const double sg = replay_us(xu, st, fl);
        /* the same update twice in one graph: the second finds its code and the lengths in the
         * caches the first filled, so the difference is the scheduler's warm cost */
        cudaGraph_t g2;
        cudaGraphExec_t x2;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        OK(mlav_plan_update(plan, &dl, ws, bytes, st));
        OK(mlav_plan_update(plan, &dl, ws, bytes, st));
        CK(cudaStreamEndCapture(st, &g2));
        CK(cudaGraphInstantiate(&x2, g2, 0));
        const double warm = replay_us(x2, st, fl) - sg;
        CK(cudaGraphExecDestroy(x2));
        CK(cudaGraphDestroy(g2));
        int32_t words[8];
        CK(cudaMemcpy(words, ws, sizeof words, cudaMemcpyDeviceToHost));
        printf("%5d %5d %12.2f %13.2f %9.2f %10.2f %10.2f %8.2f %12.2f %14.2f %13.2f %13.2f %8d "
               "%10d\n",
               MB, B, hu, floor, copy_only, query_only, event_only, rule_plain, rule_pinned, sg,
               sg - empty, warm, words[5], rule_hdr.chunk_keys);
        CK(cudaGraphExecDestroy(xu));
        CK(cudaGraphDestroy(gu));
        CK(cudaEventDestroy(ev));
        for (auto &e : ring)
            CK(cudaEventDestroy(e));
        CK(cudaFreeHost(pin));
        CK(cudaFree(dqi));
        CK(cudaFree(dkv));
        CK(cudaFree(ws));
        mlav_plan_free(plan);
    }
    mlav_context_free(ctx);
    CK(cudaGraphExecDestroy(xe));
    CK(cudaGraphDestroy(g));
    fl.release();
    CK(cudaStreamDestroy(st));
    return 0;
}
