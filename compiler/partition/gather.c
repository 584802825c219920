/* A gather from a table split along its gathered dim (docs/partitioning.md,
 * "Gathers"): any index may point into any block, so either the table is
 * all-gathered along that dim, or it stays split for a masked local gather,
 * as GSPMD lowers an embedding lookup over a split vocabulary: each device
 * gathers from its own block the indices that fall in it, zeros elsewhere
 * (fill mode), and the partial results are summed, after the dot that
 * reads them when that moves less (partial.c).  The scheme that sends
 * fewer bytes per device is chosen.
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

int gather_choice(const Part *p, int v, GatherChoice *c) {
    const Module *m = p->m;
    const Fn *src = p->src;
    const Inst *in = &src->insts[v];
    const Inst *table = &src->insts[ir_arg(src, in, 0)], *idx = &src->insts[ir_arg(src, in, 1)];
    Rule rule;
    memset(c, 0, sizeof *c);
    c->naxes = sharding_dim_axes(&table->sh, inst_dim(src, in), c->axes);
    if (!c->naxes || in->type.dtype == DT_BOOL || !op_rule(src, in, &rule))
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
    c->sent[GATHER_MASKED] = (double)reshard_min_bytes(p, &indices, &idx_masked) + (double)partial_sum_bytes(p, v, &partial);
    c->after_dot = keeps_partial(p, v, &(Piece){.sh = partial, .global = in->type});
    c->scheme = c->sent[GATHER_MASKED] < c->sent[GATHER_ALL] ? GATHER_MASKED : GATHER_ALL;
    return 1;
}

const char *gather_choice_note(Arena *arena, const GatherChoice *c) {
    const char *after = c->after_dot ? " after the dot" : "";
    if (c->scheme == GATHER_ALL)
        return arena_printf(arena, "the table all-gathered: %.0f bytes per device; a masked gather summing its "
                            "results%s would send %.0f", c->sent[GATHER_ALL], after, c->sent[GATHER_MASKED]);
    return arena_printf(arena, "a masked gather: %.0f bytes per device to sum its results%s; all-gathering the table "
                        "would send %.0f", c->sent[GATHER_MASKED], after, c->sent[GATHER_ALL]);
}
