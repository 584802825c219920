/* One kernel (lib/shardc_lib.h) or collective (runtime/shardc_rt.h) call per
 * IR instruction, with the instruction's IR as a comment above it:
 * everything but the elementwise instructions that fuse.c puts into loops.
 * Each call is a TRY_TRACED under the event name trace.c gives it (try_open),
 * a collective start is timed by the clock reads around it: SHARDC_TRACE. */
#include "internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>


static void emit_shape(FILE *o, const Shape *s) {
    fprintf(o, "(sc_shape){%d, {", s->rank);
    for (int d = 0; d < s->rank; d++)
        fprintf(o, "%s%lld", d ? ", " : "", (long long)s->dims[d]);
    fprintf(o, "%s}}", s->rank ? "" : "0");
}

static void emit_ints(FILE *o, const char *type, const int64_t *x, int n) {
    fprintf(o, "(%s[]){", type);
    for (int i = 0; i < n; i++)
        fprintf(o, "%s%lld", i ? ", " : "", (long long)x[i]);
    fprintf(o, "%s}", n ? "" : "0");
}

static void emit_axes(FILE *o, const int64_t *axes, int n) {
    fprintf(o, "(sc_axes){%d, {", n);
    for (int i = 0; i < n; i++)
        fprintf(o, "%s%lld", i ? ", " : "", (long long)axes[i]);
    fputs("}}", o);
}

static int64_t bytes_of(const Shape *s) { return shape_elems(s) * dtype_size(s->dtype); }

#define A(i) g->name[ir_arg(fn, in, i)]
#define T(v) (&fn->insts[v].type)

/* The kernel library's names of the elementwise ops: SK_GELU, ... */
static const char *const sk_op_name[OP_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) [OP_##ID] = "SK_" #ID,
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) [OP_##ID] = "SK_" #ID,
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};

/* Device to device: `TRY(sk_dev_copy(ctx, DST, SRC, BYTES));`. */
static void emit_copy(Gen *g, const char *indent, const char *dst, const char *src, int64_t bytes) {
    try_plain(g, indent);
    fprintf(g->out, "sk_dev_copy(ctx, %s, %s, %lld));\n", dst, src, (long long)bytes);
}

/* Device scalar operand i of `in`, read into host variable NAME of its
 * type: a loop's bounds, a dynamic slice's offsets. */
static void emit_read(Gen *g, const char *indent, const Inst *in, int i, const char *name) {
    const Fn *fn = g->fn;
    fprintf(g->out, "%s%s %s;\n", indent, ctype_of[T(ir_arg(fn, in, i))->dtype], name);
    try_plain(g, indent);
    fprintf(g->out, "sk_dev_read(ctx, &%s, %s, sizeof %s));\n", name, A(i), name);
}

/* The offsets of dynamic slice `in` (operands first..), read from the
 * device into NAME_o0, NAME_o1, ... */
static void emit_read_offsets(Gen *g, const Inst *in, int first, const char *r) {
    char name[160];
    for (int i = first; i < in->nargs; i++) {
        snprintf(name, sizeof name, "%so%d", r, i - first);
        emit_read(g, "    ", in, i, name);
    }
}

static void emit_constant(Gen *g, const Inst *in, const char *r) {
    FILE *o = g->out;
    double x = in->value;
    char num[64];
    if (x != x)
        snprintf(num, sizeof num, "NAN");
    else if (x == 1.0 / 0.0 || x == -1.0 / 0.0)
        snprintf(num, sizeof num, "%sINFINITY", x < 0 ? "-" : "");
    else
        snprintf(num, sizeof num, "%.17g", x);
    const char *ct = ctype_of[in->type.dtype];
    try_plain(g, "    ");
    fprintf(o, "sk_dev_write(ctx, %s, &(%s){", r, ct);
    switch (in->type.dtype) {
    case DT_BF16: fprintf(o, "sc_bf16_from_float((float)%s)", num); break;
    case DT_F16: fprintf(o, "sc_f16_from_float((float)%s)", num); break;
    case DT_I32: fprintf(o, "(int32_t)%lld", (long long)x); break;
    case DT_BOOL: fprintf(o, "%d", x != 0); break;
    case DT_U32: fprintf(o, "%lluu", (unsigned long long)x); break;
    case DT_I64:   /* +-2^63: INT64_MAX and INT64_MIN (a max or min reduction's padding) */
        if (x >= 0x1p63 || x <= -0x1p63)
            fputs(x < 0 ? "INT64_MIN" : "INT64_MAX", o);
        else
            fprintf(o, "INT64_C(%lld)", (long long)x);
        break;
    case DT_U8: fprintf(o, "%u", (unsigned)x); break;
    default: fprintf(o, "(%s)%s", ct, num); break;
    }
    fprintf(o, "}, sizeof(%s)));\n", ct);
}

/* Operand i of dot `in`, then its strides when it is a strided view
 * (schedule.c): those of the array it lies in, row-major. */
static void emit_dot_operand(Gen *g, const Inst *in, int i, int strided) {
    const Fn *fn = g->fn;
    const Inst *x = &fn->insts[ir_arg(fn, in, i)];
    emit_shape(g->out, &x->type);
    fprintf(g->out, ", %s", A(i));
    if (!strided)
        return;
    if (!(x->flags & INST_STRIDED)) {
        fputs(", NULL", g->out);
        return;
    }
    const Shape *base = T(ir_arg(fn, x, 0));
    int64_t st[MAX_RANK], m = 1;
    for (int d = base->rank - 1; d >= 0; d--) {
        st[d] = m;
        m *= base->dims[d];
    }
    fputs(", (const int64_t[])", g->out);
    emit_list(g->out, st, base->rank);
}

/* The elements between the rows of value v's block of its concatenate
 * (codegen.c's find_runs), or 0: it is written as one run. */
static int64_t run_ld(const Gen *g, int v) { return g->run_of[v] >= 0 ? g->run_ld[v] : 0; }

/* Dot `in` into r, with an epilogue when bias (a value's C name) or act
 * (an SK_ op) is not NULL, it accumulates into r or it is wide (its f32
 * sums stored unrounded): sk_dot_epilogue; sk_dot_strided when an operand
 * is a strided view or r's rows lie apart (a column tile written in place). */
static void emit_dot_call(Gen *g, const Inst *in, const char *bias, const char *act, int accumulate, const char *r) {
    const Fn *fn = g->fn;
    const Shape *a = T(ir_arg(fn, in, 0)), *b = T(ir_arg(fn, in, 1));
    DotDims dd;
    dot_dims(fn, in, &dd);
    const int64_t *lbat = dd.lhs_batch, *rbat = dd.rhs_batch, *lcon = dd.lhs_contract, *rcon = dd.rhs_contract;
    int wide = dot_is_wide(fn, in), nb = dd.nbatch, nc = dd.ncontract, ep = bias || act || accumulate || wide;
    int64_t ldo = run_ld(g, (int)(in - fn->insts));
    int strided = (fn->insts[ir_arg(fn, in, 0)].flags | fn->insts[ir_arg(fn, in, 1)].flags) & INST_STRIDED || ldo;
    if ((a->rank - nb - nc) + (b->rank - nb - nc) + nb != in->type.rank)
        g->err = "a dot that sums a dim on one side only";
    FILE *o = g->out;
    /* The continuation lines line up with sk_dot's first argument. */
    int at = try_open(g) + fprintf(o, "sk_dot%s(", strided ? "_strided" : ep ? "_epilogue" : "");
    char indent[512];
    snprintf(indent, sizeof indent, "%*s", at < 500 ? at : 500, "");
    fprintf(o, "ctx, %s, ", sk_dtype_of[a->dtype]);
    emit_dot_operand(g, in, 0, strided);
    fputs(", ", o);
    emit_dot_operand(g, in, 1, strided);
    fprintf(o, ",\n%s&(sk_dot_dims){%d, %d, ", indent, nb, nc);
    emit_list(o, lbat, nb);
    fputs(", ", o);
    emit_list(o, rbat, nb);
    fputs(", ", o);
    emit_list(o, lcon, nc);
    fputs(", ", o);
    emit_list(o, rcon, nc);
    if (ep)
        fprintf(o, "},\n%s&(sk_epilogue){%s, %s, %d, %d}, %s", indent, bias ? bias : "NULL", act ? act : "SK_COPY",
                accumulate, wide, r);
    else
        fprintf(o, strided ? "}, NULL, %s" : "}, %s", r);
    if (strided)
        fprintf(o, ", %lld));\n", (long long)ldo);
    else
        fputs(", NULL));\n", o);
}

static void emit_dot(Gen *g, const Inst *in, const char *r) { emit_dot_call(g, in, NULL, NULL, 0, r); }

/* Dot v of the gather folded right before it (schedule.c). */
static void emit_gather_dot(Gen *g, int v, const char *r) {
    const Fn *fn = g->fn;
    const Inst *dot = &fn->insts[v];
    GatherDot gd;
    int side = ir_arg(fn, dot, 0) == v - 1 ? 0 : 1;
    if (!gather_dot_form(fn, dot, side, &gd)) {
        g->err = "a folded gather its dot cannot read";
        return;
    }
    const Inst *gather = &fn->insts[gd.gather];
    try_open(g);
    fprintf(g->out, "sk_gather_dot(ctx, %s, %s, %lld, %lld, %lld, %d, %s, %s, %lld, %lld, %s, %s));\n",
            sk_dtype_of[dot->type.dtype], g->name[ir_arg(fn, gather, 0)], (long long)gd.e, (long long)gd.k,
            (long long)gd.n, gd.trans, inst_gather_mode(fn, gather) == GATHER_FILL ? "SK_FILL" : "SK_CLAMP",
            g->name[ir_arg(fn, gather, 1)], (long long)gd.rows, (long long)gd.rep, g->name[ir_arg(fn, dot, 1 - side)],
            r);
}

static void emit_strides(FILE *o, const char *field, const int64_t *x, int n) {
    if (n == 0)                  /* no batch dims: the field stays zero */
        return;
    fprintf(o, ", .%s = ", field);
    emit_list(o, x, n);
}

/* The fields of sk_attention_args: q, k, v and the mask, and with `out`
 * (the forward's result; NULL in a gradient's call) the result's. */
static void emit_attention_args(Gen *g, const AttentionForm *af, const char *out) {
    FILE *o = g->out;
    char out_t[32] = "", out_row[48] = "";
    if (out) {
        snprintf(out_t, sizeof out_t, ", .out_t = %s", sk_dtype_of[af->out_dtype]);
        snprintf(out_row, sizeof out_row, " .out_row = %lld,", (long long)af->out_row);
    }
    fprintf(o, "\n        .nbatch = %d", af->nbatch);
    emit_strides(o, "batch", af->batch, af->nbatch);
    emit_strides(o, "q_batch", af->q_batch, af->nbatch);
    emit_strides(o, "k_batch", af->k_batch, af->nbatch);
    emit_strides(o, "v_batch", af->v_batch, af->nbatch);
    if (out)
        emit_strides(o, "out_batch", af->out_batch, af->nbatch);
    fprintf(o, ",\n        .S = %lld, .T = %lld, .K = %lld, .Kv = %lld, .t = %s%s,\n", (long long)af->S,
            (long long)af->T, (long long)af->K, (long long)af->Kv, sk_dtype_of[af->dtype], out_t);
    fprintf(o, "        .q = %s, .k = %s, .v = %s,", g->name[af->q], g->name[af->k], g->name[af->v]);
    fprintf(o, " .q_row = %lld, .k_row = %lld, .v_row = %lld,%s .scale = (float)%.17g,\n", (long long)af->q_row,
            (long long)af->k_row, (long long)af->v_row, out_row, af->scale);
    if (af->causal)
        fprintf(o, "        .causal = 0");
    else if (af->mask >= 0)
        fprintf(o, "        .mask = %s, .mask_row = %lld, .causal = -1", g->name[af->mask], (long long)af->mask_row);
    else
        fprintf(o, "        .causal = -1");
    if (out)
        fprintf(o, ", .out = %s", out);
}

/* Dot v of an attention folded right before it (schedule.c): one
 * sk_attention call, no [S, T] values. */
static void emit_attention(Gen *g, int v, const char *r) {
    AttentionForm af;
    if (!attention_form(g->fn, v, &af)) {
        g->err = "a folded attention its dot cannot compute";
        return;
    }
    try_open(g);
    fprintf(g->out, "sk_attention(ctx, &(sk_attention_args){");
    emit_attention_args(g, &af, r);
    fprintf(g->out, "}));%s\n", af.causal ? "   /* keys after the query masked by position */" : "");
}

/* The attention gradient whose three results v and the two INST_WRITTEN
 * values before it are (schedule.c): one sk_attention_grad call. */
static void emit_attention_grad(Gen *g, int v) {
    const Fn *fn = g->fn;
    AttentionGradForm gf;
    if (!attention_grad_at(fn, v, &gf)) {
        g->err = "a folded attention gradient its call cannot compute";
        return;
    }
    FILE *o = g->out;
    const AttentionForm *af = &gf.af;
    try_open(g);
    fprintf(o, "sk_attention_grad(ctx, &(sk_attention_grad_args){\n        .fwd = {");
    emit_attention_args(g, af, NULL);
    fprintf(o, "},%s\n        .dout = %s, .dout_t = %s, .grad_t = %s", af->causal ? "   /* masked by position */" : "",
            g->name[gf.dout], sk_dtype_of[fn->insts[gf.dout].type.dtype], sk_dtype_of[gf.grad_dtype]);
    emit_strides(o, "dout_batch", gf.dout_batch, af->nbatch);
    emit_strides(o, "dq_batch", gf.dq_batch, af->nbatch);
    emit_strides(o, "dk_batch", gf.dk_batch, af->nbatch);
    emit_strides(o, "dv_batch", gf.dv_batch, af->nbatch);
    fprintf(o, ",\n        .dout_row = %lld, .dq_row = %lld, .dk_row = %lld, .dv_row = %lld,\n", (long long)gf.dout_row,
            (long long)gf.dq_row, (long long)gf.dk_row, (long long)gf.dv_row);
    fprintf(o, "        .dq = %s, .dk = %s, .dv = %s}));\n", g->name[gf.dq], g->name[gf.dk], g->name[gf.dv]);
}

/* Instruction v, the last of a dot's epilogue (schedule.c): the folded
 * instructions before it are the dot, the bias broadcast and add, and v
 * itself the add or the activation; or v is an add the dot accumulates
 * into, whose buffer (r) holds the other operand. */
static void emit_epilogue(Gen *g, int v, const char *r) {
    const Fn *fn = g->fn;
    if (ends_attention_grad(fn, v)) {
        emit_attention_grad(g, v);
        return;
    }
    if (ends_attention(fn, v)) {
        emit_attention(g, v, r);
        return;
    }
    if (fn->insts[v].op == OP_DOT) {
        emit_gather_dot(g, v, r);
        return;
    }
    int dot = -1, bias = -1;
    for (int u = v - 1; u >= 0 && fn->insts[u].flags & INST_FOLDED; u--)
        if (fn->insts[u].op == OP_DOT)
            dot = u;
        else if (fn->insts[u].op == OP_BROADCAST)
            bias = ir_arg(fn, &fn->insts[u], 0);
    if (dot < 0) {
        g->err = "folded instructions without their dot";
        return;
    }
    const char *act = fn->insts[v].op == OP_ADD ? NULL : sk_op_name[fn->insts[v].op];
    emit_dot_call(g, &fn->insts[dot], bias >= 0 ? g->name[bias] : NULL, act, accumulated_operand(fn, v) >= 0, r);
}

static const char *sc_dtype(int dt) {
    static const char *const names[] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [DT_##ID] = "SC_" #ID,
#include "../ir/dtypes.def"
#undef DTYPE
    };
    return names[dt];
}

/* A collective: started (INST_ASYNC, handle NAMEh) or blocking.  The
 * runtime's function is named after the op's kernel: sc_all_reduce,
 * sc_start_all_reduce, ...  Its arguments begin with the axes and dtype;
 * each collective's emitter writes the rest between head and tail. */
static const char *const kernel_name[OP_COUNT] = {
#define OP(id, name, nargs, cls, kernel, flags, dtypes, prio, attrs) [id] = #kernel,
#include "../ir/ops.def"
#undef OP
};

static void collective_head(Gen *g, const Inst *in, const char *r) {
    FILE *o = g->out;
    int naxes;
    const int64_t *axes = inst_axes(g->fn, in, &naxes);
    const char *t = sc_dtype(g->fn->insts[ir_arg(g->fn, in, 0)].type.dtype);
    if (in->flags & INST_ASYNC) {    /* a guarded one's handle is declared before its guard */
        fprintf(o, "    int64_t %st = sk_trace_begin();\n", r);
        fputs("    sk_launch_begin(ctx);   /* ended by its done: peers use its buffers until then */\n", o);
        fprintf(o, in->place ? "    %sh = sc_start_" : "    sc_handle *%sh = sc_start_", r);
    } else {
        try_open(g);
        fputs("sc_", o);
    }
    fprintf(o, "%s%s(dev, ", kernel_name[in->op], in->op == OP_ALL_REDUCE && run_ld(g, g->at) ? "_strided" : "");
    emit_axes(o, axes, naxes);
    fprintf(o, ", %s, ", t);
}

static void collective_tail(Gen *g, const Inst *in, const char *r) {
    if (in->flags & INST_ASYNC) {
        fprintf(g->out, ");\n    sk_trace_end(dev, \"%s\", %lld, %st);\n    if (!%sh)\n        goto fail;\n",
                trace_name(g, g->at), (long long)trace_bytes(g, g->at), r, r);
        g->jumps = 1;
    } else
        fputs("));\n", g->out);
}

/* An all-reduce into a strided block of its concatenate reduces its
 * operand's rows there in place (schedule.c). */
static void emit_all_reduce(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    const Shape *s = T(ir_arg(fn, in, 0));
    int64_t ld = run_ld(g, g->at), cols = 1;
    collective_head(g, in, r);
    fprintf(g->out, "%s, ", reducer_info[inst_reducer(fn, in)].runtime);
    for (int d = ld ? inst_dim(fn, &fn->insts[g->run_of[g->at]]) : s->rank; d < s->rank; d++)
        cols *= s->dims[d];
    if (ld)
        fprintf(g->out, "%s, %lld, %lld, %lld", r, (long long)(shape_elems(s) / cols), (long long)cols, (long long)ld);
    else
        fprintf(g->out, "%s, %s, %lld", A(0), r, (long long)shape_elems(s));
    collective_tail(g, in, r);
}

static void emit_all_gather(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    collective_head(g, in, r);
    emit_shape(g->out, T(ir_arg(fn, in, 0)));
    fprintf(g->out, ", %d, %s, %s", inst_dim(fn, in), A(0), r);
    collective_tail(g, in, r);
}

static void emit_reduce_scatter(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    collective_head(g, in, r);
    fprintf(g->out, "%s, ", reducer_info[inst_reducer(fn, in)].runtime);
    emit_shape(g->out, T(ir_arg(fn, in, 0)));
    fprintf(g->out, ", %d, %s, %s", inst_dim(fn, in), A(0), r);
    collective_tail(g, in, r);
}

static void emit_all_to_all(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    collective_head(g, in, r);
    emit_shape(g->out, T(ir_arg(fn, in, 0)));
    fprintf(g->out, ", %d, %d, %s, %s", inst_dim(fn, in), inst_concat_dim(fn, in), A(0), r);
    collective_tail(g, in, r);
}

static void emit_collective_permute(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    int npairs;
    const int64_t *pairs = inst_pairs(fn, in, &npairs);
    collective_head(g, in, r);
    emit_ints(g->out, "const int", pairs, 2 * npairs);
    fprintf(g->out, ", %d, %s, %s, %lld", npairs, A(0), r, (long long)shape_elems(T(ir_arg(fn, in, 0))));
    collective_tail(g, in, r);
}

static void emit_body(Gen *g, int v);

/* A view (schedule.c) points into its operand: a reshape at its start, a
 * contiguous slice at its first element. */
static void emit_view(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    const Shape *s = T(ir_arg(fn, in, 0));
    int64_t offset = 0, stride = 1;
    for (int d = s->rank - 1; in->op == OP_SLICE && d >= 0; d--) {
        offset += ir_attr(fn, in, d) * stride;
        stride *= s->dims[d];
    }
    for (int d = 0; in->op == OP_DYNAMIC_SLICE && d < s->rank; d++)   /* the offsets that move it */
        if (s->dims[d] > in->type.dims[d]) {
            char name[160];
            snprintf(name, sizeof name, "%so%d", r, d);
            emit_read(g, "    ", in, 1 + d, name);
        }
    fprintf(g->out, "    const %s *%s = %s", ctype_of[in->type.dtype], r, A(0));
    if (in->op == OP_GET_TUPLE_ELEMENT)
        fprintf(g->out, "_%lld", (long long)ir_attr(fn, in, 0));
    for (int d = s->rank - 1; in->op == OP_DYNAMIC_SLICE && d >= 0; d--) {   /* offsets clamped, as the kernel's */
        int64_t hi = s->dims[d] - in->type.dims[d];
        if (hi > 0)
            fprintf(g->out, " + (int64_t)(%so%d < 0 ? 0 : %so%d > %lld ? %lld : %so%d) * %lld", r, d, r, d,
                    (long long)hi, (long long)hi, r, d, (long long)stride);
        stride *= s->dims[d];
    }
    fprintf(g->out, offset ? " + %lld;   /* a view: no copy */\n" : ";   /* a view: no copy */\n", (long long)offset);
    if (g->result[g->at] || !g->fu.uses[g->at])   /* its callee wrote it in place, or nothing reads it */
        fprintf(g->out, "    (void)%s;\n", r);
}

void emit_inst(Gen *g, int v) {
    const Fn *fn = g->fn;
    const Inst *in = &fn->insts[v];
    FILE *o = g->out;
    const char *r = g->name[v];
    int dt = in->type.dtype;
    g->at = v;
    emit_ir_comment(g, v);
    if (in->flags & INST_FOLDED)         /* computed by the call of a later instruction */
        return;
    if (in->flags & INST_VIEW) {
        emit_view(g, in, r);
        return;
    }
    if (in->op == OP_PARAMETER || in->op == OP_RETURN || dt == DT_TUPLE)
        ;
    else if (in->op == OP_DONE)
        fprintf(o, "    %s *%s = %s;\n", ctype_of[dt], r, A(0));
    else
        emit_storage(g, v);
    if (in->flags & INST_WRITTEN)        /* written by the call of a later instruction */
        return;
    if (ends_dot_fold(fn, v)) {          /* never placed (schedule.c) */
        emit_epilogue(g, v, r);
        return;
    }
    if (!in->place) {
        emit_body(g, v);
        return;
    }
    /* Placed on a submesh: only its devices run it.  The body is written
     * aside and indented into the guard (a memory stream: its buffer is
     * libc's, freed with free()). */
    const Submesh *sm = &g->m->submesh[in->place - 1];
    if (op_is_collective(in->op) && in->flags & INST_ASYNC)
        fprintf(o, "    sc_handle *%sh = NULL;\n", r);
    char *text = NULL;
    size_t len = 0;
    g->out = open_memstream(&text, &len);
    emit_body(g, v);
    fclose(g->out);
    g->out = o;
    fprintf(o, "    if (sc_coord(dev, %d) == %lld) {\n", sm->axis, (long long)sm->coord);
    for (char *line = text, *end; line && *line; line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        fprintf(o, "    %.*s\n", (int)(end ? end - line : (ptrdiff_t)strlen(line)), line);
    }
    fputs("    }\n", o);
    free(text);
}

/* ---- one emitter per kernel of ops.def: emit_KERNEL(g, in, r) writes the
 * code computing `in` into `r` ---- */

static long long elems_of(const Inst *in) {
    return in->type.dtype == DT_TUPLE ? 0 : (long long)shape_elems(&in->type);
}

static const char *sk_dtype_at(Gen *g, const Inst *in, int i) {
    return sk_dtype_of[g->fn->insts[ir_arg(g->fn, in, i)].type.dtype];
}

/* Parameters are the function's arguments. */
static void emit_parameter(Gen *g, const Inst *in, const char *r) { (void)g, (void)in, (void)r; }

static void emit_unary(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_unary(ctx, %s, %s, %lld, %s, %s));\n", sk_op_name[in->op], sk_dtype_of[in->type.dtype],
            elems_of(in), A(0), r);
}

static void emit_binary(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_binary(ctx, %s, %s, %lld, %s, %s, %s));\n", sk_op_name[in->op],
            sk_dtype_of[in->type.dtype], elems_of(in), A(0), A(1), r);
}

static void emit_iota(Gen *g, const Inst *in, const char *r) {
    try_open(g);
    fprintf(g->out, "sk_iota(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(g->out, &in->type);
    fprintf(g->out, ", %d, %s));\n", inst_dim(g->fn, in), r);
}

/* The counters are i32 or u32: their 32 bits either way. */
static void emit_random(Gen *g, const Inst *in, const char *r) {
    static const char *const kind[] = {"SK_RNG_WORD0", "SK_RNG_WORD1", "SK_RNG_BITS", "SK_RNG_UNIFORM",
                                       "SK_RNG_NORMAL", "SK_RNG_TRUNCATED_NORMAL", "SK_RNG_RANDINT"};
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_random(ctx, %s, %s, (const uint32_t *)%s, %lld, (const uint32_t *)%s, %s, %s, %s));\n",
            kind[ir_attr(fn, in, 0)], sk_dtype_of[in->type.dtype], A(0), elems_of(in), A(1),
            in->nargs == 4 ? A(2) : "NULL", in->nargs == 4 ? A(3) : "NULL", r);
}

/* The device's index in the groups of the axes, major first. */
static void emit_axis_index(Gen *g, const Inst *in, const char *r) {
    FILE *o = g->out;
    int n;
    const int64_t *axes = inst_axes(g->fn, in, &n);
    try_plain(g, "    ");
    fprintf(o, "sk_dev_write(ctx, %s, &(%s){", r, ctype_of[in->type.dtype]);
    for (int i = 1; i < n; i++)
        fputc('(', o);
    fprintf(o, "sc_coord(dev, %lld)", (long long)axes[0]);
    for (int i = 1; i < n; i++)
        fprintf(o, " * %lld + sc_coord(dev, %lld))", (long long)g->m->axis_size[axes[i]], (long long)axes[i]);
    fprintf(o, "}, sizeof(%s)));\n", ctype_of[in->type.dtype]);
}

static void emit_convert(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_convert(ctx, %s, %s, %lld, %s, %s));\n", sk_dtype_at(g, in, 0), sk_dtype_of[in->type.dtype],
            elems_of(in), A(0), r);
}

static void emit_compare(Gen *g, const Inst *in, const char *r) {
    static const char *const dir[] = {"SK_LT", "SK_LE", "SK_GT", "SK_GE", "SK_EQ", "SK_NE"};
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_compare(ctx, %s, %s, %lld, %s, %s, %s));\n", dir[ir_attr(fn, in, 0)], sk_dtype_at(g, in, 0),
            elems_of(in), A(0), A(1), r);
}

static void emit_select(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_select(ctx, %s, %lld, %s, %s, %s, %s));\n", sk_dtype_of[in->type.dtype], elems_of(in), A(0),
            A(1), A(2), r);
}

static void emit_broadcast(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    try_open(g);
    fprintf(o, "sk_broadcast(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, T(ir_arg(fn, in, 0)));
    fprintf(o, ", %s, ", A(0));
    emit_shape(o, &in->type);
    fputs(", ", o);
    emit_ints(o, "const int", ir_attrs(fn, in), in->nattrs);
    fprintf(o, ", %s));\n", r);
}

static void emit_transpose(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    try_open(g);
    fprintf(o, "sk_transpose(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, T(ir_arg(fn, in, 0)));
    fprintf(o, ", %s, ", A(0));
    emit_ints(o, "const int", ir_attrs(fn, in), in->nattrs);
    fprintf(o, ", %s));\n", r);
}

static void emit_reshape(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    if (elems_of(in))
        emit_copy(g, "    ", r, A(0), bytes_of(&in->type));
}

static void emit_tuple_element(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    char element[200];
    snprintf(element, sizeof element, "%s_%lld", A(0), (long long)ir_attr(fn, in, 0));
    if (elems_of(in))
        emit_copy(g, "    ", r, element, bytes_of(&in->type));
}

static void emit_reduce(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    try_open(g);
    fprintf(o, "sk_reduce(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, T(ir_arg(fn, in, 0)));
    fprintf(o, ", %s, %d, ", A(0), in->nattrs - 1);
    emit_ints(o, "const int", ir_attrs(fn, in) + 1, in->nattrs - 1);
    fprintf(o, ", %s, %s));\n", reducer_info[inst_reducer(fn, in)].runtime, r);
}

static void emit_slice(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    const Shape *s = T(ir_arg(fn, in, 0));
    try_open(g);
    fprintf(o, "sk_slice(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, s);
    fprintf(o, ", %s, ", A(0));
    emit_ints(o, "const int64_t", ir_attrs(fn, in), s->rank);
    fputs(", ", o);
    emit_ints(o, "const int64_t", ir_attrs(fn, in) + s->rank, s->rank);
    fprintf(o, ", %s));\n", r);
}

/* Operands first.. (a dynamic slice's offsets), as read by
 * emit_read_offsets: "(const int32_t[]){r_o0, r_o1}". */
static void emit_offsets(Gen *g, const Inst *in, int first, const char *r) {
    fputs("(const int32_t[]){", g->out);
    for (int i = first; i < in->nargs; i++)
        fprintf(g->out, "%s%so%d", i > first ? ", " : "", r, i - first);
    fputs(in->nargs > first ? "}" : "0}", g->out);
}

static void emit_dynamic_slice(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    emit_read_offsets(g, in, 1, r);
    try_open(g);
    fprintf(o, "sk_dynamic_slice(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, T(ir_arg(fn, in, 0)));
    fprintf(o, ", %s, ", A(0));
    emit_offsets(g, in, 1, r);
    fputs(", ", o);
    emit_ints(o, "const int64_t", in->type.dims, in->type.rank);
    fprintf(o, ", %s));\n", r);
}

/* Written over the operand's own memory when it is the same array (a
 * carried stack the loop passes as parameter and result: codegen.c): then
 * only the update moves. */
static void emit_dynamic_update_slice(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    emit_read_offsets(g, in, 2, r);
    try_open(g);
    fprintf(o, "sk_dynamic_update_slice(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, T(ir_arg(fn, in, 0)));
    fprintf(o, ", %s, ", A(0));
    emit_shape(o, T(ir_arg(fn, in, 1)));
    fprintf(o, ", %s, ", A(1));
    emit_offsets(g, in, 2, r);
    fprintf(o, ", %s));\n", r);
}

static void emit_concat(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    if (in->flags & INST_ASSEMBLED) {    /* its operands are written in place: read nothing else */
        for (int i = 0; i < in->nargs; i++)
            fprintf(o, "%s(void)%s", i ? ", " : "    ", A(i));
        fprintf(o, ", (void)%s;   /* written in place */\n", r);
        return;
    }
    try_open(g);
    fprintf(o, "sk_concat(ctx, %s, %d, (const sc_shape[]){", sk_dtype_of[in->type.dtype], in->nargs);
    for (int i = 0; i < in->nargs; i++) {
        fputs(i ? ", " : "", o);
        emit_shape(o, T(ir_arg(fn, in, i)));
    }
    fputs("}, (const void *const[]){", o);
    for (int i = 0; i < in->nargs; i++)
        fprintf(o, "%s%s", i ? ", " : "", A(i));
    fprintf(o, "}, %d, %s));\n", inst_dim(fn, in), r);
}

static void emit_roll(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_roll(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(g->out, T(ir_arg(fn, in, 0)));
    fprintf(g->out, ", %s, %lld, %d, %s));\n", A(0), (long long)ir_attr(fn, in, 0), inst_dim(fn, in), r);
}

static void emit_cumsum(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_cumsum(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(g->out, T(ir_arg(fn, in, 0)));
    fprintf(g->out, ", %s, %d, %s));\n", A(0), inst_dim(fn, in), r);
}

static void emit_gather(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    try_open(g);
    fprintf(o, "sk_gather(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, T(ir_arg(fn, in, 0)));
    fprintf(o, ", %s, %d, %s, ", A(0), inst_dim(fn, in),
            inst_gather_mode(fn, in) == GATHER_FILL ? "SK_FILL" : "SK_CLAMP");
    emit_shape(o, T(ir_arg(fn, in, 1)));
    int nb;
    const int64_t *pair = inst_gather_batch(fn, in, &nb);
    fprintf(o, ", %s, %d, ", A(1), nb);
    if (nb)
        emit_ints(o, "const int", pair, 2 * nb);
    else
        fputs("NULL", o);
    fprintf(o, ", %s));\n", r);
}

static void emit_scatter(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    int n = in->nargs - 2;
    try_open(g);
    fprintf(o, "sk_scatter_add(ctx, %s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, T(ir_arg(fn, in, 0)));
    fprintf(o, ", %s, %d, ", fn->insts[ir_arg(fn, in, 0)].flags & INST_FOLDED ? "NULL" : A(0), n);   /* zeros */
    emit_ints(o, "const int", ir_attrs(fn, in), n);
    fputs(", ", o);
    emit_shape(o, T(ir_arg(fn, in, 1)));
    fputs(", (const int32_t *const[]){", o);
    for (int i = 1; i <= n; i++)
        fprintf(o, "%s%s", i > 1 ? ", " : "", A(i));
    fprintf(o, "}, %s, %s));\n", A(n + 1), r);
}

static void emit_top_k(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    try_open(g);
    fprintf(g->out, "sk_top_k(ctx, %s, ", sk_dtype_of[T(ir_arg(fn, in, 0))->dtype]);
    emit_shape(g->out, T(ir_arg(fn, in, 0)));
    fprintf(g->out, ", %s, %lld, %d, %s));\n", A(0), (long long)ir_attr(fn, in, 0), (int)ir_attr(fn, in, 1), r);
}

static void emit_done(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    (void)r;
    try_open(g);
    fprintf(g->out, "sc_done(%sh));\n    sk_launch_end(ctx);\n", A(0));
}

static void emit_call(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    const Fn *callee = &g->m->fns[ir_attr(fn, in, 0)];
    try_open(g);
    emit_fn_cname(o, g->m, callee);
    fputs("(dev", o);
    for (int i = 0; i < in->nargs; i++)
        fprintf(o, ", %s", A(i));
    if (in->type.dtype == DT_TUPLE)
        for (int i = 0; i < callee->nresults; i++)
            fprintf(o, ", %s_%d", r, i);
    else
        fprintf(o, ", %s", r);
    fputs("));\n", o);
}

/* A loop: the carried values ping-pong between two arrays of the workspace
 * (the body reads one while it writes the other, NAME_lJ in codegen.c) and
 * are copied to the loop's results once it ends, so nothing the body may
 * still read (an operand whose buffer the result reuses) is written early. */
static void emit_loop(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    FILE *o = g->out;
    const Fn *body = &g->m->fns[inst_callee(fn, in)];
    int nc = loop_carried(fn, in), nres = body->nresults;
    char name[160];
    fputs("    {\n", o);
    snprintf(name, sizeof name, "%si", r);
    emit_read(g, "        ", in, 0, name);
    if (loop_trips(fn, in) < 0) {   /* from the first index to the last operand, the end */
        snprintf(name, sizeof name, "%send", r);
        emit_read(g, "        ", in, in->nargs - 1, name);
        fprintf(o, "        const int64_t %strips = (int64_t)%send - %si;\n", r, r, r);
    }
    fprintf(o, "        int32_t *%sid = (int32_t *)(workspace + %lld);   /* the index, on the device */\n", r,
            (long long)g->index_at[g->at]);
    for (int j = 0; j < nc; j++) {
        const char *ct = ctype_of[result_type(body, j)->dtype];
        if (loop_carried_in_place(body, j))     /* one array: parameter and result; the other takes no bytes */
            fprintf(o, "        %s *%sc%d = %sl%d, *%sn%d = %sc%d;   /* written in place */\n        (void)%sl%d;\n", ct, r,
                    j, r, 2 * j, r, j, r, j, r, 2 * j + 1);
        else
            fprintf(o, "        %s *%sc%d = %sl%d, *%sn%d = %sl%d;\n", ct, r, j, r, 2 * j, r, j, r, 2 * j + 1);
        snprintf(name, sizeof name, "%sc%d", r, j);
        if (bytes_of(result_type(body, j)))
            emit_copy(g, "        ", name, A(1 + j), bytes_of(result_type(body, j)));
    }
    fprintf(o, "        for (int64_t %st = 0; %st < ", r, r);
    if (loop_trips(fn, in) < 0)
        fprintf(o, "%strips", r);
    else
        fprintf(o, "%lld", (long long)loop_trips(fn, in));
    fprintf(o, "; %st++, %si++) {\n", r, r);
    try_plain(g, "            ");
    fprintf(o, "sk_dev_write(ctx, %sid, &%si, sizeof %si));\n", r, r, r);
    try_plain(g, "            ");
    emit_fn_cname(o, g->m, body);
    fprintf(o, "(dev, %sid", r);
    for (int j = 0; j < nc; j++)
        fprintf(o, ", %sc%d", r, j);
    for (int i = 1 + nc; i < in->nargs; i++)
        fprintf(o, ", %s", A(i));
    for (int j = 0; j < nc; j++)
        fprintf(o, ", %sn%d", r, j);
    for (int k = nc; k < nres; k++)
        fprintf(o, ", %sl%d", r, nc + k);
    fputs("));\n", o);
    for (int j = 0; j < nc; j++)
        fprintf(o, "            { %s *t = %sc%d; %sc%d = %sn%d; %sn%d = t; }\n", ctype_of[result_type(body, j)->dtype], r, j,
                r, j, r, j, r, j);
    fputs("        }\n", o);
    for (int k = 0; k < nres; k++) {
        int64_t bytes = bytes_of(result_type(body, k));
        if (!bytes)
            continue;
        char dst[160], src[160];
        snprintf(dst, sizeof dst, in->type.dtype == DT_TUPLE ? "%s_%d" : "%s", r, k);
        snprintf(src, sizeof src, k < nc ? "%sc%d" : "%sl%d", r, k < nc ? k : nc + k);
        emit_copy(g, "        ", dst, src, bytes);
    }
    fputs("    }\n", o);
}

void emit_storage(Gen *g, int v) {
    const char *ct = ctype_of[g->fn->insts[v].type.dtype];
    int c = g->run_of[v];
    if (c >= 0)
        fprintf(g->out, "    %s *%s = (%s *)((char *)%s%d + %lld);   /* its run of %s */\n", ct, g->name[v], ct,
                g->result[c] ? "result" : "buf", g->result[c] ? g->result[c] - 1 : g->buf[c],
                (long long)g->run_at[v], g->name[c]);
    else if (g->result[v])
        fprintf(g->out, "    %s *%s = result%d;   /* returned: written in place */\n", ct, g->name[v], g->result[v] - 1);
    else
        fprintf(g->out, "    %s *%s = buf%d;\n", ct, g->name[v], g->buf[v]);
}

static void emit_return(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    (void)r;
    for (int i = 0; i < in->nargs; i++) {
        char dst[24];
        snprintf(dst, sizeof dst, "result%d", i);
        if (g->result[ir_arg(fn, in, i)] != i + 1 && bytes_of(T(ir_arg(fn, in, i))))
            emit_copy(g, "    ", dst, A(i), bytes_of(T(ir_arg(fn, in, i))));
    }
}

static void (*const emit_kernel[OP_COUNT])(Gen *, const Inst *, const char *) = {
#define OP(id, name, nargs, cls, kernel, flags, dtypes, prio, attrs) [id] = emit_##kernel,
#include "../ir/ops.def"
#undef OP
};

static void emit_body(Gen *g, int v) { emit_kernel[g->fn->insts[v].op](g, &g->fn->insts[v], g->name[v]); }
