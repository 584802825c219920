/* NumPy .npy files: read format versions 1.0 and 2.0, write 1.0.  Only
 * little-endian, C-order arrays of '<f4' (f32), '<f8' (f64), '<i4' (i32),
 * '|b1' (bool) and '<f2' (f16).  bf16 has no NumPy dtype: it is stored as
 * '<f4' holding bf16 values, and '<f4' data read as bf16 is rounded to it. */
#ifndef SHARDC_NPY_H
#define SHARDC_NPY_H

#include "../ir/ir.h"

/* Read `path` into a malloc'd array of doubles (*data, free() it) and its
 * shape.  With `want`, the file must hold exactly that dtype and shape.
 * Returns 0, or -1 with a message in err (nothing allocated).  Any file,
 * however malformed, ends in one or the other. */
int npy_read(const char *path, const Shape *want, Shape *shape, double **data, char *err, size_t errlen);

/* Write `data` (shape_elems(shape) elements, rounded to shape->dtype) to
 * `path` through a temporary file renamed into place, so that a failure
 * leaves no partial file.  Returns 0, or -1 with a message in err. */
int npy_write(const char *path, const Shape *shape, const double *data, char *err, size_t errlen);

#endif
