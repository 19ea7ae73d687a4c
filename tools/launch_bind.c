/* tools/launch_bind.c - the CPU sets of burstrun --bind-to core | numa (launch_bind.h). */
#include "launch_bind.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const launch_bind_names[3] = {"none", "core", "numa"};

#define NODE_DIR "/sys/devices/system/node"
#define MAX_NODES 1024

int launch_bind_parse(const char *list, cpu_set_t *set)
{
    CPU_ZERO(set);
    const char *p = list;
    while (*p && *p != '\n') {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p || lo < 0 || lo >= CPU_SETSIZE)
            return -1;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1 || hi < lo || hi >= CPU_SETSIZE)
                return -1;
            p = end;
        }
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, set);
        if (*p == ',')
            p++;
        else if (*p && *p != '\n')
            return -1;
    }
    return 0;
}

void launch_bind_format(const cpu_set_t *set, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && o + 1 < cap; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        int n = e > c ? snprintf(buf + o, cap - o, "%s%d-%d", o ? "," : "", c, e)
                      : snprintf(buf + o, cap - o, "%s%d", o ? "," : "", c);
        if (n < 0 || (size_t)n >= cap - o) {
            buf[o] = '\0';
            return;
        }
        o += (size_t)n;
        c = e;
    }
}

/* --bind-to core: block `rank` of G of the allowed CPUs. */
static void core_block(const cpu_set_t *allowed, int rank, int G, cpu_set_t *set)
{
    int n = CPU_COUNT(allowed), k = 0;
    int lo = G <= n ? (int)((long)rank * n / G) : rank % n;
    int hi = G <= n ? (int)((long)(rank + 1) * n / G) : lo + 1;
    CPU_ZERO(set);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, allowed)) {
            if (k >= lo && k < hi)
                CPU_SET(c, set);
            k++;
        }
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The NUMA nodes with allowed CPUs, in number order, into nodes[] (their CPUs, allowed only, in
 * cpus[]): their count, 0 without NUMA information. */
static int numa_nodes(const cpu_set_t *allowed, int *nodes, cpu_set_t *cpus)
{
    DIR *d = opendir(NODE_DIR);
    int all[MAX_NODES], n = 0, kept = 0;
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d)) && n < MAX_NODES;) {
        char *end;
        long v = strncmp(e->d_name, "node", 4) == 0 ? strtol(e->d_name + 4, &end, 10) : -1;
        if (v >= 0 && end != e->d_name + 4 && !*end && v < 1 << 20)
            all[n++] = (int)v;
    }
    closedir(d);
    qsort(all, (size_t)n, sizeof(int), cmp_int);
    for (int i = 0; i < n; i++) {
        char path[96], line[4096];
        snprintf(path, sizeof(path), NODE_DIR "/node%d/cpulist", all[i]);
        FILE *f = fopen(path, "r");
        int ok = f && fgets(line, sizeof(line), f) && launch_bind_parse(line, &cpus[kept]) == 0;
        if (f)
            fclose(f);
        if (!ok)
            continue;
        CPU_AND(&cpus[kept], &cpus[kept], allowed);
        if (CPU_COUNT(&cpus[kept]) > 0)
            nodes[kept++] = all[i];
    }
    return kept;
}

int launch_bind_cpus(enum launch_bind how, int rank, int G, cpu_set_t *set, char *desc, size_t cap)
{
    cpu_set_t allowed;
    char list[512];
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) == 0) {
        snprintf(desc, cap, "cannot read burstrun's own CPU affinity: %s", strerror(errno));
        return -1;
    }
    if (how == LAUNCH_BIND_CORE) {
        core_block(&allowed, rank, G, set);
        launch_bind_format(set, list, sizeof(list));
        snprintf(desc, cap, "cpus %s", list);
        return 0;
    }
    static int nodes[MAX_NODES];
    static cpu_set_t cpus[MAX_NODES];
    int nn = numa_nodes(&allowed, nodes, cpus);
    if (nn == 0) { /* no NUMA information: one node of every allowed CPU */
        *set = allowed;
        launch_bind_format(set, list, sizeof(list));
        snprintf(desc, cap, "numa node 0 (no %s): cpus %s", NODE_DIR, list);
        return 0;
    }
    *set = cpus[rank % nn];
    launch_bind_format(set, list, sizeof(list));
    snprintf(desc, cap, "numa node %d: cpus %s", nodes[rank % nn], list);
    return 0;
}
