/*
 * runtime/fp8.h - the e4m3 operands of the fp8 forward (private).
 *
 * A plan with fp8_forward (burst/plan.h) computes Q K^T and P V on e4m3 values (OCP FP8 E4M3FN:
 * 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; largest finite 448, no infinities),
 * each quantized block with an fp32 scale of its own, so that x ~= scale * e4m3(x / scale):
 *   - Q: one scale per batch, query head and BURST_FP8_QROWS rows (from the shard's row 0);
 *   - K: one scale per batch, key head and BURST_FP8_KEYS keys (from the block's key 0);
 *   - V: one scale per batch and key head of a block (a rank's shard, or with documents the
 *     part of it that travels, quantized by itself);
 *   - P: a fixed factor 2^BURST_FP8_P_SHIFT: the softmax computes P = exp2(s - m + 8) <= 256 in
 *     fp32, rounds it to e4m3 for P V, and sums the unrounded P for the denominator; the 2^8
 *     cancels between the two (the running maximum m is carried 8 lower).
 * Each scale is amax / 448 of its block (1 for a block of zeros), and a value x is stored as
 * e4m3(x * min(448 / amax, FLT_MAX)) (x itself for zeros), all in fp32, so that the block's
 * largest magnitude maps to 448 and nothing saturates (nor becomes NaN below amax ~ 1e-36).
 *
 * Q of a step: e4m3 [B, n, H, dp] (dp = head_dim rounded up to 16 bytes, zeros after d) and
 * the scales fp32 [B, H, ceil(n / BURST_FP8_QROWS)].
 *
 * A K/V block of n keys and h key heads (the ring's message; burst_fp8_kv_layout):
 *   k     e4m3 [B, n, h, dp]          K rows, zeros after d;
 *   vt    e4m3 [B, h, d, np]          V transposed, np = n rounded up to 32: within each group
 *                                     of 32 keys, key c sits in column burst_fp8_vt_col(c) of
 *                                     the group (keys n .. np - 1 are zeros);
 *   kscale fp32 [B, h, ceil(n / BURST_FP8_KEYS)];
 *   vscale fp32 [B, h];
 * each part starting on a 128-byte boundary of the message. V travels transposed (keys
 * contiguous) because the e4m3 tensor-core products read both operands along the reduced
 * dimension; the column order within a group of 32 keys is the one in which the accumulator
 * of S = Q K^T holds a thread's scores, so that P reaches the P V product without shuffles.
 */
#ifndef BURST_RUNTIME_FP8_H
#define BURST_RUNTIME_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "burst/status.h"
#include "burst/tensor.h"

#define BURST_FP8_MAX 448.0f /* largest finite e4m3 */
#define BURST_FP8_QROWS 64   /* query rows of a Q scale */
#define BURST_FP8_KEYS 128   /* keys of a K scale */
#define BURST_FP8_P_SHIFT 8  /* P's factor, log2 */

/* The column of key c (0 <= c < 32) within its group of 32 in V^T: keys 8j + 2t + e (j < 4,
 * t < 4, e < 2) go to 4t + 2j + e for j < 2 and to 16 + 4t + 2(j - 2) + e for j >= 2. */
static inline int burst_fp8_vt_col(int c)
{
    const int j = c >> 3, t = (c >> 1) & 3, e = c & 1;
    return j < 2 ? 4 * t + 2 * j + e : 16 + 4 * t + 2 * (j - 2) + e;
}

/* Head dim padded to 16 bytes (the row pitch of e4m3 Q and K). */
static inline int64_t burst_fp8_dp(int64_t d)
{
    return (d + 15) / 16 * 16;
}

/* Byte offsets of the parts of a K/V block (see above) and its size. */
struct burst_fp8_kv_layout {
    int64_t dp, np, kblocks; /* padded d, padded keys, K scales per head */
    size_t k, vt, kscale, vscale, bytes;
};
void burst_fp8_kv_layout(int64_t batch, int64_t n, int64_t h, int64_t d,
                         struct burst_fp8_kv_layout *l);

/* Bytes of a quantized Q of [batch, n, h, d] (e4m3 rows, then the scales at a 128-byte
 * boundary: burst_fp8_q_scales_at), a multiple of 128. */
size_t burst_fp8_q_bytes(int64_t batch, int64_t n, int64_t h, int64_t d);
size_t burst_fp8_q_scales_at(int64_t batch, int64_t n, int64_t h, int64_t d);

/* Host quantizers (the cpu backend's, and the tests' reference): q [B, n, H, d] of any dtype
 * and strides into dst (burst_fp8_q_bytes); k, v [B, n, h, d] into a K/V block at dst
 * (burst_fp8_kv_layout). dst is host memory and fully written. */
void burst_fp8_quant_q_host(const struct burst_tensor *q, unsigned char *dst);
void burst_fp8_quant_kv_host(const struct burst_tensor *k, const struct burst_tensor *v,
                             unsigned char *dst);

#endif /* BURST_RUNTIME_FP8_H */
