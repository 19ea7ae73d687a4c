/*
 * transport/tp_comm.h - the communicator as the ring engine sees it (private).
 *
 * Wraps one transport instance. Every message goes through burst_comm_isend / _irecv, which count
 * bytes and messages into comm->count (set by the engine per ring step) so that every transport
 * is counted the same way. Waits use the communicator's timeout; any transport failure aborts
 * the communicator so that peers stop waiting too.
 */
#ifndef BURST_TP_COMM_H
#define BURST_TP_COMM_H

#include <stdatomic.h>
#include <stdint.h>

#include "burst/comm.h"
#include "burst/plan.h"
#include "transport.h"

struct burst_comm {
    struct burst_tp *tp;
    int rank;
    int size;
    int timeout_ms;
    atomic_int failed;           /* nonzero once aborted */
    uint32_t seq;                /* collective calls issued; part of every tag */
    struct burst_traffic *count; /* where traffic is counted now, or NULL */
    /* transport "fabric" (zero / NULL otherwise): */
    struct burst_boot *boot; /* connection to the rendezvous: the control channel */
    char fabric[16];         /* provider chosen: "shm", "tcp", "verbs", "efa", or a hybrid
                                "shm+tcp" (shm inside hosts, the network between them) */
    int *host_of;            /* [size]: lowest rank on the same host as rank r */
    int nhosts;              /* distinct hosts in the ring */
    /* BURST_FAULT=duplicate: the extra copies sent (never received), released at destroy */
    struct burst_tp_req *dup_req[4];
    void *dup_buf[4];
    int ndup;
    /* Ranks started by torchrun or srun (tp_launch_env.h): every rank meets the others in one
     * last bootstrap round at destroy, and rank 0, which hosts the job's rendezvous (hosted),
     * stops it only then. */
    int launched;
    struct burst_rendezvous *hosted;
};

/* Every message of the ring passes burst_comm_isend: the transport-independent place where
 * BURST_FAULT's drop / truncate / duplicate / delay act (runtime/fault.h). */

/* Tag of a message: (collective call sequence, message kind, ring step). */
enum burst_msg_kind {
    BURST_MSG_HANDSHAKE = 1,
    BURST_MSG_KV = 2,     /* forward K/V block */
    BURST_MSG_BUNDLE = 3, /* backward read bundle */
    BURST_MSG_ACC = 4,    /* backward travelling accumulator */
    BURST_MSG_PING = 5,   /* burst_comm_pingpong (transport/tp_pingpong.c) */
    BURST_MSG_SINKS = 6,  /* backward: each rank's part of the sinks' gradient */
    BURST_MSG_CACHE = 7,  /* key/value cache: handshake, queries, partial results */
};
static inline uint64_t burst_tag(uint32_t seq, enum burst_msg_kind kind, int step)
{
    return ((uint64_t)seq << 32) | ((uint64_t)kind << 24) | (uint64_t)(uint32_t)step;
}

/* Provider names, in the bit order of the bootstrap's availability mask; the index of a name
 * among them, or -1. */
#define BURST_FAB_NAMES 4
extern const char *const burst_fab_names[BURST_FAB_NAMES]; /* shm, tcp, verbs, efa */
int burst_fab_index(const char *name);

/* Transport "fabric": join the ring through the bootstrap (rendezvous, or the program's
 * allgather p->oob_allgather when mpi != 0),
 * choose the provider(s) for `want` ("auto" or a provider name) and connect c->tp.
 * transport/tp_comm_fabric.c (builds with libfabric only). */
burst_status_t burst_comm_join_fabric(const struct burst_comm_params *p, const char *want, int mpi,
                                      struct burst_comm *c);

/* BURST_ERR_COMM_FAILED if the communicator was aborted, else BURST_OK. */
burst_status_t burst_comm_check(struct burst_comm *comm);

burst_status_t burst_comm_isend(struct burst_comm *comm, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_tp_req **req_p);
burst_status_t burst_comm_irecv(struct burst_comm *comm, int peer, uint64_t tag, void *buf,
                                size_t len, struct burst_tp_req **req_p);
/* Device-resident transfers (transport.h, struct burst_tp_dev): 1 when the transport moves
 * device memory itself, to some peers at least (the in-process transport: every peer; the IPC
 * layer over a process transport, transport/tp_ipc.h: peers on this host), so a device
 * backend's blocks need no host staging. burst_comm_device_peer says it for one peer (the same
 * answer on both sides); the _dev calls then replace isend / irecv for every message to and from
 * that peer. */
int burst_comm_moves_device(const struct burst_comm *comm);
int burst_comm_device_peer(const struct burst_comm *comm, int peer);
/* 1 when every rank is a thread of this process (the in-process transport). */
int burst_comm_in_process(const struct burst_comm *comm);
burst_status_t burst_comm_isend_dev(struct burst_comm *comm, int peer, uint64_t tag,
                                    const void *buf, size_t len, const struct burst_tp_dev *dev,
                                    struct burst_tp_req **req_p);
burst_status_t burst_comm_irecv_dev(struct burst_comm *comm, int peer, uint64_t tag, void *buf,
                                    size_t len, const struct burst_tp_dev *dev,
                                    struct burst_tp_req **req_p);
/* Let a posted request progress as far as its peer's post allows (transport.h, start), so that
 * it moves while the caller computes; harmless on any request (NULL too). wait() reports errors. */
void burst_comm_start(struct burst_comm *comm, struct burst_tp_req *req);
/* Wait with the communicator's timeout; *req_p is released and set to NULL. NULL req is OK. */
burst_status_t burst_comm_wait(struct burst_comm *comm, struct burst_tp_req **req_p);

/* Every rank contributes `len` bytes; all[r * len ...] receives rank r's. Ring algorithm,
 * size-1 steps. Collective. */
burst_status_t burst_comm_allgather(struct burst_comm *comm, uint64_t tag_base, const void *mine,
                                    void *all, size_t len);

#endif /* BURST_TP_COMM_H */
