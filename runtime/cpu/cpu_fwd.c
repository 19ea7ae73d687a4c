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
#include "cpu_items.h"
#include "error.h"

/* The forward work item of each variant built here (NULL: not built for this target). */
static const burst_cpu_task_fn burst_cpu_fwd_items[BURST_CPU_ISA_COUNT] = {
    [BURST_CPU_ISA_BASE] = burst_cpu_fwd_item_base,
#if BURST_CPU_HAVE_X86_VARIANTS
    [BURST_CPU_ISA_AVX2] = burst_cpu_fwd_item_avx2,
    [BURST_CPU_ISA_AVX512] = burst_cpu_fwd_item_avx512,
    [BURST_CPU_ISA_AVX512BF16] = burst_cpu_fwd_item_avx512bf16,
#endif
#if BURST_CPU_HAVE_AMX_VARIANT
    [BURST_CPU_ISA_AVX512AMX] = burst_cpu_fwd_item_avx512amx,
#endif
#if BURST_CPU_HAVE_NEON_VARIANT
    [BURST_CPU_ISA_NEON] = burst_cpu_fwd_item_neon,
#endif
};

int burst_cpu_isa_lanes(enum burst_cpu_isa isa)
{
    switch (isa) {
    case BURST_CPU_ISA_BASE: return burst_cpu_fwd_lanes_base;
#if BURST_CPU_HAVE_X86_VARIANTS
    case BURST_CPU_ISA_AVX2: return burst_cpu_fwd_lanes_avx2;
    case BURST_CPU_ISA_AVX512: return burst_cpu_fwd_lanes_avx512;
    case BURST_CPU_ISA_AVX512BF16: return burst_cpu_fwd_lanes_avx512bf16;
#endif
#if BURST_CPU_HAVE_AMX_VARIANT
    case BURST_CPU_ISA_AVX512AMX: return burst_cpu_fwd_lanes_avx512amx;
#endif
#if BURST_CPU_HAVE_NEON_VARIANT
    case BURST_CPU_ISA_NEON: return burst_cpu_fwd_lanes_neon;
#endif
    default: return 0;
    }
}

/* fwd_step (o NULL: merged into args->o_acc, lse_acc) and fwd_final (written to o and lse). */
static burst_status_t fwd_run(struct burst_cpu_backend *cpu, const struct burst_fwd_args *args,
                              const struct burst_tensor *o, float *lse)
{
    if (args->fp8)
        return burst_cpu_fp8_step(cpu, args, o, lse);
    struct burst_cpu_fwd_job job;
    burst_step_dims_of(args->q, args->k, &job.dim); /* checked by the engine (step_check.h) */
    job.a = args;
    job.o = o;
    job.lse = lse;
    job.br = BURST_CPU_FWD_BR(job.dim.d);
    job.nqt = (job.dim.nq + job.br - 1) / job.br;
    if (job.dim.nq == 0 || (job.dim.nk == 0 && !o))
        return BURST_OK;
    int64_t items = job.dim.batch * job.dim.hq * job.nqt;
    size_t bytes = sizeof(float) * burst_cpu_fwd_scratch_floats(job.dim.d, job.br);
    burst_cpu_task_fn fn = burst_cpu_fwd_items[burst_cpu_call_isa(cpu->isa, job.dim.d)];
    return burst_cpu_pool_run(cpu->pool, items, bytes, fn, &job);
}

burst_status_t burst_cpu_fwd_step(void *be, const struct burst_fwd_args *args)
{
    if (!args || !args->o_acc || !args->lse_acc)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu fwd_step: args, o_acc or lse_acc is NULL");
    return fwd_run(be, args, NULL, NULL);
}

burst_status_t burst_cpu_fwd_final(void *be, const struct burst_fwd_args *args,
                                   const struct burst_tensor *o, float *lse)
{
    if (!args || !o || !o->data || !lse)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu fwd_final: args, o or lse is NULL");
    return fwd_run(be, args, o, lse);
}
