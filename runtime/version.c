/* runtime/version.c - the version of the library actually loaded. */
#include "burst/version.h"

unsigned burst_version(void)
{
    return BURST_API_VERSION;
}

const char *burst_version_string(void)
{
    return BURST_VERSION_STRING;
}
