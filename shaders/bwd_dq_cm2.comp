#version 460
// shaders/bwd_dq_cm2.comp - backward dQ on workgroup-scope cooperative matrices
// (GL_NV_cooperative_matrix2) for one K/V block: dQ_i += tau sum_j dS_ij K_j with
// P_ij = exp(tau q_i k_j - L_i) and dS_ij = P_ij (dO_i v_j - D_i); fp16 q/k/v/dO (bf16 ones
// converted by the host, below), fp32 accumulation, every head dim (shaders/cm2.glsl). Same
// contract as bwd_dq_cmq_nv.comp: L and D of each query row at params.lse and params.delta,
// each row's allowed key interval at params.rows, keys [lo, hi) of this dispatch only, the
// fp32 dQ accumulator [B, nq, hq, D] at params.o.
//
// Workgroup (x = Q tile, y = query head, z = batch) owning BR query rows: Q and dO (BR x DP,
// fp16 operands) loaded once by tensor layouts over the strided views; per key tile of BC keys
// (of head g = h / group):
//   K^T and V^T by a transposing tensor load, S = Q K^T and dP = dO V^T (BR x BC, fp32);
//   dS = P (dP - D), P = exp2(S tau log2 e - L log2 e) masked by the row's allowed keys: one
//   per-element function over S with dP's element beside it, each row's L, D and interval
//   read from shared memory;
//   dQ (BR x DP, fp32) += dS K, dS converted to an fp16 operand, K loaded again untransposed.
// At the end the accumulator's tile is loaded, tau dQ added per element and stored, clamped to
// the tensor: each element has one writer (deterministic).
// Precision: dS is rounded to fp16 before dS K (as in FlashAttention): 2^-11 relative per term.
// bf16 inputs: all four views converted by the host into packed fp16, each scaled by a power of
// two (flag bits 6-9, load8.glsl cvt_scales); S is unscaled in qmul, dP and D are taken in
// dO's scaled units, and the scales of dO and K are undone when dQ is added (as
// bwd_dq_cmq_nv.comp).
//
// Shared memory: per row its key interval, L log2 e and D; two ints. runtime/vulkan/vk_caps.c
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

#define SMAT coopmat<float, WG, BR, BC, ACC>
#define OMAT coopmat<float, WG, BR, DP, ACC>

shared ivec2 iv_s[BR]; // each row's allowed keys in this dispatch (empty: not live)
shared vec2 ld_s[BR];  // each row's L log2 e (+inf: no key anywhere, P = 0) and D
shared int kmin_s, kmax_s;

// dS from S (s) and dP (dp): P (dP - D), P masked by the row's allowed keys
float ds_elem(const in uint r, const in uint c, const in float s, const in float dp,
              const in int j0, const in float qmul, const in float pmul)
{
    const int kj = j0 + int(c);
    const ivec2 iv = iv_s[r];
    const vec2 ld = ld_s[r];
    const float p = kj >= iv.x && kj < iv.y ? exp2(s * qmul - ld.x) : 0.0;
    return p * (dp * pmul - ld.y);
}

// the same with the scores soft-capped (common.glsl): S capped in log2 units, dS times the
// cap's derivative
float ds_cap_elem(const in uint r, const in uint c, const in float s, const in float dp,
                  const in int j0, const in float qmul, const in float pmul, const in float cap2)
{
    const int kj = j0 + int(c);
    const ivec2 iv = iv_s[r];
    const vec2 ld = ld_s[r];
    const float t = cap_tanh(s * qmul, 1.0 / cap2);
    const float p = kj >= iv.x && kj < iv.y ? exp2(cap2 * t - ld.x) : 0.0;
    return p * (dp * pmul - ld.y) * (1.0 - t * t);
}

void main()
{
    Params P = Params(pc.params);
    const View qv = P.q, kv = P.k, vv = P.v, dov = P.dout;
    const int tid = int(gl_LocalInvocationID.x);
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR;
    const int g = h / P.group;
    I32x2 rows = I32x2(P.rows);
    // bf16 inputs converted by the host: their scales (1 otherwise)
    const vec4 sc = cvt_scales(P.amax, P.flags);

    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
    }
    barrier();
    for (int r = tid; r < BR; r += NT) {
        const int i = i0 + r;
        const bool live = i < P.nq;
        ivec2 iv = live ? rows.v[i] : ivec2(0, 0);
        iv = ivec2(max(iv.x, P.lo), min(iv.y, P.hi)); // this dispatch's keys
        iv_s[r] = iv;
        const uint li = uint((b * P.hq + h) * P.nq + i);
        const float lse = live ? F32(P.lse).v[li] : NEG_INF;
        ld_s[r] = vec2(lse == NEG_INF ? POS_INF : lse * LOG2E,
                       live ? F32(P.delta).v[li] * sc.w : 0.0); // D in dO's scaled units
        if (iv.x < iv.y) {
            atomicMin(kmin_s, iv.x);
            atomicMax(kmax_s, iv.y);
        }
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s;
    if (kmin >= kmax)
        return; // uniform: no row has a key here

    coopmat<float16_t, WG, BR, DP, gl_MatrixUseA> qa, doa;
    const TBase qb = view_tensor(qv, b, h), dob = view_tensor(dov, b, h);
    coopMatLoadTensorNV(qa, F16(qb.addr).v, 0u, ROWS(rows_layout(P.nq, qv.s1, qb.skip), qb, i0, BR));
    coopMatLoadTensorNV(doa, F16(dob.addr).v, 0u,
                        ROWS(rows_layout(P.nq, dov.s1, dob.skip), dob, i0, BR));
    const TBase kb = view_tensor(kv, b, g), vb = view_tensor(vv, b, g);
    const TLAYOUT tk = rows_layout(P.nk, kv.s1, kb.skip), tv = rows_layout(P.nk, vv.s1, vb.skip);
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);

    // the scales are powers of two, divided one at a time (a product may overflow)
    const float qmul = P.scale * LOG2E / sc.x / sc.y, pmul = 1.0 / sc.z;
    OMAT dq = OMAT(0.0);
    for (int j0 = kmin; j0 < kmax; j0 += BC) {
        coopmat<float16_t, WG, DP, BC, gl_MatrixUseB> kt, vt;
        coopMatLoadTensorNV(kt, F16(kb.addr).v, 0u, ROWS(tk, kb, j0, BC), transpose);
        coopMatLoadTensorNV(vt, F16(vb.addr).v, 0u, ROWS(tv, vb, j0, BC), transpose);
        SMAT s = coopMatMulAdd(qa, kt, SMAT(0.0));
        SMAT dp = coopMatMulAdd(doa, vt, SMAT(0.0));
        if (P.cap > 0.0) // uniform
            coopMatPerElementNV(s, s, ds_cap_elem, dp, j0, qmul, pmul, P.cap * LOG2E);
        else
            coopMatPerElementNV(s, s, ds_elem, dp, j0, qmul, pmul);
        coopmat<float16_t, WG, BR, BC, gl_MatrixUseA> dsa =
            coopmat<float16_t, WG, BR, BC, gl_MatrixUseA>(s);
        coopmat<float16_t, WG, BC, DP, gl_MatrixUseB> km;
        coopMatLoadTensorNV(km, F16(kb.addr).v, 0u, ROWS(tk, kb, j0, BC));
        dq = coopMatMulAdd(dsa, km, dq);
    }

    // dQ accumulator += tau dQ: [B, nq, hq, D] fp32, the tile's rows i0.. of head h
    const float tau = P.scale / sc.w / sc.y; // dS in dO's scaled units, K scaled
    const TBase ab = tensor_base(P.o, uint((b * P.nq * P.hq + h) * D), 4u);
    const TLAYOUT ta = rows_layout(P.nq, P.hq * D, ab.skip);
    OMAT old;
    coopMatLoadTensorNV(old, F32(ab.addr).v, 0u, ROWS(ta, ab, i0, BR));
    coopMatPerElementNV(dq, dq, acc_elem, old, tau);
    coopMatStoreTensorNV(dq, F32(ab.addr).v, 0u, ROWS(ta, ab, i0, BR));
}
