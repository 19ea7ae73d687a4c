/*
 * burst/comm.h - communicators: the ring of ranks that share one attention call.
 *
 * A communicator is one rank's membership in a ring of `size` ranks. Ranks exchange blocks
 * through a transport; this release ships the in-process transport "local", whose ranks are
 * threads of one process joined by a burst_local_world. (Process and network transports plug in
 * behind the same calls.)
 *
 * Failure model: if a collective call fails on one rank (bad input, timeout, allocation), that
 * rank aborts the communicator so that its peers return BURST_ERR_PEER_FAILED instead of
 * waiting; an aborted communicator answers every later collective call with
 * BURST_ERR_COMM_FAILED. Destroy it and create a new one. No call waits longer than the
 * communicator's timeout for a peer.
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

struct burst_comm_params {
    unsigned api_version;  /* BURST_API_VERSION */
    const char *transport; /* "local" (default when NULL) */
    int rank;              /* 0 <= rank < size */
    int size;              /* ranks in the ring */
    /* transport "local": the world created by burst_local_world_create(size) */
    struct burst_local_world *world;
    /* Longest wait for a peer in milliseconds; 0 = BURST_TIMEOUT_MS from the environment,
     * or 120000. */
    int timeout_ms;
};

/* Parameters with every field at its default. Thread-safe. */
BURST_API struct burst_comm_params burst_comm_params_default(void);

/*
 * Join the ring as params->rank. Not collective: each rank calls it once, from any thread.
 * Fails with BURST_ERR_INVALID_ARG if the rank is already taken in the world.
 */
BURST_API burst_status_t burst_comm_create(const struct burst_comm_params *params,
                                 struct burst_comm **comm_p);

/* Leave the ring; NULL accepted. Must not race with calls using comm. */
BURST_API void burst_comm_destroy(struct burst_comm *comm);

BURST_API int burst_comm_rank(const struct burst_comm *comm);
BURST_API int burst_comm_size(const struct burst_comm *comm);
BURST_API const char *burst_comm_transport(const struct burst_comm *comm);

/*
 * Mark the communicator failed with `reason` and wake every peer waiting on it (they return
 * BURST_ERR_PEER_FAILED). Thread-safe; may be called from a watchdog thread. Idempotent.
 */
BURST_API void burst_comm_abort(struct burst_comm *comm, burst_status_t reason);

#ifdef __cplusplus
}
#endif

#endif /* BURST_COMM_H */
