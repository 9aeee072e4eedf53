/* The "keys" kernel: the split kernel's contract (kernel.cuh) for an FP8 E4M3 cache where a
 * block has at most NR (8 or 16) folded rows, with the keys on the MMA's M side: S^T = K Q^T and
 * O^T = V^T P^T by mma.sync m16n8k16, K's e4m3 bytes converted in registers as the A operand and
 * V^T's A fragments made from K's by movmatrix, so that no F16 copy of a tile is written to or
 * read from shared memory. The seesaw kernel (seesaw.cuh) converts each FP8 tile to F16 in place
 * and reads it back through wgmma: 372,736 bytes of shared-memory traffic a 64-key tile, which at
 * 128 bytes a cycle bounds it at 1.56x the BF16 cache where the BF16 cache is DRAM-bound
 * (docs/PERFORMANCE.md#hopper, "FP8 cache"); here a tile costs its landing (36,864), its one
 * read as K (36,864), Q's fragments (36,864 at 8 rows, 73,728 at 16) and the partial scores'
 * exchange.
 *
 * Block: 256 threads, 8 warps. Warp w takes the keys of slice s = w % 4 (keys 16 s .. 16 s + 15
 * of each 64-key tile) and half h = w / 4 of the features: latent 256 h .. 256 h + 255 and rope
 * 512 + 32 h .. + 31 for S, and V's dims 256 h .. 256 h + 255 for O. The two warps of a slice
 * add their partial S^T through shared memory (a 64-thread barrier each), so both hold the same
 * scores, references and row sums; the four slices keep independent softmax states (their own
 * references) and meet once, in the epilogue.
 *
 * Feature order. Within a 64-feature group (a 32-feature group for the rope), thread (g, t)
 * (g = lane / 4, t = lane % 4) takes the 16 (8) contiguous bytes at 16 t (8 t) of its keys' rows:
 * word s of them is k16 step s, its bytes e = 0..3 the A fragment's columns 2 t, 2 t + 1 (e 0, 1)
 * and 2 t + 8, 2 t + 9 (e 2, 3). The dot product is the same in any order, and Q's B fragments
 * read the same physical features (b0: e 0, 1; b1: e 2, 3: one 8-byte load). For O^T, the 16
 * M rows of the m-tile made from step s of group u are those logical columns: row k is
 * physical dim 256 h + 64 u + 16 (k & 7) / 2 + 4 s + ((k & 1) | (k >> 3) << 1) (keys_dim).
 *
 * Fragments (PTX ISA, mma.m16n8k16): A a0 (row g, cols 2t, 2t+1), a1 (row g+8, same), a2 (row
 * g, cols 2t+8, 2t+9), a3 (row g+8, same); B b0 (k 2t, 2t+1; col g), b1 (k 2t+8, 2t+9; col g);
 * C c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8). movmatrix.trans takes an 8x8 matrix in the
 * C-pair layout (row g, cols 2t, 2t+1) to its transpose in the same layout. So:
 *   S^T (keys x rows) C: key g (+8), rows 8 n + 2 t (+1);
 *   P^T's B for keys 0-7 = trans(pack(c0, c1)), keys 8-15 = trans(pack(c2, c3));
 *   V^T's A = (trans(K a0), trans(K a2), trans(K a1), trans(K a3)).
 *
 * Pipeline: 4 stages of raw 64-key tiles (576 bytes a row, contiguous: the 16-byte loads of a
 * quarter warp, rows g and g + 1 at 16 t, fall on distinct banks), 3 ahead, cp.async by all
 * threads (a row to 4 threads, one page id each, looked up a tile ahead), one block barrier a
 * tile.
 * Hidden keys: scores -inf (mask as mlav_kv_visible), and draft keys' non-finite V values zeroed
 * in registers (the seesaw's sanitize_v rule). Epilogue: each slice's O^T rescaled to the rows'
 * common reference, summed through shared memory in slice order, written as write_output does
 * (the final output and lse, or the split's fp16 partial, part_scale and part_lse). */
#ifndef MLAV_CUDA_SM90_KEYS_CUH
#define MLAV_CUDA_SM90_KEYS_CUH

#include "kernel.cuh"
#include "score.cuh"

namespace mlav90 {
namespace keys {

constexpr int THREADS = 256, WARPS = 8, SLICES = 4;
constexpr int KT = TILE_N;                   /* keys a tile: 64, four 16-key slices */
constexpr int KSTAGES = 4, AHEAD = 3;        /* raw tiles in the ring; gathered ahead */
constexpr uint32_t TILE_BYTES = KT * W;      /* 36,864 */
constexpr int GROUPS = DL / 2 / 64;          /* a warp's latent groups of 64 features: 4 */
constexpr int QS = W + 4;                    /* Q's row stride in halves: 1,160 bytes, 8 mod 128 */
constexpr int OSTR = DL + 4;                 /* the epilogue's O rows, floats */
static_assert(KSTAGES >= AHEAD + 1, "tile t's gather writes the stage of tile t - 1 at the latest");

template <int NR> struct smem_k {
    static_assert(NR == 8 || NR == 16, "8 or 16 rows");
    static constexpr uint32_t KV = 0;                                /* [KSTAGES][64][576] e4m3 */
    static constexpr uint32_t Q = KV + KSTAGES * TILE_BYTES;         /* [NR][QS] F16 */
    static constexpr uint32_t X = Q + ((NR * QS * 2 + 15) / 16) * 16; /* [8][32][NR / 2] fp32 */
    static constexpr uint32_t ML = X + WARPS * 32 * (NR / 2) * 4;    /* [2][SLICES][NR] fp32 */
    static constexpr uint32_t RED = ML + 2 * SLICES * NR * 4;        /* [16] u32: Q's maximum */
    static constexpr uint32_t PAGE = RED + 16 * 4; /* [THREADS] int32: each row's next page id */
    static constexpr uint32_t BYTES = PAGE + THREADS * 4;
    static_assert(SLICES * NR * OSTR * 4 <= Q, "the epilogue's O in the ring");
    static_assert(BYTES <= 232448, "the sm_90 opt-in limit per block");
};

/* The physical dim of row k (0..15) of the O^T m-tile of latent group u, step s, half h. */
__host__ __device__ constexpr int keys_dim(int h, int u, int s, int k)
{
    return 256 * h + 64 * u + 16 * ((k & 7) >> 1) + 4 * s + ((k & 1) | ((k >> 3) << 1));
}

__device__ __forceinline__ uint32_t movtrans(uint32_t a)
{
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
    return d;
}

__device__ __forceinline__ uint2 lds8(uint32_t a)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
    return v;
}

/* Zero the Inf and NaN halves of an F16 pair (exponent all ones). */
__device__ __forceinline__ uint32_t finite_or_zero(uint32_t w)
{
    const uint32_t lo = (w & 0x7c00u) == 0x7c00u ? 0xffff0000u : 0xffffffffu;
    const uint32_t hi = (w & 0x7c000000u) == 0x7c000000u ? 0x0000ffffu : 0xffffffffu;
    return w & lo & hi;
}

/* The page id of this thread's row of tile t (row tid / 4; 0 past kv_end): looked up a tile before
 * its gather, so that the copies issue without waiting for the page table (each row's own entry
 * at page_size 1). */
__device__ __forceinline__ int32_t tile_row_page(const mlav_flash_params &p, const block_ctx &c,
                                                 const int32_t *ptab, int t, int tid)
{
    return kv_page_of(ptab, c.kv_begin + t * KT + (tid >> 2), c.kv_end, p);
}

/* Tile t's 64 raw rows into its stage: row tid / 4 (page id `page`: tile_row_page) by threads
 * 4 r .. 4 r + 3, each the 16-byte chunks 4 k + tid % 4 (64 contiguous bytes a row a step),
 * zero-filled past kv_end. */
__device__ __forceinline__ void gather_tile(const mlav_flash_params &p, const block_ctx &c,
                                            int32_t page, uint32_t ring, int t, int tid)
{
    const int r = tid >> 2, part = tid & 3;
    const int j = c.kv_begin + t * KT + r;
    const bool live = j < c.kv_end;
    const uint8_t *src =
        kv_row_src(static_cast<const uint8_t *>(p.kv), page, j, live, p) + part * 16;
    const uint32_t dst = ring + (uint32_t)(t % KSTAGES) * TILE_BYTES + (uint32_t)r * W +
                         (uint32_t)part * 16;
#pragma unroll
    for (int k = 0; k < W / 64; k++)
        cp_async16(dst + 64u * k, src + 64 * k, live ? 16 : 0);
}

/* The block's NR rows of q (rows past M zero) into Q as F16: BF16 q by q_to_f16.cuh's rule (the
 * largest finite |q| of the block in [2^14, 2^15)); returns 2^shift (1 for F16 q). */
template <typename T, int NR>
__device__ __forceinline__ float load_q_f16(const mlav_flash_params &p, const block_ctx &c,
                                            unsigned char *smem, uint32_t *red, int tid)
{
    constexpr int CHUNKS = NR * (W / 8), PER = (CHUNKS + THREADS - 1) / THREADS;
    constexpr bool CONV = !std::is_same<T, __half>::value;
    const T *qg = static_cast<const T *>(p.q) + ((size_t)c.q_start * p.H + c.m0) * W;
    uint4 v[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int f = tid + THREADS * i, r = f / (W / 8);
        v[i] = make_uint4(0, 0, 0, 0);
        if (f < CHUNKS && c.m0 + r < c.M)
            v[i] = *reinterpret_cast<const uint4 *>(qg + (size_t)f * 8);
    }
    float down = 1.0f, unshift = 1.0f;
    if constexpr (CONV) {
        const int warp = tid >> 5, lane = tid & 31;
        const auto block_max = [&](bool finite, int round) {
            uint32_t m2 = 0;
#pragma unroll
            for (int i = 0; i < PER; i++) {
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].x, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].y, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].z, finite);
                m2 = mlav::q_bf16_absmax_fold(m2, v[i].w, finite);
            }
            uint32_t m = __reduce_max_sync(0xffffffffu, max(m2 & 0xffffu, m2 >> 16));
            if (lane == 0)
                red[8 * round + warp] = m;
            __syncthreads();
#pragma unroll
            for (int w = 0; w < WARPS; w++)
                m = max(m, red[8 * round + w]);
            return m;
        };
        uint32_t mb = block_max(false, 0);
        if (mb >= 0x7f80u) /* block-uniform */
            mb = block_max(true, 1);
        const int shift = mlav::q_f16_shift(mb);
        down = mlav::q_f16_down(shift);
        unshift = mlav::q_f16_unshift(shift);
    }
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int f = tid + THREADS * i, r = f / (W / 8), k = f % (W / 8);
        if (f < CHUNKS) {
            uint4 h = v[i];
            if constexpr (CONV)
                h = make_uint4(mlav::q_bf16x2_to_f16x2(v[i].x, down),
                               mlav::q_bf16x2_to_f16x2(v[i].y, down),
                               mlav::q_bf16x2_to_f16x2(v[i].z, down),
                               mlav::q_bf16x2_to_f16x2(v[i].w, down));
            /* rows QS halves apart (8 mod 16 bytes): two 8-byte stores */
            uint2 *d =
                reinterpret_cast<uint2 *>(smem + smem_k<NR>::Q + ((size_t)r * QS + 8 * k) * 2);
            d[0] = make_uint2(h.x, h.y);
            d[1] = make_uint2(h.z, h.w);
        }
    }
    return unshift;
}

/* A thread's place in the block: its warp's key slice and feature half, its fragment row g and
 * column pair t4, and the shared addresses it reads a tile through. */
struct lane_ctx {
    int tid, warp, lane, sl, hf, g, t4;
    uint32_t q_lat, q_rope; /* Q's row g at this half's first latent (rope) feature, t4's bytes */
    float4 *x_mine;         /* this lane's slot of the slices' exchange */
    int x_other;            /* the slice's other warp (warp ^ 4), in float4s from x_mine */
};

template <int NR>
__device__ __forceinline__ lane_ctx lane_ctx_of(unsigned char *smem, uint32_t base)
{
    constexpr int NTN = NR / 8;
    lane_ctx l;
    l.tid = threadIdx.x;
    l.lane = l.tid & 31;
    l.warp = __shfl_sync(0xffffffffu, l.tid >> 5, 0); /* warp-uniform */
    l.sl = l.warp & 3;
    l.hf = l.warp >> 2;
    l.g = l.lane >> 2;
    l.t4 = l.lane & 3;
    l.q_lat = base + smem_k<NR>::Q + (uint32_t)(l.g * QS + 256 * l.hf + 16 * l.t4) * 2u;
    l.q_rope = base + smem_k<NR>::Q + (uint32_t)(l.g * QS + DL + 32 * l.hf + 8 * l.t4) * 2u;
    l.x_mine = reinterpret_cast<float4 *>(smem + smem_k<NR>::X) + (l.warp * 32 + l.lane) * NTN;
    l.x_other = (l.hf ? -4 : 4) * 32 * NTN;
    return l;
}

/* One k16 step of S^T: the A fragment from two e4m3 words (keys g and g + 8, bytes e = 0..3 of
 * the step), Q's B fragments of each n-tile from `qa` (row g's halves of the step). */
template <int NTN>
__device__ __forceinline__ void s_step(float (&sacc)[NTN][4], uint32_t (&a)[4], uint32_t kg,
                                       uint32_t kg8, uint32_t qa)
{
    mlav::e4m3x4_to_half2x2(kg, a[0], a[2]);
    mlav::e4m3x4_to_half2x2(kg8, a[1], a[3]);
#pragma unroll
    for (int n = 0; n < NTN; n++) {
        const uint2 b = lds8(qa + (uint32_t)n * 8u * QS * 2u);
        mlav::mma_type<__half>::mma(sacc[n], a, b.x, b.y);
    }
}

/* S^T of the warp's 16 keys of the tile at `stage` over its half of the features (keys g, g + 8
 * at rows kg, kg + 8 of the tile), then the slice's two halves added (the pair's 64-thread
 * barrier, id 1 + slice): the scores of keys g, g + 8 for rows 8 n + 2 t4 (+ 1). K's latent A
 * fragments stay in kf for O^T (o_tile). */
template <int NTN>
__device__ __forceinline__ void s_tile(float (&sacc)[NTN][4], uint32_t (&kf)[GROUPS][4][4],
                                       uint32_t stage, const lane_ctx &l)
{
    const uint32_t kg = stage + (uint32_t)(16 * l.sl + l.g) * W, kg8 = kg + 8u * W;
#pragma unroll
    for (int n = 0; n < NTN; n++)
        sacc[n][0] = sacc[n][1] = sacc[n][2] = sacc[n][3] = 0.0f;
#pragma unroll
    for (int u = 0; u < GROUPS; u++) {
        const uint32_t off = (uint32_t)(256 * l.hf + 64 * u + 16 * l.t4);
        const uint4 wa = lds16(kg + off), wb = lds16(kg8 + off);
        const uint32_t ra[4] = {wa.x, wa.y, wa.z, wa.w}, rb[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int s = 0; s < 4; s++)
            s_step<NTN>(sacc, kf[u][s], ra[s], rb[s], l.q_lat + (uint32_t)(64 * u + 4 * s) * 2u);
    }
    const uint32_t off = (uint32_t)(DL + 32 * l.hf + 8 * l.t4);
    const uint2 wa = lds8(kg + off), wb = lds8(kg8 + off);
    uint32_t a[4];
    s_step<NTN>(sacc, a, wa.x, wb.x, l.q_rope);
    s_step<NTN>(sacc, a, wa.y, wb.y, l.q_rope + 8u);
#pragma unroll
    for (int n = 0; n < NTN; n++)
        l.x_mine[n] = make_float4(sacc[n][0], sacc[n][1], sacc[n][2], sacc[n][3]);
    named_barrier(1 + l.sl, 64);
#pragma unroll
    for (int n = 0; n < NTN; n++) {
        const float4 v = l.x_mine[l.x_other + n];
        sacc[n][0] += v.x, sacc[n][1] += v.y, sacc[n][2] += v.z, sacc[n][3] += v.w;
    }
}

/* The slice's scores in place (keys j_s + g (+ 8), rows 8 n + 2 t4 (+ 1)): `score` of each key
 * its row sees, -inf for the others (keys past kv_end; draft keys the row's mask hides, by
 * mlav_kv_visible; rows past M see every key before kv_end: Q = 0 there, never written). */
template <int NTN, typename Score>
__device__ __forceinline__ void mask_tile(float (&sacc)[NTN][4], const mlav_flash_params &p,
                                          const block_ctx &c, int j_s, const lane_ctx &l,
                                          const Score &score)
{
    if (j_s + 16 <= c.prefix && j_s + 16 <= c.kv_end) {
#pragma unroll
        for (int n = 0; n < NTN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sacc[n][e] = score(sacc[n][e]);
        return;
    }
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = j_s + l.g + 8 * (e >> 1), m = c.m0 + 8 * n + 2 * l.t4 + (e & 1);
            bool vis = j < c.kv_end;
            if (vis && m < c.M && j >= c.prefix) {
                const int i = m / p.H;
                vis = mlav_kv_visible(p.tree_mask, p.mask_words, c.q_start + i, i, c.prefix, j);
            }
            sacc[n][e] = vis ? score(sacc[n][e]) : -INFINITY;
        }
}

/* The online softmax of each row over the slice's 16 keys (the maxima over lanes g: xor 4, 8,
 * 16), reference_max.cuh's rule: O and the sums rescaled where a reference moves, the scores
 * made P (k: the factor of raw scores, 1 for scaled ones) and added to the sums, and P^T's B
 * fragments of each n-tile (keys 0-7, 8-15) by movmatrix. */
template <int NTN>
__device__ __forceinline__ void softmax_tile(float (&sacc)[NTN][4], float (&o)[GROUPS * 4][NTN][4],
                                             float (&m_run)[NTN][2], float (&l_run)[NTN][2],
                                             float k, uint32_t (&pb)[NTN][2])
{
    float f[NTN][2];
    bool moved = false;
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float tm = fmaxf(sacc[n][e], sacc[n][e + 2]);
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 4));
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 8));
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 16));
            tm *= k;
            const float mr = mlav::next_ref(m_run[n][e], tm);
            f[n][e] = mlav::ref_factor(m_run[n][e], mr);
            moved |= f[n][e] != 1.0f;
            l_run[n][e] *= f[n][e];
            m_run[n][e] = mr;
        }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int i = 0; i < GROUPS * 4; i++)
#pragma unroll
            for (int n = 0; n < NTN; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o[i][n][e] *= f[n][e & 1];
    }
#pragma unroll
    for (int n = 0; n < NTN; n++) {
        float neg[2];
#pragma unroll
        for (int e = 0; e < 2; e++)
            neg[e] = m_run[n][e] == -INFINITY ? 0.0f : -m_run[n][e];
#pragma unroll
        for (int e = 0; e < 4; e++)
            sacc[n][e] = mlav::exp2_fast(fmaf(sacc[n][e], k, neg[e & 1]));
        l_run[n][0] += sacc[n][0] + sacc[n][2];
        l_run[n][1] += sacc[n][1] + sacc[n][3];
        pb[n][0] = movtrans(mlav::mma_type<__half>::pack(sacc[n][0], sacc[n][1]));
        pb[n][1] = movtrans(mlav::mma_type<__half>::pack(sacc[n][2], sacc[n][3]));
    }
}

/* O^T += V^T P^T over the slice's keys: V^T's A fragments are K's latent ones (kf), each 8x8
 * register transposed; a draft key's non-finite values zeroed first (a row that sees it has a
 * non-finite score; one that does not gives it weight 0, which would turn them into NaN). */
template <int NTN>
__device__ __forceinline__ void o_tile(float (&o)[GROUPS * 4][NTN][4],
                                       uint32_t (&kf)[GROUPS][4][4], const uint32_t (&pb)[NTN][2],
                                       int j_s, int prefix, const lane_ctx &l)
{
    if (j_s + 16 > prefix) {
        const bool dg = j_s + l.g >= prefix, dg8 = j_s + l.g + 8 >= prefix;
#pragma unroll
        for (int u = 0; u < GROUPS; u++)
#pragma unroll
            for (int s = 0; s < 4; s++) { /* selects: movmatrix and mma follow, .aligned */
                kf[u][s][0] = dg ? finite_or_zero(kf[u][s][0]) : kf[u][s][0];
                kf[u][s][2] = dg ? finite_or_zero(kf[u][s][2]) : kf[u][s][2];
                kf[u][s][1] = dg8 ? finite_or_zero(kf[u][s][1]) : kf[u][s][1];
                kf[u][s][3] = dg8 ? finite_or_zero(kf[u][s][3]) : kf[u][s][3];
            }
    }
#pragma unroll
    for (int u = 0; u < GROUPS; u++)
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const uint32_t a[4] = {movtrans(kf[u][s][0]), movtrans(kf[u][s][2]),
                                   movtrans(kf[u][s][1]), movtrans(kf[u][s][3])};
#pragma unroll
            for (int n = 0; n < NTN; n++)
                mlav::mma_type<__half>::mma(o[4 * u + s][n], a, pb[n][0], pb[n][1]);
        }
}

/* The epilogue, after every copy landed and every warp's loop ended (the ring free): each row's
 * sum over its slice's keys, the slices' references and sums through shared memory, each slice's
 * O^T at the rows' common reference into [slice][row][dim] in the ring, then per row (warps
 * warp, warp + 8) the slices summed in slice order and written as write_output does: the final
 * output and lse, or the split's fp16 partial with part_scale (a warp a row, a lane 4 dims of
 * each 128-column block) and part_lse. */
template <typename T, int NR>
__device__ __forceinline__ void epilogue(const mlav_flash_params &p, const block_ctx &c,
                                         unsigned char *smem, float (&o)[GROUPS * 4][NR / 8][4],
                                         const float (&m_run)[NR / 8][2],
                                         float (&l_run)[NR / 8][2], const mlav::out_scale &osc,
                                         const lane_ctx &l)
{
    using SL = smem_k<NR>;
    constexpr int NTN = NR / 8;
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float s = l_run[n][e];
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            s += __shfl_xor_sync(0xffffffffu, s, 8);
            s += __shfl_xor_sync(0xffffffffu, s, 16);
            l_run[n][e] = s;
        }
    float *sm_m = reinterpret_cast<float *>(smem + SL::ML), *sm_l = sm_m + SLICES * NR;
    if (l.hf == 0 && l.g == 0) { /* both halves of a slice hold the same values */
#pragma unroll
        for (int n = 0; n < NTN; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                sm_m[l.sl * NR + 8 * n + 2 * l.t4 + e] = m_run[n][e];
                sm_l[l.sl * NR + 8 * n + 2 * l.t4 + e] = l_run[n][e];
            }
    }
    __syncthreads();
    float *os = reinterpret_cast<float *>(smem + SL::KV);
    const auto row_max = [&](int r) {
        float mx = sm_m[r];
#pragma unroll
        for (int s = 1; s < SLICES; s++)
            mx = fmaxf(mx, sm_m[s * NR + r]);
        return mx;
    };
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = 8 * n + 2 * l.t4 + e;
            const float fs = mlav::ref_factor(m_run[n][e], row_max(r));
            float *row = os + (l.sl * NR + r) * OSTR;
#pragma unroll
            for (int u = 0; u < GROUPS; u++)
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    row[keys_dim(l.hf, u, s, l.g)] = o[4 * u + s][n][e] * fs;
                    row[keys_dim(l.hf, u, s, l.g + 8)] = o[4 * u + s][n][e + 2] * fs;
                }
        }
    __syncthreads();
    using OTY = mlav::mma_type<T>;
    const bool final_out = c.slot < 0;
#pragma unroll
    for (int r = l.warp; r < NR; r += WARPS) {
        const int m = c.m0 + r;
        if (m >= c.M)
            continue; /* warp-uniform */
        const float mx = row_max(r);
        float sum = 0.0f;
#pragma unroll
        for (int s = 0; s < SLICES; s++)
            sum += sm_l[s * NR + r] * mlav::ref_factor(sm_m[s * NR + r], mx);
        float inv = sum > 0.0f ? 1.0f / sum : (sum == 0.0f ? 0.0f : sum); /* NaN stays NaN */
        inv = sum == 0.0f ? 0.0f : inv * osc.mant; /* the scale's power of two: osc.pw */
        if (l.lane == 0) {
            const float lse = mlav_finish_lse(mx * LN2F, sum);
            if (!final_out)
                p.part_lse[(size_t)c.slot * BM + r] = lse;
            else if (p.lse)
                p.lse[(size_t)c.q_start * p.H + m] = lse;
        }
#pragma unroll
        for (int cb = 0; cb < DL / MLAV_FLASH_SCALE_COLS; cb++) {
            const int d = MLAV_FLASH_SCALE_COLS * cb + 4 * l.lane;
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int s = 0; s < SLICES; s++) {
                const float4 x = *reinterpret_cast<const float4 *>(os + (s * NR + r) * OSTR + d);
                v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
            }
            if (final_out) {
                T *out = static_cast<T *>(p.out) + ((size_t)c.q_start * p.H + m) * DL + d;
                *reinterpret_cast<uint2 *>(out) =
                    make_uint2(OTY::pack(v[0] * inv * osc.pw, v[1] * inv * osc.pw),
                               OTY::pack(v[2] * inv * osc.pw, v[3] * inv * osc.pw));
            } else {
                uint32_t mb = 0;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    mb = max(mb, __float_as_uint(v[i]) & 0x7fffffffu);
                mb = __reduce_max_sync(0xffffffffu, mb);
                float sc, ps;
                partial_scale<true>(mb, inv, osc.pexp, sc, ps);
                if (l.lane == 0)
                    p.part_scale[((size_t)c.slot * BM + r) * (DL / MLAV_FLASH_SCALE_COLS) + cb] =
                        ps;
                __half *po =
                    static_cast<__half *>(p.part_o) + ((size_t)c.slot * BM + r) * DL + d;
                *reinterpret_cast<uint2 *>(po) =
                    make_uint2(mlav::mma_type<__half>::pack(v[0] * sc, v[1] * sc),
                               mlav::mma_type<__half>::pack(v[2] * sc, v[3] * sc));
            }
        }
    }
}

/* The kernel. NR: the most rows of any block (8 or 16); STEP as kernel.cuh's flash_sm90_kernel
 * (a plan for limits: the block's item from the step's schedule, step_item_index). The sequence:
 * tiles 0..2's gathers, Q (load_q_f16), the scores' factors; per tile its landing, the gather
 * of tile t + 3, s_tile, mask_tile, softmax_tile, o_tile; the epilogue. */
template <typename T, int NR, bool STEP>
__global__ void __launch_bounds__(THREADS, 1)
    flash_sm90_keys_kernel(const mlav_flash_params p, const __grid_constant__ CUtensorMap kv_map,
                           const int kv_tma)
{
    using SL = smem_k<NR>;
    constexpr int NTN = NR / 8; /* n8 tiles of rows */
    constexpr bool Q_TO_F16 = !std::is_same<T, __half>::value;
    (void)kv_map;
    (void)kv_tma;
    const int32_t step_ix = STEP ? mlav::flash::step_item_index(p) : 0;
    if (STEP && step_ix < 0)
        return; /* past the step's schedule, or an item past the plan's limits */
    extern __shared__ __align__(16) unsigned char keys_smem[];
    unsigned char *smem = keys_smem;
    const uint32_t base = smem_u32(smem), ring = base + SL::KV;
    mlav::launch_dependents(); /* the combine may launch now; it waits for this grid's end */
    const block_ctx c = block_ctx_of(p.items[STEP ? (uint32_t)step_ix : blockIdx.x], p);
    const lane_ctx l = lane_ctx_of<NR>(smem, base);
    const int32_t *ptab = mlav_page_row_dev(p.page_table, p.page_table_rows,
                                            p.page_table_num_rows, p.max_pages, p.bad_pages, c.b);
#pragma unroll
    for (int t = 0; t < AHEAD; t++) {
        if (t < c.n_tiles)
            gather_tile(p, c, tile_row_page(p, c, ptab, t, l.tid), ring, t, l.tid);
        cp_async_commit();
    }
    /* tile AHEAD's page ids, then each next tile's, kept in shared memory (each thread its own
     * slot): in a register the 16-row instances spilled */
    int32_t *const page_ahead = reinterpret_cast<int32_t *>(smem + SL::PAGE);
    page_ahead[threadIdx.x] = tile_row_page(p, c, ptab, AHEAD, l.tid);
    const float unshift =
        load_q_f16<T, NR>(p, c, smem, reinterpret_cast<uint32_t *>(smem + SL::RED), l.tid);

    /* the scores' factors and the output's (score.cuh's score_ctx, over an FP8 cache) */
    score_ctx<Q_TO_F16> score = {1.0f, p.scale_log2};
    const float ks = mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale);
    const mlav::out_scale osc = mlav::out_scale_of(ks);
    if constexpr (Q_TO_F16)
        mlav::fp8_score_factors(unshift, p.scale_log2, ks, score.qa, score.sf);
    else
        score.sf = p.scale_log2 * ks;
    score.template set_factor<true>();

    float o[GROUPS * 4][NTN][4];
#pragma unroll
    for (int i = 0; i < GROUPS * 4; i++)
#pragma unroll
        for (int n = 0; n < NTN; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    float m_run[NTN][2], l_run[NTN][2]; /* rows 8 n + 2 t4 + e: references (log2), sums */
#pragma unroll
    for (int n = 0; n < NTN; n++)
        m_run[n][0] = m_run[n][1] = -INFINITY, l_run[n][0] = l_run[n][1] = 0.0f;

    for (int t = 0; t < c.n_tiles; t++) {
        cp_async_wait<AHEAD - 1>(); /* this thread's copies of tile t landed */
        __syncthreads();            /* everyone's; and tile t - 1's reads are done */
        if (t + AHEAD < c.n_tiles)
            gather_tile(p, c, page_ahead[threadIdx.x], ring, t + AHEAD, l.tid);
        cp_async_commit();
        page_ahead[threadIdx.x] = tile_row_page(p, c, ptab, t + AHEAD + 1, l.tid);

        const int j_s = c.kv_begin + t * KT + 16 * l.sl; /* the slice's first key */
        float sacc[NTN][4];
        uint32_t kf[GROUPS][4][4]; /* K's latent A fragments: V^T's after movmatrix */
        s_tile<NTN>(sacc, kf, ring + (uint32_t)(t % KSTAGES) * TILE_BYTES, l);
        mask_tile<NTN>(sacc, p, c, j_s, l, score);
        uint32_t pb[NTN][2];
        softmax_tile<NTN>(sacc, o, m_run, l_run, score.k, pb);
        o_tile<NTN>(o, kf, pb, j_s, c.prefix, l);
    }
    cp_async_wait<0>();
    epilogue<T, NR>(p, c, smem, o, m_run, l_run, osc, l);
}

} // namespace keys
} // namespace mlav90

#endif
