/*
 * transport/tp_rendezvous.c - the rendezvous service (burst_rendezvous_*, burst/comm.h) and the
 * rank-side client (tp_bootstrap.h). The protocol is described in tp_bootstrap.h.
 *
 * Server: one thread runs poll() over a wake pipe, the listening socket and every connection.
 * Sockets are non-blocking; each connection has an input buffer (one message at a time, its
 * length checked before the payload is allocated) and an output buffer, so a slow or stalled
 * rank never blocks the others. All state is under rv->lock, which the thread drops only while
 * in poll(); report_failure() queues its messages under the lock and wakes the thread. Only the
 * thread closes connections. Connections that have not sent HELLO are limited in number (at
 * the limit the oldest is closed for a new one: a rank sends HELLO at once, so idle strangers
 * cannot lock it out) and closed after RV_HELLO_MS.
 *
 * Client: a non-blocking socket and poll() with a deadline for every wait; after the setup rounds
 * the socket is the control channel (struct burst_tp_ctrl) that the transport polls.
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

#define RV_HELLO_MS 30000      /* a connection must send HELLO within this */
#define RV_MAX_PENDING 64      /* connections that have not sent HELLO yet (oldest evicted) */
#define RV_MAX_OUT (64u << 20) /* output buffered for one connection */
#define RV_RETRY_MS 50         /* client: pause between refused connection attempts */

static const unsigned char boot_magic[4] = {'B', 'R', 'S', 'T'};

/* ---- shared helpers ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_u16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get_u16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Largest payload a message of `type` may carry (size: ranks of the job), or -1 if the type is
 * unknown. */
static int64_t max_payload(uint32_t type, int size)
{
    switch (type) {
    case BURST_BOOT_HELLO: return BURST_BOOT_KEY_LEN + 12;
    case BURST_BOOT_WELCOME: return 0;
    case BURST_BOOT_REFUSED: return 4 + BURST_BOOT_MAX_TEXT;
    case BURST_BOOT_GATHER: return 4 + BURST_BOOT_MAX_BLOB;
    case BURST_BOOT_GATHERED: return 8 + (int64_t)size * (4 + BURST_BOOT_MAX_BLOB);
    case BURST_BOOT_ABORT: return 4 + BURST_BOOT_MAX_TEXT;
    case BURST_BOOT_FAILED: return 4 + BURST_BOOT_MAX_TEXT;
    case BURST_BOOT_BYE: return 0;
    case BURST_BOOT_CLEANUP: return BURST_BOOT_BOOT_ID_LEN + BURST_BOOT_MAX_NAME;
    }
    return -1;
}

/* Check a header: 0, or -1 with a reason in why. */
static int check_header(const unsigned char *h, int size, uint32_t *type_p, uint32_t *len_p,
                        char *why, size_t cap)
{
    if (memcmp(h, boot_magic, 4) != 0) {
        snprintf(why, cap, "bad magic %02x%02x%02x%02x (not a burst rendezvous message)", h[0],
                 h[1], h[2], h[3]);
        return -1;
    }
    uint32_t ver = get_u16(h + 4), type = get_u16(h + 6), len = get_u32(h + 8);
    if (ver != BURST_BOOT_VERSION) {
        snprintf(why, cap, "protocol version %u, expected %d", ver, BURST_BOOT_VERSION);
        return -1;
    }
    int64_t max = max_payload(type, size);
    if (max < 0) {
        snprintf(why, cap, "unknown message type %u", type);
        return -1;
    }
    if ((int64_t)len > max) {
        snprintf(why, cap, "message type %u with %u payload bytes (at most %lld)", type, len,
                 (long long)max);
        return -1;
    }
    *type_p = type;
    *len_p = len;
    return 0;
}

/* Copy a wire text into a NUL-terminated buffer, replacing non-printable bytes. */
static void copy_text(char *dst, size_t cap, const unsigned char *src, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    for (size_t i = 0; i < len; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? (char)src[i] : '?';
    dst[len] = '\0';
}

int burst_boot_key_valid(const char *key)
{
    if (!key)
        return 0;
    size_t n = strlen(key);
    if (n < BURST_BOOT_KEY_MIN || n > BURST_BOOT_KEY_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return 0;
    }
    return 1;
}

void burst_boot_boot_id(char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return;
    if (!fgets(buf, (int)cap, f))
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
}

/* ---- server ---- */

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
    memcpy(h, boot_magic, 4);
    put_u16(h + 4, BURST_BOOT_VERSION);
    put_u16(h + 6, type);
    put_u32(h + 8, (uint32_t)(alen + blen));
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
    put_u32(h, head);
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
        put_u32(p, rv->round);
        put_u32(p + 4, (uint32_t)rv->size);
        size_t o = 8;
        for (int r = 0; r < rv->size; r++) {
            put_u32(p + o, rv->blen[r]);
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
    uint32_t rank = get_u32(c->body + BURST_BOOT_KEY_LEN);
    uint32_t size = get_u32(c->body + BURST_BOOT_KEY_LEN + 4);
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
    c->pid = get_u32(c->body + BURST_BOOT_KEY_LEN + 8);
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
        uint32_t round = get_u32(c->body);
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
        copy_text(text, sizeof(text), c->body + 4, c->len - 4);
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
        copy_text(boot, sizeof(boot), c->body, BURST_BOOT_BOOT_ID_LEN);
        boot[strcspn(boot, "?")] = '\0'; /* NUL padding became '?' */
        size_t nlen = c->len - BURST_BOOT_BOOT_ID_LEN;
        copy_text(name, sizeof(name), c->body + BURST_BOOT_BOOT_ID_LEN, nlen);
        if (strlen(name) != nlen || !shm_name_of(name, c->pid)) {
            rv_violation(rv, c, "CLEANUP name is not a shm segment of the rank's own process");
            return;
        }
        /* Only a segment of this machine (same boot) is ours to remove. */
        if (rv->boot_id[0] && strcmp(boot, rv->boot_id) == 0)
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
            if (check_header(c->hdr, rv->size, &c->type, &c->len, what, sizeof(what)) != 0 ||
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
        c->hello_deadline = now_ms() + RV_HELLO_MS;
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
        int64_t now = now_ms(), timeout = -1;
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
        now = now_ms();
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
                    snprintf(why, sizeof(why), "the control connection of rank %d broke",
                             c->rank);
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

/* ---- client ---- */

struct rv_boot {
    struct burst_boot base;    /* first: ops */
    struct burst_tp_ctrl ctrl; /* burst_boot_ctrl() hands out its address */
    pthread_mutex_t lock;
    int fd;
    int rank, size, timeout_ms;
    uint32_t round;
    char addr[300];
    int aborted;
    burst_status_t fail_st; /* BURST_OK until the channel reports a failure */
    char fail_msg[480];
    /* control phase: bytes of a partially received message */
    unsigned char in[BURST_BOOT_HDR + 4 + BURST_BOOT_MAX_TEXT];
    size_t in_len;
};

/* Wait until fd is ready for `events` or the deadline (ms, monotonic) passes: 0 (ready, or
 * interrupted: the caller retries), or -1 with errno (ETIMEDOUT). */
static int wait_ready(int fd, short events, int64_t deadline)
{
    int64_t left = deadline - now_ms();
    if (left <= 0) {
        errno = ETIMEDOUT;
        return -1;
    }
    struct pollfd pf = {.fd = fd, .events = events};
    return poll(&pf, 1, (int)left) < 0 && errno != EINTR ? -1 : 0;
}

/* Send all of buf before deadline (ms, monotonic). 0, or -1 with errno (ETIMEDOUT). */
static int send_all(int fd, const void *buf, size_t len, int64_t deadline)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (wait_ready(fd, POLLOUT, deadline) != 0)
            return -1;
    }
    return 0;
}

/* Receive exactly len bytes before deadline. 0, or -1 with errno (ETIMEDOUT; ECONNRESET on
 * EOF). */
static int recv_all(int fd, void *buf, size_t len, int64_t deadline)
{
    unsigned char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (wait_ready(fd, POLLIN, deadline) != 0)
            return -1;
    }
    return 0;
}

static int boot_send(struct rv_boot *b, uint32_t type, const void *a, size_t alen, const void *c,
                     size_t clen, int64_t deadline)
{
    unsigned char h[BURST_BOOT_HDR];
    memcpy(h, boot_magic, 4);
    put_u16(h + 4, BURST_BOOT_VERSION);
    put_u16(h + 6, type);
    put_u32(h + 8, (uint32_t)(alen + clen));
    if (send_all(b->fd, h, sizeof(h), deadline) != 0)
        return -1;
    if (alen && send_all(b->fd, a, alen, deadline) != 0)
        return -1;
    if (clen && send_all(b->fd, c, clen, deadline) != 0)
        return -1;
    return 0;
}

static burst_status_t boot_io_error(struct rv_boot *b, const char *who, const char *what)
{
    int e = errno;
    if (e == ETIMEDOUT)
        return burst_error(BURST_ERR_TIMEOUT,
                           "%s: rank %d: rendezvous %s: no answer to %s within %d ms", who, b->rank,
                           b->addr, what, b->timeout_ms);
    if (e == ECONNRESET || e == EPIPE)
        return burst_error(BURST_ERR_PEER_FAILED,
                           "%s: rank %d: rendezvous %s closed the connection during %s "
                           "(launcher gone)",
                           who, b->rank, b->addr, what);
    return burst_error(BURST_ERR_TRANSPORT, "%s: rank %d: rendezvous %s: %s: %s", who, b->rank,
                       b->addr, what, strerror(e));
}

/* A FAILED or REFUSED payload as an error. */
static burst_status_t boot_remote_error(struct rv_boot *b, const char *who, uint32_t type,
                                        const unsigned char *p, size_t len)
{
    char text[BURST_BOOT_MAX_TEXT + 1];
    copy_text(text, sizeof(text), p + 4, len - 4);
    if (type == BURST_BOOT_FAILED)
        return burst_error(BURST_ERR_PEER_FAILED, "%s: rank %d: peer rank %u failed: %s", who,
                           b->rank, get_u32(p), text);
    int32_t st = (int32_t)get_u32(p);
    if (st != BURST_ERR_PEER_FAILED)
        st = BURST_ERR_INVALID_ARG;
    return burst_error((burst_status_t)st, "%s: rank %d: rendezvous %s refused to admit it: %s",
                       who, b->rank, b->addr, text);
}

/* Receive one message of the setup phase. *body_p: malloc'ed payload (or NULL if empty). */
static burst_status_t boot_recv(struct rv_boot *b, const char *who, const char *what,
                                uint32_t *type_p, unsigned char **body_p, uint32_t *len_p)
{
    unsigned char h[BURST_BOOT_HDR];
    int64_t deadline = now_ms() + b->timeout_ms;
    if (recv_all(b->fd, h, sizeof(h), deadline) != 0)
        return boot_io_error(b, who, what);
    uint32_t type, len;
    char why[160];
    if (check_header(h, b->size, &type, &len, why, sizeof(why)) != 0)
        return burst_error(BURST_ERR_TRANSPORT, "%s: rank %d: rendezvous %s: bad message: %s", who,
                           b->rank, b->addr, why);
    if ((type == BURST_BOOT_FAILED || type == BURST_BOOT_REFUSED) && len < 4)
        return burst_error(BURST_ERR_TRANSPORT,
                           "%s: rank %d: rendezvous %s: bad message: type %u of %u bytes", who,
                           b->rank, b->addr, type, len);
    unsigned char *body = len ? malloc(len) : NULL;
    if (len && !body)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%u bytes)", who, len);
    if (len && recv_all(b->fd, body, len, deadline) != 0) {
        free(body);
        return boot_io_error(b, who, what);
    }
    if (type == BURST_BOOT_FAILED || type == BURST_BOOT_REFUSED) {
        burst_status_t st = boot_remote_error(b, who, type, body, len);
        free(body);
        return st;
    }
    *type_p = type;
    *body_p = body;
    *len_p = len;
    return BURST_OK;
}

static burst_status_t boot_connect(struct rv_boot *b, const char *who, const char *rendezvous)
{
    char host[256];
    const char *colon = strrchr(rendezvous, ':');
    size_t hl = colon ? (size_t)(colon - rendezvous) : 0;
    if (!colon || hl == 0 || hl >= sizeof(host))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: rendezvous = \"%s\" is not \"host:port\"",
                           who, rendezvous);
    memcpy(host, rendezvous, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') { /* [v6 address] */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: rendezvous = \"%s\": port \"%s\" is not in 1..65535", who,
                           rendezvous, colon + 1);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, colon + 1, &hints, &ai);
    if (gai != 0)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: rendezvous = \"%s\": host \"%s\": %s", who,
                           rendezvous, host, gai_strerror(gai));
    int64_t deadline = now_ms() + b->timeout_ms;
    int err = 0;
    for (;;) {
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            int fd =
                socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
            if (fd < 0) {
                err = errno;
                continue;
            }
            int rc = connect(fd, a->ai_addr, a->ai_addrlen);
            if (rc != 0 && errno == EINPROGRESS) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                int64_t left = deadline - now_ms();
                socklen_t sl = sizeof(err);
                if (left > 0 && poll(&pf, 1, (int)left) == 1 &&
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) == 0 && err == 0)
                    rc = 0;
                else if (!err)
                    err = ETIMEDOUT;
            } else if (rc != 0) {
                err = errno;
            }
            if (rc == 0) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                b->fd = fd;
                freeaddrinfo(ai);
                return BURST_OK;
            }
            close(fd);
        }
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;
        struct timespec ts = {0, (long)(left < RV_RETRY_MS ? left : RV_RETRY_MS) * 1000000L};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    return burst_error(err == ECONNREFUSED ? BURST_ERR_TIMEOUT : BURST_ERR_TRANSPORT,
                       "%s: rank %d: cannot reach the rendezvous at %s within %d ms: %s", who,
                       b->rank, rendezvous, b->timeout_ms, strerror(err));
}

static burst_status_t boot_poll(struct burst_tp_ctrl *ctrl);
static void boot_abort(struct burst_tp_ctrl *ctrl, burst_status_t reason);
static const struct burst_boot_ops rv_boot_ops;

static struct rv_boot *rv_boot_of_ctrl(struct burst_tp_ctrl *ctrl)
{
    return (struct rv_boot *)(void *)((char *)ctrl - offsetof(struct rv_boot, ctrl));
}

/* Connect, send HELLO, receive WELCOME. */
static burst_status_t boot_hello(struct rv_boot *b, const char *who, const char *rendezvous,
                                 const char *job_key)
{
    burst_status_t st = boot_connect(b, who, rendezvous);
    if (st != BURST_OK)
        return st;
    unsigned char hello[BURST_BOOT_KEY_LEN + 12] = {0};
    memcpy(hello, job_key, strlen(job_key)); /* validated: <= 64 hex digits */
    put_u32(hello + BURST_BOOT_KEY_LEN, (uint32_t)b->rank);
    put_u32(hello + BURST_BOOT_KEY_LEN + 4, (uint32_t)b->size);
    put_u32(hello + BURST_BOOT_KEY_LEN + 8, (uint32_t)getpid());
    uint32_t type = 0, len;
    unsigned char *body = NULL;
    if (boot_send(b, BURST_BOOT_HELLO, hello, sizeof(hello), NULL, 0, now_ms() + b->timeout_ms))
        return boot_io_error(b, who, "HELLO");
    st = boot_recv(b, who, "HELLO", &type, &body, &len);
    free(body);
    if (st == BURST_OK && type != BURST_BOOT_WELCOME)
        st = burst_error(BURST_ERR_TRANSPORT,
                         "%s: rank %d: rendezvous %s answered HELLO with message type %u", who,
                         b->rank, b->addr, type);
    return st;
}

burst_status_t burst_boot_join(const char *who, const char *rendezvous, const char *job_key,
                               int rank, int size, int timeout_ms, struct burst_boot **boot_p)
{
    struct rv_boot *b = calloc(1, sizeof(*b));
    if (!b)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    b->base.ops = &rv_boot_ops;
    b->ctrl.poll = boot_poll;
    b->ctrl.abort = boot_abort;
    b->fd = -1;
    b->rank = rank;
    b->size = size;
    b->timeout_ms = timeout_ms;
    b->fail_st = BURST_OK;
    snprintf(b->addr, sizeof(b->addr), "%s", rendezvous);
    pthread_mutex_init(&b->lock, NULL);
    burst_status_t st = boot_hello(b, who, rendezvous, job_key);
    if (st != BURST_OK)
        goto err;
    *boot_p = &b->base;
    return BURST_OK;
err:
    burst_boot_leave(&b->base, 0);
    return st;
}

static burst_status_t rv_allgather(struct burst_boot *base, const void *mine, size_t len,
                                   unsigned char **buf_p, const unsigned char **blob, size_t *lens)
{
    struct rv_boot *b = (struct rv_boot *)base;
    static const char *who = "burst_comm_create";
    if (len > BURST_BOOT_MAX_BLOB)
        return burst_error(BURST_ERR_INTERNAL, "%s: bootstrap blob of %zu bytes", who, len);
    uint32_t round = ++b->round;
    unsigned char rh[4];
    put_u32(rh, round);
    if (boot_send(b, BURST_BOOT_GATHER, rh, 4, mine, len, now_ms() + b->timeout_ms) != 0)
        return boot_io_error(b, who, "GATHER");
    uint32_t type, blen;
    unsigned char *body = NULL;
    char what[48];
    snprintf(what, sizeof(what), "the exchange of round %u", round);
    burst_status_t st = boot_recv(b, who, what, &type, &body, &blen);
    if (st != BURST_OK)
        return st;
    /* Check every length before using it. */
    const char *bad = NULL;
    if (type != BURST_BOOT_GATHERED)
        bad = "not a GATHERED message";
    else if (blen < 8 || get_u32(body) != round || get_u32(body + 4) != (uint32_t)b->size)
        bad = "wrong round or count";
    size_t o = 8;
    for (int r = 0; !bad && r < b->size; r++) {
        if (blen - o < 4) {
            bad = "truncated";
            break;
        }
        uint32_t l = get_u32(body + o);
        if (l > BURST_BOOT_MAX_BLOB || l > blen - o - 4) {
            bad = "blob length out of bounds";
            break;
        }
        blob[r] = body + o + 4;
        lens[r] = l;
        o += 4 + (size_t)l;
    }
    if (!bad && o != blen)
        bad = "trailing bytes";
    if (bad) {
        free(body);
        return burst_error(BURST_ERR_TRANSPORT,
                           "%s: rank %d: rendezvous %s: bad answer to round %u: %s", who, b->rank,
                           b->addr, round, bad);
    }
    *buf_p = body;
    return BURST_OK;
}

static burst_status_t rv_cleanup(struct burst_boot *base, const char *name)
{
    struct rv_boot *b = (struct rv_boot *)base;
    size_t n = strlen(name);
    if (n == 0 || n > BURST_BOOT_MAX_NAME || strchr(name, '/'))
        return BURST_OK; /* not a plain name: nothing the server could remove */
    char boot[BURST_BOOT_BOOT_ID_LEN + 1] = {0};
    unsigned char field[BURST_BOOT_BOOT_ID_LEN] = {0};
    burst_boot_boot_id(boot, sizeof(boot));
    memcpy(field, boot, strlen(boot));
    if (boot_send(b, BURST_BOOT_CLEANUP, field, sizeof(field), name, n, now_ms() + b->timeout_ms) !=
        0)
        return boot_io_error(b, "burst_comm_create", "CLEANUP");
    return BURST_OK;
}

static struct burst_tp_ctrl *rv_ctrl(struct burst_boot *base)
{
    return &((struct rv_boot *)base)->ctrl;
}

/* Record the channel's failure (first one wins); the lock is held. */
static void boot_set_failure(struct rv_boot *b, const char *fmt, ...) BURST_PRINTF(2, 3);

static void boot_set_failure(struct rv_boot *b, const char *fmt, ...)
{
    if (b->fail_st != BURST_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->fail_msg, sizeof(b->fail_msg), fmt, ap);
    va_end(ap);
    b->fail_st = BURST_ERR_PEER_FAILED;
}

static burst_status_t boot_poll(struct burst_tp_ctrl *ctrl)
{
    struct rv_boot *b = rv_boot_of_ctrl(ctrl);
    pthread_mutex_lock(&b->lock);
    while (b->fail_st == BURST_OK && b->fd >= 0) {
        size_t want = b->in_len < BURST_BOOT_HDR ? BURST_BOOT_HDR - b->in_len : 0;
        uint32_t type = 0, len = 0;
        char why[160];
        if (b->in_len >= BURST_BOOT_HDR) {
            /* header already checked when it completed; FAILED is the only message here */
            len = get_u32(b->in + 8);
            want = BURST_BOOT_HDR + len - b->in_len;
        }
        if (want) {
            ssize_t n = recv(b->fd, b->in + b->in_len, want, MSG_DONTWAIT);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (n <= 0) {
                boot_set_failure(b,
                                 "rank %d: the rendezvous %s closed the control connection "
                                 "(launcher gone)",
                                 b->rank, b->addr);
                break;
            }
            b->in_len += (size_t)n;
            if (b->in_len == BURST_BOOT_HDR) {
                int bad = check_header(b->in, b->size, &type, &len, why, sizeof(why)) != 0;
                if (!bad && (type != BURST_BOOT_FAILED || len < 4)) {
                    bad = 1;
                    snprintf(why, sizeof(why), "unexpected message type %u of %u bytes", type, len);
                }
                if (bad) {
                    boot_set_failure(b, "rank %d: bad control message from the rendezvous %s: %s",
                                     b->rank, b->addr, why);
                    break;
                }
            }
            continue;
        }
        /* A complete FAILED message. */
        char text[BURST_BOOT_MAX_TEXT + 1];
        copy_text(text, sizeof(text), b->in + BURST_BOOT_HDR + 4, len - 4);
        boot_set_failure(b, "rank %d: peer rank %u failed: %s", b->rank,
                         get_u32(b->in + BURST_BOOT_HDR), text);
        b->in_len = 0;
    }
    burst_status_t st = b->fail_st;
    pthread_mutex_unlock(&b->lock);
    if (st != BURST_OK)
        return burst_error(st, "%s", b->fail_msg);
    return BURST_OK;
}

static void boot_abort(struct burst_tp_ctrl *ctrl, burst_status_t reason)
{
    struct rv_boot *b = rv_boot_of_ctrl(ctrl);
    pthread_mutex_lock(&b->lock);
    if (!b->aborted && b->fd >= 0) {
        b->aborted = 1;
        char text[BURST_BOOT_MAX_TEXT];
        const char *msg = burst_last_error();
        snprintf(text, sizeof(text), "%s%s%s", burst_status_str(reason), *msg ? ": " : "", msg);
        unsigned char h[4];
        put_u32(h, (uint32_t)(int32_t)reason);
        /* Small enough for an empty socket buffer; if it does not fit the job is failing
         * anyway and the connection's end tells the server. */
        boot_send(b, BURST_BOOT_ABORT, h, 4, text, strlen(text), now_ms());
    }
    pthread_mutex_unlock(&b->lock);
}

static void rv_leave(struct burst_boot *base, int bye)
{
    struct rv_boot *b = (struct rv_boot *)base;
    if (b->fd >= 0) {
        if (bye && boot_send(b, BURST_BOOT_BYE, NULL, 0, NULL, 0, now_ms() + 1000) == 0) {
            /* Read what the server sent so that close() sends FIN, not RST (which could drop
             * the BYE at the server). */
            shutdown(b->fd, SHUT_WR);
            char buf[256];
            while (recv(b->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
            }
        }
        close(b->fd);
    }
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static const struct burst_boot_ops rv_boot_ops = {
    .name = "rendezvous",
    .allgather = rv_allgather,
    .cleanup = rv_cleanup,
    .ctrl = rv_ctrl,
    .leave = rv_leave,
};
