/* The random numbers of lib/rng_ops.h and sk_random (lib/random.c):
 * Threefry-2x32 against Random123's known-answer vectors (kat_vectors,
 * threefry2x32_20) and JAX's split of key 0 in its partitionable mode;
 * sk_random against the one-element draws on every dtype, in parallel
 * chunks; its refusals. */
#include "../runtime/tap.h"
#include "rng_ops.h"

#include <stdlib.h>

static void known_answers(void) {
    static const uint32_t kat[3][6] = {
        {0, 0, 0, 0, 0x6b200159u, 0x99ba4efeu},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
        {0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u, 0xc4923a9cu, 0x483df7a0u},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t o[2];
        sk_threefry2x32(kat[i][0], kat[i][1], kat[i][2], kat[i][3], o);
        check(o[0] == kat[i][4] && o[1] == kat[i][5], "threefry2x32 known answer %d: %08x %08x", i, o[0], o[1]);
    }
    /* jax.random.split(jax.random.key(0)) with jax_threefry_partitionable. */
    const uint32_t key[2] = {0, 0}, ctr[2] = {0, 1}, want[4] = {1797259609u, 2579123966u, 928981903u, 3453687069u};
    uint32_t w0[2], w1[2];
    sk_random(NULL, SK_RNG_WORD0, SK_U32, key, 2, ctr, NULL, NULL, w0);
    sk_random(NULL, SK_RNG_WORD1, SK_U32, key, 2, ctr, NULL, NULL, w1);
    check(w0[0] == want[0] && w1[0] == want[1] && w0[1] == want[2] && w1[1] == want[3], "split(key(0)) is JAX's");
}

/* Every kind and dtype: sk_random's block is the element draws, stored. */
static void blocks(void) {
    enum { N = 5000 };
    static const struct { sk_rng_kind kind; sk_dtype t; } runs[] = {
        {SK_RNG_BITS, SK_U32}, {SK_RNG_UNIFORM, SK_F32}, {SK_RNG_UNIFORM, SK_F64}, {SK_RNG_UNIFORM, SK_BF16},
        {SK_RNG_UNIFORM, SK_F16}, {SK_RNG_NORMAL, SK_F32}, {SK_RNG_NORMAL, SK_F64},
        {SK_RNG_TRUNCATED_NORMAL, SK_F32}, {SK_RNG_RANDINT, SK_I32},
    };
    uint32_t *ctr = malloc(N * sizeof *ctr);
    double *out = malloc(N * sizeof *out);
    for (int i = 0; i < N; i++)
        ctr[i] = (uint32_t)i * 2654435761u;
    const uint32_t key[2] = {7, 0xdeadbeefu};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        sk_dtype t = runs[r].t;
        float lo_f = -0.5f, hi_f = 1.5f;
        double lo_d = -0.5, hi_d = 1.5;
        int32_t lo_i = -10, hi_i = 7;
        const void *lo = t == SK_I32 ? (const void *)&lo_i : t == SK_F64 ? (const void *)&lo_d : &lo_f;
        const void *hi = t == SK_I32 ? (const void *)&hi_i : t == SK_F64 ? (const void *)&hi_d : &hi_f;
        check(sk_random(NULL, runs[r].kind, t, key, N, ctr, lo, hi, out) == 0, "sk_random kind %d dtype %d", runs[r].kind, t);
        sk_rng g;
        sk_rng_init(&g, runs[r].kind, t, key, runs[r].kind == SK_RNG_RANDINT ? lo_i : lo_d,
                    runs[r].kind == SK_RNG_RANDINT ? hi_i : hi_d);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            double want = sk_rng_at(&g, ctr[i]), got = t == SK_U32 ? ((uint32_t *)out)[i] : get((sc_dtype)t, out, i);
            if (t == SK_BF16)
                want = sc_bf16_to_float(sc_bf16_from_float((float)want));
            else if (t == SK_F16)
                want = sc_f16_to_float(sc_f16_from_float((float)want));
            else if (t == SK_F32)
                want = (float)want;
            bad += got != want || (runs[r].kind == SK_RNG_UNIFORM && !(got >= 0 && got < 1)) ||
                   (runs[r].kind == SK_RNG_RANDINT && !(got >= lo_i && got < hi_i)) ||
                   (runs[r].kind == SK_RNG_TRUNCATED_NORMAL && !(got > lo_d && got < hi_d));
        }
        check(!bad, "kind %d dtype %d: %d of %d elements wrong or out of range", runs[r].kind, t, bad, N);
    }
    free(ctr);
    free(out);
}

static void refusals(void) {
    const uint32_t key[2] = {1, 2}, ctr[1] = {0};
    float out[1], b = 0;
    check(sk_random(NULL, SK_RNG_UNIFORM, SK_I32, key, 1, ctr, NULL, NULL, out) == SC_ERR, "uniform refuses i32");
    check(sk_random(NULL, SK_RNG_BITS, SK_F32, key, 1, ctr, NULL, NULL, out) == SC_ERR, "bits refuse f32");
    check(sk_random(NULL, SK_RNG_TRUNCATED_NORMAL, SK_F32, key, 1, ctr, NULL, &b, out) == SC_ERR, "truncated needs lo");
    check(sk_random(NULL, SK_RNG_KIND_COUNT, SK_F32, key, 1, ctr, NULL, NULL, out) == SC_ERR, "unknown kind");
    check(sk_random(NULL, SK_RNG_UNIFORM, SK_F32, key, -1, ctr, NULL, NULL, out) == SC_ERR, "negative count");
}

int main(void) {
    known_answers();
    blocks();
    refusals();
    return tap_done();
}
