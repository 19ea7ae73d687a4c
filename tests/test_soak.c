/*
 * tests/test_soak.c - many forward + backward calls, resources constant (suite 'slow').
 *
 *   test_soak threads [ITERS]   G = 2 ranks as threads of this process (transport "local")
 *   test_soak shm|tcp [ITERS]   G = 2 rank processes joined through the rendezvous and libfabric
 *                               (exit 77 when the build or the provider lacks it)
 *
 * Every rank runs ITERS (default 1000) forward + backward calls on a small causal zigzag GQA
 * problem in deterministic mode, on one plan that it destroys and recreates every PLAN_EVERY
 * calls (the plan handshake and the ring buffers are soaked too). Each rank samples, after a
 * warm-up of ITERS / 10 calls, at the middle and at the end:
 *   - resident memory (VmRSS): growth from warm-up to end <= RSS_SLACK (4 MiB: the allocator's
 *     and the kernel's page-granular noise; a leak of 1 KiB per call would add 0.9 MiB on top,
 *     which the heap check below catches exactly), and growth middle-to-end <= RSS_SLACK / 2;
 *   - bytes in use on the heap (glibc mallinfo2, every arena): exactly equal at the three
 *     samples modulo HEAP_SLACK (64 KiB: per-thread caches filled lazily); under a sanitizer,
 *     whose allocator replaces glibc's, this reads 0 and LeakSanitizer checks leaks instead;
 *   - open file descriptors and this rank's /dev/shm entries (the shm provider names them
 *     "<pid>:..."): equal at the three samples.
 * Every call's outputs must be bitwise those of the first call (the same inputs, deterministic
 * mode): a ring that corrupts its buffers over time fails here. The parent (process modes)
 * checks that no process, /dev/shm entry or file descriptor is left.
 */
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "burst/burst.h"
#include "harness.h"

#define G 2
#define SKIP 77
#define PLAN_EVERY 100
#define RSS_SLACK (4 << 20)
#define HEAP_SLACK (64 << 10)

enum {
    S_WARM,
    S_MID,
    S_END,
    NSAMPLE
};

struct sample {
    long long rss, heap;
    int nfd, nshm;
};

/* One rank's report (in a shared mapping for the process modes). */
struct report {
    int done;
    int calls;      /* calls completed */
    int mismatches; /* calls whose outputs differ from the first call's */
    burst_status_t st;
    char msg[256];
    struct sample s[NSAMPLE];
};

/* The problem: B = 1, N = 128 (64 per rank), Hq = 4, Hkv = 2, d = 32, fp32, causal zigzag. */
enum {
    N = 128,
    HQ = 4,
    HKV = 2,
    D = 32,
    NR = N / G
};

static long long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lld %lld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * sysconf(_SC_PAGESIZE);
}

static long long heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
}

static int count_dir(const char *dir, const char *prefix)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.' && (!prefix || strncmp(e->d_name, prefix, strlen(prefix)) == 0);
    if (d)
        closedir(d);
    return n;
}

static void take(struct sample *s)
{
    char pre[24];
    snprintf(pre, sizeof(pre), "%d:", (int)getpid());
    s->heap = heap_bytes();
    s->rss = rss_bytes();
    s->nfd = count_dir("/proc/self/fd", NULL) - 1; /* minus the directory's own */
    s->nshm = count_dir("/dev/shm", pre);
}

static struct burst_tensor tensor(float *base, int heads)
{
    return burst_tensor_contiguous(base, BURST_DTYPE_FP32, 1, NR, heads, D);
}

static int make_plan(struct burst_context *ctx, struct burst_comm *comm, struct burst_plan **plan)
{
    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = 1;
    pp.seq_len = N;
    pp.q_heads = HQ;
    pp.kv_heads = HKV;
    pp.head_dim = D;
    pp.dtype = BURST_DTYPE_FP32;
    pp.causal = 1;
    pp.layout = BURST_LAYOUT_ZIGZAG;
    pp.deterministic = 1;
    return burst_plan_create(ctx, comm, &pp, plan) == BURST_OK ? 0 : -1;
}

#define FAIL(rep, st_, ...)                                                                        \
    do {                                                                                           \
        (rep)->st = (st_);                                                                         \
        snprintf((rep)->msg, sizeof((rep)->msg), __VA_ARGS__);                                     \
        goto out;                                                                                  \
    } while (0)

/* One rank's buffers, kept across the calls of soak_rank(). */
struct rank_state {
    float *in, *out, *first; /* inputs; outputs; the first call's outputs */
};

enum {
    NQ = NR * HQ * D,
    NKV = NR * HKV * D,
    NOUT = 2 * NQ + 2 * NKV + HQ * NR
};

static int state_init(struct rank_state *rs, int rank)
{
    rs->in = malloc(sizeof(float) * (2 * NQ + 2 * NKV));
    rs->out = malloc(sizeof(float) * NOUT);
    rs->first = malloc(sizeof(float) * NOUT);
    if (!rs->in || !rs->out || !rs->first)
        return -1;
    uint64_t st = harness_seed() + 7919u * (uint64_t)rank;
    for (size_t i = 0; i < 2 * NQ + 2 * NKV; i++)
        rs->in[i] = (float)harness_rng_uniform(&st, -1.0, 1.0);
    return 0;
}

static void state_free(struct rank_state *rs)
{
    free(rs->in);
    free(rs->out);
    free(rs->first);
}

/* Calls it0 .. it1 - 1 of one rank. With `sample` set, the rank samples its own process after
 * the warm-up, middle and last calls (rank processes); otherwise the caller samples between
 * batches of calls (threads: one process, sampled while no rank runs). */
static void soak_rank(struct burst_context *ctx, struct burst_comm *comm, int it0, int it1,
                      int iters, int sample, struct rank_state *rs, struct report *rep)
{
    int r = burst_comm_rank(comm);
    float *in = rs->in, *out = rs->out;
    struct burst_plan *plan = NULL;
    struct burst_tensor q = tensor(in, HQ), dout = tensor(in + NQ, HQ),
                        k = tensor(in + 2 * NQ, HKV), v = tensor(in + 2 * NQ + NKV, HKV);
    struct burst_tensor o = tensor(out, HQ), dq = tensor(out + NQ, HQ),
                        dk = tensor(out + 2 * NQ, HKV), dv = tensor(out + 2 * NQ + NKV, HKV);
    float *lse = out + 2 * NQ + 2 * NKV;
    int warm = iters / 10, mid = warm + (iters - warm) / 2;
    for (int it = it0; it < it1; it++) {
        if (it == it0 || it % PLAN_EVERY == 0) {
            burst_plan_destroy(plan);
            plan = NULL;
            if (make_plan(ctx, comm, &plan) != 0)
                FAIL(rep, BURST_ERR_INTERNAL, "rank %d call %d: plan: %s", r, it,
                     burst_last_error());
        }
        memset(out, 0xff, sizeof(float) * NOUT); /* NaN: unwritten elements differ */
        burst_status_t s = burst_attention_forward(plan, &q, &k, &v, &o, lse);
        if (s == BURST_OK)
            s = burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
        if (s != BURST_OK)
            FAIL(rep, s, "rank %d call %d: %s", r, it, burst_last_error());
        if (it == 0) {
            memcpy(rs->first, out, sizeof(float) * NOUT);
            for (size_t i = 0; i < NOUT; i++)
                if (out[i] != out[i]) {
                    FAIL(rep, BURST_ERR_INTERNAL, "rank %d: output element %zu not written", r, i);
                }
        } else {
            rep->mismatches += memcmp(rs->first, out, sizeof(float) * NOUT) != 0;
        }
        rep->calls = it + 1;
        if (sample && (it + 1 == warm || it + 1 == mid || it + 1 == iters))
            take(&rep->s[it + 1 == warm ? S_WARM : it + 1 == mid ? S_MID : S_END]);
    }
out:
    burst_plan_destroy(plan);
    if (rep->st != BURST_OK || it1 == iters)
        rep->done = 1;
}

/* ---- checks (parent) ---- */

static int check_reports(const struct report *reps, int iters, const char *mode)
{
    int bad = 0;
    for (int r = 0; r < G; r++) {
        const struct report *p = &reps[r];
        const struct sample *w = &p->s[S_WARM], *m = &p->s[S_MID], *e = &p->s[S_END];
#define BAD(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "%s rank %d: ", mode, r);                                                  \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        bad++;                                                                                     \
    } while (0)
        if (!p->done || p->st != BURST_OK || p->calls != iters) {
            BAD("%d of %d calls, status %d: %s", p->calls, iters, p->st, p->msg);
            continue;
        }
        if (p->mismatches)
            BAD("%d calls gave outputs other than the first call's", p->mismatches);
        if (e->rss - w->rss > RSS_SLACK || e->rss - m->rss > RSS_SLACK / 2)
            BAD("resident memory grew: %lld -> %lld -> %lld bytes", w->rss, m->rss, e->rss);
        if (llabs(e->heap - w->heap) > HEAP_SLACK || llabs(e->heap - m->heap) > HEAP_SLACK)
            BAD("heap in use changed: %lld -> %lld -> %lld bytes", w->heap, m->heap, e->heap);
        if (w->nfd != m->nfd || w->nfd != e->nfd)
            BAD("open file descriptors %d -> %d -> %d", w->nfd, m->nfd, e->nfd);
        if (w->nshm != m->nshm || w->nshm != e->nshm)
            BAD("its /dev/shm entries %d -> %d -> %d", w->nshm, m->nshm, e->nshm);
        printf("%s rank %d: %d calls; rss %.2f -> %.2f -> %.2f MiB, heap %lld -> %lld -> %lld B, "
               "fds %d, shm %d\n",
               mode, r, p->calls, w->rss / 1048576.0, m->rss / 1048576.0, e->rss / 1048576.0,
               w->heap, m->heap, e->heap, e->nfd, e->nshm);
#undef BAD
    }
    return bad;
}

/* ---- threads ---- */

struct thr_arg {
    int it0, it1, iters;
    struct rank_state rs[G];
    struct report reps[G];
};

static void thr_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct thr_arg *a = arg;
    if (a->reps[rank].st == BURST_OK)
        soak_rank(harness_context(), comm, a->it0, a->it1, a->iters, 0, &a->rs[rank],
                  &a->reps[rank]);
}

/* Three batches of calls (to the warm-up, the middle, the end), each on a fresh local world;
 * the process is sampled between them, while no rank runs. */
static int run_threads(int iters)
{
    struct thr_arg *a = calloc(1, sizeof(*a));
    if (!a)
        return 1;
    int bad = 0;
    for (int r = 0; r < G; r++)
        bad += state_init(&a->rs[r], r) != 0;
    int warm = iters / 10, ends[NSAMPLE] = {warm, warm + (iters - warm) / 2, iters};
    a->iters = iters;
    for (int b = 0; b < NSAMPLE && !bad; b++) {
        a->it0 = b ? ends[b - 1] : 0;
        a->it1 = ends[b];
        bad += harness_run_ranks(G, 600000, thr_rank, a) != 0;
        struct sample s;
        take(&s);
        for (int r = 0; r < G; r++)
            a->reps[r].s[b] = s;
    }
    bad = bad ? bad : check_reports(a->reps, iters, "threads");
    for (int r = 0; r < G; r++)
        state_free(&a->rs[r]);
    free(a);
    return bad;
}

/* ---- rank processes ---- */

static int worker_main(char **argv)
{
    /* --worker ITERS REPORT_FD */
    int iters = atoi(argv[2]), fd = atoi(argv[3]);
    const char *rank_env = getenv("BURST_RANK");
    int rank = rank_env ? atoi(rank_env) : -1;
    if (rank < 0 || rank >= G)
        return 3;
    struct report *reps =
        mmap(NULL, G * sizeof(struct report), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (reps == MAP_FAILED)
        return 3;
    struct report *rep = &reps[rank];
    struct burst_comm *comm = NULL;
    struct burst_context *ctx = NULL;
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cpu";
    cp.num_threads = 1;
    struct rank_state rs;
    if (state_init(&rs, rank) != 0 || burst_comm_create_env(&comm) != BURST_OK ||
        burst_context_create(&cp, &ctx) != BURST_OK) {
        rep->st = BURST_ERR_INTERNAL;
        snprintf(rep->msg, sizeof(rep->msg), "rank %d: set-up: %s", rank, burst_last_error());
        rep->done = 1;
    } else {
        soak_rank(ctx, comm, 0, iters, iters, 1, &rs, rep);
    }
    state_free(&rs);
    burst_context_destroy(ctx);
    burst_comm_destroy(comm);
    munmap(reps, G * sizeof(struct report));
    return 0;
}

static int run_processes(const char *prov, int iters, const char *self)
{
    /* skip where libfabric or the provider is missing: a one-rank comm tells */
    const int probe = harness_fabric_probe(prov);
    if (probe != 0)
        return probe;

    struct burst_rendezvous *rv = NULL;
    int fds_before = count_dir("/proc/self/fd", NULL);
    int fd = memfd_create("burst-test-soak", 0);
    struct report *reps = MAP_FAILED;
    if (fd < 0 || ftruncate(fd, G * sizeof(struct report)) != 0 ||
        (reps = mmap(NULL, G * sizeof(struct report), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
            MAP_FAILED ||
        burst_rendezvous_create(NULL, 0, G, NULL, &rv) != BURST_OK) {
        fprintf(stderr, "set-up failed: %s\n", burst_last_error());
        return 1;
    }
    pid_t pid[G];
    char its[16], fds[16];
    snprintf(its, sizeof(its), "%d", iters);
    snprintf(fds, sizeof(fds), "%d", fd);
    for (int r = 0; r < G; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            char rs[16], gs[16];
            snprintf(rs, sizeof(rs), "%d", r);
            snprintf(gs, sizeof(gs), "%d", G);
            setenv("BURST_RANK", rs, 1);
            setenv("BURST_SIZE", gs, 1);
            setenv("BURST_RENDEZVOUS", burst_rendezvous_address(rv), 1);
            setenv("BURST_JOB_KEY", burst_rendezvous_key(rv), 1);
            setenv("BURST_FABRIC", prov, 1);
            if (strcmp(prov, "tcp") == 0)
                setenv("BURST_IFACE", "127.0.0.1", 1);
            setenv("BURST_TIMEOUT_MS", "30000", 1);
            char *argv[] = {(char *)self, "--worker", its, fds, NULL};
            execv(self, argv);
            _exit(127);
        }
    }
    int bad = 0;
    for (int r = 0; r < G; r++) {
        int status = 0;
        if (pid[r] <= 0 || waitpid(pid[r], &status, 0) != pid[r] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "%s rank %d: process failed (status 0x%x)\n", prov, r, status);
            bad++;
            if (WIFSIGNALED(status))
                burst_rendezvous_report_failure(rv, r, "killed by a signal");
        }
    }
    bad += check_reports(reps, iters, prov);
    burst_rendezvous_destroy(rv);
    munmap(reps, G * sizeof(struct report));
    close(fd);
    for (int r = 0; r < G; r++) {
        char pre[24];
        snprintf(pre, sizeof(pre), "%d:", (int)pid[r]);
        int left = count_dir("/dev/shm", pre);
        if (left) {
            fprintf(stderr, "%s rank %d: %d /dev/shm entries left behind\n", prov, r, left);
            bad++;
        }
    }
    if (count_dir("/proc/self/fd", NULL) != fds_before) {
        fprintf(stderr, "%s: the parent's file descriptors changed\n", prov);
        bad++;
    }
    return bad;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--worker") == 0)
        return worker_main(argv);
    int iters = argc > 2 ? atoi(argv[2]) : 1000;
    if (argc < 2 || iters < 10 ||
        (strcmp(argv[1], "threads") && strcmp(argv[1], "shm") && strcmp(argv[1], "tcp"))) {
        fprintf(stderr, "usage: %s threads|shm|tcp [ITERS >= 10]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    printf("seed %llu (BURST_TEST_SEED), %d calls\n", (unsigned long long)harness_seed(), iters);
    double t0 = harness_now_ms();
    int rc;
    if (strcmp(argv[1], "threads") == 0) {
        rc = run_threads(iters);
    } else {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
            return 2;
        self[n] = '\0';
        rc = run_processes(argv[1], iters, self);
        if (rc == SKIP)
            return SKIP;
    }
    printf("%s: %s in %.1f s\n", argv[1], rc ? "FAILED" : "ok", (harness_now_ms() - t0) / 1e3);
    return rc ? 1 : 0;
}
