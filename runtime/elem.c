/* Element types, reductions and strided copies of the runtime. */
#include "rt_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* compiler/ir/dtypes.def lists the runtime's dtypes in sc_dtype's order. */
static const struct {
    const char *name;
    size_t bytes;
} dtypes[SC_DTYPE_COUNT] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) {name, bytes},
#include "../compiler/ir/dtypes.def"
#undef DTYPE
};

size_t sc_dtype_size(sc_dtype t) { return (unsigned)t < SC_DTYPE_COUNT ? dtypes[t].bytes : 0; }

const char *sc_dtype_name(sc_dtype t) { return (unsigned)t < SC_DTYPE_COUNT ? dtypes[t].name : "?"; }

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round to nearest even; after F. Giesen's float_to_half_fast3_rtne. */
uint16_t sc_f16_from_float(float x) {
    uint32_t u = float_bits(x), sign = u & 0x80000000u, o;
    u ^= sign;
    if (u >= (127u + 16) << 23)                         /* >= 65536, inf or NaN */
        o = u > 0x7f800000u ? 0x7e00 | ((u >> 13) & 0x3ff) : 0x7c00;
    else if (u < 113u << 23) {                          /* below 2^-14: subnormal or 0 */
        const uint32_t magic = ((127u - 15) + (23 - 10) + 1) << 23;
        o = float_bits(bits_float(u) + bits_float(magic)) - magic;   /* the FPU rounds */
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = u >> 13;                                    /* a carry may give inf: right */
    }
    return (uint16_t)(o | (sign >> 16));
}

float sc_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0)
        return bits_float(float_bits((float)m * 0x1p-24f) | sign);
    if (e == 31)
        return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

/* ---- reductions ----
 *
 * Work goes by chunks of CHUNK elements: each source's chunk is widened to
 * double (one loop per dtype, so the dtype switch is outside the element
 * loops) and combined into a double accumulator in member order, which is
 * rounded once into dst.
 *
 * Sums add with add_member(): +0, then each member's value widened to
 * double, in member order, rounded once.  Which NaN a sum of several NaNs
 * gives is not left to the compiler's choice of operand order: it is the
 * last NaN member's, quieted (what x86 gave for `acc += x` before).
 *
 * f32 and f64 sums, every f32 gradient's all-reduce, have fused loops of
 * constant trip count that the compiler vectorizes (GCC's -O2 vectorizer
 * needs the constant), taking up to four members per pass over the
 * accumulator; plain + there may pick either NaN, so a chunk whose sum has
 * a NaN is summed again with add_member().  The results are those of the
 * general path, bit for bit. */

enum { CHUNK = 256 };

static inline double add_member(double acc, double x) { return isnan(x) ? x + x : acc + x; }

/* out[i] = src[off + i] widened to double, i < m. */
static void load_chunk(sc_dtype t, const void *src, int64_t off, double *out, int64_t m) {
    switch (t) {
    case SC_F32: {
        const float *p = (const float *)src + off;
        for (int64_t i = 0; i < m; i++)
            out[i] = p[i];
        break;
    }
    case SC_F64: {
        const double *p = (const double *)src + off;
        for (int64_t i = 0; i < m; i++)
            out[i] = p[i];
        break;
    }
    case SC_BF16: {
        const uint16_t *p = (const uint16_t *)src + off;
        for (int64_t i = 0; i < m; i++)
            out[i] = sc_bf16_to_float(p[i]);
        break;
    }
    case SC_F16: {
        const uint16_t *p = (const uint16_t *)src + off;
        for (int64_t i = 0; i < m; i++)
            out[i] = sc_f16_to_float(p[i]);
        break;
    }
    default: {
        const int32_t *p = (const int32_t *)src + off;
        for (int64_t i = 0; i < m; i++)
            out[i] = p[i];
        break;
    }
    }
}

/* dst[i] = acc[i] rounded to t (bf16 and f16 through f32), i < m. */
static void store_chunk(sc_dtype t, void *dst, const double *acc, int64_t m) {
    switch (t) {
    case SC_F32:
        for (int64_t i = 0; i < m; i++)
            ((float *)dst)[i] = (float)acc[i];
        break;
    case SC_F64:
        memcpy(dst, acc, (size_t)m * sizeof *acc);
        break;
    case SC_BF16:
        for (int64_t i = 0; i < m; i++)
            ((uint16_t *)dst)[i] = sc_bf16_from_float((float)acc[i]);
        break;
    case SC_F16:
        for (int64_t i = 0; i < m; i++)
            ((uint16_t *)dst)[i] = sc_f16_from_float((float)acc[i]);
        break;
    default:
        for (int64_t i = 0; i < m; i++)
            ((int32_t *)dst)[i] = (int32_t)acc[i];
        break;
    }
}

static double max_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double min_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }

/* The sum of element `i` of the k sources of type T from offset off. */
#define SUM_ONE(T, srcs, k, i)                                                                     \
    do {                                                                                           \
        double a_ = 0.0;                                                                           \
        for (int j_ = 0; j_ < (k); j_++)                                                           \
            a_ = add_member(a_, (double)((const T *)(srcs)[j_])[i]);                               \
        acc_one = a_;                                                                              \
    } while (0)

/* The vectorized chunk loop of a sum of k >= 1 sources of type T (float or
 * double) into acc[CHUNK], from element `base` of each source; sets `nan`
 * when some element of the chunk is NaN.  Each pass over acc adds up to 8
 * members (in member order: the same additions as add_member's loop), so
 * that 8 members cost one pass: the first pass starts from +0. */
#define SUM_SRC(T, srcs, j, base) ((const T *)(srcs)[j] + (base))
#define SUM_PASS8(T, srcs, j, base, acc, from)                                                     \
    do {                                                                                           \
        const T *p0 = SUM_SRC(T, srcs, j, base), *p1 = SUM_SRC(T, srcs, j + 1, base);              \
        const T *p2 = SUM_SRC(T, srcs, j + 2, base), *p3 = SUM_SRC(T, srcs, j + 3, base);          \
        const T *p4 = SUM_SRC(T, srcs, j + 4, base), *p5 = SUM_SRC(T, srcs, j + 5, base);          \
        const T *p6 = SUM_SRC(T, srcs, j + 6, base), *p7 = SUM_SRC(T, srcs, j + 7, base);          \
        for (int i = 0; i < CHUNK; i++)                                                            \
            acc[i] = (((((((from + (double)p0[i]) + (double)p1[i]) + (double)p2[i]) + (double)p3[i]) + \
                         (double)p4[i]) + (double)p5[i]) + (double)p6[i]) + (double)p7[i];        \
        j += 8;                                                                                    \
    } while (0)
#define SUM_PASS4(T, srcs, j, base, acc, from)                                                     \
    do {                                                                                           \
        const T *p0 = SUM_SRC(T, srcs, j, base), *p1 = SUM_SRC(T, srcs, j + 1, base);              \
        const T *p2 = SUM_SRC(T, srcs, j + 2, base), *p3 = SUM_SRC(T, srcs, j + 3, base);          \
        for (int i = 0; i < CHUNK; i++)                                                            \
            acc[i] = (((from + (double)p0[i]) + (double)p1[i]) + (double)p2[i]) + (double)p3[i];   \
        j += 4;                                                                                    \
    } while (0)
#define SUM_PASS2(T, srcs, j, base, acc, from)                                                     \
    do {                                                                                           \
        const T *p0 = SUM_SRC(T, srcs, j, base), *p1 = SUM_SRC(T, srcs, j + 1, base);              \
        for (int i = 0; i < CHUNK; i++)                                                            \
            acc[i] = (from + (double)p0[i]) + (double)p1[i];                                       \
        j += 2;                                                                                    \
    } while (0)
#define SUM_PASS1(T, srcs, j, base, acc, from)                                                     \
    do {                                                                                           \
        const T *p0 = SUM_SRC(T, srcs, j, base);                                                   \
        for (int i = 0; i < CHUNK; i++)                                                            \
            acc[i] = from + (double)p0[i];                                                         \
        j += 1;                                                                                    \
    } while (0)
#define SUM_CHUNK(T, srcs, k, base, acc, nan)                                                      \
    do {                                                                                           \
        int j = 0;                                                                                 \
        if ((k) >= 8)                                                                              \
            SUM_PASS8(T, srcs, j, base, acc, 0.0);                                                 \
        else if ((k) >= 4)                                                                         \
            SUM_PASS4(T, srcs, j, base, acc, 0.0);                                                 \
        else if ((k) >= 2)                                                                         \
            SUM_PASS2(T, srcs, j, base, acc, 0.0);                                                 \
        else                                                                                       \
            SUM_PASS1(T, srcs, j, base, acc, 0.0);                                                 \
        while ((k) - j >= 8)                                                                       \
            SUM_PASS8(T, srcs, j, base, acc, acc[i]);                                              \
        if ((k) - j >= 4)                                                                          \
            SUM_PASS4(T, srcs, j, base, acc, acc[i]);                                              \
        if ((k) - j >= 2)                                                                          \
            SUM_PASS2(T, srcs, j, base, acc, acc[i]);                                              \
        if ((k) - j >= 1)                                                                          \
            SUM_PASS1(T, srcs, j, base, acc, acc[i]);                                              \
        int n_ = 0;                                                                                \
        for (int i = 0; i < CHUNK; i++)                                                            \
            n_ |= acc[i] != acc[i];                                                                \
        nan = n_;                                                                                  \
    } while (0)

/* sum_f32 and sum_f64: chunks through SUM_CHUNK, a chunk holding a NaN
 * again element by element (so that NaN payloads come out as the plain
 * loop gives them), the tail element by element; each rounds once to T. */
#define DEFINE_SUM(name, T, ATTR)                                                                  \
    ATTR static void name(const void *const *srcs, int k, int64_t off, T *dst, int64_t n) {        \
        double acc[CHUNK], acc_one;                                                                \
        int64_t c = 0;                                                                             \
        for (; c + CHUNK <= n; c += CHUNK) {                                                       \
            int nan;                                                                               \
            SUM_CHUNK(T, srcs, k, off + c, acc, nan);                                              \
            if (nan)                                                                               \
                for (int i = 0; i < CHUNK; i++)                                                    \
                    if (isnan(acc[i])) {                                                           \
                        SUM_ONE(T, srcs, k, off + c + i);                                          \
                        acc[i] = acc_one;                                                          \
                    }                                                                              \
            for (int i = 0; i < CHUNK; i++)                                                        \
                dst[c + i] = (T)acc[i];                                                            \
        }                                                                                          \
        for (; c < n; c++) {                                                                       \
            SUM_ONE(T, srcs, k, off + c);                                                          \
            dst[c] = (T)acc_one;                                                                   \
        }                                                                                          \
    }

DEFINE_SUM(sum_f32_base, float, )
DEFINE_SUM(sum_f64_base, double, )

/* On x86-64 the same loops again for AVX2 and AVX-512 (4 or 8 doubles a
 * vector instead of SSE2's 2), chosen at run time: the converts and adds
 * are the same IEEE operations, so the bits are the same; only adds, so
 * nothing can be contracted into an FMA. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SUM_VARIANTS 1
DEFINE_SUM(sum_f32_avx2, float, __attribute__((target("avx2"))))
DEFINE_SUM(sum_f64_avx2, double, __attribute__((target("avx2"))))
DEFINE_SUM(sum_f32_avx512, float, __attribute__((target("avx512f"))))
DEFINE_SUM(sum_f64_avx512, double, __attribute__((target("avx512f"))))
#endif

/* The widest of the loops that this CPU runs (2: AVX-512, 1: AVX2, 0:
 * SSE2 or not x86-64), at most rt_reduce_isa's limit. */
static _Atomic int isa_limit = 2;

int rt_reduce_isa(int limit) {
    if (limit >= 0)
        atomic_store_explicit(&isa_limit, limit, memory_order_relaxed);
    int isa = 0;
#ifdef SUM_VARIANTS
    isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    int lim = atomic_load_explicit(&isa_limit, memory_order_relaxed);
    return isa < lim ? isa : lim;
}

static void sum_f32(const void *const *srcs, int k, int64_t off, float *dst, int64_t n) {
#ifdef SUM_VARIANTS
    int isa = rt_reduce_isa(-1);
    if (isa == 2)
        sum_f32_avx512(srcs, k, off, dst, n);
    else if (isa == 1)
        sum_f32_avx2(srcs, k, off, dst, n);
    else
#endif
        sum_f32_base(srcs, k, off, dst, n);
}

static void sum_f64(const void *const *srcs, int k, int64_t off, double *dst, int64_t n) {
#ifdef SUM_VARIANTS
    int isa = rt_reduce_isa(-1);
    if (isa == 2)
        sum_f64_avx512(srcs, k, off, dst, n);
    else if (isa == 1)
        sum_f64_avx2(srcs, k, off, dst, n);
    else
#endif
        sum_f64_base(srcs, k, off, dst, n);
}

/* Integer reductions: sums wrap, in U, the unsigned type of T's width (where C
 * defines wrapping; memcpy back, no implementation-defined cast), in the
 * dtype's own width (no double holds every i64); maxima and minima in T. */
#define DEFINE_INT_REDUCE(name, T, U)                                                                \
    static void name(sc_reduce op, const void *const *srcs, int k, int64_t off, void *dst, int64_t n) { \
        for (int64_t i = 0; i < n; i++) {                                                           \
            U sum = 0;                                                                              \
            T m = ((const T *)srcs[0])[off + i];                                                    \
            for (int j = 0; j < k; j++) {                                                           \
                T z = ((const T *)srcs[j])[off + i];                                                \
                sum += (U)z;                                                                        \
                m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);                               \
            }                                                                                       \
            if (op == SC_SUM)                                                                       \
                memcpy(&m, &sum, sizeof m);                                                         \
            ((T *)dst)[i] = m;                                                                      \
        }                                                                                           \
    }
DEFINE_INT_REDUCE(reduce_i32, int32_t, uint32_t)
DEFINE_INT_REDUCE(reduce_u32, uint32_t, uint32_t)
DEFINE_INT_REDUCE(reduce_i64, int64_t, uint64_t)
DEFINE_INT_REDUCE(reduce_u8, uint8_t, uint8_t)

/* Or (sum, max) or and (min) of bools, any nonzero byte true. */
static void reduce_bool(sc_reduce op, const void *const *srcs, int k, int64_t off, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        int any = 0, all = 1;
        for (int j = 0; j < k; j++) {
            int z = ((const uint8_t *)srcs[j])[off + i] != 0;
            any |= z;
            all &= z;
        }
        ((uint8_t *)dst)[i] = (uint8_t)(op == SC_MIN ? all : any);
    }
}

void rt_reduce(sc_dtype t, sc_reduce op, const void *const *srcs, int k, int64_t off, void *dst,
               int64_t n) {
    static void (*const exact[SC_DTYPE_COUNT])(sc_reduce, const void *const *, int, int64_t, void *, int64_t) = {
        [SC_BOOL] = reduce_bool, [SC_I32] = reduce_i32, [SC_U32] = reduce_u32, [SC_I64] = reduce_i64,
        [SC_U8] = reduce_u8,
    };
    if (exact[t]) {                         /* the integers and bool: no float accumulation */
        exact[t](op, srcs, k, off, dst, n);
        return;
    }
    if (op == SC_SUM && k >= 1 && t == SC_F32) {
        sum_f32(srcs, k, off, dst, n);
        return;
    }
    if (op == SC_SUM && k >= 1 && t == SC_F64) {
        sum_f64(srcs, k, off, dst, n);
        return;
    }
    double acc[CHUNK], x[CHUNK];
    size_t es = sc_dtype_size(t);
    for (int64_t c = 0; c < n; c += CHUNK) {
        int64_t m = n - c < CHUNK ? n - c : CHUNK;
        if (op == SC_SUM)
            for (int64_t i = 0; i < m; i++)
                acc[i] = 0.0;
        else
            load_chunk(t, srcs[0], off + c, acc, m);
        for (int j = 0; j < k; j++) {
            load_chunk(t, srcs[j], off + c, x, m);
            if (op == SC_SUM)
                for (int64_t i = 0; i < m; i++)
                    acc[i] = add_member(acc[i], x[i]);
            else if (op == SC_MAX)
                for (int64_t i = 0; i < m; i++)
                    acc[i] = max_nan(acc[i], x[i]);
            else
                for (int64_t i = 0; i < m; i++)
                    acc[i] = min_nan(acc[i], x[i]);
        }
        store_chunk(t, (char *)dst + c * (int64_t)es, acc, m);
    }
}

/* ---- non-temporal copies ---- */

#if defined(__SSE2__)
void rt_copy_stream(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (n < head + 64) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n);
}

void rt_stream_fence(void) { _mm_sfence(); }
#else
void rt_copy_stream(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
void rt_stream_fence(void) { atomic_thread_fence(memory_order_seq_cst); }
#endif

/* ---- strided copies ---- */

int64_t rt_strides(const sc_shape *s, int64_t *strides) {
    int64_t n = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        strides[d] = n;
        n *= s->dims[d];
    }
    return n;
}

void rt_copy_box(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides,
                 int rank, const int64_t *box, size_t elsize) {
    /* Merge dims that are contiguous in both arrays, so the inner loop is
     * one memcpy as long as possible. */
    int64_t b[SC_MAX_RANK], ds[SC_MAX_RANK], ss[SC_MAX_RANK];
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (box[d] == 0)
            return;
        if (box[d] == 1)
            continue;
        if (r > 0 && ds[r - 1] == dst_strides[d] * box[d] && ss[r - 1] == src_strides[d] * box[d]) {
            b[r - 1] *= box[d];
            ds[r - 1] = dst_strides[d];
            ss[r - 1] = src_strides[d];
            continue;
        }
        b[r] = box[d], ds[r] = dst_strides[d], ss[r] = src_strides[d];
        r++;
    }
    size_t run = elsize;
    if (r > 0 && ds[r - 1] == 1 && ss[r - 1] == 1)
        run *= (size_t)b[--r];
    int64_t idx[SC_MAX_RANK] = {0};
    char *d0 = dst;
    const char *s0 = src;
    for (;;) {
        int64_t od = 0, os = 0;
        for (int d = 0; d < r; d++)
            od += idx[d] * ds[d], os += idx[d] * ss[d];
        memcpy(d0 + od * (int64_t)elsize, s0 + os * (int64_t)elsize, run);
        int d = r - 1;
        while (d >= 0 && ++idx[d] == b[d])
            idx[d--] = 0;
        if (d < 0)
            return;
    }
}
