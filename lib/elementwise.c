/* elementwise.c: unary and binary arithmetic, convert, compare and select,
 * over n contiguous elements.  What each op computes is its formula in
 * shardc_elementwise.def (through ew_ops.h): f32 in float with the float
 * math functions, f64 in double, bf16 and f16 widened to float, computed and
 * rounded once (bf16 in the vectorized blocks: its conversions are inline
 * and branch-free; f16's are calls). */
#include "internal.h"

#include "ew_ops.h"

#include <math.h>

/* Which dtypes each op takes (shardc_elementwise.def's dtypes column). */
enum { ANY, NUM, FLOAT, BOOL };
static const unsigned char unary_dtypes[SK_UNARY_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) [SK_##ID] = dtypes,
#define SK_BINARY(ID, name, builtin, dtypes, f, fi)
#include "shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};
static const unsigned char binary_dtypes[SK_BINARY_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi)
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) [SK_##ID] = dtypes,
#include "shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};

static int takes(int dtypes, sk_dtype t) {
    if (dtypes == BOOL)
        return t == SK_BOOL;
    return dtypes == ANY ||
           (t != SK_BOOL && (dtypes == NUM || (t != SK_I32 && t != SK_I64 && t != SK_U8 && t != SK_U32)));
}

/* One loop per op and dtype, each calling the op's function of ew_ops.h;
 * the float, integer and bool loops exist only for ops that take those dtypes
 * (the others never get there: takes() refused them).  Blocks of 64 elements, a count the
 * compiler knows, which -O2's vectorizer needs (it makes no remainder
 * loops), then the rest; elements are independent (in place, element i is
 * read before it is written), which SK_INDEPENDENT tells it.  The blocks
 * run on the device's OpenMP threads when there are enough elements
 * (SK_KERNEL_FOR): each element is computed alone, so the split changes
 * nothing. */
#define LOOP(T, F, ...)                                                     \
    do {                                                                    \
        int64_t blocks = n / 64 * 64;                                       \
        SK_KERNEL_FOR(n, for (int64_t blk = 0; blk < blocks; blk += 64)     \
            SK_INDEPENDENT for (int64_t i = blk; i < blk + 64; i++)         \
                ((T *)out)[i] = F(__VA_ARGS__););                           \
        for (int64_t i = blocks; i < n; i++)                                \
            ((T *)out)[i] = F(__VA_ARGS__);                                 \
    } while (0)
#define AT(T, p) ((const T *)p)[i]

/* ---- unary ---- */

SK_ISA_CLONES int sk_unary(sk_ctx *ctx, sk_unary_op op, sk_dtype t, int64_t n, const void *x, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || n < 0 || (int)op < 0 || op >= SK_UNARY_COUNT || !takes(unary_dtypes[op], t))
        return SC_ERR;
    if (op == SK_COPY) {
        if (out != x)
            memmove(out, x, (size_t)n * sk_dtype_size(t));
        return 0;
    }
    switch (op) {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi)                                                     \
    case SK_##ID:                                                                                       \
        EW_IF_BOOL_##dtypes(if (t == SK_BOOL) LOOP(uint8_t, ew_##ID##_bool, AT(uint8_t, x));)           \
        EW_IF_F_##dtypes(                                                                               \
        if (t == SK_F32)                                                                                \
            LOOP(float, ew_##ID##_f32, AT(float, x));                                                   \
        else if (t == SK_F64)                                                                           \
            LOOP(double, ew_##ID##_f64, AT(double, x));                                                 \
        EW_IF_I32_##dtypes(else if (t == SK_I32) LOOP(int32_t, ew_##ID##_i32, AT(int32_t, x));)         \
        EW_IF_I32_##dtypes(else if (t == SK_I64) LOOP(int64_t, ew_##ID##_i64, AT(int64_t, x));)         \
        EW_IF_I32_##dtypes(else if (t == SK_U8) LOOP(uint8_t, ew_##ID##_u8, AT(uint8_t, x));)           \
        EW_IF_I32_##dtypes(else if (t == SK_U32) LOOP(uint32_t, ew_##ID##_u32, AT(uint32_t, x));)       \
        else if (t == SK_BF16)                                                                          \
            LOOP(uint16_t, sc_bf16_from_float, ew_##ID##_f32(sc_bf16_to_float(AT(uint16_t, x))));      \
        else if (t != SK_BOOL) /* f16 */                                                                \
            SK_KERNEL_FOR(n, for (int64_t i = 0; i < n; i++)                                            \
                sk_store_f(t, out, i, ew_##ID##_f32(sk_load_f(t, x, i))););)                            \
        break;
#define SK_BINARY(ID, name, builtin, dtypes, f, fi)
#include "shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
    default: break;
    }
    return 0;
}

/* ---- binary ---- */

SK_ISA_CLONES int sk_binary(sk_ctx *ctx, sk_binary_op op, sk_dtype t, int64_t n, const void *a, const void *b,
                            void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || n < 0 || (int)op < 0 || op >= SK_BINARY_COUNT || !takes(binary_dtypes[op], t))
        return SC_ERR;
    switch (op) {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi)
#define SK_BINARY(ID, name, builtin, dtypes, f, fi)                                                    \
    case SK_##ID:                                                                                       \
        EW_IF_BOOL_##dtypes(if (t == SK_BOOL) LOOP(uint8_t, ew_##ID##_bool, AT(uint8_t, a), AT(uint8_t, b));) \
        EW_IF_F_##dtypes(                                                                               \
        if (t == SK_F32)                                                                                \
            LOOP(float, ew_##ID##_f32, AT(float, a), AT(float, b));                                     \
        else if (t == SK_F64)                                                                           \
            LOOP(double, ew_##ID##_f64, AT(double, a), AT(double, b));                                  \
        EW_IF_I32_##dtypes(else if (t == SK_I32) LOOP(int32_t, ew_##ID##_i32, AT(int32_t, a), AT(int32_t, b));) \
        EW_IF_I32_##dtypes(else if (t == SK_I64) LOOP(int64_t, ew_##ID##_i64, AT(int64_t, a), AT(int64_t, b));) \
        EW_IF_I32_##dtypes(else if (t == SK_U8) LOOP(uint8_t, ew_##ID##_u8, AT(uint8_t, a), AT(uint8_t, b));) \
        EW_IF_I32_##dtypes(else if (t == SK_U32) LOOP(uint32_t, ew_##ID##_u32, AT(uint32_t, a), AT(uint32_t, b));) \
        else if (t == SK_BF16)                                                                          \
            LOOP(uint16_t, sc_bf16_from_float,                                                          \
                 ew_##ID##_f32(sc_bf16_to_float(AT(uint16_t, a)), sc_bf16_to_float(AT(uint16_t, b)))); \
        else if (t != SK_BOOL) /* f16 */                                                                \
            SK_KERNEL_FOR(n, for (int64_t i = 0; i < n; i++)                                            \
                sk_store_f(t, out, i, ew_##ID##_f32(sk_load_f(t, a, i), sk_load_f(t, b, i))););)         \
        break;
#include "shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
    default: break;
    }
    return 0;
}

/* ---- convert, compare, select ---- */

static int is_int(sk_dtype t) { return t == SK_I32 || t == SK_BOOL || t == SK_U32 || t == SK_I64 || t == SK_U8; }

/* Element i of an integer buffer, exact (a double does not hold every i64). */
static int64_t load_int(sk_dtype t, const void *p, int64_t i) {
    switch (t) {
    case SK_I32: return ((const int32_t *)p)[i];
    case SK_U32: return ((const uint32_t *)p)[i];
    case SK_I64: return ((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];   /* bool, u8 */
    }
}

/* Conversions to or from i64 and u8 (docs/language.md, Casts): between
 * integers by value, modulo the target's width (NumPy's astype); from
 * floating point toward zero (sk_to_i64, sk_to_u8); i64 to floating point
 * rounded once, from int64_t. */
static void convert_wide(sk_dtype from, sk_dtype to, int64_t n, const void *x, void *out) {
    SK_KERNEL_FOR(n, for (int64_t i = 0; i < n; i++) {
        if (is_int(from) && to != SK_BOOL) {
            int64_t v = load_int(from, x, i);
            switch (to) {
            case SK_I32: ((int32_t *)out)[i] = sk_wrap_i32(v); break;
            case SK_U32: ((uint32_t *)out)[i] = (uint32_t)(uint64_t)v; break;
            case SK_I64: ((int64_t *)out)[i] = v; break;
            case SK_U8: ((uint8_t *)out)[i] = (uint8_t)(uint64_t)v; break;
            case SK_F64: ((double *)out)[i] = (double)v; break;
            default: sk_store_f(to, out, i, (float)v); break;   /* f32, bf16, f16 */
            }
        } else if (to == SK_BOOL)
            ((uint8_t *)out)[i] = is_int(from) ? load_int(from, x, i) != 0 : sk_load_d(from, x, i) != 0;
        else if (to == SK_I64)
            ((int64_t *)out)[i] = sk_to_i64(sk_load_d(from, x, i));
        else
            ((uint8_t *)out)[i] = sk_to_u8(sk_load_d(from, x, i));
    });
}

SK_ISA_CLONES int sk_convert(sk_ctx *ctx, sk_dtype from, sk_dtype to, int64_t n, const void *x, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(from) || !sk_valid_dtype(to) || n < 0)
        return SC_ERR;
    if (from == to) {
        if (out != x)
            memmove(out, x, (size_t)n * sk_dtype_size(to));
        return 0;
    }
    if (from == SK_I64 || from == SK_U8 || to == SK_I64 || to == SK_U8) {
        convert_wide(from, to, n, x, out);
        return 0;
    }
    /* Mixed precision's casts, in LOOP's blocks, which vectorize (the loop
     * below switches on both dtypes per element: 0.07 of the STREAM triad). */
    if (from == SK_F32 && to == SK_BF16) {
        LOOP(uint16_t, sc_bf16_from_float, AT(float, x));
        return 0;
    }
    if (from == SK_BF16 && to == SK_F32) {
        LOOP(float, sc_bf16_to_float, AT(uint16_t, x));
        return 0;
    }
    SK_KERNEL_FOR(n, for (int64_t i = 0; i < n; i++) {
        double v = sk_load_d(from, x, i);
        switch (to) {
        case SK_F64: ((double *)out)[i] = v; break;
        case SK_BOOL: ((uint8_t *)out)[i] = v != 0; break;
        case SK_I32: ((int32_t *)out)[i] = sk_to_i32(v); break;
        case SK_U32: ((uint32_t *)out)[i] = sk_to_u32(v); break;
        /* f32, bf16, f16: through float (f64 and large i32 round twice). */
        default: sk_store_f(to, out, i, (float)v); break;
        }
    });
    return 0;
}

int sk_compare(sk_ctx *ctx, sk_cmp dir, sk_dtype t, int64_t n, const void *a, const void *b, uint8_t *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || n < 0 || (int)dir < 0 || dir > SK_NE)
        return SC_ERR;
    if (t == SK_I64) {   /* exact: compared as int64_t */
        SK_KERNEL_FOR(n, for (int64_t i = 0; i < n; i++) {
            int64_t x = ((const int64_t *)a)[i], y = ((const int64_t *)b)[i];
            out[i] = (uint8_t)(dir == SK_LT ? x < y : dir == SK_LE ? x <= y : dir == SK_GT ? x > y
                               : dir == SK_GE ? x >= y : dir == SK_EQ ? x == y : x != y);
        });
        return 0;
    }
    SK_KERNEL_FOR(n, for (int64_t i = 0; i < n; i++) {
        double x = sk_load_d(t, a, i), y = sk_load_d(t, b, i);
        int r;
        switch (dir) {
        case SK_LT: r = x < y; break;
        case SK_LE: r = x <= y; break;
        case SK_GT: r = x > y; break;
        case SK_GE: r = x >= y; break;
        case SK_EQ: r = x == y; break;
        default: r = x != y; break;
        }
        out[i] = (uint8_t)r;
    });
    return 0;
}

int sk_select(sk_ctx *ctx, sk_dtype t, int64_t n, const uint8_t *p, const void *a, const void *b, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || n < 0)
        return SC_ERR;
    size_t es = sk_dtype_size(t);
    SK_KERNEL_FOR(n, for (int64_t i = 0; i < n; i++)
        memcpy((char *)out + i * (int64_t)es, (const char *)(p[i] ? a : b) + i * (int64_t)es, es););
    return 0;
}
