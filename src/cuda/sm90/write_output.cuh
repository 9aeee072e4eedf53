/* The outputs of the sm_90a kernels in the legal kernel's formats: the partial state's scale, and
 * the producer and seesaw kernels' epilogue (write_output). */
#ifndef MLAV_CUDA_SM90_WRITE_OUTPUT_CUH
#define MLAV_CUDA_SM90_WRITE_OUTPUT_CUH

#include "block.cuh"

namespace mlav90 {

/* the epilogue's staging of a warpgroup's 64 rows x 256 16-bit columns in Q's region: rows 528
 * bytes apart, so that the 8 rows of a fragment store fall in distinct banks */
constexpr uint32_t STAGE_STRIDE = O_COLS * 2 + 16;
constexpr uint32_t STAGE_WG_BYTES = BM * STAGE_STRIDE;
static_assert(MATH_WGS * STAGE_WG_BYTES <= OPERAND_BYTES && STAGE_STRIDE % 16 == 0,
              "both warpgroups' staging fits in Q's region");
constexpr float LN2F = 0.6931471805599453f;

/* The epilogue's partial-state scale of one row and 128 columns (the legal kernel's format,
 * combine.cu reads it): from the largest |O| bits `mb` of the columns and 1 / l, the factor
 * 2^(141 - ex) / l that puts the largest |O / l| in [2^14, 2^15) and the part_scale 2^(ex - 141)
 * that restores it, ex the biased exponent of max |O / l|, at least 15. FP8: `inv` carries the
 * scale's mantissa, and its power of two 2^pexp goes into ps (and sc) by fp8_part_scale. */
template <bool FP8>
__device__ __forceinline__ void partial_scale(uint32_t mb, float inv, int pexp, float &sc,
                                              float &ps)
{
    mb = __float_as_uint(__uint_as_float(mb) * inv);
    const int ex = max((int)((mb >> 23) & 0xffu), 15);
    sc = __uint_as_float((uint32_t)(268 - ex) << 23) * inv;
    ps = __uint_as_float((uint32_t)(ex - 14) << 23);
    if constexpr (FP8)
        mlav::fp8_part_scale(ex, pexp, sc, ps);
}

/* The epilogue of the producer and seesaw kernels, after every wgmma of the block has been waited
 * for: math warpgroup w (0, 1) holds O for output columns [256 w, +256) of the block's 64 rows in
 * `o` (m64n256 fragments), the rows' reference maxima `m_run` (the same in both warpgroups) and
 * the row sums of its own keys `l_run`. The sums meet in `ssum` ([2][64] fp32) through `meet()`,
 * which every thread of both warpgroups calls and returns from once all 256 have (the kernel's
 * choice of barrier), then O / l and lse leave in the legal kernel's formats, O staged in Q's
 * region (named barriers BAR_STAGE0 + w, one warpgroup each). */
template <typename T, typename Kv, int BAR_STAGE0, typename Meet>
__device__ __forceinline__ void write_output(const mlav_flash_params &p, const block_ctx &c,
                                             unsigned char *smem, const float (&o)[O_REGS],
                                             const float (&m_run)[2], const float (&l_run)[2],
                                             const mlav::out_scale &osc, float *ssum, int w,
                                             int warp, int lane, const Meet &meet)
{
    constexpr bool FP8 = scaled_kv<Kv>;
    using OTY = mlav::mma_type<T>; /* out's */
    const int g = lane >> 2, t4 = lane & 3;
    const int r0 = 16 * warp + g; /* this thread's rows: r0 (h = 0) and r0 + 8 (h = 1) */
    /* the row sums of both halves, O / l, lse */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (t4 == 0)
            ssum[w * BM + r0 + 8 * h] = l;
    }
    /* both warpgroups are past their last wgmma: Q's region is free for the staging below */
    meet();
    const bool final_out = c.slot < 0;
    /* O leaves through shared memory: each warpgroup stages its 64 rows x 256 columns of 16-bit
     * values (out's T, or the partial's fp16) in Q's region, rows STAGE_STRIDE bytes apart, then
     * stores whole 512-byte row pieces, a warp a row, 16 bytes a lane. Straight from the
     * fragments a store moved 4 bytes of 8 rows, 64 stores a thread. */
    unsigned char *stg = smem + smem90::Q + (uint32_t)w * STAGE_WG_BYTES;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = r0 + 8 * h, m = c.m0 + r;
        const float l = ssum[r] + ssum[BM + r];
        float inv = l > 0.0f ? 1.0f / l : (l == 0.0f ? 0.0f : l); /* NaN stays NaN */
        if constexpr (FP8) /* a row of no key stays 0; the scale's power of two: osc.pw */
            inv = l == 0.0f ? 0.0f : inv * osc.mant;
        const bool live = m < c.M;
        if (live && w == 0 && t4 == 0) {
            const float lse = mlav_finish_lse(m_run[h] * LN2F, l);
            if (!final_out)
                p.part_lse[(size_t)c.slot * BM + r] = lse;
            else if (p.lse)
                p.lse[(size_t)c.q_start * p.H + m] = lse;
        }
        uint32_t *srow = reinterpret_cast<uint32_t *>(stg + (uint32_t)r * STAGE_STRIDE) + t4;
        if (final_out) {
            if constexpr (FP8) {
#pragma unroll
                for (int j = 0; j < O_REGS / 4; j++)
                    srow[4 * j] = OTY::pack(o[4 * j + 2 * h] * inv * osc.pw,
                                            o[4 * j + 2 * h + 1] * inv * osc.pw);
            } else {
#pragma unroll
                for (int j = 0; j < O_REGS / 4; j++)
                    srow[4 * j] = OTY::pack(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
            }
        } else {
            constexpr int SC_J = MLAV_FLASH_SCALE_COLS / 8; /* n8 tiles a part_scale block */
#pragma unroll
            for (int cb = 0; cb < O_COLS / MLAV_FLASH_SCALE_COLS; cb++) {
                uint32_t mb = 0;
#pragma unroll
                for (int j = cb * SC_J; j < (cb + 1) * SC_J; j++)
                    mb = max(mb, max(__float_as_uint(o[4 * j + 2 * h]) & 0x7fffffffu,
                                     __float_as_uint(o[4 * j + 2 * h + 1]) & 0x7fffffffu));
                mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
                mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
                float sc, ps;
                partial_scale<FP8>(mb, inv, osc.pexp, sc, ps);
                const int col_block = w * (O_COLS / MLAV_FLASH_SCALE_COLS) + cb;
                if (live && t4 == 0)
                    p.part_scale[((size_t)c.slot * BM + r) * (DL / MLAV_FLASH_SCALE_COLS) +
                                 col_block] = ps;
#pragma unroll
                for (int j = cb * SC_J; j < (cb + 1) * SC_J; j++) {
                    const __half2 v = __floats2half2_rn(o[4 * j + 2 * h] * sc,
                                                        o[4 * j + 2 * h + 1] * sc);
                    srow[4 * j] = *reinterpret_cast<const uint32_t *>(&v);
                }
            }
        }
    }
    /* this warpgroup's rows are staged (compile-time ids: a computed one makes ptxas reserve all
     * 16 barriers) */
    if (w == 0)
        named_barrier(BAR_STAGE0, 128);
    else
        named_barrier(BAR_STAGE0 + 1, 128);
    /* warp `warp` stores rows warp, warp + 4, ...: lane i the 16 bytes at columns 8 i .. 8 i + 7
     * of the warpgroup's 256 */
    const size_t row0 = final_out ? (size_t)c.q_start * p.H + c.m0 : (size_t)c.slot * BM;
    uint16_t *dst = static_cast<uint16_t *>(final_out ? p.out : p.part_o) + row0 * DL +
                    O_COLS * w + lane * 8;
#pragma unroll 4
    for (int r = warp; r < BM; r += 4)
        if (c.m0 + r < c.M)
            *reinterpret_cast<uint4 *>(dst + (size_t)r * DL) =
                *reinterpret_cast<const uint4 *>(stg + (uint32_t)r * STAGE_STRIDE + lane * 16);
}

} // namespace mlav90

#endif
