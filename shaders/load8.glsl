// shaders/load8.glsl - what the kernels on fp16 matrix operands (cm_nv.glsl, *_cm2.comp) share
// about their inputs: 16-byte loads of fp16 views, and of bf16 views scaled into fp16, and the
// scales of views the host converted; after common.glsl and convert.glsl (included, not
// compiled alone).

layout(buffer_reference, std430, buffer_reference_align = 16) buffer U32x4 { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32x4 { vec4 v[]; };

// Eight consecutive fp16 elements of a view from element index x (relative to the view's
// base) as one uvec4: a 16-byte load where the caller checked alignment (params flag bit 3),
// else element by element. Elements outside the tensor (inside = false) read as 0.
uvec4 load8(View t, bool vec, uint x, bool inside)
{
    if (!inside)
        return uvec4(0);
    if (vec)
        return U32x4(t.addr + 2ul * uint64_t(x + uint(t.off))).v[0];
    uvec4 r;
    UNROLL for (int k = 0; k < 4; k++) {
        float a = load_elem(t, 1, x + uint(2 * k)), z = load_elem(t, 1, x + uint(2 * k + 1));
        r[k] = packFloat2x16(f16vec2(float16_t(a), float16_t(z)));
    }
    return r;
}

// load8 of a view of dtype dt (1 fp16, 2 bf16; anything else: packed fp16 halves, as fp32
// views reach the *_cmq kernels, loaded as fp16): bf16 elements are converted to fp16 after
// scaling by sc, a power of two (bf16_scale below), so that the view's largest magnitude lands
// in [2^14, 2^15): every bf16 value of at least 2^-28 times that maximum is then a normal fp16
// and keeps all 8 of its significant bits (fp16 has 11); smaller ones round to fp16's absolute
// step 2^-24 (before the scaling: 2^-38 of the maximum or less). fp16 views load as load8 (sc
// unused).
uvec4 load8s(View t, int dt, bool vec, uint x, bool inside, float sc)
{
    if (dt != 2)
        return load8(t, vec, x, inside);
    if (!inside)
        return uvec4(0);
    uvec4 r;
    if (vec) {
        const uvec4 w = U32x4(t.addr + 2ul * uint64_t(x + uint(t.off))).v[0];
        UNROLL for (int k = 0; k < 4; k++)
            r[k] = packFloat2x16(f16vec2(float16_t(uintBitsToFloat(w[k] << 16) * sc),
                                         float16_t(uintBitsToFloat(w[k] & 0xffff0000u) * sc)));
        return r;
    }
    UNROLL for (int k = 0; k < 4; k++) {
        float a = load_elem(t, 2, x + uint(2 * k)), z = load_elem(t, 2, x + uint(2 * k + 1));
        r[k] = packFloat2x16(f16vec2(float16_t(a * sc), float16_t(z * sc)));
    }
    return r;
}

// The scales of views the host converted from bf16 into packed fp16, or from fp32 into packed
// fp16 halves (vk_attn.c, elem_cvt.comp), from the largest magnitudes' bits at params.amax
// (q, k, v, dout), where flag bits 8, 6, 7, 9 say so; 1 for the others. sc = (q, k, v, dout);
// dout's is bf16_scale_dout (V converted too).
vec4 cvt_scales(uint64_t amax, int flags)
{
    vec4 sc = vec4(1.0);
    if ((flags & 0x3c0) != 0) {
        U32 am = U32(amax);
        sc.x = (flags & 256) != 0 ? bf16_scale(am.v[0]) : 1.0;
        sc.y = (flags & 64) != 0 ? bf16_scale(am.v[1]) : 1.0;
        sc.z = (flags & 128) != 0 ? bf16_scale(am.v[2]) : 1.0;
        sc.w = (flags & 512) != 0 ? bf16_scale_dout(am.v[3], am.v[2], D) : 1.0;
    }
    return sc;
}
