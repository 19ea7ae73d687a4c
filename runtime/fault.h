/*
 * runtime/fault.h - fault injection for tests (private). Compiled in, off unless the environment
 * variable BURST_FAULT is set when the first ring call of the process runs.
 *
 *   BURST_FAULT="kill:rank=R,phase=fwd|bwd,step=S[,call=C]"
 *
 * Rank R (its communicator rank) SIGKILLs its own process at the start of ring step S of its
 * C-th forward or backward call (C counts from 0 per rank and phase, default 0), before the
 * step's transfers are posted: the deterministic "rank dies at step S" of the failure tests.
 * step = -1 means after the last step, before the outputs are written (backward: before the
 * final hop of the accumulators). A malformed value is reported once on stderr and ignored.
 */
#ifndef BURST_RUNTIME_FAULT_H
#define BURST_RUNTIME_FAULT_H

/* Called by the ring engine at every step (and with step = -1 after the last one). */
void burst_fault_step(int rank, int is_bwd, int step);

/* Called at the start of every ring call: counts calls for `call=`. */
void burst_fault_call(int rank, int is_bwd);

#endif /* BURST_RUNTIME_FAULT_H */
