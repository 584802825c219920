/* reduce.c: sum / max / min over a set of dims.
 *
 * One pass over the input in memory order: each element is folded into the
 * accumulator of its output element, found by an odometer whose reduced
 * dims have output stride 0.  Reading the input once and in order is what
 * makes this fast whichever dims are reduced; the accumulators are f32 for
 * f32/bf16/f16 (docs/ir.md: bf16 and f16 sums accumulate in f32), f64 for
 * f64, wrapping uint32 for i32, and bytes for bool. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

static inline float fold_f(sc_reduce op, float acc, float x) {
    if (op == SC_SUM)
        return acc + x;
    if (isnan(acc) || isnan(x))
        return NAN;
    return op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

static inline double fold_d(sc_reduce op, double acc, double x) {
    if (op == SC_SUM)
        return acc + x;
    if (isnan(acc) || isnan(x))
        return NAN;
    return op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

static inline int32_t fold_i(sc_reduce op, int32_t acc, int32_t x) {
    if (op == SC_SUM)
        return (int32_t)((uint32_t)acc + (uint32_t)x);
    return op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

int sk_reduce(sk_dtype t, sc_shape in, const void *x, int ndims, const int *dims, sc_reduce op,
              void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(in) || ndims < 0 || ndims > in.rank ||
        (op != SC_SUM && op != SC_MAX && op != SC_MIN) || (t == SK_BOOL && op == SC_SUM))
        return SC_ERR;
    int reduced[SC_MAX_RANK] = {0};
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 0 || dims[i] >= in.rank || reduced[dims[i]])
            return SC_ERR;
        reduced[dims[i]] = 1;
    }
    /* Output strides per input dim: 0 for a reduced dim. */
    int64_t ost[SC_MAX_RANK], m = 1, nout = 1;
    for (int d = in.rank - 1; d >= 0; d--) {
        ost[d] = reduced[d] ? 0 : m;
        if (!reduced[d])
            m *= in.dims[d];
    }
    nout = m;
    int64_t n = sk_elems(in);
    int is_f = t == SK_F32 || t == SK_BF16 || t == SK_F16;
    /* Only bf16 and f16 need accumulators apart from the output. */
    int narrow = t == SK_BF16 || t == SK_F16;
    void *acc = narrow ? malloc(nout ? (size_t)nout * sizeof(float) : 1) : out;
    if (!acc)
        return SC_ERR;
    float *af = acc;
    double *ad = acc;
    int32_t *ai = acc;
    uint8_t *ab = out;
    for (int64_t o = 0; o < nout; o++) {   /* the identities */
        if (is_f)
            af[o] = op == SC_SUM ? 0.0f : op == SC_MAX ? -INFINITY : INFINITY;
        else if (t == SK_F64)
            ad[o] = op == SC_SUM ? 0.0 : op == SC_MAX ? -INFINITY : INFINITY;
        else if (t == SK_I32)
            ai[o] = op == SC_SUM ? 0 : op == SC_MAX ? INT32_MIN : INT32_MAX;
        else
            ab[o] = op == SC_MIN;
    }
    int64_t last = in.rank > 0 ? in.dims[in.rank - 1] : 1;
    int64_t ls = in.rank > 0 ? ost[in.rank - 1] : 0;
    int64_t idx[SC_MAX_RANK] = {0}, o = 0;
    for (int64_t i = 0; i < n; i += last) {
        /* A row along the last dim: its outputs are o + j * ls. */
        switch (t) {
        case SK_F32: {
            const float *xs = (const float *)x + i;
            if (ls == 0) {   /* the row folds into one output: keep it in a register */
                float a = af[o];
                for (int64_t j = 0; j < last; j++)
                    a = fold_f(op, a, xs[j]);
                af[o] = a;
            } else
                for (int64_t j = 0; j < last; j++)
                    af[o + j * ls] = fold_f(op, af[o + j * ls], xs[j]);
            break;
        }
        case SK_BF16: case SK_F16:
            for (int64_t j = 0; j < last; j++)
                af[o + j * ls] = fold_f(op, af[o + j * ls], sk_load_f(t, x, i + j));
            break;
        case SK_F64: {
            const double *xs = (const double *)x + i;
            if (ls == 0) {
                double a = ad[o];
                for (int64_t j = 0; j < last; j++)
                    a = fold_d(op, a, xs[j]);
                ad[o] = a;
            } else
                for (int64_t j = 0; j < last; j++)
                    ad[o + j * ls] = fold_d(op, ad[o + j * ls], xs[j]);
            break;
        }
        case SK_I32: {
            const int32_t *xs = (const int32_t *)x + i;
            for (int64_t j = 0; j < last; j++)
                ai[o + j * ls] = fold_i(op, ai[o + j * ls], xs[j]);
            break;
        }
        default: {
            const uint8_t *xs = (const uint8_t *)x + i;
            for (int64_t j = 0; j < last; j++)
                ab[o + j * ls] = op == SC_MAX ? (ab[o + j * ls] | xs[j]) : (ab[o + j * ls] & xs[j]);
            break;
        }
        }
        for (int d = in.rank - 2; d >= 0; d--) {
            o += ost[d];
            if (++idx[d] < in.dims[d])
                break;
            o -= ost[d] * in.dims[d];
            idx[d] = 0;
        }
    }
    if (narrow) {
        for (int64_t k = 0; k < nout; k++)
            sk_store_f(t, out, k, af[k]);
        free(acc);
    }
    return 0;
}
