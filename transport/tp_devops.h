/*
 * transport/tp_devops.h - what a device backend gives the transports so they can move its
 * memory (private): device copies between ranks of one process, the IPC members between rank
 * processes of one host, and the sharing members between two backends of one process. A
 * backend points its ops table at one of these (runtime/backend.h, member devcopy); the
 * transports (transport.h, isend_dev / irecv_dev) call it. Neither side needs the other's
 * header for it.
 */
#ifndef BURST_TP_DEVOPS_H
#define BURST_TP_DEVOPS_H

#include <stddef.h>
#include <stdint.h>

#include "burst/status.h"

struct burst_tp_dev;
struct burst_tp_share;

/*
 * Device copies, for transports that move device memory themselves (the in-process transport
 * between ranks whose buffers are in the memory of a device backend: cuda; between processes of
 * one host, the IPC layer over the process transports, with the ipc_ members below). A
 * device-memory backend provides the ops (runtime/backend.h, member devcopy); the ring engine
 * hands them with every device-resident send and receive (isend_dev / irecv_dev), and the
 * transport calls them instead of memcpy. Markers are opaque (cuda: events).
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

#endif /* BURST_TP_DEVOPS_H */
