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
#include <stdio.h>

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
 * fsync'd and renamed into place (sk_commit below), so that a failure or a
 * crash leaves no partial file.  Returns 0,
 * or -1 with a message in err. */
int sk_npy_write(const char *path, const sk_npy_shape *shape, const double *data, char *err, size_t errlen);
/* Durable writes (lib/host/durable.c): a file goes to a temporary path next to
 * its final one (sk_temp_path: PATH.tmpPID), is flushed to the disk when
 * closed (sk_close_synced: fflush, fsync, fclose; -1 with errno), and is
 * renamed into place, the directory flushed after (sk_commit; -1 with
 * errno), so that no crash leaves a partial file under the final name.
 * sk_npy_write and sk_npz_write do all three; sk_npy_write_temp only the
 * first two, for a caller that renames several files once all are written.
 * sk_temp_path returns -1 when tmp is too small. */
int sk_temp_path(const char *path, char *tmp, size_t cap);
int sk_close_synced(FILE *f);
int sk_commit(const char *tmp, const char *path);
/* Writes `data` as sk_npy_write does, to the file `tmp`, fsync'd but not
 * renamed: messages name `path`, its final name.  On failure tmp is removed. */
int sk_npy_write_temp(const char *path, const char *tmp, const sk_npy_shape *shape, const double *data, char *err,
                      size_t errlen);
/* SIGINT, SIGTERM and SIGHUP held while a set of files is written
 * (lib/host/durable.c): sk_signals_hold notes them instead of ending the
 * process; the writer asks sk_signals_caught (the signal, or 0) before
 * renaming its files, removing them instead when one came, so that a
 * signal leaves all of them or none; sk_signals_release puts the former
 * handlers back and raises the signal noted, if any. */
void sk_signals_hold(void);
int sk_signals_caught(void);
void sk_signals_release(void);
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

/* Where an array is read from, and how: a .npy file, or an array of a .npz
 * archive (np.savez's zip of NAME.npy files, stored uncompressed). */
typedef struct {
    const char *path;
    const char *member;          /* the archive's array of this name; NULL: path is a .npy file */
    int cast;                    /* convert '<f8' data to f32, bf16 or f16 by rounding (else only when exact) */
} sk_npy_source;
/* NumPy's defaults convert: '<f8' data to a wanted f32, bf16 or f16 when
 * every value is exact there (any value with src->cast), '<i8' to i32 when
 * every value fits; otherwise an error naming the first element that does
 * not.  *from (when not NULL) gets "float64" or "int64" after such a
 * conversion, else NULL, so that the caller can warn. */
int sk_npy_read_source(const sk_npy_source *src, const sk_npy_shape *want, sk_npy_shape *shape, double **data,
                       const char **from, char *err, size_t errlen);
sk_npy_file *sk_npy_open_source(const sk_npy_source *src, int dtype, sk_npy_shape *shape, char *err, size_t errlen);
/* "float64" or "int64" when the file's data is converted to its dtype. */
const char *sk_npy_file_converted(const sk_npy_file *f);
/* An --in FILE for parameter `name`: "a.npz" is a's array `name`, and
 * "a.npz:KEY" its array KEY.  The file's path goes to path; returns 1 with
 * *member set for an archive, 0 for a .npy file, -1 when path is too long. */
int sk_npy_split_npz(const char *file, const char *name, char *path, size_t cap, const char **member);
/* 1 when the .npz archive at path has the array `member`, else 0 (also
 * when path cannot be read as an archive: reading it then says why). */
int sk_npz_has(const char *path, const char *member);
/* `--in p=FILE` for a record p (docs/cli.md, "Records"): the --in FILE of
 * its field `field` ("wq", "layer.wq") into out.  FILE.npz: the archive's
 * array p.FIELD when it has one (what --out writes for a result returned as
 * p), else its array FIELD (np.savez(**fields)); FILE.npz:KEY: its array
 * KEY.FIELD.  -1 when FILE is no archive, -2 when out is too small. */
int sk_npy_record_file(const char *file, const char *record, const char *field, char *out, size_t cap);

/* One array of an archive being written: NAME.npy. */
typedef struct {
    const char *name;
    sk_npy_shape shape;
    const double *data;
} sk_npz_entry;
/* Write the arrays as one .npz archive (stored, as np.savez writes them)
 * through a temporary file fsync'd and renamed into place (sk_commit).  0,
 * or -1 with err. */
int sk_npz_write(const char *path, const sk_npz_entry *e, int n, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
