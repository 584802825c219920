/* Placement: moving values between the whole mesh and its submeshes
 * (docs/language.md, "Submeshes and pipelines"; docs/partitioning.md).
 *
 * An instruction placed on a submesh runs only on the devices at one
 * coordinate `k` of the submesh's axis `A`, and its sharding never uses `A`.
 * When it reads a value that lives elsewhere, the value is brought over
 * first, by instructions that every device runs (both sides of a transfer
 * take part in its collective):
 *   - from submesh (A, k) to submesh (A, k'): a collective-permute along A
 *     from coordinate k to k'; the other coordinates of A send nothing;
 *   - from a submesh to the whole mesh (or to a submesh on another axis): a
 *     broadcast along A, written as select(coordinate == k, x, 0) and an
 *     all-reduce (sum) over A, one collective whatever size A has;
 *   - from the whole mesh to a submesh: nothing moves, unless the value is
 *     split over A, which is gathered first (a submesh holds every
 *     coordinate's share).
 * The copy is kept (Part.moved), so later readers on the same submesh use
 * it without another transfer. */
#include "part.h"

static int scalar(Part *p, Op op, int dtype, double value, const int32_t *args, int nargs, const int64_t *attrs,
                  int nattrs) {
    Shape s = {(uint8_t)dtype, 0, {0}};
    int v = emit_local(p, op, args, nargs, attrs, nattrs, op == OP_CONSTANT ? &s : NULL);
    p->dst->insts[v].value = value;
    p->dst->insts[v].sh = sharding_replicated();
    return v;
}

static int shaped(Part *p, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
                  const Shape *type, const Sharding *sh) {
    int v = emit_local(p, op, args, nargs, attrs, nattrs, type);
    p->dst->insts[v].sh = *sh;
    return v;
}

/* Submesh (A, from) to (A, to): devices at coordinate `from` send their
 * block to the device at `to` with the same other coordinates. */
static Piece transfer(Part *p, Piece x, const Submesh *from, const Submesh *to) {
    int64_t attrs[4] = {1, from->axis, from->coord, to->coord};
    x.v = shaped(p, OP_COLLECTIVE_PERMUTE, (int32_t[]){x.v}, 1, attrs, 4, NULL, &x.sh);
    return x;
}

/* Submesh (A, k) to every device: the devices at k contribute their block,
 * the others zeros (whatever their buffer holds is never read), and an
 * all-reduce over A adds them up.  bool travels as i32, u32 (which has no
 * sums) as f64, which holds it exactly; i64 and u8 as themselves (the
 * runtime sums them in their own width, and a double would not hold every
 * i64). */
static Piece broadcast(Part *p, Piece x, const Submesh *from) {
    Shape local = p->dst->insts[x.v].type, pred = local;
    int dtype = local.dtype == DT_BOOL ? DT_I32 : local.dtype == DT_U32 ? DT_F64 : local.dtype;
    Shape wide = local;
    wide.dtype = (uint8_t)dtype;
    pred.dtype = DT_BOOL;
    int v = x.v;
    if (dtype != local.dtype)
        v = shaped(p, OP_CONVERT, (int32_t[]){v}, 1, NULL, 0, &wide, &x.sh);
    int64_t axis = from->axis, eq = CMP_EQ;
    int coord = scalar(p, OP_AXIS_INDEX, DT_I32, 0, NULL, 0, &axis, 1);
    int k = scalar(p, OP_CONSTANT, DT_I32, (double)from->coord, NULL, 0, NULL, 0);
    int here = scalar(p, OP_COMPARE, DT_BOOL, 0, (int32_t[]){coord, k}, 2, &eq, 1);
    int zero = scalar(p, OP_CONSTANT, dtype, 0, NULL, 0, NULL, 0);
    int mask = shaped(p, OP_BROADCAST, (int32_t[]){here}, 1, NULL, 0, &pred, &x.sh);
    int zeros = shaped(p, OP_BROADCAST, (int32_t[]){zero}, 1, NULL, 0, &wide, &x.sh);
    int sel = shaped(p, OP_SELECT, (int32_t[]){mask, v, zeros}, 3, NULL, 0, NULL, &x.sh);
    int64_t attrs[2] = {RED_SUM, from->axis};
    v = shaped(p, OP_ALL_REDUCE, (int32_t[]){sel}, 1, attrs, 2, NULL, &x.sh);
    if (local.dtype == DT_U32)
        v = shaped(p, OP_CONVERT, (int32_t[]){v}, 1, NULL, 0, &local, &x.sh);
    else if (dtype != local.dtype) {
        int64_t ne = CMP_NE;
        v = shaped(p, OP_COMPARE, (int32_t[]){v, zeros}, 2, &ne, 1, NULL, &x.sh);
    }
    x.v = v;
    return x;
}

/* x's sharding without axis a (the other axes of its dim keep their order). */
static Sharding without_axis(const Sharding *sh, int a) {
    Sharding out = *sh;
    int d = sh->dim[a];
    if (d < 0)
        return out;
    out.dim[a] = SH_REPLICATED;
    int axes[MAX_AXES], n = sharding_dim_axes(&out, d, axes);
    for (int i = 0; i < n; i++)
        out.pos[axes[i]] = (uint8_t)i;
    return out;
}

Piece arrive(Part *p, int v) {
    Piece x = p->value[v];
    int to = p->place;
    if (x.place == to)
        return x;
    if (p->moved[v].v >= 0 && p->moved[v].place == to)
        return p->moved[v];
    const Submesh *src = x.place ? &p->m->submesh[x.place - 1] : NULL;
    const Submesh *dst = to ? &p->m->submesh[to - 1] : NULL;
    p->place = 0;                /* every device takes part in moving it */
    int first = p->dst->ninsts, of = x.v, along = src && dst && src->axis == dst->axis;
    Shape block = p->dst->insts[x.v].type;
    if (along)
        x = transfer(p, x, src, dst);
    else if (src)
        x = broadcast(p, x, src);
    if (new_collectives(p, first))       /* a device off the source submesh needs the whole block */
        note_move(p, first, of, MOVE_TRANSFER, shape_elems(&block) * dtype_size(block.dtype));
    if (!along && dst && x.sh.dim[dst->axis] >= 0) {
        Sharding want = without_axis(&x.sh, dst->axis);
        x = reshard(p, x, &want);
    }
    p->place = (uint8_t)to;
    x.place = to;
    p->moved[v] = x;
    return x;
}
