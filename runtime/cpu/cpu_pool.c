/*
 * runtime/cpu/cpu_pool.c - worker threads and a parallel-for with concurrent submitters.
 *
 * Jobs live on their caller's stack and are queued in a list under the pool mutex. Items are
 * claimed with an atomic counter. A worker counts itself into a job (job->active) before
 * touching it; the caller unlinks its job once every item is claimed and waits until no worker
 * is inside, so the job never dies under a worker.
 */
#include "cpu_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

struct burst_cpu_job {
    burst_cpu_task_fn fn;
    void *ctx;
    int64_t n_items;
    size_t scratch_bytes;
    _Atomic int64_t next; /* next unclaimed item */
    _Atomic int failed;   /* the caller has no scratch: items are claimed but not run */
    int active;           /* workers inside the job (pool->mu) */
    pthread_cond_t idle;  /* signalled when active drops to 0 */
    struct burst_cpu_job *link;
};

struct burst_cpu_worker {
    struct burst_cpu_pool *pool;
    pthread_t thread;
    void *scratch;
    size_t scratch_cap;
};

struct burst_cpu_pool {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was queued, or stop */
    struct burst_cpu_job *head;
    int stop;
    int nthreads;
    int nstarted;
    struct burst_cpu_worker *workers;
};

static void *burst_cpu_scratch_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    return p;
}

/* First queued job with unclaimed items (pool->mu held). */
static struct burst_cpu_job *burst_cpu_pool_claimable(struct burst_cpu_pool *pool)
{
    for (struct burst_cpu_job *j = pool->head; j; j = j->link)
        if (atomic_load_explicit(&j->next, memory_order_relaxed) < j->n_items)
            return j;
    return NULL;
}

static void burst_cpu_job_drain(struct burst_cpu_job *job, void *scratch)
{
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (i >= job->n_items)
            break;
        if (!atomic_load_explicit(&job->failed, memory_order_relaxed))
            job->fn(job->ctx, i, scratch);
    }
}

static void *burst_cpu_worker_main(void *arg)
{
    struct burst_cpu_worker *w = arg;
    struct burst_cpu_pool *pool = w->pool;

    pthread_mutex_lock(&pool->mu);
    for (;;) {
        struct burst_cpu_job *job = NULL;
        while (!pool->stop && !(job = burst_cpu_pool_claimable(pool)))
            pthread_cond_wait(&pool->work, &pool->mu);
        if (pool->stop)
            break;
        job->active++;
        pthread_mutex_unlock(&pool->mu);

        int ok = 1;
        if (job->scratch_bytes > w->scratch_cap) {
            free(w->scratch);
            w->scratch = burst_cpu_scratch_alloc(job->scratch_bytes);
            w->scratch_cap = w->scratch ? job->scratch_bytes : 0;
            ok = w->scratch != NULL; /* without scratch this worker just leaves the job */
        }
        if (ok)
            burst_cpu_job_drain(job, w->scratch);

        pthread_mutex_lock(&pool->mu);
        if (--job->active == 0)
            pthread_cond_signal(&job->idle);
        if (!ok) {
            /* do not spin on a job we cannot help with: wait for the next queue change */
            pthread_cond_wait(&pool->work, &pool->mu);
        }
    }
    pthread_mutex_unlock(&pool->mu);
    free(w->scratch);
    return NULL;
}

burst_status_t burst_cpu_pool_create(int nthreads, struct burst_cpu_pool **pool_p)
{
    if (nthreads < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "cpu pool: nthreads = %d is < 1", nthreads);
    struct burst_cpu_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return burst_error(BURST_ERR_NO_MEMORY, "cpu pool: out of memory");
    pool->nthreads = nthreads;
    if (nthreads > 1) {
        pool->workers = calloc((size_t)nthreads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            free(pool);
            return burst_error(BURST_ERR_NO_MEMORY, "cpu pool: out of memory");
        }
    }
    if (pthread_mutex_init(&pool->mu, NULL) != 0)
        goto err_mutex;
    if (pthread_cond_init(&pool->work, NULL) != 0)
        goto err_cond;
    for (int i = 0; i < nthreads - 1; i++) {
        pool->workers[i].pool = pool;
        int rc = pthread_create(&pool->workers[i].thread, NULL, burst_cpu_worker_main,
                                &pool->workers[i]);
        if (rc != 0) {
            burst_cpu_pool_destroy(pool);
            return burst_error(rc == EAGAIN ? BURST_ERR_NO_MEMORY : BURST_ERR_INTERNAL,
                               "cpu pool: pthread_create failed for worker %d of %d (%s)", i,
                               nthreads - 1, strerror(rc));
        }
        pool->nstarted++;
    }
    *pool_p = pool;
    return BURST_OK;

err_cond:
    pthread_mutex_destroy(&pool->mu);
err_mutex:
    free(pool->workers);
    free(pool);
    return burst_error(BURST_ERR_INTERNAL, "cpu pool: mutex/condition init failed");
}

void burst_cpu_pool_destroy(struct burst_cpu_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->nstarted; i++)
        pthread_join(pool->workers[i].thread, NULL);
    pthread_cond_destroy(&pool->work);
    pthread_mutex_destroy(&pool->mu);
    free(pool->workers);
    free(pool);
}

int burst_cpu_pool_size(const struct burst_cpu_pool *pool)
{
    return pool->nthreads;
}

burst_status_t burst_cpu_pool_run(struct burst_cpu_pool *pool, int64_t n_items,
                                  size_t scratch_bytes, burst_cpu_task_fn fn, void *ctx)
{
    if (n_items <= 0)
        return BURST_OK;
    void *scratch = burst_cpu_scratch_alloc(scratch_bytes);

    if (pool->nstarted == 0 || n_items == 1) {
        if (!scratch)
            return burst_error(BURST_ERR_NO_MEMORY,
                               "cpu backend: no memory for %zu bytes of "
                               "scratch",
                               scratch_bytes);
        for (int64_t i = 0; i < n_items; i++)
            fn(ctx, i, scratch);
        free(scratch);
        return BURST_OK;
    }

    struct burst_cpu_job job;
    memset(&job, 0, sizeof job);
    job.fn = fn;
    job.ctx = ctx;
    job.n_items = n_items;
    job.scratch_bytes = scratch_bytes;
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, scratch == NULL);
    if (pthread_cond_init(&job.idle, NULL) != 0) {
        free(scratch);
        return burst_error(BURST_ERR_INTERNAL, "cpu pool: condition init failed");
    }

    pthread_mutex_lock(&pool->mu);
    struct burst_cpu_job **tail = &pool->head;
    while (*tail)
        tail = &(*tail)->link;
    *tail = &job;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mu);

    burst_cpu_job_drain(&job, scratch);

    pthread_mutex_lock(&pool->mu);
    for (struct burst_cpu_job **p = &pool->head; *p; p = &(*p)->link) {
        if (*p == &job) {
            *p = job.link;
            break;
        }
    }
    while (job.active > 0)
        pthread_cond_wait(&job.idle, &pool->mu);
    pthread_mutex_unlock(&pool->mu);

    pthread_cond_destroy(&job.idle);
    free(scratch);
    if (atomic_load(&job.failed))
        return burst_error(BURST_ERR_NO_MEMORY, "cpu backend: no memory for %zu bytes of scratch",
                           scratch_bytes);
    return BURST_OK;
}
