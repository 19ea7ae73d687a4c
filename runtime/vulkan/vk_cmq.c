/*
 * runtime/vulkan/vk_cmq.c - the accumulator-layout check of the cooperative-matrix kernels that
 * work on the accumulators' elements in registers (shaders/fwd_cmq_nv.comp,
 * bwd_dq_cmq_nv.comp, bwd_dkv_cmq_nv.comp: kernels fwd_cmq, dq_cmq, dkv_cmq).
 *
 * GL_NV_cooperative_matrix does not say which elements of a matrix an invocation holds, so
 * fwd_cm, dq_cm and dkv_cm take the scores through shared memory for the softmax and dS. The
 * *_cmq kernels work on them in registers, assuming the layout
 * of NVIDIA's tensor-core fragments for a 16 x 16 fp32 matrix and 32 invocations: 8 elements
 * each, element e of invocation `lane` at row lane / 4 + 8 rowsel(e) and column
 * 2 (lane % 4) + coloff(e), the four invocations of a quad covering two rows. Before the kernel
 * may run, this file dispatches shaders/cm_layout_nv.comp once (the matrix holding
 * r * 16 + c at (r, c); every invocation writes its elements), finds rowsel and coloff from
 * invocation 0, and checks every element of every invocation against them, that the 256
 * elements are each held once, and that converting the matrix to fp16 (as the kernels turn P
 * and dS into operands) keeps every element in place. On a match they become the kernels'
 * specialization constants 9 and 10 (vk_pipeline.c); otherwise (another driver, another
 * subgroup size, a failed dispatch) the rule's *_cmq tiles are dropped and the kernels stay
 * fwd_cm, dq_cm, dkv_cm, and be->cmq.why says why (printed with BURST_VK_PROFILE=1).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "vk_internal.h"

#define CMQ_LANES 32
#define CMQ_ELEMS 8

/* Run the layout shader; out receives 1 + T * 16 + 256 floats (the length, 16 per invocation,
 * then the matrix converted to fp16, row-major). */
static burst_status_t burst_vk_cmq_run(struct burst_vk_backend *be, int T, float *out)
{
    struct burst_vk_tile tl = {T, 1, 1, 0};
    const int dt[4] = {0, 0, 0, 0};
    VkPipeline pipe;
    burst_status_t st = burst_vk_pipeline(be, BURST_VK_CM_LAYOUT, 0, &tl, dt, &pipe);
    if (st != BURST_OK)
        return st;
    struct burst_vk_stream *s;
    if ((st = burst_vk_stream_acquire(be, &s)) != BURST_OK)
        return st;
    const size_t bytes = (1 + (size_t)T * 16 + 256) * sizeof(float);
    unsigned char *map;
    VkDeviceAddress addr;
    st = burst_vk_stream_host(be, s, bytes, &map, &addr);
    if (st == BURST_OK) {
        for (size_t i = 0; i < bytes / sizeof(float); i++) /* poison: unwritten shows as NaN */
            ((float *)(void *)map)[i] = NAN;
        struct burst_vk_dispatch d = {BURST_VK_CM_LAYOUT, pipe, addr, {1, 1, 1}, 0};
        st = burst_vk_submit(be, s, &d, 1, NULL, 0, 0, NULL);
    }
    if (st == BURST_OK)
        memcpy(out, map, bytes);
    burst_vk_stream_release(be, s);
    return st;
}

int burst_vk_cmq_match(const float *out, struct burst_vk_cmq *q)
{
    if (out[0] != (float)CMQ_ELEMS) {
        snprintf(q->why, sizeof q->why, "%g accumulator elements per invocation, not %d",
                 (double)out[0], CMQ_ELEMS);
        return 0;
    }
    uint32_t rowsel = 0, coloff = 0;
    for (int e = 0; e < CMQ_ELEMS; e++) { /* invocation 0 holds rows 0 and 8, columns 0..15 */
        float v = out[1 + e];
        if (!(v >= 0.0f && v < 256.0f) || v != floorf(v) ||
            ((int)v / 16 != 0 && (int)v / 16 != 8)) {
            snprintf(q->why, sizeof q->why, "invocation 0 holds element %g of the matrix",
                     (double)v);
            return 0;
        }
        rowsel |= (uint32_t)((int)v / 16 == 8) << e;
        coloff |= (uint32_t)((int)v % 16) << (4 * e);
    }
    unsigned char seen[256] = {0};
    for (int lane = 0; lane < CMQ_LANES; lane++)
        for (int e = 0; e < CMQ_ELEMS; e++) {
            int row = lane / 4 + 8 * (int)((rowsel >> e) & 1);
            int col = 2 * (lane % 4) + (int)((coloff >> (4 * e)) & 15);
            float v = out[1 + lane * 16 + e];
            if (col >= 16 || v != (float)(row * 16 + col) || seen[row * 16 + col]++) {
                snprintf(q->why, sizeof q->why,
                         "element %d of invocation %d is %g, not (%d, %d) of the fragment layout",
                         e, lane, (double)v, row, col);
                return 0;
            }
        }
    for (int x = 0; x < 256; x++) /* the conversion to fp16 keeps every element in place */
        if (out[1 + CMQ_LANES * 16 + x] != (float)x) {
            snprintf(q->why, sizeof q->why, "the fp16 conversion moved element (%d, %d): %g there",
                     x / 16, x % 16, (double)out[1 + CMQ_LANES * 16 + x]);
            return 0;
        }
    q->rowsel = rowsel;
    q->coloff = coloff;
    return 1;
}

void burst_vk_cmq_check(struct burst_vk_backend *be)
{
    struct burst_vk_cmq *q = &be->cmq;
    memset(q, 0, sizeof *q);
    int any = 0;
    for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++)
        for (int c = 0; c < BURST_VK_NUM_DCLASS; c++)
            any |= be->tiles.k[k][c].t > 0;
    if (!any)
        return;
    float out[1 + CMQ_LANES * 16 + 256];
    if (!be->use_coopmat) { /* the device was created without the extension */
        snprintf(q->why, sizeof q->why, "no cooperative matrices on the device");
    } else if (be->caps.subgroup != CMQ_LANES) {
        snprintf(q->why, sizeof q->why, "subgroup size %u, not %d", be->caps.subgroup, CMQ_LANES);
    } else if (burst_vk_cmq_run(be, CMQ_LANES, out) != BURST_OK) {
        snprintf(q->why, sizeof q->why, "the layout check failed: %s", burst_last_error());
    } else {
        q->ok = burst_vk_cmq_match(out, q);
    }
    if (!q->ok)
        for (int k = BURST_VK_FWD_CMQ; k <= BURST_VK_DKV_CMQ; k++)
            for (int c = 0; c < BURST_VK_NUM_DCLASS; c++)
                be->tiles.k[k][c] = (struct burst_vk_tile){0, 0, 0, 0};
}
