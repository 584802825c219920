/* layout.c: the kernels that move elements without arithmetic (transpose,
 * broadcast, slices, concatenate, roll, gather) and iota.  All but iota are
 * copies: either one strided copy (sk_strided_copy, which memcpys
 * contiguous rows) or contiguous blocks copied with memcpy. */
#include "internal.h"

int sk_transpose(sk_dtype t, sc_shape in, const void *x, const int *perm, void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(in))
        return SC_ERR;
    int64_t st[SC_MAX_RANK], dims[SC_MAX_RANK], sst[SC_MAX_RANK];
    int seen[SC_MAX_RANK] = {0};
    sk_strides(in, st);
    for (int i = 0; i < in.rank; i++) {
        if (perm[i] < 0 || perm[i] >= in.rank || seen[perm[i]]++)
            return SC_ERR;
        dims[i] = in.dims[perm[i]];
        sst[i] = st[perm[i]];
    }
    sk_strided_copy(sk_dtype_size(t), in.rank, dims, x, sst, out);
    return 0;
}

int sk_broadcast(sk_dtype t, sc_shape in, const void *x, sc_shape os, const int *map, void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(in) || !sk_valid_shape(os))
        return SC_ERR;
    int64_t st[SC_MAX_RANK], sst[SC_MAX_RANK] = {0};   /* new dims read stride 0 */
    int seen[SC_MAX_RANK] = {0};
    sk_strides(in, st);
    for (int i = 0; i < in.rank; i++) {
        if (map[i] < 0 || map[i] >= os.rank || seen[map[i]]++ || os.dims[map[i]] != in.dims[i])
            return SC_ERR;
        sst[map[i]] = st[i];
    }
    sk_strided_copy(sk_dtype_size(t), os.rank, os.dims, x, sst, out);
    return 0;
}

int sk_slice(sk_dtype t, sc_shape in, const void *x, const int64_t *start, const int64_t *limit,
             void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(in))
        return SC_ERR;
    int64_t st[SC_MAX_RANK], dims[SC_MAX_RANK], off = 0;
    sk_strides(in, st);
    for (int d = 0; d < in.rank; d++) {
        if (start[d] < 0 || start[d] > limit[d] || limit[d] > in.dims[d])
            return SC_ERR;
        dims[d] = limit[d] - start[d];
        off += start[d] * st[d];
    }
    size_t es = sk_dtype_size(t);
    sk_strided_copy(es, in.rank, dims, (const char *)x + off * (int64_t)es, st, out);
    return 0;
}

int sk_dynamic_slice(sk_dtype t, sc_shape in, const void *x, const int32_t *offsets,
                     const int64_t *sizes, void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(in))
        return SC_ERR;
    int64_t start[SC_MAX_RANK], limit[SC_MAX_RANK];
    for (int d = 0; d < in.rank; d++) {
        if (sizes[d] < 0 || sizes[d] > in.dims[d])
            return SC_ERR;
        /* Clamped into 0 .. extent - size, as JAX's dynamic_slice. */
        int64_t o = offsets[d], hi = in.dims[d] - sizes[d];
        start[d] = o < 0 ? 0 : o > hi ? hi : o;
        limit[d] = start[d] + sizes[d];
    }
    return sk_slice(t, in, x, start, limit, out);
}

/* outer = the product of the dims before `dim`, inner = after it. */
static void split(sc_shape s, int dim, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < s.rank; d++) {
        if (d < dim)
            *outer *= s.dims[d];
        else if (d > dim)
            *inner *= s.dims[d];
    }
}

int sk_concat(sk_dtype t, int n, const sc_shape *in, const void *const *x, int dim, void *out) {
    if (!sk_valid_dtype(t) || n < 1 || dim < 0 || dim >= in[0].rank)
        return SC_ERR;
    for (int i = 0; i < n; i++) {
        if (!sk_valid_shape(in[i]) || in[i].rank != in[0].rank)
            return SC_ERR;
        for (int d = 0; d < in[0].rank; d++)
            if (d != dim && in[i].dims[d] != in[0].dims[d])
                return SC_ERR;
    }
    int64_t outer, inner;
    split(in[0], dim, &outer, &inner);
    size_t es = sk_dtype_size(t);
    char *dp = out;
    /* Each outer index takes one contiguous chunk from every operand. */
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < n; i++) {
            size_t chunk = (size_t)(in[i].dims[dim] * inner) * es;
            memcpy(dp, (const char *)x[i] + (size_t)o * chunk, chunk);
            dp += chunk;
        }
    return 0;
}

int sk_roll(sk_dtype t, sc_shape in, const void *x, int64_t shift, int dim, void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(in) || dim < 0 || dim >= in.rank)
        return SC_ERR;
    int64_t outer, inner, n = in.dims[dim];
    split(in, dim, &outer, &inner);
    if (n == 0)
        return 0;
    shift = ((shift % n) + n) % n;
    size_t es = sk_dtype_size(t), row = (size_t)(n * inner) * es;
    size_t head = (size_t)((n - shift) * inner) * es, tail = (size_t)(shift * inner) * es;
    for (int64_t o = 0; o < outer; o++) {
        const char *sp = (const char *)x + (size_t)o * row;
        char *dp = (char *)out + (size_t)o * row;
        /* out[(i + shift) mod n] = x[i]: the last `shift` rows come first. */
        memcpy(dp, sp + head, tail);
        memcpy(dp + tail, sp, head);
    }
    return 0;
}

int sk_gather(sk_dtype t, sc_shape table, const void *x, int dim, sc_shape idx_shape,
              const int32_t *idx, void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(table) || !sk_valid_shape(idx_shape) || dim < 0 ||
        dim >= table.rank || idx_shape.rank + table.rank - 1 > SC_MAX_RANK)
        return SC_ERR;
    int64_t outer, inner, n = table.dims[dim], ni = sk_elems(idx_shape);
    split(table, dim, &outer, &inner);
    size_t es = sk_dtype_size(t), chunk = (size_t)inner * es;
    char *dp = out;
    if (n == 0)
        return ni * outer * inner == 0 ? 0 : SC_ERR;
    for (int64_t i = 0; i < ni; i++) {
        /* An index outside the dim is clamped into it (-1 reads row 0). */
        int64_t r = idx[i] < 0 ? 0 : idx[i] >= n ? n - 1 : idx[i];
        for (int64_t o = 0; o < outer; o++) {
            memcpy(dp, (const char *)x + (size_t)((o * n + r) * inner) * es, chunk);
            dp += chunk;
        }
    }
    return 0;
}

int sk_iota(sk_dtype t, sc_shape s, int dim, void *out) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(s) || dim < 0 || dim >= s.rank)
        return SC_ERR;
    int64_t outer, inner, n = s.dims[dim], k = 0;
    split(s, dim, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++, k++) {
                switch (t) {
                case SK_I32: ((int32_t *)out)[k] = (int32_t)i; break;
                case SK_BOOL: ((uint8_t *)out)[k] = i != 0; break;
                case SK_F64: ((double *)out)[k] = (double)i; break;
                default: sk_store_f(t, out, k, (float)i); break;
                }
            }
    return 0;
}
