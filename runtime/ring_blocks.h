/*
 * runtime/ring_blocks.h - the travelling blocks of one ring call (private).
 *
 * Owns the block buffers of a forward (K/V) or backward (query bundle or K/V) call and runs
 * their transfers as the schedule says (runtime/schedule.h): the local-ring hop to the next step
 * and, on a two-level ring, the inter-node hop posted at a round's first step that has the whole
 * round to complete. The engine asks for the current block, computes on it while the transfers
 * are in flight, then waits. Buffers: 2 on a flat ring (current + next), 4 on a two-level ring
 * (current, next, the round's first block being sent to the next node, the next round's first
 * block arriving).
 */
#ifndef BURST_RUNTIME_RING_BLOCKS_H
#define BURST_RUNTIME_RING_BLOCKS_H

#include "plan_internal.h"
#include "ring_xfer.h"

/* Copy this rank's own block (its travelling rows, burst_plan_span) into `dst` (a packed buffer)
 * for sending. */
typedef burst_status_t (*burst_blocks_pack_fn)(void *arg, unsigned char *dst);

struct burst_blocks {
    struct burst_plan *plan;
    enum burst_sched_pattern pattern;
    enum burst_msg_kind kind;
    uint32_t seq;
    size_t (*bytes)(const void *arg, int64_t n); /* packed size of a block of n travelling rows */
    const void *bytes_arg;
    unsigned char *buf[4];
    int nbuf;
    int cur;  /* buffer of the current block; -1: this rank's own (the caller's tensors) */
    int rs;   /* buffer the round's inter-node send reads (locked until round end), or -1 */
    int in;   /* buffer receiving the next round's first block, or -1 */
    int next; /* buffer receiving the next step's block over the local ring, or -1 */
    int sent; /* buffer the local send of this step reads, or -1 */
    struct burst_xfer ls, lr, is, ir;
};

/* Bytes of the buffers burst_blocks_init allocates for blocks of up to block_bytes. */
uint64_t burst_blocks_scratch_bytes(const struct burst_plan *plan, size_t block_bytes);

/* Allocate the buffers (from sc) for blocks of up to plan->n_max tokens. */
burst_status_t burst_blocks_init(struct burst_blocks *b, struct burst_plan *plan,
                                 struct burst_scratch *sc, const char *who,
                                 enum burst_sched_pattern pattern, enum burst_msg_kind kind,
                                 uint32_t seq, size_t (*bytes)(const void *, int64_t),
                                 const void *bytes_arg);

/* Run the ring again (the next head group of the call) with the same buffers, whose sizes
 * bytes() must still cover, under tag sequence seq: nothing may be in flight. */
void burst_blocks_restart(struct burst_blocks *b, uint32_t seq);

/* Post step `step`'s transfers (schedule entry s); packs the own block first when it is sent. */
burst_status_t burst_blocks_post(struct burst_blocks *b, const struct burst_sched_step *s, int step,
                                 burst_blocks_pack_fn pack, void *pack_arg);

/* Buffer of the current block, or NULL when it is this rank's own. */
unsigned char *burst_blocks_current(const struct burst_blocks *b);

/* Let the posted receives move while the step computes (burst_xfer_start): after the step's
 * device work is queued, before the host waits for it. */
void burst_blocks_start(struct burst_blocks *b);

/* Wait for this step's local transfers (and, at a round's last step, the inter-node ones), then
 * make the next step's block current. Always waits every posted request, even after a failure;
 * returns the first failure. */
burst_status_t burst_blocks_wait(struct burst_blocks *b, const struct burst_sched_step *s);

/* Wait for whatever is still posted (after a failure); harmless when nothing is. */
void burst_blocks_drain(struct burst_blocks *b);

#endif /* BURST_RUNTIME_RING_BLOCKS_H */
