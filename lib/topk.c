/* topk.c: the indices of the k largest (or smallest) elements along the
 * last dim, in rank order; argmax and argmin are k = 1, argsort k = n in
 * the ascending order (docs/kernels.md).
 *
 * Each row keeps its best k so far as a sorted list in `out`; an element
 * enters when it ranks strictly above the list's last, so of equal
 * elements the one seen first (the lower index) stays ahead, as
 * jax.lax.top_k breaks ties.  Its place is found by bisection, and the
 * list's tail moves up one: O(n log k) comparisons and O(n k) moves of
 * indices per row, which suits the small k of routers and samplers and is
 * fast enough for sorting rows of a few thousand.  NaN ranks above every
 * number in either direction of top-k, so argmax and argmin both give the
 * first NaN, as jax.numpy.argmax and argmin do; in the ascending order
 * (SK_ASCENDING) it ranks below every number, as numpy.sort puts NaNs last. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* Whether a ranks strictly above b in `order` (0: smallest first, 1:
 * largest first, SK_ASCENDING). */
static inline int ranks_above(double a, double b, int order) {
    if (isnan(a) || isnan(b))
        return order == SK_ASCENDING ? !isnan(a) && isnan(b) : isnan(a) && !isnan(b);
    return order == 1 ? a > b : a < b;
}

typedef struct {
    sk_dtype t;
    const void *x;
    int64_t n, k;
    int largest;
    int32_t *out;
} TopK;

static void top_k_row(const TopK *c, int64_t row) {
    int64_t base = row * c->n, len = 0;
    int32_t *best = c->out + row * c->k;
    for (int64_t i = 0; i < c->n; i++) {
        double v = sk_load_d(c->t, c->x, base + i);
        if (len == c->k && !ranks_above(v, sk_load_d(c->t, c->x, base + best[len - 1]), c->largest))
            continue;
        int64_t lo = 0, hi = len;            /* v ranks above best[hi..len), not above best[..lo) */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (ranks_above(v, sk_load_d(c->t, c->x, base + best[mid]), c->largest))
                hi = mid;
            else
                lo = mid + 1;
        }
        int64_t end = len < c->k ? len++ : len - 1;  /* a full list drops its last */
        memmove(best + lo + 1, best + lo, sizeof(int32_t) * (size_t)(end - lo));
        best[lo] = (int32_t)i;
    }
}

static void top_k_range(void *ctx, int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; row++)
        top_k_row(ctx, row);
}

int sk_top_k(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int64_t k, int largest, int32_t *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || t == SK_BOOL || !sk_valid_shape(in) || in.rank < 1)
        return SC_ERR;
    int64_t n = in.dims[in.rank - 1], rows = 1;
    if (k < 1 || k > n || n > INT32_MAX)
        return SC_ERR;
    for (int d = 0; d < in.rank - 1; d++)
        rows *= in.dims[d];
    TopK c = {t, x, n, k, largest, out};
    sk_parallel_ranges(rows, rows * n * k, top_k_range, &c);
    return 0;
}
