/*
 * runtime/vulkan/vk_backend.c - the Vulkan backend's ops table: create, destroy, probe.
 *
 * Environment switches (read once, at create and by the probe; see README.md):
 *   BURST_VK_COOPMAT=0    never the cooperative-matrix kernels
 *   BURST_VK_COOPMAT_KHR=0  the subgroup-scope ones as their NV builds even where the device
 *                         offers VK_KHR_cooperative_matrix (0 or 1; else create fails)
 *   BURST_VK_CM2=0        never the workgroup-scope ones (*_cm2; 0 or 1; else create fails)
 *   BURST_VK_RT=0         never the register-tiled kernels (fwd_rt, dq_rt, dkv_rt): the
 *                         scalar ones, the last resort, everywhere (tests)
 *   BURST_VK_RT_TILE=br,bc,dc  their tile, where valid (comparison)
 *   BURST_VK_ATOMIC=0     never dkvq_rt (dQ by float atomics in non-deterministic plans)
 *   BURST_VK_PROFILE=1    timestamp every dispatch, log the totals (info) at destroy
 *   BURST_VK_MAX_SHARED=N behave as if the device had at most N bytes of shared memory (tests)
 *   BURST_VK_ELEM=gpu|cpu|auto  where copy / fill / accumulate run (vk_elem.c; default auto:
 *                         shaders on a GPU, the calling thread on a cpu device); anything else
 *                         fails create with BURST_ERR_INVALID_ARG naming the value
 *   BURST_VK_ELEM_GROUPS=N at most N workgroups per grid dimension of those shaders (tests)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "logger.h"
#include "vk_internal.h"

static void burst_vk_destroy(void *bev)
{
    struct burst_vk_backend *be = bev;
    if (!be)
        return;
    if (be->dev) {
        vkDeviceWaitIdle(be->dev);
        if (be->env.profile) {
            for (int k = 0; k < BURST_VK_NUM_ALL_KERNELS; k++)
                if (be->prof_count[k])
                    burst_log(BURST_LOG_INFO, BURST_SUB_VULKAN, -1,
                              "profile: %-7s %8llu dispatches %12.3f ms (fastest %.3f ms)",
                              burst_vk_kernel_names[k], (unsigned long long)be->prof_count[k],
                              be->prof_ms[k], be->prof_min[k]);
        }
        burst_vk_streams_fini(be);
        burst_vk_pipeline_fini(be);
        burst_vk_memory_fini(be);
        vkDestroyDevice(be->dev, NULL);
    }
    if (be->inst)
        vkDestroyInstance(be->inst, NULL);
    pthread_mutex_destroy(&be->qlock);
    pthread_mutex_destroy(&be->mlock);
    pthread_mutex_destroy(&be->slock);
    pthread_mutex_destroy(&be->plock);
    pthread_mutex_destroy(&be->proflock);
    pthread_cond_destroy(&be->scond);
    free(be);
}

/* Why device caps cannot run the kernels, or NULL. */
static const char *burst_vk_unusable(const struct burst_vk_caps *caps)
{
    if (caps->api_version < VK_API_VERSION_1_2)
        return "it offers Vulkan < 1.2";
    if (!caps->bda)
        return "it lacks bufferDeviceAddress";
    if (!caps->int64)
        return "it lacks shaderInt64";
    return NULL;
}

static burst_status_t burst_vk_create(const struct burst_context_params *params, void **be_p)
{
    if (!be_p)
        return burst_error(BURST_ERR_INVALID_ARG, "vulkan create: be_p is NULL");
    struct burst_vk_backend *be = calloc(1, sizeof *be);
    if (!be)
        return burst_error(BURST_ERR_NO_MEMORY, "vulkan create: out of memory");
    pthread_mutex_init(&be->qlock, NULL);
    pthread_mutex_init(&be->mlock, NULL);
    pthread_mutex_init(&be->slock, NULL);
    pthread_mutex_init(&be->plock, NULL);
    pthread_mutex_init(&be->proflock, NULL);
    pthread_cond_init(&be->scond, NULL);
    burst_status_t st = burst_vk_env_read(&be->env);

    VkPhysicalDevice devs[BURST_VK_MAX_DEVICES];
    uint32_t ndev = 0;
    if (st == BURST_OK)
        st = burst_vk_instance(&be->inst, devs, &ndev);
    if (st == BURST_OK)
        st = burst_vk_select(be->inst, devs, ndev, params ? params->device : NULL, &be->index);
    if (st == BURST_OK) {
        be->phys = devs[be->index];
        burst_vk_caps_read(be->inst, be->phys, &be->caps);
        const char *why = burst_vk_unusable(&be->caps);
        /* "auto" wants hardware: a software rasteriser (lavapipe, SwiftShader) on the cpu is
         * far slower than the cpu backend; it runs only when "vulkan" is asked for by name. */
        int by_auto = params && params->backend && strcmp(params->backend, "auto") == 0;
        if (why)
            st = burst_error(BURST_ERR_NO_DEVICE, "vulkan: device %d (%s) is unusable: %s",
                             be->index, be->caps.name, why);
        else if (by_auto && be->caps.type == VK_PHYSICAL_DEVICE_TYPE_CPU)
            st = burst_error(BURST_ERR_NO_DEVICE,
                             "vulkan: device %d (%s) is a software (cpu) device, which backend "
                             "\"auto\" skips; ask for backend \"vulkan\" to use it",
                             be->index, be->caps.name);
    }
    if (st == BURST_OK) {
        be->use_coopmat = burst_vk_coopmat_usable(&be->caps, &be->env);
        be->cm_khr = be->use_coopmat && !burst_vk_coopmat_khr_why(&be->caps, &be->env);
        be->use_cm2 = !burst_vk_cm2_why(&be->caps, &be->env);
        be->elem_gpu = burst_vk_elem_gpu(&be->caps, &be->env);
        be->stage = be->env.stage || be->caps.type != VK_PHYSICAL_DEVICE_TYPE_CPU;
        st = burst_vk_device_create(be);
    }
    if (st == BURST_OK) {
        burst_vk_memory_init(be);
        if (be->mem_host == ~0u && be->mem_fast == ~0u)
            st = burst_error(BURST_ERR_NO_DEVICE,
                             "vulkan: device %d (%s) has no host-visible coherent memory",
                             be->index, be->caps.name);
        else
            burst_vk_share_init(be, be->export_ext);
    }
    if (st == BURST_OK)
        st = burst_vk_pipeline_init(be);
    if (st != BURST_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", burst_last_error());
        burst_vk_destroy(be);
        return burst_error(st, "%s", msg);
    }
    burst_vk_tiles_rule(&be->caps, &be->env, &be->tiles);
    burst_vk_cmq_check(be); /* the *_cmq kernels only where the layout is as they assume */
    if (be->cmq.why[0])
        burst_log(be->env.profile ? BURST_LOG_INFO : BURST_LOG_DEBUG, BURST_SUB_VULKAN, -1,
                  "fwd_cmq, dq_cmq, dkv_cmq off: %s", be->cmq.why);
    *be_p = be;
    return BURST_OK;
}

static int burst_vk_num_threads(void *be)
{
    (void)be;
    return 1;
}

static const char *burst_vk_type_str(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated gpu";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

/* What burst_vk_probe_device works out about a device before it reports it. */
struct burst_vk_probe_facts {
    const char *why;     /* why the device is unusable, or NULL */
    const char *khr_why; /* why the KHR cooperative-matrix kernels are off, or NULL */
    const char *cm2_why; /* why the workgroup-scope kernels are off, or NULL */
    const char *cm_fam;  /* the cooperative-matrix family that runs: none, nv, khr */
    const char *elem;    /* where copy / fill / accumulate run: none, invalid, gpu, cpu */
    int cm;              /* subgroup-scope cooperative-matrix kernels usable */
    char api[32], path[64];
};

/* Head dims whose per-call *_cmq tiles the probe lists (burst_vk_cmq_large_tiles). */
static const int burst_vk_probe_dims[] = {32, 40, 64, 80, 96, 128, 160, 192, 256};
#define BURST_VK_PROBE_NDIMS ((int)(sizeof burst_vk_probe_dims / sizeof burst_vk_probe_dims[0]))

/* Whether the rule gave any *_cmq kernel a tile. */
static int burst_vk_probe_has_cmq(const struct burst_vk_tiles *t)
{
    int any = 0;
    for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++)
        for (int d = 0; d < BURST_VK_NUM_DCLASS; d++)
            any |= t->k[k][d].t > 0;
    return any;
}

/* The *_cmq tiles of large calls by head dim, as a JSON array. */
static void burst_vk_probe_large_json(struct burst_sb *out, const struct burst_vk_caps *c,
                                      const struct burst_vk_tiles *t,
                                      const struct burst_vk_env *env)
{
    static const char *const names[3] = {"fwd_cmq", "dq_cmq", "dkv_cmq"};
    const int n = burst_vk_probe_has_cmq(t) ? BURST_VK_PROBE_NDIMS : 0;
    burst_sb_printf(out, "[");
    for (int i = 0; i < n; i++) {
        struct burst_vk_tile tl[3];
        burst_vk_cmq_large_tiles(c, env, t, burst_vk_probe_dims[i], tl);
        burst_sb_printf(out, "%s{\"head_dim\": %d", i ? ", " : "", burst_vk_probe_dims[i]);
        for (int k = 0; k < 3; k++)
            burst_sb_printf(out, ", \"%s\": {\"t\": %d, \"br\": %d, \"bc\": %d, \"loaders\": %d}",
                            names[k], tl[k].t, tl[k].br, tl[k].bc, tl[k].ld);
        burst_sb_printf(out, "}");
    }
    burst_sb_printf(out, "]");
}

/* The *_cmq tiles of large calls by head dim, as text (nothing where the rule gave none). */
static void burst_vk_probe_large_text(struct burst_sb *out, const struct burst_vk_caps *c,
                                      const struct burst_vk_tiles *t,
                                      const struct burst_vk_env *env)
{
    if (!burst_vk_probe_has_cmq(t))
        return;
    burst_sb_printf(out, "    large calls (4 waves of workgroups or more, no mask) by head dim, "
                         "fwd_cmq / dq_cmq / dkv_cmq:\n");
    for (int i = 0; i < BURST_VK_PROBE_NDIMS; i++) {
        struct burst_vk_tile tl[3];
        burst_vk_cmq_large_tiles(c, env, t, burst_vk_probe_dims[i], tl);
        burst_sb_printf(out, "      d %3d:", burst_vk_probe_dims[i]);
        for (int k = 0; k < 3; k++) {
            burst_sb_printf(out, "%s", k ? " /" : "");
            if (!tl[k].t)
                burst_sb_printf(out, " -");
            else if (tl[k].ld)
                burst_sb_printf(out, " %dx%dx%d+%d", tl[k].t, tl[k].br, tl[k].bc, tl[k].ld);
            else
                burst_sb_printf(out, " %dx%dx%d", tl[k].t, tl[k].br, tl[k].bc);
        }
        burst_sb_printf(out, "\n");
    }
}

/* One device of burst_vk_probe as a JSON object. */
static void burst_vk_probe_json(struct burst_sb *out, int index, const struct burst_vk_caps *c,
                                const struct burst_vk_tiles *t, const struct burst_vk_env *env,
                                const struct burst_vk_probe_facts *f)
{
    const char *why = f->why, *khr_why = f->khr_why, *cm2_why = f->cm2_why, *cm_fam = f->cm_fam,
               *elem = f->elem, *api = f->api, *path = f->path;
    burst_sb_printf(out, "{\"index\": %d, \"name\": ", index);
    burst_sb_json_str(out, c->name);
    burst_sb_printf(out,
                    ", \"type\": \"%s\", \"vendor_id\": %u, \"device_id\": %u, \"api\": "
                    "\"%s\", \"driver_version\": %u, \"usable\": %s, ",
                    burst_vk_type_str(c->type), c->vendor_id, c->device_id, api, c->driver_version,
                    why ? "false" : "true");
    burst_sb_printf(out, "\"cache_uuid\": \"");
    for (int i = 0; i < (int)VK_UUID_SIZE; i++)
        burst_sb_printf(out, "%02x", c->cache_uuid[i]);
    burst_sb_printf(out, "\", ");
    if (why) {
        burst_sb_printf(out, "\"reason\": ");
        burst_sb_json_str(out, why);
        burst_sb_printf(out, ", ");
    }
    burst_sb_printf(out,
                    "\"shared_memory\": %u, \"max_invocations\": %u, \"subgroup_size\": %u, "
                    "\"subgroup_size_range\": [%u, %u], \"subgroup_shuffle\": %s, "
                    "\"fp16\": %s, \"bf16\": %s, \"int8\": %s, \"int64\": %s, "
                    "\"buffer_device_address\": %s, \"timestamps\": %s, "
                    "\"float_atomic_add\": %s, \"multiprocessors\": %u, "
                    "\"coopmat_nv\": %s, \"coopmat_khr\": %s, \"coopmat_shapes\": [",
                    c->max_shared, c->max_invocations, c->subgroup, c->subgroup_min,
                    c->subgroup_max, c->subgroup_shuffle ? "true" : "false",
                    c->fp16 ? "true" : "false", c->bf16 ? "true" : "false",
                    c->int8 ? "true" : "false", c->int64 ? "true" : "false",
                    c->bda ? "true" : "false", c->timestamps ? "true" : "false",
                    c->atomic_add ? "true" : "false", c->sm_count, c->coopmat_nv ? "true" : "false",
                    c->coopmat_khr ? "true" : "false");
    for (int i = 0; i < c->ncoop; i++)
        burst_sb_printf(out, "%s{\"m\": %u, \"n\": %u, \"k\": %u, \"a\": %d, \"c\": %d}",
                        i ? ", " : "", c->coop[i].m, c->coop[i].n, c->coop[i].k, c->coop[i].a_type,
                        c->coop[i].c_type);
    burst_sb_printf(out, "], \"heaps\": [");
    for (uint32_t i = 0; i < c->nheaps; i++)
        burst_sb_printf(out, "%s{\"bytes\": %llu, \"device_local\": %s}", i ? ", " : "",
                        (unsigned long long)c->heap_size[i],
                        c->heap_device_local[i] ? "true" : "false");
    burst_sb_printf(out,
                    "], \"host_visible_device_local\": %s, \"path\": \"%s\", "
                    "\"coopmat\": \"%s\", \"coopmat_khr_off\": ",
                    c->host_visible_device_local ? "true" : "false", path, cm_fam);
    if (khr_why)
        burst_sb_json_str(out, khr_why);
    else
        burst_sb_printf(out, "null");
    burst_sb_printf(out, ", \"coopmat2\": %s, \"coopmat2_off\": ", c->coopmat2 ? "true" : "false");
    if (cm2_why)
        burst_sb_json_str(out, cm2_why);
    else
        burst_sb_printf(out, "null");
    burst_sb_printf(out, ", \"coopmat2_workgroups\": [%u, %u, %u, %u], \"coopmat2_shapes\": ",
                    c->cm2_wg[0], c->cm2_wg[1], c->cm2_wg[2], c->cm2_wg[3]);
    burst_sb_json_str(out, c->cm2_shapes);
    burst_sb_printf(out, ", \"elem_ops\": \"%s\", \"tiles\": {", elem);
    for (int k = 0; k < BURST_VK_NUM_KERNELS; k++) {
        burst_sb_printf(out, "%s\"%s\": [", k ? ", " : "", burst_vk_kernel_names[k]);
        for (int d = 0; d < BURST_VK_NUM_DCLASS; d++)
            burst_sb_printf(out,
                            "%s{\"max_head_dim\": %d, \"t\": %d, \"br\": %d, \"bc\": %d, "
                            "\"loaders\": %d}",
                            d ? ", " : "", burst_vk_dclass_max[d], t->k[k][d].t, t->k[k][d].br,
                            t->k[k][d].bc, t->k[k][d].ld);
        burst_sb_printf(out, "]");
    }
    burst_sb_printf(out, "}, \"cmq_large_call_tiles\": ");
    burst_vk_probe_large_json(out, c, t, env);
    burst_sb_printf(out, "}");
}

/* One device of burst_vk_probe as text. */
static void burst_vk_probe_text(struct burst_sb *out, int index, const struct burst_vk_caps *c,
                                const struct burst_vk_tiles *t, const struct burst_vk_env *env,
                                const struct burst_vk_probe_facts *f)
{
    const char *why = f->why, *khr_why = f->khr_why, *cm2_why = f->cm2_why, *elem = f->elem,
               *api = f->api, *path = f->path;
    const int cm = f->cm;
    char smc[48] = "";
    if (c->sm_count)
        snprintf(smc, sizeof smc, ", %u multiprocessors", c->sm_count);
    burst_sb_printf(out,
                    "  device %d: %s (%s, Vulkan %s, driver %u, vendor 0x%04x device 0x%04x)%s%s\n",
                    index, c->name, burst_vk_type_str(c->type), api, c->driver_version,
                    c->vendor_id, c->device_id, why ? ": unusable, " : "", why ? why : "");
    burst_sb_printf(out,
                    "    limits: %u B shared memory, %u invocations, subgroup %u (%u..%u)%s%s\n"
                    "    types: fp16 %s, bf16 %s, int8 %s, int64 %s; buffer device address %s; "
                    "timestamps %s; float atomic add %s\n",
                    c->max_shared, c->max_invocations, c->subgroup, c->subgroup_min,
                    c->subgroup_max, c->subgroup_shuffle ? ", shuffles" : ", no shuffles", smc,
                    c->fp16 ? "yes" : "no", c->bf16 ? "yes" : "no", c->int8 ? "yes" : "no",
                    c->int64 ? "yes" : "no", c->bda ? "yes" : "no", c->timestamps ? "yes" : "no",
                    c->atomic_add ? "yes" : "no");
    burst_sb_printf(out, "    cooperative matrix: NV %s, KHR %s%s, NV2 %s",
                    c->coopmat_nv ? "yes" : "no", c->coopmat_khr ? "yes" : "no",
                    c->khr_f16 ? " (16x16x16 fp16)" : "", c->coopmat2 ? "yes" : "no");
    for (int i = 0; i < c->ncoop; i++)
        burst_sb_printf(out, "%s%ux%ux%u (A type %d, C type %d)", i ? ", " : "; NV: ", c->coop[i].m,
                        c->coop[i].n, c->coop[i].k, c->coop[i].a_type, c->coop[i].c_type);
    burst_sb_printf(out,
                    "\n    subgroup-scope kernels (*_cm, *_cmq): %s%s%s\n"
                    "    workgroup-scope kernels (*_cm2): %s%s%s%s",
                    !cm       ? (env->coopmat ? "none: no 16x16x16 fp16 shape of either "
                                                "extension with a fixed subgroup size"
                                              : "none: BURST_VK_COOPMAT=0")
                    : khr_why ? "NV builds"
                              : "KHR builds",
                    cm && khr_why ? "; KHR off: " : "", cm && khr_why ? khr_why : "",
                    cm2_why ? "off: " : "on", cm2_why ? cm2_why : "",
                    c->cm2_shapes[0] ? "; fp16 shapes (granularity@invocations) " : "",
                    c->cm2_shapes);
    burst_sb_printf(out, "\n    memory:");
    for (uint32_t i = 0; i < c->nheaps; i++)
        burst_sb_printf(out, " heap %u %.1f GiB%s;", i,
                        (double)c->heap_size[i] / (1024.0 * 1024.0 * 1024.0),
                        c->heap_device_local[i] ? " device-local" : "");
    burst_sb_printf(out, " buffers are %s\n",
                    c->host_visible_device_local ? "device-local and host-visible"
                                                 : "host-visible (not device-local)");
    burst_sb_printf(out, "    copy / fill / accumulate: %s (BURST_VK_ELEM=%s)\n",
                    strcmp(elem, "gpu") == 0   ? "shaders"
                    : strcmp(elem, "cpu") == 0 ? "the calling thread"
                                               : elem,
                    env->elem_str[0] ? env->elem_str : "auto");
    burst_sb_printf(out,
                    "    path: %s; tiles T x BR x BC (*_rt: DC x BR x BC; *_cm2: "
                    "invocations x BR x BC) by head dim "
                    "<= 64 / 128 / 256:\n",
                    path);
    for (int k = 0; k < BURST_VK_NUM_KERNELS; k++) {
        if (k == BURST_VK_DELTA)
            continue;
        burst_sb_printf(out, "      %-7s", burst_vk_kernel_names[k]);
        for (int d = 0; d < BURST_VK_NUM_DCLASS; d++) {
            if (t->k[k][d].t && t->k[k][d].ld)
                burst_sb_printf(out, " %dx%dx%d+%d", t->k[k][d].t, t->k[k][d].br, t->k[k][d].bc,
                                t->k[k][d].ld);
            else if (t->k[k][d].t)
                burst_sb_printf(out, " %dx%dx%d", t->k[k][d].t, t->k[k][d].br, t->k[k][d].bc);
            else
                burst_sb_printf(out, " -");
        }
        burst_sb_printf(out, "\n");
    }
    /* fp32 inputs on the *_cmq kernels in two fp16 halves (vk_caps.c burst_vk_cmq_f32_tile) */
    burst_sb_printf(out,
                    "    fp32 on fwd_cmq / dq_cmq / dkv_cmq in two fp16 halves, d <= 64 / 128:");
    for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++)
        for (int d = 64; d <= 128; d += 64) {
            struct burst_vk_tile tl = burst_vk_cmq_f32_tile(c, env, (enum burst_vk_kernel)k, d);
            if (tl.t)
                burst_sb_printf(out, " %dx%dx%d", tl.t, tl.br, tl.bc);
            else
                burst_sb_printf(out, " -");
        }
    burst_sb_printf(out, "%s\n", env->cmq_fp32 ? "" : " (BURST_VK_CMQ_FP32=0)");
    burst_vk_probe_large_text(out, c, t, env);
}

static void burst_vk_probe_device(struct burst_sb *out, int json, int index, VkInstance inst,
                                  VkPhysicalDevice phys, const struct burst_vk_env *env)
{
    struct burst_vk_caps c;
    burst_vk_caps_read(inst, phys, &c);
    struct burst_vk_tiles t;
    burst_vk_tiles_rule(&c, env, &t);
    struct burst_vk_probe_facts f;
    f.why = burst_vk_unusable(&c);
    snprintf(f.api, sizeof f.api, "%u.%u.%u", VK_API_VERSION_MAJOR(c.api_version),
             VK_API_VERSION_MINOR(c.api_version), VK_API_VERSION_PATCH(c.api_version));
    f.cm = burst_vk_coopmat_usable(&c, env);
    f.khr_why = burst_vk_coopmat_khr_why(&c, env);
    f.cm2_why = burst_vk_cm2_why(&c, env);
    /* which cooperative-matrix family runs, or why none */
    f.cm_fam = !f.cm ? "none" : f.khr_why ? "nv" : "khr";
    /* the cooperative-matrix kernels for fp16, then the forward's and the backward's for the
     * rest (as chosen for head dims <= 128): register-tiled or scalar */
    int rtf = t.k[BURST_VK_FWD_RT][1].t > 0;
    int rtb = t.k[BURST_VK_DQ_RT][1].t > 0 && t.k[BURST_VK_DKV_RT][1].t > 0;
    const char *fp = rtf ? "tiled" : "scalar";
    const char *bp = rtb ? "tiled" : "scalar";
    if (f.why)
        snprintf(f.path, sizeof f.path, "none");
    else
        snprintf(f.path, sizeof f.path, "%s%s%s%s%s", f.cm2_why ? "" : "coopmat2+",
                 f.cm ? (f.khr_why ? "coopmat_nv+" : "coopmat_khr+") : "", fp,
                 strcmp(fp, bp) ? "+" : "", strcmp(fp, bp) ? bp : "");
    f.elem = f.why                            ? "none"
             : env->elem == BURST_VK_ELEM_BAD ? "invalid"
             : burst_vk_elem_gpu(&c, env)     ? "gpu"
                                              : "cpu";
    if (json)
        burst_vk_probe_json(out, index, &c, &t, env, &f);
    else
        burst_vk_probe_text(out, index, &c, &t, env, &f);
}

static void burst_vk_probe(const struct burst_context_params *params, struct burst_sb *out,
                           int json)
{
    (void)params;
    struct burst_vk_env env;
    (void)burst_vk_env_read(&env); /* a malformed setting: its default here, create names it */
    VkInstance inst;
    VkPhysicalDevice devs[BURST_VK_MAX_DEVICES];
    uint32_t n = 0;
    burst_status_t st = burst_vk_instance(&inst, devs, &n);
    if (st != BURST_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", burst_last_error());
        burst_error_clear();
        if (json) {
            burst_sb_printf(out, "{\"backend\": \"vulkan\", \"available\": false, \"reason\": ");
            burst_sb_json_str(out, why);
            burst_sb_printf(out, ", \"devices\": []}");
        } else {
            burst_sb_printf(out, "  unavailable: %s\n", why);
        }
        return;
    }
    if (json)
        burst_sb_printf(out, "{\"backend\": \"vulkan\", \"available\": true, \"devices\": [");
    for (uint32_t i = 0; i < n; i++) {
        if (json && i)
            burst_sb_printf(out, ", ");
        burst_vk_probe_device(out, json, (int)i, inst, devs[i], &env);
    }
    if (json)
        burst_sb_printf(out, "]}");
    vkDestroyInstance(inst, NULL);
}

/* A GPU's block buffers are device memory mapped for the host: another process's transport
 * cannot read them; on a discrete GPU they sit behind the PCIe BAR, where the CPU reads them
 * uncached (backend.h), so ranks of one process stage too. A CPU device's (lavapipe's) are
 * ordinary host memory, and so are an integrated GPU's for ranks of one process. */
static int burst_vk_stage_transfers(void *bev, int in_process)
{
    struct burst_vk_backend *be = bev;
    if (!be->stage)
        return 0;
    return !in_process || be->env.stage ||
           (be->caps.type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU && be->mem_fast != ~0u);
}

/* Between two registered buffers (device memory, staging buffers): the device's copy command.
 * On a GPU, between a registered buffer and other host memory: through a registered host buffer
 * and that command (the CPU reads mapped device memory uncached, and cannot touch the device-only
 * scratch at all: vk_share.c). Otherwise the CPU. */
static burst_status_t burst_vk_memcpy(void *bev, void *dst, const void *src, size_t bytes)
{
    struct burst_vk_backend *be = bev;
    VkBuffer db, sb;
    VkDeviceSize doff, soff;
    if (!bytes)
        return BURST_OK;
    const int dreg = be->stage && burst_vk_buffer_of(be, dst, bytes, &db, &doff);
    const int sreg = be->stage && burst_vk_buffer_of(be, src, bytes, &sb, &soff);
    if (dreg && sreg)
        return burst_vk_copy_buffers(be, db, doff, sb, soff, bytes);
    void *tmp = dreg || sreg ? burst_vk_host_buffer(be, bytes) : NULL;
    if (tmp) {
        burst_status_t st = BURST_OK;
        if (sreg && (st = burst_vk_memcpy(be, tmp, src, bytes)) == BURST_OK)
            memcpy(dst, tmp, bytes);
        if (dreg) {
            memcpy(tmp, src, bytes);
            st = burst_vk_memcpy(be, dst, tmp, bytes);
        }
        burst_vk_free(be, tmp);
        return st;
    }
    if (dreg || sreg)
        return burst_error(BURST_ERR_NO_MEMORY, "vulkan: %zu bytes of host staging memory", bytes);
    memcpy(dst, src, bytes);
    return BURST_OK;
}

/* Staging buffers: registered host memory the device copies to and from (stage), else the
 * heap. */
static void *burst_vk_host_alloc(void *bev, size_t bytes)
{
    struct burst_vk_backend *be = bev;
    if (be->stage)
        return burst_vk_host_buffer(be, bytes ? bytes : 1);
    return calloc(1, bytes ? bytes : 1);
}

static void burst_vk_host_free(void *bev, void *ptr)
{
    struct burst_vk_backend *be = bev;
    if (be->stage)
        burst_vk_free(be, ptr);
    else
        free(ptr);
}

const struct burst_backend_ops burst_vk_backend_ops = {
    .size = sizeof(struct burst_backend_ops),
    .name = "vulkan",
    .core =
        {
            .features = BURST_BE_DOCS | BURST_BE_SOFTCAP,
            .create = burst_vk_create,
            .destroy = burst_vk_destroy,
            .num_threads = burst_vk_num_threads,
            .probe = burst_vk_probe,
        },
    .mem =
        {
            .alloc = burst_vk_alloc,
            .free = burst_vk_free,
            .alloc_scratch = burst_vk_alloc_scratch,
            .device_memory = 0,
            .memcpy = burst_vk_memcpy,
            .host_alloc = burst_vk_host_alloc,
            .host_free = burst_vk_host_free,
            .stage_transfers = burst_vk_stage_transfers,
        },
    .elem =
        {
            .copy = burst_vk_copy,
            .fill = burst_vk_fill,
            .accumulate = burst_vk_accumulate,
        },
    .attn =
        {
            .fwd_step = burst_vk_fwd_step,
            .bwd_delta = burst_vk_bwd_delta,
            .bwd_step = burst_vk_bwd_step,
        },
    .stream =
        {
            .sync = NULL,
        },
    .devcopy = &burst_vk_devshare, /* shared with a cuda rank on the same GPU: vk_share.c */
};
