/* shardc_npy.h: NumPy .npy files, read (format 1.0 and 2.0) and written
 * (1.0), for `shardc interp` and for the main() of generated programs.
 * Only little-endian, C-order '<f4' (f32), '<f8' (f64), '<i4' (i32), '|b1'
 * (bool) and '<f2' (f16).  bf16 has no NumPy dtype: it is stored as '<f4'
 * holding bf16 values, and '<f4' data read as bf16 is rounded to it.
 * Elements travel as doubles holding values of the dtype.  sk_npy_open and
 * sk_npy_read_box read a box of a file's array without the rest. */
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
/* "(4, 8)", "(5,)" or "()", as the messages write shapes. */
void sk_npy_shape_text(const sk_npy_shape *s, char *buf, size_t cap);

/* Parts of a file, for programs whose processes each need only some of it.
 * sk_npy_open reads the header (with read(2), so that only the header's
 * bytes are read) and checks it as sk_npy_read does: the file must hold
 * `dtype` data (bf16: '<f4'), and its size must be what its shape needs.
 * *shape gets the file's shape (with dtype `dtype`); the caller checks it.
 * NULL with a message in err on failure. */
typedef struct sk_npy_file sk_npy_file;
sk_npy_file *sk_npy_open(const char *path, int dtype, sk_npy_shape *shape, char *err, size_t errlen);
/* The elements [start[d], start[d] + count[d]) of every dim d, into out
 * (row-major in the box, as doubles rounded to the dtype).  Reads each run
 * of elements contiguous in the file with pread(2), runs close together (a
 * few KiB apart) in one read.  A file that cannot be read at offsets (a
 * pipe) was read whole by sk_npy_open.  Returns 0, or -1 with a message. */
int sk_npy_read_box(sk_npy_file *f, const int64_t *start, const int64_t *count, double *out, char *err,
                    size_t errlen);
/* Bytes read from the file so far (the header's too), and its size. */
int64_t sk_npy_bytes_read(const sk_npy_file *f);
int64_t sk_npy_file_bytes(const sk_npy_file *f);
void sk_npy_close(sk_npy_file *f);

#ifdef __cplusplus
}
#endif

#endif
