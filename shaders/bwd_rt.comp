#version 460
// shaders/bwd_rt.comp - backward, register-tiled path (the layout of fwd_rt.comp), built three
// ways:
//
//   dQ (default; kernel dq_rt): workgroup (x = tile of BR query rows, y = query head, z =
//     batch); per tile of BC keys of the K/V block:
//       S = Q' K^T, dP = dO V^T, P = exp2(S - lse log2 e), dS = P (dP - D), dQ += dS K;
//     at the end dQ_acc += tau dQ.
//   dK / dV (-DBURST_DKV; kernel dkv_rt): workgroup (x = tile of BR key rows, y = kv head, z =
//     batch); for every query head of the group, per tile of BC query rows whose allowed keys
//     meet the workgroup's:
//       S^T = K' Q^T, dP^T = V dO^T, P^T, dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q;
//     at the end dV_acc += dV, dK_acc += tau dK.
//   dK / dV with dQ by atomics (-DBURST_DKV -DBURST_DQ_ATOMIC; kernel dkvq_rt, for plans that
//     need not be deterministic): the same, and per tile dQ_acc += tau dS^T K, the tile's
//     partial over the workgroup's keys added with float atomics (GL_EXT_shader_atomic_float),
//     so dq_rt, which recomputes S and dP, is not needed.
//   (Q' = tau log2(e) Q, K' = tau log2(e) K: scores in log2 units, as in fwd_rt.)
//
// Call the workgroup's BR rows "rows" (queries for dQ, keys for dK / dV) and each tile's BC
// rows of the other operand "columns". Invocation (rg, cg) of the (BR / 4) x (BC / 4) owns the
// 4 x 4 block of rows 4 rg.. and columns 4 cg.. of S and dP, and the 4 rows of its
// accumulators in the columns 4 (cg + CG v) .. + 3 (v < NV) of the head dim:
//   S, dP    both products at once, over chunks of DC head-dim elements of the four operands,
//            stored transposed in shared memory ([element][row or column]);
//   P, dS    in registers, then transposed into shared memory ([column][row]), one at a time;
//   acc      += (P or dS) times the columns' operand rows, in chunks of DC columns.
// P is recomputed from the final lse, so no row reduction is needed. In dq_rt and dkv_rt each
// output element has one writer and a fixed order of additions: deterministic (dkvq_rt's dQ
// atomics are not). Tiles as fwd_rt (constant 1 = DC; BR a multiple of 4, BC a multiple of 4
// and of DC; for dkvq_rt BR a multiple of DC too).
#extension GL_GOOGLE_include_directive : require
#ifdef BURST_DQ_ATOMIC
#extension GL_EXT_shader_atomic_float : require
#endif
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "rt.glsl"

#ifdef BURST_DKV
const int NACC = 2; // dK, dV
#else
const int NACC = 1; // dQ
#endif
const int DC = T;
const int CG = BC / 4;
const int NV = (D + 4 * CG - 1) / (4 * CG);
const int QS = BR / 4 + 1; // vec4 stride of a transposed row chunk (rows' operands)
const int KS = BC / 4 + 1; // vec4 stride of a transposed column chunk
const int DV = D / 4;
const int XY = 2 * DC * (QS + KS); // the four operand chunks of S and dP
const int REGION = XY > DC * DV ? XY : DC * DV;

shared vec4 sh[REGION]; // A1 at 0, B1 at DC QS, A2 at DC (QS + KS), B2 at DC (2 QS + KS);
                        // later a column-operand chunk [DC][DV]
shared vec4 zs[BC * QS]; // [column][row]: dS (dQ); P, then dS (dK / dV)
shared int cmin_s, cmax_s;

// element e0 + e of a chunk of row (or column) x, transposed: float base + (e0 + e) stride + x
void put_t(int base, int stride, int e0, int x, vec4 val)
{
    UNROLL for (int e = 0; e < 4; e++) {
        int w = base + (e0 + e) * stride + x;
        sh[w >> 2][w & 3] = val[e];
    }
}

void main()
{
    Params P = Params(pc.params);
    const int tid = int(gl_LocalInvocationID.x);
    const int nthr = (BR / 4) * CG;
    const int rg = tid / CG, cg = tid % CG;
    const int b = int(gl_WorkGroupID.z), hy = int(gl_WorkGroupID.y);
    const int r0 = int(gl_WorkGroupID.x) * BR;
    const bool vec = (P.flags & 32) != 0;
    const float qmul = P.scale * LOG2E;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    I32x2 rows = I32x2(P.rows);
    F32 lsev = F32(P.lse), dlv = F32(P.delta);

    if (tid == 0) {
        cmin_s = 0x7fffffff;
        cmax_s = 0;
    }
    barrier();
#ifdef BURST_DKV
    // rows are keys [r0, r1) of kv head g; columns are the query rows of this dispatch's range
    // [lo, hi) whose allowed keys meet them
    const int g = hy, r1 = min(r0 + BR, P.nk);
    {
        int lo = 0x7fffffff, hi = 0;
        for (int i = P.lo + tid; i < min(P.nq, P.hi); i += nthr) {
            ivec2 iv = rows.v[i];
            if (iv.x < iv.y && iv.x < r1 && iv.y > r0) {
                lo = min(lo, i);
                hi = max(hi, i + 1);
            }
        }
        if (lo < hi) {
            atomicMin(cmin_s, lo);
            atomicMax(cmax_s, hi);
        }
    }
#else
    // rows are queries of head h; columns are the keys of the rows' allowed intervals, clamped
    // to this dispatch's keys [lo, hi)
    const int h = hy, g = h / P.group;
    ivec2 iv[4];
    float lse2[4], dl[4];
    UNROLL for (int i = 0; i < 4; i++) {
        int r = r0 + 4 * rg + i;
        ivec2 x = r < P.nq ? rows.v[r] : ivec2(0, 0);
        iv[i] = ivec2(max(x.x, P.lo), min(x.y, P.hi));
        uint li = uint((b * P.hq + h) * P.nq + min(r, P.nq - 1));
        float l = lsev.v[li];
        lse2[i] = l == NEG_INF ? POS_INF : l * LOG2E; // no key anywhere: P = 0
        dl[i] = dlv.v[li];
        if (cg == 0 && iv[i].x < iv[i].y) {
            atomicMin(cmin_s, iv[i].x);
            atomicMax(cmax_s, iv[i].y);
        }
    }
#endif
    barrier();
    const int cmin = cmin_s, cmax = cmax_s;
    if (cmin >= cmax)
        return;

    vec4 acc[NACC * 4 * NV]; // acc[(a NV + v) 4 + i]: accumulator a, row i, columns 4 (cg + CG v)
    UNROLL for (int x = 0; x < NACC * 4 * NV; x++)
        acc[x] = vec4(0.0);

#ifdef BURST_DKV
    for (int hh = 0; hh < P.group; hh++) {
        const int h = g * P.group + hh;
#endif
        for (int c0 = cmin; c0 < cmax; c0 += BC) {
            // ---- X = A1 B1^T (S) and Y = A2 B2^T (dP), in chunks of DC head-dim elements
            vec4 xs[4], ys[4];
            UNROLL for (int i = 0; i < 4; i++) {
                xs[i] = vec4(0.0);
                ys[i] = vec4(0.0);
            }
            for (int d0 = 0; d0 < D; d0 += DC) {
                barrier(); // the last readers of sh are done
                for (int x = tid; x < 2 * (BR + BC) * (DC / 4); x += nthr) {
                    int which = x / ((BR + BC) * (DC / 4)); // 0: S's operands, 1: dP's
                    int y = x % ((BR + BC) * (DC / 4));
                    int row = y / (DC / 4), c = d0 + 4 * (y % (DC / 4));
                    vec4 val = vec4(0.0);
                    bool isrow = row < BR;
                    int n = isrow ? r0 + row : c0 + row - BR; // operand row index
#ifdef BURST_DKV
                    // rows: K' / V of head g (keys < nk); columns: Q / dO of head h (< cmax)
                    if (c < D && (isrow ? n < P.nk : n < cmax)) {
                        if (isrow)
                            val = which == 0 ? load4(P.k, DTK, view_index(P.k, b, n, g, c), vec) * qmul
                                             : load4(P.v, DTV, view_index(P.v, b, n, g, c), vec);
                        else
                            val = which == 0 ? load4(P.q, DTQ, view_index(P.q, b, n, h, c), vec)
                                             : load4(P.dout, DTO, view_index(P.dout, b, n, h, c), vec);
                    }
#else
                    // rows: Q' / dO of head h (< nq); columns: K / V of head g (< cmax)
                    if (c < D && (isrow ? n < P.nq : n < cmax)) {
                        if (isrow)
                            val = which == 0 ? load4(P.q, DTQ, view_index(P.q, b, n, h, c), vec) * qmul
                                             : load4(P.dout, DTO, view_index(P.dout, b, n, h, c), vec);
                        else
                            val = which == 0 ? load4(P.k, DTK, view_index(P.k, b, n, g, c), vec)
                                             : load4(P.v, DTV, view_index(P.v, b, n, g, c), vec);
                    }
#endif
                    int base = which * DC * (QS + KS) * 4 + (isrow ? 0 : DC * QS * 4);
                    put_t(base, isrow ? QS * 4 : KS * 4, c - d0, isrow ? row : row - BR, val);
                }
                barrier();
                UNROLL for (int e = 0; e < DC; e++) {
                    vec4 a1 = sh[e * QS + rg], b1 = sh[DC * QS + e * KS + cg];
                    vec4 a2 = sh[DC * (QS + KS) + e * QS + rg];
                    vec4 b2 = sh[DC * (2 * QS + KS) + e * KS + cg];
                    UNROLL for (int i = 0; i < 4; i++) {
                        xs[i] = fma(vec4(a1[i]), b1, xs[i]);
                        ys[i] = fma(vec4(a2[i]), b2, ys[i]);
                    }
                }
            }

            // ---- soft-cap: S capped, dS later times the derivative dcap
            vec4 dcap[4];
            if (capped)
                UNROLL for (int i = 0; i < 4; i++) {
                    vec4 t = cap_tanh(xs[i], rcap2);
                    xs[i] = cap2 * t;
                    dcap[i] = 1.0 - t * t;
                }

            // ---- P and dS, transposed into zs
#ifdef BURST_DKV
            // the columns' (query rows') lse, D and allowed keys (loaded here, not before the
            // products: fewer registers live across them)
            float lse2c[4], dlc[4];
            ivec2 ivc[4];
            UNROLL for (int c = 0; c < 4; c++) {
                int i = c0 + 4 * cg + c;
                bool inq = i < cmax;
                uint li = uint((b * P.hq + h) * P.nq + min(i, P.nq - 1));
                float l = lsev.v[li];
                // columns past the range: P = 0 and dS = 0 whatever the clamped row's D holds
                lse2c[c] = !inq || l == NEG_INF ? POS_INF : l * LOG2E;
                dlc[c] = inq ? dlv.v[li] : 0.0;
                ivc[c] = inq ? rows.v[i] : ivec2(0, 0);
            }
#endif
            UNROLL for (int i = 0; i < 4; i++) {
                UNROLL for (int c = 0; c < 4; c++) {
#ifdef BURST_DKV
                    int j = r0 + 4 * rg + i; // key
                    bool ok = j >= ivc[c].x && j < ivc[c].y;
                    float p = ok ? exp2(xs[i][c] - lse2c[c]) : 0.0;
                    ys[i][c] = p * (ys[i][c] - dlc[c]);
#else
                    int j = c0 + 4 * cg + c; // key
                    bool ok = j >= iv[i].x && j < iv[i].y;
                    float p = ok ? exp2(xs[i][c] - lse2[i]) : 0.0;
                    ys[i][c] = p * (ys[i][c] - dl[i]);
#endif
                    xs[i][c] = p;
                }
            }
            if (capped)
                UNROLL for (int i = 0; i < 4; i++)
                    ys[i] *= dcap[i];
            // ---- acc += Z B3, in chunks of DC columns: dQ += dS K; dV += P dO, then dK += dS Q
            // (one score tile in shared memory at a time)
            UNROLL for (int a = 0; a < NACC; a++) {
                if (a > 0)
                    barrier(); // the last readers of zs are done
                UNROLL for (int c = 0; c < 4; c++)
                    zs[(4 * cg + c) * QS + rg] =
                        NACC == 2 && a == 0 ? vec4(xs[0][c], xs[1][c], xs[2][c], xs[3][c])
                                            : vec4(ys[0][c], ys[1][c], ys[2][c], ys[3][c]);
                for (int k0 = 0; k0 < BC; k0 += DC) {
                    barrier(); // zs written; the last readers of sh are done
                    for (int x = tid; x < DC * DV; x += nthr) {
                        int kk = x / DV, c = 4 * (x % DV), n = c0 + k0 + kk;
                        vec4 val = vec4(0.0);
                        if (n < cmax) {
#ifdef BURST_DKV
                            val = a == 0 ? load4(P.dout, DTO, view_index(P.dout, b, n, h, c), vec)
                                         : load4(P.q, DTQ, view_index(P.q, b, n, h, c), vec);
#else
                            val = load4(P.k, DTK, view_index(P.k, b, n, g, c), vec);
#endif
                        }
                        sh[x] = val;
                    }
                    barrier();
                    UNROLL for (int kk = 0; kk < DC; kk++) {
                        vec4 z = zs[(k0 + kk) * QS + rg];
                        UNROLL for (int v = 0; v < NV; v++) {
                            int c4 = cg + CG * v;
                            if (c4 < DV) {
                                vec4 b4 = sh[kk * DV + c4];
                                UNROLL for (int i = 0; i < 4; i++)
                                    acc[(a * NV + v) * 4 + i] =
                                        fma(vec4(z[i]), b4, acc[(a * NV + v) * 4 + i]);
                            }
                        }
                    }
                }
            }
#ifdef BURST_DQ_ATOMIC
            // ---- dQ[columns] += tau dS^T K over the workgroup's key rows, in chunks of DC of
            // them (zs holds dS): invocation x of the CG x DV (column group, head-dim vec4)
            // products owns 4 columns x 4 elements, then adds them with atomics; neighbouring
            // invocations take neighbouring vec4 of one row, so a subgroup's atomics fall in
            // few cache lines
            if ((P.flags & 1) != 0) {
                vec4 dqp[4 * ((CG * DV + nthr - 1) / nthr)];
                UNROLL for (int x = 0; x < 4 * ((CG * DV + nthr - 1) / nthr); x++)
                    dqp[x] = vec4(0.0);
                for (int k0 = 0; k0 < BR; k0 += DC) {
                    barrier(); // the last readers of sh are done
                    for (int x = tid; x < DC * DV; x += nthr) {
                        int kk = x / DV, c = 4 * (x % DV), n = r0 + k0 + kk;
                        sh[x] = c < D && n < P.nk ? load4(P.k, DTK, view_index(P.k, b, n, g, c), vec)
                                                  : vec4(0.0);
                    }
                    barrier();
                    UNROLL for (int t = 0; t < (CG * DV + nthr - 1) / nthr; t++) {
                        int x = tid + t * nthr, d4 = x % DV, cq = x / DV;
                        if (x < CG * DV) {
                            UNROLL for (int r4 = 0; r4 < DC / 4; r4++) {
                                vec4 kv[4];
                                UNROLL for (int e = 0; e < 4; e++)
                                    kv[e] = sh[(4 * r4 + e) * DV + d4];
                                UNROLL for (int c = 0; c < 4; c++) {
                                    vec4 z = zs[(4 * cq + c) * QS + k0 / 4 + r4]; // 4 key rows
                                    UNROLL for (int e = 0; e < 4; e++)
                                        dqp[4 * t + c] = fma(vec4(z[e]), kv[e], dqp[4 * t + c]);
                                }
                            }
                        }
                    }
                }
                UNROLL for (int t = 0; t < (CG * DV + nthr - 1) / nthr; t++) {
                    int x = tid + t * nthr, d4 = x % DV, cq = x / DV;
                    UNROLL for (int c = 0; c < 4; c++) {
                        int i = c0 + 4 * cq + c;
                        if (x < CG * DV && i < cmax) {
                            uint o = uint(((b * P.nq + i) * P.hq + h) * D + 4 * d4);
                            F32 dq = F32(P.o);
                            UNROLL for (int e = 0; e < 4; e++)
                                atomicAdd(dq.v[o + uint(e)], P.scale * dqp[4 * t + c][e]);
                        }
                    }
                }
            }
#endif
        }
#ifdef BURST_DKV
    }
#endif

    // ---- add to the fp32 accumulators: each element has one writer
    UNROLL for (int i = 0; i < 4; i++) {
        int r = r0 + 4 * rg + i;
#ifdef BURST_DKV
        if (r >= P.nk)
            continue;
        const uint ob = uint(((b * P.nk + r) * P.hkv + g) * D);
#else
        if (r >= P.nq)
            continue;
        const uint ob = uint(((b * P.nq + r) * P.hq + h) * D);
#endif
        UNROLL for (int v = 0; v < NV; v++) {
            int c = 4 * (cg + CG * v);
            if (c >= D)
                continue;
            UNROLL for (int e = 0; e < 4; e++) {
                uint x = ob + uint(c + e);
#ifdef BURST_DKV
                if ((P.flags & 4) != 0) {
                    F32 dv = F32(P.dv);
                    dv.v[x] += acc[(0 * NV + v) * 4 + i][e];
                }
                if ((P.flags & 2) != 0) {
                    F32 dk = F32(P.dk);
                    dk.v[x] = fma(P.scale, acc[(1 * NV + v) * 4 + i][e], dk.v[x]);
                }
#else
                F32 dq = F32(P.o);
                dq.v[x] = fma(P.scale, acc[v * 4 + i][e], dq.v[x]);
#endif
            }
        }
    }
}
