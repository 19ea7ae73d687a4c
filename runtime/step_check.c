/* runtime/step_check.c - the one check of a ring step's arguments (step_check.h). */
#include "step_check.h"

#include "error.h"

void burst_step_dims_of(const struct burst_tensor *q, const struct burst_tensor *k,
                        struct burst_step_dims *dim)
{
    dim->batch = q->shape[0];
    dim->nq = q->shape[1];
    dim->hq = q->shape[2];
    dim->d = q->shape[3];
    dim->nk = k->shape[1];
    dim->hkv = k->shape[2];
    dim->group = dim->hkv > 0 ? dim->hq / dim->hkv : 0;
}

burst_status_t burst_step_check_view(const char *op, const char *name, const struct burst_tensor *t)
{
    if (!t || !t->data)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s (or its data) is NULL", op, name);
    if (t->dtype != BURST_DTYPE_FP32 && t->dtype != BURST_DTYPE_FP16 &&
        t->dtype != BURST_DTYPE_BF16)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->dtype = %d is unknown", op, name,
                           (int)t->dtype);
    for (int k = 0; k < BURST_TENSOR_DIMS; k++)
        if (t->shape[k] < 0)
            return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->shape[%d] = %lld is negative", op,
                               name, k, (long long)t->shape[k]);
    if (t->stride[3] != 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->stride[3] = %lld is not 1", op, name,
                           (long long)t->stride[3]);
    return BURST_OK;
}

burst_status_t burst_step_check(const char *op, const struct burst_tensor *q,
                                const struct burst_tensor *k, const struct burst_tensor *v,
                                const struct burst_tensor *dout, struct burst_step_dims *dim)
{
    burst_status_t st;
    if ((st = burst_step_check_view(op, "q", q)) != BURST_OK ||
        (st = burst_step_check_view(op, "k", k)) != BURST_OK ||
        (st = burst_step_check_view(op, "v", v)) != BURST_OK ||
        (dout && (st = burst_step_check_view(op, "dout", dout)) != BURST_OK))
        return st;
    burst_step_dims_of(q, k, dim);
    if (dim->d <= 0 || dim->d % 8 != 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: head dim = %lld is not a positive "
                           "multiple of 8",
                           op, (long long)dim->d);
    if (k->shape[0] != dim->batch || k->shape[3] != dim->d)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: k shape [%lld, %lld, %lld, %lld] does "
                           "not match q [%lld, ., ., %lld]",
                           op, (long long)k->shape[0], (long long)k->shape[1],
                           (long long)k->shape[2], (long long)k->shape[3], (long long)dim->batch,
                           (long long)dim->d);
    for (int i = 0; i < BURST_TENSOR_DIMS; i++)
        if (v->shape[i] != k->shape[i])
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: v->shape[%d] = %lld differs from "
                               "k->shape[%d] = %lld",
                               op, i, (long long)v->shape[i], i, (long long)k->shape[i]);
    if (dout)
        for (int i = 0; i < BURST_TENSOR_DIMS; i++)
            if (dout->shape[i] != q->shape[i])
                return burst_error(BURST_ERR_INVALID_ARG,
                                   "%s: dout->shape[%d] = %lld differs "
                                   "from q->shape[%d] = %lld",
                                   op, i, (long long)dout->shape[i], i, (long long)q->shape[i]);
    if (dim->hkv <= 0 || dim->hq <= 0 || dim->hq % dim->hkv != 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: q heads = %lld is not a multiple of kv "
                           "heads = %lld",
                           op, (long long)dim->hq, (long long)dim->hkv);
    return BURST_OK;
}
