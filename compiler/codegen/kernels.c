/* One kernel (lib/shardc_lib.h) or collective (runtime/shardc_rt.h) call per
 * IR instruction, with the instruction's IR text as a comment above it:
 * everything but the elementwise instructions that fuse.c puts into loops. */
#include "internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const sc_reduce_of[] = {"SC_SUM", "SC_MAX", "SC_MIN"};

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

static const char *unary_of(int op) {
    switch (op) {
    case OP_COPY: return "SK_COPY"; case OP_NEGATE: return "SK_NEGATE"; case OP_EXP: return "SK_EXP";
    case OP_LOG: return "SK_LOG"; case OP_TANH: return "SK_TANH"; case OP_SQRT: return "SK_SQRT";
    case OP_RSQRT: return "SK_RSQRT"; case OP_ABS: return "SK_ABS"; case OP_SIN: return "SK_SIN";
    case OP_COS: return "SK_COS"; case OP_SQUARE: return "SK_SQUARE"; case OP_RELU: return "SK_RELU";
    case OP_GELU: return "SK_GELU"; case OP_SIGMOID: return "SK_LOGISTIC"; default: return NULL;
    }
}

static const char *binary_of(int op) {
    switch (op) {
    case OP_ADD: return "SK_ADD"; case OP_SUB: return "SK_SUB"; case OP_MUL: return "SK_MUL";
    case OP_DIV: return "SK_DIV"; case OP_REM: return "SK_REM"; case OP_MAX: return "SK_MAX";
    case OP_MIN: return "SK_MIN"; case OP_POW: return "SK_POW"; default: return NULL;
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
    switch (in->type.dtype) {
    case DT_BF16: fprintf(o, "    *%s = sc_bf16_from_float((float)%s);\n", r, num); break;
    case DT_F16: fprintf(o, "    *%s = sc_f16_from_float((float)%s);\n", r, num); break;
    case DT_I32: fprintf(o, "    *%s = (int32_t)%lld;\n", r, (long long)x); break;
    case DT_BOOL: fprintf(o, "    *%s = %d;\n", r, x != 0); break;
    default: fprintf(o, "    *%s = (%s)%s;\n", r, ctype_of[in->type.dtype], num); break;
    }
}

static void emit_dot(Gen *g, const Inst *in, const char *r) {
    const Fn *fn = g->fn;
    const Shape *a = T(ir_arg(fn, in, 0)), *b = T(ir_arg(fn, in, 1));
    DotDims dd;
    dot_dims(fn, in, &dd);
    const int64_t *lbat = dd.lhs_batch, *rbat = dd.rhs_batch, *lcon = dd.lhs_contract, *rcon = dd.rhs_contract;
    int nb = dd.nbatch, nc = dd.ncontract;
    if ((a->rank - nb - nc) + (b->rank - nb - nc) + nb != in->type.rank)
        g->err = "a dot that sums a dim on one side only";
    FILE *o = g->out;
    fprintf(o, "    TRY(sk_dot(%s, ", sk_dtype_of[in->type.dtype]);
    emit_shape(o, a);
    fprintf(o, ", %s, ", A(0));
    emit_shape(o, b);
    fprintf(o, ", %s,\n               &(sk_dot_dims){%d, %d, ", A(1), nb, nc);
    emit_list(o, lbat, nb);
    fputs(", ", o);
    emit_list(o, rbat, nb);
    fputs(", ", o);
    emit_list(o, lcon, nc);
    fputs(", ", o);
    emit_list(o, rcon, nc);
    fprintf(o, "}, %s, NULL));\n", r);
}

static const char *sc_dtype(Gen *g, int dt) {
    static const char *const names[] = {"SC_F32", "SC_F64", "SC_BF16", "SC_F16", "SC_I32"};
    if (dt >= DT_BOOL) {
        g->err = "a collective of bool values";
        return "SC_F32";
    }
    return names[dt];
}

/* A collective: started (INST_ASYNC, handle NAMEh) or blocking. */
static void emit_collective(Gen *g, int v, const char *r) {
    const Fn *fn = g->fn;
    const Inst *in = &fn->insts[v];
    const int64_t *at = ir_attrs(fn, in);
    FILE *o = g->out;
    int async = in->flags & INST_ASYNC;
    const Shape *s = T(ir_arg(fn, in, 0));
    const char *t = sc_dtype(g, s->dtype);
    if (async)                   /* a guarded one's handle is declared before its guard */
        fprintf(o, in->place ? "    %sh = sc_start_" : "    sc_handle *%sh = sc_start_", r);
    else
        fputs("    TRY(sc_", o);
    int first = in->op == OP_ALL_REDUCE || in->op == OP_ALL_GATHER ? 1 : in->op == OP_COLLECTIVE_PERMUTE ? 1 : 2;
    int naxes = in->op == OP_COLLECTIVE_PERMUTE ? (int)at[0] : in->nattrs - first;
    fprintf(o, "%s(dev, ", in->op == OP_ALL_REDUCE ? "all_reduce" : in->op == OP_ALL_GATHER ? "all_gather"
                          : in->op == OP_REDUCE_SCATTER ? "reduce_scatter" : in->op == OP_ALL_TO_ALL ? "all_to_all"
                          : "collective_permute");
    emit_axes(o, at + first, naxes);
    fprintf(o, ", %s, ", t);
    switch (in->op) {
    case OP_ALL_REDUCE:
        fprintf(o, "%s, %s, %s, %lld", sc_reduce_of[at[0]], A(0), r, (long long)shape_elems(s));
        break;
    case OP_ALL_GATHER:
        emit_shape(o, s);
        fprintf(o, ", %lld, %s, %s", (long long)at[0], A(0), r);
        break;
    case OP_REDUCE_SCATTER:
        fprintf(o, "%s, ", sc_reduce_of[at[0]]);
        emit_shape(o, s);
        fprintf(o, ", %lld, %s, %s", (long long)at[1], A(0), r);
        break;
    case OP_ALL_TO_ALL:
        emit_shape(o, s);
        fprintf(o, ", %lld, %lld, %s, %s", (long long)at[0], (long long)at[1], A(0), r);
        break;
    default: {
        int npairs = (in->nattrs - 1 - naxes) / 2;
        emit_ints(o, "const int", at + 1 + naxes, 2 * npairs);
        fprintf(o, ", %d, %s, %s, %lld", npairs, A(0), r, (long long)shape_elems(s));
    }
    }
    if (async)
        fprintf(o, ");\n    if (!%sh)\n        goto fail;\n", r);
    else
        fputs("));\n", o);
}

static void emit_body(Gen *g, int v);

void emit_inst(Gen *g, int v) {
    const Fn *fn = g->fn;
    const Inst *in = &fn->insts[v];
    FILE *o = g->out;
    const char *r = g->name[v];
    int dt = in->type.dtype;
    fprintf(o, "    /* %s */\n", g->ir[v] ? g->ir[v] : op_info[in->op].name);
    if (in->op == OP_PARAMETER || in->op == OP_RETURN || dt == DT_TUPLE)
        ;
    else if (in->op == OP_DONE)
        fprintf(o, "    %s *%s = %s;\n", ctype_of[dt], r, A(0));
    else
        fprintf(o, "    %s *%s = buf%d;\n", ctype_of[dt], r, g->buf[v]);
    if (!in->place) {
        emit_body(g, v);
        return;
    }
    /* Placed on a submesh: only its devices run it.  The body is written
     * aside and indented into the guard. */
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

static void emit_body(Gen *g, int v) {
    const Fn *fn = g->fn;
    const Inst *in = &fn->insts[v];
    FILE *o = g->out;
    const char *r = g->name[v];
    const int64_t *at = ir_attrs(fn, in);
    int dt = in->type.dtype;
    long long n = in->type.dtype == DT_TUPLE ? 0 : (long long)shape_elems(&in->type);
    const char *u = unary_of(in->op), *b = binary_of(in->op);
    if (u)
        fprintf(o, "    TRY(sk_unary(%s, %s, %lld, %s, %s));\n", u, sk_dtype_of[dt], n, A(0), r);
    else if (b)
        fprintf(o, "    TRY(sk_binary(%s, %s, %lld, %s, %s, %s));\n", b, sk_dtype_of[dt], n, A(0), A(1), r);
    else if (op_is_collective(in->op))
        emit_collective(g, v, r);
    else
        switch (in->op) {
        case OP_PARAMETER: break;
        case OP_CONSTANT: emit_constant(g, in, r); break;
        case OP_IOTA:
            fprintf(o, "    TRY(sk_iota(%s, ", sk_dtype_of[dt]);
            emit_shape(o, &in->type);
            fprintf(o, ", %lld, %s));\n", (long long)at[0], r);
            break;
        case OP_AXIS_INDEX: {
            fprintf(o, "    *%s = ", r);
            for (int i = 1; i < in->nattrs; i++)
                fputc('(', o);
            fprintf(o, "sc_coord(dev, %lld)", (long long)at[0]);
            for (int i = 1; i < in->nattrs; i++)
                fprintf(o, " * %lld + sc_coord(dev, %lld))", (long long)g->m->axis_size[at[i]], (long long)at[i]);
            fputs(";\n", o);
            break;
        }
        case OP_CONVERT:
            fprintf(o, "    TRY(sk_convert(%s, %s, %lld, %s, %s));\n", sk_dtype_of[T(ir_arg(fn, in, 0))->dtype],
                    sk_dtype_of[dt], n, A(0), r);
            break;
        case OP_COMPARE: {
            static const char *const dir[] = {"SK_LT", "SK_LE", "SK_GT", "SK_GE", "SK_EQ", "SK_NE"};
            fprintf(o, "    TRY(sk_compare(%s, %s, %lld, %s, %s, %s));\n", dir[at[0]],
                    sk_dtype_of[T(ir_arg(fn, in, 0))->dtype], n, A(0), A(1), r);
            break;
        }
        case OP_SELECT:
            fprintf(o, "    TRY(sk_select(%s, %lld, %s, %s, %s, %s));\n", sk_dtype_of[dt], n, A(0), A(1), A(2), r);
            break;
        case OP_BROADCAST:
            fprintf(o, "    TRY(sk_broadcast(%s, ", sk_dtype_of[dt]);
            emit_shape(o, T(ir_arg(fn, in, 0)));
            fprintf(o, ", %s, ", A(0));
            emit_shape(o, &in->type);
            fputs(", ", o);
            emit_ints(o, "const int", at, in->nattrs);
            fprintf(o, ", %s));\n", r);
            break;
        case OP_TRANSPOSE:
            fprintf(o, "    TRY(sk_transpose(%s, ", sk_dtype_of[dt]);
            emit_shape(o, T(ir_arg(fn, in, 0)));
            fprintf(o, ", %s, ", A(0));
            emit_ints(o, "const int", at, in->nattrs);
            fprintf(o, ", %s));\n", r);
            break;
        case OP_RESHAPE:
        case OP_GET_TUPLE_ELEMENT:
            if (n)
                fprintf(o, "    memcpy(%s, %s", r, in->op == OP_RESHAPE ? A(0) : "");
            if (n && in->op == OP_GET_TUPLE_ELEMENT)
                fprintf(o, "%s_%lld", A(0), (long long)at[0]);
            if (n)
                fprintf(o, ", %lld);\n", (long long)bytes_of(&in->type));
            break;
        case OP_DOT: emit_dot(g, in, r); break;
        case OP_REDUCE:
            fprintf(o, "    TRY(sk_reduce(%s, ", sk_dtype_of[dt]);
            emit_shape(o, T(ir_arg(fn, in, 0)));
            fprintf(o, ", %s, %d, ", A(0), in->nattrs - 1);
            emit_ints(o, "const int", at + 1, in->nattrs - 1);
            fprintf(o, ", %s, %s));\n", sc_reduce_of[at[0]], r);
            break;
        case OP_SLICE: {
            const Shape *s = T(ir_arg(fn, in, 0));
            fprintf(o, "    TRY(sk_slice(%s, ", sk_dtype_of[dt]);
            emit_shape(o, s);
            fprintf(o, ", %s, ", A(0));
            emit_ints(o, "const int64_t", at, s->rank);
            fputs(", ", o);
            emit_ints(o, "const int64_t", at + s->rank, s->rank);
            fprintf(o, ", %s));\n", r);
            break;
        }
        case OP_DYNAMIC_SLICE:
            fprintf(o, "    TRY(sk_dynamic_slice(%s, ", sk_dtype_of[dt]);
            emit_shape(o, T(ir_arg(fn, in, 0)));
            fprintf(o, ", %s, (const int32_t[]){", A(0));
            for (int i = 1; i < in->nargs; i++)
                fprintf(o, "%s*%s", i > 1 ? ", " : "", A(i));
            fprintf(o, "%s}, ", in->nargs > 1 ? "" : "0");
            emit_ints(o, "const int64_t", in->type.dims, in->type.rank);
            fprintf(o, ", %s));\n", r);
            break;
        case OP_CONCAT:
            fprintf(o, "    TRY(sk_concat(%s, %d, (const sc_shape[]){", sk_dtype_of[dt], in->nargs);
            for (int i = 0; i < in->nargs; i++) {
                fputs(i ? ", " : "", o);
                emit_shape(o, T(ir_arg(fn, in, i)));
            }
            fputs("}, (const void *const[]){", o);
            for (int i = 0; i < in->nargs; i++)
                fprintf(o, "%s%s", i ? ", " : "", A(i));
            fprintf(o, "}, %lld, %s));\n", (long long)at[0], r);
            break;
        case OP_ROLL:
            fprintf(o, "    TRY(sk_roll(%s, ", sk_dtype_of[dt]);
            emit_shape(o, T(ir_arg(fn, in, 0)));
            fprintf(o, ", %s, %lld, %lld, %s));\n", A(0), (long long)at[0], (long long)at[1], r);
            break;
        case OP_GATHER:
            fprintf(o, "    TRY(sk_gather(%s, ", sk_dtype_of[dt]);
            emit_shape(o, T(ir_arg(fn, in, 0)));
            fprintf(o, ", %s, %lld, ", A(0), (long long)at[0]);
            emit_shape(o, T(ir_arg(fn, in, 1)));
            fprintf(o, ", %s, %s));\n", A(1), r);
            break;
        case OP_DONE: fprintf(o, "    TRY(sc_done(%sh));\n", A(0)); break;
        case OP_CALL: {
            const Fn *callee = &g->m->fns[at[0]];
            char *cn = fn_cname(g->m, callee);
            if (callee->on)              /* timed for SHARDC_TRACE (lib/shardc_trace.h) */
                fprintf(o, "    {\n        int64_t trace_t0 = sk_trace_begin();\n        TRY(%s(dev", cn);
            else
                fprintf(o, "    TRY(%s(dev", cn);
            free(cn);
            for (int i = 0; i < in->nargs; i++)
                fprintf(o, ", %s", A(i));
            if (dt == DT_TUPLE)
                for (int i = 0; i < callee->nresults; i++)
                    fprintf(o, ", %s_%d", r, i);
            else
                fprintf(o, ", %s", r);
            fputs("));\n", o);
            if (callee->on)
                fprintf(o, "        sk_trace_end(dev, \"%s\", trace_t0);\n    }\n", sym_name(g->m->syms, callee->sym));
            break;
        }
        case OP_RETURN:
            for (int i = 0; i < in->nargs; i++)
                if (bytes_of(T(ir_arg(fn, in, i))))
                    fprintf(o, "    memcpy(result%d, %s, %lld);\n", i, A(i), (long long)bytes_of(T(ir_arg(fn, in, i))));
            break;
        default: g->err = "an op code generation does not know"; break;
        }
}

