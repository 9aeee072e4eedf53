/* The device scheduler of plans for limits: one block builds a step's split schedule from
 * device-resident lengths, by the rule of src/common/schedule_step.h, into the workspace, writing
 * the same bytes as the host update (mlav_step_schedule_build; test_steps_gpu compares them).
 * Launched by mlav_plan_update with device lengths, so nothing is read on the host and the
 * launch can be captured.
 *
 * Its time is a dependent chain through the phases: the lengths in
 * one coalesced load, one barrier for the sums, each chunk search in its own warp (lanes over
 * the requests, warp reductions only) which then weighs its search's candidates, one barrier,
 * one prefix sum (one barrier), the items. The searches' probes learn only their plateau, and
 * the items divide by the table of 1 / d: docs/PERFORMANCE.md#engine-steps gives each phase's
 * cycles and what paid. Code size is not what costs, nor a cold start (same anchor). */
#include "../common/fastdiv.h"
#include "../common/schedule_step.h"
#include "../common/schedule_step_shares.h"
#include "../common/shard.h"
#include "flash.h"

namespace {

constexpr int NTH = 512, NWARPS = NTH / 32;
constexpr int MAXB = MLAV_STEP_MAX_BATCH;
constexpr int MAX_SEARCHES = 1 + MLAV_STEP_MORE_WAVES, MAX_CANDS = 3 + MLAV_STEP_MORE_WAVES;
static_assert(MLAV_FLASH_MAX_SPLITS <= MLAV_STEP_INV_MAX, "1 / splits from the table alone");
static_assert(MAX_SEARCHES <= NWARPS, "a warp per search");
static_assert(sizeof(mlav_split_item) == 32 && sizeof(mlav_combine_item) == 32,
              "items stored as two int4");

/* The step's sums over its requests. */
struct sums {
    int64_t work;
    int64_t kv_tiles; /* KV tiles of the requests with rows (equal shares' sequence) */
    uint32_t tiles; /* below 2^31 when q_indptr is taken (max_tiles); else unused */
    int32_t max_kv, first_bad, flag;
    int32_t taken, min_mt, max_mt; /* requests with rows; their least and most row tiles */
};

constexpr int MAXP = MLAV_STEP_SHARES_MAX_PARTS;

/* Equal shares' arrays (schedule_step_shares.h), over the uniform writer's, which a step that
 * takes shares never uses: per request with rows (packed, in request order) and per part. */
struct shares_smem {
    int64_t first[MAXP + 1];  /* each packed request's first KV tile in the sequence; N last */
    int64_t start[MAXP];      /* a request that starts inside a part: when its piece starts */
    int32_t b[MAXP];          /* the request */
    int32_t count[MAXP];      /* its pieces (splits) */
    int32_t slot0[MAXP];      /* its first slot, -1 unsplit */
    int32_t part[MAXP];       /* the part it starts inside, -1 at a part's start */
    int32_t inside[MAXP];     /* per part: requests that start inside it */
    int32_t comb_req[MAXP];   /* the packed request of each split request, in order */
    int4 piece[2 * MAXP];     /* in dispatch order: request, kv_begin, kv_end, first slot */
};

/* In dynamic shared memory (63 KB at MLAV_STEP_MAX_BATCH, past the 48 KB of static), so that
 * the items read every per-request value from it: mlav_step_schedule_prepare raises the
 * kernel's limit. */
struct sched_smem {
    int32_t tiles[MAXB]; /* row tiles of each accepted request, 0 when skipped */
    uint32_t kv[MAXB];
    int32_t q0[MAXB + 1]; /* q_indptr, for the items */
    union {
        struct {
            int32_t blk[MAXB + 1], comb[MAXB + 1], slot[MAXB + 1]; /* exclusive prefix sums */
            uint32_t per[MAXB];    /* at the chosen chunk: the split length in ka units */
            uint16_t splits[MAXB]; /* at the chosen chunk: splits - 1 (after the recount) */
        };
        shares_smem sh;
    };
    /* equal shares' block-wide values */
    unsigned long long sh_time;
    int32_t sh_most, sh_later, sh_refused, sh_slots, sh_comb;
    double inv[MLAV_STEP_INV_MAX + 1];                      /* fl(1 / d), schedule_step.h */
    int64_t cost[MAX_CANDS];     /* the candidates' models: c0, 2 c0, 4 c0, then c_j of search j */
    int64_t found[MAX_SEARCHES]; /* each search's chunk c_j */
    sums warp_sums[NWARPS];
    int4 warp_tot[NWARPS]; /* a warp's blocks, combine items, slots, most splits */
    int64_t warp_tiles[NWARPS]; /* equal shares: a warp's KV tiles */
};

constexpr unsigned FULL = 0xffffffffu;

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

/* The step region's tail past the combine items, zero as in the host's staging slots (so that
 * both updates write the same region_bytes), and the header. */
__device__ void finish_region(const mlav_step_sched_params &p, int32_t bad, int32_t n_items,
                              int32_t n_comb, int32_t n_slots, int64_t chunk, int32_t most)
{
    const int tid = threadIdx.x;
    char *const region = reinterpret_cast<char *>(p.hdr);
    const size_t used = sizeof(mlav_step_header) +
                        sizeof(mlav_split_item) * (size_t)p.bd.max_items +
                        sizeof(mlav_combine_item) * (size_t)p.bd.max_combine;
#pragma unroll 1
    for (size_t i = used + tid; i < p.region_bytes; i += NTH)
        region[i] = 0;
    if (tid == 0) {
        mlav_step_header h = {};
        h.bad = bad;
        h.batch = p.batch;
        h.n_items = n_items;
        h.n_combine = n_comb;
        h.n_slots = n_slots;
        h.chunk_keys = (int32_t)chunk;
        mlav_step_combine_shape(n_comb, most, p.sp.rows_per_tile, &p.bd, &h);
        h.owner = p.owner;
        h.limits = p.lim;
        *p.hdr = h;
    }
}

/* Item (or combine item) i of an array of 32-byte items: two 16-byte stores, not eight of 4 (the
 * region is 256-byte aligned). */
__device__ __forceinline__ void put_item(void *items, int32_t i, int4 lo, int4 hi)
{
    int4 *const dst = reinterpret_cast<int4 *>(items) + 2 * (size_t)i;
    dst[0] = lo;
    dst[1] = hi;
}

/* k / mt for 0 <= k < 2^31: by the table where it has 1 / mt (schedule_step.h: exact for any
 * such k), a division past it. */
__device__ __forceinline__ int32_t div_mt(const sched_smem &s, int32_t k, int32_t mt)
{
    return mt <= MLAV_STEP_INV_MAX ? (int32_t)mlav_step_floor_div((double)k + 0.5, s.inv[mt])
                                   : k / mt;
}

/* Equal shares (schedule_step_shares.h) for `taken` requests with rows, each of mt row tiles,
 * N KV tiles in all, where they apply and model at most 0.97 of the uniform schedule's
 * `uniform`: the whole step region, as the host's step_shares writes it, and true; else false,
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
    if (s.sh_refused || !mlav_step_shares_win(t, uniform) || n_items > p.bd.max_items ||
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

mlav_status mlav_step_schedule_prepare(void)
{
    /* the same size for every plan: raising the limit to it never lowers another's */
    MLAV_CUDA_TRY(cudaFuncSetAttribute(step_schedule_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)sizeof(sched_smem)));
    return MLAV_OK;
}

mlav_status mlav_step_schedule_launch(const mlav_step_sched_params *p, cudaStream_t stream)
{
    step_schedule_kernel<<<1, NTH, sizeof(sched_smem), stream>>>(*p);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
