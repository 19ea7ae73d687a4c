/*
 * burst/log.h - the library's messages: levels, subsystems, where they go.
 *
 * burst returns every failure as a burst_status_t with a message (status.h); besides those it
 * has things worth telling that are not failures: a warning about a setting it ignores, what a
 * context or communicator was created on, the reports that a profiling switch asks for. Those
 * go through one place, this logger. Each message has
 *
 *   - a level: error, warn, info or debug (burst_log_level_t);
 *   - a subsystem, the layer that speaks: "runtime" (contexts, plans, the ring engine,
 *     settings), "cpu", "vulkan", "cuda" (the backends) or "transport" (communicators,
 *     libfabric, bootstrap);
 *   - the rank it concerns, where known: the rank of the communicator or plan that speaks, else
 *     the process's rank as its launcher set it (BURST_RANK), else -1.
 *
 * Which messages pass: a threshold per subsystem, from the environment variable BURST_LOG,
 *
 *   BURST_LOG=info                          every subsystem at info and above
 *   BURST_LOG=warn,transport=debug          warn, except transport at debug
 *   BURST_LOG=off,vulkan=info               vulkan's info and above only
 *
 * a comma-separated list of items applied in order, from warn for every subsystem: a level
 * (error, warn, info, debug, or off) sets every subsystem, SUBSYSTEM=LEVEL sets one
 * ("transport=debug" alone leaves the others at warn). Where BURST_LOG is unset or empty, the
 * thresholds are the program's (burst_set_log_levels), else warn for every subsystem. A
 * malformed BURST_LOG makes the next burst_context_create, burst_comm_create or
 * burst_settings_check fail with BURST_ERR_INVALID_ARG naming it; the logger itself then acts
 * as if it were unset.
 *
 * Where messages go: to the program's callback (burst_set_log_callback) when it installed one;
 * else to the default sink, which writes one line per message,
 *
 *   [burst] warn runtime rank 3: BURST_FOO in the environment is not a burst setting ...
 *
 * to standard error, or to the file BURST_LOG_FILE names, and only where levels were asked for
 * (BURST_LOG set, or burst_set_log_levels called): by default the library prints nothing.
 * BURST_LOG_FILE is a path pattern: %r is the process's rank (BURST_RANK; "x" where unset), %p
 * its process id, %% a percent sign (any other % is refused like a malformed BURST_LOG). The
 * file is opened for appending at the first message; one that cannot be opened sends the
 * messages to standard error after one line saying why.
 *
 * Thread-safety: every function here is thread-safe and process-wide. Messages are delivered
 * one at a time (the callback is never called concurrently with itself), from whichever thread
 * speaks, possibly a library thread (a progress or worker thread).
 */
#ifndef BURST_LOG_H
#define BURST_LOG_H

#include "burst/export.h"
#include "burst/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Levels, most severe first. A threshold lets a message through when message <= threshold. */
typedef enum burst_log_level {
    BURST_LOG_OFF = 0,   /* as a threshold: nothing (never a message's level) */
    BURST_LOG_ERROR = 1, /* something failed that no call can report (a destroy's cleanup) */
    BURST_LOG_WARN = 2,  /* suspicious, ignored or degraded: a setting ignored, a fallback */
    BURST_LOG_INFO = 3,  /* what was chosen and created; reports a switch asks for */
    BURST_LOG_DEBUG = 4, /* details for whoever is chasing a problem */
} burst_log_level_t;

/*
 * A message for the program. `subsystem` ("runtime", "cpu", "vulkan", "cuda", "transport") and
 * `message` (one line, no trailing newline) are valid only during the call; `rank` is the rank
 * the message concerns, or -1. A message may come from inside any burst function, with its
 * locks held, and the logger's own lock is held during the call: the callback may call only
 * burst_log_level_str and burst_log_enabled, never another burst function (burst_set_log_*
 * would deadlock), and should return quickly.
 */
typedef void (*burst_log_fn)(void *user, burst_log_level_t level, const char *subsystem, int rank,
                             const char *message);

/*
 * Send every message that passes the thresholds to fn(user, ...) instead of the default sink;
 * fn = NULL restores the default sink. Once this returns, the previous callback is neither
 * running nor called again, so its `user` may be freed. Thread-safe, process-wide.
 */
BURST_API void burst_set_log_callback(burst_log_fn fn, void *user);

/*
 * The program's thresholds, in BURST_LOG's syntax ("warn,transport=debug"): used where BURST_LOG
 * is unset or empty (the person running the program keeps the last word). With them set, the
 * default sink prints; spec = NULL forgets them. Either way BURST_LOG, BURST_LOG_FILE and
 * BURST_RANK are read from the environment again, and a log file the default sink opened is
 * closed (the next message opens the pattern's file as it then expands). A malformed spec (""
 * included: pass NULL for none) fails with BURST_ERR_INVALID_ARG naming it and changes nothing.
 * Thread-safe, process-wide.
 */
BURST_API burst_status_t burst_set_log_levels(const char *spec);

/* Would a message of this level from this subsystem pass the thresholds now? 0 or 1; 0 for an
 * unknown subsystem. Thread-safe. */
BURST_API int burst_log_enabled(burst_log_level_t level, const char *subsystem);

/* "error", "warn", "info", "debug" or "off"; "?" for any other value. Thread-safe. */
BURST_API const char *burst_log_level_str(burst_log_level_t level);

#ifdef __cplusplus
}
#endif

#endif /* BURST_LOG_H */
