/*
 * tests/test_vulkan.c - what is particular to the Vulkan backend (runtime/vulkan/); the shared
 * harness tests run on it too (vk_* tests in tests/meson.build, BURST_TEST_BACKEND=vulkan).
 *
 *   test_vulkan            (suite vulkan; exit 77 without a Vulkan device)
 *     - attention cases against the fp64 reference on the path the environment selects (meson
 *       runs it once with BURST_VK_RT=0: the scalar kernels), every mask, GQA, dtypes and
 *       head dims 8..256, fp16 and bf16 cases for the cooperative-matrix forward where the
 *       device has it (bf16 far above and below fp16's range too), and blocks long enough that
 *       lavapipe needs split dispatches;
 *     - burst_probe text and JSON list the device, its limits and its tiles;
 *     - bad input: head dim 264 -> BURST_ERR_UNSUPPORTED naming it; a device with too little
 *       shared memory (BURST_VK_MAX_SHARED) -> BURST_ERR_UNSUPPORTED naming the head dim;
 *       allocations beyond the device -> NULL / BURST_ERR_NO_MEMORY, no crash;
 *   test_vulkan nodevice   (run with VK_ICD_FILENAMES pointing nowhere) backend "vulkan" gives
 *                          BURST_ERR_NO_DEVICE with a message, "auto" falls back to another.
 *   test_vulkan path P     (suites vulkan, gpu) the cooperative-matrix path P only: cm2 (the
 *                          workgroup-scope kernels, *_cm2), khr (the subgroup-scope kernels'
 *                          KHR builds), nv (their NV builds), each where the probe says the
 *                          device takes it under the environment meson gives (BURST_VK_CM2,
 *                          BURST_VK_COOPMAT_KHR), else exit 77 with the probe's reason. Cases
 *                          against the fp64 reference, forward and backward: fp16 and bf16,
 *                          head dims {8, 32, 40, 64, 72, 80, 96, 128, 136, 160, 192, 200, 248,
 *                          256}, every mask, GQA, query and key counts not multiples of any
 *                          tile, unaligned rows, large and tiny magnitudes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "harness_table.h"

#define VK_CASE(nm, G, n, hq, hkv, d, dt)                                                          \
    .name = (nm), .ranks = (G), .batch = 1, .seq_len = (n), .q_heads = (hq), .kv_heads = (hkv),    \
    .head_dim = (d), .dtype = (dt), .window_left = -1, .window_right = -1

HARNESS_TABLE_BEGIN
static const struct harness_case cases[] = {
    {VK_CASE("full_g1_d64", 1, 96, 2, 2, 64, BURST_DTYPE_FP32)},
    {VK_CASE("causal_zigzag_g4_fp16", 4, 128, 4, 2, 32, BURST_DTYPE_FP16), .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {VK_CASE("causal_striped_g3_bf16_ring", 3, 90, 4, 1, 16, BURST_DTYPE_BF16), .causal = 1,
     .layout = BURST_LAYOUT_STRIPED, .bwd = BURST_BWD_RING},
    {VK_CASE("window_g2_d8", 2, 80, 2, 2, 8, BURST_DTYPE_FP32), .window_left = 7,
     .window_right = 3},
    {VK_CASE("d256_gqa_g2", 2, 48, 4, 2, 256, BURST_DTYPE_FP32), .causal = 1},
    {VK_CASE("d136_padded_g2_fp16", 2, 40, 2, 1, 136, BURST_DTYPE_FP16), .pad = 3},
    {VK_CASE("batch2_g2_bf16", 2, 64, 2, 2, 40, BURST_DTYPE_BF16), .batch = 2, .window_left = 20,
     .window_right = 0},
    /* fp16 with head dims that are multiples of 16: the cooperative-matrix forward where the
     * device has it (else the path above): partial Q and K tiles, GQA, every mask, Q in shared
     * memory (d 256), unaligned rows (pad: element loads), large scores (rescales) */
    {VK_CASE("cm_causal_gqa_d64_fp16", 2, 200, 4, 1, 64, BURST_DTYPE_FP16), .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {VK_CASE("cm_window_d128_fp16", 1, 130, 2, 2, 128, BURST_DTYPE_FP16), .window_left = 40,
     .window_right = 5},
    {VK_CASE("cm_d256_gqa_fp16", 2, 72, 2, 1, 256, BURST_DTYPE_FP16), .causal = 1},
    {VK_CASE("cm_d80_padded_fp16", 2, 100, 2, 2, 80, BURST_DTYPE_FP16), .pad = 1,
     .layout = BURST_LAYOUT_STRIPED},
    {VK_CASE("cm_large_scores_fp16", 1, 256, 1, 1, 32, BURST_DTYPE_FP16), .softmax_scale = 1.0f,
     .amp = 4.0, .grid = 4},
    /* bf16 on the same forward where the device has it (scaled into fp16 by a power of two per
     * tensor, shaders/cm_nv.glsl load8s): GQA and a causal mask, unaligned rows (element
     * loads), and q, k far beyond fp16's range (|x| up to 1e6) and far below its normal range
     * (1e-6), which fp16 without the scaling would overflow or flush */
    {VK_CASE("cmq_bf16_causal_gqa_d64", 2, 200, 4, 1, 64, BURST_DTYPE_BF16), .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {VK_CASE("cmq_bf16_d80_padded", 2, 100, 2, 2, 80, BURST_DTYPE_BF16), .pad = 1},
    {VK_CASE("cmq_bf16_huge_d128", 1, 130, 2, 2, 128, BURST_DTYPE_BF16), .amp = 1e6,
     .softmax_scale = 1e-12f},
    {VK_CASE("cmq_bf16_tiny_d64", 2, 96, 2, 1, 64, BURST_DTYPE_BF16), .amp = 1e-6,
     .softmax_scale = 1e12f, .causal = 1},
    /* one block of 1024 keys: more loop iterations per invocation than lavapipe runs in one
     * dispatch on the scalar path (it stops loops after 65535; the host splits the call) */
    {VK_CASE("long_block_g1_d64", 1, 1024, 1, 1, 64, BURST_DTYPE_FP32)},
    /* soft-capped scores (5, 30, 50), scores large enough to bend tanh (|s| of several caps'
     * widths), both backward patterns, masks, GQA and dtypes: on every path the environment
     * selects (the matrix paths where the device has them) */
    {VK_CASE("softcap5_causal_g2", 2, 96, 4, 2, 32, BURST_DTYPE_FP32), .causal = 1, .softcap = 5.0f,
     .softmax_scale = 1.0f, .amp = 2.0},
    {VK_CASE("softcap30_zigzag_g4_fp16_ring", 4, 128, 4, 1, 64, BURST_DTYPE_FP16), .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG, .bwd = BURST_BWD_RING, .softcap = 30.0f, .softmax_scale = 1.0f,
     .amp = 2.5},
    {VK_CASE("softcap50_window_g3_bf16", 3, 90, 2, 2, 32, BURST_DTYPE_BF16), .window_left = 11,
     .window_right = 4, .layout = BURST_LAYOUT_STRIPED, .softcap = 50.0f, .softmax_scale = 1.0f,
     .amp = 3.0},
};

/* the matrix paths (test_vulkan path P): fp16 and bf16 over the head dims, masks and shapes of
 * the kernels' tiles (64 or more query rows, 16 to 64 keys: counts such as 200 and 130 end in
 * partial tiles), forward and backward */
static const struct harness_case path_cases[] = {
    {VK_CASE("p_d8_full_fp16", 1, 70, 2, 2, 8, BURST_DTYPE_FP16)},
    {VK_CASE("p_d32_causal_gqa_fp16", 2, 200, 4, 1, 32, BURST_DTYPE_FP16), .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {VK_CASE("p_d40_window_fp16", 1, 130, 2, 2, 40, BURST_DTYPE_FP16), .window_left = 33,
     .window_right = 4},
    {VK_CASE("p_d40_causal_bf16", 2, 144, 2, 1, 40, BURST_DTYPE_BF16), .causal = 1},
    {VK_CASE("p_d64_full_bf16", 1, 257, 2, 2, 64, BURST_DTYPE_BF16)},
    {VK_CASE("p_d80_padded_fp16", 2, 100, 2, 2, 80, BURST_DTYPE_FP16), .pad = 1,
     .layout = BURST_LAYOUT_STRIPED},
    {VK_CASE("p_d96_causal_gqa_bf16", 2, 180, 6, 2, 96, BURST_DTYPE_BF16), .causal = 1},
    {VK_CASE("p_d128_window_fp16", 1, 300, 2, 2, 128, BURST_DTYPE_FP16), .window_left = 70,
     .window_right = 9},
    {VK_CASE("p_d128_causal_bf16_batch2", 2, 130, 2, 1, 128, BURST_DTYPE_BF16), .batch = 2,
     .causal = 1},
    {VK_CASE("p_d160_full_fp16", 1, 150, 2, 2, 160, BURST_DTYPE_FP16)},
    {VK_CASE("p_d160_causal_bf16", 2, 120, 4, 2, 160, BURST_DTYPE_BF16), .causal = 1},
    {VK_CASE("p_d192_window_gqa_fp16", 2, 110, 4, 1, 192, BURST_DTYPE_FP16), .window_left = 20,
     .window_right = 20},
    {VK_CASE("p_d192_padded_bf16", 1, 90, 2, 2, 192, BURST_DTYPE_BF16), .pad = 3},
    {VK_CASE("p_d256_causal_fp16", 2, 140, 2, 1, 256, BURST_DTYPE_FP16), .causal = 1},
    {VK_CASE("p_d256_full_bf16", 1, 100, 2, 2, 256, BURST_DTYPE_BF16)},
    {VK_CASE("p_d72_padded_fp16", 2, 66, 2, 2, 72, BURST_DTYPE_FP16), .pad = 1, .causal = 1},
    /* beyond 128, head dims whose 16-column chunks split unevenly between the two subgroups on
     * each 16 rows of the backward (9 and 13 chunks), and one rounded up to 16 there */
    {VK_CASE("p_d136_causal_gqa_fp16", 2, 150, 4, 2, 136, BURST_DTYPE_FP16), .causal = 1},
    {VK_CASE("p_d200_full_bf16", 1, 110, 2, 2, 200, BURST_DTYPE_BF16)},
    {VK_CASE("p_d248_window_fp16", 2, 120, 2, 1, 248, BURST_DTYPE_FP16), .window_left = 40,
     .window_right = 7, .pad = 1},
    {VK_CASE("p_large_scores_fp16", 1, 256, 1, 1, 64, BURST_DTYPE_FP16), .softmax_scale = 1.0f,
     .amp = 4.0, .grid = 4},
    {VK_CASE("p_bf16_huge_d128", 1, 130, 2, 2, 128, BURST_DTYPE_BF16), .amp = 1e6,
     .softmax_scale = 1e-12f},
    {VK_CASE("p_bf16_tiny_d40", 2, 96, 2, 1, 40, BURST_DTYPE_BF16), .amp = 1e-6,
     .softmax_scale = 1e12f, .causal = 1},
    {VK_CASE("p_long_d64_fp16", 1, 2048, 2, 1, 64, BURST_DTYPE_FP16), .causal = 1},
    /* soft-capped scores, large enough to bend tanh */
    {VK_CASE("p_softcap5_d64_fp16", 2, 200, 4, 1, 64, BURST_DTYPE_FP16), .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG, .softcap = 5.0f, .softmax_scale = 1.0f, .amp = 1.5},
    {VK_CASE("p_softcap30_d128_bf16_ring", 2, 130, 2, 2, 128, BURST_DTYPE_BF16), .causal = 1,
     .bwd = BURST_BWD_RING, .softcap = 30.0f, .softmax_scale = 1.0f, .amp = 2.0},
    {VK_CASE("p_softcap50_d80_window_fp16", 1, 150, 2, 2, 80, BURST_DTYPE_FP16), .pad = 1,
     .window_left = 33, .window_right = 4, .softcap = 50.0f, .softmax_scale = 1.0f, .amp = 3.0},
    {VK_CASE("p_softcap30_d256_bf16", 2, 100, 2, 1, 256, BURST_DTYPE_BF16), .softcap = 30.0f,
     .softmax_scale = 1.0f, .amp = 2.0},
};
HARNESS_TABLE_END

/* ---- probe --------------------------------------------------------------------------------- */

static void probe_lists_device(void **state)
{
    (void)state;
    char *text = NULL, *json = NULL;
    assert_int_equal(burst_probe(NULL, 0, &text), BURST_OK);
    assert_int_equal(burst_probe(NULL, 1, &json), BURST_OK);
    assert_non_null(strstr(text, "backend vulkan"));
    assert_non_null(strstr(text, "device 0:"));
    assert_non_null(strstr(text, "shared memory"));
    assert_non_null(strstr(text, "subgroup"));
    assert_non_null(strstr(text, "fwd "));
    assert_non_null(strstr(json, "\"backend\": \"vulkan\", \"available\": true"));
    const char *keys[] = {"\"shared_memory\": ", "\"subgroup_size\": ",
                          "\"fp16\": ",          "\"coopmat_nv\": ",
                          "\"heaps\": [",        "\"tiles\": {",
                          "\"fwd\": [",          "\"fwd_rt\": [",
                          "\"path\": ",          "\"cmq_large_call_tiles\": ["};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strstr(json, keys[i]))
            fail_msg("probe JSON lacks %s:\n%s", keys[i], json);
    /* the *_cmq tiles of large calls, by head dim, where the rule gave those kernels tiles */
    const char *cmq = strstr(json, "\"fwd_cmq\": [{\"max_head_dim\": 64, \"t\": 32");
    if (cmq &&
        !strstr(json, "\"cmq_large_call_tiles\": [{\"head_dim\": 32, \"fwd_cmq\": {\"t\": 32"))
        fail_msg("probe JSON lacks the large calls' tiles:\n%s", json);
    if (cmq && !strstr(text, "large calls"))
        fail_msg("probe text lacks the large calls' tiles:\n%s", text);
    burst_free(text);
    burst_free(json);
}

/* ---- bad input ----------------------------------------------------------------------------- */

struct fwd_problem {
    float *q, *o, *lse;
    struct burst_tensor tq;
    struct burst_fwd_args a;
};

static void fwd_problem_init(struct fwd_problem *p, int d)
{
    const int n = 8;
    p->q = calloc((size_t)(n * d), 4);
    p->o = calloc((size_t)(n * d), 4);
    p->lse = calloc((size_t)n, 4);
    assert_non_null(p->q);
    p->tq = (struct burst_tensor){p->q, BURST_DTYPE_FP32, {1, n, 1, d}, {n * d, d, d, 1}};
    memset(&p->a, 0, sizeof p->a);
    p->a.q = p->a.k = p->a.v = &p->tq;
    p->a.qpos.nruns = p->a.kpos.nruns = 1;
    p->a.qpos.run[0].len = p->a.kpos.run[0].len = n;
    p->a.qpos.run[0].stride = p->a.kpos.run[0].stride = 1;
    p->a.mask.left = p->a.mask.right = BURST_POS_INF;
    p->a.scale = 0.5f;
    p->a.o_acc = p->o;
    p->a.lse_acc = p->lse;
}

static void fwd_problem_fini(struct fwd_problem *p)
{
    free(p->q);
    free(p->o);
    free(p->lse);
}

static void unsupported_head_dim(void **state)
{
    (void)state;
    void *be = NULL;
    assert_int_equal(burst_vk_backend_ops.core.create(NULL, &be), BURST_OK);
    struct fwd_problem p;
    fwd_problem_init(&p, 264);
    burst_status_t st = burst_vk_backend_ops.attn.fwd_step(be, &p.a);
    assert_int_equal(st, BURST_ERR_UNSUPPORTED);
    assert_true(harness_contains(burst_last_error(), "head dim = 264"));
    fwd_problem_fini(&p);

    fwd_problem_init(&p, 64); /* works: the same call path succeeds */
    assert_int_equal(burst_vk_backend_ops.attn.fwd_step(be, &p.a), BURST_OK);
    fwd_problem_fini(&p);

    /* allocations beyond the device: NULL, nothing crashes, the instance stays usable */
    assert_null(burst_vk_backend_ops.mem.alloc(be, (size_t)1 << 62));
    void *ok = burst_vk_backend_ops.mem.alloc(be, 4096);
    assert_non_null(ok);
    burst_vk_backend_ops.mem.free(be, ok);
    burst_vk_backend_ops.core.destroy(be);
}

static void small_shared_memory(void **state)
{
    (void)state;
    setenv("BURST_VK_MAX_SHARED", "4096", 1); /* read at create */
    void *be = NULL;
    burst_status_t st = burst_vk_backend_ops.core.create(NULL, &be);
    unsetenv("BURST_VK_MAX_SHARED");
    assert_int_equal(st, BURST_OK);
    struct fwd_problem p;
    fwd_problem_init(&p, 256); /* K and V tiles of one row of 256 floats need 2 KiB... */
    st = burst_vk_backend_ops.attn.fwd_step(be, &p.a);
    fwd_problem_fini(&p);
    if (st == BURST_OK) { /* ...which fits: then 4096 B must still refuse nothing smaller */
        burst_vk_backend_ops.core.destroy(be);
        setenv("BURST_VK_MAX_SHARED", "1024", 1);
        st = burst_vk_backend_ops.core.create(NULL, &be);
        unsetenv("BURST_VK_MAX_SHARED");
        assert_int_equal(st, BURST_OK);
        fwd_problem_init(&p, 256);
        st = burst_vk_backend_ops.attn.fwd_step(be, &p.a);
        fwd_problem_fini(&p);
    }
    assert_int_equal(st, BURST_ERR_UNSUPPORTED);
    if (!harness_contains(burst_last_error(), "head dim = 256") ||
        !harness_contains(burst_last_error(), "shared memory"))
        fail_msg("message does not name the head dim and shared memory: %s", burst_last_error());
    burst_vk_backend_ops.core.destroy(be);
}

static void context_alloc_huge(void **state)
{
    (void)state;
    void *ptr = (void *)1;
    assert_int_equal(burst_context_alloc(harness_context(), (size_t)1 << 62, &ptr),
                     BURST_ERR_NO_MEMORY);
    assert_null(ptr);
}

/* ---- modes --------------------------------------------------------------------------------- */

static int run_nodevice(void)
{
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "vulkan";
    struct burst_context *ctx = NULL;
    burst_status_t st = burst_context_create(&cp, &ctx);
    if (st != BURST_ERR_NO_DEVICE || ctx || !harness_contains(burst_last_error(), "vulkan")) {
        fprintf(stderr, "nodevice: vulkan gave %d (%s), want BURST_ERR_NO_DEVICE\n", (int)st,
                burst_last_error());
        return 1;
    }
    printf("vulkan without a device: %s\n", burst_last_error());
    cp.backend = "auto";
    st = burst_context_create(&cp, &ctx);
    if (st != BURST_OK || strcmp(burst_context_backend(ctx), "vulkan") == 0) {
        fprintf(stderr, "nodevice: auto gave %d (%s)\n", (int)st, burst_last_error());
        return 1;
    }
    printf("auto fell back to %s\n", burst_context_backend(ctx));
    burst_context_destroy(ctx);
    char *json = NULL;
    if (burst_probe(NULL, 1, &json) != BURST_OK ||
        !strstr(json, "\"backend\": \"vulkan\", \"available\": false, \"reason\": ")) {
        fprintf(stderr, "nodevice: probe: %s\n", json ? json : burst_last_error());
        return 1;
    }
    burst_free(json);
    return 0;
}

/* test_vulkan path P: the cases above where device 0 takes path P (the probe's choice under this
 * environment), else 77 naming why not. */
static int run_path(const char *path)
{
    char *json = NULL;
    if (burst_probe(NULL, 1, &json) != BURST_OK) {
        fprintf(stderr, "path %s: probe: %s\n", path, burst_last_error());
        return 1;
    }
    const char *dev = strstr(json, "\"backend\": \"vulkan\", \"available\": true");
    const char *why = NULL;
    char buf[256] = "";
    if (!dev) {
        why = "no Vulkan device";
    } else if (strcmp(path, "cm2") == 0) {
        const char *off = strstr(dev, "\"coopmat2_off\": ");
        if (!off || strncmp(off + 16, "null", 4) != 0) {
            /* the reason: the JSON string after the key */
            const char *r = off ? off + 17 : "(no coopmat2_off)", *end = strchr(r, '"');
            snprintf(buf, sizeof buf, "%.*s", end ? (int)(end - r) : 200, r);
            why = buf;
        }
    } else if (strcmp(path, "khr") == 0 || strcmp(path, "nv") == 0) {
        char want[32];
        snprintf(want, sizeof want, "\"coopmat\": \"%s\"", path);
        if (!strstr(dev, want)) { /* the family taken and why not KHR */
            const char *off = strstr(dev, "\"coopmat\": "), *end = NULL;
            if (off)
                end = strstr(off, ", \"coopmat2\"");
            snprintf(buf, sizeof buf, "%.*s", off && end ? (int)(end - off) : 200,
                     off ? off : "(no coopmat)");
            why = buf;
        }
    } else {
        fprintf(stderr, "path %s: not one of cm2, khr, nv\n", path);
        burst_free(json);
        return 1;
    }
    burst_free(json);
    if (why) {
        printf("path %s: not taken on device 0: %s\n", path, why);
        return 77;
    }
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    harness_context();
    return harness_run_cases(path, path_cases, sizeof path_cases / sizeof *path_cases,
                             harness_case_test, NULL, 0);
}

int main(int argc, char **argv)
{
    int rc;
    if (argc > 1 && strcmp(argv[1], "nodevice") == 0) {
        rc = run_nodevice();
    } else if (argc > 2 && strcmp(argv[1], "path") == 0) {
        rc = run_path(argv[2]);
    } else {
        printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
        harness_context(); /* exit 77 here when there is no Vulkan device */
        const struct CMUnitTest extra[] = {
            cmocka_unit_test(probe_lists_device),
            cmocka_unit_test(unsupported_head_dim),
            cmocka_unit_test(small_shared_memory),
            cmocka_unit_test(context_alloc_huge),
        };
        rc = harness_run_cases("vulkan", cases, sizeof cases / sizeof *cases, harness_case_test,
                               extra, sizeof extra / sizeof *extra);
    }
    return rc;
}
