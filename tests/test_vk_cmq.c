/*
 * tests/test_vk_cmq.c - the accumulator-layout check of the *_cmq kernels (runtime/vulkan/vk_cmq.c,
 * burst_vk_cmq_match) on made-up outputs of shaders/cm_layout_nv.comp, without a device: the
 * layout of NVIDIA's tensor-core fragments passes with its rowsel / coloff found, so does the
 * same layout with the elements of each invocation in another order (the kernels take the
 * order from the constants); a transposed layout, one element held twice, another element
 * count, and an fp16 conversion that moves an element are refused, each with a reason naming
 * what differs. The check on a real device runs at every vulkan backend creation on a GPU with
 * VK_NV_cooperative_matrix (scripts/gpu/vk_check.sh); lavapipe has none, so CI runs only this.
 * Also the *_cmq tile rule (runtime/vulkan/vk_caps.c) on made-up device limits: the forward's
 * tile with loading subgroups (two K/V buffers: twice the shared memory, more invocations)
 * where it fits, the rule's next tiles where it does not, and loaders refused where no kernel
 * has them; the forward's tile per call (by its workgroup count, mask and head dim), and
 * dq_cmq's and dkv_cmq's (by head dim, and dq_cmq's by workgroup count); the tiles of fp32
 * inputs in two fp16 halves.
 * And the workgroup-scope kernels (*_cm2) on made-up limits: the reason each missing piece
 * gives (the probe prints it; a build without GL_NV_cooperative_matrix2 names glslang), their
 * tiles where everything is there, none where the workgroup size is not listed or shared
 * memory with the driver's reserve is short; the KHR builds' reasons likewise.
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

#include "vulkan/vk_internal.h"
#include "vk_spv_config.h"

#define LANES 32
#define NOUT (1 + LANES * 16 + 256)

/* out as the layout shader would write it, element e of invocation l at (row(l, e), col(l, e))
 * given by a permutation perm of the fragment's element order (perm[e] = the fragment element
 * that e is) and transpose (rows and columns swapped) */
static void layout(float *out, const int perm[8], int transpose)
{
    for (int i = 0; i < NOUT; i++)
        out[i] = -1.0f;
    out[0] = 8.0f;
    for (int l = 0; l < LANES; l++)
        for (int e = 0; e < 8; e++) {
            int f = perm[e]; /* fragment element: c0 c1 (row g) c2 c3 (row g + 8), then +8 cols */
            int row = l / 4 + 8 * ((f >> 1) & 1), col = 2 * (l % 4) + (f & 1) + 8 * (f >> 2);
            out[1 + l * 16 + e] = (float)(transpose ? col * 16 + row : row * 16 + col);
        }
    for (int x = 0; x < 256; x++) /* the fp16 conversion keeps every element */
        out[1 + LANES * 16 + x] = (float)x;
}

static const int natural[8] = {0, 1, 2, 3, 4, 5, 6, 7};

static void fragment_layout_passes(void **state)
{
    (void)state;
    static float out[NOUT];
    struct burst_vk_cmq q;
    layout(out, natural, 0);
    memset(&q, 0, sizeof q);
    assert_int_equal(burst_vk_cmq_match(out, &q), 1);
    assert_int_equal(q.rowsel, 0xcc);        /* elements 2, 3, 6, 7 in row g + 8 */
    assert_int_equal(q.coloff, 0x98981010u); /* 0 1 0 1 8 9 8 9 */
    /* another element order: found, not assumed */
    static const int other[8] = {4, 5, 0, 1, 6, 7, 2, 3};
    layout(out, other, 0);
    memset(&q, 0, sizeof q);
    assert_int_equal(burst_vk_cmq_match(out, &q), 1);
    assert_int_equal(q.rowsel, 0xf0);        /* elements 4..7 in row g + 8 */
    assert_int_equal(q.coloff, 0x10981098u); /* 8 9 0 1 8 9 0 1 */
}

static void other_layouts_fail(void **state)
{
    (void)state;
    static float out[NOUT];
    struct burst_vk_cmq q;
    layout(out, natural, 1); /* transposed: invocation 0 holds column 0, rows 0..9 */
    memset(&q, 0, sizeof q);
    assert_int_equal(burst_vk_cmq_match(out, &q), 0);
    print_message("transposed: %s\n", q.why);
    assert_non_null(strstr(q.why, "invocation"));

    layout(out, natural, 0); /* invocation 5 holds invocation 4's first element again */
    out[1 + 5 * 16 + 0] = out[1 + 4 * 16 + 0];
    memset(&q, 0, sizeof q);
    assert_int_equal(burst_vk_cmq_match(out, &q), 0);
    print_message("duplicate: %s\n", q.why);
    assert_non_null(strstr(q.why, "element 0 of invocation 5"));

    layout(out, natural, 0); /* 4 elements per invocation (a subgroup of 64) */
    out[0] = 4.0f;
    memset(&q, 0, sizeof q);
    assert_int_equal(burst_vk_cmq_match(out, &q), 0);
    print_message("length: %s\n", q.why);
    assert_non_null(strstr(q.why, "4 accumulator elements"));

    layout(out, natural, 0); /* the conversion swapped two elements */
    out[1 + LANES * 16 + 17] = 18.0f;
    out[1 + LANES * 16 + 18] = 17.0f;
    memset(&q, 0, sizeof q);
    assert_int_equal(burst_vk_cmq_match(out, &q), 0);
    print_message("conversion: %s\n", q.why);
    assert_non_null(strstr(q.why, "(1, 1)"));

    layout(out, natural, 0); /* an element never written (the poison) */
    out[1 + 31 * 16 + 7] = NAN;
    memset(&q, 0, sizeof q);
    assert_int_equal(burst_vk_cmq_match(out, &q), 0);
    print_message("unwritten: %s\n", q.why);
    assert_non_null(strstr(q.why, "invocation 31"));
}

/* an H100's limits as NVIDIA's Vulkan driver reports them (those the rule reads) */
static void h100_caps(struct burst_vk_caps *c)
{
    memset(c, 0, sizeof *c);
    c->type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    c->max_shared = 49152;
    c->max_invocations = c->max_size_x = 1024;
    c->max_groups[0] = c->max_groups[1] = c->max_groups[2] = 65535;
    c->subgroup = c->subgroup_min = c->subgroup_max = 32;
    c->subgroup_shuffle = c->subgroup_vote = c->fp16 = c->coopmat_nv = 1;
    c->sm_count = 132;
    c->ncoop = 1;
    c->coop[0] = (struct burst_vk_coopmat_shape){.m = 16,
                                                 .n = 16,
                                                 .k = 16,
                                                 .a_type = VK_COMPONENT_TYPE_FLOAT16_NV,
                                                 .c_type = VK_COMPONENT_TYPE_FLOAT32_NV};
}

static void expect_tile(const struct burst_vk_tile *tl, int br, int bc, int ld)
{
    if (tl->t != 32 || tl->br != br || tl->bc != bc || tl->ld != ld)
        fail_msg("tile %d x %d x %d + %d, expected 32 x %d x %d + %d", tl->t, tl->br, tl->bc,
                 tl->ld, br, bc, ld);
}

/* BURST_VK_CMQ_TILE=br,bc,ld as burst_vk_env_read reads it (a research switch, which default
 * builds ignore: the tests set the switch itself). */
static void set_cmq_tile(struct burst_vk_env *env, int br, int bc, int ld)
{
    env->cmq_tile[0] = br;
    env->cmq_tile[1] = bc;
    env->cmq_tile[2] = ld;
}

/* The *_cmq tests' environment: the defaults of the switches their tiles depend on; skipped
 * where glslangValidator lacked GL_NV_cooperative_matrix (no *_cmq kernels built). */
static void cmq_env(struct burst_vk_env *env)
{
    if (!BURST_VK_SPV_FWD_CMQ_NV || !BURST_VK_SPV_BWD_DQ_CMQ_NV || !BURST_VK_SPV_BWD_DKV_CMQ_NV)
        skip();
    unsetenv("BURST_VK_CMQ_TILE");
    unsetenv("BURST_VK_CMQ_BWD_TILE");
    unsetenv("BURST_VK_CMQ_FP32");
    unsetenv("BURST_VK_MAX_SHARED");
    burst_vk_env_read(env);
}

static void cmq_tile_rule(void **state)
{
    (void)state;
    struct burst_vk_env env;
    cmq_env(&env);
    struct burst_vk_caps caps;
    struct burst_vk_tiles t;
    const int c = burst_vk_dclass(128);
    h100_caps(&caps);
    burst_vk_tiles_rule(&caps, &env, &t);
    expect_tile(&t.k[BURST_VK_FWD_CMQ][c], 160, 32, 2); /* 384 invocations, two 17 KiB buffers */
    expect_tile(&t.k[BURST_VK_DQ_CMQ][c], 128, 64, 0);
    expect_tile(&t.k[BURST_VK_DKV_CMQ][c], 128, 64, 0); /* 35.0 KiB */
    /* two K/V buffers and four counters: (32 keys x 136 halves x 2 B) x 2 x 2 + 32 B */
    const struct burst_vk_tile ld2 = {32, 160, 32, 2}, ld0 = {32, 160, 32, 0};
    assert_int_equal(burst_vk_tile_shared(BURST_VK_FWD_CMQ, &ld2, 128), 34848u);
    assert_int_equal(burst_vk_tile_shared(BURST_VK_FWD_CMQ, &ld0, 128), 17424u);
    /* a head dim rounded up to 16 in the matrices: d = 40's rows are 48 + 8 halves */
    assert_int_equal(burst_vk_tile_shared(BURST_VK_FWD_CMQ, &ld0, 40), 7184u);
    /* beyond d = 128 (rows of 264 halves): the forward in one 32-key buffer (8 subgroups,
     * 33.8 KiB); the backward's subgroup pairs (2 KiB a subgroup to swap partials): dq_cmq 64
     * rows (8 subgroups) x 16 keys, dkv_cmq 64 key rows (8 subgroups, K in registers: no K
     * tile) x 16 query rows */
    const int c2 = burst_vk_dclass(256);
    expect_tile(&t.k[BURST_VK_FWD_CMQ][c2], 128, 32, 0);
    expect_tile(&t.k[BURST_VK_DQ_CMQ][c2], 64, 16, 0);
    expect_tile(&t.k[BURST_VK_DKV_CMQ][c2], 64, 16, 0);
    assert_int_equal(burst_vk_tile_shared(BURST_VK_DQ_CMQ, &t.k[BURST_VK_DQ_CMQ][c2], 256),
                     16896u + 16u + 8u * 2048u);
    assert_int_equal(burst_vk_tile_shared(BURST_VK_DKV_CMQ, &t.k[BURST_VK_DKV_CMQ][c2], 256),
                     16896u + 256u + 8u + 8u * 2048u);
    /* dkv_cmq at d <= 128: Q and dO tiles of 64 rows of 136 halves, 16 B a query row */
    assert_int_equal(burst_vk_tile_shared(BURST_VK_DKV_CMQ, &t.k[BURST_VK_DKV_CMQ][c], 128),
                     128u * 272u + 1024u + 8u + 4u);
    /* 32-row query tiles: 49.5 KiB at d = 256, 41.5 KiB at d = 192 */
    const struct burst_vk_tile dkv2 = {32, 64, 32, 0};
    assert_false(burst_vk_tile_valid(&caps, &env, BURST_VK_DKV_CMQ, c2, &dkv2));
    assert_true(burst_vk_tile_valid_at(&caps, &env, BURST_VK_DKV_CMQ, 192, &dkv2));
    /* 32-key tiles with the pairs' swap space: 50192 B, beyond 48 KiB */
    const struct burst_vk_tile dq2 = {32, 64, 32, 0};
    assert_false(burst_vk_tile_valid(&caps, &env, BURST_VK_DQ_CMQ, c2, &dq2));
    /* 64-key buffers twice do not fit 48 KiB; loaders only in the forward; at most 4 */
    const struct burst_vk_tile big = {32, 128, 64, 1}, dq = {32, 128, 32, 1},
                               many = {32, 64, 32, 5};
    assert_false(burst_vk_tile_valid(&caps, &env, BURST_VK_FWD_CMQ, c, &big));
    assert_false(burst_vk_tile_valid(&caps, &env, BURST_VK_DQ_CMQ, c, &dq));
    assert_false(burst_vk_tile_valid(&caps, &env, BURST_VK_FWD_CMQ, c, &many));
    /* 256 invocations at most: no room for 10 + 2 subgroups nor 12: 128 x 64 */
    caps.max_invocations = caps.max_size_x = 256;
    burst_vk_tiles_rule(&caps, &env, &t);
    expect_tile(&t.k[BURST_VK_FWD_CMQ][c], 128, 64, 0);
    /* 32 KiB of shared memory: neither two 32-key buffers nor one 64-key one: 128 x 32 */
    h100_caps(&caps);
    caps.max_shared = 32768;
    burst_vk_tiles_rule(&caps, &env, &t);
    expect_tile(&t.k[BURST_VK_FWD_CMQ][c], 128, 32, 0);
    /* a tile asked for (BURST_VK_CMQ_TILE, a research switch: set here in the switches
     * themselves): a third field asks for loaders; an invalid ask falls to the rule */
    h100_caps(&caps);
    set_cmq_tile(&env, 32, 16, 1);
    burst_vk_tiles_rule(&caps, &env, &t);
    expect_tile(&t.k[BURST_VK_FWD_CMQ][c], 32, 16, 1);
    set_cmq_tile(&env, 128, 64, 1);
    burst_vk_tiles_rule(&caps, &env, &t);
    expect_tile(&t.k[BURST_VK_FWD_CMQ][c], 160, 32, 2);
    set_cmq_tile(&env, 192, 64, 0);
    burst_vk_tiles_rule(&caps, &env, &t);
    expect_tile(&t.k[BURST_VK_FWD_CMQ][c], 192, 64, 0);
}

/* fwd_cmq's per-call tile (burst_vk_fwd_cmq_call_tile) on an H100's limits: the loaders' tile
 * from 4 waves of workgroups (any mask), 192 x 64 from 16 waves where every row sees every
 * key, 128 x 64 otherwise and for head dims up to 32; a tile pinned by BURST_VK_CMQ_TILE is
 * never changed; 224 x 32 + 2 in place of 160 x 32 + 2 for d in 33..112. dq_cmq's
 * (burst_vk_dq_cmq_call_tile): 128 x 16 for d in 129..192, 192 x 64 for d in 33..96 on grids
 * of 4 waves; dkv_cmq's (burst_vk_dkv_cmq_call_tile): 64 x 32 for d in 129..192, 256 x 64
 * up to d = 48 and 192 x 64 for d in 49..64 on grids of 4 waves. */
static void cmq_call_tile(void **state)
{
    (void)state;
    struct burst_vk_env env;
    cmq_env(&env);
    struct burst_vk_caps caps;
    h100_caps(&caps); /* 132 multiprocessors */
    const struct burst_vk_tile ld = {32, 160, 32, 2}, big = {32, 192, 64, 0};
    /* 4 waves = 528 workgroups at 132 multiprocessors (512 at the 128 assumed where none is
     * reported): N = 4K x 32 heads is 26 x 32 = 832, N = 1K x 8 heads 7 x 8 = 56; 192 x 64
     * (where the loaders' tile is not valid) needs 16 waves = 2112 and no masked key */
    static const struct {
        int big, sms, groups, mask_all, keep; /* keep: the rule's tile, else 128 x 64 */
    } cases[] = {
        {0, 132, 832, 0, 1},  {0, 132, 528, 1, 1},  {0, 132, 527, 1, 0},
        {0, 132, 56, 1, 0},   {0, 0, 512, 1, 1},    {0, 0, 511, 1, 0},
        {1, 132, 2112, 1, 1}, {1, 132, 2112, 0, 0}, {1, 132, 2111, 1, 0},
    };
    const struct burst_vk_tile small = {32, 128, 64, 0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct burst_vk_tile rule = cases[i].big ? big : ld;
        const struct burst_vk_tile *want = cases[i].keep ? &rule : &small;
        caps.sm_count = (uint32_t)cases[i].sms;
        struct burst_vk_tile t =
            burst_vk_fwd_cmq_call_tile(&caps, &env, 128, rule, cases[i].groups, cases[i].mask_all);
        if (memcmp(&t, want, sizeof t) != 0)
            fail_msg("case %zu: tile %d x %d x %d + %d, expected %d x %d x %d + %d", i, t.t, t.br,
                     t.bc, t.ld, want->t, want->br, want->bc, want->ld);
    }
    caps.sm_count = 132;
    /* pinned: kept for every call */
    set_cmq_tile(&env, 160, 32, 2);
    struct burst_vk_tile t = burst_vk_fwd_cmq_call_tile(&caps, &env, 128, ld, 1, 0);
    expect_tile(&t, 160, 32, 2);
    /* head dims up to 32: 128 x 64 at any size */
    set_cmq_tile(&env, 0, 0, 0);
    t = burst_vk_fwd_cmq_call_tile(&caps, &env, 32, ld, 100000, 1);
    expect_tile(&t, 128, 64, 0);
    /* 33..112: 224 x 32 + 2 where the loaders' tile would run (16 subgroups); small calls
     * 128 x 64; above 112 the loaders' tile */
    t = burst_vk_fwd_cmq_call_tile(&caps, &env, 40, ld, 100000, 1);
    expect_tile(&t, 224, 32, 2);
    t = burst_vk_fwd_cmq_call_tile(&caps, &env, 112, ld, 528, 0);
    expect_tile(&t, 224, 32, 2);
    t = burst_vk_fwd_cmq_call_tile(&caps, &env, 64, ld, 527, 0);
    expect_tile(&t, 128, 64, 0);
    t = burst_vk_fwd_cmq_call_tile(&caps, &env, 120, ld, 100000, 1);
    expect_tile(&t, 160, 32, 2);
    caps.max_invocations = caps.max_size_x = 384; /* 16 subgroups do not fit */
    t = burst_vk_fwd_cmq_call_tile(&caps, &env, 96, ld, 100000, 1);
    expect_tile(&t, 160, 32, 2);
    h100_caps(&caps);
    /* dq_cmq: 128 x 16 for d in 129..192 in place of the d <= 256 class's 64 x 16; the rule's
     * tile at other head dims, for other rule tiles and where one is pinned */
    const struct burst_vk_tile dq64 = {32, 64, 16, 0}, dq128 = {32, 128, 64, 0};
    static const struct {
        int d, br; /* the tile's rows wanted */
    } dq[] = {{128, 64}, {136, 128}, {160, 128}, {192, 128}, {200, 64}, {256, 64}};
    for (size_t i = 0; i < sizeof dq / sizeof dq[0]; i++) {
        t = burst_vk_dq_cmq_call_tile(&caps, &env, dq[i].d, dq64, 100000);
        expect_tile(&t, dq[i].br, 16, 0);
    }
    t = burst_vk_dq_cmq_call_tile(&caps, &env, 160, dq128, 100000);
    expect_tile(&t, 128, 64, 0);
    /* dkv_cmq: 32-row query tiles for d in 129..192 in place of the class's 16 */
    static const struct {
        int d, bc; /* the tile's query rows wanted */
    } dkv[] = {{128, 16}, {136, 32}, {160, 32}, {192, 32}, {200, 16}, {256, 16}};
    for (size_t i = 0; i < sizeof dkv / sizeof dkv[0]; i++) {
        t = burst_vk_dkv_cmq_call_tile(&caps, &env, dkv[i].d, dq64, 100000);
        expect_tile(&t, 64, dkv[i].bc, 0);
    }
    t = burst_vk_dkv_cmq_call_tile(&caps, &env, 160, dq128, 100000);
    expect_tile(&t, 128, 64, 0);
    /* 192 x 64 in place of the rule's 128 x 64 where the grid has 4 waves (132
     * multiprocessors: 528 workgroups), the rule's below: dq_cmq for d in 33..96, dkv_cmq for
     * d in 49..64 (256 x 64 up to 48) */
    static const struct {
        int d, q_br, kv_br;
    } small_d[] = {{8, 128, 256},   {32, 128, 256}, {40, 192, 256}, {48, 192, 256},
                   {56, 192, 192},  {64, 192, 192}, {72, 192, 128}, {96, 192, 128},
                   {104, 128, 128}, {128, 128, 128}};
    for (size_t i = 0; i < sizeof small_d / sizeof small_d[0]; i++) {
        t = burst_vk_dq_cmq_call_tile(&caps, &env, small_d[i].d, dq128, 528);
        expect_tile(&t, small_d[i].q_br, 64, 0);
        t = burst_vk_dq_cmq_call_tile(&caps, &env, small_d[i].d, dq128, 527);
        expect_tile(&t, 128, 64, 0);
        t = burst_vk_dkv_cmq_call_tile(&caps, &env, small_d[i].d, dq128, 528);
        expect_tile(&t, small_d[i].kv_br, 64, 0);
        t = burst_vk_dkv_cmq_call_tile(&caps, &env, small_d[i].d, dq128, 527);
        expect_tile(&t, 128, 64, 0);
    }
    caps.sm_count = 0; /* none reported: taken as 128, 512 workgroups */
    t = burst_vk_dkv_cmq_call_tile(&caps, &env, 64, dq128, 512);
    expect_tile(&t, 192, 64, 0);
    t = burst_vk_dkv_cmq_call_tile(&caps, &env, 64, dq128, 511);
    expect_tile(&t, 128, 64, 0);
    h100_caps(&caps);
    env.cmq_bwd_tile[0] = 64;
    env.cmq_bwd_tile[1] = 16;
    t = burst_vk_dq_cmq_call_tile(&caps, &env, 160, dq64, 100000);
    expect_tile(&t, 64, 16, 0);
    t = burst_vk_dq_cmq_call_tile(&caps, &env, 64, dq128, 100000); /* pinned: the rule's */
    expect_tile(&t, 128, 64, 0);
    t = burst_vk_dkv_cmq_call_tile(&caps, &env, 160, dq64, 100000); /* dkv_cmq's not pinned */
    expect_tile(&t, 64, 32, 0);
    env.cmq_bwd_tile[2] = 64;
    env.cmq_bwd_tile[3] = 16;
    t = burst_vk_dkv_cmq_call_tile(&caps, &env, 160, dq64, 100000);
    expect_tile(&t, 64, 16, 0);
    t = burst_vk_dkv_cmq_call_tile(&caps, &env, 64, dq128, 100000);
    expect_tile(&t, 128, 64, 0);
}

/* The tiles burst_probe lists for large calls (burst_vk_cmq_large_tiles): the rule's tiles on
 * an H100's limits after every per-call choice, with every wave threshold met and no mask. */
static void cmq_large_tiles(void **state)
{
    (void)state;
    struct burst_vk_env env;
    cmq_env(&env);
    struct burst_vk_caps caps;
    h100_caps(&caps);
    struct burst_vk_tiles t;
    burst_vk_tiles_rule(&caps, &env, &t);
    static const struct {
        int d, tiles[3][3]; /* br, bc, loaders of fwd_cmq, dq_cmq, dkv_cmq */
    } cases[] = {
        {32, {{128, 64, 0}, {128, 64, 0}, {256, 64, 0}}},
        {40, {{224, 32, 2}, {192, 64, 0}, {256, 64, 0}}},
        {64, {{224, 32, 2}, {192, 64, 0}, {192, 64, 0}}},
        {96, {{224, 32, 2}, {192, 64, 0}, {128, 64, 0}}},
        {128, {{160, 32, 2}, {128, 64, 0}, {128, 64, 0}}},
        {160, {{128, 32, 0}, {128, 16, 0}, {64, 32, 0}}},
        {256, {{128, 32, 0}, {64, 16, 0}, {64, 16, 0}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct burst_vk_tile tl[3];
        burst_vk_cmq_large_tiles(&caps, &env, &t, cases[i].d, tl);
        for (int k = 0; k < 3; k++)
            if (tl[k].t != 32 || tl[k].br != cases[i].tiles[k][0] ||
                tl[k].bc != cases[i].tiles[k][1] || tl[k].ld != cases[i].tiles[k][2])
                fail_msg("d = %d, kernel %d: %d x %d x %d + %d", cases[i].d, k, tl[k].t, tl[k].br,
                         tl[k].bc, tl[k].ld);
    }
    /* no tiles from the rule: none for large calls either */
    memset(&t, 0, sizeof t);
    struct burst_vk_tile tl[3];
    burst_vk_cmq_large_tiles(&caps, &env, &t, 64, tl);
    for (int k = 0; k < 3; k++)
        assert_int_equal(tl[k].t, 0);
}

/* fp32 inputs in two fp16 halves: every staged row twice as long, the backward on subgroup
 * pairs beyond d = 64 with dkv_cmq's K rows in registers, tiles up to d = 128 and none above, none
 * where the shared memory is too small or BURST_VK_CMQ_FP32=0 */
static void cmq_f32_tiles(void **state)
{
    (void)state;
    struct burst_vk_env env;
    cmq_env(&env);
    assert_int_equal(env.cmq_fp32, 1);
    struct burst_vk_caps caps;
    h100_caps(&caps);
    static const struct {
        enum burst_vk_kernel k;
        int d, br, bc, sp;
        size_t shared;
    } cases[] = {
        /* fwd: 2 x 32 rows of (2 x 128 + 8) halves + 16; (2 x 64 + 8) at d = 64 */
        {BURST_VK_FWD_CMQ, 128, 128, 32, 1, 33808},
        {BURST_VK_FWD_CMQ, 64, 128, 32, 1, 17424},
        {BURST_VK_FWD_CMQ, 40, 128, 32, 1, 13328}, /* d 40 -> 48 in the matrices */
        /* dq: K and V tiles, 8 subgroups' pair partials of 2 KiB beyond d = 64 */
        {BURST_VK_DQ_CMQ, 128, 64, 16, 2, 33296},
        {BURST_VK_DQ_CMQ, 72, 64, 16, 2, 2 * 16 * 336 + 16 + 16384},
        {BURST_VK_DQ_CMQ, 64, 64, 32, 1, 17428},
        /* dkv: no K tile, Q and dO tiles, 16 B per query row, two ints, the partials */
        {BURST_VK_DKV_CMQ, 128, 64, 16, 2, 33544},
        {BURST_VK_DKV_CMQ, 64, 64, 32, 1, 17932},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct burst_vk_tile tl = burst_vk_cmq_f32_tile(&caps, &env, cases[i].k, cases[i].d);
        expect_tile(&tl, cases[i].br, cases[i].bc, 0);
        assert_int_equal(burst_vk_cmq_split(cases[i].k, cases[i].d, 1), cases[i].sp);
        assert_int_equal(burst_vk_cmq_shared(cases[i].k, &tl, cases[i].d, 1), cases[i].shared);
    }
    /* the 16-bit kernels: no pairs up to d = 128 */
    assert_int_equal(burst_vk_cmq_split(BURST_VK_DQ_CMQ, 128, 0), 1);
    for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++) {
        assert_int_equal(burst_vk_cmq_f32_tile(&caps, &env, (enum burst_vk_kernel)k, 136).t, 0);
        assert_int_equal(burst_vk_cmq_f32_tile(&caps, &env, (enum burst_vk_kernel)k, 256).t, 0);
    }
    env.max_shared = 32768; /* below every d = 128 tile */
    for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++)
        assert_int_equal(burst_vk_cmq_f32_tile(&caps, &env, (enum burst_vk_kernel)k, 128).t, 0);
    env.max_shared = 0;
    env.cmq_fp32 = 0;
    for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++)
        assert_int_equal(burst_vk_cmq_f32_tile(&caps, &env, (enum burst_vk_kernel)k, 64).t, 0);
}

/* an H100 with the matrix extensions of NVIDIA's driver: VK_KHR_cooperative_matrix and
 * VK_NV_cooperative_matrix2 with workgroup-scope fp16 shapes for 128 and 256 invocations */
static void h100_cm2_caps(struct burst_vk_caps *c)
{
    h100_caps(c);
    c->api_version = VK_API_VERSION_1_3;
    c->coopmat_khr = c->khr_f16 = c->coopmat2 = c->cm2_features = 1;
    c->cm2_wg[0] = 128;
    c->cm2_wg[1] = 256;
    c->cm2_max_wg = 1024;
    c->cm2_reserved = 1024;
}

static void expect_reason(const char *why, const char *want)
{
    if (!why || !strstr(why, want))
        fail_msg("reason \"%s\", expected one naming \"%s\"", why ? why : "(none)", want);
}

static void cm2_rule_and_reasons(void **state)
{
    (void)state;
    setenv("BURST_VK_CM2", "1", 1); /* opt-in */
    unsetenv("BURST_VK_COOPMAT_KHR");
    unsetenv("BURST_VK_MAX_SHARED");
    struct burst_vk_env env;
    burst_vk_env_read(&env);
    struct burst_vk_caps caps;
    struct burst_vk_tiles t;
    h100_cm2_caps(&caps);
    const char *why = burst_vk_cm2_why(&caps, &env);
#ifndef VK_NV_cooperative_matrix2
    const int built = 0; /* Vulkan headers without the extension: the host code cannot drive it */
    const char *unbuilt = "headers";
#else
    const int built = BURST_VK_SPV_FWD_CM2 && BURST_VK_SPV_BWD_DQ_CM2 && BURST_VK_SPV_BWD_DKV_CM2;
    const char *unbuilt = "glslang";
#endif
    if (!built) {
        expect_reason(why, unbuilt);
        burst_vk_tiles_rule(&caps, &env, &t);
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++)
            assert_int_equal(t.k[BURST_VK_FWD_CM2][c].t, 0);
        skip(); /* the rest needs the kernels built */
    }
    assert_null(why);
    burst_vk_tiles_rule(&caps, &env, &t);
    static const int want[3][3] = {{128, 64, 64}, {128, 64, 64}, {256, 64, 32}};
    for (int k = BURST_VK_FWD_CM2; k <= BURST_VK_DKV_CM2; k++)
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++) {
            const struct burst_vk_tile *tl = &t.k[k][c];
            if (tl->t != want[c][0] || tl->br != want[c][1] || tl->bc != want[c][2])
                fail_msg("%s class %d: %d x %d x %d, expected %d x %d x %d",
                         burst_vk_kernel_names[k], c, tl->t, tl->br, tl->bc, want[c][0], want[c][1],
                         want[c][2]);
        }
    /* fwd_cm2 at d = 256: Q tile 64 x 33 x 16 B, 20 B a row, 16 B: 35088 B */
    assert_int_equal(burst_vk_tile_shared(BURST_VK_FWD_CM2, &t.k[BURST_VK_FWD_CM2][2], 256),
                     35088u);
    /* only 128 invocations listed: the 256 tiles fall to 128 */
    caps.cm2_wg[1] = 0;
    burst_vk_tiles_rule(&caps, &env, &t);
    assert_int_equal(t.k[BURST_VK_FWD_CM2][2].t, 128);
    /* the driver's reserve leaves too little for d = 256's Q tile of 64 rows: 32 rows */
    h100_cm2_caps(&caps);
    caps.cm2_reserved = 16384;
    burst_vk_tiles_rule(&caps, &env, &t);
    assert_int_equal(t.k[BURST_VK_FWD_CM2][2].br, 32);
    /* each missing piece, with its reason, and no tiles */
    static const char *const reason[4] = {"lacks VK_NV_cooperative_matrix2", "Vulkan < 1.3",
                                          "feature", "workgroup-scope shape"};
    for (int i = 0; i < 4; i++) {
        h100_cm2_caps(&caps);
        if (i == 0)
            caps.coopmat2 = 0;
        if (i == 1)
            caps.api_version = VK_API_VERSION_1_2;
        if (i == 2)
            caps.cm2_features = 0;
        if (i == 3)
            caps.cm2_wg[0] = caps.cm2_wg[1] = 0;
        expect_reason(burst_vk_cm2_why(&caps, &env), reason[i]);
        burst_vk_tiles_rule(&caps, &env, &t);
        assert_int_equal(t.k[BURST_VK_DQ_CM2][1].t, 0);
    }
    setenv("BURST_VK_CM2", "0", 1);
    burst_vk_env_read(&env);
    h100_cm2_caps(&caps);
    expect_reason(burst_vk_cm2_why(&caps, &env), "BURST_VK_CM2=0");
    unsetenv("BURST_VK_CM2");
}

/* the subgroup-scope kernels' KHR builds: taken with the KHR extension and its fp16 shape
 * unless BURST_VK_COOPMAT_KHR=0; the NV builds otherwise, where the device has that extension */
static void khr_reasons(void **state)
{
    (void)state;
    unsetenv("BURST_VK_COOPMAT_KHR");
    struct burst_vk_env env;
    burst_vk_env_read(&env);
    struct burst_vk_caps caps;
    h100_cm2_caps(&caps);
    const char *why = burst_vk_coopmat_khr_why(&caps, &env);
    assert_true(burst_vk_coopmat_usable(&caps, &env) == (BURST_VK_SPV_FWD_CM_NV || !why));
#ifndef VK_KHR_cooperative_matrix
    expect_reason(why, "headers");
    skip();
#else
    if (!BURST_VK_SPV_FWD_CM_KHR) {
        expect_reason(why, "glslang");
        skip();
    }
#endif
    assert_null(why);
    caps.khr_f16 = 0;
    expect_reason(burst_vk_coopmat_khr_why(&caps, &env), "16x16x16");
    caps.coopmat_khr = 0;
    expect_reason(burst_vk_coopmat_khr_why(&caps, &env), "lacks VK_KHR_cooperative_matrix");
    assert_true(burst_vk_coopmat_usable(&caps, &env)); /* the NV builds */
    caps.coopmat_nv = 0;
    assert_false(burst_vk_coopmat_usable(&caps, &env));
    setenv("BURST_VK_COOPMAT_KHR", "0", 1);
    burst_vk_env_read(&env);
    h100_cm2_caps(&caps);
    expect_reason(burst_vk_coopmat_khr_why(&caps, &env), "BURST_VK_COOPMAT_KHR=0");
    /* a malformed value fails context creation naming it */
    setenv("BURST_VK_COOPMAT_KHR", "2", 1);
    assert_int_equal(burst_vk_env_read(&env), BURST_ERR_INVALID_ARG);
    expect_reason(burst_last_error(), "BURST_VK_COOPMAT_KHR");
    setenv("BURST_VK_COOPMAT_KHR", "", 1);
    setenv("BURST_VK_CM2", "yes", 1);
    assert_int_equal(burst_vk_env_read(&env), BURST_ERR_INVALID_ARG);
    expect_reason(burst_last_error(), "BURST_VK_CM2");
    unsetenv("BURST_VK_CM2");
    unsetenv("BURST_VK_COOPMAT_KHR");
    assert_int_equal(burst_vk_env_read(&env), BURST_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fragment_layout_passes), cmocka_unit_test(other_layouts_fail),
        cmocka_unit_test(cmq_tile_rule),          cmocka_unit_test(cmq_call_tile),
        cmocka_unit_test(cmq_large_tiles),        cmocka_unit_test(cmq_f32_tiles),
        cmocka_unit_test(cm2_rule_and_reasons),   cmocka_unit_test(khr_reasons),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
