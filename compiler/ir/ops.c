/* Op facts: printed names, result-shape inference and factor rules, one
 * function pair per shape class of ops.def.  Sema builds instructions
 * through op_infer, the verifier re-checks them with it, and sharding
 * propagation reads op_rule: one source of truth for what each op does to
 * shapes. */
#include "ir.h"
#include "../../lib/shardc_rng.h"   /* the kinds of random: sk_rng_kind */

#include <string.h>

const ReducerInfo reducer_info[RED_MIN + 1] = {
    [RED_SUM] = {"add", "sum", "", "sum", "0", "+", NULL, "SC_SUM"},
    [RED_MAX] = {"maximum", "max", "_max", "reduce with max", "-INFINITY", "max", ">", "SC_MAX"},
    [RED_MIN] = {"minimum", "min", "_min", "reduce with min", "INFINITY", "min", "<", "SC_MIN"},
};

int reducer_named(const char *builtin) {
    for (int r = RED_SUM; r <= RED_MIN; r++)
        if (strcmp(reducer_info[r].builtin, builtin) == 0)
            return r;
    return -1;
}

#define AT(reducer, dim, axes) reducer, dim, axes
const OpInfo op_info[OP_COUNT] = {
#define OP(id, name, nargs, cls, kernel, flags, dtypes, prio, attrs) [id] = {name, nargs, flags, dtypes, prio, attrs},
#include "ops.def"
#undef OP
};
#undef AT

const OpFormula op_formula[OP_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) [OP_##ID] = {#f, #fi},
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) [OP_##ID] = {#f, #fi},
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};

int op_calls_exp(int op) { return op_formula[op].f && strstr(op_formula[op].f, "T(exp)"); }

int op_accepts(int op, int dt) {
    switch ((TypeClass)op_info[op].dtypes) {
    case TY_NUM: return dtype_is_arith(dt);
    case TY_FLOAT: return dtype_is_float(dt);
    case TY_BOOL: return dt == DT_BOOL;
    default: return 1;
    }
}

typedef enum {
    C_LEAF, C_ELEMENTWISE, C_CONVERT, C_COMPARE, C_SELECT, C_BROADCAST,
    C_TRANSPOSE, C_RESHAPE, C_DOT, C_REDUCE, C_SLICE, C_DYNAMIC_SLICE, C_DYNAMIC_UPDATE_SLICE, C_CONCAT,
    C_ROLL, C_CUMSUM, C_GATHER, C_SCATTER, C_TOP_K, C_CALL, C_TUPLE_ELEMENT, C_RETURN, C_ALL_REDUCE,
    C_ALL_GATHER, C_REDUCE_SCATTER, C_ALL_TO_ALL, C_PERMUTE, C_DONE, C_RANDOM,
} OpClass;

static const uint8_t op_class[OP_COUNT] = {
#define OP(id, name, nargs, cls, kernel, flags, dtypes, prio, attrs) [id] = C_##cls,
#include "ops.def"
#undef OP
};

/* ---- shape inference ---- */

typedef struct {
    const Module *m;
    const Fn *fn;
    const Inst *in;
    const Shape *arg[4];         /* first operands, for the fixed-arity classes */
} InferCtx;

static const Shape *arg_shape(const Fn *fn, const Inst *in, int i) {
    return &fn->insts[ir_arg(fn, in, i)].type;
}

static int64_t axes_product(const Module *m, const Fn *fn, const Inst *in, int first) {
    int64_t n = 1;
    for (int i = first; i < in->nattrs; i++) {
        int64_t a = ir_attr(fn, in, i);
        if (a < 0 || a >= m->naxes)
            return -1;
        n *= m->axis_size[a];
    }
    return n;
}

static const char *infer_leaf(InferCtx *c, Shape *out) {
    const Inst *in = c->in;
    *out = in->type;
    switch (in->op) {
    case OP_PARAMETER: {
        int64_t i = in->nattrs == 1 ? ir_attr(c->fn, in, 0) : -1;
        if (i < 0 || i >= c->fn->nparams)
            return "parameter index out of range";
        const Sig *p = &c->fn->params[i];
        *out = fn_is_local(c->fn) ? shape_local(c->m, &p->type, &p->sh) : p->type;
        return NULL;
    }
    case OP_CONSTANT:
        return in->type.rank == 0 ? NULL : "constant is not a scalar";
    case OP_IOTA:
        return in->nattrs == 1 && ir_attr(c->fn, in, 0) >= 0 && ir_attr(c->fn, in, 0) < in->type.rank
                   ? NULL : "iota dim out of range";
    case OP_AXIS_INDEX:
        *out = (Shape){DT_I32, 0, {0}};
        return axes_product(c->m, c->fn, in, 0) > 0 ? NULL : "axis-index names no mesh axis";
    }
    return "not a leaf";
}

/* random(key, counters[, lo, hi]) [kind]: the counters' dims in the dtype
 * the kind draws (docs/ir.md). */
static const char *infer_random(InferCtx *c, Shape *out) {
    const Inst *in = c->in;
    int64_t kind = in->nattrs == 1 ? ir_attr(c->fn, in, 0) : -1;
    int bounded = kind == SK_RNG_TRUNCATED_NORMAL || kind == SK_RNG_RANDINT;
    if (kind < 0 || kind >= SK_RNG_KIND_COUNT || in->nargs != 2 + 2 * bounded)
        return "random needs [kind] and its operands";
    const Shape *key = c->arg[0], *ctr = c->arg[1];
    if (key->dtype != DT_U32 || key->rank != 1 || key->dims[0] != 2)
        return "random's key is not u32[2]";
    if (ctr->dtype != DT_I32 && ctr->dtype != DT_U32)
        return "random's counters are not i32 or u32";
    *out = *ctr;
    out->dtype = in->type.dtype;
    int ok = kind <= SK_RNG_BITS ? out->dtype == DT_U32 : kind == SK_RNG_RANDINT ? out->dtype == DT_I32
                                                                                   : dtype_is_float(out->dtype);
    if (!ok)
        return "random's dtype does not fit its kind";
    for (int i = 2; i < in->nargs; i++)
        if (c->arg[i]->rank != 0 || c->arg[i]->dtype != out->dtype)
            return "random's bounds are not scalars of its dtype";
    return NULL;
}

static const char *infer_elementwise(InferCtx *c, Shape *out) {
    for (int i = 1; i < c->in->nargs; i++)
        if (!shape_eq(c->arg[0], c->arg[i]))
            return "operand shapes differ";
    *out = *c->arg[0];
    if (op_accepts(c->in->op, out->dtype))
        return NULL;
    switch ((TypeClass)op_info[c->in->op].dtypes) {
    case TY_NUM: return "arithmetic on bool";
    case TY_BOOL: return "logic op on a non-bool dtype";
    default: return "float op on a non-float dtype";
    }
}

static const char *infer_convert(InferCtx *c, Shape *out) {
    *out = *c->arg[0];
    out->dtype = c->in->type.dtype;
    return out->dtype < DT_COUNT ? NULL : "bad convert dtype";
}

static const char *infer_compare(InferCtx *c, Shape *out) {
    if (!shape_eq(c->arg[0], c->arg[1]))
        return "operand shapes differ";
    *out = *c->arg[0];
    out->dtype = DT_BOOL;
    return c->in->nattrs == 1 && ir_attr(c->fn, c->in, 0) <= CMP_NE ? NULL : "bad compare direction";
}

static const char *infer_select(InferCtx *c, Shape *out) {
    Shape pred = *c->arg[1];
    pred.dtype = DT_BOOL;
    if (!shape_eq(c->arg[0], &pred) || !shape_eq(c->arg[1], c->arg[2]))
        return "select operands differ in shape";
    *out = *c->arg[1];
    return NULL;
}

static const char *infer_broadcast(InferCtx *c, Shape *out) {
    const Shape *x = c->arg[0];
    *out = c->in->type;
    out->dtype = x->dtype;
    if (c->in->nattrs != x->rank)
        return "broadcast needs one result dim per operand dim";
    uint32_t used = 0;
    for (int i = 0; i < x->rank; i++) {
        int64_t d = ir_attr(c->fn, c->in, i);
        if (d < 0 || d >= out->rank || (used >> d & 1) || out->dims[d] != x->dims[i])
            return "broadcast dims do not match the result";
        used |= 1u << d;
    }
    return NULL;
}

static const char *infer_transpose(InferCtx *c, Shape *out) {
    const Shape *x = c->arg[0];
    if (c->in->nattrs != x->rank)
        return "transpose permutation has the wrong length";
    *out = *x;
    uint32_t used = 0;
    for (int i = 0; i < x->rank; i++) {
        int64_t d = ir_attr(c->fn, c->in, i);
        if (d < 0 || d >= x->rank || (used >> d & 1))
            return "transpose dims are not a permutation";
        used |= 1u << d;
        out->dims[i] = x->dims[d];
    }
    return NULL;
}

static const char *infer_reshape(InferCtx *c, Shape *out) {
    *out = c->in->type;
    out->dtype = c->arg[0]->dtype;
    return shape_elems(out) == shape_elems(c->arg[0]) ? NULL : "reshape changes the element count";
}

int sum_dtype(int dt) { return dt == DT_BF16 || dt == DT_F16 ? DT_F32 : dt; }

static const char *infer_dot(InferCtx *c, Shape *out) {
    const Shape *a = c->arg[0], *b = c->arg[1];
    int nres = c->in->nattrs - a->rank - b->rank;
    if (nres < 0 || nres > MAX_RANK)
        return "dot labels do not match the operand ranks";
    if (a->dtype != b->dtype)
        return "dot operands differ in dtype";
    int64_t extent[64];
    for (int i = 0; i < 64; i++)
        extent[i] = -1;
    for (int i = 0; i < a->rank + b->rank; i++) {
        int64_t l = ir_attr(c->fn, c->in, i), size = i < a->rank ? a->dims[i] : b->dims[i - a->rank];
        if (l < 0 || l >= 64 || (extent[l] >= 0 && extent[l] != size))
            return "dot label extents differ";
        extent[l] = size;
    }
    /* A dot of bf16 or f16 values may keep its f32 sums (dot_is_wide): the
     * partitioner's partial sums, and grad/wide_dots.c's dots. */
    int wide = c->in->type.dtype == sum_dtype(a->dtype);
    *out = (Shape){wide ? sum_dtype(a->dtype) : a->dtype, (uint8_t)nres, {0}};
    for (int i = 0; i < nres; i++) {
        int64_t l = ir_attr(c->fn, c->in, a->rank + b->rank + i);
        if (l < 0 || l >= 64 || extent[l] < 0)
            return "dot result label is not an operand label";
        out->dims[i] = extent[l];
    }
    return NULL;
}

static const char *infer_reduce(InferCtx *c, Shape *out) {
    const Shape *x = c->arg[0];
    if (c->in->nattrs < 1 || ir_attr(c->fn, c->in, 0) > RED_MIN)
        return "reduce has no reducer";
    *out = (Shape){x->dtype, 0, {0}};
    int next = 1;
    for (int d = 0; d < x->rank; d++) {
        if (next < c->in->nattrs && ir_attr(c->fn, c->in, next) == d) {
            next++;
            continue;
        }
        out->dims[out->rank++] = x->dims[d];
    }
    return next == c->in->nattrs ? NULL : "reduce dims are not ascending dims of the operand";
}

static const char *infer_slice(InferCtx *c, Shape *out) {
    const Shape *x = c->arg[0];
    if (c->in->nattrs != 2 * x->rank)
        return "slice needs a start and a limit per dim";
    *out = *x;
    for (int d = 0; d < x->rank; d++) {
        int64_t lo = ir_attr(c->fn, c->in, d), hi = ir_attr(c->fn, c->in, x->rank + d);
        if (lo < 0 || hi > x->dims[d] || lo >= hi)
            return "slice bounds out of range";
        out->dims[d] = hi - lo;
    }
    return NULL;
}

static const char *infer_dynamic_slice(InferCtx *c, Shape *out) {
    const Shape *x = arg_shape(c->fn, c->in, 0);
    if (c->in->nargs != 1 + x->rank)
        return "dynamic-slice needs one offset per dim";
    for (int d = 0; d < x->rank; d++) {
        const Shape *o = arg_shape(c->fn, c->in, 1 + d);
        if (o->rank != 0 || o->dtype != DT_I32)
            return "dynamic-slice offsets are i32 scalars";
    }
    *out = c->in->type;
    out->dtype = x->dtype;
    if (out->rank != x->rank)
        return "dynamic-slice changes the rank";
    for (int d = 0; d < x->rank; d++)
        if (out->dims[d] < 1 || out->dims[d] > x->dims[d])
            return "dynamic-slice size out of range";
    return NULL;
}

static const char *infer_dynamic_update_slice(InferCtx *c, Shape *out) {
    const Shape *x = arg_shape(c->fn, c->in, 0), *u = c->in->nargs > 1 ? arg_shape(c->fn, c->in, 1) : NULL;
    if (!u || c->in->nargs != 2 + x->rank)
        return "dynamic-update-slice needs an update and one offset per dim";
    if (u->rank != x->rank || u->dtype != x->dtype)
        return "dynamic-update-slice's update differs from its operand in rank or dtype";
    for (int d = 0; d < x->rank; d++) {
        const Shape *o = arg_shape(c->fn, c->in, 2 + d);
        if (o->rank != 0 || o->dtype != DT_I32)
            return "dynamic-update-slice offsets are i32 scalars";
        if (u->dims[d] > x->dims[d])
            return "dynamic-update-slice's update is larger than its operand";
    }
    *out = *x;
    return NULL;
}

static const char *infer_concat(InferCtx *c, Shape *out) {
    const Shape *x = arg_shape(c->fn, c->in, 0);
    int64_t dim = c->in->nattrs == 1 ? ir_attr(c->fn, c->in, 0) : -1;
    if (c->in->nargs < 1 || dim < 0 || dim >= x->rank)
        return "concatenate dim out of range";
    *out = *x;
    for (int i = 1; i < c->in->nargs; i++) {
        Shape y = *arg_shape(c->fn, c->in, i);
        out->dims[dim] += y.dims[dim];
        y.dims[dim] = x->dims[dim];
        if (!shape_eq(x, &y))
            return "concatenate operands differ off the concatenated dim";
    }
    return NULL;
}

static const char *infer_roll(InferCtx *c, Shape *out) {
    *out = *c->arg[0];
    return c->in->nattrs == 2 && ir_attr(c->fn, c->in, 1) >= 0 && ir_attr(c->fn, c->in, 1) < out->rank
               ? NULL : "roll dim out of range";
}

/* top-k(x) [k, largest]: i32[..., k] from x[..., n], 1 <= k <= n. */
static const char *infer_top_k(InferCtx *c, Shape *out) {
    const Shape *x = c->arg[0];
    if (x->rank < 1 || !dtype_is_num(x->dtype) || c->in->nattrs != 2)
        return "top-k needs a numeric operand with a dim and [k, largest]";
    int64_t k = ir_attr(c->fn, c->in, 0);
    if (k < 1 || k > x->dims[x->rank - 1])
        return "top-k's k is outside 1 .. the last dim";
    if (ir_attr(c->fn, c->in, 1) < 0 || ir_attr(c->fn, c->in, 1) > TOP_K_ASCENDING)
        return "top-k's order is 0, 1 or 2";
    *out = *x;
    out->dtype = DT_I32;
    out->dims[x->rank - 1] = k;
    return NULL;
}

static const char *infer_cumsum(InferCtx *c, Shape *out) {
    *out = *c->arg[0];
    if (c->in->nattrs != 1 || ir_attr(c->fn, c->in, 0) < 0 || ir_attr(c->fn, c->in, 0) >= out->rank)
        return "cumsum dim out of range";
    return NULL;
}

/* Table dims that a gather's result does not have: the gathered dim, and
 * the batch dims (the result has them once, as index dims).  Returns NULL,
 * or what is wrong with the attributes. */
static const char *gather_dropped(const Fn *fn, const Inst *in, const Shape *t, const Shape *ix, uint32_t *dropped) {
    int64_t dim = in->nattrs >= 2 && in->nattrs % 2 == 0 ? ir_attr(fn, in, 0) : -1;
    if (dim < 0 || dim >= t->rank || ix->dtype != DT_I32)
        return "gather needs an i32 index tensor and a table dim";
    if (inst_gather_mode(fn, in) != GATHER_CLAMP && inst_gather_mode(fn, in) != GATHER_FILL)
        return "gather mode is neither clamp nor fill";
    int nb;
    const int64_t *pair = inst_gather_batch(fn, in, &nb);
    uint32_t seen_ix = 0;
    *dropped = 1u << dim;
    for (int i = 0; i < nb; i++) {
        int64_t td = pair[2 * i], xd = pair[2 * i + 1];
        if (td < 0 || td >= t->rank || (*dropped >> td & 1) || xd < 0 || xd >= ix->rank || (seen_ix >> xd & 1))
            return "gather batch dims are not distinct dims of the table and the indices";
        if (t->dims[td] != ix->dims[xd])
            return "gather batch dims differ in extent";
        *dropped |= 1u << td;
        seen_ix |= 1u << xd;
    }
    return ix->rank + t->rank - 1 - nb > MAX_RANK ? "gather result has too many dims" : NULL;
}

static const char *infer_gather(InferCtx *c, Shape *out) {
    const Shape *t = c->arg[0], *ix = c->arg[1];
    uint32_t dropped;
    const char *err = gather_dropped(c->fn, c->in, t, ix, &dropped);
    if (err)
        return err;
    *out = *ix;
    out->dtype = t->dtype;
    for (int d = 0; d < t->rank; d++)
        if (!(dropped >> d & 1))
            out->dims[out->rank++] = t->dims[d];
    return NULL;
}

/* Operand dims the scatter's index tensors scatter into, as a mask;
 * 0 when the attributes are not distinct dims of the operand. */
static uint32_t scattered_dims(const Fn *fn, const Inst *in, const Shape *x) {
    uint32_t dims = 0;
    for (int i = 0; i < in->nattrs; i++) {
        int64_t d = ir_attr(fn, in, i);
        if (d < 0 || d >= x->rank || (dims >> d & 1))
            return 0;
        dims |= 1u << d;
    }
    return dims;
}

/* scatter(operand, indices..., updates): the updates have the indices'
 * dims, then the operand's dims that are not scattered into. */
static const char *infer_scatter(InferCtx *c, Shape *out) {
    const Inst *in = c->in;
    int n = in->nargs - 2;
    const Shape *x = arg_shape(c->fn, in, 0), *ix = arg_shape(c->fn, in, 1), *u = arg_shape(c->fn, in, n + 1);
    uint32_t dims = n >= 1 && in->nattrs == n ? scattered_dims(c->fn, in, x) : 0;
    if (!dims)
        return "scatter needs one distinct operand dim per index tensor";
    for (int i = 1; i <= n; i++)
        if (!shape_eq(arg_shape(c->fn, in, i), ix) || ix->dtype != DT_I32)
            return "scatter index tensors are i32 of one shape";
    Shape want = *ix;
    want.dtype = x->dtype;
    for (int d = 0; d < x->rank; d++)
        if (!(dims >> d & 1)) {
            if (want.rank == MAX_RANK)
                return "scatter updates have too many dims";
            want.dims[want.rank++] = x->dims[d];
        }
    if (!shape_eq(u, &want))
        return "scatter updates are not the indices' dims then the operand's other dims";
    *out = *x;
    return op_accepts(in->op, x->dtype) ? NULL : "arithmetic on bool";
}

static const Fn *callee_of(const Module *m, const Fn *fn, const Inst *call) {
    int64_t f = call->nattrs == (call->op == OP_LOOP ? 3 : 1) ? ir_attr(fn, call, 0) : -1;
    return op_calls(call->op) && f >= 0 && f < m->nfns ? &m->fns[f] : NULL;
}

/* A loop's body takes the index, then gives back its carried parameters'
 * types: what one iteration returns, the next one takes. */
static const char *check_loop(InferCtx *c, const Fn *body) {
    const Inst *in = c->in;
    int nc = loop_carried(c->fn, in);
    int64_t trips = loop_trips(c->fn, in);
    if (body->loop_carried != nc || nc > body->nresults || nc + 1 + (trips < 0) > body->nparams || trips < -1)
        return "loop does not match its body";
    const Shape *first = arg_shape(c->fn, in, 0), *end = arg_shape(c->fn, in, in->nargs - 1);
    if (first->dtype != DT_I32 || first->rank != 0)
        return "a loop's first operand is its first index, an i32 scalar";
    if (trips < 0 && (end->dtype != DT_I32 || end->rank != 0))
        return "a loop of run-time trip count ends at its last operand, an i32 scalar";
    for (int j = 0; j < nc; j++)
        if (!shape_eq(&body->params[1 + j].type, &body->results[j].type))
            return "a loop body's carried result differs from its parameter";
    return NULL;
}

static const char *infer_call(InferCtx *c, Shape *out) {
    const Fn *callee = callee_of(c->m, c->fn, c->in);
    if (!callee || callee->nparams != c->in->nargs)
        return "call does not match its callee";
    const char *err = c->in->op == OP_LOOP ? check_loop(c, callee) : NULL;
    if (err)
        return err;
    /* A local caller passes local blocks to a local callee; otherwise values
     * cross the call whole (a global caller splits them for an spmd callee,
     * an spmd caller runs an fn on its blocks). */
    int local = fn_is_local(c->fn) && fn_is_local(callee);
    for (int i = 0; i < callee->nparams; i++) {
        const Sig *p = &callee->params[i];
        Shape want = local ? shape_local(c->m, &p->type, &p->sh) : p->type;
        if (!shape_eq(arg_shape(c->fn, c->in, i), &want))
            return "call argument shape differs from the parameter";
    }
    if (callee->nresults != 1)
        *out = (Shape){DT_TUPLE, 0, {0}};
    else
        *out = local ? shape_local(c->m, &callee->results[0].type, &callee->results[0].sh) : callee->results[0].type;
    return NULL;
}

static const char *infer_tuple_element(InferCtx *c, Shape *out) {
    const Inst *call = &c->fn->insts[ir_arg(c->fn, c->in, 0)];
    const Fn *callee = callee_of(c->m, c->fn, call);
    int64_t i = c->in->nattrs == 1 ? ir_attr(c->fn, c->in, 0) : -1;
    if (!callee || callee->nresults < 2 || i < 0 || i >= callee->nresults)
        return "get-tuple-element of a value that is not a tuple";
    const Sig *r = &callee->results[i];
    *out = fn_is_local(c->fn) && fn_is_local(callee) ? shape_local(c->m, &r->type, &r->sh) : r->type;
    return NULL;
}

static const char *infer_return(InferCtx *c, Shape *out) {
    const Fn *fn = c->fn;
    if (c->in->nargs != fn->nresults)
        return "return count differs from the result count";
    for (int i = 0; i < fn->nresults; i++) {
        Shape want = fn_is_local(fn) ? shape_local(c->m, &fn->results[i].type, &fn->results[i].sh)
                              : fn->results[i].type;
        if (!shape_eq(arg_shape(fn, c->in, i), &want))
            return "returned shape differs from the result type";
    }
    *out = (Shape){DT_TUPLE, 0, {0}};
    return NULL;
}

/* The result of a collective whose dim_attr grows by the group size (or -1)
 * and whose shrink_attr shrinks by it (or -1). */
static const char *infer_collective(InferCtx *c, Shape *out, int dim_attr, int64_t grow, int64_t shrink_attr) {
    int first_axis = op_info[c->in->op].at_axes;
    *out = *c->arg[0];
    int64_t n = axes_product(c->m, c->fn, c->in, first_axis);
    if (n < 1 || c->in->nattrs <= first_axis)
        return "collective names no mesh axis";
    if (dim_attr >= 0) {
        int64_t d = ir_attr(c->fn, c->in, dim_attr);
        if (d < 0 || d >= out->rank)
            return "collective dim out of range";
        if (grow)
            out->dims[d] *= n;
    }
    if (shrink_attr >= 0) {
        int64_t d = ir_attr(c->fn, c->in, (int)shrink_attr);
        if (d < 0 || d >= out->rank || out->dims[d] % n)
            return "collective scatters a dim its group size does not divide";
        out->dims[d] /= n;
    }
    return NULL;
}

static const char *infer_permute(InferCtx *c, Shape *out) {
    *out = *c->arg[0];
    int64_t naxes = c->in->nattrs ? ir_attr(c->fn, c->in, 0) : 0;
    if (naxes < 1 || 1 + naxes > c->in->nattrs || (c->in->nattrs - 1 - naxes) % 2)
        return "collective-permute needs axes and (source, target) pairs";
    int64_t n = 1;
    for (int i = 1; i <= naxes; i++) {
        int64_t a = ir_attr(c->fn, c->in, i);
        if (a < 0 || a >= c->m->naxes)
            return "collective-permute names no mesh axis";
        n *= c->m->axis_size[a];
    }
    for (int i = 1 + (int)naxes; i < c->in->nattrs; i++)
        if (ir_attr(c->fn, c->in, i) < 0 || ir_attr(c->fn, c->in, i) >= n)
            return "collective-permute pair outside its group";
    return NULL;
}

const char *op_infer(const Module *m, const Fn *fn, const Inst *in, Shape *out) {
    if (in->op >= OP_COUNT)
        return "unknown op";
    if (op_info[in->op].nargs >= 0 && in->nargs != op_info[in->op].nargs)
        return "wrong operand count";
    InferCtx c = {m, fn, in, {0}};
    for (int i = 0; i < in->nargs && i < 4; i++)
        c.arg[i] = arg_shape(fn, in, i);
    switch ((OpClass)op_class[in->op]) {
    case C_LEAF: return infer_leaf(&c, out);
    case C_RANDOM: return infer_random(&c, out);
    case C_ELEMENTWISE: return infer_elementwise(&c, out);
    case C_CONVERT: return infer_convert(&c, out);
    case C_COMPARE: return infer_compare(&c, out);
    case C_SELECT: return infer_select(&c, out);
    case C_BROADCAST: return infer_broadcast(&c, out);
    case C_TRANSPOSE: return infer_transpose(&c, out);
    case C_RESHAPE: return infer_reshape(&c, out);
    case C_DOT: return infer_dot(&c, out);
    case C_REDUCE: return infer_reduce(&c, out);
    case C_SLICE: return infer_slice(&c, out);
    case C_DYNAMIC_SLICE: return infer_dynamic_slice(&c, out);
    case C_DYNAMIC_UPDATE_SLICE: return infer_dynamic_update_slice(&c, out);
    case C_CONCAT: return infer_concat(&c, out);
    case C_ROLL: return infer_roll(&c, out);
    case C_CUMSUM: return infer_cumsum(&c, out);
    case C_GATHER: return infer_gather(&c, out);
    case C_SCATTER: return infer_scatter(&c, out);
    case C_TOP_K: return infer_top_k(&c, out);
    case C_CALL: return infer_call(&c, out);
    case C_TUPLE_ELEMENT: return infer_tuple_element(&c, out);
    case C_RETURN: return infer_return(&c, out);
    case C_ALL_REDUCE: return infer_collective(&c, out, -1, 0, -1);
    case C_ALL_GATHER: return infer_collective(&c, out, op_info[in->op].at_dim, 1, -1);
    case C_REDUCE_SCATTER: return infer_collective(&c, out, -1, 0, op_info[in->op].at_dim);
    case C_ALL_TO_ALL: return infer_collective(&c, out, op_info[in->op].at_dim + 1, 1, op_info[in->op].at_dim);
    case C_PERMUTE: return infer_permute(&c, out);
    case C_DONE: {
        const Inst *start = &fn->insts[ir_arg(fn, in, 0)];
        *out = start->type;
        return op_is_collective(start->op) && (start->flags & INST_ASYNC) ? NULL : "done of something that is not a started collective";
    }
    }
    return "unknown op class";
}

/* ---- factor rules ---- */

static int add_factor(Rule *r, int64_t size, FactorKind kind) {
    r->size[r->nfactors] = size;
    r->kind[r->nfactors] = (uint8_t)kind;
    return r->nfactors++;
}

static void map_dim(Rule *r, int tensor, int dim, int factor) {
    r->f[tensor][dim][r->ndf[tensor][dim]++] = (uint8_t)factor;
}

static void set_rank(Rule *r, int tensor, int rank) { r->rank[tensor] = (uint8_t)rank; }

/* Operands and result share one factor per dim; `odd` dims are REPLICATE
 * factors (their extents may differ between tensors). */
static void rule_aligned(Rule *r, const Fn *fn, const Inst *in, uint32_t odd) {
    int res = in->nargs;
    for (int d = 0; d < in->type.rank; d++)
        add_factor(r, in->type.dims[d], (odd >> d & 1) ? FACTOR_REPLICATE : FACTOR_PASS);
    for (int t = 0; t <= res; t++) {
        const Shape *s = t < res ? arg_shape(fn, in, t) : &in->type;
        set_rank(r, t, s->rank);
        for (int d = 0; d < s->rank && s->rank == in->type.rank; d++)
            map_dim(r, t, d, d);
    }
}

/* The counters and the result share a factor per dim; the key's dim is a
 * REPLICATE factor of its own (the key is whole on every device), and the
 * bounds are scalars. */
static void rule_random(Rule *r, const Fn *fn, const Inst *in) {
    for (int d = 0; d < in->type.rank; d++)
        add_factor(r, in->type.dims[d], FACTOR_PASS);
    for (int t = 0; t <= in->nargs; t++) {
        const Shape *s = t < in->nargs ? arg_shape(fn, in, t) : &in->type;
        set_rank(r, t, s->rank);
        for (int d = 0; d < s->rank && t > 0; d++)
            map_dim(r, t, d, d);
    }
    map_dim(r, 0, 0, add_factor(r, 2, FACTOR_REPLICATE));
}

static void rule_broadcast(Rule *r, const Fn *fn, const Inst *in) {
    for (int d = 0; d < in->type.rank; d++) {
        add_factor(r, in->type.dims[d], FACTOR_PASS);
        map_dim(r, 1, d, d);
    }
    set_rank(r, 0, arg_shape(fn, in, 0)->rank);
    set_rank(r, 1, in->type.rank);
    for (int i = 0; i < in->nattrs; i++)
        map_dim(r, 0, i, (int)ir_attr(fn, in, i));
}

static void rule_transpose(Rule *r, const Fn *fn, const Inst *in) {
    const Shape *x = arg_shape(fn, in, 0);
    set_rank(r, 0, x->rank);
    set_rank(r, 1, x->rank);
    for (int d = 0; d < x->rank; d++) {
        add_factor(r, x->dims[d], FACTOR_PASS);
        map_dim(r, 0, d, d);
    }
    for (int i = 0; i < x->rank; i++)
        map_dim(r, 1, i, (int)ir_attr(fn, in, i));
}

static void rule_dot(Rule *r, const Fn *fn, const Inst *in) {
    const Shape *a = arg_shape(fn, in, 0), *b = arg_shape(fn, in, 1);
    int factor_of_label[64];
    for (int i = 0; i < 64; i++)
        factor_of_label[i] = -1;
    int ranks[3] = {a->rank, b->rank, in->type.rank}, at = 0;
    /* Result labels first, so that labels missing from it are reductions. */
    for (int i = 0; i < in->type.rank; i++) {
        int l = (int)ir_attr(fn, in, a->rank + b->rank + i);
        factor_of_label[l] = add_factor(r, in->type.dims[i], FACTOR_PASS);
    }
    for (int t = 0; t < 3; t++) {
        set_rank(r, t, ranks[t]);
        for (int d = 0; d < ranks[t]; d++, at++) {
            int l = (int)ir_attr(fn, in, at);
            if (factor_of_label[l] < 0)
                factor_of_label[l] = add_factor(r, t == 0 ? a->dims[d] : b->dims[d], FACTOR_REDUCTION);
            map_dim(r, t, d, factor_of_label[l]);
        }
    }
}

static void rule_reduce(Rule *r, const Fn *fn, const Inst *in) {
    const Shape *x = arg_shape(fn, in, 0);
    set_rank(r, 0, x->rank);
    set_rank(r, 1, in->type.rank);
    int next = 1, out = 0;
    for (int d = 0; d < x->rank; d++) {
        int reduced = next < in->nattrs && ir_attr(fn, in, next) == d;
        int f = add_factor(r, x->dims[d], reduced ? FACTOR_REDUCTION : FACTOR_PASS);
        map_dim(r, 0, d, f);
        if (reduced)
            next++;
        else
            map_dim(r, 1, out++, f);
    }
}

/* Decompose both shapes into common factors: [8, 6] -> [4, 12] becomes
 * factors 4, 2, 6 with operand dims {4,2},{6} and result dims {4},{2,6}.
 * Where extents share no divisor pattern (e.g. [2, 3] -> [3, 2]), the dims up
 * to the next common boundary form one REPLICATE factor. */
static void rule_reshape(Rule *r, const Fn *fn, const Inst *in) {
    const Shape *x = arg_shape(fn, in, 0), *y = &in->type;
    set_rank(r, 0, x->rank);
    set_rank(r, 1, y->rank);
    int i = 0, j = 0;
    int64_t a = x->rank ? x->dims[0] : 1, b = y->rank ? y->dims[0] : 1;
    while (i < x->rank && j < y->rank && r->nfactors < MAX_FACTORS - 1) {
        if (a == 1) { if (++i < x->rank) a = x->dims[i]; continue; }
        if (b == 1) { if (++j < y->rank) b = y->dims[j]; continue; }
        if (a % b == 0 || b % a == 0) {
            int64_t g = a < b ? a : b;
            int f = add_factor(r, g, FACTOR_PASS);
            map_dim(r, 0, i, f);
            map_dim(r, 1, j, f);
            a /= g;
            b /= g;
            continue;
        }
        /* Merge dims on both sides until the products meet. */
        int64_t pa = a, pb = b;
        int f = add_factor(r, 0, FACTOR_REPLICATE);
        map_dim(r, 0, i, f);
        map_dim(r, 1, j, f);
        while (pa != pb && i < x->rank && j < y->rank) {
            if (pa < pb) { if (++i < x->rank) { pa *= x->dims[i]; map_dim(r, 0, i, f); } }
            else if (++j < y->rank) { pb *= y->dims[j]; map_dim(r, 1, j, f); }
        }
        r->size[f] = pa;
        a = b = 1;
    }
}

/* The index dims are PASS factors of the indices and the result; a batch
 * dim of the table shares its index dim's factor, so a sharding of the batch
 * dim passes between all three and each device gathers from its own rows. */
static void rule_gather(Rule *r, const Fn *fn, const Inst *in) {
    const Shape *t = arg_shape(fn, in, 0), *ix = arg_shape(fn, in, 1);
    int dim = inst_dim(fn, in), out = 0, nb, factor_of_table_dim[MAX_RANK];
    const int64_t *pair = inst_gather_batch(fn, in, &nb);
    set_rank(r, 0, t->rank);
    set_rank(r, 1, ix->rank);
    set_rank(r, 2, in->type.rank);
    for (int d = 0; d < t->rank; d++)
        factor_of_table_dim[d] = -1;
    for (int d = 0; d < ix->rank; d++, out++) {
        int f = add_factor(r, ix->dims[d], FACTOR_PASS);
        map_dim(r, 1, d, f);
        map_dim(r, 2, out, f);
        for (int i = 0; i < nb; i++)
            if (pair[2 * i + 1] == d)
                factor_of_table_dim[pair[2 * i]] = f;
    }
    for (int d = 0; d < t->rank; d++) {
        int f = factor_of_table_dim[d];
        if (f < 0) {
            f = add_factor(r, t->dims[d], d == dim ? FACTOR_REPLICATE : FACTOR_PASS);
            if (d != dim)
                map_dim(r, 2, out++, f);
        }
        map_dim(r, 0, d, f);
    }
}

/* The transpose of rule_gather: the index dims are summed away (REDUCTION
 * factors of the indices and the updates' leading dims), the operand's
 * other dims pass between it, the updates' trailing dims and the result,
 * and the scattered dims between the operand and the result only. */
static void rule_scatter(Rule *r, const Fn *fn, const Inst *in) {
    int n = in->nargs - 2, upd = n + 1, res = n + 2, at;
    const Shape *x = arg_shape(fn, in, 0), *ix = arg_shape(fn, in, 1);
    uint32_t dims = scattered_dims(fn, in, x);
    for (int t = 0; t <= res; t++)
        set_rank(r, t, arg_shape(fn, in, t < res ? t : 0)->rank);   /* the result has the operand's shape */
    for (int d = 0; d < ix->rank; d++) {
        int f = add_factor(r, ix->dims[d], FACTOR_REDUCTION);
        for (int t = 1; t <= upd; t++)
            map_dim(r, t, d, f);
    }
    at = ix->rank;
    for (int d = 0; d < x->rank; d++) {
        int f = add_factor(r, x->dims[d], FACTOR_PASS);
        map_dim(r, 0, d, f);
        map_dim(r, res, d, f);
        if (!(dims >> d & 1))
            map_dim(r, upd, at++, f);
    }
}

static uint32_t dims_changed(const Fn *fn, const Inst *in) {
    uint32_t odd = 0;
    for (int t = 0; t < in->nargs; t++) {
        const Shape *s = arg_shape(fn, in, t);
        for (int d = 0; d < s->rank && d < in->type.rank; d++)
            if (s->dims[d] != in->type.dims[d])
                odd |= 1u << d;
    }
    return odd;
}

int op_rule(const Fn *fn, const Inst *in, Rule *r) {
    /* Only the counts need zeroing: f[][][] is read below ndf alone.  Rules
     * are built for every op in every propagation sweep, so this matters. */
    r->nfactors = 0;
    memset(r->rank, 0, sizeof r->rank);
    memset(r->ndf, 0, sizeof r->ndf);
    r->ntensors = in->nargs + 1;
    if (r->ntensors > MAX_RULE_TENSORS)
        return 0;
    switch ((OpClass)op_class[in->op]) {
    case C_ELEMENTWISE: case C_CONVERT: case C_COMPARE: case C_SELECT:
        rule_aligned(r, fn, in, 0);
        return 1;
    case C_ROLL:
        rule_aligned(r, fn, in, 1u << ir_attr(fn, in, 1));
        return 1;
    case C_TOP_K:
        /* Leading dims pass through; the selected dim must be whole. */
        rule_aligned(r, fn, in, 1u << (in->type.rank - 1));
        return 1;
    case C_CUMSUM:
        /* Every element of the scanned dim depends on the rows before it:
         * the dim is never split by propagation. */
        rule_aligned(r, fn, in, 1u << ir_attr(fn, in, 0));
        return 1;
    case C_SLICE: case C_CONCAT:
        rule_aligned(r, fn, in, dims_changed(fn, in));
        return 1;
    case C_DYNAMIC_SLICE:
        /* The offsets are scalars: rule_aligned gives them no dims. */
        rule_aligned(r, fn, in, dims_changed(fn, in));
        return 1;
    case C_DYNAMIC_UPDATE_SLICE:
        /* A dim the update fills only part of (the stacked dim of a loop's
         * [T, ...] array) is never split; the others follow the update. */
        rule_aligned(r, fn, in, dims_changed(fn, in));
        return 1;
    case C_BROADCAST: rule_broadcast(r, fn, in); return 1;
    case C_TRANSPOSE: rule_transpose(r, fn, in); return 1;
    case C_DOT: rule_dot(r, fn, in); return 1;
    case C_REDUCE: rule_reduce(r, fn, in); return 1;
    case C_RESHAPE: rule_reshape(r, fn, in); return 1;
    case C_GATHER: rule_gather(r, fn, in); return 1;
    case C_SCATTER: rule_scatter(r, fn, in); return 1;
    case C_RANDOM: rule_random(r, fn, in); return 1;
    default:
        return 0;
    }
}

/* ---- communication volume ---- */

int64_t collective_bytes(const Module *m, const Fn *fn, const Inst *in) {
    const Shape *x = arg_shape(fn, in, 0);
    int64_t bytes = shape_elems(x) * dtype_size(x->dtype);
    if (!op_is_collective(in->op))
        return 0;
    if (in->op == OP_COLLECTIVE_PERMUTE)
        return bytes;
    int64_t k = axes_product(m, fn, in, op_info[in->op].at_axes);
    /* In double, saturated: huge types would overflow the products. */
    double b = (double)bytes, sent;
    switch ((Op)in->op) {
    case OP_ALL_REDUCE: sent = 2.0 * (double)(k - 1) * b / (double)k; break;  /* reduce-scatter + all-gather */
    case OP_ALL_GATHER: sent = (double)(k - 1) * b; break;                      /* its block to every other member */
    default: sent = (double)(k - 1) * b / (double)k; break;                     /* all but its own share */
    }
    return sent >= 9.2e18 ? INT64_MAX : (int64_t)sent;
}

void dot_dims(const Fn *fn, const Inst *in, DotDims *d) {
    const Shape *a = arg_shape(fn, in, 0), *b = arg_shape(fn, in, 1);
    const int64_t *la = &fn->ints[in->attrs], *lb = la + a->rank, *lr = lb + b->rank;
    d->nbatch = d->ncontract = 0;
    for (int i = 0; i < a->rank; i++)
        for (int j = 0; j < b->rank; j++) {
            if (la[i] != lb[j])
                continue;
            int kept = 0;
            for (int k = 0; k < in->type.rank; k++)
                kept |= lr[k] == la[i];
            if (kept) {
                d->lhs_batch[d->nbatch] = i;
                d->rhs_batch[d->nbatch++] = j;
            } else {
                d->lhs_contract[d->ncontract] = i;
                d->rhs_contract[d->ncontract++] = j;
            }
        }
}

/* Is the dot's operand `side` a gather it can read rows of instead
 * (sk_gather_dot): a rank-3 table gathered on dim 0, without batch dims,
 * one of whose other two dims the dot contracts with the last dim of the
 * other operand, x, whose leading dims are the leading index dims in order,
 * and a result of the index dims then the table's free dim? */
int gather_dot_form(const Fn *fn, const Inst *dot, int side, GatherDot *gd) {
    const Inst *g = &fn->insts[ir_arg(fn, dot, side)];
    const Shape *t = g->op == OP_GATHER ? arg_shape(fn, g, 0) : NULL;
    int nb;
    if (!t || t->rank != 3 || inst_dim(fn, g) != 0 || (inst_gather_batch(fn, g, &nb), nb) || !shape_elems(t) ||
        dot_is_wide(fn, dot))      /* sk_gather_dot writes its operands' dtype */
        return 0;
    const Shape *gs = &g->type, *xs = arg_shape(fn, dot, 1 - side);
    const int64_t *la = &fn->ints[dot->attrs], *lb = la + arg_shape(fn, dot, 0)->rank;
    const int64_t *gl = side == 0 ? la : lb, *xl = side == 0 ? lb : la, *ol = lb + arg_shape(fn, dot, 1)->rank;
    int r = gs->rank - 2, xr = xs->rank, lead = xr - 1;
    if (xr < 1 || lead > r || dot->type.rank != r + 1)
        return 0;
    int trans = xl[lead] == gl[r + 1];               /* contracts the table's last dim: rows of w[e] are [n, k] */
    if (!trans && xl[lead] != gl[r])
        return 0;
    for (int d = 0; d < lead; d++)
        if (xl[d] != gl[d])
            return 0;
    for (int d = 0; d < r; d++)
        if (ol[d] != gl[d])
            return 0;
    if (ol[r] != gl[trans ? r : r + 1])
        return 0;
    gd->gather = ir_arg(fn, dot, side);
    gd->trans = trans;
    gd->e = t->dims[0];
    gd->k = trans ? t->dims[2] : t->dims[1];
    gd->n = trans ? t->dims[1] : t->dims[2];
    gd->rows = shape_elems(&g->type) / (t->dims[1] * t->dims[2]);
    gd->rep = 1;
    for (int d = lead; d < r; d++)
        gd->rep *= gs->dims[d];
    return 1;
}
