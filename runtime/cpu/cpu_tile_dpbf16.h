/*
 * runtime/cpu/cpu_tile_dpbf16.h - products of bf16 operands on AVX512_BF16 dot products
 * (TEMPLATE part of the avx512bf16 variant; included by cpu_tile.h only when BURST_CPU_DPBF16 is
 * defined).
 *
 * With bf16 inputs every product of the kernels runs here: the scores St = K Q^T and
 * dPt = V dO^T from the inputs' own bits; O += P^T V, dV += Pt dO, dK += dSt Q and
 * dQ += dSt^T K with P and dS rounded to bf16 (nearest even), as the matrix units of GPU flash
 * kernels do. VDPBF16PS multiplies pairs of bf16 values exactly (8-bit significands: the product
 * fits fp32) and adds both products into fp32 accumulators, so every sum is accumulated in fp32;
 * only P and dS carry one extra rounding (relative 2^-9, the bound of tests/harness.h). The
 * avx512amx variant takes gemm_dp from cpu_tile_amx.h (same operands, AMX tiles). The
 * instruction treats subnormal bf16 inputs (below 2^-126) as zero: their products are below the
 * harness's absolute floor of 1e-5 of the largest result by far.
 *
 * Operand layout: a "pair" is a uint32 holding two bf16 values adjacent along the reduction
 * (low half first). The A side is read by 32-bit broadcasts with arbitrary strides (am between
 * output rows, ak between pairs), the B side is row-major over pairs, B[p][n] = the pair of
 * column n (VNNI layout: pairs of reduction-adjacent values interleaved). Both sides come from
 *   load_k_bf16     bf16 rows as they are (pairs along the row: A of St = K Q^T);
 *   pack_q_pairs    [d/2][BR] pairs of a tensor's rows transposed (B of St);
 *   pack_row_pairs  [n/2][d]  pairs of two adjacent tensor rows (B of the other four);
 *   round_rows      fp32 rows rounded to bf16 (A of Pt dO, dSt Q: pairs along a row);
 *   pack_col_pairs  fp32 rows 2p, 2p+1 interleaved into pairs (A of P^T V, dSt^T K).
 */
#undef mk_dp
#undef gemm_dp
#undef pack_q_pairs
#undef load_k_bf16
#undef pack_row_pairs
#undef round_rows
#undef pack_col_pairs
#undef pair_bf16
#define mk_dp KFN(mk_dp)
#define gemm_dp KFN(gemm_dp)
#define pack_q_pairs KFN(pack_q_pairs)
#define load_k_bf16 KFN(load_k_bf16)
#define pack_row_pairs KFN(pack_row_pairs)
#define round_rows KFN(round_rows)
#define pack_col_pairs KFN(pack_col_pairs)
#define pair_bf16 KFN(pair_bf16)

#ifdef BURST_CPU_AMX
#include "cpu_tile_amx.h"
#else
/* Rows of the dot-product micro-kernel: 12 x 2 vectors of accumulators (24 of the 32 AVX-512
 * registers) hide the instruction's latency on cores that issue two per cycle. It divides BC and
 * every BR, so an operand padded to those tiles is readable up to a whole block. */
#define BURST_CPU_DP_MR 12
#define BURST_CPU_DP_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* One DP_MR x (nv * VL) block: acc[r] = sum_p A[r am + p ak] . B[p ldb + ...] over K2 pairs,
 * then C[r] = mul acc (STORE), C[r] += acc (ADD) or C[r] = rs[r] C[r] + acc (SCALE) for
 * r < rows. nv (1 or 2) and mode are constants at every call site; A rows up to DP_MR are read. */
KATTR void mk_dp(const int nv, const int rows, int64_t K2, const uint32_t *A, int64_t am,
                 int64_t ak, const uint32_t *B, int64_t ldb, float *C, int64_t ldc, const int mode,
                 float mul, const float *rs)
{
#define BURST_CPU_DP_DECL(r) vf c##r##0 = vf_zero(), c##r##1 = vf_zero();
    BURST_CPU_DP_EACH(BURST_CPU_DP_DECL)
#undef BURST_CPU_DP_DECL
    /* rows 3q + s are read at aq[s am] (s < 3): four pointers to advance, and addresses that
     * need no arithmetic of their own (base + index * 4 or * 8) */
    const uint32_t *a0 = A, *a3 = A + 3 * am, *a6 = A + 6 * am, *a9 = A + 9 * am, *b = B;
    for (int64_t p = 0; p < K2; p++, a0 += ak, a3 += ak, a6 += ak, a9 += ak, b += ldb) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)b);
        __m512bh b1 = nv > 1 ? (__m512bh)_mm512_loadu_si512((const void *)(b + VL)) : b0;
        __m512bh x;
#define BURST_CPU_DP_ROW(r, aq, s)                                                                 \
    x = (__m512bh)_mm512_set1_epi32((int)aq[(s)*am]);                                              \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, x, b0);                                                    \
    if (nv > 1)                                                                                    \
        c##r##1 = _mm512_dpbf16_ps(c##r##1, x, b1);
        BURST_CPU_DP_ROW(0, a0, 0)
        BURST_CPU_DP_ROW(1, a0, 1)
        BURST_CPU_DP_ROW(2, a0, 2)
        BURST_CPU_DP_ROW(3, a3, 0)
        BURST_CPU_DP_ROW(4, a3, 1)
        BURST_CPU_DP_ROW(5, a3, 2)
        BURST_CPU_DP_ROW(6, a6, 0)
        BURST_CPU_DP_ROW(7, a6, 1)
        BURST_CPU_DP_ROW(8, a6, 2)
        BURST_CPU_DP_ROW(9, a9, 0)
        BURST_CPU_DP_ROW(10, a9, 1)
        BURST_CPU_DP_ROW(11, a9, 2)
#undef BURST_CPU_DP_ROW
    }
    vf m = vf_set1(mul);
#define BURST_CPU_DP_ST(p, v, r)                                                                   \
    do {                                                                                           \
        if (mode == BURST_CPU_STORE)                                                               \
            vf_store(p, vf_mul(v, m));                                                             \
        else if (mode == BURST_CPU_ADD)                                                            \
            vf_store(p, vf_add(vf_load(p), v));                                                    \
        else                                                                                       \
            vf_store(p, vf_fma(vf_set1(rs[r]), vf_load(p), v));                                    \
    } while (0);
#define BURST_CPU_DP_OUT(r)                                                                        \
    if (rows > r) {                                                                                \
        float *cr = C + (r)*ldc;                                                                   \
        BURST_CPU_DP_ST(cr, c##r##0, r)                                                            \
        if (nv > 1)                                                                                \
            BURST_CPU_DP_ST(cr + VL, c##r##1, r)                                                   \
    }
    BURST_CPU_DP_EACH(BURST_CPU_DP_OUT)
#undef BURST_CPU_DP_OUT
#undef BURST_CPU_DP_ST
}

/* C[M x N] (op)= A B over K2 pairs (mk_dp); A readable up to M rounded up to DP_MR rows, N a
 * multiple of VL. */
KATTR void gemm_dp(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t am, int64_t ak,
                   const uint32_t *B, int64_t ldb, float *C, int64_t ldc, const int mode, float mul,
                   const float *rs)
{
    const int64_t R = BURST_CPU_DP_MR;
    int64_t n0 = 0;
    for (; n0 + 2 * VL <= N; n0 += 2 * VL)
        for (int64_t m0 = 0; m0 < M; m0 += R) {
            int rows = M - m0 < R ? (int)(M - m0) : (int)R;
            mk_dp(2, rows, K2, A + m0 * am, am, ak, B + n0, ldb, C + m0 * ldc + n0, ldc, mode, mul,
                  rs ? rs + m0 : rs);
        }
    if (n0 < N)
        for (int64_t m0 = 0; m0 < M; m0 += R) {
            int rows = M - m0 < R ? (int)(M - m0) : (int)R;
            mk_dp(1, rows, K2, A + m0 * am, am, ak, B + n0, ldb, C + m0 * ldc + n0, ldc, mode, mul,
                  rs ? rs + m0 : rs);
        }
}
#endif /* BURST_CPU_AMX */

/* qp[c/2][i] = pair (Q[i][c], Q[i][c+1]) of rows i < rows of a bf16 view, 0 up to br. */
KATTR void pack_q_pairs(uint32_t *qp, const struct burst_tensor *q, int64_t b, int64_t i0,
                        int64_t rows, int64_t h, int64_t br)
{
    const int64_t d2 = q->shape[3] / 2;
    /* a block of 16 rows at a time, so that each block's stores fill whole cache lines of qp */
    for (int64_t i = 0; i < rows; i += 16) {
        const int64_t n = burst_cpu_min64(16, rows - i);
        const uint16_t *s[16];
        for (int64_t r = 0; r < n; r++)
            s[r] = burst_cpu_row(q, b, i0 + i + r, h);
        for (int64_t p = 0; p < d2; p++)
            for (int64_t r = 0; r < n; r++)
                qp[p * br + i + r] = (uint32_t)s[r][2 * p] | (uint32_t)s[r][2 * p + 1] << 16;
    }
    for (int64_t p = 0; p < d2 && rows < br; p++)
        memset(qp + p * br + rows, 0, sizeof(uint32_t) * (size_t)(br - rows));
}

/* kh[j][0 .. d) = K rows j0 + j of a bf16 view for j < cnt, zero rows up to jn. */
KATTR void load_k_bf16(uint16_t *kh, const struct burst_tensor *k, int64_t b, int64_t j0,
                       int64_t cnt, int64_t jn, int64_t g)
{
    const int64_t d = k->shape[3];
    for (int64_t j = 0; j < cnt; j++)
        memcpy(kh + j * d, burst_cpu_row(k, b, j0 + j, g), sizeof(uint16_t) * (size_t)d);
    if (jn > cnt)
        memset(kh + cnt * d, 0, sizeof(uint16_t) * (size_t)((jn - cnt) * d));
}

/* vp[p][c] = pair (X[j0 + 2p][c], X[j0 + 2p + 1][c]) of rows of a bf16 view (head h), rows at
 * or past j0 + cnt read as zero; p < n2. d is a multiple of VL. */
KATTR void pack_row_pairs(uint32_t *vp, const struct burst_tensor *x, int64_t b, int64_t j0,
                          int64_t cnt, int64_t n2, int64_t h)
{
    const int64_t d = x->shape[3];
    for (int64_t p = 0; p < n2; p++) {
        uint32_t *dst = vp + p * d;
        if (2 * p >= cnt) {
            memset(dst, 0, sizeof(uint32_t) * (size_t)d);
            continue;
        }
        const uint16_t *lo = burst_cpu_row(x, b, j0 + 2 * p, h);
        const uint16_t *hi = 2 * p + 1 < cnt ? burst_cpu_row(x, b, j0 + 2 * p + 1, h) : NULL;
        for (int64_t c = 0; c < d; c += VL) {
            __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(lo + c)));
            __m512i u = hi ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(hi + c)))
                           : _mm512_setzero_si512();
            _mm512_storeu_si512((void *)(dst + c), _mm512_or_si512(l, _mm512_slli_epi32(u, 16)));
        }
    }
}

/* The pairs (bf16(lo[n]), bf16(hi[n])) of two fp32 vectors, rounded to nearest even. */
KATTR __m512i pair_bf16(vf lo, vf hi)
{
    /* one conversion of both (lo's 16 values below hi's), then one interleaving permute */
    const __m512i inter =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(inter, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* dst[r][0 .. n) = bf16(src[r][0 .. n)) for r < m: rows of n (a multiple of VL) values. */
KATTR void round_rows(uint16_t *dst, const float *src, int64_t m, int64_t n)
{
    for (int64_t e = 0; e < m * n; e += VL)
        _mm256_storeu_si256((void *)(dst + e), (__m256i)_mm512_cvtneps_pbh(vf_load(src + e)));
}

/* dst[p][i] = pair (bf16(src[2p][i]), bf16(src[2p + 1][i])) for p < m2, i < n (a multiple of
 * VL): rows of n values. */
KATTR void pack_col_pairs(uint32_t *dst, const float *src, int64_t m2, int64_t n)
{
    for (int64_t p = 0; p < m2; p++) {
        const float *s = src + 2 * p * n;
        for (int64_t i = 0; i < n; i += VL)
            _mm512_storeu_si512((void *)(dst + p * n + i),
                                pair_bf16(vf_load(s + i), vf_load(s + n + i)));
    }
}
