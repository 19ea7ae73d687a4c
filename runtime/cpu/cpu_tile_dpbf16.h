/*
 * runtime/cpu/cpu_tile_dpbf16.h - products of bf16 inputs on AVX512_BF16 dot products (TEMPLATE
 * part of the avx512bf16 variant; included by cpu_tile.h only when BURST_CPU_DPBF16 is defined).
 *
 * Used for the scores St = K Q^T (forward and backward) and dPt = V dO^T (backward) when those
 * inputs are bf16: the products are taken from the inputs' own bits. VDPBF16PS multiplies pairs
 * of bf16 values exactly (8-bit significands: the product fits fp32) and adds both products into
 * fp32 accumulators, so each result is the same d-term fp32 dot product as the fp32 kernels'
 * (there: one rounding per FMA; here: per pair), without converting the tiles to fp32. The
 * instruction treats subnormal bf16 inputs (below 2^-126) as zero: their products are below
 * the harness's absolute floor of 1e-5 of the largest result by far.
 * The operands are laid out in pairs along d:
 *   K-side tile   kh[j][c]             bf16, row-major, rows padded to MR with zeros;
 *   Q-side tile   qp[c/2][i] (uint32)  the pair (Q[i][c], Q[i][c+1]), zero for rows past it.
 * A scale (tau log2(e) for scores) is applied to the fp32 results (the inputs stay unrounded).
 */
#undef mk_dp
#undef gemm_dp
#undef pack_q_pairs
#undef load_k_bf16
#define mk_dp KFN(mk_dp)
#define gemm_dp KFN(gemm_dp)
#define pack_q_pairs KFN(pack_q_pairs)
#define load_k_bf16 KFN(load_k_bf16)

/* C[r][0 .. nv*VL) = mul * sum_p A[r][p] . B[p][...] for r < rows (pairs p < K2); A rows of
 * am bf16 values (pair p at 2p), B rows of ldb uint32 pairs. nv (1 or 2) is a constant at every
 * call site. */
KATTR void mk_dp(const int nv, const int rows, int64_t K2, const uint16_t *A, int64_t am,
                 const uint32_t *B, int64_t ldb, float *C, int64_t ldc, float mul)
{
    vf c00 = vf_zero(), c01 = vf_zero(), c10 = vf_zero(), c11 = vf_zero();
    vf c20 = vf_zero(), c21 = vf_zero(), c30 = vf_zero(), c31 = vf_zero();
    vf c40 = vf_zero(), c41 = vf_zero(), c50 = vf_zero(), c51 = vf_zero();
    for (int64_t p = 0; p < K2; p++) {
        const uint32_t *b = B + p * ldb;
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)b);
        __m512bh b1 = nv > 1 ? (__m512bh)_mm512_loadu_si512((const void *)(b + VL)) : b0;
        __m512bh x;
        int32_t w;
#define BURST_CPU_DP_ROW(r)                                                                        \
    memcpy(&w, A + (r)*am + 2 * p, sizeof w);                                                      \
    x = (__m512bh)_mm512_set1_epi32(w);                                                            \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, x, b0);                                                    \
    if (nv > 1)                                                                                    \
        c##r##1 = _mm512_dpbf16_ps(c##r##1, x, b1);
        BURST_CPU_DP_ROW(0)
        BURST_CPU_DP_ROW(1)
        BURST_CPU_DP_ROW(2)
        BURST_CPU_DP_ROW(3)
        BURST_CPU_DP_ROW(4)
        BURST_CPU_DP_ROW(5)
#undef BURST_CPU_DP_ROW
    }
    vf m = vf_set1(mul);
#define BURST_CPU_DP_OUT(r)                                                                        \
    if (rows > r) {                                                                                \
        vf_store(C + (r)*ldc, vf_mul(c##r##0, m));                                                 \
        if (nv > 1)                                                                                \
            vf_store(C + (r)*ldc + VL, vf_mul(c##r##1, m));                                        \
    }
    BURST_CPU_DP_OUT(0)
    BURST_CPU_DP_OUT(1)
    BURST_CPU_DP_OUT(2)
    BURST_CPU_DP_OUT(3)
    BURST_CPU_DP_OUT(4)
    BURST_CPU_DP_OUT(5)
#undef BURST_CPU_DP_OUT
}

/* C[M x N] = mul * A B over K2 pairs; M a multiple of MR (A padded), N a multiple of VL. */
KATTR void gemm_dp(int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t am,
                   const uint32_t *B, int64_t ldb, float *C, int64_t ldc, float mul)
{
    int64_t n0 = 0;
    for (; n0 + 2 * VL <= N; n0 += 2 * VL)
        for (int64_t m0 = 0; m0 < M; m0 += BURST_CPU_MR)
            mk_dp(2, BURST_CPU_MR, K2, A + m0 * am, am, B + n0, ldb, C + m0 * ldc + n0, ldc, mul);
    if (n0 < N)
        for (int64_t m0 = 0; m0 < M; m0 += BURST_CPU_MR)
            mk_dp(1, BURST_CPU_MR, K2, A + m0 * am, am, B + n0, ldb, C + m0 * ldc + n0, ldc, mul);
}

/* qp[c/2][i] = pair (Q[i][c], Q[i][c+1]) of rows i < rows of a bf16 view, 0 up to br. */
KATTR void pack_q_pairs(uint32_t *qp, const struct burst_tensor *q, int64_t b, int64_t i0,
                        int64_t rows, int64_t h, int64_t br)
{
    const int64_t d2 = q->shape[3] / 2;
    for (int64_t i = 0; i < rows; i++) {
        const uint16_t *s = burst_cpu_row(q, b, i0 + i, h);
        for (int64_t p = 0; p < d2; p++)
            qp[p * br + i] = (uint32_t)s[2 * p] | (uint32_t)s[2 * p + 1] << 16;
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
