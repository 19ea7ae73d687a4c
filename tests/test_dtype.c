/*
 * tests/test_dtype.c - the library's fp16/bf16 converters against the harness's independent
 * ones (every 16-bit pattern decoded; round-to-nearest-even encoding of random values, ties and
 * edge cases), and dtype sizes/names. The harness relies on both agreeing: the reference sees
 * exactly the values the library stores.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static void test_decode_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint16_t x = (uint16_t)h;
        double mine = harness_load(BURST_DTYPE_FP16, &x, 0);
        double lib = burst_fp16_to_fp32(x);
        if (!(mine == lib || (isnan(mine) && isnan(lib))))
            fail_msg("fp16 0x%04x: library %.9g, expected %.9g", h, lib, mine);
        mine = harness_load(BURST_DTYPE_BF16, &x, 0);
        lib = burst_bf16_to_fp32(x);
        if (!(mine == lib || (isnan(mine) && isnan(lib))))
            fail_msg("bf16 0x%04x: library %.9g, expected %.9g", h, lib, mine);
    }
}

static void check_encode(float f)
{
    uint16_t want16, want_bf;
    harness_store(BURST_DTYPE_FP16, &want16, 0, f);
    harness_store(BURST_DTYPE_BF16, &want_bf, 0, f);
    uint16_t got16 = burst_fp32_to_fp16(f), got_bf = burst_fp32_to_bf16(f);
    if (isnan(f)) {
        assert_true(isnan(burst_fp16_to_fp32(got16)));
        assert_true(isnan(burst_bf16_to_fp32(got_bf)));
        return;
    }
    if (got16 != want16)
        fail_msg("fp32 -> fp16 of %.9g (%a): library 0x%04x, expected 0x%04x", (double)f, (double)f,
                 got16, want16);
    if (got_bf != want_bf)
        fail_msg("fp32 -> bf16 of %.9g (%a): library 0x%04x, expected 0x%04x", (double)f, (double)f,
                 got_bf, want_bf);
}

static void test_encode(void **state)
{
    (void)state;
    static const float edges[] = {0.0f,
                                  -0.0f,
                                  1.0f,
                                  -1.0f,
                                  65504.0f,
                                  65519.0f,
                                  65520.0f,
                                  70000.0f,
                                  0x1.0p-14f,
                                  0x1.0p-24f,
                                  0x1.0p-25f,
                                  0x1.8p-25f,
                                  0x1.0p-26f,
                                  0x1.ffcp-15f,
                                  1.0f + 0x1.0p-11f,
                                  1.0f + 0x1.8p-11f,
                                  1.0f + 0x1.0p-8f,
                                  1.0f + 0x1.8p-8f,
                                  1.0f + 0x1.0p-9f,
                                  1.0f + 0x1.8p-9f,
                                  3.0e38f,
                                  0x1.fffffep127f,
                                  INFINITY,
                                  -INFINITY,
                                  NAN};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        check_encode(edges[i]);
    uint64_t st = harness_seed();
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)harness_rng_next(&st);
        float f;
        memcpy(&f, &bits, 4);
        if (fabsf(f) > 1e5f || fabsf(f) < 1e-9f) /* keep most in the interesting range */
            f = (float)harness_rng_uniform(&st, -70000.0, 70000.0) * (i % 3 == 0 ? 1e-6f : 1.0f);
        check_encode(f);
    }
}

static void test_sizes_names(void **state)
{
    (void)state;
    assert_int_equal(burst_dtype_size(BURST_DTYPE_FP32), 4);
    assert_int_equal(burst_dtype_size(BURST_DTYPE_FP16), 2);
    assert_int_equal(burst_dtype_size(BURST_DTYPE_BF16), 2);
    assert_int_equal(burst_dtype_size((burst_dtype_t)7), 0);
    assert_string_equal(burst_dtype_name(BURST_DTYPE_FP32), "fp32");
    assert_string_equal(burst_dtype_name(BURST_DTYPE_FP16), "fp16");
    assert_string_equal(burst_dtype_name(BURST_DTYPE_BF16), "bf16");
    assert_string_equal(burst_dtype_name((burst_dtype_t)7), "unknown");
    assert_true(harness_round(BURST_DTYPE_BF16, 1.0 + 0x1.8p-8) == 1.0 + 0x1.0p-7);
    assert_true(harness_round(BURST_DTYPE_FP16, 1.0 + 0x1.0p-11) == 1.0);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_all),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_sizes_names),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
