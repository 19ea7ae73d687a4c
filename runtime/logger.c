/*
 * runtime/logger.c - thresholds, the program's callback and the default sink (burst/log.h,
 * logger.h).
 *
 * State is process-wide. The thresholds are atomics read without a lock (burst_log_on); the rest
 * (the callback, the default sink's file, the program's spec) is guarded by `lock`, which is also
 * held while a message is delivered, so that messages go out one at a time and a callback that
 * burst_set_log_callback replaced is never called afterwards. The environment is read at the
 * first message or question (and again by burst_set_log_levels(NULL)).
 */
#include "logger.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <pthread.h>

#include "settings.h"

const char *const burst_log_sub_names[BURST_SUB_COUNT] = {"runtime", "cpu", "vulkan", "cuda",
                                                          "transport"};

#define SPEC_MAX 256
#define PATH_MAX_BYTES 1024

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int loaded;                     /* the environment was read */
static atomic_int threshold[BURST_SUB_COUNT]; /* burst_log_level_t per subsystem */
static int sink_on;                           /* levels were asked for: the default sink prints */
static int process_rank = -1;                 /* BURST_RANK, or -1 */
static char program_spec[SPEC_MAX];           /* burst_set_log_levels, "" = none */
static char file_pattern[PATH_MAX_BYTES];     /* BURST_LOG_FILE, "" = stderr */
static FILE *file;                            /* the default sink's file, once opened */
static pid_t file_pid;                        /* the process that opened it */
static int file_failed;                       /* it could not be opened: stderr */
static burst_log_fn callback;
static void *callback_user;

/* ---- the syntax of BURST_LOG and BURST_LOG_FILE ---- */

static int level_of(const char *s, size_t n)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    for (int i = 0; i < 5; i++)
        if (strlen(names[i]) == n && strncmp(names[i], s, n) == 0)
            return i;
    return -1;
}

static int sub_of(const char *s, size_t n)
{
    for (int i = 0; i < BURST_SUB_COUNT; i++)
        if (strlen(burst_log_sub_names[i]) == n && strncmp(burst_log_sub_names[i], s, n) == 0)
            return i;
    return -1;
}

/* Parse a spec into th[] (from warn for every subsystem): 0, or -1 with *bad / *bad_len the
 * item that is wrong. */
static int parse_spec(const char *s, int th[BURST_SUB_COUNT], const char **bad, size_t *bad_len)
{
    for (int i = 0; i < BURST_SUB_COUNT; i++)
        th[i] = BURST_LOG_WARN;
    for (const char *p = s;; p++) {
        size_t n = strcspn(p, ",");
        const char *eq = memchr(p, '=', n);
        int lv = eq ? level_of(eq + 1, n - (size_t)(eq + 1 - p)) : level_of(p, n);
        int sub = eq ? sub_of(p, (size_t)(eq - p)) : 0;
        if (lv < 0 || sub < 0) {
            *bad = p;
            *bad_len = n;
            return -1;
        }
        for (int i = 0; i < BURST_SUB_COUNT; i++)
            if (!eq || i == sub)
                th[i] = lv;
        p += n;
        if (!*p)
            return 0;
    }
}

burst_status_t burst_log_spec_check(const char *who, const char *name, const char *value)
{
    int th[BURST_SUB_COUNT];
    const char *bad;
    size_t n;
    if (strlen(value) >= SPEC_MAX)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s = \"%.64s...\" is longer than %d bytes",
                           who, name, value, SPEC_MAX - 1);
    if (parse_spec(value, th, &bad, &n) == 0)
        return BURST_OK;
    return burst_error(BURST_ERR_INVALID_ARG,
                       "%s: %s = \"%.64s\": \"%.*s\" is neither a level (error, warn, info, debug, "
                       "off) nor SUBSYSTEM=LEVEL with a subsystem of runtime, cpu, vulkan, cuda, "
                       "transport",
                       who, name, value, (int)(n > 32 ? 32 : n), bad);
}

/* The first '%' of a pattern not followed by r, p or %, or NULL. */
static const char *pattern_bad(const char *s)
{
    for (const char *p = strchr(s, '%'); p; p = strchr(p + 2, '%'))
        if (p[1] != 'r' && p[1] != 'p' && p[1] != '%')
            return p;
    return NULL;
}

burst_status_t burst_log_file_check(const char *who, const char *name, const char *value)
{
    const char *bad = pattern_bad(value);
    if (strlen(value) >= PATH_MAX_BYTES - 64)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s = \"%.64s...\" is longer than %d bytes",
                           who, name, value, PATH_MAX_BYTES - 65);
    if (bad)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s = \"%.64s\": \"%%%.1s\" is not %%r (rank), %%p (process id) "
                           "or %%%% (a percent sign)",
                           who, name, value, bad + 1);
    return BURST_OK;
}

/* ---- configuration ---- */

/* Read the environment and the program's spec into the thresholds. Under lock. */
static void configure_locked(void)
{
    int th[BURST_SUB_COUNT];
    const char *bad;
    size_t n;
    const char *env = burst_setting_raw(BURST_SET_LOG);
    if (env && strlen(env) < SPEC_MAX && parse_spec(env, th, &bad, &n) == 0)
        sink_on = 1;
    else if (program_spec[0] && parse_spec(program_spec, th, &bad, &n) == 0)
        sink_on = 1;
    else {
        (void)parse_spec("warn", th, &bad, &n);
        sink_on = 0;
    }
    const char *fp = burst_setting_raw(BURST_SET_LOG_FILE);
    if (!fp || strlen(fp) >= PATH_MAX_BYTES - 64 || pattern_bad(fp))
        fp = "";
    if (strcmp(fp, file_pattern) != 0 && file) { /* a new pattern: a new file */
        fclose(file);
        file = NULL;
    }
    snprintf(file_pattern, sizeof file_pattern, "%s", fp);
    file_failed = 0;
    const char *rs = burst_setting_raw(BURST_SET_RANK);
    long r = -1;
    if (!rs || !burst_settings_parse_long(rs, burst_settings[BURST_SET_RANK].lo,
                                          burst_settings[BURST_SET_RANK].hi, &r))
        r = -1;
    process_rank = (int)r;
    for (int i = 0; i < BURST_SUB_COUNT; i++)
        atomic_store(&threshold[i], th[i]);
    atomic_store(&loaded, 1);
}

static void ensure_loaded(void)
{
    if (atomic_load(&loaded))
        return;
    pthread_mutex_lock(&lock);
    if (!atomic_load(&loaded))
        configure_locked();
    pthread_mutex_unlock(&lock);
}

/* ---- the default sink ---- */

/* The pattern with %r, %p and %% replaced. */
static void expand_pattern(char *out, size_t cap)
{
    size_t o = 0;
    for (const char *p = file_pattern; *p && o + 1 < cap; p++) {
        char tmp[24] = "";
        if (*p != '%') {
            out[o++] = *p;
            continue;
        }
        p++;
        if (*p == 'r' && process_rank >= 0)
            snprintf(tmp, sizeof tmp, "%d", process_rank);
        else if (*p == 'r')
            snprintf(tmp, sizeof tmp, "x");
        else if (*p == 'p')
            snprintf(tmp, sizeof tmp, "%ld", (long)getpid());
        else
            snprintf(tmp, sizeof tmp, "%%");
        for (const char *t = tmp; *t && o + 1 < cap; t++)
            out[o++] = *t;
        if (!*p)
            break;
    }
    out[o] = '\0';
}

/* Where the default sink writes: the file (opened at the first message, again in a child
 * process where the pattern names the process id), or stderr. Under lock. */
static FILE *sink_stream(void)
{
    if (!file_pattern[0] || file_failed)
        return stderr;
    if (file && file_pid != getpid() && strstr(file_pattern, "%p")) {
        fclose(file);
        file = NULL;
    }
    if (file)
        return file;
    char path[PATH_MAX_BYTES];
    expand_pattern(path, sizeof path);
    file = fopen(path, "ae");
    if (!file) {
        fprintf(stderr,
                "[burst] warn runtime: BURST_LOG_FILE = \"%s\": cannot open %s (%s); messages go "
                "to standard error\n",
                file_pattern, path, strerror(errno));
        file_failed = 1;
        return stderr;
    }
    file_pid = getpid();
    return file;
}

static void sink_write(burst_log_level_t level, const char *sub, int rank, const char *text)
{
    char line[1200], where[32] = "";
    if (rank >= 0)
        snprintf(where, sizeof where, " rank %d", rank);
    snprintf(line, sizeof line, "[burst] %s %s%s: %s\n", burst_log_level_str(level), sub, where,
             text);
    FILE *f = sink_stream();
    fputs(line, f);
    fflush(f);
}

/* ---- messages ---- */

int burst_log_on(enum burst_log_sub sub, burst_log_level_t level)
{
    ensure_loaded();
    return (unsigned)sub < BURST_SUB_COUNT && level > BURST_LOG_OFF &&
           (int)level <= atomic_load_explicit(&threshold[sub], memory_order_relaxed);
}

void burst_log(burst_log_level_t level, enum burst_log_sub sub, int rank, const char *fmt, ...)
{
    if (!burst_log_on(sub, level))
        return;
    int saved_errno = errno;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    size_t n = strlen(text);
    while (n && text[n - 1] == '\n')
        text[--n] = '\0';
    pthread_mutex_lock(&lock);
    if (rank < 0)
        rank = process_rank;
    if (callback)
        callback(callback_user, level, burst_log_sub_names[sub], rank, text);
    else if (sink_on)
        sink_write(level, burst_log_sub_names[sub], rank, text);
    pthread_mutex_unlock(&lock);
    errno = saved_errno;
}

/* ---- public API ---- */

void burst_set_log_callback(burst_log_fn fn, void *user)
{
    pthread_mutex_lock(&lock);
    callback = fn;
    callback_user = fn ? user : NULL;
    pthread_mutex_unlock(&lock);
}

burst_status_t burst_set_log_levels(const char *spec)
{
    burst_error_clear();
    burst_status_t st =
        spec ? burst_log_spec_check("burst_set_log_levels", "spec", spec) : BURST_OK;
    if (st != BURST_OK)
        return st;
    pthread_mutex_lock(&lock);
    snprintf(program_spec, sizeof program_spec, "%s", spec ? spec : "");
    if (file)
        fclose(file);
    file = NULL;
    configure_locked();
    pthread_mutex_unlock(&lock);
    return BURST_OK;
}

int burst_log_enabled(burst_log_level_t level, const char *subsystem)
{
    int sub = subsystem ? sub_of(subsystem, strlen(subsystem)) : -1;
    return sub >= 0 && burst_log_on((enum burst_log_sub)sub, level);
}

const char *burst_log_level_str(burst_log_level_t level)
{
    switch (level) {
    case BURST_LOG_OFF: return "off";
    case BURST_LOG_ERROR: return "error";
    case BURST_LOG_WARN: return "warn";
    case BURST_LOG_INFO: return "info";
    case BURST_LOG_DEBUG: return "debug";
    }
    return "?";
}
