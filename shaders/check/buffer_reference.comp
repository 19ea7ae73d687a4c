#version 460
// Build-time check: GL_EXT_buffer_reference with 64-bit addresses (every kernel needs it).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 1) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(push_constant) uniform Push { uint64_t a; } pc;
void main() { F32(pc.a).v[0] = 1.0; }
