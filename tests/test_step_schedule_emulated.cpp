/* The device scheduler (src/cuda/schedule_step_kernel.cuh) run on the host, so that a machine
 * without a GPU holds it to the host's update (mlav_step_schedule_build) byte for byte, as
 * test_steps_gpu holds the real one on a GPU. The kernel is the device code itself, compiled by
 * the host's C++ compiler with the CUDA operations it uses given host meanings: its 512 threads
 * are std::threads, __syncthreads a barrier of all of them, a warp shuffle or reduction a write
 * and a read through a per-warp buffer between two barriers of its 32 threads (every one there
 * runs on all 32 lanes of a warp), the shared-memory atomics GCC's, __drcp_rn a division
 * (correctly rounded, as it is). The helpers it shares with the host (MLAV_HD) take their host
 * forms here: the device forms of the few that differ (a table-only 1 / d, a double-based
 * division, an approximate guess) are the GPU test's. 70 random steps as test_steps_gpu draws
 * them (1 to 2,048 requests, single tokens to long drafts, a third of one draft length, refused
 * requests and a broken q_indptr among them), on the H200's sm_90a parameters (equal shares
 * weighed) and the legal family's; then engine batches (2-64 requests of mostly one draft
 * length), those the host puts in equal shares: every step's region (header, items, combine
 * items, the zeroed tail) must be the host's. The emulation's barriers cost a few tenths of a
 * second a step on 2 cores, hence the counts. Seeded (MLAV_TEST_SEED reruns a seed). */
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
#include "steps_fixture.h"
#include "test_util.h"
}

/* ---- the CUDA operations the kernel uses, on host threads ---------------------------------- */
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
/* a warp reduction: every lane's value through the buffer, each lane folding all 32 */
template <typename T, typename F> static T emu_reduce(T v, F f)
{
    const int lane = (int)(emu_thread.x & 31), warp = (int)(emu_thread.x >> 5);
    emu_lanes[warp][lane] = (int64_t)v;
    emu_warp[warp]->arrive_and_wait();
    T r = (T)emu_lanes[warp][0];
    for (int l = 1; l < 32; l++)
        r = f(r, (T)emu_lanes[warp][l]);
    emu_warp[warp]->arrive_and_wait();
    return r;
}
static unsigned __reduce_add_sync(unsigned, unsigned v)
{
    return emu_reduce(v, [](unsigned a, unsigned b) { return a + b; });
}
static int __reduce_add_sync(unsigned, int v)
{
    return emu_reduce(v, [](int a, int b) { return (int)((unsigned)a + (unsigned)b); });
}
static unsigned __reduce_max_sync(unsigned, unsigned v)
{
    return emu_reduce(v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
static int __reduce_max_sync(unsigned, int v)
{
    return emu_reduce(v, [](int a, int b) { return a > b ? a : b; });
}
static unsigned __reduce_min_sync(unsigned, unsigned v)
{
    return emu_reduce(v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
static int __reduce_min_sync(unsigned, int v)
{
    return emu_reduce(v, [](int a, int b) { return a < b ? a : b; });
}
static unsigned __reduce_or_sync(unsigned, unsigned v)
{
    return emu_reduce(v, [](unsigned a, unsigned b) { return a | b; });
}
static double __drcp_rn(double x)
{
    return 1.0 / x;
}
#define __launch_bounds__(...)

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

namespace {
alignas(16) unsigned char smem_raw[1 << 17]; /* the block's dynamic shared memory */
}
#include "../src/cuda/schedule_step_kernel.cuh"
static_assert(sizeof(sched_smem) <= sizeof(smem_raw), "the block's shared memory");

/* The kernel's threads, kept for the whole test: each step, the main thread sets `job` and all
 * meet at `go`; the 512 run it and meet the main thread at `done`. */
struct emu_pool {
    std::barrier<> go{NTH + 1}, done{NTH + 1}, block{NTH};
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

static uint32_t below(uint64_t *rng, uint32_t n)
{
    return n ? (uint32_t)(tu_next(rng) % n) : 0;
}

/* One step (batch requests of q_indptr `qi`, kv_lens `kvl`) within `lim` for H heads on `sp`
 * (mlav_step_params'): the emulated kernel's region against the host's update's. *shares: whether
 * the host took equal shares; `only_shares`: emulate only such steps. 1 if they match (or the
 * step was left out). */
static int compare_step(emu_pool &pool, int32_t H, const mlav_limits *lim,
                        const mlav_schedule_params *sp, const int32_t *qi, const int32_t *kvl,
                        int32_t batch, int only_shares, int *shares, uint64_t seed, int st)
{
    mlav_step_bounds bd = mlav_step_bounds_of(H, lim, sp);
    bd.combine_wave[0] = bd.combine_wave[1] = bd.combine_wave[2] = sp->target_blocks;
    const size_t region =
        (sizeof(mlav_step_header) + sizeof(mlav_split_item) * (size_t)bd.max_items +
         sizeof(mlav_combine_item) * (size_t)bd.max_combine + 255) / 256 * 256;
    std::vector<unsigned char> dev(region), host(region, 0);
    static mlav_step_scratch *scratch = (mlav_step_scratch *)malloc(mlav_step_scratch_bytes());
    /* the host's update (its staging slot zeroed past the combine items, as backend_flash.cu
     * makes it) */
    mlav_step_header *hh = (mlav_step_header *)host.data();
    mlav_split_item *hi = (mlav_split_item *)(hh + 1);
    mlav_step_schedule_build(batch, qi, kvl, (mlav_shard){1, 0, 1}, H, lim, sp, &bd, hh, hi,
                             (mlav_combine_item *)(hi + bd.max_items), scratch);
    hh->owner = 0x1234;
    hh->limits = *lim;
    *shares = 0;
    for (int32_t i = 1; i < hh->n_items; i++)
        *shares |= hi[i].b < hi[i - 1].b;
    if (only_shares && !*shares)
        return 1;
    /* the kernel's, into a region and a shared memory poisoned */
    memset(dev.data(), 0xa5, region);
    mlav_step_sched_params p = {};
    p.q_indptr = qi;
    p.kv_lens = kvl;
    p.batch = batch;
    p.H = H;
    p.lim = *lim;
    p.sp = *sp;
    p.bd = bd;
    p.hdr = (mlav_step_header *)dev.data();
    p.items = (mlav_split_item *)(p.hdr + 1);
    p.combine = (mlav_combine_item *)(p.items + bd.max_items);
    p.ka_div = mlav_fastdiv_make((uint32_t)sp->key_align);
    p.region_bytes = region;
    p.owner = 0x1234;
    p.shard = (mlav_shard){1, 0, 1};
    memset(smem_raw, 0x5a, sizeof smem_raw);
    pool.run([&] { step_schedule_kernel(p); });
    if (memcmp(dev.data(), host.data(), region) != 0) {
        size_t at = 0;
        while (dev[at] == host[at])
            at++;
        fprintf(stderr, "seed 0x%llx: H %d, limits (%d, %d, %d, %d), step %d (batch %d%s): the "
                        "kernel's region differs from the host's at byte %zu\n",
                (unsigned long long)seed, H, lim->max_batch, lim->max_tokens, lim->max_q_len,
                lim->max_kv_len, st, batch, *shares ? ", equal shares" : "", at);
        return 0;
    }
    return 1;
}

/* `steps` random steps within `lim` for H heads on `base` (the plan's parameters before
 * mlav_step_params), drawn as test_steps_gpu draws them (sf_random_lengths); *shares counts those
 * in equal shares. 1 if every one matched. */
static int random_steps(emu_pool &pool, int32_t H, const mlav_limits *lim,
                        mlav_schedule_params base, int steps, uint64_t *rng, uint64_t seed,
                        int *shares)
{
    const mlav_schedule_params sp = mlav_step_params(H, lim, base);
    std::vector<int32_t> qi((size_t)lim->max_batch + 1), kvl((size_t)lim->max_batch);
    for (int st = 0; st < steps; st++) {
        const int32_t batch = sf_random_lengths(lim, rng, qi.data(), kvl.data()).batch;
        int sh = 0;
        if (!compare_step(pool, H, lim, &sp, qi.data(), kvl.data(), batch, 0, &sh, seed, st))
            return 0;
        *shares += sh;
    }
    return 1;
}

/* Engine batches of 2-64 requests of mostly one draft length, prefixes within 50% of 1k-128k,
 * on `base`, each with limits that just hold it: of `steps`, those the host puts in equal shares
 * emulated; their count into *shares. 1 if every one matched. */
static int shares_steps(emu_pool &pool, mlav_schedule_params base, int steps, uint64_t *rng,
                        uint64_t seed, int *shares)
{
    for (int st = 0; st < steps; st++) {
        const int32_t H = 8 << below(rng, 5), batch = 2 + (int32_t)below(rng, 63);
        const int32_t q_all = 1 + (int32_t)below(rng, 16), prefix = 1000 << below(rng, 8);
        std::vector<int32_t> qi((size_t)batch + 1), kvl((size_t)batch);
        qi[0] = 0;
        int32_t max_kv = 16, max_q = 1;
        for (int32_t b = 0; b < batch; b++) {
            const int32_t q = below(rng, 15) == 0   ? 0
                              : below(rng, 40) == 0 ? 1 + (int32_t)below(rng, 16)
                                                    : q_all;
            qi[b + 1] = qi[b] + q;
            kvl[b] = q + 1 + prefix / 2 + (int32_t)below(rng, (uint32_t)prefix);
            max_kv = kvl[b] > max_kv ? kvl[b] : max_kv;
            max_q = q > max_q ? q : max_q;
        }
        const mlav_limits lim = {batch, qi[batch] > 0 ? qi[batch] : 1, max_q, max_kv};
        const mlav_schedule_params sp = mlav_step_params(H, &lim, base);
        int sh = 0;
        if (!compare_step(pool, H, &lim, &sp, qi.data(), kvl.data(), batch, 1, &sh, seed, st))
            return 0;
        *shares += sh;
    }
    return 1;
}

int main()
{
    const uint64_t seed = tu_seeded("test_step_schedule_emulated");
    uint64_t rng = seed;
    emu_pool pool;
    /* the legal family's parameters (src/cuda/flash.h) on a device of 188 SMs at two blocks
     * each; the H200's sm_90a ones (mlav_flash_sm90_schedule_params: 64-key splits, a block's
     * cost of 320 keys, shares weighed) */
    const mlav_schedule_params legal = mlav_flash_schedule_params(188, 2);
    mlav_schedule_params sm90 = mlav_flash_schedule_params(132, 1);
    sm90.key_align = sm90.min_chunk = 64;
    sm90.block_cost_keys = 320;
    sm90.shares = 1;
    const struct {
        int32_t H;
        mlav_limits lim;
        mlav_schedule_params sp;
        int steps;
    } runs[] = {{8, {64, 1024, 64, 200000}, sm90, 20},
                {16, {2048, 4096, 16, 140000}, sm90, 10},
                {64, {32, 512, 16, 50000}, sm90, 20},
                {128, {1, 64, 64, 1 << 21}, sm90, 10},
                {16, {64, 1024, 16, 100000}, legal, 10}};
    int shares = 0, steps = 0;
    for (const auto &r : runs) {
        if (!random_steps(pool, r.H, &r.lim, r.sp, r.steps, &rng, seed, &shares))
            return 1;
        steps += r.steps;
    }
    int engine = 0;
    if (!shares_steps(pool, sm90, 300, &rng, seed, &engine))
        return 1;
    printf("  the emulated kernel wrote the host's region at %d random steps (%d of them equal "
           "shares) and at %d engine steps in equal shares\n",
           steps, shares, engine);
    return engine > 0 ? 0 : 1; /* equal shares' phase must have run */
}
