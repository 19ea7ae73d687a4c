/*
 * transport/tp_rendezvous_client.c - the rank-side client of the rendezvous (tp_bootstrap.h:
 * burst_boot_join and the control channel).
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
#include "tp_rendezvous.h"

struct rv_boot {
    struct burst_boot base;    /* first: ops */
    struct burst_tp_ctrl ctrl; /* burst_boot_ctrl() hands out its address */
    pthread_mutex_t lock;
    int fd;
    int rank, size, timeout_ms;
    int up; /* the service listened before this rank started: refused = gone */
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
    int64_t left = deadline - burst_rv_now_ms();
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
    memcpy(h, burst_rv_magic, 4);
    burst_rv_put_u16(h + 4, BURST_BOOT_VERSION);
    burst_rv_put_u16(h + 6, type);
    burst_rv_put_u32(h + 8, (uint32_t)(alen + clen));
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
    burst_rv_copy_text(text, sizeof(text), p + 4, len - 4);
    if (type == BURST_BOOT_FAILED)
        return burst_error(BURST_ERR_PEER_FAILED, "%s: rank %d: peer rank %u failed: %s", who,
                           b->rank, burst_rv_get_u32(p), text);
    int32_t st = (int32_t)burst_rv_get_u32(p);
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
    int64_t deadline = burst_rv_now_ms() + b->timeout_ms;
    if (recv_all(b->fd, h, sizeof(h), deadline) != 0)
        return boot_io_error(b, who, what);
    uint32_t type, len;
    char why[160];
    if (burst_rv_check_header(h, b->size, &type, &len, why, sizeof(why)) != 0)
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
    int64_t deadline = burst_rv_now_ms() + b->timeout_ms;
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
                int64_t left = deadline - burst_rv_now_ms();
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
        if (err == ECONNREFUSED && b->up) {
            freeaddrinfo(ai);
            return burst_error(BURST_ERR_PEER_FAILED,
                               "%s: rank %d: the rendezvous at %s refused the connection: it "
                               "listened before the ranks started, so it is gone (its launcher "
                               "ended)",
                               who, b->rank, rendezvous);
        }
        int64_t left = deadline - burst_rv_now_ms();
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
    burst_rv_put_u32(hello + BURST_BOOT_KEY_LEN, (uint32_t)b->rank);
    burst_rv_put_u32(hello + BURST_BOOT_KEY_LEN + 4, (uint32_t)b->size);
    burst_rv_put_u32(hello + BURST_BOOT_KEY_LEN + 8, (uint32_t)getpid());
    uint32_t type = 0, len;
    unsigned char *body = NULL;
    if (boot_send(b, BURST_BOOT_HELLO, hello, sizeof(hello), NULL, 0,
                  burst_rv_now_ms() + b->timeout_ms))
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
                               int rank, int size, int timeout_ms, int up,
                               struct burst_boot **boot_p)
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
    b->up = up;
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
    burst_rv_put_u32(rh, round);
    if (boot_send(b, BURST_BOOT_GATHER, rh, 4, mine, len, burst_rv_now_ms() + b->timeout_ms) != 0)
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
    else if (blen < 8 || burst_rv_get_u32(body) != round ||
             burst_rv_get_u32(body + 4) != (uint32_t)b->size)
        bad = "wrong round or count";
    size_t o = 8;
    for (int r = 0; !bad && r < b->size; r++) {
        if (blen - o < 4) {
            bad = "truncated";
            break;
        }
        uint32_t l = burst_rv_get_u32(body + o);
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
    if (boot_send(b, BURST_BOOT_CLEANUP, field, sizeof(field), name, n,
                  burst_rv_now_ms() + b->timeout_ms) != 0)
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
            len = burst_rv_get_u32(b->in + 8);
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
                int bad = burst_rv_check_header(b->in, b->size, &type, &len, why, sizeof(why)) != 0;
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
        burst_rv_copy_text(text, sizeof(text), b->in + BURST_BOOT_HDR + 4, len - 4);
        boot_set_failure(b, "rank %d: peer rank %u failed: %s", b->rank,
                         burst_rv_get_u32(b->in + BURST_BOOT_HDR), text);
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
        burst_rv_put_u32(h, (uint32_t)(int32_t)reason);
        /* Small enough for an empty socket buffer; if it does not fit the job is failing
         * anyway and the connection's end tells the server. */
        boot_send(b, BURST_BOOT_ABORT, h, 4, text, strlen(text), burst_rv_now_ms());
    }
    pthread_mutex_unlock(&b->lock);
}

static void rv_leave(struct burst_boot *base, int bye)
{
    struct rv_boot *b = (struct rv_boot *)base;
    if (b->fd >= 0) {
        if (bye && boot_send(b, BURST_BOOT_BYE, NULL, 0, NULL, 0, burst_rv_now_ms() + 1000) == 0) {
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
