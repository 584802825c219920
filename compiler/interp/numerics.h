/* The value sets of the dtypes, for the reference interpreter and the .npy
 * reader and writer: every element is held as a double, and these round a
 * double to the nearest value its dtype can hold. */
#ifndef SHARDC_NUMERICS_H
#define SHARDC_NUMERICS_H

#include "../ir/ir.h"

/* Round `x` to a value of `dtype`: f32 as a C (float) cast does, bf16 and
 * f16 to nearest, ties to even (overflow gives inf, NaN stays NaN), i32 by
 * truncation toward zero, saturating out of range with NaN giving 0 (as
 * XLA's convert; a C cast would be undefined there), bool to 0 or 1. */
double num_round(double x, int dtype);

/* IEEE binary16 bit patterns; num_to_f16_bits rounds first. */
double num_from_f16_bits(uint16_t h);
uint16_t num_to_f16_bits(double x);

/* i32 arithmetic wraps modulo 2^32, as XLA's does. */
int32_t num_wrap_i32(int64_t v);

#endif
