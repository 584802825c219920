/* `for` loops (docs/language.md, "Loops").  A loop is unrolled, or it stays
 * a loop: its body becomes a derived fn, `F.loopN(i, carried..., invariants...)
 * -> (carried..., read after...)`, lowered once whatever the trip count, and
 * the loop one OP_LOOP instruction that runs it trip-count times.
 *
 * The rule, the same in an fn and an spmd fn, differentiated or not (a
 * gradient goes through a kept loop as two loops: compiler/grad/loops.c):
 * a loop stays a loop when it runs more than UNROLL_MAX_TRIPS times, its
 * trip count times the statements of its body exceeds UNROLL_MAX_STMTS (a
 * tiny body is cheaper unrolled), and its body lowers once for a run-time
 * index:
 * every shape is the same in every iteration, each value carried to the next
 * iteration keeps its type, integer and number names are not reassigned, and
 * nothing is placed on a submesh.  Whether the body lowers is found by
 * lowering it, with diagnostics silenced: when it does not, the loop is
 * unrolled, which reports the error again if it is one. */
#include "sema.h"

#include <string.h>

enum { UNROLL_MAX_TRIPS = 8, UNROLL_MAX_STMTS = 32 };
/* A loop of more trips than this that unrolls all the same says so: its
 * code, and the time to compile it, grow with the trip count. */
enum { UNROLL_NOTE_TRIPS = 256 };
enum { N_READ = 1, N_WRITTEN = 2, N_AFTER = 4 };

/* ---- the names a body uses, on the syntax ---- */

/* Symbols in order of first mention, with N_* bits; s->name_mark (all
 * zero between uses) keeps each once. */
typedef struct {
    int *sym;
    uint8_t *bits;
    int n, cap;
} Names;

static void note(Sema *s, Names *nm, int symbol) {
    if (symbol < 0 || symbol >= s->nsyms || s->name_mark[symbol])
        return;
    s->name_mark[symbol] = 1;
    *VEC_PUSH(s->arena, nm->sym, nm->n, nm->cap) = symbol;
}

static void names_expr(Sema *s, Names *nm, const Expr *e);

static void names_list(Sema *s, Names *nm, const PtrVec *v) {
    for (int i = 0; i < v->n; i++)
        names_expr(s, nm, v->items[i]);
}

static void names_expr(Sema *s, Names *nm, const Expr *e) {
    if (!e)
        return;
    if (e->kind == E_NAME)
        note(s, nm, e->sym);
    names_expr(s, nm, e->lhs);
    names_expr(s, nm, e->rhs);
    names_list(s, nm, &e->args);
    names_list(s, nm, &e->binders);
    for (int d = 0; e->type && d < e->type->ndims; d++)
        names_expr(s, nm, e->type->dims[d].size);
}

/* Every name the statements mention, read or written (mark_written tells
 * the written ones). */
static void names_stmts(Sema *s, Names *nm, const PtrVec *body, int from) {
    for (int i = from; i < body->n; i++) {
        const Stmt *st = body->items[i];
        note(s, nm, st->sym);
        names_expr(s, nm, st->value);
        names_list(s, nm, &st->names);
        names_list(s, nm, &st->values);
        names_expr(s, nm, st->lo);
        names_expr(s, nm, st->hi);
        for (int k = 0; k < st->nindices; k++) {
            if (!st->indices[k].whole)
                note(s, nm, st->indices[k].sym);
            names_expr(s, nm, st->indices[k].gather);
        }
        if (st->kind == S_FOR)
            names_stmts(s, nm, &st->body, 0);
    }
}

/* Set N_WRITTEN on the names a statement of `body` binds. */
static void mark_written(Sema *s, const PtrVec *body) {
    for (int i = 0; i < body->n; i++) {
        const Stmt *st = body->items[i];
        if (st->kind == S_ASSIGN || st->kind == S_INDEX)
            s->name_mark[st->sym] = 1;
        for (int k = 0; st->kind == S_MULTI && k < st->names.n; k++)
            s->name_mark[((const Expr *)st->names.items[k])->sym] = 1;
        if (st->kind == S_FOR)
            mark_written(s, &st->body);
    }
}

static void clear_marks(Sema *s, const Names *nm) {
    for (int i = 0; i < nm->n; i++)
        s->name_mark[nm->sym[i]] = 0;
}

static Names body_names(Sema *s, const Stmt *st) {
    Names nm = {0};
    names_stmts(s, &nm, &st->body, 0);
    note(s, &nm, st->sym);
    nm.bits = arena_alloc(s->arena, (size_t)nm.n + 1);
    clear_marks(s, &nm);
    mark_written(s, &st->body);
    for (int i = 0; i < nm.n; i++)
        nm.bits[i] = s->name_mark[nm.sym[i]] ? N_WRITTEN : N_READ;
    for (int i = 0; i < nm.n; i++)
        s->name_mark[nm.sym[i]] = 0;
    return nm;
}

/* Mark N_AFTER on the names the statements after the loop mention: the rest
 * of each enclosing block, and all of an enclosing loop's body (it runs
 * again). */
static void mark_read_after(Sema *s, Names *nm) {
    Names after = {0};
    for (const Block *b = s->block; b; b = b->up)
        names_stmts(s, &after, b->stmts, b->loop ? 0 : b->at + 1);
    for (int i = 0; i < nm->n; i++)
        if (s->name_mark[nm->sym[i]])
            nm->bits[i] |= N_AFTER;
    clear_marks(s, &after);
}

static int64_t count_stmts(const PtrVec *body) {
    int64_t n = 0;
    for (int i = 0; i < body->n; i++) {
        const Stmt *st = body->items[i];
        n += 1 + (st->kind == S_FOR ? count_stmts(&st->body) : 0);
    }
    return n;
}

/* ---- the body as a fn ---- */

/* What a name is to the loop. */
typedef enum { R_NONE, R_CARRIED, R_INVARIANT, R_INVARIANT_INT, R_OUT } Role;

typedef struct {
    const Stmt *st;
    int64_t lo, trips;           /* trips -1: the bounds are known at run time, */
    int hi;                      /* lo and hi then their instructions */
    int caller, body;
    Names nm;
    Binding *saved;              /* per name, its binding before the loop */
    uint8_t *role;               /* per name, a Role */
    int *param;                  /* per name, its parameter (1 + ...), or 0 */
    int nparams, ncarried, nout;
} Loop;

static const Shape *outer_shape(Sema *s, const Loop *lp, int i) {
    return &s->m->fns[lp->caller].insts[lp->saved[i].val.v].type;
}

/* Give each name its role from its binding before the loop; 0 when a
 * written integer or number name needs unrolling. */
static int assign_roles(Sema *s, Loop *lp) {
    int np = 1;
    for (int pass = 0; pass < 2; pass++)      /* carried first, then invariants */
        for (int i = 0; i < lp->nm.n; i++) {
            const Binding *b = &lp->saved[i];
            int written = lp->nm.bits[i] & N_WRITTEN;
            if (lp->nm.sym[i] == lp->st->sym || b->kind != B_VALUE)
                continue;
            if (written && b->val.kind != VAL_TENSOR && lp->trips < 0)
                sema_error(s, lp->st->loc, "'%s' is an integer or number rebound in a loop whose bound is known only "
                           "at run time; such a loop cannot unroll, so bind a tensor instead", sym(s, lp->nm.sym[i]));
            if (written && b->val.kind != VAL_TENSOR)
                return 0;
            if (pass == 0 && written) {
                lp->role[i] = R_CARRIED, lp->param[i] = np++;
                lp->ncarried++;
            } else if (pass == 1 && !written && b->val.kind == VAL_TENSOR) {
                lp->role[i] = R_INVARIANT, lp->param[i] = np++;
            } else if (pass == 1 && !written && b->val.kind == VAL_INT && !int_is_const(b->val.i)) {
                lp->role[i] = R_INVARIANT_INT, lp->param[i] = np++;
            }
        }
    lp->nparams = np + (lp->trips < 0);    /* a run-time bound: the last parameter, which the body ignores */
    return 1;
}

/* Room for one more fn that keeps the room sema_program reserved for the
 * transforms' derived fns (grad_call.c adds them without moving m->fns). */
static void reserve_fn(Sema *s) {
    Module *m = s->m;
    while (m->fns_cap < m->nfns + 1 + s->ntransforms)
        m->fns = vec_grow(m->arena, m->fns, &m->fns_cap, sizeof *m->fns);
}

static int body_fn_name(Sema *s, int caller) {
    int n = 1;
    for (int f = 0; f < s->m->nfns; f++)
        n += s->m->fns[f].loop_of == caller + 1;
    const char *name = arena_printf(s->arena, "%s.loop%d", sym(s, s->m->fns[caller].sym), n);
    return sym_intern(s->syms, name, strlen(name));
}

static int end_name(Sema *s, int index) {
    const char *name = arena_printf(s->arena, "%s.end", sym(s, index));
    return sym_intern(s->syms, name, strlen(name));
}

/* A body's parameter or result of type t: replicated, its dims left open
 * for propagation to choose, as for a generic fn; an spmd body's takes and
 * gives local blocks. */
static Sig body_sig(const Fn *b, const Shape *t) {
    Sig sig = {*t, sharding_replicated(), 0};
    if (!b->spmd)
        sig.sh.open = (uint8_t)((1u << t->rank) - 1);
    return sig;
}

static void body_signature(Sema *s, Loop *lp, Fn *b) {
    b->nparams = lp->nparams;
    b->params = arena_alloc(s->arena, sizeof(Sig) * (size_t)(lp->nparams + 1));
    b->params[0] = (Sig){{DT_I32, 0, {0}}, sharding_replicated(), 0};
    for (int i = 0; i < lp->nm.n; i++) {
        if (!lp->param[i])
            continue;
        Shape t = lp->role[i] == R_INVARIANT_INT ? (Shape){DT_I32, 0, {0}} : *outer_shape(s, lp, i);
        b->params[lp->param[i]] = body_sig(b, &t);
    }
    if (lp->trips < 0)    /* named `i.end`, which no source name can be */
        b->params[lp->nparams - 1] = (Sig){{DT_I32, 0, {0}}, sharding_replicated(), 1 + end_name(s, lp->st->sym)};
}

static int emit_param(Sema *s, int index, int symbol, const Sig *p, Loc loc) {
    int64_t at = index;
    int v = emit(s, OP_PARAMETER, NULL, 0, &at, 1, NULL, loc);
    s->fn->insts[v].sym = symbol;
    s->fn->insts[v].sh = p->sh;
    return v;
}

static Val run_time_atom(int v) { return (Val){VAL_INT, {0, 1, v}, 0, -1}; }

/* Parameters in order: the index, the carried values, the invariants
 * (assign_roles numbered them in this order). */
static void bind_params(Sema *s, Loop *lp) {
    const Stmt *st = lp->st;
    bind_local(s, st->sym, run_time_atom(emit_param(s, 0, st->sym, &s->fn->params[0], st->loc)), st->loc);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < lp->nm.n; i++) {
            if (!lp->param[i] || (lp->role[i] == R_CARRIED) != (pass == 0))
                continue;
            int v = emit_param(s, lp->param[i], lp->nm.sym[i], &s->fn->params[lp->param[i]], lp->saved[i].loc);
            bind_local(s, lp->nm.sym[i], lp->role[i] == R_INVARIANT_INT ? run_time_atom(v) : tensor(v),
                       lp->saved[i].loc);
        }
    if (lp->trips < 0)
        emit_param(s, lp->nparams - 1, s->fn->params[lp->nparams - 1].name - 1, &s->fn->params[lp->nparams - 1],
                   st->hi->loc);
}

/* A name first bound in the body that the code after the loop reads. */
static int leaves_loop(const Sema *s, const Loop *lp, int i) {
    return lp->role[i] == R_NONE && lp->nm.sym[i] != lp->st->sym && (lp->nm.bits[i] & N_WRITTEN) &&
           (lp->nm.bits[i] & N_AFTER) && s->local[lp->nm.sym[i]].kind == B_VALUE;
}

/* The body's results: the carried values (in parameter order), then the
 * names first bound in the body that are read after the loop.  A carried
 * value that changes type, or a name leaving the loop that is not a
 * tensor, fails the trial. */
static int32_t *body_results(Sema *s, Loop *lp) {
    Fn *b = s->fn;
    int n = 0;
    int32_t *vals = arena_alloc(s->arena, sizeof(int32_t) * (size_t)(lp->nm.n + 1));
    Sig *res = arena_alloc(s->arena, sizeof(Sig) * (size_t)(lp->nm.n + 1));
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < lp->nm.n; i++) {
            if (pass == 0 ? lp->role[i] != R_CARRIED : !leaves_loop(s, lp, i))
                continue;
            if (pass == 1 && lp->trips < 0)
                sema_error(s, lp->st->loc, "'%s' is first bound in a loop whose bound is known only at run time and "
                           "read after it, but the loop may run zero times; bind it before the loop",
                           sym(s, lp->nm.sym[i]));
            const Val *now = &s->local[lp->nm.sym[i]].val;
            if (now->kind != VAL_TENSOR)
                sema_error(s, lp->st->loc, "'%s' leaves the loop and is not a tensor", sym(s, lp->nm.sym[i]));
            const Shape *t = &b->insts[now->v].type;
            if (pass == 0 && !shape_eq(t, &b->params[lp->param[i]].type))
                sema_error(s, lp->st->loc, "'%s' changes its type in the loop", sym(s, lp->nm.sym[i]));
            if (pass == 1)
                lp->role[i] = R_OUT;
            vals[n] = now->v;
            res[n] = body_sig(b, t);
            res[n++].name = 1 + lp->nm.sym[i];
        }
    b->results = res;
    b->nresults = n;
    lp->nout = n - lp->ncarried;
    return vals;
}

/* Lower the body into a new fn; a sema_error here ends the trial. */
static void lower_body_fn(Sema *s, Loop *lp) {
    Module *m = s->m;
    reserve_fn(s);
    int name = body_fn_name(s, lp->caller);
    Fn *b = module_add_fn(m, name, m->fns[lp->caller].spmd, lp->st->loc);
    lp->body = m->nfns - 1;
    b->on = m->fns[lp->caller].on;
    b->loop_of = lp->caller + 1;
    b->loop_carried = lp->ncarried;
    body_signature(s, lp, b);
    s->fn = b;
    s->fn_index = lp->body;
    bind_params(s, lp);
    lower_stmts(s, &lp->st->body, 1);
    s->fn = &m->fns[lp->body];       /* a nested loop's body may have moved m->fns */
    for (int v = 0; v < s->fn->ninsts; v++)
        if (s->fn->insts[v].place)
            sema_error(s, lp->st->loc, "a loop that stays a loop cannot run on a submesh");
    int32_t *vals = body_results(s, lp);
    emit(s, OP_RETURN, vals, s->fn->nresults, NULL, 0, NULL, lp->st->loc);
}

/* The loop in the caller, and the names it binds after it. */
static void emit_loop(Sema *s, Loop *lp) {
    Module *m = s->m;
    const Fn *b = &m->fns[lp->body];
    int32_t *args = arena_alloc(s->arena, sizeof(int32_t) * (size_t)(lp->nparams + 1));
    args[0] = lp->trips < 0 ? (int)lp->lo : materialize_int(s, (IntVal){lp->lo, 0, -1}, lp->st->loc);
    for (int i = 0; i < lp->nm.n; i++)
        if (lp->param[i])
            args[lp->param[i]] = lp->role[i] == R_INVARIANT_INT ? materialize_int(s, lp->saved[i].val.i, lp->st->loc)
                                                                : lp->saved[i].val.v;
    if (lp->trips < 0)
        args[lp->nparams - 1] = lp->hi;
    int64_t attrs[3] = {lp->body, lp->trips, lp->ncarried};
    *VEC_PUSH(s->arena, s->calls, s->ncalls, s->calls_cap) = (CallEdge){lp->caller, lp->body, lp->st->loc};
    int loop = emit(s, OP_LOOP, args, lp->nparams, attrs, 3, NULL, lp->st->loc);
    for (int i = 0; i < lp->nm.n; i++)
        s->local[lp->nm.sym[i]] = lp->saved[i];
    for (int64_t r = 0; r < b->nresults; r++) {
        int v = loop;
        if (b->nresults > 1)
            v = emit(s, OP_GET_TUPLE_ELEMENT, (int32_t[]){loop}, 1, &r, 1, NULL, lp->st->loc);
        int symbol = b->results[r].name - 1;
        s->fn->insts[v].sym = symbol;
        bind_local(s, symbol, tensor(v), lp->st->loc);
    }
}

/* Lower the loop as a loop; 0 (and nothing changed) when it must unroll.
 * With a run-time bound (trips -1, hi its instruction) it cannot unroll:
 * the body's own error is reported, and a note at the loop says why. */
static int keep_loop(Sema *s, const Stmt *st, int64_t lo, int64_t trips, int hi) {
    Module *m = s->m;
    Loop lp = {st, lo, trips, hi, s->fn_index, -1, body_names(s, st), NULL, NULL, NULL, 0, 0, 0};
    lp.saved = arena_alloc(s->arena, sizeof(Binding) * (size_t)(lp.nm.n + 1));
    lp.role = arena_alloc(s->arena, (size_t)lp.nm.n + 1);
    lp.param = arena_alloc(s->arena, sizeof(int) * (size_t)(lp.nm.n + 1));
    for (int i = 0; i < lp.nm.n; i++)
        lp.saved[i] = s->local[lp.nm.sym[i]];
    if (!assign_roles(s, &lp))
        return 0;
    mark_read_after(s, &lp.nm);
    int nfns = m->nfns, ncalls = s->ncalls;
    const Block *block = s->block;
    FILE *out = s->diag->out;
    jmp_buf *bail = s->diag->bail, trial;
    int errors = s->diag->errors;
    if (trips >= 0)
        s->diag->out = NULL;
    s->diag->bail = &trial;
    int failed = setjmp(trial);
    if (!failed)
        lower_body_fn(s, &lp);
    s->diag->out = out;
    s->diag->bail = bail;
    if (failed && trips < 0) {
        diag_report(s->diag, st->loc, "note", "this loop's bound is known only at run time, so it stays a loop: its "
                    "body must compile once for a run-time '%s' (docs/language.md, Loops)", sym(s, st->sym));
        longjmp(*bail, 1);
    }
    s->diag->errors = errors;
    s->fn = &m->fns[lp.caller];
    s->fn_index = lp.caller;
    if (failed) {
        m->nfns = nfns;
        s->ncalls = ncalls;
        s->block = (Block *)block;
        memset(s->label_of, 0, sizeof(int) * (size_t)s->nsyms);    /* an index statement may have stopped midway */
        for (int i = 0; i < lp.nm.n; i++)
            s->local[lp.nm.sym[i]] = lp.saved[i];
        return 0;
    }
    if (m->fns[lp.body].nresults == 0) {    /* nothing leaves the body: the loop computes nothing */
        m->nfns = lp.body;
        s->ncalls = ncalls;
        for (int i = 0; i < lp.nm.n; i++)
            s->local[lp.nm.sym[i]] = lp.saved[i];
        return 1;
    }
    emit_loop(s, &lp);
    return 1;
}

/* ---- unrolling ---- */

/* Checked on the syntax, so a loop that runs zero times is checked too. */
static void check_no_return(Sema *s, const PtrVec *body) {
    for (int i = 0; i < body->n; i++) {
        const Stmt *st = body->items[i];
        if (st->kind == S_RETURN)
            sema_error(s, st->loc, "return is not allowed inside a loop");
        if (st->kind == S_FOR)
            check_no_return(s, &st->body);
    }
}

static int worth_keeping(const Stmt *st, int64_t trips) {
    if (trips <= UNROLL_MAX_TRIPS)
        return 0;
    int64_t n = count_stmts(&st->body), work;
    return __builtin_mul_overflow(n, trips, &work) || work > UNROLL_MAX_STMTS;
}

/* A bound: a compile-time integer (*known set), or the i32 scalar
 * instruction that computes it at run time. */
static int64_t eval_bound(Sema *s, const Expr *e, int *known) {
    Val v = eval(s, e);
    *known = v.kind == VAL_INT && int_is_const(v.i);
    if (*known)
        return v.i.konst;
    if (v.kind == VAL_INT)
        return materialize_int(s, v.i, e->loc);
    if (v.kind == VAL_TENSOR && s->fn->insts[v.v].type.dtype == DT_I32 && s->fn->insts[v.v].type.rank == 0)
        return v.v;
    if (v.kind == VAL_TENSOR && s->fn->insts[v.v].type.rank == 0)
        sema_error(s, e->loc, "a loop bound is an integer or an i32[] scalar, not %s[]; convert it with i32(...)",
                   dtype_name[s->fn->insts[v.v].type.dtype]);
    sema_error(s, e->loc, "a loop bound must be an integer or an i32[] scalar");
}

/* The instruction of a bound from eval_bound. */
static int bound_inst(Sema *s, int64_t bound, int known, const Expr *e) {
    return known ? materialize_int(s, (IntVal){bound, 0, -1}, e->loc) : (int)bound;
}

/* A loop whose bounds are known only at run time stays a loop: its first
 * index and its end are instructions (lo, hi). */
static void lower_run_time_loop(Sema *s, const Stmt *st, int lo, int hi, Loc bound) {
    if (s->fn->spmd)
        sema_error(s, bound, "a loop bound must be known at compile time in an spmd fn: a run-time one could "
                   "differ between devices, whose collectives in the body would then not match");
    if (s->in_grad)
        sema_error(s, st->loc, "a loop whose bound is known only at run time, in a fn that a gradient "
                   "differentiates: the gradient saves each iteration's values in arrays of the trip count, "
                   "which must be known at compile time (docs/grad.md, Loops)");
    keep_loop(s, st, lo, -1, hi);    /* cannot fail: assign_roles and the body report their errors */
}

void lower_for(Sema *s, const Stmt *st) {
    check_local_name(s, st->sym, st->loc);
    check_no_return(s, &st->body);
    int lo_known, hi_known;
    int64_t lo = eval_bound(s, st->lo, &lo_known), hi = eval_bound(s, st->hi, &hi_known);
    if (!lo_known || !hi_known) {
        lower_run_time_loop(s, st, bound_inst(s, lo, lo_known, st->lo), bound_inst(s, hi, hi_known, st->hi),
                            lo_known ? st->hi->loc : st->lo->loc);
        return;
    }
    if (hi > lo && worth_keeping(st, hi - lo) && keep_loop(s, st, lo, hi - lo, -1))
        return;
    if (hi - lo > UNROLL_NOTE_TRIPS && count_stmts(&st->body))
        diag_report(s->diag, st->loc, "note", "this loop of %lld iterations is unrolled: its body does not compile once "
                    "for a run-time index (a shape, a carried value's type or an integer name changes with it, or a "
                    "value is placed on a submesh); the code grows with the trip count (docs/language.md, Loops)",
                    (long long)(hi - lo));
    Binding saved = s->local[st->sym];
    for (int64_t i = lo; i < hi; i++) {
        if (--s->stmts_left < 0)    /* an empty body still costs its iterations */
            sema_error(s, st->loc, "loops unroll to more than %d statements", MAX_STMTS_RUN);
        bind_local(s, st->sym, int_val(i), st->loc);
        lower_stmts(s, &st->body, 1);
    }
    if (saved.kind != B_NONE)
        s->local[st->sym] = saved;
    else
        s->local[st->sym].kind = B_NONE;
}

/* ---- fns that gradients differentiate ---- */

typedef struct {
    int *to;
    int n, cap;
} Edges;

static void calls_in_expr(Sema *s, const Expr *e, Edges *out, uint8_t *root) {
    if (!e)
        return;
    if (e->kind == E_CALL && e->lhs && e->lhs->args.n > 0) {
        const Expr *f = e->lhs->args.items[0];
        if (f->kind == E_NAME && f->sym < s->nsyms && s->global[f->sym].kind == B_FN)
            root[s->global[f->sym].index] = 1;
    }
    if (e->kind == E_CALL && !e->lhs && e->sym >= 0 && e->sym < s->nsyms && s->global[e->sym].kind == B_FN)
        *VEC_PUSH(s->arena, out->to, out->n, out->cap) = s->global[e->sym].index;
    calls_in_expr(s, e->lhs, out, root);
    calls_in_expr(s, e->rhs, out, root);
    for (int i = 0; i < e->args.n; i++)
        calls_in_expr(s, e->args.items[i], out, root);
}

static void calls_in_stmts(Sema *s, const PtrVec *body, Edges *out, uint8_t *root) {
    for (int i = 0; i < body->n; i++) {
        const Stmt *st = body->items[i];
        calls_in_expr(s, st->value, out, root);
        for (int k = 0; k < st->values.n; k++)
            calls_in_expr(s, st->values.items[k], out, root);
        if (st->kind == S_FOR)
            calls_in_stmts(s, &st->body, out, root);
    }
}

/* The user fns a gradient runs (named by grad or value_and_grad, or called
 * from one): their loops need compile-time bounds, and an spmd fn's are
 * unrolled. */
void find_differentiated(Sema *s) {
    int n = s->nuser_fns;
    Edges *calls = arena_alloc(s->arena, sizeof(Edges) * (size_t)(n + 1));
    uint8_t *root = arena_alloc(s->arena, (size_t)n + 1);
    s->differentiated = arena_alloc(s->arena, (size_t)n + 1);
    for (int f = 0; f < n; f++)
        calls_in_stmts(s, &s->ast_fns[f]->body, &calls[f], root);
    int *stack = arena_alloc(s->arena, sizeof(int) * (size_t)(n + 1)), top = 0;
    for (int f = 0; f < n; f++)
        if (root[f] && !s->differentiated[f])
            s->differentiated[f] = 1, stack[top++] = f;
    while (top) {
        int f = stack[--top];
        for (int k = 0; k < calls[f].n; k++)
            if (!s->differentiated[calls[f].to[k]])
                s->differentiated[calls[f].to[k]] = 1, stack[top++] = calls[f].to[k];
    }
}
