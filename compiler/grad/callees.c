/* The backward fns of the fns that derived fns call (docs/grad.md, "The
 * pass").
 *
 * An fn callee f is built once as one body, forward then backward, as a
 * derived fn is, with a cotangent parameter per result as the seed; that
 * body is then cut in two.  f_fwd is the forward part, returning f's
 * results and the values the backward part reads (the residuals, as JAX's
 * linearize keeps them); f_bwd is the backward part, taking f's
 * parameters, the residuals and the cotangents, returning a gradient per
 * float parameter.  A caller runs f_fwd where it ran f and f_bwd in its
 * backward pass, so nothing runs twice.  The residuals' shardings are left
 * open (`@?`): f_fwd and f_bwd are sharding-generic, specialized to their
 * call sites like f.
 *
 * An spmd callee's values are per-device blocks without a global type to
 * return, so it gets one vjp fn instead: f's parameters and the
 * cotangents in, f run again and then its backward pass.  A call marked
 * checkpoint(f) (INST_REMAT) is differentiated through f's vjp fn too:
 * its caller keeps f's parameters, not its residuals, and the vjp fn's
 * own values live only while it runs (JAX's jax.checkpoint). */
#include "internal.h"

#include <string.h>

static Sig ct_sig(Sig s) {
    s.type.dtype = (uint8_t)ct_dtype(s.type.dtype);
    s.name = 0;                  /* a cotangent carries no result's name */
    return s;                    /* open dims stay open: a generic fn's backward is generic too */
}

int sym_of(Module *m, const char *name) { return sym_intern(m->syms, name, strlen(name)); }

/* A new fn named after fn f with `suffix`, unique in the module. */
int add_fn(Module *m, int f, const char *suffix) {
    const char *base = arena_printf(m->arena, "%s_%s", sym_name(m->syms, m->fns[f].sym), suffix), *name = base;
    for (int k = 2;; k++) {
        int id = sym_of(m, name), taken = 0;
        for (int i = 0; i < m->nfns && !taken; i++)
            taken = m->fns[i].sym == id;
        if (!taken)
            break;
        name = arena_printf(m->arena, "%s_%d", base, k);
    }
    Fn *d = module_add_fn(m, sym_of(m, name), m->fns[f].spmd, m->fns[f].loc);
    const Fn *src = &m->fns[f];
    d->on = src->on;
    d->vjp_of = f + 1;
    return (int)(d - m->fns);
}

/* The vjp fn's signature: f's parameters, a cotangent per result; a
 * gradient per float parameter. */
static void vjp_signature(Module *m, Fn *d, const Fn *src) {
    d->nresults = 0;
    d->nparams = src->nparams + src->nresults;
    d->params = arena_alloc(m->arena, sizeof(Sig) * (size_t)(d->nparams + 1));
    memcpy(d->params, src->params, sizeof(Sig) * (size_t)src->nparams);
    for (int i = 0; i < src->nresults; i++)
        d->params[src->nparams + i] = ct_sig(src->results[i]);
    d->results = arena_alloc(m->arena, sizeof(Sig) * (size_t)(src->nparams + 1));
    for (int p = 0; p < src->nparams; p++)
        if (dtype_is_float(src->params[p].type.dtype))
            d->results[d->nresults++] = ct_sig(src->params[p]);
}

int runs_again(const Module *m, const Fn *caller, const Inst *call) {
    return m->fns[ir_attr(caller, call, 0)].spmd || (call->flags & INST_REMAT);
}

static uint8_t *float_params(Module *m, const Fn *f) {
    uint8_t *w = arena_alloc(m->arena, (size_t)f->nparams + 1);
    for (int p = 0; p < f->nparams; p++)
        w[p] = (uint8_t)dtype_is_float(f->params[p].type.dtype);
    return w;
}

/* Widen fn f's mask by `by`; 1 when it grew. */
static int widen(Module *m, Backward *bk, int f, const uint8_t *by) {
    int n = m->fns[f].nparams, grew = !bk->wrt[f];
    if (!bk->wrt[f])
        bk->wrt[f] = arena_alloc(m->arena, (size_t)n + 1);
    for (int p = 0; p < n; p++)
        if (by[p] && !bk->wrt[f][p])
            bk->wrt[f][p] = 1, grew = 1;
    return grew;
}

/* Backward.varies_in and varies_out of body c of loop v of spmd fn f;
 * *varies is f's variation, found at its first loop. */
static void loop_varies(Module *m, Backward *bk, int f, int v, int c, uint32_t **varies) {
    const Fn *fn = &m->fns[f], *b = &m->fns[c];
    if (!*varies) {
        *varies = arena_alloc(m->arena, sizeof(uint32_t) * (size_t)(fn->ninsts + 1));
        fn_variation(m, fn, bk->varies_in[f], *varies);
    }
    bk->varies_in[c] = arena_alloc(m->arena, sizeof(uint32_t) * (size_t)(b->nparams + 1));
    bk->varies_out[c] = arena_alloc(m->arena, sizeof(uint32_t) * (size_t)(b->nresults + 1));
    loop_variation(m, fn, v, *varies, bk->varies_in[c], bk->varies_out[c]);
}

/* What each fn a gradient runs is differentiated with respect to (bk->wrt):
 * a grad's fn by its named parameters, a called fn by its float ones, a
 * loop body by what its loop's operands carry of those; a worklist, since
 * a mask only grows.  Then the fns: a pair (or vjp) per callee, the pair
 * and loops of each loop body; a callee called through checkpoint (or an
 * spmd one) gets a vjp fn, one called plainly a pair, one called both ways
 * both. */
enum { CALLED_PAIR = 1, CALLED_AGAIN = 2 };      /* how a callee is called: add_backward_fns */

void add_backward_fns(Module *m, Diag *diag, Backward *bk) {
    int nfns = m->nfns;
    int *stack = arena_alloc(m->arena, sizeof(int) * (size_t)(8 * nfns + 1)), top = 0;
    uint8_t *called = arena_alloc(m->arena, (size_t)nfns + 1), *queued = arena_alloc(m->arena, (size_t)nfns + 1);
    const Inst **loop_of = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(nfns + 1));
    int *loop_in = arena_alloc(m->arena, sizeof(int) * (size_t)(nfns + 1));
    for (int d = 0; d < nfns; d++) {
        if (!m->fns[d].grad_of)
            continue;
        int f = m->fns[d].grad_of - 1;
        uint8_t *named = arena_alloc(m->arena, (size_t)m->fns[f].nparams + 1);
        for (int i = 0; i < m->fns[d].ngrad_wrt; i++)
            named[m->fns[d].grad_wrt[i]] = 1;
        if (widen(m, bk, f, named) && !queued[f])
            queued[f] = 1, stack[top++] = f;
    }
    while (top) {
        int f = stack[--top];
        queued[f] = 0;
        uint32_t *varies = NULL;     /* f's, for its loops' bodies (Backward.varies_in) */
        for (int v = 0; v < m->fns[f].ninsts; v++) {
            const Inst *in = &m->fns[f].insts[v];
            int c = op_calls(in->op) ? (int)ir_attr(&m->fns[f], in, 0) : -1;
            if (c < 0)
                continue;
            if (m->fns[c].grad_of)
                diag_fatal(diag, in->loc, "'%s' calls a gradient ('%s'); gradients of gradients are not supported",
                           sym_name(m->syms, m->fns[f].sym), sym_name(m->syms, m->fns[c].sym));
            const uint8_t *by;
            if (in->op == OP_CALL) {
                called[c] |= runs_again(m, &m->fns[f], in) ? CALLED_AGAIN : CALLED_PAIR;
                by = float_params(m, &m->fns[c]);
            } else {
                by = loop_body_wrt(m, f, bk->wrt[f], in);
                if (!by)        /* nothing it computes is differentiated */
                    continue;
                loop_of[c] = in;
                loop_in[c] = f;
                if (m->fns[f].spmd)
                    loop_varies(m, bk, f, v, c, &varies);
            }
            if (widen(m, bk, c, by) && !queued[c])
                queued[c] = 1, stack[top++] = c;
        }
    }
    for (int c = 0; c < nfns; c++) {
        if (called[c] & CALLED_AGAIN) {
            bk->vjp[c] = add_fn(m, c, "vjp");
            vjp_signature(m, &m->fns[bk->vjp[c]], &m->fns[c]);
        }
        if (called[c] & CALLED_PAIR) {
            bk->fwd[c] = add_fn(m, c, "fwd");
            bk->bwd[c] = add_fn(m, c, "bwd");
        } else if (!called[c] && loop_of[c]) {
            bk->loop[c] = add_loop_fns(m, diag, bk, loop_in[c], loop_of[c]);
        }
    }
}

/* The cotangent parameters of f's results, seeding the backward pass.  In
 * an spmd fn a result's cotangent is each device's share along the axes its
 * caller takes it to differ along (its declared split, or a loop body's
 * varies_out): summed over those along which the value is the same, since
 * a value the same on every device along an axis takes the full cotangent. */
static void seed_results(Grad *g, int first_param) {
    const Fn *src = g->src;
    const Inst *ret = &src->insts[src->ninsts - 1];
    int32_t *ct = arena_alloc(g->m->arena, sizeof(int32_t) * (size_t)(src->nresults + 1));
    g->v = src->ninsts - 1;
    for (int i = 0; i < src->nresults; i++) {     /* consecutive: build_pair finds them */
        int64_t index = first_param + i;
        int c = ct[i] = g_emit(g, OP_PARAMETER, NULL, 0, &index, 1, NULL);
        const char *name = src->nresults == 1 ? "ct" : arena_printf(g->m->arena, "ct%d", i);
        g->dst->insts[c].sym = sym_of(g->m, name);     /* the cotangent of result i */
        if (!src->spmd)
            g->dst->insts[c].sh = g->dst->params[index].sh;
    }
    for (int i = 0; i < src->nresults; i++) {
        int v = ir_arg(src, ret, i);
        if (!g->active[v])
            continue;
        g->v = v;
        if (g->varies) {
            const uint32_t *out = g->bk->varies_out[src - g->m->fns];
            uint32_t shared = sharding_split_axes(&src->results[i].sh) | (out ? out[i] : 0);
            ct[i] = g_psum(g, ct[i], shared & ~g->varies[v]);
        }
        add_ct(g, v, ct[i]);
    }
}

/* One body, forward then backward, of fn f into dst (whose parameters are
 * f's, then one cotangent per result); the gradients into grads[]. */
static Grad forward_backward(Module *m, Diag *diag, int f, Fn *dst, const Backward *bk, int32_t *grads, int *ngrads) {
    const Fn *src = &m->fns[f];
    Grad g = grad_begin(m, diag, src, dst, bk);
    const uint8_t *wrt = bk->wrt[f] ? bk->wrt[f] : float_params(m, src);
    uint8_t *seed = arena_alloc(m->arena, (size_t)src->ninsts);
    const Inst *ret = &src->insts[src->ninsts - 1];
    for (int i = 0; i < src->nresults; i++)
        seed[ir_arg(src, ret, i)] = 1;
    find_active(&g, wrt, seed);
    copy_forward(&g);
    seed_results(&g, src->nparams);
    run_backward(&g);
    *ngrads = 0;
    for (int p = 0; p < src->nparams; p++)
        if (wrt[p])
            grads[(*ngrads)++] = param_grad(&g, p, ct_dtype(src->params[p].type.dtype));
    return g;
}

static void build_vjp(Module *m, Diag *diag, int f, const Backward *bk) {
    Fn *d = &m->fns[bk->vjp[f]];
    int32_t *grads = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(m->fns[f].nparams + 1));
    int n;
    Grad g = forward_backward(m, diag, f, d, bk, grads, &n);
    g.v = g.src->ninsts - 1;
    g_emit(&g, OP_RETURN, grads, n, NULL, 0, NULL);
}

/* ---- cutting one body in two ---- */

static int param(Module *m, Fn *to, int index, int sym, Loc loc) {
    int64_t at = index;
    int x = ir_emit(m, to, OP_PARAMETER, NULL, 0, &at, 1, NULL, loc);
    to->insts[x].sym = sym;
    to->insts[x].sh = to->params[index].sh;
    return x;
}

static Sig open_sig(const Shape *type) {
    Sig s = {*type, sharding_replicated(), 0};
    s.sh.open = (uint8_t)((1u << type->rank) - 1);
    return s;
}

/* body's values [0, nf) are the forward part, [nf, nf + nct) the
 * cotangent parameters, the rest the backward part. */
typedef struct {
    Fn *body;
    int nf, nct;
    const int32_t *results;      /* f's results, in body */
    const int32_t *grads;
    int ngrads;
} Cut;

static void build_fwd(Module *m, const Fn *f, Fn *fwd, const Cut *c, const int32_t *res, int nres) {
    fwd->nparams = f->nparams;      /* a copy: propagation writes the open dims it chooses */
    fwd->params = arena_alloc(m->arena, sizeof(Sig) * (size_t)(f->nparams + 1));
    memcpy(fwd->params, f->params, sizeof(Sig) * (size_t)f->nparams);
    fwd->nresults = f->nresults + nres;
    fwd->results = arena_alloc(m->arena, sizeof(Sig) * (size_t)(fwd->nresults + 1));
    memcpy(fwd->results, f->results, sizeof(Sig) * (size_t)f->nresults);
    for (int k = 0; k < nres; k++)
        fwd->results[f->nresults + k] = open_sig(&c->body->insts[res[k]].type);
    int32_t *map = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(c->nf + 1));
    for (int u = 0; u < c->nf; u++)
        map[u] = reemit(m, fwd, c->body, u, map);
    int32_t *out = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(fwd->nresults + 1));
    for (int i = 0; i < f->nresults; i++)
        out[i] = map[c->results[i]];
    for (int k = 0; k < nres; k++)
        out[f->nresults + k] = map[res[k]];
    ir_emit(m, fwd, OP_RETURN, out, fwd->nresults, NULL, 0, NULL, f->insts[f->ninsts - 1].loc);
}

static void build_bwd(Module *m, const Fn *f, Fn *bwd, const Cut *c, const int32_t *res, int nres,
                      const uint8_t *wrt, const uint8_t *cheap) {
    const Fn *body = c->body;
    bwd->nparams = f->nparams + nres + c->nct;
    bwd->params = arena_alloc(m->arena, sizeof(Sig) * (size_t)(bwd->nparams + 1));
    memcpy(bwd->params, f->params, sizeof(Sig) * (size_t)f->nparams);
    for (int k = 0; k < nres; k++)
        bwd->params[f->nparams + k] = open_sig(&body->insts[res[k]].type);
    memcpy(bwd->params + f->nparams + nres, body->params + f->nparams, sizeof(Sig) * (size_t)c->nct);
    bwd->nresults = 0;
    bwd->results = arena_alloc(m->arena, sizeof(Sig) * (size_t)(c->ngrads + 1));
    for (int p = 0; p < f->nparams; p++)
        if (wrt[p])
            bwd->results[bwd->nresults++] = ct_sig(f->params[p]);
    int32_t *map = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(body->ninsts + 1));
    for (int u = 0; u < body->ninsts; u++)
        map[u] = -1;
    Loc loc = f->loc;
    for (int u = 0; u < c->nf; u++)            /* f's parameters keep their indices */
        if (body->insts[u].op == OP_PARAMETER)
            map[u] = param(m, bwd, (int)ir_attr(body, &body->insts[u], 0), body->insts[u].sym, loc);
    for (int k = 0; k < nres; k++)
        map[res[k]] = param(m, bwd, f->nparams + k, sym_of(m, arena_printf(m->arena, "res%d", k)), loc);
    for (int u = 0; u < c->nf; u++)            /* computed again rather than saved */
        if (cheap[u] && body->insts[u].op != OP_PARAMETER)
            map[u] = reemit(m, bwd, body, u, map);
    for (int i = 0; i < c->nct; i++)
        map[c->nf + i] = param(m, bwd, f->nparams + nres + i, body->insts[c->nf + i].sym, loc);
    for (int u = c->nf + c->nct; u < body->ninsts; u++)
        map[u] = reemit(m, bwd, body, u, map);
    int32_t *out = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(c->ngrads + 1));
    for (int i = 0; i < c->ngrads; i++)
        out[i] = map[c->grads[i]];
    ir_emit(m, bwd, OP_RETURN, out, c->ngrads, NULL, 0, NULL, f->insts[f->ninsts - 1].loc);
}

/* Forward values the backward part computes again instead of taking as
 * residuals: constants, iotas and what is computed from them and the
 * parameters as scalars (index arithmetic), and their broadcasts, reshapes,
 * transposes, slices and casts (a layer's weights w[l] as the matmul reads
 * them).  A loop saves a residual per iteration; these cost no more to
 * compute again than to read back. */
static int moves(int op) {
    return op == OP_BROADCAST || op == OP_RESHAPE || op == OP_TRANSPOSE || op == OP_SLICE || op == OP_DYNAMIC_SLICE ||
           op == OP_CONVERT;
}

static uint8_t *cheap_values(Module *m, const Fn *body, int nf) {
    uint8_t *cheap = arena_alloc(m->arena, (size_t)nf + 1);
    for (int u = 0; u < nf; u++) {
        const Inst *in = &body->insts[u];
        int ok = in->op == OP_CONSTANT || in->op == OP_IOTA || in->op == OP_PARAMETER;
        if (!ok && in->nargs && ((in->type.rank == 0 && (op_info[in->op].flags & OPF_FUSIBLE)) || moves(in->op))) {
            ok = 1;
            for (int i = 0; i < in->nargs; i++)
                ok &= cheap[ir_arg(body, in, i)];
        }
        cheap[u] = (uint8_t)ok;
    }
    return cheap;
}

/* A value that is larger than what it is computed from, and computed by
 * a pass that reads it once: a widening convert (a bf16 value an f32 dot
 * reads: kept narrow, the dot becomes wide again in the backward part,
 * wide_dots.c), a broadcast (a row's statistic read per element), and a
 * constant or iota.  The backward part computes it again from its
 * operand, which is kept instead. */
static int grows(const Fn *body, int u) {
    const Inst *in = &body->insts[u];
    if (in->op == OP_CONSTANT || in->op == OP_IOTA)
        return 1;
    if (in->op != OP_CONVERT && in->op != OP_BROADCAST)
        return 0;
    const Shape *from = &body->insts[ir_arg(body, in, 0)].type;
    return shape_elems(from) * dtype_size(from->dtype) < shape_elems(&in->type) * dtype_size(in->type.dtype);
}

void build_pair(Module *m, Diag *diag, int fi, const Backward *bk) {
    const Fn *f = &m->fns[fi];
    Fn body = fn_without_body(f);
    body.vjp_of = fi + 1;
    vjp_signature(m, &body, f);
    int32_t *grads = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(f->nparams + 1));
    Cut c = {.body = &body, .grads = grads, .nct = f->nresults};
    Grad g = forward_backward(m, diag, fi, &body, bk, grads, &c.ngrads);
    /* forward_backward emits the cotangent parameters right after the
     * forward copy: find where they start. */
    c.nf = 0;
    while (c.nf < body.ninsts && !(body.insts[c.nf].op == OP_PARAMETER &&
                                   ir_attr(&body, &body.insts[c.nf], 0) >= f->nparams))
        c.nf++;
    int32_t *results = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(f->nresults + 1));
    for (int i = 0; i < f->nresults; i++)
        results[i] = g.fwd[ir_arg(f, &f->insts[f->ninsts - 1], i)];
    c.results = results;
    /* The residuals: forward values, not parameters, that the backward
     * part reads.  A loop saves each of them once per iteration, so a loop
     * body's are fewer: those the live backward part (what the gradients
     * need) reads, less what is cheap to compute again. */
    int for_loop = bk->by_loop[fi];
    uint8_t *live = arena_alloc(m->arena, (size_t)body.ninsts + 1), *used = arena_alloc(m->arena, (size_t)c.nf + 1);
    uint8_t *cheap = for_loop ? cheap_values(m, &body, c.nf) : arena_alloc(m->arena, (size_t)c.nf + 1);
    for (int i = 0; i < c.ngrads; i++)
        live[grads[i]] = 1;
    for (int u = body.ninsts - 1; u >= c.nf + c.nct; u--)
        for (int i = 0; i < body.insts[u].nargs && (live[u] || !for_loop); i++)
            live[ir_arg(&body, &body.insts[u], i)] = 1;
    for (int u = c.nf - 1; u >= 0; u--)
        if (live[u] && !cheap[u] && grows(&body, u)) {
            cheap[u] = 1;
            if (body.insts[u].nargs)
                live[ir_arg(&body, &body.insts[u], 0)] = 1;
        }
    for (int u = 0; u < c.nf; u++)
        used[u] = live[u] && !cheap[u] && body.insts[u].op != OP_PARAMETER;
    int32_t *res = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(c.nf + 1));
    int nres = 0;
    for (int u = 0; u < c.nf; u++)
        if (used[u])
            res[nres++] = u;
    const uint8_t *wrt = bk->wrt[fi] ? bk->wrt[fi] : float_params(m, f);
    build_fwd(m, f, &m->fns[bk->fwd[fi]], &c, res, nres);
    build_bwd(m, f, &m->fns[bk->bwd[fi]], &c, res, nres, wrt, cheap);
}

void build_backward_fns(Module *m, Diag *diag, const Backward *bk) {
    int *order = arena_alloc(m->arena, sizeof(int) * (size_t)(m->nfns + 1));
    module_callees_first(m, order);
    for (int i = 0; i < m->nfns; i++) {
        int f = order[i];
        if (bk->vjp[f] >= 0)
            build_vjp(m, diag, f, bk);
        if (bk->fwd[f] >= 0 && !bk->by_loop[f])
            build_pair(m, diag, f, bk);
        if (bk->loop[f])
            build_loop_fns(m, diag, bk, f);
    }
}
