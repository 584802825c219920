/* Element types, reductions and strided copies of the runtime. */
#include "rt_internal.h"

#include <math.h>
#include <string.h>

size_t sc_dtype_size(sc_dtype t) {
    switch (t) {
    case SC_F64: return 8;
    case SC_BF16: case SC_F16: return 2;
    case SC_F32: case SC_I32: return 4;
    default: return 0;
    }
}

const char *sc_dtype_name(sc_dtype t) {
    static const char *const names[SC_DTYPE_COUNT] = {"f32", "f64", "bf16", "f16", "i32"};
    return (unsigned)t < SC_DTYPE_COUNT ? names[t] : "?";
}

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t sc_bf16_from_float(float x) {
    uint32_t u = float_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);            /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1);                     /* to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float sc_bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }

/* Round to nearest even; after F. Giesen's float_to_half_fast3_rtne. */
uint16_t sc_f16_from_float(float x) {
    uint32_t u = float_bits(x), sign = u & 0x80000000u, o;
    u ^= sign;
    if (u >= (127u + 16) << 23)                         /* >= 65536, inf or NaN */
        o = u > 0x7f800000u ? 0x7e00 | ((u >> 13) & 0x3ff) : 0x7c00;
    else if (u < 113u << 23) {                          /* below 2^-14: subnormal or 0 */
        const uint32_t magic = ((127u - 15) + (23 - 10) + 1) << 23;
        o = float_bits(bits_float(u) + bits_float(magic)) - magic;   /* the FPU rounds */
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = u >> 13;                                    /* a carry may give inf: right */
    }
    return (uint16_t)(o | (sign >> 16));
}

float sc_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0)
        return bits_float(float_bits((float)m * 0x1p-24f) | sign);
    if (e == 31)
        return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

/* ---- reductions ---- */

static double load(sc_dtype t, const void *p, int64_t i) {
    switch (t) {
    case SC_F32: return ((const float *)p)[i];
    case SC_F64: return ((const double *)p)[i];
    case SC_BF16: return sc_bf16_to_float(((const uint16_t *)p)[i]);
    case SC_F16: return sc_f16_to_float(((const uint16_t *)p)[i]);
    default: return ((const int32_t *)p)[i];
    }
}

static void store(sc_dtype t, void *p, int64_t i, double x) {
    switch (t) {
    case SC_F32: ((float *)p)[i] = (float)x; break;
    case SC_F64: ((double *)p)[i] = x; break;
    case SC_BF16: ((uint16_t *)p)[i] = sc_bf16_from_float((float)x); break;
    case SC_F16: ((uint16_t *)p)[i] = sc_f16_from_float((float)x); break;
    default: ((int32_t *)p)[i] = (int32_t)x; break;
    }
}

static double max_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double min_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }

enum { CHUNK = 256 };

static void reduce_i32(sc_reduce op, const void *const *srcs, int k, int64_t off, int32_t *dst,
                       int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const int32_t *s0 = srcs[0];
        uint32_t sum = 0;
        int32_t m = s0[off + i];
        for (int j = 0; j < k; j++) {
            int32_t z = ((const int32_t *)srcs[j])[off + i];
            if (op == SC_SUM)
                sum += (uint32_t)z;
            else
                m = op == SC_MAX ? (z > m ? z : m) : (z < m ? z : m);
        }
        if (op == SC_SUM)
            memcpy(&m, &sum, sizeof m);                 /* wraps, no implementation-defined cast */
        dst[i] = m;
    }
}

void rt_reduce(sc_dtype t, sc_reduce op, const void *const *srcs, int k, int64_t off, void *dst,
               int64_t n) {
    if (t == SC_I32) {
        reduce_i32(op, srcs, k, off, dst, n);
        return;
    }
    double acc[CHUNK];
    for (int64_t c = 0; c < n; c += CHUNK) {
        int64_t m = n - c < CHUNK ? n - c : CHUNK;
        for (int64_t i = 0; i < m; i++)
            acc[i] = op == SC_SUM ? 0.0 : load(t, srcs[0], off + c + i);
        for (int j = 0; j < k; j++) {
            if (op == SC_SUM)
                for (int64_t i = 0; i < m; i++)
                    acc[i] += load(t, srcs[j], off + c + i);
            else if (op == SC_MAX)
                for (int64_t i = 0; i < m; i++)
                    acc[i] = max_nan(acc[i], load(t, srcs[j], off + c + i));
            else
                for (int64_t i = 0; i < m; i++)
                    acc[i] = min_nan(acc[i], load(t, srcs[j], off + c + i));
        }
        for (int64_t i = 0; i < m; i++)
            store(t, dst, c + i, acc[i]);
    }
}

/* ---- strided copies ---- */

int64_t rt_strides(const sc_shape *s, int64_t *strides) {
    int64_t n = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        strides[d] = n;
        n *= s->dims[d];
    }
    return n;
}

void rt_copy_box(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides,
                 int rank, const int64_t *box, size_t elsize) {
    /* Merge dims that are contiguous in both arrays, so the inner loop is
     * one memcpy as long as possible. */
    int64_t b[SC_MAX_RANK], ds[SC_MAX_RANK], ss[SC_MAX_RANK];
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (box[d] == 0)
            return;
        if (box[d] == 1)
            continue;
        if (r > 0 && ds[r - 1] == dst_strides[d] * box[d] && ss[r - 1] == src_strides[d] * box[d]) {
            b[r - 1] *= box[d];
            ds[r - 1] = dst_strides[d];
            ss[r - 1] = src_strides[d];
            continue;
        }
        b[r] = box[d], ds[r] = dst_strides[d], ss[r] = src_strides[d];
        r++;
    }
    size_t run = elsize;
    if (r > 0 && ds[r - 1] == 1 && ss[r - 1] == 1)
        run *= (size_t)b[--r];
    int64_t idx[SC_MAX_RANK] = {0};
    char *d0 = dst;
    const char *s0 = src;
    for (;;) {
        int64_t od = 0, os = 0;
        for (int d = 0; d < r; d++)
            od += idx[d] * ds[d], os += idx[d] * ss[d];
        memcpy(d0 + od * (int64_t)elsize, s0 + os * (int64_t)elsize, run);
        int d = r - 1;
        while (d >= 0 && ++idx[d] == b[d])
            idx[d--] = 0;
        if (d < 0)
            return;
    }
}
