/*
 * tests/fuzz/fuzz_vk_cache.c - libFuzzer target: the Vulkan tile cache file parser
 * (runtime/vulkan/vk_cache.c, burst_vk_cache_load; built with the vulkan backend only). No device
 * is needed: the capabilities are those of a made-up device.
 *
 * Input: byte 0 bit 0 set = "fix the checksum": the rest, newline-terminated, gets a correct
 * "sum <FNV-1a 64>" line appended, so that mutations reach the line parser behind the checksum;
 * clear = the rest is the file as is. It is written as the device's cache file under a private
 * XDG_CACHE_HOME and loaded. A load that succeeds must hand out only tiles that
 * burst_vk_tile_valid() accepts for this device; anything else must be refused with the tiles
 * untouched. No crash, sanitizer report or leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vulkan/vk_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static struct burst_vk_caps g_caps;
static struct burst_vk_env g_env;
static char g_path[700], g_dir[64] = "/tmp/burst-fuzz-vk-XXXXXX", g_sub[80];

static void cleanup(void)
{
    unlink(g_path);
    rmdir(g_sub);
    rmdir(g_dir);
}

static void setup(void)
{
    if (!mkdtemp(g_dir))
        abort();
    setenv("XDG_CACHE_HOME", g_dir, 1);
    snprintf(g_sub, sizeof(g_sub), "%s/burst", g_dir);
    mkdir(g_sub, 0700);
    atexit(cleanup);
    snprintf(g_caps.name, sizeof(g_caps.name), "fuzz device");
    g_caps.vendor_id = 0x10de;
    g_caps.device_id = 0x2330;
    g_caps.driver_version = 1;
    for (int i = 0; i < (int)VK_UUID_SIZE; i++)
        g_caps.cache_uuid[i] = (uint8_t)(0x10 * (i % 16) + i % 16); /* 00 11 22 ... ff */
    g_caps.max_shared = 49152;
    g_caps.max_invocations = 1024;
    g_caps.max_groups[0] = g_caps.max_groups[1] = g_caps.max_groups[2] = 65535;
    g_caps.subgroup = g_caps.subgroup_min = g_caps.subgroup_max = 32;
    g_caps.subgroup_shuffle = 1;
    g_caps.fp16 = 1;
    g_env.subgroup = 1;
    g_env.cache = 1;
    burst_vk_cache_path(&g_caps, g_path, sizeof(g_path));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_path[0])
        setup();
    if (size < 1)
        return 0;
    FILE *f = fopen(g_path, "w");
    if (!f)
        abort();
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    fwrite(body, 1, n, f);
    if (data[0] & 1) {
        uint64_t h = fnv1a(body, n);
        if (n == 0 || body[n - 1] != '\n') {
            fputc('\n', f);
            h = (h ^ '\n') * 1099511628211ull;
        }
        fprintf(f, "sum %016llx\n", (unsigned long long)h);
    }
    fclose(f);
    struct burst_vk_tiles before, t;
    burst_vk_tiles_rule(&g_caps, &g_env, &before);
    t = before;
    if (burst_vk_cache_load(&g_caps, &g_env, &t)) {
        for (int k = BURST_VK_FWD; k <= BURST_VK_DKV; k++)
            for (int c = 0; c < BURST_VK_NUM_DCLASS; c++)
                if (memcmp(&t.k[k][c], &before.k[k][c], sizeof(t.k[k][c])) != 0 &&
                    !burst_vk_tile_valid(&g_caps, &g_env, (enum burst_vk_kernel)k, c, &t.k[k][c])) {
                    fprintf(stderr, "the cache handed out an invalid tile for %s class %d\n",
                            burst_vk_kernel_names[k], c);
                    abort();
                }
    } else if (memcmp(&t, &before, sizeof(t)) != 0) {
        fprintf(stderr, "a refused cache file changed the tiles\n");
        abort();
    }
    return 0;
}
