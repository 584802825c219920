/* The SHARDC_TRACE event of each instruction that does work: its name, a
 * string literal in the generated C that says what ran ("dot f32
 * [32,128]x[128,64]", "all-reduce-start f32 sum [32,128] over {Y}", "loop
 * multiply,add,gelu f32 [4,4]", "call stage1"), and its bytes.  Names are
 * made at compile time so that recording one costs a pointer
 * (lib/shardc_trace.h); their first word is the op as the dump prints it,
 * which lib/host/trace.c reads the event's category from. */
#include "internal.h"

#include <stdarg.h>
#include <string.h>

typedef struct {
    char *s;
    size_t n, cap;
} Name;

static void put(Name *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Name *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        b->n = b->n + (size_t)k < b->cap ? b->n + (size_t)k : b->cap - 1;
}

static void put_shape(Name *b, const Shape *s) {
    put(b, "[");
    for (int d = 0; d < s->rank; d++)
        put(b, "%s%lld", d ? "," : "", (long long)s->dims[d]);
    put(b, "]");
}

static int64_t bytes_of(const Shape *s) {
    return s->dtype == DT_TUPLE ? 0 : shape_elems(s) * dtype_size(s->dtype);
}

static const Shape *operand(const Fn *fn, const Inst *in, int i) { return &fn->insts[ir_arg(fn, in, i)].type; }

/* "all-reduce-start f32 sum [32,128] over {Y}": the op (with -start or
 * -done), the operand's dtype and local shape, what the op needs to be
 * told apart, and the mesh axes of its groups. */
static void collective_name(Name *b, const Module *m, const Fn *fn, const Inst *in, const char *phase) {
    const Shape *x = operand(fn, in, 0);
    put(b, "%s%s %s ", op_info[in->op].name, phase, dtype_name[x->dtype]);
    if (in->op == OP_ALL_REDUCE || in->op == OP_REDUCE_SCATTER)
        put(b, "%s ", reducer_info[inst_reducer(fn, in)].builtin);
    put_shape(b, x);
    if (in->op == OP_ALL_GATHER || in->op == OP_REDUCE_SCATTER)
        put(b, " dim %d", inst_dim(fn, in));
    if (in->op == OP_ALL_TO_ALL)
        put(b, " split %d concat %d", inst_dim(fn, in), inst_concat_dim(fn, in));
    int n;
    const int64_t *axes = inst_axes(fn, in, &n);
    put(b, " over {");
    for (int i = 0; i < n; i++)
        put(b, "%s%s", i ? "," : "", sym_name(m->syms, m->axis_sym[axes[i]]));
    put(b, "}");
}

/* "dot f32 [32,128]x[128,64]" (a wide dot's: "dot bf16 ... ->f32"), and
 * for a dot with an epilogue (v its last instruction, schedule.c) what
 * the epilogue adds: "+bias", "+gelu"; a folded gather: "+gather"; a dot
 * accumulating into a buffer: "+=". */
static void dot_name(Name *b, const Fn *fn, int v) {
    int dot = v, bias = 0, gather = 0;
    if (ends_fold(fn, v))
        for (int u = v - 1; u >= 0 && fn->insts[u].flags & INST_FOLDED; u--) {
            dot = fn->insts[u].op == OP_DOT ? u : dot;
            bias |= fn->insts[u].op == OP_BROADCAST;
            gather |= fn->insts[u].op == OP_GATHER;
        }
    const Inst *in = &fn->insts[dot];
    put(b, "dot %s ", dtype_name[operand(fn, in, 0)->dtype]);
    put_shape(b, operand(fn, in, 0));
    put(b, "x");
    put_shape(b, operand(fn, in, 1));
    if (dot_is_wide(fn, in))
        put(b, " ->%s", dtype_name[in->type.dtype]);
    if (gather)
        put(b, " +gather");
    if (bias)
        put(b, " +bias");
    if (accumulated_operand(fn, v) >= 0)
        put(b, " +=");
    if (dot != v && fn->insts[v].op != OP_ADD && fn->insts[v].op != OP_DOT)
        put(b, " +%s", op_info[fn->insts[v].op].name);
}

const char *trace_name(Gen *g, int v) {
    const Fn *fn = g->fn;
    const Inst *in = &fn->insts[v];
    Name b = {arena_alloc(g->arena, 512), 0, 512};
    b.s[0] = 0;
    AttentionForm af;
    AttentionGradForm gf;
    if (ends_attention(fn, v) && attention_form(fn, v, &af)) {   /* "attention f32 [4,2,128,64] causal" */
        put(&b, "attention %s ", dtype_name[af.dtype]);
        put_shape(&b, &in->type);
        put(&b, af.causal ? " causal" : af.mask >= 0 ? " masked" : "");
    } else if (attention_grad_at(fn, v, &gf)) {
        put(&b, "attention grad %s ", dtype_name[gf.af.dtype]);   /* "attention grad f32 [4,2,128,128] causal": the scores' shape */
        Shape scores = {.dtype = DT_F32, .rank = (uint8_t)(gf.af.nbatch + 2)};
        memcpy(scores.dims, gf.af.batch, sizeof(int64_t) * (size_t)gf.af.nbatch);
        scores.dims[gf.af.nbatch] = gf.af.S, scores.dims[gf.af.nbatch + 1] = gf.af.T;
        put_shape(&b, &scores);
        put(&b, gf.af.causal ? " causal" : gf.af.mask >= 0 ? " masked" : "");
    } else if (in->op == OP_DOT || ends_dot_fold(fn, v))
        dot_name(&b, fn, v);
    else if (in->op == OP_DONE)
        collective_name(&b, g->m, fn, &fn->insts[ir_arg(fn, in, 0)], "-done");
    else if (op_is_collective(in->op))
        collective_name(&b, g->m, fn, in, in->flags & INST_ASYNC ? "-start" : "");
    else if (in->op == OP_CALL)
        put(&b, "call %s", sym_name(g->m->syms, g->m->fns[ir_attr(fn, in, 0)].sym));
    else {                       /* "gelu f32 [32,64]": the op, its result's dtype and shape */
        const Shape *s = in->type.dtype == DT_TUPLE ? operand(fn, in, 0) : &in->type;
        put(&b, "%s %s ", op_info[in->op].name, dtype_name[s->dtype]);
        put_shape(&b, s);
    }
    return b.s;
}

int64_t trace_bytes(Gen *g, int v) {
    const Fn *fn = g->fn;
    const Inst *in = &fn->insts[v];
    if (in->op == OP_DONE)
        in = &fn->insts[ir_arg(fn, in, 0)];
    if (op_is_collective(in->op))    /* what it sends */
        return bytes_of(operand(fn, in, 0));
    if (in->op == OP_CALL && in->type.dtype == DT_TUPLE) {
        const Fn *callee = &g->m->fns[ir_attr(fn, in, 0)];
        int64_t sum = 0;
        for (int i = 0; i < callee->nresults; i++)
            sum += bytes_of(result_type(callee, i));
        return sum;
    }
    return bytes_of(&in->type);
}

/* "loop multiply,add,gelu f32 [4,4]": the ops of the group's members, each
 * once, in order, and the type of its last. */
const char *trace_loop_name(Gen *g, int group, int64_t *bytes) {
    const Fn *fn = g->fn;
    const Fusion *fu = &g->fu;
    Name b = {arena_alloc(g->arena, 512), 0, 512};
    b.s[0] = 0;
    put(&b, "loop ");
    int last = -1, full = 0, seen[OP_COUNT] = {0};
    *bytes = 0;
    for (int v = fu->first[group]; v >= 0; v = fu->next[v]) {
        int op = fn->insts[v].op;
        if (fu->role[v] != FUSE_MEMBER)
            continue;
        last = v;
        if (fu->stored[v])
            *bytes += bytes_of(&fn->insts[v].type);
        if (op == OP_BROADCAST || op == OP_CONSTANT || seen[op]++ || full)
            continue;
        full = b.n + strlen(op_info[op].name) + 64 >= b.cap;   /* room for the type */
        put(&b, "%s%s", b.n > 5 ? "," : "", full ? "..." : op_info[op].name);
    }
    if (b.n == 5)                /* only broadcasts: a fill */
        put(&b, "broadcast");
    if (last >= 0) {
        put(&b, " %s ", dtype_name[fn->insts[last].type.dtype]);
        put_shape(&b, &fn->insts[last].type);
    }
    return b.s;
}

int try_open(Gen *g) {
    int v = g->at;
    g->jumps = 1;
    return fprintf(g->out, "    %s(\"%s\", %lld, ", op_calls(g->fn->insts[v].op) ? "TRY_TRACED" : "LAUNCH",
                   trace_name(g, v), (long long)trace_bytes(g, v));
}

void try_plain(Gen *g, const char *indent) {
    g->jumps = 1;
    fprintf(g->out, "%sTRY(", indent);
}
