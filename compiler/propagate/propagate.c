/* Sharding propagation, in the manner of GSPMD and Shardy.
 *
 * Each op's factor rule (ops.c) names its iteration factors and how the
 * dims of its operands and result are made of them.  Propagating through an
 * op projects the known shardings of its tensors onto the factors, picks one
 * sharding per factor, and projects that back onto the tensors that may
 * still change.  Shardings only ever grow (an unsplit dim gains axes; a split
 * dim keeps its axes), so sweeping forward and backward reaches a fixed point.
 *
 * Roots: parameters and sharding constraints are fixed (open `@?` dims
 * excepted); values returned take the declared result shardings as a hint;
 * call results arrive in the callee's result shardings.  As in GSPMD and
 * Shardy, elementwise and reshape-like ops propagate first, then dots,
 * reductions and the rest.  Conflicts between tensors over a factor are
 * settled by bytes: the sharding already held by the most bytes wins, so the
 * fewest bytes must move (docs/propagation.md).  A value placed on a submesh
 * never takes the submesh's axis: it has one coordinate there. */
#include "propagate.h"

#include <string.h>

enum { MAX_SWEEPS = 64 };

typedef struct {
    const Module *m;
    Fn *fn;
    uint8_t *fixed;              /* per value: its sharding may not change */
    int changed;
    int step;                    /* counts propagate_op calls, to group origins */
    int *origin_step;            /* per value: the step that last set its origin */
} Prop;

typedef struct {
    int n;
    int8_t axes[MAX_AXES];
} AxisList;

static int64_t bytes_of(const Shape *s) { return shape_elems(s) * dtype_size(s->dtype); }

/* The ordered axes splitting dim d (open dims and unknown shardings: none). */
static AxisList dim_axes(const Sharding *sh, int d) {
    AxisList l = {0, {0}};
    int axes[MAX_AXES];
    if (!sh->known || (sh->open >> d & 1))
        return l;
    l.n = sharding_dim_axes(sh, d, axes);
    for (int i = 0; i < l.n; i++)
        l.axes[i] = (int8_t)axes[i];
    return l;
}

/* ---- projecting tensors onto factors ---- */

typedef struct {
    AxisList axes;
    int64_t weight;              /* bytes of the tensors holding this choice */
    int first;                   /* first tensor proposing it: ties break on it */
    int tensor;                  /* a tensor proposing it, for provenance */
} Candidate;

typedef struct {
    Candidate cand[MAX_RULE_TENSORS];
    int n;
} FactorVotes;

static int same_axes(const AxisList *a, const AxisList *b) {
    return a->n == b->n && memcmp(a->axes, b->axes, (size_t)a->n) == 0;
}

static void vote(FactorVotes *v, const AxisList *axes, int64_t weight, int tensor) {
    for (int i = 0; i < v->n; i++)
        if (same_axes(&v->cand[i].axes, axes)) {
            /* Saturate: types may be as large as 2^59 elements. */
            if (__builtin_add_overflow(v->cand[i].weight, weight, &v->cand[i].weight))
                v->cand[i].weight = INT64_MAX;
            return;
        }
    if (v->n < MAX_RULE_TENSORS)
        v->cand[v->n++] = (Candidate){*axes, weight, tensor, tensor};
}

/* Split a dim's axes among the dim's factors, major factor first: an axis
 * goes to a factor while the axes given to it still divide its size. */
static void project_dim(const Module *m, const Rule *r, int t, int d, const AxisList *dim,
                        AxisList per_factor[MAX_FACTORS]) {
    int k = 0;
    int64_t used = 1;
    if (r->ndf[t][d] == 1) {         /* one factor takes every axis, even unevenly */
        per_factor[r->f[t][d][0]] = *dim;
        return;
    }
    for (int i = 0; i < dim->n && k < r->ndf[t][d]; i++) {
        int f = r->f[t][d][k];
        int64_t size = m->axis_size[dim->axes[i]];
        if (r->size[f] % (used * size) != 0) {
            if (used != r->size[f])
                return;              /* the axis does not fit this factor: stop */
            k++, used = 1, i--;      /* the factor is whole: go on with the next */
            continue;
        }
        per_factor[f].axes[per_factor[f].n++] = dim->axes[i];
        used *= size;
    }
}

static const Shape *tensor_shape(const Fn *fn, const Inst *in, int t) {
    return t < in->nargs ? &fn->insts[ir_arg(fn, in, t)].type : &in->type;
}

static const Sharding *tensor_sharding(const Fn *fn, const Inst *in, int t) {
    return t < in->nargs ? &fn->insts[ir_arg(fn, in, t)].sh : &in->sh;
}

/* Choose a sharding per factor: most bytes, then more axes, then the
 * earliest tensor.  An axis serves one factor: later factors lose it. */
static void choose(const Rule *r, FactorVotes *votes, AxisList chosen[MAX_FACTORS], int source[MAX_FACTORS]) {
    int order[MAX_FACTORS], best[MAX_FACTORS];
    for (int f = 0; f < r->nfactors; f++) {
        best[f] = -1;
        for (int i = 0; i < votes[f].n; i++) {
            const Candidate *c = &votes[f].cand[i], *b = best[f] < 0 ? NULL : &votes[f].cand[best[f]];
            if (!b || c->weight > b->weight || (c->weight == b->weight &&
                (c->axes.n > b->axes.n || (c->axes.n == b->axes.n && c->first < b->first))))
                best[f] = i;
        }
        order[f] = f;
    }
    /* Factors with heavier choices claim their axes first (stable). */
    for (int i = 1; i < r->nfactors; i++)
        for (int j = i; j > 0; j--) {
            int64_t wj = best[order[j]] < 0 ? -1 : votes[order[j]].cand[best[order[j]]].weight;
            int64_t wp = best[order[j - 1]] < 0 ? -1 : votes[order[j - 1]].cand[best[order[j - 1]]].weight;
            if (wj <= wp)
                break;
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    uint32_t taken = 0;
    for (int i = 0; i < r->nfactors; i++) {
        int f = order[i];
        chosen[f].n = 0;
        source[f] = -1;
        if (best[f] < 0)
            continue;
        const Candidate *c = &votes[f].cand[best[f]];
        source[f] = c->tensor;
        for (int k = 0; k < c->axes.n; k++) {
            if (taken >> c->axes.axes[k] & 1)
                break;               /* keep the list a prefix: major axes first */
            taken |= 1u << c->axes.axes[k];
            chosen[f].axes[chosen[f].n++] = c->axes.axes[k];
        }
    }
}

/* ---- applying factor shardings to tensors ---- */

/* `from` is the neighbour to name, `src` the value whose axes were taken
 * (they differ when a value gets its sharding from a sibling operand). */
static void set_origin(Prop *p, Inst *in, Why why, int from, int src_value) {
    const Inst *src = src_value >= 0 ? &p->fn->insts[src_value] : NULL;
    /* A second dim refined by another neighbour in the same step: keep both. */
    if (in->why == why && in->why_from >= 0 && from != in->why_from && p->step == p->origin_step[in - p->fn->insts]) {
        in->why_from2 = from;
        return;
    }
    in->why = (uint8_t)why;
    in->why_from = from;
    in->why_from2 = -1;
    in->why_root = src && src->why_root >= 0 ? src->why_root : src_value;
    p->origin_step[in - p->fn->insts] = p->step;
}

/* Give dim d of value v the axes `axes`, if it may change and the axes are
 * free in v.  Returns 1 when v changed. */
static int refine_dim(Prop *p, int v, int d, const AxisList *axes) {
    Inst *in = &p->fn->insts[v];
    Sharding *sh = &in->sh;
    if (axes->n == 0 || (p->fixed[v] && !(sh->open >> d & 1)))
        return 0;
    if (!sh->known)
        *sh = sharding_replicated();
    int current[MAX_AXES];
    if (sharding_dim_axes(sh, d, current) > 0)
        return 0;
    int64_t parts = 1;
    int banned = in->place ? p->m->submesh[in->place - 1].axis : -1;
    for (int i = 0; i < axes->n; i++) {
        if (sh->dim[axes->axes[i]] != SH_REPLICATED || axes->axes[i] == banned)
            return 0;                /* the axis already splits another dim, or the value lives at one coordinate of it */
        parts *= p->m->axis_size[axes->axes[i]];
    }
    if (parts > in->type.dims[d])
        return 0;                    /* more blocks than elements: not worth it */
    for (int i = 0; i < axes->n; i++) {
        sh->dim[axes->axes[i]] = (int8_t)d;
        sh->pos[axes->axes[i]] = (uint8_t)i;
    }
    sh->open &= (uint8_t)~(1u << d);
    return 1;
}

static void apply(Prop *p, int v, const Inst *op, int t, const Rule *r, const AxisList chosen[MAX_FACTORS],
                  const int source[MAX_FACTORS], int op_index) {
    const Shape *s = tensor_shape(p->fn, op, t);
    for (int d = 0; d < s->rank; d++) {
        AxisList axes = {0, {0}};
        int from = -1;
        for (int k = 0; k < r->ndf[t][d]; k++) {
            int f = r->f[t][d][k];
            if (r->kind[f] == FACTOR_REPLICATE)
                break;               /* slices, concats, rolls: never carried across */
            for (int i = 0; i < chosen[f].n; i++)
                axes.axes[axes.n++] = chosen[f].axes[i];
            if (from < 0 && chosen[f].n)
                from = source[f];
            /* A factor that is not whole splits only the major part of a dim. */
            int64_t parts = 1;
            for (int i = 0; i < chosen[f].n; i++)
                parts *= p->m->axis_size[chosen[f].axes[i]];
            if (parts != r->size[f])
                break;
        }
        if (!refine_dim(p, v, d, &axes))
            continue;
        p->changed = 1;
        /* Forward: name the operand it came from; backward: the user it came through. */
        int forward = t == op->nargs;
        int src = from < op->nargs ? ir_arg(p->fn, op, from) : op_index;
        set_origin(p, &p->fn->insts[v], forward ? WHY_FORWARD : WHY_BACKWARD, forward ? src : op_index, src);
    }
}

/* An op's priority (ops.def), but that a broadcast that adds dims to a
 * tensor waits for the ops around it: its operand (a bias, a scale) is
 * small, and its split would otherwise spread into the large values it
 * meets, which then move instead of the operand (an FSDP bias split over
 * the data axis would split the activations' features). */
static int priority(const Fn *fn, const Inst *in) {
    if (in->op == OP_BROADCAST && in->nattrs && fn->insts[ir_arg(fn, in, 0)].type.rank < in->type.rank)
        return 1;
    return op_info[in->op].prio;
}

/* Visit op v if its priority is at most `prio`. */
static void propagate_op(Prop *p, int v, int prio) {
    const Inst *in = &p->fn->insts[v];
    p->step++;
    Rule r;
    if (priority(p->fn, in) > prio || !op_rule(p->fn, in, &r))
        return;
    FactorVotes votes[MAX_FACTORS];
    memset(votes, 0, sizeof(FactorVotes) * (size_t)r.nfactors);
    for (int t = 0; t < r.ntensors; t++) {
        const Sharding *sh = tensor_sharding(p->fn, in, t);
        if (!sh->known)
            continue;
        AxisList per_factor[MAX_FACTORS];
        memset(per_factor, 0, sizeof(AxisList) * (size_t)r.nfactors);
        for (int d = 0; d < r.rank[t]; d++) {
            AxisList dim = dim_axes(sh, d);
            project_dim(p->m, &r, t, d, &dim, per_factor);
        }
        int64_t w = bytes_of(tensor_shape(p->fn, in, t));
        for (int f = 0; f < r.nfactors; f++)
            if (per_factor[f].n && r.kind[f] != FACTOR_REPLICATE)
                vote(&votes[f], &per_factor[f], w, t);
    }
    AxisList chosen[MAX_FACTORS];
    int source[MAX_FACTORS];
    choose(&r, votes, chosen, source);
    for (int t = 0; t < r.ntensors; t++)
        apply(p, t < in->nargs ? ir_arg(p->fn, in, t) : v, in, t, &r, chosen, source, v);
}

/* Returned values lean toward the declared result shardings. */
static void hint_results(Prop *p) {
    Fn *fn = p->fn;
    int ret = fn->ninsts - 1;
    const Inst *in = &fn->insts[ret];
    for (int i = 0; i < in->nargs; i++) {
        int v = ir_arg(fn, in, i);
        const Sharding *want = &fn->results[i].sh;
        for (int d = 0; d < fn->insts[v].type.rank; d++) {
            AxisList axes = dim_axes(want, d);
            if (refine_dim(p, v, d, &axes)) {
                p->changed = 1;
                set_origin(p, &fn->insts[v], WHY_RESULT, ret, ret);
                fn->insts[v].why_root = ret;
            }
        }
    }
}

static void init_roots(Prop *p) {
    Fn *fn = p->fn;
    for (int v = 0; v < fn->ninsts; v++) {
        Inst *in = &fn->insts[v];
        in->why = WHY_NONE;
        in->why_from = in->why_from2 = in->why_root = -1;
        if (in->op == OP_PARAMETER) {
            in->sh = fn->params[ir_attr(fn, in, 0)].sh;
            in->why = WHY_PARAMETER;
        } else if (in->flags & INST_CONSTRAINED) {
            in->why = WHY_CONSTRAINT;
        } else if (op_calls(in->op) || in->op == OP_GET_TUPLE_ELEMENT) {
            const Inst *call = op_calls(in->op) ? in : &fn->insts[ir_arg(fn, in, 0)];
            const Fn *callee = &p->m->fns[ir_attr(fn, call, 0)];
            int which = op_calls(in->op) ? 0 : (int)ir_attr(fn, in, 0);
            if (in->type.dtype == DT_TUPLE)
                continue;
            in->sh = callee->results[which].sh;
            in->sh.open = 0;
            in->why = WHY_CALL;
        } else
            continue;
        p->fixed[v] = 1;
        in->why_root = v;
    }
}

static void propagate_fn(const Module *m, Fn *fn) {
    Arena scratch = {0};
    Prop p = {m, fn, arena_alloc(&scratch, (size_t)fn->ninsts), 0, 1, NULL};
    p.origin_step = arena_alloc(&scratch, sizeof(int) * (size_t)fn->ninsts);
    init_roots(&p);
    /* Ops that pass shardings through first, then all of them (ops.def's
     * priorities), each round until nothing changes. */
    for (int prio = 0; prio <= 1; prio++) {
        for (int sweep = 0; sweep < MAX_SWEEPS; sweep++) {
            p.changed = 0;
            for (int v = 0; v < fn->ninsts; v++)
                propagate_op(&p, v, prio);
            hint_results(&p);
            for (int v = fn->ninsts - 1; v >= 0; v--)
                propagate_op(&p, v, prio);
            if (!p.changed)
                break;
        }
    }
    /* What nothing reached is replicated. */
    for (int v = 0; v < fn->ninsts; v++) {
        Inst *in = &fn->insts[v];
        if (in->type.dtype == DT_TUPLE || in->op == OP_RETURN)
            continue;
        if (!in->sh.known) {
            in->sh = sharding_replicated();
            in->why = WHY_DEFAULT;
        }
        in->sh.open = 0;
        if (in->op == OP_PARAMETER)
            fn->params[ir_attr(fn, in, 0)].sh = in->sh;     /* open dims chosen: callers pass this */
    }
    arena_free(&scratch);
}

/* Callers go first: propagating a fn fixes its parameter shardings, and
 * its callers must still see which dims its declaration leaves open.
 * Specializations are appended while this runs, already propagated. */
void propagate_module(Module *m) {
    int nfns = m->nfns;
    Arena scratch = {0};
    int *order = arena_alloc(&scratch, sizeof(int) * (size_t)(nfns + 1));
    module_callees_first(m, order);
    for (int i = nfns - 1; i >= 0; i--) {
        int f = order[i];
        if (m->fns[f].spmd)
            continue;
        if (fn_calls_generic(m, &m->fns[f]))
            specialize_fn(m, f, propagate_fn);
        else
            propagate_fn(m, &m->fns[f]);
    }
    arena_free(&scratch);
}
