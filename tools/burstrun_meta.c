/* tools/burstrun_meta.c - the run's metadata: features, commit, host, time, devices. */
#include "burstrun_meta.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "build_info.h"
#include "burst/burst.h"

const char *meta_features(void)
{
    static char buf[160];
    snprintf(buf, sizeof(buf), "%s%s%s", burst_build_features(),
#ifdef BURST_HAVE_MPI
             " mpi",
#else
             "",
#endif
#ifdef BURST_HAVE_PMIX
             " pmix"
#else
             ""
#endif
    );
    return buf;
}

const char *meta_commit(void)
{
    return BURSTRUN_COMMIT[0] ? BURSTRUN_COMMIT : "unknown";
}

void meta_host(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0 || !buf[0])
        snprintf(buf, cap, "unknown");
    buf[cap - 1] = '\0';
}

void meta_timestamp(char *buf, size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, cap, "unknown");
}

void meta_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* burst_probe's report (text or JSON), or NULL with the reason in why. */
static char *probe(int json, char *why, size_t cap)
{
    struct burst_context_params cp = burst_context_params_default();
    char *report = NULL;
    burst_status_t st = burst_probe(&cp, json, &report);
    if (st != BURST_OK) {
        snprintf(why, cap, "%s: %s", burst_status_str(st), burst_last_error());
        return NULL;
    }
    return report;
}

void meta_devices_text(FILE *f, const char *prefix)
{
    char why[512], backend[64] = "";
    char *report = probe(0, why, sizeof(why));
    if (!report) {
        fprintf(f, "%sdevices: the probe failed: %s\n", prefix, why);
        return;
    }
    /* burst_probe's text: "backend NAME" lines, each device as "  device I: ..." below */
    for (char *line = report, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (!strncmp(line, "backend ", 8))
            snprintf(backend, sizeof(backend), "%s", line + 8);
        else if (!strncmp(line, "  device ", 9))
            fprintf(f, "%s%s: %s\n", prefix, backend, line + 2);
    }
    burst_free(report);
}

void meta_devices_json(FILE *f)
{
    char why[512];
    char *report = probe(1, why, sizeof(why));
    const char *arr = report ? strstr(report, "\"backends\": ") : NULL;
    size_t len = arr ? strlen(arr) : 0;
    /* the report is {"version": ..., "backends": [...]}: the array up to the closing brace */
    while (len > 0 && (arr[len - 1] == '\n' || arr[len - 1] == ' '))
        len--;
    if (!arr || len < 13 || arr[len - 1] != '}')
        fputs("null", f);
    else
        fwrite(arr + 12, 1, len - 13, f);
    burst_free(report);
}

void meta_json_fields(FILE *f, int devices)
{
    char host[256], ts[64];
    meta_host(host, sizeof(host));
    meta_timestamp(ts, sizeof(ts));
    fprintf(f, "\"schema_version\": %d, \"timestamp\": \"%s\", \"host\": ", BURSTRUN_JSON_SCHEMA,
            ts);
    meta_json_str(f, host);
    fprintf(f, ", \"commit\": ");
    meta_json_str(f, meta_commit());
    fprintf(f, ", \"burstrun\": \"%s\", \"library\": ", BURST_VERSION_STRING);
    meta_json_str(f, burst_version_string());
    fprintf(f, ", \"features\": [");
    const char *p = meta_features();
    for (int first = 1; *p; first = 0) {
        size_t n = strcspn(p, " ");
        fprintf(f, "%s\"%.*s\"", first ? "" : ", ", (int)n, p);
        p += n + (p[n] == ' ');
    }
    fprintf(f, "], \"devices\": ");
    if (devices)
        meta_devices_json(f);
    else
        fputs("null", f);
}
