/*
 * cuda/burst_cuda_share.c - device memory of another backend of this process (a vulkan rank's
 * buffers on the same GPU) imported for the cuda copy engine, so that ring blocks between a cuda
 * and a vulkan rank go device to device (transport.h, share_*; runtime/ring_xfer.h).
 *
 * The exporter describes the allocation holding a buffer (share_export: an id unique in the
 * process, its size and the buffer's offset; a file descriptor on request); the first message
 * on an allocation imports it with cudaImportExternalMemory and maps the whole of it with
 * cudaExternalMemoryGetMappedBuffer, and later ones find the mapping in the instance's cache by
 * id. A mapping keeps the memory alive after its exporter freed it, so each new import first
 * drops the mappings whose allocation is gone (share_live); the instance drops them all when it
 * is destroyed. Freed memory is never in use by a copy: the ring frees its buffers only after
 * its transfers have completed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "burst_cuda.h"
#include "error.h"
#include "transport.h"

struct share_map {
    uint64_t id;
    int (*live)(uint64_t id); /* the exporter's share_live */
    cudaExternalMemory_t ext;
    unsigned char *base; /* the whole allocation, mapped on this instance's device */
    uint64_t size;
};

struct burst_cuda_share {
    pthread_mutex_t lock;
    struct share_map *maps;
    size_t n, cap;
};

static void share_drop(struct share_map *m)
{
    cudaFree(m->base);
    cudaDestroyExternalMemory(m->ext);
}

burst_status_t burst_cuda_share_device(void *be, unsigned char uuid[16])
{
    const struct burst_cuda_backend *cb = be;
    for (int i = 0; i < 16; i++)
        uuid[i] = cb->uuid[i];
    return BURST_OK;
}

/* Import the allocation of owner that holds buf into a new entry of the cache, after dropping
 * the entries of freed allocations; the caller holds the lock and has made the device current. */
static burst_status_t share_import_new(struct burst_cuda_share *sh,
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
    struct burst_tp_share d;
    burst_status_t st = owner->ops->share_export(owner->be, buf, len, 1, &d);
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
    *m = (struct share_map){d.id, owner->ops->share_live, ext, base, d.size};
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
    if (!m && (st = burst_cuda_enter(cb, "transfer: import")) == BURST_OK)
        st = share_import_new(sh, owner, buf, len, &m);
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
    free(sh->maps);
    pthread_mutex_destroy(&sh->lock);
    free(sh);
    cb->share = NULL;
}
