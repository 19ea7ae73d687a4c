/*
 * runtime/ring_xfer.h - the ring engine's transfers, staged through host memory when the
 * backend computes on memory the host cannot address (private).
 *
 * Transports move host memory (memcpy between threads, libfabric between processes). When the
 * context's backend sets device_memory (cuda: cudaMalloc'd scratch), a send first copies the
 * device buffer into a page-locked staging buffer and sends that; a receive lands in a staging
 * buffer and wait() copies it to its device destination. Otherwise these are the communicator's
 * own calls. Staging buffers come from a per-plan pool (ops->host_alloc), reused across steps and
 * calls, freed with the plan.
 *
 * Pipelined staging (opt-in: BURST_STAGE_CHUNK_BYTES=C, at least 256, alike on every rank: the
 * handshake compares it): a message that does not go device to device and holds at least two
 * chunks of C bytes (at most BURST_XFER_CHUNKS chunks: larger ones when needed) travels as one
 * message per chunk (the chunk's index in bits 18-23 of the tag's step field), also on a rank
 * that does not stage (host memory: chunks sent from and received into place), so that a ring
 * of mixed backends agrees. A staging rank with device copies (backend.h devcopy, which cuda
 * queues on a copy stream):
 *   send     post queues every chunk's device-to-host copy (after the device work queued so
 *            far: the writes of the block) and returns; at the next start() or wait() of any of
 *            the plan's transfers (the engine starts them right after queueing the step's
 *            kernel) the host waits for the copies in turn and puts each chunk on the wire as
 *            its copy is done, so the copies, the wire and the step's compute overlap;
 *   receive  post receives every chunk into the staging buffer; wait() takes the chunks in
 *            order as they arrive and queues each one's host-to-device copy (after the device
 *            work queued before the post: the last reads of the destination), so the copies
 *            overlap the wire; it returns once every copy is done. (start() does not wait for
 *            chunks: it would hold the host on the wire inside the step's compute.)
 * Without device copies each chunk is copied synchronously (send: at post, each chunk going on
 * the wire before the next is copied; receive: in wait(), as it arrives). Off by default: on the 2 x H200
 * machine, where libfabric shm and tcp move about 3 GB/s, the wire dominates and chunks gained
 * 1-2 % over shm and lost 10-25 % over tcp (docs/BENCHMARKS.md); it is meant for networks about
 * as fast as the host-device copies (RDMA).
 *
 * Device-resident ring (plan->direct): when every rank of the plan runs the same device-memory
 * backend with device copies (backend.h, devcopy) and the transport moves device memory itself
 * (the in-process transport: ranks are threads, on one GPU or several; the IPC layer between
 * rank processes of one host, transport/tp_ipc.h), blocks go device to device through
 * burst_comm_isend_dev / _irecv_dev: no staging, no host hop. The handshake decides it for all
 * ranks at once (runtime/plan.c, field device_direct); per message, burst_comm_device_peer says
 * whether the peer is reachable that way (on this host), the same on both sides, and messages
 * to other peers are staged. BURST_DEVICE_DIRECT=0 forces staging.
 *
 * Shared memory between two backends (plan->shared): ranks of one process on different backends
 * whose devices are the same GPU, or two GPUs that the copier reaches peer to peer, one a
 * copier (cuda) and the other an exporter (vulkan, whose
 * scratch is exportable device memory: backend.h alloc_scratch), send and receive with their own
 * device ops too, and the copier's copy engine moves the blocks device to device on its mapping
 * of the exporter's memory (transport.h, share_*; transport/tp_local.c). The handshake compares
 * every rank's device UUID and roles (runtime/plan.c, field device_share) and, where they differ,
 * asks the copiers (share_reach); the pair decides alike on both sides, other messages of the
 * same rank are staged.
 *
 * Host-addressable memory that other processes cannot read and the CPU reads slowly (vulkan
 * buffers in a GPU's BAR: backend.h, stage_transfers) is staged the same way.
 */
#ifndef BURST_RUNTIME_RING_XFER_H
#define BURST_RUNTIME_RING_XFER_H

#include "plan_internal.h"

#define BURST_XFER_CHUNKS 64

/* One posted transfer. Zero-initialise; wait() returns it to that state. */
struct burst_xfer {
    struct burst_tp_req *req;
    int stage; /* staging buffer of the plan's pool, or -1 (0 when zero-initialised: see used) */
    int used;  /* a staging buffer is held */
    void *dev; /* receive: where the staged bytes go after the wait */
    size_t len;
    /* pipelined staging (above): chunks of `chunk` bytes (the last one shorter) */
    int nchunks; /* 0: not pipelined */
    int send;    /* a send (else a receive) */
    int done;    /* chunks sent (send) or whose host-to-device copy is queued (receive) */
    int peer;
    uint64_t tag;
    size_t chunk;
    burst_status_t st; /* first failure of the chunks */
    void *mark;        /* receive: the device work queued before the post */
    struct burst_tp_req *creq[BURST_XFER_CHUNKS];
    void *copy[BURST_XFER_CHUNKS]; /* each chunk's device copy marker */
    struct burst_xfer *next_send;  /* the plan's sends with chunks still to put on the wire */
};

burst_status_t burst_xfer_isend(struct burst_plan *plan, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_xfer *x);
burst_status_t burst_xfer_irecv(struct burst_plan *plan, int peer, uint64_t tag, void *buf,
                                size_t len, struct burst_xfer *x);
/* Let a posted receive progress while the caller computes (burst_comm_start): call after the
 * step's device work is queued, before waiting for it. Harmless on any transfer. */
void burst_xfer_start(struct burst_plan *plan, struct burst_xfer *x);
/* Wait (communicator timeout), copy a staged receive to its destination, release. Harmless on
 * a transfer never posted. Returns the first failure. */
burst_status_t burst_xfer_wait(struct burst_plan *plan, struct burst_xfer *x);

/* Does this plan stage its transfers through host buffers? (device memory without the direct
 * path; or memory the transports should not touch, backend.h stage_transfers) Decided once,
 * after the handshake: plan->staged. */
int burst_xfer_staged(const struct burst_plan *plan);

/* The context's BURST_STAGE_CHUNK_BYTES (at least 256), or 0: the plan's stage_chunk, which the
 * handshake compares (both sides of a message must chunk it alike). */
size_t burst_xfer_chunk_env(const struct burst_context *ctx);

/* Free the plan's staging pool (burst_plan_destroy). */
void burst_xfer_pool_free(struct burst_plan *plan);

#endif /* BURST_RUNTIME_RING_XFER_H */
