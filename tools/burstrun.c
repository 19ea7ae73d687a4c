/*
 * tools/burstrun.c - burstrun's entry point: run one distributed attention job (or a sweep of
 * them) and report time, TFLOP/s, traffic, memory and (with --check) the error against the fp64
 * reference. Here: its flags (one table, burstrun_flags, with a handler per flag) and how a job
 * runs, as rank processes, threads, a sweep or ranks under mpirun. What it prints of a finished
 * job is tools/burstrun_report.c; --help, --version, --info and --probe are
 * tools/burstrun_help.c (burstrun_usage has every flag).
 */
#include <errno.h>
#include <fcntl.h>
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
#include "burstrun_help.h"
#include "burstrun_meta.h"
#include "burstrun_report.h"

static const char *const prog = "burstrun";

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
    burstrun_usage(stdout);
    exit(0);
}

static void opt_version(struct parse_state *s, const char *name, const char *val)
{
    burstrun_version(stdout);
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
        s->o->dtypes[e] = parse_choice(name, ent, burstrun_dtype_names, 3);
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
    s->p->layout = (burst_layout_t)parse_choice(name, val, burstrun_layout_names, 3);
}

static void opt_bwd(struct parse_state *s, const char *name, const char *val)
{
    s->p->bwd = (burst_bwd_pattern_t)parse_choice(name, val, burstrun_bwd_names, 3);
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
    FLAG_P("--fp8", fp8, 1),
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
                      (long long)p->seq_len, p->ranks, burstrun_layout_names[p->layout],
                      (long long)min);
    }
    if (p->head_dim % 8 || p->head_dim > 256)
        die_usage("bad value for --head-dim: '%d' (expected a multiple of 8 in 8..256)",
                  p->head_dim);
    if (p->fp8 && p->run_bwd)
        die_usage("--fp8 runs the forward alone: add --fwd-only");
    if (p->fp8 && p->dtype == BURST_DTYPE_FP32)
        die_usage("--fp8 quantizes fp16 or bf16 inputs (--dtype fp32 given)");
    int64_t min_seq = p->layout == BURST_LAYOUT_ZIGZAG ? 2 * (int64_t)p->ranks : p->ranks;
    if (p->seq_len < min_seq)
        die_usage("--seq %lld is too short: need at least %lld tokens for -n %d with layout %s",
                  (long long)p->seq_len, (long long)min_seq, p->ranks,
                  burstrun_layout_names[p->layout]);
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
    if (sweep_points(o) > 1 || o->csv || p->sinks || p->softcap > 0 || p->fp8 || p->num_docs ||
        p->docs_random || p->window_left >= 0 || p->window_right >= 0 ||
        p->weights_mode != JOB_WEIGHTS_EVEN || p->mismatch_rank >= 0 || o->kill.rank >= 0)
        die_usage("--decode runs one causal inference job: not with sweeps, --csv, --sinks, "
                  "--softcap, --fp8, --docs, --window, --weights or the test flags");
    if (p->batch > 65536)
        die_usage("--batch %lld: an inference job takes at most 65536 sequences",
                  (long long)p->batch);
    int64_t min = p->layout == BURST_LAYOUT_ZIGZAG ? 2 * (int64_t)p->ranks : p->ranks;
    if (p->kv_prefill < min)
        die_usage("--prefill %lld is too short: the prompt is sharded over -n %d ranks in layout "
                  "%s (needs at least %lld tokens)",
                  (long long)p->kv_prefill, p->ranks, burstrun_layout_names[p->layout],
                  (long long)min);
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
    if (o->info)
        exit(burstrun_info(o->json) ? EXIT_RUNTIME : 0);
    check_flags(&s);
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

/* ---- running jobs ---- */

/* What the report (tools/burstrun_report.h) shows of the options. */
static struct report_opts report_opts_of(const struct opts *o)
{
    struct report_opts ro = {
        .json = o->json,
        .threads = o->threads,
        .mpi_worker = o->mpi_worker,
        .seed_given = o->seed_given,
        .default_job = o->default_job,
        .verbose = o->verbose,
        .backend = o->backend,
        .launch_used = g_launch_used,
        .csv = o->csv_f,
    };
    return ro;
}

static int run_job(struct opts *o, struct job_result *r);

/* One job: the header first (table), then its table or JSON object, and its --csv row. On a
 * failure --json still prints one object, with the error member. */
static int run_single(struct opts *o, struct job_result *r)
{
    struct report_opts ro = report_opts_of(o);
    if (!o->json)
        report_header(&ro, &o->jp);
    int rc = run_job(o, r);
    if (rc == 0) {
        rc = report_job(&ro, &o->jp, r);
        if (o->csv_f)
            report_csv_row(o->csv_f, &o->jp, r, 1);
    } else if (o->json) {
        report_json_failure(rc, r->message);
    }
    return rc;
}

/* Every point of the sweep in turn: a row each (table), a member of "results" each (JSON), a
 * --csv row each. A failed check goes on (exit 1 at the end); any other failure stops. */
static int run_sweep(struct opts *o, struct job_result *r)
{
    int rc = 0, n = sweep_points(o);
    struct job_params base = o->jp;
    struct report_opts ro = report_opts_of(o);
    report_sweep_begin(&ro, &o->jp);
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
        if (report_sweep_point(&ro, &o->jp, r, i) != 0)
            rc = EXIT_CHECK_FAILED;
    }
    report_sweep_end(&ro, rc, r->message);
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
            struct report_opts ro = report_opts_of(&o);
            if (report_job(&ro, &o.jp, r) != 0)
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
        return burstrun_probe(o.num_threads, o.json) ? EXIT_RUNTIME : 0;
    if (o.pingpong) {
        struct pingpong_opts po = {o.fabric, o.iface, o.timeout_s, o.iters_given ? o.jp.iters : 0,
                                   o.json};
        return pingpong_run(&po);
    }
    return run_jobs(&o);
}
