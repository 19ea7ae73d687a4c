/*
 * runtime/cpu/cpu_tile.h - tile helpers of the cpu kernels (TEMPLATE, see cpu_simd.h).
 *
 * Included after cpu_simd.h once per variant. Provides:
 *   mk / gemm   C (op)= A * B with a register-blocked MR x (2 * VL) micro-kernel:
 *               A is read by scalar broadcasts with arbitrary strides (am between rows,
 *               ak along the reduction), B is row-major with VL-wide vector loads,
 *               C is row-major; mode STORE (C = AB), ADD (C += AB), SCALE (C = rs[r] C + AB).
 *   load_row    one d-long row of a burst_tensor converted to fp32 and multiplied.
 *   mask_tile   -inf outside each query's allowed keys.
 *   cap_tile    logit soft-capping of a score tile (vf_tanh).
 */

#define BURST_CPU_STORE 0
#define BURST_CPU_ADD 1
#define BURST_CPU_SCALE 2

#undef mk
#undef gemm
#undef load_row
#define mk KFN(mk)
#define gemm KFN(gemm)
#define load_row KFN(load_row)

/* One MR x (nv * VL) block; nv (1 or 2) and mode are constants at every call site. Only the
 * first `rows` rows of C are written; A rows up to MR are read (callers pad their scratch). */
KATTR void mk(const int nv, const int rows, int64_t K, const float *A, int64_t am, int64_t ak,
              const float *B, int64_t ldb, float *C, int64_t ldc, const int mode, const float *rs)
{
    vf c00 = vf_zero(), c01 = vf_zero(), c10 = vf_zero(), c11 = vf_zero();
    vf c20 = vf_zero(), c21 = vf_zero(), c30 = vf_zero(), c31 = vf_zero();
    vf c40 = vf_zero(), c41 = vf_zero(), c50 = vf_zero(), c51 = vf_zero();
    const float *a0 = A, *a1 = A + am, *a2 = A + 2 * am;
    const float *a3 = A + 3 * am, *a4 = A + 4 * am, *a5 = A + 5 * am;
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        int64_t o = k * ak;
        vf b0 = vf_load(b);
        vf b1 = nv > 1 ? vf_load(b + VL) : vf_zero();
        vf x;
#define BURST_CPU_MK_ROW(r)                                                                        \
    x = vf_set1(a##r[o]);                                                                          \
    c##r##0 = vf_fma(x, b0, c##r##0);                                                              \
    if (nv > 1)                                                                                    \
        c##r##1 = vf_fma(x, b1, c##r##1);
        BURST_CPU_MK_ROW(0)
        BURST_CPU_MK_ROW(1)
        BURST_CPU_MK_ROW(2)
        BURST_CPU_MK_ROW(3)
        BURST_CPU_MK_ROW(4)
        BURST_CPU_MK_ROW(5)
#undef BURST_CPU_MK_ROW
    }
#define BURST_CPU_MK_ST(p, v, r)                                                                   \
    do {                                                                                           \
        if (mode == BURST_CPU_STORE)                                                               \
            vf_store(p, v);                                                                        \
        else if (mode == BURST_CPU_ADD)                                                            \
            vf_store(p, vf_add(vf_load(p), v));                                                    \
        else                                                                                       \
            vf_store(p, vf_fma(vf_set1(rs[r]), vf_load(p), v));                                    \
    } while (0)
#define BURST_CPU_MK_OUT(r)                                                                        \
    if (rows > r) {                                                                                \
        float *cr = C + (r)*ldc;                                                                   \
        BURST_CPU_MK_ST(cr, c##r##0, r);                                                           \
        if (nv > 1)                                                                                \
            BURST_CPU_MK_ST(cr + VL, c##r##1, r);                                                  \
    }
    BURST_CPU_MK_OUT(0)
    BURST_CPU_MK_OUT(1)
    BURST_CPU_MK_OUT(2)
    BURST_CPU_MK_OUT(3)
    BURST_CPU_MK_OUT(4)
    BURST_CPU_MK_OUT(5)
#undef BURST_CPU_MK_OUT
#undef BURST_CPU_MK_ST
}

/* C[M x N] (op)= A[M x K] B[K x N]; N a multiple of VL. */
KATTR void gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t am, int64_t ak,
                const float *B, int64_t ldb, float *C, int64_t ldc, const int mode, const float *rs)
{
    int64_t n0 = 0;
    for (; n0 + 2 * VL <= N; n0 += 2 * VL) {
        for (int64_t m0 = 0; m0 < M; m0 += BURST_CPU_MR) {
            int rows = M - m0 < BURST_CPU_MR ? (int)(M - m0) : BURST_CPU_MR;
            mk(2, rows, K, A + m0 * am, am, ak, B + n0, ldb, C + m0 * ldc + n0, ldc, mode,
               rs ? rs + m0 : rs);
        }
    }
    if (n0 < N) {
        for (int64_t m0 = 0; m0 < M; m0 += BURST_CPU_MR) {
            int rows = M - m0 < BURST_CPU_MR ? (int)(M - m0) : BURST_CPU_MR;
            mk(1, rows, K, A + m0 * am, am, ak, B + n0, ldb, C + m0 * ldc + n0, ldc, mode,
               rs ? rs + m0 : rs);
        }
    }
}

/* dst[0..d) = mul * (float)src[0..d), src of dtype dt; d a multiple of VL. */
KATTR void load_row(float *dst, const void *src, burst_dtype_t dt, int64_t d, float mul)
{
    vf m = vf_set1(mul);
    if (dt == BURST_DTYPE_FP32) {
        const float *s = src;
        for (int64_t c = 0; c < d; c += VL)
            vf_store(dst + c, vf_mul(vf_load(s + c), m));
    } else if (dt == BURST_DTYPE_FP16) {
        const uint16_t *s = src;
        for (int64_t c = 0; c < d; c += VL)
            vf_store(dst + c, vf_mul(vf_load_f16(s + c), m));
    } else {
        const uint16_t *s = src;
        for (int64_t c = 0; c < d; c += VL)
            vf_store(dst + c, vf_mul(vf_load_bf16(s + c), m));
    }
}

#undef mask_tile
#define mask_tile KFN(mask_tile)

/* St[j][i] = -inf (j < jn, ra <= i < rb) where key j0 + j is outside [kb[i], ke[i]) or is a
 * padding key (j >= cnt: the keys past the tile may be allowed keys of the next tile); rb - ra
 * is a multiple of VL (rows outside them are left as they are; the loads are unaligned);
 * kbf/kef are br floats of scratch. */
KATTR void mask_tile(float *St, int64_t br, int64_t ra, int64_t rb, int64_t cnt, int64_t jn,
                     int64_t j0, const int64_t *kb, const int64_t *ke, float *kbf, float *kef)
{
    for (int64_t i = ra; i < rb; i++) {
        /* relative bounds, clamped so they stay exact in fp32 */
        int64_t lo = burst_cpu_min64(burst_cpu_max64(kb[i] - j0, -1), jn + 1);
        int64_t hi = burst_cpu_min64(burst_cpu_max64(ke[i] - j0, -1), cnt);
        kbf[i] = (float)lo;
        kef[i] = (float)hi;
    }
    vf ninf = vf_set1(-(float)INFINITY);
    for (int64_t j = 0; j < jn; j++) {
        vf jf = vf_set1((float)j);
        float *s = St + j * br;
        for (int64_t i = ra; i < rb; i += VL)
            vf_store(s + i,
                     vf_in_range(vf_load(s + i), jf, vf_load(kbf + i), vf_load(kef + i), ninf));
    }
}

#undef vf_tanh
#undef cap_tile
#define vf_tanh KFN(vf_tanh)
#define cap_tile KFN(cap_tile)

/* tanh(x): a rational minimax approximation (odd degree-13 numerator over even degree-6
 * denominator) on x clamped to [-7.9053, 7.9053], where tanh rounds to +-1 in fp32. Relative
 * error below 3e-7 (about 3 ulp) for every finite x, measured against libm's tanh over a dense
 * sweep of [-20, 20]; NaN stays NaN. */
KATTR vf vf_tanh(vf a)
{
    vf x = vf_max(vf_set1(-7.90531110763549805f), vf_min(vf_set1(7.90531110763549805f), a));
    vf x2 = vf_mul(x, x);
    vf p = vf_fma(x2, vf_set1(-2.76076847742355e-16f), vf_set1(2.00018790482477e-13f));
    p = vf_fma(x2, p, vf_set1(-8.60467152213735e-11f));
    p = vf_fma(x2, p, vf_set1(5.12229709037114e-08f));
    p = vf_fma(x2, p, vf_set1(1.48572235717979e-05f));
    p = vf_fma(x2, p, vf_set1(6.37261928875436e-04f));
    p = vf_fma(x2, p, vf_set1(4.89352455891786e-03f));
    vf q = vf_fma(x2, vf_set1(1.19825839466702e-06f), vf_set1(1.18534705686654e-04f));
    q = vf_fma(x2, q, vf_set1(2.26843463243900e-03f));
    q = vf_fma(x2, q, vf_set1(4.89352518554385e-03f));
    return vf_div(vf_mul(x, p), q);
}

/* Soft-capping of a score tile in place: St = cap * tanh(St / cap) over the rows [ra, rb) of
 * each of its jn keys (the rows with a key in the tile; stride br), before masking. Scores are in log2 units here, so cap is the plan's cap times log2(e): the same
 * function of the natural-unit score. Its relative error is vf_tanh's. */
KATTR void cap_tile(float *St, int64_t br, int64_t ra, int64_t rb, int64_t jn, float cap)
{
    vf c = vf_set1(cap), rc = vf_set1(1.0f / cap);
    for (int64_t j = 0; j < jn; j++) {
        float *s = St + j * br;
        for (int64_t i = ra; i < rb; i += VL)
            vf_store(s + i, vf_mul(c, vf_tanh(vf_mul(vf_load(s + i), rc))));
    }
}

#ifdef BURST_CPU_DPBF16
#include "cpu_tile_dpbf16.h"
#endif
