/*
 * cuda/burst_cuda_share.c - device memory of another backend of this process (a vulkan rank's
 * buffers, on the same GPU or another one) imported for the cuda copy engine, so that ring
 * blocks between a cuda and a vulkan rank go device to device (transport.h, share_*;
 * runtime/ring_xfer.h).
 *
 * The exporter describes the allocation holding a buffer (share_export: an id unique in the
 * process, its size and the buffer's offset; a file descriptor on request); the first message
 * on an allocation imports it with cudaImportExternalMemory and maps the whole of it with
 * cudaExternalMemoryGetMappedBuffer, and later ones find the mapping in the instance's cache by
 * id. The import is made on the CUDA device of the exporter's UUID (share_device), which may be
 * another GPU than the instance's: share_reach told the plan which devices the instance's copy
 * engine reaches peer to peer (burst_cuda_peer.c enables the access on the first copy), so a
 * block goes from one GPU's memory straight into the other's vulkan buffer over NVLink or PCIe.
 * A mapping keeps the memory alive after its exporter freed it, so each new import first
 * drops the mappings whose allocation is gone (share_live); the instance drops them all when it
 * is destroyed. Freed memory is never in use by a copy: the ring frees its buffers only after
 * its transfers have completed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "burst_cuda.h"
#include "error.h"
#include "transport.h"

struct share_map {
    uint64_t id;
    int (*live)(uint64_t id); /* the exporter's share_live */
    cudaExternalMemory_t ext;
    unsigned char *base; /* the whole allocation, mapped on device dev */
    uint64_t size;
    int dev; /* the CUDA device of the exporter's memory */
};

struct burst_cuda_share {
    pthread_mutex_t lock;
    struct share_map *maps;
    size_t n, cap;
};

/* Drop a mapping, on its device; the caller restores its current device afterwards. */
static void share_drop(struct share_map *m)
{
    cudaSetDevice(m->dev);
    cudaFree(m->base);
    cudaDestroyExternalMemory(m->ext);
}

/* The CUDA device whose UUID this is (cb's own first), or -1. */
static int share_device_of(const struct burst_cuda_backend *cb, const unsigned char uuid[16])
{
    if (memcmp(cb->uuid, uuid, 16) == 0)
        return cb->device;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp pr;
        if (cudaGetDeviceProperties(&pr, d) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        if (memcmp(pr.uuid.bytes, uuid, 16) == 0)
            return d;
    }
    return -1;
}

int burst_cuda_share_reach(void *be, const unsigned char uuid[16])
{
    const struct burst_cuda_backend *cb = be;
    int d = share_device_of(cb, uuid), can = 0;
    if (d < 0)
        return 0;
    if (d == cb->device)
        return 1;
    if (cudaDeviceCanAccessPeer(&can, cb->device, d) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return can != 0;
}

burst_status_t burst_cuda_share_device(void *be, unsigned char uuid[16])
{
    const struct burst_cuda_backend *cb = be;
    for (int i = 0; i < 16; i++)
        uuid[i] = cb->uuid[i];
    return BURST_OK;
}

/* Import the allocation of owner that holds buf into a new entry of the cache, after dropping
 * the entries of freed allocations, on the CUDA device of owner's UUID; the caller holds the
 * lock and makes its own device current again afterwards. */
static burst_status_t share_import_new(const struct burst_cuda_backend *cb,
                                       struct burst_cuda_share *sh,
                                       const struct burst_tp_dev *owner, const void *buf,
                                       size_t len, struct share_map **m_p)
{
    for (size_t i = 0; i < sh->n;) /* first drop the mappings of freed allocations */
        if (!sh->maps[i].live(sh->maps[i].id)) {
            share_drop(&sh->maps[i]);
            sh->maps[i] = sh->maps[--sh->n];
        } else {
            i++;
        }
    if (sh->n == sh->cap) {
        size_t cap = sh->cap ? 2 * sh->cap : 16;
        struct share_map *nm = realloc(sh->maps, cap * sizeof *nm);
        if (!nm)
            return burst_error(BURST_ERR_NO_MEMORY, "cuda transfer: out of memory");
        sh->maps = nm;
        sh->cap = cap;
    }
    unsigned char uuid[16];
    burst_status_t st = owner->ops->share_device(owner->be, uuid);
    if (st != BURST_OK)
        return st;
    int dev = share_device_of(cb, uuid);
    if (dev < 0)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "cuda transfer: the device of a vulkan buffer is no CUDA device here");
    st = burst_cuda_status(cudaSetDevice(dev), "transfer: cudaSetDevice (a vulkan buffer's)");
    if (st != BURST_OK)
        return st;
    struct burst_tp_share d;
    st = owner->ops->share_export(owner->be, buf, len, 1, &d);
    if (st != BURST_OK)
        return st;
    struct cudaExternalMemoryHandleDesc hd = {
        .type = cudaExternalMemoryHandleTypeOpaqueFd,
        .handle.fd = d.fd,
        .size = d.size,
        .flags = d.dedicated ? cudaExternalMemoryDedicated : 0,
    };
    cudaExternalMemory_t ext = NULL;
    st = burst_cuda_status(cudaImportExternalMemory(&ext, &hd),
                           "transfer: cudaImportExternalMemory (a vulkan buffer)");
    if (st != BURST_OK) {
        close(d.fd); /* imported, the descriptor belongs to cuda */
        return st;
    }
    struct cudaExternalMemoryBufferDesc bd = {.offset = 0, .size = d.size};
    void *base = NULL;
    st = burst_cuda_status(cudaExternalMemoryGetMappedBuffer(&base, ext, &bd),
                           "transfer: cudaExternalMemoryGetMappedBuffer (a vulkan buffer)");
    if (st != BURST_OK) {
        cudaDestroyExternalMemory(ext);
        return st;
    }
    struct share_map *m = &sh->maps[sh->n++];
    *m = (struct share_map){d.id, owner->ops->share_live, ext, base, d.size, dev};
    *m_p = m;
    return BURST_OK;
}

burst_status_t burst_cuda_share_import(void *be, const struct burst_tp_dev *owner, const void *buf,
                                       size_t len, void **ptr_p)
{
    struct burst_cuda_backend *cb = be;
    *ptr_p = NULL;
    struct burst_tp_share d;
    burst_status_t st = owner->ops->share_export(owner->be, buf, len, 0, &d);
    if (st != BURST_OK)
        return st;
    struct burst_cuda_share *sh = cb->share;
    pthread_mutex_lock(&sh->lock);
    struct share_map *m = NULL;
    for (size_t i = 0; i < sh->n && !m; i++)
        if (sh->maps[i].id == d.id)
            m = &sh->maps[i];
    if (!m) { /* share_import_new may leave another device current: enter again after */
        st = share_import_new(cb, sh, owner, buf, len, &m);
        burst_status_t st2 = burst_cuda_enter(cb, "transfer: import");
        if (st == BURST_OK)
            st = st2;
    }
    if (st == BURST_OK && (d.offset > m->size || len > m->size - d.offset))
        st = burst_error(BURST_ERR_INTERNAL,
                         "cuda transfer: %zu bytes at offset %llu of a shared allocation of %llu",
                         len, (unsigned long long)d.offset, (unsigned long long)m->size);
    if (st == BURST_OK)
        *ptr_p = m->base + d.offset;
    pthread_mutex_unlock(&sh->lock);
    return st;
}

burst_status_t burst_cuda_share_init(struct burst_cuda_backend *cb)
{
    cb->share = calloc(1, sizeof *cb->share);
    if (!cb->share)
        return burst_error(BURST_ERR_NO_MEMORY, "cuda create: out of memory");
    pthread_mutex_init(&cb->share->lock, NULL);
    return BURST_OK;
}

void burst_cuda_share_fini(struct burst_cuda_backend *cb)
{
    struct burst_cuda_share *sh = cb->share;
    if (!sh)
        return;
    for (size_t i = 0; i < sh->n; i++)
        share_drop(&sh->maps[i]);
    if (sh->n)
        (void)burst_cuda_enter(cb, "destroy");
    free(sh->maps);
    pthread_mutex_destroy(&sh->lock);
    free(sh);
    cb->share = NULL;
}
