/* C code generation: every per-device function of a scheduled module (a
 * partitioned fn, an spmd fn, a `.local` copy) becomes a C function of
 * (dev, parameter blocks, result pointers) whose body calls one kernel
 * (lib/shardc_lib.h) or runtime collective (runtime/shardc_rt.h) per IR
 * instruction (kernels.c), except that chains of elementwise instructions
 * run as one loop (fuse.c, fused.c); the instruction as the IR dump prints
 * it (ir_print_inst) is a comment above each.
 * Values live in the scheduler's buffers (Inst.buffer), allocated once at
 * entry and freed at exit; functions that were not scheduled (.local copies)
 * get one buffer per value.  Every pass is linear in the instructions. */
#include "codegen.h"
#include "internal.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const char *const ctype_of[] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [DT_##ID] = #ctype,
#include "../ir/dtypes.def"
#undef DTYPE
};
const char *const sk_dtype_of[] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [DT_##ID] = "SK_" #ID,
#include "../ir/dtypes.def"
#undef DTYPE
};

int fn_emittable(const Fn *fn) { return fn_is_local(fn) || fn->kept_global; }
int fn_exported(const Fn *fn) { return fn_emittable(fn) && !fn->kept_global && !fn->spec_of && !fn->loop_of; }

/* A file with a main() holds only its fns and what they call, not every fn
 * of its program: gcc took 9 s on a gradient program's 6500 lines where one
 * step's own fns take a tenth of a second.  Without a main, every
 * per-device function (the file is a library of entry points).  A stack, so
 * each fn and call is visited once. */
char *fns_in_file(const Module *m, Entries main_fns, Arena *arena) {
    char *in = arena_alloc(arena, (size_t)m->nfns + 1);
    if (!main_fns.n) {
        for (int f = 0; f < m->nfns; f++)
            in[f] = (char)fn_emittable(&m->fns[f]);
        return in;
    }
    int *stack = arena_alloc(arena, sizeof(int) * ((size_t)m->nfns + 1)), top = 0;
    for (int i = 0; i < main_fns.n; i++)
        if (!in[main_fns.fn[i]]) {
            in[main_fns.fn[i]] = 1;
            stack[top++] = main_fns.fn[i];
        }
    while (top) {
        const Fn *fn = &m->fns[stack[--top]];
        for (int v = 0; v < fn->ninsts; v++) {
            int callee = op_calls(fn->insts[v].op) ? (int)ir_attr(fn, &fn->insts[v], 0) : -1;
            if (callee >= 0 && !in[callee] && fn_emittable(&m->fns[callee])) {
                in[callee] = 1;
                stack[top++] = callee;
            }
        }
    }
    return in;
}

void emit_list(FILE *o, const int64_t *x, int n) {
    fputc('{', o);
    for (int i = 0; i < n; i++)
        fprintf(o, "%s%lld", i ? ", " : "", (long long)x[i]);
    fputs(n ? "}" : "0}", o);
}

void emit_ir_comment(Gen *g, int v) {
    fputs("    /* ", g->out);
    ir_print_inst(g->out, g->m, g->fn, v, g->irname);
    fputs(" */\n", g->out);
}

int *param_insts(const Fn *fn, Arena *arena) {
    int *p = arena_alloc(arena, sizeof(int) * (size_t)(fn->nparams + 1));
    for (int i = 0; i < fn->nparams; i++)
        p[i] = -1;
    for (int v = 0; v < fn->ninsts; v++) {
        int64_t i = fn->insts[v].op == OP_PARAMETER ? ir_attr(fn, &fn->insts[v], 0) : -1;
        if (i >= 0 && i < fn->nparams && p[i] < 0)
            p[i] = v;
    }
    return p;
}

/* ---- names ---- */

/* A set of names, each with the next suffix to try when it clashes:
 * open addressing, so naming stays linear however many names clash. */
typedef struct {
    const char **key;
    int *next;
    size_t cap;
} NameSet;

static size_t name_hash(const char *s) {
    size_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot of `s`: its entry, or the empty slot where it goes. */
static size_t name_slot(const NameSet *set, const char *s) {
    size_t i = name_hash(s) & (set->cap - 1);
    while (set->key[i] && strcmp(set->key[i], s) != 0)
        i = (i + 1) & (set->cap - 1);
    return i;
}

/* Value names as C identifiers: `%acc.1` is acc_1_ ('.' and '-' become
 * '_'; the trailing '_' keeps them clear of C keywords and library names),
 * and a name already taken gets a suffix: acc_1_1_. */
char **c_value_names(const Fn *fn, const char *const *irname, Arena *arena) {
    int n = fn->ninsts;
    char **name = arena_alloc(arena, sizeof(char *) * ((size_t)n + 1));
    NameSet set = {NULL, NULL, 16};
    while (set.cap < 4 * (size_t)n)
        set.cap *= 2;
    set.key = arena_alloc(arena, sizeof(char *) * set.cap);
    set.next = arena_alloc(arena, sizeof(int) * set.cap);
    for (int v = 0; v < n; v++) {
        /* The return, which the dump does not name, is "v". */
        const char *s = fn->insts[v].op == OP_RETURN ? "v" : irname[v];
        size_t len = strlen(s);
        char *c = arena_alloc(arena, len + 24);
        for (size_t i = 0; i < len; i++)
            c[i] = isalnum((unsigned char)s[i]) ? s[i] : '_';
        strcpy(c + len, "_");
        size_t at = name_slot(&set, c);
        if (set.key[at]) {                   /* taken: the next free suffix */
            size_t first = at;
            int k = set.next[first];
            do {
                snprintf(c + len, 24, "_%d_", ++k);
                at = name_slot(&set, c);
            } while (set.key[at]);
            set.next[first] = k;
        }
        set.key[at] = c;
        name[v] = c;
    }
    return name;
}

/* ---- one function ---- */

/* The bytes an array of type t takes in the workspace: whole 64-byte
 * lines, one for an empty array (so each has its own address). */
static int64_t array_bytes(const Shape *t) {
    int64_t n = shape_elems(t);
    return n ? (n * dtype_size(t->dtype) + 63) / 64 * 64 : 64;
}

typedef struct {
    const Module *m;
    const char ***irnames;       /* per function: its IR names */
    FILE *protos, *bodies;
} FileGen;

/* The values written straight into the caller's result arrays, not into a
 * buffer copied there at the return, each at its first place in the
 * return: a value in a buffer of its own making (not a parameter, a view,
 * a collective's done or a dot's accumulator), and an element of a call's results, whose
 * callee then writes it there (*element: per call, per result, 1 + the
 * result, or 0).  A returned value lives to the end, so no other value
 * shares its memory after it is written, and results never overlap the
 * parameters (docs/codegen.md). */
static int *returned_in_place(const Module *m, const Fn *fn, const int *buf, const Fusion *fu, int ***element,
                              Arena *arena) {
    int *result = arena_alloc(arena, sizeof(int) * ((size_t)fn->ninsts + 1));
    *element = arena_alloc(arena, sizeof(int *) * ((size_t)fn->ninsts + 1));
    const Inst *ret = &fn->insts[fn->ninsts - 1];
    for (int i = 0; ret->op == OP_RETURN && i < ret->nargs; i++) {
        int v = ir_arg(fn, ret, i);
        const Inst *in = &fn->insts[v];
        if (result[v] || in->place)
            continue;
        if (in->op == OP_GET_TUPLE_ELEMENT && in->flags & INST_VIEW) {
            int call = ir_arg(fn, in, 0), k = (int)ir_attr(fn, in, 0);
            if (fn->insts[call].place)
                continue;
            int **e = &(*element)[call];
            if (!*e)
                *e = arena_alloc(arena, sizeof(int) * ((size_t)call_tuple_arrays(m, fn, call) + 1));
            if (!(*e)[k])
                (*e)[k] = result[v] = i + 1;
            continue;
        }
        if (!computed_in_result(fn, buf, v) || fu->role[v] == FUSE_FOLDED ||
            (fu->role[v] == FUSE_MEMBER && !fu->stored[v]))
            continue;
        result[v] = i + 1;
    }
    return result;
}

/* 1 + the result call array k of instruction v is, or 0: in the block.
 * Only the arrays of a tuple's elements can be (a loop's ping-pong ones
 * follow them). */
static int array_in_result(const Module *m, const Fn *fn, int **element, int v, int k) {
    return element[v] && k < call_tuple_arrays(m, fn, v) ? element[v][k] : 0;
}

/* Where each INST_IN_RUN value is written (Gen.run_of, run_at, run_ld):
 * each operand of an assembled concatenate at its first element there,
 * and so the start of the collective whose done it is, and that start's
 * operand.  An operand is a run of the result, or, when dims before the
 * concatenated one are not 1, a block of rows a result row apart. */
static void find_runs(Gen *g) {
    const Fn *fn = g->fn;
    g->run_of = arena_alloc(g->arena, sizeof(int) * ((size_t)fn->ninsts + 1));
    g->run_at = arena_alloc(g->arena, sizeof(int64_t) * ((size_t)fn->ninsts + 1));
    g->run_ld = arena_alloc(g->arena, sizeof(int64_t) * ((size_t)fn->ninsts + 1));
    for (int v = 0; v < fn->ninsts; v++)
        g->run_of[v] = -1;
    for (int c = 0; c < fn->ninsts; c++) {
        const Inst *in = &fn->insts[c];
        if (!(in->flags & INST_ASSEMBLED))
            continue;
        int k = inst_dim(fn, in);
        int64_t inner = 1, rows = 1, at = 0, es = dtype_size(in->type.dtype);
        for (int d = 0; d < k; d++)
            rows *= in->type.dims[d];
        for (int d = k + 1; d < in->type.rank; d++)
            inner *= in->type.dims[d];
        for (int i = 0; i < in->nargs; i++) {
            for (int u = ir_arg(fn, in, i); u >= 0 && fn->insts[u].flags & INST_IN_RUN;
                 u = fn->insts[u].op == OP_DONE || fn->insts[u].flags & INST_ASYNC ? ir_arg(fn, &fn->insts[u], 0) : -1) {
                g->run_of[u] = c;
                g->run_at[u] = at * inner * es;
                g->run_ld[u] = rows > 1 ? in->type.dims[k] * inner : 0;
            }
            at += fn->insts[ir_arg(fn, in, i)].type.dims[k];
        }
    }
}

static int emit_fn(FileGen *fg, int f, const char **err) {
    const Module *m = fg->m;
    const Fn *fn = &m->fns[f];
    FILE *o = fg->bodies;
    int n = fn->ninsts;
    Arena arena = {0};
    Gen g = {m, fn, o, &arena, fg->irnames[f], c_value_names(fn, fg->irnames[f], &arena),
             arena_alloc(&arena, sizeof(int) * ((size_t)n + 1)), NULL, param_insts(fn, &arena), NULL, NULL, NULL, {0},
             NULL, -1, 0, NULL};
    value_buffers(fn, g.buf);
    find_runs(&g);
    fuse_fn(fn, g.buf, &g.fu, &arena);
    int **element;
    g.result = returned_in_place(m, fn, g.buf, &g.fu, &element, &arena);
    /* Only buffers that some value is written to are allocated: a value that
     * stays inside its loop, or a folded constant, takes none. */
    int nbuf = 0, nalloc = 0;
    for (int v = 0; v < n; v++)
        if (g.buf[v] >= nbuf)
            nbuf = g.buf[v] + 1;
    int64_t *size = arena_alloc(&arena, sizeof(int64_t) * ((size_t)nbuf + 1)), total = 0;
    char *used = arena_alloc(&arena, (size_t)nbuf + 1);
    for (int v = 0; v < n; v++) {
        int r = g.fu.role[v];
        if (g.buf[v] < 0 || r == FUSE_FOLDED || (r == FUSE_MEMBER && !g.fu.stored[v]) || g.result[v] ||
            g.run_of[v] >= 0)            /* in its concatenate's memory */
            continue;
        int64_t b = shape_elems(&fn->insts[v].type) * dtype_size(fn->insts[v].type.dtype);
        nalloc += !used[g.buf[v]];
        used[g.buf[v]] = 1;
        if (b > size[g.buf[v]])
            size[g.buf[v]] = b;
    }
    int64_t *offset = arena_alloc(&arena, sizeof(int64_t) * ((size_t)nbuf + 1)), span = 0;
    for (int b = 0; b < nbuf; b++) {
        total += size[b];
        offset[b] = span;
        span += used[b] ? (size[b] + 63) / 64 * 64 : 0;   /* each buffer on a cache line */
    }
    /* The results of calls with several, one array each, follow the buffers
     * in the block (kept between calls with it: a training step's call of
     * its value_and_grad allocates nothing). */
    int64_t buffers_span = span;
    for (int v = 0; v < n; v++)
        for (int k = 0; k < call_arrays(m, fn, v); k++)
            if (!array_in_result(m, fn, element, v, k))
                span += array_bytes(call_array_type(m, fn, v, k));
    g.index_at = arena_alloc(&arena, sizeof(int64_t) * ((size_t)n + 1));
    for (int v = 0; v < n; v++)          /* each loop's index: the body reads it on the device */
        if (fn->insts[v].op == OP_LOOP) {
            g.index_at[v] = span;
            span += 64;
        }
    int take = span > 0;
    fprintf(o, "\n/* %s%s %s: %d instructions, %d buffers, %lld bytes */\n", fn->spmd ? "spmd fn" : "fn",
            fn->kept_global ? " (a copy called on local blocks)" : "", sym_name(m->syms, fn->sym), n, nalloc,
            (long long)total);
    emit_signature(fg->protos, m, fn, g.name, g.param);
    fputs(";\n", fg->protos);
    int loops = 0;                       /* compiled per ISA when it has a loop */
    for (int v = 0; v < n; v++)
        loops |= g.fu.role[v] == FUSE_MEMBER && shape_elems(&fn->insts[v].type) > 1;
    if (loops)
        fputs("SK_ISA_CLONES\n", o);
    emit_signature(o, m, fn, g.name, g.param);
    fputs(" {\n    int rc = SC_ERR;\n    sk_ctx *ctx = sc_device_ctx(dev);\n", o);
    if (take) {
        fprintf(o, "    char *workspace = sk_dev_take(ctx, %lld);   /* the buffers, one block */\n"
                   "    if (!workspace)\n        return SC_ERR;\n", (long long)span);
        for (int b = 0; b < nbuf; b++)
            if (used[b])
                fprintf(o, "    void *buf%d = workspace + %lld;\n", b, (long long)offset[b]);
    }
    int64_t at = buffers_span;
    for (int v = 0; v < n; v++)          /* the results of calls with several, loops' arrays */
        for (int k = 0; k < call_arrays(m, fn, v); k++) {
            const Shape *t = call_array_type(m, fn, v, k);
            int results = call_tuple_arrays(m, fn, v), r = array_in_result(m, fn, element, v, k);
            fprintf(o, "    %s *%s%s%d = ", ctype_of[t->dtype], g.name[v], k < results ? "_" : "l", k < results ? k : k - results);
            if (r) {
                fprintf(o, "result%d;   /* returned: written in place */\n", r - 1);
                continue;
            }
            fprintf(o, "(%s *)(workspace + %lld);\n", ctype_of[t->dtype], (long long)at);
            at += array_bytes(t);
        }
    fputs("    (void)dev;\n    (void)ctx;\n", o);
    for (int v = 0; v < n; v++)
        if (fn->insts[v].op == OP_PARAMETER)
            fprintf(o, "    (void)%s;\n", g.name[v]);
    for (int v = 0; v < n; v++) {
        const Inst *in = &fn->insts[v];
        if (g.fu.role[v] == FUSE_MEMBER && v == g.fu.last_member[g.fu.group[v]]) {
            emit_fused(&g, g.fu.group[v]);
            for (int u = g.fu.first[g.fu.group[v]]; u >= 0; u = g.fu.next[u])
                if (g.fu.role[u] == FUSE_DEFERRED)
                    emit_inst(&g, u);
        }
        if (g.fu.role[v] != FUSE_NONE)
            continue;
        if (op_calls(in->op) && !fn_emittable(&m->fns[ir_attr(fn, in, 0)]))
            g.err = "a call of a global function from a per-device one";
        emit_inst(&g, v);
    }
    fputs(g.jumps ? "    rc = 0;\nfail:\n" : "    rc = 0;\n", o);
    if (take)
        fprintf(o, "    sk_dev_give(ctx, workspace, %lld);\n", (long long)span);
    fputs("    return rc;\n}\n", o);
    *err = g.err;
    arena_free(&arena);
    return g.err ? -1 : 0;
}

/* ---- the file ---- */

int codegen_emit(const Module *m, Entries main_fns, FILE *o, char *err, size_t errlen) {
    for (int i = 0; i < main_fns.n; i++)
        if (!fn_emittable(&m->fns[main_fns.fn[i]])) {
            snprintf(err, errlen, "'%s' is not a per-device function", sym_name(m->syms, m->fns[main_fns.fn[i]].sym));
            return -1;
        }
    Arena arena = {0};
    FileGen fg = {m, ir_module_value_names(m, &arena), NULL, NULL};
    /* The text is written aside, and to `o` only once every function has
     * been emitted, so a failure writes nothing. */
    char *protos = NULL, *bodies = NULL;
    size_t nprotos = 0, nbodies = 0;
    FILE *ps = open_memstream(&protos, &nprotos), *bs = open_memstream(&bodies, &nbodies);
    fg.protos = ps;
    fg.bodies = bs;
    int rc = 0;
    char *in_file = fns_in_file(m, main_fns, &arena);
    for (int f = 0; f < m->nfns && !rc; f++) {
        const char *why = NULL;
        if (in_file[f] && emit_fn(&fg, f, &why)) {
            snprintf(err, errlen, "cannot generate C for '%s': %s", sym_name(m->syms, m->fns[f].sym), why);
            rc = -1;
        }
    }
    fclose(ps);
    fclose(bs);
    const char *clash = rc ? NULL : global_name_clash(m, in_file, &arena);
    if (clash) {
        snprintf(err, errlen, "cannot generate C: %s", clash);
        rc = -1;
    }
    if (!rc) {
        fputs("/* Generated by shardc from the scheduled IR: one C function per per-device\n"
              " * function, one kernel (shardc_lib.h) or collective (shardc_rt.h) call per\n"
              " * IR instruction, shown above it, and one loop per chain of elementwise\n"
              " * instructions.  The entry points (shardc_NAME) are declared in the header\n"
              " * `shardc compile -o prog.c` writes next to this file, prog.h.  Link with\n"
              " * -fopenmp -lshardc_lib -lshardc_rt -ldnnl -lopenblas -lm -pthread. */\n", o);
        fputs("#include <shardc_lib.h>\n#include <shardc_main.h>\n#include <shardc_rt.h>\n#include <shardc_trace.h>\n\n", o);
        fputs("#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n"
              "#if defined(__GNUC__)\n#define SC_MAYBE_UNUSED __attribute__((unused))\n#else\n#define SC_MAYBE_UNUSED\n#endif\n\n"
              "/* A failed kernel or collective ends the device's function. */\n"
              "#define TRY(call)                                                         \\\n"
              "    do {                                                                  \\\n"
              "        if ((call) != 0) {                                                \\\n"
              "            fprintf(stderr, \"error: %s: line %d failed\\n\", __func__, __LINE__); \\\n"
              "            goto fail;                                                    \\\n"
              "        }                                                                 \\\n"
              "    } while (0)\n\n"
              "/* TRY, timed as one SHARDC_TRACE event (shardc_trace.h): NAME says what\n"
              " * ran, BYTES what it wrote or sent.  Tracing off, one load and a branch. */\n"
              "#define TRY_TRACED(name, bytes, call)                                     \\\n"
              "    do {                                                                  \\\n"
              "        int64_t trace_t0_ = sk_trace_begin();                             \\\n"
              "        TRY(call);                                                        \\\n"
              "        sk_trace_end(dev, name, bytes, trace_t0_);                        \\\n"
              "    } while (0)\n\n"
              "/* TRY_TRACED of work on the device, a kernel or a collective: it may\n"
              " * touch the device's memory only between sk_launch_begin and\n"
              " * sk_launch_end (shardc_lib.h). */\n"
              "#define LAUNCH(name, bytes, call)                                         \\\n"
              "    do {                                                                  \\\n"
              "        int64_t trace_t0_ = sk_trace_begin();                             \\\n"
              "        sk_launch_begin(ctx);                                             \\\n"
              "        int launch_rc_ = (call);                                          \\\n"
              "        sk_launch_end(ctx);                                               \\\n"
              "        TRY(launch_rc_);                                                  \\\n"
              "        sk_trace_end(dev, name, bytes, trace_t0_);                        \\\n"
              "    } while (0)\n\n", o);
        fwrite(protos, 1, nprotos, o);
        fwrite(bodies, 1, nbodies, o);
        emit_programs(m, in_file, fg.irnames, o, &arena);
        if (main_fns.n)
            emit_main(m, main_fns, o);
    }
    free(protos);                            /* open_memstream's buffers */
    free(bodies);
    arena_free(&arena);
    return rc;
}
