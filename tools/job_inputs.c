/* tools/job_inputs.c - the job's random inputs: a counter-based stream, so that any rank
 * draws its own shard alone, in the same values a sequential fill gives. */
#include "job_internal.h"
#include "job_size.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ref.h"

/* ---- random inputs ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Roughly standard normal: the sum of four 16-bit uniforms, centred and scaled. */
static float rand_normalish(uint64_t *s)
{
    uint64_t x = splitmix64(s);
    double sum = (double)(x & 0xffff) + (double)((x >> 16) & 0xffff) +
                 (double)((x >> 32) & 0xffff) + (double)(x >> 48);
    return (float)((sum / 65536.0 - 2.0) * 1.7320508075688772);
}

static void store_elem(void *base, burst_dtype_t dt, size_t i, float x)
{
    switch (dt) {
    case BURST_DTYPE_FP16: ((uint16_t *)base)[i] = burst_fp32_to_fp16(x); break;
    case BURST_DTYPE_BF16: ((uint16_t *)base)[i] = burst_fp32_to_bf16(x); break;
    default: ((float *)base)[i] = x; break;
    }
}

double job_load_elem(const void *base, burst_dtype_t dt, size_t i)
{
    switch (dt) {
    case BURST_DTYPE_FP16: return burst_fp16_to_fp32(((const uint16_t *)base)[i]);
    case BURST_DTYPE_BF16: return burst_bf16_to_fp32(((const uint16_t *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

/* ---- inputs ---- */

/* The stream's i-th draw (from 0): splitmix64 is a counter, so rank r draws its elements alone
 * and gets exactly what a sequential fill of the natural-order tensor would give. */
static float rand_at(uint64_t s0, size_t i)
{
    uint64_t s = s0 + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    return rand_normalish(&s);
}

/* Fill rank `rank`'s rows of a global permuted [B, N, H, d] tensor from stream `stream`:
 * element (b, pos, h, e) is draw ((b * N + pos) * H + h) * d + e of the natural-order tensor. */
static void fill_shard(const struct job *j, void *dst, int heads, uint64_t stream, int rank)
{
    const struct job_params *p = j->p;
    uint64_t s0 = p->seed * 0x2545F4914F6CDD1Dull + stream * 0x9E3779B97F4A7C15ull;
    size_t hd = (size_t)heads * (size_t)p->head_dim, N = (size_t)p->seq_len;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t l = 0; l < j->lens[rank]; l++) {
            size_t t = (size_t)(j->offs[rank] + l), pos = (size_t)j->nat[t];
            size_t src = ((size_t)b * N + pos) * hd, at = ((size_t)b * N + t) * hd;
            for (size_t e = 0; e < hd; e++)
                store_elem(dst, p->dtype, at + e, rand_at(s0, src + e));
        }
}

void job_fill_rank_inputs(const struct job *j, int rank)
{
    const struct job_params *p = j->p;
    fill_shard(j, j->q, p->q_heads, 1, rank);
    fill_shard(j, j->k, p->kv_heads, 2, rank);
    fill_shard(j, j->v, p->kv_heads, 3, rank);
    if (p->run_bwd)
        fill_shard(j, j->dout, p->q_heads, 4, rank);
}

void job_sinks(const struct job_params *p, float *sinks)
{
    uint64_t s = p->seed * 0x2545F4914F6CDD1Dull + 5 * 0x9E3779B97F4A7C15ull; /* stream 5 */
    for (int h = 0; h < p->q_heads; h++)
        sinks[h] = (float)(-1.0 + 6.0 * (double)(splitmix64(&s) >> 11) * 0x1p-53);
}
