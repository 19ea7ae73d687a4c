/*
 * tests/fuzz/fuzz_rendezvous.c - libFuzzer target: the rendezvous service's control-message parser
 * (transport/tp_rendezvous_server.c: header check, HELLO, GATHER rounds, ABORT, BYE, CLEANUP,
 * protocol violations), fed through real loopback connections as a stranger or a rank would.
 *
 * Input: byte 0 = job size (1 + b % 3); the rest is split at every "\xffSPL" into the byte
 * streams of up to 3 connections, each sent whole, in order, on its own connection. The job key
 * is fixed (KEY below) so that seeds can hold a valid HELLO and reach the messages after it.
 * Then every connection is half-closed and read until the service closes it, and the service
 * is destroyed: every input runs against a fresh service. No crash, no sanitizer report, no
 * leak, and the service must close every connection it was sent EOF on (a wait of more than
 * 10 s is reported as a hang).
 *
 * The service removes /dev/shm/<name> for a rank that dies after CLEANUP; unlink() is replaced
 * below so that an input can never remove a real file.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "burst/burst.h"

#define KEY "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define MAXCONN 3

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int unlink(const char *path);

/* The service's only file removal (the CLEANUP segment): never done while fuzzing. */
int unlink(const char *path)
{
    (void)path;
    errno = ENOENT;
    return -1;
}

static int connect_to(const char *addr)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", addr);
    char *colon = strrchr(host, ':');
    if (!colon)
        return -1;
    *colon = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return; /* the service closed it: fine */
        p += k;
        n -= (size_t)k;
    }
}

/* Read until EOF; abort when the service keeps the connection open for 10 s after our EOF. */
static void drain(int fd)
{
    char buf[4096];
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, 10000);
        if (r == 0) {
            fprintf(stderr, "the rendezvous kept a half-closed connection open for 10 s\n");
            abort();
        }
        if (r < 0 && errno == EINTR)
            continue;
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0 && !(k < 0 && errno == EINTR))
            return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int G = 1 + data[0] % 3;
    struct burst_rendezvous *rv = NULL;
    if (burst_rendezvous_create(NULL, 0, G, KEY, &rv) != BURST_OK)
        return 0; /* e.g. no free port for a moment: not the parser's business */
    const uint8_t *p = data + 1, *end = data + size;
    int fds[MAXCONN], nfd = 0;
    while (nfd < MAXCONN) {
        const uint8_t *cut = NULL;
        for (const uint8_t *q = p; q + 4 <= end && !cut; q++)
            if (memcmp(q, "\xffSPL", 4) == 0)
                cut = q;
        const uint8_t *stop = cut && nfd + 1 < MAXCONN ? cut : end;
        int fd = connect_to(burst_rendezvous_address(rv));
        if (fd < 0)
            break;
        fds[nfd++] = fd;
        send_all(fd, p, (size_t)(stop - p));
        if (stop == end)
            break;
        p = stop + 4;
    }
    for (int i = 0; i < nfd; i++)
        shutdown(fds[i], SHUT_WR);
    for (int i = 0; i < nfd; i++) {
        drain(fds[i]);
        close(fds[i]);
    }
    burst_rendezvous_destroy(rv);
    return 0;
}
