/*
 * runtime/cpu/cpu_internal.h - shared declarations of the cpu backend (private).
 *
 * Kernel layout (see cpu_fwd.c and cpu_bwd.c for the algorithms):
 *   - Q tiles of BR rows, K/V tiles of BC rows, micro-kernel of MR rows x (2 vectors) columns;
 *   - every tile is converted to fp32 into per-thread scratch (bf16 tiles of the dot-product
 *     variants stay bf16, packed as pairs: cpu_tile_dpbf16.h); scores are kept transposed,
 *     St[key][query], so softmax statistics are vertical vector operations;
 *   - each kernel exists once per instruction-set variant (cpu_simd.h): "avx512amx",
 *     "avx512bf16", "avx512", "avx2" (x86-64 GCC/clang, chosen at run time), "neon" (aarch64)
 *     and "base" (portable C / GNU vectors). BURST_CPU_ISA names one to force it (burst_cpu_pick_isa).
 */
#ifndef BURST_CPU_INTERNAL_H
#define BURST_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_pool.h"
#include "step_check.h"

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "the cpu kernels rely on IEEE infinities for masking: do not build them with -ffast-math"
#endif

/* Instruction-set variants of the kernels (BURST_CPU_VARIANT of cpu_simd.h; the same values
 * as enum burst_cpu_isa). */
#define BURST_CPU_V_BASE 0
#define BURST_CPU_V_AVX2 1
#define BURST_CPU_V_AVX512 2
#define BURST_CPU_V_AVX512BF16 3
#define BURST_CPU_V_NEON 4
#define BURST_CPU_V_AVX512AMX 5

#if defined(__x86_64__) && defined(__GNUC__)
#define BURST_CPU_HAVE_X86_VARIANTS 1
#else
#define BURST_CPU_HAVE_X86_VARIANTS 0
#endif
/* The AMX intrinsics: GCC 11 and clang 12 onwards. */
#if BURST_CPU_HAVE_X86_VARIANTS &&                                                                 \
    (defined(__clang__) ? __clang_major__ >= 12 : defined(__GNUC__) && __GNUC__ >= 11)
#define BURST_CPU_HAVE_AMX_VARIANT 1
#else
#define BURST_CPU_HAVE_AMX_VARIANT 0
#endif
#if defined(__aarch64__) && defined(__GNUC__)
#define BURST_CPU_HAVE_NEON_VARIANT 1
#else
#define BURST_CPU_HAVE_NEON_VARIANT 0
#endif

/* 1 when this compiler and target build variant v (a BURST_CPU_V_* value). */
#define BURST_CPU_BUILDS(v)                                                                        \
    ((v) == BURST_CPU_V_BASE ||                                                                    \
     (BURST_CPU_HAVE_X86_VARIANTS &&                                                               \
      ((v) == BURST_CPU_V_AVX2 || (v) == BURST_CPU_V_AVX512 || (v) == BURST_CPU_V_AVX512BF16)) ||  \
     (BURST_CPU_HAVE_AMX_VARIANT && (v) == BURST_CPU_V_AVX512AMX) ||                               \
     (BURST_CPU_HAVE_NEON_VARIANT && (v) == BURST_CPU_V_NEON))

enum burst_cpu_isa {
    BURST_CPU_ISA_BASE = BURST_CPU_V_BASE,
    BURST_CPU_ISA_AVX2 = BURST_CPU_V_AVX2,
    BURST_CPU_ISA_AVX512 = BURST_CPU_V_AVX512,         /* AVX-512 F, BW, DQ, VL */
    BURST_CPU_ISA_AVX512BF16 = BURST_CPU_V_AVX512BF16, /* and AVX512_BF16 */
    BURST_CPU_ISA_NEON = BURST_CPU_V_NEON,
    BURST_CPU_ISA_AVX512AMX = BURST_CPU_V_AVX512AMX, /* and AMX-TILE, AMX-BF16 */
    BURST_CPU_ISA_COUNT
};

/* The variant one call runs: the AVX-512 kernels need head dims that are multiples of their
 * 16 lanes; other head dims run the avx2 ones. The AMX kernels stage a reduction of at most
 * 128 bf16 pairs (cpu_tile_amx.h): head dims above 256 run the avx512bf16 ones. */
static inline enum burst_cpu_isa burst_cpu_call_isa(enum burst_cpu_isa isa, int64_t d)
{
    if ((isa == BURST_CPU_ISA_AVX512 || isa == BURST_CPU_ISA_AVX512BF16 ||
         isa == BURST_CPU_ISA_AVX512AMX) &&
        d % 16 != 0)
        return BURST_CPU_ISA_AVX2;
    if (isa == BURST_CPU_ISA_AVX512AMX && d > 256)
        return BURST_CPU_ISA_AVX512BF16;
    return isa;
}

/* Tile sizes. BR (Q rows): multiple of 16 and of MR, chosen from d so that a thread's tiles
 * stay within a 512 KiB L2; larger BR means fewer passes over K/V. BC (K rows): multiple of MR.
 * They depend on d only, never on the thread count (determinism). */
#define BURST_CPU_MR 6
#define BURST_CPU_FWD_BR(d) ((d) <= 128 ? 192 : 96)
#define BURST_CPU_FWD_BC 48
/* BC of the forward on bf16 dot products: longer P V reductions (48 pairs: whole chunks of 16
 * for the AMX tiles); the forward's scratch is sized for it. */
#define BURST_CPU_FWD_BC_DP 96
#define BURST_CPU_BWD_BR(d) ((d) <= 128 ? 96 : 48)
#define BURST_CPU_BWD_BC 48

struct burst_cpu_backend {
    struct burst_cpu_pool *pool;
    enum burst_cpu_isa isa;
};

/* Geometry of one attention call, validated from the tensors. */
/* Forward job context (shared by every work item of one fwd_step). */
struct burst_cpu_fwd_job {
    const struct burst_fwd_args *a;
    struct burst_step_dims dim;
    int64_t br;  /* Q tile rows */
    int64_t nqt; /* Q tiles per (batch, head) */
    /* fwd_final: the rows written normalised to o (q's dtype, any strides) and lse ([B, Hq, nq]);
     * NULL: merged into a->o_acc, a->lse_acc (fwd_step) */
    const struct burst_tensor *o;
    float *lse;
};

/* Backward job context. */
struct burst_cpu_bwd_job {
    const struct burst_bwd_args *a;
    struct burst_step_dims dim;
    int64_t br;       /* Q tile rows */
    int64_t nqt, nkt; /* Q tiles, K tiles per (batch, head) */
};

/* Address of element [b, i, h, 0] of a view. */
static inline const void *burst_cpu_row(const struct burst_tensor *t, int64_t b, int64_t i,
                                        int64_t h)
{
    size_t es = t->dtype == BURST_DTYPE_FP32 ? 4 : 2;
    int64_t off = b * t->stride[0] + i * t->stride[1] + h * t->stride[2];
    return (const char *)t->data + off * (int64_t)es;
}

/* Ask the cpu to start loading rows [i0, i0 + n) of head h (d elements each, esize bytes per
 * element) of a [B, n, H, d] buffer at base with row stride rs (elements): used one tile ahead. */
static inline void burst_cpu_prefetch(const void *base, size_t esize, int64_t rs, int64_t i0,
                                      int64_t n, int64_t d, int write)
{
#if defined(__GNUC__)
    for (int64_t i = i0; i < i0 + n; i++) {
        const char *p = (const char *)base + (size_t)(i * rs) * esize;
        for (size_t off = 0; off < (size_t)d * esize; off += 64) {
#if defined(__x86_64__)
            /* volatile asm: GCC deletes loops of __builtin_prefetch as dead code */
            (void)write;
            __asm__ volatile("prefetcht1 %0" : : "m"(*(const char *)(p + off)));
#else
            if (write)
                __builtin_prefetch(p + off, 1, 2);
            else
                __builtin_prefetch(p + off, 0, 2);
#endif
        }
    }
#else
    (void)base, (void)esize, (void)rs, (void)i0, (void)n, (void)d, (void)write;
#endif
}

/* Prefetch rows [i0, i0 + n) of head h of a view. */
static inline void burst_cpu_prefetch_view(const struct burst_tensor *t, int64_t b, int64_t i0,
                                           int64_t n, int64_t h)
{
    size_t es = t->dtype == BURST_DTYPE_FP32 ? 4 : 2;
    const char *base = (const char *)t->data + (b * t->stride[0] + h * t->stride[2]) * (int64_t)es;
    burst_cpu_prefetch(base, es, t->stride[1], i0, n, t->shape[3], 0);
}

static inline int64_t burst_cpu_min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
static inline int64_t burst_cpu_max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Allowed key interval of every query row of the tile [i0, i0 + rows) (rows <= BR), clamped to
 * [0, nk]; rows past `rows` up to br get an empty interval. Fills the summary of the tile:
 * union [*kmin, *kmax) (empty when kmin >= kmax) and intersection [*kbmax, *kemin). */
struct burst_cpu_rows {
    int64_t kmin, kmax, kbmax, kemin;
};

static inline struct burst_cpu_rows burst_cpu_intervals(const struct burst_posmap *qpos,
                                                        const struct burst_posmap *kpos,
                                                        struct burst_mask mask, int64_t nk,
                                                        int64_t i0, int64_t rows, int64_t br,
                                                        int64_t *kb, int64_t *ke)
{
    struct burst_cpu_rows r = {INT64_MAX, 0, 0, INT64_MAX};
    /* burst_mask_keys of the window alone, clipped to the keys of the row's document: the
     * same interval (burst_posmap_count_le is nondecreasing), with the document's search and
     * key bounds done once per document instead of once per row */
    struct burst_mask window = mask;
    window.docs = NULL;
    window.ndocs = 0;
    const int with_docs = mask.docs && mask.ndocs > 1;
    int64_t db = 0, de = 0, dlo = 0, dhi = 0; /* the last row's document and its keys */
    for (int64_t i = 0; i < rows; i++) {
        int64_t lo, hi, pos = burst_posmap_pos(qpos, i0 + i);
        burst_mask_keys(kpos, window, pos, &lo, &hi);
        if (with_docs) {
            if (pos < db || pos >= de) {
                burst_mask_doc(mask, pos, &db, &de);
                dlo = burst_posmap_count_le(kpos, db - 1);
                dhi = burst_posmap_count_le(kpos, de - 1);
            }
            lo = burst_cpu_max64(lo, dlo);
            hi = burst_cpu_min64(hi, dhi);
        }
        lo = burst_cpu_max64(lo, 0);
        hi = burst_cpu_min64(hi, nk);
        if (hi < lo)
            hi = lo;
        kb[i] = lo;
        ke[i] = hi;
        if (lo < hi) {
            r.kmin = burst_cpu_min64(r.kmin, lo);
            r.kmax = burst_cpu_max64(r.kmax, hi);
        }
        r.kbmax = burst_cpu_max64(r.kbmax, lo);
        r.kemin = burst_cpu_min64(r.kemin, hi);
    }
    for (int64_t i = rows; i < br; i++)
        kb[i] = ke[i] = 0;
    return r;
}

/* End of the K tile that starts at local key j0: j0 + bc, clipped to kmax and, with documents,
 * to the end of the document holding key j0. A tile then holds one document's keys, so the rows
 * that need it are that document's rows only, and a document's tiles start at its first key
 * (a Q tile that straddles documents computes no pair across a boundary). Without documents the
 * tiles are steps of bc from j0. */
static inline int64_t burst_cpu_ktile_end(const struct burst_posmap *kpos, struct burst_mask mask,
                                          int64_t j0, int64_t bc, int64_t kmax)
{
    int64_t j1 = burst_cpu_min64(j0 + bc, kmax);
    if (mask.docs && mask.ndocs > 1) {
        int64_t db, de;
        burst_mask_doc(mask, burst_posmap_pos(kpos, j0), &db, &de);
        j1 = burst_cpu_min64(j1, burst_posmap_count_le(kpos, de - 1));
    }
    return j1;
}

/* Does any row of the tile allow a key of [j0, j1)? */
static inline int burst_cpu_any_allowed(const int64_t *kb, const int64_t *ke, int64_t rows,
                                        int64_t j0, int64_t j1)
{
    for (int64_t i = 0; i < rows; i++)
        if (burst_cpu_max64(kb[i], j0) < burst_cpu_min64(ke[i], j1))
            return 1;
    return 0;
}

/* The rows [*ra, *rb) of the tile with a key of [j0, j1) (rows < `rows`; empty: ra == rb): the
 * rows' intervals have nondecreasing ends, so those rows are a run, from the first whose interval
 * ends past j0 to the last that starts before j1 (rows with empty intervals inside it are masked
 * by the caller). Binary searches over the rows. */
static inline void burst_cpu_row_run(const int64_t *kb, const int64_t *ke, int64_t rows, int64_t j0,
                                     int64_t j1, int64_t *ra, int64_t *rb)
{
    int64_t lo = 0, hi = rows; /* first row with ke > j0 */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ke[mid] <= j0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *ra = lo;
    hi = rows; /* first row at or past ra with kb >= j1 */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (kb[mid] < j1)
            lo = mid + 1;
        else
            hi = mid;
    }
    *rb = lo;
}

/* The rows a kernel computes for the tile [j0, j1): the run of burst_cpu_row_run from its first
 * row, rounded up to whole vectors of vl rows, moved down where that would pass br (a multiple
 * of vl). The extra rows are masked or padding. */
static inline void burst_cpu_row_span(const int64_t *kb, const int64_t *ke, int64_t rows,
                                      int64_t j0, int64_t j1, int64_t vl, int64_t br, int64_t *ra,
                                      int64_t *rb)
{
    int64_t a, b;
    burst_cpu_row_run(kb, ke, rows, j0, j1, &a, &b);
    int64_t n = (b - a + vl - 1) / vl * vl;
    if (a + n > br)
        a = br - n;
    *ra = a;
    *rb = a + n;
}

/* The next K tile [j0, *j1) of a Q tile whose rows allow keys [kmin, kmax) (burst_cpu_rows):
 * burst_cpu_ktile_end's, halved (at a multiple of mr) when the rows that need its second half
 * start at least vl rows after those that need its first: on a causal diagonal the first half's
 * rows would otherwise compute the second half's masked keys. With split 0 (kernels that
 * compute every row of a tile) the tile is not halved. */
static inline int64_t burst_cpu_ktile_next(const struct burst_posmap *kpos, struct burst_mask mask,
                                           const int64_t *kb, const int64_t *ke, int64_t rows,
                                           int64_t j0, int64_t bc, int64_t kmax, int64_t mr,
                                           int64_t vl, int split)
{
    int64_t j1 = burst_cpu_ktile_end(kpos, mask, j0, bc, kmax);
    int64_t mid = j0 + ((j1 - j0) / 2 + mr - 1) / mr * mr;
    if (!split || mid >= j1)
        return j1;
    int64_t a0, b0, a1, b1;
    burst_cpu_row_run(kb, ke, rows, j0, mid, &a0, &b0);
    burst_cpu_row_run(kb, ke, rows, mid, j1, &a1, &b1);
    return a0 < b0 && a1 >= a0 + vl ? mid : j1;
}

/* 1 when BURST_CPU_ISA names a variant and it is the one "auto" takes on this cpu (the tests of
 * forced variants skip such a run: the unforced one covers it). */
int burst_cpu_isa_forced_is_auto(void);

/* fp32 lanes of a variant's vectors (cpu_fwd.c; 0 when this target does not build it). */
int burst_cpu_isa_lanes(enum burst_cpu_isa isa);

burst_status_t burst_cpu_fwd_step(void *be, const struct burst_fwd_args *args);
/* The fp8 forward step (cpu_fp8.c): args->fp8's operands; o NULL merges into the accumulators,
 * else fwd_final's writes. And its quantizers (runtime/fp8.h's host ones). */
burst_status_t burst_cpu_fp8_step(struct burst_cpu_backend *cpu, const struct burst_fwd_args *a,
                                  const struct burst_tensor *o, float *lse);
burst_status_t burst_cpu_fp8_quant_q(void *be, const struct burst_tensor *q, void *dst);
burst_status_t burst_cpu_fp8_quant_kv(void *be, const struct burst_tensor *k,
                                      const struct burst_tensor *v, void *dst);
burst_status_t burst_cpu_fwd_final(void *be, const struct burst_fwd_args *args,
                                   const struct burst_tensor *o, float *lse);
/* cpu_decode.c: decode_step, split over the keys (backend.h, burst_decode_args). */
burst_status_t burst_cpu_decode_step(void *be, const struct burst_decode_args *args);
burst_status_t burst_cpu_bwd_step(void *be, const struct burst_bwd_args *args);
burst_status_t burst_cpu_bwd_delta(void *be, const struct burst_tensor *dout,
                                   const struct burst_tensor *o, float *delta);

#endif /* BURST_CPU_INTERNAL_H */
