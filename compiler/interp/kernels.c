/* The reference interpreter's kernels: what each op computes on one
 * device, written for clarity rather than speed (docs/ir.md gives the
 * semantics).  Elements are doubles; the caller rounds results to their
 * dtype, so a kernel computes exactly and lets that one rounding happen. */
#include "kernels.h"

#include "numerics.h"
#include "../../lib/ew_ops.h"
#include "../../lib/rng_ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int kfail(const Kernel *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int kfail(const Kernel *k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->err, k->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static const Shape *arg_type(const Kernel *k, int i) { return &k->fn->insts[ir_arg(k->fn, k->in, i)].type; }
static const double *arg_on(const Kernel *k, int i, int64_t dev) { return k->val[ir_arg(k->fn, k->in, i)][dev]; }
static const double *arg(const Kernel *k, int i) { return arg_on(k, i, k->dev); }
static int64_t attr(const Kernel *k, int i) { return ir_attr(k->fn, k->in, i); }

void copy_box(double *dst, const int64_t *dstride, const double *src, const int64_t *sstride, int rank,
              const int64_t *dims) {
    for (int d = 0; d < rank; d++)
        if (dims[d] <= 0)
            return;
    if (rank == 0) {
        *dst = *src;
        return;
    }
    int64_t idx[MAX_RANK] = {0}, doff = 0, soff = 0;
    int last = rank - 1;
    for (;;) {
        for (int64_t i = 0; i < dims[last]; i++)
            dst[doff + i * dstride[last]] = src[soff + i * sstride[last]];
        int d = last - 1;
        for (; d >= 0; d--) {        /* odometer over the outer dims */
            idx[d]++;
            doff += dstride[d];
            soff += sstride[d];
            if (idx[d] < dims[d])
                break;
            doff -= dstride[d] * dims[d];
            soff -= sstride[d] * dims[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* ---- sums ---- */

/* Sums accumulate in double, which stands for the f32 accumulator of bf16
 * and f16 sums (docs/ir.md): the sum is rounded to f32 once, then the
 * caller rounds it to the dtype.  Integer sums wrap, so they are kept modulo
 * 2^64 in unsigned arithmetic (well defined) and wrapped to the dtype's
 * width (i64: exact while the operands and the result stay within 2^53). */
typedef struct {
    double f;
    uint64_t i;
} Acc;

static int wraps(int dtype) { return dtype == DT_I32 || dtype == DT_I64 || dtype == DT_U8 || dtype == DT_U32; }
static int64_t as_int(double x) { return sk_to_i64(x); }   /* an integer value; INT64_MAX is held as 2^63 */

static void acc_add(Acc *a, double x, int dtype) {
    if (wraps(dtype))
        a->i += (uint64_t)as_int(x);
    else
        a->f += x;
}

static void acc_add_product(Acc *a, double x, double y, int dtype) {
    if (wraps(dtype))
        a->i += (uint64_t)as_int(x) * (uint64_t)as_int(y);
    else
        a->f += x * y;
}

static double acc_result(const Acc *a, int dtype) {
    switch (dtype) {
    case DT_I32: return num_wrap_i32((int64_t)(a->i & 0xffffffffu));
    case DT_I64: return (double)(int64_t)a->i;
    case DT_U8: return (uint8_t)a->i;
    case DT_U32: return (uint32_t)a->i;
    default: return dtype == DT_BF16 || dtype == DT_F16 ? (float)a->f : a->f;
    }
}

static double max_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double min_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }

/* ---- elementwise ---- */

/* Each op's formula (lib/shardc_elementwise.def): floating-point dtypes in
 * double, rounded to their dtype by the caller; i32 in int32_t, wrapping;
 * bool in bytes 0 and 1 (an op has the functions of the dtypes it takes). */
static const struct {
    double (*f64)(double);
    int32_t (*i32)(int32_t);
    int64_t (*i64)(int64_t);
    uint8_t (*u8)(uint8_t);
    uint32_t (*u32)(uint32_t);
    uint8_t (*b)(uint8_t);
} unary_fn[OP_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) \
    [OP_##ID] = {EW_IF_F_##dtypes(.f64 = ew_##ID##_f64, ) \
                 EW_IF_I32_##dtypes(.i32 = ew_##ID##_i32, .i64 = ew_##ID##_i64, .u8 = ew_##ID##_u8, \
                                    .u32 = ew_##ID##_u32, ) \
                 EW_IF_BOOL_##dtypes(.b = ew_##ID##_bool)},
#define SK_BINARY(ID, name, builtin, dtypes, f, fi)
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};
static const struct {
    double (*f64)(double, double);
    int32_t (*i32)(int32_t, int32_t);
    int64_t (*i64)(int64_t, int64_t);
    uint8_t (*u8)(uint8_t, uint8_t);
    uint32_t (*u32)(uint32_t, uint32_t);
    uint8_t (*b)(uint8_t, uint8_t);
} binary_fn[OP_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi)
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) \
    [OP_##ID] = {EW_IF_F_##dtypes(.f64 = ew_##ID##_f64, ) \
                 EW_IF_I32_##dtypes(.i32 = ew_##ID##_i32, .i64 = ew_##ID##_i64, .u8 = ew_##ID##_u8, \
                                    .u32 = ew_##ID##_u32, ) \
                 EW_IF_BOOL_##dtypes(.b = ew_##ID##_bool)},
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};

/* i32, u8 and u32 values are exact in double, and an op on an integer or
 * bool is in that dtype's table (sema and the verifier check dtypes against
 * ops.def).  i64 is computed exactly in int64_t on the double's value
 * (sk_to_i64: INT64_MAX is held as 2^63) and rounded back to double, so it
 * is exact while values stay within 2^53 (docs/language.md). */
static int kernel_unary(const Kernel *k, double *out) {
    const double *x = arg(k, 0);
    int64_t n = shape_elems(&k->in->type);
    int dt = arg_type(k, 0)->dtype;
    int op = k->in->op;
    if (dt == DT_I32)
        for (int64_t i = 0; i < n; i++)
            out[i] = unary_fn[op].i32((int32_t)x[i]);
    else if (dt == DT_I64)
        for (int64_t i = 0; i < n; i++)
            out[i] = (double)unary_fn[op].i64(sk_to_i64(x[i]));
    else if (dt == DT_U8)
        for (int64_t i = 0; i < n; i++)
            out[i] = unary_fn[op].u8((uint8_t)x[i]);
    else if (dt == DT_U32)
        for (int64_t i = 0; i < n; i++)
            out[i] = unary_fn[op].u32((uint32_t)x[i]);
    else if (dt == DT_BOOL && unary_fn[k->in->op].b)
        for (int64_t i = 0; i < n; i++)
            out[i] = unary_fn[k->in->op].b(x[i] != 0);
    else
        for (int64_t i = 0; i < n; i++)
            out[i] = unary_fn[k->in->op].f64(x[i]);
    return 0;
}

static int kernel_binary(const Kernel *k, double *out) {
    const double *x = arg(k, 0), *y = arg(k, 1);
    int64_t n = shape_elems(&k->in->type);
    int op = k->in->op, dt = k->in->type.dtype;
    if (dt == DT_I32)
        for (int64_t i = 0; i < n; i++)
            out[i] = binary_fn[op].i32((int32_t)x[i], (int32_t)y[i]);
    else if (dt == DT_I64)
        for (int64_t i = 0; i < n; i++)
            out[i] = (double)binary_fn[op].i64(sk_to_i64(x[i]), sk_to_i64(y[i]));
    else if (dt == DT_U8)
        for (int64_t i = 0; i < n; i++)
            out[i] = binary_fn[op].u8((uint8_t)x[i], (uint8_t)y[i]);
    else if (dt == DT_U32)
        for (int64_t i = 0; i < n; i++)
            out[i] = binary_fn[op].u32((uint32_t)x[i], (uint32_t)y[i]);
    else if (k->in->type.dtype == DT_BOOL)
        for (int64_t i = 0; i < n; i++)
            out[i] = binary_fn[k->in->op].b(x[i] != 0, y[i] != 0);
    else
        for (int64_t i = 0; i < n; i++)
            out[i] = binary_fn[k->in->op].f64(x[i], y[i]);
    return 0;
}

static int int_dtype(int dt) { return dt == DT_I32 || dt == DT_U32 || dt == DT_I64 || dt == DT_U8 || dt == DT_BOOL; }

/* The caller's rounding to the result dtype is the conversion, but for
 * integers to or from i64 and u8, which keep their value modulo the
 * target's width (lib/elementwise.c's convert_wide). */
static int kernel_convert(const Kernel *k, double *out) {
    const double *x = arg(k, 0);
    int64_t n = shape_elems(&k->in->type);
    int from = k->fn->insts[ir_arg(k->fn, k->in, 0)].type.dtype, to = k->in->type.dtype;
    if (!(int_dtype(from) && int_dtype(to) && to != DT_BOOL &&
          (from == DT_I64 || from == DT_U8 || to == DT_I64 || to == DT_U8))) {
        memcpy(out, x, sizeof(double) * (size_t)n);
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t v = sk_to_i64(x[i]);   /* INT64_MAX is held as 2^63, which a plain cast does not take */
        out[i] = to == DT_I32 ? sk_wrap_i32(v) : to == DT_U32 ? (uint32_t)(uint64_t)v
               : to == DT_U8 ? (uint8_t)(uint64_t)v : (double)v;
    }
    return 0;
}

static int kernel_compare(const Kernel *k, double *out) {
    const double *x = arg(k, 0), *y = arg(k, 1);
    int64_t n = shape_elems(&k->in->type);
    Cmp dir = (Cmp)attr(k, 0);
    for (int64_t i = 0; i < n; i++) {
        double a = x[i], b = y[i];
        out[i] = dir == CMP_LT ? a < b : dir == CMP_LE ? a <= b : dir == CMP_GT ? a > b
               : dir == CMP_GE ? a >= b : dir == CMP_EQ ? a == b : a != b;
    }
    return 0;
}

static int kernel_select(const Kernel *k, double *out) {
    const double *p = arg(k, 0), *a = arg(k, 1), *b = arg(k, 2);
    int64_t n = shape_elems(&k->in->type);
    for (int64_t i = 0; i < n; i++)
        out[i] = p[i] != 0 ? a[i] : b[i];
    return 0;
}

/* ---- leaves ---- */

static int kernel_constant(const Kernel *k, double *out) {
    for (int64_t i = 0, n = shape_elems(&k->in->type); i < n; i++)
        out[i] = k->in->value;
    return 0;
}

static int kernel_iota(const Kernel *k, double *out) {
    const Shape *s = &k->in->type;
    int64_t n = shape_elems(s), stride[MAX_RANK];
    int d = inst_dim(k->fn, k->in);
    row_major_strides(s, stride);
    for (int64_t i = 0; i < n; i++)
        out[i] = (double)(i / stride[d] % s->dims[d]);
    return 0;
}

static int kernel_axis_index(const Kernel *k, double *out) {
    out[0] = (double)(k->groups->slot[k->dev] % k->groups->size);
    return 0;
}

/* random(key, counters[, lo, hi]): lib/rng_ops.h's draw, as generated
 * code computes it; counters are i32 or u32, read as their 32 bits. */
static int kernel_random(const Kernel *k, double *out) {
    const double *key = arg(k, 0), *ctr = arg(k, 1);
    uint32_t kw[2] = {(uint32_t)(int64_t)key[0], (uint32_t)(int64_t)key[1]};
    int bounded = k->in->nargs == 4;
    sk_rng r;
    sk_rng_init(&r, (int)attr(k, 0), (sk_dtype)k->in->type.dtype, kw, bounded ? arg(k, 2)[0] : 0,
                bounded ? arg(k, 3)[0] : 0);
    for (int64_t i = 0, n = shape_elems(&k->in->type); i < n; i++)
        out[i] = sk_rng_at(&r, (uint32_t)(int64_t)ctr[i]);
    return 0;
}

/* ---- structure ---- */

static int kernel_broadcast(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0), *r = &k->in->type;
    int64_t xs[MAX_RANK], rs[MAX_RANK], from[MAX_RANK] = {0};
    row_major_strides(x, xs);
    row_major_strides(r, rs);
    for (int i = 0; i < x->rank; i++)
        from[attr(k, i)] = xs[i];    /* new dims read the same element: stride 0 */
    copy_box(out, rs, arg(k, 0), from, r->rank, r->dims);
    return 0;
}

static int kernel_transpose(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0), *r = &k->in->type;
    int64_t xs[MAX_RANK], rs[MAX_RANK], from[MAX_RANK];
    row_major_strides(x, xs);
    row_major_strides(r, rs);
    for (int i = 0; i < r->rank; i++)
        from[i] = xs[attr(k, i)];
    copy_box(out, rs, arg(k, 0), from, r->rank, r->dims);
    return 0;
}

static int kernel_reshape(const Kernel *k, double *out) {
    memcpy(out, arg(k, 0), sizeof(double) * (size_t)shape_elems(&k->in->type));
    return 0;
}

/* The box of the operand at `start`, as big as the result. */
static int copy_from(const Kernel *k, double *out, const int64_t *start) {
    const Shape *x = arg_type(k, 0), *r = &k->in->type;
    int64_t xs[MAX_RANK], rs[MAX_RANK], base = 0;
    row_major_strides(x, xs);
    row_major_strides(r, rs);
    for (int d = 0; d < x->rank; d++)
        base += start[d] * xs[d];
    copy_box(out, rs, arg(k, 0) + base, xs, r->rank, r->dims);
    return 0;
}

static int kernel_slice(const Kernel *k, double *out) {
    int64_t start[MAX_RANK];
    for (int d = 0; d < arg_type(k, 0)->rank; d++)
        start[d] = attr(k, d);
    return copy_from(k, out, start);
}

/* Offsets are clamped so the slice stays inside, as JAX's dynamic_slice. */
static int kernel_dynamic_slice(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0);
    int64_t start[MAX_RANK];
    for (int d = 0; d < x->rank; d++) {
        int64_t o = as_int(arg(k, 1 + d)[0]), hi = x->dims[d] - k->in->type.dims[d];
        start[d] = o < 0 ? 0 : o > hi ? hi : o;
    }
    return copy_from(k, out, start);
}

/* The operand, then the update over it at the clamped offsets. */
static int kernel_dynamic_update_slice(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0), *u = arg_type(k, 1);
    int64_t xs[MAX_RANK], us[MAX_RANK], base = 0;
    memcpy(out, arg(k, 0), sizeof(double) * (size_t)shape_elems(x));
    row_major_strides(x, xs);
    row_major_strides(u, us);
    for (int d = 0; d < x->rank; d++) {
        int64_t o = as_int(arg(k, 2 + d)[0]), hi = x->dims[d] - u->dims[d];
        base += (o < 0 ? 0 : o > hi ? hi : o) * xs[d];
    }
    copy_box(out + base, xs, arg(k, 1), us, u->rank, u->dims);
    return 0;
}

static int kernel_concat(const Kernel *k, double *out) {
    const Shape *r = &k->in->type;
    int dim = (int)attr(k, 0);
    int64_t rs[MAX_RANK], at = 0;
    row_major_strides(r, rs);
    for (int i = 0; i < k->in->nargs; i++) {
        const Shape *x = arg_type(k, i);
        int64_t xs[MAX_RANK];
        row_major_strides(x, xs);
        copy_box(out + at * rs[dim], rs, arg(k, i), xs, x->rank, x->dims);
        at += x->dims[dim];
    }
    return 0;
}

/* Element i moves to (i + shift) mod n: two boxes. */
static int kernel_roll(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0);
    int64_t shift = attr(k, 0), dim = attr(k, 1), n = x->dims[dim], xs[MAX_RANK], box[MAX_RANK];
    row_major_strides(x, xs);
    memcpy(box, x->dims, sizeof box);
    box[dim] = n - shift;
    copy_box(out + shift * xs[dim], xs, arg(k, 0), xs, x->rank, box);
    box[dim] = shift;
    copy_box(out, xs, arg(k, 0) + (n - shift) * xs[dim], xs, x->rank, box);
    return 0;
}

/* Whether a ranks strictly above b: NaN above every number, in either
 * direction (jnp.argmax and argmin give the first NaN), but below every
 * number in the ascending order of sort and argsort (TOP_K_ASCENDING, as
 * numpy.sort puts NaNs last). */
static int ranks_above(double a, double b, int order) {
    if (isnan(a) || isnan(b))
        return order == TOP_K_ASCENDING ? !isnan(a) && isnan(b) : isnan(a) && !isnan(b);
    return order == 1 ? a > b : a < b;
}

/* Per row, slot j gets the element with exactly j elements ranking above
 * it, counting an equal element at a lower index as above: the stable
 * order of jax.lax.top_k, straight from its definition. */
static int kernel_top_k(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0);
    int64_t n = x->dims[x->rank - 1], kk = attr(k, 0), largest = attr(k, 1), rows = shape_elems(x) / n;
    const double *v = arg(k, 0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            const double *row = v + r * n;
            int64_t rank = 0;
            for (int64_t i = 0; i < n; i++)
                rank += ranks_above(row[i], row[j], (int)largest) ||
                        (i < j && !ranks_above(row[j], row[i], (int)largest));
            if (rank < kk)
                out[r * kk + rank] = (double)j;
        }
    return 0;
}

/* result[I..., R...] = table[R with indices[I...] at `dim` and, at each
 * batch dim, I's coordinate along its paired index dim]; an index outside
 * the dim is clamped into it (as XLA's gather clamps its start indices), or
 * in fill mode reads zeros, so the interpreter never reads out of bounds. */
static int kernel_gather(const Kernel *k, double *out) {
    const Shape *t = arg_type(k, 0), *xs = arg_type(k, 1);
    int dim = inst_dim(k->fn, k->in), nb;
    const int64_t *pair = inst_gather_batch(k->fn, k->in, &nb);
    uint32_t dropped = 1u << dim;
    int64_t ts[MAX_RANK], is[MAX_RANK], batch_stride[MAX_RANK] = {0};
    int64_t rest_dims[MAX_RANK], rest_stride[MAX_RANK], dst_stride[MAX_RANK];
    row_major_strides(t, ts);
    row_major_strides(xs, is);
    for (int j = 0; j < nb; j++) {
        batch_stride[pair[2 * j + 1]] = ts[pair[2 * j]];
        dropped |= 1u << pair[2 * j];
    }
    Shape rest = {t->dtype, 0, {0}};
    for (int d = 0; d < t->rank; d++)
        if (!(dropped >> d & 1)) {
            rest_stride[rest.rank] = ts[d];
            rest_dims[rest.rank] = t->dims[d];
            rest.dims[rest.rank++] = t->dims[d];
        }
    row_major_strides(&rest, dst_stride);
    int64_t per = shape_elems(&rest), n = shape_elems(xs);
    const double *ix = arg(k, 1);
    int fill = inst_gather_mode(k->fn, k->in) == GATHER_FILL;
    for (int64_t i = 0; i < n; i++) {
        int64_t p = as_int(ix[i]), hi = t->dims[dim] - 1, off;
        if (fill && (p < 0 || p > hi)) {
            memset(out + i * per, 0, sizeof(double) * (size_t)per);
            continue;
        }
        p = p < 0 ? 0 : p > hi ? hi : p;
        off = p * ts[dim];
        for (int d = 0; d < xs->rank; d++)          /* i's coordinate along index dim d */
            off += i / is[d] % xs->dims[d] * batch_stride[d];
        copy_box(out + i * per, dst_stride, arg(k, 0) + off, rest_stride, rest.rank, rest_dims);
    }
    return 0;
}

/* The operand with updates[I..., R...] added at R with indices_j[I...] at
 * scattered dim j; a position outside the operand in any scattered dim is
 * dropped.  Each add is rounded to the dtype, as the kernel library adds in
 * the element type, in position order. */
static int kernel_scatter(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0), *xs = arg_type(k, 1);
    int n = k->in->nargs - 2;
    int64_t ts[MAX_RANK], rest_stride[MAX_RANK], rest_dims[MAX_RANK], nrest = 0, per = 1;
    uint32_t scattered = 0;
    row_major_strides(x, ts);
    for (int j = 0; j < n; j++)
        scattered |= 1u << attr(k, j);
    for (int d = 0; d < x->rank; d++)
        if (!(scattered >> d & 1)) {
            rest_stride[nrest] = ts[d];
            rest_dims[nrest++] = x->dims[d];
            per *= x->dims[d];
        }
    memcpy(out, arg(k, 0), sizeof(double) * (size_t)shape_elems(x));
    const double *u = arg(k, n + 1);
    for (int64_t i = 0; i < shape_elems(xs); i++) {
        int64_t base = 0, j = 0;
        for (; j < n; j++) {
            int64_t p = as_int(arg(k, 1 + (int)j)[i]), d = attr(k, (int)j);
            if (p < 0 || p >= x->dims[d])
                break;
            base += p * ts[d];
        }
        for (int64_t r = 0; j == n && r < per; r++) {
            int64_t off = base, q = r;
            for (int64_t d = nrest - 1; d >= 0; d--) {
                off += q % rest_dims[d] * rest_stride[d];
                q /= rest_dims[d];
            }
            out[off] = num_round(out[off] + u[i * per + r], x->dtype);
        }
    }
    return 0;
}

/* ---- contractions ---- */

/* Offsets, in two operands, of every combination of the summed dims: the
 * inner loop of a dot or reduce walks this table. */
typedef struct {
    int64_t n;
    int64_t *a, *b;
} SumTable;

static int sum_table(const Kernel *k, int nsum, const int64_t *extent, const int64_t *sa, const int64_t *sb,
                     SumTable *t) {
    t->n = 1;
    for (int i = 0; i < nsum; i++)
        t->n *= extent[i];
    t->a = malloc(sizeof(int64_t) * (size_t)(t->n ? t->n : 1));
    t->b = malloc(sizeof(int64_t) * (size_t)(t->n ? t->n : 1));
    if (!t->a || !t->b) {
        free(t->a);
        free(t->b);
        return kfail(k, "out of memory");
    }
    for (int64_t j = 0; j < t->n; j++) {
        int64_t rest = j, oa = 0, ob = 0;
        for (int i = nsum - 1; i >= 0; i--) {
            int64_t c = rest % extent[i];
            rest /= extent[i];
            oa += c * sa[i];
            ob += c * sb[i];
        }
        t->a[j] = oa;
        t->b[j] = ob;
    }
    return 0;
}

static void free_table(SumTable *t) {
    free(t->a);
    free(t->b);
}

/* Labels name the dims (docs/ir.md): a label's stride in each operand (0
 * where it is absent); labels not in the result are summed. */
typedef struct {
    int n;
    int64_t label[3 * MAX_RANK], extent[3 * MAX_RANK], sa[3 * MAX_RANK], sb[3 * MAX_RANK];
} Labels;

static int label_slot(Labels *l, int64_t label, int64_t extent) {
    for (int i = 0; i < l->n; i++)
        if (l->label[i] == label)
            return i;
    l->label[l->n] = label;
    l->extent[l->n] = extent;
    l->sa[l->n] = l->sb[l->n] = 0;
    return l->n++;
}

static int kernel_dot(const Kernel *k, double *out) {
    const Shape *a = arg_type(k, 0), *b = arg_type(k, 1), *r = &k->in->type;
    int64_t as[MAX_RANK], bs[MAX_RANK], ra[MAX_RANK], rb[MAX_RANK];
    row_major_strides(a, as);
    row_major_strides(b, bs);
    Labels l = {0};
    for (int i = 0; i < a->rank; i++)
        l.sa[label_slot(&l, attr(k, i), a->dims[i])] += as[i];
    for (int i = 0; i < b->rank; i++)
        l.sb[label_slot(&l, attr(k, a->rank + i), b->dims[i])] += bs[i];
    int in_result[3 * MAX_RANK] = {0};
    for (int i = 0; i < r->rank; i++) {
        int s = label_slot(&l, attr(k, a->rank + b->rank + i), r->dims[i]);
        in_result[s] = 1;
        ra[i] = l.sa[s];
        rb[i] = l.sb[s];
    }
    int64_t ext[3 * MAX_RANK], sa[3 * MAX_RANK], sb[3 * MAX_RANK];
    int nsum = 0;
    for (int i = 0; i < l.n; i++)
        if (!in_result[i])
            ext[nsum] = l.extent[i], sa[nsum] = l.sa[i], sb[nsum++] = l.sb[i];
    SumTable t;
    if (sum_table(k, nsum, ext, sa, sb, &t))
        return -1;
    const double *x = arg(k, 0), *y = arg(k, 1);
    int64_t n = shape_elems(r);
    /* A block of outputs at a time, the summed index outermost: each
     * output still adds its products in the table's order (the same
     * sums), but a row of the rhs is read along, not a column across
     * (samples/matmul_square.tdsl's 8 x 2048 x 8192: 2.34 -> 1.72 s). */
    enum { BLOCK = 2048 };
    Acc *acc = malloc(sizeof(Acc) * BLOCK);
    int64_t *oa = malloc(sizeof(int64_t) * BLOCK), *ob = malloc(sizeof(int64_t) * BLOCK);
    if (!acc || !oa || !ob) {
        free(acc), free(oa), free(ob), free_table(&t);
        return kfail(k, "out of memory");
    }
    for (int64_t e0 = 0; e0 < n; e0 += BLOCK) {
        int64_t m = n - e0 < BLOCK ? n - e0 : BLOCK;
        for (int64_t e = 0; e < m; e++) {
            int64_t rest = e0 + e;
            oa[e] = ob[e] = 0;
            for (int d = r->rank - 1; d >= 0; d--) {
                int64_t c = rest % r->dims[d];
                rest /= r->dims[d];
                oa[e] += c * ra[d];
                ob[e] += c * rb[d];
            }
            acc[e] = (Acc){0, 0};
        }
        for (int64_t j = 0; j < t.n; j++)
            for (int64_t e = 0; e < m; e++)
                acc_add_product(&acc[e], x[oa[e] + t.a[j]], y[ob[e] + t.b[j]], r->dtype);
        for (int64_t e = 0; e < m; e++)
            out[e0 + e] = acc_result(&acc[e], r->dtype);
    }
    free(acc), free(oa), free(ob);
    free_table(&t);
    return 0;
}

static int kernel_reduce(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0), *r = &k->in->type;
    int64_t xs[MAX_RANK], keep[MAX_RANK], ext[MAX_RANK], sum[MAX_RANK];
    row_major_strides(x, xs);
    Reducer red = (Reducer)attr(k, 0);
    int nkeep = 0, nsum = 0, next = 1;
    for (int d = 0; d < x->rank; d++) {
        if (next < k->in->nattrs && attr(k, next) == d) {
            next++;
            ext[nsum] = x->dims[d];
            sum[nsum++] = xs[d];
        } else
            keep[nkeep++] = xs[d];
    }
    SumTable t;
    if (sum_table(k, nsum, ext, sum, sum, &t))
        return -1;
    const double *v = arg(k, 0);
    int64_t n = shape_elems(r);
    for (int64_t e = 0; e < n; e++) {
        int64_t rest = e, o = 0;
        for (int d = r->rank - 1; d >= 0; d--) {
            o += rest % r->dims[d] * keep[d];
            rest /= r->dims[d];
        }
        Acc acc = {0, 0};
        double m = t.n ? v[o + t.a[0]] : red == RED_MAX ? -INFINITY : INFINITY;
        for (int64_t j = 0; j < t.n; j++) {
            double z = v[o + t.a[j]];
            if (red == RED_SUM)
                acc_add(&acc, z, r->dtype);
            else
                m = red == RED_MAX ? max_nan(m, z) : min_nan(m, z);
        }
        out[e] = red == RED_SUM ? acc_result(&acc, r->dtype) : m;
    }
    free_table(&t);
    return 0;
}

/* The inclusive prefix sum along dim: each output is the sum of its row's
 * elements up to and including it, accumulated as reduce's sums are. */
static int kernel_cumsum(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0);
    int64_t dim = attr(k, 0), n = x->dims[dim], xs[MAX_RANK];
    row_major_strides(x, xs);
    int64_t inner = xs[dim], outer = n ? shape_elems(x) / (n * inner) : 0;
    const double *v = arg(k, 0);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            Acc acc = {0, 0};
            for (int64_t j = 0; j < n; j++) {
                int64_t e = (o * n + j) * inner + i;
                acc_add(&acc, v[e], x->dtype);
                out[e] = acc_result(&acc, x->dtype);
            }
        }
    return 0;
}

/* ---- collectives: operands of the whole group ---- */

static int64_t member(const Kernel *k, int64_t j) {
    const Groups *g = k->groups;
    return g->members[g->slot[k->dev] / g->size * g->size + j];
}

static int64_t my_rank(const Kernel *k) { return k->groups->slot[k->dev] % k->groups->size; }

/* Elementwise over the group, in member order. */
static void group_reduce(const Kernel *k, Reducer red, int dtype, int64_t n, double *out) {
    for (int64_t e = 0; e < n; e++) {
        Acc acc = {0, 0};
        double m = arg_on(k, 0, member(k, 0))[e];
        for (int64_t j = 0; j < k->groups->size; j++) {
            double z = arg_on(k, 0, member(k, j))[e];
            if (red == RED_SUM)
                acc_add(&acc, z, dtype);
            else
                m = red == RED_MAX ? max_nan(m, z) : min_nan(m, z);
        }
        out[e] = red == RED_SUM ? acc_result(&acc, dtype) : m;
    }
}

static int kernel_all_reduce(const Kernel *k, double *out) {
    group_reduce(k, inst_reducer(k->fn, k->in), k->in->type.dtype, shape_elems(&k->in->type), out);
    return 0;
}

/* Member j's block goes to block j of `dim`. */
static int kernel_all_gather(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0);
    int dim = inst_dim(k->fn, k->in);
    int64_t xs[MAX_RANK], rs[MAX_RANK];
    row_major_strides(x, xs);
    row_major_strides(&k->in->type, rs);
    for (int64_t j = 0; j < k->groups->size; j++)
        copy_box(out + j * x->dims[dim] * rs[dim], rs, arg_on(k, 0, member(k, j)), xs, x->rank, x->dims);
    return 0;
}

/* The group's sum, of which this device keeps block `rank` of `dim`. */
static int kernel_reduce_scatter(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0), *r = &k->in->type;
    int dim = inst_dim(k->fn, k->in);
    double *sum = malloc(sizeof(double) * (size_t)shape_elems(x));
    if (!sum)
        return kfail(k, "out of memory");
    group_reduce(k, inst_reducer(k->fn, k->in), r->dtype, shape_elems(x), sum);
    int64_t xs[MAX_RANK], rs[MAX_RANK];
    row_major_strides(x, xs);
    row_major_strides(r, rs);
    copy_box(out, rs, sum + my_rank(k) * r->dims[dim] * xs[dim], xs, r->rank, r->dims);
    free(sum);
    return 0;
}

/* Member j cuts its operand into blocks along split_dimension and sends
 * block `rank` here, where it becomes block j along concat_dimension. */
static int kernel_all_to_all(const Kernel *k, double *out) {
    const Shape *x = arg_type(k, 0), *r = &k->in->type;
    int split = inst_dim(k->fn, k->in), concat = inst_concat_dim(k->fn, k->in);
    int64_t xs[MAX_RANK], rs[MAX_RANK], box[MAX_RANK];
    row_major_strides(x, xs);
    row_major_strides(r, rs);
    memcpy(box, x->dims, sizeof box);
    box[split] = x->dims[split] / k->groups->size;
    for (int64_t j = 0; j < k->groups->size; j++) {
        const double *src = arg_on(k, 0, member(k, j)) + my_rank(k) * box[split] * xs[split];
        copy_box(out + j * box[concat] * rs[concat], rs, src, xs, x->rank, box);
    }
    return 0;
}

/* Pairs are (source, target) coordinates in the group.  A device no pair
 * targets gets zeros, as in JAX. */
static int kernel_collective_permute(const Kernel *k, double *out) {
    int npairs;
    const int64_t *pair = inst_pairs(k->fn, k->in, &npairs);
    int64_t n = shape_elems(&k->in->type), me = my_rank(k);
    for (int i = 0; i < npairs; i++)
        if (pair[2 * i + 1] == me) {
            memcpy(out, arg_on(k, 0, member(k, pair[2 * i])), sizeof(double) * (size_t)n);
            return 0;
        }
    memset(out, 0, sizeof(double) * (size_t)n);
    return 0;
}

/* Parameters, calls, tuple elements and returns move values between frames,
 * which interp.c does; an unscheduled program has no done. */
static int kernel_frame(const Kernel *k, double *out) {
    (void)out;
    return kfail(k, "the interpreter has no kernel for %s", op_info[k->in->op].name);
}
#define kernel_parameter kernel_frame
#define kernel_call kernel_frame
#define kernel_loop kernel_frame
#define kernel_tuple_element kernel_frame
#define kernel_return kernel_frame
#define kernel_done kernel_frame

static int (*const kernel_of[OP_COUNT])(const Kernel *, double *) = {
#define OP(id, name, nargs, cls, kernel, flags, dtypes, prio, attrs) [id] = kernel_##kernel,
#include "../ir/ops.def"
#undef OP
};

int kernel_run(const Kernel *k, double *out) { return kernel_of[k->in->op](k, out); }
