/* runtime/ring_blocks.c - buffers and transfers of the travelling blocks (see ring_blocks.h). */
#include "ring_blocks.h"

#include "error.h"

/* Buffers of a call: none without transfers, 2 on a flat ring, 4 on a two-level ring. */
static int buffers(const struct burst_plan *plan)
{
    return plan->steps <= 1 ? 0 : plan->local > 1 && plan->local < plan->size ? 4 : 2;
}

burst_status_t burst_blocks_init(struct burst_blocks *b, struct burst_plan *plan,
                                 struct burst_scratch *sc, const char *who,
                                 enum burst_sched_pattern pattern, enum burst_msg_kind kind,
                                 uint32_t seq, size_t (*bytes)(const void *, int64_t),
                                 const void *bytes_arg)
{
    *b = (struct burst_blocks){
        .plan = plan,
        .pattern = pattern,
        .kind = kind,
        .seq = seq,
        .bytes = bytes,
        .bytes_arg = bytes_arg,
        .cur = -1,
        .rs = -1,
        .in = -1,
        .next = -1,
        .sent = -1,
    };
    b->nbuf = buffers(plan);
    for (int i = 0; i < b->nbuf; i++) {
        burst_status_t st =
            burst_scratch_alloc_raw(sc, who, bytes(bytes_arg, plan->n_max), (void **)&b->buf[i]);
        if (st != BURST_OK)
            return st;
    }
    return BURST_OK;
}

uint64_t burst_blocks_scratch_bytes(const struct burst_plan *plan, size_t block_bytes)
{
    return (uint64_t)buffers(plan) * block_bytes;
}

void burst_blocks_restart(struct burst_blocks *b, uint32_t seq)
{
    b->seq = seq;
    b->cur = b->rs = b->in = b->next = b->sent = -1;
}

/* A buffer nobody reads or writes now. */
static int take_free(const struct burst_blocks *b)
{
    for (int i = 0; i < b->nbuf; i++)
        if (i != b->cur && i != b->rs && i != b->in && i != b->next && i != b->sent)
            return i;
    return -1;
}

/* Rows of the block held at `step` that travel (burst_plan_span). */
static int64_t block_len(const struct burst_blocks *b, int step)
{
    const struct burst_plan *p = b->plan;
    int64_t lo, hi;
    burst_plan_span(p, b->pattern == BURST_SCHED_BWD_BURST,
                    burst_sched_block(b->pattern, p->size, p->local, p->rank, step), &lo, &hi);
    return hi - lo;
}

burst_status_t burst_blocks_post(struct burst_blocks *b, const struct burst_sched_step *s, int step,
                                 burst_blocks_pack_fn pack, void *pack_arg)
{
    const int sends = s->send_to >= 0 || s->inter_send_to >= 0;
    int src = b->cur;
    burst_status_t st = BURST_OK;
    if (src < 0 && sends) { /* pack the caller's (strided) block once */
        src = take_free(b);
        if (src < 0)
            return burst_error(BURST_ERR_INTERNAL, "ring: no free block buffer at step %d", step);
        b->sent = src;
        st = pack(pack_arg, b->buf[src]);
        if (st != BURST_OK)
            return st;
    }
    const size_t cur_bytes = b->bytes(b->bytes_arg, block_len(b, step));
    if (s->inter_send_to >= 0) {
        int target = step + b->plan->local; /* the next round's first step */
        uint64_t tag = burst_tag(b->seq, b->kind, target);
        b->rs = src;
        b->in = take_free(b);
        if (b->in < 0)
            return burst_error(BURST_ERR_INTERNAL, "ring: no free block buffer at step %d", step);
        st = burst_xfer_irecv(b->plan, s->inter_recv_from, tag, b->buf[b->in],
                              b->bytes(b->bytes_arg, block_len(b, target)), &b->ir);
        if (st == BURST_OK)
            st = burst_xfer_isend(b->plan, s->inter_send_to, tag, b->buf[src], cur_bytes, &b->is);
        if (st != BURST_OK)
            return st;
    }
    if (s->recv_from >= 0) {
        uint64_t tag = burst_tag(b->seq, b->kind, step + 1);
        b->sent = src;
        b->next = take_free(b);
        if (b->next < 0)
            return burst_error(BURST_ERR_INTERNAL, "ring: no free block buffer at step %d", step);
        st = burst_xfer_irecv(b->plan, s->recv_from, tag, b->buf[b->next],
                              b->bytes(b->bytes_arg, block_len(b, step + 1)), &b->lr);
        if (st == BURST_OK)
            st = burst_xfer_isend(b->plan, s->send_to, tag, b->buf[src], cur_bytes, &b->ls);
    }
    return st;
}

unsigned char *burst_blocks_current(const struct burst_blocks *b)
{
    return b->cur < 0 ? NULL : b->buf[b->cur];
}

void burst_blocks_start(struct burst_blocks *b)
{
    burst_xfer_start(b->plan, &b->lr);
    burst_xfer_start(b->plan, &b->ir);
}

burst_status_t burst_blocks_wait(struct burst_blocks *b, const struct burst_sched_step *s)
{
    burst_status_t w1 = burst_xfer_wait(b->plan, &b->lr), w2 = burst_xfer_wait(b->plan, &b->ls);
    burst_status_t w3 = BURST_OK, w4 = BURST_OK;
    int cur = b->next >= 0 ? b->next : b->cur;
    if (s->round_last || w1 != BURST_OK || w2 != BURST_OK) {
        w3 = burst_xfer_wait(b->plan, &b->ir);
        w4 = burst_xfer_wait(b->plan, &b->is);
        b->rs = -1;
        if (b->in >= 0)
            cur = b->in;
        b->in = -1;
    }
    b->cur = cur;
    b->next = -1;
    b->sent = -1;
    return w1 ? w1 : w2 ? w2 : w3 ? w3 : w4;
}

void burst_blocks_drain(struct burst_blocks *b)
{
    burst_xfer_wait(b->plan, &b->lr);
    burst_xfer_wait(b->plan, &b->ls);
    burst_xfer_wait(b->plan, &b->ir);
    burst_xfer_wait(b->plan, &b->is);
}
