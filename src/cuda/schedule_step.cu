/* The device scheduler of plans for limits: one block builds a step's split schedule from
 * device-resident lengths, by the rule of src/common/schedule_step.h, into the workspace, writing
 * the same bytes as the host update (mlav_step_schedule_build). Launched by mlav_plan_update
 * with device lengths, so nothing is read on the host and the launch can be captured. */
#include "../common/schedule_step.h"
#include "flash.h"

namespace {

constexpr int NTH = 512, NWARPS = NTH / 32;
constexpr int MAXB = MLAV_STEP_MAX_BATCH;
constexpr int MAX_CANDS = 3 + MLAV_FLASH_STEP_MORE_WAVES;
static_assert(MLAV_FLASH_STEP_MORE_WAVES + 1 <= NWARPS && MAX_CANDS <= NWARPS,
              "a warp group per search, a warp per candidate");

struct sched_smem {
    int32_t tiles[MAXB]; /* row tiles of each accepted request, 0 when skipped */
    int32_t kv[MAXB];
    int32_t blk[MAXB + 1], comb[MAXB + 1], slot[MAXB + 1]; /* exclusive prefix sums */
    int64_t lo[NWARPS], hi[NWARPS];                          /* each search's range */
    int32_t pass[NWARPS];                                    /* each warp's predicate */
    int64_t cand[MAX_CANDS], cost[MAX_CANDS];
    unsigned long long work, all_tiles;
    int32_t bad, max_kv, n_cands, any_bad_q;
    int64_t chunk;
};

__device__ int64_t warp_sum64(int64_t v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ int64_t warp_max64(int64_t v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const int64_t w = __shfl_xor_sync(0xffffffffu, v, o);
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
            n += s.tiles[b] * mlav_step_splits(s.kv[b], chunk, sp.key_align, sp.max_splits, &per);
        }
    return warp_sum64(n);
}

/* An exclusive prefix sum over `n` entries of a[], in place, with a[n] = the total. */
__device__ void block_scan(int32_t *a, int32_t n)
{
    __shared__ int32_t part[NTH];
    const int tid = threadIdx.x;
    const int per = (n + NTH - 1) / NTH, first = tid * per;
    int32_t sum = 0;
    for (int i = first; i < first + per && i < n; i++)
        sum += a[i];
    part[tid] = sum;
    __syncthreads();
    for (int o = 1; o < NTH; o <<= 1) { /* Hillis-Steele over the thread sums */
        const int32_t v = tid >= o ? part[tid - o] : 0;
        __syncthreads();
        part[tid] += v;
        __syncthreads();
    }
    int32_t run = tid ? part[tid - 1] : 0;
    for (int i = first; i < first + per && i < n; i++) {
        const int32_t v = a[i];
        a[i] = run;
        run += v;
    }
    if (tid == NTH - 1)
        a[n] = part[NTH - 1];
    __syncthreads();
}

__global__ void __launch_bounds__(NTH) step_schedule_kernel(const mlav_step_sched_params p)
{
    __shared__ sched_smem s;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const mlav_schedule_params sp = p.sp;
    const int32_t batch = p.batch;
    if (tid == 0) {
        s.bad = INT32_MAX;
        s.max_kv = 1;
        s.work = 0;
        s.all_tiles = 0;
        s.any_bad_q = batch > 0 && (p.q_indptr[0] != 0 || p.q_indptr[batch] > p.lim.max_tokens);
    }
    __syncthreads();
    for (int32_t b = tid; b < batch; b += NTH)
        if (p.q_indptr[b + 1] < p.q_indptr[b])
            s.any_bad_q = 1;
    __syncthreads();
    const int global_ok = !s.any_bad_q;
    if (tid == 0 && !global_ok)
        s.bad = batch;
    int64_t work = 0, all = 0;
    int32_t max_kv = 1;
    for (int32_t b = tid; b < batch; b += NTH) {
        int32_t t = 0;
        const int32_t kv = p.kv_lens[b];
        if (global_ok) {
            const int64_t q = (int64_t)p.q_indptr[b + 1] - p.q_indptr[b];
            if (mlav_step_request_ok(q, kv, p.lim.max_q_len, p.lim.max_kv_len))
                t = (int32_t)mlav_step_tiles(q, p.H, sp.rows_per_tile);
            else
                atomicMin(&s.bad, b);
        }
        s.tiles[b] = t;
        s.kv[b] = kv;
        if (t) {
            max_kv = kv > max_kv ? kv : max_kv;
            work += (int64_t)t * kv;
            all += t;
        }
    }
    atomicMax(&s.max_kv, max_kv);
    atomicAdd(&s.work, (unsigned long long)work);
    atomicAdd(&s.all_tiles, (unsigned long long)all);
    __syncthreads();

    const int64_t S = sp.target_blocks, ka = sp.key_align;
    const int64_t all_tiles = (int64_t)s.all_tiles;
    const int searches = sp.more_waves + 1, K = NWARPS / searches;
    if (all_tiles > 0) {
        /* the smallest chunk whose blocks fit cap0 + k S, for every k at once: warp group k
         * searches with K points per round */
        const int64_t cap0 = mlav_step_ceil_div(all_tiles, S) * S;
        const int gk = warp / K, gj = warp % K;
        int64_t lo0 = mlav_step_ceil_div(sp.min_chunk, ka), hi0 = mlav_step_ceil_div(s.max_kv, ka);
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
            e.blocks = warp_sum64(e.blocks);
            e.longest = warp_max64(e.longest);
            e.most = (int32_t)warp_max64(e.most);
            if (lane == 0)
                s.cost[warp] = mlav_step_model(&e, (int64_t)s.work, sp.target_blocks,
                                               sp.block_cost_keys, sp.split_cost_keys);
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
                (int32_t)mlav_step_splits(s.kv[b], chunk, sp.key_align, sp.max_splits, &per);
            nb = s.tiles[b] * sp_b;
            nc = sp_b > 1 ? s.tiles[b] : 0;
            ns = sp_b > 1 ? nb : 0;
        }
        s.blk[b] = nb;
        s.comb[b] = nc;
        s.slot[b] = ns;
    }
    __syncthreads();
    block_scan(s.blk, batch);
    block_scan(s.comb, batch);
    block_scan(s.slot, batch);

    const int32_t n_items = s.blk[batch], n_comb = s.comb[batch];
    for (int32_t i = tid; i < p.bd.max_items; i += NTH) {
        mlav_split_item it = {-1, 0, 0, 0, 0, 0, 0, 0};
        if (i < n_items) {
            int32_t lo = 0, hi = batch - 1; /* the last request whose first block is <= i */
            while (lo < hi) {
                const int32_t mid = (lo + hi + 1) >> 1;
                if (s.blk[mid] <= i)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            const int32_t b = lo, mt = s.tiles[b], local = i - s.blk[b];
            const int32_t k = local / mt, m = local % mt;
            int64_t per;
            const int32_t ns =
                (int32_t)mlav_step_splits(s.kv[b], chunk, sp.key_align, sp.max_splits, &per);
            const int64_t begin = k * per;
            const int64_t end = begin + per < s.kv[b] ? begin + per : s.kv[b];
            const int32_t q0 = p.q_indptr[b], q = p.q_indptr[b + 1] - q0;
            it.b = b;
            it.mtile = m;
            it.kv_begin = (int32_t)begin;
            it.kv_end = (int32_t)end;
            it.slot = ns > 1 ? s.slot[b] + k * mt + m : -1;
            it.q_start = q0;
            it.q_len = q;
            it.prefix = s.kv[b] - q;
        }
        p.items[i] = it;
    }
    for (int32_t i = tid; i < p.bd.max_combine; i += NTH) {
        mlav_combine_item c = {-1, 0, 0, 0, 0, 0, 0, 0};
        if (i < n_comb) {
            int32_t lo = 0, hi = batch - 1;
            while (lo < hi) {
                const int32_t mid = (lo + hi + 1) >> 1;
                if (s.comb[mid] <= i)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            const int32_t b = lo, m = i - s.comb[b];
            const int32_t q0 = p.q_indptr[b], q = p.q_indptr[b + 1] - q0;
            c.b = b;
            c.mtile = m;
            c.nsplit = (s.slot[b + 1] - s.slot[b]) / s.tiles[b];
            c.slot0 = s.slot[b] + m;
            c.slot_stride = s.tiles[b];
            c.q_start = q0;
            c.rows = q * p.H;
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
