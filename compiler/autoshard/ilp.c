/* The sharding search's integer program (docs/autoshard.md, "The integer
 * program"), in the manner of Alpa's intra-operator pass, on shardc's
 * factor rules.
 *
 * The entry fn is flattened (calls walked with a value map, a loop body
 * once with its costs weighted by its trip count, each carried result
 * linked to the value it replaces).  Nodes are the parameters (strategies:
 * the AutoParam's candidates; tied ones share one variable set) and every
 * instruction that contracts two operands (dot, scatter); their strategies
 * assign mesh axes to the op's factors.  Every other instruction with a
 * factor rule (elementwise, broadcast, reshape, reduce, slices, gather,
 * cumsum, ...) is merged into the node of the operand that passes the most
 * dims to it, following the rule to know which dim becomes which; its
 * other operands become edges.  Node costs are roofline times plus the
 * all-reduce of a result whose reduction factor is split; edge costs the
 * resharding of a value between the producer's and the consumer's
 * sharding, a sum over the mesh axes.  GLPK solves it. */
#include "problem.h"

#include <glpk.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_STRATEGIES = 4096, ILP_TIME_LIMIT_MS = 2000 };

/* A sharding as the program sees it: per mesh axis the dim it splits, or -1. */
typedef struct {
    int8_t dim[MAX_AXES];
} Split;

typedef struct {
    int node;                    /* the node whose strategy decides its sharding, or -1: replicated */
    int8_t map[MAX_RANK];        /* its dim d is the node's tensor dim map[d], or -1 (never split) */
    double xfer;                 /* bytes a reshard of it moves (globally): a broadcast's operand's */
} FVal;

typedef struct {
    int group;                   /* its variable set: a node's own, or a tied parameter's */
    int param;                   /* the entry's parameter index, or -1 */
    Shape type;                  /* its tensor: the parameter, or the instruction's result */
    int nstrat;
    Split *out;                  /* per strategy: the tensor's sharding */
} Node;

/* An edge's cost is a sum over the mesh axes, each term depending on the
 * producer's strategy only through what it does to the value on that axis
 * (the dim it splits, and which other axes split the value: the size of
 * the block) and on the consumer's through the dim it wants split on that
 * axis.  Strategies fall into classes by those, and each axis's term is a
 * matrix over its classes: far smaller than one over strategy pairs, or
 * over pairs of whole shardings. */
typedef struct {
    int np, nw;                  /* classes of each side */
    int *pclass, *wclass;        /* per strategy of the producer, of the consumer: its class */
    double *cost;                /* [p * nw + q] */
} EdgeAxis;

typedef struct {
    int u, v;                    /* nodes: producer, consumer */
    EdgeAxis ax[MAX_AXES];
} Edge;

typedef struct {
    int n;                       /* strategies */
    double *cost;                /* per strategy: node costs of its nodes */
    double *mem;                 /* per strategy: parameter bytes per device */
    int *alive;                  /* not pruned */
    int *col;                    /* its GLPK column, 0: none (a group of one strategy left) */
} Group;

typedef struct {
    const AutoProblem *p;
    const Module *m;
    Arena *a;
    FVal *vals;
    int nvals, vals_cap;
    Node *nodes;
    int nnodes, nodes_cap;
    Edge *edges;
    int nedges, edges_cap;
    Group *groups;
    int ngroups;
    int *param_node;             /* entry parameter -> node */
} Ilp;

/* ---- the flattened graph ---- */

static int new_val(Ilp *g, FVal v) {
    if (g->nvals == g->vals_cap)
        g->vals = vec_grow(g->a, g->vals, &g->vals_cap, sizeof *g->vals);
    g->vals[g->nvals] = v;
    return g->nvals++;
}

static FVal replicated_val(void) {
    FVal v = {.node = -1, .xfer = 0};
    return v;
}

static double shape_bytes(const Shape *s) {
    return s->dtype >= DT_COUNT ? 0 : (double)shape_elems(s) * dtype_size(s->dtype);
}

static int new_node(Ilp *g, const Shape *type, int nstrat, int param) {
    if (g->nnodes == g->nodes_cap)
        g->nodes = vec_grow(g->a, g->nodes, &g->nodes_cap, sizeof *g->nodes);
    Node *n = &g->nodes[g->nnodes];
    *n = (Node){.group = -1, .param = param, .type = *type, .nstrat = nstrat};
    n->out = arena_alloc(g->a, sizeof(Split) * (size_t)nstrat);
    return g->nnodes++;
}

static Edge *add_edge(Ilp *g) {
    if (g->nedges == g->edges_cap)
        g->edges = vec_grow(g->a, g->edges, &g->edges_cap, sizeof *g->edges);
    return &g->edges[g->nedges++];
}

/* The cost of edge e for strategies i of its producer and j of its consumer. */
static double edge_cost(const Ilp *g, const Edge *e, int i, int j) {
    double c = 0;
    for (int a = 0; a < g->m->naxes; a++)
        c += e->ax[a].cost[e->ax[a].pclass[i] * e->ax[a].nw + e->ax[a].wclass[j]];
    return c;
}

/* A value's sharding under strategy s of its node. */
static Split val_split(const Ilp *g, const FVal *fv, int rank, int s) {
    Split sp;
    memset(sp.dim, -1, sizeof sp.dim);
    if (fv->node < 0)
        return sp;
    const Split *o = &g->nodes[fv->node].out[s];
    for (int a = 0; a < g->m->naxes; a++)
        for (int d = 0; d < rank; d++)
            if (o->dim[a] >= 0 && fv->map[d] == o->dim[a])
                sp.dim[a] = (int8_t)d;
    return sp;
}

static double split_ways(const Module *m, const Split *sp) {
    double n = 1;
    for (int a = 0; a < m->naxes; a++)
        if (sp->dim[a] >= 0)
            n *= (double)m->axis_size[a];
    return n;
}

/* Resharding a value of `bytes` (global) on mesh axis a, from dim `from`
 * to dim `to` (-1: whole), the producer's block being bytes / ways: kept
 * -> 0; split but wanted whole -> all-gather; wanted split where the
 * producer has the dim whole -> no communication, each device copies its
 * block out (memory time: the block read, its part written); moved to
 * another dim -> all-to-all.  Each collective runs on its axis's link as
 * the cost model's (cost_collective_time).  The axes' moves are costed
 * each on the producer's block, as if they ran side by side. */
static double axis_reshard_time(const Ilp *g, int a, double bytes, double ways, int from, int to) {
    const Module *m = g->m;
    int64_t axis = a, n = m->axis_size[a];
    double block = bytes / ways;
    if (from == to)
        return 0;
    if (from < 0)
        return (block + block / (double)n) / g->p->t->mem_bw;
    if (to < 0)
        return cost_collective_time(g->p->t, m, OP_ALL_GATHER, &axis, 1, (double)(n - 1) * block);
    return cost_collective_time(g->p->t, m, OP_ALL_TO_ALL, &axis, 1, (double)(n - 1) / (double)n * block);
}

/* The whole reshard: the sum over the axes. */
static double reshard_time(const Ilp *g, double bytes, const Split *from, const Split *to) {
    double t = 0, ways = split_ways(g->m, from);
    for (int a = 0; a < g->m->naxes; a++)
        t += axis_reshard_time(g, a, bytes, ways, from->dim[a], to->dim[a]);
    return t;
}

/* The class of key among the distinct ones so far (added if new). */
static int key_class(int *seen, int *n, int key) {
    for (int k = 0; k < *n; k++)
        if (seen[k] == key)
            return k;
    seen[*n] = key;
    return (*n)++;
}

/* The edge from the node of `fv` (a value of `type`) to node c, whose
 * strategy j wants the value as want[j]; weight w (a loop's trips). */
static void link_value(Ilp *g, const FVal *fv, const Shape *type, int c, const Split *want, double w) {
    if (fv->node < 0 || w == 0)
        return;
    const Module *m = g->m;
    int nu = g->nodes[fv->node].nstrat, nv = g->nodes[c].nstrat;
    int *pkey = malloc(sizeof(int) * (size_t)nu), *wkey = malloc(sizeof(int) * (size_t)nv);
    double *pways = malloc(sizeof(double) * (size_t)nu);
    Edge e = {.u = fv->node, .v = c};
    for (int a = 0; a < m->naxes; a++) {
        EdgeAxis *x = &e.ax[a];
        x->pclass = arena_alloc(g->a, sizeof(int) * (size_t)nu);
        x->wclass = arena_alloc(g->a, sizeof(int) * (size_t)nv);
        for (int i = 0; i < nu; i++) {
            Split sp = val_split(g, fv, type->rank, i);
            int others = 0;
            for (int b = 0; b < m->naxes; b++)
                others |= (b != a && sp.dim[b] >= 0) << b;
            int k = x->pclass[i] = key_class(pkey, &x->np, (sp.dim[a] + 1) << MAX_AXES | others);
            pways[k] = split_ways(m, &sp);
        }
        for (int j = 0; j < nv; j++)
            x->wclass[j] = key_class(wkey, &x->nw, want[j].dim[a]);
        x->cost = arena_alloc(g->a, sizeof(double) * (size_t)(x->np * x->nw));
        for (int p = 0; p < x->np; p++)
            for (int q = 0; q < x->nw; q++)
                x->cost[p * x->nw + q] = w * axis_reshard_time(g, a, fv->xfer, pways[p], (pkey[p] >> MAX_AXES) - 1,
                                                               wkey[q]);
    }
    *add_edge(g) = e;
    free(pkey);
    free(wkey);
    free(pways);
}

/* Node costs accumulate per strategy in an array beside the nodes, grown
 * with them; merged instructions add theirs to their anchor's. */
typedef struct {
    double **cost;               /* per node, per strategy */
    int cap;
} Costs;

static double *node_costs(Ilp *g, Costs *cs, int node) {
    if (node >= cs->cap) {
        int cap = cs->cap ? cs->cap : 64;
        while (cap <= node)
            cap *= 2;
        cs->cost = arena_realloc(g->a, cs->cost, sizeof(double *) * (size_t)cs->cap, sizeof(double *) * (size_t)cap);
        cs->cap = cap;
    }
    if (!cs->cost[node])
        cs->cost[node] = arena_alloc(g->a, sizeof(double) * (size_t)g->nodes[node].nstrat);
    return cs->cost[node];
}

/* The dim of tensor t of rule r whose major factor is f, or -1. */
static int dim_of_factor(const Rule *r, int t, int f) {
    for (int d = 0; d < r->rank[t]; d++)
        if (r->ndf[t][d] && r->f[t][d][0] == f)
            return d;
    return -1;
}

/* Can factor f be split: a PASS or REDUCTION factor that is the major
 * factor of every dim it appears in (a minor part of a merged dim is not a
 * block of it)? */
static int splittable(const Rule *r, int f) {
    if (r->kind[f] == FACTOR_REPLICATE || r->size[f] < 2)
        return 0;
    for (int t = 0; t < r->ntensors; t++)
        for (int d = 0; d < r->rank[t]; d++)
            for (int k = 1; k < r->ndf[t][d]; k++)
                if (r->f[t][d][k] == f)
                    return 0;
    return 1;
}

typedef struct {
    int8_t factor[MAX_AXES];     /* per axis: the factor it splits, or -1 */
} Assign;

/* Every assignment of mesh axes to splittable factors (each axis to at
 * most one, extents divisible by their axes' product), in a fixed order:
 * the first is all-replicated.  Returns how many, at most MAX_STRATEGIES. */
static int enumerate(const Module *m, const Rule *r, Assign *out) {
    int fs[MAX_FACTORS], nf = 0, n = 0;
    for (int f = 0; f < r->nfactors; f++)
        if (splittable(r, f))
            fs[nf++] = f;
    int digit[MAX_AXES] = {0};
    for (;;) {
        int64_t prod[MAX_FACTORS];
        for (int f = 0; f < r->nfactors; f++)
            prod[f] = 1;
        Assign as = {{0}};
        int ok = 1;
        for (int a = 0; a < m->naxes; a++) {
            as.factor[a] = (int8_t)(digit[a] ? fs[digit[a] - 1] : -1);
            if (digit[a])
                prod[fs[digit[a] - 1]] *= m->axis_size[a];
        }
        for (int f = 0; f < r->nfactors && ok; f++)
            ok = r->size[f] % prod[f] == 0;
        if (ok && n < MAX_STRATEGIES)
            out[n++] = as;
        int a = 0;
        while (a < m->naxes && ++digit[a] > nf)
            digit[a++] = 0;
        if (a == m->naxes)
            return n;
    }
}

/* Tensor t's sharding under an assignment: each axis splits the dim its
 * factor leads, if t has it. */
static Split tensor_split(const Module *m, const Rule *r, int t, const Assign *as) {
    Split sp;
    memset(sp.dim, -1, sizeof sp.dim);
    for (int a = 0; a < m->naxes; a++)
        if (as->factor[a] >= 0)
            sp.dim[a] = (int8_t)dim_of_factor(r, t, as->factor[a]);
    return sp;
}

typedef struct {
    const Fn *fn;
    int32_t *at;                 /* instruction -> flat value, -1: none */
    int32_t **tuple;             /* a call's or loop's results -> flat values */
    double w;                    /* how many times it runs */
} Frame;

static void walk(Ilp *g, Costs *cs, const Fn *fn, const int32_t *params, double w, int32_t *results);

/* An instruction propagation ranks later (prio 1): a node, strategies over
 * its factors, an edge per operand from the operand's node. */
static void op_node(Ilp *g, Costs *cs, Frame *f, int v, const Rule *r) {
    const Module *m = g->m;
    const Inst *in = &f->fn->insts[v];
    Assign *as = malloc(sizeof(Assign) * MAX_STRATEGIES);
    int n = enumerate(m, r, as), res = r->ntensors - 1;
    int node = new_node(g, &in->type, n, -1);
    double *cost = node_costs(g, cs, node);
    double flops = cost_inst_flops(f->fn, in);
    for (int s = 0; s < n; s++) {
        double ways = 1, bytes = 0;
        int64_t partial[MAX_AXES];
        int npartial = 0;
        for (int a = 0; a < m->naxes; a++)
            if (as[s].factor[a] >= 0) {
                ways *= (double)m->axis_size[a];
                if (r->kind[as[s].factor[a]] == FACTOR_REDUCTION)
                    partial[npartial++] = a;
            }
        Split out = tensor_split(m, r, res, &as[s]);
        g->nodes[node].out[s] = out;
        bytes += shape_bytes(&in->type) / split_ways(m, &out);
        for (int i = 0; i < in->nargs; i++) {
            Split sp = tensor_split(m, r, i, &as[s]);
            bytes += shape_bytes(&f->fn->insts[ir_arg(f->fn, in, i)].type) / split_ways(m, &sp);
        }
        double t = cost_roofline(g->p->t, f->fn, in, flops / ways, bytes, NULL);
        if (npartial) {          /* each device holds a partial sum: an all-reduce (ring) */
            int64_t group = 1;
            for (int k = 0; k < npartial; k++)
                group *= m->axis_size[partial[k]];
            double local = shape_bytes(&in->type) / split_ways(m, &out);
            t += cost_collective_time(g->p->t, m, OP_ALL_REDUCE, partial, npartial,
                                      2.0 * (double)(group - 1) / (double)group * local);
        }
        cost[s] = f->w * t;
    }
    for (int i = 0; i < in->nargs; i++) {
        int arg = ir_arg(f->fn, in, i);
        if (f->at[arg] < 0)
            continue;
        Split *want = arena_alloc(g->a, sizeof(Split) * (size_t)n);
        for (int s = 0; s < n; s++)
            want[s] = tensor_split(m, r, i, &as[s]);
        link_value(g, &g->vals[f->at[arg]], &f->fn->insts[arg].type, node, want, f->w);
    }
    free(as);
    FVal fv = {.node = node, .xfer = shape_bytes(&in->type)};
    for (int d = 0; d < MAX_RANK; d++)
        fv.map[d] = (int8_t)(d < in->type.rank ? d : -1);
    f->at[v] = new_val(g, fv);
}

/* Does the op contract two operands (a REDUCTION factor in both: a dot's
 * contracted dims, a scatter's index dims)?  Those are nodes. */
static int contracts(const Rule *r) {
    for (int f = 0; f < r->nfactors; f++) {
        int in = 0;
        for (int t = 0; t < r->ntensors - 1; t++)
            for (int d = 0; d < r->rank[t]; d++)
                for (int k = 0; k < r->ndf[t][d]; k++)
                    in += r->f[t][d][k] == f && r->kind[f] == FACTOR_REDUCTION;
        if (in >= 2)
            return 1;
    }
    return 0;
}

/* How many of the result's dims operand k's value can pass on split: its
 * merge anchor is the operand that passes the most. */
static int passes(const Ilp *g, const Frame *f, const Inst *in, const Rule *r, int k) {
    int arg = ir_arg(f->fn, in, k), n = 0, res = r->ntensors - 1;
    if (f->at[arg] < 0 || g->vals[f->at[arg]].node < 0)
        return -1;
    const FVal *src = &g->vals[f->at[arg]];
    for (int d = 0; d < in->type.rank; d++) {
        int fac = r->ndf[res][d] ? r->f[res][d][0] : -1;
        int od = fac >= 0 && r->kind[fac] == FACTOR_PASS ? dim_of_factor(r, k, fac) : -1;
        n += od >= 0 && src->map[od] >= 0;
    }
    return n;
}

/* Any other instruction with a rule (elementwise, broadcast, reshape,
 * reduce, slices, gather, cumsum, ...): merged into the node of the operand
 * that passes the most dims to the result; its result's dims follow that
 * operand's through PASS factors.  Under each strategy of that node it
 * costs its roofline time on the split result, plus the all-gather of the
 * operand's dims that must be whole (a REPLICATE factor split: a slice's,
 * a cumsum's dim) and the all-reduce of the result when a REDUCTION factor
 * is split (a reduce over a split dim).  Its other operands link to the
 * node, wanted as the result's split passes back to them. */
static void merged(Ilp *g, Costs *cs, Frame *f, int v, const Rule *r) {
    const Module *m = g->m;
    const Inst *in = &f->fn->insts[v];
    int res = r->ntensors - 1, k = -1, best = -1;
    for (int i = 0; i < in->nargs; i++) {
        int n = passes(g, f, in, r, i);
        if (n > best) {
            best = n;
            k = i;
        }
    }
    if (k < 0 || best < 0) {
        f->at[v] = new_val(g, replicated_val());
        return;
    }
    const Shape *kt = &f->fn->insts[ir_arg(f->fn, in, k)].type;
    const FVal *src = &g->vals[f->at[ir_arg(f->fn, in, k)]];
    FVal fv = {.node = src->node, .xfer = in->op == OP_BROADCAST ? src->xfer : shape_bytes(&in->type)};
    memset(fv.map, -1, sizeof fv.map);
    for (int d = 0; d < in->type.rank; d++) {
        int fac = r->ndf[res][d] ? r->f[res][d][0] : -1;
        int od = fac >= 0 && r->kind[fac] == FACTOR_PASS ? dim_of_factor(r, k, fac) : -1;
        fv.map[d] = od >= 0 ? src->map[od] : -1;
    }
    int node = fv.node, n = g->nodes[node].nstrat;
    double *cost = node_costs(g, cs, node);
    double flops = cost_inst_flops(f->fn, in), bytes = cost_inst_bytes(f->fn, in);
    for (int s = 0; s < n; s++) {
        Split out = val_split(g, &fv, in->type.rank, s), from = val_split(g, src, kt->rank, s), whole = from;
        int64_t partial[MAX_AXES];
        int npartial = 0;
        for (int a = 0; a < m->naxes; a++) {
            int d = from.dim[a], fac = d >= 0 && r->ndf[k][d] ? r->f[k][d][0] : -1;
            if (fac >= 0 && r->kind[fac] == FACTOR_REDUCTION)
                partial[npartial++] = a;
            else if (d >= 0 && (fac < 0 || r->kind[fac] == FACTOR_REPLICATE))
                whole.dim[a] = -1;
        }
        double ways = split_ways(m, &out), t = reshard_time(g, shape_bytes(kt), &from, &whole);
        t += cost_roofline(g->p->t, f->fn, in, flops / ways, bytes / ways, NULL);
        if (npartial) {
            int64_t group = 1;
            for (int q = 0; q < npartial; q++)
                group *= m->axis_size[partial[q]];
            t += cost_collective_time(g->p->t, m, OP_ALL_REDUCE, partial, npartial,
                                      2.0 * (double)(group - 1) / (double)group * shape_bytes(&in->type) / ways);
        }
        cost[s] += f->w * t;
    }
    for (int i = 0; i < in->nargs; i++) {
        int arg = ir_arg(f->fn, in, i);
        if (i == k || f->at[arg] < 0 || g->vals[f->at[arg]].node < 0)
            continue;
        const Shape *at = &f->fn->insts[arg].type;
        Split *want = arena_alloc(g->a, sizeof(Split) * (size_t)n);
        for (int s = 0; s < n; s++) {
            Split out = val_split(g, &fv, in->type.rank, s);
            memset(want[s].dim, -1, sizeof want[s].dim);
            for (int a = 0; a < m->naxes; a++) {
                int d = out.dim[a], fac = d >= 0 && r->ndf[res][d] ? r->f[res][d][0] : -1;
                if (fac >= 0)
                    want[s].dim[a] = (int8_t)dim_of_factor(r, i, fac);
            }
        }
        link_value(g, &g->vals[f->at[arg]], at, node, want, f->w);
    }
    f->at[v] = new_val(g, fv);
}

/* A call or loop: its callee walked with its operands as parameters.  A
 * loop's body runs trips times; what it carries must keep one sharding, so
 * each carried result links to the value it replaces. */
static void call(Ilp *g, Costs *cs, Frame *f, int v) {
    const Inst *in = &f->fn->insts[v];
    const Fn *callee = &g->m->fns[inst_callee(f->fn, in)];
    int32_t *params = arena_alloc(g->a, sizeof(int32_t) * (size_t)(in->nargs + 1));
    int32_t *results = arena_alloc(g->a, sizeof(int32_t) * (size_t)(callee->nresults + 1));
    for (int i = 0; i < in->nargs; i++)
        params[i] = f->at[ir_arg(f->fn, in, i)];
    double w = f->w;
    if (in->op == OP_LOOP) {
        w *= (double)loop_trips_known(f->fn, in);
        params[0] = -1;                          /* the index */
    }
    if (fn_is_local(callee)) {                   /* an spmd fn's blocks: outside the search */
        for (int i = 0; i < callee->nresults; i++)
            results[i] = new_val(g, replicated_val());
    } else {
        walk(g, cs, callee, params, w, results);
    }
    if (in->op == OP_LOOP)
        for (int j = 0; j < loop_carried(f->fn, in); j++) {
            int p = params[1 + j], rv = results[j];
            if (p < 0 || rv < 0 || g->vals[p].node < 0)
                continue;
            const Shape *type = &callee->results[j].type;
            int node = g->vals[p].node, n = g->nodes[node].nstrat;
            Split *want = arena_alloc(g->a, sizeof(Split) * (size_t)n);
            for (int s = 0; s < n; s++)
                want[s] = val_split(g, &g->vals[p], type->rank, s);
            link_value(g, &g->vals[rv], type, node, want, w);
        }
    if (in->type.dtype == DT_TUPLE)
        f->tuple[v] = results;
    else
        f->at[v] = results[0];
}

/* Walk fn once: params[i] are its parameters' flat values (-1: replicated);
 * its results' flat values go to results. */
static void walk(Ilp *g, Costs *cs, const Fn *fn, const int32_t *params, double w, int32_t *results) {
    Frame f = {fn, malloc(sizeof(int32_t) * (size_t)(fn->ninsts + 1)),
               calloc((size_t)fn->ninsts + 1, sizeof(int32_t *)), w};
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        Rule r;
        f.at[v] = -1;
        if (in->op == OP_PARAMETER) {
            int64_t i = ir_attr(fn, in, 0);
            f.at[v] = params ? params[i] : -1;
            if (f.at[v] < 0)
                f.at[v] = new_val(g, replicated_val());
        } else if (op_calls(in->op)) {
            call(g, cs, &f, v);
        } else if (in->op == OP_GET_TUPLE_ELEMENT) {
            int t = ir_arg(fn, in, 0);
            f.at[v] = f.tuple[t] ? f.tuple[t][ir_attr(fn, in, 0)] : -1;
        } else if (in->op == OP_RETURN) {
            for (int i = 0; i < in->nargs; i++)
                results[i] = f.at[ir_arg(fn, in, i)];
        } else if (!op_rule(fn, in, &r)) {
            f.at[v] = new_val(g, replicated_val());
        } else if (!contracts(&r)) {
            merged(g, cs, &f, v, &r);
        } else {
            op_node(g, cs, &f, v, &r);
        }
    }
    free(f.at);
    free(f.tuple);
}

/* ---- the parameters ---- */

static Split sharding_split(const Module *m, const Sharding *sh) {
    Split sp;
    memset(sp.dim, -1, sizeof sp.dim);
    for (int a = 0; sh->known && a < m->naxes; a++)
        sp.dim[a] = (int8_t)(sh->dim[a] >= 0 ? sh->dim[a] : -1);
    return sp;
}

/* A node per parameter of the entry: an AutoParam's candidates, else the
 * written sharding alone.  Tied AutoParams share their first one's group. */
static int32_t *param_nodes(Ilp *g) {
    const AutoProblem *p = g->p;
    const Fn *fn = &g->m->fns[p->fn];
    int32_t *vals = arena_alloc(g->a, sizeof(int32_t) * (size_t)(fn->nparams + 1));
    g->param_node = arena_alloc(g->a, sizeof(int) * (size_t)(fn->nparams + 1));
    for (int i = 0; i < fn->nparams; i++) {
        const AutoParam *ap = NULL;
        for (int k = 0; k < p->nparams; k++)
            if (p->params[k].param == i)
                ap = &p->params[k];
        const Shape *type = &fn->params[i].type;
        int node = new_node(g, type, ap ? ap->ncand : 1, i);
        for (int s = 0; s < g->nodes[node].nstrat; s++)
            g->nodes[node].out[s] = sharding_split(g->m, ap ? &ap->cand[s] : &fn->params[i].sh);
        g->param_node[i] = node;
        FVal fv = {.node = node, .xfer = shape_bytes(type)};
        for (int d = 0; d < MAX_RANK; d++)
            fv.map[d] = (int8_t)(d < type->rank ? d : -1);
        vals[i] = new_val(g, fv);
    }
    return vals;
}

/* ---- groups, pruning and the program ---- */

static int group_of_param(const AutoProblem *p, int k) {
    while (p->params[k].tie >= 0)
        k = p->params[k].tie;
    return k;
}

/* Bytes per device of each parameter under its strategies, and of each
 * entry result that is a parameter's node's tensor itself (an updated
 * weight: a second buffer of the same sharding).  Fixed parameters count
 * into *fixed. */
static void memory(Ilp *g, const int32_t *results, int nresults, double *fixed) {
    const Module *m = g->m;
    *fixed = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (n->param < 0)
            continue;
        int copies = 1;
        for (int k = 0; k < nresults; k++) {
            const FVal *fv = results[k] >= 0 ? &g->vals[results[k]] : NULL;
            int same = fv && fv->node == i;
            for (int d = 0; same && d < n->type.rank; d++)
                same = fv->map[d] == d;
            copies += same;
        }
        Group *gr = &g->groups[n->group];
        for (int s = 0; s < n->nstrat; s++) {
            double b = copies * shape_bytes(&n->type) / split_ways(m, &n->out[s]);
            if (gr->n == 1 && n->nstrat == 1)
                *fixed += b;
            else
                gr->mem[s] += b;
        }
    }
}

/* The AutoParam tied parameter node i takes its candidate from (the root
 * of its ties), or -1. */
static int tied_to(const Ilp *g, int i) {
    const AutoProblem *p = g->p;
    for (int k = 0; g->nodes[i].param >= 0 && k < p->nparams; k++)
        if (p->params[k].param == g->nodes[i].param && p->params[k].tie >= 0)
            return group_of_param(p, k);
    return -1;
}

/* A group per node, but tied parameters share their root's (a first pass
 * for the others, as a root may come after the parameters tied to it).
 * Returns -1 when tied parameters differ in their number of candidates. */
static int make_groups(Ilp *g, Costs *cs) {
    const AutoProblem *p = g->p;
    g->groups = arena_alloc(g->a, sizeof(Group) * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = &g->nodes[i];
        n->group = -1;
        if (tied_to(g, i) >= 0)
            continue;
        n->group = g->ngroups++;
        Group *gr = &g->groups[n->group];
        gr->n = n->nstrat;
        gr->cost = arena_alloc(g->a, sizeof(double) * (size_t)n->nstrat);
        gr->mem = arena_alloc(g->a, sizeof(double) * (size_t)n->nstrat);
        gr->alive = arena_alloc(g->a, sizeof(int) * (size_t)n->nstrat);
        gr->col = arena_alloc(g->a, sizeof(int) * (size_t)n->nstrat);
        for (int s = 0; s < n->nstrat; s++)
            gr->alive[s] = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = &g->nodes[i];
        int root = tied_to(g, i);
        if (root >= 0) {
            n->group = g->nodes[g->param_node[p->params[root].param]].group;
            if (g->groups[n->group].n != n->nstrat)
                return -1;
        }
        double *c = i < cs->cap ? cs->cost[i] : NULL;
        for (int s = 0; c && s < n->nstrat; s++)
            g->groups[n->group].cost[s] += c[s];
    }
    return 0;
}

/* Edges within a group (a merged value of its own node, a tied pair) cost
 * their diagonal; edges to a group of one strategy fold into the other's
 * costs. */
static void fold_edges(Ilp *g, double *constant) {
    int kept = 0;
    for (int e = 0; e < g->nedges; e++) {
        Edge *ed = &g->edges[e];
        const Node *u = &g->nodes[ed->u], *v = &g->nodes[ed->v];
        Group *gu = &g->groups[u->group], *gv = &g->groups[v->group];
        if (u->group == v->group) {
            for (int s = 0; s < gu->n; s++)
                gu->cost[s] += edge_cost(g, ed, s, s);
        } else if (gu->n == 1 && gv->n == 1) {
            *constant += edge_cost(g, ed, 0, 0);
        } else if (gu->n == 1) {
            for (int j = 0; j < gv->n; j++)
                gv->cost[j] += edge_cost(g, ed, 0, j);
        } else if (gv->n == 1) {
            for (int i = 0; i < gu->n; i++)
                gu->cost[i] += edge_cost(g, ed, i, 0);
        } else {
            g->edges[kept++] = *ed;
        }
    }
    g->nedges = kept;
}

/* Is strategy j of group x at least as good as i whatever the neighbours
 * choose: node cost, memory, and every edge's row or column? */
static int dominates(const Ilp *g, int x, int j, int i) {
    const Group *gr = &g->groups[x];
    if (gr->cost[j] > gr->cost[i] || gr->mem[j] > gr->mem[i])
        return 0;
    for (int e = 0; e < g->nedges; e++) {
        const Edge *ed = &g->edges[e];
        for (int a = 0; a < g->m->naxes; a++) {
            const EdgeAxis *ax = &ed->ax[a];
            if (g->nodes[ed->u].group == x) {
                for (int q = 0; q < ax->nw; q++)
                    if (ax->cost[ax->pclass[j] * ax->nw + q] > ax->cost[ax->pclass[i] * ax->nw + q])
                        return 0;
            } else if (g->nodes[ed->v].group == x) {
                for (int p = 0; p < ax->np; p++)
                    if (ax->cost[p * ax->nw + ax->wclass[j]] > ax->cost[p * ax->nw + ax->wclass[i]])
                        return 0;
            }
        }
    }
    return 1;
}

static int same_strategy(const Ilp *g, int x, int j, int i) {
    return dominates(g, x, j, i) && dominates(g, x, i, j);
}

/* The least and the most that strategy s of group x can cost with the
 * edges it has, whatever its neighbours' live strategies are. */
static void bounds(const Ilp *g, int x, int s, double *lo, double *hi) {
    *lo = *hi = g->groups[x].cost[s];
    for (int e = 0; e < g->nedges; e++) {
        const Edge *ed = &g->edges[e];
        int pu = g->nodes[ed->u].group == x, pv = g->nodes[ed->v].group == x;
        if (!pu && !pv)
            continue;
        const Group *o = &g->groups[g->nodes[pu ? ed->v : ed->u].group];
        double mn = 0, mx = 0;
        int any = 0;
        for (int k = 0; k < o->n; k++) {
            if (!o->alive[k])
                continue;
            double c = pu ? edge_cost(g, ed, s, k) : edge_cost(g, ed, k, s);
            mn = !any || c < mn ? c : mn;
            mx = !any || c > mx ? c : mx;
            any = 1;
        }
        *lo += mn;
        *hi += mx;
    }
}

/* Prune dominated strategies: j dominates i when it holds no more memory
 * and either costs no more on every edge whatever the neighbours choose
 * (of equal ones the first stays), or costs less at its most than i at its
 * least.  Rounds until nothing changes, as pruning a neighbour tightens
 * the bounds. */
static void prune(Ilp *g) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (int x = 0; x < g->ngroups; x++) {
            Group *gr = &g->groups[x];
            if (gr->n < 2)
                continue;
            double *lo = malloc(sizeof(double) * (size_t)gr->n), *hi = malloc(sizeof(double) * (size_t)gr->n);
            for (int s = 0; s < gr->n; s++)
                if (gr->alive[s])
                    bounds(g, x, s, &lo[s], &hi[s]);
            for (int i = 0; i < gr->n; i++)
                for (int j = 0; j < gr->n && gr->alive[i]; j++)
                    if (j != i && gr->alive[j] && gr->mem[j] <= gr->mem[i] &&
                        (hi[j] < lo[i] * (1 - 1e-9) ||
                         (dominates(g, x, j, i) && (j < i || !same_strategy(g, x, j, i))))) {
                        gr->alive[i] = 0;
                        changed = 1;
                    }
            free(lo);
            free(hi);
        }
    }
}

static int alive_count(const Group *gr, int *only) {
    int n = 0;
    for (int s = 0; s < gr->n; s++)
        if (gr->alive[s]) {
            *only = s;
            n++;
        }
    return n;
}

typedef struct {
    int *ia, *ja;
    double *ar;
    int n, cap;
} Triplets;

static void put(Triplets *t, int row, int col, double v) {
    if (t->n + 1 >= t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->ia = realloc(t->ia, sizeof(int) * (size_t)t->cap);
        t->ja = realloc(t->ja, sizeof(int) * (size_t)t->cap);
        t->ar = realloc(t->ar, sizeof(double) * (size_t)t->cap);
    }
    t->n++;
    t->ia[t->n] = row;
    t->ja[t->n] = col;
    t->ar[t->n] = v;
}

/* The least parameter bytes per device any plan needs, for the reason of
 * an infeasible cap: each group at its smallest candidate. */
static double least_memory(const Ilp *g, double fixed, int *worst) {
    double total = fixed, most = -1;
    *worst = -1;
    for (int x = 0; x < g->ngroups; x++) {
        const Group *gr = &g->groups[x];
        double least = -1;
        for (int s = 0; s < gr->n; s++)
            if (least < 0 || gr->mem[s] < least)
                least = gr->mem[s];
        total += least;
        if (least > most) {
            most = least;
            *worst = x;
        }
    }
    return total;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(IlpResult *r, IlpStatus st, double t0, FILE *err, const char *msg) {
    r->status = st;
    r->seconds = now_seconds() - t0;
    if (err)
        fprintf(err, "shardc: error: %s\n", msg);
    return -1;
}

/* A plan's predicted time: every group's node cost and every edge's. */
static double plan_time(const Ilp *g, const int *pick, double constant) {
    double t = constant;
    for (int x = 0; x < g->ngroups; x++)
        t += g->groups[x].cost[pick[x]];
    for (int e = 0; e < g->nedges; e++) {
        const Edge *ed = &g->edges[e];
        t += edge_cost(g, ed, pick[g->nodes[ed->u].group], pick[g->nodes[ed->v].group]);
    }
    return t;
}

static double plan_memory(const Ilp *g, const int *pick) {
    double b = 0;
    for (int x = 0; x < g->ngroups; x++)
        b += g->groups[x].mem[pick[x]];
    return b;
}

/* A plan without the solver, for when its time limit ends it before it
 * has one: each group starts at its least memory, then moves to the live
 * strategy that costs least given its neighbours' (iterated conditional
 * modes), within the memory cap, until no move gains. */
static void greedy_plan(const Ilp *g, int *pick, double cap) {
    for (int x = 0; x < g->ngroups; x++) {
        const Group *gr = &g->groups[x];
        pick[x] = -1;
        for (int s = 0; s < gr->n; s++)
            if (gr->alive[s] && (pick[x] < 0 || gr->mem[s] < gr->mem[pick[x]]))
                pick[x] = s;
    }
    for (int round = 0, moved = 1; moved && round < 100; round++) {
        moved = 0;
        for (int x = 0; x < g->ngroups; x++) {
            const Group *gr = &g->groups[x];
            int was = pick[x], best = was;
            double best_t = plan_time(g, pick, 0), mem = plan_memory(g, pick) - gr->mem[was];
            for (int s = 0; s < gr->n; s++) {
                if (!gr->alive[s] || s == was || (cap > 0 && mem + gr->mem[s] > cap))
                    continue;
                pick[x] = s;
                double t = plan_time(g, pick, 0);
                if (t < best_t * (1 - 1e-12)) {
                    best_t = t;
                    best = s;
                }
            }
            pick[x] = best;
            moved |= best != was;
        }
    }
}

/* Rows for the classes that need one: each representative (rep[i] == i)
 * gets the next row from `next`, the others their representative's.
 * Returns the next free row. */
static int number_rows(int *row, const int *rep, int n, int next) {
    for (int i = 0; i < n; i++)
        if (row[i] && rep[i] == i)
            row[i] = next++;
    for (int i = 0; i < n; i++)
        if (row[i] && rep[i] != i)
            row[i] = row[rep[i]];
    return next;
}

/* An edge's columns and rows: per pair of live classes a continuous
 * column, its cost, with Alpa's marginal rows (a producer class's pairs sum
 * to the producer's choices in that class, a consumer class's likewise),
 * which binary choices make exact.  One side of a single live class folds
 * into the other's costs; returns the constant of both single. */
static double edge_rows(glp_prob *lp, const Ilp *g, const Edge *e, const EdgeAxis *ed, Triplets *tr) {
    const Group *gu = &g->groups[g->nodes[e->u].group], *gv = &g->groups[g->nodes[e->v].group];
    int *prow = calloc((size_t)ed->np + 1, sizeof(int)), *qrow = calloc((size_t)ed->nw + 1, sizeof(int));
    int np = 0, nw = 0, lastp = 0, lastq = 0;
    for (int i = 0; i < gu->n; i++)
        if (gu->alive[i] && !prow[ed->pclass[i]]) {
            prow[ed->pclass[i]] = 1;
            lastp = ed->pclass[i];
            np++;
        }
    for (int j = 0; j < gv->n; j++)
        if (gv->alive[j] && !qrow[ed->wclass[j]]) {
            qrow[ed->wclass[j]] = 1;
            lastq = ed->wclass[j];
            nw++;
        }
    double constant = 0;
    if (np == 1 && nw == 1) {
        constant = ed->cost[lastp * ed->nw + lastq];
    } else if (np == 1 || nw == 1) {
        for (int i = 0; np > 1 && i < gu->n; i++)
            if (gu->alive[i])
                glp_set_obj_coef(lp, gu->col[i], glp_get_obj_coef(lp, gu->col[i]) + ed->cost[ed->pclass[i] * ed->nw + lastq]);
        for (int j = 0; nw > 1 && j < gv->n; j++)
            if (gv->alive[j])
                glp_set_obj_coef(lp, gv->col[j], glp_get_obj_coef(lp, gv->col[j]) + ed->cost[lastp * ed->nw + ed->wclass[j]]);
    } else {
        /* Classes whose costs are the same against every live class of the
         * other side are one (rep: the first of them). */
        int *prep = malloc(sizeof(int) * (size_t)ed->np), *qrep = malloc(sizeof(int) * (size_t)ed->nw);
        for (int p = 0; p < ed->np; p++) {
            prep[p] = p;
            for (int p2 = 0; prow[p] && p2 < p && prep[p] == p; p2++) {
                int same = prow[p2] && prep[p2] == p2;
                for (int q = 0; same && q < ed->nw; q++)
                    same = !qrow[q] || ed->cost[p * ed->nw + q] == ed->cost[p2 * ed->nw + q];
                if (same)
                    prep[p] = p2;
            }
        }
        for (int q = 0; q < ed->nw; q++) {
            qrep[q] = q;
            for (int q2 = 0; qrow[q] && q2 < q && qrep[q] == q; q2++) {
                int same = qrow[q2] && qrep[q2] == q2;
                for (int p = 0; same && p < ed->np; p++)
                    same = !prow[p] || prep[p] != p || ed->cost[p * ed->nw + q] == ed->cost[p * ed->nw + q2];
                if (same)
                    qrep[q] = q2;
            }
        }
        np = nw = 0;
        for (int p = 0; p < ed->np; p++)
            np += prow[p] && prep[p] == p;
        for (int q = 0; q < ed->nw; q++)
            nw += qrow[q] && qrep[q] == q;
        int first = glp_add_rows(lp, np + nw), k = first;
        k = number_rows(prow, prep, ed->np, k);
        number_rows(qrow, qrep, ed->nw, k);
        for (k = first; k < first + np + nw; k++)
            glp_set_row_bnds(lp, k, GLP_FX, 0, 0);
        for (int p = 0; p < ed->np; p++)
            for (int q = 0; q < ed->nw; q++)
                if (prow[p] && qrow[q] && prep[p] == p && qrep[q] == q) {
                    int c = glp_add_cols(lp, 1);
                    glp_set_col_bnds(lp, c, GLP_DB, 0, 1);
                    glp_set_obj_coef(lp, c, ed->cost[p * ed->nw + q]);
                    put(tr, prow[p], c, 1);
                    put(tr, qrow[q], c, 1);
                }
        for (int i = 0; i < gu->n; i++)
            if (gu->alive[i])
                put(tr, prow[ed->pclass[i]], gu->col[i], -1);
        for (int j = 0; j < gv->n; j++)
            if (gv->alive[j])
                put(tr, qrow[ed->wclass[j]], gv->col[j], -1);
        free(prep);
        free(qrep);
    }
    free(prow);
    free(qrow);
    return constant;
}

/* Build and solve: a binary column per (group, live strategy) of groups
 * with a choice, one-hot rows; per edge between two such groups a
 * continuous column per strategy pair with Alpa's marginal rows (each
 * row's pairs sum to the producer's choice, each column's to the
 * consumer's), which binary choices make exact; one memory row. */
static int solve(Ilp *g, double constant, double fixed_mem, IlpResult *r, double t0, FILE *err) {
    const AutoProblem *p = g->p;
    double base = constant, base_mem = fixed_mem;
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    Triplets tr = {0};
    int mem_row = p->device_memory > 0 ? glp_add_rows(lp, 1) : 0;
    for (int x = 0; x < g->ngroups; x++) {
        Group *gr = &g->groups[x];
        int only, live = alive_count(gr, &only);
        if (live == 1) {
            constant += gr->cost[only];
            if (mem_row)
                fixed_mem += gr->mem[only];
            continue;
        }
        int row = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, row, GLP_FX, 1, 1);
        for (int s = 0; s < gr->n; s++) {
            if (!gr->alive[s])
                continue;
            int c = gr->col[s] = glp_add_cols(lp, 1);
            glp_set_col_kind(lp, c, GLP_BV);
            glp_set_obj_coef(lp, c, gr->cost[s]);
            put(&tr, row, c, 1);
            if (mem_row && gr->mem[s] != 0)
                put(&tr, mem_row, c, gr->mem[s]);
        }
    }
    if (mem_row)
        glp_set_row_bnds(lp, mem_row, GLP_UP, 0, (double)p->device_memory - fixed_mem);
    for (int e = 0; e < g->nedges; e++)
        for (int a = 0; a < g->m->naxes; a++)
            constant += edge_rows(lp, g, &g->edges[e], &g->edges[e].ax[a], &tr);
    glp_set_obj_coef(lp, 0, constant);
    r->nvars = glp_get_num_cols(lp);
    r->nrows = glp_get_num_rows(lp);
    if (tr.n)
        glp_load_matrix(lp, tr.n, tr.ia, tr.ja, tr.ar);
    free(tr.ia);
    free(tr.ja);
    free(tr.ar);
    int rc = 0;
    IlpStatus st = ILP_OPTIMAL;
    if (r->nvars) {
        glp_iocp parm;
        glp_init_iocp(&parm);
        parm.msg_lev = GLP_MSG_OFF;
        parm.presolve = GLP_ON;
        parm.tm_lim = ILP_TIME_LIMIT_MS;
        rc = glp_intopt(lp, &parm);
        int ms = glp_mip_status(lp);
        st = ms == GLP_OPT ? ILP_OPTIMAL : ms == GLP_FEAS ? ILP_FEASIBLE
           : ms == GLP_NOFEAS || rc == GLP_ENOPFS ? ILP_INFEASIBLE : ILP_FAILED;
    } else if (mem_row && fixed_mem > (double)p->device_memory) {
        st = ILP_INFEASIBLE;
    }
    int *pick = malloc(sizeof(int) * (size_t)(g->ngroups + 1));
    for (int x = 0; x < g->ngroups; x++) {
        const Group *gr = &g->groups[x];
        pick[x] = -1;
        for (int s = 0; s < gr->n && pick[x] < 0; s++)
            if (gr->alive[s] && (!gr->col[s] || (st != ILP_FAILED && glp_mip_col_val(lp, gr->col[s]) > 0.5)))
                pick[x] = s;
    }
    if (st == ILP_FEASIBLE || (st == ILP_FAILED && rc == GLP_ETMLIM)) {
        /* The time limit: the solver's plan, or the greedy one if better. */
        int *alt = malloc(sizeof(int) * (size_t)(g->ngroups + 1));
        greedy_plan(g, alt, (double)p->device_memory - base_mem);
        int fits = !mem_row || plan_memory(g, alt) <= (double)p->device_memory - base_mem;
        if (fits && (st == ILP_FAILED || plan_time(g, alt, base) < plan_time(g, pick, base))) {
            memcpy(pick, alt, sizeof(int) * (size_t)g->ngroups);
            st = ILP_FEASIBLE;
        }
        free(alt);
    }
    if (st == ILP_OPTIMAL || st == ILP_FEASIBLE) {
        r->objective = plan_time(g, pick, base);
        r->choice = arena_alloc(g->a, sizeof(int) * (size_t)(p->nparams + 1));
        for (int k = 0; k < p->nparams; k++)
            r->choice[k] = pick[g->nodes[g->param_node[p->params[k].param]].group];
    }
    free(pick);
    glp_delete_prob(lp);
    r->status = st;
    r->seconds = now_seconds() - t0;
    if (st == ILP_INFEASIBLE || st == ILP_FAILED) {
        char msg[256];
        if (st == ILP_INFEASIBLE)
            snprintf(msg, sizeof msg, "the sharding program has no plan within %lld bytes per device",
                     (long long)p->device_memory);
        else
            snprintf(msg, sizeof msg, "the sharding program was not solved (GLPK status %d)", rc);
        return fail(r, st, t0, err, msg);
    }
    return 0;
}

int ilp_solve(const AutoProblem *p, Arena *a, IlpResult *r, FILE *err) {
    double t0 = now_seconds();
    *r = (IlpResult){.status = ILP_FAILED};
    const Module *m = p->m;
    if (p->fn < 0 || p->fn >= m->nfns || fn_is_local(&m->fns[p->fn]))
        return fail(r, ILP_FAILED, t0, err, "the sharding search needs a global entry fn");
    Ilp g = {.p = p, .m = m, .a = a};
    Costs cs = {0};
    const Fn *fn = &m->fns[p->fn];
    int32_t *params = param_nodes(&g);
    int32_t *results = arena_alloc(a, sizeof(int32_t) * (size_t)(fn->nresults + 1));
    for (int i = 0; i < fn->nresults; i++)
        results[i] = -1;
    walk(&g, &cs, fn, params, 1, results);
    if (make_groups(&g, &cs) != 0)
        return fail(r, ILP_FAILED, t0, err, "tied parameters of the sharding search differ in their candidates");
    double constant = 0, fixed_mem;
    memory(&g, results, fn->nresults, &fixed_mem);
    fold_edges(&g, &constant);
    if (p->device_memory > 0) {
        int worst;
        double least = least_memory(&g, fixed_mem, &worst);
        if (least > (double)p->device_memory) {
            int param = -1;
            for (int i = 0; i < g.nnodes && param < 0; i++)
                if (g.nodes[i].group == worst && g.nodes[i].param >= 0)
                    param = g.nodes[i].param;
            char msg[512];
            snprintf(msg, sizeof msg,
                     "no plan fits %lld bytes per device: the parameters and the results updating them need at "
                     "least %.0f bytes per device at their smallest candidates (the most: '%s')",
                     (long long)p->device_memory, least, param >= 0 ? autoshard_param_name(m, fn, param) : "?");
            return fail(r, ILP_INFEASIBLE, t0, err, msg);
        }
    }
    prune(&g);
    return solve(&g, constant, fixed_mem, r, t0, err);
}
