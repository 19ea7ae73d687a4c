/* runtime/env.c - see env.h */
#include "env.h"

#include <stdlib.h>

#include "error.h"

burst_status_t burst_env_long(const char *who, const char *name, long lo, long hi, long dflt,
                              long *v_p, int *set_p)
{
    const char *s = getenv(name);
    if (set_p)
        *set_p = 0;
    if (!s || !*s) {
        *v_p = dflt;
        return BURST_OK;
    }
    if (!burst_env_parse_long(s, lo, hi, v_p))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s = \"%.64s\" is not an integer in %ld..%ld", who, name, s, lo,
                           hi);
    if (set_p)
        *set_p = 1;
    return BURST_OK;
}
