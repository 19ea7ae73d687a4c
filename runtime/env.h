/*
 * runtime/env.h - the library's one rule for its environment variables (private): unset or
 * empty means the default; any other value must parse whole and lie in its range, else the call
 * that reads it fails with BURST_ERR_INVALID_ARG naming the variable, its value and the range.
 * Nothing is silently ignored.
 */
#ifndef BURST_RUNTIME_ENV_H
#define BURST_RUNTIME_ENV_H

#include <errno.h>
#include <stdlib.h>

#include "burst/status.h"

/* Parse s whole as a decimal integer in lo..hi into *v_p: 1 on success, else 0 (*v_p kept).
 * Inline: burstrun checks its environment with the same rule before any rank starts. */
static inline int burst_env_parse_long(const char *s, long lo, long hi, long *v_p)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return 0;
    *v_p = v;
    return 1;
}

/* Variable `name` into *v_p: dflt when unset or empty; an error (named by who) when malformed
 * or out of lo..hi. *set_p (may be NULL) says whether it was set. */
burst_status_t burst_env_long(const char *who, const char *name, long lo, long hi, long dflt,
                              long *v_p, int *set_p);

#endif /* BURST_RUNTIME_ENV_H */
