/*
 * tools/probe_net.h - burstrun --probe's transports: the libfabric that rank processes would
 * load (its version and the providers that offer burst's endpoints: reliable datagram, tagged,
 * directed receive, as transport/tp_fabric.c asks), the network interfaces with their addresses,
 * and MPI (burstrun built with it, mpirun on PATH, the MPI library's version).
 *
 * libfabric is opened with dlopen here too (libfabric.so.1), as the library opens it, so that
 * the probe sees what a rank would.
 */
#ifndef BURST_TOOLS_PROBE_NET_H
#define BURST_TOOLS_PROBE_NET_H

#include <stdio.h>

/* The transports as text lines into f. */
void probe_net_text(FILE *f);

/* The same as one JSON object ({"libfabric": {...}, "interfaces": [...], "mpi": {...}}). */
void probe_net_json(FILE *f);

#endif /* BURST_TOOLS_PROBE_NET_H */
