/*
 * tools/burstrun_help.h - what burstrun prints about itself and the machine without running a
 * job: the text of --help, the versions and features of --version, every setting of --info, and
 * the devices and transports of --probe. Each prints on stdout (--help and --version: on f);
 * the flags that ask for them are tools/burstrun.c's.
 */
#ifndef BURST_TOOLS_BURSTRUN_HELP_H
#define BURST_TOOLS_BURSTRUN_HELP_H

#include <stdio.h>

/* --help: every flag, what the report means, ranks across hosts and the exit statuses. */
void burstrun_usage(FILE *f);

/* --version: burstrun's and the loaded library's versions, the commit, and the optional parts
 * each was built with (the library's features; burstrun's MPI and PMIx). */
void burstrun_version(FILE *f);

/* --info: the versions, every BURST_* setting with its current value (the library's table,
 * runtime/settings.c) and what backend "auto" resolves to; with `json` one JSON object.
 * Returns 0, or -1 (the reason on stderr) when the library cannot report its settings. */
int burstrun_info(int json);

/* --probe: every backend's devices, capabilities and tiles (burst_probe, its contexts with
 * num_threads compute threads; 0: the default), then the transports (tools/probe_net.h); with
 * `json` one JSON object, the transports its last member. Returns 0, or -1 (the reason on
 * stderr) when the probe fails. */
int burstrun_probe(int num_threads, int json);

#endif /* BURST_TOOLS_BURSTRUN_HELP_H */
