/*
 * tests/test_backend_ops.c - the backend table (runtime/backend.h): every backend of this build
 * has a whole table (burst_backend_ops_missing is NULL), and a table lacking a member it needs
 * is named by that member: the core, memory, elementwise and step ops of every backend; memcpy,
 * host_alloc and host_free of one whose transfers are staged; time_elapsed and time_release of
 * one with time_mark; a size that stops before a needed member counts as lacking it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "backend.h"

static void expect_missing(const struct burst_backend_ops *ops, const char *want, const char *what)
{
    const char *got = burst_backend_ops_missing(ops);
    if (!want && got)
        fail_msg("%s: lacks \"%s\", expected a whole table", what, got);
    if (want && (!got || strcmp(got, want) != 0))
        fail_msg("%s: lacks \"%s\", expected \"%s\"", what, got ? got : "nothing", want);
}

static void test_registered(void **state)
{
    (void)state;
    expect_missing(&burst_cpu_backend_ops, NULL, "cpu");
#ifdef BURST_HAVE_VULKAN
    expect_missing(&burst_vk_backend_ops, NULL, "vulkan");
#endif
#ifdef BURST_HAVE_CUDA
    expect_missing(&burst_cuda_backend_ops, NULL, "cuda");
#endif
    expect_missing(NULL, "size", "NULL table");
}

/* cpu's table with one member cleared: that member is named */
#define CLEARED(m)                                                                                 \
    do {                                                                                           \
        struct burst_backend_ops t = burst_cpu_backend_ops;                                        \
        t.m = 0;                                                                                   \
        expect_missing(&t, #m, "cpu without " #m);                                                 \
    } while (0)

static void test_required(void **state)
{
    (void)state;
    CLEARED(name);
    CLEARED(create);
    CLEARED(destroy);
    CLEARED(alloc);
    CLEARED(free);
    CLEARED(copy);
    CLEARED(fill);
    CLEARED(accumulate);
    CLEARED(fwd_step);
    CLEARED(bwd_delta);
    CLEARED(bwd_step);
    struct burst_backend_ops t = burst_cpu_backend_ops;
    t.size = offsetof(struct burst_backend_ops, fwd_step); /* an older, shorter table */
    expect_missing(&t, "fwd_step", "a table ending before fwd_step");
    t.size = 0;
    expect_missing(&t, "size", "size 0");
}

/* the members a backend's own flags make necessary */
static burst_status_t fake_memcpy(void *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, src, bytes);
    return BURST_OK;
}

static void *fake_host_alloc(void *be, size_t bytes)
{
    (void)be, (void)bytes;
    return NULL;
}

static void fake_host_free(void *be, void *ptr)
{
    (void)be, (void)ptr;
}

static int fake_stage(void *be, int in_process)
{
    (void)be, (void)in_process;
    return 1;
}

static burst_status_t fake_mark(void *be, void **mark_p)
{
    (void)be;
    *mark_p = NULL;
    return BURST_OK;
}

static burst_status_t fake_elapsed(void *be, void *from, void *to, double *seconds_p)
{
    (void)be, (void)from, (void)to;
    *seconds_p = 0.0;
    return BURST_OK;
}

static void fake_release(void *be, void *mark)
{
    (void)be, (void)mark;
}

static void test_conditional(void **state)
{
    (void)state;
    struct burst_backend_ops t = burst_cpu_backend_ops;
    t.device_memory = 0, t.stage_transfers = NULL, t.memcpy = NULL, t.host_alloc = NULL;
    t.host_free = NULL, t.time_mark = NULL, t.time_elapsed = NULL, t.time_release = NULL;
    expect_missing(&t, NULL, "host memory, no staging, no timeline");
    t.device_memory = 1;
    expect_missing(&t, "memcpy", "device memory without memcpy");
    t.memcpy = fake_memcpy;
    expect_missing(&t, "host_alloc", "device memory without host_alloc");
    t.host_alloc = fake_host_alloc;
    expect_missing(&t, "host_free", "device memory without host_free");
    t.host_free = fake_host_free;
    expect_missing(&t, NULL, "device memory with its staging ops");
    t.device_memory = 0, t.stage_transfers = fake_stage, t.memcpy = NULL;
    expect_missing(&t, "memcpy", "staged transfers without memcpy");
    t.memcpy = fake_memcpy;
    t.time_mark = fake_mark;
    expect_missing(&t, "time_elapsed", "time_mark without time_elapsed");
    t.time_elapsed = fake_elapsed;
    expect_missing(&t, "time_release", "time_mark without time_release");
    t.time_release = fake_release;
    expect_missing(&t, NULL, "a whole timeline");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registered),
        cmocka_unit_test(test_required),
        cmocka_unit_test(test_conditional),
    };
    return cmocka_run_group_tests_name("backend_ops", tests, NULL, NULL);
}
