/* runtime/fault.c - test fault injection (see fault.h). */
#include "fault.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    int on;
    int rank, is_bwd, step, call;
} spec;
static atomic_int calls[2]; /* calls of the faulty rank per phase, this process */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* "key=value" into *out; 1 when `item` has that key and a valid integer. */
static int kv(const char *item, const char *key, long lo, long hi, int *out)
{
    size_t n = strlen(key);
    if (strncmp(item, key, n) != 0 || item[n] != '=')
        return 0;
    char *end;
    long v = strtol(item + n + 1, &end, 10);
    if (end == item + n + 1 || (*end && *end != ',') || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 1;
}

static void parse(void)
{
    const char *s = getenv("BURST_FAULT");
    if (!s || !*s)
        return;
    int rank = -1, is_bwd = -1, step = -2, call = 0, ok = strncmp(s, "kill:", 5) == 0;
    for (const char *p = s + 5; ok && *p; p += strcspn(p, ","), p += *p == ',') {
        if (!strncmp(p, "phase=fwd", 9) && (p[9] == ',' || !p[9]))
            is_bwd = 0;
        else if (!strncmp(p, "phase=bwd", 9) && (p[9] == ',' || !p[9]))
            is_bwd = 1;
        else if (kv(p, "rank", 0, 1 << 20, &rank) != 1 && kv(p, "step", -1, 1 << 20, &step) != 1 &&
                 kv(p, "call", 0, 1 << 30, &call) != 1)
            ok = 0;
    }
    if (!ok || rank < 0 || is_bwd < 0 || step < -1) {
        fprintf(stderr,
                "burst: BURST_FAULT=\"%s\" ignored: expected "
                "kill:rank=R,phase=fwd|bwd,step=S[,call=C]\n",
                s);
        return;
    }
    spec.rank = rank;
    spec.is_bwd = is_bwd;
    spec.step = step;
    spec.call = call;
    spec.on = 1;
}

void burst_fault_call(int rank, int is_bwd)
{
    pthread_once(&once, parse);
    if (spec.on && rank == spec.rank)
        atomic_fetch_add(&calls[is_bwd != 0], 1);
}

void burst_fault_step(int rank, int is_bwd, int step)
{
    if (!spec.on || rank != spec.rank || (is_bwd != 0) != spec.is_bwd || step != spec.step ||
        atomic_load(&calls[is_bwd != 0]) != spec.call + 1)
        return;
    fprintf(stderr, "burst: BURST_FAULT: rank %d kills itself at %s step %d of call %d\n", rank,
            is_bwd ? "backward" : "forward", step, spec.call);
    kill(getpid(), SIGKILL);
}
