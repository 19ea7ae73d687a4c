/*
 * cuda/burst_cuda_ipc.c - device copies between rank processes of one host, for the ring's
 * device-resident transfers over a process transport (transport.h, the ipc_ members of struct
 * burst_tp_devops; transport/tp_ipc.h runs the protocol).
 *
 * Sender (ipc_export): the descriptor holds the CUDA IPC handle of the allocation around the
 * buffer (cuMemGetAddressRange gives its base: a handle names a whole cudaMalloc allocation)
 * and the offset, plus the IPC handle of an interprocess event recorded on the rank's stream
 * after its writes of the buffer. The event is the sender's marker, destroyed once the receiver
 * has acknowledged.
 *
 * Receiver (ipc_import): opens the allocation (cached, see below) and the event, and queues the
 * copy on its device's copy stream (burst_cuda_copy_stream) after the sender's event and after
 * the receiver's mark taken when it posted the receive (the peer ops' mark); a plain event
 * recorded after the copy is the done marker. Over
 * NVLink / PCIe when the two processes sit on different GPUs (cudaIpcMemLazyEnablePeerAccess),
 * a device-to-device copy on one GPU.
 *
 * Mapping cache: opening a handle costs far more than a ring step's bookkeeping, and the ring
 * sends from the same few buffers at every step, so mappings stay open (IPC_SLOTS, process-wide,
 * keyed by handle and importing device). An open mapping keeps the exporter's memory allocated
 * even after the exporter frees it, so mappings must not outlive their use: one is closed when
 * the backend instance of its device ends (burst_cuda_ipc_close, from the context's destroy:
 * also the peer-failure path), and at a later miss when its exporter has exited, when the
 * exporter sends from a new allocation at the same address (the old one was freed), when it has
 * not been used for IPC_STALE imports (a ring reuses its few buffers at every step, so a mapping
 * idle that long belongs to a plan that is gone), or as the least recently used one when the
 * cache is full. Never while a copy from it may be in flight (busy): a copy given up on (timeout)
 * keeps its mapping open for good. Known limit: a process that destroys a plan and then stops
 * importing keeps up to IPC_SLOTS of the peer's freed blocks alive until its context ends.
 *
 * BURST_IPC_STATS=1 logs (info, subsystem cuda) the host time spent in exports, imports and
 * openings of memory when a cuda instance ends.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "burst_cuda.h"
#include "error.h"
#include "logger.h"
#include "settings.h"
#include "transport.h"

#define IPC_SLOTS 16
#define IPC_STALE 256 /* imports since a mapping's last use after which a miss closes it */

/* cuMemGetAddressRange through the runtime (no link against the driver library). */
typedef int (*range_fn)(unsigned long long *base, size_t *size, unsigned long long ptr);

/* The descriptor on the wire (the sender's ipc_export, the receiver's ipc_import). */
struct ipc_wire {
    cudaIpcMemHandle_t mem;
    cudaIpcEventHandle_t ev;
    uint64_t base;   /* the exporter's address of the allocation */
    uint64_t offset; /* of the buffer in it */
    int32_t pid;     /* the exporter */
    int32_t pad;
};
_Static_assert(sizeof(struct ipc_wire) <= BURST_TP_IPC_DESC, "IPC descriptor too large");
_Static_assert(sizeof(range_fn) == sizeof(void *), "function pointers the size of pointers");

struct ipc_slot {
    int used;
    cudaIpcMemHandle_t mem;
    int device; /* the importing device */
    int32_t pid;
    uint64_t base;
    void *ptr;
    int busy;      /* copies from it that may be in flight */
    uint64_t tick; /* last use */
};

/* A receiver's copy in flight. */
struct ipc_done {
    cudaEvent_t ev;
    int slot; /* -1: no mapping held */
    int complete;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ipc_slot ipc_slots[IPC_SLOTS];
static uint64_t ipc_tick;

/* BURST_IPC_STATS=1: host time of the calls, logged when an instance ends. */
static struct {
    uint64_t exports, imports, opens;
    double export_us, import_us, open_us;
} ipc_stats;

static double ipc_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static void ipc_stats_add(uint64_t *count, double *us, double t0)
{
    pthread_mutex_lock(&ipc_lock);
    (*count)++;
    *us += ipc_now_us() - t0;
    pthread_mutex_unlock(&ipc_lock);
}

static pthread_once_t range_once = PTHREAD_ONCE_INIT;
static range_fn range_get;

static void range_init(void)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        memcpy(&range_get, &fn, sizeof(range_get)); /* ISO C: no object -> function cast */
    (void)cudaGetLastError();
}

burst_status_t burst_cuda_ipc_export(void *be, const void *buf, unsigned char *desc, void **mark_p)
{
    const struct burst_cuda_backend *cb = be;
    struct ipc_wire w;
    memset(&w, 0, sizeof(w));
    *mark_p = NULL;
    double t0 = ipc_now_us();
    burst_status_t st = burst_cuda_enter(cb, "ipc export");
    if (st != BURST_OK)
        return st;
    pthread_once(&range_once, range_init);
    unsigned long long base = 0;
    size_t size = 0;
    if (!range_get || range_get(&base, &size, (unsigned long long)(uintptr_t)buf) != 0)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "cuda ipc export: %p: cuMemGetAddressRange failed (not cudaMalloc'd "
                           "memory of this process?)",
                           buf);
    st = burst_cuda_status(cudaIpcGetMemHandle(&w.mem, (void *)(uintptr_t)base),
                           "ipc export: cudaIpcGetMemHandle");
    cudaEvent_t ev = NULL;
    if (st == BURST_OK)
        st = burst_cuda_status(
            cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess),
            "ipc export: cudaEventCreateWithFlags (interprocess)");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaEventRecord(ev, cudaStreamPerThread),
                               "ipc export: cudaEventRecord");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaIpcGetEventHandle(&w.ev, ev),
                               "ipc export: cudaIpcGetEventHandle");
    if (st != BURST_OK) {
        if (ev)
            cudaEventDestroy(ev);
        return st;
    }
    w.base = base;
    w.offset = (uint64_t)((uintptr_t)buf - (uintptr_t)base);
    w.pid = (int32_t)getpid();
    memcpy(desc, &w, sizeof(w));
    *mark_p = ev;
    ipc_stats_add(&ipc_stats.exports, &ipc_stats.export_us, t0);
    return BURST_OK;
}

static int pid_gone(int32_t pid)
{
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static void slot_close(struct ipc_slot *s)
{
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != s->device)
        cudaSetDevice(s->device);
    cudaIpcCloseMemHandle(s->ptr);
    if (cur >= 0 && cur != s->device)
        cudaSetDevice(cur);
    (void)cudaGetLastError(); /* a dead exporter may make the close complain: nothing to do */
    memset(s, 0, sizeof(*s));
}

/* The mapping of w's allocation on `device`, opened if needed; marks it busy. ipc_lock held. */
static burst_status_t slot_get(const struct ipc_wire *w, int device, int *slot_p)
{
    int free_slot = -1, lru = -1;
    for (int i = 0; i < IPC_SLOTS; i++) {
        struct ipc_slot *s = &ipc_slots[i];
        if (s->used && s->device == device && memcmp(&s->mem, &w->mem, sizeof(w->mem)) == 0) {
            s->busy++;
            s->tick = ++ipc_tick;
            *slot_p = i;
            return BURST_OK;
        }
    }
    /* A miss: first forget what cannot be used again. */
    for (int i = 0; i < IPC_SLOTS; i++) {
        struct ipc_slot *s = &ipc_slots[i];
        if (s->used && !s->busy &&
            ((s->pid == w->pid && s->base == w->base && s->device == device) ||
             ipc_tick - s->tick > IPC_STALE || pid_gone(s->pid)))
            slot_close(s);
        if (!s->used && free_slot < 0)
            free_slot = i;
        if (s->used && !s->busy && (lru < 0 || s->tick < ipc_slots[lru].tick))
            lru = i;
    }
    if (free_slot < 0 && lru < 0)
        return burst_error(BURST_ERR_NO_MEMORY,
                           "cuda ipc import: all %d mappings are in use by copies in flight",
                           IPC_SLOTS);
    if (free_slot < 0) {
        slot_close(&ipc_slots[lru]);
        free_slot = lru;
    }
    struct ipc_slot *s = &ipc_slots[free_slot];
    void *ptr = NULL;
    double t0 = ipc_now_us();
    burst_status_t st =
        burst_cuda_status(cudaIpcOpenMemHandle(&ptr, w->mem, cudaIpcMemLazyEnablePeerAccess),
                          "ipc import: cudaIpcOpenMemHandle (the sender's block)");
    if (st != BURST_OK)
        return st;
    ipc_stats.opens++; /* ipc_lock held */
    ipc_stats.open_us += ipc_now_us() - t0;
    *s = (struct ipc_slot){.used = 1,
                           .mem = w->mem,
                           .device = device,
                           .pid = w->pid,
                           .base = w->base,
                           .ptr = ptr,
                           .busy = 1,
                           .tick = ++ipc_tick};
    *slot_p = free_slot;
    return BURST_OK;
}

/* Queue: wait for the receiver's mark (after) and the sender's event, copy, record done. */
static burst_status_t queue_copy(const struct burst_cuda_backend *cb, void *dst, const void *src,
                                 size_t len, const struct ipc_wire *w, cudaEvent_t after,
                                 cudaEvent_t *done_p)
{
    void *stream = NULL;
    burst_status_t st = burst_cuda_copy_stream(cb, &stream);
    if (st != BURST_OK)
        return st;
    cudaStream_t cs = stream;
    cudaEvent_t theirs = NULL;
    if (after)
        st =
            burst_cuda_status(cudaStreamWaitEvent(cs, after, 0), "ipc import: cudaStreamWaitEvent");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaIpcOpenEventHandle(&theirs, w->ev),
                               "ipc import: cudaIpcOpenEventHandle (the sender's event)");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaStreamWaitEvent(cs, theirs, 0),
                               "ipc import: cudaStreamWaitEvent (the sender's event)");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, cs),
                               "ipc import: cudaMemcpyAsync (from the sender's device)");
    cudaEvent_t done = NULL;
    if (st == BURST_OK)
        st = burst_cuda_status(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                               "ipc import: cudaEventCreateWithFlags");
    if (st == BURST_OK && (st = burst_cuda_status(cudaEventRecord(done, cs),
                                                  "ipc import: cudaEventRecord")) != BURST_OK) {
        cudaEventDestroy(done);
        done = NULL;
    }
    if (theirs) /* events may be destroyed while waits on them are queued */
        cudaEventDestroy(theirs);
    *done_p = done;
    return st;
}

burst_status_t burst_cuda_ipc_import(void *be, void *dst, const unsigned char *desc, size_t len,
                                     void *after, void **done_p)
{
    const struct burst_cuda_backend *cb = be;
    struct ipc_wire w;
    memcpy(&w, desc, sizeof(w));
    *done_p = NULL;
    if (w.pid == (int32_t)getpid())
        return burst_error(BURST_ERR_INTERNAL,
                           "cuda ipc import: the block comes from this very process (ranks that "
                           "are threads use the in-process transport)");
    double t0 = ipc_now_us();
    struct ipc_done *d = calloc(1, sizeof(*d));
    if (!d)
        return burst_error(BURST_ERR_NO_MEMORY, "cuda ipc import: out of memory");
    d->slot = -1;
    burst_status_t st = burst_cuda_enter(cb, "ipc import");
    void *src = NULL;
    if (st == BURST_OK) {
        pthread_mutex_lock(&ipc_lock);
        st = slot_get(&w, cb->device, &d->slot);
        if (st == BURST_OK)
            src = (unsigned char *)ipc_slots[d->slot].ptr + w.offset;
        pthread_mutex_unlock(&ipc_lock);
    }
    if (st == BURST_OK)
        st = queue_copy(cb, dst, src, len, &w, (cudaEvent_t)after, &d->ev);
    if (st != BURST_OK && !d->ev)
        d->complete = 1; /* nothing queued: the mapping is free again */
    *done_p = d;
    ipc_stats_add(&ipc_stats.imports, &ipc_stats.import_us, t0);
    return st;
}

burst_status_t burst_cuda_ipc_test(void *be, void *done, int *complete)
{
    (void)be;
    struct ipc_done *d = done;
    *complete = 0;
    if (d->complete || !d->ev) {
        *complete = 1;
        return BURST_OK;
    }
    cudaError_t e = cudaEventQuery(d->ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return BURST_OK;
    }
    d->complete = 1;
    *complete = 1;
    return burst_cuda_status(e, "ipc import: the copy from the sender's device");
}

void burst_cuda_ipc_finish(void *be, void *done)
{
    (void)be;
    struct ipc_done *d = done;
    if (!d)
        return;
    if (d->ev)
        cudaEventDestroy(d->ev);
    pthread_mutex_lock(&ipc_lock);
    if (d->slot >= 0 && d->complete)
        ipc_slots[d->slot].busy--;
    pthread_mutex_unlock(&ipc_lock);
    free(d);
}

void burst_cuda_ipc_close(int device)
{
    pthread_mutex_lock(&ipc_lock);
    long stats = 0; /* checked by the create (runtime/settings.h); off where changed since */
    if (burst_setting_get("cuda ipc", BURST_SET_IPC_STATS, &stats, NULL) != BURST_OK)
        burst_error_clear();
    if (stats && (ipc_stats.exports || ipc_stats.imports))
        burst_log(BURST_LOG_INFO, BURST_SUB_CUDA, -1,
                  "ipc (pid %d): %llu exports, %.1f us each; %llu imports, %.1f us each, "
                  "including %llu openings of memory, %.1f us each",
                  (int)getpid(), (unsigned long long)ipc_stats.exports,
                  ipc_stats.export_us / (double)(ipc_stats.exports ? ipc_stats.exports : 1),
                  (unsigned long long)ipc_stats.imports,
                  ipc_stats.import_us / (double)(ipc_stats.imports ? ipc_stats.imports : 1),
                  (unsigned long long)ipc_stats.opens,
                  ipc_stats.open_us / (double)(ipc_stats.opens ? ipc_stats.opens : 1));
    for (int i = 0; i < IPC_SLOTS; i++)
        if (ipc_slots[i].used && !ipc_slots[i].busy && ipc_slots[i].device == device)
            slot_close(&ipc_slots[i]);
    pthread_mutex_unlock(&ipc_lock);
}
