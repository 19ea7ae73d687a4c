/*
 * tools/launch_bind.h - burstrun --bind-to: which CPUs each rank process of this host runs on.
 *
 *   none  no binding: every rank may run on every CPU burstrun may run on (the default)
 *   core  the CPUs burstrun may run on (its own affinity, in CPU number order), split into G
 *         consecutive blocks of about n / G, one per rank (with more ranks than CPUs, rank r
 *         gets CPU r mod n alone)
 *   numa  rank r gets the CPUs of NUMA node r mod (nodes) (/sys/devices/system/node/nodeN/
 *         cpulist, nodes without allowed CPUs skipped; a machine without that directory is
 *         one node); memory then follows the first touch, on the rank's node
 *
 * burstrun computes every rank's set before it starts the ranks, prints one report line per
 * rank on stderr, and each rank process applies its set (sched_setaffinity) before exec. Under
 * --hosts, --bind-to goes to mpirun (with --report-bindings) instead.
 */
#ifndef BURST_TOOLS_LAUNCH_BIND_H
#define BURST_TOOLS_LAUNCH_BIND_H

#include <sched.h>
#include <stddef.h>

enum launch_bind {
    LAUNCH_BIND_NONE = 0,
    LAUNCH_BIND_CORE = 1,
    LAUNCH_BIND_NUMA = 2,
};

/* "none", "core", "numa": the values of --bind-to, in the order of enum launch_bind. */
extern const char *const launch_bind_names[3];

/*
 * The CPUs of rank `rank` of the G rank processes of this host under `how` (not
 * LAUNCH_BIND_NONE) into *set, and a description for the report ("cpus 0-3", "numa node 1:
 * cpus 4-7") into desc. 0, or -1 with the reason in desc (burstrun's own affinity unreadable).
 */
int launch_bind_cpus(enum launch_bind how, int rank, int G, cpu_set_t *set, char *desc, size_t cap);

/* A CPU list as the kernel writes one ("0-3,8,10-11") into buf. */
void launch_bind_format(const cpu_set_t *set, char *buf, size_t cap);

/* Parse a kernel CPU list ("0-3,8") into *set (cleared first): 0, or -1 when malformed. */
int launch_bind_parse(const char *list, cpu_set_t *set);

#endif /* BURST_TOOLS_LAUNCH_BIND_H */
