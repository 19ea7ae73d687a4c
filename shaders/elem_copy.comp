#version 460
// shaders/elem_copy.comp - dst = src over a [B, n, H, d] view, converting dtype DTS -> DTD
// (the backend's copy op; host side runtime/vulkan/vk_elem_gpu.c).
//
// A unit is a pair of neighbouring elements c = 2k, 2k + 1 of one row (b, i, h) (the second is
// absent at the end of an odd row): units [0, rows * pairs) in row-major [B, n, H] order, so
// neighbouring invocations touch neighbouring memory. Equal dtypes copy the bits (NaN payloads,
// signalling NaNs included, as the cpu's memmove); others go through the fp32 bits with the
// conversions of convert.glsl. A half-type destination pair whose first element starts a word
// is stored as one word; otherwise each element is merged into its word with atomics, since the
// other half may be another row's (odd d, odd strides) or outside the tensor.
#extension GL_GOOGLE_include_directive : require
#include "elem.glsl"

void main()
{
    ElemParams P = ElemParams(pc.params);
    const uint64_t units = P.units, grid = elem_grid();
    const int64_t d = P.shape[3], nn = P.shape[1], hh = P.shape[2];
    const uint64_t pairs = uint64_t((d + 1) / 2);
    const uint64_t es = DTS == 0 ? 4ul : 2ul, ed = DTD == 0 ? 4ul : 2ul;
    for (uint64_t u = elem_first(); u < units; u += grid) {
        const uint64_t row = elem_div(u, pairs), k = u - row * pairs;
        int64_t b, i, h;
        elem_row(row, nn, hh, b, i, h);
        const int64_t c = 2 * int64_t(k);
        const int64_t so = b * P.sstride[0] + i * P.sstride[1] + h * P.sstride[2] + c;
        const int64_t dof = b * P.dstride[0] + i * P.dstride[1] + h * P.dstride[2] + c;
        const uint64_t ps = P.src + uint64_t(so) * es, pd = P.dst + uint64_t(dof) * ed;
        const bool two = c + 1 < d;
        uint x0 = elem_load(DTS, ps), x1 = two ? elem_load(DTS, ps + es) : 0u;
        if (DTS != DTD) {
            x0 = from_f32_bits(DTD, to_f32_bits(DTS, x0));
            x1 = from_f32_bits(DTD, to_f32_bits(DTS, x1));
        }
        if (DTD == 0) {
            Word(pd).v = x0;
            if (two)
                Word(pd + 4ul).v = x1;
        } else if (two && (pd & 2ul) == 0ul) {
            Word(pd).v = x0 | (x1 << 16);
        } else {
            elem_store_half(pd, x0);
            if (two)
                elem_store_half(pd + 2ul, x1);
        }
    }
}
