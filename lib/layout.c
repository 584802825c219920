/* layout.c: the kernels that move elements without arithmetic (transpose,
 * broadcast, slices, concatenate, roll, gather) and iota.  All but iota are
 * copies: either one strided copy (sk_strided_copy, which memcpys
 * contiguous rows) or contiguous blocks copied with memcpy.  Long ones run
 * on the device's OpenMP threads (sk_parallel_ranges), each thread writing
 * its own part of the result. */
#include "internal.h"

int sk_transpose(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, const int *perm, void *out) {
    (void)ctx;
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

int sk_broadcast(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, sc_shape os, const int *map, void *out) {
    (void)ctx;
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

int sk_slice(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, const int64_t *start, const int64_t *limit,
             void *out) {
    (void)ctx;
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

int sk_dynamic_slice(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, const int32_t *offsets,
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
    return sk_slice(ctx, t, in, x, start, limit, out);
}

/* The update's rows go to their places one memcpy each: the update's
 * trailing dims that are whole in the operand, and the one before them,
 * are one contiguous run of it.  With out == x only the update's bytes
 * move, which a loop writing one slot of a carried [T, ...] array per
 * iteration relies on. */
int sk_dynamic_update_slice(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, sc_shape upd, const void *u,
                            const int32_t *offsets, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || !sk_valid_shape(in) || !sk_valid_shape(upd) || upd.rank != in.rank)
        return SC_ERR;
    size_t es = sk_dtype_size(t);
    int64_t st[SC_MAX_RANK], base = 0, elems = 1;
    sk_strides(in, st);
    for (int d = 0; d < in.rank; d++) {
        if (upd.dims[d] < 0 || upd.dims[d] > in.dims[d])
            return SC_ERR;
        int64_t o = offsets[d], hi = in.dims[d] - upd.dims[d];
        base += (o < 0 ? 0 : o > hi ? hi : o) * st[d];
        elems *= upd.dims[d];
    }
    if (out != x)
        memcpy(out, x, (size_t)sk_elems(in) * es);
    if (!elems)
        return 0;
    int k = in.rank;
    int64_t run = 1;
    while (k > 0 && upd.dims[k - 1] == in.dims[k - 1])
        run *= upd.dims[--k];
    if (k > 0)
        run *= upd.dims[--k];
    int64_t idx[SC_MAX_RANK] = {0}, at = base;
    const char *src = u;
    for (int64_t done = 0; done < elems; done += run) {
        memcpy((char *)out + at * (int64_t)es, src, (size_t)run * es);
        src += run * (int64_t)es;
        for (int d = k - 1; d >= 0; d--) {       /* odometer over the outer dims */
            at += st[d];
            if (++idx[d] < upd.dims[d])
                break;
            at -= st[d] * upd.dims[d];
            idx[d] = 0;
        }
    }
    return 0;
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

typedef struct {
    int n, dim;
    const sc_shape *in;
    const void *const *x;
    int64_t inner;
    size_t es, row;              /* bytes of one outer index in the result */
    char *out;
} Concat;

/* Outer indices [lo, hi): each takes one contiguous chunk from every
 * operand. */
static void concat_range(void *ctx, int64_t lo, int64_t hi) {
    const Concat *c = ctx;
    char *dp = c->out + (size_t)lo * c->row;
    for (int64_t o = lo; o < hi; o++)
        for (int i = 0; i < c->n; i++) {
            size_t chunk = (size_t)(c->in[i].dims[c->dim] * c->inner) * c->es;
            memcpy(dp, (const char *)c->x[i] + (size_t)o * chunk, chunk);
            dp += chunk;
        }
}

int sk_concat(sk_ctx *ctx, sk_dtype t, int n, const sc_shape *in, const void *const *x, int dim, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || n < 1 || dim < 0 || dim >= in[0].rank)
        return SC_ERR;
    for (int i = 0; i < n; i++) {
        if (!sk_valid_shape(in[i]) || in[i].rank != in[0].rank)
            return SC_ERR;
        for (int d = 0; d < in[0].rank; d++)
            if (d != dim && in[i].dims[d] != in[0].dims[d])
                return SC_ERR;
    }
    int64_t outer, inner, along = 0;
    split(in[0], dim, &outer, &inner);
    for (int i = 0; i < n; i++)
        along += in[i].dims[dim];
    size_t es = sk_dtype_size(t);
    Concat c = {n, dim, in, x, inner, es, (size_t)(along * inner) * es, out};
    sk_parallel_ranges(outer, outer * along * inner, concat_range, &c);
    return 0;
}

typedef struct {
    const char *x;
    char *out;
    size_t row, head, tail;
} Roll;

static void roll_range(void *ctx, int64_t lo, int64_t hi) {
    const Roll *r = ctx;
    for (int64_t o = lo; o < hi; o++) {
        const char *sp = r->x + (size_t)o * r->row;
        char *dp = r->out + (size_t)o * r->row;
        /* out[(i + shift) mod n] = x[i]: the last `shift` rows come first. */
        memcpy(dp, sp + r->head, r->tail);
        memcpy(dp + r->tail, sp, r->head);
    }
}

int sk_roll(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int64_t shift, int dim, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || !sk_valid_shape(in) || dim < 0 || dim >= in.rank)
        return SC_ERR;
    int64_t outer, inner, n = in.dims[dim];
    split(in, dim, &outer, &inner);
    if (n == 0)
        return 0;
    shift = ((shift % n) + n) % n;
    size_t es = sk_dtype_size(t), row = (size_t)(n * inner) * es;
    size_t head = (size_t)((n - shift) * inner) * es, tail = (size_t)(shift * inner) * es;
    Roll r = {x, out, row, head, tail};
    sk_parallel_ranges(outer, outer * n * inner, roll_range, &r);
    return 0;
}

/* The table's dims fall into the gathered dim and the batch dims (dropped:
 * the index selects them), the kept dims after the last dropped one (one
 * contiguous `tail` in the table and in the result), and the kept dims
 * before it (`mid`, walked by an odometer, one tail each). */
typedef struct {
    const char *x;
    const int32_t *idx;
    char *out;
    size_t es, tail;             /* element size; tail bytes */
    int64_t n, dim_stride, per;  /* the gathered dim's extent and stride; result elements per index */
    int nb, nmid;
    int fill;                    /* SK_FILL: an index outside the dim reads zeros */
    int64_t b_istride[SC_MAX_RANK], b_extent[SC_MAX_RANK], b_tstride[SC_MAX_RANK];
    int64_t mid_dims[SC_MAX_RANK], mid_stride[SC_MAX_RANK];
} Gather;

/* The table element where index i's block starts, in elements, or -1 for
 * zeros (fill mode, an index outside the dim). */
static int64_t gather_base(const Gather *g, int64_t i) {
    if (g->fill && (g->idx[i] < 0 || g->idx[i] >= g->n))
        return -1;
    /* An index outside the dim is clamped into it (-1 reads row 0). */
    int64_t r = g->idx[i] < 0 ? 0 : g->idx[i] >= g->n ? g->n - 1 : g->idx[i];
    int64_t off = r * g->dim_stride;
    for (int j = 0; j < g->nb; j++)     /* i's coordinate along each batch dim */
        off += i / g->b_istride[j] % g->b_extent[j] * g->b_tstride[j];
    return off;
}

/* Indices [lo, hi) of idx: each copies its block of the table, one tail per
 * combination of the mid dims. */
static void gather_range(void *ctx, int64_t lo, int64_t hi) {
    const Gather *g = ctx;
    char *dp = g->out + (size_t)(lo * g->per) * g->es;
    for (int64_t i = lo; i < hi; i++) {
        int64_t base = gather_base(g, i);
        if (base < 0) {
            memset(dp, 0, (size_t)g->per * g->es);
            dp += (size_t)g->per * g->es;
            continue;
        }
        const char *sp = g->x + (size_t)base * g->es;
        int64_t at[SC_MAX_RANK] = {0};
        for (;;) {
            memcpy(dp, sp, g->tail);
            dp += g->tail;
            int d = g->nmid - 1;
            for (; d >= 0; d--) {
                sp += g->mid_stride[d] * (int64_t)g->es;
                if (++at[d] < g->mid_dims[d])
                    break;
                sp -= g->mid_stride[d] * g->mid_dims[d] * (int64_t)g->es;
                at[d] = 0;
            }
            if (d < 0)
                break;
        }
    }
}

/* Fills g's batch dims from the (table dim, index dim) pairs and marks the
 * dropped table dims; 0, or SC_ERR for pairs that are not distinct dims of
 * equal extent. */
static int gather_batch(Gather *g, sc_shape table, sc_shape is, int dim, int nbatch, const int *batch,
                        uint32_t *dropped) {
    int64_t ts[SC_MAX_RANK], xs[SC_MAX_RANK];
    uint32_t seen = 0;
    sk_strides(table, ts);
    sk_strides(is, xs);
    *dropped = 1u << dim;
    for (int j = 0; j < nbatch; j++) {
        int td = batch[2 * j], xd = batch[2 * j + 1];
        if (td < 0 || td >= table.rank || (*dropped >> td & 1) || xd < 0 || xd >= is.rank || (seen >> xd & 1) ||
            table.dims[td] != is.dims[xd])
            return SC_ERR;
        *dropped |= 1u << td;
        seen |= 1u << xd;
        g->b_istride[j] = xs[xd];
        g->b_extent[j] = is.dims[xd];
        g->b_tstride[j] = ts[td];
    }
    g->nb = nbatch;
    return 0;
}

int sk_gather(sk_ctx *ctx, sk_dtype t, sc_shape table, const void *x, int dim, sk_index_mode mode, sc_shape idx_shape,
              const int32_t *idx, int nbatch, const int *batch, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || !sk_valid_shape(table) || !sk_valid_shape(idx_shape) || dim < 0 ||
        (mode != SK_CLAMP && mode != SK_FILL) ||
        dim >= table.rank || nbatch < 0 || nbatch >= table.rank ||
        idx_shape.rank + table.rank - 1 - nbatch > SC_MAX_RANK)
        return SC_ERR;
    Gather g = {.x = x, .idx = idx, .out = out, .es = sk_dtype_size(t), .n = table.dims[dim], .per = 1,
                .fill = mode == SK_FILL};
    uint32_t dropped;
    if (gather_batch(&g, table, idx_shape, dim, nbatch, batch, &dropped))
        return SC_ERR;
    int64_t ts[SC_MAX_RANK], tail = 1, ni = sk_elems(idx_shape);
    sk_strides(table, ts);
    g.dim_stride = ts[dim];
    int last = table.rank - 1;           /* the last dropped dim */
    while (!(dropped >> last & 1))
        last--;
    for (int d = 0; d < table.rank; d++) {
        if (dropped >> d & 1)
            continue;
        g.per *= table.dims[d];
        if (d > last)
            tail *= table.dims[d];
        else {
            g.mid_dims[g.nmid] = table.dims[d];
            g.mid_stride[g.nmid++] = ts[d];
        }
    }
    g.tail = (size_t)tail * g.es;
    if (g.per == 0 || (g.n == 0 && !g.fill))   /* an empty dim can only fill */
        return ni * g.per == 0 ? 0 : SC_ERR;
    sk_parallel_ranges(ni, ni * g.per, gather_range, &g);
    return 0;
}

typedef struct {
    sk_dtype t;
    int nidx, nrest;
    const int32_t *const *idx;
    int64_t ni, per;                     /* index positions; update elements per position */
    int rows;                            /* the other dims are the trailing ones: one run per position */
    int64_t n[SC_MAX_RANK], stride[SC_MAX_RANK];         /* the scattered dims */
    int64_t rdims[SC_MAX_RANK], rstride[SC_MAX_RANK];    /* the others, in order */
    const void *u;
    void *out;
} Scatter;

/* out[k] += u[i]; i32 wraps (in unsigned arithmetic: no overflow). */
static void add_at(sk_dtype t, void *out, int64_t k, const void *u, int64_t i) {
    switch (t) {
    case SK_F64: ((double *)out)[k] += ((const double *)u)[i]; break;
    case SK_I32:
        ((int32_t *)out)[k] = (int32_t)((uint32_t)((int32_t *)out)[k] + (uint32_t)((const int32_t *)u)[i]);
        break;
    default: sk_store_f(t, out, k, sk_load_f(t, out, k) + sk_load_f(t, u, i)); break;
    }
}

/* Where index position i lands in out (its scattered dims' offset), or -1
 * when it is out of range in some dim: dropped. */
static int64_t position_base(const Scatter *s, int64_t i) {
    int64_t base = 0;
    for (int j = 0; j < s->nidx; j++) {
        if (s->idx[j][i] < 0 || s->idx[j][i] >= s->n[j])
            return -1;
        base += s->idx[j][i] * s->stride[j];
    }
    return base;
}

/* f32 updates whose other dims are the trailing ones: element r of a
 * position is element base + r of out, a run the loop adds as vectors. */
static void scatter_rows_f32(const Scatter *s, int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < s->ni; i++) {
        int64_t base = position_base(s, i);
        if (base < 0)
            continue;
        float *restrict o = (float *)s->out + base;
        const float *restrict u = (const float *)s->u + i * s->per;
        SK_SIMD
        for (int64_t r = lo; r < hi; r++)
            o[r] += u[r];
    }
}

/* Update elements [lo, hi) of every index position, in position order: a
 * thread owns those elements' places in every row it scatters into, so
 * duplicates add up race-free and in the same order on any thread count. */
static void scatter_range(void *ctx, int64_t lo, int64_t hi) {
    const Scatter *s = ctx;
    if (s->t == SK_F32 && s->rows) {
        scatter_rows_f32(s, lo, hi);
        return;
    }
    int64_t first = 0, at[SC_MAX_RANK], q = lo;
    for (int d = s->nrest - 1; d >= 0; d--) {
        at[d] = q % s->rdims[d];
        first += at[d] * s->rstride[d];
        q /= s->rdims[d];
    }
    for (int64_t i = 0; i < s->ni; i++) {
        int64_t base = position_base(s, i);
        if (base < 0)
            continue;
        int64_t off = first, pos[SC_MAX_RANK];
        memcpy(pos, at, sizeof(int64_t) * (size_t)s->nrest);
        for (int64_t r = lo; r < hi; r++) {
            add_at(s->t, s->out, base + off, s->u, i * s->per + r);
            for (int d = s->nrest - 1; d >= 0; d--) {        /* odometer over the other dims */
                off += s->rstride[d];
                if (++pos[d] < s->rdims[d])
                    break;
                off -= s->rstride[d] * s->rdims[d];
                pos[d] = 0;
            }
        }
    }
}

int sk_scatter_add(sk_ctx *ctx, sk_dtype t, sc_shape x_shape, const void *x, int nidx, const int *dims,
                   sc_shape idx_shape, const int32_t *const *idx, const void *updates, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || t == SK_BOOL || !sk_valid_shape(x_shape) || !sk_valid_shape(idx_shape) || nidx < 1 ||
        nidx > x_shape.rank || idx_shape.rank + x_shape.rank - nidx > SC_MAX_RANK)
        return SC_ERR;
    Scatter s = {.t = t, .nidx = nidx, .idx = idx, .ni = sk_elems(idx_shape), .per = 1, .u = updates, .out = out};
    int64_t xs[SC_MAX_RANK];
    uint32_t scattered = 0;
    sk_strides(x_shape, xs);
    for (int j = 0; j < nidx; j++) {
        if (dims[j] < 0 || dims[j] >= x_shape.rank || (scattered >> dims[j] & 1))
            return SC_ERR;
        scattered |= 1u << dims[j];
        s.n[j] = x_shape.dims[dims[j]];
        s.stride[j] = xs[dims[j]];
    }
    for (int d = 0; d < x_shape.rank; d++)
        if (!(scattered >> d & 1)) {
            s.rdims[s.nrest] = x_shape.dims[d];
            s.rstride[s.nrest++] = xs[d];
            s.per *= x_shape.dims[d];
        }
    s.rows = s.nrest == 0 || s.rstride[0] * s.rdims[0] == s.per;
    if (!x)
        memset(out, 0, (size_t)sk_elems(x_shape) * sk_dtype_size(t));   /* 0 of every dtype: all bits clear */
    else if (out != x)
        memmove(out, x, (size_t)sk_elems(x_shape) * sk_dtype_size(t));
    if (s.per > 0)
        sk_parallel_ranges(s.per, s.ni * s.per, scatter_range, &s);
    return 0;
}

typedef struct {
    sk_dtype t;
    int64_t n, inner;
    void *out;
} Iota;

/* Rows [lo, hi) of inner elements each, row r holding its index r mod n. */
static void iota_range(void *ctx, int64_t lo, int64_t hi) {
    const Iota *a = ctx;
    int64_t k = lo * a->inner;
    for (int64_t r = lo; r < hi; r++) {
        int64_t i = r % a->n;
        for (int64_t j = 0; j < a->inner; j++, k++) {
            switch (a->t) {
            case SK_I32: ((int32_t *)a->out)[k] = (int32_t)i; break;
            case SK_U32: ((uint32_t *)a->out)[k] = (uint32_t)i; break;
            case SK_I64: ((int64_t *)a->out)[k] = i; break;
            case SK_U8: ((uint8_t *)a->out)[k] = (uint8_t)i; break;
            case SK_BOOL: ((uint8_t *)a->out)[k] = i != 0; break;
            case SK_F64: ((double *)a->out)[k] = (double)i; break;
            default: sk_store_f(a->t, a->out, k, (float)i); break;
            }
        }
    }
}

int sk_iota(sk_ctx *ctx, sk_dtype t, sc_shape s, int dim, void *out) {
    (void)ctx;
    if (!sk_valid_dtype(t) || !sk_valid_shape(s) || dim < 0 || dim >= s.rank)
        return SC_ERR;
    int64_t outer, inner, n = s.dims[dim];
    split(s, dim, &outer, &inner);
    if (n == 0)
        return 0;
    Iota a = {t, n, inner, out};
    sk_parallel_ranges(outer * n, outer * n * inner, iota_range, &a);
    return 0;
}
