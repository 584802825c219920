/* Exchanges along split dims whose extent or block boundaries an op
 * changes move only the rows that cross block boundaries, with
 * collective-permutes, instead of gathering the whole dim.  Here: the
 * machinery of those exchanges (devices, rows, transfers), reshards that
 * move block boundaries, pads and their slices, and slices; concats,
 * rolls, cumsums, reshapes and slot writes are in halo_concat.c. */
#include "halo.h"

#include <stdlib.h>
#include <string.h>

/* x's blocks along `axes`, moved `shift` blocks forward: device c receives
 * the block of device c - shift.  A shift of whole turns moves nothing. */
static int permute_blocks(Part *p, int x, const int *axes, int n, int64_t shift) {
    int64_t k = 1;
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    if (((shift % k) + k) % k == 0)
        return x;
    int64_t *attrs = permute_attrs(p, axes, n, k);
    for (int64_t j = 0; j < k; j++) {
        attrs[1 + n + 2 * j] = j;
        attrs[2 + n + 2 * j] = ((j + shift) % k + k) % k;
    }
    return emit_local(p, OP_COLLECTIVE_PERMUTE, (int32_t[]){x}, 1, attrs, (int)(1 + n + 2 * k), NULL);
}

/* Block x sliced to bounds (starts, then ends, per dim), or x itself when
 * they take it whole. */
int slice_unless_whole(Part *p, int x, const int64_t *bounds) {
    const Shape *s = &p->dst->insts[x].type;
    for (int d = 0; d < s->rank; d++)
        if (bounds[d] != 0 || bounds[s->rank + d] != s->dims[d])
            return emit_local(p, OP_SLICE, (int32_t[]){x}, 1, bounds, 2 * s->rank, NULL);
    return x;
}

int slice_along(Part *p, int x, int dim, int64_t lo, int64_t hi) {
    const Shape *s = &p->dst->insts[x].type;
    if (lo == 0 && hi == s->dims[dim])
        return x;
    int64_t bounds[2 * MAX_RANK];
    for (int d = 0; d < s->rank; d++)
        bounds[d] = d == dim ? lo : 0, bounds[s->rank + d] = d == dim ? hi : s->dims[d];
    return emit_local(p, OP_SLICE, (int32_t[]){x}, 1, bounds, 2 * s->rank, NULL);
}

/* Bytes of one row along dim of the local block v. */
int64_t row_bytes(const Part *p, int v, int dim) {
    Shape s = p->dst->insts[v].type;
    s.dims[dim] = 1;
    return shape_elems(&s) * dtype_size(s.dtype);
}

/* The collectives since `first` are op's exchange of rows from block `of`
 * (the report's move; ex gets its row size here). */
void note_exchange(Part *p, int first, int of, int op, int dim, Exchange *ex) {
    if (!new_collectives(p, first))
        return;
    ex->row_bytes = row_bytes(p, of, dim);
    note_move(p, first, of, op, exchange_min_bytes(p, ex));
}

/* Src value x rolled by `shift` along a split dim of even blocks, as sh
 * splits it.  With the shift s = q blocks + r rows and blocks of b rows, a
 * device's new block is the last r rows of the block q + 1 before it (the
 * halo), then the first b - r rows of the block q before it: each piece is
 * sliced before it is sent, so no more than a block moves.  `segments`
 * (NULL: roll's own) say where the result's rows come from, for the
 * report. */
Piece roll_as(Part *p, int x, int dim, int64_t shift, const Sharding *sh, const Shape *type, int op,
              const Segment *segments, int nsegments) {
    int axes[MAX_AXES], n = sharding_dim_axes(sh, dim, axes);
    Piece xp = reshard(p, p->value[x], sh);
    int first = p->dst->ninsts;
    int64_t d64 = dim, b = p->dst->insts[xp.v].type.dims[dim], q = shift / b, r = shift % b;
    int y = permute_blocks(p, slice_along(p, xp.v, dim, 0, b - r), axes, n, q);
    if (r) {
        int halo = permute_blocks(p, slice_along(p, xp.v, dim, b - r, b), axes, n, q + 1);
        y = emit_local(p, OP_CONCAT, (int32_t[]){halo, y}, 2, &d64, 1, NULL);
    }
    int64_t extent = type->dims[dim], k = extent / b;
    Segment wrap[2] = {{0, 0, shift, extent - shift}, {0, shift, extent - shift, 0}};
    if (!segments)
        segments = shift ? wrap : wrap + 1, nsegments = shift ? 2 : 1;
    Exchange ex = {k, extent, b, &b, segments, nsegments, 0};
    note_exchange(p, first, xp.v, op, dim, &ex);
    p->dst->insts[y].sh = *sh;
    return (Piece){y, *sh, *type, p->place};
}

/* ---- slices along a split dim ---- */


int device_index(Devices *dv) {
    if (dv->index < 0)
        dv->index = linear_index(dv->p, dv->axes, dv->naxes);
    return dv->index;
}

/* Is the per-device value `val` one constant where `care` says it matters? */
static int table_constant(const int64_t *val, const uint8_t *care, int64_t k, int64_t *c) {
    int any = 0;
    *c = 0;
    for (int64_t j = 0; j < k; j++) {
        if (!care[j])
            continue;
        if (any && val[j] != *c)
            return 0;
        *c = val[j];
        any = 1;
    }
    return 1;
}

/* An i32 scalar that is val[j] on the device at index j (where care[j]; the
 * others may get anything): a constant when those agree, start + step * j
 * when they lie on a line, else a select per device on its index. */
static int device_table(Devices *dv, const int64_t *val, const uint8_t *care) {
    Part *p = dv->p;
    int64_t c, first = -1, second = -1;
    if (table_constant(val, care, dv->k, &c))
        return i32_constant(p, c);
    for (int64_t j = 0; j < dv->k && second < 0; j++)
        if (care[j])
            *(first < 0 ? &first : &second) = j;
    int line = (val[second] - val[first]) % (second - first) == 0;
    int64_t step = line ? (val[second] - val[first]) / (second - first) : 0, start = val[first] - step * first;
    for (int64_t j = 0; j < dv->k && line; j++)
        line = !care[j] || val[j] == start + step * j;
    int idx = device_index(dv);
    if (line) {
        int v = step == 1 ? idx : emit_local(p, OP_MUL, (int32_t[]){idx, i32_constant(p, step)}, 2, NULL, 0, NULL);
        return start ? emit_local(p, OP_ADD, (int32_t[]){v, i32_constant(p, start)}, 2, NULL, 0, NULL) : v;
    }
    int v = i32_constant(p, val[first]);
    for (int64_t j = first + 1; j < dv->k; j++) {
        if (!care[j] || val[j] == val[first])
            continue;
        int is = emit_local(p, OP_COMPARE, (int32_t[]){idx, i32_constant(p, j)}, 2, (int64_t[]){CMP_EQ}, 1, NULL);
        v = emit_local(p, OP_SELECT, (int32_t[]){is, i32_constant(p, val[j]), v}, 3, NULL, 0, NULL);
    }
    return v;
}

/* Rows of x along `dim` from a per-device start (a static slice when the
 * start is one constant), `len` rows; x is padded with zeros at both ends
 * when a start would leave it, as a dynamic-slice would clamp it. */
int rows_at(Devices *dv, int x, int dim, const int64_t *start, const uint8_t *care, int64_t len) {
    Part *p = dv->p;
    int64_t lo = 0, hi = p->dst->insts[x].type.dims[dim], c;
    for (int64_t j = 0; j < dv->k; j++)
        if (care[j]) {
            lo = start[j] < lo ? start[j] : lo;
            hi = start[j] + len > hi ? start[j] + len : hi;
        }
    int64_t before = -lo;
    x = pad_zeros(p, x, dim, before, hi - p->dst->insts[x].type.dims[dim]);
    if (table_constant(start, care, dv->k, &c))
        return slice_along(p, x, dim, c + before, c + before + len);
    int64_t *shifted = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)dv->k);
    for (int64_t j = 0; j < dv->k; j++)
        shifted[j] = start[j] + before;
    Shape s = p->dst->insts[x].type;
    int32_t args[1 + MAX_RANK] = {x};
    for (int d = 0; d < s.rank; d++)
        args[1 + d] = d == dim ? device_table(dv, shifted, care) : i32_constant(p, 0);
    s.dims[dim] = len;
    return emit_local(p, OP_DYNAMIC_SLICE, args, 1 + s.rank, NULL, 0, &s);
}

/* What result block j of a slice [lo, hi) needs from operand block q: rows
 * [src, src + len) of it, at row `at` of the block.  Result block j is
 * operand rows [lo + j c, lo + (j + 1) c), those past hi being padding;
 * operand blocks have b rows. */

static Rows rows_from(int64_t lo, int64_t hi, int64_t b, int64_t c, int64_t j, int64_t q) {
    int64_t s = lo + j * c, e = s + c < hi ? s + c : hi;
    int64_t from = s > q * b ? s : q * b, to = e < q * b + b ? e : q * b + b;
    if (to <= from)
        return (Rows){0, 0, 0, 0};
    return (Rows){from - q * b, to - from, from - s, to == e};
}


static int longer_first(const void *a, const void *b) {
    const Transfer *x = a, *y = b;
    if (x->r.len != y->r.len)
        return x->r.len > y->r.len ? -1 : 1;
    if (x->q - x->j != y->q - y->j)
        return x->q - x->j < y->q - y->j ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

/* Select the rows [lo[j], hi[j]) of `placed` into `acc` along dim, on the
 * devices that receive (recv[j]); the others keep `acc`.  A range that
 * starts at row 0 or runs into the block's padding needs one bound only,
 * so the others get an empty range on the side that is compared. */
static int select_rows(Devices *dv, int acc, int placed, int dim, int64_t *lo, int64_t *hi, const uint8_t *recv,
                       const uint8_t *all) {
    Part *p = dv->p;
    Shape pos = p->dst->insts[acc].type;
    int64_t c = pos.dims[dim], d64 = dim, lo0, hi0;
    pos.dtype = DT_I32;
    int lo_none = table_constant(lo, recv, dv->k, &lo0) && lo0 <= 0;
    int hi_none = table_constant(hi, recv, dv->k, &hi0) && hi0 >= c;
    if (lo_none && hi_none) {
        int everyone = 1;
        for (int64_t j = 0; j < dv->k; j++)
            everyone &= recv[j];
        if (everyone)
            return placed;
        hi_none = 0;             /* rows below 0 for the others */
    }
    for (int64_t j = 0; j < dv->k; j++)
        if (!recv[j])
            lo[j] = hi[j] = lo_none ? 0 : c;
    int iota = emit_local(p, OP_IOTA, NULL, 0, &d64, 1, &pos), mask = -1;
    for (int side = 0; side < 2; side++) {
        if (side ? hi_none : lo_none)
            continue;
        int bound = emit_local(p, OP_BROADCAST, (int32_t[]){device_table(dv, side ? hi : lo, all)}, 1, NULL, 0, &pos);
        int cmp = emit_local(p, OP_COMPARE, (int32_t[]){iota, bound}, 2, (int64_t[]){side ? CMP_LT : CMP_GE}, 1, NULL);
        mask = mask < 0 ? cmp : emit_local(p, OP_SELECT, (int32_t[]){mask, cmp, mask}, 3, NULL, 0, NULL);
    }
    return emit_local(p, OP_SELECT, (int32_t[]){mask, placed, acc}, 3, NULL, 0, NULL);
}

/* The rows of a slice that cross devices, in collective-permutes: each
 * permute pairs senders and receivers at most once, takes transfers
 * longest first (first fit), and sends as many rows as its longest; a
 * sender starts where its receiver's rows start (or earlier, to stay in
 * its block), and the receiver puts the rows at their place in its block
 * and keeps only them. */
int permute_transfers(Devices *dv, int y, int dim, Transfer *t, int64_t nt, int acc, int64_t b, int64_t c) {
    Part *p = dv->p;
    int64_t k = dv->k;
    qsort(t, (size_t)nt, sizeof *t, longer_first);
    uint8_t *done = arena_alloc(p->m->arena, (size_t)nt + 1), *used = arena_alloc(p->m->arena, (size_t)(2 * k));
    uint8_t *sends = arena_alloc(p->m->arena, (size_t)k), *all = arena_alloc(p->m->arena, (size_t)k);
    int64_t *tab = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)(4 * k));
    int64_t *off = tab, *start = tab + k, *lo = tab + 2 * k, *hi = tab + 3 * k;
    int64_t *attrs = permute_attrs(p, dv->axes, dv->naxes, k);   /* the pairs are rewritten per permute */
    memset(all, 1, (size_t)k);
    for (int64_t first = 0; first < nt; first++) {
        if (done[first])
            continue;
        memset(used, 0, (size_t)(2 * k));
        memset(sends, 0, (size_t)k);
        memset(tab, 0, sizeof(int64_t) * (size_t)(4 * k));
        int64_t len = t[first].r.len, na = 1 + dv->naxes;
        for (int64_t i = first; i < nt; i++) {
            const Transfer *x = &t[i];
            if (done[i] || used[x->q] || used[k + x->j])
                continue;
            done[i] = used[x->q] = used[k + x->j] = sends[x->q] = 1;
            attrs[na++] = x->q;
            attrs[na++] = x->j;
            off[x->q] = x->r.src < b - len ? x->r.src : b - len;
            start[x->j] = x->r.src - off[x->q] - x->r.at;   /* the piece's row at row 0 of the block */
            lo[x->j] = x->r.at;
            hi[x->j] = x->r.last ? c : x->r.at + x->r.len;
        }
        int piece = rows_at(dv, y, dim, off, sends, len);
        piece = emit_local(p, OP_COLLECTIVE_PERMUTE, (int32_t[]){piece}, 1, attrs, (int)na, NULL);
        int placed = rows_at(dv, piece, dim, start, used + k, c);
        acc = acc < 0 ? placed : select_rows(dv, acc, placed, dim, lo, hi, used + k, all);
    }
    return acc;
}

/* A slice [lo, hi) along a split dim, result blocks of c rows: block j is
 * operand rows [lo + j c, lo + (j + 1) c), which lie in at most two
 * operand blocks of b >= c rows.  The rows a device holds are taken from
 * its own block (at a per-device offset when c != b); the others come in
 * collective-permutes, only the rows each device needs.  When c == b every
 * device needs the same pieces of the same neighbours (the rows r.. of
 * block j + q and ..r of block j + q + 1, lo = q b + r): static slices and
 * one permute each, as for roll; rows wrapped around past the end land in
 * the result's padding. */
int slice_exchange(Devices *dv, int y, int dim, int64_t lo, int64_t hi, int64_t b, int64_t c) {
    Part *p = dv->p;
    int64_t k = dv->k, d64 = dim;
    if (c == b) {
        int64_t q = lo >= 0 ? lo / b : -((-lo + b - 1) / b), r = lo - q * b;   /* floor: a pad's window starts below 0 */
        int head = permute_blocks(p, slice_along(p, y, dim, r, b), dv->axes, dv->naxes, -q);
        if (!r)
            return head;
        int halo = permute_blocks(p, slice_along(p, y, dim, 0, r), dv->axes, dv->naxes, -(q + 1));
        return emit_local(p, OP_CONCAT, (int32_t[]){head, halo}, 2, &d64, 1, NULL);
    }
    Transfer *t = arena_alloc(p->m->arena, sizeof(Transfer) * (size_t)(2 * k + 1));
    int64_t nt = 0, *start = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)k);
    uint8_t *local = arena_alloc(p->m->arena, (size_t)k);
    int any_local = 0;
    for (int64_t j = 0; j < k && lo + j * c < hi; j++) {
        int64_t s = lo + j * c;
        for (int64_t q = s > 0 ? s / b : 0; q < k && q * b < s + c && q * b < hi; q++) {
            Rows r = rows_from(lo, hi, b, c, j, q);
            if (!r.len)
                continue;
            if (q == j) {
                local[j] = 1, any_local = 1;
                start[j] = r.src - r.at;
            } else
                t[nt++] = (Transfer){j, q, r};
        }
    }
    int acc = any_local ? rows_at(dv, y, dim, start, local, c) : -1;
    acc = permute_transfers(dv, y, dim, t, nt, acc, b, c);
    if (acc >= 0)
        return acc;
    Shape s = p->dst->insts[y].type;     /* no real rows anywhere: all padding (a pad's fill) */
    s.dims[dim] = c;
    return splat(p, 0, &s);
}

/* ---- reshards that move a split dim's block boundaries ---- */

/* The one dim whose axes x and `to` differ on, one list a prefix of the
 * other, neither empty (blocks over X to blocks over (X, Y), or back),
 * every other dim split alike; -1: none such. */
int halo_reshard_dim(const Piece *x, const Sharding *to) {
    int dim = -1;
    if (partial_axes(&x->sh) || partial_axes(to))
        return -1;
    for (int d = 0; d < x->global.rank; d++) {
        int a[MAX_AXES], b[MAX_AXES], na = sharding_dim_axes(&x->sh, d, a), nb = sharding_dim_axes(to, d, b);
        int common = na < nb ? na : nb;
        if (na == nb && memcmp(a, b, sizeof(int) * (size_t)na) == 0)
            continue;
        if (dim >= 0 || !common || memcmp(a, b, sizeof(int) * (size_t)common) != 0)
            return -1;           /* held whole on one side: a gather or a slice */
        dim = d;
    }
    return dim;
}

/* x moved to `to` along the dim halo_reshard_dim gives: over the longer
 * list of axes (k devices), device j holds x's block j / (k / kx) (b
 * rows, x's kx blocks) and needs the target's block j / (k / kt) (c
 * rows).  It keeps the rows its own block gives and receives the others,
 * only the rows it needs, as for a slice (permute_transfers), each from
 * the holder of their block at the same place along the axes only the
 * longer list has.  With `gather` (the target's list the shorter), each
 * device receives only its share of its target block (the block split
 * over the axes the target drops), and one all-gather over those axes
 * assembles the block, as GSPMD moves a halo and then gathers. */
void halo_reshard(Part *p, Piece *x, const Sharding *to, int dim, int gather) {
    int ax[MAX_AXES], at[MAX_AXES], nx = sharding_dim_axes(&x->sh, dim, ax), nt = sharding_dim_axes(to, dim, at);
    const int *axes = nx > nt ? ax : at;
    int naxes = nx > nt ? nx : nt;
    int64_t k = 1, kx = 1, kt = 1, n = x->global.dims[dim];
    for (int i = 0; i < naxes; i++) {
        int64_t size = p->m->axis_size[axes[i]];
        k *= size, kx *= i < nx ? size : 1, kt *= i < nt ? size : 1;
    }
    int64_t b = (n + kx - 1) / kx, c = (n + kt - 1) / kt, rx = k / kx, rt = k / kt, ntr = 0;
    int64_t share = gather ? (c + rt - 1) / rt : c;         /* the rows device j receives */
    Transfer *t = arena_alloc(p->m->arena, sizeof(Transfer) * (size_t)(k * (share / b + 2)));   /* blocks per share */
    int64_t *start = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)k);
    uint8_t *local = arena_alloc(p->m->arena, (size_t)k);
    int any_local = 0;
    for (int64_t j = 0; j < k; j++) {
        int64_t end = j / rt * c + c < n ? j / rt * c + c : n, lo = j / rt * c + (gather ? j % rt * share : 0);
        int64_t hi = lo + share < end ? lo + share : end;
        for (int64_t q = lo / b; q < kx && q * b < hi; q++) {
            Rows r = rows_from(lo, hi, b, share, 0, q);
            if (!r.len)
                continue;
            if (q == j / rx) {
                local[j] = 1, any_local = 1;
                start[j] = r.src - r.at;
            } else
                t[ntr++] = (Transfer){j, q * rx + j % rx, r};
        }
    }
    Devices dv = {p, axes, naxes, k, -1};
    int v = any_local ? rows_at(&dv, x->v, dim, start, local, share) : -1;
    v = permute_transfers(&dv, x->v, dim, t, ntr, v, b, share);
    if (v < 0) {                 /* no real rows anywhere */
        Shape s = p->dst->insts[x->v].type;
        s.dims[dim] = share;
        v = splat(p, 0, &s);
    }
    if (gather)
        v = slice_along(p, all_gather_along(p, v, dim, axes + nt, nx - nt), dim, 0, c);
    p->dst->insts[v].sh = *to;
    x->v = v;
    x->sh = *to;
}

/* ---- pads: concats of constants around one value, and their slices ---- */

/* Is src value v a constant everywhere (zeros(T), full(T, c), a constant)? */
static int splat_value(const Fn *src, int v, double *value) {
    const Inst *in = &src->insts[v];
    if (in->op == OP_BROADCAST)
        in = &src->insts[ir_arg(src, in, 0)];
    if (in->op != OP_CONSTANT || in->type.rank != 0)
        return 0;
    *value = in->value;
    return 1;
}

/* A concat of one value x between constants of one value along `dim`: x
 * padded with `low` rows before and `high` after, all `fill`. */
typedef struct {
    int x, dim;
    int64_t low, high;
    double fill;
} Pad;

static int pad_of(const Fn *src, const Inst *in, Pad *pad) {
    if (in->op != OP_CONCAT || !dtype_is_num(in->type.dtype))
        return 0;
    *pad = (Pad){-1, (int)src->ints[in->attrs], 0, 0, 0};
    int nfill = 0;
    for (int i = 0; i < in->nargs; i++) {
        int a = ir_arg(src, in, i);
        double value;
        int64_t rows = src->insts[a].type.dims[pad->dim];
        if (splat_value(src, a, &value)) {
            if (nfill++ && value != pad->fill)
                return 0;
            pad->fill = value;
            *(pad->x < 0 ? &pad->low : &pad->high) += rows;
        } else if (pad->x >= 0)
            return 0;            /* two values: a real concat */
        else
            pad->x = a;
    }
    return pad->x >= 0 && nfill > 0;
}

/* A slice whose operand is a pad and that slices only the pad's dim, split
 * in the result: it reads the padded value's rows directly (a window). */
static int slice_of_pad(const Fn *src, const Inst *in, Pad *pad) {
    if (in->op != OP_SLICE || !pad_of(src, &src->insts[ir_arg(src, in, 0)], pad))
        return 0;
    const Shape *xs = &src->insts[ir_arg(src, in, 0)].type;
    int axes[MAX_AXES];
    for (int d = 0; d < xs->rank; d++)
        if (d != pad->dim && (src->ints[in->attrs + d] != 0 || src->ints[in->attrs + xs->rank + d] != xs->dims[d]))
            return 0;
    return sharding_dim_axes(&in->sh, pad->dim, axes) > 0;
}


/* The slices that concats of slices read (slices_of): the concat reads
 * the sliced value itself, so they are never built. */
static void find_unbuilt_slices(Part *p) {
    const Fn *src = p->src;
    p->unbuilt_slice = arena_alloc(p->m->arena, (size_t)src->ninsts + 1);
    int x;
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v];
        if (slices_of(p, in, &x))
            for (int i = 0; i < in->nargs; i++)
                p->unbuilt_slice[ir_arg(src, in, i)] |= ir_arg(src, in, i) != x;     /* x itself is built */
    }
}

/* The pads only slices of pads read (1), placed where the slices and the
 * padded value are: those slices read the padded value, so the pad itself
 * is never built.  One pass over the uses. */
void find_unbuilt_pads(Part *p) {
    const Fn *src = p->src;
    p->unbuilt_pad = arena_alloc(p->m->arena, (size_t)src->ninsts + 1);
    uint8_t *read = arena_alloc(p->m->arena, (size_t)src->ninsts + 1);
    Pad pad;
    for (int v = 0; v < src->ninsts; v++)
        p->unbuilt_pad[v] = pad_of(src, &src->insts[v], &pad) && src->insts[pad.x].place == src->insts[v].place;
    for (int u = 0; u < src->ninsts; u++)
        for (int i = 0; i < src->insts[u].nargs; i++) {
            int a = ir_arg(src, &src->insts[u], i);
            if (!p->unbuilt_pad[a])
                continue;
            read[a] = 1;
            if (!slice_of_pad(src, &src->insts[u], &pad) || src->insts[u].place != src->insts[a].place)
                p->unbuilt_pad[a] = 0;
        }
    for (int v = 0; v < src->ninsts; v++)
        p->unbuilt_pad[v] &= read[v];
    find_unbuilt_slices(p);
}

/* Block v of a window whose row i on device j is row lo + j c + i of a
 * value of `rows` rows, with the rows outside the value set to `fill`:
 * only the sides the window leaves are compared. */
static int fill_outside(Devices *dv, int v, int dim, int64_t lo, int64_t c, int64_t rows, double fill) {
    Part *p = dv->p;
    Shape pos = p->dst->insts[v].type;
    pos.dtype = DT_I32;
    int64_t d64 = dim, last = lo + dv->k * c;
    int start = emit_local(p, OP_MUL, (int32_t[]){device_index(dv), i32_constant(p, c)}, 2, NULL, 0, NULL);
    if (lo)
        start = emit_local(p, OP_ADD, (int32_t[]){start, i32_constant(p, lo)}, 2, NULL, 0, NULL);
    int row = emit_local(p, OP_ADD, (int32_t[]){emit_local(p, OP_IOTA, NULL, 0, &d64, 1, &pos),
                                                emit_local(p, OP_BROADCAST, (int32_t[]){start}, 1, NULL, 0, &pos)},
                         2, NULL, 0, NULL);
    int in_x = -1;
    for (int side = 0; side < 2; side++) {
        if (side ? last <= rows : lo >= 0)
            continue;
        int cmp = emit_local(p, OP_COMPARE, (int32_t[]){row, splat(p, side ? (double)rows : 0, &pos)}, 2,
                             (int64_t[]){side ? CMP_LT : CMP_GE}, 1, NULL);
        in_x = in_x < 0 ? cmp : emit_local(p, OP_SELECT, (int32_t[]){in_x, cmp, in_x}, 3, NULL, 0, NULL);
    }
    return emit_local(p, OP_SELECT, (int32_t[]){in_x, v, splat(p, fill, &p->dst->insts[v].type)}, 3, NULL, 0, NULL);
}

/* Rows [lo, hi) of src value x along `dim` (rows outside [0, n) are
 * `fill`) as a value with sharding sh: x is split like the result, rows
 * that cross blocks move as for a slice (only x's real rows: what falls
 * outside them is filled here, on the receiving device), and result rows
 * outside x are set to the fill. */
static Piece window(Part *p, int x, int dim, int64_t lo, int64_t hi, double fill, const Sharding *sh,
                    const Shape *type, int op) {
    int axes[MAX_AXES], n = sharding_dim_axes(sh, dim, axes);
    int64_t k = 1, rows = p->src->insts[x].type.dims[dim];
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    Piece xp = reshard(p, p->value[x], sh);
    int first = p->dst->ninsts;
    Devices dv = {p, axes, n, k, -1};
    int64_t b = p->dst->insts[xp.v].type.dims[dim], c = (hi - lo + k - 1) / k;
    int v = slice_exchange(&dv, xp.v, dim, lo, hi < rows ? hi : rows, b, c);
    if (lo < 0 || hi > rows)
        v = fill_outside(&dv, v, dim, lo, c, rows, fill);
    int64_t at = lo < 0 ? -lo : 0, from = lo > 0 ? lo : 0, to = hi < rows ? hi : rows;
    Segment seg = {0, at, to > from ? to - from : 0, from};
    Exchange ex = {k, hi - lo, c, &b, &seg, 1, 0};
    note_exchange(p, first, xp.v, op, dim, &ex);
    p->dst->insts[v].sh = *sh;
    return (Piece){v, *sh, *type, p->place};
}

/* A pad along a split dim (a concat of constants around one value): a
 * window on the value, only the rows that cross blocks moving. */
int lower_split_pad(Part *p, const Inst *in, Piece *out) {
    Pad pad;
    int axes[MAX_AXES];
    if (!pad_of(p->src, in, &pad) || !sharding_dim_axes(&in->sh, pad.dim, axes))
        return 0;
    int64_t rows = p->src->insts[pad.x].type.dims[pad.dim];
    *out = window(p, pad.x, pad.dim, -pad.low, rows + pad.high, pad.fill, &in->sh, &in->type, OP_CONCAT);
    return 1;
}

/* A slice of a pad (a convolution's shifted windows): rows of the padded
 * value, read directly; the pad itself is not built when only such
 * slices read it (pad_read_by_slices_only). */
static int lower_slice_of_pad(Part *p, const Inst *in, Piece *out) {
    Pad pad;
    if (!slice_of_pad(p->src, in, &pad) || !p->unbuilt_pad[ir_arg(p->src, in, 0)])
        return 0;
    int rank = in->type.rank;
    int64_t lo = p->src->ints[in->attrs + pad.dim], hi = p->src->ints[in->attrs + rank + pad.dim];
    *out = window(p, pad.x, pad.dim, lo - pad.low, hi - pad.low, pad.fill, &in->sh, &in->type, OP_SLICE);
    return 1;
}

/* ---- slices of a split dim that the result holds whole ---- */

static int same_dim_axes(const Sharding *a, const Sharding *b, int d) {
    int x[MAX_AXES], y[MAX_AXES], n = sharding_dim_axes(a, d, x);
    if (n != sharding_dim_axes(b, d, y))
        return 0;
    for (int i = 0; i < n; i++)
        if (x[i] != y[i])
            return 0;
    return 1;
}

/* The one sliced dim the operand x splits and the result holds whole, the
 * other dims split alike and the other sliced dims whole in both (-1:
 * none such). */
static int dim_sliced_to_whole(const Fn *src, const Inst *in, const Sharding *xsh) {
    const Shape *xs = &src->insts[ir_arg(src, in, 0)].type;
    int dim = -1, axes[MAX_AXES];
    for (int d = 0; d < xs->rank; d++) {
        int sliced = src->ints[in->attrs + d] != 0 || src->ints[in->attrs + xs->rank + d] != xs->dims[d];
        if (sliced && sharding_dim_axes(xsh, d, axes) && !sharding_dim_axes(&in->sh, d, axes)) {
            if (dim >= 0)
                return -1;
            dim = d;
        } else if (!same_dim_axes(xsh, &in->sh, d) || (sliced && sharding_dim_axes(xsh, d, axes)))
            return -1;
    }
    return dim;
}

/* Each device's share of the rows: `most` rows of its block (b rows) from
 * row off[q] = from[q], or earlier to stay in the block, all-gathered,
 * and the real rows [from[q], to[q]) of each block that holds some kept,
 * in order. */
static int gathered_shares(Devices *dv, int y, int dim, const uint8_t *holds, const int64_t *from, const int64_t *to,
                           int64_t most, int64_t b) {
    Part *p = dv->p;
    int64_t *off = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)dv->k);
    for (int64_t q = 0; q < dv->k; q++)
        off[q] = from[q] < b - most ? from[q] : b - most;
    int all = all_gather_along(p, rows_at(dv, y, dim, off, holds, most), dim, dv->axes, dv->naxes);
    int32_t *parts = arena_alloc(p->m->arena, sizeof(int32_t) * (size_t)dv->k);
    int nparts = 0;
    for (int64_t q = 0; q < dv->k; q++)
        if (holds[q])
            parts[nparts++] = slice_along(p, all, dim, q * most + from[q] - off[q], q * most + to[q] - off[q]);
    int64_t d64 = dim;
    return nparts == 1 ? parts[0] : emit_local(p, OP_CONCAT, parts, nparts, &d64, 1, NULL);
}

/* Rows [lo, lo + m) on every device: each device that holds some (blocks
 * q0..q1, of b rows) places its block's at their rows, the rest of its
 * block falling outside them, the others give zeros, and one all-reduce
 * adds them up. */
static int summed_rows(Devices *dv, int y, int dim, const uint8_t *holds, int64_t lo, int64_t b, int64_t m) {
    Part *p = dv->p;
    int64_t *start = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)dv->k), q0 = -1, q1 = 0;
    for (int64_t q = 0; q < dv->k; q++) {
        start[q] = lo - q * b;               /* the block's row at result row 0 */
        if (holds[q])
            q0 = q0 < 0 ? q : q0, q1 = q;
    }
    int placed = rows_at(dv, y, dim, start, holds, m), mask = -1;
    for (int side = 0; side < 2; side++) {   /* the holders: q0 <= index <= q1 */
        if (side ? q1 == dv->k - 1 : q0 == 0)
            continue;
        int cmp = emit_local(p, OP_COMPARE, (int32_t[]){device_index(dv), i32_constant(p, side ? q1 : q0)}, 2,
                             (int64_t[]){side ? CMP_LE : CMP_GE}, 1, NULL);
        mask = mask < 0 ? cmp : emit_local(p, OP_SELECT, (int32_t[]){mask, cmp, mask}, 3, NULL, 0, NULL);
    }
    if (mask >= 0) {
        Shape s = p->dst->insts[placed].type, pred = s;
        pred.dtype = DT_BOOL;
        mask = emit_local(p, OP_BROADCAST, (int32_t[]){mask}, 1, NULL, 0, &pred);
        placed = emit_local(p, OP_SELECT, (int32_t[]){mask, placed, splat(p, 0, &s)}, 3, NULL, 0, NULL);
    }
    int64_t attrs[1 + MAX_AXES] = {RED_SUM};
    for (int i = 0; i < dv->naxes; i++)
        attrs[1 + i] = dv->axes[i];
    return emit_local(p, OP_ALL_REDUCE, (int32_t[]){placed}, 1, attrs, 1 + dv->naxes, NULL);
}

/* A slice [lo, hi) of a split dim whose result holds the dim whole (a
 * result too short to split, as x[0:1]): only the blocks that hold rows
 * of it have anything to give.  Each device cuts its share of [lo, hi)
 * from its block, L rows (the most any block holds, at a per-device
 * offset).  One all-gather of L rows replaces the gather of whole blocks,
 * and every device keeps the real rows of each share; or, when it sends
 * fewer bytes (a short slice from few of many blocks: an element, as GSPMD
 * broadcasts it from its owner), each device places its block's rows
 * among the result's, zeros elsewhere, and one all-reduce adds them up
 * (summed_rows; -0.0 comes back as 0.0, as in GSPMD).  When
 * the gather is cheaper and a block holds L == b rows, the whole gather is
 * as cheap, and the rule lowers it, as it does when x was gathered
 * before. */
static int lower_slice_to_whole(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    Piece x = p->value[ir_arg(src, in, 0)];
    int dim = partial_axes(&x.sh) || partial_axes(&in->sh) ? -1 : dim_sliced_to_whole(src, in, &x.sh);
    if (dim < 0 || !dtype_is_num(in->type.dtype) || reshard_done(p, &x, &in->sh))
        return 0;                /* the rule slices a gather done before, for free */
    int rank = in->type.rank, axes[MAX_AXES], n = sharding_dim_axes(&x.sh, dim, axes);
    int64_t k = 1, lo = src->ints[in->attrs + dim], hi = src->ints[in->attrs + rank + dim], most = 0;
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    int64_t b = p->dst->insts[x.v].type.dims[dim];
    int64_t *from = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)(2 * k)), *to = from + k;
    uint8_t *holds = arena_alloc(p->m->arena, (size_t)k);
    for (int64_t q = 0; q < k; q++) {
        from[q] = lo > q * b ? lo - q * b : 0;
        to[q] = hi < (q + 1) * b ? hi - q * b : b;
        holds[q] = to[q] > from[q];
        most = holds[q] && to[q] - from[q] > most ? to[q] - from[q] : most;
    }
    int64_t bounds[2 * MAX_RANK];
    const Shape *local = &p->dst->insts[x.v].type;
    for (int d = 0; d < rank; d++) {         /* the other dims slice locally */
        int whole = d == dim || sharding_dim_axes(&x.sh, d, axes) > 0;
        bounds[d] = whole ? 0 : src->ints[in->attrs + d];
        bounds[rank + d] = whole ? local->dims[d] : src->ints[in->attrs + rank + d];
    }
    int64_t row = dtype_size(in->type.dtype);
    for (int d = 0; d < rank; d++)
        row *= d == dim ? 1 : bounds[rank + d] - bounds[d];
    int64_t gathered = (k - 1) * most * row;
    /* the all-reduce's bytes, as the report counts them */
    int64_t summed = (int64_t)(2.0 * (double)(k - 1) * (double)((hi - lo) * row) / (double)k);
    if (summed >= gathered && most >= b)
        return 0;
    n = sharding_dim_axes(&x.sh, dim, axes);
    int first = p->dst->ninsts, y = slice_unless_whole(p, x.v, bounds);
    Devices dv = {p, axes, n, k, -1};
    int v = summed < gathered ? summed_rows(&dv, y, dim, holds, lo, b, hi - lo)
                              : gathered_shares(&dv, y, dim, holds, from, to, most, b);
    note_move(p, first, y, OP_SLICE, summed < gathered ? summed : gathered);
    p->dst->insts[v].sh = in->sh;
    *out = (Piece){v, in->sh, in->type, p->place};
    return 1;
}

/* A slice along a split dim (one at a time): the operand is split like the
 * result, the other dims slice locally, and the split dim exchanges only
 * the rows that cross blocks (slice_exchange), with no all-gather. */
static int split_slice_as(Part *p, const Inst *in, const Sharding *sh, Piece *out) {
    const Fn *src = p->src;
    const Shape *xs = &src->insts[ir_arg(src, in, 0)].type;
    int rank = xs->rank, dim = -1;
    for (int d = 0; d < rank; d++) {
        int64_t lo = src->ints[in->attrs + d], hi = src->ints[in->attrs + rank + d];
        int axes[MAX_AXES];
        if ((lo != 0 || hi != xs->dims[d]) && sharding_dim_axes(sh, d, axes)) {
            if (dim >= 0)
                return 0;            /* one shifted dim at a time */
            dim = d;
        }
    }
    if (dim < 0)
        return 0;
    int axes[MAX_AXES], n = sharding_dim_axes(sh, dim, axes);
    int64_t k = 1, lo = src->ints[in->attrs + dim], hi = src->ints[in->attrs + rank + dim];
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    Sharding want = *sh;      /* the operand is split like the result */
    Piece x = reshard(p, p->value[ir_arg(src, in, 0)], &want);
    int64_t bounds[2 * MAX_RANK];
    const Shape *local = &p->dst->insts[x.v].type;
    for (int d = 0; d < rank; d++) {         /* the other dims slice locally */
        int64_t dlo = src->ints[in->attrs + d], dhi = src->ints[in->attrs + rank + d];
        int whole = d == dim || (dlo == 0 && dhi == xs->dims[d]);
        bounds[d] = whole ? 0 : dlo;
        bounds[rank + d] = whole ? local->dims[d] : dhi;
    }
    int y = slice_unless_whole(p, x.v, bounds);
    Devices dv = {p, axes, n, k, -1};
    int64_t b = local->dims[dim], c = (hi - lo + k - 1) / k;
    int first = p->dst->ninsts, v = slice_exchange(&dv, y, dim, lo, hi, b, c);
    Segment rows = {0, 0, hi - lo, lo};
    Exchange ex = {k, hi - lo, c, &b, &rows, 1, 0};
    note_exchange(p, first, y, OP_SLICE, dim, &ex);
    p->dst->insts[v].sh = *sh;
    *out = (Piece){v, *sh, in->type, p->place};
    return 1;
}

/* The sharding the function returns src value v with, when the return is
 * its only user and fixes it (NULL: none such). */
static const Sharding *returned_as(const Part *p, int v) {
    int u = p->only_user[v];
    if (u < 0 || p->src->insts[u].op != OP_RETURN)
        return NULL;
    const Inst *ret = &p->src->insts[u];
    for (int i = 0; i < ret->nargs; i++)
        if (ir_arg(p->src, ret, i) == v && !p->dst->results[i].sh.open)
            return &p->dst->results[i].sh;
    return NULL;
}

/* A slice along a split dim, or of one the result holds whole.  A result
 * too short to split (x[0:1]: propagation splits no dim into more blocks
 * than it has rows) that the function returns split is sliced straight to
 * the returned sharding: its blocks stay where the rows are. */
int lower_split_slice(Part *p, const Inst *in, Piece *out) {
    if (p->unbuilt_slice[in - p->src->insts]) {
        *out = (Piece){-1, in->sh, in->type, p->place};     /* its concat reads the sliced value */
        return 1;
    }
    if (lower_slice_of_pad(p, in, out) || split_slice_as(p, in, &in->sh, out))
        return 1;
    const Sharding *ret = returned_as(p, (int)(in - p->src->insts));
    if (ret && !partial_axes(&in->sh) && split_slice_as(p, in, ret, out))
        return 1;
    return lower_slice_to_whole(p, in, out);
}

