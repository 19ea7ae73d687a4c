/*
 * tests/test_cpu_amx.c - the AMX gemm_dp of the cpu backend (runtime/cpu/cpu_tile_amx.h) on any
 * cpu with AVX512_BF16, with the AMX tile instructions emulated in C.
 *
 * The avx512amx kernels run only where the cpu has AMX (test_attention's attention_isa_avx512amx
 * covers them there). This test checks the rest of their tile product everywhere else: the
 * staging of A panels (contiguous and strided rows, partial row blocks, zero padding), the
 * direct and zero-padded loads of B chunks, the C epilogue of each mode (STORE with a scale, ADD,
 * SCALE with row factors) and that no pair past K2 is read (they hold NaN). The emulated tiles
 * follow the instructions' definitions (TDPBF16PS: C[m][n] += sum_k A[m][2k..2k+1] .
 * B[k][2n..2n+1]); the result is compared with the AVX512_BF16 gemm_dp of cpu_tile_dpbf16.h,
 * to fp32 summation-order noise (1e-4 of 1 + |C|; an indexing error is of order 1). Random shapes cover every remainder.
 * Exit 77 (skip) where the build has no avx512amx variant or the cpu lacks AVX512_BF16.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"

#if BURST_CPU_HAVE_AMX_VARIANT
#include <cpuid.h>
#include <immintrin.h>

/* ---- the emulated tiles (tmm0 .. tmm7, 16 rows of 64 bytes) ---- */

static unsigned char emu_tile[8][16][64];
static int emu_configured, emu_bad_config;

static void emu_loadconfig(const void *cfg)
{
    const unsigned char *c = cfg;
    emu_configured = 1;
    emu_bad_config |= c[0] != 1; /* palette 1 */
    for (int t = 0; t < 5; t++) {
        uint16_t colsb;
        memcpy(&colsb, c + 16 + 2 * t, sizeof colsb);
        emu_bad_config |= colsb != 64 || c[48 + t] != 16;
    }
}
static void emu_use(void)
{
    emu_bad_config |= !emu_configured; /* a tile instruction outside loadconfig .. release */
}
static void emu_loadd(int t, const void *base, long stride)
{
    emu_use();
    for (int r = 0; r < 16; r++)
        memcpy(emu_tile[t][r], (const char *)base + r * stride, 64);
}
static void emu_stored(int t, void *base, long stride)
{
    emu_use();
    for (int r = 0; r < 16; r++)
        memcpy((char *)base + r * stride, emu_tile[t][r], 64);
}
static void emu_zero(int t)
{
    emu_use();
    memset(emu_tile[t], 0, sizeof emu_tile[t]);
}
static float emu_bf16(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static void emu_dpbf16ps(int c, int a, int b)
{
    emu_use();
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float acc;
            memcpy(&acc, &emu_tile[c][m][4 * n], sizeof acc);
            for (int k = 0; k < 16; k++)
                acc += emu_bf16(&emu_tile[a][m][4 * k]) * emu_bf16(&emu_tile[b][k][4 * n]) +
                       emu_bf16(&emu_tile[a][m][4 * k + 2]) * emu_bf16(&emu_tile[b][k][4 * n + 2]);
            memcpy(&emu_tile[c][m][4 * n], &acc, sizeof acc);
        }
}
static void emu_release(void)
{
    emu_configured = 0;
}

/* the intrinsics of cpu_tile_amx.h, here on the emulation */
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#define _tile_loadconfig(cfg) emu_loadconfig(cfg)
#define _tile_release() emu_release()
#define _tile_loadd(t, base, stride) emu_loadd(t, base, stride)
#define _tile_stored(t, base, stride) emu_stored(t, base, stride)
#define _tile_zero(t) emu_zero(t)
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)

#define BURST_CPU_VARIANT BURST_CPU_V_AVX512AMX
#include "cpu/cpu_simd.h"
#include "cpu/cpu_tile.h"
#undef BURST_CPU_VARIANT
#define BURST_CPU_VARIANT BURST_CPU_V_AVX512BF16
#include "cpu/cpu_simd.h"
#include "cpu/cpu_tile.h"
#undef BURST_CPU_VARIANT

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % n;
}
static uint32_t rnd_pair(void) /* two bf16 values in [-2, 2] */
{
    uint32_t p = 0;
    for (int h = 0; h < 2; h++) {
        float f = ((float)rnd(2001) - 1000.0f) / 500.0f;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        p |= (u >> 16) << (16 * h);
    }
    return p;
}

/* One random product through both gemm_dp; returns the largest |amx - dpbf16| / (1 + |C|). */
__attribute__((target(
    "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16,fma,f16c"))) static double
one_case(int64_t M, int64_t N, int64_t K2, int strided, int mode)
{
    /* strided: A[r][p] at p * ak + r (P^T, dS^T); else at r * am + p (K rows, P rows) */
    int64_t am = strided ? 1 : K2 + rnd(5), ak = strided ? M + 12 + rnd(5) : 1;
    int64_t asz = strided ? K2 * ak + 64 : (M + 12) * am + 64; /* dpbf16 reads 12-row blocks */
    int64_t ldb = N + 16 * rnd(3), ldc = N + rnd(7);
    uint32_t *A = malloc(sizeof *A * (size_t)asz);
    uint32_t *B = malloc(sizeof *B * (size_t)((K2 + 16) * ldb));
    float *c0 = malloc(sizeof *c0 * (size_t)((M + 12) * ldc));
    float *c1 = malloc(sizeof *c1 * (size_t)((M + 12) * ldc));
    float *rs = malloc(sizeof *rs * (size_t)M);
    if (!A || !B || !c0 || !c1 || !rs) {
        fprintf(stderr, "test_cpu_amx: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < asz; i++)
        A[i] = rnd_pair();
    for (int64_t i = 0; i < (K2 + 16) * ldb; i++) /* pairs past K2: NaN, never to be read */
        B[i] = i < K2 * ldb ? rnd_pair() : 0x7fc07fc0u;
    for (int64_t i = 0; i < (M + 12) * ldc; i++)
        c0[i] = c1[i] = ((float)rnd(201) - 100.0f) / 50.0f;
    for (int64_t i = 0; i < M; i++)
        rs[i] = (float)rnd(100) / 100.0f;
    gemm_dp_avx512amx(M, N, K2, A, am, ak, B, ldb, c0, ldc, mode, 0.375f, rs);
    gemm_dp_avx512bf16(M, N, K2, A, am, ak, B, ldb, c1, ldc, mode, 0.375f, rs);
    double worst = 0.0;
    for (int64_t i = 0; i < (M + 12) * ldc; i++) {
        double e = fabs((double)c0[i] - (double)c1[i]) / (1.0 + fabs((double)c1[i]));
        if (isnan(e))
            worst = INFINITY; /* a NaN (a pair past K2 read) fails the case */
        else if (e > worst)
            worst = e;
    }
    free(A), free(B), free(c0), free(c1), free(rs);
    return worst;
}

int main(void)
{
    unsigned a, b, c, d;
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl") ||
        !__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5))) {
        printf("test_cpu_amx: this cpu has no AVX512_BF16: skipped\n");
        return 77;
    }
    int failed = 0;
    for (int it = 0; it < 400; it++) {
        /* shapes of the kernels (M to BR = 192, N to 256 = d, K2 to 128 = d / 2) and others */
        int64_t M = 1 + rnd(200), N = 16 * (1 + (int64_t)rnd(16)), K2 = 1 + rnd(128);
        int strided = (int)rnd(2), mode = (int)rnd(3);
        double w = one_case(M, N, K2, strided, mode);
        if (!(w <= 1e-4) || emu_bad_config) {
            printf("FAIL M=%lld N=%lld K2=%lld %s mode %d: error %g%s\n", (long long)M,
                   (long long)N, (long long)K2, strided ? "strided" : "rows", mode, w,
                   emu_bad_config ? ", bad tile configuration" : "");
            failed = 1;
            emu_bad_config = 0;
        }
    }
    printf("test_cpu_amx: %s\n", failed ? "FAILED" : "ok");
    return failed;
}
#else
int main(void)
{
    printf("test_cpu_amx: this build has no avx512amx variant: skipped\n");
    return 77;
}
#endif
