/* Tests of the kernel library's data movement and elementwise kernels
 * (lib/layout.c, lib/elementwise.c; docs/kernels.md) for every dtype,
 * against reference loops written from docs/ir.md.
 * TAP-like output: "ok N - ...", then "# done: N tests". */
#include "ktest.h"

#include <string.h>

/* ---- structure ---- */

static void test_layout(void) {
    sc_shape s = SC_SHAPE(2, 3, 4);
    for (int ti = 0; ti < COUNT(ALL); ti++) {
        sk_dtype t = ALL[ti];
        void *x = fill(t, 24, 11 + ti);
        char got[512], want[512];
        int64_t ix[8];
        const char *n = NAME[t];

        const int perm[3] = {2, 0, 1};   /* result dim i is operand dim perm[i] */
        sc_shape ps = SC_SHAPE(4, 2, 3);
        for (int64_t o = 0; o < 24; o++) {
            int64_t oi[3];
            unravel(ps, o, oi);
            for (int i = 0; i < 3; i++) ix[perm[i]] = oi[i];
            st(t, want, o, ld(t, x, offset(s, ix)));
        }
        check(sk_transpose(NULL, t, s, x, perm, got) == 0 && equal(t, got, want, 24), "transpose {2,0,1} %s", n);

        /* broadcast [3] -> [2,3,4] along result dim 1, and a scalar. */
        for (int64_t o = 0; o < 24; o++) {
            unravel(s, o, ix);
            st(t, want, o, ld(t, x, ix[1]));
        }
        check(sk_broadcast(NULL, t, SC_SHAPE(3), x, s, (int[]){1}, got) == 0 && equal(t, got, want, 24),
              "broadcast [3] -> [2,3,4] dims {1} %s", n);
        for (int64_t o = 0; o < 4; o++) st(t, want, o, ld(t, x, 0));
        check(sk_broadcast(NULL, t, (sc_shape){0, {0}}, x, SC_SHAPE(2, 2), NULL, got) == 0 && equal(t, got, want, 4),
              "broadcast scalar %s", n);

        /* slice [1:2, 0:3, 1:3], and dynamic slices with clamped offsets. */
        int64_t lo[3] = {1, 0, 1}, hi[3] = {2, 3, 3}, k = 0;
        for (ix[0] = lo[0]; ix[0] < hi[0]; ix[0]++)
            for (ix[1] = lo[1]; ix[1] < hi[1]; ix[1]++)
                for (ix[2] = lo[2]; ix[2] < hi[2]; ix[2]++)
                    st(t, want, k++, ld(t, x, offset(s, ix)));
        check(sk_slice(NULL, t, s, x, lo, hi, got) == 0 && equal(t, got, want, k), "slice %s", n);
        check(sk_dynamic_slice(NULL, t, s, x, (int32_t[]){1, 0, 1}, (int64_t[]){1, 3, 2}, got) == 0 &&
                  equal(t, got, want, k), "dynamic-slice in range %s", n);
        check(sk_dynamic_slice(NULL, t, s, x, (int32_t[]){7, -5, 1}, (int64_t[]){1, 3, 2}, got) == 0 &&
                  equal(t, got, want, k), "dynamic-slice clamps offsets (7 -> 1, -5 -> 0) %s", n);
        check(sk_dynamic_slice(NULL, t, s, x, (int32_t[]){0, 0, 2147483647}, (int64_t[]){1, 3, 2}, got) == 0 &&
                  ld(t, got, 1) == ld(t, x, 3), "dynamic-slice clamps INT32_MAX %s", n);

        /* dynamic-update-slice: a [1,2,4] update at {1, 5 -> 1, -3 -> 0}, into
         * another array and in place (out == x moves only the update). */
        void *upd = fill(t, 8, 7);
        memcpy(want, x, 24 * sk_dtype_size(t));
        for (int64_t i = 0; i < 8; i++) {
            unravel(SC_SHAPE(1, 2, 4), i, ix);
            ix[0] += 1, ix[1] += 1;
            st(t, want, offset(s, ix), ld(t, upd, i));
        }
        check(sk_dynamic_update_slice(NULL, t, s, x, SC_SHAPE(1, 2, 4), upd, (int32_t[]){1, 5, -3}, got) == 0 &&
                  equal(t, got, want, 24), "dynamic-update-slice clamps offsets %s", n);
        memcpy(got, x, 24 * sk_dtype_size(t));
        check(sk_dynamic_update_slice(NULL, t, s, got, SC_SHAPE(1, 2, 4), upd, (int32_t[]){1, 5, -3}, got) == 0 &&
                  equal(t, got, want, 24), "dynamic-update-slice in place %s", n);
        free(upd);

        /* concatenate [2,3,4], [2,1,4] and [2,2,4] along dim 1. */
        void *y = fill(t, 8, 5), *z = fill(t, 16, 6);
        sc_shape cs[3] = {s, SC_SHAPE(2, 1, 4), SC_SHAPE(2, 2, 4)}, os = SC_SHAPE(2, 6, 4);
        for (int64_t o = 0; o < 48; o++) {
            unravel(os, o, ix);
            const void *src = ix[1] < 3 ? x : ix[1] < 4 ? y : z;
            int which = ix[1] < 3 ? 0 : ix[1] < 4 ? 1 : 2;
            ix[1] -= which == 0 ? 0 : which == 1 ? 3 : 4;
            st(t, want, o, ld(t, src, offset(cs[which], ix)));
        }
        check(sk_concat(NULL, t, 3, cs, (const void *const[]){x, y, z}, 1, got) == 0 && equal(t, got, want, 48),
              "concatenate along dim 1 %s", n);
        free(y);
        free(z);

        /* roll: element i moves to (i + shift) mod n. */
        int ok = 1;
        for (int dim = 0; dim < 3; dim++)
            for (int64_t shift = 0; shift < s.dims[dim]; shift++) {
                for (int64_t i = 0; i < 24; i++) {
                    unravel(s, i, ix);
                    ix[dim] = (ix[dim] + shift) % s.dims[dim];
                    st(t, want, offset(s, ix), ld(t, x, i));
                }
                ok = ok && sk_roll(NULL, t, s, x, shift, dim, got) == 0 && equal(t, got, want, 24);
            }
        check(ok, "roll every dim and shift %s", n);

        /* gather along dim 1 with [2,2] indices, clamped. */
        int32_t idx[4] = {2, -1, 0, 9};
        sc_shape gs = SC_SHAPE(2, 2, 2, 4);
        for (int64_t o = 0; o < 32; o++) {
            int64_t g[4];
            unravel(gs, o, g);
            int64_t r = idx[g[0] * 2 + g[1]];
            r = r < 0 ? 0 : r > 2 ? 2 : r;
            int64_t ti3[3] = {g[2], r, g[3]};
            st(t, want, o, ld(t, x, offset(s, ti3)));
        }
        check(sk_gather(NULL, t, s, x, 1, SK_CLAMP, SC_SHAPE(2, 2), idx, 0, NULL, got) == 0 && equal(t, got, want, 32),
              "gather dim 1, indices clamped %s", n);
        for (int64_t o = 0; o < 32; o++) {       /* fill mode: -1 and 9 read zeros */
            int64_t g[4];
            unravel(gs, o, g);
            int64_t r = idx[g[0] * 2 + g[1]], ti3[3] = {g[2], r, g[3]};
            st(t, want, o, r < 0 || r > 2 ? 0.0 : ld(t, x, offset(s, ti3)));
        }
        check(sk_gather(NULL, t, s, x, 1, SK_FILL, SC_SHAPE(2, 2), idx, 0, NULL, got) == 0 && equal(t, got, want, 32),
              "gather dim 1, indices outside filled with zeros %s", n);

        /* Batched: table dim 0 read at the index's dim 1 (after the gathered
         * dim, a contiguous tail), then at its dim 0 with the gathered dim
         * last (a kept dim before it). */
        int32_t bidx[10] = {2, 0, -3, 1, 1, 5, 0, 2, 1, 1};
        for (int64_t o = 0; o < 40; o++) {
            int64_t g[3];
            unravel(SC_SHAPE(5, 2, 4), o, g);          /* result[k, b, e] = x[b, idx[k, b], e] */
            int64_t r = bidx[g[0] * 2 + g[1]];
            int64_t ti3[3] = {g[1], r < 0 ? 0 : r > 2 ? 2 : r, g[2]};
            st(t, want, o, ld(t, x, offset(s, ti3)));
        }
        check(sk_gather(NULL, t, s, x, 1, SK_CLAMP, SC_SHAPE(5, 2), bidx, 1, (int[]){0, 1}, got) == 0 && equal(t, got, want, 40),
              "gather dim 1, batch dims {0} and {1} %s", n);
        for (int64_t o = 0; o < 30; o++) {
            int64_t g[3];
            unravel(SC_SHAPE(2, 5, 3), o, g);          /* result[b, k, c] = x[b, c, idx[b, k]] */
            int64_t r = bidx[g[0] * 5 + g[1]];
            int64_t ti3[3] = {g[0], g[2], r < 0 ? 0 : r > 3 ? 3 : r};
            st(t, want, o, ld(t, x, offset(s, ti3)));
        }
        check(sk_gather(NULL, t, s, x, 2, SK_CLAMP, SC_SHAPE(2, 5), bidx, 1, (int[]){0, 0}, got) == 0 && equal(t, got, want, 30),
              "gather dim 2, batch dims {0} and {0} %s", n);

        if (t != SK_BOOL) {
            /* scatter-add into dims 2 and 0 of x[2,3,4] by two i32[5]: updates
             * [5, 3]; positions 1 and 4 are out of range (-1, then 2 in dim 0)
             * and dropped; positions 0 and 3 are the same place and add up. */
            int32_t pa[5] = {3, -1, 0, 3, 1}, pb[5] = {1, 0, 0, 1, 2};
            void *u = fill(t, 15, 7 + ti);
            double acc[24];
            for (int64_t o = 0; o < 24; o++)
                acc[o] = ld(t, x, o);
            for (int i = 0; i < 5; i++)
                for (int c = 0; c < 3 && pa[i] >= 0 && pa[i] < 4 && pb[i] < 2; c++)
                    acc[offset(s, (int64_t[]){pb[i], c, pa[i]})] += ld(t, u, i * 3 + c);
            for (int64_t o = 0; o < 24; o++)
                st(t, want, o, acc[o]);
            check(sk_scatter_add(NULL, t, s, x, 2, (int[]){2, 0}, SC_SHAPE(5), (const int32_t *const[]){pa, pb}, u, got) == 0 &&
                      equal(t, got, want, 24),
                  "scatter_add into dims {2,0}: out of range dropped, duplicates added %s", n);
            free(u);
            /* Into the leading dims, {1,0} and {0}: each position's updates
             * are one run of x (f32 adds them as vectors), in place too. */
            int32_t pc[5] = {2, 0, 2, 3, 1};
            u = fill(t, 20, 9 + ti);
            for (int64_t o = 0; o < 24; o++)
                acc[o] = ld(t, x, o);
            for (int i = 0; i < 5; i++)
                for (int c = 0; c < 4 && pc[i] < 3 && pb[i] < 2; c++)
                    acc[offset(s, (int64_t[]){pb[i], pc[i], c})] += ld(t, u, i * 4 + c);
            for (int64_t o = 0; o < 24; o++)
                st(t, want, o, acc[o]);
            check(sk_scatter_add(NULL, t, s, x, 2, (int[]){1, 0}, SC_SHAPE(5), (const int32_t *const[]){pc, pb}, u, got) == 0 &&
                      equal(t, got, want, 24),
                  "scatter_add into dims {1,0}, rows of the trailing dim %s", n);
            free(u);
            size_t bytes = 24 * (size_t)sk_dtype_size(t);
            void *x2 = malloc(bytes);
            memcpy(x2, x, bytes);
            u = fill(t, 60, 11 + ti);
            for (int64_t o = 0; o < 24; o++)
                acc[o] = ld(t, x, o);
            for (int i = 0; i < 5; i++)
                for (int c = 0; c < 12 && pb[i] < 2; c++)
                    acc[pb[i] * 12 + c] += ld(t, u, i * 12 + c);
            for (int64_t o = 0; o < 24; o++)
                st(t, want, o, acc[o]);
            check(sk_scatter_add(NULL, t, s, x2, 1, (int[]){0}, SC_SHAPE(5), (const int32_t *const[]){pb}, u, x2) == 0 &&
                      equal(t, x2, want, 24),
                  "scatter_add into dim 0 in place (out == x) %s", n);
            free(u);
            free(x2);
        }

        for (int64_t o = 0; o < 24; o++) {
            unravel(s, o, ix);
            st(t, want, o, (double)ix[2]);
        }
        check(sk_iota(NULL, t, s, 2, got) == 0 && equal(t, got, want, 24), "iota dim 2 %s", n);
        free(x);
    }
    check(sk_transpose(NULL, SK_F32, SC_SHAPE(2, 2), NULL, (int[]){0, 0}, NULL) == SC_ERR, "transpose: not a permutation");
    check(sk_slice(NULL, SK_F32, SC_SHAPE(2), NULL, (int64_t[]){1}, (int64_t[]){3}, NULL) == SC_ERR, "slice: out of bounds");
    check(sk_gather(NULL, SK_F32, SC_SHAPE(2, 3), NULL, 1, SK_CLAMP, SC_SHAPE(3), NULL, 1, (int[]){0, 0}, NULL) == SC_ERR,
          "gather: batch dims of different extents");
    check(sk_gather(NULL, SK_F32, SC_SHAPE(2, 2), NULL, 1, SK_CLAMP, SC_SHAPE(2), NULL, 1, (int[]){1, 0}, NULL) == SC_ERR,
          "gather: the gathered dim as a batch dim");
    check(sk_scatter_add(NULL, SK_F32, SC_SHAPE(2, 2), NULL, 2, (int[]){1, 1}, SC_SHAPE(1), NULL, NULL, NULL) == SC_ERR,
          "scatter_add: one dim scattered twice");
    check(sk_scatter_add(NULL, SK_BOOL, SC_SHAPE(2), NULL, 1, (int[]){0}, SC_SHAPE(1), NULL, NULL, NULL) == SC_ERR,
          "scatter_add: bool");
}

/* ---- elementwise ---- */

static double floor_rem(double a, double b) {
    double r = a - b * floor(a / b);
    return r == 0 ? copysign(0, b) : r;
}

/* i64 and u8: convert and compare are exact past 2^53 (no double in the
 * way); between integers the value is kept modulo the target's width, as
 * NumPy's astype; floats truncate toward zero. */
static void test_wide_ints(void) {
    const int64_t p53 = (int64_t)1 << 53;
    int64_t a[6] = {p53 + 1, -p53 - 3, INT64_MAX, INT64_MIN, 0x123456789abLL, -1};
    int64_t b[6] = {p53, -p53 - 3, INT64_MAX - 1, INT64_MIN, 0x123456789abLL, 255};
    uint8_t eq[6], gt[6];
    sk_compare(NULL, SK_EQ, SK_I64, 6, a, b, eq);
    sk_compare(NULL, SK_GT, SK_I64, 6, a, b, gt);
    check(!eq[0] && eq[1] && !eq[2] && eq[3] && eq[4] && !eq[5] && gt[0] && !gt[1] && gt[2] && !gt[3] && !gt[5],
          "compare i64 is exact past 2^53 (2^53 + 1 > 2^53, INT64_MAX > INT64_MAX - 1)");
    int32_t lo[6];
    sk_convert(NULL, SK_I64, SK_I32, 6, a, lo);
    check(lo[0] == 1 && lo[1] == -3 && lo[2] == -1 && lo[3] == 0 && lo[4] == 0x456789ab && lo[5] == -1,
          "convert i64 -> i32 keeps the low 32 bits");
    uint8_t u[6];
    sk_convert(NULL, SK_I64, SK_U8, 6, a, u);
    check(u[0] == 1 && u[1] == 253 && u[2] == 255 && u[3] == 0 && u[4] == 0xab && u[5] == 255,
          "convert i64 -> u8 wraps modulo 256");
    uint32_t w[6];
    sk_convert(NULL, SK_I64, SK_U32, 6, a, w);
    check(w[0] == 1 && w[1] == 0xfffffffdu && w[4] == 0x456789abu, "convert i64 -> u32 wraps modulo 2^32");
    int64_t back[6];
    sk_convert(NULL, SK_I32, SK_I64, 6, lo, back);
    check(back[1] == -3 && back[2] == -1 && back[4] == 0x456789ab, "convert i32 -> i64 keeps the value");
    sk_convert(NULL, SK_U8, SK_I64, 6, u, back);
    check(back[1] == 253 && back[2] == 255 && back[4] == 0xab, "convert u8 -> i64 keeps the value");
    double d[6];
    float f[6];
    sk_convert(NULL, SK_I64, SK_F64, 6, a, d);
    sk_convert(NULL, SK_I64, SK_F32, 6, a, f);
    check(d[0] == (double)a[0] && d[2] == 0x1p63 && d[3] == -0x1p63 && f[4] == (float)a[4] && f[5] == -1.0f,
          "convert i64 -> f64, f32 rounds once");
    double fd[6] = {2.9, -2.9, 1e19, -1e19, NAN, 0x1p60};
    sk_convert(NULL, SK_F64, SK_I64, 6, fd, back);
    check(back[0] == 2 && back[1] == -2 && back[2] == INT64_MAX && back[3] == INT64_MIN && back[4] == 0 &&
              back[5] == (int64_t)1 << 60,
          "convert f64 -> i64 truncates, saturates, NaN gives 0");
    float ff[6] = {2.9f, -1.5f, 300.7f, NAN, 255.9f, -256.0f};
    sk_convert(NULL, SK_F32, SK_U8, 6, ff, u);
    check(u[0] == 2 && u[1] == 255 && u[2] == 44 && u[3] == 0 && u[4] == 255 && u[5] == 0,
          "convert f32 -> u8 truncates toward zero, then wraps modulo 256");
    uint8_t pick[6] = {1, 0, 1, 0, 1, 0};
    int64_t sel[6];
    check(sk_select(NULL, SK_I64, 6, pick, a, b, sel) == 0 && sel[0] == p53 + 1 && sel[1] == b[1] && sel[2] == INT64_MAX,
          "select i64 moves all 64 bits");
}

/* f32 <-> bf16 over 200 elements (three vectorized blocks of 64 and a
 * tail): ties to even both ways, values just off a tie, NaN quiet with its
 * sign and payload's top bits, overflow to inf, -0, subnormals; against
 * the rounding written from its definition, bit for bit, and back. */
static uint16_t bf16_by_definition(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    uint32_t hi = u >> 16, rest = u & 0xffffu;
    return (uint16_t)(rest > 0x8000u || (rest == 0x8000u && (hi & 1)) ? hi + 1 : hi);
}

static void test_bf16_casts(void) {
    enum { N = 200 };
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu, 0x7fc00000u,
                                       0xffa12345u, 0x7f7fffffu, 0xff7fffffu, 0x80000000u, 0x00012345u,
                                       0x7f800000u, 0xff800000u, 0x807f8000u};
    uint32_t bits[N];
    for (int i = 0; i < N; i++)
        bits[i] = i % 3 == 0 ? special[(i / 3) % COUNT(special)] : 0x3f800000u + (uint32_t)i * 0x9e3779b1u % 0x00ffffffu;
    float f[N], back[N];
    uint16_t b[N];
    memcpy(f, bits, sizeof f);
    int ok = sk_convert(NULL, SK_F32, SK_BF16, N, f, b) == 0 && sk_convert(NULL, SK_BF16, SK_F32, N, b, back) == 0;
    for (int i = 0; ok && i < N; i++) {
        uint32_t wb = (uint32_t)bf16_by_definition(bits[i]) << 16, gb;
        memcpy(&gb, &back[i], sizeof gb);
        if (b[i] != bf16_by_definition(bits[i]) || gb != wb) {
            printf("# element %d (0x%08x): bf16 0x%04x, want 0x%04x; back 0x%08x\n", i, bits[i], b[i],
                   bf16_by_definition(bits[i]), gb);
            ok = 0;
        }
    }
    check(ok, "convert f32 -> bf16 -> f32, 200 elements: nearest, ties to even, NaN quiet, overflow to inf");
}

/* Arithmetic on i64, u8 and u32 wraps modulo 2^bits (exact past 2^53);
 * divide and remainder floor (unsigned ones truncate), x / 0 is all ones and
 * x % 0 = x; negating an unsigned value wraps, and its abs is itself. */
static void test_wide_int_arith(void) {
    const int64_t p53 = (int64_t)1 << 53;
    int64_t a[6] = {p53 + 1, INT64_MAX, INT64_MIN, -7, 7, 5}, b[6] = {p53 + 3, 1, -1, 2, -2, 0}, r[6];
    check(sk_binary(NULL, SK_ADD, SK_I64, 6, a, b, r) == 0 && r[0] == 2 * p53 + 4 && r[1] == INT64_MIN && r[2] == INT64_MAX,
          "add i64 is exact past 2^53 and wraps");
    sk_binary(NULL, SK_MUL, SK_I64, 6, a, b, r);
    check(r[0] == (int64_t)((uint64_t)(p53 + 1) * (uint64_t)(p53 + 3)) && r[2] == INT64_MIN && r[3] == -14,
          "multiply i64 wraps modulo 2^64");
    sk_binary(NULL, SK_DIV, SK_I64, 6, a, b, r);
    check(r[0] == 0 && r[1] == INT64_MAX && r[2] == INT64_MIN && r[3] == -4 && r[4] == -4 && r[5] == -1,
          "divide i64 floors; INT64_MIN / -1 wraps; x / 0 = -1");
    sk_binary(NULL, SK_REM, SK_I64, 6, a, b, r);
    check(r[0] == p53 + 1 && r[2] == 0 && r[3] == 1 && r[4] == -1 && r[5] == 5,
          "remainder i64 has the divisor's sign; x %% 0 = x");
    sk_unary(NULL, SK_NEGATE, SK_I64, 6, a, r);
    check(r[0] == -p53 - 1 && r[2] == INT64_MIN, "negate i64 wraps");
    sk_binary(NULL, SK_MAX, SK_I64, 6, a, b, r);
    check(r[0] == p53 + 3 && r[1] == INT64_MAX && r[2] == -1, "maximum i64 is exact past 2^53");
    uint8_t p[4] = {200, 3, 0, 255}, q[4] = {100, 5, 7, 0}, o[4];
    sk_binary(NULL, SK_ADD, SK_U8, 4, p, q, o);
    check(o[0] == 44 && o[1] == 8 && o[3] == 255, "add u8 wraps modulo 256 (200 + 100 = 44)");
    sk_binary(NULL, SK_SUB, SK_U8, 4, p, q, o);
    check(o[1] == 254 && o[2] == 249, "subtract u8 wraps");
    sk_binary(NULL, SK_MUL, SK_U8, 4, p, q, o);
    check(o[0] == (uint8_t)20000 && o[1] == 15, "multiply u8 wraps");
    sk_binary(NULL, SK_DIV, SK_U8, 4, p, q, o);
    check(o[0] == 2 && o[1] == 0 && o[3] == 255, "divide u8 truncates; x / 0 is all ones");
    sk_binary(NULL, SK_REM, SK_U8, 4, p, q, o);
    check(o[0] == 0 && o[1] == 3 && o[3] == 255, "remainder u8; x %% 0 = x");
    sk_unary(NULL, SK_NEGATE, SK_U8, 4, p, o);
    check(o[0] == 56 && o[2] == 0 && o[3] == 1, "negate u8 wraps");
    sk_unary(NULL, SK_ABS, SK_U8, 4, p, o);
    check(o[0] == 200 && o[3] == 255, "abs u8 is the value");
    uint32_t u[3] = {0x80000005u, 7, 0}, v[3] = {3, 0xffffffffu, 9}, w[3];
    sk_binary(NULL, SK_MUL, SK_U32, 3, u, v, w);
    check(w[0] == 0x8000000fu && w[1] == 0xfffffff9u, "multiply u32 wraps modulo 2^32");
    sk_binary(NULL, SK_SUB, SK_U32, 3, u, v, w);
    check(w[2] == 0xfffffff7u && w[1] == 8, "subtract u32 wraps");
    sk_binary(NULL, SK_MIN, SK_U32, 3, u, v, w);
    check(w[0] == 3 && w[1] == 7 && w[2] == 0, "minimum u32 compares unsigned");
    /* Reductions and cumsum in the dtype: sums wrap, max and min exact. */
    int64_t big[4] = {INT64_MAX, 2, p53 + 1, -p53}, rs[2];
    check(sk_reduce(NULL, SK_I64, SC_SHAPE(2, 2), big, 1, (int[]){0}, SC_SUM, rs) == 0 && rs[0] == INT64_MIN + p53 &&
              rs[1] == 2 - p53,
          "sum i64 wraps and is exact past 2^53");
    check(sk_reduce(NULL, SK_I64, SC_SHAPE(4), big, 1, (int[]){0}, SC_MIN, rs) == 0 && rs[0] == -p53, "min i64");
    uint8_t bytes[3] = {200, 100, 7}, bs[3];
    check(sk_reduce(NULL, SK_U8, SC_SHAPE(3), bytes, 1, (int[]){0}, SC_SUM, bs) == 0 && bs[0] == 51, "sum u8 wraps (307 = 51)");
    check(sk_reduce(NULL, SK_U8, SC_SHAPE(3), bytes, 1, (int[]){0}, SC_MAX, bs) == 0 && bs[0] == 200, "max u8");
    check(sk_cumsum(NULL, SK_U8, SC_SHAPE(3), bytes, 0, bs) == 0 && bs[0] == 200 && bs[1] == 44 && bs[2] == 51,
          "cumsum u8 wraps");
    int64_t cs[4];
    check(sk_cumsum(NULL, SK_I64, SC_SHAPE(4), big, 0, cs) == 0 && cs[1] == INT64_MIN + 1 && cs[3] == INT64_MIN + 2,
          "cumsum i64 wraps");
    uint32_t us[3] = {0xfffffff0u, 0x20u, 5}, uo[1];
    check(sk_reduce(NULL, SK_U32, SC_SHAPE(3), us, 1, (int[]){0}, SC_SUM, uo) == 0 && uo[0] == 0x15u, "sum u32 wraps");
    check(sk_reduce(NULL, SK_U32, SC_SHAPE(3), us, 1, (int[]){0}, SC_MIN, uo) == 0 && uo[0] == 5, "min u32 compares unsigned");
    check(sk_unary(NULL, SK_EXP, SK_I64, 3, a, r) == SC_ERR && sk_binary(NULL, SK_POW, SK_U8, 4, p, q, o) == SC_ERR &&
              sk_unary(NULL, SK_SQRT, SK_U32, 3, u, w) == SC_ERR && sk_binary(NULL, SK_ADD, SK_BOOL, 4, p, q, o) == SC_ERR,
          "float-only ops on integers, arithmetic on bool, are errors");
}

static void test_elementwise(void) {
    enum { N = 150 };   /* two of the kernels' blocks of 64 and a tail */
    static const char *un_name[] = {"copy", "negate", "abs", "square", "relu", "exp", "log", "tanh",
                                    "sqrt", "rsqrt", "sine", "cosine", "gelu", "logistic"};
    static const char *bin_name[] = {"add", "subtract", "multiply", "divide", "remainder", "maximum",
                                     "minimum", "power"};
    for (int ti = 0; ti < COUNT(NUMERIC); ti++) {
        sk_dtype t = NUMERIC[ti];
        int fl = t != SK_I32;
        void *x = fill(t, N, 21 + ti), *y = fill(t, N, 33 + ti);
        char got[N * 8], want[N * 8];
        /* f32 math against double: a few ulps; bf16/f16: one rounding step. */
        double tol = t == SK_BF16 ? 1.0 / 128 : t == SK_F16 ? 1.0 / 1024 : t == SK_F32 ? 1e-6 : 1e-15;
        for (int op = SK_COPY; op <= SK_LOGISTIC; op++) {
            if (!fl && op > SK_RELU) {
                check(sk_unary(NULL, (sk_unary_op)op, t, N, x, got) == SC_ERR, "%s %s is an error", un_name[op], NAME[t]);
                continue;
            }
            int ok = sk_unary(NULL, (sk_unary_op)op, t, N, x, got) == 0;
            for (int i = 0; i < N && ok; i++) {
                double v = ld(t, x, i), r;
                switch (op) {
                case SK_COPY: r = v; break;
                case SK_NEGATE: r = -v; break;
                case SK_ABS: r = fabs(v); break;
                case SK_SQUARE: r = v * v; break;
                case SK_RELU: r = v > 0 ? v : 0; break;
                case SK_EXP: r = exp(v); break;
                case SK_LOG: r = log(v); break;
                case SK_TANH: r = tanh(v); break;
                case SK_SQRT: r = sqrt(v); break;
                case SK_RSQRT: r = 1 / sqrt(v); break;
                case SK_SIN: r = sin(v); break;
                case SK_COS: r = cos(v); break;
                case SK_GELU: r = 0.5 * v * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v))); break;
                default: r = 1 / (1 + exp(-v)); break;
                }
                st(t, want, i, r);
                double g = ld(t, got, i), w = ld(t, want, i);
                ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= tol * fabs(w) + 1e-30;
                if (!ok) printf("# %s(%g): got %.9g, want %.9g\n", un_name[op], v, g, w);
            }
            check(ok, "%s %s", un_name[op], NAME[t]);
        }
        for (int op = SK_ADD; op <= SK_POW; op++) {
            if (!fl && op == SK_POW) {
                check(sk_binary(NULL, SK_POW, t, N, x, y, got) == SC_ERR, "power i32 is an error");
                continue;
            }
            int ok = sk_binary(NULL, (sk_binary_op)op, t, N, x, y, got) == 0;
            for (int i = 0; i < N && ok; i++) {
                double a = ld(t, x, i), b = ld(t, y, i), r;
                switch (op) {
                case SK_ADD: r = a + b; break;
                case SK_SUB: r = a - b; break;
                case SK_MUL: r = a * b; break;
                case SK_DIV: r = !fl ? (b == 0 ? -1 : floor(a / b)) : a / b; break;
                case SK_REM: r = !fl && b == 0 ? a : floor_rem(a, b); break;
                case SK_MAX: r = fmax(a, b); break;
                case SK_MIN: r = fmin(a, b); break;
                default: r = pow(a, b); break;
                }
                st(t, want, i, r);
                double g = ld(t, got, i), w = ld(t, want, i);
                ok = (isnan(g) && isnan(w)) || (g == w && signbit(g) == signbit(w)) ||
                     ((op == SK_DIV || op == SK_POW) && fabs(g - w) <= tol * fabs(w));
                if (!ok) printf("# %s(%g, %g): got %.9g, want %.9g\n", bin_name[op], a, b, g, w);
            }
            check(ok, "%s %s", bin_name[op], NAME[t]);
        }
        for (int dir = SK_LT; dir <= SK_NE; dir++) {
            uint8_t c[N];
            int ok = sk_compare(NULL, (sk_cmp)dir, t, N, x, y, c) == 0;
            for (int i = 0; i < N && ok; i++) {
                double a = ld(t, x, i), b = ld(t, y, i);
                int r = dir == SK_LT ? a < b : dir == SK_LE ? a <= b : dir == SK_GT ? a > b
                        : dir == SK_GE ? a >= b : dir == SK_EQ ? a == b : a != b;
                ok = c[i] == r;
            }
            check(ok, "compare %s %s", (const char *[]){"LT", "LE", "GT", "GE", "EQ", "NE"}[dir], NAME[t]);
        }
        free(x);
        free(y);
    }
    /* Special values. */
    int32_t a[6] = {7, -7, 7, -7, INT32_MIN, 5}, b[6] = {2, 2, -2, -2, -1, 0}, q[6], r[6];
    sk_binary(NULL, SK_DIV, SK_I32, 6, a, b, q);
    sk_binary(NULL, SK_REM, SK_I32, 6, a, b, r);
    check(q[0] == 3 && q[1] == -4 && q[2] == -4 && q[3] == 3 && q[4] == INT32_MIN && q[5] == -1,
          "i32 divide floors; INT32_MIN / -1 wraps; x / 0 = -1");
    check(r[0] == 1 && r[1] == 1 && r[2] == -1 && r[3] == -1 && r[4] == 0 && r[5] == 5,
          "i32 remainder has the divisor's sign; x %% 0 = x");
    int32_t m[2] = {INT32_MIN, 65536}, mo[2];
    sk_unary(NULL, SK_NEGATE, SK_I32, 1, m, mo);
    check(mo[0] == INT32_MIN, "i32 negate(INT32_MIN) wraps");
    sk_unary(NULL, SK_SQUARE, SK_I32, 2, m, mo);
    check(mo[0] == 0 && mo[1] == 0, "i32 square wraps");
    sk_unary(NULL, SK_ABS, SK_I32, 1, m, mo);
    check(mo[0] == INT32_MIN, "i32 abs(INT32_MIN) wraps");
    float fa[3] = {5.5f, -5.5f, NAN}, fb[3] = {-2, 2, 1}, fr[3];
    sk_binary(NULL, SK_REM, SK_F32, 2, fa, fb, fr);
    check(fr[0] == -0.5f && fr[1] == 0.5f, "f32 remainder has the divisor's sign");
    sk_binary(NULL, SK_MAX, SK_F32, 3, fa, fb, fr);
    check(isnan(fr[2]) && fr[0] == 5.5f, "maximum propagates NaN");

    /* The logic ops: bool only, over more than one block of 64. */
    enum { NB = 150 };
    uint8_t la[NB], lb[NB], lo[NB];
    for (int i = 0; i < NB; i++)
        la[i] = (uint8_t)(i % 2), lb[i] = (uint8_t)(i / 2 % 2);
    static const char *logic_name[] = {"and", "or", "xor"};
    for (int op = SK_AND; op <= SK_XOR; op++) {
        int ok = sk_binary(NULL, (sk_binary_op)op, SK_BOOL, NB, la, lb, lo) == 0;
        for (int i = 0; i < NB && ok; i++)
            ok = lo[i] == (op == SK_AND ? la[i] && lb[i] : op == SK_OR ? la[i] || lb[i] : la[i] != lb[i]);
        check(ok, "%s bool", logic_name[op - SK_AND]);
        check(sk_binary(NULL, (sk_binary_op)op, SK_F32, 2, fa, fb, fr) == SC_ERR &&
                  sk_binary(NULL, (sk_binary_op)op, SK_I32, 2, a, b, q) == SC_ERR,
              "%s of f32 or i32 is an error", logic_name[op - SK_AND]);
    }
    int not_ok = sk_unary(NULL, SK_NOT, SK_BOOL, NB, la, lo) == 0;
    for (int i = 0; i < NB && not_ok; i++)
        not_ok = lo[i] == !la[i];
    check(not_ok, "not bool");
    check(sk_unary(NULL, SK_NOT, SK_F32, 2, fa, fr) == SC_ERR, "not f32 is an error");
    check(sk_binary(NULL, SK_ADD, SK_BOOL, 2, la, lb, lo) == SC_ERR, "add bool is an error");

    /* convert */
    float fc[7] = {2.9f, -2.9f, 3e9f, -3e9f, NAN, 0.0f, -0.5f};
    int32_t ic[7];
    sk_convert(NULL, SK_F32, SK_I32, 7, fc, ic);
    check(ic[0] == 2 && ic[1] == -2 && ic[2] == INT32_MAX && ic[3] == INT32_MIN && ic[4] == 0 && ic[6] == 0,
          "convert f32 -> i32 truncates, saturates, NaN gives 0");
    uint8_t bc[7];
    sk_convert(NULL, SK_F32, SK_BOOL, 7, fc, bc);
    check(bc[0] == 1 && bc[4] == 1 && bc[5] == 0 && bc[6] == 1, "convert f32 -> bool is x != 0");
    for (int fi = 0; fi < COUNT(ALL); fi++)
        for (int ti2 = 0; ti2 < COUNT(ALL); ti2++) {
            sk_dtype f = ALL[fi], t = ALL[ti2];
            void *x = fill(f, 16, 40 + fi);
            char got[16 * 8], want[16 * 8];
            for (int i = 0; i < 16; i++) st(t, want, i, ld(f, x, i));   /* st truncates to i32 */
            check(sk_convert(NULL, f, t, 16, x, got) == 0 && equal(t, got, want, 16), "convert %s -> %s", NAME[f], NAME[t]);
            free(x);
        }
    uint16_t hb;
    float odd = 1.0f + 3.0f / 256;   /* halfway between two bf16 values, rounds to even */
    sk_convert(NULL, SK_F32, SK_BF16, 1, &odd, &hb);
    check(hb == sc_bf16_from_float(odd) && sc_bf16_to_float(hb) == 1.015625f, "convert f32 -> bf16 rounds to even");

    /* select */
    for (int ti = 0; ti < COUNT(ALL); ti++) {
        sk_dtype t = ALL[ti];
        void *x = fill(t, 16, 50), *y = fill(t, 16, 51);
        uint8_t p[16];
        char got[16 * 8], want[16 * 8];
        for (int i = 0; i < 16; i++) {
            p[i] = (uint8_t)(i % 3 == 0);
            st(t, want, i, p[i] ? ld(t, x, i) : ld(t, y, i));
        }
        check(sk_select(NULL, t, 16, p, x, y, got) == 0 && equal(t, got, want, 16), "select %s", NAME[t]);
        free(x);
        free(y);
    }
    check(sk_binary(NULL, SK_ADD, SK_BOOL, 1, bc, bc, bc) == SC_ERR, "add bool is an error");
    test_wide_ints();
    test_wide_int_arith();
}

/* sk_exp_f32 against double exp, in ulps of the exact value, at every
 * 997th float of its range [-103.97, 88.72] (the whole range, swept once,
 * gave 0.894 at worst with fmaf); its subnormal results, overflow and the
 * special values.  The bound is its form's (shardc_elementwise.h). */
static double exp_ulps(float x) {
    double want = exp((double)x), got = sk_exp_f32(x);
    int e;
    frexp(want, &e);
    return fabs(got - want) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

static void test_exp_f32(void) {
    double worst = 0;
    float at = 0;
    for (uint32_t u = 0; u <= 0xc2cff1b5u; u += 997) {
        if (u > 0x42b17217u && u < 0x80000000u)
            u = 0x80000000u;
        float x;
        memcpy(&x, &u, sizeof x);
        double d = exp_ulps(x);
        if (d > worst)
            worst = d, at = x;
    }
    check(worst < SK_EXP_ULPS, "exp f32 within %.2f ulp over its range (worst %.4f at %.9g)", SK_EXP_ULPS, worst, at);
    float tiny = sk_exp_f32(-100.0f), min_sub = sk_exp_f32(-103.9f);
    check(exp_ulps(-100.0f) <= 0.5 && min_sub == 0x1p-149f && sk_exp_f32(-104.0f) == 0,
          "exp f32 subnormal results rounded once: e^-100 %a, e^-103.9 %a, e^-104 0", tiny, min_sub);
    check(sk_exp_f32(88.72f) > 3.3e38f && isinf(sk_exp_f32(88.73f)) && isinf(sk_exp_f32(1e30f)) &&
              isinf(sk_exp_f32(INFINITY)) && sk_exp_f32(-INFINITY) == 0 && sk_exp_f32(0.0f) == 1 &&
              isnan(sk_exp_f32(NAN)) && isnan(sk_exp_f32(-NAN)),
          "exp f32: overflow to inf, e^-inf 0, e^0 1, NaN stays NaN");
}

#if SK_HAS_ISA_CLONES
/* The vector variants of sk_exp_f32 (lib/exp_simd.c), called by their ABI
 * names as GCC's vectorized loops call them, against sk_exp_f32_lane bit
 * for bit: blocks of consecutive bit patterns every 1999 blocks over all
 * 2^32 (both signs, subnormal results, overflow, infinities and NaNs). */
#include <immintrin.h>
__m512 exp_variant_e(__m512 x) __asm__("_ZGVeN16v_sk_exp_f32");
__m256 exp_variant_d(__m256 x) __asm__("_ZGVdN8v_sk_exp_f32");
__m256 exp_variant_c(__m256 x) __asm__("_ZGVcN8v_sk_exp_f32");
__m128 exp_variant_b(__m128 x) __asm__("_ZGVbN4v_sk_exp_f32");
__attribute__((target("avx512f"))) static void exp_e(const float *x, float *y) {
    _mm512_storeu_ps(y, exp_variant_e(_mm512_loadu_ps(x)));
}
__attribute__((target("avx2,fma"))) static void exp_d(const float *x, float *y) {
    _mm256_storeu_ps(y, exp_variant_d(_mm256_loadu_ps(x)));
}
__attribute__((target("avx"))) static void exp_c(const float *x, float *y) {
    _mm256_storeu_ps(y, exp_variant_c(_mm256_loadu_ps(x)));
}
static void exp_b(const float *x, float *y) { _mm_storeu_ps(y, exp_variant_b(_mm_loadu_ps(x))); }

static void test_exp_variant(const char *isa, int lanes, void (*variant)(const float *, float *)) {
    int64_t differ = 0, tried = 0;
    float x[16], y[16], first_x = 0;
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 1999 * (uint64_t)lanes) {
        for (int i = 0; i < lanes; i++) {
            uint32_t b = (uint32_t)(u + (uint64_t)i);
            memcpy(&x[i], &b, sizeof b);
        }
        variant(x, y);
        for (int i = 0; i < lanes; i++) {
            float want = sk_exp_f32_lane(x[i]);
            int same = isnan(want) ? isnan(y[i]) : memcmp(&want, &y[i], sizeof want) == 0;
            if (!same && differ++ == 0)
                first_x = x[i];
        }
        tried += lanes;
    }
    check(differ == 0, "exp f32 %s variant (%d lanes) gives the scalar form's bits: %lld of %lld differ (first at %a)",
          isa, lanes, (long long)differ, (long long)tried, first_x);
}

static void test_exp_variants(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        test_exp_variant("AVX-512", 16, exp_e);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        test_exp_variant("AVX2", 8, exp_d);
    if (__builtin_cpu_supports("avx"))
        test_exp_variant("AVX", 8, exp_c);
    test_exp_variant("SSE2", 4, exp_b);
}
#else
static void test_exp_variants(void) {}
#endif

int main(void) {
    test_layout();
    test_elementwise();
    test_bf16_casts();
    test_exp_f32();
    test_exp_variants();
    return tap_done();
}
