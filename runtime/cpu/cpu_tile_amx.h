/*
 * runtime/cpu/cpu_tile_amx.h - gemm_dp on AMX tiles (TEMPLATE part of the avx512amx variant;
 * included by cpu_tile_dpbf16.h in place of its AVX512_BF16 gemm_dp when BURST_CPU_AMX is
 * defined).
 *
 * Same operands, layouts and results as the AVX512_BF16 gemm_dp (cpu_tile_dpbf16.h): C (op)= A B
 * over K2 bf16 pairs with fp32 accumulation. TDPBF16PS multiplies a tile of 16 rows x 16 pairs of
 * A by a tile of 16 pairs x 16 columns of B (both 64-byte rows) into a 16 x 16 fp32 tile of C,
 * with the rounding of AVX512_BF16 (products exact, fp32 sums, subnormal inputs as zero). Per
 * block of 16 rows of C:
 *   - the rows' pairs are copied into a zero-padded panel ap[16][K2 rounded up to 16]: rows of A
 *     are contiguous (ak = 1, a masked load), or strided with adjacent rows (am = 1, ak > 1: 16
 *     x 16 blocks transposed in registers), or strided otherwise (a gather of 16 pairs);
 *   - for every 32 columns, two C tiles accumulate over the panel's 16-pair chunks; B's chunks
 *     are loaded straight from B with its row stride, the last partial chunk from a zero-padded
 *     copy (its padding pairs must be finite zeros: NaN * 0 would poison the sums);
 *   - the C tiles are stored to a small buffer and applied to C with AVX-512 (mode as mk_dp).
 * The panel is on the stack: K2 is at most 128 pairs (burst_cpu_call_isa runs head dims up to
 * 256 here; the other reductions run over at most BR / 2 or BC / 2 pairs).
 * The tile configuration is loaded at entry and released at exit, so nothing of it outlives a
 * call (other code of the process may use the tiles between calls). GCC's tile intrinsics are
 * asm statements that do not tell the compiler which memory they read: a compiler barrier
 * precedes each load of the configuration or of a tile from memory that was just written.
 */
#undef gemm_dp
#undef amx_cfg
#undef amx_panel
#undef amx_t16
#define gemm_dp KFN(gemm_dp)
#define amx_cfg KFN(amx_cfg)
#define amx_panel KFN(amx_panel)
#define amx_t16 KFN(amx_t16)

#define BURST_CPU_AMX_K2MAX 128 /* pairs of a row of the A panel */
#define BURST_CPU_AMX_FENCE() __asm__ volatile("" ::: "memory")

/* The tile configuration (palette 1): tiles 0-4 of 16 rows x 64 bytes (0, 1: C; 2: A; 3, 4: B). */
struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* r[0 .. 16) := its 16 x 16 transpose (32-bit elements): pairs within 128-bit lanes, then
 * quadruples, then the lanes themselves. */
KATTR void amx_t16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* r[m + c], lane L: rows m .. m + 3 of column 4 L + c */
    for (int m = 0; m < 16; m += 4) {
        r[m] = _mm512_unpacklo_epi64(t[m], t[m + 2]);
        r[m + 1] = _mm512_unpackhi_epi64(t[m], t[m + 2]);
        r[m + 2] = _mm512_unpacklo_epi64(t[m + 1], t[m + 3]);
        r[m + 3] = _mm512_unpackhi_epi64(t[m + 1], t[m + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i x0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
        __m512i x1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        __m512i y0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
        __m512i y1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
        t[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        t[8 + c] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
        t[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* ap[r][0 .. K2p) = pairs (A[(r) am + p ak], p < K2) of rows r < rows, zeros elsewhere. Rows of
 * adjacent elements (am = 1: P^T, dS^T) are read as 16 x 16 blocks and transposed in registers;
 * other strided rows are gathered. */
KATTR void amx_panel(uint32_t *ap, int64_t K2p, int rows, int64_t K2, const uint32_t *A, int64_t am,
                     int64_t ak)
{
    if (am == 1 && ak > 1) {
        const __mmask16 rm = (__mmask16)((1u << rows) - 1u);
        for (int64_t k0 = 0; k0 < K2p; k0 += 16) {
            const int64_t kr = burst_cpu_min64(16, K2 - k0);
            __m512i r[16];
            for (int p = 0; p < 16; p++)
                r[p] = p < kr ? _mm512_maskz_loadu_epi32(rm, (const void *)(A + (k0 + p) * ak))
                              : _mm512_setzero_si512();
            amx_t16(r);
            for (int q = 0; q < 16; q++)
                _mm512_storeu_si512((void *)(ap + q * K2p + k0), r[q]);
        }
        return;
    }
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int)ak));
    for (int r = 0; r < 16; r++) {
        uint32_t *dst = ap + r * K2p;
        const uint32_t *src = A + r * am;
        for (int64_t k0 = 0; k0 < K2p; k0 += 16) {
            int64_t kr = r < rows ? burst_cpu_min64(16, burst_cpu_max64(K2 - k0, 0)) : 0;
            __mmask16 m = (__mmask16)((1u << kr) - 1u);
            __m512i v = _mm512_setzero_si512();
            if (kr > 0 && ak == 1)
                v = _mm512_maskz_loadu_epi32(m, (const void *)(src + k0));
            else if (kr > 0)
                v = _mm512_mask_i32gather_epi32(v, m, idx, (const void *)(src + k0 * ak), 4);
            _mm512_storeu_si512((void *)(dst + k0), v);
        }
    }
}

/* C[M x N] (op)= A B over K2 <= BURST_CPU_AMX_K2MAX pairs (see mk_dp of cpu_tile_dpbf16.h for
 * mode, mul and rs); N a multiple of VL. Only rows < M of A are read. */
KATTR void gemm_dp(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t am, int64_t ak,
                   const uint32_t *B, int64_t ldb, float *C, int64_t ldc, const int mode, float mul,
                   const float *rs)
{
    _Alignas(64) struct amx_cfg cfg;
    _Alignas(64) uint32_t ap[16 * BURST_CPU_AMX_K2MAX];
    _Alignas(64) uint32_t bz[16 * 32];
    _Alignas(64) float cb[16 * 32];
    const int64_t K2p = (K2 + 15) / 16 * 16;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    BURST_CPU_AMX_FENCE();
    _tile_loadconfig(&cfg);
    vf m = vf_set1(mul);
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
        const int rows = M - m0 < 16 ? (int)(M - m0) : 16;
        amx_panel(ap, K2p, rows, K2, A + m0 * am, am, ak);
        for (int64_t n0 = 0; n0 < N; n0 += 2 * VL) {
            const int nt = N - n0 >= 2 * VL ? 2 : 1; /* C tiles of this block */
            _tile_zero(0);
            _tile_zero(1);
            for (int64_t k0 = 0; k0 < K2p; k0 += 16) {
                const uint32_t *b = B + k0 * ldb + n0;
                int64_t bs = ldb * 4;
                if (k0 + 16 > K2) { /* partial chunk: zero-padded copy */
                    for (int64_t q = 0; q < 16; q++)
                        for (int v = 0; v < 2; v++)
                            _mm512_storeu_si512(
                                (void *)(bz + q * 32 + v * 16),
                                k0 + q < K2 && v < nt
                                    ? _mm512_loadu_si512((const void *)(b + q * ldb + v * 16))
                                    : _mm512_setzero_si512());
                    b = bz;
                    bs = 32 * 4;
                }
                BURST_CPU_AMX_FENCE();
                _tile_loadd(2, ap + k0, K2p * 4);
                _tile_loadd(3, b, bs);
                _tile_dpbf16ps(0, 2, 3);
                if (nt > 1) {
                    _tile_loadd(4, b + 16, bs);
                    _tile_dpbf16ps(1, 2, 4);
                }
            }
            _tile_stored(0, cb, 32 * 4);
            _tile_stored(1, cb + 16, 32 * 4);
            BURST_CPU_AMX_FENCE();
            for (int r = 0; r < rows; r++) {
                for (int v = 0; v < nt; v++) {
                    float *p = C + (m0 + r) * ldc + n0 + v * VL;
                    vf acc = vf_load(cb + r * 32 + v * 16);
                    if (mode == BURST_CPU_STORE)
                        vf_store(p, vf_mul(acc, m));
                    else if (mode == BURST_CPU_ADD)
                        vf_store(p, vf_add(vf_load(p), acc));
                    else
                        vf_store(p, vf_fma(vf_set1(rs[m0 + r]), vf_load(p), acc));
                }
            }
        }
    }
    _tile_release();
}
