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

struct burst_tp;
struct burst_tp_req;
struct burst_tp_dev;
struct burst_tp_share;

/*
 * Device copies, for transports that move device memory themselves (the in-process transport
 * between ranks whose buffers are in the memory of a device backend: cuda; between processes of
 * one host, the IPC layer over the process transports, with the ipc_ members below). A device-memory
 * backend provides the ops (runtime/backend.h, member devcopy); the ring engine hands them with
 * every device-resident send and receive (isend_dev / irecv_dev), and the transport calls them
 * instead of memcpy. Markers are opaque (cuda: events).
 *   mark     record the calling thread's device work queued so far (its writes of a send
 *            buffer, its reads of a receive buffer); *mark_p receives a marker.
 *   copy     queue a copy of len bytes src -> dst (device addresses of this process, possibly on
 *            two devices) ordered after both marks (a NULL mark: no such order), on a copy stream
 *            of its own so it runs beside the ranks' compute; *done_p receives the completion
 *            marker. Called by whichever side posts second. The engine also uses it between
 *            device memory and page-locked host memory (host_alloc) for pipelined staging
 *            (runtime/ring_xfer.h).
 *   wait     block the calling thread until a marker has completed.
 *   release  free a marker (NULL accepted); its device work may still be in flight.
 */
struct burst_tp_devops {
    burst_status_t (*mark)(void *be, void **mark_p);
    burst_status_t (*copy)(void *be, void *dst, const void *src, size_t len, void *after_a,
                           void *after_b, void **done_p);
    burst_status_t (*wait)(void *be, void *mark);
    void (*release)(void *be, void *mark);
    /*
     * Optional: device copies between processes of one host (cuda: CUDA IPC), for the process
     * transports' device path (transport/tp_ipc.h). NULL where the backend cannot share device
     * memory with another process; the ring then stages through host memory.
     *   ipc_export  sender: describe the device buffer at buf (any address inside an allocation)
     *               for another process of this host, in at most BURST_TP_IPC_DESC bytes written
     *               to desc, together with a marker of the calling thread's device work queued
     *               so far (its writes of buf); *mark_p: freed with release() once the receiver
     *               has acknowledged the copy (until then buf must stay untouched).
     *   ipc_import  receiver: queue a copy of len bytes from the memory desc describes into dst
     *               (a device address of this process), after desc's marker and after `after`
     *               (a mark() taken when the receive was posted: the receiver's reads of dst;
     *               taken then, not at the wait, so the copy overlaps the compute queued
     *               between); *done_p: a marker for ipc_test / ipc_finish. Mappings of other
     *               processes' memory are the backend's to cache and to close (when the exporter
     *               is gone or reused the address).
     *   ipc_test    *complete = 1 once the copy has finished, else 0; an error if it failed.
     *               Never blocks.
     *   ipc_finish  free a marker of ipc_import; called also for a copy given up on (timeout,
     *               peer failure), which may still be in flight.
     */
    burst_status_t (*ipc_export)(void *be, const void *buf, unsigned char *desc, void **mark_p);
    burst_status_t (*ipc_import)(void *be, void *dst, const unsigned char *desc, size_t len,
                                 void *after, void **done_p);
    burst_status_t (*ipc_test)(void *be, void *done, int *complete);
    void (*ipc_finish)(void *be, void *done);
    /*
     * Optional: device memory shared between two backends of one process (a vulkan rank's
     * buffers moved by a cuda rank's copy engine, on one GPU or on two that reach each other
     * peer to peer). An exporter (vulkan)
     * allocates its memory exportable and has share_export / share_live, and copy == NULL: its
     * ops are synchronous, so its marks are passed when it posts (mark may give NULL) and the
     * transport waits for them on the host. A copier (cuda) has copy and share_import. When the
     * two sides of a message are an exporter and a copier on the same device (share_device: the
     * plan compares the UUIDs in its handshake, runtime/plan.c), or on a device the copier
     * reaches (share_reach, asked in the handshake's second round), the message goes device to
     * device through the copier's copy(), whichever side posts second (transport/tp_local.c).
     *   share_device  the 16-byte UUID of the instance's device (cuda: cudaDeviceProp.uuid;
     *                 vulkan: VkPhysicalDeviceIDProperties.deviceUUID, the same bytes for the
     *                 same GPU); an error when its memory cannot be shared.
     *   share_export  exporter: describe the allocation holding the len bytes at buf (any
     *                 address inside one of its allocations): *out; with want_fd, out->fd is a
     *                 new file descriptor (VK_KHR_external_memory_fd, opaque) that the caller
     *                 owns, else -1. An error when buf is not such memory.
     *   share_live    exporter: whether allocation `id` (of any instance) still exists; an
     *                 importer drops the mappings of those that do not.
     *   share_import  copier: an address *ptr_p that its copy() can use for the len bytes at
     *                 buf, memory of `owner` (another backend instance of this process: an
     *                 exporter). Mappings are the copier's to cache (by share_export's id) and
     *                 to drop (share_live); an error when the memory cannot be imported. The
     *                 memory is on the owner's device (its share_device), which may be another
     *                 device than the copier's where share_reach said yes.
     * A backend is a copier or an exporter, never both (the transport takes the side with
     * copy() as the copier, and the plan asks only the copier's share_reach).
     *   share_reach   copier, optional: 1 when it can import memory of the device with this UUID
     *                 (not its own) and copy between it and its own device's memory peer to peer
     *                 (cuda: a CUDA device of that UUID that its device can access), else 0.
     *                 NULL: its own device only.
     */
    burst_status_t (*share_device)(void *be, unsigned char uuid[16]);
    burst_status_t (*share_export)(void *be, const void *buf, size_t len, int want_fd,
                                   struct burst_tp_share *out);
    int (*share_live)(uint64_t id);
    burst_status_t (*share_import)(void *be, const struct burst_tp_dev *owner, const void *buf,
                                   size_t len, void **ptr_p);
    int (*share_reach)(void *be, const unsigned char uuid[16]);
};
/* An exporter's allocation, as share_export describes it (above). */
struct burst_tp_share {
    uint64_t id;     /* unique in the process over its life (never reused) */
    uint64_t size;   /* bytes of the allocation as allocated (its memory requirements) */
    uint64_t offset; /* of buf in it */
    int dedicated;   /* a dedicated allocation (importers must say so) */
    int fd;          /* want_fd: a new descriptor the caller owns; else -1 */
};
/* Room for an ipc_export descriptor (cuda: two 64-byte IPC handles, offset, process id). */
#define BURST_TP_IPC_DESC 192
struct burst_tp_dev {
    const struct burst_tp_devops *ops;
    void *be; /* the backend instance of the posting rank */
};

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
    /* Optional: the same on device memory (struct burst_tp_dev above). Both sides of a message
     * must use them; NULL when the transport moves host memory only. wait() covers both. */
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
