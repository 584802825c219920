/* random.c: sk_random, the draws of rng_ops.h over a block, in parallel
 * chunks (each element depends on its counter alone). */
#include "internal.h"
#include "rng_ops.h"

typedef struct {
    sk_rng r;
    const uint32_t *counter;
    void *out;
} Draw;

static void draw_range(void *ctx, int64_t lo, int64_t hi) {
    const Draw *d = ctx;
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

int sk_random(sk_rng_kind kind, sk_dtype t, const uint32_t *key, int64_t n, const uint32_t *counter, const void *lo,
              const void *hi, void *out) {
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
