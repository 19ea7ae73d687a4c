/*
 * burst/status.h - status codes and error messages.
 *
 * Every fallible call returns a burst_status_t: BURST_OK (0) on success, a negative code on
 * failure. Codes are grouped: -1..-99 generic, -100..-199 device/backend, -200..-299 transport.
 * Output arguments (names ending in _p) are written only on success.
 *
 * On failure the library also records a human-readable message for the calling thread, naming
 * the bad argument and its value, e.g. "burst_plan_create: params->head_dim = 12 is not a
 * multiple of 8". Read it with burst_last_error(). The library never aborts, and it prints
 * nothing unless asked to: its other messages (warnings, what it chose, reports a switch asks
 * for) go through the logger of burst/log.h, silent by default.
 */
#ifndef BURST_STATUS_H
#define BURST_STATUS_H

#include "burst/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum burst_status {
    BURST_OK = 0,

    /* generic */
    BURST_ERR_INVALID_ARG = -1,   /* an argument is NULL, out of range or inconsistent */
    BURST_ERR_UNSUPPORTED = -2,   /* valid request this build/backend cannot do */
    BURST_ERR_NO_MEMORY = -3,     /* host allocation failed */
    BURST_ERR_VERSION = -4,       /* caller built against an incompatible API version */
    BURST_ERR_PLAN_MISMATCH = -5, /* ranks created different plans (see message for rank/field) */
    BURST_ERR_INTERNAL = -6,      /* a bug in burst: please report it */
    BURST_ERR_TOO_LARGE = -7,     /* a size overflows what the implementation can index */

    /* device / backend */
    BURST_ERR_NO_DEVICE = -100,     /* requested backend has no usable device or driver */
    BURST_ERR_DEVICE = -101,        /* the device or driver reported an error */
    BURST_ERR_DEVICE_MEMORY = -102, /* device memory exhausted */

    /* transport */
    BURST_ERR_TRANSPORT = -200,   /* the transport reported an error */
    BURST_ERR_TIMEOUT = -201,     /* a peer did not answer within the communicator's timeout */
    BURST_ERR_PEER_FAILED = -202, /* a peer failed or aborted; the communicator is unusable */
    BURST_ERR_COMM_FAILED = -203, /* this communicator was aborted earlier; recreate it */
} burst_status_t;

/* Short static description of a status code ("invalid argument"). Never NULL; thread-safe. */
BURST_API const char *burst_status_str(burst_status_t status);

/*
 * Message describing the last failure on the calling thread, or "" if none. The pointer stays
 * valid until the next burst call on this thread. Thread-safe (per-thread storage).
 */
BURST_API const char *burst_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* BURST_STATUS_H */
