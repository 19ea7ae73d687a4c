/*
 * transport/tp_fabric.c - the libfabric transport (see tp_fabric.h).
 *
 * Endpoint: FI_EP_RDM, caps FI_TAGGED | FI_DIRECTED_RECV, FI_ORDER_SAS on tx and rx, an
 * FI_AV_TABLE address vector (fi_addr_t of rank r is r) and one FI_CQ_FORMAT_TAGGED completion
 * queue for sends and receives. API version FI_VERSION(1, 9).
 *
 * Tags and matching: the caller's 64-bit tag goes on the wire unchanged (ignore = 0) and every
 * receive names its source's fi_addr_t (FI_DIRECTED_RECV), so (source, tag) is matched exactly
 * and all 64 tag bits stay the caller's. A provider without FI_DIRECTED_RECV is refused at open
 * (shm, tcp;ofi_rxm, verbs;ofi_rxm and efa all have it).
 *
 * Chunking: a message of len bytes travels as floor(len / C) chunks of exactly C bytes and one
 * final chunk of len % C bytes (possibly 0), all with the caller's tag, where C is the provider's
 * ep_attr->max_msg_size (or BURST_FAB_CHUNK_BYTES when smaller, for tests). When C exceeds the
 * message (always, for the providers above) this is one message. FI_ORDER_SAS keeps the chunks of
 * one (source, tag) in order. Because full chunks are exactly C and the final chunk is shorter
 * than C, two different lengths differ in the first chunk where their layouts differ, and that
 * chunk fails with FI_ETRUNC or completes short: a length mismatch is always detected and never
 * writes past the buffer. At most FAB_WINDOW chunks of one request are posted at a time; requests
 * to / from one peer are posted in order (a FIFO per peer and direction).
 *
 * Memory registration: fi_getinfo is asked first with mr_mode = 0, so providers that need
 * registered memory (verbs;ofi_rxm, efa) register internally with their own caches, which follow
 * munmap/free through libfabric's memory monitors. Only if nothing matches that way (or
 * BURST_FAB_MR_LOCAL=1) is FI_MR_LOCAL accepted; then every operation registers its buffer with
 * fi_mr_reg and closes the registration when the operation ends. That is always correct (no stale
 * registration after the caller frees a buffer) but costs a pin/unpin per message, which is why it
 * is only the fallback.
 *
 * Progress (shm and tcp;ofi_rxm make data progress only when called): a progress thread reads
 * the CQ and records completions in the requests under fab->lock; wait() sleeps on a condition
 * variable. The thread never spins for long:
 *   - when the CQ has a wait fd (FI_WAIT_FD, fi_control FI_GETWAIT; tcp;ofi_rxm), it blocks in
 *     poll() on that fd and an eventfd that posting rings, after fi_trywait() says it may;
 *   - otherwise (shm: nothing signals an fd when a peer writes shared memory) it polls the CQ
 *     for FAB_THREAD_SPIN_US after the last event, then sleeps on a condvar with a timeout that
 *     doubles from 16 us to FAB_SLEEP_MAX_US while nothing happens; posting wakes it.
 *   - it sleeps without a timeout when no operation is outstanding (shm) or blocks on the fd.
 * wait() itself polls the CQ for BURST_FAB_SPIN_US (default 20) before blocking, which
 * takes the thread hand-off off the latency of short messages. BURST_FAB_PROGRESS=caller turns
 * the thread off: wait() then drives progress itself (busy-polling with sched_yield), and
 * nothing advances between posting and wait(); kept to measure the difference.
 *
 * Failure: wait() polls tp->ctrl every FAB_SLICE_MS. On timeout, abort or a ctrl failure it
 * fi_cancel()s the request's chunks and drains their completions for up to FAB_DRAIN_MS; if some
 * cannot be drained (sends in flight to a dead peer are not cancellable in shm) the endpoint is
 * closed ("quiesced"): after fi_close(ep) the provider touches no buffer, every other request
 * fails with BURST_ERR_PEER_FAILED, and the caller may free its buffers. Every call into the
 * provider happens under fab->lock except the blocking poll().
 *
 * An operation that fails with a provider error (not a length mismatch) waits up to
 * FAB_CTRL_GRACE_MS for tp->ctrl to report a death, and returns that (BURST_ERR_PEER_FAILED,
 * naming the rank) when it comes: a dead peer shows first as FI_EIO (shm) or FI_ECONNRESET (tcp).
 *
 * Posting after a failure: isend/irecv poll tp->ctrl too, before anything reaches the provider,
 * and a peer whose operation completed with a connection error (FI_ECONNRESET, ...) is marked
 * dead; nothing is posted to or from a dead peer again (its requests fail with
 * BURST_ERR_PEER_FAILED at once). Posting to a dead peer makes rxm reconnect to a dead address,
 * and posting a receive from one can match a message whose connection is already gone (below).
 *
 * ofi_rxm and dead peers (libfabric 1.17, tcp;ofi_rxm and verbs;ofi_rxm): a message above the
 * eager limit travels by rendezvous: its header may arrive before the receive is posted and wait
 * in rxm's unexpected queue, holding a pointer to its connection. When the peer dies, rxm closes
 * that connection (rxm_close_conn sets conn->msg_ep = NULL, rxm_free_conn frees it) but leaves
 * the header queued; a later fi_trecv that matches it starts the rendezvous read on
 * conn->msg_ep and the survivor dies with SIGSEGV inside fi_trecv (rxm_rndv_read ->
 * rndv_ops->xfer(NULL, ...)). The ctrl check above cannot close that race alone: rxm may tear the
 * connection down before the rendezvous reports the death. So over ofi_rxm every chunk is kept
 * at or below rxm's eager limit (FAB_RXM_EAGER_LIMIT, or FI_OFI_RXM_BUFFER_SIZE /
 * FI_OFI_RXM_EAGER_LIMIT when set lower): an unexpected eager message carries its data in rxm's
 * own buffer and matching it never touches the connection. BURST_FAB_RXM_EAGER=0 lifts the cap
 * (rendezvous for large messages: faster on verbs, unsafe when a peer dies).
 *
 * Settings (runtime/settings.h, read at burst_fab_open): BURST_FAB_PROGRESS=thread|caller,
 * BURST_FAB_SPIN_US (wait()'s polling before it blocks), BURST_FAB_CHUNK_BYTES,
 * BURST_FAB_MR_LOCAL=1, BURST_FAB_RXM_EAGER=0|1. rxm's own FI_OFI_RXM_* variables are the host
 * program's: the transport reads them (the eager limit below) and never sets them.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "error.h"
#include "settings.h"
#include "tp_fabric.h"
#include "tp_fabric_dl.h"

#define FAB_API FI_VERSION(1, 9)
#define FAB_WINDOW 8           /* chunks of one request posted at once */
#define FAB_CQ_BATCH 16        /* completions read per fi_cq_read */
#define FAB_SLICE_MS 5         /* wait(): ctrl poll period */
#define FAB_DRAIN_MS 200       /* wait(): how long cancelled chunks may take to complete */
#define FAB_CTRL_GRACE_MS 1000 /* wait(): how long a provider error waits for ctrl's verdict */
#define FAB_THREAD_SPIN_US 50  /* progress thread without wait fd: polling after an event */
#define FAB_SLEEP_MIN_US 16
#define FAB_SLEEP_MAX_US 1000
#define FAB_POLL_MS 100           /* progress thread with wait fd: poll() timeout */
#define FAB_RXM_EAGER_LIMIT 16384 /* ofi_rxm's default eager limit (FI_OFI_RXM_BUFFER_SIZE) */
#define FAB_RXM_HDR 256           /* >= ofi_rxm's packet header inside a bounce buffer */
#define FAB_ADDR_MAX 512 /* a peer's address from the bootstrap, bytes (> any provider's) */

/* One posted chunk. The libfabric context must come first: completions return its address. */
struct fab_op {
    struct fi_context2 ctx;
    struct burst_tp_req *req;
    struct fid_mr *mr;
    size_t len;
    int busy;
};

struct burst_tp_req {
    struct burst_tp_req *qnext;         /* FIFO of its (peer, direction) until fully posted */
    struct burst_tp_req *lprev, *lnext; /* fab->live: every request not yet freed */
    int is_send, peer, queued, released;
    uint64_t tag;
    unsigned char *buf;
    size_t len, nchunks, posted, completed;
    int inflight;
    burst_status_t status; /* first failure, BURST_OK while none */
    int fi_err;            /* its libfabric code (positive) */
    const char *call;      /* the call or completion that failed */
    size_t got_len;        /* short receive: the length that arrived */
    struct fab_op ops[FAB_WINDOW];
};

struct fab_fifo {
    struct burst_tp_req *head, *tail;
};

struct burst_fab {
    struct burst_tp base; /* valid once connected */
    char prov[32];        /* burst name */
    const char *fi_prov;  /* libfabric name */
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    fi_addr_t *peers;         /* [size] */
    unsigned char *peer_dead; /* [size]: a connection error completed an operation with it */
    size_t chunk;             /* C above */
    int mr_local;
    int use_thread;
    int spin_us;
    int wait_fd; /* CQ wait fd, or -1 */
    int wake_fd; /* eventfd, or -1 */

    pthread_mutex_t lock;
    pthread_cond_t done_cv; /* a request changed state */
    pthread_cond_t work_cv; /* progress thread: something was posted, or stop */
    pthread_t thread;
    int thread_started, stop, thread_sleeping;
    int nactive; /* requests queued or with chunks in flight */
    int nqueued; /* requests in the FIFOs */
    int aborted; /* abort(): every wait fails */
    burst_status_t abort_reason;
    int dead; /* endpoint closed (quiesce) or the CQ failed */
    int dead_err;
    const char *dead_call;
    struct fab_fifo *q; /* [2 * size]: sends to peer p at 2p, receives from p at 2p + 1 */
    struct burst_tp_req *live;
};

/* ---- errors: every libfabric code becomes a status here ---- */

static burst_status_t fab_status(int ret)
{
    switch (ret < 0 ? -ret : ret) {
    case FI_ENOMEM: return BURST_ERR_NO_MEMORY;
    case FI_ENODATA:
    case FI_ENOSYS:
    case FI_EOPNOTSUPP: return BURST_ERR_UNSUPPORTED;
    case FI_ETIMEDOUT: return BURST_ERR_TIMEOUT;
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ECONNREFUSED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ENETDOWN:
    case FI_ESHUTDOWN: return BURST_ERR_PEER_FAILED;
    default: return BURST_ERR_TRANSPORT;
    }
}

/* "libfabric transport (tcp): <detail>: <call> failed: <fi_strerror> (-code)" with status st, or
 * the status of the code when st is BURST_OK. */
static burst_status_t fab_error_st(burst_status_t st, const char *prov, const char *call, int ret,
                                   const char *fmt, va_list ap)
{
    char detail[256] = "";
    if (fmt)
        vsnprintf(detail, sizeof(detail), fmt, ap);
    int code = ret < 0 ? -ret : ret;
    return burst_error(st != BURST_OK ? st : fab_status(ret),
                       "libfabric transport (%s): %s%s%s failed: %s (%d)", prov, detail,
                       *detail ? ": " : "", call, burst_fi_strerror(code), -code);
}

static burst_status_t fab_error(const char *prov, const char *call, int ret, const char *fmt, ...)
    BURST_PRINTF(4, 5);
static burst_status_t fab_error(const char *prov, const char *call, int ret, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    burst_status_t st = fab_error_st(BURST_OK, prov, call, ret, fmt, ap);
    va_end(ap);
    return st;
}

static burst_status_t fab_error_as(burst_status_t st, const char *prov, const char *call, int ret,
                                   const char *fmt, ...) BURST_PRINTF(5, 6);
static burst_status_t fab_error_as(burst_status_t st, const char *prov, const char *call, int ret,
                                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st = fab_error_st(st, prov, call, ret, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- providers ---- */

static const char *fab_prov_name(const char *burst_name)
{
    static const struct {
        const char *burst, *fi;
    } map[] = {
        {"shm", "shm"},
        {"tcp", "tcp;ofi_rxm"},
        {"verbs", "verbs;ofi_rxm"},
        {"efa", "efa"},
    };
    for (size_t i = 0; burst_name && i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(burst_name, map[i].burst) == 0)
            return map[i].fi;
    return NULL;
}

/*
 * ofi_rxm's eager messages copy through bounce buffers of FI_OFI_RXM_BUFFER_SIZE bytes (default
 * 16 KiB), and the transport keeps every chunk eager (see "ofi_rxm and dead peers"), so that size
 * sets the bandwidth: 16 KiB chunks cost half of tcp's speed. rxm reads it, and its pool sizes,
 * from the environment only, once, when libfabric first loads its providers; the library never
 * sets the host process's environment, so a program that wants more sets them itself before
 * its first fabric communicator (README.md: FI_OFI_RXM_BUFFER_SIZE). burstrun does, for its own
 * processes (tools/launch.c launch_fabric_env_defaults: 64 KiB buffers, pools of 256).
 */
/* The largest chunk ofi_rxm sends eagerly: its bounce buffer minus its header (FAB_RXM_HDR, an
 * upper bound), or a lower FI_OFI_RXM_EAGER_LIMIT. */
static size_t rxm_eager_limit(void)
{
    static const char *const vars[] = {"FI_OFI_RXM_BUFFER_SIZE", "FI_OFI_RXM_EAGER_LIMIT"};
    size_t limit = SIZE_MAX;
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(vars[i]);
        if (!s || !*s)
            continue;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (*end == '\0' && v > FAB_RXM_HDR && v - (i ? 0 : FAB_RXM_HDR) < limit)
            limit = (size_t)v - (i ? 0 : FAB_RXM_HDR);
    }
    return limit == SIZE_MAX ? FAB_RXM_EAGER_LIMIT : limit;
}

/* fi_getinfo for a burst provider name; iface as described in fab_open. */
static int fab_getinfo(const char *fi_prov, const char *iface, int mr_local,
                       struct fi_info **info_p)
{
    struct fi_info *hints = burst_fi_dupinfo(NULL);
    if (!hints)
        return -FI_ENOMEM;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->domain_attr->mr_mode = mr_local ? FI_MR_LOCAL : 0;
    hints->domain_attr->threading = FI_THREAD_DOMAIN; /* every call is under fab->lock */
    hints->addr_format = FI_FORMAT_UNSPEC;
    hints->fabric_attr->prov_name = strdup(fi_prov);
    const char *node = NULL, *domain = NULL;
    uint64_t flags = 0;
    if (iface && *iface && strcmp(fi_prov, "shm") != 0) {
        if (strchr(iface, '.') || strchr(iface, ':')) {
            node = iface; /* an address of this host: the endpoint's source address */
            flags = FI_SOURCE;
        } else {
            domain = iface; /* "lo", "eth0", "mlx5_0": filtered below (rxm ignores the hint) */
        }
    }
    struct fi_info *all = NULL;
    int ret = burst_fi_getinfo(FAB_API, node, NULL, flags, hints, &all);
    burst_fi_freeinfo(hints);
    if (ret)
        return ret;
    struct fi_info *pick = all;
    if (domain)
        for (pick = all; pick; pick = pick->next)
            if (pick->domain_attr->name && strcmp(pick->domain_attr->name, domain) == 0)
                break;
    struct fi_info *one = pick ? burst_fi_dupinfo(pick) : NULL;
    burst_fi_freeinfo(all);
    if (!one)
        return pick ? -FI_ENOMEM : -FI_ENODATA;
    *info_p = one;
    return 0;
}

int burst_fab_available(const char *provider)
{
    const char *fi_prov = fab_prov_name(provider);
    struct fi_info *info = NULL;
    if (!fi_prov)
        return 0;
    if (fab_getinfo(fi_prov, NULL, 0, &info) != 0 && fab_getinfo(fi_prov, NULL, 1, &info) != 0)
        return 0;
    burst_fi_freeinfo(info);
    return 1;
}

void burst_fab_close(struct burst_fab *f)
{
    if (!f)
        return;
    if (f->ep)
        fi_close(&f->ep->fid);
    if (f->av)
        fi_close(&f->av->fid);
    if (f->cq)
        fi_close(&f->cq->fid);
    if (f->domain)
        fi_close(&f->domain->fid);
    if (f->fabric)
        fi_close(&f->fabric->fid);
    if (f->info)
        burst_fi_freeinfo(f->info);
    if (f->wake_fd >= 0)
        close(f->wake_fd);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->done_cv);
    pthread_cond_destroy(&f->work_cv);
    free(f->peers);
    free(f->peer_dead);
    free(f->q);
    free(f);
}

/*
 * iface: NULL or "" for the provider's first choice; a name ("lo", "eth0", "mlx5_0") selects
 * hints->domain_attr->name; an IP address ("127.0.0.1") becomes the endpoint's source address
 * (fi_getinfo node with FI_SOURCE). shm ignores it.
 */
static burst_status_t fab_open(const char *provider, const char *iface, int rank, int size,
                               struct burst_fab **fab_p);

/* The provider's endpoint setup keeps the program's signal dispositions (tp_fabric_dl.h). */
burst_status_t burst_fab_open(const char *provider, const char *iface, int rank, int size,
                              struct burst_fab **fab_p)
{
    struct burst_fi_sigs s;
    burst_fi_sigs_save(&s);
    burst_status_t st = fab_open(provider, iface, rank, size, fab_p);
    burst_fi_sigs_restore(&s);
    return st;
}

static burst_status_t fab_open(const char *provider, const char *iface, int rank, int size,
                               struct burst_fab **fab_p)
{
    static const char *who = "burst_fab_open";
    const char *fi_prov = fab_prov_name(provider);
    if (!fab_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: fab_p is NULL", who);
    if (!fi_prov)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: provider = \"%s\" is not one of shm, tcp, verbs, efa", who,
                           provider ? provider : "(null)");
    if (size < 1 || size > 65536 || rank < 0 || rank >= size)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: rank = %d, size = %d out of range", who,
                           rank, size);
    struct burst_fab *f = calloc(1, sizeof(*f));
    if (!f)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->done_cv, &ca);
    pthread_cond_init(&f->work_cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(f->prov, sizeof(f->prov), "%s", provider);
    f->fi_prov = fi_prov;
    f->wait_fd = f->wake_fd = -1;
    f->base.rank = rank;
    f->base.size = size;
    /* the settings of a communicator's create, which checked them (settings.h) */
    struct burst_settings set = {0};
    burst_status_t st = burst_settings_load(who, BURST_SCOPE_FABRIC, &set);
    if (st != BURST_OK) {
        burst_fab_close(f);
        return st;
    }
    f->use_thread = burst_set_long(&set, BURST_SET_FAB_PROGRESS) == 0; /* "thread" */
    f->spin_us = (int)burst_set_long(&set, BURST_SET_FAB_SPIN_US);
    int force_mr = (int)burst_set_long(&set, BURST_SET_FAB_MR_LOCAL);

    f->peers = calloc((size_t)size, sizeof(*f->peers));
    f->peer_dead = calloc((size_t)size, 1);
    f->q = calloc(2 * (size_t)size, sizeof(*f->q));
    if (!f->peers || !f->peer_dead || !f->q) {
        burst_fab_close(f);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    }
    int ret = force_mr ? -FI_ENODATA : fab_getinfo(fi_prov, iface, 0, &f->info);
    if (ret == -FI_ENODATA)
        ret = fab_getinfo(fi_prov, iface, 1, &f->info);
    if (ret) {
        burst_fab_close(f);
        return fab_error(f->prov, "fi_getinfo", ret, "provider %s%s%s", fi_prov,
                         iface ? ", iface " : "", iface ? iface : "");
    }
    struct fi_info *fi = f->info;
    if (!(fi->caps & FI_DIRECTED_RECV)) {
        burst_fab_close(f);
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "libfabric transport (%s): provider %s lacks FI_DIRECTED_RECV", provider,
                           fi_prov);
    }
    f->mr_local = force_mr || (fi->domain_attr->mr_mode & FI_MR_LOCAL);
    f->chunk = fi->ep_attr->max_msg_size ? fi->ep_attr->max_msg_size : SIZE_MAX;
    if (strstr(fi_prov, "ofi_rxm") && burst_set_long(&set, BURST_SET_FAB_RXM_EAGER)) {
        size_t eager = rxm_eager_limit();
        if (eager < f->chunk)
            f->chunk = eager; /* see "ofi_rxm and dead peers" above */
    }
    const long cs = burst_set_long(&set, BURST_SET_FAB_CHUNK_BYTES);
    if (cs > 0 && (unsigned long)cs < f->chunk)
        f->chunk = (size_t)cs;

    const char *call = "fi_fabric";
    ret = burst_fi_fabric(fi->fabric_attr, &f->fabric, NULL);
    if (!ret) {
        call = "fi_domain";
        ret = fi_domain(f->fabric, fi, &f->domain, NULL);
    }
    if (!ret) {
        /* A wait fd lets the progress thread sleep in poll(); shm never signals one. */
        struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 0};
        int want_fd = f->use_thread && strcmp(fi_prov, "shm") != 0;
        cq_attr.wait_obj = want_fd ? FI_WAIT_FD : FI_WAIT_NONE;
        call = "fi_cq_open";
        ret = fi_cq_open(f->domain, &cq_attr, &f->cq, NULL);
        if (ret && want_fd) {
            cq_attr.wait_obj = FI_WAIT_NONE;
            want_fd = 0;
            ret = fi_cq_open(f->domain, &cq_attr, &f->cq, NULL);
        }
        if (!ret && want_fd && fi_control(&f->cq->fid, FI_GETWAIT, &f->wait_fd) != 0)
            f->wait_fd = -1;
    }
    if (!ret) {
        struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)size};
        call = "fi_av_open";
        ret = fi_av_open(f->domain, &av_attr, &f->av, NULL);
    }
    /* The shm provider's fi_enable has been seen to fail with EBUSY now and then on a machine
     * running many rank processes (tests killing ranks meanwhile; cause not pinned down): a few
     * fresh endpoints, 50 ms apart, before giving up. */
    for (int attempt = 0; !ret; attempt++) {
        call = "fi_endpoint";
        ret = fi_endpoint(f->domain, fi, &f->ep, NULL);
        if (!ret) {
            call = "fi_ep_bind(cq)";
            ret = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV);
        }
        if (!ret) {
            call = "fi_ep_bind(av)";
            ret = fi_ep_bind(f->ep, &f->av->fid, 0);
        }
        if (!ret) {
            call = "fi_enable";
            ret = fi_enable(f->ep);
        }
        if (ret != -FI_EBUSY || attempt == 4)
            break;
        if (f->ep)
            fi_close(&f->ep->fid);
        f->ep = NULL;
        ret = 0;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (ret) {
        st = fab_error(f->prov, call, ret, "rank %d", rank);
        burst_fab_close(f);
        return st;
    }
    if (f->use_thread && (f->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        burst_fab_close(f);
        return burst_error(BURST_ERR_TRANSPORT, "%s: eventfd: %s", who, strerror(errno));
    }
    *fab_p = f;
    return BURST_OK;
}

burst_status_t burst_fab_address(struct burst_fab *f, void *buf, size_t *len_p)
{
    if (!f || !buf || !len_p)
        return burst_error(BURST_ERR_INVALID_ARG, "burst_fab_address: %s is NULL",
                           !f     ? "fab"
                           : !buf ? "buf"
                                  : "len_p");
    size_t len = *len_p;
    int ret = fi_getname(&f->ep->fid, buf, &len);
    if (ret == -FI_ETOOSMALL)
        return burst_error(BURST_ERR_TOO_LARGE,
                           "burst_fab_address: the %s address needs %zu bytes, *len_p = %zu",
                           f->prov, len, *len_p);
    if (ret)
        return fab_error(f->prov, "fi_getname", ret, NULL);
    *len_p = len;
    return BURST_OK;
}

/* ---- requests (everything below runs under f->lock unless said otherwise) ---- */

static void req_fail(struct burst_tp_req *r, burst_status_t st, int fi_err, const char *call)
{
    if (r->status == BURST_OK) {
        r->status = st;
        r->fi_err = fi_err;
        r->call = call;
    }
}

/* A request is final once it failed or all chunks completed, and nothing is in flight. */
static int req_final(const struct burst_tp_req *r)
{
    return r->inflight == 0 && !r->queued && (r->status != BURST_OK || r->completed == r->nchunks);
}

static void fifo_remove(struct fab_fifo *q, struct burst_tp_req *r)
{
    struct burst_tp_req *prev = NULL;
    for (struct burst_tp_req *it = q->head; it; prev = it, it = it->qnext)
        if (it == r) {
            if (prev)
                prev->qnext = r->qnext;
            else
                q->head = r->qnext;
            if (q->tail == r)
                q->tail = prev;
            r->qnext = NULL;
            return;
        }
}

static void req_unqueue(struct burst_fab *f, struct burst_tp_req *r)
{
    if (!r->queued)
        return;
    fifo_remove(&f->q[2 * r->peer + !r->is_send], r);
    r->queued = 0;
    f->nqueued--;
}

static void req_free(struct burst_fab *f, struct burst_tp_req *r)
{
    if (r->lprev)
        r->lprev->lnext = r->lnext;
    else
        f->live = r->lnext;
    if (r->lnext)
        r->lnext->lprev = r->lprev;
    free(r);
}

/* After a state change: update the active count, free released final requests, wake waiters. */
static void req_settle(struct burst_fab *f, struct burst_tp_req *r, int was_active)
{
    int active = r->queued || r->inflight > 0;
    if (was_active && !active)
        f->nactive--;
    if (r->released && req_final(r))
        req_free(f, r);
    pthread_cond_broadcast(&f->done_cv);
}

static void op_finish(struct burst_fab *f, struct fab_op *op)
{
    if (op->mr) {
        fi_close(&op->mr->fid);
        op->mr = NULL;
    }
    op->busy = 0;
    op->req->inflight--;
}

/* Post chunks of r until the window is full, all are posted, or the provider says EAGAIN. */
static void req_post(struct burst_fab *f, struct burst_tp_req *r)
{
    size_t full = f->chunk == SIZE_MAX ? 0 : r->len / f->chunk;
    if (f->peer_dead[r->peer] && r->posted < r->nchunks) {
        /* Never hand the provider an operation with a peer whose connection failed. */
        req_fail(r, BURST_ERR_PEER_FAILED, FI_ECONNRESET,
                 "an earlier operation with this peer failed; not posted");
        return;
    }
    while (r->posted < r->nchunks && r->inflight < FAB_WINDOW && r->status == BURST_OK) {
        struct fab_op *op = NULL;
        for (int i = 0; i < FAB_WINDOW && !op; i++)
            if (!r->ops[i].busy)
                op = &r->ops[i];
        size_t off = r->posted * (full ? f->chunk : 0);
        size_t len = r->posted < full ? f->chunk : r->len - off;
        void *desc = NULL;
        int ret = 0;
        memset(&op->ctx, 0, sizeof(op->ctx));
        op->req = r;
        op->len = len;
        op->mr = NULL;
        if (f->mr_local && len) {
            ret = fi_mr_reg(f->domain, r->buf + off, len, r->is_send ? FI_SEND : FI_RECV, 0, 0, 0,
                            &op->mr, NULL);
            if (ret) {
                req_fail(r, fab_status(ret), -ret, "fi_mr_reg");
                break;
            }
            desc = fi_mr_desc(op->mr);
        }
        if (r->is_send)
            ret =
                (int)fi_tsend(f->ep, r->buf + off, len, desc, f->peers[r->peer], r->tag, &op->ctx);
        else
            ret = (int)fi_trecv(f->ep, r->buf + off, len, desc, f->peers[r->peer], r->tag, 0,
                                &op->ctx);
        if (ret) {
            if (op->mr)
                fi_close(&op->mr->fid);
            op->mr = NULL;
            if (ret != -FI_EAGAIN)
                req_fail(r, fab_status(ret), -ret, r->is_send ? "fi_tsend" : "fi_trecv");
            break;
        }
        op->busy = 1;
        r->inflight++;
        r->posted++;
    }
}

/* Post what the FIFOs hold, heads first, in order per (peer, direction). */
static void fab_pump(struct burst_fab *f)
{
    if (!f->nqueued || f->dead)
        return;
    for (int i = 0; i < 2 * f->base.size && f->nqueued; i++) {
        struct fab_fifo *q = &f->q[i];
        while (q->head) {
            struct burst_tp_req *r = q->head;
            req_post(f, r);
            if (r->posted < r->nchunks && r->status == BURST_OK)
                break; /* window full or EAGAIN: later */
            req_unqueue(f, r);
            req_settle(f, r, 1);
            /* r may be freed here only if released; a queued request is never released */
        }
    }
}

static void fab_complete(struct burst_fab *f, void *context, size_t len, int err)
{
    struct fab_op *op = (struct fab_op *)context;
    if (!op)
        return;
    struct burst_tp_req *r = op->req;
    op_finish(f, op);
    err = err < 0 ? -err : err; /* some providers report -FI_E* */
    if (err) {
        const char *call = r->is_send ? "fi_tsend completion" : "fi_trecv completion";
        if (err == FI_ETRUNC)
            req_fail(r, BURST_ERR_TRANSPORT, err, "length mismatch (FI_ETRUNC)");
        else if (err != FI_ECANCELED)
            req_fail(r, fab_status(err), err, call);
        if (fab_status(err) == BURST_ERR_PEER_FAILED)
            f->peer_dead[r->peer] = 1;
    } else if (!r->is_send && len != op->len) {
        req_fail(r, BURST_ERR_TRANSPORT, 0, "length mismatch (short message)");
        r->got_len = len;
    } else {
        r->completed++;
    }
    req_settle(f, r, 1);
}

static void fab_quiesce(struct burst_fab *f, int err, const char *call);

/* Read the CQ once. Returns completions handled (>0), 0 when none, -1 when the CQ failed. */
static int fab_progress_locked(struct burst_fab *f)
{
    if (f->dead)
        return 0;
    struct fi_cq_tagged_entry e[FAB_CQ_BATCH];
    ssize_t n = fi_cq_read(f->cq, e, FAB_CQ_BATCH);
    if (n > 0) {
        for (ssize_t i = 0; i < n; i++)
            fab_complete(f, e[i].op_context, e[i].len, 0);
    } else if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee;
        memset(&ee, 0, sizeof(ee));
        ssize_t m = fi_cq_readerr(f->cq, &ee, 0);
        if (m == 1) {
            fab_complete(f, ee.op_context, ee.len, ee.err ? ee.err : FI_EOTHER);
            n = 1;
        } else {
            n = 0;
        }
    } else if (n != -FI_EAGAIN) {
        fab_quiesce(f, (int)-n, "fi_cq_read");
        return -1;
    } else {
        n = 0;
    }
    fab_pump(f);
    return (int)n;
}

/*
 * Close the endpoint so that the provider never touches a buffer again; every request fails.
 * Requests stay allocated until released (their chunks are no longer tracked).
 */
static void fab_quiesce(struct burst_fab *f, int err, const char *call)
{
    if (f->ep) {
        fi_close(&f->ep->fid);
        f->ep = NULL;
    }
    if (!f->dead) {
        f->dead = 1;
        f->dead_err = err;
        f->dead_call = call;
    }
    for (struct burst_tp_req *r = f->live, *next; r; r = next) {
        next = r->lnext;
        int was_active = r->queued || r->inflight > 0;
        req_unqueue(f, r);
        for (int i = 0; i < FAB_WINDOW; i++)
            if (r->ops[i].busy)
                op_finish(f, &r->ops[i]);
        req_fail(r, BURST_ERR_PEER_FAILED, err, call);
        req_settle(f, r, was_active);
    }
    pthread_cond_broadcast(&f->done_cv);
}

/* ---- progress thread ---- */

static void wake_thread(struct burst_fab *f)
{
    pthread_cond_signal(&f->work_cv);
    if (f->thread_sleeping && f->wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(f->wake_fd, &one, sizeof(one));
        (void)w;
    }
}

static void timespec_after_us(struct timespec *ts, long us)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += us / 1000000;
    ts->tv_nsec += (us % 1000000) * 1000;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *progress_main(void *arg)
{
    struct burst_fab *f = arg;
    long sleep_us = FAB_SLEEP_MIN_US;
    int64_t last_event = now_us();
    pthread_mutex_lock(&f->lock);
    while (!f->stop) {
        if (f->dead || (f->nactive == 0 && f->wait_fd < 0)) {
            pthread_cond_wait(&f->work_cv, &f->lock);
            last_event = now_us();
            continue;
        }
        if (fab_progress_locked(f) > 0) {
            last_event = now_us();
            sleep_us = FAB_SLEEP_MIN_US;
            continue;
        }
        if (f->wait_fd >= 0) {
            struct fid *fids[1] = {&f->cq->fid};
            if (fi_trywait(f->fabric, fids, 1) != FI_SUCCESS)
                continue;
            struct pollfd pfd[2] = {{.fd = f->wait_fd, .events = POLLIN},
                                    {.fd = f->wake_fd, .events = POLLIN}};
            f->thread_sleeping = 1;
            pthread_mutex_unlock(&f->lock);
            poll(pfd, 2, FAB_POLL_MS);
            if (pfd[1].revents & POLLIN) {
                uint64_t v;
                ssize_t rd = read(f->wake_fd, &v, sizeof(v));
                (void)rd;
            }
            pthread_mutex_lock(&f->lock);
            f->thread_sleeping = 0;
        } else if (now_us() - last_event < FAB_THREAD_SPIN_US) {
            pthread_mutex_unlock(&f->lock);
            sched_yield();
            pthread_mutex_lock(&f->lock);
        } else {
            struct timespec ts;
            timespec_after_us(&ts, sleep_us);
            pthread_cond_timedwait(&f->work_cv, &f->lock, &ts);
            sleep_us = sleep_us * 2 > FAB_SLEEP_MAX_US ? FAB_SLEEP_MAX_US : sleep_us * 2;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* ---- transport ops ---- */

static burst_status_t fab_post(struct burst_tp *t, int is_send, int peer, uint64_t tag, void *buf,
                               size_t len, struct burst_tp_req **req_p)
{
    struct burst_fab *f = (struct burst_fab *)t;
    if (peer < 0 || peer >= t->size)
        return burst_error(BURST_ERR_INTERNAL, "libfabric transport (%s): peer = %d out of range",
                           f->prov, peer);
    if (len && !buf)
        return burst_error(BURST_ERR_INTERNAL, "libfabric transport (%s): NULL buffer", f->prov);
    if (f->peers[peer] == FI_ADDR_UNSPEC)
        return burst_error(BURST_ERR_INTERNAL,
                           "libfabric transport (%s): rank %d has no address of rank %d", f->prov,
                           t->rank, peer);
    if (t->ctrl) {
        /* A death the control channel already reports: fail before touching the provider. */
        burst_status_t st = t->ctrl->poll(t->ctrl);
        if (st != BURST_OK)
            return st; /* ctrl->poll's message names the failed rank */
    }
    struct burst_tp_req *r = calloc(1, sizeof(*r));
    if (!r)
        return burst_error(BURST_ERR_NO_MEMORY, "libfabric transport (%s): out of memory", f->prov);
    r->is_send = is_send;
    r->peer = peer;
    r->tag = tag;
    r->buf = buf;
    r->len = len;
    r->nchunks = (f->chunk == SIZE_MAX ? 0 : len / f->chunk) + 1;
    pthread_mutex_lock(&f->lock);
    if (f->aborted || f->dead) {
        int aborted = f->aborted;
        burst_status_t reason = f->abort_reason;
        int err = f->dead_err;
        const char *call = f->dead_call;
        pthread_mutex_unlock(&f->lock);
        free(r);
        if (aborted)
            return burst_error(BURST_ERR_PEER_FAILED,
                               "libfabric transport (%s): rank %d: the ring was aborted (%s)",
                               f->prov, t->rank, burst_status_str(reason));
        return fab_error_as(BURST_ERR_PEER_FAILED, f->prov, call, err,
                            "rank %d: endpoint closed after an earlier failure", t->rank);
    }
    if (f->peer_dead[peer]) {
        pthread_mutex_unlock(&f->lock);
        free(r);
        return burst_error(BURST_ERR_PEER_FAILED,
                           "libfabric transport (%s): rank %d: %s rank %d refused: an earlier "
                           "operation with rank %d failed with a connection error",
                           f->prov, t->rank, is_send ? "send to" : "receive from", peer, peer);
    }
    r->lnext = f->live;
    if (f->live)
        f->live->lprev = r;
    f->live = r;
    struct fab_fifo *q = &f->q[2 * peer + !is_send];
    r->queued = 1;
    f->nqueued++;
    f->nactive++;
    if (q->tail)
        q->tail->qnext = r;
    else
        q->head = r;
    q->tail = r;
    if (q->head == r) {
        req_post(f, r);
        if (r->posted == r->nchunks || r->status != BURST_OK) {
            req_unqueue(f, r);
            req_settle(f, r, 1);
        }
    }
    if (f->use_thread)
        wake_thread(f);
    pthread_mutex_unlock(&f->lock);
    *req_p = r; /* a posting failure surfaces in wait() */
    return BURST_OK;
}

static burst_status_t fab_isend(struct burst_tp *t, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_tp_req **req_p)
{
    return fab_post(t, 1, peer, tag, (void *)(uintptr_t)buf, len, req_p);
}

static burst_status_t fab_irecv(struct burst_tp *t, int peer, uint64_t tag, void *buf, size_t len,
                                struct burst_tp_req **req_p)
{
    return fab_post(t, 0, peer, tag, buf, len, req_p);
}

/* Cancel r's chunks and drain them (FAB_DRAIN_MS); quiesce the endpoint if they do not drain. */
static void req_cancel(struct burst_fab *f, struct burst_tp_req *r)
{
    int was_active = r->queued || r->inflight > 0;
    req_unqueue(f, r);
    req_settle(f, r, was_active);
    if (r->inflight == 0 || f->dead)
        return;
    for (int i = 0; i < FAB_WINDOW; i++)
        if (r->ops[i].busy)
            fi_cancel(&f->ep->fid, &r->ops[i].ctx);
    int64_t end = now_us() + FAB_DRAIN_MS * 1000;
    while (r->inflight > 0 && !f->dead && now_us() < end) {
        if (fab_progress_locked(f) > 0)
            continue;
        pthread_mutex_unlock(&f->lock);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&f->lock);
    }
    if (r->inflight > 0)
        fab_quiesce(f, FI_ECANCELED,
                    "fi_cancel (an operation could not be cancelled; "
                    "endpoint closed)");
}

static burst_status_t fab_wait(struct burst_tp *t, struct burst_tp_req *r, int timeout_ms)
{
    struct burst_fab *f = (struct burst_fab *)t;
    int64_t start = now_us();
    int64_t deadline = start + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
    int64_t spin_end = start + f->spin_us;
    int64_t next_ctrl = start;
    burst_status_t fail = BURST_OK;
    pthread_mutex_lock(&f->lock);
    while (!req_final(r) && r->status == BURST_OK) {
        int64_t now = now_us();
        if (f->aborted) {
            fail = BURST_ERR_PEER_FAILED;
            break;
        }
        if (f->dead)
            break; /* quiesced: r failed with the endpoint */
        if (t->ctrl && now >= next_ctrl) {
            pthread_mutex_unlock(&f->lock);
            fail = t->ctrl->poll(t->ctrl);
            pthread_mutex_lock(&f->lock);
            next_ctrl = now + FAB_SLICE_MS * 1000;
            if (fail != BURST_OK)
                break;
            continue;
        }
        if (now >= deadline) {
            fail = BURST_ERR_TIMEOUT;
            break;
        }
        if (!f->use_thread || now < spin_end) {
            if (fab_progress_locked(f) == 0) {
                pthread_mutex_unlock(&f->lock);
                sched_yield();
                pthread_mutex_lock(&f->lock);
            }
            continue;
        }
        int64_t until = deadline;
        if (t->ctrl && next_ctrl < until)
            until = next_ctrl;
        if (until > now + FAB_SLICE_MS * 1000)
            until = now + FAB_SLICE_MS * 1000;
        struct timespec ts;
        timespec_after_us(&ts, (long)(until - now));
        pthread_cond_timedwait(&f->done_cv, &f->lock, &ts);
    }
    const char *what = r->is_send ? "send" : "receive";
    burst_status_t st;
    if (fail == BURST_OK && r->status != BURST_OK && !req_final(r))
        req_cancel(f, r); /* a chunk failed: the rest cannot succeed */
    if (fail == BURST_OK && r->status != BURST_OK && r->fi_err && r->fi_err != FI_ETRUNC &&
        t->ctrl) {
        /* A provider error with a peer (shm: FI_EIO once the peer's memory is gone; tcp:
         * FI_ECONNRESET) is most often its death, which the control channel reports a moment
         * later: wait for that report (up to FAB_CTRL_GRACE_MS) so that the caller gets
         * BURST_ERR_PEER_FAILED naming the failed rank. */
        int64_t end = now_us() + FAB_CTRL_GRACE_MS * 1000;
        pthread_mutex_unlock(&f->lock);
        while ((fail = t->ctrl->poll(t->ctrl)) == BURST_OK && now_us() < end) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&f->lock);
    }
    if (fail != BURST_OK || !req_final(r)) {
        req_cancel(f, r);
        if (fail == BURST_ERR_TIMEOUT)
            st = burst_error(BURST_ERR_TIMEOUT,
                             "libfabric transport (%s): rank %d: %s of %zu bytes with rank %d "
                             "(tag 0x%llx) did not complete within %d ms",
                             f->prov, t->rank, what, r->len, r->peer, (unsigned long long)r->tag,
                             timeout_ms);
        else if (f->aborted)
            st = burst_error(BURST_ERR_PEER_FAILED,
                             "libfabric transport (%s): rank %d: the ring was aborted (%s) while "
                             "waiting for rank %d",
                             f->prov, t->rank, burst_status_str(f->abort_reason), r->peer);
        else if (fail != BURST_OK)
            st = fail; /* ctrl->poll's message stands */
        else
            st = fab_error_as(BURST_ERR_PEER_FAILED, f->prov, f->dead_call, f->dead_err,
                              "rank %d: %s with rank %d (tag 0x%llx)", t->rank, what, r->peer,
                              (unsigned long long)r->tag);
    } else if (r->status == BURST_OK) {
        st = BURST_OK;
    } else if (r->fi_err == 0 || r->fi_err == FI_ETRUNC) {
        st = burst_error(BURST_ERR_TRANSPORT,
                         "libfabric transport (%s): rank %d: %s of %zu bytes with rank %d "
                         "(tag 0x%llx): %s%s",
                         f->prov, t->rank, what, r->len, r->peer, (unsigned long long)r->tag,
                         r->call, r->fi_err ? ": the message is longer than the buffer" : "");
    } else {
        st = fab_error_as(r->status, f->prov, r->call, r->fi_err,
                          "rank %d: %s of %zu bytes with rank %d (tag 0x%llx)", t->rank, what,
                          r->len, r->peer, (unsigned long long)r->tag);
    }
    r->released = 1;
    if (req_final(r) || f->dead)
        req_free(f, r);
    pthread_mutex_unlock(&f->lock);
    return st;
}

static void fab_abort(struct burst_tp *t, burst_status_t reason)
{
    struct burst_fab *f = (struct burst_fab *)t;
    pthread_mutex_lock(&f->lock);
    if (!f->aborted) {
        f->aborted = 1;
        f->abort_reason = reason;
    }
    pthread_cond_broadcast(&f->done_cv);
    pthread_mutex_unlock(&f->lock);
    if (t->ctrl)
        t->ctrl->abort(t->ctrl, reason);
}

static void fab_destroy(struct burst_tp *t)
{
    struct burst_fab *f = (struct burst_fab *)t;
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stop = 1;
    if (f->thread_started)
        wake_thread(f);
    pthread_mutex_unlock(&f->lock);
    if (f->thread_started)
        pthread_join(f->thread, NULL);
    /* Cancel what is left, then close the endpoint: no buffer is touched afterwards. */
    pthread_mutex_lock(&f->lock);
    if (!f->dead)
        for (struct burst_tp_req *r = f->live; r; r = r->lnext)
            for (int i = 0; i < FAB_WINDOW; i++)
                if (r->ops[i].busy)
                    fi_cancel(&f->ep->fid, &r->ops[i].ctx);
    fab_quiesce(f, FI_ECANCELED, "burst_tp destroy");
    while (f->live)
        req_free(f, f->live);
    pthread_mutex_unlock(&f->lock);
    burst_fab_close(f);
}

static void fab_test(struct burst_tp *t, struct burst_tp_req *r, int *done)
{
    struct burst_fab *f = (struct burst_fab *)t;
    pthread_mutex_lock(&f->lock);
    if (!req_final(r) && r->status == BURST_OK && !f->aborted && !f->dead)
        fab_progress_locked(f);
    *done = req_final(r) || r->status != BURST_OK || f->aborted || f->dead;
    pthread_mutex_unlock(&f->lock);
}

static const struct burst_tp_ops fab_ops = {
    .size = sizeof(struct burst_tp_ops),
    .name = "fabric",
    .isend = fab_isend,
    .irecv = fab_irecv,
    .wait = fab_wait,
    .abort = fab_abort,
    .destroy = fab_destroy,
    .test = fab_test,
};

burst_status_t burst_fab_connect(struct burst_fab *f, const void *const *addrs, const size_t *lens,
                                 struct burst_tp **tp_p)
{
    static const char *who = "burst_fab_connect";
    if (!f || !addrs || !lens || !tp_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL", who,
                           !f       ? "fab"
                           : !addrs ? "addrs"
                           : !lens  ? "lens"
                                    : "tp_p");
    if (f->base.ops)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: already connected", who);
    for (int r = 0; r < f->base.size; r++) {
        f->peers[r] = FI_ADDR_UNSPEC;
        if (!addrs[r] || !lens[r]) { /* a peer reached through another transport (hybrid) */
            if (r == f->base.rank)
                return burst_error(BURST_ERR_INVALID_ARG, "%s: addrs[%d] (this rank) is empty", who,
                                   r);
            continue;
        }
        /* The address came from the wire: fi_av_insert reads the provider's address length, or
         * up to a NUL (shm names), whatever lens[r] says. Give it a zero-padded copy. */
        if (lens[r] >= FAB_ADDR_MAX)
            return burst_error(BURST_ERR_TRANSPORT,
                               "%s: rank %d: the address of rank %d is %zu bytes (at most %d)", who,
                               f->base.rank, r, lens[r], FAB_ADDR_MAX - 1);
        unsigned char addr[FAB_ADDR_MAX] = {0};
        memcpy(addr, addrs[r], lens[r]);
        fi_addr_t a = FI_ADDR_UNSPEC;
        int ret = fi_av_insert(f->av, addr, 1, &a, 0, NULL);
        if (ret != 1)
            return fab_error(f->prov, "fi_av_insert", ret < 0 ? ret : -FI_EADDRNOTAVAIL,
                             "rank %d: address of rank %d", f->base.rank, r);
        f->peers[r] = a;
    }
    if (f->use_thread) {
        if (pthread_create(&f->thread, NULL, progress_main, f) != 0)
            return burst_error(BURST_ERR_TRANSPORT, "%s: cannot start the progress thread", who);
        f->thread_started = 1;
    }
    f->base.ops = &fab_ops;
    f->base.ctrl = NULL;
    *tp_p = &f->base;
    return BURST_OK;
}
