/*
 * tests/test_staging.c - the ring engine's host staging for device-memory backends
 * (runtime/ring_xfer.h), exercised without a GPU: the cpu backend's ops with device_memory set
 * and counting memcpy / host_alloc ops. A 3- and a 4-rank in-process ring (flat and two-level,
 * both backward patterns) must give bitwise the results of the plain cpu backend, every transfer
 * must have gone through the staging copies, and every staging buffer must be freed.
 *
 * The same rings again with device copies (backend devcopy, transport.h): a fake device whose
 * copies are deferred until someone waits for them, as a copy stream would complete them later.
 * Then the blocks must travel "device" to device (no staging copy at all), bitwise the same, with
 * every marker released; BURST_DEVICE_DIRECT=0, or one rank without device copies, must make
 * every rank of the ring fall back to staging together.
 *
 * Memory shared by two backends (transport.h, share_*): "copier" ranks (device copies that import
 * another backend's memory, as cuda does) beside "exporter" ranks (host-addressable memory that a
 * copier maps, as a vulkan rank's on the same GPU; here each allocation is a memfd that the
 * importer maps a second time, at another address, from the descriptor it is given). Messages
 * between a copier and an exporter must go through the copier's copy() on its own mapping of the
 * exporter's buffer, the others staged; bitwise the same results, every marker released and
 * every mapping of freed memory dropped.
 *
 * Pipelined staging (BURST_STAGE_CHUNK_BYTES=256: every block in chunks of 256 bytes): staged
 * rings with device copies (asynchronous chunk copies), without them (synchronous chunk copies),
 * with both kinds of rank in one ring, and with a rank on host memory that does not stage (its
 * chunks in place) must give bitwise the same results, chunk by chunk.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "context_internal.h"
#include "harness.h"

static atomic_long n_memcpy, n_host_alloc, n_host_free;

static burst_status_t fake_memcpy(void *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    atomic_fetch_add(&n_memcpy, 1);
    memcpy(dst, src, bytes);
    return BURST_OK;
}

static void *fake_host_alloc(void *be, size_t bytes)
{
    (void)be;
    atomic_fetch_add(&n_host_alloc, 1);
    return malloc(bytes);
}

static void fake_host_free(void *be, void *p)
{
    (void)be;
    atomic_fetch_add(&n_host_free, 1);
    free(p);
}

static struct burst_backend_ops staged_ops, direct_ops;

/* The settings of a context are read at its create (runtime/settings.h): the copies of the
 * harness's context below read them again after the test changes the environment. */
static void reload_settings(struct burst_context *ctx)
{
    assert_int_equal(burst_settings_load("test", BURST_SCOPE_CONTEXT, &ctx->set), BURST_OK);
}

/* ---- a fake device copy engine: copies run when a wait needs them (transport.h) ---- */
static atomic_long n_marks, n_copies, n_released, n_stage_copies;
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

struct fake_done {
    void *dst;
    const void *src;
    size_t len;
    int ran;
};

static char fake_token; /* every mark: a marker needs no state here */

static burst_status_t fake_mark(void *be, void **mark_p)
{
    (void)be;
    atomic_fetch_add(&n_marks, 1);
    *mark_p = &fake_token;
    return BURST_OK;
}

static burst_status_t fake_copy(void *be, void *dst, const void *src, size_t len, void *after_a,
                                void *after_b, void **done_p)
{
    (void)be;
    assert_non_null(after_a); /* the ring's messages: both sides marked their queued work */
    if (!after_b)             /* staging copies (ring_xfer.h): one side, the poster's mark */
        atomic_fetch_add(&n_stage_copies, 1);
    struct fake_done *d = calloc(1, sizeof(*d));
    assert_non_null(d);
    d->dst = dst;
    d->src = src;
    d->len = len;
    atomic_fetch_add(&n_copies, 1);
    atomic_fetch_add(&n_marks, 1); /* the completion marker */
    *done_p = d;
    return BURST_OK;
}

static burst_status_t fake_wait(void *be, void *mark)
{
    (void)be;
    struct fake_done *d = mark;
    pthread_mutex_lock(&fake_lock);
    if (!d->ran) {
        memcpy(d->dst, d->src, d->len);
        d->ran = 1;
    }
    pthread_mutex_unlock(&fake_lock);
    return BURST_OK;
}

static void fake_release(void *be, void *mark)
{
    (void)be;
    if (!mark)
        return;
    atomic_fetch_add(&n_released, 1);
    if (mark != &fake_token)
        free(mark);
}

static const struct burst_tp_devops fake_devcopy = {
    .mark = fake_mark,
    .copy = fake_copy,
    .wait = fake_wait,
    .release = fake_release,
};

/* ---- memory shared by two backends (transport.h, share_*) ---- */
static struct burst_backend_ops exporter_ops, copier_ops;
static const unsigned char fake_uuid[16] = {0xb5, 0x57};
static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t share_next = 1;
static atomic_long n_share_copies, n_imports, n_unmaps;

/* the exporter's allocations: a memfd each, mapped at ptr */
#define EXPORT_MAX 64
static struct exported {
    unsigned char *ptr;
    size_t size;
    int fd;
    uint64_t id;
} exported[EXPORT_MAX];

/* the copier's mappings of them (as cuda's cache: burst_cuda_share.c) */
static struct imported {
    uint64_t id;
    unsigned char *base;
    size_t size;
} imported[EXPORT_MAX];

static void *export_alloc(void *be, size_t bytes)
{
    (void)be;
    bytes = bytes ? bytes : 1;
    int fd = memfd_create("burst-test", 0);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    pthread_mutex_lock(&share_lock);
    int i = 0;
    while (i < EXPORT_MAX && exported[i].ptr)
        i++;
    assert_true(i < EXPORT_MAX);
    exported[i] = (struct exported){p, bytes, fd, share_next++};
    pthread_mutex_unlock(&share_lock);
    return p; /* zeroed: a new memfd */
}

static void export_free(void *be, void *ptr)
{
    (void)be;
    if (!ptr)
        return;
    pthread_mutex_lock(&share_lock);
    for (int i = 0; i < EXPORT_MAX; i++)
        if (exported[i].ptr == ptr) {
            munmap(ptr, exported[i].size);
            close(exported[i].fd);
            exported[i] = (struct exported){0};
            break;
        }
    pthread_mutex_unlock(&share_lock);
}

/* Is p inside an exporter's allocation? (its own address: a copier must never copy on it) */
static int in_exported(const void *p)
{
    const unsigned char *c = p;
    int in = 0;
    pthread_mutex_lock(&share_lock);
    for (int i = 0; i < EXPORT_MAX && !in; i++)
        in = exported[i].ptr && c >= exported[i].ptr && c < exported[i].ptr + exported[i].size;
    pthread_mutex_unlock(&share_lock);
    return in;
}

static int stage_always(void *be, int in_process)
{
    (void)be;
    (void)in_process;
    return 1;
}

static burst_status_t share_device(void *be, unsigned char uuid[16])
{
    (void)be;
    memcpy(uuid, fake_uuid, 16);
    return BURST_OK;
}

/* Exporters on another device than the copiers (fake_uuid2), which the copiers reach or not. */
static const unsigned char fake_uuid2[16] = {0xb5, 0x57, 2};
static atomic_int export_elsewhere, copier_reaches;
static atomic_long n_reach_asked, n_reach_wrong;

static burst_status_t export_share_device(void *be, unsigned char uuid[16])
{
    (void)be;
    memcpy(uuid, atomic_load(&export_elsewhere) ? fake_uuid2 : fake_uuid, 16);
    return BURST_OK;
}

/* Asked by the plan for other devices only: the exporters' (counted, asserted on the main
 * thread: this runs on rank threads) */
static int share_reach(void *be, const unsigned char uuid[16])
{
    (void)be;
    if (memcmp(uuid, fake_uuid2, 16) != 0)
        atomic_fetch_add(&n_reach_wrong, 1);
    atomic_fetch_add(&n_reach_asked, 1);
    return atomic_load(&copier_reaches);
}

static burst_status_t export_mark(void *be, void **mark_p)
{
    (void)be;
    *mark_p = NULL; /* synchronous, as vulkan */
    return BURST_OK;
}

static burst_status_t export_wait(void *be, void *mark)
{
    (void)be;
    assert_null(mark);
    return BURST_OK;
}

static void export_release(void *be, void *mark)
{
    (void)be;
    assert_null(mark);
}

static burst_status_t share_export(void *be, const void *buf, size_t len, int want_fd,
                                   struct burst_tp_share *out)
{
    (void)be;
    const unsigned char *p = buf;
    burst_status_t st = BURST_ERR_INTERNAL;
    pthread_mutex_lock(&share_lock);
    for (int i = 0; i < EXPORT_MAX && st != BURST_OK; i++) {
        struct exported *e = &exported[i];
        if (e->ptr && p >= e->ptr && len <= e->size && (size_t)(p - e->ptr) <= e->size - len) {
            *out = (struct burst_tp_share){e->id, e->size, (uint64_t)(p - e->ptr), 1,
                                           want_fd ? dup(e->fd) : -1};
            st = BURST_OK;
        }
    }
    pthread_mutex_unlock(&share_lock);
    return st;
}

static int share_live(uint64_t id)
{
    int live = 0;
    pthread_mutex_lock(&share_lock);
    for (int i = 0; i < EXPORT_MAX && !live; i++)
        live = exported[i].ptr && exported[i].id == id;
    pthread_mutex_unlock(&share_lock);
    return live;
}

static pthread_mutex_t import_lock = PTHREAD_MUTEX_INITIALIZER; /* one copier rank at a time */

static burst_status_t share_import(void *be, const struct burst_tp_dev *owner, const void *buf,
                                   size_t len, void **ptr_p)
{
    (void)be;
    pthread_mutex_lock(&import_lock);
    struct burst_tp_share d;
    assert_int_equal(owner->ops->share_export(owner->be, buf, len, 0, &d), BURST_OK);
    assert_int_equal(d.fd, -1);
    int hit = -1, empty = -1;
    for (int i = 0; i < EXPORT_MAX; i++) {
        if (imported[i].base && imported[i].id == d.id)
            hit = i;
        else if (imported[i].base && !owner->ops->share_live(imported[i].id)) {
            munmap(imported[i].base, imported[i].size); /* freed by its exporter: drop */
            imported[i] = (struct imported){0};
            atomic_fetch_add(&n_unmaps, 1);
        }
        if (!imported[i].base && empty < 0)
            empty = i;
    }
    if (hit < 0) {
        assert_true(empty >= 0);
        assert_int_equal(owner->ops->share_export(owner->be, buf, len, 1, &d), BURST_OK);
        assert_true(d.fd >= 0);
        void *base = mmap(NULL, d.size, PROT_READ | PROT_WRITE, MAP_SHARED, d.fd, 0);
        close(d.fd); /* the importer owns it */
        assert_true(base != MAP_FAILED);
        imported[empty] = (struct imported){d.id, base, d.size};
        hit = empty;
        atomic_fetch_add(&n_imports, 1);
    }
    *ptr_p = imported[hit].base + d.offset;
    pthread_mutex_unlock(&import_lock);
    return BURST_OK;
}

/* The copier's copies: never on an exporter's own address; the copier's side marked. */
static burst_status_t share_copy(void *be, void *dst, const void *src, size_t len, void *after_a,
                                 void *after_b, void **done_p)
{
    assert_false(in_exported(dst));
    assert_false(in_exported(src));
    if (!after_a || !after_b) { /* one side an exporter: its mark waited for on the host */
        atomic_fetch_add(&n_share_copies, 1);
        return fake_copy(be, dst, src, len, after_a ? after_a : after_b, NULL, done_p);
    }
    return fake_copy(be, dst, src, len, after_a, after_b, done_p);
}

/* Drop every mapping (a copier's destroy); how many were of live memory (none should be). */
static int share_fini(void)
{
    int live = 0;
    for (int i = 0; i < EXPORT_MAX; i++)
        if (imported[i].base) {
            live += share_live(imported[i].id);
            munmap(imported[i].base, imported[i].size);
            imported[i] = (struct imported){0};
            atomic_fetch_add(&n_unmaps, 1);
        }
    return live;
}

static const struct burst_tp_devops copier_devcopy = {
    .mark = fake_mark,
    .copy = share_copy,
    .wait = fake_wait,
    .release = fake_release,
    .share_device = share_device,
    .share_import = share_import,
    .share_reach = share_reach,
};

static const struct burst_tp_devops exporter_devcopy = {
    .mark = export_mark,
    .wait = export_wait,
    .release = export_release,
    .share_device = export_share_device,
    .share_export = share_export,
    .share_live = share_live,
};

enum {
    B = 1,
    N = 96,
    HQ = 4,
    HKV = 2,
    D = 16
};

struct run {
    struct burst_context *ctx;
    int G, local;
    burst_bwd_pattern_t bwd;
    float *q, *k, *v, *dout;       /* global inputs, natural order [B, N, H, D] */
    float *o, *lse, *dq, *dk, *dv; /* global outputs */
    burst_status_t st[8];
    struct burst_context *rank_ctx[8]; /* per-rank context where set, else ctx */
    char transfers[8][16];             /* burst_plan_transfers of each rank */
};

static struct burst_tensor view(float *base, int heads, int64_t off, int64_t len)
{
    struct burst_tensor t = {
        .data = base + off * heads * D,
        .dtype = BURST_DTYPE_FP32,
        .shape = {B, len, heads, D},
        .stride = {(int64_t)N * heads * D, (int64_t)heads * D, D, 1},
    };
    return t;
}

static void rank_fn(int rank, struct burst_comm *comm, void *arg)
{
    struct run *r = arg;
    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = B;
    pp.seq_len = N;
    pp.q_heads = HQ;
    pp.kv_heads = HKV;
    pp.head_dim = D;
    pp.causal = 1;
    pp.layout = BURST_LAYOUT_NATURAL;
    pp.bwd_pattern = r->bwd;
    pp.deterministic = 1;
    pp.ranks_per_node = r->local;
    struct burst_plan *plan = NULL;
    struct burst_context *ctx = r->rank_ctx[rank] ? r->rank_ctx[rank] : r->ctx;
    burst_status_t st = burst_plan_create(ctx, comm, &pp, &plan);
    if (st == BURST_OK)
        snprintf(r->transfers[rank], sizeof(r->transfers[rank]), "%s", burst_plan_transfers(plan));
    int64_t off = 0, len = 0;
    burst_layout_shard_offset(BURST_LAYOUT_NATURAL, N, r->G, rank, &off);
    burst_layout_shard_len(BURST_LAYOUT_NATURAL, N, r->G, rank, &len);
    struct burst_tensor q = view(r->q, HQ, off, len), k = view(r->k, HKV, off, len),
                        v = view(r->v, HKV, off, len), dout = view(r->dout, HQ, off, len),
                        o = view(r->o, HQ, off, len), dq = view(r->dq, HQ, off, len),
                        dk = view(r->dk, HKV, off, len), dv = view(r->dv, HKV, off, len);
    float *lse = r->lse + (size_t)B * HQ * off;
    if (st == BURST_OK)
        st = burst_attention_forward(plan, &q, &k, &v, &o, lse);
    if (st == BURST_OK)
        st = burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
    burst_plan_destroy(plan);
    r->st[rank] = st;
}

static void run(struct run *r)
{
    size_t nq = (size_t)B * N * HQ * D, nkv = (size_t)B * N * HKV * D;
    r->o = calloc(nq, sizeof(float));
    r->dq = calloc(nq, sizeof(float));
    r->dk = calloc(nkv, sizeof(float));
    r->dv = calloc(nkv, sizeof(float));
    r->lse = calloc((size_t)B * HQ * N, sizeof(float));
    assert_true(r->o && r->dq && r->dk && r->dv && r->lse);
    assert_int_equal(harness_run_ranks(r->G, 20000, rank_fn, r), 0);
    for (int i = 0; i < r->G; i++)
        assert_int_equal(r->st[i], BURST_OK);
}

static void free_outputs(struct run *r)
{
    free(r->o);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->lse);
}

static void same_as_cpu(int G, int local, burst_bwd_pattern_t bwd)
{
    size_t nq = (size_t)B * N * HQ * D, nkv = (size_t)B * N * HKV * D;
    float *in = malloc(sizeof(float) * (2 * nq + 2 * nkv));
    assert_non_null(in);
    uint64_t s = harness_seed() + (uint64_t)(G * 10 + local);
    for (size_t i = 0; i < 2 * nq + 2 * nkv; i++)
        in[i] = (float)harness_rng_uniform(&s, -2, 2);
    struct run plain = {harness_context(),
                        G,
                        local,
                        bwd,
                        in,
                        in + nq,
                        in + nq + nkv,
                        in + nq + 2 * nkv,
                        NULL,
                        NULL,
                        NULL,
                        NULL,
                        NULL,
                        {0},
                        {0},
                        {{0}}};
    struct run staged = plain;
    struct burst_context fake = *harness_context(); /* same cpu instance, staged ops */
    fake.ops = &staged_ops;
    staged.ctx = &fake;
    run(&plain);
    long c0 = atomic_load(&n_memcpy), a0 = atomic_load(&n_host_alloc);
    run(&staged);
    long copies = atomic_load(&n_memcpy) - c0;
    /* every block hop of both phases was staged: at least 2 copies per rank and step */
    assert_true(copies >= 2L * G * (G - 1));
    assert_true(atomic_load(&n_host_alloc) > a0);
    assert_int_equal(atomic_load(&n_host_alloc), atomic_load(&n_host_free));
    /* the same in chunks (synchronous copies: no device copies here) */
    struct run chunked = staged;
    setenv("BURST_STAGE_CHUNK_BYTES", "256", 1);
    reload_settings(&fake);
    c0 = atomic_load(&n_memcpy);
    run(&chunked);
    unsetenv("BURST_STAGE_CHUNK_BYTES");
    reload_settings(&fake);
    long ccopies = atomic_load(&n_memcpy) - c0;
    assert_true(ccopies > 2 * copies); /* blocks of 8 KiB: 32 chunks each */
    assert_int_equal(atomic_load(&n_host_alloc), atomic_load(&n_host_free));
    size_t nb[5] = {nq, (size_t)B * HQ * N, nq, nkv, nkv};
    float *a[5] = {plain.o, plain.lse, plain.dq, plain.dk, plain.dv};
    float *b[5] = {staged.o, staged.lse, staged.dq, staged.dk, staged.dv};
    float *bc[5] = {chunked.o, chunked.lse, chunked.dq, chunked.dk, chunked.dv};
    for (int t = 0; t < 5; t++) {
        assert_memory_equal(a[t], b[t], nb[t] * sizeof(float));
        assert_memory_equal(a[t], bc[t], nb[t] * sizeof(float));
    }
    for (int i = 0; i < G; i++)
        assert_string_equal(staged.transfers[i], "staged");
    free_outputs(&chunked);
    print_message("G=%d local=%d bwd=%s: %ld staged copies, bitwise equal\n", G, local,
                  bwd == BURST_BWD_RING ? "ring" : "burst", copies);

    /* device copies: every rank direct, then the two ways of falling back to staging */
    struct burst_context dfake = *harness_context(), host = *harness_context();
    dfake.ops = &direct_ops;
    /* modes 3, 4: 2 and 1 again with pipelined staging (chunks of 256 bytes); 5: one rank on
     * host memory (plain cpu: not staged, its chunks sent from and received in place) */
    for (int mode = 0; mode < 6; mode++) {
        struct run direct = plain;
        direct.ctx = &dfake;
        if (mode == 1 || mode == 4)
            direct.rank_ctx[G - 1] = &fake; /* one rank cannot copy device to device */
        if (mode == 5)
            direct.rank_ctx[G - 1] = &host;
        if (mode == 2 || mode == 3)
            setenv("BURST_DEVICE_DIRECT", "0", 1);
        if (mode >= 3)
            setenv("BURST_STAGE_CHUNK_BYTES", "256", 1);
        reload_settings(&dfake);
        reload_settings(&fake);
        reload_settings(&host);
        long m0 = atomic_load(&n_marks), r0 = atomic_load(&n_released);
        long k0 = atomic_load(&n_copies), s0 = atomic_load(&n_memcpy);
        long p0 = atomic_load(&n_stage_copies);
        run(&direct);
        unsetenv("BURST_DEVICE_DIRECT");
        unsetenv("BURST_STAGE_CHUNK_BYTES");
        reload_settings(&dfake);
        reload_settings(&fake);
        reload_settings(&host);
        long dcopies = atomic_load(&n_copies) - k0, scopies = atomic_load(&n_memcpy) - s0;
        long pcopies = atomic_load(&n_stage_copies) - p0;
        const char *want = mode == 0 ? "device" : "staged";
        for (int i = 0; i < G; i++)
            assert_string_equal(direct.transfers[i], mode == 5 && i == G - 1 ? "host" : want);
        if (mode == 0) {
            assert_true(dcopies >= 2L * G * (G - 1)); /* every hop, both phases */
            assert_int_equal(scopies, 0);             /* and never through the host */
        } else if (mode < 3) {
            assert_int_equal(dcopies, 0);
            assert_true(scopies >= 2L * G * (G - 1));
        } else { /* chunks copied asynchronously by the ranks with device copies */
            assert_int_equal(dcopies, pcopies);
            assert_true(pcopies >= 2L * 32 * (mode == 3 ? G : G - 1));
            assert_int_equal(scopies, mode == 4 ? scopies : 0);
            if (mode == 4) /* and synchronously by the one without */
                assert_true(scopies >= 2L * 32);
        }
        assert_int_equal(atomic_load(&n_marks) - m0, atomic_load(&n_released) - r0);
        float *c[5] = {direct.o, direct.lse, direct.dq, direct.dk, direct.dv};
        for (int t = 0; t < 5; t++)
            assert_memory_equal(a[t], c[t], nb[t] * sizeof(float));
        print_message("G=%d local=%d bwd=%s: %s (%ld device copies), bitwise equal\n", G, local,
                      bwd == BURST_BWD_RING ? "ring" : "burst",
                      mode == 0   ? "device to device"
                      : mode == 1 ? "one rank staged -> all staged"
                      : mode == 2 ? "BURST_DEVICE_DIRECT=0"
                      : mode == 3 ? "BURST_DEVICE_DIRECT=0, pipelined in chunks"
                      : mode == 4 ? "one rank staged, pipelined in chunks"
                                  : "one rank on host memory, pipelined in chunks",
                      dcopies);
        free_outputs(&direct);
    }

    /* copiers and exporters alternating: rank 0 a copier; with G = 3 ranks 0 and 2 are both
     * copiers (staged between them), with G = 4 every neighbour is the other kind (but the
     * two-level ring's hops between nodes join alike ranks) */
    struct burst_context cctx = *harness_context(), ectx = *harness_context();
    cctx.ops = &copier_ops;
    ectx.ops = &exporter_ops;
    /* mode 0: one device; 1: BURST_DEVICE_DIRECT=0; 2: the exporters on another device that
     * the copiers reach (as on 2 GPUs with peer access: the same as mode 0); 3: on one that
     * they do not (all staged, as mode 1) */
    for (int mode = 0; mode < 4; mode++) {
        struct run mixed = plain;
        for (int i = 0; i < G; i++)
            mixed.rank_ctx[i] = i % 2 ? &ectx : &cctx;
        if (mode == 1)
            setenv("BURST_DEVICE_DIRECT", "0", 1);
        reload_settings(&cctx);
        reload_settings(&ectx);
        atomic_store(&export_elsewhere, mode >= 2);
        atomic_store(&copier_reaches, mode == 2);
        long m0 = atomic_load(&n_marks), r0 = atomic_load(&n_released);
        long k0 = atomic_load(&n_share_copies), s0 = atomic_load(&n_memcpy);
        long i0 = atomic_load(&n_imports), u0 = atomic_load(&n_unmaps);
        long q0 = atomic_load(&n_reach_asked);
        run(&mixed);
        unsetenv("BURST_DEVICE_DIRECT");
        reload_settings(&cctx);
        reload_settings(&ectx);
        atomic_store(&export_elsewhere, 0);
        const int shares = mode == 0 || mode == 2;
        long asked = atomic_load(&n_reach_asked) - q0;
        assert_int_equal(atomic_load(&n_reach_wrong), 0);
        if (mode >= 2) /* every copier asked about every exporter, at each plan */
            assert_true(asked >= (long)(G / 2) * ((G + 1) / 2));
        else
            assert_int_equal(asked, 0);
        int live = share_fini();
        long kcopies = atomic_load(&n_share_copies) - k0, scopies = atomic_load(&n_memcpy) - s0;
        long imports = atomic_load(&n_imports) - i0, unmaps = atomic_load(&n_unmaps) - u0;
        for (int i = 0; i < G; i++) { /* staged too: some other rank of its kind */
            const int staged_too = i % 2 ? G > 3 : G > 2;
            assert_string_equal(mixed.transfers[i], !shares      ? "staged"
                                                    : staged_too ? "device+staged"
                                                                 : "device");
        }
        if (shares) { /* every copier-exporter hop (each rank has one, both phases) */
            assert_true(kcopies >= 2L * (G - 1));
            assert_true(imports > 0);
            assert_true(scopies > 0); /* between two copiers (and exporters, G = 4) */
        } else {
            assert_int_equal(kcopies, 0);
            assert_int_equal(imports, 0);
            assert_true(scopies >= 2L * G * (G - 1));
        }
        assert_int_equal(live, 0);         /* the ring freed all it shared */
        assert_int_equal(imports, unmaps); /* and every mapping was dropped */
        assert_int_equal(atomic_load(&n_marks) - m0, atomic_load(&n_released) - r0);
        float *c[5] = {mixed.o, mixed.lse, mixed.dq, mixed.dk, mixed.dv};
        for (int t = 0; t < 5; t++)
            assert_memory_equal(a[t], c[t], nb[t] * sizeof(float));
        print_message("G=%d local=%d bwd=%s: copier and exporter ranks%s: %ld shared copies, "
                      "%ld imports, bitwise equal\n",
                      G, local, bwd == BURST_BWD_RING ? "ring" : "burst",
                      mode == 0   ? ""
                      : mode == 1 ? " with BURST_DEVICE_DIRECT=0"
                      : mode == 2 ? " on two devices, reached"
                                  : " on two devices, not reached",
                      kcopies, imports);
        free_outputs(&mixed);
    }
    free_outputs(&plain);
    free_outputs(&staged);
    free(in);
}

static void flat3_burst(void **state)
{
    (void)state;
    same_as_cpu(3, 0, BURST_BWD_BURST);
}

static void flat3_ring(void **state)
{
    (void)state;
    same_as_cpu(3, 0, BURST_BWD_RING);
}

static void two_level4(void **state)
{
    (void)state;
    same_as_cpu(4, 2, BURST_BWD_BURST);
}

int main(void)
{
    assert_non_null(harness_context());
    staged_ops = *harness_context()->ops;
    staged_ops.mem.device_memory = 1;
    staged_ops.mem.memcpy = fake_memcpy;
    staged_ops.mem.host_alloc = fake_host_alloc;
    staged_ops.mem.host_free = fake_host_free;
    direct_ops = staged_ops;
    direct_ops.devcopy = &fake_devcopy;
    copier_ops = staged_ops;
    copier_ops.devcopy = &copier_devcopy;
    exporter_ops = *harness_context()->ops; /* host-addressable, staged (as vulkan on a GPU) */
    exporter_ops.mem.alloc = export_alloc;
    exporter_ops.mem.free = export_free;
    exporter_ops.mem.memcpy = fake_memcpy;
    exporter_ops.mem.host_alloc = fake_host_alloc;
    exporter_ops.mem.host_free = fake_host_free;
    exporter_ops.mem.stage_transfers = stage_always;
    exporter_ops.devcopy = &exporter_devcopy;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flat3_burst),
        cmocka_unit_test(flat3_ring),
        cmocka_unit_test(two_level4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
