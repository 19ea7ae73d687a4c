// shaders/common.glsl - what every burst compute shader shares (included, not compiled alone).
//
// Addressing: buffers are reached through buffer device addresses (GL_EXT_buffer_reference); the
// only push constant is the address of a parameter block (struct Params below, mirrored by
// struct burst_vk_params in runtime/vulkan/vk_internal.h) that the host writes before each
// dispatch. Half-precision tensors are read as 32-bit words and unpacked, so no 16-bit storage
// feature is needed; every buffer a shader writes is fp32.
//
// Specialization constants shared by the attention kernels (ids fixed here, set by the host's
// pipeline cache, runtime/vulkan/vk_pipeline.c):
//   0 D    head dim (multiple of 8, <= 256)
//   1 T    the scalar kernels (fwd, dq, dkv): invocations a row, 1; the register-tiled ones: the
//          chunk depth DC; the cooperative-matrix ones: the subgroup size
//   2 BR   rows per workgroup (the scalar kernels' workgroup size)
//   3 BC   rows of the tile staged in shared memory
//   4..7   dtype of q, k, v, dout (0 fp32, 1 fp16, 2 bf16)
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(constant_id = 0) const int D = 128;
layout(constant_id = 1) const int T = 1;
layout(constant_id = 2) const int BR = 64;
layout(constant_id = 3) const int BC = 16;
layout(constant_id = 4) const int DTQ = 0;
layout(constant_id = 5) const int DTK = 0;
layout(constant_id = 6) const int DTV = 0;
layout(constant_id = 7) const int DTO = 0;
layout(local_size_x_id = 8) in;

const int E = D / T; // the scalar kernels: elements of a row an invocation owns, lane + T * e
const float LOG2E = 1.4426950408889634;
const float LN2 = 0.69314718055994531;
#define NEG_INF uintBitsToFloat(0xff800000u)
#define POS_INF uintBitsToFloat(0x7f800000u)

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer I32x2 { ivec2 v[]; };

// A strided [B, n, H, d] view: base address (4-byte aligned), element offset of the first
// element from it (0 or 1 for half types), strides of dims 0..2 in elements.
struct View {
    uint64_t addr;
    int off, s0, s1, s2;
};

layout(buffer_reference, std430, buffer_reference_align = 8) buffer Params {
    View q, k, v, dout;   // dout is also O for the D kernel
    uint64_t o;           // fwd: running O; bwd: dQ accumulator
    uint64_t lse;         // fwd: running lse; bwd: final lse
    uint64_t delta;       // bwd: D
    uint64_t dk, dv;      // bwd accumulators (0 = not wanted)
    uint64_t rows;        // ivec2 [nq]: allowed key interval [kb, ke) of each query row
    int batch, nq, nk, hq, hkv, group;
    float scale;
    int flags;            // bit 0: dQ wanted, bit 1: dK, bit 2: dV; fwd_cm: bit 3: q/k/v rows
                          // are 16-byte aligned fp16 vectors of 8, bit 4: o is 16-byte aligned;
                          // fwd_rt: bit 5: q/k/v are fp32 with 16-byte aligned vectors of 4;
                          // *_cmq: bits 6, 7, 8, 9: k, v, q, dout are bf16 scaled into packed
                          // fp16, or fp32 into packed fp16 halves, by the host (elem_cvt),
                          // their scales from amax
    int lo, hi;           // fwd, dq: keys [lo, hi) only; dkv: query rows [lo, hi) only (the host
                          // splits a call into several dispatches where the device limits the
                          // loop iterations of an invocation, as lavapipe does)
    uint64_t amax;        // *_cmq with bf16 or fp32 inputs: uint [4], the bf16 bits of the
                          // largest magnitude of q, k, v, dout (shaders/elem_amax.comp)
    float cap;            // > 0: scaled scores s soft-capped to cap tanh(s / cap); 0: not
    int pad;
};

layout(push_constant) uniform Push { uint64_t params; } pc;

float load_elem(View t, int dt, uint i)
{
    i += uint(t.off);
    if (dt == 0)
        return F32(t.addr).v[i];
    uint w = U32(t.addr).v[i >> 1];
    uint h = (i & 1u) != 0u ? (w >> 16) : (w & 0xffffu);
    return dt == 1 ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}

// Soft-capping (Params.cap > 0). The kernels hold scores in log2 units, x = tau q.k log2 e; the
// capped score in those units is c tanh(x / c) with c = cap log2 e, and the backward multiplies
// dS by its derivative 1 - tanh^2 (tanh recomputed from the raw score). cap_tanh takes
// rc = 1 / c; its argument is clamped where fp32's tanh is +-1 already, so that a tanh computed
// from exponentials cannot overflow into NaN. Whether to cap is uniform (one branch per tile);
// a cap of 0 leaves the scores untouched.
const float CAP_ARG_MAX = 15.0;

float cap_tanh(const float x, const float rc)
{
    return tanh(clamp(x * rc, -CAP_ARG_MAX, CAP_ARG_MAX));
}

vec4 cap_tanh(const vec4 x, const float rc)
{
    return tanh(clamp(x * rc, vec4(-CAP_ARG_MAX), vec4(CAP_ARG_MAX)));
}

// Index of element [b, i, h, c] of a view.
uint view_index(View t, int b, int i, int h, int c)
{
    return uint(b * t.s0 + i * t.s1 + h * t.s2 + c);
}
