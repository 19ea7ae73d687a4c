/*
 * tests/test_bad_input.c - every entry point rejects bad input, one test per
 * case. Each test checks the returned status, that burst_last_error() names the argument and
 * its value (for pointers: the name and "NULL"), and that nothing was half-written: output
 * tensors keep their poison bytes and *_p outputs keep their sentinel.
 * Multi-rank cases: bad input on one rank must not hang the others: they get
 * BURST_ERR_PEER_FAILED within the communicator's (short) timeout, and plans that differ between
 * ranks give BURST_ERR_PLAN_MISMATCH on every rank with a message naming the rank and field.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "harness.h"
#include "settings.h"

/* Some cases below ask for absurd allocations that must fail with BURST_ERR_NO_MEMORY. Under
 * AddressSanitizer such a request aborts the process unless the allocator may return NULL, as
 * it does without ASan; this hook (read by ASan at start-up only) says so. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

enum {
    N = 16,
    HQ = 2,
    HKV = 1,
    D = 16,
    TIMEOUT_MS = 2000
};
#define NQ ((size_t)N * HQ * D)
#define NKV ((size_t)N * HKV * D)

static int sentinel_obj;
#define SENTINEL ((void *)&sentinel_obj)

struct fixture {
    struct burst_local_world *world;
    struct burst_comm *comm;
    struct burst_plan *plan;
    struct burst_plan_params pp;
    float q[NQ], k[NKV], v[NKV], dout[NQ];
    float o[NQ], lse[HQ * N], dq[NQ], dk[NKV], dv[NKV];      /* outputs: poisoned */
    float o0[NQ], lse0[HQ * N], dq0[NQ], dk0[NKV], dv0[NKV]; /* their snapshots */
    struct burst_tensor tq, tk, tv, tdout, to, tdq, tdk, tdv;
};

static struct burst_plan_params valid_params(void)
{
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = N;
    pp.q_heads = HQ;
    pp.kv_heads = HKV;
    pp.head_dim = D;
    pp.causal = 1;
    return pp;
}

static int setup_comm(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f || !harness_context())
        return -1;
    if (burst_local_world_create(1, &f->world) != BURST_OK)
        return -1;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.size = 1;
    cp.world = f->world;
    cp.timeout_ms = TIMEOUT_MS;
    if (burst_comm_create(&cp, &f->comm) != BURST_OK)
        return -1;
    f->pp = valid_params();
    uint64_t st = harness_seed();
    for (size_t i = 0; i < NQ; i++)
        f->q[i] = (float)harness_rng_uniform(&st, -1, 1), f->dout[i] = 0.5f;
    for (size_t i = 0; i < NKV; i++)
        f->k[i] = (float)harness_rng_uniform(&st, -1, 1), f->v[i] = 0.25f;
    memset(f->o, 0xa5, sizeof f->o);
    memset(f->lse, 0xa5, sizeof f->lse);
    memset(f->dq, 0xa5, sizeof f->dq);
    memset(f->dk, 0xa5, sizeof f->dk);
    memset(f->dv, 0xa5, sizeof f->dv);
    memcpy(f->o0, f->o, sizeof f->o);
    memcpy(f->lse0, f->lse, sizeof f->lse);
    memcpy(f->dq0, f->dq, sizeof f->dq);
    memcpy(f->dk0, f->dk, sizeof f->dk);
    memcpy(f->dv0, f->dv, sizeof f->dv);
    f->tq = burst_tensor_contiguous(f->q, BURST_DTYPE_FP32, 1, N, HQ, D);
    f->tk = burst_tensor_contiguous(f->k, BURST_DTYPE_FP32, 1, N, HKV, D);
    f->tv = burst_tensor_contiguous(f->v, BURST_DTYPE_FP32, 1, N, HKV, D);
    f->tdout = burst_tensor_contiguous(f->dout, BURST_DTYPE_FP32, 1, N, HQ, D);
    f->to = burst_tensor_contiguous(f->o, BURST_DTYPE_FP32, 1, N, HQ, D);
    f->tdq = burst_tensor_contiguous(f->dq, BURST_DTYPE_FP32, 1, N, HQ, D);
    f->tdk = burst_tensor_contiguous(f->dk, BURST_DTYPE_FP32, 1, N, HKV, D);
    f->tdv = burst_tensor_contiguous(f->dv, BURST_DTYPE_FP32, 1, N, HKV, D);
    *state = f;
    return 0;
}

static int setup_plan(void **state)
{
    if (setup_comm(state) != 0)
        return -1;
    struct fixture *f = *state;
    if (burst_plan_create(harness_context(), f->comm, &f->pp, &f->plan) != BURST_OK) {
        fprintf(stderr, "setup: burst_plan_create: %s\n", burst_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f) {
        burst_plan_destroy(f->plan);
        burst_comm_destroy(f->comm);
        burst_local_world_destroy(f->world);
        free(f);
    }
    return 0;
}

static void check_untouched(const struct fixture *f)
{
    assert_memory_equal(f->o, f->o0, sizeof f->o);
    assert_memory_equal(f->lse, f->lse0, sizeof f->lse);
    assert_memory_equal(f->dq, f->dq0, sizeof f->dq);
    assert_memory_equal(f->dk, f->dk0, sizeof f->dk);
    assert_memory_equal(f->dv, f->dv0, sizeof f->dv);
}

/* does msg contain one of the '|'-separated alternatives? */
static int contains_any(const char *msg, const char *alts)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", alts);
    for (char *save = NULL, *tok = strtok_r(buf, "|", &save); tok; tok = strtok_r(NULL, "|", &save))
        if (harness_contains(msg, tok))
            return 1;
    return 0;
}

/* status is one of want/want2, the message contains both needles (NULL needle: skipped) */
static void expect_error(burst_status_t st, burst_status_t want, burst_status_t want2,
                         const char *needle1, const char *needle2)
{
    const char *msg = burst_last_error();
    if (st != want && st != want2)
        fail_msg("status %d (%s), expected %d (%s); message: \"%s\"", (int)st, burst_status_str(st),
                 (int)want, burst_status_str(want), msg ? msg : "(null)");
    if (!msg || !contains_any(msg, needle1) || (needle2 && !contains_any(msg, needle2)))
        fail_msg("message \"%s\" does not name \"%s\"%s%s%s", msg ? msg : "(null)", needle1,
                 needle2 ? " and \"" : "", needle2 ? needle2 : "", needle2 ? "\"" : "");
}

#define EXPECT(st, want, n1, n2) expect_error((st), (want), (want), (n1), (n2))
#define INVALID BURST_ERR_INVALID_ARG

/* ------------------------------------------------------------------ context, world, comm */

static void ctx_null_out(void **state)
{
    (void)state;
    EXPECT(burst_context_create(NULL, NULL), INVALID, "ctx_p", "NULL");
}

static void ctx_bad_version(void **state)
{
    (void)state;
    struct burst_context_params cp = burst_context_params_default();
    cp.api_version = BURST_API_VERSION + (1u << 16);
    struct burst_context *ctx = SENTINEL;
    char v[64]; /* decimal or hex */
    snprintf(v, sizeof v, "%u|0x%x", cp.api_version, cp.api_version);
    EXPECT(burst_context_create(&cp, &ctx), BURST_ERR_VERSION, "api_version", v);
    assert_ptr_equal(ctx, SENTINEL);
}

static void ctx_newer_minor(void **state)
{
    (void)state;
    struct burst_context_params cp = burst_context_params_default();
    cp.api_version = BURST_API_VERSION + 1;
    struct burst_context *ctx = SENTINEL;
    EXPECT(burst_context_create(&cp, &ctx), BURST_ERR_VERSION, "api_version", NULL);
    assert_ptr_equal(ctx, SENTINEL);
}

static void ctx_unknown_backend(void **state)
{
    (void)state;
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "nosuchbackend";
    struct burst_context *ctx = SENTINEL;
    EXPECT(burst_context_create(&cp, &ctx), INVALID, "backend", "nosuchbackend");
    assert_ptr_equal(ctx, SENTINEL);
}

static void ctx_negative_threads(void **state)
{
    (void)state;
    struct burst_context_params cp = burst_context_params_default();
    cp.num_threads = -3;
    struct burst_context *ctx = SENTINEL;
    EXPECT(burst_context_create(&cp, &ctx), INVALID, "num_threads", "-3");
    assert_ptr_equal(ctx, SENTINEL);
}

/* BURST_CPU_ISA: an unknown variant is named; a variant this build lacks is unsupported. */
static void ctx_env_bad_cpu_isa(void **state)
{
    (void)state;
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cpu";
    struct burst_context *ctx = SENTINEL;
    const char *env = getenv("BURST_CPU_ISA");
    char *old = env ? strdup(env) : NULL;
    setenv("BURST_CPU_ISA", "sse9", 1);
    EXPECT(burst_context_create(&cp, &ctx), INVALID, "BURST_CPU_ISA", "sse9");
#if defined(__x86_64__)
    setenv("BURST_CPU_ISA", "neon", 1);
#else
    setenv("BURST_CPU_ISA", "avx2", 1);
#endif
    EXPECT(burst_context_create(&cp, &ctx), BURST_ERR_UNSUPPORTED, "BURST_CPU_ISA", "cannot run");
    if (old)
        setenv("BURST_CPU_ISA", old, 1);
    else
        unsetenv("BURST_CPU_ISA");
    free(old);
    assert_ptr_equal(ctx, SENTINEL);
}

static void ctx_alloc_zero(void **state)
{
    (void)state;
    void *ptr = SENTINEL;
    EXPECT(burst_context_alloc(harness_context(), 0, &ptr), INVALID, "bytes", "0");
    assert_null(ptr);
}

static void ctx_alloc_null(void **state)
{
    (void)state;
    void *ptr = SENTINEL;
    EXPECT(burst_context_alloc(NULL, 64, &ptr), INVALID, "ctx", "NULL");
    assert_null(ptr);
    EXPECT(burst_context_alloc(harness_context(), 64, NULL), INVALID, "ptr_p", "NULL");
}

static void ctx_alloc_huge(void **state)
{
    (void)state;
    void *ptr = SENTINEL;
    EXPECT(burst_context_alloc(harness_context(), SIZE_MAX / 2, &ptr), BURST_ERR_NO_MEMORY,
           "burst_context_alloc", NULL);
    assert_null(ptr);
}

static void probe_null_out(void **state)
{
    (void)state;
    EXPECT(burst_probe(NULL, 0, NULL), INVALID, "report_p", "NULL");
    char *r = NULL;
    assert_int_equal(burst_probe(NULL, 1, &r), BURST_OK);
    assert_non_null(strstr(r, "\"backend\": \"cpu\""));
    burst_free(r);
}

static void world_bad_size(void **state)
{
    (void)state;
    static const int sizes[] = {0, -2, 65537};
    for (int i = 0; i < 3; i++) {
        struct burst_local_world *w = SENTINEL;
        char v[16];
        snprintf(v, sizeof v, "%d", sizes[i]);
        EXPECT(burst_local_world_create(sizes[i], &w), INVALID, "size", v);
        assert_ptr_equal(w, SENTINEL);
    }
}

static void world_null_out(void **state)
{
    (void)state;
    EXPECT(burst_local_world_create(2, NULL), INVALID, "world_p", "NULL");
}

static void comm_null_params(void **state)
{
    (void)state;
    struct burst_comm *c = SENTINEL;
    EXPECT(burst_comm_create(NULL, &c), INVALID, "params", "NULL");
    assert_ptr_equal(c, SENTINEL);
}

static void comm_null_out(void **state)
{
    struct fixture *f = *state;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.size = 1;
    cp.world = f->world;
    EXPECT(burst_comm_create(&cp, NULL), INVALID, "comm_p", "NULL");
}

static void comm_null_world(void **state)
{
    (void)state;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.size = 1;
    struct burst_comm *c = SENTINEL;
    EXPECT(burst_comm_create(&cp, &c), INVALID, "world", "NULL");
    assert_ptr_equal(c, SENTINEL);
}

static void comm_bad_rank(void **state)
{
    (void)state;
    struct burst_local_world *w;
    assert_int_equal(burst_local_world_create(2, &w), BURST_OK);
    static const int ranks[] = {-1, 2, 7};
    for (int i = 0; i < 3; i++) {
        struct burst_comm_params cp = burst_comm_params_default();
        cp.size = 2;
        cp.rank = ranks[i];
        cp.world = w;
        struct burst_comm *c = SENTINEL;
        char v[16];
        snprintf(v, sizeof v, "%d", ranks[i]);
        EXPECT(burst_comm_create(&cp, &c), INVALID, "rank", v);
        assert_ptr_equal(c, SENTINEL);
    }
    burst_local_world_destroy(w);
}

static void comm_bad_size(void **state)
{
    (void)state;
    struct burst_local_world *w;
    assert_int_equal(burst_local_world_create(2, &w), BURST_OK);
    static const int sizes[] = {0, -4, 3};
    for (int i = 0; i < 3; i++) {
        struct burst_comm_params cp = burst_comm_params_default();
        cp.size = sizes[i];
        cp.world = w;
        struct burst_comm *c = SENTINEL;
        char v[16];
        snprintf(v, sizeof v, "%d", sizes[i]);
        EXPECT(burst_comm_create(&cp, &c), INVALID, "size", v);
        assert_ptr_equal(c, SENTINEL);
    }
    burst_local_world_destroy(w);
}

static void comm_rank_taken(void **state)
{
    struct fixture *f = *state; /* rank 0 of f->world is taken by f->comm */
    struct burst_comm_params cp = burst_comm_params_default();
    cp.size = 1;
    cp.world = f->world;
    struct burst_comm *c = SENTINEL;
    EXPECT(burst_comm_create(&cp, &c), INVALID, "rank", "0");
    assert_ptr_equal(c, SENTINEL);
}

static void comm_bad_version(void **state)
{
    struct fixture *f = *state;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.api_version = BURST_API_VERSION + (1u << 16);
    cp.size = 1;
    cp.world = f->world;
    struct burst_comm *c = SENTINEL;
    EXPECT(burst_comm_create(&cp, &c), BURST_ERR_VERSION, "api_version", NULL);
    assert_ptr_equal(c, SENTINEL);
}

static void comm_unknown_transport(void **state)
{
    struct fixture *f = *state;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.transport = "carrierpigeon";
    cp.size = 1;
    cp.world = f->world;
    struct burst_comm *c = SENTINEL;
    burst_status_t st = burst_comm_create(&cp, &c);
    expect_error(st, INVALID, BURST_ERR_UNSUPPORTED, "transport", "carrierpigeon");
    assert_ptr_equal(c, SENTINEL);
}

static burst_status_t never_called(void *ctx, const void *send, void *recv, size_t len,
                                   int timeout_ms)
{
    fail_msg("%s", "the oob allgather of an API 0.3 caller was called");
    return BURST_ERR_INTERNAL;
}

/* An unknown bootstrap is named; "mpi" without the program's allgather names
 * params->oob_allgather (the library links no MPI), also for a caller built against API 0.3,
 * whose struct ends before that field (it is not read). */
static void comm_bad_bootstrap(void **state)
{
    (void)state;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.transport = "fabric";
    cp.bootstrap = "carrierpigeon";
    struct burst_comm *c = SENTINEL;
    EXPECT(burst_comm_create(&cp, &c), INVALID, "params->bootstrap", "carrierpigeon");
    assert_ptr_equal(c, SENTINEL);
    cp.bootstrap = "mpi";
    EXPECT(burst_comm_create(&cp, &c), INVALID, "params->oob_allgather", "NULL");
    assert_ptr_equal(c, SENTINEL);
    cp.api_version = (BURST_VERSION_MAJOR << 16) | 3;
    cp.oob_allgather = never_called;
    EXPECT(burst_comm_create(&cp, &c), INVALID, "params->oob_allgather", "NULL");
    assert_ptr_equal(c, SENTINEL);
}

/* BURST_BOOTSTRAP: an unknown value is named; "mpi", chosen by BURST_BOOTSTRAP or by mpirun's
 * variables, is refused naming params->oob_allgather (no MPI call). */
static void comm_env_bad_bootstrap(void **state)
{
    (void)state;
    const char *old_r = getenv("OMPI_COMM_WORLD_RANK"), *old_s = getenv("OMPI_COMM_WORLD_SIZE");
    if (old_r || old_s)
        skip(); /* running under mpirun */
    struct burst_comm *c = SENTINEL;
    setenv("BURST_BOOTSTRAP", "carrierpigeon", 1);
    EXPECT(burst_comm_create_env(&c), INVALID, "BURST_BOOTSTRAP", "carrierpigeon");
    setenv("BURST_BOOTSTRAP", "mpi", 1);
    EXPECT(burst_comm_create_env(&c), INVALID, "BURST_BOOTSTRAP", "params->oob_allgather");
    unsetenv("BURST_BOOTSTRAP");
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    EXPECT(burst_comm_create_env(&c), INVALID, "OMPI_COMM_WORLD_RANK", "params->oob_allgather");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    assert_ptr_equal(c, SENTINEL);
}

/* burst_comm_pingpong: every bad argument named (the comm is never used). */
static void comm_pingpong_bad(void **state)
{
    (void)state;
    struct burst_local_world *w = NULL;
    assert_int_equal(burst_local_world_create(2, &w), BURST_OK);
    struct burst_comm_params cp = burst_comm_params_default();
    cp.world = w;
    cp.size = 2;
    struct burst_comm *c = NULL;
    assert_int_equal(burst_comm_create(&cp, &c), BURST_OK);
    char buf[8];
    double s;
    EXPECT(burst_comm_pingpong(NULL, 1, buf, 8, 1, &s), INVALID, "comm", "NULL");
    EXPECT(burst_comm_pingpong(c, 1, buf, 8, 1, NULL), INVALID, "seconds_p", "NULL");
    EXPECT(burst_comm_pingpong(c, 0, buf, 8, 1, &s), INVALID, "peer = 0", "another rank");
    EXPECT(burst_comm_pingpong(c, 2, buf, 8, 1, &s), INVALID, "peer = 2", "another rank");
    EXPECT(burst_comm_pingpong(c, -1, buf, 8, 1, &s), INVALID, "peer = -1", "another rank");
    EXPECT(burst_comm_pingpong(c, 1, NULL, 8, 1, &s), INVALID, "buf", "bytes = 8");
    EXPECT(burst_comm_pingpong(c, 1, buf, 8, 0, &s), INVALID, "iters = 0", "1..");
    EXPECT(burst_comm_pingpong(c, 1, buf, 8, BURST_PINGPONG_MAX_ITERS + 1, &s), INVALID, "iters",
           "16777217");
    burst_comm_destroy(c);
    burst_local_world_destroy(w);
}

/* The variables of torchrun and srun (transport/tp_launch_env.h): a malformed or missing one
 * is named with its value, and so is a missing job key; nothing is listened on or joined. */
static void launch_env_expect(const char *const *vars, const char *n1, const char *n2)
{
    static const char *const all[] = {"RANK",          "WORLD_SIZE",         "MASTER_ADDR",
                                      "MASTER_PORT",   "SLURM_PROCID",       "SLURM_NTASKS",
                                      "SLURM_JOB_ID",  "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
                                      "BURST_JOB_KEY", "BURST_RENDEZVOUS"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        unsetenv(all[i]);
    for (size_t i = 0; vars[i]; i += 2)
        setenv(vars[i], vars[i + 1], 1);
    struct burst_comm *c = SENTINEL;
    EXPECT(burst_comm_create_env(&c), INVALID, n1, n2);
    assert_ptr_equal(c, SENTINEL);
    for (size_t i = 0; vars[i]; i += 2)
        unsetenv(vars[i]);
}

#define KEY "0123456789abcdef0123456789abcdef"
static void comm_env_launchers(void **state)
{
    (void)state;
    if (getenv("BURST_RANK") || getenv("OMPI_COMM_WORLD_RANK") || getenv("RANK") ||
        getenv("SLURM_PROCID"))
        skip(); /* started by a launcher */
    const char *t1[] = {"RANK", "x1", "WORLD_SIZE", "2", NULL};
    launch_env_expect(t1, "RANK", "x1");
    const char *t2[] = {"RANK", "2", "WORLD_SIZE", "2", NULL};
    launch_env_expect(t2, "RANK", "0..1");
    const char *t3[] = {"RANK", "0", "WORLD_SIZE", "0", NULL};
    launch_env_expect(t3, "WORLD_SIZE", "\"0\"");
    const char *t4[] = {"RANK", "1", "WORLD_SIZE", "2", "MASTER_PORT", "29500", NULL};
    launch_env_expect(t4, "MASTER_ADDR", "torchrun");
    const char *t5[] = {"RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1", NULL};
    launch_env_expect(t5, "MASTER_PORT", "not set");
    const char *t6[] = {"RANK",      "1",           "WORLD_SIZE", "2", "MASTER_ADDR",
                        "127.0.0.1", "MASTER_PORT", "65535",      NULL};
    launch_env_expect(t6, "MASTER_PORT", "65535");
    const char *t7[] = {"RANK",      "1",           "WORLD_SIZE", "2", "MASTER_ADDR",
                        "127.0.0.1", "MASTER_PORT", "29500",      NULL};
    launch_env_expect(t7, "BURST_JOB_KEY", "not set");
    const char *t8[] = {"RANK",        "1",     "WORLD_SIZE",    "2",   "MASTER_ADDR", "127.0.0.1",
                        "MASTER_PORT", "29500", "BURST_JOB_KEY", "xyz", NULL};
    launch_env_expect(t8, "BURST_JOB_KEY", "hex");
    const char *t9[] = {"RANK", "1", "WORLD_SIZE", "2", "BURST_RENDEZVOUS", "nohost", NULL};
    launch_env_expect(t9, "BURST_RENDEZVOUS", "nohost");
    const char *s1[] = {"SLURM_PROCID", "3", "SLURM_NTASKS", "2", NULL};
    launch_env_expect(s1, "SLURM_PROCID", "\"3\"");
    const char *s2[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "2", NULL};
    launch_env_expect(s2, "MASTER_ADDR", "SLURM_JOB_NODELIST");
    const char *s3[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST",
                        "node[",        NULL};
    launch_env_expect(s3, "SLURM_JOB_NODELIST", "node[");
    const char *s4[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST",
                        "node[1-2]",    NULL};
    launch_env_expect(s4, "SLURM_JOB_ID", "MASTER_PORT");
    const char *s5[] = {"SLURM_PROCID",
                        "1",
                        "SLURM_NTASKS",
                        "2",
                        "SLURM_JOB_ID",
                        "77",
                        "SLURM_JOB_NODELIST",
                        "node[1-2]",
                        "BURST_JOB_KEY",
                        KEY "zz",
                        NULL};
    launch_env_expect(s5, "BURST_JOB_KEY", "slurm");
}
#undef KEY

/* Every integer variable the library reads at context or communicator creation, malformed
 * (letters, trailing garbage, out of range, past any long), fails every entry point that reads
 * it with INVALID naming the variable and the value; empty means the default. */
static const char *const bad_ints[] = {"abc", "12abc", "0", "-1", "1e3", "99999999999999999999"};

static void env_expect(const char *var, const char *val, burst_status_t st)
{
    EXPECT(st, INVALID, var, val);
}

static void env_malformed(void **state)
{
    (void)state;
    struct burst_local_world *w = NULL;
    assert_int_equal(burst_local_world_create(1, &w), BURST_OK);
    struct burst_comm_params cp = burst_comm_params_default();
    cp.world = w;
    struct burst_context_params xp = burst_context_params_default();
    for (size_t i = 0; i < sizeof(bad_ints) / sizeof(bad_ints[0]); i++) {
        struct burst_comm *c = SENTINEL;
        struct burst_context *ctx = SENTINEL;
        setenv("BURST_TIMEOUT_MS", bad_ints[i], 1);
        env_expect("BURST_TIMEOUT_MS", bad_ints[i], burst_comm_create(&cp, &c));
        setenv("BURST_SIZE", "1", 1);
        setenv("BURST_RANK", "0", 1);
        env_expect("BURST_TIMEOUT_MS", bad_ints[i], burst_comm_create_env(&c));
        unsetenv("BURST_SIZE");
        unsetenv("BURST_RANK");
        unsetenv("BURST_TIMEOUT_MS");
        /* a cpu setting is read by the cpu backend's create (auto may pick a GPU backend,
         * which does not read it) */
        setenv("BURST_NUM_THREADS", bad_ints[i], 1);
        xp.backend = "cpu";
        env_expect("BURST_NUM_THREADS", bad_ints[i], burst_context_create(&xp, &ctx));
        unsetenv("BURST_NUM_THREADS");
        assert_ptr_equal(c, SENTINEL);
        assert_ptr_equal(ctx, SENTINEL);
    }
    setenv("BURST_TIMEOUT_MS", "", 1); /* empty: the default */
    struct burst_comm *c = NULL;
    assert_int_equal(burst_comm_create(&cp, &c), BURST_OK);
    burst_comm_destroy(c);
    unsetenv("BURST_TIMEOUT_MS");
    burst_local_world_destroy(w);
}

/* burst_setting_long / burst_setting_string: the table's rule from outside the library; unset
 * or empty leaves the caller's value, a malformed one or an unknown name is refused naming it. */
static void setting_accessors(void **state)
{
    (void)state;
    long v = -7;
    const char *t = "kept";
    unsetenv("BURST_NUM_THREADS");
    assert_int_equal(burst_setting_long("BURST_NUM_THREADS", &v), BURST_OK);
    assert_int_equal(v, -7);
    setenv("BURST_NUM_THREADS", "", 1);
    assert_int_equal(burst_setting_long("BURST_NUM_THREADS", &v), BURST_OK);
    assert_int_equal(v, -7);
    setenv("BURST_NUM_THREADS", "3", 1);
    assert_int_equal(burst_setting_long("BURST_NUM_THREADS", &v), BURST_OK);
    assert_int_equal(v, 3);
    for (size_t i = 0; i < sizeof(bad_ints) / sizeof(bad_ints[0]); i++) {
        setenv("BURST_NUM_THREADS", bad_ints[i], 1);
        env_expect("BURST_NUM_THREADS", bad_ints[i], burst_setting_long("BURST_NUM_THREADS", &v));
        assert_int_equal(v, 3);
    }
    unsetenv("BURST_NUM_THREADS");
    EXPECT(burst_setting_long("BURST_NO_SUCH_SETTING", &v), INVALID, "BURST_NO_SUCH_SETTING",
           "not a burst setting");
    EXPECT(burst_setting_long("BURST_IFACE", &v), INVALID, "BURST_IFACE", "text");
    EXPECT(burst_setting_long(NULL, &v), INVALID, "NULL", NULL);
    EXPECT(burst_setting_long("BURST_NUM_THREADS", NULL), INVALID, "NULL", NULL);
    unsetenv("BURST_IFACE");
    assert_int_equal(burst_setting_string("BURST_IFACE", &t), BURST_OK);
    assert_string_equal(t, "kept");
    setenv("BURST_IFACE", "lo", 1);
    assert_int_equal(burst_setting_string("BURST_IFACE", &t), BURST_OK);
    assert_string_equal(t, "lo");
    unsetenv("BURST_IFACE");
}

/* ---- every row of the settings table, malformed: values generated from the row's type ---- */

#ifndef BURST_RESEARCH_SETTINGS
#define BURST_RESEARCH_SETTINGS 0
#endif

/* The k-th malformed value of row r (k = 0, 1, ...), from its type and range (buf holds the
 * generated ones); NULL past the last. A research switch that this build ignores has none, and
 * free text has only the row's `refused` example (none where its reader takes any text). */
static const char *malformed_value(const struct burst_setting *r, int k, char *buf, size_t cap)
{
    static const char *const bools[] = {"2", "-1", "yes", "1x", " 1"};
    if (r->research && !BURST_RESEARCH_SETTINGS)
        return NULL;
    switch (r->type) {
    case BURST_SETTING_INT:
        if (k == 0 || k == 1)
            return k ? "abc" : "12x";
        if (k == 2 && r->lo > LONG_MIN)
            snprintf(buf, cap, "%ld", r->lo - 1);
        else if (k == 3 && r->hi < LONG_MAX)
            snprintf(buf, cap, "%ld", r->hi + 1);
        else if (k == 3)
            snprintf(buf, cap, "99999999999999999999");
        else
            return k == 4 ? "1e3" : NULL;
        return buf;
    case BURST_SETTING_BOOL: return k < 5 ? bools[k] : NULL;
    case BURST_SETTING_CHOICE:
        if (k == 0)
            return "no-such-choice";
        if (k > 1)
            return NULL;
        snprintf(buf, cap, "%.*sx", (int)strcspn(r->choices, ","), r->choices);
        return buf;
    case BURST_SETTING_STRING: return k == 0 ? r->refused : NULL;
    }
    return NULL;
}

/* A create that must refuse row r's malformed value val; a backend this build lacks is
 * skipped (its creates cannot run here; burst_settings_check still covers the row). */
static void registry_expect(const struct burst_setting *r, const char *val, burst_status_t st,
                            int backend)
{
    const char *msg = burst_last_error();
    if (backend && st == BURST_ERR_INVALID_ARG && msg &&
        harness_contains(msg, "not a backend of this build"))
        return;
    if (st != BURST_ERR_INVALID_ARG)
        print_error("%s = \"%s\": accepted or refused otherwise\n", r->name, val);
    /* the job key is never printed: the message names the variable only */
    EXPECT(st, INVALID, r->name, r->secret ? NULL : val);
}

/* Row r set to val: every create that reads the row fails naming it, and so does
 * burst_settings_check unless a launcher sets the row for its ranks. */
static void registry_row(const struct burst_setting *r, const char *val,
                         struct burst_local_world *w)
{
    struct burst_comm_params cp = burst_comm_params_default();
    cp.world = w;
    struct burst_context_params xp = burst_context_params_default();
    struct burst_context *ctx = SENTINEL;
    struct burst_comm *c = SENTINEL;
    setenv(r->name, val, 1);
    if (r->scope & (BURST_SCOPE_CONTEXT | BURST_SCOPE_CPU | BURST_SCOPE_TESTS)) {
        /* auto reads BURST_BACKEND; the cpu backend the cpu rows */
        xp.backend = r->scope & BURST_SCOPE_CPU ? "cpu" : "auto";
        registry_expect(r, val, burst_context_create(&xp, &ctx), 0);
    }
    if (r->scope & (BURST_SCOPE_VULKAN | BURST_SCOPE_CUDA)) {
        xp.backend = r->scope & BURST_SCOPE_VULKAN ? "vulkan" : "cuda";
        registry_expect(r, val, burst_context_create(&xp, &ctx), 1);
    }
    if (r->scope & (BURST_SCOPE_COMM | BURST_SCOPE_FABRIC | BURST_SCOPE_TESTS))
        registry_expect(r, val, burst_comm_create(&cp, &c), 0);
    if (r->scope & BURST_SCOPE_LAUNCH) {
        /* the other launcher variables well formed, so that the row's is the one refused */
        static const char *const ok[][2] = {{"BURST_SIZE", "1"},
                                            {"BURST_RANK", "0"},
                                            {"BURST_RENDEZVOUS", "127.0.0.1:1"},
                                            {"BURST_JOB_KEY", "00112233445566778899aabbccddeeff"}};
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
            if (strcmp(ok[i][0], r->name) != 0)
                setenv(ok[i][0], ok[i][1], 1);
        registry_expect(r, val, burst_comm_create_env(&c), 0);
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
            if (strcmp(ok[i][0], r->name) != 0)
                unsetenv(ok[i][0]);
    } else {
        registry_expect(r, val, burst_settings_check(), 0);
    }
    unsetenv(r->name);
    assert_ptr_equal(ctx, SENTINEL);
    assert_ptr_equal(c, SENTINEL);
}

/* Every row of runtime/settings.c's table with every malformed value its type gives: the one
 * rule (settings.h) holds for each, through every create that reads it. */
static void env_registry(void **state)
{
    (void)state;
    struct burst_local_world *w = NULL;
    assert_int_equal(burst_local_world_create(1, &w), BURST_OK);
    int rows = 0, values = 0;
    for (int i = 0; i < BURST_SETTINGS_COUNT; i++) {
        const struct burst_setting *r = &burst_settings[i];
        char buf[64], *keep = getenv(r->name) ? strdup(getenv(r->name)) : NULL;
        const char *val;
        int k = 0;
        for (; (val = malformed_value(r, k, buf, sizeof buf)) != NULL; k++)
            registry_row(r, val, w);
        rows += k > 0;
        values += k;
        if (keep)
            setenv(r->name, keep, 1);
        free(keep);
    }
    printf("settings table: %d rows, %d of them with malformed values, %d values refused\n",
           BURST_SETTINGS_COUNT, rows, values);
    assert_true(rows >= BURST_SETTINGS_COUNT - 12);
    burst_local_world_destroy(w);
}

/* `test_bad_input --malformed`: the generated values as "NAME<TAB>SCOPE<TAB>VALUE" lines (SCOPE:
 * launcher for the rows a launcher sets for its ranks, else library), for tests that run them
 * through burstrun (tests/burstrun_cli.sh env). */
static int print_malformed(void)
{
    for (int i = 0; i < BURST_SETTINGS_COUNT; i++) {
        const struct burst_setting *r = &burst_settings[i];
        char buf[64];
        const char *val;
        for (int k = 0; (val = malformed_value(r, k, buf, sizeof buf)) != NULL; k++)
            printf("%s\t%s\t%s\n", r->name, r->scope & BURST_SCOPE_LAUNCH ? "launcher" : "library",
                   val);
    }
    return 0;
}

/* burst_plan_workspace_estimate: each bad argument named, bytes untouched. */
static void plan_estimate_errors(void **state)
{
    (void)state;
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = 64;
    pp.q_heads = pp.kv_heads = 2;
    pp.head_dim = 16;
    uint64_t b[4] = {7, 7, 7, 7};
    EXPECT(burst_plan_workspace_estimate(NULL, 2, b), INVALID, "params", "NULL");
    EXPECT(burst_plan_workspace_estimate(&pp, 2, NULL), INVALID, "bytes", "NULL");
    EXPECT(burst_plan_workspace_estimate(&pp, 0, b), INVALID, "size", "0");
    EXPECT(burst_plan_workspace_estimate(&pp, 65537, b), INVALID, "size", "65537");
    pp.head_dim = 12;
    expect_error(burst_plan_workspace_estimate(&pp, 2, b), BURST_ERR_UNSUPPORTED, INVALID,
                 "head_dim", "12");
    pp.head_dim = 16;
    pp.ranks_per_node = 3;
    EXPECT(burst_plan_workspace_estimate(&pp, 4, b), INVALID, "ranks_per_node", "3");
    for (int i = 0; i < 4; i++)
        assert_int_equal(b[i], 7);
    pp.ranks_per_node = 0;
    assert_int_equal(burst_plan_workspace_estimate(&pp, 4, b), BURST_OK);
    for (int i = 0; i < 4; i++)
        assert_true(b[i] > 0 && b[i] < ((uint64_t)1 << 30));
}

/* params->timeout_ms beyond BURST_COMM_TIMEOUT_MAX_MS is refused at once, naming it. */
static void comm_timeout_range(void **state)
{
    struct fixture *f = *state;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.world = f->world;
    cp.timeout_ms = BURST_COMM_TIMEOUT_MAX_MS + 1;
    struct burst_comm *c = SENTINEL;
    EXPECT(burst_comm_create(&cp, &c), INVALID, "timeout_ms", "86400001");
    assert_ptr_equal(c, SENTINEL);
}

/* ------------------------------------------------------------------ plan creation */

static void plan_expect(struct fixture *f, const struct burst_plan_params *pp, burst_status_t want,
                        burst_status_t want2, const char *n1, const char *n2)
{
    struct burst_plan *plan = SENTINEL;
    burst_status_t st = burst_plan_create(harness_context(), f->comm, pp, &plan);
    expect_error(st, want, want2, n1, n2);
    assert_ptr_equal(plan, SENTINEL);
}

#define PLAN_BAD(fn, stmt, n1, n2)                                                                 \
    static void fn(void **state)                                                                   \
    {                                                                                              \
        struct fixture *f = *state;                                                                \
        struct burst_plan_params pp = f->pp;                                                       \
        stmt;                                                                                      \
        plan_expect(f, &pp, INVALID, INVALID, n1, n2);                                             \
    }
#define PLAN_BAD2(fn, stmt, n1, n2)                                                                \
    static void fn(void **state)                                                                   \
    {                                                                                              \
        struct fixture *f = *state;                                                                \
        struct burst_plan_params pp = f->pp;                                                       \
        stmt;                                                                                      \
        plan_expect(f, &pp, INVALID, BURST_ERR_UNSUPPORTED, n1, n2);                               \
    }

static void plan_null_ctx(void **state)
{
    struct fixture *f = *state;
    struct burst_plan *plan = SENTINEL;
    EXPECT(burst_plan_create(NULL, f->comm, &f->pp, &plan), INVALID, "ctx", "NULL");
    assert_ptr_equal(plan, SENTINEL);
}

static void plan_null_comm(void **state)
{
    struct fixture *f = *state;
    struct burst_plan *plan = SENTINEL;
    EXPECT(burst_plan_create(harness_context(), NULL, &f->pp, &plan), INVALID, "comm", "NULL");
    assert_ptr_equal(plan, SENTINEL);
}

static void plan_null_params(void **state)
{
    struct fixture *f = *state;
    struct burst_plan *plan = SENTINEL;
    EXPECT(burst_plan_create(harness_context(), f->comm, NULL, &plan), INVALID, "params", "NULL");
    assert_ptr_equal(plan, SENTINEL);
}

static void plan_null_out(void **state)
{
    struct fixture *f = *state;
    EXPECT(burst_plan_create(harness_context(), f->comm, &f->pp, NULL), INVALID, "plan_p", "NULL");
}

static void plan_bad_version(void **state)
{
    struct fixture *f = *state;
    struct burst_plan_params pp = f->pp;
    pp.api_version = 0x7fff0000u;
    plan_expect(f, &pp, BURST_ERR_VERSION, BURST_ERR_VERSION, "api_version", NULL);
}

PLAN_BAD(plan_batch_zero, pp.batch = 0, "batch", "0")
PLAN_BAD(plan_batch_negative, pp.batch = -7, "batch", "-7")
PLAN_BAD(plan_seq_len_zero, pp.seq_len = 0, "seq_len", "0")
PLAN_BAD(plan_seq_len_negative, pp.seq_len = -5, "seq_len", "-5")
PLAN_BAD(plan_q_heads_zero, pp.q_heads = 0, "q_heads", "0")
PLAN_BAD(plan_q_heads_negative, pp.q_heads = -3, "q_heads", "-3")
PLAN_BAD(plan_kv_heads_zero, pp.kv_heads = 0, "kv_heads", "0")
PLAN_BAD(plan_kv_heads_negative, pp.kv_heads = -2, "kv_heads", "-2")
PLAN_BAD(plan_heads_not_divisible, (pp.q_heads = 6, pp.kv_heads = 4), "heads", "6")
PLAN_BAD(plan_kv_heads_above_q, (pp.q_heads = 2, pp.kv_heads = 4), "heads", "4")
PLAN_BAD2(plan_head_dim_zero, pp.head_dim = 0, "head_dim", "0")
PLAN_BAD2(plan_head_dim_negative, pp.head_dim = -8, "head_dim", "-8")
PLAN_BAD2(plan_head_dim_12, pp.head_dim = 12, "head_dim", "12")
PLAN_BAD2(plan_head_dim_264, pp.head_dim = 264, "head_dim", "264")
PLAN_BAD2(plan_head_dim_4, pp.head_dim = 4, "head_dim", "4")
PLAN_BAD(plan_dtype_unknown, pp.dtype = (burst_dtype_t)9, "dtype", "9")
PLAN_BAD(plan_layout_unknown, pp.layout = (burst_layout_t)5, "layout", "5")
PLAN_BAD(plan_bwd_unknown, pp.bwd_pattern = (burst_bwd_pattern_t)7, "bwd_pattern", "7")
PLAN_BAD(plan_wire_unknown, pp.acc_wire = (burst_wire_precision_t)4, "acc_wire", "4")
PLAN_BAD(plan_window_left_negative, pp.window_left = -2, "window_left", "-2")
PLAN_BAD(plan_window_right_negative, pp.window_right = -3, "window_right", "-3")
PLAN_BAD(plan_scale_negative, pp.softmax_scale = -0.5f, "softmax_scale", "-0.5")
PLAN_BAD(plan_ranks_per_node_negative, pp.ranks_per_node = -1, "ranks_per_node", "-1")
/* the fixture's ring has one rank */
PLAN_BAD(plan_ranks_per_node_above_ring, pp.ranks_per_node = 2, "ranks_per_node", "2")

static const int64_t lens_short[1] = {15};
static const int64_t lens_zero[1] = {0};
static const int64_t lens_ok[1] = {N};
PLAN_BAD(plan_shard_lens_sum, pp.shard_lens = lens_short, "shard_lens", "15")
PLAN_BAD(plan_shard_lens_zero, (pp.shard_lens = lens_zero, pp.seq_len = 0), "seq_len", "0")
static const int64_t lens_one[1] = {1};
static const double weights_neg[1] = {-1.0};
static const double weights_ok[1] = {2.0};
/* zigzag splits each shard into two chunks: explicit shards need >= 2 tokens */
PLAN_BAD(plan_shard_lens_zigzag,
         (pp.shard_lens = lens_one, pp.seq_len = 1, pp.layout = BURST_LAYOUT_ZIGZAG),
         "shard_lens[0]", ">= 2")
PLAN_BAD(plan_shard_weights_negative, pp.shard_weights = weights_neg, "shard_weights[0]", "-1")
PLAN_BAD(plan_shard_weights_and_lens, (pp.shard_weights = weights_ok, pp.shard_lens = lens_ok),
         "shard_weights", "shard_lens")
PLAN_BAD(plan_measure_and_weights, (pp.shard_weights = weights_ok, pp.measure_speed = 1),
         "measure_speed", "shard_weights")

/* packed documents: lengths summing to seq_len (N = 16), each >= 1, with num_docs */
static const int64_t docs_short[2] = {5, 5};
static const int64_t docs_long[2] = {10, 10};
static const int64_t docs_zero[3] = {8, 0, 8};
static const int64_t docs_negative[2] = {-3, 19};
static const int64_t docs_ok[2] = {6, 10};
PLAN_BAD(plan_doc_lens_sum, (pp.doc_lens = docs_short, pp.num_docs = 2), "doc_lens", "10")
PLAN_BAD(plan_doc_lens_past, (pp.doc_lens = docs_long, pp.num_docs = 2), "doc_lens", "index 1")
PLAN_BAD(plan_doc_lens_zero, (pp.doc_lens = docs_zero, pp.num_docs = 3), "doc_lens[1]", "0")
PLAN_BAD(plan_doc_lens_negative, (pp.doc_lens = docs_negative, pp.num_docs = 2), "doc_lens[0]",
         "-3")
PLAN_BAD(plan_num_docs_without_lens, pp.num_docs = 2, "num_docs", "2")
PLAN_BAD(plan_doc_lens_without_num, (pp.doc_lens = docs_ok, pp.num_docs = 0), "num_docs", "0")
PLAN_BAD(plan_num_docs_negative, (pp.doc_lens = docs_ok, pp.num_docs = -1), "num_docs", "-1")
PLAN_BAD(plan_num_docs_above_seq, (pp.doc_lens = docs_ok, pp.num_docs = N + 1), "num_docs", "17")
/* soft-capping: a cap must be finite and positive (0 = off) */
PLAN_BAD(plan_softcap_nan, pp.softcap = NAN, "softcap", "nan")
PLAN_BAD(plan_softcap_inf, pp.softcap = INFINITY, "softcap", "inf")
PLAN_BAD(plan_softcap_negative, pp.softcap = -5.0f, "softcap", "-5")

static void plan_after_abort(void **state)
{
    /* a failed plan_create aborts the communicator: the next collective call says so */
    struct fixture *f = *state;
    struct burst_plan_params pp = f->pp;
    pp.head_dim = 12;
    struct burst_plan *plan = SENTINEL;
    assert_int_not_equal(burst_plan_create(harness_context(), f->comm, &pp, &plan), BURST_OK);
    pp = f->pp;
    assert_int_equal(burst_plan_create(harness_context(), f->comm, &pp, &plan),
                     BURST_ERR_COMM_FAILED);
    assert_ptr_equal(plan, SENTINEL);
}

/* ------------------------------------------------------------------ forward */

#define FWD(f, q, k, v, o, lse) burst_attention_forward((f)->plan, q, k, v, o, lse)

static void fwd_expect(struct fixture *f, burst_status_t st, const char *n1, const char *n2)
{
    EXPECT(st, INVALID, n1, n2);
    check_untouched(f);
}

static void fwd_null_plan(void **state)
{
    struct fixture *f = *state;
    fwd_expect(f, burst_attention_forward(NULL, &f->tq, &f->tk, &f->tv, &f->to, f->lse), "plan",
               "NULL");
}
static void fwd_null_q(void **state)
{
    struct fixture *f = *state;
    fwd_expect(f, FWD(f, NULL, &f->tk, &f->tv, &f->to, f->lse), "q", "NULL");
}
static void fwd_null_k(void **state)
{
    struct fixture *f = *state;
    fwd_expect(f, FWD(f, &f->tq, NULL, &f->tv, &f->to, f->lse), "k", "NULL");
}
static void fwd_null_v(void **state)
{
    struct fixture *f = *state;
    fwd_expect(f, FWD(f, &f->tq, &f->tk, NULL, &f->to, f->lse), "v", "NULL");
}
static void fwd_null_o(void **state)
{
    struct fixture *f = *state;
    fwd_expect(f, FWD(f, &f->tq, &f->tk, &f->tv, NULL, f->lse), "o", "NULL");
}
static void fwd_null_lse(void **state)
{
    struct fixture *f = *state;
    fwd_expect(f, FWD(f, &f->tq, &f->tk, &f->tv, &f->to, NULL), "lse", "NULL");
}
static void fwd_null_data(void **state)
{
    struct fixture *f = *state;
    struct burst_tensor t = f->tk;
    t.data = NULL;
    fwd_expect(f, FWD(f, &f->tq, &t, &f->tv, &f->to, f->lse), "k", "NULL");
}

#define FWD_TENSOR_BAD(fn, field, stmt, n1, n2)                                                    \
    static void fn(void **state)                                                                   \
    {                                                                                              \
        struct fixture *f = *state;                                                                \
        struct burst_tensor t = f->field;                                                          \
        stmt;                                                                                      \
        struct burst_tensor q = f->tq, k = f->tk, v = f->tv, o = f->to;                            \
        if (&f->field == &f->tq)                                                                   \
            q = t;                                                                                 \
        if (&f->field == &f->tk)                                                                   \
            k = t;                                                                                 \
        if (&f->field == &f->tv)                                                                   \
            v = t;                                                                                 \
        if (&f->field == &f->to)                                                                   \
            o = t;                                                                                 \
        fwd_expect(f, FWD(f, &q, &k, &v, &o, f->lse), n1, n2);                                     \
    }

FWD_TENSOR_BAD(fwd_q_batch_mismatch, tq, t.shape[0] = 3, "q", "3")
FWD_TENSOR_BAD(fwd_q_len_mismatch, tq, t.shape[1] = N - 1, "q", "15")
FWD_TENSOR_BAD(fwd_q_heads_mismatch, tq, t.shape[2] = 5, "q", "5")
FWD_TENSOR_BAD(fwd_q_head_dim_mismatch, tq, t.shape[3] = 24, "q", "24")
FWD_TENSOR_BAD(fwd_k_heads_mismatch, tk, (t.data = f->dout, t.shape[2] = HQ, t.stride[1] = HQ * D),
               "k", "2")
FWD_TENSOR_BAD(fwd_v_len_mismatch, tv, t.shape[1] = N + 3, "v", "19")
FWD_TENSOR_BAD(fwd_k_dtype_mixed, tk, t.dtype = BURST_DTYPE_FP16, "k", "fp16|dtype")
FWD_TENSOR_BAD(fwd_v_dtype_mixed, tv, t.dtype = BURST_DTYPE_BF16, "v", "bf16|dtype")
FWD_TENSOR_BAD(fwd_o_dtype_mixed, to, t.dtype = BURST_DTYPE_FP16, "o", "fp16|dtype")
FWD_TENSOR_BAD(fwd_q_dtype_unknown, tq, t.dtype = (burst_dtype_t)11, "q", "11")
FWD_TENSOR_BAD(fwd_q_stride3, tq, t.stride[3] = 2, "stride", "2")
FWD_TENSOR_BAD(fwd_k_stride_negative, tk, t.stride[1] = -(int64_t)(HKV * D), "stride", "-16")
FWD_TENSOR_BAD(fwd_v_stride_zero, tv, t.stride[2] = 0, "stride", "0")
/* Strides whose byte offsets overflow must be refused, not wrapped around. */
FWD_TENSOR_BAD(fwd_o_stride_overflow, to, t.stride[1] = INT64_MAX, "stride", "9223372036854775807")
FWD_TENSOR_BAD(fwd_q_stride_wraps, tq, t.stride[1] = (int64_t)1 << 62, "stride",
               "4611686018427387904")
FWD_TENSOR_BAD(fwd_o_overlapping, to, t.stride[1] = D / 2, "o", "overlap")
FWD_TENSOR_BAD(fwd_o_heads_overlap, to, t.stride[2] = 8, "o", "overlap")

static void fwd_o_aliases_q(void **state)
{
    struct fixture *f = *state;
    struct burst_tensor o = f->tq;
    EXPECT(FWD(f, &f->tq, &f->tk, &f->tv, &o, f->lse), INVALID, "o", "q");
    check_untouched(f);
}

/* ------------------------------------------------------------------ backward */

#define BWD(f, q, k, v, o, lse, dout, dq, dk, dv)                                                  \
    burst_attention_backward((f)->plan, q, k, v, o, lse, dout, dq, dk, dv)
#define BWD_ALL(f) &f->tq, &f->tk, &f->tv, &f->to, f->lse, &f->tdout, &f->tdq, &f->tdk, &f->tdv

static void bwd_null_plan(void **state)
{
    struct fixture *f = *state;
    fwd_expect(f, burst_attention_backward(NULL, BWD_ALL(f)), "plan", "NULL");
}

#define BWD_NULL(fn, name, ...)                                                                    \
    static void fn(void **state)                                                                   \
    {                                                                                              \
        struct fixture *f = *state;                                                                \
        fwd_expect(f, BWD(f, __VA_ARGS__), name, "NULL");                                          \
    }
BWD_NULL(bwd_null_q, "q", NULL, &f->tk, &f->tv, &f->to, f->lse, &f->tdout, &f->tdq, &f->tdk,
         &f->tdv)
BWD_NULL(bwd_null_k, "k", &f->tq, NULL, &f->tv, &f->to, f->lse, &f->tdout, &f->tdq, &f->tdk,
         &f->tdv)
BWD_NULL(bwd_null_v, "v", &f->tq, &f->tk, NULL, &f->to, f->lse, &f->tdout, &f->tdq, &f->tdk,
         &f->tdv)
BWD_NULL(bwd_null_o, "o", &f->tq, &f->tk, &f->tv, NULL, f->lse, &f->tdout, &f->tdq, &f->tdk,
         &f->tdv)
BWD_NULL(bwd_null_lse, "lse", &f->tq, &f->tk, &f->tv, &f->to, NULL, &f->tdout, &f->tdq, &f->tdk,
         &f->tdv)
BWD_NULL(bwd_null_dout, "dout", &f->tq, &f->tk, &f->tv, &f->to, f->lse, NULL, &f->tdq, &f->tdk,
         &f->tdv)
BWD_NULL(bwd_null_dq, "dq", &f->tq, &f->tk, &f->tv, &f->to, f->lse, &f->tdout, NULL, &f->tdk,
         &f->tdv)
BWD_NULL(bwd_null_dk, "dk", &f->tq, &f->tk, &f->tv, &f->to, f->lse, &f->tdout, &f->tdq, NULL,
         &f->tdv)
BWD_NULL(bwd_null_dv, "dv", &f->tq, &f->tk, &f->tv, &f->to, f->lse, &f->tdout, &f->tdq, &f->tdk,
         NULL)

#define BWD_TENSOR_BAD(fn, field, stmt, n1, n2)                                                    \
    static void fn(void **state)                                                                   \
    {                                                                                              \
        struct fixture *f = *state;                                                                \
        struct burst_tensor t = f->field;                                                          \
        stmt;                                                                                      \
        struct burst_tensor q = f->tq, k = f->tk, v = f->tv, o = f->to, dout = f->tdout,           \
                            dq = f->tdq, dk = f->tdk, dv = f->tdv;                                 \
        struct burst_tensor *all[8] = {&q, &k, &v, &o, &dout, &dq, &dk, &dv};                      \
        const struct burst_tensor *orig[8] = {&f->tq,    &f->tk,  &f->tv,  &f->to,                 \
                                              &f->tdout, &f->tdq, &f->tdk, &f->tdv};               \
        for (int i = 0; i < 8; i++)                                                                \
            if (orig[i] == &f->field)                                                              \
                *all[i] = t;                                                                       \
        fwd_expect(f, BWD(f, &q, &k, &v, &o, f->lse, &dout, &dq, &dk, &dv), n1, n2);               \
    }

BWD_TENSOR_BAD(bwd_dout_len_mismatch, tdout, t.shape[1] = 9, "dout", "9")
BWD_TENSOR_BAD(bwd_o_heads_mismatch, to, t.shape[2] = 3, "o", "3")
BWD_TENSOR_BAD(bwd_dq_dtype_mixed, tdq, t.dtype = BURST_DTYPE_BF16, "dq", "bf16|dtype")
BWD_TENSOR_BAD(bwd_dk_dtype_mixed, tdk, t.dtype = BURST_DTYPE_FP16, "dk", "fp16|dtype")
BWD_TENSOR_BAD(bwd_dout_dtype_mixed, tdout, t.dtype = BURST_DTYPE_FP16, "dout", "fp16|dtype")
BWD_TENSOR_BAD(bwd_dv_head_dim_mismatch, tdv, t.shape[3] = 8, "dv", "8")
BWD_TENSOR_BAD(bwd_dv_stride3, tdv, t.stride[3] = 3, "stride", "3")
BWD_TENSOR_BAD(bwd_dq_stride_negative, tdq, t.stride[0] = -1, "stride", "-1")
BWD_TENSOR_BAD(bwd_dk_overlapping, tdk, t.stride[1] = 4, "dk", "overlap")

static void bwd_dq_aliases_dk(void **state)
{
    struct fixture *f = *state;
    /* dk written over dq's memory: both outputs, overlapping */
    struct burst_tensor dk = burst_tensor_contiguous(f->dq, BURST_DTYPE_FP32, 1, N, HKV, D);
    fwd_expect(f, BWD(f, &f->tq, &f->tk, &f->tv, &f->to, f->lse, &f->tdout, &f->tdq, &dk, &f->tdv),
               "overlap", NULL);
}

/* ------------------------------------------------------------------ stats */

static void stats_null_plan(void **state)
{
    (void)state;
    struct burst_phase_stats s;
    memset(&s, 0x5a, sizeof s);
    struct burst_phase_stats s0 = s;
    EXPECT(burst_plan_stats(NULL, BURST_PHASE_FWD, &s), INVALID, "plan", "NULL");
    assert_memory_equal(&s, &s0, sizeof s);
}

static void stats_null_out(void **state)
{
    struct fixture *f = *state;
    EXPECT(burst_plan_stats(f->plan, BURST_PHASE_FWD, NULL), INVALID, "stats_p", "NULL");
}

static void stats_bad_phase(void **state)
{
    struct fixture *f = *state;
    struct burst_phase_stats s;
    memset(&s, 0x5a, sizeof s);
    struct burst_phase_stats s0 = s;
    EXPECT(burst_plan_stats(f->plan, (burst_phase_t)7, &s), INVALID, "phase", "7");
    assert_memory_equal(&s, &s0, sizeof s);
}

static void step_traffic_bad_step(void **state)
{
    struct fixture *f = *state;
    struct burst_traffic t;
    memset(&t, 0x5a, sizeof t);
    struct burst_traffic t0 = t;
    EXPECT(burst_plan_step_traffic(f->plan, BURST_PHASE_FWD, -1, &t), INVALID, "step", "-1");
    EXPECT(burst_plan_step_traffic(f->plan, BURST_PHASE_FWD, 1000, &t), INVALID, "step", "1000");
    assert_memory_equal(&t, &t0, sizeof t);
}

static void step_times_bad(void **state)
{
    struct fixture *f = *state;
    double c = 0.0, w = 0.0;
    EXPECT(burst_plan_step_times(f->plan, BURST_PHASE_FWD, 0, NULL, &w), INVALID, "compute_s_p",
           "NULL");
    EXPECT(burst_plan_step_times(f->plan, BURST_PHASE_FWD, 0, &c, NULL), INVALID, "wait_s_p",
           "NULL");
    EXPECT(burst_plan_step_times(NULL, BURST_PHASE_BWD, 0, &c, &w), INVALID, "plan", "NULL");
    EXPECT(burst_plan_step_times(f->plan, BURST_PHASE_FWD, -1, &c, &w), INVALID, "step", "-1");
}

static void step_traffic_null(void **state)
{
    struct fixture *f = *state;
    struct burst_traffic t;
    EXPECT(burst_plan_step_traffic(f->plan, BURST_PHASE_FWD, 0, NULL), INVALID, "traffic_p",
           "NULL");
    EXPECT(burst_plan_step_traffic(NULL, BURST_PHASE_FWD, 0, &t), INVALID, "plan", "NULL");
}

/* ------------------------------------------------------------------ layout helpers */

static void layout_shard_len_errors(void **state)
{
    (void)state;
    int64_t len = 77;
    EXPECT(burst_layout_shard_len(BURST_LAYOUT_NATURAL, 16, 0, 0, &len), INVALID, "ranks", "0");
    EXPECT(burst_layout_shard_len(BURST_LAYOUT_NATURAL, 16, 4, -1, &len), INVALID, "rank", "-1");
    EXPECT(burst_layout_shard_len(BURST_LAYOUT_NATURAL, 16, 4, 4, &len), INVALID, "rank", "4");
    EXPECT(burst_layout_shard_len(BURST_LAYOUT_NATURAL, 3, 4, 0, &len), INVALID, "seq_len", "3");
    EXPECT(burst_layout_shard_len(BURST_LAYOUT_STRIPED, 3, 4, 0, &len), INVALID, "seq_len", "3");
    EXPECT(burst_layout_shard_len(BURST_LAYOUT_ZIGZAG, 7, 4, 0, &len), INVALID, "seq_len", "7");
    EXPECT(burst_layout_shard_len((burst_layout_t)9, 16, 4, 0, &len), INVALID, "layout", "9");
    EXPECT(burst_layout_shard_len(BURST_LAYOUT_NATURAL, 16, 4, 0, NULL), INVALID, "len_p", "NULL");
    assert_int_equal(len, 77);
}

static void layout_position_errors(void **state)
{
    (void)state;
    int64_t pos = 77;
    EXPECT(burst_layout_position(BURST_LAYOUT_ZIGZAG, 16, 4, 1, 4, &pos), INVALID, "local", "4");
    EXPECT(burst_layout_position(BURST_LAYOUT_STRIPED, 16, 4, 1, -1, &pos), INVALID, "local", "-1");
    EXPECT(burst_layout_position(BURST_LAYOUT_NATURAL, 16, 4, 5, 0, &pos), INVALID, "rank", "5");
    EXPECT(burst_layout_position(BURST_LAYOUT_NATURAL, 16, 4, 0, 0, NULL), INVALID, "pos_p",
           "NULL");
    assert_int_equal(pos, 77);
}

static void layout_offset_errors(void **state)
{
    (void)state;
    int64_t off = 77;
    EXPECT(burst_layout_shard_offset(BURST_LAYOUT_NATURAL, 16, -2, 0, &off), INVALID, "ranks",
           "-2");
    EXPECT(burst_layout_shard_offset(BURST_LAYOUT_STRIPED, 16, 4, 9, &off), INVALID, "rank", "9");
    EXPECT(burst_layout_shard_offset(BURST_LAYOUT_ZIGZAG, 16, 4, 0, NULL), INVALID, "offset_p",
           "NULL");
    assert_int_equal(off, 77);
}

static void layout_permute_errors(void **state)
{
    struct fixture *f = *state;
    /* q [1, 16, 2, 16] natural -> o (permuted), o must stay untouched on every error */
    struct burst_tensor src = f->tq, dst = f->to;
    EXPECT(burst_layout_permute(BURST_LAYOUT_ZIGZAG, 4, NULL, &dst), INVALID, "natural", "NULL");
    EXPECT(burst_layout_permute(BURST_LAYOUT_ZIGZAG, 4, &src, NULL), INVALID, "permuted", "NULL");
    EXPECT(burst_layout_unpermute(BURST_LAYOUT_ZIGZAG, 4, NULL, &dst), INVALID, "permuted", "NULL");
    EXPECT(burst_layout_unpermute(BURST_LAYOUT_ZIGZAG, 4, &src, NULL), INVALID, "natural", "NULL");
    EXPECT(burst_layout_permute(BURST_LAYOUT_ZIGZAG, 0, &src, &dst), INVALID, "ranks", "0");
    EXPECT(burst_layout_permute(BURST_LAYOUT_ZIGZAG, 9, &src, &dst), INVALID, "seq_len", "16");
    EXPECT(burst_layout_permute((burst_layout_t)6, 4, &src, &dst), INVALID, "layout", "6");
    struct burst_tensor d2 = dst;
    d2.dtype = BURST_DTYPE_FP16;
    EXPECT(burst_layout_permute(BURST_LAYOUT_STRIPED, 4, &src, &d2), INVALID, "dtype", "fp16");
    d2 = dst;
    d2.shape[2] = 1;
    EXPECT(burst_layout_permute(BURST_LAYOUT_STRIPED, 4, &src, &d2), INVALID, "shape", "1");
    d2 = dst;
    d2.stride[3] = 2;
    EXPECT(burst_layout_unpermute(BURST_LAYOUT_STRIPED, 4, &src, &d2), INVALID, "stride", "2");
    d2 = dst;
    d2.stride[2] = 4; /* heads overlap in the output */
    EXPECT(burst_layout_unpermute(BURST_LAYOUT_STRIPED, 4, &src, &d2), INVALID, "overlap", NULL);
    struct burst_tensor s2 = src;
    s2.data = f->o + 8; /* src and dst overlap */
    EXPECT(burst_layout_permute(BURST_LAYOUT_NATURAL, 4, &s2, &dst), INVALID, "overlap", NULL);
    check_untouched(f);
}

/* burst_layout_plan_*: the parameters validated as by burst_plan_create, then their own
 * arguments; outputs untouched on every error */
static void layout_plan_errors(void **state)
{
    struct fixture *f = *state;
    struct burst_plan_params pp = f->pp;
    int64_t lens[4] = {77, 77, 77, 77}, pos = 77, all[N];
    EXPECT(burst_layout_plan_lens(NULL, 4, lens), INVALID, "params", "NULL");
    EXPECT(burst_layout_plan_lens(&pp, 0, lens), INVALID, "ranks", "0");
    EXPECT(burst_layout_plan_lens(&pp, 4, NULL), INVALID, "lens_p", "NULL");
    EXPECT(burst_layout_plan_position(&pp, 4, 4, 0, &pos), INVALID, "rank", "4");
    EXPECT(burst_layout_plan_position(&pp, 4, 0, 4, &pos), INVALID, "local", "4");
    EXPECT(burst_layout_plan_position(&pp, 4, 0, 0, NULL), INVALID, "pos_p", "NULL");
    EXPECT(burst_layout_plan_positions(&pp, 4, -1, all), INVALID, "rank", "-1");
    EXPECT(burst_layout_plan_positions(&pp, 4, 0, NULL), INVALID, "positions_p", "NULL");
    pp.doc_lens = docs_short;
    pp.num_docs = 2;
    EXPECT(burst_layout_plan_lens(&pp, 4, lens), INVALID, "doc_lens", "10");
    pp.doc_lens = docs_ok;
    pp.layout = BURST_LAYOUT_ZIGZAG; /* 2 chunks per rank: 16 tokens for 9 ranks are too few */
    EXPECT(burst_layout_plan_lens(&pp, 9, lens), INVALID, "seq_len", "16");
    pp.measure_speed = 1;
    EXPECT(burst_layout_plan_lens(&pp, 4, lens), INVALID, "measure_speed", "1");
    pp = f->pp;
    pp.seq_len = 20;
    struct burst_tensor src = f->tq, dst = f->to;
    EXPECT(burst_layout_plan_permute(&pp, 4, &src, &dst), INVALID, "seq_len", "20");
    EXPECT(burst_layout_plan_unpermute(NULL, 4, &src, &dst), INVALID, "params", "NULL");
    EXPECT(burst_layout_plan_permute(&f->pp, 4, &src, NULL), INVALID, "permuted", "NULL");
    for (int r = 0; r < 4; r++)
        assert_int_equal(lens[r], 77);
    assert_int_equal(pos, 77);
    check_untouched(f);
}

/* ------------------------------------------------------------------ multi-rank failures */

enum {
    MR_G = 3
};

struct mr_state {
    int bad_rank;
    int kind; /* 0: mismatch causal, 1: mismatch head_dim, 2: bad plan param, 3: bad forward,
                 4: bad backward, 5: mismatch dtype, 6: mismatch ranks_per_node (1 vs 0 = 3),
                 7: other document lengths, 8: documents on one rank only, 9: mismatch softcap */
    burst_status_t st[MR_G], st_after[MR_G];
    double ms[MR_G];
    char msg[MR_G][512];
    int untouched[MR_G];
};

/* One rank's tensors in the multi-rank cases: inputs filled, outputs (dsinks included)
 * poisoned, views over them, and a copy of the outputs to tell that a failing call wrote
 * nothing. */
struct mr_outputs {
    float o[NQ], lse[HQ * N], dq[NQ], dk[NKV], dv[NKV], dsinks[HQ];
};

struct mr_tensors {
    float q[NQ], k[NKV], v[NKV], dout[NQ];
    struct mr_outputs out, snap;
    struct burst_tensor tq, tk, tv, tdo, to, tdq, tdk, tdv;
};

static void mr_tensors_init(struct mr_tensors *t)
{
    for (size_t i = 0; i < NQ; i++)
        t->q[i] = t->dout[i] = 0.25f * (float)(i % 7);
    for (size_t i = 0; i < NKV; i++)
        t->k[i] = t->v[i] = 0.125f * (float)(i % 5);
    memset(&t->out, 0xa5, sizeof t->out);
    t->tq = burst_tensor_contiguous(t->q, BURST_DTYPE_FP32, 1, N, HQ, D);
    t->tk = burst_tensor_contiguous(t->k, BURST_DTYPE_FP32, 1, N, HKV, D);
    t->tv = burst_tensor_contiguous(t->v, BURST_DTYPE_FP32, 1, N, HKV, D);
    t->tdo = burst_tensor_contiguous(t->dout, BURST_DTYPE_FP32, 1, N, HQ, D);
    t->to = burst_tensor_contiguous(t->out.o, BURST_DTYPE_FP32, 1, N, HQ, D);
    t->tdq = burst_tensor_contiguous(t->out.dq, BURST_DTYPE_FP32, 1, N, HQ, D);
    t->tdk = burst_tensor_contiguous(t->out.dk, BURST_DTYPE_FP32, 1, N, HKV, D);
    t->tdv = burst_tensor_contiguous(t->out.dv, BURST_DTYPE_FP32, 1, N, HKV, D);
}

/* Have the outputs kept the bytes they had at the last snapshot (t->snap = t->out)? */
static int mr_tensors_untouched(const struct mr_tensors *t)
{
    return memcmp(&t->snap, &t->out, sizeof t->out) == 0;
}

static void mr_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct mr_state *s = arg;
    struct burst_plan_params pp = valid_params();
    pp.seq_len = N * MR_G;
    pp.causal = 0;
    const int bad = rank == s->bad_rank;
    if (bad && s->kind == 0)
        pp.causal = 1;
    if (bad && s->kind == 1)
        pp.head_dim = 2 * D;
    if (bad && s->kind == 2)
        pp.head_dim = 12;
    if (bad && s->kind == 5)
        pp.dtype = BURST_DTYPE_BF16;
    if (bad && s->kind == 6)
        pp.ranks_per_node = 1; /* the others: 0 = flat = MR_G per node */
    static const int64_t docs[2] = {20, N * MR_G - 20}, docs_bad[2] = {21, N * MR_G - 21};
    if (s->kind == 7 || (bad && s->kind == 8)) {
        pp.doc_lens = bad && s->kind == 7 ? docs_bad : docs;
        pp.num_docs = 2;
        pp.layout = BURST_LAYOUT_ZIGZAG; /* documents move zigzag's shards: named first */
    }
    if (bad && s->kind == 9)
        pp.softcap = 30.0f;
    struct mr_tensors t;
    mr_tensors_init(&t);
    struct burst_plan *plan = NULL;
    const double t0 = harness_now_ms();
    burst_status_t st = burst_plan_create(harness_context(), comm, &pp, &plan);
    if (st == BURST_OK && (s->kind == 3 || s->kind == 4)) {
        /* a healthy forward on every rank first: a device builds its kernels on first use (a
         * Vulkan driver may compile them then: seconds on a cold shader cache), and a peer's time
         * to notice the failing call below must not count that */
        st = burst_attention_forward(plan, &t.tq, &t.tk, &t.tv, &t.to, t.out.lse);
    }
    t.snap = t.out;
    const double t1 = harness_now_ms();
    if (st == BURST_OK && s->kind == 3)
        st = burst_attention_forward(plan, &t.tq, &t.tk, &t.tv, bad ? NULL : &t.to, t.out.lse);
    if (st == BURST_OK && s->kind == 4) {
        struct burst_tensor bdq = t.tdq;
        if (bad)
            bdq.dtype = BURST_DTYPE_FP16;
        st = burst_attention_backward(plan, &t.tq, &t.tk, &t.tv, &t.to, t.out.lse, &t.tdo, &bdq,
                                      &t.tdk, &t.tdv);
    }
    s->ms[rank] = harness_now_ms() - (s->kind >= 3 ? t1 : t0);
    s->st[rank] = st;
    snprintf(s->msg[rank], sizeof s->msg[rank], "%s", burst_last_error());
    s->untouched[rank] = mr_tensors_untouched(&t);
    /* the communicator is aborted now: the next collective call says so, at once */
    s->st_after[rank] =
        plan ? burst_attention_forward(plan, &t.tq, &t.tk, &t.tv, &t.to, t.out.lse) : st;
    burst_plan_destroy(plan);
}

static void run_mr(struct mr_state *s)
{
    assert_int_equal(harness_run_ranks(MR_G, TIMEOUT_MS, mr_rank, s), 0);
    for (int r = 0; r < MR_G; r++)
        printf("rank %d: status %d (%s) after %.0f ms: %s\n", r, (int)s->st[r],
               burst_status_str(s->st[r]), s->ms[r], s->msg[r]);
}

static void mismatch(int kind, const char *field, int bad_rank)
{
    struct mr_state s;
    memset(&s, 0, sizeof s);
    s.bad_rank = bad_rank;
    s.kind = kind;
    run_mr(&s);
    char rk[16];
    snprintf(rk, sizeof rk, "%d", bad_rank);
    for (int r = 0; r < MR_G; r++) {
        if (s.st[r] != BURST_ERR_PLAN_MISMATCH)
            fail_msg("rank %d: status %d (%s), expected BURST_ERR_PLAN_MISMATCH: %s", r,
                     (int)s.st[r], burst_status_str(s.st[r]), s.msg[r]);
        /* names the field and a rank that differs: the bad one, or rank 0 on the bad rank */
        if (!harness_contains(s.msg[r], field) || !harness_contains(s.msg[r], "rank") ||
            !(harness_contains(s.msg[r], rk) || (r == bad_rank && harness_contains(s.msg[r], "0"))))
            fail_msg("rank %d: message \"%s\" does not name field %s and rank %s", r, s.msg[r],
                     field, rk);
        assert_true(s.ms[r] < (TIMEOUT_MS + 1000) * harness_time_scale());
        assert_true(s.untouched[r]);
    }
}

static void mr_mismatch_causal(void **state)
{
    (void)state;
    mismatch(0, "causal", 2);
}

static void mr_mismatch_head_dim(void **state)
{
    (void)state;
    mismatch(1, "head_dim", 1);
}

static void mr_mismatch_dtype(void **state)
{
    (void)state;
    mismatch(5, "dtype", 2);
}

static void mr_mismatch_ranks_per_node(void **state)
{
    (void)state;
    mismatch(6, "ranks_per_node", 1);
}

static void mr_mismatch_doc_lens(void **state)
{
    (void)state;
    mismatch(7, "doc_lens", 1);
}

static void mr_mismatch_docs_one_rank(void **state)
{
    (void)state;
    mismatch(8, "doc_lens", 2);
}

/* Does the shared context's backend run soft-capping? (a one-rank plan with a cap) */
static int softcap_supported(void)
{
    struct burst_local_world *w = NULL;
    struct burst_comm *comm = NULL;
    struct burst_plan *plan = NULL;
    struct burst_comm_params cp = burst_comm_params_default();
    struct burst_plan_params pp = valid_params();
    pp.softcap = 30.0f;
    cp.size = 1;
    burst_status_t st = burst_local_world_create(1, &w);
    cp.world = w;
    if (st == BURST_OK)
        st = burst_comm_create(&cp, &comm);
    if (st == BURST_OK)
        st = burst_plan_create(harness_context(), comm, &pp, &plan);
    burst_plan_destroy(plan);
    burst_comm_destroy(comm);
    burst_local_world_destroy(w);
    return st != BURST_ERR_UNSUPPORTED;
}

static void mr_mismatch_softcap(void **state)
{
    (void)state;
    if (!softcap_supported()) {
        printf("the backend does not run soft-capping: skipped\n");
        skip();
    }
    mismatch(9, "softcap", 2);
}

/* ---- sinks: bad sinks on every rank (each rank fails by itself, naming the argument) or on
 * one (its peers: BURST_ERR_PEER_FAILED), outputs (o, lse; dq, dk, dv, dsinks) untouched ---- */

enum sinks_bad {
    SB_FWD_NULL,   /* forward: sinks NULL */
    SB_FWD_LEN,    /* forward: num_sinks = 3 with q_heads 2 */
    SB_FWD_NAN,    /* forward: sinks[1] NaN */
    SB_FWD_INF,    /* forward: sinks[0] -Inf */
    SB_BWD_NULL,   /* backward: sinks NULL */
    SB_BWD_LEN,    /* backward: num_sinks = 1 */
    SB_BWD_NAN,    /* backward: sinks[0] NaN */
    SB_BWD_DSINKS, /* backward: dsinks NULL */
    SB_COUNT,
    SB_BWD_MIXED = SB_COUNT /* rank 1 calls burst_attention_backward, the others _sinks */
};

struct sinks_state {
    enum sinks_bad kind;
    int bad_rank;               /* the one rank whose sinks are bad; -1: every rank's */
    pthread_barrier_t fwd_done; /* every rank's good forward is over before a bad backward */
    burst_status_t st[MR_G];
    double ms[MR_G];
    char msg[MR_G][512];
    int untouched[MR_G];
};

static void sinks_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct sinks_state *s = arg;
    struct burst_plan_params pp = valid_params();
    pp.seq_len = N * MR_G;
    float good[HQ] = {1.5f, -0.5f}, bad[HQ] = {1.5f, -0.5f};
    if (s->kind == SB_FWD_NAN || s->kind == SB_BWD_NAN)
        bad[s->kind == SB_FWD_NAN ? 1 : 0] = NAN;
    if (s->kind == SB_FWD_INF)
        bad[0] = -INFINITY;
    const int mine = s->bad_rank < 0 || s->bad_rank == rank; /* this rank's sinks are bad */
    const float *sk = !mine ? good : s->kind == SB_FWD_NULL || s->kind == SB_BWD_NULL ? NULL : bad;
    const int64_t ns = !mine ? HQ : s->kind == SB_FWD_LEN ? 3 : s->kind == SB_BWD_LEN ? 1 : HQ;
    struct mr_tensors t;
    mr_tensors_init(&t);
    struct burst_plan *plan = NULL;
    burst_status_t st = burst_plan_create(harness_context(), comm, &pp, &plan);
    const int fwd = s->kind < SB_BWD_NULL;
    if (st == BURST_OK && !fwd) /* a good forward first: the backward's inputs */
        st = burst_attention_forward_sinks(plan, &t.tq, &t.tk, &t.tv, good, HQ, &t.to, t.out.lse);
    pthread_barrier_wait(&s->fwd_done);
    const double t0 = harness_now_ms(); /* the call under test starts */
    t.snap = t.out;
    if (st == BURST_OK && fwd)
        st = burst_attention_forward_sinks(plan, &t.tq, &t.tk, &t.tv, sk, ns, &t.to, t.out.lse);
    else if (st == BURST_OK && s->kind == SB_BWD_MIXED && rank == 1)
        st = burst_attention_backward(plan, &t.tq, &t.tk, &t.tv, &t.to, t.out.lse, &t.tdo, &t.tdq,
                                      &t.tdk, &t.tdv);
    else if (st == BURST_OK)
        st = burst_attention_backward_sinks(plan, &t.tq, &t.tk, &t.tv, &t.to, t.out.lse, &t.tdo, sk,
                                            ns, &t.tdq, &t.tdk, &t.tdv,
                                            mine && s->kind == SB_BWD_DSINKS ? NULL : t.out.dsinks);
    s->st[rank] = st;
    s->ms[rank] = harness_now_ms() - t0;
    snprintf(s->msg[rank], sizeof s->msg[rank], "%s", burst_last_error());
    s->untouched[rank] = mr_tensors_untouched(&t);
    burst_plan_destroy(plan);
}

static void sinks_bad_inputs(void **state)
{
    (void)state;
    static const char *const names[SB_COUNT][2] = {
        {"sinks", "NULL"}, {"num_sinks", "3"}, {"sinks[1]", "nan"}, {"sinks[0]", "inf"},
        {"sinks", "NULL"}, {"num_sinks", "1"}, {"sinks[0]", "nan"}, {"dsinks", "NULL"},
    };
    for (int kind = 0; kind < SB_COUNT; kind++) {
        struct sinks_state s;
        memset(&s, 0, sizeof s);
        s.kind = (enum sinks_bad)kind;
        s.bad_rank = -1;
        assert_int_equal(pthread_barrier_init(&s.fwd_done, NULL, MR_G), 0);
        assert_int_equal(harness_run_ranks(MR_G, TIMEOUT_MS, sinks_rank, &s), 0);
        pthread_barrier_destroy(&s.fwd_done);
        for (int r = 0; r < MR_G; r++) {
            printf("sinks case %d rank %d: %s\n", kind, r, s.msg[r]);
            if (s.st[r] != BURST_ERR_INVALID_ARG || !harness_contains(s.msg[r], names[kind][0]) ||
                !harness_contains(s.msg[r], names[kind][1]))
                fail_msg("sinks case %d rank %d: status %d (%s), message \"%s\" does not name "
                         "%s = %s",
                         kind, r, (int)s.st[r], burst_status_str(s.st[r]), s.msg[r], names[kind][0],
                         names[kind][1]);
            assert_true(s.untouched[r]);
        }
    }
}

/* The collective rule of the sinks calls broken: rank 1 calls burst_attention_backward while the
 * others call burst_attention_backward_sinks. The others wait in the exchange of the sinks'
 * gradient, which comes before the last ring, and rank 1 in that ring: every rank fails within
 * the communicator's timeout, and no output is written anywhere. */
static void sinks_mixed_backward(void **state)
{
    (void)state;
    struct sinks_state s;
    memset(&s, 0, sizeof s);
    s.kind = SB_BWD_MIXED;
    s.bad_rank = -1;
    assert_int_equal(pthread_barrier_init(&s.fwd_done, NULL, MR_G), 0);
    assert_int_equal(harness_run_ranks(MR_G, TIMEOUT_MS, sinks_rank, &s), 0);
    pthread_barrier_destroy(&s.fwd_done);
    for (int r = 0; r < MR_G; r++) {
        printf("rank %d: status %d (%s) after %.0f ms: %s\n", r, (int)s.st[r],
               burst_status_str(s.st[r]), s.ms[r], s.msg[r]);
        assert_int_not_equal(s.st[r], BURST_OK);
        assert_true(s.ms[r] < (2 * TIMEOUT_MS + 2000) * harness_time_scale());
        assert_true(s.untouched[r]);
    }
}

/* Bad sinks on one rank only (NaN in the forward, the wrong length in the backward, no dsinks):
 * that rank fails naming the argument, its peers return BURST_ERR_PEER_FAILED within the
 * communicator's timeout instead of waiting, and no rank's outputs are written. */
static void sinks_one_rank(void **state)
{
    (void)state;
    static const struct {
        enum sinks_bad kind;
        const char *name, *value;
    } bad[] = {{SB_FWD_NAN, "sinks[1]", "nan"},
               {SB_BWD_LEN, "num_sinks", "1"},
               {SB_BWD_DSINKS, "dsinks", "NULL"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        struct sinks_state s;
        memset(&s, 0, sizeof s);
        s.kind = bad[k].kind;
        s.bad_rank = 1 + (int)k % (MR_G - 1);
        assert_int_equal(pthread_barrier_init(&s.fwd_done, NULL, MR_G), 0);
        assert_int_equal(harness_run_ranks(MR_G, TIMEOUT_MS, sinks_rank, &s), 0);
        pthread_barrier_destroy(&s.fwd_done);
        for (int r = 0; r < MR_G; r++) {
            printf("sinks on rank %d only, case %zu, rank %d: status %d after %.0f ms: %s\n",
                   s.bad_rank, k, r, (int)s.st[r], s.ms[r], s.msg[r]);
            if (r == s.bad_rank)
                assert_true(s.st[r] == BURST_ERR_INVALID_ARG &&
                            harness_contains(s.msg[r], bad[k].name) &&
                            harness_contains(s.msg[r], bad[k].value));
            else
                assert_int_equal(s.st[r], BURST_ERR_PEER_FAILED);
            assert_true(s.ms[r] < (TIMEOUT_MS + 1000) * harness_time_scale());
            assert_true(s.untouched[r]);
        }
    }
}

/* ranks_per_node that does not divide the ring (3 of 4) or exceeds it (5 of 4), on every rank:
 * each rank fails locally, naming the field and the value, without waiting for its peers */
struct rpn_state {
    int value;
    burst_status_t st[4];
    char msg[4][512];
    double ms[4];
};

static void rpn_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct rpn_state *s = arg;
    struct burst_plan_params pp = valid_params();
    pp.seq_len = N * 4;
    pp.ranks_per_node = s->value;
    struct burst_plan *plan = SENTINEL;
    const double t0 = harness_now_ms();
    s->st[rank] = burst_plan_create(harness_context(), comm, &pp, &plan);
    s->ms[rank] = harness_now_ms() - t0;
    snprintf(s->msg[rank], sizeof s->msg[rank], "%s", burst_last_error());
    if (s->st[rank] == BURST_OK)
        burst_plan_destroy(plan);
    else if (plan != SENTINEL)
        s->st[rank] = BURST_ERR_INTERNAL; /* plan_p written on failure */
}

static void rpn_bad(int value)
{
    struct rpn_state s;
    memset(&s, 0, sizeof s);
    s.value = value;
    assert_int_equal(harness_run_ranks(4, TIMEOUT_MS, rpn_rank, &s), 0);
    char v[16];
    snprintf(v, sizeof v, "%d", value);
    int invalid = 0;
    for (int r = 0; r < 4; r++) {
        /* a rank whose peer aborted the communicator first may see that instead */
        if (s.st[r] == BURST_ERR_PEER_FAILED || s.st[r] == BURST_ERR_COMM_FAILED)
            continue;
        if (s.st[r] != BURST_ERR_INVALID_ARG)
            fail_msg("G=4 ranks_per_node=%d rank %d: status %d (%s), expected "
                     "BURST_ERR_INVALID_ARG: %s",
                     value, r, (int)s.st[r], burst_status_str(s.st[r]), s.msg[r]);
        invalid++;
        if (!harness_contains(s.msg[r], "ranks_per_node") || !harness_contains(s.msg[r], v))
            fail_msg("G=4 rank %d: message \"%s\" does not name ranks_per_node and %s", r, s.msg[r],
                     v);
        if (!(s.ms[r] < (TIMEOUT_MS + 1000) * harness_time_scale()))
            fail_msg("rank %d returned after %.0f ms (timeout %d ms)", r, s.ms[r], TIMEOUT_MS);
    }
    if (invalid == 0)
        fail_msg("G=4 ranks_per_node=%d: no rank reported BURST_ERR_INVALID_ARG", value);
}

static void mr_ranks_per_node_not_divisor(void **state)
{
    (void)state;
    rpn_bad(3);
}

static void mr_ranks_per_node_above_ring(void **state)
{
    (void)state;
    rpn_bad(5);
}

static void peers_fail(int kind, int bad_rank, const char *n1, const char *n2)
{
    struct mr_state s;
    memset(&s, 0, sizeof s);
    s.bad_rank = bad_rank;
    s.kind = kind;
    run_mr(&s);
    for (int r = 0; r < MR_G; r++) {
        if (r == bad_rank) {
            if (s.st[r] != BURST_ERR_INVALID_ARG && s.st[r] != BURST_ERR_UNSUPPORTED)
                fail_msg("bad rank %d: status %d (%s): %s", r, (int)s.st[r],
                         burst_status_str(s.st[r]), s.msg[r]);
            if (!harness_contains(s.msg[r], n1) || !harness_contains(s.msg[r], n2))
                fail_msg("bad rank %d: message \"%s\" does not name %s / %s", r, s.msg[r], n1, n2);
        } else if (s.st[r] != BURST_ERR_PEER_FAILED) {
            fail_msg("rank %d: status %d (%s), expected BURST_ERR_PEER_FAILED: %s", r, (int)s.st[r],
                     burst_status_str(s.st[r]), s.msg[r]);
        }
        if (!(s.ms[r] < (TIMEOUT_MS + 1000) * harness_time_scale()))
            fail_msg("rank %d returned after %.0f ms (timeout %d ms)", r, s.ms[r], TIMEOUT_MS);
        if (!s.untouched[r])
            fail_msg("rank %d: outputs written although the call failed", r);
        if (s.st_after[r] != BURST_ERR_COMM_FAILED && s.st_after[r] != BURST_ERR_PEER_FAILED &&
            s.st_after[r] != s.st[r])
            fail_msg("rank %d: call after the failure returned %d (%s)", r, (int)s.st_after[r],
                     burst_status_str(s.st_after[r]));
    }
}

static void mr_bad_plan_one_rank(void **state)
{
    (void)state;
    peers_fail(2, 1, "head_dim", "12");
}

static void mr_bad_forward_one_rank(void **state)
{
    (void)state;
    peers_fail(3, 2, "o", "NULL");
}

static void mr_bad_backward_one_rank(void **state)
{
    (void)state;
    peers_fail(4, 0, "dq", "fp16");
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_comm, teardown)
#define TP(fn) cmocka_unit_test_setup_teardown(fn, setup_plan, teardown)

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--malformed") == 0)
        return print_malformed();
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ctx_null_out),
        cmocka_unit_test(ctx_bad_version),
        cmocka_unit_test(ctx_newer_minor),
        cmocka_unit_test(ctx_unknown_backend),
        cmocka_unit_test(ctx_negative_threads),
        cmocka_unit_test(ctx_env_bad_cpu_isa),
        cmocka_unit_test(ctx_alloc_zero),
        cmocka_unit_test(ctx_alloc_null),
        cmocka_unit_test(ctx_alloc_huge),
        cmocka_unit_test(probe_null_out),
        cmocka_unit_test(world_bad_size),
        cmocka_unit_test(world_null_out),
        cmocka_unit_test(comm_null_params),
        T(comm_null_out),
        cmocka_unit_test(comm_null_world),
        cmocka_unit_test(comm_bad_rank),
        cmocka_unit_test(comm_bad_size),
        T(comm_rank_taken),
        T(comm_bad_version),
        T(comm_unknown_transport),
        cmocka_unit_test(comm_bad_bootstrap),
        cmocka_unit_test(comm_env_bad_bootstrap),
        cmocka_unit_test(comm_env_launchers),
        cmocka_unit_test(comm_pingpong_bad),
        cmocka_unit_test(env_malformed),
        cmocka_unit_test(setting_accessors),
        cmocka_unit_test(env_registry),
        T(comm_timeout_range),
        cmocka_unit_test(plan_estimate_errors),
        T(plan_null_ctx),
        T(plan_null_comm),
        T(plan_null_params),
        T(plan_null_out),
        T(plan_bad_version),
        T(plan_batch_zero),
        T(plan_batch_negative),
        T(plan_seq_len_zero),
        T(plan_seq_len_negative),
        T(plan_q_heads_zero),
        T(plan_q_heads_negative),
        T(plan_kv_heads_zero),
        T(plan_kv_heads_negative),
        T(plan_heads_not_divisible),
        T(plan_kv_heads_above_q),
        T(plan_head_dim_zero),
        T(plan_head_dim_negative),
        T(plan_head_dim_12),
        T(plan_head_dim_264),
        T(plan_head_dim_4),
        T(plan_dtype_unknown),
        T(plan_layout_unknown),
        T(plan_bwd_unknown),
        T(plan_wire_unknown),
        T(plan_window_left_negative),
        T(plan_window_right_negative),
        T(plan_scale_negative),
        T(plan_ranks_per_node_negative),
        T(plan_ranks_per_node_above_ring),
        T(plan_shard_lens_sum),
        T(plan_shard_lens_zero),
        T(plan_shard_lens_zigzag),
        T(plan_shard_weights_negative),
        T(plan_shard_weights_and_lens),
        T(plan_measure_and_weights),
        T(plan_doc_lens_sum),
        T(plan_doc_lens_past),
        T(plan_doc_lens_zero),
        T(plan_doc_lens_negative),
        T(plan_num_docs_without_lens),
        T(plan_doc_lens_without_num),
        T(plan_num_docs_negative),
        T(plan_num_docs_above_seq),
        T(plan_softcap_nan),
        T(plan_softcap_inf),
        T(plan_softcap_negative),
        T(plan_after_abort),
        TP(fwd_null_plan),
        TP(fwd_null_q),
        TP(fwd_null_k),
        TP(fwd_null_v),
        TP(fwd_null_o),
        TP(fwd_null_lse),
        TP(fwd_null_data),
        TP(fwd_q_batch_mismatch),
        TP(fwd_q_len_mismatch),
        TP(fwd_q_heads_mismatch),
        TP(fwd_q_head_dim_mismatch),
        TP(fwd_k_heads_mismatch),
        TP(fwd_v_len_mismatch),
        TP(fwd_k_dtype_mixed),
        TP(fwd_v_dtype_mixed),
        TP(fwd_o_dtype_mixed),
        TP(fwd_q_dtype_unknown),
        TP(fwd_q_stride3),
        TP(fwd_o_stride_overflow),
        TP(fwd_q_stride_wraps),
        TP(fwd_k_stride_negative),
        TP(fwd_v_stride_zero),
        TP(fwd_o_overlapping),
        TP(fwd_o_heads_overlap),
        TP(fwd_o_aliases_q),
        TP(bwd_null_plan),
        TP(bwd_null_q),
        TP(bwd_null_k),
        TP(bwd_null_v),
        TP(bwd_null_o),
        TP(bwd_null_lse),
        TP(bwd_null_dout),
        TP(bwd_null_dq),
        TP(bwd_null_dk),
        TP(bwd_null_dv),
        TP(bwd_dout_len_mismatch),
        TP(bwd_o_heads_mismatch),
        TP(bwd_dq_dtype_mixed),
        TP(bwd_dk_dtype_mixed),
        TP(bwd_dout_dtype_mixed),
        TP(bwd_dv_head_dim_mismatch),
        TP(bwd_dv_stride3),
        TP(bwd_dq_stride_negative),
        TP(bwd_dk_overlapping),
        TP(bwd_dq_aliases_dk),
        cmocka_unit_test(stats_null_plan),
        TP(stats_null_out),
        TP(stats_bad_phase),
        TP(step_traffic_bad_step),
        TP(step_traffic_null),
        TP(step_times_bad),
        cmocka_unit_test(layout_shard_len_errors),
        cmocka_unit_test(layout_position_errors),
        cmocka_unit_test(layout_offset_errors),
        T(layout_permute_errors),
        T(layout_plan_errors),
        cmocka_unit_test(mr_mismatch_causal),
        cmocka_unit_test(mr_mismatch_head_dim),
        cmocka_unit_test(mr_mismatch_dtype),
        cmocka_unit_test(mr_mismatch_ranks_per_node),
        cmocka_unit_test(mr_mismatch_doc_lens),
        cmocka_unit_test(mr_mismatch_docs_one_rank),
        cmocka_unit_test(mr_mismatch_softcap),
        cmocka_unit_test(sinks_bad_inputs),
        cmocka_unit_test(sinks_mixed_backward),
        cmocka_unit_test(sinks_one_rank),
        cmocka_unit_test(mr_ranks_per_node_not_divisor),
        cmocka_unit_test(mr_ranks_per_node_above_ring),
        cmocka_unit_test(mr_bad_plan_one_rank),
        cmocka_unit_test(mr_bad_forward_one_rank),
        cmocka_unit_test(mr_bad_backward_one_rank),
    };
    const int rc = cmocka_run_group_tests_name("bad_input", tests, NULL, NULL);
    harness_fini();
    return rc;
}
