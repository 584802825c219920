/* Exchanges for concats along split dims (rotations and other concats of
 * slices of one value, rolls, uneven concats), cumsums, reshapes that move
 * a split dim's boundaries, and writes into a slot along a split dim: each
 * moves only the rows that cross block boundaries (halo.c has the
 * exchange machinery). */
#include "halo.h"

#include <stdlib.h>
#include <string.h>

/* ---- concats of slices of one value: rotations and rearrangements ---- */

/* The one dim the src slice `in` cuts ([lo, hi)), the others whole (-1:
 * not a slice, or it cuts several). */
static int sliced_dim(const Fn *src, const Inst *in, int64_t *lo, int64_t *hi) {
    if (in->op != OP_SLICE)
        return -1;
    const Shape *xs = &src->insts[ir_arg(src, in, 0)].type;
    int dim = -1;
    for (int d = 0; d < xs->rank; d++) {
        int64_t a = src->ints[in->attrs + d], e = src->ints[in->attrs + xs->rank + d];
        if (a == 0 && e == xs->dims[d])
            continue;
        if (dim >= 0)
            return -1;
        dim = d, *lo = a, *hi = e;
    }
    return dim;
}

/* Rows [lo, hi) of x that piece i of the concat `in` is: x itself, or a
 * slice of it along dim. */
static void piece_rows(const Fn *src, const Inst *in, int i, int x, int dim, int64_t *lo, int64_t *hi) {
    int a = ir_arg(src, in, i);
    if (a == x)
        *lo = 0, *hi = src->insts[x].type.dims[dim];
    else
        sliced_dim(src, &src->insts[a], lo, hi);
}

/* Where the pieces of a concat of slices of x put x's rows: piece i is
 * x's rows [lo, hi) at the result's row `at` (the report's segments, and
 * the runs that move). */
static Segment *concat_segments(const Part *p, const Inst *in, int x, int dim) {
    Segment *seg = arena_alloc(p->m->arena, sizeof(Segment) * (size_t)in->nargs);
    int64_t at = 0;
    for (int i = 0; i < in->nargs; i++) {
        int64_t lo = 0, hi = 0;
        piece_rows(p->src, in, i, x, dim, &lo, &hi);
        seg[i] = (Segment){0, at, hi - lo, lo};
        at += hi - lo;
    }
    return seg;
}

/* The runs of x's rows that the result blocks hold when segments seg put
 * x's rows in a result of m rows (result blocks of c rows, x's of b, k
 * devices), by x block q: for block j, the first run of its own block's
 * rows sets from[j] (kept on the device), the others become transfers (t
 * may be NULL: counted only).  The segments are walked once, in order.
 * -1 when a block holds two runs of its own rows (one device cannot keep
 * both). */
static int64_t slice_runs(int64_t m, const Segment *seg, int64_t k, int64_t b, int64_t c, Transfer *t, int64_t *from,
                          uint8_t *local) {
    int64_t nt = 0;
    int i = 0;
    for (int64_t j = 0; j < k && j * c < m; j++) {
        int64_t s = j * c, real = m - s < c ? m - s : c;
        for (int64_t pos = s; pos < s + real;) {
            while (seg[i].at + seg[i].len <= pos)       /* the segment that holds result row pos */
                i++;
            int64_t end = seg[i].at + seg[i].len, e = s + real < end ? s + real : end;
            int64_t g = seg[i].src + pos - seg[i].at;
            for (int64_t q = g / b; q * b < g + e - pos; q++) {
                int64_t from_row = g > q * b ? g : q * b, to = g + e - pos < q * b + b ? g + e - pos : q * b + b;
                Rows r = {from_row - q * b, to - from_row, pos - s + from_row - g, pos - s + to - g == real};
                if (q == j && local[j])
                    return -1;
                if (q == j)
                    local[j] = 1, from[j] = r.src - r.at;
                else if (t)
                    t[nt++] = (Transfer){j, q, r};
                else
                    nt++;
            }
            pos = e;
        }
    }
    return nt;
}

static int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

/* A concat along a split dim of slices of one value x along that dim (or x
 * itself), each slice read by the concat only, x split along the dim too
 * (held whole, x slices locally for free) and built (not a pad only its
 * slices read): every result block's rows are runs of x's rows, which move
 * straight from x's blocks, so the slices are never built
 * (find_unbuilt_slices).  Not when a block would hold two runs of its own
 * rows.  Any dtype: rows are only sliced, sent and selected. */
int slices_of(const Part *p, const Inst *in, int *x) {
    const Fn *src = p->src;
    if (in->op != OP_CONCAT || in->nargs < 2 || partial_axes(&in->sh))
        return 0;
    int dim = (int)src->ints[in->attrs], axes[MAX_AXES], na = sharding_dim_axes(&in->sh, dim, axes);
    int64_t lo, hi, k = 1;
    if (!na || in->type.dims[dim] == 0)
        return 0;
    *x = ir_arg(src, in, 0);                  /* x: what the first slice slices, else the first piece */
    for (int i = 0, found = 0; i < in->nargs && !found; i++)
        if ((found = src->insts[ir_arg(src, in, i)].op == OP_SLICE))
            *x = ir_arg(src, &src->insts[ir_arg(src, in, i)], 0);
    if (src->insts[*x].place != in->place || p->unbuilt_pad[*x] || !sharding_dim_axes(&src->insts[*x].sh, dim, axes))
        return 0;
    for (int i = 0; i < in->nargs; i++) {
        const Inst *s = &src->insts[ir_arg(src, in, i)];
        if (ir_arg(src, in, i) == *x)
            continue;
        if (sliced_dim(src, s, &lo, &hi) != dim || ir_arg(src, s, 0) != *x || s->place != in->place ||
            p->only_user[ir_arg(src, in, i)] != in - src->insts)
            return 0;
    }
    for (int i = 0; i < na; i++)
        k *= p->m->axis_size[axes[i]];
    int64_t *from = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)k);
    uint8_t *local = arena_alloc(p->m->arena, (size_t)k);
    return slice_runs(in->type.dims[dim], concat_segments(p, in, *x, dim), k,
                      ceil_div(src->insts[*x].type.dims[dim], k), ceil_div(in->type.dims[dim], k), NULL, from,
                      local) >= 0;
}

/* Is the concat of slices x rotated: each slice starting where the one
 * before ends (past the end: at 0), all n rows of x?  Row i of the result
 * is then row (i + start) mod n of x. */
static int rotation_start(const Fn *src, const Inst *in, int x, int dim, int64_t n, int64_t *start) {
    int64_t next = 0, lo = 0, hi = 0;
    *start = 0;
    for (int i = 0; i < in->nargs; i++) {
        piece_rows(src, in, i, x, dim, &lo, &hi);
        if (i && lo != next)
            return 0;
        if (!i)
            *start = lo;
        next = hi == n ? 0 : hi;
    }
    return in->type.dims[dim] == n && next == *start;
}

/* Src value x's rows placed along a split dim as the segments say (a
 * result of `type`, split as sh): each device keeps the rows of its own
 * block it holds and receives only the runs of rows from other blocks (as
 * for a slice), never the whole operand.  0 when a block would hold two
 * runs of its own rows. */
static int runs_as(Part *p, int x, int dim, const Segment *seg, int nseg, const Sharding *sh, const Shape *type, int op,
                   Piece *out) {
    int axes[MAX_AXES], na = sharding_dim_axes(sh, dim, axes);
    int64_t k = 1, n = p->src->insts[x].type.dims[dim], m = type->dims[dim];
    for (int i = 0; i < na; i++)
        k *= p->m->axis_size[axes[i]];
    int64_t b = ceil_div(n, k), c = ceil_div(m, k);
    int64_t *from = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)k);
    uint8_t *local = arena_alloc(p->m->arena, (size_t)k);
    int64_t nt = slice_runs(m, seg, k, b, c, NULL, from, local);
    if (nt < 0)
        return 0;
    Transfer *t = arena_alloc(p->m->arena, sizeof(Transfer) * (size_t)(nt + 1));
    memset(local, 0, (size_t)k);
    slice_runs(m, seg, k, b, c, t, from, local);
    Piece xp = reshard(p, p->value[x], sh);
    int first = p->dst->ninsts, any_local = 0;
    for (int64_t j = 0; j < k; j++)
        any_local |= local[j];
    Devices dv = {p, axes, na, k, -1};
    int acc = any_local ? rows_at(&dv, xp.v, dim, from, local, c) : -1;
    acc = permute_transfers(&dv, xp.v, dim, t, nt, acc, b, c);
    Exchange ex = {k, m, c, &b, seg, nseg, 0};
    note_exchange(p, first, xp.v, op, dim, &ex);
    p->dst->insts[acc].sh = *sh;
    *out = (Piece){acc, *sh, *type, p->place};
    return 1;
}

/* roll along a split dim: on even blocks two static slices and permutes
 * (roll_as); on padded ones the runs of rows of its two pieces, x's last
 * `shift` rows then its first, as for a rotation written as a concat of
 * slices. */
int lower_split_roll(Part *p, const Inst *in, Piece *out) {
    int64_t shift = p->src->ints[in->attrs], dim = p->src->ints[in->attrs + 1], n = in->type.dims[dim];
    int axes[MAX_AXES], x = ir_arg(p->src, in, 0);
    if (!sharding_dim_axes(&in->sh, (int)dim, axes) || n == 0)
        return 0;
    if (dim_is_even(p->m, &in->type, &in->sh, (int)dim)) {
        *out = roll_as(p, x, (int)dim, shift, &in->sh, &in->type, OP_ROLL, NULL, 0);
        return 1;
    }
    Segment wrap[2] = {{0, 0, shift, n - shift}, {0, shift, n - shift, 0}};
    return runs_as(p, x, (int)dim, shift ? wrap : wrap + 1, shift ? 2 : 1, &in->sh, &in->type, OP_ROLL, out);
}

/* A concat of slices of one value along a split dim (slices_of): a
 * rotation on even blocks is a roll, any other the runs of rows that
 * move (runs_as). */
static int lower_slices_concat(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    int x, dim = (int)src->ints[in->attrs];
    if (!slices_of(p, in, &x))
        return 0;
    int64_t start, n = src->insts[x].type.dims[dim];
    Segment *seg = concat_segments(p, in, x, dim);
    if (rotation_start(src, in, x, dim, n, &start) && dim_is_even(p->m, &in->type, &in->sh, dim)) {
        *out = roll_as(p, x, dim, (n - start) % n, &in->sh, &in->type, OP_CONCAT, seg, in->nargs);
        return 1;
    }
    return runs_as(p, x, dim, seg, in->nargs, &in->sh, &in->type, OP_CONCAT, out);
}

/* One run of rows that moves for a concat along a split dim: rows
 * [lo, lo + len) of operand `part`'s block go to row `at` of the result
 * block, from device block `src` to device block `dst`. */
typedef struct {
    int part;
    int64_t lo, len, at, src, dst;
} Run;

static int same_move(const Run *a, const Run *b) {
    return a->part == b->part && a->lo == b->lo && a->len == b->len && a->at == b->at;
}

/* `piece` on the devices listed (by their index over `axes`), zeros on the
 * others, as a permute would leave it: a run that stays on its device
 * needs no transfer. */
static int keep_on(Part *p, int piece, const int *axes, int n, const int64_t *devices, int ndevices) {
    Shape s = p->dst->insts[piece].type, mask = s;
    mask.dtype = DT_BOOL;
    int acc = splat(p, 0, &s);
    int index = linear_index(p, axes, n);
    for (int i = 0; i < ndevices; i++) {
        int here = emit_local(p, OP_COMPARE, (int32_t[]){index, i32_constant(p, devices[i])}, 2,
                              (int64_t[]){CMP_EQ}, 1, NULL);
        here = emit_local(p, OP_BROADCAST, (int32_t[]){here}, 1, NULL, 0, &mask);
        acc = emit_local(p, OP_SELECT, (int32_t[]){here, piece, acc}, 3, NULL, 0, NULL);
    }
    return acc;
}

/* Is some operand of `in` split along dim?  Operands all held whole concat
 * locally, and the result's blocks are sliced from that for free. */
static int any_split_along(const Part *p, const Inst *in, int dim) {
    int axes[MAX_AXES];
    for (int i = 0; i < in->nargs; i++)
        if (sharding_dim_axes(&p->value[ir_arg(p->src, in, i)].sh, dim, axes))
            return 1;
    return 0;
}

/* concat along a split dim: every row moves once, directly to the block
 * that holds it in the result.  Runs with the same shape (operand, rows,
 * place) travel in one collective-permute; a device receives zeros where it
 * gets nothing, so adding the received runs, each padded to a block,
 * assembles the block. */
int lower_split_concat(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    if (p->unbuilt_pad[in - src->insts]) {
        *out = (Piece){-1, in->sh, in->type, p->place};      /* its slices read the padded value */
        return 1;
    }
    if (lower_split_pad(p, in, out) || lower_slices_concat(p, in, out))
        return 1;
    int64_t dim = src->ints[in->attrs];
    int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, (int)dim, axes);
    int64_t k = 1, total = in->type.dims[dim];
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    if (!n || !dtype_is_num(in->type.dtype) || !any_split_along(p, in, (int)dim))
        return 0;
    int64_t B = (total + k - 1) / k, nruns = 0, cap = 2 * k * (in->nargs + 1);   /* blocks of B >= b: 2 runs each */
    Run *runs = arena_alloc(p->m->arena, sizeof(Run) * (size_t)cap);
    int32_t *parts = arena_alloc(p->m->arena, sizeof(int32_t) * (size_t)(in->nargs + 1));   /* any count */
    int64_t offset = 0;
    for (int i = 0; i < in->nargs; i++) {
        Sharding want = in->sh;
        parts[i] = reshard(p, p->value[ir_arg(src, in, i)], &want).v;
        int64_t size = src->insts[ir_arg(src, in, i)].type.dims[dim], b = (size + k - 1) / k;
        for (int64_t j = 0; j < k; j++) {         /* block j of operand i: result rows offset + j b .. */
            int64_t real = size - j * b < b ? size - j * b : b;      /* its padding moves nowhere */
            for (int64_t row = 0; row < real;) {
                int64_t g = offset + j * b + row, c = g / B, len = real - row < B - g % B ? real - row : B - g % B;
                if (nruns < cap)
                    runs[nruns++] = (Run){i, row, len, g % B, j, c};
                row += len;
            }
        }
        offset += size;
    }
    int acc = -1, first = p->dst->ninsts;
    uint8_t *done = arena_alloc(p->m->arena, (size_t)nruns + 1), *used = arena_alloc(p->m->arena, (size_t)(2 * k));
    int64_t *at_of = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)k);
    Devices dv = {p, axes, n, k, -1};
    for (int64_t r = 0; r < nruns; r++) {
        if (done[r])
            continue;
        /* Gather the runs of this shape into one permute; those that stay
         * on their device are kept there instead. */
        int64_t *attrs = permute_attrs(p, axes, n, k);
        int64_t *stay = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)k);
        int na = 1 + n, nstay = 0, mixed = 0;
        memset(used, 0, (size_t)(2 * k));
        for (int64_t q = r; q < nruns; q++)
            if (!done[q] && same_move(&runs[r], &runs[q])) {
                done[q] = 1;
                if (runs[q].src == runs[q].dst) {
                    stay[nstay++] = runs[q].src;
                    continue;
                }
                attrs[na++] = runs[q].src;
                attrs[na++] = runs[q].dst;
                used[runs[q].src] = used[k + runs[q].dst] = 1;
                at_of[runs[q].dst] = runs[q].at;
            }
        int piece = slice_along(p, parts[runs[r].part], (int)dim, runs[r].lo, runs[r].lo + runs[r].len);
        int sent = piece;
        /* Runs of other shapes but as many rows, between devices this
         * permute leaves free, ride along: each sender picks its run, each
         * receiver puts it at its place. */
        for (int64_t q = r + 1; na > 1 + n && q < nruns; q++) {
            const Run *o = &runs[q];
            if (done[q] || o->src == o->dst || o->len != runs[r].len || used[o->src] || used[k + o->dst])
                continue;
            done[q] = used[o->src] = used[k + o->dst] = 1;
            attrs[na++] = o->src;
            attrs[na++] = o->dst;
            at_of[o->dst] = o->at;
            mixed |= o->at != runs[r].at;
            int here = emit_local(p, OP_COMPARE, (int32_t[]){device_index(&dv), i32_constant(p, o->src)}, 2,
                                  (int64_t[]){CMP_EQ}, 1, NULL);
            Shape mask = p->dst->insts[sent].type;
            mask.dtype = DT_BOOL;
            here = emit_local(p, OP_BROADCAST, (int32_t[]){here}, 1, NULL, 0, &mask);
            int other = slice_along(p, parts[o->part], (int)dim, o->lo, o->lo + o->len);
            sent = emit_local(p, OP_SELECT, (int32_t[]){here, other, sent}, 3, NULL, 0, NULL);
        }
        if (na > 1 + n) {
            int moved = emit_local(p, OP_COLLECTIVE_PERMUTE, (int32_t[]){sent}, 1, attrs, na, NULL), placed;
            if (mixed) {             /* each receiver's run at its own place: rows from -at */
                for (int64_t j = 0; j < k; j++)
                    at_of[j] = -at_of[j];
                placed = rows_at(&dv, moved, (int)dim, at_of, used + k, B);
            } else
                placed = pad_zeros(p, moved, (int)dim, runs[r].at, B - runs[r].at - runs[r].len);
            acc = acc < 0 ? placed : emit_local(p, OP_ADD, (int32_t[]){acc, placed}, 2, NULL, 0, NULL);
        }
        if (nstay) {
            int kept = nstay == k ? piece : keep_on(p, piece, axes, n, stay, nstay);
            int placed = pad_zeros(p, kept, (int)dim, runs[r].at, B - runs[r].at - runs[r].len);
            acc = acc < 0 ? placed : emit_local(p, OP_ADD, (int32_t[]){acc, placed}, 2, NULL, 0, NULL);
        }
    }
    Segment *seg = arena_alloc(p->m->arena, sizeof(Segment) * (size_t)(in->nargs + 1));
    int64_t *blocks = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)(in->nargs + 1));
    int64_t at = 0;
    for (int i = 0; i < in->nargs; i++) {
        int64_t size = src->insts[ir_arg(src, in, i)].type.dims[dim];
        seg[i] = (Segment){i, at, size, 0};
        blocks[i] = (size + k - 1) / k;
        at += size;
    }
    Exchange ex = {k, total, B, blocks, seg, in->nargs, 0};
    note_exchange(p, first, parts[0], OP_CONCAT, (int)dim, &ex);
    p->dst->insts[acc].sh = in->sh;
    *out = (Piece){acc, in->sh, in->type, p->place};
    return 1;
}

/* ---- cumsum along a split dim ---- */

/* The sum of the blocks before this device's along `axes`: `totals` holds
 * one row per block (all-gathered along dim, in device order), and rows at
 * or after the device's index are masked to 0 before summing them. */
static int earlier_blocks_sum(Part *p, int totals, int dim, const int *axes, int n) {
    Shape s = p->dst->insts[totals].type, pos = s;
    pos.dtype = DT_I32;
    int64_t d = dim;
    int iota = emit_local(p, OP_IOTA, NULL, 0, &d, 1, &pos);
    int me = emit_local(p, OP_BROADCAST, (int32_t[]){linear_index(p, axes, n)}, 1, NULL, 0, &pos);
    int before = emit_local(p, OP_COMPARE, (int32_t[]){iota, me}, 2, (int64_t[]){CMP_LT}, 1, NULL);
    Shape scalar = {s.dtype, 0, {0}};
    int zero = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &scalar);
    p->dst->insts[zero].value = 0;
    int zeros = emit_local(p, OP_BROADCAST, (int32_t[]){zero}, 1, NULL, 0, &s);
    int masked = emit_local(p, OP_SELECT, (int32_t[]){before, totals, zeros}, 3, NULL, 0, NULL);
    return emit_local(p, OP_REDUCE, (int32_t[]){masked}, 1, (int64_t[]){RED_SUM, dim}, 2, NULL);
}

/* cumsum along a split dim: each device scans its block, then adds the sum
 * of the blocks before it.  Only the blocks' totals (their last rows)
 * move, in one all-gather of a row per device: a permute chain would send
 * less (one row) but take k - 1 steps in sequence.  The padding of uneven
 * blocks is zeroed first, so a last row is its block's total.  bf16 and f16
 * are scanned in f32 and rounded once, as their sums accumulate. */
int lower_split_cumsum(Part *p, const Inst *in, Piece *out) {
    int dim = (int)p->src->ints[in->attrs];
    int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, dim, axes);
    if (!n)
        return 0;
    Piece x = reshard(p, p->value[ir_arg(p->src, in, 0)], &in->sh);
    int first = p->dst->ninsts, operand = x.v, narrow = in->type.dtype == DT_BF16 || in->type.dtype == DT_F16;
    Shape local = p->dst->insts[x.v].type, wide = local;
    if (narrow) {
        wide.dtype = DT_F32;
        x.v = emit_local(p, OP_CONVERT, (int32_t[]){x.v}, 1, NULL, 0, &wide);
    }
    if (!dim_is_even(p->m, &in->type, &in->sh, dim))
        x.v = mask_padding(p, x, dim, RED_SUM);
    int64_t d = dim, b = local.dims[dim], map[MAX_RANK];
    int scan = emit_local(p, OP_CUMSUM, (int32_t[]){x.v}, 1, &d, 1, NULL);
    int totals = all_gather_along(p, slice_along(p, scan, dim, b - 1, b), dim, axes, n);
    int offset = earlier_blocks_sum(p, totals, dim, axes, n);
    for (int i = 0; i < local.rank - 1; i++)
        map[i] = i < dim ? i : i + 1;
    offset = emit_local(p, OP_BROADCAST, (int32_t[]){offset}, 1, map, local.rank - 1, &wide);
    int y = emit_local(p, OP_ADD, (int32_t[]){scan, offset}, 2, NULL, 0, NULL);
    if (narrow)
        y = emit_local(p, OP_CONVERT, (int32_t[]){y}, 1, NULL, 0, &local);
    if (new_collectives(p, first))
        note_move(p, first, operand, OP_CUMSUM, row_bytes(p, scan, dim));
    p->dst->insts[y].sh = in->sh;
    *out = (Piece){y, in->sh, in->type, p->place};
    return 1;
}

/* ---- reshapes that move a split dim's boundaries ---- */

static int64_t dims_product(const Shape *s, int from, int to) {
    int64_t n = 1;
    for (int d = from; d < to; d++)
        n *= s->dims[d];
    return n;
}

/* The one dim sh splits (-1: none or several), and its axes. */
static int only_split_dim(const Sharding *sh, int rank, int *axes, int *n) {
    int dim = -1;
    for (int d = 0; d < rank; d++)
        if (sharding_dim_axes(sh, d, axes)) {
            if (dim >= 0)
                return -1;
            dim = d;
        }
    if (dim >= 0)
        *n = sharding_dim_axes(sh, dim, axes);
    return dim;
}

/* A reshape that merges or splits the split dim with whole minor dims
 * (s32[2,3,7@X,10] -> s32[3,2,1,14@X,5]): the dims before the split dim
 * hold as many elements on both sides (P), so both blocks are ranges of
 * one flat dim of n rows of P elements, [P, n].  The block boundaries
 * move in it (40 flat rows to 35 above), and only the rows that cross them
 * move, as for a slice [0, n) of blocks b to blocks c; when they stay put
 * (b == c) the local reshape is exact and the rule lowers it. */
int lower_split_reshape(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    int x = ir_arg(src, in, 0), axes[MAX_AXES], naxes = 0, xaxes[MAX_AXES], nx = 0;
    const Shape *xs = &src->insts[x].type, *ys = &in->type;
    int dy = only_split_dim(&in->sh, ys->rank, axes, &naxes);
    int dx = only_split_dim(&p->value[x].sh, xs->rank, xaxes, &nx);
    if (dy < 0 || partial_axes(&in->sh) || !dtype_is_num(ys->dtype))
        return 0;
    int64_t pre = dims_product(ys, 0, dy), k = 1;
    for (int i = 0; i < naxes; i++)
        k *= p->m->axis_size[axes[i]];
    if (dx < 0 || dims_product(xs, 0, dx) != pre)
        for (dx = 0; dx < xs->rank && (dims_product(xs, 0, dx) != pre || xs->dims[dx] == 1); dx++)
            ;                    /* the operand is split where the flat rows start */
    if (dx >= xs->rank || dims_product(xs, 0, dx) != pre)
        return 0;
    int64_t rx = dims_product(xs, dx + 1, xs->rank), ry = dims_product(ys, dy + 1, ys->rank);
    int64_t n = xs->dims[dx] * rx, b = (xs->dims[dx] + k - 1) / k * rx, cy = (ys->dims[dy] + k - 1) / k, c = cy * ry;
    if (b == c)
        return 0;
    Sharding want = sharding_replicated();
    for (int i = 0; i < naxes; i++)
        want.dim[axes[i]] = (int8_t)dx, want.pos[axes[i]] = (uint8_t)i;
    Piece xp = reshard(p, p->value[x], &want);
    int first = p->dst->ninsts;
    Shape flat = {ys->dtype, 2, {pre, b}}, local = *ys;
    local.dims[dy] = cy;
    int v = emit_local(p, OP_RESHAPE, (int32_t[]){xp.v}, 1, NULL, 0, &flat);
    Devices dv = {p, axes, naxes, k, -1};
    v = slice_exchange(&dv, v, 1, 0, n, b, c);
    v = emit_local(p, OP_RESHAPE, (int32_t[]){v}, 1, NULL, 0, &local);
    Segment rows = {0, 0, n, 0};
    Exchange ex = {k, n, c, &b, &rows, 1, 0};
    if (new_collectives(p, first)) {
        ex.row_bytes = pre * dtype_size(ys->dtype);
        note_move(p, first, xp.v, OP_RESHAPE, exchange_min_bytes(p, &ex));
    }
    p->dst->insts[v].sh = in->sh;
    *out = (Piece){v, in->sh, in->type, p->place};
    return 1;
}

/* ---- dynamic-update-slice along split dims ---- */

/* The dims sh splits that a write of update extents u into a value of
 * `type` may start anywhere in (u < extent), as a mask. */
static uint32_t moving_write_dims(const Sharding *sh, const Shape *type, const Shape *u) {
    uint32_t dims = 0;
    int axes[MAX_AXES];
    for (int d = 0; d < type->rank; d++)
        if (sharding_dim_axes(sh, d, axes) && u->dims[d] < type->dims[d])
            dims |= 1u << d;
    return dims;
}

/* The start of a write of u rows into dim d of the device's block (b
 * rows, padded by u on both sides): JAX's clamp into 0 .. n - u, less the
 * block's first row, plus the padding. */
static int block_start(Part *p, int start, const int *axes, int n, int64_t rows, int64_t u, int64_t b) {
    int at = emit_local(p, OP_MAX, (int32_t[]){start, i32_constant(p, 0)}, 2, NULL, 0, NULL);
    at = emit_local(p, OP_MIN, (int32_t[]){at, i32_constant(p, rows - u)}, 2, NULL, 0, NULL);
    int first = emit_local(p, OP_MUL, (int32_t[]){linear_index(p, axes, n), i32_constant(p, b)}, 2, NULL, 0, NULL);
    at = emit_local(p, OP_SUB, (int32_t[]){at, first}, 2, NULL, 0, NULL);
    return emit_local(p, OP_ADD, (int32_t[]){at, i32_constant(p, u)}, 2, NULL, 0, NULL);
}

/* A dynamic-update-slice whose write may start anywhere along a split dim
 * (the update shorter than the dim): the update is held whole along such
 * dims (from its owners, by the reshard planner), and each device writes
 * the rows of it that fall in its block, in place, as GSPMD does.  The
 * block is padded by the update's extent on both sides of each such dim,
 * so a write that misses the block lands, clamped, in the padding, which
 * is sliced off after; the update keeps the operand's split on the dims
 * it covers whole. */
int lower_split_update_slice(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    int rank = in->type.rank, u = ir_arg(src, in, 1);
    const Shape *us = &src->insts[u].type;
    uint32_t moving = partial_axes(&in->sh) ? 0 : moving_write_dims(&in->sh, &in->type, us);
    if (!moving)
        return 0;
    Sharding whole = in->sh;
    for (int a = 0; a < MAX_AXES; a++)
        if (whole.dim[a] >= 0 && moving & (1u << whole.dim[a]))
            whole.dim[a] = SH_REPLICATED;
    int v = reshard(p, p->value[ir_arg(src, in, 0)], &in->sh).v;
    int32_t args[2 + MAX_RANK];
    args[1] = reshard(p, p->value[u], &whole).v;
    int64_t bounds[2 * MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, d, axes);
        int64_t b = p->dst->insts[v].type.dims[d], ud = us->dims[d];
        args[2 + d] = p->value[ir_arg(src, in, 2 + d)].v;
        bounds[d] = 0, bounds[rank + d] = b;
        if (!(moving & (1u << d)))
            continue;
        v = pad_zeros(p, v, d, ud, ud);
        args[2 + d] = block_start(p, args[2 + d], axes, n, in->type.dims[d], ud, b);
        bounds[d] = ud, bounds[rank + d] = ud + b;
    }
    args[0] = v;
    v = emit_local(p, OP_DYNAMIC_UPDATE_SLICE, args, 2 + rank, NULL, 0, NULL);
    v = slice_unless_whole(p, v, bounds);
    p->dst->insts[v].sh = in->sh;
    *out = (Piece){v, in->sh, in->type, p->place};
    return 1;
}

/* ---- dynamic-slice along split dims ---- */

/* A dynamic slice (`data[t]`, `x[t : t + n]`) that may start anywhere
 * along a dim its operand splits: rather than gather the operand, each
 * device slices its own block, padded by the window on both sides of the
 * dim as a slot write's is (block_start), so that the window's rows it
 * holds land where they belong and the rest are zeros; the result is then
 * a partial sum over the dim's axes, which the reshard to the result's
 * sharding all-reduces: one window moved instead of the operand.  Taken
 * when that moves fewer bytes (the window at most half the dim) and the
 * sum is exact in the dtype (no bf16 or f16 partials, no bool). */
int lower_split_dynamic_slice(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    int x = ir_arg(src, in, 0), rank = in->type.rank, dt = in->type.dtype;
    const Shape *xs = &src->insts[x].type;
    Piece xp = p->value[x];
    if (dt == DT_BOOL || sum_dtype(dt) != dt || partial_axes(&xp.sh) || partial_axes(&in->sh))
        return 0;
    uint32_t moving = moving_write_dims(&xp.sh, xs, &in->type);
    if (!moving)
        return 0;
    /* The operand as the result is split, plus its own axes on the moving dims. */
    Sharding want = in->sh, partial = in->sh;
    for (int a = 0; a < p->m->naxes; a++) {
        if (want.dim[a] >= 0 && moving & (1u << want.dim[a]))
            return 0;
        if (xp.sh.dim[a] < 0 || !(moving & (1u << xp.sh.dim[a])))
            continue;
        if (want.dim[a] != SH_REPLICATED || 2 * in->type.dims[xp.sh.dim[a]] > xs->dims[xp.sh.dim[a]])
            return 0;
        want.dim[a] = xp.sh.dim[a], want.pos[a] = xp.sh.pos[a];
        partial.dim[a] = SH_PARTIAL;
    }
    partial.reducer = RED_SUM;
    int v = reshard(p, xp, &want).v;
    int32_t args[1 + MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(&want, d, axes);
        int64_t b = p->dst->insts[v].type.dims[d], u = in->type.dims[d];
        args[1 + d] = p->value[ir_arg(src, in, 1 + d)].v;
        if (!(moving & (1u << d)))
            continue;
        v = pad_zeros(p, v, d, u, u);
        args[1 + d] = block_start(p, args[1 + d], axes, n, xs->dims[d], u, b);
    }
    args[0] = v;
    Shape local = shape_local(p->m, &in->type, &in->sh);
    v = emit_local(p, OP_DYNAMIC_SLICE, args, 1 + rank, NULL, 0, &local);
    p->dst->insts[v].sh = partial;
    *out = reshard(p, (Piece){v, partial, in->type, p->place}, &in->sh);
    return 1;
}
