/*
 * runtime/fp8.c - e4m3 conversions, the layouts of the fp8 forward's operands and their host
 * quantizers (runtime/fp8.h).
 */
#include "fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

uint8_t burst_fp32_to_e4m3(float x)
{
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const float a = fabsf(x);
    if (isnan(x))
        return sign | 0x7f;
    if (a >= BURST_FP8_MAX) /* saturate (infinities too): e4m3 has none */
        return sign | 0x7e;
    if (a < 0x1p-6f) /* subnormal: multiples of 2^-9, 8 of them reaching the smallest normal */
        return sign | (uint8_t)nearbyintf(a * 512.0f);
    int e;
    (void)frexpf(a, &e); /* a = f 2^e, f in [0.5, 1): the exponent of a is e - 1 */
    int m = (int)nearbyintf(ldexpf(a, 4 - e)); /* 8 .. 16: the significand, 3 bits after 1 */
    if (m == 16) {
        m = 8;
        e++;
    }
    return sign | (uint8_t)(((e - 1 + 7) << 3) | (m - 8)); /* a < 448 keeps this <= 0x7e */
}

float burst_e4m3_to_fp32(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    float a;
    if (e == 15 && m == 7)
        a = NAN;
    else if (e == 0)
        a = ldexpf((float)m, -9);
    else
        a = ldexpf((float)(8 + m), e - 10);
    return (b & 0x80) ? -a : a;
}

static size_t up128(size_t x)
{
    return (x + 127) / 128 * 128;
}

void burst_fp8_kv_layout(int64_t batch, int64_t n, int64_t h, int64_t d,
                         struct burst_fp8_kv_layout *l)
{
    l->dp = burst_fp8_dp(d);
    l->np = (n + 31) / 32 * 32;
    l->kblocks = (n + BURST_FP8_KEYS - 1) / BURST_FP8_KEYS;
    l->k = 0;
    l->vt = up128((size_t)(batch * n * h * l->dp));
    l->kscale = l->vt + up128((size_t)(batch * h * d * l->np));
    l->vscale = l->kscale + up128(sizeof(float) * (size_t)(batch * h * l->kblocks));
    l->bytes = l->vscale + up128(sizeof(float) * (size_t)(batch * h));
}

size_t burst_fp8_q_scales_at(int64_t batch, int64_t n, int64_t h, int64_t d)
{
    return up128((size_t)(batch * n * h * burst_fp8_dp(d)));
}

size_t burst_fp8_q_bytes(int64_t batch, int64_t n, int64_t h, int64_t d)
{
    const int64_t blocks = (n + BURST_FP8_QROWS - 1) / BURST_FP8_QROWS;
    return burst_fp8_q_scales_at(batch, n, h, d) +
           up128(sizeof(float) * (size_t)(batch * h * blocks));
}

/* Element (b, i, hh, c) of t as fp32. */
static float at(const struct burst_tensor *t, int64_t b, int64_t i, int64_t hh, int64_t c)
{
    const int64_t o = b * t->stride[0] + i * t->stride[1] + hh * t->stride[2] + c;
    switch (t->dtype) {
    case BURST_DTYPE_FP16: return burst_fp16_to_fp32(((const uint16_t *)t->data)[o]);
    case BURST_DTYPE_BF16: return burst_bf16_to_fp32(((const uint16_t *)t->data)[o]);
    default: return ((const float *)t->data)[o];
    }
}

/* The largest magnitude of rows [i0, i1) of head hh, batch b. */
static float rows_amax(const struct burst_tensor *t, int64_t b, int64_t hh, int64_t i0, int64_t i1)
{
    float amax = 0.0f;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t c = 0; c < t->shape[3]; c++)
            amax = fmaxf(amax, fabsf(at(t, b, i, hh, c)));
    return amax;
}

/* A block's scale, and the factor its values are multiplied by (runtime/fp8.h). */
static float amax_scale(float amax)
{
    return amax > 0.0f ? amax / BURST_FP8_MAX : 1.0f;
}
static float amax_inv(float amax)
{
    return amax > 0.0f ? fminf(BURST_FP8_MAX / amax, FLT_MAX) : 1.0f;
}

/* Rows [i0, i1) of head hh, batch b, times inv, as e4m3 rows of pitch dp of a [B, n, H, dp]
 * array at dst (zeros after d). */
static void quant_rows(const struct burst_tensor *t, int64_t b, int64_t hh, int64_t i0, int64_t i1,
                       float inv, uint8_t *dst)
{
    const int64_t n = t->shape[1], h = t->shape[2], d = t->shape[3], dp = burst_fp8_dp(d);
    for (int64_t i = i0; i < i1; i++) {
        uint8_t *row = dst + ((b * n + i) * h + hh) * dp;
        for (int64_t c = 0; c < dp; c++)
            row[c] = c < d ? burst_fp32_to_e4m3(at(t, b, i, hh, c) * inv) : 0;
    }
}

void burst_fp8_quant_q_host(const struct burst_tensor *q, unsigned char *dst)
{
    const int64_t B = q->shape[0], n = q->shape[1], h = q->shape[2], d = q->shape[3];
    const int64_t blocks = (n + BURST_FP8_QROWS - 1) / BURST_FP8_QROWS;
    float *scales = (float *)(void *)(dst + burst_fp8_q_scales_at(B, n, h, d));
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t t = 0; t < blocks; t++) {
                const int64_t i0 = t * BURST_FP8_QROWS;
                const int64_t i1 = i0 + BURST_FP8_QROWS < n ? i0 + BURST_FP8_QROWS : n;
                const float amax = rows_amax(q, b, hh, i0, i1);
                scales[(b * h + hh) * blocks + t] = amax_scale(amax);
                quant_rows(q, b, hh, i0, i1, amax_inv(amax), dst);
            }
}

void burst_fp8_quant_kv_host(const struct burst_tensor *k, const struct burst_tensor *v,
                             unsigned char *dst)
{
    const int64_t B = k->shape[0], n = k->shape[1], h = k->shape[2], d = k->shape[3];
    struct burst_fp8_kv_layout l;
    burst_fp8_kv_layout(B, n, h, d, &l);
    float *ks = (float *)(void *)(dst + l.kscale), *vs = (float *)(void *)(dst + l.vscale);
    uint8_t *vt = dst + l.vt;
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            for (int64_t t = 0; t < l.kblocks; t++) {
                const int64_t i0 = t * BURST_FP8_KEYS;
                const int64_t i1 = i0 + BURST_FP8_KEYS < n ? i0 + BURST_FP8_KEYS : n;
                const float amax = rows_amax(k, b, hh, i0, i1);
                ks[(b * h + hh) * l.kblocks + t] = amax_scale(amax);
                quant_rows(k, b, hh, i0, i1, amax_inv(amax), dst + l.k);
            }
            const float amax = rows_amax(v, b, hh, 0, n), inv = amax_inv(amax);
            vs[b * h + hh] = amax_scale(amax);
            uint8_t *rows = vt + (b * h + hh) * d * l.np; /* [d, np] of this head */
            memset(rows, 0, (size_t)(d * l.np));
            for (int64_t j = 0; j < n; j++) {
                const int64_t col = j / 32 * 32 + burst_fp8_vt_col((int)(j % 32));
                for (int64_t c = 0; c < d; c++)
                    rows[c * l.np + col] = burst_fp32_to_e4m3(at(v, b, j, hh, c) * inv);
            }
        }
}
