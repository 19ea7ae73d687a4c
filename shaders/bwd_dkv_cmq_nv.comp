#version 460
// shaders/bwd_dkv_cmq_nv.comp - backward dK and dV on cooperative matrices
// (GL_NV_cooperative_matrix) with P^T and dS^T formed in registers, for one K/V block:
//   dV_j += sum_i P_ij dO_i,  dK_j += tau sum_i dS_ij Q_i
// summed over every query head of the kv head's group and every query row; fp16 q/k/v/dO, fp32
// accumulation, every head dim (in the matrices rounded up to DM, a multiple of 16: the padding
// columns load as 0 and are never written). Same contract as bwd_dkv_cm_nv.comp,
// which takes the scores through shared memory; this kernel uses the accumulators' elements in
// place, in the fragment layout that the host checked on the device (shaders/cm_layout_nv.comp,
// runtime/vulkan/vk_cmq.c; the mapping it found: shaders/cmq.glsl): element e of
// invocation `lane` of a 16 x 16 fp32 matrix is at row lane / 4 + 8 rowsel(e), column
// 2 (lane % 4) + coloff(e); the conversion to fp16 keeps it in place.
//
// Workgroup (x = key tile, y = kv head, z = batch): W = BR / 16 subgroups of 32 invocations,
// each owning 16 key rows; beyond d = 128 (SP = 2) twice as many, two on each 16 rows, each
// holding half of the head dim's chunks of K, V, dK and dV, who add their partial S^T and dP^T
// through shared memory (cmq_pair.glsl). The subgroup's K and V rows are loaded once into
// registers (MMA operands), so that the shared memory holds only query tiles: each staged tile
// then serves many key rows (up to 256 a workgroup). Query tiles of BC rows (Q, dO, L, D and
// the rows' allowed key intervals) are staged in shared memory, the next tile's loads in flight
// during the current one where PREFETCH (constant 11; off by default: on the H100 the registers
// it holds cost more than it hid, at every head dim); only query rows whose interval meets the
// workgroup's keys are visited. Per subgroup, query tile and 16-query chunk n:
//   S^T = K Q^T and dP^T = V dO^T (16 x 16, fp32) on MMAs;
//   in registers: P^T = exp(S^T - L) masked by each query's allowed keys, dS^T = P^T (dP^T - D)
//   (L, D and the interval of an element's query column read from shared memory);
//   dV (16 x DM) += P^T dO and dK (16 x DM) += dS^T Q on MMAs (DCH chunks a subgroup), P^T
//   and dS^T converted to fp16.
// At the end dK, times tau, and dV are added into the fp32 accumulators from the registers;
// each element has one writer, in a fixed order (deterministic).
// Precision: P and dS are rounded to fp16 before the MMAs (as in FlashAttention): 2^-11
// relative per term. bf16 inputs: the host converts them into packed fp16, each view scaled by
// a power of two into fp16's range (flag bits 6-9, shaders/cm_nv.glsl cvt_scales); S^T is
// unscaled in qmul, dP^T and D are taken in dO's scaled units (so is dS^T, below 2^15 by
// dO's scale: convert.glsl bf16_scale_dout), and the scales are undone when dK (dO's and Q's)
// and dV (dO's) are added. fp32 inputs (the pipeline keyed fp32): each view arrives as two fp16
// halves per element, hi + lo (shaders/cm_nv.glsl SPL), and S^T, dP^T, dV and dK each take
// three MMAs a product (hi hi, lo hi and hi lo; P^T, scaled by 2^14, and dS^T split in
// registers: cmq.glsl CM_TO_A2): about 2^-21 relative per term; the products of each query
// chunk, small terms first, go into a fresh accumulator added to dV and dK in fp32 (the tensor
// cores' adds truncate: a chain of them as long as the query count drifts).
//
// Shared memory (one uvec4 array sh, rows padded to DM + 8 halves):
//   [0, 2 BC RS)      Q and dO tiles [BC][DM + 8] fp16; the V and K rows pass through them
//                     before the loop, VP rows at a time
//   rowq              the query tile's L log2 e, D and allowed key intervals, an ivec4 a row
//   xf                with SP = 2: the pairs' partials (cmq_pair.glsl)
// Rows of SPL DM + 8 halves with split inputs. runtime/vulkan/vk_caps.c (burst_vk_cmq_shared)
// mirrors these sizes.
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

const int NB = BC / 16;          // 16-row chunks of a query tile
const int QO = 0, DO = BC * RS;  // the Q and dO tiles
const int SHN = 2 * BC * RS;
const int VP = (2 * BC) / 16 * 16 < BR ? (2 * BC) / 16 * 16 : BR; // V rows per pass
// split inputs: P^T's scale before its split into fp16 halves (P^T <= 1, and its lo halves,
// 2^-11 of it, would otherwise fall below fp16's normal range from P^T < 2^-3)
const float PSPLIT = 16384.0;
const int L8 = BC * D8S;         // 16-byte pieces of a Q (or dO) tile
const int LPT = (L8 + NT - 1) / NT; // of them per invocation

shared uvec4 sh[SHN];
shared ivec4 rowq[BC]; // per query row of the tile: L log2 e, D (bits), its allowed key interval
shared int qmin_s, qmax_s;
#include "cmq_pair.glsl"

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v, dov = P.dout;
    const int tid = int(gl_LocalInvocationID.x);
    const int sg = tid / T, lane = tid % T;
    const int rg = sg / SP, c0 = sg % SP * DCH; // its 16 rows; its first head-dim chunk
    const int b = int(gl_WorkGroupID.z), g = int(gl_WorkGroupID.y);
    const int j0 = int(gl_WorkGroupID.x) * BR;
    const int j1 = min(j0 + BR, P.nk);
    const bool vec = (P.flags & 8) != 0;
    I32x2 rows = I32x2(P.rows);
    // this invocation's key rows: r (A) and r + 8 (B) of the subgroup's 16
    const int jA = j0 + 16 * rg + lane / 4, jB = jA + 8;

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
    barrier();
    const int qmin = qmin_s, qmax = qmax_s;
    if (qmin >= qmax)
        return;
    // the V rows (16 rows x the subgroup's DCH chunks) into registers, then the K rows, through
    // the Q / dO region VP rows at a time (split: their lo halves too, vl and kl)
    AMAT vf[DCH], kf[DCH];
    AMAT vl[SPL > 1 ? DCH : 1], kl[SPL > 1 ? DCH : 1];
    for (int m = 0; m < 2; m++) {
        for (int p0 = 0; p0 < BR; p0 += VP) {
            if (m > 0 || p0 > 0)
                barrier(); // the previous pass is read
            for (int x = tid; x < VP * D8S; x += NT) {
                int row = x / D8S, c8 = x % D8S, jr = j0 + p0 + row;
                bool in_v = p0 + row < BR && jr < P.nk && piece_in(c8);
                sh[QO + row * RS + c8] =
                    m == 0 ? load8(vv, vec, view_index(vv, b, jr, g, piece_col(c8)), in_v)
                           : load8(kv, vec, view_index(kv, b, jr, g, piece_col(c8)), in_v);
            }
            barrier();
            if (16 * rg >= p0 && 16 * rg < p0 + VP) // uniform in the subgroup
                UNROLL for (int c = 0; c < DCH; c++) {
                    const uint x = uint(QO + (16 * rg - p0) * RS + 2 * min(c0 + c, DC - 1));
                    if (m == 0)
                        CM_LOAD(vf[c], sh, x, uint(RS), false);
                    else
                        CM_LOAD(kf[c], sh, x, uint(RS), false);
                    if (SPL > 1 && m == 0)
                        CM_LOAD(vl[SPL > 1 ? c : 0], sh, x + uint(D8), uint(RS), false);
                    else if (SPL > 1)
                        CM_LOAD(kl[SPL > 1 ? c : 0], sh, x + uint(D8), uint(RS), false);
                }
        }
    }

    // bf16 inputs converted by the host: their scales (1 otherwise); powers of two, divided one
    // at a time (a product may overflow)
    const vec4 sc = cvt_scales(P.amax, P.flags);
    const float qmul = P.scale * LOG2E / sc.y / sc.x, pmul = 1.0 / sc.z;
    CMAT dk[DCH], dv[DCH];
    UNROLL for (int c = 0; c < DCH; c++) {
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
            int x = tid + NT * it, row = x / D8S, c8 = x % D8S, ir = i0 + row;                   \
            bool in_tile = x < L8 && ir < qmax && piece_in(c8);                                   \
            qreg[it] = load8(qv, vec, view_index(qv, b, ir, h, piece_col(c8)), in_tile);         \
            doreg[it] = load8(dov, vec, view_index(dov, b, ir, h, piece_col(c8)), in_tile);      \
        }                                                                                         \
        if (tid < BC) {                                                                           \
            int ir = i0 + tid;                                                                    \
            bool in_tile = ir < qmax;                                                             \
            float lse = in_tile ? F32(P.lse).v[(b * P.hq + h) * P.nq + ir] : NEG_INF;            \
            lse2r = lse == NEG_INF ? POS_INF : lse * LOG2E; /* no key anywhere: P = 0 */          \
            dlr = sc.w * (in_tile ? F32(P.delta).v[(b * P.hq + h) * P.nq + ir] : 0.0);           \
            ivr = in_tile ? rows.v[ir] : ivec2(0, 0);                                             \
        }                                                                                         \
    }
    if (PREFETCH != 0)
        FETCH_Q(0)
    for (int t = 0; t < ntiles; t++) {
        if (PREFETCH == 0)
            FETCH_Q(t)
        barrier(); // the previous tile (or the V rows' last pass) is no longer read
        UNROLL for (int it = 0; it < LPT; it++) {
            int x = tid + NT * it, row = x / D8S, c8 = x % D8S;
            if (x < L8) {
                sh[QO + row * RS + c8] = qreg[it];
                sh[DO + row * RS + c8] = doreg[it];
            }
        }
        if (tid < BC) {
            rowq[tid] = ivec4(floatBitsToInt(lse2r), floatBitsToInt(dlr), ivr);
        }
        barrier();
        if (PREFETCH != 0 && t + 1 < ntiles)
            FETCH_Q(t + 1)

        UNROLL for (int n = 0; n < NB; n++) {
            // S^T = K Q^T and dP^T = V dO^T for the chunk's 16 queries (with SP > 1: over this
            // subgroup's chunks of the head dim, then summed over the SP subgroups)
            CMAT s = CMAT(0.0), dp = CMAT(0.0);
            UNROLL for (int c = 0; c < DCH; c++) {
                const int cc = c0 + c;
                if (cc < DC) { // uniform
                    BMAT bq, bdo;
                    const uint qx = uint(QO + 16 * n * RS + 2 * cc);
                    const uint ox = uint(DO + 16 * n * RS + 2 * cc);
                    CM_LOAD(bq, sh, qx, uint(RS), true);
                    CM_LOAD(bdo, sh, ox, uint(RS), true);
                    s = CM_MULADD(kf[c], bq, s);
                    dp = CM_MULADD(vf[c], bdo, dp);
                    if (SPL > 1) { // + the lo x hi and hi x lo products
                        s = CM_MULADD(kl[SPL > 1 ? c : 0], bq, s);
                        dp = CM_MULADD(vl[SPL > 1 ? c : 0], bdo, dp);
                        CM_LOAD(bq, sh, qx + uint(D8), uint(RS), true);
                        CM_LOAD(bdo, sh, ox + uint(D8), uint(RS), true);
                        s = CM_MULADD(kf[c], bq, s);
                        dp = CM_MULADD(vf[c], bdo, dp);
                    }
                }
            }
            if (SP > 1)
                PAIR_SUM(s, dp, sg, lane, n)
            // P^T and dS^T in place: element e is key row jA or jB, query column 16 n + col;
            // with a soft-cap (uniform) P^T from the capped S^T, dS^T times the cap's derivative
            if (CAPPED != 0 && P.cap > 0.0) {
                const float cap2 = P.cap * LOG2E, rcap2 = 1.0 / cap2;
                UNROLL for (int e = 0; e < NE; e++) {
                    int col = 16 * n + col_of(e, lane), j = row_b(e) ? jB : jA;
                    const ivec4 rq = rowq[col];
                    float t = cap_tanh(s[e] * qmul, rcap2);
                    float p = (j >= rq.z && j < rq.w) ? exp2(cap2 * t - intBitsToFloat(rq.x))
                                                      : 0.0;
                    s[e] = p;
                    dp[e] = p * (dp[e] * pmul - intBitsToFloat(rq.y)) * (1.0 - t * t);
                }
            } else
                UNROLL for (int e = 0; e < NE; e++) {
                int col = 16 * n + col_of(e, lane), j = row_b(e) ? jB : jA;
                const ivec4 rq = rowq[col]; // one 16-byte load a column
                float p = (j >= rq.z && j < rq.w) ? exp2(s[e] * qmul - intBitsToFloat(rq.x))
                                                  : 0.0;
                s[e] = p;
                dp[e] = p * (dp[e] * pmul - intBitsToFloat(rq.y));
            }
            // dV += P^T dO, dK += dS^T Q. Split: lo x hi + hi x lo + hi x hi, the small terms
            // first, on a fresh accumulator added in fp32 (the tensor cores' adds truncate: a
            // chain of them as long as the query count would drift)
            AMAT ap, ads, apl, adsl;
            {
                CMAT r_;
                if (SPL > 1) // P^T <= 1 times 2^14 (undone in vmul): its lo halves stay normal
                    UNROLL for (int e = 0; e < NE; e++)
                        s[e] *= PSPLIT;
                CM_TO_A2(ap, apl, s, r_);
                CM_TO_A2(ads, adsl, dp, r_);
            }
            UNROLL for (int c = 0; c < DCH; c++) {
                const int cc = c0 + c;
                if (cc < DC) { // uniform
                    BMAT bdo, bq;
                    const uint ox = uint(DO + 16 * n * RS + 2 * cc);
                    const uint qx = uint(QO + 16 * n * RS + 2 * cc);
                    CM_LOAD(bdo, sh, ox, uint(RS), false);
                    CM_LOAD(bq, sh, qx, uint(RS), false);
                    if (SPL > 1) {
                        BMAT bl;
                        CM_LOAD(bl, sh, ox + uint(D8), uint(RS), false);
                        CMAT t = CM_MULADD(apl, bdo, CMAT(0.0));
                        t = CM_MULADD(ap, bl, t);
                        dv[c] = dv[c] + CM_MULADD(ap, bdo, t);
                        CM_LOAD(bl, sh, qx + uint(D8), uint(RS), false);
                        t = CM_MULADD(adsl, bq, CMAT(0.0));
                        t = CM_MULADD(ads, bl, t);
                        dk[c] = dk[c] + CM_MULADD(ads, bq, t);
                    } else {
                        dv[c] = CM_MULADD(ap, bdo, dv[c]);
                        dk[c] = CM_MULADD(ads, bq, dk[c]);
                    }
                }
            }
        }
    }

    // accumulators += tau dK and dV, from the registers
    const bool want_dk = (P.flags & 2) != 0, want_dv = (P.flags & 4) != 0;
    F32 adk = F32(P.dk), adv = F32(P.dv);
    // dS^T and dO in dO's units; split: P^T scaled by PSPLIT
    const float tau = P.scale / sc.w / sc.x, vmul = 1.0 / sc.w / (SPL > 1 ? PSPLIT : 1.0);
    const uint obA = uint(((b * P.nk + jA) * P.hkv + g) * D), obB = obA + uint(8 * P.hkv * D);
    UNROLL for (int c = 0; c < DCH; c++) {
        UNROLL for (int e = 0; e < NE; e++) {
            bool rb = row_b(e);
            int col = 16 * (c0 + c) + col_of(e, lane);
            if ((rb ? jB : jA) < P.nk && col < D) { // (DM > D, or DCH SP > DC: padding)
                uint x = (rb ? obB : obA) + uint(col);
                if (want_dk)
                    adk.v[x] = fma(tau, dk[c][e], adk.v[x]);
                if (want_dv)
                    adv.v[x] += dv[c][e] * vmul;
            }
        }
    }
}
