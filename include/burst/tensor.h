/*
 * burst/tensor.h - element types and tensor descriptors.
 *
 * A burst_tensor describes memory the caller owns; burst never frees or keeps it past a call.
 * The logical layout of every attention tensor is [B, n, H, d] (batch, local tokens, heads,
 * head dim), the FlashAttention layout. Strides are in ELEMENTS, one per logical dimension, so
 * any physical order (e.g. [B, H, n, d]) can be described. Requirements, checked at each call:
 *   - stride[3] (head dim) == 1: the innermost dimension is contiguous;
 *   - every stride >= 1 and the view does not overlap itself (for outputs);
 *   - all inputs and outputs of one call share one dtype (except lse, always fp32).
 *
 * Memory lives where the context's backend computes: host memory for the cpu backend.
 */
#ifndef BURST_TENSOR_H
#define BURST_TENSOR_H

#include "burst/export.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum burst_dtype {
    BURST_DTYPE_FP32 = 0,
    BURST_DTYPE_FP16 = 1, /* IEEE binary16 */
    BURST_DTYPE_BF16 = 2, /* bfloat16: the upper half of an fp32 */
} burst_dtype_t;

#define BURST_TENSOR_DIMS 4

struct burst_tensor {
    void *data;                        /* first element; caller-owned */
    burst_dtype_t dtype;               /* element type */
    int64_t shape[BURST_TENSOR_DIMS];  /* B, n, H, d */
    int64_t stride[BURST_TENSOR_DIMS]; /* elements between neighbours along each dimension */
};

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. Thread-safe. */
BURST_API size_t burst_dtype_size(burst_dtype_t dtype);

/* "fp32", "fp16", "bf16", or "unknown". Thread-safe. */
BURST_API const char *burst_dtype_name(burst_dtype_t dtype);

/*
 * Convenience: a descriptor for a densely packed row-major [B, n, H, d] tensor at data.
 * Does not validate (validation happens where the tensor is used). Thread-safe.
 */
BURST_API struct burst_tensor burst_tensor_contiguous(void *data, burst_dtype_t dtype,
                                                      int64_t batch, int64_t seq, int64_t heads,
                                                      int64_t head_dim);

/* Conversions between fp32 and the half types (round to nearest even). Thread-safe. */
BURST_API uint16_t burst_fp32_to_fp16(float x);
BURST_API float burst_fp16_to_fp32(uint16_t h);
BURST_API uint16_t burst_fp32_to_bf16(float x);
BURST_API float burst_bf16_to_fp32(uint16_t h);
/* ... and e4m3 (OCP FP8 E4M3FN, the fp8 forward's element: 1 sign, 4 exponent bits of bias 7,
 * 3 mantissa bits; largest finite 448, no infinities): fp32 -> e4m3 rounds to nearest even and
 * saturates to +-448 (infinities too), NaN stays NaN (0x7f, 0xff); e4m3 -> fp32 is exact. Since
 * API 0.7. Thread-safe. */
BURST_API uint8_t burst_fp32_to_e4m3(float x);
BURST_API float burst_e4m3_to_fp32(uint8_t b);

#ifdef __cplusplus
}
#endif

#endif /* BURST_TENSOR_H */
