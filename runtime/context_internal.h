/*
 * runtime/context_internal.h - the context as the engine sees it (private).
 */
#ifndef BURST_RUNTIME_CONTEXT_INTERNAL_H
#define BURST_RUNTIME_CONTEXT_INTERNAL_H

#include "backend.h"
#include "burst/context.h"
#include "settings.h"

struct burst_context {
    const struct burst_backend_ops *ops; /* the backend's vtable */
    void *be;                            /* its instance */
    struct burst_settings set;           /* BURST_SCOPE_CONTEXT, read at create */
};

/* BURST_BACKEND as the environment has it now: BURST_OK when unset, empty, "auto" or a backend
 * of this build, else BURST_ERR_INVALID_ARG naming who, the variable and its value. */
burst_status_t burst_backend_env_check(const char *who);

/* Check a caller's api_version against this library; names `who` in the message. */
burst_status_t burst_check_api_version(const char *who, unsigned api_version);

/* The backend's check_memory for each of the n caller tensors (names[i], ptrs[i]); BURST_OK
 * when the backend has none (its kernels address any host memory). */
burst_status_t burst_context_check_memory(const struct burst_context *ctx, const char *who, int n,
                                          const char *const *names, const void *const *ptrs);

#endif /* BURST_RUNTIME_CONTEXT_INTERNAL_H */
