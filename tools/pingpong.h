/*
 * tools/pingpong.h - burstrun --pingpong: round trips between two rank processes of this host
 * over the job's transport (burst_comm_pingpong), reported with fi_pingpong's columns:
 *
 *   bytes   #sent   #ack    total       time     MB/sec  usec/xfer Mxfers/sec
 *
 * one row per size (64 B to 4 MiB by factors of 4), printed by rank 0 as it finishes: #sent
 * round trips ("=" the same number acknowledged), total bytes moved both ways, their time,
 * MB/sec = total / time, usec/xfer = time / (2 #sent) (one way), Mxfers/sec its inverse.
 *
 * burstrun forks the two ranks (before any thread exists) with the variables of a
 * torchrun-style launch (RANK, WORLD_SIZE, BURST_RENDEZVOUS on a free loopback port, a random
 * BURST_JOB_KEY, BURST_FABRIC, BURST_IFACE): rank 0 hosts the rendezvous, both join with
 * burst_comm_create_env. A rank that fails stops the other (the rendezvous tells it; SIGKILL
 * after LAUNCH_GRACE_MS) and burstrun exits 3 naming it.
 */
#ifndef BURST_TOOLS_PINGPONG_H
#define BURST_TOOLS_PINGPONG_H

struct pingpong_opts {
    const char *fabric; /* shm | tcp | verbs | efa | auto */
    const char *iface;  /* NULL: default (127.0.0.1 for tcp) */
    int timeout_s;      /* 0: BURST_TIMEOUT_MS or the library's */
    int iters;          /* round trips per size; 0: 256 MiB / size, within 10..10000 */
    int json;           /* one JSON object (the metadata and "pingpong": [rows]) */
};

/* Run it; burstrun's exit status (0, or 3 when a rank failed). */
int pingpong_run(const struct pingpong_opts *po);

#endif /* BURST_TOOLS_PINGPONG_H */
