/* The device scheduler of plans for limits: one block builds a step's split schedule from
 * device-resident lengths, by the rule of src/common/schedule_step.h, into the workspace, writing
 * the same bytes as the host update (mlav_step_schedule_build). Launched by mlav_plan_update
 * with device lengths, so nothing is read on the host and the launch can be captured. */
#include "../common/schedule_step.h"
#include "flash.h"

namespace {

/* One block of 32 warps: a warp group per search (one per wave count weighed), a warp per
 * candidate, a thread per request or item elsewhere. */
constexpr int NTH = 1024, NWARPS = NTH / 32;
constexpr int MAXB = MLAV_STEP_MAX_BATCH;
constexpr int MAX_CANDS = 3 + MLAV_STEP_MORE_WAVES;
static_assert(MLAV_STEP_MORE_WAVES + 1 <= NWARPS && MAX_CANDS <= NWARPS,
              "a warp group per search, a warp per candidate");

struct sched_smem {
    int32_t tiles[MAXB]; /* row tiles of each accepted request, 0 when skipped */
    int32_t kv[MAXB];
    int32_t blk[MAXB + 1], comb[MAXB + 1], slot[MAXB + 1]; /* exclusive prefix sums */
    int64_t lo[NWARPS], hi[NWARPS];                          /* each search's range */
    int32_t pass[NWARPS];                                    /* each warp's predicate */
    int64_t cand[MAX_CANDS], cost[MAX_CANDS];
    int64_t warp_work[NWARPS], warp_tiles[NWARPS];
    int32_t warp_max_kv[NWARPS], warp_part[3][NWARPS];
    int32_t bad, n_cands, bad_q;
    int64_t chunk, work, all_tiles;
    int32_t max_kv;
};

template <typename V> __device__ V warp_sum(V v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename V> __device__ V warp_max(V v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const V w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Blocks of the accepted requests at `chunk`, summed by one warp. */
__device__ int64_t warp_blocks(const sched_smem &s, int32_t batch, int64_t chunk,
                               const mlav_schedule_params &sp, int lane)
{
    int64_t n = 0;
    for (int32_t b = lane; b < batch; b += 32)
        if (s.tiles[b]) {
            int64_t per;
            n += s.tiles[b] * mlav_schedule_splits(s.kv[b], chunk, sp.key_align, sp.max_splits, &per);
        }
    return warp_sum(n);
}

/* Exclusive prefix sums over `n` entries of the three arrays at once, in place, with a[n] the
 * total: each thread a run of consecutive entries, warp scans of the runs' sums, then one warp
 * over the warps' totals. */
__device__ void block_scan3(sched_smem &s, int32_t n)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int per = (n + NTH - 1) / NTH, first = tid * per;
    int32_t *a[3] = {s.blk, s.comb, s.slot};
    int32_t run[3];
#pragma unroll
    for (int k = 0; k < 3; k++) {
        int32_t sum = 0;
        for (int i = first; i < first + per && i < n; i++)
            sum += a[k][i];
        int32_t inc = sum; /* inclusive warp scan */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int32_t v = __shfl_up_sync(0xffffffffu, inc, o);
            inc += lane >= o ? v : 0;
        }
        if (lane == 31)
            s.warp_part[k][warp] = inc;
        run[k] = inc - sum;
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int k = 0; k < 3; k++) {
            const int32_t t = s.warp_part[k][lane];
            int32_t inc = t;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int32_t v = __shfl_up_sync(0xffffffffu, inc, o);
                inc += lane >= o ? v : 0;
            }
            s.warp_part[k][lane] = inc - t; /* exclusive: the warps before */
            if (lane == 31)
                a[k][n] = inc;
        }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 3; k++) {
        int32_t r = run[k] + s.warp_part[k][warp];
        for (int i = first; i < first + per && i < n; i++) {
            const int32_t v = a[k][i];
            a[k][i] = r;
            r += v;
        }
    }
    __syncthreads();
}

/* The last request b in [0, batch) with pre[b] <= i (pre: an exclusive prefix sum). */
__device__ int32_t owner(const int32_t *pre, int32_t batch, int32_t i)
{
    int32_t lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) >> 1;
        if (pre[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

__global__ void __launch_bounds__(NTH) step_schedule_kernel(const mlav_step_sched_params p)
{
    __shared__ sched_smem s;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const mlav_schedule_params sp = p.sp;
    const int32_t batch = p.batch;

    /* the lengths, once, coalesced; q_indptr checked as a whole first */
    if (tid == 0) {
        s.bad = INT32_MAX;
        s.bad_q = batch > 0 && (p.q_indptr[0] != 0 || p.q_indptr[batch] > p.lim.max_tokens);
    }
    int32_t q[(MAXB + NTH - 1) / NTH], kvs[(MAXB + NTH - 1) / NTH];
    int decreasing = 0;
#pragma unroll
    for (int k = 0; k < (MAXB + NTH - 1) / NTH; k++) {
        const int32_t b = tid + k * NTH;
        q[k] = 0;
        kvs[k] = 0;
        if (b < batch) {
            q[k] = p.q_indptr[b + 1] - p.q_indptr[b];
            kvs[k] = p.kv_lens[b];
            decreasing |= q[k] < 0;
        }
    }
    decreasing = __syncthreads_or(decreasing);
    const int global_ok = !decreasing && !s.bad_q;
    if (tid == 0 && !global_ok)
        s.bad = batch;
    int64_t work = 0, all = 0;
    int32_t max_kv = 1, first_bad = INT32_MAX;
#pragma unroll
    for (int k = 0; k < (MAXB + NTH - 1) / NTH; k++) {
        const int32_t b = tid + k * NTH;
        if (b >= batch)
            break;
        int32_t t = 0;
        if (global_ok) {
            if (mlav_step_request_ok(q[k], kvs[k], p.lim.max_q_len, p.lim.max_kv_len))
                t = (int32_t)mlav_step_tiles(q[k], p.H, sp.rows_per_tile);
            else if (b < first_bad)
                first_bad = b;
        }
        s.tiles[b] = t;
        s.kv[b] = kvs[k];
        if (t) {
            max_kv = kvs[k] > max_kv ? kvs[k] : max_kv;
            work += (int64_t)t * kvs[k];
            all += t;
        }
    }
    /* block reductions: a warp's, then one thread over the warps' */
    work = warp_sum(work);
    all = warp_sum(all);
    max_kv = warp_max(max_kv);
    first_bad = -warp_max(-first_bad);
    if (lane == 0) {
        s.warp_work[warp] = work;
        s.warp_tiles[warp] = all;
        s.warp_max_kv[warp] = max_kv;
        if (first_bad != INT32_MAX)
            atomicMin(&s.bad, first_bad);
    }
    __syncthreads();
    if (warp == 0) {
        const int64_t w = warp_sum(s.warp_work[lane]), a = warp_sum(s.warp_tiles[lane]);
        const int32_t m = warp_max(s.warp_max_kv[lane]);
        if (lane == 0) {
            s.work = w;
            s.all_tiles = a;
            s.max_kv = m;
        }
    }
    __syncthreads();

    const int64_t S = sp.target_blocks, ka = sp.key_align;
    const int64_t all_tiles = s.all_tiles;
    const int searches = sp.more_waves + 1, K = NWARPS / searches;
    if (all_tiles > 0) {
        /* the smallest chunk whose blocks fit cap0 + k S, for every k at once: warp group k
         * searches with K points per round */
        const int64_t cap0 = mlav_step_ceil_div(all_tiles, S) * S;
        const int gk = warp / K, gj = warp % K;
        const int64_t lo0 = mlav_step_ceil_div(sp.min_chunk, ka);
        int64_t hi0 = mlav_step_ceil_div(s.max_kv, ka);
        if (hi0 < lo0)
            hi0 = lo0;
        if (tid < searches) {
            s.lo[tid] = lo0;
            s.hi[tid] = hi0;
        }
        __syncthreads();
        for (;;) {
            int open = 0;
            for (int k = 0; k < searches; k++)
                open |= s.lo[k] < s.hi[k];
            if (!open)
                break;
            if (gk < searches && s.lo[gk] < s.hi[gk]) {
                const int64_t lo = s.lo[gk], hi = s.hi[gk];
                const int64_t pt = lo + (hi - lo) * (gj + 1) / (K + 1);
                const int64_t n = warp_blocks(s, batch, pt * ka, sp, lane);
                if (lane == 0)
                    s.pass[warp] = n <= cap0 + gk * S;
            }
            __syncthreads();
            if (tid < searches && s.lo[tid] < s.hi[tid]) {
                const int64_t lo = s.lo[tid], hi = s.hi[tid];
                int64_t nlo = lo, nhi = hi;
                for (int j = 0; j < K; j++) {
                    const int64_t pt = lo + (hi - lo) * (j + 1) / (K + 1);
                    if (s.pass[tid * K + j])
                        nhi = pt < nhi ? pt : nhi;
                    else
                        nlo = pt + 1 > nlo ? pt + 1 : nlo;
                }
                s.lo[tid] = nlo;
                s.hi[tid] = nhi;
            }
            __syncthreads();
        }
        if (tid == 0) {
            /* the candidates in the host rule's order */
            int n = 0;
            int64_t c0 = s.lo[0] * ka;
            if (c0 > INT32_MAX)
                c0 = (INT32_MAX / ka) * ka;
            s.cand[n++] = c0;
            for (int k = 1; k <= 2; k++)
                if ((c0 << k) <= INT32_MAX)
                    s.cand[n++] = c0 << k;
            int64_t last = c0;
            for (int k = 1; k < searches; k++) {
                int64_t c = s.lo[k] * ka;
                if (c > INT32_MAX)
                    c = (INT32_MAX / ka) * ka;
                if (c >= last)
                    continue;
                last = c;
                s.cand[n++] = c;
            }
            s.n_cands = n;
        }
        __syncthreads();
        if (warp < s.n_cands) {
            mlav_step_eval e = {0, 0, 0};
            for (int32_t b = lane; b < batch; b += 32)
                mlav_step_eval_add(&e, s.tiles[b], s.kv[b], s.cand[warp], sp.key_align,
                                   sp.max_splits);
            e.blocks = warp_sum(e.blocks);
            e.longest = warp_max(e.longest);
            e.most = warp_max(e.most);
            if (lane == 0)
                s.cost[warp] = mlav_step_model(&e, s.work, sp.target_blocks, sp.block_cost_keys,
                                               sp.split_cost_keys);
        }
        __syncthreads();
        if (tid == 0) {
            int best = 0;
            for (int i = 1; i < s.n_cands; i++)
                if (s.cost[i] < s.cost[best])
                    best = i;
            s.chunk = s.cand[best];
        }
    } else if (tid == 0) {
        s.chunk = 0;
    }
    __syncthreads();

    /* each request's blocks, combine items and slots at the chosen chunk, then their offsets */
    const int64_t chunk = s.chunk;
    for (int32_t b = tid; b < batch; b += NTH) {
        int32_t nb = 0, nc = 0, ns = 0;
        if (s.tiles[b] && chunk > 0) {
            int64_t per;
            const int32_t sp_b =
                (int32_t)mlav_schedule_splits(s.kv[b], chunk, sp.key_align, sp.max_splits, &per);
            nb = s.tiles[b] * sp_b;
            nc = sp_b > 1 ? s.tiles[b] : 0;
            ns = sp_b > 1 ? nb : 0;
        }
        s.blk[b] = nb;
        s.comb[b] = nc;
        s.slot[b] = ns;
    }
    __syncthreads();
    block_scan3(s, batch);

    const int32_t n_items = s.blk[batch], n_comb = s.comb[batch];
    for (int32_t i = tid; i < p.bd.max_items; i += NTH) {
        mlav_split_item it = {-1, 0, 0, 0, 0, 0, 0, 0};
        if (i < n_items) {
            const int32_t b = owner(s.blk, batch, i), mt = s.tiles[b], local = i - s.blk[b];
            const int32_t k = local / mt, m = local % mt;
            int64_t per;
            const int32_t ns =
                (int32_t)mlav_schedule_splits(s.kv[b], chunk, sp.key_align, sp.max_splits, &per);
            const int64_t begin = k * per;
            const int64_t end = begin + per < s.kv[b] ? begin + per : s.kv[b];
            const int32_t q0 = p.q_indptr[b], qb = p.q_indptr[b + 1] - q0;
            it.b = b;
            it.mtile = m;
            it.kv_begin = (int32_t)begin;
            it.kv_end = (int32_t)end;
            it.slot = ns > 1 ? s.slot[b] + k * mt + m : -1;
            it.q_start = q0;
            it.q_len = qb;
            it.prefix = s.kv[b] - qb;
        }
        p.items[i] = it;
    }
    for (int32_t i = tid; i < p.bd.max_combine; i += NTH) {
        mlav_combine_item c = {-1, 0, 0, 0, 0, 0, 0, 0};
        if (i < n_comb) {
            const int32_t b = owner(s.comb, batch, i), m = i - s.comb[b];
            const int32_t q0 = p.q_indptr[b], qb = p.q_indptr[b + 1] - q0;
            c.b = b;
            c.mtile = m;
            c.nsplit = (s.slot[b + 1] - s.slot[b]) / s.tiles[b];
            c.slot0 = s.slot[b] + m;
            c.slot_stride = s.tiles[b];
            c.q_start = q0;
            c.rows = qb * p.H;
        }
        p.combine[i] = c;
    }
    if (tid == 0) {
        mlav_step_header h = {};
        h.bad = s.bad;
        h.batch = batch;
        h.n_items = n_items;
        h.n_combine = n_comb;
        h.n_slots = s.slot[batch];
        h.chunk_keys = (int32_t)chunk;
        *p.hdr = h;
    }
}

} // namespace

mlav_status mlav_step_schedule_launch(const mlav_step_sched_params *p, cudaStream_t stream)
{
    step_schedule_kernel<<<1, NTH, 0, stream>>>(*p);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
