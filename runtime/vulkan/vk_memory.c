/*
 * runtime/vulkan/vk_memory.c - host-addressable device buffers and the pointer registry.
 *
 * Memory types: "fast" = DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT (unified memory, lavapipe,
 * resizable BAR), tried first for alloc(); "host" = HOST_VISIBLE | HOST_COHERENT (preferring
 * HOST_CACHED), the fallback and the staging buffers. Each alloc() is its own VkBuffer and
 * VkDeviceMemory, mapped for its whole life.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
}

static burst_status_t burst_vk_buffer_try(struct burst_vk_backend *be, size_t bytes, uint32_t type,
                                          struct burst_vk_buffer *b)
{
    memset(b, 0, sizeof *b);
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
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
    VkMemoryAllocateFlagsInfo fl = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
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
    if (r == VK_SUCCESS)
        r = vkMapMemory(be->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &map);
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
        st = burst_vk_buffer_try(be, bytes, be->mem_fast, b);
    if (st != BURST_OK && be->mem_host != ~0u)
        st = burst_vk_buffer_try(be, bytes, be->mem_host, b);
    return st;
}

void burst_vk_buffer_destroy(struct burst_vk_backend *be, struct burst_vk_buffer *b)
{
    if (!b->buf)
        return;
    vkUnmapMemory(be->dev, b->mem);
    vkDestroyBuffer(be->dev, b->buf, NULL);
    vkFreeMemory(be->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

static void *burst_vk_register_new(struct burst_vk_backend *be, size_t bytes, int host_only)
{
    struct burst_vk_buffer b;
    /* whole 32-bit words: the shaders read and write 16-bit elements through the word holding
     * them, so a buffer of 2 * odd bytes would be touched 2 bytes past its end */
    if (bytes > SIZE_MAX - 3)
        return NULL;
    bytes = bytes ? (bytes + 3) & ~(size_t)3 : 4;
    if (burst_vk_buffer_create(be, bytes, host_only, &b) != BURST_OK)
        return NULL;
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
    return b.map;
}

void *burst_vk_alloc(void *bev, size_t bytes)
{
    return burst_vk_register_new(bev, bytes, 0);
}

void *burst_vk_host_buffer(struct burst_vk_backend *be, size_t bytes)
{
    return burst_vk_register_new(be, bytes, 1);
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
