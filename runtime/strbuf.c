/* runtime/strbuf.c - a growable string for reports. */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sb_reserve(struct burst_sb *sb, size_t extra)
{
    if (sb->failed)
        return 0;
    if (sb->len + extra + 1 <= sb->cap)
        return 1;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1) {
        if (cap > ((size_t)-1) / 2) {
            sb->failed = 1;
            return 0;
        }
        cap *= 2;
    }
    char *p = realloc(sb->buf, cap);
    if (!p) {
        sb->failed = 1;
        return 0;
    }
    sb->buf = p;
    sb->cap = cap;
    return 1;
}

void burst_sb_printf(struct burst_sb *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sb_reserve(sb, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void burst_sb_json_str(struct burst_sb *sb, const char *s)
{
    if (!s) {
        burst_sb_printf(sb, "null");
        return;
    }
    burst_sb_printf(sb, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            burst_sb_printf(sb, "\\%c", *c);
        else if (*c < 0x20)
            burst_sb_printf(sb, "\\u%04x", *c);
        else
            burst_sb_printf(sb, "%c", *c);
    }
    burst_sb_printf(sb, "\"");
}
