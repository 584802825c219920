/* Reverse-mode differentiation of the global program (docs/grad.md).
 *
 * A derived fn (grad_of) is its source fn's instructions copied, then the
 * same instructions walked backwards: each value that depends on a
 * differentiated parameter and reaches the loss (an active value) hands
 * its cotangent to its operands by its op's rule (adjoint.c), summing
 * where a value has several users.  A call inside is differentiated by the
 * callee's backward fns (callees.c), so every fn is differentiated once
 * however often it is called.  The result is an ordinary fn: propagation
 * gives gradients their shardings and the partitioner their collectives,
 * the transposes of the forward ones.
 *
 * In an spmd fn the cotangent of a value that is the same on every device
 * along an axis (a replicated parameter, a psum) is that same full value on
 * every device; where such a value meets one that differs along the axis,
 * the devices' contributions to its cotangent are summed over the axis
 * (give): JAX's pvary, whose transpose is psum. */
#include "internal.h"

#include <setjmp.h>

int ct_dtype(int dtype) { return sum_dtype(dtype); }   /* cotangents are the dtype sums are in */

const Shape *src_type(const Grad *g, int v) { return &g->src->insts[v].type; }

Shape ct_shape(const Grad *g, int v) {
    Shape s = *src_type(g, v);
    s.dtype = (uint8_t)ct_dtype(s.dtype);
    return s;
}

int g_emit(Grad *g, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs, const Shape *type) {
    const Inst *at = &g->src->insts[g->v];
    int x = ir_emit(g->m, g->dst, op, args, nargs, attrs, nattrs, type, at->loc);
    g->dst->insts[x].place = op == OP_CALL ? (uint8_t)g->m->fns[attrs[0]].on : at->place;
    return x;
}

int g_const(Grad *g, double value, const Shape *shape) {
    Shape scalar = {shape->dtype, 0, {0}};
    int k = g_emit(g, OP_CONSTANT, NULL, 0, NULL, 0, &scalar);
    g->dst->insts[k].value = value;
    return shape->rank ? g_emit(g, OP_BROADCAST, (int32_t[]){k}, 1, NULL, 0, shape) : k;
}

int g_cast(Grad *g, int x, int dtype) {
    Shape s = g->dst->insts[x].type;
    if (s.dtype == dtype)
        return x;
    s.dtype = (uint8_t)dtype;
    return g_emit(g, OP_CONVERT, (int32_t[]){x}, 1, NULL, 0, &s);
}

int g_fwd(Grad *g, int v) {
    int dt = src_type(g, v)->dtype;
    if (ct_dtype(dt) == dt)
        return g->fwd[v];
    if (g->fwd_ct[v] < 0)
        g->fwd_ct[v] = g_cast(g, g->fwd[v], ct_dtype(dt));
    return g->fwd_ct[v];
}

int g_psum(Grad *g, int x, uint32_t axes) {
    int64_t attrs[1 + MAX_AXES];
    int n = 0;
    attrs[n++] = RED_SUM;
    for (int a = 0; a < MAX_AXES; a++)
        if (axes >> a & 1)
            attrs[n++] = a;
    return n == 1 ? x : g_emit(g, OP_ALL_REDUCE, (int32_t[]){x}, 1, attrs, n, NULL);
}

void add_ct(Grad *g, int o, int c) {
    g->ct[o] = g->ct[o] < 0 ? c : g_emit(g, OP_ADD, (int32_t[]){g->ct[o], c}, 2, NULL, 0, NULL);
}

void give_exact(Grad *g, int i, int c) {
    int o = ir_arg(g->src, &g->src->insts[g->v], i);
    if (g->active[o])
        add_ct(g, o, c);
}

void give(Grad *g, int i, int c) {
    int o = ir_arg(g->src, &g->src->insts[g->v], i);
    if (!g->active[o])
        return;
    if (g->varies)
        c = g_psum(g, c, g->varies[g->v] & ~g->varies[o]);
    add_ct(g, o, c);
}

/* A slice's cotangent padded with zeros to its operand's shape, added
 * piece by piece, costs a zero fill, a copy and an add of the whole operand
 * per piece: the L slices w[l] of a stacked weight cost L times the
 * gradient's bytes three times over.  So the pieces wait (flush_pieces),
 * and those that tile the dim become one concatenate. */
void give_slice(Grad *g, int i, int c, int d, int64_t lo, int64_t hi) {
    int o = ir_arg(g->src, &g->src->insts[g->v], i);
    if (!g->active[o])
        return;
    if (g->varies)
        c = g_psum(g, c, g->varies[g->v] & ~g->varies[o]);
    if (g->npieces == g->cap_pieces) {
        int cap = g->cap_pieces ? 2 * g->cap_pieces : 16;
        g->pieces = arena_realloc(g->m->arena, g->pieces, sizeof(SlicePiece) * (size_t)g->cap_pieces,
                                  sizeof(SlicePiece) * (size_t)cap);
        g->cap_pieces = cap;
    }
    g->pieces[g->npieces] = (SlicePiece){c, g->piece_head[o], d, lo, hi};
    g->piece_head[o] = g->npieces++;
}

/* The concatenate of parts[0, np) along dim.  An op's sharding rule covers
 * at most MAX_RULE_TENSORS - 1 operands, so more are concatenated in groups
 * first (a 96-layer stack's gradient: three groups, then one concatenate of
 * them); parts is overwritten. */
static int g_concat(Grad *g, int32_t *parts, int np, int64_t dim) {
    enum { GROUP = MAX_RULE_TENSORS - 1 };
    while (np > GROUP) {
        int ngroups = 0;
        for (int i = 0; i < np; i += GROUP) {
            int n = np - i < GROUP ? np - i : GROUP;
            parts[ngroups++] = n == 1 ? parts[i] : g_emit(g, OP_CONCAT, parts + i, n, &dim, 1, NULL);
        }
        np = ngroups;
    }
    return np == 1 ? parts[0] : g_emit(g, OP_CONCAT, parts, np, &dim, 1, NULL);
}

int g_tile(Grad *g, const SlicePiece *ps, int k, int64_t n) {
    int32_t *parts = arena_alloc(g->m->arena, sizeof(int32_t) * (size_t)(2 * k + 1));
    int np = 0, d = ps[0].dim;
    int64_t at = 0;
    for (int j = 0; j <= k; j++) {
        int64_t next = j < k ? ps[j].lo : n;
        if (next > at) {                            /* zeros up to the next piece */
            Shape s = g->dst->insts[ps[j < k ? j : k - 1].c].type;
            s.dims[d] = next - at;
            parts[np++] = g_const(g, 0, &s);
        }
        if (j < k) {
            parts[np++] = ps[j].c;
            at = ps[j].hi;
        }
    }
    return g_concat(g, parts, np, d);
}

/* Value o's pending pieces into its cotangent: those of one dim that do not
 * overlap as one tile, each other one padded alone. */
static void flush_pieces(Grad *g, int o) {
    int k = 0;
    for (int p = g->piece_head[o]; p >= 0; p = g->pieces[p].next)
        k++;
    if (!k)
        return;
    SlicePiece *ps = arena_alloc(g->m->arena, sizeof(SlicePiece) * (size_t)k);
    int n = 0;
    for (int p = g->piece_head[o]; p >= 0; p = g->pieces[p].next) {   /* sorted by (dim, lo): insertion */
        int j = n++;
        for (; j > 0 && (ps[j - 1].dim > g->pieces[p].dim ||
                         (ps[j - 1].dim == g->pieces[p].dim && ps[j - 1].lo > g->pieces[p].lo)); j--)
            ps[j] = ps[j - 1];
        ps[j] = g->pieces[p];
    }
    g->piece_head[o] = -1;
    const Shape *x = src_type(g, o);
    int tiled = 0;                                  /* ps[0, tiled): the tile, compacted in place */
    for (int j = 0; j < k; j++) {
        if (ps[j].dim == ps[0].dim && (!tiled || ps[j].lo >= ps[tiled - 1].hi))
            ps[tiled++] = ps[j];
        else
            add_ct(g, o, g_tile(g, &ps[j], 1, x->dims[ps[j].dim]));
    }
    add_ct(g, o, g_tile(g, ps, tiled, x->dims[ps[0].dim]));
}

_Noreturn void no_gradient(Grad *g, const char *what) {
    diag_fatal(g->diag, g->src->insts[g->v].loc, "cannot differentiate '%s' with respect to its parameters: %s",
               sym_name(g->m->syms, g->src->sym), what);
}

/* ---- which values take part ---- */

/* active[v]: v is a float value computed from a differentiated parameter
 * (wrt[p] for parameter p) and used, through such values, by a seed.  A
 * stop-gradient's value is taken as computed from nothing: no cotangent
 * reaches its operand (JAX's lax.stop_gradient). */
void find_active(Grad *g, const uint8_t *wrt, const uint8_t *seed) {
    const Fn *src = g->src;
    uint8_t *depends = arena_alloc(g->m->arena, (size_t)src->ninsts + 1);
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v];
        int fl = in->type.dtype == DT_TUPLE || dtype_is_float(in->type.dtype);
        if (in->op == OP_PARAMETER)
            depends[v] = fl && wrt[ir_attr(src, in, 0)];
        for (int i = 0; i < in->nargs && fl && in->op != OP_RETURN && in->op != OP_STOP_GRADIENT; i++)
            depends[v] |= depends[ir_arg(src, in, i)];
    }
    for (int v = src->ninsts - 1; v >= 0; v--) {
        const Inst *in = &src->insts[v];
        g->active[v] = (uint8_t)(g->active[v] | seed[v]) & depends[v];
        for (int i = 0; i < in->nargs && g->active[v]; i++)
            g->active[ir_arg(src, in, i)] = 1;     /* masked by depends when it is reached */
    }
}

/* ---- one body ---- */

Grad grad_begin(Module *m, Diag *diag, const Fn *src, Fn *dst, const Backward *bk) {
    Grad g = {.m = m, .diag = diag, .src = src, .dst = dst, .bk = bk};
    size_t n = (size_t)src->ninsts + 1;
    g.fwd = arena_alloc(m->arena, sizeof(int32_t) * n);
    g.fwd_ct = arena_alloc(m->arena, sizeof(int32_t) * n);
    g.ct = arena_alloc(m->arena, sizeof(int32_t) * n);
    g.res_at = arena_alloc(m->arena, sizeof(int32_t) * n);
    g.piece_head = arena_alloc(m->arena, sizeof(int32_t) * n);
    g.tuple_ct = arena_alloc(m->arena, sizeof(int32_t *) * n);
    g.active = arena_alloc(m->arena, n);
    for (size_t v = 0; v < n; v++)
        g.fwd_ct[v] = g.ct[v] = g.piece_head[v] = -1;
    if (src->spmd) {
        g.varies = arena_alloc(m->arena, sizeof(uint32_t) * n);
        fn_variation(m, src, bk->varies_in[src - m->fns], g.varies);
    }
    return g;
}

void keep_fields(Inst *out, const Inst *in) {
    out->value = in->value;
    out->sym = in->sym;
    out->flags = in->flags;
    out->sh = in->sh;
    out->place = in->place;
}

int reemit(Module *m, Fn *to, const Fn *from, int u, const int32_t *map) {
    const Inst *in = &from->insts[u];
    int32_t *args = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(in->nargs + 1));
    for (int i = 0; i < in->nargs; i++)
        args[i] = map[ir_arg(from, in, i)];
    int x = ir_emit(m, to, (Op)in->op, args, in->nargs, ir_attrs(from, in), in->nattrs, &in->type, in->loc);
    keep_fields(&to->insts[x], in);
    return x;
}

static int copy_inst(Grad *g, Op op, const int32_t *args, const Inst *in) {
    int x = g_emit(g, op, args, in->nargs, ir_attrs(g->src, in), in->nattrs, &in->type);
    keep_fields(&g->dst->insts[x], in);
    return x;
}

/* Call v of the source keeps fwd fn f's results from nres on: note it in
 * bk->kept, once (a callee's body is differentiated for its pair and for
 * its vjp fn). */
static void keep_call(Grad *g, int v, const Fn *f, int nres) {
    KeptCalls *k = g->bk->kept;
    if (!k)
        return;
    const Inst *in = &g->src->insts[v];
    KeptCall c = {(int32_t)(g->src - g->m->fns), v, (int32_t)ir_attr(g->src, in, 0), 0, in->loc};
    for (int i = 0; i < k->n; i++)
        if (k->at[i].fn == c.fn && k->at[i].inst == c.inst)
            return;
    for (int i = nres; i < f->nresults; i++)
        c.bytes += shape_elems(&f->results[i].type) * dtype_size(f->results[i].type.dtype);
    *VEC_PUSH(g->m->arena, k->at, k->n, k->cap) = c;
}

/* An active call of an fn runs its fwd fn instead: the callee's results,
 * then its residuals, which stay for the backward pass. */
static int call_forward(Grad *g, int v, const int32_t *args) {
    const Inst *in = &g->src->insts[v];
    int callee = (int)ir_attr(g->src, in, 0), nres = g->m->fns[callee].nresults;
    int64_t which = g->bk->fwd[callee];
    const Fn *f = &g->m->fns[which];
    if (f->nresults == nres)                     /* no residuals: the plain call */
        return copy_inst(g, OP_CALL, args, in);
    int call = g_emit(g, OP_CALL, args, in->nargs, &which, 1, NULL);
    g->dst->insts[call].sym = in->sym;
    int first = -1;
    for (int64_t i = nres; i < f->nresults; i++) {
        int r = g_emit(g, OP_GET_TUPLE_ELEMENT, (int32_t[]){call}, 1, &i, 1, NULL);
        first = first < 0 ? r : first;
    }
    g->res_at[v] = first;
    keep_call(g, v, f, nres);
    int64_t zero = 0;
    return nres == 1 ? g_emit(g, OP_GET_TUPLE_ELEMENT, (int32_t[]){call}, 1, &zero, 1, NULL) : call;
}

/* The source's instructions, but its return. */
void copy_forward(Grad *g) {
    const Fn *src = g->src;
    for (int v = 0; v < src->ninsts - 1; v++) {
        const Inst *in = &src->insts[v];
        int32_t args[MAX_RULE_TENSORS + 64], *a = in->nargs <= (int)(sizeof args / sizeof *args) ? args
            : arena_alloc(g->m->arena, sizeof(int32_t) * (size_t)in->nargs);
        for (int i = 0; i < in->nargs; i++)
            a[i] = g->fwd[ir_arg(src, in, i)];
        g->v = v;
        int pair = in->op == OP_CALL && g->active[v] && !runs_again(g->m, src, in);
        int fwd_fn = pair ? g->bk->fwd[ir_attr(src, in, 0)] : -1;
        int kept_loop = in->op == OP_LOOP && g->active[v];
        if (in->op == OP_GET_TUPLE_ELEMENT && src->insts[ir_arg(src, in, 0)].op == OP_LOOP &&
            g->active[ir_arg(src, in, 0)]) {
            int64_t index = loop_element(g, ir_arg(src, in, 0), (int)ir_attr(src, in, 0));
            g->fwd[v] = g_emit(g, OP_GET_TUPLE_ELEMENT, a, 1, &index, 1, NULL);
            keep_fields(&g->dst->insts[g->fwd[v]], in);
        } else {
            g->fwd[v] = kept_loop ? loop_forward(g, v, a) : fwd_fn >= 0 ? call_forward(g, v, a)
                                                               : copy_inst(g, (Op)in->op, a, in);
        }
    }
}

/* A cotangent whose value carries a sharding constraint keeps it: the
 * transpose of with_sharding_constraint is the same constraint. */
static int constrained_like(Grad *g, int v, int c) {
    const Inst *in = &g->src->insts[v];
    if (!(in->flags & INST_CONSTRAINED))
        return c;
    int x = g_emit(g, OP_COPY, (int32_t[]){c}, 1, NULL, 0, NULL);
    g->dst->insts[x].flags |= INST_CONSTRAINED;
    g->dst->insts[x].sh = in->sh;
    return x;
}

void run_backward(Grad *g) {
    const Fn *src = g->src;
    for (int v = src->ninsts - 2; v >= 0; v--) {
        const Inst *in = &src->insts[v];
        g->v = v;
        flush_pieces(g, v);
        if (!g->active[v] || (g->ct[v] < 0 && !op_calls(in->op)))
            continue;
        if (in->op == OP_GET_TUPLE_ELEMENT) {     /* the call's rule reads it */
            int call = ir_arg(src, in, 0);
            int nres = g->m->fns[ir_attr(src, &src->insts[call], 0)].nresults;
            if (!g->tuple_ct[call]) {
                g->tuple_ct[call] = arena_alloc(g->m->arena, sizeof(int32_t) * (size_t)nres);
                for (int i = 0; i < nres; i++)
                    g->tuple_ct[call][i] = -1;
            }
            int32_t *slot = &g->tuple_ct[call][ir_attr(src, in, 0)];
            *slot = *slot < 0 ? g->ct[v] : g_emit(g, OP_ADD, (int32_t[]){*slot, g->ct[v]}, 2, NULL, 0, NULL);
            continue;
        }
        adjoint(g, op_calls(in->op) && g->ct[v] < 0 ? -1 : constrained_like(g, v, g->ct[v]));
    }
}

static int param_inst(const Fn *src, int p) {
    for (int v = 0; v < src->ninsts; v++)
        if (src->insts[v].op == OP_PARAMETER && ir_attr(src, &src->insts[v], 0) == p)
            return v;
    return -1;
}

int param_grad(Grad *g, int p, int dtype) {
    int v = param_inst(g->src, p);
    if (v >= 0) {
        g->v = v;
        flush_pieces(g, v);
    }
    if (v >= 0 && g->ct[v] >= 0)
        return g_cast(g, g->ct[v], dtype);
    Shape s = g->src->params[p].type;
    if (fn_is_local(g->src))
        s = shape_local(g->m, &s, &g->src->params[p].sh);
    s.dtype = (uint8_t)dtype;
    return g_const(g, 0, &s);
}

/* fn d = grad or value_and_grad of its source. */
static void build_grad(Module *m, Diag *diag, int d, const Backward *bk) {
    const Fn *src = &m->fns[m->fns[d].grad_of - 1];
    Grad g = grad_begin(m, diag, src, &m->fns[d], bk);
    uint8_t *wrt = arena_alloc(m->arena, (size_t)src->nparams + 1), *seed = arena_alloc(m->arena, (size_t)src->ninsts);
    for (int i = 0; i < g.dst->ngrad_wrt; i++)
        wrt[g.dst->grad_wrt[i]] = 1;
    const Inst *ret = &src->insts[src->ninsts - 1];
    int loss = ir_arg(src, ret, 0);
    seed[loss] = 1;
    find_active(&g, wrt, seed);
    copy_forward(&g);
    g.v = loss;
    if (g.active[loss])
        add_ct(&g, loss, g_const(&g, 1, &(Shape){(uint8_t)ct_dtype(src_type(&g, loss)->dtype), 0, {0}}));
    run_backward(&g);
    int32_t *results = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(g.dst->nresults + 1));
    int n = 0;
    for (int i = 0; g.dst->grad_value && i < src->nresults; i++)
        results[n++] = g.fwd[ir_arg(src, ret, i)];
    for (int i = 0; i < g.dst->ngrad_wrt; i++) {
        int p = g.dst->grad_wrt[i];
        results[n++] = param_grad(&g, p, src->params[p].type.dtype);
    }
    g.v = src->ninsts - 1;
    g_emit(&g, OP_RETURN, results, n, NULL, 0, NULL);
}

/* Once the gradients are built a stop-gradient has done its work: each
 * becomes its operand (one that carries a sharding constraint stays, as
 * the copy that holds it), so the forward pass computes what the same
 * program without it would, with no copy (softmax's max, index.c). */
static void drop_stop_gradients(Module *m) {
    for (int f = 0; f < m->nfns; f++) {
        Fn *fn = &m->fns[f];
        int any = 0;
        for (int v = 0; v < fn->ninsts && !any; v++)
            any = fn->insts[v].op == OP_STOP_GRADIENT && !(fn->insts[v].flags & INST_CONSTRAINED);
        if (!any)
            continue;
        Fn old = *fn;
        *fn = fn_without_body(&old);
        int32_t *map = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(old.ninsts + 1));
        for (int v = 0; v < old.ninsts; v++) {
            const Inst *in = &old.insts[v];
            int gone = in->op == OP_STOP_GRADIENT && !(in->flags & INST_CONSTRAINED);
            map[v] = gone ? map[ir_arg(&old, in, 0)] : reemit(m, fn, &old, v, map);
        }
    }
}

int grad_module(Module *m, Diag *diag, KeptCalls *kept) {
    int any = 0;
    for (int f = 0; f < m->nfns; f++)
        any |= m->fns[f].grad_of != 0;
    if (!any) {
        drop_stop_gradients(m);
        widen_dots(m);
        return 0;
    }
    jmp_buf bail;
    diag->bail = &bail;
    if (setjmp(bail))
        return -1;
    /* add_backward_fns adds at most three fns per callee (a vjp and a
     * pair), five per loop body */
    int nfns = m->nfns, room = 6 * nfns + 1;
    Backward bk = {.kept = kept};
    int32_t **tables[3] = {&bk.vjp, &bk.fwd, &bk.bwd};
    for (int t = 0; t < 3; t++) {
        *tables[t] = arena_alloc(m->arena, sizeof(int32_t) * (size_t)room);
        for (int f = 0; f < room; f++)
            (*tables[t])[f] = -1;
    }
    bk.wrt = arena_alloc(m->arena, sizeof(uint8_t *) * (size_t)room);
    bk.loop = arena_alloc(m->arena, sizeof(LoopGrad *) * (size_t)room);
    bk.by_loop = arena_alloc(m->arena, (size_t)room);
    bk.varies_in = arena_alloc(m->arena, sizeof(uint32_t *) * (size_t)room);
    bk.varies_out = arena_alloc(m->arena, sizeof(uint32_t *) * (size_t)room);
    add_backward_fns(m, diag, &bk);       /* adds fns: m->fns may move, so first */
    build_backward_fns(m, diag, &bk);     /* callees first: a caller's needs its callees' signatures */
    for (int d = 0; d < nfns; d++)
        if (m->fns[d].grad_of)
            build_grad(m, diag, d, &bk);
    for (int d = 0; d < m->nfns; d++)
        if (m->fns[d].grad_of || m->fns[d].vjp_of)
            fn_drop_dead(m, &m->fns[d]);
    drop_stop_gradients(m);
    widen_dots(m);
    return 0;
}
