/* Builtin functions, collectives and calls of user functions, in value
 * context.  Reductions with index binders (sum[k](e)) live in index.c. */
#include "sema.h"

#include <string.h>

enum {
    SP_WHERE, SP_ZEROS, SP_FULL, SP_IOTA, SP_RESHAPE, SP_CONCAT, SP_ROLL, SP_CUMSUM, SP_SIZE, SP_AXIS_INDEX,
    SP_ARGMAX, SP_ARGMIN, SP_TOP_K, SP_SORT, SP_ARGSORT,
};
enum { CO_PSUM, CO_PMEAN, CO_PMAX, CO_PMIN, CO_ALL_GATHER, CO_PSUM_SCATTER, CO_ALL_TO_ALL, CO_PPERMUTE };

/* The elementwise ops named by a builtin (lib/shardc_elementwise.def's
 * builtin column; operators have none, and are skipped), then the rest. */
static const Builtin builtins[] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) {builtin, BK_UNARY, OP_##ID, 1, 1},
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) {builtin, BK_BINARY, OP_##ID, 2, 2},
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
    {"f32", BK_CAST, DT_F32, 1, 1},        {"f64", BK_CAST, DT_F64, 1, 1},
    {"bf16", BK_CAST, DT_BF16, 1, 1},      {"f16", BK_CAST, DT_F16, 1, 1},
    {"i32", BK_CAST, DT_I32, 1, 1},        {"u32", BK_CAST, DT_U32, 1, 1},
    {"i64", BK_CAST, DT_I64, 1, 1},        {"u8", BK_CAST, DT_U8, 1, 1},
    {"sum", BK_REDUCTION, RED_SUM, 1, 1},  {"mean", BK_REDUCTION, RED_SUM, 1, 1},
    {"logsumexp", BK_REDUCTION, RED_SUM, 1, 1},
    {"softmax", BK_REDUCTION, RED_SUM, 1, 1}, {"log_softmax", BK_REDUCTION, RED_SUM, 1, 1},
    {"where", BK_SPECIAL, SP_WHERE, 3, 3}, {"zeros", BK_SPECIAL, SP_ZEROS, 1, 1},
    {"full", BK_SPECIAL, SP_FULL, 2, 2},   {"iota", BK_SPECIAL, SP_IOTA, 2, 2},
    {"reshape", BK_SPECIAL, SP_RESHAPE, 2, 2}, {"concat", BK_SPECIAL, SP_CONCAT, 2, 2},
    {"roll", BK_SPECIAL, SP_ROLL, 3, 3},   {"cumsum", BK_SPECIAL, SP_CUMSUM, 2, 2},
    {"size", BK_SPECIAL, SP_SIZE, 1, 1},
    {"axis_index", BK_SPECIAL, SP_AXIS_INDEX, 1, 1},
    {"argmax", BK_SPECIAL, SP_ARGMAX, 1, 1}, {"argmin", BK_SPECIAL, SP_ARGMIN, 1, 1},
    {"top_k", BK_SPECIAL, SP_TOP_K, 2, 2},
    {"sort", BK_SPECIAL, SP_SORT, 1, 2},   {"argsort", BK_SPECIAL, SP_ARGSORT, 1, 2},
    {"psum", BK_COLLECTIVE, CO_PSUM, 2, 2}, {"pmean", BK_COLLECTIVE, CO_PMEAN, 2, 2},
    {"pmax", BK_COLLECTIVE, CO_PMAX, 2, 2}, {"pmin", BK_COLLECTIVE, CO_PMIN, 2, 2},
    {"all_gather", BK_COLLECTIVE, CO_ALL_GATHER, 3, 3},
    {"psum_scatter", BK_COLLECTIVE, CO_PSUM_SCATTER, 3, 3},
    {"all_to_all", BK_COLLECTIVE, CO_ALL_TO_ALL, 4, 4},
    {"ppermute", BK_COLLECTIVE, CO_PPERMUTE, 3, 3},
    {"key", BK_RANDOM, RB_KEY, 1, 1},      {"split_key", BK_RANDOM, RB_SPLIT, 1, 2},
    {"fold_in", BK_RANDOM, RB_FOLD_IN, 2, 2},
    {"random_bits", BK_RANDOM, RB_BITS, 2, 2}, {"uniform", BK_RANDOM, RB_UNIFORM, 2, 4},
    {"normal", BK_RANDOM, RB_NORMAL, 2, 2}, {"truncated_normal", BK_RANDOM, RB_TRUNCATED_NORMAL, 4, 4},
    {"bernoulli", BK_RANDOM, RB_BERNOULLI, 3, 3}, {"randint", BK_RANDOM, RB_RANDINT, 4, 4},
};

void builtins_init(Sema *s) {
    enum { N = sizeof builtins / sizeof builtins[0] };
    int ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = builtins[i].name ? sym_intern(s->syms, builtins[i].name, strlen(builtins[i].name)) : -1;
    s->nsyms = s->syms->n;
    s->builtin = arena_alloc(s->arena, sizeof(Builtin *) * (size_t)s->nsyms);
    for (int i = 0; i < N; i++)
        if (ids[i] >= 0)
            s->builtin[ids[i]] = &builtins[i];
}

/* The builtins that take index names, sum[k](...): reductions, and the
 * normalizations softmax and log_softmax, whose result keeps the dims they
 * normalize over (index.c lowers them all). */
static const char *const reductions[] = {"sum", "max", "min", "mean", "logsumexp", "softmax", "log_softmax"};

int is_reduction_name(const char *name) {
    for (size_t i = 0; i < sizeof reductions / sizeof reductions[0]; i++)
        if (strcmp(name, reductions[i]) == 0)
            return 1;
    return 0;
}

int is_normalization(const char *name) { return strcmp(name, "softmax") == 0 || strcmp(name, "log_softmax") == 0; }

_Noreturn void not_a_reduction(Sema *s, const Expr *e) {
    Suggest sg = suggest_begin(sym(s, e->sym));
    for (size_t i = 0; i < sizeof reductions / sizeof reductions[0]; i++)
        near_add(&sg, reductions[i]);
    sema_error(s, e->loc, "'%s' is not a reduction; use sum, max, min, mean, logsumexp, softmax or log_softmax%s",
               sym(s, e->sym), near_text(s, &sg));
}

static const Expr *arg(const Expr *e, int i) { return e->args.items[i]; }

static int tensor_arg(Sema *s, const Expr *e, int i, const char *what) {
    return expect_tensor(s, arg(e, i), what);
}

static const Shape *shape_of(Sema *s, int v) { return &s->fn->insts[v].type; }

/* A dim argument, negative ones counting from the end; the message names
 * the dim as written. */
static int64_t dim_arg(Sema *s, const Expr *e, int rank) {
    int64_t written = eval_const_int(s, e, "a dim"), d = written < 0 ? written + rank : written;
    if (d < 0 || d >= rank)
        sema_error(s, e->loc, "dim %lld is out of range for a tensor with %s", (long long)written,
                   count_of(s, rank, "dim"));
    return d;
}

static void require_spmd(Sema *s, const Expr *e) {
    if (!s->fn->spmd)
        sema_error(s, e->loc, "%s is only allowed in an spmd fn", sym(s, e->sym));
}

int type_arg(Sema *s, const Expr *e, int i, const char *where, Shape *shape, Sharding *sh) {
    const Expr *t = arg(e, i);
    if (t->kind == E_INDEX && t->lhs->kind == E_NAME && !lookup(s, t->lhs->sym)) {   /* zeros(i64[4]) */
        char hint[200];
        const char *word = sym(s, t->lhs->sym);
        sema_error(s, t->lhs->loc, "unknown dtype '%s'%s", word, dtype_hint(word, hint, sizeof hint));
    }
    if (t->kind != E_TYPE)
        sema_error(s, t->loc, "%s needs a tensor type such as f32[8, 16] as its %s argument", sym(s, e->sym), where);
    resolve_type(s, t->type, shape, sh);
    int constrained = sh->open != 0;
    for (int a = 0; a < s->m->naxes; a++)
        constrained |= sh->dim[a] != SH_REPLICATED;
    if (constrained && s->fn->spmd)
        sema_error(s, t->loc, "shardings are not allowed inside an spmd fn: its body works on local blocks");
    return constrained;
}

/* zeros(T), full(T, v), iota(T, dim): a sharding written in T constrains
 * the new value, as a constrained index statement would. */
static Val creation(Sema *s, const Expr *e, int which) {
    const Expr *t = arg(e, 0);
    Shape shape;
    Sharding sh;
    int constrained = type_arg(s, e, 0, "first", &shape, &sh);
    int v;
    if (which == SP_IOTA) {
        if (shape.dtype == DT_BOOL)
            sema_error(s, t->loc, "iota needs a numeric dtype");
        int64_t d = dim_arg(s, arg(e, 1), shape.rank);
        v = emit(s, OP_IOTA, NULL, 0, &d, 1, &shape, e->loc);
    } else {
        Val fill = which == SP_FULL ? eval(s, arg(e, 1)) : int_val(0);
        if (which == SP_FULL && fill.kind == VAL_TENSOR &&
            (shape_of(s, fill.v)->rank != 0 || shape_of(s, fill.v)->dtype != shape.dtype))
            sema_error(s, arg(e, 1)->loc, "full's value must be a scalar of dtype %s", dtype_name[shape.dtype]);
        if (shape.dtype == DT_BOOL && fill.kind != VAL_TENSOR) {
            Shape b = {DT_BOOL, 0, {0}};
            v = emit(s, OP_CONSTANT, NULL, 0, NULL, 0, &b, e->loc);
            s->fn->insts[v].value = fill.kind == VAL_INT ? fill.i.konst != 0 : fill.f != 0;
        } else
            v = to_tensor(s, fill, shape.dtype, arg(e, which == SP_FULL ? 1 : 0)->loc);
        if (shape.rank > 0)
            v = broadcast_to(s, v, &shape, NULL, e->loc);
    }
    if (constrained) {
        check_placed_sharding(s, v, &sh, e->loc);
        s->fn->insts[v].sh = sh;
        s->fn->insts[v].flags |= INST_CONSTRAINED;
    }
    return tensor(v);
}

static Val reshape(Sema *s, const Expr *e) {
    int x = tensor_arg(s, e, 0, "reshape's operand");
    const Expr *dims = arg(e, 1);
    if (dims->kind != E_LIST)
        sema_error(s, dims->loc, "reshape needs a list of dims such as [4, 8]");
    if (dims->args.n > MAX_RANK)
        sema_error(s, dims->loc, "a tensor has at most %d dims", MAX_RANK);
    Shape out = {shape_of(s, x)->dtype, (uint8_t)dims->args.n, {0}};
    int infer = -1;
    int64_t known = 1, elems = shape_elems(shape_of(s, x));
    for (int d = 0; d < dims->args.n; d++) {
        const Expr *de = dims->args.items[d];
        int64_t n = eval_const_int(s, de, "a dim");
        if (n == -1 && infer < 0) {
            infer = d;
            continue;
        }
        if (n < 1)
            sema_error(s, de->loc, "dimension must be at least 1, not %lld", (long long)n);
        if (__builtin_mul_overflow(known, n, &known))
            sema_error(s, de->loc, "reshape has too many elements");
        out.dims[d] = n;
    }
    if (infer >= 0) {
        if (elems % known)
            sema_error(s, dims->loc, "cannot infer the -1 dim: %lld elements do not divide by %lld", (long long)elems, (long long)known);
        out.dims[infer] = elems / known;
        known = elems;
    }
    if (known != elems)
        sema_error(s, dims->loc, "reshape from %s to %s changes the number of elements",
                   shape_str(s, shape_of(s, x)), shape_str(s, &out));
    return tensor(emit(s, OP_RESHAPE, (int32_t[]){x}, 1, NULL, 0, &out, e->loc));
}

static Val concat(Sema *s, const Expr *e) {
    const Expr *list = arg(e, 0);
    if (list->kind != E_LIST || list->args.n < 1)
        sema_error(s, list->loc, "concat needs a list of tensors such as [a, b]");
    if (list->args.n > MAX_RULE_TENSORS - 1)
        sema_error(s, list->loc, "concat takes at most %d tensors", MAX_RULE_TENSORS - 1);
    int32_t parts[MAX_RULE_TENSORS];
    for (int i = 0; i < list->args.n; i++)
        parts[i] = expect_tensor(s, list->args.items[i], "a concat operand");
    const Shape *first = shape_of(s, parts[0]);
    int64_t d = dim_arg(s, arg(e, 1), first->rank);
    for (int i = 0; i < list->args.n; i++) {
        Shape y = *shape_of(s, parts[i]);
        y.dims[d] = first->dims[d];
        if (!shape_eq(&y, first))
            sema_error(s, ((const Expr *)list->args.items[i])->loc,
                       "concat operands must agree off dim %lld: %s and %s", (long long)d,
                       shape_str(s, first), shape_str(s, shape_of(s, parts[i])));
    }
    return tensor(emit(s, OP_CONCAT, parts, list->args.n, &d, 1, NULL, e->loc));
}

static Val roll(Sema *s, const Expr *e) {
    int x = tensor_arg(s, e, 0, "roll's operand");
    int64_t shift = eval_const_int(s, arg(e, 1), "the shift");
    int64_t d = dim_arg(s, arg(e, 2), shape_of(s, x)->rank);
    int64_t n = shape_of(s, x)->dims[d];
    int64_t attrs[2] = {((shift % n) + n) % n, d};
    return tensor(emit(s, OP_ROLL, (int32_t[]){x}, 1, attrs, 2, NULL, e->loc));
}

/* cumsum(x, dim): the inclusive prefix sum along dim (numeric dtypes). */
static Val cumsum(Sema *s, const Expr *e) {
    int x = tensor_arg(s, e, 0, "cumsum's operand");
    if (!dtype_is_arith(shape_of(s, x)->dtype))
        sema_error(s, arg(e, 0)->loc, "cumsum needs a numeric operand, not %s; cast it with i32(...) or f32(...)",
                   dtype_name[shape_of(s, x)->dtype]);
    int64_t d = dim_arg(s, arg(e, 1), shape_of(s, x)->rank);
    return tensor(emit(s, OP_CUMSUM, (int32_t[]){x}, 1, &d, 1, NULL, e->loc));
}

/* The one IR op behind argmax, argmin and top_k: the i32 indices of the k
 * best elements along x's last dim (docs/ir.md, top-k). */
static int top_k_indices(Sema *s, const Expr *e, int x, int64_t k, int largest) {
    const Shape *xs = shape_of(s, x);
    if (!dtype_is_num(xs->dtype))
        sema_error(s, arg(e, 0)->loc, "%s needs a numeric operand, not %s", sym(s, e->sym), dtype_name[xs->dtype]);
    if (xs->rank == 0)
        sema_error(s, arg(e, 0)->loc, "%s selects along the last dim, so it needs an operand with a dim, not a scalar",
                   sym(s, e->sym));
    int64_t n = xs->dims[xs->rank - 1];
    if (k < 1 || k > n)
        sema_error(s, arg(e, 1)->loc, "top_k's k is %lld, outside 1 .. %lld (the operand's last dim)", (long long)k,
                   (long long)n);
    int64_t attrs[2] = {k, largest};
    return emit(s, OP_TOP_K, (int32_t[]){x}, 1, attrs, 2, NULL, e->loc);
}

/* argmax(x), argmin(x): top-k with k = 1, reshaped to drop the last dim. */
static Val arg_best(Sema *s, const Expr *e, int largest) {
    int i = top_k_indices(s, e, tensor_arg(s, e, 0, "the operand"), 1, largest);
    Shape out = *shape_of(s, i);
    out.rank--;
    return tensor(emit(s, OP_RESHAPE, (int32_t[]){i}, 1, NULL, 0, &out, e->loc));
}

/* v, i = top_k(x, k): the indices, then the values gathered through them
 * with every leading dim a batch dim (take_along_axis). */
static Val top_k(Sema *s, const Expr *e, Val *results) {
    int x = tensor_arg(s, e, 0, "the operand");
    int i = top_k_indices(s, e, x, eval_const_int(s, arg(e, 1), "k"), 1);
    int rank = shape_of(s, x)->rank;
    int64_t attrs[2 + 2 * MAX_RANK] = {rank - 1, GATHER_CLAMP};
    for (int d = 0; d < rank - 1; d++)
        attrs[2 + 2 * d] = attrs[3 + 2 * d] = d;
    results[0] = tensor(emit(s, OP_GATHER, (int32_t[]){x, i}, 2, attrs, 2 * rank, NULL, e->loc));
    results[1] = tensor(i);
    return results[0];
}

/* sort(x, dim) and argsort(x, dim): numpy's ascending order along dim
 * (stable, NaN last; dim defaults to the last): a top-k of the whole dim in
 * TOP_K_ASCENDING order, with dim moved last and back.  sort's values are
 * the batched gather of x through those indices, as top_k's, so its
 * gradient is the gather's: the cotangent scattered back by the
 * permutation. */
static Val sort_along(Sema *s, const Expr *e, int values) {
    int x = tensor_arg(s, e, 0, "the operand");
    const Shape *xs = shape_of(s, x);
    if (xs->dtype == DT_BOOL)
        sema_error(s, arg(e, 0)->loc, "%s needs a numeric operand, not bool", sym(s, e->sym));
    if (xs->rank == 0)
        sema_error(s, arg(e, 0)->loc, "%s sorts along a dim, so it needs an operand with a dim, not a scalar",
                   sym(s, e->sym));
    int rank = xs->rank;
    int64_t d = e->args.n > 1 ? dim_arg(s, arg(e, 1), rank) : rank - 1, n = xs->dims[d];
    int64_t perm[MAX_RANK], back[MAX_RANK];     /* the operand dim of each result dim */
    for (int i = 0, j = 0; i < rank; i++)
        if (i != d)
            perm[j++] = i;
    perm[rank - 1] = d;
    for (int i = 0; i < rank; i++)
        back[perm[i]] = i;
    int last = d == rank - 1 ? x : emit(s, OP_TRANSPOSE, (int32_t[]){x}, 1, perm, rank, NULL, e->loc);
    int r = emit(s, OP_TOP_K, (int32_t[]){last}, 1, (int64_t[]){n, TOP_K_ASCENDING}, 2, NULL, e->loc);
    if (values) {
        int64_t attrs[2 + 2 * MAX_RANK] = {rank - 1, GATHER_CLAMP};
        for (int i = 0; i < rank - 1; i++)
            attrs[2 + 2 * i] = attrs[3 + 2 * i] = i;
        r = emit(s, OP_GATHER, (int32_t[]){last, r}, 2, attrs, 2 * rank, NULL, e->loc);
    }
    return tensor(d == rank - 1 ? r : emit(s, OP_TRANSPOSE, (int32_t[]){r}, 1, back, rank, NULL, e->loc));
}

static Val special(Sema *s, const Expr *e, int which) {
    int64_t axes[MAX_AXES];
    int n;
    switch (which) {
    case SP_WHERE: {
        /* Arguments in order: C leaves the order of evaluation in a call open. */
        Val c = eval(s, arg(e, 0)), a = eval(s, arg(e, 1)), b = eval(s, arg(e, 2));
        return select_op(s, c, a, b, e->loc);
    }
    case SP_ZEROS: case SP_FULL: case SP_IOTA:
        return creation(s, e, which);
    case SP_RESHAPE: return reshape(s, e);
    case SP_CONCAT: return concat(s, e);
    case SP_ROLL: return roll(s, e);
    case SP_CUMSUM: return cumsum(s, e);
    case SP_SIZE:
        return int_val(axes_size(s->m, axes_arg(s, arg(e, 0), axes, &n)));
    case SP_ARGMAX: case SP_ARGMIN: return arg_best(s, e, which == SP_ARGMAX);
    case SP_SORT: case SP_ARGSORT: return sort_along(s, e, which == SP_SORT);
    case SP_AXIS_INDEX: {
        require_spmd(s, e);
        axes_arg(s, arg(e, 0), axes, &n);
        return (Val){VAL_INT, {0, 1, emit(s, OP_AXIS_INDEX, NULL, 0, axes, n, NULL, e->loc)}, 0, -1};
    }
    }
    sema_error(s, e->loc, "unknown builtin");
}

static void permute_pairs(Sema *s, const Expr *how, int64_t group, int64_t *pairs, int *npairs) {
    uint8_t *src_used = arena_alloc(s->arena, (size_t)group), *dst_used = arena_alloc(s->arena, (size_t)group);
    *npairs = 0;
    if (how->kind != E_LIST) {
        int64_t shift = eval_const_int(s, how, "the ppermute shift");
        for (int64_t j = 0; j < group; j++) {
            pairs[(*npairs)++] = j;
            pairs[(*npairs)++] = (((j + shift) % group) + group) % group;
        }
        return;
    }
    for (int i = 0; i < how->args.n; i++) {
        const Expr *p = how->args.items[i];
        if (p->kind != E_TUPLE || p->args.n != 2)
            sema_error(s, p->loc, "ppermute pairs are (source, target) tuples");
        int64_t src = eval_const_int(s, p->args.items[0], "a ppermute source");
        int64_t dst = eval_const_int(s, p->args.items[1], "a ppermute target");
        if (src < 0 || src >= group || dst < 0 || dst >= group)
            sema_error(s, p->loc, "ppermute pair (%lld, %lld) is outside 0..%lld", (long long)src, (long long)dst, (long long)group - 1);
        if (src_used[src]++)
            sema_error(s, p->loc, "device %lld sends twice in this ppermute", (long long)src);
        if (dst_used[dst]++)
            sema_error(s, p->loc, "device %lld receives twice in this ppermute", (long long)dst);
        pairs[(*npairs)++] = src;
        pairs[(*npairs)++] = dst;
    }
}

static Val collective(Sema *s, const Expr *e, int which) {
    require_spmd(s, e);
    Val operand = eval(s, arg(e, 0));     /* psum(1, Y) is the size of Y, as in JAX */
    int x = to_tensor(s, operand, operand.kind == VAL_FLOAT ? DT_F32 : DT_I32, arg(e, 0)->loc);
    int64_t attrs[MAX_AXES + 3];
    int n, fixed = which <= CO_PMIN ? 1 : which == CO_ALL_GATHER ? 1 : 2;
    int64_t axes[MAX_AXES];
    uint32_t mask = axes_arg(s, arg(e, 1), axes, &n);
    int64_t group = axes_size(s->m, mask);
    const Shape *xs = shape_of(s, x);
    if (!dtype_is_num(xs->dtype))
        sema_error(s, e->loc, "collectives need numeric values, not %s", dtype_name[xs->dtype]);
    Op op;
    switch (which) {
    case CO_PSUM: case CO_PMEAN: case CO_PMAX: case CO_PMIN:
        op = OP_ALL_REDUCE;
        attrs[0] = which == CO_PMAX ? RED_MAX : which == CO_PMIN ? RED_MIN : RED_SUM;
        if (which == CO_PMEAN && !dtype_is_float(xs->dtype))
            sema_error(s, e->loc, "pmean needs a floating-point operand; cast with f32(...)");
        break;
    case CO_ALL_GATHER:
        op = OP_ALL_GATHER;
        attrs[0] = dim_arg(s, arg(e, 2), xs->rank);
        break;
    case CO_PSUM_SCATTER:
        op = OP_REDUCE_SCATTER;
        attrs[0] = RED_SUM;
        attrs[1] = dim_arg(s, arg(e, 2), xs->rank);
        if (xs->dims[attrs[1]] % group)
            sema_error(s, arg(e, 2)->loc, "psum_scatter splits dim %lld of size %lld into %lld blocks, which does not divide",
                       (long long)attrs[1], (long long)xs->dims[attrs[1]], (long long)group);
        break;
    case CO_ALL_TO_ALL:
        op = OP_ALL_TO_ALL;
        attrs[0] = dim_arg(s, arg(e, 2), xs->rank);
        attrs[1] = dim_arg(s, arg(e, 3), xs->rank);
        if (xs->dims[attrs[0]] % group)
            sema_error(s, arg(e, 2)->loc, "all_to_all splits dim %lld of size %lld into %lld blocks, which does not divide",
                       (long long)attrs[0], (long long)xs->dims[attrs[0]], (long long)group);
        break;
    default: {
        int64_t *pa = arena_alloc(s->arena, sizeof(int64_t) * (size_t)(1 + n + 2 * group));
        int np;
        pa[0] = n;
        memcpy(pa + 1, axes, sizeof(int64_t) * (size_t)n);
        permute_pairs(s, arg(e, 2), group, pa + 1 + n, &np);
        return tensor(emit(s, OP_COLLECTIVE_PERMUTE, (int32_t[]){x}, 1, pa, 1 + n + np, NULL, e->loc));
    }
    }
    memcpy(attrs + fixed, axes, sizeof(int64_t) * (size_t)n);
    int v = emit(s, op, (int32_t[]){x}, 1, attrs, fixed + n, NULL, e->loc);
    if (which == CO_PMEAN)
        return binary_op(s, '/', tensor(v), (Val){VAL_FLOAT, {0, 0, -1}, (double)group, -1}, e->loc);
    return tensor(v);
}


Val user_call(Sema *s, const Expr *e, int callee, int nwanted, Val *results) {
    int remat = callee < s->nuser_fns && s->ast_fns[callee]->checkpoint;     /* `checkpoint fn` */
    return fn_call(s, e, callee, sym(s, e->sym), remat ? INST_REMAT : 0, nwanted, results);
}

Val fn_call(Sema *s, const Expr *e, int callee, const char *name, int flags, int nwanted, Val *results) {
    const Fn *f = &s->m->fns[callee];
    if (s->fn->spmd && f->spmd)
        sema_error(s, e->loc, "an spmd fn cannot call another spmd fn ('%s')", name);
    if (s->fn->spmd && f->on)
        sema_error(s, e->loc, "an spmd fn cannot call '%s', which runs on %s", name, submesh_str(s, fn_submesh(s, f)));
    if (s->fn->on && f->on != s->fn->on)
        sema_error(s, e->loc, "'%s' runs on %s, so it can only call fns on '%s'; '%s' runs on %s", sym(s, s->fn->sym),
                   submesh_str(s, fn_submesh(s, s->fn)), sym(s, fn_submesh(s, s->fn)->sym), name,
                   f->on ? submesh_str(s, fn_submesh(s, f)) : "the whole mesh");
    if (e->args.n != f->nparams)
        sema_error(s, e->loc, "%s takes %s, not %d", name, count_of(s, f->nparams, "argument"), e->args.n);
    int32_t *args = arena_alloc(s->arena, sizeof(int32_t) * (size_t)(f->nparams + 1));
    for (int i = 0; i < f->nparams; i++) {
        const Expr *a = arg(e, i);
        args[i] = to_tensor(s, eval(s, a), f->params[i].type.dtype, a->loc);
        if (!shape_eq(shape_of(s, args[i]), &f->params[i].type))
            sema_error(s, a->loc, "argument %d of %s is %s, but the parameter is %s%s", i + 1, name,
                       shape_str(s, shape_of(s, args[i])), shape_str(s, &f->params[i].type),
                       s->fn->spmd ? " (inside an spmd fn, arguments are local blocks)" : "");
    }
    if (f->nresults != nwanted)
        sema_error(s, e->loc, "%s returns %s, but %d %s expected here", name, count_of(s, f->nresults, "value"),
                   nwanted, nwanted == 1 ? "is" : "are");
    *VEC_PUSH(s->arena, s->calls, s->ncalls, s->calls_cap) = (CallEdge){s->fn_index, callee, e->loc};
    int64_t which = callee;
    int c = emit(s, OP_CALL, args, f->nparams, &which, 1, NULL, e->loc);
    s->fn->insts[c].flags |= (uint8_t)flags;
    if (f->nresults == 1)
        return tensor(c);
    for (int64_t i = 0; i < f->nresults; i++)
        results[i] = tensor(emit(s, OP_GET_TUPLE_ELEMENT, (int32_t[]){c}, 1, &i, 1, NULL, e->loc));
    return results[0];
}

/* What an unknown callee may have meant: a function, a builtin, or one of
 * the transforms, which are no builtins. */
static const char *near_callee(Sema *s, int symbol) {
    Suggest sg = suggest_begin(sym(s, symbol));
    near_add_scope(s, &sg, NEAR_FNS | NEAR_BUILTINS);
    near_add_transforms(&sg);
    return near_text(s, &sg);
}

/* A call of a name that is neither a function nor a builtin: a cast to a
 * dtype that does not exist (i64(x), flaot(x)) says so and lists the
 * dtypes, unless a function of the program is near (f3 for f2); anything
 * else gets the nearest function or builtin. */
void unknown_callee(Sema *s, const Expr *e) {
    const char *name = sym(s, e->sym);
    char hint[200];
    Suggest fns = suggest_begin(name);
    near_add_scope(s, &fns, NEAR_FNS);
    if (dtype_like(name) && !fns.best)
        sema_error(s, e->loc, "unknown dtype '%s' in a cast%s", name, dtype_hint(name, hint, sizeof hint));
    sema_error(s, e->loc, "'%s' is not a function or builtin%s", name, near_callee(s, e->sym));
}

Val call_value(Sema *s, const Expr *e, int nwanted, Val *results) {
    if (e->lhs)
        return transform_call(s, e, nwanted, results);
    const char *name = sym(s, e->sym);
    Binding *b = lookup(s, e->sym);
    if (b && b->kind == B_FN && s->fn->sym < 0)
        sema_error(s, e->loc, "a constant must be known at compile time; it cannot call '%s'", name);
    if (b && b->kind == B_FN)
        return user_call(s, e, b->index, nwanted, results);
    const Builtin *bi = e->sym < s->nsyms ? s->builtin[e->sym] : NULL;
    if (!bi && strcmp(name, "checkpoint") == 0)     /* a transform: it makes a function, which must be called */
        sema_error(s, e->loc, "checkpoint(f) is a function: call it with f's arguments, checkpoint(f)(x, w)");
    if (!bi)
        unknown_callee(s, e);
    int top = bi->kind == BK_SPECIAL && bi->op == SP_TOP_K;
    if (nwanted != 1 && !top)
        sema_error(s, e->loc, "%s returns one value", name);
    if (nwanted != 2 && top)
        sema_error(s, e->loc, "top_k returns two values, the values and their indices: write v, i = top_k(x, k)");
    if (e->binders.n && !is_reduction_name(name))
        not_a_reduction(s, e);
    if (e->binders.n || bi->kind == BK_REDUCTION)
        sema_error(s, e->loc, "%s %s over index names; use it in an index statement such as y[i%s] = %s[j](x[i, j])", name,
                   is_normalization(name) ? "normalizes" : "reduces", is_normalization(name) ? ", j" : "", name);
    if (e->args.n < bi->min_args || e->args.n > bi->max_args)
        sema_error(s, e->loc, "%s takes %s, not %d", name, count_of(s, bi->min_args, "argument"), e->args.n);
    switch (bi->kind) {
    case BK_UNARY: return unary_op(s, (Op)bi->op, bi->name, eval(s, arg(e, 0)), e->loc);
    case BK_BINARY: {
        Val x = eval(s, arg(e, 0)), y = eval(s, arg(e, 1));
        return elementwise2(s, (Op)bi->op, x, y, e->loc);
    }
    case BK_CAST: {
        Val v = eval(s, arg(e, 0));
        if (v.kind == VAL_FLOAT && bi->op == DT_I32) {   /* i32(2.7) truncates, as astype does */
            if (!(v.f > -2147483649.0 && v.f < 2147483648.0))
                sema_error(s, e->loc, "constant %g does not fit in i32", v.f);
            v = int_val((int64_t)v.f);
        }
        if (v.kind != VAL_TENSOR)
            return tensor(to_tensor(s, v, bi->op, e->loc));
        if (shape_of(s, v.v)->dtype == bi->op)
            return v;
        Shape to = *shape_of(s, v.v);
        to.dtype = (uint8_t)bi->op;
        return tensor(emit(s, OP_CONVERT, (int32_t[]){v.v}, 1, NULL, 0, &to, e->loc));
    }
    case BK_SPECIAL: return top ? top_k(s, e, results) : special(s, e, bi->op);
    case BK_COLLECTIVE: return collective(s, e, bi->op);
    case BK_RANDOM: return random_builtin(s, e, bi->op);
    }
    sema_error(s, e->loc, "unknown builtin");
}
