// shaders/rt.glsl - what the register-tiled kernels (fwd_rt.comp, bwd_rt.comp) share (included
// after common.glsl, not compiled alone).

layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32x4 { vec4 v[]; };

// 4 consecutive elements (index i of the first) of a view; vec4 loads where the host says every
// row of the fp32 tensors is 16-byte aligned (params flag bit 5)
vec4 load4(View t, int dt, uint i, bool vec)
{
    if (dt == 0 && vec)
        return F32x4(t.addr).v[i >> 2];
    return vec4(load_elem(t, dt, i), load_elem(t, dt, i + 1u), load_elem(t, dt, i + 2u),
                load_elem(t, dt, i + 3u));
}
