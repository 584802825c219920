/* internal.h: helpers shared by the kernels of lib/ (not installed). */
#ifndef SHARDC_LIB_INTERNAL_H
#define SHARDC_LIB_INTERNAL_H

#include "shardc_lib.h"

#include <string.h>

static inline int sk_valid_dtype(sk_dtype t) { return (int)t >= 0 && t < SK_DTYPE_COUNT; }

static inline int sk_valid_shape(sc_shape s) {
    if (s.rank < 0 || s.rank > SC_MAX_RANK)
        return 0;
    for (int d = 0; d < s.rank; d++)
        if (s.dims[d] < 0)
            return 0;
    return 1;
}

/* Row-major strides in elements. */
static inline void sk_strides(sc_shape s, int64_t *st) {
    int64_t m = 1;
    for (int d = s.rank - 1; d >= 0; d--) {
        st[d] = m;
        m *= s.dims[d];
    }
}

/* Element i of a floating-point or integer buffer as float / double; bf16
 * and f16 through the runtime's conversions. */
static inline float sk_load_f(sk_dtype t, const void *p, int64_t i) {
    switch (t) {
    case SK_F32: return ((const float *)p)[i];
    case SK_F64: return (float)((const double *)p)[i];
    case SK_BF16: return sc_bf16_to_float(((const uint16_t *)p)[i]);
    case SK_F16: return sc_f16_to_float(((const uint16_t *)p)[i]);
    case SK_I32: return (float)((const int32_t *)p)[i];
    case SK_U32: return (float)((const uint32_t *)p)[i];
    case SK_I64: return (float)((const int64_t *)p)[i];
    default: return (float)((const uint8_t *)p)[i];
    }
}

/* Element i of any dtype's buffer as double: every dtype's values are exact
 * but i64's beyond 2^53 (convert and compare read i64 as int64_t). */
static inline double sk_load_d(sk_dtype t, const void *p, int64_t i) {
    switch (t) {
    case SK_F64: return ((const double *)p)[i];
    case SK_I32: return ((const int32_t *)p)[i];
    case SK_U32: return ((const uint32_t *)p)[i];
    case SK_I64: return (double)((const int64_t *)p)[i];
    default: return sk_load_f(t, p, i);
    }
}

static inline void sk_store_f(sk_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case SK_F32: ((float *)p)[i] = v; break;
    case SK_F64: ((double *)p)[i] = v; break;
    case SK_BF16: ((uint16_t *)p)[i] = sc_bf16_from_float(v); break;
    case SK_F16: ((uint16_t *)p)[i] = sc_f16_from_float(v); break;
    default: break;   /* integer stores go through sk_convert */
    }
}

/* dst (contiguous, shape `dims` of `rank`) = the elements of src at
 * sum(index[d] * sstride[d]) (strides in elements, 0 for a broadcast dim).
 * The one loop behind transpose, broadcast, slices and dot operand packing. */
void sk_strided_copy(size_t esize, int rank, const int64_t *dims, const void *src,
                     const int64_t *sstride, void *dst);

/* A zeroed block of at least bytes (for free()), on huge pages when it is
 * large: the driver's parameter and result blocks (workspace.c). */
void *sk_alloc_zeroed(size_t bytes);
/* The most bytes the calling thread's workspace has held at once (0 without one). */
size_t sk_workspace_peak(void);

/* dnnl_sgemm's C = A B + beta C with alpha 1 (sgemm.c: operands its no-copy
 * kernels read at a bad stride are copied first); 0 or SC_ERR. */
int sk_sgemm(sk_ctx *ctx, char ta, char tb, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
             const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* ---- oneDNN's matmul primitive for bf16 and f16 (matmul.c) ---- */

/* One GEMM as BLAS takes it: c (M x N, row-major, dense) = a (M x K) * b
 * (K x N), each read by rows with leading dimension ld, or by columns when
 * its trans is 'T'; a and b of dtype t, c of dtype ct (t, or f32 to keep
 * the sums unrounded).  Its epilogue, applied to the f32 accumulator
 * before c is rounded: + bias[n] (f32) when `bias`, then `act` (SK_COPY:
 * none; sk_dot_epilogue's activations); or, when `accumulate` (an f32 c,
 * no bias, SK_COPY), + c's own value: c += a * b, BLAS's beta = 1. */
typedef struct {
    sk_dtype t;
    char ta, tb;
    int64_t M, N, K, lda, ldb;
    int bias;
    sk_unary_op act;
    sk_dtype ct;
    int accumulate;
} sk_gemm_shape;

/* GEMMs of shape g on oneDNN, for one dot: NULL when oneDNN has no fast
 * kernels for g on this CPU (only its reference loops) or fails.  The
 * primitive is looked up (created on first use, and kept) once; impl (if
 * not NULL) gets oneDNN's name for the kernels either way. */
typedef struct sk_matmul sk_matmul;
sk_matmul *sk_matmul_begin(const sk_gemm_shape *g, char *impl, size_t len);
/* c = act(a * b + bias) for matrices laid out as g says (bias: N floats,
 * NULL when g has none); 0 or SC_ERR. */
int sk_matmul_run(sk_matmul *m, const void *a, const void *b, const float *bias, void *c);
void sk_matmul_end(sk_matmul *m);   /* NULL is fine */

/* ---- threads inside a device (parallel.c, shardc_parallel.h) ---- */

/* sk_parallel for the library's own loops: counted as kernel calls. */
int sk_parallel_kernel(int64_t n);

/* SK_PARALLEL_ROWS for the library's loops (counted as kernel calls). */
#define SK_KERNEL_FOR(n, ...) SK_PARALLEL_IF_(sk_parallel_kernel(n), __VA_ARGS__)

/* body(ctx, lo, hi) over consecutive ranges covering [0, n), one per thread
 * of the calling thread's OpenMP team when `work` (the elements the whole
 * call touches) passes sk_parallel_kernel; else body(ctx, 0, n) once on the
 * calling thread.  Each index is in exactly one range, so a body that
 * writes only the outputs of its indices gives the one-thread results. */
void sk_parallel_ranges(int64_t n, int64_t work, void (*body)(void *ctx, int64_t lo, int64_t hi), void *ctx);
/* The same with every range boundary moved to the nearest index that is
 * `phase` modulo `grain`: outputs that a kernel updates again and again
 * (a column sum's accumulators) then start each thread's part on a cache
 * line of its own, which no other thread writes. */
void sk_parallel_ranges_aligned(int64_t n, int64_t work, int64_t grain, int64_t phase,
                                void (*body)(void *ctx, int64_t lo, int64_t hi), void *ctx);
/* The grain and phase for outputs of `step` bytes per index starting at
 * base: index phase + k * grain starts a 64-byte line (phase 0 when none
 * does). */
void sk_line_grain(const void *base, int64_t step, int64_t *grain, int64_t *phase);

#endif
