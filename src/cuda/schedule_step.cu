/* The device scheduler of plans for limits: one block builds a step's split schedule from
 * device-resident lengths, by the rule of src/common/schedule_step.h, into the workspace, writing
 * the same bytes as the host update (mlav_step_schedule_build). Launched by mlav_plan_update
 * with device lengths, so nothing is read on the host and the launch can be captured.
 *
 * It is one short chain: the lengths in one coalesced load, one barrier for the sums, then each
 * chunk search in its own warp (lanes over the requests, the rule's probes and plateaus of
 * schedule_step.h, warp shuffles only), one barrier, the candidates' models in a warp each, one
 * barrier, and the prefix sums and items. The version before (session 15) ran every search in
 * lock step across the block, two barriers a round and one warp's 64-bit range updates between
 * them: 17-24 us on the H200 (docs/PERFORMANCE.md#engine-steps). */
#include "../common/fastdiv.h"
#include "../common/schedule_step.h"
#include "flash.h"

namespace {

constexpr int NTH = 512, NWARPS = NTH / 32;
constexpr int MAXB = MLAV_STEP_MAX_BATCH, PER = MAXB / NTH; /* requests per thread */
constexpr int MAX_SEARCHES = 1 + MLAV_STEP_MORE_WAVES, MAX_CANDS = 3 + MLAV_STEP_MORE_WAVES;
static_assert(MAXB % NTH == 0, "requests spread evenly over the threads");
static_assert(MAX_SEARCHES <= NWARPS && MAX_CANDS <= NWARPS, "a warp per search, per candidate");

struct sched_smem {
    int32_t tiles[MAXB]; /* row tiles of each accepted request, 0 when skipped */
    uint32_t kv[MAXB];
    int32_t blk[MAXB + 1], comb[MAXB + 1], slot[MAXB + 1]; /* exclusive prefix sums */
    double inv[MLAV_STEP_INV_MAX + 1];                      /* fl(1 / d), schedule_step.h */
    mlav_step_range range[MAX_SEARCHES];
    int64_t cost[MAX_CANDS];
    int64_t warp_work[NWARPS], warp_tiles[NWARPS];
    int32_t warp_max_kv[NWARPS], warp_bad[NWARPS], warp_flag[NWARPS];
    int32_t warp_part[3][NWARPS];
};

constexpr unsigned FULL = 0xffffffffu;

template <typename V> __device__ V warp_sum(V v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

template <typename V> __device__ V warp_max(V v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const V w = __shfl_xor_sync(FULL, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* A probe summed over the warp's lanes: a butterfly of mlav_step_probe_merge (commutative), so
 * every lane holds the same result. */
__device__ mlav_step_probe warp_probe(mlav_step_probe p)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        mlav_step_probe q;
        q.blocks = __shfl_xor_sync(FULL, p.blocks, o);
        q.below = __shfl_xor_sync(FULL, p.below, o);
        q.above = __shfl_xor_sync(FULL, p.above, o);
        q.most = __shfl_xor_sync(FULL, p.most, o);
        q.unsplit = __shfl_xor_sync(FULL, p.unsplit, o);
        q.split_q = __shfl_xor_sync(FULL, p.split_q, o);
        q.left = __shfl_xor_sync(FULL, p.left, o);
        q.right = __shfl_xor_sync(FULL, p.right, o);
        mlav_step_probe_merge(&p, &q);
    }
    return p;
}

/* x = ceil(kv / ka) - 1/2 of a request (schedule_step.h), as the host computes it. */
__device__ double step_x(uint32_t kv, mlav_fastdiv fka)
{
    return (double)(mlav_fastdiv_div(kv - 1, fka) + 1) - 0.5;
}

/* The rule at k over the step's accepted requests, by one warp. */
__device__ mlav_step_plateau warp_probe_at(const sched_smem &s, int32_t batch, int64_t k,
                                           const mlav_schedule_params &sp, mlav_fastdiv fka,
                                           int lane)
{
    const uint32_t ka = (uint32_t)sp.key_align, max_s = (uint32_t)sp.max_splits;
    const double ik = 1.0 / (double)k;
    mlav_step_probe p = mlav_step_probe_start();
    for (int32_t b = lane; b < batch; b += 32) {
        const int32_t t = s.tiles[b];
        if (t)
            mlav_step_probe_add(&p, s.kv[b], step_x(s.kv[b], fka), t, ik, ka, max_s, s.inv);
    }
    p = warp_probe(p);
    return mlav_step_probe_finish(&p, ka);
}

/* Candidate `which` of the rule's list (the host's order, schedule_step.c): its chunk, and the
 * search whose range holds its evaluation (-1: none); returns the list's length. */
__device__ int candidate(const sched_smem &s, int searches, int64_t ka, int which, int64_t *chunk,
                         int *from)
{
    int n = 0;
    int64_t last = 0;
    *chunk = 0;
    *from = -1;
    for (int j = 0; j < searches; j++) {
        int64_t c = s.range[j].L * ka;
        const int exact = c <= INT32_MAX;
        if (!exact)
            c = (INT32_MAX / ka) * ka;
        if (j == 0) {
            for (int k = 0; k <= 2; k++)
                if ((c << k) <= INT32_MAX) {
                    if (n == which) {
                        *chunk = c << k;
                        *from = k == 0 && exact && s.range[0].has ? 0 : -1;
                    }
                    n++;
                }
        } else if (c >= last) {
            continue; /* no shorter split fits this many waves */
        } else {
            if (n == which) {
                *chunk = c;
                *from = exact && s.range[j].has ? j : -1;
            }
            n++;
        }
        last = c;
    }
    return n;
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
            const int32_t v = __shfl_up_sync(FULL, inc, o);
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
            const int32_t t = lane < NWARPS ? s.warp_part[k][lane] : 0;
            int32_t inc = t;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int32_t v = __shfl_up_sync(FULL, inc, o);
                inc += lane >= o ? v : 0;
            }
            if (lane < NWARPS)
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

    /* the lengths, once, coalesced, while the threads fill the table of 1 / d */
    int32_t qs[PER], kvs[PER];
    int flag = 0; /* q_indptr refused as a whole: not from 0, decreasing or past max_tokens */
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int32_t b = tid + k * NTH;
        qs[k] = 0;
        kvs[k] = 0;
        if (b < batch) {
            const int32_t q0 = p.q_indptr[b], q1 = p.q_indptr[b + 1];
            const int64_t q = (int64_t)q1 - q0;
            kvs[k] = p.kv_lens[b];
            flag |= q < 0 || (b == 0 && q0 != 0) || (b == batch - 1 && q1 > p.lim.max_tokens);
            qs[k] = q < 0 || q > INT32_MAX ? 0 : (int32_t)q; /* else q_indptr is refused */
        }
    }
    for (int i = tid; i <= MLAV_STEP_INV_MAX; i += NTH)
        s.inv[i] = i ? 1.0 / (double)i : 0.0; /* IEEE division: correctly rounded */
    int64_t work = 0, all = 0;
    int32_t max_kv = 1, first_bad = INT32_MAX;
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int32_t b = tid + k * NTH;
        if (b >= batch)
            break;
        int32_t t = 0;
        if (mlav_step_request_ok(qs[k], kvs[k], p.lim.max_q_len, p.lim.max_kv_len))
            t = (int32_t)mlav_step_tiles(qs[k], p.H, sp.rows_per_tile);
        else if (b < first_bad)
            first_bad = b;
        s.tiles[b] = t;
        s.kv[b] = (uint32_t)kvs[k];
        if (t) {
            max_kv = kvs[k] > max_kv ? kvs[k] : max_kv;
            work += (int64_t)t * kvs[k];
            all += t;
        }
    }
    /* block sums: a warp's, then every thread over the warps' (one barrier) */
    work = warp_sum(work);
    all = warp_sum(all);
    max_kv = warp_max(max_kv);
    first_bad = -warp_max(-first_bad);
    flag = __any_sync(FULL, flag);
    if (lane == 0) {
        s.warp_work[warp] = work;
        s.warp_tiles[warp] = all;
        s.warp_max_kv[warp] = max_kv;
        s.warp_bad[warp] = first_bad;
        s.warp_flag[warp] = flag;
    }
    __syncthreads();
    {
        const int w = lane < NWARPS;
        work = warp_sum(w ? s.warp_work[lane] : 0);
        all = warp_sum(w ? s.warp_tiles[lane] : 0);
        max_kv = warp_max(w ? s.warp_max_kv[lane] : 1);
        first_bad = -warp_max(w ? -s.warp_bad[lane] : -INT32_MAX);
        flag = __any_sync(FULL, w && s.warp_flag[lane]);
    }
    /* a refused q_indptr: nothing runs, and the header says `batch` */
    const int32_t bad = flag ? batch : first_bad;
    const int64_t all_tiles = flag ? 0 : all;

    const mlav_fastdiv fka = p.ka_div;
    const int64_t S = sp.target_blocks, ka = sp.key_align;
    const int searches = sp.more_waves + 1;
    int64_t chunk = 0;
    if (all_tiles > 0) {
        /* each search in its own warp: the smallest chunk whose blocks fit cap0 + j S */
        const int64_t cap0 = (int64_t)(((uint32_t)all_tiles + (uint32_t)S - 1) / (uint32_t)S) * S;
        if (warp < searches) {
            const int64_t cap = cap0 + warp * S;
            const int64_t lo = mlav_fastdiv_div((uint32_t)(sp.min_chunk + sp.key_align - 1), fka);
            int64_t hi = mlav_fastdiv_div((uint32_t)max_kv - 1, fka) + 1;
            hi = hi < lo ? lo : hi;
            mlav_step_range q = mlav_step_range_start(lo, hi, all_tiles);
            const int64_t w0 = q.R - q.L;
            int64_t pk = -1, pf = 0; /* a probe past R with fewer blocks: the R given up last */
            for (int step = 1; q.L < q.R; step++) {
                const int64_t k =
                    mlav_step_range_guess(&q, cap, step, w0, q.hasL ? -1 : pk, pf, work,
                                          all_tiles, ka);
                const mlav_step_plateau pr = warp_probe_at(s, batch, k, sp, fka, lane);
                const int64_t R0 = q.R, fR0 = q.fR;
                mlav_step_range_learn_plateau(&q, cap, &pr);
                if (q.R < R0 && fR0 < q.fR) {
                    pk = R0;
                    pf = fR0;
                }
            }
            if (lane == 0)
                s.range[warp] = q;
        }
        __syncthreads();
        /* each candidate's model in its own warp, then every thread takes the first best */
        int64_t c;
        int from;
        const int n_cands = candidate(s, searches, ka, warp, &c, &from);
        if (warp < n_cands) {
            const mlav_step_eval e =
                from >= 0 ? s.range[from].found : warp_probe_at(s, batch, c / ka, sp, fka, lane).e;
            if (lane == 0)
                s.cost[warp] = mlav_step_model(&e, work, sp.target_blocks, sp.block_cost_keys,
                                               sp.split_cost_keys);
        }
        __syncthreads();
        int best = 0;
        for (int i = 1; i < n_cands; i++)
            if (s.cost[i] < s.cost[best])
                best = i;
        candidate(s, searches, ka, best, &chunk, &from);
    }

    /* each request's blocks, combine items and slots at the chosen chunk, then their offsets */
    const uint32_t uka = (uint32_t)ka, max_s = (uint32_t)sp.max_splits;
    const double ik = chunk > 0 ? 1.0 / (double)(chunk / ka) : 0.0;
    for (int32_t b = tid; b < batch; b += NTH) {
        int32_t nb = 0, nc = 0, ns = 0;
        if (s.tiles[b] && chunk > 0) {
            uint32_t s0, q0;
            const int32_t sb =
                (int32_t)mlav_step_splits_of(s.kv[b], step_x(s.kv[b], fka), ik, uka, max_s, s.inv,
                                             &s0, &q0);
            nb = s.tiles[b] * sb;
            nc = sb > 1 ? s.tiles[b] : 0;
            ns = sb > 1 ? nb : 0;
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
            uint32_t s0, q0;
            const int32_t ns = (int32_t)mlav_step_splits_of(s.kv[b], step_x(s.kv[b], fka), ik, uka,
                                                            max_s, s.inv, &s0, &q0);
            const int64_t per = (int64_t)q0 * ka, kv = s.kv[b];
            const int64_t begin = k * per;
            const int64_t end = begin + per < kv ? begin + per : kv;
            const int32_t q0i = p.q_indptr[b], qb = p.q_indptr[b + 1] - q0i;
            it.b = b;
            it.mtile = m;
            it.kv_begin = (int32_t)begin;
            it.kv_end = (int32_t)end;
            it.slot = ns > 1 ? s.slot[b] + k * mt + m : -1;
            it.q_start = q0i;
            it.q_len = qb;
            it.prefix = (int32_t)kv - qb;
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
    /* the region's tail past the combine items, zero as in the host's staging slots, so that
     * both updates write the same region_bytes */
    {
        char *const region = reinterpret_cast<char *>(p.hdr);
        const size_t used = sizeof(mlav_step_header) +
                            sizeof(mlav_split_item) * (size_t)p.bd.max_items +
                            sizeof(mlav_combine_item) * (size_t)p.bd.max_combine;
        for (size_t i = used + tid; i < p.region_bytes; i += NTH)
            region[i] = 0;
    }
    if (tid == 0) {
        mlav_step_header h = {};
        h.bad = bad;
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
