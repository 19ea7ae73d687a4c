/*
 * runtime/cpu/cpu_simd.h - the vector abstraction the cpu kernels are written in (TEMPLATE).
 *
 * Not an ordinary header: it is included once per instruction-set variant, with
 * BURST_CPU_VARIANT defined to one of the BURST_CPU_V_* values of cpu_internal.h (by the kernel
 * objects, cpu_kern.c.in; a translation unit may include it for several variants, each
 * inclusion replacing the previous one's macros). Each inclusion defines, for that variant:
 *   vf          a vector of VL floats
 *   KATTR       attributes of every inline kernel helper of the variant (target ISA, inlining)
 *   KENTRY      attributes of the variant's entry points (the work items, cpu_items.h)
 *   KFN(name)   the name with the variant's suffix (name_avx512 / name_avx2 / name_neon / ...)
 *   vf_*        inline operations on vf
 * Variants (one file each):
 *   avx512, avx512bf16,  VL 16: AVX-512 F/BW/DQ/VL intrinsics (cpu_simd_avx512.h); avx512bf16
 *   avx512amx            adds the AVX512_BF16 dot products of cpu_tile_dpbf16.h for every
 *                        product of bf16 inputs, avx512amx takes those products on AMX tiles
 *                        (cpu_tile_amx.h);
 *   avx2                 VL 8: AVX2 + FMA + F16C intrinsics (cpu_simd_avx2.h);
 *                        the x86 variants are compiled with function-level target attributes
 *                        and chosen at run time (x86-64 with GCC or clang only);
 *   neon                 VL 4: aarch64 Advanced SIMD, fused multiply-add, hardware fp16
 *                        conversion (cpu_simd_neon.h; every aarch64 cpu has it);
 *   base                 the portable baseline (cpu_simd_base.h): VL 4 GNU vectors where the
 *                        compiler has them and the target has 16-byte SIMD (SSE2, NEON), else
 *                        plain scalar C with VL 1 (e.g. riscv64).
 * vf_max and vf_min return b where either operand is NaN; vf_div is the IEEE quotient.
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
#undef vf_min
#undef vf_div
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
#undef BURST_CPU_DPBF16
#undef BURST_CPU_AMX
#undef BURST_CPU_TARGET

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
#define vf_min KFN(vf_min)
#define vf_div KFN(vf_div)
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

#if BURST_CPU_VARIANT == BURST_CPU_V_AVX512 || BURST_CPU_VARIANT == BURST_CPU_V_AVX512BF16 ||      \
    BURST_CPU_VARIANT == BURST_CPU_V_AVX512AMX
#include "cpu_simd_avx512.h"
#elif BURST_CPU_VARIANT == BURST_CPU_V_AVX2
#include "cpu_simd_avx2.h"
#elif BURST_CPU_VARIANT == BURST_CPU_V_NEON
#include "cpu_simd_neon.h"
#else
#include "cpu_simd_base.h"
#endif
