/* Records (docs/language.md, "Records"): `record Params { wq: f32[D, H],
 * ... }`, a named group of tensors, each field with its own type and
 * sharding, fields possibly records themselves.
 *
 * Records are lowered away before the rest of sema sees the program, by
 * rewriting the syntax tree: a record is its leaves (its tensor fields,
 * nested ones included), each an ordinary name `p.wq` or `p.layer.wq`.  A
 * record parameter becomes one parameter per leaf, a record result one
 * result per leaf, a record-valued name one name per leaf; `p.wq` reads a
 * leaf; elementwise arithmetic, builtins and subscripts over records map
 * over the leaves (an operand that is not a record is used as is by every
 * leaf's expression); a call's record argument is its leaves;
 * grad/value_and_grad over a record parameter differentiate its leaves,
 * and their gradient is a record again.  So the IR, propagation,
 * partitioning, scheduling and code generation see only tensors: a record
 * costs nothing, and its fields are partitioned as separate values. */
#include "sema.h"
#include "sema_api.h"

#include <string.h>

typedef struct {
    const char *path;                /* "wq", "layer.wq" */
    AstType *type;
} Leaf;

typedef struct {
    const AstTop *top;
    Leaf *leaf;
    int nleaves, state;              /* state: 0 new, 1 being flattened, 2 done */
} Record;

typedef struct {
    const AstFn *fn;                 /* as written */
    int *param_rec, *result_rec;     /* record index, or -1 for a tensor */
    int has_records;
} FnInfo;

typedef struct {
    Sema *s;
    Record *rec;
    int nrec;
    FnInfo *fn;
    int nfns;
    int nsyms;                       /* the arrays below cover the symbols interned before this pass */
    int *rec_by_sym, *fn_by_sym;     /* symbol -> index + 1 */
    int *scope;                      /* symbol -> 0 unbound, 1 a local tensor, 2 + record index a local record */
    uint8_t *global;                 /* symbol -> a mesh axis, constant or submesh */
    int *touched;
    int ntouched, touched_cap;
    const FnInfo *cur;               /* the fn being rewritten */
    PtrVec *out;                     /* the statements being written: a literal's checked fields go first */
    const char *lit_name;            /* the name a literal's leaf is bound to (p.w in p = P { w: x }), or NULL */
    int nliterals;                   /* literals not assigned to a name, numbered for their leaves' names */
    Expr ***lit_leaves;              /* by number - 1: the names of those literals' leaves bound so far */
    int lit_cap;
} Rec;

static const char *name_of(Rec *r, int symbol) { return sym(r->s, symbol); }
static const char *rec_name(Rec *r, int k) { return name_of(r, r->rec[k].top->sym); }

static int leaf_sym(Rec *r, int base, const char *path) {
    const char *name = arena_printf(r->s->arena, "%s.%s", name_of(r, base), path);
    return sym_intern(r->s->syms, name, strlen(name));
}

static Expr *copy_expr(Rec *r, const Expr *e) {
    Expr *c = arena_alloc(r->s->arena, sizeof *c);
    *c = *e;
    return c;
}

static Expr *name_expr(Rec *r, int symbol, Loc loc) {
    Expr *e = arena_alloc(r->s->arena, sizeof *e);
    e->kind = E_NAME;
    e->sym = symbol;
    e->loc = loc;
    e->depth = 1;
    return e;
}

/* ---- record declarations ---- */

static _Noreturn void unknown_type(Rec *r, const AstType *t) {
    const char *word = name_of(r, t->record - 1);
    Suggest sg = suggest_begin(word);
    for (int k = 0; k < r->nrec; k++)
        near_add(&sg, rec_name(r, k));
    const char *near = near_text(r->s, &sg);
    if (*near)
        sema_error(r->s, t->loc, "unknown type '%s': it is neither a dtype nor a record%s", word, near);
    char hint[160];
    sema_error(r->s, t->loc, "unknown dtype '%s'%s", word, dtype_hint(word, hint, sizeof hint));
}

/* The record a type names, or -1 for a tensor type. */
static int type_rec(Rec *r, const AstType *t) {
    if (!t->record)
        return -1;
    int symbol = t->record - 1;
    if (symbol < r->nsyms && r->rec_by_sym[symbol])
        return r->rec_by_sym[symbol] - 1;
    unknown_type(r, t);
}

static void flatten(Rec *r, int k) {
    Record *rc = &r->rec[k];
    if (rc->state == 2)
        return;
    if (rc->state == 1)
        sema_error(r->s, rc->top->loc, "record '%s' contains itself", rec_name(r, k));
    rc->state = 1;
    int cap = 0;
    for (int i = 0; i < rc->top->fields.n; i++) {
        const AstParam *f = rc->top->fields.items[i];
        for (int j = 0; j < i; j++)
            if (((const AstParam *)rc->top->fields.items[j])->sym == f->sym)
                sema_error(r->s, f->loc, "field '%s' of record '%s' is declared twice", name_of(r, f->sym), rec_name(r, k));
        int sub = type_rec(r, f->type);
        if (sub < 0) {
            *VEC_PUSH(r->s->arena, rc->leaf, rc->nleaves, cap) = (Leaf){name_of(r, f->sym), f->type};
            continue;
        }
        flatten(r, sub);
        rc = &r->rec[k];
        for (int j = 0; j < r->rec[sub].nleaves; j++) {
            const Leaf *l = &r->rec[sub].leaf[j];
            *VEC_PUSH(r->s->arena, rc->leaf, rc->nleaves, cap) =
                (Leaf){arena_printf(r->s->arena, "%s.%s", name_of(r, f->sym), l->path), l->type};
        }
    }
    if (!rc->nleaves)
        sema_error(r->s, rc->top->loc, "record '%s' has no fields", rec_name(r, k));
    rc->state = 2;
}

/* The field named `field` of record k: its index among the fields, or an
 * error naming them with the nearest. */
static const AstParam *field_of(Rec *r, int k, int field, Loc loc) {
    const AstTop *t = r->rec[k].top;
    for (int i = 0; i < t->fields.n; i++)
        if (((const AstParam *)t->fields.items[i])->sym == field)
            return t->fields.items[i];
    const char *all = "";
    Suggest sg = suggest_begin(name_of(r, field));
    for (int i = 0; i < t->fields.n; i++) {
        const char *f = name_of(r, ((const AstParam *)t->fields.items[i])->sym);
        all = arena_printf(r->s->arena, "%s%s'%s'", all, i ? ", " : "", f);
        near_add(&sg, f);
    }
    sema_error(r->s, loc, "record '%s' has no field '%s' (its fields: %s)%s", rec_name(r, k), name_of(r, field), all,
               near_text(r->s, &sg));
}

/* The leaf of record k at `path`. */
static int leaf_at(Rec *r, int k, const char *path) {
    for (int j = 0; j < r->rec[k].nleaves; j++)
        if (strcmp(r->rec[k].leaf[j].path, path) == 0)
            return j;
    return -1;
}

/* ---- expressions ---- */

static int rtype(Rec *r, const Expr *e);

/* Records of two types mix when they have the same fields, by name and in
 * order (the fields' types may differ: a sharding-generic record takes any
 * of its shardings, and sema checks each field's shape where it is used). */
static int same_fields(Rec *r, int a, int b) {
    if (a == b)
        return 1;
    if (a < 0 || b < 0 || r->rec[a].nleaves != r->rec[b].nleaves)
        return 0;
    for (int j = 0; j < r->rec[a].nleaves; j++)
        if (strcmp(r->rec[a].leaf[j].path, r->rec[b].leaf[j].path) != 0)
            return 0;
    return 1;
}

static int join(Rec *r, int a, int b, Loc loc) {
    if (a >= 0 && b >= 0 && !same_fields(r, a, b))
        sema_error(r->s, loc, "records of different fields: '%s' and '%s'; arithmetic maps over the fields of "
                   "records with the same fields", rec_name(r, a), rec_name(r, b));
    return a >= 0 ? a : b;
}

/* The fn a call calls as written: f(...) or checkpoint(f)(...); NULL for
 * builtins and the other transforms. */
static const FnInfo *user_fn(Rec *r, const Expr *e) {
    if (e->kind == E_CALL && e->lhs && e->lhs->kind == E_CALL && e->lhs->args.n == 1 &&
        strcmp(name_of(r, e->lhs->sym), "checkpoint") == 0) {
        const Expr *f = e->lhs->args.items[0];
        return f->kind == E_NAME && f->sym < r->nsyms && r->fn_by_sym[f->sym] ? &r->fn[r->fn_by_sym[f->sym] - 1] : NULL;
    }
    if (e->kind != E_CALL || e->lhs || e->binders.n || e->sym < 0 || e->sym >= r->nsyms || !r->fn_by_sym[e->sym])
        return NULL;
    return &r->fn[r->fn_by_sym[e->sym] - 1];
}

/* ---- record literals: P { w: x, l: L { ... } } ---- */

/* The record a literal names, or an error with the nearest record's name. */
static int literal_rec(Rec *r, const Expr *e) {
    if (e->sym < r->nsyms && r->rec_by_sym[e->sym])
        return r->rec_by_sym[e->sym] - 1;
    Suggest sg = suggest_begin(name_of(r, e->sym));
    for (int k = 0; k < r->nrec; k++)
        near_add(&sg, rec_name(r, k));
    sema_error(r->s, e->loc, "unknown record '%s' in a record literal%s", name_of(r, e->sym), near_text(r->s, &sg));
}

static const char *what_rec(Rec *r, int k);

/* The literal's record, its fields checked: each of the record's fields
 * given once, a record field's value a record with its fields. */
static int check_literal(Rec *r, const Expr *e) {
    int k = literal_rec(r, e);
    const AstTop *t = r->rec[k].top;
    for (int i = 0; i < e->binders.n; i++) {
        const Expr *n = e->binders.items[i], *v = e->args.items[i];
        const AstParam *f = field_of(r, k, n->sym, n->loc);
        for (int j = 0; j < i; j++)
            if (((const Expr *)e->binders.items[j])->sym == n->sym)
                sema_error(r->s, n->loc, "field '%s' is given twice in this '%s' literal (first at %d:%d)", name_of(r, n->sym),
                           rec_name(r, k), ((const Expr *)e->binders.items[j])->loc.line,
                           ((const Expr *)e->binders.items[j])->loc.col);
        int want = type_rec(r, f->type), got = rtype(r, v);
        if (!same_fields(r, want, got) && (want >= 0 || got >= 0))
            sema_error(r->s, v->loc, "field '%s' of record '%s' is %s, but this is %s", name_of(r, n->sym), rec_name(r, k),
                       what_rec(r, want), what_rec(r, got));
    }
    const char *missing = "";
    int nmissing = 0;
    for (int i = 0; i < t->fields.n; i++) {
        int f = ((const AstParam *)t->fields.items[i])->sym, given = 0;
        for (int j = 0; j < e->binders.n && !given; j++)
            given = ((const Expr *)e->binders.items[j])->sym == f;
        if (!given)
            missing = arena_printf(r->s->arena, "%s%s'%s'", missing, nmissing++ ? ", " : "", name_of(r, f));
    }
    if (nmissing)
        sema_error(r->s, e->loc, "this '%s' literal lacks %s %s: a literal gives every field", rec_name(r, k),
                   nmissing == 1 ? "field" : "fields", missing);
    return k;
}

/* `name = value` checked against a field's type (sema.c, checked_field),
 * written before the statement being rewritten; the name as an expression. */
static Expr *checked(Rec *r, int name, Expr *value, AstType *type, const char *what) {
    Stmt *st = arena_alloc(r->s->arena, sizeof *st);
    st->kind = S_ASSIGN;
    st->loc = value->loc;
    st->sym = name;
    st->value = value;
    st->check = type;
    st->check_what = what;
    ptrvec_push(r->s->arena, r->out, st);
    return name_expr(r, name, value->loc);
}

static Expr *leaf(Rec *r, const Expr *e, int k, int j);
static Expr *rw(Rec *r, const Expr *e);

/* Leaf j of literal e (record k): its field's value (or the leaf of a
 * record field's value), checked against the leaf's type and bound to a name
 * of its own: lit_name when the literal is assigned to a name, else
 * "P{}.path", which no source name can take. */
static Expr *literal_leaf(Rec *r, const Expr *e, int k, int j) {
    const char *path = r->rec[k].leaf[j].path, *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    int i = 0;
    while (strlen(name_of(r, ((const Expr *)e->binders.items[i])->sym)) != len ||
           strncmp(name_of(r, ((const Expr *)e->binders.items[i])->sym), path, len) != 0)
        i++;
    const Expr *v = e->args.items[i];
    const char *up = r->lit_name, *name = up;
    if (!name) {
        if (!e->ival) {              /* numbered once, for the names of all its leaves */
            *VEC_PUSH(r->s->arena, r->lit_leaves, r->nliterals, r->lit_cap) =
                arena_alloc(r->s->arena, sizeof(Expr *) * (size_t)r->rec[k].nleaves);
            ((Expr *)e)->ival = r->nliterals;
        }
        if (r->lit_leaves[e->ival - 1][j])       /* bound already (all_literal_leaves) */
            return r->lit_leaves[e->ival - 1][j];
        name = arena_printf(r->s->arena, "%s{%lld}.%s", rec_name(r, k), (long long)e->ival, path);
    }
    /* A nested literal binds the same name; any other expression's literals
     * names of their own (two of them in one expression may not share). */
    r->lit_name = v->kind == E_RECORD ? name : NULL;
    Expr *value;
    if (dot) {
        int q = rtype(r, v);
        value = leaf(r, v, q, leaf_at(r, q, dot + 1));
    } else
        value = rw(r, v);
    r->lit_name = up;
    Expr *n = checked(r, sym_intern(r->s->syms, name, strlen(name)), value, r->rec[k].leaf[j].type,
                      arena_printf(r->s->arena, "field '%s' of record '%s'", path, rec_name(r, k)));
    if (!up)
        r->lit_leaves[e->ival - 1][j] = n;
    return n;
}

/* Before one field of a record expression is read (`P { ... }.w`,
 * `(p + P { ... }).l.w`): every leaf of the literals in it bound, so that
 * each of their fields is checked, read or not. */
static void all_literal_leaves(Rec *r, const Expr *e) {
    int k = rtype(r, e);
    if (k < 0)
        return;
    switch (e->kind) {
    case E_RECORD:
        for (int j = 0; j < r->rec[k].nleaves; j++)
            leaf(r, e, k, j);
        return;
    case E_FIELD:
    case E_INDEX:
    case E_UNARY: all_literal_leaves(r, e->lhs); return;
    case E_BINARY:
        all_literal_leaves(r, e->lhs);
        all_literal_leaves(r, e->rhs);
        return;
    case E_CALL:
        for (int i = 0; i < e->args.n && !e->lhs; i++)
            all_literal_leaves(r, e->args.items[i]);
        return;
    default: return;
    }
}

static const char *what_rec(Rec *r, int k) {
    return k >= 0 ? arena_printf(r->s->arena, "a record of type '%s'", rec_name(r, k)) : "a tensor";
}

/* The record e is (its type's index), or -1 when it is a tensor or a number. */
static int rtype(Rec *r, const Expr *e) {
    switch (e->kind) {
    case E_NAME: return e->sym < r->nsyms && r->scope[e->sym] >= 2 ? r->scope[e->sym] - 2 : -1;
    case E_FIELD: {
        int k = rtype(r, e->lhs);
        if (k < 0) {
            if (e->lhs->kind == E_NAME && e->lhs->sym < r->nsyms && !r->scope[e->lhs->sym] && !r->global[e->lhs->sym] &&
                !r->fn_by_sym[e->lhs->sym]) {
                Suggest sg = suggest_begin(name_of(r, e->lhs->sym));
                for (int i = 0; i < r->ntouched; i++)
                    near_add(&sg, name_of(r, r->touched[i]));
                sema_error(r->s, e->lhs->loc, "undefined name '%s'%s", name_of(r, e->lhs->sym), near_text(r->s, &sg));
            }
            if (e->lhs->kind == E_NAME)
                sema_error(r->s, e->loc, "'%s' is not a record, so it has no field '%s'", name_of(r, e->lhs->sym),
                           name_of(r, e->sym));
            sema_error(r->s, e->loc, "this value is not a record, so it has no field '%s'", name_of(r, e->sym));
        }
        return type_rec(r, field_of(r, k, e->sym, e->loc)->type);
    }
    case E_RECORD: return check_literal(r, e);
    case E_UNARY: return rtype(r, e->lhs);
    case E_BINARY: return join(r, rtype(r, e->lhs), rtype(r, e->rhs), e->loc);
    case E_INDEX: return rtype(r, e->lhs);
    case E_CALL: {
        const FnInfo *f = user_fn(r, e);
        if (f)
            return f->fn->results.n == 1 ? f->result_rec[0] : -1;
        if (e->lhs)
            return -1;          /* grad, value_and_grad: their results are bound by a multiple assignment */
        int k = -1;
        for (int i = 0; i < e->args.n; i++)
            k = join(r, k, rtype(r, e->args.items[i]), ((const Expr *)e->args.items[i])->loc);
        return k;
    }
    default: return -1;
    }
}

/* Leaf j of e, a record of type k. */
static Expr *leaf(Rec *r, const Expr *e, int k, int j) {
    const char *path = r->rec[k].leaf[j].path;
    switch (e->kind) {
    case E_NAME: return name_expr(r, leaf_sym(r, e->sym, path), e->loc);
    case E_FIELD: {
        int q = rtype(r, e->lhs);
        all_literal_leaves(r, e->lhs);
        return leaf(r, e->lhs, q, leaf_at(r, q, arena_printf(r->s->arena, "%s.%s", name_of(r, e->sym), path)));
    }
    case E_RECORD: return literal_leaf(r, e, k, j);
    case E_UNARY:
    case E_BINARY: {
        Expr *c = copy_expr(r, e);
        c->lhs = rtype(r, e->lhs) >= 0 ? leaf(r, e->lhs, k, j) : rw(r, e->lhs);
        if (e->rhs)
            c->rhs = rtype(r, e->rhs) >= 0 ? leaf(r, e->rhs, k, j) : rw(r, e->rhs);
        return c;
    }
    case E_INDEX: {
        Expr *c = copy_expr(r, e);
        c->lhs = leaf(r, e->lhs, k, j);
        c->args = (PtrVec){0};
        for (int i = 0; i < e->args.n; i++)
            ptrvec_push(r->s->arena, &c->args, rw(r, e->args.items[i]));
        return c;
    }
    case E_CALL:
        if (!user_fn(r, e)) {
            Expr *c = copy_expr(r, e);
            c->args = (PtrVec){0};
            for (int i = 0; i < e->args.n; i++) {
                const Expr *a = e->args.items[i];
                ptrvec_push(r->s->arena, &c->args, rtype(r, a) >= 0 ? leaf(r, a, k, j) : rw(r, a));
            }
            return c;
        }
        sema_error(r->s, e->loc, "'%s' returns a record: a call of it can only be assigned to a name (r = %s(...))",
                   name_of(r, e->sym), name_of(r, e->sym));
    default: sema_error(r->s, e->loc, "internal error: not a record expression");
    }
}

static void push_leaves(Rec *r, PtrVec *out, const Expr *e, int k) {
    for (int j = 0; j < r->rec[k].nleaves; j++)
        ptrvec_push(r->s->arena, out, leaf(r, e, k, j));
}

/* A call's arguments, a record argument by its leaves, each checked
 * against the callee's parameter as written. */
static PtrVec call_args(Rec *r, const FnInfo *f, const PtrVec *args, Loc loc) {
    const char *fname = name_of(r, f->fn->sym);
    if (f->has_records && args->n != f->fn->params.n)
        sema_error(r->s, loc, "'%s' takes %s but is given %s", fname, count_of(r->s, f->fn->params.n, "argument"),
                   count_of(r->s, args->n, "argument"));
    PtrVec out = {0};
    for (int i = 0; i < args->n; i++) {
        const Expr *a = args->items[i];
        int want = i < f->fn->params.n ? f->param_rec[i] : -1, got = rtype(r, a);
        if (!same_fields(r, want, got) && (want >= 0 || got >= 0))
            sema_error(r->s, a->loc, "argument %d of '%s' ('%s') is %s, but this is %s", i + 1, fname,
                       name_of(r, ((const AstParam *)f->fn->params.items[i])->sym), what_rec(r, want), what_rec(r, got));
        if (got >= 0)
            push_leaves(r, &out, a, got);
        else
            ptrvec_push(r->s->arena, &out, rw(r, a));
    }
    return out;
}

/* The parameter of f a transform's list item names (`p`, or `p.layer`),
 * as a leaf path prefix: its record index in *k (-1 for a tensor).  NULL
 * when the item is no such parameter (sema says why). */
static const char *wrt_path(Rec *r, const FnInfo *f, const Expr *item, int *root, int *k) {
    if (item->kind == E_NAME) {
        for (int i = 0; i < f->fn->params.n; i++)
            if (((const AstParam *)f->fn->params.items[i])->sym == item->sym) {
                *root = item->sym;
                *k = f->param_rec[i];
                return "";
            }
        return NULL;
    }
    if (item->kind != E_FIELD)
        return NULL;
    int q;
    const char *up = wrt_path(r, f, item->lhs, root, &q);
    if (!up)
        return NULL;
    if (q < 0)
        sema_error(r->s, item->loc, "'%s' is not a record, so it has no field '%s'", *up ? up : name_of(r, *root),
                   name_of(r, item->sym));
    *k = type_rec(r, field_of(r, q, item->sym, item->loc)->type);
    return *up ? arena_printf(r->s->arena, "%s.%s", up, name_of(r, item->sym)) : name_of(r, item->sym);
}

/* grad(f, [p, w])(args): the list by leaves, the arguments by call_args;
 * types[] gets the record (or -1) of each list item. */
static Expr *transform(Rec *r, const Expr *e, int **types, int *ntypes) {
    const Expr *t = e->lhs;
    if (t->args.n != 2 || ((const Expr *)t->args.items[0])->kind != E_NAME ||
        ((const Expr *)t->args.items[1])->kind != E_LIST)
        return copy_expr(r, e);          /* checkpoint(f), or a malformed transform that sema reports */
    const Expr *fname = t->args.items[0], *list = t->args.items[1];
    const FnInfo *f = fname->sym < r->nsyms && r->fn_by_sym[fname->sym] ? &r->fn[r->fn_by_sym[fname->sym] - 1] : NULL;
    if (!f)
        return copy_expr(r, e);
    Expr *nl = copy_expr(r, list), *nt = copy_expr(r, t), *c = copy_expr(r, e);
    nl->args = (PtrVec){0};
    if (types)
        *types = arena_alloc(r->s->arena, sizeof(int) * (size_t)(list->args.n + 1));
    for (int i = 0; i < list->args.n; i++) {
        const Expr *item = list->args.items[i];
        int root = -1, k = -1;
        const char *path = wrt_path(r, f, item, &root, &k);
        if (types)
            (*types)[i] = path ? k : -1;
        if (!path) {
            ptrvec_push(r->s->arena, &nl->args, (void *)item);
            continue;
        }
        if (k < 0) {
            ptrvec_push(r->s->arena, &nl->args, *path ? name_expr(r, leaf_sym(r, root, path), item->loc) : (void *)item);
            continue;
        }
        for (int j = 0; j < r->rec[k].nleaves; j++) {
            const char *p = *path ? arena_printf(r->s->arena, "%s.%s", path, r->rec[k].leaf[j].path) : r->rec[k].leaf[j].path;
            ptrvec_push(r->s->arena, &nl->args, name_expr(r, leaf_sym(r, root, p), item->loc));
        }
    }
    if (ntypes)
        *ntypes = list->args.n;
    nt->args = (PtrVec){0};
    ptrvec_push(r->s->arena, &nt->args, (void *)fname);
    ptrvec_push(r->s->arena, &nt->args, nl);
    c->lhs = nt;
    c->args = call_args(r, f, &e->args, e->loc);
    return c;
}

static _Noreturn void record_as_tensor(Rec *r, const Expr *e, int k) {
    if (e->kind == E_NAME)
        sema_error(r->s, e->loc, "'%s' is a record of type '%s'; a tensor is needed here (a field such as %s.%s)",
                   name_of(r, e->sym), rec_name(r, k), name_of(r, e->sym), r->rec[k].leaf[0].path);
    sema_error(r->s, e->loc, "this is a record of type '%s'; a tensor is needed here", rec_name(r, k));
}

/* A tensor (or number) expression, its fields read and its calls' record
 * arguments spread. */
static Expr *rw(Rec *r, const Expr *e) {
    if (!e)
        return NULL;
    if (e->kind == E_CALL && user_fn(r, e)) {
        Expr *c = copy_expr(r, e);
        c->args = call_args(r, user_fn(r, e), &e->args, e->loc);
        return c;
    }
    if (e->kind == E_CALL && e->lhs)
        return transform(r, e, NULL, NULL);
    int k = rtype(r, e);
    if (k >= 0)
        record_as_tensor(r, e, k);
    if (e->kind == E_FIELD) {
        int q = rtype(r, e->lhs);
        all_literal_leaves(r, e->lhs);
        return leaf(r, e->lhs, q, leaf_at(r, q, name_of(r, e->sym)));
    }
    if (e->kind == E_NAME || e->kind == E_INT || e->kind == E_FLOAT || e->kind == E_TYPE)
        return (Expr *)e;
    Expr *c = copy_expr(r, e);
    c->lhs = rw(r, e->lhs);
    c->rhs = rw(r, e->rhs);
    c->args = (PtrVec){0};
    for (int i = 0; i < e->args.n; i++)
        ptrvec_push(r->s->arena, &c->args, rw(r, e->args.items[i]));
    return c;
}

/* ---- statements ---- */

static void set_scope(Rec *r, int symbol, int k) {
    if (symbol >= r->nsyms)
        return;
    if (!r->scope[symbol])
        *VEC_PUSH(r->s->arena, r->touched, r->ntouched, r->touched_cap) = symbol;
    r->scope[symbol] = k + 2;
}

static void push_names(Rec *r, PtrVec *out, const Expr *n, int k) {
    set_scope(r, n->sym, k);
    if (k < 0) {
        ptrvec_push(r->s->arena, out, (void *)n);
        return;
    }
    for (int j = 0; j < r->rec[k].nleaves; j++)
        ptrvec_push(r->s->arena, out, name_expr(r, leaf_sym(r, n->sym, r->rec[k].leaf[j].path), n->loc));
}

static Stmt *copy_stmt(Rec *r, const Stmt *st) {
    Stmt *c = arena_alloc(r->s->arena, sizeof *c);
    *c = *st;
    return c;
}

static PtrVec rw_stmts(Rec *r, const PtrVec *stmts);

/* `a, b = call`: each result a record or not, by the callee as written. */
static void rw_multi(Rec *r, PtrVec *out, const Stmt *st) {
    Stmt *c = copy_stmt(r, st);
    const Expr *v = st->value;
    int *types = NULL, n = -1;
    const FnInfo *f = user_fn(r, v);
    if (f) {
        c->value = rw(r, v);
        n = f->fn->results.n;
        types = f->result_rec;
    } else if (v->kind == E_CALL && v->lhs) {
        int *wrt, nwrt = 0;
        c->value = transform(r, v, &wrt, &nwrt);
        const Expr *t = v->lhs, *fname = t->args.n ? t->args.items[0] : NULL;
        const FnInfo *src = fname && fname->kind == E_NAME && fname->sym < r->nsyms && r->fn_by_sym[fname->sym]
                                ? &r->fn[r->fn_by_sym[fname->sym] - 1] : NULL;
        int value = strcmp(name_of(r, t->sym), "value_and_grad") == 0;
        if (src && c->value != v && (value || strcmp(name_of(r, t->sym), "grad") == 0)) {
            int nres = value ? src->fn->results.n : 0;
            n = nres + nwrt;
            types = arena_alloc(r->s->arena, sizeof(int) * (size_t)(n + 1));
            for (int i = 0; i < nres; i++)
                types[i] = src->result_rec[i];
            memcpy(types + nres, wrt, sizeof(int) * (size_t)nwrt);
        }
    } else
        c->value = rw(r, v);
    int any = 0;
    for (int i = 0; i < n; i++)
        any |= types[i] >= 0;
    if (any && n != st->names.n)
        sema_error(r->s, st->loc, "this call returns %s (records counted as one), but %s are bound",
                   count_of(r->s, n, "value"), count_of(r->s, st->names.n, "name"));
    c->names = (PtrVec){0};
    for (int i = 0; i < st->names.n; i++)
        push_names(r, &c->names, st->names.items[i], any ? types[i] : -1);
    ptrvec_push(r->s->arena, out, c);
}

/* Leaf j of e, for the name `name`: a literal's leaf is bound to it
 * directly (p = P { w: x } binds p.w to x, checked), so the leaves of a
 * literal keep the names they are assigned to. */
static Expr *named_leaf(Rec *r, const Expr *e, int k, int j, int name) {
    r->lit_name = e->kind == E_RECORD ? name_of(r, name) : NULL;
    Expr *v = leaf(r, e, k, j);
    r->lit_name = NULL;
    return v;
}

/* The path of a field target p.a.b ("a.b"); *root gets p. */
static const char *target_path(Rec *r, const Expr *e, int *root) {
    if (e->kind == E_NAME) {
        *root = e->sym;
        return NULL;
    }
    const char *up = target_path(r, e->lhs, root);
    return up ? arena_printf(r->s->arena, "%s.%s", up, name_of(r, e->sym)) : name_of(r, e->sym);
}

/* p.a.b = e: the field's leaves (one for a tensor field) rebound, each
 * value checked against the field's type; the rest of p is unchanged. */
static void rw_field_assign(Rec *r, PtrVec *out, const Stmt *st) {
    int want = rtype(r, st->field), got = rtype(r, st->value), root;
    const char *path = target_path(r, st->field, &root);
    if (!same_fields(r, want, got) && (want >= 0 || got >= 0))
        sema_error(r->s, st->value->loc, "field '%s' of '%s' is %s, but this is %s", path, name_of(r, root),
                   what_rec(r, want), what_rec(r, got));
    int kroot = rtype(r, &(Expr){.kind = E_NAME, .sym = root});
    int target = leaf_sym(r, root, path);
    if (want < 0) {
        Stmt *c = copy_stmt(r, st);
        c->sym = target;
        c->field = NULL;
        c->value = rw(r, st->value);
        c->check = r->rec[kroot].leaf[leaf_at(r, kroot, path)].type;
        c->check_what = arena_printf(r->s->arena, "field '%s' of '%s'", path, name_of(r, root));
        ptrvec_push(r->s->arena, out, c);
        return;
    }
    for (int j = 0; j < r->rec[want].nleaves; j++) {
        const char *lp = r->rec[want].leaf[j].path;
        int t = leaf_sym(r, target, lp);
        Expr *v = named_leaf(r, st->value, got, leaf_at(r, got, lp), t);
        if (v->kind == E_NAME && v->sym == t)
            continue;                /* a literal's leaf, bound and checked already */
        Stmt *c = copy_stmt(r, st);
        c->sym = t;
        c->field = NULL;
        c->value = v;
        c->check = r->rec[want].leaf[j].type;
        c->check_what = arena_printf(r->s->arena, "field '%s.%s' of '%s'", path, lp, name_of(r, root));
        ptrvec_push(r->s->arena, out, c);
    }
}

static void rw_assign(Rec *r, PtrVec *out, const Stmt *st) {
    if (st->field) {
        rw_field_assign(r, out, st);
        return;
    }
    if (st->value->kind == E_CALL && st->value->lhs && !user_fn(r, st->value)) {  /* g = grad(f, [p])(...): g may be a record */
        Stmt *m = copy_stmt(r, st);
        m->names = (PtrVec){0};
        ptrvec_push(r->s->arena, &m->names, name_expr(r, st->sym, st->loc));
        rw_multi(r, out, m);
        Stmt *c = out->items[out->n - 1];
        if (c->names.n == 1) {          /* a tensor: the assignment as written */
            c->kind = S_ASSIGN;
            c->names = (PtrVec){0};
        } else
            c->kind = S_MULTI;
        return;
    }
    int k = rtype(r, st->value);
    if (k < 0) {
        Stmt *c = copy_stmt(r, st);
        c->value = rw(r, st->value);
        set_scope(r, st->sym, -1);
        ptrvec_push(r->s->arena, out, c);
        return;
    }
    const Expr target = {.kind = E_NAME, .sym = st->sym, .loc = st->loc, .depth = 1};
    if (user_fn(r, st->value)) {       /* r = f(...), f returning one record: a multiple assignment */
        Stmt *c = copy_stmt(r, st);
        c->kind = S_MULTI;
        c->value = rw(r, st->value);
        c->names = (PtrVec){0};
        push_names(r, &c->names, name_expr(r, st->sym, st->loc), k);
        ptrvec_push(r->s->arena, out, c);
        return;
    }
    for (int j = 0; j < r->rec[k].nleaves; j++) {
        Stmt *c = copy_stmt(r, st);
        c->sym = leaf_sym(r, target.sym, r->rec[k].leaf[j].path);
        c->value = named_leaf(r, st->value, k, j, c->sym);
        if (!(c->value->kind == E_NAME && c->value->sym == c->sym))     /* a literal's leaf, bound already */
            ptrvec_push(r->s->arena, out, c);
    }
    set_scope(r, st->sym, k);
}

static void rw_return(Rec *r, PtrVec *out, const Stmt *st) {
    const FnInfo *f = r->cur;
    const char *fname = name_of(r, f->fn->sym);
    if (f->has_records && st->values.n != f->fn->results.n)
        sema_error(r->s, st->loc, "'%s' declares %s but returns %s", fname, count_of(r->s, f->fn->results.n, "result"),
                   count_of(r->s, st->values.n, "value"));
    Stmt *c = copy_stmt(r, st);
    c->values = (PtrVec){0};
    for (int i = 0; i < st->values.n; i++) {
        const Expr *v = st->values.items[i];
        int want = i < f->fn->results.n ? f->result_rec[i] : -1, got = rtype(r, v);
        if (!same_fields(r, want, got) && (want >= 0 || got >= 0))
            sema_error(r->s, v->loc, "result %d of '%s' is declared %s, but this is %s", i + 1, fname,
                       what_rec(r, want), what_rec(r, got));
        if (got >= 0)
            push_leaves(r, &c->values, v, got);
        else
            ptrvec_push(r->s->arena, &c->values, rw(r, v));
    }
    ptrvec_push(r->s->arena, out, c);
}

static PtrVec rw_stmts(Rec *r, const PtrVec *stmts) {
    PtrVec out = {0}, *up = r->out;
    r->out = &out;
    for (int i = 0; i < stmts->n; i++) {
        const Stmt *st = stmts->items[i];
        Stmt *c;
        switch (st->kind) {
        case S_ASSIGN: rw_assign(r, &out, st); break;
        case S_MULTI: rw_multi(r, &out, st); break;
        case S_RETURN: rw_return(r, &out, st); break;
        case S_INDEX:
            c = copy_stmt(r, st);
            c->value = rw(r, st->value);
            c->indices = arena_alloc(r->s->arena, sizeof(AstIndex) * (size_t)(st->nindices + 1));
            for (int k = 0; k < st->nindices; k++) {
                c->indices[k] = st->indices[k];
                c->indices[k].gather = rw(r, st->indices[k].gather);
            }
            set_scope(r, st->sym, -1);
            ptrvec_push(r->s->arena, &out, c);
            break;
        case S_FOR:
            set_scope(r, st->sym, -1);
            c = copy_stmt(r, st);
            c->lo = rw(r, st->lo);
            c->hi = rw(r, st->hi);
            c->body = rw_stmts(r, &st->body);
            ptrvec_push(r->s->arena, &out, c);
            break;
        }
    }
    r->out = up;
    return out;
}

/* ---- functions ---- */

static void fn_info(Rec *r, FnInfo *f, const AstFn *af) {
    f->fn = af;
    f->param_rec = arena_alloc(r->s->arena, sizeof(int) * (size_t)(af->params.n + 1));
    f->result_rec = arena_alloc(r->s->arena, sizeof(int) * (size_t)(af->results.n + 1));
    for (int i = 0; i < af->params.n; i++) {
        const AstParam *p = af->params.items[i];
        f->param_rec[i] = type_rec(r, p->type);
        f->has_records |= f->param_rec[i] >= 0;
    }
    for (int i = 0; i < af->results.n; i++) {
        f->result_rec[i] = type_rec(r, af->results.items[i]);
        f->has_records |= f->result_rec[i] >= 0;
    }
}

static AstFn *rw_fn(Rec *r, const FnInfo *f) {
    const AstFn *af = f->fn;
    AstFn *c = arena_alloc(r->s->arena, sizeof *c);
    *c = *af;
    for (int i = 0; i < r->ntouched; i++)
        r->scope[r->touched[i]] = 0;
    r->ntouched = 0;
    r->cur = f;
    r->nliterals = 0;
    c->params = (PtrVec){0};
    for (int i = 0; i < af->params.n; i++) {
        const AstParam *p = af->params.items[i];
        int k = f->param_rec[i];
        set_scope(r, p->sym, k);
        if (k < 0) {
            ptrvec_push(r->s->arena, &c->params, (void *)p);
            continue;
        }
        for (int j = 0; j < r->rec[k].nleaves; j++) {
            AstParam *q = arena_alloc(r->s->arena, sizeof *q);
            *q = (AstParam){leaf_sym(r, p->sym, r->rec[k].leaf[j].path), r->rec[k].leaf[j].type, p->loc};
            ptrvec_push(r->s->arena, &c->params, q);
        }
    }
    c->results = (PtrVec){0};
    for (int i = 0; i < af->results.n; i++) {
        int k = f->result_rec[i];
        for (int j = 0; k >= 0 && j < r->rec[k].nleaves; j++)
            ptrvec_push(r->s->arena, &c->results, r->rec[k].leaf[j].type);
        if (k < 0)
            ptrvec_push(r->s->arena, &c->results, af->results.items[i]);
    }
    c->body = rw_stmts(r, &af->body);
    return c;
}

const AstProgram *lower_records(Sema *s, const AstProgram *prog) {
    Rec r0 = {.s = s}, *r = &r0;
    r->nsyms = s->syms->n;
    r->rec_by_sym = arena_alloc(s->arena, sizeof(int) * (size_t)(r->nsyms + 1));
    r->fn_by_sym = arena_alloc(s->arena, sizeof(int) * (size_t)(r->nsyms + 1));
    r->scope = arena_alloc(s->arena, sizeof(int) * (size_t)(r->nsyms + 1));
    r->global = arena_alloc(s->arena, (size_t)r->nsyms + 1);
    int rcap = 0, fcap = 0;
    for (int i = 0; i < prog->tops.n; i++) {
        const AstTop *t = prog->tops.items[i];
        if (t->kind == TOP_RECORD) {
            if (r->rec_by_sym[t->sym])
                sema_error(s, t->loc, "redefinition of record '%s' (first defined at %d:%d)", name_of(r, t->sym),
                           r->rec[r->rec_by_sym[t->sym] - 1].top->loc.line, r->rec[r->rec_by_sym[t->sym] - 1].top->loc.col);
            *VEC_PUSH(s->arena, r->rec, r->nrec, rcap) = (Record){t, NULL, 0, 0};
            r->rec_by_sym[t->sym] = r->nrec;
        }
        for (int b = 0; t->kind != TOP_FN && t->kind != TOP_RECORD && b < t->bindings.n; b++)
            r->global[((const AstBinding *)t->bindings.items[b])->sym] = 1;
        if (t->kind == TOP_FN) {
            *VEC_PUSH(s->arena, r->fn, r->nfns, fcap) = (FnInfo){0};
            r->fn_by_sym[t->fn->sym] = r->nfns;
        }
    }
    for (int k = 0; k < r->nrec; k++) {
        if (r->fn_by_sym[r->rec[k].top->sym])
            sema_error(s, r->rec[k].top->loc, "'%s' names both a record and a function", rec_name(r, k));
        flatten(r, k);
    }
    AstProgram *out = arena_alloc(s->arena, sizeof *out);
    *out = *prog;
    out->tops = (PtrVec){0};
    for (int i = 0, f = 0; i < prog->tops.n; i++) {
        const AstTop *t = prog->tops.items[i];
        if (t->kind == TOP_RECORD)
            continue;
        if (t->kind == TOP_FN)
            fn_info(r, &r->fn[f++], t->fn);
    }
    for (int i = 0, f = 0; i < prog->tops.n; i++) {
        const AstTop *t = prog->tops.items[i];
        if (t->kind == TOP_RECORD)
            continue;
        if (t->kind == TOP_FN) {
            AstTop *c = arena_alloc(s->arena, sizeof *c);
            *c = *t;
            c->fn = rw_fn(r, &r->fn[f++]);
            t = c;
        }
        ptrvec_push(s->arena, &out->tops, (void *)t);
    }
    return out;
}
