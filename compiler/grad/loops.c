/* Reverse mode through loops that stay loops (docs/grad.md, "Loops").
 *
 * A loop `loop(first, c..., inv...) trip_count=T, body=b` is differentiated
 * by two loops of T iterations each, so compile time and code size do not
 * grow with T.  b's fwd/bwd pair (callees.c) does one iteration, and the
 * loops' bodies hold it inlined:
 *
 *   - the forward loop runs b_fwd and writes what b_bwd will read into
 *     [T, ...] arrays it carries (the stacks): b_fwd's residuals, and the
 *     carried values b_bwd reads, each iteration's at its slot i - first
 *     (a dynamic-update-slice: one slot per iteration, in place);
 *   - the backward loop runs b_bwd for the iterations last to first,
 *     reading the slots back (dynamic-slice), carrying the carried values'
 *     cotangents and summing the invariants' gradients.
 *
 * An invariant the body reads only as its row w[i] at the loop's index
 * (a stacked weight), where every i is a row of w, is passed to the pair
 * as that row: its gradient is one row per iteration, written into slot i
 * of the gradient the backward loop carries, not a zero-padded copy of w
 * per iteration summed. */
#include "internal.h"

#include <string.h>

static int param_of(const Fn *fn, int p) {
    for (int v = 0; v < fn->ninsts; v++)
        if (fn->insts[v].op == OP_PARAMETER && ir_attr(fn, &fn->insts[v], 0) == p)
            return v;
    return -1;
}

static Sig open_sig(Shape t) {
    Sig s = {t, sharding_replicated(), 0};
    s.sh.open = (uint8_t)((1u << t.rank) - 1);
    return s;
}

static Shape ct_type(Shape t) {
    t.dtype = (uint8_t)ct_dtype(t.dtype);
    return t;
}

/* [n, t...]: a stack of n values of type t. */
static Shape stacked(const Shape *t, int64_t n) {
    Shape s = {t->dtype, (uint8_t)(t->rank + 1), {n}};
    memcpy(s.dims + 1, t->dims, sizeof(int64_t) * (size_t)t->rank);
    return s;
}

static Shape unstacked(const Shape *t) {
    Shape s = {t->dtype, (uint8_t)(t->rank - 1), {0}};
    memcpy(s.dims, t->dims + 1, sizeof(int64_t) * (size_t)s.rank);
    return s;
}

/* ---- which parameters are differentiated ---- */

uint8_t *loop_body_wrt(Module *m, int f, const uint8_t *f_wrt, const Inst *loop) {
    const Fn *fn = &m->fns[f], *b = &m->fns[inst_callee(fn, loop)];
    uint8_t *dep = arena_alloc(m->arena, (size_t)fn->ninsts + 1);
    for (int v = 0; v < fn->ninsts && &fn->insts[v] != loop; v++) {
        const Inst *in = &fn->insts[v];
        int fl = in->type.dtype == DT_TUPLE || dtype_is_float(in->type.dtype);
        if (in->op == OP_PARAMETER)
            dep[v] = fl && f_wrt && f_wrt[ir_attr(fn, in, 0)];
        for (int i = 0; i < in->nargs && fl && in->op != OP_RETURN; i++)
            dep[v] |= dep[ir_arg(fn, in, i)];
    }
    /* Every float carried value: its cotangent runs through the iterations
     * even where its first value takes none.  A loop none of whose operands
     * depends on what is differentiated is copied as it is (NULL). */
    uint8_t *w = arena_alloc(m->arena, (size_t)b->nparams + 1);
    int any = 0;
    for (int p = 1; p < b->nparams && p < loop->nargs; p++) {
        w[p] = dtype_is_float(b->params[p].type.dtype) && (p <= b->loop_carried || dep[ir_arg(fn, loop, p)]);
        any |= dep[ir_arg(fn, loop, p)];
    }
    return any ? w : NULL;
}

/* ---- stacked weights ---- */

/* Is parameter p of body b read only as its row at the index, w[i] (a
 * dynamic-slice at the index parameter, whole along the other dims), with
 * every index first .. first + trips - 1 a row of it? */
static int reads_row(const Fn *b, int p, int64_t first, int64_t trips) {
    const Shape *t = &b->params[p].type;
    int pv = param_of(b, p), iv = param_of(b, 0), n = 0;
    if (pv < 0 || iv < 0 || t->rank == 0 || first < 0 || first + trips > t->dims[0])
        return 0;
    for (int u = 0; u < b->ninsts; u++) {
        const Inst *in = &b->insts[u];
        for (int i = 0; i < in->nargs; i++) {
            if (ir_arg(b, in, i) != pv)
                continue;
            if (in->op != OP_DYNAMIC_SLICE || i != 0 || ir_arg(b, in, 1) != iv || in->type.dims[0] != 1)
                return 0;
            for (int d = 1; d < t->rank; d++)
                if (in->type.dims[d] != t->dims[d])
                    return 0;
            n++;
        }
    }
    return n > 0;
}

/* A copy of body b taking each row-read parameter as its row [1, ...]:
 * its slices w[i] are that parameter. */
static int row_body(Module *m, int b, const uint8_t *row) {
    int c = add_fn(m, b, "rows");
    Fn *dst = &m->fns[c];
    const Fn *src = &m->fns[b];
    dst->nparams = src->nparams;
    dst->params = arena_alloc(m->arena, sizeof(Sig) * (size_t)(src->nparams + 1));
    memcpy(dst->params, src->params, sizeof(Sig) * (size_t)src->nparams);
    for (int p = 0; p < src->nparams; p++)
        if (row[p])
            dst->params[p].type.dims[0] = 1;
    dst->nresults = src->nresults;
    dst->results = arena_alloc(m->arena, sizeof(Sig) * (size_t)(src->nresults + 1));
    memcpy(dst->results, src->results, sizeof(Sig) * (size_t)src->nresults);
    int32_t *map = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(src->ninsts + 1));
    for (int u = 0; u < src->ninsts; u++) {
        const Inst *in = &src->insts[u];
        const Inst *x = in->nargs ? &src->insts[ir_arg(src, in, 0)] : NULL;
        if (in->op == OP_DYNAMIC_SLICE && x->op == OP_PARAMETER && row[ir_attr(src, x, 0)]) {
            map[u] = map[ir_arg(src, in, 0)];
        } else if (in->op == OP_PARAMETER) {
            int64_t index = ir_attr(src, in, 0);
            map[u] = ir_emit(m, dst, OP_PARAMETER, NULL, 0, &index, 1, NULL, in->loc);
            keep_fields(&dst->insts[map[u]], in);
        } else {
            map[u] = reemit(m, dst, src, u, map);
        }
    }
    return c;
}

LoopGrad *add_loop_fns(Module *m, Diag *diag, Backward *bk, int f, const Inst *loop) {
    const Fn *fn = &m->fns[f];
    int b = inst_callee(fn, loop);
    int64_t trips = loop_trips(fn, loop);
    if (trips < 0)
        diag_fatal(diag, loop->loc, "cannot differentiate a loop whose trip count is known only at run time");
    const Inst *first = &fn->insts[ir_arg(fn, loop, 0)];
    LoopGrad *lg = arena_alloc(m->arena, sizeof *lg);
    lg->trips = trips;
    lg->row = arena_alloc(m->arena, (size_t)m->fns[b].nparams + 1);
    int any = 0;
    for (int p = m->fns[b].loop_carried + 1; p < m->fns[b].nparams; p++)
        if (bk->wrt[b][p] && first->op == OP_CONSTANT && reads_row(&m->fns[b], p, (int64_t)first->value, trips))
            lg->row[p] = 1, any = 1;
    lg->body = any ? row_body(m, b, lg->row) : b;
    bk->wrt[lg->body] = bk->wrt[b];
    bk->varies_in[lg->body] = bk->varies_in[b];
    bk->varies_out[lg->body] = bk->varies_out[b];
    bk->by_loop[lg->body] = 1;
    bk->fwd[lg->body] = add_fn(m, lg->body, "fwd");
    bk->bwd[lg->body] = add_fn(m, lg->body, "bwd");
    lg->fwd_loop = add_fn(m, b, "fwd_loop");
    lg->bwd_loop = add_fn(m, b, "bwd_loop");
    return lg;
}

/* ---- building the loops' bodies ---- */

typedef struct {
    Module *m;
    Fn *fn;
    Loc loc;
    int zero;                    /* an i32 0, the offset of a stack's other dims */
} Em;

static int em(Em *e, Op op, const int32_t *args, int n, const int64_t *attrs, int na, const Shape *t) {
    return ir_emit(e->m, e->fn, op, args, n, attrs, na, t, e->loc);
}

static int em_const(Em *e, double value, const Shape *t) {
    Shape scalar = {t->dtype, 0, {0}};
    int k = em(e, OP_CONSTANT, NULL, 0, NULL, 0, &scalar);
    e->fn->insts[k].value = value;
    return t->rank ? em(e, OP_BROADCAST, (int32_t[]){k}, 1, NULL, 0, t) : k;
}

static int em_i32(Em *e, int64_t k) { return em_const(e, (double)k, &(Shape){DT_I32, 0, {0}}); }

static int em_param(Em *e, int i, int sym) {
    int64_t at = i;
    int x = em(e, OP_PARAMETER, NULL, 0, &at, 1, NULL);
    e->fn->insts[x].sym = sym;
    e->fn->insts[x].sh = e->fn->params[i].sh;
    return x;
}

static int em_op2(Em *e, Op op, int a, int b) { return em(e, op, (int32_t[]){a, b}, 2, NULL, 0, NULL); }

static int em_reshape(Em *e, int x, const Shape *t) {
    return shape_eq(&e->fn->insts[x].type, t) ? x : em(e, OP_RESHAPE, (int32_t[]){x}, 1, NULL, 0, t);
}

/* x[at : at + 1, ...]: a [1, ...] window at `at` along dim 0. */
static int em_window(Em *e, int x, int at) {
    Shape t = e->fn->insts[x].type;
    int32_t args[1 + MAX_RANK] = {x, at};
    for (int d = 1; d < t.rank; d++)
        args[1 + d] = e->zero;
    t.dims[0] = 1;
    return em(e, OP_DYNAMIC_SLICE, args, 1 + t.rank, NULL, 0, &t);
}

/* Slot `at` of stack s, as a value of the stacked type. */
static int em_read(Em *e, int s, int at) {
    Shape t = unstacked(&e->fn->insts[s].type);
    return em_reshape(e, em_window(e, s, at), &t);
}

/* s with the [1, ...] window w written at `at` along dim 0. */
static int em_write_window(Em *e, int s, int w, int at) {
    int rank = e->fn->insts[s].type.rank;
    int32_t args[2 + MAX_RANK] = {s, w, at};
    for (int d = 1; d < rank; d++)
        args[2 + d] = e->zero;
    return em(e, OP_DYNAMIC_UPDATE_SLICE, args, 2 + rank, NULL, 0, NULL);
}

/* Stack s with x written at slot `at`. */
static int em_write(Em *e, int s, int x, int at) {
    Shape w = stacked(&e->fn->insts[x].type, 1);
    return em_write_window(e, s, em_reshape(e, x, &w), at);
}

/* Fn f's body emitted in place, its parameters args: the values it
 * returns into out.  The loops' bodies hold their iteration's pair inlined,
 * so that a stack's or a carried cotangent's dynamic-update-slice reads the
 * loop body's own parameter and can write its slot in place (codegen). */
static void em_inline(Em *e, int f, const int32_t *args, int32_t *out) {
    const Fn *callee = &e->m->fns[f];
    int32_t *map = arena_alloc(e->m->arena, sizeof(int32_t) * (size_t)(callee->ninsts + 1));
    for (int u = 0; u < callee->ninsts; u++) {
        const Inst *in = &callee->insts[u];
        if (in->op == OP_PARAMETER)
            map[u] = args[ir_attr(callee, in, 0)];
        else if (in->op == OP_RETURN)
            for (int i = 0; i < in->nargs; i++)
                out[i] = map[ir_arg(callee, in, i)];
        else
            map[u] = reemit(e->m, e->fn, callee, u, map);
    }
}

static int param_sym(Module *m, const Fn *fn, int p, const char *fallback) {
    int v = param_of(fn, p);
    return v >= 0 && fn->insts[v].sym >= 0 ? fn->insts[v].sym : sym_of(m, fallback);
}

/* What stack s holds one of per iteration: a residual of the body's fwd,
 * or a carried parameter. */
static const Shape *stack_elem(const Module *m, const Backward *bk, const LoopGrad *lg, int s) {
    const Fn *body = &m->fns[lg->body], *bf = &m->fns[bk->fwd[lg->body]];
    return s < lg->nres ? &bf->results[body->nresults + s].type : &body->params[lg->carried_stack[s - lg->nres]].type;
}

static Shape stack_type(const Module *m, const Backward *bk, const LoopGrad *lg, int s) {
    return stacked(stack_elem(m, bk, lg, s), lg->trips);
}

typedef struct {
    int K, M, O, R;              /* carried, invariants, other results, stacks */
} Counts;

static Counts counts(const Module *m, int b, const LoopGrad *lg) {
    const Fn *orig = &m->fns[b];
    Counts c = {orig->loop_carried, 0, 0, lg->nstack};
    c.M = orig->nparams - 1 - c.K;
    c.O = orig->nresults - c.K;
    return c;
}

/* fwd_loop's signature (see build_fwd_loop). */
static void fwd_loop_signature(Module *m, const Backward *bk, int b, const LoopGrad *lg) {
    const Fn *orig = &m->fns[b];
    Fn *lf = &m->fns[lg->fwd_loop];
    Counts n = counts(m, b, lg);
    Sig index = {{DT_I32, 0, {0}}, sharding_replicated(), 0};
    lf->loop_of = orig->loop_of;
    lf->loop_carried = n.K + n.R;
    lf->nparams = 1 + n.K + n.R + n.M + 1;
    lf->params = arena_alloc(m->arena, sizeof(Sig) * (size_t)(lf->nparams + 1));
    lf->nresults = n.K + n.R + n.O;
    lf->results = arena_alloc(m->arena, sizeof(Sig) * (size_t)(lf->nresults + 1));
    lf->params[0] = lf->params[lf->nparams - 1] = index;
    for (int k = 0; k < n.K; k++)
        lf->params[1 + k] = lf->results[k] = open_sig(orig->params[1 + k].type);
    for (int s = 0; s < n.R; s++)
        lf->params[1 + n.K + s] = lf->results[n.K + s] = open_sig(stack_type(m, bk, lg, s));
    for (int j = 0; j < n.M; j++)
        lf->params[1 + n.K + n.R + j] = open_sig(orig->params[1 + n.K + j].type);
    for (int o = 0; o < n.O; o++)
        lf->results[n.K + n.R + o] = open_sig(orig->results[n.K + o].type);
}

/* fwd_loop(i, c..., stacks..., inv..., first) -> (c'..., stacks'..., out...) */
static void build_fwd_loop(Module *m, const Backward *bk, int b, const LoopGrad *lg) {
    fwd_loop_signature(m, bk, b, lg);
    const Fn *orig = &m->fns[b], *body = &m->fns[lg->body];
    int fwd = bk->fwd[lg->body];
    Fn *lf = &m->fns[lg->fwd_loop];
    Counts n = counts(m, b, lg);
    Em e = {m, lf, orig->loc, -1};
    int32_t *p = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(lf->nparams + 1));
    for (int i = 0; i < lf->nparams; i++) {
        int q = i <= n.K ? i : i > n.K + n.R && i < lf->nparams - 1 ? i - n.R : -1;
        p[i] = em_param(&e, i, q >= 0 ? param_sym(m, orig, q, "p")
                               : sym_of(m, i == lf->nparams - 1 ? "first" : arena_printf(m->arena, "stack%d", i - 1 - n.K)));
    }
    e.zero = em_i32(&e, 0);
    int slot = em_op2(&e, OP_SUB, p[0], p[lf->nparams - 1]);
    int32_t *args = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(body->nparams + 1));
    for (int q = 0; q < body->nparams; q++) {
        int x = q <= n.K ? p[q] : p[q + n.R];
        args[q] = lg->row[q] ? em_window(&e, x, p[0]) : x;
    }
    int32_t *res = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(m->fns[fwd].nresults + 1));
    em_inline(&e, fwd, args, res);
    int32_t *out = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(lf->nresults + 1));
    for (int k = 0; k < n.K; k++)
        out[k] = res[k];
    for (int s = 0; s < n.R; s++) {
        int x = s < lg->nres ? res[n.K + n.O + s] : p[lg->carried_stack[s - lg->nres]];
        out[n.K + s] = em_write(&e, p[1 + n.K + s], x, slot);
    }
    for (int o = 0; o < n.O; o++)
        out[n.K + n.R + o] = res[n.K + o];
    em(&e, OP_RETURN, out, lf->nresults, NULL, 0, NULL);
}

/* Where bwd_loop's parameters start: the float carried values'
 * cotangents (nc), the invariants' gradients (na), the stacks, the
 * invariants, the first index, the other results' cotangents. */
typedef struct {
    int nc, na, acc, stack, inv, first, ct;
} BwdLayout;

/* bwd_loop's signature (see build_bwd_loop). */
static BwdLayout bwd_loop_signature(Module *m, const Backward *bk, int b, const LoopGrad *lg) {
    const Fn *orig = &m->fns[b];
    const uint8_t *wrt = bk->wrt[lg->body];
    Fn *lb = &m->fns[lg->bwd_loop];
    Counts n = counts(m, b, lg);
    BwdLayout at = {0};
    for (int q = 1; q < orig->nparams; q++)
        at.nc += wrt[q] && q <= n.K, at.na += wrt[q] && q > n.K;
    at.acc = 1 + at.nc, at.stack = at.acc + at.na, at.inv = at.stack + n.R, at.first = at.inv + n.M;
    at.ct = at.first + 1;
    Sig index = {{DT_I32, 0, {0}}, sharding_replicated(), 0};
    lb->loop_of = orig->loop_of;
    lb->loop_carried = at.nc + at.na;
    lb->nparams = at.ct + n.O;
    lb->params = arena_alloc(m->arena, sizeof(Sig) * (size_t)(lb->nparams + 1));
    lb->nresults = at.nc + at.na;
    lb->results = arena_alloc(m->arena, sizeof(Sig) * (size_t)(lb->nresults + 1));
    lb->params[0] = lb->params[at.first] = index;
    for (int q = 1, k = 0; q < orig->nparams; q++)
        if (wrt[q]) {    /* a row's gradient is the whole parameter's */
            lb->params[1 + k] = lb->results[k] = open_sig(ct_type(orig->params[q].type));
            k++;
        }
    for (int s = 0; s < n.R; s++)
        lb->params[at.stack + s] = open_sig(stack_type(m, bk, lg, s));
    for (int j = 0; j < n.M; j++)
        lb->params[at.inv + j] = open_sig(orig->params[1 + n.K + j].type);
    for (int o = 0; o < n.O; o++)
        lb->params[at.ct + o] = open_sig(ct_type(orig->results[n.K + o].type));
    return at;
}

/* bwd_loop(j, ct_c..., acc..., stacks..., inv..., first, ct_out...) ->
 * (ct_c'..., acc'...), j = 0 .. T-1 running iteration T-1-j: ct_c are the
 * cotangents of the float carried values, acc the gradients of the
 * differentiated invariants so far. */
static void build_bwd_loop(Module *m, const Backward *bk, int b, const LoopGrad *lg) {
    BwdLayout at = bwd_loop_signature(m, bk, b, lg);
    const Fn *orig = &m->fns[b], *body = &m->fns[lg->body];
    int bwd = bk->bwd[lg->body];
    const Fn *bb = &m->fns[bwd];
    const uint8_t *wrt = bk->wrt[lg->body];
    Fn *lb = &m->fns[lg->bwd_loop];
    Counts n = counts(m, b, lg);
    Em e = {m, lb, orig->loc, -1};
    int32_t *p = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(lb->nparams + 1));
    for (int i = 0; i < lb->nparams; i++)
        p[i] = em_param(&e, i, sym_of(m, i == 0 ? "j" : i < at.acc ? "ct" : i < at.stack ? "acc" : i < at.inv ? "stack"
                                         : i < at.first ? "inv" : i == at.first ? "first" : "ct_out"));
    for (int j = 0; j < n.M; j++)
        e.fn->insts[p[at.inv + j]].sym = param_sym(m, orig, 1 + n.K + j, "inv");
    e.zero = em_i32(&e, 0);
    int slot = em_op2(&e, OP_SUB, em_i32(&e, lg->trips - 1), p[0]);
    int i = em_op2(&e, OP_ADD, slot, p[at.first]);
    int nres = bb->nparams - body->nparams - body->nresults, nargs = 0;
    int32_t *args = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(bb->nparams + 1));
    args[nargs++] = i;
    for (int k = 0; k < n.K; k++) {
        int s = lg->nres;
        while (s < n.R && lg->carried_stack[s - lg->nres] != 1 + k)
            s++;
        args[nargs++] = s < n.R ? em_read(&e, p[at.stack + s], slot) : em_const(&e, 0, &bb->params[1 + k].type);
    }
    for (int j = 0; j < n.M; j++)
        args[nargs++] = lg->row[1 + n.K + j] ? em_window(&e, p[at.inv + j], i) : p[at.inv + j];
    for (int s = 0; s < nres; s++)
        args[nargs++] = em_read(&e, p[at.stack + s], slot);
    for (int k = 0, c = 0; k < n.K; k++) {
        int want = wrt[1 + k];
        args[nargs] = want ? p[1 + c] : em_const(&e, 0, &bb->params[nargs].type);
        c += want, nargs++;
    }
    if (n.O) {           /* the other results are the last iteration's: their cotangents enter there */
        int last = em(&e, OP_COMPARE, (int32_t[]){p[0], e.zero}, 2, (int64_t[]){CMP_EQ}, 1, NULL);
        for (int o = 0; o < n.O; o++, nargs++) {
            const Shape *t = &bb->params[nargs].type;
            Shape bs = *t;
            bs.dtype = DT_BOOL;
            int pred = t->rank ? em(&e, OP_BROADCAST, (int32_t[]){last}, 1, NULL, 0, &bs) : last;
            args[nargs] = em(&e, OP_SELECT, (int32_t[]){pred, p[at.ct + o], em_const(&e, 0, t)}, 3, NULL, 0, NULL);
        }
    }
    int32_t *res = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(bb->nresults + 1));
    em_inline(&e, bwd, args, res);
    int32_t *out = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(lb->nresults + 1));
    for (int q = 1, k = 0; q < body->nparams; q++) {
        if (!wrt[q])
            continue;
        int grad = res[k];
        if (q <= n.K)
            out[k] = grad;
        else if (lg->row[q])   /* one row per iteration: distinct rows (reads_row) */
            out[k] = em_write_window(&e, p[1 + k], grad, i);
        else
            out[k] = em_op2(&e, OP_ADD, p[1 + k], grad);
        k++;
    }
    em(&e, OP_RETURN, out, lb->nresults, NULL, 0, NULL);
}

void build_loop_fns(Module *m, Diag *diag, const Backward *bk, int b) {
    LoopGrad *lg = bk->loop[b];
    build_pair(m, diag, lg->body, bk);
    Fn *bb = &m->fns[bk->bwd[lg->body]];
    fn_drop_dead(m, bb);
    const Fn *body = &m->fns[lg->body];
    lg->nres = m->fns[bk->fwd[lg->body]].nresults - body->nresults;
    /* The carried parameters the backward reads are saved too. */
    uint8_t *read = arena_alloc(m->arena, (size_t)body->nparams + 1);
    for (int v = 0; v < bb->ninsts; v++)
        for (int i = 0; i < bb->insts[v].nargs; i++) {
            const Inst *x = &bb->insts[ir_arg(bb, &bb->insts[v], i)];
            if (x->op == OP_PARAMETER && ir_attr(bb, x, 0) < body->nparams)
                read[ir_attr(bb, x, 0)] = 1;
        }
    lg->carried_stack = arena_alloc(m->arena, sizeof(int) * (size_t)(body->loop_carried + m->fns[b].loop_carried + 1));
    lg->nstack = lg->nres;
    for (int k = 1; k <= m->fns[b].loop_carried; k++)
        if (read[k])
            lg->carried_stack[lg->nstack++ - lg->nres] = k;
    for (int s = 0; s < lg->nstack; s++) {
        const Shape *t = stack_elem(m, bk, lg, s);
        if (t->rank >= MAX_RANK)
            diag_fatal(diag, m->fns[b].loc, "cannot differentiate this loop: a value it saves per iteration has %d "
                       "dims, and with the iterations' dim that is more than %d", t->rank, MAX_RANK);
    }
    build_fwd_loop(m, bk, b, lg);
    build_bwd_loop(m, bk, b, lg);
}

/* ---- the loop in a differentiated fn ---- */

/* An active loop has its LoopGrad: its operands depend on what the fn is
 * differentiated with respect to (loop_body_wrt). */
static const LoopGrad *loop_grad_of(Grad *g, int b) {
    if (!g->bk->loop[b])
        no_gradient(g, "internal error: a loop without its backward loop");
    return g->bk->loop[b];
}

int loop_forward(Grad *g, int v, const int32_t *args) {
    const Inst *in = &g->src->insts[v];
    int b = inst_callee(g->src, in);
    const LoopGrad *lg = loop_grad_of(g, b);
    const Fn *lf = &g->m->fns[lg->fwd_loop];
    Counts n = counts(g->m, b, lg);
    int32_t *ops = arena_alloc(g->m->arena, sizeof(int32_t) * (size_t)(lf->nparams + 1));
    int k = 0;
    ops[k++] = args[0];
    for (int j = 0; j < n.K; j++)
        ops[k++] = args[1 + j];
    for (int s = 0; s < n.R; s++)    /* each slot is written before it is read */
        ops[k++] = g_const(g, 0, &lf->params[1 + n.K + s].type);
    for (int j = 0; j < n.M; j++)
        ops[k++] = args[1 + n.K + j];
    ops[k++] = args[0];
    int64_t attrs[3] = {lg->fwd_loop, lg->trips, n.K + n.R};
    int loop = g_emit(g, OP_LOOP, ops, k, attrs, 3, NULL), nout = lf->nresults;
    g->dst->insts[loop].sym = in->sym;
    g->res_at[v] = -1;
    for (int64_t s = 0; s < n.R; s++) {      /* consecutive: call_adjoint's convention */
        int64_t at = n.K + s;
        int x = g_emit(g, OP_GET_TUPLE_ELEMENT, (int32_t[]){loop}, 1, &at, 1, NULL);
        g->res_at[v] = g->res_at[v] < 0 ? x : g->res_at[v];
    }
    if (n.K + n.O > 1 || nout == 1)
        return loop;
    int64_t zero = 0;
    int x = g_emit(g, OP_GET_TUPLE_ELEMENT, (int32_t[]){loop}, 1, &zero, 1, NULL);
    g->dst->insts[x].sym = in->sym;
    return x;
}

int loop_element(const Grad *g, int loop, int index) {
    int b = inst_callee(g->src, &g->src->insts[loop]);
    return index < g->m->fns[b].loop_carried ? index : index + g->bk->loop[b]->nstack;
}

void loop_adjoint(Grad *g, int c) {
    int v = g->v;
    const Inst *in = &g->src->insts[v];
    int b = inst_callee(g->src, in);
    const LoopGrad *lg = loop_grad_of(g, b);
    const Fn *orig = &g->m->fns[b], *lb = &g->m->fns[lg->bwd_loop];
    const uint8_t *wrt = g->bk->wrt[lg->body];
    Counts n = counts(g->m, b, lg);
    if (c < 0 && !g->tuple_ct[v])
        return;
    int32_t *ops = arena_alloc(g->m->arena, sizeof(int32_t) * (size_t)(lb->nparams + 1));
    int k = 0;
    ops[k++] = g_const(g, 0, &(Shape){DT_I32, 0, {0}});
    for (int q = 1; q < orig->nparams; q++) {
        if (!wrt[q])
            continue;
        int r = q <= n.K ? (orig->nresults == 1 ? c : g->tuple_ct[v] ? g->tuple_ct[v][q - 1] : -1) : -1;
        ops[k] = r >= 0 ? r : g_const(g, 0, &lb->params[k].type);
        k++;
    }
    for (int s = 0; s < n.R; s++)
        ops[k++] = g->res_at[v] + s;
    for (int j = 0; j < n.M; j++)
        ops[k++] = g->fwd[ir_arg(g->src, in, 1 + n.K + j)];
    ops[k++] = g->fwd[ir_arg(g->src, in, 0)];
    for (int o = 0; o < n.O; o++) {
        int r = orig->nresults == 1 ? c : g->tuple_ct[v] ? g->tuple_ct[v][n.K + o] : -1;
        ops[k] = r >= 0 ? r : g_const(g, 0, &lb->params[k].type);
        k++;
    }
    int64_t attrs[3] = {lg->bwd_loop, lg->trips, lb->loop_carried};
    int loop = g_emit(g, OP_LOOP, ops, k, attrs, 3, NULL);
    for (int q = 1, j = 0; q < orig->nparams; q++) {
        if (!wrt[q])
            continue;
        int64_t at = j++;
        int grad = lb->nresults == 1 ? loop : g_emit(g, OP_GET_TUPLE_ELEMENT, (int32_t[]){loop}, 1, &at, 1, NULL);
        if (!g->varies) {
            give(g, q, grad);
            continue;
        }
        /* each device's share along what the body's parameter differs along */
        uint32_t along = g->bk->varies_in[b][q] & ~g->varies[ir_arg(g->src, in, q)];
        give_exact(g, q, g_psum(g, grad, along));
    }
}
