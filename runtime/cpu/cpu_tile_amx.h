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
 *     are contiguous (ak = 1, a masked load) or strided (ak > 1, a gather of 16 pairs);
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
#define gemm_dp KFN(gemm_dp)
#define amx_cfg KFN(amx_cfg)
#define amx_panel KFN(amx_panel)

#define BURST_CPU_AMX_K2MAX 128 /* pairs of a row of the A panel */
#define BURST_CPU_AMX_FENCE() __asm__ volatile("" ::: "memory")

/* The tile configuration (palette 1): tiles 0-4 of 16 rows x 64 bytes (0, 1: C; 2: A; 3, 4: B). */
struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* ap[r][0 .. K2p) = pairs (A[(r) am + p ak], p < K2) of rows r < rows, zeros elsewhere. */
KATTR void amx_panel(uint32_t *ap, int64_t K2p, int rows, int64_t K2, const uint32_t *A, int64_t am,
                     int64_t ak)
{
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
