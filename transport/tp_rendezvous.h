/*
 * transport/tp_rendezvous.h - what the rendezvous service and its client share (private): the
 * wire helpers of the protocol described in tp_bootstrap.h (big-endian integers, the header
 * check, wire text) and the limits both sides keep. Server: tp_rendezvous_server.c; client:
 * tp_rendezvous_client.c; these helpers: tp_rendezvous_proto.c.
 */
#ifndef BURST_TP_RENDEZVOUS_H
#define BURST_TP_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#define RV_HELLO_MS 30000      /* a connection must send HELLO within this */
#define RV_MAX_PENDING 64      /* connections that have not sent HELLO yet (oldest evicted) */
#define RV_MAX_OUT (64u << 20) /* output buffered for one connection */
#define RV_RETRY_MS 50         /* client: pause between refused connection attempts */

/* The 4 bytes that open every message. */
extern const unsigned char burst_rv_magic[4];

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t burst_rv_now_ms(void);

/* Big-endian integers on the wire. */
void burst_rv_put_u16(unsigned char *p, uint32_t v);
void burst_rv_put_u32(unsigned char *p, uint32_t v);
uint32_t burst_rv_get_u32(const unsigned char *p);

/* Check a message header (size: ranks of the job): 0 with *type_p and *len_p, or -1 with a
 * reason in why (bad magic, version, unknown type, payload longer than its type allows). */
int burst_rv_check_header(const unsigned char *h, int size, uint32_t *type_p, uint32_t *len_p,
                          char *why, size_t cap);

/* Copy a wire text into a NUL-terminated buffer, replacing non-printable bytes. */
void burst_rv_copy_text(char *dst, size_t cap, const unsigned char *src, size_t len);

#endif /* BURST_TP_RENDEZVOUS_H */
