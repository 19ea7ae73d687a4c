#version 460
// Build-time check: GL_KHR_shader_subgroup_shuffle (the subgroup variants of the kernels).
#extension GL_KHR_shader_subgroup_shuffle : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer B { float v[]; };
void main() { v[gl_LocalInvocationIndex] = subgroupShuffleXor(v[gl_LocalInvocationIndex], 1u); }
