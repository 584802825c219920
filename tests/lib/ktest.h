/* Shared by the kernel library's tests (tests/lib/test_kernels.c and
 * test_elementwise.c): dtype helpers, inputs and index arithmetic, written
 * from docs/ir.md independently of lib/.  Inputs are small multiples of 1/2, so every sum and product is exact in
 * f32 and results can be compared bit for bit. */
#ifndef TESTS_LIB_KTEST_H
#define TESTS_LIB_KTEST_H

#include "../runtime/tap.h"
#include "shardc_lib.h"

#include <stdint.h>
#include <stdlib.h>

TAP_UNUSED static const sk_dtype ALL[] = {SK_F32, SK_F64, SK_BF16, SK_F16, SK_I32, SK_BOOL};
TAP_UNUSED static const sk_dtype NUMERIC[] = {SK_F32, SK_F64, SK_BF16, SK_F16, SK_I32};
static const char *NAME[] = {"f32", "f64", "bf16", "f16", "i32", "bool"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

TAP_UNUSED static size_t esize(sk_dtype t) { return t == SK_F64 ? 8 : t == SK_BOOL ? 1 : t >= SK_BF16 && t <= SK_F16 ? 2 : 4; }

TAP_UNUSED static double ld(sk_dtype t, const void *p, int64_t i) {
    return t == SK_BOOL ? ((const uint8_t *)p)[i] : get((sc_dtype)t, p, i);
}

/* x rounded to t: what the kernel must produce for the exact result x. */
TAP_UNUSED static void st(sk_dtype t, void *p, int64_t i, double x) {
    if (t == SK_BOOL)
        ((uint8_t *)p)[i] = x != 0;
    else if (t == SK_I32)
        ((int32_t *)p)[i] = (int32_t)(uint32_t)(int64_t)x;   /* wraps */
    else
        put((sc_dtype)t, p, i, x);
}

TAP_UNUSED static void *fill(sk_dtype t, int64_t n, unsigned seed) {
    void *p = malloc(n ? (size_t)n * esize(t) : 1);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        int v = (int)((seed >> 16) % 9) - 4;
        st(t, p, i, t == SK_BOOL ? (v > 0) : t == SK_I32 ? v : v * 0.5);
    }
    return p;
}

TAP_UNUSED static int equal(sk_dtype t, const void *a, const void *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double x = ld(t, a, i), y = ld(t, b, i);
        if (!(x == y || (isnan(x) && isnan(y)))) {
            printf("# element %lld: got %g, want %g\n", (long long)i, x, y);
            return 0;
        }
    }
    return 1;
}

TAP_UNUSED static int64_t elems(sc_shape s) {
    int64_t n = 1;
    for (int d = 0; d < s.rank; d++)
        n *= s.dims[d];
    return n;
}

/* Row-major offset of a multi-index. */
TAP_UNUSED static int64_t offset(sc_shape s, const int64_t *ix) {
    int64_t o = 0;
    for (int d = 0; d < s.rank; d++)
        o = o * s.dims[d] + ix[d];
    return o;
}

/* Multi-index of a row-major offset. */
TAP_UNUSED static void unravel(sc_shape s, int64_t o, int64_t *ix) {
    for (int d = s.rank - 1; d >= 0; d--) {
        ix[d] = s.dims[d] ? o % s.dims[d] : 0;
        o = s.dims[d] ? o / s.dims[d] : 0;
    }
}

#endif
