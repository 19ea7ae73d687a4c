/* transport/tp_hybrid.c - route each peer to the host-local or the network transport. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tp_hybrid.h"

struct hyb {
    struct burst_tp base;
    struct burst_tp *sub[2]; /* 0: local (same host), 1: net */
    unsigned char *via;      /* [size]: index into sub for each peer */
};

/* A request of the hybrid: which sub-transport holds it, and its own request there. */
struct burst_tp_req {
    struct burst_tp *sub;
    struct burst_tp_req *inner;
};

/* The sub-transports must see the same control channel as the hybrid (set after create). */
static struct burst_tp *route(struct hyb *h, int peer)
{
    struct burst_tp *t = h->sub[h->via[peer]];
    t->ctrl = h->base.ctrl;
    return t;
}

static burst_status_t hyb_post(struct burst_tp *t, int is_send, int peer, uint64_t tag, void *buf,
                               size_t len, struct burst_tp_req **req_p)
{
    struct hyb *h = (struct hyb *)t;
    if (peer < 0 || peer >= t->size)
        return burst_error(BURST_ERR_INTERNAL, "hybrid transport: peer = %d out of range", peer);
    struct burst_tp_req *r = malloc(sizeof(*r));
    if (!r)
        return burst_error(BURST_ERR_NO_MEMORY, "hybrid transport: out of memory");
    r->sub = route(h, peer);
    burst_status_t st = is_send ? r->sub->ops->isend(r->sub, peer, tag, buf, len, &r->inner)
                                : r->sub->ops->irecv(r->sub, peer, tag, buf, len, &r->inner);
    if (st != BURST_OK) {
        free(r);
        return st;
    }
    *req_p = r;
    return BURST_OK;
}

static burst_status_t hyb_isend(struct burst_tp *t, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_tp_req **req_p)
{
    return hyb_post(t, 1, peer, tag, (void *)(uintptr_t)buf, len, req_p);
}

static burst_status_t hyb_irecv(struct burst_tp *t, int peer, uint64_t tag, void *buf, size_t len,
                                struct burst_tp_req **req_p)
{
    return hyb_post(t, 0, peer, tag, buf, len, req_p);
}

static burst_status_t hyb_wait(struct burst_tp *t, struct burst_tp_req *r, int timeout_ms)
{
    (void)t;
    burst_status_t st = r->sub->ops->wait(r->sub, r->inner, timeout_ms);
    free(r);
    return st;
}

static void hyb_test(struct burst_tp *t, struct burst_tp_req *r, int *done)
{
    (void)t;
    const struct burst_tp_ops *o = r->sub->ops;
    *done = 0;
    if (o->size >= sizeof(struct burst_tp_ops) && o->test)
        o->test(r->sub, r->inner, done);
}

/* Abort both; the control channel hears it once (both subs would tell it; it is idempotent). */
static void hyb_abort(struct burst_tp *t, burst_status_t reason)
{
    struct hyb *h = (struct hyb *)t;
    for (int i = 0; i < 2; i++) {
        h->sub[i]->ctrl = h->base.ctrl;
        h->sub[i]->ops->abort(h->sub[i], reason);
    }
}

static void hyb_destroy(struct burst_tp *t)
{
    struct hyb *h = (struct hyb *)t;
    if (!h)
        return;
    for (int i = 0; i < 2; i++)
        h->sub[i]->ops->destroy(h->sub[i]);
    free(h->via);
    free(h);
}

static const struct burst_tp_ops hyb_ops = {
    .size = sizeof(struct burst_tp_ops),
    .name = "hybrid",
    .isend = hyb_isend,
    .irecv = hyb_irecv,
    .wait = hyb_wait,
    .abort = hyb_abort,
    .destroy = hyb_destroy,
    .test = hyb_test,
};

burst_status_t burst_tp_hybrid_create(struct burst_tp *local, struct burst_tp *net,
                                      const int *host_of, struct burst_tp **tp_p)
{
    static const char *who = "burst_tp_hybrid_create";
    if (!local || !net || !host_of || !tp_p)
        return burst_error(BURST_ERR_INTERNAL, "%s: NULL argument", who);
    if (local->rank != net->rank || local->size != net->size)
        return burst_error(BURST_ERR_INTERNAL,
                           "%s: sub-transports disagree (rank %d/%d, size %d/%d)", who, local->rank,
                           net->rank, local->size, net->size);
    struct hyb *h = calloc(1, sizeof(*h));
    unsigned char *via = calloc((size_t)local->size, 1);
    if (!h || !via) {
        free(h);
        free(via);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    }
    for (int r = 0; r < local->size; r++)
        via[r] = host_of[r] != host_of[local->rank];
    h->base.ops = &hyb_ops;
    h->base.rank = local->rank;
    h->base.size = local->size;
    h->base.ctrl = NULL;
    h->sub[0] = local;
    h->sub[1] = net;
    h->via = via;
    *tp_p = &h->base;
    return BURST_OK;
}
