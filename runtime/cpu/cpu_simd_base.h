/*
 * runtime/cpu/cpu_simd_base.h - the portable baseline: VL 4 GNU vectors or scalar C.
 *
 * Part of the cpu_simd.h template: included only from there, once per inclusion for this
 * variant (see cpu_simd.h for what each variant defines).
 */
#define KFN(name) KFN_(name, base)
#define KENTRY
#if defined(__GNUC__)
#define KATTR static inline __attribute__((always_inline))
#else
#define KATTR static inline
#endif

#if defined(__GNUC__) && !defined(BURST_CPU_FORCE_SCALAR) &&                                       \
    (defined(__SSE2__) || defined(__ARM_NEON) || defined(__aarch64__))
#define BURST_CPU_VEC_GNU4 1
#define VL 4
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));

KATTR vf vf_zero(void)
{
    return (vf){0.0f, 0.0f, 0.0f, 0.0f};
}
KATTR vf vf_set1(float x)
{
    return (vf){x, x, x, x};
}
KATTR vf vf_load(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
KATTR void vf_store(float *p, vf v)
{
    memcpy(p, &v, sizeof v);
}
KATTR vf vf_add(vf a, vf b)
{
    return a + b;
}
KATTR vf vf_sub(vf a, vf b)
{
    return a - b;
}
KATTR vf vf_mul(vf a, vf b)
{
    return a * b;
}
KATTR vf vf_fma(vf a, vf b, vf c)
{
    return a * b + c;
}
KATTR vf vf_select(vi m, vf a, vf b)
{
    return (vf)(((vi)a & m) | ((vi)b & ~m));
}
KATTR vf vf_max(vf a, vf b)
{
    return vf_select(a > b, a, b);
}
KATTR vf vf_min(vf a, vf b)
{
    return vf_select(a < b, a, b);
}
KATTR vf vf_div(vf a, vf b)
{
    return a / b;
}
KATTR vf vf_in_range(vf a, vf j, vf lo, vf hi, vf fill)
{
    return vf_select((j >= lo) & (j < hi), a, fill);
}
KATTR vf vf_zero_if_neginf(vf a)
{
    return (vf)((vi)a & ~(a == vf_set1(-__builtin_inff())));
}
KATTR vf vf_exp2(vf x)
{
    vi zero = x < vf_set1(-126.0f), nan = x != x;
    vf x0 = x;
    x = vf_select(x > vf_set1(-126.0f), x, vf_set1(-126.0f));
    x = vf_select(x < vf_set1(127.0f), x, vf_set1(127.0f));
    vf t = x + BURST_CPU_EXP2_MAGIC;
    vf f = x - (t - BURST_CPU_EXP2_MAGIC);
    vf p = vf_set1(BURST_CPU_EXP2_P0);
    p = p * f + BURST_CPU_EXP2_P1;
    p = p * f + BURST_CPU_EXP2_P2;
    p = p * f + BURST_CPU_EXP2_P3;
    p = p * f + BURST_CPU_EXP2_P4;
    p = p * f + BURST_CPU_EXP2_P5;
    p = p * f + 1.0f;
    vi r = (vi)p + ((vi)t << 23);
    return vf_select(nan, x0, (vf)(r & ~zero));
}
KATTR vf vf_load_f16(const uint16_t *p)
{
    return (vf){burst_cpu_f16_to_f32(p[0]), burst_cpu_f16_to_f32(p[1]), burst_cpu_f16_to_f32(p[2]),
                burst_cpu_f16_to_f32(p[3])};
}
KATTR vf vf_load_bf16(const uint16_t *p)
{
    return (vf){burst_cpu_bf16_to_f32(p[0]), burst_cpu_bf16_to_f32(p[1]),
                burst_cpu_bf16_to_f32(p[2]), burst_cpu_bf16_to_f32(p[3])};
}

#else /* plain scalar C */
#define BURST_CPU_VEC_SCALAR 1
#define VL 1
typedef float vf;
typedef int32_t vi;

KATTR vf vf_zero(void)
{
    return 0.0f;
}
KATTR vf vf_set1(float x)
{
    return x;
}
KATTR vf vf_load(const float *p)
{
    return *p;
}
KATTR void vf_store(float *p, vf v)
{
    *p = v;
}
KATTR vf vf_add(vf a, vf b)
{
    return a + b;
}
KATTR vf vf_sub(vf a, vf b)
{
    return a - b;
}
KATTR vf vf_mul(vf a, vf b)
{
    return a * b;
}
KATTR vf vf_max(vf a, vf b)
{
    return a > b ? a : b;
}
KATTR vf vf_min(vf a, vf b)
{
    return a < b ? a : b;
}
KATTR vf vf_div(vf a, vf b)
{
    return a / b;
}
KATTR vf vf_fma(vf a, vf b, vf c)
{
    return a * b + c;
}
KATTR vf vf_in_range(vf a, vf j, vf lo, vf hi, vf fill)
{
    return j >= lo && j < hi ? a : fill;
}
KATTR vf vf_zero_if_neginf(vf a)
{
    return a == -(float)INFINITY ? 0.0f : a;
}
KATTR vf vf_exp2(vf x)
{
    if (x != x)
        return x;
    if (x < -126.0f)
        return 0.0f;
    x = x < 127.0f ? x : 127.0f;
    float t = x + BURST_CPU_EXP2_MAGIC;
    float f = x - (t - BURST_CPU_EXP2_MAGIC);
    float p = BURST_CPU_EXP2_P0;
    p = p * f + BURST_CPU_EXP2_P1;
    p = p * f + BURST_CPU_EXP2_P2;
    p = p * f + BURST_CPU_EXP2_P3;
    p = p * f + BURST_CPU_EXP2_P4;
    p = p * f + BURST_CPU_EXP2_P5;
    p = p * f + 1.0f;
    return burst_cpu_bits_f32(burst_cpu_f32_bits(p) + (burst_cpu_f32_bits(t) << 23));
}
KATTR vf vf_load_f16(const uint16_t *p)
{
    return burst_cpu_f16_to_f32(*p);
}
KATTR vf vf_load_bf16(const uint16_t *p)
{
    return burst_cpu_bf16_to_f32(*p);
}
#endif
