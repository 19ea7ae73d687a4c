/* tools/launch.c - start, watch and stop the rank processes of one burstrun job (launch.h). */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

struct progress {
    int on;    /* stderr is a terminal */
    int shown; /* a progress line is on screen */
    double t0; /* spawn time */
    char last[160];
};

static void progress_clear(struct progress *pg)
{
    if (pg->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        pg->shown = 0;
    }
}

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

static void progress_show(struct progress *pg, void *arena, int G, int total)
{
    if (!pg->on)
        return;
    double el = job_now() - pg->t0;
    if (el < 2.0)
        return;
    struct job_slot *slots = job_arena_slots(arena);
    int done = total;
    for (int rk = 0; rk < G; rk++) {
        int it = __atomic_load_n(&slots[rk].iter, __ATOMIC_RELAXED);
        done = it < done ? it : done;
    }
    char line[160];
    if (done > 0) {
        double rate = done / el;
        snprintf(line, sizeof(line), "iteration %d/%d, %.2f it/s, ETA %.0f s", done, total, rate,
                 (total - done) / rate);
    } else {
        snprintf(line, sizeof(line), "iteration 0/%d, %.0f s", total, el);
    }
    if (pg->shown && strcmp(line, pg->last) == 0)
        return;
    snprintf(pg->last, sizeof(pg->last), "%s", line);
    fprintf(stderr, "\r\033[Kburstrun: %s", line);
    fflush(stderr);
    pg->shown = 1;
}

/* ---- processes ---- */

static const char *const env_set[] = {"BURST_RANK",       "BURST_SIZE",        "BURST_RENDEZVOUS",
                                      "BURST_JOB_KEY",    "BURST_FABRIC",      "BURST_IFACE",
                                      "BURST_TIMEOUT_MS", "BURST_NUM_THREADS", "BURST_BOOTSTRAP"};
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

static pid_t spawn_rank(const struct launch_opts *lo, int rank, int arena_fd, char **env,
                        struct rank_proc *rp, int json)
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

int launch_run(const struct job_params *p, const struct launch_opts *lo, struct job_result *r,
               int *signal_p)
{
    memset(r, 0, sizeof(*r));
    *signal_p = 0;
    int G = p->ranks, total = p->warmup + p->iters;
    uint64_t bytes = 0;
    struct job_arena_hdr h;
    int arena_fd = -1;
    void *arena = MAP_FAILED;
    struct burst_rendezvous *rv = NULL;
    struct rank_proc *rp = calloc((size_t)G, sizeof(*rp));
    struct pollfd *pfd = calloc((size_t)(2 * G + 1), sizeof(*pfd));
    char **env = NULL;
    struct sigaction sa, old[4];
    static const int sigs[4] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
    int handlers = 0, started = 0;
    struct progress pg = {0};

    if (!rp || !pfd) {
        set_msg(r, JOB_EFAIL, "out of memory");
        goto out;
    }
    for (int i = 0; i < G; i++)
        rp[i].out.fd = rp[i].err.fd = -1;

    /* the arena */
    char msg[256];
    bytes = job_arena_layout(p, &h, msg, sizeof(msg));
    if (!bytes) {
        set_msg(r, JOB_EUSAGE, "%s", msg);
        goto out;
    }
    snprintf(h.backend, sizeof(h.backend), "%s", lo->backend);
    snprintf(h.num_threads, sizeof(h.num_threads), "%s", lo->num_threads);
    snprintf(h.device, sizeof(h.device), "%s", lo->device ? lo->device : "");
    if (!strcmp(h.num_threads, "0") && !getenv("BURST_NUM_THREADS")) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(h.num_threads, sizeof(h.num_threads), "%d", ncpu > G ? (int)(ncpu / G) : 1);
    }
    h.kill = lo->kill;
    arena_fd = memfd_create("burstrun-job", MFD_CLOEXEC);
    if (arena_fd < 0 || ftruncate(arena_fd, (off_t)bytes) != 0) {
        set_msg(r, JOB_EFAIL, "memfd of %llu bytes for the job: %s", (unsigned long long)bytes,
                strerror(errno));
        goto out;
    }
    arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
    if (arena == MAP_FAILED) {
        set_msg(r, JOB_EFAIL, "mmap of the job's %llu bytes: %s", (unsigned long long)bytes,
                strerror(errno));
        goto out;
    }
    memcpy(arena, &h, sizeof(h));

    /* rendezvous: loopback, any port, a random key */
    burst_status_t st = burst_rendezvous_create(NULL, 0, G, NULL, &rv);
    if (st != BURST_OK) {
        set_msg(r, JOB_EFAIL, "burst_rendezvous_create: %s: %s", burst_status_str(st),
                burst_last_error());
        goto out;
    }

    /* signals, through a self-pipe into the poll loop */
    if (pipe2(g_sigpipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        set_msg(r, JOB_EFAIL, "pipe: %s", strerror(errno));
        goto out;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    for (; handlers < 4; handlers++)
        sigaction(sigs[handlers], &sa, &old[handlers]);

    /* the environment of every rank: BURST_RANK first, filled per rank */
    char store[N_ENV_SET][320];
    memset(store, 0, sizeof(store));
    snprintf(store[1], sizeof(store[1]), "BURST_SIZE=%d", G);
    snprintf(store[2], sizeof(store[2]), "BURST_RENDEZVOUS=%s", burst_rendezvous_address(rv));
    snprintf(store[3], sizeof(store[3]), "BURST_JOB_KEY=%s", burst_rendezvous_key(rv));
    snprintf(store[4], sizeof(store[4]), "BURST_FABRIC=%s", lo->fabric);
    snprintf(store[8], sizeof(store[8]), "BURST_BOOTSTRAP=rendezvous"); /* whatever is exported */
    const char *iface = lo->iface ? lo->iface : strcmp(lo->fabric, "tcp") == 0 ? "127.0.0.1" : NULL;
    if (iface)
        snprintf(store[5], sizeof(store[5]), "BURST_IFACE=%s", iface);
    if (lo->timeout_s > 0)
        snprintf(store[6], sizeof(store[6]), "BURST_TIMEOUT_MS=%lld",
                 (long long)lo->timeout_s * 1000);
    for (int rk = 0; rk < G; rk++) {
        snprintf(store[0], sizeof(store[0]), "BURST_RANK=%d", rk);
        free(env);
        env = make_env(store, (int)N_ENV_SET);
        if (!env || spawn_rank(lo, rk, arena_fd, env, &rp[rk], lo->json) < 0) {
            set_msg(r, JOB_EFAIL, "could not start rank %d: %s", rk, strerror(errno));
            break;
        }
        started++;
    }
    free(env);
    env = NULL;
    if (lo->verbose) {
        fprintf(stderr, "burstrun: %d rank processes (pids", started);
        for (int rk = 0; rk < started; rk++)
            fprintf(stderr, " %d", (int)rp[rk].pid);
        fprintf(stderr, "), rendezvous %s, fabric %s%s%s\n", burst_rendezvous_address(rv),
                lo->fabric, iface ? ", iface " : "", iface ? iface : "");
    }

    /* supervise */
    pg.on = isatty(2);
    pg.t0 = job_now();
    /* who failed first: a rank killed by a signal we did not send, else the rank the rendezvous
     * saw fail first, else the first non-zero exit that is not a peer's echo, else an echo
     * (survivors may exit with a transport error as fast as the dead rank is reaped) */
    int live = started, sig_fail = -1, first_fail = -1, echo_fail = -1, interrupted = 0,
        stragglers = 0;
    double deadline = 0.0; /* SIGKILL the rest at this time; 0 = no failure yet */
    char how[160] = "";
    if (started < G) { /* stop the ones already started */
        for (int rk = 0; rk < started; rk++) {
            kill(rp[rk].pid, SIGTERM);
            rp[rk].signalled_by_us = 1;
        }
        deadline = job_now() + LAUNCH_GRACE_MS / 1e3;
    }
    for (;;) {
        int open_streams = 0;
        for (int rk = 0; rk < G; rk++)
            open_streams += (rp[rk].out.fd >= 0) + (rp[rk].err.fd >= 0);
        if (live == 0 && open_streams == 0)
            break;
        int n = 0;
        pfd[n++] = (struct pollfd){.fd = g_sigpipe[0], .events = POLLIN};
        for (int rk = 0; rk < G; rk++) {
            if (rp[rk].out.fd >= 0)
                pfd[n++] = (struct pollfd){.fd = rp[rk].out.fd, .events = POLLIN};
            if (rp[rk].err.fd >= 0)
                pfd[n++] = (struct pollfd){.fd = rp[rk].err.fd, .events = POLLIN};
        }
        int rc = poll(pfd, (nfds_t)n, 100);
        if (rc < 0 && errno != EINTR)
            break;
        /* rank output */
        for (int i = 1; i < n && rc > 0; i++) {
            if (!pfd[i].revents)
                continue;
            for (int rk = 0; rk < G; rk++) {
                if (rp[rk].out.fd == pfd[i].fd)
                    stream_read(&pg, &rp[rk].out, rk);
                else if (rp[rk].err.fd == pfd[i].fd)
                    stream_read(&pg, &rp[rk].err, rk);
            }
        }
        /* signals */
        unsigned char sigs_in[16];
        ssize_t ns = read(g_sigpipe[0], sigs_in, sizeof(sigs_in));
        for (ssize_t i = 0; i < ns; i++) {
            int sig = sigs_in[i];
            if (sig == SIGCHLD || interrupted)
                continue;
            interrupted = sig;
            progress_clear(&pg);
            fprintf(stderr, "burstrun: %s: stopping %d rank process%s\n", sig_name(sig), live,
                    live == 1 ? "" : "es");
            for (int rk = 0; rk < G; rk++)
                if (rp[rk].pid > 0) {
                    kill(rp[rk].pid, SIGTERM);
                    rp[rk].signalled_by_us = 1;
                }
            if (!deadline)
                deadline = job_now() + LAUNCH_GRACE_MS / 1e3;
        }
        /* children: reap whatever ended, whether or not SIGCHLD was seen yet */
        for (;;) {
            int status;
            pid_t pid = waitpid(-1, &status, WNOHANG);
            if (pid <= 0)
                break;
            int rk = 0;
            while (rk < G && rp[rk].pid != pid)
                rk++;
            if (rk == G)
                continue;
            rp[rk].pid_was = pid;
            rp[rk].pid = -1;
            rp[rk].status = status;
            live--;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                continue;
            char why[128], full[400];
            describe_exit(status, why, sizeof(why));
            /* tell the survivors (and let the service remove the rank's shm segment), with
             * the rank's own message when it failed by itself (e.g. a backend missing there) */
            const struct job_slot *sl = job_arena_slots(arena) + rk;
            snprintf(full, sizeof(full), "%s", why);
            if (__atomic_load_n(&sl->done, __ATOMIC_ACQUIRE) && !sl->secondary && sl->message[0])
                snprintf(full, sizeof(full), "%s: %.250s", why, sl->message);
            burst_rendezvous_report_failure(rv, rk, full);
            if (!rp[rk].signalled_by_us) {
                int echo = WIFEXITED(status) && WEXITSTATUS(status) == JOB_EPEER;
                if (WIFSIGNALED(status) && sig_fail < 0)
                    sig_fail = rk;
                else if (!echo && first_fail < 0)
                    first_fail = rk;
                else if (echo && echo_fail < 0)
                    echo_fail = rk;
            }
            if (!deadline)
                deadline = job_now() + LAUNCH_GRACE_MS / 1e3;
        }
        /* stragglers after the grace period */
        if (deadline && live > 0 && job_now() > deadline) {
            for (int rk = 0; rk < G; rk++)
                if (rp[rk].pid > 0 && rp[rk].signalled_by_us < 2) {
                    kill(rp[rk].pid, SIGKILL);
                    rp[rk].signalled_by_us = 2;
                    stragglers++;
                }
        }
        /* streams left open by a grandchild after everyone was reaped: give up after the grace */
        if (live == 0 && deadline && job_now() > deadline + LAUNCH_GRACE_MS / 1e3)
            for (int rk = 0; rk < G; rk++) {
                if (rp[rk].out.fd >= 0)
                    close(rp[rk].out.fd);
                if (rp[rk].err.fd >= 0)
                    close(rp[rk].err.fd);
                rp[rk].out.fd = rp[rk].err.fd = -1;
            }
        if (live > 0 && !deadline)
            progress_show(&pg, arena, G, total);
        else if (live == 0 && !deadline)
            deadline = job_now(); /* all exited cleanly: bound the wait for their streams */
    }
    progress_clear(&pg);

    if (r->status) {
        /* could not start every rank: message already set */
    } else if (interrupted) {
        *signal_p = interrupted;
        set_msg(r, LAUNCH_EINTR, "interrupted by %s; the job was stopped", sig_name(interrupted));
    } else if (sig_fail >= 0 || first_fail >= 0 || echo_fail >= 0) {
        int rk = sig_fail, rvf = burst_rendezvous_failed_rank(rv);
        if (rk < 0 && rvf >= 0 && rvf < G && rp[rvf].pid < 0 && !rp[rvf].signalled_by_us &&
            !(WIFEXITED(rp[rvf].status) && WEXITSTATUS(rp[rvf].status) == 0))
            rk = rvf;
        if (rk < 0)
            rk = first_fail >= 0 ? first_fail : echo_fail;
        describe_exit(rp[rk].status, how, sizeof(how));
        const struct job_slot *sl = job_arena_slots(arena) + rk;
        int usage = WIFEXITED(rp[rk].status) && WEXITSTATUS(rp[rk].status) == JOB_EUSAGE;
        set_msg(r, usage ? JOB_EUSAGE : JOB_EFAIL,
                "rank %d (pid %d) %s%s%.600s; the job was stopped%s", rk, (int)rp[rk].pid_was, how,
                sl->message[0] ? ": " : "", sl->message,
                stragglers ? " (ranks still running after the grace period were SIGKILLed)" : "");
    } else {
        job_arena_collect(arena, r);
    }

out:
    for (int rk = 0; rk < G && rp; rk++) {
        if (rp[rk].pid > 0) { /* only on an error path above: never leave a child behind */
            kill(rp[rk].pid, SIGKILL);
            waitpid(rp[rk].pid, NULL, 0);
        }
        if (rp[rk].out.fd >= 0)
            close(rp[rk].out.fd);
        if (rp[rk].err.fd >= 0)
            close(rp[rk].err.fd);
    }
    for (int i = 0; i < handlers; i++)
        sigaction(sigs[i], &old[i], NULL);
    for (int i = 0; i < 2; i++)
        if (g_sigpipe[i] >= 0) {
            close(g_sigpipe[i]);
            g_sigpipe[i] = -1;
        }
    burst_rendezvous_destroy(rv);
    if (arena != MAP_FAILED)
        munmap(arena, bytes);
    if (arena_fd >= 0)
        close(arena_fd);
    free(rp);
    free(pfd);
    free(env);
    return r->status;
}
