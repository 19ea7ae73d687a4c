/*
 * tools/launch_pmix.h - burstrun's ranks under a PMIx launcher.
 *
 * A rank started by a launcher that runs a PMIx server (Open MPI 4's mpirun, prterun, Slurm's
 * srun --mpi=pmix) finds PMIX_RANK and PMIX_NAMESPACE in its environment. With `--launcher pmix`
 * (tools/burstrun.c picks the launch environment; docs/BURSTRUN.md gives the precedence)
 * burstrun's rank side takes from PMIx:
 *   - its rank (PMIx_Init's process) and the job's size (PMIx_Get of PMIX_JOB_SIZE),
 *   - the bootstrap exchange of fabric addresses: launch_pmix_allgather is the library's
 *     burst_comm_params.oob_allgather (bootstrap "mpi", the program's allgather), through
 *     PMIx_Put, PMIx_Commit, PMIx_Fence with PMIX_COLLECT_DATA and one PMIx_Get per rank.
 * burstrun links PMIx; libburst does not. The results still reach rank 0 through MPI
 * (launch_mpi_merge), which the same launcher provides.
 */
#ifndef BURST_TOOLS_LAUNCH_PMIX_H
#define BURST_TOOLS_LAUNCH_PMIX_H

#include <stddef.h>

#include "burst/comm.h"

/* Nonzero when burstrun was built with PMIx. */
int launch_pmix_available(void);

/* Nonzero when this process was started by a PMIx launcher: PMIX_RANK and PMIX_NAMESPACE are
 * set (the launcher's variables, not BURST_* settings). */
int launch_pmix_env_present(void);

/*
 * PMIx_Init, then this process's rank and the job's size (PMIX_JOB_SIZE). 0, or -1 after
 * printing an error on stderr that names PMIx, the rank (PMIX_RANK as the launcher set it) and
 * PMIx's status, e.g. when the launcher's PMIx server cannot be reached; a build without PMIx
 * says so. `prog` prefixes the messages.
 */
int launch_pmix_init(const char *prog, int *rank_p, int *size_p);

/*
 * The bootstrap's allgather (burst/comm.h burst_oob_allgather_fn; ctx unused): this rank's `len`
 * bytes under a key of its own per call (PMIx_Put, PMIx_Commit), a PMIx_Fence over the job's
 * namespace that collects the data, then each rank's bytes (PMIx_Get) into recv in rank order.
 * timeout_ms goes to the fence and the gets as PMIX_TIMEOUT (whole seconds, at least 1).
 * BURST_ERR_TIMEOUT when PMIx reports one, BURST_ERR_TRANSPORT for any other failure (or a peer's
 * value of another length), BURST_ERR_UNSUPPORTED in a build without PMIx.
 */
burst_status_t launch_pmix_allgather(void *ctx, const void *send, void *recv, size_t len,
                                     int timeout_ms);

/* PMIx_Finalize when launch_pmix_init succeeded; nothing otherwise. */
void launch_pmix_finalize(void);

/* The PMIx library's version (PMIx_Get_version, first word) into buf; "" without PMIx. */
void launch_pmix_version(char *buf, size_t cap);

#endif /* BURST_TOOLS_LAUNCH_PMIX_H */
