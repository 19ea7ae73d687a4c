/*
 * tests/test_vk_elem.c - the Vulkan backend's copy / fill / accumulate shaders
 * (shaders/elem_*.comp, runtime/vulkan/vk_elem.c + vk_elem_gpu.c), bit for bit against the cpu
 * converters (runtime/cpu/cpu_convert.h) and the cpu's IEEE add. Suite vulkan; exit 77 (SKIP)
 * without a Vulkan device. Runs on three instances of the backend:
 *   gpu   BURST_VK_ELEM=gpu: the shaders, whatever the device (lavapipe included);
 *   grid  the same with BURST_VK_ELEM_GROUPS=3: grids of at most 3 x 3 workgroups, so every
 *         dispatch has several rows and the shaders loop over the rest;
 *   cpu   BURST_VK_ELEM=cpu: the calling-thread path, which must give the same bits.
 * Cases:
 *   - copy, every (src, dst) dtype pair: every fp16 / bf16 bit pattern, and fp32 patterns aimed
 *     at the rounding (ties to even at every half-precision position, subnormal halves, overflow
 *     to inf, NaN payloads, signalling NaNs) plus random bits;
 *   - copy of strided views: padded rows and heads, a transposed layout, a reversed dimension
 *     (negative stride), odd head dims whose rows share 32-bit words, rows starting at odd
 *     half-type addresses, d = 1 with any stride[3]; each with src and dst in backend buffers
 *     and with either one in plain host memory (staged), the gaps between rows poisoned and
 *     checked to be untouched;
 *   - fill (NaN payloads, -0, subnormals) and accumulate (every src dtype; subnormal sums,
 *     cancellation to subnormals, ties), elements past the count poisoned;
 *   - counts that need more than one grid row of 65535 workgroups (no cap);
 *   - calls whose arguments the backend does not own at all stay on the cpu (no pipeline built),
 *     as do overlapping copies and copies whose caller memory is too large to stage;
 *   - bad arguments: errors naming the argument and value, BURST_VK_ELEM=bogus failing create.
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

#include "cpu/cpu_convert.h"
#include "harness.h"
#include "vulkan/vk_internal.h"

static const struct burst_backend_ops *ops = &burst_vk_backend_ops;
static void *be_gpu, *be_grid, *be_cpu;
static uint64_t seed;

#define NDT 3
static const burst_dtype_t dtypes[NDT] = {BURST_DTYPE_FP32, BURST_DTYPE_FP16, BURST_DTYPE_BF16};
static const char *const dt_names[NDT] = {"fp32", "fp16", "bf16"};

static size_t esize(burst_dtype_t dt)
{
    return dt == BURST_DTYPE_FP32 ? 4 : 2;
}

static const char *dt_name(burst_dtype_t dt)
{
    return dt_names[dt == BURST_DTYPE_FP32 ? 0 : dt == BURST_DTYPE_FP16 ? 1 : 2];
}

static uint64_t mix(uint64_t x)
{
    uint64_t s = x ^ seed;
    return harness_rng_next(&s);
}

/* ---- values -------------------------------------------------------------------------------- */

/* clang-format off */
static const uint32_t f32_special[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, /* zeros, infs */
    0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff812345u, /* NaNs: quiet, signalling, payloads */
    0x7fbfffffu, 0x7fe00000u, 0x00000001u, 0x807fffffu, /* more NaNs; subnormals */
    0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u, /* smallest normal, max, 1 */
    0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u, /* 65504, just below 65520, 65520 -> inf */
    0x47800000u, 0x38800000u, 0x387fffffu, 0x33000000u, /* 65536, 2^-14, below, 2^-25 (tie->0) */
    0x33000001u, 0x33800000u, 0x33c00000u, 0x34200000u, /* above 2^-25, 2^-24, 1.5 2^-24 ties */
    0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x3f801001u, /* fp16 ties to even (down, up), near */
    0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, /* bf16 ties to even (down, up), near */
    0x7f7f8000u, 0x7f7f7fffu, 0xff7f8000u, 0x3a000000u, /* bf16 overflow tie -> inf, below */
};
/* clang-format on */
#define N_SPECIAL (sizeof f32_special / sizeof *f32_special)

/* fp32 bits number i of a stream aimed at the conversions' edges (sign random). */
static uint32_t gen_f32(uint64_t i)
{
    uint64_t r = mix(i * 0x9e3779b97f4a7c15ull + 17);
    uint32_t lo = (uint32_t)r, hi = (uint32_t)(r >> 32), sign = hi & 0x80000000u;
    static const uint32_t low13[] = {0xfffu, 0x1000u, 0x1001u, 0u, 0x1fffu, 0x2000u, 0x3000u};
    static const uint32_t low16[] = {0x7fffu, 0x8000u, 0x8001u, 0u, 0xffffu, 0x18000u};
    switch (i % 8) {
    case 0: return lo;
    case 1: return f32_special[(i / 8) % N_SPECIAL] ^ (i / 8 / N_SPECIAL % 2 ? 0x80000000u : 0);
    case 2: { /* the fp16 normal range, the 13 dropped bits at and around a tie */
        uint32_t e = 112u + hi % 32u;
        return sign | e << 23 | (lo & 0x7fe000u) | low13[(hi >> 8) % 7];
    }
    case 3: { /* fp16 subnormal results: m >> (126 - e) with the rest at and around a tie */
        uint32_t e = 101u + hi % 13u, s = 126u - e < 24u ? 126u - e : 23u;
        uint32_t half = 1u << (s - 1u), pick = (hi >> 8) % 5u;
        uint32_t rest = pick == 0   ? half
                        : pick == 1 ? half - 1u
                        : pick == 2 ? half + 1u
                        : pick == 3 ? 0u
                                    : (1u << s) - 1u;
        return sign | e << 23 | ((lo & 0x7fffffu) & ~((1u << s) - 1u)) | rest;
    }
    case 4: /* bf16 rounding: the 16 dropped bits at and around a tie */
        return sign | ((lo & 0x7fff0000u) ^ (hi & 0x00fe0000u)) | low16[(hi >> 8) % 6];
    case 5: /* tiny: subnormals and the smallest normals */
        return sign | (hi % 31u) << 23 | (lo & 0x7fffffu);
    case 6: /* NaNs with random payloads, quiet or signalling */
        return sign | 0x7f800000u | ((lo & 0x7fffffu) ? (lo & 0x7fffffu) : 1u);
    default: /* near the largest fp16 and bf16 values */
        return sign | (hi & 1u ? 0x477fe000u + (lo & 0x3fffu) : 0x7f7f0000u + (lo & 0xffffu));
    }
}

/* Source bits of element i: every pattern in turn for half types, gen_f32 for fp32. */
static uint32_t gen_src(burst_dtype_t dt, uint64_t i)
{
    if (dt == BURST_DTYPE_FP32)
        return gen_f32(i);
    return (uint32_t)(i * 40503u + (i >> 16) * 7u) & 0xffffu; /* a permutation of each 65536 */
}

/* The cpu converters: what the copy of element bits x from dtype s to dtype d must give. */
static uint32_t expect_convert(burst_dtype_t s, burst_dtype_t d, uint32_t x)
{
    if (s == d)
        return x;
    float f = s == BURST_DTYPE_FP32   ? burst_cpu_bits_f32(x)
              : s == BURST_DTYPE_FP16 ? burst_cpu_f16_to_f32((uint16_t)x)
                                      : burst_cpu_bf16_to_f32((uint16_t)x);
    return d == BURST_DTYPE_FP32   ? burst_cpu_f32_bits(f)
           : d == BURST_DTYPE_FP16 ? burst_cpu_f32_to_f16(f)
                                   : burst_cpu_f32_to_bf16(f);
}

static uint32_t get_bits(burst_dtype_t dt, const void *base, int64_t i)
{
    if (dt == BURST_DTYPE_FP32) {
        uint32_t u;
        memcpy(&u, (const unsigned char *)base + i * 4, 4);
        return u;
    }
    uint16_t h;
    memcpy(&h, (const unsigned char *)base + i * 2, 2);
    return h;
}

static void put_bits(burst_dtype_t dt, void *base, int64_t i, uint32_t x)
{
    if (dt == BURST_DTYPE_FP32) {
        memcpy((unsigned char *)base + i * 4, &x, 4);
    } else {
        uint16_t h = (uint16_t)x;
        memcpy((unsigned char *)base + i * 2, &h, 2);
    }
}

#define POISON32 0xa5a5a5a5u /* a normal negative number no conversion here produces */

/* ---- views in backend or host memory, with poisoned gaps ----------------------------------- */

struct view {
    struct burst_tensor t;
    unsigned char *base; /* the whole allocation */
    int64_t nelem;       /* elements of dtype in it */
    int64_t off0;        /* element offset of t.data from base */
    int owned;           /* base is a backend allocation of be */
    void *be;
};

/* A view of shape sh with strides st (any sign) whose lowest element sits `shift` elements into
 * a fresh allocation with one spare element at the end; everything poisoned. */
static void view_make(struct view *v, void *be, int owned, burst_dtype_t dt, const int64_t sh[4],
                      const int64_t st[4], int64_t shift)
{
    int64_t lo = 0, hi = 0;
    for (int k = 0; k < 4; k++) {
        int64_t span = (sh[k] - 1) * st[k];
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    v->nelem = hi - lo + 1 + shift + 1;
    size_t bytes = (size_t)v->nelem * esize(dt);
    v->be = be;
    v->owned = owned;
    v->base = owned ? ops->mem.alloc(be, bytes) : malloc(bytes);
    assert_non_null(v->base);
    for (int64_t i = 0; i < v->nelem; i++)
        put_bits(dt, v->base, i, POISON32);
    v->off0 = shift - lo;
    v->t = (struct burst_tensor){v->base + v->off0 * (int64_t)esize(dt),
                                 dt,
                                 {sh[0], sh[1], sh[2], sh[3]},
                                 {st[0], st[1], st[2], st[3]}};
}

static void view_free(struct view *v)
{
    if (v->owned)
        ops->mem.free(v->be, v->base);
    else
        free(v->base);
}

/* Element offset (from base) of logical element idx = ((b * n + i) * H + h) * d + c. */
static int64_t view_off(const struct view *v, int64_t idx)
{
    const int64_t *sh = v->t.shape, *st = v->t.stride;
    int64_t c = idx % sh[3], h = idx / sh[3] % sh[2], i = idx / sh[3] / sh[2] % sh[1];
    int64_t b = idx / sh[3] / sh[2] / sh[1];
    return v->off0 + b * st[0] + i * st[1] + h * st[2] + c * (sh[3] > 1 ? st[3] : 0);
}

static int64_t view_count(const struct view *v)
{
    return v->t.shape[0] * v->t.shape[1] * v->t.shape[2] * v->t.shape[3];
}

/* ---- copy ---------------------------------------------------------------------------------- */

struct layout {
    const char *name;
    int64_t sh[4], sst[4], dst[4]; /* shape, src strides, dst strides */
    int64_t sshift, dshift;        /* elements before the lowest one */
};

/* Copy src -> dst on be, then check every element of dst's allocation: the view's elements
 * are the converted source, everything else is still poison. Returns the mismatches. */
static int check_copy(void *be, const char *what, const struct layout *l, burst_dtype_t sd,
                      burst_dtype_t dd, int src_owned, int dst_owned, uint64_t salt)
{
    struct view s, d;
    view_make(&s, be, src_owned, sd, l->sh, l->sst, l->sshift);
    view_make(&d, be, dst_owned, dd, l->sh, l->dst, l->dshift);
    int64_t n = view_count(&s);
    for (int64_t i = 0; i < n; i++)
        put_bits(sd, s.base, view_off(&s, i), gen_src(sd, (uint64_t)i + salt));
    burst_status_t st = ops->elem.copy(be, &d.t, &s.t);
    if (st != BURST_OK)
        fail_msg("%s: copy %s %s -> %s failed: %s", what, l->name, dt_name(sd), dt_name(dd),
                 burst_last_error());
    unsigned char *in_view = calloc((size_t)d.nelem, 1);
    assert_non_null(in_view);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t o = view_off(&d, i);
        in_view[o] = 1;
        uint32_t x = get_bits(sd, s.base, view_off(&s, i)); /* broadcast views repeat */
        uint32_t want = expect_convert(sd, dd, x), got = get_bits(dd, d.base, o);
        if (got != want && bad++ < 5)
            print_error("%s: %s %s -> %s (src %s, dst %s): element %lld: src 0x%08x, got 0x%08x, "
                        "want 0x%08x\n",
                        what, l->name, dt_name(sd), dt_name(dd), src_owned ? "owned" : "host",
                        dst_owned ? "owned" : "host", (long long)i, x, got, want);
    }
    uint32_t poison = dd == BURST_DTYPE_FP32 ? POISON32 : (POISON32 & 0xffffu);
    for (int64_t o = 0; o < d.nelem; o++)
        if (!in_view[o] && get_bits(dd, d.base, o) != poison && bad++ < 5)
            print_error("%s: %s %s -> %s: element %lld of the allocation outside the view was "
                        "written (0x%08x)\n",
                        what, l->name, dt_name(sd), dt_name(dd), (long long)o,
                        get_bits(dd, d.base, o));
    free(in_view);
    view_free(&s);
    view_free(&d);
    return bad;
}

/* Has be built the pipeline of elementwise kernel k for (src, dst) dtypes? */
static int built(void *bev, enum burst_vk_kernel k, burst_dtype_t sd, burst_dtype_t dd)
{
    struct burst_vk_backend *be = bev;
    for (size_t i = 0; i < be->npipes; i++)
        if (be->pipes[i].key[0] == (uint32_t)k && be->pipes[i].key[5] == (uint32_t)sd &&
            be->pipes[i].key[6] == (uint32_t)dd)
            return 1;
    return 0;
}

/* Every bit pattern of the half types, the fp32 edge stream, every dtype pair; contiguous. */
static void copy_all_patterns(void **state)
{
    (void)state;
    const struct layout l16 = {
        "all patterns", {1, 256, 1, 256}, {65536, 256, 256, 1}, {65536, 256, 256, 1}, 0, 0};
    const struct layout l32 = {
        "fp32 edges", {1, 331, 1, 999}, {331 * 999, 999, 999, 1}, {331 * 999, 999, 999, 1}, 0, 0};
    int bad = 0;
    for (int a = 0; a < NDT; a++)
        for (int b = 0; b < NDT; b++) {
            const struct layout *l = dtypes[a] == BURST_DTYPE_FP32 ? &l32 : &l16;
            bad += check_copy(be_gpu, "gpu", l, dtypes[a], dtypes[b], 1, 1, 0);
            bad += check_copy(be_cpu, "cpu", l, dtypes[a], dtypes[b], 1, 1, 0);
            assert_true(built(be_gpu, BURST_VK_COPY, dtypes[a], dtypes[b]));
        }
    assert_false(built(be_cpu, BURST_VK_COPY, BURST_DTYPE_FP32, BURST_DTYPE_FP16));
    assert_int_equal(bad, 0);
}

/* Strided views; each in backend memory and with either side in host memory. */
static const struct layout layouts[] = {
    {"contiguous odd d", {2, 5, 3, 7}, {105, 21, 7, 1}, {105, 21, 7, 1}, 0, 0},
    {"padded", {2, 5, 3, 7}, {5 * 4 * 9 + 3, 36, 9, 1}, {5 * 3 * 8 + 1, 24, 8, 1}, 0, 0},
    {"transposed, odd start", {2, 5, 3, 6}, {90, 18, 6, 1}, {3 * 5 * 8 + 2, 8, 5 * 8, 1}, 1, 3},
    {"reversed n", {2, 6, 2, 5}, {60, -10, 5, 1}, {60, 10, 5, 1}, 0, 1},
    {"odd strides", {3, 4, 3, 3}, {41, 10, 3, 1}, {37, 9, 3, 1}, 1, 1},
    {"d = 1", {2, 3, 4, 1}, {12, 4, 1, 7}, {24, 8, 2, 0}, 0, 1},
    {"one row", {1, 1, 1, 9}, {9, 9, 9, 1}, {9, 9, 9, 1}, 1, 0},
    {"broadcast src", {2, 3, 2, 4}, {0, 4, 0, 1}, {24, 8, 4, 1}, 0, 0},
};
#define NLAYOUT ((int)(sizeof layouts / sizeof *layouts))

static void copy_strided(void **state)
{
    (void)state;
    int bad = 0;
    for (int li = 0; li < NLAYOUT; li++)
        for (int a = 0; a < NDT; a++)
            for (int b = 0; b < NDT; b++) {
                const struct layout *l = &layouts[li];
                uint64_t salt = (uint64_t)(li * 9 + a * 3 + b) << 20;
                bad += check_copy(be_gpu, "gpu", l, dtypes[a], dtypes[b], 1, 1, salt);
                bad += check_copy(be_gpu, "gpu, src staged", l, dtypes[a], dtypes[b], 0, 1, salt);
                bad += check_copy(be_gpu, "gpu, dst staged", l, dtypes[a], dtypes[b], 1, 0, salt);
                bad += check_copy(be_grid, "grid", l, dtypes[a], dtypes[b], 1, 1, salt);
                bad += check_copy(be_cpu, "cpu", l, dtypes[a], dtypes[b], 1, 1, salt);
            }
    assert_int_equal(bad, 0);
}

/* The grid-capped instance on larger views: many workgroups per invocation's loop. */
static void copy_looped(void **state)
{
    (void)state;
    const struct layout l = {
        "looped", {3, 37, 5, 42}, {37 * 5 * 44, 5 * 44, 44, 1}, {37 * 5 * 42, 5 * 42, 42, 1}, 1, 0};
    int bad = 0;
    for (int a = 0; a < NDT; a++)
        for (int b = 0; b < NDT; b++)
            bad += check_copy(be_grid, "grid", &l, dtypes[a], dtypes[b], 1, 1, 99);
    assert_int_equal(bad, 0);
}

/* ---- fill and accumulate ------------------------------------------------------------------- */

static void check_fill(void *be, const char *what, size_t count, uint32_t value, int owned)
{
    size_t bytes = (count + 3) * 4;
    uint32_t *buf = owned ? ops->mem.alloc(be, bytes) : malloc(bytes);
    assert_non_null(buf);
    for (size_t i = 0; i < count + 3; i++)
        buf[i] = POISON32;
    float v = burst_cpu_bits_f32(value);
    assert_int_equal(ops->elem.fill(be, (float *)(void *)(buf + 1), count, v), BURST_OK);
    size_t bad = 0;
    for (size_t i = 0; i < count + 3; i++) {
        uint32_t want = i >= 1 && i <= count ? value : POISON32;
        if (buf[i] != want && bad++ < 5)
            print_error("%s fill of %zu x 0x%08x: word %zu is 0x%08x\n", what, count, value, i,
                        buf[i]);
    }
    if (owned)
        ops->mem.free(be, buf);
    else
        free(buf);
    assert_int_equal(bad, 0);
}

static void fill_values(void **state)
{
    (void)state;
    const uint32_t values[] = {0xff800000u, 0x80000000u, 0x7fa00001u, 0x00000003u, 0x3f800000u};
    for (size_t k = 0; k < sizeof values / sizeof *values; k++) {
        check_fill(be_gpu, "gpu", 1001 + k, values[k], 1);
        check_fill(be_grid, "grid", 5003 + k, values[k], 1);
        check_fill(be_cpu, "cpu", 77, values[k], 1);
        check_fill(be_gpu, "gpu, host memory", 333, values[k], 0);
    }
    assert_true(built(be_gpu, BURST_VK_FILL, BURST_DTYPE_FP32, BURST_DTYPE_FP32));
}

/* dst and src bits of element i: pairs aimed at the exact add (both subnormal, cancellation to
 * subnormals, one tiny and one large, ties) and random ones. */
static void gen_acc(burst_dtype_t sd, uint64_t i, uint32_t *dst, uint32_t *src)
{
    uint64_t r = mix(i * 0xd1b54a32d192ed03ull + 5);
    uint32_t lo = (uint32_t)r, hi = (uint32_t)(r >> 32);
    if (sd != BURST_DTYPE_FP32) { /* every source pattern against small and random sums */
        *src = gen_src(sd, i);
        uint32_t f = sd == BURST_DTYPE_FP16
                         ? burst_cpu_f32_bits(burst_cpu_f16_to_f32((uint16_t)*src))
                         : *src << 16;
        *dst = i % 3 == 0   ? (f ^ 0x80000000u) + (lo % 5u) - 2u /* near cancellation */
               : i % 3 == 1 ? (hi & 0x80000000u) | (hi % 40u) << 23 | (lo & 0x7fffffu)
                            : gen_f32(i);
        return;
    }
    switch (i % 6) {
    case 0: /* both tiny: subnormal operands and results */
        *dst = (hi & 0x80000000u) | (hi % 28u) << 23 | (lo & 0x7fffffu);
        *src = (lo & 0x80000000u) | (lo % 28u) << 23 | ((hi * 2654435761u) & 0x7fffffu);
        break;
    case 1: /* cancellation: a + (-a +- a few ulps) at any exponent, small ones included */
        *dst = (hi & 0x80000000u) | (hi % 60u) << 23 | (lo & 0x7fffffu);
        *src = (*dst ^ 0x80000000u) + (lo % 7u) - 3u;
        break;
    case 2: /* one tiny, one near 2^-100 (the exact add's threshold) */
        *dst = (hi & 0x80000000u) | (25u + hi % 4u) << 23 | (lo & 0x7fffffu);
        *src = (lo & 0x80000000u) | (lo % 3u) << 23 | ((hi * 40503u) & 0x7fffffu);
        break;
    case 3: /* ties: a + half an ulp of a */
        *dst = (hi & 0x80000000u) | (1u + hi % 200u) << 23 | (lo & 0x7fffffu);
        *src = ((*dst >> 23 & 0xffu) > 24u ? ((*dst & 0xff800000u) - (24u << 23)) : 1u) |
               (*dst & 0x80000000u);
        break;
    case 4: /* random against the edge stream (infs and NaNs included) */
        *dst = lo;
        *src = gen_f32(i);
        break;
    default: *dst = gen_f32(i + 7); *src = hi;
    }
}

/* dst += src on be over count elements, with one poisoned element before and after; each result
 * is the cpu's float sum bit for bit (any NaN where that sum is a NaN). */
static int check_acc(void *be, const char *what, burst_dtype_t sd, size_t count, int dst_owned,
                     int src_owned, uint64_t salt)
{
    size_t es = esize(sd);
    uint32_t *dst = dst_owned ? ops->mem.alloc(be, (count + 2) * 4) : malloc((count + 2) * 4);
    unsigned char *src = src_owned ? ops->mem.alloc(be, count * es) : malloc(count * es);
    uint32_t *want = malloc(count * 4);
    assert_true(dst && src && want);
    dst[0] = dst[count + 1] = POISON32;
    for (size_t i = 0; i < count; i++) {
        uint32_t d, s;
        gen_acc(sd, i + salt, &d, &s);
        dst[i + 1] = d;
        put_bits(sd, src, (int64_t)i, s);
        float x = burst_cpu_bits_f32(d);
        x += sd == BURST_DTYPE_FP32   ? burst_cpu_bits_f32(s)
             : sd == BURST_DTYPE_FP16 ? burst_cpu_f16_to_f32((uint16_t)s)
                                      : burst_cpu_bf16_to_f32((uint16_t)s);
        want[i] = burst_cpu_f32_bits(x);
    }
    assert_int_equal(ops->elem.accumulate(be, (float *)(void *)(dst + 1), src, sd, count),
                     BURST_OK);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t got = dst[i + 1];
        int nan_ok = isnan(burst_cpu_bits_f32(want[i])) && isnan(burst_cpu_bits_f32(got));
        if (got != want[i] && !nan_ok && bad++ < 5) {
            uint32_t d, s;
            gen_acc(sd, i + salt, &d, &s);
            print_error("%s: accumulate %s (dst %s, src %s) element %zu: 0x%08x + 0x%08x gave "
                        "0x%08x, want 0x%08x\n",
                        what, dt_name(sd), dst_owned ? "owned" : "host",
                        src_owned ? "owned" : "host", i, d, s, got, want[i]);
        }
    }
    if ((dst[0] != POISON32 || dst[count + 1] != POISON32) && bad++ < 5)
        print_error("%s: accumulate %s wrote outside [0, %zu)\n", what, dt_name(sd), count);
    if (dst_owned)
        ops->mem.free(be, dst);
    else
        free(dst);
    if (src_owned)
        ops->mem.free(be, src);
    else
        free(src);
    free(want);
    return bad;
}

static void accumulate_exact(void **state)
{
    (void)state;
    int bad = 0;
    for (int a = 0; a < NDT; a++) {
        size_t n = dtypes[a] == BURST_DTYPE_FP32 ? 300001 : 65536 * 3 + 1;
        bad += check_acc(be_gpu, "gpu", dtypes[a], n, 1, 1, 0);
        bad += check_acc(be_gpu, "gpu, src staged", dtypes[a], 1001, 1, 0, 11);
        bad += check_acc(be_gpu, "gpu, dst staged", dtypes[a], 1001, 0, 1, 12);
        bad += check_acc(be_grid, "grid", dtypes[a], 20011, 1, 1, 13);
        bad += check_acc(be_cpu, "cpu", dtypes[a], n, 1, 1, 0);
        assert_true(built(be_gpu, BURST_VK_ACC, dtypes[a], BURST_DTYPE_FP32));
    }
    assert_int_equal(bad, 0);
}

/* ---- counts beyond one grid row ------------------------------------------------------------ */

static void beyond_one_row(void **state)
{
    (void)state;
    /* one row holds at most 65535 workgroups of 128 invocations: 8388480 work items */
    const size_t n = (size_t)65535 * 128 + 1001;
    check_fill(be_gpu, "gpu, 2 rows", n, 0x80000001u, 1);
    assert_int_equal(check_acc(be_gpu, "gpu, 2 rows", BURST_DTYPE_BF16, n, 1, 1, 3), 0);
    /* copy units are element pairs: 65 rows of 2^18 elements */
    const struct layout l = {"2 grid rows",
                             {1, 65, 1, 262144},
                             {65 * 262144, 262144, 262144, 1},
                             {65 * 262144, 262144, 262144, 1},
                             0,
                             1};
    assert_int_equal(check_copy(be_gpu, "gpu", &l, BURST_DTYPE_FP32, BURST_DTYPE_FP16, 1, 1, 5), 0);
}

/* ---- what stays on the cpu ----------------------------------------------------------------- */

static void host_only_stays_on_cpu(void **state)
{
    (void)state;
    setenv("BURST_VK_ELEM", "gpu", 1);
    void *be = NULL;
    assert_int_equal(ops->core.create(NULL, &be), BURST_OK);
    struct burst_vk_backend *vb = be;
    /* a device with cooperative matrices builds its layout query's pipeline at creation */
    const size_t npipes0 = vb->npipes;
    const struct layout *l = &layouts[1];
    assert_int_equal(
        check_copy(be, "gpu, both host", l, BURST_DTYPE_FP32, BURST_DTYPE_BF16, 0, 0, 1), 0);
    check_fill(be, "gpu, host", 99, 0x3f800000u, 0);
    assert_int_equal(check_acc(be, "gpu, both host", BURST_DTYPE_FP16, 999, 0, 0, 2), 0);
    /* overlapping copy: one buffer, dst the rows after src's first (the loop's order) */
    float *buf = ops->mem.alloc(be, 64 * 4);
    assert_non_null(buf);
    for (int i = 0; i < 64; i++)
        buf[i] = (float)i;
    struct burst_tensor s = {buf, BURST_DTYPE_FP32, {1, 4, 1, 8}, {32, 8, 8, 1}};
    struct burst_tensor d = s;
    d.data = buf + 8;
    assert_int_equal(ops->elem.copy(be, &d, &s), BURST_OK);
    for (int i = 0; i < 40; i++)
        assert_true(buf[i] == (float)(i % 8));
    ops->mem.free(be, buf);
    assert_int_equal((int)vb->npipes, (int)npipes0); /* no shader was needed */

    /* caller memory too large to stage (2^21 + 1 rows of 1 KiB > lavapipe's 2 GiB largest
     * allocation; broadcast views keep the real memory small): the loop does it */
    float *row = ops->mem.alloc(be, 256 * 4), *host = malloc(256 * 4);
    assert_true(row && host);
    for (int i = 0; i < 256; i++)
        host[i] = (float)i - 100.5f;
    const int64_t rows = ((int64_t)1 << 21) + 1;
    struct burst_tensor hs = {host, BURST_DTYPE_FP32, {1, rows, 1, 256}, {0, 0, 0, 1}};
    struct burst_tensor rd = hs;
    rd.data = row;
    if (vb->caps.max_alloc && vb->caps.max_alloc < (uint64_t)rows * 1024) {
        assert_int_equal(ops->elem.copy(be, &rd, &hs), BURST_OK);
        for (int i = 0; i < 256; i++)
            assert_true(row[i] == (float)i - 100.5f);
    }
    ops->mem.free(be, row);
    free(host);
    ops->core.destroy(be);
}

/* ---- bad arguments ------------------------------------------------------------------------- */

static void expect_error(burst_status_t st, burst_status_t want, const char *needle)
{
    assert_int_equal(st, want);
    if (!harness_contains(burst_last_error(), needle))
        fail_msg("error \"%s\" lacks \"%s\"", burst_last_error(), needle);
}

static void bad_arguments(void **state)
{
    (void)state;
    void *bes[2] = {be_gpu, be_cpu};
    float *buf = ops->mem.alloc(be_gpu, 4096);
    assert_non_null(buf);
    for (int k = 0; k < 2; k++) {
        void *be = bes[k];
        struct burst_tensor s = {buf, BURST_DTYPE_FP32, {1, 4, 2, 8}, {64, 16, 8, 1}};
        struct burst_tensor d = s;
        d.data = buf + 512;
        expect_error(ops->elem.copy(be, NULL, &s), BURST_ERR_INVALID_ARG, "dst or src");
        d.dtype = (burst_dtype_t)7;
        expect_error(ops->elem.copy(be, &d, &s), BURST_ERR_INVALID_ARG, "bad dtype (dst 7, src 0)");
        d.dtype = BURST_DTYPE_FP16;
        d.shape[2] = 3;
        expect_error(ops->elem.copy(be, &d, &s), BURST_ERR_INVALID_ARG,
                     "shape[2] differs (dst 3, src 2)");
        d.shape[2] = 2;
        d.stride[3] = 2;
        expect_error(ops->elem.copy(be, &d, &s), BURST_ERR_INVALID_ARG,
                     "stride[3] must be 1 (dst 2, src 1)");
        d.stride[3] = 1;
        s.stride[0] = INT64_MAX / 2;
        s.shape[0] = d.shape[0] = 3;
        expect_error(ops->elem.copy(be, &d, &s), BURST_ERR_INVALID_ARG, "src spans more than 2^63");
        s.stride[0] = 64;
        d.stride[1] = -(INT64_MAX / 3);
        expect_error(ops->elem.copy(be, &d, &s), BURST_ERR_INVALID_ARG, "dst spans more than 2^63");
        expect_error(ops->elem.fill(be, NULL, 5, 0.0f), BURST_ERR_INVALID_ARG,
                     "dst is NULL (count = 5)");
        expect_error(ops->elem.fill(be, buf, (size_t)1 << 62, 0.0f), BURST_ERR_INVALID_ARG,
                     "count = 4611686018427387904 exceeds");
        expect_error(ops->elem.accumulate(be, buf, NULL, BURST_DTYPE_FP32, 3),
                     BURST_ERR_INVALID_ARG, "dst or src is NULL");
        expect_error(ops->elem.accumulate(be, buf, buf + 8, (burst_dtype_t)9, 3),
                     BURST_ERR_INVALID_ARG, "src_dtype = 9 is unknown");
        expect_error(ops->elem.accumulate(be, buf, buf + 8, BURST_DTYPE_BF16, (size_t)1 << 62),
                     BURST_ERR_INVALID_ARG, "count = 4611686018427387904 exceeds");
        /* empty views and counts are fine */
        d = s;
        d.shape[1] = s.shape[1] = 0;
        assert_int_equal(ops->elem.copy(be, &d, &s), BURST_OK);
        assert_int_equal(ops->elem.fill(be, NULL, 0, 1.0f), BURST_OK);
    }
    ops->mem.free(be_gpu, buf);

    setenv("BURST_VK_ELEM", "bogus", 1);
    void *be = NULL;
    expect_error(ops->core.create(NULL, &be), BURST_ERR_INVALID_ARG,
                 "BURST_VK_ELEM = \"bogus\" is not one of gpu, cpu, auto");
    assert_null(be);
    setenv("BURST_VK_ELEM", "gpu", 1);
}

/* ---- main ---------------------------------------------------------------------------------- */

static void *create(const char *elem, const char *groups)
{
    setenv("BURST_VK_ELEM", elem, 1);
    if (groups)
        setenv("BURST_VK_ELEM_GROUPS", groups, 1);
    else
        unsetenv("BURST_VK_ELEM_GROUPS");
    void *be = NULL;
    burst_status_t st = ops->core.create(NULL, &be);
    if (st == BURST_ERR_NO_DEVICE) {
        printf("no Vulkan device: %s\n", burst_last_error());
        exit(77);
    }
    if (st != BURST_OK) {
        fprintf(stderr, "vulkan create (BURST_VK_ELEM=%s): %s\n", elem, burst_last_error());
        exit(1);
    }
    return be;
}

int main(void)
{
    seed = harness_seed();
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)seed);
    be_gpu = create("gpu", NULL);
    be_grid = create("gpu", "3");
    be_cpu = create("cpu", NULL);
    unsetenv("BURST_VK_ELEM_GROUPS");
    setenv("BURST_VK_ELEM", "gpu", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(copy_all_patterns),
        cmocka_unit_test(copy_strided),
        cmocka_unit_test(copy_looped),
        cmocka_unit_test(fill_values),
        cmocka_unit_test(accumulate_exact),
        cmocka_unit_test(beyond_one_row),
        cmocka_unit_test(host_only_stays_on_cpu),
        cmocka_unit_test(bad_arguments),
    };
    int rc = cmocka_run_group_tests_name("vk_elem", tests, NULL, NULL);
    ops->core.destroy(be_gpu);
    ops->core.destroy(be_grid);
    ops->core.destroy(be_cpu);
    return rc;
}
