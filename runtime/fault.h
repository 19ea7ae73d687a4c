/*
 * runtime/fault.h - fault injection for tests (private). Compiled in, off unless the environment
 * variable BURST_FAULT is set when the process first reaches a hook below (a ring call, a
 * message, a backend allocation); tests of one process may also set it with burst_fault_set().
 *
 *   BURST_FAULT="SPEC[;SPEC...]"      at most 8 specs, each "ACTION:key=value,..."
 *
 * Ring faults: rank R (its communicator rank) acts at the start of ring step S of head group K
 * (plan.h workspace_limit; default 0, the only group of an unsplit call) of its C-th forward or
 * backward call (C counts from 0 per rank and phase, default 0), before the step's transfers
 * are posted. step = -1 means after the last step of the last group, before its outputs are
 * written (backward: before the final hop of the accumulators); group is then ignored. A
 * one-rank forward whose kernel writes o and lse itself (fwd_final) has one step and no groups:
 * step 0 acts before that kernel, step = -1 after it.
 *
 *   kill:rank=R,phase=fwd|bwd,step=S[,call=C][,group=K]
 *       SIGKILL its own process: the deterministic "rank dies at step S" of the failure tests.
 *       Survivors: BURST_ERR_PEER_FAILED (or BURST_ERR_TIMEOUT) naming rank R.
 *   drop:rank=R,phase=fwd|bwd,step=S[,call=C][,group=K]
 *       The first message R sends in that step is never sent (its send completes at once).
 *       The receiver: BURST_ERR_TIMEOUT naming rank R after the communicator's timeout
 *       (BURST_TIMEOUT_MS); every other rank BURST_ERR_PEER_FAILED when the receiver aborts.
 *   truncate:rank=R,phase=fwd|bwd,step=S[,call=C][,group=K]
 *       That message is sent with half of its bytes (a 1-byte message with 0). The receiver
 *       (and on the in-process transport the sender): BURST_ERR_TRANSPORT naming the peer and
 *       the length(s); every other rank BURST_ERR_PEER_FAILED, or BURST_ERR_TIMEOUT where it
 *       was itself waiting on a rank that was waiting (processes).
 *   duplicate:rank=R,phase=fwd|bwd,step=S[,call=C][,group=K]
 *       That message is sent twice (the copy from a private buffer). Tags are unique per call,
 *       so the copy is never received: results stay correct (in-process, libfabric tcp); the
 *       copy's request is released when the communicator is destroyed (no leak). libfabric shm
 *       holds the connection behind a large unreceived message: there the ring stops with
 *       BURST_ERR_TIMEOUT after the timeout instead (a defined error, not a hang). Blocks that
 *       travel device to device (cuda threads, ring_xfer.h) are not duplicated: the fault is
 *       ignored there (results correct).
 *   delay:rank=R,phase=fwd|bwd,step=S,ms=M[,call=C][,group=K]
 *       That message is sent M ms late (the sending rank sleeps): results stay correct.
 * A step in which R sends nothing leaves a message fault unused.
 *
 *   slow:rank=R,ms=M[,phase=fwd|bwd]
 *       R sleeps M ms at the start of every ring step (of the phase, or of both) and, unless
 *       phase=bwd, before each burst_decode's local attention: a slow rank. Results stay
 *       correct; peers wait (within their timeout).
 *
 *   join:rank=R,ms=M
 *       R sleeps M ms in burst_comm_create over libfabric once its endpoints exist (its shm
 *       segment made), before the ranks exchange their addresses: a rank that joins late, so
 *       that tests can kill the launcher while the others wait for it.
 *
 *   oom:alloc=N[,count=K]
 *       Device out of memory: backend allocations of this process (burst_context_alloc, ring
 *       scratch, staging buffers) are counted from 0, and numbers N..N+K-1 (K default 1) fail.
 *       The call that allocates returns BURST_ERR_NO_MEMORY (its ring peers
 *       BURST_ERR_PEER_FAILED) and frees what it had allocated.
 *
 * A malformed value fails the creates that check it (burst_fault_env_check: contexts,
 * communicators, burst_settings_check) naming BURST_FAULT; the hooks never act on one.
 */
#ifndef BURST_RUNTIME_FAULT_H
#define BURST_RUNTIME_FAULT_H

#include <stddef.h>

#include "burst/status.h"

/* Called by the ring engine at every step of every head group (and with step = -1 after the
 * last group's last one): kill, slow, and arming a message fault for the calling thread's next
 * send. */
void burst_fault_step(int rank, int is_bwd, int group, int step);

/* Called by a fabric communicator's create once its endpoints exist (join:). */
void burst_fault_join(int rank);

/* Called by burst_decode before the local attention of a step: slow: of rank, but phase=bwd. */
void burst_fault_decode(int rank);

/* Called at the start of every ring call: counts calls for `call=`, disarms message faults. */
void burst_fault_call(int rank, int is_bwd);

/* What the communicator does to the message that `rank` is sending now (transport/tp_comm.c). */
enum burst_fault_msg {
    BURST_FAULT_MSG_NONE = 0,
    BURST_FAULT_MSG_DROP,
    BURST_FAULT_MSG_TRUNCATE,
    BURST_FAULT_MSG_DUPLICATE,
    BURST_FAULT_MSG_DELAY, /* *ms_p: how long */
};
enum burst_fault_msg burst_fault_send(int rank, int *ms_p);

/* Nonzero when the backend allocation being made now must fail (oom:). Thread-safe. */
int burst_fault_alloc(void);

/* Tests in one process: replace the specs (NULL or "" = none) and reset every counter, as if
 * BURST_FAULT were `spec`. 0, or -1 when spec is malformed (then no fault is active, and a
 * warning of the logger names it). Not thread-safe: call it while no ring call is running. */
int burst_fault_set(const char *spec);

/* BURST_FAULT as the environment has it now: BURST_OK when unset, empty or well formed, else
 * BURST_ERR_INVALID_ARG naming who, the variable and its value (runtime/settings.h's rule). */
burst_status_t burst_fault_env_check(const char *who);

#endif /* BURST_RUNTIME_FAULT_H */
