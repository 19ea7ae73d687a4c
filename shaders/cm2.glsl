// shaders/cm2.glsl - what the workgroup-scope cooperative-matrix kernels (GL_NV_cooperative_matrix2:
// fwd_cm2.comp, bwd_dq_cm2.comp, bwd_dkv_cm2.comp) share, after common.glsl (included, not
// compiled alone): the extensions, fp16 views as arrays, the matrix shapes' names, tensor
// layouts over the [B, n, H, d] views.
//
// A workgroup of NT invocations (constant 8; the host takes a count the device lists for fp16
// workgroup-scope matrices) holds whole matrices of BR or BC rows and DP columns: the head dim
// rounded up to 16, so that every head dim the API accepts (multiples of 8) runs; the columns
// past D read 0 through the tensor layouts' clamping and are never stored. No invocation knows
// which elements it holds: row-wise work goes through the extension's reductions and
// per-element functions, and a loop over the elements of several matrices pairs element e of
// each only where they have one type (one layout).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#include "convert.glsl"
#include "load8.glsl"

layout(buffer_reference, std430, buffer_reference_align = 2) buffer F16 { float16_t v[]; };

const int NT = int(gl_WorkGroupSize.x);
const uint DP = uint((D + 15) / 16 * 16); // the head dim as the matrices hold it

#define WG gl_ScopeWorkgroup
#define ACC gl_MatrixUseAccumulator
#define TLAYOUT tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>

// rows x D elements of a view or accumulator from element base (its first row), row stride
// `stride`; outside it loads read 0 and stores do nothing
TLAYOUT rows_layout(int rows, int stride)
{
    TLAYOUT t = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    t = setTensorLayoutDimensionNV(t, uint(rows), uint(D));
    return setTensorLayoutStrideNV(t, uint(stride), 1u);
}

// element index of row 0, column 0 of head h of batch b in a view (its offset included)
uint view_base(View t, int b, int h)
{
    return uint(t.off) + view_index(t, b, 0, h, 0);
}

float fmax2(const in float x, const in float y)
{
    return max(x, y);
}

float fadd2(const in float x, const in float y)
{
    return x + y;
}

float first2(const in float x, const in float y)
{
    return x;
}

// an accumulator element plus s times the new one
float acc_elem(const in uint r, const in uint c, const in float x, const in float old,
               const in float s)
{
    return fma(s, x, old);
}
