#version 460
// shaders/bwd_dkv.comp - backward dK and dV, scalar (the last resort, as fwd.comp), for one K/V
// block:
//   dV[j] += sum_i P_ij dO_i,  dK[j] += tau sum_i dS_ij Q_i
// summed over every query head of the kv head's group and every query row. Workgroup (x = key
// tile, y = kv head, z = batch): BR key rows, one invocation a row (T = 1, lane = 0), which
// keeps its key row's k, v and the two accumulators in registers. Query tiles
// of BC rows (Q, dO, lse, D and the rows' allowed key intervals) are staged in shared memory;
// only query rows whose interval meets the workgroup's keys are visited. Each dK/dV element is
// written by one invocation, in a fixed order (head of the group, then query row): deterministic.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

shared float qs[BC * D];
shared float dos[BC * D];
shared float lse2s[BC], dls[BC];
shared ivec2 ivs[BC];
shared int qmin_s, qmax_s;

void main()
{
    Params P = Params(pc.params);
    const int tid = int(gl_LocalInvocationID.x);
    const int r = tid / T, lane = tid % T;
    const int b = int(gl_WorkGroupID.z), g = int(gl_WorkGroupID.y);
    const int j0 = int(gl_WorkGroupID.x) * BR, j = j0 + r;
    const int j1 = min(j0 + BR, P.nk);
    const bool live = j < P.nk;
    I32x2 rows = I32x2(P.rows);

    // query rows whose allowed keys meet [j0, j1)
    if (tid == 0) {
        qmin_s = P.nq;
        qmax_s = 0;
    }
    barrier();
    int lo = P.nq, hi = 0;
    for (int i = P.lo + tid; i < min(P.nq, P.hi); i += BR * T) { // this dispatch's query rows
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

    float k[E], v[E], dk[E], dv[E];
    for (int e = 0; e < E; e++) {
        int c = lane + T * e;
        k[e] = live ? load_elem(P.k, DTK, view_index(P.k, b, j, g, c)) : 0.0;
        v[e] = live ? load_elem(P.v, DTV, view_index(P.v, b, j, g, c)) : 0.0;
        dk[e] = 0.0;
        dv[e] = 0.0;
    }
    const float qmul = P.scale * LOG2E;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    for (int hh = 0; hh < P.group; hh++) {
        const int h = g * P.group + hh;
        for (int i0 = qmin; i0 < qmax; i0 += BC) {
            barrier();
            for (int x = tid; x < BC * D; x += BR * T) {
                int i = i0 + x / D, c = x % D;
                bool in_tile = i < qmax;
                qs[x] = in_tile ? load_elem(P.q, DTQ, view_index(P.q, b, i, h, c)) : 0.0;
                dos[x] = in_tile ? load_elem(P.dout, DTO, view_index(P.dout, b, i, h, c)) : 0.0;
            }
            for (int x = tid; x < BC; x += BR * T) {
                int i = i0 + x;
                float lse = i < qmax ? F32(P.lse).v[(b * P.hq + h) * P.nq + i] : NEG_INF;
                lse2s[x] = lse == NEG_INF ? POS_INF : lse * LOG2E;
                dls[x] = i < qmax ? F32(P.delta).v[(b * P.hq + h) * P.nq + i] : 0.0;
                ivs[x] = i < qmax ? rows.v[i] : ivec2(0, 0);
            }
            barrier();
            for (int ii = 0; ii < BC; ii++) {
                float s = 0.0, dp = 0.0;
                for (int e = 0; e < E; e++) {
                    s = fma(qs[ii * D + lane + T * e], k[e], s);
                    dp = fma(dos[ii * D + lane + T * e], v[e], dp);
                }
                s *= qmul;
                float dcap = 1.0; // d capped / d raw score
                if (capped) {
                    float t = cap_tanh(s, rcap2);
                    s = cap2 * t;
                    dcap = 1.0 - t * t;
                }
                ivec2 iv = ivs[ii];
                float p = (j >= iv.x && j < iv.y) ? exp2(s - lse2s[ii]) : 0.0;
                float ds = p * (dp - dls[ii]) * dcap;
                for (int e = 0; e < E; e++) {
                    dv[e] = fma(p, dos[ii * D + lane + T * e], dv[e]);
                    dk[e] = fma(ds, qs[ii * D + lane + T * e], dk[e]);
                }
            }
        }
    }
    if (!live)
        return;
    const uint ob = uint(((b * P.nk + j) * P.hkv + g) * D);
    if ((P.flags & 2) != 0) {
        F32 acc = F32(P.dk);
        for (int e = 0; e < E; e++) {
            uint x = ob + uint(lane + T * e);
            acc.v[x] = fma(P.scale, dk[e], acc.v[x]);
        }
    }
    if ((P.flags & 4) != 0) {
        F32 acc = F32(P.dv);
        for (int e = 0; e < E; e++) {
            uint x = ob + uint(lane + T * e);
            acc.v[x] += dv[e];
        }
    }
}
