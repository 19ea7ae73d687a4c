#version 460
// shaders/elem_amax.comp - the largest magnitude of a [B, n, H, d] view, as its bits: the word
// at dst becomes max(dst, max over the view of |x|'s bits) by atomicMax (half types:
// bits & 0x7fff; fp32: (bits & 0x7fffffff) >> 16, the bf16 bits of |x| truncated, which keep
// its exponent; for finite values and infinities the bits order as the magnitudes; a NaN
// orders above them all). The cooperative-matrix kernels scale bf16 and fp32 inputs into fp16's
// range by a power of two from it (convert.glsl bf16_scale; host side runtime/vulkan/vk_attn.c,
// which zeroes dst first).
//
// A unit is up to 8 neighbouring elements of one row (b, i, h): units [0, rows * ceil(d / 8))
// in row-major [B, n, H] order. Each invocation keeps its own maximum, the workgroup reduces
// them in shared memory, and one invocation per workgroup does the atomic: the host keeps the
// grid small (a few hundred workgroups), so few atomics meet on the one word.
#extension GL_GOOGLE_include_directive : require
#include "elem.glsl"

shared uint red[gl_WorkGroupSize.x];

void main()
{
    ElemParams P = ElemParams(pc.params);
    const uint64_t units = P.units, grid = elem_grid();
    const int64_t d = P.shape[3], nn = P.shape[1], hh = P.shape[2];
    const uint64_t chunks = uint64_t((d + 7) / 8);
    const uint64_t es = DTS == 0 ? 4ul : 2ul;
    const uint mask = DTS == 0 ? 0x7fffffffu : 0x7fffu;
    uint m = 0u;
    for (uint64_t u = elem_first(); u < units; u += grid) {
        const uint64_t row = elem_div(u, chunks);
        const int64_t c0 = 8 * int64_t(u - row * chunks);
        int64_t b, i, h;
        elem_row(row, nn, hh, b, i, h);
        const int64_t so = b * P.sstride[0] + i * P.sstride[1] + h * P.sstride[2] + c0;
        for (int64_t c = 0; c < 8 && c0 + c < d; c++)
            m = max(m, elem_load(DTS, P.src + uint64_t(so + c) * es) & mask);
    }
    const uint t = gl_LocalInvocationID.x;
    red[t] = m;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (t < s)
            red[t] = max(red[t], red[t + s]);
        barrier();
    }
    if (t == 0u)
        atomicMax(Word(P.dst).v, DTS == 0 ? red[0] >> 16 : red[0]);
}
