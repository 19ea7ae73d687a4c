#version 460
// shaders/bwd_dkv_cm_nv.comp - backward dK and dV on cooperative matrices
// (GL_NV_cooperative_matrix) for one K/V block:
//   dV_j += sum_i P_ij dO_i,  dK_j += tau sum_i dS_ij Q_i
// summed over every query head of the kv head's group and every query row; fp16 q/k/v/dO, fp32
// accumulation, head dims <= 128 that are multiples of 16.
//
// Workgroup (x = key tile, y = kv head, z = batch): W = BR / 16 subgroups of T invocations, each
// owning 16 key rows. The K tile is staged once in shared memory, the subgroup's V rows once in
// registers (MMA operands). Query tiles of BC rows (Q, dO, L, D and the rows' allowed key
// intervals) are staged in shared memory, the next tile's loads in flight during the current
// one; only query rows whose interval meets the workgroup's keys are visited. Per subgroup and
// query tile:
//   S^T = K Q^T and dP^T = V dO^T (16 x BC, fp32) on 16x16x16 MMAs, to the scratch tile;
//   the T invocations, T / 16 per key row, form P^T = exp(S^T - L) masked by each query's
//   allowed keys, and dS^T = P^T (dP^T - D), and write both back as fp16;
//   dV (16 x D) += P^T dO and dK (16 x D) += dS^T Q on MMAs (2 D/16 fp32 accumulators).
// At the end dK, times tau, and dV are added into the fp32 accumulators through the scratch
// tile; each element has one writer, in a fixed order (deterministic).
// Precision: P and dS are rounded to fp16 before the MMAs (as in FlashAttention): 2^-11
// relative per term.
//
// Shared memory (uvec4 tiles, cm_nv.glsl):
//   ksh   K tile [BR][D + 8] fp16
//   qsh, dosh   Q and dO tiles [BC][D + 8] fp16; lse2s, dls, ivs: the query rows' L log2 e, D
//         and allowed key interval
//   xsh   per subgroup: the subgroup's V rows [16][D + 8] fp16 before the loop; in it S^T and
//         dP^T [16][BC + 4] fp32, then P^T and dS^T [16][BC + 8] fp16 over them; dK / dV
//         chunks [16][16] fp32 at the end
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

const int NB = BC / 16;      // 16-row chunks of a query tile
const int CPL = BC / LPR;    // query columns per invocation (a multiple of 8)
const int SS = (BC + 4) / 4; // row stride of S^T and dP^T (uvec4 = 4 floats)
const int PS = (BC + 8) / 8; // row stride of P^T and dS^T (uvec4 = 8 halves)
const int XSZ = 2 * 16 * SS > 16 * RS ? 2 * 16 * SS : 16 * RS; // scratch per subgroup (uvec4)
const int L8 = BC * (D / 8); // 16-byte pieces of a Q (or dO) tile
const int LPT = (L8 + NT - 1) / NT; // of them per invocation

shared uvec4 ksh[BR * RS];
shared uvec4 qsh[BC * RS];
shared uvec4 dosh[BC * RS];
shared float lse2s[BC], dls[BC];
shared ivec2 ivs[BC];
shared uvec4 xsh[W * XSZ];
shared int qmin_s, qmax_s;

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v, dov = P.dout;
    const int tid = int(gl_LocalInvocationID.x);
    const int sg = tid / T, lane = tid % T;
    const int b = int(gl_WorkGroupID.z), g = int(gl_WorkGroupID.y);
    const int j0 = int(gl_WorkGroupID.x) * BR;
    const int j1 = min(j0 + BR, P.nk);
    const bool vec = (P.flags & 8) != 0;
    I32x2 rows = I32x2(P.rows);
    // invocation `lane` of subgroup sg works on key row r of the subgroup's 16, query columns
    // [part * CPL, (part + 1) * CPL) of the query tile
    const int r = lane / LPR, part = lane % LPR;
    const int j = j0 + 16 * sg + r;
    const bool live = j < P.nk;

    // query rows (of this dispatch's range) whose allowed keys meet [j0, j1)
    if (tid == 0) {
        qmin_s = P.nq;
        qmax_s = 0;
    }
    barrier();
    int lo = P.nq, hi = 0;
    for (int i = P.lo + tid; i < min(P.nq, P.hi); i += NT) {
        ivec2 iv = rows.v[i];
        if (iv.x < iv.y && iv.x < j1 && iv.y > j0) {
            lo = min(lo, i);
            hi = max(hi, i + 1);
        }
    }
    if (lo < hi) {
        atomicMin(qmin_s, lo);
        atomicMax(qmax_s, hi);
    }
    // K tile to shared memory; the subgroup's V rows through its scratch to registers
    for (int x = tid; x < BR * (D / 8); x += NT) {
        int row = x / (D / 8), c8 = x % (D / 8);
        bool in_k = j0 + row < P.nk;
        ksh[row * RS + c8] = load8(kv, vec, view_index(kv, b, j0 + row, g, 8 * c8), in_k);
    }
    barrier();
    const int qmin = qmin_s, qmax = qmax_s;
    if (qmin >= qmax)
        return;
    const int xb = sg * XSZ;
    AMAT vf[DC];
    for (int x = lane; x < 16 * (D / 8); x += T) {
        int row = x / (D / 8), c8 = x % (D / 8), jr = j0 + 16 * sg + row;
        xsh[xb + row * RS + c8] = load8(vv, vec, view_index(vv, b, jr, g, 8 * c8), jr < P.nk);
    }
    subgroup_sync();
    UNROLL for (int c = 0; c < DC; c++)
        CM_LOAD(vf[c], xsh, uint(xb + 2 * c), uint(RS), false);
    subgroup_sync();

    const float qmul = P.scale * LOG2E;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    const float smul = capped ? 1.0 : qmul; // capped scores are in log2 units already
    CMAT dk[DC], dv[DC];
    UNROLL for (int c = 0; c < DC; c++) {
        dk[c] = CMAT(0.0);
        dv[c] = CMAT(0.0);
    }
    // query tiles t = 0, 1, ..: head g * group + t / nt, rows qmin + BC (t % nt); each goes
    // global -> registers -> shared memory, the loads of tile t + 1 in flight during tile t
    const int nt = (qmax - qmin + BC - 1) / BC, ntiles = P.group * nt;
    uvec4 qreg[LPT], doreg[LPT];
    float lse2r = POS_INF, dlr = 0.0;
    ivec2 ivr = ivec2(0, 0);
#define FETCH_Q(t)                                                                                \
    {                                                                                             \
        const int h = g * P.group + (t) / nt, i0 = qmin + BC * ((t) % nt);                       \
        UNROLL for (int it = 0; it < LPT; it++) {                                                 \
            int x = tid + NT * it, row = x / (D / 8), c8 = x % (D / 8), ir = i0 + row;           \
            bool in_tile = x < L8 && ir < qmax;                                                   \
            qreg[it] = load8(qv, vec, view_index(qv, b, ir, h, 8 * c8), in_tile);                \
            doreg[it] = load8(dov, vec, view_index(dov, b, ir, h, 8 * c8), in_tile);             \
        }                                                                                         \
        if (tid < BC) {                                                                           \
            int ir = i0 + tid;                                                                    \
            bool in_tile = ir < qmax;                                                             \
            float lse = in_tile ? F32(P.lse).v[(b * P.hq + h) * P.nq + ir] : NEG_INF;            \
            lse2r = lse == NEG_INF ? POS_INF : lse * LOG2E; /* no key anywhere: P = 0 */          \
            dlr = in_tile ? F32(P.delta).v[(b * P.hq + h) * P.nq + ir] : 0.0;                    \
            ivr = in_tile ? rows.v[ir] : ivec2(0, 0);                                             \
        }                                                                                         \
    }
    FETCH_Q(0)
    for (int t = 0; t < ntiles; t++) {
        barrier(); // the previous tile is no longer read
        UNROLL for (int it = 0; it < LPT; it++) {
            int x = tid + NT * it, row = x / (D / 8), c8 = x % (D / 8);
            if (x < L8) {
                qsh[row * RS + c8] = qreg[it];
                dosh[row * RS + c8] = doreg[it];
            }
        }
        if (tid < BC) {
            lse2s[tid] = lse2r;
            dls[tid] = dlr;
            ivs[tid] = ivr;
        }
        barrier();
        if (t + 1 < ntiles)
            FETCH_Q(t + 1)

        // S^T = K Q^T and dP^T = V dO^T, to the scratch tile
        UNROLL for (int n = 0; n < NB; n++) {
            CMAT s = CMAT(0.0), dp = CMAT(0.0);
            UNROLL for (int c = 0; c < DC; c++) {
                AMAT a;
                BMAT bq, bdo;
                CM_LOAD(a, ksh, uint(16 * sg * RS + 2 * c), uint(RS), false);
                CM_LOAD(bq, qsh, uint(16 * n * RS + 2 * c), uint(RS), true);
                CM_LOAD(bdo, dosh, uint(16 * n * RS + 2 * c), uint(RS), true);
                s = CM_MULADD(a, bq, s);
                dp = CM_MULADD(vf[c], bdo, dp);
            }
            CM_STORE(s, xsh, uint(xb + 4 * n), uint(SS), false);
            CM_STORE(dp, xsh, uint(xb + 16 * SS + 4 * n), uint(SS), false);
        }
        subgroup_sync();

        // P^T and dS^T of key row r over this invocation's CPL query columns
        float pt[CPL], dst[CPL];
        UNROLL for (int j4 = 0; j4 < CPL / 4; j4++) {
            vec4 sw = uintBitsToFloat(xsh[xb + r * SS + part * (CPL / 4) + j4]);
            vec4 dw = uintBitsToFloat(xsh[xb + 16 * SS + r * SS + part * (CPL / 4) + j4]);
            vec4 dcap = vec4(1.0); // d capped / d raw score
            if (capped) { // uniform
                vec4 t = cap_tanh(sw * qmul, rcap2);
                sw = cap2 * t;
                dcap = 1.0 - t * t;
            }
            UNROLL for (int k = 0; k < 4; k++) {
                int col = part * CPL + 4 * j4 + k;
                ivec2 iv = ivs[col];
                float p = (j >= iv.x && j < iv.y) ? exp2(sw[k] * smul - lse2s[col]) : 0.0;
                pt[4 * j4 + k] = p;
                dst[4 * j4 + k] = p * (dw[k] - dls[col]) * dcap[k];
            }
        }
        subgroup_sync(); // S^T and dP^T are read: P^T and dS^T go over them
        UNROLL for (int j8 = 0; j8 < CPL; j8 += 8) {
            uvec4 wp, wd;
            UNROLL for (int k = 0; k < 4; k++) {
                wp[k] = pack_half2(pt[j8 + 2 * k], pt[j8 + 2 * k + 1]);
                wd[k] = pack_half2(dst[j8 + 2 * k], dst[j8 + 2 * k + 1]);
            }
            xsh[xb + r * PS + (part * CPL + j8) / 8] = wp;
            xsh[xb + 16 * SS + r * PS + (part * CPL + j8) / 8] = wd;
        }
        subgroup_sync();

        // dV += P^T dO, dK += dS^T Q
        UNROLL for (int n = 0; n < NB; n++) {
            AMAT ap, ads;
            CM_LOAD(ap, xsh, uint(xb + 2 * n), uint(PS), false);
            CM_LOAD(ads, xsh, uint(xb + 16 * SS + 2 * n), uint(PS), false);
            UNROLL for (int c = 0; c < DC; c++) {
                BMAT bdo, bq;
                CM_LOAD(bdo, dosh, uint(16 * n * RS + 2 * c), uint(RS), false);
                CM_LOAD(bq, qsh, uint(16 * n * RS + 2 * c), uint(RS), false);
                dv[c] = CM_MULADD(ap, bdo, dv[c]);
                dk[c] = CM_MULADD(ads, bq, dk[c]);
            }
        }
        subgroup_sync(); // P^T and dS^T are read: the next S^T goes over them
    }

    // accumulators += tau dK and dV, one 16-column chunk at a time through the scratch tile
    const uint ob = uint(((b * P.nk + j) * P.hkv + g) * D);
    for (int which = 0; which < 2; which++) {
        const bool wanted = (P.flags & (which == 0 ? 2 : 4)) != 0; // uniform
        F32 acc = F32(which == 0 ? P.dk : P.dv);
        const float mul = which == 0 ? P.scale : 1.0;
        UNROLL for (int c = 0; c < DC; c++) {
            if (!wanted)
                break;
            CM_STORE(which == 0 ? dk[c] : dv[c], xsh, uint(xb), 4u, false);
            subgroup_sync();
            if (live) {
                UNROLL for (int k = 0; k < 4 / LPR; k++) {
                    int c4 = part * (4 / LPR) + k; // vec4 of the 16 columns
                    vec4 v = uintBitsToFloat(xsh[xb + 4 * r + c4]);
                    UNROLL for (int e = 0; e < 4; e++) {
                        uint x = ob + uint(16 * c + 4 * c4 + e);
                        acc.v[x] = fma(mul, v[e], acc.v[x]);
                    }
                }
            }
            subgroup_sync();
        }
    }
}
