/*
 * transport/tp_ipc.h - device memory between processes of one host, over a process transport
 * (private).
 *
 * The libfabric transport moves host memory only (FI_HMEM_CUDA is absent from the libfabric
 * builds we meet). Rank processes of one host can still hand device blocks to each other
 * directly, GPU to GPU, the way the in-process transport does between threads: the IPC layer
 * wraps a connected transport (fabric or hybrid), passes its host messages through unchanged,
 * and adds isend_dev / irecv_dev for peers on the same host with the backend's ipc_ ops
 * (transport.h, struct burst_tp_devops; cuda: cudaIpcGetMemHandle + an interprocess event).
 *
 * One device message is two small host messages of the wrapped transport:
 *   sender    isend_dev: ipc_export(buf) -> descriptor; post the receive of the acknowledgement,
 *             send the descriptor (same tag as the message). wait: the acknowledgement, whose
 *             status it returns; then buf may be reused.
 *   receiver  irecv_dev: mark its device work so far (its reads of buf), post the receive of the
 *             descriptor. wait: the descriptor, a check of the length (a mismatch fails both
 *             sides with BURST_ERR_TRANSPORT), ipc_import (the copy runs on the receiver's copy
 *             stream after the sender's marker and the receiver's, so it overlaps the compute
 *             queued since the post), poll ipc_test until the copy is done, then acknowledge
 *             (tag with bit 31 set) with the status.
 * A receive completes without its sender's wait (the descriptor left at isend_dev); a send
 * completes only once its receiver has waited. Waits cannot form a cycle as long as each rank
 * waits the receives of a ring step before the sends whose receivers wait them first: the
 * ring engine does (runtime/ring_blocks.c, runtime/ring_bwd.c: receives, then sends).
 * Timeouts and aborts: every wait honours the caller's timeout and the control channel; an
 * abort wakes a receiver polling its copy. A receiver that gives up on a copy still sends the
 * acknowledgement with its error, so its sender fails at once instead of at the timeout.
 */
#ifndef BURST_TP_IPC_H
#define BURST_TP_IPC_H

#include "transport.h"

/*
 * Wrap `inner` (connected; rank and size are its own). host_of[r] (size entries, copied) is the
 * lowest rank on rank r's host: device messages go to and from peers with host_of[peer] ==
 * host_of[rank] only (other peers: BURST_ERR_INTERNAL; the engine stages those). The wrapper
 * keeps inner's name ("fabric", "hybrid"). On success it owns inner; on failure inner is
 * untouched.
 */
burst_status_t burst_tp_ipc_create(struct burst_tp *inner, const int *host_of,
                                   struct burst_tp **tp_p);

/* 1 when tp is an IPC wrapper and peer shares this rank's host (device messages allowed). */
int burst_tp_ipc_peer(const struct burst_tp *tp, int peer);

#endif /* BURST_TP_IPC_H */
