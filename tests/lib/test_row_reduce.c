/* sk_row_sum_f32, sk_row_max_f32, sk_row_min_f32 (lib/row_reduce.c):
 *
 * 1. Every form this CPU runs (portable, AVX2, AVX-512) gives the bits of a
 *    reference written here from the documented order (64 lanes, then
 *    (l . l+16) . (l+32 . l+48), then halving), on rows of every length up
 *    to 300 and some long ones, at unaligned starts, with values that use
 *    the whole mantissa so that a sum's bits depend on its order.
 * 2. The entry points give the same bits; sums are within rounding of the
 *    exact sum, max and min are the exact extremes.
 * 3. NaN anywhere (a whole block, the padded tail) makes every result NaN;
 *    infinities and -0 come out as they are. */
#include "../runtime/tap.h"
#include "shardc_lib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static float fold(sc_reduce op, float acc, float x) {
    return op == SC_SUM ? acc + x : op == SC_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

static float reference(sc_reduce op, const float *x, int64_t n) {
    float id = op == SC_SUM ? 0.0f : op == SC_MAX ? -INFINITY : INFINITY, lane[64], q[16];
    int nan = 0;
    for (int l = 0; l < 64; l++)
        lane[l] = id;
    for (int64_t j = 0; j < n; j++) {
        lane[j % 64] = fold(op, lane[j % 64], x[j]);
        nan |= isnan(x[j]);
    }
    for (int l = 0; l < 16; l++)
        q[l] = fold(op, fold(op, lane[l], lane[l + 16]), fold(op, lane[l + 32], lane[l + 48]));
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            q[l] = fold(op, q[l], q[l + w]);
    return op != SC_SUM && nan ? NAN : q[0];
}

static const char *OPS[] = {"sum", "max", "min"};
static float (*const ENTRY[])(const float *, int64_t) = {sk_row_sum_f32, sk_row_max_f32, sk_row_min_f32};

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Each form of this CPU and the entry point against the reference. */
static int forms_agree(sc_reduce op, const float *x, int64_t n, float *got) {
    static const sk_isa forms[] = {SK_ISA_BASELINE, SK_ISA_AVX2, SK_ISA_AVX512};
    float want = reference(op, x, n);
    *got = ENTRY[op](x, n);
    for (int f = 0; f < COUNT(forms); f++) {
        if (forms[f] > sk_cpu_isa())
            continue;
        float g = sk_row_reduce_f32_isa(forms[f], op, x, n);
        if (!same_bits(g, want)) {
            printf("# %s n=%lld form %s: %a, want %a\n", OPS[op], (long long)n, sk_isa_name(forms[f]), g, want);
            return 0;
        }
    }
    if (!same_bits(*got, want)) {
        printf("# %s n=%lld entry: %a, want %a\n", OPS[op], (long long)n, *got, want);
        return 0;
    }
    return 1;
}

static void lengths(void) {
    enum { MAX = 5000 };
    float *x = malloc((MAX + 3) * sizeof *x);
    unsigned seed = 7;
    for (int i = 0; i < MAX + 3; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * ldexpf(1.0f, (int)(seed % 7));
    }
    static const int64_t longer[] = {511, 512, 1000, 1024, 1025, 4096, 4097, MAX};
    for (int op = SC_SUM; op <= SC_MIN; op++) {
        int ok = 1, close = 1;
        for (int64_t k = 0; k < 301 + COUNT(longer) && ok; k++) {
            int64_t n = k <= 300 ? k : longer[k - 301];
            for (int at = 0; at < 3 && ok; at++) {
                float got;
                ok = forms_agree(op, x + at, n, &got);
                double exact = op == SC_SUM ? 0 : op == SC_MAX ? -INFINITY : INFINITY, mag = 0;
                for (int64_t j = 0; j < n; j++) {
                    double v = x[at + j];
                    exact = op == SC_SUM ? exact + v : op == SC_MAX ? fmax(exact, v) : fmin(exact, v);
                    mag += fabs(v);
                }
                if (op == SC_SUM ? fabs(got - exact) > (double)n * 0x1p-24 * mag : got != (float)exact) {
                    printf("# %s n=%lld: %.9g, exact %.9g\n", OPS[op], (long long)n, got, exact);
                    close = 0;
                }
            }
        }
        check(ok, "row %s: every form and the entry point give the documented order's bits, lengths 0-300 and 8 longer, 3 offsets", OPS[op]);
        check(close, "row %s: within rounding of the exact result", OPS[op]);
    }
    free(x);
}

static void special_values(void) {
    float x[200];
    for (int op = SC_SUM; op <= SC_MIN; op++) {
        int ok = 1;
        static const int at[] = {0, 37, 63, 64, 150, 199};   /* first block; a lane's last; the padded tail */
        for (int k = 0; k < COUNT(at) && ok; k++) {
            for (int i = 0; i < 200; i++)
                x[i] = (float)(i % 13) - 6.0f;
            x[at[k]] = NAN;
            float got;
            ok = forms_agree(op, x, 200, &got) && isnan(got) && forms_agree(op, x, at[k] + 1, &got) && isnan(got);
        }
        check(ok, "row %s: a NaN anywhere gives NaN", OPS[op]);
        for (int i = 0; i < 200; i++)
            x[i] = (float)(i % 5);
        x[90] = INFINITY;
        x[91] = -INFINITY;
        float got;
        ok = forms_agree(op, x, 200, &got) && (op == SC_SUM ? isnan(got) : op == SC_MAX ? got == INFINITY : got == -INFINITY);
        for (int i = 0; i < 200; i++)
            x[i] = -0.0f;
        ok = ok && forms_agree(op, x, 200, &got) && got == 0 && (op == SC_SUM ? !signbit(got) : signbit(got) != 0);
        check(ok, "row %s: infinities and -0", OPS[op]);
    }
}

int main(void) {
    lengths();
    special_values();
    return tap_done();
}
