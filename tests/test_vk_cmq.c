/*
 * tests/test_vk_cmq.c - the accumulator-layout check of the *_cmq kernels (runtime/vulkan/vk_cmq.c,
 * burst_vk_cmq_match) on made-up outputs of shaders/cm_layout_nv.comp, without a device: the
 * layout of NVIDIA's tensor-core fragments passes with its rowsel / coloff found, so does the
 * same layout with the elements of each invocation in another order (the kernels take the
 * order from the constants); a transposed layout, one element held twice, another element
 * count, and an fp16 conversion that moves an element are refused, each with a reason naming
 * what differs. The check on a real device runs at every vulkan backend creation on a GPU with
 * VK_NV_cooperative_matrix (cuda/vk_check.sh); lavapipe has none, so CI runs only this.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vulkan/vk_internal.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fragment_layout_passes),
        cmocka_unit_test(other_layouts_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
