/*
 * tests/test_cuda.c - the cuda backend (cuda/): what the shared harness cannot reach yet.
 *
 *   test_cuda fallback   (suite 'unit', runs on every machine of a cuda build) hides every GPU
 *                        (CUDA_VISIBLE_DEVICES=""): backend "cuda" must fail with
 *                        BURST_ERR_NO_DEVICE and a message, "auto" must fall back to another
 *                        backend, burst_probe must say why cuda is unavailable. Exit 77 in a
 *                        build without the cuda backend.
 *   test_cuda            (suite 'gpu', BURST_TEST_BACKEND=cuda; exit 77 without a GPU):
 *     - harness cases, mostly of one rank, some of 2 or 3 ranks (blocks device to device;
 *       uneven shards among them), for every mask, dtype, GQA ratio and head dims 8..256
 *       against the fp64 reference;
 *     - op level, cuda against the cpu backend on identical inputs: fwd_step and bwd_step with
 *       position maps of two runs and of stride 3, causal, strictly causal (right = -1) and
 *       windowed masks, running (O, lse) that already hold values and rows with no allowed key
 *       (which must stay bit-for-bit unchanged);
 *     - fwd_final / bwd_final (the one-rank forward writing O and lse, the backward dK and dV,
 *       from the kernel) on the same op cases, into poisoned strided outputs: bitwise fwd_step /
 *       bwd_step into fresh accumulators plus the cast, gaps untouched (dQ by atomics: close);
 *       declined (BURST_ERR_UNSUPPORTED) with nothing written where the SIMT kernels run;
 *     - decode_step (one decode step over a paged cache, burst_cuda_decode.cu): fixed and
 *       seeded random cases (dtypes, d 8..256, block_len 1..256 and odd ones, t 1..16, GQA,
 *       soft-cap, strided q) with the sequence's blocks shuffled among poisoned ones, against
 *       the fp64 reference merged into pre-filled accumulators, against fwd_step per block (the
 *       engine's fallback) and its own rerun (bitwise); bad arguments refused naming them,
 *       t past the kernels' limit declined with nothing written;
 *     - bitwise-identical reruns; device out of memory -> BURST_ERR_NO_MEMORY and the context
 *       still works; bad head dim, malformed BURST_CUDA_FP32 -> BURST_ERR_INVALID_ARG naming it.
 *   test_cuda kernels    (suite 'gpu' with BURST_CUDA_MAX_SHARED=101376, the kernels of a
 *                        device with 99 KiB of shared memory per block, and =153600, the
 *                        fallback dK/dV kernel of fp32 classes 128 and 192) the harness cases,
 *                        the reruns and the op-level checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context_internal.h"
#include "harness.h"
#include "ref.h"

#define F32 BURST_DTYPE_FP32
#define F16 BURST_DTYPE_FP16
#define BF16 BURST_DTYPE_BF16

#define CASE(nm, n)                                                                                \
    .name = (nm), .ranks = 1, .batch = 1, .seq_len = (n), .q_heads = 2, .kv_heads = 2,             \
    .head_dim = 64, .dtype = F32, .window_left = -1, .window_right = -1,                           \
    .layout = BURST_LAYOUT_NATURAL, .bwd = BURST_BWD_BURST

/* documents: lengths 1 and 2 among long ones (1100 and 300 tokens) */
static const int64_t cuda_docs[6] = {1, 2, 300, 129, 600, 68};
static const int64_t cuda_docs_short[4] = {2, 1, 150, 147};
/* uneven shards: a step's 800 keys (7 key blocks) against 300 queries (7 query tiles of 48) */
static const int64_t cuda_lens_uneven[2] = {300, 800};

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
#endif
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winitializer-overrides"
#endif
static const struct harness_case cases[] = {
    {CASE("full_fp32_d64", 150)},
    {CASE("causal_fp32_d128", 200), .head_dim = 128, .causal = 1},
    {CASE("causal_window_fp32_d32", 170), .head_dim = 32, .causal = 1, .window_left = 20},
    {CASE("window_both_fp32_d8", 90), .head_dim = 8, .window_left = 6, .window_right = 9},
    {CASE("win_zero_width", 40), .window_left = 0, .window_right = 0},
    {CASE("zigzag_causal_fp32_d24", 66), .head_dim = 24, .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("gqa4_causal_fp32_d40", 100), .q_heads = 8, .kv_heads = 2, .head_dim = 40, .causal = 1},
    {CASE("d256_fp32", 48), .q_heads = 1, .kv_heads = 1, .head_dim = 256, .causal = 1},
    {CASE("d200_bf16", 40), .q_heads = 1, .kv_heads = 1, .head_dim = 200, .dtype = BF16},
    {CASE("d72_fp16_window", 80), .head_dim = 72, .dtype = F16, .window_left = 9,
     .window_right = 4},
    /* the tensor-core forward: fp16 / bf16 with d = 64 and 128 */
    {CASE("mma_bf16_d128_causal", 300), .head_dim = 128, .dtype = BF16, .causal = 1},
    {CASE("mma_fp16_d128_full", 200), .head_dim = 128, .dtype = F16},
    {CASE("mma_bf16_d64_gqa8", 180), .q_heads = 8, .kv_heads = 1, .dtype = BF16, .causal = 1},
    {CASE("mma_fp16_d64_window", 260), .dtype = F16, .window_left = 37, .window_right = 5},
    {CASE("mma_fp16_d128_batch2_pad", 130), .batch = 2, .pad = 8, .head_dim = 128, .dtype = F16,
     .causal = 1},
    {CASE("mma_bf16_d64_zigzag", 128), .dtype = BF16, .causal = 1, .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("mma_large_scores_bf16", 96), .softmax_scale = 1.0f, .amp = 4.0, .grid = 4, .dtype = BF16,
     .causal = 1},
    {CASE("mma_large_scores_fp16_window", 96), .softmax_scale = 1.0f, .amp = 4.0, .grid = 4,
     .dtype = F16, .window_left = 20, .window_right = 3},
    /* long enough for the Hopper forward's 3 stages of 128-key tiles to be refilled (sm_90) */
    {CASE("long_bf16_d128_causal", 1100), .head_dim = 128, .dtype = BF16, .causal = 1},
    {CASE("long_fp16_d64_gqa4", 900), .q_heads = 8, .kv_heads = 2, .dtype = F16},
    {CASE("long_bf16_d128_window", 1200), .head_dim = 128, .dtype = BF16, .window_left = 300,
     .window_right = 50},
    {CASE("long_fp16_d128_zigzag_3ranks", 1536), .ranks = 3, .head_dim = 128, .dtype = F16,
     .causal = 1, .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("uneven_bf16_d128_full_2ranks", 1100), .ranks = 2, .head_dim = 128, .dtype = BF16,
     .shard_lens = cuda_lens_uneven},
    {CASE("long_bf16_d32_gqa2_window", 1000), .q_heads = 4, .kv_heads = 2, .head_dim = 32,
     .dtype = BF16, .window_left = 700, .window_right = 30},
    /* every head-dim class of the tensor-core kernels (32, 64, 96, 128, 192, 256) and d just past
     * a class boundary (40, 72, 136, 200) or inside one (24, 80, 88, 160, 248), where the class's
     * columns past d must be neither read nor written (poisoned padding between heads) */
    {CASE("cls_fp16_d32_zigzag", 300), .head_dim = 32, .dtype = F16, .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("cls_bf16_d24_full", 170), .head_dim = 24, .dtype = BF16},
    {CASE("cls_bf16_d40_causal_pad", 260), .head_dim = 40, .dtype = BF16, .causal = 1, .pad = 8},
    {CASE("cls_fp16_d72_gqa4", 200), .q_heads = 8, .kv_heads = 2, .head_dim = 72, .dtype = F16,
     .causal = 1},
    {CASE("cls_bf16_d80_full", 230), .head_dim = 80, .dtype = BF16},
    {CASE("cls_fp16_d88_window", 250), .head_dim = 88, .dtype = F16, .window_left = 40,
     .window_right = 7},
    {CASE("cls_bf16_d96_causal", 520), .head_dim = 96, .dtype = BF16, .causal = 1},
    {CASE("cls_fp16_d136_causal_pad", 210), .head_dim = 136, .dtype = F16, .causal = 1, .pad = 8},
    {CASE("cls_bf16_d160_gqa2", 200), .q_heads = 4, .kv_heads = 2, .head_dim = 160, .dtype = BF16,
     .causal = 1},
    {CASE("cls_fp16_d192_full", 330), .head_dim = 192, .dtype = F16},
    {CASE("cls_bf16_d200_window", 180), .head_dim = 200, .dtype = BF16, .window_left = 50,
     .window_right = 20},
    {CASE("cls_fp16_d248_causal", 200), .head_dim = 248, .dtype = F16, .causal = 1},
    {CASE("cls_bf16_d256_causal_long", 700), .q_heads = 1, .kv_heads = 1, .head_dim = 256,
     .dtype = BF16, .causal = 1},
    /* deterministic plans: dK/dV without dQ, then the dQ kernel */
    {CASE("det_cls_fp16_d192_causal", 330), .head_dim = 192, .dtype = F16, .causal = 1,
     .deterministic = 1},
    {CASE("det_cls_bf16_d72_gqa2", 200), .q_heads = 4, .kv_heads = 2, .head_dim = 72, .dtype = BF16,
     .deterministic = 1},
    {CASE("cls_fp16_d256_large_scores", 96), .softmax_scale = 1.0f, .amp = 4.0, .grid = 4,
     .head_dim = 256, .dtype = F16, .causal = 1},
    /* fp32 on the tensor cores (3xTF32): every head-dim class, the boundaries, several key
     * tiles, masks, GQA, large scores (where the score term of the bound is widest) */
    {CASE("tf32_d24_causal", 190), .head_dim = 24, .causal = 1},
    {CASE("tf32_d72_gqa4_causal", 300), .q_heads = 8, .kv_heads = 2, .head_dim = 72, .causal = 1},
    {CASE("tf32_d96_window", 260), .head_dim = 96, .window_left = 50, .window_right = 9},
    {CASE("tf32_d136_causal_pad", 210), .head_dim = 136, .causal = 1, .pad = 8},
    {CASE("tf32_d160_full", 150), .q_heads = 1, .kv_heads = 1, .head_dim = 160},
    {CASE("tf32_d192_causal", 230), .q_heads = 1, .kv_heads = 1, .head_dim = 192, .causal = 1},
    {CASE("tf32_d200_zigzag", 128), .q_heads = 1, .kv_heads = 1, .head_dim = 200, .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("tf32_d176_gqa2_window", 160), .q_heads = 4, .kv_heads = 2, .head_dim = 176,
     .window_left = 40, .window_right = 40},
    {CASE("tf32_d248_window", 140), .q_heads = 1, .kv_heads = 1, .head_dim = 248, .window_left = 30,
     .window_right = 30},
    {CASE("tf32_d128_long_causal_2ranks", 700), .ranks = 2, .head_dim = 128, .causal = 1},
    {CASE("tf32_d120_gqa2_window", 260), .q_heads = 4, .kv_heads = 2, .head_dim = 120,
     .window_left = 70, .window_right = 5},
    {CASE("tf32_d64_large_scores", 96), .softmax_scale = 1.0f, .amp = 4.0, .grid = 4, .causal = 1},
    {CASE("one_token", 1), .causal = 1},
    {CASE("tiny_scale", 40), .softmax_scale = 1e-3f},
    /* packed documents and soft-capping through the plan, on the tensor-core kernels of both
     * generations (long enough for several key tiles), the SIMT ones and 3xTF32 */
    {CASE("docs_bf16_d128_causal", 1100), .head_dim = 128, .dtype = BF16, .causal = 1,
     .doc_lens = cuda_docs, .num_docs = 6},
    {CASE("docs_fp16_d64_window_gqa4", 1100), .q_heads = 8, .kv_heads = 2, .dtype = F16,
     .window_left = 90, .window_right = 20, .doc_lens = cuda_docs, .num_docs = 6},
    {CASE("docs_bf16_d200_causal", 1100), .head_dim = 200, .dtype = BF16, .causal = 1,
     .doc_lens = cuda_docs, .num_docs = 6},
    {CASE("zigzag_fp16_d160_2ranks", 640), .ranks = 2, .head_dim = 160, .dtype = F16, .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("docs_softcap_bf16_d96_2ranks", 1100), .ranks = 2, .head_dim = 96, .dtype = BF16,
     .causal = 1, .doc_lens = cuda_docs, .num_docs = 6, .softcap = 5.0f},
    {CASE("softcap_bf16_d128_large_scores", 700), .head_dim = 128, .dtype = BF16, .causal = 1,
     .amp = 4.0, .softcap = 30.0f},
    {CASE("softcap_fp16_d256", 300), .q_heads = 1, .kv_heads = 1, .head_dim = 256, .dtype = F16,
     .causal = 1, .amp = 4.0, .softcap = 10.0f},
    {CASE("softcap_tf32_d72_docs", 300), .head_dim = 72, .softcap = 3.0f, .amp = 3.0,
     .doc_lens = cuda_docs_short, .num_docs = 4},
};
/* rerun bitwise */
static const struct harness_case det[] = {
    {CASE("det_bf16_d128", 200), .head_dim = 128, .dtype = BF16, .causal = 1, .deterministic = 1},
    {CASE("det_fp16_d256", 150), .q_heads = 2, .kv_heads = 1, .head_dim = 256, .dtype = F16,
     .window_left = 40, .deterministic = 1},
    {CASE("det_fp32_gqa", 150), .q_heads = 4, .kv_heads = 1, .window_left = 30, .deterministic = 1},
    {CASE("det_fp32_d128", 150), .head_dim = 128, .causal = 1, .deterministic = 1},
};
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

static void test_case(void **state)
{
    const struct harness_case *c = *state;
    assert_true(harness_check_case(c, 0));
}

/* ---- bitwise reruns ---- */

static void test_reruns(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof det / sizeof *det; i++) {
        struct harness_problem *p = harness_problem_create(&det[i]);
        assert_non_null(p);
        void *first[H_NTENSORS];
        size_t bytes[H_NTENSORS];
        assert_int_equal(harness_problem_run(p), 0);
        for (int t = 0; t < H_NTENSORS; t++) {
            const void *x = harness_problem_output(p, (enum harness_tensor)t, &bytes[t]);
            first[t] = malloc(bytes[t]);
            assert_non_null(first[t]);
            memcpy(first[t], x, bytes[t]);
        }
        for (int run = 1; run < 3; run++) {
            assert_int_equal(harness_problem_run(p), 0);
            for (int t = 0; t < H_NTENSORS; t++) {
                size_t b;
                const void *x = harness_problem_output(p, (enum harness_tensor)t, &b);
                if (b != bytes[t] || memcmp(x, first[t], b) != 0)
                    fail_msg("%s: run %d: tensor %d differs bitwise", det[i].name, run, t);
            }
        }
        for (int t = 0; t < H_NTENSORS; t++)
            free(first[t]);
        harness_problem_destroy(p);
    }
}

/* ---- op level: cuda against cpu ---- */

struct op_case {
    const char *name;
    burst_dtype_t dt;
    int d, hq, hkv;
    int64_t nq, nk;
    struct burst_posmap qpos, kpos;
    struct burst_mask mask;
    float softcap;   /* 0 = off */
    int heads_major; /* the device's q, k, v, dO laid out [H, n, d] (row stride d, head n d) */
};

#define INF BURST_POS_INF
/* seven documents over positions 0..299: lengths 1, 2, 17, 36, 100, 4, 140 */
static const int64_t op_docs[8] = {0, 1, 3, 20, 56, 156, 160, 300};
static const struct op_case op_cases[] = {
    /* zigzag-like two runs for q, one run for k, strictly causal */
    {"two_runs_strict_fp32",
     F32,
     32,
     2,
     1,
     70,
     90,
     {2, {{0, 35, 0, 1}, {35, 35, 200, 1}}},
     {1, {{0, 90, 20, 1}}},
     {INF, -1, NULL, 0, NULL},
     0.0f,
     0},
    {"stride3_causal_bf16",
     BF16,
     128,
     4,
     2,
     130,
     100,
     {1, {{0, 130, 1, 3}}},
     {1, {{0, 100, 0, 3}}},
     {INF, 0, NULL, 0, NULL},
     0.0f,
     0},
    {"stride3_strict_fp16_d64",
     F16,
     64,
     2,
     2,
     150,
     150,
     {1, {{0, 150, 2, 3}}},
     {1, {{0, 150, 2, 3}}},
     {INF, -1, NULL, 0, NULL},
     0.0f,
     0},
    {"window_two_runs_bf16_d64",
     BF16,
     64,
     2,
     1,
     200,
     120,
     {2, {{0, 100, 0, 1}, {100, 100, 500, 1}}},
     {1, {{0, 120, 60, 1}}},
     {40, 3, NULL, 0, NULL},
     0.0f,
     0},
    /* causal, the keys after most queries: the first 128-row tile sees no key at all (a block
     * of the forward that returns before its tile loop) */
    {"late_keys_causal_bf16_d128",
     BF16,
     128,
     2,
     2,
     300,
     100,
     {1, {{0, 300, 0, 1}}},
     {1, {{0, 100, 250, 1}}},
     {INF, 0, NULL, 0, NULL},
     0.0f,
     0},
    /* causal, the keys after every query: key tiles that no query sees (a block of the dK/dV
     * kernel that returns before its loop) */
    {"early_queries_causal_fp16_d64",
     F16,
     64,
     4,
     2,
     100,
     300,
     {1, {{0, 100, 0, 1}}},
     {1, {{0, 300, 0, 1}}},
     {INF, 0, NULL, 0, NULL},
     0.0f,
     0},
    /* classes other than 64 / 128, with d inside the class: the padding columns stay untouched */
    {"stride3_causal_bf16_d40",
     BF16,
     40,
     4,
     2,
     170,
     140,
     {1, {{0, 170, 1, 3}}},
     {1, {{0, 140, 0, 3}}},
     {INF, 0, NULL, 0, NULL},
     0.0f,
     0},
    {"two_runs_window_fp16_d200",
     F16,
     200,
     2,
     1,
     150,
     130,
     {2, {{0, 75, 0, 1}, {75, 75, 300, 1}}},
     {1, {{0, 130, 40, 1}}},
     {60, 5, NULL, 0, NULL},
     0.0f,
     0},
    {"late_keys_causal_bf16_d96",
     BF16,
     96,
     2,
     2,
     300,
     100,
     {1, {{0, 300, 0, 1}}},
     {1, {{0, 100, 250, 1}}},
     {INF, 0, NULL, 0, NULL},
     0.0f,
     0},
    {"window_fp32_d136",
     F32,
     136,
     1,
     1,
     50,
     70,
     {1, {{0, 50, 30, 1}}},
     {1, {{0, 70, 0, 1}}},
     {10, 10, NULL, 0, NULL},
     0.0f,
     0},
    /* packed documents (lengths 1, 2 and longer; boundaries inside both runs of q and inside a
     * tile) and soft-capped scores, on every kernel family */
    {"docs_two_runs_causal_bf16",
     BF16,
     64,
     2,
     1,
     70,
     90,
     {2, {{0, 35, 0, 1}, {35, 35, 200, 1}}},
     {1, {{0, 90, 20, 1}}},
     {INF, 0, op_docs, 7, NULL},
     0.0f,
     0},
    {"docs_softcap_window_fp16_d128",
     F16,
     128,
     2,
     2,
     70,
     90,
     {2, {{0, 35, 0, 1}, {35, 35, 200, 1}}},
     {1, {{0, 90, 20, 1}}},
     {60, 8, op_docs, 7, NULL},
     5.0f,
     0},
    {"softcap_causal_bf16_d96",
     BF16,
     96,
     4,
     2,
     100,
     130,
     {1, {{0, 100, 30, 1}}},
     {1, {{0, 130, 0, 1}}},
     {INF, 0, NULL, 0, NULL},
     2.0f,
     0},
    {"softcap_docs_stride3_fp32_d32",
     F32,
     32,
     2,
     1,
     100,
     100,
     {1, {{0, 100, 1, 3}}},
     {1, {{0, 100, 0, 3}}},
     {INF, 0, op_docs, 7, NULL},
     3.0f,
     0},
    {"softcap_full_fp16_d256",
     F16,
     256,
     1,
     1,
     60,
     80,
     {1, {{0, 60, 0, 1}}},
     {1, {{0, 80, 0, 1}}},
     {INF, INF, NULL, 0, NULL},
     30.0f,
     0},
    /* tensors laid out head by head, as PyTorch's [B, H, n, d] (the Hopper forward's tensor
     * maps order the dimensions by stride) */
    {"heads_major_causal_bf16_d128",
     BF16,
     128,
     4,
     2,
     300,
     280,
     {1, {{0, 300, 0, 1}}},
     {1, {{0, 280, 20, 1}}},
     {INF, 0, NULL, 0, NULL},
     0.0f,
     1},
    {"heads_major_window_fp16_d64",
     F16,
     64,
     6,
     3,
     260,
     260,
     {1, {{0, 260, 0, 1}}},
     {1, {{0, 260, 0, 1}}},
     {50, 9, NULL, 0, NULL},
     0.0f,
     1},
};

/* The case's mask with its document table in device memory (a plan keeps one; here one copy
 * per context, kept for the process). */
static struct burst_mask op_mask(struct burst_context *ctx, const struct op_case *c)
{
    static struct burst_context *owner;
    static void *dev;
    struct burst_mask m = c->mask;
    if (m.docs && ctx != owner) {
        dev = NULL;
        assert_int_equal(burst_context_alloc(ctx, sizeof op_docs, &dev), BURST_OK);
        assert_int_equal(burst_context_memcpy(ctx, dev, op_docs, sizeof op_docs), BURST_OK);
        owner = ctx;
    }
    if (m.docs)
        m.docs_dev = dev;
    return m;
}

static float op_rand(uint64_t *st)
{
    return (float)harness_rng_uniform(st, -1.0, 1.0);
}

/* A [1, n, H, d] tensor of dtype dt with random (rounded) values, host and device copies; with
 * hmaj the device copy is laid out head by head ([H, n, d] in memory). */
struct op_tensor {
    struct burst_tensor host, dev;
    size_t bytes;
};

static void op_tensor_make(struct burst_context *ctx, struct op_tensor *t, burst_dtype_t dt,
                           int64_t n, int64_t h, int64_t d, uint64_t *st, double amp, int hmaj)
{
    size_t count = (size_t)(n * h * d), es = burst_dtype_size(dt);
    t->bytes = count * es;
    unsigned char *hp = malloc(t->bytes), *up = hmaj ? malloc(t->bytes) : hp;
    void *dp = NULL;
    assert_true(hp && up);
    for (size_t i = 0; i < count; i++)
        harness_store(dt, hp, i, amp * op_rand(st));
    for (int64_t i = 0; hmaj && i < n; i++)
        for (int64_t hh = 0; hh < h; hh++)
            memcpy(up + (size_t)((hh * n + i) * d) * es, hp + (size_t)((i * h + hh) * d) * es,
                   (size_t)d * es);
    assert_int_equal(burst_context_alloc(ctx, t->bytes, &dp), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, dp, up, t->bytes), BURST_OK);
    if (up != hp)
        free(up);
    t->host = burst_tensor_contiguous(hp, dt, 1, n, h, d);
    t->dev = burst_tensor_contiguous(dp, dt, 1, n, h, d);
    if (hmaj) {
        t->dev.stride[1] = d;
        t->dev.stride[2] = n * d;
    }
}

static float *op_upload(struct burst_context *ctx, const float *h, size_t count)
{
    void *d = NULL;
    assert_int_equal(burst_context_alloc(ctx, count * 4, &d), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, d, h, count * 4), BURST_OK);
    return d;
}

static void op_download(struct burst_context *ctx, float *h, const float *d, size_t count)
{
    assert_int_equal(burst_context_memcpy(ctx, h, d, count * 4), BURST_OK);
}

static double op_max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m)
            m = fabs(x[i]);
    return m;
}

/* |a - b| <= tol * max|b| elementwise, infinities equal. */
static int op_close(const char *what, const float *a, const float *b, size_t n, double tol)
{
    double s = op_max_abs(b, n), worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) {
            if (a[i] != b[i]) {
                printf("    %s[%zu]: cuda %g cpu %g\n", what, i, (double)a[i], (double)b[i]);
                return 0;
            }
            continue;
        }
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > worst) {
            worst = e;
            at = i;
        }
    }
    if (worst > tol * (s > 0 ? s : 1)) {
        printf("    %s: max |cuda - cpu| = %g at %zu (cuda %g cpu %g), max |cpu| = %g, tol %g\n",
               what, worst, at, (double)a[at], (double)b[at], s, tol);
        return 0;
    }
    return 1;
}

static void test_ops(void **state)
{
    (void)state;
    struct burst_context *ctx = harness_context();
    assert_non_null(ctx);
    const struct burst_backend_ops *cu = ctx->ops, *cpu = &burst_cpu_backend_ops;
    void *cpu_be = NULL;
    assert_int_equal(cpu->core.create(NULL, &cpu_be), BURST_OK);
    int failed = 0;
    for (size_t ci = 0; ci < sizeof op_cases / sizeof *op_cases; ci++) {
        const struct op_case *c = &op_cases[ci];
        uint64_t st = harness_seed() ^ (0x9e37u * (ci + 1));
        struct op_tensor q, k, v, dout;
        op_tensor_make(ctx, &q, c->dt, c->nq, c->hq, c->d, &st, 2.0, c->heads_major);
        op_tensor_make(ctx, &k, c->dt, c->nk, c->hkv, c->d, &st, 2.0, c->heads_major);
        op_tensor_make(ctx, &v, c->dt, c->nk, c->hkv, c->d, &st, 1.0, c->heads_major);
        op_tensor_make(ctx, &dout, c->dt, c->nq, c->hq, c->d, &st, 1.0, c->heads_major);
        const size_t no = (size_t)(c->nq * c->hq * c->d), nl = (size_t)(c->nq * c->hq);
        const size_t nkv = (size_t)(c->nk * c->hkv * c->d);
        /* running values: some rows already merged, some empty (-inf) */
        float *o0 = malloc(no * 4), *l0 = malloc(nl * 4), *o1 = malloc(no * 4),
              *l1 = malloc(nl * 4);
        float *o2 = malloc(no * 4), *l2 = malloc(nl * 4);
        assert_true(o0 && l0 && o1 && l1 && o2 && l2);
        for (size_t i = 0; i < nl; i++)
            l0[i] = i % 3 == 0 ? -INFINITY : op_rand(&st);
        for (size_t e = 0; e < no; e++) { /* o is [nq, hq, d], lse [hq, nq] */
            size_t i = e / (size_t)(c->d * c->hq), h = e / (size_t)c->d % (size_t)c->hq;
            o0[e] = l0[h * (size_t)c->nq + i] == -INFINITY ? 0.0f : op_rand(&st);
        }
        memcpy(o1, o0, no * 4);
        memcpy(l1, l0, nl * 4);
        float *od = op_upload(ctx, o0, no), *ld = op_upload(ctx, l0, nl);
        struct burst_fwd_args fa = {.q = &q.host,
                                    .k = &k.host,
                                    .v = &v.host,
                                    .qpos = c->qpos,
                                    .kpos = c->kpos,
                                    .mask = op_mask(ctx, c),
                                    .scale = 0.3f,
                                    .softcap = c->softcap,
                                    .o_acc = o1,
                                    .lse_acc = l1};
        assert_int_equal(cpu->attn.fwd_step(cpu_be, &fa), BURST_OK);
        fa.q = &q.dev, fa.k = &k.dev, fa.v = &v.dev, fa.o_acc = od, fa.lse_acc = ld;
        assert_int_equal(cu->attn.fwd_step(ctx->be, &fa), BURST_OK);
        assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
        op_download(ctx, o2, od, no);
        op_download(ctx, l2, ld, nl);
        const double tol = c->dt == F32 ? 2e-5 : c->dt == F16 ? 4e-3 : 2e-2;
        int ok = op_close("O", o2, o1, no, tol) && op_close("lse", l2, l1, nl, 2e-5);
        /* rows the cpu left untouched (no allowed key) must be untouched bit for bit */
        for (size_t r = 0; ok && r < nl; r++) {
            size_t h = r / (size_t)c->nq, i = r % (size_t)c->nq;
            size_t orow = (i * (size_t)c->hq + h) * (size_t)c->d;
            if (memcmp(&l1[r], &l0[r], 4) == 0 &&
                (memcmp(&l2[r], &l0[r], 4) != 0 ||
                 memcmp(o2 + orow, o0 + orow, (size_t)c->d * 4) != 0)) {
                printf("    row %zu of head %zu has no allowed key but was changed\n", i, h);
                ok = 0;
            }
        }

        /* backward with the merged lse as the "final" lse and a random D */
        float *dl = malloc(nl * 4), *g0 = calloc(no + 2 * nkv, 4), *g1 = malloc((no + 2 * nkv) * 4);
        assert_true(dl && g0 && g1);
        for (size_t i = 0; i < nl; i++)
            dl[i] = 0.5f * op_rand(&st);
        for (size_t i = 0; i < no + 2 * nkv; i++)
            g0[i] = op_rand(&st); /* the accumulators already hold something */
        memcpy(g1, g0, (no + 2 * nkv) * 4);
        float *lsed = op_upload(ctx, l1, nl), *dld = op_upload(ctx, dl, nl);
        float *gd = op_upload(ctx, g0, no + 2 * nkv);
        struct burst_bwd_args ba = {.q = &q.host,
                                    .k = &k.host,
                                    .v = &v.host,
                                    .dout = &dout.host,
                                    .lse = l1,
                                    .delta = dl,
                                    .qpos = c->qpos,
                                    .kpos = c->kpos,
                                    .mask = op_mask(ctx, c),
                                    .scale = 0.3f,
                                    .softcap = c->softcap,
                                    .dq = g1,
                                    .dk = g1 + no,
                                    .dv = g1 + no + nkv};
        assert_int_equal(cpu->attn.bwd_step(cpu_be, &ba), BURST_OK);
        ba.q = &q.dev, ba.k = &k.dev, ba.v = &v.dev, ba.dout = &dout.dev, ba.lse = lsed;
        ba.delta = dld, ba.dq = gd, ba.dk = gd + no, ba.dv = gd + no + nkv;
        assert_int_equal(cu->attn.bwd_step(ctx->be, &ba), BURST_OK);
        assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
        float *g2 = malloc((no + 2 * nkv) * 4);
        assert_non_null(g2);
        op_download(ctx, g2, gd, no + 2 * nkv);
        const double btol = tol; /* tensor cores round P and dS like the forward rounds P */
        ok = ok && op_close("dQ", g2, g1, no, btol) &&
             op_close("dK", g2 + no, g1 + no, nkv, btol) &&
             op_close("dV", g2 + no + nkv, g1 + no + nkv, nkv, btol);
        printf("[%s] %s\n", ok ? "ok" : "FAIL", c->name);
        failed += !ok;

        burst_context_free(ctx, od);
        burst_context_free(ctx, ld);
        burst_context_free(ctx, lsed);
        burst_context_free(ctx, dld);
        burst_context_free(ctx, gd);
        struct op_tensor *ts[] = {&q, &k, &v, &dout};
        for (int i = 0; i < 4; i++) {
            free(ts[i]->host.data);
            burst_context_free(ctx, ts[i]->dev.data);
        }
        free(o0), free(l0), free(o1), free(l1), free(o2), free(l2), free(dl), free(g0), free(g1),
            free(g2);
    }
    cpu->core.destroy(cpu_be);
    assert_int_equal(failed, 0);
}

/* ---- fwd_final: the one-step forward writing O and lse itself ---- */

/* A [1, n, H, d] view of dt with padding between heads and rows (a caller's strided output). */
static struct burst_tensor final_view(void *data, burst_dtype_t dt, int64_t n, int64_t h, int64_t d)
{
    struct burst_tensor t = burst_tensor_contiguous(data, dt, 1, n, h, d);
    t.stride[2] = d + 4;
    t.stride[1] = h * (d + 4) + 8;
    t.stride[0] = n * t.stride[1];
    return t;
}

/* Does the backend decline fwd_final / bwd_final for case c (the SIMT kernels: forced by
 * BURST_CUDA_KERNEL=simt, or for fp32 by BURST_CUDA_FP32=simt; no tensor-core kernel)? */
static int final_declined(const struct op_case *c)
{
    const char *e = getenv("BURST_CUDA_KERNEL"), *f = getenv("BURST_CUDA_FP32");
    return (e && strcmp(e, "simt") == 0) || (c->dt == F32 && f && strcmp(f, "simt") == 0);
}

/* bwd_final of op case c into poisoned strided dK, dV: bitwise what bwd_step into
 * zeroed accumulators plus the cast give, gaps untouched, dQ (added into its fp32 accumulator)
 * bitwise too in a deterministic plan and close with dQ by atomics; where it is declined
 * (final_declined), BURST_ERR_UNSUPPORTED with dK, dV and dQ untouched. 1 = as expected. */
static int check_bwd_final(struct burst_context *ctx, const struct op_case *c,
                           const struct op_tensor *q, const struct op_tensor *k,
                           const struct op_tensor *v, const float *lse, uint64_t *st)
{
    const struct burst_backend_ops *cu = ctx->ops;
    struct op_tensor dout;
    op_tensor_make(ctx, &dout, c->dt, c->nq, c->hq, c->d, st, 1.0, c->heads_major);
    const size_t es = burst_dtype_size(c->dt), nl = (size_t)(c->nq * c->hq);
    const size_t nqe = (size_t)(c->nq * c->hq * c->d), nke = (size_t)(c->nk * c->hkv * c->d);
    const struct burst_tensor shape = final_view(NULL, c->dt, c->nk, c->hkv, c->d);
    const size_t kbytes = (size_t)shape.stride[0] * es;
    float *dl = malloc(nl * 4), *zeros = calloc(nqe + 2 * nke, 4), *dqw = malloc(nqe * 4),
          *dqg = malloc(nqe * 4);
    unsigned char *poison = malloc(kbytes), *want[2], *got[2];
    assert_true(dl && zeros && dqw && dqg && poison);
    memset(poison, 0x7d, kbytes);
    for (size_t i = 0; i < nl; i++)
        dl[i] = 0.5f * op_rand(st);
    float *lsed = op_upload(ctx, lse, nl), *dld = op_upload(ctx, dl, nl);
    void *wd[2], *gd[2];
    for (int t = 0; t < 2; t++) {
        want[t] = malloc(kbytes);
        got[t] = malloc(kbytes);
        assert_true(want[t] && got[t]);
        assert_int_equal(burst_context_alloc(ctx, kbytes, &wd[t]), BURST_OK);
        assert_int_equal(burst_context_alloc(ctx, kbytes, &gd[t]), BURST_OK);
    }
    int ok = 1;
    for (int determ = 1; determ >= 0; determ--) {
        float *acc = op_upload(ctx, zeros, nqe + 2 * nke), *dq2 = op_upload(ctx, zeros, nqe);
        struct burst_tensor w[2], g[2];
        for (int t = 0; t < 2; t++) {
            assert_int_equal(burst_context_memcpy(ctx, wd[t], poison, kbytes), BURST_OK);
            assert_int_equal(burst_context_memcpy(ctx, gd[t], poison, kbytes), BURST_OK);
            w[t] = final_view(wd[t], c->dt, c->nk, c->hkv, c->d);
            g[t] = final_view(gd[t], c->dt, c->nk, c->hkv, c->d);
        }
        struct burst_bwd_args ba = {.q = &q->dev,
                                    .k = &k->dev,
                                    .v = &v->dev,
                                    .dout = &dout.dev,
                                    .lse = lsed,
                                    .delta = dld,
                                    .qpos = c->qpos,
                                    .kpos = c->kpos,
                                    .mask = op_mask(ctx, c),
                                    .scale = 0.3f,
                                    .softcap = c->softcap,
                                    .dq = acc,
                                    .dk = acc + nqe,
                                    .dv = acc + nqe + nke,
                                    .deterministic = determ};
        if (final_declined(c)) {
            ba.dq = dq2;
            ba.dk = ba.dv = NULL;
            burst_status_t r = cu->attn.bwd_final(ctx->be, &ba, &g[0], &g[1]);
            assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
            op_download(ctx, dqg, dq2, nqe);
            assert_int_equal(burst_context_memcpy(ctx, got[0], gd[0], kbytes), BURST_OK);
            assert_int_equal(burst_context_memcpy(ctx, got[1], gd[1], kbytes), BURST_OK);
            int good = r == BURST_ERR_UNSUPPORTED && memcmp(got[0], poison, kbytes) == 0 &&
                       memcmp(got[1], poison, kbytes) == 0 && memcmp(dqg, zeros, nqe * 4) == 0;
            printf("[%s] bwd_final %s declined (status %d)\n", good ? "ok" : "FAIL", c->name,
                   (int)r);
            ok = ok && good;
            burst_context_free(ctx, acc);
            burst_context_free(ctx, dq2);
            break;
        }
        assert_int_equal(cu->attn.bwd_step(ctx->be, &ba), BURST_OK);
        struct burst_tensor ak = burst_tensor_contiguous(acc + nqe, F32, 1, c->nk, c->hkv, c->d);
        struct burst_tensor av =
            burst_tensor_contiguous(acc + nqe + nke, F32, 1, c->nk, c->hkv, c->d);
        assert_int_equal(cu->elem.copy(ctx->be, &w[0], &ak), BURST_OK);
        assert_int_equal(cu->elem.copy(ctx->be, &w[1], &av), BURST_OK);
        ba.dq = dq2;
        ba.dk = ba.dv = NULL;
        burst_status_t r = cu->attn.bwd_final(ctx->be, &ba, &g[0], &g[1]);
        assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
        op_download(ctx, dqw, acc, nqe);
        op_download(ctx, dqg, dq2, nqe);
        for (int t = 0; t < 2; t++) {
            assert_int_equal(burst_context_memcpy(ctx, want[t], wd[t], kbytes), BURST_OK);
            assert_int_equal(burst_context_memcpy(ctx, got[t], gd[t], kbytes), BURST_OK);
        }
        int good = r == BURST_OK && memcmp(got[0], want[0], kbytes) == 0 &&
                   memcmp(got[1], want[1], kbytes) == 0 && memcmp(got[0], poison, kbytes) != 0;
        good = good && (determ ? memcmp(dqg, dqw, nqe * 4) == 0
                               : op_close("dQ", dqg, dqw, nqe, c->dt == F16 ? 4e-3 : 2e-2));
        for (size_t e = 0; good && e < kbytes / es; e++) { /* gaps: still poison */
            int64_t j = (int64_t)e / shape.stride[1], rem = (int64_t)e % shape.stride[1];
            int64_t hh = rem / shape.stride[2], col = rem % shape.stride[2];
            if ((j >= c->nk || hh >= c->hkv || col >= c->d) &&
                (memcmp(got[0] + e * es, poison, es) != 0 ||
                 memcmp(got[1] + e * es, poison, es) != 0))
                good = 0;
        }
        printf("[%s] bwd_final %s, %s (status %d)\n", good ? "ok" : "FAIL", c->name,
               determ ? "deterministic" : "dQ by atomics", (int)r);
        ok = ok && good;
        burst_context_free(ctx, acc);
        burst_context_free(ctx, dq2);
    }
    for (int t = 0; t < 2; t++) {
        burst_context_free(ctx, wd[t]);
        burst_context_free(ctx, gd[t]);
        free(want[t]), free(got[t]);
    }
    burst_context_free(ctx, lsed);
    burst_context_free(ctx, dld);
    free(dout.host.data);
    burst_context_free(ctx, dout.dev.data);
    free(dl), free(zeros), free(dqw), free(dqg), free(poison);
    return ok;
}

/* For every op case: fwd_final into a poisoned strided O (and lse) gives bitwise what fwd_step
 * into fresh accumulators (0, -inf) plus the cast kernel give, gaps and rows with no allowed
 * key included; where the SIMT kernels run it is declined with BURST_ERR_UNSUPPORTED and
 * nothing written. */
static void test_final(void **state)
{
    (void)state;
    struct burst_context *ctx = harness_context();
    assert_non_null(ctx);
    const struct burst_backend_ops *cu = ctx->ops;
    assert_non_null(cu->attn.fwd_final);
    int failed = 0, ran = 0;
    for (size_t ci = 0; ci < sizeof op_cases / sizeof *op_cases; ci++) {
        const struct op_case *c = &op_cases[ci];
        uint64_t st = harness_seed() ^ (0x51u * (ci + 1));
        struct op_tensor q, k, v;
        op_tensor_make(ctx, &q, c->dt, c->nq, c->hq, c->d, &st, 2.0, c->heads_major);
        op_tensor_make(ctx, &k, c->dt, c->nk, c->hkv, c->d, &st, 2.0, c->heads_major);
        op_tensor_make(ctx, &v, c->dt, c->nk, c->hkv, c->d, &st, 1.0, c->heads_major);
        const size_t es = burst_dtype_size(c->dt), nl = (size_t)(c->nq * c->hq);
        const size_t no = (size_t)(c->nq * c->hq * c->d);
        struct burst_tensor shape = final_view(NULL, c->dt, c->nq, c->hq, c->d);
        const size_t obytes = (size_t)shape.stride[0] * es;
        unsigned char *poison = malloc(obytes), *got = malloc(obytes), *want = malloc(obytes);
        float *lpoison = malloc(nl * 4), *lgot = malloc(nl * 4), *lwant = malloc(nl * 4);
        float *o0 = calloc(no, 4), *l0 = malloc(nl * 4);
        assert_true(poison && got && want && lpoison && lgot && lwant && o0 && l0);
        memset(poison, 0x7d, obytes);
        memset(lpoison, 0xff, nl * 4); /* NaN bits */
        for (size_t i = 0; i < nl; i++)
            l0[i] = -INFINITY;
        void *od = NULL, *wd = NULL;
        assert_int_equal(burst_context_alloc(ctx, obytes, &od), BURST_OK);
        assert_int_equal(burst_context_alloc(ctx, obytes, &wd), BURST_OK);
        assert_int_equal(burst_context_memcpy(ctx, od, poison, obytes), BURST_OK);
        assert_int_equal(burst_context_memcpy(ctx, wd, poison, obytes), BURST_OK);
        float *ld = op_upload(ctx, lpoison, nl), *oacc = op_upload(ctx, o0, no),
              *lacc = op_upload(ctx, l0, nl);
        struct burst_tensor o = final_view(od, c->dt, c->nq, c->hq, c->d);
        struct burst_tensor w = final_view(wd, c->dt, c->nq, c->hq, c->d);
        struct burst_fwd_args fa = {.q = &q.dev,
                                    .k = &k.dev,
                                    .v = &v.dev,
                                    .qpos = c->qpos,
                                    .kpos = c->kpos,
                                    .mask = op_mask(ctx, c),
                                    .scale = 0.3f,
                                    .softcap = c->softcap};
        burst_status_t r = cu->attn.fwd_final(ctx->be, &fa, &o, ld);
        assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
        assert_int_equal(burst_context_memcpy(ctx, got, od, obytes), BURST_OK);
        op_download(ctx, lgot, ld, nl);
        int ok;
        if (final_declined(c)) { /* no tensor-core forward: declined, untouched */
            ok = r == BURST_ERR_UNSUPPORTED && memcmp(got, poison, obytes) == 0 &&
                 memcmp(lgot, lpoison, nl * 4) == 0;
        } else {
            ran++;
            fa.o_acc = oacc;
            fa.lse_acc = lacc;
            struct burst_tensor oa = burst_tensor_contiguous(oacc, F32, 1, c->nq, c->hq, c->d);
            assert_int_equal(cu->attn.fwd_step(ctx->be, &fa), BURST_OK);
            assert_int_equal(cu->elem.copy(ctx->be, &w, &oa), BURST_OK);
            assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
            assert_int_equal(burst_context_memcpy(ctx, want, wd, obytes), BURST_OK);
            op_download(ctx, lwant, lacc, nl);
            ok =
                r == BURST_OK && memcmp(got, want, obytes) == 0 && memcmp(lgot, lwant, nl * 4) == 0;
            /* the gaps between heads and rows are the caller's: still poison */
            for (size_t e = 0; ok && e < obytes / es; e++) {
                int64_t i = (int64_t)e / shape.stride[1], rem = (int64_t)e % shape.stride[1];
                int64_t hh = rem / shape.stride[2], col = rem % shape.stride[2];
                if ((i >= c->nq || hh >= c->hq || col >= c->d) &&
                    memcmp(got + e * es, poison, es) != 0)
                    ok = 0;
            }
        }
        printf("[%s] fwd_final %s (status %d)\n", ok ? "ok" : "FAIL", c->name, (int)r);
        failed += !ok;
        /* lse: the forward's (or, declined, the poison: never read then); D: random */
        failed += !check_bwd_final(ctx, c, &q, &k, &v, final_declined(c) ? lpoison : lgot, &st);
        burst_context_free(ctx, od);
        burst_context_free(ctx, wd);
        burst_context_free(ctx, ld);
        burst_context_free(ctx, oacc);
        burst_context_free(ctx, lacc);
        struct op_tensor *ts[] = {&q, &k, &v};
        for (int i = 0; i < 3; i++) {
            free(ts[i]->host.data);
            burst_context_free(ctx, ts[i]->dev.data);
        }
        free(poison), free(got), free(want), free(lpoison), free(lgot), free(lwant), free(o0),
            free(l0);
    }
    const char *e = getenv("BURST_CUDA_KERNEL");
    assert_true(ran >= 4 || (e && strcmp(e, "simt") == 0));
    assert_int_equal(failed, 0);
}

/* ---- decode_step: one decode step over a paged key/value cache ---- */

/* One decode case: t queries of one sequence (positions tail + i) against nkeys cached keys in
 * blocks of block_len rows, stored in a pool in shuffled order. */
struct dec_case {
    const char *name;
    burst_dtype_t dt;
    int d, hq, hkv, t;
    int64_t block_len, nkeys, tail;
    float softcap;
    int q_padded; /* q with gaps between heads and rows (strided view) */
};

/* The fixed cases: the model shape of the speed goal, every block_len kind (a multiple of the
 * 64-key tile, smaller, odd, one), many splits of several tiles (nkeys 12000), 4 row chunks
 * (t = 16, group 4), keys no query sees (tail < nkeys - t), none of the new tokens here
 * (tail == nkeys), soft-capping, head dims inside a class (80, 200) and d = 8. */
static const struct dec_case dec_fixed[] = {
    {"gqa32_8_bf16_d128_t1", BF16, 128, 32, 8, 1, 256, 5000, 4999, 0.0f, 0},
    {"bf16_d128_bl256_many_splits", BF16, 128, 8, 2, 1, 256, 12000, 11999, 0.0f, 0},
    {"fp16_d64_bl16_t4", F16, 64, 8, 2, 4, 16, 3001, 2998, 0.0f, 1},
    {"fp32_d256_bl48_t3", F32, 256, 8, 2, 3, 48, 1500, 1497, 0.0f, 0},
    {"bf16_d80_bl1_t2", BF16, 80, 8, 2, 2, 1, 300, 299, 0.0f, 0},
    {"fp16_d128_bl7_t16_chunks", F16, 128, 8, 2, 16, 7, 2000, 1984, 0.0f, 1},
    {"bf16_d256_t16_all_cached", BF16, 256, 8, 2, 16, 64, 1000, 1000, 0.0f, 0},
    {"fp32_d128_unseen_keys", F32, 128, 8, 2, 2, 64, 900, 890, 0.0f, 0},
    {"bf16_d200_softcap", BF16, 200, 8, 2, 5, 48, 1234, 1231, 5.0f, 0},
    {"fp16_d8_one_key", F16, 8, 8, 2, 1, 16, 1, 0, 0.0f, 0},
    {"fp32_d64_softcap_t8", F32, 64, 8, 2, 8, 256, 777, 770, 2.0f, 1},
    {"bf16_d128_no_keys", BF16, 128, 8, 2, 1, 64, 0, 0, 0.0f, 0},
    /* few keys, each weighing much in the softmax: a key too many or too few under the causal
     * mask among the new tokens moves O well past the tolerance */
    {"bf16_d64_few_keys_t4", BF16, 64, 8, 2, 4, 16, 5, 1, 0.0f, 0},
    {"fp16_d128_17_keys_t16", F16, 128, 8, 2, 16, 16, 17, 1, 0.0f, 1},
    {"fp32_d80_70_keys_t16_bl48", F32, 80, 8, 2, 16, 48, 70, 54, 0.0f, 0},
    {"bf16_d256_tile_edge_t3", BF16, 256, 8, 2, 3, 64, 130, 127, 0.0f, 0},
    /* 8 and 6 rows of one 16-row chunk (group 8, t = 1; group 2, t = 3); a soft-cap at t = 2 */
    {"bf16_d128_group8_t1", BF16, 128, 16, 2, 1, 16, 2500, 2499, 0.0f, 0},
    {"bf16_d96_group2_t3", BF16, 96, 4, 2, 3, 48, 1000, 997, 0.0f, 1},
    {"fp16_d64_softcap_t2", F16, 64, 8, 2, 2, 64, 900, 898, 3.0f, 1},
};
#define DEC_RANDOM 24

/* Case k of the random ones: GQA 4:1, dtype, d in {64, 80, 128, 256}, block_len in {16, 64,
 * 256, 48}, t in [1, 16], nkeys in [2, 4000] log-uniform, tail leaving 0..t new tokens here. */
static struct dec_case dec_random(int k, uint64_t *st)
{
    static const burst_dtype_t dts[3] = {BF16, F16, F32};
    static const int ds[4] = {64, 80, 128, 256};
    static const int64_t bls[4] = {16, 64, 256, 48};
    struct dec_case c = {"random", dts[k % 3], ds[(k / 3) % 4], 8, 2, 1, bls[k % 4], 1, 0, 0, 0};
    c.t = 1 + (int)(harness_rng_next(st) % 16);
    c.nkeys = 1 + (int64_t)exp(harness_rng_uniform(st, 0.0, log(4000.0))); /* log-uniform */
    int64_t fresh = (int64_t)(harness_rng_next(st) % (uint64_t)(c.t + 1));
    c.tail = c.nkeys - (fresh < c.nkeys ? fresh : c.nkeys);
    c.softcap = k % 5 == 4 ? 4.0f : 0.0f;
    c.q_padded = k % 2;
    return c;
}

/* A decode problem on the device and its fp64 expectation. */
struct dec_problem {
    struct dec_case c;
    size_t es, kv_row, nrows, no; /* element size, elements per key row, t * hq rows, O elements */
    int64_t nblocks, pool_blocks;
    int32_t *table;              /* pool index of each block, host */
    void *kpool, *vpool, *qhost; /* host */
    struct burst_tensor q;       /* device view */
    void *kdev, *vdev, *tdev;
    float *o0, *l0;  /* the accumulators before the step (host) */
    double *ow, *lw; /* expected after it */
    double *of, *lf; /* expected from fresh accumulators: the step's own result */
};

/* Key j of the sequence, element (g, c), from the host pool as a double. */
static double dec_kv(const struct dec_problem *p, const void *pool, int64_t j, int g, int c)
{
    const int64_t slot =
        (int64_t)p->table[j / p->c.block_len] * p->c.block_len + j % p->c.block_len;
    return harness_load(p->c.dt, pool, (size_t)(slot * (int64_t)p->kv_row + g * p->c.d + c));
}

/* The fp64 reference of every row (tools/ref.c: causal attention over keys 0..nkeys-1 of the
 * query at position tail + i, which sees the same keys as one at min(tail + i, nkeys - 1)),
 * merged into the accumulators o0, l0 with the log-sum-exp merge. */
static void dec_expect(struct dec_problem *p)
{
    const struct dec_case *c = &p->c;
    const int64_t n = c->nkeys;
    const size_t hd = (size_t)c->hq * c->d;
    p->ow = malloc(p->no * sizeof(double));
    p->lw = malloc(p->nrows * sizeof(double));
    assert_true(p->ow && p->lw);
    for (size_t e = 0; e < p->no; e++)
        p->ow[e] = p->o0[e];
    for (size_t r = 0; r < p->nrows; r++)
        p->lw[r] = p->l0[r];
    if (n == 0)
        return;
    double *k = malloc((size_t)n * c->hkv * c->d * sizeof(double));
    double *v = malloc((size_t)n * c->hkv * c->d * sizeof(double));
    double *q = calloc((size_t)n * hd, sizeof(double));
    double *o = malloc(hd * sizeof(double)), *lse = malloc((size_t)c->hq * sizeof(double));
    assert_true(k && v && q && o && lse);
    for (int64_t j = 0; j < n; j++)
        for (int g = 0; g < c->hkv; g++)
            for (int cc = 0; cc < c->d; cc++) {
                const size_t e = ((size_t)j * c->hkv + g) * c->d + cc;
                k[e] = dec_kv(p, p->kpool, j, g, cc);
                v[e] = dec_kv(p, p->vpool, j, g, cc);
            }
    const struct ref_problem rp = {.batch = 1,
                                   .seq_len = n,
                                   .q_heads = c->hq,
                                   .kv_heads = c->hkv,
                                   .head_dim = c->d,
                                   .scale = 2.0 / sqrt((double)c->d),
                                   .causal = 1,
                                   .window_left = -1,
                                   .window_right = -1,
                                   .softcap = c->softcap};
    for (int i = 0; i < c->t; i++) {
        const int64_t pos = c->tail + i < n - 1 ? c->tail + i : n - 1;
        for (int h = 0; h < c->hq; h++)
            for (int cc = 0; cc < c->d; cc++)
                q[(size_t)pos * hd + (size_t)h * c->d + cc] = harness_load(
                    c->dt, p->qhost, (size_t)(i * p->q.stride[1] + h * p->q.stride[2] + cc));
        ref_forward_rows(&rp, q, k, v, &pos, 1, o, lse);
        memset(q + (size_t)pos * hd, 0, hd * sizeof(double));
        for (int h = 0; h < c->hq; h++) {
            const size_t r = (size_t)h * c->t + i, orow = ((size_t)i * c->hq + h) * c->d;
            const double lo = p->lw[r], lr = lse[h];
            const double ln = lo == -INFINITY ? lr : fmax(lo, lr) + log1p(exp(-fabs(lo - lr)));
            const double co = lo == -INFINITY ? 0.0 : exp(lo - ln), cn = exp(lr - ln);
            for (int cc = 0; cc < c->d; cc++)
                p->ow[orow + cc] = co * p->ow[orow + cc] + cn * o[(size_t)h * c->d + cc];
            p->lw[r] = ln;
        }
    }
    free(k), free(v), free(q), free(o), free(lse);
}

/* Build case c: random q, K, V rounded to the dtype; the pool holds the sequence's blocks in a
 * shuffled order among 3 more blocks, every unused row (other blocks, the last block's rows
 * past nkeys) poisoned, so a kernel reading outside the sequence's rows fails; accumulators
 * with a third of the rows empty (lse -inf, o garbage that must be overwritten) and the rest
 * near the new part's lse, so that both parts of the merge count. */
static void dec_make(struct burst_context *ctx, struct dec_problem *p, const struct dec_case *c,
                     uint64_t *st)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    p->es = burst_dtype_size(c->dt);
    p->kv_row = (size_t)c->hkv * c->d;
    p->nrows = (size_t)c->t * c->hq;
    p->no = p->nrows * c->d;
    p->nblocks = (c->nkeys + c->block_len - 1) / c->block_len;
    p->pool_blocks = p->nblocks + 3;
    const size_t pool_el = (size_t)p->pool_blocks * c->block_len * p->kv_row;
    p->table = malloc((size_t)(p->nblocks + 1) * sizeof(int32_t));
    p->kpool = malloc(pool_el * p->es);
    p->vpool = malloc(pool_el * p->es);
    int32_t *perm = malloc((size_t)p->pool_blocks * sizeof(int32_t));
    assert_true(p->table && p->kpool && p->vpool && perm);
    for (int64_t b = 0; b < p->pool_blocks; b++)
        perm[b] = (int32_t)b;
    for (int64_t b = p->pool_blocks - 1; b > 0; b--) { /* Fisher-Yates */
        const int64_t o = (int64_t)(harness_rng_next(st) % (uint64_t)(b + 1));
        const int32_t x = perm[b];
        perm[b] = perm[o];
        perm[o] = x;
    }
    memcpy(p->table, perm, (size_t)p->nblocks * sizeof(int32_t));
    free(perm);
    harness_poison(c->dt, p->kpool, pool_el);
    harness_poison(c->dt, p->vpool, pool_el);
    for (int64_t j = 0; j < c->nkeys; j++) {
        const int64_t slot = (int64_t)p->table[j / c->block_len] * c->block_len + j % c->block_len;
        for (size_t e = 0; e < p->kv_row; e++) {
            harness_store(c->dt, p->kpool, (size_t)slot * p->kv_row + e,
                          harness_rng_uniform(st, -2.0, 2.0));
            harness_store(c->dt, p->vpool, (size_t)slot * p->kv_row + e,
                          harness_rng_uniform(st, -1.0, 1.0));
        }
    }
    /* q: [1, t, hq, d], padded between heads and rows when asked (poison in the gaps) */
    struct burst_tensor qv = burst_tensor_contiguous(NULL, c->dt, 1, c->t, c->hq, c->d);
    if (c->q_padded) {
        qv.stride[2] = c->d + 8;
        qv.stride[1] = c->hq * qv.stride[2] + 16;
        qv.stride[0] = c->t * qv.stride[1];
    }
    const size_t qel = (size_t)qv.stride[0];
    p->qhost = malloc(qel * p->es);
    assert_non_null(p->qhost);
    harness_poison(c->dt, p->qhost, qel);
    for (int i = 0; i < c->t; i++)
        for (int h = 0; h < c->hq; h++)
            for (int cc = 0; cc < c->d; cc++)
                harness_store(c->dt, p->qhost, (size_t)(i * qv.stride[1] + h * qv.stride[2] + cc),
                              harness_rng_uniform(st, -2.0, 2.0));
    void *qd = NULL;
    assert_int_equal(burst_context_alloc(ctx, qel * p->es, &qd), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, qd, p->qhost, qel * p->es), BURST_OK);
    p->q = qv;
    p->q.data = qd;
    assert_int_equal(burst_context_alloc(ctx, pool_el * p->es, &p->kdev), BURST_OK);
    assert_int_equal(burst_context_alloc(ctx, pool_el * p->es, &p->vdev), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, p->kdev, p->kpool, pool_el * p->es), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, p->vdev, p->vpool, pool_el * p->es), BURST_OK);
    p->tdev = NULL;
    assert_int_equal(burst_context_alloc(ctx, (size_t)(p->nblocks + 1) * 4, &p->tdev), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, p->tdev, p->table, (size_t)p->nblocks * 4),
                     BURST_OK);
    /* accumulators: lse [hq, t], o [t, hq, d] */
    p->o0 = malloc(p->no * 4);
    p->l0 = malloc(p->nrows * 4);
    assert_true(p->o0 && p->l0);
    for (size_t e = 0; e < p->no; e++)
        p->o0[e] = (float)harness_rng_uniform(st, -1.0, 1.0);
    for (size_t r = 0; r < p->nrows; r++)
        p->l0[r] = r % 3 == 0 ? -INFINITY : 0.0f;
    /* finite rows: near the new part's lse (the reference of the rows against fresh
     * accumulators), so that neither part of the merge is negligible */
    float *lkeep = malloc(p->nrows * 4);
    assert_non_null(lkeep);
    memcpy(lkeep, p->l0, p->nrows * 4);
    for (size_t r = 0; r < p->nrows; r++)
        p->l0[r] = -INFINITY;
    dec_expect(p);
    for (size_t r = 0; r < p->nrows; r++)
        p->l0[r] = lkeep[r] == -INFINITY ? -INFINITY
                                         : (float)(p->lw[r] + harness_rng_uniform(st, -1.5, 1.5));
    free(lkeep);
    p->of = p->ow;
    p->lf = p->lw;
    dec_expect(p);
}

static void dec_free(struct burst_context *ctx, struct dec_problem *p)
{
    burst_context_free(ctx, p->q.data);
    burst_context_free(ctx, p->kdev);
    burst_context_free(ctx, p->vdev);
    burst_context_free(ctx, p->tdev);
    free(p->table), free(p->kpool), free(p->vpool), free(p->qhost), free(p->o0), free(p->l0),
        free(p->ow), free(p->lw), free(p->of), free(p->lf);
}

static struct burst_decode_args dec_args(const struct dec_problem *p, float *o_acc, float *lse_acc)
{
    struct burst_decode_args a = {.q = &p->q,
                                  .k_pool = p->kdev,
                                  .v_pool = p->vdev,
                                  .block_len = p->c.block_len,
                                  .hkv = p->c.hkv,
                                  .blocks = p->tdev,
                                  .blocks_host = p->table,
                                  .nkeys = p->c.nkeys,
                                  .tail = p->c.tail,
                                  .scale = (float)(2.0 / sqrt((double)p->c.d)),
                                  .softcap = p->c.softcap,
                                  .o_acc = o_acc,
                                  .lse_acc = lse_acc};
    return a;
}

/* Run the step on the device from the accumulators (o0, l0), either decode_step or (per_block)
 * the engine's fallback: one fwd_step per cache block, kpos = the block's key indices, qpos =
 * tail + i, causal. Results to o, l. The accumulators sit before 64 poisoned floats each, which
 * must stay poison. 1 = ran and the guards held. */
static int dec_run(struct burst_context *ctx, const struct dec_problem *p, int per_block, float *o,
                   float *l, burst_status_t *st_p)
{
    const struct burst_backend_ops *cu = ctx->ops;
    const size_t guard = 64;
    float *oh = malloc((p->no + guard) * 4), *lh = malloc((p->nrows + guard) * 4);
    assert_true(oh && lh);
    memcpy(oh, p->o0, p->no * 4);
    memcpy(lh, p->l0, p->nrows * 4);
    harness_poison(F32, oh + p->no, guard);
    harness_poison(F32, lh + p->nrows, guard);
    float *od = op_upload(ctx, oh, p->no + guard), *ld = op_upload(ctx, lh, p->nrows + guard);
    burst_status_t st = BURST_OK;
    if (!per_block) {
        struct burst_decode_args a = dec_args(p, od, ld);
        st = cu->attn.decode_step(ctx->be, &a);
    } else {
        const struct dec_case *c = &p->c;
        for (int64_t b = 0; b < p->nblocks && st == BURST_OK; b++) {
            const int64_t j0 = b * c->block_len;
            const int64_t rows = c->nkeys - j0 < c->block_len ? c->nkeys - j0 : c->block_len;
            const size_t off = (size_t)p->table[b] * c->block_len * p->kv_row * p->es;
            struct burst_tensor k =
                burst_tensor_contiguous((char *)p->kdev + off, c->dt, 1, rows, c->hkv, c->d);
            struct burst_tensor v =
                burst_tensor_contiguous((char *)p->vdev + off, c->dt, 1, rows, c->hkv, c->d);
            struct burst_fwd_args fa = {.q = &p->q,
                                        .k = &k,
                                        .v = &v,
                                        .qpos = {1, {{0, c->t, c->tail, 1}}},
                                        .kpos = {1, {{0, rows, j0, 1}}},
                                        .mask = {INF, 0, NULL, 0, NULL},
                                        .scale = (float)(2.0 / sqrt((double)c->d)),
                                        .softcap = c->softcap,
                                        .o_acc = od,
                                        .lse_acc = ld};
            st = cu->attn.fwd_step(ctx->be, &fa);
        }
    }
    *st_p = st;
    assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
    op_download(ctx, oh, od, p->no + guard);
    op_download(ctx, lh, ld, p->nrows + guard);
    int ok = 1;
    for (size_t e = 0; e < guard; e++)
        ok =
            ok && harness_is_poison(F32, oh + p->no, e) && harness_is_poison(F32, lh + p->nrows, e);
    if (!ok)
        printf("    %s wrote past the accumulators\n", per_block ? "fwd_step" : "decode_step");
    memcpy(o, oh, p->no * 4);
    memcpy(l, lh, p->nrows * 4);
    burst_context_free(ctx, od);
    burst_context_free(ctx, ld);
    free(oh), free(lh);
    return ok;
}

/* The step writing its result directly (o_out in the dtype with gaps between heads and rows,
 * lse_out, both poisoned with a guard after them; no accumulators): o (as floats) and l. 1 = ran
 * and every gap and guard element is still poison. */
static int dec_run_out(struct burst_context *ctx, const struct dec_problem *p, float *o, float *l,
                       burst_status_t *st_p)
{
    const struct dec_case *c = &p->c;
    const size_t guard = 64;
    struct burst_tensor ov = burst_tensor_contiguous(NULL, c->dt, 1, c->t, c->hq, c->d);
    ov.stride[2] = c->d + 8;
    ov.stride[1] = c->hq * ov.stride[2] + 8;
    ov.stride[0] = c->t * ov.stride[1];
    const size_t oel = (size_t)ov.stride[0] + guard;
    void *oh = malloc(oel * p->es);
    float *lh = malloc((p->nrows + guard) * 4);
    assert_true(oh && lh);
    harness_poison(c->dt, oh, oel);
    harness_poison(F32, lh, p->nrows + guard);
    void *od = NULL;
    assert_int_equal(burst_context_alloc(ctx, oel * p->es, &od), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, od, oh, oel * p->es), BURST_OK);
    float *ld = op_upload(ctx, lh, p->nrows + guard);
    ov.data = od;
    struct burst_decode_args a = dec_args(p, NULL, NULL);
    a.o_out = &ov;
    a.lse_out = ld;
    *st_p = ctx->ops->attn.decode_step(ctx->be, &a);
    assert_int_equal(ctx->ops->stream.sync(ctx->be), BURST_OK);
    assert_int_equal(burst_context_memcpy(ctx, oh, od, oel * p->es), BURST_OK);
    op_download(ctx, lh, ld, p->nrows + guard);
    size_t written = 0;
    for (int i = 0; i < c->t; i++)
        for (int h = 0; h < c->hq; h++)
            for (int cc = 0; cc < c->d; cc++) {
                const size_t e = (size_t)(i * ov.stride[1] + h * ov.stride[2] + cc);
                o[((size_t)i * c->hq + h) * c->d + cc] = (float)harness_load(c->dt, oh, e);
                written += !harness_is_poison(c->dt, oh, e);
            }
    size_t untouched = 0;
    for (size_t e = 0; e < oel; e++)
        untouched += harness_is_poison(c->dt, oh, e);
    for (size_t e = 0; e < guard; e++)
        untouched -= !harness_is_poison(F32, lh + p->nrows, e);
    memcpy(l, lh, p->nrows * 4);
    const int ok = written == p->no && untouched == oel - p->no;
    if (!ok)
        printf("    decode_step o_out: %zu of %zu outputs written, a gap or guard written\n",
               written, p->no);
    burst_context_free(ctx, od);
    burst_context_free(ctx, ld);
    free(oh), free(lh);
    return ok;
}

/* got against the fp64 expectation: |O - O_ref| <= otol (V is in [-1, 1]), |lse - lse_ref| <=
 * ltol; rows the expectation leaves unchanged (no key) bit for bit. */
static int dec_close(const char *what, const struct dec_problem *p, const float *o, const float *l,
                     double otol, double ltol)
{
    double eo = 0, el = 0;
    size_t ao = 0, al = 0;
    for (size_t e = 0; e < p->no; e++) {
        const double x = fabs((double)o[e] - p->ow[e]);
        if (!(x <= eo)) {
            eo = x;
            ao = e;
        }
    }
    for (size_t r = 0; r < p->nrows; r++) {
        const double x = p->lw[r] == -INFINITY ? (l[r] == -INFINITY ? 0.0 : INFINITY)
                                               : fabs((double)l[r] - p->lw[r]);
        if (!(x <= el)) {
            el = x;
            al = r;
        }
    }
    int ok = eo <= otol && el <= ltol;
    if (p->c.nkeys == 0) /* nothing to attend: bitwise untouched */
        ok = ok && memcmp(o, p->o0, p->no * 4) == 0 && memcmp(l, p->l0, p->nrows * 4) == 0;
    if (!ok || getenv("BURST_TEST_VERBOSE"))
        printf("    %s: max |O - ref| = %.3g at %zu (tol %.3g), max |lse - ref| = %.3g at %zu "
               "(tol %.3g)\n",
               what, eo, ao, otol, el, al, ltol);
    return ok;
}

/* One case: decode_step against fp64 (merged into pre-filled accumulators), against the
 * per-block fwd_step fallback, and bitwise against its own rerun. Tolerances: the kernels round
 * P to the 16-bit input dtype for P V (relative error u per probability, u = 2^-8 bf16, 2^-11
 * fp16), so |O - O_ref| <= u max|V| = u; fp32 runs 3xTF32 (about 2^-21 per product) and fp32
 * sums over a few thousand keys: 3e-5. lse uses the unrounded fp32 probabilities: 2e-4 (fp32
 * sums and ex2.approx over up to 12000 keys); the fallback's lse 5e-4, as it rounds the running
 * lse to fp32 once per block (300 blocks at block_len 1). Between decode_step and the fallback,
 * whose roundings differ, the sums of the two. */
static int dec_check(struct burst_context *ctx, const struct dec_case *c, uint64_t *st)
{
    struct dec_problem p;
    dec_make(ctx, &p, c, st);
    const double u = c->dt == F32 ? 0.0 : harness_unit_roundoff(c->dt);
    const double otol = c->dt == F32 ? 3e-5 : 2.0 * u, ltol = 2e-4;
    float *o1 = malloc(p.no * 4), *l1 = malloc(p.nrows * 4);
    float *o2 = malloc(p.no * 4), *l2 = malloc(p.nrows * 4);
    float *o3 = malloc(p.no * 4), *l3 = malloc(p.nrows * 4);
    assert_true(o1 && l1 && o2 && l2 && o3 && l3);
    burst_status_t s1, s2, s3;
    int ok = dec_run(ctx, &p, 0, o1, l1, &s1) && s1 == BURST_OK;
    ok = ok && dec_close("decode_step", &p, o1, l1, otol, ltol);
    ok = ok && dec_run(ctx, &p, 0, o3, l3, &s3) && s3 == BURST_OK &&
         memcmp(o1, o3, p.no * 4) == 0 && memcmp(l1, l3, p.nrows * 4) == 0;
    const double ltol_fb = 5e-4;
    int fb = dec_run(ctx, &p, 1, o2, l2, &s2) && s2 == BURST_OK &&
             dec_close("fwd_step per block", &p, o2, l2, otol, ltol_fb);
    /* decode_step against the fallback directly */
    for (size_t e = 0; fb && e < p.no; e++)
        fb = fabs((double)o1[e] - (double)o2[e]) <= 2 * otol;
    for (size_t r = 0; fb && r < p.nrows; r++)
        fb = l1[r] == l2[r] || fabs((double)l1[r] - (double)l2[r]) <= ltol + ltol_fb;
    /* the result written directly (a call over every key): the fresh expectation, plus the
     * rounding of O to the dtype (u |O| <= u); no key is refused */
    burst_status_t s4;
    const int direct = dec_run_out(ctx, &p, o3, l3, &s4);
    if (c->nkeys == 0) {
        ok = ok && s4 == BURST_ERR_INVALID_ARG;
    } else {
        double *ow = p.ow, *lw = p.lw;
        p.ow = p.of, p.lw = p.lf;
        ok = ok && direct && s4 == BURST_OK && dec_close("o_out", &p, o3, l3, otol + u, ltol);
        p.ow = ow, p.lw = lw;
    }
    printf("[%s] decode %s: %s t=%d hq=%d hkv=%d d=%d block_len=%lld nkeys=%lld tail=%lld%s%s "
           "(status %d)%s\n",
           ok && fb ? "ok" : "FAIL", c->name,
           c->dt == F32   ? "fp32"
           : c->dt == F16 ? "fp16"
                          : "bf16",
           c->t, c->hq, c->hkv, c->d, (long long)c->block_len, (long long)c->nkeys,
           (long long)c->tail, c->softcap > 0 ? " softcap" : "", c->q_padded ? " q padded" : "",
           (int)s1, fb ? "" : ": differs from fwd_step per block");
    dec_free(ctx, &p);
    free(o1), free(l1), free(o2), free(l2), free(o3), free(l3);
    return ok && fb;
}

/* The fixed cases (random = 0) or DEC_RANDOM random ones. */
static void dec_cases(int random)
{
    struct burst_context *ctx = harness_context();
    assert_non_null(ctx);
    assert_true(BURST_OPS_HAS(ctx->ops, attn.decode_step));
    const char *e = getenv("BURST_CUDA_KERNEL");
    if (e && strcmp(e, "simt") == 0) { /* no tensor cores: declined, the engine falls back */
        printf("BURST_CUDA_KERNEL=simt: decode_step declines; skipped\n");
        return;
    }
    uint64_t st = harness_seed() ^ (random ? 0x7a2d0u : 0xdec0deu);
    int failed = 0;
    if (!random)
        for (size_t i = 0; i < sizeof dec_fixed / sizeof *dec_fixed; i++)
            failed += !dec_check(ctx, &dec_fixed[i], &st);
    for (int k = 0; random && k < DEC_RANDOM; k++) {
        const struct dec_case c = dec_random(k, &st);
        failed += !dec_check(ctx, &c, &st);
    }
    assert_int_equal(failed, 0);
}

static void test_decode(void **state)
{
    (void)state;
    dec_cases(0);
}

static void test_decode_random(void **state)
{
    (void)state;
    dec_cases(1);
}

/* Bad arguments: BURST_ERR_INVALID_ARG naming the argument and its value; more queries than the
 * kernels take: BURST_ERR_UNSUPPORTED with nothing written. */
static void test_decode_bad(void **state)
{
    (void)state;
    struct burst_context *ctx = harness_context();
    const struct burst_backend_ops *cu = ctx->ops;
    uint64_t st = harness_seed() ^ 0xbadu;
    const struct dec_case c = {"bad", BF16, 64, 8, 2, 65, 16, 40, 40, 0.0f, 0};
    struct dec_problem p;
    dec_make(ctx, &p, &c, &st);
    float *od = op_upload(ctx, p.o0, p.no), *ld = op_upload(ctx, p.l0, p.nrows);
    struct burst_decode_args a = dec_args(&p, od, ld);
    assert_int_equal(cu->attn.decode_step(ctx->be, &a), BURST_ERR_UNSUPPORTED); /* t = 65 */
    float *o = malloc(p.no * 4), *l = malloc(p.nrows * 4);
    assert_true(o && l);
    assert_int_equal(cu->stream.sync(ctx->be), BURST_OK);
    op_download(ctx, o, od, p.no);
    op_download(ctx, l, ld, p.nrows);
    assert_memory_equal(o, p.o0, p.no * 4);
    assert_memory_equal(l, p.l0, p.nrows * 4);
    struct {
        const char *msg;
        int what;
    } bad[] = {{"hkv = 3", 0},        {"block_len = 0", 1},        {"tail = 41", 2},
               {"head dim = 264", 3}, {"o_acc is NULL", 4},        {"blocks_host[1] = -5", 5},
               {"scale = -1", 6},     {"softcap = -2", 7},         {"q->shape = [2", 8},
               {"o_out's dtype", 9},  {"o_out->shape[3] = 32", 10}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct burst_decode_args b = a;
        struct burst_tensor q = p.q, ob = p.q; /* refused before anything is written */
        int32_t table[3] = {0, -5, 1};
        b.q = &q;
        switch (bad[i].what) {
        case 0: b.hkv = 3; break;
        case 1: b.block_len = 0; break;
        case 2: b.tail = 41; break;
        case 3: q.shape[3] = 264; break;
        case 4: b.o_acc = NULL; break;
        case 5: b.blocks_host = table; break;
        case 6: b.scale = -1.0f; break;
        case 7: b.softcap = -2.0f; break;
        case 9: ob.dtype = F32, b.o_out = &ob; break;
        case 10: ob.shape[3] = 32, b.o_out = &ob; break;
        default: q.shape[0] = 2; break;
        }
        burst_status_t r = cu->attn.decode_step(ctx->be, &b);
        printf("bad %s: %s: %s\n", bad[i].msg, burst_status_str(r), burst_last_error());
        assert_int_equal(r, BURST_ERR_INVALID_ARG);
        assert_true(harness_contains(burst_last_error(), bad[i].msg));
    }
    burst_context_free(ctx, od);
    burst_context_free(ctx, ld);
    free(o), free(l);
    dec_free(ctx, &p);
}

/* ---- bad input ---- */

/* One rank: a forward whose q is plain host memory (arg != NULL) is refused, naming q and the
 * remedy; with q in device memory (arg == NULL) it runs. A refused call fails the communicator
 * (its peers must not wait for it), so the two are separate rings. 1 = as expected. */
static int g_host_q_result[2] = {-1, -1};

static void host_q_rank(int rank, struct burst_comm *comm, void *arg)
{
    (void)rank;
    int host_q = arg != NULL;
    struct burst_context *ctx = harness_context();
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = 64;
    pp.q_heads = pp.kv_heads = 1;
    pp.head_dim = 64;
    pp.dtype = F16;
    struct burst_plan *plan = NULL;
    size_t bytes = 64 * 64 * 2;
    uint16_t *host = calloc(1, bytes);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL;
    int ok = host && burst_plan_create(ctx, comm, &pp, &plan) == BURST_OK &&
             burst_context_alloc(ctx, bytes, &dq) == BURST_OK &&
             burst_context_alloc(ctx, bytes, &dk) == BURST_OK &&
             burst_context_alloc(ctx, bytes, &dv) == BURST_OK &&
             burst_context_alloc(ctx, bytes, &dout) == BURST_OK &&
             burst_context_alloc(ctx, 64 * sizeof(float), &dlse) == BURST_OK;
    if (ok) {
        struct burst_tensor q = burst_tensor_contiguous(host_q ? (void *)host : dq, F16, 1, 64, 1,
                                                        64),
                            k = burst_tensor_contiguous(dk, F16, 1, 64, 1, 64),
                            v = burst_tensor_contiguous(dv, F16, 1, 64, 1, 64),
                            o = burst_tensor_contiguous(dout, F16, 1, 64, 1, 64);
        burst_status_t st = burst_attention_forward(plan, &q, &k, &v, &o, dlse);
        printf("q in %s memory: %s: %s\n", host_q ? "host" : "device", burst_status_str(st),
               burst_last_error());
        ok = host_q ? st == BURST_ERR_INVALID_ARG && harness_contains(burst_last_error(), "q (") &&
                          harness_contains(burst_last_error(), "burst_context_alloc")
                    : st == BURST_OK;
    }
    g_host_q_result[host_q] = ok;
    burst_plan_destroy(plan);
    burst_context_free(ctx, dq);
    burst_context_free(ctx, dk);
    burst_context_free(ctx, dv);
    burst_context_free(ctx, dout);
    burst_context_free(ctx, dlse);
    free(host);
}

static void test_oom_and_bad_input(void **state)
{
    (void)state;
    struct burst_context *ctx = harness_context();
    void *p = NULL;
    /* 1 PiB: more than any GPU; must fail cleanly and leave the context usable */
    assert_int_equal(burst_context_alloc(ctx, (size_t)1 << 50, &p), BURST_ERR_NO_MEMORY);
    assert_null(p);
    assert_true(harness_contains(burst_last_error(), "could not allocate"));
    assert_int_equal(burst_context_alloc(ctx, 1 << 20, &p), BURST_OK);
    burst_context_free(ctx, p);
    /* a head dim the kernels do not have */
    uint16_t dummy[8];
    struct burst_tensor t = burst_tensor_contiguous(dummy, F16, 1, 1, 1, 264);
    float o[1], l[1];
    struct burst_fwd_args fa = {.q = &t, .k = &t, .v = &t, .scale = 1.0f, .o_acc = o, .lse_acc = l};
    fa.qpos.nruns = fa.kpos.nruns = 1;
    fa.mask.left = fa.mask.right = INF;
    assert_int_equal(ctx->ops->attn.fwd_step(ctx->be, &fa), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "head dim = 264"));
    /* tensors in plain host memory */
    assert_int_equal(burst_context_device_memory(ctx), 1);
    static int host = 1;
    assert_int_equal(harness_run_ranks(1, 60000, host_q_rank, &host), 0);
    assert_int_equal(g_host_q_result[1], 1);
    assert_int_equal(harness_run_ranks(1, 60000, host_q_rank, NULL), 0); /* context still usable */
    assert_int_equal(g_host_q_result[0], 1);
    /* a malformed BURST_CUDA_FP32 fails the create naming it; "simt" and unset are accepted */
    const char *keep = getenv("BURST_CUDA_FP32");
    char *saved = keep ? strdup(keep) : NULL;
    struct burst_context_params cp = burst_context_params_default();
    struct burst_context *c2 = NULL;
    cp.backend = "cuda";
    setenv("BURST_CUDA_FP32", "SIMT", 1);
    assert_int_equal(burst_context_create(&cp, &c2), BURST_ERR_INVALID_ARG);
    assert_null(c2);
    assert_true(harness_contains(burst_last_error(), "BURST_CUDA_FP32 = \"SIMT\""));
    setenv("BURST_CUDA_FP32", "simt", 1);
    assert_int_equal(burst_context_create(&cp, &c2), BURST_OK);
    burst_context_destroy(c2);
    if (saved)
        setenv("BURST_CUDA_FP32", saved, 1);
    else
        unsetenv("BURST_CUDA_FP32");
    free(saved);
}

/* ---- no device: fallback ---- */

static int fallback(void)
{
#ifndef BURST_HAVE_CUDA
    printf("this build has no cuda backend: SKIP\n");
    return 77;
#else
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* before the first CUDA call of the process */
    int bad = 0;
    struct burst_context_params cp = burst_context_params_default();
    struct burst_context *ctx = NULL;
    cp.backend = "cuda";
    burst_status_t st = burst_context_create(&cp, &ctx);
    printf("backend cuda without a device: %s: %s\n", burst_status_str(st), burst_last_error());
    bad |=
        st != BURST_ERR_NO_DEVICE || ctx != NULL || !harness_contains(burst_last_error(), "cuda");
    cp.backend = "auto";
    unsetenv("BURST_BACKEND");
    st = burst_context_create(&cp, &ctx);
    printf("backend auto: %s, runs on %s\n", burst_status_str(st), burst_context_backend(ctx));
    bad |= st != BURST_OK || strcmp(burst_context_backend(ctx), "cuda") == 0;
    bad |= burst_context_device_memory(ctx) != 0; /* cpu (or vulkan): host memory works */
    burst_context_destroy(ctx);
    char *rep = NULL;
    st = burst_probe(NULL, 1, &rep);
    bad |= st != BURST_OK || !rep ||
           !harness_contains(rep, "\"backend\": \"cuda\", \"available\": false");
    printf("probe: %.200s\n", rep ? rep : "(none)");
    burst_free(rep);
    printf("%s\n", bad ? "FAIL" : "PASS");
    return bad;
#endif
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "fallback") == 0)
        return fallback();
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const char *filter = getenv("BURST_TEST_FILTER"); /* e.g. under compute-sanitizer */
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    if (!harness_context())
        return 1;
    const struct CMUnitTest extra[] = {
        cmocka_unit_test(test_reruns),
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_final),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_decode_random),
        cmocka_unit_test(test_decode_bad),
        cmocka_unit_test(test_oom_and_bad_input),
    };
    /* "kernels": the cases, the bitwise reruns and the op-level checks only, for runs under
     * BURST_CUDA_MAX_SHARED, where the decode step declines the head dims whose kernels do not
     * fit and a class on the SIMT kernels declines the one-step final outputs (the callers'
     * general paths then run, which the cases check) */
    const int kernels = argc > 1 && strcmp(argv[1], "kernels") == 0;
    return harness_run_cases("cuda", cases, sizeof cases / sizeof *cases, test_case, extra,
                             kernels ? 2 : sizeof extra / sizeof *extra);
}
