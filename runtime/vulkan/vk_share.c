/*
 * runtime/vulkan/vk_share.c - the backend's memory shared with another backend of this process
 * (transport.h, share_*): a cuda rank's copy engine moves ring blocks straight into and out of a
 * vulkan rank's buffers on the same GPU (or from a GPU that reaches this one peer to peer),
 * instead of staging them through host memory
 * (runtime/ring_xfer.h).
 *
 * On a GPU whose driver exports buffers as opaque file descriptors (VK_KHR_external_memory_fd),
 * the plan's scratch (alloc_scratch, where the travelling blocks live) is device-local memory in
 * dedicated, exportable allocations, each with an id unique in the process (vk_memory.c; the
 * host-visible memory of alloc() is not exportable on NVIDIA's driver). The ops table below is
 * the exporter's side of struct burst_tp_devops: no copy() of its own (the cuda side copies),
 * marks that need no wait (this backend's ops are synchronous: a buffer is written when the op
 * returns), the device's UUID for the plan to match the two sides, and the descriptions and
 * descriptors the importer asks for. A process-wide registry of the live ids tells importers
 * which of their mappings to drop (share_live).
 *
 * BURST_VK_EXPORT=0 allocates ordinary memory (no sharing: such rings stage through the host).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "transport.h"
#include "vk_internal.h"

static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t share_next = 1;
static uint64_t *share_ids; /* live ids */
static size_t share_n, share_cap;

uint64_t burst_vk_share_new(void)
{
    pthread_mutex_lock(&share_lock);
    uint64_t id = share_next++;
    if (share_n == share_cap) {
        size_t cap = share_cap ? 2 * share_cap : 64;
        uint64_t *ids = realloc(share_ids, cap * sizeof *ids);
        if (ids) {
            share_ids = ids;
            share_cap = cap;
        }
    }
    if (share_n < share_cap)
        share_ids[share_n++] = id;
    else
        id = 0; /* out of memory: the buffer is not shared (its rank stages) */
    pthread_mutex_unlock(&share_lock);
    return id;
}

void burst_vk_share_forget(uint64_t id)
{
    pthread_mutex_lock(&share_lock);
    for (size_t i = 0; i < share_n; i++)
        if (share_ids[i] == id) {
            share_ids[i] = share_ids[--share_n];
            break;
        }
    if (share_n == 0) { /* nothing live: give the table back */
        free(share_ids);
        share_ids = NULL;
        share_cap = 0;
    }
    pthread_mutex_unlock(&share_lock);
}

static int burst_vk_share_live(uint64_t id)
{
    int live = 0;
    pthread_mutex_lock(&share_lock);
    for (size_t i = 0; i < share_n && !live; i++)
        live = share_ids[i] == id;
    pthread_mutex_unlock(&share_lock);
    return live;
}

void burst_vk_share_init(struct burst_vk_backend *be, int has_ext)
{
    be->exportable = 0;
    be->export_why[0] = '\0';
    if (!has_ext)
        return;
    VkPhysicalDeviceExternalBufferInfo ebi = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
                 VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
    };
    VkExternalBufferProperties ebp = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES};
    vkGetPhysicalDeviceExternalBufferProperties(be->phys, &ebi, &ebp);
    be->get_memory_fd = (PFN_vkGetMemoryFdKHR)vkGetDeviceProcAddr(be->dev, "vkGetMemoryFdKHR");
    if (!be->get_memory_fd || !(ebp.externalMemoryProperties.externalMemoryFeatures &
                                VK_EXTERNAL_MEMORY_FEATURE_EXPORTABLE_BIT)) {
        snprintf(be->export_why, sizeof be->export_why,
                 "the driver does not export storage buffers as opaque fds");
        return;
    }
    if (!be->elem_gpu || !be->stage) { /* the host would touch the scratch */
        snprintf(be->export_why, sizeof be->export_why,
                 "elementwise ops run on the host (BURST_VK_ELEM=cpu)");
        return;
    }
    burst_status_t st = burst_vk_export_try(be);
    if (st != BURST_OK) {
        snprintf(be->export_why, sizeof be->export_why, "an exportable buffer failed: %s",
                 burst_last_error());
        return;
    }
    be->exportable = 1;
}

/* Marks: every op of this backend has finished when it returns; nothing to wait for. */
static burst_status_t burst_vk_share_mark(void *be, void **mark_p)
{
    (void)be;
    *mark_p = NULL;
    return BURST_OK;
}

static burst_status_t burst_vk_share_wait(void *be, void *mark)
{
    (void)be;
    (void)mark;
    return BURST_OK;
}

static void burst_vk_share_release(void *be, void *mark)
{
    (void)be;
    (void)mark;
}

static burst_status_t burst_vk_share_device(void *bev, unsigned char uuid[16])
{
    struct burst_vk_backend *be = bev;
    if (!be->exportable)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "vulkan: device %d (%s) does not export memory: %s", be->index,
                           be->caps.name,
                           be->export_why[0] ? be->export_why
                                             : "BURST_VK_EXPORT=0, a cpu device, or no "
                                               "VK_KHR_external_memory_fd");
    memcpy(uuid, be->caps.device_uuid, 16);
    return BURST_OK;
}

static burst_status_t burst_vk_share_export(void *bev, const void *buf, size_t len, int want_fd,
                                            struct burst_tp_share *out)
{
    struct burst_vk_backend *be = bev;
    const unsigned char *p = buf;
    struct burst_vk_buffer b = {0};
    pthread_mutex_lock(&be->mlock);
    for (size_t i = 0; i < be->nbufs && !b.buf; i++) {
        const struct burst_vk_buffer *x = &be->bufs[i];
        if (p >= x->map && p < x->map + x->size && len <= (size_t)(x->map + x->size - p))
            b = *x;
    }
    pthread_mutex_unlock(&be->mlock);
    if (!b.buf || !b.share_id)
        return burst_error(BURST_ERR_INTERNAL,
                           "vulkan: %zu bytes at %p are not in an exportable buffer of device %d",
                           len, buf, be->index);
    *out = (struct burst_tp_share){
        .id = b.share_id,
        .size = b.memsize,
        .offset = (uint64_t)(p - b.map),
        .dedicated = 1,
        .fd = -1,
    };
    if (!want_fd)
        return BURST_OK;
    VkMemoryGetFdInfoKHR gi = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR,
        .memory = b.mem,
        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
    };
    return burst_vk_result(be->get_memory_fd(be->dev, &gi, &out->fd), "vulkan: vkGetMemoryFdKHR");
}

const struct burst_tp_devops burst_vk_devshare = {
    .mark = burst_vk_share_mark,
    .copy = NULL,
    .wait = burst_vk_share_wait,
    .release = burst_vk_share_release,
    .share_device = burst_vk_share_device,
    .share_export = burst_vk_share_export,
    .share_live = burst_vk_share_live,
};
