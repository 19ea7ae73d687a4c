/* runtime/tensor.c - dtypes, descriptors, half conversions and tensor validation. */
#include <stddef.h>
#include <string.h>

#include "burst/tensor.h"
#include "error.h"
#include "tensor_check.h"

size_t burst_dtype_size(burst_dtype_t dtype)
{
    switch (dtype) {
    case BURST_DTYPE_FP32: return 4;
    case BURST_DTYPE_FP16:
    case BURST_DTYPE_BF16: return 2;
    }
    return 0;
}

const char *burst_dtype_name(burst_dtype_t dtype)
{
    switch (dtype) {
    case BURST_DTYPE_FP32: return "fp32";
    case BURST_DTYPE_FP16: return "fp16";
    case BURST_DTYPE_BF16: return "bf16";
    }
    return "unknown";
}

struct burst_tensor burst_tensor_contiguous(void *data, burst_dtype_t dtype, int64_t batch,
                                            int64_t seq, int64_t heads, int64_t head_dim)
{
    struct burst_tensor t = {
        .data = data,
        .dtype = dtype,
        .shape = {batch, seq, heads, head_dim},
        .stride = {seq * heads * head_dim, heads * head_dim, head_dim, 1},
    };
    return t;
}

uint16_t burst_fp32_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: half subnormal or zero */
        if (a < 0x33000000u)
            return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e, r = m >> shift, rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (a - 0x38000000u) >> 13, rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

float burst_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;
    if (e == 0) {
        f = (float)m * 0x1p-24f;
        memcpy(&x, &f, sizeof(x));
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t burst_fp32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float burst_bf16_to_fp32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* r = a * b for a, b >= 0; zero when it would not fit in int64. */
static int mul_fits(int64_t a, int64_t b, int64_t *r)
{
    if (a != 0 && b > INT64_MAX / a)
        return 0;
    *r = a * b;
    return 1;
}

burst_status_t burst_tensor_check_view(const char *who, const char *name,
                                       const struct burst_tensor *t, int output)
{
    if (!t)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL", who, name);
    if (!t->data)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->data is NULL", who, name);
    if (burst_dtype_size(t->dtype) == 0)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->dtype = %d is not a burst_dtype_t", who,
                           name, (int)t->dtype);
    for (int i = 0; i < BURST_TENSOR_DIMS; i++) {
        if (t->shape[i] <= 0)
            return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->shape[%d] = %lld must be > 0", who,
                               name, i, (long long)t->shape[i]);
        if (t->stride[i] <= 0)
            return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->stride[%d] = %lld must be > 0", who,
                               name, i, (long long)t->stride[i]);
    }
    if (t->stride[3] != 1)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s->stride[3] = %lld: the head dimension must be contiguous (1)",
                           who, name, (long long)t->stride[3]);
    /* The whole view must be addressable: offset of the last element, in bytes, fits. */
    int64_t last = 0, term;
    const int64_t limit = (int64_t)(PTRDIFF_MAX / 8);
    for (int i = 0; i < BURST_TENSOR_DIMS; i++) {
        if (!mul_fits(t->shape[i] - 1, t->stride[i], &term) || term > limit - last)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: %s->stride[%d] = %lld with shape[%d] = %lld puts elements "
                               "beyond any addressable memory",
                               who, name, i, (long long)t->stride[i], i, (long long)t->shape[i]);
        last += term;
    }
    if (output) {
        /* No self-overlap: ordered by stride, each dimension must step over the whole extent of
         * the dimensions inside it. */
        int ord[BURST_TENSOR_DIMS] = {0, 1, 2, 3};
        for (int i = 1; i < BURST_TENSOR_DIMS; i++)
            for (int j = i; j > 0 && t->stride[ord[j]] < t->stride[ord[j - 1]]; j--) {
                int tmp = ord[j];
                ord[j] = ord[j - 1];
                ord[j - 1] = tmp;
            }
        int64_t span = 1; /* elements covered by the inner dimensions so far */
        for (int i = 0; i < BURST_TENSOR_DIMS; i++) {
            int dim = ord[i];
            if (t->shape[dim] == 1)
                continue;
            if (t->stride[dim] < span) /* span <= last + 1: no overflow below */
                return burst_error(BURST_ERR_INVALID_ARG,
                                   "%s: %s->stride[%d] = %lld overlaps the inner dimensions "
                                   "(needs >= %lld): an output must not alias itself",
                                   who, name, dim, (long long)t->stride[dim], (long long)span);
            span = t->stride[dim] * t->shape[dim];
        }
    }
    return BURST_OK;
}

burst_status_t burst_tensor_check(const char *who, const char *name, const struct burst_tensor *t,
                                  burst_dtype_t dtype, int64_t b, int64_t n, int64_t h, int64_t d,
                                  int output)
{
    static const char *dim_names[BURST_TENSOR_DIMS] = {"batch", "tokens", "heads", "head_dim"};
    burst_status_t st = burst_tensor_check_view(who, name, t, output);
    if (st != BURST_OK)
        return st;
    if (t->dtype != dtype)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s->dtype = %s differs from the plan's dtype %s (mixed dtypes)",
                           who, name, burst_dtype_name(t->dtype), burst_dtype_name(dtype));
    const int64_t want[BURST_TENSOR_DIMS] = {b, n, h, d};
    for (int i = 0; i < BURST_TENSOR_DIMS; i++)
        if (t->shape[i] != want[i])
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: %s->shape[%d] (%s) = %lld, the plan needs %lld", who, name, i,
                               dim_names[i], (long long)t->shape[i], (long long)want[i]);
    return BURST_OK;
}

static void extent(const struct burst_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    int64_t last = 0;
    for (int i = 0; i < BURST_TENSOR_DIMS; i++)
        last += (t->shape[i] - 1) * t->stride[i];
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)burst_dtype_size(t->dtype));
}

int burst_tensor_ranges_overlap(const struct burst_tensor *a, const struct burst_tensor *b)
{
    uintptr_t alo, ahi, blo, bhi;
    extent(a, &alo, &ahi);
    extent(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}
