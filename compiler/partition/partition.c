/* The SPMD partitioner: rewrites each fn, after sharding propagation, into
 * the program every device runs on its own blocks.
 *
 * Ops with a factor rule are lowered generically: the result's sharding
 * gives the sharding of each factor, a factor summed away (a dot's
 * contracting dim, a reduced dim) keeps the axes its operands already split
 * it by, and each operand is resharded (reshard.c) to what the factors ask
 * of it.  The op then runs on local blocks (padding masked where a sum
 * would see it); a summed factor that was split leaves partial results,
 * which resharding to the value's own sharding reduces (all-reduce, or
 * reduce-scatter when the value is split there).  Rolls, slices and concats
 * along split dims exchange only the rows that cross blocks (halo.c).  When
 * the local op would still not compute the right block (a reshape that cuts
 * through a split, ...), the op runs on replicated operands instead, with a
 * warning.  (A gather's gathered table dim is not in its result: a table
 * split there is all-gathered along it as an operand.) */
#include "part.h"

#include <stdlib.h>
#include <string.h>

/* ---- the factor shardings an op's result asks for ---- */

/* The result's axes go to the major factor of each dim (a later factor
 * would need the major one whole, which local ops cannot express).  An axis
 * already kept by a summed factor stays there: the partial sums are then
 * reduce-scattered onto the result's dim instead of gathering operands. */
void plan_result_axes(Plan *pl, int t, const Sharding *sh) {
    const Rule *r = pl->rule;
    for (int d = 0; d < r->rank[t]; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
        if (!n || !r->ndf[t][d])
            continue;
        int f = r->f[t][d][0];
        for (int i = 0; i < n && !(pl->summed_axes >> axes[i] & 1); i++)
            pl->factor_axes[f][pl->nfactor_axes[f]++] = axes[i];
    }
}

static int64_t piece_bytes(const Part *p, const Piece *x) {
    const Shape *s = &p->dst->insts[x->v].type;
    return shape_elems(s) * dtype_size(s->dtype);
}

/* Summed factors keep the axes every operand holding them splits them by.
 * For a dot where only one operand splits the contracting dim, slicing the
 * other to match (and reducing the result) is chosen when it moves fewer
 * bytes than gathering the split operand. */
static void plan_summed(Part *p, Plan *pl, const Inst *in, const Piece *args) {
    const Rule *r = pl->rule;
    uint32_t used = 0;
    for (int f = 0; f < r->nfactors; f++) {
        if (r->kind[f] != FACTOR_REDUCTION)
            continue;
        int agreed[MAX_AXES], na = -1, holders = 0, splitters = 0, split_by = -1;
        for (int t = 0; t < in->nargs; t++)
            for (int d = 0; d < r->rank[t]; d++) {
                if (r->ndf[t][d] != 1 || r->f[t][d][0] != f)
                    continue;
                int axes[MAX_AXES], n = sharding_dim_axes(&args[t].sh, d, axes);
                holders++;
                if (n) {
                    splitters++;
                    split_by = t;
                }
                if (na < 0) {
                    na = n;
                    memcpy(agreed, axes, sizeof(int) * (size_t)n);
                } else if (na != n || memcmp(agreed, axes, sizeof(int) * (size_t)n) != 0)
                    na = 0;
            }
        if (in->op == OP_DOT && holders == 2 && splitters == 1) {
            /* Gather the split operand, or slice the other and reduce after? */
            int d = 0;
            while (r->ndf[split_by][d] != 1 || r->f[split_by][d][0] != f)
                d++;
            int axes[MAX_AXES], n = sharding_dim_axes(&args[split_by].sh, d, axes);
            int64_t k = 1;
            for (int i = 0; i < n; i++)
                k *= p->m->axis_size[axes[i]];
            /* Costs in double: the products can pass 2^63 for huge types. */
            double gather = (double)(k - 1) * (double)piece_bytes(p, &args[split_by]);
            Shape res = shape_local(p->m, &in->type, &in->sh);
            double reduce = 2.0 * (double)(k - 1) * (double)shape_elems(&res) * dtype_size(res.dtype) / (double)k;
            /* ... plus moving the other operand, if it uses those axes elsewhere. */
            const Piece *other = &args[1 - split_by];
            for (int i = 0; i < n; i++)
                if (other->sh.dim[axes[i]] != SH_REPLICATED) {
                    reduce += (double)(k - 1) * (double)piece_bytes(p, other);
                    break;
                }
            if (reduce < gather) {
                na = n;
                memcpy(agreed, axes, sizeof(int) * (size_t)n);
            }
        }
        for (int i = 0; i < na; i++) {
            if (used >> agreed[i] & 1)
                break;
            used |= 1u << agreed[i];
            pl->factor_axes[f][pl->nfactor_axes[f]++] = agreed[i];
            pl->summed_axes |= 1u << agreed[i];
        }
    }
}

Sharding plan_wanted(const Plan *pl, int t) {
    const Rule *r = pl->rule;
    Sharding sh = sharding_replicated();
    for (int d = 0; d < r->rank[t]; d++) {
        if (!r->ndf[t][d] || r->kind[r->f[t][d][0]] == FACTOR_REPLICATE)
            continue;
        int f = r->f[t][d][0];
        for (int i = 0; i < pl->nfactor_axes[f]; i++) {
            sh.dim[pl->factor_axes[f][i]] = (int8_t)d;
            sh.pos[pl->factor_axes[f][i]] = (uint8_t)i;
        }
    }
    return sh;
}

/* ---- lowering one op ---- */

static void lower_placed(Part *p, int v);

static void warn_replicated(Part *p) {
    diag_report(p->diag, p->loc, "warning", "%s is computed on replicated operands: this op cannot run on the blocks "
                "its sharding gives", inst_name(p));
}

static Piece lower_replicated(Part *p, const Inst *in, int warn) {
    const Fn *src = p->src;
    int32_t *args = arena_alloc(p->m->arena, sizeof(int32_t) * (size_t)(in->nargs + 1));   /* any count */
    Sharding rep = sharding_replicated();
    int any_split = 0;
    for (int i = 0; i < in->nargs; i++) {
        Piece a = p->value[ir_arg(src, in, i)];
        any_split |= !sharding_is_replicated(&a.sh);
        args[i] = reshard(p, a, &rep).v;
    }
    if (warn && any_split)
        warn_replicated(p);
    int v = emit_local(p, (Op)in->op, args, in->nargs, ir_attrs(src, in), in->nattrs, &in->type);
    p->dst->insts[v].value = in->value;
    p->dst->insts[v].sh = rep;
    return (Piece){v, rep, in->type, p->place};
}

/* Slice bounds of the local op: a split dim is taken whole. */
static void local_slice_attrs(const Inst *in, const Fn *src, const Shape *local_in, int64_t *attrs) {
    int rank = local_in->rank;
    for (int d = 0; d < rank; d++) {
        int64_t lo = src->ints[in->attrs + d], hi = src->ints[in->attrs + rank + d];
        int whole = lo == 0 && hi == src->insts[ir_arg(src, in, 0)].type.dims[d];
        attrs[d] = whole ? 0 : lo;
        attrs[rank + d] = whole ? local_in->dims[d] : hi;
    }
}

Mark mark(const Part *p) {
    return (Mark){p->dst->ninsts, p->dst->nargs, p->dst->nints, p->reshards.n, p->dst->nmoves, p->dst->nnotes};
}

/* The reshards taken back are forgotten too: their instructions' indices
 * are about to be reused by others. */
void rollback(Part *p, Mark k) {
    p->dst->ninsts = k.ninsts;
    p->dst->nargs = k.nargs;
    p->dst->nints = k.nints;
    p->dst->nmoves = k.nmoves;
    p->dst->nnotes = k.nnotes;
    reshard_forget(p, k.nreshards);
}

void plan_without(Plan *pl, uint32_t axes) {
    for (int f = 0; f < pl->rule->nfactors; f++) {
        int n = 0;
        for (int j = 0; j < pl->nfactor_axes[f]; j++)
            if (!(axes >> pl->factor_axes[f][j] & 1))
                pl->factor_axes[f][n++] = pl->factor_axes[f][j];
        pl->nfactor_axes[f] = n;
    }
    pl->summed_axes &= ~axes;
}

/* ---- a gather from a table split along the gathered dim ---- */

/* A comment the dump prints after instruction v of fn: a choice and its cost. */
void add_note(Module *m, Fn *fn, int v, const char *note) {
    *VEC_PUSH(m->arena, fn->notes, fn->nnotes, fn->notes_cap) = note;
    fn->insts[v].note = fn->nnotes;
}

/* The axes splitting the gathered dim of the table that a masked local
 * gather keeps (*n of them), or 0 to all-gather the table, as gather.c
 * chooses; the kept axes leave the plan: indices and result are whole
 * along them, and the sum's reduce-scatter splits the result again.  The
 * choice and its costs become the gather's note. */
static int masked_gather_axes(Part *p, const Inst *in, Plan *pl, int *axes, const char **note) {
    GatherChoice c;
    if (!gather_choice(p, (int)(in - p->src->insts), &c))
        return 0;
    *note = gather_choice_note(p->m->arena, &c);
    if (c.scheme != GATHER_MASKED)
        return 0;
    uint32_t kept = 0;
    for (int i = 0; i < c.naxes; i++)
        kept |= 1u << c.axes[i];
    plan_without(pl, kept);
    memcpy(axes, c.axes, sizeof(int) * (size_t)c.naxes);
    return c.naxes;
}

/* i32 tensor x clamped into [lo, hi]. */
static int clamp(Part *p, int x, int64_t lo, int64_t hi) {
    Shape s = p->dst->insts[x].type;
    int l = splat(p, (double)lo, &s), h = splat(p, (double)hi, &s);
    return emit_local(p, OP_MIN, (int32_t[]){emit_local(p, OP_MAX, (int32_t[]){x, l}, 2, NULL, 0, NULL), h}, 2, NULL,
                      0, NULL);
}

/* Indices into the device's block of the gathered dim (clamped into the
 * whole dim first, as the gather clamps): those outside the block read
 * zeros from the fill-mode local gather. */
static int local_indices(Part *p, int idx, int64_t whole, int64_t block, const int *axes, int n) {
    return shift_to_block(p, clamp(p, idx, 0, whole - 1), axes, n, block);
}

/* ---- a dot of partial sums ---- */

/* The axes along which one operand of a dot holds partial sums that the
 * dot keeps (partial.c), taken out of the plan: that operand keeps its
 * blocks and the result holds partial sums along them.  Not when both are
 * partial along an axis (a product of sums is no sum of products), nor
 * when the operand's blocks are not the ones the dot needs.  An add keeps
 * them only when both operands are partial along the same axes (a whole
 * operand would be counted once per device); a transpose, on the way to
 * such an add, moves them (add_keeps_partial). */
static uint32_t absorbed_partials(Plan *pl, const Inst *in, const Piece *args) {
    uint32_t a0 = partial_axes(&args[0].sh), a1 = in->nargs > 1 ? partial_axes(&args[1].sh) : 0;
    int add = in->op == OP_ADD;
    if (!(a0 | a1) || (add ? a0 != a1 : (a0 & a1) != 0) || (a0 && args[0].sh.reducer != RED_SUM) ||
        (a1 && args[1].sh.reducer != RED_SUM))
        return 0;
    Plan without = *pl;
    plan_without(&without, a0 | a1);
    for (int i = 0; i < in->nargs; i++) {
        Sharding want = plan_wanted(&without, i), have = sharding_without(&args[i].sh, a0 | a1, SH_REPLICATED);
        if (partial_axes(&args[i].sh) && !same_split(&have, &want, args[i].global.rank))
            return 0;
    }
    *pl = without;
    return a0 | a1;
}

/* The result sharding the operands' own splits give, operand `first`'s
 * before the other's: each result dim takes the axes its factor has in
 * that operand, unless an earlier dim took them. */
static Sharding operands_result_sharding(const Rule *r, const Inst *in, const Piece *args, int first) {
    Sharding sh = sharding_replicated();
    uint32_t used = 0;
    int t = in->nargs;
    for (int pass = 0; pass < t; pass++) {
        int i = (first + pass) % t;
        for (int d = 0; d < r->rank[t]; d++) {
            int f = r->ndf[t][d] == 1 ? r->f[t][d][0] : -1, pos = 0, taken[MAX_AXES];
            if (f < 0 || sharding_dim_axes(&sh, d, taken))
                continue;
            for (int e = 0; e < r->rank[i] && !pos; e++) {
                int axes[MAX_AXES], n = r->ndf[i][e] == 1 && r->f[i][e][0] == f ? sharding_dim_axes(&args[i].sh, e, axes)
                                                                                : 0;
                for (int k = 0; k < n && !(used >> axes[k] & 1); k++) {
                    sh.dim[axes[k]] = (int8_t)d;
                    sh.pos[axes[k]] = (uint8_t)pos++;
                    used |= 1u << axes[k];
                }
            }
        }
    }
    return sh;
}

/* The op on local blocks, its factors split as its result's sharding asks
 * (from_operands 0), or for a dot as operand from_operands - 1's splits
 * and then the other's give (lower_dot). */
static Piece lower_with_rule(Part *p, const Inst *in, const Rule *rule, int from_operands) {
    const Fn *src = p->src;
    Mark before = mark(p);
    Plan pl;
    pl.rule = rule;
    memset(pl.nfactor_axes, 0, sizeof pl.nfactor_axes);
    pl.summed_axes = 0;
    Piece args[MAX_RULE_TENSORS];
    for (int i = 0; i < in->nargs; i++)
        args[i] = p->value[ir_arg(src, in, i)];
    plan_summed(p, &pl, in, args);
    Sharding result = from_operands ? operands_result_sharding(rule, in, args, from_operands - 1) : in->sh;
    plan_result_axes(&pl, in->nargs, &result);
    const char *note = NULL;
    int kept[MAX_AXES], nkept = in->op == OP_GATHER ? masked_gather_axes(p, in, &pl, kept, &note) : 0;
    uint32_t absorbed = in->op == OP_DOT || in->op == OP_ADD || in->op == OP_TRANSPOSE
                            ? absorbed_partials(&pl, in, args) : 0;
    int32_t locals[MAX_RULE_TENSORS];
    for (int i = 0; i < in->nargs; i++) {
        locals[i] = args[i].v;
        if (partial_axes(&args[i].sh) & absorbed)
            continue;                /* its blocks are the ones the dot needs */
        Sharding want = plan_wanted(&pl, i);
        if (args[i].global.rank == 0)
            want = sharding_replicated();
        for (int j = 0; i == 0 && j < nkept; j++) {      /* the table keeps its blocks of the gathered dim */
            want.dim[kept[j]] = (int8_t)inst_dim(src, in);
            want.pos[kept[j]] = (uint8_t)j;
        }
        args[i] = reshard(p, args[i], &want);
        locals[i] = args[i].v;
    }
    if (nkept)
        locals[1] = local_indices(p, locals[1], args[0].global.dims[inst_dim(src, in)],
                                  p->dst->insts[locals[0]].type.dims[inst_dim(src, in)], kept, nkept);
    /* A summed dim split into padded blocks: the padding must not count. */
    Reducer reducer = in->op == OP_REDUCE ? (Reducer)src->ints[in->attrs] : RED_SUM;
    for (int i = 0; i < in->nargs; i++)
        for (int d = 0; d < args[i].global.rank; d++) {
            const Rule *r = pl.rule;
            int summed = r->ndf[i][d] == 1 && r->kind[r->f[i][d][0]] == FACTOR_REDUCTION;
            int axes[MAX_AXES];
            if (summed && sharding_dim_axes(&args[i].sh, d, axes) && !dim_is_even(p->m, &args[i].global, &args[i].sh, d))
                args[i].v = locals[i] = mask_padding(p, args[i], d, reducer);
        }
    /* A sum left partial of bf16 or f16 is held in f32 (partial.c): made
     * from f32 operands, or by a dot over a split contracting dim writing
     * the f32 sums of its own (widening a dot's operands would copy both
     * blocks, a weight's too, and run an f32 GEMM for the bf16 one).  A dot
     * whose partial sums are only those of an operand it took (a masked
     * gather's: one device's share is nonzero) has nothing to round. */
    int narrow_sums = reducer == RED_SUM && sum_dtype(in->type.dtype) != in->type.dtype;
    int widen_operands = narrow_sums && (pl.summed_axes || absorbed) &&
                         (in->op == OP_REDUCE || in->op == OP_ADD || in->op == OP_TRANSPOSE);
    int wide = widen_operands || (narrow_sums && in->op == OP_DOT && pl.summed_axes);
    for (int i = 0; widen_operands && i < in->nargs; i++)
        locals[i] = widen(p, locals[i]);
    Sharding out = plan_wanted(&pl, in->nargs);
    for (int a = 0; a < MAX_AXES; a++)
        if (pl.summed_axes >> a & 1)
            out.dim[a] = SH_PARTIAL;
    for (int j = 0; j < nkept; j++)
        out.dim[kept[j]] = SH_PARTIAL;           /* each device's share of the lookup, zeros elsewhere */
    for (int a = 0; a < MAX_AXES; a++)
        if (absorbed >> a & 1)
            out.dim[a] = SH_PARTIAL;
    out.reducer = (uint8_t)reducer;
    Shape want = shape_local(p->m, &in->type, &out);
    if (wide)
        want.dtype = sum_dtype(want.dtype);
    int64_t attrs[2 * MAX_RANK];
    const int64_t *at = ir_attrs(src, in);
    if (in->op == OP_SLICE) {
        local_slice_attrs(in, src, &p->dst->insts[locals[0]].type, attrs);
        at = attrs;
    }
    if (nkept) {
        memcpy(attrs, at, sizeof(int64_t) * (size_t)in->nattrs);
        attrs[1] = GATHER_FILL;
        at = attrs;
    }
    int v = try_emit_local(p, (Op)in->op, locals, in->nargs, at, in->nattrs, &want);
    if (v < 0 || !shape_eq(&p->dst->insts[v].type, &want)) {
        rollback(p, before);                 /* the blocks do not line up for this op */
        return lower_replicated(p, in, 1);
    }
    p->dst->insts[v].value = in->value;
    p->dst->insts[v].sh = out;
    if (note)
        add_note(p->m, p->dst, v, note);
    return (Piece){v, out, in->type, p->place};
}

/* Bring src value v (instruction in) to its own sharding, reducing any
 * partial sums (unless its dot takes them: not wide ones, which the dot
 * would round per device, or read with its other operand's block widened
 * to f32; reduced now, they are rounded once). */
static Piece to_own_sharding(Part *p, const Inst *in, int v, Piece out) {
    int dot_takes = !piece_is_wide(p, &out) && keeps_partial(p, v, &out);
    if (!dot_takes && !add_keeps_partial(p, v, &out))
        out = reshard(p, out, &in->sh);
    return out;
}

int64_t bytes_since(const Part *p, Mark k, int *ncollectives) {
    int64_t bytes = 0;
    *ncollectives = 0;
    for (int v = k.ninsts; v < p->dst->ninsts; v++) {
        if (!op_is_collective(p->dst->insts[v].op))
            continue;
        int64_t b = collective_bytes(p->m, p->dst, &p->dst->insts[v]);
        bytes = bytes > INT64_MAX - b ? INT64_MAX : bytes + b;
        ++*ncollectives;
    }
    return bytes;
}

/* A dot by cost, as XLA's dot handler weighs its alternatives: its factors
 * split as its result's sharding asks (operands resharded to it), or as
 * one operand's splits and then the other's give (the operands' conflicts
 * gathered, the result resharded after: one all-to-all of the result
 * instead of all-to-alls of both operands).  Each distinct plan is tried
 * silently and taken back; the one that sends the fewest bytes per device
 * in all is emitted, the first of equals (the result's first). */
static Piece lower_dot(Part *p, const Inst *in, int v, const Rule *rule) {
    Piece args[2] = {p->value[ir_arg(p->src, in, 0)], p->value[ir_arg(p->src, in, 1)]};
    Sharding plan[3] = {in->sh, operands_result_sharding(rule, in, args, 0), operands_result_sharding(rule, in, args, 1)};
    int distinct[3] = {1, 0, 0}, n = 1, best = 0;
    int64_t bytes[3] = {0};
    for (int k = 1; k < 3; k++) {
        distinct[k] = 1;
        for (int j = 0; j < k; j++)
            distinct[k] &= !same_split(&plan[k], &plan[j], in->type.rank);
        n += distinct[k];
    }
    if (n > 1) {
        Mark before = mark(p);
        Diag *diag = p->diag, quiet = *diag;
        quiet.out = NULL;            /* the tries warn once, when redone */
        p->diag = &quiet;
        for (int k = 0; k < 3; k++) {
            if (!distinct[k])
                continue;
            to_own_sharding(p, in, v, lower_with_rule(p, in, rule, k));
            int ncollectives;
            bytes[k] = bytes_since(p, before, &ncollectives);
            rollback(p, before);
            best = bytes[k] < bytes[best] ? k : best;
        }
        p->diag = diag;
    }
    Mark before = mark(p);
    Piece out = to_own_sharding(p, in, v, lower_with_rule(p, in, rule, best));
    if (n > 1 && p->m->reshard_candidates) {
        static const char *const by[3] = {"the result's sharding", "the lhs's splits", "the rhs's splits"};
        const char *note = "dot planned by";
        for (int k = 0; k < 3; k++)
            if (distinct[k])
                note = arena_printf(p->m->arena, "%s%s %s: %lld bytes%s", note, k ? ";" : "", by[k],
                                    (long long)bytes[k], k == best ? " (chosen)" : "");
        for (int u = before.ninsts; u < p->dst->ninsts; u++)
            if (p->dst->insts[u].op == OP_DOT && !p->dst->insts[u].note)
                add_note(p->m, p->dst, u, note);
    }
    return out;
}

/* Would the local op compute the right blocks?  Not when a dim whose
 * extent changes (a slice, roll or concat dim) is split, when a reshape
 * cuts through a split, or when an op sums over padded blocks.  Only the
 * result's sharding matters: operands are resharded to what the plan asks,
 * so the propagated program alone answers (partition_note_choices asks
 * before anything is lowered). */
static int local_op_is_exact(const Module *m, const Inst *in, const Rule *r) {
    int t = in->nargs;
    for (int d = 0; d < r->rank[t]; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, d, axes);
        if (!n)
            continue;
        if (r->ndf[t][d] == 0 || r->kind[r->f[t][d][0]] == FACTOR_REPLICATE)
            return 0;
        if (in->op == OP_RESHAPE) {
            int f = r->f[t][d][0];
            int64_t k = 1;
            for (int i = 0; i < n; i++)
                k *= m->axis_size[axes[i]];
            if (r->size[f] % k)
                return 0;
        }
    }
    return 1;
}

static Piece lower_iota(Part *p, const Inst *in) {
    int64_t dim = p->src->ints[in->attrs];
    Shape local = shape_local(p->m, &in->type, &in->sh);
    int v = emit_local(p, OP_IOTA, NULL, 0, &dim, 1, &local);
    int axes[MAX_AXES], n = sharding_dim_axes(&in->sh, (int)dim, axes);
    if (n) {                     /* a block of an iota starts at its offset */
        Shape i32 = {DT_I32, 0, {0}}, scalar = {local.dtype, 0, {0}};
        int c = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &i32);
        p->dst->insts[c].value = (double)local.dims[dim];
        int idx = linear_index(p, axes, n);
        int off = emit_local(p, OP_MUL, (int32_t[]){idx, c}, 2, NULL, 0, NULL);
        if (local.dtype != DT_I32)
            off = emit_local(p, OP_CONVERT, (int32_t[]){off}, 1, NULL, 0, &scalar);
        int b = emit_local(p, OP_BROADCAST, (int32_t[]){off}, 1, NULL, 0, &local);
        v = emit_local(p, OP_ADD, (int32_t[]){v, b}, 2, NULL, 0, NULL);
    }
    p->dst->insts[v].sh = in->sh;
    return (Piece){v, in->sh, in->type, p->place};
}

/* ---- calls ---- */

const char *sharding_text(Part *p, const Shape *s, const Sharding *sh) {
    char *text = NULL;
    size_t n = 0;
    FILE *o = open_memstream(&text, &n);
    ir_print_sharding(o, p->m, s, sh);
    fclose(o);
    const char *copy = arena_printf(p->m->arena, "%s", text[0] == ' ' ? text + 1 : text);
    free(text);
    return copy;
}

/* An argument resharded to a parameter's sharding by collectives: one
 * warning per call in the source and parameter, however often it runs
 * (a loop unrolls into many calls). */
static void note_call_reshard(Part *p, const Inst *call, int param, const Piece *from, int first_new) {
    int64_t bytes = 0;
    for (int v = first_new; v < p->dst->ninsts; v++)
        if (op_is_collective(p->dst->insts[v].op))
            bytes += collective_bytes(p->m, p->dst, &p->dst->insts[v]);
    if (bytes == 0)
        return;
    for (int i = 0; i < p->ncall_reshards; i++) {
        CallReshard *c = &p->call_reshards[i];
        if (c->loc.line == call->loc.line && c->loc.col == call->loc.col && c->param == param) {
            c->bytes += bytes;
            c->calls++;
            return;
        }
    }
    const Fn *callee = &p->m->fns[ir_attr(p->src, call, 0)];
    *VEC_PUSH(p->m->arena, p->call_reshards, p->ncall_reshards, p->call_reshards_cap) = (CallReshard){
        call->loc, (int)ir_attr(p->src, call, 0), param, bytes, 1,
        sharding_text(p, &from->global, &from->sh), sharding_text(p, &from->global, &callee->params[param].sh)};
}

static void warn_call_reshards(Part *p) {
    for (int i = 0; i < p->ncall_reshards; i++) {
        const CallReshard *c = &p->call_reshards[i];
        const Fn *callee = &p->m->fns[c->callee];
        const char *generic = callee->spec_of ? sym_name(p->m->syms, p->m->fns[callee->spec_of - 1].sym)
                                              : sym_name(p->m->syms, callee->sym);
        const char *param = "_";
        for (int v = 0; v < callee->ninsts; v++)
            if (callee->insts[v].op == OP_PARAMETER && ir_attr(callee, &callee->insts[v], 0) == c->param)
                param = callee->insts[v].sym >= 0 ? sym_name(p->m->syms, callee->insts[v].sym) : "_";
        const char *calls = c->calls == 1 ? "" : arena_printf(p->m->arena, " over its %d calls", c->calls);
        diag_report(p->diag, c->loc, "warning",
                    "the call of '%s' reshards argument %d from %s to parameter '%s' %s: %lld bytes sent per device%s; "
                    "leave the parameter's dims open ('@?') to take the caller's sharding",
                    generic, c->param + 1, c->from, param, c->to, (long long)c->bytes, calls);
    }
}

static Piece lower_call(Part *p, const Inst *in) {
    const Fn *callee = &p->m->fns[p->src->ints[in->attrs]];
    int32_t args[256];
    int32_t *locals = in->nargs <= 256 ? args : arena_alloc(p->m->arena, sizeof(int32_t) * (size_t)in->nargs);
    for (int i = 0; i < in->nargs; i++) {
        int first_new = p->dst->ninsts;
        Piece arg = p->value[ir_arg(p->src, in, i)];
        locals[i] = reshard(p, arg, &callee->params[i].sh).v;
        note_call_reshard(p, in, i, &arg, first_new);
    }
    int v = emit_local(p, (Op)in->op, locals, in->nargs, &p->src->ints[in->attrs], in->nattrs, NULL);
    Sharding sh = callee->nresults == 1 ? callee->results[0].sh : sharding_replicated();
    p->dst->insts[v].sh = sh;
    p->dst->insts[v].flags |= in->flags & INST_REMAT;     /* the dumps still say checkpoint */
    return (Piece){v, sh, in->type, p->place};
}

static Piece lower_tuple_element(Part *p, const Inst *in) {
    const Inst *call = &p->src->insts[ir_arg(p->src, in, 0)];
    const Fn *callee = &p->m->fns[p->src->ints[call->attrs]];
    int64_t which = p->src->ints[in->attrs];
    int v = emit_local(p, OP_GET_TUPLE_ELEMENT, (int32_t[]){p->value[ir_arg(p->src, in, 0)].v}, 1, &which, 1, NULL);
    p->dst->insts[v].sh = callee->results[which].sh;
    return (Piece){v, callee->results[which].sh, in->type, p->place};
}

static void lower_return(Part *p, const Inst *in) {
    int32_t args[256];
    int32_t *locals = in->nargs <= 256 ? args : arena_alloc(p->m->arena, sizeof(int32_t) * (size_t)in->nargs);
    for (int i = 0; i < in->nargs; i++) {
        Sig *r = &p->dst->results[i];
        Piece x = p->value[ir_arg(p->src, in, i)];
        /* Open result dims keep what the value has. */
        Sharding want = r->sh;
        for (int d = 0; d < x.global.rank; d++) {
            if (!(r->sh.open >> d & 1))
                continue;
            int axes[MAX_AXES], n = sharding_dim_axes(&x.sh, d, axes);
            for (int k = 0; k < n; k++)
                if (want.dim[axes[k]] == SH_REPLICATED)
                    want.dim[axes[k]] = (int8_t)d, want.pos[axes[k]] = (uint8_t)k;
        }
        want.open = 0;
        r->sh = want;
        locals[i] = reshard(p, x, &want).v;
    }
    emit_local(p, OP_RETURN, locals, in->nargs, NULL, 0, NULL);
}

/* Lower src instruction v where it is placed: its operands are first
 * brought there (arrive), and the lowering below reads them as usual. */
static void lower_inst(Part *p, int v) {
    const Inst *in = &p->src->insts[v];
    int32_t stack[8];
    int32_t *args = in->nargs <= 8 ? stack : arena_alloc(p->m->arena, sizeof(int32_t) * (size_t)in->nargs);
    Piece saved_stack[8];
    Piece *saved = in->nargs <= 8 ? saved_stack : arena_alloc(p->m->arena, sizeof(Piece) * (size_t)in->nargs);
    p->loc = in->loc;
    p->place = in->place;
    for (int i = 0; i < in->nargs; i++) {
        args[i] = ir_arg(p->src, in, i);
        saved[i] = p->value[args[i]];
    }
    for (int i = 0; i < in->nargs; i++)
        if (p->value[args[i]].place != in->place)
            p->value[args[i]] = arrive(p, args[i]);
    lower_placed(p, v);
    for (int i = in->nargs - 1; i >= 0; i--)     /* later users may sit elsewhere */
        p->value[args[i]] = saved[i];
    p->value[v].place = in->place;
}

static void lower_placed(Part *p, int v) {
    const Inst *in = &p->src->insts[v];
    int first_new = p->dst->ninsts;
    Rule rule;
    Piece out;
    switch ((Op)in->op) {
    case OP_PARAMETER: {
        int64_t index = p->src->ints[in->attrs];
        int x = emit_local(p, OP_PARAMETER, NULL, 0, &index, 1, NULL);
        p->dst->insts[x].sh = in->sh;
        out = (Piece){x, in->sh, in->type, p->place};
        break;
    }
    case OP_CONSTANT: {
        int x = emit_local(p, OP_CONSTANT, NULL, 0, NULL, 0, &in->type);
        p->dst->insts[x].value = in->value;
        p->dst->insts[x].sh = sharding_replicated();
        out = (Piece){x, sharding_replicated(), in->type, p->place};
        break;
    }
    case OP_IOTA: out = lower_iota(p, in); break;
    case OP_CALL: case OP_LOOP: out = lower_call(p, in); break;
    case OP_GET_TUPLE_ELEMENT: out = lower_tuple_element(p, in); break;
    case OP_RETURN: lower_return(p, in); return;
    default:
        if ((in->op == OP_ROLL && lower_split_roll(p, in, &out)) ||
            (in->op == OP_SLICE && lower_split_slice(p, in, &out)) ||
            (in->op == OP_DYNAMIC_UPDATE_SLICE && lower_split_update_slice(p, in, &out)) ||
            (in->op == OP_DYNAMIC_SLICE && lower_split_dynamic_slice(p, in, &out)) ||
            (in->op == OP_CONCAT && lower_split_concat(p, in, &out)) ||
            (in->op == OP_RESHAPE && lower_split_reshape(p, in, &out)) ||
            (in->op == OP_CUMSUM && lower_split_cumsum(p, in, &out)) ||
            (in->op == OP_SCATTER && lower_scatter(p, in, &out)) ||
            (in->op == OP_TOP_K && (lower_split_top_k(p, in, &out) || lower_whole_top_k(p, in, &out))) ||
            (in->op == OP_GATHER && lower_top_k_values(p, in, &out)))
            break;
        if (in->op == OP_DOT && op_rule(p->src, in, &rule) && local_op_is_exact(p->m, in, &rule)) {
            out = lower_dot(p, in, v, &rule);
            break;
        }
        if (op_rule(p->src, in, &rule) && local_op_is_exact(p->m, in, &rule))
            out = lower_with_rule(p, in, &rule, 0);
        else
            out = lower_replicated(p, in, 1);
        out = to_own_sharding(p, in, v, out);
        break;
    }
    if (out.v >= first_new)      /* an op that moved nothing keeps its operand's name */
        p->dst->insts[out.v].sym = in->sym;
    p->value[v] = out;
}

static void partition_fn(Module *m, Diag *diag, int f) {
    const Fn src = m->fns[f];
    Fn *dst = &m->fns[f];
    *dst = fn_without_body(&src);
    dst->partitioned = 1;
    dst->results = arena_alloc(m->arena, sizeof(Sig) * (size_t)(src.nresults + 1));
    memcpy(dst->results, src.results, sizeof(Sig) * (size_t)src.nresults);
    /* The reshard cache is this function's own: values of another function
     * are never reused. */
    Part p = {.m = m, .diag = diag, .src = &src, .dst = dst,
              .value = arena_alloc(m->arena, sizeof(Piece) * (size_t)src.ninsts),
              .moved = arena_alloc(m->arena, sizeof(Piece) * (size_t)src.ninsts)};
    for (int v = 0; v < src.ninsts; v++)
        p.moved[v].v = -1;
    find_only_users(&p);
    find_unbuilt_pads(&p);
    for (int v = 0; v < src.ninsts; v++) {
        const Inst *in = &src.insts[v];
        p.name_of = in;
        lower_inst(&p, v);
    }
    warn_call_reshards(&p);
}

/* ---- fns that spmd fns call ---- */

/* On local blocks shardings do not matter: a specialization is its
 * generic fn there. */
static int unspecialized(const Module *m, int f) { return m->fns[f].spec_of ? m->fns[f].spec_of - 1 : f; }

static void mark_callees(const Module *m, int f, uint8_t *needed) {
    const Fn *fn = &m->fns[f];
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        int c = op_calls(in->op) ? unspecialized(m, (int)fn->ints[in->attrs]) : -1;
        if (c >= 0 && !m->fns[c].spmd && !needed[c]) {
            needed[c] = 1;
            mark_callees(m, c, needed);     /* depth is bounded: calls form no cycle */
        }
    }
}

static void redirect_calls(const Module *m, Fn *fn, const int *clone) {
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (op_calls(in->op) && clone[unspecialized(m, (int)fn->ints[in->attrs])] >= 0)
            fn->ints[in->attrs] = clone[unspecialized(m, (int)fn->ints[in->attrs])];
    }
}

/* An spmd fn runs the fns it calls on its local blocks, i.e. their global
 * programs; every fn is also an entry point that gets partitioned.  So the
 * fns reachable from spmd bodies get an unpartitioned copy, `name.local`. */
static void clone_for_spmd_callers(Module *m) {
    int n = m->nfns;
    uint8_t *needed = arena_alloc(m->arena, (size_t)n + 1);
    int *clone = arena_alloc(m->arena, sizeof(int) * (size_t)(n + 1));
    for (int f = 0; f < n; f++)
        if (m->fns[f].spmd)
            mark_callees(m, f, needed);
    for (int f = 0; f < n; f++) {
        clone[f] = -1;
        if (!needed[f])
            continue;
        const char *name = arena_printf(m->arena, "%s.local", sym_name(m->syms, m->fns[f].sym));
        int index = module_clone_fn(m, f, sym_intern(m->syms, name, strlen(name)));
        m->fns[index].kept_global = 1;
        clone[f] = index;
    }
    for (int f = 0; f < m->nfns; f++)
        if (m->fns[f].spmd || m->fns[f].kept_global)
            redirect_calls(m, &m->fns[f], clone);
}

/* Is src instruction v a gather that lower_with_rule will lower, and so
 * choose a scheme for (lower_placed's path)? */
static int gather_with_rule(const Module *m, const Fn *src, int v) {
    const Inst *in = &src->insts[v];
    Rule rule;
    return in->op == OP_GATHER && !topk_values_gather(m, src, v) && op_rule(src, in, &rule) &&
           local_op_is_exact(m, in, &rule);
}

void partition_note_choices(Module *m) {
    for (int f = 0; f < m->nfns; f++) {
        Fn *fn = &m->fns[f];
        if (fn->spmd)
            continue;                /* never partitioned */
        Part p = {.m = m, .src = fn};
        find_only_users(&p);
        GatherChoice c;
        for (int v = 0; v < fn->ninsts; v++)
            if (gather_with_rule(m, fn, v) && gather_choice(&p, v, &c))
                add_note(m, fn, v, gather_choice_note(m->arena, &c));
    }
}

/* Callees first: a call passes local blocks of the callee's parameters. */
void partition_module(Module *m, Diag *diag) {
    clone_for_spmd_callers(m);
    int *order = arena_alloc(m->arena, sizeof(int) * (size_t)(m->nfns + 1));
    module_callees_first(m, order);
    for (int i = 0; i < m->nfns; i++)
        if (!m->fns[order[i]].spmd && !m->fns[order[i]].kept_global)
            partition_fn(m, diag, order[i]);
}
