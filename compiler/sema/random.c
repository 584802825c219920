/* Random numbers as JAX draws them (docs/language.md#random-numbers): keys
 * are u32[2] values, and every draw is the IR's `random` op on counters
 * that sema builds from iotas: each element's row-major index in the whole
 * tensor.  The partitioner gives every device the iotas of its own block
 * (their global offsets), so a split draw has the same values on every
 * mesh and layout without communication (JAX's threefry_partitionable). */
#include "sema.h"
#include "../../lib/shardc_rng.h"    /* sk_rng_kind */

static const Expr *arg(const Expr *e, int i) { return e->args.items[i]; }

static const Shape *shape_of(Sema *s, int v) { return &s->fn->insts[v].type; }

static int constant(Sema *s, int dtype, double value, Loc loc) {
    Shape scalar = {(uint8_t)dtype, 0, {0}};
    int k = emit(s, OP_CONSTANT, NULL, 0, NULL, 0, &scalar, loc);
    s->fn->insts[k].value = value;
    return k;
}

/* Argument i, a key: a u32[2] value.  Anything else is a type error. */
static int key_arg(Sema *s, const Expr *e, int i) {
    Val v = eval(s, arg(e, i));
    Shape want = {DT_U32, 1, {2}};
    if (v.kind != VAL_TENSOR || !shape_eq(shape_of(s, v.v), &want))
        sema_error(s, arg(e, i)->loc, "%s's key must be a u32[2] (from key(seed), split_key or fold_in), not %s",
                   sym(s, e->sym), v.kind == VAL_TENSOR ? shape_str(s, shape_of(s, v.v)) : "a number");
    return v.v;
}

/* Argument i, a 32-bit integer scalar (a seed, fold_in's data): a number,
 * or an i32 or u32 scalar; as u32 bits (an i32 keeps its bits). */
static int word_arg(Sema *s, const Expr *e, int i, const char *what) {
    const Expr *a = arg(e, i);
    Val v = eval(s, a);
    if (v.kind == VAL_INT && int_is_const(v.i)) {
        if (v.i.konst < INT32_MIN || v.i.konst > UINT32_MAX)
            sema_error(s, a->loc, "%s %lld does not fit in 32 bits", what, (long long)v.i.konst);
        return constant(s, DT_U32, (double)(uint32_t)v.i.konst, a->loc);
    }
    if (v.kind == VAL_INT)
        v = tensor(to_tensor(s, v, DT_I32, a->loc));
    if (v.kind != VAL_TENSOR || shape_of(s, v.v)->rank != 0 ||
        (shape_of(s, v.v)->dtype != DT_I32 && shape_of(s, v.v)->dtype != DT_U32))
        sema_error(s, a->loc, "%s must be an integer, or an i32 or u32 scalar, not %s", what,
                   v.kind == VAL_TENSOR ? shape_str(s, shape_of(s, v.v)) : "a float");
    if (shape_of(s, v.v)->dtype == DT_U32)
        return v.v;
    Shape u = {DT_U32, 0, {0}};
    return emit(s, OP_CONVERT, (int32_t[]){v.v}, 1, NULL, 0, &u, a->loc);
}

/* A scalar bound of dtype dt: a number, or a scalar of that dtype. */
static int bound_arg(Sema *s, const Expr *e, int i, int dt) {
    const Expr *a = arg(e, i);
    Val v = eval(s, a);
    if (v.kind != VAL_TENSOR)
        return to_tensor(s, v, dt, a->loc);
    if (shape_of(s, v.v)->rank != 0 || shape_of(s, v.v)->dtype != dt)
        sema_error(s, a->loc, "%s's bounds must be numbers or %s scalars, not %s", sym(s, e->sym), dtype_name[dt],
                   shape_str(s, shape_of(s, v.v)));
    return v.v;
}

/* [a] of u32 words, stacked along a new last dim of 2: a key, or split's keys. */
static int stack_words(Sema *s, int w0, int w1, Loc loc) {
    Shape col = *shape_of(s, w0);
    int64_t map[MAX_RANK];
    for (int d = 0; d < col.rank; d++)
        map[d] = d;
    col.dims[col.rank++] = 1;
    int64_t last = col.rank - 1;
    int a = broadcast_to(s, w0, &col, map, loc), b = broadcast_to(s, w1, &col, map, loc);
    return emit(s, OP_CONCAT, (int32_t[]){a, b}, 2, &last, 1, NULL, loc);
}

/* Each element's row-major index in the whole tensor, as i32 bits
 * (wrapping past 2^31, as u32 counts): the sum of iota(d) * stride(d). */
static int counters(Sema *s, const Expr *e, const Shape *shape) {
    Shape c = *shape;
    c.dtype = DT_I32;
    if (c.rank == 0)
        return constant(s, DT_I32, 0, e->loc);
    if (shape_elems(&c) > UINT32_MAX)
        sema_error(s, e->loc, "%s draws %s elements; a draw has at most 2^32 - 1 (its counters are 32 bits)",
                   sym(s, e->sym), shape_str(s, shape));
    int64_t stride = 1, last = c.rank - 1;
    int sum = emit(s, OP_IOTA, NULL, 0, &last, 1, &c, e->loc);
    for (int64_t d = c.rank - 2; d >= 0; d--) {
        stride *= c.dims[d + 1];
        int iota = emit(s, OP_IOTA, NULL, 0, &d, 1, &c, e->loc);
        int k = broadcast_to(s, constant(s, DT_I32, (double)(int32_t)(uint32_t)stride, e->loc), &c, NULL, e->loc);
        int term = emit(s, OP_MUL, (int32_t[]){iota, k}, 2, NULL, 0, NULL, e->loc);
        sum = emit(s, OP_ADD, (int32_t[]){sum, term}, 2, NULL, 0, NULL, e->loc);
    }
    return sum;
}

/* The op: kind's draw of `shape` with `key` at counters ctr. */
static int draw(Sema *s, int kind, int key, int ctr, const Shape *shape, const int *bounds, Loc loc) {
    int32_t args[4] = {key, ctr, bounds ? bounds[0] : -1, bounds ? bounds[1] : -1};
    int64_t k = kind;
    return emit(s, OP_RANDOM, args, bounds ? 4 : 2, &k, 1, shape, loc);
}

/* The draw's type, its last argument, of a dtype `ok` accepts. */
static int draw_type(Sema *s, const Expr *e, int (*ok)(int), const char *dtypes, Shape *shape, Sharding *sh) {
    int constrained = type_arg(s, e, e->args.n - 1, "last", shape, sh);
    if (!ok(shape->dtype))
        sema_error(s, arg(e, e->args.n - 1)->loc, "%s draws %s, not %s", sym(s, e->sym), dtypes,
                   dtype_name[shape->dtype]);
    return constrained;
}

static int is_u32(int dt) { return dt == DT_U32; }
static int is_i32(int dt) { return dt == DT_I32; }
static int is_bool(int dt) { return dt == DT_BOOL; }

/* x * (hi - lo) + lo, then at least lo: JAX's uniform(minval, maxval). */
static int scaled(Sema *s, int u, int lo, int hi, Loc loc) {
    const Shape *t = shape_of(s, u);
    int span = emit(s, OP_SUB, (int32_t[]){hi, lo}, 2, NULL, 0, NULL, loc);
    int l = t->rank ? broadcast_to(s, lo, t, NULL, loc) : lo;
    int w = t->rank ? broadcast_to(s, span, t, NULL, loc) : span;
    int v = emit(s, OP_ADD, (int32_t[]){emit(s, OP_MUL, (int32_t[]){u, w}, 2, NULL, 0, NULL, loc), l}, 2, NULL, 0,
                 NULL, loc);
    return emit(s, OP_MAX, (int32_t[]){l, v}, 2, NULL, 0, NULL, loc);
}

static Val draw_builtin(Sema *s, const Expr *e, int which, int key) {
    Shape shape;
    Sharding sh;
    int constrained, v;
    switch (which) {
    case RB_BITS:
        constrained = draw_type(s, e, is_u32, "u32 bits", &shape, &sh);
        v = draw(s, SK_RNG_BITS, key, counters(s, e, &shape), &shape, NULL, e->loc);
        break;
    case RB_UNIFORM: case RB_NORMAL: case RB_TRUNCATED_NORMAL: {
        if (which == RB_UNIFORM && e->args.n == 3)
            sema_error(s, e->loc, "uniform takes a key and a type, or a key, lo, hi and a type: uniform(k, f32[8]), "
                       "uniform(k, -1.0, 1.0, f32[8])");
        constrained = draw_type(s, e, dtype_is_float, "floating-point numbers", &shape, &sh);
        int bounds[2] = {-1, -1}, bounded = e->args.n == 4;
        for (int i = 0; i < 2 && bounded; i++)
            bounds[i] = bound_arg(s, e, 1 + i, shape.dtype);
        int kind = which == RB_UNIFORM ? SK_RNG_UNIFORM : which == RB_NORMAL ? SK_RNG_NORMAL : SK_RNG_TRUNCATED_NORMAL;
        v = draw(s, kind, key, counters(s, e, &shape), &shape, kind == SK_RNG_TRUNCATED_NORMAL ? bounds : NULL, e->loc);
        if (which == RB_UNIFORM && bounded)
            v = scaled(s, v, bounds[0], bounds[1], e->loc);
        break;
    }
    case RB_BERNOULLI: {
        constrained = draw_type(s, e, is_bool, "bool", &shape, &sh);
        Shape f = shape;
        f.dtype = DT_F32;
        int p = bound_arg(s, e, 1, DT_F32);
        v = draw(s, SK_RNG_UNIFORM, key, counters(s, e, &shape), &f, NULL, e->loc);
        int64_t lt = CMP_LT;
        v = emit(s, OP_COMPARE, (int32_t[]){v, f.rank ? broadcast_to(s, p, &f, NULL, e->loc) : p}, 2, &lt, 1, NULL,
                 e->loc);
        break;
    }
    default: {    /* RB_RANDINT */
        constrained = draw_type(s, e, is_i32, "i32", &shape, &sh);
        int bounds[2];
        bounds[0] = bound_arg(s, e, 1, DT_I32);     /* in order: an initializer's are unsequenced */
        bounds[1] = bound_arg(s, e, 2, DT_I32);
        v = draw(s, SK_RNG_RANDINT, key, counters(s, e, &shape), &shape, bounds, e->loc);
        break;
    }
    }
    if (constrained) {     /* as zeros(T) and iota(T, d): T's sharding constrains the draw */
        check_placed_sharding(s, v, &sh, e->loc);
        s->fn->insts[v].sh = sh;
        s->fn->insts[v].flags |= INST_CONSTRAINED;
    }
    return tensor(v);
}

Val random_builtin(Sema *s, const Expr *e, int which) {
    Loc loc = e->loc;
    if (which == RB_KEY) {      /* [0, seed]: JAX's key of a 32-bit seed */
        int seed = word_arg(s, e, 0, "key's seed");
        return tensor(stack_words(s, constant(s, DT_U32, 0, loc), seed, loc));
    }
    int key = key_arg(s, e, 0);
    if (which == RB_SPLIT) {    /* key i is threefry(k, [0, i]), both words */
        int64_t n = e->args.n == 2 ? eval_const_int(s, arg(e, 1), "split_key's count") : 2;
        if (n < 1 || n > INT32_MAX)
            sema_error(s, arg(e, 1)->loc, "split_key's count must be at least 1, not %lld", (long long)n);
        Shape c = {DT_I32, 1, {n}}, u = {DT_U32, 1, {n}};
        int64_t d0 = 0;
        int ctr = emit(s, OP_IOTA, NULL, 0, &d0, 1, &c, loc);
        int w0 = draw(s, SK_RNG_WORD0, key, ctr, &u, NULL, loc);      /* named: argument order is unspecified */
        int w1 = draw(s, SK_RNG_WORD1, key, ctr, &u, NULL, loc);
        return tensor(stack_words(s, w0, w1, loc));
    }
    if (which == RB_FOLD_IN) {  /* threefry(k, [0, data]), both words */
        int data = word_arg(s, e, 1, "fold_in's data");
        Shape u = {DT_U32, 0, {0}};
        int w0 = draw(s, SK_RNG_WORD0, key, data, &u, NULL, loc);
        int w1 = draw(s, SK_RNG_WORD1, key, data, &u, NULL, loc);
        return tensor(stack_words(s, w0, w1, loc));
    }
    return draw_builtin(s, e, which, key);
}
