/*
 * runtime/cpu/cpu_simd_neon.h - the neon variant: VL 4, aarch64 Advanced SIMD with fused
 * multiply-add and the hardware fp16 -> fp32 conversion.
 *
 * Part of the cpu_simd.h template: included only from there, once per inclusion for this
 * variant (see cpu_simd.h for what each variant defines). Every aarch64 cpu has these, so no
 * target attribute is needed; BURST_CPU_ISA=base still picks the portable variant.
 * Lane selections use compare-and-select with the same NaN behaviour as the other variants.
 */
#include <arm_neon.h>

#define VL 4
#define KFN(name) KFN_(name, neon)
#define KATTR static inline __attribute__((always_inline))
#define KENTRY

typedef float32x4_t vf;
typedef uint32x4_t vi;

KATTR vf vf_zero(void)
{
    return vdupq_n_f32(0.0f);
}
KATTR vf vf_set1(float x)
{
    return vdupq_n_f32(x);
}
KATTR vf vf_load(const float *p)
{
    return vld1q_f32(p);
}
KATTR void vf_store(float *p, vf v)
{
    vst1q_f32(p, v);
}
KATTR vf vf_add(vf a, vf b)
{
    return vaddq_f32(a, b);
}
KATTR vf vf_sub(vf a, vf b)
{
    return vsubq_f32(a, b);
}
KATTR vf vf_mul(vf a, vf b)
{
    return vmulq_f32(a, b);
}
KATTR vf vf_max(vf a, vf b)
{
    return vbslq_f32(vcgtq_f32(a, b), a, b); /* b where either is NaN, as the x86 variants */
}
KATTR vf vf_min(vf a, vf b)
{
    return vbslq_f32(vcltq_f32(a, b), a, b); /* b where either is NaN, as the x86 variants */
}
KATTR vf vf_div(vf a, vf b)
{
    return vdivq_f32(a, b);
}
KATTR vf vf_fma(vf a, vf b, vf c)
{
    return vfmaq_f32(c, a, b);
}

/* a where lo <= j < hi (elementwise), else fill */
KATTR vf vf_in_range(vf a, vf j, vf lo, vf hi, vf fill)
{
    return vbslq_f32(vandq_u32(vcgeq_f32(j, lo), vcltq_f32(j, hi)), a, fill);
}

/* a with its -inf lanes replaced by 0 (a running max of -inf is used as 0: no NaN) */
KATTR vf vf_zero_if_neginf(vf a)
{
    vi m = vceqq_f32(a, vdupq_n_f32(-__builtin_inff()));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(a), m));
}

KATTR vf vf_exp2(vf x)
{
    vi zero = vcltq_f32(x, vdupq_n_f32(-126.0f));
    vi num = vceqq_f32(x, x); /* all ones except on NaN lanes */
    vf x0 = x;
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-126.0f)), vdupq_n_f32(127.0f));
    vf t = vaddq_f32(x, vdupq_n_f32(BURST_CPU_EXP2_MAGIC));
    vf f = vsubq_f32(x, vsubq_f32(t, vdupq_n_f32(BURST_CPU_EXP2_MAGIC)));
    vf p = vdupq_n_f32(BURST_CPU_EXP2_P0);
    p = vfmaq_f32(vdupq_n_f32(BURST_CPU_EXP2_P1), p, f);
    p = vfmaq_f32(vdupq_n_f32(BURST_CPU_EXP2_P2), p, f);
    p = vfmaq_f32(vdupq_n_f32(BURST_CPU_EXP2_P3), p, f);
    p = vfmaq_f32(vdupq_n_f32(BURST_CPU_EXP2_P4), p, f);
    p = vfmaq_f32(vdupq_n_f32(BURST_CPU_EXP2_P5), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    int32x4_t e = vshlq_n_s32(vreinterpretq_s32_f32(t), 23);
    vi r = vreinterpretq_u32_s32(vaddq_s32(vreinterpretq_s32_f32(p), e));
    return vbslq_f32(num, vreinterpretq_f32_u32(vbicq_u32(r, zero)), x0);
}

KATTR vf vf_load_f16(const uint16_t *p)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

KATTR vf vf_load_bf16(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
