/* ew_ops.h: each op of shardc_elementwise.def as static inline functions,
 * one per dtype it computes in: ew_ID_f32 (float), ew_ID_f64 (double) and,
 * for ops that take i32, ew_ID_i32.  The kernels of lib/elementwise.c and
 * the reference interpreter (compiler/interp) call these, so both compute
 * what the formulas say.  Not installed. */
#ifndef SHARDC_EW_OPS_H
#define SHARDC_EW_OPS_H

#include "shardc_elementwise.h"

/* EW_IF_I32_dtypes(code): the code for ops whose dtypes take i32 (ANY,
 * NUM), nothing for FLOAT ones, which have no i32 formula.  The users of
 * ew_ID_i32 pick it with this too. */
#define EW_IF_I32_ANY(...) __VA_ARGS__
#define EW_IF_I32_NUM(...) __VA_ARGS__
#define EW_IF_I32_FLOAT(...)

#define EW_F(T, SUFFIX, ID, f) static inline T ew_##ID##_##SUFFIX(T x) { return f; }
#define EW_F2(T, SUFFIX, ID, f) static inline T ew_##ID##_##SUFFIX(T x, T y) { return f; }

#define K(c) c##f
#define M(fn) fn##f
#define T(fn) sk_##fn##_f32
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) EW_F(float, f32, ID, f)
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) EW_F2(float, f32, ID, f)
#include "shardc_elementwise.def"
#undef K
#undef M
#undef T
#undef SK_UNARY
#undef SK_BINARY

#define K(c) c
#define M(fn) fn
#define T(fn) sk_##fn##_f64
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) EW_F(double, f64, ID, f)
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) EW_F2(double, f64, ID, f)
#include "shardc_elementwise.def"
#undef K
#undef M
#undef T
#undef SK_UNARY
#undef SK_BINARY

#define T(fn) sk_##fn##_i32
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) EW_IF_I32_##dtypes(EW_F(int32_t, i32, ID, fi))
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) EW_IF_I32_##dtypes(EW_F2(int32_t, i32, ID, fi))
#include "shardc_elementwise.def"
#undef T
#undef SK_UNARY
#undef SK_BINARY

#undef EW_F
#undef EW_F2

#endif
