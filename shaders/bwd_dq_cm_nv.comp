#version 460
// shaders/bwd_dq_cm_nv.comp - backward dQ on cooperative matrices (GL_NV_cooperative_matrix) for
// one K/V block: dQ_i += tau sum_j dS_ij K_j with P_ij = exp(tau q_i k_j - L_i) and
// dS_ij = P_ij (dO_i v_j - D_i); fp16 q/k/v/dO, fp32 accumulation, head dims <= 128 that are
// multiples of 16.
//
// Workgroup (x = Q tile, y = query head, z = batch): W = BR / 16 subgroups of T invocations,
// each owning 16 query rows. The Q tile is staged once in shared memory, the subgroup's dO
// rows once in registers (MMA operands); K/V tiles of BC keys are staged in shared memory with
// 16-byte loads (flag bit 3), the next tile's loads in flight during the current one. Per
// subgroup and key tile:
//   S = Q K^T and dP = dO V^T (16 x BC, fp32) on 16x16x16 MMAs, to the subgroup's scratch tile;
//   the T invocations, T / 16 per row, form dS = P (dP - D) in fp32 from the row's L and D,
//   masked by the row's allowed key interval, and write it back as fp16 over S;
//   dQ (16 x D, D/16 fp32 accumulators) += dS K on MMAs.
// At the end dQ, times tau, is added into the fp32 accumulator through the scratch tile; each
// element has one writer (deterministic). Only key tiles in the union of the tile's allowed
// intervals are visited.
// Precision: dS is rounded to fp16 before dS K (as in FlashAttention): 2^-11 relative per term.
//
// Shared memory (uvec4 tiles, cm_nv.glsl):
//   qsh   Q tile [BR][D + 8] fp16
//   kvsh  K tile [BC][D + 8] and V tile [BC][D + 8] fp16
//   xsh   per subgroup: the subgroup's dO rows [16][D + 8] fp16 before the loop; in it S
//         [16][BC + 4] and dP [16][BC + 4] fp32, then dS [16][BC + 8] fp16 over S; dQ chunks
//         [16][16] fp32 at the end
// runtime/vulkan/vk_caps.c (burst_vk_tile_shared) mirrors these sizes.
#extension GL_GOOGLE_include_directive : require
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "cm_nv.glsl"

const int NB = BC / 16;             // 16-key chunks of a key tile
const int CPL = BC / LPR;           // scores per invocation (a multiple of 8)
const int SS = (BC + 4) / 4;        // row stride of S and dP (uvec4 = 4 floats)
const int PS = (BC + 8) / 8;        // row stride of dS (uvec4 = 8 halves)
const int XSZ = 2 * 16 * SS > 16 * RS ? 2 * 16 * SS : 16 * RS; // scratch per subgroup: S, dP
                                                              // (first: the subgroup's dO rows)
const int L8 = BC * (D / 8);        // 16-byte pieces of a K (or V) tile
const int LPT = (L8 + NT - 1) / NT; // of them per invocation

shared uvec4 qsh[BR * RS];
shared uvec4 kvsh[2 * BC * RS];
shared uvec4 xsh[W * XSZ];
shared int kmin_s, kmax_s;

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v, dov = P.dout;
    const int tid = int(gl_LocalInvocationID.x);
    const int sg = tid / T, lane = tid % T;
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR;
    const int g = h / P.group;
    const bool vec = (P.flags & 8) != 0;
    I32x2 rows = I32x2(P.rows);
    // invocation `lane` of subgroup sg works on row r of the subgroup's 16, columns
    // [part * CPL, (part + 1) * CPL) of the key tile
    const int r = lane / LPR, part = lane % LPR;
    const int i = i0 + 16 * sg + r;
    const bool live = i < P.nq;

    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
    }
    barrier();
    ivec2 my = live ? rows.v[i] : ivec2(0, 0);
    my = ivec2(max(my.x, P.lo), min(my.y, P.hi)); // this dispatch's keys
    if (part == 0 && my.x < my.y) {
        atomicMin(kmin_s, my.x);
        atomicMax(kmax_s, my.y);
    }
    // Q tile to shared memory; the subgroup's dO rows through the K/V space to registers
    for (int x = tid; x < BR * (D / 8); x += NT) {
        int row = x / (D / 8), c8 = x % (D / 8);
        bool in_q = i0 + row < P.nq;
        qsh[row * RS + c8] = load8(qv, vec, view_index(qv, b, i0 + row, h, 8 * c8), in_q);
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s;
    if (kmin >= kmax)
        return;
    AMAT dof[DC];
    for (int x = lane; x < 16 * (D / 8); x += T) { // dO rows of this subgroup, one at a time
        int row = x / (D / 8), c8 = x % (D / 8), ir = i0 + 16 * sg + row;
        xsh[sg * XSZ + row * RS + c8] =
            load8(dov, vec, view_index(dov, b, ir, h, 8 * c8), ir < P.nq);
    }
    subgroup_sync();
    UNROLL for (int c = 0; c < DC; c++)
        CM_LOAD(dof[c], xsh, uint(sg * XSZ + 2 * c), uint(RS), false);
    subgroup_sync();

    const float qmul = P.scale * LOG2E;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    const float smul = capped ? 1.0 : qmul; // capped scores are in log2 units already
    float lse2 = POS_INF, dl = 0.0; // no key anywhere: P = 0
    if (live) {
        const uint li = uint((b * P.hq + h) * P.nq + i);
        float lse = F32(P.lse).v[li];
        lse2 = lse == NEG_INF ? POS_INF : lse * LOG2E;
        dl = F32(P.delta).v[li];
    }
    CMAT dq[DC];
    UNROLL for (int c = 0; c < DC; c++)
        dq[c] = CMAT(0.0);
    const int xb = sg * XSZ;

    const uint kbase = view_index(kv, b, 0, g, 0), vbase = view_index(vv, b, 0, g, 0);
    uvec4 kreg[LPT], vreg[LPT];
#define FETCH_KV(j0)                                                                              \
    UNROLL for (int it = 0; it < LPT; it++) {                                                     \
        int x = tid + NT * it, row = x / (D / 8), c8 = x % (D / 8);                               \
        bool in_block = x < L8 && (j0) + row < kmax;                                              \
        uint kx = kbase + uint((j0) + row) * uint(kv.s1) + uint(8 * c8);                          \
        uint vx = vbase + uint((j0) + row) * uint(vv.s1) + uint(8 * c8);                          \
        kreg[it] = load8(kv, vec, kx, in_block);                                                  \
        vreg[it] = load8(vv, vec, vx, in_block);                                                  \
    }
    FETCH_KV(kmin)
    for (int j0 = kmin; j0 < kmax; j0 += BC) {
        barrier(); // the previous tile is no longer read
        UNROLL for (int it = 0; it < LPT; it++) {
            int x = tid + NT * it, row = x / (D / 8), c8 = x % (D / 8);
            if (x < L8) {
                kvsh[row * RS + c8] = kreg[it];
                kvsh[(BC + row) * RS + c8] = vreg[it];
            }
        }
        barrier();
        if (j0 + BC < kmax) {
            FETCH_KV(j0 + BC)
        }

        // S = Q K^T and dP = dO V^T, to the scratch tile
        UNROLL for (int n = 0; n < NB; n++) {
            CMAT s = CMAT(0.0), dp = CMAT(0.0);
            UNROLL for (int c = 0; c < DC; c++) {
                AMAT a;
                BMAT bk, bv;
                CM_LOAD(a, qsh, uint(16 * sg * RS + 2 * c), uint(RS), false);
                CM_LOAD(bk, kvsh, uint(16 * n * RS + 2 * c), uint(RS), true);
                CM_LOAD(bv, kvsh, uint((BC + 16 * n) * RS + 2 * c), uint(RS), true);
                s = CM_MULADD(a, bk, s);
                dp = CM_MULADD(dof[c], bv, dp);
            }
            CM_STORE(s, xsh, uint(xb + 4 * n), uint(SS), false);
            CM_STORE(dp, xsh, uint(xb + 16 * SS + 4 * n), uint(SS), false);
        }
        subgroup_sync();

        // dS = P (dP - D) of row r over this invocation's CPL columns, fp16 over S
        float ds[CPL];
        UNROLL for (int j4 = 0; j4 < CPL / 4; j4++) {
            vec4 sw = uintBitsToFloat(xsh[xb + r * SS + part * (CPL / 4) + j4]);
            vec4 pw = uintBitsToFloat(xsh[xb + 16 * SS + r * SS + part * (CPL / 4) + j4]);
            vec4 dcap = vec4(1.0); // d capped / d raw score
            if (capped) { // uniform
                vec4 t = cap_tanh(sw * qmul, rcap2);
                sw = cap2 * t;
                dcap = 1.0 - t * t;
            }
            UNROLL for (int k = 0; k < 4; k++) {
                int kj = j0 + part * CPL + 4 * j4 + k;
                float p = (kj >= my.x && kj < my.y) ? exp2(sw[k] * smul - lse2) : 0.0;
                ds[4 * j4 + k] = p * (pw[k] - dl) * dcap[k];
            }
        }
        subgroup_sync(); // S is read: dS goes over it
        UNROLL for (int j8 = 0; j8 < CPL; j8 += 8) {
            uvec4 w;
            UNROLL for (int k = 0; k < 4; k++)
                w[k] = pack_half2(ds[j8 + 2 * k], ds[j8 + 2 * k + 1]);
            xsh[xb + r * PS + (part * CPL + j8) / 8] = w;
        }
        subgroup_sync();

        // dQ += dS K
        UNROLL for (int n = 0; n < NB; n++) {
            AMAT a;
            CM_LOAD(a, xsh, uint(xb + 2 * n), uint(PS), false);
            UNROLL for (int c = 0; c < DC; c++) {
                BMAT bk;
                CM_LOAD(bk, kvsh, uint(16 * n * RS + 2 * c), uint(RS), false);
                dq[c] = CM_MULADD(a, bk, dq[c]);
            }
        }
        subgroup_sync(); // dS is read: the next S goes over it
    }

    // dQ accumulator += tau dQ, one 16-column chunk at a time through the scratch tile
    F32 acc = F32(P.o);
    const uint ob = uint(((b * P.nq + i) * P.hq + h) * D);
    UNROLL for (int c = 0; c < DC; c++) {
        CM_STORE(dq[c], xsh, uint(xb), 4u, false);
        subgroup_sync();
        if (live) {
            UNROLL for (int k = 0; k < 4 / LPR; k++) {
                int c4 = part * (4 / LPR) + k; // vec4 of the 16 columns
                vec4 v = uintBitsToFloat(xsh[xb + 4 * r + c4]);
                UNROLL for (int e = 0; e < 4; e++) {
                    uint x = ob + uint(16 * c + 4 * c4 + e);
                    acc.v[x] = fma(P.scale, v[e], acc.v[x]);
                }
            }
        }
        subgroup_sync();
    }
}
