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
    if (dt == DT_U32 || dt == DT_U8) {
        put(b, dt == DT_U8 ? "%llu" : "%lluu", (unsigned long long)x);
        return;
    }
    if (dt == DT_I64) {   /* constants are doubles: integers within 2^53 (sema's check), or +-2^63 (padding) */
        if (x >= 0x1p63 || x <= -0x1p63)
            put(b, x < 0 ? "INT64_MIN" : "INT64_MAX");
        else
            put(b, x < 0 ? "(INT64_C(%lld))" : "INT64_C(%lld)", (long long)x);
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
    int64_t row;                 /* elements per row when broadcasts nest the loop, or 0 */
    int by_column;               /* a broadcast along leading dims reads its operand at the row's j */
    int counting;                /* the first pass: count references, emit nothing */
    int norder;
    int staged;                  /* a row group with reductions: one inner loop per stage */
    int stage;                   /* the stage being written */
} Loop;

static int member_of(const Loop *L, int v) {
    return L->g->fu.role[v] == FUSE_MEMBER && L->g->fu.group[v] == L->group;
}

/* For a broadcast along trailing dims of a value from outside the group:
 * its span (row_broadcast_inner); else 0. */
static int64_t outside_span(const Loop *L, int v) {
    const Inst *in = &L->g->fn->insts[v];
    return in->op == OP_BROADCAST && !member_of(L, ir_arg(L->g->fn, in, 0)) ? row_broadcast_inner(L->g->fn, in) : 0;
}

/* Is v a member broadcasting along trailing dims, whose value is the row's? */
static int along_rows(const Loop *L, int v) { return L->row && member_of(L, v) && outside_span(L, v); }

static int kind(const Loop *L, int v) {
    const Fn *fn = L->g->fn;
    const Inst *in = &fn->insts[v];
    if (in->op != OP_BROADCAST || member_of(L, ir_arg(fn, in, 0)) || row_broadcast_inner(fn, in) ||
        col_broadcast_span(fn, in))
        return COMPUTED;
    const Inst *a = &fn->insts[ir_arg(fn, in, 0)];
    return a->op == OP_CONSTANT && !is16(a->type.dtype) ? LITERAL : BEFORE;
}

/* Is v a member with one value per row, computed outside the inner loops? */
static int row_value(const Loop *L, int v) { return member_of(L, v) && is_row_value(L->g->fn, &L->g->fu, v); }

/* Is v a reduction that stage `stage`'s inner loop accumulates? */
static int accumulates(const Loop *L, int v, int stage) {
    return member_of(L, v) && is_reduction(L->g->fn->insts[v].op) && L->g->fu.stage[v] == stage;
}

/* Is member v computed by an inner loop, as a local of its iteration? */
static int in_inner_loop(const Loop *L, int v) {
    return member_of(L, v) && kind(L, v) == COMPUTED && !along_rows(L, v) && !row_value(L, v);
}

/* Is member v's row, read by a later stage, kept for it: in a local
 * array, or in its host's row (choose_hosts)?  Else it is stored, and read
 * back from its buffer.  (Rows are at most ROW_SCRATCH_MAX bytes: fuse.c.) */
static int in_scratch(const Loop *L, int v) { return L->g->fu.cross[v] && !L->g->fu.stored[v]; }

/* An inner-loop member whose row is kept for a later stage. */
static int kept_row(const Loop *L, int v) { return in_inner_loop(L, v) && in_scratch(L, v); }

/* Is a a value from outside the group with the group's elements, read at
 * the loop's index, whose memory a stored member may share (a result
 * written in place over its operand, a loop's carry)?  Does member u read
 * one? */
static int outside_at_i(const Loop *L, int a) {
    const Fn *fn = L->g->fn;
    return !member_of(L, a) && fn->insts[a].op != OP_CONSTANT &&
           shape_elems(&fn->insts[a].type) == L->g->fu.elems[L->group];
}

static int reads_outside(const Loop *L, int u) {
    const Fn *fn = L->g->fn;
    const Inst *in = &fn->insts[u];
    for (int i = 0; i < in->nargs; i++)
        if (outside_at_i(L, ir_arg(fn, in, i)))
            return 1;
    return 0;
}

/* A row that a later stage reads is kept in the row of a stored member
 * (its host) rather than in a local array, when one of its dtype is
 * written at or after the row's last reader, with no read of an outside
 * value in between that might share the host's memory.  The stage that
 * computes the row (a softmax's exp, a layernorm's centring) then also
 * fetches the result's cache lines, which the last stage otherwise waits
 * for alone: the bench's softmax rows 15% faster.  One pass over the
 * members in program order (their stages never decrease): fu->link
 * counts a row's readers still to come, then chains the rows whose
 * readers are all past, one queue per dtype, until a host takes one. */
static void choose_hosts(Loop *L) {
    Fusion *fu = &L->g->fu;
    const Fn *fn = L->g->fn;
    int head[DT_COUNT], tail[DT_COUNT], barrier = -1;   /* the last member that reads outside */
    for (int t = 0; t < DT_COUNT; t++)
        head[t] = tail[t] = -1;
    for (int u = fu->first[L->group]; u >= 0; u = fu->next[u]) {
        if (!member_of(L, u))
            continue;
        const Inst *in = &fn->insts[u];
        if (reads_outside(L, u))
            barrier = u;
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(fn, in, i), t = fn->insts[a].type.dtype;
            if (!kept_row(L, a) || --fu->link[a] || a < barrier)
                continue;
            fu->link[a] = -1;
            *(tail[t] >= 0 ? &fu->link[tail[t]] : &head[t]) = a;
            tail[t] = a;
        }
        int t = in->type.dtype;
        if (in_inner_loop(L, u) && fu->stored[u] && t < DT_COUNT) {
            while (head[t] >= 0 && head[t] < barrier)
                head[t] = fu->link[head[t]];
            if (head[t] >= 0) {
                fu->host[head[t]] = u;
                head[t] = fu->link[head[t]];
            }
            if (head[t] < 0)
                tail[t] = -1;
        }
        if (kept_row(L, u))
            fu->link[u] = fu->uses[u];
    }
}

/* Is a a value an earlier stage computed, which the stage being written
 * reads where it was kept? */
static int from_earlier_stage(const Loop *L, int a) {
    return L->staged && in_inner_loop(L, a) && L->g->fu.stage[a] < L->stage;
}

/* Where an earlier stage kept value a: the row of its host or its own
 * buffer, read at [i], or (*local) its row-sized local array NAMEs, read
 * at [j]; the name. */
static const char *kept_in(const Loop *L, int a, int *local) {
    int host = L->g->fu.host[a];
    *local = in_scratch(L, a) && host < 0;
    return L->g->name[host >= 0 ? host : a];
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
    if (from_earlier_stage(L, a)) {
        int local;
        const char *nm = kept_in(L, a, &local), *at = local ? "s[j]" : "[i]";
        if (fl)
            put(b, "%s(%s%s)", to_float(in->type.dtype), nm, at);
        else
            put(b, "%s%s", nm, at);
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

static int is_ident(char c) { return c == '_' || isalnum((unsigned char)c); }

/* Write formula t (lib/shardc_elementwise.def's notation) in dtype dt: the
 * operands x, y, z are args[0..2] (their float values where `fl`), K(c) and
 * M(f) get the float suffix in f32, T(f) is the helper sk_f_f32, _f64 or
 * the integer dtype's (_i32, _i64, _u8, _u32), and the integer formula's I
 * and U are the dtype's C type and the unsigned type of its width.  Numbers
 * are copied whole, so the x of 0x1 is not an operand. */
static void expand(Loop *L, Str *b, const char *t, const int *args, int fl, int dt) {
    int integer = dt == DT_I32 || dt == DT_I64 || dt == DT_U8 || dt == DT_U32;
    const char *suffix = dt == DT_F64 ? "" : "f", *type = dt == DT_F64 ? "f64" : integer ? dtype_name[dt] : "f32";
    const char *unsig = dt == DT_I32 ? "uint32_t" : dt == DT_I64 ? "uint64_t" : dt == DT_U8 ? "uint8_t" : "uint32_t";
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
            else if (n == 1 && integer && (*t == 'I' || *t == 'U'))
                put(b, "%s", *t == 'U' ? unsig : ctype_of[dt]);
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
            t = from == DT_BOOL ? "(int32_t)x" : from == DT_I64 ? "sk_wrap_i32(x)" : "sk_to_i32(x)";
        else if (dt == DT_U32)
            t = from == DT_BOOL || from == DT_I64 ? "(uint32_t)x" : "sk_to_u32(x)";
        else if (dt == DT_I64)   /* integers by value, floats toward zero (sk_convert's convert_wide) */
            t = dtype_is_float(from) ? "sk_to_i64(x)" : "(int64_t)x";
        else if (dt == DT_U8)
            t = dtype_is_float(from) ? "sk_to_u8(x)" : "(uint8_t)x";
        else if (dt == DT_F64)
            t = "(double)x";
        else {                   /* f32, bf16, f16: through float */
            t = from == DT_F32 || is16(from) ? "x" : "(float)x";
            round = is16(dt);
        }
    } else if (op != OP_COPY && op != OP_RESHAPE && op != OP_BROADCAST) {
        t = dt == DT_I32 || dt == DT_I64 || dt == DT_U8 || dt == DT_U32 ? op_formula[op].i32 : op_formula[op].f;
        fl = 1;
        round = is16(dt);
    }
    if (col_broadcast_span(fn, in)) {   /* along leading dims: the operand's element j of the row */
        put(b, "%s[j]", g->name[args[0]]);
        return;
    }
    int64_t inner = outside_span(L, v);
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

static Reducer reducer_of(const Fn *fn, int v) {
    return fn->insts[v].op == OP_DOT ? RED_SUM : inst_reducer(fn, &fn->insts[v]);
}

/* Member v's store, when it is stored and has no statement of its own: a
 * literal, or a value whose local is set before the loop (e: scratch). */
static void store_unstated(Loop *L, Str *e, int v, const char *ind, const char *idx) {
    Gen *g = L->g;
    const Fn *fn = g->fn;
    const char *nm = g->name[v];
    if (!g->fu.stored[v])
        return;
    if (kind(L, v) != LITERAL) {
        fprintf(g->out, "%s%s[%s] = %si;\n", ind, nm, idx, nm);
        return;
    }
    e->n = 0;
    literal(e, fn->insts[v].type.dtype, fn->insts[ir_arg(fn, &fn->insts[v], 0)].value);
    fprintf(g->out, "%s%s[%s] = %s;\n", ind, nm, idx, e->s);
}

/* Writes member v's statements in the inner loop (e: scratch). */
static void emit_member(Loop *L, Str *e, int v) {
    Gen *g = L->g;
    const Fn *fn = g->fn;
    Fusion *fu = &g->fu;
    FILE *o = g->out;
    int dt = fn->insts[v].type.dtype, k = kind(L, v);
    const char *nm = g->name[v];
    e->n = 0;
    if (k == LITERAL || k == BEFORE || along_rows(L, v)) {
        store_unstated(L, e, v, L->ind, L->idx);
        return;
    }
    if (is_reduction(fn->insts[v].op)) {                /* accumulate the row's */
        ref(L, e, ir_arg(fn, &fn->insts[v], 0), 0);
        Reducer r = reducer_of(fn, v);
        if (fn->insts[v].op == OP_DOT) {   /* the product, then the sum: no fma the kernel does not do */
            put(e, " * ");
            ref(L, e, ir_arg(fn, &fn->insts[v], 1), 0);
            fprintf(o, "%s%s %sx = %s;\n%s%si += %sx;\n", L->ind, ctype_of[dt], nm, e->s, L->ind, nm, nm);
        } else if (r == RED_SUM)
            fprintf(o, "%s%si += %s;\n", L->ind, nm, e->s);
        else {   /* NaN propagates: flagged apart, since lanes are combined by comparisons */
            fprintf(o, "%s%s %sx = %s;\n", L->ind, ctype_of[dt], nm, e->s);
            fprintf(o, "%s%si = %sx %s %si ? %sx : %si;\n", L->ind, nm, nm, reducer_info[r].keeps, nm, nm, nm);
            fprintf(o, "%s%snan |= %sx != %sx;\n", L->ind, nm, nm, nm);
        }
        return;
    }
    member_expr(L, e, v);
    int scratch = L->staged && in_scratch(L, v);
    if (!fu->refs[v] && !fu->frefs[v] && !scratch) {   /* read only after the loop */
        fprintf(o, "%s%s[%s] = %s;\n", L->ind, nm, L->idx, e->s);
        return;
    }
    fprintf(o, "%s%s %si = %s;\n", L->ind, ctype_of[dt], nm, e->s);
    if (fu->frefs[v])
        fprintf(o, "%sfloat %sf = %s(%si);\n", L->ind, nm, to_float(dt), nm);
    if (fu->stored[v])
        fprintf(o, "%s%s[%s] = %si;\n", L->ind, nm, L->idx, nm);
    if (scratch && fu->host[v] >= 0)
        fprintf(o, "%s%s[i] = %si;   /* kept in %s's row */\n", L->ind, g->name[fu->host[v]], nm, g->name[fu->host[v]]);
    else if (scratch)
        fprintf(o, "%s%ss[j] = %si;\n", L->ind, nm, nm);
}

/* The reference counts of the members of stage `stage` (all, when -1) and
 * of what they read: which get locals, and the operands to load once. */
static void count_refs(Loop *L, int stage) {
    Fusion *fu = &L->g->fu;
    Str e = {L->g->arena, NULL, 0, 0};
    L->counting = 1;
    L->norder = 0;
    for (int v = fu->first[L->group]; v >= 0; v = fu->next[v]) {
        if (fu->role[v] != FUSE_MEMBER || kind(L, v) != COMPUTED || (stage >= 0 && fu->stage[v] != stage))
            continue;
        e.n = 0;
        if (is_reduction(L->g->fn->insts[v].op)) {
            for (int i = 0; i < L->g->fn->insts[v].nargs; i++)
                ref(L, &e, ir_arg(L->g->fn, &L->g->fn->insts[v], i), 0);
        } else if (!row_value(L, v) || stage < 0)
            member_expr(L, &e, v);
    }
    L->counting = 0;
}

/* Back to zero: the counts of the group's members and of what they read. */
static void clear_refs(Loop *L) {
    Fusion *fu = &L->g->fu;
    for (int v = fu->first[L->group]; v >= 0; v = fu->next[v])
        fu->refs[v] = fu->frefs[v] = 0;
    for (int k = 0; k < L->norder; k++)
        fu->refs[fu->order[k]] = fu->frefs[fu->order[k]] = 0;
    L->norder = 0;
}

/* Operands read more than once in the inner loop: one load each. */
static void emit_loads(Loop *L) {
    const Fn *fn = L->g->fn;
    Fusion *fu = &L->g->fu;
    FILE *o = L->g->out;
    for (int k = 0; k < L->norder; k++) {
        int a = fu->order[k], dt = fn->insts[a].type.dtype;
        const char *nm = L->g->name[a];
        if (!loaded(fu, a))
            continue;
        if (fu->refs[a])
            fprintf(o, "%s%s %si = %s[%s];\n", L->ind, ctype_of[dt], nm, nm, L->idx);
        if (fu->frefs[a] && fu->refs[a])
            fprintf(o, "%sfloat %sf = %s(%si);\n", L->ind, nm, to_float(dt), nm);
        else if (fu->frefs[a])
            fprintf(o, "%sfloat %sf = %s(%s[%s]);\n", L->ind, nm, to_float(dt), nm, L->idx);
    }
}

/* Does member v have a statement in the inner loop of the stage being
 * written (a reduction: its accumulation)? */
static int in_stage_loop(const Loop *L, int v) {
    return (member_of(L, v) && L->g->fu.stage[v] == L->stage && !row_value(L, v)) || accumulates(L, v, L->stage);
}

/* The reduction that is all the inner loop of the stage being written
 * would do, when it is an f32 sum, max or min of a row of at least 64
 * elements read as it is (an operand, or a row an earlier stage kept):
 * such a stage is a call of lib/row_reduce.c, whose four accumulators run
 * at three times the loop's rate, and `row` gets the row's address.  Else
 * -1. */
static int row_call(Loop *L, Str *row) {
    Gen *g = L->g;
    const Fn *fn = g->fn;
    int v = -1;
    if (L->row < 64)
        return -1;
    for (int u = g->fu.first[L->group]; u >= 0; u = g->fu.next[u]) {
        if (!in_stage_loop(L, u))
            continue;
        if (v >= 0 || !accumulates(L, u, L->stage))
            return -1;
        v = u;
    }
    if (v < 0 || fn->insts[v].op != OP_REDUCE || fn->insts[v].type.dtype != DT_F32)
        return -1;
    int a = ir_arg(fn, &fn->insts[v], 0), local = 0;
    const char *nm = from_earlier_stage(L, a) ? kept_in(L, a, &local) : outside_at_i(L, a) ? g->name[a] : NULL;
    if (!nm)
        return -1;
    if (local)
        put(row, "%ss", nm);
    else
        put(row, "%s + row * %lld", nm, (long long)L->row);
    return v;
}

/* The row values that stage `stage` starts with: the instructions on row
 * values, once per row, and the accumulators of its reductions (the
 * reduction `call` computed by its call, with the row at `row`). */
static void emit_row_values(Loop *L, Str *e, int stage, int call, const char *row) {
    Gen *g = L->g;
    const Fn *fn = g->fn;
    Fusion *fu = &g->fu;
    for (int v = fu->first[L->group]; v >= 0; v = fu->next[v]) {
        if (!row_value(L, v) || fu->stage[v] != stage)
            continue;
        int dt = fn->insts[v].type.dtype;
        const char *nm = g->name[v], *ct = ctype_of[dt];
        e->n = 0;
        if (kind(L, v) != COMPUTED) {   /* a literal, or a broadcast of one element: no statement */
            store_unstated(L, e, v, "        ", "row");
            continue;
        }
        if (v == call) {
            fprintf(g->out, "        float %si = sk_row_%s_f32(%s, %lld);\n", nm,
                    reducer_info[reducer_of(fn, v)].builtin, row, (long long)L->row);
            continue;
        }
        if (is_reduction(fn->insts[v].op)) {
            Reducer r = reducer_of(fn, v);
            fprintf(g->out, "        %s %si = %s;\n", ct, nm, reducer_info[r].start);
            if (r != RED_SUM)
                fprintf(g->out, "        int %snan = 0;\n", nm);
            continue;
        }
        L->idx = "row";           /* no counts (cleared): operands read at [row], no loads */
        member_expr(L, e, v);
        L->idx = "i";
        fprintf(g->out, "        %s %si = %s;\n", ct, nm, e->s);
        if (fu->stored[v])
            fprintf(g->out, "        %s[row] = %si;\n", nm, nm);
    }
}

/* The inner loop over the row's elements of the stage being written, if
 * it has anything to do. */
static void emit_stage_loop(Loop *L, Str *e) {
    Gen *g = L->g;
    const Fn *fn = g->fn;
    Fusion *fu = &g->fu;
    FILE *o = g->out;
    int stage = L->stage;
    count_refs(L, stage);
    Str clauses = {g->arena, NULL, 0, 0};
    for (int v = fu->first[L->group]; v >= 0; v = fu->next[v])
        if (accumulates(L, v, stage)) {
            Reducer r = reducer_of(fn, v);
            put(&clauses, "%sreduction(%s : %si)", clauses.n ? " " : "", reducer_info[r].omp, g->name[v]);
            if (r != RED_SUM)
                put(&clauses, " reduction(| : %snan)", g->name[v]);
        }
    /* The body first, to know whether it indexes the buffers by i. */
    char *body = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&body, &len);
    if (!mem) {
        fputs("shardc: out of memory\n", stderr);
        abort();
    }
    g->out = mem;
    emit_loads(L);
    for (int v = fu->first[L->group]; v >= 0; v = fu->next[v])
        if (in_stage_loop(L, v))
            emit_member(L, e, v);
    fclose(mem);
    g->out = o;
    if (!*body && !clauses.n) {   /* only row values: no loop */
        free(body);
        return;
    }
    if (clauses.n)
        fprintf(o, "        SK_SIMD_REDUCE(%s)\n", clauses.s);
    else
        fputs("        SK_SIMD\n", o);
    fprintf(o, "        for (int64_t j = 0; j < %lld; j++) {\n", (long long)L->row);
    if (strstr(body, "[i]"))
        fprintf(o, "            const int64_t i = row * %lld + j;\n", (long long)L->row);
    fputs(body, o);
    free(body);
    fputs("        }\n", o);
}

/* One stage of a row group: its row values, then its inner loop over the
 * row's elements (or the call that is all it would do), then its
 * reductions' results. */
static void emit_stage(Loop *L, Str *e, int stage) {
    Gen *g = L->g;
    const Fn *fn = g->fn;
    Fusion *fu = &g->fu;
    FILE *o = g->out;
    L->stage = stage;
    clear_refs(L);
    Str row = {g->arena, NULL, 0, 0};
    int call = row_call(L, &row);
    emit_row_values(L, e, stage, call, row.s);
    if (call < 0)
        emit_stage_loop(L, e);
    for (int v = fu->first[L->group]; v >= 0; v = fu->next[v]) {
        if (!accumulates(L, v, stage))
            continue;
        const char *nm = g->name[v];
        if (reducer_of(fn, v) != RED_SUM && v != call)   /* the call's result is NaN itself */
            fprintf(o, "        if (%snan)\n            %si = NAN;\n", nm, nm);
        if (fu->stored[v])
            fprintf(o, "        %s[row] = %si;\n", nm, nm);
    }
}

static void emit_loop(Gen *g, int group) {
    const Fn *fn = g->fn;
    Fusion *fu = &g->fu;
    FILE *o = g->out;
    int64_t n = fu->elems[group];
    /* Broadcasts along trailing dims nest the loop: rows of the shortest
     * one's span, so that their operands are constant along the inner
     * loop, which the compiler vectorizes.  Reductions make it rows of
     * their span, in stages. */
    Loop L = {g, group, n == 1 ? "0" : "i", "        ", 0, 0, 0, 0, fu->row[group] != 0, 0};
    int64_t column = 0;          /* a broadcast along leading dims: its span, a divisor of the others' (fuse.c) */
    for (int v = fu->first[group]; v >= 0; v = fu->next[v]) {
        int64_t inner = member_of(&L, v) ? outside_span(&L, v) : 0;
        if (inner && (!L.row || inner < L.row))
            L.row = inner;
        if (member_of(&L, v) && !column)
            column = col_broadcast_span(fn, &fn->insts[v]);
    }
    L.by_column = column != 0;
    if (column)
        L.row = column;
    if (L.staged)
        L.row = fu->row[group];
    int64_t row = L.row;
    if (row)
        L.ind = "            ";
    Str e = {g->arena, NULL, 0, 0};
    if (L.staged)
        choose_hosts(&L);
    count_refs(&L, -1);
    for (int v = fu->first[group]; v >= 0; v = fu->next[v])
        if (fu->role[v] != FUSE_DEFERRED)
            emit_ir_comment(g, v);
    for (int v = fu->first[group]; v >= 0; v = fu->next[v])
        if (fu->role[v] == FUSE_MEMBER && fu->stored[v])
            emit_storage(g, v);
    fputs("    sk_launch_begin(ctx);   /* the loop is work on the device */\n", o);
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
    fprintf(o, "    int64_t %st = sk_trace_begin();\n", g->name[fu->last_member[group]]);   /* emit_fused */
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
        if (L.staged) {
            for (int v = fu->first[group]; v >= 0; v = fu->next[v])
                if (kept_row(&L, v) && fu->host[v] < 0)
                    fprintf(o, "        %s %ss[%lld];   /* the row, for a later stage */\n",
                            ctype_of[fn->insts[v].type.dtype], g->name[v], (long long)row);
            for (int k = 0; k < fu->nstages[group]; k++)
                emit_stage(&L, &e, k);
            fputs(par ? "    });\n" : "    }\n", o);
            clear_refs(&L);
            return;
        }
        if (L.by_column)
            fprintf(o, "        SK_SIMD\n        for (int64_t j = 0; j < %lld; j++) {\n"
                       "            const int64_t i = row * %lld + j;\n", (long long)row, (long long)row);
        else
            fprintf(o, "        SK_SIMD\n        for (int64_t i = row * %lld; i < (row + 1) * %lld; i++) {\n",
                    (long long)row, (long long)row);
    } else if (par)
        fprintf(o, "    SK_PARALLEL_FOR(%lld, for (int64_t i = 0; i < %lld; i++) {\n", (long long)n, (long long)n);
    else
        fprintf(o, "    SK_SIMD\n    for (int64_t i = 0; i < %lld; i++) {\n", (long long)n);
    emit_loads(&L);
    for (int v = fu->first[group]; v >= 0; v = fu->next[v])
        if (fu->role[v] == FUSE_MEMBER)
            emit_member(&L, &e, v);
    fputs(row ? (par ? "        }\n    });\n" : "        }\n    }\n") : par ? "    });\n" : "    }\n", o);
    clear_refs(&L);
}

/* The loop, timed for SHARDC_TRACE as one event (lib/shardc_trace.h): its
 * begin time, read right before the loop, is a variable named after its
 * last member, as a start's handle is. */
void emit_fused(Gen *g, int group) {
    int64_t bytes;
    const char *name = trace_loop_name(g, group, &bytes);
    const char *t = g->name[g->fu.last_member[group]];
    emit_loop(g, group);         /* begins with sk_launch_begin, then the clock's read */
    fprintf(g->out, "    sk_launch_end(ctx);\n    sk_trace_end(dev, \"%s\", %lld, %st);\n", name, (long long)bytes, t);
}
