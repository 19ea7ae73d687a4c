/*
 * runtime/vulkan/vk_elem_gpu.c - the shader path of copy / fill / accumulate
 * (shaders/elem_*.comp): parameter block, staging of arguments the backend does not own, the
 * dispatch. vk_elem.c checks the arguments and decides which calls come here.
 *
 * Arguments in the backend's buffers are passed by device address. One the backend does not own
 * (caller host memory) is packed row by row into the stream's host-cached buffer and read there
 * by the shader; a destination is unpacked row by row after the dispatch, so only the tensor's
 * own elements of the caller's memory are written (never the gaps between strided rows, which
 * other threads may own).
 *
 * Grid: BURST_VK_ELEM_WG invocations per workgroup, workgroups along x up to the device's limit
 * (and 65535), then rows along y; the shaders loop over whatever a grid does not cover, so any
 * count runs in one dispatch. BURST_VK_ELEM_GROUPS caps both dimensions to exercise the rows and
 * the loop with small counts (tests).
 */
#include <string.h>

#include "error.h"
#include "logger.h"
#include "vk_internal.h"

#define BURST_VK_ELEM_WG 128 /* maxComputeWorkGroupInvocations is at least 128 everywhere */
#define BURST_VK_ELEM_ALIGN 256

_Static_assert(sizeof(struct burst_vk_elem_params) == 128,
               "struct burst_vk_elem_params must match ElemParams of shaders/elem.glsl");

static size_t burst_vk_elem_esize(burst_dtype_t dt)
{
    return dt == BURST_DTYPE_FP32 ? 4 : 2;
}

/* Bytes of t's elements packed (the caller checked that the count fits). */
static size_t burst_vk_elem_packed(const struct burst_tensor *t)
{
    return (size_t)(t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3]) *
           burst_vk_elem_esize(t->dtype);
}

/* Copy the rows of view t into the packed buffer buf (unpack = 0) or back out of it (1). */
static void burst_vk_elem_pack(const struct burst_tensor *t, unsigned char *buf, int unpack)
{
    const int64_t es = (int64_t)burst_vk_elem_esize(t->dtype);
    const size_t row = (size_t)(t->shape[3] * es);
    const int64_t *st = t->stride, *sh = t->shape;
    if (st[2] == sh[3] && st[1] == sh[2] * sh[3] && st[0] == sh[1] * sh[2] * sh[3]) {
        size_t all = burst_vk_elem_packed(t); /* contiguous: one block */
        memcpy(unpack ? t->data : buf, unpack ? (const void *)buf : t->data, all);
        return;
    }
    for (int64_t b = 0; b < sh[0]; b++)
        for (int64_t i = 0; i < sh[1]; i++)
            for (int64_t h = 0; h < sh[2]; h++, buf += row) {
                unsigned char *p =
                    (unsigned char *)t->data + (b * st[0] + i * st[1] + h * st[2]) * es;
                memcpy(unpack ? p : buf, unpack ? buf : p, row);
            }
}

/* The grid of a dispatch over `units` work items (at least one workgroup). */
static void burst_vk_elem_grid(const struct burst_vk_backend *be, uint64_t units, uint32_t g[3])
{
    uint64_t groups = (units + BURST_VK_ELEM_WG - 1) / BURST_VK_ELEM_WG;
    uint64_t mx = be->caps.max_groups[0] < 65535u ? be->caps.max_groups[0] : 65535u;
    uint64_t my = be->caps.max_groups[1] < 65535u ? be->caps.max_groups[1] : 65535u;
    if (be->env.elem_groups) {
        mx = mx < be->env.elem_groups ? mx : be->env.elem_groups;
        my = my < be->env.elem_groups ? my : be->env.elem_groups;
    }
    uint64_t gx = groups < mx ? groups : mx;
    gx = gx ? gx : 1;
    uint64_t gy = (groups + gx - 1) / gx;
    gy = gy < my ? gy : my;
    g[0] = (uint32_t)gx;
    g[1] = (uint32_t)(gy ? gy : 1);
    g[2] = 1;
}

burst_status_t burst_vk_elem_run(struct burst_vk_backend *be, enum burst_vk_kernel k,
                                 struct burst_vk_elem_params *p, struct burst_vk_elem_arg *args,
                                 int nargs, int *unstaged_p)
{
    *unstaged_p = 0;
    /* the pipeline: dtypes {source, destination} in constants 4 and 5 */
    int dt[4] = {nargs > 1 ? (int)args[1].t->dtype : 0, (int)args[0].t->dtype, 0, 0};
    struct burst_vk_tile tl = {1, BURST_VK_ELEM_WG, 1, 0};
    VkPipeline pipe;
    burst_status_t st = burst_vk_pipeline(be, k, 0, &tl, dt, &pipe);
    if (st != BURST_OK)
        return st;
    size_t off[2] = {0, 0}, staged = 0;
    for (int i = 0; i < nargs; i++) {
        if (args[i].addr)
            continue;
        off[i] = staged;
        staged += (burst_vk_elem_packed(args[i].t) + BURST_VK_ELEM_ALIGN - 1) /
                  BURST_VK_ELEM_ALIGN * BURST_VK_ELEM_ALIGN;
    }
    struct burst_vk_stream *s;
    if ((st = burst_vk_stream_acquire(be, &s)) != BURST_OK)
        return st;
    void *extra;
    VkDeviceAddress xa, ha = 0;
    unsigned char *host = NULL;
    st = burst_vk_stage(be, s, NULL, 0, sizeof *p, &extra, &xa);
    if (st == BURST_OK && staged && burst_vk_stream_host(be, s, staged, &host, &ha) != BURST_OK) {
        burst_log(BURST_LOG_DEBUG, BURST_SUB_VULKAN, -1,
                  "no staging of caller memory for the shaders (%s): the calling thread's loop",
                  burst_last_error());
        burst_error_clear(); /* the caller's loop does the work */
        burst_vk_stream_release(be, s);
        *unstaged_p = 1;
        return BURST_OK;
    }
    if (st == BURST_OK) {
        for (int i = 0; i < nargs; i++) {
            const struct burst_tensor *t = args[i].t;
            uint64_t *addr = i == 0 ? &p->dst : &p->src;
            int64_t *stride = i == 0 ? p->dstride : p->sstride;
            if (args[i].addr) {
                *addr = args[i].addr;
                memcpy(stride, t->stride, 3 * sizeof *stride);
                continue;
            }
            *addr = ha + off[i];
            stride[2] = t->shape[3];
            stride[1] = t->shape[2] * stride[2];
            stride[0] = t->shape[1] * stride[1];
            if (args[i].in)
                burst_vk_elem_pack(t, host + off[i], 0);
        }
        memcpy(extra, p, sizeof *p);
        struct burst_vk_dispatch d = {k, pipe, xa, {1, 1, 1}, 0};
        burst_vk_elem_grid(be, p->units, d.groups);
        st = burst_vk_submit(be, s, &d, 1, NULL, 0, 0, NULL);
    }
    for (int i = 0; st == BURST_OK && i < nargs; i++)
        if (!args[i].addr && args[i].out)
            burst_vk_elem_pack(args[i].t, host + off[i], 1);
    burst_vk_stream_release(be, s);
    return st;
}
