/* Semantic analysis, top level: the mesh, constants, function signatures,
 * statements and loops.  Expressions are in scalar.c, expr.c, builtins.c and
 * index.c.  The first error ends the compilation (diag_fatal). */
#include "sema.h"
#include "sema_api.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Noreturn void sema_error(Sema *s, Loc loc, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_fatal(s->diag, loc, "%s", msg);
}

/* An unknown name may be an axis of a mesh line further down the file. */
void check_axis_declared_later(Sema *s, int symbol, Loc loc) {
    for (int i = 0; s->mesh && s->m->naxes == 0 && i < s->mesh->bindings.n; i++) {
        const AstBinding *b = s->mesh->bindings.items[i];
        if (b->sym == symbol)
            sema_error(s, loc, "mesh axis '%s' is used before the mesh line at %d:%d", sym(s, symbol), b->loc.line, b->loc.col);
    }
}

void near_add(Suggest *sg, const char *name) {
    /* Programs are full of one-letter names (x, y, i, X), each one edit
     * from every other: of those, a one-letter name gets only itself in the
     * other case, or `return x + y` would ask "did you mean 'x'?". */
    const unsigned char *w = (const unsigned char *)sg->word, *n = (const unsigned char *)name;
    if (w[0] && !w[1] && n[0] && !n[1] && tolower(w[0]) != tolower(n[0]))
        return;
    suggest_add(sg, name, -1);
}

void near_add_scope(Sema *s, Suggest *sg, unsigned kinds) {
    for (int id = 0; id < s->nsyms; id++) {
        const Binding *b = lookup(s, id);
        if ((b && kinds >> b->kind & 1) || (kinds & NEAR_BUILTINS && s->builtin[id])) {
            const char *name = sym(s, id), *dot = strchr(name, '.');
            if (dot)            /* a record's field `p.wq` (records.c): the record's name is what was written */
                name = arena_strndup(s->arena, name, (size_t)(dot - name));
            near_add(sg, name);
        }
    }
}

const char *near_text(Sema *s, const Suggest *sg) {
    char buf[SUGGEST_MAX_LEN + 32];
    suggest_text(sg, buf, sizeof buf);
    return arena_strndup(s->arena, buf, strlen(buf));
}

const char *did_you_mean(Sema *s, int symbol, unsigned kinds) {
    Suggest sg = suggest_begin(sym(s, symbol));
    near_add_scope(s, &sg, kinds);
    return near_text(s, &sg);
}

_Noreturn void undefined_name(Sema *s, int symbol, Loc loc) {
    check_axis_declared_later(s, symbol, loc);
    sema_error(s, loc, "undefined name '%s'%s", sym(s, symbol), did_you_mean(s, symbol, NEAR_VALUES));
}

const char *sym(const Sema *s, int id) { return id >= 0 ? sym_name(s->syms, id) : "(constants)"; }

Binding *lookup(Sema *s, int symbol) {
    if (symbol < 0 || symbol >= s->nsyms)
        return NULL;
    if (s->local[symbol].kind != B_NONE)
        return &s->local[symbol];
    return s->global[symbol].kind != B_NONE ? &s->global[symbol] : NULL;
}

/* "1 dim", "3 dims": counts in messages. */
const char *count_of(Sema *s, int64_t n, const char *noun) {
    return arena_printf(s->arena, "%lld %s%s", (long long)n, noun, n == 1 ? "" : "s");
}

const char *shape_str(Sema *s, const Shape *shape) {
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s[", dtype_name[shape->dtype]);
    for (int d = 0; d < shape->rank; d++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%lld", d ? ", " : "", (long long)shape->dims[d]);
    snprintf(buf + n, sizeof buf - (size_t)n, "]");
    return arena_strndup(s->arena, buf, strlen(buf));
}

const Submesh *fn_submesh(const Sema *s, const Fn *fn) { return fn->on ? &s->m->submesh[fn->on - 1] : NULL; }

const char *submesh_str(Sema *s, const Submesh *sm) {
    return arena_printf(s->arena, "submesh '%s' (the devices where %s is %lld)", sym(s, sm->sym),
                        sym(s, s->m->axis_sym[sm->axis]), (long long)sm->coord);
}

/* Where a new instruction's value lives.  A call of an `on` fn runs on its
 * submesh (inside an `on` fn everything is already there: 0); the return
 * and calls of other fns run on the whole mesh; any other op runs where its
 * operands live when they agree on one submesh (whole-mesh operands reach
 * every submesh for free), and on the whole mesh when they do not. */
static uint8_t placement(Sema *s, Op op, const int32_t *args, int nargs, const int64_t *attrs) {
    const Fn *fn = s->fn;
    if (fn->spmd || fn->on || fn->sym < 0 || op == OP_RETURN)
        return 0;
    if (op_calls(op))
        return (uint8_t)s->m->fns[attrs[0]].on;
    uint8_t place = 0;
    for (int i = 0; i < nargs; i++) {
        uint8_t q = fn->insts[args[i]].place;
        if (q && place && q != place)
            return 0;
        if (q)
            place = q;
    }
    return place;
}

/* A value on a submesh has one coordinate along the submesh's axis: a
 * sharding constraint cannot split a dim over it. */
void check_placed_sharding(Sema *s, int v, const Sharding *sh, Loc loc) {
    uint8_t place = s->fn->insts[v].place;
    const Submesh *sm = place ? &s->m->submesh[place - 1] : NULL;
    if (sm && sh->dim[sm->axis] >= 0)
        sema_error(s, loc, "this value lives on %s, so its sharding cannot use %s", submesh_str(s, sm),
                   sym(s, s->m->axis_sym[sm->axis]));
}

int emit(Sema *s, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
         const Shape *type, Loc loc) {
    if (s->fn->ninsts >= MAX_FN_INSTS)
        sema_error(s, loc, "function '%s' grows past %d instructions (loops unroll completely)",
                   sym(s, s->fn->sym), MAX_FN_INSTS);
    uint8_t place = placement(s, op, args, nargs, attrs);
    int v = ir_emit(s->m, s->fn, op, args, nargs, attrs, nattrs, type, loc);
    s->fn->insts[v].place = place;
    return v;
}

/* ---- names ---- */

static void define_global(Sema *s, int symbol, BindKind kind, Loc loc) {
    Binding *g = &s->global[symbol];
    if (s->builtin[symbol])     /* else relu(x) would mean one thing in value code, another in einsums */
        sema_error(s, loc, "'%s' is a builtin; choose another name", sym(s, symbol));
    if (g->kind != B_NONE) {
        /* Functions are defined before constants: blame the later line. */
        Loc first = g->loc, again = loc;
        if (again.line < first.line || (again.line == first.line && again.col < first.col))
            first = loc, again = g->loc;
        sema_error(s, again, "redefinition of '%s' (first defined at %d:%d)", sym(s, symbol), first.line, first.col);
    }
    g->kind = (uint8_t)kind;
    g->loc = loc;
}

void check_local_name(Sema *s, int symbol, Loc loc) {
    Binding *g = &s->global[symbol];
    static const char *what[] = {"", "constant", "mesh axis", "function", "submesh"};
    if (g->kind != B_NONE)
        sema_error(s, loc, "'%s' is a %s; a local name cannot rebind it", sym(s, symbol), what[g->kind]);
    if (s->builtin[symbol])
        sema_error(s, loc, "'%s' is a builtin; choose another name", sym(s, symbol));
}

void bind_local(Sema *s, int symbol, Val v, Loc loc) {
    Binding *b = &s->local[symbol];
    if (b->kind == B_NONE)
        *VEC_PUSH(s->arena, s->touched, s->ntouched, s->touched_cap) = symbol;
    *b = (Binding){B_VALUE, v, 0, loc};
}

/* ---- top level ---- */

static void lower_mesh(Sema *s, const AstTop *top, const MeshOverride *ov) {
    Module *m = s->m;
    if (top->bindings.n > MAX_AXES)
        sema_error(s, top->loc, "a mesh has at most %d axes", MAX_AXES);
    int64_t devices = 1;
    for (int i = 0; i < top->bindings.n; i++) {
        const AstBinding *b = top->bindings.items[i];
        int64_t n = eval_const_int(s, b->value, "a mesh axis size");
        if (ov && ov->n)
            n = ov->size[i];
        if (n < 1)
            sema_error(s, b->value->loc, "mesh axis '%s' has size %lld; sizes are at least 1", sym(s, b->sym), (long long)n);
        if (__builtin_mul_overflow(devices, n, &devices) || devices > MAX_DEVICES)
            sema_error(s, b->value->loc, "the mesh has more than %d devices", MAX_DEVICES);
        if (strcmp(sym(s, b->sym), "auto") == 0)
            sema_error(s, b->loc, "a mesh axis may not be named 'auto': '@auto' marks a dim the sharding search "
                                  "chooses");
        define_global(s, b->sym, B_AXIS, b->loc);
        s->global[b->sym].index = m->naxes;
        m->axis_sym[m->naxes] = b->sym;
        m->axis_size[m->naxes++] = n;
    }
}

static void lower_consts(Sema *s, const AstTop *top, const MeshOverride *ov) {
    for (int i = 0; i < top->bindings.n; i++) {
        const AstBinding *b = top->bindings.items[i];
        Val v = eval(s, b->value);
        if (v.kind == VAL_TENSOR)
            sema_error(s, b->value->loc, "a constant must be a number known at compile time");
        for (int k = 0; ov && k < ov->nconsts; k++)      /* --const, checked like the source */
            if (ov->const_sym[k] == b->sym)
                v = ov->const_is_int[k] ? int_val(ov->const_int[k])
                                        : (Val){VAL_FLOAT, {0, 0, -1}, ov->const_value[k], -1};
        define_global(s, b->sym, B_VALUE, b->loc);
        s->global[b->sym].val = v;
    }
}

/* `submesh first = S[0], second = S[1]`: each a compile-time coordinate
 * along one mesh axis. */
static void lower_submeshes(Sema *s, const AstTop *top) {
    Module *m = s->m;
    for (int i = 0; i < top->bindings.n; i++) {
        const AstBinding *b = top->bindings.items[i];
        const Expr *e = b->value;
        if (e->kind != E_INDEX || e->lhs->kind != E_NAME || e->args.n != 1 ||
            ((const Expr *)e->args.items[0])->kind == E_SLICE)
            sema_error(s, e->loc, "a submesh is written AXIS[k]: a mesh axis and one coordinate along it");
        Binding *ax = lookup(s, e->lhs->sym);
        if (!ax || ax->kind != B_AXIS)
            not_an_axis(s, e->lhs->sym, e->lhs->loc);
        const Expr *k = e->args.items[0];
        int64_t coord = eval_const_int(s, k, "a submesh coordinate");
        int64_t n = m->axis_size[ax->index];
        if (coord < 0 || coord >= n)
            sema_error(s, k->loc, "coordinate %lld is out of range: mesh axis '%s' has size %lld (coordinates 0 to %lld)",
                       (long long)coord, sym(s, e->lhs->sym), (long long)n, (long long)(n - 1));
        if (m->nsubmeshes == MAX_SUBMESHES)
            sema_error(s, b->loc, "a program has at most %d submeshes", MAX_SUBMESHES);
        define_global(s, b->sym, B_SUBMESH, b->loc);
        s->global[b->sym].index = m->nsubmeshes;
        m->submesh[m->nsubmeshes++] = (Submesh){b->sym, ax->index, coord};
    }
}

/* `fn f(...) -> ... on NAME`: set before the types are resolved, which
 * keeps the submesh's axis out of them (resolve_axes). */
static void lower_on(Sema *s, const AstFn *af, Fn *fn) {
    if (!af->on)
        return;
    Binding *b = lookup(s, af->on_sym);
    if (!b || b->kind != B_SUBMESH) {
        const char *hint = did_you_mean(s, af->on_sym, NEAR_SUBMESHES);
        if (!*hint)
            hint = arena_printf(s->arena, "; declare it with a line such as 'submesh %s = X[0]'", sym(s, af->on_sym));
        sema_error(s, af->on_loc, "'%s' is not a submesh%s", sym(s, af->on_sym), hint);
    }
    fn->on = b->index + 1;
}

/* An spmd fn's body sees blocks: its signature cannot leave a dim open. */
static void reject_open_dims(Sema *s, const AstType *t, const char *what) {
    for (int d = 0; d < t->ndims; d++)
        if (t->dims[d].axes.kind == AXES_OPEN || t->dims[d].axes.kind == AXES_AUTO)
            sema_error(s, t->dims[d].axes.loc, "an spmd fn's %s need definite shardings; '@%s' is not allowed here",
                       what, t->dims[d].axes.kind == AXES_OPEN ? "?" : "auto");
}

static void lower_signature(Sema *s, const AstFn *af, Fn *fn) {
    lower_on(s, af, fn);
    s->auto_loc = (Loc){0};
    uint8_t *autod = arena_alloc(s->arena, (size_t)(af->params.n + af->results.n + 1));
    fn->nparams = af->params.n;
    fn->nresults = af->results.n;
    fn->params = arena_alloc(s->arena, sizeof(Sig) * (size_t)(fn->nparams + 1));
    fn->results = arena_alloc(s->arena, sizeof(Sig) * (size_t)(fn->nresults + 1));
    for (int i = 0; i < fn->nparams; i++) {
        const AstParam *p = af->params.items[i];
        if (af->spmd)
            reject_open_dims(s, p->type, "parameters");
        s->auto_ok = 1;
        resolve_type(s, p->type, &fn->params[i].type, &fn->params[i].sh);
        autod[i] = s->auto_dims;
        s->auto_ok = 0;
        if (af->spmd)
            check_spmd_divisible(s, &fn->params[i].type, &fn->params[i].sh, p->type->loc);
    }
    for (int i = 0; i < fn->nresults; i++) {
        const AstType *t = af->results.items[i];
        if (af->spmd)
            reject_open_dims(s, t, "results");
        s->auto_ok = 1;
        resolve_type(s, t, &fn->results[i].type, &fn->results[i].sh);
        autod[fn->nparams + i] = s->auto_dims;
        s->auto_ok = 0;
        if (af->spmd)
            check_spmd_divisible(s, &fn->results[i].type, &fn->results[i].sh, t->loc);
    }
    fn->auto_loc = s->auto_loc;
    fn->autod = s->auto_loc.line ? autod : NULL;
}

/* ---- statements ---- */

static void lower_return(Sema *s, const Stmt *st) {
    Fn *fn = s->fn;
    if (st->values.n != fn->nresults)
        sema_error(s, st->loc, "'%s' declares %s but returns %s", sym(s, fn->sym), count_of(s, fn->nresults, "result"),
                   count_of(s, st->values.n, "value"));
    int32_t *vals = arena_alloc(s->arena, sizeof(int32_t) * (size_t)(fn->nresults + 1));
    for (int i = 0; i < fn->nresults; i++) {
        const Expr *e = st->values.items[i];
        const Sig *r = &fn->results[i];
        Shape want = fn->spmd ? shape_local(s->m, &r->type, &r->sh) : r->type;
        vals[i] = to_tensor(s, eval(s, e), want.dtype, e->loc);
        if (e->kind == E_NAME && s->local[e->sym].kind == B_VALUE)      /* a plain local name: the result's */
            fn->results[i].name = 1 + e->sym;
        const Shape *got = &fn->insts[vals[i]].type;
        if (!shape_eq(got, &want))
            sema_error(s, e->loc, "result %d is %s, but the function declares %s%s", i + 1, shape_str(s, got),
                       shape_str(s, &want), fn->spmd ? " (the local block of its result type)" : "");
    }
    emit(s, OP_RETURN, vals, fn->nresults, NULL, 0, NULL, st->loc);
    s->returned = 1;
}

/* A record field's value (a literal's, or p.w = e; sema/records.c): the
 * field's dtype and shape, as a call's argument has its parameter's (a
 * number takes the dtype; the sharding is the value's, as an argument's). */
static Val checked_field(Sema *s, const Stmt *st, Val v) {
    Shape want;
    Sharding sh;
    resolve_type(s, st->check, &want, &sh);
    int t = to_tensor(s, v, want.dtype, st->value->loc);
    if (!shape_eq(&s->fn->insts[t].type, &want))
        sema_error(s, st->value->loc, "%s is %s, but this is %s", st->check_what, shape_str(s, &want),
                   shape_str(s, &s->fn->insts[t].type));
    return tensor(t);
}

static void lower_assign(Sema *s, const Stmt *st) {
    check_local_name(s, st->sym, st->loc);
    int first_new = s->fn->ninsts;
    Val v = eval(s, st->value);
    if (st->check)
        v = checked_field(s, st, v);
    if (v.kind == VAL_TENSOR && v.v >= first_new && s->fn->insts[v.v].sym < 0)
        s->fn->insts[v.v].sym = st->sym;
    bind_local(s, st->sym, v, st->loc);
}

static void lower_multi(Sema *s, const Stmt *st) {
    if (st->value->kind != E_CALL)
        sema_error(s, st->value->loc, "only a call of a function with several results can bind several names");
    for (int i = 0; i < st->names.n; i++)
        check_local_name(s, ((Expr *)st->names.items[i])->sym, ((Expr *)st->names.items[i])->loc);
    Val *results = arena_alloc(s->arena, sizeof(Val) * (size_t)st->names.n);
    call_value(s, st->value, st->names.n, results);
    for (int i = 0; i < st->names.n; i++) {
        const Expr *n = st->names.items[i];
        s->fn->insts[results[i].v].sym = n->sym;
        bind_local(s, n->sym, results[i], n->loc);
    }
}

void lower_stmts(Sema *s, const PtrVec *stmts, int loop_body) {
    Block block = {stmts, 0, loop_body, s->block};
    s->block = &block;
    for (int i = 0; i < stmts->n; i++) {
        const Stmt *st = stmts->items[i];
        block.at = i;
        if (--s->stmts_left < 0)
            sema_error(s, st->loc, "loops unroll to more than %d statements", MAX_STMTS_RUN);
        switch (st->kind) {
        case S_ASSIGN: lower_assign(s, st); break;
        case S_INDEX:
            check_local_name(s, st->sym, st->loc);
            lower_index_stmt(s, st);
            break;
        case S_MULTI: lower_multi(s, st); break;
        case S_RETURN: lower_return(s, st); break;
        case S_FOR: lower_for(s, st); break;
        }
    }
    s->block = block.up;
}

static void lower_body(Sema *s, const AstFn *af, int index) {
    Fn *fn = &s->m->fns[index];
    s->fn = fn;
    s->fn_index = index;
    s->returned = 0;
    s->in_grad = s->differentiated[index];
    for (int i = 0; i < s->ntouched; i++)
        s->local[s->touched[i]].kind = B_NONE;
    s->ntouched = 0;
    for (int i = 0; i < fn->nparams; i++) {
        const AstParam *p = af->params.items[i];
        check_local_name(s, p->sym, p->loc);
        Binding *b = lookup(s, p->sym);
        if (b && b->kind == B_VALUE)
            sema_error(s, p->loc, "parameter '%s' is declared twice", sym(s, p->sym));
        int64_t index_attr = i;
        int v = emit(s, OP_PARAMETER, NULL, 0, &index_attr, 1, NULL, p->loc);
        fn->insts[v].sym = p->sym;
        if (!fn->spmd)           /* an spmd body sees plain local blocks */
            fn->insts[v].sh = fn->params[i].sh;
        bind_local(s, p->sym, tensor(v), p->loc);
    }
    for (int i = 0; i < af->body.n; i++) {
        const Stmt *st = af->body.items[i];
        if (st->kind == S_RETURN && i != af->body.n - 1)
            sema_error(s, st->loc, "return must be the last statement of a function");
    }
    lower_stmts(s, &af->body, 0);
    fn = &s->m->fns[index];          /* loop bodies (loop.c) may have moved m->fns */
    if (!s->returned)
        sema_error(s, af->end, "function '%s' ends without a return", sym(s, fn->sym));
    if (fn->spmd)
        check_replication(s, fn);
}

/* The call graph with edges grouped by caller (a counting sort: linear even
 * when unrolled loops make many calls): edges of f are
 * calls[order[start[f]] .. calls[order[start[f + 1] - 1]]. */
typedef struct {
    int *start, *order;
} CallGraph;

static CallGraph call_graph(Sema *s) {
    int n = s->m->nfns;
    CallGraph g = {arena_alloc(s->arena, sizeof(int) * (size_t)(n + 2)),
                   arena_alloc(s->arena, sizeof(int) * (size_t)(s->ncalls + 1))};
    int *fill = arena_alloc(s->arena, sizeof(int) * (size_t)(n + 1));
    for (int e = 0; e < s->ncalls; e++)
        g.start[s->calls[e].from + 1]++;
    for (int f = 0; f < n; f++)
        g.start[f + 1] += g.start[f];
    for (int e = 0; e < s->ncalls; e++)
        g.order[g.start[s->calls[e].from] + fill[s->calls[e].from]++] = e;
    return g;
}

/* A call cycle would make inlining and partitioning loop forever. */
static void check_recursion(Sema *s, const CallGraph *g) {
    int n = s->m->nfns;
    uint8_t *state = arena_alloc(s->arena, (size_t)n + 1);   /* 0 new, 1 on stack, 2 done */
    int *stack = arena_alloc(s->arena, sizeof(int) * (size_t)(n + 1));
    int *next_edge = arena_alloc(s->arena, sizeof(int) * (size_t)(n + 1));
    for (int root = 0; root < n; root++) {
        if (state[root])
            continue;
        int top = 0;
        stack[top++] = root;
        state[root] = 1;
        next_edge[root] = g->start[root];
        while (top) {
            int f = stack[top - 1];
            if (next_edge[f] == g->start[f + 1]) {
                state[f] = 2;
                top--;
                continue;
            }
            const CallEdge *e = &s->calls[g->order[next_edge[f]++]];
            if (state[e->to] == 1)
                sema_error(s, e->loc, "recursive call of '%s'; calls must not form a cycle", sym(s, s->m->fns[e->to].sym));
            if (state[e->to] == 0) {
                state[e->to] = 1;
                next_edge[e->to] = g->start[e->to];
                stack[top++] = e->to;
            }
        }
    }
}

/* spmd fns do not nest, not even through an fn: the fn runs on an spmd fn's
 * local blocks, where another spmd fn's global view does not exist. */
static void check_spmd_nesting(Sema *s, const CallGraph *g) {
    int n = s->m->nfns;
    int *seen = arena_alloc(s->arena, sizeof(int) * (size_t)(n + 1));    /* 1 + the spmd fn that reached it */
    int *stack = arena_alloc(s->arena, sizeof(int) * (size_t)(n + 1));
    for (int root = 0; root < n; root++) {
        if (!s->m->fns[root].spmd)
            continue;
        int top = 0;
        stack[top++] = root;
        seen[root] = root + 1;
        while (top) {
            int f = stack[--top];
            for (int k = g->start[f]; k < g->start[f + 1]; k++) {
                const CallEdge *c = &s->calls[g->order[k]];
                if (seen[c->to] == root + 1 || s->m->fns[f].grad_of == c->to + 1 ||  /* a gradient runs its fn's body */
                    s->m->fns[c->to].loop_of == f + 1)                                 /* a loop runs its own body */
                    continue;
                if (s->m->fns[c->to].spmd)
                    sema_error(s, c->loc, "'%s' calls the spmd fn '%s' but runs inside the spmd fn '%s'; spmd fns do not nest",
                               sym(s, s->m->fns[f].sym), sym(s, s->m->fns[c->to].sym), sym(s, s->m->fns[root].sym));
                seen[c->to] = root + 1;
                stack[top++] = c->to;
            }
        }
    }
}

int sema_program(Module *m, Diag *diag, const AstProgram *prog, const MeshOverride *ov) {
    jmp_buf bail;
    diag->bail = &bail;
    if (setjmp(bail))
        return -1;
    Sema s0 = {0}, *s = &s0;
    s->m = m;
    s->diag = diag;
    s->syms = m->syms;
    s->arena = m->arena;
    s->stmts_left = MAX_STMTS_RUN;
    prog = lower_records(s, prog);
    builtins_init(s);    /* interns the builtin names and sets nsyms */
    s->global = arena_alloc(s->arena, sizeof(Binding) * (size_t)s->nsyms);
    s->local = arena_alloc(s->arena, sizeof(Binding) * (size_t)s->nsyms);
    s->label_of = arena_alloc(s->arena, sizeof(int) * (size_t)s->nsyms);
    /* Function names first, so a constant that names one is told so. */
    for (int i = 0; i < prog->tops.n; i++) {
        const AstTop *top = prog->tops.items[i];
        if (top->kind == TOP_MESH && !s->mesh) {
            s->mesh = top;
            continue;
        }
        if (top->kind == TOP_MESH)
            sema_error(s, top->loc, "a program has one mesh (the first is at %d:%d)", s->mesh->loc.line, s->mesh->loc.col);
        if (top->kind != TOP_FN)
            continue;
        define_global(s, top->fn->sym, B_FN, top->fn->loc);
        s->global[top->fn->sym].index = m->nfns;
        module_add_fn(m, top->fn->sym, top->fn->spmd, top->fn->loc);
    }
    const AstFn **ast = arena_alloc(s->arena, sizeof(AstFn *) * (size_t)(m->nfns + 1));
    Fn const_scope = {.sym = -1};    /* where constant expressions are evaluated */
    s->fn = &const_scope;
    for (int i = 0, f = 0; i < prog->tops.n; i++) {
        const AstTop *top = prog->tops.items[i];
        if (top->kind == TOP_MESH)
            lower_mesh(s, top, ov);
        else if (top->kind == TOP_CONST)
            lower_consts(s, top, ov);
        else if (top->kind == TOP_SUBMESH)
            lower_submeshes(s, top);
        else
            ast[f++] = top->fn;
    }
    for (int f = 0; f < m->nfns; f++) {
        s->fn = &m->fns[f];
        lower_signature(s, ast[f], &m->fns[f]);
    }
    /* Room for the fns that grad(...)(...) calls define, so that adding
     * them while a body is lowered never moves m->fns under s->fn. */
    while (m->fns_cap < m->nfns + prog->ntransforms)
        m->fns = vec_grow(m->arena, m->fns, &m->fns_cap, sizeof *m->fns);
    s->ast_fns = ast;
    s->nuser_fns = m->nfns;
    s->ntransforms = prog->ntransforms;
    s->name_mark = arena_alloc(s->arena, (size_t)s->nsyms + 1);
    find_differentiated(s);
    for (int f = 0; f < s->nuser_fns; f++)
        lower_body(s, ast[f], f);
    CallGraph g = call_graph(s);
    check_recursion(s, &g);
    check_spmd_nesting(s, &g);
    return 0;
}
