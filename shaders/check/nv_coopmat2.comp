#version 460
// Build-time check: GL_NV_cooperative_matrix2 as fwd_cm2.comp uses it: workgroup-scope
// matrices of flexible size, tensor layouts with clamping and a transposing view, row
// reductions, per-element operations, conversion between matrix uses.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
layout(local_size_x = 128) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
layout(std430, binding = 1) buffer C { float c[]; };
float add2(const in float x, const in float y)
{
    return x + y;
}
float twice(const in uint r, const in uint col, const in float x)
{
    return 2.0 * x;
}
void main()
{
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> t =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    t = setTensorLayoutDimensionNV(t, 100, 40);
    t = setTensorLayoutStrideNV(t, 48, 1);
    tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
    coopmat<float16_t, gl_ScopeWorkgroup, 64, 48, gl_MatrixUseA> x;
    coopmat<float16_t, gl_ScopeWorkgroup, 48, 32, gl_MatrixUseB> w;
    coopMatLoadTensorNV(x, a, 0, sliceTensorLayoutNV(t, 0, 64, 0, 48));
    coopMatLoadTensorNV(w, a, 0, sliceTensorLayoutNV(t, 0, 32, 0, 48), tr);
    coopmat<float, gl_ScopeWorkgroup, 64, 32, gl_MatrixUseAccumulator> y =
        coopmat<float, gl_ScopeWorkgroup, 64, 32, gl_MatrixUseAccumulator>(0.0);
    y = coopMatMulAdd(x, w, y);
    coopmat<float, gl_ScopeWorkgroup, 64, 32, gl_MatrixUseAccumulator> s;
    coopMatReduceNV(s, y, gl_CooperativeMatrixReduceRowNV, add2);
    coopMatPerElementNV(s, s, twice);
    coopmat<float16_t, gl_ScopeWorkgroup, 64, 32, gl_MatrixUseA> p =
        coopmat<float16_t, gl_ScopeWorkgroup, 64, 32, gl_MatrixUseA>(s);
    y = coopMatMulAdd(p, coopmat<float16_t, gl_ScopeWorkgroup, 32, 32, gl_MatrixUseB>(1.0), y);
    coopMatStoreTensorNV(y, c, 0, sliceTensorLayoutNV(t, 0, 64, 0, 32));
}
