/* elementwise.c: unary and binary arithmetic, convert, compare and select,
 * over n contiguous elements, with the semantics of docs/ir.md's
 * interpreter table.  f32 computes in f32 with the float math functions,
 * f64 in double; bf16 and f16 are widened to f32, computed, and rounded
 * once.  The op switch sits in a small inline function called with a
 * loop-invariant op, which compilers hoist out of the loop. */
#include "internal.h"

#include <math.h>

/* ---- unary ---- */

static inline float un_f(sk_unary_op op, float x) {
    switch (op) {
    case SK_NEGATE: return -x;
    case SK_ABS: return fabsf(x);
    case SK_SQUARE: return x * x;
    case SK_RELU: return isnan(x) ? x : x > 0 ? x : 0.0f;
    case SK_EXP: return expf(x);
    case SK_LOG: return logf(x);
    case SK_TANH: return tanhf(x);
    case SK_SQRT: return sqrtf(x);
    case SK_RSQRT: return 1.0f / sqrtf(x);
    case SK_SIN: return sinf(x);
    case SK_COS: return cosf(x);
    /* The tanh approximation, jax.nn.gelu's default (approximate=True). */
    case SK_GELU: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case SK_LOGISTIC: return 1.0f / (1.0f + expf(-x));
    default: return x;
    }
}

static inline double un_d(sk_unary_op op, double x) {
    switch (op) {
    case SK_NEGATE: return -x;
    case SK_ABS: return fabs(x);
    case SK_SQUARE: return x * x;
    case SK_RELU: return isnan(x) ? x : x > 0 ? x : 0.0;
    case SK_EXP: return exp(x);
    case SK_LOG: return log(x);
    case SK_TANH: return tanh(x);
    case SK_SQRT: return sqrt(x);
    case SK_RSQRT: return 1.0 / sqrt(x);
    case SK_SIN: return sin(x);
    case SK_COS: return cos(x);
    case SK_GELU: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case SK_LOGISTIC: return 1.0 / (1.0 + exp(-x));
    default: return x;
    }
}

/* i32 arithmetic wraps modulo 2^32: computed on uint32_t, where C defines
 * overflow. */
static inline int32_t un_i(sk_unary_op op, int32_t x) {
    uint32_t u = (uint32_t)x;
    switch (op) {
    case SK_NEGATE: return (int32_t)(0u - u);
    case SK_ABS: return x < 0 ? (int32_t)(0u - u) : x;
    case SK_SQUARE: return (int32_t)(u * u);
    case SK_RELU: return x > 0 ? x : 0;
    default: return x;
    }
}

int sk_unary(sk_unary_op op, sk_dtype t, int64_t n, const void *x, void *out) {
    if (!sk_valid_dtype(t) || n < 0 || (int)op < 0 || op > SK_LOGISTIC ||
        (t == SK_BOOL && op != SK_COPY) || (t == SK_I32 && op > SK_RELU))
        return SC_ERR;
    if (op == SK_COPY) {
        if (out != x)
            memmove(out, x, (size_t)n * sk_dtype_size(t));
        return 0;
    }
    switch (t) {
    case SK_F32:
        for (int64_t i = 0; i < n; i++)
            ((float *)out)[i] = un_f(op, ((const float *)x)[i]);
        break;
    case SK_F64:
        for (int64_t i = 0; i < n; i++)
            ((double *)out)[i] = un_d(op, ((const double *)x)[i]);
        break;
    case SK_I32:
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)out)[i] = un_i(op, ((const int32_t *)x)[i]);
        break;
    default:   /* bf16, f16 */
        for (int64_t i = 0; i < n; i++)
            sk_store_f(t, out, i, un_f(op, sk_load_f(t, x, i)));
        break;
    }
    return 0;
}

/* ---- binary ---- */

/* Floor modulo: the result has the divisor's sign (np.mod). */
#define FLOOR_REM(FMOD, COPYSIGN, a, b)                                   \
    do {                                                                  \
        r = FMOD(a, b);                                                   \
        if (r != 0 && (r < 0) != (b < 0))                                 \
            r += b;                                                       \
        if (r == 0)                                                       \
            r = COPYSIGN(0, b);                                           \
    } while (0)

static inline float bin_f(sk_binary_op op, float a, float b) {
    float r;
    switch (op) {
    case SK_ADD: return a + b;
    case SK_SUB: return a - b;
    case SK_MUL: return a * b;
    case SK_DIV: return a / b;
    case SK_REM: FLOOR_REM(fmodf, copysignf, a, b); return r;
    case SK_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case SK_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    default: return powf(a, b);
    }
}

static inline double bin_d(sk_binary_op op, double a, double b) {
    double r;
    switch (op) {
    case SK_ADD: return a + b;
    case SK_SUB: return a - b;
    case SK_MUL: return a * b;
    case SK_DIV: return a / b;
    case SK_REM: FLOOR_REM(fmod, copysign, a, b); return r;
    case SK_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case SK_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    default: return pow(a, b);
    }
}

/* Floor division and modulo; x / 0 = -1 and x % 0 = x (XLA's values);
 * INT32_MIN / -1 wraps to INT32_MIN (and INT32_MIN % -1 is 0). */
static inline int32_t bin_i(sk_binary_op op, int32_t a, int32_t b) {
    switch (op) {
    case SK_ADD: return (int32_t)((uint32_t)a + (uint32_t)b);
    case SK_SUB: return (int32_t)((uint32_t)a - (uint32_t)b);
    case SK_MUL: return (int32_t)((uint32_t)a * (uint32_t)b);
    case SK_MAX: return a > b ? a : b;
    case SK_MIN: return a < b ? a : b;
    default: break;
    }
    if (b == 0)
        return op == SK_DIV ? -1 : a;
    int64_t q = (int64_t)a / b, r = (int64_t)a % b;
    if (r != 0 && (r < 0) != (b < 0)) {
        q -= 1;
        r += b;
    }
    return op == SK_DIV ? (int32_t)(uint32_t)q : (int32_t)r;
}

int sk_binary(sk_binary_op op, sk_dtype t, int64_t n, const void *a, const void *b, void *out) {
    if (!sk_valid_dtype(t) || n < 0 || (int)op < 0 || op > SK_POW || t == SK_BOOL ||
        (t == SK_I32 && op == SK_POW))
        return SC_ERR;
    switch (t) {
    case SK_F32:
        for (int64_t i = 0; i < n; i++)
            ((float *)out)[i] = bin_f(op, ((const float *)a)[i], ((const float *)b)[i]);
        break;
    case SK_F64:
        for (int64_t i = 0; i < n; i++)
            ((double *)out)[i] = bin_d(op, ((const double *)a)[i], ((const double *)b)[i]);
        break;
    case SK_I32:
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)out)[i] = bin_i(op, ((const int32_t *)a)[i], ((const int32_t *)b)[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            sk_store_f(t, out, i, bin_f(op, sk_load_f(t, a, i), sk_load_f(t, b, i)));
        break;
    }
    return 0;
}

/* ---- convert, compare, select ---- */

/* Every dtype's values are exact in double. */
static inline double load_d(sk_dtype t, const void *p, int64_t i) {
    switch (t) {
    case SK_F64: return ((const double *)p)[i];
    case SK_I32: return ((const int32_t *)p)[i];
    case SK_BOOL: return ((const uint8_t *)p)[i];
    default: return sk_load_f(t, p, i);
    }
}

int sk_convert(sk_dtype from, sk_dtype to, int64_t n, const void *x, void *out) {
    if (!sk_valid_dtype(from) || !sk_valid_dtype(to) || n < 0)
        return SC_ERR;
    if (from == to) {
        if (out != x)
            memmove(out, x, (size_t)n * sk_dtype_size(to));
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = load_d(from, x, i);
        switch (to) {
        case SK_F64: ((double *)out)[i] = v; break;
        case SK_BOOL: ((uint8_t *)out)[i] = v != 0; break;
        case SK_I32:
            /* Truncates toward zero, saturates, NaN gives 0 (XLA's convert;
             * a C cast out of range is undefined). */
            ((int32_t *)out)[i] = isnan(v) ? 0 : v <= INT32_MIN ? INT32_MIN
                                  : v >= INT32_MAX ? INT32_MAX : (int32_t)v;
            break;
        /* f32, bf16, f16: through float (f64 and large i32 round twice). */
        default: sk_store_f(to, out, i, (float)v); break;
        }
    }
    return 0;
}

int sk_compare(sk_cmp dir, sk_dtype t, int64_t n, const void *a, const void *b, uint8_t *out) {
    if (!sk_valid_dtype(t) || n < 0 || (int)dir < 0 || dir > SK_NE)
        return SC_ERR;
    for (int64_t i = 0; i < n; i++) {
        double x = load_d(t, a, i), y = load_d(t, b, i);
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
    }
    return 0;
}

int sk_select(sk_dtype t, int64_t n, const uint8_t *p, const void *a, const void *b, void *out) {
    if (!sk_valid_dtype(t) || n < 0)
        return SC_ERR;
    size_t es = sk_dtype_size(t);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)out + i * (int64_t)es, (const char *)(p[i] ? a : b) + i * (int64_t)es, es);
    return 0;
}
