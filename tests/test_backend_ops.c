/*
 * tests/test_backend_ops.c - the backend table (runtime/backend.h): every backend of this build
 * has a whole table (burst_backend_ops_missing is NULL), and a table lacking a member it needs
 * is named by that member, through its layer ("mem.fill"): the required members of the core,
 * mem, elem and attn layers of every backend; mem.memcpy, mem.host_alloc and mem.host_free of
 * one whose transfers are staged; stream.time_elapsed and stream.time_release of one with
 * stream.time_mark; a size that stops before a needed member counts as lacking it.
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
    CLEARED(core.create);
    CLEARED(core.destroy);
    CLEARED(mem.alloc);
    CLEARED(mem.free);
    CLEARED(elem.copy);
    CLEARED(elem.fill);
    CLEARED(elem.accumulate);
    CLEARED(attn.fwd_step);
    CLEARED(attn.bwd_delta);
    CLEARED(attn.bwd_step);
    struct burst_backend_ops t = burst_cpu_backend_ops;
    t.size = offsetof(struct burst_backend_ops, attn.fwd_step); /* an older, shorter table */
    expect_missing(&t, "attn.fwd_step", "a table ending before attn.fwd_step");
    t.size = 0;
    expect_missing(&t, "size", "size 0");
    /* an optional member of a layer the size stops inside is absent, though set */
    t.size = offsetof(struct burst_backend_ops, attn.decode_step);
    assert_false(BURST_OPS_HAS(&t, attn.decode_step));
    t.size = sizeof t;
    assert_true(BURST_OPS_HAS(&t, attn.decode_step));
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
    t.mem.device_memory = 0, t.mem.stage_transfers = NULL, t.mem.memcpy = NULL,
    t.mem.host_alloc = NULL;
    t.mem.host_free = NULL, t.stream.time_mark = NULL, t.stream.time_elapsed = NULL,
    t.stream.time_release = NULL;
    expect_missing(&t, NULL, "host memory, no staging, no timeline");
    t.mem.device_memory = 1;
    expect_missing(&t, "mem.memcpy", "device memory without memcpy");
    t.mem.memcpy = fake_memcpy;
    expect_missing(&t, "mem.host_alloc", "device memory without host_alloc");
    t.mem.host_alloc = fake_host_alloc;
    expect_missing(&t, "mem.host_free", "device memory without host_free");
    t.mem.host_free = fake_host_free;
    expect_missing(&t, NULL, "device memory with its staging ops");
    t.mem.device_memory = 0, t.mem.stage_transfers = fake_stage, t.mem.memcpy = NULL;
    expect_missing(&t, "mem.memcpy", "staged transfers without memcpy");
    t.mem.memcpy = fake_memcpy;
    t.stream.time_mark = fake_mark;
    expect_missing(&t, "stream.time_elapsed", "time_mark without time_elapsed");
    t.stream.time_elapsed = fake_elapsed;
    expect_missing(&t, "stream.time_release", "time_mark without time_release");
    t.stream.time_release = fake_release;
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
