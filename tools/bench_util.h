/*
 * tools/bench_util.h - what the cuda benchmark programs (burstbench_cuda.c, burstbench_decode.c)
 * share: a comma-separated list of integers from their command lines, and the value of one
 * element of a host tensor in any of the library's dtypes, for their fp64 checks.
 */
#ifndef BURST_TOOLS_BENCH_UTIL_H
#define BURST_TOOLS_BENCH_UTIL_H

#include <stddef.h>

#include "burst/burst.h"

#define BENCH_MAX_LIST 16 /* values of one list */

/* "a,b,c" into v[BENCH_MAX_LIST] (decimal integers; values past BENCH_MAX_LIST are ignored):
 * the count, or -1 when an entry is empty or not an integer. */
int bench_parse_list(const char *s, long *v);

/* Element i of the host tensor h of dtype dt as a double; fp16 and bf16 decoded exactly
 * (an fp16 of exponent 31 is an infinity of its sign). */
double bench_host_val(burst_dtype_t dt, const void *h, size_t i);

#endif /* BURST_TOOLS_BENCH_UTIL_H */
