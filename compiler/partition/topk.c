/* top-k along a split last dim (docs/partitioning.md, "Top-k along a split
 * dim"), as XLA partitions TopK: the k best of the whole dim are among the
 * k best of each block.  So each device selects the k best of its own
 * block (indices made global by adding the block's offset), only those
 * candidates, values and indices, are all-gathered along the split axes,
 * and a second top-k over the candidates selects the final k; the indices
 * are gathered from the candidates' (the values, when the program reads
 * them through the gather sema writes after top_k, too).
 *
 * The candidates are gathered in device order and each block's in rank
 * order, so among equal values a lower candidate position is a lower index:
 * the second top-k breaks ties as the unsharded op does (the lower index
 * first).  The padding of uneven blocks is masked to the value that ranks
 * last (-inf for the largest, +inf for the smallest, the i32 extremes): a
 * padded position is after every real one, so it loses every tie, and a
 * padded candidate, chosen only where a block has fewer than k real
 * elements, is never among the final k.
 *
 * A block holding no more than k elements sends them all plus their
 * indices, more than the operand's all-gather: then (and whenever the
 * candidates would send as much) the operand is all-gathered as before. */
#include "part.h"

#include <string.h>

int topk_split(const Module *m, const Fn *src, int v, TopkSplit *t) {
    const Inst *in = &src->insts[v];
    if (in->op != OP_TOP_K || ir_attr(src, in, 1) == TOP_K_ASCENDING)
        return 0;        /* sort order: k is the whole dim, so the operand is all-gathered */
    const Inst *x = &src->insts[ir_arg(src, in, 0)];
    int last = x->type.rank - 1;
    t->naxes = sharding_dim_axes(&x->sh, last, t->axes);
    if (!t->naxes || partial_axes(&x->sh))
        return 0;
    for (int i = 0; i < t->naxes; i++)
        if (in->sh.dim[t->axes[i]] >= 0)
            return 0;                /* the result splits a leading dim by it */
    t->block = shape_local(m, &x->type, &x->sh).dims[last];
    int64_t k = ir_attr(src, in, 0), size = dtype_size(x->type.dtype);
    t->local_k = k < t->block ? k : t->block;
    return t->local_k * (size + (int64_t)sizeof(int32_t)) < t->block * size;
}

/* gather(table, idx) along the last dim, every leading dim a batch dim
 * (take_along_axis: what sema emits for top_k's values). */
static int take_along(Part *p, int table, int idx) {
    int rank = p->dst->insts[table].type.rank;
    int64_t attrs[2 + 2 * MAX_RANK] = {rank - 1, GATHER_CLAMP};
    for (int d = 0; d < rank - 1; d++)
        attrs[2 + 2 * d] = attrs[3 + 2 * d] = d;
    return emit_local(p, OP_GATHER, (int32_t[]){table, idx}, 2, attrs, 2 * rank, NULL);
}

static int is_take_along(const Fn *src, const Inst *g) {
    int rank = src->insts[ir_arg(src, g, 0)].type.rank, nb;
    const int64_t *pair = inst_gather_batch(src, g, &nb);
    if (inst_dim(src, g) != rank - 1 || nb != rank - 1)
        return 0;
    for (int d = 0; d < nb; d++)
        if (pair[2 * d] != d || pair[2 * d + 1] != d)
            return 0;
    return 1;
}

int topk_values_gather(const Module *m, const Fn *src, int v) {
    const Inst *g = &src->insts[v];
    if (g->op != OP_GATHER)
        return 0;
    int u = ir_arg(src, g, 1);
    const Inst *top = &src->insts[u];
    TopkSplit t;
    return top->op == OP_TOP_K && ir_arg(src, top, 0) == ir_arg(src, g, 0) && top->place == g->place &&
           is_take_along(src, g) && topk_split(m, src, u, &t);
}

/* Local indices into the device's block made global: plus the block's start. */
static int global_indices(Part *p, int idx, const TopkSplit *t) {
    Shape s = p->dst->insts[idx].type;
    int start = emit_local(p, OP_MUL, (int32_t[]){linear_index(p, t->axes, t->naxes), i32_constant(p, t->block)}, 2,
                           NULL, 0, NULL);
    return emit_local(p, OP_ADD, (int32_t[]){idx, emit_local(p, OP_BROADCAST, (int32_t[]){start}, 1, NULL, 0, &s)}, 2,
                      NULL, 0, NULL);
}

static int all_gather_last(Part *p, int x, const TopkSplit *t) {
    return all_gather_along(p, x, p->dst->insts[x].type.rank - 1, t->axes, t->naxes);
}

static TopkCandidates *candidates_of(Part *p, int v) {
    if (!p->top_k) {
        p->top_k = arena_alloc(p->m->arena, sizeof(TopkCandidates) * (size_t)(p->src->ninsts + 1));
        for (int i = 0; i < p->src->ninsts; i++)
            p->top_k[i].values = -1;
    }
    return &p->top_k[v];
}

int lower_split_top_k(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    int v = (int)(in - src->insts), a = ir_arg(src, in, 0);
    TopkSplit t;
    if (!topk_split(p->m, src, v, &t))
        return 0;
    int64_t k = ir_attr(src, in, 0), largest = ir_attr(src, in, 1);
    Piece x = reshard(p, p->value[a], &src->insts[a].sh);
    int last = x.global.rank - 1;
    if (!dim_is_even(p->m, &x.global, &x.sh, last))
        x.v = mask_padding(p, x, last, largest ? RED_MAX : RED_MIN);
    int best = emit_local(p, OP_TOP_K, (int32_t[]){x.v}, 1, (int64_t[]){t.local_k, largest}, 2, NULL);
    int values = take_along(p, x.v, best), indices = global_indices(p, best, &t);
    Mark first = mark(p);
    TopkCandidates *c = candidates_of(p, v);
    c->values = all_gather_last(p, values, &t);
    int all_indices = all_gather_last(p, indices, &t), ncollectives;
    /* the candidates are all that must move */
    note_move(p, first.ninsts, x.v, OP_TOP_K, bytes_since(p, first, &ncollectives));
    c->positions = emit_local(p, OP_TOP_K, (int32_t[]){c->values}, 1, (int64_t[]){k, largest}, 2, NULL);
    uint32_t gathered = 0;
    for (int i = 0; i < t.naxes; i++)
        gathered |= 1u << t.axes[i];
    Sharding sh = sharding_without(&x.sh, gathered, SH_REPLICATED);
    c->sh = sh;
    int r = take_along(p, all_indices, c->positions);
    p->dst->insts[r].sh = sh;
    *out = reshard(p, (Piece){r, sh, in->type, p->place}, &in->sh);
    return 1;
}

/* A top-k whose own sharding splits its last dim: sort's and argsort's,
 * whose result keeps the sorted dim's sharding (docs/partitioning.md,
 * "Sort along a split dim").  The dim is selected whole: the operand is
 * all-gathered along it only, the leading dims keep their split, and each
 * device keeps its block of the result, a slice that sends nothing. */
int lower_whole_top_k(Part *p, const Inst *in, Piece *out) {
    int last = in->type.rank - 1;
    uint32_t split = 0;
    for (int a = 0; a < MAX_AXES; a++)
        if (in->sh.dim[a] == last)
            split |= 1u << a;
    if (!split || partial_axes(&in->sh))
        return 0;
    Sharding sh = sharding_without(&in->sh, split, SH_REPLICATED);
    Piece x = reshard(p, p->value[ir_arg(p->src, in, 0)], &sh);
    int r = emit_local(p, OP_TOP_K, (int32_t[]){x.v}, 1, ir_attrs(p->src, in), 2, NULL);
    p->dst->insts[r].sh = sh;
    *out = reshard(p, (Piece){r, sh, in->type, p->place}, &in->sh);
    return 1;
}

int lower_top_k_values(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    if (!topk_values_gather(p->m, src, (int)(in - src->insts)))
        return 0;
    const TopkCandidates *c = candidates_of(p, ir_arg(src, in, 1));
    if (c->values < 0)
        return 0;
    int r = take_along(p, c->values, c->positions);
    p->dst->insts[r].sh = c->sh;
    *out = reshard(p, (Piece){r, c->sh, in->type, p->place}, &in->sh);
    return 1;
}
