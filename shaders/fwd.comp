#version 460
// shaders/fwd.comp - forward step, scalar: one Q tile against one K/V block with online softmax,
// and the log-sum-exp merge into the running (O, lse) fused at the end. The last resort of the
// forward (where the register-tiled fwd_rt does not fit a call, and with BURST_VK_RT=0): no
// subgroup operation, little shared memory.
//
// Workgroup (x = Q tile, y = query head, z = batch): BR query rows, one invocation a row
// (T = 1, lane = 0: it owns the elements c = lane + T e of its row, q pre-scaled by tau log2 e,
// and the output accumulator, in registers). K/V tiles of BC rows are converted to fp32 into
// shared memory.
// Only key tiles inside the union of the tile's allowed key intervals are visited (fully masked
// tiles are skipped); partial tiles are masked per row. Rows with no allowed key in the block
// leave (O, lse) bit-for-bit unchanged.
#extension GL_GOOGLE_include_directive : require
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"

const int CH = BC < 8 ? BC : 8; // keys per online-softmax update

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

    // union of the tile's allowed key intervals
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

    float q[E], o[E];
    const float qmul = P.scale * LOG2E;
    for (int e = 0; e < E; e++) {
        q[e] = live ? load_elem(P.q, DTQ, view_index(P.q, b, i, h, lane + T * e)) * qmul : 0.0;
        o[e] = 0.0;
    }
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    float m = NEG_INF, l = 0.0;
    // the running lse, read before the loop and overwritten at the end by the row's invocation
    F32 lse = F32(P.lse), oa = F32(P.o);
    const uint li = uint((b * P.hq + h) * P.nq + i);
    float lo = live ? lse.v[li] : 0.0;
    for (int j0 = kmin; j0 < kmax; j0 += BC) {
        barrier();
        for (int x = tid; x < BC * D; x += BR * T) {
            int j = x / D, c = x % D;
            bool in_block = j0 + j < kmax;
            ks[x] = in_block ? load_elem(P.k, DTK, view_index(P.k, b, j0 + j, g, c)) : 0.0;
            vs[x] = in_block ? load_elem(P.v, DTV, view_index(P.v, b, j0 + j, g, c)) : 0.0;
        }
        barrier();
        // keys in chunks of CH: the score array has a compile-time size and fully unrolled
        // loops, so it stays in registers (lavapipe spills dynamically indexed arrays)
        for (int c0 = 0; c0 < BC; c0 += CH) {
            float s[CH];
            float mx = NEG_INF;
            UNROLL for (int j = 0; j < CH; j++) {
                float acc = 0.0;
                for (int e = 0; e < E; e++)
                    acc = fma(q[e], ks[(c0 + j) * D + lane + T * e], acc);
                if (capped)
                    acc = cap2 * cap_tanh(acc, rcap2);
                int kj = j0 + c0 + j;
                s[j] = (kj >= my.x && kj < my.y) ? acc : NEG_INF;
                mx = max(mx, s[j]);
            }
            float mnew = max(m, mx);
            float muse = mnew == NEG_INF ? 0.0 : mnew; // fully masked so far: stay exactly 0
            float alpha = exp2(m - muse);
            float sum = 0.0;
            UNROLL for (int j = 0; j < CH; j++) {
                s[j] = exp2(s[j] - muse);
                sum += s[j];
            }
            l = l * alpha + sum;
            m = mnew;
            for (int e = 0; e < E; e++) {
                float acc = o[e] * alpha;
                UNROLL for (int j = 0; j < CH; j++)
                    acc = fma(s[j], vs[(c0 + j) * D + lane + T * e], acc);
                o[e] = acc;
            }
        }
    }
    // l == 0 exactly when the row has no allowed key here; NaN inputs fall through and propagate
    if (!live || l == 0.0)
        return;

    // fused merge: L' = max(L, Lr) + log(1 + exp(-|L - Lr|)), O' = e^(L-L') O + e^(Lr-L') Or
    const uint ob = uint(((b * P.nq + i) * P.hq + h) * D);
    float lr = (m + log2(l)) * LN2;
    float ln;
    if (lo == NEG_INF) {
        ln = lr;
        float cn = 1.0 / l;
        for (int e = 0; e < E; e++)
            oa.v[ob + lane + T * e] = o[e] * cn;
    } else {
        ln = max(lo, lr) + log(1.0 + exp(-abs(lo - lr)));
        float co = exp(lo - ln), cn = exp(lr - ln) / l;
        for (int e = 0; e < E; e++) {
            uint x = ob + uint(lane + T * e);
            oa.v[x] = fma(co, oa.v[x], cn * o[e]);
        }
    }
    if (lane == 0)
        lse.v[li] = ln;
}
