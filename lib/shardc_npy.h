/* shardc_npy.h: NumPy .npy files, read (format 1.0 and 2.0) and written
 * (1.0), for `shardc interp` and for the main() of generated programs.
 * Only little-endian, C-order '<f4' (f32), '<f8' (f64), '<i4' (i32), '|b1'
 * (bool) and '<f2' (f16).  bf16 has no NumPy dtype: it is stored as '<f4'
 * holding bf16 values, and '<f4' data read as bf16 is rounded to it.
 * Elements travel as doubles holding values of the dtype. */
#ifndef SHARDC_NPY_H_PUBLIC
#define SHARDC_NPY_H_PUBLIC

#include "shardc_lib.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint8_t dtype;               /* sk_dtype */
    uint8_t rank;
    int64_t dims[SC_MAX_RANK];
} sk_npy_shape;

/* Read `path` into a malloc'd array of doubles (*data, free() it) and its
 * shape.  With `want`, the file must hold exactly that dtype and shape.
 * Returns 0, or -1 with a message in err (nothing allocated). */
int sk_npy_read(const char *path, const sk_npy_shape *want, sk_npy_shape *shape, double **data, char *err,
                size_t errlen);
/* Write `data` (rounded to shape->dtype) to `path` through a temporary file
 * renamed into place, so that a failure leaves no partial file.  Returns 0,
 * or -1 with a message in err. */
int sk_npy_write(const char *path, const sk_npy_shape *shape, const double *data, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
