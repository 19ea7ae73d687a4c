/*
 * tools/burstrun_report.h - burstrun's report of a job's results on stdout: the table (a header
 * before the job, then the setting, the problem, a row per phase, memory and the check), or one
 * JSON object (--json); a sweep's header and one row per point, or a JSON object whose "results"
 * hold one member per point; and the rows of --csv. The flags (tools/burstrun.c) decide what to
 * print; everything printed about a finished job comes from here.
 */
#ifndef BURST_TOOLS_BURSTRUN_REPORT_H
#define BURST_TOOLS_BURSTRUN_REPORT_H

#include <stdio.h>

#include "job.h"

/* burstrun's exit statuses (--help, "Exit status"); --json's error member carries them. */
#define EXIT_CHECK_FAILED 1 /* a requested check against the fp64 reference failed */
#define EXIT_USAGE 2        /* a bad flag or value, or parameters the library rejects */
#define EXIT_RUNTIME 3      /* the job could not run (a rank died, out of memory, ...) */

/* The names of --dtype, --layout and --bwd, in the order of burst_dtype_t, burst_layout_t and
 * burst_bwd_pattern_t: the flags parse them, the report prints them. */
extern const char *const burstrun_dtype_names[3];
extern const char *const burstrun_layout_names[3];
extern const char *const burstrun_bwd_names[3];

/* What the report shows besides the job's parameters and results: how its ranks ran and which
 * output the flags asked for. */
struct report_opts {
    int json;                /* --json: one JSON object instead of the table */
    int threads;             /* --threads: ranks as threads of one process */
    int mpi_worker;          /* ranks started by mpirun: each has its own copy of the tensors */
    int seed_given;          /* --seed given (else the seed came from the clock, and says so) */
    int default_job;         /* no flag chose the job: burstrun's default job, named */
    int verbose;             /* --verbose: a row per rank of the last call's times */
    const char *backend;     /* --backend or --backends as given (the header's line) */
    const char *launch_used; /* how ranks started by mpirun joined ("" or NULL: not named) */
    FILE *csv;               /* --csv: where its rows go, or NULL */
};

/* The table's header, printed before any job runs: versions, features, host, time, the seed
 * (p->seed), the ranks (p->ranks) and every backend's devices, each line after "# ". */
void report_header(const struct report_opts *o, const struct job_params *p);

/* The finished job p's table, or with o->json its one JSON object (the metadata, the job's
 * members, and an "error" member when the check failed); an inference job (p->kv_decode > 0)
 * is printed by job_kv_print. Returns EXIT_CHECK_FAILED when a requested check failed, else 0. */
int report_job(const struct report_opts *o, const struct job_params *p, const struct job_result *r);

/* One --csv row of the job into f, after the line of column names when `first`. */
void report_csv_row(FILE *f, const struct job_params *p, const struct job_result *r, int first);

/* --json for a job that did not finish: one object, the metadata and an "error" member with
 * burstrun's exit status `code` and msg. */
void report_json_failure(int code, const char *msg);

/* A sweep's start: with o->json the opening of the object and of its "results" array, else the
 * header (report_header) and the columns of the rows, with the problem the points share. */
void report_sweep_begin(const struct report_opts *o, const struct job_params *p);

/* Point i (from 0) of a sweep, as soon as its job finished: its member of "results" (o->json)
 * or its row, and its --csv row (o->csv; the column names with point 0). Returns
 * EXIT_CHECK_FAILED when its check failed, else 0. */
int report_sweep_point(const struct report_opts *o, const struct job_params *p,
                       const struct job_result *r, int i);

/* A sweep's end: with o->json the close of "results" and of the object, with an "error" member
 * when rc (burstrun's exit status so far) is not 0: a failed check, or msg. Nothing without
 * o->json. */
void report_sweep_end(const struct report_opts *o, int rc, const char *msg);

#endif /* BURST_TOOLS_BURSTRUN_REPORT_H */
