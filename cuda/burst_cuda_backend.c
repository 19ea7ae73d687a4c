/*
 * cuda/burst_cuda_backend.c - the cuda backend's ops table (see cuda/burst_cuda.h for the files).
 *
 * Device memory is cudaMalloc'd (never managed memory); staging memory is pinned with
 * cudaHostAlloc. Every op first makes the instance's device current for the calling thread,
 * then works on cudaStreamPerThread. Every cudaError_t is converted by burst_cuda_status():
 *   cudaErrorMemoryAllocation                       -> BURST_ERR_DEVICE_MEMORY
 *   no device, no / too old driver, no kernel image -> BURST_ERR_NO_DEVICE
 *   anything else                                   -> BURST_ERR_DEVICE
 * with the native name and message (cudaGetErrorName / cudaGetErrorString).
 *
 * Settings (runtime/settings.h, read at create):
 *   BURST_CUDA_KERNEL   "simt" forces the SIMT forward (kill switch for the tensor-core path)
 *   BURST_CUDA_FP32     "simt": fp32 inputs on the SIMT kernels instead of 3xTF32 (any other
 *                       non-empty value fails the create naming it)
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "burst_cuda.h"
#include "error.h"
#include "fp8.h"
#include "settings.h"
#include "step_check.h"

/* The one place where CUDA errors become burst statuses. */
burst_status_t burst_cuda_status(int err, const char *what)
{
    cudaError_t e = (cudaError_t)err;
    if (e == cudaSuccess)
        return BURST_OK;
    burst_status_t st = BURST_ERR_DEVICE;
    if (e == cudaErrorMemoryAllocation)
        st = BURST_ERR_DEVICE_MEMORY;
    else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
             e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDevice ||
             e == cudaErrorStubLibrary || e == cudaErrorDevicesUnavailable)
        st = BURST_ERR_NO_DEVICE;
    return burst_error(st, "cuda %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

burst_status_t burst_cuda_enter(const struct burst_cuda_backend *cb, const char *what)
{
    return burst_cuda_status(cudaSetDevice(cb->device), what);
}

static int burst_cuda_icontains(const char *s, const char *needle)
{
    size_t n = strlen(needle);
    for (; *s; s++) {
        size_t i = 0;
        while (i < n && s[i] && tolower((unsigned char)s[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

/* params->device: NULL = 0, a decimal index, or a case-insensitive substring of the name. */
static burst_status_t burst_cuda_pick_device(const char *want, int count, int *dev_p)
{
    if (!want || !*want) {
        *dev_p = 0;
        return BURST_OK;
    }
    char *end;
    errno = 0;
    long idx = strtol(want, &end, 10);
    if (errno == 0 && *end == '\0') {
        if (idx < 0 || idx >= count)
            return burst_error(BURST_ERR_NO_DEVICE,
                               "cuda create: params->device = \"%s\" is not a device index "
                               "(this machine has %d cuda devices)",
                               want, count);
        *dev_p = (int)idx;
        return BURST_OK;
    }
    for (int i = 0; i < count; i++) {
        struct cudaDeviceProp pr;
        if (cudaGetDeviceProperties(&pr, i) == cudaSuccess && burst_cuda_icontains(pr.name, want)) {
            *dev_p = i;
            return BURST_OK;
        }
    }
    return burst_error(BURST_ERR_NO_DEVICE,
                       "cuda create: params->device = \"%s\" matches no cuda device name", want);
}

static burst_status_t burst_cuda_create(const struct burst_context_params *params, void **be_p)
{
    if (!be_p)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda create: be_p is NULL");
    /* every cuda setting valid, or the create fails naming it, on any machine (one without a
     * device too: a malformed setting is the caller's error, found before the device is) */
    struct burst_settings set = {0};
    burst_status_t st = burst_settings_load("cuda create", BURST_SCOPE_CUDA, &set);
    if (st != BURST_OK)
        return st;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        /* any failure to enumerate (no driver, driver too old, no device) means: not here */
        char msg[512];
        burst_cuda_status(e, "create: cudaGetDeviceCount");
        snprintf(msg, sizeof msg, "%s", burst_last_error());
        return burst_error(BURST_ERR_NO_DEVICE, "%s", msg);
    }
    if (count <= 0)
        return burst_error(BURST_ERR_NO_DEVICE, "cuda create: no cuda device on this machine");
    int dev;
    st = burst_cuda_pick_device(params ? params->device : NULL, count, &dev);
    if (st != BURST_OK)
        return st;
    struct cudaDeviceProp pr;
    if ((st = burst_cuda_status(cudaGetDeviceProperties(&pr, dev), "create: properties")) !=
        BURST_OK)
        return st;
    if (pr.major < 8)
        return burst_error(BURST_ERR_NO_DEVICE,
                           "cuda create: device %d (%s) has compute capability %d.%d; the kernels "
                           "need 8.0 or newer (built for nvcc_archs: sm_80 and sm_90a by default)",
                           dev, pr.name, pr.major, pr.minor);
    struct burst_cuda_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return burst_error(BURST_ERR_NO_MEMORY, "cuda create: out of memory");
    cb->device = dev;
    pthread_mutex_init(&cb->scratch_lock, NULL);
    cb->caps.cc_major = pr.major;
    cb->caps.cc_minor = pr.minor;
    cb->caps.sms = pr.multiProcessorCount;
    cb->caps.smem_block_optin = burst_cuda_optin(pr.sharedMemPerBlockOptin);
    cb->mma = burst_cuda_mma_usable(&cb->caps);
    cb->dq_atomic = burst_cuda_dq_atomic_env();
    cb->tma = burst_cuda_tma_env();
    cb->tf32 = burst_cuda_tf32_env();
    snprintf(cb->name, sizeof cb->name, "%s", pr.name);
    memcpy(cb->uuid, pr.uuid.bytes, sizeof cb->uuid);
    if ((st = burst_cuda_share_init(cb)) == BURST_OK &&
        (st = burst_cuda_enter(cb, "create: cudaSetDevice")) == BURST_OK &&
        (st = burst_cuda_status(cudaFree(NULL), "create: context")) == BURST_OK)
        st = burst_cuda_status((cudaError_t)burst_cuda_kernels_init(), "create: kernel setup");
    /* the decode step's kernels, where their setup succeeds (else decode_step declines) */
    if (st == BURST_OK) {
        cb->decode = burst_cuda_decode_init(cb->decode_per_sm) == cudaSuccess;
        if (!cb->decode)
            (void)cudaGetLastError();
    }
#ifdef BURST_CUDA_SM90A
    /* the Hopper forward, where it can run; if its setup fails the sm_80 forward stays */
    if (st == BURST_OK && burst_cuda_wgmma_usable(&cb->caps)) {
        cb->wgmma = burst_cuda_sm90_init() == cudaSuccess;
        cb->wgmma_bwd = cb->wgmma && burst_set_long(&set, BURST_SET_CUDA_WGMMA) != 2; /* fwd */
        if (!cb->wgmma)
            (void)cudaGetLastError();
        /* the fp8 forward reads its operands through tensor maps only */
        cb->fp8 = burst_cuda_fp8_usable(&cb->caps, cb->wgmma, cb->tma) &&
                  burst_cuda_fp8_init() == cudaSuccess;
        if (cb->wgmma && !cb->fp8)
            (void)cudaGetLastError();
    }
#endif
    if (st != BURST_OK) {
        burst_cuda_share_fini(cb);
        pthread_mutex_destroy(&cb->scratch_lock);
        free(cb);
        return st;
    }
    *be_p = cb;
    return BURST_OK;
}

static void burst_cuda_destroy(void *be)
{
    struct burst_cuda_backend *cb = be;
    if (!cb)
        return;
    if (cudaSetDevice(cb->device) == cudaSuccess)
        cudaDeviceSynchronize();
    burst_cuda_ipc_close(cb->device); /* other processes' blocks mapped for the ring */
    burst_cuda_share_fini(cb);        /* other backends' memory imported for the ring */
    burst_cuda_scratch_fini(cb);      /* the threads' scratch (decode_step) */
    pthread_mutex_destroy(&cb->scratch_lock);
    free(cb);
}

static int burst_cuda_num_threads(void *be)
{
    return 1;
}

/* ---- memory ------------------------------------------------------------------------------------ */

static void *burst_cuda_alloc(void *be, size_t bytes)
{
    struct burst_cuda_backend *cb = be;
    void *p = NULL;
    if (burst_cuda_enter(cb, "alloc") != BURST_OK)
        return NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess) {
        e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, cudaStreamPerThread);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(cudaStreamPerThread);
        if (e != cudaSuccess) {
            cudaFree(p);
            p = NULL;
        }
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        burst_cuda_status(e, "alloc: cudaMalloc");
    }
    return p;
}

static void burst_cuda_free(void *be, void *ptr)
{
    struct burst_cuda_backend *cb = be;
    if (!ptr || cudaSetDevice(cb->device) != cudaSuccess)
        return;
    cudaStreamSynchronize(cudaStreamPerThread);
    cudaFree(ptr);
}

static burst_status_t burst_cuda_memcpy(void *be, void *dst, const void *src, size_t bytes)
{
    struct burst_cuda_backend *cb = be;
    if (bytes == 0)
        return BURST_OK;
    if (!dst || !src)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda memcpy: %s is NULL (bytes = %zu)",
                           dst ? "src" : "dst", bytes);
    burst_status_t st = burst_cuda_enter(cb, "memcpy");
    if (st == BURST_OK)
        st = burst_cuda_status(
            cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread), "memcpy");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaStreamSynchronize(cudaStreamPerThread), "memcpy: sync");
    return st;
}

/* Device memory, managed memory and page-locked host memory (cudaHostAlloc /
 * cudaHostRegister: mapped into the device's address space under UVA) are addressable by the
 * kernels; plain host memory is not (nor, where the driver has HMM, at any useful speed). */
static burst_status_t burst_cuda_check_memory(void *be, const char *who, const char *name,
                                              const void *ptr)
{
    (void)be;
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s (%p) is not memory the cuda backend "
                           "can address: %s",
                           who, name, ptr, cudaGetErrorString(e));
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
        a.type == cudaMemoryTypeHost)
        return BURST_OK;
    return burst_error(BURST_ERR_INVALID_ARG,
                       "%s: %s (%p) is plain host memory; the cuda backend computes on device "
                       "memory: allocate the tensor with burst_context_alloc() and fill it with "
                       "burst_context_memcpy() (or run on the cpu backend)",
                       who, name, ptr);
}

static void *burst_cuda_host_alloc(void *be, size_t bytes)
{
    struct burst_cuda_backend *cb = be;
    void *p = NULL;
    if (burst_cuda_enter(cb, "host_alloc") != BURST_OK)
        return NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        burst_cuda_status(e, "host_alloc: cudaHostAlloc");
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void burst_cuda_host_free(void *be, void *ptr)
{
    if (ptr)
        cudaFreeHost(ptr);
}

static burst_status_t burst_cuda_sync(void *be)
{
    struct burst_cuda_backend *cb = be;
    burst_status_t st = burst_cuda_enter(cb, "sync");
    if (st == BURST_OK)
        st =
            burst_cuda_status(cudaStreamSynchronize(cudaStreamPerThread), "sync (a kernel failed)");
    return st;
}

burst_status_t burst_cuda_event_here(const struct burst_cuda_backend *cb, int timing,
                                     const char *what, void **ev_p)
{
    cudaEvent_t ev = NULL;
    char create[128], record[128];
    snprintf(create, sizeof(create), "%s: cudaEventCreateWithFlags", what);
    snprintf(record, sizeof(record), "%s: cudaEventRecord", what);
    burst_status_t st = burst_cuda_enter(cb, what);
    if (st == BURST_OK)
        st = burst_cuda_status(
            cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming),
            create);
    if (st == BURST_OK) {
        st = burst_cuda_status(cudaEventRecord(ev, cudaStreamPerThread), record);
        if (st != BURST_OK) {
            cudaEventDestroy(ev);
            ev = NULL;
        }
    }
    *ev_p = ev;
    return st;
}

/* Timing markers (backend.h time_mark): events with timing on the calling thread's stream. */
static burst_status_t burst_cuda_time_mark(void *be, void **mark_p)
{
    return burst_cuda_event_here(be, 1, "time mark", mark_p);
}

static burst_status_t burst_cuda_time_elapsed(void *be, void *from, void *to, double *seconds_p)
{
    float ms = 0.0f;
    burst_status_t st = burst_cuda_enter(be, "time elapsed");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to),
                               "time elapsed: cudaEventElapsedTime");
    *seconds_p = st == BURST_OK ? ms * 1e-3 : 0.0;
    return st;
}

static void burst_cuda_time_release(void *be, void *mark)
{
    (void)be;
    if (mark)
        cudaEventDestroy((cudaEvent_t)mark);
}

/* ---- argument checks --------------------------------------------------------------------------- */

static int burst_cuda_dtype(burst_dtype_t dt)
{
    switch (dt) {
    case BURST_DTYPE_FP32: return BURST_CUDA_F32;
    case BURST_DTYPE_FP16: return BURST_CUDA_F16;
    case BURST_DTYPE_BF16: return BURST_CUDA_BF16;
    default: return -1;
    }
}

/* The kernel view of a tensor the engine has checked (runtime/step_check.h). */
static void burst_cuda_view_of(const struct burst_tensor *t, struct burst_cuda_view *v)
{
    v->data = t->data;
    v->dtype = burst_cuda_dtype(t->dtype);
    for (int k = 0; k < 4; k++) {
        v->shape[k] = t->shape[k];
        v->stride[k] = t->stride[k];
    }
}

/* The kernel view of a tensor the engine has not checked (copy, bwd_delta, outputs). */
static burst_status_t burst_cuda_view_checked(const char *op, const char *name,
                                              const struct burst_tensor *t,
                                              struct burst_cuda_view *v)
{
    burst_status_t st = burst_step_check_view(op, name, t);
    if (st == BURST_OK)
        burst_cuda_view_of(t, v);
    return st;
}

/* The cuda limits of a step the engine has checked: head dim at most 256, one dtype for all
 * views. */
static burst_status_t burst_cuda_check_qkv(const char *op, const struct burst_tensor *q,
                                           const struct burst_tensor *k,
                                           const struct burst_tensor *v,
                                           const struct burst_tensor *dout,
                                           struct burst_cuda_step *s)
{
    burst_cuda_view_of(q, &s->q);
    burst_cuda_view_of(k, &s->k);
    burst_cuda_view_of(v, &s->v);
    if (dout)
        burst_cuda_view_of(dout, &s->dout);
    s->batch = q->shape[0];
    s->nq = q->shape[1];
    s->hq = q->shape[2];
    s->d = q->shape[3];
    s->nk = k->shape[1];
    s->hkv = k->shape[2];
    if (s->d > 256)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: head dim = %lld is not a multiple of 8 in [8, 256]", op,
                           (long long)s->d);
    if (k->dtype != q->dtype || v->dtype != q->dtype || (dout && dout->dtype != q->dtype))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: q, k, v%s dtypes differ (q %d, k %d, v %d)",
                           op, dout ? ", dout" : "", (int)q->dtype, (int)k->dtype, (int)v->dtype);
    s->group = s->hq / s->hkv;
    return BURST_OK;
}

/* The tensor-core kernels read 16-byte chunks: data and row strides must be 16-byte aligned. */
static int burst_cuda_aligned16(const struct burst_cuda_view *v)
{
    const int per16 = v->dtype == BURST_CUDA_F32 ? 4 : 8; /* elements per 16 bytes */
    if (((uintptr_t)v->data & 15u) != 0)
        return 0;
    for (int k = 0; k < 3; k++)
        if (v->stride[k] % per16 != 0)
            return 0;
    return 1;
}

/* Tensor cores with 16-byte aligned rows: for fp16/bf16 the variant of the head dim's class on
 * this device (burst_cuda_class_kind: the Hopper kernels where the device and the build allow),
 * for fp32 the 3xTF32 mma.sync kernels (burst_cuda_f32_kind); else SIMT. */
static int burst_cuda_kind(const struct burst_cuda_backend *cb, const struct burst_cuda_step *s,
                           int bwd)
{
    if (!cb->mma || s->nq >= INT32_MAX || s->nk >= INT32_MAX || /* 32-bit row indices there */
        !burst_cuda_aligned16(&s->q) || !burst_cuda_aligned16(&s->k) ||
        !burst_cuda_aligned16(&s->v) || (bwd && !burst_cuda_aligned16(&s->dout)))
        return BURST_CUDA_FWD_SIMT;
    if (s->q.dtype == BURST_CUDA_F32)
        return burst_cuda_f32_kind(&cb->caps, cb->mma, cb->tf32, s->d);
    return burst_cuda_class_kind(&cb->caps, cb->mma, bwd ? cb->wgmma_bwd : cb->wgmma, s->d, bwd);
}

/* The soft-cap's constants of a step (see burst_dcap_score in burst_cuda_common.cuh). */
static void burst_cuda_cap_set(struct burst_cuda_step *s)
{
    s->cap_in = s->cap_out = s->cap_k = 0.0f;
    if (s->softcap > 0.0f) {
        s->cap_in = 2.0f * 1.44269504f * s->scale / s->softcap;
        s->cap_out = s->softcap / s->scale;
        s->cap_k = 1.0f / (s->softcap * 1.44269504f);
    }
}

/* The kernels read the document table in device memory: the plan's copy (mask.docs_dev). */
static burst_status_t burst_cuda_docs(const char *op, struct burst_cuda_step *s)
{
    if (!s->mask.docs || s->mask.ndocs <= 1) {
        s->mask.docs = NULL;
        return BURST_OK;
    }
    if (!s->mask.docs_dev)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: a mask of %lld documents without their table in device memory", op,
                           (long long)s->mask.ndocs);
    s->mask.docs = (const int64_t *)s->mask.docs_dev;
    return BURST_OK;
}

/* Enter the device for op (a "cuda ..." name) and launch the step s with the kernel kind
 * burst_cuda_kind chooses; a launch error names op. */
static burst_status_t burst_cuda_run(struct burst_cuda_backend *cb, const char *op,
                                     int (*launch)(const struct burst_cuda_step *, int, int),
                                     const struct burst_cuda_step *s, int bwd)
{
    burst_status_t st = burst_cuda_enter(cb, op + 5); /* op without "cuda " */
    if (st != BURST_OK)
        return st;
    struct burst_cuda_step sd = *s;
    if ((st = burst_cuda_docs(op, &sd)) != BURST_OK)
        return st;
    const int kind = burst_cuda_kind(cb, &sd, bwd);
    /* the Hopper forward's item counters, on this device (entered above) */
    if (kind == BURST_CUDA_FWD_WGMMA && !bwd &&
        (st = burst_cuda_scratch_counters(cb, 2, &sd.sched)) != BURST_OK)
        return st;
    char what[32];
    snprintf(what, sizeof what, "%s: launch", op + 5);
    return burst_cuda_status((cudaError_t)launch(&sd, kind, cb->caps.sms), what);
}

/* ---- ops ----------------------------------------------------------------------------------------- */

static burst_status_t burst_cuda_copy(void *be, const struct burst_tensor *dst,
                                      const struct burst_tensor *src)
{
    struct burst_cuda_view vd, vs;
    burst_status_t st;
    if ((st = burst_cuda_view_checked("cuda copy", "dst", dst, &vd)) != BURST_OK ||
        (st = burst_cuda_view_checked("cuda copy", "src", src, &vs)) != BURST_OK)
        return st;
    for (int k = 0; k < BURST_TENSOR_DIMS; k++)
        if (dst->shape[k] != src->shape[k])
            return burst_error(BURST_ERR_INVALID_ARG,
                               "cuda copy: shape[%d] differs (dst %lld, src %lld)", k,
                               (long long)dst->shape[k], (long long)src->shape[k]);
    if ((st = burst_cuda_enter(be, "copy")) != BURST_OK)
        return st;
    return burst_cuda_status((cudaError_t)burst_cuda_launch_copy(&vd, &vs), "copy: launch");
}

static burst_status_t burst_cuda_fill(void *be, float *dst, size_t count, float value)
{
    if (count == 0)
        return BURST_OK;
    if (!dst)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda fill: dst is NULL (count = %zu)", count);
    burst_status_t st = burst_cuda_enter(be, "fill");
    if (st != BURST_OK)
        return st;
    return burst_cuda_status((cudaError_t)burst_cuda_launch_fill(dst, (int64_t)count, value),
                             "fill: launch");
}

static burst_status_t burst_cuda_accumulate(void *be, float *dst, const void *src,
                                            burst_dtype_t src_dtype, size_t count)
{
    if (count == 0)
        return BURST_OK;
    if (!dst || !src)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda accumulate: %s is NULL (count = %zu)",
                           dst ? "src" : "dst", count);
    if (burst_cuda_dtype(src_dtype) < 0)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda accumulate: src_dtype = %d is unknown",
                           (int)src_dtype);
    burst_status_t st = burst_cuda_enter(be, "accumulate");
    if (st != BURST_OK)
        return st;
    return burst_cuda_status((cudaError_t)burst_cuda_launch_accumulate(
                                 dst, src, burst_cuda_dtype(src_dtype), (int64_t)count),
                             "accumulate: launch");
}

/* Can the tensor-core kernels write t (the final output of a one-rank call) themselves: the
 * dtype and shape of `like`, its column pairs aligned words (4 bytes, 8 for fp32)? */
static int burst_cuda_final_fits(const struct burst_tensor *t, const struct burst_tensor *like)
{
    const size_t pair = t->dtype == BURST_DTYPE_FP32 ? 8 : 4; /* bytes of a column pair */
    int fits = t->dtype == like->dtype && (uintptr_t)t->data % pair == 0;
    for (int k = 0; k < BURST_TENSOR_DIMS; k++)
        fits = fits && t->shape[k] == like->shape[k] && (k == 3 || t->stride[k] % 2 == 0);
    return fits;
}

/* The fp8 forward step (a->fp8 set; s has the step's shapes and outputs): its operands' device
 * pointers from their layouts, and the e4m3 kernel. Only where cb->fp8 (the plan asked the
 * backend's features). */
static burst_status_t burst_cuda_fwd_fp8(struct burst_cuda_backend *cb,
                                         const struct burst_fwd_args *a, struct burst_cuda_step *s,
                                         const char *op)
{
    if (!cb->fp8)
        return burst_error(BURST_ERR_UNSUPPORTED, "%s: no fp8 forward on this device", op);
    struct burst_fp8_kv_layout l;
    burst_fp8_kv_layout(s->batch, s->nk, s->hkv, s->d, &l);
    s->f8.q = a->fp8->q;
    s->f8.qs = (const float *)(const void *)(a->fp8->q +
                                             burst_fp8_q_scales_at(s->batch, s->nq, s->hq, s->d));
    s->f8.k = a->fp8->kv + l.k;
    s->f8.vt = a->fp8->kv + l.vt;
    s->f8.ks = (const float *)(const void *)(a->fp8->kv + l.kscale);
    s->f8.vs = (const float *)(const void *)(a->fp8->kv + l.vscale);
    s->f8.np = l.np;
    burst_status_t st = burst_cuda_enter(cb, op + 5);
    struct burst_cuda_step sd = *s;
    if (st == BURST_OK)
        st = burst_cuda_docs(op, &sd);
    if (st == BURST_OK)
        st = burst_cuda_scratch_counters(cb, 2, &sd.sched);
    if (st != BURST_OK)
        return st;
#ifdef BURST_CUDA_SM90A
    const int e = burst_cuda_launch_fwd_fp8(&sd, cb->caps.sms);
#else
    const int e = BURST_CUDA_NO_TMA; /* not reached: cb->fp8 needs the sm_90a kernels */
#endif
    if (e == BURST_CUDA_NO_TMA)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: the driver maps no tensor of the fp8 operands (tensor maps)", op);
    return burst_cuda_status((cudaError_t)e, "fwd_fp8: launch");
}

/* fwd_step (o NULL: merged into a->o_acc, lse_acc) and fwd_final (written to o and lse by the
 * tensor-core forwards, burst_final_row in burst_cuda_mma.cuh; the simt one, and outputs whose
 * column pairs are not aligned words, burst_cuda_final_fits, are declined: the engine
 * accumulates). */
static burst_status_t burst_cuda_fwd(struct burst_cuda_backend *cb, const struct burst_fwd_args *a,
                                     const struct burst_tensor *o, float *lse, const char *op)
{
    struct burst_cuda_step s;
    memset(&s, 0, sizeof s);
    burst_status_t st = burst_cuda_check_qkv(op, a->q, a->k, a->v, NULL, &s);
    if (st != BURST_OK)
        return st;
    const int empty = s.batch == 0 || s.nq == 0 || s.nk == 0 || s.hq == 0;
    if (o) {
        if ((st = burst_cuda_view_checked(op, "o", o, &s.o_out)) != BURST_OK)
            return st;
        if (!burst_cuda_final_fits(o, a->q) || empty ||
            (!a->fp8 && burst_cuda_kind(cb, &s, 0) == BURST_CUDA_FWD_SIMT))
            return BURST_ERR_UNSUPPORTED;
        s.lse_acc = lse;
    } else {
        if (empty)
            return BURST_OK;
        s.o_acc = a->o_acc;
        s.lse_acc = a->lse_acc;
    }
    s.qpos = a->qpos;
    s.kpos = a->kpos;
    s.mask = a->mask;
    s.scale = a->scale;
    s.softcap = a->softcap;
    s.tma = cb->tma;
    burst_cuda_cap_set(&s);
    if (a->fp8)
        return burst_cuda_fwd_fp8(cb, a, &s, op);
    return burst_cuda_run(cb, op, burst_cuda_launch_fwd, &s, 0);
}

static burst_status_t burst_cuda_fwd_step(void *be, const struct burst_fwd_args *a)
{
    if (!a || !a->o_acc || !a->lse_acc)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda fwd_step: args, o_acc or lse_acc is NULL");
    return burst_cuda_fwd(be, a, NULL, NULL, "cuda fwd_step");
}

static burst_status_t burst_cuda_fwd_final(void *be, const struct burst_fwd_args *a,
                                           const struct burst_tensor *o, float *lse)
{
    if (!a || !o || !o->data || !lse)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda fwd_final: args, o or lse is NULL");
    return burst_cuda_fwd(be, a, o, lse, "cuda fwd_final");
}

/* fp8_quant_q: q's e4m3 rows and their scales at dst (runtime/fp8.h). */
static burst_status_t burst_cuda_fp8_quant_q(void *be, const struct burst_tensor *q, void *dst)
{
    struct burst_cuda_backend *cb = be;
    struct burst_cuda_view v;
    burst_status_t st = burst_cuda_view_checked("cuda fp8_quant_q", "q", q, &v);
    if (st == BURST_OK)
        st = burst_cuda_enter(cb, "fp8_quant_q");
    if (st != BURST_OK)
        return st;
    float *scales =
        (float *)(void *)((unsigned char *)dst + burst_fp8_q_scales_at(q->shape[0], q->shape[1],
                                                                       q->shape[2], q->shape[3]));
    return burst_cuda_status(
        (cudaError_t)burst_cuda_launch_fp8_rows(&v, BURST_FP8_QROWS, dst, scales),
        "fp8_quant_q: launch");
}

/* fp8_quant_kv: the K/V block of k, v at dst (runtime/fp8.h). */
static burst_status_t burst_cuda_fp8_quant_kv(void *be, const struct burst_tensor *k,
                                              const struct burst_tensor *v, void *dst)
{
    struct burst_cuda_backend *cb = be;
    struct burst_cuda_view kv, vv;
    burst_status_t st = burst_cuda_view_checked("cuda fp8_quant_kv", "k", k, &kv);
    if (st == BURST_OK)
        st = burst_cuda_view_checked("cuda fp8_quant_kv", "v", v, &vv);
    if (st == BURST_OK)
        st = burst_cuda_enter(cb, "fp8_quant_kv");
    if (st != BURST_OK)
        return st;
    struct burst_fp8_kv_layout l;
    burst_fp8_kv_layout(k->shape[0], k->shape[1], k->shape[2], k->shape[3], &l);
    unsigned char *m = dst;
    int e =
        burst_cuda_launch_fp8_rows(&kv, BURST_FP8_KEYS, m + l.k, (float *)(void *)(m + l.kscale));
    if (e == cudaSuccess)
        e = burst_cuda_launch_fp8_vt(&vv, m + l.vt, (float *)(void *)(m + l.vscale), l.np);
    return burst_cuda_status((cudaError_t)e, "fp8_quant_kv: launch");
}

static burst_status_t burst_cuda_bwd_delta(void *be, const struct burst_tensor *dout,
                                           const struct burst_tensor *o, float *delta)
{
    struct burst_cuda_view vd, vo;
    burst_status_t st;
    if (!delta)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda bwd_delta: delta is NULL");
    if ((st = burst_cuda_view_checked("cuda bwd_delta", "dout", dout, &vd)) != BURST_OK ||
        (st = burst_cuda_view_checked("cuda bwd_delta", "o", o, &vo)) != BURST_OK)
        return st;
    for (int k = 0; k < BURST_TENSOR_DIMS; k++)
        if (dout->shape[k] != o->shape[k])
            return burst_error(BURST_ERR_INVALID_ARG,
                               "cuda bwd_delta: dout->shape[%d] = %lld differs from o->shape[%d] "
                               "= %lld",
                               k, (long long)dout->shape[k], k, (long long)o->shape[k]);
    if ((st = burst_cuda_enter(be, "bwd_delta")) != BURST_OK)
        return st;
    return burst_cuda_status((cudaError_t)burst_cuda_launch_delta(&vd, &vo, delta),
                             "bwd_delta: launch");
}

/* bwd_step (dk NULL: gradients added into a->dq, dk, dv) and bwd_final (dQ added into a->dq,
 * dK and dV written to dk, dv by the tensor-core dK/dV kernels, burst_final_kv_pair in
 * burst_cuda_mma.cuh; the simt one, and outputs whose column pairs are not aligned words,
 * burst_cuda_final_fits, are declined: the engine accumulates). */
static burst_status_t burst_cuda_bwd(struct burst_cuda_backend *cb, const struct burst_bwd_args *a,
                                     const struct burst_tensor *dk, const struct burst_tensor *dv,
                                     const char *op)
{
    struct burst_cuda_step s;
    memset(&s, 0, sizeof s);
    burst_status_t st = burst_cuda_check_qkv(op, a->q, a->k, a->v, a->dout, &s);
    if (st != BURST_OK)
        return st;
    const int empty = s.batch == 0 || s.nq == 0 || s.nk == 0 || s.hq == 0;
    if (dk) {
        if ((st = burst_cuda_view_checked(op, "dk", dk, &s.dk_out)) != BURST_OK ||
            (st = burst_cuda_view_checked(op, "dv", dv, &s.dv_out)) != BURST_OK)
            return st;
        if (!burst_cuda_final_fits(dk, a->k) || !burst_cuda_final_fits(dv, a->k) ||
            dk->dtype != a->q->dtype || empty || burst_cuda_kind(cb, &s, 1) == BURST_CUDA_FWD_SIMT)
            return BURST_ERR_UNSUPPORTED;
    } else {
        if ((!a->dq && !a->dk && !a->dv) || empty)
            return BURST_OK;
        s.dk = a->dk;
        s.dv = a->dv;
    }
    if (!a->lse || !a->delta)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL", op, a->lse ? "delta" : "lse");
    s.qpos = a->qpos;
    s.kpos = a->kpos;
    s.mask = a->mask;
    s.scale = a->scale;
    s.softcap = a->softcap;
    burst_cuda_cap_set(&s);
    s.lse = a->lse;
    s.delta = a->delta;
    s.dq = a->dq;
    s.dq_atomic = cb->dq_atomic && !a->deterministic;
    s.tma = cb->tma;
    return burst_cuda_run(cb, op, burst_cuda_launch_bwd, &s, 1);
}

static burst_status_t burst_cuda_bwd_step(void *be, const struct burst_bwd_args *a)
{
    if (!a)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda bwd_step: args is NULL");
    return burst_cuda_bwd(be, a, NULL, NULL, "cuda bwd_step");
}

static burst_status_t burst_cuda_bwd_final(void *be, const struct burst_bwd_args *a,
                                           const struct burst_tensor *dk,
                                           const struct burst_tensor *dv)
{
    if (!a || !a->dq || !dk || !dk->data || !dv || !dv->data)
        return burst_error(BURST_ERR_INVALID_ARG, "cuda bwd_final: args, dq, dk or dv is NULL");
    return burst_cuda_bwd(be, a, dk, dv, "cuda bwd_final");
}

/* ---- decode_step: one decode step over a paged key/value cache ---------------------------------- */

/* The arguments of a decode step: BURST_ERR_INVALID_ARG naming the argument and its value. */
static burst_status_t burst_cuda_decode_check(const struct burst_decode_args *a)
{
    const char *op = "cuda decode_step";
    if (!a)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: args is NULL", op);
    burst_status_t st = burst_step_check_view(op, "q", a->q);
    if (st != BURST_OK)
        return st;
    const int64_t *sh = a->q->shape;
    if (sh[0] != 1 || sh[1] < 1)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: q->shape = [%lld, %lld, ...]: one sequence of t >= 1 queries", op,
                           (long long)sh[0], (long long)sh[1]);
    if (sh[3] < 8 || sh[3] > 256 || sh[3] % 8 != 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: head dim = %lld is not a multiple of 8 in [8, 256]", op,
                           (long long)sh[3]);
    if (a->hkv < 1 || sh[2] < 1 || sh[2] % a->hkv != 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: hkv = %d does not divide the %lld query heads of q", op, a->hkv,
                           (long long)sh[2]);
    if (a->block_len < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: block_len = %lld (must be >= 1)", op,
                           (long long)a->block_len);
    if (a->nkeys < 0 || a->tail < 0 || a->tail > a->nkeys)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: nkeys = %lld, tail = %lld: need 0 <= tail <= nkeys", op,
                           (long long)a->nkeys, (long long)a->tail);
    if (!(a->scale > 0.0f) || !isfinite(a->scale))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: scale = %g (must be finite and > 0)", op,
                           (double)a->scale);
    if (!(a->softcap >= 0.0f) || !isfinite(a->softcap))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: softcap = %g (must be finite and >= 0)", op,
                           (double)a->softcap);
    if (a->o_out) {
        const struct burst_tensor *o = a->o_out;
        if (a->nkeys < 1)
            return burst_error(BURST_ERR_INVALID_ARG, "%s: o_out with nkeys = %lld (needs >= 1)",
                               op, (long long)a->nkeys);
        if ((st = burst_step_check_view(op, "o_out", o)) != BURST_OK)
            return st;
        for (int i = 0; i < 4; i++)
            if (o->shape[i] != sh[i])
                return burst_error(BURST_ERR_INVALID_ARG,
                                   "%s: o_out->shape[%d] = %lld differs from q's %lld", op, i,
                                   (long long)o->shape[i], (long long)sh[i]);
        if (o->dtype != a->q->dtype)
            return burst_error(BURST_ERR_INVALID_ARG, "%s: o_out's dtype %s differs from q's %s",
                               op, burst_dtype_name(o->dtype), burst_dtype_name(a->q->dtype));
    } else if (!a->o_acc || !a->lse_acc) {
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL", op,
                           a->o_acc ? "lse_acc" : "o_acc");
    }
    if (a->nkeys > 0 && (!a->k_pool || !a->v_pool || !a->blocks || !a->blocks_host))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL (nkeys = %lld)", op,
                           !a->k_pool   ? "k_pool"
                           : !a->v_pool ? "v_pool"
                           : !a->blocks ? "blocks"
                                        : "blocks_host",
                           (long long)a->nkeys);
    if (a->nkeys > 0) { /* a negative pool index would make the kernel read before the pool */
        const int64_t nb = (a->nkeys + a->block_len - 1) / a->block_len;
        for (int64_t b = 0; b < nb; b++)
            if (a->blocks_host[b] < 0)
                return burst_error(BURST_ERR_INVALID_ARG, "%s: blocks_host[%lld] = %d is negative",
                                   op, (long long)b, (int)a->blocks_host[b]);
    }
    return BURST_OK;
}

/* decode_step (backend.h): checks, declines what the kernels do not cover (BURST_ERR_UNSUPPORTED,
 * nothing queued, no message), plans the splits, takes the thread's scratch and launches. */
static burst_status_t burst_cuda_decode_step(void *be, const struct burst_decode_args *args)
{
    struct burst_cuda_backend *cb = be;
    burst_status_t st = burst_cuda_decode_check(args);
    if (st != BURST_OK)
        return st;
    if (args->nkeys == 0)
        return BURST_OK; /* no key: every row untouched */
    const struct burst_tensor *q = args->q;
    const int64_t t = q->shape[1], d = q->shape[3];
    const int dt = burst_cuda_dtype(q->dtype);
    if (!cb->mma || !cb->decode || t > BURST_CUDA_DECODE_TMAX || args->nkeys > INT32_MAX - 64 ||
        args->block_len > INT32_MAX || q->shape[2] > INT32_MAX / BURST_CUDA_DECODE_TMAX ||
        ((uintptr_t)args->k_pool & 15u) != 0 || ((uintptr_t)args->v_pool & 15u) != 0)
        return BURST_ERR_UNSUPPORTED;
    struct burst_cuda_decode k;
    memset(&k, 0, sizeof k);
    k.q = q->data;
    k.q_stride_i = q->stride[1];
    k.q_stride_h = q->stride[2];
    k.k_pool = args->k_pool;
    k.v_pool = args->v_pool;
    k.blocks = args->blocks;
    k.dtype = dt;
    k.t = (int)t;
    k.hq = (int)q->shape[2];
    k.hkv = args->hkv;
    k.group = k.hq / k.hkv;
    k.d = (int)d;
    k.block_len = (int)args->block_len;
    k.nkeys = (int)args->nkeys;
    k.tail = (int)args->tail;
    k.scale = args->scale;
    if (args->softcap > 0.0f) { /* as burst_cuda_cap_set */
        k.cap_in = 2.0f * 1.44269504f * args->scale / args->softcap;
        k.cap_out = args->softcap / args->scale;
    }
    k.o_acc = args->o_acc;
    k.lse_acc = args->lse_acc;
    if (args->o_out) {
        k.o_out = args->o_out->data;
        k.o_stride_i = args->o_out->stride[1];
        k.o_stride_h = args->o_out->stride[2];
        k.lse_out = args->lse_out;
    }
    if ((st = burst_cuda_enter(cb, "decode_step")) != BURST_OK)
        return st;
    if (burst_cuda_decode_plan(&k, cb->caps.sms, cb->caps.smem_block_optin, cb->decode_per_sm) != 0)
        return BURST_ERR_UNSUPPORTED;
    void *scratch = NULL;
    const size_t bytes = burst_cuda_decode_scratch_bytes(&k);
    if ((st = burst_cuda_scratch_get(cb, bytes, &scratch)) != BURST_OK)
        return st;
    k.o_part = scratch;
    k.lse_part = (float *)((char *)scratch + bytes) - (size_t)k.t * k.hq * k.nsplit;
    if ((st = burst_cuda_scratch_counters(cb, (size_t)k.hkv * (size_t)k.chunks, &k.arrived)) !=
        BURST_OK)
        return st;
    return burst_cuda_status(burst_cuda_launch_decode(&k), "decode_step: launch");
}

void burst_cuda_probe(const struct burst_context_params *params, struct burst_sb *out, int json);

/* core.instance_features: e4m3 products where the fp8 forward is set up (cb->fp8). */
static unsigned burst_cuda_features(void *be)
{
    const struct burst_cuda_backend *cb = be;
    return BURST_BE_DOCS | BURST_BE_SOFTCAP | (cb->fp8 ? BURST_BE_FP8 : 0u);
}

const struct burst_backend_ops burst_cuda_backend_ops = {
    .size = sizeof(struct burst_backend_ops),
    .name = "cuda",
    .core =
        {
            .features = BURST_BE_DOCS | BURST_BE_SOFTCAP,
            .instance_features = burst_cuda_features,
            .create = burst_cuda_create,
            .destroy = burst_cuda_destroy,
            .num_threads = burst_cuda_num_threads,
            .probe = burst_cuda_probe,
        },
    .mem =
        {
            .alloc = burst_cuda_alloc,
            .free = burst_cuda_free,
            .device_memory = 1,
            .memcpy = burst_cuda_memcpy,
            .host_alloc = burst_cuda_host_alloc,
            .host_free = burst_cuda_host_free,
            .check_memory = burst_cuda_check_memory,
        },
    .elem =
        {
            .copy = burst_cuda_copy,
            .fill = burst_cuda_fill,
            .accumulate = burst_cuda_accumulate,
        },
    .attn =
        {
            .fwd_step = burst_cuda_fwd_step,
            .bwd_delta = burst_cuda_bwd_delta,
            .bwd_step = burst_cuda_bwd_step,
            .fwd_final = burst_cuda_fwd_final,
            .bwd_final = burst_cuda_bwd_final,
            .decode_step = burst_cuda_decode_step,
            .fp8_quant_q = burst_cuda_fp8_quant_q,
            .fp8_quant_kv = burst_cuda_fp8_quant_kv,
        },
    .stream =
        {
            .sync = burst_cuda_sync,
            .time_mark = burst_cuda_time_mark,
            .time_elapsed = burst_cuda_time_elapsed,
            .time_release = burst_cuda_time_release,
        },
    .devcopy = &burst_cuda_devcopy,
};
