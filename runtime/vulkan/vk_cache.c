/*
 * runtime/vulkan/vk_cache.c - the tile cache file and the opt-in autotune.
 *
 * File: $XDG_CACHE_HOME/burst/ (else $HOME/.cache/burst/) vulkan-<vendor>-<device>-<driver>.tiles,
 * one per device and driver version, text:
 *     burst-vk-tiles 1
 *     uuid <pipelineCacheUUID, 32 hex digits>
 *     <kernel> <dclass> <t> <br> <bc>          (one line per tuned entry)
 *     sum <FNV-1a 64 of every byte above, 16 hex digits>
 * It is trusted only when the magic, version, uuid and checksum match and every entry passes
 * burst_vk_tile_valid() for this device; anything else (corrupt, truncated, stale driver,
 * another build's uuid) is ignored and, when autotuning, replaced. Writes go to a temporary file
 * renamed into place, so concurrent processes never see a partial file. Only a regular file is
 * read, opened without blocking (a FIFO there is ignored, never waited on). BURST_VK_CACHE=0
 * neither reads nor writes it.
 *
 * Autotune (BURST_VK_AUTOTUNE=1, at context creation, when no valid cache exists): for the
 * subgroup / scalar forward kernel (fwd: the forward where the register-tiled fwd_rt is off or
 * has no tile; the register-tiled kernels are neither tuned nor cached) of each head-dim class,
 * time the rule's tile and its neighbours (T in {1, 2, 4, 8}, workgroups of 64 / 128 / 256, BC
 * halved) on a 1024-row fp16 problem with timestamp queries and keep the fastest; the backward
 * kernels take the forward's T and workgroup. A few seconds on a GPU; slow on lavapipe.
 * BURST_VK_AUTOTUNE=<head dim> tunes only that head dim's class (64, 128 or 256) and keeps the
 * rule's tiles for the others.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vk_internal.h"

#define BURST_VK_CACHE_MAGIC "burst-vk-tiles 1"

static uint64_t burst_vk_fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void burst_vk_cache_dir(char *buf, size_t len)
{
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (x && *x == '/')
        snprintf(buf, len, "%s/burst", x);
    else if (home && *home)
        snprintf(buf, len, "%s/.cache/burst", home);
    else
        buf[0] = '\0';
}

/* The file at path into text (at most cap - 1 bytes): a regular file only, opened without
 * blocking (a FIFO, a device or a directory placed there is ignored, never waited on); -1 when
 * absent, special or larger. */
static ssize_t burst_vk_cache_read_file(const char *path, char *text, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat sb;
    if (fd < 0)
        return -1;
    ssize_t n = -1;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size < (off_t)cap) {
        n = read(fd, text, cap - 1);
        if (n > sb.st_size) /* it grew meanwhile */
            n = -1;
    }
    close(fd);
    return n;
}

void burst_vk_cache_path(const struct burst_vk_caps *caps, char *buf, size_t len)
{
    char dir[512];
    burst_vk_cache_dir(dir, sizeof dir);
    if (!dir[0]) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, len, "%s/vulkan-%04x-%04x-%08x.tiles", dir, caps->vendor_id, caps->device_id,
             caps->driver_version);
}

static void burst_vk_uuid_hex(const struct burst_vk_caps *caps, char out[2 * VK_UUID_SIZE + 1])
{
    for (int i = 0; i < (int)VK_UUID_SIZE; i++)
        snprintf(out + 2 * i, 3, "%02x", caps->cache_uuid[i]);
}

int burst_vk_cache_load(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                        struct burst_vk_tiles *tiles)
{
    char path[640];
    burst_vk_cache_path(caps, path, sizeof path);
    if (!env->cache || !path[0])
        return 0;
    char text[4096];
    ssize_t n = burst_vk_cache_read_file(path, text, sizeof text);
    if (n < 0)
        return 0;
    text[n] = '\0';
    char *sum = strstr(text, "\nsum ");
    if (!sum)
        return 0;
    unsigned long long want = strtoull(sum + 5, NULL, 16);
    if (burst_vk_fnv(text, (size_t)(sum + 1 - text)) != want)
        return 0;
    *sum = '\0';
    char uuid[2 * VK_UUID_SIZE + 1];
    burst_vk_uuid_hex(caps, uuid);
    struct burst_vk_tiles t = *tiles;
    int line = 0, ok = 1, entries = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && ok;
         l = strtok_r(NULL, "\n", &save), line++) {
        if (line == 0) {
            ok = strcmp(l, BURST_VK_CACHE_MAGIC) == 0;
        } else if (line == 1) {
            ok = strncmp(l, "uuid ", 5) == 0 && strcmp(l + 5, uuid) == 0;
        } else {
            char name[16];
            int c, tt, br, bc, k = -1;
            ok = sscanf(l, "%15s %d %d %d %d", name, &c, &tt, &br, &bc) == 5 && c >= 0 &&
                 c < BURST_VK_NUM_DCLASS;
            for (int i = 0; ok && i < BURST_VK_NUM_KERNELS; i++)
                if (strcmp(name, burst_vk_kernel_names[i]) == 0)
                    k = i;
            struct burst_vk_tile tl = {tt, br, bc, 0};
            ok = ok && k >= BURST_VK_FWD && k <= BURST_VK_DKV &&
                 burst_vk_tile_valid(caps, env, (enum burst_vk_kernel)k, c, &tl);
            if (ok) {
                t.k[k][c] = tl;
                entries++;
            }
        }
    }
    if (!ok || line < 2 || entries == 0)
        return 0;
    t.source = "cache";
    *tiles = t;
    return 1;
}

static void burst_vk_cache_save(const struct burst_vk_caps *caps, const struct burst_vk_env *env,
                                const struct burst_vk_tiles *tiles)
{
    char dir[512], path[640], tmp[700];
    burst_vk_cache_dir(dir, sizeof dir);
    burst_vk_cache_path(caps, path, sizeof path);
    if (!env->cache || !dir[0])
        return;
    char parent[520];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        mkdir(parent, 0755); /* $HOME/.cache may not exist yet */
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return;
    char text[4096], uuid[2 * VK_UUID_SIZE + 1];
    burst_vk_uuid_hex(caps, uuid);
    int n = snprintf(text, sizeof text, "%s\nuuid %s\n", BURST_VK_CACHE_MAGIC, uuid);
    for (int k = BURST_VK_FWD; k <= BURST_VK_DKV; k++)
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++)
            if (tiles->k[k][c].t > 0)
                n += snprintf(text + n, sizeof text - (size_t)n, "%s %d %d %d %d\n",
                              burst_vk_kernel_names[k], c, tiles->k[k][c].t, tiles->k[k][c].br,
                              tiles->k[k][c].bc);
    n += snprintf(text + n, sizeof text - (size_t)n, "sum %016llx\n",
                  (unsigned long long)burst_vk_fnv(text, (size_t)n));
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    /* a new file of our own: never through a link or into something already there */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    int bad = write(fd, text, (size_t)n) != (ssize_t)n;
    bad |= close(fd) != 0;
    if (bad || rename(tmp, path) != 0)
        remove(tmp);
}

static void burst_vk_autotune(struct burst_vk_backend *be, struct burst_vk_tiles *tiles)
{
    static const int ts[] = {1, 2, 4, 8}, wgs[] = {64, 128, 256};
    for (int c = 0; c < BURST_VK_NUM_DCLASS; c++) {
        struct burst_vk_tile best = tiles->k[BURST_VK_FWD][c];
        if (best.t == 0 || (be->env.autotune > 1 && burst_vk_dclass(be->env.autotune) != c))
            continue;
        int d = burst_vk_dclass_max[c];
        double best_ms = burst_vk_time_fwd(be, BURST_VK_FWD, d, &best);
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            for (size_t j = 0; j < sizeof wgs / sizeof wgs[0]; j++)
                for (int half = 0; half < 2; half++) {
                    struct burst_vk_tile tl = {ts[i], wgs[j] / ts[i],
                                               tiles->k[BURST_VK_FWD][c].bc >> half, 0};
                    if (!burst_vk_tile_valid(&be->caps, &be->env, BURST_VK_FWD, c, &tl) ||
                        memcmp(&tl, &tiles->k[BURST_VK_FWD][c], sizeof tl) == 0)
                        continue;
                    double ms = burst_vk_time_fwd(be, BURST_VK_FWD, d, &tl);
                    if (ms > 0 && (best_ms <= 0 || ms < best_ms)) {
                        best_ms = ms;
                        best = tl;
                    }
                }
        tiles->k[BURST_VK_FWD][c] = best;
        for (int k = BURST_VK_DQ; k <= BURST_VK_DKV; k++) {
            struct burst_vk_tile tl = {best.t, best.br, tiles->k[k][c].bc, 0};
            if (burst_vk_tile_valid(&be->caps, &be->env, (enum burst_vk_kernel)k, c, &tl))
                tiles->k[k][c] = tl;
        }
    }
    tiles->source = "autotune";
}

void burst_vk_tiles_choose(struct burst_vk_backend *be)
{
    burst_vk_tiles_rule(&be->caps, &be->env, &be->tiles);
    if (burst_vk_cache_load(&be->caps, &be->env, &be->tiles))
        return;
    if (be->env.autotune && be->caps.timestamps) {
        be->tiles.source = "rule";
        burst_vk_autotune(be, &be->tiles);
        burst_vk_cache_save(&be->caps, &be->env, &be->tiles);
    }
}
