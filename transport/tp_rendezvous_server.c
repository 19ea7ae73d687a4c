/*
 * transport/tp_rendezvous_server.c - the rendezvous service (burst_rendezvous_*, burst/comm.h).
 * The protocol is described in tp_bootstrap.h; the wire helpers are tp_rendezvous_proto.c's.
 *
 * Server: one thread runs poll() over a wake pipe, the listening socket and every connection.
 * Sockets are non-blocking; each connection has an input buffer (one message at a time, its
 * length checked before the payload is allocated) and an output buffer, so a slow or stalled
 * rank never blocks the others. All state is under rv->lock, which the thread drops only while
 * in poll(); report_failure() queues its messages under the lock and wakes the thread. Only the
 * thread closes connections. Connections that have not sent HELLO are limited in number (at
 * the limit the oldest is closed for a new one: a rank sends HELLO at once, so idle strangers
 * cannot lock it out) and closed after RV_HELLO_MS.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "burst/comm.h"
#include "error.h"
#include "tp_bootstrap.h"
#include "tp_peer.h"
#include "tp_rendezvous.h"

enum rv_state {
    CL_NEW,
    CL_JOINED,
    CL_LEFT
};

struct rv_client {
    int fd;
    enum rv_state state;
    int dead;          /* to be closed by the thread */
    int rank;          /* once joined */
    int abort_pending; /* ABORT received; broadcast after this poll round's deaths */
    char abort_why[BURST_BOOT_MAX_TEXT];
    int64_t hello_deadline;
    unsigned char hdr[BURST_BOOT_HDR];
    size_t hdr_got;
    uint32_t type, len; /* of the message being read, once hdr_got == HDR */
    unsigned char *body;
    size_t body_got;
    unsigned char *out;
    size_t out_len, out_off, out_cap;
    int close_after_flush;
    uint32_t round;                    /* last round this rank sent */
    uint32_t pid;                      /* the process id its HELLO gave */
    int pid_verified;                  /* 1: that process holds this connection (tp_peer.h) */
    char shm[BURST_BOOT_MAX_NAME + 1]; /* CLEANUP name, "" = none */
};

struct burst_rendezvous {
    pthread_mutex_t lock;
    pthread_t thread;
    int thread_started;
    int lfd;
    int wake[2];
    int stop;
    int size;
    unsigned char key[BURST_BOOT_KEY_LEN];
    char key_str[BURST_BOOT_KEY_LEN + 1];
    char addr[320];
    char boot_id[BURST_BOOT_BOOT_ID_LEN + 1];
    struct rv_client **cl;
    int ncl, capcl;
    unsigned char *taken; /* [size] rank joined (ever) */
    /* the current GATHER round */
    uint32_t round;
    int have;
    unsigned char **blob; /* [size] */
    uint32_t *blen;       /* [size] */
    atomic_int failed_rank;
};

static void rv_wake(struct burst_rendezvous *rv)
{
    char c = 1;
    ssize_t n = write(rv->wake[1], &c, 1);
    (void)n; /* a full pipe already wakes the thread */
}

/* Send what is buffered without blocking; mark the connection dead on error. */
static void cl_flush(struct rv_client *c)
{
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t n =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            c->dead = 1;
            return;
        }
    }
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
}

/* Queue a message of `type` with a payload in two parts (either may be empty). */
static void cl_queue(struct rv_client *c, uint32_t type, const void *a, size_t alen, const void *b,
                     size_t blen)
{
    if (c->dead)
        return;
    size_t need = c->out_len + BURST_BOOT_HDR + alen + blen;
    if (need > RV_MAX_OUT) {
        c->dead = 1; /* not reading what we send: drop it */
        return;
    }
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 1024;
        while (cap < need)
            cap *= 2;
        unsigned char *p = realloc(c->out, cap);
        if (!p) {
            c->dead = 1;
            return;
        }
        c->out = p;
        c->out_cap = cap;
    }
    unsigned char *h = c->out + c->out_len;
    memcpy(h, burst_rv_magic, 4);
    burst_rv_put_u16(h + 4, BURST_BOOT_VERSION);
    burst_rv_put_u16(h + 6, type);
    burst_rv_put_u32(h + 8, (uint32_t)(alen + blen));
    if (alen)
        memcpy(h + BURST_BOOT_HDR, a, alen);
    if (blen)
        memcpy(h + BURST_BOOT_HDR + alen, b, blen);
    c->out_len = need;
    cl_flush(c);
}

static void cl_queue_text(struct rv_client *c, uint32_t type, uint32_t head, const char *text)
{
    unsigned char h[4];
    burst_rv_put_u32(h, head);
    size_t n = strlen(text);
    cl_queue(c, type, h, 4, text, n > BURST_BOOT_MAX_TEXT ? BURST_BOOT_MAX_TEXT : n);
}

static void cl_refuse(struct rv_client *c, burst_status_t st, const char *why)
{
    cl_queue_text(c, BURST_BOOT_REFUSED, (uint32_t)(int32_t)st, why);
    c->close_after_flush = 1;
}

/* Whether name is a shm segment of process pid as the shm provider names them:
 * "<pid>:<digits>:<digits>" (what a rank may register with CLEANUP: its own). */
static int shm_name_of(const char *name, uint32_t pid)
{
    char own[16];
    int n = snprintf(own, sizeof(own), "%u:", pid);
    if (strncmp(name, own, (size_t)n) != 0)
        return 0;
    int colons = 0;
    for (const char *p = name + n; *p; p++) {
        if (*p == ':' && p[-1] != ':')
            colons++;
        else if (*p < '0' || *p > '9')
            return 0;
    }
    return colons == 1 && name[strlen(name) - 1] != ':';
}

/* Remove the segment a lost rank registered: only a regular file of this user. */
static void rv_unlink_shm(struct burst_rendezvous *rv, struct rv_client *c)
{
    if (c->shm[0]) {
        char path[BURST_BOOT_MAX_NAME + 16];
        struct stat sb;
        snprintf(path, sizeof(path), "/dev/shm/%s", c->shm);
        if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid())
            unlink(path); /* the rank may already have removed it */
        c->shm[0] = '\0';
    }
    (void)rv;
}

/* The first failure of the job: record it and tell every other rank that has not left. */
static void rv_fail(struct burst_rendezvous *rv, int rank, const char *why)
{
    int expected = -1;
    if (!atomic_compare_exchange_strong(&rv->failed_rank, &expected, rank))
        return;
    for (int i = 0; i < rv->ncl; i++) {
        struct rv_client *c = rv->cl[i];
        if (c->state == CL_JOINED && !c->dead && c->rank != rank)
            cl_queue_text(c, BURST_BOOT_FAILED, (uint32_t)rank, why);
    }
}

/* A joined rank's connection ended or broke before BYE: it is gone. Marks c dead. */
static void rv_lost(struct burst_rendezvous *rv, struct rv_client *c, const char *why)
{
    if (c->state == CL_JOINED) {
        rv_unlink_shm(rv, c);
        rv_fail(rv, c->rank, why);
        c->state = CL_LEFT;
    }
    c->dead = 1;
}

static void rv_round_complete(struct burst_rendezvous *rv)
{
    size_t total = 0;
    for (int r = 0; r < rv->size; r++)
        total += 4 + rv->blen[r];
    unsigned char *p = malloc(8 + total);
    if (p) {
        burst_rv_put_u32(p, rv->round);
        burst_rv_put_u32(p + 4, (uint32_t)rv->size);
        size_t o = 8;
        for (int r = 0; r < rv->size; r++) {
            burst_rv_put_u32(p + o, rv->blen[r]);
            if (rv->blen[r])
                memcpy(p + o + 4, rv->blob[r], rv->blen[r]);
            o += 4 + rv->blen[r];
        }
    }
    for (int i = 0; i < rv->ncl; i++) {
        struct rv_client *c = rv->cl[i];
        if (c->state != CL_JOINED)
            continue;
        if (p)
            cl_queue(c, BURST_BOOT_GATHERED, p, 8 + total, NULL, 0);
        else
            cl_queue_text(c, BURST_BOOT_FAILED, (uint32_t)c->rank,
                          "rendezvous service: out of memory");
    }
    free(p);
    for (int r = 0; r < rv->size; r++) {
        free(rv->blob[r]);
        rv->blob[r] = NULL;
        rv->blen[r] = 0;
    }
    rv->have = 0;
    rv->round++;
}

static void rv_hello(struct burst_rendezvous *rv, struct rv_client *c)
{
    char why[256];
    if (c->type != BURST_BOOT_HELLO || c->len != BURST_BOOT_KEY_LEN + 12) {
        cl_refuse(c, BURST_ERR_INVALID_ARG, "expected HELLO as the first message");
        return;
    }
    /* Constant time: every byte of the key is compared. */
    unsigned diff = 0;
    for (int i = 0; i < BURST_BOOT_KEY_LEN; i++)
        diff |= (unsigned)(c->body[i] ^ rv->key[i]);
    uint32_t rank = burst_rv_get_u32(c->body + BURST_BOOT_KEY_LEN);
    uint32_t size = burst_rv_get_u32(c->body + BURST_BOOT_KEY_LEN + 4);
    if (diff != 0) {
        cl_refuse(c, BURST_ERR_INVALID_ARG, "wrong job key");
        return;
    }
    if (size != (uint32_t)rv->size) {
        snprintf(why, sizeof(why), "size = %u, but this job has %d ranks", size, rv->size);
        cl_refuse(c, BURST_ERR_INVALID_ARG, why);
        return;
    }
    if (rank >= (uint32_t)rv->size) {
        snprintf(why, sizeof(why), "rank = %u is not in 0..%d", rank, rv->size - 1);
        cl_refuse(c, BURST_ERR_INVALID_ARG, why);
        return;
    }
    int failed = atomic_load(&rv->failed_rank);
    if (failed >= 0) {
        snprintf(why, sizeof(why), "the job already failed (rank %d)", failed);
        cl_refuse(c, BURST_ERR_PEER_FAILED, why);
        return;
    }
    if (rv->taken[rank]) {
        snprintf(why, sizeof(why), "rank %u has already joined this job", rank);
        cl_refuse(c, BURST_ERR_INVALID_ARG, why);
        return;
    }
    if (rv->round != 1) {
        cl_refuse(c, BURST_ERR_INVALID_ARG, "the job has already started");
        return;
    }
    rv->taken[rank] = 1;
    c->rank = (int)rank;
    c->pid = burst_rv_get_u32(c->body + BURST_BOOT_KEY_LEN + 8);
    c->pid_verified = burst_peer_holds(c->fd, c->pid);
    c->state = CL_JOINED;
    c->round = 0;
    cl_queue(c, BURST_BOOT_WELCOME, NULL, 0, NULL, 0);
}

/* A joined rank broke the protocol: it is failed. */
static void rv_violation(struct burst_rendezvous *rv, struct rv_client *c, const char *what)
{
    char why[384];
    snprintf(why, sizeof(why), "rank %d sent a malformed control message (%.300s)", c->rank, what);
    rv_lost(rv, c, why);
}

static void rv_message(struct burst_rendezvous *rv, struct rv_client *c)
{
    char why[BURST_BOOT_MAX_TEXT + 128];
    if (c->state == CL_NEW) {
        rv_hello(rv, c);
        return;
    }
    if (c->state != CL_JOINED)
        return; /* left: ignore anything after BYE */
    switch (c->type) {
    case BURST_BOOT_GATHER: {
        if (c->len < 4) {
            rv_violation(rv, c, "GATHER shorter than 4 bytes");
            return;
        }
        uint32_t round = burst_rv_get_u32(c->body);
        if (atomic_load(&rv->failed_rank) >= 0)
            return; /* everyone has been told */
        if (round != rv->round || c->round + 1 != round) {
            snprintf(why, sizeof(why), "GATHER of round %u, expected %u", round, rv->round);
            {
                rv_violation(rv, c, why);
                return;
            }
        }
        c->round = round;
        rv->blen[c->rank] = c->len - 4;
        rv->blob[c->rank] = c->body; /* keeps the payload; blob starts 4 bytes in */
        memmove(c->body, c->body + 4, c->len - 4);
        c->body = NULL;
        if (++rv->have == rv->size)
            rv_round_complete(rv);
        return;
    }
    case BURST_BOOT_ABORT: {
        if (c->len < 4) {
            rv_violation(rv, c, "ABORT shorter than 4 bytes");
            return;
        }
        /* Broadcast after this poll round, so that a death seen in the same round (the likely
         * cause of the abort) is what the other ranks hear. */
        char text[BURST_BOOT_MAX_TEXT + 1];
        burst_rv_copy_text(text, sizeof(text), c->body + 4, c->len - 4);
        snprintf(c->abort_why, sizeof(c->abort_why), "rank %d aborted: %.900s", c->rank, text);
        c->abort_pending = 1;
        return;
    }
    case BURST_BOOT_BYE:
        c->state = CL_LEFT;
        c->shm[0] = '\0'; /* it cleaned up after itself */
        return;
    case BURST_BOOT_CLEANUP: {
        if (c->len <= BURST_BOOT_BOOT_ID_LEN) {
            rv_violation(rv, c, "CLEANUP without a name");
            return;
        }
        char boot[BURST_BOOT_BOOT_ID_LEN + 1], name[BURST_BOOT_MAX_NAME + 1];
        burst_rv_copy_text(boot, sizeof(boot), c->body, BURST_BOOT_BOOT_ID_LEN);
        boot[strcspn(boot, "?")] = '\0'; /* NUL padding became '?' */
        size_t nlen = c->len - BURST_BOOT_BOOT_ID_LEN;
        burst_rv_copy_text(name, sizeof(name), c->body + BURST_BOOT_BOOT_ID_LEN, nlen);
        if (strlen(name) != nlen || !shm_name_of(name, c->pid)) {
            rv_violation(rv, c, "CLEANUP name is not a shm segment of the rank's own process");
            return;
        }
        /* Only a segment of this machine (same boot) is ours to remove, and only for a rank
         * whose process id the kernel confirmed: a key holder claiming another process's id
         * is not refused (a rank in another network namespace cannot be checked), but its
         * CLEANUP removes nothing. */
        if (c->pid_verified && rv->boot_id[0] && strcmp(boot, rv->boot_id) == 0)
            memcpy(c->shm, name, nlen + 1);
        return;
    }
    default:
        snprintf(why, sizeof(why), "unexpected message type %u", c->type);
        {
            rv_violation(rv, c, why);
            return;
        }
    }
}

/* What a rank may send: before HELLO is accepted only HELLO (whose bound is small), after it
 * the rank-to-server types; never a server-to-rank type (whose bounds grow with the job).
 * 1, or 0 with the reason in why. */
static int rank_may_send(enum rv_state state, uint32_t type, char *why, size_t cap)
{
    int ok = state == CL_NEW ? type == BURST_BOOT_HELLO
                             : type == BURST_BOOT_GATHER || type == BURST_BOOT_ABORT ||
                                   type == BURST_BOOT_BYE || type == BURST_BOOT_CLEANUP;
    if (!ok)
        snprintf(why, cap, "message type %u is not accepted %s", type,
                 state == CL_NEW ? "before HELLO" : "from a rank");
    return ok;
}

/* Read what is available on c; process complete messages. */
static void rv_read(struct burst_rendezvous *rv, struct rv_client *c)
{
    char why[256];
    while (!c->dead && !c->close_after_flush) {
        ssize_t n;
        if (c->hdr_got < BURST_BOOT_HDR) {
            n = recv(c->fd, c->hdr + c->hdr_got, BURST_BOOT_HDR - c->hdr_got, MSG_DONTWAIT);
        } else {
            n = recv(c->fd, c->body + c->body_got, c->len - c->body_got, MSG_DONTWAIT);
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            if (c->state == CL_JOINED) {
                snprintf(why, sizeof(why),
                         "rank %d closed its control connection without leaving (process died?)",
                         c->rank);
                rv_lost(rv, c, why);
            }
            c->dead = 1;
            return;
        }
        if (c->hdr_got < BURST_BOOT_HDR) {
            c->hdr_got += (size_t)n;
            if (c->hdr_got < BURST_BOOT_HDR)
                continue;
            char what[160];
            if (burst_rv_check_header(c->hdr, rv->size, &c->type, &c->len, what, sizeof(what)) !=
                    0 ||
                !rank_may_send(c->state, c->type, what, sizeof(what))) {
                if (c->state == CL_NEW)
                    cl_refuse(c, BURST_ERR_INVALID_ARG, what);
                else
                    rv_violation(rv, c, what);
                return;
            }
            c->body_got = 0;
            c->body = c->len ? malloc(c->len) : NULL;
            if (c->len && !c->body) {
                rv_lost(rv, c, "rendezvous service: out of memory");
                return;
            }
        } else {
            c->body_got += (size_t)n;
        }
        if (c->body_got == c->len) {
            rv_message(rv, c);
            free(c->body);
            c->body = NULL;
            c->hdr_got = 0;
        }
    }
}

static void cl_free(struct rv_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->body);
    free(c->out);
    free(c);
}

/* At RV_MAX_PENDING connections that have not been admitted, close the oldest of them: a new
 * connection is always heard (a rank sends HELLO at once), idle ones cannot lock ranks out. */
static void rv_evict_idle(struct burst_rendezvous *rv)
{
    int pending = 0;
    struct rv_client *oldest = NULL;
    for (int i = 0; i < rv->ncl; i++) {
        struct rv_client *c = rv->cl[i];
        if (c->state != CL_NEW || c->dead)
            continue;
        pending++;
        if (!oldest || c->hello_deadline < oldest->hello_deadline)
            oldest = c;
    }
    if (pending >= RV_MAX_PENDING && oldest) {
        close(oldest->fd); /* at once: the fd is reused by the new connection's accept */
        oldest->fd = -1;
        oldest->dead = 1;
    }
}

static void rv_accept(struct burst_rendezvous *rv)
{
    for (;;) {
        int fd = accept4(rv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN, or out of fds: try again at the next event */
        }
        rv_evict_idle(rv);
        struct rv_client *c = calloc(1, sizeof(*c));
        if (c && rv->ncl == rv->capcl) {
            int cap = rv->capcl ? 2 * rv->capcl : 16;
            struct rv_client **p = realloc(rv->cl, (size_t)cap * sizeof(*p));
            if (!p) {
                free(c);
                c = NULL;
            } else {
                rv->cl = p;
                rv->capcl = cap;
            }
        }
        if (!c) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->fd = fd;
        c->state = CL_NEW;
        c->rank = -1;
        c->hello_deadline = burst_rv_now_ms() + RV_HELLO_MS;
        rv->cl[rv->ncl++] = c;
    }
}

static void *rv_main(void *arg)
{
    struct burst_rendezvous *rv = arg;
    struct pollfd *pfd = NULL;
    int pcap = 0;
    pthread_mutex_lock(&rv->lock);
    while (!rv->stop) {
        if (pcap < rv->ncl + 2) {
            struct pollfd *p = realloc(pfd, (size_t)(rv->ncl + 2) * sizeof(*p));
            if (p) {
                pfd = p;
                pcap = rv->ncl + 2;
            }
        }
        int n = 0, nc = pcap - 2 < rv->ncl ? pcap - 2 : rv->ncl;
        pfd[n++] = (struct pollfd){.fd = rv->wake[0], .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = rv->lfd, .events = POLLIN};
        int64_t now = burst_rv_now_ms(), timeout = -1;
        for (int i = 0; i < nc; i++) {
            struct rv_client *c = rv->cl[i];
            pfd[n++] = (struct pollfd){.fd = c->fd,
                                       .events = (short)(POLLIN | (c->out_len ? POLLOUT : 0))};
            if (c->state == CL_NEW) {
                int64_t left = c->hello_deadline - now;
                if (timeout < 0 || left < timeout)
                    timeout = left < 0 ? 0 : left;
            }
        }
        pthread_mutex_unlock(&rv->lock);
        int ready = poll(pfd, (nfds_t)n, (int)timeout);
        pthread_mutex_lock(&rv->lock);
        if (ready < 0 && errno != EINTR)
            break;
        if (pfd[0].revents) {
            char buf[64];
            while (read(rv->wake[0], buf, sizeof(buf)) > 0) {
            }
        }
        for (int i = 0; i < nc; i++)
            if (pfd[i + 2].revents & (POLLIN | POLLHUP | POLLERR))
                rv_read(rv, rv->cl[i]);
        if (pfd[1].revents)
            rv_accept(rv);
        now = burst_rv_now_ms();
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: this round's deaths; then its ABORTs (rv_fail keeps the first failure,
             * so a death is what the others hear), also from ranks that left or died since
             * (ABORT, BYE and EOF often arrive together); pass 1: deaths caused by the
             * broadcast. */
            for (int i = 0; i < rv->ncl; i++) {
                struct rv_client *c = rv->cl[i];
                if (c->state == CL_NEW && !c->close_after_flush && now >= c->hello_deadline)
                    c->dead = 1;
                cl_flush(c);
                if (c->close_after_flush && c->out_len == 0)
                    c->dead = 1;
                if (c->dead && c->state == CL_JOINED) {
                    char why[128];
                    snprintf(why, sizeof(why), "the control connection of rank %d broke", c->rank);
                    rv_lost(rv, c, why);
                }
            }
            for (int i = 0; pass == 0 && i < rv->ncl; i++) {
                struct rv_client *c = rv->cl[i];
                if (c->abort_pending) {
                    c->abort_pending = 0;
                    rv_fail(rv, c->rank, c->abort_why);
                }
            }
        }
        int k = 0;
        for (int i = 0; i < rv->ncl; i++) {
            struct rv_client *c = rv->cl[i];
            if (c->dead)
                cl_free(c);
            else
                rv->cl[k++] = c;
        }
        rv->ncl = k;
    }
    pthread_mutex_unlock(&rv->lock);
    free(pfd);
    return NULL;
}

static void rv_free(struct burst_rendezvous *rv)
{
    for (int i = 0; i < rv->ncl; i++)
        cl_free(rv->cl[i]);
    free(rv->cl);
    if (rv->blob)
        for (int r = 0; r < rv->size; r++)
            free(rv->blob[r]);
    free(rv->blob);
    free(rv->blen);
    free(rv->taken);
    if (rv->lfd >= 0)
        close(rv->lfd);
    if (rv->wake[0] >= 0)
        close(rv->wake[0]);
    if (rv->wake[1] >= 0)
        close(rv->wake[1]);
    pthread_mutex_destroy(&rv->lock);
    free(rv);
}

static burst_status_t rv_listen(struct burst_rendezvous *rv, const char *who, const char *host,
                                int port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai != 0)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: bind_addr = \"%s\": %s", who, host,
                           gai_strerror(gai));
    int err = 0;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
            rv->lfd = fd;
            break;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    if (rv->lfd < 0)
        return burst_error(BURST_ERR_TRANSPORT, "%s: cannot listen on %s port %d: %s", who, host,
                           port, strerror(err));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char hbuf[256], sbuf[NI_MAXSERV];
    if (getsockname(rv->lfd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), sbuf, sizeof(sbuf),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return burst_error(BURST_ERR_TRANSPORT, "%s: cannot read the listening address: %s", who,
                           strerror(errno));
    /* A wildcard bind is reached through this host's name. */
    if (strcmp(hbuf, "0.0.0.0") == 0 || strcmp(hbuf, "::") == 0) {
        if (gethostname(hbuf, sizeof(hbuf)) != 0)
            snprintf(hbuf, sizeof(hbuf), "localhost");
        hbuf[sizeof(hbuf) - 1] = '\0';
    }
    if (strchr(hbuf, ':'))
        snprintf(rv->addr, sizeof(rv->addr), "[%s]:%s", hbuf, sbuf);
    else
        snprintf(rv->addr, sizeof(rv->addr), "%s:%s", hbuf, sbuf);
    return BURST_OK;
}

burst_status_t burst_rendezvous_create(const char *bind_addr, int port, int size,
                                       const char *job_key, struct burst_rendezvous **rv_p)
{
    static const char *who = "burst_rendezvous_create";
    burst_error_clear();
    if (!rv_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: rv_p is NULL", who);
    if (port < 0 || port > 65535)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: port = %d is not in 0..65535", who, port);
    if (size < 1 || size > 65536)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: size = %d is not in 1..65536", who, size);
    if (job_key && !burst_boot_key_valid(job_key))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: job_key (%zu characters) is not %d..%d hex digits", who,
                           strlen(job_key), BURST_BOOT_KEY_MIN, BURST_BOOT_KEY_LEN);
    const char *host = bind_addr && *bind_addr ? bind_addr : "127.0.0.1";
    struct burst_rendezvous *rv = calloc(1, sizeof(*rv));
    if (!rv)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    rv->lfd = rv->wake[0] = rv->wake[1] = -1;
    rv->size = size;
    rv->round = 1;
    atomic_init(&rv->failed_rank, -1);
    pthread_mutex_init(&rv->lock, NULL);
    burst_status_t st = BURST_OK;
    rv->taken = calloc((size_t)size, 1);
    rv->blob = calloc((size_t)size, sizeof(*rv->blob));
    rv->blen = calloc((size_t)size, sizeof(*rv->blen));
    if (!rv->taken || !rv->blob || !rv->blen) {
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory for %d ranks", who, size);
        goto err;
    }
    if (job_key) {
        snprintf(rv->key_str, sizeof(rv->key_str), "%s", job_key);
    } else {
        unsigned char raw[32];
        size_t got = 0;
        while (got < sizeof(raw)) {
            ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                st = burst_error(BURST_ERR_INTERNAL, "%s: getrandom: %s", who, strerror(errno));
                goto err;
            }
            got += (size_t)n;
        }
        for (size_t i = 0; i < sizeof(raw); i++)
            snprintf(rv->key_str + 2 * i, 3, "%02x", raw[i]);
    }
    memcpy(rv->key, rv->key_str, strlen(rv->key_str)); /* rest stays NUL */
    burst_boot_boot_id(rv->boot_id, sizeof(rv->boot_id));
    if (pipe2(rv->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        st = burst_error(BURST_ERR_TRANSPORT, "%s: pipe: %s", who, strerror(errno));
        goto err;
    }
    st = rv_listen(rv, who, host, port);
    if (st != BURST_OK)
        goto err;
    if (pthread_create(&rv->thread, NULL, rv_main, rv) != 0) {
        st = burst_error(BURST_ERR_INTERNAL, "%s: cannot start the service thread", who);
        goto err;
    }
    rv->thread_started = 1;
    *rv_p = rv;
    return BURST_OK;
err:
    rv_free(rv);
    return st;
}

const char *burst_rendezvous_address(const struct burst_rendezvous *rv)
{
    return rv ? rv->addr : "";
}

const char *burst_rendezvous_key(const struct burst_rendezvous *rv)
{
    return rv ? rv->key_str : "";
}

void burst_rendezvous_report_failure(struct burst_rendezvous *rv, int rank, const char *why)
{
    if (!rv || rank < 0 || rank >= rv->size)
        return;
    char text[BURST_BOOT_MAX_TEXT];
    snprintf(text, sizeof(text), "rank %d failed: %s", rank, why && *why ? why : "(no reason)");
    pthread_mutex_lock(&rv->lock);
    for (int i = 0; i < rv->ncl; i++) {
        struct rv_client *c = rv->cl[i];
        if (c->rank == rank && c->state == CL_JOINED)
            rv_unlink_shm(rv, c);
    }
    rv_fail(rv, rank, text);
    pthread_mutex_unlock(&rv->lock);
    rv_wake(rv);
}

int burst_rendezvous_failed_rank(const struct burst_rendezvous *rv)
{
    return rv ? atomic_load(&((struct burst_rendezvous *)rv)->failed_rank) : -1;
}

void burst_rendezvous_destroy(struct burst_rendezvous *rv)
{
    if (!rv)
        return;
    if (rv->thread_started) {
        pthread_mutex_lock(&rv->lock);
        rv->stop = 1;
        pthread_mutex_unlock(&rv->lock);
        rv_wake(rv);
        pthread_join(rv->thread, NULL);
    }
    rv_free(rv);
}
