/* tools/job_size.c - see job_size.h */
#include "job_size.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "job.h"
#include "job_internal.h"

int job_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > UINT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

/* Elements of a [B, N, H, d] tensor, or 0 above JOB_MAX_ELEMS. */
static uint64_t tensor_elems(const struct job_params *p, int heads)
{
    uint64_t x = 1;
    if (p->batch < 1 || p->seq_len < 1 || heads < 1 || p->head_dim < 1)
        return 0;
    if (!job_mul(x, (uint64_t)p->batch, &x) || !job_mul(x, (uint64_t)p->seq_len, &x) ||
        !job_mul(x, (uint64_t)heads, &x) || !job_mul(x, (uint64_t)p->head_dim, &x))
        return 0;
    return x <= JOB_MAX_ELEMS ? x : 0;
}

uint64_t job_tensor_bytes(const struct job_params *p, char *msg, size_t cap)
{
    int h = p->q_heads > p->kv_heads ? p->q_heads : p->kv_heads;
    uint64_t esz = burst_dtype_size(p->dtype), qel = tensor_elems(p, p->q_heads),
             kel = tensor_elems(p, p->kv_heads), big = tensor_elems(p, h);
    if (!esz || !qel || !kel || !big) {
        snprintf(msg, cap,
                 "--batch %lld x --seq %lld x --heads %d (--kv-heads %d) x --head-dim %d: a "
                 "tensor of more than 2^50 elements (too large for the library and for this "
                 "machine's address space)",
                 (long long)p->batch, (long long)p->seq_len, p->q_heads, p->kv_heads, p->head_dim);
        return 0;
    }
    /* below 2^50 elements of at most 4 bytes: the sums below stay under 2^56 */
    uint64_t lse = qel / (uint64_t)p->head_dim * 4u;
    uint64_t fwd = (2 * qel + 2 * kel) * esz + lse;
    return p->run_bwd ? fwd + (2 * qel + 2 * kel) * esz : fwd;
}

static uint64_t meminfo_total(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    if (!f)
        return UINT64_MAX;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return kib ? (uint64_t)kib * 1024u : UINT64_MAX;
}

/* A cgroup limit file: a number of bytes, or "max" / unreadable = UINT64_MAX. */
static uint64_t limit_file(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v;
    uint64_t r = UINT64_MAX;
    if (!f)
        return r;
    if (fscanf(f, "%llu", &v) == 1)
        r = (uint64_t)v;
    fclose(f);
    return r;
}

/* The smallest limit in file `name` of group grp ("/a/b") and the groups above it under root. */
static uint64_t group_walk(const char *root, char *grp, const char *name)
{
    char path[1400];
    uint64_t best = UINT64_MAX;
    while (grp[0] == '/' && grp[1]) { /* "/a/b", then "/a" */
        snprintf(path, sizeof(path), "%s%s/%s", root, grp, name);
        uint64_t v = limit_file(path);
        best = v < best ? v : best;
        char *cut = strrchr(grp, '/');
        if (cut == grp)
            break;
        *cut = '\0';
    }
    return best;
}

uint64_t job_memory_limit(void)
{
    /* in a container the group's own limit may sit at the v1 hierarchy's root */
    uint64_t best = meminfo_total(), v1 = limit_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    best = v1 < best ? v1 : best;
    struct rlimit rl; /* every byte of the job is mapped in this process's address space */
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < best)
        best = (uint64_t)rl.rlim_cur;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    if (!f)
        return best;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        uint64_t v = UINT64_MAX;
        if (!strncmp(line, "0::", 3)) /* v2: /sys/fs/cgroup/<group>/memory.max */
            v = group_walk("/sys/fs/cgroup", line + 3, "memory.max");
        else if (strstr(line, ":memory:")) /* v1 */
            v = group_walk("/sys/fs/cgroup/memory", strstr(line, ":memory:") + 8,
                           "memory.limit_in_bytes");
        best = v < best ? v : best;
    }
    fclose(f);
    return best;
}

/* Does backend "auto" surely keep its memory in this machine's memory? Where BURST_BACKEND
 * says cpu, or where the library has no GPU backend. The launcher does not create a context to
 * find out (that would start a GPU's driver in it before every job): where auto may resolve to
 * a GPU backend, its scratch is not counted. */
static int auto_is_host(void)
{
    const char *be = NULL;
    if (burst_setting_string("BURST_BACKEND", &be) == BURST_OK && be)
        return strcmp(be, "cpu") == 0;
    const char *f = burst_build_features();
    return !strstr(f, "vulkan") && !strstr(f, "cuda");
}

int job_scratch_bytes(const struct job_params *p, const char *backends, uint64_t *bytes_p,
                      char *msg, size_t cap)
{
    *bytes_p = 0;
    uint64_t *each = calloc((size_t)p->ranks, sizeof(*each));
    if (!each) {
        snprintf(msg, cap, "-n %d: out of memory", p->ranks);
        return -1;
    }
    struct burst_plan_params pp = job_plan_params(p);
    pp.shard_weights = p->weights_mode == JOB_WEIGHTS_GIVEN ? p->weights : NULL;
    pp.measure_speed = p->weights_mode == JOB_WEIGHTS_MEASURED;
    if (burst_plan_workspace_estimate(&pp, p->ranks, each) != BURST_OK) {
        snprintf(msg, cap, "the job's plan: %s", burst_last_error());
        free(each);
        return -1;
    }
    uint64_t sum = 0;
    for (int r = 0; r < p->ranks; r++) {
        char be[64];
        job_list_entry(backends, r, be, sizeof(be));
        if (strcmp(be, "cpu") == 0 || (strcmp(be, "auto") == 0 && auto_is_host()))
            sum += each[r]; /* at most 65536 ranks of < 2^47 bytes each */
    }
    free(each);
    *bytes_p = sum;
    return 0;
}

int job_memory_check(const struct job_params *p, uint64_t scratch, char *msg, size_t cap)
{
    uint64_t tensors = job_tensor_bytes(p, msg, cap), have = job_memory_limit();
    if (!tensors)
        return -1;
    uint64_t need = tensors + scratch;
    if (need <= have)
        return 0;
    snprintf(msg, cap,
             "--batch %lld x --seq %lld x --heads %d (--kv-heads %d) x --head-dim %d: the job's "
             "tensors (%.3g GiB) and the library's scratch on this machine's ranks (%.3g GiB) "
             "need %.3g GiB, more than the %.3g GiB this machine (or this process's cgroup) has",
             (long long)p->batch, (long long)p->seq_len, p->q_heads, p->kv_heads, p->head_dim,
             (double)tensors / 1073741824.0, (double)scratch / 1073741824.0,
             (double)need / 1073741824.0, (double)have / 1073741824.0);
    return -1;
}
