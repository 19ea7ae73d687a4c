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
    float *tmp;                       /* [d] */
    int64_t *kb, *ke;                 /* [BR] */
};

static size_t burst_cpu_fwd_scratch_floats(int64_t d, int64_t BR)
{
    const int64_t BC = BURST_CPU_FWD_BC;
    return (size_t)(2 * BR * d + 2 * BC * d + BC * BR + 5 * BR + d + 4 * BR);
}

static struct burst_cpu_fwd_scratch burst_cpu_fwd_layout(void *scratch, int64_t d, int64_t BR)
{
    const int64_t BC = BURST_CPU_FWD_BC;
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
    s.tmp = p, p += d;
    s.kb = (int64_t *)(void *)p; /* offset is a multiple of 8 floats: aligned */
    s.ke = s.kb + BR;
    return s;
}

#if BURST_CPU_HAVE_AVX2_VARIANT
#define BURST_CPU_AVX2 1
#include "cpu_fwd_kern.h"
#undef BURST_CPU_AVX2
#endif
#define BURST_CPU_AVX2 0
#include "cpu_fwd_kern.h"
#undef BURST_CPU_AVX2

burst_status_t burst_cpu_fwd_step(void *be, const struct burst_fwd_args *args)
{
    struct burst_cpu_backend *cpu = be;
    if (!args || !args->o_acc || !args->lse_acc)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu fwd_step: args, o_acc or lse_acc is NULL");
    struct burst_cpu_fwd_job job;
    burst_status_t st =
        burst_cpu_check_qkv("cpu fwd_step", args->q, args->k, args->v, NULL, &job.dim);
    if (st != BURST_OK)
        return st;
    if (job.dim.nq == 0 || job.dim.nk == 0)
        return BURST_OK;
    job.a = args;
    job.br = BURST_CPU_FWD_BR(job.dim.d);
    job.nqt = (job.dim.nq + job.br - 1) / job.br;
    int64_t items = job.dim.batch * job.dim.hq * job.nqt;
    size_t bytes = sizeof(float) * burst_cpu_fwd_scratch_floats(job.dim.d, job.br);
    burst_cpu_task_fn fn = fwd_item_base;
#if BURST_CPU_HAVE_AVX2_VARIANT
    if (cpu->isa == BURST_CPU_ISA_AVX2)
        fn = fwd_item_avx2;
#endif
    return burst_cpu_pool_run(cpu->pool, items, bytes, fn, &job);
}
