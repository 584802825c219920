/* Function transforms: `grad(f, [w1, w2])(args)`,
 * `value_and_grad(f, [w1, w2])(args)` and `checkpoint(f)(args)`
 * (docs/language.md, "Gradients").
 *
 * Each distinct transform defines one derived fn, named after f and the
 * parameters (`loss_grad_w1_w2`), whose signature is made here: f's
 * parameters; f's results (value_and_grad only), then one gradient per
 * named parameter with that parameter's type and sharding.  Its body needs
 * f's, which may not be lowered yet, so the grad pass (compiler/grad) builds
 * it after sema.  The call itself is an ordinary call of the derived fn. */
#include "sema.h"

#include <string.h>

static const Expr *arg(const Expr *e, int i) { return e->args.items[i]; }

/* The index of f's parameter named `name`, or an error naming them all. */
static int param_named(Sema *s, int f, const Expr *name) {
    const AstFn *af = s->ast_fns[f];
    for (int i = 0; i < af->params.n; i++)
        if (((const AstParam *)af->params.items[i])->sym == name->sym)
            return i;
    const char *all = "", *prev = "";
    Suggest sg = suggest_begin(sym(s, name->sym));
    for (int i = 0; i < af->params.n; i++) {
        const char *p = sym(s, ((const AstParam *)af->params.items[i])->sym), *dot = strchr(p, '.');
        if (dot)        /* a record's fields (p.wq, records.c): the record, once */
            p = arena_strndup(s->arena, p, (size_t)(dot - p));
        if (dot && strcmp(p, prev) == 0)
            continue;
        prev = p;
        all = arena_printf(s->arena, "%s%s'%s'", all, *all ? ", " : "", p);
        near_add(&sg, p);
    }
    sema_error(s, name->loc, "'%s' is not a parameter of '%s' (its parameters: %s)%s", sym(s, name->sym), sym(s, af->sym),
               af->params.n ? all : "none", near_text(s, &sg));
}

/* A name no user fn, constant or earlier derived fn has. */
static int fresh_fn_name(Sema *s, const char *base) {
    for (int k = 1;; k++) {
        const char *name = k == 1 ? base : arena_printf(s->arena, "%s_%d", base, k);
        int id = sym_intern(s->syms, name, strlen(name));
        int taken = id < s->nsyms && s->global[id].kind != B_NONE;
        for (int f = 0; f < s->m->nfns && !taken; f++)
            taken = s->m->fns[f].sym == id;
        if (!taken)
            return id;
    }
}

static int same_transform(const Fn *d, int f, int value, const int32_t *wrt, int n) {
    return d->grad_of == f + 1 && d->grad_value == value && d->ngrad_wrt == n &&
           memcmp(d->grad_wrt, wrt, sizeof(int32_t) * (size_t)n) == 0;
}

static int derived_fn(Sema *s, const Expr *t, int f, int value, const int32_t *wrt, int n) {
    Module *m = s->m;
    for (int d = s->nuser_fns; d < m->nfns; d++)
        if (same_transform(&m->fns[d], f, value, wrt, n))
            return d;
    const Fn *src = &m->fns[f];
    const char *name = arena_printf(s->arena, "%s_%s", sym(s, src->sym), value ? "value_and_grad" : "grad");
    const char *prev = "";
    for (int i = 0; i < n; i++) {
        /* A record's fields (`p.wq`, records.c) are named once, by the record. */
        const char *p = sym(s, ((const AstParam *)s->ast_fns[f]->params.items[wrt[i]])->sym), *dot = strchr(p, '.');
        if (dot)
            p = arena_strndup(s->arena, p, (size_t)(dot - p));
        if (!dot || strcmp(p, prev) != 0)
            name = arena_printf(s->arena, "%s_%s", name, p);
        prev = dot ? p : "";
    }
    if (m->nfns == m->fns_cap)       /* sema_program reserved one slot per transform call */
        sema_error(s, t->loc, "internal error: no room for the fn of this transform");
    int id = fresh_fn_name(s, name);
    Fn *d = module_add_fn(m, id, src->spmd, t->loc);
    src = &m->fns[f];
    d->on = src->on;
    d->nparams = src->nparams;      /* a copy: propagation writes the open dims it chooses */
    d->params = arena_alloc(s->arena, sizeof(Sig) * (size_t)(src->nparams + 1));
    memcpy(d->params, src->params, sizeof(Sig) * (size_t)src->nparams);
    d->nresults = (value ? src->nresults : 0) + n;
    d->results = arena_alloc(s->arena, sizeof(Sig) * (size_t)(d->nresults + 1));
    for (int i = 0; value && i < src->nresults; i++)
        d->results[i] = src->results[i];
    for (int i = 0; i < n; i++)
        d->results[d->nresults - n + i] = src->params[wrt[i]];
    for (int i = 0; i < d->nresults; i++)
        d->results[i].name = 0;          /* no return statement names them */
    d->grad_of = f + 1;
    d->grad_value = value;
    d->grad_wrt = arena_alloc(s->arena, sizeof(int32_t) * (size_t)(n + 1));
    memcpy(d->grad_wrt, wrt, sizeof(int32_t) * (size_t)n);
    d->ngrad_wrt = n;
    /* The derived fn runs f's body: recursion through it is recursion. */
    *VEC_PUSH(s->arena, s->calls, s->ncalls, s->calls_cap) = (CallEdge){m->nfns - 1, f, t->loc};
    return m->nfns - 1;
}

/* checkpoint(f)(args): an ordinary call of f, marked INST_REMAT: a
 * gradient through it runs f again in its backward pass (f's vjp fn)
 * instead of keeping f's residuals from the forward pass (docs/grad.md,
 * "Rematerialization").  Outside a gradient the mark changes nothing. */
static Val checkpoint_call(Sema *s, const Expr *e, int nwanted, Val *results) {
    const Expr *t = e->lhs;
    if (t->args.n != 1 || arg(t, 0)->kind != E_NAME)
        sema_error(s, t->loc, "checkpoint takes one function and is called with its arguments: checkpoint(f)(x, w)");
    Binding *b = lookup(s, arg(t, 0)->sym);
    if (!b || b->kind != B_FN || b->index >= s->nuser_fns)
        sema_error(s, arg(t, 0)->loc, "'%s' is not a function; checkpoint takes an fn or spmd fn defined in the program%s",
                   sym(s, arg(t, 0)->sym), did_you_mean(s, arg(t, 0)->sym, NEAR_FNS));
    const char *name = arena_printf(s->arena, "checkpoint(%s)", sym(s, arg(t, 0)->sym));
    return fn_call(s, e, b->index, name, INST_REMAT, nwanted, results);
}

void near_add_transforms(Suggest *sg) {
    near_add(sg, "grad");
    near_add(sg, "value_and_grad");
    near_add(sg, "checkpoint");
}

Val transform_call(Sema *s, const Expr *e, int nwanted, Val *results) {
    const Expr *t = e->lhs;
    const char *kind = sym(s, t->sym);
    if (s->fn->sym < 0)
        sema_error(s, e->loc, "a constant must be known at compile time; it cannot call %s", kind);
    if (strcmp(kind, "checkpoint") == 0)
        return checkpoint_call(s, e, nwanted, results);
    int value = strcmp(kind, "value_and_grad") == 0;
    if (!value && strcmp(kind, "grad") != 0) {
        Suggest sg = suggest_begin(kind);
        near_add_transforms(&sg);
        sema_error(s, e->loc, "'%s(...)' is not a function; only grad(f, [params]), value_and_grad(f, [params]) "
                   "and checkpoint(f) can be called with arguments%s", kind, near_text(s, &sg));
    }
    if (t->args.n != 2 || arg(t, 0)->kind != E_NAME || arg(t, 1)->kind != E_LIST)
        sema_error(s, t->loc, "%s takes a function and a list of its parameters: %s(f, [w1, w2])", kind, kind);
    Binding *b = lookup(s, arg(t, 0)->sym);
    if (!b || b->kind != B_FN || b->index >= s->nuser_fns)
        sema_error(s, arg(t, 0)->loc, "'%s' is not a function%s", sym(s, arg(t, 0)->sym),
                   did_you_mean(s, arg(t, 0)->sym, NEAR_FNS));
    int f = b->index;
    const Fn *src = &s->m->fns[f];
    const char *fname = sym(s, src->sym);
    if (!src->nresults || src->results[0].type.rank != 0 || !dtype_is_float(src->results[0].type.dtype))
        sema_error(s, arg(t, 0)->loc, "%s differentiates a scalar loss: the first result of '%s' must be a float "
                   "scalar such as f32[], not %s", kind, fname,
                   src->nresults ? shape_str(s, &src->results[0].type) : "nothing");
    const Expr *list = arg(t, 1);
    if (!list->args.n)
        sema_error(s, list->loc, "%s needs at least one parameter of '%s' to differentiate with respect to", kind, fname);
    int32_t *wrt = arena_alloc(s->arena, sizeof(int32_t) * (size_t)list->args.n);
    for (int i = 0; i < list->args.n; i++) {
        const Expr *name = arg(list, i);
        if (name->kind != E_NAME)
            sema_error(s, name->loc, "%s's list names parameters of '%s'", kind, fname);
        wrt[i] = param_named(s, f, name);
        for (int j = 0; j < i; j++)
            if (wrt[j] == wrt[i])
                sema_error(s, name->loc, "parameter '%s' is named twice", sym(s, name->sym));
        const Shape *pt = &src->params[wrt[i]].type;
        if (!dtype_is_float(pt->dtype))
            sema_error(s, name->loc, "cannot differentiate with respect to '%s', a parameter of type %s; "
                       "gradients need a float parameter (f32, f64, bf16 or f16)", sym(s, name->sym), shape_str(s, pt));
    }
    int d = derived_fn(s, t, f, value, wrt, list->args.n);
    return user_call(s, e, d, nwanted, results);
}
