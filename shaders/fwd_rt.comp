#version 460
// shaders/fwd_rt.comp - forward step, register-tiled path: one Q tile against one K/V block with
// online softmax, and the log-sum-exp merge into the running (O, lse) fused at the end, as
// fwd.comp computes it, but laid out as two small matrix products per key tile so that every
// value read from shared memory feeds several multiply-adds (the scalar path of fwd.comp reads
// one shared value per multiply-add, which bounds it by shared-memory bandwidth).
//
// Workgroup (x = Q tile of BR rows, y = query head, z = batch) of (BR / 4) x (BC / 4)
// invocations: invocation (rg, cg) owns the 4 x 4 block of scores of rows 4 rg.. and keys
// 4 cg.. of each key tile, and the running output of the same 4 rows in the columns
// 4 (cg + CG v) .. + 3 (v < NV). Per key tile of BC keys:
//   S = Q K^T   Q and K pass through shared memory in chunks of DC head-dim elements, stored
//               transposed ([element][row]) so each step reads one vec4 of 4 rows and one vec4
//               of 4 keys for 16 multiply-adds;
//   softmax     row maxima are combined across the CG invocations of a row through shared
//               memory (no subgroup operation: any device, lavapipe's subgroups of 8 too); row
//               sums stay per invocation until the end;
//   O += P V    P goes to shared memory transposed ([key][row]); V in chunks of DC keys; each
//               step reads one vec4 of P and NV vec4 of V for 16 NV multiply-adds.
// Everything is fp32 in registers and shared memory, whatever the storage dtype.
//
// Tiles (runtime/vulkan/vk_caps.c): the tile's T (constant 1) is DC here (4, 8, 16 or 32), BR a
// multiple of 4, BC a multiple of 4 and of DC. Only key tiles inside the union of the Q tile's
// allowed key intervals are visited (fully masked tiles are skipped); partial tiles are masked
// per row. Rows with no allowed key in the block leave (O, lse) bit-for-bit unchanged.
#extension GL_GOOGLE_include_directive : require
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "rt.glsl"

const int DC = T;                          // head-dim elements per Q/K chunk, keys per V chunk
const int CG = BC / 4;                     // invocations sharing a row group
const int NV = (D + 4 * CG - 1) / (4 * CG); // vec4 column groups of O per invocation
const int QS = BR / 4 + 1;                 // vec4 stride of a transposed Q row (one of padding)
const int KS = BC / 4 + 1;                 // vec4 stride of a transposed K row
const int DV = D / 4;                      // vec4 of a V row
const int QK = DC * (QS + KS);             // vec4 of one Q chunk + one K chunk
const int REGION = QK > DC * DV ? QK : DC * DV; // shared by the Q/K chunks and the V chunks

shared vec4 qkv[REGION];   // Q chunk at 0, K chunk at DC * QS; later a V chunk [DC][DV]
shared vec4 ps[BC * QS];   // P transposed: [key][row]
shared float red[BR * CG]; // one partial per row and invocation of its row group
shared int kmin_s, kmax_s;

void main()
{
    Params P = Params(pc.params);
    const int tid = int(gl_LocalInvocationID.x);
    const int nthr = (BR / 4) * CG;
    const int rg = tid / CG, cg = tid % CG;
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR;
    const int g = h / P.group;
    const bool vec = (P.flags & 32) != 0;
    I32x2 rows = I32x2(P.rows);

    // each row's allowed keys of this dispatch, and their union over the tile
    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
    }
    barrier();
    ivec2 iv[4];
    UNROLL for (int i = 0; i < 4; i++) {
        int r = i0 + 4 * rg + i;
        ivec2 x = r < P.nq ? rows.v[r] : ivec2(0, 0);
        iv[i] = ivec2(max(x.x, P.lo), min(x.y, P.hi));
        if (cg == 0 && iv[i].x < iv[i].y) {
            atomicMin(kmin_s, iv[i].x);
            atomicMax(kmax_s, iv[i].y);
        }
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s;
    if (kmin >= kmax)
        return;

    const float qmul = P.scale * LOG2E;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    vec4 o[4 * NV]; // o[4 v + i]: row i, columns 4 (cg + CG v) ..
    float m[4], l[4];
    UNROLL for (int i = 0; i < 4; i++) {
        m[i] = NEG_INF;
        l[i] = 0.0;
    }
    UNROLL for (int x = 0; x < 4 * NV; x++)
        o[x] = vec4(0.0);

    for (int j0 = kmin; j0 < kmax; j0 += BC) {
        // ---- S = Q K^T, in chunks of DC elements of the head dim
        vec4 s[4]; // s[i]: row i, keys 4 cg ..
        UNROLL for (int i = 0; i < 4; i++)
            s[i] = vec4(0.0);
        for (int d0 = 0; d0 < D; d0 += DC) {
            barrier(); // the last readers of the region are done
            for (int x = tid; x < (BR + BC) * (DC / 4); x += nthr) {
                int row = x / (DC / 4), c = d0 + 4 * (x % (DC / 4));
                vec4 val = vec4(0.0);
                int dst;
                if (row < BR) {
                    int i = i0 + row;
                    if (i < P.nq && c < D)
                        val = load4(P.q, DTQ, view_index(P.q, b, i, h, c), vec) * qmul;
                    dst = row;
                } else {
                    int j = j0 + row - BR;
                    if (j < kmax && c < D)
                        val = load4(P.k, DTK, view_index(P.k, b, j, g, c), vec);
                    dst = DC * QS * 4 + (row - BR);
                }
                // transposed: element c - d0 + e of the chunk is vec4 row (c - d0 + e)
                int stride = row < BR ? QS * 4 : KS * 4;
                int e0 = c - d0;
                UNROLL for (int e = 0; e < 4; e++) {
                    int w = dst + (e0 + e) * stride;
                    qkv[w >> 2][w & 3] = val[e];
                }
            }
            barrier();
            UNROLL for (int e = 0; e < DC; e++) {
                vec4 a = qkv[e * QS + rg];
                vec4 k4 = qkv[DC * QS + e * KS + cg];
                UNROLL for (int i = 0; i < 4; i++)
                    s[i] = fma(vec4(a[i]), k4, s[i]);
            }
        }

        // ---- soft-cap, mask, row maxima across the row group, online softmax
        if (capped)
            UNROLL for (int i = 0; i < 4; i++)
                s[i] = cap2 * cap_tanh(s[i], rcap2);
        UNROLL for (int i = 0; i < 4; i++) {
            UNROLL for (int j = 0; j < 4; j++) {
                int kj = j0 + 4 * cg + j;
                if (kj < iv[i].x || kj >= iv[i].y)
                    s[i][j] = NEG_INF;
            }
            red[(4 * rg + i) * CG + cg] = max(max(s[i].x, s[i].y), max(s[i].z, s[i].w));
        }
        barrier();
        UNROLL for (int i = 0; i < 4; i++) {
            float mx = NEG_INF;
            UNROLL for (int c = 0; c < CG; c++)
                mx = max(mx, red[(4 * rg + i) * CG + c]);
            float mnew = max(m[i], mx);
            float muse = mnew == NEG_INF ? 0.0 : mnew; // fully masked so far: stay exactly 0
            float alpha = exp2(m[i] - muse);
            s[i] = exp2(s[i] - vec4(muse));
            l[i] = l[i] * alpha + ((s[i].x + s[i].y) + (s[i].z + s[i].w));
            m[i] = mnew;
            UNROLL for (int v = 0; v < NV; v++)
                o[4 * v + i] *= alpha;
        }
        UNROLL for (int j = 0; j < 4; j++)
            ps[(4 * cg + j) * QS + rg] = vec4(s[0][j], s[1][j], s[2][j], s[3][j]);

        // ---- O += P V, in chunks of DC keys
        for (int k0 = 0; k0 < BC; k0 += DC) {
            barrier(); // P written; the last readers of the region are done
            for (int x = tid; x < DC * DV; x += nthr) {
                int kk = x / DV, c = 4 * (x % DV), j = j0 + k0 + kk;
                qkv[x] = j < kmax ? load4(P.v, DTV, view_index(P.v, b, j, g, c), vec) : vec4(0.0);
            }
            barrier();
            UNROLL for (int kk = 0; kk < DC; kk++) {
                vec4 p = ps[(k0 + kk) * QS + rg];
                UNROLL for (int v = 0; v < NV; v++) {
                    int c4 = cg + CG * v;
                    if (c4 < DV) {
                        vec4 v4 = qkv[kk * DV + c4];
                        UNROLL for (int i = 0; i < 4; i++)
                            o[4 * v + i] = fma(vec4(p[i]), v4, o[4 * v + i]);
                    }
                }
            }
        }
    }

    // ---- row sums across the row group, then the fused merge (as fwd.comp). Every invocation
    // of a row group reads the row's running lse before the barrier: the first of them
    // overwrites it after the barrier.
    F32 lse = F32(P.lse), oa = F32(P.o);
    float lold[4];
    UNROLL for (int i = 0; i < 4; i++) {
        int r = i0 + 4 * rg + i;
        lold[i] = r < P.nq ? lse.v[(b * P.hq + h) * P.nq + r] : 0.0;
    }
    memoryBarrierBuffer(); // barrier() alone orders shared memory only
    barrier();
    UNROLL for (int i = 0; i < 4; i++)
        red[(4 * rg + i) * CG + cg] = l[i];
    barrier();
    UNROLL for (int i = 0; i < 4; i++) {
        float lt = 0.0;
        UNROLL for (int c = 0; c < CG; c++)
            lt += red[(4 * rg + i) * CG + c];
        int r = i0 + 4 * rg + i;
        // lt == 0 exactly when the row has no allowed key here; NaN inputs fall through
        if (r >= P.nq || lt == 0.0)
            continue;
        const uint li = uint((b * P.hq + h) * P.nq + r);
        const uint ob = uint(((b * P.nq + r) * P.hq + h) * D);
        float lr = (m[i] + log2(lt)) * LN2;
        float lo = lold[i], ln, co, cn;
        if (lo == NEG_INF) {
            ln = lr;
            co = 0.0;
            cn = 1.0 / lt;
        } else {
            ln = max(lo, lr) + log(1.0 + exp(-abs(lo - lr)));
            co = exp(lo - ln);
            cn = exp(lr - ln) / lt;
        }
        UNROLL for (int v = 0; v < NV; v++) {
            int c = 4 * (cg + CG * v);
            if (c < D) {
                UNROLL for (int e = 0; e < 4; e++) {
                    uint x = ob + uint(c + e);
                    oa.v[x] = lo == NEG_INF ? o[4 * v + i][e] * cn
                                            : fma(co, oa.v[x], cn * o[4 * v + i][e]);
                }
            }
        }
        if (cg == 0)
            lse.v[li] = ln;
    }
}
