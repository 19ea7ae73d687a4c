/*
 * runtime/vulkan/vk_elem.c - copy / fill / accumulate of the Vulkan backend.
 *
 * Every buffer of this backend is host-addressable and coherent, and ops are synchronous (each
 * kernel call has completed when it returns), so these run on the calling thread with the cpu
 * backend's bit-exact converters (round to nearest even, NaN kept, subnormals kept).
 */
#include <string.h>

#include "cpu/cpu_convert.h"
#include "error.h"
#include "vk_internal.h"

static float burst_vk_get(const void *p, burst_dtype_t dt, int64_t i)
{
    switch (dt) {
    case BURST_DTYPE_FP16: return burst_cpu_f16_to_f32(((const uint16_t *)p)[i]);
    case BURST_DTYPE_BF16: return burst_cpu_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void burst_vk_put(void *p, burst_dtype_t dt, int64_t i, float x)
{
    switch (dt) {
    case BURST_DTYPE_FP16: ((uint16_t *)p)[i] = burst_cpu_f32_to_f16(x); break;
    case BURST_DTYPE_BF16: ((uint16_t *)p)[i] = burst_cpu_f32_to_bf16(x); break;
    default: ((float *)p)[i] = x;
    }
}

static int burst_vk_dtype_ok(burst_dtype_t dt)
{
    return dt == BURST_DTYPE_FP32 || dt == BURST_DTYPE_FP16 || dt == BURST_DTYPE_BF16;
}

burst_status_t burst_vk_copy(void *be, const struct burst_tensor *dst,
                             const struct burst_tensor *src)
{
    (void)be;
    if (!dst || !src || !dst->data || !src->data)
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan copy: dst or src (or its data) is NULL");
    if (!burst_vk_dtype_ok(dst->dtype) || !burst_vk_dtype_ok(src->dtype))
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan copy: bad dtype (dst %d, src %d)",
                           (int)dst->dtype, (int)src->dtype);
    for (int k = 0; k < BURST_TENSOR_DIMS; k++)
        if (dst->shape[k] != src->shape[k] || src->shape[k] < 0)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "vulkan copy: shape[%d] differs (dst %lld, src %lld)", k,
                               (long long)dst->shape[k], (long long)src->shape[k]);
    if (src->shape[3] > 1 && (src->stride[3] != 1 || dst->stride[3] != 1))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "vulkan copy: stride[3] must be 1 (dst %lld, src %lld)",
                           (long long)dst->stride[3], (long long)src->stride[3]);
    size_t ds = dst->dtype == BURST_DTYPE_FP32 ? 4 : 2, ss = src->dtype == BURST_DTYPE_FP32 ? 4 : 2;
    const int64_t d = src->shape[3];
    for (int64_t b = 0; b < src->shape[0]; b++)
        for (int64_t i = 0; i < src->shape[1]; i++)
            for (int64_t h = 0; h < src->shape[2]; h++) {
                const char *s =
                    (const char *)src->data +
                    (b * src->stride[0] + i * src->stride[1] + h * src->stride[2]) * (int64_t)ss;
                char *o =
                    (char *)dst->data +
                    (b * dst->stride[0] + i * dst->stride[1] + h * dst->stride[2]) * (int64_t)ds;
                if (dst->dtype == src->dtype) {
                    memmove(o, s, (size_t)d * ds);
                } else {
                    for (int64_t c = 0; c < d; c++)
                        burst_vk_put(o, dst->dtype, c, burst_vk_get(s, src->dtype, c));
                }
            }
    return BURST_OK;
}

burst_status_t burst_vk_fill(void *be, float *dst, size_t count, float value)
{
    (void)be;
    if (count == 0)
        return BURST_OK;
    if (!dst)
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan fill: dst is NULL (count = %zu)", count);
    for (size_t i = 0; i < count; i++)
        dst[i] = value;
    return BURST_OK;
}

burst_status_t burst_vk_accumulate(void *be, float *dst, const void *src, burst_dtype_t src_dtype,
                                   size_t count)
{
    (void)be;
    if (count == 0)
        return BURST_OK;
    if (!dst || !src)
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan accumulate: dst or src is NULL");
    if (!burst_vk_dtype_ok(src_dtype))
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan accumulate: src_dtype = %d is unknown",
                           (int)src_dtype);
    for (size_t i = 0; i < count; i++)
        dst[i] += burst_vk_get(src, src_dtype, (int64_t)i);
    return BURST_OK;
}
