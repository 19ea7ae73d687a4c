/* transport/tp_fabric_dl.c - see tp_fabric_dl.h */
#include "tp_fabric_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
} fi;
static pthread_once_t fi_once = PTHREAD_ONCE_INIT;
static char fi_load_error[256] = "libfabric is not loaded";

void burst_fi_sigs_save(struct burst_fi_sigs *s)
{
    for (int i = 1; i < NSIG; i++)
        s->ok[i] = i != SIGKILL && i != SIGSTOP && sigaction(i, NULL, &s->sa[i]) == 0;
}

void burst_fi_sigs_restore(const struct burst_fi_sigs *s)
{
    for (int i = 1; i < NSIG; i++)
        if (s->ok[i])
            sigaction(i, &s->sa[i], NULL);
}

static void fi_load(void)
{
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(fi_load_error, sizeof(fi_load_error), "libfabric.so.1 cannot be loaded: %s",
                 dlerror());
        return;
    }
    /* POSIX dlsym returns object pointers; the cast through a union-free memcpy keeps -Wpedantic
     * quiet about converting them to function pointers */
    void *p[5] = {dlsym(h, "fi_getinfo"), dlsym(h, "fi_freeinfo"), dlsym(h, "fi_dupinfo"),
                  dlsym(h, "fi_fabric"), dlsym(h, "fi_strerror")};
    for (int i = 0; i < 5; i++)
        if (!p[i]) {
            snprintf(fi_load_error, sizeof(fi_load_error), "libfabric.so.1 lacks a symbol: %s",
                     dlerror());
            return;
        }
    memcpy(&fi.getinfo, &p[0], sizeof(p[0]));
    memcpy(&fi.freeinfo, &p[1], sizeof(p[1]));
    memcpy(&fi.dupinfo, &p[2], sizeof(p[2]));
    memcpy(&fi.fabric, &p[3], sizeof(p[3]));
    memcpy(&fi.strerror, &p[4], sizeof(p[4]));
}

/* Load libfabric once, keeping the signal dispositions; 1 when it is there. */
static int fi_ready(struct burst_fi_sigs *s)
{
    burst_fi_sigs_save(s);
    pthread_once(&fi_once, fi_load);
    return fi.getinfo != NULL;
}

int burst_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                     const struct fi_info *hints, struct fi_info **info)
{
    struct burst_fi_sigs s;
    int ret = fi_ready(&s) ? fi.getinfo(version, node, service, flags, hints, info) : -FI_ENOSYS;
    burst_fi_sigs_restore(&s);
    return ret;
}

int burst_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    struct burst_fi_sigs s;
    int ret = fi_ready(&s) ? fi.fabric(attr, fabric, context) : -FI_ENOSYS;
    burst_fi_sigs_restore(&s);
    return ret;
}

void burst_fi_freeinfo(struct fi_info *info)
{
    if (info && fi.freeinfo) /* an info exists only once libfabric is loaded */
        fi.freeinfo(info);
}

struct fi_info *burst_fi_dupinfo(const struct fi_info *info)
{
    struct burst_fi_sigs s;
    struct fi_info *r = fi_ready(&s) ? fi.dupinfo(info) : NULL;
    burst_fi_sigs_restore(&s);
    return r;
}

const char *burst_fi_strerror(int errnum)
{
    return fi.strerror ? fi.strerror(errnum) : fi_load_error;
}
