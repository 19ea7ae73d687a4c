/*
 * runtime/vulkan/vk_stream.c - per-call command buffers, staging, submit + wait, timestamps.
 *
 * A stream is a command pool + buffer + fence + staging buffer (+ a timestamp query pool when
 * profiling). A call takes a free stream (creating one, up to BURST_VK_MAX_STREAMS, else waits),
 * stages its arguments, records its dispatches, submits under the queue lock and waits on the
 * fence; the stream's staging buffer grows to the largest call and is reused. A second,
 * host-cached buffer (grown the same way) holds what the host packs in or reads back for the
 * elementwise ops (vk_elem_gpu.c); a third, device memory (grown the same way, on demand), a
 * call's own intermediates (fwd_cmq's bf16 K and V converted to fp16, vk_attn.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vk_internal.h"

#define BURST_VK_STAGE_ALIGN 256
#define BURST_VK_MAX_DISPATCH 16 /* timed dispatches of one call (profiling); more go untimed */

static burst_status_t burst_vk_stream_init(struct burst_vk_backend *be, struct burst_vk_stream *s)
{
    memset(s, 0, sizeof *s);
    VkCommandPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = be->qfamily,
    };
    VkResult r = vkCreateCommandPool(be->dev, &pci, NULL, &s->pool);
    if (r != VK_SUCCESS)
        return burst_vk_result(r, "vulkan: vkCreateCommandPool");
    VkCommandBufferAllocateInfo cai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = s->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    r = vkAllocateCommandBuffers(be->dev, &cai, &s->cmd);
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (r == VK_SUCCESS)
        r = vkCreateFence(be->dev, &fci, NULL, &s->fence);
    if (r == VK_SUCCESS && be->caps.timestamps) {
        VkQueryPoolCreateInfo qci = {
            .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
            .queryType = VK_QUERY_TYPE_TIMESTAMP,
            .queryCount = 2 * BURST_VK_MAX_DISPATCH,
        };
        r = vkCreateQueryPool(be->dev, &qci, NULL, &s->queries);
    }
    if (r != VK_SUCCESS) {
        if (s->fence)
            vkDestroyFence(be->dev, s->fence, NULL);
        vkDestroyCommandPool(be->dev, s->pool, NULL);
        memset(s, 0, sizeof *s);
        return burst_vk_result(r, "vulkan: creating a command stream");
    }
    return BURST_OK;
}

burst_status_t burst_vk_stream_acquire(struct burst_vk_backend *be, struct burst_vk_stream **s_p)
{
    pthread_mutex_lock(&be->slock);
    for (;;) {
        for (int i = 0; i < be->nstreams; i++) {
            if (!be->streams[i].busy) {
                be->streams[i].busy = 1;
                pthread_mutex_unlock(&be->slock);
                *s_p = &be->streams[i];
                return BURST_OK;
            }
        }
        if (be->nstreams < BURST_VK_MAX_STREAMS)
            break;
        pthread_cond_wait(&be->scond, &be->slock);
    }
    struct burst_vk_stream *s = &be->streams[be->nstreams];
    burst_status_t st = burst_vk_stream_init(be, s);
    if (st == BURST_OK) {
        s->busy = 1;
        be->nstreams++;
        *s_p = s;
    }
    pthread_mutex_unlock(&be->slock);
    return st;
}

void burst_vk_stream_release(struct burst_vk_backend *be, struct burst_vk_stream *s)
{
    pthread_mutex_lock(&be->slock);
    s->busy = 0;
    s->used = 0;
    pthread_cond_signal(&be->scond);
    pthread_mutex_unlock(&be->slock);
}

static size_t burst_vk_align(size_t x)
{
    return (x + BURST_VK_STAGE_ALIGN - 1) / BURST_VK_STAGE_ALIGN * BURST_VK_STAGE_ALIGN;
}

/* Grow a stream's buffer b to hold at least need bytes (at least 1 MiB, a quarter more than
 * asked, so that growing calls rarely reallocate): host_only as burst_vk_buffer_create takes it.
 * An error names what the buffer holds. */
static burst_status_t burst_vk_stream_grow(struct burst_vk_backend *be, struct burst_vk_buffer *b,
                                           size_t need, int host_only, const char *what)
{
    if (need <= b->size)
        return BURST_OK;
    burst_vk_buffer_destroy(be, b);
    size_t cap = need < ((size_t)1 << 20) ? ((size_t)1 << 20) : need + need / 4;
    burst_status_t st = burst_vk_buffer_create(be, cap, host_only, b);
    if (st != BURST_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", burst_last_error());
        return burst_error(st,
                           "vulkan: no memory for %zu bytes of %s (arguments in host memory): %s",
                           need, what, why);
    }
    return BURST_OK;
}

burst_status_t burst_vk_stage(struct burst_vk_backend *be, struct burst_vk_stream *s,
                              struct burst_vk_slot *slots, int nslots, size_t extra, void **extra_p,
                              VkDeviceAddress *extra_addr_p)
{
    size_t need = burst_vk_align(extra);
    for (int i = 0; i < nslots; i++) {
        struct burst_vk_slot *sl = &slots[i];
        sl->staged = NULL;
        sl->addr = sl->host ? burst_vk_lookup(be, sl->host, sl->bytes) : 0;
        if (sl->host && !sl->addr)
            need += burst_vk_align(sl->bytes);
    }
    /* device-local + host-visible first (resizable BAR, unified memory): kernels read the
     * staged arguments many times, host writes them once */
    burst_status_t st = burst_vk_stream_grow(be, &s->stage, need, 0, "staging");
    if (st != BURST_OK)
        return st;
    size_t off = 0;
    *extra_p = s->stage.map;
    *extra_addr_p = s->stage.addr;
    off = burst_vk_align(extra);
    for (int i = 0; i < nslots; i++) {
        struct burst_vk_slot *sl = &slots[i];
        if (!sl->host || sl->addr)
            continue;
        sl->staged = s->stage.map + off;
        sl->addr = s->stage.addr + off;
        memcpy(sl->staged, sl->host, sl->bytes);
        off += burst_vk_align(sl->bytes);
    }
    s->used = off;
    return BURST_OK;
}

burst_status_t burst_vk_stream_scratch(struct burst_vk_backend *be, struct burst_vk_stream *s,
                                       size_t bytes, VkDeviceAddress *addr_p)
{
    if (bytes > s->scratch.size) {
        burst_vk_buffer_destroy(be, &s->scratch);
        /* device-local only: kernels read it many times; system memory would be PCIe reads */
        burst_status_t st = burst_vk_buffer_create_device(be, bytes, &s->scratch);
        if (st != BURST_OK) {
            memset(&s->scratch, 0, sizeof s->scratch);
            return st;
        }
    }
    *addr_p = s->scratch.addr;
    return BURST_OK;
}

burst_status_t burst_vk_stream_host(struct burst_vk_backend *be, struct burst_vk_stream *s,
                                    size_t bytes, unsigned char **map_p, VkDeviceAddress *addr_p)
{
    burst_status_t st = burst_vk_stream_grow(be, &s->host, bytes, 1, "host staging");
    if (st != BURST_OK)
        return st;
    *map_p = s->host.map;
    *addr_p = s->host.addr;
    return BURST_OK;
}

/* Submit s's recorded command buffer, wait for it, and reset both for the next call. */
static VkResult burst_vk_submit_wait(struct burst_vk_backend *be, struct burst_vk_stream *s)
{
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &s->cmd,
    };
    pthread_mutex_lock(&be->qlock);
    VkResult r = vkQueueSubmit(be->queue, 1, &si, s->fence);
    pthread_mutex_unlock(&be->qlock);
    if (r == VK_SUCCESS) {
        r = vkWaitForFences(be->dev, 1, &s->fence, VK_TRUE, UINT64_MAX);
        vkResetFences(be->dev, 1, &s->fence);
    }
    vkResetCommandBuffer(s->cmd, 0);
    return r;
}

burst_status_t burst_vk_copy_buffers(struct burst_vk_backend *be, VkBuffer dst, VkDeviceSize doff,
                                     VkBuffer src, VkDeviceSize soff, size_t bytes)
{
    struct burst_vk_stream *s;
    burst_status_t st = burst_vk_stream_acquire(be, &s);
    if (st != BURST_OK)
        return st;
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VkResult r = vkBeginCommandBuffer(s->cmd, &bi);
    if (r == VK_SUCCESS) {
        VkBufferCopy region = {.srcOffset = soff, .dstOffset = doff, .size = bytes};
        vkCmdCopyBuffer(s->cmd, src, dst, 1, &region);
        /* the copy's writes visible to the host that reads a staging buffer after the fence */
        VkMemoryBarrier mb = {
            .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
            .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
        };
        vkCmdPipelineBarrier(s->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                             1, &mb, 0, NULL, 0, NULL);
        r = vkEndCommandBuffer(s->cmd);
    }
    if (r == VK_SUCCESS)
        r = burst_vk_submit_wait(be, s);
    else
        vkResetCommandBuffer(s->cmd, 0);
    burst_vk_stream_release(be, s);
    return burst_vk_result(r, "vulkan: copying between buffers");
}

burst_status_t burst_vk_submit(struct burst_vk_backend *be, struct burst_vk_stream *s,
                               const struct burst_vk_dispatch *d, int nd,
                               struct burst_vk_slot *slots, int nslots, int force_timing,
                               double *ms_p)
{
    int timing = (be->env.profile || force_timing) && s->queries && nd <= BURST_VK_MAX_DISPATCH;
    if (ms_p)
        *ms_p = -1.0;
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VkResult r = vkBeginCommandBuffer(s->cmd, &bi);
    if (r != VK_SUCCESS)
        return burst_vk_result(r, "vulkan: vkBeginCommandBuffer");
    if (timing)
        vkCmdResetQueryPool(s->cmd, s->queries, 0, 2 * (uint32_t)nd);
    for (int i = 0; i < nd; i++) {
        if (i > 0 && d[i].wait) {
            VkMemoryBarrier mb = {
                .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
            };
            vkCmdPipelineBarrier(s->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
        }
        if (timing)
            vkCmdWriteTimestamp(s->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, s->queries,
                                2 * (uint32_t)i);
        vkCmdBindPipeline(s->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, d[i].pipe);
        uint64_t addr = d[i].params;
        vkCmdPushConstants(s->cmd, be->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof addr, &addr);
        vkCmdDispatch(s->cmd, d[i].groups[0], d[i].groups[1], d[i].groups[2]);
        if (timing)
            vkCmdWriteTimestamp(s->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s->queries,
                                2 * (uint32_t)i + 1);
    }
    r = vkEndCommandBuffer(s->cmd);
    if (r != VK_SUCCESS)
        return burst_vk_result(r, "vulkan: vkEndCommandBuffer");
    r = burst_vk_submit_wait(be, s);
    if (r != VK_SUCCESS)
        return burst_vk_result(r, "vulkan: submitting and waiting for a call");
    for (int i = 0; i < nslots; i++)
        if (slots[i].staged && slots[i].out)
            memcpy((void *)slots[i].host, slots[i].staged, slots[i].bytes);
    if (timing) {
        uint64_t ts[2 * BURST_VK_MAX_DISPATCH];
        r = vkGetQueryPoolResults(be->dev, s->queries, 0, 2 * (uint32_t)nd, sizeof ts, ts,
                                  sizeof ts[0], VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
        if (r == VK_SUCCESS) {
            double total = 0.0;
            pthread_mutex_lock(&be->proflock);
            for (int i = 0; i < nd; i++) {
                double ms = (double)(ts[2 * i + 1] - ts[2 * i]) * be->caps.timestamp_period * 1e-6;
                be->prof_ms[d[i].kernel] += ms;
                if (!be->prof_count[d[i].kernel] || ms < be->prof_min[d[i].kernel])
                    be->prof_min[d[i].kernel] = ms;
                be->prof_count[d[i].kernel]++;
                total += ms;
            }
            pthread_mutex_unlock(&be->proflock);
            if (ms_p)
                *ms_p = total;
        }
    }
    return BURST_OK;
}

void burst_vk_streams_fini(struct burst_vk_backend *be)
{
    for (int i = 0; i < be->nstreams; i++) {
        struct burst_vk_stream *s = &be->streams[i];
        burst_vk_buffer_destroy(be, &s->stage);
        burst_vk_buffer_destroy(be, &s->host);
        burst_vk_buffer_destroy(be, &s->scratch);
        if (s->queries)
            vkDestroyQueryPool(be->dev, s->queries, NULL);
        vkDestroyFence(be->dev, s->fence, NULL);
        vkDestroyCommandPool(be->dev, s->pool, NULL);
    }
    be->nstreams = 0;
}
