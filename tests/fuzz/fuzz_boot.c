/*
 * tests/fuzz/fuzz_boot.c - libFuzzer target: a rank's side of the rendezvous protocol
 * (transport/tp_rendezvous_client.c: the answer to HELLO, REFUSED / FAILED texts, the GATHERED
 * answers of the exchange rounds with their per-rank lengths, and the control channel's FAILED
 * messages), facing a rendezvous that sends arbitrary bytes.
 *
 * Input: byte 0 = job size (1 + b % 4), byte 1 = exchange rounds to attempt (b % 4); the rest is
 * what a fake service on loopback sends, whole, after it has read the rank's HELLO; then it
 * half-closes the connection. The rank joins (burst_boot_join), runs the rounds
 * (burst_boot_allgather), polls the control channel until it reports the service gone, and
 * leaves. Every call must return a status (never a crash, a sanitizer report or a leak), blobs
 * handed out must lie inside the answer, and nothing may wait for the timeout (2 s): the
 * service's EOF must end every wait at once.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "burst/burst.h"
#include "tp_bootstrap.h"
#include "transport.h"

#define KEY "00112233445566778899aabbccddeeff"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fake {
    int lfd;
    const uint8_t *p;
    size_t n;
};

/* Wait for fd to be readable for at most ms; 1 when it is. */
static int readable(int fd, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, ms) == 1;
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    if (!readable(f->lfd, 5000))
        return NULL;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    unsigned char hello[BURST_BOOT_HDR + BURST_BOOT_KEY_LEN + 12];
    size_t got = 0;
    while (got < sizeof(hello) && readable(fd, 5000)) {
        ssize_t k = recv(fd, hello + got, sizeof(hello) - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    for (size_t o = 0; o < f->n;) {
        ssize_t k = send(fd, f->p + o, f->n - o, MSG_NOSIGNAL);
        if (k <= 0)
            break;
        o += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096]; /* until the rank closes */
    while (readable(fd, 5000) && recv(fd, buf, sizeof(buf), 0) > 0) {
    }
    /* closed at once, without TIME_WAIT: thousands of inputs a second would otherwise hold
     * every ephemeral port of the loopback for a minute, and the rank's connect would retry
     * until its timeout */
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    return NULL;
}

/* Did the join fail only to reach the fake service (a connect the machine refused)? */
static int connect_failed(burst_status_t st)
{
    return st != BURST_OK && strstr(burst_last_error(), "cannot reach the rendezvous") != NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int G = 1 + data[0] % 4, rounds = data[1] % 4;
    struct fake f = {socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), data + 2, size - 2};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (f.lfd < 0 || bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(f.lfd, 4) != 0 || getsockname(f.lfd, (struct sockaddr *)&sa, &sl) != 0) {
        if (f.lfd >= 0)
            close(f.lfd);
        return 0;
    }
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    pthread_t th;
    if (pthread_create(&th, NULL, fake_main, &f) != 0)
        abort();
    double t0 = now_ms();
    struct burst_boot *b = NULL;
    burst_status_t st = burst_boot_join("fuzz", addr, KEY, 0, G, 2000, 0, &b);
    for (int r = 0; st == BURST_OK && r < rounds; r++) {
        const unsigned char *blob[4];
        size_t lens[4];
        unsigned char *buf = NULL, mine[3] = {1, 2, 3};
        st = burst_boot_allgather(b, mine, sizeof(mine), &buf, blob, lens);
        if (st == BURST_OK) {
            /* every blob inside the answer (ASan checks the reads) */
            unsigned sum = 0;
            for (int i = 0; i < G; i++)
                for (size_t k = 0; k < lens[i]; k++)
                    sum += blob[i][k];
            (void)sum;
            free(buf);
        }
    }
    if (st == BURST_OK) {
        struct burst_tp_ctrl *c = burst_boot_ctrl(b);
        while ((st = c->poll(c)) == BURST_OK && now_ms() - t0 < 5000) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        if (st == BURST_OK) {
            fprintf(stderr, "the control channel did not see the service's EOF\n");
            abort();
        }
    }
    if (st != BURST_OK && !*burst_last_error()) {
        fprintf(stderr, "status %s without a message\n", burst_status_str(st));
        abort();
    }
    burst_boot_leave(b, 0);
    pthread_join(th, NULL);
    close(f.lfd);
    /* a connect the machine could not make (no free local port) retries until the timeout:
     * the environment, not the protocol under test */
    if (now_ms() - t0 > 1900 && !connect_failed(st)) {
        fprintf(stderr, "a wait lasted until the timeout (%.0f ms)\n", now_ms() - t0);
        abort();
    }
    return 0;
}
