/*
 * transport/tp_local.c - the in-process transport: ranks are threads of one process.
 *
 * A burst_local_world is a rendezvous table shared by its ranks. A send and a receive with the
 * same (source, destination, tag) match in posting order; whichever is posted second performs the
 * copy straight from the sender's buffer into the receiver's (no intermediate buffer), outside the
 * world lock, then completes both. Aborting the world wakes every waiter; an operation whose copy
 * is under way always finishes before its wait returns, so no buffer is touched after wait().
 * Once every communicator of an aborted world is destroyed, the world is usable again.
 *
 * Device memory (isend_dev / irecv_dev, transport.h): each side marks its queued device work when
 * it posts; the second poster queues the device copy (ordered after both marks, on the backend's
 * copy stream, so it runs beside the ranks' kernels) instead of memcpy, and both waits block
 * until that copy has completed. Blocks then go device to device (peer copies between GPUs),
 * never through host memory. The two sides may be ranks of two backends sharing a device
 * (transport.h, share_*): a copier (cuda) and an exporter (vulkan, no copy(), synchronous). The
 * copier's copy() then moves the pair, whichever side posted second, on its own address of the
 * exporter's buffer (share_import), after the exporter's mark has been waited for on the host.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "burst/comm.h"
#include "error.h"
#include "transport.h"

enum req_state {
    REQ_PENDING,
    REQ_COPYING,
    REQ_DONE
};

/* Room for the reason a device copy could not be queued, for both sides' wait() messages. */
#define WHY_LEN 320

struct burst_tp_req {
    struct burst_tp_req *next; /* in the world's pending list while REQ_PENDING */
    int is_send;
    int src, dst;
    uint64_t tag;
    void *buf;
    size_t len;
    size_t other_len; /* the matched message's, when the lengths differ */
    enum req_state state;
    burst_status_t status;
    int has_dev; /* posted with isend_dev / irecv_dev */
    struct burst_tp_dev dev;
    void *mark;            /* device work queued before the post (dev only) */
    struct dev_done *done; /* the queued device copy, shared by the matched pair */
    char why[WHY_LEN];     /* why that copy failed to be queued ("" otherwise) */
};

/* A queued device copy: its completion marker, released by the last of the pair's waits with
 * the ops of the side that queued it. */
struct dev_done {
    void *ev;
    int refs;
    struct burst_tp_dev by;
};

struct burst_local_world {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int size;
    int aborted;
    burst_status_t reason;
    unsigned char *joined;      /* [size] rank taken by a live transport */
    int members;                /* live transports; when the last leaves, an abort is forgotten */
    struct burst_tp_req *sends; /* pending, posting order */
    struct burst_tp_req *recvs;
};

struct tp_local {
    struct burst_tp base;
    struct burst_local_world *world;
};

burst_status_t burst_local_world_create(int size, struct burst_local_world **world_p)
{
    burst_error_clear();
    if (!world_p)
        return burst_error(BURST_ERR_INVALID_ARG, "burst_local_world_create: world_p is NULL");
    if (size < 1 || size > 65536)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "burst_local_world_create: size = %d must be in 1..65536", size);
    struct burst_local_world *w = calloc(1, sizeof(*w));
    unsigned char *joined = calloc((size_t)size, 1);
    pthread_condattr_t ca;
    if (!w || !joined) {
        free(w);
        free(joined);
        return burst_error(BURST_ERR_NO_MEMORY, "burst_local_world_create: out of memory");
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    w->size = size;
    w->joined = joined;
    *world_p = w;
    return BURST_OK;
}

void burst_local_world_destroy(struct burst_local_world *w)
{
    if (!w)
        return;
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w->joined);
    free(w);
}

static void list_remove(struct burst_tp_req **head, struct burst_tp_req *r)
{
    for (struct burst_tp_req **p = head; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            r->next = NULL;
            return;
        }
}

static void list_append(struct burst_tp_req **head, struct burst_tp_req *r)
{
    struct burst_tp_req **p = head;
    while (*p)
        p = &(*p)->next;
    r->next = NULL;
    *p = r;
}

/* Where the copier c's copy() reaches side x's buffer: x's own address when both sides run one
 * backend; else x's memory imported by c (transport.h, share_import). */
static burst_status_t dev_addr(const struct burst_tp_req *c, const struct burst_tp_req *x,
                               void **ptr_p)
{
    *ptr_p = x->buf;
    if (x->dev.ops == c->dev.ops)
        return BURST_OK;
    if (!c->dev.ops->share_import || !x->dev.ops->share_export)
        return burst_error(BURST_ERR_INTERNAL,
                           "local transport: ranks %d and %d posted device memory of two "
                           "backends that share none",
                           x->src, x->dst);
    return c->dev.ops->share_import(c->dev.be, &x->dev, x->buf, x->len, ptr_p);
}

/* Queue the device copy of the matched pair (s, d) with the copier c (one of them, the side
 * with copy()). A side of another backend (an exporter: synchronous) has its mark waited for
 * here, on the host; the copy is ordered after the copier's side's mark on the device. */
static burst_status_t dev_copy(struct burst_tp_req *c, struct burst_tp_req *s,
                               struct burst_tp_req *d, struct dev_done *done)
{
    if (!c->dev.ops->copy)
        return burst_error(BURST_ERR_INTERNAL,
                           "local transport: ranks %d and %d: neither side of a device "
                           "message can copy device memory",
                           s->src, s->dst);
    void *src = NULL, *dst = NULL, *after[2] = {s->mark, d->mark};
    struct burst_tp_req *side[2] = {s, d};
    burst_status_t st = BURST_OK;
    for (int i = 0; i < 2 && st == BURST_OK; i++)
        if (side[i]->dev.ops != c->dev.ops) {
            if (after[i])
                st = side[i]->dev.ops->wait(side[i]->dev.be, after[i]);
            after[i] = NULL;
        }
    if (st == BURST_OK)
        st = dev_addr(c, s, &src);
    if (st == BURST_OK)
        st = dev_addr(c, d, &dst);
    if (st == BURST_OK)
        st = c->dev.ops->copy(c->dev.be, dst, src, s->len, after[0], after[1], &done->ev);
    done->by = c->dev;
    return st;
}

/* Post r; match it against the opposite list. Called without the lock held. */
static burst_status_t post(struct tp_local *tp, struct burst_tp_req *r, struct burst_tp_req **req_p)
{
    struct burst_local_world *w = tp->world;
    pthread_mutex_lock(&w->lock);
    if (w->aborted) {
        pthread_mutex_unlock(&w->lock);
        free(r);
        return burst_error(BURST_ERR_PEER_FAILED,
                           "local transport: rank %d: the ring was aborted (%s)", tp->base.rank,
                           burst_status_str(w->reason));
    }
    struct burst_tp_req **other = r->is_send ? &w->recvs : &w->sends;
    struct burst_tp_req *m = NULL;
    for (struct burst_tp_req *it = *other; it; it = it->next)
        if (it->src == r->src && it->dst == r->dst && it->tag == r->tag) {
            m = it;
            break;
        }
    if (!m) {
        r->state = REQ_PENDING;
        list_append(r->is_send ? &w->sends : &w->recvs, r);
        pthread_mutex_unlock(&w->lock);
        *req_p = r;
        return BURST_OK;
    }
    list_remove(other, m);
    struct burst_tp_req *s = r->is_send ? r : m, *d = r->is_send ? m : r;
    if (s->len != d->len || s->has_dev != d->has_dev) {
        s->other_len = d->len;
        d->other_len = s->len;
        s->status = d->status = BURST_ERR_TRANSPORT;
        s->state = d->state = REQ_DONE;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        *req_p = r;
        return BURST_OK; /* the error surfaces in wait() on both sides */
    }
    s->state = d->state = REQ_COPYING;
    pthread_mutex_unlock(&w->lock);
    burst_status_t st = BURST_OK;
    struct dev_done *done = NULL;
    if (r->has_dev && s->len) {
        done = calloc(1, sizeof(*done));
        st = done ? dev_copy(r->dev.ops->copy ? r : m, s, d, done)
                  : burst_error(BURST_ERR_NO_MEMORY, "local transport: out of memory");
        if (st != BURST_OK) {
            snprintf(s->why, sizeof s->why, "%s", burst_last_error());
            memcpy(d->why, s->why, sizeof d->why);
            free(done);
            done = NULL;
        } else {
            done->refs = 2;
        }
    } else if (s->len) {
        memcpy(d->buf, s->buf, s->len);
    }
    if (r->has_dev) { /* the copy is ordered after both marks: they are spent */
        s->dev.ops->release(s->dev.be, s->mark);
        d->dev.ops->release(d->dev.be, d->mark);
        s->mark = d->mark = NULL;
    }
    pthread_mutex_lock(&w->lock);
    s->state = d->state = REQ_DONE;
    s->status = d->status = st == BURST_OK ? BURST_OK : BURST_ERR_DEVICE;
    s->done = d->done = done;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    *req_p = r;
    return BURST_OK;
}

static burst_status_t make_req(struct tp_local *tp, int is_send, int peer, uint64_t tag, void *buf,
                               size_t len, const struct burst_tp_dev *dev,
                               struct burst_tp_req **req_p)
{
    if (peer < 0 || peer >= tp->base.size)
        return burst_error(BURST_ERR_INTERNAL, "local transport: peer = %d out of range", peer);
    struct burst_tp_req *r = calloc(1, sizeof(*r));
    if (!r)
        return burst_error(BURST_ERR_NO_MEMORY, "local transport: out of memory");
    r->is_send = is_send;
    r->src = is_send ? tp->base.rank : peer;
    r->dst = is_send ? peer : tp->base.rank;
    r->tag = tag;
    r->buf = buf;
    r->len = len;
    if (dev) {
        r->has_dev = 1;
        r->dev = *dev;
        burst_status_t st = dev->ops->mark(dev->be, &r->mark);
        if (st != BURST_OK) {
            free(r);
            return st;
        }
    }
    return post(tp, r, req_p);
}

static burst_status_t local_isend(struct burst_tp *t, int peer, uint64_t tag, const void *buf,
                                  size_t len, struct burst_tp_req **req_p)
{
    return make_req((struct tp_local *)t, 1, peer, tag, (void *)(uintptr_t)buf, len, NULL, req_p);
}

static burst_status_t local_isend_dev(struct burst_tp *t, int peer, uint64_t tag, const void *buf,
                                      size_t len, const struct burst_tp_dev *dev,
                                      struct burst_tp_req **req_p)
{
    return make_req((struct tp_local *)t, 1, peer, tag, (void *)(uintptr_t)buf, len, dev, req_p);
}

static burst_status_t local_irecv_dev(struct burst_tp *t, int peer, uint64_t tag, void *buf,
                                      size_t len, const struct burst_tp_dev *dev,
                                      struct burst_tp_req **req_p)
{
    return make_req((struct tp_local *)t, 0, peer, tag, buf, len, dev, req_p);
}

static burst_status_t local_irecv(struct burst_tp *t, int peer, uint64_t tag, void *buf, size_t len,
                                  struct burst_tp_req **req_p)
{
    return make_req((struct tp_local *)t, 0, peer, tag, buf, len, NULL, req_p);
}

static burst_status_t local_wait(struct burst_tp *t, struct burst_tp_req *r, int timeout_ms)
{
    struct tp_local *tp = (struct tp_local *)t;
    struct burst_local_world *w = tp->world;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    burst_status_t st;
    int timed_out = 0;
    pthread_mutex_lock(&w->lock);
    while (r->state != REQ_DONE && (r->state == REQ_COPYING || (!w->aborted && !timed_out)))
        if (pthread_cond_timedwait(&w->cond, &w->lock, &deadline) == ETIMEDOUT)
            timed_out = 1;
    struct dev_done *done = NULL;
    if (r->state == REQ_DONE) {
        st = r->status;
        done = r->done;
        if (st == BURST_ERR_DEVICE)
            burst_error(st,
                        "local transport: rank %d: the device copy of a %zu-byte message %s "
                        "rank %d (tag 0x%llx) failed%s%s",
                        t->rank, r->len, r->is_send ? "to" : "from", r->is_send ? r->dst : r->src,
                        (unsigned long long)r->tag, r->why[0] ? ": " : "", r->why);
        else if (st != BURST_OK && r->other_len == r->len)
            burst_error(st,
                        "local transport: rank %d: %s of %zu bytes with rank %d (tag 0x%llx): "
                        "one side posted device memory, the other host memory",
                        t->rank, r->is_send ? "send" : "receive", r->len,
                        r->is_send ? r->dst : r->src, (unsigned long long)r->tag);
        else if (st != BURST_OK)
            burst_error(st,
                        "local transport: rank %d: %s of %zu bytes with rank %d (tag 0x%llx) "
                        "matched a message of another length (%zu bytes)",
                        t->rank, r->is_send ? "send" : "receive", r->len,
                        r->is_send ? r->dst : r->src, (unsigned long long)r->tag, r->other_len);
    } else {
        list_remove(r->is_send ? &w->sends : &w->recvs, r);
        int peer = r->is_send ? r->dst : r->src;
        if (w->aborted)
            st = burst_error(BURST_ERR_PEER_FAILED,
                             "local transport: rank %d: the ring was aborted (%s) while waiting "
                             "for rank %d",
                             t->rank, burst_status_str(w->reason), peer);
        else
            st = burst_error(BURST_ERR_TIMEOUT,
                             "local transport: rank %d: rank %d did not answer within %d ms",
                             t->rank, peer, timeout_ms);
    }
    pthread_mutex_unlock(&w->lock);
    if (done) { /* the copy is queued: the buffers are busy until it completes */
        burst_status_t sw = done->by.ops->wait(done->by.be, done->ev);
        if (st == BURST_OK)
            st = sw;
        pthread_mutex_lock(&w->lock);
        int last = --done->refs == 0;
        pthread_mutex_unlock(&w->lock);
        if (last) {
            done->by.ops->release(done->by.be, done->ev);
            free(done);
        }
    }
    if (r->has_dev && r->mark)
        r->dev.ops->release(r->dev.be, r->mark);
    free(r);
    return st;
}

static void local_abort(struct burst_tp *t, burst_status_t reason)
{
    struct burst_local_world *w = ((struct tp_local *)t)->world;
    pthread_mutex_lock(&w->lock);
    if (!w->aborted) {
        w->aborted = 1;
        w->reason = reason;
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void local_destroy(struct burst_tp *t)
{
    struct tp_local *tp = (struct tp_local *)t;
    struct burst_local_world *w = tp->world;
    pthread_mutex_lock(&w->lock);
    w->joined[t->rank] = 0;
    if (--w->members == 0) { /* everyone left: the world can host a fresh ring */
        w->aborted = 0;
        w->reason = BURST_OK;
    }
    pthread_mutex_unlock(&w->lock);
    free(tp);
}

static const struct burst_tp_ops local_ops = {
    .size = sizeof(struct burst_tp_ops),
    .name = "local",
    .isend = local_isend,
    .irecv = local_irecv,
    .wait = local_wait,
    .abort = local_abort,
    .destroy = local_destroy,
    .isend_dev = local_isend_dev,
    .irecv_dev = local_irecv_dev,
};

burst_status_t burst_tp_local_create(struct burst_local_world *w, int rank, int size,
                                     struct burst_tp **tp_p)
{
    static const char *who = "burst_comm_create";
    if (size != w->size)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->size = %d but the world was created for %d ranks", who,
                           size, w->size);
    struct tp_local *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    pthread_mutex_lock(&w->lock);
    int taken = w->joined[rank];
    if (!taken) {
        w->joined[rank] = 1;
        w->members++;
    }
    pthread_mutex_unlock(&w->lock);
    if (taken) {
        free(tp);
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->rank = %d is already taken in this world", who, rank);
    }
    tp->base.ops = &local_ops;
    tp->base.rank = rank;
    tp->base.size = size;
    tp->world = w;
    *tp_p = &tp->base;
    return BURST_OK;
}
