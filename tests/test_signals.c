/*
 * tests/test_signals.c - an embedding program's signal dispositions are its own: linking
 * libburst changes none of them (checked at main, before any call), and neither do
 * burst_context_create, burst_probe, burst_comm_create (transport "local", and "fabric" over
 * shm and tcp through a rendezvous where the build has libfabric: libfabric and its providers
 * are loaded then, and some install handlers for SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and
 * SIGABRT when loaded). A handler set by the program and an inherited SIG_IGN must survive.
 * Plain C, not cmocka: cmocka sets handlers of its own while it runs a test.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burst/burst.h"
#include "harness.h"

static const int watched[] = {SIGINT, SIGTERM, SIGSEGV, SIGBUS,  SIGILL,  SIGABRT,
                              SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGCHLD, SIGFPE};
#define NW (sizeof(watched) / sizeof(watched[0]))

static int failures;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        printf("FAIL: " __VA_ARGS__);                                                              \
        printf("\n");                                                                              \
        failures++;                                                                                \
    } while (0)

static void program_handler(int sig)
{
    (void)sig;
}

static void snapshot(struct sigaction *sa)
{
    for (size_t i = 0; i < NW; i++)
        sigaction(watched[i], NULL, &sa[i]);
}

static void expect_same(const struct sigaction *before, const char *after_what)
{
    struct sigaction now[NW];
    snapshot(now);
    for (size_t i = 0; i < NW; i++)
        if (now[i].sa_handler != before[i].sa_handler)
            FAIL("signal %d (%s): its disposition changed after %s", watched[i],
                 strsignal(watched[i]), after_what);
}

/* A sanitizer's runtime takes SIGSEGV, SIGBUS and SIGFPE before main (its own reports). */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static int sanitizer_signal(int sig)
{
    return SANITIZED && (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE);
}

/* At main: nothing linked in has set a handler (the test runner starts us with defaults). */
static void nothing_at_load(void)
{
    struct sigaction now[NW];
    snapshot(now);
    for (size_t i = 0; i < NW; i++)
        if (now[i].sa_handler != SIG_DFL && now[i].sa_handler != SIG_IGN &&
            !sanitizer_signal(watched[i]))
            FAIL("signal %d (%s) has a handler before main's first call", watched[i],
                 strsignal(watched[i]));
}

#ifdef BURST_HAVE_FABRIC
static void comm_fabric(const char *fabric, const struct sigaction *before)
{
    struct burst_rendezvous *rv = NULL;
    if (burst_rendezvous_create(NULL, 0, 1, NULL, &rv) != BURST_OK) {
        FAIL("burst_rendezvous_create: %s", burst_last_error());
        return;
    }
    struct burst_comm_params cp = burst_comm_params_default();
    cp.transport = "fabric";
    cp.fabric = fabric;
    cp.iface = "127.0.0.1";
    cp.rendezvous = burst_rendezvous_address(rv);
    cp.job_key = burst_rendezvous_key(rv);
    cp.timeout_ms = 20000;
    struct burst_comm *c = NULL;
    burst_status_t st = burst_comm_create(&cp, &c);
    if (st != BURST_OK && st != BURST_ERR_UNSUPPORTED)
        FAIL("fabric %s: %s: %s", fabric, burst_status_str(st), burst_last_error());
    if (st != BURST_OK)
        printf("fabric %s: %s (its dispositions are checked all the same)\n", fabric,
               burst_last_error());
    burst_comm_destroy(c);
    burst_rendezvous_destroy(rv);
    char what[64];
    snprintf(what, sizeof(what), "burst_comm_create (fabric %s)", fabric);
    expect_same(before, what);
}
#endif

static void calls_keep_dispositions(void)
{
    struct sigaction h = {.sa_handler = program_handler}, ign = {.sa_handler = SIG_IGN};
    sigemptyset(&h.sa_mask);
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &h, NULL);
    sigaction(SIGUSR1, &h, NULL);
    sigaction(SIGTERM, &ign, NULL); /* as if inherited */
    struct sigaction before[NW];
    snapshot(before);
    struct burst_context *ctx = NULL;
    if (burst_context_create(NULL, &ctx) != BURST_OK)
        FAIL("burst_context_create: %s", burst_last_error());
    expect_same(before, "burst_context_create");
    char *report = NULL;
    if (burst_probe(NULL, 0, &report) == BURST_OK)
        burst_free(report);
    expect_same(before, "burst_probe");
    struct burst_local_world *w = NULL;
    struct burst_comm_params cp = burst_comm_params_default();
    struct burst_comm *c = NULL;
    if (burst_local_world_create(1, &w) == BURST_OK) {
        cp.world = w;
        if (burst_comm_create(&cp, &c) != BURST_OK)
            FAIL("burst_comm_create: %s", burst_last_error());
    }
    burst_comm_destroy(c);
    burst_local_world_destroy(w);
    expect_same(before, "burst_comm_create (local)");
#ifdef BURST_HAVE_FABRIC
    comm_fabric("shm", before);
    comm_fabric("tcp", before);
#endif
    burst_context_destroy(ctx);
}

int main(void)
{
    nothing_at_load();
    calls_keep_dispositions();
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
