/* rng_ops.h: counter-based random numbers as JAX draws them, one element at
 * a time: Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011; JAX's threefry2x32) and the
 * distributions on top of it.  lib/random.c (sk_random, what generated code
 * calls) and the reference interpreter (compiler/interp) both compute
 * through sk_rng_at, so the two give the same values.  Not installed.
 *
 * Element i of a draw is a function of the key and of its counter c alone
 * (the element's row-major index in the whole, unpartitioned tensor: JAX's
 * jax_threefry_partitionable mode), so a device computes its block from its
 * own counters and every mesh, layout and backend gives the same values. */
#ifndef SHARDC_RNG_OPS_H
#define SHARDC_RNG_OPS_H

#include "shardc_lib.h"

#include <math.h>
#include <stdint.h>

/* Inlined into the loops of draws, which then vectorize. */
#if defined(__GNUC__)
#define SK_RNG_INLINE static inline __attribute__((always_inline))
#else
#define SK_RNG_INLINE static inline
#endif

SK_RNG_INLINE uint32_t sk_rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

/* Threefry-2x32, 20 rounds: five groups of four, a key injection after
 * each (the key schedule's third word is k0 ^ k1 ^ 0x1BD11BDA).  Written
 * out straight, so that a loop of draws has no inner loop and vectorizes. */
#define SK_TF_ROUND(r) (x0 += x1, x1 = sk_rotl32(x1, r) ^ x0)
#define SK_TF_GROUP(a, b, c, d, ka, kb, n) \
    (SK_TF_ROUND(a), SK_TF_ROUND(b), SK_TF_ROUND(c), SK_TF_ROUND(d), x0 += ka, x1 += kb + (n))
SK_RNG_INLINE void sk_threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1, uint32_t out[2]) {
    const uint32_t k2 = k0 ^ k1 ^ 0x1BD11BDAu;
    x0 += k0;
    x1 += k1;
    SK_TF_GROUP(13, 15, 26, 6, k1, k2, 1u);
    SK_TF_GROUP(17, 29, 16, 24, k2, k0, 2u);
    SK_TF_GROUP(13, 15, 26, 6, k0, k1, 3u);
    SK_TF_GROUP(17, 29, 16, 24, k1, k2, 4u);
    SK_TF_GROUP(13, 15, 26, 6, k2, k0, 5u);
    out[0] = x0;
    out[1] = x1;
}
#undef SK_TF_GROUP
#undef SK_TF_ROUND

/* erfinv after M. Giles, "Approximating the erfinv function" (GPU Gems
 * 2010), the single-precision version XLA uses for f32. */
static inline float sk_erfinv_f32(float x) {
    if (!(fabsf(x) < 1.0f))
        return fabsf(x) == 1.0f ? copysignf(INFINITY, x) : NAN;
    float w = -logf((1.0f - x) * (1.0f + x)), p;
    if (w < 5.0f) {
        w -= 2.5f;
        p = 2.81022636e-08f;
        p = 3.43273939e-07f + p * w;
        p = -3.5233877e-06f + p * w;
        p = -4.39150654e-06f + p * w;
        p = 0.00021858087f + p * w;
        p = -0.00125372503f + p * w;
        p = -0.00417768164f + p * w;
        p = 0.246640727f + p * w;
        p = 1.50140941f + p * w;
    } else {
        w = sqrtf(w) - 3.0f;
        p = -0.000200214257f;
        p = 0.000100950558f + p * w;
        p = 0.00134934322f + p * w;
        p = -0.00367342844f + p * w;
        p = 0.00573950773f + p * w;
        p = -0.0076224613f + p * w;
        p = 0.00943887047f + p * w;
        p = 1.00167406f + p * w;
        p = 2.83297682f + p * w;
    }
    return p * x;
}

/* In double: the f32 approximation, then two Newton steps on erf(y) = x. */
static inline double sk_erfinv_f64(double x) {
    if (!(fabs(x) < 1.0))
        return fabs(x) == 1.0 ? copysign(INFINITY, x) : NAN;
    double y = sk_erfinv_f32((float)x);
    for (int i = 0; i < 2 && isfinite(y); i++)
        y -= (erf(y) - x) / (1.1283791670955126 * exp(-y * y));
    return y;
}

/* One draw: the distribution, the result's dtype, the key, and what the
 * distribution needs besides (sk_rng_init). */
typedef struct {
    int kind;
    sk_dtype t;
    uint32_t key[2];
    uint32_t half[2][2];   /* randint: the keys of split(key, 2) */
    double lo, hi;         /* truncated normal: the bounds; randint: minval, and span in hi */
} sk_rng;

/* The 32 bits JAX's partitionable random_bits gives counter c. */
static inline uint32_t sk_rng_bits32(const uint32_t key[2], uint32_t c) {
    uint32_t o[2];
    sk_threefry2x32(key[0], key[1], 0, c, o);
    return o[0] ^ o[1];
}

/* lo and hi: truncated normal's bounds, randint's [minval, maxval) (both
 * ignored by the other kinds). */
static inline void sk_rng_init(sk_rng *r, int kind, sk_dtype t, const uint32_t key[2], double lo, double hi) {
    r->kind = kind;
    r->t = t;
    r->key[0] = key[0];
    r->key[1] = key[1];
    r->lo = lo;
    r->hi = hi;
    if (kind == SK_RNG_RANDINT) {
        for (uint32_t i = 0; i < 2; i++)          /* split(key, 2), as JAX's randint starts */
            sk_threefry2x32(key[0], key[1], 0, i, r->half[i]);
        int32_t a = (int32_t)lo, b = (int32_t)hi;
        r->hi = b <= a ? 1.0 : (double)((uint32_t)b - (uint32_t)a);   /* span; 1 when empty: minval */
    }
}

/* A uniform [0, 1) value of dtype t from counter c: the top mantissa-width
 * bits of the random bits (64 of them for f64, the low 16 of the 32 for bf16
 * and f16), scaled: JAX's `bitcast(bits >> k | one) - 1`. */
static inline double sk_rng_uniform(const sk_rng *r, uint32_t c) {
    uint32_t o[2];
    sk_threefry2x32(r->key[0], r->key[1], 0, c, o);
    switch (r->t) {
    case SK_F64: return (double)((((uint64_t)o[0] << 32) | o[1]) >> 12) * 0x1p-52;
    case SK_BF16: return (double)(((o[0] ^ o[1]) & 0xffffu) >> 9) * 0x1p-7;
    case SK_F16: return (double)(((o[0] ^ o[1]) & 0xffffu) >> 6) * 0x1p-10;
    default: return (double)((o[0] ^ o[1]) >> 9) * 0x1p-23;
    }
}

/* Normal and truncated normal as JAX's: sqrt(2) erfinv(u), u uniform in
 * [a, b) (a = nextafter(-1, +inf), b = 1 for the normal; erf(lo / sqrt(2)),
 * erf(hi / sqrt(2)) for the truncated one, which is then clipped inside
 * (lo, hi)).  In double for f64, in float for the others (bf16 and f16 are
 * rounded from the f32 value). */
static inline double sk_rng_normal_f64(const sk_rng *r, double u) {
    const double s2 = 1.4142135623730951;
    if (r->kind == SK_RNG_NORMAL) {
        double a = nextafter(-1.0, 1.0), v = u * (1.0 - a) + a;
        return s2 * sk_erfinv_f64(v > a ? v : a);
    }
    double a = erf(r->lo / s2), b = erf(r->hi / s2), v = u * (b - a) + a;
    double y = s2 * sk_erfinv_f64(v > a ? v : a);
    double lo = nextafter(r->lo, INFINITY), hi = nextafter(r->hi, -INFINITY);
    return y < lo ? lo : y > hi ? hi : y;
}

static inline float sk_rng_normal_f32(const sk_rng *r, float u) {
    const float s2 = 1.41421356f;
    if (r->kind == SK_RNG_NORMAL) {
        float a = nextafterf(-1.0f, 1.0f), v = u * (1.0f - a) + a;
        return s2 * sk_erfinv_f32(v > a ? v : a);
    }
    float flo = (float)r->lo, fhi = (float)r->hi;
    float a = erff(flo / s2), b = erff(fhi / s2), v = u * (b - a) + a;
    float y = s2 * sk_erfinv_f32(v > a ? v : a);
    float lo = nextafterf(flo, INFINITY), hi = nextafterf(fhi, -INFINITY);
    return y < lo ? lo : y > hi ? hi : y;
}

/* randint in [minval, maxval): JAX's two draws (from the split keys)
 * combined modulo the span, in u32 arithmetic. */
static inline int32_t sk_rng_randint(const sk_rng *r, uint32_t c) {
    uint32_t span = (uint32_t)r->hi, hi = sk_rng_bits32(r->half[0], c), lo = sk_rng_bits32(r->half[1], c);
    uint32_t mult = 65536u % span;
    mult = mult * mult % span;
    uint32_t off = (hi % span * mult + lo % span) % span;
    return (int32_t)((uint32_t)(int32_t)r->lo + off);
}

/* Element with counter c, as a double (every kind's values are exact in
 * double; the caller stores it in dtype t). */
static inline double sk_rng_at(const sk_rng *r, uint32_t c) {
    uint32_t o[2];
    switch (r->kind) {
    case SK_RNG_WORD0: case SK_RNG_WORD1:
        sk_threefry2x32(r->key[0], r->key[1], 0, c, o);
        return o[r->kind == SK_RNG_WORD1];
    case SK_RNG_BITS: return sk_rng_bits32(r->key, c);
    case SK_RNG_UNIFORM: return sk_rng_uniform(r, c);
    case SK_RNG_NORMAL: case SK_RNG_TRUNCATED_NORMAL:
        return r->t == SK_F64 ? sk_rng_normal_f64(r, sk_rng_uniform(r, c))
                              : sk_rng_normal_f32(r, (float)sk_rng_uniform(r, c));
    case SK_RNG_RANDINT: return sk_rng_randint(r, c);
    default: return 0;
    }
}

#endif
