/* Scalar conversions between the storage dtypes (BF16, F16) and float, written once for the
 * CPU backends, the oracle, the bundle tools and CUDA host code (device code uses cuda_bf16.h). */
#ifndef MLAV_COMMON_DTYPE_H
#define MLAV_COMMON_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "hd.h"

static MLAV_HD float mlav_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static MLAV_HD uint32_t mlav_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static MLAV_HD float mlav_bf16_to_f32(uint16_t h)
{
    return mlav_bits_to_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays NaN (quiet bit forced so truncation cannot make it Inf). */
static MLAV_HD uint16_t mlav_f32_to_bf16(float f)
{
    uint32_t u = mlav_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static MLAV_HD float mlav_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) /* Inf / NaN */
        return mlav_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return mlav_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return mlav_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest even, with overflow to Inf and gradual underflow. */
static MLAV_HD uint16_t mlav_f32_to_f16(float f)
{
    uint32_t u = mlav_f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half, 2^-14 */
        if (a < 0x33000000u) /* below half the smallest subnormal: zero */
            return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15, keep 23-bit mantissa */
    uint32_t out = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (out & 1u)))
        out++;
    return (uint16_t)(sign | out);
}

/* float8 e4m3fn (bias 7, 3 mantissa bits, no infinities; 0x7f and 0xff are NaN, 448 the
 * largest finite value) to float: exact, since every e4m3 value is a float (and a BF16, and an
 * F16). The KV cache's stored byte; its value is this times kv_scale. */
static MLAV_HD float mlav_e4m3_to_f32(uint8_t b)
{
    const uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
    if ((b & 0x7fu) == 0x7fu)
        return mlav_bits_to_f32(sign | 0x7fc00000u);
    if (e == 0) { /* subnormal: m * 2^-9, exact */
        float v = (float)m * 0.001953125f;
        return sign ? -v : v;
    }
    return mlav_bits_to_f32(sign | ((e + 120u) << 23) | (m << 20));
}

/* float to e4m3fn, round to nearest even, saturating to +-448 (the "satfinite" rule SGLang's and
 * vLLM's quantizers apply by clamping first); NaN gives 0x7f (0xff with the sign). Used by the
 * bundle generator to quantize a cache; the library itself only reads e4m3. */
static MLAV_HD uint8_t mlav_f32_to_e4m3(float f)
{
    const uint32_t u = mlav_f32_to_bits(f);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint8_t)(sign | 0x7fu);
    if (a >= 0x43e00000u) /* >= 448 (and Inf): the largest finite */
        return (uint8_t)(sign | 0x7eu);
    if (a < 0x3c800000u) { /* below 2^-6, the smallest normal: a multiple of 2^-9 */
        const float x = mlav_bits_to_f32(a) * 512.0f; /* exact: a power-of-two scaling */
        uint32_t q = (uint32_t)x;
        const float frac = x - (float)q;
        if (frac > 0.5f || (frac == 0.5f && (q & 1u)))
            q++;
        return (uint8_t)(sign | q); /* q = 8 is 2^-6 itself, the first normal */
    }
    /* normal: round the 23 mantissa bits to 3 (a carry moves into the exponent), then rebias
     * 127 -> 7 */
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    uint32_t bits = (r >> 20) - (120u << 3);
    if (bits > 0x7eu)
        bits = 0x7eu; /* rounded up past 448 */
    return (uint8_t)(sign | bits);
}

/* Element `i` of a dtype-typed buffer as float (dtype: 0 f32, 1 bf16, 2 f16, 3 e4m3 =
 * mlav_dtype; e4m3 unscaled: the caller multiplies by kv_scale). */
static MLAV_HD float mlav_load_as_f32(const void *p, int dtype, size_t i)
{
    if (dtype == 0)
        return ((const float *)p)[i];
    if (dtype == 3)
        return mlav_e4m3_to_f32(((const uint8_t *)p)[i]);
    uint16_t h = ((const uint16_t *)p)[i];
    return dtype == 1 ? mlav_bf16_to_f32(h) : mlav_f16_to_f32(h);
}

/* Store float `v` as element `i` of a dtype-typed buffer, rounding to nearest even (e4m3:
 * saturating, see mlav_f32_to_e4m3). */
static MLAV_HD void mlav_store_from_f32(void *p, int dtype, size_t i, float v)
{
    if (dtype == 0)
        ((float *)p)[i] = v;
    else if (dtype == 3)
        ((uint8_t *)p)[i] = mlav_f32_to_e4m3(v);
    else
        ((uint16_t *)p)[i] = dtype == 1 ? mlav_f32_to_bf16(v) : mlav_f32_to_f16(v);
}

#endif
