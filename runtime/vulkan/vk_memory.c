/*
 * runtime/vulkan/vk_memory.c - host-addressable device buffers and the pointer registry.
 *
 * Memory types: "fast" = DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT (unified memory, lavapipe,
 * resizable BAR), tried first for alloc(); "host" = HOST_VISIBLE | HOST_COHERENT (preferring
 * HOST_CACHED), the fallback and the staging buffers. Each alloc() is its own VkBuffer and
 * VkDeviceMemory, mapped for its whole life.
 *
 * Scratch (alloc_scratch: memory only the backend's ops and device copies touch) on a GPU that
 * exports memory (vk_share.c): "dev" = DEVICE_LOCAL without HOST_VISIBLE (drivers export no
 * BAR-mapped memory: NVIDIA's external buffers exclude that type), a dedicated allocation
 * exportable as an opaque fd, never mapped. Its handle in the registry, the address the runtime
 * passes around, is a reserved range of address space the same size (PROT_NONE: a host access
 * faults instead of reading garbage). Zeroed by a fill shader.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"
#include "vk_internal.h"

/* The first type with every `want` flag, preferring one with the `nice` flags, then one without
 * the `avoid` flags. */
static uint32_t burst_vk_find_type(const VkPhysicalDeviceMemoryProperties *mp,
                                   VkMemoryPropertyFlags want, VkMemoryPropertyFlags nice,
                                   VkMemoryPropertyFlags avoid)
{
    uint32_t best = ~0u;
    int best_score = -1;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
        if ((f & want) != want)
            continue;
        int score = 2 * ((f & nice) == nice) + ((f & avoid) == 0);
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

void burst_vk_memory_init(struct burst_vk_backend *be)
{
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(be->phys, &mp);
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    be->mem_fast = burst_vk_find_type(&mp, host | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, 0);
    /* staging and fallback memory: system memory the CPU reads cached, where there is such */
    be->mem_host = burst_vk_find_type(&mp, host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                                      VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    be->mem_dev = burst_vk_find_type(&mp, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0,
                                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
}

/* A buffer of memory type `type`; exportable: a dedicated allocation exportable as an opaque fd,
 * left unmapped, its handle a reserved address range (above). */
static burst_status_t burst_vk_buffer_try(struct burst_vk_backend *be, size_t bytes, uint32_t type,
                                          int exportable, struct burst_vk_buffer *b)
{
    memset(b, 0, sizeof *b);
    VkExternalMemoryBufferCreateInfo ebci = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
        .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
    };
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .pNext = exportable ? &ebci : NULL,
        .size = bytes,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
                 VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = vkCreateBuffer(be->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS)
        return burst_vk_result(r, "vulkan: vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(be->dev, b->buf, &req);
    if (!(req.memoryTypeBits & (1u << type))) {
        vkDestroyBuffer(be->dev, b->buf, NULL);
        return burst_error(BURST_ERR_DEVICE_MEMORY, "vulkan: memory type %u cannot hold buffers",
                           type);
    }
    VkMemoryDedicatedAllocateInfo ded = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
        .buffer = b->buf,
    };
    VkExportMemoryAllocateInfo emai = {
        .sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO,
        .pNext = &ded,
        .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
    };
    VkMemoryAllocateFlagsInfo fl = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
        .pNext = exportable ? &emai : NULL,
        .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT,
    };
    VkMemoryAllocateInfo mai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .pNext = &fl,
        .allocationSize = req.size,
        .memoryTypeIndex = type,
    };
    r = vkAllocateMemory(be->dev, &mai, NULL, &b->mem);
    if (r == VK_SUCCESS)
        r = vkBindBufferMemory(be->dev, b->buf, b->mem, 0);
    void *map = NULL;
    if (r == VK_SUCCESS && exportable) {
        map = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            r = VK_ERROR_OUT_OF_HOST_MEMORY;
        }
    } else if (r == VK_SUCCESS) {
        r = vkMapMemory(be->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &map);
    }
    if (r != VK_SUCCESS) {
        if (b->mem)
            vkFreeMemory(be->dev, b->mem, NULL);
        vkDestroyBuffer(be->dev, b->buf, NULL);
        memset(b, 0, sizeof *b);
        return burst_vk_result(r, "vulkan: allocating a buffer");
    }
    VkBufferDeviceAddressInfo ai = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO,
        .buffer = b->buf,
    };
    b->addr = vkGetBufferDeviceAddress(be->dev, &ai);
    b->map = map;
    b->size = bytes;
    b->memsize = req.size;
    b->device_only = exportable;
    b->share_id = exportable ? burst_vk_share_new() : 0;
    if (exportable && !b->share_id) { /* no id: not shareable, let the caller fall back */
        burst_vk_buffer_destroy(be, b);
        return burst_error(BURST_ERR_NO_MEMORY, "vulkan: out of memory");
    }
    return BURST_OK;
}

burst_status_t burst_vk_buffer_create(struct burst_vk_backend *be, size_t bytes, int host_only,
                                      struct burst_vk_buffer *b)
{
    if (bytes == 0)
        bytes = 64;
    if (be->caps.max_alloc && bytes > be->caps.max_alloc)
        return burst_error(BURST_ERR_DEVICE_MEMORY,
                           "vulkan: %zu bytes exceed the device's largest allocation (%llu)", bytes,
                           (unsigned long long)be->caps.max_alloc);
    burst_status_t st = BURST_ERR_DEVICE_MEMORY;
    if (!host_only && be->mem_fast != ~0u)
        st = burst_vk_buffer_try(be, bytes, be->mem_fast, 0, b);
    if (st != BURST_OK && be->mem_host != ~0u)
        st = burst_vk_buffer_try(be, bytes, be->mem_host, 0, b);
    return st;
}

burst_status_t burst_vk_buffer_create_device(struct burst_vk_backend *be, size_t bytes,
                                             struct burst_vk_buffer *b)
{
    if (be->mem_fast == ~0u)
        return burst_error(BURST_ERR_DEVICE_MEMORY,
                           "vulkan: no device-local host-visible memory for %zu bytes of scratch",
                           bytes);
    return burst_vk_buffer_try(be, bytes ? bytes : 64, be->mem_fast, 0, b);
}

burst_status_t burst_vk_export_try(struct burst_vk_backend *be)
{
    struct burst_vk_buffer b;
    if (be->mem_dev == ~0u)
        return burst_error(BURST_ERR_UNSUPPORTED, "no device-local memory type");
    burst_status_t st = burst_vk_buffer_try(be, 65536, be->mem_dev, 1, &b);
    if (st == BURST_OK)
        burst_vk_buffer_destroy(be, &b);
    return st;
}

void burst_vk_buffer_destroy(struct burst_vk_backend *be, struct burst_vk_buffer *b)
{
    if (!b->buf)
        return;
    if (b->share_id)
        burst_vk_share_forget(b->share_id); /* importers drop their mappings */
    if (b->device_only)
        munmap(b->map, b->size);
    else
        vkUnmapMemory(be->dev, b->mem);
    vkDestroyBuffer(be->dev, b->buf, NULL);
    vkFreeMemory(be->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

/* kinds of registered buffers */
enum {
    BURST_VK_REG_DEVICE,
    BURST_VK_REG_HOST,
    BURST_VK_REG_SHARED
};

static void *burst_vk_register_new(struct burst_vk_backend *be, size_t bytes, int kind)
{
    struct burst_vk_buffer b;
    /* whole 32-bit words: the shaders read and write 16-bit elements through the word holding
     * them, so a buffer of 2 * odd bytes would be touched 2 bytes past its end */
    if (bytes > SIZE_MAX - 3)
        return NULL;
    bytes = bytes ? (bytes + 3) & ~(size_t)3 : 4;
    burst_status_t st = kind == BURST_VK_REG_SHARED
                            ? (be->caps.max_alloc && bytes > be->caps.max_alloc
                                   ? BURST_ERR_DEVICE_MEMORY
                                   : burst_vk_buffer_try(be, bytes, be->mem_dev, 1, &b))
                            : burst_vk_buffer_create(be, bytes, kind == BURST_VK_REG_HOST, &b);
    if (st != BURST_OK)
        return NULL;
    if (!b.device_only)
        memset(b.map, 0, bytes);
    pthread_mutex_lock(&be->mlock);
    if (be->nbufs == be->capbufs) {
        size_t cap = be->capbufs ? 2 * be->capbufs : 32;
        struct burst_vk_buffer *nb = realloc(be->bufs, cap * sizeof *nb);
        if (!nb) {
            pthread_mutex_unlock(&be->mlock);
            burst_vk_buffer_destroy(be, &b);
            return NULL;
        }
        be->bufs = nb;
        be->capbufs = cap;
    }
    be->bufs[be->nbufs++] = b;
    pthread_mutex_unlock(&be->mlock);
    if (b.device_only && burst_vk_fill(be, (float *)(void *)b.map, bytes / 4, 0.0f) != BURST_OK) {
        burst_vk_free(be, b.map);
        return NULL;
    }
    return b.map;
}

void *burst_vk_alloc(void *bev, size_t bytes)
{
    return burst_vk_register_new(bev, bytes, BURST_VK_REG_DEVICE);
}

void *burst_vk_alloc_scratch(void *bev, size_t bytes)
{
    struct burst_vk_backend *be = bev;
    void *p = be->exportable ? burst_vk_register_new(be, bytes, BURST_VK_REG_SHARED) : NULL;
    return p ? p : burst_vk_register_new(be, bytes, BURST_VK_REG_DEVICE);
}

void *burst_vk_host_buffer(struct burst_vk_backend *be, size_t bytes)
{
    return burst_vk_register_new(be, bytes, BURST_VK_REG_HOST);
}

void burst_vk_free(void *bev, void *ptr)
{
    struct burst_vk_backend *be = bev;
    if (!ptr)
        return;
    struct burst_vk_buffer b = {0};
    pthread_mutex_lock(&be->mlock);
    for (size_t i = 0; i < be->nbufs; i++) {
        if (be->bufs[i].map == ptr) {
            b = be->bufs[i];
            be->bufs[i] = be->bufs[--be->nbufs];
            break;
        }
    }
    pthread_mutex_unlock(&be->mlock);
    burst_vk_buffer_destroy(be, &b);
}

VkDeviceAddress burst_vk_lookup(struct burst_vk_backend *be, const void *ptr, size_t bytes)
{
    const unsigned char *p = ptr;
    VkDeviceAddress a = 0;
    pthread_mutex_lock(&be->mlock);
    for (size_t i = 0; i < be->nbufs; i++) {
        const struct burst_vk_buffer *b = &be->bufs[i];
        if (p >= b->map && p < b->map + b->size && bytes <= (size_t)(b->map + b->size - p)) {
            a = b->addr + (VkDeviceAddress)(p - b->map);
            break;
        }
    }
    pthread_mutex_unlock(&be->mlock);
    return a;
}

int burst_vk_buffer_of(struct burst_vk_backend *be, const void *ptr, size_t bytes, VkBuffer *buf_p,
                       VkDeviceSize *off_p)
{
    const unsigned char *p = ptr;
    int found = 0;
    pthread_mutex_lock(&be->mlock);
    for (size_t i = 0; i < be->nbufs && !found; i++) {
        const struct burst_vk_buffer *b = &be->bufs[i];
        if (p >= b->map && p < b->map + b->size && bytes <= (size_t)(b->map + b->size - p)) {
            *buf_p = b->buf;
            *off_p = (VkDeviceSize)(p - b->map);
            found = 1;
        }
    }
    pthread_mutex_unlock(&be->mlock);
    return found;
}

void burst_vk_memory_fini(struct burst_vk_backend *be)
{
    for (size_t i = 0; i < be->nbufs; i++)
        burst_vk_buffer_destroy(be, &be->bufs[i]);
    free(be->bufs);
    be->bufs = NULL;
    be->nbufs = be->capbufs = 0;
}
