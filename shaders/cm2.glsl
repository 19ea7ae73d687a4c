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

// Tensor loads and stores need a 16-byte aligned base (the extension's rule; the rows and
// columns they select need not be aligned): the base of a tensor is the 16-byte aligned address
// at or below its element 0, and its rows start `skip` elements into the layout's rows
struct TBase {
    uint64_t addr; // 16-byte aligned
    uint skip;     // elements from there to element 0 (0..7 fp16, 0..3 fp32)
};

// the tensor of esize-byte elements whose element 0 is elem elements from addr
TBase tensor_base(uint64_t addr, uint elem, uint esize)
{
    const uint64_t a = addr + uint64_t(esize) * uint64_t(elem), a16 = a & ~uint64_t(15);
    return TBase(a16, uint(a - a16) / esize);
}

// head h of batch b of a view: [n][D] rows of stride s1 from element (b, 0, h, 0)
TBase view_tensor(View t, int b, int h)
{
    return tensor_base(t.addr, uint(t.off) + view_index(t, b, 0, h, 0), 2u);
}

// rows x D elements, row stride `stride`, from the tensor base's element skip: outside them
// loads read 0 and stores do nothing
TLAYOUT rows_layout(int rows, int stride, uint skip)
{
    TLAYOUT t = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    t = setTensorLayoutDimensionNV(t, uint(rows), uint(D) + skip);
    return setTensorLayoutStrideNV(t, uint(stride), 1u);
}

// rows r0 .. r0 + nr of such a layout, DP columns from element 0
#define ROWS(t, tb, r0, nr) sliceTensorLayoutNV(t, uint(r0), uint(nr), (tb).skip, DP)

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
