#version 460
// shaders/bwd_dq.comp - backward dQ, scalar (the last resort, as fwd.comp): dQ[tile] += tau dS K
// over one K/V block, with P recomputed from the final lse: S = tau Q K^T, P = exp(S - lse),
// dP = dO V^T, dS = P (dP - D). Same workgroup shape as fwd.comp (BR query rows, one
// invocation a row, K/V tiles of BC rows in shared memory); each dQ element is written by one
// invocation only, in a fixed order, so results are deterministic.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

shared float ks[BC * D];
shared float vs[BC * D];
shared int kmin_s, kmax_s;

void main()
{
    Params P = Params(pc.params);
    const int tid = int(gl_LocalInvocationID.x);
    const int r = tid / T, lane = tid % T;
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR, i = i0 + r;
    const bool live = i < P.nq;
    const int g = h / P.group;
    I32x2 rows = I32x2(P.rows);

    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
    }
    barrier();
    ivec2 my = live ? rows.v[i] : ivec2(0, 0);
    my = ivec2(max(my.x, P.lo), min(my.y, P.hi)); // this dispatch's keys
    if (lane == 0 && my.x < my.y) {
        atomicMin(kmin_s, my.x);
        atomicMax(kmax_s, my.y);
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s;
    if (kmin >= kmax)
        return;

    float q[E], dout[E], dq[E];
    const float qmul = P.scale * LOG2E;
    for (int e = 0; e < E; e++) {
        int c = lane + T * e;
        q[e] = live ? load_elem(P.q, DTQ, view_index(P.q, b, i, h, c)) * qmul : 0.0;
        dout[e] = live ? load_elem(P.dout, DTO, view_index(P.dout, b, i, h, c)) : 0.0;
        dq[e] = 0.0;
    }
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    const uint li = uint((b * P.hq + h) * P.nq + i);
    float lse2 = POS_INF, dl = 0.0;
    if (live) {
        float lse = F32(P.lse).v[li];
        lse2 = lse == NEG_INF ? POS_INF : lse * LOG2E; // no key anywhere: P = 0
        dl = F32(P.delta).v[li];
    }
    for (int j0 = kmin; j0 < kmax; j0 += BC) {
        barrier();
        for (int x = tid; x < BC * D; x += BR * T) {
            int j = x / D, c = x % D;
            bool in_block = j0 + j < kmax;
            ks[x] = in_block ? load_elem(P.k, DTK, view_index(P.k, b, j0 + j, g, c)) : 0.0;
            vs[x] = in_block ? load_elem(P.v, DTV, view_index(P.v, b, j0 + j, g, c)) : 0.0;
        }
        barrier();
        for (int j = 0; j < BC; j++) {
            float s = 0.0, dp = 0.0;
            for (int e = 0; e < E; e++) {
                s = fma(q[e], ks[j * D + lane + T * e], s);
                dp = fma(dout[e], vs[j * D + lane + T * e], dp);
            }
            float dcap = 1.0; // d capped / d raw score
            if (capped) {
                float t = cap_tanh(s, rcap2);
                s = cap2 * t;
                dcap = 1.0 - t * t;
            }
            int kj = j0 + j;
            float p = (kj >= my.x && kj < my.y) ? exp2(s - lse2) : 0.0;
            float ds = p * (dp - dl) * dcap;
            for (int e = 0; e < E; e++)
                dq[e] = fma(ds, ks[j * D + lane + T * e], dq[e]);
        }
    }
    if (!live)
        return;
    F32 acc = F32(P.o);
    const uint ob = uint(((b * P.nq + i) * P.hq + h) * D);
    for (int e = 0; e < E; e++) {
        uint x = ob + uint(lane + T * e);
        acc.v[x] = fma(P.scale, dq[e], acc.v[x]);
    }
}
