/*
 * cuda/burst_cuda_mma.cuh - tensor-core building blocks shared by the forward and backward
 * kernels (sm_80+): cp.async 16-byte copies, ldmatrix (.trans), mma.sync m16n8k16 with fp32
 * accumulators for fp16 and bf16, ex2.approx, and the XOR swizzle of [rows][D] tiles of 16-bit
 * elements (16-byte chunk c of row r is stored at chunk c ^ (r & 7), so that the 8 row
 * addresses of one ldmatrix fall in distinct banks).
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16): A (16x16, row) a0..a3 = rows {g, g+8} x cols
 * {2t, 2t+1} and {2t+8, 2t+9}; B (16x8, col) b0, b1 = rows {2t, 2t+1} and {2t+8, 2t+9} x col g;
 * C (16x8) c0, c1 = row g, cols 2t, 2t+1; c2, c3 = row g + 8 (g = lane / 4, t = lane % 4). So two
 * adjacent C tiles of a product are exactly one A fragment of the next product (P, dS).
 */
#ifndef BURST_CUDA_MMA_CUH
#define BURST_CUDA_MMA_CUH

#include "burst_cuda_simt.cuh"

/* ---- PTX helpers ----------------------------------------------------------------------------- */

__device__ __forceinline__ unsigned burst_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* 16-byte async copy global -> shared; src_bytes = 0 writes zeros (rows past the end). */
__device__ __forceinline__ void burst_cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(burst_smem_addr(dst)),
                 "l"(src), "r"(src_bytes));
}
/* The same with an L2 cache policy (burst_l2_evict_first): for data read once, so that it
 * leaves L2 before what the kernel writes and reads back. */
__device__ __forceinline__ void burst_cp16_hint(void *dst, const void *src, int src_bytes,
                                                uint64_t pol)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(
                     burst_smem_addr(dst)),
                 "l"(src), "r"(src_bytes), "l"(pol));
}
/* An L2 policy that evicts the lines it covers first (sm_80 and later). */
__device__ __forceinline__ uint64_t burst_l2_evict_first()
{
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}
__device__ __forceinline__ void burst_cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void burst_cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ldmatrix x4 (.trans) at shared-memory byte address a (this lane's row) */
__device__ __forceinline__ void burst_ldm_x4(unsigned *r, unsigned a)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void burst_ldm_x4_t(unsigned *r, unsigned a)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

template <typename T> struct burst_mma;
template <> struct burst_mma<__half> {
    static __device__ __forceinline__ void run(float *c, const unsigned *a, const unsigned *b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    static __device__ __forceinline__ unsigned pack(float x, float y)
    {
        __half2 h = __floats2half2_rn(x, y);
        return *(unsigned *)&h;
    }
};
template <> struct burst_mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float *c, const unsigned *a, const unsigned *b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    static __device__ __forceinline__ unsigned pack(float x, float y)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        return *(unsigned *)&h;
    }
};

__device__ __forceinline__ float burst_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The online softmax's running maximum m of a row (log2 units) against a key tile's maximum top.
 * m moves only when top exceeds it by more than LAG (log2 units), so m is a stale lower estimate,
 * at most LAG below the largest score the row has seen, and P = exp2(s - m) <= 2^LAG (and l >=
 * 1): with the default of 8 every 16-bit P and fp32 accumulator keeps its precision, and O's
 * rescaling is mostly skipped once a row's maximum has settled (O / l and m + log2 l do not
 * depend on m, up to rounding). muse: the maximum to subtract (0 for a row that has seen no key
 * yet); alpha: the factor for the running O and l, exactly 1 where m did not move. */
#define BURST_MAX_LAG 8
template <int LAG = BURST_MAX_LAG>
__device__ __forceinline__ void burst_max_lag(float &m, float top, float *muse, float *alpha)
{
    const bool moves = top > m + (float)LAG;
    const float mnew = moves ? top : m;
    *muse = mnew == -CUDART_INF_F ? 0.0f : mnew;
    *alpha = moves ? burst_ex2(m - *muse) : 1.0f;
    m = mnew;
}

/* Whether any of this warp's R rows per lane has alpha != 1 (burst_max_lag): only then is O
 * rescaled. */
template <int R> __device__ __forceinline__ bool burst_any_moved(const float *alpha)
{
    bool moved = false;
#pragma unroll
    for (int r = 0; r < R; r++)
        moved |= alpha[r] != 1.0f;
    return __any_sync(0xffffffffu, moved);
}

#define MMA_BR BURST_CUDA_MMA_BR

/* Elements per row of a [rows][D] tile of head-dim class D in shared memory: D rounded up to a
 * multiple of 64, so that the XOR swizzle of its 16-byte chunks stays inside the row (the columns
 * past D are never loaded nor read). */
template <int D> __host__ __device__ constexpr int burst_tile_w()
{
    return (D + 63) / 64 * 64;
}

/* Element offset of (row, col) in a swizzled [rows][D] tile of 16-bit elements. */
template <int D> __device__ __forceinline__ int burst_swz(int row, int col)
{
    return row * burst_tile_w<D>() + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

/*
 * The address of one lane's ldmatrix row in a swizzled tile, in two parts: row rl + rc, column
 * cl + cc, where rl and cl (0 or 8) are the lane's and rc (a multiple of 8) and cc (a multiple of
 * 16) are the same for the whole warp. The chunk index is then (cl / 8 ^ (rl & 7)) ^ (cc / 8 & 7)
 * plus cc / 8 & ~7: cl / 8 and the even cc / 8 share no bit, and rc leaves row & 7 alone. So the
 * lane's byte offset (burst_swz_lane) is computed once per kernel, and each access adds an XOR
 * by a constant of bits 4-6 and constants (burst_swz_at) instead of redoing the swizzle.
 */
template <int D> __device__ __forceinline__ unsigned burst_swz_lane(int rl, int cl)
{
    return 2u * (unsigned)burst_swz<D>(rl, cl);
}
/* Shared-memory byte address of (rl + rc, cl + cc) of the tile at t, from lane = burst_swz_lane */
template <int D>
__device__ __forceinline__ unsigned burst_swz_at(const void *t, unsigned lane, int rc, int cc)
{
    return burst_smem_addr(t) + (lane ^ (unsigned)((cc & 0x38) << 1)) +
           2u * (unsigned)(rc * burst_tile_w<D>() + (cc & ~0x3f));
}

/* The fragments of one k16 step of an m16 x n16 product, the same for every class of an element
 * type (so a kernel may load an operand from a tile of one class and multiply it with traits of
 * another): here fp16 / bf16, four 32-bit registers each; fp32's are in burst_cuda_tf32.cuh. */
template <typename T> struct burst_tc_frag {
    struct A {
        unsigned r[4];
    };
    struct B {
        unsigned r[4];
    };
};

/*
 * Operand traits of the tensor-core kernels (burst_cuda_fwd.cu, burst_cuda_bwd.cu) for element
 * type T and head-dim class D: the shared-memory tile layout, the fragments of one k16 step of an
 * m16 x n16 product and the product itself. Every product of those kernels takes one of two forms:
 *   - C += A B^T with A and B both [rows][d] tiles (S = Q K^T, dP = dO V^T, S^T = K Q^T, ...):
 *     lda (16 rows of A) and ldb (16 rows of B: two n8 tiles), k = the head dim;
 *   - C += A B with A the probabilities or dS in registers (two adjacent C tiles, cta), or
 *     stored by st2 in a tile of the class of the k extent (ldac; transposed: ldact), and B a
 *     [rows][d] tile read across its rows (ldbt), k = the tile's row.
 * This one is fp16 / bf16: swizzled tiles, ldmatrix, one mma.sync m16n8k16 per n8 tile; the fp32
 * traits (3xTF32) are in burst_cuda_tf32.cuh.
 */
template <typename T, int D> struct burst_tc {
    using E = T;                                /* element of the shared-memory tiles */
    static constexpr int W = burst_tile_w<D>(); /* elements per tile row */
    static constexpr int CH = 8;                /* elements per 16-byte copy */
    /* tiles: forward query rows per warp (m16 tiles), key rows and warps per block; backward
     * streamed rows and dK/dV column blocks (burst_cuda.h) */
    static constexpr int FWD_MR = BURST_CUDA_MMA_FWD_BR(D) / 64, FWD_BC = BURST_CUDA_MMA_FWD_BC(D);
    static constexpr int FWD_NW = 4;
    static constexpr int BWD_ROWS = BURST_CUDA_MMA_BWD_ROWS(D);
    static constexpr int DKDV_SPLIT = BURST_CUDA_MMA_DKDV_SPLIT(D);
    /* split accumulation (burst_cuda_tf32.cuh): none for 16-bit operands */
    static constexpr bool FRESH = false, SPLIT_S = false;
    using A = typename burst_tc_frag<T>::A;
    using B = typename burst_tc_frag<T>::B;
    static __device__ __forceinline__ int off(int row, int col)
    {
        return burst_swz<D>(row, col);
    }
    /* (row, col) and (row, col + 1) <- x, y rounded to T (col even) */
    static __device__ __forceinline__ void st2(E *t, int row, int col, float x, float y)
    {
        *(unsigned *)(t + off(row, col)) = burst_mma<T>::pack(x, y);
    }
    /* rows [row0, row0 + 16) x columns [k0, k0 + 16) as the A operand (row0, k0: multiples
     * of 16, as for ldb and ldbt) */
    static __device__ __forceinline__ void lda(A &a, const E *t, int row0, int k0, int lane)
    {
        const unsigned l = burst_swz_lane<D>(lane & 15, (lane >> 4) * 8);
        burst_ldm_x4(a.r, burst_swz_at<D>(t, l, row0, k0));
    }
    /* the A operand of C += A B from a tile of stored C values (P^T, dS^T), in the order of k
     * that cta gives and ldbt expects: here lda's */
    static __device__ __forceinline__ void ldac(A &a, const E *t, int row0, int k0, int lane)
    {
        lda(a, t, row0, k0, lane);
    }
    /* ... and from rows [k0, k0 + 16) x columns [m0, m0 + 16) transposed (A[i][k] =
     * t[k0 + k][m0 + i]) */
    static __device__ __forceinline__ void ldact(A &a, const E *t, int k0, int m0, int lane)
    {
        const unsigned l =
            burst_swz_lane<D>((lane & 7) + ((lane >> 4) & 1) * 8, ((lane >> 3) & 1) * 8);
        burst_ldm_x4_t(a.r, burst_swz_at<D>(t, l, k0, m0));
    }
    /* rows [n0, n0 + 16) x columns [k0, k0 + 16) as the B operand of A B^T */
    static __device__ __forceinline__ void ldb(B &b, const E *t, int n0, int k0, int lane)
    {
        const unsigned l = burst_swz_lane<D>((lane >> 4) * 8 + (lane & 7), ((lane >> 3) & 1) * 8);
        burst_ldm_x4(b.r, burst_swz_at<D>(t, l, n0, k0));
    }
    /* rows [k0, k0 + 16) x columns [n0, n0 + 16) as the B operand of A B */
    static __device__ __forceinline__ void ldbt(B &b, const E *t, int k0, int n0, int lane)
    {
        const unsigned l = burst_swz_lane<D>((lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8);
        burst_ldm_x4_t(b.r, burst_swz_at<D>(t, l, k0, n0));
    }
    /* two adjacent C tiles (columns 16 kk .. 16 kk + 15) as the A operand, rounded to T */
    static __device__ __forceinline__ void cta(A &a, const float *c0, const float *c1)
    {
        a.r[0] = burst_mma<T>::pack(c0[0], c0[1]);
        a.r[1] = burst_mma<T>::pack(c0[2], c0[3]);
        a.r[2] = burst_mma<T>::pack(c1[0], c1[1]);
        a.r[3] = burst_mma<T>::pack(c1[2], c1[3]);
    }
    /* c (one m16 x n8 C tile) += a times n8 tile n (0 or 1) of b */
    static __device__ __forceinline__ void mma(float *c, const A &a, const B &b, int n)
    {
        burst_mma<T>::run(c, a.r, b.r + 2 * n);
    }
    /* the same, where fp32 operands keep their small terms apart (in cs); here all go to c */
    static __device__ __forceinline__ void mma2(float *c, float *cs, const A &a, const B &b, int n)
    {
        burst_mma<T>::run(c, a.r, b.r + 2 * n);
    }
};

/* For each of NM row tiles m: acc(m)[2 n2 + h] (h = 0, 1; n2 < NN) += sum over kk < NK of
 * a(kk, m) times the B operand of rows [16 kk, 16 kk + 16) x columns [c0 + 16 n2, + 16) of tile t
 * (C += A B, ldbt; each B fragment loaded once for the NM row tiles), each pair of n8 column
 * tiles summed over every kk in fresh zeroed accumulators and added to acc in ordinary fp32: the
 * form of TC::FRESH (burst_cuda_tf32.cuh), where a long chain of accumulation in the matrix unit,
 * which truncates, would drift. a(kk, m) returns an A fragment, acc(m) a float[2 NN][4]. */
template <typename TC, int NK, int NN, int NM, typename FA, typename FC>
__device__ __forceinline__ void burst_tc_acc_fresh_by(FA &&a, FC &&acc, const typename TC::E *t,
                                                      int c0, int lane)
{
#pragma unroll
    for (int n2 = 0; n2 < NN; n2++) {
        float f[NM][2][4] = {};
#pragma unroll
        for (int kk = 0; kk < NK; kk++) {
            typename TC::B b;
            TC::ldbt(b, t, kk * 16, c0 + n2 * 16, lane);
#pragma unroll
            for (int m = 0; m < NM; m++) {
                TC::mma(f[m][0], a(kk, m), b, 0);
                TC::mma(f[m][1], a(kk, m), b, 1);
            }
        }
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                acc(m)[2 * n2][e] += f[m][0][e];
                acc(m)[2 * n2 + 1][e] += f[m][1][e];
            }
    }
}

/* The same for one row tile: A fragments a[kk], accumulators acc. */
template <typename TC, int NK, int NN>
__device__ __forceinline__ void burst_tc_acc_fresh(float (&acc)[2 * NN][4],
                                                   const typename TC::A (&a)[NK],
                                                   const typename TC::E *t, int c0, int lane)
{
    burst_tc_acc_fresh_by<TC, NK, NN, 1>(
        [&](int kk, int) -> const typename TC::A & { return a[kk]; },
        [&](int) -> float(&)[2 * NN][4] { return acc; }, t, c0, lane);
}

/* c += cs where TC::SPLIT_S kept the small terms of a product apart (TC::mma2); N C tiles. */
template <typename TC, int N>
__device__ __forceinline__ void burst_tc_add_small(float (&c)[N][4], const float (&cs)[N][4])
{
    if (TC::SPLIT_S)
#pragma unroll
        for (int n = 0; n < N; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                c[n][e] += cs[n][e];
}

/* Smallest power of two >= n (n >= 1). */
__host__ __device__ constexpr int burst_pow2_ceil(int n)
{
    return n <= 1 ? 1 : 2 * burst_pow2_ceil((n + 1) / 2);
}

/* Issue the cp.async loads of rows [r0, r0 + ROWS) of head h of v into a tile of traits TC and
 * class D, by the block's NT threads. Rows at or past `valid` and the class's columns past the
 * view's head dim (v.shape[3]) are zero-filled: nothing outside the caller's rows is read.
 * Each thread owns one 16-byte column chunk (of a power-of-two count of slots per row, the slots
 * past the class's width idle) and every RS-th row from its first: its source address is computed
 * once and advanced by a row stride, its shared-memory offsets are constants apart. */
template <typename TC, int D, int ROWS, int NT = 128>
__device__ __forceinline__ void burst_tc_load(typename TC::E *sh, const struct burst_cuda_view &v,
                                              int64_t b, int64_t r0, int64_t valid, int64_t h)
{
    using E = typename TC::E;
    constexpr int CH = TC::CH, NC = D / CH, NS = burst_pow2_ceil(NC);
    static_assert(NS <= NT && ROWS % (NT / NS) == 0, "a pass covers whole rows");
    constexpr int RS = NT / NS; /* rows per pass */
    const int ch = (int)threadIdx.x % NS, rr = (int)threadIdx.x / NS;
    if (ch >= NC)
        return;
    const E *base = (const E *)v.data;
    const bool col = ch * CH < v.shape[3];
    const int64_t left = valid - r0 - rr; /* this thread's rows i * RS < left are the caller's */
    const int lim = left < ROWS ? (int)left : ROWS;
    const E *src = base + burst_off(v, b, r0 + rr, h) + ch * CH;
    const int64_t step = v.stride[1] * RS;
#pragma unroll
    for (int i = 0; i < ROWS / RS; i++) {
        const bool ok = col && i * RS < lim;
        burst_cp16(sh + TC::off(rr + i * RS, ch * CH), ok ? src + i * step : base, ok ? 16 : 0);
    }
}

/* Two adjacent elements (columns col, col + 1 of row i, head h) of a final output: fp32 as one
 * 64-bit store, f16 / bf16 rounded to nearest even as one 32-bit store (the backend checks the
 * alignment: burst_cuda_final_fits). */
__device__ __forceinline__ void burst_final_pair(const struct burst_cuda_view &v, int64_t b,
                                                 int64_t i, int64_t h, int col, float x, float y)
{
    if (v.dtype == BURST_CUDA_F32) {
        *(float2 *)((float *)(uintptr_t)v.data + burst_off(v, b, i, h) + col) = make_float2(x, y);
        return;
    }
    uint32_t w;
    if (v.dtype == BURST_CUDA_F16) {
        const __half2 p = __floats2half2_rn(x, y);
        w = *(const uint32_t *)&p;
    } else {
        const __nv_bfloat162 p = __floats2bfloat162_rn(x, y);
        w = *(const uint32_t *)&p;
    }
    *(uint32_t *)((unsigned short *)(uintptr_t)v.data + burst_off(v, b, i, h) + col) = w;
}

/* Zero element e of a final output of any dtype. */
__device__ __forceinline__ void burst_final_zero(const struct burst_cuda_view &v, int64_t e)
{
    if (v.dtype == BURST_CUDA_F32)
        ((float *)(uintptr_t)v.data)[e] = 0.0f;
    else
        ((unsigned short *)(uintptr_t)v.data)[e] = 0;
}

/* The final output of a call's only step (s.o_out set, burst_cuda_step): the row normalised, in
 * O's dtype, straight to the caller's tensor, and its lse; a row with no allowed key gets 0 and
 * -inf. Bitwise what the merge into a fresh accumulator followed by the cast kernel gives: the
 * same fp32 products, rounded to nearest even; each thread stores its column pairs as 32-bit
 * words (burst_final_pair). */
template <int D>
__device__ __forceinline__ void burst_final_row(const struct burst_cuda_step &s, int64_t b,
                                                int64_t h, int64_t i, float m, float l,
                                                const float *o, int u, int cq, int lane)
{
    const float fcn = l == 0.0f ? 0.0f : (float)(1.0 / (double)l);
#pragma unroll
    for (int n = 0; n < D / 8; n++) /* l = 0: +0, as the never-touched accumulator */
        if (n * 8 < s.d)            /* the class's columns past d are not the caller's */
            burst_final_pair(s.o_out, b, i, h, n * 8 + cq,
                             l == 0.0f ? 0.0f : fcn * o[4 * n + 2 * u],
                             l == 0.0f ? 0.0f : fcn * o[4 * n + 2 * u + 1]);
    if ((lane & 3) == 0)
        s.lse_acc[(b * s.hq + h) * s.nq + i] =
            l == 0.0f ? -CUDART_INF_F
                      : (float)(((double)m + log2((double)l)) * 0.69314718055994530942);
}

/* s.o_out set: rows [i0, i1) of head h that see no key at all (a block that skips their tile
 * loop): O = 0, lse = -inf, by n threads of the block, this one being number k of them. */
__device__ __forceinline__ void burst_final_empty(const struct burst_cuda_step &s, int64_t b,
                                                  int64_t h, int64_t i0, int64_t i1, int k, int n)
{
    if (!s.o_out.data)
        return;
    for (int64_t e = k; e < (i1 - i0) * s.d; e += n)
        burst_final_zero(s.o_out, burst_off(s.o_out, b, i0 + e / s.d, h) + e % s.d);
    for (int64_t i = i0 + k; i < i1; i += n)
        s.lse_acc[(b * s.hq + h) * s.nq + i] = -CUDART_INF_F;
}

/* This lane's rows of s.dq for the dQ atomics of one m16 C tile whose rows are query rows i and
 * i + 8 of head h, found once per tile so that each column tile's atomics (burst_dq_red) only add
 * their column; null for a row at or past nq. Below sm_90: r0, r1 = columns 2t, 2t + 1 (t =
 * lane % 4) of rows i and i + 8. On sm_90+: r0 = columns 4 (t / 2) .. of row i (even lanes) or
 * i + 8 (odd lanes), r1 unused. */
struct burst_dq_rows {
    float *r0, *r1;
};
__device__ __forceinline__ struct burst_dq_rows
burst_dq_at(const struct burst_cuda_step &s, int64_t b, int64_t h, int64_t i, int lane)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    float *p = s.dq + ((b * s.nq + i) * s.hq + h) * s.d + 2 * (lane & 3);
    return {i < s.nq ? p : nullptr, i + 8 < s.nq ? p + 8 * s.hq * s.d : nullptr};
#else
    const int64_t r = (lane & 1) ? i + 8 : i;
    float *p = s.dq + ((b * s.nq + r) * s.hq + h) * s.d + 4 * ((lane & 3) >> 1);
    return {r < s.nq ? p : nullptr, nullptr};
#endif
}

/* s.dq += tau q for one 8-column C tile (q0, q1: row g, columns 2t, 2t + 1; q2, q3: row g + 8)
 * at columns col8 .. col8 + 7 of the rows r (burst_dq_at; d, a multiple of 8, holds all 8 columns
 * or none). On sm_90+ one 16-byte float atomic per lane: lanes t and t ^ 1 swap a pair, so that
 * an even lane adds 4 consecutive columns of row g and an odd lane those of row g + 8; below sm_90
 * (no vector float atomics) four scalar ones. Every lane of the warp calls it with the same col8
 * (the swap is a shuffle; the blocks are one-dimensional, so the lane's parity is the thread's). */
__device__ __forceinline__ void burst_dq_red(const struct burst_cuda_step &s,
                                             const struct burst_dq_rows &r, int col8,
                                             const float *q)
{
    if (col8 >= s.d)
        return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    if (r.r0) {
        atomicAdd(r.r0 + col8, s.scale * q[0]);
        atomicAdd(r.r0 + col8 + 1, s.scale * q[1]);
    }
    if (r.r1) {
        atomicAdd(r.r1 + col8, s.scale * q[2]);
        atomicAdd(r.r1 + col8 + 1, s.scale * q[3]);
    }
#else
    const bool odd = threadIdx.x & 1;
    const float x = __shfl_xor_sync(~0u, odd ? q[0] : q[2], 1);
    const float y = __shfl_xor_sync(~0u, odd ? q[1] : q[3], 1);
    if (!r.r0)
        return;
    const float4 v = odd ? make_float4(x, y, q[2], q[3]) : make_float4(q[0], q[1], x, y);
    atomicAdd((float4 *)(r.r0 + col8),
              make_float4(s.scale * v.x, s.scale * v.y, s.scale * v.z, s.scale * v.w));
#endif
}

/* The final dK, dV of a key row (s.dk_out set), from one thread's pairs: the values an fp32
 * accumulator starting at 0 would hold (fmaf(scale, dk, 0), 0 + dv: the same signed zeros), so
 * bitwise the accumulate-and-cast path. */
__device__ __forceinline__ void burst_final_kv_pair(const struct burst_cuda_step &s, int64_t b,
                                                    int64_t j, int64_t g, int col, float dk0,
                                                    float dk1, float dv0, float dv1)
{
    burst_final_pair(s.dk_out, b, j, g, col, fmaf(s.scale, dk0, 0.0f), fmaf(s.scale, dk1, 0.0f));
    burst_final_pair(s.dv_out, b, j, g, col, 0.0f + dv0, 0.0f + dv1);
}

/* s.dk_out set: key rows [j0, j1) of K/V head g that no query sees (a block that returns before
 * its loop): dK = dV = 0, by every thread of the block. */
__device__ __forceinline__ void burst_final_kv_empty(const struct burst_cuda_step &s, int64_t b,
                                                     int64_t g, int64_t j0, int64_t j1)
{
    if (!s.dk_out.data)
        return;
    for (int64_t e = threadIdx.x; e < (j1 - j0) * s.d; e += blockDim.x) {
        burst_final_zero(s.dk_out, burst_off(s.dk_out, b, j0 + e / s.d, g) + e % s.d);
        burst_final_zero(s.dv_out, burst_off(s.dv_out, b, j0 + e / s.d, g) + e % s.d);
    }
}

/* The fp64 weights of merging a part (running max m and sum l in log2 units: its lse
 * lr = (m + log2 l) ln 2) into a running row whose lse is lo (natural log; -inf: empty): the
 * merged lse *ln and the factors of the running O (*co) and of the part's unnormalised O (*cn). */
__device__ __forceinline__ void burst_merge_weights(double lo, float m, float l, double *ln,
                                                    double *co, double *cn)
{
    const double lr = ((double)m + log2((double)l)) * 0.69314718055994530942;
    if (lo == -(double)CUDART_INF) {
        *ln = lr;
        *co = 0.0;
        *cn = 1.0 / (double)l;
    } else {
        *ln = fmax(lo, lr) + log1p(exp(-fabs(lo - lr)));
        *co = exp(lo - *ln);
        *cn = exp(lr - *ln) / (double)l;
    }
}

/*
 * The fused merge of one query row's partial result into the running (o_acc, lse_acc), as the
 * four threads of a quad hold it in the mma C layout: m = the row's running maximum (log2 units,
 * scaled), l = its sum of exp2 (already summed over the quad), o[4 n + 2 u], o[4 n + 2 u + 1] =
 * the unnormalised O at columns 8 n + cq, + 1 (u = 0 for row g, 1 for row g + 8). The new lse and
 * the weights of the old and new parts are computed in fp64 (once per row: negligible). A row
 * that saw no allowed key (l = 0) is left bit-for-bit unchanged. With s.o_out set (fwd_final)
 * the row goes to the final output instead: burst_final_row.
 */
template <int D>
__device__ __forceinline__ void burst_merge_row(const struct burst_cuda_step &s, int64_t b,
                                                int64_t h, int64_t i, float m, float l,
                                                const float *o, int u, int cq, int lane)
{
    if (s.o_out.data) {
        burst_final_row<D>(s, b, h, i, m, l, o, u, cq, lane);
        return;
    }
    if (l == 0.0f)
        return;
    float *lse = s.lse_acc + (b * s.hq + h) * s.nq + i;
    double ln, co, cn;
    burst_merge_weights((double)*lse, m, l, &ln, &co, &cn);
    float *orow = s.o_acc + ((b * s.nq + i) * s.hq + h) * s.d;
    const float fco = (float)co, fcn = (float)cn;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        if (n * 8 >= s.d)
            break;
        float2 *p2 = (float2 *)(orow + n * 8 + cq);
        float2 x = make_float2(fcn * o[4 * n + 2 * u], fcn * o[4 * n + 2 * u + 1]);
        if (co != 0.0) {
            const float2 y = *p2;
            x.x = fmaf(fco, y.x, x.x);
            x.y = fmaf(fco, y.y, x.y);
        }
        *p2 = x;
    }
    if ((lane & 3) == 0)
        *lse = (float)ln;
}

#endif /* BURST_CUDA_MMA_CUH */
