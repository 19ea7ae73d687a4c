/*
 * transport/tp_oob_boot.c - the bootstrap client over the program's own allgather (tp_bootstrap.h:
 * burst_boot_join_oob), for bootstrap "mpi": burst_comm_params.oob_allgather, typically over the
 * program's MPI communicator (burstrun's: tools/launch_mpi.c). The library itself calls no MPI.
 *
 * The callback gathers equal lengths, the bootstrap's rounds have one length per rank, so a round
 * takes two calls: a header of every rank's {rank, size, length}, then every blob padded to the
 * longest. The header also checks that the callback's rank order and size are the ring's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tp_bootstrap.h"

#define OOB_HDR 12 /* rank u32, size u32, length u32 (big-endian) */
/* the most bytes one padded round may gather (size * longest blob) */
#define OOB_MAX_ROUND ((size_t)1 << 30)

struct oob_boot {
    struct burst_boot base;    /* first: ops */
    struct burst_tp_ctrl ctrl; /* burst_boot_ctrl() hands out its address */
    burst_oob_allgather_fn fn;
    void *fn_ctx;
    int rank, size, timeout_ms;
    int calls;  /* callback calls so far (named in errors) */
    int failed; /* a call failed: never call again */
};

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* One call of the program's allgather; an error names the call. */
static burst_status_t oob_call(struct oob_boot *b, const void *send, void *recv, size_t len)
{
    static const char *who = "burst_comm_create";
    if (b->failed)
        return burst_error(BURST_ERR_COMM_FAILED,
                           "%s: rank %d: bootstrap \"mpi\": an earlier call of "
                           "params->oob_allgather failed",
                           who, b->rank);
    int call = ++b->calls;
    burst_status_t st = b->fn(b->fn_ctx, send, recv, len, b->timeout_ms);
    if (st == BURST_OK)
        return BURST_OK;
    b->failed = 1;
    if (st == BURST_ERR_TIMEOUT)
        return burst_error(BURST_ERR_TIMEOUT,
                           "%s: rank %d: bootstrap \"mpi\": params->oob_allgather (call %d, %zu "
                           "bytes) did not complete within %d ms (a rank is missing or stuck)",
                           who, b->rank, call, len, b->timeout_ms);
    return burst_error(BURST_ERR_COMM_FAILED,
                       "%s: rank %d: bootstrap \"mpi\": params->oob_allgather (call %d, %zu "
                       "bytes) failed: %s (%d)",
                       who, b->rank, call, len, burst_status_str(st), (int)st);
}

static burst_status_t oob_allgather(struct burst_boot *base, const void *mine, size_t len,
                                    unsigned char **buf_p, const unsigned char **blob, size_t *lens)
{
    static const char *who = "burst_comm_create";
    struct oob_boot *b = (struct oob_boot *)base;
    if (len > BURST_BOOT_MAX_BLOB)
        return burst_error(BURST_ERR_INTERNAL, "%s: bootstrap blob of %zu bytes", who, len);
    size_t g = (size_t)b->size;
    unsigned char hdr[OOB_HDR];
    put32(hdr, (uint32_t)b->rank);
    put32(hdr + 4, (uint32_t)b->size);
    put32(hdr + 8, (uint32_t)len);
    unsigned char *all = malloc(g * OOB_HDR);
    if (!all)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory for %d ranks", who, b->size);
    /* Call 1: every rank's header. */
    burst_status_t st = oob_call(b, hdr, all, OOB_HDR);
    size_t longest = 0;
    for (size_t r = 0; st == BURST_OK && r < g; r++) {
        const unsigned char *h = all + r * OOB_HDR;
        uint32_t hr = get32(h), hs = get32(h + 4), hl = get32(h + 8);
        if (hr != r || hs != (uint32_t)b->size) {
            b->failed = 1;
            st = burst_error(BURST_ERR_INVALID_ARG,
                             "%s: rank %d: bootstrap \"mpi\": params->oob_allgather's place %zu "
                             "holds rank %u of a ring of %u, not rank %zu of %d (every rank's "
                             "params->rank and params->size must be its rank and size in the "
                             "program's communicator)",
                             who, b->rank, r, hr, hs, r, b->size);
        } else if (hl > BURST_BOOT_MAX_BLOB) {
            b->failed = 1;
            st = burst_error(BURST_ERR_TRANSPORT,
                             "%s: rank %d: rank %zu announced a bootstrap blob of %u bytes (at "
                             "most %d)",
                             who, b->rank, r, hl, BURST_BOOT_MAX_BLOB);
        } else {
            lens[r] = hl;
            longest = hl > longest ? hl : longest;
        }
    }
    if (st == BURST_OK && longest && g > OOB_MAX_ROUND / longest) {
        b->failed = 1;
        st = burst_error(BURST_ERR_UNSUPPORTED,
                         "%s: rank %d: bootstrap \"mpi\": %d ranks' blobs of %zu bytes exceed "
                         "%zu bytes in one exchange",
                         who, b->rank, b->size, longest, OOB_MAX_ROUND);
    }
    free(all);
    if (st != BURST_OK)
        return st;
    /* Call 2: the blobs, each padded to the longest, in rank order. */
    size_t stride = longest ? longest : 1;
    unsigned char *pad = calloc(1, stride);
    unsigned char *buf = malloc(g * stride);
    if (!pad || !buf) {
        free(pad);
        free(buf);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%zu bytes)", who, g * stride);
    }
    if (len)
        memcpy(pad, mine, len);
    st = oob_call(b, pad, buf, stride);
    free(pad);
    if (st != BURST_OK) {
        free(buf);
        return st;
    }
    for (size_t r = 0; r < g; r++)
        blob[r] = buf + r * stride;
    *buf_p = buf;
    return BURST_OK;
}

static burst_status_t oob_cleanup(struct burst_boot *base, const char *name)
{
    return BURST_OK; /* no launcher-side service to remove /dev/shm entries */
}

static struct burst_tp_ctrl *oob_ctrl(struct burst_boot *base)
{
    return &((struct oob_boot *)base)->ctrl;
}

static burst_status_t oob_poll(struct burst_tp_ctrl *ctrl)
{
    return BURST_OK; /* the program's allgather reports no peer death; its launcher ends the job */
}

static void oob_abort(struct burst_tp_ctrl *ctrl, burst_status_t reason)
{
}

static void oob_leave(struct burst_boot *base, int bye)
{
    free(base); /* no exchange: the callback is never called after burst_comm_create */
}

static const struct burst_boot_ops oob_boot_ops = {
    .name = "mpi",
    .allgather = oob_allgather,
    .cleanup = oob_cleanup,
    .ctrl = oob_ctrl,
    .leave = oob_leave,
};

burst_status_t burst_boot_join_oob(const char *who, int rank, int size, int timeout_ms,
                                   burst_oob_allgather_fn fn, void *fn_ctx,
                                   struct burst_boot **boot_p)
{
    struct oob_boot *b = calloc(1, sizeof(*b));
    if (!b)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    b->base.ops = &oob_boot_ops;
    b->ctrl.poll = oob_poll;
    b->ctrl.abort = oob_abort;
    b->fn = fn;
    b->fn_ctx = fn_ctx;
    b->rank = rank;
    b->size = size;
    b->timeout_ms = timeout_ms;
    *boot_p = &b->base;
    return BURST_OK;
}
