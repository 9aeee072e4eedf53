/* The naive verify kernel, the GPU baseline (docs/DESIGN.md#kernels): one block per (token, head),
 * the whole score row in shared memory, the KV read twice (scores, then the weighted sum).
 * Naive in structure, not careless: 16-byte loads (8-byte for an FP8 cache) and several keys in
 * flight per warp, so the baseline the flash kernel is measured against is an honest one. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../common/dtype.h"
#include "../common/shard.h"
#include "../common/step_region.h"
#include "../common/visibility.h"
#include "convert.cuh"
#include "kv_scale.cuh"
#include "page_row.cuh"
#include "verify_naive.h"

namespace {

/* One plain parameter struct; pointers are device memory. */
struct naive_args {
    const void *q;                /* [T, H, W] dtype */
    const void *kv;               /* [num_pages, page_size, W] kv_dtype */
    const int32_t *page_table;    /* [B, max_pages], or [page_table_num_rows, max_pages] */
    const int32_t *page_table_rows; /* [B] or NULL: request b's row (page_row.cuh) */
    int64_t page_table_num_rows;
    const int32_t *bad_pages;     /* [max_pages] of -1: the row of a device index outside the
                                     table (page_row.cuh) */
    const uint32_t *tree_mask;    /* [T, mask_words], NULL = causal chain */
    void *out;                    /* [T, H, Dl] dtype */
    float *lse;                   /* [T, H], may be NULL */
    const int32_t *q_indptr;      /* [B+1] */
    const int32_t *kv_lens;       /* [B] */
    int64_t num_pages;            /* page ids outside [0, num_pages) read as NaN rows */
    int32_t H, Dl, W, page_size, B, max_pages, mask_words;
    int32_t groups;               /* pass 2: thread groups splitting the keys (naive_config) */
    /* a plan for limits: the step (q_indptr and kv_lens NULL, B and T the limits'), else NULL */
    mlav_naive_step step;
    float scale;
    /* FP8 caches only: the scale, read by the kernel from kv_scale_ptr ([1] device) when that is
     * not NULL, else kv_scale (the host value, already checked) */
    const float *kv_scale_ptr;
    float kv_scale;
    mlav_shard shard;             /* the KV shard: kv_lens are global, a request's rows here are
                                     the rank's (src/common/shard.h) */
};

constexpr int kWarps = MLAV_NAIVE_THREADS / 32;
constexpr int kKeysPerWarp = 4;   /* pass 1: keys a warp scores together (loads in flight) */
constexpr int kKeysPerThread = 4; /* pass 2: keys a thread accumulates together */

/* KV elements per vector load: 16 bytes of a 32- or 16-bit cache, 8 bytes of an FP8 one (the 8
 * elements of a 16-bit load: the same registers per key in flight, and rows of any multiple of
 * 8 bytes take it). */
constexpr int chunk_elems(size_t kv_esz)
{
    return kv_esz == 1 ? 8 : (int)(16 / kv_esz);
}

/* What a launch needs to agree on with the plan: the load width, the pass-2 groups and the
 * dynamic shared memory. */
struct naive_config {
    bool vec;          /* vector loads: every row segment (Dl, Dr) a multiple of chunk_elems */
    int32_t groups;
    size_t smem_floats;
};

naive_config make_config(const mlav_problem_info *p)
{
    /* only the KV rows are loaded in chunks: q is widened into shared memory element by element
     * and out stored so */
    const int32_t per = chunk_elems(mlav_dtype_size(p->kv_dtype));
    naive_config c;
    c.vec = p->Dl % per == 0 && p->Dr % per == 0;
    const int32_t chunks = p->Dl / (c.vec ? per : 1);
    c.groups = chunks >= MLAV_NAIVE_THREADS ? 1 : MLAV_NAIVE_THREADS / chunks;
    const size_t row = (size_t)p->W + (size_t)p->max_kv_len;
    const size_t partials = c.groups > 1 ? (size_t)c.groups * (size_t)p->Dl : 0;
    c.smem_floats = row > partials ? row : partials;
    return c;
}

using mlav::from_float;
using mlav::to_float;

/* An e4m3 element as the float it stores (exact), unscaled: the kernel folds the scale in. */
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 x)
{
    return mlav_e4m3_to_f32(x.__x);
}

/* Load one chunk (E consecutive elements, E x size aligned when E > 1) as floats. */
template <typename T> __device__ __forceinline__ void load_chunk(const T *p, float (&x)[1])
{
    x[0] = to_float(*p);
}
__device__ __forceinline__ void load_chunk(const float *p, float (&x)[4])
{
    const float4 v = __ldg(reinterpret_cast<const float4 *>(p));
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void load_chunk(const __nv_bfloat16 *p, float (&x)[8])
{
    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) { /* bf16 is the high half of a float: exact by shifting */
        x[2 * k] = __uint_as_float(w[k] << 16);
        x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
__device__ __forceinline__ void load_chunk(const __half *p, float (&x)[8])
{
    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        x[2 * k] = __half2float(__ushort_as_half((unsigned short)(w[k] & 0xffffu)));
        x[2 * k + 1] = __half2float(__ushort_as_half((unsigned short)(w[k] >> 16)));
    }
}

__device__ __forceinline__ void load_chunk(const __nv_fp8_e4m3 *p, float (&x)[8])
{
    const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
    const uint32_t w[2] = {v.x, v.y};
#pragma unroll
    for (int k = 0; k < 4; k++) { /* two bytes at a time: one cvt.f16x2.e4m3x2 on sm_89+, exact */
        const float2 f = __half22float2(
            __half2(mlav::e4m3x2_to_half2((uint16_t)(w[k >> 1] >> (16 * (k & 1))))));
        x[2 * k] = f.x, x[2 * k + 1] = f.y; /* .x is the lower byte: the earlier element */
    }
}

/* E floats of the shared-memory query row (16-byte aligned when E > 1). */
template <int E> __device__ __forceinline__ void load_q(const float *q, float (&x)[E])
{
    if constexpr (E == 1) {
        x[0] = q[0];
    } else {
#pragma unroll
        for (int k = 0; k < E; k += 4) {
            const float4 v = *reinterpret_cast<const float4 *>(q + k);
            x[k] = v.x, x[k + 1] = v.y, x[k + 2] = v.z, x[k + 3] = v.w;
        }
    }
}

struct op_max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct op_add {
    __device__ float operator()(float a, float b) const { return a + b; }
};

/* Block-wide reduction; every thread gets the result. Ends with a barrier so `red` can be
 * reused at once. */
template <class Op> __device__ float block_reduce(float v, float *red, Op op)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < kWarps; w++)
        r = op(r, red[w]);
    __syncthreads();
    return r;
}

/* A plan for limits' step for the block of token `tok`: false where the block runs nothing (a
 * workspace another plan or no update wrote, a refused q_indptr, a token past the step's);
 * else the step's batch and lengths (the region's). The grid is the limits': tok < max_tokens. */
__device__ bool step_lengths(const mlav_naive_step &st, int32_t tok, int32_t *B,
                             const int32_t **q_indptr, const int32_t **kv_lens)
{
    const mlav_step_header *h = static_cast<const mlav_step_header *>(st.region);
    const mlav_limits hl = h->limits;
    if (h->owner != st.owner || hl.max_batch != st.lim.max_batch ||
        hl.max_tokens != st.lim.max_tokens || hl.max_q_len != st.lim.max_q_len ||
        hl.max_kv_len != st.lim.max_kv_len)
        return false;
    const int32_t batch = h->batch, bad = h->bad;
    if (batch < 0 || batch > st.lim.max_batch || (bad >= batch && bad != INT32_MAX))
        return false;
    *B = batch;
    *q_indptr = mlav_step_region_q_indptr(st.region);
    *kv_lens = mlav_step_region_kv_lens(st.region, &st.lim);
    return batch > 0 && tok < (*q_indptr)[batch];
}

/* T: q and out (float, bf16, half); KV: the cache's element (T, or __nv_fp8_e4m3). */
template <typename T, typename KV, bool VEC>
__global__ void __launch_bounds__(MLAV_NAIVE_THREADS) naive_verify_kernel(naive_args a)
{
    constexpr bool kFp8 = sizeof(KV) == 1;
    constexpr int E = VEC ? chunk_elems(sizeof(KV)) : 1; /* elements per chunk (one load) */
    extern __shared__ __align__(16) float smem[];
    float *q_s = smem;     /* [W] the query row, fp32 */
    float *s = smem + a.W; /* [kv_len] scores, then softmax weights */
    __shared__ float red[kWarps];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t row = blockIdx.x; /* token * H + head */
    const int32_t tok = (int32_t)(row / a.H);

    const int32_t *q_indptr = a.q_indptr, *kv_lens = a.kv_lens;
    int32_t B = a.B;
    if (a.step.region && !step_lengths(a.step, tok, &B, &q_indptr, &kv_lens))
        return;

    /* The request of this token: the last b with q_indptr[b] <= tok (empty requests share
     * their q_indptr with the next one, and the search skips them). */
    int32_t lo = 0, hi = B;
    while (hi - lo > 1) {
        const int32_t mid = (lo + hi) >> 1;
        if (q_indptr[mid] <= tok)
            lo = mid;
        else
            hi = mid;
    }
    const int32_t b = lo;
    const int64_t q_len64 = (int64_t)q_indptr[b + 1] - q_indptr[b];
    const int64_t i64 = (int64_t)tok - q_indptr[b];
    const int32_t kv_len_global = kv_lens[b];
    /* a step's request is run only if its lengths keep the limits (the update's verdict, taken
     * again here: whatever the region holds, nothing past the limits is read or written) */
    if (a.step.region && !(i64 >= 0 && i64 < q_len64 &&
                           mlav_step_request_ok(q_len64, kv_len_global, a.step.lim.max_q_len,
                                                a.step.lim.max_kv_len)))
        return;
    const int32_t q_len = (int32_t)q_len64, i = (int32_t)i64;
    /* the rank's rows of the request (every row without a KV shard); visibility at their
     * global rows against the global prefix */
    const int32_t prefix = kv_len_global - q_len;
    const int32_t kv_len = (int32_t)mlav_shard_rows(a.shard, kv_len_global);
    const int32_t *pt_row = mlav_page_row_dev(a.page_table, a.page_table_rows,
                                              a.page_table_num_rows, a.max_pages, a.bad_pages, b);
    const KV *kv = static_cast<const KV *>(a.kv);

    /* An FP8 cache's values are e4m3 x kv_scale, so the scale is folded in where it costs one
     * multiply per key (the score: kv_scale x q.e4m3, then the softmax scale, as a 16-bit
     * cache's dot is scaled) and one per output element (the weighted sum of e4m3 rows), not one
     * per element loaded. A device scale cannot be checked on the host without a
     * synchronization: one that is not finite and > 0 becomes NaN here, which makes the score of
     * every key the row sees NaN, so every row that sees a key is NaN (mlaverify.h), and a row
     * that sees none is still empty. 1 (an exact no-op) for other caches. */
    float kv_scale = 1.0f;
    if constexpr (kFp8)
        kv_scale = mlav::kv_scale_read(a.kv_scale_ptr, a.kv_scale);

    const T *q = static_cast<const T *>(a.q) + row * a.W;
    for (int32_t d = tid; d < a.W; d += MLAV_NAIVE_THREADS)
        q_s[d] = to_float(q[d]);
    __syncthreads();
    /* The score is dot x f1 x f2 and the output sum x out_scale x out_pow. An FP8 cache: q
     * times 2^-sh where its largest finite |q| passes 2^100 (a dot with e4m3 values, |x| <= 448,
     * then stays finite where the score is: q near 2^126 over kv_scale 2^-126), and the factor
     * 2^sh x kv_scale x scale split in halves, so that no product overflows or underflows where
     * the score does not; kv_scale's power of two on the output on its own, so that 1 / sum x
     * kv_scale never rounds as a subnormal. A NaN scale stays NaN through both. */
    float f1 = kv_scale, f2 = a.scale, kv_mant = kv_scale, kv_pow = 1.0f;
    if constexpr (kFp8) {
        float mq = 0.0f;
        for (int32_t d = tid; d < a.W; d += MLAV_NAIVE_THREADS)
            mq = fabsf(q_s[d]) <= 3.402823466e38f ? fmaxf(mq, fabsf(q_s[d])) : mq;
        mq = block_reduce(mq, red, op_max());
        int eq;
        frexpf(mq, &eq);
        const int sh = eq > 100 ? eq - 100 : 0;
        if (sh > 0) {
            const float down = ldexpf(1.0f, -sh);
            for (int32_t d = tid; d < a.W; d += MLAV_NAIVE_THREADS)
                q_s[d] *= down;
            __syncthreads();
        }
        int e;
        const float mk = frexpf(kv_scale, &e);
        const int E = sh + e, h = E / 2;
        f1 = ldexpf(1.0f, E - h);
        f2 = ldexpf(a.scale * mk, h);
        const mlav::out_scale os = mlav::out_scale_of(kv_scale);
        kv_mant = os.mant;
        kv_pow = os.pw;
    }

    /* Pass 1: a warp scores kKeysPerWarp keys at once, lanes across the row's chunks. Invisible
     * keys are never read; a visible key on a page id outside the pool scores NaN unread. */
    const int32_t n_chunks = a.W / E;
    for (int32_t j0 = warp * kKeysPerWarp; j0 < kv_len; j0 += kWarps * kKeysPerWarp) {
        const KV *krow[kKeysPerWarp];
        float unread[kKeysPerWarp]; /* the score of a key not read: -inf, or NaN (bad page) */
        float acc[kKeysPerWarp];
#pragma unroll
        for (int u = 0; u < kKeysPerWarp; u++) {
            const int32_t j = j0 + u;
            krow[u] = nullptr;
            unread[u] = -INFINITY;
            acc[u] = 0.0f;
            if (j < kv_len && mlav_kv_visible(a.tree_mask, a.mask_words, tok, i, prefix,
                                              mlav_shard_global(a.shard, j))) {
                const int32_t page = pt_row[j / a.page_size];
                if (page < 0 || page >= a.num_pages)
                    unread[u] = NAN;
                else
                    krow[u] = kv + ((int64_t)page * a.page_size + j % a.page_size) * a.W;
            }
        }
        for (int32_t c = lane; c < n_chunks; c += 32) {
            float qv[E], kx[kKeysPerWarp][E];
            load_q<E>(q_s + (size_t)c * E, qv);
#pragma unroll
            for (int u = 0; u < kKeysPerWarp; u++) {
                if (krow[u]) {
                    load_chunk(krow[u] + (size_t)c * E, kx[u]);
                } else {
#pragma unroll
                    for (int e = 0; e < E; e++)
                        kx[u][e] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < kKeysPerWarp; u++)
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[u] = fmaf(qv[e], kx[u][e], acc[u]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int u = 0; u < kKeysPerWarp; u++)
                acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], o);
        if (lane == 0) {
#pragma unroll
            for (int u = 0; u < kKeysPerWarp; u++)
                if (j0 + u < kv_len)
                    s[j0 + u] = krow[u] ? acc[u] * f1 * f2 : unread[u];
        }
    }
    __syncthreads();

    float m = -INFINITY;
    int nan = 0;
    for (int32_t j = tid; j < kv_len; j += MLAV_NAIVE_THREADS) {
        const float v = s[j];
        nan |= v != v;
        m = fmaxf(m, v);
    }
    nan = __syncthreads_or(nan);
    m = block_reduce(m, red, op_max());

    T *out = static_cast<T *>(a.out) + row * a.Dl;
    if (nan || m == INFINITY) { /* NaN (or an infinite score) touched the row: the row is NaN */
        for (int32_t d = tid; d < a.Dl; d += MLAV_NAIVE_THREADS)
            out[d] = from_float<T>(NAN);
        if (tid == 0 && a.lse)
            a.lse[row] = NAN;
        return;
    }
    if (m == -INFINITY) { /* no visible key */
        for (int32_t d = tid; d < a.Dl; d += MLAV_NAIVE_THREADS)
            out[d] = from_float<T>(0.0f);
        if (tid == 0 && a.lse)
            a.lse[row] = -INFINITY;
        return;
    }

    float sum = 0.0f;
    for (int32_t j = tid; j < kv_len; j += MLAV_NAIVE_THREADS) {
        const float v = s[j];
        const float w = v == -INFINITY ? 0.0f : expf(v - m);
        s[j] = w;
        sum += w;
    }
    sum = block_reduce(sum, red, op_add()); /* its barriers also publish s[] */
    const float out_scale = 1.0f / sum * kv_mant; /* the normalisation, and the FP8 scale's
                                                      mantissa (its power: kv_pow) */

    /* Pass 2: `groups` groups of threads; in a group each thread owns one chunk of the latent
     * columns (coalesced across the group), and group g takes keys g, g + groups, ... Zero
     * weights are invisible keys (never read) or ones that underflowed (they add exactly 0). */
    const int32_t n_dch = a.Dl / E, G = a.groups;
    auto accumulate = [&](int32_t c, int32_t g, float (&acc)[E]) {
        for (int32_t j0 = g; j0 < kv_len; j0 += G * kKeysPerThread) {
            float w[kKeysPerThread], vx[kKeysPerThread][E];
#pragma unroll
            for (int u = 0; u < kKeysPerThread; u++) {
                const int32_t j = j0 + u * G;
                w[u] = j < kv_len ? s[j] : 0.0f;
                if (w[u] != 0.0f) {
                    const int32_t page = pt_row[j / a.page_size];
                    load_chunk(kv + ((int64_t)page * a.page_size + j % a.page_size) * a.W +
                                   (size_t)c * E,
                               vx[u]);
                } else {
#pragma unroll
                    for (int e = 0; e < E; e++)
                        vx[u][e] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < kKeysPerThread; u++)
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[e] = fmaf(w[u], vx[u][e], acc[e]);
        }
    };
    if (G == 1) {
        for (int32_t c = tid; c < n_dch; c += MLAV_NAIVE_THREADS) {
            float acc[E];
#pragma unroll
            for (int e = 0; e < E; e++)
                acc[e] = 0.0f;
            accumulate(c, 0, acc);
#pragma unroll
            for (int e = 0; e < E; e++)
                out[(size_t)c * E + e] = from_float<T>(acc[e] * out_scale * kv_pow);
        }
    } else {
        const int32_t g = tid / n_dch, c = tid % n_dch;
        float acc[E];
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[e] = 0.0f;
        if (g < G)
            accumulate(c, g, acc);
        __syncthreads(); /* s[] is dead from here: the partial sums reuse shared memory */
        float *part = smem; /* [G, Dl]: the plan sized shared memory for it */
        if (g < G) {
#pragma unroll
            for (int e = 0; e < E; e++)
                part[(size_t)g * a.Dl + (size_t)c * E + e] = acc[e];
        }
        __syncthreads();
        for (int32_t d = tid; d < a.Dl; d += MLAV_NAIVE_THREADS) {
            float v = 0.0f;
            for (int32_t k = 0; k < G; k++)
                v += part[(size_t)k * a.Dl + d];
            out[d] = from_float<T>(v * out_scale * kv_pow);
        }
    }
    if (tid == 0 && a.lse)
        a.lse[row] = m + logf(sum);
}

/* A plan for limits' update: the step's lengths into the region (its lengths form), and the
 * header after every thread's verdicts. A request is refused by the rule the flash backend's
 * scheduler applies (mlav_step_request_ok); q_indptr as a whole where it does not start at 0,
 * decreases, or ends past max_tokens. A padding request's kv_len is kept as 0, as dispatch keeps
 * it in a host workspace's region. */
constexpr int kStepThreads = 256;

__global__ void __launch_bounds__(kStepThreads)
    naive_step_kernel(const int32_t *qi, const int32_t *kvl, int32_t batch, mlav_naive_step st)
{
    __shared__ int flag_s, bad_s;
    const int tid = threadIdx.x;
    if (tid == 0) {
        flag_s = 0;
        bad_s = INT32_MAX;
    }
    __syncthreads();
    int32_t *q = mlav_step_region_q_indptr(st.region);
    int32_t *kv = mlav_step_region_kv_lens(st.region, &st.lim);
    int flag = 0, bad = INT32_MAX;
    for (int32_t b = tid; b < batch; b += kStepThreads) {
        const int32_t q0 = qi[b], q1 = qi[b + 1], k = kvl[b];
        const int64_t n = (int64_t)q1 - q0;
        flag |= n < 0 || (b == 0 && q0 != 0) || (b == batch - 1 && q1 > st.lim.max_tokens);
        if (n >= 0 && n <= INT32_MAX &&
            !mlav_step_request_ok(n, k, st.lim.max_q_len, st.lim.max_kv_len) && b < bad)
            bad = b;
        q[b] = q0;
        kv[b] = n > 0 ? k : 0;
        if (b == batch - 1)
            q[batch] = q1;
    }
    if (batch == 0 && tid == 0)
        q[0] = 0;
    if (flag)
        atomicOr(&flag_s, 1);
    if (bad != INT32_MAX)
        atomicMin(&bad_s, bad);
    __syncthreads();
    if (tid == 0) {
        mlav_step_header h;
        memset(&h, 0, sizeof h);
        h.bad = flag_s ? batch : bad_s;
        h.batch = batch;
        h.owner = st.owner;
        h.limits = st.lim;
        *static_cast<mlav_step_header *>(st.region) = h;
    }
}

template <typename T, typename KV> const void *kernel_for(bool vec)
{
    return vec ? reinterpret_cast<const void *>(&naive_verify_kernel<T, KV, true>)
               : reinterpret_cast<const void *>(&naive_verify_kernel<T, KV, false>);
}

/* The instances of q dtype T: the cache is T itself or FP8 (validation allows no other mix). */
template <typename T> const void *kernel_for_q(const mlav_problem_info *p, bool vec)
{
    return p->kv_dtype == MLAV_DTYPE_FP8_E4M3 ? kernel_for<T, __nv_fp8_e4m3>(vec)
                                              : kernel_for<T, T>(vec);
}

} // namespace

/* The one selector of the plan's shared-memory check and of the launch, so they cannot disagree.
 * q is F32, BF16 or F16 (validation refuses an FP8 q). */
const void *mlav_naive_kernel(const mlav_problem_info *p)
{
    const bool vec = make_config(p).vec;
    if (p->dtype == MLAV_DTYPE_F32)
        return kernel_for_q<float>(p, vec);
    if (p->dtype == MLAV_DTYPE_BF16)
        return kernel_for_q<__nv_bfloat16>(p, vec);
    if (p->dtype == MLAV_DTYPE_F16)
        return kernel_for_q<__half>(p, vec);
    return nullptr;
}

const char *mlav_naive_kernel_name(const mlav_problem_info *p)
{
    static const char *const names[3][2][2] = { /* [q dtype][FP8 cache][vector loads] */
        {{"naive_verify<f32,scalar>", "naive_verify<f32,16B>"},
         {"naive_verify<f32,kv=e4m3,scalar>", "naive_verify<f32,kv=e4m3,8B>"}},
        {{"naive_verify<bf16,scalar>", "naive_verify<bf16,16B>"},
         {"naive_verify<bf16,kv=e4m3,scalar>", "naive_verify<bf16,kv=e4m3,8B>"}},
        {{"naive_verify<f16,scalar>", "naive_verify<f16,16B>"},
         {"naive_verify<f16,kv=e4m3,scalar>", "naive_verify<f16,kv=e4m3,8B>"}},
    };
    const int d = (int)p->dtype;
    if (d < 0 || d > 2)
        return "naive_verify<?>";
    return names[d][p->kv_dtype == MLAV_DTYPE_FP8_E4M3][make_config(p).vec];
}

size_t mlav_naive_smem_bytes(const mlav_problem_info *p)
{
    return make_config(p).smem_floats * sizeof(float);
}

mlav_status mlav_naive_launch(const mlav_problem_info *p, const int32_t *q_indptr,
                              const int32_t *kv_lens, const int32_t *bad_pages,
                              const mlav_naive_step *step, const mlav_tensors *t,
                              size_t smem_bytes, cudaStream_t stream)
{
    const naive_config cfg = make_config(p);
    naive_args a;
    a.q = t->q;
    a.kv = t->kv_cache;
    a.page_table = t->page_table;
    a.page_table_rows = t->page_table_rows;
    a.page_table_num_rows = t->page_table_num_rows;
    a.bad_pages = bad_pages;
    a.tree_mask = t->tree_mask;
    a.out = t->out;
    a.lse = t->lse;
    a.q_indptr = q_indptr;
    a.kv_lens = kv_lens;
    a.num_pages = t->num_pages;
    a.H = p->H;
    a.Dl = p->Dl;
    a.W = p->W;
    a.page_size = p->page_size;
    a.B = p->B;
    a.max_pages = p->max_pages;
    a.mask_words = p->mask_words;
    a.groups = cfg.groups;
    if (step) {
        a.step = *step;
    } else {
        memset(&a.step, 0, sizeof a.step);
    }
    a.scale = p->scale;
    a.shard = p->shard;
    /* An FP8 scale: a device tensor the kernel reads (a captured graph follows its value), or
     * the host value, checked here (offload mode resolved a host kv_scale_ptr into it) */
    a.kv_scale_ptr = nullptr;
    a.kv_scale = 1.0f;
    if (p->kv_dtype == MLAV_DTYPE_FP8_E4M3) {
        a.kv_scale_ptr = t->kv_scale_ptr;
        if (!a.kv_scale_ptr) {
            const mlav_status s = mlav_kv_scale_host(p, t, &a.kv_scale);
            if (s != MLAV_OK)
                return s;
        }
    }

    const int64_t rows = (int64_t)p->T * p->H;
    if (rows == 0)
        return MLAV_OK;
    if (rows > INT_MAX)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "T * H = %lld query rows exceed the naive kernel's grid (one block "
                              "per row)",
                              (long long)rows);
    const void *kernel = mlav_naive_kernel(p);
    if (!kernel)
        return mlav_set_error(MLAV_ERR_INTERNAL, "cuda-naive has no kernel for dtype %d",
                              (int)p->dtype);
    const dim3 grid((unsigned)rows), block(MLAV_NAIVE_THREADS);
    void *args[] = {&a};
    /* A stale error of some earlier call must not be blamed on this launch. */
    (void)cudaGetLastError();
    MLAV_CUDA_TRY(cudaLaunchKernel(kernel, grid, block, args, smem_bytes, stream));
    return MLAV_OK;
}

mlav_status mlav_naive_step_write(const int32_t *q_indptr, const int32_t *kv_lens, int32_t batch,
                                  const mlav_naive_step *step, cudaStream_t stream)
{
    (void)cudaGetLastError();
    naive_step_kernel<<<1, kStepThreads, 0, stream>>>(q_indptr, kv_lens, batch, *step);
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
