/* numeric.h - host-side fp16 / bf16 conversions (round to nearest even), so the
 * harness needs no CUDA headers to make and read 16-bit data. */
#ifndef FA2_NUMERIC_H
#define FA2_NUMERIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fa2.h"

static inline uint32_t fa2_float_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float fa2_bits_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float fa2_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    if (exp == 0x1f) return fa2_bits_float(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {                                                            /* zero / subnormal */
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    return fa2_bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fa2_float_to_half(float f)
{
    uint32_t u = fa2_float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (isnan(f)) return sign | 0x7e00u;
    if (a >= 65520.0f) return sign | 0x7c00u; /* rounds to inf */
    if (a < 6.103515625e-05f) {               /* subnormal half: multiples of 2^-24 */
        float m = nearbyintf(a * 16777216.0f); /* default rounding mode is to-nearest-even */
        return sign | (uint16_t)m;
    }
    uint32_t exp = ((u >> 23) & 0xff) - 112u, man = u & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carries into the exponent correctly */
    return sign | (uint16_t)h;
}

static inline float fa2_bf16_to_float(uint16_t b) { return fa2_bits_float((uint32_t)b << 16); }

static inline uint16_t fa2_float_to_bf16(float f)
{
    uint32_t u = fa2_float_bits(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float fa2_to_float(uint16_t x, fa2_dtype t)
{
    return t == FA2_BF16 ? fa2_bf16_to_float(x) : fa2_half_to_float(x);
}

static inline uint16_t fa2_from_float(float f, fa2_dtype t)
{
    return t == FA2_BF16 ? fa2_float_to_bf16(f) : fa2_float_to_half(f);
}

/* Rounds f to the nearest value the dtype can hold. */
static inline float fa2_round(float f, fa2_dtype t) { return fa2_to_float(fa2_from_float(f, t), t); }

#endif
