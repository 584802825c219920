/* Printing the IR as HLO-like text (docs/ir.md):
 *   %name = op(operands) attributes : type sharding
 * Output depends only on the module, so dumps are byte-identical run to run. */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const Module *m;
    FILE *out;
    int show_why;
    const Fn *fn;
    const char *const *names;    /* value -> printed name, without the % */
    int *uses;                   /* symbol id -> how many values took its name */
    Arena arena;
    int64_t *call_bytes, *call_count;   /* fn -> what it and its calls send (-1: not yet counted) */
    uint8_t *call_run_time;             /* fn -> it counted a loop of run-time trip count once */
    const DumpHooks *hooks;             /* extra columns and lines (dump --cost), or NULL */
} Printer;

static const char *const cmp_name[] = {"LT", "LE", "GT", "GE", "EQ", "NE"};

void ir_print_shape(FILE *out, const Shape *s) {
    fprintf(out, "%s[", dtype_name[s->dtype]);
    for (int d = 0; d < s->rank; d++)
        fprintf(out, "%s%lld", d ? "," : "", (long long)s->dims[d]);
    fputc(']', out);
}

static void print_axes_set(FILE *out, const Module *m, const int *axes, int n) {
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%s", i ? "," : "", sym_name(m->syms, m->axis_sym[axes[i]]));
}

void ir_print_sharding(FILE *out, const Module *m, const Shape *s, const Sharding *sh) {
    int partial[MAX_AXES], np = 0;
    for (int a = 0; sh->known && a < m->naxes; a++)
        if (sh->dim[a] == SH_PARTIAL)
            partial[np++] = a;
    if (!sh->known || (s->rank == 0 && np == 0))   /* a scalar is split over nothing */
        return;
    fputs(" {", out);
    for (int d = 0; d < s->rank; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
        if (d)
            fputc(',', out);
        if (sh->open >> d & 1)
            fputc('?', out);
        else if (n == 0)
            fputc('_', out);
        else if (n == 1)
            print_axes_set(out, m, axes, 1);
        else {
            fputc('(', out);
            print_axes_set(out, m, axes, n);
            fputc(')', out);
        }
    }
    fputc('}', out);
    if (np) {
        fprintf(out, " partial%s={", reducer_info[sh->reducer].partial);
        print_axes_set(out, m, partial, np);
        fputc('}', out);
    }
}

static void print_type(Printer *p, const Shape *s, const Sharding *sh) {
    ir_print_shape(p->out, s);
    ir_print_sharding(p->out, p->m, s, sh);
}

static void print_int_list(FILE *out, const char *label, const int64_t *v, int n) {
    fprintf(out, "%s={", label);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%lld", i ? "," : "", (long long)v[i]);
    fputc('}', out);
}

/* Replica groups of a collective over `axes` (major first), or its
 * source-target pairs (coordinates in the group) mapped to device ids group
 * by group. */
static void print_groups(Printer *p, const int64_t *axes, int n, const int64_t *pairs, int npairs) {
    int64_t total = axes_size(p->m, (1u << p->m->naxes) - 1);
    int64_t *member = arena_alloc(&p->arena, sizeof(int64_t) * (size_t)total);
    int64_t group_size = ir_replica_groups(p->m, axes, n, member);
    fputs(pairs ? "source_target_pairs={" : "replica_groups={", p->out);
    for (int64_t g = 0; g < total / group_size; g++, member += group_size) {
        if (pairs) {
            for (int i = 0; i + 1 < npairs; i += 2)
                fprintf(p->out, "%s{%lld,%lld}", g || i ? "," : "", (long long)member[pairs[i]],
                        (long long)member[pairs[i + 1]]);
        } else {
            fputs(g ? ",{" : "{", p->out);
            for (int64_t k = 0; k < group_size; k++)
                fprintf(p->out, "%s%lld", k ? "," : "", (long long)member[k]);
            fputc('}', p->out);
        }
    }
    fputc('}', p->out);
}

static void print_axis_names(Printer *p, const int64_t *axes, int n) {
    fputs("axes={", p->out);
    for (int i = 0; i < n; i++)
        fprintf(p->out, "%s%s", i ? "," : "", sym_name(p->m->syms, p->m->axis_sym[axes[i]]));
    fputc('}', p->out);
}

static void print_axes_attr(Printer *p, const int64_t *axes, int n) {
    print_axis_names(p, axes, n);
    fputs(", ", p->out);
    print_groups(p, axes, n, NULL, 0);
}

/* " axes={X}, replica_groups=..." of an axis-index or collective. */
static void print_collective_axes(Printer *p, const Inst *in) {
    int n;
    const int64_t *axes = inst_axes(p->fn, in, &n);
    fputc(' ', p->out);
    print_axes_attr(p, axes, n);
}

static void print_dot_dims(Printer *p, const Inst *in) {
    const Fn *fn = p->fn;
    const Shape *a = &fn->insts[ir_arg(fn, in, 0)].type, *b = &fn->insts[ir_arg(fn, in, 1)].type;
    const int64_t *la = &fn->ints[in->attrs], *lb = la + a->rank, *lr = lb + b->rank;
    DotDims dd;
    dot_dims(fn, in, &dd);
    const int64_t *lbatch = dd.lhs_batch, *rbatch = dd.rhs_batch, *lcon = dd.lhs_contract, *rcon = dd.rhs_contract;
    int nb = dd.nbatch, nc = dd.ncontract;
    const char *sep = "";
    if (nb) {
        print_int_list(p->out, "lhs_batch_dims", lbatch, nb);
        fputs(", ", p->out);
        print_int_list(p->out, "rhs_batch_dims", rbatch, nb);
        sep = ", ";
    }
    fputs(sep, p->out);
    print_int_list(p->out, "lhs_contracting_dims", lcon, nc);
    fputs(", ", p->out);
    print_int_list(p->out, "rhs_contracting_dims", rcon, nc);
    /* A label on one side only that is not in the result is summed there. */
    int64_t lsum[MAX_RANK], rsum[MAX_RANK];
    int nls = 0, nrs = 0;
    for (int t = 0; t < 2; t++) {
        const int64_t *l = t ? lb : la, *o = t ? la : lb;
        int rank = t ? b->rank : a->rank, orank = t ? a->rank : b->rank;
        for (int i = 0; i < rank; i++) {
            int seen = 0;
            for (int k = 0; k < orank; k++)
                seen |= o[k] == l[i];
            for (int k = 0; k < in->type.rank; k++)
                seen |= lr[k] == l[i];
            if (!seen) {
                if (t)
                    rsum[nrs++] = i;
                else
                    lsum[nls++] = i;
            }
        }
    }
    if (nls) {
        fputs(", ", p->out);
        print_int_list(p->out, "lhs_reduced_dims", lsum, nls);
    }
    if (nrs) {
        fputs(", ", p->out);
        print_int_list(p->out, "rhs_reduced_dims", rsum, nrs);
    }
}

/* dimension=1, then XLA's names for the batch dims when there are any. */
static void print_gather_dims(Printer *p, const Inst *in) {
    int nb;
    const int64_t *pair = inst_gather_batch(p->fn, in, &nb);
    int64_t table[MAX_RANK], indices[MAX_RANK];
    for (int i = 0; i < nb; i++) {
        table[i] = pair[2 * i];
        indices[i] = pair[2 * i + 1];
    }
    fprintf(p->out, " dimension=%d", inst_dim(p->fn, in));
    if (inst_gather_mode(p->fn, in) == GATHER_FILL)
        fputs(", mode=fill", p->out);
    if (!nb)
        return;
    fputs(", ", p->out);
    print_int_list(p->out, "operand_batching_dims", table, nb);
    fputs(", ", p->out);
    print_int_list(p->out, "start_indices_batching_dims", indices, nb);
}

static void print_attrs(Printer *p, const Inst *in) {
    const Fn *fn = p->fn;
    const int64_t *at = in->nattrs ? &fn->ints[in->attrs] : NULL;
    FILE *out = p->out;
    int rank = in->nargs ? fn->insts[ir_arg(fn, in, 0)].type.rank : 0;
    switch ((Op)in->op) {
    case OP_IOTA: fprintf(out, " iota_dimension=%lld", (long long)at[0]); break;
    case OP_RANDOM: {
        /* sk_rng_kind's order (lib/shardc_rng.h). */
        static const char *const kind[] = {"word0", "word1", "bits", "uniform", "normal", "truncated_normal",
                                           "randint"};
        fprintf(out, " distribution=%s", kind[at[0]]);
        break;
    }
    case OP_AXIS_INDEX: print_collective_axes(p, in); break;
    case OP_COMPARE: fprintf(out, " direction=%s", cmp_name[at[0]]); break;
    case OP_BROADCAST: case OP_TRANSPOSE:
        fputc(' ', out);
        print_int_list(out, "dimensions", at, in->nattrs);
        break;
    case OP_DOT: fputc(' ', out); print_dot_dims(p, in); break;
    case OP_REDUCE:
        fputc(' ', out);
        print_int_list(out, "dimensions", at + 1, in->nattrs - 1);
        fprintf(out, ", to_apply=%s", reducer_info[at[0]].hlo);
        break;
    case OP_SLICE:
        fputs(" slice={", out);
        for (int d = 0; d < rank; d++)
            fprintf(out, "%s[%lld:%lld]", d ? ", " : "", (long long)at[d], (long long)at[rank + d]);
        fputc('}', out);
        break;
    case OP_DYNAMIC_SLICE:
        fputc(' ', out);
        print_int_list(out, "dynamic_slice_sizes", in->type.dims, in->type.rank);
        break;
    case OP_CONCAT: fprintf(out, " dimensions={%lld}", (long long)at[0]); break;
    case OP_CUMSUM: fprintf(out, " dimension=%lld", (long long)at[0]); break;
    case OP_ROLL: fprintf(out, " shift=%lld, dimension=%lld", (long long)at[0], (long long)at[1]); break;
    case OP_GATHER: print_gather_dims(p, in); break;
    case OP_SCATTER:
        print_int_list(out, " scatter_dims", at, in->nattrs);
        fprintf(out, ", to_apply=%s", reducer_info[RED_SUM].hlo);
        break;
    case OP_TOP_K:
        fprintf(out, " k=%lld, %s", (long long)at[0],
                at[1] == TOP_K_ASCENDING ? "ascending=true" : at[1] ? "largest=true" : "largest=false");
        break;
    case OP_CALL:
        fprintf(out, " to_apply=%s%s", sym_name(p->m->syms, p->m->fns[at[0]].sym),
                in->flags & INST_REMAT ? " checkpoint" : "");
        break;
    case OP_LOOP:
        if (at[1] < 0)
            fputs(" trip_count=run-time", out);
        else
            fprintf(out, " trip_count=%lld", (long long)at[1]);
        fprintf(out, ", carried=%lld, body=%s", (long long)at[2], sym_name(p->m->syms, p->m->fns[at[0]].sym));
        break;
    case OP_GET_TUPLE_ELEMENT: fprintf(out, " index=%lld", (long long)at[0]); break;
    case OP_COLLECTIVE_PERMUTE: {
        int naxes, npairs;
        const int64_t *axes = inst_axes(fn, in, &naxes), *pairs = inst_pairs(fn, in, &npairs);
        fputc(' ', out);
        print_axis_names(p, axes, naxes);
        fputs(", ", out);
        print_groups(p, axes, naxes, pairs, 2 * npairs);
        break;
    }
    case OP_ALL_TO_ALL:
        print_collective_axes(p, in);
        fprintf(out, ", split_dimension=%d, concat_dimension=%d", inst_dim(fn, in), inst_concat_dim(fn, in));
        break;
    default:                         /* the other collectives: axes, then dim and reducer */
        if (!op_is_collective(in->op))
            break;
        print_collective_axes(p, in);
        if (op_info[in->op].at_dim >= 0)
            fprintf(out, ", dimensions={%d}", inst_dim(fn, in));
        if (op_info[in->op].at_reducer >= 0)
            fprintf(out, ", to_apply=%s", reducer_info[inst_reducer(fn, in)].hlo);
        break;
    }
}

/* `%h` for the first value named h, then `%h.1`, `%h.2`; temporaries are
 * named after their op.  Op names are interned with user names, so the two
 * never collide. */
static int base_sym(const Printer *p, const Inst *in) { return in->sym >= 0 ? in->sym : p->m->op_sym[in->op]; }

/* Clear the counters this function used, so the next starts from zero
 * without a pass over every symbol. */
static void forget_names(Printer *p) {
    for (int v = 0; v < p->fn->ninsts; v++)
        p->uses[base_sym(p, &p->fn->insts[v])] = 0;
}

static void name_values(Printer *p, const char **names) {
    const Fn *fn = p->fn;
    for (int v = 0; v < fn->ninsts; v++) {
        int base = base_sym(p, &fn->insts[v]);
        int k = p->uses[base]++;
        const char *s = sym_name(p->m->syms, base);
        names[v] = k ? arena_printf(&p->arena, "%s.%d", s, k) : s;
    }
    p->names = names;
}

/* A function's names, copied into `arena`. */
static const char **names_into(Printer *p, const Fn *fn, Arena *arena) {
    const char **names = arena_alloc(arena, sizeof(char *) * (size_t)(fn->ninsts + 1));
    p->fn = fn;
    name_values(p, names);
    for (int v = 0; v < fn->ninsts; v++)      /* the names outlive the printer's arena */
        names[v] = arena_strndup(arena, names[v], strlen(names[v]));
    return names;
}

const char **ir_value_names(const Module *m, const Fn *fn, Arena *arena) {
    Printer p = {.m = m, .fn = fn};
    p.uses = arena_alloc(&p.arena, sizeof(int) * (size_t)m->syms->n);
    const char **names = names_into(&p, fn, arena);
    arena_free(&p.arena);
    return names;
}

/* One counter array for the whole module, cleared function by function:
 * linear in the module, however many functions it has. */
const char ***ir_module_value_names(const Module *m, Arena *arena) {
    Printer p = {.m = m};
    p.uses = arena_alloc(&p.arena, sizeof(int) * (size_t)m->syms->n);
    const char ***names = arena_alloc(arena, sizeof(char **) * (size_t)(m->nfns + 1));
    for (int f = 0; f < m->nfns; f++) {
        names[f] = names_into(&p, &m->fns[f], arena);
        forget_names(&p);
    }
    arena_free(&p.arena);
    return names;
}

static void print_constant(Printer *p, const Inst *in) {
    if (in->type.dtype == DT_BOOL)
        fputs(in->value != 0 ? "true" : "false", p->out);
    else if (in->type.dtype == DT_I32 || in->type.dtype == DT_U32 || in->type.dtype == DT_I64 || in->type.dtype == DT_U8)
        fprintf(p->out, "%lld", (long long)in->value);
    else if (isnan(in->value))        /* "nan" whatever its sign bit, which printf may show */
        fputs("nan", p->out);
    else
        fprintf(p->out, "%.9g", in->value);   /* inf and -inf as such */
}

static const char *root_text(Printer *p, int root) {
    const Inst *r = &p->fn->insts[root];
    switch (r->why) {
    case WHY_PARAMETER: return arena_printf(&p->arena, "parameter %%%s", p->names[root]);
    case WHY_CONSTRAINT: return arena_printf(&p->arena, "the constraint on %%%s", p->names[root]);
    case WHY_CALL: return arena_printf(&p->arena, "the call result %%%s", p->names[root]);
    case WHY_CALLER: return arena_printf(&p->arena, "parameter %%%s, as the call site passes it", p->names[root]);
    default: return "the declared result sharding";
    }
}

/* Where a sharding came from (docs/propagation.md): the answer to "why is
 * this value split like that". */
static void print_why(Printer *p, const Inst *in) {
    FILE *out = p->out;
    switch ((Why)in->why) {
    case WHY_PARAMETER: fputs("  # parameter", out); break;
    case WHY_CONSTRAINT: fputs("  # sharding constraint", out); break;
    case WHY_CALL: fputs("  # as the callee returns it", out); break;
    case WHY_RESULT: fputs("  # the declared result sharding", out); break;
    case WHY_DEFAULT: fputs("  # replicated: no sharding reaches it", out); break;
    case WHY_CALLER: fputs("  # from the call site", out); break;
    case WHY_FORWARD: case WHY_BACKWARD:
        fprintf(out, "  # %s %%%s", in->why == WHY_FORWARD ? "from operand" : "from user", p->names[in->why_from]);
        if (in->why_from2 >= 0)
            fprintf(out, " and %%%s", p->names[in->why_from2]);
        if (in->why_root >= 0 && in->why_root != in->why_from)
            fprintf(out, ", from %s", root_text(p, in->why_root));
        break;
    default: break;
    }
}

/* One instruction, without indent or newline: a line of the dump, and the
 * comment code generation writes above the instruction's code. */
static void print_inst(Printer *p, int v) {
    const Fn *fn = p->fn;
    const Inst *in = &fn->insts[v];
    FILE *out = p->out;
    if (in->op == OP_RETURN)
        fputs("return(", out);
    else if (in->op == OP_DONE)     /* all-reduce-done(%all-reduce-start) */
        fprintf(out, "%%%s = %s-done(", p->names[v], op_info[fn->insts[ir_arg(fn, in, 0)].op].name);
    else
        fprintf(out, "%%%s = %s%s(", p->names[v], op_info[in->op].name, in->flags & INST_ASYNC ? "-start" : "");
    if (in->op == OP_PARAMETER)
        fprintf(out, "%lld", (long long)ir_attr(fn, in, 0));
    else if (in->op == OP_CONSTANT)
        print_constant(p, in);
    for (int i = 0; i < in->nargs; i++)
        fprintf(out, "%s%%%s", i ? ", " : "", p->names[ir_arg(fn, in, i)]);
    fputc(')', out);
    print_attrs(p, in);
    if (in->op != OP_RETURN) {
        fputs(" : ", out);
        if (in->type.dtype == DT_TUPLE)
            fputs("tuple", out);
        else
            print_type(p, &in->type, &in->sh);
    }
    if (in->place)                  /* only the submesh's devices run it */
        fprintf(out, " on %s", sym_name(p->m->syms, p->m->submesh[in->place - 1].sym));
    if (p->show_why && in->why != WHY_NONE && !(in->why == WHY_DEFAULT && in->type.rank == 0))
        print_why(p, in);
    if (fn->scheduled && in->buffer >= 0)
        fprintf(out, "  # buffer %d", in->buffer);
    if (in->flags & INST_FOLDED)
        fprintf(out, "  # folded into %%%s", p->names[folded_into(fn, v)]);
    if (in->flags & INST_WRITTEN)
        fprintf(out, ", written by %%%s", p->names[folded_into(fn, v)]);
    AttentionForm af;
    if (ends_attention(fn, v) && attention_form(fn, v, &af))
        fprintf(out, ", the attention folded into it (sk_attention%s)",
                af.causal ? ": causal, masked by position" : af.mask >= 0 ? ": the mask added" : "");
    AttentionGradForm gf;
    if (attention_grad_at(fn, v, &gf))
        fprintf(out, ", the attention's gradient folded into it (sk_attention_grad%s: dq %%%s, dk %%%s, dv %%%s)",
                gf.af.causal ? ", causal" : gf.af.mask >= 0 ? ", the mask added" : "", p->names[gf.dq],
                p->names[gf.dk], p->names[gf.dv]);
    if (in->flags & INST_VIEW)
        fputs(in->flags & INST_STRIDED ? "  # a strided view: no copy" : "  # a view: no copy", out);
    if (in->flags & INST_IN_RUN)
        fputs(", in its run of the concatenate", out);
    if (in->flags & INST_ASSEMBLED)
        fputs(", assembled in place: no copy", out);
    if (in->note)
        fprintf(out, "  # %s", fn->notes[in->note - 1]);
}

void ir_print_inst(FILE *out, const Module *m, const Fn *fn, int v, const char *const *names) {
    Printer p = {.m = m, .out = out, .fn = fn, .names = names};
    print_inst(&p, v);
    arena_free(&p.arena);           /* a collective's replica groups */
}

static void print_signature(Printer *p) {
    const Fn *fn = p->fn;
    FILE *out = p->out;
    fprintf(out, "%sfn %s(", fn->spmd ? "spmd " : fn->partitioned ? "partitioned " : "", sym_name(p->m->syms, fn->sym));
    for (int i = 0; i < fn->nparams; i++) {
        const Inst *param = NULL;
        for (int v = 0; v < fn->ninsts && !param; v++)
            if (fn->insts[v].op == OP_PARAMETER && ir_attr(fn, &fn->insts[v], 0) == i)
                param = &fn->insts[v];
        fprintf(out, "%s%s: ", i ? ", " : "", param ? sym_name(p->m->syms, param->sym) : "_");
        print_type(p, &fn->params[i].type, &fn->params[i].sh);
    }
    fputs(") -> ", out);
    if (fn->nresults != 1)
        fputc('(', out);
    for (int i = 0; i < fn->nresults; i++) {
        if (i)
            fputs(", ", out);
        print_type(p, &fn->results[i].type, &fn->results[i].sh);
    }
    if (fn->nresults != 1)
        fputc(')', out);
    if (fn->on)
        fprintf(out, " on %s", sym_name(p->m->syms, p->m->submesh[fn->on - 1].sym));
    fputs(" {", out);
    if (fn->spec_of)
        fprintf(out, "  # %s specialized to its call sites' shardings", sym_name(p->m->syms, p->m->fns[fn->spec_of - 1].sym));
    fputc('\n', out);
}


/* ---- the reshard report (docs/partitioning.md) ---- */

static void add_saturated(int64_t *total, int64_t bytes) {
    if (__builtin_add_overflow(*total, bytes, total))
        *total = INT64_MAX;
}

/* The bytes per device each move of a partitioned function sends: the sum
 * of its collectives' (Inst.move).  Only the partitioned stage reports
 * them: scheduling re-emits the instructions without their moves. */
static int64_t *move_bytes(Printer *p) {
    const Fn *fn = p->fn;
    if (!fn->partitioned || fn->scheduled)
        return NULL;
    int64_t *sent = arena_alloc(&p->arena, sizeof(int64_t) * (size_t)(fn->nmoves + 1));
    for (int v = 0; v < fn->ninsts; v++)
        if (fn->insts[v].move)
            add_saturated(&sent[fn->insts[v].move - 1], collective_bytes(p->m, fn, &fn->insts[v]));
    return sent;
}

/* The move collective v belongs to, when together they send more than it needs. */
static const Move *non_minimal(const Printer *p, int v, const int64_t *sent) {
    int mv = sent ? p->fn->insts[v].move : 0;
    return mv && sent[mv - 1] > p->fn->moves[mv - 1].min_bytes ? &p->fn->moves[mv - 1] : NULL;
}

/* "  # non-minimal: resharding %x sends N bytes per device, minimum M". */
static void print_mark(Printer *p, int v, const int64_t *sent) {
    const Move *mv = non_minimal(p, v, sent);
    if (!mv)
        return;
    fputs("  # non-minimal: ", p->out);
    if (mv->op == MOVE_RESHARD)
        fprintf(p->out, "resharding %%%s", p->names[mv->of]);
    else if (mv->op == MOVE_TRANSFER)
        fprintf(p->out, "moving %%%s to another submesh", p->names[mv->of]);
    else
        fprintf(p->out, "the %s of %%%s", op_info[mv->op].name, p->names[mv->of]);
    fprintf(p->out, " sends %lld bytes per device, minimum %lld", (long long)sent[p->fn->insts[v].move - 1],
            (long long)mv->min_bytes);
}

/* The collectives fn f runs, its calls' included (each fn counted once:
 * a chain of calls costs its length).  Calls of fns placed on a submesh
 * are left out: their devices are not all of the caller's. */
static void count_with_calls(Printer *p, int f) {
    if (p->call_bytes[f] >= 0)
        return;
    const Fn *fn = &p->m->fns[f];
    int64_t bytes = 0, count = 0;
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (op_is_collective(in->op)) {
            add_saturated(&bytes, collective_bytes(p->m, fn, in));
            count++;
        } else if (op_calls(in->op) && fn_is_local(&p->m->fns[ir_attr(fn, in, 0)]) &&
                   p->m->fns[ir_attr(fn, in, 0)].on == fn->on) {
            int c = (int)ir_attr(fn, in, 0);
            count_with_calls(p, c);
            /* a loop's body runs trip-count times */
            int64_t k = in->op == OP_LOOP ? loop_trips_known(fn, in) : 1, b, q;
            p->call_run_time[f] |= p->call_run_time[c] || (in->op == OP_LOOP && loop_trips(fn, in) < 0 && p->call_count[c]);
            add_saturated(&bytes, __builtin_mul_overflow(p->call_bytes[c], k, &b) ? INT64_MAX : b);
            add_saturated(&count, __builtin_mul_overflow(p->call_count[c], k, &q) ? INT64_MAX : q);
        }
    }
    p->call_bytes[f] = bytes;
    p->call_count[f] = count;
}

/* What a partitioned function communicates: each collective with its
 * groups and the bytes one device sends (ring model), then the total, and
 * how many collectives send more than their move needs, if any. */
static void print_summary(Printer *p, const int64_t *sent) {
    const Fn *fn = p->fn;
    FILE *out = p->out;
    int64_t total = 0;
    int n = 0;
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (!op_is_collective(in->op))
            continue;
        int64_t bytes = collective_bytes(p->m, fn, in);
        int naxes;
        const int64_t *axes = inst_axes(fn, in, &naxes);
        if (!n++)
            fprintf(out, "# collectives of %s, bytes sent per device:\n", sym_name(p->m->syms, fn->sym));
        fprintf(out, "#   %%%s: %s ", p->names[v], op_info[in->op].name);
        if (in->op == OP_COLLECTIVE_PERMUTE)
            print_axis_names(p, axes, naxes);
        else
            print_axes_attr(p, axes, naxes);
        fprintf(out, ": %lld\n", (long long)bytes);
        add_saturated(&total, bytes);
    }
    fprintf(out, "# total bytes sent per device by %s: %lld\n", sym_name(p->m->syms, fn->sym), (long long)total);
    int marked = 0;
    int64_t moved = 0, least = 0;
    uint8_t *counted = sent ? arena_alloc(&p->arena, (size_t)fn->nmoves + 1) : NULL;
    for (int v = 0; v < fn->ninsts; v++) {
        const Move *mv = non_minimal(p, v, sent);
        if (!mv)
            continue;
        marked++;
        if (!counted[fn->insts[v].move - 1]++) {     /* each move once */
            add_saturated(&moved, sent[fn->insts[v].move - 1]);
            add_saturated(&least, mv->min_bytes);
        }
    }
    if (marked)
        fprintf(out, "# non-minimal collectives of %s: %d, sending %lld bytes per device where %lld suffice\n",
                sym_name(p->m->syms, fn->sym), marked, (long long)moved, (long long)least);
    int f = (int)(fn - p->m->fns);
    count_with_calls(p, f);
    if (p->call_count[f] > n)        /* its calls communicate too */
        fprintf(out, "# with the fns it calls: %lld collective%s, %lld bytes sent per device%s\n",
                (long long)p->call_count[f], p->call_count[f] == 1 ? "" : "s", (long long)p->call_bytes[f],
                p->call_run_time[f] ? " (a loop of run-time trip count counted as one iteration)" : "");
}

/* With one fn asked for, the specializations it calls are shown too. */
static void mark_shown(const Module *m, int f, uint8_t *shown) {
    shown[f] = 1;
    const Fn *fn = &m->fns[f];
    for (int v = 0; v < fn->ninsts; v++) {
        int c = op_calls(fn->insts[v].op) ? (int)ir_attr(fn, &fn->insts[v], 0) : -1;
        if (c >= 0 && (m->fns[c].spec_of || m->fns[c].loop_of) && !shown[c])
            mark_shown(m, c, shown);
    }
}

/* Fn.peak_nested, and the chain of calls that reaches it: each step the
 * callee whose own nested peak is largest (the first of equals). */
static void print_nested_peak(const Module *m, const Fn *fn, FILE *out) {
    fprintf(out, "# peak bytes per device of %s with the fns it calls: %lld (%s", sym_name(m->syms, fn->sym),
            (long long)fn->peak_nested, sym_name(m->syms, fn->sym));
    for (const Fn *f = fn; f->peak_nested > f->peak_bytes;) {
        const Fn *next = NULL;
        for (int v = 0; v < f->ninsts; v++)
            if (op_calls(f->insts[v].op)) {
                const Fn *c = &m->fns[ir_attr(f, &f->insts[v], 0)];
                next = !next || c->peak_nested > next->peak_nested ? c : next;
            }
        f = next;
        fprintf(out, " -> %s", sym_name(m->syms, f->sym));
    }
    fputs(")\n", out);
}

void ir_dump(const Module *m, FILE *out, int only_fn_sym, int show_why) {
    ir_dump_hooked(m, out, only_fn_sym, show_why, NULL);
}

void ir_dump_hooked(const Module *m, FILE *out, int only_fn_sym, int show_why, const DumpHooks *hooks) {
    fputs("mesh ", out);
    for (int a = 0; a < m->naxes; a++)
        fprintf(out, "%s%s=%lld", a ? ", " : "", sym_name(m->syms, m->axis_sym[a]), (long long)m->axis_size[a]);
    if (m->naxes == 0)
        fputs("(one device)", out);
    fputc('\n', out);
    for (int i = 0; i < m->nsubmeshes; i++) {
        const Submesh *sm = &m->submesh[i];
        fprintf(out, "%s%s=%s[%lld]", i ? ", " : "submesh ", sym_name(m->syms, sm->sym),
                sym_name(m->syms, m->axis_sym[sm->axis]), (long long)sm->coord);
    }
    if (m->nsubmeshes)
        fputc('\n', out);
    Printer p = {.m = m, .out = out, .show_why = show_why, .hooks = hooks};
    p.uses = arena_alloc(&p.arena, sizeof(int) * (size_t)m->syms->n);
    uint8_t *shown = arena_alloc(&p.arena, (size_t)m->nfns + 1);
    p.call_bytes = arena_alloc(&p.arena, sizeof(int64_t) * (size_t)(m->nfns + 1));
    p.call_count = arena_alloc(&p.arena, sizeof(int64_t) * (size_t)(m->nfns + 1));
    p.call_run_time = arena_alloc(&p.arena, (size_t)m->nfns + 1);
    for (int f = 0; f < m->nfns; f++)
        p.call_bytes[f] = -1;
    for (int f = 0; f < m->nfns; f++)
        if (only_fn_sym < 0 || (m->fns[f].sym == only_fn_sym && !m->fns[f].spec_of))
            mark_shown(m, f, shown);
    for (int f = 0; f < m->nfns; f++) {
        p.fn = &m->fns[f];
        if (!shown[f])
            continue;
        name_values(&p, arena_alloc(&p.arena, sizeof(char *) * (size_t)(p.fn->ninsts + 1)));
        int64_t *sent = move_bytes(&p);
        fputc('\n', out);
        print_signature(&p);
        for (int v = 0; v < p.fn->ninsts; v++) {
            fputs("  ", out);
            print_inst(&p, v);
            print_mark(&p, v, sent);
            if (hooks && hooks->inst)
                hooks->inst(hooks->ctx, out, m, f, v);
            fputc('\n', out);
        }
        fputs("}\n", out);
        if (p.fn->partitioned || (p.fn->spmd && p.fn->scheduled))   /* an spmd fn's own collectives too */
            print_summary(&p, sent);
        if (p.fn->scheduled)
            fprintf(out, "# peak bytes per device of %s: %lld in %d buffers (parameters not included)\n",
                    sym_name(m->syms, p.fn->sym), (long long)p.fn->peak_bytes, p.fn->nbuffers);
        if (p.fn->scheduled && p.fn->peak_nested > p.fn->peak_bytes)
            print_nested_peak(m, p.fn, out);
        if (hooks && hooks->fn)
            hooks->fn(hooks->ctx, out, m, f);
        forget_names(&p);
    }
    arena_free(&p.arena);
}
