/* The device scheduler of plans for limits: one block builds a step's split schedule from
 * device-resident lengths, by the rule of src/common/schedule_step.h, into the workspace, writing
 * the same bytes as the host update (mlav_step_schedule_build; test_steps_gpu compares them).
 * Launched by mlav_plan_update with device lengths, so nothing is read on the host and the
 * launch can be captured.
 *
 * Its time is one warp's dependent chain through the phases (bench/diag/sched_stamps): the
 * lengths in one coalesced load, one barrier for the sums, each chunk search in its own warp
 * (lanes over the requests, the rule's probes and plateaus, warp reductions only), one barrier,
 * the candidates' models in a warp each, one barrier, the prefix sums and the items. 8.5-10.8 us
 * of its own on the H200 at B = 1-64 (docs/PERFORMANCE.md#engine-steps, which says what each
 * phase costs and what paid). Code size is not what costs: cut from 100 KB to 34 KB of sm_90
 * code, and run warm, it measured the same. */
#include "../common/fastdiv.h"
#include "../common/schedule_step.h"
#include "flash.h"

/* Phase timestamps for bench/diag/sched_stamps.cu, which compiles this file with its own
 * definition; nothing in the library's build. */
#ifndef MLAV_SCHED_STAMP
#define MLAV_SCHED_STAMP(i)
#endif

namespace {

constexpr int NTH = 512, NWARPS = NTH / 32;
constexpr int MAXB = MLAV_STEP_MAX_BATCH;
constexpr int MAX_SEARCHES = 1 + MLAV_STEP_MORE_WAVES, MAX_CANDS = 3 + MLAV_STEP_MORE_WAVES;
static_assert(MLAV_FLASH_MAX_SPLITS <= MLAV_STEP_INV_MAX, "1 / splits from the table alone");
static_assert(MAX_SEARCHES <= NWARPS && MAX_CANDS <= NWARPS, "a warp per search, per candidate");
static_assert(sizeof(mlav_split_item) == 32 && sizeof(mlav_combine_item) == 32,
              "items stored as two int4");

/* The step's sums over its requests. */
struct sums {
    int64_t work;
    uint32_t tiles; /* below 2^31 when q_indptr is taken (max_tiles); else unused */
    int32_t max_kv, first_bad, flag;
};

struct sched_smem {
    int32_t tiles[MAXB]; /* row tiles of each accepted request, 0 when skipped */
    uint32_t kv[MAXB];
    int32_t blk[MAXB + 1], comb[MAXB + 1], slot[MAXB + 1]; /* exclusive prefix sums */
    uint16_t splits[MAXB]; /* at the chosen chunk: splits - 1 before the recount, after << 8 */
    double inv[MLAV_STEP_INV_MAX + 1];                      /* fl(1 / d), schedule_step.h */
    mlav_step_range range[MAX_SEARCHES];
    int64_t cost[MAX_CANDS], cand[MAX_CANDS];
    sums warp_sums[NWARPS];
    int32_t warp_part[3][NWARPS];
    int32_t most; /* most splits of a split request at the chosen chunk (the combine's shape) */
};

constexpr unsigned FULL = 0xffffffffu;

/* A warp's sums: the 32-bit ones in one instruction each (redux), the 64-bit work by shuffles. */
__device__ sums warp_sums(sums x)
{
    x.tiles = __reduce_add_sync(FULL, x.tiles);
    x.max_kv = __reduce_max_sync(FULL, x.max_kv);
    x.first_bad = __reduce_min_sync(FULL, x.first_bad);
    x.flag = (int32_t)__reduce_or_sync(FULL, (unsigned)x.flag);
#pragma unroll 1
    for (int o = 16; o > 0; o >>= 1)
        x.work += __shfl_xor_sync(FULL, x.work, o);
    return x;
}

/* A probe summed over the warp's lanes, every lane getting the result: the maxima and minima
 * in one instruction each (redux), then the sums, the ties' only from the lanes at the bounds
 * (the order-free form of mlav_step_probe_add's "a new bound restarts the tie"). */
__device__ mlav_step_probe warp_probe(mlav_step_probe p)
{
    const uint32_t left = __reduce_max_sync(FULL, p.left), right = __reduce_min_sync(FULL, p.right);
    p.most = __reduce_max_sync(FULL, p.most);
    p.unsplit = __reduce_max_sync(FULL, p.unsplit);
    p.split_q = __reduce_max_sync(FULL, p.split_q);
    p.below = p.left == left ? p.below : 0;
    p.above = p.right == right ? p.above : 0;
    p.left = left;
    p.right = right;
#pragma unroll 1
    for (int o = 16; o > 0; o >>= 1) {
        p.blocks += __shfl_xor_sync(FULL, p.blocks, o);
        p.below += __shfl_xor_sync(FULL, p.below, o);
        p.above += __shfl_xor_sync(FULL, p.above, o);
    }
    return p;
}

/* x = ceil(kv / ka) - 1/2 of a request (schedule_step.h), as the host computes it. */
__device__ double step_x(uint32_t kv, mlav_fastdiv fka)
{
    return (double)(mlav_fastdiv_div(kv - 1, fka) + 1) - 0.5;
}

/* The rule at k over the step's accepted requests, by one warp. */
__device__ __forceinline__ mlav_step_plateau warp_probe_at(const sched_smem &s, int32_t batch,
                                                           int64_t k,
                                           const mlav_schedule_params &sp, mlav_fastdiv fka,
                                           int lane)
{
    const uint32_t ka = (uint32_t)sp.key_align, max_s = (uint32_t)sp.max_splits;
    const double ik = 1.0 / (double)k;
    mlav_step_probe p = mlav_step_probe_start();
#pragma unroll 2
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
__device__ __forceinline__ int candidate(const sched_smem &s, int searches, int64_t ka,
                                      int64_t top, int which, int64_t *chunk, int *from)
{
    int n = 0;
    int64_t last = 0;
    *chunk = 0;
    *from = -1;
#pragma unroll 1
    for (int j = 0; j < searches; j++) {
        int64_t c = s.range[j].L * ka;
        const int exact = c <= INT32_MAX;
        if (!exact)
            c = top; /* (INT32_MAX / ka) ka */
        if (j == 0) {
#pragma unroll 1
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

/* Three int32 values scanned at once (block_scan3), in one loop body. */
struct int3v {
    int32_t v[3];
};

/* The inclusive scan of a warp's lanes. */
__device__ int3v warp_scan3(int3v x, int lane)
{
#pragma unroll 1
    for (int o = 1; o < 32; o <<= 1) {
        int3v y;
#pragma unroll
        for (int k = 0; k < 3; k++) {
            y.v[k] = __shfl_up_sync(FULL, x.v[k], o);
            x.v[k] += lane >= o ? y.v[k] : 0;
        }
    }
    return x;
}

/* Exclusive prefix sums over `n` entries of blk, comb and slot at once, in place, with a[n] the
 * total: each thread a run of consecutive entries, warp scans of the runs' sums, then one warp
 * over the warps' totals. */
__device__ void block_scan3(sched_smem &s, int32_t n)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int per = (n + NTH - 1) / NTH, first = tid * per;
    int3v sum = {{0, 0, 0}};
#pragma unroll 1
    for (int i = first; i < first + per && i < n; i++) {
        sum.v[0] += s.blk[i];
        sum.v[1] += s.comb[i];
        sum.v[2] += s.slot[i];
    }
    int3v inc = warp_scan3(sum, lane), run;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        if (lane == 31)
            s.warp_part[k][warp] = inc.v[k];
        run.v[k] = inc.v[k] - sum.v[k];
    }
    __syncthreads();
    if (warp == 0) {
        int3v t;
#pragma unroll
        for (int k = 0; k < 3; k++)
            t.v[k] = lane < NWARPS ? s.warp_part[k][lane] : 0;
        const int3v w = warp_scan3(t, lane);
#pragma unroll
        for (int k = 0; k < 3; k++)
            if (lane < NWARPS)
                s.warp_part[k][lane] = w.v[k] - t.v[k]; /* exclusive: the warps before */
        if (lane == 31) {
            s.blk[n] = w.v[0];
            s.comb[n] = w.v[1];
            s.slot[n] = w.v[2];
        }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 3; k++)
        run.v[k] += s.warp_part[k][warp];
#pragma unroll 1
    for (int i = first; i < first + per && i < n; i++) {
        const int32_t b = s.blk[i], c = s.comb[i], l = s.slot[i];
        s.blk[i] = run.v[0];
        s.comb[i] = run.v[1];
        s.slot[i] = run.v[2];
        run.v[0] += b;
        run.v[1] += c;
        run.v[2] += l;
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

    MLAV_SCHED_STAMP(0);
    /* the lengths, coalesced (one load of each per thread up to 512 requests), and while the
     * first are in flight the table of 1 / d */
    int32_t q0 = 0, q1 = 0, kv = 0;
    if (tid < batch) {
        q0 = p.q_indptr[tid];
        q1 = p.q_indptr[tid + 1];
        kv = p.kv_lens[tid];
    }
#pragma unroll 1
    for (int i = tid; i <= MLAV_STEP_INV_MAX; i += NTH)
        s.inv[i] = i ? 1.0 / (double)i : 0.0; /* IEEE division: correctly rounded */
    if (tid == 0)
        s.most = 0; /* read after the block sums' barrier and later ones */
    int flag = 0; /* q_indptr refused as a whole: not from 0, decreasing or past max_tokens */
    int64_t work = 0, all = 0;
    int32_t max_kv = 1, first_bad = INT32_MAX;
    const uint32_t rows = (uint32_t)sp.rows_per_tile;
#pragma unroll 1
    for (int32_t b = tid; b < batch; b += NTH) {
        if (b != tid) {
            q0 = p.q_indptr[b];
            q1 = p.q_indptr[b + 1];
            kv = p.kv_lens[b];
        }
        const int64_t q = (int64_t)q1 - q0;
        flag |= q < 0 || (b == 0 && q0 != 0) || (b == batch - 1 && q1 > p.lim.max_tokens);
        int32_t t = 0;
        if (q < 0 || q > INT32_MAX) /* q_indptr is refused */
            t = 0;
        else if (mlav_step_request_ok(q, kv, p.lim.max_q_len, p.lim.max_kv_len))
            /* q <= max_q_len: q H rows fit 32 bits, as the plan's max_tokens H do */
            t = (int32_t)(((uint32_t)q * (uint32_t)p.H + rows - 1) / rows);
        else if (b < first_bad)
            first_bad = b;
        s.tiles[b] = t;
        s.kv[b] = (uint32_t)kv;
        if (t) {
            max_kv = kv > max_kv ? kv : max_kv;
            work += (int64_t)t * kv;
            all += t;
        }
    }
    MLAV_SCHED_STAMP(1);
    /* block sums: a warp's, then every thread over the warps' (one barrier) */
    sums x = {work, (uint32_t)all, max_kv, first_bad, flag};
    x = warp_sums(x);
    if (lane == 0)
        s.warp_sums[warp] = x;
    __syncthreads();
    if (lane < NWARPS)
        x = s.warp_sums[lane];
    else
        x = sums{0, 0u, 1, INT32_MAX, 0};
    x = warp_sums(x);
    MLAV_SCHED_STAMP(2);
    work = x.work;
    all = x.tiles;
    max_kv = x.max_kv;
    first_bad = x.first_bad;
    flag = x.flag;
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
#pragma unroll 1
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
            MLAV_SCHED_STAMP(3);
        }
        __syncthreads();
        MLAV_SCHED_STAMP(4);
        /* each candidate's model in its own warp, then every thread takes the first best */
        int64_t c;
        int from;
        const int64_t top = (int64_t)mlav_fastdiv_div((uint32_t)INT32_MAX, fka) * ka;
        const int n_cands = candidate(s, searches, ka, top, warp, &c, &from);
        if (warp < n_cands) {
            const mlav_step_eval e =
                from >= 0 ? s.range[from].found
                          : warp_probe_at(s, batch, mlav_fastdiv_div((uint32_t)c, fka), sp, fka,
                                          lane).e;
            if (lane == 0) {
                s.cost[warp] = mlav_step_model(&e, work, sp.target_blocks, sp.block_cost_keys,
                                               sp.split_cost_keys);
                s.cand[warp] = c;
            }
        }
        MLAV_SCHED_STAMP(5);
        __syncthreads();
        MLAV_SCHED_STAMP(6);
        int best = 0;
#pragma unroll 1
        for (int i = 1; i < n_cands; i++)
            if (s.cost[i] < s.cost[best])
                best = i;
        chunk = s.cand[best];
    }

    /* each request's blocks, combine items and slots at the chosen chunk, then their offsets;
     * its splits before and after the recount kept for the items */
    const uint32_t uka = (uint32_t)ka, max_s = (uint32_t)sp.max_splits;
    const double ik = chunk > 0 ? 1.0 / (double)mlav_fastdiv_div((uint32_t)chunk, fka) : 0.0;
    uint32_t most = 0;
#pragma unroll 1
    for (int32_t b = tid; b < batch; b += NTH) {
        int32_t nb = 0, nc = 0, ns = 0;
        uint32_t packed = 0;
        if (s.tiles[b] && chunk > 0) {
            uint32_t s0, q0;
            const uint32_t sb =
                mlav_step_splits_of(s.kv[b], step_x(s.kv[b], fka), ik, uka, max_s, s.inv, &s0, &q0);
            packed = (s0 - 1) | (sb - 1) << 8;
            nb = s.tiles[b] * (int32_t)sb;
            nc = sb > 1 ? s.tiles[b] : 0;
            ns = sb > 1 ? nb : 0;
            most = sb > 1 && sb > most ? sb : most;
        }
        s.blk[b] = nb;
        s.comb[b] = nc;
        s.slot[b] = ns;
        s.splits[b] = (uint16_t)packed;
    }
    most = __reduce_max_sync(FULL, most);
    if (lane == 0 && most)
        atomicMax(&s.most, (int32_t)most);
    MLAV_SCHED_STAMP(7);
    __syncthreads();
    block_scan3(s, batch);

    MLAV_SCHED_STAMP(8);
    const int32_t n_items = s.blk[batch], n_comb = s.comb[batch];
#pragma unroll 1
    for (int32_t i = tid; i < p.bd.max_items; i += NTH) {
        int4 lo = make_int4(-1, 0, 0, 0), hi = make_int4(0, 0, 0, 0); /* mlav_split_item */
        if (i < n_items) {
            const int32_t b = owner(s.blk, batch, i), mt = s.tiles[b], local = i - s.blk[b];
            const int32_t k = local / mt, m = local - k * mt;
            const uint32_t kv = s.kv[b], s0 = (s.splits[b] & 255u) + 1, ns = (s.splits[b] >> 8) + 1;
            /* mlav_schedule_splits' per: ceil(kk / s0) ka (the recount, schedule_step.h) */
            const int64_t per =
                (int64_t)(mlav_step_floor_div(step_x(kv, fka), s.inv[s0]) + 1) * ka;
            const int64_t begin = k * per;
            const int64_t end = begin + per < kv ? begin + per : kv;
            const int32_t q0 = p.q_indptr[b], qb = p.q_indptr[b + 1] - q0;
            lo = make_int4(b, m, (int32_t)begin, (int32_t)end);
            hi = make_int4(ns > 1 ? s.slot[b] + k * mt + m : -1, q0, qb, (int32_t)kv - qb);
        }
        /* two 16-byte stores, not eight of 4 (the region is 256-byte aligned, items 32) */
        int4 *const dst = reinterpret_cast<int4 *>(p.items + i);
        dst[0] = lo;
        dst[1] = hi;
    }
    MLAV_SCHED_STAMP(9);
#pragma unroll 1
    for (int32_t i = tid; i < p.bd.max_combine; i += NTH) {
        int4 lo = make_int4(-1, 0, 0, 0), hi = make_int4(0, 0, 0, 0); /* mlav_combine_item */
        if (i < n_comb) {
            const int32_t b = owner(s.comb, batch, i), m = i - s.comb[b];
            const int32_t q0 = p.q_indptr[b], qb = p.q_indptr[b + 1] - q0;
            lo = make_int4(b, m, (int32_t)(s.splits[b] >> 8) + 1, s.slot[b] + m);
            hi = make_int4(s.tiles[b], q0, qb * p.H, 0);
        }
        int4 *const dst = reinterpret_cast<int4 *>(p.combine + i);
        dst[0] = lo;
        dst[1] = hi;
    }
    MLAV_SCHED_STAMP(10);
    /* the region's tail past the combine items, zero as in the host's staging slots, so that
     * both updates write the same region_bytes */
    {
        char *const region = reinterpret_cast<char *>(p.hdr);
        const size_t used = sizeof(mlav_step_header) +
                            sizeof(mlav_split_item) * (size_t)p.bd.max_items +
                            sizeof(mlav_combine_item) * (size_t)p.bd.max_combine;
#pragma unroll 1
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
        mlav_step_combine_shape(n_comb, s.most, sp.rows_per_tile, &p.bd, &h);
        *p.hdr = h;
    }
    MLAV_SCHED_STAMP(11);
}

} // namespace

mlav_status mlav_step_schedule_launch(const mlav_step_sched_params *p, cudaStream_t stream)
{
    step_schedule_kernel<<<1, NTH, 0, stream>>>(*p);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
