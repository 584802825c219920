/* shardc_elementwise.h: the helpers that elementwise formulas call
 * (shardc_elementwise.def's T(f)), and the conversion to i32.  The kernels
 * of libshardc_lib.a, the fused loops of generated code and shardc's
 * reference interpreter all use these definitions. */
#ifndef SHARDC_ELEMENTWISE_H
#define SHARDC_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>

/* Floor division: x / 0 = -1 (XLA's value), and INT32_MIN / -1 wraps. */
static inline int32_t sk_floor_div_i32(int32_t a, int32_t b) {
    if (b == 0)
        return -1;
    int64_t q = (int64_t)a / b, r = (int64_t)a % b;
    if (r != 0 && (r < 0) != (b < 0))
        q -= 1;
    return (int32_t)(uint32_t)q;
}

/* Floor modulo: the result has the divisor's sign; x % 0 = x. */
static inline int32_t sk_floor_rem_i32(int32_t a, int32_t b) {
    if (b == 0)
        return a;
    int64_t r = (int64_t)a % b;
    if (r != 0 && (r < 0) != (b < 0))
        r += b;
    return (int32_t)r;
}

/* i64 the same way (INT64_MIN / -1 wraps to INT64_MIN, % -1 is 0: C leaves
 * both undefined, so -1 is taken apart).  u8 and u32 floor by truncating;
 * x / 0 is all ones (-1 as the unsigned dtype, XLA's value) and x % 0 = x. */
static inline int64_t sk_floor_div_i64(int64_t a, int64_t b) {
    if (b == 0)
        return -1;
    if (b == -1)
        return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b, r = a % b;
    if (r != 0 && (r < 0) != (b < 0))
        q -= 1;
    return q;
}

static inline int64_t sk_floor_rem_i64(int64_t a, int64_t b) {
    if (b == 0)
        return a;
    if (b == -1)
        return 0;
    int64_t r = a % b;
    if (r != 0 && (r < 0) != (b < 0))
        r += b;
    return r;
}

static inline uint8_t sk_floor_div_u8(uint8_t a, uint8_t b) { return b ? (uint8_t)(a / b) : UINT8_MAX; }
static inline uint8_t sk_floor_rem_u8(uint8_t a, uint8_t b) { return b ? (uint8_t)(a % b) : a; }
static inline uint32_t sk_floor_div_u32(uint32_t a, uint32_t b) { return b ? a / b : UINT32_MAX; }
static inline uint32_t sk_floor_rem_u32(uint32_t a, uint32_t b) { return b ? a % b : a; }

/* Floor modulo: the result has the divisor's sign (np.mod). */
static inline float sk_floor_rem_f32(float a, float b) {
    float r = fmodf(a, b);
    if (r != 0 && (r < 0) != (b < 0))
        r += b;
    if (r == 0)
        r = copysignf(0, b);
    return r;
}

static inline double sk_floor_rem_f64(double a, double b) {
    double r = fmod(a, b);
    if (r != 0 && (r < 0) != (b < 0))
        r += b;
    if (r == 0)
        r = copysign(0, b);
    return r;
}

/* Whether GCC compiles the kernels and the generated loops once per ISA
 * (x86-64 ELF, no sanitizer; shardc_lib.h's SK_ISA_CLONES). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define SK_HAS_ISA_CLONES 1
#else
#define SK_HAS_ISA_CLONES 0
#endif

/* sk_exp_f32's multiply-add: an fmaf where it is an instruction (every ISA
 * clone but the baseline's, or a target with FMA), rounded once, and the
 * same bits on every such ISA; elsewhere (clang and sanitizer builds for
 * the baseline) an fmaf is a libm call, ten times slower than a multiply
 * and an add, so those are used.  SK_EXP_ULPS bounds both forms against
 * the exact e^x (0.762 and 0.763 at worst over the whole range, results
 * near the subnormals; test_elementwise checks it on a sample). */
#if SK_HAS_ISA_CLONES || defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define SK_EXP_FMA 1
#define SK_MULADD(a, b, c) fmaf(a, b, c)
#else
#define SK_EXP_FMA 0
#define SK_MULADD(a, b, c) ((a) * (b) + (c))
#endif
#define SK_EXP_ULPS 0.8

/* sk_exp_f32's constants, which lib/exp_simd.c's vector forms use too. */
#define SK_EXP_TOP 100.0f                      /* bits 0x42c80000 */
#define SK_EXP_BOTTOM_BITS 0xc2cff1b5u         /* -103.97208 */
#define SK_EXP_16_LOG2E 0x1.715476p+4f         /* 16 / ln 2 */
#define SK_EXP_ROUNDER 12582912.0f             /* 1.5 * 2^23 */
#define SK_EXP_LN2_HI (-0x1.63p-1f)            /* -ln 2 in two parts; 10 bits in the first */
#define SK_EXP_LN2_LO 0x1.bd0106p-13f
#define SK_EXP_P3 0x1.55572p-3f                /* e^r - 1 = r + r^2 (P2 + P3 r) on |r| <= ln(2)/32 */
#define SK_EXP_P2 0x1.000222p-1f
/* 2^(j/16) = SK_EXP2_HI[j] + SK_EXP2_LO[j], j = 0 .. 15 */
#define SK_EXP2_HI                                                                                        \
    {0x1.000000p+0f, 0x1.0b5586p+0f, 0x1.172b84p+0f, 0x1.2387a6p+0f, 0x1.306fe0p+0f, 0x1.3dea64p+0f,      \
     0x1.4bfdaep+0f, 0x1.5ab07ep+0f, 0x1.6a09e6p+0f, 0x1.7a1148p+0f, 0x1.8ace54p+0f, 0x1.9c4918p+0f,      \
     0x1.ae89fap+0f, 0x1.c199bep+0f, 0x1.d5818ep+0f, 0x1.ea4afap+0f}
#define SK_EXP2_LO                                                                                        \
    {0x0.0p+0f,       0x1.9f3122p-25f,  -0x1.c15742p-27f, 0x1.ceac48p-25f,  0x1.4636e2p-25f,  0x1.824684p-25f, \
     -0x1.593abcp-25f, -0x1.5bd5ecp-27f, 0x1.9fcef4p-26f,  -0x1.829fd0p-25f, 0x1.15506ep-27f,  0x1.51f848p-27f, \
     -0x1.a94b14p-26f, -0x1.3d56b2p-27f, -0x1.822dbcp-27f, 0x1.52486cp-27f}

/* e^x in f32, within SK_EXP_ULPS of the exact value over every float in
 * [-103.97, 88.72] (measured against double exp), in a form compilers
 * vectorize: no call, no branch, no float comparison and no float-to-int
 * conversion.  libm's expf is a call per element, which kept every loop
 * with an exp or a gelu scalar; and under the default -ftrapping-math GCC
 * turns neither a float comparison nor a choice that skips float work into
 * a vector select, so the clamps work on the bits as integers.  x is
 * clamped to [-103.97, 100] (above ln(FLT_MAX) = 88.72 the product
 * overflows to +inf, at the bottom it rounds to 0); a NaN is left as it is
 * and comes out of the arithmetic.  k = round(16 x / ln 2) by the
 * 1.5 * 2^23 trick, whose sum also holds k in its low bits; r = x - k ln2/16
 * in two parts (Cody and Waite: k / 16 times the first part is exact);
 * e^x = 2^(k/16) e^r = 2^m 2^(j/16) e^r with j = k mod 16, m = floor(k / 16);
 * 2^(j/16) from a table of 16 in two parts, e^r - 1 by a degree-3
 * polynomial on |r| <= ln(2)/32 (fitted for this range), and 2^m applied as
 * two factors 2^(m/2) so that results down to the subnormals stay exact
 * powers of two.  Against a polynomial of degree 7 on |r| <= ln(2)/2
 * (Cephes' expf, before 2026-11-30) the table saves two multiply-adds an
 * element and rounds closer: its two parts hold 2^(j/16) to 2^-48.  The
 * integer steps are unsigned, so a NaN's bits wrap rather than overflow. */
static inline float sk_exp_f32_lane(float x) {
    static const float exp2_hi[16] = SK_EXP2_HI, exp2_lo[16] = SK_EXP2_LO;
    union { float f; uint32_t u; } xc = {x}, t, s1, s2;
    xc.u = xc.u - 0x42c80001u < 0x3cb80000u ? 0x42c80000u : xc.u;   /* 100 < x <= +inf: 100 */
    xc.u = xc.u - 0xc2cff1b6u < 0x3cb00e4bu ? SK_EXP_BOTTOM_BITS : xc.u;   /* -inf <= x < -103.97208: that */
    t.f = SK_MULADD(xc.f, SK_EXP_16_LOG2E, SK_EXP_ROUNDER);
    float k16 = (t.f - SK_EXP_ROUNDER) * 0.0625f;   /* k / 16, exact */
    float r = SK_MULADD(k16, SK_EXP_LN2_HI, xc.f);
    r = SK_MULADD(k16, SK_EXP_LN2_LO, r);
    float q = SK_MULADD(SK_MULADD(SK_EXP_P3, r, SK_EXP_P2), r * r, r);
    uint32_t k = t.u - 0x4b400000u, m = (uint32_t)((int32_t)k >> 4), m1 = (uint32_t)((int32_t)m >> 1);
    float hi = exp2_hi[k & 15], y = SK_MULADD(hi, q, exp2_lo[k & 15]) + hi;
    s1.u = (m1 + 127u) << 23;
    s2.u = (m - m1 + 127u) << 23;
    return y * s1.f * s2.f;   /* past ln(FLT_MAX) the product overflows to inf */
}

/* What formulas call.  Where GCC compiles per ISA, a declaration with
 * vector variants (lib/exp_simd.c): a vectorized loop calls the AVX-512 or
 * AVX2 one, 16 or 8 lanes a call, written with the instructions GCC does not
 * choose for sk_exp_f32_lane's scalar form (min and max for the clamps,
 * AVX-512's scalef for 2^n): a third of the instructions, and e^x about 1.3
 * times as fast on an AVX-512 EPYC core, a gelu 1.6 times.  Every variant
 * gives sk_exp_f32_lane's bits (test_elementwise compares them). */
#if SK_HAS_ISA_CLONES
__attribute__((simd("notinbranch"), const, nothrow, leaf)) float sk_exp_f32(float x);
#else
static inline float sk_exp_f32(float x) { return sk_exp_f32_lane(x); }
#endif

/* In f64 there is no loop to speed up that matters as much: libm's exp. */
static inline double sk_exp_f64(double x) { return exp(x); }

/* Conversion to i32 truncates toward zero, saturates, and gives 0 for NaN
 * (XLA's convert; a C cast out of range is undefined). */
static inline int32_t sk_to_i32(double v) {
    return isnan(v) ? 0 : v <= INT32_MIN ? INT32_MIN : v >= INT32_MAX ? INT32_MAX : (int32_t)v;
}

/* Conversion to u32: toward zero; an i32 keeps its bits (-1 is 0xffffffff,
 * as NumPy's astype), so values from -2^31 up wrap modulo 2^32, below that
 * they saturate to 0x80000000 and above 2^32 - 1 to 0xffffffff; NaN is 0. */
static inline uint32_t sk_to_u32(double v) {
    return isnan(v) ? 0 : v <= INT32_MIN ? 0x80000000u : v >= 4294967295.0 ? 0xffffffffu
           : v < 0 ? (uint32_t)(int32_t)v : (uint32_t)v;
}

/* Conversion of a floating-point value to i64: toward zero, saturating,
 * NaN 0 (as to i32).  2^63 is the first double past INT64_MAX. */
static inline int64_t sk_to_i64(double v) {
    return isnan(v) ? 0 : v <= -9223372036854775808.0 ? INT64_MIN : v >= 9223372036854775808.0 ? INT64_MAX
           : (int64_t)v;
}

/* Conversion of a floating-point value to u8: toward zero as to i64, then
 * modulo 256, as integers convert to u8 (NumPy's astype(np.uint8) wraps);
 * NaN 0.  The unsigned conversion is C's modulo, well defined. */
static inline uint8_t sk_to_u8(double v) { return (uint8_t)(uint64_t)sk_to_i64(v); }

/* An integer's low 32 bits as i32 (NumPy's astype(np.int32) of an int64):
 * modulo 2^32 without C's implementation-defined narrowing. */
static inline int32_t sk_wrap_i32(int64_t v) {
    uint32_t u = (uint32_t)(uint64_t)v;
    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 2147483648u) - 2147483647 - 1;
}

#endif
