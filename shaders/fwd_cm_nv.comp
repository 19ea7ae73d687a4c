#version 460
// shaders/fwd_cm_nv.comp - forward step on cooperative matrices (GL_NV_cooperative_matrix),
// fp16 q/k/v with fp32 accumulation; the lse merge into the running (O, lse) fused at the end.
//
// Workgroup (x = Q tile, y = query head, z = batch): W = BR / 16 subgroups, each owning 16 query
// rows (T = subgroup size invocations). Q of the tile is staged once in shared memory as fp16;
// K/V tiles of 16 keys stream through shared memory. Per subgroup and key tile:
//   S (16 x 16, fp32) = sum over d-chunks of Q[rows, chunk] x K[keys, chunk]^T  (MMA 16x16x16)
// Two passes over the block's keys (the NV extension gives no per-row access to accumulators,
// so the output is never rescaled): pass 1 computes each row's maximum m and sum l (online, in
// fp32, one invocation per row through shared memory); pass 2 recomputes S, forms
// P = exp2(S - m) in fp16 and accumulates O += P V on cooperative matrices (D/16 fp32
// accumulators per subgroup). O / l is merged into (o_acc, lse_acc) at the end through shared
// memory. Rows with no allowed key stay untouched; fully masked key tiles are skipped.
// Precision: P is rounded to fp16 before P V (as in FlashAttention); with fp16 inputs this adds
// at most 2^-11 relative per term, the size of the fp16 output rounding the harness allows.
//
// Layout of the matrix loads (row-major shared tiles [row][D]):
//   A = Q chunk c:     coopMatLoadNV(a, qsh, row0 * D + 16 c, D, false)
//   B = K chunk c ^T:  coopMatLoadNV(b, ksh, 16 c, D, true)   (column-major view of K rows)
//   B = V chunk c:     coopMatLoadNV(b, vsh, 16 c, D, false)
// This file is laid out so that a GL_KHR_cooperative_matrix twin differs only in the type names
// (coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ...) and load/store calls.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

const int W = BR / 16; // subgroups per workgroup
const int DC = D / 16; // 16-wide chunks of the head dim
const int NT = W * T;  // invocations

#define AMAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CMAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

shared float16_t qsh[BR * D];
shared float16_t ksh[16 * D];
shared float16_t vsh[16 * D];
shared float ssh[W * 256];
shared float16_t psh[W * 256];
shared int kmin_s, kmax_s;

void main()
{
    Params P = Params(pc.params);
    const int tid = int(gl_LocalInvocationID.x);
    const int sg = tid / T, lane = tid % T;
    const int b = int(gl_WorkGroupID.z), h = int(gl_WorkGroupID.y);
    const int i0 = int(gl_WorkGroupID.x) * BR;
    const int g = h / P.group;
    I32x2 rows = I32x2(P.rows);
    // invocation `lane` < 16 of subgroup sg owns row i0 + 16 sg + lane for the softmax statistics
    const bool rowner = lane < 16;
    const int i = i0 + 16 * sg + lane;
    const bool live = rowner && i < P.nq;

    if (tid == 0) {
        kmin_s = P.nk;
        kmax_s = 0;
    }
    barrier();
    ivec2 my = live ? rows.v[i] : ivec2(0, 0);
    if (live && my.x < my.y) {
        atomicMin(kmin_s, my.x);
        atomicMax(kmax_s, my.y);
    }
    for (int x = tid; x < BR * D; x += NT) {
        int r = i0 + x / D, c = x % D;
        qsh[x] = float16_t(r < P.nq ? load_elem(P.q, DTQ, view_index(P.q, b, r, h, c)) : 0.0);
    }
    barrier();
    const int kmin = kmin_s, kmax = kmax_s;
    if (kmin >= kmax)
        return;
    const float qmul = P.scale * LOG2E;
    float m = NEG_INF, l = 0.0;
    CMAT o[DC];
    for (int c = 0; c < DC; c++)
        o[c] = CMAT(0.0);

    for (int pass = 0; pass < 2; pass++) {
        for (int j0 = kmin; j0 < kmax; j0 += 16) {
            barrier();
            for (int x = tid; x < 16 * D; x += NT) {
                int j = j0 + x / D, c = x % D;
                bool in_block = j < kmax;
                ksh[x] = float16_t(in_block ? load_elem(P.k, DTK, view_index(P.k, b, j, g, c)) : 0.0);
                if (pass == 1)
                    vsh[x] =
                        float16_t(in_block ? load_elem(P.v, DTV, view_index(P.v, b, j, g, c)) : 0.0);
            }
            barrier();
            CMAT s = CMAT(0.0);
            for (int c = 0; c < DC; c++) {
                AMAT a, bk;
                coopMatLoadNV(a, qsh, uint(16 * sg * D + 16 * c), uint(D), false);
                coopMatLoadNV(bk, ksh, uint(16 * c), uint(D), true);
                s = coopMatMulAddNV(a, bk, s);
            }
            coopMatStoreNV(s, ssh, uint(256 * sg), 16u, false);
            barrier();
            if (rowner) {
                if (pass == 0) {
                    float mx = NEG_INF;
                    float sv[16];
                    for (int j = 0; j < 16; j++) {
                        int kj = j0 + j;
                        sv[j] = (kj >= my.x && kj < my.y) ? ssh[256 * sg + 16 * lane + j] * qmul
                                                         : NEG_INF;
                        mx = max(mx, sv[j]);
                    }
                    float mnew = max(m, mx);
                    float muse = mnew == NEG_INF ? 0.0 : mnew;
                    float sum = 0.0;
                    for (int j = 0; j < 16; j++)
                        sum += exp2(sv[j] - muse);
                    l = l * exp2(m - muse) + sum;
                    m = mnew;
                } else {
                    float muse = m == NEG_INF ? 0.0 : m;
                    for (int j = 0; j < 16; j++) {
                        int kj = j0 + j;
                        float p = (kj >= my.x && kj < my.y)
                                      ? exp2(ssh[256 * sg + 16 * lane + j] * qmul - muse)
                                      : 0.0;
                        psh[256 * sg + 16 * lane + j] = float16_t(p);
                    }
                }
            }
            if (pass == 1) {
                barrier();
                AMAT pa;
                coopMatLoadNV(pa, psh, uint(256 * sg), 16u, false);
                for (int c = 0; c < DC; c++) {
                    AMAT bv;
                    coopMatLoadNV(bv, vsh, uint(16 * c), uint(D), false);
                    o[c] = coopMatMulAddNV(pa, bv, o[c]);
                }
            }
        }
    }

    // fused merge, one 16-column chunk at a time through shared memory
    F32 lse = F32(P.lse), oa = F32(P.o);
    const bool merge = live && l != 0.0;
    float lo = merge ? lse.v[(b * P.hq + h) * P.nq + i] : 0.0;
    float lr = (m + log2(l)) * LN2, ln = lr, co = 0.0, cn = 1.0 / l;
    if (merge && lo != NEG_INF) {
        ln = max(lo, lr) + log(1.0 + exp(-abs(lo - lr)));
        co = exp(lo - ln);
        cn = exp(lr - ln) / l;
    }
    const uint ob = uint(((b * P.nq + i) * P.hq + h) * D);
    for (int c = 0; c < DC; c++) {
        barrier();
        coopMatStoreNV(o[c], ssh, uint(256 * sg), 16u, false);
        barrier();
        if (merge) {
            for (int j = 0; j < 16; j++) {
                uint x = ob + uint(16 * c + j);
                float ov = ssh[256 * sg + 16 * lane + j];
                oa.v[x] = lo == NEG_INF ? ov * cn : fma(co, oa.v[x], cn * ov);
            }
        }
    }
    if (merge)
        lse.v[(b * P.hq + h) * P.nq + i] = ln;
}
