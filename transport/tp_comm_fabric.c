/*
 * transport/tp_comm_fabric.c - joining a ring of processes: the bootstrap rounds, host grouping,
 * the provider choice, and the libfabric transport(s) the communicator runs on.
 *
 * Round 1 (every rank's host record) groups ranks by host and picks the provider; round 2
 * exchanges endpoint addresses. On a ring spanning several hosts with several ranks on some host,
 * "auto" builds a hybrid transport (transport/tp_hybrid.h): shm between ranks of one host, the
 * network provider between hosts. Where ranks share a host, the IPC layer (transport/tp_ipc.h)
 * wraps the transport so that their device blocks go GPU to GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "fault.h"
#include "tp_bootstrap.h"
#include "tp_comm.h"
#include "tp_fabric.h"
#include "tp_hybrid.h"
#include "tp_ipc.h"

#define fab_names burst_fab_names
#define fab_index burst_fab_index
enum {
    FAB_NAMES = BURST_FAB_NAMES
};

/*
 * Round 1 of the bootstrap: who am I, where do I run, what do I ask for, what can I use.
 * Fixed 380 bytes: host[256] | boot_id[40] | netns[64] | fabric[16] (NUL-terminated strings,
 * NUL-padded) | avail u32 (big-endian; bit i = fab_names[i] usable on this machine).
 * Ranks share a host when host name, boot id and network namespace are equal: processes in
 * different network namespaces (containers, the tests' veth "hosts") talk over the network.
 */
enum {
    REC_HOST = 256,
    REC_BOOT = 40,
    REC_NS = 64,
    REC_ID = REC_HOST + REC_BOOT + REC_NS, /* the host identity: everything before the fabric */
    REC_FAB = 16,
    REC_LEN = REC_ID + REC_FAB + 4
};

static int rec_valid(const unsigned char *r, size_t len)
{
    return len == REC_LEN && memchr(r, 0, REC_HOST) && memchr(r + REC_HOST, 0, REC_BOOT) &&
           memchr(r + REC_HOST + REC_BOOT, 0, REC_NS) && memchr(r + REC_ID, 0, REC_FAB);
}

static uint32_t rec_avail(const unsigned char *r)
{
    const unsigned char *p = r + REC_ID + REC_FAB;
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Decide the provider from every rank's record (every rank computes the same). */
static burst_status_t choose_fabric(struct burst_comm *c, const unsigned char *const *rec,
                                    const char *who, int *hybrid)
{
    int g = c->size;
    const char *want = (const char *)rec[c->rank] + REC_ID;
    for (int r = 0; r < g; r++)
        if (strcmp((const char *)rec[r] + REC_ID, want) != 0)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: ranks disagree on the fabric: rank %d asks for \"%s\", rank "
                               "%d for \"%s\" (params->fabric / BURST_FABRIC)",
                               who, c->rank, want, r, (const char *)rec[r] + REC_ID);
    c->nhosts = 0;
    for (int r = 0; r < g; r++) {
        c->host_of[r] = r;
        for (int q = 0; q < r; q++)
            if (memcmp(rec[q], rec[r], REC_ID) == 0) {
                c->host_of[r] = q;
                break;
            }
        c->nhosts += c->host_of[r] == r;
    }
    uint32_t all = 0xffffffffu;
    for (int r = 0; r < g; r++)
        all &= rec_avail(rec[r]);
    int pick = -1;
    if (strcmp(want, "auto") == 0) {
        static const int order[] = {3, 2, 1}; /* efa, verbs, tcp */
        if (c->nhosts == 1 && (all & 1u))
            pick = 0;
        for (int i = 0; pick < 0 && i < 3; i++)
            if (all & (1u << order[i]))
                pick = order[i];
        if (pick < 0)
            return burst_error(BURST_ERR_UNSUPPORTED,
                               "%s: rank %d: fabric \"auto\": no provider is usable on every rank "
                               "(%d hosts; this rank has:%s%s%s%s)",
                               who, c->rank, c->nhosts, rec_avail(rec[c->rank]) & 1u ? " shm" : "",
                               rec_avail(rec[c->rank]) & 2u ? " tcp" : "",
                               rec_avail(rec[c->rank]) & 4u ? " verbs" : "",
                               rec_avail(rec[c->rank]) & 8u ? " efa" : "");
    } else {
        pick = fab_index(want);
        for (int r = 0; r < g; r++)
            if (!(rec_avail(rec[r]) & (1u << pick)))
                return burst_error(BURST_ERR_UNSUPPORTED,
                                   "%s: fabric \"%s\" is not usable on rank %d (host %s)", who,
                                   want, r, (const char *)rec[r]);
        if (pick == 0 && c->nhosts > 1)
            for (int r = 1; r < g; r++)
                if (c->host_of[r] != 0)
                    return burst_error(BURST_ERR_INVALID_ARG,
                                       "%s: fabric \"shm\" needs every rank on one host, but rank "
                                       "%d runs on %s and rank 0 on %s",
                                       who, r, (const char *)rec[r], (const char *)rec[0]);
    }
    snprintf(c->fabric, sizeof(c->fabric), "%s", fab_names[pick]);
    /* auto across hosts with ranks sharing a host: shm inside hosts, `pick` between them. */
    *hybrid = 0;
    if (strcmp(want, "auto") == 0 && c->nhosts > 1 && c->nhosts < g && pick != 0 && (all & 1u)) {
        *hybrid = 1;
        snprintf(c->fabric, sizeof(c->fabric), "shm+%s", fab_names[pick]);
    }
    return BURST_OK;
}

/* shm's segment "fi_shm://<name>" is /dev/shm/<name> (into name[BURST_BOOT_MAX_NAME + 1]):
 * the launcher removes it if we die before it is unlinked (unlink_shm_segment). */
static burst_status_t register_shm_segment(struct burst_comm *c, const char *prov,
                                           const unsigned char *addr, size_t alen, char *name)
{
    if (strcmp(prov, "shm") != 0 || alen <= 9 || alen >= 9 + BURST_BOOT_MAX_NAME ||
        memcmp(addr, "fi_shm://", 9) != 0)
        return BURST_OK;
    memcpy(name, addr + 9, alen - 9);
    name[alen - 9] = '\0';
    return burst_boot_cleanup(c->boot, name);
}

/* Remove this rank's own segment name (no-op when name is empty or already gone). */
static void remove_shm_segment(const char *name)
{
    char path[BURST_BOOT_MAX_NAME + 16];
    if (!name[0])
        return;
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    unlink(path);
}

/* Once every rank has connected (inserted every address, which maps every peer's segment), the
 * name of this rank's segment is no longer needed: unlink it, so that no exit path (a SIGKILL,
 * a dead launcher) leaves it in /dev/shm. The mappings stay valid. */
static burst_status_t unlink_shm_segment(struct burst_comm *c, const char *name)
{
    if (!name[0])
        return BURST_OK;
    unsigned char one = 1, *buf = NULL;
    const unsigned char **blob = calloc((size_t)c->size, sizeof(*blob));
    size_t *lens = calloc((size_t)c->size, sizeof(*lens));
    burst_status_t st = BURST_ERR_NO_MEMORY;
    if (blob && lens) /* a barrier: every rank has connected */
        st = burst_boot_allgather(c->boot, &one, 1, &buf, blob, lens);
    if (st == BURST_OK)
        remove_shm_segment(name);
    else if (st == BURST_ERR_NO_MEMORY)
        burst_error(st, "burst_comm_create: out of memory for %d ranks", c->size);
    free(buf);
    free(blob);
    free(lens);
    return st;
}

/*
 * Hybrid round 2: split every rank's blob (u16 shm length | shm address | network address),
 * give the shm endpoint the addresses of this host's ranks and the network endpoint those of the
 * other hosts' ranks (each also its own), connect both and join them. On success fab[] is owned
 * by c->tp and set to NULL.
 */
static burst_status_t connect_hybrid(struct burst_comm *c, struct burst_fab *fab[2],
                                     const unsigned char *const *blob, const size_t *lens,
                                     const char *who)
{
    int g = c->size, me = c->host_of[c->rank];
    const void **a[2] = {calloc((size_t)g, sizeof(void *)), calloc((size_t)g, sizeof(void *))};
    size_t *l[2] = {calloc((size_t)g, sizeof(size_t)), calloc((size_t)g, sizeof(size_t))};
    struct burst_tp *tp[2] = {NULL, NULL};
    burst_status_t st = BURST_OK;
    if (!a[0] || !a[1] || !l[0] || !l[1])
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory for %d ranks", who, g);
    for (int r = 0; st == BURST_OK && r < g; r++) {
        size_t n0 = lens[r] >= 2 ? (size_t)blob[r][0] << 8 | blob[r][1] : 0;
        if (lens[r] < 2 || n0 == 0 || n0 + 2 >= lens[r]) {
            st = burst_error(BURST_ERR_TRANSPORT,
                             "%s: rank %d: malformed address record of rank %d (%zu bytes)", who,
                             c->rank, r, lens[r]);
            break;
        }
        int same = c->host_of[r] == me;
        if (same) {
            a[0][r] = blob[r] + 2;
            l[0][r] = n0;
        }
        if (!same || r == c->rank) {
            a[1][r] = blob[r] + 2 + n0;
            l[1][r] = lens[r] - 2 - n0;
        }
    }
    for (int i = 0; st == BURST_OK && i < 2; i++) {
        st = burst_fab_connect(fab[i], a[i], l[i], &tp[i]);
        if (st == BURST_OK)
            fab[i] = NULL;
    }
    if (st == BURST_OK)
        st = burst_tp_hybrid_create(tp[0], tp[1], c->host_of, &c->tp);
    if (st != BURST_OK)
        for (int i = 0; i < 2; i++)
            if (tp[i])
                tp[i]->ops->destroy(tp[i]);
    free(a[0]);
    free(a[1]);
    free(l[0]);
    free(l[1]);
    return st;
}

burst_status_t burst_comm_join_fabric(const struct burst_comm_params *p, const char *want, int mpi,
                                      struct burst_comm *c)
{
    static const char *who = "burst_comm_create";
    unsigned char mine[REC_LEN] = {0};
    unsigned char *buf = NULL;
    struct burst_fab *fab[2] = {NULL, NULL};
    char shm_name[BURST_BOOT_MAX_NAME + 1] = ""; /* this rank's shm segment, once it has one */
    burst_status_t st;
    const unsigned char **blob = calloc((size_t)c->size, sizeof(*blob));
    size_t *lens = calloc((size_t)c->size, sizeof(*lens));
    c->host_of = calloc((size_t)c->size, sizeof(*c->host_of));
    if (!blob || !lens || !c->host_of) {
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory for %d ranks", who, c->size);
        goto out;
    }
    if (mpi)
        st = burst_boot_join_oob(who, c->rank, c->size, c->timeout_ms, p->oob_allgather, p->oob_ctx,
                                 &c->boot);
    else
        st = burst_boot_join(who, p->rendezvous, p->job_key, c->rank, c->size, c->timeout_ms,
                             p->rendezvous_up, &c->boot);
    if (st != BURST_OK)
        goto out;
    /* Round 1: hosts and providers. */
    if (gethostname((char *)mine, REC_HOST - 1) != 0)
        strcpy((char *)mine, "?");
    mine[REC_HOST - 1] = 0;
    burst_boot_boot_id((char *)mine + REC_HOST, REC_BOOT);
    ssize_t nl = readlink("/proc/self/ns/net", (char *)mine + REC_HOST + REC_BOOT, REC_NS - 1);
    if (nl < 0)
        nl = 0;
    mine[REC_HOST + REC_BOOT + nl] = 0;
    snprintf((char *)mine + REC_ID, REC_FAB, "%s", want);
    uint32_t avail = 0;
    for (int i = 0; i < FAB_NAMES; i++)
        avail |= burst_fab_available(fab_names[i]) ? 1u << i : 0u;
    unsigned char *ap = mine + REC_ID + REC_FAB;
    ap[0] = (unsigned char)(avail >> 24);
    ap[1] = (unsigned char)(avail >> 16);
    ap[2] = (unsigned char)(avail >> 8);
    ap[3] = (unsigned char)avail;
    st = burst_boot_allgather(c->boot, mine, REC_LEN, &buf, blob, lens);
    if (st != BURST_OK)
        goto out;
    for (int r = 0; r < c->size; r++)
        if (!rec_valid(blob[r], lens[r])) {
            st = burst_error(BURST_ERR_TRANSPORT,
                             "%s: rank %d: malformed host record of rank %d (%zu bytes)", who,
                             c->rank, r, lens[r]);
            goto out;
        }
    int hybrid = 0;
    st = choose_fabric(c, blob, who, &hybrid);
    free(buf);
    buf = NULL;
    if (st != BURST_OK)
        goto out;
    /* Round 2: endpoint addresses. Hybrid: both endpoints' addresses, the shm one first. */
    const char *const prov[2] = {hybrid ? "shm" : c->fabric, hybrid ? c->fabric + 4 : NULL};
    const int nfab = hybrid ? 2 : 1;
    unsigned char addr[2 + 2 * (BURST_BOOT_MAX_BLOB / 16)];
    size_t used = hybrid ? 2 : 0; /* hybrid: u16 (big-endian) length of the shm address first */
    for (int i = 0; i < nfab; i++) {
        st = burst_fab_open(prov[i], i == 0 && hybrid ? NULL : p->iface, c->rank, c->size, &fab[i]);
        if (st != BURST_OK)
            goto out;
        size_t alen = BURST_BOOT_MAX_BLOB / 16;
        st = burst_fab_address(fab[i], addr + used, &alen);
        if (st != BURST_OK)
            goto out;
        if (hybrid && i == 0) {
            addr[0] = (unsigned char)(alen >> 8);
            addr[1] = (unsigned char)alen;
        }
        st = register_shm_segment(c, prov[i], addr + used, alen, shm_name);
        if (st != BURST_OK)
            goto out;
        used += alen;
    }
    burst_fault_join(c->rank); /* tests: a rank that joins late, its segment made */
    st = burst_boot_allgather(c->boot, addr, used, &buf, blob, lens);
    if (st != BURST_OK)
        goto out;
    if (!hybrid) {
        st = burst_fab_connect(fab[0], (const void *const *)blob, lens, &c->tp);
        if (st != BURST_OK)
            goto out;
        fab[0] = NULL; /* owned by the transport */
    } else {
        st = connect_hybrid(c, fab, blob, lens, who);
        if (st != BURST_OK)
            goto out;
    }
    /* Rank processes sharing a host may pass device blocks GPU to GPU (tp_ipc.h). */
    if (c->nhosts < c->size) {
        struct burst_tp *w = NULL;
        st = burst_tp_ipc_create(c->tp, c->host_of, &w);
        if (st != BURST_OK) {
            c->tp->ops->destroy(c->tp);
            c->tp = NULL;
            goto out;
        }
        c->tp = w;
    }
    c->tp->ctrl = burst_boot_ctrl(c->boot);
    st = unlink_shm_segment(c, shm_name);
    if (st != BURST_OK) {
        c->tp->ops->destroy(c->tp);
        c->tp = NULL;
    }
out:
    free(buf);
    free(blob);
    free(lens);
    burst_fab_close(fab[0]);
    burst_fab_close(fab[1]);
    if (st != BURST_OK) {
        /* a failed join (a peer's abort, the rendezvous gone with a killed launcher, the
         * timeout) leaves no segment behind */
        remove_shm_segment(shm_name);
        if (c->boot) {
            /* Tell the other ranks at once rather than let them wait for the timeout. */
            burst_boot_ctrl(c->boot)->abort(burst_boot_ctrl(c->boot), st);
            burst_boot_leave(c->boot, 1);
            c->boot = NULL;
        }
        free(c->host_of);
        c->host_of = NULL;
    }
    return st;
}
