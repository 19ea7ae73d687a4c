/*
 * transport/tp_launch_env.c - the rank, size and rendezvous address of a process started by
 * torchrun or Slurm's srun, from their variables (tp_launch_env.h has the rules).
 */
#include "tp_launch_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "settings.h"

/* A launcher's variable (not a BURST_* setting: the launcher sets it): NULL when unset or
 * empty. */
static const char *launcher_var(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

/* The integer in lo..hi of variable `name`, which `launcher` sets: 0, or -1 with the error. */
static int var_int(const char *who, const char *launcher, const char *name, long lo, long hi,
                   long *v_p)
{
    const char *s = launcher_var(name);
    if (!s) {
        burst_error(BURST_ERR_INVALID_ARG, "%s: %s is not set (%s's variables are, and it sets %s)",
                    who, name, launcher, name);
        return -1;
    }
    if (!burst_settings_parse_long(s, lo, hi, v_p)) {
        burst_error(BURST_ERR_INVALID_ARG, "%s: %s = \"%.64s\" is not an integer in %ld..%ld", who,
                    name, s, lo, hi);
        return -1;
    }
    return 0;
}

int burst_launch_first_host(const char *nodelist, char *buf, size_t cap)
{
    size_t o = 0;
    const char *p = nodelist;
    while (*p && *p != ',') {
        if (*p == '[') { /* a range list: its first entry, up to '-', ',' or ']' */
            const char *end = strchr(p, ']');
            size_t n = strcspn(p + 1, "-,]");
            if (!end || n == 0 || p + 1 + n > end)
                return -1;
            if (o + n >= cap)
                return -1;
            memcpy(buf + o, p + 1, n);
            o += n;
            p = end + 1;
            continue;
        }
        if (*p == ']' || o + 1 >= cap)
            return -1;
        buf[o++] = *p++;
    }
    buf[o] = '\0';
    return o ? 0 : -1;
}

/* BURST_RENDEZVOUS "host:port" ("[v6]:port") into le->host and le->port. */
static int split_address(const char *who, const char *rv, struct burst_launch_env *le)
{
    const char *colon = strrchr(rv, ':');
    long port = 0;
    size_t hl = colon ? (size_t)(colon - rv) : 0;
    const char *h = rv;
    if (hl >= 2 && rv[0] == '[' && rv[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (!colon || hl == 0 || hl >= sizeof(le->host) ||
        !burst_settings_parse_long(colon + 1, 1, 65535, &port)) {
        burst_error(BURST_ERR_INVALID_ARG,
                    "%s: BURST_RENDEZVOUS = \"%.64s\" is not host:port (port 1..65535), where "
                    "rank 0 of the %s job hosts the rendezvous",
                    who, rv, le->launcher);
        return -1;
    }
    memcpy(le->host, h, hl);
    le->host[hl] = '\0';
    le->port = (int)port;
    return 0;
}

/* le->host from MASTER_ADDR, else (Slurm) the node list's first host. */
static int rank0_host(const char *who, struct burst_launch_env *le, int slurm)
{
    const char *master = launcher_var("MASTER_ADDR");
    const char *list_var =
        launcher_var("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    const char *list = launcher_var(list_var);
    if (master) {
        if (strlen(master) >= sizeof(le->host)) {
            burst_error(BURST_ERR_INVALID_ARG, "%s: MASTER_ADDR = \"%.64s...\" is too long", who,
                        master);
            return -1;
        }
        snprintf(le->host, sizeof(le->host), "%s", master);
        return 0;
    }
    if (!slurm || !list) {
        burst_error(BURST_ERR_INVALID_ARG,
                    "%s: MASTER_ADDR is not set (the %s job's rank 0 hosts the rendezvous there%s)",
                    who, le->launcher,
                    slurm ? "; without it, at the first host of SLURM_JOB_NODELIST, not set "
                            "either"
                          : "");
        return -1;
    }
    if (burst_launch_first_host(list, le->host, sizeof(le->host)) != 0) {
        burst_error(BURST_ERR_INVALID_ARG,
                    "%s: %s = \"%.64s\" is not a Slurm node list (set MASTER_ADDR to the host of "
                    "SLURM_PROCID 0)",
                    who, list_var, list);
        return -1;
    }
    return 0;
}

/* le->port from MASTER_PORT + 1, else (Slurm) from SLURM_JOB_ID. */
static int rank0_port(const char *who, struct burst_launch_env *le, int slurm)
{
    long v = 0;
    if (launcher_var("MASTER_PORT") || !slurm) {
        if (var_int(who, le->launcher, "MASTER_PORT", 1, 65534, &v) != 0)
            return -1;
        le->port = (int)v + 1;
        return 0;
    }
    if (!launcher_var("SLURM_JOB_ID")) {
        burst_error(BURST_ERR_INVALID_ARG,
                    "%s: neither MASTER_PORT nor SLURM_JOB_ID is set (the slurm job's rendezvous "
                    "port is MASTER_PORT + 1, else 20000 + SLURM_JOB_ID %% 20000)",
                    who);
        return -1;
    }
    if (var_int(who, le->launcher, "SLURM_JOB_ID", 0, 0x7fffffffL, &v) != 0)
        return -1;
    le->port = 20000 + (int)(v % 20000);
    return 0;
}

int burst_launch_env_detect(const char *who, const char *rendezvous, struct burst_launch_env *le)
{
    memset(le, 0, sizeof(*le));
    int slurm = 0;
    const char *rank_var = "RANK", *size_var = "WORLD_SIZE";
    if (launcher_var("RANK") && launcher_var("WORLD_SIZE")) {
        le->launcher = "torchrun";
    } else if (launcher_var("SLURM_PROCID") && launcher_var("SLURM_NTASKS")) {
        le->launcher = "slurm";
        rank_var = "SLURM_PROCID";
        size_var = "SLURM_NTASKS";
        slurm = 1;
    } else {
        return 0;
    }
    long size = 0, rank = 0;
    if (var_int(who, le->launcher, size_var, 1, 65536, &size) != 0 ||
        var_int(who, le->launcher, rank_var, 0, size - 1, &rank) != 0)
        return -1;
    le->rank = (int)rank;
    le->size = (int)size;
    if (rendezvous) {
        if (split_address(who, rendezvous, le) != 0)
            return -1;
    } else if (rank0_host(who, le, slurm) != 0 || rank0_port(who, le, slurm) != 0) {
        return -1;
    }
    snprintf(le->address, sizeof(le->address), strchr(le->host, ':') ? "[%s]:%d" : "%s:%d",
             le->host, le->port);
    return 1;
}
