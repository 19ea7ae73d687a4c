/*
 * runtime/vulkan/vk_caps.c - device capabilities, the environment switches and the tile rule.
 *
 * THE TILE RULE (per kernel, per head-dim class d <= 64 / <= 128 / <= 256, evaluated at the
 * class's largest d so one pipeline serves the class):
 *   The scalar kernels (fwd, dq, dkv: the last resort, where a register-tiled kernel does not
 *      fit the call, and with BURST_VK_RT=0): one invocation a row (T = 1), BR = 64 rows a
 *      workgroup (fewer where maxComputeWorkGroupInvocations is smaller), and BC (rows staged
 *      in shared memory: K/V rows for fwd and dq, Q/dO rows for dkv) the largest power of two
 *      <= 64 with burst_vk_tile_shared() <= min(24 KiB, maxComputeSharedMemorySize - 1 KiB).
 *      When even BC = 1 does not fit, the head-dim class has no scalar kernel (t = 0).
 *   The cooperative-matrix forward (fwd_cm) uses 16x16x16 fp16 MMAs and is valid only where
 *      the device lists that shape: T = the subgroup size, BR = 16 rows per subgroup times 4
 *      subgroups (BURST_VK_CM_ROWS = 16, 32, 64 or 128 sets BR; 128, half the K/V traffic per
 *      query row, measured no faster on the H100), BC = the largest of 64 / 32 / 16 keys
 *      whose tiles fit in maxComputeSharedMemorySize (the whole of it: on the GPUs that have
 *      the extension several workgroups share a multiprocessor's larger memory); half the
 *      subgroups where none fits.
 *      The cooperative-matrix backward (dq_cm, dkv_cm) follows the same rule with 4 subgroups,
 *      for head dims up to 128 (BC: keys of a K/V tile for dq_cm, query rows of a Q/dO tile
 *      for dkv_cm).
 *   The cooperative-matrix kernels on the accumulators' elements (fwd_cmq, dq_cmq, dkv_cmq;
 *      every head dim, subgroups of 32, run only where vk_cmq.c's layout check passes):
 *      the first of a short list that fits shared memory and invocations: fwd_cmq 160 rows
 *      (10 subgroups) x 32 keys with 2 loading subgroups first, then 192 rows x 64 keys, then
 *      128 x 64 (which small calls take: burst_vk_fwd_cmq_call_tile); dq_cmq 128 rows
 *      (8 subgroups) x 64 keys first, dkv_cmq 128 key rows x 64-row query tiles first
 *      (each measured best on the H100 or H200: docs/BENCHMARKS.md; BURST_VK_CMQ_TILE and
 *      BURST_VK_CMQ_BWD_TILE ask for others). dkv_cmq holds its K and V rows in registers,
 *      so its shared memory holds only query tiles: on the H200 (bf16, causal, N = 8K,
 *      2048 / d heads) 128 x 64 took 2.65-2.94 ms at d = 80 to 112 against 3.37-3.47 for
 *      the K tile in shared memory beside 48-row query tiles (64 x 48), and 41.4 ms against
 *      47.0 at d = 128, N = 16K, 32 heads, fp16, full mask. In the d <= 256 class, where
 *      48 KiB hold only one 32-key buffer, the same lists give fwd_cmq 128 x 32 (8
 *      subgroups), dq_cmq 64 x 16 and dkv_cmq 64 x 16, the backward's on two subgroups a 16
 *      rows (burst_vk_cmq_split); on the H200 (bf16, causal, N = 8K) loading subgroups
 *      (96 x 16 + 2) measured 1.3-1.7x slower at d = 160 and 192 and within 3 % at 256,
 *      64-row forward tiles and 32-row dq_cmq tiles slower at all three, and dkv_cmq 6-7 %
 *      faster at 64 x 16 than 32 x 16 (d = 192, 256), 19 % and 17 % faster at 64 x 32 (d =
 *      160, 192: burst_vk_dkv_cmq_call_tile) than with K in shared memory at 32 x 16.
 *   The register-tiled kernels (fwd_rt, dq_rt, dkv_rt, dkvq_rt: those of every input the
 *      cooperative-matrix ones do not take; a tile's T is the chunk depth DC), each: the first
 *      valid of 64 x 64 with DC = 32, 16, 8 (dq_rt: 4 first; dkv_rt, dkvq_rt: 128 x 64, 8
 *      first; see the code),
 *      then 32 x 64, 32 x 32, 16 x 32, 16 x 16 and 8 x 8 (rows x columns; DC 16 to 4):
 *      invocations of 4 x 4 score blocks (256 at 64 x 64), the largest tile with the deepest
 *      chunks whose shared memory fits the whole of maxComputeSharedMemorySize. fwd_rt at
 *      64 x 64: DC = 32 on 48 KiB devices (38.9 KiB at d = 128), 16 on lavapipe's 32 KiB.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"
#include "vk_internal.h"
#include "vk_spv_config.h"

const char *const burst_vk_kernel_names[BURST_VK_NUM_ALL_KERNELS] = {
    "fwd",     "dq",     "dkv",     "delta",   "fwd_cm",    "dq_cm",   "dkv_cm",  "fwd_rt",
    "dq_rt",   "dkv_rt", "dkvq_rt", "fwd_cmq", "dq_cmq",    "dkv_cmq", "fwd_cm2", "dq_cm2",
    "dkv_cm2", "copy",   "fill",    "acc",     "cm_layout", "amax",    "cvt"};
const int burst_vk_dclass_max[BURST_VK_NUM_DCLASS] = {64, 128, 256};

burst_status_t burst_vk_env_read(struct burst_vk_env *env)
{
    /* runtime/settings.h: a malformed value fails; the rows after it keep their defaults */
    struct burst_settings set = {0};
    burst_status_t st = burst_settings_load("vulkan create", BURST_SCOPE_VULKAN, &set);
#define burst_vk_env_int(id) ((int)burst_set_long(&set, BURST_SET_##id))
    env->coopmat = burst_vk_env_int(VK_COOPMAT) != 0;
    env->coopmat_khr = burst_vk_env_int(VK_COOPMAT_KHR) != 0;
    env->cm2 = burst_vk_env_int(VK_CM2) != 0;
    env->rt = burst_vk_env_int(VK_RT) != 0;
    env->atomic = burst_vk_env_int(VK_ATOMIC) != 0;
    const char *rt = burst_set_str(&set, BURST_SET_VK_RT_TILE);
    if (!rt || sscanf(rt, "%d,%d,%d", &env->rt_tile[0], &env->rt_tile[1], &env->rt_tile[2]) != 3)
        env->rt_tile[0] = env->rt_tile[1] = env->rt_tile[2] = 0;
    env->profile = burst_vk_env_int(VK_PROFILE) != 0;
    int cr = burst_vk_env_int(VK_CM_ROWS);
    env->cm_rows = cr == 16 || cr == 32 || cr == 64 || cr == 128 ? cr : 0;
    env->cmq = burst_vk_env_int(VK_CMQ) != 0;
    const char *cq = burst_set_str(&set, BURST_SET_VK_CMQ_TILE);
    int ntl =
        cq ? sscanf(cq, "%d,%d,%d", &env->cmq_tile[0], &env->cmq_tile[1], &env->cmq_tile[2]) : 0;
    if (ntl < 2)
        env->cmq_tile[0] = env->cmq_tile[1] = 0;
    if (ntl < 3)
        env->cmq_tile[2] = 0;
    const char *cb = burst_set_str(&set, BURST_SET_VK_CMQ_BWD_TILE);
    int *bt = env->cmq_bwd_tile;
    if (!cb || sscanf(cb, "%d,%d,%d,%d", &bt[0], &bt[1], &bt[2], &bt[3]) != 4)
        bt[0] = bt[1] = bt[2] = bt[3] = 0;
    const char *cf = burst_set_str(&set, BURST_SET_VK_CMQ_FWD);
    /* measured best on the H100 (docs/BENCHMARKS.md): 1,1,1; the third field may be left out */
    int *cfw = env->cmq_fwd;
    int nf = cf ? sscanf(cf, "%d,%d,%d", &cfw[0], &cfw[1], &cfw[2]) : 0;
    if (nf < 2)
        cfw[0] = cfw[1] = 1;
    if (nf < 3)
        cfw[2] = 1;
    int cb16 = burst_vk_env_int(VK_CMQ_BF16);
    env->cmq_bf16 = cb16 == 0 || cb16 == 2 ? cb16 : 1;
    env->cmq_fp32 = burst_vk_env_int(VK_CMQ_FP32) != 0;
    const char *cp = burst_set_str(&set, BURST_SET_VK_CMQ_PREFETCH);
    int *pf = env->cmq_prefetch;
    if (!cp || sscanf(cp, "%d,%d,%d", &pf[0], &pf[1], &pf[2]) != 3)
        pf[0] = pf[1] = pf[2] = 0; /* measured best on the H100 (docs/BENCHMARKS.md) */
    int ms = burst_vk_env_int(VK_MAX_SHARED);
    env->max_shared = ms > 0 ? (uint32_t)ms : 0;
    const char *e = burst_set_str(&set, BURST_SET_VK_ELEM);
    snprintf(env->elem_str, sizeof env->elem_str, "%s", e ? e : "");
    env->elem = !e || !*e || strcmp(e, "auto") == 0 ? BURST_VK_ELEM_AUTO
                : strcmp(e, "gpu") == 0             ? BURST_VK_ELEM_GPU
                : strcmp(e, "cpu") == 0             ? BURST_VK_ELEM_CPU
                                                    : BURST_VK_ELEM_BAD;
    int eg = burst_vk_env_int(VK_ELEM_GROUPS);
    env->elem_groups = eg > 0 ? (uint32_t)eg : 0;
    env->stage = burst_vk_env_int(VK_STAGE) == 1;
    int ex = burst_vk_env_int(VK_EXPORT);
    env->export_mem = ex == 0 || ex == 2 ? ex : 1;
#undef burst_vk_env_int
    return st;
}

/* The cooperative-matrix part of burst_vk_caps_read: the NV shapes, whether KHR has the
 * 16x16x16 fp16 one, and NV2's features, limits and workgroup shapes. */
static void burst_vk_caps_read_coopmat(VkInstance inst, VkPhysicalDevice phys,
                                       struct burst_vk_caps *caps)
{
    if (caps->coopmat_nv) {
        PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV get =
            (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)vkGetInstanceProcAddr(
                inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
        uint32_t n = 0;
        if (get && get(phys, &n, NULL) == VK_SUCCESS && n > 0) {
            VkCooperativeMatrixPropertiesNV props[16];
            for (uint32_t i = 0; i < 16; i++)
                props[i] = (VkCooperativeMatrixPropertiesNV){
                    .sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV};
            n = n > 16 ? 16 : n;
            VkResult r = get(phys, &n, props);
            for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < n; i++) {
                if (props[i].scope != VK_SCOPE_SUBGROUP_NV)
                    continue;
                caps->coop[caps->ncoop++] =
                    (struct burst_vk_coopmat_shape){props[i].MSize, props[i].NSize, props[i].KSize,
                                                    (int)props[i].AType, (int)props[i].CType};
            }
        }
    }

#ifdef VK_KHR_cooperative_matrix
    if (caps->coopmat_khr) {
        PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR get =
            (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)vkGetInstanceProcAddr(
                inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
        VkCooperativeMatrixPropertiesKHR props[32];
        uint32_t n = 32;
        for (uint32_t i = 0; i < n; i++)
            props[i] = (VkCooperativeMatrixPropertiesKHR){
                .sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR};
        VkResult r = get ? get(phys, &n, props) : VK_ERROR_EXTENSION_NOT_PRESENT;
        for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < n; i++)
            if (props[i].MSize == 16 && props[i].NSize == 16 && props[i].KSize == 16 &&
                props[i].AType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
                props[i].BType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
                props[i].CType == VK_COMPONENT_TYPE_FLOAT32_KHR &&
                props[i].ResultType == VK_COMPONENT_TYPE_FLOAT32_KHR &&
                props[i].scope == VK_SCOPE_SUBGROUP_KHR)
                caps->khr_f16 = 1;
    }
#endif
#ifdef VK_NV_cooperative_matrix2
    if (caps->coopmat2) {
        VkPhysicalDeviceCooperativeMatrix2FeaturesNV cf = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV,
        };
        VkPhysicalDeviceFeatures2 fc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &cf};
        vkGetPhysicalDeviceFeatures2(phys, &fc);
        caps->cm2_features =
            cf.cooperativeMatrixWorkgroupScope && cf.cooperativeMatrixFlexibleDimensions &&
            cf.cooperativeMatrixReductions && cf.cooperativeMatrixConversions &&
            cf.cooperativeMatrixPerElementOperations && cf.cooperativeMatrixTensorAddressing;
        VkPhysicalDeviceCooperativeMatrix2PropertiesNV cp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV,
        };
        VkPhysicalDeviceProperties2 pc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &cp};
        vkGetPhysicalDeviceProperties2(phys, &pc);
        caps->cm2_max_wg = cp.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
        caps->cm2_reserved = cp.cooperativeMatrixWorkgroupScopeReservedSharedMemory;
        PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV get =
            (PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)
                vkGetInstanceProcAddr(
                    inst, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
        VkCooperativeMatrixFlexibleDimensionsPropertiesNV fl[32];
        uint32_t n = 32, nwg = 0;
        for (uint32_t i = 0; i < n; i++)
            fl[i] = (VkCooperativeMatrixFlexibleDimensionsPropertiesNV){
                .sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV};
        VkResult r = get ? get(phys, &n, fl) : VK_ERROR_EXTENSION_NOT_PRESENT;
        size_t used = 0;
        for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < n; i++) {
            if (fl[i].AType != VK_COMPONENT_TYPE_FLOAT16_KHR ||
                fl[i].BType != VK_COMPONENT_TYPE_FLOAT16_KHR ||
                fl[i].CType != VK_COMPONENT_TYPE_FLOAT32_KHR ||
                fl[i].ResultType != VK_COMPONENT_TYPE_FLOAT32_KHR ||
                fl[i].scope != VK_SCOPE_WORKGROUP_KHR)
                continue;
            int w = snprintf(caps->cm2_shapes + used, sizeof caps->cm2_shapes - used,
                             "%s%ux%ux%u@%u", used ? " " : "", fl[i].MGranularity,
                             fl[i].NGranularity, fl[i].KGranularity, fl[i].workgroupInvocations);
            if (w > 0 && used + (size_t)w < sizeof caps->cm2_shapes)
                used += (size_t)w;
            /* the kernels' matrices are multiples of 16 in every dimension */
            if (nwg < 4 && fl[i].MGranularity && 16 % fl[i].MGranularity == 0 &&
                fl[i].NGranularity && 16 % fl[i].NGranularity == 0 && fl[i].KGranularity &&
                16 % fl[i].KGranularity == 0)
                caps->cm2_wg[nwg++] = fl[i].workgroupInvocations;
        }
    }
#endif
}

void burst_vk_caps_read(VkInstance inst, VkPhysicalDevice phys, struct burst_vk_caps *caps)
{
    memset(caps, 0, sizeof *caps);
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
    };
    VkPhysicalDeviceSubgroupSizeControlProperties sgc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES,
        .pNext = &sg,
    };
    VkPhysicalDeviceIDProperties idp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
        .pNext = &sgc,
    };
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
        .pNext = &idp,
    };
    VkPhysicalDeviceProperties2 p2 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
        .pNext = &m3,
    };
    vkGetPhysicalDeviceProperties2(phys, &p2);
    const VkPhysicalDeviceProperties *p = &p2.properties;
    snprintf(caps->name, sizeof caps->name, "%s", p->deviceName);
    caps->vendor_id = p->vendorID;
    caps->device_id = p->deviceID;
    caps->api_version = p->apiVersion;
    caps->driver_version = p->driverVersion;
    memcpy(caps->cache_uuid, p->pipelineCacheUUID, VK_UUID_SIZE);
    memcpy(caps->device_uuid, idp.deviceUUID, VK_UUID_SIZE);
    caps->type = p->deviceType;
    caps->max_shared = p->limits.maxComputeSharedMemorySize;
    caps->max_invocations = p->limits.maxComputeWorkGroupInvocations;
    caps->max_size_x = p->limits.maxComputeWorkGroupSize[0];
    memcpy(caps->max_groups, p->limits.maxComputeWorkGroupCount, sizeof caps->max_groups);
    caps->timestamps = p->limits.timestampComputeAndGraphics;
    caps->timestamp_period = p->limits.timestampPeriod;
    caps->subgroup = sg.subgroupSize;
    caps->subgroup_min = sgc.minSubgroupSize ? sgc.minSubgroupSize : sg.subgroupSize;
    caps->subgroup_max = sgc.maxSubgroupSize ? sgc.maxSubgroupSize : sg.subgroupSize;
    caps->subgroup_shuffle = (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) &&
                             (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
    caps->subgroup_vote = (sg.supportedOperations & VK_SUBGROUP_FEATURE_VOTE_BIT) &&
                          (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
    caps->max_alloc = m3.maxMemoryAllocationSize;

    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
    };
    VkPhysicalDeviceFeatures2 f2 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
        .pNext = caps->api_version >= VK_API_VERSION_1_2 ? &f12 : NULL,
    };
    vkGetPhysicalDeviceFeatures2(phys, &f2);
    caps->int64 = f2.features.shaderInt64;
    caps->fp16 = f12.shaderFloat16;
    caps->int8 = f12.shaderInt8;
    caps->bda = f12.bufferDeviceAddress;

    uint32_t next = 0;
    int sm_builtins = 0;
    vkEnumerateDeviceExtensionProperties(phys, NULL, &next, NULL);
    VkExtensionProperties *exts = calloc(next ? next : 1, sizeof *exts);
    if (exts) {
        vkEnumerateDeviceExtensionProperties(phys, NULL, &next, exts);
        for (uint32_t i = 0; i < next; i++) {
            const char *e = exts[i].extensionName;
            if (strcmp(e, "VK_NV_cooperative_matrix") == 0)
                caps->coopmat_nv = 1;
            else if (strcmp(e, "VK_KHR_cooperative_matrix") == 0)
                caps->coopmat_khr = 1;
            else if (strcmp(e, "VK_NV_cooperative_matrix2") == 0)
                caps->coopmat2 = 1;
            else if (strcmp(e, "VK_KHR_shader_bfloat16") == 0)
                caps->bf16 = 1;
            else if (strcmp(e, VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME) == 0)
                caps->atomic_add = 1; /* the feature, below */
            else if (strcmp(e, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME) == 0)
                sm_builtins = 1; /* the count, below */
        }
        free(exts);
    }
    if (sm_builtins) { /* multiprocessors: how many workgroups one wave of a grid holds */
        VkPhysicalDeviceShaderSMBuiltinsPropertiesNV smp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV,
        };
        VkPhysicalDeviceProperties2 ps = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &smp};
        vkGetPhysicalDeviceProperties2(phys, &ps);
        caps->sm_count = smp.shaderSMCount;
    }
    if (caps->atomic_add) {
        VkPhysicalDeviceShaderAtomicFloatFeaturesEXT af = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT,
        };
        VkPhysicalDeviceFeatures2 fa = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &af};
        vkGetPhysicalDeviceFeatures2(phys, &fa);
        caps->atomic_add = af.shaderBufferFloat32AtomicAdd == VK_TRUE;
    }
    burst_vk_caps_read_coopmat(inst, phys, caps);

    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(phys, &mp);
    caps->nheaps = mp.memoryHeapCount;
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++) {
        caps->heap_size[i] = mp.memoryHeaps[i].size;
        caps->heap_device_local[i] =
            (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    const VkMemoryPropertyFlags fast = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT |
                                       VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                       VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((mp.memoryTypes[i].propertyFlags & fast) == fast)
            caps->host_visible_device_local = 1;
}

int burst_vk_dclass(int d)
{
    return d <= 64 ? 0 : d <= 128 ? 1 : 2;
}

size_t burst_vk_cmq_shared(enum burst_vk_kernel k, const struct burst_vk_tile *tl, int d, int f32)
{
    /* mirror shaders/fwd_cmq_nv.comp and bwd_dq_cmq_nv.comp: K and V tiles with rows of d
     * rounded up to 16 (twice, hi and lo halves, with f32) and padded by 8 halves (Q, dO pass
     * through them), four ints; fwd_cmq with loading subgroups: two K/V buffers and four
     * counters. bwd_dkv_cmq_nv.comp (K rows in registers): Q and dO tiles [bc], 16 B per
     * query row, two ints. The backward's subgroup pairs
     * (cmq_pair.glsl): 2 KiB a subgroup (one float where there are none). */
    size_t row = (size_t)((f32 ? 2 : 1) * ((d + 15) / 16 * 16) + 8) * 2;
    size_t sp = (size_t)burst_vk_cmq_split(k, d, f32), w = (size_t)tl->br / 16 * sp;
    size_t pair = sp > 1 ? w * 2048 : k != BURST_VK_FWD_CMQ ? 4 : 0;
    if (k == BURST_VK_DKV_CMQ)
        return 2 * (size_t)tl->bc * row + 16 * (size_t)tl->bc + 8 + pair;
    return (tl->ld > 0 ? 2 : 1) * 2 * (size_t)tl->bc * row + 16 + (tl->ld > 0 ? 16 : 0) + pair;
}

size_t burst_vk_tile_shared(enum burst_vk_kernel k, const struct burst_vk_tile *tl, int d)
{
    switch (k) {
    case BURST_VK_FWD:
    case BURST_VK_DQ: return (size_t)(8 * tl->bc * d + 16);
    case BURST_VK_DKV: return (size_t)(8 * tl->bc * d + 16 * tl->bc + 16);
    case BURST_VK_FWD_CM: {
        /* mirrors shaders/fwd_cm_nv.comp: K and V tiles with rows padded by 8 halves, and per
         * subgroup a scratch tile of 16 rows of S (bc + 4 floats a row) and 16 rows of P
         * (bc + 8 halves); Q passes through the same memory before the loop */
        size_t rs = (size_t)(d + 8) * 2, w = (size_t)tl->br / 16;
        size_t ss = (size_t)(tl->bc + 4) * 4, ps = (size_t)(tl->bc + 8) * 2;
        return 2 * (size_t)tl->bc * rs + w * 16 * (ss + ps) + 16;
    }
    case BURST_VK_FWD_CMQ:
    case BURST_VK_DQ_CMQ:
    case BURST_VK_DKV_CMQ: return burst_vk_cmq_shared(k, tl, d, 0);
    case BURST_VK_DQ_CM:
    case BURST_VK_DKV_CM: {
        /* mirror shaders/bwd_dq_cm_nv.comp (Q tile [br], K and V tiles [bc]) and
         * bwd_dkv_cm_nv.comp (K tile [br], Q and dO tiles [bc], 16 B per query row): per
         * subgroup a scratch tile of 16 rows holding two fp32 score tiles or, first, the
         * subgroup's 16 rows of dO / V */
        size_t rs = (size_t)(d + 8) * 2, w = (size_t)tl->br / 16;
        size_t two = 2 * (size_t)(tl->bc + 4) * 4, x = two > rs ? two : rs;
        size_t rows = (size_t)tl->br * rs + 2 * (size_t)tl->bc * rs + w * 16 * x;
        return rows + (k == BURST_VK_DKV_CM ? 16 * (size_t)tl->bc + 8 : 8);
    }
    case BURST_VK_FWD_CM2: {
        /* mirrors shaders/fwd_cm2.comp: the Q tile [br][DP + 8] fp16 (DP = d rounded up to
         * 16), or the reduced l and m (br x 16 fp32 each), whichever is larger; per row its key
         * interval, merge weights and mode; four ints */
        size_t dp = (size_t)(d + 15) / 16 * 16, rs = dp / 8 + 1;
        size_t qn = rs > 8 ? (size_t)tl->br * rs : (size_t)tl->br * 8;
        return 16 * qn + 20 * (size_t)tl->br + 16;
    }
    case BURST_VK_DQ_CM2: /* shaders/bwd_dq_cm2.comp: per row its interval, L and D; two ints */
        return 16 * (size_t)tl->br + 8;
    case BURST_VK_DKV_CM2: /* shaders/bwd_dkv_cm2.comp: an ivec4 per query row of a tile */
        return 16 * (size_t)tl->bc + 8;
    case BURST_VK_FWD_RT: {
        /* mirrors shaders/fwd_rt.comp (t = DC): a region holding a transposed Q chunk and K
         * chunk (rows padded by 4 floats) or a V chunk of DC keys, P transposed, one float per
         * row and invocation of its row group, two ints */
        size_t qs = (size_t)tl->br + 4, ks = (size_t)tl->bc + 4, dc = (size_t)tl->t;
        size_t qk = dc * (qs + ks), v = dc * (size_t)d, region = qk > v ? qk : v;
        return 4 * (region + (size_t)tl->bc * qs + (size_t)tl->br * (size_t)(tl->bc / 4)) + 8;
    }
    case BURST_VK_DQ_RT:
    case BURST_VK_DKV_RT:
    case BURST_VK_DKVQ_RT: {
        /* mirrors shaders/bwd_rt.comp: a region holding the four transposed operand chunks of
         * S and dP or one column-operand chunk of DC rows, one transposed score tile (dS; P,
         * then dS), two ints */
        size_t qs = (size_t)tl->br + 4, ks = (size_t)tl->bc + 4, dc = (size_t)tl->t;
        size_t xy = 2 * dc * (qs + ks), v = dc * (size_t)d, region = xy > v ? xy : v;
        return 4 * (region + (size_t)tl->bc * qs) + 8;
    }
    default: return 0;
    }
}

static uint32_t burst_vk_shared_limit(const struct burst_vk_caps *caps,
                                      const struct burst_vk_env *env)
{
    uint32_t s = caps->max_shared;
    if (env->max_shared && env->max_shared < s)
        s = env->max_shared;
    return s;
}

/* tile_valid_at of a *_cmq kernel, for fp32 inputs in two fp16 halves (f32) or not */
static int burst_vk_cmq_valid(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                              enum burst_vk_kernel k, int d, const struct burst_vk_tile *tl,
                              int f32)
{
    /* 32 invocations a subgroup (the layout they assume), BR / 16 subgroups (times the
     * backward's split, burst_vk_cmq_split), BC rows in 16-row chunks */
    uint32_t wg = (uint32_t)((tl->br / 16 * burst_vk_cmq_split(k, d, f32) + tl->ld) * 32);
    return ((BURST_VK_SPV_FWD_CMQ_NV && BURST_VK_SPV_BWD_DQ_CMQ_NV &&
             BURST_VK_SPV_BWD_DKV_CMQ_NV) ||
            !burst_vk_coopmat_khr_why(caps, env)) &&
           env->cmq && burst_vk_coopmat_usable(caps, env) &&
           /* dkv_cmq: one invocation per query row of a tile stages its L, D, interval */
           (k != BURST_VK_DKV_CMQ || 2 * tl->br >= tl->bc) && caps->subgroup == 32 && tl->t == 32 &&
           tl->br >= 16 && tl->br <= 256 && tl->br % 16 == 0 && tl->bc >= 16 && tl->bc <= 64 &&
           tl->bc % 16 == 0 && tl->ld >= 0 && tl->ld <= 4 &&
           (tl->ld == 0 || k == BURST_VK_FWD_CMQ) && wg <= caps->max_invocations &&
           wg <= caps->max_size_x &&
           burst_vk_cmq_shared(k, tl, d, f32) <= burst_vk_shared_limit(caps, env);
}

struct burst_vk_tile burst_vk_cmq_f32_tile(const struct burst_vk_caps *caps,
                                           const struct burst_vk_env *env, enum burst_vk_kernel k,
                                           int d)
{
    /* every staged row holds twice the halves: 32-key (dq, dkv up to d = 64: 32-row) tiles of
     * 64 or 128 rows, 16-row ones with the backward's pairs beyond d = 64 (burst_vk_cmq_split) */
    struct burst_vk_tile tl = {32, k == BURST_VK_FWD_CMQ ? 128 : 64, d <= 64 ? 32 : 16, 0};
    if (k == BURST_VK_FWD_CMQ)
        tl.bc = 32;
    if (!env->cmq_fp32 || d > 128 || !burst_vk_kernel_cmq(k) ||
        !burst_vk_cmq_valid(caps, env, k, d, &tl, 1))
        tl.t = 0;
    return tl;
}

int burst_vk_tile_valid(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                        enum burst_vk_kernel k, int dclass, const struct burst_vk_tile *tl)
{
    return burst_vk_tile_valid_at(caps, env, k, burst_vk_dclass_max[dclass], tl);
}

int burst_vk_tile_valid_at(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                           enum burst_vk_kernel k, int d, const struct burst_vk_tile *tl)
{
    if (burst_vk_kernel_cm2(k)) {
        /* t = invocations: a count the device lists for fp16 workgroup-scope matrices; BR and
         * BC multiples of 16; shared memory with the driver's reserve */
        int listed = 0;
        for (int i = 0; i < 4; i++)
            listed |= tl->t > 0 && caps->cm2_wg[i] == (uint32_t)tl->t;
        return !burst_vk_cm2_why(caps, env) && listed && tl->ld == 0 &&
               (uint32_t)tl->t <= caps->max_invocations && (uint32_t)tl->t <= caps->max_size_x &&
               (!caps->cm2_max_wg || (uint32_t)tl->t <= caps->cm2_max_wg) && tl->br >= 16 &&
               tl->br <= 256 && tl->br % 16 == 0 && tl->bc >= 16 && tl->bc <= 128 &&
               tl->bc % 16 == 0 &&
               burst_vk_tile_shared(k, tl, d) + caps->cm2_reserved <=
                   burst_vk_shared_limit(caps, env);
    }
    if (burst_vk_kernel_cmq(k))
        return burst_vk_cmq_valid(caps, env, k, d, tl, 0);
    if (burst_vk_kernel_rt(k)) {
        /* t = DC (4..32, a power of two); BR a multiple of 4, BC of 4 and of DC (the P V
         * loop steps DC keys through the tile); (BR / 4) x (BC / 4) invocations in x; no
         * subgroup operation */
        if (!BURST_VK_SPV_FWD_RT || !BURST_VK_SPV_BWD_DQ_RT || !BURST_VK_SPV_BWD_DKV_RT ||
            (k == BURST_VK_DKVQ_RT &&
             (!BURST_VK_SPV_BWD_DKVQ_RT || !env->atomic || !caps->atomic_add || tl->br % tl->t)) ||
            !env->rt || tl->t < 4 || tl->t > 32 || (tl->t & (tl->t - 1)) || tl->br < 4 ||
            tl->br > 256 || tl->br % 4 || tl->bc < 4 || tl->bc > 128 || tl->bc % 4 ||
            tl->bc % tl->t)
            return 0;
        uint32_t wg = (uint32_t)(tl->br / 4 * (tl->bc / 4));
        return wg <= caps->max_invocations && wg <= caps->max_size_x && wg <= 1024 &&
               burst_vk_tile_shared(k, tl, d) <= burst_vk_shared_limit(caps, env);
    }
    /* the scalar kernels: one invocation a row */
    if (tl->t != 1 || tl->br < 1 || tl->br > 1024 || tl->bc < 1 || tl->bc > 64)
        return 0;
    uint32_t wg = (uint32_t)tl->br;
    if (wg > caps->max_invocations || wg > caps->max_size_x)
        return 0;
    return burst_vk_tile_shared(k, tl, d) <= burst_vk_shared_limit(caps, env);
}

void burst_vk_tiles_rule(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                         struct burst_vk_tiles *tiles)
{
    memset(tiles, 0, sizeof *tiles);
    uint32_t limit = burst_vk_shared_limit(caps, env);
    limit = limit > 1024 ? limit - 1024 : 0;
    if (limit > 24576)
        limit = 24576;
    uint32_t wg = 64;
    while (wg > caps->max_invocations && wg > 1)
        wg /= 2;
    for (int k = BURST_VK_FWD; k <= BURST_VK_DKV; k++) {
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++) {
            struct burst_vk_tile tl = {1, (int)wg, 64, 0};
            while (tl.bc >= 1 && burst_vk_tile_shared((enum burst_vk_kernel)k, &tl,
                                                      burst_vk_dclass_max[c]) > limit)
                tl.bc /= 2;
            if (tl.bc >= 1 && burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, &tl))
                tiles->k[k][c] = tl;
        }
    }
    for (int c = 0; c < BURST_VK_NUM_DCLASS; c++)
        tiles->k[BURST_VK_DELTA][c] = (struct burst_vk_tile){1, 64, 1, 0};
    /* the register-tiled kernels: 64 x 64 tiles of 256 invocations with the deepest chunks
     * that fit (32 head-dim elements where shared memory allows), then narrower tiles. First,
     * as measured on an H200 at d = 128 (docs/BENCHMARKS.md): dq_rt tries chunks of 4 (322 ms
     * against 400 with 16: 127 registers against 137, so two workgroups share a
     * multiprocessor); dkv_rt tries 128 key rows of 512 invocations with chunks of 8 (398 ms
     * against 477 at 64 x 64: half the accumulators per invocation, 128 registers).
     * BURST_VK_RT_TILE=br,bc,dc asks for one (used where valid) */
    static const struct burst_vk_tile rt[] = {{32, 64, 64, 0}, {16, 64, 64, 0}, {8, 64, 64, 0},
                                              {16, 32, 64, 0}, {8, 32, 64, 0},  {8, 32, 32, 0},
                                              {8, 16, 32, 0},  {8, 16, 16, 0},  {4, 8, 8, 0}};
    for (int k = BURST_VK_FWD_RT; k <= BURST_VK_DKVQ_RT; k++) {
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++) {
            struct burst_vk_tile want = {env->rt_tile[2], env->rt_tile[0], env->rt_tile[1], 0},
                                 *tl = &tiles->k[k][c];
            if (env->rt_tile[0] &&
                burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, &want)) {
                *tl = want;
                continue;
            }
            static const struct burst_vk_tile first[] = {
                {0, 0, 0, 0}, {4, 64, 64, 0}, {8, 128, 64, 0}, {8, 128, 64, 0}};
            const struct burst_vk_tile *f = &first[k - BURST_VK_FWD_RT];
            if (f->t && burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, f))
                *tl = *f;
            for (size_t i = 0; i < sizeof rt / sizeof rt[0] && !tl->t; i++)
                if (burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, &rt[i]))
                    *tl = rt[i];
        }
    }
    for (int k = BURST_VK_FWD_CM; k <= BURST_VK_DKV_CM && burst_vk_coopmat_usable(caps, env); k++) {
        if (k != BURST_VK_FWD_CM && !(BURST_VK_SPV_BWD_DQ_CM_NV && BURST_VK_SPV_BWD_DKV_CM_NV))
            continue;
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++) {
            /* the backward kernels hold a 16 x d operand and two 16 x d accumulators per
             * subgroup in registers: head dims up to 128 */
            if (k != BURST_VK_FWD_CM && burst_vk_dclass_max[c] > 128)
                continue;
            /* 4 subgroups of 16 rows (the forward: BURST_VK_CM_ROWS / 16 where set), the widest
             * tile that fits; fewer subgroups where shared memory or invocations are short */
            int warps0 = k == BURST_VK_FWD_CM && env->cm_rows ? env->cm_rows / 16 : 4;
            for (int warps = warps0; warps >= 1 && !tiles->k[k][c].t; warps /= 2) {
                /* the softmax gives each of a row's T / 16 invocations BC / (T / 16) scores,
                 * a multiple of 8 */
                for (int bc = 64; bc >= 16 && bc >= (int)caps->subgroup / 2; bc /= 2) {
                    struct burst_vk_tile tl = {(int)caps->subgroup, 16 * warps, bc, 0};
                    /* dkv_cm: one invocation per query row of a tile stages its L, D and
                     * interval, so a workgroup has at least BC invocations */
                    if (k == BURST_VK_DKV_CM && warps * (int)caps->subgroup < bc)
                        continue;
                    if (burst_vk_tile_shared((enum burst_vk_kernel)k, &tl,
                                             burst_vk_dclass_max[c]) <=
                            burst_vk_shared_limit(caps, env) &&
                        (uint32_t)(warps * (int)caps->subgroup) <= caps->max_invocations) {
                        tiles->k[k][c] = tl;
                        break;
                    }
                }
            }
        }
    }
    /* the register-softmax forward: 160 query rows (10 compute subgroups) and 32 keys with 2
     * loading subgroups (384 invocations, two K/V buffers) where they fit, then 192 rows (12
     * subgroups) and 64 keys, then 128 rows (8 subgroups: half the K/V traffic of 64 rows)
     * and smaller; BURST_VK_CMQ_TILE=br,bc[,ld] asks for one. On the H100 (docs/BENCHMARKS.md)
     * 192 x 64 measured 5-6 % faster than 128 x 64: at 384 invocations the driver keeps the
     * kernel in 168 registers (246 at 128 rows), so that 12 subgroups fit a multiprocessor
     * instead of 8, and each K/V tile serves 1.5 times the rows; 160 x 32 with loaders
     * another 9-10 %, as no compute subgroup waits for global memory. Which of them a call
     * takes: burst_vk_fwd_cmq_call_tile (below). It runs only after the device's accumulator
     * layout passed its check (vk_cmq.c). */
    static const struct burst_vk_tile cmq[3][8] = {
        {{32, 160, 32, 2},
         {32, 192, 64, 0},
         {32, 128, 64, 0},
         {32, 64, 64, 0},
         {32, 128, 32, 0},
         {32, 64, 32, 0},
         {32, 64, 16, 0},
         {32, 32, 16, 0}},
        /* dq_cmq holds Q, dO and dQ of 16 rows: 128 rows of 8 subgroups, 4 pieces a K/V tile
         * load; dkv_cmq holds K, V, dK and dV of 16 key rows, so its shared memory holds only
         * query tiles: 128 key rows (8 subgroups) and 64-row query tiles first (35.8 KiB at
         * d = 128), then 48 and 32 */
        {{32, 128, 64, 0}, {32, 64, 32, 0}, {32, 64, 16, 0}, {32, 32, 16, 0}},
        {{32, 128, 64, 0},
         {32, 64, 48, 0},
         {32, 64, 32, 0},
         {32, 128, 16, 0},
         {32, 64, 16, 0},
         {32, 32, 16, 0}}};
    for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++)
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++) {
            const int *w = k == BURST_VK_FWD_CMQ  ? env->cmq_tile
                           : k == BURST_VK_DQ_CMQ ? env->cmq_bwd_tile
                                                  : env->cmq_bwd_tile + 2;
            struct burst_vk_tile want = {32, w[0], w[1], k == BURST_VK_FWD_CMQ ? w[2] : 0};
            struct burst_vk_tile *tl = &tiles->k[k][c];
            if (w[0] && burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, &want))
                *tl = want;
            const struct burst_vk_tile *cand = cmq[k - BURST_VK_FWD_CMQ];
            for (size_t i = 0; i < 8 && cand[i].t && !tl->t; i++)
                if (burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, &cand[i]))
                    *tl = cand[i];
        }
    /* the workgroup-scope forward (every head dim, padded to 16 in the matrices): 64 query
     * rows x 64 keys on 128 invocations up to d = 128, 32 keys on 256 invocations beyond (O
     * is 64 x d fp32 spread over the workgroup), then smaller; a first choice, not yet
     * measured against the others (docs/ARCHITECTURE.md) */
    static const struct burst_vk_tile cm2[3][5] = {
        {{128, 64, 64, 0}, {256, 64, 64, 0}, {128, 64, 32, 0}, {128, 32, 32, 0}, {0, 0, 0, 0}},
        {{128, 64, 64, 0}, {256, 64, 64, 0}, {128, 64, 32, 0}, {128, 32, 32, 0}, {0, 0, 0, 0}},
        {{256, 64, 32, 0}, {128, 64, 32, 0}, {256, 32, 32, 0}, {128, 32, 32, 0}, {128, 32, 16, 0}}};
    /* the backward's the same first choices: dq_cm2 BR query rows x BC keys, dkv_cm2 BR key
     * rows x BC query rows (it holds dK and dV, BR x d fp32 each) */
    for (int k = BURST_VK_FWD_CM2; k <= BURST_VK_DKV_CM2; k++)
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++)
            for (size_t i = 0; i < 5 && cm2[c][i].t && !tiles->k[k][c].t; i++)
                if (burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, &cm2[c][i]))
                    tiles->k[k][c] = cm2[c][i];
}

/* Whether a grid of `groups` workgroups has at least `waves` waves on the device's
 * multiprocessors (VK_NV_shader_sm_builtins; taken as 128 where the driver reports none). */
static int burst_vk_waves(const struct burst_vk_caps *caps, int64_t groups, int64_t waves)
{
    return groups >= waves * (caps->sm_count ? (int64_t)caps->sm_count : 128);
}

/* tl where the call's head dim is in lo..hi and the rule gave `from`, if tl is valid there */
static struct burst_vk_tile burst_vk_call_swap(const struct burst_vk_caps *caps,
                                               const struct burst_vk_env *env,
                                               enum burst_vk_kernel k, int d, int lo, int hi,
                                               struct burst_vk_tile rule, struct burst_vk_tile from,
                                               struct burst_vk_tile tl)
{
    if (d < lo || d > hi || rule.br != from.br || rule.bc != from.bc || rule.ld != from.ld ||
        !burst_vk_tile_valid_at(caps, env, k, d, &tl))
        return rule;
    return tl;
}

/*
 * fwd_cmq's rule tile (above) against 128 x 64 on the H100 (docs/BENCHMARKS.md, fwd, fp16,
 * d = 128, kernel ms):
 *
 *     call                     waves   128 x 64   192 x 64   160 x 32, 2 loaders
 *     N = 1K, 8 heads            0.4      0.070                   0.080
 *     N = 1K, 32 heads           1.7      0.159                   0.165
 *     N = 2K, 32 heads           3.2      0.525                   0.561
 *     N = 3K, 32 heads           4.8      1.11                    1.00
 *     N = 2K, 64 heads           6.3      1.02                    0.97
 *     N = 4K, 32 heads           6.3      1.90       2.07         1.85
 *     N = 8K, 32 heads          12.5      7.26       7.42         6.65
 *     N = 16K, 32 heads, causal   25      14.3       14.6         13.5
 *     N = 16K, 32 heads           25      29.0       27.3         25.1
 *     N = 64K, 8 heads            25     116.4      109.0         97.6
 *
 * (waves: the 160-row grid's workgroups over 132 multiprocessors). The loaders' tile needs a
 * few waves for its pipeline to pay (it lost up to 3.2 waves and won from 4.8); 192 x 64 only
 * paid from 16 waves and without a mask (the diagonal's masked work grows with the rows). So a
 * call takes the rule's tile where its grid has at least 4 waves (160 x 32 with loaders) or 16
 * waves and every query row may see every key (192 x 64, where the loaders' tile is not
 * valid); otherwise 128 x 64, where valid. Head dims up to 32 take 128 x 64 at every size: there
 * a tile's softmax outweighs its products, and on the H200 (bf16, causal, N = 8K, 64 heads:
 * 100 waves) it ran 2.59 ms against 3.26 for 160 x 32 with loaders. Head dims 33 to 112 take
 * 224 x 32 with loaders where 160 x 32 with loaders would run: their registers fit 16 subgroups
 * (the driver allots 128 an invocation), d = 128's do not. On the H200 (bf16, kernel ms,
 * 2048 / d heads; in brackets 256 x 64, which it also beat):
 *
 *               N = 8K, causal                  N = 16K, full
 *     d    160 x 32 + 2   224 x 32 + 2    160 x 32 + 2   224 x 32 + 2
 *     40    2.90 (2.59)     2.53          20.35 (17.94)   17.57
 *     64    2.03 (1.91)     1.84          13.67 (12.52)   12.04
 *     80    1.79            1.62          12.12           10.84
 *     96    1.75            1.66          11.94           10.36
 *     112   1.89            1.71          13.45           11.22
 *     128   1.49            1.78           9.61           10.41
 *
 * Multiprocessors: VK_NV_shader_sm_builtins, else taken as 128. BURST_VK_CMQ_TILE pins one tile
 * for every call.
 */
struct burst_vk_tile burst_vk_fwd_cmq_call_tile(const struct burst_vk_caps *caps,
                                                const struct burst_vk_env *env, int d,
                                                struct burst_vk_tile rule, int64_t groups,
                                                int mask_all)
{
    const struct burst_vk_tile small = {32, 128, 64, 0}, ld2 = {32, 160, 32, 2};
    const struct burst_vk_tile tall = {32, 224, 32, 2};
    if ((rule.br <= small.br && rule.ld == 0) || env->cmq_tile[0] ||
        !burst_vk_tile_valid(caps, env, BURST_VK_FWD_CMQ, burst_vk_dclass(d), &small))
        return rule;
    if (d <= 32)
        return small;
    if (rule.ld > 0 ? !burst_vk_waves(caps, groups, 4)
                    : (!burst_vk_waves(caps, groups, 16) || !mask_all))
        return small;
    return burst_vk_call_swap(caps, env, BURST_VK_FWD_CMQ, d, 33, 112, rule, ld2, tall);
}

/*
 * dq_cmq's tile for one call. The d <= 256 class's rule tile, 64 rows (8 subgroups, two on each
 * 16 rows) x 16 keys, is sized for d = 256; head dims up to 192 keep their operands and
 * accumulators in fewer registers, so 128 rows (16 subgroups, the driver then allots 128
 * registers an invocation) fit a multiprocessor and hide more of each tile's latency. On the
 * H200 (bf16, causal, N = 8K, 2048 / d heads, kernel ms):
 *
 *     d      64 x 16   96 x 16   128 x 16   64 x 32   80 x 32   96 x 32
 *     160      5.03      4.08      3.59       4.64      4.26      3.75
 *     192      4.76      3.75      3.66       4.48      4.43
 *     256      2.76      3.21  (96 rows: spilled registers)
 *
 * (96 x 32 does not fit 48 KiB at d = 192.) For d in 33..96, 192 rows x 64 keys in place of
 * the rule's 128 x 64 where the call's grid (on the rule's tile) has at least 4 waves of
 * workgroups: on the H200 (as above) dq_cmq 2.34 / 1.86 ms against 2.75 / 2.06 at d = 40 /
 * 64, forward + backward 9.16 / 7.00 against 9.58 / 7.21; at d = 32 the whole took 8.21 against
 * 7.70. Above d = 64 (dq_cmq alone, kernel ms; 160 x 64 slower than both at every d):
 *
 *     d      72     80     96    112    128    128, N = 16K, 32 heads, fp16, full
 *     128    2.22   1.94   1.88   1.89   1.78   24.5
 *     192    1.95   1.76   1.70   1.90   2.16   26.1
 *
 * A smaller grid keeps the rule's tile, whose workgroups spread over more multiprocessors.
 * BURST_VK_CMQ_BWD_TILE's dq_cmq fields pin the rule's tile for every call.
 */
struct burst_vk_tile burst_vk_dq_cmq_call_tile(const struct burst_vk_caps *caps,
                                               const struct burst_vk_env *env, int d,
                                               struct burst_vk_tile rule, int64_t groups)
{
    const struct burst_vk_tile r16 = {32, 64, 16, 0}, wide = {32, 128, 16, 0};
    const struct burst_vk_tile r64 = {32, 128, 64, 0}, tall = {32, 192, 64, 0};
    if (env->cmq_bwd_tile[0])
        return rule;
    if (burst_vk_waves(caps, groups, 4))
        rule = burst_vk_call_swap(caps, env, BURST_VK_DQ_CMQ, d, 33, 96, rule, r64, tall);
    return burst_vk_call_swap(caps, env, BURST_VK_DQ_CMQ, d, 129, 192, rule, r16, wide);
}

/*
 * dkv_cmq's tile for one call. The d <= 256 class's rule tile, 64 key rows x 16-row query
 * tiles, is sized for d = 256; up to d = 192 the shared memory holds 32-row query tiles (41.5
 * KiB at d = 192), which halve the tile loads and barriers per query row. Up to d = 64, where
 * a subgroup's K, V, dK and dV of 16 key rows take fewer registers, 256 key rows (16
 * subgroups; d <= 48) or 192 (d = 49 to 64) in place of the rule's 128 x 64, each query tile
 * then serving more keys, where the call's grid (on the rule's tile) has at least 4 waves. On
 * the H200 (bf16, causal, N = 8K, 2048 / d heads, kernel ms):
 *
 *     d     128 x 64   192 x 64   256 x 64   128 x 48
 *     32      3.64       3.22       3.10       4.14
 *     40      3.88       3.27       3.13       4.31
 *     64      2.79       2.66       3.97       3.20
 *     80      2.74       3.17       6.43       2.92
 *     96      2.65       3.52       8.86       2.87
 *     128     3.07       6.47      13.31       3.15
 *
 * BURST_VK_CMQ_BWD_TILE's dkv_cmq fields pin the rule's tile for every call.
 */
struct burst_vk_tile burst_vk_dkv_cmq_call_tile(const struct burst_vk_caps *caps,
                                                const struct burst_vk_env *env, int d,
                                                struct burst_vk_tile rule, int64_t groups)
{
    const struct burst_vk_tile r16 = {32, 64, 16, 0}, deep = {32, 64, 32, 0};
    const struct burst_vk_tile r64 = {32, 128, 64, 0}, tall = {32, 192, 64, 0},
                               taller = {32, 256, 64, 0};
    if (env->cmq_bwd_tile[2])
        return rule;
    if (burst_vk_waves(caps, groups, 4)) {
        rule = burst_vk_call_swap(caps, env, BURST_VK_DKV_CMQ, d, 1, 48, rule, r64, taller);
        rule = burst_vk_call_swap(caps, env, BURST_VK_DKV_CMQ, d, 49, 64, rule, r64, tall);
    }
    return burst_vk_call_swap(caps, env, BURST_VK_DKV_CMQ, d, 129, 192, rule, r16, deep);
}

void burst_vk_cmq_large_tiles(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                              const struct burst_vk_tiles *tiles, int d,
                              struct burst_vk_tile out[3])
{
    const int c = burst_vk_dclass(d);
    const int64_t many = (int64_t)1 << 30; /* workgroups: every wave threshold met */
    out[0] = tiles->k[BURST_VK_FWD_CMQ][c];
    out[1] = tiles->k[BURST_VK_DQ_CMQ][c];
    out[2] = tiles->k[BURST_VK_DKV_CMQ][c];
    if (out[0].t)
        out[0] = burst_vk_fwd_cmq_call_tile(caps, env, d, out[0], many, 1);
    if (out[1].t)
        out[1] = burst_vk_dq_cmq_call_tile(caps, env, d, out[1], many);
    if (out[2].t)
        out[2] = burst_vk_dkv_cmq_call_tile(caps, env, d, out[2], many);
}

const char *burst_vk_coopmat_khr_why(const struct burst_vk_caps *caps,
                                     const struct burst_vk_env *env)
{
#ifndef VK_KHR_cooperative_matrix
    (void)caps;
    (void)env;
    return "built with Vulkan headers without VK_KHR_cooperative_matrix";
#else
    if (!(BURST_VK_SPV_FWD_CM_KHR && BURST_VK_SPV_BWD_DQ_CM_KHR && BURST_VK_SPV_BWD_DKV_CM_KHR &&
          BURST_VK_SPV_FWD_CMQ_KHR && BURST_VK_SPV_BWD_DQ_CMQ_KHR && BURST_VK_SPV_BWD_DKV_CMQ_KHR &&
          BURST_VK_SPV_CM_LAYOUT_KHR))
        return "built by a glslang without GL_KHR_cooperative_matrix";
    if (!env->coopmat_khr)
        return "BURST_VK_COOPMAT_KHR=0";
    if (!caps->coopmat_khr)
        return "the device lacks VK_KHR_cooperative_matrix";
    if (!caps->khr_f16)
        return "the device lists no 16x16x16 fp16 x fp16 -> fp32 subgroup shape";
    return NULL;
#endif
}

const char *burst_vk_cm2_why(const struct burst_vk_caps *caps, const struct burst_vk_env *env)
{
#ifndef VK_NV_cooperative_matrix2
    (void)caps;
    (void)env;
    return "built with Vulkan headers without VK_NV_cooperative_matrix2";
#else
    if (!(BURST_VK_SPV_FWD_CM2 && BURST_VK_SPV_BWD_DQ_CM2 && BURST_VK_SPV_BWD_DKV_CM2))
        return "built by a glslang without GL_NV_cooperative_matrix2";
    if (!env->coopmat)
        return "BURST_VK_COOPMAT=0";
    if (!env->cm2)
        return "BURST_VK_CM2=0 (opt-in: BURST_VK_CM2=1)";
    if (!caps->coopmat2 || !caps->coopmat_khr)
        return "the device lacks VK_NV_cooperative_matrix2";
    if (caps->api_version < VK_API_VERSION_1_3)
        return "the device offers Vulkan < 1.3 (the kernel is SPIR-V 1.6)";
    if (!caps->fp16)
        return "the device lacks shaderFloat16";
    if (!caps->cm2_features)
        return "the device lacks a VK_NV_cooperative_matrix2 feature the kernel uses";
    if (!caps->cm2_wg[0])
        return "the device lists no fp16 x fp16 -> fp32 workgroup-scope shape of granularity 16";
    return NULL;
#endif
}

int burst_vk_coopmat_usable(const struct burst_vk_caps *caps, const struct burst_vk_env *env)
{
    if (!env->coopmat || !caps->fp16 || !caps->subgroup_shuffle || !caps->subgroup_vote ||
        caps->subgroup < 16 || caps->subgroup > 64 || (caps->subgroup & (caps->subgroup - 1)) ||
        caps->subgroup_min != caps->subgroup_max)
        return 0;
    if (!burst_vk_coopmat_khr_why(caps, env))
        return 1;
    if (!BURST_VK_SPV_FWD_CM_NV || !caps->coopmat_nv)
        return 0;
    for (int i = 0; i < caps->ncoop; i++)
        if (caps->coop[i].m == 16 && caps->coop[i].n == 16 && caps->coop[i].k == 16 &&
            caps->coop[i].a_type == VK_COMPONENT_TYPE_FLOAT16_NV &&
            caps->coop[i].c_type == VK_COMPONENT_TYPE_FLOAT32_NV)
            return 1;
    return 0;
}
