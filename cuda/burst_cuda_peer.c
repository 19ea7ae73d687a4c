/*
 * cuda/burst_cuda_peer.c - device-to-device copies between the ranks of one process, for the
 * ring's device-resident transfers (transport.h, struct burst_tp_devops; runtime/ring_xfer.c).
 * The ops table also names the copies between processes (burst_cuda_ipc.c), which share the
 * copy streams (burst_cuda_copy_stream).
 *
 * Markers are cuda events (timing off). mark() records one on the calling thread's stream
 * (cudaStreamPerThread, where every op of the rank runs); copy() queues the copy on a copy stream
 * of the copier's device, made to wait for both marks, and records the completion event there.
 * The copy stream is created once per device and never blocks on the legacy default stream, so a
 * block moves while the ranks' kernels run. Between two devices the copy goes over NVLink / PCIe
 * peer to peer: peer access is enabled both ways on the first copy between them (where the
 * devices cannot reach each other the driver stages the copy itself; still correct).
 */
#include <pthread.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "transport.h"
#include "burst_cuda.h"
#include "error.h"

#define PEER_MAX_DEVICES 64

static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t copy_stream[PEER_MAX_DEVICES];
static unsigned char peer_on[PEER_MAX_DEVICES][PEER_MAX_DEVICES]; /* 1 tried, 2 enabled */

static burst_status_t peer_mark(void *be, void **mark_p)
{
    return burst_cuda_event_here(be, 0, "transfer: mark", mark_p);
}

/* The device of a device pointer, or -1. */
static int peer_device_of(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

/* Enable peer access between devices a and b (both ways), once; the caller holds peer_lock and
 * restores its current device afterwards. */
static void peer_enable(int a, int b)
{
    if (a < 0 || b < 0 || a == b || a >= PEER_MAX_DEVICES || b >= PEER_MAX_DEVICES || peer_on[a][b])
        return;
    int pairs[2][2] = {{a, b}, {b, a}};
    for (int i = 0; i < 2; i++) {
        int from = pairs[i][0], to = pairs[i][1], can = 0;
        peer_on[from][to] = 1;
        if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can ||
            cudaSetDevice(from) != cudaSuccess)
            continue;
        cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
        if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled)
            peer_on[from][to] = 2;
        (void)cudaGetLastError(); /* not sticky: a refusal only means staged peer copies */
    }
}

/* The copy stream of the instance's device, created on first use; the caller holds peer_lock
 * and has made the device current. */
static burst_status_t peer_stream_locked(const struct burst_cuda_backend *cb, cudaStream_t *cs_p)
{
    burst_status_t st = BURST_OK;
    if (!copy_stream[cb->device])
        st = burst_cuda_status(
            cudaStreamCreateWithFlags(&copy_stream[cb->device], cudaStreamNonBlocking),
            "transfer: cudaStreamCreateWithFlags");
    *cs_p = copy_stream[cb->device];
    return st;
}

static burst_status_t peer_device_ok(const struct burst_cuda_backend *cb)
{
    if (cb->device < 0 || cb->device >= PEER_MAX_DEVICES)
        return burst_error(BURST_ERR_UNSUPPORTED, "cuda transfer: device %d: more than %d devices",
                           cb->device, PEER_MAX_DEVICES);
    return BURST_OK;
}

burst_status_t burst_cuda_copy_stream(const struct burst_cuda_backend *cb, void **stream_p)
{
    cudaStream_t cs = NULL;
    burst_status_t st = peer_device_ok(cb);
    if (st == BURST_OK)
        st = burst_cuda_enter(cb, "transfer: copy");
    if (st == BURST_OK) {
        pthread_mutex_lock(&peer_lock);
        st = peer_stream_locked(cb, &cs);
        pthread_mutex_unlock(&peer_lock);
    }
    *stream_p = cs;
    return st;
}

static burst_status_t peer_copy(void *be, void *dst, const void *src, size_t len, void *after_a,
                                void *after_b, void **done_p)
{
    const struct burst_cuda_backend *cb = be;
    *done_p = NULL;
    burst_status_t st = peer_device_ok(cb);
    if (st != BURST_OK)
        return st;
    int ds = peer_device_of(src), dd = peer_device_of(dst);
    cudaStream_t cs = NULL;
    pthread_mutex_lock(&peer_lock);
    peer_enable(ds, dd);
    st = burst_cuda_enter(cb, "transfer: copy");
    if (st == BURST_OK)
        st = peer_stream_locked(cb, &cs);
    pthread_mutex_unlock(&peer_lock);
    if (st != BURST_OK)
        return st;
    cudaEvent_t done = NULL;
    if (after_a)
        st = burst_cuda_status(cudaStreamWaitEvent(cs, (cudaEvent_t)after_a, 0),
                               "transfer: cudaStreamWaitEvent");
    if (st == BURST_OK && after_b)
        st = burst_cuda_status(cudaStreamWaitEvent(cs, (cudaEvent_t)after_b, 0),
                               "transfer: cudaStreamWaitEvent");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, cs),
                               "transfer: cudaMemcpyAsync (device to device)");
    if (st == BURST_OK)
        st = burst_cuda_status(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                               "transfer: cudaEventCreateWithFlags");
    if (st == BURST_OK && (st = burst_cuda_status(cudaEventRecord(done, cs),
                                                  "transfer: cudaEventRecord")) != BURST_OK) {
        cudaEventDestroy(done);
        done = NULL;
    }
    *done_p = done;
    return st;
}

static burst_status_t peer_wait(void *be, void *mark)
{
    (void)be;
    if (!mark)
        return BURST_OK;
    return burst_cuda_status(cudaEventSynchronize((cudaEvent_t)mark),
                             "transfer: cudaEventSynchronize (the copy failed)");
}

static void peer_release(void *be, void *mark)
{
    (void)be;
    if (mark)
        cudaEventDestroy((cudaEvent_t)mark);
}

const struct burst_tp_devops burst_cuda_devcopy = {
    .mark = peer_mark,
    .copy = peer_copy,
    .wait = peer_wait,
    .release = peer_release,
    .ipc_export = burst_cuda_ipc_export, /* burst_cuda_ipc.c */
    .ipc_import = burst_cuda_ipc_import,
    .ipc_test = burst_cuda_ipc_test,
    .ipc_finish = burst_cuda_ipc_finish,
    .share_device = burst_cuda_share_device, /* burst_cuda_share.c */
    .share_import = burst_cuda_share_import,
    .share_reach = burst_cuda_share_reach,
};
