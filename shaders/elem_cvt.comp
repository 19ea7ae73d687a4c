#version 460
// shaders/elem_cvt.comp - a bf16 or fp32 (DTS) [B, n, H, d] view scaled into fp16's range: dst,
// packed fp16 (d a multiple of 8, dst 16-byte aligned), with 2^s = bf16_scale of the largest
// magnitude's bits at P.aux (elem_amax.comp, run before), or for a backward's dO bf16_scale_dout
// of those and V's at P.aux2:
//   bf16: [B, n, H, d], fp16(x 2^s), exact (bf16's 8 significant bits fit fp16's 11) for every
//         value of at least 2^-28 times the view's maximum;
//   fp32: [B, n, H, 2 d], each row's d hi halves fp16(x 2^s), then its d lo halves
//         fp16(x 2^s - hi): hi + lo is x 2^s within 2^-22 of it (fp16's 11 bits twice) for
//         every value of at least 2^-17 times the maximum, within 2^-39 of the maximum below.
// The cooperative-matrix kernels read their inputs so converted once per call (host side
// runtime/vulkan/vk_attn.c) instead of converting each tile in every workgroup; they undo the
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
        const uint64_t es = DTS == 0 ? 4ul : 2ul, w = DTS == 0 ? 2ul * uint64_t(d) : uint64_t(d);
        uvec4 r, rl;
        for (int k = 0; k < 4; k++) {
            uint hv[2], lv[2];
            for (int u = 0; u < 2; u++) {
                const uint64_t at = P.src + uint64_t(so + 2 * k + u) * es;
                const float xs = uintBitsToFloat(to_f32_bits(DTS, elem_load(DTS, at))) * sc;
                hv[u] = f32_bits_to_f16(floatBitsToUint(xs));
                // the remainder is exact in fp32: xs and hi agree in their leading bits
                const float rem = xs - uintBitsToFloat(f16_to_f32_bits(hv[u]));
                lv[u] = f32_bits_to_f16(floatBitsToUint(rem));
            }
            r[k] = hv[0] | (hv[1] << 16);
            rl[k] = lv[0] | (lv[1] << 16);
        }
        Word4(P.dst + 2ul * (row * w + uint64_t(c0))).v = r;
        if (DTS == 0)
            Word4(P.dst + 2ul * (row * w + uint64_t(d + c0))).v = rl;
    }
}
