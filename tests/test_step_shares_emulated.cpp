/* The device scheduler's equal shares (src/cuda/schedule_step_shares.cuh) run on the host, so
 * that a machine without a GPU holds them to the host's build (src/common/schedule_step_shares.c)
 * byte for byte, as test_steps_gpu holds the real device scheduler on a GPU. The phase is the
 * device code itself, compiled for the host, with the CUDA operations it uses given host
 * meanings: its 512 threads are std::threads, __syncthreads a barrier of all of them, a warp
 * shuffle a write and a read through a per-warp buffer between two barriers of its 32 threads
 * (every shuffle there runs on all 32 lanes of a warp), the shared-memory atomics GCC's. Its
 * inputs are what the scheduler's first pass leaves in shared memory (each request's row tiles,
 * KV rows and q_indptr). Random engine-like steps (2-64 requests, mostly of one draft length,
 * H 8-128, 40-132 SMs, a few split caps); where the host takes shares the phase must take them
 * and write the same header, items and combine items, and given a uniform schedule it cannot
 * beat, write nothing. Seeded (MLAV_TEST_SEED reruns a seed). */
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

extern "C" {
#include "test_util.h"
}

/* ---- the CUDA operations the phase uses, on host threads ------------------------------------ */
struct emu_index {
    unsigned x, y, z;
};
static thread_local emu_index emu_thread;
#define threadIdx emu_thread

static std::barrier<> *emu_block;
static std::barrier<> *emu_warp[16];
static int64_t emu_lanes[16][32];
#define __syncthreads() emu_block->arrive_and_wait()

template <typename T> static T emu_shuffle(T v, int src)
{
    const int lane = (int)(emu_thread.x & 31), warp = (int)(emu_thread.x >> 5);
    emu_lanes[warp][lane] = (int64_t)v;
    emu_warp[warp]->arrive_and_wait();
    const T r = (T)emu_lanes[warp][src];
    emu_warp[warp]->arrive_and_wait();
    return r;
}
template <typename T> static T __shfl_up_sync(unsigned, T v, int o)
{
    const int lane = (int)(emu_thread.x & 31);
    return emu_shuffle(v, lane >= o ? lane - o : lane);
}
template <typename T> static T __shfl_sync(unsigned, T v, int src)
{
    return emu_shuffle(v, src);
}
template <typename T> static T atomicAdd(T *p, T v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
template <typename T> static T atomicOr(T *p, T v)
{
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
template <typename T> static T atomicMax(T *p, T v)
{
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v &&
           !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}

#include "../src/cuda/schedule_step_shares.cuh"

/* The phase's threads, kept for the whole test: each step, the main thread sets `job` and all
 * meet at `go`; the 512 run it and meet the main thread at `done`. */
struct emu_pool {
    std::barrier<> go{NTH + 1}, done{NTH + 1}, block{NTH};
    std::vector<std::barrier<> *> warps;
    std::vector<std::thread> threads;
    std::function<void()> job;
    bool stop = false;

    emu_pool()
    {
        emu_block = &block;
        for (int w = 0; w < NWARPS; w++)
            emu_warp[w] = new std::barrier<>(32);
        for (int t = 0; t < NTH; t++)
            threads.emplace_back([this, t] {
                emu_thread = {(unsigned)t, 0, 0};
                for (;;) {
                    go.arrive_and_wait();
                    if (stop)
                        return;
                    job();
                    done.arrive_and_wait();
                }
            });
    }
    void run(std::function<void()> f)
    {
        job = std::move(f);
        go.arrive_and_wait();
        done.arrive_and_wait();
    }
    ~emu_pool()
    {
        stop = true;
        go.arrive_and_wait();
        for (auto &t : threads)
            t.join();
        for (int w = 0; w < NWARPS; w++)
            delete emu_warp[w];
    }
};

static sched_smem smem; /* the block's shared memory */

int main()
{
    const uint64_t seed = tu_seeded("test_step_shares_emulated");
    uint64_t rng = seed;
    auto below = [&](uint64_t n) { return tu_next(&rng) % n; };
    mlav_step_scratch *scratch = (mlav_step_scratch *)malloc(mlav_step_scratch_bytes());
    emu_pool pool;
    int taken = 0;
    for (int it = 0; it < 600; it++) {
        const int32_t H = 8 << below(5), batch = 2 + (int32_t)below(63);
        const int32_t q_all = 1 + (int32_t)below(16), prefix = 1000 << below(8);
        const int32_t sms = (const int32_t[]){132, 132, 114, 40}[below(4)];
        const int32_t max_splits = below(8) ? 256 : 1 + (int32_t)below(3);
        std::vector<int32_t> qi(batch + 1), kv(batch);
        qi[0] = 0;
        int32_t max_kv = 16, max_q = 1;
        for (int32_t b = 0; b < batch; b++) {
            const int32_t q = below(15) == 0   ? 0
                              : below(40) == 0 ? 1 + (int32_t)below(16)
                                               : q_all;
            qi[b + 1] = qi[b] + q;
            kv[b] = q + 1 + prefix / 2 + (int32_t)below((uint64_t)prefix);
            max_kv = kv[b] > max_kv ? kv[b] : max_kv;
            max_q = q > max_q ? q : max_q;
        }
        mlav_schedule_params sp = {64, 64, 64, max_splits, sms, 320, 1, 8, 1};
        const mlav_limits lim = {batch, qi[batch] > 0 ? qi[batch] : 1, max_q, max_kv};
        sp = mlav_step_params(H, &lim, sp);
        mlav_step_bounds bd = mlav_step_bounds_of(H, &lim, &sp);
        bd.combine_wave[0] = bd.combine_wave[1] = bd.combine_wave[2] = sms;
        std::vector<mlav_split_item> items(bd.max_items);
        std::vector<mlav_combine_item> comb(bd.max_combine);
        mlav_step_header hh;
        mlav_step_schedule_build(batch, qi.data(), kv.data(), (mlav_shard){1, 0, 1}, H, &lim, &sp,
                                 &bd, &hh, items.data(), comb.data(), scratch);
        int host_shares = 0;
        for (int32_t i = 1; i < hh.n_items; i++)
            host_shares |= items[i].b < items[i - 1].b;
        if (!host_shares)
            continue;
        taken++;

        /* what the scheduler's first pass leaves in shared memory (schedule_step.cu) */
        memset(&smem, 0, sizeof smem);
        int32_t with_rows = 0, mt = 0;
        int64_t kv_tiles = 0;
        for (int32_t b = 0; b < batch; b++) {
            const int64_t q = qi[b + 1] - qi[b];
            const int32_t t = mlav_step_request_ok(q, kv[b], lim.max_q_len, lim.max_kv_len)
                                  ? (int32_t)((q * H + 63) / 64)
                                  : 0;
            smem.tiles[b] = t;
            smem.kv[b] = (uint32_t)kv[b];
            smem.q0[b] = qi[b];
            if (t) {
                with_rows++;
                mt = t;
                kv_tiles += (kv[b] + 63) / 64;
            }
        }
        smem.q0[batch] = qi[batch];
        for (int d = 1; d <= MLAV_STEP_INV_MAX; d++)
            smem.inv[d] = 1.0 / d;

        const size_t region = sizeof(mlav_step_header) +
                              sizeof(mlav_split_item) * (size_t)bd.max_items +
                              sizeof(mlav_combine_item) * (size_t)bd.max_combine + 256;
        std::vector<unsigned char> ws(region, 0xa5), untouched(region, 0xa5);
        mlav_step_sched_params p = {};
        p.batch = batch;
        p.H = H;
        p.lim = lim;
        p.sp = sp;
        p.bd = bd;
        p.hdr = (mlav_step_header *)ws.data();
        p.items = (mlav_split_item *)(ws.data() + sizeof(mlav_step_header));
        p.combine = (mlav_combine_item *)(p.items + bd.max_items);
        p.ka_div = mlav_fastdiv_make(64);
        p.region_bytes = region;
        p.shard = (mlav_shard){1, 0, 1};

        /* a uniform schedule of no time: shares must decline and write nothing */
        bool took = true;
        pool.run([&] {
            const bool r = step_shares(smem, p, with_rows, mt, kv_tiles, 0, hh.bad);
            if (threadIdx.x == 0)
                took = r;
        });
        if (took || memcmp(ws.data(), untouched.data(), region) != 0) {
            fprintf(stderr, "seed 0x%llx, step %d: shares taken or bytes written against a uniform "
                            "schedule of no time\n",
                    (unsigned long long)seed, it);
            return 1;
        }
        /* one they beat (the host took them): the host's bytes */
        pool.run([&] {
            const bool r = step_shares(smem, p, with_rows, mt, kv_tiles, INT64_MAX / 200, hh.bad);
            if (threadIdx.x == 0)
                took = r;
        });
        const mlav_step_header *dh = p.hdr;
        int bad = !took || dh->n_items != hh.n_items || dh->n_combine != hh.n_combine ||
                  dh->n_slots != hh.n_slots || dh->chunk_keys != hh.chunk_keys ||
                  dh->combine_kind != hh.combine_kind ||
                  dh->combine_col_blocks != hh.combine_col_blocks || dh->bad != hh.bad;
        bad |= memcmp(p.items, items.data(), sizeof(mlav_split_item) * (size_t)bd.max_items) != 0;
        bad |= memcmp(p.combine, comb.data(),
                      sizeof(mlav_combine_item) * (size_t)bd.max_combine) != 0;
        if (bad) {
            fprintf(stderr, "seed 0x%llx, step %d (batch %d, H %d, %d SMs): the device phase's "
                            "bytes differ from the host's (taken %d, items %d / %d)\n",
                    (unsigned long long)seed, it, batch, H, sms, (int)took, dh->n_items,
                    hh.n_items);
            return 1;
        }
    }
    printf("  %d steps of equal shares: the device phase wrote the host's bytes in each, and "
           "nothing against a uniform schedule it could not beat\n",
           taken);
    free(scratch);
    return taken > 0 ? 0 : 1; /* the comparison is the test: some steps must take shares */
}
