/* gather_dot.c: a dot of gathered matrices, one GEMM per matrix.
 *
 * out[p, :] = x[p / rep, :] @ w[idx[p]] for each of `rows` index positions,
 * w[i] being [k, n] (or [n, k] when trans).  Gathering first would build a
 * [rows, k, n] block: for a mixture of experts, a whole expert's weights
 * per token.  Instead the positions are sorted by index (a counting sort),
 * the x rows of each matrix are packed into one [count, k] block and
 * multiplied by it in one GEMM, and the result rows are put back in place.
 * The work is the same; the memory is rows * (k + n) elements. */
#include "internal.h"

#include <string.h>

/* Which matrix position p reads: e for none (fill mode, outside). */
static int64_t matrix_of(int32_t i, int64_t e, sk_index_mode mode) {
    if (i >= 0 && i < e)
        return i;
    return mode == SK_FILL ? e : i < 0 ? 0 : e - 1;
}

/* GEMM of the count packed rows of matrix wi into y. */
static int multiply(sk_ctx *ctx, sk_dtype t, const char *xp, int64_t count, const char *wi, int64_t k, int64_t n,
                    int trans, char *y) {
    sk_dot_dims dd = {.ncontract = 1, .lhs_contract = {1}, .rhs_contract = {trans}};
    sc_shape ws = trans ? (sc_shape){2, {n, k}} : (sc_shape){2, {k, n}};
    return sk_dot(ctx, t, (sc_shape){2, {count, k}}, xp, ws, wi, &dd, y, NULL);
}

int sk_gather_dot(sk_ctx *ctx, sk_dtype t, const void *w, int64_t e, int64_t k, int64_t n, int trans,
                  sk_index_mode mode, const int32_t *idx, int64_t rows, int64_t rep, const void *x, void *out) {
    if (!sk_valid_dtype(t) || t == SK_BOOL || e < 1 || k < 0 || n < 0 || rows < 0 || rep < 1 || rows % rep ||
        (trans != 0 && trans != 1) || (mode != SK_CLAMP && mode != SK_FILL))
        return SC_ERR;
    size_t es = sk_dtype_size(t), xrow = (size_t)k * es, yrow = (size_t)n * es;
    size_t bytes = sizeof(int64_t) * (size_t)(rows + e + 2) + (size_t)rows * (xrow + yrow);
    char *scratch = sk_dev_take(ctx, bytes);
    if (!scratch)
        return SC_ERR;
    int64_t *order = (int64_t *)scratch, *start = order + rows;     /* start[i]: matrix i's first slot */
    char *xp = (char *)(start + e + 2), *yp = xp + (size_t)rows * xrow;
    memset(start, 0, sizeof(int64_t) * (size_t)(e + 2));
    for (int64_t p = 0; p < rows; p++)
        start[matrix_of(idx[p], e, mode) + 1]++;
    for (int64_t i = 0; i <= e; i++)
        start[i + 1] += start[i];
    for (int64_t p = 0; p < rows; p++) {         /* stable: each matrix's rows in order */
        int64_t slot = start[matrix_of(idx[p], e, mode)]++;
        order[slot] = p;
        memcpy(xp + (size_t)slot * xrow, (const char *)x + (size_t)(p / rep) * xrow, xrow);
    }
    /* start[i] is now matrix i's end, i.e. matrix i + 1's first slot. */
    int rc = 0;
    for (int64_t i = 0, first = 0; i < e && !rc; i++) {
        if (start[i] > first)
            rc = multiply(ctx, t, xp + (size_t)first * xrow, start[i] - first,
                          (const char *)w + (size_t)i * xrow * (size_t)n, k, n, trans, yp + (size_t)first * yrow);
        first = start[i];
    }
    for (int64_t slot = 0; slot < rows && !rc; slot++) {
        char *dst = (char *)out + (size_t)order[slot] * yrow;
        if (slot >= start[e - 1])
            memset(dst, 0, yrow);                /* no matrix: zeros, as the filled gather reads */
        else
            memcpy(dst, yp + (size_t)slot * yrow, yrow);
    }
    sk_dev_give(ctx, scratch, bytes);
    return rc;
}
