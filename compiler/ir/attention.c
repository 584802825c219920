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

/* The product out = dot(p, v) of the probabilities p (the scores' dims)
 * with v: contracts p's key dim t with one dim of v, keeps p's batch dims
 * paired with v's and the query dim s; v's one other dim, its last, is
 * out's last.  Fills v, Kv, the batch dims and every stride. */
static int output_dot(Match *mt, int d2, int pside, int r, int t, int s) {
    const Fn *fn = mt->fn;
    AttentionForm *af = mt->af;
    const Inst *in = at(fn, d2);
    int vside = 1 - pside;
    af->v = arg(fn, d2, vside);
    const Shape *vs = &at(fn, af->v)->type, *os = &in->type;
    af->out_dtype = os->dtype;          /* v's, or f32 sums of narrow ones (a wide dot) */
    af->v_dtype = vs->dtype;
    if (in->op != OP_DOT || in->nargs != 2 || in->place || vs->rank != r || os->rank != r ||
        !is_float(vs->dtype) || at(fn, arg(fn, d2, pside))->type.dtype != vs->dtype ||
        (os->dtype != vs->dtype && os->dtype != DT_F32))
        return 0;
    int64_t vst[MAX_RANK], ost[MAX_RANK];
    row_major_strides(vs, vst);
    row_major_strides(os, ost);
    af->nbatch = 0;
    for (int i = 0; i < r; i++) {
        int64_t l = label_of(fn, d2, pside, i);
        int vd = dim_of(fn, d2, vside, l), od = dim_of(fn, d2, 2, l);
        if (i == t) {                             /* contracted with v's key dim */
            if (vd < 0 || od >= 0 || vs->dims[vd] != af->T)
                return 0;
            af->v_row = vst[vd];
        } else if (i == s) {                      /* kept: out's query dim */
            if (vd >= 0 || od < 0)
                return 0;
            af->out_row = ost[od];
        } else {                                  /* a batch dim of all four */
            if (vd < 0 || od < 0)
                return 0;
            int b = af->nbatch++;
            af->batch[b] = os->dims[od];
            af->q_batch[b] = mt->q_stride[i];
            af->k_batch[b] = mt->k_stride[i];
            af->v_batch[b] = vst[vd];
            af->out_batch[b] = ost[od];
        }
    }
    /* v's remaining dim: its last, and out's last. */
    int64_t kvl = label_of(fn, d2, vside, vs->rank - 1);
    if (dim_of(fn, d2, pside, kvl) >= 0 || dim_of(fn, d2, 2, kvl) != os->rank - 1)
        return 0;
    af->Kv = vs->dims[vs->rank - 1];
    return 1;
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

int attention_form(const Fn *fn, int d2, AttentionForm *af) {
    Match mt = {fn, af, -1, {0}, {0}};
    af->nmembers = 0;
    if (at(fn, d2)->op != OP_DOT || at(fn, d2)->nargs != 2)
        return 0;
    for (int pside = 0; pside < 2; pside++) {
        af->nmembers = 0;
        int p = arg(fn, d2, pside);
        if (at(fn, p)->op == OP_CONVERT && is(fn, arg(fn, p, 0), OP_DIV, 2)) {   /* p rounded to v's dtype */
            member(&mt, p);
            p = arg(fn, p, 0);
        }
        if (!is(fn, p, OP_DIV, 2))
            continue;
        int e = arg(fn, p, 0), bt = arg(fn, p, 1), total = at(fn, bt)->nargs == 1 ? arg(fn, bt, 0) : -1;
        if (total < 0 || !is(fn, e, OP_EXP, 1) || at(fn, total)->nattrs != 2)
            continue;
        int r = at(fn, p)->type.rank, t = (int)ir_attr(fn, at(fn, total), 1), sub = arg(fn, e, 0);
        if (r < 2 || !row_reduce(fn, total, e, RED_SUM, t) || !row_broadcast(fn, bt, r, t) ||
            !is(fn, sub, OP_SUB, 2))
            continue;
        int logits = arg(fn, sub, 0), bp = arg(fn, sub, 1), peak = at(fn, bp)->nargs == 1 ? arg(fn, bp, 0) : -1;
        if (peak < 0 || !row_broadcast(fn, bp, r, t) || !row_reduce(fn, peak, logits, RED_MAX, t))
            continue;
        int scores, d1, s;
        member(&mt, p), member(&mt, bt), member(&mt, total), member(&mt, e), member(&mt, sub), member(&mt, bp);
        member(&mt, peak);
        masked(&mt, logits, t, &scores);
        if (!scaled(&mt, scores, &d1) || !scores_dot(&mt, d1, t, &s) ||
            (af->mask >= 0 && mt.mask_s_dim != s) || !output_dot(&mt, d2, pside, r, t, s))
            continue;
        member(&mt, d1);
        af->mask_row = af->mask >= 0 ? af->T : 0;   /* the mask's shape is [S, T]: its dims are the scores' */
        for (int i = 1; i < af->nmembers; i++)      /* in program order: a few, insertion sort */
            for (int j = i; j > 0 && af->members[j - 1] > af->members[j]; j--) {
                int x = af->members[j];
                af->members[j] = af->members[j - 1];
                af->members[j - 1] = x;
            }
        return af->nmembers < ATTENTION_MAX_MEMBERS;
    }
    return 0;
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
