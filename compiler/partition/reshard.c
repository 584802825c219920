/* Resharding: turn a block of a value sharded one way into the block the
 * same value has sharded another way.  A planner (below) weighs a few
 * plans by the bytes they send per device; the base one, the recipe:
 *   partial sums      -> reduce-scatter onto the dim the target splits, else all-reduce;
 *   axes that move from one dim to another -> one all-to-all over all of them;
 *   axes the target drops -> all-gather (then trim the padding of uneven dims);
 *   axes the target adds  -> dynamic-slice at the device's block, no communication.
 * Uneven dims (padded blocks) are regathered whole before they are split
 * again where their padded blocks do not nest; an axis moves between
 * uneven dims where they nest, or when one is left whole and the other was
 * whole (padded before the all-to-all, trimmed after).  Each function caches its
 * reshards (Part.reshards): the same block resharded the same way again
 * reuses the first result, so a value is gathered once per target. */
#include "part.h"

#include <math.h>
#include <string.h>

int emit_local(Part *p, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
               const Shape *type) {
    int v = ir_emit(p->m, p->dst, op, args, nargs, attrs, nattrs, type, p->loc);
    p->dst->insts[v].place = p->place;
    return v;
}

/* How warnings name the instruction being lowered: 'h', or "this slice". */
const char *inst_name(Part *p) {
    const Inst *in = p->name_of;
    return in->sym >= 0 ? arena_printf(p->m->arena, "'%s'", sym_name(p->m->syms, in->sym))
                        : arena_printf(p->m->arena, "this %s", op_info[in->op].name);
}

int all_gather_along(Part *p, int v, int dim, const int *axes, int n) {
    int64_t attrs[1 + MAX_AXES] = {dim};
    for (int i = 0; i < n; i++)
        attrs[1 + i] = axes[i];
    return emit_local(p, OP_ALL_GATHER, (int32_t[]){v}, 1, attrs, 1 + n, NULL);
}

int64_t *permute_attrs(Part *p, const int *axes, int n, int64_t npairs) {
    int64_t *attrs = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)(1 + n + 2 * npairs));
    attrs[0] = n;
    for (int i = 0; i < n; i++)
        attrs[1 + i] = axes[i];
    return attrs;
}

/* Like emit_local, but an op the local blocks make inconsistent is taken
 * back and -1 returned: the caller falls back to replicated operands. */
int try_emit_local(Part *p, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
                   const Shape *type) {
    const char *err;
    int v = ir_emit_checked(p->m, p->dst, op, args, nargs, attrs, nattrs, type, p->loc, &err);
    if (v >= 0)
        p->dst->insts[v].place = p->place;
    return v;
}

static int64_t axes_product(const Module *m, const int *axes, int n) {
    int64_t k = 1;
    for (int i = 0; i < n; i++)
        k *= m->axis_size[axes[i]];
    return k;
}

int dim_is_even(const Module *m, const Shape *global, const Sharding *sh, int d) {
    int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
    return global->dims[d] % axes_product(m, axes, n) == 0;
}

/* Do the padded blocks of a dim of n split into `outer` blocks cut exactly
 * into `inner` blocks each of the dim split into outer * inner?  Then an
 * axis can join or leave the minor end of the dim by local cuts and
 * concats (15 over 2 and over 8: 8 = 4 * 2).  A whole dim (outer 1) always
 * can: it is padded first or trimmed after. */
static int blocks_nest(int64_t n, int64_t outer, int64_t inner) {
    int64_t all = outer * inner;
    return outer == 1 || (n + outer - 1) / outer == inner * ((n + all - 1) / all);
}

/* Do the blocks of dim d under sh, past its first `keep` axes, nest? */
static int nests_after(const Module *m, const Shape *global, const Sharding *sh, int d, int keep) {
    int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
    int64_t outer = axes_product(m, axes, keep < n ? keep : n);
    return blocks_nest(global->dims[d], outer, axes_product(m, axes, n) / outer);
}

/* The device's index over `axes`, major first, as an i32 scalar. */
int linear_index(Part *p, const int *axes, int n) {
    int64_t attrs[MAX_AXES];
    for (int i = 0; i < n; i++)
        attrs[i] = axes[i];
    return emit_local(p, OP_AXIS_INDEX, NULL, 0, attrs, n, NULL);
}

int shift_to_block(Part *p, int idx, const int *axes, int n, int64_t block) {
    Shape s = p->dst->insts[idx].type;
    int start = emit_local(p, OP_MUL, (int32_t[]){linear_index(p, axes, n), i32_constant(p, block)}, 2, NULL, 0, NULL);
    return emit_local(p, OP_SUB, (int32_t[]){idx, emit_local(p, OP_BROADCAST, (int32_t[]){start}, 1, NULL, 0, &s)}, 2,
                      NULL, 0, NULL);
}

int i32_constant(Part *p, int64_t value) {
    Shape s = {DT_I32, 0, {0}};
    int k = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &s);
    p->dst->insts[k].value = (double)value;
    return k;
}

int splat(Part *p, double value, const Shape *s) {
    Shape scalar = {s->dtype, 0, {0}};
    int k = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &scalar);
    p->dst->insts[k].value = value;
    return emit_local(p, OP_BROADCAST, (int32_t[]){k}, 1, NULL, 0, s);
}

int pad_zeros(Part *p, int x, int dim, int64_t before, int64_t after) {
    if (before <= 0 && after <= 0)
        return x;
    int32_t parts[3];
    int np = 0;
    for (int side = 0; side < 2; side++) {
        int64_t rows = side ? after : before;
        if (side)
            parts[np++] = x;
        if (rows <= 0)
            continue;
        Shape pad = p->dst->insts[x].type;
        pad.dims[dim] = rows;
        parts[np++] = splat(p, 0, &pad);
    }
    int64_t d64 = dim;
    return emit_local(p, OP_CONCAT, parts, np, &d64, 1, NULL);
}

static void set_sharding(Part *p, Piece *x, int v, const Sharding *sh) {
    x->v = v;
    x->sh = *sh;
    p->dst->insts[v].sh = *sh;
}

static void add_axis(Sharding *sh, int a, int d) {
    int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
    sh->dim[a] = (int8_t)d;
    sh->pos[a] = (uint8_t)(n ? sh->pos[axes[n - 1]] + 1 : 0);
}

/* ---- partial sums ---- */

static void resolve_partial(Part *p, Piece *x, const Sharding *to) {
    int partial[MAX_AXES], np = 0;
    for (int a = 0; a < p->m->naxes; a++)
        if (x->sh.dim[a] == SH_PARTIAL)
            partial[np++] = a;
    if (!np)
        return;
    /* Axes the target splits a dim by, right after the axes already on it:
     * one reduce-scatter leaves each device its reduced block directly. */
    int scatter[MAX_AXES], ns = 0, dim = -1;
    for (int d = 0; d < x->global.rank && !ns; d++) {
        int have[MAX_AXES], want[MAX_AXES];
        int nh = sharding_dim_axes(&x->sh, d, have), nw = sharding_dim_axes(to, d, want);
        if (nw <= nh || memcmp(have, want, sizeof(int) * (size_t)nh) != 0)
            continue;
        for (int i = nh; i < nw && x->sh.dim[want[i]] == SH_PARTIAL; i++)
            scatter[ns++] = want[i];
        Shape local = p->dst->insts[x->v].type;
        if (ns && local.dims[d] % axes_product(p->m, scatter, ns) == 0 && dim_is_even(p->m, &x->global, to, d))
            dim = d;
        else
            ns = 0;
    }
    int rest[MAX_AXES], nr = 0;
    for (int i = 0; i < np; i++) {
        int in_scatter = 0;
        for (int j = 0; j < ns; j++)
            in_scatter |= scatter[j] == partial[i];
        if (!in_scatter)
            rest[nr++] = partial[i];
    }
    /* The reduce-scatter goes first: the all-reduce over the other partial
     * axes then sums a block 1/k as large (reduce-scatter then all-reduce,
     * as XLA does for a partially sliced contraction). */
    Sharding sh = x->sh;
    if (ns) {
        int64_t attrs[2 + MAX_AXES] = {x->sh.reducer, dim};
        for (int i = 0; i < ns; i++) {
            attrs[2 + i] = scatter[i];
            add_axis(&sh, scatter[i], dim);
        }
        set_sharding(p, x, emit_local(p, OP_REDUCE_SCATTER, (int32_t[]){x->v}, 1, attrs, 2 + ns, NULL), &sh);
    }
    for (int i = 0; i < nr; i++)
        sh.dim[rest[i]] = SH_REPLICATED;
    if (nr) {
        int64_t attrs[1 + MAX_AXES] = {x->sh.reducer};
        for (int i = 0; i < nr; i++)
            attrs[1 + i] = rest[i];
        set_sharding(p, x, emit_local(p, OP_ALL_REDUCE, (int32_t[]){x->v}, 1, attrs, 1 + nr, NULL), &sh);
    }
    x->sh = sh;
}

/* ---- moving axes ---- */

/* Axes that leave one dim for another in one all-to-all: each moving axis
 * is among the minor axes of the dim it leaves and lands right after the
 * axes the dim it joins keeps.  The all-to-all runs over `axes` (major
 * first); `arrive[t]` lists, in the target's order, the axes dim t gains,
 * `leave[f]` the axes dim f loses, in their order on f. */
typedef struct {
    int naxes, axes[MAX_AXES];
    int narrive[MAX_RANK], arrive[MAX_RANK][MAX_AXES];
    int nleave[MAX_RANK], leave[MAX_RANK][MAX_AXES];
} AxisMove;

/* Which of the axes in `moving` (a bit set) can move together: on the dim
 * an axis leaves, every axis after it must leave too (the minor ones go);
 * on the dim it joins, the target must keep the axes already there and
 * want it right after them or after other arriving axes.  Uneven dims move
 * only whole, because their padded blocks do not nest: the dim left loses
 * all its axes (its padding is then sliced off the end) and the dim joined
 * had none and gets all the target's (it is padded with zeros first).
 * With `regather`, axes also leave a dim whose blocks do not nest, which
 * then gathers its other axes whole (move_some_axes). */
static uint32_t movable(const Module *m, const Piece *x, const Sharding *to, uint32_t moving, int regather) {
    for (uint32_t before = 0; before != moving;) {
        before = moving;
        for (int d = 0; d < x->global.rank; d++) {
            int have[MAX_AXES], want[MAX_AXES];
            int nh = sharding_dim_axes(&x->sh, d, have), nw = sharding_dim_axes(to, d, want);
            int stays = 0, nleave = 0;
            for (int i = nh - 1; i >= 0; i--) {       /* leaving: a suffix of d's axes */
                if (!(moving >> have[i] & 1))
                    stays = 1;
                else if (stays)
                    moving &= ~(1u << have[i]);
                else
                    nleave++;
            }
            if (nleave && !regather && !nests_after(m, &x->global, &x->sh, d, nh - nleave))
                for (int i = 0; i < nh; i++)
                    moving &= ~(1u << have[i]);
            /* arriving: right after the axes d keeps, in the target's order */
            int keeps = nh <= nw && memcmp(have, want, sizeof(int) * (size_t)nh) == 0, narrive = 0;
            for (int i = keeps ? nh : 0; i < nw; i++)
                if (!(moving >> want[i] & 1) || !keeps || narrive < i - nh)
                    moving &= ~(1u << want[i]);
                else
                    narrive++;
            if (!narrive)
                continue;
            /* The blocks must nest from the axes kept to those arriving, and
             * from there to the target's (which later steps add). */
            Sharding after = x->sh;
            for (int i = nh; i < nh + narrive; i++)
                after.dim[want[i]] = (int8_t)d, after.pos[want[i]] = (uint8_t)i;
            if (!nests_after(m, &x->global, &after, d, nh) || !nests_after(m, &x->global, to, d, nh + narrive))
                for (int i = nh; i < nw; i++)
                    moving &= ~(1u << want[i]);
        }
    }
    return moving;
}

static void plan_move(const Piece *x, const Sharding *to, uint32_t moving, AxisMove *mv) {
    memset(mv, 0, sizeof *mv);
    for (int d = 0; d < x->global.rank; d++) {
        int have[MAX_AXES], want[MAX_AXES];
        int nh = sharding_dim_axes(&x->sh, d, have), nw = sharding_dim_axes(to, d, want);
        for (int i = 0; i < nw; i++)
            if (moving >> want[i] & 1) {
                mv->arrive[d][mv->narrive[d]++] = want[i];
                mv->axes[mv->naxes++] = want[i];   /* target dims in order: the send side's layout */
            }
        for (int i = 0; i < nh; i++)
            if (moving >> have[i] & 1)
                mv->leave[d][mv->nleave[d]++] = have[i];
    }
}

static int reshape_to(Part *p, int x, const int64_t *dims, int rank) {
    Shape s = p->dst->insts[x].type;
    s.rank = (uint8_t)rank;
    memcpy(s.dims, dims, sizeof(int64_t) * (size_t)rank);
    return shape_eq(&s, &p->dst->insts[x].type) ? x : emit_local(p, OP_RESHAPE, (int32_t[]){x}, 1, NULL, 0, &s);
}

/* x cut into the dims `cut` and those permuted by `perm` (the transpose's
 * dimensions); x itself when the permutation keeps the order, as the
 * reshape that follows regroups the dims anyway. */
static int regroup(Part *p, int x, const int64_t *cut, const int64_t *perm, int rank) {
    for (int i = 0; i < rank; i++)
        if (perm[i] != i)
            return emit_local(p, OP_TRANSPOSE, (int32_t[]){reshape_to(p, x, cut, rank)}, 1, perm, rank, NULL);
    return x;
}

/* Does one dim give all the moving axes to one other dim, in their order? */
static int one_pair(const AxisMove *mv, int rank) {
    int t = -1, f = -1;
    for (int d = 0; d < rank; d++) {
        if (mv->narrive[d])
            t = t < 0 ? d : rank;
        if (mv->nleave[d])
            f = f < 0 ? d : rank;
    }
    return t >= 0 && t < rank && f >= 0 && f < rank &&
           memcmp(mv->arrive[t], mv->leave[f], sizeof(int) * (size_t)mv->naxes) == 0;
}

/* One all-to-all over every moving axis.  When one dim gives its axes to
 * one other in the same order, the all-to-all splits the one and
 * concatenates the other.  Otherwise (as XLA's partitioner does for several
 * source and target dims) each target dim is cut into its arriving axes'
 * blocks, those go to the front in the order of `mv->axes`, one dim of them
 * is exchanged, and each received block index goes back in front of the
 * dim its axes left. */
static int all_to_all_moving(Part *p, int x, const AxisMove *mv, int rank) {
    int64_t attrs[2 + MAX_AXES];
    for (int i = 0; i < mv->naxes; i++)
        attrs[2 + i] = mv->axes[i];
    if (one_pair(mv, rank)) {
        for (int d = 0; d < rank; d++) {
            if (mv->narrive[d])
                attrs[0] = d;
            if (mv->nleave[d])
                attrs[1] = d;
        }
        return emit_local(p, OP_ALL_TO_ALL, (int32_t[]){x}, 1, attrs, 2 + mv->naxes, NULL);
    }
    /* Send side: [arriving blocks..., the rest of each dim]. */
    const Shape s = p->dst->insts[x].type;
    int64_t cut[MAX_RANK + MAX_AXES], perm[MAX_RANK + MAX_AXES], rest[MAX_RANK], front[MAX_AXES];
    int at[MAX_AXES], n = 0, nfront = 0;
    for (int d = 0; d < rank; d++) {
        for (int i = 0; i < mv->narrive[d]; i++)
            at[mv->arrive[d][i]] = n, cut[n++] = p->m->axis_size[mv->arrive[d][i]];
        rest[d] = s.dims[d] / axes_product(p->m, mv->arrive[d], mv->narrive[d]);
        perm[mv->naxes + d] = n;
        cut[n++] = rest[d];
    }
    for (int i = 0; i < mv->naxes; i++)
        perm[i] = at[mv->axes[i]], front[nfront++] = p->m->axis_size[mv->axes[i]];
    int y = regroup(p, x, cut, perm, n);
    int64_t flat[1 + MAX_RANK] = {axes_product(p->m, mv->axes, mv->naxes)};
    memcpy(flat + 1, rest, sizeof(int64_t) * (size_t)rank);
    attrs[0] = attrs[1] = 0;
    y = emit_local(p, OP_ALL_TO_ALL, (int32_t[]){reshape_to(p, y, flat, 1 + rank)}, 1, attrs, 2 + mv->naxes, NULL);
    /* Receive side: the sender's blocks go in front of the dims they left. */
    int64_t split[MAX_RANK + MAX_AXES], merged[MAX_RANK];
    memcpy(split, front, sizeof(int64_t) * (size_t)nfront);
    memcpy(split + nfront, rest, sizeof(int64_t) * (size_t)rank);
    n = 0;
    for (int d = 0; d < rank; d++) {
        merged[d] = rest[d];
        for (int i = 0; i < mv->nleave[d]; i++)
            for (int j = 0; j < mv->naxes; j++)
                if (mv->axes[j] == mv->leave[d][i])
                    perm[n++] = j, merged[d] *= p->m->axis_size[mv->leave[d][i]];
        perm[n++] = mv->naxes + d;
    }
    return reshape_to(p, regroup(p, y, split, perm, n), merged, rank);
}

/* After axes left dim d of local block v, whose blocks do not nest (each
 * device holds a block of the dim padded to whole blocks of all its old
 * axes, not of those left): gather the others too, so the dim is whole
 * (its padding at the end, trimmed with the rest of the move). */
static int gather_rest(Part *p, int v, Sharding *sh, int d) {
    int rest[MAX_AXES], n = sharding_dim_axes(sh, d, rest);
    if (!n)
        return v;
    for (int i = 0; i < n; i++)
        sh->dim[rest[i]] = SH_REPLICATED;
    return all_gather_along(p, v, d, rest, n);
}

/* Axes that can move from one dim to another now go in one all-to-all over
 * all of them (not one per axis: that sends (k - 1) / k of the block once,
 * where an all-to-all per axis sends about that much each time).  Dims they
 * join are padded to a multiple of the group first; dims they leave whole
 * are sliced back to their size.  Returns 0 when no axis can move. */
static int move_some_axes(Part *p, Piece *x, const Sharding *to, int regather) {
    uint32_t moving = 0;
    for (int a = 0; a < p->m->naxes; a++)
        if (x->sh.dim[a] >= 0 && to->dim[a] >= 0 && x->sh.dim[a] != to->dim[a])
            moving |= 1u << a;
    moving = movable(p->m, x, to, moving, regather);
    if (!moving)
        return 0;
    AxisMove mv;
    plan_move(x, to, moving, &mv);
    if (!one_pair(&mv, x->global.rank) && x->global.rank + mv.naxes > MAX_RANK) {
        /* The blocks in front would pass the rank limit: one axis this time. */
        uint32_t one = 0;
        for (int i = 0; i < mv.naxes && !one; i++)
            one = movable(p->m, x, to, 1u << mv.axes[i], regather);
        if (!one)
            return 0;
        plan_move(x, to, one, &mv);
    }
    Sharding sh = x->sh;
    for (int i = 0; i < mv.naxes; i++)
        sh.dim[mv.axes[i]] = SH_REPLICATED;
    int rank = x->global.rank, v = x->v;
    for (int d = 0; d < rank; d++) {
        for (int i = 0; i < mv.narrive[d]; i++)
            add_axis(&sh, mv.arrive[d][i], d);
        int64_t k = axes_product(p->m, mv.arrive[d], mv.narrive[d]), len = p->dst->insts[v].type.dims[d];
        v = pad_zeros(p, v, d, 0, (len + k - 1) / k * k - len);
    }
    v = all_to_all_moving(p, v, &mv, rank);
    for (int d = 0; d < rank; d++) {
        int had[MAX_AXES], nh = sharding_dim_axes(&x->sh, d, had);
        if (mv.nleave[d] && !nests_after(p->m, &x->global, &x->sh, d, nh - mv.nleave[d]))
            v = gather_rest(p, v, &sh, d);
    }
    Shape want = shape_local(p->m, &x->global, &sh), local = p->dst->insts[v].type;
    if (!shape_eq(&want, &local)) {          /* a dim left whole: trim its padding off the end */
        int64_t bounds[2 * MAX_RANK];
        for (int d = 0; d < rank; d++)
            bounds[d] = 0, bounds[rank + d] = want.dims[d];
        v = emit_local(p, OP_SLICE, (int32_t[]){v}, 1, bounds, 2 * rank, NULL);
    }
    set_sharding(p, x, v, &sh);
    return 1;
}

/* An axis may wait for another to leave the dim it joins (a dim that gives
 * one axis and takes another): all-to-alls until no axis can move.  Each
 * moves axes to their target dims for good, so there are at most as many
 * rounds as axes. */
static void move_axes(Part *p, Piece *x, const Sharding *to, int regather) {
    while (move_some_axes(p, x, to, regather))
        ;
}

/* Gather the axes of dim d past its first `keep`: all of them when the
 * dim's padded blocks there do not nest (they only line up when whole). */
static void gather_dim(Part *p, Piece *x, int d, int keep) {
    int have[MAX_AXES], nh = sharding_dim_axes(&x->sh, d, have);
    if (nh <= keep)
        return;
    if (!nests_after(p->m, &x->global, &x->sh, d, keep))
        keep = 0;
    int even = keep > 0 || dim_is_even(p->m, &x->global, &x->sh, d);
    Sharding sh = x->sh;
    for (int i = keep; i < nh; i++)
        sh.dim[have[i]] = SH_REPLICATED;
    set_sharding(p, x, all_gather_along(p, x->v, d, have + keep, nh - keep), &sh);
    Shape local = p->dst->insts[x->v].type;
    if (!even && local.dims[d] != x->global.dims[d]) {      /* trim the padding off the end */
        int64_t bounds[2 * MAX_RANK];
        for (int i = 0; i < local.rank; i++)
            bounds[i] = 0, bounds[local.rank + i] = i == d ? x->global.dims[d] : local.dims[i];
        set_sharding(p, x, emit_local(p, OP_SLICE, (int32_t[]){x->v}, 1, bounds, 2 * local.rank, NULL), &sh);
    }
}

/* Split dim d further by `axes` (the device's block of what it holds now),
 * padding with zeros first when the split is uneven. */
static void slice_dim(Part *p, Piece *x, int d, const int *axes, int n) {
    Shape local = p->dst->insts[x->v].type;
    Sharding sh = x->sh;
    for (int i = 0; i < n; i++)
        add_axis(&sh, axes[i], d);
    int64_t k = axes_product(p->m, axes, n);
    int64_t block = shape_local(p->m, &x->global, &sh).dims[d];
    x->v = pad_zeros(p, x->v, d, 0, block * k - local.dims[d]);
    int idx = linear_index(p, axes, n);
    int offset = emit_local(p, OP_MUL, (int32_t[]){idx, i32_constant(p, block)}, 2, NULL, 0, NULL);
    int32_t args[1 + MAX_RANK] = {x->v};
    for (int i = 0; i < local.rank; i++)
        args[1 + i] = i == d ? offset : i32_constant(p, 0);
    Shape out = p->dst->insts[x->v].type;
    out.dims[d] = block;
    set_sharding(p, x, emit_local(p, OP_DYNAMIC_SLICE, args, 1 + local.rank, NULL, 0, &out), &sh);
}

int same_split(const Sharding *a, const Sharding *b, int rank) {
    for (int d = 0; d < rank; d++) {
        int x[MAX_AXES], y[MAX_AXES];
        int nx = sharding_dim_axes(a, d, x), ny = sharding_dim_axes(b, d, y);
        if (nx != ny || memcmp(x, y, sizeof(int) * (size_t)nx) != 0)
            return 0;
    }
    return 1;
}

static int has_partial(const Sharding *sh) { return partial_axes(sh) != 0; }

/* ---- the reshard cache ---- */

/* Targets that reshard alike: of `to`, reshard reads only which dim each
 * axis splits (or none) and the order of the axes on each dim. */
static int same_target(const Sharding *a, const Sharding *b, int rank) {
    return a->known == b->known && memcmp(a->dim, b->dim, sizeof a->dim) == 0 && same_split(a, b, rank);
}

/* The reshard of x to `to` done before where p->place runs, if any.  The
 * function is straight-line code, so an earlier instruction placed alike
 * dominates every later use; a reshard placed elsewhere ran on other
 * devices and is not reused. */
static const Reshard *find_reshard(const Part *p, const Piece *x, const Sharding *to) {
    const ReshardCache *c = &p->reshards;
    for (int i = x->v < c->nlast ? c->last[x->v] : 0; i; i = c->items[i - 1].prev) {
        const Reshard *r = &c->items[i - 1];
        if (r->place == p->place && sharding_eq(&r->sh, &x->sh) && shape_eq(&r->global, &x->global) &&
            same_target(&r->to, to, x->global.rank))
            return r;
    }
    return NULL;
}

/* Is x's reshard to `to` done already where p->place runs (free to reuse)? */
int reshard_done(const Part *p, const Piece *x, const Sharding *to) {
    return find_reshard(p, x, to) != NULL;
}

static void remember_reshard(Part *p, const Piece *from, const Sharding *to, const Piece *out, int warned) {
    ReshardCache *c = &p->reshards;
    if (from->v >= c->nlast) {
        int n = p->dst->ninsts > 2 * c->nlast ? p->dst->ninsts : 2 * c->nlast;
        c->last = arena_realloc(p->m->arena, c->last, sizeof(int) * (size_t)c->nlast, sizeof(int) * (size_t)n);
        c->nlast = n;
    }
    Reshard *r = VEC_PUSH(p->m->arena, c->items, c->n, c->cap);
    *r = (Reshard){.from = from->v, .out = out->v, .prev = c->last[from->v], .place = p->place,
                   .warned = (uint8_t)warned, .sh = from->sh, .to = *to, .out_sh = out->sh, .global = from->global};
    c->last[from->v] = c->n;
}

void reshard_forget(Part *p, int n) {
    ReshardCache *c = &p->reshards;
    for (; c->n > n; c->n--)
        c->last[c->items[c->n - 1].from] = c->items[c->n - 1].prev;
}

static void warn_replicated_whole(Part *p) {
    diag_report(p->diag, p->loc, "warning", "%s is replicated whole on every device to reshard it", inst_name(p));
}

/* ---- the fixed recipe ---- */

/* Partial sums reduced, axes moved by all-to-alls, the axes the target
 * drops gathered, those it adds sliced (with `regather`, axes also move
 * out of uneven dims whose blocks do not nest, which are then gathered
 * whole: an all-to-all and a smaller gather instead of a larger gather).
 * When that passes through the
 * whole value (a split value gathered whole on every device), *whole is
 * that value; else whole->v is -1. */
static void recipe(Part *p, Piece *x, const Sharding *to, Piece *whole, int regather) {
    int was_split = !sharding_is_replicated(&x->sh) && !has_partial(&x->sh);
    whole->v = -1;
    resolve_partial(p, x, to);
    narrow_reduced(p, x);        /* bf16 and f16 sums were reduced in f32 */
    move_axes(p, x, to, regather);
    /* Keep on each dim the longest prefix of axes the target also has. */
    for (int d = 0; d < x->global.rank; d++) {
        int have[MAX_AXES], want[MAX_AXES];
        int nh = sharding_dim_axes(&x->sh, d, have), nw = sharding_dim_axes(to, d, want), keep = 0;
        while (keep < nh && keep < nw && have[keep] == want[keep] && to->dim[have[keep]] == d)
            keep++;
        if (keep < nw && !nests_after(p->m, &x->global, to, d, keep))
            keep = 0;            /* an uneven split that does not nest is taken from the whole dim */
        gather_dim(p, x, d, keep);
    }
    if (was_split && sharding_is_replicated(&x->sh) && !sharding_is_replicated(to))
        *whole = *x;
    for (int d = 0; d < x->global.rank; d++) {
        int have[MAX_AXES], want[MAX_AXES];
        int nh = sharding_dim_axes(&x->sh, d, have), nw = sharding_dim_axes(to, d, want);
        if (nw > nh)
            slice_dim(p, x, d, want + nh, nw - nh);
    }
}

/* ---- collective-permutes: the same blocks on other devices ---- */

/* The mesh axes sh splits dims by, as a mask. */
static uint32_t split_axes(const Module *m, const Sharding *sh) {
    uint32_t mask = 0;
    for (int a = 0; a < m->naxes; a++)
        if (sh->known && sh->dim[a] >= 0)
            mask |= 1u << a;
    return mask;
}

/* Of the axes in `pool` (mesh order), the first set, by bit pattern,
 * whose sizes multiply to `want` (0: none); `prefer` first when it does. */
static uint32_t axes_making(const Module *m, uint32_t pool, int64_t want, uint32_t prefer) {
    int axes[MAX_AXES], n = 0;
    for (int a = 0; a < m->naxes; a++)
        if (pool >> a & 1)
            axes[n++] = a;
    uint32_t best = 0;
    for (uint32_t set = 1; set < 1u << n && !best; set++) {
        int64_t k = 1;
        uint32_t mask = 0;
        for (int i = 0; i < n; i++)
            if (set >> i & 1)
                k *= m->axis_size[axes[i]], mask |= 1u << axes[i];
        if (k == want)
            best = mask;
    }
    int64_t k = 1;
    for (int a = 0; a < m->naxes; a++)
        if (prefer >> a & 1)
            k *= m->axis_size[a];
    return prefer && (prefer & ~pool) == 0 && k == want ? prefer : best;
}

/* A relabeling of `to` close to `from`: each dim split into as many blocks
 * as `to` splits it, over the axes `to` uses, keeping on each dim the
 * longest prefix of from's axes that fits.  The recipe reaches it cheaply
 * (an all-to-all in a subgroup instead of gathers) and one permute then
 * hands every block to the device `to` gives it.  0 when there is none or
 * it is `to` itself. */
static int relabel_near(const Module *m, const Shape *global, const Sharding *from, const Sharding *to,
                        Sharding *mid) {
    uint32_t used = split_axes(m, to), placed = 0;
    int64_t need[MAX_RANK];
    *mid = *to;
    for (int a = 0; a < MAX_AXES; a++)
        mid->dim[a] = SH_REPLICATED;
    for (int d = 0; d < global->rank; d++) {
        int want[MAX_AXES], have[MAX_AXES];
        int nw = sharding_dim_axes(to, d, want), nh = sharding_dim_axes(from, d, have);
        need[d] = axes_product(m, want, nw);
        for (int i = 0; i < nh && (used >> have[i] & 1) && need[d] % m->axis_size[have[i]] == 0; i++) {
            add_axis(mid, have[i], d);
            need[d] /= m->axis_size[have[i]];
            placed |= 1u << have[i];
        }
    }
    for (int d = 0; d < global->rank; d++) {
        if (need[d] == 1)
            continue;
        uint32_t prefer = 0;
        for (int a = 0; a < m->naxes; a++)
            if (to->dim[a] == d && !(placed >> a & 1))
                prefer |= 1u << a;
        uint32_t set = axes_making(m, used & ~placed, need[d], prefer);
        if (!set)
            return 0;
        for (int a = 0; a < m->naxes; a++)
            if (set >> a & 1)
                add_axis(mid, a, d);
        placed |= set;
    }
    return placed == used && !same_split(mid, to, global->rank);
}

/* x, split like `to` over the same axes into as many blocks per dim, moved
 * by one collective-permute over those axes to the devices `to` gives
 * each block: device j (its coordinates over the axes) holds block b of
 * each dim under x's sharding, which under `to` belongs to the device
 * whose coordinates spell b. */
static void permute_to(Part *p, Piece *x, const Sharding *to) {
    const Module *m = p->m;
    int axes[MAX_AXES], n = 0, rank = x->global.rank;
    for (int a = 0; a < m->naxes; a++)
        if (to->dim[a] >= 0)
            axes[n++] = a;
    int64_t k = axes_product(m, axes, n);
    int64_t *attrs = permute_attrs(p, axes, n, k);
    for (int64_t j = 0; j < k; j++) {
        int64_t coord[MAX_AXES] = {0}, rest = j, target[MAX_AXES] = {0};
        for (int i = n - 1; i >= 0; i--)
            coord[axes[i]] = rest % m->axis_size[axes[i]], rest /= m->axis_size[axes[i]];
        for (int d = 0; d < rank; d++) {
            int have[MAX_AXES], want[MAX_AXES];
            int nh = sharding_dim_axes(&x->sh, d, have), nw = sharding_dim_axes(to, d, want);
            int64_t b = 0;
            for (int i = 0; i < nh; i++)
                b = b * m->axis_size[have[i]] + coord[have[i]];
            for (int i = nw - 1; i >= 0; i--)
                target[want[i]] = b % m->axis_size[want[i]], b /= m->axis_size[want[i]];
        }
        int64_t t = 0;
        for (int i = 0; i < n; i++)
            t = t * m->axis_size[axes[i]] + target[axes[i]];
        attrs[1 + n + 2 * j] = j;
        attrs[2 + n + 2 * j] = t;
    }
    Sharding sh = x->sh;
    memcpy(sh.dim, to->dim, sizeof sh.dim);
    memcpy(sh.pos, to->pos, sizeof sh.pos);
    set_sharding(p, x, emit_local(p, OP_COLLECTIVE_PERMUTE, (int32_t[]){x->v}, 1, attrs, (int)(1 + n + 2 * k), NULL),
                 &sh);
}

/* ---- broadcast from the owners ---- */

/* x whole on every device by one all-reduce: each device places its block
 * at its rows of every split dim, zeros elsewhere (its padding falls past
 * the end), and the sum over the split axes puts every block in place.
 * It sends 2 (k - 1) / k of the whole value, less than gathering padded
 * blocks that are mostly padding (one row over many devices): GSPMD's
 * broadcast from the owner.  A -0.0 comes back as 0.0, as there. */
static void sum_to_whole(Part *p, Piece *x) {
    int64_t attrs[1 + MAX_AXES] = {RED_SUM};
    int nattrs = 1;
    for (int d = 0; d < x->global.rank; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(&x->sh, d, axes);
        if (!n)
            continue;
        Shape local = p->dst->insts[x->v].type;
        int64_t k = axes_product(p->m, axes, n), b = local.dims[d], rows = x->global.dims[d];
        int v = pad_zeros(p, x->v, d, (k - 1) * b, rows > b ? rows - b : 0);
        int at = emit_local(p, OP_MUL, (int32_t[]){linear_index(p, axes, n), i32_constant(p, -b)}, 2, NULL, 0, NULL);
        int32_t args[1 + MAX_RANK] = {v};
        for (int i = 0; i < local.rank; i++)      /* block j at rows j b: from row (k - 1 - j) b */
            args[1 + i] = i == d ? emit_local(p, OP_ADD, (int32_t[]){at, i32_constant(p, (k - 1) * b)}, 2, NULL, 0,
                                              NULL)
                                 : i32_constant(p, 0);
        local.dims[d] = rows;
        x->v = emit_local(p, OP_DYNAMIC_SLICE, args, 1 + local.rank, NULL, 0, &local);
        for (int i = 0; i < n; i++)
            attrs[nattrs++] = axes[i];
    }
    Sharding rep = sharding_replicated();
    set_sharding(p, x, emit_local(p, OP_ALL_REDUCE, (int32_t[]){x->v}, 1, attrs, nattrs, NULL), &rep);
}

/* The axes the target splits no dim by gathered first, each dim from its
 * first such axis on: the axes left may then move by an all-to-all into
 * the dims those held, as GSPMD gathers the axes it replicates first
 * (the recipe moves axes first, and gathers those that cannot move). */
static void drop_first(Part *p, Piece *x, const Sharding *to, Piece *whole) {
    int was_split = !sharding_is_replicated(&x->sh);
    for (int d = 0; d < x->global.rank; d++) {
        int have[MAX_AXES], nh = sharding_dim_axes(&x->sh, d, have), keep = 0;
        while (keep < nh && to->dim[have[keep]] >= 0)
            keep++;
        gather_dim(p, x, d, keep);
    }
    Piece gathered = *x;
    recipe(p, x, to, whole, 0);
    if (was_split && sharding_is_replicated(&gathered.sh) && !sharding_is_replicated(to))
        *whole = gathered;       /* gathered whole, then sliced */
}

/* Does the target split no dim by some axis x splits one by, and a dim by
 * another (else gathering first is the recipe)? */
static int drops_axes(const Piece *x, const Sharding *to) {
    int drops = 0, keeps = 0;
    for (int a = 0; a < MAX_AXES; a++) {
        drops |= x->sh.dim[a] >= 0 && to->dim[a] < 0;
        keeps |= x->sh.dim[a] >= 0 && to->dim[a] >= 0;
    }
    return drops && keeps;
}

/* ---- the planner ---- */

/* The ways a reshard is tried (docs/partitioning.md, "The reshard
 * planner"): the fixed recipe; the recipe regathering uneven dims axes
 * leave (when the value splits one); the recipe to a relabeling of the
 * target, then a collective-permute; every axis gathered, then sliced;
 * the whole value summed from the blocks' owners (sum_to_whole, when a
 * dim is uneven), then sliced; the axes the target drops gathered first
 * (drop_first), then the recipe; when one dim's axes grow or shrink at
 * the end, the rows that cross its new block boundaries moved
 * (halo_reshard, halo.c), or, when it loses axes, moved to shares of the
 * new blocks that an all-gather then assembles.  Each is
 * emitted, weighed by the bytes its collectives send per device (then
 * their number) and taken back; the cheapest, the first of equals, is
 * emitted again.  A few tries per reshard, each linear in the rank. */
typedef enum {
    PLAN_RECIPE, PLAN_REGATHER, PLAN_PERMUTE, PLAN_WHOLE, PLAN_SUM, PLAN_DROP, PLAN_HALO, PLAN_HALO_GATHER, NPLANS
} PlanKind;
typedef struct {
    int ok;
    Sharding mid;                /* PLAN_PERMUTE: the relabeling of the target reached first */
    int64_t bytes;
    int ncollectives;
} Candidate;

static void run_plan(Part *p, PlanKind kind, const Candidate *c, Piece *x, const Sharding *to, Piece *whole) {
    whole->v = -1;
    switch (kind) {
    case PLAN_RECIPE: recipe(p, x, to, whole, 0); return;
    case PLAN_REGATHER: recipe(p, x, to, whole, 1); return;
    case PLAN_PERMUTE:
        recipe(p, x, &c->mid, whole, 0);
        permute_to(p, x, to);
        return;
    case PLAN_WHOLE: {
        Sharding rep = sharding_replicated();
        int was_split = !has_partial(&x->sh);
        recipe(p, x, &rep, whole, 0);
        if (was_split && !sharding_is_replicated(to))
            *whole = *x;
        recipe(p, x, to, &(Piece){0}, 0);
        return;
    }
    case PLAN_SUM:
        sum_to_whole(p, x);
        if (!sharding_is_replicated(to))
            *whole = *x;
        recipe(p, x, to, &(Piece){0}, 0);
        return;
    case PLAN_DROP: drop_first(p, x, to, whole); return;
    case PLAN_HALO: halo_reshard(p, x, to, halo_reshard_dim(x, to), 0); return;
    case PLAN_HALO_GATHER: halo_reshard(p, x, to, halo_reshard_dim(x, to), 1); return;
    case NPLANS: return;
    }
}

/* Does sh split an uneven dim (where regathering can differ from the recipe)? */
static int uneven_split(const Module *m, const Shape *global, const Sharding *sh) {
    for (int d = 0; d < global->rank; d++)
        if (!dim_is_even(m, global, sh, d))
            return 1;
    return 0;
}

/* Emit the plan, count what it sends, take it back. */
static void weigh(Part *p, PlanKind kind, Candidate *c, Piece x, const Sharding *to) {
    Mark before = mark(p);
    Piece whole;
    run_plan(p, kind, c, &x, to, &whole);
    c->bytes = bytes_since(p, before, &c->ncollectives);
    rollback(p, before);
}

/* "reshard {X,(Y,Z)} -> {(Y,X),Z}, candidates: direct 14336 bytes in 2
 * collectives; via {(X,Z),Y} + collective-permute 3072 bytes in 2
 * collectives (chosen); whole 14336 bytes in 2 collectives" */
static const char *candidates_note(Part *p, const Candidate *c, int chosen, const Piece *from, const Sharding *to) {
    Arena *arena = p->m->arena;
    const char *text = arena_printf(arena, "reshard %s -> %s, candidates:", sharding_text(p, &from->global, &from->sh),
                                    sharding_text(p, &from->global, to));
    for (int k = 0; k < NPLANS; k++) {
        if (!c[k].ok)
            continue;
        const char *name = k == PLAN_RECIPE ? "direct"
                         : k == PLAN_REGATHER ? "regather"
                         : k == PLAN_WHOLE ? "whole"
                         : k == PLAN_SUM ? "summed from the owners"
                         : k == PLAN_DROP ? "dropped axes gathered first"
                         : k == PLAN_HALO ? "rows that cross blocks moved"
                         : k == PLAN_HALO_GATHER ? "rows that cross blocks moved, then gathered"
                         : arena_printf(arena, "via %s + collective-permute", sharding_text(p, &from->global, &c[k].mid));
        text = arena_printf(arena, "%s%s %s %lld bytes in %d collective%s%s", text, k ? ";" : "", name,
                            (long long)c[k].bytes, c[k].ncollectives, c[k].ncollectives == 1 ? "" : "s",
                            k == chosen ? " (chosen)" : "");
    }
    return text;
}

/* A block resharded the same way twice is resharded once: the second
 * reader gets the first result (and the first warning, at its own place). */
Piece reshard(Part *p, Piece x, const Sharding *to) {
    if (!has_partial(&x.sh) && same_split(&x.sh, to, x.global.rank))
        return x;
    const Reshard *done = find_reshard(p, &x, to);
    if (done) {
        if (done->warned)
            warn_replicated_whole(p);
        x.v = done->out;
        x.sh = done->out_sh;
        return x;
    }
    Piece from = x;
    int first = p->dst->ninsts;
    Candidate c[NPLANS] = {{.ok = 1}};
    Sharding reduced = sharding_without(&x.sh, partial_axes(&x.sh), SH_REPLICATED);
    c[PLAN_PERMUTE].ok = !has_partial(to) && relabel_near(p->m, &x.global, &reduced, to, &c[PLAN_PERMUTE].mid);
    c[PLAN_WHOLE].ok = !sharding_is_replicated(&reduced) && !sharding_is_replicated(to);
    c[PLAN_REGATHER].ok = uneven_split(p->m, &x.global, &reduced);
    int halo = halo_reshard_dim(&x, to), axes[MAX_AXES];
    c[PLAN_HALO].ok = halo >= 0;
    c[PLAN_HALO_GATHER].ok = halo >= 0 && sharding_dim_axes(&x.sh, halo, axes) > sharding_dim_axes(to, halo, axes);
    c[PLAN_DROP].ok = !has_partial(&x.sh) && drops_axes(&x, to);
    c[PLAN_SUM].ok = !has_partial(&x.sh) && uneven_split(p->m, &x.global, &x.sh) && dtype_is_num(x.global.dtype);
    int chosen = PLAN_RECIPE;
    for (int k = 0; k < NPLANS; k++) {
        if (!c[k].ok)
            continue;
        weigh(p, (PlanKind)k, &c[k], x, to);
        if (c[k].bytes < c[chosen].bytes ||
            (c[k].bytes == c[chosen].bytes && c[k].ncollectives < c[chosen].ncollectives))
            chosen = k;
    }
    Piece whole;
    run_plan(p, (PlanKind)chosen, &c[chosen], &x, to, &whole);
    int warned = whole.v >= 0;
    if (warned) {
        /* The whole value is on every device now: a later reshard of the
         * block to replicated reuses it too. */
        Sharding rep = sharding_replicated();
        remember_reshard(p, &from, &rep, &whole, 0);
        warn_replicated_whole(p);
    }
    remember_reshard(p, &from, to, &x, warned);
    if (new_collectives(p, first)) {
        note_move(p, first, from.v, MOVE_RESHARD, reshard_min_bytes(p, &from, to));
        if (p->m->reshard_candidates)
            add_note(p->m, p->dst, p->dst->ninsts - 1, candidates_note(p, c, chosen, &from, to));
    }
    return x;
}

/* The fill that a max (highest = 0) or min (highest = 1) cannot see: the
 * dtype's lowest or highest value, infinity for floats.  2^63 stands for
 * INT64_MAX, as constants are doubles (sk_to_i64 and the C literals
 * saturate it). */
static double extreme(int dt, int highest) {
    switch (dt) {
    case DT_I32: return highest ? (double)INT32_MAX : (double)INT32_MIN;
    case DT_I64: return highest ? 0x1p63 : -0x1p63;
    case DT_U8: return highest ? (double)UINT8_MAX : 0.0;
    case DT_U32: return highest ? (double)UINT32_MAX : 0.0;
    default: return highest ? INFINITY : -INFINITY;
    }
}

/* Replace the padding of dim d's uneven blocks with `identity`, so a sum,
 * max or min over the blocks cannot see it: position i of the block is
 * padding when block * b + i >= n. */
int mask_padding(Part *p, Piece x, int d, Reducer reducer) {
    Shape local = p->dst->insts[x.v].type, pos_shape = local;
    pos_shape.dtype = DT_I32;
    int axes[MAX_AXES], n = sharding_dim_axes(&x.sh, d, axes);
    int64_t dim = d;
    int iota = emit_local(p, OP_IOTA, NULL, 0, &dim, 1, &pos_shape);
    int start = emit_local(p, OP_MUL, (int32_t[]){linear_index(p, axes, n), i32_constant(p, local.dims[d])}, 2,
                           NULL, 0, NULL);
    int pos = emit_local(p, OP_ADD, (int32_t[]){iota, emit_local(p, OP_BROADCAST, (int32_t[]){start}, 1, NULL, 0,
                                                                  &pos_shape)}, 2, NULL, 0, NULL);
    int limit = splat(p, (double)x.global.dims[d], &pos_shape);
    int valid = emit_local(p, OP_COMPARE, (int32_t[]){pos, limit}, 2, (int64_t[]){CMP_LT}, 1, NULL);
    int fill = splat(p, reducer == RED_SUM ? 0.0 : extreme(local.dtype, reducer != RED_MAX), &local);
    int v = emit_local(p, OP_SELECT, (int32_t[]){valid, x.v, fill}, 3, NULL, 0, NULL);
    p->dst->insts[v].sh = x.sh;
    return v;
}
