// shaders/elem.glsl - what the elementwise kernels (elem_copy, elem_fill, elem_acc) share
// (included, not compiled alone). Host side: runtime/vulkan/vk_elem_gpu.c.
//
// Addressing as in common.glsl: the only push constant is the device address of a parameter
// block (struct ElemParams, mirrored by struct burst_vk_elem_params in vk_internal.h). Element
// addresses are 64-bit byte addresses computed from 64-bit element offsets, so tensors of more
// than 2^32 elements work. Memory is read and written as 32-bit words: a half-type element is
// one half of a word, little-endian (the element at the lower address in the low 16 bits).
//
// Work items ("units") are spread over a 2-D grid of workgroups (x up to the device's, or the
// test cap BURST_VK_ELEM_GROUPS, then y) and every invocation loops over units
// gid, gid + grid, gid + 2 grid, ... so any count works with any grid.
//
// Specialization constants (ids as in common.glsl, set by vk_pipeline.c):
//   4 DTS  source dtype (0 fp32, 1 fp16, 2 bf16)
//   5 DTD  destination dtype
//   8      workgroup size
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_GOOGLE_include_directive : require

#include "convert.glsl"

layout(constant_id = 4) const int DTS = 0;
layout(constant_id = 5) const int DTD = 0;
layout(local_size_x_id = 8) in;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Word { uint v; };

layout(buffer_reference, std430, buffer_reference_align = 8) buffer ElemParams {
    uint64_t dst, src;  // byte addresses of element 0 (copy: [0, 0, 0, 0]); src unused by fill
    int64_t shape[4];   // copy: [B, n, H, d]; fill / acc: [1, 1, 1, count]
    int64_t dstride[3]; // copy: strides of dims 0..2 in elements (any sign; dim 3 has stride 1)
    int64_t sstride[3];
    uint64_t units;     // work items: copy: rows * pairs per row; fill / acc: count
    uint value;         // fill: the fp32 bits written
    uint pad;
    uint64_t aux;       // cvt: byte address of the largest magnitude's bits (elem_amax)
    uint64_t aux2;      // cvt of a backward's dO: V's (bf16_scale_dout), else 0
};

layout(push_constant) uniform Push { uint64_t params; } pc;

// First unit of this invocation and the grid's size in invocations.
uint64_t elem_first()
{
    return uint64_t(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
           gl_LocalInvocationID.x;
}

uint64_t elem_grid()
{
    return uint64_t(gl_NumWorkGroups.x * gl_NumWorkGroups.y) * gl_WorkGroupSize.x;
}

// a / b and a % b, in 32 bits when both fit (64-bit division is slow on GPUs).
uint64_t elem_div(uint64_t a, uint64_t b)
{
    return (a >> 32) == 0ul && (b >> 32) == 0ul ? uint64_t(uint(a) / uint(b)) : a / b;
}

// Row `row` of a [B, n, H, d] view in row-major [B, n, H] order as its (b, i, h); nn = n, hh = H.
void elem_row(uint64_t row, int64_t nn, int64_t hh, out int64_t b, out int64_t i, out int64_t h)
{
    const uint64_t bi = elem_div(row, uint64_t(hh));
    h = int64_t(row - bi * uint64_t(hh));
    b = int64_t(elem_div(bi, uint64_t(nn)));
    i = int64_t(bi) - b * nn;
}

// Element bits of dtype dt at byte address p (half types: the low 16 bits of the result).
uint elem_load(int dt, uint64_t p)
{
    if (dt == 0)
        return Word(p).v;
    const uint w = Word(p & ~3ul).v;
    return (p & 2ul) != 0ul ? w >> 16 : w & 0xffffu;
}

// Store half-type element bits h at byte address p without touching the other half of its word,
// which may belong to another invocation's element or to memory outside the tensor.
void elem_store_half(uint64_t p, uint h)
{
    const uint shift = (p & 2ul) != 0ul ? 16u : 0u;
    Word w = Word(p & ~3ul);
    atomicAnd(w.v, ~(0xffffu << shift));
    atomicOr(w.v, h << shift);
}
