/* Whole-tensor values: elementwise arithmetic with scalar broadcasting,
 * dtype rules for literals, and slicing `x[lo:hi, :, k]`. */
#include "sema.h"

#include <math.h>

static Op binary_ir_op(int tok, int *cmp) {
    *cmp = -1;
    switch (tok) {
    case '+': return OP_ADD;
    case '-': return OP_SUB;
    case '*': return OP_MUL;
    case '/': return OP_DIV;
    case '%': return OP_REM;
    case '<': *cmp = CMP_LT; break;
    case '>': *cmp = CMP_GT; break;
    case OPR_LE: *cmp = CMP_LE; break;
    case OPR_GE: *cmp = CMP_GE; break;
    case OPR_EQ: *cmp = CMP_EQ; break;
    case OPR_NE: *cmp = CMP_NE; break;
    }
    return OP_COMPARE;
}

int dtype_of_val(Sema *s, Val v) {
    return v.kind == VAL_TENSOR ? s->fn->insts[v.v].type.dtype : -1;
}

/* A scalar constant or run-time integer as a tensor of `dtype`. */
int to_tensor(Sema *s, Val v, int dtype, Loc loc) {
    if (v.kind == VAL_TENSOR)
        return v.v;
    Shape scalar = {(uint8_t)dtype, 0, {0}};
    if (v.kind == VAL_INT && !int_is_const(v.i)) {
        int x = materialize_int(s, v.i, loc);
        return dtype == DT_I32 ? x : emit(s, OP_CONVERT, (int32_t[]){x}, 1, NULL, 0, &scalar, loc);
    }
    double value = v.kind == VAL_INT ? (double)v.i.konst : v.f;
    if (dtype == DT_I32 && (value != floor(value) || fabs(value) > 2147483647.0))
        sema_error(s, loc, "constant %g is not an i32", value);
    if (dtype == DT_U32 && (value != floor(value) || value < 0 || value > 4294967295.0))
        sema_error(s, loc, "constant %g is not a u32", value);
    /* The IR holds constants as doubles: an i64 constant is an integer a
     * double holds exactly (larger values come from data or casts). */
    if (dtype == DT_I64 && v.kind == VAL_INT && fabs(value) > 9007199254740992.0)   /* said exactly */
        sema_error(s, loc, "constant %lld is not an i64 constant (integers up to 2^53 in magnitude)",
                   (long long)v.i.konst);
    if (dtype == DT_I64 && (value != floor(value) || fabs(value) > 9007199254740992.0))
        sema_error(s, loc, "constant %.17g is not an i64 constant (integers up to 2^53 in magnitude)", value);
    if (dtype == DT_U8 && (value != floor(value) || value < 0 || value > 255))
        sema_error(s, loc, "constant %g is not a u8", value);
    if (dtype == DT_BOOL)
        sema_error(s, loc, "a number cannot be a bool; use a comparison");
    int k = emit(s, OP_CONSTANT, NULL, 0, NULL, 0, &scalar, loc);
    s->fn->insts[k].value = value;
    return k;
}

int expect_tensor(Sema *s, const Expr *e, const char *what) {
    Val v = eval(s, e);
    if (v.kind != VAL_TENSOR)
        sema_error(s, e->loc, "%s must be a tensor", what);
    return v.v;
}

int broadcast_to(Sema *s, int v, const Shape *to, const int64_t *dims_map, Loc loc) {
    Shape target = *to;
    target.dtype = s->fn->insts[v].type.dtype;
    return emit(s, OP_BROADCAST, (int32_t[]){v}, 1, dims_map, s->fn->insts[v].type.rank, &target, loc);
}

/* Literals with no tensor beside them: f32 if either is a float, else i32. */
static int literal_dtype(Val a, Val b) {
    return a.kind == VAL_FLOAT || b.kind == VAL_FLOAT ? DT_F32 : DT_I32;
}

/* Bring two operands to one dtype and shape: literals take the dtype of the
 * tensor beside them, scalars broadcast, anything else must already agree. */
static void unify(Sema *s, Val *a, Val *b, Loc loc, int *x, int *y) {
    int da = dtype_of_val(s, *a), db = dtype_of_val(s, *b);
    int dt = da >= 0 ? da : db >= 0 ? db : literal_dtype(*a, *b);
    if (da >= 0 && db >= 0 && da != db)     /* there is no bool(...): cast the bool one */
        sema_error(s, loc, "operands have different dtypes, %s and %s; cast one with %s(...)",
                   dtype_name[da], dtype_name[db], dtype_name[da == DT_BOOL ? db : da]);
    *x = to_tensor(s, *a, dt, loc);
    *y = to_tensor(s, *b, dt, loc);
    const Shape *sx = &s->fn->insts[*x].type, *sy = &s->fn->insts[*y].type;
    if (shape_eq(sx, sy))
        return;
    if (sx->rank == 0)
        *x = broadcast_to(s, *x, sy, NULL, loc);
    else if (sy->rank == 0)
        *y = broadcast_to(s, *y, sx, NULL, loc);
    else
        sema_error(s, loc, "operand shapes differ, %s and %s; use an index statement to broadcast",
                   shape_str(s, sx), shape_str(s, sy));
}

Val tensor(int v) { return (Val){VAL_TENSOR, {0, 0, -1}, 0, v}; }

static int compare_consts(int cmp, double x, double y) {
    switch (cmp) {
    case CMP_LT: return x < y;
    case CMP_LE: return x <= y;
    case CMP_GT: return x > y;
    case CMP_GE: return x >= y;
    case CMP_EQ: return x == y;
    default: return x != y;
    }
}

/* How the user spells a binary op that has a builtin (pow), for messages. */
static const char *const builtin_name[OP_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi)
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) [OP_##ID] = builtin,
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};

/* ---- the logic ops: bool in, bool out ---- */

/* What a logic op's operand is, when it is not bool: "f32", "a number". */
static const char *kind_of(Sema *s, Val v) {
    int dt = dtype_of_val(s, v);
    return dt >= 0 ? dtype_name[dt] : v.kind == VAL_FLOAT || int_is_const(v.i) ? "a number" : "an integer";
}

static void want_bool(Sema *s, const char *name, const char *which, Val v, Loc loc) {
    if (dtype_of_val(s, v) != DT_BOOL)
        sema_error(s, loc, "'%s' takes bool operands (comparisons such as x > 0), and its %s is %s", name, which,
                   kind_of(s, v));
}

/* `x and y`, `x or y`, `x xor y`: two bool tensors of one shape, or a bool
 * scalar beside a bool tensor (broadcast, as arithmetic's scalars are). */
static Val logic_op(Sema *s, int tok, Val a, Val b, Loc loc) {
    Op op = tok == OPR_AND ? OP_AND : tok == OPR_OR ? OP_OR : OP_XOR;
    want_bool(s, op_info[op].name, "left operand", a, loc);
    want_bool(s, op_info[op].name, "right operand", b, loc);
    int x, y;
    unify(s, &a, &b, loc, &x, &y);
    return tensor(emit(s, op, (int32_t[]){x, y}, 2, NULL, 0, NULL, loc));
}

Val not_op(Sema *s, Val a, Loc loc) {
    want_bool(s, "not", "operand", a, loc);
    return tensor(emit(s, OP_NOT, (int32_t[]){a.v}, 1, NULL, 0, NULL, loc));
}

Val binary_op(Sema *s, int tok, Val a, Val b, Loc loc) {
    if (tok == OPR_AND || tok == OPR_OR || tok == OPR_XOR)
        return logic_op(s, tok, a, b, loc);
    int cmp;
    Op op = binary_ir_op(tok, &cmp);
    int ints = a.kind == VAL_INT && b.kind == VAL_INT;
    if (ints && cmp < 0)
        return (Val){VAL_INT, int_binary(s, tok, a.i, b.i, loc), 0, -1};
    int consts = a.kind != VAL_TENSOR && b.kind != VAL_TENSOR &&
                 (a.kind != VAL_INT || int_is_const(a.i)) && (b.kind != VAL_INT || int_is_const(b.i));
    if (consts) {
        double x = a.kind == VAL_INT ? (double)a.i.konst : a.f, y = b.kind == VAL_INT ? (double)b.i.konst : b.f;
        if (cmp >= 0) {
            Shape pred = {DT_BOOL, 0, {0}};
            int k = emit(s, OP_CONSTANT, NULL, 0, NULL, 0, &pred, loc);
            s->fn->insts[k].value = compare_consts(cmp, x, y);
            return tensor(k);
        }
        double r = tok == '+' ? x + y : tok == '-' ? x - y : tok == '*' ? x * y : tok == '/' ? x / y
                 : y == 0 ? NAN : x - floor(x / y) * y;
        return (Val){VAL_FLOAT, {0, 0, -1}, r, -1};
    }
    if (a.kind != VAL_TENSOR && b.kind != VAL_TENSOR) {
        /* A run-time integer meets a constant: compare or compute in i32. */
        a = tensor(to_tensor(s, a, DT_I32, loc));
    }
    if (cmp >= 0) {
        int x, y;
        unify(s, &a, &b, loc, &x, &y);
        return tensor(emit(s, OP_COMPARE, (int32_t[]){x, y}, 2, (int64_t[]){cmp}, 1, NULL, loc));
    }
    return elementwise2(s, op, a, b, loc);
}

Val elementwise2(Sema *s, Op op, Val a, Val b, Loc loc) {
    if (op == OP_POW && a.kind == VAL_INT && b.kind == VAL_INT && int_is_const(a.i))
        a = (Val){VAL_FLOAT, {0, 0, -1}, (double)a.i.konst, -1};   /* pow(2, 3) is a float, as exp(2) is */
    int x, y;
    unify(s, &a, &b, loc, &x, &y);
    int dt = s->fn->insts[x].type.dtype;
    if (dt == DT_BOOL)
        sema_error(s, loc, "arithmetic on bool values; use where(c, a, b)");
    if (!op_accepts(op, dt))
        sema_error(s, loc, "%s needs floating-point operands, not %s", builtin_name[op], dtype_name[dt]);
    return tensor(emit(s, op, (int32_t[]){x, y}, 2, NULL, 0, NULL, loc));
}

Val select_op(Sema *s, Val c, Val a, Val b, Loc loc) {
    if (dtype_of_val(s, c) != DT_BOOL)
        sema_error(s, loc, "the condition of where must be a bool tensor (a comparison)");
    int x, y;
    unify(s, &a, &b, loc, &x, &y);
    int p = c.v;
    const Shape *sp = &s->fn->insts[p].type, *sx = &s->fn->insts[x].type;
    Shape want = *sx;
    want.dtype = DT_BOOL;
    if (sp->rank == 0 && sx->rank > 0)
        p = broadcast_to(s, p, sx, NULL, loc);
    else if (sx->rank == 0 && sp->rank > 0) {
        x = broadcast_to(s, x, sp, NULL, loc);
        y = broadcast_to(s, y, sp, NULL, loc);
    } else if (!shape_eq(sp, &want))
        sema_error(s, loc, "where's condition is %s but its values are %s", shape_str(s, sp), shape_str(s, sx));
    return tensor(emit(s, OP_SELECT, (int32_t[]){p, x, y}, 3, NULL, 0, NULL, loc));
}

/* An index tensor or scalar as the IR's i32 indices: i64 ones are clamped
 * to i32's range, then converted.  Gathers and dynamic slices clamp their
 * indices and scatters drop those out of range, so an i64 index past 2^31
 * must stay past the end: a plain conversion would wrap it back in. */
int index_as_i32(Sema *s, int v, Loc loc) {
    Shape to = s->fn->insts[v].type;
    if (to.dtype != DT_I64)
        return v;
    Val x = tensor(v), hi = tensor(to_tensor(s, int_val(INT32_MAX), DT_I64, loc)),
        lo = tensor(to_tensor(s, int_val(INT32_MIN), DT_I64, loc));
    x = select_op(s, binary_op(s, '>', x, hi, loc), hi, x, loc);
    x = select_op(s, binary_op(s, '<', x, lo, loc), lo, x, loc);
    to.dtype = DT_I32;
    return emit(s, OP_CONVERT, (int32_t[]){x.v}, 1, NULL, 0, &to, loc);
}

/* `name` is how the user spelled the op, for messages: "exp", "-". */
Val unary_op(Sema *s, Op op, const char *name, Val a, Loc loc) {
    int arith = op_info[op].dtypes == TY_NUM;
    int x = to_tensor(s, a, a.kind == VAL_INT && arith ? DT_I32 : DT_F32, loc);
    int dt = s->fn->insts[x].type.dtype;
    if (arith && !dtype_is_arith(dt))
        sema_error(s, loc, "%s needs a numeric operand, not %s", name, dtype_name[dt]);
    if (!arith && !dtype_is_float(dt))
        sema_error(s, loc, "%s needs a floating-point operand, not %s; cast with f32(...)", name, dtype_name[dt]);
    if (op == OP_ABS && (dt == DT_U8 || dt == DT_U32))
        return tensor(x);   /* an unsigned value is its own abs (NumPy's too) */
    return tensor(emit(s, op, (int32_t[]){x}, 1, NULL, 0, NULL, loc));
}

/* ---- x[lo:hi, :, k] ---- */

static int64_t bound(Sema *s, const Expr *e, int64_t extent, int64_t dflt) {
    if (!e)
        return dflt;
    Val b = eval_index(s, e, "a slice bound");
    if (b.kind != VAL_INT)
        sema_error(s, e->loc, "a slice bound must be an integer");
    if (!int_is_const(b.i))
        sema_error(s, e->loc, "a slice bound must be known at compile time");
    int64_t written = b.i.konst, v = written < 0 ? written + extent : written;
    if (v < 0 || v > extent)
        sema_error(s, e->loc, "slice bound %lld is outside %lld..%lld", (long long)written, (long long)-extent, (long long)extent);
    return v;
}

void slice_spec_init(SliceSpec *sp, const Shape *shape) {
    for (int d = 0; d < shape->rank; d++) {
        sp->start[d] = 0;
        sp->limit[d] = sp->size[d] = shape->dims[d];
        sp->dynamic[d] = -1;
        sp->keep[d] = 1;
    }
    sp->rank = shape->rank;
}

/* Subscript d is the integer k: select one element along d and drop the dim. */
void slice_spec_select(Sema *s, SliceSpec *sp, int d, Val k, int64_t extent, Loc loc) {
    sp->keep[d] = 0;
    if (!int_is_const(k.i)) {
        sp->dynamic[d] = materialize_int(s, k.i, loc);
        sp->size[d] = 1;
        return;
    }
    int64_t at = k.i.konst < 0 ? k.i.konst + extent : k.i.konst;
    if (at < 0 || at >= extent)
        sema_error(s, loc, "index %lld is out of range for a dim of size %lld", (long long)k.i.konst, (long long)extent);
    sp->start[d] = at;
    sp->limit[d] = at + 1;
}

/* Emit what a SliceSpec asks of x: one static slice, one dynamic slice
 * (static dims are sliced already, so their offsets are 0), and a reshape
 * that drops the selected dims. */
int emit_slices(Sema *s, int x, const SliceSpec *sp, Loc loc) {
    const Shape shape = s->fn->insts[x].type;
    int any_static = 0, any_dynamic = 0;
    for (int d = 0; d < sp->rank; d++) {
        any_dynamic |= sp->dynamic[d] >= 0;
        any_static |= sp->dynamic[d] < 0 && (sp->start[d] != 0 || sp->limit[d] != shape.dims[d]);
    }
    if (any_static) {
        int64_t bounds[2 * MAX_RANK];
        for (int d = 0; d < sp->rank; d++)
            bounds[d] = sp->start[d], bounds[sp->rank + d] = sp->limit[d];
        x = emit(s, OP_SLICE, (int32_t[]){x}, 1, bounds, 2 * sp->rank, NULL, loc);
    }
    if (any_dynamic) {
        int32_t args[1 + MAX_RANK] = {x};
        Shape out = s->fn->insts[x].type;
        for (int d = 0; d < sp->rank; d++) {
            args[1 + d] = sp->dynamic[d] >= 0 ? sp->dynamic[d] : to_tensor(s, int_val(0), DT_I32, loc);
            if (sp->dynamic[d] >= 0)
                out.dims[d] = sp->size[d];
        }
        x = emit(s, OP_DYNAMIC_SLICE, args, 1 + sp->rank, NULL, 0, &out, loc);
    }
    Shape kept = s->fn->insts[x].type;
    kept.rank = 0;
    for (int d = 0; d < sp->rank; d++)
        if (sp->keep[d])
            kept.dims[kept.rank++] = s->fn->insts[x].type.dims[d];
    if (kept.rank != sp->rank)
        x = emit(s, OP_RESHAPE, (int32_t[]){x}, 1, NULL, 0, &kept, loc);
    return x;
}

static void subscript(Sema *s, const Expr *sub, int64_t extent, int d, SliceSpec *sp) {
    if (sub->kind != E_SLICE) {
        if (sub->kind == E_NAME && !lookup(s, sub->sym))
            sema_error(s, sub->loc, "undefined name '%s' (index names are only allowed in index statements, such as y[i] = x[i])%s",
                       sym(s, sub->sym), did_you_mean(s, sub->sym, NEAR_VALUES));
        Val v = eval_index(s, sub, "an index");
        if (v.kind != VAL_INT)
            sema_error(s, sub->loc, "an index in a value statement must be an integer (index names go in index statements: y[i] = x[i])");
        slice_spec_select(s, sp, d, v, extent, sub->loc);
        return;
    }
    Val lo = sub->lhs ? eval_index(s, sub->lhs, "a slice bound") : int_val(0);
    if (lo.kind != VAL_INT)
        sema_error(s, sub->lhs->loc, "a slice bound must be an integer");
    if (!int_is_const(lo.i)) {
        /* Dynamic slice: the size hi - lo must still be a compile-time constant. */
        Val hi = sub->rhs ? eval_index(s, sub->rhs, "a slice bound") : int_val(extent);
        if (hi.kind != VAL_INT)
            sema_error(s, sub->rhs->loc, "a slice bound must be an integer");
        IntVal n = int_binary(s, '-', hi.i, lo.i, sub->loc);
        if (!int_is_const(n))
            sema_error(s, sub->loc, "a dynamic slice lo:hi needs hi - lo known at compile time");
        if (n.konst < 1 || n.konst > extent)
            sema_error(s, sub->loc, "dynamic slice size %lld is outside 1..%lld", (long long)n.konst, (long long)extent);
        sp->dynamic[d] = materialize_int(s, lo.i, sub->loc);
        sp->size[d] = n.konst;
        return;
    }
    sp->start[d] = bound(s, sub->lhs, extent, 0);
    sp->limit[d] = bound(s, sub->rhs, extent, extent);
    if (sp->limit[d] <= sp->start[d])
        sema_error(s, sub->loc, "empty slice %lld:%lld", (long long)sp->start[d], (long long)sp->limit[d]);
}

Val index_value(Sema *s, const Expr *e) {
    int x = expect_tensor(s, e->lhs, "the indexed value");
    Shape shape = s->fn->insts[x].type;
    if (e->args.n > shape.rank)
        sema_error(s, e->loc, "%s for a tensor with %s", count_of(s, e->args.n, "subscript"), count_of(s, shape.rank, "dim"));
    SliceSpec sp;
    slice_spec_init(&sp, &shape);
    for (int d = 0; d < e->args.n; d++)
        subscript(s, e->args.items[d], shape.dims[d], d, &sp);
    return tensor(emit_slices(s, x, &sp, e->loc));
}
