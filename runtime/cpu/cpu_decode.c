/*
 * runtime/cpu/cpu_decode.c - the cpu backend's decode_step (backend.h, burst_decode_args): the
 * few new queries of one sequence against its keys in a paged cache.
 *
 * A decode step has t x Hq query rows (a handful) and many keys, so the work is split over
 * (kv head, run of keys): each work item takes the t x group query rows of one kv head and a
 * run of DECODE_KPI or more keys (a number that depends on the key count only, never on the
 * thread count), and computes their partial (m, l, o) (running maximum, sum of exp,
 * unnormalised output) in fp32 with the tiled kernel of cpu_decode_kern.h, compiled once per
 * instruction-set variant. A second pass folds, per query row, the items' partials in key order
 * (deterministic whatever thread ran which item) into the running (o_acc, lse_acc) as fwd_step
 * does. Scores are tau q.k in fp32, soft-capped where softcap > 0. Query i sees key j iff
 * j < tail or j - tail <= i.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_internal.h"
#include "cpu_items.h"
#include "error.h"

/* Keys per work item at least (whole tiles), and at most this many items per kv head (longer
 * runs for longer contexts, which bounds the partials' memory). */
#define DECODE_KPI (4 * BURST_CPU_DECODE_BT)
#define DECODE_MAX_CHUNKS 256
/* Most new queries per sequence a call takes here (more: BURST_ERR_UNSUPPORTED, the engine
 * then runs the tiled fwd_step per block, as for a prefill chunk against the cache). */
#define DECODE_MAX_ROWS 16

/* The decode work item of each variant built here. */
static const burst_cpu_task_fn decode_items[BURST_CPU_ISA_COUNT] = {
    [BURST_CPU_ISA_BASE] = burst_cpu_decode_item_base,
#if BURST_CPU_HAVE_X86_VARIANTS
    [BURST_CPU_ISA_AVX2] = burst_cpu_decode_item_avx2,
    [BURST_CPU_ISA_AVX512] = burst_cpu_decode_item_avx512,
    [BURST_CPU_ISA_AVX512BF16] = burst_cpu_decode_item_avx512bf16,
#endif
#if BURST_CPU_HAVE_AMX_VARIANT
    [BURST_CPU_ISA_AVX512AMX] = burst_cpu_decode_item_avx512amx,
#endif
#if BURST_CPU_HAVE_NEON_VARIANT
    [BURST_CPU_ISA_NEON] = burst_cpu_decode_item_neon,
#endif
};

/* Fold query row `row` (i * hq + h) of every item of its kv head, in key order, into the
 * running (o_acc, lse_acc). */
static void decode_fold(void *ctx, int64_t row, void *scratch)
{
    (void)scratch;
    const struct burst_cpu_decode_job *j = ctx;
    const struct burst_decode_args *a = j->a;
    const int64_t d = j->d, i = row / j->hq, h = row % j->hq, g = h / j->group;
    const int64_t r = i * j->group + h % j->group;
    float *o = a->o_acc + (size_t)(row * d);
    float *lse = a->lse_acc + (size_t)(h * j->t + i);
    for (int64_t c = 0; c < j->chunks; c++) {
        const float *p = j->part + (size_t)(((g * j->chunks + c) * j->rows + r) * (d + 2));
        if (p[d + 1] == 0.0f)
            continue; /* no allowed key in this item */
        const float lr = p[d] + logf(p[d + 1]);
        const float L = *lse, mx = L > lr ? L : lr;
        const float nl = mx + log1pf(expf(-fabsf(L - lr)));
        const float wo = L == -INFINITY ? 0.0f : expf(L - nl), wr = expf(lr - nl) / p[d + 1];
        for (int64_t x = 0; x < d; x++)
            o[x] = wo * o[x] + wr * p[x];
        *lse = nl;
    }
}

burst_status_t burst_cpu_decode_step(void *be, const struct burst_decode_args *args)
{
    struct burst_cpu_backend *cpu = be;
    if (args && args->o_out)
        return BURST_ERR_UNSUPPORTED; /* results through the running (o_acc, lse_acc) only */
    if (!args || !args->q || !args->o_acc || !args->lse_acc || !args->blocks_host)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu decode_step: an argument is NULL");
    struct burst_cpu_decode_job j = {
        .a = args, .t = args->q->shape[1], .hq = args->q->shape[2], .d = args->q->shape[3]};
    if (j.t > DECODE_MAX_ROWS)
        return BURST_ERR_UNSUPPORTED; /* many queries: the tiled fwd_step kernels do better */
    if (args->nkeys == 0 || j.t == 0)
        return BURST_OK;
    j.group = j.hq / args->hkv;
    j.rows = j.t * j.group;
    j.esz = args->q->dtype == BURST_DTYPE_FP32 ? 4 : 2;
    j.kend = burst_cpu_min64(args->nkeys, args->tail + j.t);
    j.kpi = DECODE_KPI;
    if ((j.kend + j.kpi - 1) / j.kpi > DECODE_MAX_CHUNKS) {
        const int64_t per = (j.kend + DECODE_MAX_CHUNKS - 1) / DECODE_MAX_CHUNKS;
        j.kpi = (per + BURST_CPU_DECODE_BT - 1) / BURST_CPU_DECODE_BT * BURST_CPU_DECODE_BT;
    }
    j.chunks = (j.kend + j.kpi - 1) / j.kpi;
    const int64_t items = args->hkv * j.chunks;
    const size_t floats = (size_t)(items * j.rows * (j.d + 2));
    j.part = malloc(floats * sizeof(float));
    if (!j.part)
        return burst_error(BURST_ERR_NO_MEMORY, "cpu decode_step: out of memory (%zu bytes)",
                           floats * sizeof(float));
    const size_t scratch = sizeof(float) * burst_cpu_decode_scratch_floats(j.d, j.rows);
    burst_cpu_task_fn fn = decode_items[burst_cpu_call_isa(cpu->isa, j.d)];
    burst_status_t st = burst_cpu_pool_run(cpu->pool, items, scratch, fn, &j);
    if (st == BURST_OK)
        st = burst_cpu_pool_run(cpu->pool, j.t * j.hq, 0, decode_fold, &j);
    free(j.part);
    return st;
}
