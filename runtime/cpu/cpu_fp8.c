/*
 * runtime/cpu/cpu_fp8.c - the fp8 forward step of the cpu backend (runtime/fp8.h).
 *
 * The cpu has no e4m3 arithmetic: this step computes what the e4m3 tensor-core kernels compute,
 * on the same quantized operands, in fp32: S = (Q8 . K8) sq sk in fp32 sums, the softmax in
 * fp32 with P = exp2(s - m + 8) rounded to e4m3 for P V and unrounded in the denominator, and
 * O scaled by V's scale. It is the reference of the fp8 path where no such kernel runs, and what
 * a cpu rank of a mixed ring computes. Scalar: one work item per (batch, query head, 64 rows).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_internal.h"
#include "error.h"
#include "fp8.h"

struct fp8_job {
    const struct burst_fwd_args *a;
    const struct burst_tensor *o; /* fwd_final: the output (NULL: merge into the accumulators) */
    float *lse;
    int64_t B, nq, nk, hq, hkv, d;
};

/* One row's result: O (d, unnormalised) with l and m in log2 units (m carries the 8). */
struct fp8_row {
    float m, l;
};

/* Scores of row i against keys [kb, ke) (log2 units, into s[j - kb]), the softmax and P V into
 * o; returns m and l (l = 0: no key). */
static struct fp8_row fp8_row(const struct fp8_job *job, const float *tab, int64_t b, int64_t h,
                              int64_t i, int64_t kb, int64_t ke, float *s, float *o)
{
    const struct burst_fwd_args *a = job->a;
    const int64_t d = job->d, dp = burst_fp8_dp(d), g = h / (job->hq / job->hkv);
    struct burst_fp8_kv_layout l;
    burst_fp8_kv_layout(job->B, job->nk, job->hkv, d, &l);
    const uint8_t *q8 = a->fp8->q + ((b * job->nq + i) * job->hq + h) * dp;
    const float *qs = (const float *)(const void *)(a->fp8->q + burst_fp8_q_scales_at(
                                                                    job->B, job->nq, job->hq, d));
    const int64_t qblocks = (job->nq + BURST_FP8_QROWS - 1) / BURST_FP8_QROWS;
    const float sq = qs[(b * job->hq + h) * qblocks + i / BURST_FP8_QROWS];
    const uint8_t *k8 = a->fp8->kv + l.k, *vt = a->fp8->kv + l.vt + (b * job->hkv + g) * d * l.np;
    const float *ks =
        (const float *)(const void *)(a->fp8->kv + l.kscale) + (b * job->hkv + g) * l.kblocks;
    const float sv = ((const float *)(const void *)(a->fp8->kv + l.vscale))[b * job->hkv + g];
    const float log2e = 1.4426950408889634f;
    float m = -INFINITY;
    for (int64_t j = kb; j < ke; j++) {
        const uint8_t *kr = k8 + ((b * job->nk + j) * job->hkv + g) * dp;
        float dot = 0.0f;
        for (int64_t c = 0; c < d; c++)
            dot += tab[q8[c]] * tab[kr[c]];
        float x = dot * (sq * ks[j / BURST_FP8_KEYS]) * a->scale;
        if (a->softcap > 0.0f)
            x = a->softcap * tanhf(x / a->softcap);
        s[j - kb] = x * log2e;
        m = fmaxf(m, s[j - kb]);
    }
    struct fp8_row r = {m - BURST_FP8_P_SHIFT, 0.0f};
    memset(o, 0, sizeof(float) * (size_t)d);
    for (int64_t j = kb; j < ke; j++) {
        const float p = exp2f(s[j - kb] - r.m);
        r.l += p;
        const float pr = tab[burst_fp32_to_e4m3(p)];
        const int64_t col = j / 32 * 32 + burst_fp8_vt_col((int)(j % 32));
        for (int64_t c = 0; c < d; c++)
            o[c] += pr * tab[vt[c * l.np + col]];
    }
    for (int64_t c = 0; c < d; c++)
        o[c] *= sv;
    return r;
}

/* The row's (O / l, lse) written to the output (fwd_final) or merged into the accumulators. */
static void fp8_store(const struct fp8_job *job, int64_t b, int64_t h, int64_t i, struct fp8_row r,
                      const float *o)
{
    const struct burst_fwd_args *a = job->a;
    const int64_t d = job->d, li = (b * job->hq + h) * job->nq + i;
    const double lr = r.l > 0.0f ? ((double)r.m + log2((double)r.l)) * 0.69314718055994530942 : 0;
    if (job->o) {
        uint16_t *orow = (uint16_t *)job->o->data + b * job->o->stride[0] + i * job->o->stride[1] +
                         h * job->o->stride[2];
        for (int64_t c = 0; c < d; c++) {
            const float x = r.l > 0.0f ? o[c] * (float)(1.0 / (double)r.l) : 0.0f;
            orow[c] = job->o->dtype == BURST_DTYPE_FP16 ? burst_cpu_f32_to_f16(x)
                                                        : burst_cpu_f32_to_bf16(x);
        }
        job->lse[li] = r.l > 0.0f ? (float)lr : -INFINITY;
        return;
    }
    if (r.l == 0.0f) /* no allowed key in this block: the row stays as it is */
        return;
    float *orow = a->o_acc + ((b * job->nq + i) * job->hq + h) * d;
    const double lo = (double)a->lse_acc[li];
    if (lo == -INFINITY) {
        for (int64_t c = 0; c < d; c++)
            orow[c] = o[c] * (float)(1.0 / (double)r.l);
        a->lse_acc[li] = (float)lr;
        return;
    }
    const double ln = (lo > lr ? lo : lr) + log1p(exp(-fabs(lo - lr)));
    const float co = (float)exp(lo - ln), cn = (float)(exp(lr - ln) / (double)r.l);
    for (int64_t c = 0; c < d; c++)
        orow[c] = co * orow[c] + cn * o[c];
    a->lse_acc[li] = (float)ln;
}

static void fp8_item(void *ctx, int64_t item, void *scratch)
{
    const struct fp8_job *job = ctx;
    const int64_t tiles = (job->nq + BURST_FP8_QROWS - 1) / BURST_FP8_QROWS;
    const int64_t t = item % tiles, h = item / tiles % job->hq, b = item / tiles / job->hq;
    float tab[256];
    for (int x = 0; x < 256; x++)
        tab[x] = burst_e4m3_to_fp32((uint8_t)x);
    float *o = scratch, *s = o + job->d;
    const int64_t i1 = (t + 1) * BURST_FP8_QROWS < job->nq ? (t + 1) * BURST_FP8_QROWS : job->nq;
    for (int64_t i = t * BURST_FP8_QROWS; i < i1; i++) {
        int64_t kb, ke;
        burst_mask_keys(&job->a->kpos, job->a->mask, burst_posmap_pos(&job->a->qpos, i), &kb, &ke);
        kb = kb > 0 ? kb : 0;
        ke = ke < job->nk ? ke : job->nk;
        struct fp8_row r = {-INFINITY, 0.0f};
        if (kb < ke)
            r = fp8_row(job, tab, b, h, i, kb, ke, s, o);
        fp8_store(job, b, h, i, r, o);
    }
}

burst_status_t burst_cpu_fp8_step(struct burst_cpu_backend *cpu, const struct burst_fwd_args *a,
                                  const struct burst_tensor *o, float *lse)
{
    struct fp8_job job = {a,
                          o,
                          lse,
                          a->q->shape[0],
                          a->q->shape[1],
                          a->k->shape[1],
                          a->q->shape[2],
                          a->k->shape[2],
                          a->q->shape[3]};
    if (job.nq == 0)
        return BURST_OK;
    const int64_t items = job.B * job.hq * ((job.nq + BURST_FP8_QROWS - 1) / BURST_FP8_QROWS);
    const size_t bytes = sizeof(float) * (size_t)(job.d + job.nk + 1);
    return burst_cpu_pool_run(cpu->pool, items, bytes, fp8_item, &job);
}

burst_status_t burst_cpu_fp8_quant_q(void *be, const struct burst_tensor *q, void *dst)
{
    (void)be;
    burst_fp8_quant_q_host(q, dst);
    return BURST_OK;
}

burst_status_t burst_cpu_fp8_quant_kv(void *be, const struct burst_tensor *k,
                                      const struct burst_tensor *v, void *dst)
{
    (void)be;
    burst_fp8_quant_kv_host(k, v, dst);
    return BURST_OK;
}
