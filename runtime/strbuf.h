/*
 * runtime/strbuf.h - a growable string for reports (probe output) (private).
 *
 * Appends never fail visibly: on exhaustion the buffer is marked failed and later appends are
 * ignored, so report writers stay linear; the caller checks `failed` once at the end.
 */
#ifndef BURST_RUNTIME_STRBUF_H
#define BURST_RUNTIME_STRBUF_H

#include <stddef.h>

struct burst_sb {
    char *buf;  /* NUL-terminated when len > 0; malloc'd */
    size_t len; /* characters, excluding the NUL */
    size_t cap;
    int failed; /* an append ran out of memory */
};

/* printf-style append. */
void burst_sb_printf(struct burst_sb *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Append s as a JSON string literal (quotes and escapes included); NULL appends null. */
void burst_sb_json_str(struct burst_sb *sb, const char *s);

#endif /* BURST_RUNTIME_STRBUF_H */
