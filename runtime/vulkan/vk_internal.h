/*
 * runtime/vulkan/vk_internal.h - shared declarations of the Vulkan backend (private).
 *
 * The backend runs the local attention of a ring step as SPIR-V compute shaders (shaders/) on
 * any Vulkan 1.2 device with buffer device addresses and 64-bit integers in shaders (lavapipe,
 * AMD, Intel, NVIDIA). One file per concept:
 *   vk_device.c    instance, device selection by index or name, the compute queue, VkResult ->
 *                  burst_status_t (the one place native errors are converted)
 *   vk_caps.c      what a device offers (limits, types, matrix units, heaps) and the tile rule
 *   vk_memory.c    buffers: alloc/free of host-addressable memory, the pointer registry
 *   vk_stream.c    per-call command buffers, staging of caller host memory, submit + wait,
 *                  timestamp queries
 *   vk_pipeline.c  compute pipelines cached per (kernel, head dim, tiles, dtypes)
 *   vk_attn.c      fwd_step, bwd_delta, bwd_step: argument checks, parameter blocks, dispatch
 *   vk_elem.c      copy / fill / accumulate: argument checks, the choice of path per call
 *                  (shaders or the calling thread), the cpu loops
 *   vk_elem_gpu.c  their shader path: parameter block, staging of caller memory, dispatch
 *   vk_backend.c   create / destroy / probe and the ops table
 *
 * Memory model: alloc() returns persistently mapped host-visible memory (device-local too where
 * the device has such memory: unified memory, lavapipe, resizable BAR), so the ring engine and
 * the transports read and write block buffers with the CPU as on the cpu backend
 * (ops->device_memory = 0). Every buffer is registered by its mapped range; a kernel argument
 * whose pointer lies in a registered buffer is passed to the shader by its device address,
 * any other pointer (plain caller memory) is copied into the calling stream's staging buffer
 * before the dispatch and, for outputs, back after it. On a GPU that mapping of device-local
 * memory goes through the PCIe BAR and is uncached for the CPU, so copy / fill / accumulate,
 * which the engine calls at every ring step, run as shaders there (vk_elem.c says when).
 *
 * Ops are synchronous (sync = NULL): each records one command buffer, submits it and waits for
 * its fence. Threads (ranks) calling concurrently each take their own stream; only
 * vkQueueSubmit is serialised.
 */
#ifndef BURST_VK_INTERNAL_H
#define BURST_VK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <vulkan/vulkan.h>

#include "backend.h"
#include "strbuf.h"

#define BURST_VK_MAX_STREAMS 64 /* concurrent calls (ranks of one process) */
#define BURST_VK_MAX_DEVICES 16
#define BURST_VK_MAX_HEAD_DIM 256
#define BURST_VK_NUM_DCLASS 3 /* tile classes by head dim: <= 64, <= 128, <= 256 */

/* ---- device capabilities (vk_caps.c) ------------------------------------------------------- */

struct burst_vk_coopmat_shape {
    uint32_t m, n, k;
    int a_type, c_type; /* VkComponentTypeNV */
};

struct burst_vk_caps {
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    uint32_t vendor_id, device_id, api_version, driver_version;
    uint8_t cache_uuid[VK_UUID_SIZE];  /* pipelineCacheUUID: changes with the driver build */
    uint8_t device_uuid[VK_UUID_SIZE]; /* VkPhysicalDeviceIDProperties: the GPU, as cuda names it */
    VkPhysicalDeviceType type;
    uint32_t max_shared;      /* maxComputeSharedMemorySize (bytes) */
    uint32_t max_invocations; /* maxComputeWorkGroupInvocations */
    uint32_t max_size_x;      /* maxComputeWorkGroupSize[0] (every kernel's workgroup is 1-D) */
    uint32_t max_groups[3];   /* maxComputeWorkGroupCount */
    uint32_t subgroup, subgroup_min, subgroup_max;
    int subgroup_shuffle; /* VK_SUBGROUP_FEATURE_SHUFFLE_BIT in compute */
    int subgroup_vote;    /* VK_SUBGROUP_FEATURE_VOTE_BIT in compute */
    int fp16, int8, int64, bf16, bda, timestamps;
    float timestamp_period; /* ns per tick */
    int coopmat_nv;         /* VK_NV_cooperative_matrix */
    int coopmat_khr;        /* VK_KHR_cooperative_matrix */
    int khr_f16;            /* ... listing 16x16x16 fp16 x fp16 -> fp32 at subgroup scope */
    int coopmat2;           /* VK_NV_cooperative_matrix2 */
    int cm2_features;       /* ... with every feature the *_cm2 kernels use (workgroup
                             * scope, flexible dimensions, reductions, conversions,
                             * per-element operations, tensor addressing) */
    uint32_t cm2_wg[4];     /* workgroup sizes it lists for fp16 x fp16 -> fp32 workgroup-scope
                             * matrices of granularity dividing 16 (0: none) */
    char cm2_shapes[128];   /* every fp16 x fp16 -> fp32 workgroup-scope entry it lists, as
                             * "MGxNGxKG@invocations" (granularities), for the probe */
    uint32_t cm2_max_wg;    /* cooperativeMatrixWorkgroupScopeMaxWorkgroupSize */
    uint32_t cm2_reserved;  /* cooperativeMatrixWorkgroupScopeReservedSharedMemory (bytes) */
    int atomic_add;         /* VK_EXT_shader_atomic_float's shaderBufferFloat32AtomicAdd */
    uint32_t sm_count;      /* VK_NV_shader_sm_builtins' shaderSMCount (0: not reported) */
    int ncoop;
    struct burst_vk_coopmat_shape coop[16];
    uint32_t nheaps;
    VkDeviceSize heap_size[VK_MAX_MEMORY_HEAPS];
    int heap_device_local[VK_MAX_MEMORY_HEAPS];
    int host_visible_device_local; /* a DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT type exists */
    uint64_t max_alloc;            /* maxMemoryAllocationSize */
};

/* Kernels, with the pipeline cache's name for each. The attention kernels (below
 * BURST_VK_NUM_KERNELS) have tiles (struct burst_vk_tiles); the elementwise ones after them do
 * not. */
enum burst_vk_kernel {
    BURST_VK_FWD = 0, /* scalar forward: one invocation a query row (the last resort) */
    BURST_VK_DQ,      /* scalar dQ (likewise) */
    BURST_VK_DKV,     /* scalar dK / dV (likewise) */
    BURST_VK_DELTA,
    BURST_VK_FWD_CM,  /* cooperative matrix (NV) forward */
    BURST_VK_DQ_CM,   /* cooperative matrix (NV) dQ */
    BURST_VK_DKV_CM,  /* cooperative matrix (NV) dK / dV */
    BURST_VK_FWD_RT,  /* register-tiled forward (any device; tile t = its chunk depth DC) */
    BURST_VK_DQ_RT,   /* register-tiled dQ (likewise) */
    BURST_VK_DKV_RT,  /* register-tiled dK / dV (likewise) */
    BURST_VK_DKVQ_RT, /* register-tiled dK / dV adding dQ by float atomics (not deterministic) */
    BURST_VK_FWD_CMQ, /* cooperative matrix (NV) forward, softmax in registers (vk_cmq.c) */
    BURST_VK_DQ_CMQ,  /* cooperative matrix (NV) dQ, dS in registers (vk_cmq.c) */
    BURST_VK_DKV_CMQ, /* cooperative matrix (NV) dK / dV, P^T and dS^T in registers */
    BURST_VK_FWD_CM2, /* workgroup-scope cooperative matrix forward (NV2; tile t = invocations) */
    BURST_VK_DQ_CM2,  /* workgroup-scope cooperative matrix dQ (likewise) */
    BURST_VK_DKV_CM2, /* workgroup-scope cooperative matrix dK / dV (likewise) */
    BURST_VK_NUM_KERNELS,
    BURST_VK_COPY = BURST_VK_NUM_KERNELS, /* elementwise: copy, fill, accumulate */
    BURST_VK_FILL,
    BURST_VK_ACC,
    BURST_VK_CM_LAYOUT, /* the accumulator-layout check of fwd_cmq (vk_cmq.c) */
    BURST_VK_AMAX,      /* the largest magnitude of a view (bf16 / fp32 inputs of *_cmq) */
    BURST_VK_CVT,       /* a bf16 view scaled into packed fp16, fp32 into fp16 halves */
    BURST_VK_NUM_ALL_KERNELS
};
extern const char *const burst_vk_kernel_names[BURST_VK_NUM_ALL_KERNELS];

/* Tiles of one kernel: T threads per row, BR rows per workgroup (workgroup = BR * T
 * invocations), BC rows of the tile staged in shared memory. */
struct burst_vk_tile {
    int t, br, bc;
    int ld; /* fwd_cmq: subgroups that only load K/V tiles, into two buffers (0: every subgroup
             * loads, one buffer, barriers between tiles); 0 for every other kernel */
};

/* Tile choice of a device: [kernel][head-dim class]. */
struct burst_vk_tiles {
    struct burst_vk_tile k[BURST_VK_NUM_KERNELS][BURST_VK_NUM_DCLASS];
};

/* Where copy / fill / accumulate run (BURST_VK_ELEM; vk_elem.c). */
enum burst_vk_elem_mode {
    BURST_VK_ELEM_BAD = -1, /* an unknown value: create() fails naming it */
    BURST_VK_ELEM_AUTO = 0, /* shaders on a GPU, the calling thread on a cpu device */
    BURST_VK_ELEM_GPU,      /* shaders wherever the backend owns an argument */
    BURST_VK_ELEM_CPU,      /* always the calling thread (the path before the shaders) */
};

/* Switches read once at create (and by the probe). */
struct burst_vk_env {
    int coopmat;          /* BURST_VK_COOPMAT: 0 = never the cooperative-matrix path */
    int coopmat_khr;      /* BURST_VK_COOPMAT_KHR: 0 = the subgroup-scope cooperative-matrix
                           * kernels built against VK_NV_cooperative_matrix even where the
                           * device offers VK_KHR_cooperative_matrix */
    int cm2;              /* BURST_VK_CM2: 0 = never the workgroup-scope kernels (*_cm2) */
    int rt;               /* BURST_VK_RT: 0 = never the register-tiled kernels (fwd_rt, dq_rt,
                           * dkv_rt, dkvq_rt): the scalar ones (fwd, dq, dkv) instead */
    int rt_tile[3];       /* BURST_VK_RT_TILE=br,bc,dc: their tile, where valid (else the rule) */
    int atomic;           /* BURST_VK_ATOMIC: 0 = never add dQ by float atomics (dkvq_rt) */
    int profile;          /* BURST_VK_PROFILE: 1 = timestamp every dispatch, print at destroy */
    int cm_rows;          /* BURST_VK_CM_ROWS: query rows per workgroup of the cooperative-
                           * matrix forward (16, 32, 64 or 128; 0 = the rule's 64) */
    int cmq;              /* BURST_VK_CMQ: 0 = never the kernels that use the accumulators'
                           * fragment layout (fwd_cmq, dq_cmq, dkv_cmq; vk_cmq.c) */
    int cmq_tile[3];      /* BURST_VK_CMQ_TILE=br,bc[,ld]: fwd_cmq's tile (and loading
                           * subgroups, default 0), where valid (else the rule) */
    int cmq_bwd_tile[4];  /* BURST_VK_CMQ_BWD_TILE=br,bc,br,bc: dq_cmq's and dkv_cmq's */
    int cmq_fwd[3];       /* BURST_VK_CMQ_FWD=smc,direct[,pipe]: fwd_cmq's softmax step in
                           * 16-key chunks (0 = the whole key tile), P V into O itself (1), the
                           * next step's S = Q K^T issued before this step's softmax (1);
                           * default 1,1,1 */
    int cmq_bf16;         /* BURST_VK_CMQ_BF16: 1 (default) = bf16 inputs take the *_cmq
                           * kernels, scaled into fp16 and converted once a call (elem_cvt)
                           * where the stream's scratch can hold them; 2 = the forward converts
                           * K and V in its loads, the backward is register-tiled; 0 = the
                           * register-tiled kernels */
    int cmq_fp32;         /* BURST_VK_CMQ_FP32: 1 (default) = fp32 inputs up to d = 128 take the
                           * *_cmq kernels, each element split in two fp16 halves (elem_cvt) and
                           * every product taken as three; 0 = the register-tiled kernels */
    int cmq_prefetch[3];  /* BURST_VK_CMQ_PREFETCH=f,q,kv: 1 = fwd_cmq / dq_cmq / dkv_cmq load
                           * the next tile during the current one, 0 = just before storing it
                           * (default 0,0,0, as measured best on the H100: fewer registers) */
    uint32_t max_shared;  /* BURST_VK_MAX_SHARED: pretend the device has at most this (tests) */
    int elem;             /* BURST_VK_ELEM: enum burst_vk_elem_mode */
    char elem_str[32];    /* its value as given (for the error on a bad one) */
    uint32_t elem_groups; /* BURST_VK_ELEM_GROUPS: at most this many workgroups per grid
                           * dimension of an elementwise dispatch, 0 = the device's (tests) */
    int stage;            /* BURST_VK_STAGE: 1 = stage ring transfers through host buffers with
                           * device copies even on a cpu device (tests); otherwise GPUs do */
    int export_mem;       /* BURST_VK_EXPORT: 0 = never allocate exportable memory (vk_share.c);
                           * 2 = also on a cpu device (tests: scratch the host cannot touch) */
};

burst_status_t burst_vk_env_read(struct burst_vk_env *env);

/* Read the capabilities of phys (needs the instance for the NV matrix query). */
void burst_vk_caps_read(VkInstance inst, VkPhysicalDevice phys, struct burst_vk_caps *caps);

/* Head-dim class of d (0, 1, 2) and the largest d of each class. */
int burst_vk_dclass(int d);
extern const int burst_vk_dclass_max[BURST_VK_NUM_DCLASS];

/* Shared memory a kernel needs with tile tl at head dim d (bytes). */
size_t burst_vk_tile_shared(enum burst_vk_kernel k, const struct burst_vk_tile *tl, int d);

/* The *_cmq kernels' shared memory with fp32 inputs in two fp16 halves (f32 != 0: every staged
 * row twice as long) or not. */
size_t burst_vk_cmq_shared(enum burst_vk_kernel k, const struct burst_vk_tile *tl, int d, int f32);

/* The tile of *_cmq kernel k (fwd_cmq, dq_cmq or dkv_cmq) for fp32 inputs in two fp16 halves at
 * head dim d (vk_caps.c); t = 0 where the device has none: d > 128, no *_cmq kernels, the
 * shared memory too small, or BURST_VK_CMQ_FP32=0. */
struct burst_vk_tile burst_vk_cmq_f32_tile(const struct burst_vk_caps *caps,
                                           const struct burst_vk_env *env, enum burst_vk_kernel k,
                                           int d);

/* Is tl usable on caps for kernel k at the class's largest head dim? At head dim d? */
int burst_vk_tile_valid(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                        enum burst_vk_kernel k, int dclass, const struct burst_vk_tile *tl);
int burst_vk_tile_valid_at(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                           enum burst_vk_kernel k, int d, const struct burst_vk_tile *tl);

/* The documented tile rule (vk_caps.c); every entry valid, or t = 0 where nothing fits. */
void burst_vk_tiles_rule(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                         struct burst_vk_tiles *tiles);

/* fwd_cmq's tile for one call at head dim d of `groups` workgroups (x y z of its grid) whose
 * query rows all see every key (mask_all) or not, from the device's rule tile: the rule's tile
 * where the call is large enough for it to pay (224 x 32 with loaders for d in 33..112 in place
 * of 160 x 32 with loaders), else (and for d <= 32) 128 x 64 (vk_caps.c has the measurements);
 * a tile pinned by BURST_VK_CMQ_TILE stays. */
struct burst_vk_tile burst_vk_fwd_cmq_call_tile(const struct burst_vk_caps *caps,
                                                const struct burst_vk_env *env, int d,
                                                struct burst_vk_tile rule, int64_t groups,
                                                int mask_all);

/* dq_cmq's tile for one call at head dim d, from the device's rule tile: 128 x 16 instead of the
 * d <= 256 class's 64 x 16 for d in 129..192, and 192 x 64 instead of the rule's 128 x 64 for
 * d in 33..96 where the call's grid on the rule's tile, `groups` workgroups, has
 * at least 4 waves (vk_caps.c has the measurements); a tile pinned by BURST_VK_CMQ_BWD_TILE
 * stays. */
struct burst_vk_tile burst_vk_dq_cmq_call_tile(const struct burst_vk_caps *caps,
                                               const struct burst_vk_env *env, int d,
                                               struct burst_vk_tile rule, int64_t groups);

/* dkv_cmq's tile for one call at head dim d, from the device's rule tile: 32-row query tiles
 * instead of the d <= 256 class's 16 for d in 129..192, where they fit the shared memory, and
 * 256 (d <= 48) or 192 (d <= 64) key rows instead of 128 where the call's grid on the rule's
 * tile (groups workgroups) has at least 4 waves (vk_caps.c); a tile pinned by
 * BURST_VK_CMQ_BWD_TILE stays. */
struct burst_vk_tile burst_vk_dkv_cmq_call_tile(const struct burst_vk_caps *caps,
                                                const struct burst_vk_env *env, int d,
                                                struct burst_vk_tile rule, int64_t groups);

/* The tiles of fwd_cmq, dq_cmq and dkv_cmq (out[0..2]; t = 0 where the rule gave none) that a
 * large call at head dim d takes: the rule's tiles (tiles) after the per-call choices above,
 * with every wave threshold met and every key allowed (burst_probe shows them). */
void burst_vk_cmq_large_tiles(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                              const struct burst_vk_tiles *tiles, int d,
                              struct burst_vk_tile out[3]);

/* Is the cooperative-matrix forward usable on this device (shaders built, fp16 16x16x16, by
 * the NV or the KHR extension)? */
int burst_vk_coopmat_usable(const struct burst_vk_caps *caps, const struct burst_vk_env *env);
/* Why the subgroup-scope cooperative-matrix kernels do not run as their KHR builds (the device
 * then enables VK_NV_cooperative_matrix, where it has it), or NULL: they do. */
const char *burst_vk_coopmat_khr_why(const struct burst_vk_caps *caps,
                                     const struct burst_vk_env *env);
/* Why the workgroup-scope kernels (fwd_cm2, dq_cm2, dkv_cm2) do not run, or NULL: they may
 * (tiles permitting). */
const char *burst_vk_cm2_why(const struct burst_vk_caps *caps, const struct burst_vk_env *env);

/* Whether kernel k is one of the register-tiled ones (tile t = DC; workgroup (BR/4) x (BC/4)). */
static inline int burst_vk_kernel_rt(int k)
{
    return k == BURST_VK_FWD_RT || k == BURST_VK_DQ_RT || k == BURST_VK_DKV_RT ||
           k == BURST_VK_DKVQ_RT;
}

/* Whether kernel k is one of the cooperative-matrix ones (workgroup = BR / 16 subgroups). */
static inline int burst_vk_kernel_cm(enum burst_vk_kernel k)
{
    return k == BURST_VK_FWD_CM || k == BURST_VK_DQ_CM || k == BURST_VK_DKV_CM ||
           k == BURST_VK_FWD_CMQ || k == BURST_VK_DQ_CMQ || k == BURST_VK_DKV_CMQ;
}

/* Whether kernel k is one of the workgroup-scope ones (tile t = workgroup invocations). */
static inline int burst_vk_kernel_cm2(enum burst_vk_kernel k)
{
    return k == BURST_VK_FWD_CM2 || k == BURST_VK_DQ_CM2 || k == BURST_VK_DKV_CM2;
}

/* Whether kernel k is one of those that use the accumulators' fragment layout (vk_cmq.c). */
static inline int burst_vk_kernel_cmq(enum burst_vk_kernel k)
{
    return k == BURST_VK_FWD_CMQ || k == BURST_VK_DQ_CMQ || k == BURST_VK_DKV_CMQ;
}

/* Subgroups on each 16 rows of a *_cmq kernel at head dim d (shaders/cm_nv.glsl SP): 2 for the
 * backward beyond d = 128, and beyond d = 64 for fp32 inputs in two fp16 halves (f32: twice the
 * operands), where one subgroup's operands and accumulators for the whole head dim would not fit
 * its registers, each then holding half of them; else 1. */
static inline int burst_vk_cmq_split(enum burst_vk_kernel k, int d, int f32)
{
    return (k == BURST_VK_DQ_CMQ || k == BURST_VK_DKV_CMQ) && (d > 128 || (f32 && d > 64)) ? 2 : 1;
}

/* ---- the instance ------------------------------------------------------------------------- */

struct burst_vk_buffer {
    VkBuffer buf;
    VkDeviceMemory mem;
    unsigned char *map;
    VkDeviceAddress addr;
    size_t size;
    uint64_t share_id;    /* exportable (vk_share.c): its id, unique in the process; else 0 */
    VkDeviceSize memsize; /* allocationSize of mem */
    int device_only;      /* exportable scratch: map is a reserved address range, not memory */
};

struct burst_vk_stream {
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkQueryPool queries; /* 2 timestamps per dispatch, BURST_VK_PROFILE only */
    struct burst_vk_buffer stage;
    size_t used;                 /* bytes of stage handed out for the current call */
    struct burst_vk_buffer host; /* host-cached: caller memory packed in / read back (elem ops) */
    struct burst_vk_buffer scratch; /* device memory for a call's own intermediates (fwd_cmq:
                                     * bf16 K and V converted to fp16), grown to the largest */
    int busy;
};

struct burst_vk_pipe {
    uint32_t key[11]; /* kernel, d, t, br, bc, dtq, dtk, dtv, dto, ld, capped */
    VkPipeline pipe;
};

/* The accumulator layout the *_cmq kernels rely on, as vk_cmq.c found it on the device. */
struct burst_vk_cmq {
    int ok;          /* the layout is NVIDIA's fragment layout: the *_cmq kernels may run */
    uint32_t rowsel; /* bit e: element e is in row lane / 4 + 8 (else lane / 4) */
    uint32_t coloff; /* 4 bits per element: its column minus 2 (lane % 4) */
    char why[160];   /* why not, when the rule had tiles for it */
};

struct burst_vk_backend {
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfamily;
    pthread_mutex_t qlock; /* vkQueueSubmit */
    int index;             /* device index */
    struct burst_vk_caps caps;
    struct burst_vk_env env;
    struct burst_vk_tiles tiles;
    int use_coopmat;
    int cm_khr;  /* the cooperative-matrix kernels are their KHR builds (VK_KHR_cooperative_matrix
                  * enabled instead of the NV extension) */
    int use_cm2; /* VK_NV_cooperative_matrix2 enabled: the *_cm2 kernels may run */
    struct burst_vk_cmq cmq; /* the *_cmq kernels' layout check (vk_cmq.c) */
    int use_atomic;          /* float atomics enabled on the device (dkvq_rt) */
    int export_ext;          /* VK_KHR_external_memory_fd enabled (vk_share.c decides exportable) */
    int pipe_stats; /* BURST_VK_PROFILE and VK_KHR_pipeline_executable_properties: print each
                     * pipeline's compiler statistics (registers, spills...) when built */
    int elem_gpu;   /* copy / fill / accumulate run as shaders (BURST_VK_ELEM resolved) */
    int stage;      /* staging buffers (host_alloc) are registered host buffers that memcpy fills
                   * and drains with device copies (a GPU, or BURST_VK_STAGE=1); ring transfers
                   * use them as burst_vk_stage_transfers says */
    uint32_t mem_fast, mem_host; /* memory types: device-local+host-visible (or ~0u), host */
    uint32_t mem_dev;            /* device-local, preferably not host-visible: shared scratch */
    int exportable;       /* alloc_scratch() memory is exportable as an opaque fd (vk_share.c) */
    char export_why[200]; /* why not, when the device could have (shown by probe) */
    PFN_vkGetMemoryFdKHR get_memory_fd;

    pthread_mutex_t mlock; /* registry */
    struct burst_vk_buffer *bufs;
    size_t nbufs, capbufs;

    pthread_mutex_t slock; /* streams */
    pthread_cond_t scond;
    struct burst_vk_stream streams[BURST_VK_MAX_STREAMS];
    int nstreams;

    pthread_mutex_t plock; /* pipelines */
    VkPipelineLayout layout;
    struct burst_vk_pipe *pipes;
    size_t npipes, cappipes;

    pthread_mutex_t proflock; /* BURST_VK_PROFILE totals */
    double prof_ms[BURST_VK_NUM_ALL_KERNELS];
    uint64_t prof_count[BURST_VK_NUM_ALL_KERNELS];
    double prof_min[BURST_VK_NUM_ALL_KERNELS]; /* fastest dispatch (GPUs clock up in the first) */
};

/* ---- vk_device.c --------------------------------------------------------------------------- */

/* Convert a failed VkResult into a status with the message "<what>: <VkResult name> (<code>)";
 * VK_SUCCESS gives BURST_OK. Out-of-memory results map to BURST_ERR_DEVICE_MEMORY. */
burst_status_t burst_vk_result(VkResult r, const char *what);
const char *burst_vk_result_str(VkResult r);

/* Create an instance and list the physical devices; BURST_ERR_NO_DEVICE (message says why)
 * when there is no loader, no driver or no device. */
burst_status_t burst_vk_instance(VkInstance *inst_p, VkPhysicalDevice *devs, uint32_t *ndev_p);

/* Which of the ndev devices `spec` names (NULL/"" = 0; an index; a name substring). */
burst_status_t burst_vk_select(VkInstance inst, const VkPhysicalDevice *devs, uint32_t ndev,
                               const char *spec, int *index_p);

/* Create the logical device and queue of be->phys (caps already read). */
burst_status_t burst_vk_device_create(struct burst_vk_backend *be);

/* ---- vk_memory.c --------------------------------------------------------------------------- */

/* Pick the memory types (be->mem_fast, be->mem_host). */
void burst_vk_memory_init(struct burst_vk_backend *be);
/* A mapped storage buffer with a device address; host_only avoids device-local memory. */
burst_status_t burst_vk_buffer_create(struct burst_vk_backend *be, size_t bytes, int host_only,
                                      struct burst_vk_buffer *b);
/* The same in device-local memory only (no fallback to system memory), or an error. */
burst_status_t burst_vk_buffer_create_device(struct burst_vk_backend *be, size_t bytes,
                                             struct burst_vk_buffer *b);
void burst_vk_buffer_destroy(struct burst_vk_backend *be, struct burst_vk_buffer *b);
void *burst_vk_alloc(void *be, size_t bytes);
/* The plan's scratch (backend.h alloc_scratch): exportable device-local memory where the device
 * exports it (be->exportable; vk_share.c), never touched by the host; else burst_vk_alloc. */
void *burst_vk_alloc_scratch(void *be, size_t bytes);
void burst_vk_free(void *be, void *ptr);
/* Device address of [ptr, ptr + bytes) if it lies inside one registered buffer, else 0. */
VkDeviceAddress burst_vk_lookup(struct burst_vk_backend *be, const void *ptr, size_t bytes);
/* The registered buffer holding [ptr, ptr + bytes) and ptr's offset in it: 1, else 0. */
int burst_vk_buffer_of(struct burst_vk_backend *be, const void *ptr, size_t bytes, VkBuffer *buf_p,
                       VkDeviceSize *off_p);
/* A registered, mapped, zeroed buffer in host memory (HOST_CACHED where the device has it) for
 * staging; freed with burst_vk_free. NULL on failure. */
void *burst_vk_host_buffer(struct burst_vk_backend *be, size_t bytes);
void burst_vk_memory_fini(struct burst_vk_backend *be);
/* Allocate and free one small exportable buffer: BURST_OK when alloc() can export (vk_share.c). */
burst_status_t burst_vk_export_try(struct burst_vk_backend *be);

/* ---- vk_share.c ---------------------------------------------------------------------------- */

/* Memory shared with another backend of this process (transport.h, share_*): a cuda rank's copy
 * engine reads and writes a vulkan rank's buffers (on the same GPU or peer to peer). */
extern const struct burst_tp_devops burst_vk_devshare;
/* After the device and its memory types: can scratch memory be exported (be->exportable)? The
 * device extension VK_KHR_external_memory_fd was enabled (has_ext), the device is not a cpu one,
 * elementwise ops run as shaders (the host never touches scratch), the driver exports storage
 * buffers as opaque fds, one such buffer can be allocated, and BURST_VK_EXPORT is not 0.
 * Otherwise be->export_why says why (where it was tried). */
void burst_vk_share_init(struct burst_vk_backend *be, int has_ext);
/* A new share id for an exportable buffer, live until burst_vk_share_forget. */
uint64_t burst_vk_share_new(void);
void burst_vk_share_forget(uint64_t id);

/* ---- vk_stream.c --------------------------------------------------------------------------- */

/* Copy bytes between two registered buffers with the device's copy command, and wait: how
 * blocks move between device memory and the staging buffers (the CPU reads mapped device memory
 * uncached, at tens of MB/s on a discrete GPU). */
burst_status_t burst_vk_copy_buffers(struct burst_vk_backend *be, VkBuffer dst, VkDeviceSize doff,
                                     VkBuffer src, VkDeviceSize soff, size_t bytes);

/* One argument of a call: host pointer and extent; resolved to a device address. */
struct burst_vk_slot {
    const void *host;
    size_t bytes;
    int out; /* copied back after the call when staged */
    VkDeviceAddress addr;
    unsigned char *staged; /* mapped staging copy, or NULL when registered */
};

/* One dispatch of a call. */
struct burst_vk_dispatch {
    enum burst_vk_kernel kernel;
    VkPipeline pipe;
    VkDeviceAddress params;
    uint32_t groups[3];
    int wait; /* 1: waits for the writes of the dispatches before it (a barrier); 0: independent
               * of them */
};

burst_status_t burst_vk_stream_acquire(struct burst_vk_backend *be, struct burst_vk_stream **s_p);
void burst_vk_stream_release(struct burst_vk_backend *be, struct burst_vk_stream *s);
/* Resolve every slot (registered or staged); extra = bytes of scratch wanted in the staging
 * buffer (returned in *extra_p, mapped, with its address in *extra_addr_p). */
burst_status_t burst_vk_stage(struct burst_vk_backend *be, struct burst_vk_stream *s,
                              struct burst_vk_slot *slots, int nslots, size_t extra, void **extra_p,
                              VkDeviceAddress *extra_addr_p);
/* Record the dispatches (no barrier between them: they write disjoint memory), submit, wait,
 * then copy staged outputs back. *ms_p (may be NULL) receives the GPU time of the dispatches
 * when timestamps are on (BURST_VK_PROFILE or force_timing), else -1. */
burst_status_t burst_vk_submit(struct burst_vk_backend *be, struct burst_vk_stream *s,
                               const struct burst_vk_dispatch *d, int nd,
                               struct burst_vk_slot *slots, int nslots, int force_timing,
                               double *ms_p);
/* At least `bytes` of the stream's host-cached buffer (grown on demand, kept until destroy), for
 * arguments the host packs in or reads back: the CPU reads it at memory speed, unlike the
 * device-local staging buffer a GPU maps through the BAR. */
/* The stream's device scratch with at least `bytes` (device-local memory only; grown, kept for
 * later calls): its device address in *addr_p, or the allocation's error (the scratch is then
 * empty). */
burst_status_t burst_vk_stream_scratch(struct burst_vk_backend *be, struct burst_vk_stream *s,
                                       size_t bytes, VkDeviceAddress *addr_p);
burst_status_t burst_vk_stream_host(struct burst_vk_backend *be, struct burst_vk_stream *s,
                                    size_t bytes, unsigned char **map_p, VkDeviceAddress *addr_p);
void burst_vk_streams_fini(struct burst_vk_backend *be);

/* ---- vk_cmq.c ------------------------------------------------------------------------------ */

/* Where the rule gave the *_cmq kernels tiles, check the device's accumulator layout (one
 * dispatch of shaders/cm_layout_nv.comp) and keep them only when it is the one they assume
 * (be->cmq); otherwise drop them, so the kernels stay on fwd_cm, dq_cm, dkv_cm. */
void burst_vk_cmq_check(struct burst_vk_backend *be);
/* Is out, what shaders/cm_layout_nv.comp wrote with 32 invocations (1 + 32 * 16 + 256 floats:
 * the length, 16 per invocation, the matrix converted to fp16), the fragment layout? 1 with
 * q->rowsel and q->coloff set, else 0 with q->why saying what differs (tests/test_vk_cmq.c). */
int burst_vk_cmq_match(const float *out, struct burst_vk_cmq *q);

/* ---- vk_pipeline.c ------------------------------------------------------------------------- */

burst_status_t burst_vk_pipeline_init(struct burst_vk_backend *be);
/* The pipeline of kernel k for head dim d, tile tl and dtypes; created on first use. */
burst_status_t burst_vk_pipeline(struct burst_vk_backend *be, enum burst_vk_kernel k, int d,
                                 const struct burst_vk_tile *tl, const int dtypes[4],
                                 VkPipeline *pipe_p);
/* The same for a step whose scores are soft-capped or not (capped: the plan's cap > 0): the
 * dq_cmq / dkv_cmq kernels get a pipeline of each kind; the others ignore it. */
burst_status_t burst_vk_pipeline_capped(struct burst_vk_backend *be, enum burst_vk_kernel k, int d,
                                        const struct burst_vk_tile *tl, const int dtypes[4],
                                        int capped, VkPipeline *pipe_p);
void burst_vk_pipeline_fini(struct burst_vk_backend *be);

/* ---- vk_attn.c / vk_elem.c ----------------------------------------------------------------- */

/* Parameter block of every kernel: mirrors struct Params of shaders/common.glsl (std430). */
struct burst_vk_view {
    uint64_t addr;
    int32_t off, s0, s1, s2;
};
struct burst_vk_params {
    struct burst_vk_view q, k, v, dout;
    uint64_t o, lse, delta, dk, dv, rows;
    int32_t batch, nq, nk, hq, hkv, group;
    float scale;
    int32_t flags;
    int32_t lo, hi; /* key (fwd, dq) or query (dkv) rows of this dispatch */
    uint64_t amax;  /* *_cmq, bf16 / fp32 inputs: largest magnitudes' bits of q, k, v, dout */
    float softcap;  /* > 0: scaled scores s soft-capped to softcap tanh(s / softcap); 0: not */
    int32_t pad;
};

burst_status_t burst_vk_fwd_step(void *be, const struct burst_fwd_args *args);
burst_status_t burst_vk_bwd_delta(void *be, const struct burst_tensor *dout,
                                  const struct burst_tensor *o, float *delta);
burst_status_t burst_vk_bwd_step(void *be, const struct burst_bwd_args *args);
burst_status_t burst_vk_copy(void *be, const struct burst_tensor *dst,
                             const struct burst_tensor *src);
burst_status_t burst_vk_fill(void *be, float *dst, size_t count, float value);
burst_status_t burst_vk_accumulate(void *be, float *dst, const void *src, burst_dtype_t src_dtype,
                                   size_t count);
/* Do copy / fill / accumulate run as shaders on this device (BURST_VK_ELEM resolved)? */
int burst_vk_elem_gpu(const struct burst_vk_caps *caps, const struct burst_vk_env *env);

/* ---- vk_elem_gpu.c ------------------------------------------------------------------------- */

/* Parameter block of the elementwise kernels: mirrors struct ElemParams of shaders/elem.glsl
 * (std430). Addresses are of element 0; strides in elements. */
struct burst_vk_elem_params {
    uint64_t dst, src;
    int64_t shape[4];   /* copy: [B, n, H, d]; fill / accumulate: [1, 1, 1, count] */
    int64_t dstride[3]; /* copy: strides of dims 0..2 (dim 3 has stride 1) */
    int64_t sstride[3];
    uint64_t units; /* work items: copy: rows * ceil(d / 2); fill / accumulate: count */
    uint32_t value; /* fill: the fp32 bits */
    uint32_t pad;
    uint64_t aux;  /* cvt: device address of the largest magnitude's bits (amax) */
    uint64_t aux2; /* cvt of a backward's dO: V's, for its scale (convert.glsl), else 0 */
};

/* One tensor argument of an elementwise dispatch: its device address (of element 0), or 0 when
 * the backend does not own it: then it is packed into the stream's host buffer before the
 * dispatch (in) and unpacked into the caller's memory after it (out). */
struct burst_vk_elem_arg {
    const struct burst_tensor *t;
    VkDeviceAddress addr;
    int in, out;
};

/* Run elementwise kernel k (BURST_VK_COPY, _FILL or _ACC) on args[0] (destination) and, when
 * nargs is 2, args[1] (source): p holds shape, units and value; addresses and strides are
 * filled in from the args. Synchronous, like every op of this backend. When the host staging
 * the args need cannot be had (host-visible memory is limited on some devices), nothing is
 * done, *unstaged_p is set, the error cleared and BURST_OK returned: the caller runs its loop. */
burst_status_t burst_vk_elem_run(struct burst_vk_backend *be, enum burst_vk_kernel k,
                                 struct burst_vk_elem_params *p, struct burst_vk_elem_arg *args,
                                 int nargs, int *unstaged_p);

#endif /* BURST_VK_INTERNAL_H */
