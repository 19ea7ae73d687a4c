/* tools/pingpong.c - burstrun --pingpong (pingpong.h). */
#include "pingpong.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "burst/burst.h"
#include "burstrun_meta.h"
#include "launch.h"

static const size_t sizes[] = {64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* fabtests' size and count notation: 4k, 1m (powers of 2); 10k, 2m (powers of 10). */
static const char *size_str(double v, int pow2, char *buf, size_t cap)
{
    double k = pow2 ? 1024.0 : 1000.0;
    if (v >= k * k * k)
        snprintf(buf, cap, "%.0f%s", v / (k * k * k), pow2 ? "g" : "b");
    else if (v >= k * k)
        snprintf(buf, cap, "%.0fm", v / (k * k));
    else if (v >= k)
        snprintf(buf, cap, "%.0fk", v / k);
    else
        snprintf(buf, cap, "%.0f", v);
    return buf;
}

static int iters_for(const struct pingpong_opts *po, size_t bytes)
{
    if (po->iters)
        return po->iters;
    size_t it = (256u << 20) / bytes;
    return it < 10 ? 10 : it > 10000 ? 10000 : (int)it;
}

/* One row (rank 0) into f: the text row, or the JSON element. */
static void print_row(FILE *f, const struct pingpong_opts *po, int k, size_t bytes, int iters,
                      double sec)
{
    double total = 2.0 * (double)iters * (double)bytes, usec = sec * 1e6 / (2.0 * iters);
    char b[4][32];
    if (po->json) {
        fprintf(f,
                "%s{\"bytes\": %zu, \"sent\": %d, \"ack\": %d, \"total_bytes\": %.0f, "
                "\"time_s\": %.6g, \"mb_per_s\": %.6g, \"usec_per_xfer\": %.6g, "
                "\"mxfers_per_s\": %.6g}",
                k ? ", " : "", bytes, iters, iters, total, sec, total / (sec * 1e6), usec,
                1.0 / usec);
    } else {
        snprintf(b[2], sizeof(b[2]), "=%s", size_str(iters, 0, b[3], sizeof(b[3])));
        fprintf(f, "%-10s%-8s%-8s%-8s%8.2fs%10.2f%11.2f%11.2f\n",
                size_str((double)bytes, 1, b[0], 32), size_str(iters, 0, b[1], 32), b[2],
                size_str(total, 1, b[3], 32), sec, total / (sec * 1e6), usec, 1.0 / usec);
    }
    fflush(f);
}

/* The header of rank 0's report into f. */
static void print_head(FILE *f, const struct pingpong_opts *po, const char *fabric)
{
    if (po->json) {
        fprintf(f, "{");
        meta_json_fields(f, 1);
        fprintf(f, ", \"fabric\": \"%s\", \"pingpong\": [", fabric);
        return;
    }
    fprintf(f, "# burst_comm_pingpong between 2 rank processes, fabric %s\n", fabric);
    fprintf(f, "%-10s%-8s%-8s%-8s%8s%10s%11s%11s\n", "bytes", "#sent", "#ack", "total", "time",
            "MB/sec", "usec/xfer", "Mxfers/sec");
}

/* A rank: join, then every size (a tenth of the round trips untimed first); rank 0 reports
 * (rows on stdout as they finish; the JSON object at the end, only when every size ran). Its
 * exit status. */
static int rank_main(const struct pingpong_opts *po, int rank)
{
    struct burst_comm *comm = NULL;
    char *json = NULL;
    size_t json_len = 0;
    FILE *out = po->json ? open_memstream(&json, &json_len) : stdout;
    unsigned char *buf = calloc(1, sizes[NSIZES - 1]);
    burst_status_t st = buf && out ? burst_comm_create_env(&comm) : BURST_ERR_NO_MEMORY;
    for (size_t k = 0; k < NSIZES && st == BURST_OK; k++) {
        int iters = iters_for(po, sizes[k]);
        double sec = 0;
        st = burst_comm_pingpong(comm, 1 - rank, buf, sizes[k], iters / 10 + 1, &sec);
        if (st == BURST_OK)
            st = burst_comm_pingpong(comm, 1 - rank, buf, sizes[k], iters, &sec);
        if (st == BURST_OK && rank == 0) {
            if (k == 0)
                print_head(out, po, burst_comm_fabric(comm));
            print_row(out, po, (int)k, sizes[k], iters, sec);
        }
    }
    if (st != BURST_OK)
        fprintf(stderr, "burstrun: --pingpong: rank %d: %s: %s\n", rank, burst_status_str(st),
                burst_last_error());
    if (po->json && out) {
        fclose(out);
        if (st == BURST_OK && rank == 0)
            printf("%s]}\n", json);
        free(json);
    }
    burst_comm_destroy(comm);
    free(buf);
    fflush(NULL);
    return st == BURST_OK ? 0 : 3;
}

/* A loopback TCP port that nothing listens on now; 0 when none. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int port = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                       getsockname(fd, (struct sockaddr *)&a, &len) == 0
                   ? ntohs(a.sin_port)
                   : 0;
    if (fd >= 0)
        close(fd);
    return port;
}

/* The variables of rank `rank` (in the child). */
static void rank_env(const struct pingpong_opts *po, int rank, int port, const char *key)
{
    static const char *const drop[] = {"BURST_RANK",   "BURST_SIZE",   "BURST_BOOTSTRAP",
                                       "SLURM_PROCID", "SLURM_NTASKS", "BURST_RENDEZVOUS_UP"};
    char v[64];
    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
        unsetenv(drop[i]);
    snprintf(v, sizeof(v), "%d", rank);
    setenv("RANK", v, 1);
    setenv("WORLD_SIZE", "2", 1);
    snprintf(v, sizeof(v), "127.0.0.1:%d", port);
    setenv("BURST_RENDEZVOUS", v, 1);
    setenv("BURST_JOB_KEY", key, 1);
    setenv("BURST_FABRIC", po->fabric, 1);
    const char *iface = po->iface ? po->iface : !strcmp(po->fabric, "tcp") ? "127.0.0.1" : NULL;
    if (iface)
        setenv("BURST_IFACE", iface, 1);
    if (po->timeout_s) {
        snprintf(v, sizeof(v), "%d", po->timeout_s * 1000);
        setenv("BURST_TIMEOUT_MS", v, 1);
    }
}

/* Wait for both ranks; after the first failure the other gets LAUNCH_GRACE_MS. 0 or 3. */
static int reap(pid_t pid[2])
{
    int rc = 0, left = 2;
    struct timespec deadline = {0, 0}, now;
    while (left) {
        int status;
        pid_t w = waitpid(-1, &status, rc ? WNOHANG : 0);
        if (w < 0 && errno == EINTR)
            continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (w == 0) { /* after a failure: the other's grace period */
            if (now.tv_sec > deadline.tv_sec ||
                (now.tv_sec == deadline.tv_sec && now.tv_nsec > deadline.tv_nsec))
                kill(pid[0] > 0 ? pid[0] : pid[1], SIGKILL);
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (w < 0)
            break;
        int r = w == pid[0] ? 0 : w == pid[1] ? 1 : -1;
        if (r < 0)
            continue;
        pid[r] = -1;
        left--;
        if (WIFSIGNALED(status) || WEXITSTATUS(status) != 0) {
            if (WIFSIGNALED(status))
                fprintf(stderr, "burstrun: --pingpong: rank %d was killed by signal %d\n", r,
                        WTERMSIG(status));
            if (!rc) {
                deadline = now;
                deadline.tv_sec += LAUNCH_GRACE_MS / 1000;
            }
            rc = 3;
        }
    }
    return rc;
}

int pingpong_run(const struct pingpong_opts *po)
{
    unsigned char raw[32];
    char key[65];
    int port = free_port();
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw) || !port) {
        fprintf(stderr, "burstrun: --pingpong: no random key or free loopback port: %s\n",
                strerror(errno));
        return 3;
    }
    for (int i = 0; i < 32; i++)
        snprintf(key + 2 * i, 3, "%02x", raw[i]);
    pid_t pid[2] = {-1, -1}, parent = getpid();
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(3);
            rank_env(po, r, port, key);
            _exit(rank_main(po, r));
        }
        if (pid[r] < 0) {
            fprintf(stderr, "burstrun: --pingpong: fork: %s\n", strerror(errno));
            if (r)
                kill(pid[0], SIGKILL);
            reap(pid);
            return 3;
        }
    }
    int rc = reap(pid);
    if (rc && po->json) {
        printf("{");
        meta_json_fields(stdout, 1);
        printf(", \"error\": {\"exit_code\": %d, \"message\": \"a rank failed (see stderr)\"}}\n",
               rc);
    }
    return rc;
}
