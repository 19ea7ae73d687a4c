/* tools/launch.c - start, watch and stop the rank processes of one burstrun job (launch.h). */
#include "launch.h"
#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define LINE_MAX_BYTES 4096

struct stream {
    int fd;   /* read end, -1 once closed */
    FILE *to; /* where its lines go */
    size_t len;
    char buf[LINE_MAX_BYTES];
};

struct rank_proc {
    pid_t pid; /* 0 = not started; -1 = reaped */
    pid_t pid_was;
    int status;
    int signalled_by_us; /* we sent it SIGTERM / SIGKILL */
    struct stream out, err;
};

static int g_sigpipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char c = (unsigned char)sig;
    ssize_t n = write(g_sigpipe[1], &c, 1);
    (void)n;
    errno = saved;
}

/* ---- output ---- */

static void emit_line(struct progress *pg, FILE *to, int rank, const char *s, size_t n)
{
    progress_clear(pg);
    fprintf(to, "[rank %d] %.*s\n", rank, (int)n, s);
    fflush(to);
}

/* Read what is available; print complete lines. Returns 0 at EOF (fd closed). */
static int stream_read(struct progress *pg, struct stream *st, int rank)
{
    ssize_t n = read(st->fd, st->buf + st->len, sizeof(st->buf) - st->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 1;
    if (n <= 0) {
        if (st->len)
            emit_line(pg, st->to, rank, st->buf, st->len);
        st->len = 0;
        close(st->fd);
        st->fd = -1;
        return 0;
    }
    st->len += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i < st->len; i++)
        if (st->buf[i] == '\n') {
            emit_line(pg, st->to, rank, st->buf + start, i - start);
            start = i + 1;
        }
    if (start == 0 && st->len == sizeof(st->buf)) { /* a line longer than the buffer */
        emit_line(pg, st->to, rank, st->buf, st->len);
        start = st->len;
    }
    memmove(st->buf, st->buf + start, st->len - start);
    st->len -= start;
    return 1;
}

/* The progress line: the slowest rank's iterations, from the arena's slots. */
static void progress_show(struct progress *pg, void *arena, int G, int total)
{
    struct job_slot *slots = job_arena_slots(arena);
    int done = total;
    for (int rk = 0; rk < G; rk++) {
        int it = __atomic_load_n(&slots[rk].iter, __ATOMIC_RELAXED);
        done = it < done ? it : done;
    }
    progress_update(pg, done, total);
}

/* ---- processes ---- */

static const char *const env_set[] = {"BURST_RANK",         "BURST_SIZE",        "BURST_RENDEZVOUS",
                                      "BURST_JOB_KEY",      "BURST_FABRIC",      "BURST_IFACE",
                                      "BURST_TIMEOUT_MS",   "BURST_NUM_THREADS", "BURST_BOOTSTRAP",
                                      "BURST_RENDEZVOUS_UP"};
#define N_ENV_SET (sizeof(env_set) / sizeof(env_set[0]))

/* environ without the variables we set, then ours. Strings in store[]. */
static char **make_env(char store[N_ENV_SET][320], int n_ours)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + N_ENV_SET + 1, sizeof(char *));
    if (!env)
        return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int ours = 0;
        for (size_t k = 0; k < N_ENV_SET && !ours; k++) {
            size_t l = strlen(env_set[k]);
            ours = strncmp(environ[i], env_set[k], l) == 0 && environ[i][l] == '=' &&
                   store[k][0] != '\0';
        }
        if (!ours)
            env[m++] = environ[i];
    }
    for (int k = 0; k < n_ours; k++)
        if (store[k][0])
            env[m++] = store[k];
    env[m] = NULL;
    return env;
}

/* Start rank `rank` with environment env, on the CPUs *cpus (NULL: unbound). */
static pid_t spawn_rank(const struct launch_opts *lo, int rank, int arena_fd, char **env,
                        const cpu_set_t *cpus, struct rank_proc *rp, int json)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    char fdarg[16];
    snprintf(fdarg, sizeof(fdarg), "%d", arena_fd);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* only async-signal-safe calls from here to exec */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, 0);
            close(devnull);
        }
        dup2(po[1], 1);
        dup2(pe[1], 2);
        fcntl(arena_fd, F_SETFD, 0);
        if (cpus && sched_setaffinity(0, sizeof(*cpus), cpus) != 0) {
            static const char bmsg[] = "burstrun: --bind-to: sched_setaffinity failed\n";
            ssize_t n = write(2, bmsg, sizeof(bmsg) - 1);
            (void)n;
            _exit(127);
        }
        char *argv[] = {(char *)lo->self, "--rank-worker", fdarg, NULL};
        execve(lo->self, argv, env);
        static const char msg[] = "burstrun: exec of the rank process failed\n";
        ssize_t n = write(2, msg, sizeof(msg) - 1);
        (void)n;
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        close(po[0]);
        close(pe[0]);
        return -1;
    }
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    rp->pid = pid;
    rp->out.fd = po[0];
    rp->out.to = json ? stderr : stdout;
    rp->err.fd = pe[0];
    rp->err.to = stderr;
    (void)rank;
    return pid;
}

static const char *sig_name(int sig)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGINT, "SIGINT"},   {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"},
                 {SIGKILL, "SIGKILL"}, {SIGSEGV, "SIGSEGV"}, {SIGABRT, "SIGABRT"},
                 {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},
                 {SIGPIPE, "SIGPIPE"}, {SIGQUIT, "SIGQUIT"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].sig == sig)
            return names[i].name;
    return strsignal(sig);
}

static void describe_exit(int status, char *buf, size_t cap)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        snprintf(buf, cap, "was killed by signal %d (%s)%s", sig, sig_name(sig),
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        snprintf(buf, cap, "exited with status %d%s", code,
                 code == 127          ? " (could not start)"
                 : code == JOB_EUSAGE ? " (parameters rejected)"
                 : code == JOB_EPEER  ? " (a peer failed)"
                                      : "");
    } else {
        snprintf(buf, cap, "ended with wait status 0x%x", status);
    }
}

static void set_msg(struct job_result *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_msg(struct job_result *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof(r->message), fmt, ap);
    va_end(ap);
    r->status = status;
}

/* The launcher while its rank processes run: what launch_run's steps share. */
struct launch {
    const struct job_params *p;
    const struct launch_opts *lo;
    struct job_result *r;
    int G, total;
    uint64_t bytes;
    int arena_fd;
    void *arena;
    struct burst_rendezvous *rv;
    struct rank_proc *rp;
    struct pollfd *pfd;
    struct sigaction old[4];
    int handlers, started;
    struct progress pg;
    /* who failed first: a rank killed by a signal we did not send, else the rank the rendezvous
     * saw fail first, else the first non-zero exit that is not a peer's echo, else an echo
     * (survivors may exit with a transport error as fast as the dead rank is reaped) */
    int live, sig_fail, first_fail, echo_fail, interrupted, stragglers;
    double deadline; /* SIGKILL the rest at this time; 0 = no failure yet */
};

static const int launch_sigs[4] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

/* The job's arena: a memfd holding the header, the slots and the global tensors. 0, or -1 with
 * the message in r. */
static int launch_arena(struct launch *L)
{
    const struct launch_opts *lo = L->lo;
    struct job_arena_hdr h;
    char msg[256];
    L->bytes = job_arena_layout(L->p, &h, msg, sizeof(msg));
    if (!L->bytes) {
        set_msg(L->r, JOB_EUSAGE, "%s", msg);
        return -1;
    }
    snprintf(h.backend, sizeof(h.backend), "%s", lo->backend);
    snprintf(h.num_threads, sizeof(h.num_threads), "%s", lo->num_threads);
    snprintf(h.device, sizeof(h.device), "%s", lo->device ? lo->device : "");
    long env_threads = 0; /* BURST_NUM_THREADS unset: the ranks share the cores */
    if (!strcmp(h.num_threads, "0") &&
        burst_setting_long("BURST_NUM_THREADS", &env_threads) == BURST_OK && env_threads == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(h.num_threads, sizeof(h.num_threads), "%d", ncpu > L->G ? (int)(ncpu / L->G) : 1);
    }
    h.kill = lo->kill;
    L->arena_fd = memfd_create("burstrun-job", MFD_CLOEXEC);
    if (L->arena_fd < 0 || ftruncate(L->arena_fd, (off_t)L->bytes) != 0) {
        set_msg(L->r, JOB_EFAIL, "memfd of %llu bytes for the job: %s",
                (unsigned long long)L->bytes, strerror(errno));
        return -1;
    }
    L->arena = mmap(NULL, L->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, L->arena_fd, 0);
    if (L->arena == MAP_FAILED) {
        set_msg(L->r, JOB_EFAIL, "mmap of the job's %llu bytes: %s", (unsigned long long)L->bytes,
                strerror(errno));
        return -1;
    }
    memcpy(L->arena, &h, sizeof(h));
    return 0;
}

/* Signals, through a self-pipe into the poll loop. 0, or -1 with the message in r. */
static int launch_signals(struct launch *L)
{
    struct sigaction sa;
    if (pipe2(g_sigpipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        set_msg(L->r, JOB_EFAIL, "pipe: %s", strerror(errno));
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    for (; L->handlers < 4; L->handlers++)
        sigaction(launch_sigs[L->handlers], &sa, &L->old[L->handlers]);
    return 0;
}

/* --bind-to: rank rk's CPUs into *cpus, and its line of the binding report on stderr. */
static int launch_bind_rank(const struct launch_opts *lo, int rk, int G, cpu_set_t *cpus)
{
    char desc[640];
    int rc = launch_bind_cpus(lo->bind, rk, G, cpus, desc, sizeof(desc));
    fprintf(stderr, "burstrun: --bind-to %s: rank %d: %s\n", launch_bind_names[lo->bind], rk, desc);
    return rc;
}

/* Start the G rank processes, each with its environment (BURST_RANK first, filled per rank);
 * on a failure, stop those already started. */
static void launch_start(struct launch *L)
{
    const struct launch_opts *lo = L->lo;
    char store[N_ENV_SET][320];
    char **env = NULL;
    memset(store, 0, sizeof(store));
    snprintf(store[1], sizeof(store[1]), "BURST_SIZE=%d", L->G);
    snprintf(store[2], sizeof(store[2]), "BURST_RENDEZVOUS=%s", burst_rendezvous_address(L->rv));
    snprintf(store[3], sizeof(store[3]), "BURST_JOB_KEY=%s", burst_rendezvous_key(L->rv));
    snprintf(store[4], sizeof(store[4]), "BURST_FABRIC=%s", lo->fabric);
    snprintf(store[8], sizeof(store[8]), "BURST_BOOTSTRAP=rendezvous"); /* whatever is exported */
    /* the rendezvous listens already: a rank that finds it refusing has outlived this launcher */
    snprintf(store[9], sizeof(store[9]), "BURST_RENDEZVOUS_UP=1");
    const char *iface = lo->iface ? lo->iface : strcmp(lo->fabric, "tcp") == 0 ? "127.0.0.1" : NULL;
    if (iface)
        snprintf(store[5], sizeof(store[5]), "BURST_IFACE=%s", iface);
    if (lo->timeout_s > 0)
        snprintf(store[6], sizeof(store[6]), "BURST_TIMEOUT_MS=%lld",
                 (long long)lo->timeout_s * 1000);
    for (int rk = 0; rk < L->G; rk++) {
        cpu_set_t cpus;
        if (lo->bind != LAUNCH_BIND_NONE && launch_bind_rank(lo, rk, L->G, &cpus) != 0) {
            set_msg(L->r, JOB_EFAIL, "--bind-to %s: could not bind rank %d",
                    launch_bind_names[lo->bind], rk);
            break;
        }
        snprintf(store[0], sizeof(store[0]), "BURST_RANK=%d", rk);
        free(env);
        env = make_env(store, (int)N_ENV_SET);
        if (!env || spawn_rank(lo, rk, L->arena_fd, env, lo->bind ? &cpus : NULL, &L->rp[rk],
                               lo->json) < 0) {
            set_msg(L->r, JOB_EFAIL, "could not start rank %d: %s", rk, strerror(errno));
            break;
        }
        L->started++;
    }
    free(env);
    if (lo->verbose) { /* one write: ranks already started may print to the same stderr */
        char pids[4096] = "";
        size_t used = 0;
        for (int rk = 0; rk < L->started && used < sizeof(pids) - 16; rk++)
            used += (size_t)snprintf(pids + used, sizeof(pids) - used, " %d", (int)L->rp[rk].pid);
        fprintf(stderr, "burstrun: %d rank processes (pids%s), rendezvous %s, fabric %s%s%s\n",
                L->started, pids, burst_rendezvous_address(L->rv), lo->fabric,
                iface ? ", iface " : "", iface ? iface : "");
    }
    L->live = L->started;
    if (L->started < L->G) { /* stop the ones already started */
        for (int rk = 0; rk < L->started; rk++) {
            kill(L->rp[rk].pid, SIGTERM);
            L->rp[rk].signalled_by_us = 1;
        }
        L->deadline = job_now() + LAUNCH_GRACE_MS / 1e3;
    }
}

/* Poll the signal pipe and every open output stream for up to 100 ms, printing rank output.
 * 0, or -1 when poll failed. */
static int launch_poll(struct launch *L)
{
    struct rank_proc *rp = L->rp;
    int n = 0;
    L->pfd[n++] = (struct pollfd){.fd = g_sigpipe[0], .events = POLLIN};
    for (int rk = 0; rk < L->G; rk++) {
        if (rp[rk].out.fd >= 0)
            L->pfd[n++] = (struct pollfd){.fd = rp[rk].out.fd, .events = POLLIN};
        if (rp[rk].err.fd >= 0)
            L->pfd[n++] = (struct pollfd){.fd = rp[rk].err.fd, .events = POLLIN};
    }
    int rc = poll(L->pfd, (nfds_t)n, 100);
    if (rc < 0 && errno != EINTR)
        return -1;
    for (int i = 1; i < n && rc > 0; i++) {
        if (!L->pfd[i].revents)
            continue;
        for (int rk = 0; rk < L->G; rk++) {
            if (rp[rk].out.fd == L->pfd[i].fd)
                stream_read(&L->pg, &rp[rk].out, rk);
            else if (rp[rk].err.fd == L->pfd[i].fd)
                stream_read(&L->pg, &rp[rk].err, rk);
        }
    }
    return 0;
}

/* A signal other than SIGCHLD stops every rank (SIGTERM, then the grace period). */
static void launch_on_signals(struct launch *L)
{
    unsigned char sigs_in[16];
    ssize_t ns = read(g_sigpipe[0], sigs_in, sizeof(sigs_in));
    for (ssize_t i = 0; i < ns; i++) {
        int sig = sigs_in[i];
        if (sig == SIGCHLD || L->interrupted)
            continue;
        L->interrupted = sig;
        progress_clear(&L->pg);
        fprintf(stderr, "burstrun: %s: stopping %d rank process%s\n", sig_name(sig), L->live,
                L->live == 1 ? "" : "es");
        for (int rk = 0; rk < L->G; rk++)
            if (L->rp[rk].pid > 0) {
                kill(L->rp[rk].pid, SIGTERM);
                L->rp[rk].signalled_by_us = 1;
            }
        if (!L->deadline)
            L->deadline = job_now() + LAUNCH_GRACE_MS / 1e3;
    }
}

/* Rank rk ended with a failure: tell the survivors (and let the service remove the rank's shm
 * segment), with the rank's own message when it failed by itself (e.g. a backend missing
 * there), and remember who failed first. */
static void launch_failed(struct launch *L, int rk, int status)
{
    char why[128], full[400];
    describe_exit(status, why, sizeof(why));
    const struct job_slot *sl = job_arena_slots(L->arena) + rk;
    snprintf(full, sizeof(full), "%s", why);
    if (__atomic_load_n(&sl->done, __ATOMIC_ACQUIRE) && !sl->secondary && sl->message[0])
        snprintf(full, sizeof(full), "%s: %.250s", why, sl->message);
    burst_rendezvous_report_failure(L->rv, rk, full);
    if (!L->rp[rk].signalled_by_us) {
        int echo = WIFEXITED(status) && WEXITSTATUS(status) == JOB_EPEER;
        if (WIFSIGNALED(status) && L->sig_fail < 0)
            L->sig_fail = rk;
        else if (!echo && L->first_fail < 0)
            L->first_fail = rk;
        else if (echo && L->echo_fail < 0)
            L->echo_fail = rk;
    }
    if (!L->deadline)
        L->deadline = job_now() + LAUNCH_GRACE_MS / 1e3;
}

/* Reap whatever ended, whether or not SIGCHLD was seen yet. */
static void launch_reap(struct launch *L)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            break;
        int rk = 0;
        while (rk < L->G && L->rp[rk].pid != pid)
            rk++;
        if (rk == L->G)
            continue;
        L->rp[rk].pid_was = pid;
        L->rp[rk].pid = -1;
        L->rp[rk].status = status;
        L->live--;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            launch_failed(L, rk, status);
    }
}

/* After a failure: SIGKILL the stragglers once the grace period is over, and give up on streams
 * a grandchild left open after the next one. */
static void launch_deadlines(struct launch *L)
{
    struct rank_proc *rp = L->rp;
    if (L->deadline && L->live > 0 && job_now() > L->deadline) {
        for (int rk = 0; rk < L->G; rk++)
            if (rp[rk].pid > 0 && rp[rk].signalled_by_us < 2) {
                kill(rp[rk].pid, SIGKILL);
                rp[rk].signalled_by_us = 2;
                L->stragglers++;
            }
    }
    if (L->live == 0 && L->deadline && job_now() > L->deadline + LAUNCH_GRACE_MS / 1e3)
        for (int rk = 0; rk < L->G; rk++) {
            if (rp[rk].out.fd >= 0)
                close(rp[rk].out.fd);
            if (rp[rk].err.fd >= 0)
                close(rp[rk].err.fd);
            rp[rk].out.fd = rp[rk].err.fd = -1;
        }
}

/* Supervise the ranks until every one is reaped and its output drained. */
static void launch_supervise(struct launch *L)
{
    progress_init(&L->pg);
    for (;;) {
        int open_streams = 0;
        for (int rk = 0; rk < L->G; rk++)
            open_streams += (L->rp[rk].out.fd >= 0) + (L->rp[rk].err.fd >= 0);
        if (L->live == 0 && open_streams == 0)
            break;
        if (launch_poll(L) != 0)
            break;
        launch_on_signals(L);
        launch_reap(L);
        launch_deadlines(L);
        if (L->live > 0 && !L->deadline)
            progress_show(&L->pg, L->arena, L->G, L->total);
        else if (L->live == 0 && !L->deadline)
            L->deadline = job_now(); /* all exited cleanly: bound the wait for their streams */
    }
    progress_clear(&L->pg);
}

/* The job's outcome into r: the interruption, the rank that failed first, or the results. */
static void launch_result(struct launch *L, int *signal_p)
{
    struct rank_proc *rp = L->rp;
    if (L->r->status) {
        /* could not start every rank: message already set */
    } else if (L->interrupted) {
        *signal_p = L->interrupted;
        set_msg(L->r, LAUNCH_EINTR, "interrupted by %s; the job was stopped",
                sig_name(L->interrupted));
    } else if (L->sig_fail >= 0 || L->first_fail >= 0 || L->echo_fail >= 0) {
        int rk = L->sig_fail, rvf = burst_rendezvous_failed_rank(L->rv);
        char how[160] = "";
        if (rk < 0 && rvf >= 0 && rvf < L->G && rp[rvf].pid < 0 && !rp[rvf].signalled_by_us &&
            !(WIFEXITED(rp[rvf].status) && WEXITSTATUS(rp[rvf].status) == 0))
            rk = rvf;
        if (rk < 0)
            rk = L->first_fail >= 0 ? L->first_fail : L->echo_fail;
        describe_exit(rp[rk].status, how, sizeof(how));
        const struct job_slot *sl = job_arena_slots(L->arena) + rk;
        int usage = WIFEXITED(rp[rk].status) && WEXITSTATUS(rp[rk].status) == JOB_EUSAGE;
        set_msg(L->r, usage ? JOB_EUSAGE : JOB_EFAIL,
                "rank %d (pid %d) %s%s%.600s; the job was stopped%s", rk, (int)rp[rk].pid_was, how,
                sl->message[0] ? ": " : "", sl->message,
                L->stragglers ? " (ranks still running after the grace period were SIGKILLed)"
                              : "");
    } else {
        job_arena_collect(L->arena, L->r);
    }
}

/* Release everything; never leave a child behind (only an error path above leaves one). */
static void launch_cleanup(struct launch *L)
{
    for (int rk = 0; rk < L->G && L->rp; rk++) {
        if (L->rp[rk].pid > 0) {
            kill(L->rp[rk].pid, SIGKILL);
            waitpid(L->rp[rk].pid, NULL, 0);
        }
        if (L->rp[rk].out.fd >= 0)
            close(L->rp[rk].out.fd);
        if (L->rp[rk].err.fd >= 0)
            close(L->rp[rk].err.fd);
    }
    for (int i = 0; i < L->handlers; i++)
        sigaction(launch_sigs[i], &L->old[i], NULL);
    for (int i = 0; i < 2; i++)
        if (g_sigpipe[i] >= 0) {
            close(g_sigpipe[i]);
            g_sigpipe[i] = -1;
        }
    burst_rendezvous_destroy(L->rv);
    if (L->arena != MAP_FAILED)
        munmap(L->arena, L->bytes);
    if (L->arena_fd >= 0)
        close(L->arena_fd);
    free(L->rp);
    free(L->pfd);
}

int launch_run(const struct job_params *p, const struct launch_opts *lo, struct job_result *r,
               int *signal_p)
{
    memset(r, 0, sizeof(*r));
    *signal_p = 0;
    struct launch L = {.p = p,
                       .lo = lo,
                       .r = r,
                       .G = p->ranks,
                       .total = p->warmup + p->iters,
                       .arena_fd = -1,
                       .arena = MAP_FAILED,
                       .sig_fail = -1,
                       .first_fail = -1,
                       .echo_fail = -1};
    L.rp = calloc((size_t)L.G, sizeof(*L.rp));
    L.pfd = calloc((size_t)(2 * L.G + 1), sizeof(*L.pfd));
    if (!L.rp || !L.pfd) {
        set_msg(r, JOB_EFAIL, "out of memory");
        goto out;
    }
    for (int i = 0; i < L.G; i++)
        L.rp[i].out.fd = L.rp[i].err.fd = -1;
    if (launch_arena(&L) != 0)
        goto out;
    /* rendezvous: loopback, any port, a random key */
    burst_status_t st = burst_rendezvous_create(NULL, 0, L.G, NULL, &L.rv);
    if (st != BURST_OK) {
        set_msg(r, JOB_EFAIL, "burst_rendezvous_create: %s: %s", burst_status_str(st),
                burst_last_error());
        goto out;
    }
    if (launch_signals(&L) != 0)
        goto out;
    launch_start(&L);
    launch_supervise(&L);
    launch_result(&L, signal_p);
out:
    launch_cleanup(&L);
    return r->status;
}

void launch_fabric_env_defaults(void)
{
    static const char *const vars[] = {"FI_OFI_RXM_BUFFER_SIZE", "FI_OFI_RXM_TX_SIZE",
                                       "FI_OFI_RXM_RX_SIZE", "FI_OFI_RXM_MSG_RX_SIZE"};
    static const char *const values[] = {"65536", "256", "256", "256"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        setenv(vars[i], values[i], 0); /* 0: a value the user set stays */
}
