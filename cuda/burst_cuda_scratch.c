/*
 * cuda/burst_cuda_scratch.c - per-thread device scratch of a cuda instance (burst_cuda.h,
 * burst_cuda_scratch_get): memory an op needs only while its kernels run (the decode step's
 * partial results of its key splits), kept between calls so that no call allocates.
 *
 * Every op of a thread runs on that thread's stream (cudaStreamPerThread), so a buffer owned by
 * one thread is reused in stream order without any event: a later kernel of the same thread
 * cannot start before an earlier one that used the buffer has finished. Buffers are found by
 * thread in a short list under a mutex (one entry per thread that ever asked); growing one first
 * drains the thread's stream (its kernels may still read the old buffer), then frees it and
 * allocates the new size rounded up (1 MiB granules, 1.5x the old), filled with 0xff bytes: NaN
 * in every fp32 element, so a kernel reading an element it did not write shows in the tests.
 * Each entry also holds the thread's arrival counters (burst_cuda_scratch_counters): a second
 * buffer grown the same way but filled with zeros, which the kernels leave at zero.
 */
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "burst_cuda.h"
#include "error.h"

/* One device buffer of an entry: its memory and its size. */
struct burst_cuda_buf {
    void *ptr;
    size_t bytes;
};

struct burst_cuda_scratch {
    pthread_t thread;
    struct burst_cuda_buf work; /* burst_cuda_scratch_get: 0xff-filled */
    struct burst_cuda_buf ctr;  /* burst_cuda_scratch_counters: zero-filled */
    struct burst_cuda_scratch *next;
};

/* The calling thread's entry, created empty when it has none; NULL when out of host memory. */
static struct burst_cuda_scratch *burst_cuda_scratch_entry(struct burst_cuda_backend *cb)
{
    const pthread_t self = pthread_self();
    pthread_mutex_lock(&cb->scratch_lock);
    struct burst_cuda_scratch *s = cb->scratch;
    while (s && !pthread_equal(s->thread, self))
        s = s->next;
    if (!s && (s = calloc(1, sizeof *s)) != NULL) {
        s->thread = self;
        s->next = cb->scratch;
        cb->scratch = s;
    }
    pthread_mutex_unlock(&cb->scratch_lock);
    return s;
}

/* Grow b (only the calling thread touches it: no lock) to at least `bytes`, filled with `fill`. */
static burst_status_t burst_cuda_buf_grow(struct burst_cuda_buf *b, size_t bytes, int fill)
{
    if (b->bytes >= bytes && b->ptr)
        return BURST_OK;
    const size_t granule = (size_t)1 << 20;
    size_t want = b->bytes + b->bytes / 2;
    want = want > bytes ? want : bytes;
    want = (want + granule - 1) / granule * granule;
    burst_status_t st = burst_cuda_status(cudaStreamSynchronize(cudaStreamPerThread),
                                          "scratch: draining the stream before growing");
    if (st != BURST_OK)
        return st;
    if (b->ptr)
        cudaFree(b->ptr);
    b->ptr = NULL;
    b->bytes = 0;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, want);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(p, fill, want, cudaStreamPerThread);
    if (e != cudaSuccess) {
        if (p)
            cudaFree(p);
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        return burst_cuda_status(e, "scratch: cudaMalloc");
    }
    b->ptr = p;
    b->bytes = want;
    return BURST_OK;
}

burst_status_t burst_cuda_scratch_get(struct burst_cuda_backend *cb, size_t bytes, void **p_ptr)
{
    *p_ptr = NULL;
    struct burst_cuda_scratch *s = burst_cuda_scratch_entry(cb);
    if (!s)
        return burst_error(BURST_ERR_NO_MEMORY, "cuda scratch: out of host memory");
    burst_status_t st = burst_cuda_buf_grow(&s->work, bytes, 0xff);
    if (st == BURST_OK)
        *p_ptr = s->work.ptr;
    return st;
}

burst_status_t burst_cuda_scratch_counters(struct burst_cuda_backend *cb, size_t n,
                                           unsigned **p_ctr)
{
    *p_ctr = NULL;
    struct burst_cuda_scratch *s = burst_cuda_scratch_entry(cb);
    if (!s)
        return burst_error(BURST_ERR_NO_MEMORY, "cuda scratch: out of host memory");
    burst_status_t st = burst_cuda_buf_grow(&s->ctr, n * sizeof(unsigned), 0);
    if (st == BURST_OK)
        *p_ctr = s->ctr.ptr;
    return st;
}

void burst_cuda_scratch_fini(struct burst_cuda_backend *cb)
{
    struct burst_cuda_scratch *s = cb->scratch;
    while (s) {
        struct burst_cuda_scratch *next = s->next;
        if (s->work.ptr)
            cudaFree(s->work.ptr);
        if (s->ctr.ptr)
            cudaFree(s->ctr.ptr);
        free(s);
        s = next;
    }
    cb->scratch = NULL;
}
