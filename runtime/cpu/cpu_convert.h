/*
 * runtime/cpu/cpu_convert.h - scalar fp16 / bf16 <-> fp32 conversions for the cpu backend.
 *
 * Bit-exact IEEE behaviour: fp32 -> half rounds to nearest even, overflows to inf, produces
 * subnormals, keeps NaN a (quiet) NaN. half -> fp32 is exact. Inline so hot loops can use them;
 * the vector kernels use F16C instructions instead where the cpu has them (same results).
 */
#ifndef BURST_CPU_CONVERT_H
#define BURST_CPU_CONVERT_H

#include <stdint.h>
#include <string.h>

static inline uint32_t burst_cpu_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float burst_cpu_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float burst_cpu_bf16_to_f32(uint16_t h)
{
    return burst_cpu_bits_f32((uint32_t)h << 16);
}

static inline uint16_t burst_cpu_f32_to_bf16(float x)
{
    uint32_t u = burst_cpu_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (overflows to inf correctly) */
    return (uint16_t)(u >> 16);
}

static inline float burst_cpu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) /* inf / NaN */
        return burst_cpu_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in fp32 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return burst_cpu_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t burst_cpu_f32_to_f16(float x)
{
    uint32_t u = burst_cpu_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, keep top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf (65504 is the largest finite) */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {   /* below 2^-14: subnormal half or zero */
        if (a < 0x33000000u) /* below 2^-25: rounds to zero (2^-25 itself is a tie to 0) */
            return sign;
        uint32_t e = a >> 23; /* 102 .. 112 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 .. 24: result = m >> shift */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    /* normal: rebias exponent, round the 13 dropped bits to nearest even */
    uint32_t r = a - 0x38000000u; /* exponent - 112 in place */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

#endif /* BURST_CPU_CONVERT_H */
