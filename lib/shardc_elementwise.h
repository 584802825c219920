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

/* Conversion to i32 truncates toward zero, saturates, and gives 0 for NaN
 * (XLA's convert; a C cast out of range is undefined). */
static inline int32_t sk_to_i32(double v) {
    return isnan(v) ? 0 : v <= INT32_MIN ? INT32_MIN : v >= INT32_MAX ? INT32_MAX : (int32_t)v;
}

#endif
