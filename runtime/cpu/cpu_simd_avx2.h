/*
 * runtime/cpu/cpu_simd_avx2.h - the avx2 variant: VL 8, AVX2 + FMA + F16C.
 *
 * Part of the cpu_simd.h template: included only from there, once per inclusion for this
 * variant (see cpu_simd.h for what each variant defines).
 */
#include <immintrin.h>

#define VL 8
#define KFN(name) KFN_(name, avx2)
#define KATTR static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define KENTRY __attribute__((target("avx2,fma,f16c")))

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
KATTR vf vf_min(vf a, vf b)
{
    return _mm256_min_ps(a, b); /* b where either is NaN */
}
KATTR vf vf_div(vf a, vf b)
{
    return _mm256_div_ps(a, b);
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
