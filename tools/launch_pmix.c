/* tools/launch_pmix.c - burstrun's ranks under a PMIx launcher (see launch_pmix.h). */
#include "launch_pmix.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef BURST_HAVE_PMIX
#include <pmix.h>
#endif

/* A launcher's variable (not a BURST_* setting: the launcher sets it): NULL when unset or
 * empty. */
static const char *launcher_var(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

int launch_pmix_env_present(void)
{
    return launcher_var("PMIX_RANK") && launcher_var("PMIX_NAMESPACE");
}

int launch_pmix_available(void)
{
#ifdef BURST_HAVE_PMIX
    return 1;
#else
    return 0;
#endif
}

#ifdef BURST_HAVE_PMIX
static pmix_proc_t self_proc; /* this process: the job's namespace and its rank */
static int inited;
static unsigned calls; /* allgathers so far: each has keys of its own */

int launch_pmix_init(const char *prog, int *rank_p, int *size_p)
{
    const char *env_rank = launcher_var("PMIX_RANK");
    pmix_status_t rc = PMIx_Init(&self_proc, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr,
                "%s: rank %s: PMIx_Init failed: %s (PMIx launcher: PMIX_NAMESPACE = \"%.64s\"; "
                "its PMIx server cannot be reached)\n",
                prog, env_rank ? env_rank : "(PMIX_RANK unset)", PMIx_Error_string(rc),
                launcher_var("PMIX_NAMESPACE") ? launcher_var("PMIX_NAMESPACE") : "");
        return -1;
    }
    inited = 1;
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, self_proc.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val || val->type != PMIX_UINT32 || val->data.uint32 < 1 ||
        val->data.uint32 > 65536 || self_proc.rank >= val->data.uint32) {
        fprintf(stderr, "%s: rank %u: PMIx_Get(PMIX_JOB_SIZE) failed: %s\n", prog,
                (unsigned)self_proc.rank,
                rc != PMIX_SUCCESS ? PMIx_Error_string(rc)
                                   : "not a size in 1..65536 above "
                                     "this rank");
        if (val)
            PMIX_VALUE_RELEASE(val);
        launch_pmix_finalize();
        return -1;
    }
    *rank_p = (int)self_proc.rank;
    *size_p = (int)val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    return 0;
}

/* PMIx's status as the library's. */
static burst_status_t status_of(pmix_status_t rc)
{
    return rc == PMIX_SUCCESS       ? BURST_OK
           : rc == PMIX_ERR_TIMEOUT ? BURST_ERR_TIMEOUT
                                    : BURST_ERR_TRANSPORT;
}

/* Rank r's value of `key` (a byte object of exactly len bytes) into dst. */
static burst_status_t get_one(uint32_t r, const char *key, pmix_info_t *timeout, void *dst,
                              size_t len)
{
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, self_proc.nspace, r);
    pmix_value_t *val = NULL;
    pmix_status_t rc = PMIx_Get(&peer, key, timeout, 1, &val);
    burst_status_t st = status_of(rc);
    if (st == BURST_OK && (!val || val->type != PMIX_BYTE_OBJECT || val->data.bo.size != len))
        st = BURST_ERR_TRANSPORT;
    if (st == BURST_OK && len)
        memcpy(dst, val->data.bo.bytes, len);
    if (val)
        PMIX_VALUE_RELEASE(val);
    return st;
}

burst_status_t launch_pmix_allgather(void *ctx, const void *send, void *recv, size_t len,
                                     int timeout_ms)
{
    (void)ctx;
    int size = 0;
    if (!inited)
        return BURST_ERR_TRANSPORT;
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, self_proc.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *sv = NULL;
    if (PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &sv) != PMIX_SUCCESS || !sv)
        return BURST_ERR_TRANSPORT;
    size = (int)sv->data.uint32;
    PMIX_VALUE_RELEASE(sv);
    char key[PMIX_MAX_KEYLEN + 1];
    snprintf(key, sizeof(key), "burst.boot.%u", calls++);
    /* PMIx_Put copies the value: the library's buffer is not kept */
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)send;
    v.data.bo.size = len;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Commit();
    int secs = timeout_ms > 0 ? (timeout_ms + 999) / 1000 : 1;
    bool collect = true;
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &secs, PMIX_INT);
    PMIX_INFO_LOAD(&info[1], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Fence(&job, 1, info, 2);
    burst_status_t st = status_of(rc);
    for (int r = 0; st == BURST_OK && r < size; r++)
        st = get_one((uint32_t)r, key, &info[0], (char *)recv + (size_t)r * len, len);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    return st;
}

void launch_pmix_finalize(void)
{
    if (inited)
        PMIx_Finalize(NULL, 0);
    inited = 0;
}

void launch_pmix_version(char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", PMIx_Get_version());
    buf[strcspn(buf, ",")] = '\0';
}
#else
int launch_pmix_init(const char *prog, int *rank_p, int *size_p)
{
    (void)rank_p;
    (void)size_p;
    fprintf(stderr, "%s: rank %s: --launcher pmix: this burstrun was built without PMIx\n", prog,
            launcher_var("PMIX_RANK") ? launcher_var("PMIX_RANK") : "(PMIX_RANK unset)");
    return -1;
}

burst_status_t launch_pmix_allgather(void *ctx, const void *send, void *recv, size_t len,
                                     int timeout_ms)
{
    (void)ctx;
    (void)send;
    (void)recv;
    (void)len;
    (void)timeout_ms;
    return BURST_ERR_UNSUPPORTED;
}

void launch_pmix_finalize(void)
{
}

void launch_pmix_version(char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
}
#endif
