/*
 * tools/job_size.h - a job's sizes, computed without overflow, and the memory it needs against
 * what this machine (and this process's cgroup) has. Checked by burstrun before anything is
 * allocated or any rank starts. Not part of the library.
 */
#ifndef BURST_TOOLS_JOB_SIZE_H
#define BURST_TOOLS_JOB_SIZE_H

#include <stddef.h>
#include <stdint.h>

struct job_params;

/* Elements of one tensor the library accepts: B * N * max(Hq, Hkv) * d (its plan's limit). */
#define JOB_MAX_ELEMS ((uint64_t)1 << 50)

/* *out = a * b; 0 when the product does not fit 64 bits (then *out is unchanged), else 1. */
int job_mul(uint64_t a, uint64_t b, uint64_t *out);

/* Bytes of the job's global tensors (Q, K, V, O, lse and, with a backward, dO, dQ, dK, dV), as
 * burstrun holds them. 0 with a message naming the flags in msg when a tensor has more than
 * JOB_MAX_ELEMS elements (every product below that bound fits 64 bits). */
uint64_t job_tensor_bytes(const struct job_params *p, char *msg, size_t cap);

/* Bytes this process may use: the smaller of the machine's memory (MemTotal) and the limit of
 * its cgroup (v2 memory.max of its group and the groups above; v1 memory.limit_in_bytes);
 * UINT64_MAX when neither can be read. */
uint64_t job_memory_limit(void);

/* 0 when the job's tensors (job_tensor_bytes) fit job_memory_limit(); else -1 with a message
 * in msg naming the sizes and the limit. */
int job_memory_check(const struct job_params *p, char *msg, size_t cap);

#endif /* BURST_TOOLS_JOB_SIZE_H */
