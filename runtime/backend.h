/*
 * runtime/backend.h - the compute backend interface (private).
 *
 * A backend runs the LOCAL attention of one ring step and a few memory helpers. The ring engine
 * (runtime/ring_fwd.c, ring_bwd.c) never touches tensor elements itself: every byte it reads or
 * writes goes through these ops, so a GPU backend plugs in by providing them for device memory.
 *
 * Conventions for every op:
 *   - `be` is the instance returned by create(); ops are thread-safe (ranks of one process
 *     share an instance and call concurrently).
 *   - burst_tensor views are [B, n, H, d] with stride[3] == 1 (validated by the caller: the
 *     engine's burst_step_check, runtime/step_check.h, for the step ops); fp32
 *     scratch buffers (running O, accumulators) are contiguous [B, n, H, d]; per-row fp32
 *     arrays (lse, D) are contiguous [B, H, n].
 *   - ops may run asynchronously on a device; stream.sync waits for all work issued by the calling
 *     thread. Ops issued by one thread run in the order it issued them (cuda: one stream per
 *     thread; vulkan and cpu: synchronous), so the engine synchronises only before work from
 *     outside that order (a transfer, the host) touches the memory. The cpu backend is
 *     synchronous.
 * The table is in layers, each a sub-struct of struct burst_backend_ops, so a backend fills and
 * the engine calls one concern at a time:
 *   core   (struct burst_backend_core)   lifecycle (create, destroy), features, threads, probe;
 *   mem    (struct burst_backend_mem)    allocation, host access and staging of its memory;
 *   elem   (struct burst_backend_elem)   elementwise helpers on that memory (copy, fill,
 *                                        accumulate);
 *   attn   (struct burst_backend_attn)   the attention kernels: ring steps, one-step calls, decode;
 *   stream (struct burst_backend_stream) ordering (sync) and the device timeline;
 * and, beside them, devcopy: the device copies the transports use (transport/tp_devops.h).
 * Members are named through their layer (ops->mem.alloc, ops->attn.fwd_step). Each layer's
 * comment says which of its members are optional; optional members may be NULL. The table
 * starts with its own size: the engine tests every optional member with BURST_OPS_HAS (which
 * takes the layered name, BURST_OPS_HAS(ops, attn.decode_step)) before it uses it. The table is
 * private to the library (every backend is built with it), so its members may be reordered.
 */
#ifndef BURST_RUNTIME_BACKEND_H
#define BURST_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "burst/context.h"
#include "burst/tensor.h"
#include "posmap.h"
#include "strbuf.h"
#include "tp_devops.h"

/* The e4m3 operands of an fp8 forward step, in backend memory (layouts: runtime/fp8.h). */
struct burst_fp8_step {
    const unsigned char *q;  /* quantized Q: e4m3 rows, then the scales (burst_fp8_q_bytes) */
    const unsigned char *kv; /* the K/V block (burst_fp8_kv_layout of the step's k shape) */
};

/* One forward step: attention of q against the block (k, v), merged into (o_acc, lse_acc). */
struct burst_fwd_args {
    const struct burst_tensor *q; /* [B, nq, Hq, d] */
    const struct burst_tensor *k; /* [B, nk, Hkv, d] */
    const struct burst_tensor *v; /* [B, nk, Hkv, d] */
    struct burst_posmap qpos;     /* positions of q rows */
    struct burst_posmap kpos;     /* positions of k rows */
    struct burst_mask mask;
    float scale; /* softmax scale tau */
    /* Logit soft-capping: > 0 replaces each scaled score s = tau q.k by softcap * tanh(s /
     * softcap) before the softmax; 0 = off. Only where the backend's features hold
     * BURST_BE_SOFTCAP (the engine refuses the plan elsewhere). */
    float softcap;
    /* Running results, updated in place with the log-sum-exp merge of ALGORITHM.md section 1.
     * Initialised by the engine to o_acc = 0 and lse_acc = -inf, or the row's sink logit where
     * the call has sinks (so a kernel must not take lse_acc = -inf for "first block"). Rows with
     * no allowed key in this block must be left bit-for-bit unchanged. */
    float *o_acc;   /* [B, nq, Hq, d] fp32 contiguous */
    float *lse_acc; /* [B, Hq, nq] fp32 contiguous */
    /* Optional (backends with BURST_BE_FP8): the step's e4m3 operands (runtime/fp8.h), for a
     * plan with fp8_forward; q, k and v then give the step's shapes and the output dtype only
     * (their data are not read). NULL: the products take q, k, v. */
    const struct burst_fp8_step *fp8;
};

/* One backward step: gradients of the pair (q rows, k/v rows), ADDED into the accumulators. */
struct burst_bwd_args {
    const struct burst_tensor *q;    /* [B, nq, Hq, d] */
    const struct burst_tensor *k;    /* [B, nk, Hkv, d] */
    const struct burst_tensor *v;    /* [B, nk, Hkv, d] */
    const struct burst_tensor *dout; /* [B, nq, Hq, d] */
    const float *lse;                /* [B, Hq, nq] final global lse */
    const float *delta;              /* [B, Hq, nq] D = rowsum(dO * O) */
    struct burst_posmap qpos;
    struct burst_posmap kpos;
    struct burst_mask mask;
    float scale;
    float softcap; /* as in burst_fwd_args; the gradient goes through the cap */
    float *dq;     /* [B, nq, Hq, d] fp32, += tau * dS K */
    float *dk;     /* [B, nk, Hkv, d] fp32, += tau * dS^T Q (summed over the heads of a group) */
    float *dv;     /* [B, nk, Hkv, d] fp32, += P^T dO (summed over the heads of a group) */
    /* the plan's deterministic flag: nonzero forbids float atomics (bitwise-identical reruns);
     * zero lets a backend add into the accumulators in any order */
    int deterministic;
};

/*
 * One decode step over a paged key/value cache (runtime KV cache): attention of the t new
 * queries of ONE sequence against that sequence's keys held on this rank, stored in fixed-size
 * blocks of a pool, merged into (o_acc, lse_acc) exactly as fwd_step merges (same log-sum-exp
 * convention; rows with no allowed key untouched). Key j of the sequence (its local index on
 * this rank, 0 <= j < nkeys) lives in block blocks[j / block_len], row j % block_len.
 * Masking is by local index: keys j < tail are cached tokens that every query sees; keys
 * j >= tail are the new tokens themselves, appended in order, and query i sees key j only when
 * j - tail <= i (causal among the new tokens). tail == nkeys: none of the new tokens is here.
 * This equals fwd_step with qpos = {tail + i}, kpos = {j} and a causal mask, which is how the
 * engine runs it on a backend without decode_step (one fwd_step per block).
 */
struct burst_decode_args {
    const struct burst_tensor *q; /* [1, t, Hq, d] in backend memory; t >= 1 */
    /* the pools: [pool_blocks, block_len, Hkv, d] contiguous, in q's dtype, backend memory */
    const void *k_pool;
    const void *v_pool;
    int64_t block_len; /* tokens per block (>= 1) */
    int hkv;           /* Hkv: key/value heads (Hq is a multiple) */
    /* pool indices of the sequence's blocks, in key order: ceil(nkeys / block_len) entries, the
     * same table in backend memory (blocks) and in host memory (blocks_host) */
    const int32_t *blocks;
    const int32_t *blocks_host;
    int64_t nkeys;  /* keys of the sequence on this rank (>= 0) */
    int64_t tail;   /* first key that is one of the new tokens (<= nkeys) */
    float scale;    /* softmax scale tau */
    float softcap;  /* as in burst_fwd_args (only with BURST_BE_SOFTCAP) */
    float *o_acc;   /* [1, t, Hq, d] fp32 contiguous, running output */
    float *lse_acc; /* [1, Hq, t] fp32 contiguous, running log-sum-exp */
    /*
     * Optional, for a call whose keys are all the keys its queries attend (a cache on one rank;
     * nkeys >= 1):
     * o_out not NULL asks for the result itself instead of a merge into (o_acc, lse_acc), which
     * are then unused and may be NULL. o_out [1, t, Hq, d] in q's dtype with any strides,
     * lse_out [1, Hq, t] fp32 contiguous (NULL: not written); a row with no allowed key gets
     * O = 0 and lse = -inf; o_out and lse_out overlap neither q nor the pools (the kernels
     * read those while the outputs are written). A backend that does not write results
     * directly returns BURST_ERR_UNSUPPORTED for such a call, having queued nothing and set no
     * message.
     */
    const struct burst_tensor *o_out;
    float *lse_out;
};

/* burst_backend_core.features */
#define BURST_BE_DOCS 1u    /* masks with documents (burst_mask.docs) */
#define BURST_BE_SOFTCAP 2u /* soft-capped scores (burst_fwd_args.softcap) */
#define BURST_BE_FP8 4u     /* e4m3 products (burst_fwd_args.fp8; attn.fp8_quant_q, _kv) */

/*
 * core: what the backend is, its instance, and what it says about devices without one.
 * Required: create, destroy. Optional: num_threads (NULL: one thread), probe (NULL: burst_probe
 * names the backend only).
 */
struct burst_backend_core {
    /* What the step kernels handle beyond plain masked attention (BURST_BE_* bits): a plan
     * needing a feature that a rank's backend lacks is refused, naming backend and feature. */
    unsigned features;
    /* Optional: the features of an instance, where they depend on its device (cuda: e4m3
     * products from Hopper on); NULL: features. burst_backend_features asks. */
    unsigned (*instance_features)(void *be);
    /* Create an instance, or BURST_ERR_NO_DEVICE (with a message) if unusable here. */
    burst_status_t (*create)(const struct burst_context_params *params, void **be_p);
    void (*destroy)(void *be);
    int (*num_threads)(void *be);
    /*
     * Describe this backend for burst_probe() without creating a context: its devices, their
     * capabilities and the tile configuration create() would choose. Appends to `out`: as text,
     * lines indented by two spaces; as JSON, one object
     *   {"backend": name, "available": bool, "reason": str (only when unavailable),
     *    "devices": [{"index": i, "name": str, ..., "tiles": {...}}, ...]}.
     * Never fails: an unusable backend says why in "reason".
     */
    void (*probe)(const struct burst_context_params *params, struct burst_sb *out, int json);
};

/*
 * memory: what the backend computes on, and how the host reaches it.
 * Required: alloc, free. Required when transfers are staged (device_memory set, or
 * stage_transfers returning 1): memcpy, host_alloc, host_free. Optional: alloc_scratch,
 * check_memory, stage_transfers; device_memory is a flag (0 for host-addressable memory).
 */
struct burst_backend_mem {
    /* Memory the backend computes on (host memory for cpu). NULL on exhaustion. Zeroed. */
    void *(*alloc)(void *be, size_t bytes);
    void (*free)(void *be, void *ptr); /* NULL accepted */
    /*
     * Optional: memory that only this backend's ops and the transports' device copies touch,
     * never the host: the plan's scratch (running accumulators, travelling blocks). Zeroed;
     * freed with free(); NULL on exhaustion. NULL member: alloc(). Vulkan gives device-local
     * memory here that a cuda rank can import on this GPU (vk_share.c; its host-visible
     * memory cannot be exported), so ring blocks between the two go device to device.
     */
    void *(*alloc_scratch)(void *be, size_t bytes);
    /*
     * Backends whose memory the host cannot address (cuda: cudaMalloc) set device_memory = 1
     * and provide the three ops below; the engine then stages the travelling blocks through
     * host memory for transports that need host buffers (runtime/ring_blocks.c). Backends whose
     * alloc() returns host-addressable memory (cpu; vulkan's mapped buffers) leave them NULL.
     */
    int device_memory;
    /* Copy bytes between any two of: backend memory, host memory. Synchronous. */
    burst_status_t (*memcpy)(void *be, void *dst, const void *src, size_t bytes);
    /* Page-locked host memory for staging (fast device<->host copies). NULL on exhaustion. */
    void *(*host_alloc)(void *be, size_t bytes);
    void (*host_free)(void *be, void *ptr);
    /*
     * Optional (device_memory backends): BURST_OK when the device can address ptr, the first
     * element of the caller's tensor `name`; otherwise an INVALID_ARG error naming `who`, the
     * tensor and what memory it is. The engine asks before any transfer of a call, so a tensor
     * in plain host memory fails the call on its rank cleanly instead of faulting a kernel.
     */
    burst_status_t (*check_memory)(void *be, const char *who, const char *name, const void *ptr);
    /*
     * Optional (host-addressable backends): 1 when ring transfers of the memory alloc() returns
     * must be staged through host_alloc() buffers with memcpy(), both of which the backend then
     * provides, as it does for device_memory backends. Vulkan's device-local buffers mapped
     * through a GPU's PCIe BAR are such memory: the kernel's cross-process copy
     * (process_vm_readv, used by libfabric shm) fails on them with EIO, and even in one process
     * the CPU reads them uncached (tens of MB/s), so an in-process transport's memcpy from them
     * is slow. Its memcpy() moves the bytes with the device's copy engine instead. in_process:
     * whether the plan's transport links ranks of one process (which can read such memory,
     * slowly) or processes (which cannot).
     */
    int (*stage_transfers)(void *be, int in_process);
};

/*
 * elementwise helpers on the backend's memory: conversions, initialisation and accumulation of
 * the engine's scratch and the caller's tensors. All required.
 */
struct burst_backend_elem {
    /* dst = src elementwise, converting dtypes; equal shapes; any strides (stride[3] == 1). */
    burst_status_t (*copy)(void *be, const struct burst_tensor *dst,
                           const struct burst_tensor *src);
    /* dst[i] = value for i < count. */
    burst_status_t (*fill)(void *be, float *dst, size_t count, float value);
    /* dst[i] += (float)src[i] for i < count; src has dtype src_dtype. */
    burst_status_t (*accumulate)(void *be, float *dst, const void *src, burst_dtype_t src_dtype,
                                 size_t count);
};

/*
 * attention: the steps of the ring, and the one-rank calls in one step.
 * Required: fwd_step, bwd_delta, bwd_step. Optional (faster paths the engine falls back from):
 * fwd_final, bwd_final, decode_step.
 */
struct burst_backend_attn {
    burst_status_t (*fwd_step)(void *be, const struct burst_fwd_args *args);
    /* delta[b, h, i] = sum_d dout[b, i, h, d] * o[b, i, h, d] (fp32). */
    burst_status_t (*bwd_delta)(void *be, const struct burst_tensor *dout,
                                const struct burst_tensor *o, float *delta);
    burst_status_t (*bwd_step)(void *be, const struct burst_bwd_args *args);
    /*
     * Optional: the forward of a one-rank call in one step, with no accumulators: attention of
     * args->q against all of (k, v), written normalised straight to o (the caller's tensor,
     * [B, nq, Hq, d] in q's dtype, any strides) and lse ([B, Hq, nq] fp32); rows with no allowed
     * key get O = 0 and lse = -inf. args->o_acc and lse_acc are unused. Bitwise what fwd_step
     * into fresh accumulators (o_acc = 0, lse_acc = -inf) and copy() to o and lse give. Returns
     * BURST_ERR_UNSUPPORTED, having queued nothing and set no error message, for a case it does
     * not cover (the engine then takes the accumulating path).
     */
    burst_status_t (*fwd_final)(void *be, const struct burst_fwd_args *args,
                                const struct burst_tensor *o, float *lse);
    /*
     * Optional: the backward of a one-rank call in one step: dQ added into args->dq (fp32, as
     * bwd_step), dK and dV written straight to dk and dv (the caller's tensors, [B, nk, Hkv, d]
     * in q's dtype, any strides; args->dk, dv are NULL), zero on keys no query sees. Bitwise
     * what bwd_step into zeroed accumulators and copy() give. BURST_ERR_UNSUPPORTED, having
     * queued nothing and set no message, for a case it does not cover.
     */
    burst_status_t (*bwd_final)(void *be, const struct burst_bwd_args *args,
                                const struct burst_tensor *dk, const struct burst_tensor *dv);
    /*
     * Optional: one decode step over a paged cache (struct burst_decode_args above), in one
     * launch however many blocks the sequence has. BURST_ERR_UNSUPPORTED, having queued
     * nothing and set no message, for a case it does not cover; the engine then runs one
     * fwd_step per block.
     */
    burst_status_t (*decode_step)(void *be, const struct burst_decode_args *args);
    /*
     * Required with BURST_BE_FP8: the quantizers of the fp8 forward (runtime/fp8.h: the
     * scales, layouts and rounding, which burst_fp8_quant_q_host and _kv_host implement on the
     * host). fp8_quant_q writes q's e4m3 rows and scales to dst (burst_fp8_q_bytes of its
     * shape); fp8_quant_kv writes the K/V block of k, v (equal shapes) to dst
     * (burst_fp8_kv_layout). Inputs fp16 or bf16 with any strides (stride[3] == 1); dst
     * backend memory. Results equal the host quantizers' bit for bit.
     */
    burst_status_t (*fp8_quant_q)(void *be, const struct burst_tensor *q, void *dst);
    burst_status_t (*fp8_quant_kv)(void *be, const struct burst_tensor *k,
                                   const struct burst_tensor *v, void *dst);
};

/*
 * stream and timing: the order of the calling thread's work, and a device timeline.
 * All optional: sync is NULL when ops are synchronous; time_mark NULL means no device timeline
 * (the engine times steps on the host), and with time_mark set, time_elapsed and time_release
 * are required.
 */
struct burst_backend_stream {
    /* Wait for the calling thread's outstanding work (NULL when ops are synchronous). */
    burst_status_t (*sync)(void *be);
    /*
     * Optional: a device timeline (cuda: timing events), for the engine's step clock without a
     * host sync per step (runtime/timeline.h). time_mark records a marker after the work the
     * calling thread has queued so far; time_elapsed gives the seconds between two markers once
     * both have passed (after sync()); time_release frees one (NULL accepted).
     */
    burst_status_t (*time_mark)(void *be, void **mark_p);
    burst_status_t (*time_elapsed)(void *be, void *from, void *to, double *seconds_p);
    void (*time_release)(void *be, void *mark);
};

/* The whole table: the backend's name and its layers. */
struct burst_backend_ops {
    size_t size;      /* sizeof(struct burst_backend_ops) */
    const char *name; /* "cpu" */
    struct burst_backend_core core;
    struct burst_backend_mem mem;
    struct burst_backend_elem elem;
    struct burst_backend_attn attn;
    struct burst_backend_stream stream;
    /* ---- transfers: device copies, IPC, sharing for the transports (tp_devops.h) ---- */
    /*
     * Optional (device_memory backends): device-to-device copies between ranks of one process
     * and, with its ipc_ members, between rank processes of one host (transport/tp_devops.h,
     * struct burst_tp_devops). When every rank of a plan runs this backend and the transport moves
     * device memory itself (the in-process one; the IPC layer between processes of a host), the
     * travelling blocks go device to device with these instead of being staged through host
     * memory (runtime/ring_xfer.c). A host-addressable backend whose scratch another backend of
     * the process can import (vulkan: the share_export members, no copy) sets it too: a cuda
     * rank on the same GPU (or one peer to peer) then moves their blocks device to device
     * (transport.h, share_*).
     */
    const struct burst_tp_devops *devcopy;
};

/* Does ops provide the optional member m, named through its layer (core.probe, mem.memcpy,
 * attn.decode_step)? Its table is recent enough to hold m (its size covers m) and m is set (a
 * function, a table, or a nonzero flag). */
#define BURST_OPS_HAS(ops, m)                                                                      \
    ((ops)->size >= offsetof(struct burst_backend_ops, m) + sizeof((ops)->m) && (ops)->m)

/* The first member that ops must have and lacks, by its layered name ("core.create",
 * "mem.memcpy", ...; "size" or "name" for the table itself), or NULL when the table is whole:
 * every backend has the required members of core, mem, elem and attn; one whose transfers are
 * staged (mem.device_memory, mem.stage_transfers) has mem.memcpy, mem.host_alloc and
 * mem.host_free, which the engine then calls without asking; one with stream.time_mark has
 * stream.time_elapsed and stream.time_release; one that may have BURST_BE_FP8 (in
 * core.features, or with core.instance_features) has attn.fp8_quant_q and attn.fp8_quant_kv.
 * burst_context_create refuses a backend whose table is not whole (BURST_ERR_INTERNAL naming
 * backend and member). */
const char *burst_backend_ops_missing(const struct burst_backend_ops *ops);

/* The BURST_BE_* features of instance be of ops (core.instance_features, else core.features). */
static inline unsigned burst_backend_features(const struct burst_backend_ops *ops, void *be)
{
    return BURST_OPS_HAS(ops, core.instance_features) ? ops->core.instance_features(be)
                                                      : ops->core.features;
}

/* Registered backends in priority order ("auto" takes the first whose create() succeeds). */
extern const struct burst_backend_ops burst_cpu_backend_ops;
#ifdef BURST_HAVE_CUDA
extern const struct burst_backend_ops burst_cuda_backend_ops; /* cuda/ */
#endif
#ifdef BURST_HAVE_VULKAN
extern const struct burst_backend_ops burst_vk_backend_ops; /* runtime/vulkan/ */
#endif

#endif /* BURST_RUNTIME_BACKEND_H */
