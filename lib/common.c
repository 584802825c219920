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

/* The innermost dim is a tight loop per element size (or one memcpy when it
 * is contiguous); the outer dims advance an odometer, so the cost per row is
 * O(rank) and the cost per element O(1). */
void sk_strided_copy(size_t esize, int rank, const int64_t *dims, const void *src,
                     const int64_t *sstride, void *dst) {
    for (int d = 0; d < rank; d++)
        if (dims[d] == 0)
            return;
    int64_t n = rank > 0 ? dims[rank - 1] : 1;
    int64_t s = rank > 0 ? sstride[rank - 1] : 0;
    int64_t idx[SC_MAX_RANK] = {0};
    const char *sp = src;
    char *dp = dst;
    for (;;) {
        if (s == 1 || n == 1) {
            memcpy(dp, sp, (size_t)n * esize);
        } else {
            switch (esize) {
            case 1: for (int64_t i = 0; i < n; i++) dp[i] = sp[i * s]; break;
            case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)(void *)dp)[i] = ((const uint16_t *)(const void *)sp)[i * s]; break;
            case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)(void *)dp)[i] = ((const uint32_t *)(const void *)sp)[i * s]; break;
            default: for (int64_t i = 0; i < n; i++) memcpy(dp + i * 8, sp + i * s * 8, 8); break;
            }
        }
        dp += n * (int64_t)esize;
        /* Advance the odometer over dims 0 .. rank-2. */
        int d = rank - 2;
        for (; d >= 0; d--) {
            sp += sstride[d] * (int64_t)esize;
            if (++idx[d] < dims[d])
                break;
            sp -= sstride[d] * dims[d] * (int64_t)esize;
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}
