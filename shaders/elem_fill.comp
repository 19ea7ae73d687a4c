#version 460
// shaders/elem_fill.comp - dst[i] = value for i < count, fp32 (the backend's fill op; host side
// runtime/vulkan/vk_elem_gpu.c). The value travels as its bits, so NaN payloads and -0 are kept.
#extension GL_GOOGLE_include_directive : require
#include "elem.glsl"

void main()
{
    ElemParams P = ElemParams(pc.params);
    const uint64_t units = P.units, grid = elem_grid();
    const uint value = P.value;
    for (uint64_t u = elem_first(); u < units; u += grid)
        Word(P.dst + 4ul * u).v = value;
}
