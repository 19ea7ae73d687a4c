/*
 * burst/comm.h - communicators: the ring of ranks that share one attention call.
 *
 * A communicator is one rank's membership in a ring of `size` ranks. Ranks exchange blocks
 * through a transport:
 *   "local"   ranks are threads of one process joined by a burst_local_world;
 *   "fabric"  ranks are processes, on one host or many, joined through libfabric (shm inside a
 *             host, tcp / verbs / efa between hosts). They find each other through a bootstrap:
 *             "rendezvous", a service (burst_rendezvous_create, run by the launcher, e.g.
 *             burstrun) that every rank reaches at `rendezvous` and proves membership to with the
 *             job's secret key; or "mpi", MPI_COMM_WORLD of a job started by Open MPI's mpirun
 *             (builds with MPI only). MPI carries only the bootstrap; blocks go through libfabric.
 *
 * Failure model: if a collective call fails on one rank (bad input, timeout, allocation), that
 * rank aborts the communicator so that its peers return BURST_ERR_PEER_FAILED instead of
 * waiting; an aborted communicator answers every later collective call with
 * BURST_ERR_COMM_FAILED. Destroy it (on every rank) and create a new one: a local world whose
 * communicators were all destroyed hosts a fresh ring. No call waits longer than the
 * communicator's timeout for a peer.
 *
 * One collective call at a time per communicator: plans sharing a communicator must not run
 * their calls concurrently (they share its message sequence).
 */
#ifndef BURST_COMM_H
#define BURST_COMM_H

#include "burst/export.h"

#include <stdint.h>

#include "burst/status.h"
#include "burst/version.h"

#ifdef __cplusplus
extern "C" {
#endif

struct burst_comm;
struct burst_local_world;

/*
 * Create the meeting point of an in-process ring of `size` ranks (1 <= size <= 65536).
 * The world must outlive every communicator created from it. Thread-safe.
 */
BURST_API burst_status_t burst_local_world_create(int size, struct burst_local_world **world_p);

/* Destroy a world; NULL is accepted. Every communicator of it must be destroyed first. */
BURST_API void burst_local_world_destroy(struct burst_local_world *world);

/* The longest peer timeout a communicator takes (params->timeout_ms, BURST_TIMEOUT_MS): one day. */
#define BURST_COMM_TIMEOUT_MAX_MS 86400000

struct burst_comm_params {
    unsigned api_version;  /* BURST_API_VERSION */
    const char *transport; /* "local" (default when NULL) or "fabric" */
    int rank;              /* 0 <= rank < size */
    int size;              /* ranks in the ring */
    /* transport "local": the world created by burst_local_world_create(size) */
    struct burst_local_world *world;
    /* Longest wait for a peer in milliseconds, at most BURST_COMM_TIMEOUT_MAX_MS; 0 =
     * BURST_TIMEOUT_MS from the environment (1..BURST_COMM_TIMEOUT_MAX_MS; a malformed value
     * fails burst_comm_create with BURST_ERR_INVALID_ARG naming it), or 120000. */
    int timeout_ms;
    /* transport "fabric": */
    /* "auto" (NULL), "shm", "tcp", "verbs", "efa". auto = shm when every rank is on one host;
     * else the fastest network provider every rank has (efa, verbs, tcp), and when some host
     * runs several ranks and every rank has shm, the hybrid "shm+<network>": shm between the
     * ranks of a host, the network between hosts. An explicit name serves every peer. */
    const char *fabric;
    const char *iface;      /* network interface for tcp/verbs, NULL = provider default */
    const char *rendezvous; /* "host:port" of the job's rendezvous service */
    const char *job_key;    /* the job's secret key (hex string) */
    /*
     * How ranks find each other: "rendezvous" (NULL: the default; needs rendezvous and job_key)
     * or "mpi": the job is MPI_COMM_WORLD (rank and size must match it). burst_comm_create
     * calls MPI_Init_thread (MPI_THREAD_SERIALIZED) if MPI is not initialized, and then
     * MPI_Finalize when the last such communicator of the process is destroyed cleanly, after
     * which MPI cannot start again: a program that creates rings one after another initializes
     * MPI itself. MPI calls are made only inside burst_comm_create and burst_comm_destroy, from
     * the calling thread. Peer death under MPI is detected by the fabric's errors and the
     * timeout, and by mpirun, which ends the whole job when a rank exits without MPI_Finalize
     * (a rank whose communicator failed or was aborted does not finalize). A killed rank's shm
     * segment is not removed for it (the rendezvous does that). BURST_ERR_UNSUPPORTED when the
     * build has no MPI (meson -Dmpi=enabled with libopenmpi-dev).
     */
    const char *bootstrap;
};

/* Parameters with every field at its default. Thread-safe. */
BURST_API struct burst_comm_params burst_comm_params_default(void);

/*
 * Join the ring as params->rank. Not collective: each rank calls it once, from any thread.
 * Fails with BURST_ERR_INVALID_ARG if the rank is already taken in the world.
 */
BURST_API burst_status_t burst_comm_create(const struct burst_comm_params *params,
                                           struct burst_comm **comm_p);

/*
 * Join the ring of a process started by a launcher (burstrun, or any launcher that sets the same
 * environment): transport "fabric" with BURST_RANK, BURST_SIZE, BURST_RENDEZVOUS, BURST_JOB_KEY,
 * and optionally BURST_FABRIC, BURST_IFACE, BURST_TIMEOUT_MS. Under Open MPI's mpirun (no
 * BURST_RENDEZVOUS, OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE set) the bootstrap is "mpi"
 * with rank and size from those two; BURST_BOOTSTRAP=mpi|rendezvous overrides the choice.
 * COLLECTIVE: blocks until every rank has joined (at most the timeout). Errors name the missing
 * or malformed variable.
 */
BURST_API burst_status_t burst_comm_create_env(struct burst_comm **comm_p);

/* Leave the ring; NULL accepted. Must not race with calls using comm. */
BURST_API void burst_comm_destroy(struct burst_comm *comm);

BURST_API int burst_comm_rank(const struct burst_comm *comm);
BURST_API int burst_comm_size(const struct burst_comm *comm);
BURST_API const char *burst_comm_transport(const struct burst_comm *comm);

/*
 * Transport "fabric": the provider the ranks agreed on ("shm", "tcp", "verbs", "efa", or a hybrid
 * such as "shm+tcp"), and the number of distinct hosts in the ring (ranks on one host share a
 * host name, a boot of one machine and a network namespace).
 * Transport "local": "" and 1. Valid while comm lives; thread-safe.
 */
BURST_API const char *burst_comm_fabric(const struct burst_comm *comm);
BURST_API int burst_comm_hosts(const struct burst_comm *comm);

/*
 * Mark the communicator failed with `reason` and wake every peer waiting on it (they return
 * BURST_ERR_PEER_FAILED). Thread-safe; may be called from a watchdog thread. Idempotent.
 */
BURST_API void burst_comm_abort(struct burst_comm *comm, burst_status_t reason);

/*
 * The rendezvous service of a multi-process job (run by the launcher). It listens on
 * bind_addr:port (NULL = "127.0.0.1": loopback only unless told otherwise; port 0 = any free
 * port), admits exactly `size` ranks that present `job_key` (NULL = generate a random 256-bit
 * key), lets them exchange their addresses, and keeps a control connection to each rank for the
 * life of the job: when a rank dies or aborts, every other rank is told at once. Serves from a
 * background thread; all calls are thread-safe.
 */
struct burst_rendezvous;

BURST_API burst_status_t burst_rendezvous_create(const char *bind_addr, int port, int size,
                                                 const char *job_key,
                                                 struct burst_rendezvous **rv_p);

/* "host:port" ranks connect to, and the job key they must present. Valid while rv lives. */
BURST_API const char *burst_rendezvous_address(const struct burst_rendezvous *rv);
BURST_API const char *burst_rendezvous_key(const struct burst_rendezvous *rv);

/* The launcher saw rank `rank` fail (e.g. its process died): tell every other rank. */
BURST_API void burst_rendezvous_report_failure(struct burst_rendezvous *rv, int rank,
                                               const char *why);

/* Rank that failed first (reported, aborted or disconnected early), or -1. */
BURST_API int burst_rendezvous_failed_rank(const struct burst_rendezvous *rv);

/* Stop serving and close every connection; NULL accepted. */
BURST_API void burst_rendezvous_destroy(struct burst_rendezvous *rv);

#ifdef __cplusplus
}
#endif

#endif /* BURST_COMM_H */
