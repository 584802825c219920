/* Scheduling: the final order of a per-device program; its buffers are
 * buffers.c's.
 *
 * Order: a collective's start moves up to right after its operand is
 * computed and its done (OP_DONE) down to right before the first
 * instruction that reads its value; whatever runs in between overlaps the
 * transfer.  An instruction that reads a collective no compute (a dot or a
 * call) has overlapped yet is held back, with what reads it, until the
 * next compute has been placed (or the return): so the independent work
 * after it runs during the transfer.  An f32 or f64 dot's only reader, an
 * add whose other operand dies there, moves up to right after the dot, so
 * the dot can add into that operand (fold_accumulate); not a wide dot's
 * (dot_is_wide, ir.h), whose kernel only stores its f32 sums.
 * A broadcast along leading or trailing dims read only by elementwise
 * instructions of its size moves down to right before the first of them
 * (mark_sunk), where their loop computes it.
 * Everything else keeps its place, but for what nothing returned reads,
 * which is not run (fn_drop_dead: the zeros a partitioned scatter-add
 * replaced with its own).
 * All devices run the same program, so they still issue collectives in the
 * same order.
 *
 * Concats of concats: a concatenate read only by one along the same dim is
 * not built; the reader takes its operands (mark_concat_chains).
 *
 * Epilogues: a bf16 or f16 dot read only by an add of a bias broadcast
 * along its rhs free dims, or by gelu, relu, tanh or logistic, or by such
 * an add read only by one of those, all next to each other in the new
 * order, is one kernel call (sk_dot_epilogue): oneDNN applies the bias and
 * activation to the f32 accumulator before rounding and storing (the
 * rounding between them, and a pass over the product, are gone).  The
 * instructions the last one computes are marked INST_FOLDED; they take no
 * buffer, and their operands are read where the last one is.  f32 dots
 * keep the fused loop: dnnl_sgemm takes no epilogue, and oneDNN's matmul
 * primitive, which does, is slower for f32 here (docs/kernels.md).
 *
 * Gathers into dots: a gather of matrices read only by a dot that can take
 * its rows (gather_dot_form: a mixture of experts' w[route[s]] times the
 * tokens) moves to right before the dot and is folded into it: one
 * sk_gather_dot call that multiplies each expert's tokens by its matrix,
 * so the gathered [tokens, k, n] weights never exist.
 *
 * Zeros into scatters: a broadcast 0 that only a scatter-add reads (an
 * embedding's gradient, zeros(...) of the table) moves to right before
 * it and is folded into it: sk_scatter_add clears its result itself, and
 * the zeros take no buffer.
 *
 * Attentions: the chain of a softmax attention (attention_form, ir.h:
 * the scores dot, scale, mask, max, exp, sum, divide) whose members only
 * the chain and its last dot read moves to right before that dot and is
 * folded into it, with what only the fold reads (the scale's constant, a
 * causal mask's iotas, compare and select, which the kernel replaces by
 * masking by position): one sk_attention call, and no [batch, S, T]
 * value takes a buffer (docs/scheduling.md, "Attention").
 *
 * Views: a reshape of a parameter, or a slice of one that is contiguous in
 * it (a layer's block `w[l]` of stacked weights), or a dynamic slice of one
 * that is a slot of it (a loop's saved value stack[t], w[l] at a run-time l), is
 * the parameter's memory at an offset: marked INST_VIEW, it takes no buffer
 * and copies nothing.  A slice of one that is not one run (a column block
 * w[:, j : j + n]) and that only dots read is a strided view (INST_VIEW |
 * INST_STRIDED): the dot reads it with the parameter's strides
 * (sk_dot_strided).
 * So is an element of a call's results: each call writes its results into
 * arrays of its own in the workspace (codegen.c), which nothing else
 * writes.  Parameters and those arrays live through the whole call, so a
 * view never outlives its memory.  (A gradient's backward pass reads the
 * forward's saved values through such elements: copying them cost the
 * GPT's training step a fifth of its time.)  A contiguous slice of a value
 * in a buffer is a view too (the bf16 step's layer blocks of the weights
 * it casts once): its reads count as reads of that value (count_reads),
 * which then stays live, and unwritten, until the view's last reader.
 * Reshapes of such values stay copies or fused loops' members: viewing
 * one would make a loop store a value it now keeps in registers. */
#include "schedule.h"
#include "buffers.h"
#include "fuse.h"

#include <stdlib.h>
#include <string.h>

/* A collective must be done before this many more start after it,
 * counting those its calls start, whatever their groups (ir.h). */
enum { WINDOW = COLLECTIVE_WINDOW };

typedef struct {
    Module *m;
    const Fn *src;
    Fn *dst;
    int32_t *new_of;             /* src value -> dst value (a collective: its done) */
    int32_t *started_by;         /* src collective -> dst start, or -1 */
    int32_t *first_after;        /* src value -> first collective it is the operand of, chained: */
    int32_t *next_after;         /* src collective -> next collective with the same operand */
    uint8_t *overlapped;         /* src collective: compute has run since its start */
    uint8_t *waiting;            /* src value: held back in queue */
    int32_t *into_dot;           /* src value -> the dot that computes it (a gather, an attention's member), or -1 */
    int32_t *fold_first, *fold_next;   /* src dot -> the first value it computes; -> the next, in src order */
    uint8_t *written;            /* src value: a result of its fold's call other than the last (INST_WRITTEN) */
    int32_t *reader_start, *readers;   /* src value -> its readers: readers[reader_start[v] ..), or NULL */
    uint8_t *merged;             /* src value: a concat its reader, a concat, takes apart (mark_concat_chains) */
    uint8_t *sunk;               /* src value: a broadcast emitted right before its first reader (mark_sunk) */
    int32_t *sum_of;             /* src dot -> the add that is its only reader, or -1 (mark_sums) */
    int32_t *queue, *flight;     /* values held back, in order; collectives started, not overlapped */
    int nwaiting, queue_cap, nflight, flight_cap;
    int32_t *open;               /* collectives started, in start order (some done since) */
    int nopen, open_cap, first_open;
    int32_t *seq;                /* src collective -> how many started before it (calls' own included) */
    int nstarted;
} Sched;

/* The operands src value v reads: those of a merged concat in its place
 * (mark_concat_chains), depth first, with a stack, not recursion: the
 * chains of an unrolled loop can be long.  Most instructions read no
 * merged concat and get their own operand list. */
static const int32_t *operands_of(Sched *s, int v, int *n) {
    const Inst *in = &s->src->insts[v];
    const int32_t *args = &s->src->args[in->args];
    int merged = 0;
    for (int i = 0; i < in->nargs; i++)
        merged |= s->merged[args[i]];
    *n = in->nargs;
    if (!merged)
        return args;
    int32_t *out = NULL, *stack = NULL;
    int cap = 0, depth = 0, stack_cap = 0;
    *n = 0;
    for (int i = in->nargs - 1; i >= 0; i--)
        *VEC_PUSH(s->m->arena, stack, depth, stack_cap) = args[i];
    while (depth > 0) {
        int a = stack[--depth];
        const Inst *ai = &s->src->insts[a];
        if (!s->merged[a]) {
            *VEC_PUSH(s->m->arena, out, *n, cap) = a;
            continue;
        }
        for (int i = ai->nargs - 1; i >= 0; i--)
            *VEC_PUSH(s->m->arena, stack, depth, stack_cap) = ir_arg(s->src, ai, i);
    }
    return out;
}

static int copy_inst(Sched *s, int v, uint16_t extra_flags) {
    const Inst *in = &s->src->insts[v];
    int n;
    const int32_t *src_args = operands_of(s, v, &n);
    int32_t args[256];
    int32_t *a = n <= 256 ? args : arena_alloc(s->m->arena, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        a[i] = s->new_of[src_args[i]];
    int d = ir_emit(s->m, s->dst, (Op)in->op, a, n, ir_attrs(s->src, in), in->nattrs, &in->type, in->loc);
    Inst *out = &s->dst->insts[d];
    out->sym = in->sym;
    out->sh = in->sh;
    out->value = in->value;
    out->flags = in->flags | extra_flags;
    out->why = in->why;
    out->place = in->place;
    return d;
}

static void start_ready(Sched *s, int v);

static void wait_for(Sched *s, int c) {
    int done = ir_emit(s->m, s->dst, OP_DONE, (int32_t[]){s->started_by[c]}, 1, NULL, 0, NULL, s->src->insts[c].loc);
    s->dst->insts[done].sym = s->src->insts[c].sym;
    s->dst->insts[done].sh = s->src->insts[c].sh;
    s->dst->insts[done].place = s->src->insts[c].place;
    s->new_of[c] = done;
    start_ready(s, c);
}

/* Wait for collective c, and first for the collectives it waits on: a
 * collective of a collective starts only when the first is done.  The
 * chain is walked with a loop, not recursion: chains can be long. */
static void finish(Sched *s, int c) {
    if (s->new_of[c] >= 0)
        return;
    int n = 0, *chain = NULL, cap = 0;
    for (int x = c; s->started_by[x] < 0; x = ir_arg(s->src, &s->src->insts[x], 0))
        *VEC_PUSH(s->m->arena, chain, n, cap) = x;     /* its operand is a collective still running */
    int started = n ? ir_arg(s->src, &s->src->insts[chain[n - 1]], 0) : c;
    wait_for(s, started);                   /* the started end of the chain, then up to c */
    for (int i = n - 1; i >= 0; i--)
        wait_for(s, chain[i]);
}

/* Wait for the collectives still running that `more` starts (a
 * collective: 1; a call: all its callee starts) would leave behind. */
static void make_room(Sched *s, int more) {
    /* finish(c) may start the collectives waiting on c, and so re-enter
     * here and move first_open: it is read afresh each time round. */
    while (s->first_open < s->nopen) {
        int c = s->open[s->first_open];
        if (s->new_of[c] >= 0) {
            s->first_open++;
            continue;
        }
        if (s->nstarted + more - s->seq[c] <= WINDOW)
            break;
        finish(s, c);
    }
    s->nstarted += more;
}

/* Start the collectives whose operand, src value v, now exists. */
static void start_ready(Sched *s, int v) {
    for (int c = s->first_after[v]; c >= 0; c = s->next_after[c]) {
        make_room(s, 1);
        s->seq[c] = s->nstarted - 1;         /* after the starts make_room's dones set off */
        *VEC_PUSH(s->m->arena, s->open, s->nopen, s->open_cap) = c;
        s->started_by[c] = copy_inst(s, c, INST_ASYNC);
        s->dst->insts[s->started_by[c]].sym = -1;
        *VEC_PUSH(s->m->arena, s->flight, s->nflight, s->flight_cap) = c;
    }
}

/* Whether src value v must wait: it reads a collective still in flight
 * that no compute has overlapped yet (or one not started, whose operand
 * waits), or a value that waits.  A fold's call waits for what any of
 * the values it computes reads: they are emitted with it. */
static int must_wait(Sched *s, int v) {
    for (int u = s->fold_first[v]; u >= 0; u = s->fold_next[u])
        if (must_wait(s, u))
            return 1;
    int n;
    const int32_t *args = operands_of(s, v, &n);
    for (int i = 0; i < n; i++) {
        int a = args[i];
        if (s->waiting[a] || (s->sunk[a] && s->new_of[a] < 0 && must_wait(s, a)))   /* a sunk one: its operand */
            return 1;
        if (op_is_collective(s->src->insts[a].op) && s->new_of[a] < 0 &&
            (s->started_by[a] < 0 || !s->overlapped[a]))
            return 1;
    }
    return 0;
}

static int is_compute(int op) { return op == OP_DOT || op_calls(op); }

/* Does compute `in` overlap collective c?  Compute on one submesh does not
 * overlap a transfer whose data comes from another: the transfer of a
 * pipeline's microbatch m waits for the producing stage's call on m + 1,
 * not for the consuming stage's call on m - 1, so the producer runs ahead
 * while the consumer works (docs/partitioning.md, "Submeshes"). */
static int overlaps(const Sched *s, const Inst *in, int c) {
    int from = s->src->insts[ir_arg(s->src, &s->src->insts[c], 0)].place;
    return !in->place || !from || in->place == from;
}

static void finish_operands(Sched *s, int v) {
    int n;
    const int32_t *args = operands_of(s, v, &n);
    for (int i = 0; i < n; i++)
        if (op_is_collective(s->src->insts[args[i]].op))
            finish(s, args[i]);
        else if (s->sunk[args[i]] && s->new_of[args[i]] < 0)
            finish_operands(s, args[i]);
}

/* Emit the sunk operands of src value v that are not yet. */
static void emit_sunk(Sched *s, int v) {
    const Inst *in = &s->src->insts[v];
    for (int i = 0; i < in->nargs; i++) {
        int a = ir_arg(s->src, in, i);
        if (s->sunk[a] && s->new_of[a] < 0)
            s->new_of[a] = copy_inst(s, a, 0);
    }
}

/* Emit src value v: first the dones it needs, then v, then the collectives
 * it is the operand of.  Compute overlaps every collective in flight.  The
 * values folded into a dot (a gather, an attention's members) are emitted
 * right before it. */
static void emit(Sched *s, int v) {
    const Inst *in = &s->src->insts[v];
    if (s->into_dot[v] >= 0)
        return;
    finish_operands(s, v);
    emit_sunk(s, v);
    for (int u = s->fold_first[v]; u >= 0; u = s->fold_next[u]) {
        finish_operands(s, u);
        emit_sunk(s, u);
    }
    for (int u = s->fold_first[v]; u >= 0; u = s->fold_next[u])
        s->new_of[u] = copy_inst(s, u, s->written[u] ? INST_WRITTEN : INST_FOLDED);
    if (op_calls(in->op))
        make_room(s, call_collectives(s->m, s->src, in));
    s->new_of[v] = copy_inst(s, v, 0);
    if (is_compute(in->op)) {
        int kept = 0;
        for (int i = 0; i < s->nflight; i++) {
            int c = s->flight[i];
            if (overlaps(s, in, c))
                s->overlapped[c] = 1;
            else
                s->flight[kept++] = c;
        }
        s->nflight = kept;
    }
    start_ready(s, v);
    for (int u = s->fold_first[v]; u >= 0; u = s->fold_next[u])
        if (s->written[u])               /* it exists now too */
            start_ready(s, u);
}

static void flush(Sched *s) {
    for (int i = 0; i < s->nwaiting; i++) {
        s->waiting[s->queue[i]] = 0;
        emit(s, s->queue[i]);
    }
    s->nwaiting = 0;
}

/* The operand of binary instruction u that is not v. */
static int other_operand(const Fn *fn, int u, int v) {
    const Inst *in = &fn->insts[u];
    return ir_arg(fn, in, 0) == v ? ir_arg(fn, in, 1) : ir_arg(fn, in, 0);
}

/* The add that dot v's product can be added into the other operand of
 * (fold_accumulate), or -1: v is an unplaced dot with an f32 or f64
 * result (a wide one's f32 sums of bf16 operands too: oneDNN's sum
 * post-op) read only by that add, whose other operand is no parameter,
 * no operand of the dot, and read last there. */
static int accumulating_add(const Fn *fn, const int *uses, const int *last_read, int v) {
    const Inst *d = &fn->insts[v];
    if (d->op != OP_DOT || (d->type.dtype != DT_F32 && d->type.dtype != DT_F64) || d->flags || d->place ||
        uses[v] != 1)
        return -1;
    int a = last_read[v], x = other_operand(fn, a, v);
    const Inst *add = &fn->insts[a];
    if (add->op != OP_ADD || add->flags || add->place || x == v || last_read[x] != a ||
        fn->insts[x].op == OP_PARAMETER || ir_arg(fn, d, 0) == x || ir_arg(fn, d, 1) == x)
        return -1;
    return a;
}

static void sort_values(int *set, int n) {
    for (int i = 1; i < n; i++)              /* insertion sort: a fold is a few instructions */
        for (int j = i; j > 0 && set[j - 1] > set[j]; j--) {
            int x = set[j];
            set[j] = set[j - 1];
            set[j - 1] = x;
        }
}

/* Values set[0..n) are computed by v's call: emitted right before it, the
 * last `nwritten` (results it writes, INST_WRITTEN) after the others, each
 * part in src order. */
static void fold_into_written(Sched *s, int *set, int n, int nwritten, int v) {
    sort_values(set, n - nwritten);
    sort_values(set + n - nwritten, nwritten);
    for (int i = 0; i < n; i++) {
        s->written[set[i]] = i >= n - nwritten;
        s->into_dot[set[i]] = v;
        s->fold_next[set[i]] = i + 1 < n ? set[i + 1] : -1;
    }
    s->fold_first[v] = n ? set[0] : -1;
}

static void fold_into(Sched *s, int *set, int n, int v) { fold_into_written(s, set, n, 0, v); }

/* The gathers that the dot reading them computes (see the top): each
 * read only by that dot, neither placed nor asynchronous. */
static void mark_gathers_into_dots(Sched *s, const int *uses) {
    const Fn *src = s->src;
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v];
        GatherDot gd;
        if (in->op != OP_DOT || in->flags || in->place)
            continue;
        for (int side = 0; side < 2; side++)
            if (gather_dot_form(src, in, side, &gd) && uses[gd.gather] == 1 && !src->insts[gd.gather].flags &&
                !src->insts[gd.gather].place) {
                fold_into(s, &gd.gather, 1, v);
                break;
            }
    }
}

/* The zeros a scatter adds into, which it writes itself (see the top):
 * a broadcast 0 read only by that scatter, neither placed nor marked. */
static void mark_zeros_into_scatters(Sched *s, const int *uses) {
    const Fn *src = s->src;
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v];
        if (in->op != OP_SCATTER || in->flags || in->place)
            continue;
        int b = ir_arg(src, in, 0);
        const Inst *bi = &src->insts[b];
        if (bi->op == OP_BROADCAST && uses[b] == 1 && !bi->flags && !bi->place && is_zeros(src, b))
            fold_into(s, &b, 1, v);
    }
}

/* May an instruction no one else reads be left uncomputed? */
static int pure(const Inst *in) {
    return !(in->flags & ~INST_CONSTRAINED) && !in->place && in->type.dtype != DT_TUPLE &&
           in->op != OP_PARAMETER && !op_is_collective(in->op) && !op_calls(in->op) && in->op != OP_DONE &&
           in->op != OP_RETURN && in->op != OP_GET_TUPLE_ELEMENT;
}

enum { FOLD_MAX = 2 * ATTENTION_GRAD_MAX_MEMBERS };

static int among(const int *set, int n, int x) {
    for (int i = 0; i < n; i++)
        if (set[i] == x)
            return 1;
    return 0;
}

/* Can the fold computed by v's call take set[0..m): each pure, in no
 * other fold, read only by set[0..n) and v? */
static int private_fold(const Sched *s, const int *uses, const int *set, int m, int n, int v) {
    for (int i = 0; i < m; i++)
        if (!pure(&s->src->insts[set[i]]) || s->into_dot[set[i]] >= 0 || s->fold_first[set[i]] >= 0 ||
            reads_within(s->src, set, n, v, set[i]) != uses[set[i]])
            return 0;
    return 1;
}

/* What only a fold reads joins it (a constant, a causal mask's tree), but
 * not its kernel's operands (keep): a value is tried again as each of its
 * readers joins, and joins with the last.  Returns the new size of set. */
static int join_private(const Sched *s, const int *uses, int *set, int n, int v, const int *keep, int nkeep) {
    const Fn *src = s->src;
    int todo[2 * FOLD_MAX], ntodo = 0;
    for (int i = 0; i <= n; i++) {
        const Inst *in = &src->insts[i < n ? set[i] : v];
        for (int j = 0; j < in->nargs; j++)
            if (!among(keep, nkeep, ir_arg(src, in, j)) && ntodo < 2 * FOLD_MAX)
                todo[ntodo++] = ir_arg(src, in, j);
    }
    while (ntodo > 0 && n < FOLD_MAX) {
        int x = todo[--ntodo];
        if (x == v || among(set, n, x) || !pure(&src->insts[x]) || s->into_dot[x] >= 0 ||
            reads_within(src, set, n, v, x) != uses[x])
            continue;
        set[n++] = x;
        for (int j = 0; j < src->insts[x].nargs && ntodo < 2 * FOLD_MAX; j++)
            todo[ntodo++] = ir_arg(src, &src->insts[x], j);
    }
    return n;
}

/* Attentions (see the top): the members of dot v's attention_form, when
 * each is pure and read only by the others and v, are computed by v's
 * sk_attention call; so is a causal mask (the kernel masks by position)
 * with the instructions below it that only the fold reads. */
static void mark_attention(Sched *s, const int *uses, int v) {
    const Fn *src = s->src;
    AttentionForm af;
    if (src->insts[v].flags || src->insts[v].place || !attention_form(src, v, &af) || af.v_dtype != af.dtype)
        return;                          /* sk_attention reads q, k and v in one dtype */
    int set[FOLD_MAX], n = af.nmembers;
    memcpy(set, af.members, sizeof(int) * (size_t)n);
    if (!private_fold(s, uses, set, n, n, v))
        return;
    int keep[] = {af.q, af.k, af.v, af.causal ? -1 : af.mask};
    fold_into(s, set, join_private(s, uses, set, n, v, keep, 4), v);
}

/* The readers of each src value (Sched.readers), built once. */
static void index_readers(Sched *s, const int *uses) {
    const Fn *src = s->src;
    if (s->readers)
        return;
    s->reader_start = arena_alloc(s->m->arena, sizeof(int32_t) * (size_t)(src->ninsts + 1));
    int32_t total = 0;
    for (int v = 0; v < src->ninsts; v++)
        s->reader_start[v] = total, total += uses[v];
    s->reader_start[src->ninsts] = total;
    s->readers = arena_alloc(s->m->arena, sizeof(int32_t) * (size_t)(total + 1));
    int32_t *next = arena_alloc(s->m->arena, sizeof(int32_t) * (size_t)(src->ninsts + 1));
    memcpy(next, s->reader_start, sizeof(int32_t) * (size_t)src->ninsts);
    for (int u = 0; u < src->ninsts; u++)
        for (int i = 0; i < src->insts[u].nargs; i++)
            s->readers[next[ir_arg(src, &src->insts[u], i)]++] = u;
}

/* The reader of x with op `op` (other than `not`), or -1. */
static int reader_of(const Sched *s, int x, int op, int not) {
    for (int i = s->reader_start[x]; i < s->reader_start[x + 1]; i++)
        if (s->src->insts[s->readers[i]].op == op && s->readers[i] != not)
            return s->readers[i];
    return -1;
}

/* The value holding dot d's result: its transpose, when that alone reads
 * it and `transposed`; else d. */
static int written_value(const Sched *s, const int *uses, int d, int transposed) {
    int t = transposed && uses[d] == 1 ? reader_of(s, d, OP_TRANSPOSE, -1) : -1;
    return t >= 0 ? t : d;
}

/* An attention's gradient (attention_grad_form) from the probabilities p
 * its backward pass recomputes: dv's dot reads p (or p rounded), dq's and
 * dk's the scaled ds, ds = p (dp - ...) a reader of p.  The three results
 * are written by one sk_attention_grad call, at the first of them in src
 * order (every operand of the fold exists by then), the other two
 * INST_WRITTEN right before it; the members and what only they read are
 * folded, and no [batch, S, T] value takes a buffer. */
static void mark_attention_grad(Sched *s, const int *uses, int p) {
    const Fn *src = s->src;
    index_readers(s, uses);
    int pr = reader_of(s, p, OP_CONVERT, -1), pv = pr >= 0 ? pr : p, dvdot = reader_of(s, pv, OP_DOT, -1);
    int ds = -1;
    for (int i = s->reader_start[p]; i < s->reader_start[p + 1] && ds < 0; i++) {
        int u = s->readers[i];
        if (src->insts[u].op == OP_MUL && src->insts[other_operand(src, u, p)].op == OP_SUB)
            ds = u;
    }
    int dsc = ds >= 0 && uses[ds] == 1 ? reader_of(s, ds, OP_MUL, -1) : -1;
    int dsr = dsc >= 0 ? reader_of(s, dsc, OP_CONVERT, -1) : -1, dsv = dsr >= 0 ? dsr : dsc;
    int d1 = dsv >= 0 ? reader_of(s, dsv, OP_DOT, -1) : -1, d2 = d1 >= 0 ? reader_of(s, dsv, OP_DOT, d1) : -1;
    if (dvdot < 0 || d2 < 0)
        return;
    AttentionGradForm gf;
    int outs[3];
    for (int transposed = 1; transposed >= 0; transposed--) {
        outs[0] = written_value(s, uses, dvdot, transposed);
        outs[1] = written_value(s, uses, d1, transposed);
        outs[2] = written_value(s, uses, d2, transposed);
        if (attention_grad_form(src, outs, &gf))
            break;
        if (!transposed)
            return;
    }
    sort_values(outs, 3);
    int set[FOLD_MAX], n = gf.nmembers, anchor = outs[0];
    memcpy(set, gf.members, sizeof(int) * (size_t)n);
    set[n++] = outs[1];
    set[n++] = outs[2];
    for (int i = 0; i < 3; i++) {
        const Inst *o = &src->insts[outs[i]];
        if (o->flags || o->place || s->into_dot[outs[i]] >= 0 || s->fold_first[outs[i]] >= 0)
            return;
    }
    if (!private_fold(s, uses, set, n - 2, n, anchor))
        return;
    int keep[] = {gf.af.q, gf.af.k, gf.af.v, gf.dout, gf.af.causal ? -1 : gf.af.mask};
    int m = join_private(s, uses, set, n, anchor, keep, 5);
    for (int i = 0; i < m; i++)           /* the fold's operands exist at the anchor */
        for (int j = 0; j < src->insts[set[i]].nargs; j++) {
            int x = ir_arg(src, &src->insts[set[i]], j);
            if (x >= anchor && !among(set, m, x))
                return;
        }
    /* the two written results after the joined members */
    memmove(set + n - 2, set + n, sizeof(int) * (size_t)(m - n));
    set[m - 2] = outs[1];
    set[m - 1] = outs[2];
    fold_into_written(s, set, m, 2, anchor);
}

/* The f32 and f64 dots whose sum can take their product (accumulating_add,
 * Sched.sum_of): the add is emitted right after its dot when the other
 * operand exists by then, so that the dot can add into that operand's
 * buffer (fold_accumulate).  `acc = acc + u + w`, written after both
 * dots, then holds one [B, F] array, not four. */
static void mark_sums(Sched *s, const int *uses, const int *last_read) {
    const Fn *src = s->src;
    for (int v = 0; v < src->ninsts; v++) {
        int a = s->into_dot[v] >= 0 ? -1 : accumulating_add(src, uses, last_read, v);
        s->sum_of[v] = a >= 0 && s->into_dot[other_operand(src, a, v)] < 0 ? a : -1;
    }
}

/* Concats of concats (see the top): a concatenate read only by a
 * concatenate along the same dim, both unplaced and synchronous, is not
 * built; its reader takes its operands in its place.  An unrolled
 * `out = concat([out, tile], 1)` then copies each tile once into the
 * result, where it copied every prefix again and held each one. */
static void mark_concat_chains(Sched *s, const int *uses, const int *last_read) {
    const Fn *src = s->src;
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v], *r = &src->insts[last_read[v]];
        s->merged[v] = in->op == OP_CONCAT && uses[v] == 1 && r->op == OP_CONCAT && !in->flags && !in->place &&
                       !r->flags && !r->place && ir_attr(src, in, 0) == ir_attr(src, r, 0);
    }
}

static void order(Sched *s) {
    const Fn *src = s->src;
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v];
        if (op_is_collective(in->op) || s->new_of[v] >= 0 || s->merged[v] || s->sunk[v])
            continue;                /* started by start_ready, emitted after its dot (mark_sums), merged, or sunk */
        if (in->op == OP_RETURN) {   /* nothing waits or starts after the return */
            flush(s);
            for (int c = 0; c < src->ninsts; c++)
                if (op_is_collective(src->insts[c].op) && s->started_by[c] >= 0)
                    finish(s, c);
        } else if (must_wait(s, v)) {
            s->waiting[v] = 1;
            *VEC_PUSH(s->m->arena, s->queue, s->nwaiting, s->queue_cap) = v;
            continue;
        }
        emit(s, v);
        int a = s->sum_of[v];
        if (a >= 0 && s->new_of[other_operand(src, a, v)] >= 0 && !must_wait(s, a))
            emit(s, a);
        if (is_compute(in->op))
            flush(s);
    }
}

/* Broadcasts along leading or trailing dims (a bias, a layernorm's gain,
 * a row's statistic) read only by elementwise instructions of their own
 * element count, not folded: emitted right before the first of them
 * (emit_sunk), where a loop computes them, rather than where a gradient
 * put them, all at its start, each stored whole and read back. */
static void mark_sunk(Sched *s, const int *uses) {
    const Fn *src = s->src;
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v];
        s->sunk[v] = uses[v] > 0 && !in->flags && !in->place && s->into_dot[v] < 0 &&
                     (row_broadcast_inner(src, in) || col_broadcast_span(src, in));
    }
    for (int u = 0; u < src->ninsts; u++) {
        const Inst *in = &src->insts[u];
        int64_t n = shape_elems(&in->type);
        int elementwise = (op_info[in->op].flags & OPF_FUSIBLE) && in->op != OP_BROADCAST && !in->place &&
                          in->type.dtype < DT_TUPLE && s->into_dot[u] < 0;
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(src, in, i);
            if (!elementwise || shape_elems(&src->insts[a].type) != n)
                s->sunk[a] = 0;
        }
        if (s->sum_of[u] >= 0)           /* what a dot adds its product into exists before it */
            s->sunk[other_operand(src, s->sum_of[u], u)] = 0;
    }
}

static int is_activation(int op) { return op == OP_GELU || op == OP_RELU || op == OP_TANH || op == OP_LOGISTIC; }

/* Is b a broadcast of a bias along dot d's rhs free dims, the trailing
 * dims of its result? */
static int is_bias(const Fn *fn, const Inst *d, const Inst *b) {
    if (b->op != OP_BROADCAST || b->nargs != 1 || b->flags || b->place || !shape_eq(&b->type, &d->type))
        return 0;
    const Shape *x = &fn->insts[ir_arg(fn, b, 0)].type, *rhs = &fn->insts[ir_arg(fn, d, 1)].type;
    DotDims dd;
    dot_dims(fn, d, &dd);
    int nfree = rhs->rank - dd.nbatch - dd.ncontract, lead = d->type.rank - nfree;
    if (nfree < 1 || x->rank != nfree || b->nattrs != nfree)
        return 0;
    for (int k = 0; k < nfree; k++)
        if (ir_attr(fn, b, k) != lead + k || x->dims[k] != d->type.dims[lead + k])
            return 0;
    return 1;
}

/* Is instruction u, unplaced and synchronous, an op of its operand's type? */
static int plain(const Fn *fn, int u) {
    const Inst *in = &fn->insts[u];
    return !in->flags && !in->place && shape_eq(&in->type, &fn->insts[ir_arg(fn, in, 0)].type);
}

/* The epilogue of dot v, if it has one (see the top): marks what its last
 * instruction computes INST_FOLDED. */
static void fold_epilogue(Fn *fn, const int *uses, int v) {
    const Inst *d = &fn->insts[v];
    int n = fn->ninsts, bias = -1, last = v;
    if (d->op != OP_DOT || (d->type.dtype != DT_BF16 && d->type.dtype != DT_F16) || d->flags || d->place ||
        uses[v] != 1 || ends_fold(fn, v))       /* ends_fold: it computes a gather */
        return;
    /* The bias broadcast right before the dot or right after it, then the add. */
    int b = v > 0 && is_bias(fn, d, &fn->insts[v - 1])           ? v - 1
            : v + 1 < n && is_bias(fn, d, &fn->insts[v + 1]) ? v + 1
                                                              : -1;
    int add = b == v + 1 ? v + 2 : v + 1;
    if (b >= 0 && uses[b] == 1 && add < n && fn->insts[add].op == OP_ADD && plain(fn, add) &&
        ((ir_arg(fn, &fn->insts[add], 0) == v && ir_arg(fn, &fn->insts[add], 1) == b) ||
         (ir_arg(fn, &fn->insts[add], 0) == b && ir_arg(fn, &fn->insts[add], 1) == v))) {
        bias = b;
        last = add;
    }
    int act = last + 1;
    if (act < n && uses[last] == 1 && is_activation(fn->insts[act].op) && ir_arg(fn, &fn->insts[act], 0) == last &&
        plain(fn, act))
        last = act;
    for (int u = bias >= 0 && bias < v ? bias : v; u < last; u++)
        fn->insts[u].flags |= INST_FOLDED;
}

/* An f32 or f64 dot v read only by the add right after it, whose other
 * operand x is a value in a buffer that dies there: the dot adds into x's
 * buffer, which becomes the add's (accumulated_operand, ir.h).  The
 * collective matmul's `acc = acc + update` then needs one [B, F] array,
 * not three. */
static void fold_accumulate(Fn *fn, const int *uses, const int *last_read, int v) {
    int add = accumulating_add(fn, uses, last_read, v);
    if (add != v + 1 || ends_fold(fn, v))
        return;
    const Inst *xi = &fn->insts[other_operand(fn, add, v)];
    if (xi->type.dtype == DT_TUPLE || xi->flags & (INST_FOLDED | INST_VIEW | INST_ASYNC))
        return;
    fn->insts[v].flags |= INST_FOLDED;
}

static void fold_epilogues(Fn *fn) {
    Arena scratch = {0};
    int *uses, *last_read;
    count_reads(&scratch, fn, &uses, &last_read);
    for (int v = 0; v < fn->ninsts; v++) {
        fold_epilogue(fn, uses, v);
        fold_accumulate(fn, uses, last_read, v);
    }
    arena_free(&scratch);
}

/* Is slice `in` of an operand of shape s one contiguous run of it: dims
 * before some dim k taken at one index, dims after k whole? */
static int contiguous_slice(const Fn *fn, const Inst *in, const Shape *s) {
    int k = 0;
    while (k < s->rank && ir_attr(fn, in, s->rank + k) - ir_attr(fn, in, k) == 1)
        k++;
    for (int d = k + 1; d < s->rank; d++)
        if (ir_attr(fn, in, d) != 0 || ir_attr(fn, in, s->rank + d) != s->dims[d])
            return 0;
    return 1;
}

/* Is dynamic-slice `in` of shape s one contiguous run of it wherever its
 * offsets fall: leading dims of size 1, then one dim taken in part, the
 * others whole (a loop's saved value stack[t], a stacked weight w[l], a
 * collective matmul's row block w[i*b : (i+1)*b, :])? */
static int slot_of(const Inst *in, const Shape *s) {
    int k = 0;
    while (k < s->rank && in->type.dims[k] == 1)
        k++;
    for (int d = k + 1; d < s->rank; d++)
        if (in->type.dims[d] != s->dims[d])
            return 0;
    return 1;
}

/* Is every reader of each value an unplaced dot, as operand 0 or 1, whose
 * other operand is no gather folded into it, and no attention's
 * (sk_gather_dot and sk_attention read their operands whole)?  Such a
 * value can be a strided view. */
static uint8_t *read_by_dots(Arena *a, const Fn *fn) {
    uint8_t *ok = arena_alloc(a, (size_t)fn->ninsts + 1);
    memset(ok, 1, (size_t)fn->ninsts + 1);
    for (int u = 0; u < fn->ninsts; u++) {
        const Inst *in = &fn->insts[u];
        int dot = in->op == OP_DOT && !in->place && !in->flags && !ends_attention(fn, u);   /* an attention's: no */
        for (int i = 0; i < in->nargs; i++) {
            const Inst *other = in->nargs == 2 ? &fn->insts[ir_arg(fn, in, 1 - i)] : NULL;
            if (!dot || (other && other->op == OP_GATHER && other->flags & INST_FOLDED))
                ok[ir_arg(fn, in, i)] = 0;
        }
    }
    return ok;
}

static void mark_views(Fn *fn) {
    Arena scratch = {0};
    const uint8_t *dots_only = read_by_dots(&scratch, fn);
    for (int v = 0; v < fn->ninsts; v++) {
        Inst *in = &fn->insts[v];
        if (in->flags || in->place)
            continue;
        const Inst *x = &fn->insts[ir_arg(fn, in, 0)];
        if (in->op == OP_GET_TUPLE_ELEMENT && op_calls(x->op)) {
            in->flags |= INST_VIEW;
            continue;
        }
        if (in->op != OP_RESHAPE && in->op != OP_SLICE && in->op != OP_DYNAMIC_SLICE)
            continue;
        int base = x->op == OP_PARAMETER || (x->flags & (INST_VIEW | INST_STRIDED)) == INST_VIEW;
        int in_buffer = !x->flags && !x->place && x->type.dtype != DT_TUPLE && x->op != OP_PARAMETER;
        if (base && (in->op == OP_RESHAPE || (in->op == OP_SLICE && contiguous_slice(fn, in, &x->type)) ||
                     (in->op == OP_DYNAMIC_SLICE && slot_of(in, &x->type))))
            in->flags |= INST_VIEW;
        else if (base && in->op != OP_RESHAPE && dots_only[v] && in->type.dtype != DT_TUPLE)
            in->flags |= INST_VIEW | INST_STRIDED;   /* a column block w[:, j : j + n] */
        else if (in_buffer && in->op == OP_SLICE && contiguous_slice(fn, in, &x->type))
            in->flags |= INST_VIEW;                  /* a layer's block of weights cast once */
    }
    arena_free(&scratch);
}

static void schedule_fn(Module *m, int f) {
    fn_drop_dead(m, &m->fns[f]);
    const Fn src = m->fns[f];
    Fn *dst = &m->fns[f];
    *dst = fn_without_body(&src);
    dst->scheduled = 1;
    size_t n = (size_t)src.ninsts + 1;
    Sched s = {.m = m, .src = &src, .dst = dst};
    s.new_of = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.started_by = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.first_after = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.next_after = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.overlapped = arena_alloc(m->arena, n);
    s.waiting = arena_alloc(m->arena, n);
    s.into_dot = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.fold_first = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.fold_next = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.written = arena_alloc(m->arena, n);
    memset(s.written, 0, n);
    s.merged = arena_alloc(m->arena, n);
    s.sunk = arena_alloc(m->arena, n);
    s.sum_of = arena_alloc(m->arena, sizeof(int32_t) * n);
    s.seq = arena_alloc(m->arena, sizeof(int32_t) * n);
    memset(s.overlapped, 0, n);
    memset(s.waiting, 0, n);
    for (int v = 0; v < src.ninsts; v++)
        s.new_of[v] = s.started_by[v] = s.first_after[v] = s.next_after[v] = s.into_dot[v] = s.fold_first[v] = -1;
    /* Chain each value's collectives in program order (built backwards). */
    for (int v = src.ninsts - 1; v >= 0; v--)
        if (op_is_collective(src.insts[v].op)) {
            int a = ir_arg(&src, &src.insts[v], 0);
            s.next_after[v] = s.first_after[a];
            s.first_after[a] = v;
        }
    Arena scratch = {0};
    int *uses, *last_read;
    count_reads(&scratch, &src, &uses, &last_read);
    mark_gathers_into_dots(&s, uses);
    mark_zeros_into_scatters(&s, uses);
    for (int v = 0; v < src.ninsts; v++)
        if (src.insts[v].op == OP_DOT && s.fold_first[v] < 0)
            mark_attention(&s, uses, v);
    for (int v = 0; v < src.ninsts; v++)
        if (src.insts[v].op == OP_DIV && src.insts[ir_arg(&src, &src.insts[v], 0)].op == OP_EXP && s.into_dot[v] < 0)
            mark_attention_grad(&s, uses, v);
    mark_sums(&s, uses, last_read);
    mark_concat_chains(&s, uses, last_read);
    mark_sunk(&s, uses);
    arena_free(&scratch);
    order(&s);
    dst->collectives_started = s.nstarted;
    mark_views(dst);             /* first: a dot accumulates into no view */
    fold_epilogues(dst);
    assign_buffers(m, dst);
    mark_carried_in_place(m, dst);
}

/* fn's peak with the deepest of its calls on top (Fn.peak_nested); its
 * callees' are known. */
static void nest_peak(Module *m, Fn *fn) {
    int64_t deepest = 0;
    for (int v = 0; v < fn->ninsts; v++)
        if (op_calls(fn->insts[v].op)) {
            int64_t p = m->fns[ir_attr(fn, &fn->insts[v], 0)].peak_nested;
            deepest = p > deepest ? p : deepest;
        }
    fn->peak_nested = fn->peak_bytes + deepest;
}

/* Callees first: a call makes room for what its callee keeps running. */
void schedule_module(Module *m) {
    int *order = malloc(sizeof(int) * (size_t)(m->nfns + 1));
    module_callees_first(m, order);
    for (int i = 0; i < m->nfns; i++)
        if (!m->fns[order[i]].kept_global && fn_is_local(&m->fns[order[i]])) {
            schedule_fn(m, order[i]);
            nest_peak(m, &m->fns[order[i]]);
        }
    free(order);
}
