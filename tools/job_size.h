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

/* Bytes this process may use: the smallest of the machine's memory (MemTotal), the limit of
 * its cgroup (v2 memory.max of its group and the groups above; v1 memory.limit_in_bytes) and
 * its address-space limit (RLIMIT_AS, ulimit -v); UINT64_MAX when none can be read. */
uint64_t job_memory_limit(void);

/* The library's scratch in this machine's memory for the job's plans (the library's own
 * estimate, burst_plan_workspace_estimate: what each rank's calls may take), summed over the
 * ranks whose backend keeps it there: "cpu", and "auto" where it resolves to a backend of host
 * memory here (asked once per process); GPU backends keep it in device memory. `backends` is
 * burstrun's list (one entry per rank, cycling). 0 into *bytes_p, or -1 with a message in msg
 * when the library refuses the job's plan parameters. */
int job_scratch_bytes(const struct job_params *p, const char *backends, uint64_t *bytes_p,
                      char *msg, size_t cap);

/* 0 when the job's tensors (job_tensor_bytes) and `scratch` bytes of library scratch
 * (job_scratch_bytes) fit job_memory_limit(); else -1 with a message in msg naming the sizes
 * and the limit. */
int job_memory_check(const struct job_params *p, uint64_t scratch, char *msg, size_t cap);

#endif /* BURST_TOOLS_JOB_SIZE_H */
