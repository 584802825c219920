/* Integer scalars and the value-context expression dispatcher.  Integer
 * arithmetic folds at compile time; with a run-time part (axis_index) it stays
 * affine as long as it can, and becomes IR arithmetic when it cannot. */
#include "sema.h"

Val int_val(int64_t k) { return (Val){VAL_INT, {k, 0, -1}, 0, -1}; }

int int_is_const(IntVal v) { return v.atom < 0 || v.coef == 0; }

/* x op y for op in + - *, reporting overflow. */
static int64_t checked(Sema *s, int op, int64_t x, int64_t y, Loc loc) {
    int64_t r;
    int overflow = op == '+' ? __builtin_add_overflow(x, y, &r)
                 : op == '-' ? __builtin_sub_overflow(x, y, &r) : __builtin_mul_overflow(x, y, &r);
    if (overflow)
        sema_error(s, loc, "integer overflow in a constant expression");
    return r;
}

/* Python's floor division and modulo, which JAX follows for integers. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int i32_constant(Sema *s, int64_t value, Loc loc) {
    Shape i32 = {DT_I32, 0, {0}};
    if (value < INT32_MIN || value > INT32_MAX)
        sema_error(s, loc, "integer %lld does not fit in i32", (long long)value);
    int k = emit(s, OP_CONSTANT, NULL, 0, NULL, 0, &i32, loc);
    s->fn->insts[k].value = (double)value;
    return k;
}

int materialize_int(Sema *s, IntVal v, Loc loc) {
    if (int_is_const(v))
        return i32_constant(s, v.konst, loc);
    int x = v.atom;
    if (v.coef != 1)
        x = emit(s, OP_MUL, (int32_t[]){x, i32_constant(s, v.coef, loc)}, 2, NULL, 0, NULL, loc);
    if (v.konst != 0)
        x = emit(s, OP_ADD, (int32_t[]){x, i32_constant(s, v.konst, loc)}, 2, NULL, 0, NULL, loc);
    return x;
}

static IntVal atom(int v) { return (IntVal){0, 1, v}; }

/* Run-time integers are i32: report overflow where the arithmetic is written. */
static IntVal run_time_int(Sema *s, IntVal v, Loc loc) {
    if (v.konst < INT32_MIN || v.konst > INT32_MAX || v.coef < INT32_MIN || v.coef > INT32_MAX)
        sema_error(s, loc, "run-time integer arithmetic overflows i32");
    return v;
}

IntVal int_binary(Sema *s, int op, IntVal a, IntVal b, Loc loc) {
    int64_t r;
    if (int_is_const(a) && int_is_const(b)) {
        int64_t x = a.konst, y = b.konst;
        switch (op) {
        case '+': case '-': case '*': return (IntVal){checked(s, op, x, y, loc), 0, -1};
        case '/': case '%':
            if (y == 0)
                sema_error(s, loc, "integer division by zero");
            if (x == INT64_MIN && y == -1)
                sema_error(s, loc, "integer overflow in a constant expression");
            r = floor_div(x, y);
            return (IntVal){op == '/' ? r : x - r * y, 0, -1};
        }
    }
    /* A run-time part: stay affine for + - and scaling by a constant. */
    int same = a.atom == b.atom || int_is_const(a) || int_is_const(b);
    int at = int_is_const(a) ? b.atom : a.atom;
    if ((op == '+' || op == '-') && same) {
        int64_t bc = int_is_const(b) ? 0 : b.coef, ac = int_is_const(a) ? 0 : a.coef;
        int64_t k = checked(s, op, a.konst, b.konst, loc), c = checked(s, op, ac, bc, loc);
        return c == 0 ? (IntVal){k, 0, -1} : run_time_int(s, (IntVal){k, c, at}, loc);
    }
    if (op == '*' && (int_is_const(a) || int_is_const(b))) {
        IntVal v = int_is_const(a) ? b : a;
        int64_t f = int_is_const(a) ? a.konst : b.konst;
        int64_t k = checked(s, '*', v.konst, f, loc), c = checked(s, '*', v.coef, f, loc);
        return c == 0 ? (IntVal){k, 0, -1} : run_time_int(s, (IntVal){k, c, v.atom}, loc);
    }
    static const Op ops[128] = {['+'] = OP_ADD, ['-'] = OP_SUB, ['*'] = OP_MUL, ['/'] = OP_DIV, ['%'] = OP_REM};
    if (int_is_const(b) && b.konst == 0 && (op == '/' || op == '%'))
        sema_error(s, loc, "integer division by zero");
    int x = materialize_int(s, a, loc), y = materialize_int(s, b, loc);
    return atom(emit(s, ops[op], (int32_t[]){x, y}, 2, NULL, 0, NULL, loc));
}

int64_t eval_const_int(Sema *s, const Expr *e, const char *what) {
    Val v = eval(s, e);
    if (v.kind != VAL_INT)
        sema_error(s, e->loc, "%s must be an integer", what);
    if (!int_is_const(v.i))
        sema_error(s, e->loc, "%s must be known at compile time", what);
    return v.i.konst;
}

static Val eval_name(Sema *s, const Expr *e) {
    Binding *b = lookup(s, e->sym);
    switch (b ? b->kind : B_NONE) {
    case B_VALUE: return b->val;
    case B_AXIS:
        sema_error(s, e->loc, "'%s' is a mesh axis, not a value; size(%s) is its size", sym(s, e->sym), sym(s, e->sym));
    case B_FN:
        sema_error(s, e->loc, "'%s' is a function; call it with arguments", sym(s, e->sym));
    case B_SUBMESH:
        sema_error(s, e->loc, "'%s' is a submesh, not a value", sym(s, e->sym));
    default:
        undefined_name(s, e->sym, e->loc);
    }
}

static Val eval_binary(Sema *s, const Expr *e) {
    Val a = eval(s, e->lhs), b = eval(s, e->rhs);
    return binary_op(s, e->op, a, b, e->loc);
}

Val eval(Sema *s, const Expr *e) {
    switch (e->kind) {
    case E_INT: return int_val(e->ival);
    case E_FLOAT: return (Val){VAL_FLOAT, {0, 0, -1}, e->fval, -1};
    case E_NAME: return eval_name(s, e);
    case E_UNARY: {
        Val a = eval(s, e->lhs);
        if (e->op == OPR_NOT)
            return not_op(s, a, e->loc);
        if (a.kind == VAL_INT)
            return (Val){VAL_INT, int_binary(s, '-', (IntVal){0, 0, -1}, a.i, e->loc), 0, -1};
        if (a.kind == VAL_FLOAT)
            return (Val){VAL_FLOAT, {0, 0, -1}, -a.f, -1};
        return unary_op(s, OP_NEGATE, "unary -", a, e->loc);
    }
    case E_BINARY: return eval_binary(s, e);
    case E_CALL: return call_value(s, e, 1, NULL);
    case E_INDEX: return index_value(s, e);
    case E_SLICE: sema_error(s, e->loc, "a slice lo:hi is only allowed inside [ ]");
    case E_LIST: sema_error(s, e->loc, "a list [...] is only allowed as an argument of reshape, concat or ppermute");
    case E_TUPLE: sema_error(s, e->loc, "a tuple (...) is only allowed where mesh axes or permutation pairs are expected");
    case E_TYPE: sema_error(s, e->loc, "a type is only allowed as the first argument of zeros, full or iota, or the last of a random draw");
    case E_FIELD: sema_error(s, e->loc, "a field '.%s' is only read from a record, in a function's body", sym(s, e->sym));
    case E_RECORD: sema_error(s, e->loc, "a record literal %s { ... } is only allowed in a function's body", sym(s, e->sym));
    }
    sema_error(s, e->loc, "unknown expression");
}

/* An `i32[]` tensor used where an integer may stand (a subscript, a slice
 * bound) is a run-time integer: the atom of an IntVal, so that `t + n`
 * stays affine and `x[t : t + n]` knows its size n at compile time.  In an
 * fn the scalar is one value for the whole mesh (the partitioner makes it
 * replicated where a dynamic slice reads it); in an spmd fn it is each
 * device's own, as axis_index is. */
static Val as_index_int(Sema *s, Val v, Loc loc, const char *what) {
    if (v.kind != VAL_TENSOR)
        return v;
    const Shape *t = &s->fn->insts[v.v].type;
    if (t->rank == 0 && (t->dtype == DT_I32 || t->dtype == DT_I64))
        return (Val){VAL_INT, atom(index_as_i32(s, v.v, loc)), 0, -1};
    if (t->rank == 0)
        sema_error(s, loc, "%s must be an integer or an i32[] or i64[] scalar, not %s[]; convert it with i32(...)", what,
                   dtype_name[t->dtype]);
    sema_error(s, loc, "%s must be an integer or an i32[] or i64[] scalar, not the tensor %s", what, shape_str(s, t));
}

/* An expression in a subscript or slice bound: + - * and unary - of
 * integers and i32[] scalars stay affine (eval would make `t + 1` a tensor);
 * anything else is evaluated as a value and then taken as an integer. */
Val eval_index(Sema *s, const Expr *e, const char *what) {
    if (e->kind == E_BINARY && (e->op == '+' || e->op == '-' || e->op == '*')) {
        Val a = eval_index(s, e->lhs, what), b = eval_index(s, e->rhs, what);
        if (a.kind == VAL_INT && b.kind == VAL_INT)
            return (Val){VAL_INT, int_binary(s, e->op, a.i, b.i, e->loc), 0, -1};
        return as_index_int(s, binary_op(s, e->op, a, b, e->loc), e->loc, what);
    }
    if (e->kind == E_UNARY && e->op == '-') {
        Val a = eval_index(s, e->lhs, what);
        if (a.kind == VAL_INT)
            return (Val){VAL_INT, int_binary(s, '-', (IntVal){0, 0, -1}, a.i, e->loc), 0, -1};
        return as_index_int(s, unary_op(s, OP_NEGATE, "unary -", a, e->loc), e->loc, what);
    }
    return as_index_int(s, eval(s, e), e->loc, what);
}
