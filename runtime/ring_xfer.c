/* runtime/ring_xfer.c - staged ring transfers (see ring_xfer.h). */
#include "ring_xfer.h"

#include "context_internal.h"
#include "error.h"
#include "fault.h"

int burst_xfer_staged(const struct burst_plan *plan)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    if (ops->device_memory) {
        if (!plan->direct)
            return 1;
        for (int r = 0; r < plan->size; r++) /* direct: staged between hosts */
            if (r != plan->rank && !burst_comm_device_peer(plan->comm, r))
                return 1;
        return 0;
    }
    return ops->size >= sizeof(*ops) && ops->stage_between_processes &&
           !burst_comm_in_process(plan->comm) && ops->stage_between_processes(plan->ctx->be);
}

/* The device copies of a direct plan to or from `peer` (NULL: host memory or staged). */
static const struct burst_tp_dev *direct(struct burst_plan *plan, int peer,
                                         struct burst_tp_dev *dev)
{
    if (!plan->direct || !burst_comm_device_peer(plan->comm, peer))
        return NULL;
    dev->ops = plan->ctx->ops->devcopy;
    dev->be = plan->ctx->be;
    return dev;
}

/* A free staging buffer of at least len bytes: the smallest that fits, else grow one. */
static burst_status_t stage_get(struct burst_plan *plan, size_t len, int *idx_p)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    struct burst_stage *pool = plan->stage;
    int best = -1, empty = -1;
    for (int i = 0; i < BURST_STAGE_BUFS; i++) {
        if (pool[i].busy)
            continue;
        if (pool[i].ptr && pool[i].size >= len && (best < 0 || pool[i].size < pool[best].size))
            best = i;
        if (empty < 0 || pool[i].size < pool[empty].size)
            empty = i;
    }
    if (best < 0) {
        if (empty < 0)
            return burst_error(BURST_ERR_INTERNAL, "ring: more than %d staged transfers at once",
                               BURST_STAGE_BUFS);
        if (pool[empty].ptr)
            ops->host_free(plan->ctx->be, pool[empty].ptr);
        pool[empty].ptr = burst_fault_alloc() ? NULL : ops->host_alloc(plan->ctx->be, len);
        pool[empty].size = pool[empty].ptr ? len : 0;
        if (!pool[empty].ptr)
            return burst_error(BURST_ERR_NO_MEMORY, "ring: %zu bytes of page-locked staging memory",
                               len);
        best = empty;
    }
    pool[best].busy = 1;
    *idx_p = best;
    return BURST_OK;
}

static void stage_put(struct burst_plan *plan, struct burst_xfer *x)
{
    if (x->used)
        plan->stage[x->stage].busy = 0;
    x->used = 0;
}

burst_status_t burst_xfer_isend(struct burst_plan *plan, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_xfer *x)
{
    *x = (struct burst_xfer){0};
    struct burst_tp_dev dev;
    if (direct(plan, peer, &dev))
        return burst_comm_isend_dev(plan->comm, peer, tag, buf, len, &dev, &x->req);
    if (!plan->staged || len == 0)
        return burst_comm_isend(plan->comm, peer, tag, buf, len, &x->req);
    burst_status_t st = stage_get(plan, len, &x->stage);
    if (st != BURST_OK)
        return st;
    x->used = 1;
    void *h = plan->stage[x->stage].ptr;
    st = plan->ctx->ops->memcpy(plan->ctx->be, h, buf, len);
    if (st == BURST_OK)
        st = burst_comm_isend(plan->comm, peer, tag, h, len, &x->req);
    if (st != BURST_OK)
        stage_put(plan, x);
    return st;
}

burst_status_t burst_xfer_irecv(struct burst_plan *plan, int peer, uint64_t tag, void *buf,
                                size_t len, struct burst_xfer *x)
{
    *x = (struct burst_xfer){0};
    struct burst_tp_dev dev;
    if (direct(plan, peer, &dev))
        return burst_comm_irecv_dev(plan->comm, peer, tag, buf, len, &dev, &x->req);
    if (!plan->staged || len == 0)
        return burst_comm_irecv(plan->comm, peer, tag, buf, len, &x->req);
    burst_status_t st = stage_get(plan, len, &x->stage);
    if (st != BURST_OK)
        return st;
    x->used = 1;
    x->dev = buf;
    x->len = len;
    st = burst_comm_irecv(plan->comm, peer, tag, plan->stage[x->stage].ptr, len, &x->req);
    if (st != BURST_OK)
        stage_put(plan, x);
    return st;
}

void burst_xfer_start(struct burst_plan *plan, struct burst_xfer *x)
{
    burst_comm_start(plan->comm, x->req);
}

burst_status_t burst_xfer_wait(struct burst_plan *plan, struct burst_xfer *x)
{
    burst_status_t st = burst_comm_wait(plan->comm, &x->req);
    if (st == BURST_OK && x->used && x->dev)
        st = plan->ctx->ops->memcpy(plan->ctx->be, x->dev, plan->stage[x->stage].ptr, x->len);
    stage_put(plan, x);
    x->dev = NULL;
    return st;
}

void burst_xfer_pool_free(struct burst_plan *plan)
{
    for (int i = 0; i < BURST_STAGE_BUFS; i++)
        if (plan->stage[i].ptr) {
            plan->ctx->ops->host_free(plan->ctx->be, plan->stage[i].ptr);
            plan->stage[i].ptr = NULL;
            plan->stage[i].size = 0;
        }
}
