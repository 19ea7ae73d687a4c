/*
 * transport/tp_peer.h - who is at the other end of a connection (private).
 *
 * The rendezvous service ties a rank's CLEANUP (the shm segment it may remove when the rank is
 * lost) to the process id the rank's HELLO gave. That id is a claim; burst_peer_holds checks it
 * against the kernel before the service trusts it:
 *
 *   AF_UNIX   SO_PEERCRED gives the connecting process's id: it must equal the claim.
 *   TCP       the connection's other socket, when it lives on this host (in this network
 *             namespace), is found in /proc/net/tcp or /proc/net/tcp6 by its address and port;
 *             the claimed process must hold that socket (an entry of /proc/<pid>/fd links to
 *             "socket:[inode]").
 *
 * A claim that cannot be checked (the peer on another host or in another network namespace,
 * /proc unreadable, the process of another user) is not verified. Linux only; elsewhere no
 * claim is verified.
 */
#ifndef BURST_TRANSPORT_TP_PEER_H
#define BURST_TRANSPORT_TP_PEER_H

#include <stdint.h>

/* 1 when process pid holds the other end of connected socket fd (see above), else 0. */
int burst_peer_holds(int fd, uint32_t pid);

#endif /* BURST_TRANSPORT_TP_PEER_H */
