/* The flash verify kernel: one block per (request, 64-row tile of folded token x head rows, KV
 * split), tensor cores through mma.sync, KV tiles gathered through the page table by cp.async
 * into a 2-stage pipeline, online softmax, and a partial state per split for combine.cu.
 *
 * Block layout (8 warps). Warp w = mi + 4*ni: row group mi (16 rows), half ni.
 *   Q          : warp (mi, ni) keeps the A fragments of its 16 rows x depth [288 ni, +288) in
 *                72 registers for the whole split, so the S loop reads only K from shared
 *                memory (bench/NOTES.md, v2: reading Q fragments from shared memory every tile
 *                was half of the shared-memory traffic that bounded v1).
 *   S = Q K^T  : warp (mi, ni) sums its depth half for 16 rows x 32 keys; the two halves swap
 *                partial sums through shared memory, so each holds the full S.
 *   O += P V   : warp (mi, ni) owns output columns [256 ni, 256 ni + 256): 128 fp32 registers.
 * Shared memory (sm_120 fits it: 91,136 of 101,376 bytes): two KV tiles of 32 x 576 (rows padded
 * to 584 elements = 73 16-byte chunks, so the 8 row addresses of every ldmatrix fall in distinct
 * bank groups) and 16 KB for the S exchange. Registers bound residency at one block (8 warps)
 * per SM; 64 rows per block read each KV tile once for twice the rows of v1. */
#include <math.h>

#include "../common/merge.h"
#include "flash.h"
#include "mma.cuh"

namespace {

constexpr int DL = MLAV_FLASH_DL, W = MLAV_FLASH_W;
constexpr int BM = MLAV_FLASH_BLOCK_M, BN = MLAV_FLASH_BLOCK_N, NT = MLAV_FLASH_THREADS;
constexpr int RS = W + 8;          /* padded row stride in elements */
constexpr int STAGES = 2;
constexpr int CHUNKS = W / 8;      /* 16-byte chunks per row */
constexpr int DEPTH_HALF = W / 2;  /* 288: each half-warp-pair's share of the QK^T depth */
constexpr int KSTEPS = DEPTH_HALF / 16; /* 18 k16 steps per half */
constexpr int COLS_HALF = DL / 2;  /* 256: each half's share of the output columns */
constexpr int NTILE = BN / 8;      /* n8 tiles of S per warp: 4 */
constexpr int SKV_ELEMS = BN * RS;
constexpr int SX_FLOATS = (NT / 32) * 32 * NTILE * 4;
constexpr size_t SMEM_BYTES = (size_t)STAGES * SKV_ELEMS * 2 + SX_FLOATS * 4;
static_assert(SMEM_BYTES <= MLAV_SM120_SMEM_LIMIT, "flash kernel must fit sm_120");
static_assert(DEPTH_HALF % 16 == 0 && COLS_HALF % 16 == 0 && BN % 16 == 0, "MMA tiling");
static_assert(BM == 16 * (NT / 64), "row groups of 16, two warps (halves) each");

constexpr float LN2 = 0.6931471805599453f;
/* log2 units a score may exceed the running max before O is rescaled: P stays <= 256, far
 * inside BF16/F16 range, and the row sum (at most 256 per key) inside fp32 */
constexpr float RESCALE_SLACK = 8.0f;

/* The gather gives each KV row of a tile to 8 threads (256 threads / 32 rows): a thread looks
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

/* One 32-bit word of Q (two elements) for an A fragment; rows past the request read as 0. */
__device__ __forceinline__ uint32_t load_q2(const void *row, int col, bool ok)
{
    return ok ? __ldg(reinterpret_cast<const unsigned int *>(static_cast<const uint16_t *>(row) +
                                                             col))
              : 0u;
}

template <typename T>
__global__ void __launch_bounds__(NT, 1) flash_verify_kernel(const mlav_flash_params p)
{
    using MT = mlav::mma_type<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    T *sKV = reinterpret_cast<T *>(smem);
    float *sX = reinterpret_cast<float *>(sKV + STAGES * SKV_ELEMS);

    const mlav_split_item item = p.items[blockIdx.x];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mi = warp & 3, ni = warp >> 2;
    const int g = lane >> 2, qd = lane & 3; /* MMA fragment row and column pair */
    const int b = item.b;
    const int q_start = item.q_start, prefix = item.prefix;
    const int M = item.q_len * p.H;       /* folded rows of this request */
    const int m0 = item.mtile * BM;
    const int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const int n_tiles = (kv_end - kv_begin + BN - 1) / BN;
    const T *kv = static_cast<const T *>(p.kv);
    const int32_t *ptab = p.page_table + (size_t)b * p.max_pages;
    /* a row group past the request's rows (H x q_len not a multiple of 64) skips the MMAs; its
     * warps still gather and meet every barrier */
    const bool active = m0 + mi * 16 < M;

    /* The prologue's page-id lookups are issued first; the loop keeps them two tiles ahead. */
    const int g_row = tid / GATHER_TPR, g_part = tid % GATHER_TPR;
    int32_t pg_first[STAGES - 1];
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++)
        pg_first[s] = lookup_page(ptab, kv_begin + s * BN + g_row, kv_end, p);
    int32_t pg_next = lookup_page(ptab, kv_begin + (STAGES - 1) * BN + g_row, kv_end, p);
    int32_t pg_after = lookup_page(ptab, kv_begin + STAGES * BN + g_row, kv_end, p);

    /* Q rows of a request are contiguous: (token, head) folds to row q_start * H + m. The A
     * fragment of k-step kk holds rows g, g + 8 at depth columns 2 qd (+1) and 2 qd + 8 (+1). */
    uint32_t qf[KSTEPS][4];
    {
        const int r0 = m0 + mi * 16 + g;
        const T *q0 = static_cast<const T *>(p.q) + ((size_t)q_start * p.H + r0) * W;
        const T *q1 = q0 + (size_t)8 * W;
        const bool ok0 = r0 < M, ok1 = r0 + 8 < M;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
            const int c = ni * DEPTH_HALF + kk * 16 + qd * 2;
            qf[kk][0] = load_q2(q0, c, ok0);
            qf[kk][1] = load_q2(q1, c, ok1);
            qf[kk][2] = load_q2(q0, c + 8, ok0);
            qf[kk][3] = load_q2(q1, c + 8, ok1);
        }
    }

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        gather_kv_row(sKV + s * SKV_ELEMS, kv, pg_first[s], kv_begin + s * BN + g_row, kv_end, p,
                      g_row, g_part);
        mlav::cp_async_commit();
    }

    /* The two rows this thread holds in every fragment: g and g + 8 of the warp's 16. */
    int row_i[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int m = m0 + mi * 16 + g + rr * 8;
        row_i[rr] = m < M ? m / p.H : -1; /* draft node index, -1: padding */
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
        const int j_base = kv_begin + t * BN;
        const bool prefix_only = j_base + BN <= prefix && j_base + BN <= kv_end;

        float s[NTILE][4];
        if (active) {
            /* partial S over this warp's depth half: four independent chains of 18 MMAs */
#pragma unroll
            for (int n = 0; n < NTILE; n++)
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            /* K fragments are loaded one k-step ahead of their MMAs (two buffers) */
            const T *kbase = sK + ((lane & 7) + ((lane >> 4) << 3)) * RS + ni * DEPTH_HALF +
                             ((lane >> 3) & 1) * 8;
            uint32_t bk[2][NTILE / 2][4];
#pragma unroll
            for (int nb = 0; nb < NTILE / 2; nb++)
                mlav::ldsm_x4(bk[0][nb], kbase + nb * 16 * RS);
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                if (kk + 1 < KSTEPS) {
#pragma unroll
                    for (int nb = 0; nb < NTILE / 2; nb++)
                        mlav::ldsm_x4(bk[(kk + 1) & 1][nb], kbase + nb * 16 * RS + (kk + 1) * 16);
                }
#pragma unroll
                for (int nb = 0; nb < NTILE / 2; nb++) {
                    MT::mma(s[2 * nb], qf[kk], bk[kk & 1][nb][0], bk[kk & 1][nb][1]);
                    MT::mma(s[2 * nb + 1], qf[kk], bk[kk & 1][nb][2], bk[kk & 1][nb][3]);
                }
            }
            /* swap partial sums with the other half (warp ^ 4); a + b == b + a, so both halves
             * hold bit-identical S and make identical softmax decisions. Layout [warp][n][lane]
             * of float4: consecutive lanes, consecutive 16 bytes, no bank conflicts. */
            float *mine = sX + (size_t)warp * (32 * NTILE * 4) + lane * 4;
#pragma unroll
            for (int n = 0; n < NTILE; n++)
                *reinterpret_cast<float4 *>(mine + n * 128) =
                    make_float4(s[n][0], s[n][1], s[n][2], s[n][3]);
            mlav::named_barrier(1 + mi, 64);
            const float *other = sX + (size_t)(warp ^ 4) * (32 * NTILE * 4) + lane * 4;
#pragma unroll
            for (int n = 0; n < NTILE; n++) {
                const float4 v = *reinterpret_cast<const float4 *>(other + n * 128);
                s[n][0] += v.x;
                s[n][1] += v.y;
                s[n][2] += v.z;
                s[n][3] += v.w;
            }

            /* scale, mask (split end, tree), tile row max */
            float tile_max[2] = {-INFINITY, -INFINITY};
            if (prefix_only) {
                /* a tile of prefix rows only: every key visible to every row (padding rows hold
                 * Q = 0 and are never written, so they need no mask either) */
#pragma unroll
                for (int n = 0; n < NTILE; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        s[n][e] *= p.scale_log2;
                        tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[n][e]);
                    }
            } else {
#pragma unroll
                for (int n = 0; n < NTILE; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int rr = e >> 1, j = j_base + n * 8 + qd * 2 + (e & 1);
                        bool vis = j < kv_end && row_i[rr] >= 0;
                        if (vis && j >= prefix) {
                            const int k = j - prefix, i = row_i[rr];
                            if (p.tree_mask)
                                vis = (p.tree_mask[(size_t)(q_start + i) * p.mask_words +
                                                   (k >> 5)] >>
                                       (k & 31)) & 1u;
                            else
                                vis = k <= i;
                        }
                        s[n][e] = vis ? s[n][e] * p.scale_log2 : -INFINITY;
                        tile_max[rr] = fmaxf(tile_max[rr], s[n][e]);
                    }
            }

            /* online softmax: the rule of mlav_rescale_factor (merge.h), in log2 units, with a
             * lazy reference: the running max moves only when a score passes it by more than
             * RESCALE_SLACK, so P <= 2^RESCALE_SLACK and the 128-multiply rescale of O runs a
             * few times per split instead of on most tiles (any reference gives the same
             * softmax; the lse adds it back) */
            float alpha[2];
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                tile_max[rr] =
                    fmaxf(tile_max[rr], __shfl_xor_sync(0xffffffffu, tile_max[rr], 1));
                tile_max[rr] =
                    fmaxf(tile_max[rr], __shfl_xor_sync(0xffffffffu, tile_max[rr], 2));
                const float new_max = tile_max[rr] > run_max[rr] + RESCALE_SLACK
                                          ? fmaxf(run_max[rr], tile_max[rr])
                                          : run_max[rr];
                alpha[rr] =
                    run_max[rr] == -INFINITY ? 0.0f : mlav::exp2_fast(run_max[rr] - new_max);
                run_max[rr] = new_max;
                const float safe = new_max == -INFINITY ? 0.0f : new_max; /* no -inf - -inf */
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < NTILE; n++) {
                    s[n][2 * rr] = mlav::exp2_fast(s[n][2 * rr] - safe);
                    s[n][2 * rr + 1] = mlav::exp2_fast(s[n][2 * rr + 1] - safe);
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
        }

        if (!prefix_only) {
            /* a tile with draft rows or rows past the split end: after every warp has used the
             * tile for S, drop non-finite values (zero_nonfinite_values says why it is exact) */
            __syncthreads();
            if (j_base + g_row < kv_end)
                zero_nonfinite_values(const_cast<T *>(sK), g_row, g_part);
            __syncthreads();
        }

        if (active) {
            /* P stays in registers: the S accumulator layout of two n8 tiles is the A operand
             * layout of one k16 step */
            uint32_t pa[BN / 16][4];
#pragma unroll
            for (int ks = 0; ks < BN / 16; ks++) {
                pa[ks][0] = MT::pack(s[2 * ks][0], s[2 * ks][1]);
                pa[ks][1] = MT::pack(s[2 * ks][2], s[2 * ks][3]);
                pa[ks][2] = MT::pack(s[2 * ks + 1][0], s[2 * ks + 1][1]);
                pa[ks][3] = MT::pack(s[2 * ks + 1][2], s[2 * ks + 1][3]);
            }
            /* V fragments (16 keys x 16 columns per step) loaded PV_AHEAD steps before their
             * two MMAs: one step ahead is ~13 cycles of MMA issue, short of ldmatrix latency */
            constexpr int PV_STEPS = (COLS_HALF / 16) * (BN / 16), PV_AHEAD = 3;
            const T *vbase = sK + ((lane & 7) + ((lane >> 3) & 1) * 8) * RS + ni * COLS_HALF +
                             (lane >> 4) * 8;
            uint32_t bv[PV_AHEAD][4];
#pragma unroll
            for (int st = 0; st < PV_AHEAD; st++)
                mlav::ldsm_x4_trans(bv[st], vbase + (st % (BN / 16)) * 16 * RS +
                                                (st / (BN / 16)) * 16);
#pragma unroll
            for (int st = 0; st < PV_STEPS; st++) {
                const int nn = st / (BN / 16), ks = st % (BN / 16), slot = st % PV_AHEAD;
                MT::mma(o[2 * nn], pa[ks], bv[slot][0], bv[slot][1]);
                MT::mma(o[2 * nn + 1], pa[ks], bv[slot][2], bv[slot][3]);
                const int nx = st + PV_AHEAD;
                if (nx < PV_STEPS)
                    mlav::ldsm_x4_trans(bv[slot], vbase + (nx % (BN / 16)) * 16 * RS +
                                                      (nx / (BN / 16)) * 16);
            }
        }
        /* Every warp is done with this tile before the loop head lets the next gather reuse its
         * buffer. The loop head's barrier alone orders that already (it precedes each gather),
         * but without this one compute-sanitizer racecheck reported WAR hazards between this
         * tile's V reads and the cp.async of the tile after next in test_cuda_graph (not on the
         * golden bundles); the A/B run found the barrier free (bench/NOTES.md, v2). */
        __syncthreads();
    }
    mlav::cp_async_wait<0>();
    if (!active)
        return;

    /* finish: quad-sum the row sums, normalise, write the state */
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float l = run_sum[rr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float lse = mlav_finish_lse(run_max[rr] * LN2, l);
        const float inv = l > 0.0f ? 1.0f / l : (l == 0.0f ? 0.0f : l); /* NaN stays NaN */
        const int m = m0 + mi * 16 + g + rr * 8;
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
