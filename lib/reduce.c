/* reduce.c: sum / max / min over a set of dims.
 *
 * One pass over the input in memory order: each element is folded into the
 * accumulator of its output element, found by an odometer whose reduced
 * dims have output stride 0 (f32 and bf16 rows that fold into one output
 * go by 16 lanes: fold_row_f32).  Reading the input once and in order is what
 * makes this fast whichever dims are reduced; the accumulators are f32 for
 * f32/bf16/f16 (docs/ir.md: bf16 and f16 sums accumulate in f32), f64 for
 * f64, the dtype itself for i32, i64, u8 and u32 (sums wrap modulo 2^bits,
 * added in the unsigned type, where C defines overflow), and bytes for bool.
 *
 * Adjacent dims that are both reduced or both kept are merged first (the
 * order in memory is the same), so the odometer has at most one level per
 * change between reduced and kept dims.  On several threads
 * (shardc_parallel.h), the first kept dim of that shape is split into one
 * range per thread: the outputs of a range are contiguous and only its
 * thread folds into them, in the same order as one thread does, so the
 * sums are the one thread's bit for bit.  A reduction to one element runs
 * on one thread. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

static inline float fold_sum(float a, float x) { return a + x; }
static inline float fold_max(float a, float x) { return isnan(a) || isnan(x) ? NAN : x > a ? x : a; }
static inline float fold_min(float a, float x) { return isnan(a) || isnan(x) ? NAN : x < a ? x : a; }

static inline float fold_f(sc_reduce op, float acc, float x) {
    return op == SC_SUM ? acc + x : op == SC_MAX ? fold_max(acc, x) : fold_min(acc, x);
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

static inline int64_t fold_l(sc_reduce op, int64_t acc, int64_t x) {
    if (op == SC_SUM)
        return (int64_t)((uint64_t)acc + (uint64_t)x);
    return op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

static inline uint8_t fold_u8(sc_reduce op, uint8_t acc, uint8_t x) {
    if (op == SC_SUM)
        return (uint8_t)(acc + x);
    return op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

static inline uint32_t fold_u32(sc_reduce op, uint32_t acc, uint32_t x) {
    if (op == SC_SUM)
        return acc + x;
    return op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

static inline uint8_t fold_b(sc_reduce op, uint8_t acc, uint8_t x) {
    return op == SC_MAX ? (acc | x) : (acc & x);
}

/* The input as merged dims, and the accumulators. */
typedef struct {
    sk_dtype t;
    sc_reduce op;
    int rank;                    /* merged; >= 1 */
    int64_t dims[SC_MAX_RANK];
    int64_t ist[SC_MAX_RANK];    /* input strides (row-major, the last 1) */
    int64_t ost[SC_MAX_RANK];    /* output strides, 0 for a reduced dim */
    int split;                   /* the first kept dim, or -1: none is kept */
    const void *x;
    void *acc, *out;             /* acc is out, or f32 scratch for bf16/f16 */
} Red;

/* Fold the row of `last` input elements at x[i ..] into the accumulators
 * at o (ls = 0: all into one) or o + j (ls = 1). */
#define ROW(A, FOLD, LOAD)                                  \
    do {                                                    \
        A *a = (A *)r->acc + o;                             \
        if (ls == 0) {                                      \
            A s1 = *a;                                      \
            for (int64_t j = 0; j < last; j++)              \
                s1 = FOLD(r->op, s1, LOAD(i + j));          \
            *a = s1;                                        \
        } else {                                            \
            for (int64_t j = 0; j < last; j++)              \
                a[j] = FOLD(r->op, a[j], LOAD(i + j));      \
        }                                                   \
    } while (0)

#define LOAD_F32(k) ((const float *)r->x)[k]
#define LOAD_16(k) sk_load_f(r->t, r->x, k)
#define LOAD_F64(k) ((const double *)r->x)[k]
#define LOAD_I32(k) ((const int32_t *)r->x)[k]
#define LOAD_B(k) ((const uint8_t *)r->x)[k]
#define LOAD_I64(k) ((const int64_t *)r->x)[k]
#define LOAD_U32(k) ((const uint32_t *)r->x)[k]

/* f32 rows (and bf16 ones, widened) with the op chosen outside the loop,
 * so that the loops vectorize.  Into outputs (COLS): each output folds its
 * column in row order, as the scalar loop does.  Into one output
 * (ROW_LANES): 16 partial results, lane l folding elements l, l + 16, ...,
 * then added in lane order and the tail after them; written as 16 lanes,
 * not the vector width, so that every ISA gives the same bits. */
enum { LANES = 16 };

#define COLS(FOLD, LOAD)                              \
    do {                                              \
        SK_SIMD                                       \
        for (int64_t j = 0; j < n; j++)               \
            a[j] = FOLD(a[j], LOAD(x, j));            \
    } while (0)

#define ROW_LANES(FOLD, ID, LOAD)                                \
    do {                                                        \
        float part[LANES], s = *a;                              \
        int64_t j = 0;                                          \
        for (int l = 0; l < LANES; l++)                         \
            part[l] = ID;                                       \
        for (; j + LANES <= n; j += LANES)                      \
            for (int l = 0; l < LANES; l++)                     \
                part[l] = FOLD(part[l], LOAD(x, j + l));        \
        for (int l = 0; j && l < LANES; l++)                    \
            s = FOLD(s, part[l]);                               \
        for (; j < n; j++)                                      \
            s = FOLD(s, LOAD(x, j));                            \
        *a = s;                                                 \
    } while (0)

#define F32_AT(x, j) (x)[j]
#define BF16_AT(x, j) sc_bf16_to_float((x)[j])

#define FOLD_ROW(NAME, T, LOAD)                                                      \
    SK_ISA_CLONES static void NAME(sc_reduce op, int into_one, float *restrict a,    \
                                   const T *restrict x, int64_t n) {                \
        if (into_one) {                                                              \
            if (op == SC_SUM) ROW_LANES(fold_sum, 0.0f, LOAD);                       \
            else if (op == SC_MAX) ROW_LANES(fold_max, -INFINITY, LOAD);             \
            else ROW_LANES(fold_min, INFINITY, LOAD);                                \
        } else {                                                                     \
            if (op == SC_SUM) COLS(fold_sum, LOAD);                                  \
            else if (op == SC_MAX) COLS(fold_max, LOAD);                             \
            else COLS(fold_min, LOAD);                                               \
        }                                                                            \
    }

FOLD_ROW(fold_row_f32, float, F32_AT)
FOLD_ROW(fold_row_bf16, uint16_t, BF16_AT)

/* The outputs [lo, hi) of the accumulators set to the identity. */
static void identities(const Red *r, int64_t lo, int64_t hi) {
    sc_reduce op = r->op;
    for (int64_t o = lo; o < hi; o++) {
        switch (r->t) {
        case SK_F64: ((double *)r->acc)[o] = op == SC_SUM ? 0.0 : op == SC_MAX ? -INFINITY : INFINITY; break;
        case SK_I32: ((int32_t *)r->acc)[o] = op == SC_SUM ? 0 : op == SC_MAX ? INT32_MIN : INT32_MAX; break;
        case SK_I64: ((int64_t *)r->acc)[o] = op == SC_SUM ? 0 : op == SC_MAX ? INT64_MIN : INT64_MAX; break;
        case SK_U8: ((uint8_t *)r->acc)[o] = op == SC_MIN ? UINT8_MAX : 0; break;
        case SK_U32: ((uint32_t *)r->acc)[o] = op == SC_MIN ? UINT32_MAX : 0; break;
        case SK_BOOL: ((uint8_t *)r->acc)[o] = op == SC_MIN; break;
        default: ((float *)r->acc)[o] = op == SC_SUM ? 0.0f : op == SC_MAX ? -INFINITY : INFINITY; break;
        }
    }
}

/* The outputs whose index along dim `split` is in [lo, hi) (all of them
 * when nothing is kept): identities, then every input element that folds
 * into them, in memory order, then bf16/f16 rounded. */
static void reduce_range(void *ctx, int64_t lo, int64_t hi) {
    const Red *r = ctx;
    int m = r->rank, s = r->split;
    int64_t v[SC_MAX_RANK], idx[SC_MAX_RANK] = {0}, i = 0, o = 0, o_end = 1;
    for (int d = 0; d < m; d++)
        v[d] = r->dims[d];
    if (s >= 0) {
        v[s] = hi - lo;
        i = lo * r->ist[s];
        o = lo * r->ost[s];
        o_end = hi * r->ost[s];
    }
    int64_t o_begin = o;
    identities(r, o_begin, o_end);
    int64_t last = v[m - 1], ls = r->ost[m - 1], rows = 1;
    for (int d = 0; d < m - 1; d++)
        rows *= v[d];
    for (int64_t row = 0; row < rows; row++) {
        switch (r->t) {
        case SK_F32: fold_row_f32(r->op, ls == 0, (float *)r->acc + o, (const float *)r->x + i, last); break;
        case SK_BF16: fold_row_bf16(r->op, ls == 0, (float *)r->acc + o, (const uint16_t *)r->x + i, last); break;
        case SK_F16: ROW(float, fold_f, LOAD_16); break;
        case SK_F64: ROW(double, fold_d, LOAD_F64); break;
        case SK_I32: ROW(int32_t, fold_i, LOAD_I32); break;
        case SK_I64: ROW(int64_t, fold_l, LOAD_I64); break;
        case SK_U8: ROW(uint8_t, fold_u8, LOAD_B); break;
        case SK_U32: ROW(uint32_t, fold_u32, LOAD_U32); break;
        default: ROW(uint8_t, fold_b, LOAD_B); break;
        }
        for (int d = m - 2; d >= 0; d--) {   /* the odometer over the outer dims */
            i += r->ist[d];
            o += r->ost[d];
            if (++idx[d] < v[d])
                break;
            i -= r->ist[d] * v[d];
            o -= r->ost[d] * v[d];
            idx[d] = 0;
        }
    }
    if (r->acc != r->out)
        for (int64_t k = o_begin; k < o_end; k++)
            sk_store_f(r->t, r->out, k, ((const float *)r->acc)[k]);
}

int sk_reduce(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int ndims, const int *dims, sc_reduce op,
              void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || !sk_valid_shape(in) || ndims < 0 || ndims > in.rank ||
        (op != SC_SUM && op != SC_MAX && op != SC_MIN) || (t == SK_BOOL && op == SC_SUM))
        return SC_ERR;
    int reduced[SC_MAX_RANK] = {0};
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 0 || dims[i] >= in.rank || reduced[dims[i]])
            return SC_ERR;
        reduced[dims[i]] = 1;
    }
    int64_t nout = 1, n = sk_elems(in);
    for (int d = 0; d < in.rank; d++)
        if (!reduced[d])
            nout *= in.dims[d];
    Red r = {.t = t, .op = op, .x = x, .out = out, .split = -1};
    /* Only bf16 and f16 need accumulators apart from the output. */
    int narrow = t == SK_BF16 || t == SK_F16;
    r.acc = narrow ? malloc(nout ? (size_t)nout * sizeof(float) : 1) : out;
    if (!r.acc)
        return SC_ERR;
    if (n == 0) {                /* nothing to fold: the identities */
        identities(&r, 0, nout);
        for (int64_t k = 0; narrow && k < nout; k++)
            sk_store_f(t, out, k, ((const float *)r.acc)[k]);
        if (narrow)
            free(r.acc);
        return 0;
    }
    /* Merge adjacent dims of one kind, leaving out extent-1 dims. */
    int kind[SC_MAX_RANK];
    for (int d = 0; d < in.rank; d++) {
        if (in.dims[d] == 1)
            continue;
        if (r.rank > 0 && kind[r.rank - 1] == reduced[d])
            r.dims[r.rank - 1] *= in.dims[d];
        else {
            kind[r.rank] = reduced[d];
            r.dims[r.rank++] = in.dims[d];
        }
    }
    if (r.rank == 0) {           /* one element */
        kind[0] = 0;
        r.dims[r.rank++] = 1;
    }
    int64_t im = 1, om = 1;
    for (int d = r.rank - 1; d >= 0; d--) {
        r.ist[d] = im;
        r.ost[d] = kind[d] ? 0 : om;
        im *= r.dims[d];
        if (!kind[d]) {
            om *= r.dims[d];
            r.split = d;
        }
    }
    /* Splitting the innermost dim gives each thread a strided part of every
     * row: worth it only for runs of a few cache lines. */
    if (r.split < 0)
        reduce_range(&r, 0, 1);
    else if (r.split == r.rank - 1 && r.rank > 1 && r.dims[r.split] < 64)
        reduce_range(&r, 0, r.dims[r.split]);
    else {
        /* Each thread folds into its outputs once per input row: its part
         * starts on a cache line of its own (no false sharing), so split
         * indices step by `grain` from the first whose outputs start a line. */
        int64_t grain, phase;
        sk_line_grain(r.acc, r.ost[r.split] * (t == SK_F64 ? 8 : t == SK_BOOL ? 1 : 4), &grain, &phase);
        sk_parallel_ranges_aligned(r.dims[r.split], n, grain, phase, reduce_range, &r);
    }
    if (narrow)
        free(r.acc);
    return 0;
}

/* ---- cumsum ----
 * Rows along the scanned dim are `inner` elements apart.  Each outer slab
 * (n rows) is one work item: f32, f64 and the integers copy the first row and add
 * each next input row to the output row before it (the output is the
 * accumulator, and the inner loop runs over contiguous elements); bf16 and
 * f16 keep an f32 accumulator per column, as their sums do, and round each
 * prefix to the dtype. */
typedef struct {
    sk_dtype t;
    int64_t n, inner;
    const void *x;
    void *out;
} Scan;

#define ADD(a, b) ((a) + (b))
#define ADD_WRAP(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_WRAP64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define ADD_U8(a, b) ((uint8_t)((a) + (b)))

/* The slab at `base` in dtype T: the dispatch stays out of the loops. */
#define SCAN_SLAB(T, OP)                                     \
    do {                                                     \
        const T *x = (const T *)c->x + base;                 \
        T *y = (T *)c->out + base;                           \
        memcpy(y, x, (size_t)in * sizeof(T));                \
        for (int64_t i = in; i < c->n * in; i++)             \
            y[i] = OP(y[i - in], x[i]);                      \
    } while (0)

static void scan_slab(const Scan *c, int64_t o) {
    int64_t in = c->inner, base = o * c->n * in;
    switch (c->t) {
    case SK_F32: SCAN_SLAB(float, ADD); break;
    case SK_F64: SCAN_SLAB(double, ADD); break;
    case SK_I64: SCAN_SLAB(int64_t, ADD_WRAP64); break;
    case SK_U8: SCAN_SLAB(uint8_t, ADD_U8); break;
    case SK_U32: SCAN_SLAB(uint32_t, ADD); break;
    default: SCAN_SLAB(int32_t, ADD_WRAP); break;    /* i32: wraps, as the others do */
    }
}

static void scan_slab_narrow(const Scan *c, int64_t o) {
    int64_t base = o * c->n * c->inner;
    for (int64_t i = 0; i < c->inner; i++) {
        float acc = 0;
        for (int64_t j = 0; j < c->n; j++) {
            int64_t e = base + j * c->inner + i;
            acc += sk_load_f(c->t, c->x, e);
            sk_store_f(c->t, c->out, e, acc);
        }
    }
}

static void scan_range(void *ctx, int64_t lo, int64_t hi) {
    const Scan *c = ctx;
    for (int64_t o = lo; o < hi; o++) {
        if (c->t == SK_BF16 || c->t == SK_F16)
            scan_slab_narrow(c, o);
        else
            scan_slab(c, o);
    }
}

int sk_cumsum(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int dim, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || t == SK_BOOL || !sk_valid_shape(in) || dim < 0 || dim >= in.rank)
        return SC_ERR;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < in.rank; d++) {
        if (d < dim)
            outer *= in.dims[d];
        else if (d > dim)
            inner *= in.dims[d];
    }
    Scan c = {t, in.dims[dim], inner, x, out};
    if (c.n == 0 || inner == 0)
        return 0;
    sk_parallel_ranges(outer, outer * c.n * inner, scan_range, &c);
    return 0;
}
