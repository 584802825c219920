/* Elementwise fusion: which instructions share one loop.
 *
 * A group is a run of elementwise instructions (unary, binary, convert,
 * compare, select, reshape, broadcasts of one element, broadcasts along
 * trailing dims, as softmax's of a row's max and sum, and along leading
 * dims, as a bias's or a layernorm scale's) with the same
 * element count, taken in program order; fused.c emits it as one loop at the
 * place of its last member, computing element i of every member in turn.
 * Values read only inside the group stay in locals; the others are stored.
 *
 * Between two members, an instruction that is not elementwise, reads no
 * member and writes no buffer a member has read may stay in the group's way:
 * it is emitted at its place, so before the loop (a constant, a broadcast
 * that is not of one element, a dot, a collective's done: a bias broadcast
 * the scheduler put between an all-reduce's start and done joins the add
 * after the done).  Anything else ends the group: a collective start, a
 * call, the return, an instruction that reads a member, an elementwise one
 * of another element count (it starts the next group).  Nothing moves
 * across a collective's start or a call.
 *
 * Why the loop computes what the instructions did, with the scheduler's
 * buffer reuse (docs/scheduling.md: an instruction never writes a buffer it
 * reads, and a buffer is reused only after its value's last read):
 *  - a stored member is read after the group, so its buffer holds nothing
 *    else during the group, and members that read an older value of that
 *    buffer come before it: in iteration i they read element i before it is
 *    written.  That needs elements no wider than theirs, and as wide in a
 *    loop long enough for several threads (a narrower element i lies in
 *    bytes of an earlier element, which another thread may not have read
 *    yet), which joining checks;
 *  - an instruction emitted before the loop writes a buffer that no member
 *    read before it (checked) and no stored member writes (those are live);
 *  - a broadcast's element is read once before the loop, and members read
 *    no constant: they use its literal (a bf16/f16 one only in a broadcast);
 *  - a broadcast along trailing dims reads element i / inner of its operand
 *    in iteration i, one along leading dims element i % span, so later
 *    iterations read elements that earlier ones could have written: no
 *    stored member may write the operand's buffer.  A broadcast along
 *    leading dims makes the loop rows of its span (the inner index is the
 *    operand's), so it joins only a group whose rows can be that span.
 * Row groups.  A reduction over trailing dims (sum, max or min, f32 or f64:
 * softmax's row max and row sum, layernorm's mean and variance) joins the
 * group of its operand's elements: the loop nests by rows of the reduced
 * span, and each row accumulates the reduction in a local.  Elementwise
 * instructions on one value per row (`1 / total`, `var / D + eps`) join
 * too, computed once per row; and the broadcasts of those row values back
 * along the row.  A member that needs a row value of the same row's
 * reduction starts a new stage: each row runs its stages' inner loops one
 * after the other, so the row is read from memory once and is in cache for
 * the next stages (softmax: one pass over memory, not five).  Stages follow
 * program order (a member's stage is never below an earlier member's), so
 * every buffer element is still read and written in program order; the row
 * values are written to their buffers (when read after the group) at their
 * stage, once per row, into buffers no member reads or writes.
 *
 * A constant that only members of one group read is folded into the group:
 * it is never stored.  A constant that only fusable instructions read, in a
 * buffer a member read, is stored after the loop instead of before: its
 * readers in the group use the literal, and the others come later.
 *
 * Every step is linear in the instructions and their operands. */
#include "fuse.h"

#include "../../lib/shardc_parallel.h"

#include <string.h>

/* Do operands first .. nargs-1 have n elements of dtype dt (-1: any)? */
static int args_are(const Fn *fn, const Inst *in, int first, int64_t n, int dt) {
    for (int i = first; i < in->nargs; i++) {
        const Shape *s = &fn->insts[ir_arg(fn, in, i)].type;
        if (s->dtype >= DT_TUPLE || shape_elems(s) != n || (dt >= 0 && s->dtype != dt))
            return 0;
    }
    return 1;
}

int64_t row_broadcast_inner(const Fn *fn, const Inst *in) {
    if (in->op != OP_BROADCAST || in->nargs != 1)
        return 0;
    const Shape *a = &fn->insts[ir_arg(fn, in, 0)].type;
    int dt = in->type.dtype;
    if (a->dtype != dt || dt == DT_BF16 || dt == DT_F16 || dt >= DT_TUPLE || a->rank != in->nattrs ||
        a->rank >= in->type.rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (ir_attr(fn, in, d) != d || a->dims[d] != in->type.dims[d])
            return 0;
    int64_t m = shape_elems(a), n = shape_elems(&in->type);
    return m > 1 && n > m ? n / m : 0;
}

int64_t col_broadcast_span(const Fn *fn, const Inst *in) {
    if (in->op != OP_BROADCAST || in->nargs != 1)
        return 0;
    const Shape *a = &fn->insts[ir_arg(fn, in, 0)].type;
    int dt = in->type.dtype, lead = in->type.rank - a->rank;
    if (a->dtype != dt || dt >= DT_TUPLE || a->rank != in->nattrs || lead <= 0)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (ir_attr(fn, in, d) != lead + d || a->dims[d] != in->type.dims[lead + d])
            return 0;
    int64_t m = shape_elems(a), n = shape_elems(&in->type);
    return m > 1 && n > m ? m : 0;
}

/* A dot of two operands of one shape that sums their product over the
 * trailing dims, batched over the leading ones (no free dims: layernorm's
 * sum of squares): a row sum of products. */
static int row_dot(const Fn *fn, const Inst *in) {
    const Shape *a = &fn->insts[ir_arg(fn, in, 0)].type, *b = &fn->insts[ir_arg(fn, in, 1)].type;
    if (a->rank != b->rank || a->dtype != b->dtype || memcmp(a->dims, b->dims, sizeof a->dims[0] * a->rank))
        return 0;
    DotDims dd;
    dot_dims(fn, in, &dd);
    if (dd.nbatch + dd.ncontract != a->rank || dd.ncontract < 1)
        return 0;
    for (int i = 0; i < dd.nbatch; i++)
        if (dd.lhs_batch[i] != i || dd.rhs_batch[i] != i)
            return 0;
    for (int i = 0; i < dd.ncontract; i++)
        if (dd.lhs_contract[i] != dd.nbatch + i || dd.rhs_contract[i] != dd.nbatch + i)
            return 0;
    return 1;
}

/* A reduce over the trailing dims of its operand (attrs: reducer, dims). */
static int reduces_trailing(const Fn *fn, const Inst *in) {
    int k = in->nattrs - 1, rank = fn->insts[ir_arg(fn, in, 0)].type.rank;
    for (int i = 0; i < k; i++)
        if (ir_attr(fn, in, 1 + i) != rank - k + i)
            return 0;
    return k >= 1;
}

int64_t row_reduce_inner(const Fn *fn, const Inst *in) {
    int reduce = in->op == OP_REDUCE && in->nargs == 1, dot = in->op == OP_DOT && in->nargs == 2;
    if (!(reduce || dot) || in->flags & INST_ASYNC || in->place)
        return 0;
    for (int i = 0; i < in->nargs; i++)     /* a loop reads runs; sk_dot_strided reads a strided view */
        if (fn->insts[ir_arg(fn, in, i)].flags & INST_STRIDED)
            return 0;
    const Shape *a = &fn->insts[ir_arg(fn, in, 0)].type;
    int dt = in->type.dtype;
    if ((dt != DT_F32 && dt != DT_F64) || a->dtype != dt || !(dot ? row_dot(fn, in) : reduces_trailing(fn, in)))
        return 0;
    /* One row: sk_reduce splits it among threads.  A row too long for the
     * local arrays that carry values from stage to stage: sk_reduce too. */
    int64_t n = shape_elems(a), m = shape_elems(&in->type);
    return m > 1 && n > m && (n / m) * 8 <= ROW_SCRATCH_MAX ? n / m : 0;
}

int64_t fusable_elems(const Fn *fn, int v) {
    const Inst *in = &fn->insts[v];
    int dt = in->type.dtype, op = in->op;
    if (in->flags & (INST_IN_FOLD | INST_VIEW) || ends_fold(fn, v))   /* a dot's epilogue: one kernel call; a view: none */
        return -1;
    if (op == OP_REDUCE || op == OP_DOT)
        return row_reduce_inner(fn, in) ? shape_elems(&fn->insts[ir_arg(fn, in, 0)].type) : -1;
    if (!(op_info[op].flags & OPF_FUSIBLE) || dt >= DT_TUPLE || in->flags & INST_ASYNC || in->place)
        return -1;                 /* placed on a submesh: guarded alone (kernels.c) */
    int64_t n = shape_elems(&in->type);
    if (n <= 0 || (op_info[op].nargs >= 0 && in->nargs != op_info[op].nargs))
        return -1;
    switch (op) {
    case OP_CONVERT: return args_are(fn, in, 0, n, -1) ? n : -1;
    case OP_COMPARE: {
        int a = fn->insts[ir_arg(fn, in, 0)].type.dtype;
        return dt == DT_BOOL && ir_attr(fn, in, 0) >= CMP_LT && ir_attr(fn, in, 0) <= CMP_NE &&
               args_are(fn, in, 0, n, a) ? n : -1;
    }
    case OP_SELECT:
        return args_are(fn, in, 0, n, -1) && fn->insts[ir_arg(fn, in, 0)].type.dtype == DT_BOOL &&
               args_are(fn, in, 1, n, dt) ? n : -1;
    case OP_BROADCAST:
        return args_are(fn, in, 0, 1, dt) || row_broadcast_inner(fn, in) || col_broadcast_span(fn, in) ? n : -1;
    case OP_RESHAPE: return args_are(fn, in, 0, n, dt) ? n : -1;
    default:                       /* unary and binary arithmetic, in the dtypes the kernels take */
        return op_accepts(op, dt) && args_are(fn, in, 0, n, dt) ? n : -1;
    }
}

typedef struct {
    const Fn *fn;
    Fusion *fu;
    int *mem;                    /* per value: the buffer it is in (a done: its start's), -1 none */
    int *read_epoch;             /* per buffer: the group that last read it */
    int *read_min, *read_max;    /* ... the element sizes read element by element (0: none) */
    int *pinned_epoch;           /* per buffer: the group that reads it along trailing dims */
    int *nmembers;               /* per group */
    int epoch;                   /* the open group's, counting dissolved ones */
    int *literal_uses;           /* per constant: reads by fusable instructions that would use its literal */
    int *deferred, ndeferred;    /* constants to emit after the open group's loop */
    int64_t min_inner;           /* the open group's least span of broadcasts along trailing dims, 0 none */
    int64_t col;                 /* the open group's span of broadcasts along leading dims (its rows), 0 none */
} Fuser;

static int elem_size(const Fn *fn, int v) { return dtype_size(fn->insts[v].type.dtype); }

int uses_literal(const Fn *fn, const Inst *member, int a) {
    const Inst *c = &fn->insts[a];
    return c->op == OP_CONSTANT && (member->op == OP_BROADCAST || (c->type.dtype != DT_BF16 && c->type.dtype != DT_F16));
}

/* Is v a member of group g with one value per row (a reduction, or an
 * instruction on row values)? */
static int row_member(const Fuser *s, int g, int v) {
    return s->fu->role[v] == FUSE_MEMBER && s->fu->group[v] == g && is_row_value(s->fn, s->fu, v);
}

/* May row value v (e elements: a reduction of span `inner`, or an
 * instruction on row values) join group g?  It writes its buffer element
 * `row` once per row: no member may have read that buffer (an old value's
 * element would be overwritten in another row's iteration). */
static int can_join_row(const Fuser *s, int g, int v, int64_t e, int64_t inner) {
    const Fn *fn = s->fn;
    const Inst *in = &fn->insts[v];
    int b = s->mem[v];
    if (b >= 0 && (s->read_epoch[b] == s->epoch || s->pinned_epoch[b] == s->epoch))
        return 0;
    int64_t row = s->fu->row[g];
    if (inner)                   /* a reduction of the group's elements */
        return e == s->fu->elems[g] && (!row || row == inner) && (!s->min_inner || s->min_inner % inner == 0) &&
               (!s->col || s->col == inner);
    if (!row || e * row != s->fu->elems[g] || in->type.dtype == DT_BF16 || in->type.dtype == DT_F16)
        return 0;
    for (int i = 0; i < in->nargs; i++) {   /* row values, literals and values of one element per row */
        int a = ir_arg(fn, in, i), dt = fn->insts[a].type.dtype;
        if ((!row_member(s, g, a) && s->fu->role[a] == FUSE_MEMBER && s->fu->group[a] == g) || dt == DT_BF16 ||
            dt == DT_F16)
            return 0;
    }
    return 1;
}

/* May broadcast v along trailing dims (by `inner`) join group g?  A row
 * value of the group is the row's own: its broadcast must span one row. */
static int can_join_broadcast(const Fuser *s, int g, int v, int64_t inner) {
    int a = ir_arg(s->fn, &s->fn->insts[v], 0);
    int64_t row = s->fu->row[g];
    if (row_member(s, g, a))
        return inner == row;
    return (!row || inner % row == 0) && (!s->col || inner % s->col == 0);
}

/* May broadcast v along leading dims (of `span` elements, read at the
 * inner loop's j) join group g?  Its span is the group's rows: those of
 * its reductions, and a divisor of every broadcast along trailing dims. */
static int can_join_column(const Fuser *s, int g, int v, int64_t span) {
    int a = ir_arg(s->fn, &s->fn->insts[v], 0);
    if (s->fu->role[a] == FUSE_MEMBER && s->fu->group[a] == g)
        return 0;
    int64_t row = s->fu->row[g];
    return (!s->col || s->col == span) && (!row || row == span) && (!s->min_inner || s->min_inner % span == 0);
}

static int can_write(const Fuser *s, int g, int v);

/* May v (e elements, fusable) join the open group g? */
static int can_join(const Fuser *s, int g, int v, int64_t e) {
    const Inst *in = &s->fn->insts[v];
    int64_t inner = row_reduce_inner(s->fn, in), binner = row_broadcast_inner(s->fn, in);
    int64_t span = col_broadcast_span(s->fn, in);
    if (inner || e != s->fu->elems[g])
        return can_join_row(s, g, v, e, inner) && can_write(s, g, v);
    if (span)
        return can_join_column(s, g, v, span) && can_write(s, g, v);
    return (!binner || can_join_broadcast(s, g, v, binner)) && can_write(s, g, v);
}

/* Can member v write its buffer inside the open group g's loop?  Writing
 * element i of a buffer whose older value earlier members read element by
 * element touches the bytes iteration i read when v's elements are as wide
 * as every one read, and only elements read in iterations up to i when
 * they are narrower: safe on one thread, but not in a loop long enough to
 * be split among a device's threads (SK_PARALLEL_MIN), whose last thread
 * would overwrite elements the first has yet to read (the GPT's bf16
 * weight casts over its f32 embedding). */
static int can_write(const Fuser *s, int g, int v) {
    int b = s->mem[v];
    if (b >= 0 && s->pinned_epoch[b] == s->epoch)
        return 0;
    if (b < 0 || s->read_epoch[b] != s->epoch || s->read_max[b] == 0)
        return 1;
    int size = elem_size(s->fn, v);
    if (s->fu->elems[g] >= SK_PARALLEL_MIN)
        return size == s->read_min[b] && size == s->read_max[b];
    return size <= s->read_min[b];
}

/* Member reads value a: element by element (size: its element size), or
 * one element before the loop (size 0). */
static void note_read(Fuser *s, int a, int size) {
    int b = s->mem[a];
    if (b < 0)
        return;
    if (s->read_epoch[b] != s->epoch) {
        s->read_epoch[b] = s->epoch;
        s->read_min[b] = s->read_max[b] = size;
    } else if (size) {
        if (s->read_min[b] == 0 || size < s->read_min[b])
            s->read_min[b] = size;
        if (size > s->read_max[b])
            s->read_max[b] = size;
    }
}

static void join(Fuser *s, int g, int v) {
    const Fn *fn = s->fn;
    const Inst *in = &fn->insts[v];
    s->fu->role[v] = FUSE_MEMBER;
    s->fu->group[v] = g;
    s->nmembers[g]++;
    int64_t inner = row_reduce_inner(fn, in), binner = row_broadcast_inner(fn, in);
    int64_t span = col_broadcast_span(fn, in);
    /* Operands read at [row], [i / inner] or [j]: later iterations read
     * elements that earlier ones could have written; so does a view, at
     * an offset into its operand's buffer (which a later member may hold
     * once the view's last reader has read it). */
    int by_row = binner || span || (row_member(s, g, v) && !is_reduction(in->op));
    for (int i = 0; i < in->nargs; i++) {
        int a = ir_arg(fn, in, i);
        if ((s->fu->group[a] == g && s->fu->role[a] == FUSE_MEMBER) || uses_literal(fn, in, a))
            continue;
        note_read(s, a, in->op == OP_BROADCAST ? 0 : elem_size(fn, a));   /* a broadcast's before the loop */
        if ((by_row || views_operand(fn, a)) && s->mem[a] >= 0)
            s->pinned_epoch[s->mem[a]] = s->epoch;
    }
    if (inner)
        s->fu->row[g] = inner;
    if (binner && !row_member(s, g, ir_arg(fn, in, 0)) && (!s->min_inner || binner < s->min_inner))
        s->min_inner = binner;
    if (span)
        s->col = span;
}

/* May v stay in the open group's way?  0: no; 1: emitted at its place,
 * before the loop; 2: emitted right after the loop (a constant that only
 * fusable broadcasts read, into a buffer a member read: the broadcasts that
 * join the group use the literal, the others come after the loop). */
static int can_pass(const Fuser *s, int g, int v) {
    const Inst *in = &s->fn->insts[v];
    if (in->op == OP_PARAMETER)
        return 1;
    if (op_is_collective(in->op) || op_calls(in->op) || in->op == OP_RETURN || in->flags & INST_ASYNC)
        return 0;
    for (int i = 0; i < in->nargs; i++)     /* a dynamic slice's view reads its offsets */
        if (s->fu->group[ir_arg(s->fn, in, i)] == g)
            return 0;
    if (in->flags & INST_VIEW)
        return 1;
    if (s->mem[v] < 0 || s->read_epoch[s->mem[v]] != s->epoch)
        return 1;
    return in->op == OP_CONSTANT && s->fu->uses[v] && s->literal_uses[v] == s->fu->uses[v] ? 2 : 0;
}

/* A group of one member is no group: it keeps its kernel call, and the
 * constants that were to follow its loop keep their places. */
static void close_group(Fuser *s, int g, int v) {
    if (g >= 0 && s->nmembers[g] < 2) {
        s->fu->role[v] = FUSE_NONE;
        s->fu->group[v] = -1;
        s->fu->ngroups--;
    }
    for (int i = 0; g >= 0 && s->nmembers[g] >= 2 && i < s->ndeferred; i++) {
        s->fu->role[s->deferred[i]] = FUSE_DEFERRED;
        s->fu->group[s->deferred[i]] = g;
    }
    s->ndeferred = 0;
}

/* n + 1 ints, zeroed, in the arena. */
static int *ints(Arena *a, int n) { return arena_alloc(a, sizeof(int) * ((size_t)n + 1)); }

/* Each member's stage, in program order: the latest of the stage before it
 * and its operands' (a reduction's value is ready in the stage after its
 * own); members read in a later stage than theirs are `cross`.  A
 * reduction of a value that its stage computes with an exp in f32
 * (`calls`) accumulates a stage later, over the kept row: the vectorized
 * loop calls sk_exp_f32 once per vector, and across a call no vector
 * register keeps the accumulator, which would go through memory each
 * time.  The sum over the row adds the same partial sums in the same
 * order, so the same bits (bench/loops.tdsl's softmax_rows 1.85 -> 1.57 ms). */
static void assign_stages(const Fn *fn, Fusion *fu, Arena *arena) {
    int *cur = ints(arena, fu->ngroups);
    unsigned char *calls = arena_alloc(arena, (size_t)fn->ninsts + 1);
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        int g = fu->group[v];
        if (fu->role[v] != FUSE_MEMBER)
            continue;
        int st = cur[g];
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(fn, in, i);
            if (fu->role[a] == FUSE_MEMBER && fu->group[a] == g) {
                int ready = fu->stage[a] + is_reduction(fn->insts[a].op);
                st = ready > st ? ready : st;
            }
        }
        int dt = in->type.dtype, after_call = 0;
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(fn, in, i);
            after_call |= fu->role[a] == FUSE_MEMBER && fu->group[a] == g && fu->stage[a] == st && calls[a];
        }
        if (is_reduction(in->op))
            st += after_call;
        else
            calls[v] = after_call || (op_calls_exp(in->op) && dtype_is_float(dt) && dt != DT_F64);
        fu->stage[v] = cur[g] = st;
        if (st + 1 > fu->nstages[g])
            fu->nstages[g] = st + 1;
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(fn, in, i);
            if (fu->role[a] == FUSE_MEMBER && fu->group[a] == g && fu->stage[a] < st)
                fu->cross[a] = 1;
        }
    }
}

void value_buffers(const Fn *fn, int *buf) {
    for (int v = 0, k = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        int none = in->op == OP_PARAMETER || in->op == OP_RETURN || in->op == OP_DONE || in->type.dtype == DT_TUPLE;
        buf[v] = none ? -1 : fn->scheduled ? in->buffer : k++;
    }
}

int computed_in_result(const Fn *fn, const int *buf, int v) {
    const Inst *in = &fn->insts[v];
    return buf[v] >= 0 && !in->place && !(in->flags & (INST_VIEW | INST_FOLDED)) && accumulated_operand(fn, v) < 0;
}

void fuse_fn(const Fn *fn, const int *buf, Fusion *fu, Arena *arena) {
    int n = fn->ninsts;
    memset(fu, 0, sizeof *fu);
    fu->role = arena_alloc(arena, (size_t)n + 1);
    fu->stored = arena_alloc(arena, (size_t)n + 1);
    fu->group = ints(arena, n);
    fu->next = ints(arena, n);
    fu->uses = ints(arena, n);
    fu->first = ints(arena, n);
    fu->last = ints(arena, n);
    fu->last_member = ints(arena, n);
    fu->refs = ints(arena, n);
    fu->frefs = ints(arena, n);
    fu->order = ints(arena, n);
    fu->stage = ints(arena, n);
    fu->cross = arena_alloc(arena, (size_t)n + 1);
    fu->host = ints(arena, n);
    fu->link = ints(arena, n);
    fu->elems = arena_alloc(arena, sizeof(int64_t) * ((size_t)n + 1));
    fu->row = arena_alloc(arena, sizeof(int64_t) * ((size_t)n + 1));
    fu->nstages = ints(arena, n);
    Fuser s = {fn, fu, ints(arena, n), NULL, NULL, NULL, NULL, ints(arena, n), 0, ints(arena, n), ints(arena, n), 0, 0, 0};
    int nbuf = 0;
    for (int v = 0; v < n; v++) {
        const Inst *in = &fn->insts[v];
        fu->group[v] = fu->next[v] = fu->host[v] = -1;
        /* A done is its start's buffer; a view, its operand's memory. */
        s.mem[v] = in->op == OP_DONE ? buf[ir_arg(fn, in, 0)] : views_operand(fn, v) ? s.mem[ir_arg(fn, in, 0)] : buf[v];
        if (s.mem[v] >= nbuf)
            nbuf = s.mem[v] + 1;
        for (int i = 0; i < in->nargs; i++)
            fu->uses[ir_arg(fn, in, i)]++;
    }
    const Inst *ret = n > 0 && fn->insts[n - 1].op == OP_RETURN ? &fn->insts[n - 1] : NULL;
    for (int i = 0; ret && i < ret->nargs; i++)
        if (computed_in_result(fn, buf, ir_arg(fn, ret, i)))
            s.mem[ir_arg(fn, ret, i)] = -1;   /* no buffer written */
    for (int v = 0; v < n; v++) {
        const Inst *in = &fn->insts[v];
        int fusable = fu->uses[v] && fusable_elems(fn, v) > 0;
        for (int i = 0; fusable && i < in->nargs; i++)
            s.literal_uses[ir_arg(fn, in, i)] += uses_literal(fn, in, ir_arg(fn, in, i));
    }
    s.read_epoch = ints(arena, nbuf);
    s.read_min = ints(arena, nbuf);
    s.read_max = ints(arena, nbuf);
    s.pinned_epoch = ints(arena, nbuf);
    for (int b = 0; b < nbuf; b++)
        s.read_epoch[b] = s.pinned_epoch[b] = -1;

    /* Groups, in one pass: g is the open group, of fu->elems[g] elements,
     * and gv its only member while it has one. */
    int g = -1, gv = -1;
    for (int v = 0; v < n; v++) {
        int64_t e = fu->uses[v] ? fusable_elems(fn, v) : -1;
        if (e > 0 && g >= 0 && can_join(&s, g, v, e)) {
            join(&s, g, v);
            continue;
        }
        int pass = e <= 0 && g >= 0 ? can_pass(&s, g, v) : 0;
        if (pass == 2)
            s.deferred[s.ndeferred++] = v;
        if (pass)
            continue;
        close_group(&s, g, gv);
        g = -1;
        if (e > 0) {
            g = fu->ngroups++;
            s.nmembers[g] = 0;
            s.epoch++;
            fu->elems[g] = e;
            fu->row[g] = s.min_inner = s.col = 0;
            gv = v;
            join(&s, g, v);
        }
    }
    close_group(&s, g, gv);

    /* Members read outside their group are stored. */
    for (int u = 0; u < n; u++) {
        const Inst *in = &fn->insts[u];
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(fn, in, i);
            if (fu->role[a] == FUSE_MEMBER && (fu->role[u] != FUSE_MEMBER || fu->group[u] != fu->group[a]))
                fu->stored[a] = 1;
        }
    }
    assign_stages(fn, fu, arena);
    /* Constants whose every reader is a member of one group that uses the
     * literal are folded into it: count those reads (and the group). */
    int *folds = ints(arena, n), *in_group = s.nmembers;
    for (int v = 0; v < n; v++)
        in_group[v] = -1;
    for (int u = 0; u < n; u++) {
        const Inst *in = &fn->insts[u];
        for (int i = 0; fu->role[u] == FUSE_MEMBER && i < in->nargs; i++) {
            int c = ir_arg(fn, in, i);
            if (!uses_literal(fn, in, c))
                continue;
            folds[c]++;
            in_group[c] = in_group[c] == -1 || in_group[c] == fu->group[u] ? fu->group[u] : -2;
        }
    }
    for (int c = 0; c < n; c++)
        if (folds[c] && folds[c] == fu->uses[c] && in_group[c] >= 0) {
            fu->role[c] = FUSE_FOLDED;
            fu->group[c] = in_group[c];
        }
    /* Each group's instructions in program order, for the comments. */
    for (int k = 0; k < fu->ngroups; k++)
        fu->first[k] = fu->last[k] = fu->last_member[k] = -1;
    for (int v = 0; v < n; v++) {
        int k = fu->group[v];
        if (k < 0)
            continue;
        if (fu->last[k] >= 0)
            fu->next[fu->last[k]] = v;
        else
            fu->first[k] = v;
        fu->last[k] = v;
        if (fu->role[v] == FUSE_MEMBER)
            fu->last_member[k] = v;
    }
}
