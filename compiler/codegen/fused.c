/* The loop of a group of elementwise instructions (fuse.c):
 *
 *     (the IR of every instruction of the group, as comments)
 *     float *y_ = buf1;
 *     for (int64_t i = 0; i < 32; i++) {
 *         float multiply_i = x_[i] * w_[i];
 *         y_[i] = multiply_i / (1.0f + sk_exp_f32(...));
 *     }
 *
 * Each member is one statement computing exactly what its kernel in
 * lib/elementwise.c computes: f32 in float with the float math functions,
 * f64 in double, i32 wrapping through uint32_t, bf16 and f16 widened to
 * float and rounded once per instruction (their locals hold the bit
 * patterns, so select and copy move bits as the kernels do).  A value read
 * inside the loop is `NAME_i` (a local), a literal (a broadcast constant),
 * `NAME_[i]` (an operand read once), or `NAME_[row]` (the operand of a
 * broadcast along trailing dims, which nests the loop: rows, then each row's
 * elements); `NAME_f` is the float of a bf16/f16
 * local.  One statement per instruction also keeps a C11 compiler from
 * contracting a * b + c into an fma the kernels do not use (clang contracts
 * only within an expression, and GCC only in its GNU modes, -std=gnu11).
 *
 * A loop of SK_PARALLEL_MIN elements or more is written inside
 * SK_PARALLEL_FOR(n, for (...) {...}); (lib/shardc_parallel.h), or
 * SK_PARALLEL_ROWS(n, ...) around the row loop of a nested one, which run
 * it on the device's OpenMP threads when it has several: every element is
 * computed on its own, so the results do not change. */
#include "internal.h"

#include "../../lib/shardc_parallel.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A growing string in the function's arena: a member's expression. */
typedef struct {
    Arena *arena;
    char *s;
    size_t n, cap;
} Str;

static void put(Str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Str *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)k + 1 > b->cap) {
        size_t cap = 2 * (b->n + (size_t)k + 1);
        b->s = arena_realloc(b->arena, b->s, b->n, cap);
        b->cap = cap;
    }
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap2);
    va_end(ap2);
    b->n += (size_t)k;
}

static int is16(int dt) { return dt == DT_BF16 || dt == DT_F16; }
static const char *to_float(int dt) { return dt == DT_BF16 ? "sc_bf16_to_float" : "sc_f16_to_float"; }
static const char *from_float(int dt) { return dt == DT_BF16 ? "sc_bf16_from_float" : "sc_f16_from_float"; }

/* A C literal of x in dtype dt (f32, f64, i32, bool; bf16/f16 as the f32
 * they are rounded from), parenthesized when negative. */
static void literal(Str *b, int dt, double x) {
    char t[64];
    if (dt == DT_BOOL) {
        put(b, "%d", x != 0);
        return;
    }
    if (dt == DT_I32) {
        int32_t i = (int32_t)(long long)x;
        if (i == INT32_MIN)
            put(b, "INT32_MIN");
        else
            put(b, i < 0 ? "(%d)" : "%d", (int)i);
        return;
    }
    int dbl = dt == DT_F64;
    double y = dbl ? x : (double)(float)x;
    if (isnan(y)) {
        put(b, "NAN");
        return;
    }
    if (isinf(y)) {
        put(b, y < 0 ? "(-INFINITY)" : "INFINITY");
        return;
    }
    for (int digits = dbl ? 15 : 6; digits <= (dbl ? 17 : 9); digits++) {   /* the shortest that reads back */
        snprintf(t, sizeof t, "%.*g", digits, y);
        if (dbl ? strtod(t, NULL) == y : strtof(t, NULL) == (float)y)
            break;
    }
    put(b, signbit(y) ? "(%s%s%s)" : "%s%s%s", t, strpbrk(t, ".e") ? "" : ".0", dbl ? "" : "f");
}

/* How a member's value is had inside the loop. */
enum { COMPUTED, LITERAL, BEFORE };   /* a statement; a broadcast literal; a broadcast read before the loop */

typedef struct {
    Gen *g;
    int group;
    const char *idx;             /* "i", or "0" for one element */
    const char *ind;             /* the indentation of the loop's body */
    int64_t row;                 /* elements per row when broadcasts along trailing dims nest the loop, or 0 */
    int counting;                /* the first pass: count references, emit nothing */
    int norder;
} Loop;

static int member_of(const Loop *L, int v) {
    return L->g->fu.role[v] == FUSE_MEMBER && L->g->fu.group[v] == L->group;
}

/* Is v a member broadcasting along trailing dims, whose value is the row's? */
static int along_rows(const Loop *L, int v) {
    const Inst *in = &L->g->fn->insts[v];
    return L->row && member_of(L, v) && in->op == OP_BROADCAST && !member_of(L, ir_arg(L->g->fn, in, 0)) &&
           row_broadcast_inner(L->g->fn, in);
}

static int kind(const Loop *L, int v) {
    const Fn *fn = L->g->fn;
    const Inst *in = &fn->insts[v];
    if (in->op != OP_BROADCAST || member_of(L, ir_arg(fn, in, 0)) || row_broadcast_inner(fn, in))
        return COMPUTED;
    const Inst *a = &fn->insts[ir_arg(fn, in, 0)];
    return a->op == OP_CONSTANT && !is16(a->type.dtype) ? LITERAL : BEFORE;
}

/* An operand read inside the loop gets a local when read more than once,
 * or as a float (bf16/f16). */
static int loaded(const Fusion *fu, int a) { return fu->frefs[a] > 0 || fu->refs[a] > 1; }

/* Value a as an operand: its float value for a bf16/f16 one when `as_float`. */
static void ref(Loop *L, Str *b, int a, int as_float) {
    Gen *g = L->g;
    Fusion *fu = &g->fu;
    const Inst *in = &g->fn->insts[a];
    int fl = as_float && is16(in->type.dtype), member = member_of(L, a);
    if (member && kind(L, a) == LITERAL) {
        literal(b, in->type.dtype, g->fn->insts[ir_arg(g->fn, in, 0)].value);
        return;
    }
    if (!member && in->op == OP_CONSTANT && !is16(in->type.dtype)) {   /* a scalar loop */
        literal(b, in->type.dtype, in->value);
        return;
    }
    if (L->counting) {
        if (!member && !fu->refs[a] && !fu->frefs[a])
            fu->order[L->norder++] = a;
        (fl ? fu->frefs : fu->refs)[a]++;
    }
    if (member || loaded(fu, a))
        put(b, "%s%c", g->name[a], fl ? 'f' : 'i');
    else
        put(b, "%s[%s]", g->name[a], L->idx);
}

/* The formulas of lib/shardc_elementwise.def, as their text, by op: in
 * floating point and in i32. */
static const struct {
    const char *f, *i32;
} formula[OP_COUNT] = {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) [OP_##ID] = {#f, #fi},
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) [OP_##ID] = {#f, #fi},
#include "../../lib/shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
};

static int is_ident(char c) { return c == '_' || isalnum((unsigned char)c); }

/* Write formula t (lib/shardc_elementwise.def's notation) in dtype dt: the
 * operands x, y, z are args[0..2] (their float values where `fl`), K(c) and
 * M(f) get the float suffix in f32, T(f) is the helper sk_f_f32, _f64 or
 * _i32.  Numbers are copied whole, so the x of 0x1 is not an operand. */
static void expand(Loop *L, Str *b, const char *t, const int *args, int fl, int dt) {
    const char *suffix = dt == DT_F64 ? "" : "f", *type = dt == DT_F64 ? "f64" : dt == DT_I32 ? "i32" : "f32";
    while (*t) {
        size_t n = 1;
        if (*t >= '0' && *t <= '9') {
            while (is_ident(t[n]) || t[n] == '.')
                n++;
            put(b, "%.*s", (int)n, t);
        } else if (is_ident(*t)) {
            while (is_ident(t[n]))
                n++;
            if (n == 1 && *t >= 'x' && *t <= 'z')
                ref(L, b, args[*t - 'x'], fl);
            else if (n == 1 && t[1] == '(' && (*t == 'K' || *t == 'M' || *t == 'T')) {
                const char *inner = t + 2, *close = strchr(inner, ')');
                int len = (int)(close - inner);
                if (*t == 'T')
                    put(b, "sk_%.*s_%s", len, inner, type);
                else
                    put(b, "%.*s%s", len, inner, suffix);
                n = (size_t)(close + 1 - t);
            } else
                put(b, "%.*s", (int)n, t);
        } else
            put(b, "%c", *t);
        t += n;
    }
}

/* The expression of a computed member. */
static void member_expr(Loop *L, Str *b, int v) {
    Gen *g = L->g;
    const Fn *fn = g->fn;
    const Inst *in = &fn->insts[v];
    int dt = in->type.dtype, op = in->op, args[3] = {0, 0, 0};
    for (int i = 0; i < in->nargs && i < 3; i++)
        args[i] = ir_arg(fn, in, i);
    int from = fn->insts[args[0]].type.dtype;
    const char *t = "x";         /* copy, reshape, a broadcast of a member */
    int fl = 0, round = 0;       /* operands as floats; the result rounded to bf16/f16 */
    char cmp[16];
    if (op == OP_SELECT)
        t = "x ? y : z";
    else if (op == OP_COMPARE) {
        static const char *const dir[] = {"<", "<=", ">", ">=", "==", "!="};
        snprintf(cmp, sizeof cmp, "x %s y", dir[ir_attr(fn, in, 0)]);
        t = cmp;
        fl = 1;
    } else if (op == OP_CONVERT) {
        fl = 1;
        if (from == dt)
            t = "x";
        else if (dt == DT_BOOL)
            t = "x != 0";
        else if (dt == DT_I32)
            t = from == DT_BOOL ? "(int32_t)x" : "sk_to_i32(x)";
        else if (dt == DT_F64)
            t = "(double)x";
        else {                   /* f32, bf16, f16: through float */
            t = from == DT_F32 || is16(from) ? "x" : "(float)x";
            round = is16(dt);
        }
    } else if (op != OP_COPY && op != OP_RESHAPE && op != OP_BROADCAST) {
        t = dt == DT_I32 ? formula[op].i32 : formula[op].f;
        fl = 1;
        round = is16(dt);
    }
    int64_t inner = op == OP_BROADCAST && !member_of(L, args[0]) ? row_broadcast_inner(fn, in) : 0;
    if (inner && inner == L->row) {   /* along trailing dims: the row's element of the operand */
        put(b, "%s[row]", g->name[args[0]]);
        return;
    }
    if (inner) {             /* ... rows of several rows */
        put(b, "%s[row / %lld]", g->name[args[0]], (long long)(inner / L->row));
        return;
    }
    if (round)
        put(b, "%s(", from_float(dt));
    expand(L, b, t, args, fl, dt);
    if (round)
        put(b, ")");
}

void emit_fused(Gen *g, int group) {
    const Fn *fn = g->fn;
    Fusion *fu = &g->fu;
    FILE *o = g->out;
    int64_t n = shape_elems(&fn->insts[fu->last_member[group]].type);
    /* Broadcasts along trailing dims nest the loop: rows of the shortest
     * one's span, so that their operands are constant along the inner
     * loop, which the compiler vectorizes. */
    Loop L = {g, group, n == 1 ? "0" : "i", "        ", 0, 1, 0};
    for (int v = fu->first[group]; v >= 0; v = fu->next[v]) {
        const Inst *in = &fn->insts[v];
        int64_t inner = fu->role[v] == FUSE_MEMBER && in->op == OP_BROADCAST && !member_of(&L, ir_arg(fn, in, 0)) ?
                        row_broadcast_inner(fn, in) : 0;
        if (inner && (!L.row || inner < L.row))
            L.row = inner;
    }
    int64_t row = L.row;
    if (row)
        L.ind = "            ";
    Str e = {g->arena, NULL, 0, 0};
    for (int v = fu->first[group]; v >= 0; v = fu->next[v])     /* count the references */
        if (fu->role[v] == FUSE_MEMBER && kind(&L, v) == COMPUTED) {
            e.n = 0;
            member_expr(&L, &e, v);
        }
    L.counting = 0;
    for (int v = fu->first[group]; v >= 0; v = fu->next[v])
        if (fu->role[v] != FUSE_DEFERRED)
            emit_ir_comment(g, v);
    for (int v = fu->first[group]; v >= 0; v = fu->next[v])
        if (fu->role[v] == FUSE_MEMBER && fu->stored[v])
            fprintf(o, "    %s *%s = buf%d;\n", ctype_of[fn->insts[v].type.dtype], g->name[v], g->buf[v]);
    for (int v = fu->first[group]; v >= 0; v = fu->next[v]) {   /* broadcast elements */
        if (fu->role[v] != FUSE_MEMBER || kind(&L, v) != BEFORE)
            continue;
        int dt = fn->insts[v].type.dtype, a = ir_arg(fn, &fn->insts[v], 0);
        e.n = 0;
        if (fn->insts[a].op == OP_CONSTANT) {
            put(&e, "%s(", from_float(dt));
            literal(&e, DT_F32, fn->insts[a].value);
            put(&e, ")");
        } else
            put(&e, "*%s", g->name[a]);
        fprintf(o, "    const %s %si = %s;\n", ctype_of[dt], g->name[v], e.s);
        if (fu->frefs[v])
            fprintf(o, "    const float %sf = %s(%si);\n", g->name[v], to_float(dt), g->name[v]);
    }
    int par = n >= SK_PARALLEL_MIN;     /* long enough for a device's OpenMP threads */
    if (n == 1)
        fputs("    {\n", o);
    else if (row) {
        /* The row's values of broadcasts along trailing dims, read once per
         * row: loads the compiler could not hoist, since the loop's stores
         * might alias them for all it knows.  A long loop's rows are split
         * among the device's threads (SK_PARALLEL_ROWS). */
        if (par)
            fprintf(o, "    SK_PARALLEL_ROWS(%lld, for (int64_t row = 0; row < %lld; row++) {\n", (long long)n,
                    (long long)(n / row));
        else
            fprintf(o, "    for (int64_t row = 0; row < %lld; row++) {\n", (long long)(n / row));
        for (int v = fu->first[group]; v >= 0; v = fu->next[v])
            if (along_rows(&L, v) && (fu->refs[v] || fu->frefs[v] || fu->stored[v])) {
                e.n = 0;
                member_expr(&L, &e, v);
                fprintf(o, "        %s %si = %s;\n", ctype_of[fn->insts[v].type.dtype], g->name[v], e.s);
            }
        fprintf(o, "        SK_INDEPENDENT\n        for (int64_t i = row * %lld, end = i + %lld; i < end; i++) {\n",
                (long long)row, (long long)row);
    } else if (par)
        fprintf(o, "    SK_PARALLEL_FOR(%lld, for (int64_t i = 0; i < %lld; i++) {\n", (long long)n, (long long)n);
    else
        fprintf(o, "    SK_INDEPENDENT\n    for (int64_t i = 0; i < %lld; i++) {\n", (long long)n);
    for (int k = 0; k < L.norder; k++) {                       /* operands read more than once */
        int a = fu->order[k], dt = fn->insts[a].type.dtype;
        const char *nm = g->name[a];
        if (!loaded(fu, a))
            continue;
        if (fu->refs[a])
            fprintf(o, "%s%s %si = %s[%s];\n", L.ind, ctype_of[dt], nm, nm, L.idx);
        if (fu->frefs[a] && fu->refs[a])
            fprintf(o, "%sfloat %sf = %s(%si);\n", L.ind, nm, to_float(dt), nm);
        else if (fu->frefs[a])
            fprintf(o, "%sfloat %sf = %s(%s[%s]);\n", L.ind, nm, to_float(dt), nm, L.idx);
    }
    for (int v = fu->first[group]; v >= 0; v = fu->next[v]) {
        if (fu->role[v] != FUSE_MEMBER)
            continue;
        int dt = fn->insts[v].type.dtype, k = kind(&L, v);
        const char *nm = g->name[v];
        e.n = 0;
        if (k == LITERAL) {
            if (fu->stored[v]) {
                literal(&e, dt, fn->insts[ir_arg(fn, &fn->insts[v], 0)].value);
                fprintf(o, "%s%s[%s] = %s;\n", L.ind, nm, L.idx, e.s);
            }
            continue;
        }
        if (k == BEFORE || along_rows(&L, v)) {              /* its local is set before the loop */
            if (fu->stored[v])
                fprintf(o, "%s%s[%s] = %si;\n", L.ind, nm, L.idx, nm);
            continue;
        }
        member_expr(&L, &e, v);
        if (!fu->refs[v] && !fu->frefs[v]) {                  /* read only after the loop */
            fprintf(o, "%s%s[%s] = %s;\n", L.ind, nm, L.idx, e.s);
            continue;
        }
        fprintf(o, "%s%s %si = %s;\n", L.ind, ctype_of[dt], nm, e.s);
        if (fu->frefs[v])
            fprintf(o, "%sfloat %sf = %s(%si);\n", L.ind, nm, to_float(dt), nm);
        if (fu->stored[v])
            fprintf(o, "%s%s[%s] = %si;\n", L.ind, nm, L.idx, nm);
    }
    fputs(row ? (par ? "        }\n    });\n" : "        }\n    }\n") : par ? "    });\n" : "    }\n", o);
    for (int v = fu->first[group]; v >= 0; v = fu->next[v])    /* the scratch back to zero */
        fu->refs[v] = fu->frefs[v] = 0;
    for (int k = 0; k < L.norder; k++)
        fu->refs[fu->order[k]] = fu->frefs[fu->order[k]] = 0;
}
