/*
 * tools/progress.h - burstrun's progress line: "burstrun: iteration i/K, R it/s, ETA S s" on
 * stderr, rewritten in place as iterations complete (i = the slowest rank's count), when stderr
 * is a terminal and the job has run for more than 2 s; in every mode (rank processes: the
 * launcher's poll loop, tools/launch.c; threads: job_run's wait for its rank threads) and with
 * --json too (stdout keeps only the JSON).
 */
#ifndef BURST_TOOLS_PROGRESS_H
#define BURST_TOOLS_PROGRESS_H

struct progress {
    int on;    /* stderr is a terminal */
    int shown; /* a progress line is on screen */
    double t0; /* start of the job */
    char last[160];
};

/* Start: on when stderr is a terminal; the clock from now. */
void progress_init(struct progress *pg);

/* Show `done` of `total` iterations (after the first 2 s; unchanged text is not rewritten). */
void progress_update(struct progress *pg, int done, int total);

/* Erase the line (before other output on stderr, and at the end). */
void progress_clear(struct progress *pg);

#endif /* BURST_TOOLS_PROGRESS_H */
