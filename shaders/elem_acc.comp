#version 460
// shaders/elem_acc.comp - dst[i] += (float)src[i] for i < count; dst fp32, src of dtype DTS (the
// backend's accumulate op; host side runtime/vulkan/vk_elem_gpu.c). The add is add_f32_bits
// (convert.glsl): the cpu's IEEE sum bit for bit, subnormals included, on any device.
#extension GL_GOOGLE_include_directive : require
#include "elem.glsl"

void main()
{
    ElemParams P = ElemParams(pc.params);
    const uint64_t units = P.units, grid = elem_grid();
    const uint64_t es = DTS == 0 ? 4ul : 2ul;
    for (uint64_t u = elem_first(); u < units; u += grid) {
        Word w = Word(P.dst + 4ul * u);
        w.v = add_f32_bits(w.v, to_f32_bits(DTS, elem_load(DTS, P.src + es * u)));
    }
}
