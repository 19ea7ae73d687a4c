/* runtime/ring_xfer.c - staged ring transfers (see ring_xfer.h). */
#include "ring_xfer.h"

#include "context_internal.h"
#include "error.h"
#include "fault.h"

#include <stdlib.h>
#include <string.h>

/* Do messages with `peer` go device to device? (the same backend on both sides, or memory
 * shared by two backends on one device: plan->shared) */
static int direct_peer(const struct burst_plan *plan, int peer)
{
    return (plan->direct && burst_comm_device_peer(plan->comm, peer)) ||
           (plan->shared && plan->shared[peer]);
}

int burst_xfer_staged(const struct burst_plan *plan)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    if (!BURST_OPS_HAS(ops, mem.device_memory) &&
        !(BURST_OPS_HAS(ops, mem.stage_transfers) &&
          ops->mem.stage_transfers(plan->ctx->be, burst_comm_in_process(plan->comm))))
        return 0;
    if (!plan->direct && !plan->any_shared)
        return 1;
    for (int r = 0; r < plan->size; r++) /* every peer direct: nothing staged */
        if (r != plan->rank && !direct_peer(plan, r))
            return 1;
    return 0;
}

/* The device copies of a direct plan to or from `peer` (NULL: host memory or staged). */
static const struct burst_tp_dev *direct(struct burst_plan *plan, int peer,
                                         struct burst_tp_dev *dev)
{
    if (!direct_peer(plan, peer))
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
            ops->mem.host_free(plan->ctx->be, pool[empty].ptr);
        pool[empty].ptr = burst_fault_alloc() ? NULL : ops->mem.host_alloc(plan->ctx->be, len);
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

/* ---- pipelined staging (ring_xfer.h) ---- */

/* The device copies that pipeline staging, or NULL (then staging is synchronous). */
static const struct burst_tp_devops *stage_copies(const struct burst_plan *plan)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    return BURST_OPS_HAS(ops, mem.device_memory) && BURST_OPS_HAS(ops, devcopy) &&
                   ops->devcopy->copy
               ? ops->devcopy
               : NULL;
}

size_t burst_xfer_chunk_env(const struct burst_context *ctx)
{
    const long v = burst_set_long(&ctx->set, BURST_SET_STAGE_CHUNK_BYTES);
    return v >= 256 ? (size_t)v : 0;
}

/* Chunk size of a message of len bytes that does not go device to device: 0 when it goes whole
 * (pipelining off, or fewer than two chunks). Both sides of a message derive the same: the same
 * length, plan->stage_chunk compared by the handshake, and chunks whether or not the rank
 * stages (a rank on host memory sends and receives the chunks in place). */
static size_t chunk_of(const struct burst_plan *plan, size_t len)
{
    const size_t want = plan->stage_chunk;
    if (!want || len < 2 * want)
        return 0;
    size_t chunk = want;
    if ((len + chunk - 1) / chunk > BURST_XFER_CHUNKS) /* at most BURST_XFER_CHUNKS chunks */
        chunk = (len + BURST_XFER_CHUNKS - 1) / BURST_XFER_CHUNKS;
    return (chunk + 255) / 256 * 256;
}

/* Tag of chunk i of a message: its index in bits 18-23 of the step field (burst_tag). */
static uint64_t chunk_tag(uint64_t tag, int i)
{
    return tag | ((uint64_t)i << 18);
}

static size_t chunk_len(const struct burst_xfer *x, int i)
{
    size_t off = (size_t)i * x->chunk;
    return x->len - off < x->chunk ? x->len - off : x->chunk;
}

static void chunk_fail(struct burst_xfer *x, burst_status_t st)
{
    if (x->st == BURST_OK)
        x->st = st;
}

/* Put the chunks of send x on the wire, in order: staged with device copies, each once its copy
 * to the host is done (the host waits for them in turn); staged without them, each copied now;
 * not staged (x->used 0), each straight from src. */
static void send_flush(struct burst_plan *plan, struct burst_xfer *x, const void *src)
{
    const struct burst_tp_devops *dc = stage_copies(plan);
    unsigned char *h = x->used ? plan->stage[x->stage].ptr : (unsigned char *)(uintptr_t)src;
    for (; x->done < x->nchunks && x->st == BURST_OK; x->done++) {
        int i = x->done;
        burst_status_t st = BURST_OK;
        if (x->used && dc)
            st = dc->wait(plan->ctx->be, x->copy[i]);
        else if (x->used)
            st = plan->ctx->ops->mem.memcpy(plan->ctx->be, h + i * x->chunk,
                                            (const unsigned char *)src + i * x->chunk,
                                            chunk_len(x, i));
        if (st == BURST_OK)
            st = burst_comm_isend(plan->comm, x->peer, chunk_tag(x->tag, i), h + i * x->chunk,
                                  chunk_len(x, i), &x->creq[i]);
        if (st != BURST_OK)
            chunk_fail(x, st);
    }
}

/* Put every pending send of the plan on the wire (before anything blocks on a peer). */
static void sends_flush(struct burst_plan *plan)
{
    for (struct burst_xfer *x = plan->xfer_sends; x; x = x->next_send)
        send_flush(plan, x, NULL);
    plan->xfer_sends = NULL;
}

/* Receive x: wait for the chunks in order, copying each to its destination as soon as it is in
 * (staged: device copies queued, else copied now; not staged: it landed in place). */
static void recv_progress(struct burst_plan *plan, struct burst_xfer *x)
{
    const struct burst_tp_devops *dc = stage_copies(plan);
    unsigned char *h = x->used ? plan->stage[x->stage].ptr : NULL, *d = x->dev;
    for (; x->done < x->nchunks && x->st == BURST_OK; x->done++) {
        int i = x->done;
        const size_t off = (size_t)i * x->chunk;
        burst_status_t st = burst_comm_wait(plan->comm, &x->creq[i]);
        if (st != BURST_OK || !x->used)
            ;
        else if (dc)
            st = dc->copy(plan->ctx->be, d + off, h + off, chunk_len(x, i), x->mark, NULL,
                          &x->copy[i]);
        else
            st = plan->ctx->ops->mem.memcpy(plan->ctx->be, d + off, h + off, chunk_len(x, i));
        if (st != BURST_OK)
            chunk_fail(x, st);
    }
}

static burst_status_t chunks_post(struct burst_plan *plan, int send, int peer, uint64_t tag,
                                  void *buf, size_t len, size_t chunk, struct burst_xfer *x)
{
    const struct burst_tp_devops *dc = plan->staged ? stage_copies(plan) : NULL;
    burst_status_t st = BURST_OK;
    if (plan->staged) {
        st = stage_get(plan, len, &x->stage);
        if (st != BURST_OK)
            return st;
        x->used = 1;
    }
    x->send = send;
    x->peer = peer;
    x->tag = tag;
    x->len = len;
    x->chunk = chunk;
    x->nchunks = (int)((len + chunk - 1) / chunk);
    unsigned char *h = x->used ? plan->stage[x->stage].ptr : (unsigned char *)buf;
    if (send && !dc) { /* (copy and) send chunk by chunk now: the wire overlaps the copies */
        send_flush(plan, x, buf);
    } else if (send) { /* queue every chunk's copy; the wire takes them at the next start / wait */
        void *mark = NULL;
        st = dc->mark(plan->ctx->be, &mark);
        for (int i = 0; st == BURST_OK && i < x->nchunks; i++)
            st = dc->copy(plan->ctx->be, h + i * chunk, (unsigned char *)buf + i * chunk,
                          chunk_len(x, i), mark, NULL, &x->copy[i]);
        if (mark)
            dc->release(plan->ctx->be, mark);
        x->next_send = plan->xfer_sends;
        plan->xfer_sends = x;
    } else {
        x->dev = buf;
        if (dc)
            st = dc->mark(plan->ctx->be, &x->mark);
        for (int i = 0; st == BURST_OK && i < x->nchunks; i++) /* into staging, or in place */
            st = burst_comm_irecv(plan->comm, peer, chunk_tag(tag, i), h + i * chunk,
                                  chunk_len(x, i), &x->creq[i]);
    }
    if (st != BURST_OK)
        chunk_fail(x, st);
    return BURST_OK; /* wait() reports x->st after draining what was posted */
}

/* Wait for a pipelined transfer: everything on the wire and copied, then release. */
static burst_status_t chunks_wait(struct burst_plan *plan, struct burst_xfer *x)
{
    const struct burst_tp_devops *dc = stage_copies(plan);
    void *be = plan->ctx->be;
    if (x->send)
        send_flush(plan, x, NULL); /* (device copies: unlinked by sends_flush before) */
    else
        recv_progress(plan, x);
    for (int i = 0; i < x->nchunks; i++) { /* drain: every request, every copy */
        burst_status_t st = burst_comm_wait(plan->comm, &x->creq[i]);
        if (st != BURST_OK)
            chunk_fail(x, st);
        if (dc && x->copy[i]) {
            st = dc->wait(be, x->copy[i]);
            if (st != BURST_OK)
                chunk_fail(x, st);
            dc->release(be, x->copy[i]);
        }
    }
    if (dc && x->mark)
        dc->release(be, x->mark);
    burst_status_t st = x->st;
    stage_put(plan, x);
    *x = (struct burst_xfer){0};
    return st;
}

/* x leaves the plan's pending sends (it is being reused: the engine waited for it). */
static void unlink_send(struct burst_plan *plan, const struct burst_xfer *x)
{
    for (struct burst_xfer **p = &plan->xfer_sends; *p; p = &(*p)->next_send)
        if (*p == x) {
            *p = x->next_send;
            return;
        }
}

burst_status_t burst_xfer_isend(struct burst_plan *plan, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_xfer *x)
{
    unlink_send(plan, x);
    *x = (struct burst_xfer){0};
    struct burst_tp_dev dev;
    if (direct(plan, peer, &dev))
        return burst_comm_isend_dev(plan->comm, peer, tag, buf, len, &dev, &x->req);
    size_t chunk = chunk_of(plan, len);
    if (chunk)
        return chunks_post(plan, 1, peer, tag, (void *)(uintptr_t)buf, len, chunk, x);
    if (!plan->staged || len == 0)
        return burst_comm_isend(plan->comm, peer, tag, buf, len, &x->req);
    burst_status_t st = stage_get(plan, len, &x->stage);
    if (st != BURST_OK)
        return st;
    x->used = 1;
    void *h = plan->stage[x->stage].ptr;
    st = plan->ctx->ops->mem.memcpy(plan->ctx->be, h, buf, len);
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
    size_t chunk = chunk_of(plan, len);
    if (chunk)
        return chunks_post(plan, 0, peer, tag, buf, len, chunk, x);
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
    sends_flush(plan); /* waits for local copies only: the chunks of a receive wait for wait() */
    burst_comm_start(plan->comm, x->req);
}

burst_status_t burst_xfer_wait(struct burst_plan *plan, struct burst_xfer *x)
{
    sends_flush(plan);
    if (x->nchunks)
        return chunks_wait(plan, x);
    burst_status_t st = burst_comm_wait(plan->comm, &x->req);
    if (st == BURST_OK && x->used && x->dev)
        st = plan->ctx->ops->mem.memcpy(plan->ctx->be, x->dev, plan->stage[x->stage].ptr, x->len);
    stage_put(plan, x);
    x->dev = NULL;
    return st;
}

void burst_xfer_pool_free(struct burst_plan *plan)
{
    for (int i = 0; i < BURST_STAGE_BUFS; i++)
        if (plan->stage[i].ptr) {
            plan->ctx->ops->mem.host_free(plan->ctx->be, plan->stage[i].ptr);
            plan->stage[i].ptr = NULL;
            plan->stage[i].size = 0;
        }
}
