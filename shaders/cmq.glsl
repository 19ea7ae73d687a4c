// shaders/cmq.glsl - what the kernels on the accumulators' elements (fwd_cmq_nv.comp,
// bwd_dq_cmq_nv.comp, bwd_dkv_cmq_nv.comp) share, after cm_nv.glsl (included, not compiled
// alone): the fragment layout the host found on the device (shaders/cm_layout_nv.comp,
// runtime/vulkan/vk_cmq.c), as specialization constants 9 and 10. With 32 invocations, element
// e of invocation `lane` of a 16 x 16 fp32 matrix is at
//   row    lane / 4 + 8 * ((ROWSEL >> e) & 1)
//   column 2 * (lane % 4) + ((COLOFF >> 4 e) & 15)
// so the four invocations of a quad hold rows r and r + 8 between them.
layout(constant_id = 9) const int ROWSEL = 0xcc;        // bit e: element e is in row r + 8
layout(constant_id = 10) const int COLOFF = 0x98981010; // 4 bits per element: column offset

const int NE = 256 / T; // accumulator elements per invocation (8)

bool row_b(int e) // element e is in the quad's second row (r + 8)
{
    return ((ROWSEL >> e) & 1) != 0;
}

int col_of(int e, int lane) // column of element e in its 16 x 16 matrix
{
    return 2 * (lane & 3) + ((COLOFF >> (4 * e)) & 15);
}
