/*
 * runtime/cpu/cpu_decode.c - the cpu backend's decode_step (backend.h, burst_decode_args): the
 * few new queries of one sequence against its keys in a paged cache.
 *
 * A decode step has t x Hq query rows (a handful) and many keys, so the work is split over the
 * keys: each work item takes a run of whole blocks and computes, for every query row, the
 * partial (m, l, o) of its keys (running maximum, sum of exp, unnormalised output) in fp32; the
 * calling thread then folds the items' partials in item order (deterministic whatever thread ran
 * which item) into the running (o_acc, lse_acc) as fwd_step does. Scores are tau q.k in fp32,
 * soft-capped where softcap > 0. Query i sees key j iff j < tail or j - tail <= i.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_internal.h"
#include "error.h"

/* Blocks per work item: enough keys to outweigh the item's overhead. */
#define DECODE_ITEM_KEYS 512
/* Most new queries per sequence a call takes here (more: BURST_ERR_UNSUPPORTED, the engine
 * then runs the tiled fwd_step per block, as for a prefill chunk against the cache). */
#define DECODE_MAX_ROWS 16

struct decode_job {
    const struct burst_decode_args *a;
    int64_t t, hq, d, group, bpi; /* bpi: blocks per item */
    size_t esz;
    float *part; /* [items][t * hq][d + 2]: o (unnormalised), m, l */
};

static float elem(const void *base, burst_dtype_t dt, size_t i)
{
    if (dt == BURST_DTYPE_FP32)
        return ((const float *)base)[i];
    const uint16_t h = ((const uint16_t *)base)[i];
    return dt == BURST_DTYPE_BF16 ? burst_cpu_bf16_to_f32(h) : burst_cpu_f16_to_f32(h);
}

/* Item `item`'s blocks against every query row. scratch: the query rows and one key's K and V
 * rows (every K/V head) in fp32, each key converted once for all the rows that see it. */
static void decode_item(void *ctx, int64_t item, void *scratch)
{
    const struct decode_job *j = ctx;
    const struct burst_decode_args *a = j->a;
    const struct burst_tensor *q = a->q;
    const int64_t d = j->d, bl = a->block_len, rows = j->t * j->hq, w = a->hkv * d;
    const int64_t k0 = item * j->bpi * bl;
    const int64_t k1 = k0 + j->bpi * bl < a->nkeys ? k0 + j->bpi * bl : a->nkeys;
    float *qf = scratch, *kf = qf + rows * d, *vf = kf + w;
    float *part = j->part + (size_t)(item * rows * (d + 2));
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = r / j->hq, h = r % j->hq;
        const size_t qoff = (size_t)(i * q->stride[1] + h * q->stride[2]);
        for (int64_t c = 0; c < d; c++)
            qf[r * d + c] = elem(q->data, q->dtype, qoff + (size_t)c);
        float *o = part + r * (d + 2);
        memset(o, 0, sizeof(float) * (size_t)d);
        o[d] = -INFINITY; /* m */
        o[d + 1] = 0.0f;  /* l */
    }
    for (int64_t key = k0; key < k1; key++) {
        /* rows i < key - tail do not see a new key (causal among the new tokens) */
        const int64_t i0 = key < a->tail ? 0 : key - a->tail;
        if (i0 >= j->t)
            break;
        const size_t row = ((size_t)a->blocks_host[key / bl] * (size_t)bl + (size_t)(key % bl));
        for (int64_t c = 0; c < w; c++) {
            kf[c] = elem(a->k_pool, q->dtype, row * (size_t)w + (size_t)c);
            vf[c] = elem(a->v_pool, q->dtype, row * (size_t)w + (size_t)c);
        }
        for (int64_t r = i0 * j->hq; r < rows; r++) {
            const float *kr = kf + (r % j->hq) / j->group * d,
                        *vr = vf + (r % j->hq) / j->group * d;
            const float *qr = qf + r * d;
            float s = 0.0f;
            for (int64_t c = 0; c < d; c++)
                s += qr[c] * kr[c];
            s *= a->scale;
            if (a->softcap > 0.0f)
                s = a->softcap * tanhf(s / a->softcap);
            float *o = part + r * (d + 2);
            const float m = o[d] > s ? o[d] : s, alpha = expf(o[d] - m), p = expf(s - m);
            for (int64_t c = 0; c < d; c++)
                o[c] = o[c] * alpha + p * vr[c];
            o[d + 1] = o[d + 1] * alpha + p;
            o[d] = m;
        }
    }
}

/* Fold the items' partials, in item order, into the running (o_acc, lse_acc). */
static void decode_fold(const struct decode_job *j, int64_t items)
{
    const struct burst_decode_args *a = j->a;
    const int64_t d = j->d, rows = j->t * j->hq;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = r / j->hq, h = r % j->hq;
        float *o = a->o_acc + (size_t)((i * j->hq + h) * d);
        float *lse = a->lse_acc + (size_t)(h * j->t + i);
        for (int64_t it = 0; it < items; it++) {
            const float *p = j->part + (size_t)((it * rows + r) * (d + 2));
            if (p[d + 1] == 0.0f)
                continue; /* no allowed key in this item */
            const float lr = p[d] + logf(p[d + 1]);
            const float L = *lse, mx = L > lr ? L : lr;
            const float nl = mx + log1pf(expf(-fabsf(L - lr)));
            const float wo = L == -INFINITY ? 0.0f : expf(L - nl), wr = expf(lr - nl) / p[d + 1];
            for (int64_t c = 0; c < d; c++)
                o[c] = wo * o[c] + wr * p[c];
            *lse = nl;
        }
    }
}

burst_status_t burst_cpu_decode_step(void *be, const struct burst_decode_args *args)
{
    struct burst_cpu_backend *cpu = be;
    if (!args || !args->q || !args->o_acc || !args->lse_acc || !args->blocks_host)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu decode_step: an argument is NULL");
    struct decode_job j = {
        .a = args, .t = args->q->shape[1], .hq = args->q->shape[2], .d = args->q->shape[3]};
    if (j.t > DECODE_MAX_ROWS)
        return BURST_ERR_UNSUPPORTED; /* many queries: the tiled fwd_step kernels do better */
    if (args->nkeys == 0 || j.t == 0)
        return BURST_OK;
    j.group = j.hq / args->hkv;
    j.bpi = (DECODE_ITEM_KEYS + args->block_len - 1) / args->block_len;
    const int64_t blocks = (args->nkeys + args->block_len - 1) / args->block_len;
    const int64_t items = (blocks + j.bpi - 1) / j.bpi;
    const size_t floats = (size_t)(items * j.t * j.hq * (j.d + 2));
    j.part = malloc(floats * sizeof(float));
    if (!j.part)
        return burst_error(BURST_ERR_NO_MEMORY, "cpu decode_step: out of memory (%zu bytes)",
                           floats * sizeof(float));
    const size_t scratch = sizeof(float) * (size_t)((j.t * j.hq + 2 * args->hkv) * j.d);
    burst_status_t st = burst_cpu_pool_run(cpu->pool, items, scratch, decode_item, &j);
    if (st == BURST_OK)
        decode_fold(&j, items);
    free(j.part);
    return st;
}
