/*
 * transport/tp_launch_env.h - ranks started by launchers that know nothing of burst (private).
 *
 * burst_comm_create_env joins a ring from the environment. burstrun sets BURST_RANK,
 * BURST_SIZE, BURST_RENDEZVOUS and BURST_JOB_KEY itself; the launchers people already use set
 * their own variables instead, and this file reads them:
 *
 *   torchrun   RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun, torch.distributed.launch,
 *              and any launcher or script that sets the same four)
 *   slurm      SLURM_PROCID, SLURM_NTASKS (srun), the host of SLURM_PROCID 0 from MASTER_ADDR,
 *              else the first host of SLURM_STEP_NODELIST, else of SLURM_JOB_NODELIST
 *
 * torchrun's variables win when both sets are present (torchrun started by srun). No launcher
 * of these carries a secret, so BURST_JOB_KEY must be in the environment of every rank.
 *
 * The job's rendezvous (burst/comm.h) is then hosted by rank 0 in its own process, at
 *   BURST_RENDEZVOUS ("host:port") when set, else
 *   host: MASTER_ADDR, else (slurm) the node list's first host;
 *   port: MASTER_PORT + 1 (MASTER_PORT itself is torch.distributed's store), else (slurm)
 *         20000 + SLURM_JOB_ID % 20000;
 * and every other rank connects there.
 */
#ifndef BURST_TP_LAUNCH_ENV_H
#define BURST_TP_LAUNCH_ENV_H

#include <stddef.h>

#include "burst/status.h"

struct burst_launch_env {
    const char *launcher; /* "torchrun" or "slurm" */
    int rank, size;
    char host[256];    /* where rank 0's rendezvous listens (no brackets around IPv6) */
    int port;          /* its port, 1..65535 */
    char address[300]; /* "host:port" ("[v6]:port") the ranks connect to */
};

/*
 * Read the launcher's variables. rendezvous: BURST_RENDEZVOUS when set (NULL otherwise), which
 * replaces the address rule above. Returns 1 with *le filled when a launcher's variables are
 * present, 0 when none are, -1 with the thread's error set (BURST_ERR_INVALID_ARG naming `who`,
 * the variable and its value) when one is missing or malformed.
 */
int burst_launch_env_detect(const char *who, const char *rendezvous, struct burst_launch_env *le);

/*
 * The first host of a Slurm node list ("node[03-05,9],gpu1" -> "node03") into buf; 0, or -1
 * when the list is empty or malformed (unbalanced brackets, an empty range).
 */
int burst_launch_first_host(const char *nodelist, char *buf, size_t cap);

#endif /* BURST_TP_LAUNCH_ENV_H */
