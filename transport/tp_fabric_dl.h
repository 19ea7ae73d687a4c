/*
 * transport/tp_fabric_dl.h - libfabric loaded at its first use (private).
 *
 * libburst is not linked against libfabric: some of its providers install signal handlers when
 * they are loaded (psm's libinfinipath takes SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and
 * SIGABRT, calls exit(1) and writes backtrace files), which would then happen in every program
 * that links libburst. Instead libfabric.so.1 is opened (dlopen) by the first call below, that
 * is when a communicator of transport "fabric" is created or a provider is probed; and the
 * process's signal dispositions are saved before each call into libfabric that may load or
 * start providers (these five, and tp_fabric.c's endpoint setup) and restored after it, so the
 * embedding program keeps its own (each rank unlinks its shm segment itself: tp_comm_fabric.c).
 * A disposition another thread changes during such a call is restored too.
 *
 * Same contracts as the libfabric calls of the same names; when libfabric.so.1 cannot be
 * loaded they fail with -FI_ENOSYS and burst_fi_strerror says why.
 */
#ifndef BURST_TRANSPORT_TP_FABRIC_DL_H
#define BURST_TRANSPORT_TP_FABRIC_DL_H

#include <signal.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

/* Every signal's disposition, and whether it could be read. Providers install handlers when
 * loaded and when their endpoints are made (shm: SIGINT, SIGTERM, SIGSEGV, SIGBUS, to remove
 * its segment): tp_fabric.c keeps the program's around those calls with these two. */
struct burst_fi_sigs {
    struct sigaction sa[NSIG];
    unsigned char ok[NSIG];
};
void burst_fi_sigs_save(struct burst_fi_sigs *s);
void burst_fi_sigs_restore(const struct burst_fi_sigs *s);

int burst_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                     const struct fi_info *hints, struct fi_info **info);
void burst_fi_freeinfo(struct fi_info *info);
struct fi_info *burst_fi_dupinfo(const struct fi_info *info);
int burst_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
const char *burst_fi_strerror(int errnum);

#endif /* BURST_TRANSPORT_TP_FABRIC_DL_H */
