/*
 * transport/tp_rendezvous_proto.c - the wire helpers the rendezvous service and its client share
 * (tp_rendezvous.h), the job key's form and the host's boot id (tp_bootstrap.h).
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

const unsigned char burst_rv_magic[4] = {'B', 'R', 'S', 'T'};

int64_t burst_rv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void burst_rv_put_u16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

void burst_rv_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t burst_rv_get_u16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

uint32_t burst_rv_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Largest payload a message of `type` may carry (size: ranks of the job), or -1 if the type is
 * unknown. */
static int64_t burst_rv_max_payload(uint32_t type, int size)
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
int burst_rv_check_header(const unsigned char *h, int size, uint32_t *type_p, uint32_t *len_p,
                          char *why, size_t cap)
{
    if (memcmp(h, burst_rv_magic, 4) != 0) {
        snprintf(why, cap, "bad magic %02x%02x%02x%02x (not a burst rendezvous message)", h[0],
                 h[1], h[2], h[3]);
        return -1;
    }
    uint32_t ver = burst_rv_get_u16(h + 4), type = burst_rv_get_u16(h + 6),
             len = burst_rv_get_u32(h + 8);
    if (ver != BURST_BOOT_VERSION) {
        snprintf(why, cap, "protocol version %u, expected %d", ver, BURST_BOOT_VERSION);
        return -1;
    }
    int64_t max = burst_rv_max_payload(type, size);
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
void burst_rv_copy_text(char *dst, size_t cap, const unsigned char *src, size_t len)
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
