/*
 * runtime/cpu/cpu_fwd.c - the forward step of the cpu backend.
 *
 * Work items: one per (batch, query head, Q tile); items write disjoint rows of o_acc and
 * lse_acc, so results do not depend on the thread count or the order items run in.
 * The item itself is in cpu_fwd_kern.h, compiled once per instruction-set variant.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_internal.h"
#include "error.h"

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

static size_t burst_cpu_fwd_scratch_floats(int64_t d, int64_t BR)
{
    const int64_t BC = BURST_CPU_FWD_BC_DP; /* the larger of the two */
    return (size_t)(2 * BR * d + 2 * BC * d + BC * BR + 5 * BR + 4 * BR + d * BR / 2 + BC * d / 2 +
                    BC * d / 2 + BC * BR / 2);
}

static struct burst_cpu_fwd_scratch burst_cpu_fwd_layout(void *scratch, int64_t d, int64_t BR)
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

#define BURST_CPU_KERN "cpu_fwd_kern.h"
#include "cpu_variants.h"

/* The vector width and forward work item of each variant built here (NULL: not built for this target). */
static const burst_cpu_task_fn burst_cpu_fwd_items[BURST_CPU_ISA_COUNT] = {
    [BURST_CPU_ISA_BASE] = fwd_item_base,
#if BURST_CPU_HAVE_X86_VARIANTS
    [BURST_CPU_ISA_AVX2] = fwd_item_avx2,
    [BURST_CPU_ISA_AVX512] = fwd_item_avx512,
    [BURST_CPU_ISA_AVX512BF16] = fwd_item_avx512bf16,
#endif
#if BURST_CPU_HAVE_AMX_VARIANT
    [BURST_CPU_ISA_AVX512AMX] = fwd_item_avx512amx,
#endif
#if BURST_CPU_HAVE_NEON_VARIANT
    [BURST_CPU_ISA_NEON] = fwd_item_neon,
#endif
};
static const int burst_cpu_lanes[BURST_CPU_ISA_COUNT] = {
    [BURST_CPU_ISA_BASE] = fwd_lanes_base,
#if BURST_CPU_HAVE_X86_VARIANTS
    [BURST_CPU_ISA_AVX2] = fwd_lanes_avx2,
    [BURST_CPU_ISA_AVX512] = fwd_lanes_avx512,
    [BURST_CPU_ISA_AVX512BF16] = fwd_lanes_avx512bf16,
#endif
#if BURST_CPU_HAVE_AMX_VARIANT
    [BURST_CPU_ISA_AVX512AMX] = fwd_lanes_avx512amx,
#endif
#if BURST_CPU_HAVE_NEON_VARIANT
    [BURST_CPU_ISA_NEON] = fwd_lanes_neon,
#endif
};

int burst_cpu_isa_lanes(enum burst_cpu_isa isa)
{
    return isa >= 0 && isa < BURST_CPU_ISA_COUNT ? burst_cpu_lanes[isa] : 0;
}

burst_status_t burst_cpu_fwd_step(void *be, const struct burst_fwd_args *args)
{
    struct burst_cpu_backend *cpu = be;
    if (!args || !args->o_acc || !args->lse_acc)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu fwd_step: args, o_acc or lse_acc is NULL");
    struct burst_cpu_fwd_job job;
    burst_step_dims_of(args->q, args->k, &job.dim); /* checked by the engine (step_check.h) */
    if (job.dim.nq == 0 || job.dim.nk == 0)
        return BURST_OK;
    job.a = args;
    job.br = BURST_CPU_FWD_BR(job.dim.d);
    job.nqt = (job.dim.nq + job.br - 1) / job.br;
    int64_t items = job.dim.batch * job.dim.hq * job.nqt;
    size_t bytes = sizeof(float) * burst_cpu_fwd_scratch_floats(job.dim.d, job.br);
    burst_cpu_task_fn fn = burst_cpu_fwd_items[burst_cpu_call_isa(cpu->isa, job.dim.d)];
    return burst_cpu_pool_run(cpu->pool, items, bytes, fn, &job);
}
