/* The flash verify kernel: one block per (request, 64-row tile of folded token x head rows, KV
 * split), tensor cores through mma.sync, 16-key KV tiles gathered through the page table by
 * cp.async into a 4-buffer ring (two tiles ahead), online softmax, and a partial state per split
 * for combine.cu.
 *
 * Block layout (8 warps): two groups of 4 warps, each owning 32 rows. Warp w is quarter
 * dq = w % 4 of group w / 4. A group syncs its warps on its own named barrier; the two groups
 * meet only through per-tile "full" barriers (see the loop), and run staggered, so one group's
 * exchange and softmax overlap the other's MMAs.
 *   Q          : warp dq keeps the A fragments of its group's 32 rows x latent columns
 *                [128 dq, +128) in 64 registers for the whole split (loaded through shared
 *                memory in the prologue); the rope part of Q (64 rows x
 *                64) sits in shared memory, 16 columns per warp. So the S loop reads K from shared
 *                memory, and each K fragment feeds two m16 tiles.
 *   S = Q K^T  : each warp sums its quarter of the depth for 32 rows x 16 keys, then the group
 *                reduce-scatters the partial sums through shared memory: warp dq finishes S block
 *                (rows 16 (dq / 2), keys 8 (dq % 2)) and turns it into P.
 *   O += P V   : P goes through shared memory (the group's 32 x 16 tile); warp dq owns output
 *                columns [128 dq, +128) of all 32 rows (128 fp32 registers), so each V fragment
 *                also feeds two m16 tiles.
 * Against 16 rows per warp, P in registers and 32-key tiles this halves the K and V bytes read
 * from shared memory per MMA; it was no faster at long prefixes, only at short ones: the time goes
 * to latency chains, not bandwidth (docs/PERFORMANCE.md#kernel). Each warp orders its m-tiles (and
 * its S n-tiles) so that the block it finishes comes first: register indices stay compile-time,
 * with no selects. O (128) and Q (64) leave ~60 of 255 registers for fragments in flight. The
 * softmax reference max is shared by the group's four warps and moves only on a vote (bar.red.or)
 * when a score passes it by more than RESCALE_SLACK, so the common tile needs two group barriers
 * and no max exchange.
 * Shared memory (flash_smem_layout; sm_120 fits it): four KV tiles of 16 x 576 (rows padded to
 * 584 elements = 73 16-byte chunks, so the 8 row addresses of every ldmatrix fall in distinct
 * bank groups), Q's rope part, the S exchange, the P tiles and two small row arrays. Registers
 * bound residency at one block (8 warps) per SM. */
#include <math.h>

#include <type_traits>

#include "../common/merge.h"
#include "../common/visibility.h"
#include "convert.cuh"
#include "kv_scale.cuh"
#include "page_row.cuh"
#include "flash.h"
#include "mma.cuh"

namespace {

constexpr int DL = MLAV_FLASH_DL, W = MLAV_FLASH_W;
constexpr int BM = MLAV_FLASH_BLOCK_M, BN = MLAV_FLASH_BLOCK_N, NT = MLAV_FLASH_THREADS;
constexpr int RS = W + 8;                  /* padded KV row stride in elements */
constexpr int STAGES = 4;                  /* KV tile buffers */
constexpr int AHEAD = 2;                   /* tiles gathered ahead of the one in use */
constexpr int GROUPS = 2;                  /* independent warp groups per block */
/* A gather overwrites the buffer of tile t + AHEAD - STAGES, which both groups must be past (see
 * the loop's "tile full" barriers). */
static_assert(STAGES >= AHEAD + 2, "pipeline");
/* Named barrier ids (0 is __syncthreads; the hardware has 16): one per group for its 4 warps
 * (the exchange, the vote, the epilogue's row sums), one "tile full" per group and KV buffer (the
 * other group's 128 threads arrive when their copies of the tile have landed; see the loop), one
 * for the staggered start (group 1 waits for group 0's first S). */
enum flash_barrier : int {
    BAR_GROUP0 = 1,                          /* group g: BAR_GROUP0 + g (bar_group) */
    BAR_FULL0 = BAR_GROUP0 + GROUPS,         /* group g, buffer b: bar_full(g, b) */
    BAR_START = BAR_FULL0 + GROUPS * STAGES, /* the staggered start */
};
static_assert(BAR_START <= 15, "named barrier ids 1..15");
constexpr int bar_group(int grp)
{
    return BAR_GROUP0 + grp;
}
constexpr int bar_full(int grp, int buf)
{
    return BAR_FULL0 + grp * STAGES + buf;
}
constexpr int QUARTERS = 4;                /* warps per group */
constexpr int GROUP_ROWS = BM / GROUPS;    /* 32 */
constexpr int GROUP_THREADS = 32 * QUARTERS;
constexpr int DR = W - DL;                 /* 64: the rope part of each row */
constexpr int COLS_Q = DL / QUARTERS;      /* 128: each warp's latent columns (S depth, O cols) */
constexpr int KSTEPS = COLS_Q / 16;        /* 8 k16 steps of S from Q in registers */
constexpr int ROPE_Q = DR / QUARTERS;      /* 16: each warp's rope columns, one k16 step */
constexpr int QPS = DR + 8;                /* rope Q row stride: 144 bytes, conflict-free */
constexpr int MT = GROUP_ROWS / 16;        /* m16 tiles per group: 2 */
constexpr int NTS = BN / 8;                /* n8 tiles of S per tile: 2 */
constexpr int PS = BN + 8;                 /* P row stride: 48 bytes, conflict-free ldmatrix */
constexpr int SKV_ELEMS = BN * RS;
constexpr int SX_FLOATS = GROUPS * QUARTERS * (QUARTERS - 1) * 32 * 4; /* [grp][dest][slot][lane] */
constexpr int SP_ELEMS = GROUPS * GROUP_ROWS * PS;
constexpr int SQ_ELEMS = BM * QPS;
constexpr int SROW_FLOATS = GROUPS * QUARTERS * 16; /* [grp][warp][16 rows] */
constexpr size_t SMEM_BYTES = (size_t)STAGES * SKV_ELEMS * 2 + SX_FLOATS * 4 + SP_ELEMS * 2 +
                              SQ_ELEMS * 2 + 2 * SROW_FLOATS * 4;
static_assert(NT == GROUPS * GROUP_THREADS && MT * NTS == QUARTERS,
              "each warp finishes exactly one S block of its group");
static_assert(COLS_Q % 16 == 0 && ROPE_Q == 16 && BN == 16, "MMA tiling");
static_assert((STAGES * SKV_ELEMS * 2) % 16 == 0 && (SP_ELEMS * 2) % 16 == 0 &&
                  (SQ_ELEMS * 2) % 16 == 0,
              "alignment");
/* Output staging (the epilogue), per warp in a free KV buffer: 8 rows of 128 16-bit values (T
 * for the final output, fp16 for partial states), rows padded so that the fragment writes hit
 * 32 distinct banks per warp. */
constexpr int STAGE_T_STRIDE = COLS_Q + 8;  /* 16-bit elements */
static_assert(COLS_Q == MLAV_FLASH_SCALE_COLS, "part_scale holds one scale per warp's columns");
constexpr int STAGE_WARP_BYTES = 8 * STAGE_T_STRIDE * 2;
static_assert(QUARTERS * STAGE_WARP_BYTES <= SKV_ELEMS * 2 && STAGE_WARP_BYTES % 16 == 0 &&
                  (SKV_ELEMS * 2) % 16 == 0,
              "one KV buffer stages a group's output");
constexpr int QPE_CHUNKS = BM * DR / 8; /* 16-byte chunks of rope Q per block: 512 */
static_assert(QPE_CHUNKS % NT == 0, "rope Q load mapping");
/* Latent Q staging (the prologue): BM rows of DL, rows padded to 65 16-byte chunks (so that the
 * fragment loads are conflict-free), in KV buffers 1-3 and the S exchange area, which follow each
 * other in shared memory. */
constexpr int QSS = DL + 8;
constexpr int QL_CHUNKS = BM * DL / 8; /* 4096 */
static_assert(QL_CHUNKS % NT == 0 && BM * QSS * 2 <= (STAGES - 1) * SKV_ELEMS * 2 + SX_FLOATS * 4,
              "latent Q staging fits in KV buffers 1-3 and the exchange area");

/* An FP8 cache (the FP8 instances, docs/DESIGN.md#fp8-kv): the tiles stay e4m3 bytes in shared
 * memory, gathered like 16-bit ones (16-byte cp.async, half the chunks), and are converted in
 * registers as the loop's ldmatrix reads them: one ldmatrix.x4 of bytes gives four B fragments
 * where one of a 16-bit tile gives two, and every MMA runs in F16 (e4m3 -> f16 is one instruction
 * per pair, -> bf16 four; BF16 q is converted once per block: q_to_f16). The fragment layouts
 * (docs/PERFORMANCE.md#fp8-kv, checked on the host by bench/diag/fp8_fragments.py):
 *   K: ldmatrix of 8 keys x 16 bytes gives lane (g, t) depths 4t .. 4t + 3 of key g, so the
 *      k16 step takes its depths in the order PI = 0 1 4 5 8 9 12 13 2 3 6 7 10 11 14 15, and
 *      Q's A fragments follow PI (one 8-byte load per row and step).
 *   V: ldmatrix.trans of 8 keys x 16 bytes gives lane (g, t) keys 2t, 2t + 1 at dims 2g, 2g + 1;
 *      one byte permute pairs the keys per dim: the B fragments of an even-dims and an odd-dims
 *      n8 tile. O's tiles 2c and 2c + 1 hold the even and odd dims of 16-dim chunk c, so a lane
 *      holds dims 16c + 4t .. 16c + 4t + 3 of its rows, which the epilogue writes in order.
 * An earlier FP8 instance converted each tile into a 16-bit tile in shared memory, on the
 * loop's chain, and ran at 0.76-0.96 of the BF16 cache's speed (docs/PERFORMANCE.md#fp8-kv). */
constexpr int RAW_RS = W + 16;         /* raw row stride in bytes: 37 16-byte chunks (odd), so the
                                        * 8 row addresses of every ldmatrix fall in distinct bank
                                        * groups */
constexpr int RAW_TILE_BYTES = BN * RAW_RS;
constexpr int QSS8 = DL + 16;          /* FP8: latent Q staging stride, 264 words (8 mod 32): the
                                        * 8-byte fragment loads of a half warp hit 32 banks */
constexpr int QPS8 = DR + 16;          /* FP8: rope Q stride, 40 words, likewise */
constexpr int STAGE8_STRIDE = COLS_Q + 16; /* FP8: output staging stride (16-bit elements) */
static_assert(QUARTERS * 8 * STAGE8_STRIDE * 2 <= RAW_TILE_BYTES && RAW_TILE_BYTES % 16 == 0,
              "one raw KV buffer stages a group's output");

/* The split kernel's dynamic shared memory, region by region: byte offsets from the base, in
 * this order (each region's size is a multiple of 16 bytes, so every one stays 16-byte aligned
 * for cp.async, ldmatrix and the float4 exchange). */
template <bool FP8> struct flash_smem_layout {
    /* one KV tile buffer: BN rows of RS 16-bit elements (W padded by 8, so that the 8 row
     * addresses of every ldmatrix fall in distinct bank groups), or of RAW_RS e4m3 bytes */
    static constexpr size_t KV_TILE = FP8 ? (size_t)RAW_TILE_BYTES : (size_t)SKV_ELEMS * 2;
    /* the KV ring: STAGES tiles, gathered AHEAD tiles ahead by cp.async; also the prologue's
     * latent Q staging (below) and the epilogue's output staging (a free buffer) */
    static constexpr size_t KV = 0, KV_BYTES = STAGES * KV_TILE;
    /* the S reduce-scatter: fp32 partial scores [grp][dest warp][slot][lane] of float4 */
    static constexpr size_t X = KV + KV_BYTES, X_BYTES = (size_t)SX_FLOATS * 4;
    /* P, the A operand of P V: [grp][GROUP_ROWS][PS] 16-bit weights */
    static constexpr size_t P = X + X_BYTES, P_BYTES = (size_t)SP_ELEMS * 2;
    /* latent Q staging in the prologue: [BM][QSS], over KV buffers 1.. and the exchange area
     * (FP8: and the P tiles and beyond, its raw buffers being half the size), which follow each
     * other and are unused until tile 1's gather and the first exchange */
    static constexpr int QS_STRIDE = FP8 ? QSS8 : QSS;
    static constexpr size_t Q_STAGE = KV + KV_TILE,
                            Q_STAGE_END = Q_STAGE + (size_t)BM * QS_STRIDE * 2;
    /* the rope part of Q, the rope k-step's A operand in every tile: [BM][QPS] */
    static constexpr int QP_STRIDE = FP8 ? QPS8 : QPS;
    static constexpr size_t Q = FP8 ? Q_STAGE_END : P + P_BYTES,
                            Q_BYTES = (size_t)BM * QP_STRIDE * 2;
    /* row maxima of a vote's exchange: [grp][warp][16 rows] */
    static constexpr size_t MAX = Q + Q_BYTES, MAX_BYTES = (size_t)SROW_FLOATS * 4;
    /* row sums of the two key halves, met in the epilogue: [grp][warp][16 rows] */
    static constexpr size_t L = MAX + MAX_BYTES, L_BYTES = (size_t)SROW_FLOATS * 4;
    static constexpr size_t TOTAL = L + L_BYTES;
    static_assert(FP8 ? Q_STAGE_END >= P + P_BYTES : Q_STAGE_END <= P,
                  "latent Q staging ends before the P tiles (FP8: before rope Q)");
    static_assert(TOTAL <= MLAV_SM120_SMEM_LIMIT, "flash kernel must fit sm_120");
    static_assert(X % 16 == 0 && Q % 16 == 0, "alignment");
};
static_assert(flash_smem_layout<false>::TOTAL == SMEM_BYTES,
              "the layout is the launch's shared memory");

constexpr float LN2 = 0.6931471805599453f;
/* log2 units a score may exceed the reference max before O is rescaled: P stays <= 256, far
 * inside BF16/F16 range, and the row sum (at most 256 per key) inside fp32 */
constexpr float RESCALE_SLACK = 8.0f;

/* The gather gives each KV row of a tile to 16 threads (256 threads / 16 rows): a thread looks
 * up one page id per tile and issues its 16-byte chunks part, part + 16, ... (5 or 4 of the 72)
 * at fixed offsets, so 16 neighbours cover 256 contiguous bytes per step. */
constexpr int GATHER_TPR = NT / BN;                                  /* threads per KV row: 16 */
static_assert(NT % BN == 0, "gather mapping");

/* The page id of KV row j (0 past kv_end, where nothing is read). Issued one tile before the
 * gather that uses it, into the one register the loop carries (pg_next). With two ids in
 * flight (two tiles ahead) ptxas rotated them through register copies, which can wait for the
 * load; one is faster from 16k on (docs/PERFORMANCE.md#decisions). */
__device__ __forceinline__ int32_t lookup_page(const int32_t *ptab, int j, int kv_end,
                                               const mlav_flash_params &p)
{
    return j < kv_end ? ptab[mlav_fastdiv_div((uint32_t)j, p.page_div)] : 0;
}

/* Gather this thread's share of KV row j into row `row` of a stage buffer. Rows past kv_end are
 * zero-filled without reading (their scores are masked to -inf, and 0 * 0 keeps P V clean;
 * the source address is then row 0 of the pool, never read); a page id outside the pool reads
 * the plan's NaN row, never out of bounds. Branch-free 32-bit index arithmetic, one 64-bit
 * product: the gather runs every tile for every thread, so its address code is on the loop's
 * path (docs/PERFORMANCE.md#decisions). kv_row_src is that
 * address rule, for the 16-bit gather and the FP8 one (elements E: T, or e4m3 bytes), where
 * page_elems and W count elements either way. */
template <typename E>
__device__ __forceinline__ const E *kv_row_src(const E *kv, int32_t page, int j, bool live,
                                               const mlav_flash_params &p)
{
    const uint32_t pg = (uint32_t)page, uj = (uint32_t)j;
    const uint32_t slot = uj - mlav_fastdiv_div(uj, p.page_div) * (uint32_t)p.page_size;
    const E *base = live && pg >= p.page_limit ? static_cast<const E *>(p.nan_row) : kv;
    const size_t off = live && pg < p.page_limit ? (size_t)pg * p.page_elems + slot * W : 0;
    return base + off;
}

/* An FP8 cache (E = uint8_t) goes the same way, in 16-byte chunks of 16 e4m3 bytes (36 per row,
 * so a thread issues 3 or 2), into rows RAW_RS bytes apart; a page id outside the pool reads the
 * plan's NaN row (0x7f bytes). */
template <typename E>
__device__ __forceinline__ void gather_kv_row(E *dst, const E *kv, int32_t page, int j,
                                              int kv_end, const mlav_flash_params &p, int row,
                                              int part)
{
    constexpr bool RAW = sizeof(E) == 1;
    constexpr int CE = 16 / (int)sizeof(E); /* elements per 16-byte chunk */
    constexpr int NCH = W / CE, STEPS = (NCH + GATHER_TPR - 1) / GATHER_TPR;
    E *d = dst + row * (RAW ? RAW_RS : RS) + part * CE;
    const bool live = j < kv_end;
    const E *src = kv_row_src(kv, page, j, live, p) + part * CE;
    const int bytes = live ? 16 : 0;
#pragma unroll
    for (int k = 0; k < STEPS; k++)
        if (part + k * GATHER_TPR < NCH)
            mlav::cp_async16(d + k * GATHER_TPR * CE, src + k * GATHER_TPR * CE, bytes);
}

/* The two K B fragments (b0, b1) of one n8 tile and k16 step from the register an ldmatrix of
 * raw bytes gave this lane: depths 4t, 4t + 1 are k = 2t, 2t + 1 and depths 4t + 2, 4t + 3 are
 * k = 2t + 8, 2t + 9 (the order PI). */
__device__ __forceinline__ void k_fragment_fp8(uint32_t r, uint32_t &b0, uint32_t &b1)
{
    mlav::e4m3x4_to_half2x2(r, b0, b1);
}

/* The V B fragments of the even-dims (b[0], b[1]) and odd-dims (b[2], b[3]) n8 tiles of one
 * 16-dim chunk, from the two registers an ldmatrix.trans of raw bytes gave this lane (keys 0-7
 * and 8-15): each holds keys 2t, 2t + 1 (halves) at dims 2g, 2g + 1 (bytes), and the permute
 * pairs the keys per dim. */
__device__ __forceinline__ void v_fragments_fp8(uint32_t r0, uint32_t r1, uint32_t b[4])
{
    mlav::e4m3x4_to_half2x2(__byte_perm(r0, 0u, 0x3120), b[0], b[2]);
    mlav::e4m3x4_to_half2x2(__byte_perm(r1, 0u, 0x3120), b[1], b[3]);
}


/* BF16 q over an FP8 cache: the block's Q (the latent A fragments in `qf`, and rope Q in `sQ`,
 * rows QPS8 apart) from BF16 to F16, times 2^-shift, so that the block's largest |q| lands in
 * [2^14, 2^15) (F16 ends at 65504, BF16 at 3.4e38); returns 2^shift, which the scores take back
 * before the score scale (two multiplies, not one folded factor, so that no input makes the
 * factor overflow where the scores do not). Exact for every element down to 2^-28 of the block's
 * largest (a normal F16 holds BF16's 8 significant bits); smaller ones round as F16 subnormals,
 * far below the rounding of the dot product they enter. The largest is taken over finite values; Inf and
 * NaN convert as themselves. `red`: 16 words of shared scratch. Two __syncthreads (three with
 * Inf or NaN in Q): the maximum, and the rope chunks, which every thread converts in place for
 * the whole block. */
__device__ __forceinline__ float q_to_f16(uint32_t (&qf)[MT][KSTEPS][4], __half *sQ,
                                          uint32_t *red, int tid, int warp, int lane)
{
    /* the block's largest |x| as BF16 bits (|x| orders like its bits), per 16-bit half with one
     * packed max per word, then over the block (red[8 k + warp] in round k); `finite`: only
     * values below Inf count (the second round, taken only by a block whose Q has Inf or NaN) */
    const auto block_max = [&](bool finite, int round) {
        const auto fold = [finite](uint32_t m, uint32_t w) {
            w &= 0x7fff7fffu;
            if (finite) /* an Inf or NaN half counts as 0 */
                w &= __vcmpltu2(w, 0x7f807f80u);
            return __vmaxu2(m, w);
        };
        uint32_t m2 = 0;
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    m2 = fold(m2, qf[i][kk][r]);
#pragma unroll
        for (int c = 0; c < QPE_CHUNKS / NT; c++) {
            const int idx = tid + c * NT, r = idx / (DR / 8), ch = idx % (DR / 8);
            const uint4 v = *reinterpret_cast<const uint4 *>(sQ + r * QPS8 + ch * 8);
            m2 = fold(fold(fold(fold(m2, v.x), v.y), v.z), v.w);
        }
        uint32_t m = __reduce_max_sync(0xffffffffu, max(m2 & 0xffffu, m2 >> 16));
        if (lane == 0)
            red[8 * round + warp] = m;
        __syncthreads();
#pragma unroll
        for (int w = 0; w < NT / 32; w++)
            m = max(m, red[8 * round + w]);
        return m;
    };
    uint32_t mb = block_max(false, 0);
    if (mb >= 0x7f80u) /* block-uniform */
        mb = block_max(true, 1);
    /* |x| < 2^(e - 126) for BF16 biased exponent e, so 2^-(e - 141) puts the largest in
     * [2^14, 2^15); at least -126 so that both powers of two stay normal fp32 */
    const int shift = max((int)(mb >> 7) - 141, -126);
    const float down = __uint_as_float((uint32_t)(127 - shift) << 23);
    const auto cvt = [down](uint32_t w) { /* two BF16 to two F16, times 2^-shift */
        const __half2 h = __floats2half2_rn(__uint_as_float(w << 16) * down,
                                            __uint_as_float(w & 0xffff0000u) * down);
        return *reinterpret_cast<const uint32_t *>(&h);
    };
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                qf[i][kk][r] = cvt(qf[i][kk][r]);
#pragma unroll
    for (int c = 0; c < QPE_CHUNKS / NT; c++) { /* this thread's rope chunks, in place */
        const int idx = tid + c * NT, r = idx / (DR / 8), ch = idx % (DR / 8);
        uint4 *q = reinterpret_cast<uint4 *>(sQ + r * QPS8 + ch * 8);
        const uint4 v = *q;
        *q = make_uint4(cvt(v.x), cvt(v.y), cvt(v.z), cvt(v.w));
    }
    __syncthreads(); /* rope Q is F16 for every warp */
    return __uint_as_float((uint32_t)(127 + shift) << 23);
}

/* The score factor of BF16 q over an FP8 cache, 2^shift x scale_log2 x kv_scale (unshift =
 * 2^shift from q_to_f16, shift in [-126, 113]), as the two factors the scores are multiplied by:
 * a power of two `a` and `b`, splitting the factor's exponent in halves. Taken in the order
 * 2^shift, then scale_log2 x kv_scale, a large shift with a small kv_scale overflowed the
 * scores to inf (and the softmax to NaN) where their true values are small: q near BF16's top
 * over a kv_scale of 2^-126 scores 2^33 x 2^113 before the scale. With halves, neither product
 * passes fp32's range unless the score itself does (|dot| < 2^35 with F16 operands), and a
 * factor that underflows belongs to scores far below any softmax's resolution. Per block, in
 * the prologue. A bad kv_scale (NaN, from kv_scale_read) stays NaN. */
__device__ __forceinline__ void fp8_score_factors(float unshift, float scale_log2, float kv_scale,
                                                  float &a, float &b)
{
    int e;
    const float m = frexpf(kv_scale, &e); /* kv_scale = m 2^e, m in [0.5, 1) */
    const int E = ((int)(__float_as_uint(unshift) >> 23) - 127) + e, h = E / 2;
    a = ldexpf(1.0f, E - h);
    b = ldexpf(scale_log2 * m, h);
}


/* Zero the Inf and NaN elements of one V fragment (four registers of two elements each), on
 * tiles with draft rows or rows past the split end. Exact, because c_kv is also the key: a
 * non-finite c_kv element makes that key's score NaN or +-inf for every row, so a row that sees
 * the key comes out NaN (or gives it weight 0 at -inf) through the softmax, and a row that does
 * not has it masked; no row needs the value itself. Without this, P = 0 times NaN on the tensor
 * cores would carry a hidden draft row's NaN into rows that do not see it. Done on the fragment
 * in registers, so the tile in shared memory is never written after the gather (zeroed in place
 * between two block barriers, racecheck intermittently reported that pass against the other
 * group's P V reads; docs/PERFORMANCE.md#decisions). */
template <typename T> __device__ __forceinline__ void zero_nonfinite_fragment(uint32_t r[4])
{
    const uint32_t m = mlav::mma_type<T>::exp_mask;
#pragma unroll
    for (int h = 0; h < 4; h++) {
        const uint32_t lo = (r[h] & m) == m ? 0xffff0000u : 0xffffffffu;
        const uint32_t hi = ((r[h] >> 16) & m) == m ? 0x0000ffffu : 0xffffffffu;
        r[h] &= lo & hi;
    }
}

/* The P of this thread's four scores (rows r, r + 8 x two keys) against the reference maxima;
 * `over` says whether a score passed its reference by more than RESCALE_SLACK. */
__device__ __forceinline__ void softmax_weights(const float sv[4], const float ref[2], float pv[4],
                                                bool &over)
{
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float r = ref[e >> 1];
        over |= sv[e] > r + RESCALE_SLACK;
        pv[e] = mlav::exp2_fast(sv[e] - (r == -INFINITY ? 0.0f : r)); /* no -inf - -inf */
    }
}

/* The item a block of a plan for limits' fixed grid runs, or -1 past the step's schedule (the
 * step header sits just before the items, schedule_step.h; the rule is
 * mlav_step_item_of_block). A step of at most half as many blocks as SMs runs them one per TPC,
 * on the grid's even blocks (p.step_spread). The work distributor gives a grid's first round of
 * blocks one per SM, consecutive blocks to the two SMs of a TPC, so the leading blocks of a grid
 * larger than the step pair up on half the TPCs, where a grid of the step's own size spreads
 * one per TPC, and a small step ran slower than the exact plan (docs/PERFORMANCE.md#engine-steps).
 * Branch-free with the one parameter: with a select between the two index forms, or a second
 * parameter, ptxas laid out the whole STEP instance anew (bench/diag/sass_identity.py), and that
 * instance ran slower (docs/PERFORMANCE.md#engine-steps). */
__device__ __forceinline__ int32_t step_item_index(const mlav_flash_params &p)
{
    /* a header another plan (or no update) wrote counts no item: its step is laid out for other
     * limits (the owner shares the header's 64 bytes, and so a line, with the count) */
    const mlav_step_header *h = reinterpret_cast<const mlav_step_header *>(p.items) - 1;
    const bool mine = __ldg(reinterpret_cast<const unsigned long long *>(&h->owner)) ==
                      p.step_owner;
    const int32_t ix = mlav_step_item_of_block(blockIdx.x, mine ? __ldg(&h->n_items) : 0,
                                               (uint32_t)p.step_spread);
    /* an item past the plan's limits (a workspace written over) runs nothing either: checked
     * here, before the block's state exists, and not after the item's load in the kernel, where
     * ptxas allocated the whole STEP instance anew and it ran 1.10-1.14 of 3445dec's time at
     * long prefixes (docs/PERFORMANCE.md#engine-steps) */
    return ix >= 0 && mlav_step_item_fits(p.items[ix], p) ? ix : -1;
}

/* ALL_GROUPS: a group whose 32 rows lie past the request's (H x q_len not a multiple of 64)
 * still runs the loop's MMAs, on the zero Q rows the prologue loaded, and writes nothing. With
 * `active` a compile-time true the loop has no branches around S, the exchange, the softmax and
 * P V, and ptxas schedules it as one piece, faster from prefix 4096 on
 * (docs/PERFORMANCE.md#decisions). A block's time is that of its full groups anyway, as long as
 * some block has two (the plan's all_groups); the skipping instance is for plans where none does
 * (every request's H x q_len <= 32), where an idle group would take tensor time from the only
 * working one. */
/* STEP: the instance of plans for limits, whose fixed grid runs past the step's schedule; a
 * block past it exits on the step header's count, a read that every block of an SM shares
 * (through L1), rather than on its own item, which would be a miss each (step_item_index). A
 * separate instance because the check alone makes ptxas allocate the main loop differently (4
 * of ~3,300 instructions more, the longest identical run 592 instead of the whole loop,
 * bench/diag/sass_identity.py on sm_90), so plans for one problem keep the code they were
 * measured with. */
/* FP8: the instance of an FP8 E4M3 cache (raw tiles converted in registers, see RAW_RS; the
 * scale). Its products run in F16 (MmaT), also for BF16 q (q_to_f16); q and out stay T. */
/* ROWS: the instance of a page table shared by every request (mlav_tensors.page_table_rows):
 * the row index's load before the first page lookup made ptxas allocate the whole kernel anew,
 * and the BF16 instances slower, with or without a row index given
 * (docs/PERFORMANCE.md#page-rows), so the runs without one keep their code. */
template <typename T, bool FP8, bool ALL_GROUPS, bool STEP, bool ROWS>
__global__ void __launch_bounds__(NT, 1) flash_verify_kernel(const mlav_flash_params p)
{
    using MmaT = std::conditional_t<FP8, __half, T>; /* the MMA operands' type (Q, K, P, V) */
    using MTY = mlav::mma_type<MmaT>;
    using OTY = mlav::mma_type<T>; /* the output's */
    const int32_t step_ix = STEP ? step_item_index(p) : 0;
    if (STEP && step_ix < 0)
        return; /* past the step's schedule */
    extern __shared__ __align__(16) unsigned char smem[];
    using SL = flash_smem_layout<FP8>;
    T *sKV = reinterpret_cast<T *>(smem + SL::KV);
    uint8_t *sKV8 = smem + SL::KV; /* FP8: the raw ring */
    float *sX = reinterpret_cast<float *>(smem + SL::X);
    MmaT *sP = reinterpret_cast<MmaT *>(smem + SL::P);
    T *sQ = reinterpret_cast<T *>(smem + SL::Q); /* rope part of Q: [BM][SL::QP_STRIDE] */
    float *sMax = reinterpret_cast<float *>(smem + SL::MAX);
    float *sL = reinterpret_cast<float *>(smem + SL::L);

    mlav::launch_dependents(); /* the combine may launch now; it waits for this grid's end */
    /* blockIdx.x read here, not above, keeps the non-STEP instances' sm_120 code as it was */
    const mlav_split_item item = p.items[STEP ? (uint32_t)step_ix : blockIdx.x];
    const int tid = threadIdx.x, lane = tid & 31;
    /* through a shuffle, so that ptxas can prove the warp index and everything derived from it
     * (group, quarter, barrier ids, row offsets) warp-uniform and keep it in uniform registers.
     * Together with V fragments in pairs (P V below) it is faster at long prefixes; neither
     * change alone paid (docs/PERFORMANCE.md#decisions). */
    const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    const int grp = warp / QUARTERS, dq = warp % QUARTERS;
    const int own_m = dq >> 1, own_n = dq & 1; /* the S block this warp finishes */
    const int g = lane >> 2, qd = lane & 3;    /* MMA fragment row and column pair */
    const int b = item.b;
    const int q_start = item.q_start, prefix = item.prefix;
    const int M = item.q_len * p.H; /* folded rows of this request */
    const int m0 = item.mtile * BM;
    const int gm0 = m0 + grp * GROUP_ROWS; /* this group's first row */
    const int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const int n_tiles = (kv_end - kv_begin + BN - 1) / BN;
    const T *kv = static_cast<const T *>(p.kv);
    const uint8_t *kv8 = static_cast<const uint8_t *>(p.kv); /* FP8 only */
    /* FP8: the scale multiplies the scores (with softmax_scale) and the output (through inv in
     * the epilogue), in fp32 outside the products */
    const float fp8_scale = FP8 ? mlav::kv_scale_read(p.kv_scale_ptr, p.kv_scale) : 1.0f;
    float fp8_scale_log2 = FP8 ? p.scale_log2 * fp8_scale : 0.0f;
    /* BF16 q over an FP8 cache: the power of two q_to_f16 took out of Q, put back into the scores
     * (with fp8_scale_log2: fp8_score_factors) */
    constexpr bool Q_TO_F16 = FP8 && !std::is_same<T, __half>::value;
    float q_unshift = 1.0f;
    const T *qg = static_cast<const T *>(p.q) + (size_t)q_start * p.H * W;
    const int32_t *ptab = ROWS ? mlav_page_row_dev(p.page_table, p.page_table_rows,
                                                   p.page_table_num_rows, p.max_pages,
                                                   p.bad_pages, b)
                               : p.page_table + (size_t)b * p.max_pages;
    /* a group past the request's rows skips the MMAs unless ALL_GROUPS; its warps still gather
     * and meet every "full" barrier of the other group. Computing, it writes nothing: the
     * epilogue writes rows below M only, and its rows see Q = 0 (their scores, NaN where a key
     * holds Inf or NaN, stay in its own rows, its own vote and its own exchange). */
    const bool active = ALL_GROUPS || gm0 < M;
    const int bar = bar_group(grp); /* the group's named barrier */

    /* The prologue's page-id lookups are issued first; the loop keeps one a tile ahead. */
    const int g_row = tid / GATHER_TPR, g_part = tid % GATHER_TPR;
    int32_t pg_first[AHEAD];
#pragma unroll
    for (int s = 0; s < AHEAD; s++)
        pg_first[s] = lookup_page(ptab, kv_begin + s * BN + g_row, kv_end, p);
    int32_t pg_next = lookup_page(ptab, kv_begin + AHEAD * BN + g_row, kv_end, p);

    /* Rope Q of the block's 64 rows into shared memory (rows past the request zero-filled), in
     * the first cp.async group. Q rows of a request are contiguous: (token, head) folds to row
     * q_start * H + m. */
#pragma unroll
    for (int c = 0; c < QPE_CHUNKS / NT; c++) {
        const int idx = tid + c * NT, r = idx / (DR / 8), ch = idx % (DR / 8);
        const bool ok = m0 + r < M;
        mlav::cp_async16(sQ + r * SL::QP_STRIDE + ch * 8,
                         qg + (ok ? (size_t)(m0 + r) * W + DL + ch * 8 : 0), ok ? 16 : 0);
    }

    /* Latent Q (64 rows x 512) is staged in shared memory by cp.async, 16 coalesced 16-byte
     * copies per thread, then read into the A fragments with 4-byte shared loads. Loaded straight
     * from global memory it took 64 four-byte loads per thread, each touching 8 rows, and the
     * first S MMA waited on them. Read back by ldmatrix instead of 4-byte loads, the prologue was
     * as fast but the loop slower: ldmatrix writes aligned register quads, and ptxas then
     * allocated the loop differently (docs/PERFORMANCE.md#ptxas). The
     * staging area is KV buffers 1-3 and the S exchange area (FP8: and the P tiles and beyond),
     * contiguous and unused until tile 1's gather and the first exchange; tile 0's gather goes
     * to buffer 0 meanwhile, tile 1's after the reads. */
    constexpr int QS_STRIDE = SL::QS_STRIDE;
    T *const qs = reinterpret_cast<T *>(smem + SL::Q_STAGE); /* [BM][QS_STRIDE] */
#pragma unroll
    for (int c = 0; c < QL_CHUNKS / NT; c++) {
        const int idx = tid + c * NT, r = idx / (DL / 8), ch = idx % (DL / 8);
        const bool ok = m0 + r < M;
        mlav::cp_async16(qs + r * QS_STRIDE + ch * 8,
                         qg + (ok ? (size_t)(m0 + r) * W + ch * 8 : 0), ok ? 16 : 0);
    }
    mlav::cp_async_commit(); /* rope Q and latent Q */
    if constexpr (FP8)
        gather_kv_row(sKV8, kv8, pg_first[0], kv_begin + g_row, kv_end, p, g_row, g_part);
    else
        gather_kv_row(sKV, kv, pg_first[0], kv_begin + g_row, kv_end, p, g_row, g_part);
    mlav::cp_async_commit(); /* tile 0 */
    mlav::cp_async_wait<1>();
    __syncthreads(); /* every thread's Q copies have landed */
    /* qf[i] is m-tile i ^ own_m of the group (own block first); the A fragment of k-step kk
     * holds rows g, g + 8 at columns 2 qd (+1) and 2 qd + 8 (+1) of the warp's quarter (rows 260
     * words apart: the 32 lanes of each load hit 32 distinct banks). FP8: at columns 4 qd .. 4 qd
     * + 3, the depth order PI of the raw K fragments, one 8-byte load per row (rows 264 words
     * apart: conflict-free per half warp). */
    uint32_t qf[MT][KSTEPS][4];
    if constexpr (FP8) {
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const T *q0 = qs + (grp * GROUP_ROWS + (i ^ own_m) * 16 + g) * QS_STRIDE +
                          dq * COLS_Q + qd * 4;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                const uint2 a = *reinterpret_cast<const uint2 *>(q0 + kk * 16);
                const uint2 c = *reinterpret_cast<const uint2 *>(q0 + 8 * QS_STRIDE + kk * 16);
                qf[i][kk][0] = a.x;
                qf[i][kk][1] = c.x;
                qf[i][kk][2] = a.y;
                qf[i][kk][3] = c.y;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const uint32_t *q0 = reinterpret_cast<const uint32_t *>(
                qs + (grp * GROUP_ROWS + (i ^ own_m) * 16 + g) * QSS + dq * COLS_Q + qd * 2);
            const uint32_t *q1 = q0 + 8 * QSS / 2;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                qf[i][kk][0] = q0[kk * 8];
                qf[i][kk][1] = q1[kk * 8];
                qf[i][kk][2] = q0[kk * 8 + 4];
                qf[i][kk][3] = q1[kk * 8 + 4];
            }
        }
    }
    __syncthreads(); /* the staging area is free again */
    if constexpr (Q_TO_F16)
        fp8_score_factors(q_to_f16(qf, reinterpret_cast<__half *>(sQ),
                                   reinterpret_cast<uint32_t *>(sMax), tid, warp, lane),
                          p.scale_log2, fp8_scale, q_unshift, fp8_scale_log2);
    if constexpr (FP8)
        gather_kv_row(sKV8 + RAW_TILE_BYTES, kv8, pg_first[1], kv_begin + BN + g_row, kv_end, p,
                      g_row, g_part);
    else
        gather_kv_row(sKV + SKV_ELEMS, kv, pg_first[1], kv_begin + BN + g_row, kv_end, p, g_row,
                      g_part);
    mlav::cp_async_commit(); /* tile 1 */
    static_assert(AHEAD == 2, "the prologue gathers tiles 0 and 1");

    /* This thread's output rows: o[i][n][2 rr + (0, 1)] is row g + 8 rr of m-tile i ^ own_m,
     * k = 2 i + rr in ref_max; k = 0, 1 are the rows of the S block the warp finishes. */
    float o[MT][COLS_Q / 8][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int n = 0; n < COLS_Q / 8; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    /* reference max of those rows (log2 units: score * scale * log2(e)), the same in all four
     * warps of the group */
    float ref_max[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    float run_sum[2] = {0.0f, 0.0f}; /* the S block's rows, this thread's keys; summed at the end */

    /* per-lane ldmatrix offsets (elements). K, non-transposed: key rows of n-tile own_n first. */
    const int k_off = (((lane & 7) + ((lane >> 4) << 3)) ^ (own_n << 3)) * RS + ((lane >> 3) & 1) * 8;
    const int v_off = ((lane & 7) + ((lane >> 3) & 1) * 8) * RS + dq * COLS_Q + (lane >> 4) * 8;
    /* FP8, in bytes: matrix i of an x4 is keys 8 (i & 1) .. + 7 (K: of n-tile own_n first) at
     * bytes 16 (i >> 1) .. + 15 of the step (K: two k16 steps of both n-tiles; V: the even and
     * odd tiles of two 16-dim chunks) */
    const int k8_off = (((lane & 7) + ((lane >> 3) & 1) * 8) ^ (own_n << 3)) * RAW_RS +
                       (lane >> 4) * 16;
    const int v8_off = ((lane & 7) + ((lane >> 3) & 1) * 8) * RAW_RS + dq * COLS_Q +
                       (lane >> 4) * 16;
    float *xg = sX + grp * (QUARTERS * (QUARTERS - 1) * 32 * 4);
    MmaT *pg = sP + grp * GROUP_ROWS * PS;
    MmaT *p_mine = pg + (own_m * 16 + g) * PS + own_n * 8 + qd * 2;
    /* A fragments from shared memory (P, rope Q): lanes 0-15 rows, lanes 16-31 the k + 8 half */
    const int a_row = lane & 15, a_col = (lane >> 4) * 8;

    /* The two groups meet only through "tile full" barriers, not a block-wide barrier per tile:
     * tile t is full when every thread's copies of it have landed. Each thread waits for its own
     * copies of tile t + 1 in the middle of tile t (before P V) and then arrives, without waiting,
     * at the other group's barrier for that tile; at the head of tile t + 1 it syncs on its own
     * group's, which completes with the other group's 128 arrivals. So a group runs at most about
     * half a tile ahead of the other, and its softmax can overlap the other's MMAs. The same
     * bound makes the buffer reuse safe without an "empty" barrier: a gather at tile t writes the
     * buffer of tile t + AHEAD - STAGES = t - 2, and the other group is then past the middle of
     * tile t - 1. Barrier ids: flash_barrier. */
    mlav::cp_async_wait<AHEAD - 1>(); /* this thread's part of tile 0 (and of rope Q) landed */
    mlav::named_barrier_arrive(bar_full(grp ^ 1, 0), NT);
    /* Group 1 starts once group 0 has its first S, so the groups run staggered (ping-pong): one
     * group's exchange and softmax overlap the other's MMAs, and the full barriers keep the
     * offset bounded (faster than starting together: docs/PERFORMANCE.md#kernel). */
    if (grp == 1 && n_tiles > 0) /* group 0 (always active) arrives in its first tile */
        mlav::named_barrier(BAR_START, NT);
    for (int t = 0; t < n_tiles; t++) {
        mlav::named_barrier(bar_full(grp, t % STAGES), NT); /* tile t visible to this group */
        const T *sK = sKV + (t % STAGES) * SKV_ELEMS;
        const uint8_t *sK8 = sKV8 + (t % STAGES) * RAW_TILE_BYTES; /* FP8 */
        const int j_base = kv_begin + t * BN;
        const bool prefix_only = j_base + BN <= prefix && j_base + BN <= kv_end;

        float s[MT][NTS][4];
        if (active) {
            /* partial S over this warp's depth quarter: the rope k-step (Q from shared memory),
             * then 8 latent k-steps (Q from registers), four chains of 9 MMAs; each K fragment
             * (16 keys x 16 deep, loaded two steps ahead in the source; ptxas keeps one) feeds
             * both m-tiles.
             * s[i][j] is block (m-tile i ^ own_m, n-tile j ^ own_n). */
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int n = 0; n < NTS; n++)
                    s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
            if constexpr (FP8) {
                /* the rope k-step: Q (F16, order PI) by 8-byte loads, K by an ldmatrix.x2 of
                 * bytes; then the 8 latent k-steps, two per ldmatrix.x4 of bytes (loaded two
                 * ahead), converted as they are used */
                uint32_t qa[MT][4];
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    const T *qr = sQ + (grp * GROUP_ROWS + (i ^ own_m) * 16 + g) * QPS8 +
                                  dq * ROPE_Q + qd * 4;
                    const uint2 a = *reinterpret_cast<const uint2 *>(qr);
                    const uint2 c = *reinterpret_cast<const uint2 *>(qr + 8 * QPS8);
                    qa[i][0] = a.x;
                    qa[i][1] = c.x;
                    qa[i][2] = a.y;
                    qa[i][3] = c.y;
                }
                uint32_t rk[2];
                mlav::ldsm_x2(rk, sK8 + k8_off + DL + dq * ROPE_Q);
                const uint8_t *kb8 = sK8 + k8_off + dq * COLS_Q;
                constexpr int KPAIRS = KSTEPS / 2, KP_AHEAD = 2;
                uint32_t braw[KP_AHEAD][4];
#pragma unroll
                for (int kp = 0; kp < KP_AHEAD; kp++)
                    mlav::ldsm_x4(braw[kp], kb8 + kp * 32);
                {
                    uint32_t b[4];
                    k_fragment_fp8(rk[0], b[0], b[1]);
                    k_fragment_fp8(rk[1], b[2], b[3]);
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        MTY::mma(s[i][0], qa[i], b[0], b[1]);
                        MTY::mma(s[i][1], qa[i], b[2], b[3]);
                    }
                }
#pragma unroll
                for (int kp = 0; kp < KPAIRS; kp++) {
                    const int slot = kp % KP_AHEAD;
                    /* b[h]: k-step 2 kp + h, n-tiles 0 ([0], [1]) and 1 ([2], [3]) */
                    uint32_t b[2][4];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        k_fragment_fp8(braw[slot][2 * h], b[h][0], b[h][1]);
                        k_fragment_fp8(braw[slot][2 * h + 1], b[h][2], b[h][3]);
                    }
                    if (kp + KP_AHEAD < KPAIRS)
                        mlav::ldsm_x4(braw[slot], kb8 + (kp + KP_AHEAD) * 32);
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int i = 0; i < MT; i++) {
                            MTY::mma(s[i][0], qf[i][2 * kp + h], b[h][0], b[h][1]);
                            MTY::mma(s[i][1], qf[i][2 * kp + h], b[h][2], b[h][3]);
                        }
                }
            } else {
                const T *kbase = sK + k_off + dq * COLS_Q;
                constexpr int K_AHEAD = 2;
                uint32_t bk[K_AHEAD + 1][4];
                {
                    uint32_t qa[MT][4];
#pragma unroll
                    for (int i = 0; i < MT; i++)
                        mlav::ldsm_x4(qa[i], sQ + (grp * GROUP_ROWS + (i ^ own_m) * 16 + a_row) *
                                                     QPS + dq * ROPE_Q + a_col);
                    mlav::ldsm_x4(bk[K_AHEAD], sK + k_off + DL + dq * ROPE_Q);
#pragma unroll
                    for (int st = 0; st < K_AHEAD; st++)
                        mlav::ldsm_x4(bk[st], kbase + st * 16);
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        MTY::mma(s[i][0], qa[i], bk[K_AHEAD][0], bk[K_AHEAD][1]);
                        MTY::mma(s[i][1], qa[i], bk[K_AHEAD][2], bk[K_AHEAD][3]);
                    }
                }
#pragma unroll
                for (int kk = 0; kk < KSTEPS; kk++) {
                    const int slot = kk % K_AHEAD;
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        MTY::mma(s[i][0], qf[i][kk], bk[slot][0], bk[slot][1]);
                        MTY::mma(s[i][1], qf[i][kk], bk[slot][2], bk[slot][3]);
                    }
                    if (kk + K_AHEAD < KSTEPS)
                        mlav::ldsm_x4(bk[slot], kbase + (kk + K_AHEAD) * 16);
                }
            }
        }
        /* The gather of tile t + 2 goes after the S MMAs are issued, so that its copies queue
         * under them. Issued before S, they filled the memory pipe, and the S ldmatrix address
         * code, which ptxas rebuilds from the thread index (S2R) every tile, waited behind them
         * (docs/PERFORMANCE.md#decisions). */
        if (t + AHEAD < n_tiles) {
            const int j_row = kv_begin + (t + AHEAD) * BN + g_row;
            if constexpr (FP8)
                gather_kv_row(sKV8 + ((t + AHEAD) % STAGES) * RAW_TILE_BYTES, kv8, pg_next, j_row,
                              kv_end, p, g_row, g_part);
            else
                gather_kv_row(sKV + ((t + AHEAD) % STAGES) * SKV_ELEMS, kv, pg_next, j_row,
                              kv_end, p, g_row, g_part);
        }
        pg_next = lookup_page(ptab, kv_begin + (t + AHEAD + 1) * BN + g_row, kv_end, p);
        mlav::cp_async_commit();
        if (active) {
            /* reduce-scatter: block x = 2 i + j (x = 1..3) belongs to warp dq ^ x and goes to
             * its slot x - 1, [dest][slot][lane] of float4 (consecutive lanes, consecutive 16
             * bytes: no bank conflicts); the sum order is fixed, so results are deterministic */
#pragma unroll
            for (int x = 1; x < QUARTERS; x++) {
                const float *v = s[x >> 1][x & 1];
                *reinterpret_cast<float4 *>(xg + (((dq ^ x) * 3 + x - 1) * 32 + lane) * 4) =
                    make_float4(v[0], v[1], v[2], v[3]);
            }
            float sv[4] = {s[0][0][0], s[0][0][1], s[0][0][2], s[0][0][3]};
            mlav::named_barrier(bar, GROUP_THREADS);
            if (grp == 0 && t == 0)
                mlav::named_barrier_arrive(BAR_START, NT);
#pragma unroll
            for (int slot = 0; slot < 3; slot++) {
                const float4 v =
                    *reinterpret_cast<const float4 *>(xg + ((dq * 3 + slot) * 32 + lane) * 4);
                sv[0] += v.x;
                sv[1] += v.y;
                sv[2] += v.z;
                sv[3] += v.w;
            }

            /* scale and mask (split end, tree) */
            if (prefix_only) {
                /* a tile of prefix rows only: every key visible to every row (padding rows hold
                 * Q = 0 and are never written, so they need no mask either) */
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sv[e] = (Q_TO_F16 ? sv[e] * q_unshift : sv[e]) *
                            (FP8 ? fp8_scale_log2 : p.scale_log2);
            } else {
                /* the draft node of each of the S block's two rows, -1 for padding (computed
                 * here, on the few tiles that need it, to spare two registers in the loop) */
                int row_i[2];
#pragma unroll
                for (int rr = 0; rr < 2; rr++) {
                    const int m = gm0 + own_m * 16 + g + rr * 8;
                    row_i[rr] = m < M ? m / p.H : -1;
                }
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int rr = e >> 1, j = j_base + own_n * 8 + qd * 2 + (e & 1);
                    bool vis = j < kv_end && row_i[rr] >= 0;
                    if (vis && j >= prefix) {
                        const int k = j - prefix, i = row_i[rr];
                        vis = mlav_draft_visible(p.tree_mask, p.mask_words, q_start + i, i, k);
                    }
                    sv[e] = vis ? (Q_TO_F16 ? sv[e] * q_unshift : sv[e]) *
                                      (FP8 ? fp8_scale_log2 : p.scale_log2)
                                : -INFINITY;
                }
            }

            /* online softmax, the rule of mlav_rescale_factor (merge.h) in log2 units, against a
             * lazy reference max: P = 2^(s - ref) with the reference every warp of the group
             * already holds. Only when a score passes its reference by more than RESCALE_SLACK
             * (the first tile, or a new maximum) does the group vote, exchange row maxima, move
             * the reference, rescale O and redo P; any reference gives the same softmax, and the
             * lse adds it back. */
            float pv[4];
            bool over = false;
            softmax_weights(sv, ref_max, pv, over);
            *reinterpret_cast<uint32_t *>(p_mine) = MTY::pack(pv[0], pv[1]);
            *reinterpret_cast<uint32_t *>(p_mine + 8 * PS) = MTY::pack(pv[2], pv[3]);
            if (mlav::named_barrier_or(bar, GROUP_THREADS, over)) {
                float tm[2] = {fmaxf(sv[0], sv[1]), fmaxf(sv[2], sv[3])};
#pragma unroll
                for (int rr = 0; rr < 2; rr++) {
                    tm[rr] = fmaxf(tm[rr], __shfl_xor_sync(0xffffffffu, tm[rr], 1));
                    tm[rr] = fmaxf(tm[rr], __shfl_xor_sync(0xffffffffu, tm[rr], 2));
                }
                float *mx = sMax + grp * QUARTERS * 16;
                if (qd == 0) {
                    mx[dq * 16 + g] = tm[0];
                    mx[dq * 16 + g + 8] = tm[1];
                }
                mlav::named_barrier(bar, GROUP_THREADS);
                float alpha[4];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int owner = 2 * ((k >> 1) ^ own_m), r16 = g + 8 * (k & 1);
                    const float tile_max = fmaxf(mx[owner * 16 + r16], mx[(owner + 1) * 16 + r16]);
                    const float new_max = tile_max > ref_max[k] + RESCALE_SLACK
                                              ? fmaxf(ref_max[k], tile_max)
                                              : ref_max[k];
                    alpha[k] =
                        ref_max[k] == -INFINITY ? 0.0f : mlav::exp2_fast(ref_max[k] - new_max);
                    ref_max[k] = new_max;
                }
#pragma unroll
                for (int i = 0; i < MT; i++)
#pragma unroll
                    for (int n = 0; n < COLS_Q / 8; n++) {
                        o[i][n][0] *= alpha[2 * i];
                        o[i][n][1] *= alpha[2 * i];
                        o[i][n][2] *= alpha[2 * i + 1];
                        o[i][n][3] *= alpha[2 * i + 1];
                    }
                run_sum[0] *= alpha[0];
                run_sum[1] *= alpha[1];
                bool unused = false;
                softmax_weights(sv, ref_max, pv, unused);
                *reinterpret_cast<uint32_t *>(p_mine) = MTY::pack(pv[0], pv[1]);
                *reinterpret_cast<uint32_t *>(p_mine + 8 * PS) = MTY::pack(pv[2], pv[3]);
                mlav::named_barrier(bar, GROUP_THREADS);
            }
            run_sum[0] += pv[0] + pv[1];
            run_sum[1] += pv[2] + pv[3];
        }

        /* this thread's part of tile t + 1 has landed: tell the other group */
        mlav::cp_async_wait<AHEAD - 1>();
        if (t + 1 < n_tiles)
            mlav::named_barrier_arrive(bar_full(grp ^ 1, (t + 1) % STAGES), NT);
        /* P (A operand) from the group's P tile, m-tile i ^ own_m; V fragments of 16 keys x 16
         * columns, each feeding both m-tiles. Two instances: tiles with draft rows or rows past
         * the split end also zero the non-finite elements of each V fragment
         * (zero_nonfinite_fragment); the common prefix tile does not pay for it. */
        const auto pv_tile = [&](auto sanitize) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
                mlav::ldsm_x4(pa[i], pg + ((i ^ own_m) * 16 + a_row) * PS + a_col);
            /* the sanitizing instance (a few tiles per split) loads each V fragment one step
             * ahead: its extra registers would otherwise shape the allocation of the whole loop
             * (with three in flight in both instances, long prefixes ran slower:
             * docs/PERFORMANCE.md#decisions) */
            constexpr int PV_STEPS = COLS_Q / 16;
            /* O's tiles 2 st .. 2 st + 3 from the B fragments of two 16-column steps (b0: tiles
             * 2 st and 2 st + 1 in [0, 1] and [2, 3]; b1 the next two), each for both m-tiles */
            const auto mma_two_steps = [&](const uint32_t b0[4], const uint32_t b1[4], int st) {
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    MTY::mma(o[i][2 * st], pa[i], b0[0], b0[1]);
                    MTY::mma(o[i][2 * st + 1], pa[i], b0[2], b0[3]);
                }
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    MTY::mma(o[i][2 * st + 2], pa[i], b1[0], b1[1]);
                    MTY::mma(o[i][2 * st + 3], pa[i], b1[2], b1[3]);
                }
            };
            [[maybe_unused]] constexpr int PV_AHEAD = 1;    /* 16-bit */
            [[maybe_unused]] const T *vbase = sK + v_off; /* 16-bit */
            if constexpr (FP8) {
                /* raw V: one ldmatrix.x4.trans of bytes gives 16-dim chunks st and st + 1, each
                 * as the B fragments of its even ([0], [1]) and odd ([2], [3]) dims, which O's
                 * tiles 2 st and 2 st + 1 take (see RAW_RS) */
                const uint8_t *vb8 = sK8 + v8_off;
                const auto pv_pair = [&](const uint32_t r[4], int st) {
                    uint32_t b0[4], b1[4];
                    v_fragments_fp8(r[0], r[1], b0);
                    v_fragments_fp8(r[2], r[3], b1);
                    if constexpr (decltype(sanitize)::value) {
                        zero_nonfinite_fragment<MmaT>(b0);
                        zero_nonfinite_fragment<MmaT>(b1);
                    }
                    mma_two_steps(b0, b1, st);
                };
                if constexpr (!decltype(sanitize)::value) {
                    /* the common tile: two loads, then 16 MMAs each */
#pragma unroll
                    for (int st = 0; st < PV_STEPS; st += 4) {
                        uint32_t r0[4], r1[4];
                        mlav::ldsm_x4_trans(r0, vb8 + st * 16);
                        mlav::ldsm_x4_trans(r1, vb8 + (st + 2) * 16);
                        pv_pair(r0, st);
                        pv_pair(r1, st + 2);
                    }
                } else {
                    /* a few tiles per split: one load ahead, sanitized, used */
                    uint32_t rv[4];
                    mlav::ldsm_x4_trans(rv, vb8);
#pragma unroll
                    for (int st = 0; st < PV_STEPS; st += 2) {
                        uint32_t r[4] = {rv[0], rv[1], rv[2], rv[3]};
                        if (st + 2 < PV_STEPS)
                            mlav::ldsm_x4_trans(rv, vb8 + (st + 2) * 16);
                        pv_pair(r, st);
                    }
                }
            } else if constexpr (!decltype(sanitize)::value) {
                /* the common tile: V fragments in pairs, two loads then eight MMAs, so the
                 * second load's latency hides under the first fragment's MMAs (written as a
                 * look-ahead ring, ptxas kept one fragment in flight) */
#pragma unroll
                for (int st = 0; st < PV_STEPS; st += 2) {
                    uint32_t b0[4], b1[4];
                    mlav::ldsm_x4_trans(b0, vbase + st * 16);
                    mlav::ldsm_x4_trans(b1, vbase + (st + 1) * 16);
                    mma_two_steps(b0, b1, st);
                }
            } else {
                /* a few tiles per split: each V fragment loaded one step ahead, sanitized, used */
                uint32_t bv[PV_AHEAD][4];
#pragma unroll
                for (int st = 0; st < PV_AHEAD; st++)
                    mlav::ldsm_x4_trans(bv[st], vbase + st * 16);
#pragma unroll
                for (int st = 0; st < PV_STEPS; st++) {
                    const int slot = st % PV_AHEAD;
                    zero_nonfinite_fragment<T>(bv[slot]);
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        MTY::mma(o[i][2 * st], pa[i], bv[slot][0], bv[slot][1]);
                        MTY::mma(o[i][2 * st + 1], pa[i], bv[slot][2], bv[slot][3]);
                    }
                    if (st + PV_AHEAD < PV_STEPS)
                        mlav::ldsm_x4_trans(bv[slot], vbase + (st + PV_AHEAD) * 16);
                }
            }
        };
        if (active) {
            if (prefix_only)
                pv_tile(mlav::bool_constant<false>());
            else
                pv_tile(mlav::bool_constant<true>());
        }
    }
    mlav::cp_async_wait<0>();
    if (!active)
        return;

    /* finish: the row sums of the two key halves meet in shared memory; normalise; write */
    float *lrow = sL + grp * QUARTERS * 16;
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float l = run_sum[rr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (qd == 0)
            lrow[dq * 16 + g + 8 * rr] = l;
    }
    mlav::named_barrier(bar, GROUP_THREADS);
    const bool final_out = item.slot < 0;
    [[maybe_unused]] const mlav::out_scale fp8_out =
        FP8 ? mlav::out_scale_of(fp8_scale) : mlav::out_scale{1.0f, 1.0f, 0};
    float inv[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int mt = (k >> 1) ^ own_m, r16 = g + 8 * (k & 1);
        const float l = lrow[2 * mt * 16 + r16] + lrow[(2 * mt + 1) * 16 + r16];
        inv[k] = l > 0.0f ? 1.0f / l : (l == 0.0f ? 0.0f : l); /* NaN stays NaN */
        if constexpr (FP8) /* a row of no key stays 0; the scale's power of two: fp8_out */
            inv[k] = l == 0.0f ? 0.0f : inv[k] * fp8_out.mant;
        const int m = gm0 + mt * 16 + r16;
        if (m < M && dq == 0 && qd == 0) {
            const float lse = mlav_finish_lse(ref_max[k] * LN2, l);
            if (!final_out)
                p.part_lse[(size_t)item.slot * BM + (m - m0)] = lse;
            else if (p.lse)
                p.lse[(size_t)q_start * p.H + m] = lse;
        }
    }

    /* O goes out through shared memory, 8 rows at a time per warp, so that every global store
     * writes whole 16-byte row pieces: straight from the MMA fragments each store instruction
     * touches 8 rows (8 cache lines), 64 of them per thread. Staged, a quarter of the store
     * requests; as fast at short prefixes and faster from 16k on, though the direct stores' stall
     * samples were mostly off the critical path (docs/PERFORMANCE.md#decisions). The staging area
     * is a KV buffer that neither group reads any more: this group's last tile is done, and the
     * other group, which synced with it on the full barrier of tile n_tiles - 1, is past its S of
     * tile n_tiles - 2; so the buffers of tiles n_tiles - 3 and n_tiles - 4 are free, and with
     * fewer tiles buffers 2 and 3 were never gathered into (the prologue fills 0 and 1). */
    const int free_buf = grp == 0 ? (n_tiles >= 3 ? (n_tiles + 1) % STAGES : 2)
                                  : (n_tiles >= 4 ? n_tiles % STAGES : 3);
    /* FP8: rows STAGE8_STRIDE apart, and each lane writes its 4 consecutive dims of a 16-dim
     * chunk (O's tiles 2c and 2c + 1, even and odd dims) as one 8-byte store */
    constexpr int ST_STRIDE = FP8 ? STAGE8_STRIDE : STAGE_T_STRIDE;
    unsigned char *stage =
        FP8 ? smem + SL::KV + free_buf * RAW_TILE_BYTES + dq * (8 * STAGE8_STRIDE * 2)
            : reinterpret_cast<unsigned char *>(sKV + free_buf * SKV_ELEMS) + dq * STAGE_WARP_BYTES;
    /* this round's O values (m-tile i, elements e0, e0 + 1) into the warp's staging rows, as
     * pairs packed by `pack` */
    const auto stage_o = [&](int i, int e0, auto pack) {
        if constexpr (FP8) {
            uint2 *st = reinterpret_cast<uint2 *>(reinterpret_cast<uint32_t *>(stage) +
                                                  g * (ST_STRIDE / 2) + 2 * qd);
#pragma unroll
            for (int c = 0; c < COLS_Q / 16; c++)
                st[c * 4] = make_uint2(pack(o[i][2 * c][e0], o[i][2 * c + 1][e0]),
                                       pack(o[i][2 * c][e0 + 1], o[i][2 * c + 1][e0 + 1]));
        } else {
            uint32_t *st = reinterpret_cast<uint32_t *>(stage) + g * (ST_STRIDE / 2) + qd;
#pragma unroll
            for (int n = 0; n < COLS_Q / 8; n++)
                st[n * 4] = pack(o[i][n][e0], o[i][n][e0 + 1]);
        }
    };
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int i = k >> 1, e0 = 2 * (k & 1);
        const int row0 = gm0 + (i ^ own_m) * 16 + 8 * (k & 1); /* this round's 8 rows */
        if (row0 >= M)
            continue; /* uniform over the warp */
        const int rows = min(8, M - row0);
        __syncwarp(); /* the previous round's reads are done */
        if (final_out) {
            const float sc = inv[k];
            if constexpr (FP8) {
                const float pw = fp8_out.pw;
                stage_o(i, e0, [sc, pw](float a, float b) {
                    return OTY::pack(a * sc * pw, b * sc * pw);
                });
            } else {
                stage_o(i, e0, [sc](float a, float b) { return OTY::pack(a * sc, b * sc); });
            }
            __syncwarp();
            /* a row is 128 T = 16 lanes x 16 bytes: two rows per instruction */
            T *out = static_cast<T *>(p.out) + ((size_t)q_start * p.H + row0) * DL + dq * COLS_Q;
#pragma unroll
            for (int r = lane >> 4; r < 8; r += 2)
                if (r < rows)
                    *reinterpret_cast<uint4 *>(out + (size_t)r * DL + (lane & 15) * 8) =
                        *reinterpret_cast<const uint4 *>(reinterpret_cast<const T *>(stage) +
                                                         r * ST_STRIDE + (lane & 15) * 8);
        } else {
            /* partial state as fp16, scaled by a power of two per (row, this warp's 128 columns)
             * that puts the block's largest |O / l| in [2^14, 2^15): range-safe for any input, 11
             * significant bits, and half the bytes of fp32 (docs/PERFORMANCE.md#combine). The
             * maximum is taken on the bit patterns (|x| orders like its bits; NaN above Inf), over
             * the lane quad that holds the row. The combine multiplies by part_scale. */
            uint32_t mb = 0;
#pragma unroll
            for (int n = 0; n < COLS_Q / 8; n++)
                mb = max(mb, max(__float_as_uint(o[i][n][e0]) & 0x7fffffffu,
                                 __float_as_uint(o[i][n][e0 + 1]) & 0x7fffffffu));
            mb = __float_as_uint(__uint_as_float(mb) * inv[k]);
            mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
            mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
            /* biased exponent, at least 15 so that the scale below stays a normal fp32 */
            const int ex = max((int)((mb >> 23) & 0xffu), 15);
            float sc = __uint_as_float((uint32_t)(268 - ex) << 23) * inv[k]; /* 2^(141-ex) / l */
            float ps = __uint_as_float((uint32_t)(ex - 14) << 23); /* 2^(ex-141) */
            if constexpr (FP8) {
                /* the scale's power of two 2^pexp goes into part_scale as far as it stays a
                 * normal fp32 (the combine's weights take it: a subnormal one kept a few bits
                 * at kv_scale 2^-126), the rest into the fp16 values, which have 29 binades of
                 * room below 2^15 */
                const int t = ex - 141 + fp8_out.pexp, tc = min(max(t, -126), 127);
                ps = __uint_as_float((uint32_t)(tc + 127) << 23);
                if (t < tc)
                    sc *= ldexpf(1.0f, t - tc);
            }
            if (qd == 0 && row0 + g < M)
                p.part_scale[((size_t)item.slot * BM + (row0 + g - m0)) * QUARTERS + dq] = ps;
            stage_o(i, e0, [sc](float a, float b) {
                const __half2 h = __floats2half2_rn(a * sc, b * sc);
                return *reinterpret_cast<const uint32_t *>(&h);
            });
            __syncwarp();
            /* a row is 128 halves = 16 lanes x 16 bytes: two rows per instruction */
            __half *po = static_cast<__half *>(p.part_o) +
                         ((size_t)item.slot * BM + (row0 - m0)) * DL + dq * COLS_Q;
#pragma unroll
            for (int r = lane >> 4; r < 8; r += 2)
                if (r < rows)
                    *reinterpret_cast<uint4 *>(po + (size_t)r * DL + (lane & 15) * 8) =
                        *reinterpret_cast<const uint4 *>(reinterpret_cast<const __half *>(stage) +
                                                         r * ST_STRIDE + (lane & 15) * 8);
        }
    }
}

template <typename T, bool FP8, bool STEP, bool ROWS> const void *kernel_of(bool all_groups)
{
    return all_groups
               ? reinterpret_cast<const void *>(&flash_verify_kernel<T, FP8, true, STEP, ROWS>)
               : reinterpret_cast<const void *>(&flash_verify_kernel<T, FP8, false, STEP, ROWS>);
}

template <typename T, bool ROWS> const void *kernel_of(bool fp8, bool all_groups, bool step)
{
    if (fp8)
        return step ? kernel_of<T, true, true, ROWS>(all_groups)
                    : kernel_of<T, true, false, ROWS>(all_groups);
    return step ? kernel_of<T, false, true, ROWS>(all_groups)
                : kernel_of<T, false, false, ROWS>(all_groups);
}

template <typename T> const void *kernel_of(bool fp8, bool all_groups, bool step, bool rows)
{
    return rows ? kernel_of<T, true>(fp8, all_groups, step)
                : kernel_of<T, false>(fp8, all_groups, step);
}

/* The split kernel's instance: dtype (BF16 or F16), FP8 cache or not, all groups or not, step or
 * not, a shared page table or not. */
const void *kernel_for(mlav_dtype dtype, bool fp8, bool all_groups, bool step, bool rows)
{
    return dtype == MLAV_DTYPE_BF16 ? kernel_of<__nv_bfloat16>(fp8, all_groups, step, rows)
                                    : kernel_of<__half>(fp8, all_groups, step, rows);
}

} // namespace

size_t mlav_flash_smem_bytes(int kv_fp8)
{
    return kv_fp8 ? flash_smem_layout<true>::TOTAL : flash_smem_layout<false>::TOTAL;
}

mlav_status mlav_flash_prepare(mlav_dtype dtype, mlav_dtype kv_dtype, const mlav_cuda_device *dev,
                               int *blocks_per_sm)
{
    const bool fp8 = kv_dtype == MLAV_DTYPE_FP8_E4M3;
    if (dtype == MLAV_DTYPE_F32)
        return mlav_flash_f32_prepare(fp8, dev, blocks_per_sm);
    /* every instance of the cache's kind: a plan picks one at launch
     * (mlav_flash_launch_opts.all_groups, the plan's kind); their resources are the same, and the
     * schedule is built for the smallest residency of them */
    const size_t smem = mlav_flash_smem_bytes(fp8);
    *blocks_per_sm = 0;
    for (int k = 0; k < 8; k++) {
        const void *f = kernel_for(dtype, fp8, (k & 1) != 0, (k & 2) != 0, (k & 4) != 0);
        mlav_status s = mlav_cuda_prepare_kernel(f, smem, dev, "flash_verify");
        if (s != MLAV_OK)
            return s;
        int n = 0;
        MLAV_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, NT, smem));
        *blocks_per_sm = k == 0 || n < *blocks_per_sm ? n : *blocks_per_sm;
    }
    if (*blocks_per_sm < 1)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "flash_verify cannot be resident on this device (0 blocks per SM)");
    return MLAV_OK;
}

mlav_status mlav_flash_launch(mlav_dtype dtype, const mlav_flash_params *fp,
                              const mlav_flash_launch_opts *lo, int step, cudaStream_t stream)
{
    if (fp->n_items > 0 && dtype == MLAV_DTYPE_F32) {
        mlav_status s = mlav_flash_f32_launch(fp, lo->kv_fp8, stream);
        if (s != MLAV_OK)
            return s;
    } else if (fp->n_items > 0) {
        void *args[1] = {const_cast<mlav_flash_params *>(fp)};
        MLAV_CUDA_TRY(cudaLaunchKernel(
            kernel_for(dtype, lo->kv_fp8 != 0, lo->all_groups != 0, step != 0,
                       fp->page_table_rows != NULL),
            dim3((unsigned)fp->n_items), dim3(NT), args, mlav_flash_smem_bytes(lo->kv_fp8),
            stream));
        MLAV_CUDA_TRY(cudaGetLastError());
    }
    if (fp->n_combine > 0)
        return mlav_combine_launch(dtype, fp, lo, step, stream);
    return MLAV_OK;
}
