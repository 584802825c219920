/* common.c: dtype sizes and the strided copy that the layout kernels and the
 * dot's operand packing share. */
#include "internal.h"

size_t sk_dtype_size(sk_dtype t) {
    static const unsigned char bytes_of[SK_DTYPE_COUNT] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [SK_##ID] = bytes,
#include "../compiler/ir/dtypes.def"
#undef DTYPE
    };
    return (unsigned)t < SK_DTYPE_COUNT ? bytes_of[t] : 0;
}

int64_t sk_elems(sc_shape s) {
    int64_t n = 1;
    for (int d = 0; d < s.rank; d++)
        n *= s.dims[d];
    return n;
}

/* One strided copy: dst (contiguous) = src read with strides sstride. */
typedef struct {
    size_t es;
    int rank;
    const int64_t *dims, *sstride;
    const char *src;
    char *dst;
} Copy;

/* n elements from sp, s elements apart, to dp: a memcpy when contiguous,
 * else a tight loop per element size. */
static void copy_run(size_t esize, int64_t n, const char *sp, int64_t s, char *dp) {
    if (s == 1 || n == 1) {
        memcpy(dp, sp, (size_t)n * esize);
        return;
    }
    switch (esize) {
    case 1: for (int64_t i = 0; i < n; i++) dp[i] = sp[i * s]; break;
    case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)(void *)dp)[i] = ((const uint16_t *)(const void *)sp)[i * s]; break;
    case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)(void *)dp)[i] = ((const uint32_t *)(const void *)sp)[i * s]; break;
    default: for (int64_t i = 0; i < n; i++) memcpy(dp + i * 8, sp + i * s * 8, 8); break;
    }
}

/* Elements [lo, hi) of dst.  The innermost dim is one run (copy_run) per
 * row; the outer dims advance an odometer, so the cost per row is O(rank)
 * and the cost per element O(1). */
static void copy_range(void *ctx, int64_t lo, int64_t hi) {
    const Copy *c = ctx;
    int rank = c->rank;
    int64_t es = (int64_t)c->es, n = rank > 0 ? c->dims[rank - 1] : 1, s = rank > 0 ? c->sstride[rank - 1] : 0;
    int64_t idx[SC_MAX_RANK] = {0}, row = lo / n, j = lo % n, off = 0;
    for (int d = rank - 2; d >= 0; d--) {   /* where element lo is */
        idx[d] = row % c->dims[d];
        row /= c->dims[d];
        off += idx[d] * c->sstride[d];
    }
    const char *sp = c->src + off * es;     /* the start of the row */
    char *dp = c->dst + lo * es;
    for (int64_t left = hi - lo; left > 0;) {
        int64_t len = n - j < left ? n - j : left;
        copy_run(c->es, len, sp + j * s * es, s, dp);
        dp += len * es;
        left -= len;
        j = 0;
        for (int d = rank - 2; d >= 0; d--) {   /* the next row */
            sp += c->sstride[d] * es;
            if (++idx[d] < c->dims[d])
                break;
            sp -= c->sstride[d] * c->dims[d] * es;
            idx[d] = 0;
        }
    }
}

/* On the device's OpenMP threads when long enough (sk_parallel_ranges),
 * each thread a contiguous range of dst. */
void sk_strided_copy(size_t esize, int rank, const int64_t *dims, const void *src,
                     const int64_t *sstride, void *dst) {
    int64_t total = 1;
    for (int d = 0; d < rank; d++)
        total *= dims[d];
    if (total == 0)
        return;
    Copy c = {esize, rank, dims, sstride, src, dst};
    sk_parallel_ranges(total, total, copy_range, &c);
}
