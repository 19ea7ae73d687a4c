#version 460
// shaders/fwd_cm_nv.comp - forward step on cooperative matrices (GL_NV_cooperative_matrix):
// fp16 q/k/v, fp32 accumulation, one pass of online softmax, the lse merge into the running
// (O, lse) fused at the end.
//
// Workgroup (x = Q tile, y = query head, z = batch): W = BR / 16 subgroups of T invocations,
// each owning 16 query rows. The Q tile passes once through shared memory into registers (D / 16
// operand matrices per subgroup); K/V tiles of BC keys are staged in shared memory with 16-byte
// loads (where the views are 16-byte aligned, flag bit 3), the next tile's loads in flight
// while the current one is computed on.
// Per subgroup and key tile:
//   S (16 x BC, fp32) = Q K^T on 16x16x16 MMAs, stored to the subgroup's scratch tile;
//   the T invocations, T / 16 per row, read their row's scores twice (maximum, then P: no
//   scores held in registers), mask them by the row's allowed key interval (skipped when the
//   whole tile is allowed for every row of the workgroup), and do the online-softmax step in
//   fp32: a reference maximum m, moved only when the tile's maximum exceeds it by more than 2^8
//   (lazy rescaling: P <= 2^8, exact in the final O / l, and fp16 P keeps its relative
//   precision up to 65504), P, the sum l;
//   P goes to the scratch tile as fp16, beside S; where a row's m moved, O (16 x D, D/16 fp32
//   accumulators) is rescaled by alpha through the scratch tile, over S (the NV extension does
//   not say which rows an invocation's accumulator elements are in; a matrix stored to memory
//   does);
//   O += P V on MMAs (into a fresh accumulator per 16 columns, added to O).
// Only key tiles in the union of the tile's allowed key intervals are visited; rows with no
// allowed key leave (O, lse) bit-for-bit unchanged.
// Precision: P is rounded to fp16 before P V (as in FlashAttention); l sums the unrounded fp32
// P. With fp16 inputs this adds at most 2^-11 relative per term, the size of the fp16 output
// rounding the harness allows.
//
// Shared memory (one uvec4 array sh, cm_nv.glsl):
//   [0, KVN)         K tile [BC][D + 8] and V tile [BC][D + 8] fp16
//   [KVN, + W XSZ)   per subgroup: S [16][BC + 4] fp32, then P [16][BC + 8] fp16; an O chunk
//                    [16][16] fp32 being rescaled or merged goes over S
//   the Q tile passes through the whole array, QP rows at a time, before the loop
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

const int NB = BC / 16;         // 16-key chunks of a key tile
const int CPL = BC / LPR;       // scores per invocation in the softmax (a multiple of 8)
const int SS = (BC + 4) / 4;    // row stride of S (uvec4 = 4 floats)
const int PS = (BC + 8) / 8;    // row stride of P (uvec4 = 8 halves)
const int POFF = 16 * SS;       // P after S in a subgroup's scratch
const int XSZ = POFF + 16 * PS; // scratch per subgroup (uvec4); S holds an O chunk (64) too
const int KVN = 2 * BC * RS;    // the K/V tiles
const int SHN = KVN + W * XSZ;  // the whole array
const int QP = (SHN / RS) / 16 * 16 < BR ? (SHN / RS) / 16 * 16 : BR; // Q rows per pass
const int L8 = BC * (D / 8);    // 16-byte pieces of a K (or V) tile
const int LPT = (L8 + NT - 1) / NT; // of them per invocation
const float RESCALE_LOG2 = 8.0;

shared uvec4 sh[SHN];
shared int kmin_s, kmax_s, kin_lo_s, kin_hi_s;

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v; // in registers for the loop
    const int tid = int(gl_LocalInvocationID.x);
    const int sg = tid / T, lane = tid % T;
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR;
    const int g = h / P.group;
    const bool vec = (P.flags & 8) != 0;
    I32x2 rows = I32x2(P.rows);
    // in the softmax, invocation `lane` of subgroup sg works on row r of the subgroup's 16,
    // columns [part * CPL, (part + 1) * CPL) of the key tile
    const int r = lane / LPR, part = lane % LPR;
    const int i = i0 + 16 * sg + r;
    const bool live = i < P.nq;

    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
        kin_lo_s = 0;
        kin_hi_s = P.nk;
    }
    barrier();
    ivec2 my = live ? rows.v[i] : ivec2(0, 0);
    my = ivec2(max(my.x, P.lo), min(my.y, P.hi)); // this dispatch's keys
    if (part == 0 && my.x < my.y) {
        atomicMin(kmin_s, my.x);
        atomicMax(kmax_s, my.y);
    }
    if (part == 0 && live) { // keys allowed for every live row: tiles inside need no mask
        atomicMax(kin_lo_s, my.x);
        atomicMin(kin_hi_s, my.y);
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s, kin_lo = kin_lo_s, kin_hi = kin_hi_s;
    if (kmin >= kmax)
        return;

    // Q (16 x D per subgroup) into registers, through shared memory QP rows at a time
    AMAT qa[DC];
    for (int p0 = 0; p0 < BR; p0 += QP) {
        if (p0 > 0)
            barrier(); // the previous pass is read
        for (int x = tid; x < QP * (D / 8); x += NT) {
            int row = x / (D / 8), c8 = x % (D / 8);
            bool in_q = p0 + row < BR && i0 + p0 + row < P.nq;
            sh[row * RS + c8] = load8(qv, vec, view_index(qv, b, i0 + p0 + row, h, 8 * c8), in_q);
        }
        barrier();
        if (16 * sg >= p0 && 16 * sg < p0 + QP) // uniform in the subgroup
            UNROLL for (int c = 0; c < DC; c++)
                CM_LOAD(qa[c], sh, uint((16 * sg - p0) * RS + 2 * c), uint(RS), false);
    }

    const float qmul = P.scale * LOG2E;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    const float smul = capped ? 1.0 : qmul; // capped scores are in log2 units already
    float m = NEG_INF, l = 0.0;
    CMAT o[DC];
    UNROLL for (int c = 0; c < DC; c++)
        o[c] = CMAT(0.0);
    const int xb = KVN + sg * XSZ;
    // K/V tiles go global -> registers -> shared memory, LPT 16-byte pieces per invocation and
    // matrix (piece x = tid + NT it: row x / (D / 8), column 8 (x % (D / 8))); the loads of tile
    // j0 + BC are issued before the MMAs of tile j0, so that their latency hides behind them
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
        barrier(); // the previous tile (or Q's last pass) is no longer read
        UNROLL for (int it = 0; it < LPT; it++) {
            int x = tid + NT * it, row = x / (D / 8), c8 = x % (D / 8);
            if (x < L8) {
                sh[row * RS + c8] = kreg[it];
                sh[(BC + row) * RS + c8] = vreg[it];
            }
        }
        barrier();
        if (j0 + BC < kmax) {
            FETCH_KV(j0 + BC)
        }

        // S = Q K^T, to the scratch tile: the NB chunks' MMAs interleaved (independent chains),
        // stored after the last (the stores and the K loads share one array)
        CMAT s[NB];
        UNROLL for (int n = 0; n < NB; n++)
            s[n] = CMAT(0.0);
        UNROLL for (int c = 0; c < DC; c++) {
            UNROLL for (int n = 0; n < NB; n++) {
                BMAT bk;
                CM_LOAD(bk, sh, uint(16 * n * RS + 2 * c), uint(RS), true);
                s[n] = CM_MULADD(qa[c], bk, s[n]);
            }
        }
        UNROLL for (int n = 0; n < NB; n++)
            CM_STORE(s[n], sh, uint(xb + 4 * n), uint(SS), false);
        subgroup_sync();

        // online softmax of row r over this invocation's CPL columns, then across the row: S is
        // read twice (maximum, then P), so no scores stay in registers
        const bool full = j0 >= kin_lo && j0 + BC <= kin_hi; // uniform
        const int srow = xb + r * SS + part * (CPL / 4);
        const int kc = j0 + part * CPL; // key of this invocation's first column
        if (capped) // uniform: this invocation's scores capped in place, in log2 units
            UNROLL for (int j4 = 0; j4 < CPL / 4; j4++)
                sh[srow + j4] = floatBitsToUint(
                    cap2 * cap_tanh(uintBitsToFloat(sh[srow + j4]) * qmul, rcap2));
        float mx = NEG_INF;
        UNROLL for (int j4 = 0; j4 < CPL / 4; j4++) {
            vec4 w = uintBitsToFloat(sh[srow + j4]);
            UNROLL for (int k = 0; k < 4; k++) {
                int kj = kc + 4 * j4 + k;
                bool ok = full || (kj >= my.x && kj < my.y);
                mx = ok ? max(mx, w[k] * smul) : mx;
            }
        }
        for (int s = LPR / 2; s > 0; s >>= 1)
            mx = max(mx, subgroupShuffleXor(mx, uint(s)));
        const float mnew = mx > m + RESCALE_LOG2 ? mx : m; // m = -inf: any finite mx moves it
        const float muse = mnew == NEG_INF ? 0.0 : mnew;    // fully masked so far: stay exactly 0
        const float alpha = mnew == m ? 1.0 : exp2(m - muse);
        float sum = 0.0;
        UNROLL for (int j8 = 0; j8 < CPL; j8 += 8) {
            uvec4 w;
            UNROLL for (int k2 = 0; k2 < 2; k2++) {
                vec4 sv = uintBitsToFloat(sh[srow + j8 / 4 + k2]);
                UNROLL for (int k = 0; k < 2; k++) {
                    int kj = kc + j8 + 4 * k2 + 2 * k;
                    float p0 = exp2(sv[2 * k] * smul - muse);
                    float p1 = exp2(sv[2 * k + 1] * smul - muse);
                    p0 = full || (kj >= my.x && kj < my.y) ? p0 : 0.0;
                    p1 = full || (kj + 1 >= my.x && kj + 1 < my.y) ? p1 : 0.0;
                    sum += p0 + p1;
                    w[2 * k2 + k] = pack_half2(p0, p1);
                }
            }
            sh[xb + POFF + r * PS + (part * CPL + j8) / 8] = w; // P row r, columns part CPL + j8 ..
        }
        for (int s = LPR / 2; s > 0; s >>= 1)
            sum += subgroupShuffleXor(sum, uint(s));
        l = l * alpha + sum;
        m = mnew;
        subgroup_sync(); // S is read (an O chunk may go over it); P is written
        // where a row's m moved, O is rescaled through shared memory, a 16-column chunk at a
        // time: stored over S, each invocation scales its row's part, loaded back (rare, with
        // the lazy maximum; element access on the accumulators would cost registers always)
        if (!subgroupAll(alpha == 1.0)) {
            UNROLL for (int c = 0; c < DC; c++) {
                CM_STORE(o[c], sh, uint(xb), 4u, false);
                subgroup_sync();
                UNROLL for (int k = 0; k < 4 / LPR; k++) {
                    uint x = uint(xb + 4 * r + part * (4 / LPR) + k);
                    sh[x] = floatBitsToUint(uintBitsToFloat(sh[x]) * alpha);
                }
                subgroup_sync();
                CM_LOAD(o[c], sh, uint(xb), 4u, false);
                subgroup_sync();
            }
        }
        // O += P V: per 16-column chunk of O, P V on a fresh accumulator, then added to O (an
        // MMA into the long-lived O accumulators themselves cost 71 instead of 55 ms on the H100)
        AMAT pa[NB];
        UNROLL for (int n = 0; n < NB; n++)
            CM_LOAD(pa[n], sh, uint(xb + POFF + 2 * n), uint(PS), false);
        UNROLL for (int c = 0; c < DC; c++) {
            CMAT t = CMAT(0.0);
            UNROLL for (int n = 0; n < NB; n++) {
                BMAT bv;
                CM_LOAD(bv, sh, uint((BC + 16 * n) * RS + 2 * c), uint(RS), false);
                t = CM_MULADD(pa[n], bv, t);
            }
            o[c] = o[c] + t;
        }
        subgroup_sync(); // P is read: the next P goes over it
    }

    // fused merge, one 16-column chunk at a time through the scratch tile:
    // L' = max(L, Lr) + log(1 + exp(-|L - Lr|)), O' = e^(L-L') O + e^(Lr-L') Or
    F32 lse = F32(P.lse), oa = F32(P.o);
    F32x4 oa4 = F32x4(P.o);
    const bool oaligned = (P.flags & 16) != 0;
    const bool merge = live && l != 0.0;
    const uint li = uint((b * P.hq + h) * P.nq + i);
    float lo = merge ? lse.v[li] : 0.0;
    float lr = (m + log2(l)) * LN2, ln = lr, co = 0.0, cn = 1.0 / l;
    if (merge && lo != NEG_INF) {
        ln = max(lo, lr) + log(1.0 + exp(-abs(lo - lr)));
        co = exp(lo - ln);
        cn = exp(lr - ln) / l;
    }
    const uint ob4 = uint(((b * P.nq + i) * P.hq + h) * (D / 4)); // o_acc row, in vec4
    UNROLL for (int c = 0; c < DC; c++) {
        CM_STORE(o[c], sh, uint(xb), 4u, false);
        subgroup_sync();
        if (merge) {
            UNROLL for (int k = 0; k < 4 / LPR; k++) {
                int c4 = part * (4 / LPR) + k; // vec4 of the 16 columns
                vec4 ov = uintBitsToFloat(sh[xb + 4 * r + c4]);
                uint x = ob4 + uint(4 * c + c4);
                if (oaligned) {
                    oa4.v[x] = lo == NEG_INF ? ov * cn : co * oa4.v[x] + cn * ov;
                } else {
                    UNROLL for (int e = 0; e < 4; e++) {
                        uint xe = 4 * x + uint(e);
                        oa.v[xe] = lo == NEG_INF ? ov[e] * cn : fma(co, oa.v[xe], cn * ov[e]);
                    }
                }
            }
        }
        subgroup_sync();
    }
    if (merge && part == 0)
        lse.v[li] = ln;
}
