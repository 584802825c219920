/* Index statements: `h[b, f] = x[b, d] * w[d, f]` and all einsum-style code.
 *
 * Lowering runs in three steps over the right side:
 *   1. scan:  give every index name a label, check extents, and record in
 *             each node the labels occurring below it (Expr.occ);
 *   2. place: an index on the right only is summed at the smallest
 *             subexpression holding all its occurrences (Expr.sum_here);
 *   3. lower: build IR bottom-up.  A product with a summed index on both
 *             sides becomes a dot; other sums become reduces; operands with
 *             different indices are broadcast to the union of their indices.
 * The result is transposed to the left side's order and, when the left side
 * carries `@`, constrained to that sharding. */
#include "sema.h"

#include <string.h>

typedef struct {
    Sema *s;
    int nlabels;
    int label_sym[MAX_INDEX_LABELS];
    int64_t extent[MAX_INDEX_LABELS];
    Loc where[MAX_INDEX_LABELS];         /* first use, for extent errors */
    Loc decl[MAX_INDEX_LABELS];          /* where the name first occurs */
    uint64_t lhs;                        /* labels of the left side */
    uint64_t bound;                      /* labels bound by sum[k](...) and friends */
    int *label_of;                       /* symbol -> label + 1 */
} Ix;

/* A partial result: an IR value (or an untyped constant, v < 0) whose dims
 * are the index labels in `label`. */
typedef struct {
    int v;
    Val c;
    int n;
    uint8_t label[MAX_RANK];
} Term;

static uint64_t bit(int label) { return (uint64_t)1 << label; }

static uint64_t mask_of(const Term *t) {
    uint64_t m = 0;
    for (int i = 0; i < t->n; i++)
        m |= bit(t->label[i]);
    return m;
}

static int label_for(Ix *ix, const Expr *name, int create) {
    Sema *s = ix->s;
    if (ix->label_of[name->sym])
        return ix->label_of[name->sym] - 1;
    if (!create)
        return -1;
    Binding *b = lookup(s, name->sym);
    if (b && b->kind == B_AXIS)
        sema_error(s, name->loc, "'%s' is a mesh axis; index names must be fresh names", sym(s, name->sym));
    if (b && b->kind == B_FN)
        sema_error(s, name->loc, "'%s' is a function; index names must be fresh names", sym(s, name->sym));
    if (b && b->kind == B_SUBMESH)
        sema_error(s, name->loc, "'%s' is a submesh; index names must be fresh names", sym(s, name->sym));
    if (ix->nlabels == MAX_INDEX_LABELS)
        sema_error(s, name->loc, "more than %d index names in one statement", MAX_INDEX_LABELS);
    int l = ix->nlabels++;
    ix->label_sym[l] = name->sym;
    ix->decl[l] = name->loc;
    ix->extent[l] = -1;
    ix->label_of[name->sym] = l + 1;
    return l;
}

static void use_extent(Ix *ix, int l, int64_t extent, Loc loc) {
    if (ix->extent[l] < 0) {
        ix->extent[l] = extent;
        ix->where[l] = loc;
    } else if (ix->extent[l] != extent)
        sema_error(ix->s, loc, "index '%s' has extent %lld here but %lld at %d:%d",
                   sym(ix->s, ix->label_sym[l]), (long long)extent, (long long)ix->extent[l],
                   ix->where[l].line, ix->where[l].col);
}

/* A name bound to nothing: an index name out of place, or a typo. */
static _Noreturn void unbound_name(Ix *ix, const Expr *e) {
    if (label_for(ix, e, 0) >= 0)
        sema_error(ix->s, e->loc, "index '%s' can only be used as a subscript", sym(ix->s, e->sym));
    undefined_name(ix->s, e->sym, e->loc);
}

static int tensor_named(Ix *ix, const Expr *e) {
    Binding *b = e->kind == E_NAME ? lookup(ix->s, e->sym) : NULL;
    if (e->kind == E_NAME && !b)        /* `logit[b, c]` for logits: say so, not that it is no tensor */
        unbound_name(ix, e);
    if (b && (b->kind != B_VALUE || b->val.kind != VAL_TENSOR))
        sema_error(ix->s, e->loc, "'%s' is not a tensor; only a named tensor can be indexed in an index statement",
                   sym(ix->s, e->sym));
    if (!b)
        sema_error(ix->s, e->loc, "only a named tensor can be indexed in an index statement");
    return b->val.v;
}

/* A subscript is a label when it is a name not bound to a value. */
static int is_label_name(Ix *ix, const Expr *sub) {
    if (sub->kind != E_NAME)
        return 0;
    Binding *b = lookup(ix->s, sub->sym);
    return !b || b->kind != B_VALUE;
}

static uint64_t scan(Ix *ix, Expr *e);

/* Does integer arithmetic in a subscript, like x[i + 1], use an index name? */
static int mentions_label(Ix *ix, const Expr *e) {
    switch (e->kind) {
    case E_NAME: return is_label_name(ix, e);
    case E_UNARY: return mentions_label(ix, e->lhs);
    case E_BINARY: return mentions_label(ix, e->lhs) || mentions_label(ix, e->rhs);
    default: return 0;
    }
}

static uint64_t scan_access(Ix *ix, Expr *e, int allow_gather) {
    Sema *s = ix->s;
    const Shape *shape = &s->fn->insts[tensor_named(ix, e->lhs)].type;
    if (e->args.n != shape->rank)
        sema_error(s, e->loc, "'%s' has %s but %s", sym(s, e->lhs->sym), count_of(s, shape->rank, "dim"),
                   count_of(s, e->args.n, "subscript"));
    /* A gather's indices may share names with the other subscripts: those
     * are its batch dims (x[b, label[b]]), so only `own` must be distinct. */
    uint64_t own = 0, gathered = 0;
    int gathers = 0;
    for (int d = 0; d < e->args.n; d++) {
        Expr *sub = e->args.items[d];
        sub->occ = 0;
        if (sub->kind == E_SLICE)
            sema_error(s, sub->loc, "slices are not allowed in an index statement; slice in a value statement first");
        if (is_label_name(ix, sub)) {
            int l = label_for(ix, sub, 1);
            if (own & bit(l))
                sema_error(s, sub->loc, "index '%s' appears twice in one subscript list (diagonals are not supported)", sym(s, sub->sym));
            use_extent(ix, l, shape->dims[d], sub->loc);
            own |= sub->occ = bit(l);
        } else if (sub->kind == E_INDEX) {
            int dt = s->fn->insts[tensor_named(ix, sub->lhs)].type.dtype;
            if (dt != DT_I32 && dt != DT_I64)
                sema_error(s, sub->loc, "a gather's index tensor must be i32 or i64, not %s", dtype_name[dt]);
            if (!allow_gather || gathers++)
                sema_error(s, sub->loc, "only one subscript of an access can be a gather, and gathers do not nest");
            gathered = sub->occ = scan_access(ix, sub, 0);
        } else if (mentions_label(ix, sub) || scan(ix, sub) != 0)
            sema_error(s, sub->loc, "arithmetic on index names is not supported in subscripts");
    }
    return e->occ = own | gathered;
}

static uint64_t scan_node(Ix *ix, Expr *e);

/* Returns the labels occurring free below e, and records them in e->occ. */
static uint64_t scan(Ix *ix, Expr *e) {
    e->sum_here = 0;
    e->has_index = 0;
    uint64_t occ = scan_node(ix, e);
    e->has_index |= occ != 0;
    return occ;
}

static int any_index(const PtrVec *v) {
    for (int i = 0; i < v->n; i++)
        if (((const Expr *)v->items[i])->has_index)
            return 1;
    return 0;
}

static uint64_t scan_node(Ix *ix, Expr *e) {
    Sema *s = ix->s;
    switch (e->kind) {
    case E_INT: case E_FLOAT: return e->occ = 0;
    case E_NAME:
        if (lookup(s, e->sym))      /* a value, or an axis or function for a builtin's argument */
            return e->occ = 0;
        unbound_name(ix, e);
    case E_UNARY:
        e->occ = scan(ix, e->lhs);
        e->has_index = e->lhs->has_index;
        return e->occ;
    case E_BINARY:
        e->occ = scan(ix, e->lhs) | scan(ix, e->rhs);
        e->has_index = e->lhs->has_index || e->rhs->has_index;
        return e->occ;
    case E_TYPE: return e->occ = 0;
    case E_LIST: case E_TUPLE: {
        uint64_t occ = 0;
        for (int i = 0; i < e->args.n; i++)
            occ |= scan(ix, e->args.items[i]);
        e->has_index = any_index(&e->args);
        return e->occ = occ;
    }
    case E_INDEX: return scan_access(ix, e, 1);
    case E_CALL: {
        /* softmax[t](...) keeps t: a dim of its result, not a bound name */
        int keeps = e->binders.n && is_normalization(sym(s, e->sym));
        uint64_t occ = 0, binders = 0;
        for (int i = 0; i < e->binders.n; i++) {
            Expr *b = e->binders.items[i];
            int l = label_for(ix, b, 1);
            if ((ix->lhs & bit(l)) && !keeps)
                sema_error(s, b->loc, "index '%s' is on the left, so it cannot be reduced here", sym(s, b->sym));
            binders |= bit(l);
        }
        for (int i = 0; i < e->args.n; i++)
            occ |= scan(ix, e->args.items[i]);
        for (int i = 0; i < e->binders.n; i++) {
            Expr *b = e->binders.items[i];
            if (!(occ & bit(label_for(ix, b, 0))))
                sema_error(s, b->loc, "index '%s' of %s[...] does not appear in its argument", sym(s, b->sym), sym(s, e->sym));
        }
        if (!keeps)
            ix->bound |= binders;
        e->has_index = binders != 0 || any_index(&e->args);
        return e->occ = keeps ? occ : occ & ~binders;
    }
    default:
        sema_error(s, e->loc, "this expression is not allowed in an index statement");
    }
}

/* Children that a sum can be pushed into; an access is a leaf. */
static int children(Expr *e, Expr **kids) {
    switch (e->kind) {
    case E_UNARY: kids[0] = e->lhs; return 1;
    case E_BINARY: kids[0] = e->lhs; kids[1] = e->rhs; return 2;
    case E_CALL:
        for (int i = 0; i < e->args.n && i < 3; i++)
            kids[i] = e->args.items[i];
        return e->args.n < 3 ? e->args.n : 3;
    default: return 0;
    }
}

static int is_cast(const Ix *ix, const Expr *e) {
    const Builtin *b = e->kind == E_CALL && e->sym < ix->s->nsyms ? ix->s->builtin[e->sym] : NULL;
    return b && b->kind == BK_CAST && e->binders.n == 0;
}

/* Does call e take `label` as an index name (softmax[label](...))? */
static int binds(const Ix *ix, const Expr *e, int label) {
    for (int i = 0; e->kind == E_CALL && i < e->binders.n; i++)
        if (ix->label_of[((const Expr *)e->binders.items[i])->sym] == label + 1)
            return 1;
    return 0;
}

static void place_sum(const Ix *ix, Expr *root, int label) {
    Expr *e = root, *kids[3];
    for (;;) {
        /* sum_t softmax[t](x[t]) sums the normalized values: it stays outside */
        if (binds(ix, e, label))
            break;
        int n = children(e, kids), holders = 0;
        Expr *only = NULL;
        for (int i = 0; i < n; i++)
            if (kids[i]->occ & bit(label))
                holders++, only = kids[i];
        /* A sum stays outside a cast: sum_j f32(x[i, j]) adds f32 values. */
        if (holders != 1 || is_cast(ix, e))
            break;
        e = only;
    }
    e->sum_here |= bit(label);
}

/* ---- lowering ---- */

static Term constant_term(Val c) { return (Term){-1, c, 0, {0}}; }

static Shape union_shape(Ix *ix, const uint8_t *labels, int n, int dtype) {
    Shape s = {(uint8_t)dtype, (uint8_t)n, {0}};
    for (int i = 0; i < n; i++)
        s.dims[i] = ix->extent[labels[i]];
    return s;
}

static Term reduce_term(Ix *ix, Term t, uint64_t mask, Reducer r, Loc loc) {
    if (!(mask_of(&t) & mask))
        return t;
    if (!dtype_is_arith(ix->s->fn->insts[t.v].type.dtype))
        sema_error(ix->s, loc, "cannot reduce %s values; cast them with i32(...) or f32(...)",
                   dtype_name[ix->s->fn->insts[t.v].type.dtype]);
    int64_t attrs[1 + MAX_RANK] = {r};
    int na = 1;
    Term out = {0, t.c, 0, {0}};
    for (int i = 0; i < t.n; i++) {
        if (mask & bit(t.label[i]))
            attrs[na++] = i;
        else
            out.label[out.n++] = t.label[i];
    }
    out.v = emit(ix->s, OP_REDUCE, (int32_t[]){t.v}, 1, attrs, na, NULL, loc);
    return out;
}

/* Broadcast terms to the union of their labels, first appearance first.
 * Untyped constants take the dtype of the first tensor from t[typed_from]
 * on (where's condition is bool and gives no dtype to its values). */
static void align(Ix *ix, Term *t, int n, int typed_from, Loc loc) {
    Sema *s = ix->s;
    uint8_t labels[MAX_INDEX_LABELS];
    int nl = 0, dtype = -1;
    uint64_t seen = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].v >= 0 && dtype < 0 && i >= typed_from)
            dtype = s->fn->insts[t[i].v].type.dtype;
        for (int k = 0; k < t[i].n; k++)
            if (!(seen & bit(t[i].label[k]))) {
                seen |= bit(t[i].label[k]);
                labels[nl++] = t[i].label[k];
            }
    }
    if (nl > MAX_RANK)
        sema_error(s, loc, "this expression would need a tensor with %d dims; at most %d are supported", nl, MAX_RANK);
    for (int i = 0; i < n; i++) {
        if (t[i].v < 0) {
            if (dtype < 0)
                continue;               /* constants among constants stay untyped */
            t[i].v = to_tensor(s, t[i].c, dtype, loc);
        }
        if (t[i].n == nl && memcmp(t[i].label, labels, (size_t)nl) == 0)
            continue;
        int64_t map[MAX_RANK];
        for (int k = 0; k < t[i].n; k++)
            for (int j = 0; j < nl; j++)
                if (labels[j] == t[i].label[k])
                    map[k] = j;
        Shape to = union_shape(ix, labels, nl, s->fn->insts[t[i].v].type.dtype);
        t[i].v = broadcast_to(s, t[i].v, &to, map, loc);
        t[i].n = nl;
        memcpy(t[i].label, labels, (size_t)nl);
    }
}

static Val val_of(const Term *t) { return t->v >= 0 ? tensor(t->v) : t->c; }

static Term from_val(Val v, const Term *shape_src) {
    Term t = *shape_src;
    if (v.kind == VAL_TENSOR)
        t.v = v.v;
    else
        t.v = -1, t.c = v;
    return t;
}

static Term lower(Ix *ix, Expr *e);

static Term cast_term(Ix *ix, Term t, int dtype, Loc loc) {
    Sema *s = ix->s;
    if (t.v < 0)
        return from_val(tensor(to_tensor(s, t.c, dtype, loc)), &t);
    Shape to = s->fn->insts[t.v].type;
    if (to.dtype == dtype)
        return t;
    to.dtype = (uint8_t)dtype;
    t.v = emit(s, OP_CONVERT, (int32_t[]){t.v}, 1, NULL, 0, &to, loc);
    return t;
}

/* A gather of `table` (whose kept dims are `t`'s labels with the gathered
 * dim at gather_dim) through the index term `idx`.  The result has the
 * index labels, then the table's other labels; a table label that the index
 * also has is a batch dim (take_along_axis), which the result has once. */
static Term gather_term(Ix *ix, int table, const Term *t, int gather_dim, Term idx, Loc loc) {
    uint64_t batch = mask_of(t) & mask_of(&idx);
    int rest = t->n;
    for (int k = 0; k < t->n; k++)
        rest -= (batch & bit(t->label[k])) != 0;
    if (idx.n + rest > MAX_RANK)
        sema_error(ix->s, loc, "this gather would need more than %d dims", MAX_RANK);
    int64_t attrs[2 + 2 * MAX_RANK] = {gather_dim, GATHER_CLAMP};
    int na = 2;
    Term g = idx;
    for (int k = 0; k < t->n; k++) {
        if (!(batch & bit(t->label[k]))) {
            g.label[g.n++] = t->label[k];
            continue;
        }
        attrs[na++] = k < gather_dim ? k : k + 1;     /* the table dim: labels skip the gathered one */
        for (int j = 0; j < idx.n; j++)
            if (idx.label[j] == t->label[k])
                attrs[na++] = j;
    }
    g.v = emit(ix->s, OP_GATHER, (int32_t[]){table, index_as_i32(ix->s, idx.v, loc)}, 2, attrs, na, NULL, loc);
    return g;
}

/* x[i, 3, route[s]]: integer subscripts select, labels name dims, and one
 * subscript may gather through an i32 tensor. */
static Term lower_access(Ix *ix, Expr *e) {
    Sema *s = ix->s;
    int x = tensor_named(ix, e->lhs);
    Shape shape = s->fn->insts[x].type;
    SliceSpec sp;
    slice_spec_init(&sp, &shape);
    int gather_dim = -1, kept = 0;
    Expr *gather = NULL;
    Term t = {0, {0}, 0, {0}};
    for (int d = 0; d < shape.rank; d++) {
        Expr *sub = e->args.items[d];
        if (sub->kind == E_NAME && is_label_name(ix, sub)) {
            t.label[t.n++] = (uint8_t)label_for(ix, sub, 0);
        } else if (sub->occ) {
            gather_dim = kept;
            gather = sub;
        } else {
            Val k = eval(s, sub);
            if (k.kind != VAL_INT)
                sema_error(s, sub->loc, "a subscript must be an index name or an integer");
            slice_spec_select(s, &sp, d, k, shape.dims[d], sub->loc);
            continue;
        }
        kept++;
    }
    x = emit_slices(s, x, &sp, e->loc);
    t.v = x;
    return gather ? gather_term(ix, x, &t, gather_dim, lower_access(ix, gather), gather->loc) : t;
}

/* A product with indices summed on both sides is a dot: batch dims, then
 * lhs free dims, then rhs free dims, as HLO orders them. */
static Term lower_product(Ix *ix, Expr *e, Term a, Term b) {
    Sema *s = ix->s;
    uint64_t S = e->sum_here, ma = mask_of(&a), mb = mask_of(&b);
    if (!dtype_is_num(s->fn->insts[a.v].type.dtype) || !dtype_is_num(s->fn->insts[b.v].type.dtype))
        sema_error(s, e->loc, "a product of %s values; cast them with i32(...) or f32(...)",
                   dtype_name[dtype_is_num(s->fn->insts[a.v].type.dtype) ? s->fn->insts[b.v].type.dtype
                                                                          : s->fn->insts[a.v].type.dtype]);
    a = reduce_term(ix, a, S & ma & ~mb, RED_SUM, e->loc);   /* sum_k a*b = (sum_k a)*b */
    b = reduce_term(ix, b, S & mb & ~ma, RED_SUM, e->loc);
    uint64_t contract = S & ma & mb;
    if (!contract) {
        Term t[2] = {a, b};
        align(ix, t, 2, 0, e->loc);
        return from_val(binary_op(s, '*', val_of(&t[0]), val_of(&t[1]), e->loc), &t[0]);
    }
    int da = s->fn->insts[a.v].type.dtype, db = s->fn->insts[b.v].type.dtype;
    if (da != db)
        sema_error(s, e->loc, "operands have different dtypes, %s and %s; cast one with %s(...)", dtype_name[da], dtype_name[db], dtype_name[da]);
    Term out = {0, {0}, 0, {0}};
    int n = 0;
    uint8_t res[3 * MAX_RANK];
    for (int pass = 0; pass < 3; pass++) {
        const Term *src = pass == 2 ? &b : &a;
        uint64_t other = pass == 2 ? ma : mb;
        for (int i = 0; i < src->n; i++) {
            uint64_t l = bit(src->label[i]);
            int want = pass == 0 ? (other & l) && !(contract & l) : !(other & l);
            if (want)
                res[n++] = src->label[i];
        }
    }
    if (n > MAX_RANK)
        sema_error(s, e->loc, "this product would need a tensor with %d dims; at most %d are supported", n, MAX_RANK);
    int64_t attrs[3 * MAX_RANK];
    int na = 0;
    for (int i = 0; i < a.n; i++)
        attrs[na++] = a.label[i];
    for (int i = 0; i < b.n; i++)
        attrs[na++] = b.label[i];
    for (int i = 0; i < n; i++)
        attrs[na++] = out.label[out.n++] = res[i];
    out.v = emit(s, OP_DOT, (int32_t[]){a.v, b.v}, 2, attrs, na, NULL, e->loc);
    return out;
}

static Term unary_term(Ix *ix, Op op, Term t, Loc loc) {
    return from_val(unary_op(ix->s, op, op_info[op].name, tensor(t.v), loc), &t);
}

/* a - b or a + b, b broadcast to a's labels (b's are among them). */
static Term binary_term(Ix *ix, int tok, Term a, Term b, Loc loc) {
    Term both[2] = {a, b};
    align(ix, both, 2, 0, loc);
    return from_val(binary_op(ix->s, tok, val_of(&both[0]), val_of(&both[1]), loc), &both[0]);
}

/* softmax[t](x), log_softmax[t](x) and logsumexp[t](x) over the labels
 * `over` of x, in the numerically stable form: m = max[t](x), then
 * exp(x - m), its sum s, and e / s, (x - m) - log(s) or m + log(s).  These
 * are the ops a hand-written softmax uses, so partitioning finds the same
 * all-reduces of the max and the sum on a split t and fusion the same
 * loops.  m goes through stop-gradient: each result is the same for every
 * m, so its gradient through m is zero, and the backward pass skips the
 * max's adjoint (a compare, a select and a count per element) that the
 * hand-written form differentiates; what is left is the cheap adjoint
 * (docs/grad.md, "Normalizations").  The gradient pass then drops the
 * stop-gradient, so the forward pass is the hand-written form's. */
static Term lower_softmax(Ix *ix, Expr *e, Term x, uint64_t over, const char *name) {
    Sema *s = ix->s;
    int dt = s->fn->insts[x.v].type.dtype;      /* a tensor: its index names appear in it */
    if (!dtype_is_float(dt))
        sema_error(s, e->loc, "%s needs a floating-point operand, not %s; cast with f32(...)", name, dtype_name[dt]);
    Term m = unary_term(ix, OP_STOP_GRADIENT, reduce_term(ix, x, over, RED_MAX, e->loc), e->loc);
    Term z = binary_term(ix, '-', x, m, e->loc);
    Term p = unary_term(ix, OP_EXP, z, e->loc);
    Term sum = reduce_term(ix, p, over, RED_SUM, e->loc);
    if (strcmp(name, "softmax") == 0)
        return binary_term(ix, '/', p, sum, e->loc);
    Term lse = unary_term(ix, OP_LOG, sum, e->loc);
    return strcmp(name, "log_softmax") == 0 ? binary_term(ix, '-', z, lse, e->loc) : binary_term(ix, '+', lse, m, e->loc);
}

static Term lower_call(Ix *ix, Expr *e) {
    Sema *s = ix->s;
    const Builtin *bi = e->sym < s->nsyms ? s->builtin[e->sym] : NULL;
    const char *name = sym(s, e->sym);
    if (e->binders.n) {
        int red = strcmp(name, "mean") == 0 ? RED_SUM : reducer_named(name);   /* mean: a sum, divided */
        int stable = is_normalization(name) || strcmp(name, "logsumexp") == 0;
        if (red < 0 && !stable)
            not_a_reduction(s, e);
        if (e->args.n != 1)
            sema_error(s, e->loc, "%s[...] takes one argument", name);
        Term t = lower(ix, e->args.items[0]);
        uint64_t binders = 0;
        int64_t count = 1;
        for (int i = 0; i < e->binders.n; i++) {
            int l = label_for(ix, e->binders.items[i], 0);
            if (!(binders & bit(l)))
                count *= ix->extent[l];
            binders |= bit(l);
        }
        if (stable)
            return lower_softmax(ix, e, t, binders, name);
        t = reduce_term(ix, t, binders, (Reducer)red, e->loc);
        if (strcmp(name, "mean") == 0) {
            if (!dtype_is_float(s->fn->insts[t.v].type.dtype))
                sema_error(s, e->loc, "mean needs a floating-point operand; cast with f32(...)");
            t = from_val(binary_op(s, '/', tensor(t.v), (Val){VAL_FLOAT, {0, 0, -1}, (double)count, -1}, e->loc), &t);
        }
        return t;
    }
    if (bi && bi->kind == BK_REDUCTION)
        sema_error(s, e->loc, "%s needs the index names it %s, as in y[i%s] = %s[j](x[i, j])", name,
                   is_normalization(name) ? "normalizes over" : "reduces", is_normalization(name) ? ", j" : "", name);
    if (!bi && !lookup(s, e->sym))   /* a misspelled builtin or a cast to no dtype, not a function */
        unknown_callee(s, e);
    if (!bi || (bi->kind != BK_UNARY && bi->kind != BK_BINARY && bi->kind != BK_CAST &&
                !(bi->kind == BK_SPECIAL && strcmp(name, "where") == 0)))
        sema_error(s, e->loc, "'%s' cannot be used in an index statement; compute it in a value statement first", name);
    if (e->args.n < bi->min_args || e->args.n > bi->max_args)
        sema_error(s, e->loc, "%s takes %s, not %d", name, count_of(s, bi->min_args, "argument"), e->args.n);
    Expr *x = e->args.items[0];
    if (bi->kind == BK_CAST && e->sum_here && x->kind == E_BINARY && x->op == '*' && dtype_is_float(bi->op)) {
        /* sum_d f32(a[., d] * b[d, .]): a dot of the cast operands, so the
         * product is never materialized; the sum stays in the wide dtype. */
        Term a = lower(ix, x->lhs), b = lower(ix, x->rhs);
        if (a.v >= 0 && b.v >= 0) {
            a = cast_term(ix, a, bi->op, e->loc);
            b = cast_term(ix, b, bi->op, e->loc);
            return lower_product(ix, e, a, b);
        }
    }
    Term t[3];
    for (int i = 0; i < e->args.n; i++)
        t[i] = lower(ix, e->args.items[i]);
    int is_where = bi->kind == BK_SPECIAL;
    align(ix, t, e->args.n, is_where, e->loc);
    switch (bi->kind) {
    case BK_UNARY: return from_val(unary_op(s, (Op)bi->op, bi->name, val_of(&t[0]), e->loc), &t[0]);
    case BK_BINARY: return from_val(elementwise2(s, (Op)bi->op, val_of(&t[0]), val_of(&t[1]), e->loc), &t[0]);
    case BK_CAST: return cast_term(ix, t[0], bi->op, e->loc);
    default:        /* where(c[i], 0, 1): numbers stay untyped; the labels are the condition's */
        return from_val(select_op(s, val_of(&t[0]), val_of(&t[1]), val_of(&t[2]), e->loc), t[1].v >= 0 ? &t[1] : &t[0]);
    }
}

static Term lower(Ix *ix, Expr *e) {
    Sema *s = ix->s;
    Term t;
    if (!e->has_index) {
        /* No index names below: an ordinary value, which must be a scalar. */
        Val v = eval(s, e);
        if (v.kind != VAL_TENSOR)
            return constant_term(v);
        const Shape *sh = &s->fn->insts[v.v].type;
        if (sh->rank && e->kind == E_NAME)
            sema_error(s, e->loc, "'%s' has %s; write it with %s", sym(s, e->sym), count_of(s, sh->rank, "dim"),
                       count_of(s, sh->rank, "subscript"));
        if (sh->rank)
            sema_error(s, e->loc, "this value is %s; in an index statement a value without index names must be a scalar",
                       shape_str(s, sh));
        return (Term){v.v, {0}, 0, {0}};
    }
    switch (e->kind) {
    case E_UNARY:
        t = lower(ix, e->lhs);
        t = from_val(t.v < 0                 ? eval(s, e)
                     : e->op == OPR_NOT ? not_op(s, tensor(t.v), e->loc)
                                        : unary_op(s, OP_NEGATE, "unary -", tensor(t.v), e->loc), &t);
        break;
    case E_BINARY: {
        Term a = lower(ix, e->lhs), b = lower(ix, e->rhs);
        if (e->op == '*' && a.v >= 0 && b.v >= 0)
            return lower_product(ix, e, a, b);
        Term both[2] = {a, b};
        align(ix, both, 2, 0, e->loc);
        t = from_val(binary_op(s, e->op, val_of(&both[0]), val_of(&both[1]), e->loc), &both[0]);
        break;
    }
    case E_INDEX: t = lower_access(ix, e); break;
    case E_CALL: t = lower_call(ix, e); break;
    default: sema_error(s, e->loc, "this expression is not allowed in an index statement");
    }
    return reduce_term(ix, t, e->sum_here, RED_SUM, e->loc);
}

static void constrain(Ix *ix, const Stmt *st, int *v, int first_new) {
    Sema *s = ix->s;
    int any = 0;
    for (int i = 0; i < st->nindices; i++)
        any |= st->indices[i].axes.kind != AXES_NONE;
    if (!any)
        return;
    Sharding sh = sharding_replicated();
    uint32_t used = 0;
    for (int i = 0; i < st->nindices; i++)
        resolve_axes(s, &st->indices[i].axes, i, &sh, &used);
    if (s->fn->spmd)
        sema_error(s, st->loc, "sharding constraints are not allowed inside an spmd fn: its body works on local blocks");
    if (*v < first_new)          /* the right side is an existing value: constrain a copy */
        *v = emit(s, OP_COPY, (int32_t[]){*v}, 1, NULL, 0, NULL, st->loc);
    check_placed_sharding(s, *v, &sh, st->loc);
    s->fn->insts[*v].sh = sh;
    s->fn->insts[*v].flags |= INST_CONSTRAINED;
}

/* Lower the right side, whose labels 0 .. nleft-1 are the left side's:
 * the value with those dims, in that order. */
static int lower_right(Ix *ix, const Stmt *st, int nleft) {
    Sema *s = ix->s;
    Expr *rhs = st->value;
    uint64_t occ = scan(ix, rhs);
    for (int l = 0; l < nleft; l++)
        if (!(occ & bit(l)))
            sema_error(s, ix->decl[l], "index '%s' on the left does not appear on the right", sym(s, ix->label_sym[l]));
    for (int l = 0; l < ix->nlabels; l++)
        if ((occ & bit(l)) && (ix->bound & bit(l)))
            sema_error(s, st->value->loc, "index '%s' is bound by a reduction and cannot also appear outside it", sym(s, ix->label_sym[l]));
    for (int l = 0; l < ix->nlabels; l++)
        if ((occ & ~ix->lhs) & bit(l))
            place_sum(ix, rhs, l);
    Term t = lower(ix, rhs);
    if (t.v < 0)
        sema_error(s, rhs->loc, "an index statement needs a tensor on the right");
    int identity = 1;
    int64_t perm[MAX_RANK];
    for (int i = 0; i < t.n; i++) {
        perm[t.label[i]] = i;
        identity &= t.label[i] == i;
    }
    return identity ? t.v : emit(s, OP_TRANSPOSE, (int32_t[]){t.v}, 1, perm, t.n, NULL, st->loc);
}

/* A left-side index name: fresh, and once on the left. */
static int left_label(Ix *ix, const AstIndex *in) {
    Sema *s = ix->s;
    Binding *b = lookup(s, in->sym);
    Expr name = {.kind = E_NAME, .sym = in->sym, .loc = in->loc};
    if (b && b->kind == B_VALUE)
        sema_error(s, in->loc, "'%s' is already bound to a value; index names must be fresh names", sym(s, in->sym));
    if (ix->label_of[in->sym])
        sema_error(s, in->loc, "index '%s' appears twice on the left", sym(s, in->sym));
    int l = label_for(ix, &name, 1);
    ix->lhs |= bit(l);
    return l;
}

static void forget_labels(Ix *ix) {
    for (int l = 0; l < ix->nlabels; l++)
        ix->label_of[ix->label_sym[l]] = 0;
}

/* The index tensor of left subscript `in` of a scatter, whose subscripts
 * name the scatter's index dims: the first one creates their labels, the
 * others must repeat them. */
static int scatter_indices(Ix *ix, const AstIndex *in, const Expr *first) {
    Sema *s = ix->s;
    const Expr *g = in->gather;
    int t = tensor_named(ix, g->lhs);
    const Shape *shape = &s->fn->insts[t].type;
    if (shape->dtype != DT_I32 && shape->dtype != DT_I64)
        sema_error(s, g->loc, "a scatter's index tensor must be i32 or i64, not %s", dtype_name[shape->dtype]);
    if (g->args.n != shape->rank)
        sema_error(s, g->loc, "'%s' has %s but %s", sym(s, g->lhs->sym), count_of(s, shape->rank, "dim"),
                   count_of(s, g->args.n, "subscript"));
    for (int d = 0; d < g->args.n; d++) {
        Expr *sub = g->args.items[d];
        if (sub->kind == E_INDEX)
            sema_error(s, sub->loc, "gathers and scatters do not nest");
        if (!is_label_name(ix, sub))
            sema_error(s, sub->loc, "the subscripts of a scatter's index tensor must be index names");
        const Expr *same = first ? first->args.items[d] : NULL;
        if (first && (first->args.n != g->args.n || same->sym != sub->sym))
            sema_error(s, sub->loc, "every index tensor on the left takes the same index names in the same order ('%s' at %d:%d)",
                       sym(s, same->sym), same->loc.line, same->loc.col);
        if (!first && ix->label_of[sub->sym])
            sema_error(s, sub->loc, "index '%s' appears twice in one subscript list (diagonals are not supported)", sym(s, sub->sym));
        int l = label_for(ix, sub, 1);
        ix->lhs |= bit(l);
        use_extent(ix, l, shape->dims[d], sub->loc);
    }
    return index_as_i32(s, t, g->loc);
}

/* Which dim of index tensor `first` index name sym names, or -1. */
static int64_t index_tensor_dim(const Expr *first, int sym) {
    for (int64_t d = 0; d < first->args.n; d++)
        if (((const Expr *)first->args.items[d])->sym == sym)
            return d;
    return -1;
}

/* A batch dim of a scatter, `g[b, label[b]] += d[b]`: plain left subscript
 * `in` also names dim d of the index tensors (the first is `first`), so
 * dim `b` of g is scattered into at position b itself: an iota along that
 * dim, of the index tensors' shape, is its index tensor.  The transpose of
 * a batched gather, and the scatter's partitioning and gradient are the
 * plain ones. */
static int scatter_batch_indices(Ix *ix, const AstIndex *in, const Expr *first, int64_t d, int64_t extent) {
    Sema *s = ix->s;
    use_extent(ix, ix->label_of[in->sym] - 1, extent, in->loc);
    int t = tensor_named(ix, first->lhs);
    Shape shape = s->fn->insts[t].type;
    shape.dtype = DT_I32;   /* the index tensors may be i64; the IR's are i32 */
    return emit(s, OP_IOTA, NULL, 0, &d, 1, &shape, in->loc);
}

/* `t[subs] += e`: t + e, or with index tensors among the subscripts a
 * scatter-add of e into t.  Its updates have the index tensors' dims, then
 * t's other dims (the IR's order), so the right side is lowered with the
 * index names as its first labels. */
static void lower_add_stmt(Ix *ix, const Stmt *st) {
    Sema *s = ix->s;
    Binding *b = lookup(s, st->sym);
    if (!b || b->kind != B_VALUE || b->val.kind != VAL_TENSOR)
        sema_error(s, st->loc, "'+=' needs '%s' to be a tensor bound before%s", sym(s, st->sym),
                   b ? "" : did_you_mean(s, st->sym, NEAR_VALUES));
    int acc = b->val.v, n = 0;
    Shape shape = s->fn->insts[acc].type;
    if (st->nindices != shape.rank)
        sema_error(s, st->loc, "'%s' has %s but %s", sym(s, st->sym), count_of(s, shape.rank, "dim"),
                   count_of(s, st->nindices, "subscript"));
    if (!dtype_is_num(shape.dtype))
        sema_error(s, st->loc, "'+=' adds numbers, and '%s' is %s", sym(s, st->sym), dtype_name[shape.dtype]);
    int32_t args[MAX_RANK + 2] = {acc};
    int64_t dims[MAX_RANK];
    const Expr *first = NULL;
    uint64_t batched = 0;
    for (int i = 0; i < st->nindices; i++) {
        const AstIndex *in = &st->indices[i];
        if (in->axes.kind != AXES_NONE)
            sema_error(s, in->axes.loc, "the left side of '+=' takes no sharding; constrain the result in a statement of its own");
        if (!in->gather)
            continue;
        args[1 + n] = scatter_indices(ix, in, first);
        dims[n++] = i;
        first = first ? first : in->gather;
    }
    for (int i = 0; i < st->nindices; i++) {
        const AstIndex *in = &st->indices[i];
        if (in->gather)
            continue;
        int64_t batch = n && ix->label_of[in->sym] ? index_tensor_dim(first, in->sym) : -1;
        if (batch >= 0) {
            uint64_t l = bit(ix->label_of[in->sym] - 1);
            if (batched & l)
                sema_error(s, in->loc, "index '%s' appears twice on the left", sym(s, in->sym));
            batched |= l;
            args[1 + n] = scatter_batch_indices(ix, in, first, batch, shape.dims[i]);
            dims[n++] = i;
            continue;
        }
        use_extent(ix, left_label(ix, in), shape.dims[i], in->loc);
    }
    int v = lower_right(ix, st, ix->nlabels);
    int dt = s->fn->insts[v].type.dtype;
    if (dt != shape.dtype)
        sema_error(s, st->value->loc, "the right side is %s but '%s' is %s; cast it with %s(...)", dtype_name[dt],
                   sym(s, st->sym), dtype_name[shape.dtype], dtype_name[shape.dtype]);
    if (n) {
        args[n + 1] = v;
        v = emit(s, OP_SCATTER, args, n + 2, dims, n, NULL, st->loc);
    } else
        v = binary_op(s, '+', tensor(acc), tensor(v), st->loc).v;
    s->fn->insts[v].sym = st->sym;
    forget_labels(ix);
    bind_local(s, st->sym, tensor(v), st->loc);
}

/* ---- slot writes: `ys[t] = h` ---- */

/* Is left subscript `in` an integer: a name bound to an integer (a loop's
 * index) or to an i32[] or i64[] scalar?  Then the statement writes a slot of an
 * existing tensor instead of defining one. */
static int slot_index(Sema *s, const AstIndex *in) {
    const Binding *b = lookup(s, in->sym);
    if (!b || b->kind != B_VALUE || in->gather)
        return 0;
    if (b->val.kind == VAL_INT)
        return 1;
    const Shape *t = b->val.kind == VAL_TENSOR ? &s->fn->insts[b->val.v].type : NULL;
    return t && t->rank == 0 && (t->dtype == DT_I32 || t->dtype == DT_I64);
}

/* `ys[t] = h` (or ys[a, b] = ..., cache[l, :, pos] = ...): ys with h
 * written at index t of its leading dim, a new value of ys (JAX's
 * ys.at[t].set(h), a dynamic-update-slice); a `:` keeps a dim whole, and
 * dims past the subscripts are whole too.  The index clamps into the dim
 * as a dynamic slice's does.  In a loop, ys is carried: a scan's stacked
 * outputs. */
static void lower_slot_write(Sema *s, const Stmt *st) {
    const Binding *b = lookup(s, st->sym);
    const AstIndex *first = &st->indices[0];
    if (!b || b->kind != B_VALUE || b->val.kind != VAL_TENSOR)
        sema_error(s, st->loc, "'%s[%s] = ...' writes a slot of an existing tensor, but '%s' is not one; bind it "
                   "first, e.g. %s = zeros(f32[...])%s", sym(s, st->sym), first->whole ? ":" : sym(s, first->sym),
                   sym(s, st->sym), sym(s, st->sym), b ? "" : did_you_mean(s, st->sym, NEAR_VALUES));
    int x = b->val.v;
    Shape xs = s->fn->insts[x].type;
    int k = st->nindices, nint = 0;
    if (k > xs.rank)
        sema_error(s, st->loc, "'%s' has %d dims; %d subscripts write no slot of it", sym(s, st->sym), xs.rank, k);
    int32_t args[2 + MAX_RANK];
    Shape slot = {xs.dtype, 0, {0}}, window = xs;
    for (int d = 0; d < xs.rank; d++) {
        const AstIndex *in = d < k ? &st->indices[d] : NULL;
        if (!in || in->whole) {
            slot.dims[slot.rank++] = xs.dims[d];
            args[2 + d] = -1;            /* offset 0, emitted after the update */
            continue;
        }
        if (!slot_index(s, in) || in->axes.kind != AXES_NONE)
            sema_error(s, in->loc, "a slot write's subscripts are integers (a loop index, an i32[] or i64[] scalar) or ':': '%s' "
                       "is not one", sym(s, in->sym));
        const Val *v = &lookup(s, in->sym)->val;
        args[2 + d] = v->kind == VAL_INT ? materialize_int(s, v->i, in->loc) : index_as_i32(s, v->v, in->loc);
        window.dims[d] = 1;
        nint++;
    }
    if (!nint)
        sema_error(s, st->loc, "a slot write needs an integer subscript (cache[l, :, pos] = k); '%s[:] = ...' writes no slot",
                   sym(s, st->sym));
    Val val = eval(s, st->value);
    int u = val.kind == VAL_TENSOR ? val.v : to_tensor(s, val, xs.dtype, st->value->loc);
    const Shape *us = &s->fn->insts[u].type;
    if (us->rank == 0 && slot.rank)
        u = emit(s, OP_BROADCAST, (int32_t[]){u}, 1, NULL, 0, &slot, st->value->loc);
    if (!shape_eq(&s->fn->insts[u].type, &slot))
        sema_error(s, st->value->loc, "the value written into '%s[...]' is %s, and a slot of '%s' is %s",
                   sym(s, st->sym), shape_str(s, &s->fn->insts[u].type), sym(s, st->sym), shape_str(s, &slot));
    args[0] = x;
    args[1] = emit(s, OP_RESHAPE, (int32_t[]){u}, 1, NULL, 0, &window, st->loc);
    for (int d = 0; d < xs.rank; d++)
        if (args[2 + d] < 0)
            args[2 + d] = materialize_int(s, (IntVal){0, 0, -1}, st->loc);
    int v = emit(s, OP_DYNAMIC_UPDATE_SLICE, args, 2 + xs.rank, NULL, 0, NULL, st->loc);
    s->fn->insts[v].sym = st->sym;
    bind_local(s, st->sym, tensor(v), st->loc);
}

/* `:` on the left belongs to slot writes only. */
static void no_whole_dims(Sema *s, const Stmt *st) {
    for (int i = 0; i < st->nindices; i++)
        if (st->indices[i].whole)
            sema_error(s, st->indices[i].loc, "':' on the left is for slot writes, whose other subscripts are bound "
                       "integers (cache[l, :, pos] = k)%s", st->add ? "; '+=' takes index names" : "");
}

void lower_index_stmt(Sema *s, const Stmt *st) {
    Ix ix = {s, .label_of = s->label_of};
    if (!st->add && st->nindices && (slot_index(s, &st->indices[0]) || st->indices[0].whole)) {
        lower_slot_write(s, st);
        return;
    }
    no_whole_dims(s, st);
    if (st->add) {
        lower_add_stmt(&ix, st);
        return;
    }
    for (int i = 0; i < st->nindices; i++) {
        if (st->indices[i].gather)
            sema_error(s, st->indices[i].loc, "an index tensor on the left needs '+=' (a scatter-add)");
        left_label(&ix, &st->indices[i]);
    }
    if (st->nindices > MAX_RANK)
        sema_error(s, st->loc, "a tensor has at most %d dims", MAX_RANK);
    int first_new = s->fn->ninsts;
    int v = lower_right(&ix, st, st->nindices);
    constrain(&ix, st, &v, first_new);
    if (v >= first_new)
        s->fn->insts[v].sym = st->sym;
    forget_labels(&ix);
    bind_local(s, st->sym, tensor(v), st->loc);
}
