/* The adjoint of every IR op: given the cotangent c of the running
 * instruction's value, hand each operand its share (docs/grad.md has the
 * table).  Forward values are read in the cotangent dtype (g_fwd), so
 * bf16 and f16 programs take their gradients in f32.  Where JAX defines a
 * choice (ties of max and min, abs and relu at 0, pow at 0) the rule
 * makes the same one. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- emitting, briefly ----
 *
 * Each of these emits an instruction, so no call takes two of them as
 * arguments: C leaves the order of argument evaluation open, and gcc and
 * clang would emit the instructions in different orders (the same
 * gradient, another program).  Nested calls, one per level, are ordered. */

static int op2(Grad *g, Op op, int a, int b) { return g_emit(g, op, (int32_t[]){a, b}, 2, NULL, 0, NULL); }
static int op1(Grad *g, Op op, int a) { return g_emit(g, op, (int32_t[]){a}, 1, NULL, 0, NULL); }
static const Shape *dst_type(Grad *g, int x) { return &g->dst->insts[x].type; }
static int like(Grad *g, double value, int x) { return g_const(g, value, dst_type(g, x)); }
static int compare(Grad *g, int a, int b, Cmp cmp) {
    int64_t attr = cmp;
    return g_emit(g, OP_COMPARE, (int32_t[]){a, b}, 2, &attr, 1, NULL);
}
static int select3(Grad *g, int p, int a, int b) { return g_emit(g, OP_SELECT, (int32_t[]){p, a, b}, 3, NULL, 0, NULL); }
static int as_float(Grad *g, int pred, int like_x) {      /* bool -> 1.0 / 0.0 */
    int one = like(g, 1, like_x), zero = like(g, 0, like_x);
    return select3(g, pred, one, zero);
}
static int src_arg(const Grad *g, int i) { return ir_arg(g->src, &g->src->insts[g->v], i); }
static int wants(const Grad *g, int i) { return g->active[src_arg(g, i)]; }
static int fwd_arg(Grad *g, int i) { return g_fwd(g, src_arg(g, i)); }
static int64_t attr(const Grad *g, int i) { return ir_attr(g->src, &g->src->insts[g->v], i); }
static int i32_const(Grad *g, int64_t k) { return g_const(g, (double)k, &(Shape){DT_I32, 0, {0}}); }

static int reshape_to(Grad *g, int x, const Shape *to) {
    return shape_eq(dst_type(g, x), to) ? x : g_emit(g, OP_RESHAPE, (int32_t[]){x}, 1, NULL, 0, to);
}

static int reduce_sum(Grad *g, int x, uint32_t dims) {
    int64_t attrs[1 + MAX_RANK];
    int n = 0;
    attrs[n++] = RED_SUM;
    for (int d = 0; d < dst_type(g, x)->rank; d++)
        if (dims >> d & 1)
            attrs[n++] = d;
    return n == 1 ? x : g_emit(g, OP_REDUCE, (int32_t[]){x}, 1, attrs, n, NULL);
}

/* x broadcast to `to`, its dim i becoming dim map[i]. */
static int broadcast(Grad *g, int x, const Shape *to, const int64_t *map) {
    Shape s = *to;
    s.dtype = dst_type(g, x)->dtype;
    return g_emit(g, OP_BROADCAST, (int32_t[]){x}, 1, map, dst_type(g, x)->rank, &s);
}

/* i32 x clamped into [lo, hi]. */
static int clamp(Grad *g, int x, int64_t lo, int64_t hi) {
    int l = g_const(g, (double)lo, dst_type(g, x)), h = g_const(g, (double)hi, dst_type(g, x));
    return op2(g, OP_MIN, op2(g, OP_MAX, x, l), h);
}

/* ---- elementwise ---- */

/* d/dx of the unary op at x (ct dtype), its result y, times c. */
static int unary_adjoint(Grad *g, Op op, int c, int x, int y) {
    switch (op) {
    case OP_COPY: return c;
    case OP_NEGATE: return op1(g, OP_NEGATE, c);
    case OP_ABS: {           /* sign(x), 0 at 0 */
        int z = like(g, 0, x);
        int below = compare(g, x, z, CMP_LT), minus = like(g, -1, x);
        int negative = select3(g, below, minus, z);
        int above = compare(g, x, z, CMP_GT), plus = like(g, 1, x);
        int sign = select3(g, above, plus, negative);
        return op2(g, OP_MUL, c, sign);
    }
    case OP_SQUARE: return op2(g, OP_MUL, c, op2(g, OP_MUL, x, like(g, 2, x)));
    case OP_RELU: {
        int positive = compare(g, x, like(g, 0, x), CMP_GT);
        return select3(g, positive, c, like(g, 0, c));
    }
    case OP_EXP: return op2(g, OP_MUL, c, y);
    case OP_LOG: return op2(g, OP_DIV, c, x);
    case OP_TANH: {
        int one = like(g, 1, y);
        return op2(g, OP_MUL, c, op2(g, OP_SUB, one, op2(g, OP_MUL, y, y)));
    }
    case OP_SQRT: return op2(g, OP_DIV, op2(g, OP_MUL, c, like(g, 0.5, c)), y);
    case OP_RSQRT:           /* -x^(-3/2) / 2 = -y / (2x) */
        return op2(g, OP_MUL, c, op2(g, OP_DIV, op2(g, OP_MUL, y, like(g, -0.5, y)), x));
    case OP_SIN: return op2(g, OP_MUL, c, op1(g, OP_COS, x));
    case OP_COS: return op1(g, OP_NEGATE, op2(g, OP_MUL, c, op1(g, OP_SIN, x)));
    case OP_LOGISTIC: return op2(g, OP_MUL, c, op2(g, OP_MUL, y, op2(g, OP_SUB, like(g, 1, y), y)));
    case OP_GELU: {
        /* The library's tanh form: x * s(u), u = k (x + a x^3), s the
         * logistic; d/dx = s(u) + x s(u) (1 - s(u)) k (1 + 3 a x^2). */
        const double k = 1.5957691216057308, a = 0.044715;
        int x2 = op2(g, OP_MUL, x, x);
        int ka = like(g, k, x), aa = like(g, a, x);
        int u = op2(g, OP_MUL, ka, op2(g, OP_ADD, x, op2(g, OP_MUL, aa, op2(g, OP_MUL, x2, x))));
        int s = op1(g, OP_LOGISTIC, u);
        int kb = like(g, k, x), one = like(g, 1, x), a3 = like(g, 3 * a, x);
        int du = op2(g, OP_MUL, kb, op2(g, OP_ADD, one, op2(g, OP_MUL, a3, x2)));
        int xs = op2(g, OP_MUL, x, s), one_s = like(g, 1, s);
        int ds = op2(g, OP_MUL, xs, op2(g, OP_MUL, op2(g, OP_SUB, one_s, s), du));
        return op2(g, OP_MUL, c, op2(g, OP_ADD, s, ds));
    }
    case OP_ERF: {           /* 2/sqrt(pi) exp(-x^2) */
        int e = op1(g, OP_EXP, op1(g, OP_NEGATE, op2(g, OP_MUL, x, x)));
        return op2(g, OP_MUL, c, op2(g, OP_MUL, e, like(g, 1.1283791670955126, x)));
    }
    case OP_GELU_EXACT: {    /* Phi(x) + x phi(x): Phi the normal CDF, phi its density */
        int erf = op1(g, OP_ERF, op2(g, OP_MUL, x, like(g, 0.7071067811865476, x)));
        int one_erf = op2(g, OP_ADD, erf, like(g, 1, x));
        int cdf = op2(g, OP_MUL, one_erf, like(g, 0.5, x));
        int x2 = op2(g, OP_MUL, x, x);
        int pdf = op1(g, OP_EXP, op2(g, OP_MUL, x2, like(g, -0.5, x)));
        int xpdf = op2(g, OP_MUL, x, pdf);
        int dx = op2(g, OP_ADD, cdf, op2(g, OP_MUL, xpdf, like(g, 0.3989422804014327, x)));
        return op2(g, OP_MUL, c, dx);
    }
    default: no_gradient(g, "an elementwise op without a derivative");
    }
}

/* The share of x in max(x, y) (or min): 1 where it wins, 1/2 on ties, as
 * JAX's lax.max. */
static int winner_share(Grad *g, int x, int y, Cmp wins) {
    int tie = compare(g, x, y, CMP_EQ), halves = like(g, 0.5, x), zero = like(g, 0, x);
    int half = select3(g, tie, halves, zero);
    int won = compare(g, x, y, wins), one = like(g, 1, x);
    return select3(g, won, one, half);
}

static void binary_adjoint(Grad *g, Op op, int c) {
    if (op == OP_ADD || op == OP_SUB || op == OP_REM) {      /* the operands' values are not needed */
        give(g, 0, c);
        if (op == OP_ADD)
            give(g, 1, c);
        else if (wants(g, 1) && op == OP_SUB)
            give(g, 1, op1(g, OP_NEGATE, c));
        else if (wants(g, 1))
            no_gradient(g, "the remainder with respect to its divisor");
        return;
    }
    int a = fwd_arg(g, 0), b = fwd_arg(g, 1);     /* in the cotangent dtype */
    switch (op) {
    case OP_MUL:
        if (wants(g, 0))
            give(g, 0, op2(g, OP_MUL, c, b));
        if (wants(g, 1))
            give(g, 1, op2(g, OP_MUL, c, a));
        return;
    case OP_DIV: {
        int ca = op2(g, OP_DIV, c, b);
        give(g, 0, ca);
        if (wants(g, 1))
            give(g, 1, op1(g, OP_NEGATE, op2(g, OP_MUL, ca, g_fwd(g, g->v))));
        return;
    }
    case OP_MAX: case OP_MIN: {
        Cmp wins = op == OP_MAX ? CMP_GT : CMP_LT;
        if (wants(g, 0))
            give(g, 0, op2(g, OP_MUL, c, winner_share(g, a, b, wins)));
        if (wants(g, 1))
            give(g, 1, op2(g, OP_MUL, c, winner_share(g, b, a, wins)));
        return;
    }
    case OP_POW: {           /* d/da = b a^(b-1); d/db = log(a) a^b, with log(0) taken as 0 */
        if (wants(g, 0))
            give(g, 0, op2(g, OP_MUL, c, op2(g, OP_MUL, b, op2(g, OP_POW, a, op2(g, OP_SUB, b, like(g, 1, b))))));
        if (wants(g, 1)) {
            int zero = compare(g, a, like(g, 0, a), CMP_EQ), one = like(g, 1, a);
            int log_a = op1(g, OP_LOG, select3(g, zero, one, a)), y = g_fwd(g, g->v);
            give(g, 1, op2(g, OP_MUL, c, op2(g, OP_MUL, log_a, y)));
        }
        return;
    }
    default: no_gradient(g, "an elementwise op without a derivative");
    }
}

/* ---- structure ---- */

static void broadcast_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int r = src_type(g, src_arg(g, 0))->rank;
    uint32_t image = 0;
    for (int i = 0; i < r; i++)
        image |= 1u << attr(g, i);
    int x = reduce_sum(g, c, ~image & ((1u << in->type.rank) - 1));
    int64_t perm[MAX_RANK];      /* operand dim i is the reduced value's dim rank(map[i]) */
    int sorted = 1;
    for (int i = 0; i < r; i++) {
        perm[i] = 0;
        for (int j = 0; j < r; j++)
            perm[i] += attr(g, j) < attr(g, i);
        sorted &= perm[i] == i;
    }
    if (!sorted)
        x = g_emit(g, OP_TRANSPOSE, (int32_t[]){x}, 1, perm, r, NULL);
    give(g, 0, x);
}

static void transpose_adjoint(Grad *g, int c) {
    int r = src_type(g, g->v)->rank;
    int64_t inverse[MAX_RANK];
    for (int i = 0; i < r; i++)
        inverse[attr(g, i)] = i;
    give(g, 0, g_emit(g, OP_TRANSPOSE, (int32_t[]){c}, 1, inverse, r, NULL));
}

static void reduce_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int x = src_arg(g, 0);
    Shape xs = ct_shape(g, x);
    uint32_t reduced = 0;
    for (int i = 1; i < in->nattrs; i++)
        reduced |= 1u << attr(g, i);
    int64_t map[MAX_RANK];
    for (int d = 0, j = 0; d < xs.rank; d++)
        if (!(reduced >> d & 1))
            map[j++] = d;
    int spread = broadcast(g, c, &xs, map);
    if ((Reducer)attr(g, 0) == RED_SUM) {
        give(g, 0, spread);
        return;
    }
    /* max and min: shared equally by the elements that attain it (JAX). */
    int xf = g_fwd(g, x), extreme = broadcast(g, g_fwd(g, g->v), &xs, map);
    int hit = as_float(g, compare(g, xf, extreme, CMP_EQ), spread);
    int count = broadcast(g, reduce_sum(g, hit, reduced), &xs, map);
    give(g, 0, op2(g, OP_MUL, op2(g, OP_DIV, spread, count), hit));
}

static int has_label(const int64_t *labels, int n, int64_t l) {
    for (int i = 0; i < n; i++)
        if (labels[i] == l)
            return 1;
    return 0;
}

/* The dot of c (labels lc) and x (labels lx) whose result has the labels
 * `want`, in that order: dots keep HLO's result order (batch, then c's,
 * then x's free dims; compiler/ir/verify.c), so a transpose may follow. */
static int dot_labelled(Grad *g, int c, const int64_t *lc, int rc, int x, const int64_t *lx, int rx,
                        const int64_t *want, int nwant) {
    /* (c and x are just the two operands, in order) */
    int64_t attrs[3 * MAX_RANK], order[MAX_RANK], perm[MAX_RANK];
    int n = 0, k = 0;
    for (int i = 0; i < rc; i++)
        attrs[n++] = lc[i];
    for (int i = 0; i < rx; i++)
        attrs[n++] = lx[i];
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < (pass == 2 ? rx : rc); i++) {
            int64_t l = pass == 2 ? lx[i] : lc[i];
            int in_x = has_label(lx, rx, l), in_c = has_label(lc, rc, l);
            if (has_label(want, nwant, l) && (pass == 0 ? in_x : pass == 1 ? !in_x : !in_c))
                order[k++] = l;
        }
    memcpy(attrs + n, order, sizeof(int64_t) * (size_t)k);
    int y = g_emit(g, OP_DOT, (int32_t[]){c, x}, 2, attrs, n + k, NULL);
    int identity = 1;
    for (int i = 0; i < nwant; i++) {
        for (int j = 0; j < k; j++)
            if (order[j] == want[i])
                perm[i] = j;
        identity &= perm[i] == i;
    }
    return identity ? y : g_emit(g, OP_TRANSPOSE, (int32_t[]){y}, 1, perm, nwant, NULL);
}

/* The cotangent of a dot's operand `side` is the dot of c with the other
 * operand, keeping the side's labels; labels the side sums alone are
 * spread back by a broadcast. */
static void dot_adjoint(Grad *g, int c, int side) {
    const Inst *in = &g->src->insts[g->v];
    if (!wants(g, side))
        return;
    int ra = src_type(g, src_arg(g, 0))->rank, rb = src_type(g, src_arg(g, 1))->rank, ro = in->type.rank;
    const int64_t *labels = ir_attrs(g->src, in), *out = labels + ra + rb;
    const int64_t *mine = side ? labels + ra : labels, *other = side ? labels : labels + ra;
    int rm = side ? rb : ra, rt = side ? ra : rb;
    int64_t want[MAX_RANK], map[MAX_RANK];
    int kept = 0;
    for (int i = 0; i < rm; i++) {
        if (has_label(mine, i, mine[i]))
            no_gradient(g, "a dot that repeats a label in one operand");
        if (has_label(out, ro, mine[i]) || has_label(other, rt, mine[i])) {
            want[kept] = mine[i];
            map[kept++] = i;
        }
    }
    /* c first for the lhs, second for the rhs: a matmul's gradients need
     * no transpose then. */
    int x = side ? dot_labelled(g, fwd_arg(g, 0), other, rt, c, out, ro, want, kept)
                 : dot_labelled(g, c, out, ro, fwd_arg(g, 1), other, rt, want, kept);
    if (kept < rm) {
        Shape s = ct_shape(g, src_arg(g, side));
        x = broadcast(g, x, &s, map);
    }
    give(g, side, x);
}

/* A bf16 or f16 dot's cotangent rounded to its operands' dtype: the dots
 * of its backward pass multiply at the forward's precision, summing in f32
 * (wide_dots.c makes them wide dots of the narrow values), as JAX's
 * transpose of a bf16 dot and PyTorch's autocast do; the cotangents
 * themselves stay f32. */
static int operand_precision(Grad *g, int c) {
    int dt = dot_operand_dtype(g->src, &g->src->insts[g->v]);
    return ct_dtype(dt) == dt ? c : g_cast(g, g_cast(g, c, dt), ct_dtype(dt));
}

/* ---- attention ----
 *
 * A softmax attention (attention_form, compiler/ir/attention.c) whose
 * chain only its last dot reads is differentiated as one: the backward
 * pass recomputes the probabilities p from q and k, as FlashAttention
 * does, rather than keep the chain's [..., S, T] values as residuals, and
 * takes the softmax's gradient in its closed form, ds = p (dp - sum_t p dp)
 * (the max's share, 0 in exact arithmetic, is left out, as JAX's softmax
 * does).  The forward pass then keeps only q, k and v, and its chain folds
 * into one sk_attention call (compiler/schedule).  A bf16 chain's dots
 * multiply at the forward's precision, as operand_precision has the
 * others do; the softmax's gradient is f32. */

/* grad's per-fn scratch for the rule: each value's reads, and a map of
 * re-emitted values. */
static void attention_scratch(Grad *g) {
    if (g->uses)
        return;
    size_t n = (size_t)g->src->ninsts + 1;
    g->uses = arena_alloc(g->m->arena, sizeof(int) * n);
    memset(g->uses, 0, sizeof(int) * n);
    for (int v = 0; v < g->src->ninsts; v++)
        for (int i = 0; i < g->src->insts[v].nargs; i++)
            g->uses[ir_arg(g->src, &g->src->insts[v], i)]++;
    g->remap = arena_alloc(g->m->arena, sizeof(int32_t) * n);
}

static int is_member(const AttentionForm *af, int x) {
    for (int i = 0; i < af->nmembers; i++)
        if (af->members[i] == x)
            return 1;
    return 0;
}

/* Is x computed from constants and iotas alone (a causal mask, a scale)? */
static int constant_tree(const Fn *src, int x, int depth) {
    const Inst *in = &src->insts[x];
    if (in->op == OP_CONSTANT || in->op == OP_IOTA)
        return 1;
    if (depth == 0 || in->flags || !(in->op == OP_BROADCAST || in->op == OP_COMPARE || in->op == OP_SELECT ||
                                      in->op == OP_CONVERT || in->op == OP_NEGATE))
        return 0;
    for (int i = 0; i < in->nargs; i++)
        if (!constant_tree(src, ir_arg(src, in, i), depth - 1))
            return 0;
    return 1;
}

/* Src value x in the backward pass: a constant tree emitted again (it
 * costs no residual), else the forward value. */
static int backward_value(Grad *g, int x) {
    if (!constant_tree(g->src, x, 6))
        return g_fwd(g, x);
    const Inst *in = &g->src->insts[x];
    for (int i = 0; i < in->nargs; i++)
        g->remap[ir_arg(g->src, in, i)] = backward_value(g, ir_arg(g->src, in, i));
    return reemit(g->m, g->dst, g->src, x, g->remap);
}

/* The rule of the attention's last dot (g->v), or 0 where it is none. */
static int attention_adjoint(Grad *g, int c) {
    int last = g->v, d1 = -1, t = -1, spread_mask = -1, prob = -1;
    AttentionForm af;
    if (g->src->insts[last].op != OP_DOT || g->varies || !attention_form(g->src, last, &af))
        return 0;
    attention_scratch(g);
    if (!attention_private(g->src, &af, last, g->uses))
        return 0;
    const int *members = af.members;
    /* The probabilities again, from q, k and the mask: the members
     * re-emitted in order, what they read from outside found first. */
    for (int i = 0; i < af.nmembers; i++) {
        const Inst *in = &g->src->insts[members[i]];
        for (int a = 0; a < in->nargs; a++) {
            int x = ir_arg(g->src, in, a);
            if (!is_member(&af, x))
                g->remap[x] = backward_value(g, x);
        }
        g->remap[members[i]] = reemit(g->m, g->dst, g->src, members[i], g->remap);
        d1 = in->op == OP_DOT ? members[i] : d1;
        prob = in->op == OP_DIV ? members[i] : prob;     /* the last divide: the f32 probabilities */
        spread_mask = in->op == OP_BROADCAST && ir_arg(g->src, in, 0) == af.mask ? members[i] : spread_mask;
        t = in->op == OP_REDUCE && inst_reducer(g->src, in) == RED_SUM ? (int)ir_attr(g->src, in, 1) : t;
    }
    /* dv and dp by the dot's rule, reading the recomputed p (in bf16 as
     * the forward's product read it, and the cotangent at its precision). */
    int p = members[af.nmembers - 1], pside = src_arg(g, 0) == p ? 0 : 1, pc = g->remap[prob];
    int kept = g->fwd[p], kept_ct = g->fwd_ct[p];
    g->fwd[p] = g->remap[p];
    g->fwd_ct[p] = -1;
    c = operand_precision(g, c);
    dot_adjoint(g, c, 1 - pside);
    dot_adjoint(g, c, pside);
    g->fwd[p] = kept;
    g->fwd_ct[p] = kept_ct;
    int dp = g->ct[p];
    g->ct[p] = -1;                       /* the members' rules do not run */
    if (dp < 0)
        return 1;
    Shape ps = *dst_type(g, pc);
    int64_t rows[MAX_RANK];
    for (int d = 0, j = 0; d < ps.rank; d++)
        if (d != t)
            rows[j++] = d;
    int sum = broadcast(g, reduce_sum(g, op2(g, OP_MUL, dp, pc), 1u << t), &ps, rows);
    int ds = op2(g, OP_MUL, pc, op2(g, OP_SUB, dp, sum));   /* the logits' cotangent */
    if (spread_mask >= 0 && g->active[af.mask]) {   /* the mask's share: summed over the batch dims */
        g->v = spread_mask;
        broadcast_adjoint(g, ds);
    }
    g->v = d1;                           /* q and k's shares by the scores dot's rule */
    int dscores = operand_precision(g, op2(g, OP_MUL, ds, like(g, af.scale, ds)));
    dot_adjoint(g, dscores, 0);
    dot_adjoint(g, dscores, 1);
    g->v = last;
    return 1;
}

/* c padded with zeros to the operand's shape: rows [lo, hi) of dim d. */
static int pad(Grad *g, int c, int d, int64_t lo, int64_t hi, int64_t n) {
    return g_tile(g, &(SlicePiece){c, -1, d, lo, hi}, 1, n);
}

/* A slice along one dim is a piece of its operand's cotangent (give_slice:
 * w[l] for every l tile it); along several, padded here dim by dim. */
static void slice_adjoint(Grad *g, int c) {
    const Shape *x = src_type(g, src_arg(g, 0));
    int cut = -1, ncut = 0;
    for (int d = 0; d < x->rank; d++)
        if (attr(g, d) != 0 || attr(g, x->rank + d) != x->dims[d])
            cut = d, ncut++;
    if (ncut == 1) {
        give_slice(g, 0, c, cut, attr(g, cut), attr(g, x->rank + cut));
        return;
    }
    for (int d = 0; d < x->rank; d++)
        c = pad(g, c, d, attr(g, d), attr(g, x->rank + d), x->dims[d]);
    give(g, 0, c);
}

/* Positions iota(shape, d) + offset: the index tensors of a scatter. */
static int positions(Grad *g, const Shape *shape, int d, int offset) {
    Shape s = *shape;
    s.dtype = DT_I32;
    int64_t dim = d;
    int iota = g_emit(g, OP_IOTA, NULL, 0, &dim, 1, &s);
    return offset < 0 ? iota : op2(g, OP_ADD, iota, g_emit(g, OP_BROADCAST, (int32_t[]){offset}, 1, NULL, 0, &s));
}

/* The offsets clamp as the forward slice's do; the window is scattered
 * into zeros. */
static void dynamic_slice_adjoint(Grad *g, int c) {
    const Shape *x = src_type(g, src_arg(g, 0)), *r = src_type(g, g->v);
    if (!x->rank) {
        give(g, 0, c);
        return;
    }
    int32_t args[2 + MAX_RANK];
    int64_t dims[MAX_RANK];
    Shape xs = ct_shape(g, src_arg(g, 0));
    args[0] = g_const(g, 0, &xs);
    for (int d = 0; d < x->rank; d++) {
        args[1 + d] = positions(g, r, d, clamp(g, g->fwd[src_arg(g, 1 + d)], 0, x->dims[d] - r->dims[d]));
        dims[d] = d;
    }
    args[1 + x->rank] = c;
    give(g, 0, g_emit(g, OP_SCATTER, args, 2 + x->rank, dims, x->rank, NULL));
}

/* The update's cotangent is the window of c, read at the same (clamped)
 * offsets; the operand's is c with that window zeroed.  The zeros wait for
 * a copy of the window (a select that always picks them), so the zeroing
 * runs after every read of c's window: in a loop's backward pass, where c
 * is a carried cotangent (a scan's stacked outputs), it may then write c's
 * slot in place (codegen's carried_in_place) instead of copying c. */
static void dynamic_update_slice_adjoint(Grad *g, int c) {
    int r = src_type(g, g->v)->rank;
    int32_t args[2 + MAX_RANK];
    Shape us = ct_shape(g, src_arg(g, 1)), never = us;
    never.dtype = DT_BOOL;
    args[0] = args[1] = c;
    for (int d = 0; d < r; d++)
        args[2 + d] = g->fwd[src_arg(g, 2 + d)];
    int zeros = g_const(g, 0, &us);
    if (wants(g, 1)) {
        int window = op1(g, OP_COPY, g_emit(g, OP_DYNAMIC_SLICE, args + 1, 1 + r, NULL, 0, &us));
        give(g, 1, window);
        zeros = select3(g, g_const(g, 0, &never), window, zeros);
    }
    args[1] = zeros;
    if (wants(g, 0))
        give(g, 0, g_emit(g, OP_DYNAMIC_UPDATE_SLICE, args, 2 + r, NULL, 0, NULL));
}

static void concat_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int dim = (int)attr(g, 0);
    const Shape *r = &in->type;
    int64_t at = 0;
    for (int i = 0; i < in->nargs; i++) {
        int64_t len = src_type(g, src_arg(g, i))->dims[dim], bounds[2 * MAX_RANK];
        for (int d = 0; d < r->rank; d++) {
            bounds[d] = d == dim ? at : 0;
            bounds[r->rank + d] = d == dim ? at + len : r->dims[d];
        }
        give(g, i, g_emit(g, OP_SLICE, (int32_t[]){c}, 1, bounds, 2 * r->rank, NULL));
        at += len;
    }
}

static void roll_adjoint(Grad *g, int c) {
    int64_t n = src_type(g, g->v)->dims[attr(g, 1)];
    int64_t back[2] = {((-attr(g, 0)) % n + n) % n, attr(g, 1)};
    give(g, 0, back[0] ? g_emit(g, OP_ROLL, (int32_t[]){c}, 1, back, 2, NULL) : c);
}

/* The transpose of a prefix sum is the suffix sum: total - prefix + c. */
static void cumsum_adjoint(Grad *g, int c) {
    int dim = (int)attr(g, 0);
    const Shape *s = dst_type(g, c);
    int64_t map[MAX_RANK];
    for (int d = 0, j = 0; d < s->rank; d++)
        if (d != dim)
            map[j++] = d;
    int total = broadcast(g, reduce_sum(g, c, 1u << dim), s, map);
    int64_t at = dim;
    int prefix = g_emit(g, OP_CUMSUM, (int32_t[]){c}, 1, &at, 1, NULL);
    give(g, 0, op2(g, OP_ADD, op2(g, OP_SUB, total, prefix), c));
}

/* The transpose of a gather is a scatter-add of c into zeros at the same
 * (clamped) positions; a batch dim scatters along its own iota. */
static void gather_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int t = src_arg(g, 0), ix = src_arg(g, 1), dim = inst_dim(g->src, in), nb;
    const int64_t *pair = inst_gather_batch(g->src, in, &nb);
    const Shape *ts = src_type(g, t), *is = src_type(g, ix);
    Shape zs = ct_shape(g, t);
    int32_t args[3 + MAX_RANK];
    int64_t dims[1 + MAX_RANK];
    int n = 0;
    args[n++] = g_const(g, 0, &zs);
    args[n++] = inst_gather_mode(g->src, in) == GATHER_CLAMP ? clamp(g, g->fwd[ix], 0, ts->dims[dim] - 1) : g->fwd[ix];
    dims[0] = dim;
    for (int i = 0; i < nb; i++) {
        dims[1 + i] = pair[2 * i];
        args[n++] = positions(g, is, (int)pair[2 * i + 1], -1);
    }
    args[n++] = c;
    give(g, 0, g_emit(g, OP_SCATTER, args, n, dims, 1 + nb, NULL));
}

/* The updates' cotangent is c read at the scattered positions, zero
 * where a position was dropped: c's scattered dims are moved first and
 * flattened, so one gather of the linear positions reads them all. */
static void scatter_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int nidx = inst_scatter_nidx(in);
    give(g, 0, c);
    if (!wants(g, nidx + 1))
        return;
    const Shape *x = &in->type;
    uint32_t scattered = 0;
    int64_t perm[MAX_RANK];
    int np = 0, identity = 1;
    for (int k = 0; k < nidx; k++) {
        scattered |= 1u << attr(g, k);
        perm[np++] = attr(g, k);
    }
    for (int d = 0; d < x->rank; d++)
        if (!(scattered >> d & 1))
            perm[np++] = d;
    for (int d = 0; d < x->rank; d++)
        identity &= perm[d] == d;
    int t = identity ? c : g_emit(g, OP_TRANSPOSE, (int32_t[]){c}, 1, perm, x->rank, NULL);
    Shape flat = {dst_type(g, c)->dtype, (uint8_t)(x->rank - nidx + 1), {1}};
    for (int k = 0; k < nidx; k++)
        flat.dims[0] *= x->dims[attr(g, k)];
    for (int d = nidx; d < x->rank; d++)
        flat.dims[d - nidx + 1] = dst_type(g, t)->dims[d];
    t = reshape_to(g, t, &flat);
    int lin = -1;
    for (int k = 0; k < nidx; k++) {
        int64_t n = x->dims[attr(g, k)];
        int ik = clamp(g, g->fwd[src_arg(g, 1 + k)], 0, n - 1);
        lin = lin < 0 ? ik : op2(g, OP_ADD, op2(g, OP_MUL, lin, like(g, (double)n, ik)), ik);
    }
    int64_t gattrs[2] = {0, GATHER_CLAMP};
    int u = g_emit(g, OP_GATHER, (int32_t[]){t, lin}, 2, gattrs, 2, NULL);
    const Shape *us = dst_type(g, u), *is = src_type(g, src_arg(g, 1));
    int64_t map[MAX_RANK];
    for (int d = 0; d < is->rank; d++)
        map[d] = d;
    int zero = like(g, 0, u);
    for (int k = 0; k < nidx; k++) {         /* dropped positions read nothing */
        int ik = g->fwd[src_arg(g, 1 + k)];
        int lo = compare(g, ik, like(g, 0, ik), CMP_GE);
        int hi = compare(g, ik, like(g, (double)x->dims[attr(g, k)], ik), CMP_LT);
        u = select3(g, broadcast(g, lo, us, map), u, zero);
        u = select3(g, broadcast(g, hi, us, map), u, zero);
    }
    give(g, nidx + 1, u);
}

/* A call: the callee's backward fn, given the arguments (and the
 * residuals its fwd fn returned) and the cotangent of each result (zeros
 * for those nothing reached); its vjp fn, which runs it again, for an spmd
 * callee or a checkpoint. */
static void call_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int f = (int)attr(g, 0), again = runs_again(g->m, g->src, in);
    int back = again ? g->bk->vjp[f] : g->bk->bwd[f];
    const Fn *callee = &g->m->fns[f], *bf = &g->m->fns[back];
    if (!bf->nresults || (c < 0 && !g->tuple_ct[g->v]))
        return;
    int n = 0, nres = again ? 0 : bf->nparams - callee->nparams - callee->nresults;
    int32_t *args = arena_alloc(g->m->arena, sizeof(int32_t) * (size_t)(bf->nparams + 1));
    for (int i = 0; i < in->nargs; i++)
        args[n++] = g->fwd[src_arg(g, i)];
    for (int k = 0; k < nres; k++)
        args[n++] = g->res_at[g->v] + k;
    int local = fn_is_local(g->src) && fn_is_local(callee);
    for (int i = 0; i < callee->nresults; i++) {
        int r = callee->nresults == 1 ? c : g->tuple_ct[g->v] ? g->tuple_ct[g->v][i] : -1;
        if (r < 0) {
            const Sig *p = &bf->params[callee->nparams + nres + i];
            Shape s = local ? shape_local(g->m, &p->type, &p->sh) : p->type;
            r = g_const(g, 0, &s);
        }
        args[n++] = r;
    }
    int64_t which = back;
    int call = g_emit(g, OP_CALL, args, n, &which, 1, NULL);
    for (int i = 0, k = 0; i < callee->nparams; i++) {
        if (!dtype_is_float(callee->params[i].type.dtype))
            continue;
        int64_t at = k++;
        give(g, i, bf->nresults == 1 ? call : g_emit(g, OP_GET_TUPLE_ELEMENT, (int32_t[]){call}, 1, &at, 1, NULL));
    }
}

/* ---- collectives (spmd fns) ---- */

static uint32_t op_axes(const Grad *g) {
    int n;
    const int64_t *axes = inst_axes(g->src, &g->src->insts[g->v], &n);
    uint32_t mask = 0;
    for (int i = 0; i < n; i++)
        mask |= 1u << axes[i];
    return mask;
}

/* psum and all_gather leave their result the same along their axes: an
 * operand that already was (psum of a replicated value) takes the sum of
 * every device's share, which the rules below give one device at a time. */
static void give_invariant(Grad *g, int c) {
    give_exact(g, 0, g_psum(g, c, op_axes(g) & ~g->varies[src_arg(g, 0)]));
}

static void all_reduce_adjoint(Grad *g, int c) {
    Reducer red = (Reducer)attr(g, 0);
    if (red == RED_SUM) {
        give_invariant(g, c);
        return;
    }
    /* pmax, pmin: shared by the devices that hold the extreme */
    int hit = as_float(g, compare(g, fwd_arg(g, 0), g_fwd(g, g->v), CMP_EQ), c);
    int count = g_psum(g, hit, op_axes(g));
    give_invariant(g, op2(g, OP_MUL, op2(g, OP_DIV, c, count), hit));
}

/* all_gather: the device's own block of c, at axis_index * block. */
static void all_gather_adjoint(Grad *g, int c) {
    int n, dim = (int)attr(g, 0);
    const int64_t *axes = inst_axes(g->src, &g->src->insts[g->v], &n);
    Shape xs = ct_shape(g, src_arg(g, 0));
    int index = g_emit(g, OP_AXIS_INDEX, NULL, 0, axes, n, NULL);
    int32_t args[1 + MAX_RANK];
    args[0] = c;
    for (int d = 0; d < xs.rank; d++)
        args[1 + d] = d == dim ? op2(g, OP_MUL, index, i32_const(g, xs.dims[d])) : i32_const(g, 0);
    give_invariant(g, g_emit(g, OP_DYNAMIC_SLICE, args, 1 + xs.rank, NULL, 0, &xs));
}

static void reduce_scatter_adjoint(Grad *g, int c) {
    int n;
    const int64_t *axes = inst_axes(g->src, &g->src->insts[g->v], &n);
    int64_t attrs[1 + MAX_AXES];
    attrs[0] = attr(g, 1);
    memcpy(attrs + 1, axes, sizeof(int64_t) * (size_t)n);
    give(g, 0, g_emit(g, OP_ALL_GATHER, (int32_t[]){c}, 1, attrs, 1 + n, NULL));
}

static void all_to_all_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int64_t attrs[2 + MAX_AXES];
    memcpy(attrs, ir_attrs(g->src, in), sizeof(int64_t) * (size_t)in->nattrs);
    attrs[0] = attr(g, 1);       /* split where it concatenated, and back */
    attrs[1] = attr(g, 0);
    give(g, 0, g_emit(g, OP_ALL_TO_ALL, (int32_t[]){c}, 1, attrs, in->nattrs, NULL));
}

static void permute_adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    int64_t *attrs = arena_alloc(g->m->arena, sizeof(int64_t) * (size_t)in->nattrs);
    memcpy(attrs, ir_attrs(g->src, in), sizeof(int64_t) * (size_t)in->nattrs);
    for (int i = 1 + (int)attrs[0]; i + 1 < in->nattrs; i += 2) {    /* each pair reversed */
        int64_t t = attrs[i];
        attrs[i] = attrs[i + 1];
        attrs[i + 1] = t;
    }
    give(g, 0, g_emit(g, OP_COLLECTIVE_PERMUTE, (int32_t[]){c}, 1, attrs, in->nattrs, NULL));
}

void adjoint(Grad *g, int c) {
    const Inst *in = &g->src->insts[g->v];
    Op op = (Op)in->op;
    switch (op) {
    case OP_PARAMETER: case OP_CONSTANT: case OP_IOTA: case OP_AXIS_INDEX:
        return;
    case OP_RANDOM:          /* a draw is a constant to grad: no gradient reaches its bounds */
        return;
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) case OP_##ID:
#define SK_BINARY(ID, name, builtin, dtypes, f, fi)
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
        give(g, 0, unary_adjoint(g, op, c, fwd_arg(g, 0), g_fwd(g, g->v)));
        return;
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) case OP_##ID:
#define SK_UNARY(ID, name, builtin, dtypes, f, fi)
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
        binary_adjoint(g, op, c);
        return;
    case OP_CONVERT: give(g, 0, g_cast(g, c, ct_dtype(src_type(g, src_arg(g, 0))->dtype))); return;
    case OP_SELECT: {
        int p = g->fwd[src_arg(g, 0)], z = like(g, 0, c);
        if (wants(g, 1))
            give(g, 1, select3(g, p, c, z));
        if (wants(g, 2))
            give(g, 2, select3(g, p, z, c));
        return;
    }
    case OP_BROADCAST: broadcast_adjoint(g, c); return;
    case OP_TRANSPOSE: transpose_adjoint(g, c); return;
    case OP_RESHAPE: {
        Shape s = ct_shape(g, src_arg(g, 0));
        give(g, 0, reshape_to(g, c, &s));
        return;
    }
    case OP_DOT:
        if (attention_adjoint(g, c))
            return;
        c = operand_precision(g, c);
        dot_adjoint(g, c, 0);
        dot_adjoint(g, c, 1);
        return;
    case OP_REDUCE: reduce_adjoint(g, c); return;
    case OP_SLICE: slice_adjoint(g, c); return;
    case OP_DYNAMIC_SLICE: dynamic_slice_adjoint(g, c); return;
    case OP_DYNAMIC_UPDATE_SLICE: dynamic_update_slice_adjoint(g, c); return;
    case OP_CONCAT: concat_adjoint(g, c); return;
    case OP_ROLL: roll_adjoint(g, c); return;
    case OP_CUMSUM: cumsum_adjoint(g, c); return;
    case OP_GATHER: gather_adjoint(g, c); return;
    case OP_SCATTER: scatter_adjoint(g, c); return;
    case OP_CALL: call_adjoint(g, c); return;
    case OP_LOOP: loop_adjoint(g, c); return;
    case OP_ALL_REDUCE: all_reduce_adjoint(g, c); return;
    case OP_ALL_GATHER: all_gather_adjoint(g, c); return;
    case OP_REDUCE_SCATTER: reduce_scatter_adjoint(g, c); return;
    case OP_ALL_TO_ALL: all_to_all_adjoint(g, c); return;
    case OP_COLLECTIVE_PERMUTE: permute_adjoint(g, c); return;
    case OP_COMPARE: case OP_TOP_K: case OP_GET_TUPLE_ELEMENT: case OP_RETURN: case OP_DONE: case OP_COUNT:
        break;
    }
    no_gradient(g, "an op without a gradient");
}
