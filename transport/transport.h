/*
 * transport/transport.h - the transport interface under a communicator (private).
 *
 * A transport moves tagged messages between the ranks of one ring. The ring engine only ever
 * posts non-blocking sends and receives and waits for them later, so a transport whose
 * operations progress in the background (RDMA, a copy engine) overlaps communication with
 * compute without any engine change; a transport that copies synchronously simply completes
 * operations early.
 *
 * Rules for implementations:
 *   - isend/irecv must not block on the peer; they may complete the operation immediately.
 *   - Messages between one (source, destination) pair with equal tags match in posting order.
 *     A receive whose buffer length differs from the matched message's fails with
 *     BURST_ERR_TRANSPORT (nothing is written past the buffer).
 *   - The send buffer must stay untouched, and the receive buffer unread, until wait() returns.
 *   - wait() blocks at most timeout_ms, returns BURST_ERR_TIMEOUT past it and
 *     BURST_ERR_PEER_FAILED when the ring was aborted; it releases the request in every case.
 *   - abort() is thread-safe and wakes every waiter of every rank it can reach.
 */
#ifndef BURST_TRANSPORT_H
#define BURST_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "burst/status.h"

#include "tp_devops.h"

struct burst_tp;
struct burst_tp_req;

struct burst_tp_ops {
    size_t size;      /* sizeof(struct burst_tp_ops) */
    const char *name; /* "local" */
    burst_status_t (*isend)(struct burst_tp *tp, int peer, uint64_t tag, const void *buf,
                            size_t len, struct burst_tp_req **req_p);
    burst_status_t (*irecv)(struct burst_tp *tp, int peer, uint64_t tag, void *buf, size_t len,
                            struct burst_tp_req **req_p);
    burst_status_t (*wait)(struct burst_tp *tp, struct burst_tp_req *req, int timeout_ms);
    void (*abort)(struct burst_tp *tp, burst_status_t reason);
    void (*destroy)(struct burst_tp *tp);
    /* Optional: the same on device memory (struct burst_tp_dev, tp_devops.h). Both sides of a
     * message must use them; NULL when the transport moves host memory only. wait() covers
     * both. */
    burst_status_t (*isend_dev)(struct burst_tp *tp, int peer, uint64_t tag, const void *buf,
                                size_t len, const struct burst_tp_dev *dev,
                                struct burst_tp_req **req_p);
    burst_status_t (*irecv_dev)(struct burst_tp *tp, int peer, uint64_t tag, void *buf, size_t len,
                                const struct burst_tp_dev *dev, struct burst_tp_req **req_p);
    /* Optional: do now what a posted request needs from its peer's post only, waiting at most
     * timeout_ms for it, so that the transfer runs while the caller computes (the IPC layer:
     * a device receive takes its descriptor and queues its copy). Never fails: wait() reports
     * what went wrong. Called after the caller's device work is queued, before it blocks on it;
     * safe because every message of a ring step is posted at the start of the step. */
    void (*start)(struct burst_tp *tp, struct burst_tp_req *req, int timeout_ms);
    /* Optional: *done = 1 when wait() on req would return at once (completed or failed); drives
     * progress; never blocks, never releases req. Lets a caller spin on a message it expects
     * within microseconds instead of sleeping in wait() (the IPC layer's small messages). */
    void (*test)(struct burst_tp *tp, struct burst_tp_req *req, int *done);
};

/*
 * Optional out-of-band control channel (the bootstrap's connection to the launcher), attached by
 * the communicator. A transport whose wait() blocks polls it so that a peer's death reported out
 * of band ends the wait at once instead of at the timeout, and tells it about local aborts so
 * that the launcher can stop every other rank.
 */
struct burst_tp_ctrl {
    /* BURST_OK, or BURST_ERR_PEER_FAILED with a message naming the failed rank. Non-blocking. */
    burst_status_t (*poll)(struct burst_tp_ctrl *ctrl);
    /* This rank is aborting the ring with `reason`. Non-blocking, idempotent. */
    void (*abort)(struct burst_tp_ctrl *ctrl, burst_status_t reason);
};

/* Base of every transport instance (implementations embed it first). */
struct burst_tp {
    const struct burst_tp_ops *ops;
    int rank;
    int size;
    struct burst_tp_ctrl *ctrl; /* may be NULL */
};

/* The in-process transport: ranks are threads joined by a burst_local_world. */
struct burst_local_world;
burst_status_t burst_tp_local_create(struct burst_local_world *world, int rank, int size,
                                     struct burst_tp **tp_p);

#endif /* BURST_TRANSPORT_H */
