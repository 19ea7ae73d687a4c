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
 *             job's secret key; or "mpi", an allgather the program supplies (oob_allgather
 *             below), typically over its MPI communicator. The bootstrap carries only a few small
 *             exchanges while the communicator is created; blocks go through libfabric.
 *
 * The library links no MPI: a program that starts its ranks with mpirun (or srun, or any
 * launcher with a collective of its own) hands burst an allgather function instead.
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

#include <stddef.h>
#include <stdint.h>

#include "burst/status.h"
#include "burst/version.h"

#ifdef __cplusplus
extern "C" {
#endif

struct burst_comm;
struct burst_local_world;

/*
 * An out-of-band allgather for the "mpi" bootstrap (burst_comm_params.oob_allgather), supplied
 * by the program: every rank of the ring contributes `len` bytes at `send`, and on return `recv`
 * holds size * len bytes, rank 0's first, then rank 1's, ... (the ranks of burst_comm_params,
 * which must be the ranks of the program's communicator). `len` is the same on every rank of one
 * call and at most 65536 (BURST_OOB_MAX_LEN).
 *
 * COLLECTIVE: the library calls it only from inside burst_comm_create, on the thread that called
 * burst_comm_create, the same number of times and in the same order on every rank (a handful of
 * times per communicator; none after burst_comm_create returns, none in burst_comm_destroy).
 * The program's ranks must therefore create their communicators in the same order, like any
 * collective of their communicator.
 *
 * Return BURST_OK once recv is complete; BURST_ERR_TIMEOUT when it did not complete within
 * `timeout_ms` (the communicator's timeout: params->timeout_ms or BURST_TIMEOUT_MS); any other
 * burst_status_t for another failure. Whatever it returns, it must not touch send or recv after
 * returning (a callback that gives up on a pending non-blocking exchange keeps its own buffers
 * for it). After a failure burst_comm_create fails with BURST_ERR_COMM_FAILED, or with the
 * callback's BURST_ERR_TIMEOUT, naming the rank and the call, and does not call it again; where
 * the exchange completes but the ranks disagree (a rank order other than the ring's, or another
 * job size) it fails with BURST_ERR_INVALID_ARG naming the mismatch.
 * The callback must not call burst functions on the communicator being created.
 *
 * With MPI (MPI_COMM_WORLD, or any communicator whose ranks are the ring's), the simplest one is
 *
 *     static burst_status_t mpi_allgather(void *ctx, const void *send, void *recv, size_t len,
 *                                         int timeout_ms)
 *     {
 *         MPI_Comm comm = *(MPI_Comm *)ctx;
 *         return MPI_Allgather(send, (int)len, MPI_BYTE, recv, (int)len, MPI_BYTE, comm) ==
 *                        MPI_SUCCESS
 *                    ? BURST_OK
 *                    : BURST_ERR_TRANSPORT;
 *     }
 *
 *     MPI_Comm world = MPI_COMM_WORLD;
 *     struct burst_comm_params p = burst_comm_params_default();
 *     p.transport = "fabric";
 *     MPI_Comm_rank(world, &p.rank);
 *     MPI_Comm_size(world, &p.size);
 *     p.bootstrap = "mpi";
 *     p.oob_allgather = mpi_allgather;
 *     p.oob_ctx = &world;
 *     burst_comm_create(&p, &comm);
 *
 * which ignores the timeout (MPI_Allgather blocks until every rank arrives; mpirun ends the job
 * when a rank dies). burstrun's own (tools/launch_mpi.c) runs MPI_Iallgather on a duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN and tests it until the timeout. The program initializes
 * and finalizes MPI itself (burst never calls MPI); MPI_THREAD_SINGLE is enough when the thread
 * that calls burst_comm_create is the one that calls MPI. Peer death is seen by the fabric's
 * errors and the communicator's timeout (MPI tells burst nothing), and a killed rank's shm
 * segment is not removed for it (the rendezvous does that).
 */
typedef burst_status_t (*burst_oob_allgather_fn)(void *ctx, const void *send, void *recv,
                                                 size_t len, int timeout_ms);

/* The largest `len` the library passes to an oob_allgather. */
#define BURST_OOB_MAX_LEN 65536

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
     * or "mpi": through the program's allgather, oob_allgather (with oob_ctx), over the
     * program's communicator, typically MPI's (the name says what it is for; any collective
     * works). Without oob_allgather, "mpi" fails with BURST_ERR_INVALID_ARG naming it. Every
     * rank's params->rank and params->size are checked against the others' in the first
     * exchange: the callback's rank order must be the ring's.
     */
    const char *bootstrap;
    /* ---- since API 0.4: read only when api_version's minor is >= 4 ---- */
    /* bootstrap "mpi": the program's allgather (see burst_oob_allgather_fn above) and the
     * pointer passed to it as ctx. Unused by the other bootstraps. */
    burst_oob_allgather_fn oob_allgather;
    void *oob_ctx;
    /* ---- since API 0.5: read only when api_version's minor is >= 5 ---- */
    /* bootstrap "rendezvous": nonzero when the rendezvous service was listening before this
     * rank started, as a launcher that runs it says (burstrun sets BURST_RENDEZVOUS_UP=1, which
     * burst_comm_create_env reads into this). A refused connection then means the service is
     * gone, with its launcher: the join fails at once with BURST_ERR_PEER_FAILED instead of
     * retrying until the timeout. 0 (default): refused connections are retried, for ranks that
     * may start before the service (rank 0 of torchrun or srun hosts it). */
    int rendezvous_up;
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
 * and optionally BURST_FABRIC, BURST_IFACE, BURST_TIMEOUT_MS: the "rendezvous" bootstrap.
 * COLLECTIVE: blocks until every rank has joined (at most the timeout). Errors name the missing
 * or malformed variable. The "mpi" bootstrap needs the program's allgather, which the
 * environment cannot give: under Open MPI's mpirun (no BURST_RENDEZVOUS, OMPI_COMM_WORLD_RANK
 * set) or with BURST_BOOTSTRAP=mpi this fails with BURST_ERR_INVALID_ARG saying so; call
 * burst_comm_create with params->oob_allgather instead.
 *
 * Without BURST_RANK and BURST_SIZE it joins ranks started by torchrun (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT) or by Slurm's srun (SLURM_PROCID, SLURM_NTASKS, and MASTER_ADDR or
 * the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST); torchrun's variables win where
 * both are set. Rank 0 then hosts the job's rendezvous in its own process, at BURST_RENDEZVOUS
 * when set, else at MASTER_ADDR (or the node list's first host), port MASTER_PORT + 1 (without
 * MASTER_PORT under srun: 20000 + SLURM_JOB_ID % 20000); the other ranks connect there. Every
 * rank needs BURST_JOB_KEY (the same 32..64 hex digits), since these launchers carry no secret.
 * burst_comm_destroy of such a communicator waits (at most the timeout) until every rank has
 * reached its own destroy, so that rank 0 stops the rendezvous only after the last call.
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

/* The most round trips of one burst_comm_pingpong call. */
#define BURST_PINGPONG_MAX_ITERS (1 << 24)

/*
 * Measure the transport between this rank and `peer`: `iters` round trips of `bytes` bytes
 * (0 allowed). The lower of the two ranks sends buf and receives it back; the higher one
 * receives into its buf and sends that back, so on return both bufs hold the lower rank's
 * bytes. *seconds_p receives the wall time of the round trips on this rank. Both ranks must call
 * it with each other as peer and the same bytes and iters; the other ranks of the ring take no
 * part, and the sequence of the ring's collective calls is not changed. It must not run
 * concurrently with another call on comm. Waits use the communicator's timeout; a failure
 * aborts the communicator as any collective call does. Invalid arguments (peer not another rank,
 * iters not in 1..BURST_PINGPONG_MAX_ITERS, buf NULL with bytes > 0, seconds_p NULL) fail with
 * BURST_ERR_INVALID_ARG naming them. burstrun --pingpong reports it as fi_pingpong does.
 */
BURST_API burst_status_t burst_comm_pingpong(struct burst_comm *comm, int peer, void *buf,
                                             size_t bytes, int iters, double *seconds_p);

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
