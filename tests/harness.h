/*
 * tests/harness.h - the shared test harness: random problems, G ranks as threads, comparison
 * with the fp64 reference (tools/ref.h).
 *
 * One case = one attention problem. The harness
 *   1. draws global natural-order inputs Q, K, V, dO with a seed (BURST_TEST_SEED or the clock;
 *      printed on every failure so that it reproduces), rounds them to the case's dtype, and
 *      hands the reference exactly the rounded values (so input rounding is not an error);
 *   2. permutes them into the layout's rank order (burst_layout_permute) and cuts per-rank views
 *      at burst_layout_shard_offset (or the prefix sums of explicit shard_lens), optionally with
 *      padded head strides;
 *   3. poisons every output (NaN bit patterns), runs G ranks as G threads of one process (one
 *      shared context, or one context per rank from the case's `backends` list for mixed rings,
 *      a burst_local_world, one comm + plan per rank): forward, then backward;
 *      on a backend with device memory (cuda) the rank-visible tensors and lse are allocated
 *      with burst_context_alloc, uploaded (inputs and poisoned outputs) before and downloaded
 *      after the run with burst_context_memcpy, so every check below sees the device's bytes;
 *   4. unpermutes the outputs (burst_layout_unpermute) and compares O, lse, dQ, dK, dV with the
 *      reference, element by element, and checks that padding between heads is still poison.
 *
 * TOLERANCE (per tensor T, element x with reference r; S_T = max |r| over T):
 *
 *     |x - r| <= rtol * |r| + 1e-5 * S_T + extra(x)
 *
 *   fp32:    rtol = 1e-5: 1e-5 relative to the fp64 reference; the floor 1e-5 * S_T
 *            stops elements that are near zero by cancellation (gradients, O rows averaging to
 *            ~0) from demanding an impossible elementwise relative accuracy.
 *            dQ and dK are sums of dS = P (dP - D), a difference of two dot products that may
 *            cancel completely (a window of width 0 gives dS = 0 exactly, S_T = 0): for them
 *            extra = 1e-5 * C, with C the same sum taken over the magnitudes of the cancelling
 *            terms, C_dQ_i = tau sum_j P_ij (|dO_i|.|v_j| + |dO_i|.|O_i|) |k_j| (C_dK alike
 *            over i with |q_i|): 1e-5 relative to what was subtracted. This applies to every
 *            dtype.
 *   scores (every dtype): the kernels compute the scaled score s_ij = tau q_i.k_j in fp32;
 *            its rounding error is |ds_ij| <= delta_ij = 2 u32 sqrt(d) tau sum_c |q_ic| |k_jc|
 *            (u32 = 2^-24; sqrt(d) is the usual probabilistic growth of a d-term dot product, the
 *            factor 2 covers the pre-scaling and the subtraction of the row maximum). A relative
 *            error ds in P_ij moves O_i by P_ij ds (v_j - O_i), so O gets
 *            extra = sum_j P_ij delta_ij |v_j - O_i|; the backward's P and dS move alike
 *            (dV: sum_i P_ij delta_ij |dO_i|; dK, dQ: tau P_ij delta_ij |dP_ij - D_i| times
 *            |q_i|, |k_j|). It is negligible for ordinary scores
 *            (|s| of a few units) and dominates only for huge ones (the large_scores case, |s| up
 *            to ~150, where fp32 cannot resolve P to 1e-5: ulp(216) in log2 units is 1.5e-5).
 *            fp32 on the GPU backends may run on matrix units as 3xTF32 (cuda) or on two fp16
 *            halves (vulkan, where its device has cooperative matrices), whose products carry about 3 x 2^-22 relative error: there u32
 *            is replaced by 2^-21.
 *   fp16/bf16 (unit roundoff u = 2^-11 / 2^-8): inputs are rounded BEFORE the reference sees
 *            them, so they contribute nothing; what remains is
 *            (a) output rounding: O, dQ, dK, dV are cast to the dtype once: rtol = u + 1e-5
 *                (lse stays fp32: rtol = 1e-5);
 *            (b) the fp32 arithmetic inside: the same 1e-5 terms as fp32;
 *            (c) the one "input" of the backward the reference does not see rounded: O. The
 *                backward's D_i = sum_c dO_ic O_ic uses the forward's rounded O, so
 *                |dD_i| <= u * w_i with w_i = sum_c |dO_ic| |O_ic|; to first order this moves
 *                dQ_i by tau dD_i sum_j P_ij k_j  -> |.| <= tau u w_i sum_j P_ij |k_j|
 *                dK_j by tau sum_i P_ij dD_i q_i  -> |.| <= tau u sum_i P_ij w_i |q_i|
 *                (dV does not use D). These are computed elementwise in fp64 and added to extra.
 *            (d) BURST_WIRE_INPUT only: the travelling accumulator (dQ for burst; dK, dV for
 *                ring) is rounded to the dtype at each of its h = steps - 1 hops, each time by at
 *                most u * |partial sum| <= u * A, where A is the sum of the absolute values of
 *                every contribution (A_dQ = tau sum_j |dS_ij| |k_j|, A_dK = tau sum_i |dS_ij| |q_i|,
 *                A_dV = sum_i P_ij |dO_i|, computed in fp64): extra += h * u * A.
 *            (e) GPU backends (any but cpu) run the fp16/bf16 forward's P V product on matrix
 *                units with P rounded to the dtype (as FlashAttention does), and so does the cpu
 *                backend in bf16 on AVX512_BF16 dot products (the bound is applied to every
 *                backend in bf16, whichever kernel variant runs): O_ic moves by at most
 *                mo_ic = sum_j (u P_ij + h) |v_jc| (h = 2^-25 in fp16 for subnormal P, else 0),
 *                added to O's extra, and D's error in (c) grows by sum_c |dO_ic| mo_ic; the
 *                backward's dV, dK, dQ products round P and dS alike: + sum (u |P or dS| + h)
 *                times the other operand's magnitudes (tau for dK, dQ).
 *            Every derived term (c, d) is multiplied by 1.25 to cover second-order effects.
 *   With fp32 accumulators on the wire (the default) no term depends on G: each hop moves
 *   dtype values that are already exact (K, V, Q, dO) or fp32 values (lse, D, accumulators), so
 *   the half-precision bound is the same for G = 1 and any G (test_scaling checks this).
 *
 * SINKS (dsinks[h] = -sum_{b,i} e_i D_i, e_i = exp(sink_h - lse_i), per head): the engine takes
 *   it from the computed lse and D = rowsum(dO * O) of the computed O, so its error is bounded
 *   by propagating their tolerated errors to first order, and 1e-5 relative for the sums:
 *       tol_h = 1e-5 |r_h| + sum_{b,i} e_i (|D_i| tl_i + sum_c |dO_ic| to_ic + 1e-5 w_i)
 *   with tl_i and to_ic the lse and O tolerances above and w_i = sum_c |dO_ic| |O_ic|
 *   (a relative error x in lse's exponent moves e_i by e_i x; an error in O moves D by dO).
 *   Every rank must return the same dsinks (the call sums over the ranks).
 * Reported per tensor: max_abs = max |x - r|, max_rel = max |x - r| / (|r| + S_T) (a mixed
 * relative error that is meaningful for near-zero elements), and worst = max |x - r| / tol (the
 * case passes when worst <= 1 for every tensor, nothing is NaN/Inf and the padding is intact).
 *
 * Threads: rank functions run on worker threads and must not call cmocka asserts (they longjmp);
 * they record what happened and the main thread asserts after harness_run_ranks() returns.
 */
#ifndef BURST_TESTS_HARNESS_H
#define BURST_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "burst/burst.h"

struct CMUnitTest;
struct harness_case;

/*
 * Run one cmocka test per case (named after the case, state = the case) with fn, followed by the
 * `nextra` tests in extra (may be NULL); returns cmocka's group result.
 */
int harness_run_cases(const char *group, const struct harness_case *cases, size_t ncases,
                      void (*fn)(void **state), const struct CMUnitTest *extra, size_t nextra);

/* ---- seeds and random numbers ---- */

/* The run's seed: BURST_TEST_SEED if set, else drawn from the clock. Stable within a process. */
uint64_t harness_seed(void);

/* BURST_TEST_TIME_SCALE (a positive integer; 1 when unset or malformed): the factor by which a
 * test stretches its wall-clock limits for slow code (sanitizers, valgrind, a software GPU). */
int harness_time_scale(void);
uint64_t harness_rng_next(uint64_t *state); /* splitmix64 */
double harness_rng_uniform(uint64_t *state, double lo, double hi);

/* ---- dtypes (independent of the library's converters, which test_dtype checks) ---- */

double harness_unit_roundoff(burst_dtype_t dtype);   /* 2^-24, 2^-11, 2^-8 */
double harness_round(burst_dtype_t dtype, double x); /* round to nearest even into dtype */
void harness_store(burst_dtype_t dtype, void *base, size_t i, double x); /* rounds (RNE) */
double harness_load(burst_dtype_t dtype, const void *base, size_t i);
/* Fill with a NaN bit pattern that no computation produces (the "poison"). */
void harness_poison(burst_dtype_t dtype, void *base, size_t count);
int harness_is_poison(burst_dtype_t dtype, const void *base, size_t i);

/* ---- the shared context and rank threads ---- */

/* One context for the whole test process, created on first use: backend BURST_TEST_BACKEND
 * (default cpu). A backend with no device here ends the test program with exit status 77
 * (meson: SKIP), so GPU variants of the tests skip on machines without that GPU; so does a run
 * of a forced cpu kernel variant (BURST_TEST_ISA_VARIANT set, as meson's *_isa_<variant> tests
 * do) where BURST_CPU_ISA names the variant this cpu takes anyway: the unforced run tests it. */
struct burst_context *harness_context(void);
/* Destroy the shared contexts (harness_context(), harness_backend_context()) now. Programs that
 * do not end through harness_run_cases() call it before returning from main: NVIDIA's Vulkan
 * driver is torn down before atexit handlers run, so a context destroyed only at exit crashes. */
void harness_fini(void);

/* The context of one backend by name (created on first use, cached for the process). A name
 * this build lacks, or a backend with no device here, ends the program with 77 (SKIP). */
struct burst_context *harness_backend_context(const char *name);

/* Rank `rank`'s context for a comma-separated per-rank list (cycling), or the shared context
 * when list is NULL. */
struct burst_context *harness_rank_context(const char *list, int rank);

typedef void (*harness_rank_fn)(int rank, struct burst_comm *comm, void *arg);

/* Run fn on `ranks` threads, each with its own communicator of one new world (timeout_ms as
 * given; 0 = default). Returns 0, or -1 when the world/comm/threads could not be set up. */
int harness_run_ranks(int ranks, int timeout_ms, harness_rank_fn fn, void *arg);

/* Can a one-rank communicator join over libfabric's provider prov ("shm", "tcp", ...; a
 * rendezvous of this process, tcp on 127.0.0.1)? 0: yes; 77: the fabric transport or the provider
 * is unavailable here ("SKIP: why" printed); 1: it failed otherwise (the error on stderr). */
int harness_fabric_probe(const char *prov);

/* Milliseconds on a monotonic clock. */
double harness_now_ms(void);

/* Does s contain needle, ignoring case? */
int harness_contains(const char *s, const char *needle);

/* ---- attention cases ---- */

struct harness_case {
    const char *name;
    int ranks;
    int64_t batch, seq_len;
    int q_heads, kv_heads, head_dim;
    burst_dtype_t dtype;
    int causal;
    int64_t window_left, window_right; /* -1 = unbounded (use HW(l, r) below) */
    burst_layout_t layout;
    burst_bwd_pattern_t bwd;
    burst_wire_precision_t wire;
    const int64_t *shard_lens;   /* any layout; NULL = even shards (or shard_weights) */
    const double *shard_weights; /* plan.shard_weights: shards sized by weight (NULL = none) */
    const char *backends;        /* per-rank backends, comma-separated, cycling over the ranks (e.g.
                             "cpu,vulkan"); NULL = the shared context (BURST_TEST_BACKEND) */
    float softmax_scale;         /* 0 = 1/sqrt(d) */
    double amp;                  /* q, k drawn from U(-amp, amp); 0 = 2 (score std ~ 1.3) */
    double grid;                 /* > 0: q, k rounded to multiples of 1/grid, so that scores are
                                  exact in fp32 even when large (tests exp overflow safety
                                  without ill-conditioning the fp32 dot products) */
    int pad;                     /* extra elements between heads in the rank-visible tensors */
    int deterministic;
    int ranks_per_node;       /* two-level ring: L ranks per node (divides ranks); 0 = flat ring */
    uint64_t workspace_limit; /* plan.workspace_limit: 0 = default, small = head groups */
    uint64_t seed;            /* 0 = harness_seed() mixed with the case name */
    const int64_t *doc_lens;  /* plan.doc_lens: packed documents (NULL = one) */
    int64_t num_docs;
    float softcap; /* plan.softcap: 0 = off */
    /* Attention sinks: nonzero runs burst_attention_forward_sinks / backward_sinks with random
     * per-head logits drawn from the case's seed, U(-1, 5) (the scale of a row's lse here, so
     * the sink takes a real share of the softmax), and compares every rank's dsinks with
     * ref_backward_sinks (tolerance: harness_problem_compare). */
    int sinks;
};

enum harness_tensor {
    H_O = 0,
    H_LSE,
    H_DQ,
    H_DK,
    H_DV,
    H_NTENSORS
};

struct harness_err {
    double max_abs;
    double max_rel;
    double worst;     /* max |x - r| / tol */
    int64_t worst_at; /* flat index (natural order) of the worst element */
    int64_t nonfinite;
    int64_t pad_clobbered;
};

struct harness_rank_record {
    burst_status_t st_plan, st_fwd, st_bwd;
    char msg[512]; /* last error of the first failing call */
    int64_t local_len;
    int positions_ok;
    burst_bwd_pattern_t bwd_used;
    int head_groups;    /* burst_plan_head_groups */
    uint64_t workspace; /* burst_plan_workspace_bytes */
    struct burst_phase_stats stats[3];
    struct burst_traffic *step_traffic[3];        /* [stats[phase].steps + 1] */
    double step_compute_sum[3], step_wait_sum[3]; /* burst_plan_step_times summed over steps */
};

struct harness_problem; /* inputs, outputs, reference: opaque */

/* Build the inputs of case c. NULL on allocation failure or an invalid case (message printed). */
struct harness_problem *harness_problem_create(const struct harness_case *c);
void harness_problem_destroy(struct harness_problem *p);
uint64_t harness_problem_seed(const struct harness_problem *p);

/* Poison outputs, run G ranks (forward then backward), unpermute. 0 when every rank's plan,
 * forward and backward returned BURST_OK, else -1 (records say which). */
int harness_problem_run(struct harness_problem *p);
const struct harness_rank_record *harness_problem_record(const struct harness_problem *p, int rank);
/* Natural-order outputs of the last run: O, dQ, dK, dV in the dtype, lse fp32 [B, Hq, N]. */
const void *harness_problem_output(const struct harness_problem *p, enum harness_tensor t,
                                   size_t *bytes_p);
/* "O", "lse", "dQ", "dK", "dV" (for messages). */
const char *harness_tensor_name(enum harness_tensor t);

/* A copy of the outputs of a problem's last run, to compare a later run with bit for bit
 * (deterministic mode). harness_outputs_save returns NULL when out of memory. */
struct harness_outputs;
struct harness_outputs *harness_outputs_save(const struct harness_problem *p);
/* -1 when every output of p's last run equals the saved one bit for bit, else the first tensor
 * (enum harness_tensor) that differs. */
int harness_outputs_diff(const struct harness_outputs *s, const struct harness_problem *p);
void harness_outputs_free(struct harness_outputs *s);

/* Compare the last run with the reference (computed on first use). Fills err[H_NTENSORS];
 * returns 1 when everything is within tolerance. */
int harness_problem_compare(struct harness_problem *p, struct harness_err err[H_NTENSORS]);

/* Print the case, seed and errors (one line per tensor). */
void harness_problem_print(const struct harness_problem *p, const struct harness_err *err,
                           const char *verdict);

/* Create, run, compare, print on failure (always when verbose or BURST_TEST_VERBOSE=1),
 * destroy. 1 = pass. */
int harness_check_case(const struct harness_case *c, int verbose);
/* The cmocka test of one case (state = the case, as harness_run_cases passes it): asserts
 * harness_check_case(case, 0). */
void harness_case_test(void **state);
/* The same for a problem already run (ran: harness_problem_run returned 0): compares, prints
 * as harness_check_case does, destroys p and returns the verdict. */
int harness_problem_verdict(struct harness_problem *p, int ran, int verbose);

/* Describe a case in one line (for messages). */
void harness_case_str(const struct harness_case *c, char *buf, size_t len);

#endif /* BURST_TESTS_HARNESS_H */
