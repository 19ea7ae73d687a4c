/*
 * runtime/cpu/cpu_items.h - the work items of the cpu kernels: what the step files that run them
 * (cpu_fwd.c, cpu_bwd.c, cpu_decode.c) and the kernel objects that define them share.
 *
 * Each kernel template (cpu_fwd_kern.h, cpu_bwd_kern.h, cpu_decode_kern.h) is compiled once per
 * instruction-set variant, each variant in an object of its own (cpu_kern.c.in, written out per
 * template and variant by runtime/cpu/meson.build), so that a parallel build compiles them side
 * by side. Every object defines its variant's entry points, the names carrying the variant's
 * suffix (base, avx2, avx512, avx512bf16, avx512amx, neon):
 *   burst_cpu_fwd_item_<v>      one forward item: (batch, query head, Q tile)
 *   burst_cpu_fwd_lanes_<v>     the variant's fp32 lanes (burst_cpu_isa_lanes)
 *   burst_cpu_bwd_group_<v>     one backward item of the single pass: (batch, kv head)
 *   burst_cpu_bwd_kv_<v>        dK, dV of (batch, kv head, K tile) in the two-pass schedule
 *   burst_cpu_bwd_q_<v>         dQ of (batch, query head, Q tile) in the two-pass schedule
 *   burst_cpu_decode_item_<v>   one decode item: (kv head, run of keys)
 * This header declares them for every variant (a step file names only those its target builds:
 * BURST_CPU_HAVE_*_VARIANT(S), cpu_internal.h), and holds the decode job and the layouts of each
 * item's per-thread scratch.
 */
#ifndef BURST_CPU_ITEMS_H
#define BURST_CPU_ITEMS_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_internal.h"

#define BURST_CPU_ITEMS_OF(v)                                                                      \
    void burst_cpu_fwd_item_##v(void *ctx, int64_t item, void *scratch);                           \
    extern const int burst_cpu_fwd_lanes_##v;                                                      \
    void burst_cpu_bwd_group_##v(void *ctx, int64_t item, void *scratch);                          \
    void burst_cpu_bwd_kv_##v(void *ctx, int64_t item, void *scratch);                             \
    void burst_cpu_bwd_q_##v(void *ctx, int64_t item, void *scratch);                              \
    void burst_cpu_decode_item_##v(void *ctx, int64_t item, void *scratch);
BURST_CPU_ITEMS_OF(base)
BURST_CPU_ITEMS_OF(avx2)
BURST_CPU_ITEMS_OF(avx512)
BURST_CPU_ITEMS_OF(avx512bf16)
BURST_CPU_ITEMS_OF(avx512amx)
BURST_CPU_ITEMS_OF(neon)
#undef BURST_CPU_ITEMS_OF

/* ---- forward --------------------------------------------------------------------------------- */

/* Per-thread scratch of one forward item (floats unless noted). */
struct burst_cpu_fwd_scratch {
    float *qt;                        /* [d][BR]  Q^T, pre-scaled */
    float *o;                         /* [BR][d]  unnormalised output */
    float *k, *v;                     /* [BC][d] */
    float *s;                         /* [BC][BR] scores, then probabilities */
    float *m, *l, *alpha, *kbf, *kef; /* [BR] */
    int64_t *kb, *ke;                 /* [BR] */
    uint32_t *qp;                     /* [d/2][BR] bf16 pairs of Q (avx512bf16 only) */
    uint16_t *kh;                     /* [BC][d]   bf16 K tile (avx512bf16 only) */
    uint32_t *vp;                     /* [BC/2][d] bf16 pairs of adjacent V rows (avx512bf16) */
    uint32_t *pp;                     /* [BC/2][BR] bf16 pairs of adjacent P rows (avx512bf16) */
};

static inline size_t burst_cpu_fwd_scratch_floats(int64_t d, int64_t BR)
{
    const int64_t BC = BURST_CPU_FWD_BC_DP; /* the larger of the two */
    /* + 16: the bf16 dot-product kernel reads A rows in groups of 12 (gemm_dp), up to 11 past
     * the last row of P's pairs (pp, the last region), whose values it then does not use */
    return (size_t)(2 * BR * d + 2 * BC * d + BC * BR + 5 * BR + 4 * BR + d * BR / 2 + BC * d / 2 +
                    BC * d / 2 + BC * BR / 2 + 16);
}

static inline struct burst_cpu_fwd_scratch burst_cpu_fwd_layout(void *scratch, int64_t d,
                                                                int64_t BR)
{
    const int64_t BC = BURST_CPU_FWD_BC_DP; /* room for either K tile */
    struct burst_cpu_fwd_scratch s;
    float *p = scratch;
    s.qt = p, p += BR * d;
    s.o = p, p += BR * d;
    s.k = p, p += BC * d;
    s.v = p, p += BC * d;
    s.s = p, p += BC * BR;
    s.m = p, p += BR;
    s.l = p, p += BR;
    s.alpha = p, p += BR;
    s.kbf = p, p += BR;
    s.kef = p, p += BR;
    s.kb = (int64_t *)(void *)p; /* offset is a multiple of 8 floats: aligned */
    s.ke = s.kb + BR;
    s.qp = (uint32_t *)(void *)(s.ke + BR);
    s.kh = (uint16_t *)(void *)(s.qp + d / 2 * BR);
    s.vp = (uint32_t *)(void *)(s.kh + BC * d);
    s.pp = s.vp + BC / 2 * d;
    return s;
}

/* ---- backward -------------------------------------------------------------------------------- */

/* Per-thread scratch of one backward item (floats unless noted). */
struct burst_cpu_bwd_scratch {
    float *qt, *dot;               /* [d][BR]  Q^T pre-scaled, dO^T */
    float *qn, *don;               /* [BR][d]  Q, dO */
    float *k, *v;                  /* [BC][d] */
    float *s, *ds;                 /* [BC][BR] scores -> P; dP -> dS */
    float *lse2, *dlt, *kbf, *kef; /* [BR] */
    int64_t *kb, *ke;              /* [BR] */
    uint32_t *qp, *dop;            /* [d/2][BR] bf16 pairs of Q, dO (avx512bf16 only) */
    uint16_t *kh, *vh;             /* [BC][d]   bf16 K, V tiles (avx512bf16 only) */
    /* avx512bf16 only, bf16 pairs (uint32) of values adjacent along the reduction: */
    uint32_t *qv, *dov; /* [BR/2][d]  of adjacent Q rows, dO rows */
    uint32_t *kv;       /* [BC/2][d]  of adjacent K rows */
    uint16_t *ph, *dsh; /* [BC][BR]   P and dS rounded (pairs along a row) */
    uint32_t *dsp;      /* [BC/2][BR] of adjacent dS rows */
};

static inline size_t burst_cpu_bwd_scratch_floats(int64_t d, int64_t BR)
{
    const int64_t BC = BURST_CPU_BWD_BC;
    return (size_t)(4 * BR * d + 2 * BC * d + 2 * BC * BR + 4 * BR + 4 * BR + d * BR + BC * d +
                    BR * d + BC * d / 2 + 3 * BC * BR / 2);
}

static inline struct burst_cpu_bwd_scratch burst_cpu_bwd_layout(void *scratch, int64_t d,
                                                                int64_t BR)
{
    const int64_t BC = BURST_CPU_BWD_BC;
    struct burst_cpu_bwd_scratch s;
    float *p = scratch;
    s.qt = p, p += BR * d;
    s.dot = p, p += BR * d;
    s.qn = p, p += BR * d;
    s.don = p, p += BR * d;
    s.k = p, p += BC * d;
    s.v = p, p += BC * d;
    s.s = p, p += BC * BR;
    s.ds = p, p += BC * BR;
    s.lse2 = p, p += BR;
    s.dlt = p, p += BR;
    s.kbf = p, p += BR;
    s.kef = p, p += BR;
    s.kb = (int64_t *)(void *)p; /* offset is a multiple of 8 floats: aligned */
    s.ke = s.kb + BR;
    s.qp = (uint32_t *)(void *)(s.ke + BR);
    s.dop = s.qp + d / 2 * BR;
    s.kh = (uint16_t *)(void *)(s.dop + d / 2 * BR);
    s.vh = s.kh + BC * d;
    s.qv = (uint32_t *)(void *)(s.vh + BC * d);
    s.dov = s.qv + BR / 2 * d;
    s.kv = s.dov + BR / 2 * d;
    s.ph = (uint16_t *)(void *)(s.kv + BC / 2 * d);
    s.dsh = s.ph + BC * BR;
    s.dsp = (uint32_t *)(void *)(s.dsh + BC * BR);
    return s;
}

/* ---- decode ---------------------------------------------------------------------------------- */

/* Keys per decode tile (a multiple of BURST_CPU_MR and of 16). */
#define BURST_CPU_DECODE_BT 96

struct burst_cpu_decode_job {
    const struct burst_decode_args *a;
    int64_t t, hq, d, group, rows; /* rows: t * group, the query rows of one kv head */
    int64_t kend;                  /* keys past it are seen by no query: min(nkeys, tail + t) */
    int64_t kpi, chunks;           /* keys per item, items per kv head */
    size_t esz;
    float *part; /* [hkv][chunks][rows][d + 2]: o (unnormalised), m, l */
};

/* Per-thread scratch of one decode item (floats unless noted); Rp: rows rounded up to 16. */
struct burst_cpu_decode_scratch {
    int64_t *kb, *ke;                 /* [Rp] allowed keys of each row */
    float *qt;                        /* [d][Rp] Q^T, pre-scaled */
    float *o;                         /* [Rp][d] unnormalised output */
    float *k, *v;                     /* [BT][d] */
    float *s;                         /* [BT][Rp] (+ MR) scores, then probabilities */
    float *m, *l, *alpha, *kbf, *kef; /* [Rp] */
    float *tmp;                       /* [d] */
};

static inline int64_t burst_cpu_decode_rp(int64_t rows)
{
    return (rows + 15) / 16 * 16;
}

static inline size_t burst_cpu_decode_scratch_floats(int64_t d, int64_t rows)
{
    const int64_t Rp = burst_cpu_decode_rp(rows);
    return (size_t)(4 * Rp + 2 * Rp * d + 2 * BURST_CPU_DECODE_BT * d + BURST_CPU_DECODE_BT * Rp +
                    BURST_CPU_MR + 5 * Rp + d);
}

static inline struct burst_cpu_decode_scratch burst_cpu_decode_layout(void *scratch, int64_t d,
                                                                      int64_t rows)
{
    const int64_t Rp = burst_cpu_decode_rp(rows);
    struct burst_cpu_decode_scratch s;
    s.kb = scratch;
    s.ke = s.kb + Rp;
    float *p = (float *)(void *)(s.ke + Rp);
    s.qt = p, p += Rp * d;
    s.o = p, p += Rp * d;
    s.k = p, p += BURST_CPU_DECODE_BT * d;
    s.v = p, p += BURST_CPU_DECODE_BT * d;
    s.s = p, p += BURST_CPU_DECODE_BT * Rp + BURST_CPU_MR;
    s.m = p, p += Rp;
    s.l = p, p += Rp;
    s.alpha = p, p += Rp;
    s.kbf = p, p += Rp;
    s.kef = p, p += Rp;
    s.tmp = p;
    return s;
}

#endif /* BURST_CPU_ITEMS_H */
