/*
 * runtime/context_internal.h - the context as the engine sees it (private).
 */
#ifndef BURST_RUNTIME_CONTEXT_INTERNAL_H
#define BURST_RUNTIME_CONTEXT_INTERNAL_H

#include "backend.h"
#include "burst/context.h"

struct burst_context {
    const struct burst_backend_ops *ops; /* the backend's vtable */
    void *be;                            /* its instance */
};

/* Check a caller's api_version against this library; names `who` in the message. */
burst_status_t burst_check_api_version(const char *who, unsigned api_version);

#endif /* BURST_RUNTIME_CONTEXT_INTERNAL_H */
