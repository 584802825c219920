/* random.c: sk_random, the draws of rng_ops.h over a block, in parallel
 * chunks (each element depends on its counter alone). */
#include "internal.h"
#include "rng_ops.h"

typedef struct {
    sk_rng r;
    const uint32_t *counter;
    void *out;
} Draw;

/* Threefry's bits and f32 uniforms have loops of their own, free of the
 * kind's switch, in blocks of 64 elements (a count the compiler knows, which
 * -O2's vectorizer needs, as lib/elementwise.c's loops): threefry is adds,
 * rotations and xors on each lane.  The other kinds go through sk_rng_at. */
static inline uint32_t bits_at(uint32_t k0, uint32_t k1, uint32_t c) {
    uint32_t o[2];
    sk_threefry2x32(k0, k1, 0, c, o);
    return o[0] ^ o[1];
}

static inline float uniform_at(uint32_t k0, uint32_t k1, uint32_t c) {
    return (float)(bits_at(k0, k1, c) >> 9) * 0x1p-23f;
}

/* Bits and f32 uniforms in loops of their own, free of the kind's switch
 * (restrict: no aliasing). */
static void bits_block(uint32_t k0, uint32_t k1, const uint32_t *restrict c, uint32_t *restrict out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = bits_at(k0, k1, c[i]);
}

static void uniform_block(uint32_t k0, uint32_t k1, const uint32_t *restrict c, float *restrict out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = uniform_at(k0, k1, c[i]);
}

static int draw_fast(const Draw *d, int64_t lo, int64_t hi) {
    const uint32_t k0 = d->r.key[0], k1 = d->r.key[1], *c = d->counter;
    if (d->r.kind == SK_RNG_BITS)
        bits_block(k0, k1, c + lo, (uint32_t *)d->out + lo, hi - lo);
    else if (d->r.kind == SK_RNG_UNIFORM && d->r.t == SK_F32)
        uniform_block(k0, k1, c + lo, (float *)d->out + lo, hi - lo);
    else
        return 0;
    return 1;
}

static void draw_range(void *ctx, int64_t lo, int64_t hi) {
    const Draw *d = ctx;
    if (draw_fast(d, lo, hi))
        return;
    switch (d->r.t) {
    case SK_U32:
        for (int64_t i = lo; i < hi; i++)
            ((uint32_t *)d->out)[i] = (uint32_t)sk_rng_at(&d->r, d->counter[i]);
        break;
    case SK_I32:
        for (int64_t i = lo; i < hi; i++)
            ((int32_t *)d->out)[i] = sk_rng_randint(&d->r, d->counter[i]);
        break;
    case SK_F64:
        for (int64_t i = lo; i < hi; i++)
            ((double *)d->out)[i] = sk_rng_at(&d->r, d->counter[i]);
        break;
    default:
        for (int64_t i = lo; i < hi; i++)
            sk_store_f(d->r.t, d->out, i, (float)sk_rng_at(&d->r, d->counter[i]));
        break;
    }
}

/* The dtype each kind draws: u32 words and bits, i32 randint, floats. */
static int kind_takes(sk_rng_kind kind, sk_dtype t) {
    if (kind <= SK_RNG_BITS)
        return t == SK_U32;
    if (kind == SK_RNG_RANDINT)
        return t == SK_I32;
    return t == SK_F32 || t == SK_F64 || t == SK_BF16 || t == SK_F16;
}

int sk_random(sk_ctx *ctx, sk_rng_kind kind, sk_dtype t, const uint32_t *key, int64_t n, const uint32_t *counter,
              const void *lo, const void *hi, void *out) {
    (void)ctx;
    int bounded = kind == SK_RNG_TRUNCATED_NORMAL || kind == SK_RNG_RANDINT;
    if ((unsigned)kind >= SK_RNG_KIND_COUNT || !sk_valid_dtype(t) || !kind_takes(kind, t) || n < 0 || !key ||
        (bounded && (!lo || !hi)))
        return SC_ERR;
    double a = 0, b = 0;
    if (kind == SK_RNG_RANDINT)
        a = *(const int32_t *)lo, b = *(const int32_t *)hi;
    else if (bounded)
        a = sk_load_d(t, lo, 0), b = sk_load_d(t, hi, 0);
    Draw d = {.counter = counter, .out = out};
    sk_rng_init(&d.r, kind, t, key, a, b);
    sk_parallel_ranges(n, n * 64, draw_range, &d);
    return 0;
}
