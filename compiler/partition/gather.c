/* A gather from a table split along its gathered dim (docs/partitioning.md,
 * "Gathers"): any index may point into any block, so either the table is
 * all-gathered along that dim, or it stays split for a masked local gather,
 * as GSPMD lowers an embedding lookup over a split vocabulary: each device
 * gathers from its own block the indices that fall in it, zeros elsewhere
 * (fill mode), and the partial results are summed, after the dot that
 * reads them when that moves less (partial.c).
 *
 * The scheme that sends fewer bytes per device is chosen, unless what it
 * makes a device hold (its peak) exceeds the device memory budget
 * (--device-memory, Module.device_memory) and the other's does not: a
 * table all-gathered whole may not fit where its blocks do, and the masked
 * scheme holds the indices and its partial results whole along the
 * table's axes, which may not fit either.  When the bytes tie, the lower
 * peak wins.
 *
 * The choice reads only the propagated global program: the shardings
 * propagation gave the table, the indices and the gather, and the plan the
 * gather's factor rule makes of its own sharding.  So it is the same
 * whether the partitioner asks (lowering the gather) or the sharded dump
 * does (partition_note_choices), and the two dumps print the same note. */
#include "part.h"

#include <string.h>

/* Bytes of one device's block of a value of global type t under sh, in
 * double: the products can pass 2^63 for huge types. */
static double block_bytes(const Module *m, const Shape *t, const Sharding *sh) {
    Shape s = shape_local(m, t, sh);
    double bytes = dtype_size(s.dtype);
    for (int d = 0; d < s.rank; d++)
        bytes *= (double)s.dims[d];
    return bytes;
}

/* The dot the gather, src value v, is folded into (its only user, when it
 * can take the gathered rows: the scheduler's gather_dot_form), or -1. */
static int folding_dot(const Part *p, int v) {
    const Fn *src = p->src;
    int u = p->only_user[v];
    const Inst *dot = u >= 0 ? &src->insts[u] : NULL;
    GatherDot gd;
    if (!dot || dot->op != OP_DOT || dot->place || src->insts[v].place)
        return -1;
    for (int side = 0; side < 2; side++)
        if (ir_arg(src, dot, side) == v && gather_dot_form(src, dot, side, &gd))
            return u;
    return -1;
}

/* What a device holds while a scheme runs the gather, src value v (its
 * peak), counted as the scheduler allocates (docs/scheduling.md): no
 * result is written over an operand, and an operand stays live until the
 * collective reading it is done.  Parameters count too: they are in the
 * device's memory all along.  The dot u (u >= 0) counts as part of the op
 * when the gather is folded into it (`folded`: its gathered rows are never
 * built) or the masked scheme keeps its partial sums past it: then its
 * other operand and its result. */
typedef struct {
    const Part *p;
    int v, u, folded;
} GatherOp;

/* Operand x read with sharding `read`: its own block, and beside it the
 * block read when that is another (a reshard's result). */
static double operand_bytes(const Module *m, const Inst *x, const Sharding *read) {
    double own = block_bytes(m, &x->type, &x->sh);
    return same_split(&x->sh, read, x->type.rank) ? own : own + block_bytes(m, &x->type, read);
}

/* The gather's operands read as `table` and `idx` say. */
static double gather_operands(const GatherOp *g, const Sharding *table, const Sharding *idx) {
    const Fn *src = g->p->src;
    const Inst *in = &src->insts[g->v];
    return operand_bytes(g->p->m, &src->insts[ir_arg(src, in, 0)], table) +
           operand_bytes(g->p->m, &src->insts[ir_arg(src, in, 1)], idx);
}

/* The dot's other operand as it reads it and its result, partial along
 * `partial` axes; nothing without a dot. */
static double dot_part(const GatherOp *g, uint32_t partial) {
    const Fn *src = g->p->src;
    if (g->u < 0)
        return 0;
    DotReads r = dot_reads(g->p, g->u, g->v, partial);
    return operand_bytes(g->p->m, &src->insts[r.other], &r.other_sh) +
           block_bytes(g->p->m, &src->insts[g->u].type, &r.result_sh);
}

/* The table all-gathered (beside its own block), the indices, and the
 * result unless folded into the dot. */
static double all_gather_peak(const GatherOp *g, const Plan *whole) {
    const Inst *in = &g->p->src->insts[g->v];
    Sharding table = plan_wanted(whole, 0), idx = plan_wanted(whole, 1), result = plan_wanted(whole, in->nargs);
    return gather_operands(g, &table, &idx) + (g->folded ? 0 : block_bytes(g->p->m, &in->type, &result)) +
           dot_part(g, 0);
}

/* The table's block, the indices whole and their copy shifted into the
 * block, the partial result (unless folded into the dot) and, beside the
 * partial sums, their reduction: of the gather's result, or of the dot's
 * when they are kept past it. */
static double masked_peak(const GatherOp *g, const Plan *masked, const Sharding *table, const Sharding *partial,
                          uint32_t kept, int after_dot) {
    const Module *m = g->p->m;
    const Fn *src = g->p->src;
    const Inst *in = &src->insts[g->v];
    Sharding idx = plan_wanted(masked, 1);
    double bytes = gather_operands(g, table, &idx) + block_bytes(m, &src->insts[ir_arg(src, in, 1)].type, &idx);
    bytes += g->folded && after_dot ? 0 : block_bytes(m, &in->type, partial);
    if (!after_dot)
        return bytes + block_bytes(m, &in->type, &in->sh) + dot_part(g, 0);
    return bytes + dot_part(g, kept) + block_bytes(m, &src->insts[g->u].type, &src->insts[g->u].sh);
}

/* Both schemes' peaks for gather v: the all-gather's under plan `whole`,
 * the masked gather's under `masked` with the table kept split by the
 * chosen axes and a result partial along them. */
static void scheme_peaks(const Part *p, int v, const Plan *whole, const Plan *masked, const Sharding *partial,
                         GatherChoice *c) {
    int fold = folding_dot(p, v), dim = inst_dim(p->src, &p->src->insts[v]);
    GatherOp op = {p, v, fold >= 0 ? fold : c->after_dot ? p->only_user[v] : -1, fold >= 0};
    Sharding table = plan_wanted(masked, 0);
    uint32_t kept = 0;
    for (int i = 0; i < c->naxes; i++) {
        table.dim[c->axes[i]] = (int8_t)dim;
        table.pos[c->axes[i]] = (uint8_t)i;
        kept |= 1u << c->axes[i];
    }
    c->peak[GATHER_ALL] = all_gather_peak(&op, whole);
    c->peak[GATHER_MASKED] = masked_peak(&op, masked, &table, partial, kept, c->after_dot);
}

/* Fewer bytes, then the lower peak; the other scheme instead when this
 * one's peak is over the budget and the other's is not. */
static void choose(GatherChoice *c) {
    const double *b = c->sent, *h = c->peak;
    if (b[GATHER_MASKED] != b[GATHER_ALL]) {
        c->scheme = b[GATHER_MASKED] < b[GATHER_ALL] ? GATHER_MASKED : GATHER_ALL;
        c->because = CHOSEN_FEWER_BYTES;
    } else {
        c->scheme = h[GATHER_MASKED] < h[GATHER_ALL] ? GATHER_MASKED : GATHER_ALL;
        c->because = h[GATHER_MASKED] != h[GATHER_ALL] ? CHOSEN_LOWER_PEAK : CHOSEN_TIE;
    }
    double budget = c->budget > 0 ? (double)c->budget : -1;
    int other = 1 - c->scheme;
    if (budget >= 0 && h[c->scheme] > budget && h[other] <= budget) {
        c->scheme = other;
        c->because = CHOSEN_WITHIN_BUDGET;
    }
    c->fits = budget < 0 || h[c->scheme] <= budget;
}

int gather_choice(const Part *p, int v, GatherChoice *c) {
    const Module *m = p->m;
    const Fn *src = p->src;
    const Inst *in = &src->insts[v];
    const Inst *table = &src->insts[ir_arg(src, in, 0)], *idx = &src->insts[ir_arg(src, in, 1)];
    Rule rule;
    memset(c, 0, sizeof *c);
    c->naxes = sharding_dim_axes(&table->sh, inst_dim(src, in), c->axes);
    if (!c->naxes || !dtype_is_num(in->type.dtype) || !op_rule(src, in, &rule))
        return 0;
    /* A gather sums no factor, so its plan is its result's axes alone:
     * the partitioner's, whatever shardings its operands arrive with. */
    Plan whole = {.rule = &rule};
    plan_result_axes(&whole, in->nargs, &in->sh);
    uint32_t kept = 0;
    double k = 1;
    for (int i = 0; i < c->naxes; i++) {
        kept |= 1u << c->axes[i];
        k *= (double)m->axis_size[c->axes[i]];
    }
    if (k == 1)
        return 0;                /* axes of one device: every device holds the whole dim */
    Plan masked = whole;
    plan_without(&masked, kept);
    /* The masked gather's result: partial sums along the kept axes. */
    Sharding partial = plan_wanted(&masked, in->nargs);
    for (int i = 0; i < c->naxes; i++)
        partial.dim[c->axes[i]] = SH_PARTIAL;
    partial.reducer = RED_SUM;
    Piece indices = {.sh = idx->sh, .global = idx->type};
    Sharding idx_all = plan_wanted(&whole, 1), idx_masked = plan_wanted(&masked, 1);
    c->sent[GATHER_ALL] = (k - 1) * block_bytes(m, &table->type, &table->sh) +
                          (double)reshard_min_bytes(p, &indices, &idx_all);
    c->sent[GATHER_MASKED] =
        (double)reshard_min_bytes(p, &indices, &idx_masked) + (double)partial_sum_bytes(p, v, &partial);
    c->after_dot = keeps_partial(p, v, &(Piece){.sh = partial, .global = in->type});
    scheme_peaks(p, v, &whole, &masked, &partial, c);
    c->budget = m->device_memory;
    choose(c);
    return 1;
}

/* Why, as the note says it. */
static const char *because_text(Arena *arena, const GatherChoice *c) {
    const char *why = c->because == CHOSEN_FEWER_BYTES  ? "fewer bytes"
                      : c->because == CHOSEN_LOWER_PEAK ? "as many bytes, a lower peak"
                      : c->because == CHOSEN_TIE        ? "as many bytes, the same peak"
                                                        : "within the device memory budget";
    if (c->because == CHOSEN_WITHIN_BUDGET)
        return arena_printf(arena, "%s of %lld bytes", why, (long long)c->budget);
    if (!c->fits)
        return arena_printf(arena, "%s; neither fits the device memory budget of %lld bytes", why,
                            (long long)c->budget);
    return why;
}

const char *gather_choice_note(Arena *arena, const GatherChoice *c) {
    const char *after = c->after_dot ? " after the dot" : "", *why = because_text(arena, c);
    const double *b = c->sent, *h = c->peak;
    if (c->scheme == GATHER_ALL)
        return arena_printf(arena, "the table all-gathered (%s): %.0f bytes per device, peak %.0f; a masked gather "
                            "summing its results%s would send %.0f, peak %.0f", why, b[GATHER_ALL], h[GATHER_ALL],
                            after, b[GATHER_MASKED], h[GATHER_MASKED]);
    return arena_printf(arena, "a masked gather (%s): %.0f bytes per device to sum its results%s, peak %.0f; "
                        "all-gathering the table would send %.0f, peak %.0f", why, b[GATHER_MASKED], after,
                        h[GATHER_MASKED], b[GATHER_ALL], h[GATHER_ALL]);
}
