/* tools/launch_mpi.c - burstrun across hosts through Open MPI (see launch_mpi.h). */
#include "launch_mpi.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef BURST_HAVE_MPI
#include <mpi.h>
#endif

extern char **environ;

/* The names of the variables the ranks take from the launcher's environment (mpirun -x NAME):
 * every BURST_* and FI_* variable set here but the ones each rank sets for itself (its rank, the
 * job's size, the bootstrap). A NULL-terminated array of copies (free_names), NULL if out of
 * memory; *n = their count. */
static char **forward_names(size_t *n)
{
    static const char *const own[] = {"BURST_RANK=", "BURST_SIZE=", "BURST_BOOTSTRAP="};
    size_t cap = 1;
    for (char **e = environ; *e; e++)
        cap++;
    char **names = calloc(cap, sizeof(char *));
    *n = 0;
    for (char **e = environ; names && *e; e++) {
        const char *eq = strchr(*e, '=');
        int skip = !eq || (strncmp(*e, "BURST_", 6) != 0 && strncmp(*e, "FI_", 3) != 0);
        for (size_t i = 0; !skip && i < sizeof own / sizeof *own; i++)
            skip = strncmp(*e, own[i], strlen(own[i])) == 0;
        if (skip)
            continue;
        if (!(names[*n] = strndup(*e, (size_t)(eq - *e)))) {
            for (size_t i = 0; i < *n; i++)
                free(names[i]);
            free(names);
            return NULL;
        }
        (*n)++;
    }
    return names;
}

static void free_names(char **names)
{
    for (size_t i = 0; names && names[i]; i++)
        free(names[i]);
    free(names);
}

void launch_mpi_library_version(char *buf, size_t cap)
{
    buf[0] = '\0';
#ifdef BURST_HAVE_MPI
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) == MPI_SUCCESS) {
        v[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
        v[strcspn(v, "\n,")] = '\0';
        snprintf(buf, cap, "%s", v);
    }
#else
    (void)cap;
#endif
}

int launch_mpi_available(void)
{
#ifdef BURST_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

/* Scan one line of mpirun's stderr for the rank it says failed; -1 when none. */
static int failed_rank_in(const char *line)
{
    const char *p = strstr(line, "process rank ");
    if (!p)
        return -1;
    char *end;
    long r = strtol(p + 13, &end, 10);
    return end > p + 13 && r >= 0 && r < INT_MAX ? (int)r : -1;
}

/* --mpirun-args: a copy of s whose words (separated by spaces and tabs) *words points into
 * (NULL-terminated); NULL when out of memory. s NULL: no words. */
static char *split_words(const char *s, char ***words_p, size_t *n_p)
{
    char *copy = strdup(s ? s : "");
    char **w = copy ? calloc(strlen(copy) / 2 + 2, sizeof(char *)) : NULL;
    size_t n = 0;
    if (!w) {
        free(copy);
        return NULL;
    }
    for (char *save = NULL, *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
        w[n++] = t;
    *words_p = w;
    *n_p = n;
    return copy;
}

int launch_mpi_run(const char *prog, const char *self, int G, const struct launch_mpi_opts *mo,
                   char **job_args, int njob_args)
{
    size_t nfwd = 0, nextra = 0;
    char **fwd = forward_names(&nfwd), **extra = NULL;
    char *extra_buf = split_words(mo->mpirun_args, &extra, &nextra);
    size_t cap = 16 + 2 * nfwd + nextra + (size_t)njob_args + 1;
    char **argv = fwd && extra_buf ? calloc(cap, sizeof(char *)) : NULL;
    if (!argv) {
        fprintf(stderr, "%s: out of memory\n", prog);
        free_names(fwd);
        free(extra_buf);
        free(extra);
        return 2;
    }
    const char *hosts = mo->hosts, *hostfile = mo->hostfile;
    int verbose = mo->verbose;
    char np[16];
    snprintf(np, sizeof(np), "%d", G);
    size_t a = 0;
    argv[a++] = "mpirun"; /* by name: Open MPI takes an absolute argv[0] as its --prefix */
    if (geteuid() == 0)
        argv[a++] = "--allow-run-as-root";
    argv[a++] = "-np";
    argv[a++] = np;
    argv[a++] = hosts ? "--host" : "--hostfile";
    argv[a++] = (char *)(hosts ? hosts : hostfile);
    argv[a++] = "--bind-to";
    argv[a++] = (char *)(mo->bind_to ? mo->bind_to : "none");
    if (mo->bind_to && strcmp(mo->bind_to, "none") != 0)
        argv[a++] = "--report-bindings";
    for (size_t i = 0; i < nextra; i++)
        argv[a++] = extra[i];
    for (size_t i = 0; i < nfwd; i++) {
        argv[a++] = "-x";
        argv[a++] = fwd[i];
    }
    argv[a++] = (char *)self;
    argv[a++] = "--mpi-rank-worker";
    for (int i = 0; i < njob_args; i++)
        argv[a++] = job_args[i];
    argv[a] = NULL;
    if (verbose) {
        fprintf(stderr, "%s:", prog);
        for (size_t i = 0; i < a; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\n");
    }
    int errp[2];
    if (pipe(errp) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
        free(argv);
        free_names(fwd);
        free(extra_buf);
        free(extra);
        return 2;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(errp[0]);
        dup2(errp[1], 2);
        close(errp[1]);
        execvp("mpirun", argv);
        fprintf(stderr, "%s: cannot run mpirun (Open MPI) for --hosts/--hostfile: %s\n", prog,
                strerror(errno));
        _exit(127);
    }
    close(errp[1]);
    free(argv);
    free_names(fwd);
    free(extra_buf);
    free(extra);
    if (pid < 0) {
        close(errp[0]);
        fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
        return 2;
    }
    /* Ctrl-C goes to the whole foreground group: mpirun handles it; we wait for it. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_term;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGTERM, &ign, &old_term);
    FILE *err = fdopen(errp[0], "r");
    char line[1024];
    int failed = -1;
    while (err && fgets(line, sizeof(line), err)) {
        fputs(line, stderr);
        if (failed < 0)
            failed = failed_rank_in(line);
    }
    if (err)
        fclose(err);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "%s: mpirun was killed by signal %d\n", prog, WTERMSIG(status));
        return 128 + WTERMSIG(status);
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (rc == 127)
        return 2;
    if (rc != 0) {
        /* burstrun's statuses (1 check failed, 2 usage, 3 runtime) pass through; anything else,
         * a rank killed by a signal included, is a runtime failure */
        int ours = rc <= 3 ? rc : 3;
        if (failed >= 0)
            fprintf(stderr, "%s: rank %d failed (as mpirun reports above); mpirun exited %d\n",
                    prog, failed, rc);
        else
            fprintf(stderr, "%s: the job failed: mpirun exited %d\n", prog, rc);
        return ours;
    }
    return 0;
}

#ifdef BURST_HAVE_MPI
/* The bootstrap's communicator: a duplicate of MPI_COMM_WORLD with errors returned, so that a
 * failed exchange is an error of burst_comm_create, not an abort of the process. */
static MPI_Comm boot_comm = MPI_COMM_NULL;
static int boot_stuck; /* an exchange timed out: MPI may still write into its buffers */

int launch_mpi_init(int *rank_p, int *size_p)
{
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "burstrun --mpi-rank-worker: MPI_Init_thread failed\n");
        return -1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank_p);
    MPI_Comm_size(MPI_COMM_WORLD, size_p);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &boot_comm) != MPI_SUCCESS ||
        MPI_Comm_set_errhandler(boot_comm, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
        fprintf(stderr, "burstrun --mpi-rank-worker: rank %d: MPI_Comm_dup failed\n", *rank_p);
        return -1;
    }
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

burst_status_t launch_mpi_allgather(void *ctx, const void *send, void *recv, size_t len,
                                    int timeout_ms)
{
    (void)ctx;
    int size = 0;
    if (boot_stuck || boot_comm == MPI_COMM_NULL || len > INT_MAX ||
        MPI_Comm_size(boot_comm, &size) != MPI_SUCCESS)
        return BURST_ERR_TRANSPORT;
    /* MPI writes into buffers of ours: after a timeout the request stays pending and they stay
     * allocated (leaked), never the library's. */
    char *sbuf = malloc(len ? len : 1), *rbuf = malloc(len * (size_t)size + 1);
    if (!sbuf || !rbuf) {
        free(sbuf);
        free(rbuf);
        return BURST_ERR_NO_MEMORY;
    }
    memcpy(sbuf, send, len);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Iallgather(sbuf, (int)len, MPI_BYTE, rbuf, (int)len, MPI_BYTE, boot_comm, &req);
    int64_t deadline = now_ms() + timeout_ms;
    long nap_us = 20;
    while (rc == MPI_SUCCESS) {
        int done = 0;
        rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            break;
        if (now_ms() >= deadline) {
            boot_stuck = 1;
            return BURST_ERR_TIMEOUT;
        }
        struct timespec ts = {0, nap_us * 1000};
        nanosleep(&ts, NULL);
        nap_us = nap_us < 1000 ? nap_us * 2 : 1000;
    }
    if (rc == MPI_SUCCESS)
        memcpy(recv, rbuf, len * (size_t)size);
    free(sbuf);
    free(rbuf);
    return rc == MPI_SUCCESS ? BURST_OK : BURST_ERR_TRANSPORT;
}

int launch_mpi_merge(void *arena, size_t bytes)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const size_t piece = (size_t)1 << 30; /* counts are ints */
    for (size_t off = 0; off < bytes; off += piece) {
        int n = (int)(bytes - off < piece ? bytes - off : piece);
        char *p = (char *)arena + off;
        int ret = rank == 0 ? MPI_Reduce(MPI_IN_PLACE, p, n, MPI_BYTE, MPI_BOR, 0, MPI_COMM_WORLD)
                            : MPI_Reduce(p, NULL, n, MPI_BYTE, MPI_BOR, 0, MPI_COMM_WORLD);
        if (ret != MPI_SUCCESS)
            return -1;
    }
    return 0;
}

void launch_mpi_finalize(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin)
        return;
    if (boot_comm != MPI_COMM_NULL && !boot_stuck)
        MPI_Comm_free(&boot_comm);
    MPI_Finalize();
}
#else
burst_status_t launch_mpi_allgather(void *ctx, const void *send, void *recv, size_t len,
                                    int timeout_ms)
{
    (void)ctx;
    (void)send;
    (void)recv;
    (void)len;
    (void)timeout_ms;
    return BURST_ERR_UNSUPPORTED;
}

int launch_mpi_init(int *rank_p, int *size_p)
{
    (void)rank_p;
    (void)size_p;
    fprintf(stderr, "burstrun --mpi-rank-worker: this burstrun was built without MPI\n");
    return -1;
}

int launch_mpi_merge(void *arena, size_t bytes)
{
    (void)arena;
    (void)bytes;
    return -1;
}

void launch_mpi_finalize(void)
{
}
#endif
