/*
 * transport/tp_bootstrap.h - the rendezvous protocol and its rank-side client (private).
 *
 * The server side is the public burst_rendezvous_* (burst/comm.h): tp_rendezvous_server.c; the
 * client: tp_rendezvous_client.c; their shared wire helpers: tp_rendezvous_proto.c.
 *
 * WIRE FORMAT (TCP, version 1). Every message is a 12-byte header and a payload:
 *
 *     magic "BRST" (4) | version u16 | type u16 | payload length u32       (big-endian)
 *
 * A receiver checks magic, version, type and the length bound of the type (below) BEFORE it
 * reads or allocates the payload, and checks every field of the payload before using it; a
 * violation closes the connection (the server replies REFUSED first when the peer has not
 * joined, and treats a joined rank that sends one as failed).
 *
 *   type          dir     payload                                             length
 *   1 HELLO       rank->  key[64] (hex digits, NUL-padded), rank u32,         76
 *                         size u32, pid u32
 *   2 WELCOME     ->rank  (empty)                                             0
 *   3 REFUSED     ->rank  status i32 (burst_status_t), reason (text)          4..4+1024
 *   4 GATHER      rank->  round u32, blob                                     4..4+65536
 *   5 GATHERED    ->rank  round u32, count u32, count x (len u32, blob)       <= 8+size*(4+65536)
 *   6 ABORT       rank->  status i32, reason (text)                           4..4+1024
 *   7 FAILED      ->rank  rank u32, reason (text)                             4..4+1024
 *   8 BYE         rank->  (empty)                                             0
 *   9 CLEANUP     rank->  boot_id[40] (NUL-padded), name "<pid>:<n>:<n>"     41..40+255
 *
 * Texts are not NUL-terminated on the wire; receivers copy them into bounded buffers and
 * replace non-printable bytes.
 *
 * Protocol: the rank connects, sends HELLO and waits for WELCOME (or REFUSED: wrong key, rank out
 * of range or taken, size mismatch, job already failed). Then rounds k = 1, 2, ... of GATHER:
 * once every rank sent its blob of round k, the server sends each the GATHERED of round k
 * (blobs in rank order). The connection then stays open as the job's control channel: ABORT
 * from a rank, or a rank's connection closing before its BYE, or burst_rendezvous_report_failure
 * makes the server send FAILED {rank, reason} to every other rank that has not left (only the
 * first failure of a job is broadcast). CLEANUP registers a /dev/shm entry (the shm provider's
 * segment) that the server unlinks if the rank dies without BYE, when the server runs on the
 * same boot (boot_id) as the rank: a SIGKILLed process cannot remove it itself. The name must
 * be a segment of the process the rank's HELLO named (pid), and only a regular file of the
 * server's user is removed. Ranks unlink their segment themselves once every rank has
 * connected (tp_comm_fabric.c), so this covers a rank lost while joining.
 * A connection may send only HELLO before it is admitted, and a rank only the rank-to-server
 * types: anything else is refused on its header.
 */
#ifndef BURST_TP_BOOTSTRAP_H
#define BURST_TP_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "burst/comm.h"
#include "burst/status.h"
#include "transport.h"

#define BURST_BOOT_VERSION 1
#define BURST_BOOT_HDR 12
#define BURST_BOOT_KEY_LEN 64     /* bytes of the key field (hex digits, NUL-padded) */
#define BURST_BOOT_KEY_MIN 32     /* a key has at least 32 hex digits (128 bits) */
#define BURST_BOOT_MAX_BLOB 65536 /* bytes of one GATHER blob */
#define BURST_BOOT_MAX_TEXT 1024  /* bytes of a reason */
#define BURST_BOOT_BOOT_ID_LEN 40 /* boot_id field of CLEANUP */
#define BURST_BOOT_MAX_NAME 255   /* CLEANUP name */

enum burst_boot_type {
    BURST_BOOT_HELLO = 1,
    BURST_BOOT_WELCOME = 2,
    BURST_BOOT_REFUSED = 3,
    BURST_BOOT_GATHER = 4,
    BURST_BOOT_GATHERED = 5,
    BURST_BOOT_ABORT = 6,
    BURST_BOOT_FAILED = 7,
    BURST_BOOT_BYE = 8,
    BURST_BOOT_CLEANUP = 9,
};

/* Nonzero when key is 32..64 hex digits. */
int burst_boot_key_valid(const char *key);

/* This machine's boot id (/proc/sys/kernel/random/boot_id), "" when unknown; buf >= 41 bytes. */
void burst_boot_boot_id(char *buf, size_t cap);

/*
 * The rank-side client, with two implementations behind one interface (ops below):
 *   burst_boot_join      the rendezvous of this file's protocol (tp_rendezvous_client.c);
 *   burst_boot_join_oob  the program's allgather, burst_comm_params.oob_allgather, for
 *                        bootstrap "mpi" (tp_oob_boot.c; the library links no MPI).
 * Both hand out a struct burst_boot; the calls after join dispatch through its ops, so the
 * communicator does not know which one it holds.
 */
struct burst_boot;

struct burst_boot_ops {
    const char *name; /* "rendezvous", "mpi" */
    burst_status_t (*allgather)(struct burst_boot *b, const void *mine, size_t len,
                                unsigned char **buf_p, const unsigned char **blob, size_t *lens);
    burst_status_t (*cleanup)(struct burst_boot *b, const char *name);
    struct burst_tp_ctrl *(*ctrl)(struct burst_boot *b);
    void (*leave)(struct burst_boot *b, int bye);
};

/* The first member of every implementation's object. */
struct burst_boot {
    const struct burst_boot_ops *ops;
};

/*
 * Connect to the rendezvous at "host:port" (retrying refused connections until timeout_ms: the
 * service may start a little later; with `up` nonzero the service listened before this rank
 * started, so a refused connection fails at once with BURST_ERR_PEER_FAILED), present the key
 * and join as rank of size. Blocks at most timeout_ms per wait. Errors name `who`, the address
 * and the reason (REFUSED text).
 */
burst_status_t burst_boot_join(const char *who, const char *rendezvous, const char *job_key,
                               int rank, int size, int timeout_ms, int up,
                               struct burst_boot **boot_p);

/*
 * Join through the program's allgather `fn` (called with fn_ctx; burst/comm.h
 * burst_oob_allgather_fn). Calls nothing yet: the first allgather checks that every rank's rank
 * and size agree with the callback's order. Exchanges wait as long as the callback does (it is
 * given timeout_ms). Peer death: the callback tells nothing, so ctrl->poll always returns
 * BURST_OK and ctrl->abort does nothing; a dead rank is seen by the fabric's own errors or the
 * communicator's timeout, and the program's launcher (mpirun) ends the job. cleanup does
 * nothing: a killed rank's /dev/shm segment is not removed for it. leave calls nothing.
 */
burst_status_t burst_boot_join_oob(const char *who, int rank, int size, int timeout_ms,
                                   burst_oob_allgather_fn fn, void *fn_ctx,
                                   struct burst_boot **boot_p);

/*
 * One GATHER round: send `len` bytes (<= BURST_BOOT_MAX_BLOB), receive every rank's blob.
 * On success *buf_p is one allocation (free()) holding all blobs; blob[r] / lens[r] (arrays of
 * size entries, caller's) point into it. Blocks at most the timeout; a FAILED from the server
 * gives BURST_ERR_PEER_FAILED naming the rank.
 */
static inline burst_status_t burst_boot_allgather(struct burst_boot *b, const void *mine,
                                                  size_t len, unsigned char **buf_p,
                                                  const unsigned char **blob, size_t *lens)
{
    return b->ops->allgather(b, mine, len, buf_p, blob, lens);
}

/* Register /dev/shm/<name> for removal by the server if this rank dies. */
static inline burst_status_t burst_boot_cleanup(struct burst_boot *b, const char *name)
{
    return b->ops->cleanup(b, name);
}

/* The control channel (poll: FAILED / EOF -> BURST_ERR_PEER_FAILED; abort: sends ABORT).
 * Valid while b lives. */
static inline struct burst_tp_ctrl *burst_boot_ctrl(struct burst_boot *b)
{
    return b->ops->ctrl(b);
}

/* Leave: BYE when `bye` (a clean leave), then close. NULL accepted. */
static inline void burst_boot_leave(struct burst_boot *b, int bye)
{
    if (b)
        b->ops->leave(b, bye);
}

#endif /* BURST_TP_BOOTSTRAP_H */
