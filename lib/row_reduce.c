/* row_reduce.c: the sum, max or min of one contiguous f32 row, which the
 * row groups of generated loops call (docs/codegen.md, "Row groups").
 *
 * A reduction in a vectorized loop has one accumulator register, and each
 * vector waits for the one before it.  On an AVX-512 EPYC core, over a row
 * of 1024 in L1, the loop's sum took 0.036 ns an element and its max (with
 * the NaN flag) 0.058; with four accumulators they take 0.010-0.015 and
 * 0.013-0.026 (five runs, a noisy machine).
 *
 * The order is fixed, whatever the ISA: 64 lanes, lane l folding elements
 * l, l + 64, ... (the last block padded with the identity); then lane l of
 * the first 16 takes (l . l+16) . (l+32 . l+48), and the 16 are halved
 * pairwise, lane l with l + 8, then l + 4, l + 2, l + 1.  The AVX-512 form
 * (four registers), the AVX2 form (eight) and the portable one do those
 * operations in that order, so all give the same bits.  A max (min) lane
 * takes an element only when it is greater (less): x > acc ? x : acc, as
 * MAXPS(x, acc) computes.  Max and min return NaN when an element is NaN,
 * which is flagged apart, as the loops do; a sum propagates it itself. */
#include "internal.h"

#include <math.h>

enum { LANES = 64, BLOCK = 16 };   /* lanes; the lanes of the 16-wide step */

static inline float identity(sc_reduce op) { return op == SC_SUM ? 0.0f : op == SC_MAX ? -INFINITY : INFINITY; }

static inline float fold(sc_reduce op, float acc, float x) {
    return op == SC_SUM ? acc + x : op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

/* The last n < 64 elements, padded with the identity to a whole block. */
static const float *pad(sc_reduce op, float *last, const float *x, int64_t n) {
    for (int l = 0; l < LANES; l++)
        last[l] = l < n ? x[l] : identity(op);
    return last;
}

static inline __attribute__((always_inline)) float row_portable(sc_reduce op, const float *x, int64_t n) {
    float p[LANES], last[LANES];
    int nan = 0;
    for (int l = 0; l < LANES; l++)
        p[l] = identity(op);
    for (int64_t j = 0; j < n; j += LANES) {
        const float *b = n - j < LANES ? pad(op, last, x + j, n - j) : x + j;
        for (int l = 0; l < LANES; l++) {
            nan |= b[l] != b[l];
            p[l] = fold(op, p[l], b[l]);
        }
    }
    for (int l = 0; l < BLOCK; l++)
        p[l] = fold(op, fold(op, p[l], p[l + 16]), fold(op, p[l + 32], p[l + 48]));
    for (int w = BLOCK / 2; w; w /= 2)
        for (int l = 0; l < w; l++)
            p[l] = fold(op, p[l], p[l + w]);
    return op != SC_SUM && nan ? NAN : p[0];
}

#if defined(__x86_64__) && defined(__GNUC__)
#define ROW_VECTOR_FORMS 1
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
/* Loops over registers, unrolled so that the registers stay registers. */
#define UNROLLED _Pragma("GCC unroll 8")

/* fold() lane by lane, in registers of 4, 8 and 16 lanes: MAXPS(x, acc) is
 * x > acc ? x : acc. */
INLINE __attribute__((target("avx2"))) __m128 fold4(sc_reduce op, __m128 acc, __m128 x) {
    return op == SC_SUM ? _mm_add_ps(acc, x) : op == SC_MAX ? _mm_max_ps(x, acc) : _mm_min_ps(x, acc);
}

INLINE __attribute__((target("avx2"))) __m256 fold8(sc_reduce op, __m256 acc, __m256 x) {
    return op == SC_SUM ? _mm256_add_ps(acc, x) : op == SC_MAX ? _mm256_max_ps(x, acc) : _mm256_min_ps(x, acc);
}

INLINE __attribute__((target("avx512f"))) __m512 fold16(sc_reduce op, __m512 acc, __m512 x) {
    return op == SC_SUM ? _mm512_add_ps(acc, x) : op == SC_MAX ? _mm512_max_ps(x, acc) : _mm512_min_ps(x, acc);
}

/* The 8 lanes left after the 16-wide step, halved to one. */
INLINE __attribute__((target("avx2"))) float halve8(sc_reduce op, __m256 v) {
    __m128 q = fold4(op, _mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = fold4(op, q, _mm_movehl_ps(q, q));        /* lanes 2, 3 over 0, 1 */
    q = fold4(op, q, _mm_shuffle_ps(q, q, 1));    /* lane 1 over 0 */
    return _mm_cvtss_f32(q);
}

INLINE __attribute__((target("avx512f"))) float row_avx512_op(sc_reduce op, const float *x, int64_t n) {
    __m512 a[4];
    float last[LANES];
    __mmask16 nan = 0;
    UNROLLED
    for (int k = 0; k < 4; k++)
        a[k] = _mm512_set1_ps(identity(op));
    for (int64_t j = 0; j < n; j += LANES) {
        const float *b = n - j < LANES ? pad(op, last, x + j, n - j) : x + j;
        __m512 v[4];
        UNROLLED
        for (int k = 0; k < 4; k++) {
            v[k] = _mm512_loadu_ps(b + 16 * k);
            a[k] = fold16(op, a[k], v[k]);
        }
        if (op != SC_SUM)
            nan |= _mm512_cmp_ps_mask(v[0], v[1], _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v[2], v[3], _CMP_UNORD_Q);
    }
    __m512 q = fold16(op, fold16(op, a[0], a[1]), fold16(op, a[2], a[3]));
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(q), 1));
    return nan ? NAN : halve8(op, fold8(op, _mm512_castps512_ps256(q), hi));
}

/* a[2k] and a[2k + 1] are the low and high halves of AVX-512's a[k]. */
INLINE __attribute__((target("avx2"))) float row_avx2_op(sc_reduce op, const float *x, int64_t n) {
    __m256 a[8], nan = _mm256_setzero_ps();
    float last[LANES];
    UNROLLED
    for (int k = 0; k < 8; k++)
        a[k] = _mm256_set1_ps(identity(op));
    for (int64_t j = 0; j < n; j += LANES) {
        const float *b = n - j < LANES ? pad(op, last, x + j, n - j) : x + j;
        __m256 v[8];
        UNROLLED
        for (int k = 0; k < 8; k++) {
            v[k] = _mm256_loadu_ps(b + 8 * k);
            a[k] = fold8(op, a[k], v[k]);
        }
        if (op != SC_SUM)
            UNROLLED
            for (int k = 0; k < 8; k += 2)
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[k], v[k + 1], _CMP_UNORD_Q));
    }
    __m256 q[2];
    UNROLLED
    for (int h = 0; h < 2; h++)
        q[h] = fold8(op, fold8(op, a[h], a[2 + h]), fold8(op, a[4 + h], a[6 + h]));
    return _mm256_movemask_ps(nan) ? NAN : halve8(op, fold8(op, q[0], q[1]));
}

/* One function per ISA and op, the op a constant in each. */
#define ROW_FORMS(OP, NAME)                                                                                   \
    __attribute__((target("avx512f"))) static float NAME##_avx512(const float *x, int64_t n) {             \
        return row_avx512_op(OP, x, n);                                                                      \
    }                                                                                                         \
    __attribute__((target("avx2"))) static float NAME##_avx2(const float *x, int64_t n) {                  \
        return row_avx2_op(OP, x, n);                                                                        \
    }
ROW_FORMS(SC_SUM, row_sum)
ROW_FORMS(SC_MAX, row_max)
ROW_FORMS(SC_MIN, row_min)
#else
#define ROW_VECTOR_FORMS 0
#endif
static float row_sum_portable(const float *x, int64_t n) { return row_portable(SC_SUM, x, n); }
static float row_max_portable(const float *x, int64_t n) { return row_portable(SC_MAX, x, n); }
static float row_min_portable(const float *x, int64_t n) { return row_portable(SC_MIN, x, n); }

typedef float row_fn(const float *x, int64_t n);

/* The form of `isa` (the portable one below AVX2, or where no vector form
 * is compiled); the entry points call the CPU's. */
static row_fn *row_form(sc_reduce op, sk_isa isa) {
#if ROW_VECTOR_FORMS
    if (isa >= SK_ISA_AVX512)
        return op == SC_SUM ? row_sum_avx512 : op == SC_MAX ? row_max_avx512 : row_min_avx512;
    if (isa >= SK_ISA_AVX2)
        return op == SC_SUM ? row_sum_avx2 : op == SC_MAX ? row_max_avx2 : row_min_avx2;
#else
    (void)isa;
#endif
    return op == SC_SUM ? row_sum_portable : op == SC_MAX ? row_max_portable : row_min_portable;
}

float sk_row_reduce_f32_isa(sk_isa isa, sc_reduce op, const float *x, int64_t n) {
    return row_form(op, isa)(x, n);
}

#if SK_HAS_ISA_CLONES
/* Resolved once, when the program is loaded (GNU indirect functions, as
 * GCC's target_clones are); libgcc's __builtin_cpu_supports counts an ISA
 * only where the OS saves its registers, as lib/cpu.c does. */
static sk_isa loaded_isa(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? SK_ISA_AVX512 : __builtin_cpu_supports("avx2") ? SK_ISA_AVX2
                                                                                               : SK_ISA_BASELINE;
}
static row_fn *resolve_sum(void) { return row_form(SC_SUM, loaded_isa()); }
static row_fn *resolve_max(void) { return row_form(SC_MAX, loaded_isa()); }
static row_fn *resolve_min(void) { return row_form(SC_MIN, loaded_isa()); }
float sk_row_sum_f32(const float *x, int64_t n) __attribute__((ifunc("resolve_sum")));
float sk_row_max_f32(const float *x, int64_t n) __attribute__((ifunc("resolve_max")));
float sk_row_min_f32(const float *x, int64_t n) __attribute__((ifunc("resolve_min")));
#else
float sk_row_sum_f32(const float *x, int64_t n) { return row_sum_portable(x, n); }
float sk_row_max_f32(const float *x, int64_t n) { return row_max_portable(x, n); }
float sk_row_min_f32(const float *x, int64_t n) { return row_min_portable(x, n); }
#endif
