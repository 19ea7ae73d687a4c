/*
 * transport/tp_comm.c - communicators: transport choice, traffic counting, timeouts, abort,
 * and the ring allgather used by the plan handshake.
 */
#include <stdio.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "context_internal.h"
#include "error.h"
#include "fault.h"
#include "logger.h"
#include "settings.h"
#include "tp_bootstrap.h"
#include "tp_comm.h"
#include "tp_ipc.h"
#include "tp_launch_env.h"

struct burst_comm_params burst_comm_params_default(void)
{
    struct burst_comm_params p = {
        .api_version = BURST_API_VERSION,
        .transport = "local",
        .rank = 0,
        .size = 1,
        .world = NULL,
        .timeout_ms = 0,
        .fabric = NULL,
        .iface = NULL,
        .rendezvous = NULL,
        .job_key = NULL,
        .bootstrap = NULL,
        .oob_allgather = NULL,
        .oob_ctx = NULL,
        .rendezvous_up = 0,
    };
    return p;
}

const char *const burst_fab_names[BURST_FAB_NAMES] = {"shm", "tcp", "verbs", "efa"};

int burst_fab_index(const char *name)
{
    for (int i = 0; i < BURST_FAB_NAMES; i++)
        if (strcmp(name, burst_fab_names[i]) == 0)
            return i;
    return -1;
}

/* params->timeout_ms, else BURST_TIMEOUT_MS, else the default (settings.h). */
static int comm_timeout(const struct burst_settings *set, int timeout_ms)
{
    return timeout_ms ? timeout_ms : (int)burst_set_long(set, BURST_SET_TIMEOUT_MS);
}

/* Transport "fabric": check the fields, then join through the bootstrap. */
static burst_status_t comm_create_fabric_checked(const struct burst_comm_params *p,
                                                 const struct burst_settings *set,
                                                 struct burst_comm **comm_p)
{
    static const char *who = "burst_comm_create";
    const char *boot = p->bootstrap && *p->bootstrap ? p->bootstrap : "rendezvous";
    int mpi = strcmp(boot, "mpi") == 0;
    if (!mpi && strcmp(boot, "rendezvous") != 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->bootstrap = \"%s\" is not one of rendezvous, mpi", who,
                           boot);
    if (mpi && !p->oob_allgather)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->bootstrap = \"mpi\" but params->oob_allgather is NULL "
                           "(the library links no MPI: the program passes its allgather, e.g. "
                           "over MPI_COMM_WORLD; see burst/comm.h)",
                           who);
    if (!mpi) { /* under "mpi" the program's communicator is the job: no address, no key */
        if (!p->rendezvous || !*p->rendezvous)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: params->rendezvous is %s (transport \"fabric\" needs the "
                               "\"host:port\" of the job's rendezvous, or params->bootstrap = "
                               "\"mpi\" under mpirun)",
                               who, p->rendezvous ? "empty" : "NULL");
        if (!p->job_key)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: params->job_key is NULL (transport \"fabric\" needs the "
                               "job's key)",
                               who);
        if (!burst_boot_key_valid(p->job_key))
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: params->job_key (%zu characters) is not %d..%d hex digits", who,
                               strlen(p->job_key), BURST_BOOT_KEY_MIN, BURST_BOOT_KEY_LEN);
    }
    /* params->fabric, else BURST_FABRIC (which only overrides "auto"), else "auto". */
    const char *want = p->fabric && *p->fabric ? p->fabric : "auto";
    const char *env = burst_set_str(set, BURST_SET_FABRIC);
    int from_env = 0;
    if (strcmp(want, "auto") == 0 && env) {
        want = env;
        from_env = 1;
    }
    if (strcmp(want, "auto") != 0 && burst_fab_index(want) < 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s = \"%s\" is not one of auto, shm, tcp, verbs, efa", who,
                           from_env ? "BURST_FABRIC" : "params->fabric", want);
#ifdef BURST_HAVE_FABRIC
    struct burst_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    c->rank = p->rank;
    c->size = p->size;
    c->timeout_ms = comm_timeout(set, p->timeout_ms);
    atomic_init(&c->failed, 0);
    burst_status_t st = burst_comm_join_fabric(p, want, mpi, c);
    if (st != BURST_OK) {
        free(c);
        return st;
    }
    *comm_p = c;
    burst_log(BURST_LOG_INFO, BURST_SUB_TRANSPORT, c->rank,
              "communicator: rank %d of %d over libfabric %s (bootstrap %s), %d host(s)", c->rank,
              c->size, burst_comm_fabric(c), boot, c->nhosts);
    return BURST_OK;
#else
    return burst_error(BURST_ERR_UNSUPPORTED,
                       "%s: params->transport = \"fabric\": this build has no libfabric "
                       "(rebuild with meson -Dfabric=enabled and libfabric-dev installed)",
                       who);
#endif
}

burst_status_t burst_comm_create(const struct burst_comm_params *in, struct burst_comm **comm_p)
{
    static const char *who = "burst_comm_create";
    burst_error_clear();
    if (!in)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params is NULL", who);
    if (!comm_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: comm_p is NULL", who);
    burst_status_t st = burst_check_api_version(who, in->api_version);
    if (st != BURST_OK)
        return st;
    /* A caller built against an older API has no fields past its version's: they stay at
     * their defaults. */
    struct burst_comm_params pcopy = burst_comm_params_default();
    const unsigned minor = in->api_version & 0xffffu;
    memcpy(&pcopy, in,
           minor >= 5   ? sizeof(pcopy)
           : minor >= 4 ? offsetof(struct burst_comm_params, rendezvous_up)
                        : offsetof(struct burst_comm_params, oob_allgather));
    const struct burst_comm_params *params = &pcopy;
    if (params->size < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params->size = %d must be >= 1", who,
                           params->size);
    if (params->rank < 0 || params->rank >= params->size)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params->rank = %d is not in 0..%d", who,
                           params->rank, params->size - 1);
    if (params->timeout_ms < 0 || params->timeout_ms > BURST_COMM_TIMEOUT_MAX_MS)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params->timeout_ms = %d is not in 0..%d",
                           who, params->timeout_ms, BURST_COMM_TIMEOUT_MAX_MS);
    burst_settings_warn_unknown();
    struct burst_settings set = {0};
    if ((st = burst_settings_load(who, BURST_SCOPE_COMM | BURST_SCOPE_FABRIC | BURST_SCOPE_LOG,
                                  &set)) != BURST_OK ||
        (st = burst_fault_env_check(who)) != BURST_OK)
        return st;
    int timeout = comm_timeout(&set, params->timeout_ms);
    const char *name = params->transport ? params->transport : "local";
    if (strcmp(name, "fabric") == 0)
        return comm_create_fabric_checked(params, &set, comm_p);
    if (strcmp(name, "local") != 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->transport = \"%s\" is not a transport (have: local, "
                           "fabric)",
                           who, name);
    if (!params->world)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->world is NULL (transport \"local\" needs the world from "
                           "burst_local_world_create)",
                           who);
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
    c->timeout_ms = timeout;
    c->nhosts = 1;
    atomic_init(&c->failed, 0);
    *comm_p = c;
    burst_log(BURST_LOG_DEBUG, BURST_SUB_TRANSPORT, c->rank,
              "communicator: rank %d of %d in this process (transport local)", c->rank, c->size);
    return BURST_OK;
}

/* A variable a launcher must set, whose text is s (NULL when unset or empty): an error naming it
 * when unset, else the settings' rule (settings.h). */
static burst_status_t env_required(const char *who, const char *name, const char *s, long lo,
                                   long hi, long *v_p)
{
    if (!s || !*s)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s is not set (a launcher such as burstrun sets it)", who, name);
    if (!burst_settings_parse_long(s, lo, hi, v_p))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s = \"%.64s\" is not an integer in %ld..%ld", who, name, s, lo,
                           hi);
    return BURST_OK;
}

/* The fields of a rank that joins from the environment, from the communicator settings. */
static struct burst_comm_params env_params(const struct burst_settings *set, int rank, int size)
{
    struct burst_comm_params p = burst_comm_params_default();
    p.transport = "fabric";
    p.rank = rank;
    p.size = size;
    p.timeout_ms = burst_set_given(set, BURST_SET_TIMEOUT_MS)
                       ? (int)burst_set_long(set, BURST_SET_TIMEOUT_MS)
                       : 0;
    p.fabric = burst_set_str(set, BURST_SET_FABRIC);
    p.iface = burst_set_str(set, BURST_SET_IFACE);
    p.bootstrap = "rendezvous";
    return p;
}

/* A rank started by torchrun or srun (tp_launch_env.h): rank 0 hosts the job's rendezvous at
 * le->address in this process, every rank joins it with the job key from BURST_JOB_KEY. */
static burst_status_t create_launched(const char *who, const struct burst_settings *set,
                                      const struct burst_launch_env *le, const char *key,
                                      struct burst_comm **comm_p)
{
    if (!key || !burst_boot_key_valid(key))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: BURST_JOB_KEY is %s: the ranks of a %s job (rank %d of %d) share "
                           "the job's secret key through it, %d..%d hex digits (e.g. export "
                           "BURST_JOB_KEY=$(openssl rand -hex 32) before starting the launcher)",
                           who, key ? "malformed" : "not set", le->launcher, le->rank, le->size,
                           BURST_BOOT_KEY_MIN, BURST_BOOT_KEY_LEN);
    struct burst_rendezvous *rv = NULL;
    burst_status_t st;
    char msg[512];
    if (le->rank == 0 &&
        (st = burst_rendezvous_create(le->host, le->port, le->size, key, &rv)) != BURST_OK) {
        snprintf(msg, sizeof(msg), "%s", burst_last_error());
        return burst_error(st, "%s: rank 0 of the %s job cannot host the rendezvous at %s: %s", who,
                           le->launcher, le->address, msg);
    }
    struct burst_comm_params p = env_params(set, le->rank, le->size);
    p.rendezvous = le->address;
    p.job_key = key;
    st = burst_comm_create(&p, comm_p);
    if (st != BURST_OK) {
        snprintf(msg, sizeof(msg), "%s", burst_last_error());
        burst_rendezvous_destroy(rv);
        return burst_error(st, "%s", msg);
    }
    (*comm_p)->launched = 1;
    (*comm_p)->hosted = rv;
    return BURST_OK;
}

burst_status_t burst_comm_create_env(struct burst_comm **comm_p)
{
    static const char *who = "burst_comm_create_env";
    burst_error_clear();
    if (!comm_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: comm_p is NULL", who);
    burst_settings_warn_unknown();
    struct burst_settings set = {0};
    burst_status_t st = burst_settings_load(who, BURST_SCOPE_LAUNCH, &set);
    if (st != BURST_OK)
        return st;
    const char *boot = burst_set_str(&set, BURST_SET_BOOTSTRAP);
    const char *rv = burst_set_str(&set, BURST_SET_RENDEZVOUS);
    const char *key = burst_set_str(&set, BURST_SET_JOB_KEY);
    const char *ompi_rank = getenv("OMPI_COMM_WORLD_RANK");
    /* Bootstrap "mpi" needs the program's allgather (params->oob_allgather), which no variable
     * can give: chosen by BURST_BOOTSTRAP, or by mpirun's variables without a rendezvous, it is
     * an error that says what to do instead. */
    int ompi = !rv && ompi_rank && *ompi_rank;
    if (boot ? strcmp(boot, "mpi") == 0 : ompi)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s: bootstrap \"mpi\" needs the program's allgather, which "
                           "the environment cannot give (the library links no MPI): call "
                           "burst_comm_create with params->bootstrap = \"mpi\" and "
                           "params->oob_allgather (burst/comm.h), or start the ranks with "
                           "burstrun (BURST_RENDEZVOUS)",
                           who,
                           boot ? "BURST_BOOTSTRAP = \"mpi\""
                                : "started by Open MPI's mpirun (OMPI_COMM_WORLD_RANK set, "
                                  "BURST_RENDEZVOUS not)");
    if (!burst_set_given(&set, BURST_SET_RANK) && !burst_set_given(&set, BURST_SET_SIZE)) {
        struct burst_launch_env le;
        int found = burst_launch_env_detect(who, rv, &le);
        if (found < 0)
            return BURST_ERR_INVALID_ARG;
        if (found && (st = burst_settings_load(who, BURST_SCOPE_COMM, &set)) != BURST_OK)
            return st;
        if (found)
            return create_launched(who, &set, &le, key, comm_p);
    }
    long rank = 0, size = 0;
    st = env_required(who, "BURST_SIZE", burst_set_str(&set, BURST_SET_SIZE), 1, 65536, &size);
    if (st == BURST_OK)
        st = env_required(who, "BURST_RANK", burst_set_str(&set, BURST_SET_RANK), 0, size - 1,
                          &rank);
    if (st == BURST_OK)
        st = burst_settings_load(who, BURST_SCOPE_COMM, &set);
    if (st != BURST_OK)
        return st;
    if (!rv)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: BURST_RENDEZVOUS is not set (a launcher such as burstrun sets it "
                           "to the \"host:port\" of the job's rendezvous)",
                           who);
    if (!key)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: BURST_JOB_KEY is not set (a launcher such as burstrun sets it)",
                           who);
    if (!burst_boot_key_valid(key))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: BURST_JOB_KEY (%zu characters) is not %d..%d hex digits", who,
                           strlen(key), BURST_BOOT_KEY_MIN, BURST_BOOT_KEY_LEN);
    struct burst_comm_params p = env_params(&set, (int)rank, (int)size);
    p.rendezvous = rv;
    p.job_key = key;
    p.rendezvous_up = burst_set_long(&set, BURST_SET_RENDEZVOUS_UP) != 0;
    return burst_comm_create(&p, comm_p);
}

/* Release the copies of BURST_FAULT=duplicate (never received: a zero wait cancels them),
 * keeping the thread's last error message. */
static void drain_duplicates(struct burst_comm *comm)
{
    if (!comm->ndup)
        return;
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", burst_last_error());
    for (int i = 0; i < comm->ndup; i++) {
        comm->tp->ops->wait(comm->tp, comm->dup_req[i], 0);
        free(comm->dup_buf[i]);
    }
    comm->ndup = 0;
    if (keep[0])
        burst_error(BURST_ERR_INTERNAL, "%s", keep);
    else
        burst_error_clear();
}

/* Ranks of a torchrun or srun job: one last bootstrap round, so that rank 0 stops the
 * rendezvous it hosts only once every rank has finished its calls. Skipped once the
 * communicator failed (the peers know); the thread's last error message is kept. */
static void leave_round(struct burst_comm *comm)
{
    if (!comm->launched || !comm->boot || atomic_load(&comm->failed))
        return;
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", burst_last_error());
    const unsigned char **blob = calloc((size_t)comm->size, sizeof(*blob));
    size_t *lens = calloc((size_t)comm->size, sizeof(*lens));
    unsigned char one = 1, *buf = NULL;
    if (blob && lens)
        (void)burst_boot_allgather(comm->boot, &one, 1, &buf, blob, lens);
    free(buf);
    free(blob);
    free(lens);
    if (keep[0])
        burst_error(BURST_ERR_INTERNAL, "%s", keep);
    else
        burst_error_clear();
}

void burst_comm_destroy(struct burst_comm *comm)
{
    if (!comm)
        return;
    leave_round(comm);
    drain_duplicates(comm);
    comm->tp->ops->destroy(comm->tp);
    burst_boot_leave(comm->boot, 1); /* after the endpoint is gone: BYE means "cleaned up" */
    burst_rendezvous_destroy(comm->hosted);
    free(comm->host_of);
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

const char *burst_comm_fabric(const struct burst_comm *comm)
{
    return comm ? comm->fabric : "";
}

int burst_comm_hosts(const struct burst_comm *comm)
{
    return comm ? comm->nhosts : 0;
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
                           "it and create a new one",
                           comm->rank);
    return BURST_OK;
}

static burst_status_t fail(struct burst_comm *comm, burst_status_t st)
{
    /* Keep the message of the failure; make peers stop waiting for this rank. */
    atomic_store(&comm->failed, 1);
    comm->tp->ops->abort(comm->tp, st);
    return st;
}

/* BURST_FAULT=duplicate: send a private copy of the message too (kept until destroy). A
 * failure aborts the ring; the original request stays the caller's to wait for. */
static void send_duplicate(struct burst_comm *comm, int peer, uint64_t tag, const void *buf,
                           size_t len)
{
    void *copy = malloc(len ? len : 1);
    if (!copy || comm->ndup == (int)(sizeof(comm->dup_req) / sizeof(comm->dup_req[0]))) {
        free(copy);
        return; /* no room: the duplicate is skipped */
    }
    if (len)
        memcpy(copy, buf, len);
    struct burst_tp_req *r = NULL;
    burst_status_t st = comm->tp->ops->isend(comm->tp, peer, tag, copy, len, &r);
    if (st != BURST_OK) { /* the ring is aborted: the caller's waits report it */
        free(copy);
        fail(comm, st);
        return;
    }
    comm->dup_req[comm->ndup] = r;
    comm->dup_buf[comm->ndup++] = copy;
}

static burst_status_t comm_isend(struct burst_comm *comm, int peer, uint64_t tag, const void *buf,
                                 size_t len, const struct burst_tp_dev *dev,
                                 struct burst_tp_req **req_p)
{
    int ms = 0; /* ring messages only: never the plan's handshake, nor a ping-pong's */
    unsigned kind = (unsigned)((tag >> 24) & 0xff);
    enum burst_fault_msg fault = kind == BURST_MSG_HANDSHAKE || kind == BURST_MSG_PING
                                     ? BURST_FAULT_MSG_NONE
                                     : burst_fault_send(comm->rank, &ms);
    if (fault == BURST_FAULT_MSG_DROP) {
        *req_p = NULL; /* as if sent: burst_comm_wait(NULL) succeeds */
        return BURST_OK;
    }
    if (fault == BURST_FAULT_MSG_TRUNCATE)
        len /= 2;
    if (fault == BURST_FAULT_MSG_DELAY) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    burst_status_t st = dev ? comm->tp->ops->isend_dev(comm->tp, peer, tag, buf, len, dev, req_p)
                            : comm->tp->ops->isend(comm->tp, peer, tag, buf, len, req_p);
    if (st != BURST_OK)
        return fail(comm, st);
    /* a duplicate needs a private copy of the buffer: host messages only */
    if (fault == BURST_FAULT_MSG_DUPLICATE && !dev)
        send_duplicate(comm, peer, tag, buf, len);
    if (comm->count) {
        comm->count->bytes_sent += len;
        comm->count->msgs_sent++;
    }
    return BURST_OK;
}

static burst_status_t comm_irecv(struct burst_comm *comm, int peer, uint64_t tag, void *buf,
                                 size_t len, const struct burst_tp_dev *dev,
                                 struct burst_tp_req **req_p)
{
    burst_status_t st = dev ? comm->tp->ops->irecv_dev(comm->tp, peer, tag, buf, len, dev, req_p)
                            : comm->tp->ops->irecv(comm->tp, peer, tag, buf, len, req_p);
    if (st != BURST_OK)
        return fail(comm, st);
    if (comm->count) {
        comm->count->bytes_recv += len;
        comm->count->msgs_recv++;
    }
    return BURST_OK;
}

burst_status_t burst_comm_isend(struct burst_comm *comm, int peer, uint64_t tag, const void *buf,
                                size_t len, struct burst_tp_req **req_p)
{
    return comm_isend(comm, peer, tag, buf, len, NULL, req_p);
}

burst_status_t burst_comm_irecv(struct burst_comm *comm, int peer, uint64_t tag, void *buf,
                                size_t len, struct burst_tp_req **req_p)
{
    return comm_irecv(comm, peer, tag, buf, len, NULL, req_p);
}

int burst_comm_in_process(const struct burst_comm *comm)
{
    return strcmp(comm->tp->ops->name, "local") == 0;
}

int burst_comm_moves_device(const struct burst_comm *comm)
{
    return comm->tp->ops->size >= sizeof(struct burst_tp_ops) && comm->tp->ops->isend_dev &&
           comm->tp->ops->irecv_dev;
}

int burst_comm_device_peer(const struct burst_comm *comm, int peer)
{
    if (!burst_comm_moves_device(comm) || peer < 0 || peer >= comm->size)
        return 0;
    return burst_comm_in_process(comm) || burst_tp_ipc_peer(comm->tp, peer);
}

burst_status_t burst_comm_isend_dev(struct burst_comm *comm, int peer, uint64_t tag,
                                    const void *buf, size_t len, const struct burst_tp_dev *dev,
                                    struct burst_tp_req **req_p)
{
    return comm_isend(comm, peer, tag, buf, len, dev, req_p);
}

burst_status_t burst_comm_irecv_dev(struct burst_comm *comm, int peer, uint64_t tag, void *buf,
                                    size_t len, const struct burst_tp_dev *dev,
                                    struct burst_tp_req **req_p)
{
    return comm_irecv(comm, peer, tag, buf, len, dev, req_p);
}

void burst_comm_start(struct burst_comm *comm, struct burst_tp_req *req)
{
    if (req && comm->tp->ops->size >= sizeof(struct burst_tp_ops) && comm->tp->ops->start &&
        !atomic_load(&comm->failed))
        comm->tp->ops->start(comm->tp, req, comm->timeout_ms);
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
