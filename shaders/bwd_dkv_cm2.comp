#version 460
// shaders/bwd_dkv_cm2.comp - backward dK and dV on workgroup-scope cooperative matrices
// (GL_NV_cooperative_matrix2) for one K/V block:
//   dV_j += sum_i P_ij dO_i,  dK_j += tau sum_i dS_ij Q_i
// summed over every query head of the kv head's group and every query row; fp16 q/k/v/dO
// (bf16 ones converted by the host, below), fp32 accumulation, every head dim
// (shaders/cm2.glsl). Same contract as bwd_dkv_cmq_nv.comp: query rows [lo, hi) of this
// dispatch only, the fp32 accumulators [B, nk, hkv, D] at params.dk and params.dv (flag bits 1,
// 2 say which are wanted).
//
// Workgroup (x = key tile, y = kv head, z = batch) owning BR key rows: K and V (BR x DP, fp16
// operands) loaded once by tensor layouts over the strided views; only query rows whose
// interval meets the workgroup's keys are visited, in tiles of BC rows per query head of the
// group. Per query tile (L log2 e, D and the rows' allowed key intervals staged in shared
// memory first):
//   Q^T and dO^T by a transposing tensor load, S^T = K Q^T and dP^T = V dO^T (BR x BC, fp32);
//   P^T = exp2(S^T tau log2 e - L log2 e) masked by each query column's allowed keys, then
//   dS^T = P^T (dP^T - D) (per-element functions, the column's values from shared memory);
//   dV (BR x DP, fp32) += P^T dO and dK += dS^T Q, P^T and dS^T converted to fp16 operands, Q
//   and dO loaded again untransposed.
// At the end the accumulators' tiles are loaded, tau dK and dV added per element and stored,
// clamped to the tensor: each element has one writer (deterministic).
// Precision: P and dS are rounded to fp16 before the products (as in FlashAttention). bf16
// inputs: all four views converted by the host into packed fp16, each scaled by a power of two
// (flag bits 6-9, load8.glsl cvt_scales); S^T is unscaled in qmul, dP^T and D are taken in
// dO's scaled units, and the scales are undone when dK (dO's and Q's) and dV (dO's) are added
// (as bwd_dkv_cmq_nv.comp).
//
// Shared memory: per query row of a tile its L log2 e, D and allowed key interval (an ivec4);
// two ints. runtime/vulkan/vk_caps.c (burst_vk_tile_shared) mirrors the size.
#extension GL_GOOGLE_include_directive : require
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "cm2.glsl"

#define SMAT coopmat<float, WG, BR, BC, ACC>
#define OMAT coopmat<float, WG, BR, DP, ACC>

shared ivec4 rowq_s[BC]; // per query row of the tile: L log2 e, D (bits), its allowed keys
shared int qmin_s, qmax_s;

// P^T from S^T: key row j0 + r, query column c
float pt_elem(const in uint r, const in uint c, const in float s, const in int j0,
              const in float qmul)
{
    const int j = j0 + int(r);
    const ivec4 rq = rowq_s[c];
    return j >= rq.z && j < rq.w ? exp2(s * qmul - intBitsToFloat(rq.x)) : 0.0;
}

// dS^T from dP^T (dp) and P^T (p)
float dst_elem(const in uint r, const in uint c, const in float dp, const in float p,
               const in float pmul)
{
    return p * (dp * pmul - intBitsToFloat(rowq_s[c].y));
}

// the same two with the scores soft-capped (common.glsl): P^T from the capped S^T, and dS^T
// from dP^T (dp) and the raw S^T (s), times the cap's derivative
float pt_cap_elem(const in uint r, const in uint c, const in float s, const in int j0,
                  const in float qmul, const in float cap2)
{
    const int j = j0 + int(r);
    const ivec4 rq = rowq_s[c];
    const float x = cap2 * cap_tanh(s * qmul, 1.0 / cap2);
    return j >= rq.z && j < rq.w ? exp2(x - intBitsToFloat(rq.x)) : 0.0;
}

float dst_cap_elem(const in uint r, const in uint c, const in float dp, const in float s,
                   const in int j0, const in float qmul, const in float pmul, const in float cap2)
{
    const int j = j0 + int(r);
    const ivec4 rq = rowq_s[c];
    const float t = cap_tanh(s * qmul, 1.0 / cap2);
    const float p = j >= rq.z && j < rq.w ? exp2(cap2 * t - intBitsToFloat(rq.x)) : 0.0;
    return p * (dp * pmul - intBitsToFloat(rq.y)) * (1.0 - t * t);
}

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v, dov = P.dout;
    const int tid = int(gl_LocalInvocationID.x);
    const int b = int(gl_WorkGroupID.z), g = int(gl_WorkGroupID.y);
    const int j0 = int(gl_WorkGroupID.x) * BR;
    const int j1 = min(j0 + BR, P.nk);
    I32x2 rows = I32x2(P.rows);

    // query rows (of this dispatch's range) whose allowed keys meet [j0, j1)
    if (tid == 0) {
        qmin_s = P.nq;
        qmax_s = 0;
    }
    barrier();
    int lo = P.nq, hi = 0;
    for (int i = P.lo + tid; i < min(P.nq, P.hi); i += NT) {
        const ivec2 iv = rows.v[i];
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
        return; // uniform: no query row sees these keys

    coopmat<float16_t, WG, BR, DP, gl_MatrixUseA> ka, va;
    const TBase kb = view_tensor(kv, b, g), vb = view_tensor(vv, b, g);
    coopMatLoadTensorNV(ka, F16(kb.addr).v, 0u, ROWS(rows_layout(P.nk, kv.s1, kb.skip), kb, j0, BR));
    coopMatLoadTensorNV(va, F16(vb.addr).v, 0u, ROWS(rows_layout(P.nk, vv.s1, vb.skip), vb, j0, BR));
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);

    // bf16 inputs converted by the host: their scales (1 otherwise); powers of two, divided one
    // at a time (a product may overflow)
    const vec4 sc = cvt_scales(P.amax, P.flags);
    const float qmul = P.scale * LOG2E / sc.y / sc.x, pmul = 1.0 / sc.z;
    OMAT dk = OMAT(0.0), dv = OMAT(0.0);
    // query tiles t = 0, 1, ..: head g * group + t / nt, rows qmin + BC (t % nt)
    const int nt = (qmax - qmin + BC - 1) / BC, ntiles = P.group * nt;
    for (int t = 0; t < ntiles; t++) {
        const int h = g * P.group + t / nt, i0 = qmin + BC * (t % nt);
        barrier(); // the previous tile's rows are no longer read
        for (int r = tid; r < BC; r += NT) {
            const int ir = i0 + r;
            const bool in_tile = ir < qmax;
            const uint li = uint((b * P.hq + h) * P.nq + ir);
            const float lse = in_tile ? F32(P.lse).v[li] : NEG_INF;
            const float dl = in_tile ? F32(P.delta).v[li] * sc.w : 0.0; // in dO's scaled units
            const ivec2 iv = in_tile ? rows.v[ir] : ivec2(0, 0);
            // L = -inf: no key anywhere, P = 0
            rowq_s[r] = ivec4(floatBitsToInt(lse == NEG_INF ? POS_INF : lse * LOG2E),
                              floatBitsToInt(dl), iv);
        }
        barrier();
        const TBase qb = view_tensor(qv, b, h), dob = view_tensor(dov, b, h);
        const TLAYOUT tq = rows_layout(P.nq, qv.s1, qb.skip);
        const TLAYOUT tdo = rows_layout(P.nq, dov.s1, dob.skip);
        coopmat<float16_t, WG, DP, BC, gl_MatrixUseB> qt, dot;
        coopMatLoadTensorNV(qt, F16(qb.addr).v, 0u, ROWS(tq, qb, i0, BC), transpose);
        coopMatLoadTensorNV(dot, F16(dob.addr).v, 0u, ROWS(tdo, dob, i0, BC), transpose);
        SMAT pt = coopMatMulAdd(ka, qt, SMAT(0.0));
        SMAT dst = coopMatMulAdd(va, dot, SMAT(0.0));
        if (P.cap > 0.0) { // uniform: dS^T from the raw S^T first
            const float cap2 = P.cap * LOG2E;
            coopMatPerElementNV(dst, dst, dst_cap_elem, pt, j0, qmul, pmul, cap2);
            coopMatPerElementNV(pt, pt, pt_cap_elem, j0, qmul, cap2);
        } else {
            coopMatPerElementNV(pt, pt, pt_elem, j0, qmul);
            coopMatPerElementNV(dst, dst, dst_elem, pt, pmul);
        }
        coopmat<float16_t, WG, BR, BC, gl_MatrixUseA> pa =
            coopmat<float16_t, WG, BR, BC, gl_MatrixUseA>(pt);
        coopmat<float16_t, WG, BR, BC, gl_MatrixUseA> dsa =
            coopmat<float16_t, WG, BR, BC, gl_MatrixUseA>(dst);
        coopmat<float16_t, WG, BC, DP, gl_MatrixUseB> qm, dom;
        coopMatLoadTensorNV(qm, F16(qb.addr).v, 0u, ROWS(tq, qb, i0, BC));
        coopMatLoadTensorNV(dom, F16(dob.addr).v, 0u, ROWS(tdo, dob, i0, BC));
        dv = coopMatMulAdd(pa, dom, dv);
        dk = coopMatMulAdd(dsa, qm, dk);
    }

    // accumulators += tau dK and dV: [B, nk, hkv, D] fp32, the tile's rows j0.. of head g
    const float tau = P.scale / sc.w / sc.x, vmul = 1.0 / sc.w; // dS^T, dO in dO's units
    const uint aelem = uint((b * P.nk * P.hkv + g) * D);
    OMAT old;
    if ((P.flags & 2) != 0) {
        const TBase ab = tensor_base(P.dk, aelem, 4u);
        const TLAYOUT ta = rows_layout(P.nk, P.hkv * D, ab.skip);
        coopMatLoadTensorNV(old, F32(ab.addr).v, 0u, ROWS(ta, ab, j0, BR));
        coopMatPerElementNV(dk, dk, acc_elem, old, tau);
        coopMatStoreTensorNV(dk, F32(ab.addr).v, 0u, ROWS(ta, ab, j0, BR));
    }
    if ((P.flags & 4) != 0) {
        const TBase ab = tensor_base(P.dv, aelem, 4u);
        const TLAYOUT ta = rows_layout(P.nk, P.hkv * D, ab.skip);
        coopMatLoadTensorNV(old, F32(ab.addr).v, 0u, ROWS(ta, ab, j0, BR));
        coopMatPerElementNV(dv, dv, acc_elem, old, vmul);
        coopMatStoreTensorNV(dv, F32(ab.addr).v, 0u, ROWS(ta, ab, j0, BR));
    }
}
