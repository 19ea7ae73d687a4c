#version 460
// Build-time check: GL_NV_cooperative_matrix with fp16 inputs and fp32 accumulators, element
// access, and the subgroup shuffles and votes that fwd_cm_nv uses beside it.
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
layout(std430, binding = 1) buffer C { float c[]; };
void main()
{
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> x;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> y = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    coopMatLoadNV(x, a, 0, 16, false);
    y = coopMatMulAddNV(x, x, y);
    if (subgroupAll(subgroupShuffleXor(c[0], 1u) == 0.0))
        for (int k = 0; k < y.length(); k++)
            y[k] *= 2.0;
    coopMatStoreNV(y, c, 0, 16, false);
}
