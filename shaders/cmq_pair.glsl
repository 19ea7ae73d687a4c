// shaders/cmq_pair.glsl - the sum of two subgroups' partial score matrices, for the *_cmq backward
// kernels beyond d = 128, or d = 64 with split fp32 inputs (SP = 2, cm_nv.glsl): the two
// subgroups on the same 16 rows each hold half of the head dim's chunks, so each has the
// products over its half only; they swap them through shared memory and both add (a + b =
// b + a in fp32: both get the same sums, bit for bit). After cm_nv.glsl and cmq.glsl
// (included, not compiled alone), after the kernel's shared arrays.
//
// The swap waits on workgroup barriers, which every subgroup reaches at each 16-row chunk n of a
// tile (the kernels' chunk loops are uniform): the partials are written, a barrier, the
// partner's read. A chunk after the first of its tile waits for the reads of the one before it
// first; the first chunk of a tile needs no such wait, as the barriers that stage a tile come
// between it and the previous tile's reads. (Counters in shared memory that only the pair waits
// on measured 10-21 % slower on the H200: their atomics cost more than the barriers.)

const int XM = 2 * 16 * 16; // floats of one subgroup's two partial matrices (32 lanes x NE, twice)
shared float xf[SP > 1 ? W * XM : 1];

// a and b (accumulators) of subgroup sg += those of its partner, at the tile's chunk n
#define PAIR_SUM(a, b, sg, lane, n)                                                               \
    {                                                                                             \
        const int p_ = (sg) ^ 1;                                                                  \
        if ((n) > 0)                                                                              \
            barrier(); /* the previous chunk's partials are read */                               \
        UNROLL for (int e_ = 0; e_ < NE; e_++) {                                                  \
            xf[(sg) * XM + e_ * 32 + (lane)] = (a)[e_];                                           \
            xf[(sg) * XM + (NE + e_) * 32 + (lane)] = (b)[e_];                                    \
        }                                                                                         \
        barrier();                                                                                \
        UNROLL for (int e_ = 0; e_ < NE; e_++) {                                                  \
            (a)[e_] += xf[p_ * XM + e_ * 32 + (lane)];                                            \
            (b)[e_] += xf[p_ * XM + (NE + e_) * 32 + (lane)];                                     \
        }                                                                                         \
    }
