/* The epilogue stage: the row sums of the two key halves meet in shared memory; O is normalised
 * and written, as the final output and lse (a request in one split) or as the split's partial
 * state for combine.cu (fp16 O / l with a power of two per row and 128 columns in part_scale,
 * and part_lse). */
#ifndef MLAV_CUDA_FLASH_EPILOGUE_CUH
#define MLAV_CUDA_FLASH_EPILOGUE_CUH

#include "../../common/merge.h"
#include "../kv_scale.cuh"
#include "../mma.cuh"
#include "traits.cuh"

namespace mlav {
namespace flash {

constexpr float LN2 = 0.6931471805599453f;

/* This round's O values (m-tile i, elements e0, e0 + 1) into the warp's staging rows, as pairs
 * packed by `pack`. FP8: each lane writes its 4 consecutive dims of a 16-dim chunk (O's tiles 2c
 * and 2c + 1, even and odd dims, pv_tile.cuh) as one 8-byte store. */
template <typename Tr, typename Pack>
static __device__ inline void stage_o(unsigned char *const &stage,
                                      const float (&o)[Tr::MT][Tr::COLS_Q / 8][4], int i, int e0,
                                      const int &g, const int &qd, Pack pack)
{
    constexpr int ST_STRIDE = Tr::STAGE_STRIDE, COLS_Q = Tr::COLS_Q;
    if constexpr (Tr::FP8) {
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
}

/* The epilogue's arrays, declared by the kernel (as softmax_regs, softmax.cuh). */
struct epilogue_regs {
    float inv[4];
};

/* Finish the split: lse, then O through shared memory, 8 rows at a time per warp, so that every
 * global store writes whole 16-byte row pieces: straight from the MMA fragments each store
 * instruction touches 8 rows (8 cache lines), 64 of them per thread. Staged, a quarter of the
 * store requests; as fast at short prefixes and faster from 16k on, though the direct stores'
 * stall samples were mostly off the critical path (docs/PERFORMANCE.md#decisions). The staging
 * area is a KV buffer that neither group reads any more: this group's last tile is done, and the
 * other group, which synced with it on the full barrier of tile n_tiles - 1, is past its S of
 * tile n_tiles - 2; so the buffers of tiles n_tiles - 3 and n_tiles - 4 are free, and with fewer
 * tiles buffers 2 and 3 were never gathered into (the prologue fills 0 and 1). `slot`: the
 * item's partial-state slot, < 0 for the final output; `warp`, `tid`: as the kernel's. */
template <typename Tr>
__device__ __forceinline__ void epilogue(const mlav_flash_params &p,
                                         const float (&o)[Tr::MT][Tr::COLS_Q / 8][4],
                                         const float (&ref_max)[4], const float (&run_sum)[2],
                                         float *sL, typename Tr::kv_elem *ring, int slot,
                                         float fp8_scale, int M, int m0, int gm0, int q_start,
                                         int n_tiles, int warp, int tid, int bar, epilogue_regs &er)
{
    /* this thread's coordinates from its indices, as the kernel derives them: given as values,
     * the row-sum and output addresses came out in another form on sm_120 */
    const int lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int grp = warp / Tr::QUARTERS, dq = warp % Tr::QUARTERS, own_m = dq >> 1;
    using T = typename Tr::out_type;
    using OTY = mlav::mma_type<T>;
    constexpr bool FP8 = Tr::FP8;
    constexpr int QUARTERS = Tr::QUARTERS, BM = Tr::BM, DL = Tr::DL, COLS_Q = Tr::COLS_Q;
    constexpr int STAGES = Tr::STAGES;
    float *lrow = sL + grp * QUARTERS * 16;
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float l = run_sum[rr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (qd == 0)
            lrow[dq * 16 + g + 8 * rr] = l;
    }
    mlav::named_barrier(bar, Tr::GROUP_THREADS);
    const bool final_out = slot < 0;
    [[maybe_unused]] const mlav::out_scale fp8_out =
        FP8 ? mlav::out_scale_of(fp8_scale) : mlav::out_scale{1.0f, 1.0f, 0};
    float(&inv)[4] = er.inv;
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
                p.part_lse[(size_t)slot * BM + (m - m0)] = lse;
            else if (p.lse)
                p.lse[(size_t)q_start * p.H + m] = lse;
        }
    }

    const int free_buf = grp == 0 ? (n_tiles >= 3 ? (n_tiles + 1) % STAGES : 2)
                                  : (n_tiles >= 4 ? n_tiles % STAGES : 3);
    constexpr int ST_STRIDE = Tr::STAGE_STRIDE;
    unsigned char *stage = reinterpret_cast<unsigned char *>(ring + free_buf * Tr::KV_TILE_ELEMS) +
                           dq * (8 * ST_STRIDE * 2);
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
                stage_o<Tr>(stage, o, i, e0, g, qd, [sc, pw](float a, float b) {
                    return OTY::pack(a * sc * pw, b * sc * pw);
                });
            } else {
                stage_o<Tr>(stage, o, i, e0, g, qd,
                            [sc](float a, float b) { return OTY::pack(a * sc, b * sc); });
            }
            __syncwarp();
            /* a row is COLS_Q T = 16 lanes x 16 bytes: two rows per instruction */
            T *out = static_cast<T *>(p.out) + ((size_t)q_start * p.H + row0) * DL + dq * COLS_Q;
#pragma unroll
            for (int rw = lane >> 4; rw < 8; rw += 2)
                if (rw < rows)
                    *reinterpret_cast<uint4 *>(out + (size_t)rw * DL + (lane & 15) * 8) =
                        *reinterpret_cast<const uint4 *>(reinterpret_cast<const T *>(stage) +
                                                         rw * ST_STRIDE + (lane & 15) * 8);
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
            if constexpr (FP8) /* the scale's power of two (kv_scale.cuh) */
                mlav::fp8_part_scale(ex, fp8_out.pexp, sc, ps);
            if (qd == 0 && row0 + g < M)
                p.part_scale[((size_t)slot * BM + (row0 + g - m0)) * QUARTERS + dq] = ps;
            stage_o<Tr>(stage, o, i, e0, g, qd, [sc](float a, float b) {
                const __half2 h = __floats2half2_rn(a * sc, b * sc);
                return *reinterpret_cast<const uint32_t *>(&h);
            });
            __syncwarp();
            /* a row is COLS_Q halves = 16 lanes x 16 bytes: two rows per instruction */
            __half *po = static_cast<__half *>(p.part_o) +
                         ((size_t)slot * BM + (row0 - m0)) * DL + dq * COLS_Q;
#pragma unroll
            for (int rw = lane >> 4; rw < 8; rw += 2)
                if (rw < rows)
                    *reinterpret_cast<uint4 *>(po + (size_t)rw * DL + (lane & 15) * 8) =
                        *reinterpret_cast<const uint4 *>(reinterpret_cast<const __half *>(stage) +
                                                         rw * ST_STRIDE + (lane & 15) * 8);
        }
    }
}

} // namespace flash
} // namespace mlav

#endif
