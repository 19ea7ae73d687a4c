/*
 * tests/test_procs.c - rings of real processes joined through the rendezvous (suite 'net').
 *
 *   test_procs shm|tcp results   G = 2, 3, 4, 8 rank processes: forward + backward results are
 *                                bitwise identical to the in-process ring (transport "local")
 *   test_procs shm|tcp faults    a rank SIGKILLed during the forward, then during the backward:
 *                                every survivor returns BURST_ERR_PEER_FAILED (or TIMEOUT) soon,
 *                                naming the rank
 *   test_procs tcp netns         two "hosts" (network namespaces joined by a veth pair), G = 4, 6,
 *                                two-level ring of G/2 ranks per host: fabric auto becomes the
 *                                hybrid "shm+tcp", 2 hosts, results bitwise those of the
 *                                in-process two-level ring. SKIP (77) where `ip netns add` fails
 *   test_procs shm|tcp msgfaults G = 3 rank processes with BURST_FAULT (runtime/fault.h): a
 *                                dropped message (BURST_ERR_TIMEOUT naming the sender within
 *                                the 2 s timeout, PEER_FAILED elsewhere), a truncated one
 *                                (BURST_ERR_TRANSPORT, length mismatch, no timeout wait), a
 *                                duplicated, a delayed one and a slow rank (results bitwise
 *                                those of the in-process ring), out of memory in every process
 *                                (NO_MEMORY / PEER_FAILED)
 *   test_procs shm refused       wrong / malformed keys and corrupted, truncated and oversized
 *                                control messages are refused (before HELLO every other type,
 *                                on its header); the service keeps serving, and admits ranks
 *                                while strangers hold idle connections; CLEANUP removes only
 *                                a segment of the sender's own process, and nothing when the
 *                                HELLO's process id is another process's (a forged claim)
 *   test_procs shm|tcp mpi       G = 2, 4 ranks started by Open MPI's mpirun join through the MPI
 *                                bootstrap (burst_comm_create with burstrun's MPI allgather,
 *                                tools/launch_mpi.c; burst_comm_create_env refuses mpirun's
 *                                environment naming it): results as in "results". SKIP (77) when
 *                                mpirun is absent or starts no rank (e.g. no slots)
 *   test_procs shm|tcp launchers G = 2, 4 ranks started as torchrun starts them (RANK,
 *                                WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and as srun does
 *                                (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, SLURM_JOB_ID),
 *                                with BURST_JOB_KEY and no BURST_RANK: burst_comm_create_env
 *                                joins them, rank 0 hosting the rendezvous; results as in
 *                                "results", and the rendezvous gone once they exit
 * Exit 77 (SKIP) when libfabric or the provider is absent. Every case checks that no process,
 * /dev/shm entry, file descriptor or listening socket is left behind.
 *
 * The parent runs burst_rendezvous_create and starts each rank with fork + exec of this program
 * (--worker): a fresh process image, as a launcher gives, and no locks inherited from the
 * parent's threads. Workers join with burst_comm_create_env (BURST_RANK, ...) and write their
 * outputs into a shared memory file that the parent compares with its own in-process run.
 * Progress bytes on a pipe ('F' before the forward, 'B' before the backward) let the parent kill
 * a rank while the ring is running.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "burst/burst.h"
#include "harness.h"
#include "launch_mpi.h"
#include "tp_bootstrap.h"
#include "tp_peer.h"

#define MAXG 8
#define SKIP 77

static const char *g_prov; /* "shm" or "tcp" */
static int g_failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

/* ---- the problem (same in workers and parent) ---- */

struct prob {
    int G;
    int64_t B, N;
    int Hq, Hkv, d;
    uint64_t seed;
    int rpn; /* ranks per node of a two-level ring, 0 = flat (workers: BURST_TEST_RPN) */
};

/* Result slot of one rank in the shared file. */
struct slot {
    int started, pid; /* mpi: the worker reached main */
    int done;
    burst_status_t st_comm, st_plan, st_fwd, st_bwd;
    double t_fail_ms; /* CLOCK_MONOTONIC when the failing call returned */
    char msg[512];
    char fabric[16];
    int hosts;
};

/* Permuted-order tensors of the whole problem, [B, N, H, d]; lse per rank, consecutive. */
struct bufs {
    float *q, *k, *v, *dout;       /* inputs */
    float *o, *dq, *dk, *dv, *lse; /* outputs */
};

static size_t nq(const struct prob *p)
{
    return (size_t)(p->B * p->N * p->Hq * p->d);
}

static size_t nkv(const struct prob *p)
{
    return (size_t)(p->B * p->N * p->Hkv * p->d);
}

static size_t out_bytes(const struct prob *p)
{
    return sizeof(float) * (2 * nq(p) + 2 * nkv(p) + (size_t)(p->B * p->Hq * p->N));
}

static void bufs_outputs_at(const struct prob *p, struct bufs *b, void *base)
{
    float *f = base;
    b->o = f;
    b->dq = b->o + nq(p);
    b->dk = b->dq + nq(p);
    b->dv = b->dk + nkv(p);
    b->lse = b->dv + nkv(p);
}

/* Inputs in natural order from the seed, then permuted into rank order (zigzag). */
static int make_inputs(const struct prob *p, struct bufs *b)
{
    size_t n[4] = {nq(p), nkv(p), nkv(p), nq(p)};
    int heads[4] = {p->Hq, p->Hkv, p->Hkv, p->Hq};
    float **dst[4] = {&b->q, &b->k, &b->v, &b->dout};
    uint64_t s = p->seed;
    for (int t = 0; t < 4; t++) {
        float *nat = malloc(n[t] * sizeof(float));
        *dst[t] = malloc(n[t] * sizeof(float));
        if (!nat || !*dst[t]) {
            free(nat);
            return -1;
        }
        for (size_t i = 0; i < n[t]; i++)
            nat[i] = (float)harness_rng_uniform(&s, -2.0, 2.0);
        struct burst_tensor tn =
            burst_tensor_contiguous(nat, BURST_DTYPE_FP32, p->B, p->N, heads[t], p->d);
        struct burst_tensor tp =
            burst_tensor_contiguous(*dst[t], BURST_DTYPE_FP32, p->B, p->N, heads[t], p->d);
        burst_status_t st = burst_layout_permute(BURST_LAYOUT_ZIGZAG, p->G, &tn, &tp);
        free(nat);
        if (st != BURST_OK) {
            fprintf(stderr, "permute: %s\n", burst_last_error());
            return -1;
        }
    }
    return 0;
}

static void free_inputs(struct bufs *b)
{
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->dout);
}

/* The view of rank r's shard of a permuted [B, N, H, d] tensor. */
static struct burst_tensor shard(const struct prob *p, float *base, int heads, int64_t off,
                                 int64_t len)
{
    struct burst_tensor t = {
        .data = base + off * heads * p->d,
        .dtype = BURST_DTYPE_FP32,
        .shape = {p->B, len, heads, p->d},
        .stride = {p->N * heads * p->d, (int64_t)heads * p->d, p->d, 1},
    };
    return t;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void progress(int fd, int rank, char phase)
{
    if (fd >= 0) {
        char m[2] = {(char)rank, phase};
        ssize_t n = write(fd, m, 2);
        (void)n;
    }
}

/* One rank: plan, forward, backward. Outputs land in out's shard of rank `rank`. */
static void run_rank(struct burst_context *ctx, struct burst_comm *comm, const struct prob *p,
                     const struct bufs *in, struct bufs *out, struct slot *sl, int pipe_fd)
{
    int r = burst_comm_rank(comm);
    int64_t off = 0, len = 0;
    burst_layout_shard_offset(BURST_LAYOUT_ZIGZAG, p->N, p->G, r, &off);
    burst_layout_shard_len(BURST_LAYOUT_ZIGZAG, p->N, p->G, r, &len);
    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = p->B;
    pp.seq_len = p->N;
    pp.q_heads = p->Hq;
    pp.kv_heads = p->Hkv;
    pp.head_dim = p->d;
    pp.dtype = BURST_DTYPE_FP32;
    pp.causal = 1;
    pp.layout = BURST_LAYOUT_ZIGZAG;
    pp.deterministic = 1;
    pp.ranks_per_node = p->rpn;
    struct burst_plan *plan = NULL;
    sl->st_plan = burst_plan_create(ctx, comm, &pp, &plan);
    if (sl->st_plan != BURST_OK) {
        sl->t_fail_ms = now_ms();
        snprintf(sl->msg, sizeof(sl->msg), "%s", burst_last_error());
        return;
    }
    struct burst_tensor q = shard(p, in->q, p->Hq, off, len), k = shard(p, in->k, p->Hkv, off, len),
                        v = shard(p, in->v, p->Hkv, off, len),
                        dout = shard(p, in->dout, p->Hq, off, len),
                        o = shard(p, out->o, p->Hq, off, len),
                        dq = shard(p, out->dq, p->Hq, off, len),
                        dk = shard(p, out->dk, p->Hkv, off, len),
                        dv = shard(p, out->dv, p->Hkv, off, len);
    float *lse = out->lse + p->B * p->Hq * off; /* [B, Hq, len] of this rank */
    progress(pipe_fd, r, 'F');
    sl->st_fwd = burst_attention_forward(plan, &q, &k, &v, &o, lse);
    if (sl->st_fwd == BURST_OK) {
        progress(pipe_fd, r, 'B');
        sl->st_bwd = burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
    }
    if (sl->st_fwd != BURST_OK || sl->st_bwd != BURST_OK) {
        sl->t_fail_ms = now_ms();
        snprintf(sl->msg, sizeof(sl->msg), "%s", burst_last_error());
    }
    burst_plan_destroy(plan);
}

/* ---- worker process ---- */

static int worker_main(int argc, char **argv)
{
    /* --worker G B N Hq Hkv d seed out_fd pipe_fd, or --mpi-worker G B N Hq Hkv d seed path */
    int mpi = strcmp(argv[1], "--mpi-worker") == 0;
    if (argc != (mpi ? 10 : 11))
        return 2;
    const char *rpn = getenv("BURST_TEST_RPN");
    struct prob p = {atoi(argv[2]),
                     atoll(argv[3]),
                     atoll(argv[4]),
                     atoi(argv[5]),
                     atoi(argv[6]),
                     atoi(argv[7]),
                     strtoull(argv[8], NULL, 0),
                     rpn ? atoi(rpn) : 0};
    int out_fd = mpi ? open(argv[9], O_RDWR | O_CLOEXEC) : atoi(argv[9]);
    int pipe_fd = mpi ? -1 : atoi(argv[10]);
    if (out_fd < 0)
        return 3;
    size_t bytes = MAXG * sizeof(struct slot) + out_bytes(&p);
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, out_fd, 0);
    if (map == MAP_FAILED)
        return 3;
    close(out_fd);
    struct slot *slots = map;
    struct bufs b = {0};
    bufs_outputs_at(&p, &b, (char *)map + MAXG * sizeof(struct slot));
    const char *rs = getenv(mpi ? "OMPI_COMM_WORLD_RANK" : "BURST_RANK");
    if (!rs) /* started as torchrun or srun start their ranks */
        rs = getenv("RANK") ? getenv("RANK") : getenv("SLURM_PROCID");
    int rank = rs ? atoi(rs) : 0;
    if (rank < 0 || rank >= MAXG)
        return 4;
    struct slot *sl = &slots[rank];
    sl->pid = (int)getpid();
    sl->started = 1;
    struct burst_comm *comm = NULL;
    if (mpi) {
        /* The library links no MPI: from mpirun's environment alone it refuses, naming the
         * way that works, burst_comm_create with the program's allgather (here burstrun's). */
        burst_status_t est = burst_comm_create_env(&comm);
        int rank_mpi = -1, size_mpi = 0;
        if (est != BURST_ERR_INVALID_ARG || !strstr(burst_last_error(), "oob_allgather")) {
            sl->st_comm = BURST_ERR_INTERNAL;
            snprintf(sl->msg, sizeof(sl->msg),
                     "burst_comm_create_env under mpirun: %s, not the error naming "
                     "params->oob_allgather: %s",
                     burst_status_str(est), burst_last_error());
        } else if (launch_mpi_init(&rank_mpi, &size_mpi) != 0 || rank_mpi != rank) {
            sl->st_comm = BURST_ERR_INTERNAL;
            snprintf(sl->msg, sizeof(sl->msg), "MPI: rank %d, OMPI_COMM_WORLD_RANK %d", rank_mpi,
                     rank);
        } else {
            struct burst_comm_params mp = burst_comm_params_default();
            const char *iface = getenv("BURST_IFACE");
            mp.transport = "fabric";
            mp.rank = rank_mpi;
            mp.size = size_mpi;
            mp.iface = iface && *iface ? iface : NULL;
            mp.bootstrap = "mpi";
            mp.oob_allgather = launch_mpi_allgather;
            sl->st_comm = burst_comm_create(&mp, &comm);
            if (sl->st_comm != BURST_OK)
                snprintf(sl->msg, sizeof(sl->msg), "%s", burst_last_error());
        }
    } else {
        sl->st_comm = burst_comm_create_env(&comm);
        if (sl->st_comm != BURST_OK)
            snprintf(sl->msg, sizeof(sl->msg), "%s", burst_last_error());
    }
    if (sl->st_comm != BURST_OK) {
        sl->t_fail_ms = now_ms();
        sl->done = 1;
        return 0;
    }
    snprintf(sl->fabric, sizeof(sl->fabric), "%s", burst_comm_fabric(comm));
    sl->hosts = burst_comm_hosts(comm);
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cpu";
    struct burst_context *ctx = NULL;
    if (make_inputs(&p, &b) != 0 || burst_context_create(&cp, &ctx) != BURST_OK)
        return 5;
    run_rank(ctx, comm, &p, &b, &b, sl, pipe_fd);
    burst_context_destroy(ctx);
    burst_comm_destroy(comm);
    free_inputs(&b);
    sl->done = 1;
    munmap(map, bytes);
    if (mpi)
        launch_mpi_finalize();
    return 0;
}

/* ---- parent ---- */

struct job {
    struct prob p;
    struct burst_rendezvous *rv;
    pid_t pid[MAXG + 1];
    int npid;
    int out_fd, pipe_r, pipe_w;
    void *map;
    size_t bytes;
    struct slot *slots;
    struct bufs out;
    /* netns case: the rendezvous' bind address, and per rank a network namespace to enter
     * (an open /run/netns file, or -1) and its BURST_IFACE (NULL: the provider's default) */
    const char *bind;
    int netns[MAXG];
    const char *iface[MAXG];
};

/* How job_spawn tells a rank its place: burstrun's variables (BURST_RANK, ...), torchrun's
 * (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or srun's (SLURM_PROCID, ...); for the last two
 * rank 0 hosts the rendezvous at 127.0.0.1:g_launch_port. */
enum launch_style {
    LAUNCH_BURST,
    LAUNCH_TORCHRUN,
    LAUNCH_SLURM
};
static enum launch_style g_launch;
static int g_launch_port;

static char g_self[4096];
static const char *g_timeout = "20000"; /* BURST_TIMEOUT_MS of the rank processes */
static pid_t g_children[256];           /* every rank process started: their /dev/shm names */
static int g_nchildren;

/* Open a job; bind, netns and iface as in struct job (NULL: loopback, none, default). */
static int job_open_net(struct job *j, const struct prob *p, const char *bind, const int *netns,
                        const char *const *iface)
{
    memset(j, 0, sizeof(*j));
    j->bind = bind;
    for (int r = 0; r < MAXG; r++) {
        j->netns[r] = netns ? netns[r] : -1;
        j->iface[r] = iface ? iface[r] : NULL;
    }
    j->p = *p;
    j->out_fd = j->pipe_r = j->pipe_w = -1;
    j->bytes = MAXG * sizeof(struct slot) + out_bytes(p);
    int pfd[2];
    j->out_fd = memfd_create("burst-test-procs", 0);
    if (j->out_fd < 0 || ftruncate(j->out_fd, (off_t)j->bytes) != 0 || pipe(pfd) != 0)
        return -1;
    j->pipe_r = pfd[0];
    j->pipe_w = pfd[1];
    j->map = mmap(NULL, j->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, j->out_fd, 0);
    if (j->map == MAP_FAILED)
        return -1;
    j->slots = j->map;
    bufs_outputs_at(p, &j->out, (char *)j->map + MAXG * sizeof(struct slot));
    memset(j->out.o, 0xff, out_bytes(p)); /* NaN: every element must be written */
    if (burst_rendezvous_create(j->bind, 0, p->G, NULL, &j->rv) != BURST_OK) {
        fprintf(stderr, "burst_rendezvous_create: %s\n", burst_last_error());
        return -1;
    }
    return 0;
}

static int job_open(struct job *j, const struct prob *p)
{
    return job_open_net(j, p, NULL, NULL, NULL);
}

/* A rank's variables as torchrun or srun set them (g_launch), in the child; none of
 * burstrun's. */
static void launch_env(int rank, int G)
{
    char rs[16], gs[16], port[16], job[16];
    snprintf(rs, sizeof(rs), "%d", rank);
    snprintf(gs, sizeof(gs), "%d", G);
    snprintf(port, sizeof(port), "%d", g_launch_port - 1); /* the rendezvous: MASTER_PORT + 1 */
    snprintf(job, sizeof(job), "%d", 20000 * 7 + (g_launch_port - 20000)); /* 20000 + id%20000 */
    unsetenv("BURST_RANK");
    unsetenv("BURST_SIZE");
    unsetenv("BURST_RENDEZVOUS");
    if (g_launch == LAUNCH_TORCHRUN) {
        setenv("RANK", rs, 1);
        setenv("LOCAL_RANK", rs, 1);
        setenv("WORLD_SIZE", gs, 1);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", port, 1);
    } else { /* rank 0's host: the node list's first, its port from the job id */
        setenv("SLURM_PROCID", rs, 1);
        setenv("SLURM_NTASKS", gs, 1);
        setenv("SLURM_JOB_ID", job, 1);
        setenv("SLURM_JOB_NODELIST", "127.0.0.[1-4]", 1);
    }
}

/* A TCP port in 20001..39999 that nothing listens on now (0 when none is found). */
static int free_port(void)
{
    for (int i = 0; i < 2000; i++) {
        int port = 20001 + (int)((getpid() * 7 + i * 13) % 19999);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return port;
    }
    return 0;
}

/* Start rank `rank` with job key `key` (NULL = the job's). */
static pid_t job_spawn(struct job *j, int rank, const char *key)
{
    char a[9][32];
    const struct prob *p = &j->p;
    snprintf(a[0], 32, "%d", p->G);
    snprintf(a[1], 32, "%lld", (long long)p->B);
    snprintf(a[2], 32, "%lld", (long long)p->N);
    snprintf(a[3], 32, "%d", p->Hq);
    snprintf(a[4], 32, "%d", p->Hkv);
    snprintf(a[5], 32, "%d", p->d);
    snprintf(a[6], 32, "%llu", (unsigned long long)p->seed);
    snprintf(a[7], 32, "%d", j->out_fd);
    snprintf(a[8], 32, "%d", j->pipe_w);
    char rs[16], gs[16];
    snprintf(rs, sizeof(rs), "%d", rank);
    snprintf(gs, sizeof(gs), "%d", p->G);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("BURST_JOB_KEY", key ? key : burst_rendezvous_key(j->rv), 1);
        if (g_launch == LAUNCH_BURST) {
            setenv("BURST_RANK", rs, 1);
            setenv("BURST_SIZE", gs, 1);
            setenv("BURST_RENDEZVOUS", burst_rendezvous_address(j->rv), 1);
        } else {
            launch_env(rank, p->G);
        }
        setenv("BURST_FABRIC", j->bind ? "auto" : g_prov, 1);
        if (j->iface[rank])
            setenv("BURST_IFACE", j->iface[rank], 1);
        else if (strcmp(g_prov, "tcp") == 0)
            setenv("BURST_IFACE", "127.0.0.1", 1);
        char rpn[16];
        snprintf(rpn, sizeof(rpn), "%d", p->rpn);
        setenv("BURST_TEST_RPN", rpn, 1);
        if (j->netns[rank] >= 0 && setns(j->netns[rank], CLONE_NEWNET) != 0)
            _exit(126);
        setenv("BURST_TIMEOUT_MS", g_timeout, 1);
        setenv("BURST_NUM_THREADS", "1", 1);
        close(j->pipe_r);
        char *argv[] = {g_self, "--worker", a[0], a[1], a[2], a[3],
                        a[4],   a[5],       a[6], a[7], a[8], NULL};
        execv(g_self, argv);
        _exit(127);
    }
    if (pid > 0) {
        j->pid[j->npid++] = pid;
        if (g_nchildren < 256)
            g_children[g_nchildren++] = pid;
    }
    return pid;
}

/* Wait for every child (SIGKILL after deadline_ms). Reports unexpected deaths to the
 * rendezvous, as a launcher does. Returns the number of abnormal exits. */
static int job_reap(struct job *j, double deadline_ms, int killed)
{
    int bad = 0;
    double until = now_ms() + deadline_ms;
    for (int i = 0; i < j->npid; i++) {
        int status = 0;
        if (j->pid[i] <= 0) /* already reaped by the case */
            continue;
        for (;;) {
            pid_t w = waitpid(j->pid[i], &status, WNOHANG);
            if (w == j->pid[i])
                break;
            if (now_ms() > until) {
                fprintf(stderr, "child %d still running after the deadline: SIGKILL\n",
                        (int)j->pid[i]);
                kill(j->pid[i], SIGKILL);
                waitpid(j->pid[i], &status, 0);
                bad++;
                break;
            }
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        if (WIFSIGNALED(status)) {
            char why[64];
            snprintf(why, sizeof(why), "killed by signal %d", WTERMSIG(status));
            burst_rendezvous_report_failure(j->rv, i, why);
            if (i != killed)
                bad++;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d exited with %d\n", i, WEXITSTATUS(status));
            bad++;
        }
    }
    j->npid = 0;
    return bad;
}

static void job_close(struct job *j)
{
    if (j->npid)
        job_reap(j, 30000, -1);
    burst_rendezvous_destroy(j->rv);
    if (j->map && j->map != MAP_FAILED)
        munmap(j->map, j->bytes);
    if (j->out_fd >= 0)
        close(j->out_fd);
    if (j->pipe_r >= 0)
        close(j->pipe_r);
    if (j->pipe_w >= 0)
        close(j->pipe_w);
}

/* Wait for the progress byte `phase` of `rank`; 0, or -1 after timeout_ms. */
static int job_wait_phase(struct job *j, int rank, char phase, int timeout_ms)
{
    double until = now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(until - now_ms());
        if (left <= 0)
            return -1;
        struct pollfd pf = {.fd = j->pipe_r, .events = POLLIN};
        if (poll(&pf, 1, left) <= 0)
            continue;
        char m[2];
        if (read(j->pipe_r, m, 2) == 2 && m[0] == rank && m[1] == phase)
            return 0;
    }
}

/* ---- leftovers ---- */

struct snapshot {
    char shm[256][256];
    int nshm;
    int nfd;
};

static void snap(struct snapshot *s)
{
    s->nshm = 0;
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.' && s->nshm < 256)
            snprintf(s->shm[s->nshm++], 256, "%.255s", e->d_name);
    if (d)
        closedir(d);
    s->nfd = 0;
    d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        s->nfd += e->d_name[0] != '.';
    if (d)
        closedir(d);
}

static void check_leftovers(const struct snapshot *before, const char *what)
{
    struct snapshot after;
    snap(&after);
    /* New entries named "<pid>:..." (the shm provider's) of our rank processes; other
     * programs running meanwhile may create their own. */
    for (int i = 0; i < after.nshm; i++) {
        int found = 0, ours = 0;
        for (int k = 0; k < before->nshm && !found; k++)
            found = strcmp(after.shm[i], before->shm[k]) == 0;
        for (int k = 0; k < g_nchildren && !ours; k++) {
            char pre[24];
            int l = snprintf(pre, sizeof(pre), "%d:", (int)g_children[k]);
            ours = strncmp(after.shm[i], pre, (size_t)l) == 0;
        }
        CHECK(found || !ours, "%s: /dev/shm/%s left behind", what, after.shm[i]);
    }
    CHECK(after.nfd == before->nfd, "%s: %d file descriptors open, %d before", what, after.nfd,
          before->nfd);
    CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "%s: a child process is left", what);
}

/* Connecting to a closed rendezvous address must fail (no socket left listening). */
static int still_listening(const char *addr)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", addr);
    char *colon = strrchr(host, ':');
    if (!colon)
        return 0;
    *colon = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return ok;
}

/* ---- the in-process reference ---- */

struct ref_arg {
    const struct prob *p;
    const struct bufs *in;
    struct bufs *out;
    struct slot slots[MAXG];
};

static void ref_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct ref_arg *a = arg;
    run_rank(harness_context(), comm, a->p, a->in, a->out, &a->slots[rank], -1);
}

static int run_reference(const struct prob *p, void **out_p)
{
    struct bufs in = {0}, out = {0};
    void *mem = calloc(1, out_bytes(p));
    struct ref_arg a = {p, &in, &out, {{0}}};
    if (!mem || make_inputs(p, &in) != 0)
        return -1;
    bufs_outputs_at(p, &out, mem);
    memset(mem, 0xff, out_bytes(p));
    int rc = harness_run_ranks(p->G, 20000, ref_rank, &a);
    for (int r = 0; r < p->G; r++)
        if (a.slots[r].st_plan || a.slots[r].st_fwd || a.slots[r].st_bwd) {
            fprintf(stderr, "reference rank %d: %s\n", r, a.slots[r].msg);
            rc = -1;
        }
    free_inputs(&in);
    if (rc != 0) {
        free(mem);
        return -1;
    }
    *out_p = mem;
    return 0;
}

/* ---- cases ---- */

/* The G slots reported success on `fabric`; the outputs at `out` (every rank's, in the shared
 * file) are bitwise those of the in-process ring. Prints one line with the timings. */
static void check_results(const struct prob *p, const struct slot *slots, const struct bufs *out,
                          const char *how, double run_ms, const char *fabric, int hosts)
{
    int G = p->G;
    for (int r = 0; r < G; r++) {
        const struct slot *s = &slots[r];
        CHECK(s->done && s->st_comm == BURST_OK && s->st_plan == BURST_OK &&
                  s->st_fwd == BURST_OK && s->st_bwd == BURST_OK,
              "%s G=%d rank %d: comm %d plan %d fwd %d bwd %d: %s", how, G, r, s->st_comm,
              s->st_plan, s->st_fwd, s->st_bwd, s->msg);
        CHECK(strcmp(s->fabric, fabric) == 0 && s->hosts == hosts,
              "%s G=%d rank %d: fabric \"%s\", %d hosts", how, G, r, s->fabric, s->hosts);
    }
    int failures = g_failures;
    double t1 = now_ms();
    void *ref = NULL;
    CHECK(run_reference(p, &ref) == 0, "G=%d: the in-process reference failed", G);
    if (ref) {
        const unsigned char *x = (const unsigned char *)out->o, *y = ref;
        size_t n = out_bytes(p), i = 0;
        while (i < n && x[i] == y[i])
            i++;
        CHECK(i == n, "%s G=%d seed %llu: processes and threads differ at byte %zu of %zu", how, G,
              (unsigned long long)p->seed, i, n);
        size_t nan = 0;
        for (size_t e = 0; e < n / sizeof(float); e++)
            nan += out->o[e] != out->o[e];
        CHECK(nan == 0, "%s G=%d: %zu output elements were not written", how, G, nan);
        free(ref);
    }
    printf("%s G=%d N=%lld%s%s: %d processes %.0f ms, in-process %.0f ms, bitwise %s\n", g_prov, G,
           (long long)p->N, *how ? " " : "", how, G, run_ms, now_ms() - t1,
           g_failures > failures ? "?" : "equal");
}

static void case_results(int G)
{
    struct prob p = {G, 2, 96 * G, 4, 2, 32, harness_seed() + (uint64_t)G, 0};
    struct snapshot before;
    snap(&before);
    double t0 = now_ms();
    struct job j;
    char addr[320] = "";
    if (job_open(&j, &p) == 0) {
        snprintf(addr, sizeof(addr), "%s", burst_rendezvous_address(j.rv));
        for (int r = 0; r < G; r++)
            job_spawn(&j, r, NULL);
        CHECK(job_reap(&j, 60000, -1) == 0, "G=%d: a rank did not exit cleanly", G);
        check_results(&p, j.slots, &j.out, "", now_ms() - t0, g_prov, 1);
    } else {
        CHECK(0, "G=%d: job setup failed", G);
    }
    job_close(&j);
    CHECK(!addr[0] || !still_listening(addr), "rendezvous %s still accepts connections", addr);
    check_leftovers(&before, "results");
}

/* Ranks started as torchrun (or srun) starts them: no BURST_RANK, rank 0 hosts the rendezvous
 * at 127.0.0.1 on a free port; results bitwise those of the in-process ring, and nothing
 * listens there once the ranks have exited. */
static void case_launcher(int G, enum launch_style style)
{
    struct prob p = {G, 2, 96 * G, 4, 2, 32, harness_seed() + 3 * (uint64_t)G, 0};
    const char *how = style == LAUNCH_TORCHRUN ? "torchrun" : "srun";
    struct snapshot before;
    snap(&before);
    double t0 = now_ms();
    struct job j;
    char addr[64];
    g_launch = style;
    g_launch_port = free_port();
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", g_launch_port);
    if (!g_launch_port) {
        CHECK(0, "%s G=%d: no free port in 20001..39999", how, G);
        g_launch = LAUNCH_BURST;
        return;
    }
    if (job_open(&j, &p) == 0) {
        for (int r = 0; r < G; r++)
            job_spawn(&j, r, NULL);
        CHECK(job_reap(&j, 60000, -1) == 0, "%s G=%d: a rank did not exit cleanly", how, G);
        check_results(&p, j.slots, &j.out, how, now_ms() - t0, g_prov, 1);
    } else {
        CHECK(0, "%s G=%d: job setup failed", how, G);
    }
    job_close(&j);
    g_launch = LAUNCH_BURST;
    CHECK(!still_listening(addr), "%s: rank 0's rendezvous %s still accepts connections", how,
          addr);
    check_leftovers(&before, how);
}

/* ---- two "hosts": network namespaces joined by a veth pair ---- */

/* Run a shell command quietly; its exit status (-1 when it could not run). */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char full[600];
    snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
    int st = system(full);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

/*
 * Namespaces A and B joined by a veth pair (10.213.x.1 in A, 10.213.x.2 in B). The parent enters
 * A (rendezvous bound to A's address) and the ranks of "host" B enter B: a two-level ring of
 * 2 x L ranks (L = G / 2) whose ranks 0..L-1 run in A and the rest in B.
 * The ranks must agree on fabric "shm+tcp" (auto: shm inside a namespace, tcp across the veth),
 * see 2 hosts, and give bitwise the in-process two-level ring's results. Returns 0 when it ran,
 * SKIP when namespaces cannot be made here.
 */
static int case_netns(int G)
{
    char na[32], nb[32], va[16], vb[16], aa[32], ab[32], path[64];
    int x = (int)(getpid() % 250) + 1;
    snprintf(na, sizeof(na), "burst-a-%d", (int)getpid());
    snprintf(nb, sizeof(nb), "burst-b-%d", (int)getpid());
    snprintf(va, sizeof(va), "bva%d", (int)getpid() % 100000);
    snprintf(vb, sizeof(vb), "bvb%d", (int)getpid() % 100000);
    snprintf(aa, sizeof(aa), "10.213.%d.1", x);
    snprintf(ab, sizeof(ab), "10.213.%d.2", x);
    if (sh("ip netns add %s", na) != 0) {
        printf("SKIP: cannot create a network namespace here (ip netns add: needs root and "
               "iproute2)\n");
        return SKIP;
    }
    int ok =
        sh("ip netns add %s", nb) == 0 &&
        sh("ip link add %s type veth peer name %s", va, vb) == 0 &&
        sh("ip link set %s netns %s", va, na) == 0 && sh("ip link set %s netns %s", vb, nb) == 0 &&
        sh("ip -n %s addr add %s/24 dev %s", na, aa, va) == 0 &&
        sh("ip -n %s addr add %s/24 dev %s", nb, ab, vb) == 0 &&
        sh("ip -n %s link set %s up", na, va) == 0 && sh("ip -n %s link set %s up", nb, vb) == 0 &&
        sh("ip -n %s link set lo up", na) == 0 && sh("ip -n %s link set lo up", nb) == 0;
    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), fa = -1, fb = -1;
    snprintf(path, sizeof(path), "/run/netns/%s", na);
    fa = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof(path), "/run/netns/%s", nb);
    fb = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(ok && home >= 0 && fa >= 0 && fb >= 0, "netns: setting up %s and %s failed", na, nb);
    if (ok && home >= 0 && fa >= 0 && fb >= 0 && setns(fa, CLONE_NEWNET) == 0) {
        struct prob p = {G, 2, 96 * G, 4, 2, 32, harness_seed() + 11 * (uint64_t)G, G / 2};
        int netns[MAXG];
        const char *iface[MAXG];
        for (int r = 0; r < MAXG; r++) {
            netns[r] = r < G / 2 ? -1 : fb; /* A's ranks inherit the parent's namespace */
            iface[r] = r < G / 2 ? aa : ab;
        }
        struct snapshot before;
        snap(&before);
        double t0 = now_ms();
        struct job j;
        if (job_open_net(&j, &p, aa, netns, iface) == 0) {
            for (int r = 0; r < G; r++)
                job_spawn(&j, r, NULL);
            CHECK(job_reap(&j, 60000, -1) == 0, "netns G=%d: a rank did not exit cleanly", G);
            check_results(&p, j.slots, &j.out, "netns", now_ms() - t0, "shm+tcp", 2);
        } else {
            CHECK(0, "netns G=%d: job setup failed", G);
        }
        job_close(&j);
        CHECK(setns(home, CLONE_NEWNET) == 0, "netns: cannot return to the first namespace");
        check_leftovers(&before, "netns");
    }
    if (home >= 0)
        close(home);
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    sh("ip netns del %s", na); /* the veth pair goes with its namespaces */
    sh("ip netns del %s", nb);
    return 0;
}

/* mpirun on PATH, or NULL. */
static const char *find_mpirun(void)
{
    static char path[4096];
    const char *env = getenv("PATH");
    for (const char *d = env ? env : ""; *d;) {
        size_t n = strcspn(d, ":");
        snprintf(path, sizeof(path), "%.*s/mpirun", (int)n, d);
        if (n && access(path, X_OK) == 0)
            return path;
        d += n + (d[n] == ':');
    }
    return NULL;
}

/*
 * G ranks started by Open MPI's mpirun, bootstrapped through MPI (1 = passed or failed, 0 =
 * mpirun started no rank: skip). Results go to a file in TMPDIR that every rank maps. Open MPI
 * itself is kept to loopback TCP (its shared-memory and RDMA components fail in some
 * containers); the ring's traffic is libfabric's.
 */
static int case_mpi(int G)
{
    struct prob p = {G, 2, 96 * G, 4, 2, 32, harness_seed() + 7 * (uint64_t)G, 0};
    struct snapshot before;
    snap(&before);
    char path[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof(path), "%s/burst-test-mpi.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    size_t bytes = MAXG * sizeof(struct slot) + out_bytes(&p);
    int fd = mkstemp(path);
    void *map = MAP_FAILED;
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ||
        (map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        CHECK(0, "G=%d: result file %s: %s", G, path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        return 1;
    }
    close(fd);
    struct slot *slots = map;
    struct bufs out = {0};
    bufs_outputs_at(&p, &out, (char *)map + MAXG * sizeof(struct slot));
    memset(out.o, 0xff, out_bytes(&p)); /* NaN: every element must be written */
    char a[8][32], np[16];
    snprintf(np, sizeof(np), "%d", G);
    snprintf(a[0], 32, "%d", p.G);
    snprintf(a[1], 32, "%lld", (long long)p.B);
    snprintf(a[2], 32, "%lld", (long long)p.N);
    snprintf(a[3], 32, "%d", p.Hq);
    snprintf(a[4], 32, "%d", p.Hkv);
    snprintf(a[5], 32, "%d", p.d);
    snprintf(a[6], 32, "%llu", (unsigned long long)p.seed);
    double t0 = now_ms();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* mpirun and its ranks: one group the parent can stop */
        unsetenv("BURST_RENDEZVOUS");
        unsetenv("BURST_JOB_KEY");
        unsetenv("BURST_RANK");
        unsetenv("BURST_SIZE");
        unsetenv("BURST_BOOTSTRAP"); /* chosen from OMPI_COMM_WORLD_* */
        setenv("BURST_FABRIC", g_prov, 1);
        setenv("BURST_IFACE", strcmp(g_prov, "tcp") == 0 ? "127.0.0.1" : "", 1);
        setenv("BURST_TIMEOUT_MS", "20000", 1);
        setenv("BURST_NUM_THREADS", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        /* By name, not by path: Open MPI takes an absolute argv[0] as its --prefix. */
        char *argv[] = {"mpirun",
                        "--allow-run-as-root",
                        "--oversubscribe",
                        "-np",
                        np,
                        "--mca",
                        "pml",
                        "ob1",
                        "--mca",
                        "btl",
                        "self,tcp",
                        "--mca",
                        "btl_tcp_if_include",
                        "lo",
                        "--mca",
                        "oob_tcp_if_include",
                        "lo",
                        "-x",
                        "BURST_FABRIC",
                        "-x",
                        "BURST_IFACE",
                        "-x",
                        "BURST_TIMEOUT_MS",
                        "-x",
                        "BURST_NUM_THREADS",
                        g_self,
                        "--mpi-worker",
                        a[0],
                        a[1],
                        a[2],
                        a[3],
                        a[4],
                        a[5],
                        a[6],
                        path,
                        NULL};
        execvp("mpirun", argv);
        _exit(127);
    }
    int status = 0, started = 0;
    if (pid > 0) {
        setpgid(pid, pid);
        double until = now_ms() + 60000;
        while (waitpid(pid, &status, WNOHANG) == 0) {
            if (now_ms() > until) {
                fprintf(stderr, "G=%d: mpirun still running after 60 s: stopping it\n", G);
                kill(-pid, SIGTERM);
                struct timespec ts = {3, 0};
                nanosleep(&ts, NULL);
                kill(-pid, SIGKILL);
                waitpid(pid, &status, 0);
                break;
            }
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    double run_ms = now_ms() - t0;
    for (int r = 0; r < G; r++) {
        started += slots[r].started;
        if (slots[r].started && g_nchildren < 256)
            g_children[g_nchildren++] = slots[r].pid;
    }
    int ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    int ran = started > 0 || ok;
    if (ran) {
        CHECK(ok, "G=%d: mpirun exited with %s %d", G, WIFSIGNALED(status) ? "signal" : "status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        check_results(&p, slots, &out, "mpirun", run_ms, g_prov, 1);
    } else {
        printf("SKIP: mpirun -np %d started no rank (exit status %d): see its output above\n", G,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    munmap(map, bytes);
    unlink(path);
    check_leftovers(&before, "mpi");
    return ran;
}

/* Kill `victim` once it reached `phase` plus delay_ms; every survivor must fail fast. */
/*
 * Rank `victim` dies in `phase` ('F' forward, 'B' backward): killed by the parent delay_ms after
 * it reported the phase (step < -1), or, step >= -1, by itself at exactly that ring step
 * (BURST_FAULT, runtime/fault.h; -1 = after the last step). Every survivor must fail with
 * BURST_ERR_PEER_FAILED naming the victim, soon; after the last step (-1) a survivor that needed
 * nothing more from the victim may complete instead, but one at least notices.
 */
static void case_fault(int G, int victim, char phase, int delay_ms, int step)
{
    /* A kill after delay_ms: big enough that one forward / backward lasts well over delay_ms on
     * two cores. A kill at a ring step: small, since the fault does not depend on timing. */
    struct prob p = {G, 1, (step < -1 ? 2048 : 256) * G, 4, 4, 64, harness_seed() + 99, 0};
    struct snapshot before;
    snap(&before);
    struct job j;
    if (job_open(&j, &p) != 0) {
        CHECK(0, "job setup failed");
        job_close(&j);
        return;
    }
    char spec[96];
    snprintf(spec, sizeof(spec), "kill:rank=%d,phase=%s,step=%d", victim,
             phase == 'B' ? "bwd" : "fwd", step);
    if (step >= -1)
        setenv("BURST_FAULT", spec, 1); /* inherited by every rank; only the victim acts */
    for (int r = 0; r < G; r++)
        job_spawn(&j, r, NULL);
    unsetenv("BURST_FAULT");
    int reached = job_wait_phase(&j, victim, phase, 20000) == 0;
    CHECK(reached, "rank %d never reached phase %c", victim, phase);
    double t_kill = now_ms();
    if (step < -1) {
        struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        t_kill = now_ms();
        kill(j.pid[victim], SIGKILL);
    } else {
        int status; /* the victim's own death: when did it happen? */
        CHECK(waitpid(j.pid[victim], &status, 0) == j.pid[victim] && WIFSIGNALED(status) &&
                  WTERMSIG(status) == SIGKILL,
              "%s: rank %d did not die by SIGKILL", spec, victim);
        t_kill = now_ms();
        char why[64];
        snprintf(why, sizeof(why), "killed by signal %d", SIGKILL);
        burst_rendezvous_report_failure(j.rv, victim, why); /* as a launcher does */
        j.pid[victim] = -1;
    }
    CHECK(job_reap(&j, 30000, victim) == 0, "a survivor did not exit cleanly");
    CHECK(burst_rendezvous_failed_rank(j.rv) == victim, "rendezvous says rank %d failed",
          burst_rendezvous_failed_rank(j.rv));
    char name[32];
    snprintf(name, sizeof(name), "rank %d", victim);
    double worst = 0;
    int failed = 0;
    for (int r = 0; r < G; r++) {
        if (r == victim)
            continue;
        struct slot *s = &j.slots[r];
        /* the first call that failed: the victim may die before a survivor has finished the
         * plan's handshake (it had done its own part), so that can be the plan */
        burst_status_t st = s->st_comm   ? s->st_comm
                            : s->st_plan ? s->st_plan
                            : s->st_fwd  ? s->st_fwd
                                         : s->st_bwd;
        /* died after its last transfer (step -1), or before the last step's transfers when
         * this survivor needed nothing more from it (step G - 1: whether the rendezvous' notice
         * of the death reaches a survivor before that survivor has finished is a race); at
         * least one survivor must still notice (below) */
        if ((step == -1 || step == G - 1) && s->done && st == BURST_OK)
            continue;
        failed++;
        CHECK(s->done && (st == BURST_ERR_PEER_FAILED || st == BURST_ERR_TIMEOUT),
              "%s: survivor %d (done %d; comm %d plan %d fwd %d bwd %d) returned %s: %s", spec, r,
              s->done, s->st_comm, s->st_plan, s->st_fwd, s->st_bwd, burst_status_str(st), s->msg);
        CHECK(strstr(s->msg, name) != NULL, "phase %c: survivor %d's message does not name %s: %s",
              phase, r, name, s->msg);
        double dt = s->t_fail_ms - t_kill;
        worst = dt > worst ? dt : worst;
        /* BURST_TEST_TIME_SCALE (sanitizer builds: 3) stretches the limit for slow code */
        double limit = 3000.0 * harness_time_scale();
        CHECK(dt < limit, "phase %c: survivor %d noticed after %.0f ms (limit %.0f)", phase, r, dt,
              limit);
    }
    CHECK(failed > 0, "%s: no survivor noticed the death", spec);
    char when[48];
    if (step < -1)
        snprintf(when, sizeof(when), "%d ms into", delay_ms);
    else
        snprintf(when, sizeof(when), "at step %d of", step);
    printf("%s G=%d: rank %d killed %s the %s: survivors failed within %.0f ms; e.g. \"%s\"\n",
           g_prov, G, victim, when, phase == 'F' ? "forward" : "backward", worst,
           j.slots[(victim + 1) % G].msg);
    job_close(&j);
    check_leftovers(&before, "faults");
}

static const char *g_only; /* msgfaults: only the spec starting with this (argv[3]) */

/*
 * G rank processes run with BURST_FAULT=spec and BURST_TIMEOUT_MS=timeout. want == BURST_OK:
 * every rank succeeds and the results are bitwise those of the in-process ring, and the run lasts
 * at least min_ms; with may_stall, every rank may instead fail with BURST_ERR_TIMEOUT /
 * PEER_FAILED (a duplicate that is never received holds the libfabric shm connection behind it).
 * Else every rank fails, `want` at least once with `text` in its message, the others with
 * BURST_ERR_PEER_FAILED (told by the rendezvous: the failing rank's ABORT) or `want`, and
 * BURST_ERR_TIMEOUT only where timing out is the fault (drop); all within max_ms of the start
 * (process start-up included): never a hang, and with a long timeout, nobody waits for it.
 */
static void case_msgfault(const char *spec, const char *timeout, burst_status_t want,
                          const char *text, double min_ms, double max_ms, int may_stall)
{
    if (g_only && strncmp(spec, g_only, strlen(g_only)) != 0)
        return;
    struct prob p = {3, 2, 96 * 3, 4, 2, 32, harness_seed() + 7, 0};
    struct snapshot before;
    snap(&before);
    struct job j;
    if (job_open(&j, &p) != 0) {
        CHECK(0, "%s: job setup failed", spec);
        job_close(&j);
        return;
    }
    g_timeout = timeout;
    setenv("BURST_FAULT", spec, 1); /* inherited by every rank; only the named one acts */
    double t0 = now_ms();
    for (int r = 0; r < p.G; r++)
        job_spawn(&j, r, NULL);
    unsetenv("BURST_FAULT");
    g_timeout = "20000";
    CHECK(job_reap(&j, 30000, -1) == 0, "%s: a rank did not exit cleanly", spec);
    double dt = now_ms() - t0;
    int failed = 0;
    for (int r = 0; r < p.G; r++)
        failed +=
            j.slots[r].st_comm || j.slots[r].st_plan || j.slots[r].st_fwd || j.slots[r].st_bwd;
    if (want == BURST_OK && !(may_stall && failed)) {
        check_results(&p, j.slots, &j.out, spec, dt, g_prov, 1);
        CHECK(dt >= min_ms, "%s: took %.0f ms, less than %.0f: no fault acted?", spec, dt, min_ms);
    } else {
        int seen = 0;
        double last = 0;
        if (want == BURST_OK) { /* a stall: timeouts, and the ranks told about them */
            want = BURST_ERR_TIMEOUT;
            text = "did not complete";
            max_ms = 15000;
        }
        for (int r = 0; r < p.G; r++) {
            const struct slot *sl = &j.slots[r];
            burst_status_t st = sl->st_comm   ? sl->st_comm
                                : sl->st_plan ? sl->st_plan
                                : sl->st_fwd  ? sl->st_fwd
                                              : sl->st_bwd;
            CHECK(sl->done && (st == want || st == BURST_ERR_PEER_FAILED),
                  "%s: rank %d (done %d) returned %s: %s", spec, r, sl->done, burst_status_str(st),
                  sl->msg);
            seen += st == want && harness_contains(sl->msg, text);
            printf("  rank %d: %s after %.0f ms: %s\n", r, burst_status_str(st), sl->t_fail_ms - t0,
                   sl->msg);
            last = sl->t_fail_ms - t0 > last ? sl->t_fail_ms - t0 : last;
        }
        CHECK(seen > 0, "%s: no rank returned %s with \"%s\"", spec, burst_status_str(want), text);
        CHECK(last < max_ms, "%s: the last rank failed %.0f ms after the start", spec, last);
        printf("%s G=3 %s: every rank failed within %.0f ms\n", g_prov, spec, last);
    }
    job_close(&j);
    check_leftovers(&before, spec);
}

/* A raw connection sends `msg` and reads the reply; 1 if the service answered REFUSED (3). */
static int raw_refused(const char *addr, const void *msg, size_t len, int close_early)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", addr);
    char *colon = strrchr(host, ':');
    *colon = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), refused = 0;
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        send(fd, msg, len, MSG_NOSIGNAL) == (ssize_t)len && !close_early) {
        unsigned char h[12];
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 5000) == 1 && recv(fd, h, 12, MSG_WAITALL) == 12)
            refused = memcmp(h, "BRST", 4) == 0 && h[6] == 0 && h[7] == 3;
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return refused;
}

/* A connection to addr that sends nothing (closed by the caller), or -1. */
static int raw_idle(const char *addr)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", addr);
    char *colon = strrchr(host, ':');
    *colon = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* Before HELLO, every other message type is refused on its header, even announcing the
 * largest payload its type allows (the service never buffers a stranger's payload). */
static void refused_before_hello(const char *addr)
{
    const uint32_t max_len[10] = {
        [BURST_BOOT_REFUSED] = 4 + BURST_BOOT_MAX_TEXT,
        [BURST_BOOT_GATHER] = 4 + BURST_BOOT_MAX_BLOB,
        [BURST_BOOT_GATHERED] = 8 + 2 * (4 + BURST_BOOT_MAX_BLOB),
        [BURST_BOOT_ABORT] = 4 + BURST_BOOT_MAX_TEXT,
        [BURST_BOOT_FAILED] = 4 + BURST_BOOT_MAX_TEXT,
        [BURST_BOOT_CLEANUP] = BURST_BOOT_BOOT_ID_LEN + BURST_BOOT_MAX_NAME,
    };
    for (int t = 2; t <= 9; t++) {
        unsigned char h[12] = {'B', 'R', 'S', 'T', 0, 1, 0, (unsigned char)t, 0, 0, 0, 0};
        h[8] = (unsigned char)(max_len[t] >> 24);
        h[9] = (unsigned char)(max_len[t] >> 16);
        h[10] = (unsigned char)(max_len[t] >> 8);
        h[11] = (unsigned char)max_len[t];
        CHECK(raw_refused(addr, h, 12, 0), "type %d (%u bytes) before HELLO not refused", t,
              max_len[t]);
    }
}

/* CLEANUP is tied to the sender: a joined rank may register only a segment of its own process
 * (its HELLO's pid); any other name fails it and is never removed. */
static void cleanup_tied(void)
{
    for (int own = 0; own < 2; own++) {
        struct burst_rendezvous *rv = NULL;
        CHECK(burst_rendezvous_create(NULL, 0, 1, NULL, &rv) == BURST_OK, "rendezvous");
        char name[64], path[96];
        snprintf(name, sizeof(name), own ? "%d:97:0" : "burst-victim-%d", (int)getpid());
        snprintf(path, sizeof(path), "/dev/shm/%s", name);
        int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        struct burst_boot *b = NULL;
        CHECK(burst_boot_join("test", burst_rendezvous_address(rv), burst_rendezvous_key(rv), 0, 1,
                              5000, 0, &b) == BURST_OK,
              "join: %s", burst_last_error());
        if (b)
            burst_boot_cleanup(b, name);
        burst_boot_leave(b, 0); /* gone without BYE: the service removes what it accepted */
        for (int i = 0; i < 100 && burst_rendezvous_failed_rank(rv) < 0; i++)
            usleep(10000);
        burst_rendezvous_destroy(rv);
        int exists = access(path, F_OK) == 0;
        CHECK(own ? !exists : exists, "CLEANUP of %s (%s): %s", name,
              own ? "its own segment" : "a foreign file", exists ? "still there" : "removed");
        unlink(path);
    }
}

/* A service that is gone: with `up` (it listened before the rank started) the refused join
 * fails at once with BURST_ERR_PEER_FAILED naming the address; without, refused connections
 * are retried until the timeout (BURST_ERR_TIMEOUT). */
static void gone_service(void)
{
    struct burst_rendezvous *rv = NULL;
    CHECK(burst_rendezvous_create(NULL, 0, 1, NULL, &rv) == BURST_OK, "rendezvous");
    if (!rv)
        return;
    char addr[300], key[BURST_BOOT_KEY_LEN + 1];
    snprintf(addr, sizeof(addr), "%s", burst_rendezvous_address(rv));
    snprintf(key, sizeof(key), "%s", burst_rendezvous_key(rv));
    burst_rendezvous_destroy(rv);
    for (int up = 1; up >= 0; up--) {
        struct burst_boot *b = NULL;
        double t0 = now_ms();
        burst_status_t st = burst_boot_join("test", addr, key, 0, 1, 1500, up, &b);
        double ms = now_ms() - t0;
        burst_status_t want = up ? BURST_ERR_PEER_FAILED : BURST_ERR_TIMEOUT;
        CHECK(st == want && !b, "join of a gone service (up %d): %s: %s", up, burst_status_str(st),
              burst_last_error());
        CHECK(up ? ms < 1000 : ms >= 1400, "join of a gone service (up %d) took %.0f ms", up, ms);
        CHECK(!up || strstr(burst_last_error(), addr), "no address in \"%s\"", burst_last_error());
        printf("gone service, up %d: %.0f ms: \"%s\"\n", up, ms, burst_last_error());
        if (b)
            burst_boot_leave(b, 0);
    }
}

/* Send a whole message (type, body) on fd; 1 on success. */
static int raw_send(int fd, unsigned type, const void *body, size_t len)
{
    unsigned char h[12] = {'B', 'R', 'S', 'T', 0, BURST_BOOT_VERSION, 0, (unsigned char)type};
    h[8] = (unsigned char)(len >> 24);
    h[9] = (unsigned char)(len >> 16);
    h[10] = (unsigned char)(len >> 8);
    h[11] = (unsigned char)len;
    return send(fd, h, 12, MSG_NOSIGNAL) == 12 &&
           (!len || send(fd, body, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* burst_peer_holds (tp_peer.h) on both kinds of connection: this process holds the other end
 * of a unix socket pair and of a loopback TCP connection; its parent does not. */
static void peer_holds(void)
{
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0, "socketpair");
    CHECK(burst_peer_holds(sp[0], (uint32_t)getpid()), "unix: this process not confirmed");
    CHECK(!burst_peer_holds(sp[0], (uint32_t)getppid()), "unix: the parent confirmed");
    close(sp[0]);
    close(sp[1]);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), cfd = -1, afd = -1;
    if (lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 1) == 0 &&
        getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0 &&
        (cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
        connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        afd = accept(lfd, NULL, NULL);
    CHECK(afd >= 0, "tcp loopback connection");
    if (afd >= 0) {
        CHECK(burst_peer_holds(afd, (uint32_t)getpid()), "tcp: this process not confirmed");
        CHECK(!burst_peer_holds(afd, (uint32_t)getppid()), "tcp: the parent confirmed");
        CHECK(!burst_peer_holds(afd, 0), "tcp: pid 0 confirmed");
        close(afd);
    }
    if (cfd >= 0)
        close(cfd);
    if (lfd >= 0)
        close(lfd);
}

/* A key holder whose HELLO claims another process's id (a live process of this user, which
 * does not hold the connection) joins, registers that process's segment with CLEANUP and is
 * lost: the service removes nothing (the kernel does not confirm the claim, tp_peer.h). */
static void cleanup_forged_pid(void)
{
    pid_t victim = fork();
    if (victim == 0) {
        pause();
        _exit(0);
    }
    CHECK(victim > 0, "fork");
    if (victim <= 0)
        return;
    struct burst_rendezvous *rv = NULL;
    CHECK(burst_rendezvous_create(NULL, 0, 1, NULL, &rv) == BURST_OK, "rendezvous");
    char name[64], path[96];
    snprintf(name, sizeof(name), "%d:97:0", (int)victim);
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    int sfd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (sfd >= 0)
        close(sfd);
    int fd = raw_idle(burst_rendezvous_address(rv)), welcomed = 0;
    unsigned char hello[BURST_BOOT_KEY_LEN + 12] = {0}, h[12];
    memcpy(hello, burst_rendezvous_key(rv), strlen(burst_rendezvous_key(rv)));
    hello[BURST_BOOT_KEY_LEN + 7] = 1; /* rank 0, size 1, then the claimed pid */
    for (int i = 0; i < 4; i++)
        hello[BURST_BOOT_KEY_LEN + 8 + i] = (unsigned char)((uint32_t)victim >> (24 - 8 * i));
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (fd >= 0 && raw_send(fd, BURST_BOOT_HELLO, hello, sizeof(hello)) &&
        poll(&pf, 1, 5000) == 1 && recv(fd, h, 12, MSG_WAITALL) == 12)
        welcomed = h[7] == BURST_BOOT_WELCOME;
    CHECK(welcomed, "forged pid: HELLO not answered with WELCOME");
    unsigned char cl[BURST_BOOT_BOOT_ID_LEN + 64] = {0};
    char boot[BURST_BOOT_BOOT_ID_LEN + 1] = "";
    burst_boot_boot_id(boot, sizeof(boot));
    memcpy(cl, boot, strlen(boot));
    memcpy(cl + BURST_BOOT_BOOT_ID_LEN, name, strlen(name));
    if (welcomed)
        raw_send(fd, BURST_BOOT_CLEANUP, cl, BURST_BOOT_BOOT_ID_LEN + strlen(name));
    usleep(100000);
    if (fd >= 0)
        close(fd); /* lost without BYE */
    for (int i = 0; i < 100 && burst_rendezvous_failed_rank(rv) < 0; i++)
        usleep(10000);
    CHECK(burst_rendezvous_failed_rank(rv) == 0, "forged pid: the lost rank was not seen");
    burst_rendezvous_destroy(rv);
    CHECK(access(path, F_OK) == 0, "CLEANUP with a forged pid removed %s", path);
    unlink(path);
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
}

static void case_refused(void)
{
    struct prob p = {2, 1, 64, 2, 2, 16, harness_seed(), 0};
    struct snapshot before;
    snap(&before);
    struct job j;
    if (job_open(&j, &p) != 0) {
        CHECK(0, "job setup failed");
        job_close(&j);
        return;
    }
    const char *addr = burst_rendezvous_address(j.rv);
    /* Malformed messages from strangers: refused, and the service goes on. */
    unsigned char m[96] = {'B', 'R', 'S', 'T', 0, 1, 0, 1, 0, 0, 0, 76};
    unsigned char bad_magic[12] = {'H', 'T', 'T', 'P', 0, 1, 0, 1, 0, 0, 0, 76};
    unsigned char bad_ver[12] = {'B', 'R', 'S', 'T', 0, 9, 0, 1, 0, 0, 0, 76};
    unsigned char huge[12] = {'B', 'R', 'S', 'T', 0, 1, 0, 4, 0x7f, 0xff, 0xff, 0xff};
    unsigned char badtype[12] = {'B', 'R', 'S', 'T', 0, 1, 0, 77, 0, 0, 0, 0};
    unsigned char notfirst[16] = {'B', 'R', 'S', 'T', 0, 1, 0, 4, 0, 0, 0, 4, 0, 0, 0, 1};
    CHECK(raw_refused(addr, bad_magic, 12, 0), "bad magic not refused");
    CHECK(raw_refused(addr, bad_ver, 12, 0), "bad version not refused");
    CHECK(raw_refused(addr, huge, 12, 0), "oversized message not refused");
    CHECK(raw_refused(addr, badtype, 12, 0), "unknown type not refused");
    CHECK(raw_refused(addr, notfirst, 16, 0), "GATHER before HELLO not refused");
    refused_before_hello(addr);
    memset(m + 12, 'a', 64); /* a HELLO with a wrong key, rank 0 */
    m[12 + 64 + 7] = 2;      /* size 2 */
    CHECK(raw_refused(addr, m, 12 + 76, 0), "wrong key not refused");
    raw_refused(addr, m, 7, 1);       /* truncated header, then gone */
    raw_refused(addr, m, 12 + 30, 1); /* truncated HELLO, then gone */
    /* A rank process with a wrong key: refused with a clear status and message. */
    char wrong[65];
    snprintf(wrong, sizeof(wrong), "%s", burst_rendezvous_key(j.rv));
    wrong[10] = wrong[10] == '0' ? '1' : '0';
    job_spawn(&j, 0, wrong);
    CHECK(job_reap(&j, 20000, -1) == 0, "the refused rank did not exit cleanly");
    CHECK(j.slots[0].st_comm == BURST_ERR_INVALID_ARG &&
              harness_contains(j.slots[0].msg, "wrong job key"),
          "wrong key: %s: %s", burst_status_str(j.slots[0].st_comm), j.slots[0].msg);
    printf("wrong key: \"%s\"\n", j.slots[0].msg);
    /* A malformed key never reaches the wire. */
    job_spawn(&j, 0, "not-a-key");
    job_reap(&j, 20000, -1);
    CHECK(j.slots[0].st_comm == BURST_ERR_INVALID_ARG &&
              harness_contains(j.slots[0].msg, "BURST_JOB_KEY"),
          "malformed key: %s", j.slots[0].msg);
    CHECK(burst_rendezvous_failed_rank(j.rv) == -1, "a refused stranger failed the job");
    /* The right ranks still get in and finish, even while strangers hold more idle
     * connections than the service keeps unadmitted. */
    int idle[80];
    for (int i = 0; i < 80; i++)
        idle[i] = raw_idle(addr);
    memset(j.slots, 0, sizeof(j.slots[0]) * MAXG);
    for (int r = 0; r < 2; r++)
        job_spawn(&j, r, NULL);
    CHECK(job_reap(&j, 30000, -1) == 0, "a rank did not exit cleanly");
    for (int i = 0; i < 80; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    for (int r = 0; r < 2; r++)
        CHECK(j.slots[r].done && !j.slots[r].st_comm && !j.slots[r].st_fwd && !j.slots[r].st_bwd,
              "rank %d after the refusals: %s", r, j.slots[r].msg);
    /* A third rank 0: refused as a duplicate / late joiner. */
    memset(j.slots, 0, sizeof(j.slots[0]) * MAXG);
    job_spawn(&j, 0, NULL);
    job_reap(&j, 20000, -1);
    CHECK(j.slots[0].st_comm == BURST_ERR_INVALID_ARG, "duplicate rank: %s", j.slots[0].msg);
    printf("duplicate rank: \"%s\"\n", j.slots[0].msg);
    job_close(&j);
    cleanup_tied();
    gone_service();
    peer_holds();
    cleanup_forged_pid();
    check_leftovers(&before, "refused");
}

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--worker") == 0 || strcmp(argv[1], "--mpi-worker") == 0))
        return worker_main(argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: %s shm|tcp results|faults|msgfaults|refused|netns|mpi|launchers\n",
                argv[0]);
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
    if (n <= 0)
        return 2;
    g_self[n] = '\0';
    g_prov = argv[1];
    const char *what = argv[2];
    signal(SIGPIPE, SIG_IGN);
    printf("seed %llu (BURST_TEST_SEED)\n", (unsigned long long)harness_seed());
    /* A one-rank probe: is the fabric transport built, and is the provider usable? */
    const int probe = harness_fabric_probe(g_prov);
    if (probe != 0)
        return probe;
    double t0 = now_ms();
    if (strcmp(what, "results") == 0) {
        static const int gs[] = {2, 3, 4, 8};
        for (int i = 0; i < 4; i++)
            case_results(gs[i]);
    } else if (strcmp(what, "faults") == 0) {
        case_fault(4, 2, 'F', 150, -2);
        case_fault(4, 1, 'B', 150, -2);
        /* every step of either phase (G = 4: steps 0..3, then -1 = after the last) */
        for (int ph = 0; ph < 2; ph++)
            for (int step = -1; step < 4; step++)
                case_fault(4, 3 - ph, ph ? 'B' : 'F', 0, step);
    } else if (strcmp(what, "msgfaults") == 0) {
        g_only = argc > 3 ? argv[3] : NULL;
        case_msgfault("drop:rank=1,phase=fwd,step=0", "2000", BURST_ERR_TIMEOUT,
                      "did not complete within 2000 ms", 0, 15000, 0);
        /* 20 s timeouts: every rank must hear of the failure long before */
        case_msgfault("truncate:rank=2,phase=bwd,step=1", "20000", BURST_ERR_TRANSPORT,
                      "length mismatch", 0, 12000, 0);
        case_msgfault("oom:alloc=1", "20000", BURST_ERR_NO_MEMORY, "allocate", 0, 12000, 0);
        case_msgfault("duplicate:rank=0,phase=fwd,step=1;duplicate:rank=1,phase=bwd,step=0", "2000",
                      BURST_OK, "", 0, 0, 1);
        case_msgfault("delay:rank=1,phase=bwd,step=0,ms=400", "20000", BURST_OK, "", 400, 0, 0);
        case_msgfault("slow:rank=2,ms=100", "20000", BURST_OK, "", 600, 0, 0);
    } else if (strcmp(what, "launchers") == 0) {
        for (int G = 2; G <= 4; G += 2) {
            case_launcher(G, LAUNCH_TORCHRUN);
            case_launcher(G, LAUNCH_SLURM);
        }
    } else if (strcmp(what, "refused") == 0) {
        case_refused();
    } else if (strcmp(what, "netns") == 0) {
        static const int gs[] = {4, 6};
        for (int i = 0; i < 2; i++)
            if (case_netns(gs[i]) == SKIP)
                return SKIP;
    } else if (strcmp(what, "mpi") == 0) {
        if (!find_mpirun()) {
            printf("SKIP: mpirun (Open MPI) not found on PATH\n");
            return SKIP;
        }
        static const int gs[] = {2, 4};
        for (int i = 0; i < 2; i++)
            if (!case_mpi(gs[i]))
                return g_failures ? 1 : SKIP;
    } else {
        fprintf(stderr, "unknown case \"%s\"\n", what);
        return 2;
    }
    printf("%s %s: %s in %.1f s\n", g_prov, what, g_failures ? "FAILED" : "ok",
           (now_ms() - t0) / 1e3);
    return g_failures ? 1 : 0;
}
