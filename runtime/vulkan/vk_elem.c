/*
 * runtime/vulkan/vk_elem.c - copy / fill / accumulate of the Vulkan backend: argument checks,
 * where each call runs, and the loops of the calling-thread path.
 *
 * Two paths, with the same bits (fp32 -> half rounds to nearest even, overflows to inf, keeps
 * subnormals and NaN as a quiet NaN with the cpu backend's payload; an accumulate's sum is the
 * IEEE one, subnormals included; only a NaN sum's payload is unspecified, as in IEEE):
 *   shaders  shaders/elem_{copy,fill,acc}.comp on the backend's queue (vk_elem_gpu.c), with
 *            shaders/convert.glsl, integer ports of runtime/cpu/cpu_convert.h;
 *   cpu      loops on the calling thread over the buffers' host mappings with cpu_convert.h.
 * Choice (BURST_VK_ELEM, read at create, burst_vk_elem_gpu):
 *   auto (default): shaders on a GPU. Its buffers are device-local memory mapped through the
 *        PCIe BAR, which the CPU reads uncached at tens of MB/s (on an H100 a forward whose
 *        kernels took 0.7 s took 91 s with these ops on the CPU). On a cpu device (lavapipe)
 *        the buffers are ordinary host memory and the "device" runs on the same cores: the
 *        cpu path, measured 10 to 20 times faster there (2 cores, 16M elements: copy fp32 ->
 *        bf16 47 ms against 990 ms, fill 22 against 169 ms, accumulate 25 against 525 ms).
 *   gpu / cpu: force one (the tests run the shaders on lavapipe with gpu).
 * With shaders chosen, a call goes to them when the backend owns at least one of its arguments
 * (the whole extent inside one of its buffers, aligned to the element size); an argument it does
 * not own (caller host memory: burstrun's tensors, a user's output) is staged through
 * host-cached memory there (vk_elem_gpu.c), so the CPU never reads device memory. Calls that
 * stay on the cpu path: those owning no argument (host to host), a copy or accumulate whose
 * source and destination memory overlap (the loop's element order defines those), and one
 * whose caller memory the device cannot stage (no host-visible memory that large left).
 *
 * Limits: element offsets and counts are 64-bit and the shaders loop over counts beyond one
 * dispatch grid, so none beyond memory; a view whose extent overflows 64 bits, or a count
 * beyond 2^61 elements, is an INVALID_ARG error naming it.
 */
#include <string.h>

#include "cpu/cpu_convert.h"
#include "error.h"
#include "vk_internal.h"

#define BURST_VK_ELEM_MAX_COUNT ((size_t)1 << 61) /* elements: count * 4 bytes fits in int64 */

int burst_vk_elem_gpu(const struct burst_vk_caps *caps, const struct burst_vk_env *env)
{
    if (env->elem == BURST_VK_ELEM_AUTO)
        return caps->type != VK_PHYSICAL_DEVICE_TYPE_CPU;
    return env->elem == BURST_VK_ELEM_GPU;
}

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

static size_t burst_vk_esize(burst_dtype_t dt)
{
    return dt == BURST_DTYPE_FP32 ? 4 : 2;
}

/* ---- where a call runs --------------------------------------------------------------------- */

/* The bytes a view touches: [first, last] as addresses. Shapes are positive. 0 when the extent
 * overflows 64 bits (an error for the caller to name). */
struct burst_vk_span {
    int64_t lo;            /* element offset of the lowest element from data (<= 0) */
    uintptr_t first, last; /* its first and last byte */
};

static int burst_vk_span_of(const struct burst_tensor *t, struct burst_vk_span *sp)
{
    int64_t lo = 0, hi = 0, n = 1, bytes;
    const int64_t es = (int64_t)burst_vk_esize(t->dtype);
    for (int k = 0; k < BURST_TENSOR_DIMS; k++) {
        int64_t span;
        if (__builtin_mul_overflow(t->shape[k] - 1, t->stride[k], &span) ||
            __builtin_mul_overflow(n, t->shape[k], &n) ||
            __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
            return 0;
    }
    if (__builtin_sub_overflow(hi, lo, &bytes) || __builtin_add_overflow(bytes, 1, &bytes) ||
        __builtin_mul_overflow(bytes, es, &bytes) || __builtin_mul_overflow(n, es, &n))
        return 0;
    sp->lo = lo;
    sp->first = (uintptr_t)t->data + (uintptr_t)(lo * es); /* lo <= 0: wraps to a subtraction */
    sp->last = sp->first + (uintptr_t)bytes - 1;
    return 1;
}

/* Device address of element 0 of a view spanning sp, when the backend owns the whole span at an
 * address aligned to the element size; else 0. */
static VkDeviceAddress burst_vk_owned(struct burst_vk_backend *be, const struct burst_tensor *t,
                                      const struct burst_vk_span *sp)
{
    const size_t es = burst_vk_esize(t->dtype);
    VkDeviceAddress a =
        burst_vk_lookup(be, (const void *)sp->first, (size_t)(sp->last - sp->first) + 1);
    if (!a)
        return 0;
    a -= (VkDeviceAddress)(sp->lo * (int64_t)es);
    return a % es == 0 ? a : 0;
}

static int burst_vk_overlap(const struct burst_vk_span *a, const struct burst_vk_span *b)
{
    return a->first <= b->last && b->first <= a->last;
}

static burst_status_t burst_vk_span_error(const char *op, const char *name,
                                          const struct burst_tensor *t)
{
    return burst_error(BURST_ERR_INVALID_ARG,
                       "%s: %s spans more than 2^63 bytes (shape [%lld, %lld, %lld, %lld], stride "
                       "[%lld, %lld, %lld, %lld])",
                       op, name, (long long)t->shape[0], (long long)t->shape[1],
                       (long long)t->shape[2], (long long)t->shape[3], (long long)t->stride[0],
                       (long long)t->stride[1], (long long)t->stride[2], (long long)t->stride[3]);
}

/* ---- the ops ------------------------------------------------------------------------------- */

static void burst_vk_copy_cpu(const struct burst_tensor *dst, const struct burst_tensor *src)
{
    const size_t ds = burst_vk_esize(dst->dtype), ss = burst_vk_esize(src->dtype);
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
}

burst_status_t burst_vk_copy(void *bev, const struct burst_tensor *dst,
                             const struct burst_tensor *src)
{
    struct burst_vk_backend *be = bev;
    const char *op = "vulkan copy";
    if (!dst || !src || !dst->data || !src->data)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: dst or src (or its data) is NULL", op);
    if (!burst_vk_dtype_ok(dst->dtype) || !burst_vk_dtype_ok(src->dtype))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: bad dtype (dst %d, src %d)", op,
                           (int)dst->dtype, (int)src->dtype);
    int empty = 0;
    for (int k = 0; k < BURST_TENSOR_DIMS; k++) {
        if (dst->shape[k] != src->shape[k] || src->shape[k] < 0)
            return burst_error(BURST_ERR_INVALID_ARG, "%s: shape[%d] differs (dst %lld, src %lld)",
                               op, k, (long long)dst->shape[k], (long long)src->shape[k]);
        empty |= src->shape[k] == 0;
    }
    if (src->shape[3] > 1 && (src->stride[3] != 1 || dst->stride[3] != 1))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: stride[3] must be 1 (dst %lld, src %lld)",
                           op, (long long)dst->stride[3], (long long)src->stride[3]);
    if (empty)
        return BURST_OK;
    struct burst_vk_span sd, ss;
    if (!burst_vk_span_of(dst, &sd))
        return burst_vk_span_error(op, "dst", dst);
    if (!burst_vk_span_of(src, &ss))
        return burst_vk_span_error(op, "src", src);
    if (be->elem_gpu) {
        struct burst_vk_elem_arg args[2] = {{dst, burst_vk_owned(be, dst, &sd), 0, 1},
                                            {src, burst_vk_owned(be, src, &ss), 1, 0}};
        if ((args[0].addr || args[1].addr) && !burst_vk_overlap(&sd, &ss)) {
            struct burst_vk_elem_params p = {0};
            memcpy(p.shape, src->shape, sizeof p.shape);
            p.units = (uint64_t)(src->shape[0] * src->shape[1] * src->shape[2]) *
                      (uint64_t)((src->shape[3] + 1) / 2);
            int unstaged;
            burst_status_t st = burst_vk_elem_run(be, BURST_VK_COPY, &p, args, 2, &unstaged);
            if (st != BURST_OK || !unstaged)
                return st;
        }
    }
    burst_vk_copy_cpu(dst, src);
    return BURST_OK;
}

/* A fill / accumulate argument as a contiguous [1, 1, 1, count] view. */
static struct burst_tensor burst_vk_flat(const void *p, burst_dtype_t dt, size_t count)
{
    const int64_t n = (int64_t)count;
    return (struct burst_tensor){(void *)p, dt, {1, 1, 1, n}, {n, n, n, 1}};
}

burst_status_t burst_vk_fill(void *bev, float *dst, size_t count, float value)
{
    struct burst_vk_backend *be = bev;
    if (count == 0)
        return BURST_OK;
    if (!dst)
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan fill: dst is NULL (count = %zu)", count);
    if (count > BURST_VK_ELEM_MAX_COUNT)
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan fill: count = %zu exceeds 2^61 elements",
                           count);
    if (be->elem_gpu) {
        struct burst_tensor t = burst_vk_flat(dst, BURST_DTYPE_FP32, count);
        struct burst_vk_span sp;
        struct burst_vk_elem_arg arg = {&t, 0, 0, 1};
        if (burst_vk_span_of(&t, &sp) && (arg.addr = burst_vk_owned(be, &t, &sp)) != 0) {
            struct burst_vk_elem_params p = {0};
            memcpy(p.shape, t.shape, sizeof p.shape);
            p.units = count;
            memcpy(&p.value, &value, sizeof p.value);
            int unstaged; /* never: dst is owned */
            return burst_vk_elem_run(be, BURST_VK_FILL, &p, &arg, 1, &unstaged);
        }
    }
    for (size_t i = 0; i < count; i++)
        dst[i] = value;
    return BURST_OK;
}

burst_status_t burst_vk_accumulate(void *bev, float *dst, const void *src, burst_dtype_t src_dtype,
                                   size_t count)
{
    struct burst_vk_backend *be = bev;
    const char *op = "vulkan accumulate";
    if (count == 0)
        return BURST_OK;
    if (!dst || !src)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: dst or src is NULL", op);
    if (!burst_vk_dtype_ok(src_dtype))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: src_dtype = %d is unknown", op,
                           (int)src_dtype);
    if (count > BURST_VK_ELEM_MAX_COUNT)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: count = %zu exceeds 2^61 elements", op,
                           count);
    if (be->elem_gpu) {
        struct burst_tensor td = burst_vk_flat(dst, BURST_DTYPE_FP32, count);
        struct burst_tensor ts = burst_vk_flat(src, src_dtype, count);
        struct burst_vk_span sd, ss;
        if (burst_vk_span_of(&td, &sd) && burst_vk_span_of(&ts, &ss) &&
            !burst_vk_overlap(&sd, &ss)) {
            struct burst_vk_elem_arg args[2] = {{&td, burst_vk_owned(be, &td, &sd), 1, 1},
                                                {&ts, burst_vk_owned(be, &ts, &ss), 1, 0}};
            if (args[0].addr || args[1].addr) {
                struct burst_vk_elem_params p = {0};
                memcpy(p.shape, td.shape, sizeof p.shape);
                p.units = count;
                int unstaged;
                burst_status_t st = burst_vk_elem_run(be, BURST_VK_ACC, &p, args, 2, &unstaged);
                if (st != BURST_OK || !unstaged)
                    return st;
            }
        }
    }
    for (size_t i = 0; i < count; i++)
        dst[i] += burst_vk_get(src, src_dtype, (int64_t)i);
    return BURST_OK;
}
