/*
 * runtime/logger.h - the library's side of the logger of burst/log.h (private).
 *
 * Every message the library has for the program, other than a failing call's burst_last_error,
 * goes through burst_log; nothing else in the library writes to stderr or stdout.
 *
 *   burst_log(BURST_LOG_INFO, BURST_SUB_TRANSPORT, rank, "communicator of %d ranks over %s",
 *             size, fabric);
 *
 * A message below its subsystem's threshold costs one atomic load; burst_log_on answers that
 * question first where building the message is itself work (a report of many lines).
 * burst_log keeps errno and the calling thread's burst_last_error.
 */
#ifndef BURST_RUNTIME_LOGGER_H
#define BURST_RUNTIME_LOGGER_H

#include "burst/log.h"
#include "burst/status.h"
#include "error.h"

/* The subsystems, in the order of burst_log_sub_names. */
enum burst_log_sub {
    BURST_SUB_RUNTIME,   /* contexts, plans, the ring engine, settings */
    BURST_SUB_CPU,       /* the cpu backend */
    BURST_SUB_VULKAN,    /* the Vulkan backend */
    BURST_SUB_CUDA,      /* the CUDA backend */
    BURST_SUB_TRANSPORT, /* communicators, libfabric, bootstrap, IPC */
    BURST_SUB_COUNT
};

/* "runtime", "cpu", "vulkan", "cuda", "transport". */
extern const char *const burst_log_sub_names[BURST_SUB_COUNT];

/* Does a message of this level from sub pass its threshold? */
int burst_log_on(enum burst_log_sub sub, burst_log_level_t level);

/* Deliver one message (printf format; a trailing newline is dropped) to the program's callback
 * or the default sink, when it passes sub's threshold. rank: the rank it concerns, or -1 (the
 * process's rank, BURST_RANK, is then given where set). */
void burst_log(burst_log_level_t level, enum burst_log_sub sub, int rank, const char *fmt, ...)
    BURST_PRINTF(4, 5);

/* The settings table's checks of BURST_LOG and BURST_LOG_FILE (settings.h, struct
 * burst_setting.check): BURST_OK, or BURST_ERR_INVALID_ARG naming who, the variable, its value
 * and the part that is wrong. */
burst_status_t burst_log_spec_check(const char *who, const char *name, const char *value);
burst_status_t burst_log_file_check(const char *who, const char *name, const char *value);

#endif /* BURST_RUNTIME_LOGGER_H */
