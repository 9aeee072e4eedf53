/* Where the device scheduler's time goes: src/cuda/schedule_step.cu compiled here with a clock64
 * stamp at each phase (MLAV_SCHED_STAMP, empty in the library), launched alone on a plan's
 * parameters for an H200-sized device (132 SMs, one block each) and limits of 64 requests, H 16,
 * q_len <= 16, kv_len <= 49152, at B = 1, 32 and 64 (random batches, prefixes 16k-49k), L2
 * flushed before each launch; thread 0's cycles per phase, median of 50 launches. Thread 0 is
 * in warp 0: search 0 and its candidates (c0, 2 c0, 4 c0), so its phases 2-3 and 3-4 are that
 * search's and those candidates', and the barrier after them waits for the slowest search.
 * Run: build/bench/diag/sched_stamps */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

__device__ long long g_stamps[10];
#define MLAV_SCHED_STAMP(i)                                                                   \
    do {                                                                                      \
        if (threadIdx.x == 0)                                                                 \
            g_stamps[i] = clock64();                                                          \
    } while (0)
#include "../../src/cuda/schedule_step.cu"
#include "l2_flush.cuh"

/* the library's error path, which the included launch names */
mlav_status mlav_cuda_error(cudaError_t e, const char *what, const char *file, int line)
{
    fprintf(stderr, "%s:%d: %s: %s\n", file, line, what, cudaGetErrorString(e));
    exit(2);
}

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess)                                                                \
            mlav_cuda_error(e_, #call, __FILE__, __LINE__);                                   \
    } while (0)


int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "sched_stamps: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    l2_flusher fl;
    CK(fl.make((size_t)prop.l2CacheSize) ? cudaSuccess : cudaGetLastError());

    const int H = 16;
    const mlav_limits lim = {64, 64 * 16, 16, 49152};
    mlav_schedule_params sp = mlav_flash_schedule_params(132, 1);
    sp = mlav_step_params(H, &lim, sp);
    const mlav_step_bounds bd = mlav_step_bounds_of(H, &lim, &sp);
    const size_t region = sizeof(mlav_step_header) + sizeof(mlav_split_item) * bd.max_items +
                          sizeof(mlav_combine_item) * bd.max_combine;
    char *ws;
    int32_t *dqi, *dkv;
    CK(cudaMalloc(&ws, region + 256));
    CK(cudaMalloc(&dqi, sizeof(int32_t) * 65));
    CK(cudaMalloc(&dkv, sizeof(int32_t) * 64));
    printf("# sched_stamps on %s: cycles of thread 0 per phase, median of 50 (L2 flushed)\n",
           prop.name);
    printf("# 0-1 loads, 1-2 sums, 2-3 search 0, 3-4 its candidates, 4-5 wait for the other\n"
           "# searches and take the best, 5-6 splits and their offsets, 6-7 items, 7-8 combine\n"
           "# items, 8-9 header; then the whole\n");
    srand(7);
    for (int B : {1, 32, 64}) {
        std::vector<int32_t> qi(B + 1), kv(B);
        qi[0] = 0;
        for (int b = 0; b < B; b++) {
            const int q = 1 + rand() % 16;
            qi[b + 1] = qi[b] + q;
            kv[b] = (int)((0.5 + (double)rand() / RAND_MAX) * 32768);
        }
        CK(cudaMemcpy(dqi, qi.data(), sizeof(int32_t) * (B + 1), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dkv, kv.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));
        mlav_step_sched_params p = {};
        p.q_indptr = dqi;
        p.kv_lens = dkv;
        p.batch = B;
        p.H = H;
        p.lim = lim;
        p.sp = sp;
        p.bd = bd;
        p.hdr = reinterpret_cast<mlav_step_header *>(ws);
        p.items = reinterpret_cast<mlav_split_item *>(ws + sizeof(mlav_step_header));
        p.combine = reinterpret_cast<mlav_combine_item *>(p.items + bd.max_items);
        p.ka_div = mlav_fastdiv_make((uint32_t)sp.key_align);
        p.region_bytes = region;
        std::vector<std::vector<long long>> d(10);
        CK(mlav_step_schedule_prepare() == MLAV_OK ? cudaSuccess : cudaErrorUnknown);
        for (int r = 0; r < 53; r++) {
            fl.run(0);
            CK(mlav_step_schedule_launch(&p, 0) == MLAV_OK ? cudaSuccess : cudaErrorUnknown);
            CK(cudaDeviceSynchronize());
            long long st[10];
            CK(cudaMemcpyFromSymbol(st, g_stamps, sizeof st));
            if (r < 3)
                continue;
            for (int i = 1; i < 10; i++)
                d[i - 1].push_back(st[i] - st[i - 1]);
            d[9].push_back(st[9] - st[0]);
        }
        printf("B=%2d:", B);
        for (auto &v : d) {
            std::sort(v.begin(), v.end());
            printf(" %6lld", v[v.size() / 2]);
        }
        int32_t hdr[8];
        CK(cudaMemcpy(hdr, ws, sizeof hdr, cudaMemcpyDeviceToHost));
        printf("   (chunk %d, %d items)\n", hdr[5], hdr[2]);
    }
    fl.release();
    return 0;
}
