/*
 * tools/burstrun_help.c - what burstrun prints about itself and the machine without running a
 * job: --help, --version, --info and --probe (tools/burstrun_help.h).
 */
#include <stdio.h>
#include <string.h>

#include "burst/burst.h"
#include "burstrun_help.h"
#include "burstrun_meta.h"
#include "job.h"
#include "launch.h"
#include "launch_pmix.h"
#include "probe_net.h"

static const char *const prog = "burstrun";

/* burstrun_usage: the check and output flags, and the notes. */
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

void burstrun_usage(FILE *f)
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
        "  --fp8                  the forward on fp8 (e4m3) products: Q, K and V of an fp16 or\n"
        "                         bf16 job quantized with block scales each call, blocks\n"
        "                         travelling quantized; needs --fwd-only; --check holds O to\n"
        "                         2^-2 of max |O| (the fp64 reference of the unquantized inputs)\n"
        "inference (the sharded key/value cache):\n"
        "  --prefill N            an inference job: each of --batch sequences gets a prompt of\n"
        "                         N tokens (causal ring prefill into the cache), then\n"
        "  --decode STEPS         decode calls, each attending the new tokens to every rank's\n"
        "                         shard of the cache and merging the partial results; reports\n"
        "                         prefill time and TFLOP/s (the median of --iters prefills\n"
        "                         after one untimed one with --warmup), decode step latency\n"
        "                         (median, p99; local attention and merge apart) and\n"
        "                         tokens/s; --check\n"
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

void burstrun_version(FILE *f)
{
    fprintf(f, "burstrun %s (library %s)\n", BURST_VERSION_STRING, burst_version_string());
    fprintf(f, "commit   %s\n", meta_commit());
    fprintf(f, "library features: %s\n", burst_build_features());
#ifdef BURST_HAVE_MPI
    fprintf(f, "burstrun features: mpi (--hosts, --hostfile)%s\n",
            launch_pmix_available() ? " pmix (--launcher pmix)" : "");
#else
    fprintf(f, "burstrun features: none (no mpi: --hosts, --hostfile refused)\n");
#endif
}

int burstrun_info(int json)
{
    char *report;
    burst_status_t st = burst_settings_report(json, &report);
    if (st != BURST_OK) {
        fprintf(stderr, "%s: --info: %s: %s\n", prog, burst_status_str(st), burst_last_error());
        return -1;
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
    return 0;
}

int burstrun_probe(int num_threads, int json)
{
    struct burst_context_params cp = burst_context_params_default();
    cp.num_threads = num_threads;
    char *report;
    burst_status_t st = burst_probe(&cp, json, &report);
    if (st != BURST_OK) {
        fprintf(stderr, "%s: --probe: %s: %s\n", prog, burst_status_str(st), burst_last_error());
        return -1;
    }
    size_t len = strlen(report);
    while (json && len && report[len - 1] == '\n')
        len--;
    if (json && len && report[len - 1] == '}') /* the object's end: one more member */
        report[len - 1] = '\0';
    fputs(report, stdout);
    burst_free(report);
    if (json) { /* burst_probe's object, and the transports as one more member */
        printf(", \"transports\": ");
        probe_net_json(stdout);
        printf("}\n");
    } else {
        probe_net_text(stdout);
    }
    return 0;
}
