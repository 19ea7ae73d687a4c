/*
 * tools/bench_util.c - the cuda benchmark programs' shared helpers (tools/bench_util.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

int bench_parse_list(const char *s, long *v)
{
    int n = 0;
    while (s && *s && n < BENCH_MAX_LIST) {
        char *end;
        v[n++] = strtol(s, &end, 10);
        if (end == s || (*end && *end != ','))
            return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

double bench_host_val(burst_dtype_t dt, const void *h, size_t i)
{
    if (dt == BURST_DTYPE_FP32)
        return ((const float *)h)[i];
    const uint16_t v = ((const uint16_t *)h)[i];
    if (dt == BURST_DTYPE_BF16) {
        const uint32_t b = (uint32_t)v << 16;
        float x;
        memcpy(&x, &b, 4);
        return x;
    }
    const int e = (v >> 10) & 31, m = v & 1023;
    const double a = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    return v & 0x8000u ? -a : a;
}
