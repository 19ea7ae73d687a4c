/*
 * runtime/cpu/cpu_backend.c - the cpu backend's ops table: instance, memory and elementwise ops.
 *
 * Settings (runtime/settings.h, read at create):
 *   BURST_NUM_THREADS   compute threads when params->num_threads is 0 (else every online core);
 *                       a malformed value fails the create naming it
 *   BURST_CPU_ISA       kernel variant: "base" (portable), "avx2", "avx512", "avx512bf16",
 *                       "avx512amx", "neon"; default (unset or "auto"): the best this cpu
 *                       runs. A name this build or cpu cannot run fails context creation
 *                       naming it.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <sys/syscall.h>
#endif

#include "cpu_convert.h"
#include "cpu_internal.h"
#include "error.h"
#include "settings.h"

/* Elementwise ops are split into items of about this many elements. */
#define BURST_CPU_CHUNK ((int64_t)1 << 16)

/* BURST_NUM_THREADS, else every online core; a malformed value is an error (runtime/settings.h),
 * and *n_p is then every online core. */
static burst_status_t burst_cpu_default_threads(int *n_p)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long n = cores > 0 ? (cores > 4096 ? 4096 : cores) : 1, v;
    const char *s;
    burst_status_t st = burst_setting_get("burst_context_create", BURST_SET_NUM_THREADS, &v, &s);
    *n_p = (int)(st == BURST_OK && s ? v : n);
    return st;
}

static const char *const burst_cpu_isa_names[BURST_CPU_ISA_COUNT] = {
    [BURST_CPU_ISA_BASE] = "base",     [BURST_CPU_ISA_AVX2] = "avx2",
    [BURST_CPU_ISA_AVX512] = "avx512", [BURST_CPU_ISA_AVX512BF16] = "avx512bf16",
    [BURST_CPU_ISA_NEON] = "neon",     [BURST_CPU_ISA_AVX512AMX] = "avx512amx",
};

#if BURST_CPU_HAVE_AMX_VARIANT
/* Can this thread's process use the AMX tiles for bf16? The cpu has AMX-TILE and AMX-BF16 (cpuid
 * leaf 7: edx bits 24 and 22), the OS enables their state (XCR0 bits 17 and 18) and, on Linux,
 * grants the process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA; the
 * request is process-wide and may be repeated). */
static int burst_cpu_amx_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22)))
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return 0;
#if defined(__linux__)
    /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 (asm/prctl.h, not always installed) */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0)
        return 0;
#endif
    return 1;
}
#endif

/* Bit (1 << isa) for every variant this build has and this cpu (and OS) runs. */
static unsigned burst_cpu_isa_mask(void)
{
    unsigned m = 1u << BURST_CPU_ISA_BASE;
#if BURST_CPU_HAVE_X86_VARIANTS
    unsigned a, b, c, d;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C))
        return m;
    m |= 1u << BURST_CPU_ISA_AVX2;
    /* __builtin_cpu_supports also checks that the OS saves the AVX-512 registers */
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
        return m;
    m |= 1u << BURST_CPU_ISA_AVX512;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5))) /* AVX512_BF16 */
        m |= 1u << BURST_CPU_ISA_AVX512BF16;
    else
        return m;
#if BURST_CPU_HAVE_AMX_VARIANT
    if (burst_cpu_amx_usable())
        m |= 1u << BURST_CPU_ISA_AVX512AMX;
#endif
#endif
#if BURST_CPU_HAVE_NEON_VARIANT
    m |= 1u << BURST_CPU_ISA_NEON;
#endif
    return m;
}

/* The best variant of mask m (burst_cpu_isa_mask): its highest bit. */
static enum burst_cpu_isa burst_cpu_isa_best(unsigned m)
{
    int best = BURST_CPU_ISA_BASE;
    for (int i = 0; i < BURST_CPU_ISA_COUNT; i++)
        if (m & (1u << i))
            best = i;
    return (enum burst_cpu_isa)best;
}

int burst_cpu_isa_forced_is_auto(void)
{
    const char *env = NULL;
    if (burst_setting_get("burst_cpu_isa_forced_is_auto", BURST_SET_CPU_ISA, NULL, &env) !=
            BURST_OK ||
        !env || strcmp(env, "auto") == 0)
        return 0;
    return strcmp(env, burst_cpu_isa_names[burst_cpu_isa_best(burst_cpu_isa_mask())]) == 0;
}

/* The kernel variant: BURST_CPU_ISA's, else the best this cpu runs (the highest bit). */
static burst_status_t burst_cpu_pick_isa(enum burst_cpu_isa *isa_p)
{
    unsigned m = burst_cpu_isa_mask();
    const char *env;
    burst_status_t st = burst_setting_get("burst_context_create", BURST_SET_CPU_ISA, NULL, &env);
    if (st != BURST_OK)
        return st;
    if (!env || strcmp(env, "auto") == 0) {
        *isa_p = burst_cpu_isa_best(m);
        return BURST_OK;
    }
    for (int i = 0; i < BURST_CPU_ISA_COUNT; i++) {
        if (strcmp(env, burst_cpu_isa_names[i]) != 0)
            continue;
        if (!(m & (1u << i)))
            return burst_error(BURST_ERR_UNSUPPORTED,
                               "BURST_CPU_ISA = \"%s\": this build or cpu cannot run those "
                               "kernels",
                               env);
        *isa_p = (enum burst_cpu_isa)i;
        return BURST_OK;
    }
    return burst_error(BURST_ERR_INVALID_ARG,
                       "BURST_CPU_ISA = \"%s\" is not one of auto, base, avx2, avx512, "
                       "avx512bf16, avx512amx, neon",
                       env);
}

static burst_status_t burst_cpu_create(const struct burst_context_params *params, void **be_p)
{
    if (!be_p)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu create: be_p is NULL");
    int n = params ? params->num_threads : 0;
    if (n < 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "cpu create: params->num_threads = %d is "
                           "negative",
                           n);
    if (n == 0) {
        burst_status_t st = burst_cpu_default_threads(&n);
        if (st != BURST_OK)
            return st;
    }
    enum burst_cpu_isa isa;
    burst_status_t st = burst_cpu_pick_isa(&isa);
    if (st != BURST_OK)
        return st;
    struct burst_cpu_backend *cpu = calloc(1, sizeof *cpu);
    if (!cpu)
        return burst_error(BURST_ERR_NO_MEMORY, "cpu create: out of memory");
    st = burst_cpu_pool_create(n, &cpu->pool);
    if (st != BURST_OK) {
        free(cpu);
        return st;
    }
    cpu->isa = isa;
    *be_p = cpu;
    return BURST_OK;
}

static void burst_cpu_destroy(void *be)
{
    struct burst_cpu_backend *cpu = be;
    if (!cpu)
        return;
    burst_cpu_pool_destroy(cpu->pool);
    free(cpu);
}

static int burst_cpu_num_threads(void *be)
{
    struct burst_cpu_backend *cpu = be;
    return burst_cpu_pool_size(cpu->pool);
}

static void *burst_cpu_alloc(void *be, size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static void burst_cpu_free(void *be, void *ptr)
{
    free(ptr);
}

static int burst_cpu_dtype_ok(burst_dtype_t dt)
{
    return dt == BURST_DTYPE_FP32 || dt == BURST_DTYPE_FP16 || dt == BURST_DTYPE_BF16;
}

static float burst_cpu_get(const void *p, burst_dtype_t dt, int64_t i)
{
    switch (dt) {
    case BURST_DTYPE_FP16: return burst_cpu_f16_to_f32(((const uint16_t *)p)[i]);
    case BURST_DTYPE_BF16: return burst_cpu_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* ---- copy ---------------------------------------------------------------------------------- */

struct burst_cpu_copy_job {
    const struct burst_tensor *dst, *src;
    int64_t rows, rows_per_item; /* rows of d elements: B * n * H */
};

static void burst_cpu_copy_item(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_copy_job *job = ctx;
    const struct burst_tensor *dst = job->dst, *src = job->src;
    int64_t n = src->shape[1], h = src->shape[2], d = src->shape[3];
    int64_t r0 = item * job->rows_per_item;
    int64_t r1 = burst_cpu_min64(r0 + job->rows_per_item, job->rows);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b = r / (n * h), i = r / h % n, hh = r % h;
        const void *s = burst_cpu_row(src, b, i, hh);
        void *o = (void *)burst_cpu_row(dst, b, i, hh);
        if (dst->dtype == src->dtype) {
            memmove(o, s, (size_t)d * (dst->dtype == BURST_DTYPE_FP32 ? 4 : 2));
        } else if (dst->dtype == BURST_DTYPE_FP32) {
            for (int64_t c = 0; c < d; c++)
                ((float *)o)[c] = burst_cpu_get(s, src->dtype, c);
        } else if (dst->dtype == BURST_DTYPE_FP16) {
            for (int64_t c = 0; c < d; c++)
                ((uint16_t *)o)[c] = burst_cpu_f32_to_f16(burst_cpu_get(s, src->dtype, c));
        } else {
            for (int64_t c = 0; c < d; c++)
                ((uint16_t *)o)[c] = burst_cpu_f32_to_bf16(burst_cpu_get(s, src->dtype, c));
        }
    }
}

static burst_status_t burst_cpu_copy(void *be, const struct burst_tensor *dst,
                                     const struct burst_tensor *src)
{
    struct burst_cpu_backend *cpu = be;
    if (!dst || !src || !dst->data || !src->data)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu copy: dst or src (or its data) is NULL");
    if (!burst_cpu_dtype_ok(dst->dtype) || !burst_cpu_dtype_ok(src->dtype))
        return burst_error(BURST_ERR_INVALID_ARG, "cpu copy: bad dtype (dst %d, src %d)",
                           (int)dst->dtype, (int)src->dtype);
    for (int k = 0; k < BURST_TENSOR_DIMS; k++) {
        if (dst->shape[k] != src->shape[k] || src->shape[k] < 0)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "cpu copy: shape[%d] differs (dst %lld, "
                               "src %lld)",
                               k, (long long)dst->shape[k], (long long)src->shape[k]);
    }
    if (src->shape[3] > 1 && (src->stride[3] != 1 || dst->stride[3] != 1))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "cpu copy: stride[3] must be 1 (dst %lld, "
                           "src %lld)",
                           (long long)dst->stride[3], (long long)src->stride[3]);
    struct burst_cpu_copy_job job = {dst, src, src->shape[0] * src->shape[1] * src->shape[2], 1};
    if (job.rows == 0 || src->shape[3] == 0)
        return BURST_OK;
    job.rows_per_item = burst_cpu_max64(1, BURST_CPU_CHUNK / src->shape[3]);
    int64_t items = (job.rows + job.rows_per_item - 1) / job.rows_per_item;
    return burst_cpu_pool_run(cpu->pool, items, 0, burst_cpu_copy_item, &job);
}

/* ---- fill / accumulate --------------------------------------------------------------------- */

struct burst_cpu_elem_job {
    float *dst;
    const void *src; /* NULL: fill */
    burst_dtype_t dtype;
    float value;
    size_t count;
};

static void burst_cpu_elem_item(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_elem_job *job = ctx;
    size_t i0 = (size_t)item * (size_t)BURST_CPU_CHUNK;
    size_t i1 =
        i0 + (size_t)BURST_CPU_CHUNK < job->count ? i0 + (size_t)BURST_CPU_CHUNK : job->count;
    float *restrict dst = job->dst;
    const float value = job->value; /* a local: the stores below cannot change it */
    if (!job->src && value == 0.0f && !signbit(value)) {
        memset(dst + i0, 0, (i1 - i0) * sizeof(float));
    } else if (!job->src) {
        for (size_t i = i0; i < i1; i++)
            dst[i] = value;
    } else if (job->dtype == BURST_DTYPE_FP32) {
        const float *restrict src = job->src;
        for (size_t i = i0; i < i1; i++)
            dst[i] += src[i];
    } else if (job->dtype == BURST_DTYPE_FP16) {
        const uint16_t *src = job->src;
        for (size_t i = i0; i < i1; i++)
            dst[i] += burst_cpu_f16_to_f32(src[i]);
    } else {
        const uint16_t *src = job->src;
        for (size_t i = i0; i < i1; i++)
            dst[i] += burst_cpu_bf16_to_f32(src[i]);
    }
}

static burst_status_t burst_cpu_elem_run(struct burst_cpu_backend *cpu,
                                         struct burst_cpu_elem_job *job)
{
    int64_t items = (int64_t)((job->count + (size_t)BURST_CPU_CHUNK - 1) / BURST_CPU_CHUNK);
    return burst_cpu_pool_run(cpu->pool, items, 0, burst_cpu_elem_item, job);
}

static burst_status_t burst_cpu_fill(void *be, float *dst, size_t count, float value)
{
    if (count == 0)
        return BURST_OK;
    if (!dst)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu fill: dst is NULL");
    struct burst_cpu_elem_job job = {dst, NULL, BURST_DTYPE_FP32, value, count};
    return burst_cpu_elem_run(be, &job);
}

static burst_status_t burst_cpu_accumulate(void *be, float *dst, const void *src,
                                           burst_dtype_t src_dtype, size_t count)
{
    if (count == 0)
        return BURST_OK;
    if (!dst || !src)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu accumulate: dst or src is NULL");
    if (!burst_cpu_dtype_ok(src_dtype))
        return burst_error(BURST_ERR_INVALID_ARG, "cpu accumulate: src_dtype = %d is unknown",
                           (int)src_dtype);
    struct burst_cpu_elem_job job = {dst, src, src_dtype, 0.0f, count};
    return burst_cpu_elem_run(be, &job);
}

#define BURST_CPU_STR(x) #x
#define BURST_CPU_XSTR(x) BURST_CPU_STR(x)

/* burst_probe(): threads, instruction set, vector width and the tile rule (d <= 128 / d > 128). */
static void burst_cpu_probe(const struct burst_context_params *params, struct burst_sb *out,
                            int json)
{
    int threads = params ? params->num_threads : 0;
    if (threads <= 0)
        burst_cpu_default_threads(&threads);
    enum burst_cpu_isa isa = BURST_CPU_ISA_BASE;
    if (burst_cpu_pick_isa(&isa) != BURST_OK) {
        burst_sb_printf(out, json ? "{\"backend\": \"cpu\", \"available\": false, \"reason\": "
                                  : "  unavailable: ");
        if (json)
            burst_sb_json_str(out, burst_last_error());
        else
            burst_sb_printf(out, "%s", burst_last_error());
        burst_sb_printf(out, json ? "}" : "\n");
        return;
    }
    const char *isa_name = burst_cpu_isa_names[isa];
    int width = burst_cpu_isa_lanes(isa); /* fp32 lanes of the kernels' vectors */
    /* the AVX-512 kernels run head dims that are multiples of 16; the others run avx2 */
    const char *other = burst_cpu_call_isa(isa, 8) != isa ? "avx2" : isa_name;
    /* bf16 products on bf16 dot products or tiles (avx512bf16, avx512amx) */
    const int dots = isa == BURST_CPU_ISA_AVX512BF16 || isa == BURST_CPU_ISA_AVX512AMX;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (json) {
        burst_sb_printf(out,
                        "{\"backend\": \"cpu\", \"available\": true, \"devices\": [{\"index\": 0, "
                        "\"name\": \"host cpu\", \"cores_online\": %ld, \"threads\": %d, \"isa\": ",
                        cores, threads);
        burst_sb_json_str(out, isa_name);
        burst_sb_printf(out, ", \"isa_head_dim_not_16\": ");
        burst_sb_json_str(out, other);
        burst_sb_printf(out,
                        ", \"bf16_dot_products\": %s, \"vector_fp32_lanes\": %d, \"dtypes\": "
                        "[\"fp32\", \"fp16\", \"bf16\"], "
                        "\"tiles\": {\"fwd_br\": [%d, %d], \"fwd_bc\": %d, "
                        "\"fwd_bc_bf16_dots\": %d, \"bwd_br\": [%d, %d], \"bwd_bc\": %d, "
                        "\"micro_rows\": %d, \"rule\": \"[d <= 128, d > 128]\"}}]}",
                        dots ? "true" : "false", width, BURST_CPU_FWD_BR(128),
                        BURST_CPU_FWD_BR(256), BURST_CPU_FWD_BC, BURST_CPU_FWD_BC_DP,
                        BURST_CPU_BWD_BR(128), BURST_CPU_BWD_BR(256), BURST_CPU_BWD_BC,
                        BURST_CPU_MR);
    } else {
        burst_sb_printf(out,
                        "  device 0: host cpu, %ld cores online, %d compute threads, kernels %s "
                        "(%d fp32 lanes%s%s%s), dtypes fp32 fp16 bf16\n"
                        "    tiles: forward %dx%d (d <= 128) / %dx%d (d > 128) query x key rows, "
                        "backward %dx%d / %dx%d, micro-kernel %d rows%s\n",
                        cores, threads, isa_name, width,
                        isa == BURST_CPU_ISA_AVX512AMX    ? "; bf16 products on AMX tiles"
                        : isa == BURST_CPU_ISA_AVX512BF16 ? "; bf16 products on AVX512_BF16 dot "
                                                            "products"
                                                          : "",
                        other != isa_name ? "; head dims not a multiple of 16 run " : "",
                        other != isa_name ? other : "", BURST_CPU_FWD_BR(128), BURST_CPU_FWD_BC,
                        BURST_CPU_FWD_BR(256), BURST_CPU_FWD_BC, BURST_CPU_BWD_BR(128),
                        BURST_CPU_BWD_BC, BURST_CPU_BWD_BR(256), BURST_CPU_BWD_BC, BURST_CPU_MR,
                        dots ? "; the bf16 forward takes key tiles of " BURST_CPU_XSTR(
                                   BURST_CPU_FWD_BC_DP) " rows"
                             : "");
    }
}

const struct burst_backend_ops burst_cpu_backend_ops = {
    .size = sizeof(struct burst_backend_ops),
    .name = "cpu",
    .core =
        {
            .features = BURST_BE_DOCS | BURST_BE_SOFTCAP | BURST_BE_FP8,
            .create = burst_cpu_create,
            .destroy = burst_cpu_destroy,
            .num_threads = burst_cpu_num_threads,
            .probe = burst_cpu_probe,
        },
    .mem =
        {
            .alloc = burst_cpu_alloc,
            .free = burst_cpu_free,
        },
    .elem =
        {
            .copy = burst_cpu_copy,
            .fill = burst_cpu_fill,
            .accumulate = burst_cpu_accumulate,
        },
    .attn =
        {
            .fwd_step = burst_cpu_fwd_step,
            .fwd_final = burst_cpu_fwd_final,
            .bwd_delta = burst_cpu_bwd_delta,
            .bwd_step = burst_cpu_bwd_step,
            .decode_step = burst_cpu_decode_step,
            .fp8_quant_q = burst_cpu_fp8_quant_q,
            .fp8_quant_kv = burst_cpu_fp8_quant_kv,
        },
    .stream =
        {
            .sync = NULL,
        },
};
