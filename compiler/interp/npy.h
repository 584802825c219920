/* NumPy .npy files for `shardc interp`: the reader and writer of lib/host/npy.c
 * (shared with generated programs, lib/shardc_npy.h) on the IR's Shape. */
#ifndef SHARDC_NPY_H
#define SHARDC_NPY_H

#include "../ir/ir.h"
#include "../../lib/shardc_npy.h"

_Static_assert((int)DT_F32 == (int)SK_F32 && (int)DT_F64 == (int)SK_F64 && (int)DT_BF16 == (int)SK_BF16 && (int)DT_F16 == (int)SK_F16 && (int)DT_I32 == (int)SK_I32 &&
               (int)DT_BOOL == (int)SK_BOOL && (int)DT_U32 == (int)SK_U32 && (int)DT_I64 == (int)SK_I64 &&
               (int)DT_U8 == (int)SK_U8 && (int)DT_COUNT == (int)SK_DTYPE_COUNT && (int)MAX_RANK == (int)SC_MAX_RANK, "the IR's dtypes are the kernel library's");

static inline sk_npy_shape npy_shape_of(const Shape *s) {
    sk_npy_shape n = {s->dtype, s->rank, {0}};
    for (int d = 0; d < s->rank; d++)
        n.dims[d] = s->dims[d];
    return n;
}

/* Read `path` into malloc'd doubles and its shape; with `want`, the file
 * must hold exactly that dtype and shape.  Returns 0, or -1 with err. */
static inline int npy_read(const char *path, const Shape *want, Shape *shape, double **data, char *err,
                           size_t errlen) {
    sk_npy_shape w = want ? npy_shape_of(want) : (sk_npy_shape){0, 0, {0}}, got;
    if (sk_npy_read(path, want ? &w : NULL, &got, data, err, errlen))
        return -1;
    *shape = (Shape){got.dtype, got.rank, {0}};
    for (int d = 0; d < got.rank; d++)
        shape->dims[d] = got.dims[d];
    return 0;
}

/* Write through a temporary file renamed into place. */
static inline int npy_write(const char *path, const Shape *shape, const double *data, char *err, size_t errlen) {
    sk_npy_shape s = npy_shape_of(shape);
    return sk_npy_write(path, &s, data, err, errlen);
}

#endif
