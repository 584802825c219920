/* internal.h: helpers shared by the kernels of lib/ (not installed). */
#ifndef SHARDC_LIB_INTERNAL_H
#define SHARDC_LIB_INTERNAL_H

#include "shardc_lib.h"

#include <string.h>

static inline int sk_valid_dtype(sk_dtype t) { return (int)t >= 0 && t < SK_DTYPE_COUNT; }

static inline int sk_valid_shape(sc_shape s) {
    if (s.rank < 0 || s.rank > SC_MAX_RANK)
        return 0;
    for (int d = 0; d < s.rank; d++)
        if (s.dims[d] < 0)
            return 0;
    return 1;
}

/* Row-major strides in elements. */
static inline void sk_strides(sc_shape s, int64_t *st) {
    int64_t m = 1;
    for (int d = s.rank - 1; d >= 0; d--) {
        st[d] = m;
        m *= s.dims[d];
    }
}

/* Element i of a floating-point or integer buffer as float / double; bf16
 * and f16 through the runtime's conversions. */
static inline float sk_load_f(sk_dtype t, const void *p, int64_t i) {
    switch (t) {
    case SK_F32: return ((const float *)p)[i];
    case SK_F64: return (float)((const double *)p)[i];
    case SK_BF16: return sc_bf16_to_float(((const uint16_t *)p)[i]);
    case SK_F16: return sc_f16_to_float(((const uint16_t *)p)[i]);
    case SK_I32: return (float)((const int32_t *)p)[i];
    default: return (float)((const uint8_t *)p)[i];
    }
}

static inline void sk_store_f(sk_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case SK_F32: ((float *)p)[i] = v; break;
    case SK_F64: ((double *)p)[i] = v; break;
    case SK_BF16: ((uint16_t *)p)[i] = sc_bf16_from_float(v); break;
    case SK_F16: ((uint16_t *)p)[i] = sc_f16_from_float(v); break;
    default: break;   /* integer stores go through sk_convert */
    }
}

/* dst (contiguous, shape `dims` of `rank`) = the elements of src at
 * sum(index[d] * sstride[d]) (strides in elements, 0 for a broadcast dim).
 * The one loop behind transpose, broadcast, slices and dot operand packing. */
void sk_strided_copy(size_t esize, int rank, const int64_t *dims, const void *src,
                     const int64_t *sstride, void *dst);

#endif
