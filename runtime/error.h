/*
 * runtime/error.h - internal helpers to fail with a status and a per-thread message.
 *
 *   return burst_error(BURST_ERR_INVALID_ARG, "burst_plan_create: params->head_dim = %d is not a "
 *                      "multiple of 8", d);
 */
#ifndef BURST_RUNTIME_ERROR_H
#define BURST_RUNTIME_ERROR_H

#include "burst/status.h"

#if defined(__GNUC__)
#define BURST_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BURST_PRINTF(a, b)
#endif

/* Record a message for the calling thread and return status (for `return burst_error(...)`). */
burst_status_t burst_error(burst_status_t status, const char *fmt, ...) BURST_PRINTF(2, 3);

/* Forget the calling thread's message (every public entry point starts with it). */
void burst_error_clear(void);

#endif /* BURST_RUNTIME_ERROR_H */
