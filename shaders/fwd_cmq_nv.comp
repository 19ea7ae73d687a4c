#version 460
// shaders/fwd_cmq_nv.comp - forward step on cooperative matrices (GL_NV_cooperative_matrix) with
// the softmax in registers: fp16 q/k/v, fp32 accumulation, one pass of online softmax, the lse
// merge into the running (O, lse) fused at the end. Same contract as fwd_cm_nv.comp.
//
// fwd_cm_nv.comp takes S through shared memory for the softmax, because the extension does not
// say which rows and columns an invocation's accumulator elements are. This kernel uses them in
// place, in the layout of NVIDIA's tensor-core fragments, which the host checks on the device
// before it runs this kernel (shaders/cm_layout_nv.comp, runtime/vulkan/vk_cmq.c; the mapping
// it found: shaders/cmq.glsl). The four invocations of a quad hold rows r and r + 8 between
// them, so row reductions are two shuffles. P goes from the fp32 scores to the fp16 operand
// by a matrix conversion, no memory.
//
// Workgroup (x = Q tile, y = query head, z = batch): W = BR / 16 compute subgroups of 32
// invocations (and LD loading subgroups, below), each owning 16 query rows: Q (16 x DM) in
// registers as DC = DM / 16 operand matrices, O as DC fp32 accumulators (DM: the head dim
// rounded up to 16; the padding columns load as 0 and are never written); an invocation's row
// state (interval, maximum, sum, merge) in arrays over its two rows, r and r + 8. K/V tiles of
// BC keys are staged in shared memory with 16-byte loads (where the views are 16-byte aligned,
// flag bit 3), global -> registers -> shared memory; with
// PREFETCH (constant 13, BURST_VK_CMQ_PREFETCH) the next tile's loads are in flight while the
// current one is computed on, which on the H100 cost more (16 registers, spills) than it hid.
// Per subgroup and key tile, in softmax steps of SMC 16-key chunks (constant 11; 1 by default,
// BURST_VK_CMQ_FWD):
//   S (16 x 16 SMC, fp32) = Q K^T on 16x16x16 MMAs; with PIPE (constant 14, 1 by default,
//   BURST_VK_CMQ_FWD's third field) the next step's S MMAs are issued before this step's
//   softmax, so that the tensor cores have work while the softmax runs (8 SMC more
//   registers);
//   the online-softmax step in registers: scores scaled to log2 units and masked by each row's
//   allowed key interval (skipped when the tile is allowed for every row of the workgroup); a
//   reference maximum m per row moved only when the step's maximum exceeds it by more than 2^8
//   (lazy rescaling, as fwd_cm_nv: P <= 2^8); P = exp2(s - m) in place; each invocation's l
//   sums its own P (the quad's four shares are added once, at the end);
//   where some row's m moved, O's elements of that row scale by alpha (in registers);
//   O += P V on MMAs (P converted to fp16), into O's accumulators (DIRECT, constant 12: 1 by
//   default) or into a fresh accumulator per 16 columns added to O.
// Only key tiles in the union of the tile's allowed key intervals are visited; rows with no
// allowed key leave (O, lse) bit-for-bit unchanged.
// Precision: as fwd_cm_nv (P rounded to fp16 before P V; l sums the fp32 P, in four shares).
// bf16 inputs (any of q, k, v; DTQ, DTK, DTV = 2): each view is scaled into fp16's range by a
// power of two from its largest magnitude (host: elem_amax dispatches before this one, their
// result at params.amax; shaders/convert.glsl bf16_scale), as the tiles load (cm_nv.glsl
// load8s) or, for K and V, once by the host's elem_cvt dispatches into packed fp16 (flag bits
// 6, 7; measured on the H100: see docs/BENCHMARKS.md): exact for every value of at
// least 2^-28 times the view's maximum (bf16's 8 significant bits fit fp16's 11), the rest
// within 2^-39 times the maximum; the scales are undone in qmul and at the merge.
// fp32 inputs (DTQ = 0, all three; flag bits 6-8): the host's elem_cvt splits each scaled
// element into two fp16 halves, hi + lo (shaders/cm_nv.glsl SPL), and each product takes three
// MMAs, hi hi, lo hi and hi lo (P too is split in registers: cmq.glsl CM_TO_A2, after the
// exact maximum (no lazy slack: P <= 1) and a scale of 2^14 keep its halves in fp16's normal
// range), so that a product term errs by about 2^-21 relative instead of fp16's 2^-11; the
// K/V tiles and the Q registers hold twice the halves, and P V, small terms first, always goes
// into a fresh accumulator added to O in fp32 (DIRECT is ignored): the tensor cores' own adds
// truncate, so that a chain of them as long as the key count would drift. Measured error: as
// PyTorch's fp32 kernels (docs/BENCHMARKS.md).
//
// Loading subgroups (LD, constant 15; the tile's fourth field, BURST_VK_CMQ_TILE=br,bc,ld): with
// LD = 0 every invocation loads a share of each K/V tile (global -> registers -> shared memory)
// between two workgroup barriers, and the global loads' latency is exposed at every tile (the
// kernel without them ran 20 % faster on the H100). With LD > 0 the workgroup has LD more
// subgroups that only load: tile kt goes into buffer kt % 2, its global loads issued while
// the W compute subgroups work on tile kt - 1; the two sides wait on counters in shared memory
// (full_s, empty_s) instead of barriers, so that no compute subgroup waits for global memory
// once the pipeline runs. A loader's registers (the whole of its share of a tile in flight)
// cost nothing more: the driver allocates every invocation the compute subgroups' count. This
// relies on the subgroups of a workgroup making progress independently of each other (a
// spinning subgroup does not stop the one it waits for: true of NVIDIA's GPUs, the only ones
// these kernels run on) and on memoryBarrierShared ordering the buffer's stores and loads
// around the counters' atomics.
//
// Shared memory (one uvec4 array sh): K tile [BC][DM + 8] and V tile [BC][DM + 8] fp16, twice
// with LD (two buffers); the Q tile passes through it, QP rows at a time, before the loop.
// Rows of SPL DM + 8 halves with split inputs. runtime/vulkan/vk_caps.c (burst_vk_cmq_shared)
// mirrors the size.
#extension GL_GOOGLE_include_directive : require
#ifndef BURST_NO_UNROLL
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
#include "common.glsl"
#include "cm_nv.glsl"
#include "cmq.glsl"

layout(constant_id = 11) const int SMC = 1;    // 16-key chunks per softmax step (divides BC / 16)
layout(constant_id = 12) const int DIRECT = 1; // 1: P V into O's accumulators themselves
layout(constant_id = 13) const int PREFETCH = 0; // 1: next tile's loads in flight during this one
layout(constant_id = 14) const int PIPE = 1; // 1: a step's S MMAs issued before the softmax of
                                             // the step before
layout(constant_id = 15) const int LD = 0; // subgroups that only load K/V tiles, into two
                                           // buffers (0: every subgroup loads, one buffer)

const int NB = BC / 16;          // 16-key chunks of a key tile
const int SLOT = 2 * BC * RS;    // a K/V tile pair
const int KVN = (LD > 0 ? 2 : 1) * SLOT; // the K/V tile buffers
const int QP = (KVN / RS) / 16 * 16 < BR ? (KVN / RS) / 16 * 16 : BR; // Q rows per pass
const int L8 = BC * D8S;        // 16-byte pieces of a K (or V) tile
const int PT = LD > 0 ? LD * T : NT; // invocations that load K/V tiles
const int LPT = (L8 + PT - 1) / PT; // of them per loading invocation
// the lazy maximum's slack (P <= 2^8); with split inputs none, so that P <= 1 can take PSPLIT
const float RESCALE_LOG2 = SPL > 1 ? 0.0 : 8.0;
// split inputs: P's scale before its split into fp16 halves (undone as P V is added to O), so
// that both halves stay in fp16's normal range down to P = 2^-28 (hi) and 2^-17 (lo)
const float PSPLIT = 16384.0;
const int NQ = 2;               // rows per invocation: r and r + 8 of the subgroup's 16

shared uvec4 sh[KVN];
shared int kmin_s, kmax_s, kin_lo_s, kin_hi_s;
// with LD: per buffer, the loading subgroups' stores of a tile (LD per tile) and the compute
// subgroups' releases (W per tile), counted since the start
shared uint full_s[2], empty_s[2];

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
    // this invocation's rows: q = 0 and 1 are rows lane / 4 and lane / 4 + 8 of the subgroup's
    // 16 (element e of a matrix: row q = row_b(e))
    int ir[NQ];
    bool live[NQ]; // (not a loader)
    UNROLL for (int q = 0; q < NQ; q++) {
        ir[q] = i0 + 16 * sg + lane / 4 + 8 * q;
        live[q] = sg < W && ir[q] < P.nq;
    }

    if (tid == 0) {
        full_s[0] = full_s[1] = empty_s[0] = empty_s[1] = 0u;
        kmin_s = P.nk;
        kmax_s = 0;
        kin_lo_s = 0;
        kin_hi_s = P.nk;
    }
    barrier();
    ivec2 my[NQ];
    UNROLL for (int q = 0; q < NQ; q++) {
        ivec2 iv = live[q] ? rows.v[ir[q]] : ivec2(0, 0);
        my[q] = ivec2(max(iv.x, P.lo), min(iv.y, P.hi)); // this dispatch's keys
    }
    if ((lane & 3) == 0) {
        UNROLL for (int q = 0; q < NQ; q++) {
            if (my[q].x < my[q].y) {
                atomicMin(kmin_s, my[q].x);
                atomicMax(kmax_s, my[q].y);
            }
            if (live[q]) { // keys allowed for every live row: tiles inside need no mask
                atomicMax(kin_lo_s, my[q].x);
                atomicMin(kin_hi_s, my[q].y);
            }
        }
    }
    // the running lse of the rows, read here: the merge at the end writes them (one invocation
    // of the quad), after every barrier of the loop
    F32 lse = F32(P.lse);
    const uint li0 = uint((b * P.hq + h) * P.nq);
    float lo[NQ];
    UNROLL for (int q = 0; q < NQ; q++)
        lo[q] = live[q] ? lse.v[li0 + uint(ir[q])] : 0.0;
    barrier();
    const int kmin = kmin_s, kmax = kmax_s, kin_lo = kin_lo_s, kin_hi = kin_hi_s;
    if (kmin >= kmax)
        return;

    // bf16 and fp32 inputs: each view's power-of-two scale into fp16's range, from the largest
    // magnitudes the host's elem_amax dispatches found: applied here as bf16 tiles load
    // (load8s), or already by the host's elem_cvt dispatches (Q: flag bit 8, K: bit 6, V: bit
    // 7; bf16 views are then packed fp16 and DTK / DTV say fp16, fp32 ones packed halves that
    // load8s reads as fp16 while the dtype, 0, keys the split); undone in qmul (Q, K) and at
    // the merge (V)
    float qsc = 1.0, ksc = 1.0, vsc = 1.0;
    if (DTQ == 2 || DTK == 2 || DTV == 2 || (P.flags & 448) != 0) {
        U32 am = U32(P.amax);
        qsc = DTQ == 2 || (P.flags & 256) != 0 ? bf16_scale(am.v[0]) : 1.0;
        ksc = DTK == 2 || (P.flags & 64) != 0 ? bf16_scale(am.v[1]) : 1.0;
        vsc = DTV == 2 || (P.flags & 128) != 0 ? bf16_scale(am.v[2]) : 1.0;
    }

    // Q (16 x D per subgroup; with split inputs its lo halves too) into registers, through
    // shared memory QP rows at a time
    AMAT qa[DC], ql[SPL > 1 ? DC : 1];
    for (int p0 = 0; p0 < BR; p0 += QP) {
        if (p0 > 0)
            barrier(); // the previous pass is read
        for (int x = tid; x < QP * D8S && tid < NT; x += NT) {
            int row = x / D8S, c8 = x % D8S;
            bool in_q = p0 + row < BR && i0 + p0 + row < P.nq && piece_in(c8);
            sh[row * RS + c8] = load8s(qv, DTQ, vec,
                                       view_index(qv, b, i0 + p0 + row, h, piece_col(c8)), in_q,
                                       qsc);
        }
        barrier();
        if (16 * sg >= p0 && 16 * sg < p0 + QP) { // uniform in the subgroup
            UNROLL for (int c = 0; c < DC; c++) {
                CM_LOAD(qa[c], sh, uint((16 * sg - p0) * RS + 2 * c), uint(RS), false);
                if (SPL > 1)
                    CM_LOAD(ql[SPL > 1 ? c : 0], sh, uint((16 * sg - p0) * RS + D8 + 2 * c),
                            uint(RS), false);
            }
        }
    }

    // the scales are powers of two (exact), divided one at a time (their product may overflow)
    const float qmul = P.scale * LOG2E / qsc / ksc;
    const bool capped = P.cap > 0.0; // soft-capping (common.glsl)
    const float cap2 = P.cap * LOG2E, rcap2 = capped ? 1.0 / cap2 : 0.0;
    const float smul = capped ? 1.0 : qmul; // capped scores are in log2 units already
    float m[NQ], l[NQ];
    UNROLL for (int q = 0; q < NQ; q++) {
        m[q] = NEG_INF;
        l[q] = 0.0;
    }
    CMAT o[DC];
    UNROLL for (int c = 0; c < DC; c++)
        o[c] = CMAT(0.0);
    // K/V tiles go global -> registers -> shared memory, LPT 16-byte pieces per invocation and
    // matrix (piece x = tid + NT it: row x / D8, column 8 (x % D8)); the loads of tile
    // j0 + BC are issued before the MMAs of tile j0, so that their latency hides behind them
    const uint kbase = view_index(kv, b, 0, g, 0), vbase = view_index(vv, b, 0, g, 0);
    uvec4 kreg[LPT], vreg[LPT];
    const int ptid = LD > 0 ? tid - NT : tid; // among the loading invocations
#define FETCH_KV(j0)                                                                              \
    UNROLL for (int it = 0; it < LPT; it++) {                                                     \
        int x = ptid + PT * it, row = x / D8S, c8 = x % D8S;                                      \
        bool in_block = x < L8 && (j0) + row < kmax && piece_in(c8);                              \
        uint kx = kbase + uint((j0) + row) * uint(kv.s1) + uint(piece_col(c8));                   \
        uint vx = vbase + uint((j0) + row) * uint(vv.s1) + uint(piece_col(c8));                   \
        kreg[it] = load8s(kv, DTK, vec, kx, in_block, ksc);                                       \
        vreg[it] = load8s(vv, DTV, vec, vx, in_block, vsc);                                       \
    }
    // the loaded pieces into the K/V buffer at sb (with LD = 0: ptid = tid, PT = NT, sb = 0)
#define STORE_KV(sb)                                                                              \
    UNROLL for (int it = 0; it < LPT; it++) {                                                     \
        int x = ptid + PT * it, row = x / D8S, c8 = x % D8S;                                      \
        if (x < L8) {                                                                             \
            sh[(sb) + row * RS + c8] = kreg[it];                                                  \
            sh[(sb) + (BC + row) * RS + c8] = vreg[it];                                           \
        }                                                                                         \
    }
    if (LD > 0)
        barrier(); // Q's last pass is read: the loading subgroups may store K/V tiles
    if (LD > 0 && sg >= W) {
        // a loading subgroup: tile kt into buffer kt % 2 once every compute subgroup released
        // the tile before it there (kt - 2); its global loads go out before that wait, so that
        // their latency hides behind the compute subgroups' work on tile kt - 1. Every lane
        // polls (one lane polling and a shuffle measured slower on the H100).
        for (int kt = 0, j0 = kmin; j0 < kmax; kt++, j0 += BC) {
            FETCH_KV(j0)
            const int sb = (kt & 1) * SLOT;
            const uint need = uint(kt / 2) * uint(W);
            while (atomicAdd(empty_s[kt & 1], 0u) < need) {
            }
            memoryBarrierShared();
            STORE_KV(sb)
            memoryBarrierShared();
            subgroupBarrier();
            if (lane == 0)
                atomicAdd(full_s[kt & 1], 1u);
        }
        return; // no barrier follows
    }
    if (PREFETCH != 0 && LD == 0)
        FETCH_KV(kmin)
    for (int kt = 0, j0 = kmin; j0 < kmax; kt++, j0 += BC) {
        const int sb = LD > 0 ? (kt & 1) * SLOT : 0;
        if (LD > 0) { // wait for the loading subgroups' stores of tile kt
            const uint need = uint(kt / 2 + 1) * uint(LD);
            while (atomicAdd(full_s[kt & 1], 0u) < need) {
            }
            memoryBarrierShared();
        } else {
            if (PREFETCH == 0)
                FETCH_KV(j0)
            barrier(); // the previous tile (or Q's last pass) is no longer read
            STORE_KV(0)
            barrier();
            if (PREFETCH != 0 && j0 + BC < kmax) {
                FETCH_KV(j0 + BC)
            }
        }

        // the tile in softmax steps of SMC 16-key chunks (SMC = NB: one step a tile); S = Q K^T
        // of a step: its chunks' MMAs interleaved (independent chains); with PIPE the next
        // step's are issued before this step's softmax, so that the tensor cores work while
        // it runs (SMC more accumulators held)
        const bool full = j0 >= kin_lo && j0 + BC <= kin_hi; // uniform
#define QK_STEP(sv, m0)                                                                           \
    UNROLL for (int n = 0; n < SMC; n++)                                                          \
        sv[n] = CMAT(0.0);                                                                        \
    UNROLL for (int c = 0; c < DC; c++) {                                                         \
        UNROLL for (int n = 0; n < SMC; n++) {                                                    \
            BMAT bk;                                                                              \
            const uint kx_ = uint(sb + 16 * ((m0) + n) * RS + 2 * c);                             \
            CM_LOAD(bk, sh, kx_, uint(RS), true);                                                 \
            sv[n] = CM_MULADD(qa[c], bk, sv[n]);                                                  \
            if (SPL > 1) { /* + Q_hi K_lo + Q_lo K_hi */                                          \
                sv[n] = CM_MULADD(ql[SPL > 1 ? c : 0], bk, sv[n]);                                \
                CM_LOAD(bk, sh, kx_ + uint(D8), uint(RS), true);                                  \
                sv[n] = CM_MULADD(qa[c], bk, sv[n]);                                              \
            }                                                                                     \
        }                                                                                         \
    }
        CMAT s[SMC];
        QK_STEP(s, 0)
        UNROLL for (int n0 = 0; n0 < NB; n0 += SMC) {
            CMAT sn[SMC];
            if (PIPE != 0 && n0 + SMC < NB) {
                QK_STEP(sn, n0 + SMC)
            }

            // online softmax in registers: (soft-cap,) scale, mask, the rows' maxima across
            // the quad
            if (capped) // uniform
                UNROLL for (int n = 0; n < SMC; n++)
                    UNROLL for (int e = 0; e < NE; e++)
                        s[n][e] = cap2 * cap_tanh(s[n][e] * qmul, rcap2);
            float mx[NQ];
            UNROLL for (int q = 0; q < NQ; q++)
                mx[q] = NEG_INF;
            UNROLL for (int n = 0; n < SMC; n++) {
                UNROLL for (int e = 0; e < NE; e++) {
                    const int q = row_b(e) ? 1 : 0;
                    int kj = j0 + 16 * (n0 + n) + col_of(e, lane);
                    float x = full || (kj >= my[q].x && kj < my[q].y) ? s[n][e] * smul : NEG_INF;
                    s[n][e] = x;
                    mx[q] = max(mx[q], x);
                }
            }
            float mu[NQ], al[NQ];
            bool same = true;
            UNROLL for (int q = 0; q < NQ; q++) {
                mx[q] = max(mx[q], subgroupShuffleXor(mx[q], 1u));
                mx[q] = max(mx[q], subgroupShuffleXor(mx[q], 2u));
                // m = -inf: any finite max moves it
                const float mn = mx[q] > m[q] + RESCALE_LOG2 ? mx[q] : m[q];
                mu[q] = mn == NEG_INF ? 0.0 : mn; // fully masked so far: P stays 0
                al[q] = mn == m[q] ? 1.0 : exp2(m[q] - mu[q]);
                m[q] = mn;
                same = same && al[q] == 1.0;
            }
            float sm[NQ];
            UNROLL for (int q = 0; q < NQ; q++)
                sm[q] = 0.0;
            UNROLL for (int n = 0; n < SMC; n++) {
                UNROLL for (int e = 0; e < NE; e++) {
                    const int q = row_b(e) ? 1 : 0;
                    float p = exp2(s[n][e] - mu[q]); // masked: exp2(-inf) = 0
                    s[n][e] = p;
                    sm[q] += p;
                }
            }
            // l: this invocation's share of the row sums (alpha is the quad's), summed over
            // the quad at the end
            UNROLL for (int q = 0; q < NQ; q++)
                l[q] = l[q] * al[q] + sm[q];
            if (!subgroupAll(same)) { // rare with the lazy maximum (split inputs: not lazy)
                UNROLL for (int c = 0; c < DC; c++)
                    UNROLL for (int e = 0; e < NE; e++)
                        o[c][e] *= al[row_b(e) ? 1 : 0];
            }

            // O += P V: per 16-column chunk of O, into O itself (DIRECT) or on a fresh
            // accumulator added to O. Split: P_lo V_hi + P_hi V_lo + P_hi V_hi, the small terms
            // first, always on a fresh accumulator (the tensor cores' adds truncate, and a chain
            // of them as long as the key count would drift by its length in units of fp32's
            // last place; the fp32 add into O rounds to nearest)
            const int direct = DIRECT != 0 && SPL == 1 ? 1 : 0;
            AMAT pa[SMC], pl[SPL > 1 ? SMC : 1];
            UNROLL for (int n = 0; n < SMC; n++) {
                CMAT r_;
                if (SPL > 1)
                    UNROLL for (int e = 0; e < NE; e++)
                        s[n][e] *= PSPLIT;
                CM_TO_A2(pa[n], pl[SPL > 1 ? n : 0], s[n], r_);
            }
            UNROLL for (int c = 0; c < DC; c++) {
                CMAT t = direct != 0 ? o[c] : CMAT(0.0);
                UNROLL for (int n = 0; n < SMC; n++) {
                    BMAT bv;
                    const uint vx_ = uint(sb + (BC + 16 * (n0 + n)) * RS + 2 * c);
                    CM_LOAD(bv, sh, vx_, uint(RS), false);
                    if (SPL > 1) {
                        BMAT bl;
                        CM_LOAD(bl, sh, vx_ + uint(D8), uint(RS), false);
                        t = CM_MULADD(pl[SPL > 1 ? n : 0], bv, t);
                        t = CM_MULADD(pa[n], bl, t);
                    }
                    t = CM_MULADD(pa[n], bv, t);
                }
                o[c] = direct != 0 ? t : SPL > 1 ? o[c] + t * (1.0 / PSPLIT) : o[c] + t;
            }
            if (n0 + SMC < NB) {
                if (PIPE != 0) {
                    UNROLL for (int n = 0; n < SMC; n++)
                        s[n] = sn[n];
                } else {
                    QK_STEP(s, n0 + SMC)
                }
            }
        }
        if (LD > 0) { // this subgroup no longer reads the buffer
            memoryBarrierShared();
            subgroupBarrier();
            if (lane == 0)
                atomicAdd(empty_s[kt & 1], 1u);
        }
    }

    // fused merge of each row, straight from the accumulators:
    // L' = max(L, Lr) + log(1 + exp(-|L - Lr|)), O' = e^(L-L') O + e^(Lr-L') Or
    F32 oa = F32(P.o);
    bool merge[NQ];
    float ln[NQ], co[NQ], cn[NQ];
    UNROLL for (int q = 0; q < NQ; q++) {
        l[q] += subgroupShuffleXor(l[q], 1u);
        l[q] += subgroupShuffleXor(l[q], 2u);
        merge[q] = live[q] && l[q] != 0.0;
        ln[q] = (m[q] + log2(l[q])) * LN2;
        co[q] = 0.0;
        cn[q] = 1.0 / l[q];
        if (merge[q] && lo[q] != NEG_INF) {
            float lr = ln[q];
            ln[q] = max(lo[q], lr) + log(1.0 + exp(-abs(lo[q] - lr)));
            co[q] = exp(lo[q] - ln[q]);
            cn[q] = exp(lr - ln[q]) / l[q];
        }
    }
    // O holds P (V vsc): its weighted mean (times cn) is within V's scaled range, and only then
    // is the scale undone, so nothing overflows or goes subnormal that the result would not
    const float vinv = 1.0 / vsc;
    UNROLL for (int c = 0; c < DC; c++) {
        UNROLL for (int e = 0; e < NE; e++) {
            const int q = row_b(e) ? 1 : 0;
            int col = 16 * c + col_of(e, lane);
            if (merge[q] && col < D) { // (DM > D: padding columns)
                uint x = uint((b * P.nq + ir[q]) * P.hq + h) * uint(D) + uint(col);
                float ov = o[c][e] * cn[q] * vinv;
                oa.v[x] = lo[q] == NEG_INF ? ov : fma(co[q], oa.v[x], ov);
            }
        }
    }
    if ((lane & 3) == 0) {
        UNROLL for (int q = 0; q < NQ; q++)
            if (merge[q])
                lse.v[li0 + uint(ir[q])] = ln[q];
    }
}
