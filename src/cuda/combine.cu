/* The split combine: merge the partial states of one (request, row tile) with the shared merge
 * math (merge.h: the element-wise rules behind the mlav_merge_weights that the CPU backend and
 * mlav_merge_states use). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/combine_shape.h"
#include "../common/merge.h"
#include "convert.cuh"
#include "flash.h"
#include "kv_scale.cuh"
#include "mma.cuh"

namespace {

constexpr int DL = MLAV_FLASH_DL, BM = MLAV_FLASH_BLOCK_M;
constexpr int THREADS = MLAV_COMBINE_THREADS; /* 128 float4 = the 512 output columns */
constexpr int MAX_COL_BLOCKS = MLAV_COMBINE_MAX_COL_BLOCKS;
static_assert(MLAV_FLASH_MAX_SPLITS <= 2 * THREADS, "the wide block combine: two splits a thread");
constexpr int PRELOAD = MLAV_COMBINE_PRELOAD; /* loaded with the lse values */


/* The step header of a plan for limits: it sits just before the items in the workspace
 * (schedule_step.h), so the step instances find it from the params they already have. */
__device__ __forceinline__ const mlav_step_header *step_header(const mlav_flash_params &p)
{
    return reinterpret_cast<const mlav_step_header *>(p.items) - 1;
}

/* Four fp16 partial values, as the split kernel stores them, in fp32. */
__device__ __forceinline__ float4 half4_to_float4(uint2 v)
{
    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&v.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&v.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

using mlav::from_float;

/* The factor of the merged output beyond the partial states: an F32 plan's split kernel leaves
 * an FP8 cache's power of two out of its partial states (kv_scale.cuh), so that they do not
 * round as subnormals before the merge rounds again; a 16-bit plan's carry it in part_scale. */
template <typename T> __device__ __forceinline__ float out_pow(const mlav_flash_params &)
{
    return 1.0f;
}
template <> __device__ __forceinline__ float out_pow<float>(const mlav_flash_params &p)
{
    return mlav::out_scale_of(mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale)).pw;
}
__device__ __forceinline__ float4 times(float4 a, float f)
{
    return make_float4(a.x * f, a.y * f, a.z * f, a.w * f);
}

/* The partial states as the split kernels leave them: fp32 for F32 plans (verify_flash_f32.cu);
 * fp16 for 16-bit plans (flash/epilogue.cuh), each (row, 128-column block) scaled by a power of two
 * that part_scale undoes. load() returns one thread's four columns of split s as stored, in fp32;
 * unscale() the factor that restores them, which the combine folds into the split's weight. */
constexpr int SCALE_COLS = MLAV_FLASH_SCALE_COLS;
template <typename T> struct partial {
    static constexpr bool scaled = true;
    const __half *o; /* slot0's row r, from this thread's first column */
    const float *u;  /* slot0's part_scale row r */
    size_t stride;   /* elements from one split to the next, in o */
    size_t ustride;  /* the same in part_scale */
    __device__ partial(const mlav_flash_params &p, const mlav_combine_item &it, int r, int d)
        : o(static_cast<const __half *>(p.part_o) + ((size_t)it.slot0 * BM + r) * DL + d),
          u(p.part_scale + ((size_t)it.slot0 * BM + r) * (DL / SCALE_COLS)),
          stride((size_t)it.slot_stride * BM * DL),
          ustride((size_t)it.slot_stride * BM * (DL / SCALE_COLS))
    {
    }
    __device__ __forceinline__ float4 load(int s) const
    {
        return half4_to_float4(*reinterpret_cast<const uint2 *>(o + s * stride));
    }
    __device__ __forceinline__ float unscale(int s, int cb) const
    {
        return u[s * ustride + cb];
    }
};
template <> struct partial<float> {
    static constexpr bool scaled = false;
    const float *o; /* as above, fp32 and unscaled */
    size_t stride;
    __device__ partial(const mlav_flash_params &p, const mlav_combine_item &it, int r, int d)
        : o(static_cast<const float *>(p.part_o) + ((size_t)it.slot0 * BM + r) * DL + d),
          stride((size_t)it.slot_stride * BM * DL)
    {
    }
    __device__ __forceinline__ float4 load(int s) const
    {
        return *reinterpret_cast<const float4 *>(o + s * stride);
    }
    __device__ __forceinline__ float unscale(int, int) const
    {
        return 1.0f;
    }
};

/* Block (combine item, row, column block): q = p.combine_col_blocks column blocks of 512 / q
 * columns per row, each with q split groups of 128 / q threads (one float4 each); group k sums
 * the splits s = k, k + q, ... and the groups meet in shared memory. q = 16 gives a lone 64-row
 * request with 113-128 splits 16 x 16 ways of parallel loads, all in the first batch; q = 1 keeps
 * many-row combines to one wave of blocks (docs/PERFORMANCE.md#combine). The
 * weights come first, SPT splits per thread (s = tid + k x THREADS; SPT = 2 only for items of more
 * than THREADS splits, mlav_combine_kind) with block reductions for the max, the NaN flag and the
 * sum, under the rules of merge.h; a 16-bit plan's weights also carry the
 * part_scale factor of each of the block's 128-column blocks, loaded with the lse values, so that
 * the loop over the splits reads no more than the partial rows. (A serial chain of dependent
 * loads, or one thread computing all weights serially, each cost more than the split kernel for
 * a lone q_len 1 request: docs/PERFORMANCE.md#kernel.) */
template <typename T, int SPT>
__device__ __forceinline__ void combine_block(const mlav_flash_params &p,
                                              const mlav_combine_item &it, int r, int z, int q)
{
    static_assert(THREADS * 4 == DL, "one float4 of columns per thread and column block");
    constexpr int CBS = DL / SCALE_COLS;
    __shared__ float s_w[CBS][SPT * THREADS], s_red[THREADS / 32]; /* [128-column block][split] */
    __shared__ float4 s_acc[THREADS - THREADS / MAX_COL_BLOCKS];
    const int m = it.mtile * BM + r;
    if (m >= it.rows)
        return; /* uniform over the block */
    const int n = it.nsplit, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tpg = THREADS / q; /* threads per split group */
    const int grp = tid / tpg, c = tid % tpg;
    mlav::wait_for_primary(); /* launched early (p.pdl): the split grid's states are complete */

    /* This thread's first PRELOAD partial rows are loaded together with the lse values: they do
     * not depend on the weights, and loaded after them they cost a second round trip to L2 on
     * the path of every combine (docs/PERFORMANCE.md#decisions). */
    const int d = z * (DL / q) + c * 4;
    const partial<T> part(p, it, r, d);
    float4 pre[PRELOAD];
#pragma unroll
    for (int k = 0; k < PRELOAD; k++) {
        const int s = grp + k * q;
        pre[k] = s < n ? part.load(s) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float lse_s[SPT];
#pragma unroll
    for (int k = 0; k < SPT; k++) {
        const int s = tid + k * THREADS;
        lse_s[k] = s < n ? p.part_lse[(size_t)(it.slot0 + s * it.slot_stride) * BM + r] : -INFINITY;
    }
    /* this block's 128-column blocks: cb0 .. cb0 + ncb - 1 (one when q > 4: the block's columns
     * are part of one); this thread's: the one holding column d */
    const int ncb = partial<T>::scaled ? max(CBS / q, 1) : 1;
    const int cb0 = z * (DL / q) / SCALE_COLS;
    float u[SPT][CBS];
#pragma unroll
    for (int k = 0; k < SPT; k++)
#pragma unroll
        for (int j = 0; j < CBS; j++)
            u[k][j] = tid + k * THREADS < n && j < ncb ? part.unscale(tid + k * THREADS, cb0 + j)
                                                       : 1.0f;
    float mx = lse_s[0];
#pragma unroll
    for (int k = 1; k < SPT; k++)
        mx = fmaxf(mx, lse_s[k]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0)
        s_red[warp] = mx;
    bool my_nan = lse_s[0] != lse_s[0];
#pragma unroll
    for (int k = 1; k < SPT; k++)
        my_nan = my_nan || lse_s[k] != lse_s[k];
    const int nan = __syncthreads_or(my_nan);
    mx = s_red[0];
#pragma unroll
    for (int k = 1; k < THREADS / 32; k++)
        mx = fmaxf(mx, s_red[k]);
    float w[SPT], sum = 0.0f;
#pragma unroll
    for (int k = 0; k < SPT; k++) {
        w[k] = tid + k * THREADS < n ? mlav_merge_weight(lse_s[k], mx, nan) : 0.0f;
        sum += w[k];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    __syncthreads(); /* every thread has read s_red's maxima */
    if (lane == 0)
        s_red[warp] = sum;
    __syncthreads();
    sum = s_red[0];
#pragma unroll
    for (int k = 1; k < THREADS / 32; k++)
        sum += s_red[k];
#pragma unroll
    for (int k = 0; k < SPT; k++)
        if (tid + k * THREADS < n) {
            const float wn = mlav_merge_normalize(w[k], sum);
#pragma unroll
            for (int j = 0; j < CBS; j++)
                if (j < ncb)
                    s_w[j][tid + k * THREADS] = wn * u[k][j];
        }
    __syncthreads();
    const float *ws_of = s_w[partial<T>::scaled ? d / SCALE_COLS - cb0 : 0]; /* [split] */

    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < PRELOAD; k++) {
        const int s = grp + k * q;
        if (s < n) { /* the bound of the loop below */
            const float ws = ws_of[s];
            acc.x += ws * pre[k].x;
            acc.y += ws * pre[k].y;
            acc.z += ws * pre[k].z;
            acc.w += ws * pre[k].w;
        }
    }
    /* the rest in batches of 8 loads issued before their first use (written as an unrolled
     * loop with a run-time bound, the fp16 loads and their conversions came out one load per
     * use, slower at 128 splits: docs/PERFORMANCE.md#decisions), then
     * one by one; an empty split holds o = 0 with weight 0, so no branch is needed here */
    constexpr int BATCH = 8;
    int s = grp + PRELOAD * q;
    for (; s + (BATCH - 1) * q < n; s += BATCH * q) {
        float4 v[BATCH];
#pragma unroll
        for (int k = 0; k < BATCH; k++)
            v[k] = part.load(s + k * q);
#pragma unroll
        for (int k = 0; k < BATCH; k++) {
            const float ws = ws_of[s + k * q];
            acc.x += ws * v[k].x;
            acc.y += ws * v[k].y;
            acc.z += ws * v[k].z;
            acc.w += ws * v[k].w;
        }
    }
    for (; s < n; s += q) {
        const float4 v = part.load(s);
        const float ws = ws_of[s];
        acc.x += ws * v.x;
        acc.y += ws * v.y;
        acc.z += ws * v.z;
        acc.w += ws * v.w;
    }
    if (q > 1) {
        if (grp > 0)
            s_acc[(grp - 1) * tpg + c] = acc;
        __syncthreads();
        if (grp > 0)
            return;
        for (int k = 0; k < q - 1; k++) {
            const float4 v = s_acc[k * tpg + c];
            acc.x += v.x;
            acc.y += v.y;
            acc.z += v.z;
            acc.w += v.w;
        }
    }
    if constexpr (!partial<T>::scaled)
        acc = times(acc, out_pow<T>(p));
    T *out = static_cast<T *>(p.out) + ((size_t)it.q_start * p.H + m) * DL + d;
    out[0] = from_float<T>(acc.x);
    out[1] = from_float<T>(acc.y);
    out[2] = from_float<T>(acc.z);
    out[3] = from_float<T>(acc.w);
    if (p.lse && z == 0 && tid == 0)
        p.lse[(size_t)it.q_start * p.H + m] = mlav_merge_lse(mx, sum, nan);
}

/* The block combine of a plan for one problem: grid (combine items, BM rows, column blocks). */
template <typename T, int SPT>
__global__ void __launch_bounds__(THREADS) combine_kernel(const mlav_flash_params p)
{
    const mlav_combine_item it = p.combine[blockIdx.x]; /* the plan's: ready before the wait */
    combine_block<T, SPT>(p, it, blockIdx.y, blockIdx.z, p.combine_col_blocks);
}

/* The row combine's view of the partial states: a raw 4-column piece as stored (kept raw until
 * its use, so that a batch of them fits in registers), its fp32 value, and the output store. */
template <typename T> struct row_io { /* 16-bit plans: fp16 pieces, scaled by part_scale */
    using raw = uint2;
    static constexpr int BATCH = 16; /* splits in flight: 16 x 4 column blocks x 2 registers */
    __device__ static raw load(const void *o, size_t e)
    {
        return *reinterpret_cast<const uint2 *>(static_cast<const __half *>(o) + e);
    }
    __device__ static float4 value(raw v)
    {
        return half4_to_float4(v);
    }
    __device__ static void store(T *out, float4 a)
    {
        T v[4] = {from_float<T>(a.x), from_float<T>(a.y), from_float<T>(a.z), from_float<T>(a.w)};
        *reinterpret_cast<uint2 *>(out) = *reinterpret_cast<const uint2 *>(v);
    }
};
template <> struct row_io<float> { /* F32 plans: fp32 pieces, unscaled */
    using raw = float4;
    static constexpr int BATCH = 8;
    __device__ static raw load(const void *o, size_t e)
    {
        return *reinterpret_cast<const float4 *>(static_cast<const float *>(o) + e);
    }
    __device__ static float4 value(raw v)
    {
        return v;
    }
    __device__ static void store(float *out, float4 a)
    {
        *reinterpret_cast<float4 *>(out) = a;
    }
};

/* One warp merges row r of item `it` over NCB 128-column blocks from column block cb0, with no
 * shared memory and no block barrier: lane s holds split s's lse and weight (the reductions are
 * shuffles) and lane l owns columns 4 l .. 4 l + 3 of each column block; every partial load of
 * the row is issued before the weights are known, in batches of row_io::BATCH splits. The row
 * combine (combine_rows_kernel) takes a whole row per warp (NCB = 4); the step combine's row
 * kind a column block per warp (NCB = 1, combine_step_kernel), so that a batch of in-flight loads
 * is a quarter of the registers and the kernel that also holds the block combine keeps its
 * occupancy. The lse is written by the warp of column block 0. */
template <typename T, int NCB>
__device__ __forceinline__ void warp_merge(const mlav_flash_params &p, const mlav_combine_item &it,
                                           int r, int cb0)
{
    using io = row_io<T>;
    constexpr int CBS = DL / SCALE_COLS, BATCH = io::BATCH;
    static_assert(SCALE_COLS == 32 * 4, "a warp's pieces span one column block");
    static_assert(NCB >= 1 && NCB <= CBS, "column blocks of one row");
    const int lane = threadIdx.x & 31, m = it.mtile * BM + r;
    if (m >= it.rows)
        return; /* uniform over the warp */
    const int n = it.nsplit;
    const size_t row0 = (size_t)it.slot0 * BM + r; /* split 0's partial row */
    const size_t rstride = (size_t)it.slot_stride * BM;
    const size_t e0 = row0 * DL + cb0 * SCALE_COLS + lane * 4; /* this lane's first element */
    mlav::wait_for_primary(); /* launched early (p.pdl): the split grid's states are complete */

    const float lse_s = lane < n ? p.part_lse[row0 + lane * rstride] : -INFINITY;
    /* one column block's scale as a single conditional load, as the whole row's as a loop: the
     * forms each kernel was measured with */
    float us[NCB];
    if constexpr (NCB == 1) {
        us[0] = partial<T>::scaled && lane < n ? p.part_scale[(row0 + lane * rstride) * CBS + cb0]
                                               : 1.0f;
    } else {
#pragma unroll
        for (int cb = 0; cb < NCB; cb++)
            us[cb] = partial<T>::scaled && lane < n
                         ? p.part_scale[(row0 + lane * rstride) * CBS + (cb0 + cb)]
                         : 1.0f;
    }
    typename io::raw v[BATCH][NCB];
#pragma unroll
    for (int s = 0; s < BATCH; s++)
#pragma unroll
        for (int cb = 0; cb < NCB; cb++)
            if (s < n)
                v[s][cb] = io::load(p.part_o, e0 + s * rstride * DL + cb * SCALE_COLS);

    float mx = lse_s;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const int nan = __any_sync(0xffffffffu, lse_s != lse_s);
    const float w = lane < n ? mlav_merge_weight(lse_s, mx, nan) : 0.0f;
    float sum = w;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float wu[NCB];
    if constexpr (NCB == 1) {
        wu[0] = lane < n ? mlav_merge_normalize(w, sum) * us[0] : 0.0f;
    } else {
        const float wn = lane < n ? mlav_merge_normalize(w, sum) : 0.0f;
#pragma unroll
        for (int cb = 0; cb < NCB; cb++)
            wu[cb] = wn * us[cb];
    }

    float4 acc[NCB];
#pragma unroll
    for (int cb = 0; cb < NCB; cb++)
        acc[cb] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0;; s0 += BATCH) {
#pragma unroll
        for (int s = 0; s < BATCH; s++) {
            if (s0 + s >= n) /* uniform over the warp */
                break;
#pragma unroll
            for (int cb = 0; cb < NCB; cb++) {
                const float ws = __shfl_sync(0xffffffffu, wu[cb], s0 + s);
                const float4 x = io::value(v[s][cb]);
                acc[cb].x += ws * x.x;
                acc[cb].y += ws * x.y;
                acc[cb].z += ws * x.z;
                acc[cb].w += ws * x.w;
            }
        }
        if (s0 + BATCH >= n)
            break;
#pragma unroll
        for (int s = 0; s < BATCH; s++)
#pragma unroll
            for (int cb = 0; cb < NCB; cb++)
                if (s0 + BATCH + s < n)
                    v[s][cb] =
                        io::load(p.part_o, e0 + (s0 + BATCH + s) * rstride * DL + cb * SCALE_COLS);
    }
    T *out = static_cast<T *>(p.out) + ((size_t)it.q_start * p.H + m) * DL + cb0 * SCALE_COLS +
             lane * 4;
    [[maybe_unused]] const float pw = out_pow<T>(p);
#pragma unroll
    for (int cb = 0; cb < NCB; cb++)
        io::store(out + cb * SCALE_COLS, partial<T>::scaled ? acc[cb] : times(acc[cb], pw));
    if (p.lse && cb0 == 0 && lane == 0)
        p.lse[(size_t)it.q_start * p.H + m] = mlav_merge_lse(mx, sum, nan);
}

/* The row combine, for items of at most ROW_MAX_SPLITS splits: a warp merges one row, all 512
 * columns (warp_merge). Against combine_kernel (a block per row and column block, weights
 * through shared memory and four block barriers) this is one round trip to L2 per row, and a
 * block per 4 rows instead of 1-4 per row for the PDL launch to place
 * (docs/PERFORMANCE.md#combine). */
constexpr int ROW_WARPS = 4; /* 128 threads: ~170 registers each leave room for 3 blocks per SM */
static_assert(MLAV_COMBINE_ROW_MAX_SPLITS <= 32, "one lane per split for the weights");
template <typename T>
__global__ void __launch_bounds__(ROW_WARPS * 32) combine_rows_kernel(const mlav_flash_params p)
{
    const int64_t u = (int64_t)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5); /* the row */
    if (u >= (int64_t)p.n_combine * BM)
        return; /* whole warps */
    const mlav_combine_item it = p.combine[u / BM]; /* the plan's: ready before the wait */
    warp_merge<T, DL / SCALE_COLS>(p, it, (int)(u % BM), 0);
}

/* The combine of a plan for limits: one launch whose shape is fixed for every step, merging as
 * the exact plan's combine would for the step's items. The scheduler writes the step's kind and
 * column blocks into the step header (mlav_step_combine_shape); a 1-D grid covers the most
 * blocks any step can take (backend_flash.cu), and a block past the step's exits on reads that
 * every block of an SM shares. Row kind: a block per row, a warp per 128-column block
 * (warp_merge); block kinds: blockIdx.x as the exact grid's (item, row, column block),
 * item fastest, into combine_block. Chosen per step, because the wide block combine that the
 * limits' longest request needs is slower where a step takes the row combine
 * (docs/PERFORMANCE.md#engine-steps). Two instances (MLAV_COMBINE_STEP_DENSE, _ROOMY): at 8 blocks
 * per SM, the block combine's registers (64; the three paths together spill 12 bytes on sm_90),
 * so that the column blocks chosen from its residency fit one wave; at 6, with room for all
 * three (78 registers, no spill), for plans whose steps never need more than 6 per SM. */
template <typename T, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) combine_step_kernel(const mlav_flash_params p)
{
    const mlav_step_header *h = step_header(p);
    /* a header another plan (or no update) wrote merges nothing, as the split kernel runs
     * nothing on it: its step is laid out for other limits (flash.h, step_owner). The kind and
     * column count are then this plan's scheduler's (checking them as well spilled 36-52 bytes
     * more on sm_90); a count past the grid's items, or an item past the limits, merges
     * nothing either (mlav_step_combine_fits). */
    if (__ldg(reinterpret_cast<const unsigned long long *>(&h->owner)) != p.step_owner)
        return;
    const int32_t n_step = __ldg(&h->n_combine), kind = __ldg(&h->combine_kind);
    const int q = __ldg(&h->combine_col_blocks);
    if (n_step <= 0 || n_step > p.n_combine)
        return;
    /* the step's blocks are the grid's last (the scheduler's column blocks keep them within
     * it): the work distributor fills a one-wave grid's early blocks unevenly, the SMs of a
     * small GPC first, so the leading blocks of a grid larger than the step crowd onto them,
     * where the trailing ones spread as the exact plan's grid does
     * (docs/PERFORMANCE.md#engine-steps) */
    const uint32_t n = (uint32_t)n_step;
    const uint32_t lead = gridDim.x - n * BM * (kind == MLAV_COMBINE_ROWS ? 1u : (uint32_t)q);
    if (blockIdx.x < lead)
        return;
    const uint32_t t = blockIdx.x - lead;
    if (kind == MLAV_COMBINE_ROWS) {
        const mlav_combine_item it = p.combine[t / BM]; /* the step's: ready before the wait */
        if (mlav_step_combine_fits(it, p))
            warp_merge<T, 1>(p, it, (int)(t % BM), threadIdx.x >> 5);
        return;
    }
    const uint32_t per_z = n * BM;
    const uint32_t z = t / per_z, rest = t - z * per_z, r = rest / n, x = rest - r * n;
    const mlav_combine_item it = p.combine[x];
    if (!mlav_step_combine_fits(it, p))
        return;
    if (kind == MLAV_COMBINE_BLOCKS)
        combine_block<T, 1>(p, it, (int)r, (int)z, q);
    else
        combine_block<T, 2>(p, it, (int)r, (int)z, q);
}

} // namespace

/* The block combine's instance for a dtype and kind (MLAV_COMBINE_BLOCKS or _WIDE). */
static const void *block_combine(mlav_dtype dtype, int kind)
{
    const bool wide = kind == MLAV_COMBINE_BLOCKS_WIDE;
    if (dtype == MLAV_DTYPE_BF16)
        return wide ? reinterpret_cast<const void *>(&combine_kernel<__nv_bfloat16, 2>)
                    : reinterpret_cast<const void *>(&combine_kernel<__nv_bfloat16, 1>);
    if (dtype == MLAV_DTYPE_F32)
        return wide ? reinterpret_cast<const void *>(&combine_kernel<float, 2>)
                    : reinterpret_cast<const void *>(&combine_kernel<float, 1>);
    return wide ? reinterpret_cast<const void *>(&combine_kernel<__half, 2>)
                : reinterpret_cast<const void *>(&combine_kernel<__half, 1>);
}

/* The row combine's instance for a dtype. */
static const void *row_combine(mlav_dtype dtype)
{
    if (dtype == MLAV_DTYPE_BF16)
        return reinterpret_cast<const void *>(&combine_rows_kernel<__nv_bfloat16>);
    if (dtype == MLAV_DTYPE_F32)
        return reinterpret_cast<const void *>(&combine_rows_kernel<float>);
    return reinterpret_cast<const void *>(&combine_rows_kernel<__half>);
}

/* The step combine's instance for a dtype at 8 (dense) or 6 (roomy) blocks per SM. */
template <int MIN_BLOCKS> static const void *step_combine_at(mlav_dtype dtype)
{
    if (dtype == MLAV_DTYPE_BF16)
        return reinterpret_cast<const void *>(&combine_step_kernel<__nv_bfloat16, MIN_BLOCKS>);
    if (dtype == MLAV_DTYPE_F32)
        return reinterpret_cast<const void *>(&combine_step_kernel<float, MIN_BLOCKS>);
    return reinterpret_cast<const void *>(&combine_step_kernel<__half, MIN_BLOCKS>);
}

static const void *step_combine(mlav_dtype dtype, int step)
{
    return step == MLAV_COMBINE_STEP_ROOMY ? step_combine_at<6>(dtype) : step_combine_at<8>(dtype);
}

mlav_status mlav_combine_launch(mlav_dtype dtype, const mlav_flash_params *fp,
                                const mlav_flash_launch_opts *lo, int step, cudaStream_t stream)
{
    /* With p.pdl the combine is a programmatic dependent of the split kernel just launched on
     * this stream: it may start while that kernel's last blocks run, and waits in the kernel
     * (wait_for_primary) for the split grid to finish. In a CUDA graph capture this becomes a
     * programmatic edge. */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = fp->pdl ? 1 : 0;
    const void *kernel;
    if (step) { /* the kind and column blocks are the step's (combine_step_kernel) */
        cfg.gridDim = dim3((unsigned)lo->combine_grid);
        cfg.blockDim = dim3(THREADS);
        cfg.dynamicSmemBytes = (size_t)lo->combine_smem; /* reserved, unused: see spread_smem */
        kernel = step_combine(dtype, step);
    } else if (lo->combine_kind == MLAV_COMBINE_ROWS) {
        const int64_t rows = (int64_t)fp->n_combine * BM;
        cfg.gridDim = dim3((unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS));
        cfg.blockDim = dim3(ROW_WARPS * 32);
        kernel = row_combine(dtype);
    } else {
        cfg.gridDim = dim3((unsigned)fp->n_combine, BM, (unsigned)fp->combine_col_blocks);
        cfg.blockDim = dim3(THREADS);
        cfg.dynamicSmemBytes = (size_t)lo->combine_smem; /* reserved, unused: see spread_smem */
        kernel = block_combine(dtype, lo->combine_kind);
    }
    /* every instance takes the params struct by value as its only argument */
    void *args[1] = {const_cast<mlav_flash_params *>(fp)};
    MLAV_CUDA_TRY(cudaLaunchKernelExC(&cfg, kernel, args));
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}

/* The kernel whose launch shape a plan chooses: the block combine of `kind` (MLAV_COMBINE_BLOCKS
 * or _WIDE; the row kind's column blocks come from the narrow one), or (step: a
 * MLAV_COMBINE_STEP_ instance) the step combine. */
static const void *shaped_combine(mlav_dtype dtype, int kind, int step)
{
    return step ? step_combine(dtype, step)
                : block_combine(dtype, kind == MLAV_COMBINE_ROWS ? MLAV_COMBINE_BLOCKS : kind);
}

/* Resident blocks per SM of that kernel with `dyn` bytes of dynamic shared memory (0 on error).
 * The three dtypes' instances have the same registers and static shared memory to within what
 * decides occupancy, but for the roomy step combine, whose F32 instance (72 registers on sm_90)
 * holds one block more than the 16-bit ones (78); the BF16 one stands for all, the fewest. */
static int combine_blocks_per_sm(int kind, int step, size_t dyn)
{
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, shaped_combine(MLAV_DTYPE_BF16, kind, step), THREADS, dyn) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return per_sm;
}

int mlav_combine_col_blocks(int64_t rows, int max_nsplit, const mlav_cuda_device *dev)
{
    int per_sm = combine_blocks_per_sm(mlav_combine_kind(max_nsplit), 0, 0);
    if (per_sm < 1)
        per_sm = 1;
    return mlav_combine_col_blocks_for(rows, max_nsplit, (int64_t)per_sm * dev->sm_count, PRELOAD,
                                       MAX_COL_BLOCKS);
}

int mlav_combine_step_instance(int64_t max_rows, const mlav_cuda_device *dev)
{
    /* the roomy instance where even a step of the limits' rows at one column block (each
     * step's are at most a wave, else one) stays within one wave of it */
    const int per_sm = combine_blocks_per_sm(0, MLAV_COMBINE_STEP_ROOMY, 0);
    return max_rows <= (int64_t)per_sm * dev->sm_count ? MLAV_COMBINE_STEP_ROOMY
                                                        : MLAV_COMBINE_STEP_DENSE;
}

void mlav_combine_step_shape(const mlav_cuda_device *dev, int step, int combine_smem,
                             int64_t max_rows, int32_t wave[3], int32_t *grid)
{
    /* a step's column blocks as the exact plan's (its kind's residency), within what the step
     * launch keeps resident under its reservation, so that a step's blocks never take a second
     * wave there */
    int cap = combine_blocks_per_sm(0, step, (size_t)combine_smem);
    if (cap < 1)
        cap = 1;
    int64_t most = 0;
    for (int kind = 0; kind < 3; kind++) {
        int per_sm = combine_blocks_per_sm(kind, 0, 0);
        per_sm = per_sm < 1 ? 1 : per_sm < cap ? per_sm : cap;
        wave[kind] = per_sm * dev->sm_count;
        most = wave[kind] > most ? wave[kind] : most;
    }
    /* a block per row (row kind, one column block), or rows x q <= the wave (q > 1) */
    const int64_t wide = max_rows * MAX_COL_BLOCKS < most ? max_rows * MAX_COL_BLOCKS : most;
    *grid = (int32_t)(max_rows > wide ? max_rows : wide);
}

mlav_status mlav_combine_spread_smem(int64_t blocks, int kind, int step,
                                     const mlav_cuda_device *dev, int *bytes)
{
    /* The cap is faster for q_len 1 from prefix 1024 on, where the uncapped grid without PDL
     * gains less and loses at short prefixes (docs/PERFORMANCE.md#combine). */
    *bytes = 0;
    const int per_sm = combine_blocks_per_sm(kind, step, 0);
    cudaFuncAttributes a;
    MLAV_CUDA_TRY(cudaFuncGetAttributes(&a, shaped_combine(MLAV_DTYPE_BF16, kind, step)));
    const size_t dyn = mlav_combine_spread_bytes(blocks, dev->sm_count, per_sm, dev->smem_per_sm,
                                                 dev->smem_reserved, a.sharedSizeBytes,
                                                 dev->smem_limit);
    if (dyn == 0)
        return MLAV_OK;
    mlav_status s = MLAV_OK;
    const mlav_dtype dts[3] = {MLAV_DTYPE_BF16, MLAV_DTYPE_F16, MLAV_DTYPE_F32};
    for (int i = 0; i < 3 && s == MLAV_OK; i++)
        s = mlav_cuda_prepare_kernel(shaped_combine(dts[i], kind, step), dyn, dev, "combine");
    if (s != MLAV_OK)
        return s;
    /* the cap must still hold k blocks per SM, or the grid would take a second wave */
    const int64_t k = (blocks + dev->sm_count - 1) / dev->sm_count;
    if (combine_blocks_per_sm(kind, step, dyn) >= k)
        *bytes = (int)dyn;
    return MLAV_OK;
}
