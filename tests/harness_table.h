/*
 * tests/harness_table.h - writing tables of attention cases (struct harness_case, harness.h).
 *
 * A table row starts from CASE's defaults and overrides fields with later designated
 * initializers:
 *
 *     HARNESS_TABLE_BEGIN
 *     static const struct harness_case cases[] = {
 *         {CASE("g4_causal_zigzag", 4, 64), .causal = 1, .layout = ZZ},
 *     };
 *     HARNESS_TABLE_END
 *
 * C11 allows a later initializer of a member to replace an earlier one; gcc (-Woverride-init)
 * and clang (-Winitializer-overrides) warn about it, so the table sits between
 * HARNESS_TABLE_BEGIN and HARNESS_TABLE_END, which silence that one warning for the table alone.
 * The short names below keep the rows on one line each.
 */
#ifndef BURST_TESTS_HARNESS_TABLE_H
#define BURST_TESTS_HARNESS_TABLE_H

#include "harness.h"

#define F32 BURST_DTYPE_FP32
#define F16 BURST_DTYPE_FP16
#define BF16 BURST_DTYPE_BF16
#define NAT BURST_LAYOUT_NATURAL
#define ZZ BURST_LAYOUT_ZIGZAG
#define STR BURST_LAYOUT_STRIPED
#define BURST BURST_BWD_BURST
#define RING BURST_BWD_RING
#define AUTO BURST_BWD_AUTO
#define WIN BURST_WIRE_INPUT

/* A case of G ranks and n tokens: batch 1, two query and two key/value heads of 32, fp32, no
 * mask, natural layout, the burst backward, fp32 on the wire. */
#define CASE(nm, G, n)                                                                             \
    .name = (nm), .ranks = (G), .batch = 1, .seq_len = (n), .q_heads = 2, .kv_heads = 2,           \
    .head_dim = 32, .dtype = F32, .window_left = -1, .window_right = -1, .layout = NAT,            \
    .bwd = BURST

#define HARNESS_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define HARNESS_TABLE_BEGIN                                                                        \
    HARNESS_PRAGMA(clang diagnostic push)                                                          \
    HARNESS_PRAGMA(clang diagnostic ignored "-Winitializer-overrides")
#define HARNESS_TABLE_END HARNESS_PRAGMA(clang diagnostic pop)
#elif defined(__GNUC__)
#define HARNESS_TABLE_BEGIN                                                                        \
    HARNESS_PRAGMA(GCC diagnostic push)                                                            \
    HARNESS_PRAGMA(GCC diagnostic ignored "-Woverride-init")
#define HARNESS_TABLE_END HARNESS_PRAGMA(GCC diagnostic pop)
#else
#define HARNESS_TABLE_BEGIN
#define HARNESS_TABLE_END
#endif

#endif /* BURST_TESTS_HARNESS_TABLE_H */
