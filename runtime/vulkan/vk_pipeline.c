/*
 * runtime/vulkan/vk_pipeline.c - compute pipelines cached per (kernel, head dim, tile, dtypes).
 *
 * One pipeline layout for every kernel: no descriptor sets, an 8-byte push constant holding the
 * device address of the call's parameter block. Tile sizes, head dim and dtypes are
 * specialization constants (ids in shaders/common.glsl). The elementwise kernels (vk_elem_gpu.c)
 * use the same key with head dim 0, tile {1, workgroup size, 1} and their source / destination
 * dtypes in the first two dtype slots (constants 4 and 5 of shaders/elem.glsl). Pipelines live
 * until the backend is destroyed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "logger.h"
#include "strbuf.h"
#include "vk_internal.h"
#include "vk_spv_config.h"

#include "bwd_delta.spv.h"
#include "bwd_dkv.spv.h"
#include "bwd_dq.spv.h"
#include "elem_acc.spv.h"
#include "elem_amax.spv.h"
#include "elem_cvt.spv.h"
#include "elem_copy.spv.h"
#include "elem_fill.spv.h"
#include "fwd.spv.h"
#include "fwd_rt.spv.h"
#include "bwd_dkv_rt.spv.h"
#include "bwd_dq_rt.spv.h"
#if BURST_VK_SPV_BWD_DKVQ_RT
#include "bwd_dkvq_rt.spv.h"
#endif
#if BURST_VK_SPV_FWD_CM_NV
#include "fwd_cm_nv.spv.h"
#endif
#if BURST_VK_SPV_FWD_CMQ_NV && BURST_VK_SPV_CM_LAYOUT_NV
#include "cm_layout_nv.spv.h"
#include "fwd_cmq_nv.spv.h"
#endif
#if BURST_VK_SPV_BWD_DQ_CMQ_NV && BURST_VK_SPV_BWD_DKV_CMQ_NV
#include "bwd_dkv_cmq_nv.spv.h"
#include "bwd_dq_cmq_nv.spv.h"
#endif
#if BURST_VK_SPV_BWD_DQ_CM_NV && BURST_VK_SPV_BWD_DKV_CM_NV
#include "bwd_dkv_cm_nv.spv.h"
#include "bwd_dq_cm_nv.spv.h"
#endif
/* the KHR builds: all or none (vk_caps.c burst_vk_coopmat_khr_why) */
#if BURST_VK_SPV_FWD_CM_KHR && BURST_VK_SPV_BWD_DQ_CM_KHR && BURST_VK_SPV_BWD_DKV_CM_KHR &&        \
    BURST_VK_SPV_FWD_CMQ_KHR && BURST_VK_SPV_BWD_DQ_CMQ_KHR && BURST_VK_SPV_BWD_DKV_CMQ_KHR &&     \
    BURST_VK_SPV_CM_LAYOUT_KHR
#define BURST_VK_KHR_BUILT 1
#include "bwd_dkv_cm_khr.spv.h"
#include "bwd_dkv_cmq_khr.spv.h"
#include "bwd_dq_cm_khr.spv.h"
#include "bwd_dq_cmq_khr.spv.h"
#include "cm_layout_khr.spv.h"
#include "fwd_cm_khr.spv.h"
#include "fwd_cmq_khr.spv.h"
#endif
#if BURST_VK_SPV_FWD_CM2 && BURST_VK_SPV_BWD_DQ_CM2 && BURST_VK_SPV_BWD_DKV_CM2
#define BURST_VK_CM2_BUILT 1
#include "bwd_dkv_cm2.spv.h"
#include "bwd_dq_cm2.spv.h"
#include "fwd_cm2.spv.h"
#endif

struct burst_vk_spv {
    const uint32_t *code;
    size_t bytes;
};

/* The SPIR-V of kernel k: the KHR build of the subgroup-scope cooperative-matrix kernels where
 * `khr`. */
static struct burst_vk_spv burst_vk_spv_of(enum burst_vk_kernel k, int khr)
{
#define BURST_VK_SPV(x) ((struct burst_vk_spv){x, sizeof(x)})
#ifdef BURST_VK_KHR_BUILT
    if (khr) {
        switch (k) {
        case BURST_VK_FWD_CM: return BURST_VK_SPV(burst_vk_spv_fwd_cm_khr);
        case BURST_VK_DQ_CM: return BURST_VK_SPV(burst_vk_spv_bwd_dq_cm_khr);
        case BURST_VK_DKV_CM: return BURST_VK_SPV(burst_vk_spv_bwd_dkv_cm_khr);
        case BURST_VK_FWD_CMQ: return BURST_VK_SPV(burst_vk_spv_fwd_cmq_khr);
        case BURST_VK_DQ_CMQ: return BURST_VK_SPV(burst_vk_spv_bwd_dq_cmq_khr);
        case BURST_VK_DKV_CMQ: return BURST_VK_SPV(burst_vk_spv_bwd_dkv_cmq_khr);
        case BURST_VK_CM_LAYOUT: return BURST_VK_SPV(burst_vk_spv_cm_layout_khr);
        default: break;
        }
    }
#else
    (void)khr;
#endif
    switch (k) {
    case BURST_VK_FWD: return BURST_VK_SPV(burst_vk_spv_fwd);
    case BURST_VK_DQ: return BURST_VK_SPV(burst_vk_spv_bwd_dq);
    case BURST_VK_DKV: return BURST_VK_SPV(burst_vk_spv_bwd_dkv);
    case BURST_VK_DELTA: return BURST_VK_SPV(burst_vk_spv_bwd_delta);
    case BURST_VK_FWD_RT: return BURST_VK_SPV(burst_vk_spv_fwd_rt);
    case BURST_VK_DQ_RT: return BURST_VK_SPV(burst_vk_spv_bwd_dq_rt);
    case BURST_VK_DKV_RT: return BURST_VK_SPV(burst_vk_spv_bwd_dkv_rt);
#if BURST_VK_SPV_BWD_DKVQ_RT
    case BURST_VK_DKVQ_RT: return BURST_VK_SPV(burst_vk_spv_bwd_dkvq_rt);
#endif
    case BURST_VK_COPY: return BURST_VK_SPV(burst_vk_spv_elem_copy);
    case BURST_VK_FILL: return BURST_VK_SPV(burst_vk_spv_elem_fill);
    case BURST_VK_ACC: return BURST_VK_SPV(burst_vk_spv_elem_acc);
    case BURST_VK_AMAX: return BURST_VK_SPV(burst_vk_spv_elem_amax);
    case BURST_VK_CVT: return BURST_VK_SPV(burst_vk_spv_elem_cvt);
#if BURST_VK_SPV_FWD_CM_NV
    case BURST_VK_FWD_CM: return BURST_VK_SPV(burst_vk_spv_fwd_cm_nv);
#endif
#if BURST_VK_SPV_FWD_CMQ_NV && BURST_VK_SPV_CM_LAYOUT_NV
    case BURST_VK_FWD_CMQ: return BURST_VK_SPV(burst_vk_spv_fwd_cmq_nv);
    case BURST_VK_CM_LAYOUT: return BURST_VK_SPV(burst_vk_spv_cm_layout_nv);
#endif
#if BURST_VK_SPV_BWD_DQ_CMQ_NV && BURST_VK_SPV_BWD_DKV_CMQ_NV
    case BURST_VK_DQ_CMQ: return BURST_VK_SPV(burst_vk_spv_bwd_dq_cmq_nv);
    case BURST_VK_DKV_CMQ: return BURST_VK_SPV(burst_vk_spv_bwd_dkv_cmq_nv);
#endif
#if BURST_VK_SPV_BWD_DQ_CM_NV && BURST_VK_SPV_BWD_DKV_CM_NV
    case BURST_VK_DQ_CM: return BURST_VK_SPV(burst_vk_spv_bwd_dq_cm_nv);
    case BURST_VK_DKV_CM: return BURST_VK_SPV(burst_vk_spv_bwd_dkv_cm_nv);
#endif
#ifdef BURST_VK_CM2_BUILT
    case BURST_VK_FWD_CM2: return BURST_VK_SPV(burst_vk_spv_fwd_cm2);
    case BURST_VK_DQ_CM2: return BURST_VK_SPV(burst_vk_spv_bwd_dq_cm2);
    case BURST_VK_DKV_CM2: return BURST_VK_SPV(burst_vk_spv_bwd_dkv_cm2);
#endif
    default: return (struct burst_vk_spv){NULL, 0};
    }
#undef BURST_VK_SPV
}

burst_status_t burst_vk_pipeline_init(struct burst_vk_backend *be)
{
    VkPushConstantRange pcr = {
        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
        .offset = 0,
        .size = sizeof(uint64_t),
    };
    VkPipelineLayoutCreateInfo lci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
        .pushConstantRangeCount = 1,
        .pPushConstantRanges = &pcr,
    };
    return burst_vk_result(vkCreatePipelineLayout(be->dev, &lci, NULL, &be->layout),
                           "vulkan: vkCreatePipelineLayout");
}

/* BURST_VK_PROFILE: the driver's statistics of a new pipeline (register count, spills, ...
 * whatever it reports), one message (info) per executable. */
static void burst_vk_pipeline_print_stats(struct burst_vk_backend *be, const uint32_t key[11],
                                          VkPipeline pipe)
{
    PFN_vkGetPipelineExecutablePropertiesKHR props_fn =
        (PFN_vkGetPipelineExecutablePropertiesKHR)vkGetDeviceProcAddr(
            be->dev, "vkGetPipelineExecutablePropertiesKHR");
    PFN_vkGetPipelineExecutableStatisticsKHR stats_fn =
        (PFN_vkGetPipelineExecutableStatisticsKHR)vkGetDeviceProcAddr(
            be->dev, "vkGetPipelineExecutableStatisticsKHR");
    if (!props_fn || !stats_fn || !burst_log_on(BURST_SUB_VULKAN, BURST_LOG_INFO))
        return;
    VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipe};
    uint32_t nexe = 0;
    if (props_fn(be->dev, &pi, &nexe, NULL) != VK_SUCCESS)
        return;
    for (uint32_t e = 0; e < nexe; e++) {
        VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                          .pipeline = pipe,
                                          .executableIndex = e};
        VkPipelineExecutableStatisticKHR st[32];
        uint32_t n = 32;
        for (uint32_t i = 0; i < n; i++)
            st[i] = (VkPipelineExecutableStatisticKHR){
                .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
        VkResult r = stats_fn(be->dev, &ei, &n, st);
        if (r != VK_SUCCESS && r != VK_INCOMPLETE)
            continue;
        struct burst_sb sb = {0};
        for (uint32_t i = 0; i < n; i++) {
            burst_sb_printf(&sb, " %s=", st[i].name);
            switch (st[i].format) {
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
                burst_sb_printf(&sb, "%u", (unsigned)st[i].value.b32);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
                burst_sb_printf(&sb, "%lld", (long long)st[i].value.i64);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
                burst_sb_printf(&sb, "%llu", (unsigned long long)st[i].value.u64);
                break;
            default: burst_sb_printf(&sb, "%g", st[i].value.f64); break;
            }
        }
        burst_log(BURST_LOG_INFO, BURST_SUB_VULKAN, -1,
                  "pipeline: %s d=%u t=%u br=%u bc=%u ld=%u dtypes=%u%u%u%u:%s",
                  burst_vk_kernel_names[key[0]], key[1], key[2], key[3], key[4], key[9], key[5],
                  key[6], key[7], key[8], sb.failed || !sb.buf ? " (out of memory)" : sb.buf);
        free(sb.buf);
    }
}

static burst_status_t burst_vk_pipeline_build(struct burst_vk_backend *be, const uint32_t key[11],
                                              VkPipeline *pipe_p)
{
    enum burst_vk_kernel k = (enum burst_vk_kernel)key[0];
    struct burst_vk_spv spv = burst_vk_spv_of(k, be->cm_khr);
    if (!spv.code)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "vulkan: kernel %s was not built (glslangValidator lacked an extension)",
                           burst_vk_kernel_names[k]);
    VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = spv.bytes,
        .pCode = spv.code,
    };
    VkShaderModule mod;
    VkResult r = vkCreateShaderModule(be->dev, &mci, NULL, &mod);
    if (r != VK_SUCCESS)
        return burst_vk_result(r, "vulkan: vkCreateShaderModule");
    /* constants 0..7 = key[1..8] (D, T, BR, BC, dtypes); 8 = workgroup size; *_cmq: 9, 10 =
     * the accumulator layout vk_cmq.c found; fwd_cmq: 11, 12 = its softmax step in 16-key
     * chunks (dividing BC / 16) and whether P V goes into O itself (BURST_VK_CMQ_FWD), 13 =
     * whether the next tile's loads fly during the current one, 14 = whether the next softmax
     * step's S MMAs go before this step's softmax (BURST_VK_CMQ_FWD's third field), 15 = its
     * loading subgroups (the tile's ld); dq_cmq, dkv_cmq: 11 = the same (BURST_VK_CMQ_PREFETCH),
     * 12 = whether the scores are soft-capped (key[10]: a pipeline of its own, so that the
     * uncapped one carries no code for the cap); every *_cmq: 16 = the subgroups on each 16
     * rows (burst_vk_cmq_split). A *_cmq kernel keyed with fp32 q (dtype 0) takes its inputs
     * in two fp16 halves (shaders/cm_nv.glsl SPL), which the split depends on. */
    int32_t data[17];
    VkSpecializationMapEntry map[17];
    for (int i = 0; i < 17; i++) {
        data[i] = i < 8 ? (int32_t)key[i + 1] : (int32_t)(key[2] * key[3]);
        map[i] = (VkSpecializationMapEntry){(uint32_t)i, (uint32_t)(i * 4), 4};
    }
    data[9] = (int32_t)be->cmq.rowsel;
    data[10] = (int32_t)be->cmq.coloff;
    int nb = (int)key[4] / 16, smc = be->env.cmq_fwd[0];
    data[11] = smc >= 1 && smc <= nb && nb % smc == 0 ? smc : nb;
    data[12] = be->env.cmq_fwd[1] != 0;
    data[13] = be->env.cmq_prefetch[0] != 0;
    const int f32 = burst_vk_kernel_cmq(k) && key[5] == (uint32_t)BURST_DTYPE_FP32;
    data[14] = be->env.cmq_fwd[2] != 0;
    data[15] = (int32_t)key[9];
    if (k == BURST_VK_DQ_CMQ || k == BURST_VK_DKV_CMQ) {
        data[11] = be->env.cmq_prefetch[k == BURST_VK_DQ_CMQ ? 1 : 2] != 0;
        data[12] = key[10] != 0;
    }
    if (k == BURST_VK_DELTA)
        data[8] = 64;
    data[16] = burst_vk_cmq_split(k, (int)key[1], f32);
    if (burst_vk_kernel_cm(k)) /* BR / 16 (times the split, + ld loading) subgroups of T */
        data[8] = (int32_t)(key[2] * (key[3] / 16 * (uint32_t)data[16] + key[9]));
    if (burst_vk_kernel_rt(k)) /* (BR / 4) x (BC / 4) */
        data[8] = (int32_t)(key[3] / 4 * (key[4] / 4));
    if (k == BURST_VK_CM_LAYOUT) /* one subgroup */
        data[8] = (int32_t)key[2];
    if (burst_vk_kernel_cm2(k)) /* t = the workgroup's invocations */
        data[8] = (int32_t)key[2];
    uint32_t nspec = burst_vk_kernel_cmq(k) ? 17u : 9u;
    VkSpecializationInfo spec = {nspec, map, sizeof data, data};
    VkComputePipelineCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .flags = be->pipe_stats ? VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR : 0,
        .stage =
            {
                .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                .module = mod,
                .pName = "main",
                .pSpecializationInfo = &spec,
            },
        .layout = be->layout,
    };
    r = vkCreateComputePipelines(be->dev, VK_NULL_HANDLE, 1, &pci, NULL, pipe_p);
    vkDestroyShaderModule(be->dev, mod, NULL);
    if (r == VK_SUCCESS && be->pipe_stats)
        burst_vk_pipeline_print_stats(be, key, *pipe_p);
    return burst_vk_result(r, "vulkan: vkCreateComputePipelines");
}

burst_status_t burst_vk_pipeline(struct burst_vk_backend *be, enum burst_vk_kernel k, int d,
                                 const struct burst_vk_tile *tl, const int dtypes[4],
                                 VkPipeline *pipe_p)
{
    return burst_vk_pipeline_capped(be, k, d, tl, dtypes, 0, pipe_p);
}

burst_status_t burst_vk_pipeline_capped(struct burst_vk_backend *be, enum burst_vk_kernel k, int d,
                                        const struct burst_vk_tile *tl, const int dtypes[4],
                                        int capped, VkPipeline *pipe_p)
{
    uint32_t key[11] = {
        (uint32_t)k,         (uint32_t)d,         (uint32_t)tl->t,        (uint32_t)tl->br,
        (uint32_t)tl->bc,    (uint32_t)dtypes[0], (uint32_t)dtypes[1],    (uint32_t)dtypes[2],
        (uint32_t)dtypes[3], (uint32_t)tl->ld,    (uint32_t)(capped != 0)};
    /* building under the lock keeps one pipeline per key; lavapipe compiles at creation, so
     * concurrent first calls wait for each other once */
    pthread_mutex_lock(&be->plock);
    for (size_t i = 0; i < be->npipes; i++) {
        if (memcmp(be->pipes[i].key, key, sizeof key) == 0) {
            *pipe_p = be->pipes[i].pipe;
            pthread_mutex_unlock(&be->plock);
            return BURST_OK;
        }
    }
    burst_status_t st = BURST_OK;
    if (be->npipes == be->cappipes) {
        size_t cap = be->cappipes ? 2 * be->cappipes : 16;
        struct burst_vk_pipe *np = realloc(be->pipes, cap * sizeof *np);
        if (!np)
            st = burst_error(BURST_ERR_NO_MEMORY, "vulkan: out of memory");
        else
            be->pipes = np, be->cappipes = cap;
    }
    VkPipeline pipe = VK_NULL_HANDLE;
    if (st == BURST_OK)
        st = burst_vk_pipeline_build(be, key, &pipe);
    if (st == BURST_OK) {
        memcpy(be->pipes[be->npipes].key, key, sizeof key);
        be->pipes[be->npipes++].pipe = pipe;
        *pipe_p = pipe;
    }
    pthread_mutex_unlock(&be->plock);
    return st;
}

void burst_vk_pipeline_fini(struct burst_vk_backend *be)
{
    for (size_t i = 0; i < be->npipes; i++)
        vkDestroyPipeline(be->dev, be->pipes[i].pipe, NULL);
    free(be->pipes);
    be->pipes = NULL;
    be->npipes = be->cappipes = 0;
    if (be->layout)
        vkDestroyPipelineLayout(be->dev, be->layout, NULL);
    be->layout = VK_NULL_HANDLE;
}
