#version 460
// Build-time check: GL_EXT_control_flow_attributes ([[unroll]] loop hints).
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer B { float v[]; };
void main() { [[unroll]] for (int i = 0; i < 4; i++) v[i] += 1.0; }
