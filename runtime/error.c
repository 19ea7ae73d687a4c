/* runtime/error.c - status strings and the per-thread last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"

static _Thread_local char last_error[512];

const char *burst_status_str(burst_status_t status)
{
    switch (status) {
    case BURST_OK: return "success";
    case BURST_ERR_INVALID_ARG: return "invalid argument";
    case BURST_ERR_UNSUPPORTED: return "unsupported";
    case BURST_ERR_NO_MEMORY: return "out of host memory";
    case BURST_ERR_VERSION: return "incompatible API version";
    case BURST_ERR_PLAN_MISMATCH: return "plans differ between ranks";
    case BURST_ERR_INTERNAL: return "internal error";
    case BURST_ERR_TOO_LARGE: return "size too large";
    case BURST_ERR_NO_DEVICE: return "no usable device";
    case BURST_ERR_DEVICE: return "device error";
    case BURST_ERR_DEVICE_MEMORY: return "out of device memory";
    case BURST_ERR_TRANSPORT: return "transport error";
    case BURST_ERR_TIMEOUT: return "timed out waiting for a peer";
    case BURST_ERR_PEER_FAILED: return "a peer failed";
    case BURST_ERR_COMM_FAILED: return "communicator was aborted";
    }
    return "unknown status";
}

const char *burst_last_error(void)
{
    return last_error;
}

void burst_error_clear(void)
{
    last_error[0] = '\0';
}

burst_status_t burst_error(burst_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return status;
}
