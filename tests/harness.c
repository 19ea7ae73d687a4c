/*
 * tests/harness.c - see harness.h (tolerances are derived there).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "context_internal.h" /* ops->mem.device_memory */
#include "cpu/cpu_internal.h" /* burst_cpu_isa_forced_is_auto */
#include "ref.h"

/* ---- seeds and random numbers ---- */

static uint64_t harness_seed_value;
static pthread_once_t harness_seed_once = PTHREAD_ONCE_INIT;

static void harness_seed_init(void)
{
    const char *env = getenv("BURST_TEST_SEED");
    if (env && *env) {
        harness_seed_value = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t s =
            (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
        harness_seed_value = harness_rng_next(&s) & 0xffffffffffffull; /* short to retype */
    }
}

int harness_time_scale(void)
{
    const char *ts = getenv("BURST_TEST_TIME_SCALE");
    int v = ts ? atoi(ts) : 0;
    return v > 0 ? v : 1;
}

uint64_t harness_seed(void)
{
    pthread_once(&harness_seed_once, harness_seed_init);
    return harness_seed_value;
}

uint64_t harness_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double harness_rng_uniform(uint64_t *state, double lo, double hi)
{
    double u = (double)(harness_rng_next(state) >> 11) * 0x1.0p-53;
    return lo + (hi - lo) * u;
}

/* ---- dtypes ---- */

double harness_unit_roundoff(burst_dtype_t dtype)
{
    switch (dtype) {
    case BURST_DTYPE_FP16: return 0x1.0p-11;
    case BURST_DTYPE_BF16: return 0x1.0p-8;
    default: return 0x1.0p-24;
    }
}

/* Round to `bits` significant bits, with subnormal quantum 2^min_exp and overflow at max. */
static double harness_round_bits(double x, int bits, int min_exp, double max)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    double a = fabs(x), r;
    if (a < ldexp(1.0, min_exp + bits - 1)) {
        r = ldexp(nearbyint(ldexp(a, -min_exp)), min_exp);
    } else {
        int e;
        double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
        r = ldexp(nearbyint(ldexp(m, bits)), e - bits);
    }
    if (r > max)
        r = INFINITY;
    return x < 0 ? -r : r;
}

double harness_round(burst_dtype_t dtype, double x)
{
    switch (dtype) {
    case BURST_DTYPE_FP16: return harness_round_bits(x, 11, -24, 65504.0);
    case BURST_DTYPE_BF16: return harness_round_bits(x, 8, -133, 0x1.fep127);
    default: return (double)(float)x;
    }
}

static uint16_t harness_fp16_bits(double v) /* v exactly representable */
{
    uint16_t sign = signbit(v) ? 0x8000u : 0u;
    double a = fabs(v);
    if (isnan(v))
        return 0x7e00u;
    if (isinf(v))
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1.0p-14)
        return (uint16_t)(sign | (uint16_t)ldexp(a, 24));
    int e;
    double m = frexp(a, &e);
    unsigned mant = (unsigned)ldexp(m, 11) - 1024u;
    return (uint16_t)(sign | (unsigned)(e - 1 + 15) << 10 | mant);
}

static double harness_fp16_value(uint16_t h)
{
    unsigned e = (h >> 10) & 31u, m = h & 1023u;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(1024u + m), (int)e - 25);
    return (h & 0x8000u) ? -v : v;
}

static void harness_ctx_fini(void);
static void harness_backends_fini(void);

int harness_run_cases(const char *group, const struct harness_case *cases, size_t ncases,
                      void (*fn)(void **state), const struct CMUnitTest *extra, size_t nextra)
{
    struct CMUnitTest *tests = calloc(ncases + nextra, sizeof(*tests));
    if (!tests) {
        fprintf(stderr, "%s: out of memory\n", group);
        return 1;
    }
    for (size_t i = 0; i < ncases; i++) {
        tests[i].name = cases[i].name;
        tests[i].test_func = fn;
        tests[i].initial_state = (void *)(uintptr_t)&cases[i];
    }
    for (size_t i = 0; i < nextra; i++)
        tests[ncases + i] = extra[i];
    int rc = _cmocka_run_group_tests(group, tests, ncases + nextra, NULL, NULL);
    free(tests);
    /* Destroy the shared contexts now rather than only from atexit(): NVIDIA's Vulkan driver
     * tears itself down at exit before our handlers run, and a vkDeviceWaitIdle() from an
     * atexit handler then jumps into unmapped driver code (SIGSEGV after every test passed,
     * seen on an H200). The atexit handlers stay as a safety net (they are no-ops after this). */
    harness_fini();
    return rc;
}

void harness_store(burst_dtype_t dtype, void *base, size_t i, double x)
{
    double v = harness_round(dtype, x);
    if (dtype == BURST_DTYPE_FP32) {
        ((float *)base)[i] = (float)v;
    } else if (dtype == BURST_DTYPE_FP16) {
        ((uint16_t *)base)[i] = harness_fp16_bits(v);
    } else {
        float f = (float)v; /* exact: bf16 values are floats */
        uint32_t bits;
        memcpy(&bits, &f, 4);
        ((uint16_t *)base)[i] = (uint16_t)(bits >> 16);
    }
}

double harness_load(burst_dtype_t dtype, const void *base, size_t i)
{
    if (dtype == BURST_DTYPE_FP32)
        return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    if (dtype == BURST_DTYPE_FP16)
        return harness_fp16_value(h);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#define POISON32 0x7fc5a5a5u
#define POISON16 0x7e5au
#define POISONBF 0x7fe5u

void harness_poison(burst_dtype_t dtype, void *base, size_t count)
{
    if (dtype == BURST_DTYPE_FP32) {
        uint32_t v = POISON32;
        for (size_t i = 0; i < count; i++)
            memcpy((char *)base + 4 * i, &v, 4);
    } else {
        uint16_t v = dtype == BURST_DTYPE_FP16 ? POISON16 : POISONBF;
        for (size_t i = 0; i < count; i++)
            ((uint16_t *)base)[i] = v;
    }
}

int harness_is_poison(burst_dtype_t dtype, const void *base, size_t i)
{
    if (dtype == BURST_DTYPE_FP32) {
        uint32_t v;
        memcpy(&v, (const char *)base + 4 * i, 4);
        return v == POISON32;
    }
    return ((const uint16_t *)base)[i] == (dtype == BURST_DTYPE_FP16 ? POISON16 : POISONBF);
}

/* ---- context, threads ---- */

static struct burst_context *harness_ctx;
static pthread_once_t harness_ctx_once = PTHREAD_ONCE_INIT;

static void harness_ctx_fini(void)
{
    burst_context_destroy(harness_ctx);
    harness_ctx = NULL;
}

static void harness_ctx_init(void)
{
    struct burst_context_params cp = burst_context_params_default();
    const char *be = getenv("BURST_TEST_BACKEND");
    cp.backend = be && *be ? be : "cpu";
    const char *variant = getenv("BURST_TEST_ISA_VARIANT"); /* meson's *_isa_<variant> tests */
    if (strcmp(cp.backend, "cpu") == 0 && variant && *variant && burst_cpu_isa_forced_is_auto()) {
        fprintf(stderr, "harness: BURST_CPU_ISA names this cpu's default kernels, which the "
                        "unforced run tests: SKIP\n");
        exit(77);
    }
    burst_status_t st = burst_context_create(&cp, &harness_ctx);
    if (st == BURST_ERR_NO_DEVICE) { /* a GPU backend's test on a machine without that device */
        fprintf(stderr, "harness: backend %s: no device here (%s): SKIP\n", cp.backend,
                burst_last_error());
        exit(77);
    }
    if (st == BURST_ERR_UNSUPPORTED) { /* e.g. BURST_CPU_ISA names kernels this cpu lacks */
        fprintf(stderr, "harness: backend %s: not runnable here (%s): SKIP\n", cp.backend,
                burst_last_error());
        exit(77);
    }
    if (st != BURST_OK) {
        fprintf(stderr, "harness: burst_context_create failed: %s\n", burst_last_error());
        harness_ctx = NULL;
        return;
    }
    atexit(harness_ctx_fini);
}

void harness_fini(void)
{
    harness_backends_fini();
    harness_ctx_fini();
}

struct burst_context *harness_context(void)
{
    pthread_once(&harness_ctx_once, harness_ctx_init);
    return harness_ctx;
}

/* Contexts by backend name for mixed rings (harness_backend_context). */
#define HARNESS_MAX_BACKENDS 8
static struct {
    char name[32];
    struct burst_context *ctx;
} harness_backends[HARNESS_MAX_BACKENDS];
static pthread_mutex_t harness_backends_mu = PTHREAD_MUTEX_INITIALIZER;

static void harness_backends_fini(void)
{
    for (int i = 0; i < HARNESS_MAX_BACKENDS; i++)
        burst_context_destroy(harness_backends[i].ctx);
    memset(harness_backends, 0, sizeof harness_backends);
}

struct burst_context *harness_backend_context(const char *name)
{
    struct burst_context *ctx = NULL;
    pthread_mutex_lock(&harness_backends_mu);
    int i = 0;
    for (; i < HARNESS_MAX_BACKENDS && harness_backends[i].ctx; i++)
        if (strcmp(harness_backends[i].name, name) == 0)
            break;
    if (i < HARNESS_MAX_BACKENDS && harness_backends[i].ctx) {
        ctx = harness_backends[i].ctx;
    } else if (i < HARNESS_MAX_BACKENDS) {
        struct burst_context_params cp = burst_context_params_default();
        cp.backend = name;
        burst_status_t st = burst_context_create(&cp, &ctx);
        if (st == BURST_ERR_NO_DEVICE || (st == BURST_ERR_INVALID_ARG &&
                                          harness_contains(burst_last_error(), "not a backend"))) {
            fprintf(stderr, "harness: backend %s is not usable here (%s): SKIP\n", name,
                    burst_last_error());
            exit(77);
        }
        if (st != BURST_OK) {
            fprintf(stderr, "harness: backend %s: %s\n", name, burst_last_error());
            ctx = NULL;
        } else {
            if (i == 0)
                atexit(harness_backends_fini);
            snprintf(harness_backends[i].name, sizeof harness_backends[i].name, "%s", name);
            harness_backends[i].ctx = ctx;
        }
    }
    pthread_mutex_unlock(&harness_backends_mu);
    return ctx;
}

struct burst_context *harness_rank_context(const char *list, int rank)
{
    if (!list)
        return harness_context();
    int n = 1;
    for (const char *c = list; *c; c++)
        n += *c == ',';
    const char *s = list;
    for (int i = 0; i < rank % n; i++)
        s = strchr(s, ',') + 1;
    char name[32];
    size_t len = strcspn(s, ",");
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), s);
    return harness_backend_context(name);
}

int harness_fabric_probe(const char *prov)
{
    struct burst_rendezvous *rv = NULL;
    struct burst_comm *c = NULL;
    if (burst_rendezvous_create(NULL, 0, 1, NULL, &rv) != BURST_OK) {
        fprintf(stderr, "burst_rendezvous_create: %s\n", burst_last_error());
        return 1;
    }
    struct burst_comm_params cp = burst_comm_params_default();
    cp.transport = "fabric";
    cp.fabric = prov;
    cp.iface = strcmp(prov, "tcp") == 0 ? "127.0.0.1" : NULL;
    cp.rendezvous = burst_rendezvous_address(rv);
    cp.job_key = burst_rendezvous_key(rv);
    cp.timeout_ms = 10000;
    burst_status_t st = burst_comm_create(&cp, &c);
    burst_comm_destroy(c);
    burst_rendezvous_destroy(rv);
    if (st == BURST_ERR_UNSUPPORTED) {
        printf("SKIP: %s\n", burst_last_error());
        return 77;
    }
    if (st != BURST_OK) {
        fprintf(stderr, "one-rank probe over %s: %s: %s\n", prov, burst_status_str(st),
                burst_last_error());
        return 1;
    }
    return 0;
}

double harness_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int harness_contains(const char *s, const char *needle)
{
    if (!s || !needle)
        return 0;
    size_t n = strlen(needle);
    for (; *s; s++) {
        size_t i = 0;
        while (i < n && s[i] && tolower((unsigned char)s[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

struct harness_thread {
    pthread_t tid;
    int rank;
    struct burst_comm *comm;
    harness_rank_fn fn;
    void *arg;
};

static void *harness_thread_main(void *arg)
{
    struct harness_thread *t = arg;
    t->fn(t->rank, t->comm, t->arg);
    return NULL;
}

int harness_run_ranks(int ranks, int timeout_ms, harness_rank_fn fn, void *arg)
{
    struct burst_local_world *world = NULL;
    struct harness_thread *th = calloc((size_t)ranks, sizeof *th);
    int rc = -1, started = 0;
    if (!th || burst_local_world_create(ranks, &world) != BURST_OK) {
        fprintf(stderr, "harness: world of %d ranks: %s\n", ranks, burst_last_error());
        goto out;
    }
    for (int r = 0; r < ranks; r++) {
        struct burst_comm_params cp = burst_comm_params_default();
        cp.rank = r;
        cp.size = ranks;
        cp.world = world;
        cp.timeout_ms = timeout_ms;
        if (burst_comm_create(&cp, &th[r].comm) != BURST_OK) {
            fprintf(stderr, "harness: comm of rank %d: %s\n", r, burst_last_error());
            goto out;
        }
        th[r].rank = r;
        th[r].fn = fn;
        th[r].arg = arg;
    }
    for (; started < ranks; started++)
        if (pthread_create(&th[started].tid, NULL, harness_thread_main, &th[started]) != 0)
            break;
    if (started < ranks) { /* cannot run the ring: make the started ranks fail fast */
        fprintf(stderr, "harness: could only start %d of %d threads\n", started, ranks);
        for (int r = 0; r < ranks; r++)
            burst_comm_abort(th[r].comm, BURST_ERR_INTERNAL);
    }
    for (int r = 0; r < started; r++)
        pthread_join(th[r].tid, NULL);
    rc = started == ranks ? 0 : -1;
out:
    if (th)
        for (int r = 0; r < ranks; r++)
            burst_comm_destroy(th[r].comm);
    free(th);
    burst_local_world_destroy(world);
    return rc;
}

/* ---- problems ---- */

enum {
    T_Q,
    T_K,
    T_V,
    T_DO,
    T_O,
    T_DQ,
    T_DK,
    T_DV,
    T_COUNT
};

struct harness_problem {
    struct harness_case c;
    uint64_t seed;
    struct burst_plan_params params;
    int G, Hq, Hkv, d;
    int64_t B, N;
    int64_t *lens, *offs;
    size_t es;
    double scale;

    double *in64[4];            /* q, k, v, dO: natural, rounded, fp64 */
    void *nat[T_COUNT];         /* natural contiguous, dtype */
    void *perm[T_COUNT];        /* permuted (rank order), padded strides */
    size_t perm_count[T_COUNT]; /* elements of perm[] */
    struct burst_tensor perm_t[T_COUNT];
    float **lse_rank; /* [G][B, Hq, n_r] */
    /* device_memory backends (cuda): the rank-visible tensors live in the context's memory;
     * perm[] and lse_rank[] are their host images, uploaded before and downloaded after a run */
    int on_device;
    void *dev[T_COUNT];
    float **lse_dev;           /* [G] */
    float *lse_perm, *lse_nat; /* [B, Hq, N] */
    struct harness_rank_record *rec;

    /* sinks (c.sinks): the logits [Hq] (fp32, and the same values in fp64), each rank's
     * dsinks [G][Hq], the reference gradient and its tolerance [Hq] */
    float *sinks;
    double *sinks64;
    float **dsinks_rank;
    double *ref_dsinks, *tol_dsinks;
    struct harness_err err_dsinks;

    int ref_done;
    double *ref[H_NTENSORS]; /* o, lse, dq, dk, dv (natural) */
    double *extra[H_NTENSORS];
};

static int harness_heads(const struct harness_problem *p, int t)
{
    return (t == T_K || t == T_V || t == T_DK || t == T_DV) ? p->Hkv : p->Hq;
}

void harness_case_str(const struct harness_case *c, char *buf, size_t len)
{
    static const char *lay[] = {"natural", "zigzag", "striped"};
    static const char *bwd[] = {"burst", "ring", "auto"};
    char lens[384] = "";
    size_t o = 0;
    if (c->shard_lens) {
        o += (size_t)snprintf(lens, sizeof lens, " lens=");
        for (int r = 0; r < c->ranks && o < sizeof lens; r++)
            o += (size_t)snprintf(lens + o, sizeof lens - o, "%s%lld", r ? "," : "",
                                  (long long)c->shard_lens[r]);
    }
    if (c->shard_weights && o < sizeof lens) {
        o += (size_t)snprintf(lens + o, sizeof lens - o, " weights=");
        for (int r = 0; r < c->ranks && o < sizeof lens; r++)
            o += (size_t)snprintf(lens + o, sizeof lens - o, "%s%g", r ? "," : "",
                                  c->shard_weights[r]);
    }
    if (c->backends && o < sizeof lens)
        o += (size_t)snprintf(lens + o, sizeof lens - o, " backends=%s", c->backends);
    if (c->doc_lens && o < sizeof lens) {
        o += (size_t)snprintf(lens + o, sizeof lens - o, " docs=");
        for (int64_t t = 0; t < c->num_docs && o < sizeof lens; t++)
            o += (size_t)snprintf(lens + o, sizeof lens - o, "%s%lld", t ? "," : "",
                                  (long long)c->doc_lens[t]);
    }
    if (c->softcap > 0.0f && o < sizeof lens)
        o += (size_t)snprintf(lens + o, sizeof lens - o, " softcap=%g", (double)c->softcap);
    if (c->sinks && o < sizeof lens)
        snprintf(lens + o, sizeof lens - o, " sinks");
    snprintf(buf, len,
             "%s: G=%d B=%lld N=%lld Hq=%d Hkv=%d d=%d %s%s window=(%lld,%lld) %s bwd=%s "
             "wire=%s scale=%g amp=%g grid=%g pad=%d det=%d L=%d%s",
             c->name ? c->name : "?", c->ranks, (long long)c->batch, (long long)c->seq_len,
             c->q_heads, c->kv_heads, c->head_dim, burst_dtype_name(c->dtype),
             c->causal ? " causal" : "", (long long)c->window_left, (long long)c->window_right,
             (unsigned)c->layout < 3 ? lay[c->layout] : "?",
             (unsigned)c->bwd < 3 ? bwd[c->bwd] : "?",
             c->wire == BURST_WIRE_INPUT ? "input" : "fp32", (double)c->softmax_scale, c->amp,
             c->grid, c->pad, c->deterministic, c->ranks_per_node, lens);
}

uint64_t harness_problem_seed(const struct harness_problem *p)
{
    return p->seed;
}

void harness_problem_destroy(struct harness_problem *p)
{
    if (!p)
        return;
    for (int i = 0; i < 4; i++)
        free(p->in64[i]);
    for (int t = 0; t < T_COUNT; t++) {
        free(p->nat[t]);
        free(p->perm[t]);
        if (p->on_device)
            burst_context_free(harness_context(), p->dev[t]);
    }
    if (p->lse_dev)
        for (int r = 0; r < p->G; r++)
            burst_context_free(harness_context(), p->lse_dev[r]);
    free(p->lse_dev);
    if (p->lse_rank)
        for (int r = 0; r < p->G; r++)
            free(p->lse_rank[r]);
    free(p->lse_rank);
    free(p->lse_perm);
    free(p->lse_nat);
    if (p->dsinks_rank)
        for (int r = 0; r < p->G; r++)
            free(p->dsinks_rank[r]);
    free(p->dsinks_rank);
    free(p->sinks);
    free(p->sinks64);
    free(p->ref_dsinks);
    free(p->tol_dsinks);
    if (p->rec)
        for (int r = 0; r < p->G; r++)
            for (int ph = 0; ph < 3; ph++)
                free(p->rec[r].step_traffic[ph]);
    free(p->rec);
    for (int t = 0; t < H_NTENSORS; t++) {
        free(p->ref[t]);
        free(p->extra[t]);
    }
    free(p->lens);
    free(p->offs);
    free(p);
}

static uint64_t harness_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Explicit shard lengths of the case (given or from weights), or NULL for the even ones. */
static const int64_t *harness_lens(const struct harness_problem *p)
{
    return p->c.shard_lens || p->c.shard_weights ? p->lens : NULL;
}

/* The sinks of a case: logits U(-1, 5) from the generator state st, and the gradients' room. */
static int harness_sinks_create(struct harness_problem *p, uint64_t st)
{
    const size_t H = (size_t)p->Hq;
    st ^= 0x5137u;
    p->sinks = malloc(H * sizeof(float));
    p->sinks64 = malloc(H * sizeof(double));
    p->ref_dsinks = calloc(H, sizeof(double));
    p->tol_dsinks = calloc(H, sizeof(double));
    p->dsinks_rank = calloc((size_t)p->G, sizeof *p->dsinks_rank);
    if (!p->sinks || !p->sinks64 || !p->ref_dsinks || !p->tol_dsinks || !p->dsinks_rank)
        return -1;
    for (size_t h = 0; h < H; h++) {
        p->sinks[h] = (float)harness_rng_uniform(&st, -1.0, 5.0);
        p->sinks64[h] = p->sinks[h];
    }
    for (int r = 0; r < p->G; r++)
        if (!(p->dsinks_rank[r] = malloc(H * sizeof(float))))
            return -1;
    return 0;
}

struct harness_problem *harness_problem_create(const struct harness_case *c)
{
    struct harness_problem *p = calloc(1, sizeof *p);
    char desc[512];
    harness_case_str(c, desc, sizeof desc);
    if (!p)
        return NULL;
    p->c = *c;
    p->G = c->ranks;
    p->B = c->batch;
    p->N = c->seq_len;
    p->Hq = c->q_heads;
    p->Hkv = c->kv_heads;
    p->d = c->head_dim;
    p->es = burst_dtype_size(c->dtype);
    p->seed = c->seed ? c->seed : harness_seed() ^ harness_hash(c->name);
    float tau = c->softmax_scale != 0.0f ? c->softmax_scale : 1.0f / sqrtf((float)c->head_dim);
    p->scale = tau;

    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = c->batch;
    pp.seq_len = c->seq_len;
    pp.shard_lens = c->shard_lens;
    pp.shard_weights = c->shard_weights;
    pp.q_heads = c->q_heads;
    pp.kv_heads = c->kv_heads;
    pp.head_dim = c->head_dim;
    pp.dtype = c->dtype;
    pp.softmax_scale = c->softmax_scale;
    pp.causal = c->causal;
    pp.window_left = c->window_left;
    pp.window_right = c->window_right;
    pp.layout = c->layout;
    pp.bwd_pattern = c->bwd;
    pp.acc_wire = c->wire;
    pp.deterministic = c->deterministic;
    pp.ranks_per_node = c->ranks_per_node;
    pp.workspace_limit = c->workspace_limit;
    pp.doc_lens = c->doc_lens;
    pp.num_docs = c->num_docs;
    pp.softcap = c->softcap;
    p->params = pp;

    const int G = p->G;
    p->lens = calloc((size_t)G, sizeof *p->lens);
    p->offs = calloc((size_t)G, sizeof *p->offs);
    p->rec = calloc((size_t)G, sizeof *p->rec);
    p->lse_rank = calloc((size_t)G, sizeof *p->lse_rank);
    if (!p->lens || !p->offs || !p->rec || !p->lse_rank)
        goto fail;
    /* the shards the plan makes (layout, shard lengths or weights, documents) */
    if (burst_layout_plan_lens(&p->params, G, p->lens) != BURST_OK) {
        fprintf(stderr, "harness: layout helpers refused %s: %s\n", desc, burst_last_error());
        goto fail;
    }
    for (int r = 0; r < G; r++) {
        p->offs[r] = r ? p->offs[r - 1] + p->lens[r - 1] : 0;
        p->lse_rank[r] = malloc((size_t)(p->B * p->Hq * p->lens[r]) * sizeof(float) + 1);
        if (!p->lse_rank[r])
            goto fail;
    }

    /* inputs: fp64 rounded values and the dtype copies, natural order */
    uint64_t st = p->seed;
    const double amp = c->amp > 0 ? c->amp : 2.0;
    for (int t = 0; t < T_COUNT; t++) {
        const int64_t H = harness_heads(p, t);
        const size_t count = (size_t)(p->B * p->N * H * p->d);
        const int64_t hs = p->d + c->pad;
        p->nat[t] = malloc(count * p->es);
        p->perm_count[t] = (size_t)(p->B * p->N * H * hs);
        p->perm[t] = malloc(p->perm_count[t] * p->es);
        if (!p->nat[t] || !p->perm[t])
            goto fail;
        harness_poison(c->dtype, p->perm[t], p->perm_count[t]); /* padding stays poison */
        struct burst_tensor pt = {
            p->perm[t], c->dtype, {p->B, p->N, H, p->d}, {p->N * H * hs, H * hs, hs, 1}};
        p->perm_t[t] = pt;
        if (t <= T_DO) {
            p->in64[t] = malloc(count * sizeof(double));
            if (!p->in64[t])
                goto fail;
            const double a = (t == T_Q || t == T_K) ? amp : 1.0;
            for (size_t i = 0; i < count; i++) {
                double x = harness_rng_uniform(&st, -a, a);
                if (c->grid > 0 && (t == T_Q || t == T_K))
                    x = nearbyint(x * c->grid) / c->grid;
                x = harness_round(c->dtype, x);
                p->in64[t][i] = x;
                harness_store(c->dtype, p->nat[t], i, x);
            }
            struct burst_tensor nt =
                burst_tensor_contiguous(p->nat[t], c->dtype, p->B, p->N, H, p->d);
            if (burst_layout_plan_permute(&p->params, G, &nt, &p->perm_t[t]) != BURST_OK) {
                fprintf(stderr, "harness: permute refused %s: %s\n", desc, burst_last_error());
                goto fail;
            }
        }
    }
    struct burst_context *ctx = harness_context();
    for (int r = 0; c->backends && r < G; r++) {
        struct burst_context *rc = harness_rank_context(c->backends, r);
        if (!rc)
            goto fail;
        if (rc->ops->mem.device_memory) { /* the uploads below use one context */
            fprintf(stderr,
                    "harness: backends=%s: device-memory backends in mixed rings are "
                    "not supported by the harness: SKIP\n",
                    c->backends);
            exit(77);
        }
    }
    if (!c->backends && ctx && ctx->ops->mem.device_memory) {
        p->on_device = 1;
        p->lse_dev = calloc((size_t)G, sizeof *p->lse_dev);
        if (!p->lse_dev)
            goto fail;
        for (int t = 0; t < T_COUNT; t++)
            if (burst_context_alloc(ctx, p->perm_count[t] * p->es, &p->dev[t]) != BURST_OK) {
                fprintf(stderr, "harness: %s\n", burst_last_error());
                goto fail;
            }
        for (int r = 0; r < G; r++)
            if (burst_context_alloc(ctx, (size_t)(p->B * p->Hq * p->lens[r]) * sizeof(float) + 4,
                                    (void **)&p->lse_dev[r]) != BURST_OK) {
                fprintf(stderr, "harness: %s\n", burst_last_error());
                goto fail;
            }
    }
    p->lse_perm = malloc((size_t)(p->B * p->Hq * p->N) * sizeof(float));
    p->lse_nat = malloc((size_t)(p->B * p->Hq * p->N) * sizeof(float));
    if (!p->lse_perm || !p->lse_nat)
        goto fail;
    if (c->sinks && harness_sinks_create(p, st) != 0)
        goto fail;
    return p;
fail:
    fprintf(stderr, "harness: cannot set up %s\n", desc);
    harness_problem_destroy(p);
    return NULL;
}

static struct burst_tensor harness_rank_view(const struct harness_problem *p, int t, int rank)
{
    struct burst_tensor v = p->perm_t[t];
    if (p->on_device)
        v.data = p->dev[t];
    v.data = (char *)v.data + (size_t)(p->offs[rank] * v.stride[1]) * p->es;
    v.shape[1] = p->lens[rank];
    return v;
}

static void harness_note(struct harness_rank_record *rec, const char *what, burst_status_t st)
{
    if (rec->msg[0] == '\0')
        snprintf(rec->msg, sizeof rec->msg, "%s: %s (%s)", what, burst_status_str(st),
                 burst_last_error());
}

static void harness_case_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct harness_problem *p = arg;
    struct harness_rank_record *rec = &p->rec[rank];
    struct burst_plan *plan = NULL;
    rec->st_plan =
        burst_plan_create(harness_rank_context(p->c.backends, rank), comm, &p->params, &plan);
    if (rec->st_plan != BURST_OK) {
        harness_note(rec, "burst_plan_create", rec->st_plan);
        return;
    }
    rec->local_len = burst_plan_local_len(plan);
    rec->bwd_used = burst_plan_bwd_pattern(plan);
    rec->head_groups = burst_plan_head_groups(plan);
    rec->workspace = burst_plan_workspace_bytes(plan);
    rec->positions_ok =
        rec->local_len == p->lens[rank] && burst_plan_position(plan, rec->local_len) == -1;
    /* without documents against the layout's own rule (burst_layout_position_lens), an
     * independent path; with documents (work-balanced shards) against the helper that places
     * the caller's tokens */
    for (int64_t i = 0; rec->positions_ok && i < p->lens[rank]; i++) {
        int64_t want = -2;
        if (p->c.doc_lens && p->c.num_docs > 1)
            burst_layout_plan_position(&p->params, p->G, rank, i, &want);
        else
            burst_layout_position_lens(p->c.layout, p->N, p->G, harness_lens(p), rank, i, &want);
        rec->positions_ok = burst_plan_position(plan, i) == want;
    }

    struct burst_tensor q = harness_rank_view(p, T_Q, rank), k = harness_rank_view(p, T_K, rank),
                        v = harness_rank_view(p, T_V, rank),
                        dout = harness_rank_view(p, T_DO, rank),
                        o = harness_rank_view(p, T_O, rank), dq = harness_rank_view(p, T_DQ, rank),
                        dk = harness_rank_view(p, T_DK, rank),
                        dv = harness_rank_view(p, T_DV, rank);
    float *lse = p->on_device ? p->lse_dev[rank] : p->lse_rank[rank];
    const float *sk = p->sinks;
    rec->st_fwd = sk ? burst_attention_forward_sinks(plan, &q, &k, &v, sk, p->Hq, &o, lse)
                     : burst_attention_forward(plan, &q, &k, &v, &o, lse);
    if (rec->st_fwd != BURST_OK) {
        harness_note(rec, "burst_attention_forward", rec->st_fwd);
        rec->st_bwd = BURST_ERR_INTERNAL;
    } else {
        rec->st_bwd =
            sk ? burst_attention_backward_sinks(plan, &q, &k, &v, &o, lse, &dout, sk, p->Hq, &dq,
                                                &dk, &dv, p->dsinks_rank[rank])
               : burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
        if (rec->st_bwd != BURST_OK)
            harness_note(rec, "burst_attention_backward", rec->st_bwd);
    }
    for (int ph = 0; ph < 3; ph++) {
        burst_plan_stats(plan, (burst_phase_t)ph, &rec->stats[ph]);
        if (ph == BURST_PHASE_SETUP)
            continue;
        int steps = rec->stats[ph].steps;
        rec->step_traffic[ph] = calloc((size_t)steps + 1, sizeof(struct burst_traffic));
        for (int s = 0; rec->step_traffic[ph] && s <= steps; s++)
            burst_plan_step_traffic(plan, (burst_phase_t)ph, s, &rec->step_traffic[ph][s]);
        for (int s = 0; s <= steps; s++) {
            double cs = 0.0, ws = 0.0;
            burst_plan_step_times(plan, (burst_phase_t)ph, s, &cs, &ws);
            rec->step_compute_sum[ph] += cs;
            rec->step_wait_sum[ph] += ws;
        }
    }
    burst_plan_destroy(plan);
}

/* device_memory backends: upload every rank-visible tensor and lse (inputs and the poisoned
 * outputs) when up, download them when not. 0 or -1 (message printed). */
static int harness_problem_transfer(struct harness_problem *p, int up)
{
    struct burst_context *ctx = harness_context();
    for (int t = 0; t < T_COUNT; t++) {
        if (!up && t < T_O)
            continue;
        size_t bytes = p->perm_count[t] * p->es;
        if (burst_context_memcpy(ctx, up ? p->dev[t] : p->perm[t], up ? p->perm[t] : p->dev[t],
                                 bytes) != BURST_OK) {
            fprintf(stderr, "harness: %s tensor %d: %s\n", up ? "upload" : "download", t,
                    burst_last_error());
            return -1;
        }
    }
    for (int r = 0; r < p->G; r++) {
        size_t bytes = (size_t)(p->B * p->Hq * p->lens[r]) * sizeof(float);
        if (burst_context_memcpy(ctx, up ? (void *)p->lse_dev[r] : (void *)p->lse_rank[r],
                                 up ? (void *)p->lse_rank[r] : (void *)p->lse_dev[r],
                                 bytes) != BURST_OK) {
            fprintf(stderr, "harness: lse of rank %d: %s\n", r, burst_last_error());
            return -1;
        }
    }
    return 0;
}

int harness_problem_run(struct harness_problem *p)
{
    const int G = p->G;
    for (int t = T_O; t < T_COUNT; t++) {
        harness_poison(p->c.dtype, p->perm[t], p->perm_count[t]);
        harness_poison(p->c.dtype, p->nat[t], (size_t)(p->B * p->N * harness_heads(p, t) * p->d));
    }
    for (int r = 0; r < G; r++) {
        harness_poison(BURST_DTYPE_FP32, p->lse_rank[r], (size_t)(p->B * p->Hq * p->lens[r]));
        if (p->dsinks_rank)
            harness_poison(BURST_DTYPE_FP32, p->dsinks_rank[r], (size_t)p->Hq);
        for (int ph = 0; ph < 3; ph++)
            free(p->rec[r].step_traffic[ph]);
        memset(&p->rec[r], 0, sizeof p->rec[r]);
        p->rec[r].st_plan = p->rec[r].st_fwd = p->rec[r].st_bwd = BURST_ERR_INTERNAL;
    }
    const size_t nl = (size_t)(p->B * p->Hq * p->N);
    harness_poison(BURST_DTYPE_FP32, p->lse_perm, nl);
    harness_poison(BURST_DTYPE_FP32, p->lse_nat, nl);

    if (p->on_device && harness_problem_transfer(p, 1) != 0)
        return -1;
    if (harness_run_ranks(G, 60000, harness_case_rank, p) != 0)
        return -1;
    if (p->on_device && harness_problem_transfer(p, 0) != 0)
        return -1;

    int ok = 1;
    for (int r = 0; r < G; r++)
        ok &= p->rec[r].st_plan == BURST_OK && p->rec[r].st_fwd == BURST_OK &&
              p->rec[r].st_bwd == BURST_OK;

    /* gather lse into rank order, then unpermute everything to natural order */
    for (int r = 0; r < G; r++)
        for (int64_t bh = 0; bh < p->B * p->Hq; bh++)
            memcpy(p->lse_perm + bh * p->N + p->offs[r], p->lse_rank[r] + bh * p->lens[r],
                   (size_t)p->lens[r] * sizeof(float));
    struct burst_tensor lp = {
        p->lse_perm, BURST_DTYPE_FP32, {p->B, p->N, p->Hq, 1}, {p->Hq * p->N, 1, p->N, 1}};
    struct burst_tensor ln = lp;
    ln.data = p->lse_nat;
    if (burst_layout_plan_unpermute(&p->params, G, &lp, &ln) != BURST_OK) {
        fprintf(stderr, "harness: unpermute(lse): %s\n", burst_last_error());
        ok = 0;
    }
    for (int t = T_O; t < T_COUNT; t++) {
        struct burst_tensor nt =
            burst_tensor_contiguous(p->nat[t], p->c.dtype, p->B, p->N, harness_heads(p, t), p->d);
        if (burst_layout_plan_unpermute(&p->params, G, &p->perm_t[t], &nt) != BURST_OK) {
            fprintf(stderr, "harness: unpermute: %s\n", burst_last_error());
            ok = 0;
        }
    }
    return ok ? 0 : -1;
}

const struct harness_rank_record *harness_problem_record(const struct harness_problem *p, int rank)
{
    return &p->rec[rank];
}

const void *harness_problem_output(const struct harness_problem *p, enum harness_tensor t,
                                   size_t *bytes_p)
{
    static const int map[H_NTENSORS] = {T_O, -1, T_DQ, T_DK, T_DV};
    if (t == H_LSE) {
        *bytes_p = (size_t)(p->B * p->Hq * p->N) * sizeof(float);
        return p->lse_nat;
    }
    *bytes_p = (size_t)(p->B * p->N * harness_heads(p, map[t]) * p->d) * p->es;
    return p->nat[map[t]];
}

const char *harness_tensor_name(enum harness_tensor t)
{
    static const char *names[H_NTENSORS] = {"O", "lse", "dQ", "dK", "dV"};
    return t >= 0 && t < H_NTENSORS ? names[t] : "?";
}

struct harness_outputs {
    void *bytes[H_NTENSORS];
    size_t len[H_NTENSORS];
};

struct harness_outputs *harness_outputs_save(const struct harness_problem *p)
{
    struct harness_outputs *s = calloc(1, sizeof *s);
    for (int t = 0; s && t < H_NTENSORS; t++) {
        const void *x = harness_problem_output(p, (enum harness_tensor)t, &s->len[t]);
        s->bytes[t] = malloc(s->len[t] ? s->len[t] : 1);
        if (!s->bytes[t]) {
            harness_outputs_free(s);
            return NULL;
        }
        memcpy(s->bytes[t], x, s->len[t]);
    }
    return s;
}

int harness_outputs_diff(const struct harness_outputs *s, const struct harness_problem *p)
{
    for (int t = 0; t < H_NTENSORS; t++) {
        size_t len;
        const void *x = harness_problem_output(p, (enum harness_tensor)t, &len);
        if (len != s->len[t] || memcmp(x, s->bytes[t], len) != 0)
            return t;
    }
    return -1;
}

void harness_outputs_free(struct harness_outputs *s)
{
    if (!s)
        return;
    for (int t = 0; t < H_NTENSORS; t++)
        free(s->bytes[t]);
    free(s);
}

/* ---- reference and error bounds ---- */

/*
 * The derived terms of harness.h, elementwise in fp64 (accumulated into zeroed arrays):
 *   cq[i] = tau sum_j P_ij (|dO_i|.|v_j| + w_i) |k_j|     (magnitude of what dS cancels, for dQ)
 *   ck[j] = tau sum_i P_ij (|dO_i|.|v_j| + w_i) |q_i|     (same for dK)
 *   dd_dq[i] = tau w_i sum_j P_ij |k_j|,  dd_dk[j] = tau sum_i P_ij w_i |q_i|   (D from rounded O)
 *   a_dq[i] = tau sum_j |dS_ij| |k_j|,  a_dk[j] = tau sum_i |dS_ij| |q_i|,  a_dv[j] = sum_i P_ij |dO_i|
 *   e_o[i] = sum_j P_ij delta_ij |v_j - O_i|   (scores rounded in fp32, see harness.h)
 * with w_i = sum_c |dO_ic| |O_ic| and delta_ij = 2 us sqrt(d) tau sum_c |q_ic| |k_jc|, us the
 * scores' unit: u32 = 2^-24, or 2^-21 for fp32 on a GPU backend, whose matrix units may
 * compute fp32 products as 3xTF32 (cuda) or on two fp16 halves (vulkan): the dropped low x low
 * term and the rounding of the low halves, about 3 x 2^-22 of each product.
 *
 * mma (GPU backends in fp16/bf16; every backend in bf16, as the cpu's avx512bf16 kernels take
 * the products on bf16 dot products): the forward's P V product runs with P rounded to the
 * dtype, p~ = p (1 + e) + h with |e| <= u and, in fp16 only, |h| <= 2^-25 for the subnormal
 * range (p is relative to the running row max, so after normalisation by the row sum,
 * which is >= 1, the absolute term stays below 2^-25). That moves O_ic by at most
 *   mo_ic = sum_j (u P_ij + h) |v_jc|,  added to e_o,
 * and O's error is then no longer relative to |O_ic|, so D's error (term (c)) grows from u w_i to
 *   u w_i + sum_c |dO_ic| mo_ic,  which replaces u w_i in dd_dq and dd_dk (as w_i + that / u).
 * The backward's dV = P^T dO, dK = dS^T Q and dQ = dS K round P and dS the same way:
 *   m_dv[j] = sum_i (u P_ij + h) |dO_i|,  m_dk[j] = tau sum_i (u |dS_ij| + h) |q_i|,
 *   m_dq[i] = tau sum_j (u |dS_ij| + h) |k_j|   (computed only when mma; added to extra).
 * Soft-capped scores: P_ij and dS_ij = P_ij (dP_ij - D_i) (1 - t_ij^2) use the capped score
 * (harness_score), delta_ij shrinks by the cap's derivative 1 - t_ij^2 and gains the error of
 * the kernels' tanh (4e-7 of the capped score); cq, ck keep the uncapped magnitudes (an upper
 * bound, as 1 - t^2 <= 1), which also cover the fp32 error of the factor 1 - t^2 itself.
 * The scores' rounding (delta_ij) moves P_ij by P_ij delta_ij in the backward too, every dtype:
 *   m_dv[j] += sum_i P_ij delta_ij |dO_i|,  m_dk[j] += tau sum_i P_ij delta_ij |dP_ij - D_i| |q_i|,
 *   m_dq[i] += tau sum_j P_ij delta_ij |dP_ij - D_i| |k_j|.
 */
/* The score of a pair from its dot product s = q.k: tau s, or with a cap c: c tanh(tau s / c).
 * *fac receives its derivative along tau s (1, or 1 - tanh^2), *tanh_err the fp32 error of the
 * capped score beyond the dot product's: the kernels' tanh (relative error < 3e-7) and the
 * roundings of the scaling before and after it (2 u32), 4e-7 |score| in all. */
static double harness_score(const struct harness_problem *p, double s, double *fac,
                            double *tanh_err)
{
    const double x = p->scale * s, c = p->c.softcap;
    if (c <= 0) {
        *fac = 1.0;
        *tanh_err = 0.0;
        return x;
    }
    const double t = tanh(x / c);
    *fac = 1.0 - t * t;
    *tanh_err = 4e-7 * fabs(c * t);
    return c * t;
}

static void harness_bounds(struct harness_problem *p, const struct ref_problem *rp,
                           const int64_t *doc, double *cq, double *ck, double *dd_dq, double *dd_dk,
                           double *a_dq, double *a_dk, double *a_dv, double *e_o, int mma,
                           double us, double *m_dq, double *m_dk, double *m_dv)
{
    const double u = harness_unit_roundoff(p->c.dtype);
    const double hsub = p->c.dtype == BURST_DTYPE_FP16 ? 0x1p-25 : 0.0;
    const int64_t N = p->N;
    const int d = p->d, Hq = p->Hq, Hkv = p->Hkv, group = Hq / Hkv;
    const double tau = p->scale;
    const double *q = p->in64[T_Q], *k = p->in64[T_K], *v = p->in64[T_V], *dO = p->in64[T_DO];
    const double *o = p->ref[H_O], *lse = p->ref[H_LSE];
    for (int64_t b = 0; b < p->B; b++)
        for (int h = 0; h < Hq; h++)
            for (int64_t i = 0; i < N; i++) {
                const size_t qo = (size_t)(((b * N + i) * Hq + h) * d);
                const double l = lse[(b * Hq + h) * N + i];
                if (l == -INFINITY)
                    continue;
                double D = 0, w = 0, wd = 0;
                for (int c = 0; c < d; c++) {
                    D += dO[qo + c] * o[qo + c];
                    w += fabs(dO[qo + c]) * fabs(o[qo + c]);
                }
                wd = w;
                if (mma) { /* P rounded for the matrix units: mo_ic, see above */
                    for (int64_t j = 0; j < N; j++) {
                        if (!ref_allowed(rp, doc, i, j))
                            continue;
                        const size_t ko = (size_t)(((b * N + j) * Hkv + h / group) * d);
                        double s = 0;
                        for (int c = 0; c < d; c++)
                            s += q[qo + c] * k[ko + c];
                        double fac, terr;
                        const double P = exp(harness_score(p, s, &fac, &terr) - l);
                        const double f = u * P + hsub;
                        for (int c = 0; c < d; c++) {
                            e_o[qo + c] += f * fabs(v[ko + c]);
                            wd += fabs(dO[qo + c]) * f * fabs(v[ko + c]) / u;
                        }
                    }
                }
                for (int64_t j = 0; j < N; j++) {
                    if (!ref_allowed(rp, doc, i, j))
                        continue;
                    const size_t ko = (size_t)(((b * N + j) * Hkv + h / group) * d);
                    double s = 0, dp = 0, adp = 0, aqk = 0;
                    for (int c = 0; c < d; c++) {
                        s += q[qo + c] * k[ko + c];
                        dp += dO[qo + c] * v[ko + c];
                        adp += fabs(dO[qo + c]) * fabs(v[ko + c]);
                        aqk += fabs(q[qo + c]) * fabs(k[ko + c]);
                    }
                    double fac, terr;
                    const double P = exp(harness_score(p, s, &fac, &terr) - l);
                    const double ads = fabs(P * (dp - D)) * fac;
                    const double mag = tau * P * (adp + w);
                    const double delta = 2.0 * us * sqrt((double)d) * tau * aqk * fac + terr;
                    for (int c = 0; c < d; c++) {
                        e_o[qo + c] += P * delta * fabs(v[ko + c] - o[qo + c]);
                        cq[qo + c] += mag * fabs(k[ko + c]);
                        ck[ko + c] += mag * fabs(q[qo + c]);
                        dd_dq[qo + c] += tau * wd * P * fabs(k[ko + c]);
                        dd_dk[ko + c] += tau * P * wd * fabs(q[qo + c]);
                        a_dq[qo + c] += tau * ads * fabs(k[ko + c]);
                        a_dk[ko + c] += tau * ads * fabs(q[qo + c]);
                        a_dv[ko + c] += P * fabs(dO[qo + c]);
                        /* the score's rounding moves P_ij by P delta: dV, and dS = P (dP - D) */
                        m_dv[ko + c] += P * delta * fabs(dO[qo + c]);
                        m_dk[ko + c] += tau * P * delta * fabs(dp - D) * fabs(q[qo + c]);
                        m_dq[qo + c] += tau * P * delta * fabs(dp - D) * fabs(k[ko + c]);
                        if (mma) {
                            m_dv[ko + c] += (u * P + hsub) * fabs(dO[qo + c]);
                            m_dk[ko + c] += tau * (u * ads + hsub) * fabs(q[qo + c]);
                            m_dq[qo + c] += tau * (u * ads + hsub) * fabs(k[ko + c]);
                        }
                    }
                }
            }
}

/* The tolerance of dsinks (harness.h, SINKS), from the reference and the O and lse bounds. */
static void harness_sinks_tol(struct harness_problem *p)
{
    const double u = p->c.dtype == BURST_DTYPE_FP32 ? 0.0 : harness_unit_roundoff(p->c.dtype);
    const int64_t N = p->N, d = p->d, Hq = p->Hq;
    const size_t no = (size_t)(p->B * N * Hq * d), nl = (size_t)(p->B * Hq * N);
    const double *o = p->ref[H_O], *lse = p->ref[H_LSE], *dO = p->in64[T_DO];
    double so = 0, sl = 0;
    for (size_t i = 0; i < no; i++)
        so = fmax(so, fabs(o[i]));
    for (size_t i = 0; i < nl; i++)
        sl = isfinite(lse[i]) ? fmax(sl, fabs(lse[i])) : sl;
    for (int64_t h = 0; h < Hq; h++) {
        double tol = 1e-5 * fabs(p->ref_dsinks[h]);
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t i = 0; i < N; i++) {
                const double l = lse[(b * Hq + h) * N + i];
                const double e = exp(p->sinks64[h] - l), tl = 1e-5 * fabs(l) + 1e-5 * sl;
                const size_t qo = (size_t)(((b * N + i) * Hq + h) * d);
                double D = 0, w = 0, ed = 0;
                for (int64_t c = 0; c < d; c++) {
                    const double to =
                        (1e-5 + u) * fabs(o[qo + c]) + 1e-5 * so + p->extra[H_O][qo + c];
                    D += dO[qo + c] * o[qo + c];
                    w += fabs(dO[qo + c]) * fabs(o[qo + c]);
                    ed += fabs(dO[qo + c]) * to;
                }
                tol += e * (fabs(D) * tl + ed + 1e-5 * w);
            }
        p->tol_dsinks[h] = tol;
    }
}

/* Whether the vulkan backend's fp32 may run on matrix units in two fp16 halves: its first
 * device has subgroup-scope cooperative matrices (the probe's "coopmat" is not "none"; lavapipe
 * has none, and its fp32 keeps the register-tiled kernels' unit). Probed once. */
static int harness_vk_fp32_split;
static pthread_once_t harness_vk_once = PTHREAD_ONCE_INIT;

static void harness_vk_probe(void)
{
    char *json = NULL;
    if (burst_probe(NULL, 1, &json) == BURST_OK && json) {
        const char *v = strstr(json, "\"backend\": \"vulkan\"");
        const char *cm = v ? strstr(v, "\"coopmat\": \"") : NULL;
        harness_vk_fp32_split = cm && strncmp(cm + 12, "none\"", 5) != 0;
    }
    burst_free(json);
}

static int harness_reference(struct harness_problem *p)
{
    if (p->ref_done)
        return 0;
    const size_t nq = (size_t)(p->B * p->N * p->Hq * p->d);
    const size_t nkv = (size_t)(p->B * p->N * p->Hkv * p->d);
    const size_t counts[H_NTENSORS] = {nq, (size_t)(p->B * p->Hq * p->N), nq, nkv, nkv};
    for (int t = 0; t < H_NTENSORS; t++) {
        p->ref[t] = calloc(counts[t], sizeof(double));
        p->extra[t] = calloc(counts[t], sizeof(double));
        if (!p->ref[t] || !p->extra[t])
            return -1;
    }
    struct ref_problem rp = {.batch = p->B,
                             .seq_len = p->N,
                             .q_heads = p->Hq,
                             .kv_heads = p->Hkv,
                             .head_dim = p->d,
                             .scale = p->scale,
                             .causal = p->c.causal,
                             .window_left = p->c.window_left,
                             .window_right = p->c.window_right,
                             .doc_lens = p->c.doc_lens,
                             .num_docs = p->c.num_docs,
                             .softcap = p->c.softcap,
                             .sinks = p->sinks64};
    ref_forward(&rp, p->in64[T_Q], p->in64[T_K], p->in64[T_V], p->ref[H_O], p->ref[H_LSE]);
    ref_backward_sinks(&rp, p->in64[T_Q], p->in64[T_K], p->in64[T_V], p->in64[T_DO], p->ref[H_DQ],
                       p->ref[H_DK], p->ref[H_DV], p->ref_dsinks);
    {
        double *a[11];
        const size_t cnt[11] = {nq, nkv, nq, nkv, nq, nkv, nkv, nq, nq, nkv, nkv};
        int ok = 1;
        for (int i = 0; i < 11; i++)
            ok &= (a[i] = calloc(cnt[i], sizeof(double))) != NULL;
        if (!ok) {
            for (int i = 0; i < 11; i++)
                free(a[i]);
            return -1;
        }
        /* GPU backends run the fp16/bf16 forward on matrix units (P rounded to the dtype) */
        int gpu = 0;  /* any rank on a GPU backend: the bound for matrix units (upper bound) */
        int tf32 = 0; /* any rank whose fp32 may run in split halves: cuda, vulkan on matrices */
        for (int r = 0; r < p->G; r++) {
            struct burst_context *ctx = harness_rank_context(p->c.backends, r);
            gpu |= ctx && strcmp(burst_context_backend(ctx), "cpu") != 0;
            tf32 |= ctx && strcmp(burst_context_backend(ctx), "cuda") == 0;
            if (ctx && strcmp(burst_context_backend(ctx), "vulkan") == 0) {
                pthread_once(&harness_vk_once, harness_vk_probe);
                tf32 |= harness_vk_fp32_split;
            }
        }
        /* the cpu's bf16 kernels may round P and dS alike (avx512bf16 dot products) */
        const int mma = (p->c.dtype != BURST_DTYPE_FP32 && gpu) || p->c.dtype == BURST_DTYPE_BF16;
        const double us = p->c.dtype == BURST_DTYPE_FP32 && tf32 ? 0x1p-21 : 0x1p-24;
        int64_t *doc = ref_doc_ids(&rp);
        if (rp.doc_lens && rp.num_docs > 1 && !doc) {
            for (int i = 0; i < 11; i++)
                free(a[i]);
            return -1;
        }
        harness_bounds(p, &rp, doc, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], mma, us, a[8],
                       a[9], a[10]);
        free(doc);
        for (size_t i = 0; i < nq; i++) /* every dtype: the kernels compute scores in fp32 */
            p->extra[H_O][i] = a[7][i];
        /* half dtypes: (c) D from the rounded O; (d) hops of an accumulator in the dtype */
        const double u = p->c.dtype == BURST_DTYPE_FP32 ? 0.0 : harness_unit_roundoff(p->c.dtype);
        int hops = 0;
        for (int r = 0; r < p->G; r++)
            if (p->rec[r].stats[BURST_PHASE_BWD].steps - 1 > hops)
                hops = p->rec[r].stats[BURST_PHASE_BWD].steps - 1;
        const double hu = p->c.wire == BURST_WIRE_INPUT ? hops * u : 0.0;
        const int ring = p->rec[0].bwd_used == BURST_BWD_RING;
        for (size_t i = 0; i < nq; i++)
            p->extra[H_DQ][i] =
                1e-5 * a[0][i] + 1.25 * (u * a[2][i] + (ring ? 0.0 : hu * a[4][i])) + a[8][i];
        for (size_t i = 0; i < nkv; i++) {
            p->extra[H_DK][i] =
                1e-5 * a[1][i] + 1.25 * (u * a[3][i] + (ring ? hu * a[5][i] : 0.0)) + a[9][i];
            p->extra[H_DV][i] = 1.25 * (ring ? hu * a[6][i] : 0.0) + a[10][i];
        }
        for (int i = 0; i < 11; i++)
            free(a[i]);
    }
    if (p->sinks)
        harness_sinks_tol(p);
    p->ref_done = 1;
    return 0;
}

static void harness_compare_tensor(const double *ref, const double *extra, size_t count,
                                   burst_dtype_t dtype, const void *x, double rtol,
                                   struct harness_err *e)
{
    double S = 0;
    memset(e, 0, sizeof *e);
    for (size_t i = 0; i < count; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > S)
            S = fabs(ref[i]);
    for (size_t i = 0; i < count; i++) {
        const double xi = harness_load(dtype, x, i), r = ref[i];
        if (!isfinite(xi) || !isfinite(r)) {
            if (!(isinf(r) && xi == r)) { /* -inf lse of an empty row must match exactly */
                if (e->nonfinite++ == 0) {
                    e->worst = INFINITY;
                    e->worst_at = (int64_t)i;
                }
                e->max_abs = INFINITY;
                e->max_rel = INFINITY;
            }
            continue;
        }
        const double err = fabs(xi - r);
        const double tol = rtol * fabs(r) + 1e-5 * S + (extra ? extra[i] : 0.0);
        const double rel = err / (fabs(r) + S > 0 ? fabs(r) + S : 1.0);
        const double ratio = err == 0 ? 0 : tol > 0 ? err / tol : INFINITY;
        if (err > e->max_abs)
            e->max_abs = err;
        if (rel > e->max_rel)
            e->max_rel = rel;
        if (ratio > e->worst && isfinite(e->worst)) {
            e->worst = ratio;
            e->worst_at = (int64_t)i;
        }
    }
}

int harness_problem_compare(struct harness_problem *p, struct harness_err err[H_NTENSORS])
{
    memset(err, 0, sizeof(struct harness_err) * H_NTENSORS);
    if (harness_reference(p) != 0) {
        for (int t = 0; t < H_NTENSORS; t++)
            err[t].worst = INFINITY;
        return 0;
    }
    const double u = p->c.dtype == BURST_DTYPE_FP32 ? 0.0 : harness_unit_roundoff(p->c.dtype);
    static const int map[H_NTENSORS] = {T_O, -1, T_DQ, T_DK, T_DV};
    int pass = 1;
    for (int t = 0; t < H_NTENSORS; t++) {
        size_t bytes;
        const void *x = harness_problem_output(p, (enum harness_tensor)t, &bytes);
        const burst_dtype_t dt = t == H_LSE ? BURST_DTYPE_FP32 : p->c.dtype;
        const double rtol = 1e-5 + (t == H_LSE ? 0.0 : u);
        harness_compare_tensor(p->ref[t], p->extra[t], bytes / burst_dtype_size(dt), dt, x, rtol,
                               &err[t]);
        if (t != H_LSE) { /* padding between heads must still be poison */
            const int64_t hs = p->d + p->c.pad;
            for (size_t i = 0; p->c.pad && i < p->perm_count[map[t]]; i++)
                if ((int64_t)(i % (size_t)hs) >= p->d &&
                    !harness_is_poison(p->c.dtype, p->perm[map[t]], i))
                    err[t].pad_clobbered++;
        }
        pass &= err[t].worst <= 1.0 && err[t].nonfinite == 0 && err[t].pad_clobbered == 0;
    }
    if (p->sinks) { /* every rank's dsinks against the reference */
        struct harness_err *e = &p->err_dsinks;
        memset(e, 0, sizeof *e);
        for (int r = 0; r < p->G; r++)
            for (int h = 0; h < p->Hq; h++) {
                const double x = p->dsinks_rank[r][h], want = p->ref_dsinks[h];
                const double d = fabs(x - want), tol = p->tol_dsinks[h];
                if (!isfinite(x)) {
                    e->nonfinite++;
                    e->worst = INFINITY;
                    e->worst_at = r * p->Hq + h;
                    continue;
                }
                e->max_abs = fmax(e->max_abs, d);
                e->max_rel = fmax(e->max_rel, d / (fabs(want) > 0 ? fabs(want) : 1.0));
                if (isfinite(e->worst) && (d == 0 ? 0 : d / tol) > e->worst) {
                    e->worst = d / tol;
                    e->worst_at = r * p->Hq + h;
                }
            }
        pass &= e->worst <= 1.0 && e->nonfinite == 0;
    }
    return pass;
}

void harness_problem_print(const struct harness_problem *p, const struct harness_err *err,
                           const char *verdict)
{
    char desc[512];
    harness_case_str(&p->c, desc, sizeof desc);
    printf("[%s] %s\n", verdict, desc);
    printf("    reproduce with BURST_TEST_SEED=%llu (case seed %llu)\n",
           (unsigned long long)harness_seed(), (unsigned long long)p->seed);
    for (int r = 0; r < p->G; r++)
        if (p->rec[r].msg[0] || !p->rec[r].positions_ok)
            printf("    rank %d: %s%s\n", r, p->rec[r].msg,
                   p->rec[r].positions_ok ? "" : " [burst_plan_position/local_len wrong]");
    if (!err)
        return;
    for (int t = 0; t < H_NTENSORS; t++) {
        int64_t at = err[t].worst_at;
        printf("    %-3s max_abs %.3e max_rel %.3e worst/tol %.3f",
               harness_tensor_name((enum harness_tensor)t), err[t].max_abs, err[t].max_rel,
               err[t].worst);
        if (err[t].worst > 1.0 && p->ref_done) {
            size_t bytes;
            const void *x = harness_problem_output(p, (enum harness_tensor)t, &bytes);
            burst_dtype_t dt = t == H_LSE ? BURST_DTYPE_FP32 : p->c.dtype;
            printf(" at %lld: got %.9g want %.9g", (long long)at, harness_load(dt, x, (size_t)at),
                   p->ref[t][at]);
        }
        if (err[t].nonfinite)
            printf(" NONFINITE %lld", (long long)err[t].nonfinite);
        if (err[t].pad_clobbered)
            printf(" PADDING WRITTEN %lld", (long long)err[t].pad_clobbered);
        printf("\n");
    }
    if (p->sinks && p->ref_done) {
        const struct harness_err *e = &p->err_dsinks;
        const int r = (int)(e->worst_at / p->Hq), h = (int)(e->worst_at % p->Hq);
        printf("    dsk max_abs %.3e max_rel %.3e worst/tol %.3f (rank %d head %d: got %.9g "
               "want %.9g)%s\n",
               e->max_abs, e->max_rel, e->worst, r, h, (double)p->dsinks_rank[r][h],
               p->ref_dsinks[h], e->nonfinite ? " NONFINITE" : "");
    }
}

void harness_case_test(void **state)
{
    const struct harness_case *c = *state;
    assert_true(harness_check_case(c, 0));
}

int harness_check_case(const struct harness_case *c, int verbose)
{
    struct harness_problem *p = harness_problem_create(c);
    if (!p)
        return 0;
    return harness_problem_verdict(p, harness_problem_run(p) == 0, verbose);
}

int harness_problem_verdict(struct harness_problem *p, int ran, int verbose)
{
    struct harness_err err[H_NTENSORS];
    int pass = ran && harness_problem_compare(p, err);
    for (int r = 0; pass && r < p->G; r++)
        pass = p->rec[r].positions_ok;
    const char *env = getenv("BURST_TEST_VERBOSE");
    if (!pass || verbose || (env && *env && *env != '0'))
        harness_problem_print(p, ran ? err : NULL, pass ? "ok" : "FAIL");
    fflush(stdout);
    harness_problem_destroy(p);
    return pass;
}
