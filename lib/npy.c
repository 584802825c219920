/* .npy reading and writing (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
 * A file is the magic "\x93NUMPY", a version, a little-endian header length
 * (2 bytes in 1.0, 4 in 2.0), a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and a newline, then the raw elements.  The reader
 * checks every part and says what is wrong; bytes are decoded one by one, so
 * it does not depend on the host's byte order. */
#include "shardc_npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

/* The compiler's names for the dtypes and shapes (compiler/ir/ir.h), so that
 * `shardc interp` and generated programs share this one reader. */
typedef sk_npy_shape Shape;
enum { DT_F32 = SK_F32, DT_F64 = SK_F64, DT_BF16 = SK_BF16, DT_F16 = SK_F16, DT_I32 = SK_I32, DT_BOOL = SK_BOOL };
enum { MAX_RANK = SC_MAX_RANK };
static const char *const dtype_name[] = {"f32", "f64", "bf16", "f16", "i32", "bool"};

static int64_t shape_elems(const Shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->dims[d];
    return n;
}

static int shape_eq(const Shape *a, const Shape *b) {
    if (a->dtype != b->dtype || a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

/* Rounding to f32 and bf16 (data read from a file is a float, and data
 * written has been rounded to its dtype, so these are exact). */
static double num_round(double x, int dtype) {
    return dtype == DT_F32 ? (double)(float)x : dtype == DT_BF16 ? (double)sc_bf16_to_float(sc_bf16_from_float((float)x)) : x;
}
static double num_from_f16_bits(uint16_t h) { return sc_f16_to_float(h); }
static uint16_t num_to_f16_bits(double x) { return sc_f16_from_float((float)x); }
static int32_t num_wrap_i32(int64_t v) { return (int32_t)(uint32_t)v; }

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

/* bf16 is absent: it is stored as '<f4'. */
static const NpyType npy_types[] = {
    {"<f4", DT_F32, 4}, {"<f8", DT_F64, 8}, {"<i4", DT_I32, 4}, {"|b1", DT_BOOL, 1}, {"<f2", DT_F16, 2},
};

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
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
    return type_of_descr(dtype == DT_F32 || dtype == DT_BF16 ? "<f4" : dtype == DT_F64 ? "<f8"
                         : dtype == DT_I32 ? "<i4" : dtype == DT_BOOL ? "|b1" : dtype == DT_F16 ? "<f2" : "");
}

/* ---- the header dict ---- */

typedef struct {
    const char *p, *end;
    char descr[16];
    int fortran, have_descr, have_fortran, have_shape;
    Shape shape;
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
        if (h->shape.rank == MAX_RANK) {
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

static void describe_shape(const Shape *s, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < s->rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)s->dims[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, s->rank == 1 ? ",)" : ")");
}

static uint64_t load_le(const unsigned char *b, int size) {
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static double decode(const unsigned char *b, int dtype) {
    switch (dtype) {
    case DT_F32: case DT_BF16: {
        uint32_t bits = (uint32_t)load_le(b, 4);
        float f;
        memcpy(&f, &bits, sizeof f);
        return num_round(f, dtype);
    }
    case DT_F64: {
        uint64_t bits = load_le(b, 8);
        double x;
        memcpy(&x, &bits, sizeof x);
        return x;
    }
    case DT_I32: return num_wrap_i32((int64_t)load_le(b, 4));
    case DT_BOOL: return b[0] != 0;
    default: return num_from_f16_bits((uint16_t)load_le(b, 2));
    }
}

/* The header of an open file: version, length, dict.  On success the file
 * is positioned at the data. */
static int read_header(FILE *f, const char *path, Header *h, char *err, size_t errlen) {
    unsigned char pre[12];
    size_t got = fread(pre, 1, 8, f);
    if (got < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return fail(err, errlen, "'%s' is not a .npy file (no \\x93NUMPY magic)", path);
    if (got < 8)
        return fail(err, errlen, "'%s' is truncated inside its header", path);
    if ((pre[6] != 1 && pre[6] != 2) || pre[7] != 0)
        return fail(err, errlen, "'%s' has .npy format version %d.%d; only 1.0 and 2.0 are supported", path,
                    pre[6], pre[7]);
    int lenbytes = pre[6] == 1 ? 2 : 4;
    if (fread(pre + 8, 1, (size_t)lenbytes, f) != (size_t)lenbytes)
        return fail(err, errlen, "'%s' is truncated inside its header", path);
    uint64_t hlen = load_le(pre + 8, lenbytes);
    if (hlen > MAX_HEADER)
        return fail(err, errlen, "'%s' declares a header of %llu bytes, more than a .npy header can sensibly be",
                    path, (unsigned long long)hlen);
    char *text = malloc(hlen + 1);
    if (!text)
        return fail(err, errlen, "out of memory reading '%s'", path);
    int rc = 0;
    if (fread(text, 1, hlen, f) != hlen)
        rc = fail(err, errlen, "'%s' is truncated inside its header", path);
    else if (memchr(text, '\0', hlen))
        rc = fail(err, errlen, "'%s' has a bad header: it contains a NUL byte", path);
    else {
        *h = (Header){text, text + hlen, {0}, 0, 0, 0, 0, {0}, NULL};
        const char *why = parse_header(h);
        if (why)
            rc = fail(err, errlen, "'%s' has a bad header: %s", path, why);
    }
    free(text);
    h->p = h->end = NULL;
    return rc;
}

/* The dtype and shape the caller asked for, if any. */
static int check_wanted(const char *path, const NpyType *t, const Shape *s, const Shape *want, char *err,
                        size_t errlen) {
    if (!want)
        return 0;
    const NpyType *need = type_of_dtype(want->dtype);
    if (!need || need != t)
        return fail(err, errlen, "'%s' holds %s (%s) data, but %s is needed%s", path, t->descr,
                    dtype_name[t->dtype], dtype_name[want->dtype],
                    want->dtype == DT_BF16 ? " (bf16 is stored as '<f4')" : "");
    Shape w = *want;
    w.dtype = s->dtype;
    if (!shape_eq(s, &w)) {
        char have[160], need_s[160];
        describe_shape(s, have, sizeof have);
        describe_shape(want, need_s, sizeof need_s);
        return fail(err, errlen, "'%s' has shape %s, but %s is needed", path, have, need_s);
    }
    return 0;
}

static int read_data(FILE *f, const char *path, const NpyType *t, int dtype, int64_t n, double **data,
                     char *err, size_t errlen) {
    size_t bytes = (size_t)n * (size_t)t->size;
    unsigned char *raw = malloc(bytes ? bytes : 1);
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    int rc = 0;
    if (!raw || !out)
        rc = fail(err, errlen, "out of memory reading '%s' (%lld elements)", path, (long long)n);
    else {
        size_t got = fread(raw, 1, bytes, f);
        int extra = got == bytes && fgetc(f) != EOF;
        if (ferror(f))
            rc = fail(err, errlen, "cannot read '%s': %s", path, strerror(errno ? errno : EIO));
        else if (got < bytes)
            rc = fail(err, errlen, "'%s' is truncated: its shape needs %zu bytes of data, it has %zu", path, bytes,
                      got);
        else if (extra)
            rc = fail(err, errlen, "'%s' has bytes after the %zu bytes of data its shape needs", path, bytes);
    }
    for (int64_t i = 0; rc == 0 && i < n; i++)
        out[i] = decode(raw + i * t->size, dtype);
    free(raw);
    if (rc)
        free(out);
    else
        *data = out;
    return rc;
}

int sk_npy_read(const char *path, const Shape *want, Shape *shape, double **data, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, errlen, "cannot read '%s': %s", path, strerror(errno));
    Header h = {0};
    int rc = read_header(f, path, &h, err, errlen);
    const NpyType *t = rc ? NULL : type_of_descr(h.descr);
    char descr[80];
    if (!rc && !t)
        rc = fail(err, errlen, "'%s' has dtype '%s'; supported are '<f4', '<f8', '<i4', '|b1' and '<f2' "
                  "(little-endian)", path, printable(h.descr, descr, sizeof descr));
    if (!rc && h.fortran)
        rc = fail(err, errlen, "'%s' is in Fortran order; save a C-order array (np.ascontiguousarray)", path);
    int64_t n = 1;
    for (int d = 0; !rc && d < h.shape.rank; d++) {
        if (h.shape.dims[d] && n > MAX_ELEMS / h.shape.dims[d])
            rc = fail(err, errlen, "'%s' has more than %lld elements", path, (long long)MAX_ELEMS);
        n *= h.shape.dims[d];
    }
    if (!rc) {
        h.shape.dtype = (uint8_t)(want && want->dtype == DT_BF16 && t->dtype == DT_F32 ? DT_BF16 : t->dtype);
        rc = check_wanted(path, t, &h.shape, want, err, errlen);
    }
    if (!rc)
        rc = read_data(f, path, t, h.shape.dtype, n, data, err, errlen);
    fclose(f);
    if (!rc)
        *shape = h.shape;
    return rc;
}

/* ---- writing ---- */

static void store_le(unsigned char *b, uint64_t v, int size) {
    for (int i = 0; i < size; i++, v >>= 8)
        b[i] = (unsigned char)(v & 0xff);
}

static void encode(unsigned char *b, double x, int dtype) {
    x = num_round(x, dtype);
    switch (dtype) {
    case DT_F32: case DT_BF16: {
        float f = (float)x;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        store_le(b, bits, 4);
        break;
    }
    case DT_F64: {
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        store_le(b, bits, 8);
        break;
    }
    case DT_I32: store_le(b, (uint32_t)(int32_t)x, 4); break;
    case DT_BOOL: b[0] = x != 0; break;
    default: store_le(b, num_to_f16_bits(x), 2); break;
    }
}

/* The 1.0 header, padded with spaces so the data starts at a multiple of
 * 64 bytes, as NumPy writes it.  Returns its length. */
static size_t format_header(char *buf, size_t cap, const NpyType *t, const Shape *s) {
    char shape[200];
    describe_shape(s, shape, sizeof shape);
    int n = snprintf(buf + NPY_PRELUDE_V1, cap - NPY_PRELUDE_V1, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     t->descr, shape);
    size_t total = NPY_PRELUDE_V1 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    memset(buf + NPY_PRELUDE_V1 + n, ' ', padded - total);
    buf[padded - 1] = '\n';
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    store_le((unsigned char *)buf + 8, padded - NPY_PRELUDE_V1, 2);
    return padded;
}

static int write_all(FILE *f, const Shape *s, const double *data, const NpyType *t) {
    char header[512];
    size_t hlen = format_header(header, sizeof header, t, s);
    if (fwrite(header, 1, hlen, f) != hlen)
        return -1;
    unsigned char chunk[4096];
    int64_t n = shape_elems(s), per = (int64_t)sizeof chunk / t->size;
    for (int64_t i = 0; i < n; i += per) {
        int64_t k = n - i < per ? n - i : per;
        for (int64_t j = 0; j < k; j++)
            encode(chunk + j * t->size, data[i + j], s->dtype);
        if (fwrite(chunk, (size_t)t->size, (size_t)k, f) != (size_t)k)
            return -1;
    }
    return 0;
}

int sk_npy_write(const char *path, const Shape *shape, const double *data, char *err, size_t errlen) {
    const NpyType *t = type_of_dtype(shape->dtype);
    if (!t)
        return fail(err, errlen, "cannot write '%s': %s has no .npy dtype", path, dtype_name[shape->dtype]);
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        return fail(err, errlen, "out of memory writing '%s'", path);
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    errno = 0;
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL;
    if (f) {
        ok = write_all(f, shape, data, t) == 0;
        ok &= fflush(f) == 0 && !ferror(f);
        ok &= fclose(f) == 0;
    }
    ok = ok && rename(tmp, path) == 0;
    int rc = 0;
    if (!ok) {
        rc = fail(err, errlen, "cannot write '%s': %s", path, strerror(errno ? errno : EIO));
        remove(tmp);
    }
    free(tmp);
    return rc;
}
