/* Shared by the runtime tests: TAP-like output ("ok N - ..." / "not ok N -
 * ...", then "# done: N tests") and element helpers that go through double. */
#ifndef TESTS_RUNTIME_TAP_H
#define TESTS_RUNTIME_TAP_H

#include "shardc_rt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int tap_no, tap_failed;

#if defined(__GNUC__)
#define TAP_UNUSED __attribute__((unused))
#else
#define TAP_UNUSED
#endif

static void check(int cond, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%sok %d - ", cond ? "" : "not ", ++tap_no);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    tap_failed += !cond;
}

static int tap_done(void) {
    printf("# done: %d tests\n", tap_no);
    return tap_failed != 0;
}

TAP_UNUSED static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Element i of a buffer of dtype t, as a double. */
TAP_UNUSED static double get(sc_dtype t, const void *p, int64_t i) {
    switch (t) {
    case SC_F32: return ((const float *)p)[i];
    case SC_F64: return ((const double *)p)[i];
    case SC_BF16: return sc_bf16_to_float(((const uint16_t *)p)[i]);
    case SC_F16: return sc_f16_to_float(((const uint16_t *)p)[i]);
    case SC_BOOL: return ((const uint8_t *)p)[i];
    case SC_U32: return ((const uint32_t *)p)[i];
    case SC_I64: return (double)((const int64_t *)p)[i];   /* exact to 2^53: compare i64 by bits (same) */
    case SC_U8: return ((const uint8_t *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

/* Stores x, rounded to t (floats through f32), at element i. */
TAP_UNUSED static void put(sc_dtype t, void *p, int64_t i, double x) {
    switch (t) {
    case SC_F32: ((float *)p)[i] = (float)x; break;
    case SC_F64: ((double *)p)[i] = x; break;
    case SC_BF16: ((uint16_t *)p)[i] = sc_bf16_from_float((float)x); break;
    case SC_F16: ((uint16_t *)p)[i] = sc_f16_from_float((float)x); break;
    case SC_BOOL: ((uint8_t *)p)[i] = x != 0; break;
    case SC_U32: ((uint32_t *)p)[i] = (uint32_t)(int64_t)x; break;
    case SC_I64: ((int64_t *)p)[i] = (int64_t)x; break;
    case SC_U8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)x; break;
    default: ((int32_t *)p)[i] = (int32_t)x; break;
    }
}

/* Elements equal: the same bits, or both NaN. */
TAP_UNUSED static int same(sc_dtype t, const void *a, const void *b, int64_t i) {
    double x = get(t, a, i), y = get(t, b, i);
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    size_t es = sc_dtype_size(t);
    return memcmp((const char *)a + i * (int64_t)es, (const char *)b + i * (int64_t)es, es) == 0;
}

#endif
