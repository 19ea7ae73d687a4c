/*
 * transport/tp_mpi_boot.c - the bootstrap client over MPI (tp_bootstrap.h: burst_boot_join_mpi),
 * for jobs started by Open MPI's mpirun. MPI only carries the bootstrap's exchanges; the ring's
 * traffic goes through libfabric.
 *
 * Exchanges run on a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN (the library never lets
 * MPI kill the process), as non-blocking collectives tested until the timeout: MPI collectives
 * have none of their own. Every MPI call of this file holds mpi_lock, so MPI_THREAD_SERIALIZED is
 * enough even when two threads create communicators (which must then still be created in the
 * same order on every rank, like any collective).
 */
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "error.h"
#include "tp_bootstrap.h"

struct mpi_boot {
    struct burst_boot base;    /* first: ops */
    struct burst_tp_ctrl ctrl; /* burst_boot_ctrl() hands out its address */
    MPI_Comm comm;             /* duplicate of MPI_COMM_WORLD */
    int rank, size, timeout_ms;
    int aborted;  /* ctrl->abort was called: do not finalize (peers may be stuck) */
    int stranded; /* an exchange timed out: its buffers stay allocated, MPI may still write */
};

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int mpi_users; /* live mpi_boot objects; under mpi_lock */
static int mpi_ours;  /* this library called MPI_Init_thread */
static int mpi_stuck; /* a boot left without finalizing: never finalize */

static burst_status_t mpi_error(const char *who, int rank, const char *call, int rc)
{
    char text[MPI_MAX_ERROR_STRING + 1] = "";
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS || n <= 0 || n > MPI_MAX_ERROR_STRING)
        snprintf(text, sizeof(text), "MPI error %d", rc);
    else
        text[n] = '\0';
    return burst_error(BURST_ERR_TRANSPORT, "%s: rank %d: %s failed: %s", who, rank, call, text);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Test `req` until done or the boot's timeout. MPI_SUCCESS, an MPI error, or -1 (timeout). */
static int mpi_wait(struct mpi_boot *b, MPI_Request *req)
{
    int64_t deadline = now_ms() + b->timeout_ms;
    long nap_us = 20;
    for (;;) {
        int done = 0;
        pthread_mutex_lock(&mpi_lock);
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        pthread_mutex_unlock(&mpi_lock);
        if (rc != MPI_SUCCESS || done)
            return rc;
        if (now_ms() >= deadline)
            return -1;
        struct timespec ts = {0, nap_us * 1000};
        nanosleep(&ts, NULL);
        nap_us = nap_us < 1000 ? nap_us * 2 : 1000;
    }
}

static burst_status_t mpi_allgather(struct burst_boot *base, const void *mine, size_t len,
                                    unsigned char **buf_p, const unsigned char **blob, size_t *lens)
{
    static const char *who = "burst_comm_create";
    struct mpi_boot *b = (struct mpi_boot *)base;
    if (len > BURST_BOOT_MAX_BLOB)
        return burst_error(BURST_ERR_INTERNAL, "%s: bootstrap blob of %zu bytes", who, len);
    if (b->stranded)
        return burst_error(BURST_ERR_COMM_FAILED,
                           "%s: rank %d: an earlier MPI exchange of the bootstrap timed out", who,
                           b->rank);
    int g = b->size, mylen = (int)len;
    int *counts = calloc((size_t)g * 2, sizeof(int));
    unsigned char *buf = NULL;
    burst_status_t st = BURST_OK;
    const char *call = "MPI_Iallgather";
    MPI_Request req = MPI_REQUEST_NULL;
    if (!counts)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory for %d ranks", who, g);
    int *displs = counts + g;
    /* Round a: every rank's length. */
    pthread_mutex_lock(&mpi_lock);
    int rc = MPI_Iallgather(&mylen, 1, MPI_INT, counts, 1, MPI_INT, b->comm, &req);
    pthread_mutex_unlock(&mpi_lock);
    if (rc == MPI_SUCCESS)
        rc = mpi_wait(b, &req);
    if (rc != MPI_SUCCESS)
        goto mpi_fail;
    int64_t total = 0;
    for (int r = 0; r < g; r++) {
        if (counts[r] < 0 || counts[r] > BURST_BOOT_MAX_BLOB) {
            st = burst_error(BURST_ERR_TRANSPORT,
                             "%s: rank %d: rank %d announced a bootstrap blob of %d bytes (at "
                             "most %d)",
                             who, b->rank, r, counts[r], BURST_BOOT_MAX_BLOB);
            goto out;
        }
        displs[r] = (int)total;
        total += counts[r];
        if (total > INT_MAX) {
            st = burst_error(BURST_ERR_UNSUPPORTED,
                             "%s: rank %d: bootstrap blobs of %d ranks exceed MPI's int counts",
                             who, b->rank, g);
            goto out;
        }
    }
    /* Round b: the blobs, in rank order, into one allocation. */
    buf = malloc(total ? (size_t)total : 1);
    if (!buf) {
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%lld bytes)", who,
                         (long long)total);
        goto out;
    }
    call = "MPI_Iallgatherv";
    pthread_mutex_lock(&mpi_lock);
    rc = MPI_Iallgatherv(mine, mylen, MPI_BYTE, buf, counts, displs, MPI_BYTE, b->comm, &req);
    pthread_mutex_unlock(&mpi_lock);
    if (rc == MPI_SUCCESS)
        rc = mpi_wait(b, &req);
    if (rc != MPI_SUCCESS)
        goto mpi_fail;
    for (int r = 0; r < g; r++) {
        blob[r] = buf + displs[r];
        lens[r] = (size_t)counts[r];
    }
    *buf_p = buf;
    buf = NULL;
    goto out;
mpi_fail:
    if (rc == -1) {
        /* The request stays pending: MPI may still write into counts / buf, so they stay. */
        b->stranded = 1;
        return burst_error(BURST_ERR_TIMEOUT,
                           "%s: rank %d: %s of the MPI bootstrap did not complete within %d ms "
                           "(a rank is missing or stuck)",
                           who, b->rank, call, b->timeout_ms);
    }
    st = mpi_error(who, b->rank, call, rc);
out:
    free(buf);
    free(counts);
    return st;
}

static burst_status_t mpi_cleanup(struct burst_boot *base, const char *name)
{
    return BURST_OK; /* no launcher-side service to remove /dev/shm entries */
}

static struct burst_tp_ctrl *mpi_ctrl(struct burst_boot *base)
{
    return &((struct mpi_boot *)base)->ctrl;
}

static burst_status_t mpi_poll(struct burst_tp_ctrl *ctrl)
{
    return BURST_OK; /* MPI reports no peer death; mpirun ends the job instead */
}

static void mpi_abort(struct burst_tp_ctrl *ctrl, burst_status_t reason)
{
    struct mpi_boot *b =
        (struct mpi_boot *)(void *)((char *)ctrl - offsetof(struct mpi_boot, ctrl));
    pthread_mutex_lock(&mpi_lock);
    b->aborted = 1;
    pthread_mutex_unlock(&mpi_lock);
}

static void mpi_leave(struct burst_boot *base, int bye)
{
    struct mpi_boot *b = (struct mpi_boot *)base;
    pthread_mutex_lock(&mpi_lock);
    int clean = bye && !b->aborted && !b->stranded;
    if (clean) {
        if (b->comm != MPI_COMM_NULL)
            MPI_Comm_free(&b->comm);
    } else {
        mpi_stuck = 1; /* peers may wait in a collective: MPI_Finalize could hang */
    }
    if (--mpi_users == 0 && mpi_ours && !mpi_stuck) {
        int fin = 1;
        MPI_Finalized(&fin);
        if (!fin)
            MPI_Finalize();
    }
    pthread_mutex_unlock(&mpi_lock);
    if (!b->stranded)
        free(b); /* else leaked on purpose: a pending request points into it */
}

static const struct burst_boot_ops mpi_boot_ops = {
    .name = "mpi",
    .allgather = mpi_allgather,
    .cleanup = mpi_cleanup,
    .ctrl = mpi_ctrl,
    .leave = mpi_leave,
};

static const char *thread_level(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
    }
}

/* Initialize MPI if nobody did; check that this thread may call it. mpi_lock is held. */
static burst_status_t mpi_start(const char *who, int rank)
{
    int inited = 0, fin = 0, level = MPI_THREAD_SINGLE, rc;
    MPI_Finalized(&fin);
    if (fin)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: rank %d: bootstrap \"mpi\": MPI was already finalized in this "
                           "process and cannot start again (a program that creates several "
                           "rings one after another should call MPI_Init itself)",
                           who, rank);
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &level);
        if (rc != MPI_SUCCESS)
            return mpi_error(who, rank, "MPI_Init_thread", rc);
        mpi_ours = 1;
    } else {
        MPI_Query_thread(&level);
    }
    int main_thread = 0;
    MPI_Is_thread_main(&main_thread);
    if (level < MPI_THREAD_SERIALIZED && !main_thread)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: rank %d: bootstrap \"mpi\": MPI runs at %s, so only the thread "
                           "that initialized it may call MPI; create the communicator there or "
                           "initialize MPI with MPI_THREAD_SERIALIZED",
                           who, rank, thread_level(level));
    return BURST_OK;
}

burst_status_t burst_boot_join_mpi(const char *who, int rank, int size, int timeout_ms,
                                   struct burst_boot **boot_p)
{
    struct mpi_boot *b = calloc(1, sizeof(*b));
    if (!b)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    b->base.ops = &mpi_boot_ops;
    b->ctrl.poll = mpi_poll;
    b->ctrl.abort = mpi_abort;
    b->comm = MPI_COMM_NULL;
    b->rank = rank;
    b->size = size;
    b->timeout_ms = timeout_ms;
    pthread_mutex_lock(&mpi_lock);
    burst_status_t st = mpi_start(who, rank);
    if (st != BURST_OK) {
        pthread_mutex_unlock(&mpi_lock);
        free(b);
        return st;
    }
    mpi_users++;
    /* Duplicate the world (non-blocking, so the wait has the timeout) with errors returned on
     * it meanwhile; then the caller's handler goes back on the world. */
    MPI_Errhandler old = MPI_ERRHANDLER_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Comm_get_errhandler(MPI_COMM_WORLD, &old);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_idup(MPI_COMM_WORLD, &b->comm, &req);
    pthread_mutex_unlock(&mpi_lock);
    if (rc == MPI_SUCCESS)
        rc = mpi_wait(b, &req);
    pthread_mutex_lock(&mpi_lock);
    if (old != MPI_ERRHANDLER_NULL) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, old);
        MPI_Errhandler_free(&old);
    }
    int wrank = -1, wsize = -1;
    if (rc == -1) {
        b->stranded = 1; /* the duplicate may still complete into b->comm */
        st = burst_error(BURST_ERR_TIMEOUT,
                         "%s: rank %d: bootstrap \"mpi\": not every rank of MPI_COMM_WORLD "
                         "joined within %d ms",
                         who, rank, timeout_ms);
        goto err;
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(b->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(b->comm, &wrank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(b->comm, &wsize);
    if (rc != MPI_SUCCESS) {
        st = mpi_error(who, rank, "MPI_Comm_idup of MPI_COMM_WORLD", rc);
        goto err;
    }
    if (wrank != rank || wsize != size) {
        st = burst_error(BURST_ERR_INVALID_ARG,
                         "%s: bootstrap \"mpi\": params->rank = %d and params->size = %d, but "
                         "this process is rank %d of %d in MPI_COMM_WORLD",
                         who, rank, size, wrank, wsize);
        goto err;
    }
    pthread_mutex_unlock(&mpi_lock);
    *boot_p = &b->base;
    return BURST_OK;
err:
    /* Not a clean leave: the other ranks may wait in the first exchange. */
    b->aborted = 1;
    pthread_mutex_unlock(&mpi_lock);
    mpi_leave(&b->base, 0);
    return st;
}
