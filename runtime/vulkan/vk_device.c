/* runtime/vulkan/vk_device.c - instance, device selection, logical device and queue; VkResult. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vk_internal.h"

const char *burst_vk_result_str(VkResult r)
{
    switch (r) {
#define BURST_VK_R(x)                                                                              \
    case x: return #x;
        BURST_VK_R(VK_SUCCESS)
        BURST_VK_R(VK_NOT_READY)
        BURST_VK_R(VK_TIMEOUT)
        BURST_VK_R(VK_INCOMPLETE)
        BURST_VK_R(VK_ERROR_OUT_OF_HOST_MEMORY)
        BURST_VK_R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        BURST_VK_R(VK_ERROR_INITIALIZATION_FAILED)
        BURST_VK_R(VK_ERROR_DEVICE_LOST)
        BURST_VK_R(VK_ERROR_MEMORY_MAP_FAILED)
        BURST_VK_R(VK_ERROR_LAYER_NOT_PRESENT)
        BURST_VK_R(VK_ERROR_EXTENSION_NOT_PRESENT)
        BURST_VK_R(VK_ERROR_FEATURE_NOT_PRESENT)
        BURST_VK_R(VK_ERROR_INCOMPATIBLE_DRIVER)
        BURST_VK_R(VK_ERROR_TOO_MANY_OBJECTS)
        BURST_VK_R(VK_ERROR_FORMAT_NOT_SUPPORTED)
        BURST_VK_R(VK_ERROR_FRAGMENTED_POOL)
        BURST_VK_R(VK_ERROR_UNKNOWN)
        BURST_VK_R(VK_ERROR_OUT_OF_POOL_MEMORY)
        BURST_VK_R(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        BURST_VK_R(VK_ERROR_FRAGMENTATION)
        BURST_VK_R(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef BURST_VK_R
    default: return "VkResult";
    }
}

burst_status_t burst_vk_result(VkResult r, const char *what)
{
    if (r == VK_SUCCESS)
        return BURST_OK;
    burst_status_t st = BURST_ERR_DEVICE;
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ||
        r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTATION ||
        r == VK_ERROR_TOO_MANY_OBJECTS)
        st = BURST_ERR_DEVICE_MEMORY;
    return burst_error(st, "%s: %s (%d)", what, burst_vk_result_str(r), (int)r);
}

burst_status_t burst_vk_instance(VkInstance *inst_p, VkPhysicalDevice *devs, uint32_t *ndev_p)
{
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "burst",
        .pEngineName = "burst",
        .apiVersion = VK_API_VERSION_1_3, /* 1.3 devices: SPIR-V 1.6 (the *_cm2 kernels) */
    };
    VkInstanceCreateInfo ici = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pApplicationInfo = &app,
    };
    VkInstance inst = VK_NULL_HANDLE;
    VkResult r = vkCreateInstance(&ici, NULL, &inst);
    if (r != VK_SUCCESS)
        return burst_error(
            BURST_ERR_NO_DEVICE,
            "vulkan: vkCreateInstance failed with %s (%d): no Vulkan driver (ICD) is "
            "installed or usable here",
            burst_vk_result_str(r), (int)r);
    uint32_t n = BURST_VK_MAX_DEVICES;
    r = vkEnumeratePhysicalDevices(inst, &n, devs);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
        vkDestroyInstance(inst, NULL);
        if (r != VK_SUCCESS && r != VK_INCOMPLETE)
            return burst_error(BURST_ERR_NO_DEVICE,
                               "vulkan: vkEnumeratePhysicalDevices failed with %s (%d)",
                               burst_vk_result_str(r), (int)r);
        return burst_error(BURST_ERR_NO_DEVICE,
                           "vulkan: the loader found no physical device (no driver for this "
                           "machine's devices; Mesa's lavapipe is in mesa-vulkan-drivers)");
    }
    *inst_p = inst;
    *ndev_p = n;
    return BURST_OK;
}

static int burst_vk_icontains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

burst_status_t burst_vk_select(VkInstance inst, const VkPhysicalDevice *devs, uint32_t ndev,
                               const char *spec, int *index_p)
{
    (void)inst;
    if (!spec || !*spec) {
        *index_p = 0;
        return BURST_OK;
    }
    char *end;
    errno = 0;
    long idx = strtol(spec, &end, 10);
    if (errno == 0 && *end == '\0' && end != spec) {
        if (idx < 0 || idx >= (long)ndev)
            return burst_error(BURST_ERR_NO_DEVICE,
                               "vulkan: params->device = \"%s\" is out of range (%u device%s)",
                               spec, ndev, ndev == 1 ? "" : "s");
        *index_p = (int)idx;
        return BURST_OK;
    }
    for (uint32_t i = 0; i < ndev; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(devs[i], &p);
        if (burst_vk_icontains(p.deviceName, spec)) {
            *index_p = (int)i;
            return BURST_OK;
        }
    }
    return burst_error(BURST_ERR_NO_DEVICE,
                       "vulkan: params->device = \"%s\" matches no device name (burstrun --probe "
                       "lists them)",
                       spec);
}

static int burst_vk_has_ext(const VkExtensionProperties *e, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0)
            return 1;
    return 0;
}

burst_status_t burst_vk_device_create(struct burst_vk_backend *be)
{
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(be->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32)
        nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(be->phys, &nq, qf);
    /* prefer a compute queue without graphics (dedicated compute engine), else any compute */
    int fam = -1;
    for (uint32_t i = 0; i < nq; i++)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
            (fam < 0 || !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)))
            fam = (int)i;
    if (fam < 0)
        return burst_error(BURST_ERR_NO_DEVICE, "vulkan: device %d (%s) has no compute queue",
                           be->index, be->caps.name);
    be->qfamily = (uint32_t)fam;

    uint32_t next = 0;
    vkEnumerateDeviceExtensionProperties(be->phys, NULL, &next, NULL);
    VkExtensionProperties *exts = calloc(next ? next : 1, sizeof *exts);
    if (!exts)
        return burst_error(BURST_ERR_NO_MEMORY, "vulkan: out of memory");
    vkEnumerateDeviceExtensionProperties(be->phys, NULL, &next, exts);
    const char *enable[8];
    uint32_t nenable = 0;
    /* the subgroup-scope cooperative-matrix kernels: their KHR builds where the device offers
     * the KHR extension with their shape (BURST_VK_COOPMAT_KHR=0: the NV builds), else NV */
    if (be->use_coopmat && be->cm_khr)
        enable[nenable++] = "VK_KHR_cooperative_matrix";
    else if (be->use_coopmat &&
             burst_vk_has_ext(exts, next, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME))
        enable[nenable++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    else
        be->use_coopmat = 0;
    /* the workgroup-scope kernels: VK_NV_cooperative_matrix2, on VK_KHR_cooperative_matrix */
    if (be->use_cm2 && !be->cm_khr)
        enable[nenable++] = "VK_KHR_cooperative_matrix";
    if (be->use_cm2)
        enable[nenable++] = "VK_NV_cooperative_matrix2";
    be->pipe_stats =
        be->env.profile &&
        burst_vk_has_ext(exts, next, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    if (be->pipe_stats)
        enable[nenable++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    /* exportable memory, for a cuda rank's copies on the same GPU (vk_share.c) */
    const int fd_ext = be->env.export_mem &&
                       (be->caps.type != VK_PHYSICAL_DEVICE_TYPE_CPU || be->env.export_mem == 2) &&
                       burst_vk_has_ext(exts, next, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
    if (fd_ext)
        enable[nenable++] = VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
    /* float atomics for dkvq_rt (dQ added by the dK / dV kernel) */
    be->use_atomic = be->env.atomic && be->caps.atomic_add &&
                     burst_vk_has_ext(exts, next, VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME);
    if (be->use_atomic)
        enable[nenable++] = VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME;
    free(exts);

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = be->qfamily,
        .queueCount = 1,
        .pQueuePriorities = &prio,
    };
    /* feature structures chained from f12: the matrix extensions' and pipeline statistics' */
    void *chain = NULL;
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .cooperativeMatrix = VK_TRUE,
    };
    if (be->use_coopmat && !be->cm_khr)
        chain = &cm;
#ifdef VK_KHR_cooperative_matrix
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR ck = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
        .pNext = chain,
        .cooperativeMatrix = VK_TRUE,
    };
    if ((be->use_coopmat && be->cm_khr) || be->use_cm2)
        chain = &ck;
#endif
#ifdef VK_NV_cooperative_matrix2
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV c2 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV,
        .pNext = chain,
        .cooperativeMatrixWorkgroupScope = VK_TRUE,
        .cooperativeMatrixFlexibleDimensions = VK_TRUE,
        .cooperativeMatrixReductions = VK_TRUE,
        .cooperativeMatrixConversions = VK_TRUE,
        .cooperativeMatrixPerElementOperations = VK_TRUE,
        .cooperativeMatrixTensorAddressing = VK_TRUE,
    };
    if (be->use_cm2)
        chain = &c2;
#endif
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pNext = chain,
        .pipelineExecutableInfo = VK_TRUE,
    };
    if (be->pipe_stats)
        chain = &pe;
    const int f16 = be->use_coopmat || be->use_cm2;
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = chain,
        .bufferDeviceAddress = VK_TRUE,
        .shaderFloat16 = f16 ? VK_TRUE : VK_FALSE,
    };
    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
        .pNext = &f12,
        .storageBuffer16BitAccess = f16 ? VK_TRUE : VK_FALSE,
    };
    VkPhysicalDeviceShaderAtomicFloatFeaturesEXT af = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT,
        .pNext = &f11,
        .shaderBufferFloat32AtomicAdd = VK_TRUE,
    };
    VkPhysicalDeviceFeatures2 f2 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
        .pNext = be->use_atomic ? (void *)&af : (void *)&f11,
        .features = {.shaderInt64 = VK_TRUE},
    };
    VkDeviceCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .pNext = &f2,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &qci,
        .enabledExtensionCount = nenable,
        .ppEnabledExtensionNames = enable,
    };
    VkResult r = vkCreateDevice(be->phys, &dci, NULL, &be->dev);
    if (r != VK_SUCCESS) {
        be->dev = VK_NULL_HANDLE;
        return burst_vk_result(r, "vulkan: vkCreateDevice");
    }
    vkGetDeviceQueue(be->dev, be->qfamily, 0, &be->queue);
    be->export_ext = fd_ext;
    return BURST_OK;
}
