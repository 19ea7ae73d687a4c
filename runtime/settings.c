/* runtime/settings.c - the table of BURST_* settings, its parser and its report (settings.h). */
#include "settings.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burst/comm.h"
#include "burst/context.h"
#include "context_internal.h"
#include "error.h"
#include "fault.h"
#include "logger.h"
#include "strbuf.h"

extern char **environ;

#ifndef BURST_RESEARCH_SETTINGS
#define BURST_RESEARCH_SETTINGS 0
#endif

/* Row builders: an integer in lo..hi, a 0/1 switch, one of a list, free text; free text that
 * its reader checks (CHECKED: `bad` is one text it refuses), free text with a syntax checked by
 * fn (SYNTAX: struct burst_setting.check, `bad` one text it refuses). Every field is given (the
 * compilers' missing-initializer warning), and the row's name is pasted by the builder itself
 * (a name such as LOG is also a macro below). */
#define INT(n, sc, d, l, h, sh, r, doc)                                                            \
    [BURST_SET_##n] = {"BURST_" #n, BURST_SETTING_INT, sc, d, l, h, NULL, sh, r, 0, doc, NULL, 0}
#define BOOL(n, sc, d, r, doc)                                                                     \
    [BURST_SET_##n] = {"BURST_" #n, BURST_SETTING_BOOL, sc, d, 0, 1, NULL, #d, r, 0, doc, NULL, 0}
#define CHOICE(n, sc, d, ch, sh, r, doc)                                                           \
    [BURST_SET_##n] = {"BURST_" #n, BURST_SETTING_CHOICE, sc, d, 0, 0, ch, sh, r, 0, doc, 0, 0}
#define STRING(n, sc, sh, r, doc)                                                                  \
    [BURST_SET_##n] = {"BURST_" #n, BURST_SETTING_STRING, sc, 0, 0, 0, 0, sh, r, 0, doc, 0, 0}
#define CHECKED(n, sc, sh, bad, doc)                                                               \
    [BURST_SET_##n] = {"BURST_" #n, BURST_SETTING_STRING, sc, 0, 0, 0, 0, sh, 0, 0, doc, bad, 0}
#define SYNTAX(n, sc, sh, fn, bad, doc)                                                            \
    [BURST_SET_##n] = {"BURST_" #n, BURST_SETTING_STRING, sc, 0, 0, 0, 0, sh, 0, 0, doc, bad, fn}

#define CTX BURST_SCOPE_CONTEXT
#define CPU BURST_SCOPE_CPU
#define VK BURST_SCOPE_VULKAN
#define CU BURST_SCOPE_CUDA
#define COMM BURST_SCOPE_COMM
#define LAUNCH BURST_SCOPE_LAUNCH
#define FAB BURST_SCOPE_FABRIC
#define TESTS BURST_SCOPE_TESTS
#define LOG BURST_SCOPE_LOG

const struct burst_setting burst_settings[BURST_SETTINGS_COUNT] = {
    CHECKED(BACKEND, CTX, "auto", "nonesuch",
            "backend that \"auto\" resolves to (cpu, vulkan, cuda); explicit names in the API win"),
    STRING(DEVICE, CTX, "0", 0,
           "GPU backends: device index or name substring when the context names none"),
    BOOL(DEVICE_DIRECT, CTX, 1, 0,
         "0: stage device blocks through host memory even where they could go direct (comparison)"),
    INT(STAGE_CHUNK_BYTES, CTX, 0, 0, LONG_MAX, "0", 0,
        "staged transfers in chunks of this many bytes (below 256: whole; same on every rank)"),
    INT(SPEED_ROUNDS, CTX, 2, 1, 2, "2", 0,
        "1: measure_speed sizes shards by its first round alone (comparison; same on every rank)"),
    BOOL(FWD_FINAL, CTX, 1, 0,
         "0: a one-rank forward accumulates in fp32 scratch and casts as a ring's does "
         "(comparison)"),
    BOOL(BWD_FINAL, CTX, 1, 0,
         "0: a one-rank backward accumulates dK, dV in fp32 scratch and casts (comparison)"),
    BOOL(DECODE_STEP, CTX, 1, 0,
         "0: the key/value cache attends with one fwd_step per block even where the backend "
         "has decode_step (comparison)"),
    BOOL(STEP_SYNC, CTX, 0, 0,
         "1: synchronise the host after every ring step's kernel, timing steps on its clock "
         "(comparison)"),

    SYNTAX(LOG, LOG, "silent", burst_log_spec_check, "loud",
           "message levels: LEVEL[,SUBSYSTEM=LEVEL...] (error|warn|info|debug|off; subsystems "
           "runtime, cpu, vulkan, cuda, transport)"),
    SYNTAX(LOG_FILE, LOG, "stderr", burst_log_file_check, "log-%q",
           "file of the default log sink: a path pattern, %r the rank, %p the process id"),

    INT(NUM_THREADS, CPU, 0, 1, 4096, "every online core", 0,
        "cpu backend worker threads when the context asks for 0"),
    CHOICE(CPU_ISA, CPU, 0, "auto,base,avx2,avx512,avx512bf16,avx512amx,neon", "auto", 0,
           "cpu kernel variant (auto: the best this cpu runs)"),

    BOOL(VK_COOPMAT, VK, 1, 0, "0: never the cooperative-matrix kernels"),
    BOOL(VK_COOPMAT_KHR, VK, 1, 0,
         "0: the subgroup-scope cooperative-matrix kernels as NV builds where KHR is offered too"),
    BOOL(VK_CM2, VK, 0, 0,
         "1: the workgroup-scope *_cm2 kernels first where the device has "
         "VK_NV_cooperative_matrix2"),
    BOOL(VK_RT, VK, 1, 0, "0: never the register-tiled kernels: the scalar ones (tests)"),
    BOOL(VK_ATOMIC, VK, 1, 0,
         "0: a backward that need not be deterministic adds dQ without float atomics"),
    BOOL(VK_PROFILE, VK, 0, 0,
         "1: time every dispatch, log per-kernel totals (info) at context destroy"),
    BOOL(VK_CMQ, VK, 1, 0,
         "0: never the cooperative-matrix kernels that work on accumulators in registers"),
    INT(VK_CMQ_BF16, VK, 1, 0, 2, "1", 0,
        "bf16 inputs of the *_cmq kernels: 1 scaled fp16 copies, 2 converted in loads, 0 none"),
    BOOL(VK_CMQ_FP32, VK, 1, 0,
         "0: fp32 inputs on the register-tiled kernels, not the *_cmq ones in two fp16 halves"),
    CHOICE(VK_ELEM, VK, 2, "gpu,cpu,auto", "auto", 0,
           "where copy / fill / accumulate run: gpu shaders, cpu (the calling thread), auto"),
    INT(VK_EXPORT, VK, 1, 0, 2, "1", 0,
        "0: ring scratch never exportable; 2: exportable also on a CPU device (tests)"),
    STRING(VK_RT_TILE, VK, "the rule's", 1, "BR,BC,DC: the register-tiled kernels' tile"),
    STRING(VK_CMQ_TILE, VK, "the rule's", 1, "BR,BC[,LD]: fwd_cmq's tile and loading subgroups"),
    STRING(VK_CMQ_BWD_TILE, VK, "the rule's", 1, "BR,BC,BR,BC: the dq_cmq and dkv_cmq tiles"),
    STRING(VK_CMQ_FWD, VK, "1,1,1", 1,
           "SMC,DIRECT[,PIPE]: fwd_cmq's softmax chunks, P V into O, S issued early"),
    STRING(VK_CMQ_PREFETCH, VK, "0,0,0", 1,
           "F,Q,KV: 1 = fwd_cmq / dq_cmq / dkv_cmq load the next tile while computing"),
    INT(VK_CM_ROWS, VK, 0, 0, 128, "64", 1,
        "16, 32, 64 or 128: query rows per workgroup of the cooperative-matrix forward"),
    INT(VK_MAX_SHARED, VK, 0, 0, INT_MAX, "the device's", 0,
        "tests: behave as if the device had at most this many bytes of shared memory"),
    INT(VK_ELEM_GROUPS, VK, 0, 0, INT_MAX, "the device's", 0,
        "tests: at most this many workgroups per grid dimension of the element shaders"),
    BOOL(VK_STAGE, VK, 0, 0, "1: stage ring transfers through device copies also on a CPU device"),

    CHOICE(CUDA_FP32, CU, -1, "simt", "3xTF32 tensor cores", 0,
           "simt: fp32 inputs on the SIMT kernels instead of 3xTF32 on the tensor cores"),
    CHOICE(CUDA_KERNEL, CU, -1, "simt", "tensor cores", 0,
           "simt: the tensor-core kernels off (kill switch)"),
    CHOICE(CUDA_WGMMA, CU, 1, "0,1,fwd", "1", 0,
           "Hopper: 1 wgmma kernels, 0 the sm_80 kernels, fwd the wgmma forward only"),
    BOOL(CUDA_DQ_ATOMIC, CU, 1, 0,
         "0: the tensor-core backward keeps its separate dQ kernel for non-deterministic plans"),
    INT(CUDA_MAX_SHARED, CU, 0, 0, INT_MAX, "the device's", 0,
        "tests: choose kernels as if a block could have at most this many bytes of shared memory"),
    BOOL(CUDA_TMA, CU, 1, 0,
         "tests: 0 lets no tensor map describe a view, so the Hopper kernels' mma.sync fallback "
         "runs"),
    BOOL(IPC_STATS, CU, 0, 0,
         "1: log the cuda IPC export and import counts (info) at context destroy"),

    INT(TIMEOUT_MS, COMM, 120000, 1, BURST_COMM_TIMEOUT_MAX_MS, "120000", 0,
        "longest wait for a peer, in ms, when the communicator asks for 0"),
    CHOICE(FABRIC, COMM, 0, "auto,shm,tcp,verbs,efa", "auto", 0,
           "libfabric provider that \"auto\" resolves to"),
    STRING(IFACE, COMM, "", 0, "network interface or address for tcp / verbs"),
    INT(IPC_SPIN_US, COMM, 2000, 0, 1000000, "2000", 0,
        "device-to-device waits spin this long (us) before sleeping"),

    CHOICE(BOOTSTRAP, LAUNCH, -1, "rendezvous,mpi", "rendezvous", 0,
           "how burst_comm_create_env's ranks find each other; mpi is refused there (it needs "
           "the program's allgather: burst_comm_params.oob_allgather)"),
    INT(RANK, LAUNCH, 0, 0, 65535, "", 0, "this process's rank (set by the launcher)"),
    INT(SIZE, LAUNCH, 0, 1, 65536, "", 0, "ranks in the job (set by the launcher)"),
    STRING(RENDEZVOUS, LAUNCH, "", 0, "host:port of the job's rendezvous (set by the launcher)"),
    BOOL(RENDEZVOUS_UP, LAUNCH, 0, 0,
         "1: the rendezvous listened before the ranks started, so a refused connection fails "
         "the join at once (set by burstrun)"),
    [BURST_SET_JOB_KEY] = {"BURST_JOB_KEY", BURST_SETTING_STRING, LAUNCH, 0, 0, 0, NULL, "", 0, 1,
                           "the job's secret key (set by the launcher; never printed)", "xyz",
                           NULL},

    CHOICE(FAB_PROGRESS, FAB, 0, "thread,caller", "thread", 0,
           "who drives libfabric progress: a progress thread or the caller"),
    INT(FAB_SPIN_US, FAB, 20, 0, 1000000, "20", 0, "wait()'s polling before it sleeps, in us"),
    INT(FAB_CHUNK_BYTES, FAB, 0, 0, LONG_MAX, "the provider's largest", 0,
        "split messages into chunks of at most this many bytes (0: the provider's largest)"),
    BOOL(FAB_MR_LOCAL, FAB, 0, 0, "1: register every buffer (providers needing FI_MR_LOCAL)"),
    BOOL(FAB_RXM_EAGER, FAB, 1, 0,
         "0: allow ofi_rxm rendezvous messages (faster, unsafe if a peer dies)"),

    CHECKED(FAULT, TESTS, "", "nonesuch:rank=0",
            "tests: kill:rank=R,phase=fwd|bwd,step=S[,call=C] and other faults (runtime/fault.h)"),
    STRING(TEST_SEED, TESTS, "the time", 0, "seed of the randomised tests"),
    STRING(TEST_BACKEND, TESTS, "cpu", 0, "backend of the harness-based tests"),
};

int burst_settings_parse_long(const char *s, long lo, long hi, long *v_p)
{
    char *end;
    if (!(*s >= '0' && *s <= '9') && *s != '-') /* whole: strtol would skip spaces and a '+' */
        return 0;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return 0;
    *v_p = v;
    return 1;
}

/* Index of s among the comma-separated choices, or -1. */
static long choice_index(const char *choices, const char *s)
{
    size_t n = strlen(s);
    long i = 0;
    for (const char *c = choices; *c; i++) {
        size_t len = strcspn(c, ",");
        if (len == n && strncmp(c, s, n) == 0)
            return i;
        c += len + (c[len] == ',');
    }
    return -1;
}

/* The choices as a readable list: "a, b, c" into buf. */
static const char *choices_list(const char *choices, char *buf, size_t len)
{
    size_t o = 0;
    for (const char *c = choices; *c && o + 3 < len; c++) {
        buf[o++] = *c;
        if (*c == ',')
            buf[o++] = ' ';
    }
    buf[o] = '\0';
    return buf;
}

burst_status_t burst_setting_get(const char *who, enum burst_setting_id id, long *v_p,
                                 const char **s_p)
{
    const struct burst_setting *r = &burst_settings[id];
    const char *s = getenv(r->name);
    long v = r->dflt;
    if ((s && !*s) || (r->research && !BURST_RESEARCH_SETTINGS))
        s = NULL; /* research switches: only in builds with -Dresearch_settings=true */
    if (s && r->check) {
        burst_status_t st = r->check(who, r->name, s);
        if (st != BURST_OK)
            return st;
    } else if (s && r->type == BURST_SETTING_CHOICE) {
        char list[128];
        if ((v = choice_index(r->choices, s)) < 0)
            return burst_error(BURST_ERR_INVALID_ARG, "%s: %s = \"%.64s\" is not one of %s", who,
                               r->name, s, choices_list(r->choices, list, sizeof list));
    } else if (s && r->type != BURST_SETTING_STRING) {
        if (!burst_settings_parse_long(s, r->lo, r->hi, &v))
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: %s = \"%.64s\" is not an integer in %ld..%ld", who, r->name, s,
                               r->lo, r->hi);
    }
    if (v_p)
        *v_p = v;
    if (s_p)
        *s_p = s;
    return BURST_OK;
}

const char *burst_setting_raw(enum burst_setting_id id)
{
    const struct burst_setting *r = &burst_settings[id];
    const char *s = getenv(r->name);
    return !s || !*s || (r->research && !BURST_RESEARCH_SETTINGS) ? NULL : s;
}

burst_status_t burst_settings_load(const char *who, unsigned scopes, struct burst_settings *set)
{
    for (int i = 0; i < BURST_SETTINGS_COUNT; i++) {
        if (!(burst_settings[i].scope & scopes))
            continue;
        burst_status_t st =
            burst_setting_get(who, (enum burst_setting_id)i, &set->v[i], &set->s[i]);
        if (st != BURST_OK)
            return st;
        set->have[i] = 1;
    }
    return BURST_OK;
}

/* The row of a variable named by an environment entry "NAME=value", or -1. */
static int row_of_entry(const char *entry)
{
    size_t n = strcspn(entry, "=");
    for (int i = 0; i < BURST_SETTINGS_COUNT; i++)
        if (strlen(burst_settings[i].name) == n && strncmp(burst_settings[i].name, entry, n) == 0)
            return i;
    return -1;
}

static void warn_unknown_once(void)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "BURST_", 6) != 0 || strncmp(*e, "BURST_TEST_", 11) == 0 ||
            strncmp(*e, "BURST_BENCH_", 12) == 0)
            continue;
        const int row = row_of_entry(*e), n = (int)strcspn(*e, "=");
        if (row < 0)
            burst_log(BURST_LOG_WARN, BURST_SUB_RUNTIME, -1,
                      "%.*s in the environment is not a burst setting (burstrun --info lists them)",
                      n, *e);
        else if (burst_settings[row].research && !BURST_RESEARCH_SETTINGS && (*e)[n + 1])
            burst_log(BURST_LOG_WARN, BURST_SUB_RUNTIME, -1,
                      "%.*s is a research switch that this build ignores "
                      "(meson -Dresearch_settings=true)",
                      n, *e);
    }
}

void burst_settings_warn_unknown(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, warn_unknown_once);
}

static const char *scope_name(enum burst_setting_scope s)
{
    switch (s) {
    case BURST_SCOPE_CONTEXT: return "context";
    case BURST_SCOPE_CPU: return "cpu";
    case BURST_SCOPE_VULKAN: return "vulkan";
    case BURST_SCOPE_CUDA: return "cuda";
    case BURST_SCOPE_COMM: return "comm";
    case BURST_SCOPE_LAUNCH: return "launcher";
    case BURST_SCOPE_FABRIC: return "fabric";
    case BURST_SCOPE_TESTS: return "tests";
    case BURST_SCOPE_LOG: return "log";
    }
    return "?";
}

static const char *type_name(const struct burst_setting *r, char *buf, size_t len)
{
    switch (r->type) {
    case BURST_SETTING_INT:
        if (r->hi == LONG_MAX)
            snprintf(buf, len, "int >= %ld", r->lo);
        else
            snprintf(buf, len, "int %ld..%ld", r->lo, r->hi);
        break;
    case BURST_SETTING_BOOL: snprintf(buf, len, "0|1"); break;
    case BURST_SETTING_CHOICE:
        snprintf(buf, len, "%s", r->choices);
        for (char *c = buf; *c; c++)
            *c = *c == ',' ? '|' : *c;
        break;
    case BURST_SETTING_STRING: snprintf(buf, len, "text"); break;
    }
    return buf;
}

/* One row of the report. */
static void report_row(struct burst_sb *sb, const struct burst_setting *r, int json, int first)
{
    char type[96];
    const char *v = getenv(r->name);
    if (v && r->secret)
        v = "(set)";
    if (!json) {
        burst_sb_printf(sb, "  %-23s %-8s %-26s %s%s\n      default %s; now %s\n", r->name,
                        scope_name(r->scope), type_name(r, type, sizeof type), r->doc,
                        !r->research              ? ""
                        : BURST_RESEARCH_SETTINGS ? " (research)"
                                                  : " (research: ignored by this build)",
                        *r->shown ? r->shown : "none", v ? v : "(unset)");
        return;
    }
    burst_sb_printf(sb, "%s\n  {\"name\": ", first ? "" : ",");
    burst_sb_json_str(sb, r->name);
    burst_sb_printf(sb, ", \"type\": ");
    burst_sb_json_str(sb, type_name(r, type, sizeof type));
    burst_sb_printf(sb, ", \"scope\": ");
    burst_sb_json_str(sb, scope_name(r->scope));
    burst_sb_printf(sb, ", \"default\": ");
    burst_sb_json_str(sb, r->shown);
    burst_sb_printf(
        sb, ", \"research\": %s, \"ignored\": %s, \"value\": ", r->research ? "true" : "false",
        r->research && !BURST_RESEARCH_SETTINGS ? "true" : "false");
    burst_sb_json_str(sb, v);
    burst_sb_printf(sb, ", \"doc\": ");
    burst_sb_json_str(sb, r->doc);
    burst_sb_printf(sb, "}");
}

burst_status_t burst_settings_report(int json, char **report_p)
{
    burst_error_clear();
    if (!report_p)
        return burst_error(BURST_ERR_INVALID_ARG, "burst_settings_report: report_p is NULL");
    struct burst_sb sb = {0};
    burst_sb_printf(&sb, json ? "[" : "");
    for (int i = 0; i < BURST_SETTINGS_COUNT; i++)
        report_row(&sb, &burst_settings[i], json, i == 0);
    burst_sb_printf(&sb, json ? "\n]\n" : "");
    if (sb.failed) {
        free(sb.buf);
        return burst_error(BURST_ERR_NO_MEMORY, "burst_settings_report: out of memory");
    }
    *report_p = sb.buf;
    return BURST_OK;
}

burst_status_t burst_settings_check(void)
{
    struct burst_settings set;
    burst_error_clear();
    burst_status_t st = burst_settings_load(
        "burst_settings_check",
        BURST_SCOPE_CONTEXT | BURST_SCOPE_CPU | BURST_SCOPE_VULKAN | BURST_SCOPE_CUDA |
            BURST_SCOPE_COMM | BURST_SCOPE_FABRIC | BURST_SCOPE_LOG,
        &set);
    if (st == BURST_OK)
        st = burst_backend_env_check("burst_settings_check");
    return st == BURST_OK ? burst_fault_env_check("burst_settings_check") : st;
}

/* The row of a setting named name, or a named error. */
static burst_status_t row_of_name(const char *who, const char *name, const void *value, int *row)
{
    if (!name)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: name is NULL", who);
    if (!value)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: value is NULL (for %.64s)", who, name);
    *row = strchr(name, '=') ? -1 : row_of_entry(name);
    if (*row < 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %.64s is not a burst setting (burstrun --info lists them)", who,
                           name);
    return BURST_OK;
}

burst_status_t burst_setting_long(const char *name, long *value)
{
    const char *who = "burst_setting_long", *s;
    long v;
    int row = -1;
    burst_status_t st = row_of_name(who, name, value, &row);
    if (st != BURST_OK)
        return st;
    if (burst_settings[row].type == BURST_SETTING_STRING)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s is text, not a number (burst_setting_string reads it)", who,
                           name);
    if ((st = burst_setting_get(who, (enum burst_setting_id)row, &v, &s)) == BURST_OK && s)
        *value = v;
    return st;
}

burst_status_t burst_setting_string(const char *name, const char **value)
{
    const char *who = "burst_setting_string", *s;
    int row = -1;
    burst_status_t st = row_of_name(who, name, value, &row);
    if (st == BURST_OK &&
        (st = burst_setting_get(who, (enum burst_setting_id)row, NULL, &s)) == BURST_OK && s)
        *value = s;
    return st;
}
