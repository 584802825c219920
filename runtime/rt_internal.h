/* Internal helpers of the runtime shared by its backends (not installed). */
#ifndef SHARDC_RT_INTERNAL_H
#define SHARDC_RT_INTERNAL_H

#include "shardc_rt.h"

/* dst[i] = op over j < k of srcs[j][off + i], i < n, in member order.
 * Float sums accumulate in double from +0 and round once (bf16 and f16
 * through f32), as the reference interpreter does; i32 sums wrap. */
void rt_reduce(sc_dtype t, sc_reduce op, const void *const *srcs, int k, int64_t off, void *dst,
               int64_t n);
/* The instruction set of rt_reduce's f32 and f64 sums (the same bits in
 * each): 2 AVX-512, 1 AVX2, 0 the baseline (SSE2 on x86-64).  A limit >= 0
 * caps it (for tests); returns the set in use. */
int rt_reduce_isa(int limit);
/* Copies a box of `rank` dims (extents `box`) between two strided arrays;
 * strides are in elements of `elsize` bytes. */
void rt_copy_box(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides,
                 int rank, const int64_t *box, size_t elsize);
/* memcpy with non-temporal stores where the machine has them (x86-64:
 * the copy does not pull dst into the cache), then rt_stream_fence()
 * before another thread may read dst. */
void rt_copy_stream(void *dst, const void *src, size_t n);
void rt_stream_fence(void);
/* Row-major strides of a shape, in elements; returns the element count. */
int64_t rt_strides(const sc_shape *s, int64_t *strides);
/* *out = *opt (NULL: every default) with the defaults filled in: 0 or
 * SC_ERR with a message in err for a value no world takes (options.c). */
int rt_options_check(const sc_options *opt, sc_options *out, char *err, size_t errlen);

#endif
