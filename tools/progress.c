/* tools/progress.c - burstrun's progress line (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "job.h"

void progress_init(struct progress *pg)
{
    memset(pg, 0, sizeof(*pg));
    pg->on = isatty(2);
    pg->t0 = job_now();
}

void progress_clear(struct progress *pg)
{
    if (pg->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        pg->shown = 0;
    }
}

void progress_update(struct progress *pg, int done, int total)
{
    if (!pg->on)
        return;
    double el = job_now() - pg->t0;
    if (el < 2.0)
        return;
    char line[160];
    if (done > 0) {
        double rate = done / el;
        snprintf(line, sizeof(line), "iteration %d/%d, %.2f it/s, ETA %.0f s", done, total, rate,
                 (total - done) / rate);
    } else {
        snprintf(line, sizeof(line), "iteration 0/%d, %.0f s", total, el);
    }
    if (pg->shown && strcmp(line, pg->last) == 0)
        return;
    snprintf(pg->last, sizeof(pg->last), "%s", line);
    fprintf(stderr, "\r\033[Kburstrun: %s", line);
    fflush(stderr);
    pg->shown = 1;
}
