/*
 * tools/launch_mpi.h - burstrun across hosts: Open MPI's mpirun starts the ranks.
 *
 * Launcher side (`burstrun --hosts h1:4,h2:4 ...` or `--hostfile F`): launch_mpi_run() runs
 *   mpirun -np G (--host LIST | --hostfile F) --bind-to none|core|numa [--report-bindings] \
 *          [--mpirun-args ...] [-x BURST_* -x FI_*]... \
 *          <this burstrun> --mpi-rank-worker <the job's own arguments>
 * passes mpirun's stdout through (rank 0 prints the job's table or JSON there) and its stderr,
 * and when the job fails names the rank Open MPI reports ("process rank N ... exited on
 * signal ..."). Ctrl-C reaches mpirun (same process group), which stops every rank.
 *
 * Rank side (`--mpi-rank-worker`): every rank initialises MPI, runs the job exactly as a local
 * rank process does (tools/job.h job_worker_main) on a private arena, bootstrapped through MPI
 * (bootstrap "mpi": launch_mpi_allgather is the library's burst_comm_params.oob_allgather, so
 * burstrun links MPI and libburst does not); then launch_mpi_merge() gathers the arenas into rank 0 with
 * a bitwise-OR reduction, which is exact because every rank writes only its own slot, timings
 * and shard rows, leaving everything else zero. Rank 0 then reports for the whole job.
 *
 * What the hosts need: the same burstrun (same path) and libburst on every host, Open MPI's
 * daemons reachable (passwordless ssh from the launching host, as mpirun requires), and a fabric
 * between them (tcp, verbs or efa; --iface names the interface to use when there are several).
 * Every rank holds the job's global tensors (the arena), so memory per rank grows with G.
 */
#ifndef BURST_TOOLS_LAUNCH_MPI_H
#define BURST_TOOLS_LAUNCH_MPI_H

#include <stddef.h>

#include "burst/comm.h"

/* Nonzero when burstrun was built with MPI (the rank side needs it; mpirun itself is found at
 * run time). */
int launch_mpi_available(void);

/* How mpirun is run (burstrun's launcher flags). */
struct launch_mpi_opts {
    const char *hosts;       /* Open MPI's --host syntax, "h1:4,h2:4", or NULL */
    const char *hostfile;    /* an Open MPI hostfile, or NULL */
    const char *bind_to;     /* mpirun --bind-to: none | core | numa (with --report-bindings
                                unless none) */
    const char *mpirun_args; /* more mpirun arguments, separated by spaces, or NULL */
    int verbose;             /* print mpirun's command line on stderr */
};

/*
 * Launcher: run `self --mpi-rank-worker job_args...` on G ranks as mo says. Every BURST_* and
 * FI_* variable of this environment goes with the job (-x NAME). Returns burstrun's exit status:
 * mpirun's, or 2 when mpirun cannot be started, 128 + signal when it was killed by one.
 */
int launch_mpi_run(const char *prog, const char *self, int G, const struct launch_mpi_opts *mo,
                   char **job_args, int njob_args);

/* Rank side: MPI_Init_thread and the bootstrap's duplicate of MPI_COMM_WORLD; *rank_p / *size_p
 * of MPI_COMM_WORLD. 0, or -1 with a message. */
int launch_mpi_init(int *rank_p, int *size_p);

/* Rank side: the bootstrap's allgather (burst/comm.h burst_oob_allgather_fn; ctx unused):
 * MPI_Iallgather on a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, tested until
 * timeout_ms. After a timeout it refuses further calls and launch_mpi_finalize keeps the
 * duplicate (the exchange may still be pending). BURST_ERR_UNSUPPORTED in a build without MPI. */
burst_status_t launch_mpi_allgather(void *ctx, const void *send, void *recv, size_t len,
                                    int timeout_ms);

/* Rank side: bitwise-OR `bytes` of every rank's arena into rank 0's (in place there). */
int launch_mpi_merge(void *arena, size_t bytes);

/* The MPI library's version (MPI_Get_library_version, which MPI allows before MPI_Init), its
 * first line, into buf; "" in a build without MPI. */
void launch_mpi_library_version(char *buf, size_t cap);

/* Rank side: MPI_Finalize. */
void launch_mpi_finalize(void);

#endif /* BURST_TOOLS_LAUNCH_MPI_H */
