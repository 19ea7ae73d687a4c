/*
 * tools/burstrun_meta.h - what burstrun records about a run besides its results: the build's
 * features, the commit, the host, the time, and the devices of every backend. The header of the
 * table (-V, sweeps) and the metadata of --json come from here.
 */
#ifndef BURST_TOOLS_BURSTRUN_META_H
#define BURST_TOOLS_BURSTRUN_META_H

#include <stddef.h>
#include <stdio.h>

/* The version of --json's layout: a consumer checks it before reading. Raised when a field
 * changes meaning or goes away (new fields keep it). */
#define BURSTRUN_JSON_SCHEMA 2

/* The features of the loaded library (burst_build_features: cpu, and where built vulkan, cuda,
 * fabric (libfabric: rank processes), research-settings), then mpi where this burstrun has it
 * (--hosts), space-separated. */
const char *meta_features(void);

/* The commit of the source tree ("unknown" outside a git checkout; "-dirty" when modified). */
const char *meta_commit(void);

/* This host's name ("unknown" when it has none). */
void meta_host(char *buf, size_t cap);

/* The time now in UTC, ISO 8601 ("2025-01-31T12:00:00Z"). */
void meta_timestamp(char *buf, size_t cap);

/* Every backend's devices, one line each ("backend cpu: device 0: ..."), each line after
 * `prefix`, into f; a line saying why when the probe fails. */
void meta_devices_text(FILE *f, const char *prefix);

/* The same as a JSON value (burst_probe's "backends" array; null when the probe fails). */
void meta_devices_json(FILE *f);

/* The metadata members of --json's object, each with a leading ", " except the first, which is
 * "schema_version": the schema, timestamp, host, commit, burstrun and library versions, the
 * features and the devices (null unless `devices`: probing them is left out of usage errors). */
void meta_json_fields(FILE *f, int devices);

/* s as a JSON string (quoted, escaped) into f. */
void meta_json_str(FILE *f, const char *s);

#endif /* BURST_TOOLS_BURSTRUN_META_H */
