/*
 * burst/context.h - the compute context: which backend runs the local attention.
 *
 * A context owns a backend instance (its device, worker threads and caches). One context may be
 * shared by every rank of a process (e.g. the ranks of an in-process ring, one per thread): all
 * context calls are thread-safe. A context must outlive every plan created with it.
 */
#ifndef BURST_CONTEXT_H
#define BURST_CONTEXT_H

#include <stddef.h>

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
     * Backend name: "cuda", "vulkan", "cpu" (as built), or "auto" / NULL for the first usable
     * backend in that priority order; "auto" skips software Vulkan devices (lavapipe), which run
     * only when "vulkan" is asked for by name.
     * The environment variable BURST_BACKEND, when set, overrides "auto" (not explicit names).
     */
    const char *backend;
    /* Worker threads for the cpu backend; 0 = BURST_NUM_THREADS or else every online core. */
    int num_threads;
    /*
     * Device of a GPU backend (cuda, vulkan): a decimal index into the backend's device list (as
     * burst_probe() prints it) or a case-insensitive substring of the device name. NULL or "" =
     * the environment variable BURST_DEVICE, or else device 0. Ignored by the cpu backend.
     */
    const char *device;
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

/*
 * 1 when the context's backend computes on memory the host cannot address (cuda: device
 * memory): the tensors passed to burst_attention_forward/backward must then come from
 * burst_context_alloc() (filled and read with burst_context_memcpy()), and a tensor in plain host
 * memory is refused with BURST_ERR_INVALID_ARG naming it. 0 when any host memory works (cpu;
 * vulkan, which stages host memory itself; memory from burst_context_alloc() still avoids that
 * staging). Portable code can always use burst_context_alloc() + burst_context_memcpy().
 * 0 for NULL. Thread-safe. Since API 0.2.
 */
BURST_API int burst_context_device_memory(const struct burst_context *ctx);

/* Number of compute threads the context uses (cpu backend), or 1. Thread-safe. */
BURST_API int burst_context_num_threads(const struct burst_context *ctx);

/*
 * Memory the context's backend computes on, zeroed: host memory for cpu; for GPU backends,
 * memory the device reads directly and the host can also address (see the backend's notes in
 * docs/BACKENDS.md). Tensors in such memory avoid staging copies. *ptr_p receives NULL and
 * BURST_ERR_NO_MEMORY is returned on exhaustion; bytes == 0 is BURST_ERR_INVALID_ARG.
 * Thread-safe. Free with burst_context_free() on the same context.
 */
BURST_API burst_status_t burst_context_alloc(struct burst_context *ctx, size_t bytes, void **ptr_p);

/* Free memory from burst_context_alloc(); NULL is accepted. Thread-safe. */
BURST_API void burst_context_free(struct burst_context *ctx, void *ptr);

/*
 * Copy `bytes` between host memory and the context's memory in either direction (or within
 * either): what applications use to fill and read tensors on a GPU backend. Synchronous.
 * Errors: BURST_ERR_INVALID_ARG (NULL pointer with bytes > 0), device errors.
 */
BURST_API burst_status_t burst_context_memcpy(struct burst_context *ctx, void *dst, const void *src,
                                              size_t bytes);

/*
 * Describe every backend of this build without creating a context: devices, capabilities (shared
 * memory, subgroup size, data types, matrix units, memory; threads and vector width for cpu) and
 * the tile sizes each would choose. `json` = 0: readable text; 1: one JSON object
 * {"version": str, "backends": [...]}. *report_p receives a NUL-terminated string to release
 * with burst_free(). Errors: BURST_ERR_INVALID_ARG (report_p NULL), BURST_ERR_NO_MEMORY.
 * params may be NULL; its device field selects nothing here (every device is listed).
 */
BURST_API burst_status_t burst_probe(const struct burst_context_params *params, int json,
                                     char **report_p);

/*
 * Describe every BURST_* environment setting the library reads: its name, type and range or
 * choices, scope (what reads it: context, cpu, vulkan, cuda, comm, launcher, fabric, tests),
 * default, whether it is a research switch (for measurements, not for users), its current
 * value in this process's environment (the job key only as "(set)") and a one-line doc.
 * `json` = 0: readable text; 1: a JSON array of {"name", "type", "scope", "default",
 * "research", "value", "doc"} objects. *report_p receives a NUL-terminated string to release
 * with burst_free(). Errors: BURST_ERR_INVALID_ARG (report_p NULL), BURST_ERR_NO_MEMORY.
 */
BURST_API burst_status_t burst_settings_report(int json, char **report_p);

/*
 * Check the environment's settings of contexts, every backend (cpu, vulkan, cuda, whether this
 * build or machine has it), communicators, the libfabric transport, the logger (BURST_LOG,
 * BURST_LOG_FILE: burst/log.h) and BURST_FAULT by the rule every create applies: unset or empty =
 * the default, anything else must parse whole and lie in range. BURST_OK, or
 * BURST_ERR_INVALID_ARG with burst_last_error() naming the first malformed variable and its
 * value. Launchers call it before starting ranks. The variables a launcher sets for its ranks
 * (BURST_RANK, BURST_SIZE, BURST_BOOTSTRAP, BURST_RENDEZVOUS, BURST_JOB_KEY) are not checked
 * here: burst_comm_create_env checks them.
 */
BURST_API burst_status_t burst_settings_check(void);

/*
 * Read one BURST_* setting by the rule of the settings table (the one burstrun --info prints):
 * the way a program that links only this library (a launcher, a benchmark) reads the settings
 * it shares with the library, with the same parsing and the same errors.
 *
 * burst_setting_long: `name` is a row of the table whose value is a number: an integer (parsed
 * whole as decimal and within the row's range), a 0/1 switch, or one of a list of choices (its
 * index in the list). burst_setting_string: any row; its text as given.
 *
 * When the variable is unset or empty, BURST_OK is returned and *value is left as the caller
 * set it: the caller chooses what "not set" means (the library's own default is the row's
 * default, which burstrun --info prints). A research switch reads as not set in a build without
 * -Dresearch_settings=true, as it does inside the library. Otherwise *value receives the parsed
 * value (burst_setting_string: the text, valid until the environment changes).
 *
 * Errors (*value untouched): BURST_ERR_INVALID_ARG when name or value is NULL, when name is
 * not a row of the table, when burst_setting_long's row holds text, or when the value is
 * malformed; burst_last_error() then names the variable, its value and what it must be, e.g.
 * "burst_setting_long: BURST_NUM_THREADS = \"many\" is not an integer in 1..4096".
 * Thread-safe as far as getenv is (no setenv in another thread meanwhile).
 */
BURST_API burst_status_t burst_setting_long(const char *name, long *value);
BURST_API burst_status_t burst_setting_string(const char *name, const char **value);

/* Release a string returned by the library (burst_probe); NULL is accepted. */
BURST_API void burst_free(void *p);

#ifdef __cplusplus
}
#endif

#endif /* BURST_CONTEXT_H */
