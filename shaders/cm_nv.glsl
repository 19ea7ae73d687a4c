// shaders/cm_nv.glsl - what the cooperative-matrix kernels share, after common.glsl (included,
// not compiled alone): the extensions, the 16x16 fp16 operand and fp32 accumulator types, 16-byte
// loads of fp16 views, a subgroup barrier.
//
// Every shared tile of these kernels is an array of uvec4 (8 halves or 4 floats), so one tile can
// hold fp32 scores and then the fp16 matrix made of them; rows are padded by 16 bytes so that the
// 8 rows of a matrix load fall in different banks.
//
// Each kernel builds twice from one source: against GL_NV_cooperative_matrix (the *_nv SPIR-V)
// and, with -DBURST_CM_KHR, against GL_KHR_cooperative_matrix (the *_khr SPIR-V, for any device
// that offers VK_KHR_cooperative_matrix). The kernels write matrix types and operations through
// the names below, which differ between the two:
//   AMAT, BMAT, CMAT   the A and B operands (16x16 fp16) and the accumulator (16x16 fp32); the
//                      NV extension has no matrix use, so there AMAT and BMAT are one type
//   CM_LOAD(m, buf, element, stride, colmajor), CM_STORE(...)   strided loads and stores; offsets
//                      and strides in elements of buf (uvec4)
//   CM_MULADD(a, b, c) a b + c
//   CM_TO_A(a, c)      the accumulator c as the fp16 operand a. The KHR extension cannot convert
//                      between uses, so there the elements are copied one by one: right only
//                      where element e of both types is the same (row, column), which the host
//                      checks before any kernel that uses it runs (cm_layout_nv.comp, vk_cmq.c)
#ifdef BURST_CM_KHR
#extension GL_KHR_cooperative_matrix : require
#define AMAT coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define BMAT coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define CMAT coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define CM_LAYOUT(cm) ((cm) ? gl_CooperativeMatrixLayoutColumnMajor : gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD(m, buf, x, stride, cm) coopMatLoad(m, buf, x, stride, CM_LAYOUT(cm))
#define CM_STORE(m, buf, x, stride, cm) coopMatStore(m, buf, x, stride, CM_LAYOUT(cm))
#define CM_MULADD(a, b, c) coopMatMulAdd(a, b, c)
#define CM_TO_A(a, c)                                                                             \
    UNROLL for (int e_ = 0; e_ < (c).length(); e_++)                                              \
        (a)[e_] = float16_t((c)[e_])
#else
#extension GL_NV_cooperative_matrix : require
#define AMAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define BMAT AMAT
#define CMAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define CM_LOAD(m, buf, x, stride, cm) coopMatLoadNV(m, buf, x, stride, cm)
#define CM_STORE(m, buf, x, stride, cm) coopMatStoreNV(m, buf, x, stride, cm)
#define CM_MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#define CM_TO_A(a, c) (a) = AMAT(c)
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#include "convert.glsl"

// Subgroups that share 16 rows (the *_cmq backward kernels beyond d = 128, and with split fp32
// inputs beyond d = 64, runtime/vulkan/vk_internal.h burst_vk_cmq_split: each holds the operands
// and accumulators of DCH of the DC head-dim chunks; 1 elsewhere)
layout(constant_id = 16) const int SP = 1;

const int DM = (D + 15) / 16 * 16; // the head dim in the matrices: D rounded up to 16 (the
                                   // *_cmq kernels; their padding columns load as 0 and are
                                   // never written; the others take D % 16 == 0)
const int D8 = DM / 8;             // 16-byte pieces of the DM halves of a row
// fp32 inputs (dtype 0) reach the *_cmq kernels split in two fp16 halves per element, hi and lo
// (the host's elem_cvt: x 2^s = hi + lo + a remainder below 2^-22 of it, each packed row of the
// views holding its d hi halves, then its d lo halves); a staged row of a tile holds DM hi halves,
// then DM lo halves, and each product takes three MMAs (cmq.glsl). SPL: halves per element.
const int SPL = DTQ == 0 ? 2 : 1;
const int D8S = SPL * D8;          // 16-byte pieces of a staged row
const int W = BR / 16 * SP;        // subgroups per workgroup (SP of them on each 16 rows)
const int DC = DM / 16;            // 16-wide chunks of the head dim
const int DCH = (DC + SP - 1) / SP; // of them held by one subgroup of the SP on 16 rows
const int NT = W * T;              // invocations
const int LPR = T / 16;            // invocations per row when T invocations work on 16 rows
const int RS = D8S + 1;            // row stride of a [rows][DM] fp16 tile (uvec4; two halves)

#include "load8.glsl"

// The view column of staged piece c8 of a row (< D8S): hi halves first, then lo ones at D.
int piece_col(int c8)
{
    return SPL > 1 && c8 >= D8 ? D + 8 * (c8 - D8) : 8 * c8;
}

// Whether staged piece c8 holds columns of the head dim (else the padding up to DM: zeros).
bool piece_in(int c8)
{
    return 8 * (c8 % D8) < D;
}

// Two fp32 values as the fp16 pair of one 32-bit word (a in the low half).
uint pack_half2(float a, float b)
{
    return packFloat2x16(f16vec2(float16_t(a), float16_t(b)));
}

// The subgroup's invocations wait for each other, their shared-memory writes visible. Shared
// memory only: subgroupBarrier() would also order buffer memory (its semantics include
// UniformMemory), which may make an invocation wait for its own loads in flight, the next K/V
// tile's prefetch among them (on the H100 the two measured the same).
void subgroup_sync()
{
    controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
}
