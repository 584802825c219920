#include "numerics.h"

#include "../../lib/shardc_elementwise.h"

#include <math.h>

/* Round to a binary format with `p` significand bits (the implicit one
 * included) and normal exponents emin..emax.  Scaling by a power of two is
 * exact, so nearbyint does the one rounding, to nearest even in the default
 * rounding mode; below emin the quantum stays fixed, which gives subnormals. */
static double round_binary(double x, int p, int emin, int emax) {
    if (x == 0 || !isfinite(x))
        return x;
    int e = ilogb(x);
    if (e < emin)
        e = emin;
    double quantum = ldexp(1.0, e - p + 1);
    double r = nearbyint(x / quantum) * quantum;
    double max_finite = ldexp(2.0 - ldexp(1.0, 1 - p), emax);
    return fabs(r) > max_finite ? copysign(INFINITY, x) : r;
}

double num_round(double x, int dtype) {
    switch (dtype) {
    case DT_F32: return (float)x;
    case DT_BF16: return round_binary(x, 8, -126, 127);
    case DT_F16: return round_binary(x, 11, -14, 15);
    case DT_I32: return sk_to_i32(x);
    case DT_BOOL: return x != 0;
    case DT_U32: return sk_to_u32(x);
    case DT_I64: return (double)sk_to_i64(x);   /* exact up to 2^53 only: docs/language.md */
    case DT_U8: return sk_to_u8(x);
    default: return x;
    }
}

double num_from_f16_bits(uint16_t h) {
    double sign = h >> 15 ? -1.0 : 1.0;
    int exp = h >> 10 & 31, frac = h & 1023;
    if (exp == 31)
        return frac ? NAN : sign * INFINITY;
    if (exp == 0)
        return sign * ldexp(frac, -24);
    return sign * ldexp(1024 + frac, exp - 25);
}

uint16_t num_to_f16_bits(double x) {
    x = num_round(x, DT_F16);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isnan(x))
        return 0x7e00;
    double a = fabs(x);
    if (isinf(a))
        return sign | 0x7c00;
    if (a < ldexp(1.0, -14))             /* subnormal or zero: a multiple of 2^-24 */
        return sign | (uint16_t)ldexp(a, 24);
    int e = ilogb(a);
    uint16_t frac = (uint16_t)((ldexp(a, -e) - 1) * 1024);
    return sign | (uint16_t)((e + 15) << 10) | frac;
}

int32_t num_wrap_i32(int64_t v) {
    uint32_t u = (uint32_t)v;            /* modulo 2^32, well defined for unsigned */
    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 2147483648u) - 2147483647 - 1;
}
