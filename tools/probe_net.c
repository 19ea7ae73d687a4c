/* tools/probe_net.c - burstrun --probe's transports (probe_net.h). */
#include "probe_net.h"

#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "burstrun_meta.h"
#include "launch_mpi.h"

#ifdef BURST_HAVE_FABRIC
#include <rdma/fabric.h>
#endif

#define MAX_PROVS 32

/* What the probe found; text and JSON print the same. */
struct net_probe {
    char fabric_why[256]; /* empty when libfabric answered */
    unsigned fabric_version;
    int nprov;
    char prov[MAX_PROVS][64];     /* provider names (ofi_rxm layering shown as "tcp;ofi_rxm") */
    char prov_dom[MAX_PROVS][64]; /* a domain of each (its first) */
    char mpirun[512];             /* mpirun's path on PATH, or "" */
    char mpi_lib[256];            /* the MPI library's version, or "" */
};

#ifdef BURST_HAVE_FABRIC
typedef uint32_t (*fi_version_fn)(void);
typedef int (*fi_getinfo_fn)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                             struct fi_info **);
typedef void (*fi_freeinfo_fn)(struct fi_info *);
typedef struct fi_info *(*fi_dupinfo_fn)(const struct fi_info *);

/* The distinct providers of burst's endpoint kind into np. */
static void fabric_providers(void *h, struct net_probe *np)
{
    fi_getinfo_fn getinfo;
    fi_freeinfo_fn freeinfo;
    fi_dupinfo_fn dupinfo;
    void *s[3] = {dlsym(h, "fi_getinfo"), dlsym(h, "fi_freeinfo"), dlsym(h, "fi_dupinfo")};
    if (!s[0] || !s[1] || !s[2]) {
        snprintf(np->fabric_why, sizeof(np->fabric_why), "libfabric.so.1 lacks fi_getinfo");
        return;
    }
    memcpy(&getinfo, &s[0], sizeof(getinfo));
    memcpy(&freeinfo, &s[1], sizeof(freeinfo));
    memcpy(&dupinfo, &s[2], sizeof(dupinfo));
    struct fi_info *hints = dupinfo(NULL), *info = NULL;
    if (!hints)
        return;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    if (getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info) == 0) {
        for (struct fi_info *i = info; i && np->nprov < MAX_PROVS; i = i->next) {
            const char *name = i->fabric_attr->prov_name;
            int seen = 0;
            for (int k = 0; k < np->nprov && !seen; k++)
                seen = !strcmp(np->prov[k], name);
            if (seen)
                continue;
            snprintf(np->prov[np->nprov], 64, "%s", name);
            snprintf(np->prov_dom[np->nprov++], 64, "%s",
                     i->domain_attr->name ? i->domain_attr->name : "");
        }
        freeinfo(info);
    }
    freeinfo(hints);
}
#endif

static void probe_fabric(struct net_probe *np)
{
#ifdef BURST_HAVE_FABRIC
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(np->fabric_why, sizeof(np->fabric_why), "%s", dlerror());
        return;
    }
    void *v = dlsym(h, "fi_version");
    fi_version_fn version;
    memcpy(&version, &v, sizeof(version));
    np->fabric_version = v ? version() : 0;
    fabric_providers(h, np);
    /* not dlclose'd: providers may leave threads or handlers behind */
#else
    snprintf(np->fabric_why, sizeof(np->fabric_why), "burstrun was built without libfabric");
#endif
}

/* mpirun on PATH into np->mpirun. */
static void probe_mpirun(struct net_probe *np)
{
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : "");
    for (char *save = NULL, *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
         d = strtok_r(NULL, ":", &save)) {
        char f[512];
        snprintf(f, sizeof(f), "%s/mpirun", d);
        if (access(f, X_OK) == 0) {
            snprintf(np->mpirun, sizeof(np->mpirun), "%s", f);
            break;
        }
    }
    free(copy);
    launch_mpi_library_version(np->mpi_lib, sizeof(np->mpi_lib));
}

/* Each interface's address (IPv4 / IPv6) as "name addr flags", one call per address. */
static void each_iface(void (*fn)(void *ctx, const char *name, const char *addr, int up, int lo),
                       void *ctx)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr ||
            (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        char host[NI_MAXHOST];
        socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                          : sizeof(struct sockaddr_in6);
        if (getnameinfo(i->ifa_addr, len, host, sizeof(host), NULL, 0, NI_NUMERICHOST) != 0)
            continue;
        fn(ctx, i->ifa_name, host, !!(i->ifa_flags & IFF_UP), !!(i->ifa_flags & IFF_LOOPBACK));
    }
    freeifaddrs(ifs);
}

static void iface_text(void *ctx, const char *name, const char *addr, int up, int lo)
{
    fprintf((FILE *)ctx, "  interface %s: %s%s%s\n", name, addr, up ? "" : " (down)",
            lo ? " (loopback)" : "");
}

struct json_ctx {
    FILE *f;
    int n;
};

static void iface_json(void *ctx, const char *name, const char *addr, int up, int lo)
{
    struct json_ctx *j = ctx;
    fprintf(j->f, "%s{\"name\": ", j->n++ ? ", " : "");
    meta_json_str(j->f, name);
    fprintf(j->f, ", \"address\": ");
    meta_json_str(j->f, addr);
    fprintf(j->f, ", \"up\": %s, \"loopback\": %s}", up ? "true" : "false", lo ? "true" : "false");
}

void probe_net_text(FILE *f)
{
    struct net_probe np = {0};
    probe_fabric(&np);
    probe_mpirun(&np);
    fprintf(f, "transports\n");
    if (np.fabric_why[0])
        fprintf(f, "  libfabric: not usable: %s\n", np.fabric_why);
    else
        fprintf(f, "  libfabric %u.%u: %d provider%s with burst's endpoints (RDM, tagged)%s\n",
                np.fabric_version >> 16, np.fabric_version & 0xffff, np.nprov,
                np.nprov == 1 ? "" : "s", np.nprov ? ":" : "");
    for (int k = 0; k < np.nprov; k++)
        fprintf(f, "    %s (domain %s)\n", np.prov[k], np.prov_dom[k]);
    each_iface(iface_text, f);
    fprintf(f, "  mpi: burstrun %s MPI (--hosts); mpirun %s; library %s\n",
            launch_mpi_available() ? "built with" : "built without",
            np.mpirun[0] ? np.mpirun : "not on PATH", np.mpi_lib[0] ? np.mpi_lib : "none");
}

void probe_net_json(FILE *f)
{
    struct net_probe np = {0};
    probe_fabric(&np);
    probe_mpirun(&np);
    fprintf(f, "{\"libfabric\": {\"usable\": %s, ", np.fabric_why[0] ? "false" : "true");
    if (np.fabric_why[0]) {
        fprintf(f, "\"why\": ");
        meta_json_str(f, np.fabric_why);
    } else {
        fprintf(f, "\"version\": \"%u.%u\"", np.fabric_version >> 16, np.fabric_version & 0xffff);
    }
    fprintf(f, ", \"providers\": [");
    for (int k = 0; k < np.nprov; k++) {
        fprintf(f, "%s{\"name\": ", k ? ", " : "");
        meta_json_str(f, np.prov[k]);
        fprintf(f, ", \"domain\": ");
        meta_json_str(f, np.prov_dom[k]);
        fprintf(f, "}");
    }
    fprintf(f, "]}, \"interfaces\": [");
    struct json_ctx j = {f, 0};
    each_iface(iface_json, &j);
    fprintf(f,
            "], \"mpi\": {\"built\": %s, \"mpirun\": ", launch_mpi_available() ? "true" : "false");
    meta_json_str(f, np.mpirun);
    fprintf(f, ", \"library\": ");
    meta_json_str(f, np.mpi_lib);
    fprintf(f, "}}");
}
