/* The flash verify kernel: one block per (request, 32-row tile of folded token x head rows, KV
 * split), tensor cores through mma.sync, KV tiles gathered through the page table by cp.async
 * into a 3-stage pipeline, online softmax, and a partial state per split for combine.cu.
 *
 * Block layout (4 warps). Warp w = mi + 2*ni: row group mi (16 rows), half ni.
 *   S = Q K^T  : warp (mi, ni) sums depth [288 ni, 288 ni + 288) for its 16 rows x 16 keys; the
 *                two halves swap partial sums through shared memory, so each holds the full S.
 *   O += P V   : warp (mi, ni) owns output columns [256 ni, 256 ni + 256): 128 fp32 registers.
 * Shared memory (sm_120 fits it: 97,536 of 101,376 bytes): Q 32 x 576, three KV tiles of
 * 16 x 576 (rows padded to 584 elements = 73 16-byte chunks, so the 8 row addresses of every
 * ldmatrix fall in distinct bank groups), and 4 KB for the S exchange. */
#include <math.h>

#include "../common/merge.h"
#include "flash.h"
#include "mma.cuh"

namespace {

constexpr int DL = MLAV_FLASH_DL, W = MLAV_FLASH_W;
constexpr int BM = MLAV_FLASH_BLOCK_M, BN = MLAV_FLASH_BLOCK_N, NT = MLAV_FLASH_THREADS;
constexpr int RS = W + 8;          /* padded row stride in elements */
constexpr int STAGES = 3;
constexpr int CHUNKS = W / 8;      /* 16-byte chunks per row */
constexpr int DEPTH_HALF = W / 2;  /* 288: each half-warp-pair's share of the QK^T depth */
constexpr int COLS_HALF = DL / 2;  /* 256: each half's share of the output columns */
constexpr int SQ_ELEMS = BM * RS;
constexpr int SKV_ELEMS = BN * RS;
constexpr int SX_FLOATS = 4 * 32 * 8;
constexpr size_t SMEM_BYTES = (size_t)(SQ_ELEMS + STAGES * SKV_ELEMS) * 2 + SX_FLOATS * 4;
static_assert(SMEM_BYTES <= MLAV_SM120_SMEM_LIMIT, "flash kernel must fit sm_120");
static_assert(DEPTH_HALF % 16 == 0 && COLS_HALF % 16 == 0, "MMA tiling");

constexpr float LN2 = 0.6931471805599453f;

/* The gather gives each KV row of a tile to 8 threads (128 threads / 16 rows): a thread looks
 * up one page id per tile and issues 9 cp.async at fixed offsets, with 8 neighbours covering
 * 128 contiguous bytes per step. (Spreading chunks round-robin cost 9 lookups and 9 address
 * computations per thread per tile: a third of the kernel's instructions.) */
constexpr int GATHER_TPR = NT / BN;              /* threads per KV row: 8 */
constexpr int GATHER_STEPS = CHUNKS / GATHER_TPR; /* 16-byte chunks per thread: 9 */
static_assert(NT % BN == 0 && CHUNKS % GATHER_TPR == 0, "gather mapping");

/* KV row j's page and slot: a shift for power-of-two page sizes, a division otherwise. */
__device__ __forceinline__ int page_of(int j, const mlav_flash_params &p)
{
    return p.page_shift >= 0 ? j >> p.page_shift : j / p.page_size;
}
__device__ __forceinline__ int slot_of(int j, const mlav_flash_params &p)
{
    return p.page_shift >= 0 ? j & (p.page_size - 1) : j % p.page_size;
}

/* The page id of KV row j (0 past kv_end, where nothing is read). Issued two tiles before the
 * gather that uses it: the gather depends on this global load, and one tile of compute is
 * shorter than a DRAM round trip. */
__device__ __forceinline__ int32_t lookup_page(const int32_t *ptab, int j, int kv_end,
                                               const mlav_flash_params &p)
{
    return j < kv_end ? ptab[page_of(j, p)] : 0;
}

/* Gather this thread's share of KV row j into row `row` of a stage buffer. Rows past kv_end are
 * zero-filled without reading (their scores are masked to -inf, and 0 * 0 keeps P V clean);
 * a page id outside the pool reads as NaN, never out of bounds. */
template <typename T>
__device__ __forceinline__ void gather_kv_row(T *dst, const T *kv, int32_t page, int j,
                                              int kv_end, const mlav_flash_params &p, int row,
                                              int part)
{
    T *d = dst + row * RS + part * 8;
    if (j >= kv_end) {
#pragma unroll
        for (int k = 0; k < GATHER_STEPS; k++)
            mlav::cp_async16(d + k * GATHER_TPR * 8, kv, 0);
    } else if (page < 0 || page >= p.num_pages) {
        uint4 nan4;
        nan4.x = nan4.y = nan4.z = nan4.w = (uint32_t)mlav::mma_type<T>::nan_bits * 0x10001u;
#pragma unroll
        for (int k = 0; k < GATHER_STEPS; k++)
            *reinterpret_cast<uint4 *>(d + k * GATHER_TPR * 8) = nan4;
    } else {
        const T *src = kv + ((size_t)page * p.page_size + (size_t)slot_of(j, p)) * W + part * 8;
#pragma unroll
        for (int k = 0; k < GATHER_STEPS; k++)
            mlav::cp_async16(d + k * GATHER_TPR * 8, src + k * GATHER_TPR * 8, 16);
    }
}

/* Zero the Inf and NaN values among this thread's value columns (c_kv, the first Dl) of row
 * `row` of a stage buffer, after S has used them. Exact, because c_kv is also the key: a
 * non-finite c_kv element makes that key's score NaN or +-inf for every row, so a row that sees
 * the key comes out NaN (or gives it weight 0 at -inf) through the softmax, and a row that does
 * not has it masked; no row needs the value itself. Without this, P = 0 times NaN on the tensor
 * cores would carry a hidden draft row's NaN into rows that do not see it. */
template <typename T>
__device__ __forceinline__ void zero_nonfinite_values(T *tile, int row, int part)
{
    const uint32_t m = mlav::mma_type<T>::exp_mask;
#pragma unroll
    for (int k = 0; k < GATHER_STEPS; k++) {
        const int col = (part + k * GATHER_TPR) * 8;
        if (col >= DL)
            continue;
        uint4 *chunk = reinterpret_cast<uint4 *>(tile + row * RS + col);
        uint4 v = *chunk;
        uint32_t *w = reinterpret_cast<uint32_t *>(&v);
        bool changed = false;
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const uint32_t lo = (w[h] & m) == m ? 0xffff0000u : 0xffffffffu;
            const uint32_t hi = ((w[h] >> 16) & m) == m ? 0x0000ffffu : 0xffffffffu;
            changed |= (lo & hi) != 0xffffffffu;
            w[h] &= lo & hi;
        }
        if (changed)
            *chunk = v;
    }
}

template <typename T>
__global__ void __launch_bounds__(NT, 2) flash_verify_kernel(const mlav_flash_params p)
{
    using MT = mlav::mma_type<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    T *sQ = reinterpret_cast<T *>(smem);
    T *sKV = sQ + SQ_ELEMS;
    float *sX = reinterpret_cast<float *>(sKV + STAGES * SKV_ELEMS);

    const mlav_split_item item = p.items[blockIdx.x];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mi = warp & 1, ni = warp >> 1;
    const int g = lane >> 2, qd = lane & 3; /* MMA fragment row and column pair */
    const int b = item.b;
    const int q_start = item.q_start, prefix = item.prefix;
    const int M = item.q_len * p.H;       /* folded rows of this request */
    const int m0 = item.mtile * BM;
    const int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const int n_tiles = (kv_end - kv_begin + BN - 1) / BN;
    const T *kv = static_cast<const T *>(p.kv);
    const int32_t *ptab = p.page_table + (size_t)b * p.max_pages;

    /* Q rows of a request are contiguous: (token, head) folds to row q_start * H + m. */
    const T *q = static_cast<const T *>(p.q) + ((size_t)q_start * p.H + m0) * W;
    for (int c = tid; c < BM * CHUNKS; c += NT) {
        int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        bool ok = m0 + r < M;
        mlav::cp_async16(sQ + r * RS + col, ok ? q + (size_t)r * W + col : q, ok ? 16 : 0);
    }
    /* Q joins tile 0's group; STAGES-1 tiles in flight before the first compute. The prologue's
     * page-id lookups are issued together, and the loop keeps them two tiles ahead. */
    const int g_row = tid / GATHER_TPR, g_part = tid % GATHER_TPR;
    int32_t pg_first[STAGES - 1];
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++)
        pg_first[s] = lookup_page(ptab, kv_begin + s * BN + g_row, kv_end, p);
    int32_t pg_next = lookup_page(ptab, kv_begin + (STAGES - 1) * BN + g_row, kv_end, p);
    int32_t pg_after = lookup_page(ptab, kv_begin + STAGES * BN + g_row, kv_end, p);
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        gather_kv_row(sKV + s * SKV_ELEMS, kv, pg_first[s], kv_begin + s * BN + g_row, kv_end, p,
                      g_row, g_part);
        mlav::cp_async_commit();
    }

    /* The two rows this thread holds in every fragment: g and g + 8 of the warp's 16. */
    int row_m[2], row_i[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        row_m[rr] = m0 + mi * 16 + g + rr * 8;
        row_i[rr] = row_m[rr] < M ? row_m[rr] / p.H : -1; /* draft node index, -1: padding */
    }

    float o[COLS_HALF / 8][4];
#pragma unroll
    for (int n = 0; n < COLS_HALF / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float run_max[2] = {-INFINITY, -INFINITY}; /* log2 domain: score * scale * log2(e) */
    float run_sum[2] = {0.0f, 0.0f};           /* this thread's columns only; quad-summed at end */

    for (int t = 0; t < n_tiles; t++) {
        mlav::cp_async_wait<STAGES - 2>();
        __syncthreads(); /* tile t visible to all; buffer (t-1) % STAGES free for reuse */
        if (t + STAGES - 1 < n_tiles) {
            const int j_row = kv_begin + (t + STAGES - 1) * BN + g_row;
            gather_kv_row(sKV + ((t + STAGES - 1) % STAGES) * SKV_ELEMS, kv, pg_next, j_row,
                          kv_end, p, g_row, g_part);
            pg_next = pg_after;
            pg_after = lookup_page(ptab, j_row + 2 * BN, kv_end, p);
        }
        mlav::cp_async_commit();
        const T *sK = sKV + (t % STAGES) * SKV_ELEMS;

        /* partial S over this warp's depth half, in two interleaved accumulator sets (even and
         * odd k-steps): two dependent chains of 9 MMAs per n-tile instead of one of 18, for a
         * scheduler that has only two warps to switch between (bench/NOTES.md: no measurable
         * gain yet, while the gather dominated) */
        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        float s_odd[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int kk = 0; kk < DEPTH_HALF / 16; kk++) {
            const int k0 = ni * DEPTH_HALF + kk * 16;
            uint32_t a[4], bk[4];
            mlav::ldsm_x4(a, sQ + (mi * 16 + (lane & 15)) * RS + k0 + (lane >> 4) * 8);
            mlav::ldsm_x4(bk, sK + ((lane & 7) + ((lane >> 4) << 3)) * RS + k0 +
                                  ((lane >> 3) & 1) * 8);
            float(*acc)[4] = (kk & 1) ? s_odd : s;
            MT::mma(acc[0], a, bk[0], bk[1]);
            MT::mma(acc[1], a, bk[2], bk[3]);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[0][e] += s_odd[0][e];
            s[1][e] += s_odd[1][e];
        }
        /* swap partial sums with the other half (warp ^ 2); a + b == b + a, so both halves
         * hold bit-identical S and make identical softmax decisions */
        float *mine = sX + (warp * 32 + lane) * 8;
        *reinterpret_cast<float4 *>(mine) = make_float4(s[0][0], s[0][1], s[0][2], s[0][3]);
        *reinterpret_cast<float4 *>(mine + 4) = make_float4(s[1][0], s[1][1], s[1][2], s[1][3]);
        mlav::named_barrier(1 + mi, 64);
        const float *other = sX + ((warp ^ 2) * 32 + lane) * 8;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[0][e] += other[e];
            s[1][e] += other[4 + e];
        }

        /* scale, mask (split end, tree), tile row max */
        const int j_base = kv_begin + t * BN;
        float tile_max[2] = {-INFINITY, -INFINITY};
        const bool prefix_only = j_base + BN <= prefix && j_base + BN <= kv_end;
        if (prefix_only) {
            /* a tile of prefix rows only: every key visible to every row (padding rows hold
             * Q = 0 and are never written, so they need no mask either) */
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[n][e] *= p.scale_log2;
                    tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[n][e]);
                }
        } else {
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int rr = e >> 1, j = j_base + n * 8 + qd * 2 + (e & 1);
                    bool vis = j < kv_end && row_i[rr] >= 0;
                    if (vis && j >= prefix) {
                        const int k = j - prefix, i = row_i[rr];
                        if (p.tree_mask)
                            vis = (p.tree_mask[(size_t)(q_start + i) * p.mask_words + (k >> 5)] >>
                                   (k & 31)) & 1u;
                        else
                            vis = k <= i;
                    }
                    s[n][e] = vis ? s[n][e] * p.scale_log2 : -INFINITY;
                    tile_max[rr] = fmaxf(tile_max[rr], s[n][e]);
                }
        }

        /* online softmax: the rule of mlav_rescale_factor (merge.h), in log2 units */
        float alpha[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            tile_max[rr] = fmaxf(tile_max[rr], __shfl_xor_sync(0xffffffffu, tile_max[rr], 1));
            tile_max[rr] = fmaxf(tile_max[rr], __shfl_xor_sync(0xffffffffu, tile_max[rr], 2));
            const float new_max = fmaxf(run_max[rr], tile_max[rr]);
            alpha[rr] = run_max[rr] == -INFINITY ? 0.0f : exp2f(run_max[rr] - new_max);
            run_max[rr] = new_max;
            const float safe = new_max == -INFINITY ? 0.0f : new_max; /* no -inf - -inf */
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < 2; n++) {
                s[n][2 * rr] = exp2f(s[n][2 * rr] - safe);
                s[n][2 * rr + 1] = exp2f(s[n][2 * rr + 1] - safe);
                sum += s[n][2 * rr] + s[n][2 * rr + 1];
            }
            run_sum[rr] = run_sum[rr] * alpha[rr] + sum;
        }
        /* once the running max settles, alpha is 1 for every row: skip 128 multiplies */
        if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
            for (int n = 0; n < COLS_HALF / 8; n++) {
                o[n][0] *= alpha[0];
                o[n][1] *= alpha[0];
                o[n][2] *= alpha[1];
                o[n][3] *= alpha[1];
            }
        }

        if (!prefix_only) {
            /* a tile with draft rows or rows past the split end: after every warp has used the
             * tile for S, drop non-finite values (zero_nonfinite_values says why it is exact) */
            __syncthreads();
            if (j_base + g_row < kv_end)
                zero_nonfinite_values(const_cast<T *>(sK), g_row, g_part);
            __syncthreads();
        }

        /* P stays in registers: the S accumulator layout of two n8 tiles is the A operand
         * layout of one k16 step */
        uint32_t pa[4];
        pa[0] = MT::pack(s[0][0], s[0][1]);
        pa[1] = MT::pack(s[0][2], s[0][3]);
        pa[2] = MT::pack(s[1][0], s[1][1]);
        pa[3] = MT::pack(s[1][2], s[1][3]);
#pragma unroll
        for (int nn = 0; nn < COLS_HALF / 16; nn++) {
            uint32_t bv[4];
            mlav::ldsm_x4_trans(bv, sK + ((lane & 7) + ((lane >> 3) & 1) * 8) * RS +
                                        ni * COLS_HALF + nn * 16 + (lane >> 4) * 8);
            MT::mma(o[2 * nn], pa, bv[0], bv[1]);
            MT::mma(o[2 * nn + 1], pa, bv[2], bv[3]);
        }
    }
    mlav::cp_async_wait<0>();

    /* finish: quad-sum the row sums, normalise, write the state */
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float l = run_sum[rr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float lse = mlav_finish_lse(run_max[rr] * LN2, l);
        const float inv = l > 0.0f ? 1.0f / l : (l == 0.0f ? 0.0f : l); /* NaN stays NaN */
        const int m = row_m[rr];
        if (m >= M)
            continue;
        const int r_local = m - m0;
        if (item.slot < 0) {
            T *out = static_cast<T *>(p.out) + ((size_t)q_start * p.H + m) * DL + ni * COLS_HALF;
#pragma unroll
            for (int n = 0; n < COLS_HALF / 8; n++)
                *reinterpret_cast<uint32_t *>(out + n * 8 + qd * 2) =
                    MT::pack(o[n][2 * rr] * inv, o[n][2 * rr + 1] * inv);
            if (p.lse && ni == 0 && qd == 0)
                p.lse[(size_t)q_start * p.H + m] = lse;
        } else {
            float *po = p.part_o + ((size_t)item.slot * BM + r_local) * DL + ni * COLS_HALF;
#pragma unroll
            for (int n = 0; n < COLS_HALF / 8; n++)
                *reinterpret_cast<float2 *>(po + n * 8 + qd * 2) =
                    make_float2(o[n][2 * rr] * inv, o[n][2 * rr + 1] * inv);
            if (ni == 0 && qd == 0)
                p.part_lse[(size_t)item.slot * BM + r_local] = lse;
        }
    }
}

template <typename T> const void *kernel_of()
{
    return reinterpret_cast<const void *>(&flash_verify_kernel<T>);
}

const void *kernel_for(mlav_dtype dtype)
{
    return dtype == MLAV_DTYPE_BF16 ? kernel_of<__nv_bfloat16>() : kernel_of<__half>();
}

} // namespace

size_t mlav_flash_smem_bytes(void)
{
    return SMEM_BYTES;
}

mlav_status mlav_flash_prepare(mlav_dtype dtype, const mlav_cuda_device *dev, int *blocks_per_sm)
{
    if (dtype == MLAV_DTYPE_F32)
        return mlav_flash_f32_prepare(dev, blocks_per_sm);
    const void *f = kernel_for(dtype);
    mlav_status s = mlav_cuda_prepare_kernel(f, SMEM_BYTES, dev, "flash_verify");
    if (s != MLAV_OK)
        return s;
    MLAV_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, f, NT, SMEM_BYTES));
    if (*blocks_per_sm < 1)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "flash_verify cannot be resident on this device (0 blocks per SM)");
    return MLAV_OK;
}

mlav_status mlav_flash_launch(mlav_dtype dtype, const mlav_flash_params *fp, cudaStream_t stream)
{
    if (fp->n_items > 0 && dtype == MLAV_DTYPE_F32) {
        mlav_status s = mlav_flash_f32_launch(fp, stream);
        if (s != MLAV_OK)
            return s;
    } else if (fp->n_items > 0) {
        if (dtype == MLAV_DTYPE_BF16)
            flash_verify_kernel<__nv_bfloat16><<<fp->n_items, NT, SMEM_BYTES, stream>>>(*fp);
        else
            flash_verify_kernel<__half><<<fp->n_items, NT, SMEM_BYTES, stream>>>(*fp);
        MLAV_CUDA_TRY(cudaGetLastError());
    }
    if (fp->n_combine > 0)
        return mlav_combine_launch(dtype, fp, stream);
    return MLAV_OK;
}
