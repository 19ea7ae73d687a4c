/*
 * tools/sweep.h - burstrun's sweeps: a job run for every point of the lists given to --seq,
 * --dtype and --head-dim.
 *
 *   --seq 4096:65536:x2     4096, 8192, ..., 65536 (start:end:xF, each F times the last, F >= 2)
 *   --seq 1024:4096:+1024   1024, 2048, 3072, 4096 (start:end:+S, S >= 1)
 *   --seq 1000,3000         a list; a single value is a job of one point
 *   --dtype fp16,bf16       --head-dim 64,128
 *
 * Points run dtype by dtype, then head dim by head dim, then sequence length by sequence length
 * (the innermost), one row of the report each.
 */
#ifndef BURST_TOOLS_SWEEP_H
#define BURST_TOOLS_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#define SWEEP_MAX 64 /* values of one list */

/*
 * Parse a list or range of integers in lo..hi into out[SWEEP_MAX]; ranges (a:b:xF, a:b:+S) only
 * when `ranges`. Returns the count, or -1 with the reason in msg (not an integer, out of lo..hi,
 * an empty range, a step that does not grow, more than SWEEP_MAX values).
 */
int sweep_parse_ints(const char *val, int64_t lo, int64_t hi, int ranges, int64_t *out, char *msg,
                     size_t cap);

#endif /* BURST_TOOLS_SWEEP_H */
