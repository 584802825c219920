/* attention.c: recognizing softmax attention in a per-device fn.
 *
 * The samples write attention as JAX users do, op by op:
 *
 *     scores = dot(q, k) * scale (+ broadcast(mask))
 *     e = exp(scores - broadcast(max_t scores))
 *     out = dot(e / broadcast(sum_t e), v)
 *
 * which holds [batch..., S, T] values between the two dots.  Here that chain
 * is read backwards from its last dot into the operands, strides and
 * members sk_attention (lib/attention.c) needs to compute it without them;
 * compiler/schedule folds the members into the dot when nothing else reads
 * them (docs/kernels.md, "Attention").  The form says nothing about uses:
 * the scheduler checks those. */
#include "ir.h"

/* A causal mask's fill must drown every score: exp(score + fill - max) is 0
 * in f32 unless a row's own scores are near the fill too. */
#define CAUSAL_FILL_MAX (-1e9)

typedef struct {
    const Fn *fn;
    AttentionForm *af;
    int mask_s_dim;                              /* the scores dim the mask's rows run along */
    int64_t q_stride[MAX_RANK], k_stride[MAX_RANK];   /* per scores dim: q's and k's stride along it */
} Match;

static const Inst *at(const Fn *fn, int v) { return &fn->insts[v]; }
static int arg(const Fn *fn, int v, int i) { return ir_arg(fn, at(fn, v), i); }

static void member(Match *mt, int v) {
    if (mt->af->nmembers < ATTENTION_MAX_MEMBERS)
        mt->af->members[mt->af->nmembers++] = v;
}

static int is_float(int dt) { return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16; }

/* Is v an f32 value of op `op` with n operands, computed on every device? */
static int is(const Fn *fn, int v, int op, int n) {
    const Inst *in = at(fn, v);
    return in->op == op && in->nargs == n && in->type.dtype == DT_F32 && !in->place;
}

/* The value of a scalar constant, or of a broadcast of one, into *x. */
static int scalar_of(const Fn *fn, int v, double *x) {
    const Inst *in = at(fn, v);
    if (in->op == OP_BROADCAST && at(fn, arg(fn, v, 0))->type.rank == 0)
        in = at(fn, arg(fn, v, 0));
    if (in->op != OP_CONSTANT || in->type.rank != 0)
        return 0;
    *x = in->value;
    return 1;
}

/* Is b a broadcast into the scores' rank r of a value with every dim but
 * `t`, in order (a row max or sum)? */
static int row_broadcast(const Fn *fn, int b, int r, int t) {
    const Inst *in = at(fn, b);
    if (in->op != OP_BROADCAST || in->nattrs != r - 1)
        return 0;
    for (int i = 0; i < r - 1; i++)
        if (ir_attr(fn, in, i) != (i < t ? i : i + 1))
            return 0;
    return 1;
}

/* Is x a reduction of `of` by `red` over its single dim t? */
static int row_reduce(const Fn *fn, int x, int of, Reducer red, int t) {
    const Inst *in = at(fn, x);
    return is(fn, x, OP_REDUCE, 1) && arg(fn, x, 0) == of && in->nattrs == 2 && inst_reducer(fn, in) == red &&
           ir_attr(fn, in, 1) == t;
}

/* The dim of an iota of an [S, T] value, or -1. */
static int iota_dim(const Fn *fn, int v) {
    const Inst *in = at(fn, v);
    return in->op == OP_IOTA && in->type.rank == 2 ? inst_dim(fn, in) : -1;
}

/* Does compare c hold exactly where key t > query s (*later = 1), or
 * exactly where t <= s (*later = 0)? */
static int compares_keys_after_queries(const Fn *fn, int c, int *later) {
    const Inst *in = at(fn, c);
    if (in->op != OP_COMPARE || in->nargs != 2)
        return 0;
    int a = iota_dim(fn, arg(fn, c, 0)), b = iota_dim(fn, arg(fn, c, 1));
    if (a < 0 || b < 0 || a == b)
        return 0;
    Cmp cmp = (Cmp)ir_attr(fn, in, 0);
    if (a == 0)                                  /* s ? t: as t ?' s */
        cmp = cmp == CMP_LT ? CMP_GT : cmp == CMP_GT ? CMP_LT : cmp == CMP_LE ? CMP_GE : cmp == CMP_GE ? CMP_LE : cmp;
    *later = cmp == CMP_GT;
    return cmp == CMP_GT || cmp == CMP_LE;
}

/* Is mask m (an [S, T] value) `where(t > s, fill, 0)` with fill at most
 * CAUSAL_FILL_MAX (or `where(t <= s, 0, fill)`)?  Its members, when
 * nothing else reads them, fold too: the kernel masks by position. */
static int causal_mask(const Fn *fn, int m) {
    const Inst *in = at(fn, m);
    int later;
    double x, y;
    if (in->op != OP_SELECT || !compares_keys_after_queries(fn, arg(fn, m, 0), &later) ||
        !scalar_of(fn, arg(fn, m, 1), &x) || !scalar_of(fn, arg(fn, m, 2), &y))
        return 0;
    double fill = later ? x : y, zero = later ? y : x;
    return zero == 0 && fill <= CAUSAL_FILL_MAX;
}

/* The labels of dot d's operand `part` (0 or 1) or its result (2): *n of them. */
static const int64_t *labels(const Fn *fn, int d, int part, int *n) {
    const Inst *in = at(fn, d);
    int ra = at(fn, arg(fn, d, 0))->type.rank, rb = at(fn, arg(fn, d, 1))->type.rank;
    *n = part == 0 ? ra : part == 1 ? rb : in->type.rank;
    return &fn->ints[in->attrs + (part == 0 ? 0 : part == 1 ? ra : ra + rb)];
}

/* The dim of dot d's operand `part` (0 or 1) or result (2) labelled `label`, or -1. */
static int dim_of(const Fn *fn, int d, int part, int64_t label) {
    int n;
    const int64_t *l = labels(fn, d, part, &n);
    for (int i = 0; i < n; i++)
        if (l[i] == label)
            return i;
    return -1;
}

static int64_t label_of(const Fn *fn, int d, int part, int i) {
    int n;
    return labels(fn, d, part, &n)[i];
}

/* The scores dot d1 = dot(q, k) of rank r: one contracted dim, last in
 * both operands; the key dim t of the scores comes from k, the query dim
 * from q, and every other dim is a batch dim of both.  Fills q, k, S, T,
 * K and their strides; *s_dim the query dim of the scores. */
static int scores_dot(Match *mt, int d1, int t, int *s_dim) {
    const Fn *fn = mt->fn;
    AttentionForm *af = mt->af;
    const Inst *in = at(fn, d1);
    if (!is(fn, d1, OP_DOT, 2))   /* f32 sums, of f32 operands or (a wide dot) narrow ones */
        return 0;
    int r = in->type.rank;
    int64_t tl = label_of(fn, d1, 2, t);
    int kside = dim_of(fn, d1, 1, tl) >= 0 ? 1 : 0, qside = 1 - kside;
    af->q = arg(fn, d1, qside);
    af->k = arg(fn, d1, kside);
    const Shape *qs = &at(fn, af->q)->type, *ks = &at(fn, af->k)->type;
    af->dtype = qs->dtype;
    if (qs->rank != r || ks->rank != r || !is_float(qs->dtype) || ks->dtype != qs->dtype ||
        dim_of(fn, d1, qside, tl) >= 0)
        return 0;
    /* The contracted label: the last dim of q, also the last of k, not in the result. */
    int64_t cl = label_of(fn, d1, qside, qs->rank - 1);
    if (dim_of(fn, d1, kside, cl) != ks->rank - 1 || dim_of(fn, d1, 2, cl) >= 0)
        return 0;
    int64_t qst[MAX_RANK], kst[MAX_RANK];
    row_major_strides(qs, qst);
    row_major_strides(ks, kst);
    *s_dim = -1;
    for (int i = 0; i < r; i++) {
        int64_t l = label_of(fn, d1, 2, i);
        int qd = dim_of(fn, d1, qside, l), kd = dim_of(fn, d1, kside, l);
        mt->q_stride[i] = qd >= 0 ? qst[qd] : 0;
        mt->k_stride[i] = kd >= 0 ? kst[kd] : 0;
        if (i == t) {
            af->T = ks->dims[kd];
            af->k_row = kst[kd];
        } else if (kd < 0 && qd >= 0 && *s_dim < 0) {
            *s_dim = i;
            af->S = qs->dims[qd];
            af->q_row = qst[qd];
        } else if (qd < 0 || kd < 0)
            return 0;
    }
    af->K = qs->dims[qs->rank - 1];
    return *s_dim >= 0;
}

/* A product of a [batch..., S, T] value (operand `pside` of dot d2: p or
 * the scores' cotangent) with an operand x of the same rank: contracts
 * its dim `contracted` with one dim of x (x's row dim), keeps its dim
 * `kept` and pairs its other dims, the batch dims, with x's and the
 * result's; x's one other dim, its last, lies contiguous in `final`, which
 * holds the result: d2, or a transpose of it.  Strides in elements of the
 * dense values, batch dims in the scores' order. */
typedef struct {
    int x, nbatch;
    int dim[MAX_RANK];                 /* the scores dim of each batch dim */
    int64_t batch[MAX_RANK], x_batch[MAX_RANK], out_batch[MAX_RANK];
    int64_t x_row, out_row, feat;      /* feat: x's last dim, the result's elements per row */
} Product;

/* The strides of dot d's result dims as they lie in `final`: d, or a
 * transpose of d (result dim j is d's dim perm[j]). */
static int result_strides(const Fn *fn, int d, int final, int64_t st[MAX_RANK]) {
    const Inst *tr = at(fn, final);
    if (final == d) {
        row_major_strides(&tr->type, st);
        return 1;
    }
    if (tr->op != OP_TRANSPOSE || arg(fn, final, 0) != d || tr->place)
        return 0;
    int64_t fst[MAX_RANK];
    row_major_strides(&tr->type, fst);
    for (int j = 0; j < tr->type.rank; j++)
        st[ir_attr(fn, tr, j)] = fst[j];
    return 1;
}

static int product(const Fn *fn, int d2, int pside, int contracted, int kept, int final, Product *pr) {
    const Inst *in = at(fn, d2);
    if (in->op != OP_DOT || in->nargs != 2 || in->place)
        return 0;
    int xside = 1 - pside, r = at(fn, arg(fn, d2, pside))->type.rank;
    pr->x = arg(fn, d2, xside);
    const Shape *xs = &at(fn, pr->x)->type, *os = &in->type, *ps = &at(fn, arg(fn, d2, pside))->type;
    int64_t xst[MAX_RANK], ost[MAX_RANK];
    if (xs->rank != r || os->rank != r || !is_float(xs->dtype) || !result_strides(fn, d2, final, ost))
        return 0;
    row_major_strides(xs, xst);
    pr->nbatch = 0;
    for (int i = 0; i < r; i++) {
        int64_t l = label_of(fn, d2, pside, i);
        int xd = dim_of(fn, d2, xside, l), od = dim_of(fn, d2, 2, l);
        if (i == contracted) {                    /* with x's row dim */
            if (xd < 0 || od >= 0 || xs->dims[xd] != ps->dims[i])
                return 0;
            pr->x_row = xst[xd];
        } else if (i == kept) {                   /* the result's row dim */
            if (xd >= 0 || od < 0)
                return 0;
            pr->out_row = ost[od];
        } else {                                  /* a batch dim of all three */
            if (xd < 0 || od < 0)
                return 0;
            int b = pr->nbatch++;
            pr->dim[b] = i;
            pr->batch[b] = os->dims[od];
            pr->x_batch[b] = xst[xd];
            pr->out_batch[b] = ost[od];
        }
    }
    int64_t fl = label_of(fn, d2, xside, xs->rank - 1);
    int fd = dim_of(fn, d2, 2, fl);
    pr->feat = xs->dims[xs->rank - 1];
    return dim_of(fn, d2, pside, fl) < 0 && fd >= 0 && ost[fd] == 1;
}

/* scores = d1 * c, c * d1, d1 / c or d1: the scale into af, the dot into *d1. */
static int scaled(Match *mt, int x, int *d1) {
    const Fn *fn = mt->fn;
    double c;
    mt->af->scale = 1;
    *d1 = x;
    if ((is(fn, x, OP_MUL, 2) || is(fn, x, OP_DIV, 2)) && scalar_of(fn, arg(fn, x, 1), &c)) {
        mt->af->scale = at(fn, x)->op == OP_MUL ? c : 1 / c;
        *d1 = arg(fn, x, 0);
        member(mt, arg(fn, x, 1));
    } else if (is(fn, x, OP_MUL, 2) && scalar_of(fn, arg(fn, x, 0), &c)) {
        mt->af->scale = c;
        *d1 = arg(fn, x, 1);
        member(mt, arg(fn, x, 0));
    }
    if (*d1 != x)
        member(mt, x);
    return mt->af->scale == mt->af->scale && mt->af->scale != 0;   /* not NaN */
}

/* logits = scores + broadcast(mask[s, t]) (either order), or the scores:
 * the mask into af; the scores into *scores. */
static void masked(Match *mt, int logits, int t, int *scores) {
    const Fn *fn = mt->fn;
    mt->af->mask = -1;
    mt->af->causal = 0;
    *scores = logits;
    if (!is(fn, logits, OP_ADD, 2))
        return;
    for (int side = 0; side < 2; side++) {
        int b = arg(fn, logits, side);
        const Inst *bi = at(fn, b);
        int m = bi->op == OP_BROADCAST ? ir_arg(fn, bi, 0) : -1;
        if (m < 0 || at(fn, m)->type.rank != 2 || at(fn, m)->type.dtype != DT_F32 || bi->nattrs != 2 ||
            ir_attr(fn, bi, 1) != t || ir_attr(fn, bi, 0) == t)
            continue;
        mt->af->mask = m;
        mt->mask_s_dim = (int)ir_attr(fn, bi, 0);
        mt->af->causal = causal_mask(fn, m);
        *scores = arg(fn, logits, 1 - side);
        member(mt, b);
        member(mt, logits);
        return;
    }
}

/* The probabilities p = e / broadcast(sum_t e), e = exp(logits -
 * broadcast(max_t logits)), of the scaled (and masked) scores of q and k:
 * fills af's q, k, mask, scale, S, T, K and rows, the strides of q and k
 * per scores dim, and the scores' key and query dims *t and *s. */
static int probabilities(Match *mt, int p, int *t, int *s) {
    const Fn *fn = mt->fn;
    AttentionForm *af = mt->af;
    if (!is(fn, p, OP_DIV, 2))
        return 0;
    int e = arg(fn, p, 0), bt = arg(fn, p, 1), total = at(fn, bt)->nargs == 1 ? arg(fn, bt, 0) : -1;
    if (total < 0 || !is(fn, e, OP_EXP, 1) || at(fn, total)->nattrs != 2)
        return 0;
    int r = at(fn, p)->type.rank, sub = arg(fn, e, 0);
    *t = (int)ir_attr(fn, at(fn, total), 1);
    if (r < 2 || !row_reduce(fn, total, e, RED_SUM, *t) || !row_broadcast(fn, bt, r, *t) || !is(fn, sub, OP_SUB, 2))
        return 0;
    int logits = arg(fn, sub, 0), bp = arg(fn, sub, 1), peak = at(fn, bp)->nargs == 1 ? arg(fn, bp, 0) : -1;
    if (peak < 0 || !row_broadcast(fn, bp, r, *t) || !row_reduce(fn, peak, logits, RED_MAX, *t))
        return 0;
    int scores, d1;
    member(mt, p), member(mt, bt), member(mt, total), member(mt, e), member(mt, sub), member(mt, bp);
    member(mt, peak);
    masked(mt, logits, *t, &scores);
    if (!scaled(mt, scores, &d1) || !scores_dot(mt, d1, *t, s) || (af->mask >= 0 && mt->mask_s_dim != *s))
        return 0;
    member(mt, d1);
    af->mask_row = af->mask >= 0 ? af->T : 0;   /* the mask's shape is [S, T]: its dims are the scores' */
    return 1;
}

/* The batch dims of a product of the scores, and q's and k's strides along them. */
static void take_batch(const Match *mt, const Product *pr) {
    AttentionForm *af = mt->af;
    af->nbatch = pr->nbatch;
    for (int b = 0; b < pr->nbatch; b++) {
        af->batch[b] = pr->batch[b];
        af->q_batch[b] = mt->q_stride[pr->dim[b]];
        af->k_batch[b] = mt->k_stride[pr->dim[b]];
    }
}

static void sort_members(int *members, int n) {
    for (int i = 1; i < n; i++)                  /* in program order: a few, insertion sort */
        for (int j = i; j > 0 && members[j - 1] > members[j]; j--) {
            int x = members[j];
            members[j] = members[j - 1];
            members[j - 1] = x;
        }
}

int attention_form(const Fn *fn, int d2, AttentionForm *af) {
    Match mt = {fn, af, -1, {0}, {0}};
    if (at(fn, d2)->op != OP_DOT || at(fn, d2)->nargs != 2)
        return 0;
    for (int pside = 0; pside < 2; pside++) {
        af->nmembers = 0;
        int p = arg(fn, d2, pside), t, s;
        if (at(fn, p)->op == OP_CONVERT && is(fn, arg(fn, p, 0), OP_DIV, 2)) {   /* p rounded to v's dtype */
            member(&mt, p);
            p = arg(fn, p, 0);
        }
        Product pr;
        if (!probabilities(&mt, p, &t, &s) || !product(fn, d2, pside, t, s, d2, &pr))
            continue;
        const Shape *vs = &at(fn, pr.x)->type, *os = &at(fn, d2)->type;
        af->v = pr.x;
        af->v_dtype = vs->dtype;
        af->out_dtype = os->dtype;               /* v's, or f32 sums of narrow ones (a wide dot) */
        if (at(fn, arg(fn, d2, pside))->type.dtype != vs->dtype || (os->dtype != vs->dtype && os->dtype != DT_F32))
            continue;
        af->v_row = pr.x_row;
        af->out_row = pr.out_row;
        af->Kv = pr.feat;
        take_batch(&mt, &pr);
        for (int b = 0; b < pr.nbatch; b++) {
            af->v_batch[b] = pr.x_batch[b];
            af->out_batch[b] = pr.out_batch[b];
        }
        sort_members(af->members, af->nmembers);
        return af->nmembers < ATTENTION_MAX_MEMBERS;
    }
    return 0;
}

/* ---- the gradient ---- */

/* x, or the operand of x when x converts it to dtype dt (f32: x itself). */
static int rounded_from(const Fn *fn, int x, int dt) {
    if (dt == DT_F32)
        return x;
    return at(fn, x)->op == OP_CONVERT && at(fn, x)->type.dtype == dt && !at(fn, x)->place ? arg(fn, x, 0) : -1;
}

static void grad_member(AttentionGradForm *gf, int v) {
    for (int i = 0; i < gf->nmembers; i++)       /* once: the chain and ds may share a broadcast scale */
        if (gf->members[i] == v)
            return;
    if (gf->nmembers < ATTENTION_GRAD_MAX_MEMBERS)
        gf->members[gf->nmembers++] = v;
}

/* The dot under a written value: itself, or the one it transposes
 * (a member too). */
static int dot_under(const Fn *fn, int out) {
    const Inst *in = at(fn, out);
    int d = in->op == OP_TRANSPOSE && in->nargs == 1 ? arg(fn, out, 0) : out;
    return at(fn, d)->op == OP_DOT && at(fn, d)->nargs == 2 && !at(fn, d)->place ? d : -1;
}

/* ds scaled: mul(ds, scale) either way, ds = p (dp - broadcast(sum_t dp p)),
 * into *dp; ds's members joined. */
static int scores_cotangent(const Fn *fn, AttentionGradForm *gf, int dsc, int p, int t, int *dp) {
    double c;
    if (!is(fn, dsc, OP_MUL, 2))
        return 0;
    int side = scalar_of(fn, arg(fn, dsc, 1), &c) ? 0 : scalar_of(fn, arg(fn, dsc, 0), &c) ? 1 : -1;
    if (side < 0 || (float)c != (float)gf->af.scale)
        return 0;
    int ds = arg(fn, dsc, side), r = at(fn, p)->type.rank;
    if (!is(fn, ds, OP_MUL, 2))
        return 0;
    int dside = arg(fn, ds, 0) == p ? 1 : 0, diff = arg(fn, ds, dside);
    if (arg(fn, ds, 1 - dside) != p || !is(fn, diff, OP_SUB, 2))
        return 0;
    *dp = arg(fn, diff, 0);
    int b = arg(fn, diff, 1), sum = at(fn, b)->nargs == 1 ? arg(fn, b, 0) : -1;
    if (sum < 0 || !row_broadcast(fn, b, r, t) || at(fn, sum)->nattrs != 2)
        return 0;
    int prod = arg(fn, sum, 0);
    if (!row_reduce(fn, sum, prod, RED_SUM, t) || !is(fn, prod, OP_MUL, 2) ||
        !((arg(fn, prod, 0) == *dp && arg(fn, prod, 1) == p) || (arg(fn, prod, 0) == p && arg(fn, prod, 1) == *dp)))
        return 0;
    grad_member(gf, arg(fn, dsc, 1 - side)), grad_member(gf, dsc), grad_member(gf, ds), grad_member(gf, diff);
    grad_member(gf, b), grad_member(gf, sum), grad_member(gf, prod);
    return 1;
}

/* dp = dot(dout, v), f32, its dims the scores': s from dout, t from v,
 * every other dim of both, dout's and v's last dims contracted.  Fills v
 * and its strides into af. */
static int cotangent_dot(const Fn *fn, AttentionGradForm *gf, int dp, int dout, int t, int s, const Product *pv) {
    AttentionForm *af = &gf->af;
    if (!is(fn, dp, OP_DOT, 2))
        return 0;
    int oside = arg(fn, dp, 0) == dout ? 0 : 1, vside = 1 - oside, r = at(fn, dp)->type.rank;
    af->v = arg(fn, dp, vside);
    const Shape *vs = &at(fn, af->v)->type, *os = &at(fn, dout)->type;
    if (arg(fn, dp, oside) != dout || vs->rank != r || os->rank != r)
        return 0;
    int64_t vst[MAX_RANK], ost[MAX_RANK];
    row_major_strides(vs, vst);
    row_major_strides(os, ost);
    for (int i = 0, b = 0; i < r; i++) {
        int64_t l = label_of(fn, dp, 2, i);
        int od = dim_of(fn, dp, oside, l), vd = dim_of(fn, dp, vside, l);
        if (i == s ? od < 0 || vd >= 0 || ost[od] != pv->x_row
                   : i == t ? vd < 0 || od >= 0 || vs->dims[vd] != af->T
                            : vd < 0 || od < 0 || ost[od] != pv->x_batch[b])
            return 0;
        if (i == t)
            af->v_row = vst[vd];
        else if (i != s)
            af->v_batch[b++] = vst[vd];
    }
    int64_t cl = label_of(fn, dp, vside, r - 1);
    af->Kv = vs->dims[r - 1];
    return dim_of(fn, dp, oside, cl) == r - 1 && dim_of(fn, dp, 2, cl) < 0 && af->Kv == pv->feat;
}

/* The side of dot d whose operand is x rounded to dt (x itself for
 * f32), or -1. */
static int side_reading(const Fn *fn, int d, int x, int dt) {
    return rounded_from(fn, arg(fn, d, 0), dt) == x ? 0 : rounded_from(fn, arg(fn, d, 1), dt) == x ? 1 : -1;
}

/* Is the product's x read as q (or k) is: the same strides per scores
 * dim, row stride and length? */
static int reads_rows(const Product *pr, const int64_t *stride, int64_t row, int64_t feat) {
    for (int b = 0; b < pr->nbatch; b++)
        if (pr->x_batch[b] != stride[pr->dim[b]])
            return 0;
    return pr->x_row == row && pr->feat == feat;
}

int attention_grad_form(const Fn *fn, const int outs[3], AttentionGradForm *gf) {
    AttentionForm *af = &gf->af;
    Match mt = {fn, af, -1, {0}, {0}};
    af->nmembers = gf->nmembers = 0;
    int dots[3], iv = -1, pside = -1, p = -1, t, s, dp;
    for (int i = 0; i < 3; i++)
        if ((dots[i] = dot_under(fn, outs[i])) < 0)
            return 0;
    for (int i = 0; i < 3 && p < 0; i++)      /* dv's dot: p, or p rounded, on one side */
        for (int side = 0; side < 2 && p < 0; side++) {
            int x = arg(fn, dots[i], side), y = at(fn, x)->op == OP_CONVERT ? arg(fn, x, 0) : x;
            if (is(fn, y, OP_DIV, 2))
                p = y, iv = i, pside = side;
        }
    if (p < 0 || !probabilities(&mt, p, &t, &s))
        return 0;
    int dt = af->dtype, a = (iv + 1) % 3, b = (iv + 2) % 3;
    Product pv, pq, pk;
    if (side_reading(fn, dots[iv], p, dt) != pside || !product(fn, dots[iv], pside, s, t, outs[iv], &pv))
        return 0;
    /* dq and dk read the scaled ds (rounded) on one side each. */
    int da = -1, db = -1;
    for (int side = 0; side < 2; side++) {
        int xa = rounded_from(fn, arg(fn, dots[a], side), dt), xb = rounded_from(fn, arg(fn, dots[b], side), dt);
        da = xa >= 0 && at(fn, xa)->op == OP_MUL ? side : da;
        db = xb >= 0 && at(fn, xb)->op == OP_MUL ? side : db;
    }
    if (da < 0 || db < 0 || arg(fn, dots[a], da) != arg(fn, dots[b], db))
        return 0;
    int scaled_ds = arg(fn, dots[a], da), dsc = rounded_from(fn, scaled_ds, dt);
    if (!(product(fn, dots[a], da, t, s, outs[a], &pq) && product(fn, dots[b], db, s, t, outs[b], &pk) &&
          pq.x == af->k && pk.x == af->q)) {
        int x = a, dx = da;                   /* the other way round */
        a = b, da = db, b = x, db = dx;
        if (!(product(fn, dots[a], da, t, s, outs[a], &pq) && product(fn, dots[b], db, s, t, outs[b], &pk) &&
              pq.x == af->k && pk.x == af->q))
            return 0;
    }
    if (!reads_rows(&pq, mt.k_stride, af->k_row, af->K) || !reads_rows(&pk, mt.q_stride, af->q_row, af->K) ||
        !scores_cotangent(fn, gf, dsc, p, t, &dp) || !cotangent_dot(fn, gf, dp, pv.x, t, s, &pv))
        return 0;
    int gt = at(fn, outs[0])->type.dtype;
    if (at(fn, af->v)->type.dtype != dt || at(fn, af->k)->type.dtype != dt || !is_float(at(fn, pv.x)->type.dtype) ||
        !is_float(gt) || at(fn, outs[1])->type.dtype != gt || at(fn, outs[2])->type.dtype != gt)
        return 0;
    gf->grad_dtype = gt;
    gf->dout = pv.x;
    gf->dout_row = pv.x_row;
    gf->dq = outs[a], gf->dk = outs[b], gf->dv = outs[iv];
    gf->dq_row = pq.out_row, gf->dk_row = pk.out_row, gf->dv_row = pv.out_row;
    take_batch(&mt, &pv);
    for (int i = 0; i < pv.nbatch; i++) {
        gf->dout_batch[i] = pv.x_batch[i];
        gf->dv_batch[i] = pv.out_batch[i];
        gf->dq_batch[i] = pq.out_batch[i];
        gf->dk_batch[i] = pk.out_batch[i];
    }
    for (int i = 0; i < af->nmembers; i++)
        grad_member(gf, af->members[i]);
    grad_member(gf, dp);
    if (dt != DT_F32)
        grad_member(gf, arg(fn, dots[iv], pside)), grad_member(gf, scaled_ds);
    for (int i = 0; i < 3; i++)
        if (dots[i] != outs[i])
            grad_member(gf, dots[i]);
    sort_members(gf->members, gf->nmembers);
    return af->nmembers < ATTENTION_MAX_MEMBERS && gf->nmembers < ATTENTION_GRAD_MAX_MEMBERS;
}

int attention_grad_at(const Fn *fn, int v, AttentionGradForm *gf) {
    return ends_attention_grad(fn, v) && attention_grad_form(fn, (const int[]){v - 2, v - 1, v}, gf);
}

int reads_within(const Fn *fn, const int *set, int n, int last, int x) {
    int reads = 0;
    for (int i = 0; i <= n; i++) {
        const Inst *in = &fn->insts[i < n ? set[i] : last];
        for (int j = 0; j < in->nargs; j++)
            reads += ir_arg(fn, in, j) == x;
    }
    return reads;
}

int attention_private(const Fn *fn, const AttentionForm *af, int last, const int *uses) {
    for (int i = 0; i < af->nmembers; i++)
        if (reads_within(fn, af->members, af->nmembers, last, af->members[i]) != uses[af->members[i]])
            return 0;
    return 1;
}
