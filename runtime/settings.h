/*
 * runtime/settings.h - the one table of the library's BURST_* environment settings (private).
 *
 * Every BURST_* variable that the library or burstrun reads has one row in burst_settings[]:
 * its name, type, default, range or choices, scope (who reads it, and when) and a one-line doc.
 * Only settings.c calls getenv on a BURST_* name; everyone else asks the table:
 *
 *   struct burst_settings set;
 *   burst_status_t st = burst_settings_load(who, BURST_SCOPE_COMM, &set);   at a create
 *   long timeout = burst_set_long(&set, BURST_SET_TIMEOUT_MS);
 *
 * The rule: unset or empty means the default; any other value must parse whole (an
 * integer in the row's range, or one of its choices), else the load fails with
 * BURST_ERR_INVALID_ARG naming the variable, its value and what it must be. A scope is parsed
 * where its objects are created (a context, its backend, a communicator): a malformed setting
 * fails the create that reads it, and never one that does not. A zeroed struct burst_settings
 * reads as every default.
 *
 * Variables named BURST_TEST_* and BURST_BENCH_* belong to the project's tests and scripts; any
 * other BURST_* variable in the environment that the table lacks draws one warning per process
 * (burst_settings_warn_unknown, on the first context or communicator created; a message of the
 * logger, runtime/logger.h).
 */
#ifndef BURST_RUNTIME_SETTINGS_H
#define BURST_RUNTIME_SETTINGS_H

#include <stddef.h>

#include "burst/status.h"

/* One id per row of burst_settings[], in the table's order. */
enum burst_setting_id {
    /* context (burst_context_create and the plans of the context) */
    BURST_SET_BACKEND,
    BURST_SET_DEVICE,
    BURST_SET_DEVICE_DIRECT,
    BURST_SET_STAGE_CHUNK_BYTES,
    BURST_SET_SPEED_ROUNDS,
    BURST_SET_FWD_FINAL,
    BURST_SET_BWD_FINAL,
    BURST_SET_DECODE_STEP,
    BURST_SET_STEP_SYNC,
    /* logging (burst/log.h; read at the first message, checked at context and communicator
     * create) */
    BURST_SET_LOG,
    BURST_SET_LOG_FILE,
    /* cpu backend */
    BURST_SET_NUM_THREADS,
    BURST_SET_CPU_ISA,
    /* vulkan backend */
    BURST_SET_VK_COOPMAT,
    BURST_SET_VK_COOPMAT_KHR,
    BURST_SET_VK_CM2,
    BURST_SET_VK_RT,
    BURST_SET_VK_ATOMIC,
    BURST_SET_VK_PROFILE,
    BURST_SET_VK_CMQ,
    BURST_SET_VK_CMQ_BF16,
    BURST_SET_VK_CMQ_FP32,
    BURST_SET_VK_ELEM,
    BURST_SET_VK_EXPORT,
    BURST_SET_VK_RT_TILE,
    BURST_SET_VK_CMQ_TILE,
    BURST_SET_VK_CMQ_BWD_TILE,
    BURST_SET_VK_CMQ_FWD,
    BURST_SET_VK_CMQ_PREFETCH,
    BURST_SET_VK_CM_ROWS,
    BURST_SET_VK_MAX_SHARED,
    BURST_SET_VK_ELEM_GROUPS,
    BURST_SET_VK_STAGE,
    /* cuda backend */
    BURST_SET_CUDA_FP32,
    BURST_SET_CUDA_KERNEL,
    BURST_SET_CUDA_WGMMA,
    BURST_SET_CUDA_DQ_ATOMIC,
    BURST_SET_CUDA_MAX_SHARED,
    BURST_SET_CUDA_TMA,
    BURST_SET_IPC_STATS,
    /* communicator */
    BURST_SET_TIMEOUT_MS,
    BURST_SET_FABRIC,
    BURST_SET_IFACE,
    BURST_SET_IPC_SPIN_US,
    /* launcher: burst_comm_create_env */
    BURST_SET_BOOTSTRAP,
    BURST_SET_RANK,
    BURST_SET_SIZE,
    BURST_SET_RENDEZVOUS,
    BURST_SET_RENDEZVOUS_UP,
    BURST_SET_JOB_KEY,
    /* libfabric transport (burst_fab_open, inside a communicator's create) */
    BURST_SET_FAB_PROGRESS,
    BURST_SET_FAB_SPIN_US,
    BURST_SET_FAB_CHUNK_BYTES,
    BURST_SET_FAB_MR_LOCAL,
    BURST_SET_FAB_RXM_EAGER,
    /* tests */
    BURST_SET_FAULT,
    BURST_SET_TEST_SEED,
    BURST_SET_TEST_BACKEND,
    BURST_SETTINGS_COUNT
};

enum burst_setting_type {
    BURST_SETTING_INT,    /* a decimal integer in lo..hi */
    BURST_SETTING_BOOL,   /* 0 or 1 */
    BURST_SETTING_CHOICE, /* one of the comma-separated choices: its index */
    BURST_SETTING_STRING, /* any text, parsed by its reader */
};

/* Who reads a setting, and when: one bit each. */
enum burst_setting_scope {
    BURST_SCOPE_CONTEXT = 1u << 0, /* burst_context_create; its plans and calls */
    BURST_SCOPE_CPU = 1u << 1,     /* the cpu backend's create */
    BURST_SCOPE_VULKAN = 1u << 2,  /* the vulkan backend's create */
    BURST_SCOPE_CUDA = 1u << 3,    /* the cuda backend's create */
    BURST_SCOPE_COMM = 1u << 4,    /* burst_comm_create (and _env) */
    BURST_SCOPE_LAUNCH = 1u << 5,  /* burst_comm_create_env: set by a launcher */
    BURST_SCOPE_FABRIC = 1u << 6,  /* the libfabric transport, inside a communicator's create */
    BURST_SCOPE_TESTS = 1u << 7,   /* the project's tests and fault injection */
    BURST_SCOPE_LOG = 1u << 8,     /* the logger (runtime/logger.c); checked by the creates */
};

struct burst_setting {
    const char *name;
    enum burst_setting_type type;
    enum burst_setting_scope scope;
    long dflt;           /* INT / BOOL / CHOICE (an index; -1: none of the choices) */
    long lo, hi;         /* INT's range */
    const char *choices; /* CHOICE: "a,b,c" */
    const char *shown;   /* the default as --info prints it */
    int research;        /* 1: a switch for measurements and comparisons, not for users */
    int secret;          /* 1: never printed (the job key) */
    const char *doc;     /* one line */
    /* STRING rows whose reader refuses some texts: one such text (the tests set it and expect
     * the reader's create to fail naming the variable); NULL where any text is taken as given.
     * Malformed values of the other types follow from the type and range. */
    const char *refused;
    /* STRING rows with a syntax: BURST_OK, or BURST_ERR_INVALID_ARG naming who, the variable
     * (name), its value and what is wrong; NULL = any text */
    burst_status_t (*check)(const char *who, const char *name, const char *value);
};

extern const struct burst_setting burst_settings[BURST_SETTINGS_COUNT];

/* Parsed values: v[] (INT, BOOL, CHOICE) and s[] (every type: the text, NULL when unset or
 * empty), valid where have[] is 1; a row not loaded reads as its default. */
struct burst_settings {
    long v[BURST_SETTINGS_COUNT];
    const char *s[BURST_SETTINGS_COUNT];
    unsigned char have[BURST_SETTINGS_COUNT];
};

/* Parse s whole as a decimal integer in lo..hi into *v_p: 1 on success, else 0 (*v_p kept). */
int burst_settings_parse_long(const char *s, long lo, long hi, long *v_p);

/* Parse every row whose scope is in `scopes` into *set (rows of other scopes are left as they
 * are); the first malformed value fails with BURST_ERR_INVALID_ARG naming who, the variable, its
 * value and what it must be. */
burst_status_t burst_settings_load(const char *who, unsigned scopes, struct burst_settings *set);

/* Parse one row (a STRING row with a check: checked); *v_p and *s_p (either may be NULL)
 * receive its value and text. */
burst_status_t burst_setting_get(const char *who, enum burst_setting_id id, long *v_p,
                                 const char **s_p);

/* A row's text as the environment has it, unchecked and recording no error: NULL when unset or
 * empty (or a research switch this build ignores). For readers that must not fail (the logger). */
const char *burst_setting_raw(enum burst_setting_id id);

/* A value of *set: the parsed one, or the row's default where the row was not loaded. */
static inline long burst_set_long(const struct burst_settings *set, enum burst_setting_id id)
{
    return set->have[id] ? set->v[id] : burst_settings[id].dflt;
}

/* The text of a row (NULL when unset, empty or not loaded). */
static inline const char *burst_set_str(const struct burst_settings *set, enum burst_setting_id id)
{
    return set->have[id] ? set->s[id] : NULL;
}

/* Was the row set (non-empty) in the environment when loaded? */
static inline int burst_set_given(const struct burst_settings *set, enum burst_setting_id id)
{
    return set->have[id] && set->s[id] != NULL;
}

/* Once per process: a warning (runtime/logger.h) about each BURST_* variable of the environment
 * that the table lacks, other than BURST_TEST_* and BURST_BENCH_*. */
void burst_settings_warn_unknown(void);

#endif /* BURST_RUNTIME_SETTINGS_H */
