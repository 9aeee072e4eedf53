/* The device scheduler of plans for limits, its kernel (schedule_step.cu launches it): one block
 * builds a step's split schedule from device-resident lengths, by the rule of
 * src/common/schedule_step.h, into the workspace, writing the same bytes as the host update
 * (mlav_step_schedule_build; test_steps_gpu compares them on a GPU, test_step_schedule_emulated
 * on host threads). Launched by mlav_plan_update with device lengths, so nothing is read on the
 * host and the launch can be captured.
 *
 * Its time is a dependent chain through the phases: the lengths in
 * one coalesced load, one barrier for the sums, each chunk search in its own warp (lanes over
 * the requests, warp reductions only) which then weighs its search's candidates, one barrier,
 * one prefix sum (one barrier), the items; or, where equal shares apply, their phases
 * (schedule_step_shares.cuh) in place of the prefix sum and items. The searches' probes learn
 * only their plateau, and the items divide by the table of 1 / d: docs/PERFORMANCE.md#engine-steps
 * gives each phase's cycles and what paid. Code size is not what costs, nor a cold start (same
 * anchor). */
#ifndef MLAV_CUDA_SCHEDULE_STEP_KERNEL_CUH
#define MLAV_CUDA_SCHEDULE_STEP_KERNEL_CUH

#include "schedule_step_shares.cuh"

namespace {

/* The sum of a warp's 64-bit x by 32-bit reductions (redux) of its 21-bit parts, the last part
 * the bits above: each part's sum over 32 lanes fits 32 bits when that part is below 2^27, so
 * 2 parts take x < 2^48 (a step's blocks are below max_tiles x max_splits < 2^39) and 3 any x
 * below 2^63; in place of five rounds of 64-bit shuffles. */
template <int PARTS> __device__ uint64_t warp_sum_parts(uint64_t x)
{
    uint64_t sum = 0;
#pragma unroll
    for (int i = 0; i < PARTS; i++) {
        const uint32_t part = i + 1 < PARTS ? (uint32_t)(x >> (21 * i)) & 0x1fffffu
                                            : (uint32_t)(x >> (21 * i));
        sum += (uint64_t)__reduce_add_sync(FULL, part) << (21 * i);
    }
    return sum;
}

/* A warp's sums: the 32-bit ones in one instruction each (redux), the 64-bit work (below 2^63)
 * by its parts'. */
__device__ sums warp_sums(sums x)
{
    x.tiles = __reduce_add_sync(FULL, x.tiles);
    x.max_kv = __reduce_max_sync(FULL, x.max_kv);
    x.first_bad = __reduce_min_sync(FULL, x.first_bad);
    x.flag = (int32_t)__reduce_or_sync(FULL, (unsigned)x.flag);
    x.taken = __reduce_add_sync(FULL, x.taken);
    x.min_mt = __reduce_min_sync(FULL, x.min_mt);
    x.max_mt = __reduce_max_sync(FULL, x.max_mt);
    x.work = (int64_t)warp_sum_parts<3>((uint64_t)x.work);
    x.kv_tiles = (int64_t)warp_sum_parts<2>((uint64_t)x.kv_tiles); /* below 2^37 */
    return x;
}

/* x = ceil(kv / ka) - 1/2 of a request (schedule_step.h), as the host computes it. */
__device__ double step_x(uint32_t kv, mlav_fastdiv fka)
{
    return (double)(mlav_fastdiv_div(kv - 1, fka) + 1) - 0.5;
}

/* Three int32 values scanned at once, in one loop body. */
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

/* ---- the chunk searches ---------------------------------------------------------------------
 * Search j wants the smallest k in [lo, hi) with blocks(k) <= cap0 + j S, else hi: one answer,
 * however it is searched for (schedule_step.h). Each search runs in its own warp by the host
 * rule's guesses (mlav_step_range_guess), lanes over the requests, but its probes learn only
 * their plateau [left, right] (where no request's splits change): one more floor division per
 * request, where the host's probes also evaluate the blocks just past both ends (two recounts
 * and two integer divisions more, on the device's dependent chain). */
struct plateau {
    uint64_t blocks;
    uint32_t left, right; /* blocks(k) is `blocks` for every k in [left, right] */
};

__device__ plateau warp_plateau_at(const sched_smem &s, int32_t batch, uint32_t k,
                                   const mlav_schedule_params &sp, mlav_fastdiv fka, int lane)
{
    const uint32_t ka = (uint32_t)sp.key_align, max_s = (uint32_t)sp.max_splits;
    const double ik = __drcp_rn((double)k); /* 1 / k correctly rounded, as the host's */
    plateau p = {0, 0, UINT32_MAX};
#pragma unroll 2
    for (int32_t b = lane; b < batch; b += 32) {
        const uint32_t t = (uint32_t)s.tiles[b], kv = s.kv[b];
        if (!t)
            continue;
        const double x = step_x(kv, fka);
        uint32_t s0, q;
        const uint32_t ns = mlav_step_splits_of(kv, x, ik, ka, max_s, s.inv, &s0, &q);
        p.blocks += (uint64_t)t * ns;
        /* mlav_step_probe_add's bounds: s0 stays for every k >= q (below max_splits), and down
         * from ceil(kk / (s0 - 1)) - 1 (above one split) */
        if (s0 < max_s)
            p.left = q > p.left ? q : p.left;
        if (s0 > 1) {
            const uint32_t last = mlav_step_last_of(x, s0, s.inv);
            p.right = last < p.right ? last : p.right;
        }
    }
    p.blocks = warp_sum_parts<2>(p.blocks);
    p.left = __reduce_max_sync(FULL, p.left);
    p.right = __reduce_min_sync(FULL, p.right);
    return p;
}

/* One search's answer, the smallest k in [lo, hi) with blocks(k) <= cap or hi, by one warp
 * (every lane returns it). */
__device__ int64_t warp_search(const sched_smem &s, int32_t batch, int64_t cap, int64_t lo,
                               int64_t hi, int64_t work, int64_t all_tiles,
                               const mlav_schedule_params &sp, mlav_fastdiv fka, int lane)
{
    mlav_step_range q = mlav_step_range_start(lo, hi, all_tiles);
    const int64_t w0 = q.R - q.L;
    int64_t pk = -1, pf = 0; /* a probe past R with fewer blocks: the R given up last */
#pragma unroll 1
    for (int step = 1; q.L < q.R; step++) {
        const int64_t k = mlav_step_range_guess(&q, cap, step, w0, q.hasL ? -1 : pk, pf, work,
                                                all_tiles, sp.key_align);
        const int64_t R0 = q.R, fR0 = q.fR;
        const plateau pr = warp_plateau_at(s, batch, (uint32_t)k, sp, fka, lane);
        mlav_step_range_learn(&q, cap, pr.left, pr.right == UINT32_MAX ? INT64_MAX : pr.right,
                              (int64_t)pr.blocks, nullptr);
        if (q.R < R0 && fR0 < q.fR) {
            pk = R0;
            pf = fR0;
        }
    }
    return q.L;
}

/* The rule's evaluations at N chunks k[0..N) at once (their chains interleave), by one warp:
 * the candidates' (mlav_step_eval, as the host's probes finish them). */
template <int N>
__device__ void warp_evals_at(const sched_smem &s, int32_t batch, const uint32_t (&k)[N],
                              const mlav_schedule_params &sp, mlav_fastdiv fka, int lane,
                              mlav_step_eval (&e)[N])
{
    const uint32_t ka = (uint32_t)sp.key_align, max_s = (uint32_t)sp.max_splits;
    double ik[N];
    uint64_t blocks[N];
    uint32_t most[N], unsplit[N], split_q[N];
#pragma unroll
    for (int j = 0; j < N; j++) {
        ik[j] = __drcp_rn((double)k[j]);
        blocks[j] = 0;
        most[j] = unsplit[j] = split_q[j] = 0;
    }
#pragma unroll 1
    for (int32_t b = lane; b < batch; b += 32) {
        const uint32_t t = (uint32_t)s.tiles[b], kv = s.kv[b];
        if (!t)
            continue;
        const double x = step_x(kv, fka);
#pragma unroll
        for (int j = 0; j < N; j++) {
            uint32_t s0, q;
            const uint32_t ns = mlav_step_splits_of(kv, x, ik[j], ka, max_s, s.inv, &s0, &q);
            blocks[j] += (uint64_t)t * ns;
            if (ns > 1) {
                most[j] = ns > most[j] ? ns : most[j];
                split_q[j] = q > split_q[j] ? q : split_q[j];
            } else {
                unsplit[j] = kv > unsplit[j] ? kv : unsplit[j];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < N; j++) {
        const int64_t split_len = (int64_t)__reduce_max_sync(FULL, split_q[j]) * ka;
        const int64_t longest = __reduce_max_sync(FULL, unsplit[j]);
        e[j].blocks = (int64_t)warp_sum_parts<2>(blocks[j]);
        e[j].longest = split_len > longest ? split_len : longest;
        e[j].most = (int32_t)__reduce_max_sync(FULL, most[j]);
    }
}

/* A candidate's chunk: L ka, or (INT32_MAX / ka) ka where that passes INT32_MAX. */
__device__ __forceinline__ int64_t chunk_of(int64_t L, int64_t ka, int64_t top)
{
    const int64_t c = L * ka;
    return c <= INT32_MAX ? c : top;
}

__global__ void __launch_bounds__(NTH) step_schedule_kernel(const mlav_step_sched_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    sched_smem &s = *reinterpret_cast<sched_smem *>(smem_raw);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const mlav_schedule_params sp = p.sp;
    const int32_t batch = p.batch;

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
        s.inv[i] = i ? __drcp_rn((double)i) : 0.0; /* correctly rounded */
    int flag = 0; /* q_indptr refused as a whole: not from 0, decreasing or past max_tokens */
    int64_t work = 0, all = 0, kv_tiles = 0;
    int32_t max_kv = 1, first_bad = INT32_MAX, taken = 0, min_mt = INT32_MAX, max_mt = 0;
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
        /* the rows the rank reads (kv itself without a KV shard); none splits as one row
         * would, as on the host (mlav_step_schedule_build) */
        const int32_t rows_read = (int32_t)mlav_shard_rows(p.shard, kv);
        const int32_t kv_split = rows_read > 0 ? rows_read : 1;
        s.tiles[b] = t;
        s.kv[b] = (uint32_t)kv_split;
        s.q0[b] = q0;
        if (b == batch - 1)
            s.q0[batch] = q1;
        if (t) {
            max_kv = kv_split > max_kv ? kv_split : max_kv;
            work += (int64_t)t * rows_read;
            all += t;
            kv_tiles += mlav_fastdiv_div((uint32_t)kv_split - 1, p.ka_div) + 1;
            taken++;
            min_mt = t < min_mt ? t : min_mt;
            max_mt = t > max_mt ? t : max_mt;
        }
    }
    /* block sums: a warp's, then every thread over the warps' (one barrier) */
    sums x = {work, kv_tiles, (uint32_t)all, max_kv, first_bad, flag, taken, min_mt, max_mt};
    x = warp_sums(x);
    if (lane == 0)
        s.warp_sums[warp] = x;
    __syncthreads();
    if (lane < NWARPS)
        x = s.warp_sums[lane];
    else
        x = sums{0, 0, 0u, 1, INT32_MAX, 0, 0, INT32_MAX, 0};
    x = warp_sums(x);
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
    int64_t chunk = 0, best = -1; /* the uniform schedule's chunk and modelled time */
    if (all_tiles > 0) {
        /* the searches' caps, cap0 + j S; hi < 2^26 (kv_len < 2^31, ka = MLAV_FLASH_SPLIT_ALIGN) */
        const int64_t cap0 = (int64_t)(((uint32_t)all_tiles + (uint32_t)S - 1) / (uint32_t)S) * S;
        const int32_t lo =
            (int32_t)mlav_fastdiv_div((uint32_t)(sp.min_chunk + sp.key_align - 1), fka);
        int32_t hi = (int32_t)mlav_fastdiv_div((uint32_t)max_kv - 1, fka) + 1;
        hi = hi < lo ? lo : hi;
        const int64_t top = (int64_t)mlav_fastdiv_div((uint32_t)INT32_MAX, fka) * ka;
        /* each search in its own warp, which then evaluates its candidates and their models:
         * search 0's chunk c0 and 2 c0, 4 c0, search j's c_j (taken below if under the last
         * taken, as the host's list: schedule_step.c) */
        if (warp < searches) {
            const int64_t L = warp_search(s, batch, cap0 + warp * S, lo, hi, work, all_tiles, sp,
                                          fka, lane);
            const int64_t c = chunk_of(L, ka, top);
            if (warp == 0) {
                const uint32_t k[3] = {mlav_fastdiv_div((uint32_t)c, fka),
                                       mlav_fastdiv_div((uint32_t)c, fka) * 2,
                                       mlav_fastdiv_div((uint32_t)c, fka) * 4};
                mlav_step_eval e[3];
                warp_evals_at<3>(s, batch, k, sp, fka, lane, e);
                /* lane i models candidate i: the three models side by side, not one after
                 * another in divergent branches */
                const int i = lane < 3 ? lane : 0;
                const mlav_step_eval mine = i == 0 ? e[0] : i == 1 ? e[1] : e[2];
                const int64_t cost = mlav_step_model(&mine, work, sp.target_blocks,
                                                     sp.block_cost_keys, sp.split_cost_keys);
                if (lane < 3)
                    s.cost[lane] = (c << lane) <= INT32_MAX ? cost : INT64_MAX; /* not listed */
            } else {
                const uint32_t k[1] = {mlav_fastdiv_div((uint32_t)c, fka)};
                mlav_step_eval e[1];
                warp_evals_at<1>(s, batch, k, sp, fka, lane, e);
                if (lane == 0)
                    s.cost[2 + warp] = mlav_step_model(&e[0], work, sp.target_blocks,
                                                       sp.block_cost_keys, sp.split_cost_keys);
            }
            if (lane == 0)
                s.found[warp] = c;
        }
        __syncthreads();
        /* every thread: the first best of the list, in the host's order */
        const int64_t c0 = s.found[0];
        int64_t last = c0;
        best = s.cost[0];
        chunk = c0;
#pragma unroll 1
        for (int i = 1; i < 3; i++)
            if (s.cost[i] < best) {
                best = s.cost[i];
                chunk = c0 << i;
            }
#pragma unroll 1
        for (int j = 1; j < searches; j++) {
            const int64_t c = s.found[j];
            if (c >= last)
                continue; /* no shorter split fits this many waves */
            if (s.cost[2 + j] < best) {
                best = s.cost[2 + j];
                chunk = c;
            }
            last = c;
        }
    }

    /* equal shares where they apply and win (the same decision and bytes as the host's) */
    if (sp.shares && sp.block_cost_keys > 0 && p.shard.ranks <= 1 && !flag &&
        x.min_mt == x.max_mt &&
        step_shares(s, p, x.taken, x.max_mt, x.kv_tiles, best, bad))
        return;

    /* each request's blocks, combine items and slots at the chosen chunk, and their offsets: a
     * run of consecutive requests per thread, a warp scan of the runs' sums, the warps' totals
     * through shared memory (one barrier); each request's splits before and after the recount
     * kept for the items */
    const uint32_t uka = (uint32_t)ka, max_s = (uint32_t)sp.max_splits;
    const double ik = chunk > 0 ? __drcp_rn((double)mlav_fastdiv_div((uint32_t)chunk, fka)) : 0.0;
    const int32_t run_len = (batch + NTH - 1) / NTH, first = tid * run_len;
    const int32_t end = first + run_len < batch ? first + run_len : batch;
    int3v sum = {{0, 0, 0}};
    uint32_t most = 0;
#pragma unroll 1
    for (int32_t b = first; b < end; b++) {
        int32_t nb = 0, nc = 0, ns = 0;
        uint32_t sb = 1, qs = 0;
        if (s.tiles[b] && chunk > 0) {
            uint32_t s0;
            sb = mlav_step_splits_of(s.kv[b], step_x(s.kv[b], fka), ik, uka, max_s, s.inv, &s0,
                                     &qs);
            nb = s.tiles[b] * (int32_t)sb;
            nc = sb > 1 ? s.tiles[b] : 0;
            ns = sb > 1 ? nb : 0;
            most = sb > 1 && sb > most ? sb : most;
        }
        s.blk[b] = nb;
        s.comb[b] = nc;
        s.slot[b] = ns;
        s.splits[b] = (uint16_t)(sb - 1);
        s.per[b] = qs;
        sum.v[0] += nb;
        sum.v[1] += nc;
        sum.v[2] += ns;
    }
    const int3v inc = warp_scan3(sum, lane);
    most = __reduce_max_sync(FULL, most);
    if (lane == 31)
        s.warp_tot[warp] = make_int4(inc.v[0], inc.v[1], inc.v[2], (int32_t)most);
    __syncthreads();
    int3v run, tot = {{0, 0, 0}};
    int32_t most_all = 0;
#pragma unroll
    for (int k = 0; k < 3; k++)
        run.v[k] = inc.v[k] - sum.v[k];
#pragma unroll 4
    for (int v = 0; v < NWARPS; v++) {
        const int4 t = s.warp_tot[v];
        if (v < warp) {
            run.v[0] += t.x;
            run.v[1] += t.y;
            run.v[2] += t.z;
        }
        tot.v[0] += t.x;
        tot.v[1] += t.y;
        tot.v[2] += t.z;
        most_all = t.w > most_all ? t.w : most_all;
    }
#pragma unroll 1
    for (int32_t b = first; b < end; b++) {
        const int32_t nb = s.blk[b], nc = s.comb[b], ns = s.slot[b];
        s.blk[b] = run.v[0];
        s.comb[b] = run.v[1];
        s.slot[b] = run.v[2];
        run.v[0] += nb;
        run.v[1] += nc;
        run.v[2] += ns;
    }
    if (tid == 0) {
        s.blk[batch] = tot.v[0];
        s.comb[batch] = tot.v[1];
        s.slot[batch] = tot.v[2];
    }
    __syncthreads();

    const int32_t n_items = tot.v[0], n_comb = tot.v[1];
#pragma unroll 1
    for (int32_t i = tid; i < p.bd.max_items; i += NTH) {
        int4 lo = make_int4(-1, 0, 0, 0), hi = make_int4(0, 0, 0, 0); /* mlav_split_item */
        if (i < n_items) {
            const int32_t b = owner(s.blk, batch, i), mt = s.tiles[b], local = i - s.blk[b];
            const int32_t k = div_mt(s, local, mt);
            const int32_t m = local - k * mt;
            const uint32_t ns = (uint32_t)s.splits[b] + 1;
            /* the request's global kv_len, and the rank's rows of it (may be none), read again
             * only with a KV shard: s.kv holds the rows split */
            const int32_t gkv = p.shard.ranks > 1 ? p.kv_lens[b] : (int32_t)s.kv[b];
            const int64_t kv = p.shard.ranks > 1 ? mlav_shard_rows(p.shard, gkv) : gkv;
            /* mlav_schedule_splits' per: ceil(kk / s0) ka (the recount, schedule_step.h) */
            const int64_t per = (int64_t)s.per[b] * ka;
            const int64_t begin = k * per;
            const int64_t end = begin + per < kv ? begin + per : kv;
            const int32_t q0 = s.q0[b], qb = s.q0[b + 1] - q0;
            lo = make_int4(b, m, (int32_t)begin, (int32_t)end);
            hi = make_int4(ns > 1 ? s.slot[b] + k * mt + m : -1, q0, qb, gkv - qb);
        }
        put_item(p.items, i, lo, hi);
    }
#pragma unroll 1
    for (int32_t i = tid; i < p.bd.max_combine; i += NTH) {
        int4 lo = make_int4(-1, 0, 0, 0), hi = make_int4(0, 0, 0, 0); /* mlav_combine_item */
        if (i < n_comb) {
            const int32_t b = owner(s.comb, batch, i), m = i - s.comb[b];
            const int32_t q0 = s.q0[b], qb = s.q0[b + 1] - q0;
            lo = make_int4(b, m, (int32_t)s.splits[b] + 1, s.slot[b] + m);
            hi = make_int4(s.tiles[b], q0, qb * p.H, 0);
        }
        put_item(p.combine, i, lo, hi);
    }
    finish_region(p, bad, n_items, n_comb, tot.v[2], chunk, most_all);
}

} // namespace

#endif
