/* tools/sweep.c - the lists and ranges of burstrun's sweeps (sweep.h). */
#include "sweep.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One integer, the whole of s[0..n), in lo..hi: 0, or -1 with msg. */
static int one_int(const char *s, size_t n, int64_t lo, int64_t hi, int64_t *v, char *msg,
                   size_t cap)
{
    char buf[32], *end;
    if (n == 0 || n >= sizeof(buf)) {
        snprintf(msg, cap, "'%.*s' is not an integer", (int)(n < 31 ? n : 31), s);
        return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno || *end || end == buf || x < lo || x > hi) {
        snprintf(msg, cap, "'%s' is not an integer in [%lld, %lld]", buf, (long long)lo,
                 (long long)hi);
        return -1;
    }
    *v = (int64_t)x;
    return 0;
}

/* a:b:xF or a:b:+S into out: the count, or -1 with msg. */
static int range(const char *val, int64_t lo, int64_t hi, int64_t *out, char *msg, size_t cap)
{
    const char *c1 = strchr(val, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    int64_t a, b, step;
    if (!c2 || (c2[1] != 'x' && c2[1] != '+')) {
        snprintf(msg, cap, "expected start:end:xF or start:end:+S");
        return -1;
    }
    int mul = c2[1] == 'x';
    if (one_int(val, (size_t)(c1 - val), lo, hi, &a, msg, cap) != 0 ||
        one_int(c1 + 1, (size_t)(c2 - c1 - 1), lo, hi, &b, msg, cap) != 0 ||
        one_int(c2 + 2, strlen(c2 + 2), mul ? 2 : 1, hi, &step, msg, cap) != 0)
        return -1;
    if (b < a) {
        snprintf(msg, cap, "the end %lld is below the start %lld", (long long)b, (long long)a);
        return -1;
    }
    int n = 0;
    for (int64_t v = a; v <= b; v = mul ? v * step : v + step) {
        if (n == SWEEP_MAX) {
            snprintf(msg, cap, "more than %d values", SWEEP_MAX);
            return -1;
        }
        out[n++] = v;
        if (mul ? v > b / step : v > b - step)
            break;
    }
    return n;
}

int sweep_parse_ints(const char *val, int64_t lo, int64_t hi, int ranges, int64_t *out, char *msg,
                     size_t cap)
{
    if (ranges && strchr(val, ':'))
        return range(val, lo, hi, out, msg, cap);
    int n = 0;
    for (const char *p = val;; p++) {
        size_t len = strcspn(p, ",");
        if (n == SWEEP_MAX) {
            snprintf(msg, cap, "more than %d values", SWEEP_MAX);
            return -1;
        }
        if (one_int(p, len, lo, hi, &out[n++], msg, cap) != 0)
            return -1;
        p += len;
        if (!*p)
            return n;
    }
}
