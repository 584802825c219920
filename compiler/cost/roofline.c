/* The roofline cost of scheduled instructions and fns (docs/autoshard.md,
 * "Formulas").  Per device:
 *   dot: 2*M*N*K FLOPs (result elements times the contracted size, times 2);
 *   elementwise arithmetic, convert, compare, random: 1 FLOP per result
 *   element, transcendentals included (an op calling <math.h> takes
 *   1 / libm_rate seconds per element when the target gives the rate); reduce and cumsum: 1 per operand
 *   element; ops that only move elements: none.
 *   bytes: every operand read once plus the result written once; a view or
 *   an assembled concatenate moves nothing, a folded instruction (a dot's
 *   epilogue) is computed in its consumer's loop and moves nothing itself;
 *   a loop of fused elementwise instructions (schedule/fuse.c) reads each
 *   operand from outside the loop once and writes the results read after
 *   it, each charged to the member that first reads or writes it.
 *   time = max(FLOPs / peak_flops[dtype], bytes / mem_bw), a dot's FLOPs at
 *   the efficiency of its shape (dot_eff.c): FLOPs / (peak * eff(M, N, K)).
 *   collectives: steps*latency + sent/bw on the group's link, sent being
 *   collective_bytes (ring: all-gather and reduce-scatter (n-1)/n of the
 *   gathered size, all-reduce 2(n-1)/n); steps: n-1, all-reduce 2(n-1),
 *   collective-permute 1. */
#include "cost.h"
#include "../schedule/fuse.h"

#include <stdlib.h>
#include <string.h>

const char *const bound_name[] = {"-", "compute", "memory", "comm"};

/* Does the op call a <math.h> function, M(f), other than fabs and sqrt
 * (single instructions)?  Those (tanh, log, sin, erf, pow, ...) are scalar
 * library calls, far slower than a FLOP; shardc's own exp, T(exp), is
 * inlined and vectorized, and counts as one. */
static int calls_libm(int op) {
    for (const char *p = op_formula[op].f; p && (p = strstr(p, "M(")); p += 2)
        if (strncmp(p + 2, "fabs)", 5) != 0 && strncmp(p + 2, "sqrt)", 5) != 0)
            return 1;
    return 0;
}

static double value_bytes(const Shape *s) {
    return s->dtype == DT_TUPLE ? 0 : (double)shape_elems(s) * dtype_size(s->dtype);
}

double cost_inst_flops(const Fn *fn, const Inst *in) {
    const Shape *a0 = in->nargs ? &fn->insts[ir_arg(fn, in, 0)].type : NULL;
    double out = in->type.dtype == DT_TUPLE ? 0 : (double)shape_elems(&in->type);
    switch (in->op) {
    case OP_DOT: {
        DotDims d;
        dot_dims(fn, in, &d);
        double k = 1;
        for (int i = 0; i < d.ncontract; i++)
            k *= (double)a0->dims[d.lhs_contract[i]];
        return 2 * out * k;
    }
    case OP_REDUCE: case OP_CUMSUM: return (double)shape_elems(a0);
    case OP_RANDOM: return out;
    default:
        return (op_info[in->op].flags & (OPF_FUSIBLE | OPF_MOVES)) == OPF_FUSIBLE ? out : 0;
    }
}

/* Whether d (count dims out of rank) holds dim. */
static int holds(const int64_t *d, int count, int dim) {
    for (int i = 0; i < count; i++)
        if (d[i] == dim)
            return 1;
    return 0;
}

/* A layout's grid, or nn's when the target gives that layout none. */
static const DotEff *layout_grid(const Target *t, int layout) {
    return t->dot_eff[layout].nentries ? &t->dot_eff[layout] : &t->dot_eff[DOT_NN];
}

/* The layout a dot's operands reach BLAS in, as sk_dot hands them over:
 * lhs transposed when its last dim is a free one, rhs when its last is
 * contracted. */
static int dot_layout(const DotDims *d, const Shape *lhs, const Shape *rhs) {
    int lhs_t = lhs->rank > 0 && !holds(d->lhs_contract, d->ncontract, lhs->rank - 1)
                && !holds(d->lhs_batch, d->nbatch, lhs->rank - 1);
    int rhs_t = rhs->rank > 0 && holds(d->rhs_contract, d->ncontract, rhs->rank - 1);
    return lhs_t << 1 | rhs_t;
}

/* The efficiency of a dot of a folded gather, or -1 if it has none.  Its
 * kernel (sk_gather_dot: a mixture of experts' tokens times their expert's
 * weights) runs one GEMM per matrix of the table, of the rows that read
 * it: [rows / e, k] x [k, n], of whose rows the device computes `share`
 * (rows_in_block), the matrix read transposed when trans. */
static double gather_dot_efficiency(const Target *t, const Fn *fn, const Inst *in, double share) {
    GatherDot gd;
    for (int side = 0; side < 2; side++) {
        if (!(fn->insts[ir_arg(fn, in, side)].flags & INST_FOLDED) || !gather_dot_form(fn, in, side, &gd))
            continue;
        double rows = (double)gd.rows * share / (double)gd.e;
        return dot_eff_at(layout_grid(t, gd.trans ? DOT_NT : DOT_NN), rows > 1 ? rows : 1, (double)gd.n,
                          (double)gd.k);
    }
    return -1;
}

/* The fraction of the peak a dot runs at: its GEMM's shape per batch, M
 * the product of lhs's free dims, N of rhs's, K of the contracted ones. */
static double dot_efficiency(const Target *t, const Fn *fn, const Inst *in, double share) {
    double gathered = gather_dot_efficiency(t, fn, in, share);
    if (gathered >= 0)
        return gathered;
    DotDims d;
    dot_dims(fn, in, &d);
    const Shape *lhs = &fn->insts[ir_arg(fn, in, 0)].type, *rhs = &fn->insts[ir_arg(fn, in, 1)].type;
    double m = (double)shape_elems(lhs), n = (double)shape_elems(rhs), k = 1;
    for (int i = 0; i < d.nbatch; i++) {
        m /= (double)lhs->dims[d.lhs_batch[i]];
        n /= (double)rhs->dims[d.rhs_batch[i]];
    }
    for (int i = 0; i < d.ncontract; i++)
        k *= (double)lhs->dims[d.lhs_contract[i]];
    return k > 0 && m > 0 && n > 0 ? dot_eff_at(layout_grid(t, dot_layout(&d, lhs, rhs)), m / k, n / k, k) : 1;
}

/* The bytes an operand costs its reader.  A gather folded into it is read
 * row by row from its table: the rows repeat (a mixture of experts' tokens
 * read their expert's weights) and stay in cache, so memory sees at most
 * the table and the indices once, not every gathered row. */
static double operand_bytes(const Fn *fn, const Inst *arg) {
    double b = value_bytes(&arg->type);
    if (arg->op == OP_GATHER && (arg->flags & INST_FOLDED)) {
        double once = 0;
        for (int i = 0; i < arg->nargs; i++)
            once += value_bytes(&fn->insts[ir_arg(fn, arg, i)].type);
        b = once < b ? once : b;
    }
    return b;
}

double cost_inst_bytes(const Fn *fn, const Inst *in) {
    if (in->flags & (INST_VIEW | INST_ASSEMBLED | INST_IN_FOLD) || in->op == OP_PARAMETER ||
        in->op == OP_GET_TUPLE_ELEMENT || in->op == OP_RETURN || in->op == OP_DONE)
        return 0;
    double b = value_bytes(&in->type);
    AttentionForm af;
    if (ends_attention(fn, (int)(in - fn->insts)) && attention_form(fn, (int)(in - fn->insts), &af)) {
        int read[] = {af.q, af.k, af.v, af.mask};    /* the [S, T] values between them never exist */
        for (int i = 0; i < 4 - (af.mask < 0 || af.causal); i++)
            b += value_bytes(&fn->insts[read[i]].type);
        return b;
    }
    AttentionGradForm gf;
    int v = (int)(in - fn->insts);
    if (attention_grad_at(fn, v, &gf)) {
        int moved[] = {gf.dq, gf.dk, gf.af.q, gf.af.k, gf.af.v, gf.dout, gf.af.mask};   /* and v's own, dv */
        for (int i = 0; i < 7 - (gf.af.mask < 0 || gf.af.causal); i++)
            b += value_bytes(&fn->insts[moved[i]].type);
        return b;
    }
    for (int i = 0; i < in->nargs; i++)
        b += operand_bytes(fn, &fn->insts[ir_arg(fn, in, i)]);
    return b;
}

static int ring_steps(int op, int64_t n) {
    return op == OP_COLLECTIVE_PERMUTE ? 1 : op == OP_ALL_REDUCE ? (int)(2 * (n - 1)) : (int)(n - 1);
}

double cost_collective_time(const Target *t, const Module *m, int op, const int64_t *axes, int naxes, double sent) {
    int64_t n = 1;
    for (int i = 0; i < naxes; i++)
        n *= m->axis_size[axes[i]];
    Link l = target_link(t, m, axes, naxes);
    return ring_steps(op, n) * l.latency + sent / l.bw;
}

static InstCost collective_cost(const Target *t, const Module *m, const Fn *fn, const Inst *in) {
    int naxes;
    const int64_t *axes = inst_axes(fn, in, &naxes);
    InstCost c = {.sent = (double)collective_bytes(m, fn, in), .bytes = cost_inst_bytes(fn, in), .bound = BOUND_COMM};
    c.time = cost_collective_time(t, m, in->op, axes, naxes, c.sent);
    return c;
}

static InstCost call_cost(Cost *cx, const Fn *fn, const Inst *in) {
    const FnCost *f = cost_fn(cx, inst_callee(fn, in));
    double k = in->op == OP_LOOP ? (double)loop_trips_known(fn, in) : 1;
    InstCost c = {.flops = k * f->flops, .bytes = k * f->bytes, .sent = k * f->sent, .time = k * f->time};
    c.bound = f->comm > f->compute && f->comm > f->memory ? BOUND_COMM
            : f->compute >= f->memory && f->compute > 0 ? BOUND_COMPUTE : f->memory > 0 ? BOUND_MEMORY : BOUND_NONE;
    return c;
}

/* The share of a dot's rows its kernel computes.  A fill-mode gather
 * folded into it reads a table split over the gather's partial axes (the
 * experts of a mixture spread over devices): the rows whose index falls
 * outside this device's block are zeros the kernel skips, so with the
 * indices spread evenly it computes 1/n of them. */
static double rows_in_block(const Module *m, const Fn *fn, const Inst *in) {
    if (in->op != OP_DOT)
        return 1;
    double share = 1;
    for (int i = 0; i < in->nargs; i++) {
        const Inst *g = &fn->insts[ir_arg(fn, in, i)];
        if (g->op != OP_GATHER || !(g->flags & INST_FOLDED) || inst_gather_mode(fn, g) != GATHER_FILL)
            continue;
        for (int a = 0; a < m->naxes; a++)
            if (g->sh.dim[a] == SH_PARTIAL)
                share /= (double)m->axis_size[a];
    }
    return share;
}

/* The memory bytes of each instruction of a scheduled fn that the code
 * generator puts into a fused loop, or -1 for the others: the values the
 * loop reads from outside it, once per loop however many members read
 * them, and the members read after it (stored); values that stay inside
 * the loop, and constants it uses as literals, move nothing.  NULL for a
 * fn that is not scheduled (its buffers, which fusion needs, not
 * assigned). */
static double *fused_bytes(const Fn *fn) {
    if (!fn->scheduled)
        return NULL;
    int n = fn->ninsts;
    Arena arena = {0};
    int *buf = arena_alloc(&arena, sizeof(int) * ((size_t)n + 1));
    int *read_by = arena_alloc(&arena, sizeof(int) * ((size_t)n + 1));   /* 1 + the last group that read it */
    value_buffers(fn, buf);
    Fusion fu;
    fuse_fn(fn, buf, &fu, &arena);
    double *bytes = malloc(sizeof(double) * ((size_t)n + 1));
    for (int v = 0; v < n; v++) {
        const Inst *in = &fn->insts[v];
        if (fu.role[v] != FUSE_MEMBER) {
            bytes[v] = fu.role[v] == FUSE_FOLDED ? 0 : -1;
            continue;
        }
        int g = fu.group[v];
        bytes[v] = fu.stored[v] ? value_bytes(&in->type) : 0;
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(fn, in, i);
            if ((fu.role[a] == FUSE_MEMBER && fu.group[a] == g) || fu.role[a] == FUSE_FOLDED ||
                uses_literal(fn, in, a) || read_by[a] == g + 1)
                continue;
            read_by[a] = g + 1;
            bytes[v] += operand_bytes(fn, &fn->insts[a]);
        }
    }
    arena_free(&arena);
    return bytes;
}

InstCost cost_inst(Cost *cx, int f, int v) {
    const Target *t = cx->t;
    const Module *m = cx->m;
    const Fn *fn = &m->fns[f];
    const Inst *in = &fn->insts[v];
    if (op_is_collective(in->op))
        return collective_cost(t, m, fn, in);
    if (op_calls(in->op))
        return call_cost(cx, fn, in);
    if (!cx->fused[f])
        cx->fused[f] = fused_bytes(fn);
    double fused = cx->fused[f] ? cx->fused[f][v] : -1;
    InstCost c = {.flops = cost_inst_flops(fn, in) * rows_in_block(m, fn, in),
                  .bytes = fused >= 0 ? fused : cost_inst_bytes(fn, in)};
    c.time = cost_roofline(t, fn, in, c.flops, c.bytes, &c.bound);
    return c;
}

double cost_roofline(const Target *t, const Fn *fn, const Inst *in, double flops, double bytes, Bound *bound) {
    int dt = in->op == OP_DOT ? fn->insts[ir_arg(fn, in, 0)].type.dtype : in->type.dtype;
    double tc = flops / t->peak_flops[dt < DT_COUNT ? dt : DT_F32], tm = bytes / t->mem_bw;
    if (in->op == OP_DOT && flops > 0)          /* the share of the dot this device computes */
        tc /= dot_efficiency(t, fn, in, flops / cost_inst_flops(fn, in));
    if (t->libm_rate > 0 && calls_libm(in->op) && !(in->flags & INST_FOLDED))
        tc = flops / t->libm_rate;              /* one call per element */
    double time = tc > tm ? tc : tm;
    if (bound)
        *bound = time == 0 ? BOUND_NONE : tc >= tm ? BOUND_COMPUTE : BOUND_MEMORY;
    return time;
}

Cost cost_begin(const Target *t, const Module *m) {
    Cost c = {t, m, malloc(sizeof(FnCost) * (size_t)(m->nfns + 1)), calloc((size_t)m->nfns + 1, sizeof(double *))};
    for (int f = 0; f < m->nfns; f++)
        c.memo[f].time = -1;
    return c;
}

void cost_end(Cost *c) {
    for (int f = 0; c->fused && f < c->m->nfns; f++)
        free(c->fused[f]);
    free(c->fused);
    free(c->memo);
    c->memo = NULL;
    c->fused = NULL;
}

/* Two streams per device: compute runs the instructions in order; the link
 * runs collectives one at a time, each starting when it is issued and the
 * link is free.  A synchronous collective stalls compute until it ends; an
 * async start lets compute go on until its done.  So the step time is at
 * most the sum of all times, and at least the compute stream's. */
const FnCost *cost_fn(Cost *cx, int f) {
    if (cx->memo[f].time >= 0)
        return &cx->memo[f];
    const Fn *fn = &cx->m->fns[f];
    FnCost c = {0};
    double now = 0, link_free = 0;
    double *ends = calloc((size_t)fn->ninsts + 1, sizeof *ends);
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        InstCost ic = cost_inst(cx, f, v);
        c.flops += ic.flops;
        c.bytes += ic.bytes;
        c.sent += ic.sent;
        if (op_is_collective(in->op)) {
            double start = now > link_free ? now : link_free;
            link_free = ends[v] = start + ic.time;
            c.comm += ic.time;
            if (!(in->flags & INST_ASYNC))
                now = ends[v];
        } else if (in->op == OP_DONE) {
            double e = ends[ir_arg(fn, in, 0)];
            now = e > now ? e : now;
        } else if (op_calls(in->op)) {
            const FnCost *callee = cost_fn(cx, inst_callee(fn, in));
            double k = in->op == OP_LOOP ? (double)loop_trips_known(fn, in) : 1;
            c.compute += k * callee->compute;
            c.memory += k * callee->memory;
            c.comm += k * callee->comm;
            now += ic.time;
        } else {
            if (ic.bound == BOUND_COMPUTE)
                c.compute += ic.time;
            else
                c.memory += ic.time;
            now += ic.time;
        }
    }
    free(ends);
    c.time = now > link_free ? now : link_free;
    c.hidden = c.compute + c.memory + c.comm - c.time;
    if (c.hidden < 1e-9 * c.time)   /* rounding of the sums, not an overlap */
        c.hidden = 0;
    cx->memo[f] = c;
    return &cx->memo[f];
}
