/* Partial sums kept past a dot.
 *
 * A value holding unreduced partial sums along some axes (a masked gather
 * from a table split on the gathered dim, a dot whose contracting dim is
 * split) is normally reduced right away, to its own sharding.  When its
 * only user is a dot, the dot can run on the partial blocks instead: it is
 * linear in each operand, so its result holds the partial sums of the
 * product, and the reduction moves the product, which is often far smaller
 * (GSPMD does the same).  A mixture of experts' gathered [S, D, F] weights
 * become an [S, F] reduction this way.  The other operand must then be
 * whole along those axes; the choice is the one that sends fewer bytes. */
#include "part.h"

/* ---- bf16 and f16 partial sums are f32 ----
 * Their sums accumulate in f32 and are rounded once (docs/language.md), so
 * the partial sums of a split sum must not be rounded per device: the op
 * that makes them runs on f32 operands (a dot writes f32 sums of its
 * narrow operands instead: dot_is_wide, ir.h), the partial blocks are
 * reduced in f32 (twice the bytes), and the reduced block is rounded once.
 * A piece is wide when its block is f32 and its global dtype narrower;
 * only partial pieces are. */

int piece_is_wide(const Part *p, const Piece *x) {
    return p->dst->insts[x->v].type.dtype != x->global.dtype;
}

/* Block v converted to dtype, sharded sh (a copy: emitting may move the instructions). */
static int converted(Part *p, int v, int dtype, Sharding sh) {
    Shape s = p->dst->insts[v].type;
    s.dtype = (uint8_t)dtype;
    int w = emit_local(p, OP_CONVERT, (int32_t[]){v}, 1, NULL, 0, &s);
    p->dst->insts[w].sh = sh;
    return w;
}

int widen(Part *p, int v) {
    int dtype = p->dst->insts[v].type.dtype;
    return dtype == sum_dtype(dtype) ? v : converted(p, v, sum_dtype(dtype), p->dst->insts[v].sh);
}

void narrow_reduced(Part *p, Piece *x) {
    if (!partial_axes(&x->sh) && piece_is_wide(p, x))
        x->v = converted(p, x->v, x->global.dtype, x->sh);
}

void find_only_users(Part *p) {
    const Fn *src = p->src;
    p->only_user = arena_alloc(p->m->arena, sizeof(int32_t) * (size_t)(src->ninsts + 1));
    for (int v = 0; v < src->ninsts; v++)
        p->only_user[v] = -1;
    for (int u = 0; u < src->ninsts; u++)
        for (int i = 0; i < src->insts[u].nargs; i++) {
            int v = ir_arg(src, &src->insts[u], i);
            p->only_user[v] = p->only_user[v] == -1 ? u : -2;
        }
}

uint32_t partial_axes(const Sharding *sh) {
    uint32_t axes = 0;
    for (int a = 0; a < MAX_AXES; a++)
        if (sh->dim[a] == SH_PARTIAL)
            axes |= 1u << a;
    return axes;
}

Sharding sharding_without(const Sharding *sh, uint32_t axes, int8_t to) {
    Sharding out = *sh;
    for (int a = 0; a < MAX_AXES; a++)
        if (axes >> a & 1) {
            out.dim[a] = to;
            out.pos[a] = 0;
        }
    for (int d = 0; d < MAX_RANK; d++) {    /* the axes left on each dim, renumbered major first */
        int left[MAX_AXES], n = sharding_dim_axes(&out, d, left);
        for (int i = 0; i < n; i++)
            out.pos[left[i]] = (uint8_t)i;
    }
    return out;
}

/* The dot that would take src value v's partial sums along `partial`'s
 * axes, or -1: v's only user, a dot at the same place, with v once. */
static int absorbing_dot(const Part *p, int v, const Sharding *partial) {
    int u = p->only_user[v];
    if (u < 0 || partial->reducer != RED_SUM || !partial_axes(partial))
        return -1;
    const Inst *dot = &p->src->insts[u];
    if (dot->op != OP_DOT || dot->place != p->src->insts[v].place || ir_arg(p->src, dot, 0) == ir_arg(p->src, dot, 1))
        return -1;
    return u;
}

/* The axes splitting the dims the dot contracts of its operand o. */
static uint32_t contracted_axes(const Fn *src, const Inst *dot, int o, const Sharding *sh) {
    DotDims dd;
    dot_dims(src, dot, &dd);
    const int64_t *dims = ir_arg(src, dot, 0) == o ? dd.lhs_contract : dd.rhs_contract;
    uint32_t mask = 0;
    for (int i = 0; i < dd.ncontract; i++) {
        int axes[MAX_AXES], n = sharding_dim_axes(sh, (int)dims[i], axes);
        for (int j = 0; j < n; j++)
            mask |= 1u << axes[j];
    }
    return mask;
}

DotReads dot_reads(const Part *p, int u, int v, uint32_t axes) {
    const Fn *src = p->src;
    const Inst *dot = &src->insts[u];
    int o = ir_arg(src, dot, ir_arg(src, dot, 0) == v ? 1 : 0);
    const Sharding *sh = &src->insts[o].sh;
    Sharding need = sharding_without(sh, contracted_axes(src, dot, o, sh), SH_REPLICATED);
    DotReads r = {o, sharding_without(&need, axes, SH_REPLICATED), sharding_without(&dot->sh, axes, SH_PARTIAL)};
    r.result_sh.reducer = RED_SUM;
    return r;
}

/* Bytes per device to reduce v (with `partial`'s sharding) after its dot
 * instead: what making the other operand whole along the partial axes
 * adds to what the dot moves of it anyway (taken as its contracted dims
 * gathered: a whole block there costs more to gather over the other axes
 * too), then the dot's result reduced to its own sharding; -1 when no dot
 * takes it. */
static int64_t deferred_bytes(const Part *p, int v, const Sharding *partial) {
    int u = absorbing_dot(p, v, partial);
    if (u < 0)
        return -1;
    const Fn *src = p->src;
    DotReads now = dot_reads(p, u, v, 0), later = dot_reads(p, u, v, partial_axes(partial));
    Piece other = {.sh = src->insts[now.other].sh, .global = src->insts[now.other].type};
    Piece result = {.sh = later.result_sh, .global = src->insts[u].type};
    int64_t more = reshard_min_bytes(p, &other, &later.other_sh) - reshard_min_bytes(p, &other, &now.other_sh);
    return (more > 0 ? more : 0) + reshard_min_bytes(p, &result, &src->insts[u].sh);
}

static int64_t reduce_now_bytes(const Part *p, int v, const Sharding *partial) {
    Piece x = {.sh = *partial, .global = p->src->insts[v].type};
    return reshard_min_bytes(p, &x, &p->src->insts[v].sh);
}

int64_t partial_sum_bytes(const Part *p, int v, const Sharding *partial) {
    int64_t now = reduce_now_bytes(p, v, partial), later = deferred_bytes(p, v, partial);
    return later >= 0 && later < now ? later : now;
}

/* A sum of partial sums along the same axes is their partial sum: when v's
 * partial sums flow to an add at the same place whose other operand o is
 * partial the same way (or, not lowered yet, may be), v stays partial and
 * the add's result is reduced once.  The backward pass of attention adds
 * the three dots' partial sums of dx: one all-reduce, not three.  A
 * transpose of partial sums is the partial sums of the transpose, so the
 * sums may reach the add through transposes each read only by the next: a
 * tied embedding's gradient adds the logits dot's contribution, transposed,
 * to the lookup's scatter-add, and both are reduced once.  A guess that o
 * will be partial that turns out wrong costs nothing: the add (or the
 * transpose) then reduces what it reads as it would have been. */

/* The add that src value v's sums reach, or -1; *operand: the add's
 * operand they reach it as (v, or the last transpose). */
static int summing_add(const Part *p, int v, int *operand) {
    const Fn *src = p->src;
    int place = src->insts[v].place, u = p->only_user[v];
    while (u >= 0 && src->insts[u].op == OP_TRANSPOSE && src->insts[u].place == place) {
        v = u;
        u = p->only_user[u];
    }
    if (u < 0 || src->insts[u].op != OP_ADD || src->insts[u].place != place)
        return -1;
    *operand = v;
    return u;
}

/* May src value o, an operand of add u not lowered yet, be partial sums
 * kept for it: a dot, an add or a scatter-add (or a transpose of one) read
 * only on the way to u? */
static int may_be_partial(const Part *p, int o, int u) {
    const Fn *src = p->src;
    while (src->insts[o].op == OP_TRANSPOSE && p->only_user[o] == u) {
        u = o;
        o = ir_arg(src, &src->insts[o], 0);
    }
    int op = src->insts[o].op;
    return (op == OP_DOT || op == OP_ADD || op == OP_SCATTER) && p->only_user[o] == u;
}

int add_keeps_partial(const Part *p, int v, const Piece *x) {
    const Fn *src = p->src;
    int operand, u = x->sh.reducer == RED_SUM && partial_axes(&x->sh) ? summing_add(p, v, &operand) : -1;
    if (u < 0)
        return 0;
    int a = ir_arg(src, &src->insts[u], 0), b = ir_arg(src, &src->insts[u], 1);
    if (a == b)
        return 0;
    int o = a == operand ? b : a;
    if (o > v)                                       /* not lowered yet */
        return may_be_partial(p, o, u);
    const Sharding *osh = &p->value[o].sh;           /* its blocks are checked at the add */
    return operand == v ? sharding_eq(osh, &x->sh)
                        : osh->reducer == RED_SUM && partial_axes(osh) == partial_axes(&x->sh);
}

int keeps_partial(const Part *p, int v, const Piece *x) {
    int64_t later = deferred_bytes(p, v, &x->sh);
    return later >= 0 && later < reduce_now_bytes(p, v, &x->sh);
}
