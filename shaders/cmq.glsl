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

// The accumulator c as the fp16 operand a and, with split operands (SPL > 1), its remainder as
// al: each element of c first keeps its leading 11 significant bits (a mask on its bits: exact
// in fp16 from 2^-14 up; a float16_t round trip in fp32 is not used, as a compiler may take it
// for the identity), and cl holds the exact remainder, below 2^-10 of the element, which al
// rounds to fp16: hi + lo within 2^-21 of c where |c| >= 2^-3 (lo normal in fp16; the
// kernels scale c into that range where they can), within 2^-25 absolute below (c changes; cl
// is scratch).
#define CM_TO_A2(a, al, c, cl)                                                                    \
    {                                                                                             \
        if (SPL > 1) {                                                                            \
            UNROLL for (int e_ = 0; e_ < NE; e_++) {                                              \
                const float h_ = uintBitsToFloat(floatBitsToUint((c)[e_]) & 0xffffe000u);         \
                (cl)[e_] = (c)[e_] - h_;                                                          \
                (c)[e_] = h_;                                                                     \
            }                                                                                     \
            CM_TO_A(al, cl);                                                                      \
        }                                                                                         \
        CM_TO_A(a, c);                                                                            \
    }
