#version 460
// Build-time check: GL_KHR_cooperative_matrix with fp16 A and B operands and an fp32
// accumulator, element access, strided loads and stores (the *_khr builds of the
// cooperative-matrix kernels, cm_nv.glsl with -DBURST_CM_KHR).
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
layout(std430, binding = 1) buffer C { float c[]; };
void main()
{
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> x;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> w;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> y =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(x, a, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(w, a, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
    y = coopMatMulAdd(x, w, y);
    for (int k = 0; k < y.length(); k++)
        y[k] *= 2.0;
    coopMatStore(y, c, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
