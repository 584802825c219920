/* .npy reading and writing (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
 * A file is the magic "\x93NUMPY", a version, a little-endian header length
 * (2 bytes in 1.0, 4 in 2.0), a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and a newline, then the raw elements.  The reader
 * checks every part and says what is wrong; bytes are decoded one by one, so
 * it does not depend on the host's byte order. */
#include "npy_internal.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* Names of the dtypes, from compiler/ir/dtypes.def. */
static const char *const dtype_names[] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [SK_##ID] = name,
#include "../../compiler/ir/dtypes.def"
#undef DTYPE
};

static int64_t elems_of(const sk_npy_shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->dims[d];
    return n;
}

static int same_shape(const sk_npy_shape *a, const sk_npy_shape *b) {
    if (a->dtype != b->dtype || a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

/* Rounding to f32 and bf16 (data read from a file is a float, and data
 * written has been rounded to its dtype, so these are exact). */
static double round_to(double x, int dtype) {
    return dtype == SK_F32 ? (double)(float)x : dtype == SK_BF16 ? (double)sc_bf16_to_float(sc_bf16_from_float((float)x)) : x;
}

enum {
    MAX_HEADER = 1 << 20,            /* far more than any real header */
    NPY_PRELUDE_V1 = 10,             /* magic, version, 2-byte length */
};
/* Bounds the buffer a file can make the reader allocate when the caller
 * does not fix the shape: 2^31 elements (16 GiB as doubles). */
static const int64_t MAX_ELEMS = (int64_t)1 << 31;

typedef struct {
    const char *descr;
    int dtype;
    int size;                        /* bytes per element */
} NpyType;

/* By dtype.  A file's descr is looked up in order, so '<f4' reads as f32;
 * bf16 files hold '<f4' too.  '<i8' is i64, and NumPy's default integers
 * also read as i32 when every value fits (converts). */
static const NpyType npy_types[] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) {npy, SK_##ID, bytes},
#include "../../compiler/ir/dtypes.def"
#undef DTYPE
};

/* NumPy's name of a dtype's array type, for the fix a message suggests. */
static const char *numpy_name(int dtype) {
    switch (dtype) {
    case SK_F64: return "float64";
    case SK_F16: return "float16";
    case SK_I32: return "int32";
    case SK_U32: return "uint32";
    case SK_I64: return "int64";
    case SK_U8: return "uint8";
    case SK_BOOL: return "bool_";
    default: return "float32";                  /* f32, and bf16 (stored as '<f4') */
    }
}

/* The file's type when it is one of NumPy's defaults, float64 or int64,
 * that converts to `want` (f64 to the narrower floats, i64 to i32). */
static int converts(const NpyType *t, int want) {
    return (strcmp(t->descr, "<f8") == 0 && (want == SK_F32 || want == SK_BF16 || want == SK_F16)) ||
           (strcmp(t->descr, "<i8") == 0 && want == SK_I32);
}

int npy_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static const NpyType *type_of_descr(const char *descr) {
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (strcmp(npy_types[i].descr, descr) == 0)
            return &npy_types[i];
    return NULL;
}

static const NpyType *type_of_dtype(int dtype) {
    return dtype >= 0 && dtype < (int)(sizeof npy_types / sizeof npy_types[0]) ? type_of_descr(npy_types[dtype].descr)
                                                                                : NULL;
}

/* ---- the header dict ---- */

typedef struct {
    const char *p, *end;
    char descr[16];
    int fortran, have_descr, have_fortran, have_shape;
    sk_npy_shape shape;
    const char *why;                 /* the first problem found */
} Header;

static void skip_space(Header *h) {
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

static int accept(Header *h, char c) {
    skip_space(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

/* A quoted string of at most `cap - 1` characters. */
static int parse_string(Header *h, char *out, size_t cap) {
    skip_space(h);
    if (h->p == h->end || (*h->p != '\'' && *h->p != '"'))
        return 0;
    char quote = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != quote) {
        if (n + 1 >= cap)
            return 0;
        out[n++] = *h->p++;
    }
    out[n] = '\0';
    if (h->p == h->end)
        return 0;
    h->p++;
    return 1;
}

static int parse_word(Header *h, const char *word) {
    skip_space(h);
    size_t n = strlen(word);
    if ((size_t)(h->end - h->p) < n || memcmp(h->p, word, n) != 0)
        return 0;
    h->p += n;
    return 1;
}

/* (d0, d1, ...) with an optional trailing comma; Python 2 files may write
 * 3L for 3. */
static int parse_shape(Header *h) {
    if (!accept(h, '('))
        return 0;
    h->shape.rank = 0;
    while (!accept(h, ')')) {
        skip_space(h);
        if (h->p == h->end || *h->p < '0' || *h->p > '9')
            return 0;
        int64_t d = 0;
        while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
            if (d > ((int64_t)1 << 40)) {
                h->why = "a dim of the shape is too large";
                return 0;
            }
            d = d * 10 + (*h->p++ - '0');
        }
        if (h->p < h->end && *h->p == 'L')
            h->p++;
        if (h->shape.rank == SC_MAX_RANK) {
            h->why = "the shape has more than 8 dims";
            return 0;
        }
        h->shape.dims[h->shape.rank++] = d;
        if (!accept(h, ',')) {
            if (!accept(h, ')'))
                return 0;
            break;
        }
    }
    return 1;
}

static int parse_entry(Header *h) {
    char key[32];
    if (!parse_string(h, key, sizeof key) || !accept(h, ':'))
        return 0;
    if (strcmp(key, "descr") == 0 && !h->have_descr) {
        h->have_descr = 1;
        if (parse_string(h, h->descr, sizeof h->descr))
            return 1;
        h->why = "'descr' is not a simple dtype string (structured dtypes are not supported)";
        return 0;
    }
    if (strcmp(key, "fortran_order") == 0 && !h->have_fortran) {
        h->have_fortran = 1;
        h->fortran = parse_word(h, "True");
        return h->fortran || parse_word(h, "False");
    }
    if (strcmp(key, "shape") == 0 && !h->have_shape) {
        h->have_shape = 1;
        return parse_shape(h);
    }
    h->why = "the header has an unknown or repeated key";
    return 0;
}

static const char *parse_header(Header *h) {
    if (!accept(h, '{'))
        return "the header is not a dict";
    while (!accept(h, '}')) {
        if (!parse_entry(h))
            return h->why ? h->why : "the header dict is malformed";
        if (!accept(h, ',')) {
            if (!accept(h, '}'))
                return "the header dict is malformed";
            break;
        }
    }
    skip_space(h);
    if (h->p != h->end)
        return "the header has text after its dict";
    if (!h->have_descr || !h->have_fortran || !h->have_shape)
        return "the header lacks 'descr', 'fortran_order' or 'shape'";
    return NULL;
}

/* ---- reading ---- */

/* Text from the file, made safe to print: other bytes become \xNN. */
static const char *printable(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    for (; *s && n + 5 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        n += (size_t)(ch >= 0x20 && ch < 0x7f && ch != '\\' ? snprintf(buf + n, cap - n, "%c", ch)
                                                           : snprintf(buf + n, cap - n, "\\x%02x", ch));
    }
    buf[n] = '\0';
    return buf;
}

static void describe_shape(const sk_npy_shape *s, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < s->rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)s->dims[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, s->rank == 1 ? ",)" : ")");
}

uint64_t npy_load_le(const unsigned char *b, int size) {
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* Converting NumPy's float64 or int64 data to the dtype wanted.  Without
 * --cast only exact conversions are made; an int64 value outside i32's
 * range never converts to i32, nor one beyond 2^53 in magnitude to i64
 * (values travel as doubles: sk_npy_read's interface).  The first element
 * that does not is kept, to be named in the error. */
typedef struct {
    const NpyType *file;
    int dtype, cast;
    int64_t bad;                     /* flat index of the first bad element, or -1 */
    double bad_value;
    int64_t bad_int;                 /* the same, when the file holds int64 */
} Conv;

static const int64_t MAX_EXACT_I64 = (int64_t)1 << 53;   /* every integer to here is a double */

static double decode(const unsigned char *b, int dtype);

static double round_any(double x, int dtype) {
    return dtype == SK_F16 ? (double)sc_f16_to_float(sc_f16_from_float((float)x)) : round_to(x, dtype);
}

static double convert(Conv *c, const unsigned char *b, int64_t index) {
    if (!c || c->file->size != 8 || c->dtype == SK_F64)
        return decode(b, c ? c->dtype : SK_F32);
    if (c->file->dtype == SK_I64) {                 /* int64, to i32 or i64 */
        int64_t v = (int64_t)npy_load_le(b, 8);
        int ok = c->dtype == SK_I32 ? v >= INT32_MIN && v <= INT32_MAX : v >= -MAX_EXACT_I64 && v <= MAX_EXACT_I64;
        if (!ok && c->bad < 0) {
            c->bad = index;
            c->bad_int = v;
        }
        return ok ? (double)v : 0;
    }
    double x = decode(b, SK_F64), y = round_any(x, c->dtype);
    if (!c->cast && y != x && x == x && c->bad < 0) {
        c->bad = index;
        c->bad_value = x;
    }
    return y;
}

static double decode(const unsigned char *b, int dtype) {
    switch (dtype) {
    case SK_F32: case SK_BF16: {
        uint32_t bits = (uint32_t)npy_load_le(b, 4);
        float f;
        memcpy(&f, &bits, sizeof f);
        return round_to(f, dtype);
    }
    case SK_F64: {
        uint64_t bits = npy_load_le(b, 8);
        double x;
        memcpy(&x, &bits, sizeof x);
        return x;
    }
    case SK_I32: return (int32_t)(uint32_t)npy_load_le(b, 4);
    case SK_U32: return (uint32_t)npy_load_le(b, 4);
    case SK_I64: return (double)(int64_t)npy_load_le(b, 8);
    case SK_U8: return b[0];
    case SK_BOOL: return b[0] != 0;
    default: return sc_f16_to_float((uint16_t)npy_load_le(b, 2));
    }
}

/* Bytes of a file, read in order: fread for sk_npy_read, read(2) for an
 * sk_npy_file (which counts them).  Returns the bytes read (fewer at the
 * end of the file or on an error). */
typedef size_t (*read_fn)(void *src, void *buf, size_t n);

static size_t stdio_read(void *src, void *buf, size_t n) {
    return fread(buf, 1, n, (FILE *)src);
}

/* The header of a file: version, length, dict.  On success the next byte
 * `rd` reads is the first of the data, and *at (if not NULL) is its offset. */
static int read_header(read_fn rd, void *src, const char *path, Header *h, int64_t *at, char *err,
                       size_t errlen) {
    unsigned char pre[12];
    size_t got = rd(src, pre, 8);
    if (got < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return npy_fail(err, errlen, "'%s' is not a .npy file (no \\x93NUMPY magic)", path);
    if (got < 8)
        return npy_fail(err, errlen, "'%s' is truncated inside its header", path);
    if ((pre[6] != 1 && pre[6] != 2) || pre[7] != 0)
        return npy_fail(err, errlen, "'%s' has .npy format version %d.%d; only 1.0 and 2.0 are supported", path,
                    pre[6], pre[7]);
    int lenbytes = pre[6] == 1 ? 2 : 4;
    if (rd(src, pre + 8, (size_t)lenbytes) != (size_t)lenbytes)
        return npy_fail(err, errlen, "'%s' is truncated inside its header", path);
    uint64_t hlen = npy_load_le(pre + 8, lenbytes);
    if (hlen > MAX_HEADER)
        return npy_fail(err, errlen, "'%s' declares a header of %llu bytes, more than a .npy header can sensibly be",
                    path, (unsigned long long)hlen);
    char *text = malloc(hlen + 1);
    if (!text)
        return npy_fail(err, errlen, "out of memory reading '%s'", path);
    int rc = 0;
    if (rd(src, text, hlen) != hlen)
        rc = npy_fail(err, errlen, "'%s' is truncated inside its header", path);
    else if (memchr(text, '\0', hlen))
        rc = npy_fail(err, errlen, "'%s' has a bad header: it contains a NUL byte", path);
    else {
        *h = (Header){text, text + hlen, {0}, 0, 0, 0, 0, {0}, NULL};
        const char *why = parse_header(h);
        if (why)
            rc = npy_fail(err, errlen, "'%s' has a bad header: %s", path, why);
    }
    free(text);
    h->p = h->end = NULL;
    if (at)
        *at = 8 + lenbytes + (int64_t)hlen;
    return rc;
}

/* The header's dtype and order, and the element count (at most `limit`).
 * Sets h->shape.dtype: the file's, or bf16 when `want` is bf16 and the file
 * holds '<f4'.  Returns the .npy type, or NULL with a message in err. */
static const NpyType *check_type(const char *path, Header *h, int want, int64_t limit, int64_t *elems, char *err,
                                 size_t errlen) {
    const NpyType *t = type_of_descr(h->descr);
    char descr[80];
    if (!t) {
        npy_fail(err, errlen, "'%s' has dtype '%s'; supported are '<f4', '<f8', '<i4', '<i8', '|b1', '<f2', '<u4' and "
             "'|u1' (little-endian)", path, printable(h->descr, descr, sizeof descr));
        return NULL;
    }
    if (h->fortran) {
        npy_fail(err, errlen, "'%s' is in Fortran order; save a C-order array (np.ascontiguousarray)", path);
        return NULL;
    }
    int64_t n = 1;
    for (int d = 0; d < h->shape.rank; d++) {
        if (h->shape.dims[d] && n > limit / h->shape.dims[d]) {
            npy_fail(err, errlen, "'%s' has more than %lld elements", path, (long long)limit);
            return NULL;
        }
        n *= h->shape.dims[d];
    }
    *elems = n;
    h->shape.dtype = (uint8_t)((want == SK_BF16 && t->dtype == SK_F32) || converts(t, want) ? want : t->dtype);
    return t;
}

/* The file's .npy type must be the one that holds dtype `want`. */
static int check_dtype(const char *path, const NpyType *t, int want, char *err, size_t errlen) {
    const NpyType *need = type_of_dtype(want);
    if (need && (need == t || converts(t, want)))
        return 0;
    return npy_fail(err, errlen, "'%s' holds %s (%s) data, but %s is needed%s: save arr.astype(np.%s)", path, t->descr,
                t->dtype == SK_I64 ? "int64" : dtype_names[t->dtype], dtype_names[want],   /* NumPy's default integers */
                want == SK_BF16 ? " (bf16 is stored as '<f4')" : "", numpy_name(want));
}

/* The dtype and shape the caller asked for, if any. */
static int check_wanted(const char *path, const NpyType *t, const sk_npy_shape *s, const sk_npy_shape *want, char *err,
                        size_t errlen) {
    if (!want)
        return 0;
    if (check_dtype(path, t, want->dtype, err, errlen))
        return -1;
    sk_npy_shape w = *want;
    w.dtype = s->dtype;
    if (!same_shape(s, &w)) {
        char have[160], need_s[160];
        describe_shape(s, have, sizeof have);
        describe_shape(want, need_s, sizeof need_s);
        return npy_fail(err, errlen, "'%s' has shape %s, but %s is needed", path, have, need_s);
    }
    return 0;
}

/* The flat index i in a shape as NumPy's index: "[1, 2]". */
static void index_text(const sk_npy_shape *s, int64_t i, char *buf, size_t cap) {
    int64_t idx[SC_MAX_RANK];
    for (int d = s->rank - 1; d >= 0; d--) {
        idx[d] = s->dims[d] ? i % s->dims[d] : 0;
        i = s->dims[d] ? i / s->dims[d] : 0;
    }
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < s->rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* After a conversion: the first element that did not convert, named. */
static int conv_check(const Conv *c, const char *path, const sk_npy_shape *s, char *err, size_t errlen) {
    if (c->bad < 0)
        return 0;
    char at[200];
    index_text(s, c->bad, at, sizeof at);
    if (c->file->dtype == SK_I64 && c->dtype == SK_I32)
        return npy_fail(err, errlen, "'%s' holds int64 data, and element %s (%lld) is outside i32's range "
                    "(-2147483648 to 2147483647), so it cannot be read as i32", path, at, (long long)c->bad_int);
    if (c->file->dtype == SK_I64)
        return npy_fail(err, errlen, "'%s': element %s (%lld) is beyond 2^53 in magnitude; shardc's .npy input carries "
                    "values as doubles, exact only to 2^53 (docs/cli.md)", path, at, (long long)c->bad_int);
    return npy_fail(err, errlen, "'%s' holds float64 data, but %s is needed, and element %s (%.17g) is not exact in %s: "
                "save arr.astype(np.%s), or pass --cast to round", path, dtype_names[c->dtype], at, c->bad_value,
                dtype_names[c->dtype], numpy_name(c->dtype));
}

static int read_data(FILE *f, const char *path, const NpyType *t, const sk_npy_shape *s, int cast, double **data,
                     char *err, size_t errlen) {
    int64_t n = elems_of(s);
    int dtype = s->dtype;
    size_t bytes = (size_t)n * (size_t)t->size;
    unsigned char *raw = malloc(bytes ? bytes : 1);
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    int rc = 0;
    if (!raw || !out)
        rc = npy_fail(err, errlen, "out of memory reading '%s' (%lld elements)", path, (long long)n);
    else {
        size_t got = fread(raw, 1, bytes, f);
        int extra = got == bytes && fgetc(f) != EOF;
        if (ferror(f))
            rc = npy_fail(err, errlen, "cannot read '%s': %s", path, strerror(errno ? errno : EIO));
        else if (got < bytes)
            rc = npy_fail(err, errlen, "'%s' is truncated: its shape needs %zu bytes of data, it has %zu", path, bytes,
                      got);
        else if (extra)
            rc = npy_fail(err, errlen, "'%s' has bytes after the %zu bytes of data its shape needs", path, bytes);
    }
    Conv c = {t, dtype, cast, -1, 0, 0};
    for (int64_t i = 0; rc == 0 && i < n; i++)
        out[i] = convert(&c, raw + i * t->size, i);
    if (rc == 0)
        rc = conv_check(&c, path, s, err, errlen);
    free(raw);
    if (rc)
        free(out);
    else
        *data = out;
    return rc;
}

/* The name of a file type that was converted to `dtype`, else NULL. */
static const char *converted_from(const NpyType *t, int dtype) {
    return t && t->dtype != dtype && t->size == 8 && dtype != SK_F64 ? (t->dtype == SK_I64 ? "int64" : "float64") : NULL;
}

static int read_plain(const char *path, int cast, const sk_npy_shape *want, sk_npy_shape *shape, double **data,
                      const char **from, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return npy_fail(err, errlen, "cannot read '%s': %s", path, strerror(errno));
    Header h = {0};
    int64_t n = 0;
    int rc = read_header(stdio_read, f, path, &h, NULL, err, errlen);
    const NpyType *t = rc ? NULL : check_type(path, &h, want ? want->dtype : -1, MAX_ELEMS, &n, err, errlen);
    if (!rc && !t)
        rc = -1;
    if (!rc)
        rc = check_wanted(path, t, &h.shape, want, err, errlen);
    if (!rc)
        rc = read_data(f, path, t, &h.shape, cast, data, err, errlen);
    fclose(f);
    if (!rc)
        *shape = h.shape;
    if (!rc && from)
        *from = converted_from(t, h.shape.dtype);
    return rc;
}

int sk_npy_read(const char *path, const sk_npy_shape *want, sk_npy_shape *shape, double **data, char *err, size_t errlen) {
    return read_plain(path, 0, want, shape, data, NULL, err, errlen);
}

void sk_npy_shape_text(const sk_npy_shape *s, char *buf, size_t cap) {
    describe_shape(s, buf, cap);
}

/* ---- reading parts of a file ---- */

/* A byte count that no real file reaches, so that offsets cannot overflow. */
static const int64_t MAX_FILE_ELEMS = (int64_t)1 << 56;

enum {
    SPAN_BYTES = 1 << 20,            /* the most one read of nearby rows takes */
    GAP_BYTES = 4096,                /* rows closer than this are read together */
};

struct sk_npy_file {
    int fd;
    char *path;
    const NpyType *type;
    sk_npy_shape shape;
    int64_t data_at;                 /* the offset of the first element */
    unsigned char *mem;              /* a pipe's data, read whole; else NULL */
    int64_t bytes_read, file_bytes;
    int64_t member_end;              /* a .npz member: where its bytes end in the archive; else -1 */
    int cast;                        /* --cast: round float64 data to the dtype */
};

typedef struct {
    int fd;
    int64_t *count;
} FdSrc;

/* read(2) until n bytes, the end of the file or an error. */
static size_t fd_read(void *src, void *buf, size_t n) {
    FdSrc *s = src;
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(s->fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    *s->count += (int64_t)got;
    return got;
}

/* pread(2) of exactly n bytes at `at` (served from memory for a pipe). */
static int read_at(sk_npy_file *f, void *buf, size_t n, int64_t at, char *err, size_t errlen) {
    if (f->mem) {
        memcpy(buf, f->mem + (at - f->data_at), n);
        return 0;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(f->fd, (char *)buf + got, n - got, (off_t)(at + (int64_t)got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return npy_fail(err, errlen, "cannot read '%s': %s", f->path, strerror(errno));
        if (k == 0)
            return npy_fail(err, errlen, "'%s' is truncated: it became shorter while being read", f->path);
        got += (size_t)k;
    }
    f->bytes_read += (int64_t)n;
    return 0;
}

/* The data after the header must be exactly what the shape needs.  A file
 * that cannot be read at offsets (a pipe) is read whole into memory. */
static int check_size(sk_npy_file *f, int64_t elems, char *err, size_t errlen) {
    struct stat st;
    int64_t need = elems * f->type->size;
    if (fstat(f->fd, &st) != 0)
        return npy_fail(err, errlen, "cannot read '%s': %s", f->path, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        f->file_bytes = (int64_t)st.st_size;
    } else {
        FdSrc src = {f->fd, &f->bytes_read};
        unsigned char probe;
        if (!(f->mem = malloc((size_t)need + 1)))
            return npy_fail(err, errlen, "out of memory reading '%s' (%lld elements)", f->path, (long long)elems);
        int64_t got = (int64_t)fd_read(&src, f->mem, (size_t)need);
        got += (int64_t)fd_read(&src, &probe, got == need);
        f->file_bytes = f->data_at + got;
    }
    int64_t have = (f->member_end >= 0 ? f->member_end : f->file_bytes) - f->data_at;
    if (have < need)
        return npy_fail(err, errlen, "'%s' is truncated: its shape needs %lld bytes of data, it has %lld", f->path,
                    (long long)need, (long long)(have < 0 ? 0 : have));
    if (have > need)
        return npy_fail(err, errlen, "'%s' has bytes after the %lld bytes of data its shape needs", f->path,
                    (long long)need);
    return 0;
}

/* `member` of the archive f->fd: the descriptor is left at its first
 * byte, and f->member_end set (below; the zip reader is lib/host/npz.c). */
static int seek_member(sk_npy_file *f, const char *member, char *err, size_t errlen);

static sk_npy_file *open_file(const char *path, const char *member, int cast, int dtype, sk_npy_shape *shape,
                              char *err, size_t errlen) {
    sk_npy_file *f = calloc(1, sizeof *f);
    size_t plen = strlen(path) + 1;
    if (!f || !(f->path = malloc(plen))) {
        free(f);
        npy_fail(err, errlen, "out of memory reading '%s'", path);
        return NULL;
    }
    memcpy(f->path, path, plen);
    f->fd = open(path, O_RDONLY);
    f->member_end = -1;
    f->cast = cast;
    Header h = {0};
    FdSrc src = {f->fd, &f->bytes_read};
    int64_t n = 0, base = 0;
    int rc = f->fd < 0 ? npy_fail(err, errlen, "cannot read '%s': %s", path, strerror(errno)) : 0;
    if (!rc && member && !(rc = seek_member(f, member, err, errlen)))
        base = f->data_at;                             /* seek_member leaves the member's offset there */
    rc = rc ? rc : read_header(fd_read, &src, path, &h, &f->data_at, err, errlen);
    f->data_at += base;
    if (!rc && !(f->type = check_type(path, &h, dtype, MAX_FILE_ELEMS, &n, err, errlen)))
        rc = -1;
    if (!rc && dtype >= 0)                             /* -1: any dtype (reading results back) */
        rc = check_dtype(path, f->type, dtype, err, errlen);
    if (!rc)
        rc = check_size(f, n, err, errlen);
    if (rc) {
        sk_npy_close(f);
        return NULL;
    }
    f->shape = *shape = h.shape;
    return f;
}

sk_npy_file *sk_npy_open(const char *path, int dtype, sk_npy_shape *shape, char *err, size_t errlen) {
    return open_file(path, NULL, 0, dtype, shape, err, errlen);
}

sk_npy_file *sk_npy_open_source(const sk_npy_source *src, int dtype, sk_npy_shape *shape, char *err, size_t errlen) {
    return open_file(src->path, src->member, src->cast, dtype, shape, err, errlen);
}

const char *sk_npy_file_converted(const sk_npy_file *f) { return converted_from(f->type, f->shape.dtype); }

void sk_npy_close(sk_npy_file *f) {
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->mem);
    free(f->path);
    free(f);
}

int64_t sk_npy_bytes_read(const sk_npy_file *f) { return f->bytes_read; }
int64_t sk_npy_file_bytes(const sk_npy_file *f) { return f->file_bytes; }

/* A box is read as runs: the box's elements that are contiguous in the
 * file, one per index of the dims before `inner` (the dims from inner + 1
 * on are whole). */
typedef struct {
    const sk_npy_shape *s;
    const int64_t *start, *count;
    int inner;
    int64_t run_elems, nruns, size;
} Runs;

static void runs_of(Runs *r, const sk_npy_shape *s, const int64_t *start, const int64_t *count, int size) {
    *r = (Runs){s, start, count, 0, 1, 1, size};
    int k = s->rank - 1;
    while (k > 0 && start[k] == 0 && count[k] == s->dims[k])
        r->run_elems *= s->dims[k--];
    r->inner = k < 0 ? 0 : k;
    if (s->rank > 0)
        r->run_elems *= count[r->inner];
    for (int d = 0; d < r->inner; d++)
        r->nruns *= count[d];
    for (int d = 0; d < s->rank; d++)
        if (count[d] == 0)
            r->nruns = 0;
}

/* The byte offset of run j in the data. */
static int64_t run_at(const Runs *r, int64_t j) {
    int64_t at = 0, stride = 1;
    for (int d = r->s->rank - 1; d >= 0; d--) {
        int64_t i = r->start[d];
        if (d < r->inner) {
            i += j % r->count[d];
            j /= r->count[d];
        }
        at += i * stride;
        stride *= r->s->dims[d];
    }
    return at * r->size;
}

/* Decode the bytes [lo, hi) of the data, held in buf from `base`, into the
 * runs [first, last) that they overlap. */
static void decode_span(const Runs *r, int64_t first, int64_t last, const unsigned char *buf, int64_t base,
                        int64_t lo, int64_t hi, Conv *c, double *out) {
    int64_t run_bytes = r->run_elems * r->size;
    for (int64_t j = first; j < last; j++) {
        int64_t at = run_at(r, j), a = at > lo ? at : lo, b = at + run_bytes < hi ? at + run_bytes : hi;
        for (int64_t x = a; x < b; x += r->size)
            out[j * r->run_elems + (x - at) / r->size] = convert(c, buf + (x - base), x / r->size);
    }
}

int sk_npy_read_box(sk_npy_file *f, const int64_t *start, const int64_t *count, double *out, char *err,
                    size_t errlen) {
    for (int d = 0; d < f->shape.rank; d++)
        if (start[d] < 0 || count[d] < 0 || start[d] + count[d] > f->shape.dims[d])
            return npy_fail(err, errlen, "'%s': a box outside the array was asked for (dim %d)", f->path, d);
    Runs r;
    runs_of(&r, &f->shape, start, count, f->type->size);
    int64_t run_bytes = r.run_elems * r.size;
    unsigned char *buf = malloc(SPAN_BYTES);
    if (!buf)
        return npy_fail(err, errlen, "out of memory reading '%s'", f->path);
    int rc = 0;
    Conv c = {f->type, f->shape.dtype, f->cast, -1, 0, 0};
    for (int64_t j = 0; rc == 0 && j < r.nruns;) {
        /* Runs j .. k-1 close together are one span, read at once; a run
         * longer than the buffer is read in pieces. */
        int64_t lo = run_at(&r, j), hi = lo + run_bytes, k = j + 1;
        for (; k < r.nruns; k++) {
            int64_t at = run_at(&r, k);
            if (at - hi > GAP_BYTES || at + run_bytes - lo > SPAN_BYTES)
                break;
            hi = at + run_bytes;
        }
        for (int64_t piece = lo; rc == 0 && piece < hi; piece += SPAN_BYTES) {   /* sizes divide SPAN_BYTES */
            int64_t end = hi - piece < SPAN_BYTES ? hi : piece + SPAN_BYTES;
            rc = read_at(f, buf, (size_t)(end - piece), f->data_at + piece, err, errlen);
            if (rc == 0)
                decode_span(&r, j, k, buf, piece, piece, end, &c, out);
        }
        j = k;
    }
    free(buf);
    return rc ? rc : conv_check(&c, f->path, &f->shape, err, errlen);
}

/* ---- writing ---- */

void npy_store_le(unsigned char *b, uint64_t v, int size) {
    for (int i = 0; i < size; i++, v >>= 8)
        b[i] = (unsigned char)(v & 0xff);
}

static void encode(unsigned char *b, double x, int dtype) {
    x = round_to(x, dtype);
    switch (dtype) {
    case SK_F32: case SK_BF16: {
        float f = (float)x;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        npy_store_le(b, bits, 4);
        break;
    }
    case SK_F64: {
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        npy_store_le(b, bits, 8);
        break;
    }
    case SK_I32: npy_store_le(b, (uint32_t)(int32_t)x, 4); break;
    case SK_U32: npy_store_le(b, (uint32_t)x, 4); break;
    case SK_I64: npy_store_le(b, (uint64_t)sk_to_i64(x), 8); break;
    case SK_U8: b[0] = (uint8_t)x; break;
    case SK_BOOL: b[0] = x != 0; break;
    default: npy_store_le(b, sc_f16_from_float((float)x), 2); break;
    }
}

/* The 1.0 header, padded with spaces so the data starts at a multiple of
 * 64 bytes, as NumPy writes it.  Returns its length. */
static size_t format_header(char *buf, size_t cap, const NpyType *t, const sk_npy_shape *s) {
    char shape[200];
    describe_shape(s, shape, sizeof shape);
    int n = snprintf(buf + NPY_PRELUDE_V1, cap - NPY_PRELUDE_V1, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     t->descr, shape);
    size_t total = NPY_PRELUDE_V1 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    memset(buf + NPY_PRELUDE_V1 + n, ' ', padded - total);
    buf[padded - 1] = '\n';
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    npy_store_le((unsigned char *)buf + 8, padded - NPY_PRELUDE_V1, 2);
    return padded;
}

static int write_all(FILE *f, const sk_npy_shape *s, const double *data, const NpyType *t) {
    char header[512];
    size_t hlen = format_header(header, sizeof header, t, s);
    if (fwrite(header, 1, hlen, f) != hlen)
        return -1;
    unsigned char chunk[4096];
    int64_t n = elems_of(s), per = (int64_t)sizeof chunk / t->size;
    for (int64_t i = 0; i < n; i += per) {
        int64_t k = n - i < per ? n - i : per;
        for (int64_t j = 0; j < k; j++)
            encode(chunk + j * t->size, data[i + j], s->dtype);
        if (fwrite(chunk, (size_t)t->size, (size_t)k, f) != (size_t)k)
            return -1;
    }
    return 0;
}

int sk_npy_write_temp(const char *path, const char *tmp, const sk_npy_shape *shape, const double *data, char *err,
                      size_t errlen) {
    const NpyType *t = type_of_dtype(shape->dtype);
    if (!t)
        return npy_fail(err, errlen, "cannot write '%s': %s has no .npy dtype", path, dtype_names[shape->dtype]);
    errno = 0;
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL, e = errno;
    if (f) {
        ok = write_all(f, shape, data, t) == 0;
        e = ok ? 0 : errno;
        ok = sk_close_synced(f) == 0 && ok;
        e = e ? e : errno;
    }
    if (ok)
        return 0;
    remove(tmp);
    return npy_fail(err, errlen, "cannot write '%s': %s", path, strerror(e ? e : EIO));
}

int sk_npy_write(const char *path, const sk_npy_shape *shape, const double *data, char *err, size_t errlen) {
    char tmp[4096 + 32];
    if (sk_temp_path(path, tmp, sizeof tmp))
        return npy_fail(err, errlen, "cannot write '%s': the path is too long", path);
    if (sk_npy_write_temp(path, tmp, shape, data, err, errlen))
        return -1;
    if (sk_commit(tmp, path) == 0)
        return 0;
    int rc = npy_fail(err, errlen, "cannot write '%s': %s", path, strerror(errno ? errno : EIO));
    remove(tmp);
    return rc;
}

/* ---- .npz members ---- */

static int seek_member(sk_npy_file *f, const char *member, char *err, size_t errlen) {
    int64_t at, size;
    if (npz_member_data(f->fd, f->path, member, &at, &size, err, errlen))
        return -1;
    if (lseek(f->fd, (off_t)at, SEEK_SET) < 0)
        return npy_fail(err, errlen, "'%s' is a damaged .npz archive (array '%s')", f->path, member);
    f->data_at = at;
    f->member_end = at + size;
    return 0;
}

int sk_npy_read_source(const sk_npy_source *src, const sk_npy_shape *want, sk_npy_shape *shape, double **data,
                       const char **from, char *err, size_t errlen) {
    if (!src->member)
        return read_plain(src->path, src->cast, want, shape, data, from, err, errlen);
    sk_npy_shape got;
    sk_npy_file *f = open_file(src->path, src->member, src->cast, want ? want->dtype : -1, &got, err, errlen);
    if (!f)
        return -1;
    int rc = 0;
    if (want) {
        sk_npy_shape w = *want;
        w.dtype = got.dtype;
        if (!same_shape(&got, &w)) {
            char have[160], need[160];
            describe_shape(&got, have, sizeof have);
            describe_shape(want, need, sizeof need);
            rc = npy_fail(err, errlen, "'%s' array '%s' has shape %s, but %s is needed", src->path, src->member, have,
                      need);
        }
    }
    int64_t start[SC_MAX_RANK] = {0}, n = elems_of(&got);
    double *out = rc ? NULL : malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!rc && !out)
        rc = npy_fail(err, errlen, "out of memory reading '%s'", src->path);
    if (!rc && (rc = sk_npy_read_box(f, start, got.dims, out, err, errlen)) != 0)
        free(out);
    if (!rc && from)
        *from = sk_npy_file_converted(f);
    sk_npy_close(f);
    if (!rc) {
        *data = out;
        *shape = got;
    }
    return rc;
}

/* A .npy file's bytes in memory (malloc'd), for a member. */
static unsigned char *npy_bytes(const sk_npy_shape *s, const double *data, const NpyType *t, size_t *len) {
    char header[512];
    size_t hlen = format_header(header, sizeof header, t, s);
    int64_t n = elems_of(s);
    unsigned char *b = malloc(hlen + (size_t)(n * t->size) + 1);
    if (!b)
        return NULL;
    memcpy(b, header, hlen);
    for (int64_t i = 0; i < n; i++)
        encode(b + hlen + i * t->size, data[i], s->dtype);
    *len = hlen + (size_t)(n * t->size);
    return b;
}

/* A .npz member's bytes: the .npy file of entry e (malloc'd), for lib/host/npz.c. */
unsigned char *npy_member_bytes(const sk_npz_entry *e, size_t *len, char *err, size_t errlen) {
    const NpyType *t = type_of_dtype(e->shape.dtype);
    unsigned char *b = t ? npy_bytes(&e->shape, e->data, t, len) : NULL;
    if (!t)
        npy_fail(err, errlen, "%s has no .npy dtype", dtype_names[e->shape.dtype]);
    else if (!b)
        npy_fail(err, errlen, "out of memory");
    return b;
}
