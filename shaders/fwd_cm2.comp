#version 460
// shaders/fwd_cm2.comp - forward step on workgroup-scope cooperative matrices
// (GL_NV_cooperative_matrix2): fp16 q/k/v (bf16 ones scaled into fp16, below), fp32
// accumulation, one pass of online softmax, the lse merge into the running (O, lse) fused at the
// end. Same contract as fwd_cmq_nv.comp: the parameter block of common.glsl, each query row's
// allowed key interval at params.rows, keys [lo, hi) of this dispatch only; rows with no allowed
// key leave (O, lse) bit for bit unchanged.
//
// Workgroup (x = Q tile, y = query head, z = batch) of NT invocations (constant 8; the host
// takes a count the device lists for workgroup-scope fp16 matrices) owning BR query rows.
// Unlike the subgroup-scope kernels, no invocation knows which matrix elements it holds: every
// row operation goes through the extension's operations, which the driver maps onto the
// tensor cores' fragments:
//   Q (BR x DP, fp16 operand) once, staged through shared memory (load8s: 16-byte loads where
//     aligned, bf16 scaled into fp16, rows past nq and columns past D zero); DP = D rounded up
//     to 16, so every head dim that is a multiple of 8 runs;
//   per key tile of BC keys: K^T and V straight from global memory by tensor layouts over the
//     strided [B, n, H, d] views (rows j0.. of head g = h / group of batch b, row stride s1),
//     clamped to the tensor: keys past nk and columns past D read 0;
//   S = Q K^T (BR x BC, fp32); scaled to log2 units and masked per element by each row's
//     allowed interval (a per-element function reading the rows' intervals from shared
//     memory; skipped when every row allows the whole tile);
//   the row maxima and sums by row reductions (each element of the result holds its row's),
//     the running maximum m and sum l kept as BR x BC matrices of the same type as S, so that
//     their element e is in the same row as S's element e and the online-softmax update is a
//     loop over elements; P = exp2(S - m) converted to an fp16 operand (a conversion between
//     uses); O (BR x DP, fp32) scaled by exp2(m_old - m) spread across the row (a row
//     reduction into O's shape), then O += P V.
// The merge: l and m reduced to BR x 16 matrices stored to shared memory (column 0 read per
// row), each row's new lse and weights computed by one invocation (which writes the lse), the
// old O loaded by the same tensor layout as the store, combined per element, stored clamped
// to the tensor (rows past nq, columns past D not written).
//
// Precision: P rounded to fp16 before P V (as the subgroup-scope kernels); l sums the fp32 P;
// m is the exact running maximum (no lazy rescaling: P <= 1).
// bf16 inputs: as fwd_cmq_nv.comp, Q scaled into fp16 by a power of two as it loads; K and V
// must be fp16 here (DTK = DTV = 1): the host converts bf16 ones once a call into packed fp16
// scratch (flag bits 6, 7; elem_cvt), their scales from params.amax, undone in qmul and at the
// merge.
//
// Shared memory: the Q tile [BR][DP + 8] fp16 (later the reduced l and m, BR x 16 fp32 each),
// per row its key interval and merge weights, four ints. runtime/vulkan/vk_caps.c
// (burst_vk_tile_shared) mirrors the size.
#extension GL_GOOGLE_include_directive : require
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "cm2.glsl"

const int RS = int(DP) / 8 + 1;           // row stride of the Q tile (uvec4; padded by 8 halves)
const int QN = BR * RS > BR * 8 ? BR * RS : BR * 8; // Q tile, or l and m (BR x 16 fp32 each)

#define SMAT coopmat<float, WG, BR, BC, ACC>
#define OMAT coopmat<float, WG, BR, DP, ACC>
#define RMAT coopmat<float, WG, BR, 16, ACC>

shared uvec4 sh[QN];
shared ivec2 iv_s[BR];  // each row's allowed keys in this dispatch (empty: not live)
shared vec2 wt_s[BR];   // merge weights of each row: of the old O and of the new one
shared int mode_s[BR];  // 0: O unchanged, 1: O replaced (no earlier keys), 2: merged
shared int kmin_s, kmax_s, kin_lo_s, kin_hi_s;

// S scaled into log2 units, -inf where the row does not allow the key
float mask_elem(const in uint r, const in uint c, const in float x, const in int j0,
                const in float qmul)
{
    const int kj = j0 + int(c);
    const ivec2 iv = iv_s[r];
    return kj >= iv.x && kj < iv.y ? x * qmul : NEG_INF;
}

// the merged O: the new (normalised) one alone, the old one weighted in, or the old one
float merge_elem(const in uint r, const in uint c, const in float x, const in float old)
{
    const int mode = mode_s[r];
    const vec2 w = wt_s[r];
    return mode == 0 ? old : mode == 1 ? x * w.y : fma(w.x, old, x * w.y);
}

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v;
    const int tid = int(gl_LocalInvocationID.x);
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR;
    const int g = h / P.group;
    const bool vec = (P.flags & 8) != 0;
    I32x2 rows = I32x2(P.rows);

    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
        kin_lo_s = 0;
        kin_hi_s = P.nk;
    }
    barrier();
    for (int r = tid; r < BR; r += NT) {
        const int i = i0 + r;
        ivec2 iv = i < P.nq ? rows.v[i] : ivec2(0, 0);
        iv = ivec2(max(iv.x, P.lo), min(iv.y, P.hi)); // this dispatch's keys
        iv_s[r] = iv;
        if (iv.x < iv.y) {
            atomicMin(kmin_s, iv.x);
            atomicMax(kmax_s, iv.y);
        }
        if (i < P.nq) { // keys allowed for every live row: tiles inside need no mask
            atomicMax(kin_lo_s, iv.x);
            atomicMin(kin_hi_s, iv.y);
        }
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s, kin_lo = kin_lo_s, kin_hi = kin_hi_s;
    if (kmin >= kmax)
        return; // uniform: no row has a key here

    float qsc = 1.0, ksc = 1.0, vsc = 1.0;
    if (DTQ == 2 || (P.flags & 192) != 0) {
        U32 am = U32(P.amax);
        qsc = DTQ == 2 ? bf16_scale(am.v[0]) : 1.0;
        ksc = (P.flags & 64) != 0 ? bf16_scale(am.v[1]) : 1.0;
        vsc = (P.flags & 128) != 0 ? bf16_scale(am.v[2]) : 1.0;
    }

    // Q into the operand, through shared memory (columns D..DP zero)
    for (int x = tid; x < BR * int(DP / 8); x += NT) {
        const int row = x / int(DP / 8), c8 = x % int(DP / 8);
        const bool in_q = i0 + row < P.nq && 8 * c8 < D;
        sh[row * RS + c8] = load8s(qv, DTQ, vec, view_index(qv, b, i0 + row, h, 8 * c8), in_q, qsc);
    }
    barrier();
    coopmat<float16_t, WG, BR, DP, gl_MatrixUseA> qa;
    coopMatLoad(qa, sh, 0u, uint(RS), gl_CooperativeMatrixLayoutRowMajor);
    barrier(); // sh is free again (l and m at the end)

    // K and V of head g in batch b: [nk][D] with row stride s1, from element base (fp16
    // elements from the view's address, its offset included)
    const TBase kb = view_tensor(kv, b, g), vb = view_tensor(vv, b, g);
    const TLAYOUT tk = rows_layout(P.nk, kv.s1, kb.skip), tv = rows_layout(P.nk, vv.s1, vb.skip);
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);

    // the scales are powers of two (exact), divided one at a time (their product may overflow)
    const float qmul = P.scale * LOG2E / qsc / ksc;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    const float smul = capped ? 1.0 : qmul; // capped scores are in log2 units already
    SMAT m = SMAT(NEG_INF), l = SMAT(0.0);
    OMAT o = OMAT(0.0);
    for (int j0 = kmin; j0 < kmax; j0 += BC) {
        coopmat<float16_t, WG, DP, BC, gl_MatrixUseB> kt;
        coopMatLoadTensorNV(kt, F16(kb.addr).v, 0u, ROWS(tk, kb, j0, BC), transpose);
        SMAT s = coopMatMulAdd(qa, kt, SMAT(0.0));
        if (capped) // uniform; before the mask, which leaves -inf
            for (int e = 0; e < s.length(); e++)
                s[e] = cap2 * cap_tanh(s[e] * qmul, rcap2);
        if (j0 >= kin_lo && j0 + BC <= kin_hi) // uniform: every row allows the whole tile
            s = s * smul;
        else
            coopMatPerElementNV(s, s, mask_elem, j0, smul);

        SMAT mx, al;
        coopMatReduceNV(mx, s, gl_CooperativeMatrixReduceRowNV, fmax2);
        for (int e = 0; e < s.length(); e++) {
            const float mn = max(m[e], mx[e]);
            const float mu = mn == NEG_INF ? 0.0 : mn; // fully masked so far: P stays 0
            al[e] = exp2(m[e] - mu);
            m[e] = mn;
            mx[e] = mu;
        }
        for (int e = 0; e < s.length(); e++)
            s[e] = exp2(s[e] - mx[e]); // masked: exp2(-inf) = 0
        SMAT rsum;
        coopMatReduceNV(rsum, s, gl_CooperativeMatrixReduceRowNV, fadd2);
        for (int e = 0; e < s.length(); e++)
            l[e] = fma(l[e], al[e], rsum[e]);
        OMAT alo;
        coopMatReduceNV(alo, al, gl_CooperativeMatrixReduceRowNV, first2);
        o = o * alo;

        coopmat<float16_t, WG, BR, BC, gl_MatrixUseA> pa =
            coopmat<float16_t, WG, BR, BC, gl_MatrixUseA>(s);
        coopmat<float16_t, WG, BC, DP, gl_MatrixUseB> vm;
        coopMatLoadTensorNV(vm, F16(vb.addr).v, 0u, ROWS(tv, vb, j0, BC));
        o = coopMatMulAdd(pa, vm, o);
    }

    // each row's l and m: column 0 of BR x 16 reductions, through shared memory
    RMAT l16, m16;
    coopMatReduceNV(l16, l, gl_CooperativeMatrixReduceRowNV, first2);
    coopMatReduceNV(m16, m, gl_CooperativeMatrixReduceRowNV, first2);
    coopMatStore(l16, sh, 0u, 4u, gl_CooperativeMatrixLayoutRowMajor);
    coopMatStore(m16, sh, uint(BR * 4), 4u, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    // the merge weights: L' = max(L, Lr) + log(1 + exp(-|L - Lr|)), O' = e^(L-L') O + e^(Lr-L') Or
    // (Or = the new O / l); the scale of V is undone here, after the weighting
    F32 lse = F32(P.lse);
    const float vinv = 1.0 / vsc;
    for (int r = tid; r < BR; r += NT) {
        const int i = i0 + r;
        const float lr = uintBitsToFloat(sh[4 * r].x), mr = uintBitsToFloat(sh[4 * (BR + r)].x);
        int mode = 0;
        vec2 w = vec2(0.0);
        if (i < P.nq && lr != 0.0) {
            const uint li = uint((b * P.hq + h) * P.nq + i);
            const float lo = lse.v[li];
            float ln = (mr + log2(lr)) * LN2;
            w = vec2(0.0, vinv / lr);
            mode = 1;
            if (lo != NEG_INF) {
                const float lnew = max(lo, ln) + log(1.0 + exp(-abs(lo - ln)));
                w = vec2(exp(lo - lnew), exp(ln - lnew) * vinv / lr);
                ln = lnew;
                mode = 2;
            }
            lse.v[li] = ln;
        }
        wt_s[r] = w;
        mode_s[r] = mode;
    }
    barrier();

    // O: [B, nq, hq, D] fp32; the tile's rows i0.. of head h, row stride hq D
    const TBase ob = tensor_base(P.o, uint((b * P.nq * P.hq + h) * D), 4u);
    const TLAYOUT to = rows_layout(P.nq, P.hq * D, ob.skip);
    OMAT old;
    coopMatLoadTensorNV(old, F32(ob.addr).v, 0u, ROWS(to, ob, i0, BR));
    coopMatPerElementNV(o, o, merge_elem, old);
    coopMatStoreTensorNV(o, F32(ob.addr).v, 0u, ROWS(to, ob, i0, BR));
}
