// shaders/convert.glsl - bit-exact fp32 <-> fp16 / bf16 conversions on the integer bits, and an
// fp32 add that keeps subnormals on devices that flush them (included, not compiled alone).
//
// The conversions reproduce runtime/cpu/cpu_convert.h bit for bit: fp32 -> half rounds to nearest
// even, overflows to inf, produces subnormals and keeps NaN a quiet NaN with the CPU's payload
// bits; half -> fp32 is exact. They work on uint bits only, because a device may flush subnormal
// floats to zero (Vulkan leaves it to the driver unless shaderDenormPreserveFloat32, which lavapipe
// lacks) and may canonicalise NaNs in float moves; unpackHalf2x16 / packHalf2x16 do not promise
// round-to-nearest-even or subnormals either. Values are passed as the fp32 bit pattern (uint)
// throughout; dtypes are 0 fp32, 1 fp16, 2 bf16 (burst_dtype_t).

// fp16 bits (low 16 bits of h) -> fp32 bits, exact (burst_cpu_f16_to_f32).
uint f16_to_f32_bits(uint h)
{
    const uint sign = (h & 0x8000u) << 16;
    const uint e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) // inf / NaN: payload moves up unchanged
        return sign | 0x7f800000u | (m << 13);
    if (e != 0u) // normal: rebias 15 -> 127
        return sign | ((e + 112u) << 23) | (m << 13);
    if (m == 0u) // signed zero
        return sign;
    // subnormal m * 2^-24: with its leading one at bit p (0..9) it is 1.f * 2^(p - 24), an
    // fp32 exponent field of p + 103 and the bits below p shifted to the top of the fraction
    const uint p = uint(findMSB(m));
    return sign | ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu);
}

// fp32 bits -> fp16 bits, round to nearest even (burst_cpu_f32_to_f16, step for step).
uint f32_bits_to_f16(uint u)
{
    const uint sign = (u >> 16) & 0x8000u;
    const uint a = u & 0x7fffffffu;
    if (a > 0x7f800000u) // NaN: quiet, keep the top payload bits
        return sign | 0x7e00u | ((a >> 13) & 0x1ffu);
    if (a >= 0x477ff000u) // >= 65520 rounds to inf (65504 is the largest finite half)
        return sign | 0x7c00u;
    if (a < 0x38800000u) {   // below 2^-14: a subnormal half or zero
        if (a < 0x33000000u) // below 2^-25 (and 2^-25 itself, a tie to even 0): zero
            return sign;
        const uint e = a >> 23; // 102 .. 112
        const uint m = (a & 0x7fffffu) | 0x800000u;
        const uint shift = 126u - e; // 14 .. 24: result = m >> shift, rounded
        uint r = m >> shift;
        const uint rem = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
        if (rem > tie || (rem == tie && (r & 1u) != 0u))
            r++;
        return sign | r;
    }
    // normal: rebias the exponent in place, round the 13 dropped bits to nearest even (a carry
    // out of the fraction bumps the exponent, up to inf, as it should)
    uint r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (r >> 13);
}

// fp32 bits -> bf16 bits, round to nearest even (burst_cpu_f32_to_bf16).
uint f32_bits_to_bf16(uint u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep sign and payload top, force quiet
        return (u >> 16) | 0x0040u;
    u += 0x7fffu + ((u >> 16) & 1u); // overflows to inf correctly
    return u >> 16;
}

// Element bits of dtype dt (fp32: the word; half types: the low 16 bits) -> fp32 bits.
uint to_f32_bits(int dt, uint x)
{
    return dt == 0 ? x : dt == 1 ? f16_to_f32_bits(x) : x << 16;
}

// fp32 bits -> element bits of dtype dt.
uint from_f32_bits(int dt, uint x)
{
    return dt == 0 ? x : dt == 1 ? f32_bits_to_f16(x) : f32_bits_to_bf16(x);
}

// a + b on fp32 bits, IEEE round to nearest even with subnormal operands and results kept,
// whether or not the device flushes subnormals (the bits the cpu's `x += y` gives, NaN payloads
// aside: a NaN result is some NaN). Vulkan adds correctly rounded; a device that flushes only
// loses subnormals, so:
//   - when either operand is at least 2^-100 in magnitude (exponent field >= 27), the hardware
//     sum is the IEEE one: a nonzero sum is normal (at least half the larger magnitude, or, for
//     operands within a factor of two, a multiple of 2^-124), so nothing is flushed from it; and
//     a subnormal operand is below half an ulp of the other, so the sum is that other, which a
//     device treating the subnormal as zero gives as well;
//   - otherwise both are below 2^-100: scaled by 2^149 every fp32 value becomes a normal float
//     (a subnormal's fraction k becomes the integer k), the scaled sum rounds at the same bit as
//     the true one (scaling by a power of two commutes with rounding when nothing under- or
//     overflows), and is scaled back on the bits: a normal result by its exponent field, a
//     subnormal one (scaled value below 2^23, an exact integer) as its fraction.
uint add_f32_bits(uint a, uint b)
{
    const uint ea = (a >> 23) & 0xffu, eb = (b >> 23) & 0xffu;
    if (ea >= 27u || eb >= 27u) {
        precise float s = uintBitsToFloat(a) + uintBitsToFloat(b);
        return floatBitsToUint(s);
    }
    const uint up = 149u << 23; // 2^149 on the exponent field
    const float sa = ea == 0u ? float(a & 0x7fffffu) : uintBitsToFloat((a & 0x7fffffffu) + up);
    const float sb = eb == 0u ? float(b & 0x7fffffu) : uintBitsToFloat((b & 0x7fffffffu) + up);
    precise float s = ((a >> 31) != 0u ? -sa : sa) + ((b >> 31) != 0u ? -sb : sb);
    const uint r = floatBitsToUint(s);
    if (((r >> 23) & 0xffu) >= 150u) // |s| >= 2^23: normal after scaling back
        return r - up;
    return (r & 0x80000000u) | uint(abs(s));
}

// The power of two that a bf16 view is scaled by to enter fp16's range (fwd_cmq: cm_nv.glsl
// load8s, elem_cvt.comp), from the bits m of its largest magnitude (elem_amax.comp):
// 2^(14 - e) for a maximum in [2^e, 2^(e+1)), within fp32's normal exponents; 1 for an
// all-zero view or one holding an infinity or NaN (which stay what they are).
float bf16_scale(uint m)
{
    if (m == 0u || m >= 0x7f80u)
        return 1.0;
    const int e = max(int(m >> 7), 1) - 127; // bf16 subnormals as 2^-126
    return uintBitsToFloat(uint(clamp(14 - e, -126, 126) + 127) << 23);
}

// The scale of a bf16 dO in the backward (dq_cmq, dkv_cmq: dP, D and dS are taken in dO's
// scaled units and dS is rounded to fp16): from the bits mo of dO's and mv of V's largest
// magnitude and the head dim d, at most bf16_scale(mo) and low enough that
// |dP|, |D| <= d max|dO| max|V| < 2^14 (D = dO . O, |O| <= max|V|), so |dS| = P |dP - D| < 2^15
// stays within fp16.
float bf16_scale_dout(uint mo, uint mv, int d)
{
    const float s = bf16_scale(mo);
    if (mo == 0u || mo >= 0x7f80u || mv == 0u || mv >= 0x7f80u)
        return s;
    const int eo = max(int(mo >> 7), 1) - 127, ev = max(int(mv >> 7), 1) - 127;
    int l = 0; // ceil(log2 d)
    while ((1 << l) < d)
        l++;
    // max|dO| < 2^(eo + 1), max|V| < 2^(ev + 1): dO's scaled maximum below 2^(13 - ev - l)
    return min(s, uintBitsToFloat(uint(clamp(12 - eo - ev - l, -126, 126) + 127) << 23));
}
