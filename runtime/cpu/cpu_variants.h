/*
 * runtime/cpu/cpu_variants.h - compiles a kernel template once per instruction-set variant.
 *
 * Define BURST_CPU_KERN to the template's file name (e.g. "cpu_fwd_kern.h") and include this
 * file: the template is included with BURST_CPU_VARIANT set to each variant this target builds
 * (base always; avx2, avx512 and avx512bf16 on x86-64 with GCC or clang, avx512amx there with
 * GCC 11 or clang 12 onwards; neon on aarch64).
 * Each inclusion defines the template's entry points with the variant's suffix (cpu_simd.h).
 */
#define BURST_CPU_VARIANT BURST_CPU_V_BASE
#include BURST_CPU_KERN
#undef BURST_CPU_VARIANT

#if BURST_CPU_HAVE_X86_VARIANTS
#define BURST_CPU_VARIANT BURST_CPU_V_AVX2
#include BURST_CPU_KERN
#undef BURST_CPU_VARIANT
#define BURST_CPU_VARIANT BURST_CPU_V_AVX512
#include BURST_CPU_KERN
#undef BURST_CPU_VARIANT
#define BURST_CPU_VARIANT BURST_CPU_V_AVX512BF16
#include BURST_CPU_KERN
#undef BURST_CPU_VARIANT
#endif
#if BURST_CPU_HAVE_AMX_VARIANT
#define BURST_CPU_VARIANT BURST_CPU_V_AVX512AMX
#include BURST_CPU_KERN
#undef BURST_CPU_VARIANT
#endif

#if BURST_CPU_HAVE_NEON_VARIANT
#define BURST_CPU_VARIANT BURST_CPU_V_NEON
#include BURST_CPU_KERN
#undef BURST_CPU_VARIANT
#endif

#undef BURST_CPU_KERN
