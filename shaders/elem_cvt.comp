#version 460
// shaders/elem_cvt.comp - a bf16 [B, n, H, d] view scaled into fp16's range: dst, packed fp16
// [B, n, H, d] (d a multiple of 8, dst 16-byte aligned), = fp16(src * 2^s) with 2^s =
// bf16_scale of the largest magnitude's bits at P.aux (elem_amax.comp, run before), or for a
// backward's dO bf16_scale_dout of those and V's at P.aux2. The
// cooperative-matrix forward reads K and V so converted once per call (host side
// runtime/vulkan/vk_attn.c) instead of converting each tile in every workgroup; it undoes the
// scale. fp32 -> fp16 rounds to nearest even, with subnormals (convert.glsl).
//
// A unit is 8 neighbouring elements of one row (b, i, h): units [0, rows * d / 8) in row-major
// [B, n, H] order, one 16-byte store each.
#extension GL_GOOGLE_include_directive : require
#include "elem.glsl"

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Word4 { uvec4 v; };

void main()
{
    ElemParams P = ElemParams(pc.params);
    const uint64_t units = P.units, grid = elem_grid();
    const int64_t d = P.shape[3], nn = P.shape[1], hh = P.shape[2];
    const uint64_t chunks = uint64_t(d / 8);
    const float sc = P.aux2 != 0ul ? bf16_scale_dout(Word(P.aux).v, Word(P.aux2).v, int(d))
                                   : bf16_scale(Word(P.aux).v);
    for (uint64_t u = elem_first(); u < units; u += grid) {
        const uint64_t row = elem_div(u, chunks);
        const int64_t c0 = 8 * int64_t(u - row * chunks);
        int64_t b, i, h;
        elem_row(row, nn, hh, b, i, h);
        const int64_t so = b * P.sstride[0] + i * P.sstride[1] + h * P.sstride[2] + c0;
        uvec4 r;
        for (int k = 0; k < 4; k++) {
            const uint lo = elem_load(2, P.src + uint64_t(so + 2 * k) * 2ul);
            const uint hi = elem_load(2, P.src + uint64_t(so + 2 * k + 1) * 2ul);
            const uint a = f32_bits_to_f16(floatBitsToUint(uintBitsToFloat(lo << 16) * sc));
            const uint z = f32_bits_to_f16(floatBitsToUint(uintBitsToFloat(hi << 16) * sc));
            r[k] = a | (z << 16);
        }
        Word4(P.dst + 2ul * (row * uint64_t(d) + uint64_t(c0))).v = r;
    }
}
