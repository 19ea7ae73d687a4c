// shaders/cm_nv.glsl - what the cooperative-matrix kernels (GL_NV_cooperative_matrix) share, after
// common.glsl (included, not compiled alone): the extensions, the 16x16 fp16 operand and fp32
// accumulator types, 16-byte loads of fp16 views, a subgroup barrier.
//
// Every shared tile of these kernels is an array of uvec4 (8 halves or 4 floats), so one tile can
// hold fp32 scores and then the fp16 matrix made of them; rows are padded by 16 bytes so that the
// 8 rows of a matrix load fall in different banks. Only operations the KHR extension has too are
// used (strided loads and stores, MMA), so KHR twins differ in type names and calls only.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#include "convert.glsl"

#define AMAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CMAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

const int W = BR / 16;      // subgroups per workgroup, 16 rows each
const int DC = D / 16;      // 16-wide chunks of the head dim
const int NT = W * T;       // invocations
const int LPR = T / 16;     // invocations per row when T invocations work on 16 rows
const int RS = (D + 8) / 8; // row stride of a [rows][D] fp16 tile (uvec4)

layout(buffer_reference, std430, buffer_reference_align = 16) buffer U32x4 { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32x4 { vec4 v[]; };

// Eight consecutive fp16 elements of a view from element index x (relative to the view's
// base) as one uvec4: a 16-byte load where the caller checked alignment (params flag bit 3),
// else element by element. Elements outside the tensor (inside = false) read as 0.
uvec4 load8(View t, bool vec, uint x, bool inside)
{
    if (!inside)
        return uvec4(0);
    if (vec)
        return U32x4(t.addr + 2ul * uint64_t(x + uint(t.off))).v[0];
    uvec4 r;
    UNROLL for (int k = 0; k < 4; k++) {
        float a = load_elem(t, 1, x + uint(2 * k)), z = load_elem(t, 1, x + uint(2 * k + 1));
        r[k] = packFloat2x16(f16vec2(float16_t(a), float16_t(z)));
    }
    return r;
}

// load8 of a view of dtype dt (1 fp16, 2 bf16): bf16 elements are converted to fp16 after
// scaling by sc, a power of two (bf16_scale below), so that the view's largest magnitude lands
// in [2^14, 2^15): every bf16 value of at least 2^-28 times that maximum is then a normal fp16
// and keeps all 8 of its significant bits (fp16 has 11); smaller ones round to fp16's absolute
// step 2^-24 (before the scaling: 2^-38 of the maximum or less). fp16 views load as load8 (sc
// unused).
uvec4 load8s(View t, int dt, bool vec, uint x, bool inside, float sc)
{
    if (dt != 2)
        return load8(t, vec, x, inside);
    if (!inside)
        return uvec4(0);
    uvec4 r;
    if (vec) {
        const uvec4 w = U32x4(t.addr + 2ul * uint64_t(x + uint(t.off))).v[0];
        UNROLL for (int k = 0; k < 4; k++)
            r[k] = packFloat2x16(f16vec2(float16_t(uintBitsToFloat(w[k] << 16) * sc),
                                         float16_t(uintBitsToFloat(w[k] & 0xffff0000u) * sc)));
        return r;
    }
    UNROLL for (int k = 0; k < 4; k++) {
        float a = load_elem(t, 2, x + uint(2 * k)), z = load_elem(t, 2, x + uint(2 * k + 1));
        r[k] = packFloat2x16(f16vec2(float16_t(a * sc), float16_t(z * sc)));
    }
    return r;
}

// The scales of views the host converted from bf16 into packed fp16 (vk_attn.c, elem_cvt.comp),
// from the largest magnitudes' bits at params.amax (q, k, v, dout), where flag bits 8, 6, 7, 9
// say so; 1 for the others. sc = (q, k, v, dout); dout's is bf16_scale_dout (V converted too).
vec4 cvt_scales(uint64_t amax, int flags)
{
    vec4 sc = vec4(1.0);
    if ((flags & 0x3c0) != 0) {
        U32 am = U32(amax);
        sc.x = (flags & 256) != 0 ? bf16_scale(am.v[0]) : 1.0;
        sc.y = (flags & 64) != 0 ? bf16_scale(am.v[1]) : 1.0;
        sc.z = (flags & 128) != 0 ? bf16_scale(am.v[2]) : 1.0;
        sc.w = (flags & 512) != 0 ? bf16_scale_dout(am.v[3], am.v[2], D) : 1.0;
    }
    return sc;
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
