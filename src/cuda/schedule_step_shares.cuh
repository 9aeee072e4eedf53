/* Equal shares in a step on the device (src/common/schedule_step_shares.h): the device
 * scheduler's twin of the host's build (schedule_step_shares.c), byte for byte. */
#ifndef MLAV_CUDA_SCHEDULE_STEP_SHARES_CUH
#define MLAV_CUDA_SCHEDULE_STEP_SHARES_CUH

#include "schedule_step_common.cuh"

namespace {

/* Equal shares (schedule_step_shares.h) for `taken` requests with rows, each of mt row tiles,
 * N KV tiles in all, where they apply and model at most 0.97 of the uniform schedule's
 * `uniform`: the whole step region, as mlav_step_shares_build writes it, and true; else false,
 * nothing written. Every thread calls it alike (its barriers). Phases: the requests packed with
 * their first tiles (a block scan, one barrier); each one's pieces and the part it starts
 * inside (one barrier); the parts' times, the slots, each later piece's start (one barrier);
 * the verdict; the pieces in dispatch order, a later piece ranked against the others (at most
 * P - 1 of them; one barrier); the items. */
__device__ bool step_shares(sched_smem &s, const mlav_step_sched_params &p, int32_t taken,
                            int32_t mt, int64_t N, int64_t uniform, int32_t bad)
{
    const int64_t P = mlav_step_shares_parts(taken, mt, N, p.sp.target_blocks);
    if (P == 0 || uniform < 0)
        return false;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const mlav_schedule_params &sp = p.sp;
    const int64_t ka = sp.key_align;
    shares_smem &h = s.sh;

    const int32_t batch = p.batch, run_len = (batch + NTH - 1) / NTH, first = tid * run_len;
    const int32_t end = first + run_len < batch ? first + run_len : batch;
    int32_t cnt = 0;
    int64_t tl = 0;
#pragma unroll 1
    for (int32_t b = first; b < end; b++)
        if (s.tiles[b]) {
            cnt++;
            tl += mlav_fastdiv_div(s.kv[b] - 1, p.ka_div) + 1;
        }
    int32_t ic = cnt;
    int64_t it = tl;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int32_t yc = __shfl_up_sync(FULL, ic, o);
        const int64_t yt = __shfl_up_sync(FULL, it, o);
        if (lane >= o) {
            ic += yc;
            it += yt;
        }
    }
    if (lane == 31) {
        s.warp_tot[warp].x = ic;
        s.warp_tiles[warp] = it;
    }
#pragma unroll 1
    for (int64_t j = tid; j < P; j += NTH)
        h.inside[j] = 0;
    if (tid == 0) {
        s.sh_time = 0;
        s.sh_most = s.sh_later = s.sh_refused = 0;
    }
    __syncthreads();
    int32_t idx = ic - cnt;
    int64_t ft = it - tl;
#pragma unroll 1
    for (int v = 0; v < warp; v++) {
        idx += s.warp_tot[v].x;
        ft += s.warp_tiles[v];
    }
#pragma unroll 1
    for (int32_t b = first; b < end; b++)
        if (s.tiles[b]) {
            h.b[idx] = b;
            h.first[idx++] = ft;
            ft += mlav_fastdiv_div(s.kv[b] - 1, p.ka_div) + 1;
        }
    if (tid == 0)
        h.first[taken] = N;
    __syncthreads();

#pragma unroll 1
    for (int32_t i = tid; i < taken; i += NTH) {
        const int64_t f = h.first[i], j0 = mlav_step_part_of(N, P, f);
        const int64_t c = mlav_step_part_of(N, P, h.first[i + 1] - 1) - j0 + 1;
        h.count[i] = (int32_t)c;
        if (c > sp.max_splits)
            atomicOr(&s.sh_refused, 1);
        if (c > 1)
            atomicMax(&s.sh_most, (int32_t)c);
        const bool inside = mlav_step_part_begin(N, P, j0) != f;
        h.part[i] = inside ? (int32_t)j0 : -1;
        if (inside) {
            atomicAdd(&h.inside[j0], 1);
            atomicAdd(&s.sh_later, 1);
        }
    }
    __syncthreads();

#pragma unroll 1
    for (int64_t j = tid; j < P; j += NTH) {
        const int64_t tj = mlav_step_part_time(mlav_step_part_begin(N, P, j + 1) -
                                                   mlav_step_part_begin(N, P, j),
                                               1 + h.inside[j], &sp);
        atomicMax(&s.sh_time, (unsigned long long)tj);
    }
    if (warp == 0) { /* slots and combine items in request order (at most MAXP requests) */
        int32_t slot = 0, comb = 0;
#pragma unroll 1
        for (int32_t base = 0; base < taken; base += 32) {
            const int32_t i = base + lane, c = i < taken ? h.count[i] : 1;
            const int32_t sl = c > 1 ? c * mt : 0, cr = c > 1;
            int32_t isl = sl, icr = cr;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int32_t y0 = __shfl_up_sync(FULL, isl, o), y1 = __shfl_up_sync(FULL, icr, o);
                if (lane >= o) {
                    isl += y0;
                    icr += y1;
                }
            }
            if (i < taken) {
                h.slot0[i] = c > 1 ? slot + isl - sl : -1;
                if (c > 1)
                    h.comb_req[comb + icr - 1] = i;
            }
            slot += __shfl_sync(FULL, isl, 31);
            comb += __shfl_sync(FULL, icr, 31);
        }
        if (lane == 0) {
            s.sh_slots = slot;
            s.sh_comb = comb * mt;
        }
    }
#pragma unroll 1
    for (int32_t i = tid; i < taken; i += NTH)
        if (h.part[i] >= 0) {
            const int64_t a = mlav_step_part_begin(N, P, h.part[i]);
            h.start[i] =
                mlav_step_piece_start(h.first[i] - a,
                                      i - mlav_step_shares_owner(h.first, taken, a), &sp);
        }
    __syncthreads();

    const int64_t t = (int64_t)s.sh_time + (int64_t)sp.split_cost_keys * s.sh_most;
    const int64_t n_items = (P + s.sh_later) * mt;
    /* one_wave 0: a step keeps the 0.97 margin (mlav_shares_win) */
    if (s.sh_refused || !mlav_shares_win(t, uniform, 0) || n_items > p.bd.max_items ||
        s.sh_slots > p.bd.max_slots || s.sh_comb > p.bd.max_combine) {
        __syncthreads(); /* the uniform writer's arrays are these */
        return false;
    }

    /* a piece: its request, KV rows and first slot (the k-th piece's of the request) */
    auto piece_of = [&](int32_t i, int64_t k, int64_t t0, int64_t t1) {
        const int32_t b = h.b[i];
        const int64_t f = h.first[i], e = (t1 - f) * ka, kv = s.kv[b];
        return make_int4(b, (int32_t)((t0 - f) * ka), (int32_t)(e < kv ? e : kv),
                         h.slot0[i] < 0 ? -1 : h.slot0[i] + (int32_t)k * mt);
    };
#pragma unroll 1
    for (int64_t j = tid; j < P; j += NTH) {
        const int64_t a = mlav_step_part_begin(N, P, j), e = mlav_step_part_begin(N, P, j + 1);
        const int32_t i = mlav_step_shares_owner(h.first, taken, a);
        h.piece[j] = piece_of(i, j - mlav_step_part_of(N, P, h.first[i]), a,
                              h.first[i + 1] < e ? h.first[i + 1] : e);
    }
#pragma unroll 1
    for (int32_t i = tid; i < taken; i += NTH) {
        const int32_t j = h.part[i];
        if (j < 0)
            continue;
        const int64_t key = h.start[i];
        int32_t rank = 0;
#pragma unroll 1
        for (int32_t u = 0; u < taken; u++)
            rank += h.part[u] >= 0 &&
                    (h.start[u] < key || (h.start[u] == key && h.part[u] < j));
        const int64_t e = mlav_step_part_begin(N, P, j + 1);
        h.piece[P + rank] =
            piece_of(i, 0, h.first[i], h.first[i + 1] < e ? h.first[i + 1] : e);
    }
    __syncthreads();

    const int32_t n_comb = s.sh_comb;
#pragma unroll 1
    for (int32_t i = tid; i < p.bd.max_items; i += NTH) {
        int4 lo = make_int4(-1, 0, 0, 0), hi = make_int4(0, 0, 0, 0); /* mlav_split_item */
        if (i < n_items) {
            const int32_t k = div_mt(s, i, mt), m = i - k * mt;
            const int4 pc = h.piece[k];
            const int32_t q0 = s.q0[pc.x], qb = s.q0[pc.x + 1] - q0;
            lo = make_int4(pc.x, m, pc.y, pc.z);
            hi = make_int4(pc.w < 0 ? -1 : pc.w + m, q0, qb, (int32_t)s.kv[pc.x] - qb);
        }
        put_item(p.items, i, lo, hi);
    }
#pragma unroll 1
    for (int32_t i = tid; i < p.bd.max_combine; i += NTH) {
        int4 lo = make_int4(-1, 0, 0, 0), hi = make_int4(0, 0, 0, 0); /* mlav_combine_item */
        if (i < n_comb) {
            const int32_t c = div_mt(s, i, mt), m = i - c * mt, pi = h.comb_req[c];
            const int32_t b = h.b[pi], q0 = s.q0[b], qb = s.q0[b + 1] - q0;
            lo = make_int4(b, m, h.count[pi], h.slot0[pi] + m);
            hi = make_int4(mt, q0, qb * p.H, 0);
        }
        put_item(p.combine, i, lo, hi);
    }
    const int64_t share = mlav_step_ceil_div(N, P) * ka;
    finish_region(p, bad, (int32_t)n_items, n_comb, s.sh_slots,
                  share < INT32_MAX ? share : INT32_MAX, s.sh_most);
    return true;
}

} // namespace

#endif
