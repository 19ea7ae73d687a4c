/*
 * tools/launch.h - burstrun's launcher for rank processes on this host.
 *
 * launch_run creates the job's arena (a memfd: parameters, one result slot per rank, the global
 * tensors; see job.h) and a rendezvous service on 127.0.0.1 with a random key, then starts G
 * copies of `self` with `--rank-worker FD` and the environment of burst_comm_create_env
 * (BURST_RANK, BURST_SIZE, BURST_RENDEZVOUS, BURST_JOB_KEY, BURST_FABRIC, BURST_IFACE,
 * BURST_TIMEOUT_MS). It then supervises them from one poll() loop:
 *   - each rank's stdout and stderr come through pipes and are printed line by line with a
 *     "[rank i] " prefix (stdout lines go to stderr when stdout carries JSON);
 *   - a progress line on stderr (iteration i/K, rate, ETA) when stderr is a terminal and the job
 *     has run for more than 2 s, rewritten in place;
 *   - SIGCHLD: a rank that died (signal, or a non-zero exit) is reported to the rendezvous
 *     (burst_rendezvous_report_failure) so that every survivor's ring call returns
 *     BURST_ERR_PEER_FAILED at once; survivors get LAUNCH_GRACE_MS to exit, then SIGKILL;
 *   - SIGINT / SIGTERM / SIGHUP: every rank gets SIGTERM, then SIGKILL after the grace period.
 * Every child is reaped, the arena and the rendezvous are gone when launch_run returns. Rank
 * processes run in their own process group (a terminal's Ctrl-C reaches only the launcher) and
 * die with the launcher (PR_SET_PDEATHSIG), so none outlives it even if it is SIGKILLed.
 */
#ifndef BURST_TOOLS_LAUNCH_H
#define BURST_TOOLS_LAUNCH_H

#include "job.h"
#include "launch_bind.h"

/* Time the other ranks get to exit after the first failure, before SIGKILL. */
#define LAUNCH_GRACE_MS 3000

/*
 * libfabric's ofi_rxm settings for burstrun's own processes, set in its environment before
 * anything loads libfabric (the library never sets them: transport/tp_fabric.c), unless the user
 * set them: FI_OFI_RXM_BUFFER_SIZE = 64 KiB (burst keeps every tcp / verbs chunk within rxm's
 * eager limit, so this sets the bandwidth; 16 KiB costs half of tcp's speed), and the bounce
 * buffer pools FI_OFI_RXM_TX_SIZE, _RX_SIZE, _MSG_RX_SIZE = 256 buffers each (rxm's defaults,
 * 2048 and 4096, would cost about 400 MiB per process at 64 KiB; the ring keeps only a few
 * blocks in flight per peer: about 140 MiB, no bandwidth lost, docs/BENCHMARKS.md). Rank
 * processes, thread ranks and ranks under mpirun (burstrun again) all get them.
 */
void launch_fabric_env_defaults(void);

/* launch_run's status when a signal stopped the job (the signal in *signal_p). */
#define LAUNCH_EINTR 5

struct launch_opts {
    const char *self;        /* executable of the rank processes (this program) */
    const char *backend;     /* context backends, comma-separated, one per rank (cycling) */
    const char *num_threads; /* compute threads per rank, comma-separated (cycling); "0" =
                                cores / G (at least 1), or BURST_NUM_THREADS when set */
    const char *device;      /* per-rank GPU devices, comma-separated, cycling ("" = default) */
    const char *fabric;      /* auto | shm | tcp | verbs | efa */
    const char *iface;     /* NULL: default (127.0.0.1 for tcp, the provider's choice otherwise) */
    int timeout_s;         /* peer timeout; 0 = BURST_TIMEOUT_MS or the library default */
    int json;              /* stdout is JSON: rank stdout goes to stderr */
    int verbose;           /* print the launch (rendezvous, pids) on stderr */
    struct job_kill kill;  /* test fault injection (rank -1 = off) */
    enum launch_bind bind; /* --bind-to: each rank's CPUs (launch_bind.h), reported on stderr */
};

/*
 * Run the job as lo->... rank processes. Fills *r (always; release with job_result_free) and
 * returns r->status: JOB_OK, JOB_EUSAGE, JOB_EFAIL (r->message names the rank that failed first
 * and how it died), or LAUNCH_EINTR with the signal in *signal_p.
 */
int launch_run(const struct job_params *p, const struct launch_opts *lo, struct job_result *r,
               int *signal_p);

#endif /* BURST_TOOLS_LAUNCH_H */
