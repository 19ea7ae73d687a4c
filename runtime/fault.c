/* runtime/fault.c - test fault injection (see fault.h). */
#include "fault.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "logger.h"
#include "settings.h"

#define MAX_SPECS 8

enum action {
    A_KILL,
    A_DROP,
    A_TRUNCATE,
    A_DUPLICATE,
    A_DELAY,
    A_SLOW,
    A_OOM,
    A_JOIN
};
static const char *const action_names[] = {"kill",  "drop", "truncate", "duplicate",
                                           "delay", "slow", "oom",      "join"};

struct spec {
    enum action action;
    int rank, is_bwd, step, call, group, ms; /* is_bwd -1: either phase (slow) */
    long alloc, count;
    atomic_int calls[2]; /* calls of `rank` per phase, this process */
};

static struct spec specs[MAX_SPECS];
static int nspecs;
static int have_oom;
static atomic_long allocs; /* backend allocations so far (oom:) */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The message fault armed for this thread's next send by the step hook: a spec index, or -1. */
static _Thread_local int armed = -1;

/* "key=value" at item into *out; 1 when item has that key and a valid integer in lo..hi, -1
 * when it has the key and a bad value, 0 when it is another key. */
static int kv(const char *item, const char *key, long lo, long hi, long *out)
{
    size_t n = strlen(key);
    if (strncmp(item, key, n) != 0 || item[n] != '=')
        return 0;
    char *end;
    long v = strtol(item + n + 1, &end, 10);
    if (end == item + n + 1 || (*end && *end != ',' && *end != ';') || v < lo || v > hi)
        return -1;
    *out = v;
    return 1;
}

/* One "ACTION:key=value,..." ending at ';' or the end; 0, or -1 when malformed. */
static int parse_one(const char *s, struct spec *sp)
{
    memset(sp, 0, sizeof(*sp));
    size_t alen = strcspn(s, ":;");
    int a = -1;
    for (int i = 0; i < (int)(sizeof(action_names) / sizeof(action_names[0])); i++)
        if (strlen(action_names[i]) == alen && strncmp(s, action_names[i], alen) == 0)
            a = i;
    if (a < 0 || s[alen] != ':')
        return -1;
    sp->action = (enum action)a;
    long rank = -1, step = -2, call = 0, group = 0, ms = -1, alloc = -1, count = 1;
    int is_bwd = -1;
    for (const char *p = s + alen + 1; *p && *p != ';'; p += strcspn(p, ",;"), p += *p == ',') {
        if (!strncmp(p, "phase=fwd", 9) && (p[9] == ',' || p[9] == ';' || !p[9]))
            is_bwd = 0;
        else if (!strncmp(p, "phase=bwd", 9) && (p[9] == ',' || p[9] == ';' || !p[9]))
            is_bwd = 1;
        else if (kv(p, "rank", 0, 1 << 20, &rank) != 1 && kv(p, "step", -1, 1 << 20, &step) != 1 &&
                 kv(p, "call", 0, 1 << 30, &call) != 1 && kv(p, "group", 0, 1 << 20, &group) != 1 &&
                 kv(p, "ms", 0, 600000, &ms) != 1 && kv(p, "alloc", 0, 1L << 40, &alloc) != 1 &&
                 kv(p, "count", 1, 1L << 40, &count) != 1)
            return -1;
    }
    sp->rank = (int)rank;
    sp->is_bwd = is_bwd;
    sp->step = (int)step;
    sp->call = (int)call;
    sp->group = (int)group;
    sp->ms = (int)ms;
    sp->alloc = alloc;
    sp->count = count;
    switch (sp->action) {
    case A_SLOW:
    case A_JOIN: return rank >= 0 && ms >= 0 ? 0 : -1;
    case A_OOM: return alloc >= 0 ? 0 : -1;
    case A_DELAY:
        if (ms < 0)
            return -1;
        /* fall through */
    default: return rank >= 0 && is_bwd >= 0 && step >= -1 ? 0 : -1;
    }
}

/* The specs of s into tmp[] (*n_p of them): 0, or -1 when s is malformed. */
static int parse_specs(const char *s, struct spec tmp[MAX_SPECS], int *n_p)
{
    int n = 0;
    for (const char *p = s; *p; p += strcspn(p, ";"), p += *p == ';') {
        if (n == MAX_SPECS || parse_one(p, &tmp[n]) != 0)
            return -1;
        n++;
    }
    *n_p = n;
    return 0;
}

static int parse(const char *s)
{
    nspecs = 0;
    have_oom = 0;
    atomic_store(&allocs, 0);
    if (!s || !*s)
        return 0;
    struct spec tmp[MAX_SPECS];
    int n = 0;
    if (parse_specs(s, tmp, &n) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        specs[i] = tmp[i];
        have_oom |= tmp[i].action == A_OOM;
    }
    nspecs = n;
    return 0;
}

burst_status_t burst_fault_env_check(const char *who)
{
    const char *spec = NULL;
    (void)burst_setting_get(who, BURST_SET_FAULT, NULL, &spec); /* text: no error */
    struct spec tmp[MAX_SPECS];
    int n;
    if (!spec || parse_specs(spec, tmp, &n) == 0)
        return BURST_OK;
    return burst_error(
        BURST_ERR_INVALID_ARG,
        "%s: BURST_FAULT = \"%.64s\" is not up to %d of "
        "kill|drop|truncate|duplicate:rank=R,phase=fwd|bwd,step=S[,call=C][,group=K], "
        "delay:...,ms=M, slow:rank=R,ms=M[,phase=P], oom:alloc=N[,count=K], join:rank=R,ms=M "
        "separated by ';' (runtime/fault.h)",
        who, spec, MAX_SPECS);
}

static void parse_env(void)
{
    const char *spec = NULL;
    (void)burst_setting_get("BURST_FAULT", BURST_SET_FAULT, NULL, &spec); /* text: no error */
    parse(spec);
}

static void ensure(void)
{
    pthread_once(&once, parse_env);
}

int burst_fault_set(const char *spec)
{
    ensure();
    armed = -1;
    const int r = parse(spec);
    if (r != 0)
        burst_log(BURST_LOG_WARN, BURST_SUB_RUNTIME, -1,
                  "BURST_FAULT=\"%.64s\" ignored: not a fault list (runtime/fault.h)", spec);
    return r;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

void burst_fault_join(int rank)
{
    ensure();
    for (int i = 0; i < nspecs; i++)
        if (specs[i].action == A_JOIN && specs[i].rank == rank)
            sleep_ms(specs[i].ms);
}

/* Spec sp slows phase is_bwd (0 / 1) of its rank: slow:, of that phase or of both. */
static int slows(const struct spec *sp, int is_bwd)
{
    return sp->action == A_SLOW && (sp->is_bwd < 0 || sp->is_bwd == is_bwd);
}

void burst_fault_decode(int rank)
{
    ensure();
    for (int i = 0; i < nspecs; i++)
        if (specs[i].rank == rank && slows(&specs[i], 0))
            sleep_ms(specs[i].ms);
}

void burst_fault_call(int rank, int is_bwd)
{
    ensure();
    armed = -1;
    for (int i = 0; i < nspecs; i++)
        if (rank == specs[i].rank)
            atomic_fetch_add(&specs[i].calls[is_bwd != 0], 1);
}

void burst_fault_step(int rank, int is_bwd, int group, int step)
{
    armed = -1;
    for (int i = 0; i < nspecs; i++) {
        struct spec *sp = &specs[i];
        if (rank != sp->rank)
            continue;
        if (sp->action == A_SLOW) {
            if (slows(sp, is_bwd != 0))
                sleep_ms(sp->ms);
            continue;
        }
        if (sp->action == A_OOM || sp->is_bwd != (is_bwd != 0) || step != sp->step ||
            (step >= 0 && group != sp->group) ||
            atomic_load(&sp->calls[is_bwd != 0]) != sp->call + 1)
            continue;
        if (sp->action != A_KILL) {
            armed = i;
            continue;
        }
        burst_log(BURST_LOG_WARN, BURST_SUB_RUNTIME, rank,
                  "BURST_FAULT: rank %d kills itself at %s step %d (head group %d) of call %d",
                  rank, is_bwd ? "backward" : "forward", step, group, sp->call);
        kill(getpid(), SIGKILL);
    }
}

enum burst_fault_msg burst_fault_send(int rank, int *ms_p)
{
    int i = armed;
    if (i < 0 || i >= nspecs || specs[i].rank != rank)
        return BURST_FAULT_MSG_NONE;
    armed = -1; /* the step's first message only */
    *ms_p = specs[i].ms;
    switch (specs[i].action) {
    case A_DROP: return BURST_FAULT_MSG_DROP;
    case A_TRUNCATE: return BURST_FAULT_MSG_TRUNCATE;
    case A_DUPLICATE: return BURST_FAULT_MSG_DUPLICATE;
    case A_DELAY: return BURST_FAULT_MSG_DELAY;
    default: return BURST_FAULT_MSG_NONE;
    }
}

int burst_fault_alloc(void)
{
    ensure();
    if (!have_oom)
        return 0;
    long n = atomic_fetch_add(&allocs, 1);
    for (int i = 0; i < nspecs; i++)
        if (specs[i].action == A_OOM && n >= specs[i].alloc && n - specs[i].alloc < specs[i].count)
            return 1;
    return 0;
}
