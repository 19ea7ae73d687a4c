#version 460
// shaders/bwd_dq_cmq_nv.comp - backward dQ on cooperative matrices (GL_NV_cooperative_matrix)
// with dS formed in registers, for one K/V block: dQ_i += tau sum_j dS_ij K_j with
// P_ij = exp(tau q_i k_j - L_i) and dS_ij = P_ij (dO_i v_j - D_i); fp16 q/k/v/dO, fp32
// accumulation, every head dim (in the matrices rounded up to DM, a multiple of 16: the padding
// columns load as 0 and are never written). Same contract as bwd_dq_cm_nv.comp,
// which takes the scores through shared memory; this kernel uses the accumulators' elements in
// place, in the fragment layout that the host checked on the device (shaders/cm_layout_nv.comp,
// runtime/vulkan/vk_cmq.c; the mapping it found: shaders/cmq.glsl).
//
// Workgroup (x = Q tile, y = query head, z = batch): W = BR / 16 subgroups of 32 invocations,
// each owning 16 query rows: Q and dO (16 x DM) in registers as MMA operands; beyond d = 128
// (SP = 2) twice as many, two on each 16 rows, each holding half of the head dim's chunks of Q,
// dO and dQ, who add their partial S and dP through shared memory (cmq_pair.glsl). K/V tiles
// of BC keys are staged in shared memory with 16-byte loads (flag bit 3), the next tile's loads
// in flight during the current one where PREFETCH (constant 11; off by default: on the H100 it
// cost registers and gained nothing, at every head dim). Per subgroup, key tile and 16-key chunk n:
//   S = Q K^T and dP = dO V^T (16 x 16, fp32) on MMAs;
//   in registers: dS = P (dP - D), P = exp2(S tau log2 e - L log2 e), masked by each row's
//   allowed key interval (an invocation's two rows' L, D and intervals in registers);
//   dQ (16 x DM, DCH fp32 accumulators a subgroup) += dS K on MMAs, dS converted to fp16.
// At the end dQ, times tau, is added into the fp32 accumulator from the registers; each
// element has one writer (deterministic). Only key tiles in the union of the tile's allowed
// intervals are visited.
// Precision: dS is rounded to fp16 before dS K (as in FlashAttention): 2^-11 relative per term.
// bf16 inputs: the host converts them into packed fp16, each view scaled by a power of two into
// fp16's range (flag bits 6-9, shaders/cm_nv.glsl cvt_scales); S is unscaled in qmul, dP and D
// are taken in dO's scaled units (so dS, rounded to fp16, is too: a small dO does not become
// fp16-subnormal; dO's scale also keeps |dS| < 2^15: convert.glsl bf16_scale_dout), and the
// scales of dO and K are undone when dQ is added. fp32 inputs (the pipeline keyed fp32): each
// view arrives as two fp16 halves per element, hi + lo (shaders/cm_nv.glsl SPL), and S, dP and
// dQ each take three MMAs a product (hi hi, lo hi and hi lo; dS split in registers: cmq.glsl
// CM_TO_A2): about 2^-21 relative per term; dS K, small terms first, goes into a fresh
// accumulator added to dQ in fp32 (the tensor cores' adds truncate: a chain of them as long as
// the key count drifts).
//
// Shared memory (one uvec4 array sh, rows padded to DM + 8 halves): K tile [BC] and V tile
// [BC] fp16; Q and dO pass through them before the loop, QP rows at a time. With SP = 2 the
// pairs' partials (cmq_pair.glsl).
// Rows of SPL DM + 8 halves with split inputs. runtime/vulkan/vk_caps.c (burst_vk_cmq_shared)
// mirrors the size.
#extension GL_GOOGLE_include_directive : require
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "cm_nv.glsl"
#include "cmq.glsl"

layout(constant_id = 11) const int PREFETCH = 0; // 1: next tile's loads in flight during this one
layout(constant_id = 12) const int CAPPED = 0;   // 1: soft-capped scores (a pipeline of its own)

const int NB = BC / 16;             // 16-key chunks of a key tile
const int KVN = 2 * BC * RS;        // the K/V tiles
const int QP = (KVN / RS) / 16 * 16 < BR ? (KVN / RS) / 16 * 16 : BR; // Q / dO rows per pass
const int L8 = BC * D8S;            // 16-byte pieces of a K (or V) tile
const int LPT = (L8 + NT - 1) / NT; // of them per invocation

shared uvec4 sh[KVN];
shared int kmin_s, kmax_s;
#include "cmq_pair.glsl"

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v, dov = P.dout;
    const int tid = int(gl_LocalInvocationID.x);
    const int sg = tid / T, lane = tid % T;
    const int rg = sg / SP, c0 = sg % SP * DCH; // its 16 rows; its first head-dim chunk
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR;
    const int g = h / P.group;
    const bool vec = (P.flags & 8) != 0;
    I32x2 rows = I32x2(P.rows);
    // this invocation's two rows: r (A) and r + 8 (B) of the subgroup's 16
    const int iA = i0 + 16 * rg + lane / 4, iB = iA + 8;
    const bool liveA = iA < P.nq, liveB = iB < P.nq;

    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
    }
    barrier();
    ivec2 myA = liveA ? rows.v[iA] : ivec2(0, 0), myB = liveB ? rows.v[iB] : ivec2(0, 0);
    myA = ivec2(max(myA.x, P.lo), min(myA.y, P.hi)); // this dispatch's keys
    myB = ivec2(max(myB.x, P.lo), min(myB.y, P.hi));
    if ((lane & 3) == 0) {
        if (myA.x < myA.y) {
            atomicMin(kmin_s, myA.x);
            atomicMax(kmax_s, myA.y);
        }
        if (myB.x < myB.y) {
            atomicMin(kmin_s, myB.x);
            atomicMax(kmax_s, myB.y);
        }
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s;
    if (kmin >= kmax)
        return;

    // Q and dO (16 rows x the subgroup's DCH chunks; split: their lo halves too) into
    // registers, through shared memory QP rows at a time
    AMAT qa[DCH], dof[DCH], ql[SPL > 1 ? DCH : 1], dol[SPL > 1 ? DCH : 1];
    for (int pass = 0; pass < 2; pass++) {
        const View src = pass == 0 ? qv : dov;
        for (int p0 = 0; p0 < BR; p0 += QP) {
            if (pass > 0 || p0 > 0)
                barrier(); // the previous pass is read
            for (int x = tid; x < QP * D8S; x += NT) {
                int row = x / D8S, c8 = x % D8S;
                bool in_q = p0 + row < BR && i0 + p0 + row < P.nq && piece_in(c8);
                sh[row * RS + c8] =
                    load8(src, vec, view_index(src, b, i0 + p0 + row, h, piece_col(c8)), in_q);
            }
            barrier();
            if (16 * rg >= p0 && 16 * rg < p0 + QP) { // uniform in the subgroup
                UNROLL for (int c = 0; c < DCH; c++) {
                    const uint at = uint((16 * rg - p0) * RS + 2 * min(c0 + c, DC - 1));
                    if (pass == 0)
                        CM_LOAD(qa[c], sh, at, uint(RS), false);
                    else
                        CM_LOAD(dof[c], sh, at, uint(RS), false);
                    if (SPL > 1 && pass == 0)
                        CM_LOAD(ql[SPL > 1 ? c : 0], sh, at + uint(D8), uint(RS), false);
                    else if (SPL > 1)
                        CM_LOAD(dol[SPL > 1 ? c : 0], sh, at + uint(D8), uint(RS), false);
                }
            }
        }
    }

    // bf16 inputs converted by the host: their scales (1 otherwise); powers of two, divided one
    // at a time (a product may overflow)
    const vec4 sc = cvt_scales(P.amax, P.flags);
    const float qmul = P.scale * LOG2E / sc.x / sc.y, pmul = 1.0 / sc.z;
    float lse2A = POS_INF, dlA = 0.0, lse2B = POS_INF, dlB = 0.0; // no key anywhere: P = 0
    const uint liA = uint((b * P.hq + h) * P.nq + iA), liB = liA + 8u;
    if (liveA) {
        float lse = F32(P.lse).v[liA];
        lse2A = lse == NEG_INF ? POS_INF : lse * LOG2E;
        dlA = F32(P.delta).v[liA] * sc.w; // D in dO's scaled units
    }
    if (liveB) {
        float lse = F32(P.lse).v[liB];
        lse2B = lse == NEG_INF ? POS_INF : lse * LOG2E;
        dlB = F32(P.delta).v[liB] * sc.w;
    }
    CMAT dq[DCH];
    UNROLL for (int c = 0; c < DCH; c++)
        dq[c] = CMAT(0.0);
    const uint kbase = view_index(kv, b, 0, g, 0), vbase = view_index(vv, b, 0, g, 0);
    uvec4 kreg[LPT], vreg[LPT];
#define FETCH_KV(j0)                                                                              \
    UNROLL for (int it = 0; it < LPT; it++) {                                                     \
        int x = tid + NT * it, row = x / D8S, c8 = x % D8S;                                       \
        bool in_block = x < L8 && (j0) + row < kmax && piece_in(c8);                              \
        uint kx = kbase + uint((j0) + row) * uint(kv.s1) + uint(piece_col(c8));                   \
        uint vx = vbase + uint((j0) + row) * uint(vv.s1) + uint(piece_col(c8));                   \
        kreg[it] = load8(kv, vec, kx, in_block);                                                  \
        vreg[it] = load8(vv, vec, vx, in_block);                                                  \
    }
    if (PREFETCH != 0)
        FETCH_KV(kmin)
    for (int j0 = kmin; j0 < kmax; j0 += BC) {
        if (PREFETCH == 0)
            FETCH_KV(j0)
        barrier(); // the previous tile (or dO's last pass) is no longer read
        UNROLL for (int it = 0; it < LPT; it++) {
            int x = tid + NT * it, row = x / D8S, c8 = x % D8S;
            if (x < L8) {
                sh[row * RS + c8] = kreg[it];
                sh[(BC + row) * RS + c8] = vreg[it];
            }
        }
        barrier();
        if (PREFETCH != 0 && j0 + BC < kmax) {
            FETCH_KV(j0 + BC)
        }

        UNROLL for (int n = 0; n < NB; n++) {
            // S = Q K^T and dP = dO V^T for the chunk's 16 keys (with SP > 1: over this
            // subgroup's chunks of the head dim, then summed over the SP subgroups)
            CMAT s = CMAT(0.0), dp = CMAT(0.0);
            UNROLL for (int c = 0; c < DCH; c++) {
                if (c0 + c < DC) { // uniform
                    BMAT bk, bv;
                    const uint kx = uint(16 * n * RS + 2 * (c0 + c));
                    const uint vx = uint((BC + 16 * n) * RS + 2 * (c0 + c));
                    CM_LOAD(bk, sh, kx, uint(RS), true);
                    CM_LOAD(bv, sh, vx, uint(RS), true);
                    s = CM_MULADD(qa[c], bk, s);
                    dp = CM_MULADD(dof[c], bv, dp);
                    if (SPL > 1) { // + the hi x lo and lo x hi products
                        s = CM_MULADD(ql[SPL > 1 ? c : 0], bk, s);
                        dp = CM_MULADD(dol[SPL > 1 ? c : 0], bv, dp);
                        CM_LOAD(bk, sh, kx + uint(D8), uint(RS), true);
                        CM_LOAD(bv, sh, vx + uint(D8), uint(RS), true);
                        s = CM_MULADD(qa[c], bk, s);
                        dp = CM_MULADD(dof[c], bv, dp);
                    }
                }
            }
            if (SP > 1)
                PAIR_SUM(s, dp, sg, lane, n)
            // dS in place: element e is query row iA or iB, key j0 + 16 n + col; with a
            // soft-cap (uniform) P from the capped S, dS times the cap's derivative
            if (CAPPED != 0 && P.cap > 0.0) {
                const float cap2 = P.cap * LOG2E, rcap2 = 1.0 / cap2;
                UNROLL for (int e = 0; e < NE; e++) {
                    int kj = j0 + 16 * n + col_of(e, lane);
                    bool rb = row_b(e);
                    ivec2 my = rb ? myB : myA;
                    float t = cap_tanh(s[e] * qmul, rcap2);
                    float p = (kj >= my.x && kj < my.y) ? exp2(cap2 * t - (rb ? lse2B : lse2A))
                                                        : 0.0;
                    s[e] = p * (dp[e] * pmul - (rb ? dlB : dlA)) * (1.0 - t * t);
                }
            } else
                UNROLL for (int e = 0; e < NE; e++) {
                int kj = j0 + 16 * n + col_of(e, lane);
                bool rb = row_b(e);
                ivec2 my = rb ? myB : myA;
                float p = (kj >= my.x && kj < my.y) ? exp2(s[e] * qmul - (rb ? lse2B : lse2A))
                                                    : 0.0;
                s[e] = p * (dp[e] * pmul - (rb ? dlB : dlA));
            }
            // dQ += dS K. Split: dS_lo K_hi + dS_hi K_lo + dS_hi K_hi, the small terms first,
            // on a fresh accumulator added to dQ in fp32 (the tensor cores' adds truncate: a
            // chain of them as long as the key count would drift)
            AMAT ads, adsl;
            CM_TO_A2(ads, adsl, s, dp);
            UNROLL for (int c = 0; c < DCH; c++) {
                if (c0 + c < DC) { // uniform
                    BMAT bk;
                    const uint kx = uint(16 * n * RS + 2 * (c0 + c));
                    CM_LOAD(bk, sh, kx, uint(RS), false);
                    if (SPL > 1) {
                        BMAT bl;
                        CM_LOAD(bl, sh, kx + uint(D8), uint(RS), false);
                        CMAT t = CM_MULADD(adsl, bk, CMAT(0.0));
                        t = CM_MULADD(ads, bl, t);
                        dq[c] = dq[c] + CM_MULADD(ads, bk, t);
                    } else {
                        dq[c] = CM_MULADD(ads, bk, dq[c]);
                    }
                }
            }
        }
    }

    // dQ accumulator += tau dQ, from the registers
    F32 acc = F32(P.o);
    const float tau = P.scale / sc.w / sc.y; // dS in dO's scaled units, K scaled
    const uint obA = uint(((b * P.nq + iA) * P.hq + h) * D), obB = obA + uint(8 * P.hq * D);
    UNROLL for (int c = 0; c < DCH; c++) {
        UNROLL for (int e = 0; e < NE; e++) {
            bool rb = row_b(e);
            int col = 16 * (c0 + c) + col_of(e, lane);
            if ((rb ? liveB : liveA) && col < D) { // (DM > D, or DCH SP > DC: padding)
                uint x = (rb ? obB : obA) + uint(col);
                acc.v[x] = fma(tau, dq[c][e], acc.v[x]);
            }
        }
    }
}
