/* runtime/context.c - backend registry and the compute context. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "context_internal.h"
#include "error.h"
#include "fault.h"
#include "logger.h"

/* Backends in priority order: "auto" takes the first that creates successfully. */
static const struct burst_backend_ops *const backends[] = {
#ifdef BURST_HAVE_CUDA
    &burst_cuda_backend_ops,
#endif
#ifdef BURST_HAVE_VULKAN
    &burst_vk_backend_ops,
#endif
    &burst_cpu_backend_ops,
};
#define NUM_BACKENDS (sizeof(backends) / sizeof(backends[0]))

burst_status_t burst_check_api_version(const char *who, unsigned api_version)
{
    unsigned major = api_version >> 16, minor = api_version & 0xffffu;
    if (major != BURST_VERSION_MAJOR || minor > BURST_VERSION_MINOR)
        return burst_error(BURST_ERR_VERSION,
                           "%s: api_version = 0x%x (%u.%u) is not served by library %s: set it to "
                           "BURST_API_VERSION",
                           who, api_version, major, minor, BURST_VERSION_STRING);
    return BURST_OK;
}

struct burst_context_params burst_context_params_default(void)
{
    struct burst_context_params p = {
        .api_version = BURST_API_VERSION,
        .backend = "auto",
        .num_threads = 0,
        .device = NULL,
    };
    return p;
}

#define OPS_NEED(ops, m)                                                                           \
    do {                                                                                           \
        if (!BURST_OPS_HAS(ops, m))                                                                \
            return #m;                                                                             \
    } while (0)

const char *burst_backend_ops_missing(const struct burst_backend_ops *ops)
{
    if (!ops || ops->size < offsetof(struct burst_backend_ops, name) + sizeof ops->name)
        return "size";
    OPS_NEED(ops, name);
    OPS_NEED(ops, core.create);
    OPS_NEED(ops, core.destroy);
    OPS_NEED(ops, mem.alloc);
    OPS_NEED(ops, mem.free);
    OPS_NEED(ops, elem.copy);
    OPS_NEED(ops, elem.fill);
    OPS_NEED(ops, elem.accumulate);
    OPS_NEED(ops, attn.fwd_step);
    OPS_NEED(ops, attn.bwd_delta);
    OPS_NEED(ops, attn.bwd_step);
    if (ops->core.features & BURST_BE_FP8 || BURST_OPS_HAS(ops, core.instance_features)) {
        OPS_NEED(ops, attn.fp8_quant_q);
        OPS_NEED(ops, attn.fp8_quant_kv);
    }
    if (BURST_OPS_HAS(ops, mem.device_memory) || BURST_OPS_HAS(ops, mem.stage_transfers)) {
        OPS_NEED(ops, mem.memcpy);
        OPS_NEED(ops, mem.host_alloc);
        OPS_NEED(ops, mem.host_free);
    }
    if (BURST_OPS_HAS(ops, stream.time_mark)) {
        OPS_NEED(ops, stream.time_elapsed);
        OPS_NEED(ops, stream.time_release);
    }
    return NULL;
}

static burst_status_t try_backend(const struct burst_backend_ops *ops,
                                  const struct burst_context_params *p,
                                  const struct burst_settings *set, struct burst_context **ctx_p)
{
    const char *missing = burst_backend_ops_missing(ops);
    if (missing)
        return burst_error(BURST_ERR_INTERNAL,
                           "burst_context_create: backend \"%s\" lacks the op %s its table needs",
                           strcmp(missing, "size") != 0 ? ops->name : "?", missing);
    struct burst_context *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return burst_error(BURST_ERR_NO_MEMORY, "burst_context_create: out of memory");
    burst_status_t st = ops->core.create(p, &ctx->be);
    if (st != BURST_OK) {
        free(ctx);
        return st;
    }
    ctx->ops = ops;
    ctx->set = *set;
    *ctx_p = ctx;
    burst_log(BURST_LOG_INFO, BURST_SUB_RUNTIME, -1, "context on backend %s (%s), %d thread(s)",
              ops->name, strcmp(p->backend, "auto") == 0 ? "auto" : "asked for",
              BURST_OPS_HAS(ops, core.num_threads) ? ops->core.num_threads(ctx->be) : 1);
    return BURST_OK;
}

/* The error for a backend name (field: "backend" or "BURST_BACKEND") this build lacks. */
static burst_status_t backend_unknown(const char *who, const char *field, const char *name)
{
    char have[128] = "";
    for (size_t i = 0; i < NUM_BACKENDS; i++) {
        strncat(have, backends[i]->name, sizeof have - strlen(have) - 1);
        strncat(have, ", ", sizeof have - strlen(have) - 1);
    }
    return burst_error(BURST_ERR_INVALID_ARG,
                       "%s: %s = \"%.64s\" is not a backend of this build (have: %sauto)", who,
                       field, name, have);
}

burst_status_t burst_context_create(const struct burst_context_params *params,
                                    struct burst_context **ctx_p)
{
    static const char *who = "burst_context_create";
    burst_error_clear();
    if (!ctx_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: ctx_p is NULL", who);
    struct burst_context_params p = params ? *params : burst_context_params_default();
    burst_status_t st = burst_check_api_version(who, p.api_version);
    if (st != BURST_OK)
        return st;
    if (p.num_threads < 0)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params->num_threads = %d must be >= 0", who,
                           p.num_threads);

    burst_settings_warn_unknown();
    struct burst_settings set = {0};
    if ((st = burst_settings_load(who, BURST_SCOPE_CONTEXT | BURST_SCOPE_LOG, &set)) != BURST_OK ||
        (st = burst_fault_env_check(who)) != BURST_OK)
        return st;
    if (!p.device || !*p.device) /* backends see NULL (device 0), an index or a name */
        p.device = burst_set_str(&set, BURST_SET_DEVICE);
    const char *name = p.backend ? p.backend : "auto", *field = "backend";
    if (strcmp(name, "auto") == 0) {
        const char *env = burst_set_str(&set, BURST_SET_BACKEND);
        if (env && strcmp(env, "auto") != 0) {
            name = env;
            field = "BURST_BACKEND";
        }
    }
    if (strcmp(name, "auto") == 0) {
        p.backend = "auto"; /* backends may decline what only an explicit request should get */
        st = BURST_ERR_NO_DEVICE;
        for (size_t i = 0; i < NUM_BACKENDS; i++) {
            st = try_backend(backends[i], &p, &set, ctx_p);
            if (st == BURST_OK || st == BURST_ERR_INVALID_ARG) /* a malformed setting: say so */
                return st;
        }
        return burst_error(st, "%s: no backend is usable here", who);
    }
    p.backend = name; /* a backend sees its own name when asked for (also via BURST_BACKEND) */
    for (size_t i = 0; i < NUM_BACKENDS; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return try_backend(backends[i], &p, &set, ctx_p);
    return backend_unknown(who, field, name);
}

burst_status_t burst_backend_env_check(const char *who)
{
    const char *env = NULL;
    burst_status_t st = burst_setting_get(who, BURST_SET_BACKEND, NULL, &env);
    if (st != BURST_OK || !env || strcmp(env, "auto") == 0)
        return st;
    for (size_t i = 0; i < NUM_BACKENDS; i++)
        if (strcmp(backends[i]->name, env) == 0)
            return BURST_OK;
    return backend_unknown(who, "BURST_BACKEND", env);
}

void burst_context_destroy(struct burst_context *ctx)
{
    if (!ctx)
        return;
    ctx->ops->core.destroy(ctx->be);
    free(ctx);
}

const char *burst_context_backend(const struct burst_context *ctx)
{
    return ctx ? ctx->ops->name : "";
}

int burst_context_device_memory(const struct burst_context *ctx)
{
    return ctx && BURST_OPS_HAS(ctx->ops, mem.device_memory);
}

burst_status_t burst_context_check_memory(const struct burst_context *ctx, const char *who, int n,
                                          const char *const *names, const void *const *ptrs)
{
    if (!BURST_OPS_HAS(ctx->ops, mem.check_memory))
        return BURST_OK;
    for (int i = 0; i < n; i++) {
        burst_status_t st = ctx->ops->mem.check_memory(ctx->be, who, names[i], ptrs[i]);
        if (st != BURST_OK)
            return st;
    }
    return BURST_OK;
}

int burst_context_num_threads(const struct burst_context *ctx)
{
    return ctx && ctx->ops->core.num_threads ? ctx->ops->core.num_threads(ctx->be) : 1;
}

burst_status_t burst_context_alloc(struct burst_context *ctx, size_t bytes, void **ptr_p)
{
    static const char *who = "burst_context_alloc";
    burst_error_clear();
    if (!ptr_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: ptr_p is NULL", who);
    *ptr_p = NULL;
    if (!ctx)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: ctx is NULL", who);
    if (bytes == 0)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: bytes = 0 must be > 0", who);
    *ptr_p = burst_fault_alloc() ? NULL : ctx->ops->mem.alloc(ctx->be, bytes);
    if (!*ptr_p)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: %s backend could not allocate %zu bytes", who,
                           ctx->ops->name, bytes);
    return BURST_OK;
}

void burst_context_free(struct burst_context *ctx, void *ptr)
{
    if (ctx && ptr)
        ctx->ops->mem.free(ctx->be, ptr);
}

burst_status_t burst_context_memcpy(struct burst_context *ctx, void *dst, const void *src,
                                    size_t bytes)
{
    static const char *who = "burst_context_memcpy";
    burst_error_clear();
    if (!ctx)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: ctx is NULL", who);
    if (bytes == 0)
        return BURST_OK;
    if (!dst || !src)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL (bytes = %zu)", who,
                           !dst ? "dst" : "src", bytes);
    if (BURST_OPS_HAS(ctx->ops, mem.memcpy))
        return ctx->ops->mem.memcpy(ctx->be, dst, src, bytes);
    memmove(dst, src, bytes);
    return BURST_OK;
}

burst_status_t burst_probe(const struct burst_context_params *params, int json, char **report_p)
{
    static const char *who = "burst_probe";
    burst_error_clear();
    if (!report_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: report_p is NULL", who);
    *report_p = NULL;
    struct burst_context_params p = params ? *params : burst_context_params_default();
    burst_status_t st = burst_check_api_version(who, p.api_version);
    if (st != BURST_OK)
        return st;
    struct burst_sb sb = {0};
    if (json) {
        burst_sb_printf(&sb, "{\"version\": ");
        burst_sb_json_str(&sb, BURST_VERSION_STRING);
        burst_sb_printf(&sb, ", \"backends\": [");
    }
    for (size_t i = 0; i < NUM_BACKENDS; i++) {
        const struct burst_backend_ops *ops = backends[i];
        if (json && i)
            burst_sb_printf(&sb, ", ");
        if (!json)
            burst_sb_printf(&sb, "backend %s\n", ops->name);
        if (BURST_OPS_HAS(ops, core.probe)) {
            ops->core.probe(&p, &sb, json);
        } else if (json) {
            burst_sb_printf(&sb, "{\"backend\": ");
            burst_sb_json_str(&sb, ops->name);
            burst_sb_printf(&sb, ", \"available\": null, \"devices\": []}");
        } else {
            burst_sb_printf(&sb, "  (no probe)\n");
        }
    }
    if (json)
        burst_sb_printf(&sb, "]}\n");
    if (sb.failed || !sb.buf) {
        free(sb.buf);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    }
    *report_p = sb.buf;
    return BURST_OK;
}

void burst_free(void *p)
{
    free(p);
}
