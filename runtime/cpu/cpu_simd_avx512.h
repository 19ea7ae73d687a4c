/*
 * runtime/cpu/cpu_simd_avx512.h - the avx512, avx512bf16 and avx512amx variants: VL 16, AVX-512
 * F, BW, DQ and VL intrinsics (avx512bf16 also AVX512_BF16, for cpu_tile_dpbf16.h; avx512amx
 * also AMX-TILE and AMX-BF16, for cpu_tile_amx.h).
 *
 * Part of the cpu_simd.h template: included only from there, once per inclusion for this
 * variant (see cpu_simd.h for what each variant defines). Compiled with function-level target
 * attributes; cpu_backend.c picks the variant only where the cpu and the OS have these.
 */
#include <immintrin.h>

#define VL 16
#if BURST_CPU_VARIANT == BURST_CPU_V_AVX512AMX
#define BURST_CPU_DPBF16 1
#define BURST_CPU_AMX 1
#define KFN(name) KFN_(name, avx512amx)
#define BURST_CPU_TARGET "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16,fma,f16c"
#elif BURST_CPU_VARIANT == BURST_CPU_V_AVX512BF16
#define BURST_CPU_DPBF16 1
#define KFN(name) KFN_(name, avx512bf16)
#define BURST_CPU_TARGET "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,f16c"
#else
#define KFN(name) KFN_(name, avx512)
#define BURST_CPU_TARGET "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c"
#endif
#define KATTR static inline __attribute__((always_inline, target(BURST_CPU_TARGET)))
#define KENTRY __attribute__((target(BURST_CPU_TARGET)))

typedef __m512 vf;
typedef __m512i vi;

KATTR vf vf_zero(void)
{
    return _mm512_setzero_ps();
}
KATTR vf vf_set1(float x)
{
    return _mm512_set1_ps(x);
}
KATTR vf vf_load(const float *p)
{
    return _mm512_loadu_ps(p);
}
KATTR void vf_store(float *p, vf v)
{
    _mm512_storeu_ps(p, v);
}
KATTR vf vf_add(vf a, vf b)
{
    return _mm512_add_ps(a, b);
}
KATTR vf vf_sub(vf a, vf b)
{
    return _mm512_sub_ps(a, b);
}
KATTR vf vf_mul(vf a, vf b)
{
    return _mm512_mul_ps(a, b);
}
KATTR vf vf_max(vf a, vf b)
{
    return _mm512_max_ps(a, b); /* b where either is NaN, as the avx2 variant */
}
KATTR vf vf_min(vf a, vf b)
{
    return _mm512_min_ps(a, b); /* b where either is NaN */
}
KATTR vf vf_div(vf a, vf b)
{
    return _mm512_div_ps(a, b);
}
KATTR vf vf_fma(vf a, vf b, vf c)
{
    return _mm512_fmadd_ps(a, b, c);
}

/* a where lo <= j < hi (elementwise), else fill */
KATTR vf vf_in_range(vf a, vf j, vf lo, vf hi, vf fill)
{
    __mmask16 m = _mm512_cmp_ps_mask(j, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(j, hi, _CMP_LT_OQ);
    return _mm512_mask_blend_ps(m, fill, a);
}

/* a with its -inf lanes replaced by 0 (a running max of -inf is used as 0: no NaN) */
KATTR vf vf_zero_if_neginf(vf a)
{
    __mmask16 m = _mm512_cmp_ps_mask(a, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm512_maskz_mov_ps((__mmask16)~m, a);
}

/* 2^x = 2^r 2^f with r = round(x) (by the magic-number addition) and f in [-0.5, 0.5]; 2^r is
 * applied by VSCALEFPS, masked to 0 for x < -126 (and -inf, whose f is NaN). x is clamped only
 * from above (min returns x itself for NaN, which then runs through to the result). */
KATTR vf vf_exp2(vf x)
{
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    x = _mm512_min_ps(_mm512_set1_ps(127.0f), x);
    vf r = _mm512_sub_ps(_mm512_add_ps(x, _mm512_set1_ps(BURST_CPU_EXP2_MAGIC)),
                         _mm512_set1_ps(BURST_CPU_EXP2_MAGIC));
    vf f = _mm512_sub_ps(x, r);
    vf p = _mm512_set1_ps(BURST_CPU_EXP2_P0);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(BURST_CPU_EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(BURST_CPU_EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(BURST_CPU_EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(BURST_CPU_EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(BURST_CPU_EXP2_P5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, p, r);
}

KATTR vf vf_load_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

KATTR vf vf_load_bf16(const uint16_t *p)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
