/*
 * transport/tp_comm.c - communicators: transport choice, traffic counting, timeouts, abort,
 * and the ring allgather used by the plan handshake.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context_internal.h"
#include "error.h"
#include "tp_comm.h"

#define DEFAULT_TIMEOUT_MS 120000

struct burst_comm_params burst_comm_params_default(void)
{
    struct burst_comm_params p = {
        .api_version = BURST_API_VERSION,
        .transport = "local",
        .rank = 0,
        .size = 1,
        .world = NULL,
        .timeout_ms = 0,
    };
    return p;
}

static int env_timeout_ms(void)
{
    const char *s = getenv("BURST_TIMEOUT_MS");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v > 0 && v <= 86400000L)
            return (int)v;
    }
    return DEFAULT_TIMEOUT_MS;
}

burst_status_t burst_comm_create(const struct burst_comm_params *params,
                                 struct burst_comm **comm_p)
{
    static const char *who = "burst_comm_create";
    burst_error_clear();
    if (!params)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params is NULL", who);
    if (!comm_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: comm_p is NULL", who);
    burst_status_t st = burst_check_api_version(who, params->api_version);
    if (st != BURST_OK)
        return st;
    if (params->size < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params->size = %d must be >= 1", who,
                           params->size);
    if (params->rank < 0 || params->rank >= params->size)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params->rank = %d is not in 0..%d", who,
                           params->rank, params->size - 1);
    if (params->timeout_ms < 0)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params->timeout_ms = %d must be >= 0", who,
                           params->timeout_ms);
    const char *name = params->transport ? params->transport : "local";
    if (strcmp(name, "local") != 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->transport = \"%s\" is not a transport of this build "
                           "(have: local)", who, name);
    if (!params->world)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->world is NULL (transport \"local\" needs the world from "
                           "burst_local_world_create)", who);
    struct burst_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    st = burst_tp_local_create(params->world, params->rank, params->size, &c->tp);
    if (st != BURST_OK) {
        free(c);
        return st;
    }
    c->rank = params->rank;
    c->size = params->size;
    c->timeout_ms = params->timeout_ms ? params->timeout_ms : env_timeout_ms();
    atomic_init(&c->failed, 0);
    *comm_p = c;
    return BURST_OK;
}

void burst_comm_destroy(struct burst_comm *comm)
{
    if (!comm)
        return;
    comm->tp->ops->destroy(comm->tp);
    free(comm);
}

int burst_comm_rank(const struct burst_comm *comm)
{
    return comm ? comm->rank : -1;
}

int burst_comm_size(const struct burst_comm *comm)
{
    return comm ? comm->size : -1;
}

const char *burst_comm_transport(const struct burst_comm *comm)
{
    return comm ? comm->tp->ops->name : "";
}

void burst_comm_abort(struct burst_comm *comm, burst_status_t reason)
{
    if (!comm)
        return;
    atomic_store(&comm->failed, 1);
    comm->tp->ops->abort(comm->tp, reason);
}

burst_status_t burst_comm_check(struct burst_comm *comm)
{
    if (atomic_load(&comm->failed))
        return burst_error(BURST_ERR_COMM_FAILED,
                           "rank %d: the communicator was aborted by an earlier failure; destroy "
                           "it and create a new one", comm->rank);
    return BURST_OK;
}

static burst_status_t fail(struct burst_comm *comm, burst_status_t st)
{
    /* Keep the message of the failure; make peers stop waiting for this rank. */
    atomic_store(&comm->failed, 1);
    comm->tp->ops->abort(comm->tp, st);
    return st;
}

burst_status_t burst_comm_isend(struct burst_comm *comm, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_tp_req **req_p)
{
    burst_status_t st = comm->tp->ops->isend(comm->tp, peer, tag, buf, len, req_p);
    if (st != BURST_OK)
        return fail(comm, st);
    if (comm->count) {
        comm->count->bytes_sent += len;
        comm->count->msgs_sent++;
    }
    return BURST_OK;
}

burst_status_t burst_comm_irecv(struct burst_comm *comm, int peer, uint64_t tag, void *buf,
                                size_t len, struct burst_tp_req **req_p)
{
    burst_status_t st = comm->tp->ops->irecv(comm->tp, peer, tag, buf, len, req_p);
    if (st != BURST_OK)
        return fail(comm, st);
    if (comm->count) {
        comm->count->bytes_recv += len;
        comm->count->msgs_recv++;
    }
    return BURST_OK;
}

burst_status_t burst_comm_wait(struct burst_comm *comm, struct burst_tp_req **req_p)
{
    if (!*req_p)
        return BURST_OK;
    /* Once the communicator has failed, later waits of the same call only drain requests: keep
     * the message of the first failure, which is the one the call returns. */
    int failed_before = atomic_load(&comm->failed);
    char first[512];
    if (failed_before)
        snprintf(first, sizeof(first), "%s", burst_last_error());
    burst_status_t st = comm->tp->ops->wait(comm->tp, *req_p, comm->timeout_ms);
    *req_p = NULL;
    if (st == BURST_OK)
        return BURST_OK;
    if (failed_before) {
        burst_error(st, "%s", first);
        return st;
    }
    return fail(comm, st);
}

burst_status_t burst_comm_allgather(struct burst_comm *comm, uint64_t tag_base, const void *mine,
                                    void *all, size_t len)
{
    int g = comm->size, me = comm->rank;
    unsigned char *out = all;
    memcpy(out + (size_t)me * len, mine, len);
    /* Step s: forward the record of rank (me - s) to the right, receive (me - s - 1). */
    for (int s = 0; s < g - 1; s++) {
        int send_idx = ((me - s) % g + g) % g, recv_idx = ((me - s - 1) % g + g) % g;
        struct burst_tp_req *rs = NULL, *rr = NULL;
        burst_status_t st = burst_comm_irecv(comm, (me - 1 + g) % g, tag_base + (uint64_t)s,
                                             out + (size_t)recv_idx * len, len, &rr);
        if (st == BURST_OK)
            st = burst_comm_isend(comm, (me + 1) % g, tag_base + (uint64_t)s,
                                  out + (size_t)send_idx * len, len, &rs);
        burst_status_t st2 = burst_comm_wait(comm, &rr);
        burst_status_t st3 = burst_comm_wait(comm, &rs);
        if (st == BURST_OK)
            st = st2 != BURST_OK ? st2 : st3;
        if (st != BURST_OK)
            return st;
    }
    return BURST_OK;
}
