/*
 * runtime/cpu/cpu_simd.h - the vector abstraction the cpu kernels are written in (TEMPLATE).
 *
 * Not an ordinary header: it is included once per instruction-set variant, with
 * BURST_CPU_AVX2 defined to 0 or 1 (see cpu_fwd.c). Each inclusion defines, for that variant:
 *   vf          a vector of VL floats
 *   KATTR       attributes of every inline kernel helper of the variant (target ISA, inlining)
 *   KENTRY      attributes of the variant's entry points (work-item functions)
 *   KFN(name)   the name with the variant's suffix (name_avx2 / name_base)
 *   vf_*        inline operations on vf
 * Variants:
 *   avx2   VL 8: AVX2 + FMA + F16C intrinsics, compiled with a function-level target attribute
 *          and chosen at run time (x86-64 with GCC or clang only);
 *   base   the portable baseline: VL 4 GNU vectors where the compiler has them and the target
 *          has 16-byte SIMD (SSE2, NEON), else plain scalar C with VL 1.
 * vf_exp2 returns 2^x with relative error below 2e-7 for x in [-126, 127], and exactly 0 for
 * x < -126 (including -inf), never NaN for finite or -inf input, and NaN for NaN (so that a NaN
 * input propagates to the output instead of looking like a masked row).
 */

#undef vf
#undef vi
#undef vf_zero
#undef vf_set1
#undef vf_load
#undef vf_store
#undef vf_add
#undef vf_sub
#undef vf_mul
#undef vf_max
#undef vf_fma
#undef vf_select
#undef vf_in_range
#undef vf_zero_if_neginf
#undef vf_exp2
#undef vf_load_f16
#undef vf_load_bf16
#undef VL
#undef KATTR
#undef KENTRY
#undef KFN
#undef KFN_
#undef KFN2
#undef BURST_CPU_VEC_GNU4
#undef BURST_CPU_VEC_SCALAR

#define KFN2(a, b) a##_##b
#define KFN_(a, b) KFN2(a, b)

/* Every name below carries the variant suffix, so both variants live in one translation unit
 * (KFN is defined per variant further down; macros expand at use). */
#define vf KFN(vf)
#define vi KFN(vi)
#define vf_zero KFN(vf_zero)
#define vf_set1 KFN(vf_set1)
#define vf_load KFN(vf_load)
#define vf_store KFN(vf_store)
#define vf_add KFN(vf_add)
#define vf_sub KFN(vf_sub)
#define vf_mul KFN(vf_mul)
#define vf_max KFN(vf_max)
#define vf_fma KFN(vf_fma)
#define vf_select KFN(vf_select)
#define vf_in_range KFN(vf_in_range)
#define vf_zero_if_neginf KFN(vf_zero_if_neginf)
#define vf_exp2 KFN(vf_exp2)
#define vf_load_f16 KFN(vf_load_f16)
#define vf_load_bf16 KFN(vf_load_bf16)

/* Cephes exp2f polynomial on [-0.5, 0.5]: 2^f ~ 1 + f * P(f). */
#define BURST_CPU_EXP2_P0 1.535336188319500e-4f
#define BURST_CPU_EXP2_P1 1.339887440266574e-3f
#define BURST_CPU_EXP2_P2 9.618437357674640e-3f
#define BURST_CPU_EXP2_P3 5.550332471162809e-2f
#define BURST_CPU_EXP2_P4 2.402264791363012e-1f
#define BURST_CPU_EXP2_P5 6.931472028550421e-1f
#define BURST_CPU_EXP2_MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */

#if BURST_CPU_AVX2
/* ------------------------------------------------------------------------------------------ */
#include <immintrin.h>

#define VL 8
#define KFN(name) KFN_(name, avx2)
#define KATTR static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define KENTRY static __attribute__((target("avx2,fma,f16c")))

typedef __m256 vf;
typedef __m256i vi;

KATTR vf vf_zero(void)
{
    return _mm256_setzero_ps();
}
KATTR vf vf_set1(float x)
{
    return _mm256_set1_ps(x);
}
KATTR vf vf_load(const float *p)
{
    return _mm256_loadu_ps(p);
}
KATTR void vf_store(float *p, vf v)
{
    _mm256_storeu_ps(p, v);
}
KATTR vf vf_add(vf a, vf b)
{
    return _mm256_add_ps(a, b);
}
KATTR vf vf_sub(vf a, vf b)
{
    return _mm256_sub_ps(a, b);
}
KATTR vf vf_mul(vf a, vf b)
{
    return _mm256_mul_ps(a, b);
}
KATTR vf vf_max(vf a, vf b)
{
    return _mm256_max_ps(a, b);
}
KATTR vf vf_fma(vf a, vf b, vf c)
{
    return _mm256_fmadd_ps(a, b, c);
}

/* a where lo <= j < hi (elementwise), else fill */
KATTR vf vf_in_range(vf a, vf j, vf lo, vf hi, vf fill)
{
    vf m = _mm256_and_ps(_mm256_cmp_ps(j, lo, _CMP_GE_OQ), _mm256_cmp_ps(j, hi, _CMP_LT_OQ));
    return _mm256_blendv_ps(fill, a, m);
}

/* a with its -inf lanes replaced by 0 (a running max of -inf is used as 0: no NaN) */
KATTR vf vf_zero_if_neginf(vf a)
{
    vf m = _mm256_cmp_ps(a, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm256_andnot_ps(m, a);
}

KATTR vf vf_exp2(vf x)
{
    vf zero = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    vf nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    vf x0 = x;
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(127.0f));
    vf t = _mm256_add_ps(x, _mm256_set1_ps(BURST_CPU_EXP2_MAGIC));
    vf f = _mm256_sub_ps(x, _mm256_sub_ps(t, _mm256_set1_ps(BURST_CPU_EXP2_MAGIC)));
    vf p = _mm256_set1_ps(BURST_CPU_EXP2_P0);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(BURST_CPU_EXP2_P1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(BURST_CPU_EXP2_P2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(BURST_CPU_EXP2_P3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(BURST_CPU_EXP2_P4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(BURST_CPU_EXP2_P5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_castps_si256(t), 23);
    vf r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_blendv_ps(_mm256_andnot_ps(zero, r), x0, nan);
}

KATTR vf vf_load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

KATTR vf vf_load_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

#else /* base variant */
/* ------------------------------------------------------------------------------------------ */
#define KFN(name) KFN_(name, base)
#define KENTRY static
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
#endif /* variant */
