/*
 * tools/burstbench.c - CPU speed benchmark: forward and forward+backward GFLOP/s over a sweep of
 * sequence lengths, head dims and masks, each run checked against the fp64 reference on sampled
 * rows. Prints a table, writes CSV, and compares with the machine's fp32 FMA peak.
 * A program, not a test. See usage().
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "burst/burst.h"
#include "job.h"

#define MAX_LIST 16

static const char *const prog = "burstbench";

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: burstbench [options]\n"
        "\n"
        "Sweep ranks x dtype x N x d x mask, time forward and forward+backward (median of\n"
        "--iters runs; a run stops early once a configuration has used --max-seconds), check\n"
        "the forward on %d sampled rows against the fp64 reference every run, print a table,\n"
        "write CSV. GFLOP/s by the field's convention: forward 4*B*Hq*d*pairs (pairs = N^2,\n"
        "about N^2/2 causal, counted exactly), fwd+bwd 3.5x forward.\n"
        "\n"
        "  --ranks LIST        ranks as threads of one process (default 1)\n"
        "  --seqs LIST         sequence lengths (default 4096,16384)\n"
        "  --dims LIST         head dims (default 64,128)\n"
        "  --masks LIST        full,causal (default both)\n"
        "  --dtypes LIST       fp32,fp16,bf16 (default fp32)\n"
        "  --layout L          natural | zigzag | striped (default zigzag)\n"
        "  --batch B           (default 1)\n"
        "  --heads H           query heads (default 4)\n"
        "  --kv-heads H        key/value heads (default: heads)\n"
        "  --iters K           timed runs per configuration (default 3)\n"
        "  --warmup W          untimed runs first; -1 = 1 below 50 GFLOP of fwd+bwd work, else 0\n"
        "                      (default -1)\n"
        "  --max-seconds S     stop timing a configuration after S seconds (default 20)\n"
        "  --fwd-only          skip the backward\n"
        "  --num-threads T     compute threads (default: all cores / BURST_NUM_THREADS)\n"
        "  --peak-gflops X     fp32 peak of this machine (default: cores * 2 FMA units *\n"
        "                      lanes of the dispatched kernels * 2 * GHz, from /proc/cpuinfo)\n"
        "  --csv PATH          CSV output (default burstbench.csv; '-' for none)\n"
        "  --seed S            input seed (default 1)\n"
        "  --min-cpu P         on a shared machine: run a configuration again (up to --retries\n"
        "                      times, default 3) while its cpu%% is below P (default 0 = off)\n"
        "  --quick             a smoke sweep: --seqs 1024,2048 --iters 1\n"
        "  --docs SPEC         packed documents (L1,L2,... summing to each --seqs value, or\n"
        "                      random:K drawn from --seed): each configuration runs four ways,\n"
        "                      packed (one plan with the documents), one by one (each document\n"
        "                      its own job on the same ring, times summed; documents too short\n"
        "                      for the ring run on fewer ranks), unpacked (one sequence of the\n"
        "                      same length, no documents) and equal-work (one sequence with as\n"
        "                      many allowed pairs as the packed batch); GFLOP/s count allowed\n"
        "                      pairs, and each row's ratio is its fwd+bwd GFLOP/s over the\n"
        "                      packed row's\n"
        "  -h, --help\n"
        "\n"
        "cpu%% = process cpu time / (wall time x compute threads) over the timed runs: well\n"
        "below 100%% means other processes took the cores, and the row is not trustworthy.\n"
        "\n"
        "Exit status: 0 every forward check passed, 1 a check failed, 2 usage, 3 runtime error.\n",
        JOB_FWD_SAMPLE_ROWS);
}

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s --help)\n", prog);
    exit(2);
}

static int64_t parse_int(const char *flag, const char *val, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(val, &end, 10);
    if (errno || end == val || *end || x < lo || x > hi)
        die_usage("bad value for %s: '%s' (expected an integer in [%lld, %lld])", flag, val,
                  (long long)lo, (long long)hi);
    return (int64_t)x;
}

/* Comma-separated list: integers, or names (index into names). */
static int parse_list(const char *flag, const char *val, int64_t *out, const char *const *names,
                      int nnames, int64_t lo, int64_t hi)
{
    char buf[512];
    if (strlen(val) >= sizeof(buf) || !*val)
        die_usage("bad value for %s: '%s'", flag, val);
    strcpy(buf, val);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n >= MAX_LIST)
            die_usage("%s: at most %d values", flag, MAX_LIST);
        if (names) {
            int k = -1;
            for (int i = 0; i < nnames; i++)
                if (strcmp(tok, names[i]) == 0)
                    k = i;
            if (k < 0)
                die_usage("bad value for %s: '%s'", flag, tok);
            out[n++] = k;
        } else {
            out[n++] = parse_int(flag, tok, lo, hi);
        }
    }
    return n;
}

/* ---- machine ---- */

struct machine {
    char model[128];
    int cpus;
    double mhz;
    int avx2, fma, avx512f;
};

static void read_machine(struct machine *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->model, sizeof(m->model), "unknown");
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    m->cpus = n > 0 ? (int)n : 1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[8192];
    while (fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        v[strcspn(v, "\n")] = 0;
        if (strncmp(line, "model name", 10) == 0) {
            snprintf(m->model, sizeof(m->model), "%s", v);
        } else if (strncmp(line, "cpu MHz", 7) == 0) {
            double x = atof(v);
            m->mhz = x > m->mhz ? x : m->mhz;
        } else if (strncmp(line, "flags", 5) == 0) {
            char *save = NULL;
            for (char *t = strtok_r(v, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                m->avx2 |= strcmp(t, "avx2") == 0;
                m->fma |= strcmp(t, "fma") == 0;
                m->avx512f |= strcmp(t, "avx512f") == 0;
            }
        }
    }
    fclose(f);
}

/* The fp32 lanes and name of the cpu kernels the backend dispatches (burst_probe's cpu entry:
 * "isa", "vector_fp32_lanes"); 0 lanes when the probe does not say. */
static int kernel_lanes(const struct burst_context_params *cp, char *isa, size_t isa_size)
{
    char *report = NULL;
    int lanes = 0;
    snprintf(isa, isa_size, "unknown");
    if (burst_probe(cp, 1, &report) != BURST_OK || !report)
        return 0;
    const char *cpu = strstr(report, "\"backend\": \"cpu\"");
    const char *l = cpu ? strstr(cpu, "\"vector_fp32_lanes\": ") : NULL;
    const char *n = cpu ? strstr(cpu, "\"isa\": \"") : NULL;
    if (l)
        lanes = atoi(l + strlen("\"vector_fp32_lanes\": "));
    if (n) {
        n += strlen("\"isa\": \"");
        size_t len = strcspn(n, "\"");
        snprintf(isa, isa_size, "%.*s", (int)(len < isa_size ? len : isa_size - 1), n);
    }
    burst_free(report);
    return lanes;
}

/* ---- main ---- */

static const char *const dtype_names[] = {"fp32", "fp16", "bf16"};
static const char *const layout_names[] = {"natural", "zigzag", "striped"};
static const char *const mask_names[] = {"full", "causal"};

/* The sweep as the flags give it, and what every configuration's row needs. */
struct bench {
    int64_t ranks[MAX_LIST], seqs[MAX_LIST], dims[MAX_LIST], masks[MAX_LIST], dtypes[MAX_LIST];
    int nranks, nseqs, ndims, nmasks, ndtypes;
    int batch, heads, kv_heads, iters, warmup, num_threads, run_bwd, retries;
    double max_seconds, peak_gflops, min_cpu;
    const char *csv_path;
    const char *docs; /* --docs SPEC, or NULL */
    uint64_t seed;
    burst_layout_t layout;
    /* set once the context exists */
    struct burst_context *ctx;
    int threads, peak_given;
    char isa[32];
    struct machine m;
    FILE *csv;
};

/* One flag with its value (a is the flag, v its value). */
static void bench_flag(struct bench *b, const char *a, const char *v)
{
    if (!strcmp(a, "--ranks"))
        b->nranks = parse_list(a, v, b->ranks, NULL, 0, 1, 1024);
    else if (!strcmp(a, "--seqs"))
        b->nseqs = parse_list(a, v, b->seqs, NULL, 0, 1, INT64_C(1) << 32);
    else if (!strcmp(a, "--dims"))
        b->ndims = parse_list(a, v, b->dims, NULL, 0, 8, 256);
    else if (!strcmp(a, "--masks"))
        b->nmasks = parse_list(a, v, b->masks, mask_names, 2, 0, 0);
    else if (!strcmp(a, "--dtypes"))
        b->ndtypes = parse_list(a, v, b->dtypes, dtype_names, 3, 0, 0);
    else if (!strcmp(a, "--layout")) {
        int64_t l[MAX_LIST];
        if (parse_list(a, v, l, layout_names, 3, 0, 0) != 1)
            die_usage("--layout takes one value");
        b->layout = (burst_layout_t)l[0];
    } else if (!strcmp(a, "--batch"))
        b->batch = (int)parse_int(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--heads"))
        b->heads = (int)parse_int(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--kv-heads"))
        b->kv_heads = (int)parse_int(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--iters"))
        b->iters = (int)parse_int(a, v, 1, 1000);
    else if (!strcmp(a, "--warmup"))
        b->warmup = (int)parse_int(a, v, -1, 1000);
    else if (!strcmp(a, "--max-seconds"))
        b->max_seconds = (double)parse_int(a, v, 0, 1 << 20);
    else if (!strcmp(a, "--num-threads"))
        b->num_threads = (int)parse_int(a, v, 0, 1 << 16);
    else if (!strcmp(a, "--peak-gflops")) {
        char *end;
        b->peak_gflops = strtod(v, &end);
        if (end == v || *end || !(b->peak_gflops > 0))
            die_usage("bad value for --peak-gflops: '%s'", v);
    } else if (!strcmp(a, "--min-cpu"))
        b->min_cpu = (double)parse_int(a, v, 0, 100);
    else if (!strcmp(a, "--retries"))
        b->retries = (int)parse_int(a, v, 0, 100);
    else if (!strcmp(a, "--csv"))
        b->csv_path = v;
    else if (!strcmp(a, "--seed"))
        b->seed = (uint64_t)parse_int(a, v, 0, INT64_MAX);
    else if (!strcmp(a, "--docs")) {
        struct job_params p;
        char msg[256];
        memset(&p, 0, sizeof(p));
        if (job_docs_parse(v, &p, msg, sizeof(msg)) != 0)
            die_usage("%s", msg);
        b->docs = v;
    }
}

/* The defaults, then every flag; exits on --help and on a usage error. */
static void bench_args(struct bench *b, int argc, char **argv)
{
    *b = (struct bench){.ranks = {1},
                        .seqs = {4096, 16384},
                        .dims = {64, 128},
                        .masks = {0, 1},
                        .dtypes = {BURST_DTYPE_FP32},
                        .nranks = 1,
                        .nseqs = 2,
                        .ndims = 2,
                        .nmasks = 2,
                        .ndtypes = 1,
                        .batch = 1,
                        .heads = 4,
                        .iters = 3,
                        .warmup = -1,
                        .run_bwd = 1,
                        .max_seconds = 20.0,
                        .retries = 3,
                        .csv_path = "burstbench.csv",
                        .seed = 1,
                        .layout = BURST_LAYOUT_ZIGZAG};
    static const char *const valued[] = {
        "--ranks",  "--seqs",        "--dims",        "--masks",       "--dtypes",
        "--layout", "--batch",       "--heads",       "--kv-heads",    "--iters",
        "--warmup", "--max-seconds", "--num-threads", "--peak-gflops", "--csv",
        "--seed",   "--min-cpu",     "--retries",     "--docs"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--quick")) {
            b->seqs[0] = 1024;
            b->seqs[1] = 2048;
            b->nseqs = 2;
            b->iters = 1;
            continue;
        }
        if (!strcmp(a, "--fwd-only")) {
            b->run_bwd = 0;
            continue;
        }
        int known = 0;
        for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]); k++)
            known |= !strcmp(a, valued[k]);
        if (!known)
            die_usage("unknown option '%s'", a);
        if (i + 1 >= argc)
            die_usage("option %s needs a value", a);
        bench_flag(b, a, argv[++i]);
    }
    if (b->kv_heads == 0)
        b->kv_heads = b->heads;
    if (b->heads % b->kv_heads)
        die_usage("--kv-heads %d must divide --heads %d", b->kv_heads, b->heads);
    for (int i = 0; i < b->ndims; i++)
        if (b->dims[i] % 8)
            die_usage("bad value in --dims: %lld (expected a multiple of 8 in 8..256)",
                      (long long)b->dims[i]);
}

/* The machine, the peak the rows are compared with, and the sweep's settings. */
static void bench_header(struct bench *b, const struct burst_context_params *cp)
{
    read_machine(&b->m);
    const struct machine *m = &b->m;
    int cores = b->threads < m->cpus ? b->threads : m->cpus;
    int lanes = kernel_lanes(cp, b->isa, sizeof(b->isa));
    if (lanes <= 0) /* no probe answer: what the cpu's flags allow */
        lanes = m->avx512f ? 16 : (m->avx2 || m->fma) ? 8 : 4;
    b->peak_given = b->peak_gflops > 0;
    if (!b->peak_given)
        b->peak_gflops = cores * 2.0 * lanes * 2.0 * m->mhz / 1000.0;
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M", localtime(&now));
    printf("burstbench %s, %s\n", burst_version_string(), date);
    printf("machine: %s, %d online cpus, %.0f MHz, avx2 %s, fma %s, avx512f %s\n", m->model,
           m->cpus, m->mhz, m->avx2 ? "yes" : "no", m->fma ? "yes" : "no",
           m->avx512f ? "yes" : "no");
    if (b->peak_given)
        printf("fp32 peak: %.1f GFLOP/s (--peak-gflops)\n", b->peak_gflops);
    else
        printf("fp32 peak: %.1f GFLOP/s = %d cores x 2 FMA units x %d lanes (kernels %s) x 2 x "
               "%.3f GHz%s\n",
               b->peak_gflops, cores, lanes, b->isa, m->mhz / 1000.0,
               strncmp(b->isa, "avx512", 6) == 0 ? "; head dims not a multiple of 16: avx2, half"
                                                 : "");
    printf("backend %s, %d compute threads; B=%d Hq=%d Hkv=%d, layout %s, median of up to %d "
           "runs (max %.0f s per configuration)\n\n",
           burst_context_backend(b->ctx), b->threads, b->batch, b->heads, b->kv_heads,
           layout_names[b->layout], b->iters, b->max_seconds);
}

/* The CSV file and its header ("-": none). 0, or -1 when it cannot be written. */
static int bench_csv(struct bench *b)
{
    if (strcmp(b->csv_path, "-") == 0)
        return 0;
    b->csv = fopen(b->csv_path, "w");
    if (!b->csv) {
        fprintf(stderr, "%s: --csv %s: %s\n", prog, b->csv_path, strerror(errno));
        return -1;
    }
    fprintf(b->csv, "ranks,dtype,seq,head_dim,causal,batch,heads,kv_heads,layout,threads,iters,"
                    "fwd_ms,fwd_gflops,fwd_pct_peak,fwd_bwd_ms,fwd_bwd_gflops,fwd_bwd_pct_peak,"
                    "bytes_fwd_per_rank,bytes_bwd_per_rank,fwd_rel_err,check,peak_gflops,"
                    "fwd_min_ms,fwd_bwd_min_ms,cpu_share,cpu_model\n");
    return 0;
}

/* The job of configuration c (the sweep's last axis varies fastest: masks, dims, seqs,
 * dtypes, ranks). */
static struct job_params bench_job(const struct bench *b, int c)
{
    int rest = c;
    int im = rest % b->nmasks;
    rest /= b->nmasks;
    int id = rest % b->ndims;
    rest /= b->ndims;
    int is = rest % b->nseqs;
    rest /= b->nseqs;
    int it = rest % b->ndtypes;
    int ir = rest / b->ndtypes;
    struct job_params p;
    memset(&p, 0, sizeof(p));
    p.ranks = (int)b->ranks[ir];
    p.batch = b->batch;
    p.seq_len = b->seqs[is];
    p.q_heads = b->heads;
    p.kv_heads = b->kv_heads;
    p.head_dim = (int)b->dims[id];
    p.dtype = (burst_dtype_t)b->dtypes[it];
    p.causal = (int)b->masks[im];
    p.window_left = -1;
    p.window_right = -1;
    p.layout = b->layout;
    p.bwd = BURST_BWD_BURST;
    p.run_bwd = b->run_bwd;
    p.iters = b->iters;
    p.warmup = b->warmup >= 0 ? b->warmup : (3.5 * job_fwd_flops(&p) < 50e9 ? 1 : 0);
    p.max_seconds = b->max_seconds;
    p.seed = b->seed;
    p.check_fwd = 1;
    p.mismatch_rank = -1;
    return p;
}

/* Run p (again, up to --retries, while the run had less than --min-cpu of its cores: the least
 * contended run is kept in r). */
static int bench_run(const struct bench *b, const struct job_params *p, struct job_result *r,
                     struct job_result *best)
{
    struct burst_context *ctxs[64]; /* every rank on the one context */
    for (int rk = 0; rk < p->ranks && rk < 64; rk++)
        ctxs[rk] = b->ctx;
    int rc = job_run(p, ctxs, r);
    for (int t = 0; rc == JOB_OK && r->cpu_share < b->min_cpu / 100.0 && t < b->retries; t++) {
        *best = *r;
        rc = job_run(p, ctxs, r);
        fprintf(stderr, "%s: N=%lld d=%d %s: cpu share %.0f%% < %.0f%%, ran it again: %.0f%%\n",
                prog, (long long)p->seq_len, p->head_dim, mask_names[p->causal],
                100.0 * best->cpu_share, b->min_cpu, rc == JOB_OK ? 100.0 * r->cpu_share : 0.0);
        if (rc == JOB_OK && r->cpu_share < best->cpu_share)
            *r = *best; /* keep the least contended run */
    }
    return rc;
}

/* One configuration's row of the table and of the CSV; whether its check passed. */
static int bench_row(const struct bench *b, const struct job_params *p, const struct job_result *r)
{
    double flops = job_fwd_flops(p);
    double rel = job_err_rel(&r->err[JOB_O], JOB_O);
    double rel_lse = job_err_rel(&r->err[JOB_LSE], JOB_LSE);
    rel = rel_lse > rel ? rel_lse : rel;
    int ok = rel <= job_tolerance(p);
    /* the AVX-512 kernels run head dims that are multiples of 16; the others run avx2 */
    double peak = !b->peak_given && strncmp(b->isa, "avx512", 6) == 0 && p->head_dim % 16 != 0
                      ? b->peak_gflops / 2.0
                      : b->peak_gflops;
    double gf = flops / r->fwd_s / 1e9;
    double fb_s = r->fwd_s + r->bwd_s;
    double gfb = b->run_bwd ? 3.5 * flops / fb_s / 1e9 : 0.0;
    printf("%5d %5s %6lld %4d %-6s %4d %10.1f %9.1f %5.1f%% ", p->ranks, dtype_names[p->dtype],
           (long long)p->seq_len, p->head_dim, mask_names[p->causal], r->iters_done, r->fwd_s * 1e3,
           gf, 100.0 * gf / peak);
    if (b->run_bwd)
        printf("%11.1f %9.1f %5.1f%% ", fb_s * 1e3, gfb, 100.0 * gfb / peak);
    else
        printf("%11s %9s %6s ", "-", "-", "-");
    printf("%10.2e %6s %4.0f%%\n", rel, ok ? "ok" : "FAIL", 100.0 * r->cpu_share);
    fflush(stdout);
    if (b->csv) {
        fprintf(b->csv,
                "%d,%s,%lld,%d,%d,%d,%d,%d,%s,%d,%d,%.3f,%.2f,%.2f,%.3f,%.2f,"
                "%.2f,%" PRIu64 ",%" PRIu64 ",%.3e,%s,%.1f,%.3f,%.3f,%.3f,\"%s\"\n",
                p->ranks, dtype_names[p->dtype], (long long)p->seq_len, p->head_dim, p->causal,
                b->batch, b->heads, b->kv_heads, layout_names[b->layout], b->threads, r->iters_done,
                r->fwd_s * 1e3, gf, 100.0 * gf / peak, b->run_bwd ? fb_s * 1e3 : 0.0, gfb,
                100.0 * gfb / peak, r->bytes_fwd, r->bytes_bwd, rel, ok ? "pass" : "fail", peak,
                r->fwd_min_s * 1e3, b->run_bwd ? (r->fwd_min_s + r->bwd_min_s) * 1e3 : 0.0,
                r->cpu_share, b->m.model);
        fflush(b->csv);
    }
    return ok;
}

/* ---- packed documents (--docs) ---- */

static const char *const docs_modes[] = {"packed", "one-by-one", "unpacked", "equal-work"};

/* What one way of running a --docs configuration took: times summed over its jobs. */
struct docs_time {
    double fwd_s, fwd_bwd_s, flops, rel, cpu;
    int jobs, ok;
};

/* Run job p (one of a way's jobs) and add it to t. JOB_OK or the job's status. */
static int docs_add_job(const struct bench *b, struct job_params *p, struct docs_time *t,
                        struct job_result *r, struct job_result *best)
{
    p->warmup = b->warmup >= 0 ? b->warmup : (3.5 * job_fwd_flops(p) < 50e9 ? 1 : 0);
    int rc = bench_run(b, p, r, best);
    if (rc != JOB_OK)
        return rc;
    double rel = job_err_rel(&r->err[JOB_O], JOB_O), rl = job_err_rel(&r->err[JOB_LSE], JOB_LSE);
    rel = rl > rel ? rl : rel;
    t->fwd_s += r->fwd_s;
    t->fwd_bwd_s += r->fwd_s + r->bwd_s;
    t->flops += job_fwd_flops(p);
    t->rel = rel > t->rel ? rel : t->rel;
    t->cpu = t->jobs == 0 || r->cpu_share < t->cpu ? r->cpu_share : t->cpu;
    t->ok &= rel <= job_tolerance(p);
    t->jobs++;
    return JOB_OK;
}

/* Way `mode` of configuration base (its documents resolved): 0 packed, 1 one by one,
 * 2 unpacked, 3 equal-work. */
static int docs_way(const struct bench *b, const struct job_params *base, int mode,
                    struct docs_time *t, struct job_result *r, struct job_result *best)
{
    struct job_params *q = malloc(sizeof(*q));
    if (!q)
        return JOB_EFAIL;
    *q = *base;
    int rc = JOB_OK;
    *t = (struct docs_time){.ok = 1};
    if (mode == 0) {
        rc = docs_add_job(b, q, t, r, best);
    } else if (mode == 1) {
        const int64_t per = base->layout == BURST_LAYOUT_ZIGZAG ? 2 : 1;
        for (int64_t d = 0; d < base->num_docs && rc == JOB_OK; d++) {
            *q = *base;
            q->num_docs = 0;
            q->docs_random = 0;
            q->seq_len = base->doc_lens[d];
            q->ranks = q->seq_len / per < base->ranks ? (int)(q->seq_len / per) : base->ranks;
            if (q->ranks < 1) { /* one token: one rank, natural */
                q->ranks = 1;
                q->layout = BURST_LAYOUT_NATURAL;
            }
            rc = docs_add_job(b, q, t, r, best);
        }
    } else {
        q->num_docs = 0;
        q->docs_random = 0;
        if (mode == 3) { /* as many allowed pairs as the packed batch: N^2, or N(N+1)/2 */
            double pairs = job_pairs(base);
            double n = base->causal ? (sqrt(8.0 * pairs + 1.0) - 1.0) / 2.0 : sqrt(pairs);
            int64_t min = (base->layout == BURST_LAYOUT_ZIGZAG ? 2 : 1) * (int64_t)base->ranks;
            q->seq_len = (int64_t)llround(n) > min ? (int64_t)llround(n) : min;
        }
        rc = docs_add_job(b, q, t, r, best);
    }
    free(q);
    return rc;
}

/* The table's and the CSV's rows of one configuration run four ways. */
static int docs_rows(struct bench *b, const struct job_params *base, struct job_result *r,
                     struct job_result *best)
{
    struct docs_time t[4];
    int ok = 1;
    for (int m = 0; m < 4; m++) {
        int rc = docs_way(b, base, m, &t[m], r, best);
        if (rc != JOB_OK) {
            printf("%5d %5s %7lld %4d %-6s %5lld %-10s  error: %s\n", base->ranks,
                   dtype_names[base->dtype], (long long)base->seq_len, base->head_dim,
                   mask_names[base->causal], (long long)base->num_docs, docs_modes[m], r->message);
            return -1;
        }
        const double gf = t[m].flops / t[m].fwd_s / 1e9;
        const double gfb = b->run_bwd ? 3.5 * t[m].flops / t[m].fwd_bwd_s / 1e9 : 0.0;
        const double gf0 = 3.5 * t[0].flops / t[0].fwd_bwd_s / 1e9;
        const double ratio = b->run_bwd ? gfb / gf0 : gf / (t[0].flops / t[0].fwd_s / 1e9);
        printf("%5d %5s %7lld %4d %-6s %5lld %-10s %5d %12.4g %10.2f %9.2f %11.2f %9.2f %6.3f "
               "%10.2e %6s %4.0f%%\n",
               base->ranks, dtype_names[base->dtype], (long long)base->seq_len, base->head_dim,
               mask_names[base->causal], (long long)base->num_docs, docs_modes[m], t[m].jobs,
               t[m].flops / (4.0 * base->batch * base->q_heads * base->head_dim), t[m].fwd_s * 1e3,
               gf, b->run_bwd ? t[m].fwd_bwd_s * 1e3 : 0.0, gfb, ratio, t[m].rel,
               t[m].ok ? "ok" : "FAIL", 100.0 * t[m].cpu);
        fflush(stdout);
        ok &= t[m].ok;
        if (b->csv) {
            fprintf(b->csv,
                    "%d,%s,%lld,%d,%d,%lld,%s,%d,%.6g,%.3f,%.3f,%.3f,%.3f,%.4f,%.3e,%s,%.3f,"
                    "%d,\"%s\"\n",
                    base->ranks, dtype_names[base->dtype], (long long)base->seq_len, base->head_dim,
                    base->causal, (long long)base->num_docs, docs_modes[m], t[m].jobs,
                    t[m].flops / (4.0 * base->batch * base->q_heads * base->head_dim),
                    t[m].fwd_s * 1e3, gf, b->run_bwd ? t[m].fwd_bwd_s * 1e3 : 0.0, gfb, ratio,
                    t[m].rel, t[m].ok ? "pass" : "fail", t[m].cpu, b->threads, b->m.model);
            fflush(b->csv);
        }
    }
    return ok;
}

/* --docs: every configuration of the sweep (masks, dims, seqs, dtypes, ranks) four ways.
 * 0 every check passed, 1 a check failed, 3 a job failed. */
static int docs_sweep(struct bench *b, struct job_result *r, struct job_result *best)
{
    if (b->csv)
        fprintf(b->csv, "ranks,dtype,seq,head_dim,causal,docs,mode,jobs,allowed_pairs,fwd_ms,"
                        "fwd_gflops,fwd_bwd_ms,fwd_bwd_gflops,ratio_to_packed,fwd_rel_err,check,"
                        "cpu_share,threads,cpu_model\n");
    printf("%5s %5s %7s %4s %-6s %5s %-10s %5s %12s %10s %9s %11s %9s %6s %10s %6s %5s\n", "ranks",
           "dtype", "N", "d", "mask", "docs", "mode", "jobs", "pairs", "fwd ms", "GFLOP/s",
           "fwd+bwd ms", "GFLOP/s", "ratio", "fwd relerr", "check", "cpu%");
    int nconf = b->nranks * b->ndtypes * b->nseqs * b->ndims * b->nmasks, all_ok = 1;
    struct job_params *p = malloc(sizeof(*p));
    if (!p)
        return 3;
    for (int c = 0; c < nconf; c++) {
        char msg[256];
        *p = bench_job(b, c);
        if (job_docs_parse(b->docs, p, msg, sizeof(msg)) != 0 ||
            job_docs_resolve(p, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "%s: N=%lld: %s\n", prog, (long long)p->seq_len, msg);
            free(p);
            return 2;
        }
        int ok = docs_rows(b, p, r, best);
        if (ok < 0) {
            free(p);
            return 3;
        }
        all_ok &= ok;
    }
    free(p);
    return all_ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct bench b;
    bench_args(&b, argc, argv);
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cpu";
    cp.num_threads = b.num_threads;
    burst_status_t st = burst_context_create(&cp, &b.ctx);
    if (st != BURST_OK) {
        fprintf(stderr, "%s: cpu backend: %s: %s\n", prog, burst_status_str(st),
                burst_last_error());
        return 3;
    }
    b.threads = burst_context_num_threads(b.ctx);
    bench_header(&b, &cp);
    if (b.docs) { /* packed documents against the same work run other ways */
        b.csv = strcmp(b.csv_path, "-") ? fopen(b.csv_path, "w") : NULL;
        if (strcmp(b.csv_path, "-") && !b.csv) {
            fprintf(stderr, "%s: --csv %s: %s\n", prog, b.csv_path, strerror(errno));
            burst_context_destroy(b.ctx);
            return 2;
        }
        struct job_result *r = calloc(1, sizeof(*r)), *best = calloc(1, sizeof(*best));
        int rc = r && best ? docs_sweep(&b, r, best) : 3;
        printf("\nratio: fwd+bwd GFLOP/s (allowed pairs) over the packed row's%s%s\n",
               b.csv ? "; CSV: " : "", b.csv ? b.csv_path : "");
        if (b.csv)
            fclose(b.csv);
        free(r);
        free(best);
        burst_context_destroy(b.ctx);
        return rc;
    }
    if (bench_csv(&b) != 0) {
        burst_context_destroy(b.ctx);
        return 2;
    }
    printf("%5s %5s %6s %4s %-6s %4s %10s %9s %6s %11s %9s %6s %10s %6s %5s\n", "ranks", "dtype",
           "N", "d", "mask", "runs", "fwd ms", "GFLOP/s", "%peak", "fwd+bwd ms", "GFLOP/s", "%peak",
           "fwd relerr", "check", "cpu%");
    int all_ok = 1, rc_runtime = 0;
    struct job_result *r = malloc(sizeof(*r)), *best = malloc(sizeof(*best));
    if (!r || !best) {
        free(r);
        free(best);
        burst_context_destroy(b.ctx);
        return 3;
    }
    double t_start = job_now();
    int nconf = b.nranks * b.ndtypes * b.nseqs * b.ndims * b.nmasks;
    for (int c = 0; c < nconf; c++) {
        struct job_params p = bench_job(&b, c);
        if (p.ranks > 64) {
            fprintf(stderr, "%s: at most 64 ranks\n", prog);
            return 2;
        }
        if (bench_run(&b, &p, r, best) != JOB_OK) {
            printf("%5d %5s %6lld %4d %-6s  error: %s\n", p.ranks, dtype_names[p.dtype],
                   (long long)p.seq_len, p.head_dim, mask_names[p.causal], r->message);
            rc_runtime = 1;
            continue;
        }
        all_ok &= bench_row(&b, &p, r);
    }
    printf("\ntotal %.0f s; forward checked on sampled rows against the fp64 reference "
           "(tolerance fp32 1e-4, fp16 1.95e-3, bf16 1.56e-2)%s%s\n",
           job_now() - t_start, b.csv ? "; CSV: " : "", b.csv ? b.csv_path : "");
    if (b.csv)
        fclose(b.csv);
    free(r);
    free(best);
    burst_context_destroy(b.ctx);
    return rc_runtime ? 3 : all_ok ? 0 : 1;
}
