/* transport/tp_ipc.c - device messages between processes of one host (see tp_ipc.h). */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "settings.h"
#include "tp_ipc.h"

#define IPC_MAGIC 0x31435049u    /* "IPC1" */
#define IPC_ACK_BIT (1ull << 31) /* the kind byte's top bit (tp_comm.h burst_tag): kinds < 128 */
#define IPC_CTRL_MS 50 /* how often a receiver polling its copy asks the control channel */

struct ipc {
    struct burst_tp base;
    struct burst_tp_ops ops; /* inner's name, the wrapper's functions */
    struct burst_tp *inner;
    unsigned char *local; /* [size]: 1 when the peer shares this host */
    atomic_int aborted;
};

/* The descriptor a sender leaves for its receiver, and the receiver's acknowledgement. */
struct ipc_desc {
    uint32_t magic;
    uint32_t pad;
    uint64_t len;
    unsigned char desc[BURST_TP_IPC_DESC];
};
struct ipc_ack {
    uint32_t magic;
    int32_t status;
};

enum {
    REQ_HOST,
    REQ_SEND,
    REQ_RECV
};

struct burst_tp_req {
    int kind;
    struct burst_tp_req *inner; /* host: the message; send: the ack; recv: the descriptor */
    struct burst_tp_req *out;   /* send: the descriptor's send; recv: the ack's send */
    int peer;
    uint64_t tag;
    struct burst_tp_dev dev;
    void *mark; /* send: the exporter's marker, released after the ack; recv: the receiver's
                   work before the post (its reads of dst) */
    void *dst;  /* recv */
    size_t len;
    int started, no_ack;   /* recv: recv_start done; it failed before any descriptor came */
    burst_status_t status; /* recv: recv_start's outcome */
    void *done;            /* recv: the copy queued */
    char why[256];         /* recv: recv_start's error message */
    struct ipc_desc msg;
    struct ipc_ack ack;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The inner transport sees the wrapper's control channel (set after create). */
static struct burst_tp *inner_of(struct burst_tp *t)
{
    struct ipc *w = (struct ipc *)t;
    w->inner->ctrl = t->ctrl;
    return w->inner;
}

static int remaining_ms(int64_t deadline)
{
    int64_t left = deadline - now_us();
    return left > 0 ? (int)((left + 999) / 1000) : 0;
}

/*
 * Wait for one of the layer's small messages (descriptor, acknowledgement). They come within
 * microseconds of the peer reaching the matching point, while the process transport's wait()
 * may sleep on its progress thread (shm: up to a millisecond after a quiet compute step), which
 * on 2 x H200 cost 0.3 ms of exposed wait per ring step. So spin on test() first, for at most
 * BURST_IPC_SPIN_US (default 2000 us; the host has nothing else to do in a GPU ring).
 */
static int spin_us(void)
{
    static atomic_int cached = -1;
    int v = atomic_load(&cached);
    if (v < 0) {
        long e = 0; /* checked by the communicator's create; a default where it changed since */
        if (burst_setting_get("burst_tp_ipc", BURST_SET_IPC_SPIN_US, &e, NULL) != BURST_OK) {
            burst_error_clear(); /* the call that reads it has not failed */
            e = burst_settings[BURST_SET_IPC_SPIN_US].dflt;
        }
        v = (int)e;
        atomic_store(&cached, v);
    }
    return v;
}

static burst_status_t small_wait(struct burst_tp *in, struct burst_tp_req *req, int64_t deadline)
{
    const struct burst_tp_ops *o = in->ops;
    if (o->size >= sizeof(struct burst_tp_ops) && o->test) {
        int64_t end = now_us() + spin_us();
        if (end > deadline)
            end = deadline;
        for (int done = 0;;) {
            o->test(in, req, &done);
            if (done || now_us() >= end)
                break;
            sched_yield();
        }
    }
    return o->wait(in, req, remaining_ms(deadline));
}

static burst_status_t ipc_post_host(struct burst_tp *t, int is_send, int peer, uint64_t tag,
                                    void *buf, size_t len, struct burst_tp_req **req_p)
{
    struct burst_tp *in = inner_of(t);
    struct burst_tp_req *r = calloc(1, sizeof(*r));
    if (!r)
        return burst_error(BURST_ERR_NO_MEMORY, "ipc transport: out of memory");
    r->kind = REQ_HOST;
    burst_status_t st = is_send ? in->ops->isend(in, peer, tag, buf, len, &r->inner)
                                : in->ops->irecv(in, peer, tag, buf, len, &r->inner);
    if (st != BURST_OK) {
        free(r);
        return st;
    }
    *req_p = r;
    return BURST_OK;
}

static burst_status_t ipc_isend(struct burst_tp *t, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_tp_req **req_p)
{
    return ipc_post_host(t, 1, peer, tag, (void *)(uintptr_t)buf, len, req_p);
}

static burst_status_t ipc_irecv(struct burst_tp *t, int peer, uint64_t tag, void *buf, size_t len,
                                struct burst_tp_req **req_p)
{
    return ipc_post_host(t, 0, peer, tag, buf, len, req_p);
}

/* A device message to or from `peer`: allowed? with the ops it needs? */
static burst_status_t dev_check(struct burst_tp *t, const char *who, int peer,
                                const struct burst_tp_dev *dev)
{
    struct ipc *w = (struct ipc *)t;
    if (peer < 0 || peer >= t->size || !w->local[peer])
        return burst_error(BURST_ERR_INTERNAL, "ipc transport: %s: peer %d is not on this host",
                           who, peer);
    if (!dev || !dev->ops || !dev->ops->mark || !dev->ops->release || !dev->ops->ipc_export ||
        !dev->ops->ipc_import || !dev->ops->ipc_test || !dev->ops->ipc_finish)
        return burst_error(BURST_ERR_INTERNAL,
                           "ipc transport: %s: the backend cannot share device memory", who);
    return BURST_OK;
}

/* A new device request, after the checks of dev_check. */
static burst_status_t dev_req(struct burst_tp *t, const char *who, int kind, int peer, uint64_t tag,
                              const struct burst_tp_dev *dev, struct burst_tp_req **r_p)
{
    burst_status_t st = dev_check(t, who, peer, dev);
    if (st != BURST_OK)
        return st;
    struct burst_tp_req *r = calloc(1, sizeof(*r));
    if (!r)
        return burst_error(BURST_ERR_NO_MEMORY, "ipc transport: out of memory");
    r->kind = kind;
    r->peer = peer;
    r->tag = tag;
    r->dev = *dev;
    *r_p = r;
    return BURST_OK;
}

static burst_status_t ipc_isend_dev(struct burst_tp *t, int peer, uint64_t tag, const void *buf,
                                    size_t len, const struct burst_tp_dev *dev,
                                    struct burst_tp_req **req_p)
{
    struct burst_tp_req *r = NULL;
    burst_status_t st = dev_req(t, "isend_dev", REQ_SEND, peer, tag, dev, &r);
    if (st != BURST_OK)
        return st;
    struct burst_tp *in = inner_of(t);
    r->msg.magic = IPC_MAGIC;
    r->msg.len = len;
    st = dev->ops->ipc_export(dev->be, buf, r->msg.desc, &r->mark);
    if (st == BURST_OK)
        st = in->ops->irecv(in, peer, tag ^ IPC_ACK_BIT, &r->ack, sizeof(r->ack), &r->inner);
    if (st == BURST_OK)
        st = in->ops->isend(in, peer, tag, &r->msg, sizeof(r->msg), &r->out);
    if (st != BURST_OK) {
        if (r->inner) /* posted, never matched: a zero timeout releases it */
            in->ops->wait(in, r->inner, 0);
        dev->ops->release(dev->be, r->mark);
        free(r);
        return st;
    }
    *req_p = r;
    return BURST_OK;
}

static burst_status_t ipc_irecv_dev(struct burst_tp *t, int peer, uint64_t tag, void *buf,
                                    size_t len, const struct burst_tp_dev *dev,
                                    struct burst_tp_req **req_p)
{
    struct burst_tp_req *r = NULL;
    burst_status_t st = dev_req(t, "irecv_dev", REQ_RECV, peer, tag, dev, &r);
    if (st != BURST_OK)
        return st;
    struct burst_tp *in = inner_of(t);
    r->dst = buf;
    r->len = len;
    st = dev->ops->mark(dev->be, &r->mark);
    if (st == BURST_OK)
        st = in->ops->irecv(in, peer, tag, &r->msg, sizeof(r->msg), &r->inner);
    if (st != BURST_OK) {
        dev->ops->release(dev->be, r->mark);
        free(r);
        return st;
    }
    *req_p = r;
    return BURST_OK;
}

/* Poll the receiver's copy until done, the deadline, an abort or a peer failure. */
static burst_status_t copy_wait(struct burst_tp *t, struct burst_tp_req *r, void *done,
                                int64_t deadline)
{
    struct ipc *w = (struct ipc *)t;
    int64_t next_ctrl = now_us() + IPC_CTRL_MS * 1000;
    for (unsigned spins = 0;; spins++) {
        int complete = 0;
        burst_status_t st = r->dev.ops->ipc_test(r->dev.be, done, &complete);
        if (st != BURST_OK || complete)
            return st;
        if (atomic_load(&w->aborted))
            return burst_error(BURST_ERR_PEER_FAILED,
                               "ipc transport: rank %d: the ring was aborted while copying the "
                               "block from rank %d",
                               t->rank, r->peer);
        int64_t now = now_us();
        if (now >= deadline)
            return burst_error(BURST_ERR_TIMEOUT,
                               "ipc transport: rank %d: the device copy from rank %d did not "
                               "finish within the timeout",
                               t->rank, r->peer);
        if (t->ctrl && now >= next_ctrl) {
            next_ctrl = now + IPC_CTRL_MS * 1000;
            if ((st = t->ctrl->poll(t->ctrl)) != BURST_OK)
                return st;
        }
        /* a block takes tens of microseconds to milliseconds: spin briefly, then nap */
        if (spins > 64) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

/* The receiver's first half: the descriptor, its checks, the copy queued (r->started). */
static void recv_start(struct burst_tp *t, struct burst_tp_req *r, int64_t deadline)
{
    struct burst_tp *in = inner_of(t);
    r->started = 1;
    burst_status_t st = small_wait(in, r->inner, deadline);
    r->inner = NULL;
    if (st != BURST_OK) {
        r->dev.ops->release(r->dev.be, r->mark);
        r->status = st;
        r->no_ack = 1; /* no descriptor: nothing to acknowledge */
        snprintf(r->why, sizeof(r->why), "%s", burst_last_error());
        return;
    }
    if (r->msg.magic != IPC_MAGIC)
        st = burst_error(BURST_ERR_TRANSPORT,
                         "ipc transport: rank %d: malformed device descriptor from rank %d",
                         t->rank, r->peer);
    else if (r->msg.len != r->len)
        st = burst_error(BURST_ERR_TRANSPORT,
                         "ipc transport: rank %d: length mismatch on the device message from rank "
                         "%d (%llu bytes sent, %zu expected)",
                         t->rank, r->peer, (unsigned long long)r->msg.len, r->len);
    if (st == BURST_OK && r->len)
        st = r->dev.ops->ipc_import(r->dev.be, r->dst, r->msg.desc, r->len, r->mark, &r->done);
    r->dev.ops->release(r->dev.be, r->mark); /* its wait is queued: releasing is safe */
    r->status = st;
    if (st != BURST_OK) /* keep the message for wait(), which may come after other errors */
        snprintf(r->why, sizeof(r->why), "%s", burst_last_error());
}

static burst_status_t wait_recv(struct burst_tp *t, struct burst_tp_req *r, int64_t deadline)
{
    struct burst_tp *in = inner_of(t);
    if (!r->started)
        recv_start(t, r, deadline);
    else if (r->status != BURST_OK)
        burst_error(r->status, "%s", r->why);
    burst_status_t st = r->status;
    if (r->no_ack)
        return st;
    if (st == BURST_OK && r->done)
        st = copy_wait(t, r, r->done, deadline);
    if (r->done)
        r->dev.ops->ipc_finish(r->dev.be, r->done);
    /* acknowledge in every case, so the sender fails now rather than at its timeout */
    r->ack.magic = IPC_MAGIC;
    r->ack.status = (int32_t)st;
    burst_status_t sa =
        in->ops->isend(in, r->peer, r->tag ^ IPC_ACK_BIT, &r->ack, sizeof(r->ack), &r->out);
    if (sa == BURST_OK)
        sa = small_wait(in, r->out, deadline + 1000000);
    return st != BURST_OK ? st : sa;
}

/* Start a posted device receive now: the copy then runs while the caller computes. */
static void ipc_start(struct burst_tp *t, struct burst_tp_req *r, int timeout_ms)
{
    if (r && r->kind == REQ_RECV && !r->started)
        recv_start(t, r, now_us() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000);
}

static burst_status_t wait_send(struct burst_tp *t, struct burst_tp_req *r, int64_t deadline)
{
    struct burst_tp *in = inner_of(t);
    burst_status_t st = small_wait(in, r->out, deadline);
    burst_status_t sa =
        st == BURST_OK ? small_wait(in, r->inner, deadline) : in->ops->wait(in, r->inner, 0);
    r->dev.ops->release(r->dev.be, r->mark);
    if (st != BURST_OK)
        return st;
    if (sa != BURST_OK)
        return sa;
    if (r->ack.magic != IPC_MAGIC)
        return burst_error(BURST_ERR_TRANSPORT,
                           "ipc transport: rank %d: malformed acknowledgement from rank %d",
                           t->rank, r->peer);
    if (r->ack.status != BURST_OK)
        return burst_error(r->ack.status == BURST_ERR_TRANSPORT ? BURST_ERR_TRANSPORT
                                                                : BURST_ERR_PEER_FAILED,
                           "ipc transport: rank %d: rank %d could not take the device message: "
                           "%s",
                           t->rank, r->peer, burst_status_str((burst_status_t)r->ack.status));
    return BURST_OK;
}

static burst_status_t ipc_wait(struct burst_tp *t, struct burst_tp_req *r, int timeout_ms)
{
    int64_t deadline = now_us() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
    burst_status_t st;
    if (r->kind == REQ_HOST) {
        struct burst_tp *in = inner_of(t);
        st = in->ops->wait(in, r->inner, timeout_ms);
    } else {
        st = r->kind == REQ_SEND ? wait_send(t, r, deadline) : wait_recv(t, r, deadline);
    }
    free(r);
    return st;
}

static void ipc_abort(struct burst_tp *t, burst_status_t reason)
{
    struct ipc *w = (struct ipc *)t;
    atomic_store(&w->aborted, 1);
    struct burst_tp *in = inner_of(t);
    in->ops->abort(in, reason);
}

static void ipc_destroy(struct burst_tp *t)
{
    struct ipc *w = (struct ipc *)t;
    if (!w)
        return;
    w->inner->ops->destroy(w->inner);
    free(w->local);
    free(w);
}

burst_status_t burst_tp_ipc_create(struct burst_tp *inner, const int *host_of,
                                   struct burst_tp **tp_p)
{
    static const char *who = "burst_tp_ipc_create";
    if (!inner || !host_of || !tp_p)
        return burst_error(BURST_ERR_INTERNAL, "%s: NULL argument", who);
    struct ipc *w = calloc(1, sizeof(*w));
    unsigned char *local = calloc((size_t)inner->size, 1);
    if (!w || !local) {
        free(w);
        free(local);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    }
    for (int r = 0; r < inner->size; r++)
        local[r] = host_of[r] == host_of[inner->rank];
    w->ops = (struct burst_tp_ops){
        .size = sizeof(struct burst_tp_ops),
        .name = inner->ops->name,
        .isend = ipc_isend,
        .irecv = ipc_irecv,
        .wait = ipc_wait,
        .abort = ipc_abort,
        .destroy = ipc_destroy,
        .isend_dev = ipc_isend_dev,
        .irecv_dev = ipc_irecv_dev,
        .start = ipc_start,
    };
    w->base.ops = &w->ops;
    w->base.rank = inner->rank;
    w->base.size = inner->size;
    w->base.ctrl = inner->ctrl;
    w->inner = inner;
    w->local = local;
    atomic_init(&w->aborted, 0);
    *tp_p = &w->base;
    return BURST_OK;
}

int burst_tp_ipc_peer(const struct burst_tp *tp, int peer)
{
    if (!tp || tp->ops->isend_dev != ipc_isend_dev || peer < 0 || peer >= tp->size)
        return 0;
    return ((const struct ipc *)tp)->local[peer];
}
