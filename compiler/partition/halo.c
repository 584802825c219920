/* Exchanges along split dims whose extent an op changes: roll, shifted
 * slices and concat move only the rows that cross block boundaries, with
 * collective-permutes, instead of gathering the whole dim. */
#include "part.h"

#include <string.h>

/* x's blocks along `axes`, moved `shift` blocks forward: device c receives
 * the block of device c - shift.  A shift of whole turns moves nothing. */
static int permute_blocks(Part *p, int x, const int *axes, int n, int64_t shift) {
    int64_t k = 1;
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    if (((shift % k) + k) % k == 0)
        return x;
    int64_t *attrs = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)(1 + n + 2 * k));
    attrs[0] = n;
    for (int i = 0; i < n; i++)
        attrs[1 + i] = axes[i];
    for (int64_t j = 0; j < k; j++) {
        attrs[1 + n + 2 * j] = j;
        attrs[2 + n + 2 * j] = ((j + shift) % k + k) % k;
    }
    return emit_local(p, OP_COLLECTIVE_PERMUTE, (int32_t[]){x}, 1, attrs, (int)(1 + n + 2 * k), NULL);
}

static int slice_along(Part *p, int x, int dim, int64_t lo, int64_t hi) {
    const Shape *s = &p->dst->insts[x].type;
    if (lo == 0 && hi == s->dims[dim])
        return x;
    int64_t bounds[2 * MAX_RANK];
    for (int d = 0; d < s->rank; d++)
        bounds[d] = d == dim ? lo : 0, bounds[s->rank + d] = d == dim ? hi : s->dims[d];
    return emit_local(p, OP_SLICE, (int32_t[]){x}, 1, bounds, 2 * s->rank, NULL);
}

/* roll along a split dim.  With the shift s = q blocks + r rows and blocks
 * of b rows, a device's new block is the last r rows of the block q + 1
 * before it (the halo), then the first b - r rows of the block q before it:
 * each piece is sliced before it is sent, so no more than a block moves. */
int lower_split_roll(Part *p, const Inst *in, Piece *out) {
    int64_t shift = p->src->ints[in->attrs], dim = p->src->ints[in->attrs + 1];
    int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, (int)dim, axes);
    if (!n || !dim_is_even(p->m, &in->type, &in->sh, (int)dim))
        return 0;
    Piece x = reshard(p, p->value[ir_arg(p->src, in, 0)], &in->sh);
    int64_t b = p->dst->insts[x.v].type.dims[dim], q = shift / b, r = shift % b;
    int y = permute_blocks(p, slice_along(p, x.v, (int)dim, 0, b - r), axes, n, q);
    if (r) {
        int halo = permute_blocks(p, slice_along(p, x.v, (int)dim, b - r, b), axes, n, q + 1);
        y = emit_local(p, OP_CONCAT, (int32_t[]){halo, y}, 2, &dim, 1, NULL);
    }
    p->dst->insts[y].sh = in->sh;
    *out = (Piece){y, in->sh, in->type, p->place};
    return 1;
}

/* A slice along a split dim whose result blocks are as long as the
 * operand's (a shifted slice such as x[1:] or x[:-1], the result padded at
 * the end): block c of the result is rows r.. of operand block c + q and
 * rows ..r of block c + q + 1, where lo = q b + r; a halo exchange, as for
 * roll.  Rows wrapped around past the end land in the result's padding. */
int lower_split_slice(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    const Shape *xs = &src->insts[ir_arg(src, in, 0)].type;
    int rank = xs->rank, dim = -1;
    for (int d = 0; d < rank; d++) {
        int64_t lo = src->ints[in->attrs + d], hi = src->ints[in->attrs + rank + d];
        int axes[MAX_AXES];
        if ((lo != 0 || hi != xs->dims[d]) && sharding_dim_axes(&in->sh, d, axes)) {
            if (dim >= 0)
                return 0;            /* one shifted dim at a time */
            dim = d;
        }
    }
    if (dim < 0)
        return 0;
    int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, dim, axes);
    int64_t k = 1, lo = src->ints[in->attrs + dim], hi = src->ints[in->attrs + rank + dim];
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    int64_t b = xs->dims[dim] / k;
    if (xs->dims[dim] % k || (hi - lo + k - 1) / k != b)
        return 0;
    Sharding want = in->sh;      /* the operand is split like the result */
    Piece x = reshard(p, p->value[ir_arg(src, in, 0)], &want);
    int64_t bounds[2 * MAX_RANK];
    const Shape *local = &p->dst->insts[x.v].type;
    for (int d = 0; d < rank; d++) {         /* the other dims slice locally */
        int64_t dlo = src->ints[in->attrs + d], dhi = src->ints[in->attrs + rank + d];
        int whole = d == dim || (dlo == 0 && dhi == xs->dims[d]);
        bounds[d] = whole ? 0 : dlo;
        bounds[rank + d] = whole ? local->dims[d] : dhi;
    }
    int y = x.v, whole = 1;
    for (int d = 0; d < rank; d++)
        whole &= bounds[d] == 0 && bounds[rank + d] == local->dims[d];
    if (!whole)
        y = emit_local(p, OP_SLICE, (int32_t[]){x.v}, 1, bounds, 2 * rank, NULL);
    int64_t q = lo / b, r = lo % b, d64 = dim;
    int head = permute_blocks(p, slice_along(p, y, dim, r, b), axes, n, -q);
    if (r) {
        int halo = permute_blocks(p, slice_along(p, y, dim, 0, r), axes, n, -(q + 1));
        head = emit_local(p, OP_CONCAT, (int32_t[]){head, halo}, 2, &d64, 1, NULL);
    }
    p->dst->insts[head].sh = in->sh;
    *out = (Piece){head, in->sh, in->type, p->place};
    return 1;
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

/* concat along a split dim: every row moves once, directly to the block
 * that holds it in the result.  Runs with the same shape (operand, rows,
 * place) travel in one collective-permute; a device receives zeros where it
 * gets nothing, so adding the received runs, each padded to a block,
 * assembles the block. */
int lower_split_concat(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    int64_t dim = src->ints[in->attrs];
    int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, (int)dim, axes);
    int64_t k = 1, total = in->type.dims[dim];
    for (int i = 0; i < n; i++)
        k *= p->m->axis_size[axes[i]];
    if (!n || total % k || in->type.dtype == DT_BOOL)
        return 0;
    for (int i = 0; i < in->nargs; i++)
        if (src->insts[ir_arg(src, in, i)].type.dims[dim] % k)
            return 0;
    int64_t B = total / k, nruns = 0, cap = 2 * k * (in->nargs + 1);
    Run *runs = arena_alloc(p->m->arena, sizeof(Run) * (size_t)cap);
    int32_t parts[MAX_RULE_TENSORS];
    int64_t offset = 0;
    for (int i = 0; i < in->nargs; i++) {
        Sharding want = in->sh;
        parts[i] = reshard(p, p->value[ir_arg(src, in, i)], &want).v;
        int64_t size = src->insts[ir_arg(src, in, i)].type.dims[dim], b = size / k;
        for (int64_t j = 0; j < k; j++)           /* block j of operand i: result rows offset + j b .. */
            for (int64_t row = 0; row < b;) {
                int64_t g = offset + j * b + row, c = g / B, len = b - row < B - g % B ? b - row : B - g % B;
                if (nruns < cap)
                    runs[nruns++] = (Run){i, row, len, g % B, j, c};
                row += len;
            }
        offset += size;
    }
    Shape block = p->dst->insts[parts[0]].type;
    block.dims[dim] = B;
    int acc = -1;
    uint8_t *done = arena_alloc(p->m->arena, (size_t)nruns + 1);
    for (int64_t r = 0; r < nruns; r++) {
        if (done[r])
            continue;
        /* Gather the runs of this shape into one permute. */
        int64_t *attrs = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)(1 + n + 2 * k));
        int na = 1 + n;
        attrs[0] = n;
        for (int i = 0; i < n; i++)
            attrs[1 + i] = axes[i];
        for (int64_t q = r; q < nruns; q++)
            if (!done[q] && same_move(&runs[r], &runs[q])) {
                done[q] = 1;
                attrs[na++] = runs[q].src;
                attrs[na++] = runs[q].dst;
            }
        int piece = slice_along(p, parts[runs[r].part], (int)dim, runs[r].lo, runs[r].lo + runs[r].len);
        piece = emit_local(p, OP_COLLECTIVE_PERMUTE, (int32_t[]){piece}, 1, attrs, na, NULL);
        /* Pad the run to a block at its place. */
        int32_t pieces[3];
        int np = 0;
        int64_t before = runs[r].at, after = B - runs[r].at - runs[r].len;
        Shape zero = {block.dtype, 0, {0}};
        for (int side = 0; side < 2; side++) {
            int64_t rows = side ? after : before;
            if (side)
                pieces[np++] = piece;
            if (!rows)
                continue;
            Shape pad = block;
            pad.dims[dim] = rows;
            int z = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &zero);
            pieces[np++] = emit_local(p, OP_BROADCAST, (int32_t[]){z}, 1, NULL, 0, &pad);
        }
        int placed = np == 1 ? pieces[0] : emit_local(p, OP_CONCAT, pieces, np, &dim, 1, NULL);
        acc = acc < 0 ? placed : emit_local(p, OP_ADD, (int32_t[]){acc, placed}, 2, NULL, 0, NULL);
    }
    p->dst->insts[acc].sh = in->sh;
    *out = (Piece){acc, in->sh, in->type, p->place};
    return 1;
}
