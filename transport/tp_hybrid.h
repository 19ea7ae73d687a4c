/*
 * transport/tp_hybrid.h - one transport over two: a host-local one and a network one (private).
 *
 * A ring that spans several hosts with several ranks per host (the two-level ring of
 * ALGORITHM.md section 4) wants shared memory between ranks of one host and the network between
 * hosts. The hybrid transport owns two connected transports (in practice two libfabric endpoints,
 * shm and tcp / verbs / efa, each knowing only its own peers) and routes every operation by peer:
 * same host -> `local`, else -> `net`. Matching rules hold per (source, tag) because a peer is
 * always reached through the same sub-transport. wait() goes to the sub-transport that posted the
 * request; abort() and the control channel reach both.
 */
#ifndef BURST_TP_HYBRID_H
#define BURST_TP_HYBRID_H

#include "transport.h"

/*
 * Join `local` and `net` (both of the same rank and size) into one transport. host_of[r] (size
 * entries, copied) is the lowest rank on rank r's host: peers with host_of[peer] ==
 * host_of[rank] go through `local`. On success the hybrid owns both; on failure neither is
 * touched.
 */
burst_status_t burst_tp_hybrid_create(struct burst_tp *local, struct burst_tp *net,
                                      const int *host_of, struct burst_tp **tp_p);

#endif /* BURST_TP_HYBRID_H */
