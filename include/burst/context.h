/*
 * burst/context.h - the compute context: which backend runs the local attention.
 *
 * A context owns a backend instance (its device, worker threads and caches). One context may be
 * shared by every rank of a process (e.g. the ranks of an in-process ring, one per thread): all
 * context calls are thread-safe. A context must outlive every plan created with it.
 */
#ifndef BURST_CONTEXT_H
#define BURST_CONTEXT_H

#include "burst/export.h"

#include "burst/status.h"
#include "burst/version.h"

#ifdef __cplusplus
extern "C" {
#endif

struct burst_context;

struct burst_context_params {
    /* Set to BURST_API_VERSION: lets a newer library serve code built against an older header. */
    unsigned api_version;
    /*
     * Backend name: "cpu", or "auto" / NULL for the first usable backend in priority order.
     * The environment variable BURST_BACKEND, when set, overrides "auto" (not explicit names).
     */
    const char *backend;
    /* Worker threads for the cpu backend; 0 = BURST_NUM_THREADS or else every online core. */
    int num_threads;
};

/* Parameters with every field at its default (api_version = BURST_API_VERSION). Thread-safe. */
BURST_API struct burst_context_params burst_context_params_default(void);

/*
 * Create a context. params may be NULL (defaults). On success *ctx_p receives a context the
 * caller destroys with burst_context_destroy(). Blocks while the backend initialises.
 * Errors: BURST_ERR_VERSION, BURST_ERR_INVALID_ARG (unknown backend name, negative threads),
 * BURST_ERR_NO_DEVICE (named backend not usable here), BURST_ERR_NO_MEMORY.
 */
BURST_API burst_status_t burst_context_create(const struct burst_context_params *params,
                                              struct burst_context **ctx_p);

/* Destroy a context; NULL is accepted. No plan created with it may be in use or remain. */
BURST_API void burst_context_destroy(struct burst_context *ctx);

/* Name of the backend the context runs on ("cpu"). Valid while ctx lives. Thread-safe. */
BURST_API const char *burst_context_backend(const struct burst_context *ctx);

/* Number of compute threads the context uses (cpu backend), or 1. Thread-safe. */
BURST_API int burst_context_num_threads(const struct burst_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* BURST_CONTEXT_H */
