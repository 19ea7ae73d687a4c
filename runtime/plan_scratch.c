/*
 * runtime/plan_scratch.c - the plan's kept scratch (best fit, zeroed on reuse unless the call
 * writes it whole first, trimmed) and the views the engine takes of tensors and head groups.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "fault.h"
#include "ring_xfer.h"
#include "plan_internal.h"
#include "speed.h"

/* Scratch sizes are rounded up to 256 bytes: a reused buffer is zeroed as floats, and a buffer
 * kept for one size fits the near sizes of other calls. */
#define BURST_SCRATCH_ALIGN 256

void burst_scratch_trim(struct burst_plan *plan)
{
    const struct burst_context *ctx = plan->ctx;
    for (int i = 0; i < BURST_SCRATCH_BUFS; i++) {
        struct burst_kept *k = &plan->kept[i];
        if (k->ptr && !k->busy) {
            ctx->ops->mem.free(ctx->be, k->ptr);
            k->ptr = NULL;
            k->size = 0;
        }
    }
}

/* A kept buffer of at least `bytes` (zeroed when `zero`), else a new one. */
static burst_status_t scratch_take(struct burst_scratch *s, const char *who, size_t bytes, int zero,
                                   void **ptr_p)
{
    struct burst_plan *plan = s->plan;
    const struct burst_context *ctx = plan->ctx;
    const size_t need =
        bytes ? (bytes + BURST_SCRATCH_ALIGN - 1) / BURST_SCRATCH_ALIGN * BURST_SCRATCH_ALIGN
              : BURST_SCRATCH_ALIGN;
    int best = -1, empty = -1;
    for (int i = 0; i < BURST_SCRATCH_BUFS; i++) {
        const struct burst_kept *k = &plan->kept[i];
        if (!k->busy && k->ptr && k->size >= need && (best < 0 || k->size < plan->kept[best].size))
            best = i;
    }
    if (best >= 0 && zero) { /* reuse, zeroed like a fresh allocation, before any transfer may
                              * land */
        struct burst_kept *k = &plan->kept[best];
        burst_status_t st = ctx->ops->elem.fill(ctx->be, k->ptr, need / sizeof(float), 0.0f);
        /* a peer's transfer may write the buffer from outside this thread's queue of device
         * work, so the zeros must have landed first; one rank has no transfers, and its own
         * ops run in the order it queues them (backend.h), so it does not wait here */
        if (st == BURST_OK && BURST_OPS_HAS(ctx->ops, stream.sync) && plan->size > 1)
            st = ctx->ops->stream.sync(ctx->be);
        if (st != BURST_OK)
            return st;
    } else if (best < 0) {
        /* a new buffer: the idle ones are too small for this call, drop them first */
        burst_scratch_trim(plan);
        for (int i = 0; i < BURST_SCRATCH_BUFS && empty < 0; i++)
            if (!plan->kept[i].ptr)
                empty = i;
        if (empty < 0)
            return burst_error(BURST_ERR_INTERNAL, "%s: more than %d scratch buffers", who,
                               BURST_SCRATCH_BUFS);
        void *(*alloc)(void *, size_t) = BURST_OPS_HAS(ctx->ops, mem.alloc_scratch)
                                             ? ctx->ops->mem.alloc_scratch
                                             : ctx->ops->mem.alloc;
        void *p = burst_fault_alloc() ? NULL : alloc(ctx->be, need);
        if (!p)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes of scratch", who,
                               bytes);
        plan->kept[empty].ptr = p;
        plan->kept[empty].size = need;
        best = empty;
    }
    plan->kept[best].busy = 1;
    s->slots[s->count++] = best;
    s->bytes += bytes;
    *ptr_p = plan->kept[best].ptr;
    return BURST_OK;
}

burst_status_t burst_scratch_alloc(struct burst_scratch *s, const char *who, size_t bytes,
                                   void **ptr_p)
{
    return scratch_take(s, who, bytes, 1, ptr_p);
}

burst_status_t burst_scratch_alloc_raw(struct burst_scratch *s, const char *who, size_t bytes,
                                       void **ptr_p)
{
    return scratch_take(s, who, bytes, 0, ptr_p);
}

void burst_scratch_free(struct burst_scratch *s)
{
    for (int i = 0; i < s->count; i++)
        s->plan->kept[s->slots[i]].busy = 0;
    s->count = 0;
}

struct burst_tensor burst_view(void *data, burst_dtype_t dtype, int64_t b, int64_t n, int64_t h,
                               int64_t d)
{
    return burst_tensor_contiguous(data, dtype, b, n, h, d);
}

struct burst_tensor burst_heads(const struct burst_tensor *t, int64_t h0, int64_t h)
{
    struct burst_tensor v = *t;
    v.data = (unsigned char *)t->data + (size_t)(h0 * t->stride[2]) * burst_dtype_size(t->dtype);
    v.shape[2] = h;
    return v;
}

struct burst_tensor burst_rows(const struct burst_tensor *t, int64_t r0, int64_t n)
{
    struct burst_tensor v = *t;
    v.data = (unsigned char *)t->data + (size_t)(r0 * t->stride[1]) * burst_dtype_size(t->dtype);
    v.shape[1] = n;
    return v;
}

struct burst_hgroup burst_plan_hgroup(const struct burst_plan *plan, int g)
{
    const int64_t rep = plan->p.q_heads / plan->p.kv_heads, kv0 = g * plan->gkv;
    const int64_t nkv = plan->p.kv_heads - kv0 < plan->gkv ? plan->p.kv_heads - kv0 : plan->gkv;
    return (struct burst_hgroup){.kv0 = kv0, .nkv = nkv, .q0 = kv0 * rep, .nq = nkv * rep};
}
