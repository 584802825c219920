/* Resharding: turn a block of a value sharded one way into the block the
 * same value has sharded another way, with the fewest collectives:
 *   partial sums      -> reduce-scatter onto the dim the target splits, else all-reduce;
 *   an axis that moves from one dim to another -> all-to-all;
 *   axes the target drops -> all-gather (then trim the padding of uneven dims);
 *   axes the target adds  -> dynamic-slice at the device's block, no communication.
 * Uneven dims (padded blocks) are regathered whole before they are split
 * again, because their padded blocks do not nest.  Each function caches its
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

/* The device's index over `axes`, major first, as an i32 scalar. */
int linear_index(Part *p, const int *axes, int n) {
    int64_t attrs[MAX_AXES];
    for (int i = 0; i < n; i++)
        attrs[i] = axes[i];
    return emit_local(p, OP_AXIS_INDEX, NULL, 0, attrs, n, NULL);
}

static int i32_constant(Part *p, int64_t value) {
    Shape s = {DT_I32, 0, {0}};
    int k = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &s);
    p->dst->insts[k].value = (double)value;
    return k;
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
    Sharding sh = x->sh;
    for (int i = 0; i < np; i++)
        sh.dim[partial[i]] = SH_REPLICATED;
    if (nr) {
        int64_t attrs[1 + MAX_AXES] = {x->sh.reducer};
        for (int i = 0; i < nr; i++)
            attrs[1 + i] = rest[i];
        Sharding mid = sh;
        for (int i = 0; i < ns; i++)
            mid.dim[scatter[i]] = SH_PARTIAL;
        set_sharding(p, x, emit_local(p, OP_ALL_REDUCE, (int32_t[]){x->v}, 1, attrs, 1 + nr, NULL), &mid);
    }
    if (ns) {
        int64_t attrs[2 + MAX_AXES] = {x->sh.reducer, dim};
        for (int i = 0; i < ns; i++) {
            attrs[2 + i] = scatter[i];
            add_axis(&sh, scatter[i], dim);
        }
        set_sharding(p, x, emit_local(p, OP_REDUCE_SCATTER, (int32_t[]){x->v}, 1, attrs, 2 + ns, NULL), &sh);
    }
    x->sh = sh;
}

/* ---- moving axes ---- */

/* An axis that is the minor axis of one dim and should become the next axis
 * of another: one all-to-all moves it, when both dims divide evenly. */
static void move_axes(Part *p, Piece *x, const Sharding *to) {
    for (int a = 0; a < p->m->naxes; a++) {
        int from = x->sh.dim[a], dest = to->dim[a];
        if (from < 0 || dest < 0 || from == dest)
            continue;
        int have[MAX_AXES], nh = sharding_dim_axes(&x->sh, from, have);
        int next[MAX_AXES], nn = sharding_dim_axes(&x->sh, dest, next);
        int want[MAX_AXES], nw = sharding_dim_axes(to, dest, want);
        int64_t k = p->m->axis_size[a];
        Shape local = p->dst->insts[x->v].type;
        if (have[nh - 1] != a || nn >= nw || want[nn] != a || memcmp(next, want, sizeof(int) * (size_t)nn) != 0 ||
            local.dims[dest] % k || !dim_is_even(p->m, &x->global, &x->sh, from))
            continue;
        Sharding sh = x->sh;
        sh.dim[a] = SH_REPLICATED;
        add_axis(&sh, a, dest);
        if (!dim_is_even(p->m, &x->global, &sh, dest))
            continue;
        int64_t attrs[3] = {dest, from, a};
        set_sharding(p, x, emit_local(p, OP_ALL_TO_ALL, (int32_t[]){x->v}, 1, attrs, 3, NULL), &sh);
    }
}

/* Gather the axes of dim d past its first `keep`: all of them when the dim
 * is uneven, whose padded blocks only line up when whole. */
static void gather_dim(Part *p, Piece *x, int d, int keep) {
    int have[MAX_AXES], nh = sharding_dim_axes(&x->sh, d, have);
    int even = dim_is_even(p->m, &x->global, &x->sh, d);
    if (nh <= keep)
        return;
    if (!even)
        keep = 0;
    int64_t attrs[1 + MAX_AXES] = {d};
    for (int i = keep; i < nh; i++)
        attrs[1 + i - keep] = have[i];
    Sharding sh = x->sh;
    for (int i = keep; i < nh; i++)
        sh.dim[have[i]] = SH_REPLICATED;
    set_sharding(p, x, emit_local(p, OP_ALL_GATHER, (int32_t[]){x->v}, 1, attrs, 1 + nh - keep, NULL), &sh);
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
    if (block * k != local.dims[d]) {
        Shape pad = local;
        pad.dims[d] = block * k - local.dims[d];
        Shape zero = {local.dtype, 0, {0}};
        int z = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &zero);
        int zeros = emit_local(p, OP_BROADCAST, (int32_t[]){z}, 1, NULL, 0, &pad);
        int64_t dim = d;
        x->v = emit_local(p, OP_CONCAT, (int32_t[]){x->v, zeros}, 2, &dim, 1, NULL);
    }
    int idx = linear_index(p, axes, n);
    int offset = emit_local(p, OP_MUL, (int32_t[]){idx, i32_constant(p, block)}, 2, NULL, 0, NULL);
    int32_t args[1 + MAX_RANK] = {x->v};
    for (int i = 0; i < local.rank; i++)
        args[1 + i] = i == d ? offset : i32_constant(p, 0);
    Shape out = p->dst->insts[x->v].type;
    out.dims[d] = block;
    set_sharding(p, x, emit_local(p, OP_DYNAMIC_SLICE, args, 1 + local.rank, NULL, 0, &out), &sh);
}

static int same_split(const Sharding *a, const Sharding *b, int rank) {
    for (int d = 0; d < rank; d++) {
        int x[MAX_AXES], y[MAX_AXES];
        int nx = sharding_dim_axes(a, d, x), ny = sharding_dim_axes(b, d, y);
        if (nx != ny || memcmp(x, y, sizeof(int) * (size_t)nx) != 0)
            return 0;
    }
    return 1;
}

static int has_partial(const Sharding *sh) {
    for (int a = 0; a < MAX_AXES; a++)
        if (sh->dim[a] == SH_PARTIAL)
            return 1;
    return 0;
}

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
    int was_split = !sharding_is_replicated(&x.sh) && !has_partial(&x.sh);
    resolve_partial(p, &x, to);
    move_axes(p, &x, to);
    /* Keep on each dim the longest prefix of axes the target also has. */
    for (int d = 0; d < x.global.rank; d++) {
        int have[MAX_AXES], want[MAX_AXES];
        int nh = sharding_dim_axes(&x.sh, d, have), nw = sharding_dim_axes(to, d, want), keep = 0;
        while (keep < nh && keep < nw && have[keep] == want[keep] && to->dim[have[keep]] == d)
            keep++;
        if (keep < nw && !dim_is_even(p->m, &x.global, to, d))
            keep = 0;            /* an uneven split is taken from the whole dim */
        gather_dim(p, &x, d, keep);
    }
    int warned = was_split && sharding_is_replicated(&x.sh) && !sharding_is_replicated(to);
    if (warned) {
        /* The whole value is on every device now: a later reshard of the
         * block to replicated reuses it too. */
        Sharding rep = sharding_replicated();
        remember_reshard(p, &from, &rep, &x, 0);
        warn_replicated_whole(p);
    }
    for (int d = 0; d < x.global.rank; d++) {
        int have[MAX_AXES], want[MAX_AXES];
        int nh = sharding_dim_axes(&x.sh, d, have), nw = sharding_dim_axes(to, d, want);
        if (nw > nh)
            slice_dim(p, &x, d, want + nh, nw - nh);
    }
    remember_reshard(p, &from, to, &x, warned);
    return x;
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
    int limit = emit_local(p, OP_BROADCAST, (int32_t[]){i32_constant(p, x.global.dims[d])}, 1, NULL, 0, &pos_shape);
    int valid = emit_local(p, OP_COMPARE, (int32_t[]){pos, limit}, 2, (int64_t[]){CMP_LT}, 1, NULL);
    Shape scalar = {local.dtype, 0, {0}};
    int k = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &scalar);
    int is_int = local.dtype == DT_I32;
    p->dst->insts[k].value = reducer == RED_SUM ? 0.0
                           : reducer == RED_MAX ? (is_int ? (double)INT32_MIN : -INFINITY)
                           : (is_int ? (double)INT32_MAX : INFINITY);
    int fill = emit_local(p, OP_BROADCAST, (int32_t[]){k}, 1, NULL, 0, &local);
    int v = emit_local(p, OP_SELECT, (int32_t[]){valid, x.v, fill}, 3, NULL, 0, NULL);
    p->dst->insts[v].sh = x.sh;
    return v;
}
