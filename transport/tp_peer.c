/* transport/tp_peer.c - see tp_peer.h */
#include "tp_peer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef __linux__

/* An endpoint as /proc/net/tcp{,6} prints it: the address's 32-bit words in memory order, each
 * as %08X of its host-order value, then ':' and the port as %04X. 0 when the family is neither
 * IPv4 nor IPv6. A v4-mapped IPv6 address is printed as its IPv4 form (*v4_p = 1): the other
 * end is then an IPv4 socket. */
static int proc_endpoint(const struct sockaddr_storage *ss, char *buf, size_t cap, int *v4_p)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)ss;
        snprintf(buf, cap, "%08X:%04X", (unsigned)a->sin_addr.s_addr, ntohs(a->sin_port));
        *v4_p = 1;
        return 1;
    }
    if (ss->ss_family != AF_INET6)
        return 0;
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)ss;
    uint32_t w[4];
    memcpy(w, &a->sin6_addr, sizeof(w));
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
        snprintf(buf, cap, "%08X:%04X", (unsigned)w[3], ntohs(a->sin6_port));
        *v4_p = 1;
    } else {
        snprintf(buf, cap, "%08X%08X%08X%08X:%04X", (unsigned)w[0], (unsigned)w[1], (unsigned)w[2],
                 (unsigned)w[3], ntohs(a->sin6_port));
        *v4_p = 0;
    }
    return 1;
}

/* The inode of the socket whose local endpoint is `local` and remote one `remote` in the
 * table `path`, or 0. */
static unsigned long proc_socket_inode(const char *path, const char *local, const char *remote)
{
    FILE *f = fopen(path, "r");
    char line[512], l[64], r[64];
    unsigned long inode = 0, ino;
    if (!f)
        return 0;
    while (!inode && fgets(line, sizeof(line), f))
        if (sscanf(line, " %*s %63s %63s %*s %*s %*s %*s %*s %*s %lu", l, r, &ino) == 3 &&
            strcmp(l, local) == 0 && strcmp(r, remote) == 0)
            inode = ino;
    fclose(f);
    return inode;
}

/* Whether process pid has a descriptor on socket `inode`. */
static int pid_has_socket(uint32_t pid, unsigned long inode)
{
    char dir[64], want[64], link[64], path[320];
    snprintf(dir, sizeof(dir), "/proc/%u/fd", pid);
    snprintf(want, sizeof(want), "socket:[%lu]", inode);
    DIR *d = opendir(dir);
    int found = 0;
    if (!d)
        return 0;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = '\0';
            found = strcmp(link, want) == 0;
        }
    }
    closedir(d);
    return found;
}

int burst_peer_holds(int fd, uint32_t pid)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    if (pid == 0 || getsockname(fd, (struct sockaddr *)&me, &ml) != 0)
        return 0;
    if (me.ss_family == AF_UNIX) {
        struct ucred cred;
        socklen_t cl = sizeof(cred);
        return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && cred.pid > 0 &&
               (uint32_t)cred.pid == pid;
    }
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
        return 0;
    /* the other socket's local endpoint is our peer's address, its remote one ours */
    char local[64], remote[64];
    int v4 = 0, v4b = 0;
    if (!proc_endpoint(&peer, local, sizeof(local), &v4) ||
        !proc_endpoint(&me, remote, sizeof(remote), &v4b) || v4 != v4b)
        return 0;
    unsigned long inode = proc_socket_inode(v4 ? "/proc/net/tcp" : "/proc/net/tcp6", local, remote);
    return inode != 0 && pid_has_socket(pid, inode);
}

#else

int burst_peer_holds(int fd, uint32_t pid)
{
    (void)fd;
    (void)pid;
    return 0;
}

#endif
