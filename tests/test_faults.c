/*
 * tests/test_faults.c - injected faults on the in-process ring (runtime/fault.h, suite 'unit'):
 * every fault gives a defined error or a correct result, soon, and frees what it allocated (the
 * ASan build's leak check covers the last part).
 *
 *   test_faults drop|truncate|duplicate|delay|slow|oom      one case (meson: fault_<case>)
 *   test_faults                                             every case
 *
 * Each case runs plan + forward + backward on G = 3 rank threads (fp32, causal, zigzag,
 * deterministic), with burst_fault_set() arming the fault, and compares with a clean run:
 *   drop       rank 1 never sends its first forward message of step 0: a rank times out
 *              (BURST_ERR_TIMEOUT: its receiver, or a rank waiting on a rank that waits) after
 *              the 1 s timeout, the others stop with BURST_ERR_PEER_FAILED; nobody waits much
 *              longer than the timeout
 *   truncate   rank 2's first backward message of step 1 loses half its bytes:
 *              BURST_ERR_TRANSPORT naming the lengths, others PEER_FAILED, without waiting for
 *              the (20 s) timeout
 *   duplicate  rank 0's forward step-1 message is sent twice: results bitwise those of the
 *              clean run, the copy was really sent, and released at destroy
 *   delay      rank 1's backward step-0 message is 300 ms late: bitwise results, >= 300 ms
 *   slow       rank 2 sleeps 60 ms at every step: bitwise results, >= 6 steps * 60 ms
 *   oom        backend allocation N fails, for every N until a run needs no more: the rank
 *              that allocates returns BURST_ERR_NO_MEMORY with a message, the others
 *              PEER_FAILED, nobody hangs; burst_context_alloc fails the same way
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "harness.h"
#include "tp_comm.h"

#define G 3
#define N (32 * G)
#define HQ 2
#define HKV 1
#define D 16

/* One rank's tensors (its zigzag shard) and what its calls returned. */
struct rank_io {
    int64_t n;
    float *q, *k, *v, *dout, *o, *lse, *dq, *dk, *dv;
    burst_status_t st_plan, st_fwd, st_bwd;
    char msg[512];
    int ndup; /* duplicates the communicator holds at the end */
};

struct run {
    struct rank_io r[G];
};

static float *filled(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof(float));
    uint64_t s = seed;
    for (size_t i = 0; x && i < n; i++)
        x[i] = (float)harness_rng_uniform(&s, -1, 1);
    return x;
}

static void run_init(struct run *run)
{
    memset(run, 0, sizeof(*run));
    for (int r = 0; r < G; r++) {
        struct rank_io *io = &run->r[r];
        assert_int_equal(burst_layout_shard_len(BURST_LAYOUT_ZIGZAG, N, G, r, &io->n), BURST_OK);
        size_t nq = (size_t)(io->n * HQ * D), nkv = (size_t)(io->n * HKV * D);
        uint64_t seed = harness_seed() + (uint64_t)r * 1000;
        io->q = filled(nq, seed + 1);
        io->k = filled(nkv, seed + 2);
        io->v = filled(nkv, seed + 3);
        io->dout = filled(nq, seed + 4);
        io->o = calloc(nq, sizeof(float));
        io->lse = calloc((size_t)(HQ * io->n), sizeof(float));
        io->dq = calloc(nq, sizeof(float));
        io->dk = calloc(nkv, sizeof(float));
        io->dv = calloc(nkv, sizeof(float));
        assert_true(io->q && io->k && io->v && io->dout && io->o && io->lse && io->dq && io->dk &&
                    io->dv);
    }
}

static void run_free(struct run *run)
{
    for (int r = 0; r < G; r++) {
        struct rank_io *io = &run->r[r];
        float *all[] = {io->q, io->k, io->v, io->dout, io->o, io->lse, io->dq, io->dk, io->dv};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            free(all[i]);
    }
}

static void rank_fn(int rank, struct burst_comm *comm, void *arg)
{
    struct rank_io *io = &((struct run *)arg)->r[rank];
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = N;
    pp.q_heads = HQ;
    pp.kv_heads = HKV;
    pp.head_dim = D;
    pp.causal = 1;
    pp.layout = BURST_LAYOUT_ZIGZAG;
    pp.deterministic = 1;
    struct burst_plan *plan = NULL;
    io->st_plan = burst_plan_create(harness_context(), comm, &pp, &plan);
    if (io->st_plan == BURST_OK) {
        struct burst_tensor q = burst_tensor_contiguous(io->q, BURST_DTYPE_FP32, 1, io->n, HQ, D),
                            k = burst_tensor_contiguous(io->k, BURST_DTYPE_FP32, 1, io->n, HKV, D),
                            v = burst_tensor_contiguous(io->v, BURST_DTYPE_FP32, 1, io->n, HKV, D),
                            o = burst_tensor_contiguous(io->o, BURST_DTYPE_FP32, 1, io->n, HQ, D),
                            dout = burst_tensor_contiguous(io->dout, BURST_DTYPE_FP32, 1, io->n, HQ,
                                                           D),
                            dq = burst_tensor_contiguous(io->dq, BURST_DTYPE_FP32, 1, io->n, HQ, D),
                            dk =
                                burst_tensor_contiguous(io->dk, BURST_DTYPE_FP32, 1, io->n, HKV, D),
                            dv =
                                burst_tensor_contiguous(io->dv, BURST_DTYPE_FP32, 1, io->n, HKV, D);
        io->st_fwd = burst_attention_forward(plan, &q, &k, &v, &o, io->lse);
        if (io->st_fwd == BURST_OK)
            io->st_bwd =
                burst_attention_backward(plan, &q, &k, &v, &o, io->lse, &dout, &dq, &dk, &dv);
    }
    if (io->st_plan || io->st_fwd || io->st_bwd)
        snprintf(io->msg, sizeof(io->msg), "%s", burst_last_error());
    io->ndup = comm->ndup;
    burst_plan_destroy(plan);
}

/* Run the ring with `spec` armed (NULL: clean); the wall time in ms. */
static double run_ring(struct run *run, const char *spec, int timeout_ms)
{
    assert_int_equal(burst_fault_set(spec), 0);
    double t0 = harness_now_ms();
    assert_int_equal(harness_run_ranks(G, timeout_ms, rank_fn, run), 0);
    double dt = harness_now_ms() - t0;
    burst_fault_set(NULL);
    for (int r = 0; r < G; r++)
        printf("  rank %d: plan %s, forward %s, backward %s%s%s\n", r,
               burst_status_str(run->r[r].st_plan), burst_status_str(run->r[r].st_fwd),
               burst_status_str(run->r[r].st_bwd), run->r[r].msg[0] ? ": " : "", run->r[r].msg);
    printf("  %s: %.0f ms\n", spec ? spec : "clean", dt);
    return dt;
}

static void assert_all_ok(const struct run *run)
{
    for (int r = 0; r < G; r++)
        assert_true(run->r[r].st_plan == BURST_OK && run->r[r].st_fwd == BURST_OK &&
                    run->r[r].st_bwd == BURST_OK);
}

static void assert_same(const struct run *a, const struct run *b)
{
    for (int r = 0; r < G; r++) {
        const struct rank_io *x = &a->r[r], *y = &b->r[r];
        size_t nq = (size_t)(x->n * HQ * D) * sizeof(float),
               nkv = (size_t)(x->n * HKV * D) * sizeof(float);
        assert_memory_equal(x->o, y->o, nq);
        assert_memory_equal(x->lse, y->lse, (size_t)(HQ * x->n) * sizeof(float));
        assert_memory_equal(x->dq, y->dq, nq);
        assert_memory_equal(x->dk, y->dk, nkv);
        assert_memory_equal(x->dv, y->dv, nkv);
    }
}

/* The first failing status of a rank (plan, forward, backward). */
static burst_status_t first_failure(const struct rank_io *io)
{
    return io->st_plan ? io->st_plan : io->st_fwd ? io->st_fwd : io->st_bwd;
}

/* Every rank failed; `cause` at least once with `text` in its message; the rest PEER_FAILED
 * (or `cause` too). */
static void assert_failed(const struct run *run, burst_status_t cause, const char *text)
{
    int seen = 0;
    for (int r = 0; r < G; r++) {
        burst_status_t st = first_failure(&run->r[r]);
        assert_true(st == cause || st == BURST_ERR_PEER_FAILED);
        if (st == cause && harness_contains(run->r[r].msg, text))
            seen++;
    }
    assert_true(seen > 0);
}

/* A correct-result fault: bitwise equal to a clean run; the wall time of the faulty run. */
static double check_correct(const char *spec, struct run *faulty)
{
    struct run clean;
    run_init(&clean);
    run_init(faulty);
    run_ring(&clean, NULL, 20000);
    assert_all_ok(&clean);
    double dt = run_ring(faulty, spec, 20000);
    assert_all_ok(faulty);
    assert_same(&clean, faulty);
    run_free(&clean);
    return dt;
}

static void test_drop(void **state)
{
    (void)state;
    struct run run;
    run_init(&run);
    double dt = run_ring(&run, "drop:rank=1,phase=fwd,step=0", 1000);
    /* the first wait to expire may be on rank 1 or on a rank that waits for rank 1 */
    assert_failed(&run, BURST_ERR_TIMEOUT, "did not answer within 1000 ms");
    assert_true(dt >= 900 && dt < 1000 + 4000);
    run_free(&run);
}

static void test_truncate(void **state)
{
    (void)state;
    struct run run;
    run_init(&run);
    double dt = run_ring(&run, "truncate:rank=2,phase=bwd,step=1", 20000);
    assert_failed(&run, BURST_ERR_TRANSPORT, "another length");
    for (int r = 0; r < G; r++) /* the forward was untouched */
        assert_int_equal(run.r[r].st_fwd, BURST_OK);
    assert_true(dt < 10000);
    run_free(&run);
}

static void test_duplicate(void **state)
{
    (void)state;
    struct run run;
    check_correct("duplicate:rank=0,phase=fwd,step=1", &run);
    assert_int_equal(run.r[0].ndup, 1); /* the copy was sent */
    assert_int_equal(run.r[1].ndup + run.r[2].ndup, 0);
    run_free(&run);
}

static void test_delay(void **state)
{
    (void)state;
    struct run run;
    double dt = check_correct("delay:rank=1,phase=bwd,step=0,ms=300", &run);
    assert_true(dt >= 300);
    run_free(&run);
}

static void test_slow(void **state)
{
    (void)state;
    struct run run;
    double dt = check_correct("slow:rank=2,ms=60", &run);
    assert_true(dt >= 6 * 60); /* G = 3 steps in each phase */
    run_free(&run);
}

static void test_oom(void **state)
{
    (void)state;
    /* burst_context_alloc itself */
    assert_int_equal(burst_fault_set("oom:alloc=0"), 0);
    void *p = (void *)1;
    assert_int_equal(burst_context_alloc(harness_context(), 64, &p), BURST_ERR_NO_MEMORY);
    assert_null(p);
    assert_true(harness_contains(burst_last_error(), "64 bytes"));
    assert_int_equal(burst_context_alloc(harness_context(), 64, &p), BURST_OK); /* only one */
    burst_context_free(harness_context(), p);
    /* every allocation of a ring run in turn */
    int failed_runs = 0;
    for (int n = 0; n < 200; n++) {
        char spec[64];
        snprintf(spec, sizeof(spec), "oom:alloc=%d", n);
        struct run run;
        run_init(&run);
        double dt = run_ring(&run, spec, 20000);
        int all_ok = 1;
        for (int r = 0; r < G; r++)
            all_ok &= first_failure(&run.r[r]) == BURST_OK;
        if (!all_ok) {
            assert_failed(&run, BURST_ERR_NO_MEMORY, "allocate");
            assert_true(dt < 10000); /* the peers were told, not timed out */
            failed_runs++;
        }
        run_free(&run);
        if (all_ok)
            break; /* allocation n was not needed: every earlier one was tried */
    }
    assert_true(failed_runs >= G); /* each rank allocates scratch in each phase */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_drop),      cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_duplicate), cmocka_unit_test(test_delay),
        cmocka_unit_test(test_slow),      cmocka_unit_test(test_oom),
    };
    printf("seed %llu (BURST_TEST_SEED)\n", (unsigned long long)harness_seed());
    if (argc < 2)
        return cmocka_run_group_tests(all, NULL, NULL);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(all[i].name + 5, argv[1]) == 0) { /* "test_<case>" */
            const struct CMUnitTest one[] = {all[i]};
            return _cmocka_run_group_tests(argv[1], one, 1, NULL, NULL);
        }
    fprintf(stderr, "unknown case \"%s\"\n", argv[1]);
    return 2;
}
