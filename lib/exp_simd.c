/* exp_simd.c: the vector variants of sk_exp_f32 (shardc_elementwise.h) that
 * GCC's vectorized loops call, under the names of the x86-64 vector function
 * ABI (_ZGV, then b/c/d/e for SSE2/AVX/AVX2/AVX-512, N for unmasked, the
 * lane count, v for one vector argument), and the scalar one for loops GCC
 * leaves scalar.  Each computes sk_exp_f32_lane's steps, in its order and
 * with its roundings, so every lane gives its bits:
 *   - the clamps are min and max with the bound first: MINPS(a, b) is
 *     a < b ? a : b, which returns b, a NaN x, when either is NaN;
 *   - 2^n: AVX-512's scalef multiplies by 2^floor(n) and rounds once, as
 *     the product by two exact factors 2^(n/2) does, subnormals included;
 *     AVX2 builds the two factors from n's bits as the scalar form does.
 * SSE2 and AVX lanes call the scalar form (the baseline of ISA clones, and
 * AVX without AVX2, which no clone targets). */
#include "shardc_lib.h"

#if SK_HAS_ISA_CLONES
#include <immintrin.h>

/* The scalar one under another C name: defining sk_exp_f32 itself, with
 * its declaration's simd attribute, would have GCC make its own variants. */
float sk_exp_f32_scalar(float x) __asm__("sk_exp_f32");
float sk_exp_f32_scalar(float x) { return sk_exp_f32_lane(x); }

/* The steps the AVX-512 and AVX2 forms share, for the intrinsics of width
 * W (512 or 256): the clamps, t (k in its low bits), k16 = k / 16 (one
 * fma, exact, as the scalar form's subtraction and product are), and the
 * polynomial e^r - 1, left in q. */
#define SK_EXP_STEPS(W)                                                                                   \
    x = _mm##W##_min_ps(_mm##W##_set1_ps(SK_EXP_TOP), x);                                                 \
    x = _mm##W##_max_ps(_mm##W##_castsi##W##_ps(_mm##W##_set1_epi32((int)SK_EXP_BOTTOM_BITS)), x);        \
    t = _mm##W##_fmadd_ps(x, _mm##W##_set1_ps(SK_EXP_16_LOG2E), _mm##W##_set1_ps(SK_EXP_ROUNDER));        \
    k16 = _mm##W##_fmadd_ps(t, _mm##W##_set1_ps(0.0625f), _mm##W##_set1_ps(-SK_EXP_ROUNDER * 0.0625f));   \
    r = _mm##W##_fmadd_ps(k16, _mm##W##_set1_ps(SK_EXP_LN2_HI), x);                                      \
    r = _mm##W##_fmadd_ps(k16, _mm##W##_set1_ps(SK_EXP_LN2_LO), r);                                      \
    q = _mm##W##_fmadd_ps(_mm##W##_set1_ps(SK_EXP_P3), r, _mm##W##_set1_ps(SK_EXP_P2));                  \
    q = _mm##W##_fmadd_ps(q, _mm##W##_mul_ps(r, r), r)

static const float exp2_hi[16] = SK_EXP2_HI, exp2_lo[16] = SK_EXP2_LO;

/* 2^(j/16) by a permute of the tables in registers (its index's low 4
 * bits, which t's are); 2^m by scalef, which multiplies by 2^floor(k16). */
__m512 sk_exp_f32_avx512(__m512 x) __asm__("_ZGVeN16v_sk_exp_f32");
__attribute__((target("avx512f"))) __m512 sk_exp_f32_avx512(__m512 x) {
    __m512 t, k16, r, q;
    SK_EXP_STEPS(512);
    __m512i j = _mm512_castps_si512(t);
    __m512 hi = _mm512_permutexvar_ps(j, _mm512_loadu_ps(exp2_hi)), lo = _mm512_permutexvar_ps(j, _mm512_loadu_ps(exp2_lo));
    return _mm512_scalef_ps(_mm512_add_ps(_mm512_fmadd_ps(hi, q, lo), hi), k16);
}

/* A table of 16 in two registers of 8: a permute of each, and the one
 * that bit 3 of j picks. */
__attribute__((target("avx2,fma"))) static inline __m256 table16(const float *table, __m256i j) {
    __m256 low = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table), j);
    __m256 high = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 8), j);
    return _mm256_blendv_ps(low, high, _mm256_castsi256_ps(_mm256_slli_epi32(j, 28)));
}

__m256 sk_exp_f32_avx2(__m256 x) __asm__("_ZGVdN8v_sk_exp_f32");
__attribute__((target("avx2,fma"))) __m256 sk_exp_f32_avx2(__m256 x) {
    __m256 t, k16, r, q;
    SK_EXP_STEPS(256);
    __m256i k = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(_mm256_set1_ps(SK_EXP_ROUNDER)));
    __m256 hi = table16(exp2_hi, k), y = _mm256_add_ps(_mm256_fmadd_ps(hi, q, table16(exp2_lo, k)), hi);
    __m256i m = _mm256_srai_epi32(k, 4), m1 = _mm256_srai_epi32(m, 1), bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(m1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(m, m1), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

/* Lane by lane, through the scalar form. */
static void exp_lanes(float *v, int n) {
    for (int i = 0; i < n; i++)
        v[i] = sk_exp_f32_lane(v[i]);
}

__m256 sk_exp_f32_avx(__m256 x) __asm__("_ZGVcN8v_sk_exp_f32");
__attribute__((target("avx"))) __m256 sk_exp_f32_avx(__m256 x) {
    float v[8];
    _mm256_storeu_ps(v, x);
    exp_lanes(v, 8);
    return _mm256_loadu_ps(v);
}

__m128 sk_exp_f32_sse2(__m128 x) __asm__("_ZGVbN4v_sk_exp_f32");
__m128 sk_exp_f32_sse2(__m128 x) {
    float v[4];
    _mm_storeu_ps(v, x);
    exp_lanes(v, 4);
    return _mm_loadu_ps(v);
}
#endif
