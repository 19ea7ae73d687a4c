/*
 * tools/burstrun.c - run one distributed attention job and report time, TFLOP/s, traffic, memory
 * and (with --check) the error against the fp64 reference. See usage() for everything.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "burst/burst.h"
#include "job.h"
#include "job_size.h"
#include "launch.h"
#include "launch_mpi.h"
#include "launch_pmix.h"
#include "pingpong.h"
#include "probe_net.h"
#include "sweep.h"
#include "burstrun_meta.h"

#define EXIT_CHECK_FAILED 1
#define EXIT_USAGE 2
#define EXIT_RUNTIME 3

static const char *const prog = "burstrun";

static void usage_output(FILE *f);

/* --help: every flag and what the report means. */
static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: burstrun [options]\n"
        "\n"
        "Run exact distributed attention (BurstAttention) over G ranks, time it, and optionally\n"
        "check it against a plain fp64 reference. Ranks are processes on this host joined\n"
        "through libfabric (default; shm unless --fabric says otherwise), or with --threads\n"
        "threads of this process joined by an in-process ring. Both compute the same global\n"
        "problem from the seed. With no arguments (or only --json, --csv, --verbose, --hash,\n"
        "--seed, which change the output, not the job) it runs a small self-checking causal job:\n"
        "  burstrun -n 4 --seq 2048 --heads 4 --head-dim 64 --causal --layout zigzag --check\n"
        "\n"
        "problem:\n"
        "  -n, --ranks G          ranks in the ring (default 4)\n"
        "  --seq N                global sequence length (default 2048); a list a,b,c or a\n"
        "                         range start:end:xF (x2: doubling) or start:end:+S sweeps it\n"
        "  --batch B              batch size (default 1)\n"
        "  --heads H              query heads Hq (default 4)\n"
        "  --kv-heads H           key/value heads Hkv, dividing Hq (default: Hq)\n"
        "  --ranks-per-node L     two-level ring: L consecutive ranks per node, dividing G\n"
        "                         (default 0: the flat ring)\n"
        "  --head-dim D           head dimension, a multiple of 8 in 8..256 (default 64); a\n"
        "                         list 64,128 sweeps it\n"
        "  --dtype T              fp32 | fp16 | bf16 (default fp32); a list fp16,bf16 sweeps it\n"
        "                         A sweep runs one job per point (dtypes, then head dims, then\n"
        "                         lengths) and prints one row per job as it finishes\n"
        "  --causal               causal mask (default off when any argument is given)\n"
        "  --layout L             natural | zigzag | striped (default zigzag)\n"
        "  --window L,R           sliding window in global positions: key j is allowed for\n"
        "                         query i iff i-L <= j <= i+R; -1 = unbounded (default -1,-1)\n"
        "  --bwd P                backward pattern burst | ring | auto (default burst)\n"
        "  --docs L1,L2,...       packed documents of these lengths (>= 1, summing to --seq):\n"
        "                         a query attends only keys of its own document; random:K =\n"
        "                         K documents of random lengths drawn from the seed (default:\n"
        "                         one document)\n"
        "  --softcap C            logit soft-capping: scores become C tanh(score / C), C > 0\n"
        "                         (default off)\n"
        "  --sinks                attention sinks: one logit per query head, U(-1, 5) from\n"
        "                         the seed; --check then also checks the sinks' gradient\n"
        "inference (the sharded key/value cache):\n"
        "  --prefill N            an inference job: each of --batch sequences gets a prompt of\n"
        "                         N tokens (causal ring prefill into the cache), then\n"
        "  --decode STEPS         decode calls, each attending the new tokens to every rank's\n"
        "                         shard of the cache and merging the partial results; reports\n"
        "                         prefill time and TFLOP/s, decode step latency (median, p99;\n"
        "                         local attention and merge apart) and tokens/s; --check\n"
        "                         compares sampled rows of every step with the fp64 reference\n"
        "  --spec T               new tokens per sequence and decode call (speculative\n"
        "                         decoding; default 1)\n");
    fprintf(
        f,
        "run:\n"
        "  --backend NAME         cpu | vulkan | cuda | auto, as built (default auto;\n"
        "                         BURST_BACKEND overrides auto)\n"
        "  --backends A,B,...     one backend per rank, in rank order (a heterogeneous ring,\n"
        "                         e.g. cuda,vulkan,cpu); a shorter list repeats (cpu,vulkan\n"
        "                         with -n 4: cpu,vulkan,cpu,vulkan), a longer one is refused\n"
        "  --weights W0,W1,...    shards sized by weight: rank i gets about N*Wi/sum(W) tokens\n"
        "                         (one weight > 0 per rank); auto = by each rank's speed,\n"
        "                         measured by a short local attention step on its own backend\n"
        "                         (the JSON then has rank_speeds and ideal_fwd_ms = the work\n"
        "                         over the sum of the speeds); default: equal shards\n"
        "  --device D[,D...]      GPU backends: device index or name substring, or one per rank\n"
        "                         (cycling: --device 0,1 puts ranks 0,2,.. on GPU 0 and 1,3,..\n"
        "                         on GPU 1); default BURST_DEVICE, else device 0\n"
        "  --threads              ranks are threads of this process (in-process ring) instead\n"
        "                         of processes\n"
        "  --fabric F             auto | shm | tcp | verbs | efa (default shm; auto = shm on\n"
        "                         one host); rank processes only\n"
        "  --hosts LIST           run across hosts through mpirun: \"h1:4,h2:4\" (slots per host)\n"
        "  --hostfile F           the same from an Open MPI hostfile (\"host slots=N\" lines)\n"
        "  --bind-to B            none | core | numa: the CPUs of each rank process\n"
        "                         (default none): core = a block of about cores / G of the\n"
        "                         CPUs burstrun may use, numa = NUMA node (rank mod nodes);\n"
        "                         each rank's CPUs are reported on stderr; under --hosts\n"
        "                         passed to mpirun (with --report-bindings)\n"
        "  --mpirun-args \"ARGS\"   more arguments for mpirun under --hosts / --hostfile\n"
        "                         (split at spaces, no quoting)\n"
        "  --launcher L           auto | mpi | pmix: where the ranks of --hosts / --hostfile\n"
        "                         take their rank, size and fabric-address exchange: mpi =\n"
        "                         MPI_COMM_WORLD, pmix = the launcher's PMIx server (PMIx_Get,\n"
        "                         PMIx_Fence); auto = mpi (default)\n"
        "  --iface NAME           network interface or address for tcp / verbs (tcp default:\n"
        "                         127.0.0.1)\n"
        "  --timeout S            longest wait for a peer, seconds, 1..86400 (default:\n"
        "                         BURST_TIMEOUT_MS or 120)\n"
        "  --num-threads T        compute threads: of the shared context with --threads\n"
        "                         (default all cores), of each rank process otherwise\n"
        "                         (default cores / G, at least 1); or BURST_NUM_THREADS.\n"
        "                         A list T0,T1,... gives each rank its own (repeating like\n"
        "                         --backends; with --threads each rank then has its own\n"
        "                         context): ranks of unequal speed on one machine\n"
        "  --deterministic        plan.deterministic = 1: bitwise-reproducible results\n"
        "  --workspace W          plan.workspace_limit: most library scratch per rank, in MiB\n"
        "                         (the ring runs once per group of heads to stay within it);\n"
        "                         'auto' (default: tensors + scratch within 1.2x of the\n"
        "                         tensors + two travelling blocks, at least 1 GiB)\n"
        "                         or 'unlimited' (one ring per call, the most memory)\n"
        "  --iters K              timed iterations, the median is reported (default 5)\n"
        "  --warmup W             untimed iterations first (default 1)\n"
        "  --fwd-only             run the forward only\n"
        "  --seed S               seed of the random inputs (default: from the clock, printed)\n"
        "check:\n");
    usage_output(f);
}

/* usage(): the check and output flags, and the notes. */
static void usage_output(FILE *f)
{
    fprintf(
        f,
        "  --check                compare with the fp64 reference of tools/ref.c after the\n"
        "                         timed runs: O and lse of every row and dQ, dK, dV, when the\n"
        "                         reference costs B*N^2*Hq*d <= %.0e multiply-adds; above that\n"
        "                         --check is refused (exit 2): use --check-fwd-only (with\n"
        "                         --fwd-only, --check checks sampled rows at any size)\n"
        "  --check-fwd-only       compare O and lse on %d sampled rows (spread over the\n"
        "                         sequence, plus the first and last row of every rank), at any\n"
        "                         size; the backward is not checked\n"
        "                         Error = max |burst - ref| / max |ref| per tensor (lse: divided\n"
        "                         by max(max |ref|, 1)); passes when every tensor is within\n"
        "                         fp32 1e-4, fp16 1.95e-3, bf16 1.56e-2. The reference sees the\n"
        "                         inputs already rounded to the dtype; outputs and gradients are\n"
        "                         rounded once to the dtype (up to 1 unit of roundoff u: fp16\n"
        "                         2^-11, bf16 2^-8), so the half-type bounds are 4 u\n"
        "output:\n"
        "  --json                 print one JSON object on stdout instead of the table:\n"
        "                         schema_version, timestamp, host, commit, features, devices,\n"
        "                         the job's members (times: median, _min, _max), or a sweep's\n"
        "                         in \"results\"; on a failure an \"error\" member with the\n"
        "                         exit code and message (usage errors too)\n"
        "  --csv FILE             also write one CSV row per job to FILE (- = stdout), after a\n"
        "                         line of column names\n"
        "  --hash                 add output_hash: FNV-1a 64 of the bytes of O, lse, dQ, dK, dV\n"
        "                         (equal hashes = bitwise equal results, e.g. --threads against\n"
        "                         processes with --deterministic)\n"
        "  --verbose              per-rank compute / wait / total time of each phase, and the\n"
        "                         launch (rendezvous, fabric) on stderr\n"
        "  --info                 print every BURST_* setting with its current value and exit\n"
        "                         (with --json: one JSON object)\n"
        "  --probe                list every backend's devices, capabilities and chosen tiles,\n"
        "                         and the transports: libfabric's version and the providers\n"
        "                         that serve burst, the network interfaces, MPI (built with,\n"
        "                         mpirun, library); then exit (with --json: one JSON object)\n"
        "  --pingpong             instead of a job: round trips between 2 rank processes over\n"
        "                         the transport (--fabric, --iface, --timeout; --iters: round\n"
        "                         trips per size, default 256 MiB / size within 10..10000),\n"
        "                         64 B to 4 MiB, with fi_pingpong's columns (bytes, #sent, #ack,\n"
        "                         total, time, MB/sec, usec/xfer, Mxfers/sec); --json: one object\n"
        "  -h, --help             this text\n"
        "  -V, --version          versions of burstrun and of the loaded library, the commit\n"
        "                         and the optional parts each was built with\n",
        JOB_BWD_CHECK_LIMIT, JOB_FWD_SAMPLE_ROWS);
    fprintf(
        f,
        "\n"
        "Reported: forward and backward wall time (median over --iters; with rank processes an\n"
        "iteration's time is the slowest rank's call), TFLOP/s by the field's convention with\n"
        "the exact count of allowed (query, key) pairs: forward = 4*B*Hq*d*pairs (pairs = N^2\n"
        "without mask, ~N^2/2 causal), backward = 2.5x, fwd+bwd = 3.5x forward; \"TFLOP/s\" is\n"
        "the whole ring, \"/rank\" divides by G. Bytes and messages sent per rank (maximum over\n"
        "ranks, from burst_plan_stats), library scratch per rank, and the peak resident memory\n"
        "(getrusage; of the largest rank process with processes) after the timed runs and before\n"
        "the check, which includes the global test tensors.\n"
        "\"compute\" and \"wait\" per step: burst_plan_stats compute_s and wait_s of the last "
        "call,\n"
        "divided by its ring steps, mean over ranks. \"overlap\" = sum compute_s / (sum compute_s\n"
        "+ sum wait_s) over ranks: the fraction of communication hidden behind compute (a step\n"
        "whose transfer, posted as its compute starts, outlasts a compute c by w exposes w of\n"
        "c + w); 1 = fully hidden; \"-\" (null) without communication.\n"
        "\"cpu share\" = cpu time / (wall time x compute threads) over the timed runs, summed\n"
        "over rank processes: well below 100%% means other processes took the cores (or threads\n"
        "idled); with --threads the rank threads compute too, so it may exceed 100%%.\n"
        "\n"
        "A rank process that dies (or Ctrl-C) stops the whole job: the others are told through\n"
        "the rendezvous, get %d ms to exit, then SIGKILL; burstrun names the rank and how it\n"
        "died. Rank output is printed with a \"[rank i] \" prefix; a progress line shows on a\n"
        "terminal's stderr for jobs longer than 2 s.\n"
        "\n"
        "Across hosts: --hosts h1:4,h2:4 (Open MPI's --host syntax) or --hostfile F (Open MPI\n"
        "hostfile: \"host slots=N\" lines) runs the ranks through mpirun; -n defaults to the slot\n"
        "count and --fabric to auto (shm inside a host, the network between hosts). The hosts\n"
        "need the same burstrun path and libburst, Open MPI (passwordless ssh from here), and a\n"
        "network fabric; rank 0 prints the job's table. BURST_* settings travel with the job.\n"
        "\n"
        "Exit status: 0 all requested checks passed (or none requested), 1 a check failed,\n"
        "2 usage error (bad flag or value, or parameters the library rejects), 3 runtime\n"
        "failure (e.g. a rank died), 128 + signal when interrupted (130 for Ctrl-C).\n",
        LAUNCH_GRACE_MS);
}

/* --info: the versions, every BURST_* setting with its current value (the library's table,
 * runtime/settings.c) and what backend "auto" resolves to; --info --json: one JSON object. */
static void info(int json)
{
    char *report;
    burst_status_t st = burst_settings_report(json, &report);
    if (st != BURST_OK) {
        fprintf(stderr, "%s: --info: %s: %s\n", prog, burst_status_str(st), burst_last_error());
        exit(EXIT_RUNTIME);
    }
    struct burst_context *ctx = NULL;
    burst_status_t cst = burst_context_create(NULL, &ctx);
    if (json) {
        printf("{\"burstrun\": \"%s\", \"library\": \"%s\", \"settings\": %s, \"auto\": ",
               BURST_VERSION_STRING, burst_version_string(), report);
        if (cst == BURST_OK)
            printf("{\"backend\": \"%s\", \"threads\": %d}}\n", burst_context_backend(ctx),
                   burst_context_num_threads(ctx));
        else
            printf("{\"error\": \"%s\"}}\n", burst_status_str(cst));
    } else {
        printf("burstrun %s, library %s\n", BURST_VERSION_STRING, burst_version_string());
        printf("settings (environment; each is read when a context or communicator is created):\n"
               "  name                    scope    type / range               doc\n%s",
               report);
        if (cst == BURST_OK)
            printf("backend \"auto\" resolves to: %s, %d compute threads\n",
                   burst_context_backend(ctx), burst_context_num_threads(ctx));
        else
            printf("backend \"auto\": %s: %s\n", burst_status_str(cst), burst_last_error());
    }
    if (cst == BURST_OK)
        burst_context_destroy(ctx);
    burst_free(report);
}

/* --json is among the arguments: a usage error is also one JSON object on stdout. */
static int g_json_errors;

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s (see %s --help)\n", prog, msg, prog);
    if (g_json_errors) {
        printf("{");
        meta_json_fields(stdout, 0);
        printf(", \"error\": {\"exit_code\": %d, \"message\": ", EXIT_USAGE);
        meta_json_str(stdout, msg);
        printf("}}\n");
        fflush(stdout);
    }
    exit(EXIT_USAGE);
}

static int64_t parse_int(const char *flag, const char *val, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(val, &end, 10);
    if (errno || end == val || *end || x < lo || x > hi) {
        fprintf(stderr,
                "%s: bad value for %s: '%s' (expected an integer in [%lld, %lld]) (see %s "
                "--help)\n",
                prog, flag, val, (long long)lo, (long long)hi, prog);
        exit(EXIT_USAGE);
    }
    return (int64_t)x;
}

static int parse_choice(const char *flag, const char *val, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(val, names[i]) == 0)
            return i;
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, names[i], sizeof(list) - strlen(list) - 1);
        if (i + 1 < n)
            strncat(list, " | ", sizeof(list) - strlen(list) - 1);
    }
    fprintf(stderr, "%s: bad value for %s: '%s' (expected %s) (see %s --help)\n", prog, flag, val,
            list, prog);
    exit(EXIT_USAGE);
}

/* --launcher: where ranks started by mpirun take their rank, size and bootstrap exchange */
enum launcher_kind {
    LAUNCHER_AUTO,
    LAUNCHER_MPI,
    LAUNCHER_PMIX
};
static const char *const launcher_names[] = {"auto", "mpi", "pmix"};
/* this process is a rank started by mpirun (--mpi-rank-worker): its arguments lack --hosts */
static int in_mpi_worker;
/* ...and how its ranks joined (rank_launch_init), for the report */
static char g_launch_used[128];

struct opts {
    struct job_params jp;
    const char *backend; /* --backend NAME or --backends LIST: one entry per rank, cycling */
    int num_threads;     /* --num-threads: the first entry */
    const char *num_threads_list; /* --num-threads as given ("0" = default) */
    const char *device_list;      /* --device as given ("" = BURST_DEVICE or device 0) */
    int backends_given;
    int check, check_fwd_only;
    int json;
    int seed_given;
    int default_job;
    int threads; /* --threads: ranks as threads */
    int verbose;
    int probe;                    /* --probe: report the backends and exit */
    int info;                     /* --info: report the settings and exit */
    const char *hosts, *hostfile; /* --hosts / --hostfile: ranks through mpirun */
    int mpi_worker;               /* this process is a rank started by mpirun */
    int host_slots;               /* slots they give */
    int ranks_given, fabric_given;
    const char *fabric, *iface;
    int timeout_s;
    int pingpong; /* --pingpong: round trips between two rank processes */
    int iters_given;
    int bind; /* --bind-to: enum launch_bind */
    int bind_given;
    const char *mpirun_args; /* --mpirun-args: passed to mpirun as they are, split at spaces */
    int launcher;            /* --launcher: enum launcher_kind */
    int launcher_given;
    /* sweeps (tools/sweep.h): the values of --seq, --dtype and --head-dim, one job per point */
    int64_t seqs[SWEEP_MAX], dtypes[SWEEP_MAX], head_dims[SWEEP_MAX];
    int nseq, ndtype, nhd;
    const char *csv; /* --csv FILE: one row per job */
    FILE *csv_f;
    struct job_kill kill; /* hidden --test-kill-* */
    int kill_step;        /* hidden --test-kill-step: ring step (-1: after the last) */
};

static const char *const fabric_names[] = {"auto", "shm", "tcp", "verbs", "efa"};
static const char *const phase_names[] = {"fwd", "bwd"};

static const char *const dtype_names[] = {"fp32", "fp16", "bf16"};
static const char *const layout_names[] = {"natural", "zigzag", "striped"};
static const char *const bwd_names[] = {"burst", "ring", "auto"};

/* --hosts "h1:4,h2,h3:2": the slot count (an entry without ":N" gives 1). */
static int parse_hosts(const char *v)
{
    long total = 0;
    const char *p = v;
    if (!*v)
        die_usage("bad value for --hosts: '' (expected host:slots,host:slots,...)");
    while (*p) {
        size_t n = strcspn(p, ",");
        const char *colon = memchr(p, ':', n);
        long slots = 1;
        if (colon == p || n == 0)
            die_usage("bad value for --hosts: '%s' (empty host name)", v);
        if (colon) {
            char *end;
            slots = strtol(colon + 1, &end, 10);
            if (end != p + n || slots < 1 || slots > 65536)
                die_usage("bad value for --hosts: '%s' (slots of '%.*s' must be 1..65536)", v,
                          (int)n, p);
        }
        total += slots;
        if (total > 65536)
            die_usage("bad value for --hosts: '%s' (more than 65536 slots)", v);
        p += n + (p[n] == ',');
    }
    return (int)total;
}

/* Largest hostfile burstrun reads (a hostfile lists hosts: far below this). */
#define HOSTFILE_MAX_BYTES (1 << 20)

/* The whole of hostfile `path`, NUL-terminated: a regular file of at most HOSTFILE_MAX_BYTES,
 * opened without blocking (a FIFO or a device is refused, never read). */
static char *read_hostfile(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat sb;
    if (fd < 0)
        die_usage("--hostfile %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > HOSTFILE_MAX_BYTES) {
        close(fd);
        die_usage("--hostfile %s: not a regular file of at most %d bytes", path,
                  HOSTFILE_MAX_BYTES);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    ssize_t n = buf ? read(fd, buf, (size_t)sb.st_size + 1) : -1;
    close(fd);
    if (n < 0 || n > sb.st_size) {
        free(buf);
        die_usage("--hostfile %s: %s", path, n < 0 ? strerror(errno) : "it grew while read");
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', (size_t)n)) {
        free(buf);
        die_usage("--hostfile %s: a NUL byte (not a text file)", path);
    }
    return buf;
}

/* The N of "KEY=N", "KEY =N", "KEY= N" or "KEY = N" (Open MPI's syntax) from `rest`, the
 * token's text after KEY, and the next tokens of strtok's line; -1 unless N is in 1..65536. */
static long hostfile_value(const char *rest)
{
    const char *v = *rest ? rest : strtok(NULL, " \t");
    if (!v || *v != '=')
        return -1;
    v = v[1] ? v + 1 : strtok(NULL, " \t");
    if (!v)
        return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return !errno && end != v && !*end && x >= 1 && x <= 65536 ? x : -1;
}

/* The slots of one line: "host [slots=N] [max_slots=M]"; HOSTFILE_CORES without slots= (Open
 * MPI then gives the host its core count); 0 for a blank or comment line; -1 with the message
 * in msg when malformed. */
#define HOSTFILE_CORES 65537
static long hostfile_line(char *line, char *msg, size_t cap)
{
    line[strcspn(line, "#\r")] = '\0';
    char *host = strtok(line, " \t");
    if (!host)
        return 0;
    long slots = HOSTFILE_CORES;
    for (char *t = strtok(NULL, " \t"); t; t = strtok(NULL, " \t")) {
        size_t key = !strncmp(t, "slots", 5) ? 5 : !strncmp(t, "max_slots", 9) ? 9 : 0;
        if (!key || (t[key] && t[key] != '=')) {
            snprintf(msg, cap, "'%.64s' after host '%.64s' (expected slots=N or max_slots=N)", t,
                     host);
            return -1;
        }
        long v = hostfile_value(t + key);
        if (v < 0) {
            snprintf(msg, cap, "bad %.*s value after host '%.64s' (expected =N, N in 1..65536)",
                     (int)key, t, host);
            return -1;
        }
        slots = key == 5 ? v : slots;
    }
    return slots;
}

/* An Open MPI hostfile: one "host [slots=N] [max_slots=M]" per line, '#' comments, a host
 * listed twice adds its slots: the slot count, or -1 when a host gives no slots= (its core
 * count, unknown here: -n must be given). */
static int parse_hostfile(const char *path)
{
    char *buf = read_hostfile(path), msg[256];
    long total = 0;
    int lineno = 0, cores = 0;
    for (char *line = buf, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        long slots = hostfile_line(line, msg, sizeof(msg));
        if (slots < 0) {
            free(buf);
            die_usage("--hostfile %s:%d: %s", path, lineno, msg);
        }
        cores |= slots == HOSTFILE_CORES;
        total += slots == HOSTFILE_CORES ? 0 : slots;
        if (total > 65536) {
            free(buf);
            die_usage("--hostfile %s: more than 65536 slots", path);
        }
    }
    free(buf);
    if (total == 0 && !cores)
        die_usage("--hostfile %s: no hosts in it", path);
    return cores ? -1 : (int)total;
}

/* The settings that every rank reads (contexts, the cpu backend, communicators, libfabric):
 * the library's rule (burst_settings_check), so that a malformed one is a usage error naming it
 * before any rank starts. Those burstrun sets for its ranks (BURST_RANK, BURST_SIZE,
 * BURST_BOOTSTRAP, ...) are replaced, not read. */
static void check_env(void)
{
    if (burst_settings_check() != BURST_OK)
        die_usage("in the environment: %s", burst_last_error());
}

/* ---- flags: one table, one handler per flag that takes more than a yes ---- */

/* What parsing collects besides the options themselves, checked once every flag is read. */
struct parse_state {
    struct opts *o;
    struct job_params *p;
    int fabric_given, kill_step_given, weights_count, backend_given;
    int job_flags; /* flags given other than those of the output alone (output_flag) */
};

typedef void (*opt_handler)(struct parse_state *s, const char *name, const char *val);

static void opt_help(struct parse_state *s, const char *name, const char *val)
{
    usage(stdout);
    exit(0);
}

static void opt_version(struct parse_state *s, const char *name, const char *val)
{
    printf("burstrun %s (library %s)\n", BURST_VERSION_STRING, burst_version_string());
    printf("commit   %s\n", meta_commit());
    printf("library features: %s\n", burst_build_features());
#ifdef BURST_HAVE_MPI
    printf("burstrun features: mpi (--hosts, --hostfile)%s\n",
           launch_pmix_available() ? " pmix (--launcher pmix)" : "");
#else
    printf("burstrun features: none (no mpi: --hosts, --hostfile refused)\n");
#endif
    exit(0);
}

static void opt_ranks(struct parse_state *s, const char *name, const char *val)
{
    s->p->ranks = (int)parse_int(name, val, 1, 65536);
    s->o->ranks_given = 1;
}

static void opt_hosts(struct parse_state *s, const char *name, const char *val)
{
    s->o->hosts = val;
    s->o->host_slots = parse_hosts(val);
}

static void opt_hostfile(struct parse_state *s, const char *name, const char *val)
{
    s->o->hostfile = val;
    s->o->host_slots = parse_hostfile(val);
}

/* A flag's list (or range: ranges) of integers in lo..hi into out; its count. */
static int parse_list(const char *name, const char *val, int64_t lo, int64_t hi, int ranges,
                      int64_t *out)
{
    char msg[160];
    int n = sweep_parse_ints(val, lo, hi, ranges, out, msg, sizeof(msg));
    if (n < 0)
        die_usage("bad value for %s: '%.100s' (%s; expected %s)", name, val, msg,
                  ranges ? "N, a list a,b,c or a range start:end:xF or start:end:+S"
                         : "N or a list "
                           "a,b,c");
    return n;
}

static void opt_seq(struct parse_state *s, const char *name, const char *val)
{
    s->o->nseq = parse_list(name, val, 1, INT64_C(1) << 40, 1, s->o->seqs);
    s->p->seq_len = s->o->seqs[0];
}

static void opt_batch(struct parse_state *s, const char *name, const char *val)
{
    s->p->batch = parse_int(name, val, 1, INT64_C(1) << 30);
}

static void opt_heads(struct parse_state *s, const char *name, const char *val)
{
    s->p->q_heads = (int)parse_int(name, val, 1, 1 << 20);
}

static void opt_kv_heads(struct parse_state *s, const char *name, const char *val)
{
    s->p->kv_heads = (int)parse_int(name, val, 1, 1 << 20);
}

static void opt_head_dim(struct parse_state *s, const char *name, const char *val)
{
    s->o->nhd = parse_list(name, val, 1, 1 << 20, 0, s->o->head_dims);
    s->p->head_dim = (int)s->o->head_dims[0];
}

static void opt_ranks_per_node(struct parse_state *s, const char *name, const char *val)
{
    s->p->ranks_per_node = (int)parse_int(name, val, 0, 65536);
}

static void opt_workspace(struct parse_state *s, const char *name, const char *val)
{
    if (!strcmp(val, "auto"))
        s->p->workspace_limit = 0;
    else if (!strcmp(val, "unlimited"))
        s->p->workspace_limit = UINT64_MAX;
    else if (strspn(val, "0123456789") == strlen(val) && val[0] != '0')
        s->p->workspace_limit = (uint64_t)parse_int(name, val, 1, INT64_C(1) << 40) << 20;
    else
        die_usage("bad value for --workspace: '%s' (expected auto, unlimited or a number of MiB "
                  ">= 1)",
                  val);
}

static void opt_dtype(struct parse_state *s, const char *name, const char *val)
{
    int n = job_list_count(val);
    if (n > 3 || !*val)
        die_usage("bad value for --dtype: '%.64s' (expected fp32 | fp16 | bf16, or a list of them)",
                  val);
    for (int e = 0; e < n; e++) {
        char ent[16];
        job_list_entry(val, e, ent, sizeof(ent));
        s->o->dtypes[e] = parse_choice(name, ent, dtype_names, 3);
    }
    s->o->ndtype = n;
    s->p->dtype = (burst_dtype_t)s->o->dtypes[0];
}

static void opt_csv(struct parse_state *s, const char *name, const char *val)
{
    if (!*val)
        die_usage("bad value for --csv: '' (expected a file name, or - for stdout)");
    s->o->csv = val;
}

static void opt_layout(struct parse_state *s, const char *name, const char *val)
{
    s->p->layout = (burst_layout_t)parse_choice(name, val, layout_names, 3);
}

static void opt_bwd(struct parse_state *s, const char *name, const char *val)
{
    s->p->bwd = (burst_bwd_pattern_t)parse_choice(name, val, bwd_names, 3);
}

static void opt_window(struct parse_state *s, const char *name, const char *val)
{
    const char *comma = strchr(val, ',');
    char left[64];
    if (!comma || (size_t)(comma - val) >= sizeof(left))
        die_usage("bad value for --window: '%s' (expected L,R with integers >= -1, -1 = "
                  "unbounded)",
                  val);
    memcpy(left, val, (size_t)(comma - val));
    left[comma - val] = 0;
    s->p->window_left = parse_int("--window (left)", left, -1, INT64_C(1) << 40);
    s->p->window_right = parse_int("--window (right)", comma + 1, -1, INT64_C(1) << 40);
}

static void opt_iters(struct parse_state *s, const char *name, const char *val)
{
    s->p->iters = (int)parse_int(name, val, 1, 1000000);
    s->o->iters_given = 1;
}

static void opt_warmup(struct parse_state *s, const char *name, const char *val)
{
    s->p->warmup = (int)parse_int(name, val, 0, 1000000);
}

static void opt_seed(struct parse_state *s, const char *name, const char *val)
{
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(val, &end, 0);
    if (errno || end == val || *end || val[0] == '-')
        die_usage("bad value for --seed: '%s' (expected an unsigned integer)", val);
    s->p->seed = (uint64_t)seed;
    s->o->seed_given = 1;
}

static void opt_backend(struct parse_state *s, const char *name, const char *val)
{
    if (s->o->backends_given)
        die_usage("--backend and --backends exclude each other");
    if (!*val)
        die_usage("bad value for --backend: '%s' (expected cpu | vulkan | cuda | auto)", val);
    s->o->backend = val;
    s->backend_given = 1;
}

static void opt_device(struct parse_state *s, const char *name, const char *val)
{
    int n = job_list_count(val);
    if (!*val || n > JOB_MAX_LIST || strlen(val) >= 500)
        die_usage("bad value for --device: '%s' (expected an index or a name, or one per rank "
                  "separated by commas, at most %d)",
                  val, JOB_MAX_LIST);
    for (int e = 0; e < n; e++) {
        char ent[64];
        job_list_entry(val, e, ent, sizeof(ent));
        if (!ent[0])
            die_usage("bad value for --device: '%s' (entry %d is empty)", val, e);
    }
    s->o->device_list = val;
}

static void opt_num_threads(struct parse_state *s, const char *name, const char *val)
{
    int n = job_list_count(val);
    if (n > JOB_MAX_LIST || strlen(val) >= 500)
        die_usage("bad value for --num-threads: more than %d entries or 500 characters",
                  JOB_MAX_LIST);
    for (int e = 0; e < n; e++) {
        char ent[32];
        job_list_entry(val, e, ent, sizeof(ent));
        int t = (int)parse_int(name, ent, 0, 1 << 16);
        if (e == 0)
            s->o->num_threads = t;
    }
    s->o->num_threads_list = val;
}

static void opt_backends(struct parse_state *s, const char *name, const char *val)
{
    int n = job_list_count(val);
    if (n > JOB_MAX_LIST || strlen(val) >= 500)
        die_usage("bad value for --backends: '%.40s...' (at most %d entries, 500 characters)", val,
                  JOB_MAX_LIST);
    for (int e = 0; e < n; e++) {
        char ent[64];
        job_list_entry(val, e, ent, sizeof(ent));
        if (strcmp(ent, "cpu") && strcmp(ent, "vulkan") && strcmp(ent, "cuda") &&
            strcmp(ent, "auto"))
            die_usage("bad value for --backends: entry %d is '%s' (expected cpu | vulkan | cuda "
                      "| auto)",
                      e, ent);
    }
    if (s->backend_given)
        die_usage("--backend and --backends exclude each other");
    s->o->backend = val;
    s->o->backends_given = 1;
}

static void opt_weights(struct parse_state *s, const char *name, const char *val)
{
    if (!strcmp(val, "auto")) {
        s->p->weights_mode = JOB_WEIGHTS_MEASURED;
        return;
    }
    int n = job_list_count(val);
    if (n > JOB_MAX_LIST)
        die_usage("bad value for --weights: more than %d entries", JOB_MAX_LIST);
    for (int e = 0; e < n; e++) {
        char ent[64], *end;
        job_list_entry(val, e, ent, sizeof(ent));
        errno = 0;
        double w = strtod(ent, &end);
        if (errno || end == ent || *end || !(w > 0.0) || w > 1e12)
            die_usage("bad value for --weights: entry %d is '%s' (expected a number > 0 and <= "
                      "1e12, or auto)",
                      e, ent);
        s->p->weights[e] = w;
    }
    s->p->weights_mode = JOB_WEIGHTS_GIVEN;
    s->weights_count = n; /* checked against -n once every flag is read */
}

/* --docs L1,L2,... | random:K (tools/job_docs.c); the lengths meet --seq in check_problem */
static void opt_docs(struct parse_state *s, const char *name, const char *val)
{
    char msg[256];
    (void)name;
    if (job_docs_parse(val, s->p, msg, sizeof(msg)) != 0)
        die_usage("%s", msg);
}

static void opt_test_mismatch(struct parse_state *s, const char *name, const char *val)
{
    char field[16];
    int rk = -1;
    if (sscanf(val, "%d:%15s", &rk, field) != 2 || rk < 0 || rk > 65535 ||
        (strcmp(field, "weights") && strcmp(field, "head_dim")))
        die_usage("bad value for --test-mismatch: '%s' (expected RANK:weights or RANK:head_dim)",
                  val);
    s->p->mismatch_rank = rk;
    snprintf(s->p->mismatch_field, sizeof(s->p->mismatch_field), "%s", field);
}

static void opt_fabric(struct parse_state *s, const char *name, const char *val)
{
    s->o->fabric = fabric_names[parse_choice(name, val, fabric_names, 5)];
    s->fabric_given = 1;
}

static void opt_iface(struct parse_state *s, const char *name, const char *val)
{
    if (!*val || strlen(val) > 200)
        die_usage("bad value for --iface: '%s' (expected an interface name or address)", val);
    s->o->iface = val;
    s->fabric_given = 1;
}

static void opt_bind_to(struct parse_state *s, const char *name, const char *val)
{
    s->o->bind = parse_choice(name, val, launch_bind_names, 3);
    s->o->bind_given = 1;
}

static void opt_mpirun_args(struct parse_state *s, const char *name, const char *val)
{
    if (strspn(val, " \t") == strlen(val) || strlen(val) > 2000)
        die_usage("bad value for --mpirun-args: '%.64s' (expected mpirun's arguments, separated "
                  "by spaces, at most 2000 characters)",
                  val);
    s->o->mpirun_args = val;
}

static void opt_launcher(struct parse_state *s, const char *name, const char *val)
{
    s->o->launcher = parse_choice(name, val, launcher_names, 3);
    s->o->launcher_given = 1;
}

static void opt_timeout(struct parse_state *s, const char *name, const char *val)
{
    s->o->timeout_s = (int)parse_int(name, val, 1, BURST_COMM_TIMEOUT_MAX_MS / 1000);
}

static void opt_kill_rank(struct parse_state *s, const char *name, const char *val)
{
    s->o->kill.rank = (int)parse_int(name, val, 0, 65535);
}

static void opt_kill_phase(struct parse_state *s, const char *name, const char *val)
{
    s->o->kill.phase = parse_choice(name, val, phase_names, 2) ? 'B' : 'F';
}

static void opt_kill_iter(struct parse_state *s, const char *name, const char *val)
{
    s->o->kill.iter = (int)parse_int(name, val, 0, 1000000);
}

static void opt_kill_delay(struct parse_state *s, const char *name, const char *val)
{
    s->o->kill.delay_ms = (int)parse_int(name, val, 0, 3600000);
}

static void opt_kill_step(struct parse_state *s, const char *name, const char *val)
{
    s->o->kill_step = (int)parse_int(name, val, -1, 1 << 20);
    s->kill_step_given = 1;
}

/* ---- soft-capping and sinks ---- */

static void opt_prefill(struct parse_state *s, const char *name, const char *val)
{
    s->p->kv_prefill = parse_int(name, val, 1, (int64_t)1 << 40);
}

static void opt_decode(struct parse_state *s, const char *name, const char *val)
{
    s->p->kv_decode = parse_int(name, val, 1, 1 << 30);
}

static void opt_spec(struct parse_state *s, const char *name, const char *val)
{
    s->p->kv_spec = parse_int(name, val, 1, 1 << 20);
}

static void opt_softcap(struct parse_state *s, const char *name, const char *val)
{
    char *end;
    errno = 0;
    double c = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(c) || !(c > 0.0) || c > 1e30)
        die_usage("bad value for --softcap: '%s' (expected a finite number > 0)", val);
    s->p->softcap = (float)c;
}

/* A flag: with a handler, or (flags that take no value) an int of struct opts or of struct
 * job_params set to `set`. */
struct burstrun_flag {
    const char *name;
    int takes_value;
    opt_handler fn;
    int in_params; /* the int is job_params' (else opts') */
    size_t offset; /* of the int */
    int set;       /* its value once the flag is given */
};

#define FLAG_O(n, field)                                                                           \
    {                                                                                              \
        n, 0, NULL, 0, offsetof(struct opts, field), 1                                             \
    }
#define FLAG_P(n, field, v)                                                                        \
    {                                                                                              \
        n, 0, NULL, 1, offsetof(struct job_params, field), v                                       \
    }
#define FLAG_FN(n, fn)                                                                             \
    {                                                                                              \
        n, 0, fn, 0, 0, 0                                                                          \
    }
#define VALUED(n, fn)                                                                              \
    {                                                                                              \
        n, 1, fn, 0, 0, 0                                                                          \
    }

static const struct burstrun_flag burstrun_flags[] = {
    FLAG_FN("--help", opt_help),
    FLAG_FN("-h", opt_help),
    FLAG_FN("--version", opt_version),
    FLAG_FN("-V", opt_version),
    FLAG_O("--info", info),
    FLAG_O("--probe", probe),
    FLAG_O("--pingpong", pingpong),
    FLAG_O("--check", check),
    FLAG_O("--check-fwd-only", check_fwd_only),
    FLAG_O("--json", json),
    FLAG_O("--threads", threads),
    FLAG_O("--verbose", verbose),
    FLAG_P("--causal", causal, 1),
    FLAG_P("--fwd-only", run_bwd, 0),
    FLAG_P("--hash", want_hash, 1),
    FLAG_P("--deterministic", deterministic, 1),
    VALUED("-n", opt_ranks),
    VALUED("--ranks", opt_ranks),
    VALUED("--seq", opt_seq),
    VALUED("--batch", opt_batch),
    VALUED("--heads", opt_heads),
    VALUED("--kv-heads", opt_kv_heads),
    VALUED("--ranks-per-node", opt_ranks_per_node),
    VALUED("--workspace", opt_workspace),
    VALUED("--head-dim", opt_head_dim),
    VALUED("--dtype", opt_dtype),
    VALUED("--layout", opt_layout),
    VALUED("--window", opt_window),
    VALUED("--bwd", opt_bwd),
    VALUED("--iters", opt_iters),
    VALUED("--warmup", opt_warmup),
    VALUED("--seed", opt_seed),
    VALUED("--backend", opt_backend),
    VALUED("--device", opt_device),
    VALUED("--num-threads", opt_num_threads),
    VALUED("--fabric", opt_fabric),
    VALUED("--iface", opt_iface),
    VALUED("--timeout", opt_timeout),
    VALUED("--test-kill-rank", opt_kill_rank),
    VALUED("--test-kill-phase", opt_kill_phase),
    VALUED("--test-kill-iter", opt_kill_iter),
    VALUED("--test-kill-delay", opt_kill_delay),
    VALUED("--test-kill-step", opt_kill_step),
    VALUED("--hosts", opt_hosts),
    VALUED("--hostfile", opt_hostfile),
    VALUED("--bind-to", opt_bind_to),
    VALUED("--csv", opt_csv),
    VALUED("--mpirun-args", opt_mpirun_args),
    VALUED("--launcher", opt_launcher),
    VALUED("--backends", opt_backends),
    VALUED("--weights", opt_weights),
    VALUED("--docs", opt_docs),
    VALUED("--test-mismatch", opt_test_mismatch),
    /* soft-capping and sinks */
    VALUED("--softcap", opt_softcap),
    FLAG_P("--sinks", sinks, 1),
    /* inference: the key/value cache */
    VALUED("--prefill", opt_prefill),
    VALUED("--decode", opt_decode),
    VALUED("--spec", opt_spec),
};

/* The defaults of every flag (parse_args makes the default job causal and checked). */
static void opts_default(struct opts *o, int argc)
{
    struct job_params *p = &o->jp;
    memset(o, 0, sizeof(*o));
    p->ranks = 4;
    p->batch = 1;
    p->seq_len = 2048;
    p->q_heads = 4;
    p->kv_heads = 0;
    p->head_dim = 64;
    p->dtype = BURST_DTYPE_FP32;
    p->window_left = -1;
    p->window_right = -1;
    p->layout = BURST_LAYOUT_ZIGZAG;
    p->bwd = BURST_BWD_BURST;
    p->run_bwd = 1;
    p->warmup = 1;
    p->iters = 5;
    o->backend = "auto";
    o->num_threads_list = "0";
    o->device_list = "";
    p->mismatch_rank = -1;
    o->fabric = "shm";
    o->kill.rank = -1;
    o->kill.phase = 'F';
    p->kv_spec = 1;
#ifndef BURST_HAVE_FABRIC
    o->threads = 1; /* built without libfabric: threads are the only mode */
#endif
    (void)argc;
}

/* Flags that change what is printed, not the job: the default job stays the default with them. */
static int output_flag(const char *name)
{
    static const char *const out[] = {"--json", "--csv", "--verbose", "--hash", "--seed"};
    for (size_t k = 0; k < sizeof(out) / sizeof(out[0]); k++)
        if (!strcmp(name, out[k]))
            return 1;
    return 0;
}

/* Split argv[*i] into the flag's name and its value ("--x=v", "-nV"), take the value from the
 * next argument where the flag needs one, and apply the flag. */
static void parse_flag(struct parse_state *s, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    char name[64];
    const char *val = NULL;
    if (strncmp(arg, "--", 2) == 0) {
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof(name))
            die_usage("unknown option '%s'", arg);
        memcpy(name, arg, len);
        name[len] = 0;
        if (eq)
            val = eq + 1;
    } else if (arg[0] == '-' && arg[1] && arg[1] != '-') {
        name[0] = '-';
        name[1] = arg[1];
        name[2] = 0;
        if (arg[2])
            val = arg + 2;
    } else {
        die_usage("unexpected argument '%s'", arg);
    }
    const struct burstrun_flag *f = NULL;
    for (size_t k = 0; k < sizeof(burstrun_flags) / sizeof(burstrun_flags[0]) && !f; k++)
        if (strcmp(name, burstrun_flags[k].name) == 0)
            f = &burstrun_flags[k];
    if (!f)
        die_usage("unknown option '%s'", name);
    if (!f->takes_value && val)
        die_usage("option %s takes no value (got '%s')", name, val);
    if (f->takes_value && !val) {
        if (*i + 1 >= argc)
            die_usage("option %s needs a value", name);
        val = argv[++*i];
    }
    s->job_flags += !output_flag(name);
    if (f->fn)
        f->fn(s, name, val);
    else
        *(int *)((char *)(f->in_params ? (void *)s->p : (void *)s->o) + f->offset) = f->set;
}

/* Points of the sweep: dtypes x head dims x sequence lengths (1 without a sweep). */
static int sweep_points(const struct opts *o)
{
    return (o->ndtype ? o->ndtype : 1) * (o->nhd ? o->nhd : 1) * (o->nseq ? o->nseq : 1);
}

/* Point i of the sweep into p (the sequence length varies fastest, then the head dim). */
static void sweep_point(const struct opts *o, int i, struct job_params *p)
{
    int ns = o->nseq ? o->nseq : 1, nh = o->nhd ? o->nhd : 1;
    if (o->nseq)
        p->seq_len = o->seqs[i % ns];
    if (o->nhd)
        p->head_dim = (int)o->head_dims[i / ns % nh];
    if (o->ndtype)
        p->dtype = (burst_dtype_t)o->dtypes[i / ns / nh];
}

/* One problem's own rules (a point of a sweep, or the job): its sizes against -n, the layout
 * and the check, and its memory against the machine's; sets p->check_fwd / check_bwd. */
static void check_problem(const struct opts *o, struct job_params *p)
{
    char dmsg[256];
    if (job_docs_resolve(p, dmsg, sizeof(dmsg)) != 0)
        die_usage("%s", dmsg);
    if (p->weights_mode != JOB_WEIGHTS_EVEN) {
        int64_t min = (p->layout == BURST_LAYOUT_ZIGZAG ? 2 : 1) * (int64_t)p->ranks;
        if (p->seq_len < min)
            die_usage("--seq %lld is too short for --weights with -n %d and layout %s (needs %lld)",
                      (long long)p->seq_len, p->ranks, layout_names[p->layout], (long long)min);
    }
    if (p->head_dim % 8 || p->head_dim > 256)
        die_usage("bad value for --head-dim: '%d' (expected a multiple of 8 in 8..256)",
                  p->head_dim);
    int64_t min_seq = p->layout == BURST_LAYOUT_ZIGZAG ? 2 * (int64_t)p->ranks : p->ranks;
    if (p->seq_len < min_seq)
        die_usage("--seq %lld is too short: need at least %lld tokens for -n %d with layout %s",
                  (long long)p->seq_len, (long long)min_seq, p->ranks, layout_names[p->layout]);
    int affordable = job_bwd_ref_cost(p) <= JOB_BWD_CHECK_LIMIT;
    if (o->check_fwd_only) {
        p->check_fwd = 1;
    } else if (o->check) {
        /* every row when the full reference is affordable, else (--fwd-only) sampled rows */
        p->check_fwd = affordable ? 2 : 1;
        p->check_bwd = p->run_bwd;
        if (p->check_bwd && !affordable) {
            die_usage("--check refused: the fp64 backward reference would cost B*N^2*Hq*d = %.3g "
                      "multiply-adds (limit %.0e); use --check-fwd-only, --fwd-only or a smaller "
                      "problem",
                      job_bwd_ref_cost(p), JOB_BWD_CHECK_LIMIT);
        }
    }
    /* sizes last: every flag above is in range, nothing is allocated yet. Tensors and the
     * library's scratch of the ranks on this machine (under --hosts/--hostfile the ranks are
     * elsewhere, each with its own copy of the tensors: those alone) */
    char msg[768];
    uint64_t scratch = 0;
    if (job_tensor_bytes(p, msg, sizeof(msg)) == 0 ||
        (!o->hosts && !o->hostfile &&
         job_scratch_bytes(p, o->backend, &scratch, msg, sizeof(msg)) != 0) ||
        job_memory_check(p, scratch, msg, sizeof(msg)) != 0)
        die_usage("%s", msg);
}

/* An inference job (--prefill, --decode): the flags it takes; it is causal, forward only, and
 * sized like an attention job over the prompt. */
static void check_inference(const struct opts *o, struct job_params *p)
{
    if (!p->kv_decode) {
        if (p->kv_prefill || p->kv_spec != 1)
            die_usage("--%s needs --decode STEPS (an inference job: --prefill N --decode STEPS)",
                      p->kv_prefill ? "prefill" : "spec");
        return;
    }
    if (!p->kv_prefill)
        die_usage("--decode %lld needs --prefill N (the prompt that fills the cache first)",
                  (long long)p->kv_decode);
    if (sweep_points(o) > 1 || o->csv || p->sinks || p->softcap > 0 || p->num_docs ||
        p->docs_random || p->window_left >= 0 || p->window_right >= 0 ||
        p->weights_mode != JOB_WEIGHTS_EVEN || p->mismatch_rank >= 0 || o->kill.rank >= 0)
        die_usage("--decode runs one causal inference job: not with sweeps, --csv, --sinks, "
                  "--softcap, --docs, --window, --weights or the test flags");
    if (p->batch > 65536)
        die_usage("--batch %lld: an inference job takes at most 65536 sequences",
                  (long long)p->batch);
    int64_t min = p->layout == BURST_LAYOUT_ZIGZAG ? 2 * (int64_t)p->ranks : p->ranks;
    if (p->kv_prefill < min)
        die_usage("--prefill %lld is too short: the prompt is sharded over -n %d ranks in layout "
                  "%s (needs at least %lld tokens)",
                  (long long)p->kv_prefill, p->ranks, layout_names[p->layout], (long long)min);
    const int64_t total = p->kv_prefill + p->kv_decode * p->kv_spec; /* < 2^51: no overflow */
    const double cache = 2.0 * (double)job_kv_capacity(p) * 64 * p->kv_heads * p->head_dim *
                         (double)burst_dtype_size(p->dtype) * p->ranks;
    if (total > ((int64_t)1 << 40) || job_kv_capacity(p) > INT32_MAX ||
        cache > (double)job_memory_limit())
        die_usage("--prefill %lld --decode %lld --spec %lld --batch %lld: the caches of the %d "
                  "ranks (%.3g bytes for %lld tokens per sequence) do not fit this machine's "
                  "memory (%.3g bytes)",
                  (long long)p->kv_prefill, (long long)p->kv_decode, (long long)p->kv_spec,
                  (long long)p->batch, p->ranks, cache, (long long)total,
                  (double)job_memory_limit());
    p->causal = 1;
    p->run_bwd = 0;
    p->seq_len = p->kv_prefill;
}

/* The flags' consistency with each other, naming the flags involved. */
static void check_flags(struct parse_state *s)
{
    struct opts *o = s->o;
    struct job_params *p = s->p;
#ifndef BURST_HAVE_FABRIC
    if (s->fabric_given)
        die_usage("--fabric / --iface: this burstrun was built without libfabric; ranks can "
                  "only be threads (--threads)");
#endif
    if (o->threads && s->fabric_given)
        die_usage("--fabric / --iface apply to rank processes, not to --threads");
    o->fabric_given = s->fabric_given;
    if (o->hosts && o->hostfile)
        die_usage("--hosts and --hostfile exclude each other");
    if ((o->hosts || o->hostfile) && o->threads)
        die_usage("--%s runs rank processes through mpirun, not --threads",
                  o->hosts ? "hosts" : "hostfile");
    if (o->hosts || o->hostfile) {
        if (!o->ranks_given)
            p->ranks = o->host_slots;
        if (o->host_slots < 0 && !o->ranks_given)
            die_usage("--hostfile %s lists a host without slots=N (Open MPI gives it its core "
                      "count, unknown here): give -n",
                      o->hostfile);
        else if (o->host_slots >= 0 && p->ranks > o->host_slots)
            die_usage("-n %d: --%s gives only %d slots", p->ranks, o->hosts ? "hosts" : "hostfile",
                      o->host_slots);
        if (!s->fabric_given)
            o->fabric = "auto";
        if (!launch_mpi_available())
            die_usage("--%s: this burstrun was built without MPI (install Open MPI's development "
                      "files and rebuild)",
                      o->hosts ? "hosts" : "hostfile");
    }
    if (o->threads && o->bind_given)
        die_usage("--bind-to %s binds rank processes, not --threads", launch_bind_names[o->bind]);
    if (o->json && o->csv && strcmp(o->csv, "-") == 0)
        die_usage("--csv - with --json: both would go to stdout (give --csv a file name)");
    if ((o->hosts || o->hostfile) && (o->csv || sweep_points(o) > 1))
        die_usage("--%s runs one job: sweeps (lists of --seq, --dtype, --head-dim) and --csv run "
                  "on this host",
                  o->hosts ? "hosts" : "hostfile");
    if (o->pingpong && (o->threads || o->hosts || o->hostfile || sweep_points(o) > 1 || o->csv ||
                        (o->ranks_given && p->ranks != 2)))
        die_usage("--pingpong runs 2 rank processes on this host (not with --threads, --hosts, "
                  "--hostfile, -n other than 2, sweeps or --csv)");
    if (o->launcher_given && !o->hosts && !o->hostfile && !in_mpi_worker)
        die_usage("--launcher %s needs --hosts or --hostfile (the ranks run through mpirun only "
                  "there)",
                  launcher_names[o->launcher]);
    if (o->launcher == LAUNCHER_PMIX && !in_mpi_worker && !launch_pmix_available())
        die_usage("--launcher pmix: this burstrun was built without PMIx (meson -Dpmix, "
                  "pkg-config pmix; Debian: libpmix-dev)");
    if (o->mpirun_args && !o->hosts && !o->hostfile)
        die_usage("--mpirun-args '%.64s' needs --hosts or --hostfile (the ranks run through "
                  "mpirun only there)",
                  o->mpirun_args);
    if (o->threads && o->timeout_s)
        die_usage("--timeout applies to rank processes, not to --threads (use BURST_TIMEOUT_MS)");
    if (o->kill.rank >= 0 && (o->threads || o->kill.rank >= p->ranks))
        die_usage("--test-kill-rank %d needs rank processes and a rank below -n %d", o->kill.rank,
                  p->ranks);
    if (o->kill.rank >= 0 && o->kill.phase == 'B' && !p->run_bwd)
        die_usage("--test-kill-phase bwd with --fwd-only");
    if (s->kill_step_given && o->kill.rank < 0)
        die_usage("--test-kill-step needs --test-kill-rank");
    if (s->kill_step_given) {
        if (o->kill.delay_ms)
            die_usage("--test-kill-step and --test-kill-delay exclude each other");
        /* The rank kills itself inside the ring engine (runtime/fault.h), at exactly that step
         * of that call: the rank processes inherit the variable. */
        char spec[128];
        snprintf(spec, sizeof(spec), "kill:rank=%d,phase=%s,step=%d,call=%d", o->kill.rank,
                 o->kill.phase == 'B' ? "bwd" : "fwd", o->kill_step, o->kill.iter);
        if (setenv("BURST_FAULT", spec, 1) != 0)
            die_usage("--test-kill-step: cannot set BURST_FAULT");
        o->kill.rank = -1; /* not the launcher's timed kill */
    }
    if (p->weights_mode == JOB_WEIGHTS_GIVEN && s->weights_count != p->ranks)
        die_usage("--weights has %d entries for -n %d ranks (give one weight per rank, or auto)",
                  s->weights_count, p->ranks);
    if (job_list_count(o->backend) > p->ranks)
        die_usage("--backends has %d entries for -n %d ranks (at most one per rank; a shorter "
                  "list repeats)",
                  job_list_count(o->backend), p->ranks);
    if (job_list_count(o->num_threads_list) > p->ranks)
        die_usage("--num-threads has %d entries for -n %d ranks",
                  job_list_count(o->num_threads_list), p->ranks);
    if (job_list_count(o->device_list) > p->ranks)
        die_usage("--device has %d entries for -n %d ranks", job_list_count(o->device_list),
                  p->ranks);
    if (p->mismatch_rank >= p->ranks)
        die_usage("--test-mismatch: rank %d is not below -n %d", p->mismatch_rank, p->ranks);
    if (p->kv_heads == 0)
        p->kv_heads = p->q_heads;
    if (p->q_heads % p->kv_heads)
        die_usage("--kv-heads %d must divide --heads %d", p->kv_heads, p->q_heads);
    if (p->sinks && p->q_heads > JOB_MAX_SINKS)
        die_usage("--sinks takes at most %d query heads (--heads %d)", JOB_MAX_SINKS, p->q_heads);
    check_inference(o, p);
    check_env();
    /* every point of a sweep (one point without one): nothing is allocated before all pass */
    for (int i = 0; i < sweep_points(o); i++) {
        struct job_params q = *p;
        sweep_point(o, i, &q);
        check_problem(o, &q);
    }
    sweep_point(o, 0, p);
    check_problem(o, p);
    if (!o->seed_given)
        p->seed = (uint64_t)time(NULL);
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    struct parse_state s = {.o = o, .p = &o->jp};
    opts_default(o, argc);
    for (int i = 1; i < argc; i++)
        parse_flag(&s, argc, argv, &i);
    if (!s.job_flags) { /* the default job, whatever the output flags */
        o->default_job = 1;
        o->jp.causal = 1;
        o->check = 1;
    }
    if (o->info) {
        info(o->json);
        exit(0);
    }
    check_flags(&s);
}

/* ---- output ---- */

static const char *human_bytes(double x, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", x, unit[u]);
    return buf;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_num(double x)
{
    if (isfinite(x))
        printf("%.6g", x);
    else
        printf("null");
}

struct summary {
    double fwd_flops, pairs;
    double tf_fwd, tf_bwd, tf_fb;
    double max_abs, max_rel;
    const char *check; /* pass / fail / skipped */
    int tensor_ok[JOB_NTENSORS];
    int tensor_checked[JOB_NTENSORS];
};

static void summarise(const struct job_params *p, const struct job_result *r, struct summary *s)
{
    memset(s, 0, sizeof(*s));
    s->pairs = job_pairs(p);
    s->fwd_flops = job_fwd_flops(p);
    s->tf_fwd = r->fwd_s > 0 ? s->fwd_flops / r->fwd_s / 1e12 : 0;
    s->tf_bwd = r->bwd_s > 0 ? 2.5 * s->fwd_flops / r->bwd_s / 1e12 : 0;
    s->tf_fb = p->run_bwd && r->fwd_s + r->bwd_s > 0
                   ? 3.5 * s->fwd_flops / (r->fwd_s + r->bwd_s) / 1e12
                   : 0;
    s->check = "skipped";
    if (!r->checked_fwd_rows)
        return;
    int ok = 1;
    for (int t = 0; t < JOB_NTENSORS; t++) {
        s->tensor_checked[t] =
            t == JOB_DSINKS ? p->sinks && r->checked_bwd : t <= JOB_LSE || r->checked_bwd;
        if (!s->tensor_checked[t])
            continue;
        double rel = job_err_rel(&r->err[t], (enum job_tensor)t);
        double abs_err = r->err[t].nonfinite ? INFINITY : r->err[t].max_abs;
        s->max_abs = abs_err > s->max_abs ? abs_err : s->max_abs;
        s->max_rel = rel > s->max_rel ? rel : s->max_rel;
        s->tensor_ok[t] = rel <= job_tolerance(p->dtype);
        ok &= s->tensor_ok[t];
    }
    s->check = ok ? "pass" : "fail";
}

/* Mean over ranks of compute_s / steps and wait_s / steps of the last call of a phase. */
static void per_step(const struct job_params *p, const struct job_result *r, int phase,
                     double *compute_p, double *wait_p)
{
    double c = 0.0, w = 0.0;
    int n = 0;
    for (int rk = 0; r->rank_stats && rk < p->ranks; rk++) {
        const struct burst_phase_stats *st =
            phase ? &r->rank_stats[rk].bwd : &r->rank_stats[rk].fwd;
        if (st->steps > 0) {
            c += st->compute_s / st->steps;
            w += st->wait_s / st->steps;
            n++;
        }
    }
    *compute_p = n ? c / n : NAN;
    *wait_p = n ? w / n : NAN;
}

/* The forward's ideal time on ranks of the measured speeds: total work (allowed query/key pairs
 * times batch and query heads, the unit of the speeds) over the sum of the speeds. NAN without
 * measured speeds. */
static double ideal_fwd_s(const struct job_params *p, const struct job_result *r)
{
    double sum = 0.0;
    for (int rk = 0; r->rank_speeds && rk < p->ranks; rk++)
        sum += r->rank_speeds[rk];
    if (!(sum > 0.0))
        return NAN;
    return job_pairs(p) * (double)p->batch * p->q_heads / sum;
}

/* The job's members of --json (without braces): problem, timings, statistics, check. */
/* "docs": the documents of a packed job (--docs): their count, how they were chosen, and
 * their lengths (up to 64 of them) or a summary (min, max, mean) */
static void print_json_docs(const struct job_params *p)
{
    if (p->num_docs <= 0)
        return;
    int64_t min = p->doc_lens[0], max = p->doc_lens[0];
    for (int64_t t = 1; t < p->num_docs; t++) {
        min = p->doc_lens[t] < min ? p->doc_lens[t] : min;
        max = p->doc_lens[t] > max ? p->doc_lens[t] : max;
    }
    printf(", \"docs\": {\"count\": %lld, \"mode\": \"%s\", \"min\": %lld, \"max\": %lld, "
           "\"mean\": %.6g",
           (long long)p->num_docs, p->docs_random ? "random" : "given", (long long)min,
           (long long)max, (double)p->seq_len / (double)p->num_docs);
    if (p->num_docs <= 64) {
        printf(", \"lens\": [");
        for (int64_t t = 0; t < p->num_docs; t++)
            printf("%s%lld", t ? ", " : "", (long long)p->doc_lens[t]);
        printf("]");
    }
    printf("}");
}

static void print_json_job(const struct opts *o, const struct job_params *p,
                           const struct job_result *r, const struct summary *s)
{
    int checked = r->checked_fwd_rows > 0;
    printf("\"version\": ");
    json_str(burst_version_string());
    printf(", \"backend\": ");
    json_str(r->backend);
    printf(", \"ranks\": %d, \"threads\": %d, \"rank_mode\": ", p->ranks, r->num_threads);
    json_str(r->rank_mode);
    printf(", \"fabric\": ");
    json_str(r->fabric);
    printf(", \"transfers\": ");
    json_str(r->transfers);
    printf(", \"head_groups\": %d", r->head_groups);
    printf(", \"hosts\": %d", r->hosts);
    printf(", \"batch\": %lld, \"seq\": %lld, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d",
           (long long)p->batch, (long long)p->seq_len, p->q_heads, p->kv_heads, p->head_dim);
    printf(", \"dtype\": \"%s\", \"causal\": %s, \"layout\": \"%s\"", dtype_names[p->dtype],
           p->causal ? "true" : "false", layout_names[p->layout]);
    printf(", \"window\": [%lld, %lld]", (long long)p->window_left, (long long)p->window_right);
    printf(", \"softcap\": %.9g, \"sinks\": %s", (double)p->softcap, p->sinks ? "true" : "false");
    printf(", \"bwd\": \"%s\", \"bwd_requested\": \"%s\"",
           p->run_bwd ? bwd_names[r->bwd_used] : "none", bwd_names[p->bwd]);
    printf(", \"cpu_share\": ");
    json_num(r->cpu_share);
    printf(", \"seed\": %" PRIu64 ", \"warmup\": %d, \"iters\": %d", p->seed, p->warmup,
           r->iters_done);
    printf(", \"allowed_pairs\": %.0f, \"flops_fwd\": %.6g", s->pairs, s->fwd_flops);
    printf(", \"default_job\": %s", o->default_job ? "true" : "false");
    printf(", \"fwd_ms\": ");
    json_num(r->fwd_s * 1e3);
    printf(", \"fwd_ms_min\": ");
    json_num(r->fwd_min_s * 1e3);
    printf(", \"fwd_ms_max\": ");
    json_num(r->fwd_max_s * 1e3);
    printf(", \"bwd_ms\": ");
    json_num(p->run_bwd ? r->bwd_s * 1e3 : NAN);
    printf(", \"bwd_ms_min\": ");
    json_num(p->run_bwd ? r->bwd_min_s * 1e3 : NAN);
    printf(", \"bwd_ms_max\": ");
    json_num(p->run_bwd ? r->bwd_max_s * 1e3 : NAN);
    printf(", \"tflops_fwd\": ");
    json_num(s->tf_fwd);
    printf(", \"tflops_bwd\": ");
    json_num(p->run_bwd ? s->tf_bwd : NAN);
    printf(", \"tflops_fwd_bwd\": ");
    json_num(p->run_bwd ? s->tf_fb : NAN);
    printf(", \"tflops_fwd_per_rank\": ");
    json_num(s->tf_fwd / p->ranks);
    printf(", \"tflops_fwd_bwd_per_rank\": ");
    json_num(p->run_bwd ? s->tf_fb / p->ranks : NAN);
    printf(", \"bytes_fwd_per_rank\": %" PRIu64 ", \"bytes_bwd_per_rank\": %" PRIu64, r->bytes_fwd,
           r->bytes_bwd);
    printf(", \"msgs_fwd_per_rank\": %" PRIu64 ", \"msgs_bwd_per_rank\": %" PRIu64, r->msgs_fwd,
           r->msgs_bwd);
    printf(", \"scratch_fwd_per_rank\": %" PRIu64 ", \"scratch_bwd_per_rank\": %" PRIu64,
           r->scratch_fwd, r->scratch_bwd);
    printf(", \"overlap\": {\"fwd\": ");
    json_num(job_overlap(r, 0));
    printf(", \"bwd\": ");
    json_num(p->run_bwd ? job_overlap(r, 1) : NAN);
    printf("}");
    for (int ph = 0; ph < 1 + p->run_bwd; ph++) {
        double c, w;
        per_step(p, r, ph, &c, &w);
        printf(", \"%s_step_ms\": {\"compute\": ", ph ? "bwd" : "fwd");
        json_num(c * 1e3);
        printf(", \"wait\": ");
        json_num(w * 1e3);
        printf("}");
    }
    if (r->rank_stats) {
        printf(", \"per_rank\": [");
        for (int rk = 0; rk < p->ranks; rk++) {
            printf("%s{\"rank\": %d", rk ? ", " : "", rk);
            for (int ph = 0; ph < 1 + p->run_bwd; ph++) {
                const struct burst_phase_stats *st =
                    ph ? &r->rank_stats[rk].bwd : &r->rank_stats[rk].fwd;
                printf(", \"%s\": {\"steps\": %d, \"compute_ms\": ", ph ? "bwd" : "fwd", st->steps);
                json_num(st->compute_s * 1e3);
                printf(", \"wait_ms\": ");
                json_num(st->wait_s * 1e3);
                printf(", \"total_ms\": ");
                json_num(st->total_s * 1e3);
                printf("}");
            }
            printf("}");
        }
        printf("]");
    }
    if (p->want_hash)
        printf(", \"output_hash\": \"%016" PRIx64 "\"", r->output_hash);
    static const char *const wmodes[] = {"even", "given", "auto"};
    printf(", \"weights\": \"%s\"", wmodes[p->weights_mode]);
    print_json_docs(p);
    if (r->shard_lens) {
        printf(", \"shard_lens\": [");
        for (int rk = 0; rk < p->ranks; rk++)
            printf("%s%lld", rk ? ", " : "", (long long)r->shard_lens[rk]);
        printf("]");
    }
    if (r->rank_speeds) {
        printf(", \"rank_speeds\": [");
        for (int rk = 0; rk < p->ranks; rk++) {
            printf("%s", rk ? ", " : "");
            json_num(r->rank_speeds[rk]);
        }
        printf("], \"shard_speeds\": [");
        for (int rk = 0; rk < p->ranks; rk++) {
            printf("%s", rk ? ", " : "");
            json_num(r->shard_speeds ? r->shard_speeds[rk] : 0.0);
        }
        printf("], \"ideal_fwd_ms\": ");
        json_num(ideal_fwd_s(p, r) * 1e3);
    }
    printf(", \"peak_rss_bytes\": %" PRIu64 ", \"job_tensor_bytes\": %" PRIu64, r->peak_rss,
           r->caller_bytes);
    printf(", \"max_abs_err\": ");
    json_num(checked ? s->max_abs : NAN);
    printf(", \"max_rel_err\": ");
    json_num(checked ? s->max_rel : NAN);
    printf(", \"tolerance\": ");
    json_num(checked ? job_tolerance(p->dtype) : NAN);
    printf(", \"check_scope\": \"%s\"", !checked         ? "none"
                                        : r->checked_bwd ? "fwd+bwd"
                                                         : "fwd-sampled-rows");
    if (checked) {
        printf(", \"errors\": {");
        int first = 1;
        for (int t = 0; t < JOB_NTENSORS; t++) {
            if (!s->tensor_checked[t])
                continue;
            printf("%s\"%s\": {\"max_abs\": ", first ? "" : ", ",
                   job_tensor_name((enum job_tensor)t));
            json_num(r->err[t].nonfinite ? INFINITY : r->err[t].max_abs);
            printf(", \"rel\": ");
            json_num(job_err_rel(&r->err[t], (enum job_tensor)t));
            printf(", \"nonfinite\": %lld}", (long long)r->err[t].nonfinite);
            first = 0;
        }
        printf("}");
    }
    printf(", \"check\": \"%s\"", s->check);
}

/* --json's error member: burstrun's exit status and why. */
static void json_error(int code, const char *msg)
{
    printf(", \"error\": {\"exit_code\": %d, \"message\": ", code);
    meta_json_str(stdout, msg);
    printf("}");
}

#define CHECK_FAILED_MSG "the check against the fp64 reference failed"

/* The one JSON object of a job: the metadata, the job's members, and an error member when the
 * check failed. */
static void print_json(const struct opts *o, const struct job_result *r, const struct summary *s)
{
    printf("{");
    meta_json_fields(stdout, 1);
    printf(", ");
    print_json_job(o, &o->jp, r, s);
    if (!strcmp(s->check, "fail"))
        json_error(EXIT_CHECK_FAILED, CHECK_FAILED_MSG);
    printf("}\n");
}

/* The report's line of a packed job's documents (the first 16 lengths). */
static void print_text_docs(const struct job_params *p)
{
    if (p->num_docs <= 0)
        return;
    printf("docs     %lld document(s)%s:", (long long)p->num_docs,
           p->docs_random ? " of random lengths" : "");
    for (int64_t t = 0; t < p->num_docs && t < 16; t++)
        printf(" %lld", (long long)p->doc_lens[t]);
    printf("%s\n", p->num_docs > 16 ? " ..." : "");
}

/* "compute / wait" ms per step and the overlap cell of one phase. */
static void step_cells(const struct job_params *p, const struct job_result *r, int phase, char *cw,
                       size_t cwn, char *ov, size_t ovn)
{
    double c, w;
    per_step(p, r, phase, &c, &w);
    if (isfinite(c))
        snprintf(cw, cwn, "%.3f / %.3f", c * 1e3, w * 1e3);
    else
        snprintf(cw, cwn, "-");
    double x = job_overlap(r, phase);
    if (isfinite(x))
        snprintf(ov, ovn, "%.1f%%", 100.0 * x);
    else
        snprintf(ov, ovn, "-");
}

static void print_table(const struct opts *o, const struct job_result *r, const struct summary *s)
{
    const struct job_params *p = &o->jp;
    char b1[32], b2[32], b3[32];
    if (o->threads)
        printf("burstrun %s: %d rank%s as threads of one process, backend %s (%d compute "
               "threads), seed %" PRIu64 "%s\n",
               burst_version_string(), p->ranks, p->ranks > 1 ? "s" : "", r->backend,
               r->num_threads, p->seed, o->seed_given ? "" : " (from the clock)");
    else
        printf("burstrun %s: %d rank process%s on %d host%s, fabric %s, backend %s (%d compute "
               "threads each), seed %" PRIu64 "%s\n",
               burst_version_string(), p->ranks, p->ranks > 1 ? "es" : "", r->hosts,
               r->hosts > 1 ? "s" : "", r->fabric, r->backend, r->num_threads, p->seed,
               o->seed_given ? "" : " (from the clock)");
    if (g_launch_used[0])
        printf("ranks joined through %s\n", g_launch_used);
    if (strcmp(r->transfers, "host") != 0 && r->transfers[0])
        printf(
            "blocks travel %s\n",
            !strcmp(r->transfers, "device") ? "device to device (no host hop)"
            : !strcmp(r->transfers, "device+staged")
                ? "device to device inside a host, through page-locked host staging between hosts"
                : "through page-locked host staging");
    if (r->head_groups > 1)
        printf("each call runs the ring once per group of heads: %d groups (--workspace)\n",
               r->head_groups);
    if (o->default_job)
        printf("default job: burstrun -n 4 --seq 2048 --heads 4 --head-dim 64 --causal --layout "
               "zigzag --check\n");
    char win[80];
    if (p->window_left < 0 && p->window_right < 0)
        snprintf(win, sizeof(win), "none");
    else
        snprintf(win, sizeof(win), "%lld,%lld", (long long)p->window_left,
                 (long long)p->window_right);
    printf("problem  B=%lld N=%lld Hq=%d Hkv=%d d=%d %s, %s, layout %s, window %s, bwd %s\n",
           (long long)p->batch, (long long)p->seq_len, p->q_heads, p->kv_heads, p->head_dim,
           dtype_names[p->dtype], p->causal ? "causal" : "non-causal", layout_names[p->layout], win,
           p->run_bwd ? bwd_names[r->bwd_used] : "not run");
    print_text_docs(p);
    if (p->softcap > 0.0f || p->sinks) {
        char cap[32] = "off";
        if (p->softcap > 0.0f)
            snprintf(cap, sizeof(cap), "%g", (double)p->softcap);
        printf("         softcap %s, sinks %s\n", cap,
               p->sinks ? "one per query head (from the seed)" : "none");
    }
    if (p->weights_mode != JOB_WEIGHTS_EVEN && r->shard_lens) {
        printf("shards   %s:",
               p->weights_mode == JOB_WEIGHTS_MEASURED ? "by measured speed" : "by --weights");
        for (int rk = 0; rk < p->ranks && rk < 16; rk++)
            printf(" %lld", (long long)r->shard_lens[rk]);
        printf("%s", p->ranks > 16 ? " ..." : "");
        if (r->rank_speeds)
            printf("; ideal forward %.3f ms (work / sum of rank speeds)", ideal_fwd_s(p, r) * 1e3);
        printf("\n");
        if (r->rank_speeds && r->shard_speeds) { /* the two rounds of runtime/speed.h */
            printf("speeds   rows x keys x heads / s, full load:");
            for (int rk = 0; rk < p->ranks && rk < 16; rk++)
                printf(" %.3g", r->rank_speeds[rk]);
            printf("; on the shard (sized it):");
            for (int rk = 0; rk < p->ranks && rk < 16; rk++)
                printf(" %.3g", r->shard_speeds[rk]);
            printf("%s\n", p->ranks > 16 ? " ..." : "");
        }
    }
    double n2 = (double)p->seq_len * (double)p->seq_len;
    printf("work     allowed pairs %.0f (%.2f%% of N^2); forward %.4g GFLOP, fwd+bwd %.4g GFLOP\n",
           s->pairs, 100.0 * s->pairs / n2, s->fwd_flops / 1e9, 3.5 * s->fwd_flops / 1e9);
    printf("timing   %d warm-up + %d timed iterations; median (min) wall time of the ring; "
           "cpu share %.0f%%\n\n",
           p->warmup, r->iters_done, 100.0 * r->cpu_share);

    printf("%-9s %22s %9s %12s %13s %6s %6s %13s %9s %20s %7s\n", "phase", "time ms (min)",
           "TFLOP/s", "TFLOP/s/rank", "sent/rank", "msgs", "steps", "scratch/rank", "wait ms",
           "step compute/wait", "overlap");
    char t[48], cw[48], ov[16];
    step_cells(p, r, 0, cw, sizeof(cw), ov, sizeof(ov));
    snprintf(t, sizeof(t), "%.3f (%.3f)", r->fwd_s * 1e3, r->fwd_min_s * 1e3);
    printf("%-9s %22s %9.4f %12.4f %13s %6" PRIu64 " %6d %13s %9.3f %20s %7s\n", "forward", t,
           s->tf_fwd, s->tf_fwd / p->ranks, human_bytes((double)r->bytes_fwd, b1, sizeof(b1)),
           r->msgs_fwd, r->steps_fwd, human_bytes((double)r->scratch_fwd, b2, sizeof(b2)),
           r->wait_fwd_s * 1e3, cw, ov);
    if (p->run_bwd) {
        step_cells(p, r, 1, cw, sizeof(cw), ov, sizeof(ov));
        snprintf(t, sizeof(t), "%.3f (%.3f)", r->bwd_s * 1e3, r->bwd_min_s * 1e3);
        printf("%-9s %22s %9.4f %12.4f %13s %6" PRIu64 " %6d %13s %9.3f %20s %7s\n", "backward", t,
               s->tf_bwd, s->tf_bwd / p->ranks, human_bytes((double)r->bytes_bwd, b1, sizeof(b1)),
               r->msgs_bwd, r->steps_bwd, human_bytes((double)r->scratch_bwd, b2, sizeof(b2)),
               r->wait_bwd_s * 1e3, cw, ov);
        snprintf(t, sizeof(t), "%.3f", (r->fwd_s + r->bwd_s) * 1e3);
        printf("%-9s %22s %9.4f %12.4f %13s\n", "fwd+bwd", t, s->tf_fb, s->tf_fb / p->ranks,
               human_bytes((double)(r->bytes_fwd + r->bytes_bwd), b1, sizeof(b1)));
    }
    printf("\nmemory   peak RSS %s%s (the job's global tensors: %s%s)\n",
           human_bytes((double)r->peak_rss, b1, sizeof(b1)),
           o->threads ? "" : " of the largest rank process",
           human_bytes((double)r->caller_bytes, b3, sizeof(b3)),
           o->threads      ? ""
           : o->mpi_worker ? ", a private copy in every rank process"
                           : ", shared by the ranks");
    if (o->verbose && r->rank_stats) {
        printf("\nper rank (last call)     %-32s %s\n", "forward: compute / wait / total ms",
               p->run_bwd ? "backward: compute / wait / total ms" : "");
        for (int rk = 0; rk < p->ranks; rk++) {
            const struct burst_phase_stats *f = &r->rank_stats[rk].fwd, *b = &r->rank_stats[rk].bwd;
            printf("  rank %-5d steps %-4d %9.3f / %8.3f / %8.3f", rk, f->steps, f->compute_s * 1e3,
                   f->wait_s * 1e3, f->total_s * 1e3);
            if (p->run_bwd)
                printf("    %9.3f / %8.3f / %8.3f", b->compute_s * 1e3, b->wait_s * 1e3,
                       b->total_s * 1e3);
            printf("\n");
        }
    }
    if (p->want_hash)
        printf("hash     output FNV-1a %016" PRIx64 "\n", r->output_hash);

    if (!r->checked_fwd_rows) {
        printf("check    skipped (pass --check or --check-fwd-only)\n");
        return;
    }
    printf("check    fp64 reference: forward on %d of %lld rows, backward %s; tolerance %.0e "
           "of max |ref|\n",
           r->checked_fwd_rows, (long long)p->seq_len, r->checked_bwd ? "in full" : "not checked",
           job_tolerance(p->dtype));
    printf("         %-6s %12s %12s %12s\n", "tensor", "max abs err", "max |ref|", "rel err");
    for (int i = 0; i < JOB_NTENSORS; i++) {
        if (!s->tensor_checked[i])
            continue;
        const struct job_err *e = &r->err[i];
        printf("         %-6s %12.3e %12.3e %12.3e  %s", job_tensor_name((enum job_tensor)i),
               e->max_abs, e->max_ref, job_err_rel(e, (enum job_tensor)i),
               s->tensor_ok[i] ? "ok" : "FAIL");
        if (e->nonfinite)
            printf(" (%lld non-finite values)", (long long)e->nonfinite);
        printf("\n");
    }
    printf("result   %s\n", strcmp(s->check, "pass") == 0 ? "PASS" : "FAIL");
}

/* This program's path (rank processes and mpirun start it again); 0, or -1 with a message. */
static int self_exe(char *buf, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0) {
        fprintf(stderr, "%s: cannot find its own executable (/proc/self/exe)\n", prog);
        return -1;
    }
    buf[n] = '\0';
    return 0;
}

/* The job's table or JSON on stdout; EXIT_CHECK_FAILED when a requested check failed, else 0. */
static int report(const struct opts *o, const struct job_result *r)
{
    if (o->jp.kv_decode > 0) { /* an inference job (tools/job_kv.h) */
        if (o->json) {
            printf("{");
            meta_json_fields(stdout, 1);
            printf(", ");
        }
        int failed = job_kv_print(stdout, &o->jp, r, o->json);
        if (o->json)
            printf("}\n");
        return failed ? EXIT_CHECK_FAILED : 0;
    }
    struct summary s;
    summarise(&o->jp, r, &s);
    if (o->json)
        print_json(o, r, &s);
    else
        print_table(o, r, &s);
    return strcmp(s.check, "fail") == 0 ? EXIT_CHECK_FAILED : 0;
}

/* ---- the header, sweep rows and --csv ---- */

/* The table's header, printed before any job runs: versions, features, host, time, seed, ranks
 * and every backend's devices, each line after "# ". */
static void print_header(const struct opts *o)
{
    char host[256], ts[64];
    meta_host(host, sizeof(host));
    meta_timestamp(ts, sizeof(ts));
    printf("# burstrun %s (library %s), commit %s, features: %s\n", BURST_VERSION_STRING,
           burst_version_string(), meta_commit(), meta_features());
    printf("# host %s, %s, seed %" PRIu64 "%s\n", host, ts, o->jp.seed,
           o->seed_given ? "" : " (from the clock)");
    printf("# %d rank%s as %s, backend %s\n", o->jp.ranks, o->jp.ranks > 1 ? "s" : "",
           o->threads ? "threads of one process" : "processes", o->backend);
    meta_devices_text(stdout, "# ");
    fflush(stdout);
}

/* A sweep's constant problem and the columns of its rows. */
static void print_sweep_columns(const struct opts *o)
{
    const struct job_params *p = &o->jp;
    printf("# problem B=%lld Hq=%d Hkv=%d, %s, layout %s, bwd %s; %d warm-up + %d timed "
           "iterations, times in ms: median (min, max) of the ring\n#\n",
           (long long)p->batch, p->q_heads, p->kv_heads, p->causal ? "causal" : "non-causal",
           layout_names[p->layout], p->run_bwd ? bwd_names[p->bwd] : "not run", p->warmup,
           p->iters);
    printf("# %9s %5s %4s %10s %10s %10s %9s %10s %10s %10s %9s %9s %7s\n", "seq", "dtype", "d",
           "fwd", "(min", "max)", "TFLOP/s", "bwd", "(min", "max)", "TFLOP/s", "f+b TF/s", "check");
    fflush(stdout);
}

/* One row of a sweep, as soon as its job finished. */
static void print_row(const struct job_params *p, const struct job_result *r,
                      const struct summary *s)
{
    printf("  %9lld %5s %4d %10.3f %10.3f %10.3f %9.4f", (long long)p->seq_len,
           dtype_names[p->dtype], p->head_dim, r->fwd_s * 1e3, r->fwd_min_s * 1e3,
           r->fwd_max_s * 1e3, s->tf_fwd);
    if (p->run_bwd)
        printf(" %10.3f %10.3f %10.3f %9.4f %9.4f", r->bwd_s * 1e3, r->bwd_min_s * 1e3,
               r->bwd_max_s * 1e3, s->tf_bwd, s->tf_fb);
    else
        printf(" %10s %10s %10s %9s %9s", "-", "-", "-", "-", "-");
    printf(" %7s\n", s->check);
    fflush(stdout);
}

/* --csv: the header line (before the first row), then one row per job. */
static void csv_row(const struct opts *o, const struct job_params *p, const struct job_result *r,
                    const struct summary *s, int first)
{
    FILE *f = o->csv_f;
    if (first)
        fprintf(f, "seq,dtype,head_dim,batch,heads,kv_heads,ranks,rank_mode,backend,fabric,"
                   "causal,layout,bwd,iters,fwd_ms,fwd_ms_min,fwd_ms_max,bwd_ms,bwd_ms_min,"
                   "bwd_ms_max,tflops_fwd,tflops_bwd,tflops_fwd_bwd,check\n");
    fprintf(f, "%lld,%s,%d,%lld,%d,%d,%d,%s,\"%s\",%s,%d,%s,%s,%d,%.6g,%.6g,%.6g,",
            (long long)p->seq_len, dtype_names[p->dtype], p->head_dim, (long long)p->batch,
            p->q_heads, p->kv_heads, p->ranks, r->rank_mode, r->backend, r->fabric, p->causal,
            layout_names[p->layout], p->run_bwd ? bwd_names[r->bwd_used] : "none", r->iters_done,
            r->fwd_s * 1e3, r->fwd_min_s * 1e3, r->fwd_max_s * 1e3);
    if (p->run_bwd)
        fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%s\n", r->bwd_s * 1e3, r->bwd_min_s * 1e3,
                r->bwd_max_s * 1e3, s->tf_fwd, s->tf_bwd, s->tf_fb, s->check);
    else
        fprintf(f, ",,,%.6g,,,%s\n", s->tf_fwd, s->check);
    fflush(f);
}

static int run_job(struct opts *o, struct job_result *r);

/* One job: the header first (table), then its table or JSON object, and its --csv row. On a
 * failure --json still prints one object, with the error member. */
static int run_single(struct opts *o, struct job_result *r)
{
    if (!o->json)
        print_header(o);
    int rc = run_job(o, r);
    if (rc == 0) {
        rc = report(o, r);
        if (o->csv_f) {
            struct summary s;
            summarise(&o->jp, r, &s);
            csv_row(o, &o->jp, r, &s, 1);
        }
    } else if (o->json) {
        printf("{");
        meta_json_fields(stdout, 1);
        json_error(rc, r->message);
        printf("}\n");
    }
    return rc;
}

/* Every point of the sweep in turn: a row each (table), a member of "results" each (JSON), a
 * --csv row each. A failed check goes on (exit 1 at the end); any other failure stops. */
static int run_sweep(struct opts *o, struct job_result *r)
{
    int rc = 0, n = sweep_points(o);
    struct job_params base = o->jp;
    if (o->json) {
        printf("{");
        meta_json_fields(stdout, 1);
        printf(", \"results\": [");
    } else {
        print_header(o);
        print_sweep_columns(o);
    }
    for (int i = 0; i < n && (rc == 0 || rc == EXIT_CHECK_FAILED); i++) {
        o->jp = base;
        sweep_point(o, i, &o->jp);
        check_problem(o, &o->jp);
        job_result_free(r);
        memset(r, 0, sizeof(*r));
        int jrc = run_job(o, r);
        if (jrc != 0) {
            rc = jrc;
            break;
        }
        struct summary s;
        summarise(&o->jp, r, &s);
        if (o->json) {
            printf("%s{", i ? ", " : "");
            print_json_job(o, &o->jp, r, &s);
            printf("}");
            fflush(stdout);
        } else {
            print_row(&o->jp, r, &s);
        }
        if (o->csv_f)
            csv_row(o, &o->jp, r, &s, i == 0);
        rc = !strcmp(s.check, "fail") ? EXIT_CHECK_FAILED : rc;
    }
    if (o->json) {
        printf("]");
        if (rc)
            json_error(rc, rc == EXIT_CHECK_FAILED ? CHECK_FAILED_MSG : r->message);
        printf("}\n");
    }
    o->jp = base;
    return rc;
}

static int run_processes(struct opts *o, struct job_result *r)
{
    char self[4096];
    if (self_exe(self, sizeof(self)) != 0)
        return EXIT_RUNTIME;
    struct launch_opts lo = {
        .self = self,
        .backend = o->backend,
        .num_threads = o->num_threads_list,
        .device = o->device_list,
        .fabric = o->fabric,
        .iface = o->iface,
        .timeout_s = o->timeout_s,
        .json = o->json,
        .verbose = o->verbose,
        .kill = o->kill,
        .bind = (enum launch_bind)o->bind,
    };
    int sig = 0;
    int rc = launch_run(&o->jp, &lo, r, &sig);
    if (rc == JOB_OK)
        return 0;
    fprintf(stderr, "%s: %s\n", prog, r->message);
    if (rc == LAUNCH_EINTR)
        return 128 + sig;
    return rc == JOB_EUSAGE ? EXIT_USAGE : EXIT_RUNTIME;
}

/* Is arg ("--x" or "--x=v") one of the flags for the launcher alone, not for the ranks? */
static int launcher_flag(const char *arg)
{
    static const char *const own[] = {"--hosts", "--hostfile", "--bind-to", "--mpirun-args"};
    size_t len = strcspn(arg, "=");
    for (size_t k = 0; k < sizeof(own) / sizeof(own[0]); k++)
        if (strlen(own[k]) == len && !strncmp(arg, own[k], len))
            return 1;
    return 0;
}

/* --hosts / --hostfile: the job's own arguments (without the launcher's) for every rank, then
 * mpirun. */
static int run_mpirun(const struct opts *o, int argc, char **argv)
{
    char self[4096];
    if (self_exe(self, sizeof(self)) != 0)
        return EXIT_RUNTIME;
    char **args = calloc((size_t)argc + 4, sizeof(char *));
    if (!args)
        return EXIT_RUNTIME;
    int na = 0;
    for (int i = 1; i < argc; i++) {
        if (launcher_flag(argv[i])) {
            i += !strchr(argv[i], '='); /* and its value */
            continue;
        }
        args[na++] = argv[i];
    }
    char nbuf[24];
    snprintf(nbuf, sizeof(nbuf), "--ranks=%d", o->jp.ranks);
    if (!o->ranks_given)
        args[na++] = nbuf;
    if (!o->fabric_given)
        args[na++] = "--fabric=auto";
    struct launch_mpi_opts mo = {o->hosts, o->hostfile, launch_bind_names[o->bind], o->mpirun_args,
                                 o->verbose};
    int rc = launch_mpi_run(prog, self, o->jp.ranks, &mo, args, na);
    free(args);
    return rc;
}

/* MPI, then PMIx (when initialized): the reverse order of rank_launch_init. */
static void rank_launch_finalize(void)
{
    launch_mpi_finalize();
    launch_pmix_finalize();
}

/* The launch environment of a rank started by mpirun, by precedence: --launcher pmix or mpi as
 * given, else (auto) MPI. PMIx: rank, size and the bootstrap exchange from the launcher's PMIx
 * server, initialized before MPI, whose MPI_COMM_WORLD must agree (the results still reach rank
 * 0 through MPI). Rank 0 names the one used (--verbose: on stderr; always in the report). */
static int rank_launch_init(const struct opts *o, int *rank_p, int *size_p)
{
    int prank = -1, psize = 0;
    if (o->launcher == LAUNCHER_PMIX && launch_pmix_init(prog, &prank, &psize) != 0)
        return -1;
    if (launch_mpi_init(rank_p, size_p) != 0) {
        launch_pmix_finalize();
        return -1;
    }
    if (o->launcher == LAUNCHER_PMIX && (prank != *rank_p || psize != *size_p)) {
        fprintf(
            stderr,
            "%s: rank %d: PMIx gives rank %d of %d but MPI_COMM_WORLD rank %d of %d (--launcher "
            "pmix needs the launcher's PMIx job to be MPI_COMM_WORLD)\n",
            prog, *rank_p, prank, psize, *rank_p, *size_p);
        rank_launch_finalize();
        return -1;
    }
    snprintf(g_launch_used, sizeof(g_launch_used), "%s",
             o->launcher == LAUNCHER_PMIX
                 ? "PMIx (--launcher pmix: rank, size and fabric addresses from the launcher's "
                   "PMIx server)"
             : o->launcher == LAUNCHER_MPI
                 ? "MPI (--launcher mpi: MPI_COMM_WORLD's rank, size and allgather)"
                 : "MPI (--launcher auto: MPI_COMM_WORLD's rank, size and allgather)");
    if (o->verbose && *rank_p == 0)
        fprintf(stderr, "%s: ranks joined through %s\n", prog, g_launch_used);
    return 0;
}

/* A rank started by mpirun (--mpi-rank-worker ARGS): run like a local rank process on a private
 * arena, merge the arenas into rank 0, which reports for the job (tools/launch_mpi.h). */
static int mpi_rank_main(int argc, char **argv)
{
    int rank = 0, size = 0;
    struct opts o;
    in_mpi_worker = 1;
    parse_args(argc - 1, argv + 1, &o); /* argv[1], "--mpi-rank-worker", stands for argv[0] */
    o.mpi_worker = 1;
    if (rank_launch_init(&o, &rank, &size) != 0)
        return EXIT_RUNTIME;
    if (size != o.jp.ranks) {
        fprintf(stderr, "%s: rank %d: mpirun started %d ranks, the job has -n %d\n", prog, rank,
                size, o.jp.ranks);
        rank_launch_finalize();
        return EXIT_USAGE;
    }
    struct job_arena_hdr h;
    char msg[256];
    uint64_t bytes = job_arena_layout(&o.jp, &h, msg, sizeof(msg));
    if (!bytes) {
        fprintf(stderr, "%s: rank %d: %s\n", prog, rank, msg);
        rank_launch_finalize();
        return EXIT_USAGE;
    }
    snprintf(h.backend, sizeof(h.backend), "%s", o.backend);
    snprintf(h.num_threads, sizeof(h.num_threads), "%s", o.num_threads_list);
    snprintf(h.device, sizeof(h.device), "%s", o.device_list);
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); /* ranks on this host share its cores */
    long env_threads = 0; /* BURST_NUM_THREADS unset: the host's ranks share its cores */
    if (!strcmp(h.num_threads, "0") &&
        burst_setting_long("BURST_NUM_THREADS", &env_threads) == BURST_OK && env_threads == 0 &&
        ls && atoi(ls) > 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(h.num_threads, sizeof(h.num_threads), "%d",
                 ncpu > atoi(ls) ? (int)(ncpu / atoi(ls)) : 1);
    }
    h.kill = o.kill;
    int fd = memfd_create("burstrun-mpi-job", MFD_CLOEXEC);
    void *arena = MAP_FAILED;
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ||
        (arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        fprintf(stderr, "%s: rank %d: the job's %llu bytes: %s\n", prog, rank,
                (unsigned long long)bytes, strerror(errno));
        rank_launch_finalize();
        return EXIT_RUNTIME;
    }
    memcpy(arena, &h, sizeof(h));
    char v[32];
    snprintf(v, sizeof(v), "%d", rank);
    setenv("BURST_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", size);
    setenv("BURST_SIZE", v, 1);
    (void)burst_set_log_levels("warn"); /* the logger reads BURST_RANK again: its rank */
    setenv("BURST_FABRIC", o.fabric, 1);
    if (o.iface)
        setenv("BURST_IFACE", o.iface, 1);
    if (o.timeout_s) {
        snprintf(v, sizeof(v), "%d", o.timeout_s * 1000);
        setenv("BURST_TIMEOUT_MS", v, 1);
    }
    /* bootstrap "mpi": the library links no MPI, burstrun hands it MPI's allgather */
    struct burst_comm_params cp = burst_comm_params_default();
    cp.transport = "fabric";
    cp.rank = rank;
    cp.size = size;
    cp.fabric = o.fabric;
    const char *env_iface = NULL; /* text: never malformed */
    (void)burst_setting_string("BURST_IFACE", &env_iface);
    cp.iface = o.iface ? o.iface : env_iface;
    cp.timeout_ms = o.timeout_s ? o.timeout_s * 1000 : 0; /* 0: BURST_TIMEOUT_MS */
    cp.bootstrap = "mpi";
    cp.oob_allgather = o.launcher == LAUNCHER_PMIX ? launch_pmix_allgather : launch_mpi_allgather;
    job_worker_comm_params(&cp);
    int wrc = job_worker_main(dup(fd)); /* closes the fd it is given */
    job_worker_comm_params(NULL);
    close(fd);
    int rc = wrc == 0 ? 0 : wrc == JOB_EUSAGE ? EXIT_USAGE : EXIT_RUNTIME;
    if (launch_mpi_merge(arena, bytes) != 0) { /* rank 0 cannot report: this rank's own words */
        const struct job_slot *sl = job_arena_slots(arena) + rank;
        fprintf(stderr, "%s: rank %d: merging the results into rank 0 failed%s%s\n", prog, rank,
                wrc != 0 && sl->message[0] ? "; " : "", wrc != 0 ? sl->message : "");
        rc = EXIT_RUNTIME;
    } else if (rank == 0) {
        struct job_result *r = calloc(1, sizeof(*r));
        if (r && job_arena_collect(arena, r) == JOB_OK) {
            if (report(&o, r) != 0)
                rc = EXIT_CHECK_FAILED;
        } else {
            fprintf(stderr, "%s: %s\n", prog, r ? r->message : "out of memory");
            rc = rc ? rc : EXIT_RUNTIME;
        }
        if (r)
            job_result_free(r);
        free(r);
    }
    munmap(arena, bytes);
    fflush(NULL);
    rank_launch_finalize();
    return rc;
}

/* --threads: one context per distinct (backend, threads, device) entry, shared by its ranks.
 * The job's exit status (0, EXIT_USAGE, EXIT_RUNTIME); r filled, its message set on failure. */
static int run_threads(struct opts *o, struct job_result *r)
{
    int G = o->jp.ranks, nctx = 0, rc = 0;
    struct burst_context **ctxs = calloc((size_t)G, sizeof(*ctxs));
    struct burst_context **own = calloc((size_t)G, sizeof(*own));
    int *own_rank = calloc((size_t)G, sizeof(int));
    if (!ctxs || !own || !own_rank) {
        fprintf(stderr, "%s: out of memory\n", prog);
        rc = EXIT_RUNTIME;
        goto threads_out;
    }
    for (int rk = 0; rk < G; rk++) {
        char be[64], nt[32], dv[64], be2[64], nt2[32], dv2[64];
        job_list_entry(o->backend, rk, be, sizeof(be));
        job_list_entry(o->num_threads_list, rk, nt, sizeof(nt));
        job_list_entry(o->device_list, rk, dv, sizeof(dv));
        for (int c = 0; c < nctx && !ctxs[rk]; c++) {
            job_list_entry(o->backend, own_rank[c], be2, sizeof(be2));
            job_list_entry(o->num_threads_list, own_rank[c], nt2, sizeof(nt2));
            job_list_entry(o->device_list, own_rank[c], dv2, sizeof(dv2));
            if (!strcmp(be, be2) && atoi(nt) == atoi(nt2) && !strcmp(dv, dv2))
                ctxs[rk] = own[c];
        }
        if (ctxs[rk])
            continue;
        struct burst_context_params cp = burst_context_params_default();
        cp.backend = be;
        cp.num_threads = atoi(nt);
        if (dv[0])
            cp.device = dv;
        burst_status_t st = burst_context_create(&cp, &own[nctx]);
        if (st != BURST_OK) {
            snprintf(r->message, sizeof(r->message),
                     "rank %d: backend \"%s\" (--backend%s %s): %s: %s", rk, be,
                     o->backends_given ? "s" : "", o->backend, burst_status_str(st),
                     burst_last_error());
            fprintf(stderr, "%s: %s\n", prog, r->message);
            rc = st == BURST_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_RUNTIME;
            goto threads_out;
        }
        own_rank[nctx] = rk;
        ctxs[rk] = own[nctx++];
    }
    rc = job_run(&o->jp, ctxs, r);
    if (rc != JOB_OK) {
        fprintf(stderr, "%s: %s\n", prog, r->message);
        rc = rc == JOB_EUSAGE ? EXIT_USAGE : EXIT_RUNTIME;
        goto threads_out;
    }
threads_out:
    for (int c = 0; c < nctx; c++)
        burst_context_destroy(own[c]);
    free(ctxs);
    free(own);
    free(own_rank);
    return rc;
}

/* One job, as rank processes or threads: its exit status (0, EXIT_USAGE, EXIT_RUNTIME, 128 +
 * signal); r filled (r->message says why on failure). */
static int run_job(struct opts *o, struct job_result *r)
{
    return o->threads ? run_threads(o, r) : run_processes(o, r);
}

/* One job, or every point of a sweep (tools/sweep.h): the table, rows or JSON, and --csv. */
static int run_jobs(struct opts *o)
{
    if (o->csv && strcmp(o->csv, "-") != 0 && !(o->csv_f = fopen(o->csv, "w")))
        die_usage("--csv %s: %s", o->csv, strerror(errno));
    if (o->csv && !o->csv_f)
        o->csv_f = stdout;
    struct job_result *r = calloc(1, sizeof(*r));
    if (!r) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return EXIT_RUNTIME;
    }
    int rc = sweep_points(o) > 1 ? run_sweep(o, r) : run_single(o, r);
    job_result_free(r);
    free(r);
    if (o->csv_f && o->csv_f != stdout && fclose(o->csv_f) != 0 && !rc) {
        fprintf(stderr, "%s: --csv %s: %s\n", prog, o->csv, strerror(errno));
        rc = EXIT_RUNTIME;
    }
    return rc;
}

/* --probe: every backend's devices (burst_probe), then the transports (tools/probe_net.h). */
static int run_probe(const struct opts *o)
{
    struct burst_context_params cp = burst_context_params_default();
    cp.num_threads = o->num_threads;
    char *report;
    burst_status_t st = burst_probe(&cp, o->json, &report);
    if (st != BURST_OK) {
        fprintf(stderr, "%s: --probe: %s: %s\n", prog, burst_status_str(st), burst_last_error());
        return EXIT_RUNTIME;
    }
    size_t len = strlen(report);
    while (o->json && len && report[len - 1] == '\n')
        len--;
    if (o->json && len && report[len - 1] == '}') /* the object's end: one more member */
        report[len - 1] = '\0';
    fputs(report, stdout);
    burst_free(report);
    if (o->json) { /* burst_probe's object, and the transports as one more member */
        printf(", \"transports\": ");
        probe_net_json(stdout);
        printf("}\n");
    } else {
        probe_net_text(stdout);
    }
    return 0;
}

static int run(int argc, char **argv);

/* SIGPIPE is ignored (a reader that goes away must not kill burstrun silently, before it has
 * stopped its ranks): a failed write to stdout is reported, and exits 3 if nothing else did. */
int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    launch_fabric_env_defaults(); /* before anything loads libfabric */
    /* the library's warnings and errors on stderr unless BURST_LOG says otherwise (burst/log.h:
     * an embedding program's default is silence) */
    (void)burst_set_log_levels("warn");
    int rc = run(argc, argv);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "%s: writing to stdout failed: %s\n", prog,
                errno ? strerror(errno) : "a write error");
        return rc ? rc : EXIT_RUNTIME;
    }
    return rc;
}

static int run(int argc, char **argv)
{
    /* a rank process started by run_processes: --rank-worker FD */
    if (argc == 3 && strcmp(argv[1], "--rank-worker") == 0)
        return job_worker_main(atoi(argv[2]));
    struct opts o;
    if (argc >= 2 && strcmp(argv[1], "--mpi-rank-worker") == 0)
        return mpi_rank_main(argc, argv);
    for (int i = 1; i < argc; i++)
        g_json_errors |= !strcmp(argv[i], "--json");
    parse_args(argc, argv, &o);
    if (o.hosts || o.hostfile)
        return run_mpirun(&o, argc, argv);
    if (o.probe)
        return run_probe(&o);
    if (o.pingpong) {
        struct pingpong_opts po = {o.fabric, o.iface, o.timeout_s, o.iters_given ? o.jp.iters : 0,
                                   o.json};
        return pingpong_run(&po);
    }
    return run_jobs(&o);
}
