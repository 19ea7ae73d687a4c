#version 460
// shaders/bwd_delta.comp - D = rowsum(dO * O) for the backward: one invocation per (batch, row,
// head), x + y * (groups in x) * local size indexes the row-heads in [B, n, H] order; result
// [B, H, n] fp32. Params: q = O, dout = dO, delta = D, nq = n, hq = H.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

void main()
{
    Params P = Params(pc.params);
    const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    const uint total = uint(P.batch * P.nq * P.hq);
    if (idx >= total)
        return;
    const int h = int(idx % uint(P.hq)), i = int(idx / uint(P.hq) % uint(P.nq));
    const int b = int(idx / uint(P.hq * P.nq));
    float acc = 0.0;
    for (int c = 0; c < D; c++)
        acc = fma(load_elem(P.dout, DTO, view_index(P.dout, b, i, h, c)),
                  load_elem(P.q, DTQ, view_index(P.q, b, i, h, c)), acc);
    F32(P.delta).v[(b * P.hq + h) * P.nq + i] = acc;
}
