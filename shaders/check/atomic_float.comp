#version 460
// Build-time check: GL_EXT_shader_atomic_float on buffer references (dK/dV kernel adding dQ by
// float atomics, bwd_dkvq_rt).
#extension GL_EXT_shader_atomic_float : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 32) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F { float v[]; };
layout(push_constant) uniform Push { uint64_t a; } pc;
void main() { atomicAdd(F(pc.a).v[gl_LocalInvocationIndex], 1.0); }
