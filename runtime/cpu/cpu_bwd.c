/*
 * runtime/cpu/cpu_bwd.c - the backward step and D = rowsum(dO * O) of the cpu backend.
 *
 * Schedules (see cpu_bwd_kern.h; all three give bitwise identical results):
 *   - enough (batch, kv head) groups for the pool: one item per group computes dQ, dK, dV in
 *     a single pass (5 products per pair, the minimum);
 *   - otherwise two passes with finer items: (batch, kv head, K tile) for dK/dV and
 *     (batch, q head, Q tile) for dQ, which recompute scores and dP (7 products per pair).
 * Items write disjoint outputs, so no float atomics and no dependence on the thread count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_internal.h"
#include "cpu_items.h"
#include "error.h"

/* The backward work items of each variant built here (NULL: not built for this target). */
struct burst_cpu_bwd_items {
    burst_cpu_task_fn group, kv, q;
};
#define BURST_CPU_BWD_ITEMS(v)                                                                     \
    {                                                                                              \
        burst_cpu_bwd_group_##v, burst_cpu_bwd_kv_##v, burst_cpu_bwd_q_##v                         \
    }
static const struct burst_cpu_bwd_items burst_cpu_bwd_items[BURST_CPU_ISA_COUNT] = {
    [BURST_CPU_ISA_BASE] = BURST_CPU_BWD_ITEMS(base),
#if BURST_CPU_HAVE_X86_VARIANTS
    [BURST_CPU_ISA_AVX2] = BURST_CPU_BWD_ITEMS(avx2),
    [BURST_CPU_ISA_AVX512] = BURST_CPU_BWD_ITEMS(avx512),
    [BURST_CPU_ISA_AVX512BF16] = BURST_CPU_BWD_ITEMS(avx512bf16),
#endif
#if BURST_CPU_HAVE_AMX_VARIANT
    [BURST_CPU_ISA_AVX512AMX] = BURST_CPU_BWD_ITEMS(avx512amx),
#endif
#if BURST_CPU_HAVE_NEON_VARIANT
    [BURST_CPU_ISA_NEON] = BURST_CPU_BWD_ITEMS(neon),
#endif
};

burst_status_t burst_cpu_bwd_step(void *be, const struct burst_bwd_args *args)
{
    struct burst_cpu_backend *cpu = be;
    if (!args)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu bwd_step: args is NULL");
    struct burst_cpu_bwd_job job;
    burst_step_dims_of(args->q, args->k, &job.dim); /* checked by the engine (step_check.h) */
    if (!args->dq && !args->dk && !args->dv)
        return BURST_OK;
    if (job.dim.nq == 0 || job.dim.nk == 0)
        return BURST_OK;
    if (!args->lse || !args->delta)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu bwd_step: lse or delta is NULL");
    job.a = args;
    job.br = BURST_CPU_BWD_BR(job.dim.d);
    job.nqt = (job.dim.nq + job.br - 1) / job.br;
    job.nkt = (job.dim.nk + BURST_CPU_BWD_BC - 1) / BURST_CPU_BWD_BC;
    size_t bytes = sizeof(float) * burst_cpu_bwd_scratch_floats(job.dim.d, job.br);

    const struct burst_cpu_bwd_items *it =
        &burst_cpu_bwd_items[burst_cpu_call_isa(cpu->isa, job.dim.d)];
    burst_cpu_task_fn group = it->group, kv = it->kv, q = it->q;
    int64_t groups = job.dim.batch * job.dim.hkv;
    int64_t nt = burst_cpu_pool_size(cpu->pool);
    /* one pass when the groups keep every thread busy: a whole multiple of the threads, or
     * enough of them that the last round matters little */
    if (groups % nt == 0 || groups >= 4 * nt)
        return burst_cpu_pool_run(cpu->pool, groups, bytes, group, &job);
    burst_status_t st = BURST_OK;
    if (args->dk || args->dv) {
        st = burst_cpu_pool_run(cpu->pool, groups * job.nkt, bytes, kv, &job);
        if (st != BURST_OK)
            return st;
    }
    if (args->dq)
        st = burst_cpu_pool_run(cpu->pool, job.dim.batch * job.dim.hq * job.nqt, bytes, q, &job);
    return st;
}

/* ---- D = rowsum(dO * O) -------------------------------------------------------------------- */

struct burst_cpu_delta_job {
    const struct burst_tensor *dout, *o;
    float *delta;
    int64_t rows_per_item;
};

static double burst_cpu_dot_row(const void *x, burst_dtype_t xt, const void *y, burst_dtype_t yt,
                                int64_t d)
{
    double acc = 0.0;
    for (int64_t c = 0; c < d; c++) {
        float a = xt == BURST_DTYPE_FP32   ? ((const float *)x)[c]
                  : xt == BURST_DTYPE_FP16 ? burst_cpu_f16_to_f32(((const uint16_t *)x)[c])
                                           : burst_cpu_bf16_to_f32(((const uint16_t *)x)[c]);
        float b = yt == BURST_DTYPE_FP32   ? ((const float *)y)[c]
                  : yt == BURST_DTYPE_FP16 ? burst_cpu_f16_to_f32(((const uint16_t *)y)[c])
                                           : burst_cpu_bf16_to_f32(((const uint16_t *)y)[c]);
        acc += (double)a * (double)b;
    }
    return acc;
}

static void burst_cpu_delta_item(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_delta_job *job = ctx;
    const struct burst_tensor *dout = job->dout, *o = job->o;
    int64_t n = dout->shape[1], h = dout->shape[2], d = dout->shape[3];
    int64_t rows = dout->shape[0] * n;
    int64_t r0 = item * job->rows_per_item, r1 = burst_cpu_min64(r0 + job->rows_per_item, rows);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b = r / n, i = r % n;
        for (int64_t hh = 0; hh < h; hh++)
            job->delta[(b * h + hh) * n + i] =
                (float)burst_cpu_dot_row(burst_cpu_row(dout, b, i, hh), dout->dtype,
                                         burst_cpu_row(o, b, i, hh), o->dtype, d);
    }
}

burst_status_t burst_cpu_bwd_delta(void *be, const struct burst_tensor *dout,
                                   const struct burst_tensor *o, float *delta)
{
    struct burst_cpu_backend *cpu = be;
    if (!dout || !o || !delta || !dout->data || !o->data)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu bwd_delta: dout, o or delta is NULL");
    for (int k = 0; k < BURST_TENSOR_DIMS; k++)
        if (dout->shape[k] != o->shape[k] || o->shape[k] < 0)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "cpu bwd_delta: dout->shape[%d] = %lld "
                               "differs from o->shape[%d] = %lld",
                               k, (long long)dout->shape[k], k, (long long)o->shape[k]);
    for (int k = 0; k < 2; k++) {
        const struct burst_tensor *t = k ? o : dout;
        if (t->dtype != BURST_DTYPE_FP32 && t->dtype != BURST_DTYPE_FP16 &&
            t->dtype != BURST_DTYPE_BF16)
            return burst_error(BURST_ERR_INVALID_ARG, "cpu bwd_delta: %s->dtype = %d is unknown",
                               k ? "o" : "dout", (int)t->dtype);
        if (t->shape[3] > 1 && t->stride[3] != 1)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "cpu bwd_delta: %s->stride[3] = %lld is "
                               "not 1",
                               k ? "o" : "dout", (long long)t->stride[3]);
    }
    int64_t rows = dout->shape[0] * dout->shape[1];
    if (rows == 0 || dout->shape[2] == 0)
        return BURST_OK;
    struct burst_cpu_delta_job job = {dout, o, delta, 1};
    job.rows_per_item =
        burst_cpu_max64(1, 16384 / burst_cpu_max64(1, dout->shape[2] * dout->shape[3]));
    int64_t items = (rows + job.rows_per_item - 1) / job.rows_per_item;
    return burst_cpu_pool_run(cpu->pool, items, 0, burst_cpu_delta_item, &job);
}
