/*
 * tests/test_log.c - the logger (burst/log.h, runtime/logger.c):
 *   - a callback receives the library's messages with their level, subsystem and rank (a
 *     context's info, a communicator's debug with its rank, a warning about BURST_FAULT);
 *   - thresholds: BURST_LOG and burst_set_log_levels per subsystem, BURST_LOG over the program's;
 *   - the default sink is silent without levels (stderr captured), prints with them;
 *   - BURST_LOG_FILE: %r, %p and %% expanded, a file that cannot be opened falls back to stderr;
 *   - a malformed BURST_LOG / BURST_LOG_FILE / spec is an error naming it;
 *   - a message keeps errno and the caller's burst_last_error;
 *   - threads logging while the callback is swapped: every message delivered once, never two
 *     callbacks at a time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "burst/burst.h"
#include "fault.h"
#include "harness.h"
#include "logger.h"

/* ---- what a callback received ---- */

#define MAX_RECS 64

struct recs {
    int n;
    int level[MAX_RECS];
    char sub[MAX_RECS][16];
    int rank[MAX_RECS];
    char text[MAX_RECS][256];
};

static void record(void *user, burst_log_level_t level, const char *subsystem, int rank,
                   const char *message)
{
    struct recs *r = user;
    if (r->n == MAX_RECS)
        return;
    r->level[r->n] = (int)level;
    snprintf(r->sub[r->n], sizeof r->sub[0], "%s", subsystem);
    r->rank[r->n] = rank;
    snprintf(r->text[r->n], sizeof r->text[0], "%s", message);
    r->n++;
}

/* Index of the first record whose text contains s, or -1. */
static int find(const struct recs *r, const char *s)
{
    for (int i = 0; i < r->n; i++)
        if (strstr(r->text[i], s))
            return i;
    return -1;
}

static void set_env(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* The environment's BURST_LOG, BURST_LOG_FILE and BURST_RANK as given, read again; the default
 * sink; no program levels. */
static void reset(const char *log, const char *file, const char *rank)
{
    set_env("BURST_LOG", log);
    set_env("BURST_LOG_FILE", file);
    set_env("BURST_RANK", rank);
    burst_set_log_callback(NULL, NULL);
    assert_int_equal(burst_set_log_levels(NULL), BURST_OK);
}

static int teardown(void **state)
{
    (void)state;
    reset(NULL, NULL, NULL);
    return 0;
}

/* ---- stderr captured into a file ---- */

struct capture {
    int saved;
    char path[64];
};

static void capture_begin(struct capture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/burst_test_log.XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    fflush(stderr);
    c->saved = dup(2);
    assert_true(c->saved >= 0);
    assert_true(dup2(fd, 2) == 2);
    close(fd);
}

/* Restore stderr; the captured text into buf. */
static void capture_end(struct capture *c, char *buf, size_t cap)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    FILE *f = fopen(c->path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(c->path);
}

/* Messages of each level from the library: a context (info, runtime), a communicator of the
 * in-process transport (debug, transport, its rank), a malformed fault spec (warn, runtime),
 * and one error of the cuda subsystem. */
static void speak(void)
{
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cpu";
    cp.num_threads = 1;
    struct burst_context *ctx = NULL;
    assert_int_equal(burst_context_create(&cp, &ctx), BURST_OK);
    burst_context_destroy(ctx);
    struct burst_local_world *world = NULL;
    assert_int_equal(burst_local_world_create(3, &world), BURST_OK);
    struct burst_comm_params pp = burst_comm_params_default();
    pp.rank = 2;
    pp.size = 3;
    pp.world = world;
    struct burst_comm *comm = NULL;
    assert_int_equal(burst_comm_create(&pp, &comm), BURST_OK);
    burst_comm_destroy(comm);
    burst_local_world_destroy(world);
    assert_int_equal(burst_fault_set("no such fault"), -1);
    assert_int_equal(burst_fault_set(""), 0);
    burst_log(BURST_LOG_ERROR, BURST_SUB_CUDA, 7, "an error of rank %d", 7);
}

/* ---- tests ---- */

static void test_callback(void **state)
{
    (void)state;
    reset("debug", NULL, NULL);
    struct recs r = {0};
    burst_set_log_callback(record, &r);
    speak();
    burst_set_log_callback(NULL, NULL);
    int i = find(&r, "context on backend cpu");
    assert_true(i >= 0);
    assert_int_equal(r.level[i], BURST_LOG_INFO);
    assert_string_equal(r.sub[i], "runtime");
    assert_int_equal(r.rank[i], -1);
    i = find(&r, "rank 2 of 3");
    assert_true(i >= 0);
    assert_int_equal(r.level[i], BURST_LOG_DEBUG);
    assert_string_equal(r.sub[i], "transport");
    assert_int_equal(r.rank[i], 2);
    i = find(&r, "BURST_FAULT=\"no such fault\" ignored");
    assert_true(i >= 0);
    assert_int_equal(r.level[i], BURST_LOG_WARN);
    assert_string_equal(r.sub[i], "runtime");
    i = find(&r, "an error of rank 7");
    assert_true(i >= 0);
    assert_int_equal(r.level[i], BURST_LOG_ERROR);
    assert_string_equal(r.sub[i], "cuda");
    assert_int_equal(r.rank[i], 7);
    for (int k = 0; k < r.n; k++)
        assert_null(strchr(r.text[k], '\n'));

    /* without a rank of its own, a message carries the process's (BURST_RANK) */
    reset("debug", NULL, "4");
    memset(&r, 0, sizeof r);
    burst_set_log_callback(record, &r);
    speak();
    i = find(&r, "context on backend cpu");
    assert_true(i >= 0);
    assert_int_equal(r.rank[i], 4);
    assert_int_equal(r.rank[find(&r, "rank 2 of 3")], 2);

    /* a replaced callback is not called again */
    struct recs r2 = {0};
    burst_set_log_callback(record, &r2);
    int before = r.n;
    burst_log(BURST_LOG_WARN, BURST_SUB_RUNTIME, -1, "to the second");
    assert_int_equal(r.n, before);
    assert_int_equal(r2.n, 1);
    assert_string_equal(r2.text[0], "to the second");
}

static void test_levels(void **state)
{
    (void)state;
    /* the default thresholds: warn for every subsystem */
    reset(NULL, NULL, NULL);
    assert_true(burst_log_enabled(BURST_LOG_WARN, "runtime"));
    assert_true(burst_log_enabled(BURST_LOG_ERROR, "transport"));
    assert_false(burst_log_enabled(BURST_LOG_INFO, "cpu"));
    struct recs r = {0};
    burst_set_log_callback(record, &r);
    speak();
    assert_true(find(&r, "BURST_FAULT") >= 0);
    assert_true(find(&r, "an error of rank 7") >= 0);
    assert_int_equal(find(&r, "context on backend"), -1);
    assert_int_equal(find(&r, "rank 2 of 3"), -1);

    /* the program's levels, per subsystem, applied in order */
    assert_int_equal(burst_set_log_levels("off,transport=debug,cuda=error"), BURST_OK);
    assert_true(burst_log_enabled(BURST_LOG_DEBUG, "transport"));
    assert_true(burst_log_enabled(BURST_LOG_ERROR, "cuda"));
    assert_false(burst_log_enabled(BURST_LOG_WARN, "cuda"));
    assert_false(burst_log_enabled(BURST_LOG_ERROR, "runtime"));
    assert_false(burst_log_enabled(BURST_LOG_ERROR, "gpu"));
    assert_false(burst_log_enabled(BURST_LOG_ERROR, NULL));
    assert_false(burst_log_enabled(BURST_LOG_OFF, "transport"));
    memset(&r, 0, sizeof r);
    speak();
    assert_int_equal(r.n, 2);
    assert_true(find(&r, "rank 2 of 3") >= 0);
    assert_true(find(&r, "an error of rank 7") >= 0);
    assert_int_equal(burst_set_log_levels("info,cpu=error,info"), BURST_OK); /* last wins */
    assert_true(burst_log_enabled(BURST_LOG_INFO, "cpu"));
    assert_int_equal(burst_set_log_levels("transport=debug"), BURST_OK); /* from warn */
    assert_true(burst_log_enabled(BURST_LOG_WARN, "vulkan"));
    assert_false(burst_log_enabled(BURST_LOG_INFO, "vulkan"));
    assert_true(burst_log_enabled(BURST_LOG_DEBUG, "transport"));

    /* BURST_LOG, where set, wins over the program's levels */
    set_env("BURST_LOG", "error,vulkan=debug");
    assert_int_equal(burst_set_log_levels("debug"), BURST_OK);
    assert_false(burst_log_enabled(BURST_LOG_WARN, "runtime"));
    assert_true(burst_log_enabled(BURST_LOG_DEBUG, "vulkan"));
    set_env("BURST_LOG", "");
    assert_int_equal(burst_set_log_levels("debug"), BURST_OK); /* empty: unset */
    assert_true(burst_log_enabled(BURST_LOG_DEBUG, "runtime"));
    assert_string_equal(burst_log_level_str(BURST_LOG_WARN), "warn");
    assert_string_equal(burst_log_level_str((burst_log_level_t)9), "?");
}

static void test_default_silent(void **state)
{
    (void)state;
    char out[4096];
    struct capture c;
    reset(NULL, NULL, NULL);
    capture_begin(&c);
    speak();
    burst_log(BURST_LOG_WARN, BURST_SUB_VULKAN, -1, "a warning");
    capture_end(&c, out, sizeof out);
    assert_string_equal(out, "");

    /* the same with levels asked for: the default sink prints what passes them */
    reset("warn", NULL, "3");
    capture_begin(&c);
    speak();
    capture_end(&c, out, sizeof out);
    assert_non_null(strstr(out, "[burst] warn runtime rank 3: BURST_FAULT=\"no such fault\""));
    assert_non_null(strstr(out, "[burst] error cuda rank 7: an error of rank 7\n"));
    assert_null(strstr(out, "context on backend"));

    /* a program's levels turn the default sink on too */
    reset(NULL, NULL, NULL);
    assert_int_equal(burst_set_log_levels("info"), BURST_OK);
    capture_begin(&c);
    speak();
    capture_end(&c, out, sizeof out);
    assert_non_null(strstr(out, "[burst] info runtime: context on backend cpu"));
}

/* The text of a file ("" when it does not exist). */
static void slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void test_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/burst_test_logdir.XXXXXX", pattern[128], path[160], out[2048];
    assert_non_null(mkdtemp(dir));
    snprintf(pattern, sizeof pattern, "%s/log-%%r-%%p-%%%%.log", dir);
    reset("info", pattern, "5");
    struct capture c;
    capture_begin(&c);
    burst_log(BURST_LOG_INFO, BURST_SUB_CUDA, -1, "hello %d", 42);
    burst_log(BURST_LOG_WARN, BURST_SUB_TRANSPORT, 1, "second\n");
    burst_log(BURST_LOG_DEBUG, BURST_SUB_CUDA, -1, "filtered");
    capture_end(&c, out, sizeof out);
    assert_string_equal(out, ""); /* nothing on stderr */
    snprintf(path, sizeof path, "%s/log-5-%ld-%%.log", dir, (long)getpid());
    slurp(path, out, sizeof out);
    assert_string_equal(out, "[burst] info cuda rank 5: hello 42\n"
                             "[burst] warn transport rank 1: second\n");
    unlink(path);

    /* the program's levels set again: BURST_RANK read again, the file opened again */
    set_env("BURST_RANK", "6");
    assert_int_equal(burst_set_log_levels("info"), BURST_OK);
    burst_log(BURST_LOG_INFO, BURST_SUB_CUDA, -1, "as rank 6");
    snprintf(path, sizeof path, "%s/log-6-%ld-%%.log", dir, (long)getpid());
    slurp(path, out, sizeof out);
    assert_string_equal(out, "[burst] info cuda rank 6: as rank 6\n");
    unlink(path);

    reset("info", pattern, NULL); /* no rank: x */
    burst_log(BURST_LOG_INFO, BURST_SUB_CPU, -1, "no rank");
    snprintf(path, sizeof path, "%s/log-x-%ld-%%.log", dir, (long)getpid());
    slurp(path, out, sizeof out);
    assert_string_equal(out, "[burst] info cpu: no rank\n");
    unlink(path);

    /* a file that cannot be opened: stderr, after one line saying why */
    snprintf(pattern, sizeof pattern, "%s/no/such/dir/log", dir);
    reset("info", pattern, NULL);
    capture_begin(&c);
    burst_log(BURST_LOG_INFO, BURST_SUB_CPU, -1, "still said");
    burst_log(BURST_LOG_INFO, BURST_SUB_CPU, -1, "and again");
    capture_end(&c, out, sizeof out);
    assert_non_null(strstr(out, "BURST_LOG_FILE"));
    assert_non_null(strstr(out, "cannot open"));
    assert_non_null(strstr(out, "[burst] info cpu: still said\n[burst] info cpu: and again\n"));
    assert_null(strstr(strstr(out, "still said"), "cannot open")); /* said once */
    reset(NULL, NULL, NULL);
    rmdir(dir);
}

/* What the failed create or check said names the variable and its value. */
static void expect_named(burst_status_t st, const char *who, const char *var, const char *value)
{
    assert_int_equal(st, BURST_ERR_INVALID_ARG);
    const char *msg = burst_last_error();
    if (!strstr(msg, who) || !strstr(msg, var) || !strstr(msg, value))
        fail_msg("\"%s\" does not name %s, %s and \"%s\"", msg, who, var, value);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad_log[] = {"verbose",    "warn,gpu=debug", "warn,",
                                          "transport=", "=info",          "info;cpu=debug",
                                          "WARN",       " warn",          "cuda=warn=info"};
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cpu";
    struct burst_context *ctx = NULL;
    struct burst_local_world *world = NULL;
    assert_int_equal(burst_local_world_create(1, &world), BURST_OK);
    struct burst_comm_params pp = burst_comm_params_default();
    pp.world = world;
    struct burst_comm *comm = NULL;
    for (size_t i = 0; i < sizeof bad_log / sizeof bad_log[0]; i++) {
        reset(bad_log[i], NULL, NULL);
        expect_named(burst_settings_check(), "burst_settings_check", "BURST_LOG", bad_log[i]);
        expect_named(burst_context_create(&cp, &ctx), "burst_context_create", "BURST_LOG",
                     bad_log[i]);
        expect_named(burst_comm_create(&pp, &comm), "burst_comm_create", "BURST_LOG", bad_log[i]);
        /* the logger acts as if it were unset */
        assert_true(burst_log_enabled(BURST_LOG_WARN, "runtime"));
        assert_false(burst_log_enabled(BURST_LOG_INFO, "runtime"));
        expect_named(burst_set_log_levels(bad_log[i]), "burst_set_log_levels", "spec", bad_log[i]);
    }
    static const char *const bad_file[] = {"log-%x", "log-%", "%r-%P"};
    for (size_t i = 0; i < sizeof bad_file / sizeof bad_file[0]; i++) {
        reset("info", bad_file[i], NULL);
        expect_named(burst_settings_check(), "burst_settings_check", "BURST_LOG_FILE", bad_file[i]);
        expect_named(burst_context_create(&cp, &ctx), "burst_context_create", "BURST_LOG_FILE",
                     bad_file[i]);
    }
    static const char *const good[] = {
        "error", "off", "debug,cuda=off", "off,vulkan=info",
        "runtime=info,cpu=debug,vulkan=warn,cuda=error,transport=off"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        reset(good[i], "log-%r-%p-%%", NULL);
        assert_int_equal(burst_settings_check(), BURST_OK);
        assert_int_equal(burst_set_log_levels(good[i]), BURST_OK);
    }
    /* a malformed spec changes nothing */
    reset(NULL, NULL, NULL);
    assert_int_equal(burst_set_log_levels("debug"), BURST_OK);
    assert_int_equal(burst_set_log_levels("loud"), BURST_ERR_INVALID_ARG);
    assert_true(burst_log_enabled(BURST_LOG_DEBUG, "cpu"));
    burst_local_world_destroy(world);
}

static void test_keeps_errors(void **state)
{
    (void)state;
    reset("debug", NULL, NULL);
    struct recs r = {0};
    burst_set_log_callback(record, &r);
    /* a message, with a malformed BURST_LOG in force, keeps errno and the caller's error */
    set_env("BURST_LOG", "verbose");
    assert_int_equal(burst_set_log_levels(NULL), BURST_OK);
    (void)burst_error(BURST_ERR_DEVICE, "the caller's error");
    errno = EBUSY;
    burst_log(BURST_LOG_WARN, BURST_SUB_RUNTIME, -1, "in between");
    assert_int_equal(errno, EBUSY);
    assert_string_equal(burst_last_error(), "the caller's error");
    assert_int_equal(r.n, 1);
}

/* ---- threads ---- */

#define THREADS 4
#define PER_THREAD 4000

static atomic_int inside, overlapped, counts[2], talkers_done;

static void counting(void *user, burst_log_level_t level, const char *subsystem, int rank,
                     const char *message)
{
    (void)level;
    (void)subsystem;
    (void)rank;
    (void)message;
    if (atomic_fetch_add(&inside, 1) != 0)
        atomic_fetch_add(&overlapped, 1);
    sched_yield(); /* a chance for another thread to come in */
    atomic_fetch_add(&counts[(int)(intptr_t)user], 1);
    atomic_fetch_sub(&inside, 1);
}

static void *talker(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < PER_THREAD; i++)
        burst_log(i % 2 ? BURST_LOG_WARN : BURST_LOG_ERROR,
                  (enum burst_log_sub)((t + i) % BURST_SUB_COUNT), t, "thread %d message %d", t, i);
    atomic_fetch_add(&talkers_done, 1);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    reset(NULL, NULL, NULL);
    burst_set_log_callback(counting, (void *)(intptr_t)0);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, talker, (void *)(intptr_t)t), 0);
    for (int k = 0; atomic_load(&talkers_done) < THREADS; k++) {
        burst_set_log_callback(counting, (void *)(intptr_t)(k % 2));
        if (k % 100 == 0)
            assert_int_equal(burst_set_log_levels(k % 200 ? "warn" : "debug"), BURST_OK);
        sched_yield();
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    burst_set_log_callback(NULL, NULL);
    assert_int_equal(atomic_load(&overlapped), 0);
    assert_int_equal(atomic_load(&counts[0]) + atomic_load(&counts[1]), THREADS * PER_THREAD);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_callback, teardown),
        cmocka_unit_test_teardown(test_levels, teardown),
        cmocka_unit_test_teardown(test_default_silent, teardown),
        cmocka_unit_test_teardown(test_file, teardown),
        cmocka_unit_test_teardown(test_malformed, teardown),
        cmocka_unit_test_teardown(test_keeps_errors, teardown),
        cmocka_unit_test_teardown(test_threads, teardown),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
