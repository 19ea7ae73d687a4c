/*
 * cuda/burst_cuda_tf32.cuh - fp32 operands on the tensor cores with fp32-class accuracy: the
 * operand traits burst_tc<float, D> of the tensor-core kernels (the 16-bit ones and the two forms
 * of product are described beside burst_tc in burst_cuda_mma.cuh).
 *
 * 3xTF32: each fp32 operand x is split into x = hi + lo, hi = tf32(x) and lo = tf32(x - hi)
 * (tf32: 10 explicit mantissa bits, rounded to nearest), and a product a b is computed as
 * lo(a) hi(b) + hi(a) lo(b) + hi(a) hi(b) on mma.sync m16n8k8 tf32 with fp32 accumulation, the
 * small terms first. What is dropped, lo(a) lo(b) and the rounding of the lo parts, is about
 * 2^-21 of |a b|: close to fp32's own 2^-24 per operation, where one tf32 product would lose 2^-11.
 * Operands are split when their fragment is loaded, so the tiles stay plain fp32.
 *
 * Tiles are [rows][D + 4] floats: with D a multiple of 32 the 4-float pad puts the 32 addresses of
 * every scalar fragment load in distinct banks (row r, column c is bank (4 r + c) mod 32; the B
 * operand read across rows takes rows 2t, 2t + 1 of column g, bank 8 t + g, as does ldact). The
 * 64-bit accesses of ldac and st2 (column pairs 2t, 2t + 1 of rows g) meet 2-way bank conflicts
 * (banks 4 g + 2 t of each half warp). Copies stay 16-byte aligned.
 *
 * Fragments (PTX ISA, mma.m16n8k8 .tf32; g = lane / 4, t = lane % 4): A a0..a3 = rows {g, g+8}
 * x cols {t, t+4} (a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4)); B b0, b1 = rows
 * {t, t+4} x col g; C as the 16-bit form's. A C tile holds columns 2t, 2t + 1 of rows g, g + 8, so
 * as an A operand (cta) its k slot t is column 2t and slot t + 4 column 2t + 1, and the B operand
 * of that product (ldbt) reads its rows in the same order: any order of the k index gives the same
 * sum, as long as both operands agree.
 */
#ifndef BURST_CUDA_TF32_CUH
#define BURST_CUDA_TF32_CUH

#include "burst_cuda_mma.cuh"

/* x rounded to nearest (ties away from zero) to tf32's 10 explicit mantissa bits, the low 13
 * bits zero: the 32-bit register an mma operand takes, and exactly the value the matrix unit
 * reads (infinities stay infinite). */
__device__ __forceinline__ unsigned burst_tf32(float x)
{
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

/* x = hi + lo to about 2^-22 |x| (the 3xTF32 split; x - hi is exact in fp32). */
__device__ __forceinline__ void burst_tf32_split(float x, unsigned &hi, unsigned &lo)
{
    hi = burst_tf32(x);
    lo = burst_tf32(x - __uint_as_float(hi));
}

__device__ __forceinline__ void burst_mma_tf32(float *c, const unsigned *a, const unsigned *b)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* one k16 step = two k8 steps s, each split into hi and lo */
template <> struct burst_tc_frag<float> {
    struct A {
        unsigned h[2][4], l[2][4];
    };
    struct B {
        unsigned h[2][2][2], l[2][2][2]; /* [n8 tile][k8 step][register] */
    };
};

template <int D> struct burst_tc<float, D> {
    using E = float;
    static constexpr int W = D + 4, CH = 4;
    static constexpr int FWD_MR = 1, FWD_BC = BURST_CUDA_TF32_FWD_BC(D);
    static constexpr int FWD_NW = BURST_CUDA_TF32_FWD_WARPS(D);
    static constexpr int BWD_ROWS = BURST_CUDA_TF32_BWD_ROWS(D);
    static constexpr int DKDV_SPLIT = BURST_CUDA_TF32_DKDV_SPLIT(D);
    /* The matrix unit truncates as it accumulates, so a long chain of accumulation drifts
     * towards zero by up to 2^-23 of the sum per step. FRESH: O, dQ, dK and dV are summed tile
     * by tile in fresh accumulators (burst_tc_acc_fresh) and added in ordinary (rounded) fp32;
     * SPLIT_S: the products over the head dim (S, dP) keep the small terms in their own
     * accumulator (mma2), so that only the hi x hi chain runs at the magnitude of the result. */
    static constexpr bool FRESH = true, SPLIT_S = true;
    using A = burst_tc_frag<float>::A;
    using B = burst_tc_frag<float>::B;
    static __device__ __forceinline__ int off(int row, int col)
    {
        return row * W + col;
    }
    static __device__ __forceinline__ void st2(E *t, int row, int col, float x, float y)
    {
        *(float2 *)(t + off(row, col)) = make_float2(x, y);
    }
    static __device__ __forceinline__ void lda(A &a, const E *t, int row0, int k0, int lane)
    {
        const E *p = t + (row0 + (lane >> 2)) * W + k0 + (lane & 3);
#pragma unroll
        for (int s = 0; s < 2; s++) {
            burst_tf32_split(p[8 * s], a.h[s][0], a.l[s][0]);
            burst_tf32_split(p[8 * s + 8 * W], a.h[s][1], a.l[s][1]);
            burst_tf32_split(p[8 * s + 4], a.h[s][2], a.l[s][2]);
            burst_tf32_split(p[8 * s + 8 * W + 4], a.h[s][3], a.l[s][3]);
        }
    }
    /* rows [row0, row0 + 16) x columns [k0, k0 + 16) as the A operand in cta's order of k (slot
     * t of k8 step s is column 8 s + 2 t, slot t + 4 column 8 s + 2 t + 1), the order ldbt reads
     * B in: A of C += A B from a tile of stored C values */
    static __device__ __forceinline__ void ldac(A &a, const E *t, int row0, int k0, int lane)
    {
        const E *p = t + (row0 + (lane >> 2)) * W + k0 + 2 * (lane & 3);
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const float2 u = *(const float2 *)(p + 8 * s), v = *(const float2 *)(p + 8 * s + 8 * W);
            burst_tf32_split(u.x, a.h[s][0], a.l[s][0]);
            burst_tf32_split(v.x, a.h[s][1], a.l[s][1]);
            burst_tf32_split(u.y, a.h[s][2], a.l[s][2]);
            burst_tf32_split(v.y, a.h[s][3], a.l[s][3]);
        }
    }
    /* rows [k0, k0 + 16) x columns [m0, m0 + 16) transposed (A[i][k] = t[k0 + k][m0 + i]) as
     * the A operand in cta's order of k */
    static __device__ __forceinline__ void ldact(A &a, const E *t, int k0, int m0, int lane)
    {
        const E *p = t + (k0 + 2 * (lane & 3)) * W + m0 + (lane >> 2);
#pragma unroll
        for (int s = 0; s < 2; s++) {
            burst_tf32_split(p[8 * s * W], a.h[s][0], a.l[s][0]);
            burst_tf32_split(p[8 * s * W + 8], a.h[s][1], a.l[s][1]);
            burst_tf32_split(p[(8 * s + 1) * W], a.h[s][2], a.l[s][2]);
            burst_tf32_split(p[(8 * s + 1) * W + 8], a.h[s][3], a.l[s][3]);
        }
    }
    static __device__ __forceinline__ void ldb(B &b, const E *t, int n0, int k0, int lane)
    {
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int s = 0; s < 2; s++) {
                const E *p = t + (n0 + 8 * n + (lane >> 2)) * W + k0 + 8 * s + (lane & 3);
                burst_tf32_split(p[0], b.h[n][s][0], b.l[n][s][0]);
                burst_tf32_split(p[4], b.h[n][s][1], b.l[n][s][1]);
            }
    }
    static __device__ __forceinline__ void ldbt(B &b, const E *t, int k0, int n0, int lane)
    {
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int s = 0; s < 2; s++) {
                const E *p = t + (k0 + 8 * s + 2 * (lane & 3)) * W + n0 + 8 * n + (lane >> 2);
                burst_tf32_split(p[0], b.h[n][s][0], b.l[n][s][0]);
                burst_tf32_split(p[W], b.h[n][s][1], b.l[n][s][1]);
            }
    }
    static __device__ __forceinline__ void cta(A &a, const float *c0, const float *c1)
    {
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const float *c = s ? c1 : c0;
            burst_tf32_split(c[0], a.h[s][0], a.l[s][0]);
            burst_tf32_split(c[2], a.h[s][1], a.l[s][1]);
            burst_tf32_split(c[1], a.h[s][2], a.l[s][2]);
            burst_tf32_split(c[3], a.h[s][3], a.l[s][3]);
        }
    }
    static __device__ __forceinline__ void mma(float *c, const A &a, const B &b, int n)
    {
#pragma unroll
        for (int s = 0; s < 2; s++) {
            burst_mma_tf32(c, a.l[s], b.h[n][s]);
            burst_mma_tf32(c, a.h[s], b.l[n][s]);
            burst_mma_tf32(c, a.h[s], b.h[n][s]);
        }
    }
    static __device__ __forceinline__ void mma2(float *c, float *cs, const A &a, const B &b, int n)
    {
        float *small = SPLIT_S ? cs : c;
#pragma unroll
        for (int s = 0; s < 2; s++) {
            burst_mma_tf32(small, a.l[s], b.h[n][s]);
            burst_mma_tf32(small, a.h[s], b.l[n][s]);
            burst_mma_tf32(c, a.h[s], b.h[n][s]);
        }
    }
};

#endif /* BURST_CUDA_TF32_CUH */
