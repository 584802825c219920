/* ew_ops.h: each op of shardc_elementwise.def as static inline functions,
 * one per dtype it computes in: ew_ID_f32 (float) and ew_ID_f64 (double)
 * for ops that take floats, ew_ID_i32 (_i64, _u8, _u32) for ops that take
 * integers, ew_ID_bool
 * (uint8_t 0 or 1) for ops that take bool.  The kernels of lib/elementwise.c and
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
#define EW_IF_I32_BOOL(...)
/* EW_IF_F_dtypes(code): the code for ops that take floating point (all but
 * the BOOL ones); EW_IF_BOOL_dtypes(code): for ops that take bool (ANY,
 * BOOL), whose formula then works on bytes 0 and 1. */
#define EW_IF_F_ANY(...) __VA_ARGS__
#define EW_IF_F_NUM(...) __VA_ARGS__
#define EW_IF_F_FLOAT(...) __VA_ARGS__
#define EW_IF_F_BOOL(...)
#define EW_IF_BOOL_ANY(...) __VA_ARGS__
#define EW_IF_BOOL_NUM(...)
#define EW_IF_BOOL_FLOAT(...)
#define EW_IF_BOOL_BOOL(...) __VA_ARGS__

/* Always inlined: sk_unary and sk_binary are one large switch over every
 * op, in which GCC's size limits stopped inlining a formula as long as
 * gelu's; called, its loop ran scalar, each fmaf of its exp a libm call. */
#if defined(__GNUC__)
#define EW_INLINE static inline __attribute__((always_inline))
#else
#define EW_INLINE static inline
#endif
#define EW_F(T, SUFFIX, ID, f) EW_INLINE T ew_##ID##_##SUFFIX(T x) { return f; }
#define EW_F2(T, SUFFIX, ID, f) EW_INLINE T ew_##ID##_##SUFFIX(T x, T y) { return f; }

#define K(c) c##f
#define M(fn) fn##f
#define T(fn) sk_##fn##_f32
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) EW_IF_F_##dtypes(EW_F(float, f32, ID, f))
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) EW_IF_F_##dtypes(EW_F2(float, f32, ID, f))
#include "shardc_elementwise.def"
#undef K
#undef M
#undef T
#undef SK_UNARY
#undef SK_BINARY

#define K(c) c
#define M(fn) fn
#define T(fn) sk_##fn##_f64
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) EW_IF_F_##dtypes(EW_F(double, f64, ID, f))
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) EW_IF_F_##dtypes(EW_F2(double, f64, ID, f))
#include "shardc_elementwise.def"
#undef K
#undef M
#undef T
#undef SK_UNARY
#undef SK_BINARY

/* The integer formula once per integer dtype: I its C type, U the unsigned
 * type of its width.  abs's `x < 0` is always false on the unsigned ones
 * (abs of an unsigned value is the value, as in NumPy). */
#define EW_FI(T, SUFFIX, ID, f) EW_F(T, SUFFIX, ID, f)      /* expands EW_SUFFIX first */
#define EW_FI2(T, SUFFIX, ID, f) EW_F2(T, SUFFIX, ID, f)
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) EW_IF_I32_##dtypes(EW_FI(I, EW_SUFFIX, ID, fi))
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) EW_IF_I32_##dtypes(EW_FI2(I, EW_SUFFIX, ID, fi))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#define I int32_t
#define U uint32_t
#define EW_SUFFIX i32
#define T(fn) sk_##fn##_i32
#include "shardc_elementwise.def"
#undef I
#undef U
#undef EW_SUFFIX
#undef T
#define I int64_t
#define U uint64_t
#define EW_SUFFIX i64
#define T(fn) sk_##fn##_i64
#include "shardc_elementwise.def"
#undef I
#undef U
#undef EW_SUFFIX
#undef T
#define I uint8_t
#define U uint8_t
#define EW_SUFFIX u8
#define T(fn) sk_##fn##_u8
#include "shardc_elementwise.def"
#undef I
#undef U
#undef EW_SUFFIX
#undef T
#define I uint32_t
#define U uint32_t
#define EW_SUFFIX u32
#define T(fn) sk_##fn##_u32
#include "shardc_elementwise.def"
#undef I
#undef U
#undef EW_SUFFIX
#undef T
#pragma GCC diagnostic pop
#undef SK_UNARY
#undef SK_BINARY
#undef EW_FI
#undef EW_FI2

#define SK_UNARY(ID, name, builtin, dtypes, f, fi) EW_IF_BOOL_##dtypes(EW_F(uint8_t, bool, ID, (uint8_t)(f)))
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) EW_IF_BOOL_##dtypes(EW_F2(uint8_t, bool, ID, (uint8_t)(f)))
#include "shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY

#undef EW_F
#undef EW_F2

#endif
