/*
 * transport/tp_fabric.h - the libfabric transport (private; built when libfabric is found).
 *
 * Reliable-datagram endpoints (FI_EP_RDM) with tagged messages. Providers by burst name:
 *   "shm"   shm                    (processes of one host)
 *   "tcp"   tcp;ofi_rxm            (anywhere)
 *   "verbs" verbs;ofi_rxm          (InfiniBand / RoCE)
 *   "efa"   efa                    (AWS)
 * Creating a transport takes two steps because peers' addresses come from the bootstrap:
 *   burst_fab_open()      opens fabric, domain, endpoint, completion queue, address vector;
 *   burst_fab_address()   gives this endpoint's address to publish;
 *   burst_fab_connect()   inserts every rank's address and returns the struct burst_tp.
 */
#ifndef BURST_TP_FABRIC_H
#define BURST_TP_FABRIC_H

#include <stddef.h>

#include "transport.h"

struct burst_fab;

/* Nonzero when `provider` (a burst name above) is usable on this machine. */
int burst_fab_available(const char *provider);

/* Open an endpoint. iface may be NULL (provider default). Errors name the provider and carry the
 * libfabric message (fi_strerror). */
burst_status_t burst_fab_open(const char *provider, const char *iface, int rank, int size,
                              struct burst_fab **fab_p);

/* Copy this endpoint's address into buf (capacity *len_p); *len_p receives its length. */
burst_status_t burst_fab_address(struct burst_fab *fab, void *buf, size_t *len_p);

/* Insert the addresses of every rank (addrs[r], lens[r]; r = 0..size-1) and become a transport.
 * Addresses come from peers: each is copied into a zero-padded buffer before libfabric reads it
 * (an address of 512 bytes or more is refused with BURST_ERR_TRANSPORT naming the rank).
 * An empty address (NULL or length 0) leaves that peer unreachable through this endpoint (the
 * hybrid transport reaches it through another); this rank's own address must be present.
 * On success the transport owns fab; on failure fab is still the caller's. */
burst_status_t burst_fab_connect(struct burst_fab *fab, const void *const *addrs,
                                 const size_t *lens, struct burst_tp **tp_p);

/* Close an endpoint that was never connected; NULL accepted. */
void burst_fab_close(struct burst_fab *fab);

#endif /* BURST_TP_FABRIC_H */
