/*
 * runtime/vulkan/vk_attn.c - fwd_step, bwd_delta and bwd_step of the Vulkan backend: argument
 * checks, the per-row key intervals, the parameter block and the dispatches.
 *
 * Masks: the host computes each query row's allowed key interval [kb, ke) from the posmaps
 * (runtime/posmap.h, O(1) per row) into an int32 pair array the kernels read; kernels skip key
 * tiles outside the union of their rows' intervals and mask partial tiles per row.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "logger.h"
#include "step_check.h"
#include "vk_internal.h"

#define BURST_VK_I32_MAX ((int64_t)0x7fffffff)

static size_t burst_vk_esize(burst_dtype_t dt)
{
    return dt == BURST_DTYPE_FP32 ? 4 : 2;
}

/* The vulkan limits of a [B, n, H, d] view the engine has checked (runtime/step_check.h): no
 * negative stride, at most 2^31 - 1 elements spanned; gives its extent in bytes from data. */
static burst_status_t burst_vk_check_view(const char *op, const char *name,
                                          const struct burst_tensor *t, size_t *bytes_p)
{
    int64_t last = 0;
    int empty = 0;
    for (int k = 0; k < BURST_TENSOR_DIMS; k++) {
        if (t->stride[k] < 0)
            return burst_error(BURST_ERR_UNSUPPORTED,
                               "%s: %s->stride[%d] = %lld: negative strides are unsupported by the "
                               "vulkan backend",
                               op, name, k, (long long)t->stride[k]);
        empty |= t->shape[k] == 0;
        if (t->shape[k] > 0)
            last += (t->shape[k] - 1) * t->stride[k];
    }
    if (last >= BURST_VK_I32_MAX)
        return burst_error(BURST_ERR_TOO_LARGE,
                           "%s: %s spans %lld elements; the vulkan kernels index at most 2^31 - 1",
                           op, name, (long long)last + 1);
    *bytes_p = empty ? 0 : (size_t)(last + 1) * burst_vk_esize(t->dtype);
    return BURST_OK;
}

/* The vulkan limits of a step the engine has checked: each view's extent, head dim, 32-bit
 * indices and grid sizes. */
static burst_status_t burst_vk_check_qkv(struct burst_vk_backend *be, const char *op,
                                         const struct burst_tensor *q, const struct burst_tensor *k,
                                         const struct burst_tensor *v,
                                         const struct burst_tensor *dout, size_t bytes[4],
                                         struct burst_step_dims *dim)
{
    burst_status_t st;
    if ((st = burst_vk_check_view(op, "q", q, &bytes[0])) != BURST_OK ||
        (st = burst_vk_check_view(op, "k", k, &bytes[1])) != BURST_OK ||
        (st = burst_vk_check_view(op, "v", v, &bytes[2])) != BURST_OK ||
        (dout && (st = burst_vk_check_view(op, "dout", dout, &bytes[3])) != BURST_OK))
        return st;
    burst_step_dims_of(q, k, dim);
    if (dim->d > BURST_VK_MAX_HEAD_DIM)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: head dim = %lld is unsupported by the vulkan backend (multiples of "
                           "8 up to %d)",
                           op, (long long)dim->d, BURST_VK_MAX_HEAD_DIM);
    int64_t rows = dim->batch * (dim->nq > dim->nk ? dim->nq : dim->nk) *
                   (dim->hq > dim->hkv ? dim->hq : dim->hkv);
    if (rows > BURST_VK_I32_MAX / dim->d || dim->hq > 65535 || dim->batch > 65535)
        return burst_error(BURST_ERR_TOO_LARGE,
                           "%s: batch = %lld, rows = %lld / %lld, heads = %lld / %lld, d = %lld: "
                           "the vulkan kernels index at most 2^31 - 1 elements and 65535 heads "
                           "and batches",
                           op, (long long)dim->batch, (long long)dim->nq, (long long)dim->nk,
                           (long long)dim->hq, (long long)dim->hkv, (long long)dim->d);
    (void)be;
    return BURST_OK;
}

/* The tile of kernel kern for head dim d, or an UNSUPPORTED error naming d. */
static burst_status_t burst_vk_tile_for(struct burst_vk_backend *be, const char *op,
                                        enum burst_vk_kernel kern, int64_t d,
                                        struct burst_vk_tile *tl)
{
    *tl = be->tiles.k[kern][burst_vk_dclass((int)d)];
    if (tl->t > 0)
        return BURST_OK;
    struct burst_vk_tile one = {1, 1, 1, 0};
    return burst_error(
        BURST_ERR_UNSUPPORTED,
        "%s: head dim = %lld is unsupported on vulkan device %d (%s): its %s kernel "
        "needs at least %zu bytes of shared memory, the device offers %u%s",
        op, (long long)d, be->index, be->caps.name, burst_vk_kernel_names[kern],
        burst_vk_tile_shared(kern, &one, burst_vk_dclass_max[burst_vk_dclass((int)d)]),
        be->env.max_shared && be->env.max_shared < be->caps.max_shared ? be->env.max_shared
                                                                       : be->caps.max_shared,
        be->env.max_shared ? " (BURST_VK_MAX_SHARED)" : "");
}

static struct burst_vk_view burst_vk_view_of(const struct burst_tensor *t, VkDeviceAddress a)
{
    struct burst_vk_view v = {a, 0, (int32_t)t->stride[0], (int32_t)t->stride[1],
                              (int32_t)t->stride[2]};
    if (t->dtype != BURST_DTYPE_FP32 && (a & 3u)) { /* 4-byte aligned base + element offset */
        v.addr = a - 2;
        v.off = 1;
    }
    return v;
}

/* Whether 8 consecutive fp16 (or bf16) elements of every row of t at device address a are one
 * 16-byte aligned vector (the cooperative-matrix kernels' fast loads, params flag bit 3). */
static int burst_vk_vec8(const struct burst_tensor *t, VkDeviceAddress a)
{
    return t->dtype != BURST_DTYPE_FP32 && a % 16 == 0 && t->stride[0] % 8 == 0 &&
           t->stride[1] % 8 == 0 && t->stride[2] % 8 == 0;
}

/* Whether every row of fp32 t at device address a starts a 16-byte aligned vector of 4
 * elements (the register-tiled kernels' vec4 loads, params flag bit 5). */
static int burst_vk_vec4(const struct burst_tensor *t, VkDeviceAddress a)
{
    return t->dtype == BURST_DTYPE_FP32 && a % 16 == 0 && t->stride[0] % 4 == 0 &&
           t->stride[1] % 4 == 0 && t->stride[2] % 4 == 0;
}

/* Allowed key interval of each query row, clamped to [0, nk]; empty rows get (0, 0). */
static void burst_vk_rows(const struct burst_posmap *qpos, const struct burst_posmap *kpos,
                          struct burst_mask mask, int64_t nq, int64_t nk, int32_t *rows)
{
    for (int64_t i = 0; i < nq; i++) {
        int64_t lo, hi;
        burst_mask_keys(kpos, mask, burst_posmap_pos(qpos, i), &lo, &hi);
        lo = lo < 0 ? 0 : lo;
        hi = hi > nk ? nk : hi;
        if (lo >= hi)
            lo = hi = 0;
        rows[2 * i] = (int32_t)lo;
        rows[2 * i + 1] = (int32_t)hi;
    }
}

/* Loop iterations of a register-tiled kernel per tile of BC columns, counted as described at
 * burst_vk_rows_per_dispatch below, and its fixed loops (*fixed). */
static int64_t burst_vk_rt_loops(enum burst_vk_kernel k, const struct burst_step_dims *dim,
                                 const struct burst_vk_tile *tl, int64_t *fixed)
{
    /* nb: operands per chunk of S (fwd: Q, K; bwd: also dO, V), na: accumulators */
    int64_t nb = k == BURST_VK_FWD_RT ? 1 : 2;
    int64_t na = k == BURST_VK_DKV_RT || k == BURST_VK_DKVQ_RT ? 2 : 1;
    int64_t dc = tl->t, cg = tl->bc / 4, inv = (int64_t)(tl->br / 4) * cg;
    int64_t nv = (dim->d + 4 * cg - 1) / (4 * cg);
    int64_t qk = (nb * (tl->br + tl->bc) * dc / 4 + inv - 1) / inv;
    int64_t vl = (dc * dim->d / 4 + inv - 1) / inv;
    /* 8: the soft-cap's loops over the 4 rows (fwd: one, bwd: two) */
    int64_t tile = ((dim->d + dc - 1) / dc) * (5 * qk + 5 * nb * dc + 2) + 40 + 8 +
                   4 * (cg + nv + 1) + na * (tl->bc / dc) * (vl + dc * (1 + 5 * nv) + 2);
    if (k == BURST_VK_DKVQ_RT) { /* dQ over the key rows in chunks of DC, nt items each */
        int64_t nt = (dim->d + tl->br - 1) / tl->br;
        tile += (tl->br / dc) * (vl + nt * (25 * dc / 4 + 1) + 2) + 25 * nt + 2;
    }
    if (k != BURST_VK_FWD_RT && k != BURST_VK_DQ_RT) /* every head of the group, the scan */
        tile = tile * dim->group + tl->bc / inv + 1;
    *fixed = 4 * (cg + 5 * nv + 1) * na + 64;
    return tile;
}

/* Whether a register-tiled kernel fits lavapipe's loop limit with at least one tile per
 * dispatch (dkv_rt with a large GQA group at a large head dim may not: it then gives way to
 * the scalar kernel, the last resort). */
static int burst_vk_rt_fits(const struct burst_vk_backend *be, enum burst_vk_kernel k,
                            const struct burst_step_dims *dim, const struct burst_vk_tile *tl)
{
    int64_t fixed, tile = burst_vk_rt_loops(k, dim, tl, &fixed);
    return be->caps.type != VK_PHYSICAL_DEVICE_TYPE_CPU || tile + fixed <= 49152;
}

/*
 * Rows of the K/V block (fwd, dq) or of the query block (dkv) one dispatch may take.
 *
 * Mesa's lavapipe ends an invocation's loops once they have run 65535 iterations in total
 * (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS, shared by every loop of a shader) and the shader
 * then computes on with what it has: a silently wrong result, not an error. On software
 * devices (VK_PHYSICAL_DEVICE_TYPE_CPU) a call is therefore split into dispatches over ranges
 * of rows (params lo, hi) whose loop iterations stay under 48 Ki by a generous count: per key
 * (fwd, dq) or per query row and head of the group (dkv) two loops over the invocation's
 * d / T elements, its share of the tile loads and a few more; plus the invocation's fixed
 * loops. The register-tiled kernels count per tile of BC columns (keys; query rows of each
 * head of the group for dkv_rt) every loop as a loop (the unroll hints may not be taken): the
 * chunks over d with their loads and 4-wide inner loops, the mask and the row reductions, the
 * chunks of columns with theirs; dkv_rt adds its scan of the range's query rows. A range is a
 * whole number of staged tiles (BC rows), at least one. Hardware devices take the whole block
 * in one dispatch.
 */
static int64_t burst_vk_rows_per_dispatch(const struct burst_vk_backend *be, enum burst_vk_kernel k,
                                          const struct burst_step_dims *dim,
                                          const struct burst_vk_tile *tl)
{
    /* dK / dV kernels split the query rows, the others the keys */
    int64_t n = k == BURST_VK_DKV || k == BURST_VK_DKV_CM || k == BURST_VK_DKV_RT ||
                        k == BURST_VK_DKVQ_RT || k == BURST_VK_DKV_CMQ || k == BURST_VK_DKV_CM2
                    ? dim->nq
                    : dim->nk;
    if (be->caps.type != VK_PHYSICAL_DEVICE_TYPE_CPU || burst_vk_kernel_cm(k) ||
        burst_vk_kernel_cm2(k) || n <= 0)
        return n > 0 ? n : 1;
    if (burst_vk_kernel_rt(k)) {
        int64_t fixed, tile = burst_vk_rt_loops(k, dim, tl, &fixed);
        int64_t tiles = (49152 - fixed) / tile;
        return tiles < 1 ? tl->bc : tiles * tl->bc;
    }
    int64_t e = dim->d / tl->t, inv = (int64_t)tl->br * tl->t;
    int64_t per = 2 * e + dim->d / inv + 1 + 8;
    if (k == BURST_VK_DKV)
        per *= dim->group;
    int64_t budget = 49152 - 2 * e - 64, rows = budget / per;
    rows -= rows % tl->bc;
    return rows < tl->bc ? tl->bc : rows;
}

static uint32_t burst_vk_groups(int64_t n, int br)
{
    return (uint32_t)((n + br - 1) / br);
}

/* Parameter blocks are BURST_VK_PBLOCK bytes apart in the staged extra area. */
#define BURST_VK_PBLOCK 256
_Static_assert(sizeof(struct burst_vk_params) <= BURST_VK_PBLOCK, "parameter block too large");

/* Dispatches of kernel kern over rows [0, n) in ranges of `per`: copies of the parameter block
 * at extra + 0 with lo / hi set, at blocks first, first + 1, ... of the extra area (device
 * address xa); appends to d (from d[*nd]). Each range adds into the same accumulators, so
 * waits for the one before; the first waits for the dispatches before it where wait_first. */
static void burst_vk_split(unsigned char *extra, VkDeviceAddress xa, int first, int64_t n,
                           int64_t per, enum burst_vk_kernel kern, VkPipeline pipe,
                           const uint32_t groups[3], int wait_first, struct burst_vk_dispatch *d,
                           int *nd)
{
    const struct burst_vk_params *p0 = (const void *)extra;
    for (int64_t lo = 0, c = first; lo < n; lo += per, c++) {
        struct burst_vk_params *pc = (void *)(extra + (size_t)c * BURST_VK_PBLOCK);
        if (c != 0)
            *pc = *p0;
        pc->lo = (int32_t)lo;
        pc->hi = (int32_t)(n - lo > per ? lo + per : n);
        d[*nd] = (struct burst_vk_dispatch){kern,
                                            pipe,
                                            xa + (VkDeviceAddress)c * BURST_VK_PBLOCK,
                                            {groups[0], groups[1], groups[2]},
                                            lo > 0 || wait_first};
        (*nd)++;
    }
}

/*
 * bf16 and fp32 inputs of the *_cmq kernels: dispatches before the kernels', appended to d from
 * d[*nd], with their parameter blocks at `blocks` (device address ba) of the staged extra area
 * and one result word per view at `words` (wa; 16 bytes, zeroed here). For each bf16 or fp32
 * view t[i] (at device address addr[i]; i = 0..n-1 is q, k, v, dout) elem_amax first finds its
 * largest magnitude (bf16 bits into words[i]), from which the kernels take its power-of-two
 * scale into fp16's range (convert.glsl bf16_scale); then, where cvt_at[i] != 0, elem_cvt
 * converts the view so scaled, once, into packed fp16 at cvt_at[i] (an fp32 view into two
 * halves per element, hi and lo; each workgroup of fwd_cmq would otherwise convert every K / V
 * tile it reads itself: load8s). amax_pipe and cvt_pipe are those of the views' dtype.
 */
static void burst_vk_cvt_prep(int n, const struct burst_tensor *const *t,
                              const VkDeviceAddress *addr, const VkDeviceAddress *cvt_at,
                              VkPipeline amax_pipe, VkPipeline cvt_pipe, unsigned char *blocks,
                              VkDeviceAddress ba, unsigned char *words, VkDeviceAddress wa,
                              struct burst_vk_dispatch *d, int *nd)
{
    memset(words, 0, 16);
    int nb = 0, cvt_seen = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (t[i]->dtype == BURST_DTYPE_FP16 || (pass == 1 && !cvt_at[i]))
                continue;
            struct burst_vk_elem_params *ep = (void *)(blocks + (size_t)nb * BURST_VK_PBLOCK);
            memset(ep, 0, sizeof *ep);
            ep->src = addr[i];
            memcpy(ep->shape, t[i]->shape, sizeof ep->shape);
            memcpy(ep->sstride, t[i]->stride, sizeof ep->sstride);
            ep->units =
                (uint64_t)(t[i]->shape[0] * t[i]->shape[1] * t[i]->shape[2] * t[i]->shape[3]) /
                8;           /* 8 elements of a row (d % 8 == 0) */
            if (pass == 1) { /* elem_cvt: the scale from the view's word (and dO's: V's) */
                ep->aux = wa + 4 * (VkDeviceAddress)i;
                if (i == 3) /* a backward's dO: its scale also bounds dS (convert.glsl) */
                    ep->aux2 = wa + 4 * 2;
            }
            ep->dst = pass == 0 ? wa + 4 * (VkDeviceAddress)i : cvt_at[i];
            /* amax: a few hundred workgroups, so few atomics meet on one word */
            const uint64_t cap = pass == 0 ? 512 : 65535;
            uint64_t wg = (ep->units + 127) / 128;
            wg = wg < 1 ? 1 : wg > cap ? cap : wg;
            /* the first elem_cvt reads the elem_amax results; the others are independent */
            d[(*nd)++] = (struct burst_vk_dispatch){pass == 0 ? BURST_VK_AMAX : BURST_VK_CVT,
                                                    pass == 0 ? amax_pipe : cvt_pipe,
                                                    ba + (VkDeviceAddress)nb * BURST_VK_PBLOCK,
                                                    {(uint32_t)wg, 1, 1},
                                                    pass == 1 && !cvt_seen};
            cvt_seen |= pass == 1;
            nb++;
        }
}

/* The packed fp16 [B, n, H, d] view of t at device address a (elem_cvt's output); of an fp32
 * t, [B, n, H, 2 d]: each row's d hi halves, then its d lo halves. */
static struct burst_vk_view burst_vk_packed_view(const struct burst_tensor *t, VkDeviceAddress a)
{
    const int64_t w = (t->dtype == BURST_DTYPE_FP32 ? 2 : 1) * t->shape[3];
    return (struct burst_vk_view){a, 0, (int32_t)(t->shape[1] * t->shape[2] * w),
                                  (int32_t)(t->shape[2] * w), (int32_t)w};
}

/* Room in the stream's scratch for the views t[i] with want[i] converted into packed fp16
 * (burst_vk_cvt_prep; fp32 views: two halves an element): cvt_at[i] receives each one's device
 * address, 0 where not wanted.
 * 0, or -1 where the scratch cannot grow to hold them (every cvt_at 0, no error left). */
static int burst_vk_cvt_scratch(struct burst_vk_backend *be, struct burst_vk_stream *s, int n,
                                const struct burst_tensor *const *t, const int *want,
                                VkDeviceAddress *cvt_at)
{
    size_t need = 0, off[4];
    for (int i = 0; i < n; i++) {
        off[i] = need;
        cvt_at[i] = 0;
        if (want[i]) /* 2 bytes a half, 256-byte aligned */
            need +=
                ((t[i]->dtype == BURST_DTYPE_FP32 ? 4 : 2) *
                     (size_t)(t[i]->shape[0] * t[i]->shape[1] * t[i]->shape[2] * t[i]->shape[3]) +
                 255) /
                256 * 256;
    }
    VkDeviceAddress base = 0;
    if (!need)
        return 0;
    if (burst_vk_stream_scratch(be, s, need, &base) != BURST_OK) {
        burst_log(BURST_LOG_DEBUG, BURST_SUB_VULKAN, -1,
                  "no scratch for inputs scaled into fp16 (%s): another kernel",
                  burst_last_error());
        burst_error_clear(); /* not an error: the caller takes another way */
        return -1;
    }
    for (int i = 0; i < n; i++)
        cvt_at[i] = want[i] ? base + off[i] : 0;
    return 0;
}

/* The sizes, scale and soft-cap of a step in its parameter block (forward and backward
 * alike). */
static void burst_vk_params_sizes(struct burst_vk_params *p, const struct burst_step_dims *dim,
                                  float scale, float softcap)
{
    p->softcap = softcap > 0.0f ? softcap : 0.0f;
    p->batch = (int32_t)dim->batch;
    p->nq = (int32_t)dim->nq;
    p->nk = (int32_t)dim->nk;
    p->hq = (int32_t)dim->hq;
    p->hkv = (int32_t)dim->hkv;
    p->group = (int32_t)dim->group;
    p->scale = scale;
}

/* The forward kernel of inputs no cooperative-matrix kernel takes: register-tiled where the
 * device has a tile for it and the call fits, else the scalar one (the last resort). */
static enum burst_vk_kernel burst_vk_fwd_plain(struct burst_vk_backend *be,
                                               const struct burst_step_dims *dim)
{
    const struct burst_vk_tile *rt = &be->tiles.k[BURST_VK_FWD_RT][burst_vk_dclass((int)dim->d)];
    return rt->t > 0 && burst_vk_rt_fits(be, BURST_VK_FWD_RT, dim, rt) ? BURST_VK_FWD_RT
                                                                       : BURST_VK_FWD;
}

/* Forward with an explicit kernel and tile. */
static burst_status_t burst_vk_fwd_run(struct burst_vk_backend *be, const struct burst_fwd_args *a,
                                       const struct burst_step_dims *dim, const size_t bytes[4],
                                       enum burst_vk_kernel kern, const struct burst_vk_tile *tl)
{
    const char *op = "vulkan fwd_step";
    if (burst_vk_groups(dim->nq, tl->br) > be->caps.max_groups[0])
        return burst_error(BURST_ERR_TOO_LARGE,
                           "%s: %lld query rows need more workgroups than "
                           "the device's %u",
                           op, (long long)dim->nq, be->caps.max_groups[0]);
    size_t nacc = (size_t)(dim->batch * dim->nq * dim->hq);
    struct burst_vk_slot slots[5] = {
        {a->q->data, bytes[0], 0, 0, NULL}, {a->k->data, bytes[1], 0, 0, NULL},
        {a->v->data, bytes[2], 0, 0, NULL}, {a->o_acc, nacc * (size_t)dim->d * 4, 1, 0, NULL},
        {a->lse_acc, nacc * 4, 1, 0, NULL},
    };
    int64_t per = burst_vk_rows_per_dispatch(be, kern, dim, tl);
    int nch = (int)((dim->nk + per - 1) / per);
    /* bf16 views of fwd_cmq (burst_vk_cvt_prep): nbf of them, K and V converted into the
     * stream's scratch where it can hold them (else the kernel converts each tile it reads);
     * fp32 ones (all three, f32): each converted into two fp16 halves */
    const struct burst_tensor *const qkv[3] = {a->q, a->k, a->v};
    int nbf = 0, cvt[3] = {0, 0, 0};
    const int conv = kern == BURST_VK_FWD_CMQ || kern == BURST_VK_FWD_CM2;
    const int f32 = kern == BURST_VK_FWD_CMQ && a->q->dtype == BURST_DTYPE_FP32;
    for (int i = 0; conv && i < 3; i++) {
        nbf += qkv[i]->dtype == BURST_DTYPE_BF16 || f32;
        cvt[i] = f32 || (i > 0 && qkv[i]->dtype == BURST_DTYPE_BF16 && be->env.cmq_bf16 == 1);
    }
    struct burst_vk_dispatch *d = malloc((size_t)(nch + 2 * nbf) * sizeof *d);
    if (!d)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", op);
    struct burst_vk_stream *s;
    burst_status_t st = burst_vk_stream_acquire(be, &s);
    if (st != BURST_OK) {
        free(d);
        return st;
    }
    VkDeviceAddress cvt_at[3];
    if (burst_vk_cvt_scratch(be, s, 3, qkv, cvt, cvt_at) != 0) {
        /* fwd_cmq converts bf16 tiles itself; fwd_cm2 reads fp16 K and V only, and neither
         * takes fp32 ones unconverted */
        cvt[1] = cvt[2] = 0;
        if (kern == BURST_VK_FWD_CM2 || f32) {
            burst_vk_stream_release(be, s);
            free(d);
            struct burst_vk_tile ptl;
            enum burst_vk_kernel pk = burst_vk_fwd_plain(be, dim);
            burst_status_t pst = burst_vk_tile_for(be, op, pk, dim->d, &ptl);
            return pst != BURST_OK ? pst : burst_vk_fwd_run(be, a, dim, bytes, pk, &ptl);
        }
    }
    const int ncvt = cvt[0] + cvt[1] + cvt[2];
    /* the kernel's dtypes: bf16 views converted are fp16 to it; fp32 ones stay fp32, which
     * keys the kernel that takes two halves (shaders/cm_nv.glsl SPL) */
    int dt[4] = {(int)a->q->dtype, cvt[1] && !f32 ? (int)BURST_DTYPE_FP16 : (int)a->k->dtype,
                 cvt[2] && !f32 ? (int)BURST_DTYPE_FP16 : (int)a->v->dtype, 0};
    int edt[4] = {f32 ? (int)BURST_DTYPE_FP32 : (int)BURST_DTYPE_BF16, 0, 0, 0};
    struct burst_vk_tile etl = {1, 128, 1, 0};
    VkPipeline pipe, amax_pipe = VK_NULL_HANDLE, cvt_pipe = VK_NULL_HANDLE;
    st = burst_vk_pipeline(be, kern, (int)dim->d, tl, dt, &pipe);
    if (st == BURST_OK && nbf)
        st = burst_vk_pipeline(be, BURST_VK_AMAX, 0, &etl, edt, &amax_pipe);
    if (st == BURST_OK && ncvt)
        st = burst_vk_pipeline(be, BURST_VK_CVT, 0, &etl, edt, &cvt_pipe);
    void *extra;
    VkDeviceAddress xa;
    /* extra area: nch parameter blocks, nbf + ncvt elem blocks, 3 result words, the rows */
    size_t eoff = (size_t)nch * BURST_VK_PBLOCK,
           woff = eoff + (size_t)(nbf + ncvt) * BURST_VK_PBLOCK;
    size_t roff = woff + (nbf ? BURST_VK_PBLOCK : 0);
    if (st == BURST_OK)
        st = burst_vk_stage(be, s, slots, 5, roff + 8 * (size_t)dim->nq, &extra, &xa);
    if (st == BURST_OK) {
        struct burst_vk_params *p = extra;
        memset(p, 0, sizeof *p);
        p->q = burst_vk_view_of(a->q, slots[0].addr);
        p->k = burst_vk_view_of(a->k, slots[1].addr);
        p->v = burst_vk_view_of(a->v, slots[2].addr);
        p->o = slots[3].addr;
        p->lse = slots[4].addr;
        p->rows = xa + roff;
        burst_vk_params_sizes(p, dim, a->scale, a->softcap);
        const int cm = kern == BURST_VK_FWD_CM || kern == BURST_VK_FWD_CMQ;
        if (cm && (cvt[0] || burst_vk_vec8(a->q, slots[0].addr)) &&
            (cvt[1] || burst_vk_vec8(a->k, slots[1].addr)) &&
            (cvt[2] || burst_vk_vec8(a->v, slots[2].addr)))
            p->flags |= 8;
        if (kern == BURST_VK_FWD_CM2 && burst_vk_vec8(a->q, slots[0].addr))
            p->flags |= 8; /* Q's loads (K and V: tensor loads of any alignment) */
        if (kern == BURST_VK_FWD_CM && slots[3].addr % 16 == 0)
            p->flags |= 16;
        if (kern == BURST_VK_FWD_RT && burst_vk_vec4(a->q, slots[0].addr) &&
            burst_vk_vec4(a->k, slots[1].addr) && burst_vk_vec4(a->v, slots[2].addr))
            p->flags |= 32;
        if (cvt[0]) { /* Q, K, V: packed fp16 in the scratch */
            p->q = burst_vk_packed_view(a->q, cvt_at[0]);
            p->flags |= 256;
        }
        if (cvt[1]) {
            p->k = burst_vk_packed_view(a->k, cvt_at[1]);
            p->flags |= 64;
        }
        if (cvt[2]) {
            p->v = burst_vk_packed_view(a->v, cvt_at[2]);
            p->flags |= 128;
        }
        burst_vk_rows(&a->qpos, &a->kpos, a->mask, dim->nq, dim->nk,
                      (int32_t *)(void *)((unsigned char *)extra + roff));
        const uint32_t groups[3] = {burst_vk_groups(dim->nq, tl->br), (uint32_t)dim->hq,
                                    (uint32_t)dim->batch};
        int nd = 0;
        if (nbf) {
            unsigned char *x = extra;
            p->amax = xa + woff;
            const VkDeviceAddress addr[3] = {slots[0].addr, slots[1].addr, slots[2].addr};
            burst_vk_cvt_prep(3, qkv, addr, cvt_at, amax_pipe, cvt_pipe, x + eoff, xa + eoff,
                              x + woff, xa + woff, d, &nd);
        }
        /* after elem_amax / elem_cvt: the kernel reads their results */
        burst_vk_split(extra, xa, 0, dim->nk, per, kern, pipe, groups, nd > 0, d, &nd);
        st = burst_vk_submit(be, s, d, nd, slots, 5, 0, NULL);
    }
    burst_vk_stream_release(be, s);
    free(d);
    return st;
}

/* fwd_cmq's tile for one call: burst_vk_fwd_cmq_call_tile (vk_caps.c) on the rule's tile */
static void burst_vk_fwd_cmq_tile(const struct burst_vk_backend *be, const struct burst_fwd_args *a,
                                  const struct burst_step_dims *dim, struct burst_vk_tile *tl)
{
    int64_t groups = (int64_t)burst_vk_groups(dim->nq, tl->br) * dim->hq * dim->batch;
    *tl = burst_vk_fwd_cmq_call_tile(&be->caps, &be->env, (int)dim->d, *tl, groups,
                                     burst_mask_all(&a->qpos, &a->kpos, a->mask));
}

burst_status_t burst_vk_fwd_step(void *bev, const struct burst_fwd_args *a)
{
    struct burst_vk_backend *be = bev;
    const char *op = "vulkan fwd_step";
    if (!a || !a->o_acc || !a->lse_acc)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: args, o_acc or lse_acc is NULL", op);
    struct burst_step_dims dim;
    size_t bytes[4];
    burst_status_t st = burst_vk_check_qkv(be, op, a->q, a->k, a->v, NULL, bytes, &dim);
    if (st != BURST_OK || dim.nq == 0 || dim.nk == 0 || dim.batch == 0)
        return st;
    struct burst_vk_tile tl;
    enum burst_vk_kernel kern = BURST_VK_FWD;
    /* the cooperative-matrix forward takes fp16 inputs of a head dim it has tiles for: with
     * the softmax in registers where the device's layout passed its check (vk_cmq.c), at every
     * head dim (rounded up to 16 in its matrices); that one also bf16 inputs (any of q, k, v),
     * scaled into fp16 by a power of two per view (BURST_VK_CMQ_BF16=0: not). The one with the
     * softmax through shared memory takes head dims that are multiples of 16. */
    const int any16 = a->q->dtype != BURST_DTYPE_FP32 && a->k->dtype != BURST_DTYPE_FP32 &&
                      a->v->dtype != BURST_DTYPE_FP32;
    const int all_fp16 = a->q->dtype == BURST_DTYPE_FP16 && a->k->dtype == BURST_DTYPE_FP16 &&
                         a->v->dtype == BURST_DTYPE_FP16;
    const int dcl = burst_vk_dclass((int)dim.d);
    /* fp32 inputs: fwd_cmq in two fp16 halves, where the device has its tile for them */
    if (a->q->dtype == BURST_DTYPE_FP32 && a->k->dtype == BURST_DTYPE_FP32 &&
        a->v->dtype == BURST_DTYPE_FP32 && be->cmq.ok) {
        tl = burst_vk_cmq_f32_tile(&be->caps, &be->env, BURST_VK_FWD_CMQ, (int)dim.d);
        if (tl.t > 0)
            return burst_vk_fwd_run(be, a, &dim, bytes, BURST_VK_FWD_CMQ, &tl);
    }
    /* the workgroup-scope forward first (every head dim): fp16 inputs, or bf16 ones with K and
     * V converted once a call (BURST_VK_CMQ_BF16=1) */
    if (be->use_cm2 && (all_fp16 || (any16 && be->env.cmq_bf16 == 1)) &&
        be->tiles.k[BURST_VK_FWD_CM2][dcl].t > 0)
        kern = BURST_VK_FWD_CM2;
    else if (be->use_coopmat && (all_fp16 || (any16 && be->env.cmq_bf16)) &&
             be->tiles.k[BURST_VK_FWD_CMQ][dcl].t > 0)
        kern = BURST_VK_FWD_CMQ;
    else if (be->use_coopmat && all_fp16 && dim.d % 16 == 0 &&
             be->tiles.k[BURST_VK_FWD_CM][dcl].t > 0)
        kern = BURST_VK_FWD_CM;
    /* otherwise the register-tiled forward, where the device has a tile for it */
    else
        kern = burst_vk_fwd_plain(be, &dim);
    if ((st = burst_vk_tile_for(be, op, kern, dim.d, &tl)) != BURST_OK)
        return st;
    if (kern == BURST_VK_FWD_CMQ)
        burst_vk_fwd_cmq_tile(be, a, &dim, &tl);
    return burst_vk_fwd_run(be, a, &dim, bytes, kern, &tl);
}

/* The backward kernels of a step: kq for dQ, kkv for dK and dV (BURST_VK_DKVQ_RT: dQ too).
 * Where the pair takes bf16 views converted into packed fp16 (or fp32 ones into fp16 halves),
 * they are converted into the stream's scratch at cvt_at (0: not converted) and *nbf_p counts
 * them. */
static void burst_vk_bwd_kernels(struct burst_vk_backend *be, struct burst_vk_stream *s,
                                 const struct burst_bwd_args *a, const struct burst_step_dims *dim,
                                 const struct burst_tensor *const t4[4], VkDeviceAddress cvt_at[4],
                                 enum burst_vk_kernel *kq_p, enum burst_vk_kernel *kkv_p,
                                 int *nbf_p)
{
    /* the cooperative-matrix kernels take fp16 operands of a head dim they have tiles for (the
     * *_cmq pair every head dim, rounded up to 16 in its matrices; the *_cm pair multiples of
     * 16), and the *_cmq pair also bf16 ones, converted into fp16 scaled by a power of two per
     * view (burst_vk_cvt_prep) where the stream's scratch can hold them (BURST_VK_CMQ_BF16=1,
     * the default); the register-tiled ones everything else, where the device has tiles for
     * them */
    int fp16 = 1, bf16 = 1, fp32 = 1, cvt[4] = {0, 0, 0, 0};
    int nbf = 0;
    for (int i = 0; i < 4; i++) { /* bf16: all four (dO's scale needs V's: convert.glsl) */
        fp16 &= t4[i]->dtype == BURST_DTYPE_FP16;
        bf16 &= t4[i]->dtype == BURST_DTYPE_BF16;
        fp32 &= t4[i]->dtype == BURST_DTYPE_FP32;
        cvt[i] = t4[i]->dtype == BURST_DTYPE_BF16;
    }
    enum burst_vk_kernel kq = BURST_VK_DQ, kkv = BURST_VK_DKV;
    int dc = burst_vk_dclass((int)dim->d);
    const int cmq =
        be->tiles.k[BURST_VK_DQ_CMQ][dc].t > 0 && be->tiles.k[BURST_VK_DKV_CMQ][dc].t > 0;
    /* the workgroup-scope pair first, for every head dim: fp16, or bf16 converted as below */
    const int cm2 = be->use_cm2 && be->tiles.k[BURST_VK_DQ_CM2][dc].t > 0 &&
                    be->tiles.k[BURST_VK_DKV_CM2][dc].t > 0;
    int all16 = 1, allbf = 1;
    for (int i = 0; i < 4; i++) {
        all16 &= t4[i]->dtype == BURST_DTYPE_FP16;
        allbf &= t4[i]->dtype == BURST_DTYPE_BF16;
    }
    /* fp32, all four: the *_cmq pair in two fp16 halves, where the device has tiles for them
     * (burst_vk_cmq_f32_tile) and the stream's scratch can hold the halves */
    const int f32 = fp32 && be->cmq.ok &&
                    burst_vk_cmq_f32_tile(&be->caps, &be->env, BURST_VK_DQ_CMQ, (int)dim->d).t &&
                    burst_vk_cmq_f32_tile(&be->caps, &be->env, BURST_VK_DKV_CMQ, (int)dim->d).t;
    for (int i = 0; i < 4; i++)
        cvt[i] |= f32;
    if (f32 && burst_vk_cvt_scratch(be, s, 4, t4, cvt, cvt_at) == 0) {
        kq = BURST_VK_DQ_CMQ;
        kkv = BURST_VK_DKV_CMQ;
        nbf = 4;
    } else if (cm2 && (all16 || (allbf && be->env.cmq_bf16 == 1 &&
                                 burst_vk_cvt_scratch(be, s, 4, t4, cvt, cvt_at) == 0))) {
        kq = BURST_VK_DQ_CM2;
        kkv = BURST_VK_DKV_CM2;
        for (int i = 0; allbf && i < 4; i++)
            nbf += cvt[i];
    } else if (be->use_coopmat && bf16 && cmq && be->env.cmq_bf16 == 1 &&
               burst_vk_cvt_scratch(be, s, 4, t4, cvt, cvt_at) == 0) {
        kq = BURST_VK_DQ_CMQ;
        kkv = BURST_VK_DKV_CMQ;
        for (int i = 0; i < 4; i++)
            nbf += cvt[i];
    } else if (be->use_coopmat && fp16 && cmq) {
        /* with dS in registers where the device's layout passed its check (vk_cmq.c) */
        kq = BURST_VK_DQ_CMQ;
        kkv = BURST_VK_DKV_CMQ;
    } else if (be->use_coopmat && fp16 && dim->d % 16 == 0 &&
               be->tiles.k[BURST_VK_DQ_CM][dc].t > 0 && be->tiles.k[BURST_VK_DKV_CM][dc].t > 0) {
        kq = BURST_VK_DQ_CM;
        kkv = BURST_VK_DKV_CM;
    } else {
        if (be->tiles.k[BURST_VK_DQ_RT][dc].t > 0 &&
            burst_vk_rt_fits(be, BURST_VK_DQ_RT, dim, &be->tiles.k[BURST_VK_DQ_RT][dc]))
            kq = BURST_VK_DQ_RT;
        if (be->tiles.k[BURST_VK_DKV_RT][dc].t > 0 &&
            burst_vk_rt_fits(be, BURST_VK_DKV_RT, dim, &be->tiles.k[BURST_VK_DKV_RT][dc]))
            kkv = BURST_VK_DKV_RT;
        /* a plan that need not be deterministic: the dK / dV kernel adds dQ by atomics, and
         * no dQ kernel runs (it would compute S and dP again) */
        if (kkv == BURST_VK_DKV_RT && a->dq && (a->dk || a->dv) && !a->deterministic &&
            be->use_atomic && be->tiles.k[BURST_VK_DKVQ_RT][dc].t > 0 &&
            burst_vk_rt_fits(be, BURST_VK_DKVQ_RT, dim, &be->tiles.k[BURST_VK_DKVQ_RT][dc]))
            kkv = BURST_VK_DKVQ_RT;
    }
    *kq_p = kq;
    *kkv_p = kkv;
    *nbf_p = nbf;
}

/* The parameter block p of the backward kernels, and the per-row key intervals at extra + roff
 * (device address xa + roff). */
static void burst_vk_bwd_params(struct burst_vk_params *p, const struct burst_bwd_args *a,
                                const struct burst_step_dims *dim,
                                const struct burst_vk_slot slots[9],
                                const struct burst_tensor *const t4[4],
                                const VkDeviceAddress cvt_at[4], enum burst_vk_kernel kq,
                                enum burst_vk_kernel kkv, void *extra, VkDeviceAddress xa,
                                size_t roff)
{
    memset(p, 0, sizeof *p);
    p->q = burst_vk_view_of(a->q, slots[0].addr);
    p->k = burst_vk_view_of(a->k, slots[1].addr);
    p->v = burst_vk_view_of(a->v, slots[2].addr);
    p->dout = burst_vk_view_of(a->dout, slots[3].addr);
    p->lse = slots[4].addr;
    p->delta = slots[5].addr;
    p->o = slots[6].addr;
    p->dk = slots[7].addr;
    p->dv = slots[8].addr;
    p->rows = xa + roff;
    burst_vk_params_sizes(p, dim, a->scale, a->softcap);
    p->flags = (a->dq ? 1 : 0) | (a->dk ? 2 : 0) | (a->dv ? 4 : 0);
    int vec = 1;
    for (int i = 0; i < 4; i++)
        vec &= cvt_at[i] || burst_vk_vec8(t4[i], slots[i].addr);
    if (burst_vk_kernel_cm(kq) && vec)
        p->flags |= 8;
    if ((kq == BURST_VK_DQ_RT || burst_vk_kernel_rt(kkv)) && burst_vk_vec4(a->q, slots[0].addr) &&
        burst_vk_vec4(a->k, slots[1].addr) && burst_vk_vec4(a->v, slots[2].addr) &&
        burst_vk_vec4(a->dout, slots[3].addr))
        p->flags |= 32;
    /* bf16 views converted into packed fp16 (fp32 ones into halves) in the scratch: flag bits
     * 8, 6, 7, 9 for q, k, v, dout (shaders/load8.glsl cvt_scales) */
    static const int cvt_flag[4] = {256, 64, 128, 512};
    struct burst_vk_view *pv[4] = {&p->q, &p->k, &p->v, &p->dout};
    for (int i = 0; i < 4; i++)
        if (cvt_at[i]) {
            *pv[i] = burst_vk_packed_view(t4[i], cvt_at[i]);
            p->flags |= cvt_flag[i];
        }
    burst_vk_rows(&a->qpos, &a->kpos, a->mask, dim->nq, dim->nk,
                  (int32_t *)(void *)((unsigned char *)extra + roff));
}

burst_status_t burst_vk_bwd_step(void *bev, const struct burst_bwd_args *a)
{
    struct burst_vk_backend *be = bev;
    const char *op = "vulkan bwd_step";
    if (!a)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: args is NULL", op);
    struct burst_step_dims dim;
    size_t bytes[4];
    burst_status_t st = burst_vk_check_qkv(be, op, a->q, a->k, a->v, a->dout, bytes, &dim);
    if (st != BURST_OK)
        return st;
    if ((!a->dq && !a->dk && !a->dv) || dim.nq == 0 || dim.nk == 0 || dim.batch == 0)
        return BURST_OK;
    if (!a->lse || !a->delta)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: lse or delta is NULL", op);
    struct burst_vk_stream *s;
    if ((st = burst_vk_stream_acquire(be, &s)) != BURST_OK)
        return st;
    const struct burst_tensor *const t4[4] = {a->q, a->k, a->v, a->dout};
    enum burst_vk_kernel kq, kkv;
    VkDeviceAddress cvt_at[4] = {0, 0, 0, 0};
    int nbf;
    burst_vk_bwd_kernels(be, s, a, &dim, t4, cvt_at, &kq, &kkv, &nbf);
    const int fused = kkv == BURST_VK_DKVQ_RT; /* dQ comes from the dK / dV kernel */
    /* fp32 views converted into two halves (the *_cmq pair keyed fp32: shaders/cm_nv.glsl SPL)
     * or bf16 ones converted into fp16 */
    const int f32 = nbf && a->q->dtype == BURST_DTYPE_FP32;
    struct burst_vk_tile tq, tkv;
    int dt[4] = {(int)a->q->dtype, (int)a->k->dtype, (int)a->v->dtype, (int)a->dout->dtype};
    for (int i = 0; nbf && !f32 && i < 4; i++) /* converted bf16 views are fp16 to the kernels */
        dt[i] = (int)BURST_DTYPE_FP16;
    int edt[4] = {f32 ? (int)BURST_DTYPE_FP32 : (int)BURST_DTYPE_BF16, 0, 0, 0};
    struct burst_vk_tile etl = {1, 128, 1, 0};
    VkPipeline pq = VK_NULL_HANDLE, pkv = VK_NULL_HANDLE, amax_pipe = VK_NULL_HANDLE,
               cvt_pipe = VK_NULL_HANDLE;
    if (f32) {
        tq = burst_vk_cmq_f32_tile(&be->caps, &be->env, kq, (int)dim.d);
        tkv = burst_vk_cmq_f32_tile(&be->caps, &be->env, kkv, (int)dim.d);
        st = BURST_OK;
    } else if ((st = burst_vk_tile_for(be, op, kq, dim.d, &tq)) == BURST_OK)
        st = burst_vk_tile_for(be, op, kkv, dim.d, &tkv);
    if (st == BURST_OK && kq == BURST_VK_DQ_CMQ && !f32)
        tq =
            burst_vk_dq_cmq_call_tile(&be->caps, &be->env, (int)dim.d, tq,
                                      (int64_t)burst_vk_groups(dim.nq, tq.br) * dim.hq * dim.batch);
    if (st == BURST_OK && kkv == BURST_VK_DKV_CMQ && !f32)
        tkv = burst_vk_dkv_cmq_call_tile(&be->caps, &be->env, (int)dim.d, tkv,
                                         (int64_t)burst_vk_groups(dim.nk, tkv.br) * dim.hkv *
                                             dim.batch);
    const int capped = a->softcap > 0.0f;
    if (st == BURST_OK && a->dq && !fused)
        st = burst_vk_pipeline_capped(be, kq, (int)dim.d, &tq, dt, capped, &pq);
    if (st == BURST_OK && (a->dk || a->dv || fused))
        st = burst_vk_pipeline_capped(be, kkv, (int)dim.d, &tkv, dt, capped, &pkv);
    if (st == BURST_OK && nbf &&
        (st = burst_vk_pipeline(be, BURST_VK_AMAX, 0, &etl, edt, &amax_pipe)) == BURST_OK)
        st = burst_vk_pipeline(be, BURST_VK_CVT, 0, &etl, edt, &cvt_pipe);
    if (st == BURST_OK && (burst_vk_groups(dim.nq, tq.br) > be->caps.max_groups[0] ||
                           burst_vk_groups(dim.nk, tkv.br) > be->caps.max_groups[0]))
        st = burst_error(BURST_ERR_TOO_LARGE,
                         "%s: %lld query / %lld key rows need more workgroups than the "
                         "device's %u",
                         op, (long long)dim.nq, (long long)dim.nk, be->caps.max_groups[0]);
    if (st != BURST_OK) {
        burst_vk_stream_release(be, s);
        return st;
    }
    size_t nrow = (size_t)(dim.batch * dim.nq * dim.hq);
    size_t nkv = (size_t)(dim.batch * dim.nk * dim.hkv * dim.d);
    struct burst_vk_slot slots[9] = {
        {a->q->data, bytes[0], 0, 0, NULL},
        {a->k->data, bytes[1], 0, 0, NULL},
        {a->v->data, bytes[2], 0, 0, NULL},
        {a->dout->data, bytes[3], 0, 0, NULL},
        {a->lse, nrow * 4, 0, 0, NULL},
        {a->delta, nrow * 4, 0, 0, NULL},
        {a->dq, a->dq ? nrow * (size_t)dim.d * 4 : 0, 1, 0, NULL},
        {a->dk, a->dk ? nkv * 4 : 0, 1, 0, NULL},
        {a->dv, a->dv ? nkv * 4 : 0, 1, 0, NULL},
    };
    int64_t per_kv = pkv ? burst_vk_rows_per_dispatch(be, kkv, &dim, &tkv) : 1;
    int64_t per_q = pq ? burst_vk_rows_per_dispatch(be, kq, &dim, &tq) : 1;
    int nkv_d = pkv ? (int)((dim.nq + per_kv - 1) / per_kv) : 0;
    int nq_d = pq ? (int)((dim.nk + per_q - 1) / per_q) : 0;
    struct burst_vk_dispatch *d = malloc((size_t)(nkv_d + nq_d + 2 * nbf) * sizeof *d);
    if (!d) {
        burst_vk_stream_release(be, s);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", op);
    }
    void *extra;
    VkDeviceAddress xa;
    /* extra area: the kernels' parameter blocks, 2 nbf elem blocks, 4 result words, the rows */
    size_t eoff = (size_t)(nkv_d + nq_d) * BURST_VK_PBLOCK;
    size_t woff = eoff + 2 * (size_t)nbf * BURST_VK_PBLOCK;
    size_t roff = woff + (nbf ? BURST_VK_PBLOCK : 0);
    st = burst_vk_stage(be, s, slots, 9, roff + 8 * (size_t)dim.nq, &extra, &xa);
    if (st == BURST_OK) {
        struct burst_vk_params *p = extra;
        burst_vk_bwd_params(p, a, &dim, slots, t4, cvt_at, kq, kkv, extra, xa, roff);
        const uint32_t gkv[3] = {burst_vk_groups(dim.nk, tkv.br), (uint32_t)dim.hkv,
                                 (uint32_t)dim.batch};
        const uint32_t gq[3] = {burst_vk_groups(dim.nq, tq.br), (uint32_t)dim.hq,
                                (uint32_t)dim.batch};
        int nd = 0;
        if (nbf) {
            unsigned char *x = extra;
            p->amax = xa + woff;
            const VkDeviceAddress addr[4] = {slots[0].addr, slots[1].addr, slots[2].addr,
                                             slots[3].addr};
            burst_vk_cvt_prep(4, t4, addr, cvt_at, amax_pipe, cvt_pipe, x + eoff, xa + eoff,
                              x + woff, xa + woff, d, &nd);
        }
        /* the first kernel waits for elem_amax / elem_cvt, if any; dQ's is independent of
         * dK / dV's (other outputs) */
        if (pkv) /* over query rows */
            burst_vk_split(extra, xa, 0, dim.nq, per_kv, kkv, pkv, gkv, nd > 0, d, &nd);
        if (pq) /* over keys */
            burst_vk_split(extra, xa, nkv_d, dim.nk, per_q, kq, pq, gq, nd > 0 && !pkv, d, &nd);
        st = burst_vk_submit(be, s, d, nd, slots, 9, 0, NULL);
    }
    burst_vk_stream_release(be, s);
    free(d);
    return st;
}

burst_status_t burst_vk_bwd_delta(void *bev, const struct burst_tensor *dout,
                                  const struct burst_tensor *o, float *delta)
{
    struct burst_vk_backend *be = bev;
    const char *op = "vulkan bwd_delta";
    if (!delta)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: delta is NULL", op);
    size_t bd, bo;
    burst_status_t st;
    if ((st = burst_vk_check_view(op, "dout", dout, &bd)) != BURST_OK ||
        (st = burst_vk_check_view(op, "o", o, &bo)) != BURST_OK)
        return st;
    for (int i = 0; i < BURST_TENSOR_DIMS; i++)
        if (o->shape[i] != dout->shape[i])
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: o->shape[%d] = %lld differs from dout->shape[%d] = %lld", op, i,
                               (long long)o->shape[i], i, (long long)dout->shape[i]);
    int64_t d = dout->shape[3];
    int64_t rows = dout->shape[0] * dout->shape[1] * dout->shape[2];
    if (rows == 0 || d == 0)
        return BURST_OK;
    if (d % 8 != 0 || d > BURST_VK_MAX_HEAD_DIM)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: head dim = %lld is unsupported by the vulkan backend (multiples "
                           "of 8 up to %d)",
                           op, (long long)d, BURST_VK_MAX_HEAD_DIM);
    if (rows >= BURST_VK_I32_MAX)
        return burst_error(BURST_ERR_TOO_LARGE, "%s: %lld rows exceed 2^31 - 1", op,
                           (long long)rows);
    struct burst_vk_tile tl = be->tiles.k[BURST_VK_DELTA][0];
    int dt[4] = {(int)o->dtype, 0, 0, (int)dout->dtype};
    VkPipeline pipe;
    if ((st = burst_vk_pipeline(be, BURST_VK_DELTA, (int)d, &tl, dt, &pipe)) != BURST_OK)
        return st;
    struct burst_vk_slot slots[3] = {
        {o->data, bo, 0, 0, NULL},
        {dout->data, bd, 0, 0, NULL},
        {delta, (size_t)rows * 4, 1, 0, NULL},
    };
    struct burst_vk_stream *s;
    if ((st = burst_vk_stream_acquire(be, &s)) != BURST_OK)
        return st;
    void *extra;
    VkDeviceAddress xa;
    st = burst_vk_stage(be, s, slots, 3, sizeof(struct burst_vk_params), &extra, &xa);
    if (st == BURST_OK) {
        struct burst_vk_params *p = extra;
        memset(p, 0, sizeof *p);
        p->q = burst_vk_view_of(o, slots[0].addr);
        p->dout = burst_vk_view_of(dout, slots[1].addr);
        p->delta = slots[2].addr;
        p->batch = (int32_t)dout->shape[0];
        p->nq = (int32_t)dout->shape[1];
        p->hq = (int32_t)dout->shape[2];
        uint32_t groups = burst_vk_groups(rows, 64);
        uint32_t gx = groups < 65535 ? groups : 65535;
        struct burst_vk_dispatch dd = {
            BURST_VK_DELTA, pipe, xa, {gx, (groups + gx - 1) / gx, 1}, 0};
        st = burst_vk_submit(be, s, &dd, 1, slots, 3, 0, NULL);
    }
    burst_vk_stream_release(be, s);
    return st;
}
