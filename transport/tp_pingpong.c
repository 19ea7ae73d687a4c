/*
 * transport/tp_pingpong.c - burst_comm_pingpong (burst/comm.h): round trips between two ranks
 * of a communicator over its transport, the measurement behind burstrun --pingpong.
 *
 * The lower rank sends `bytes` and waits for them back; the higher one receives and sends its
 * buffer back. Messages are tagged (the communicator's sequence, BURST_MSG_PING, the round
 * trip) and leave the sequence of the ring's collective calls as it is, so the other ranks need
 * not take part. BURST_FAULT's message faults do not apply to them.
 */
#include <time.h>

#include "error.h"
#include "tp_comm.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One round trip: send then receive (first), or receive then send. */
static burst_status_t round_trip(struct burst_comm *comm, int peer, int first, uint64_t tag,
                                 void *buf, size_t bytes)
{
    struct burst_tp_req *r = NULL;
    burst_status_t st;
    for (int half = 0; half < 2; half++) {
        int send = (half == 0) == first;
        st = send ? burst_comm_isend(comm, peer, tag, buf, bytes, &r)
                  : burst_comm_irecv(comm, peer, tag, buf, bytes, &r);
        if (st == BURST_OK)
            st = burst_comm_wait(comm, &r);
        if (st != BURST_OK)
            return st;
    }
    return BURST_OK;
}

burst_status_t burst_comm_pingpong(struct burst_comm *comm, int peer, void *buf, size_t bytes,
                                   int iters, double *seconds_p)
{
    static const char *who = "burst_comm_pingpong";
    burst_error_clear();
    if (!comm)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: comm is NULL", who);
    if (!seconds_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: seconds_p is NULL", who);
    if (peer < 0 || peer >= comm->size || peer == comm->rank)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: peer = %d is not another rank of the ring (rank %d of %d)", who,
                           peer, comm->rank, comm->size);
    if (!buf && bytes)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: buf is NULL for bytes = %zu", who, bytes);
    if (iters < 1 || iters > BURST_PINGPONG_MAX_ITERS)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: iters = %d is not in 1..%d", who, iters,
                           BURST_PINGPONG_MAX_ITERS);
    burst_status_t st = burst_comm_check(comm);
    if (st != BURST_OK)
        return st;
    int first = comm->rank < peer;
    double t0 = now_s();
    for (int i = 0; i < iters && st == BURST_OK; i++)
        st = round_trip(comm, peer, first, burst_tag(comm->seq, BURST_MSG_PING, i), buf, bytes);
    *seconds_p = now_s() - t0;
    return st;
}
