/*
 * runtime/tensor_check.h - validation of caller tensors (private).
 */
#ifndef BURST_RUNTIME_TENSOR_CHECK_H
#define BURST_RUNTIME_TENSOR_CHECK_H

#include <stdint.h>

#include "burst/tensor.h"

/*
 * Check that tensor `arg` (named `name` in messages, for entry point `who`) has the expected
 * dtype and shape [B, n, H, d], unit innermost stride, positive strides, and, when `output`,
 * no self-overlap. Returns BURST_OK or an error with a message naming the argument and value.
 */
burst_status_t burst_tensor_check(const char *who, const char *name, const struct burst_tensor *t,
                                  burst_dtype_t dtype, int64_t b, int64_t n, int64_t h, int64_t d,
                                  int output);

/* Shape and stride checks only (no expected shape), for the layout helpers. */
burst_status_t burst_tensor_check_view(const char *who, const char *name,
                                       const struct burst_tensor *t, int output);

/* Do the memory ranges of two views intersect? (conservative: by address extent) */
int burst_tensor_ranges_overlap(const struct burst_tensor *a, const struct burst_tensor *b);

#endif /* BURST_RUNTIME_TENSOR_CHECK_H */
