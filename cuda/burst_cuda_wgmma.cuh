/*
 * cuda/burst_cuda_wgmma.cuh - Hopper (sm_90a) warpgroup matrix products for the kernels of
 * burst_cuda_fwd_sm90.cu and burst_cuda_bwd_sm90.cu: shared-memory matrix descriptors, the
 * 128-byte swizzled tile layout they describe, wgmma.mma_async for fp16 / bf16 with fp32
 * accumulators (A from shared memory or from registers, B from shared memory), and the fences
 * and waits around them.
 *
 * A warpgroup is 4 consecutive warps (128 threads, starting at a warp index divisible by 4); one
 * wgmma.m64nNk16 multiplies a 64 x 16 A by a 16 x N B into a 64 x N accumulator held by the
 * warpgroup, N / 2 fp32 registers per thread. Warp w of the group owns rows 16 w .. 16 w + 15 and,
 * per 8 columns j, holds d[4 j + e] = row 16 w + g + 8 (e >> 1), column 8 j + 2 t + (e & 1)
 * (g = lane / 4, t = lane % 4): exactly the mma.sync m16n8 C layout of burst_cuda_mma.cuh, chunk
 * by chunk, so the online softmax works on it unchanged, and two adjacent 8-column chunks are
 * one A fragment (4 registers of 2 halves) of a register-A wgmma, as for mma.sync.
 *
 * Tiles in shared memory ("panels"): a [rows][D] tile of 16-bit elements is stored as D / 64
 * panels of [rows][64], each row 128 bytes, 16-byte chunk c of row r at chunk c ^ (r & 7) (the
 * 128-byte swizzle; every panel starts on a 1024-byte boundary, where the swizzle pattern
 * repeats). One layout serves both uses the kernels make of it (PTX ISA, "Shared Memory Matrix
 * Layout" and "Matrix Descriptor Format"):
 *   - K-major operand (Q as A, K as B of S = Q K^T: the reduction dimension d is contiguous):
 *     stride between 8-row groups (SBO) 1024 bytes; the leading offset is unused with a swizzle;
 *     the k-th 16-column slice starts at panel k / 4, byte 32 (k % 4) of its first row.
 *   - MN-major operand (V as B of O = P V, N = d contiguous, transposed by the instruction's
 *     imm-trans-b = 1): stride between 8-key groups (SBO) 1024 bytes, between 64-column groups of
 *     d (LBO) one panel, rows * 128 bytes; the k-th 16-key slice starts at byte 2048 k.
 * Ordering: shared memory written by ordinary stores or cp.async is read by wgmma through the
 * async proxy, so every writer executes fence.proxy.async before the barrier that publishes it;
 * tiles written by TMA (burst_cuda_tma.cuh) are already in the async proxy, published by the
 * mbarrier their bytes complete.
 */
#ifndef BURST_CUDA_WGMMA_CUH
#define BURST_CUDA_WGMMA_CUH

#include <limits.h>

#include "burst_cuda_mma.cuh"

/* 64-element panels of a [rows][D] tile of head-dim class D: D / 64 rounded up (the columns of
 * the last panel past D are never read: cp.async leaves them alone, TMA writes zeros there). */
template <int D> __host__ __device__ constexpr int burst_wg_panels()
{
    return (D + 63) / 64;
}

/*
 * The cp.async copies of [ROWS][D] tiles of one head of a [B, n, H, d] view into panel tiles,
 * spread over NT threads with the addressing hoisted out of the tile loop: thread t always copies
 * chunk t % (D / 8) of rows t / (D / 8) + k RS (RS = NT / (D / 8) rows per round); per tile only
 * the start row moves. Rows at or past `valid`, and the chunks of a class's columns past the
 * caller's head dim d, are zero-filled: no byte outside the caller's [.., d] rows is read (the
 * source address of a zero-fill is the head's first element, which is valid memory).
 */
template <typename T, int D, int ROWS, int NT> struct burst_wg_loader {
    static constexpr int CH = D / 8, RS = NT / CH, ROUNDS = (ROWS + RS - 1) / RS;
    /* every thread copies a chunk of every round (d = 64, 128): no row test; RS a multiple of 8:
     * the swizzle of a thread's chunk is the same in every round */
    static constexpr bool WHOLE = NT % CH == 0 && ROWS % RS == 0, FIXED = RS % 8 == 0;
    static_assert(RS >= 1, "one row per round at least");
    const T *p;   /* this thread's chunk in row 0 (the head's first element when it is padding) */
    int64_t step; /* elements between rows */
    int row;      /* this thread's first row in the tile (ROWS: it copies nothing) */
    int c;        /* its chunk */
    int soff;     /* its byte offset in the tile in the first round */
    bool live;    /* its chunk lies inside d */

    __device__ __forceinline__ void init(const struct burst_cuda_view &v, int64_t b, int64_t h,
                                         int64_t d)
    {
        const int t = (int)(threadIdx.x % NT);
        c = t % CH;
        row = t / CH < RS ? t / CH : ROWS; /* threads past the last whole round copy nothing */
        step = v.stride[1];
        live = c * 8 < d;
        p = (const T *)v.data + burst_off(v, b, 0, h) + (live ? c * 8 : 0);
        soff = (c >> 3) * ROWS * 128 + row * 128 + (((c & 7) ^ (row & 7)) << 4);
    }
    /* Issue the copies of rows [r0, r0 + ROWS) into sh (not committed). */
    __device__ __forceinline__ void load(unsigned char *sh, int64_t r0, int64_t valid) const
    {
        const T *src = p + (r0 + row) * step;
#pragma unroll
        for (int k = 0; k < ROUNDS; k++) {
            const int r = row + k * RS;
            if (!WHOLE && r >= ROWS) /* the last, partial round; threads that copy nothing */
                break;
            const int ok = live && r0 + r < valid;
            const int off = FIXED ? soff + k * RS * 128
                                  : (c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4);
            burst_cp16(sh + off, ok ? src + (int64_t)k * RS * step : p, ok ? 16 : 0);
        }
    }
};

/* Shared-memory matrix descriptor, 128-byte swizzle (layout type 1 in bits 62-63), SBO 1024 bytes
 * (every tile here is a panel tile), in two halves: burst_wg_dlo() is the low word (address and
 * LBO), which kernels keep and step, and burst_wg_dhi() joins it with the constant high word at
 * the instruction. */
__device__ __forceinline__ uint32_t burst_wg_dlo(const void *p, unsigned lbo)
{
    return ((burst_smem_addr(p) & 0x3FFFFu) >> 4) | (((lbo & 0x3FFFFu) >> 4) << 16);
}
__device__ __forceinline__ uint64_t burst_wg_dhi(uint32_t lo)
{
    return ((uint64_t)((1024u >> 4) | (1u << 30)) << 32) | lo;
}

/* The warpgroup of this thread, read from lane 0 so that the compiler knows it is uniform across
 * the warp (descriptors and shared-memory bases derived from it then live in uniform registers,
 * not in per-thread ones moved over before every wgmma). */
__device__ __forceinline__ int burst_wg_index()
{
    return __shfl_sync(~0u, (int)(threadIdx.x >> 7), 0);
}

__device__ __forceinline__ void burst_wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void burst_wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void burst_wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared memory written through the generic proxy, before wgmma reads it (each writer). */
__device__ __forceinline__ void burst_fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Barrier of the 128 threads of warpgroup wg (named barrier 1 + wg; __syncthreads is 0). */
__device__ __forceinline__ void burst_wg_bar(int wg)
{
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}
/* Pin accumulator registers around asynchronous products: the compiler may not move reads or
 * writes of r across this point (used after a wait, before the registers are touched). */
template <int N> __device__ __forceinline__ void burst_wg_pin(float *r)
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}

/* ---- wgmma.mma_async m64nNk16 with fp32 accumulators: N = 32, 48, 64, 96 or 128 with A from shared
 * memory (the S tiles and the narrow classes' products), 192 or 256 (the dK, dV products of the
 * wide classes); N = 32, 64, 96, 128, 192 or 256 with A from registers (one head-dim class wide:
 * the O, dQ, dK, dV products) ---- */

#define BURST_WG_A8(d, i)                                                                          \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),    \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define BURST_WG_A16(d) BURST_WG_A8(d, 0), BURST_WG_A8(d, 8)
#define BURST_WG_A24(d) BURST_WG_A16(d), BURST_WG_A8(d, 16)
#define BURST_WG_A32(d) BURST_WG_A24(d), BURST_WG_A8(d, 24)
#define BURST_WG_A48(d) BURST_WG_A32(d), BURST_WG_A8(d, 32), BURST_WG_A8(d, 40)
#define BURST_WG_A64(d) BURST_WG_A48(d), BURST_WG_A8(d, 48), BURST_WG_A8(d, 56)
#define BURST_WG_A96(d)                                                                            \
    BURST_WG_A64(d), BURST_WG_A8(d, 64), BURST_WG_A8(d, 72), BURST_WG_A8(d, 80), BURST_WG_A8(d, 88)
#define BURST_WG_A128(d)                                                                           \
    BURST_WG_A96(d), BURST_WG_A8(d, 96), BURST_WG_A8(d, 104), BURST_WG_A8(d, 112),                 \
        BURST_WG_A8(d, 120)
#define BURST_WG_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define BURST_WG_R24                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23}"
#define BURST_WG_R32                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define BURST_WG_R48                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "       \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "        \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define BURST_WG_R64                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
    "%56, %57, %58, %59, %60, %61, %62, %63}"

#define BURST_WG_R96                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "       \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "        \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "        \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "        \
    "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "        \
    "%87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define BURST_WG_R128                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "       \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "        \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "        \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "        \
    "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "        \
    "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, "          \
    "%103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "         \
    "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

/* Element type name in the instruction. */
template <typename T> struct burst_wg_ty;
template <> struct burst_wg_ty<__half> {
    static constexpr bool bf16 = false;
};
template <> struct burst_wg_ty<__nv_bfloat16> {
    static constexpr bool bf16 = true;
};

/* d (+)= A B with A and B in shared memory; acc = 0 overwrites d. TA / TB: the instruction's
 * imm-trans-a / imm-trans-b (0: the operand is K-major; 1: MN-major, the M (N) dimension
 * contiguous, as described above). burst_wg_ss<T, N> is the K-major / K-major case. */
template <typename T, int N, int TA, int TB> struct burst_wg_ssop;
template <typename T, int N>
__device__ __forceinline__ void burst_wg_ss(float *d, uint64_t da, uint64_t db, int acc)
{
    burst_wg_ssop<T, N, 0, 0>::run(d, da, db, acc);
}

/* d += A B with A in registers (4 x 32 bits per thread, the layout above) and B in shared
 * memory, MN-major (imm-trans-b = 1). */
template <typename T, int N>
__device__ __forceinline__ void burst_wg_rs(float *d, const unsigned *a, uint64_t db);

#define BURST_WG_SS(TY, NN, PT, REGS, ACCS, IA, IB, IS, ITA, ITB)                                  \
    template <int TA, int TB> struct burst_wg_ssop<TY, NN, TA, TB> {                               \
        static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, int acc)    \
        {                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                          \
                         "wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." PT "." PT " " REGS     \
                         ", %" IA ", %" IB ", p, 1, 1, %" ITA ", %" ITB ";\n}\n"                   \
                         : ACCS(d)                                                                 \
                         : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));                          \
        }                                                                                          \
    };
#define BURST_WG_RS(TY, NN, PT, REGS, ACCS, A0, A1, A2, A3, IB, IS)                                \
    template <>                                                                                    \
    __device__ __forceinline__ void burst_wg_rs<TY, NN>(float *d, const unsigned *a, uint64_t db)  \
    {                                                                                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                              \
                     "wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." PT "." PT " " REGS         \
                     ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" IB ", p, 1, 1, 1;\n}\n"           \
                     : ACCS(d)                                                                     \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));               \
    }

BURST_WG_SS(__half, 32, "f16", BURST_WG_R16, BURST_WG_A16, "16", "17", "18", "19", "20")
BURST_WG_SS(__nv_bfloat16, 32, "bf16", BURST_WG_R16, BURST_WG_A16, "16", "17", "18", "19", "20")
BURST_WG_SS(__half, 48, "f16", BURST_WG_R24, BURST_WG_A24, "24", "25", "26", "27", "28")
BURST_WG_SS(__nv_bfloat16, 48, "bf16", BURST_WG_R24, BURST_WG_A24, "24", "25", "26", "27", "28")
BURST_WG_SS(__half, 64, "f16", BURST_WG_R32, BURST_WG_A32, "32", "33", "34", "35", "36")
BURST_WG_SS(__half, 96, "f16", BURST_WG_R48, BURST_WG_A48, "48", "49", "50", "51", "52")
BURST_WG_SS(__nv_bfloat16, 96, "bf16", BURST_WG_R48, BURST_WG_A48, "48", "49", "50", "51", "52")
BURST_WG_SS(__half, 128, "f16", BURST_WG_R64, BURST_WG_A64, "64", "65", "66", "67", "68")
BURST_WG_SS(__nv_bfloat16, 64, "bf16", BURST_WG_R32, BURST_WG_A32, "32", "33", "34", "35", "36")
BURST_WG_SS(__nv_bfloat16, 128, "bf16", BURST_WG_R64, BURST_WG_A64, "64", "65", "66", "67", "68")
BURST_WG_SS(__half, 192, "f16", BURST_WG_R96, BURST_WG_A96, "96", "97", "98", "99", "100")
BURST_WG_SS(__nv_bfloat16, 192, "bf16", BURST_WG_R96, BURST_WG_A96, "96", "97", "98", "99", "100")
BURST_WG_SS(__half, 256, "f16", BURST_WG_R128, BURST_WG_A128, "128", "129", "130", "131", "132")
BURST_WG_SS(__nv_bfloat16, 256, "bf16", BURST_WG_R128, BURST_WG_A128, "128", "129", "130", "131",
            "132")
BURST_WG_RS(__half, 32, "f16", BURST_WG_R16, BURST_WG_A16, "16", "17", "18", "19", "20", "21")
BURST_WG_RS(__nv_bfloat16, 32, "bf16", BURST_WG_R16, BURST_WG_A16, "16", "17", "18", "19", "20",
            "21")
BURST_WG_RS(__half, 64, "f16", BURST_WG_R32, BURST_WG_A32, "32", "33", "34", "35", "36", "37")
BURST_WG_RS(__nv_bfloat16, 64, "bf16", BURST_WG_R32, BURST_WG_A32, "32", "33", "34", "35", "36",
            "37")
BURST_WG_RS(__half, 96, "f16", BURST_WG_R48, BURST_WG_A48, "48", "49", "50", "51", "52", "53")
BURST_WG_RS(__nv_bfloat16, 96, "bf16", BURST_WG_R48, BURST_WG_A48, "48", "49", "50", "51", "52",
            "53")
BURST_WG_RS(__half, 128, "f16", BURST_WG_R64, BURST_WG_A64, "64", "65", "66", "67", "68", "69")
BURST_WG_RS(__nv_bfloat16, 128, "bf16", BURST_WG_R64, BURST_WG_A64, "64", "65", "66", "67", "68",
            "69")
BURST_WG_RS(__half, 192, "f16", BURST_WG_R96, BURST_WG_A96, "96", "97", "98", "99", "100", "101")
BURST_WG_RS(__nv_bfloat16, 192, "bf16", BURST_WG_R96, BURST_WG_A96, "96", "97", "98", "99", "100",
            "101")
BURST_WG_RS(__half, 256, "f16", BURST_WG_R128, BURST_WG_A128, "128", "129", "130", "131", "132",
            "133")
BURST_WG_RS(__nv_bfloat16, 256, "bf16", BURST_WG_R128, BURST_WG_A128, "128", "129", "130", "131",
            "132", "133")

/* Store four 8 x 8 16-bit matrices transposed (stmatrix .x4 .trans): r[m] is matrix m as an mma
 * C fragment (lane holds row lane / 4, columns 2 (lane % 4) and + 1, packed), and memory row i of
 * matrix m (its column i: 8 elements, 16 bytes) goes to the address lane 8 m + i passes. */
__device__ __forceinline__ void burst_stmatrix_t4(const void *row, const unsigned *r)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     burst_smem_addr(row)),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

/* ---- the backward's query rows ---------------------------------------------------------------- */

/* Per query row of a streamed tile of the dK/dV kernels: lse (log2 units), D, and its allowed
 * keys [kb, ke). */
struct burst_wg_qrow {
    float l2, dl;
    int kb, ke;
};

/* The scalars of row i0 + k of head h (k < ROWS, a row of the tile); rows past nq, and k past
 * the tile, get l2 = +inf (so P = 0 on every key), D = 0 and every key. */
template <int ROWS>
__device__ __forceinline__ struct burst_wg_qrow
burst_wg_row(const struct burst_cuda_step &s, int64_t b, int64_t h, int64_t i0, int k)
{
    struct burst_wg_qrow r = {CUDART_INF_F, 0.0f, 0, INT_MAX};
    const int64_t i = i0 + k;
    if (k < ROWS && i < s.nq) {
        const struct burst_brow x = burst_brow_at(s, b, h, i);
        r.l2 = x.l2;
        r.dl = x.dl;
        r.kb = (int)x.kb;
        r.ke = (int)x.ke;
    }
    return r;
}

/* x^T -> a [query row][key] tile of 16-bit T in 128-byte rows (one 64-key panel, swizzled), from
 * `rows` (its first query row): x is a warpgroup's 64 keys x N queries accumulator (keys 16 warp
 * + 8 u.., queries 8 n..); per 16 queries one stmatrix of its four 8 x 8 blocks in
 * burst_wg_pack's order, lane 8 m + i giving query row 8 (2 kk + m / 2) + i, 16-byte chunk
 * 2 warp + m % 2. */
template <typename T, int N>
__device__ __forceinline__ void burst_wg_store_t(unsigned char *rows, const float *x)
{
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, m = lane >> 3, i = lane & 7;
    unsigned char *p = rows + ((m >> 1) * 8 + i) * 128 + (((warp * 2 + (m & 1)) ^ i) << 4);
#pragma unroll
    for (int kk = 0; kk < N / 16; kk++) {
        unsigned r[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            r[k] = burst_mma<T>::pack(x[8 * kk + 2 * k], x[8 * kk + 2 * k + 1]);
        burst_stmatrix_t4(p + kk * 16 * 128, r);
    }
}

/* ---- the products of the attention kernels ------------------------------------------------------- */

/* fp32 accumulator tile (layout above) -> A fragments of a register-A product, in the input
 * dtype: two adjacent 8-column chunks make one 16-wide A fragment. */
template <typename T, int N>
__device__ __forceinline__ void burst_wg_pack(unsigned (*p)[4], const float *acc)
{
#pragma unroll
    for (int kk = 0; kk < N / 16; kk++) {
        p[kk][0] = burst_mma<T>::pack(acc[8 * kk + 0], acc[8 * kk + 1]);
        p[kk][1] = burst_mma<T>::pack(acc[8 * kk + 2], acc[8 * kk + 3]);
        p[kk][2] = burst_mma<T>::pack(acc[8 * kk + 4], acc[8 * kk + 5]);
        p[kk][3] = burst_mma<T>::pack(acc[8 * kk + 6], acc[8 * kk + 7]);
    }
}

/* The products below take descriptors as low words (burst_wg_dlo) and step them per 16-wide
 * slice in 32 bits (an address in shared memory never carries into the LBO field), so that the
 * compiler keeps them in uniform registers where the kernel's base addresses are warp-uniform. */

/* Issue acc = A B^T (one commit group): A = 64 rows of a panel tile of AROWS rows, B = N rows of
 * a panel tile of BROWS rows, both [rows][D] (K-major, the reduction over d); da, db their
 * descriptors (db at the B tile's row where the N rows start). The
 * k-th 16-column slice is panel k / 4, byte 32 (k % 4) (descriptor units: 16 bytes). */
template <typename T, int D, int N, int AROWS, int BROWS = N>
__device__ __forceinline__ void burst_wg_abt(float *acc, uint32_t da, uint32_t db)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        burst_wg_ss<T, N>(acc, burst_wg_dhi(da + (((kk >> 2) * AROWS * 128 + (kk & 3) * 32) >> 4)),
                          burst_wg_dhi(db + (((kk >> 2) * BROWS * 128 + (kk & 3) * 32) >> 4)),
                          kk > 0);
    burst_wg_commit();
}

/* Issue acc += A B (one commit group): A = 64 x ROWS in registers (burst_wg_pack), B = a
 * [ROWS][D] panel tile read MN-major (db made with LBO = ROWS * 128); 16 rows = 2048 bytes. */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void burst_wg_pv(float *acc, unsigned (*p)[4], uint32_t db)
{
#pragma unroll
    for (int kk = 0; kk < ROWS / 16; kk++)
        burst_wg_rs<T, D>(acc, p[kk], burst_wg_dhi(db + (kk * 2048 >> 4)));
    burst_wg_commit();
}

/* Issue acc += A B (one commit group) with both operands MN-major in shared memory: A = 64 x
 * KROWS (the 64 M elements contiguous, as a panel tile of KROWS rows), B = a [KROWS][N] panel
 * tile (db made with LBO = KROWS * 128); 16 rows of either = 2048 bytes. */
template <typename T, int N, int KROWS>
__device__ __forceinline__ void burst_wg_mn(float *acc, uint32_t da, uint32_t db)
{
#pragma unroll
    for (int kk = 0; kk < KROWS / 16; kk++)
        burst_wg_ssop<T, N, 1, 1>::run(acc, burst_wg_dhi(da + (kk * 2048 >> 4)),
                                       burst_wg_dhi(db + (kk * 2048 >> 4)), 1);
    burst_wg_commit();
}

/* Issue acc = A^T B^T (one commit group) over a reduction of 128: A^T with A a [128][..] panel
 * tile read MN-major (its 64 columns starting at da are M; 16 rows = 2048 bytes), B^T with B a
 * panel tile of BROWS rows of 128 elements, read K-major from its row at db (N rows). */
template <typename T, int N, int BROWS>
__device__ __forceinline__ void burst_wg_atbt(float *acc, uint32_t da, uint32_t db)
{
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        burst_wg_ssop<T, N, 1, 0>::run(
            acc, burst_wg_dhi(da + (kk * 2048 >> 4)),
            burst_wg_dhi(db + (((kk >> 2) * BROWS * 128 + (kk & 3) * 32) >> 4)), kk > 0);
    burst_wg_commit();
}

#endif /* BURST_CUDA_WGMMA_CUH */
