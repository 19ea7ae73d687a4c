#version 460
// shaders/cm_layout_nv.comp - which element of a 16 x 16 fp32 cooperative matrix
// (GL_NV_cooperative_matrix, subgroup scope; with -DBURST_CM_KHR GL_KHR_cooperative_matrix, an
// accumulator) each invocation holds. The extension leaves this to
// the implementation; the register-softmax forward (fwd_cmq_nv.comp) relies on the layout of
// NVIDIA's tensor-core fragments, and on the conversion of such a matrix to fp16 keeping every
// element in place, which the host checks with this shader once per device (vk_cmq.c) before
// it lets that kernel run.
//
// One subgroup of T invocations (workgroup size = constant 8, set to the subgroup size). The
// matrix holds r * 16 + c at row r, column c (loaded from shared memory, row-major); invocation
// `lane` writes its elements, res[1 + lane * 16 + e] = element e (e < length, at most 16), and
// invocation 0 writes the length to res[0], at the address in the push constant. Then the
// matrix converted to fp16 is stored row-major through shared memory: res[1 + T * 16 + x] =
// its element x (r * 16 + c), which must be x again. Under the KHR extension, which converts no
// accumulator into an operand, that conversion is the kernels' (cm_nv.glsl CM_TO_A): an fp16
// A operand whose element e is set to the accumulator's element e, so the check also finds
// whether both uses hold the same (row, column) as element e.
#ifdef BURST_CM_KHR
#extension GL_KHR_cooperative_matrix : require
#else
#extension GL_NV_cooperative_matrix : require
#endif
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x_id = 8) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(push_constant) uniform Push { uint64_t dst; } pc;

shared float sm[256];
shared uvec4 sh16[32]; // 16 x 16 halves, 2 uvec4 a row

void main()
{
    const uint lane = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
    for (uint x = lane; x < 256u; x += n)
        sm[x] = float(x);
    barrier();
#ifdef BURST_CM_KHR
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> m;
    coopMatLoad(m, sm, 0u, 16u, gl_CooperativeMatrixLayoutRowMajor);
#else
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> m;
    coopMatLoadNV(m, sm, 0u, 16u, false);
#endif
    F32 res = F32(pc.dst);
    if (lane == 0u)
        res.v[0] = float(m.length());
    for (int e = 0; e < m.length() && e < 16; e++)
        res.v[1u + lane * 16u + uint(e)] = m[e];
#ifdef BURST_CM_KHR
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> h;
    for (int e = 0; e < h.length(); e++)
        h[e] = e < m.length() ? float16_t(m[e]) : float16_t(-1.0);
    coopMatStore(h, sh16, 0u, 2u, gl_CooperativeMatrixLayoutRowMajor);
#else
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> h = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(m);
    coopMatStoreNV(h, sh16, 0u, 2u, false);
#endif
    barrier();
    for (uint x = lane; x < 256u; x += n) {
        uint w = sh16[x / 8u][(x % 8u) / 2u];
        vec2 two = unpackHalf2x16(w);
        res.v[1u + n * 16u + x] = (x & 1u) != 0u ? two.y : two.x;
    }
}
