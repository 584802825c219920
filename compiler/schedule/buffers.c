/* buffers.c: the buffers of a scheduled per-device fn.
 *
 * Values are walked in the scheduled order; a value takes the smallest
 * free buffer that fits, or a new one, and frees it after its last use
 * (twice: once refusing buffers much larger than the value, and the
 * assignment with the smaller total kept).  A collective's operand stays live until its done (the transfer reads it),
 * a done shares its start's buffer, parameters live in the caller's memory
 * and returned values are never freed.  An all-reduce whose operand, in a
 * buffer, nothing else reads reduces it in place.  The sum of all buffers
 * is the function's peak memory per device.
 *
 * Concatenates assembled in place: one whose operands are runs of its
 * result, each a dot or a collective's done read by it alone, takes its
 * buffer when the first of them is computed, and they write into their
 * runs (with the start, and an in-place all-reduce's operand dot): a
 * row-tiled collective matmul holds its result and nothing else
 * (mark_runs; codegen.c points each at its offset).  So does one whose
 * operands are strided blocks of it (column tiles), when each is a dot or
 * an all-reduce in place of a dot, whose product's rows are the block's:
 * the dot writes with the result's row stride (sk_dot_strided's ldo) and
 * the all-reduce reduces the block where it lies
 * (sc_start_all_reduce_strided); other collectives write runs only. */
#include "buffers.h"
#include "fuse.h"

#include <stdlib.h>
#include <string.h>

/* A view's last reader is its operand's too (backwards: views of views). */
static void extend_through_views(const Fn *fn, int *last) {
    for (int v = fn->ninsts - 1; v >= 0; v--)
        if (views_operand(fn, v)) {
            int x = ir_arg(fn, &fn->insts[v], 0);
            last[x] = last[v] > last[x] ? last[v] : last[x];
        }
}

/* A broadcast along leading or trailing dims that a fused loop computes
 * reads its operand's element in every iteration (fuse.c), so the operand
 * lives until the broadcast's last reader: a member of that loop then
 * never takes the operand's buffer, which would keep it out of the loop
 * (a layernorm gradient's row broadcasts were stored whole for that). */
static void extend_through_broadcasts(const Fn *fn, int *last) {
    for (int v = fn->ninsts - 1; v >= 0; v--) {
        const Inst *in = &fn->insts[v];
        if (row_broadcast_inner(fn, in) || col_broadcast_span(fn, in)) {
            int x = ir_arg(fn, in, 0);
            last[x] = last[v] > last[x] ? last[v] : last[x];
        }
    }
}

/* How many times each value of fn is read, and by which instruction last
 * (a view's readers count as its operand's last readers). */
void count_reads(Arena *a, const Fn *fn, int **uses, int **last_read) {
    *uses = arena_alloc(a, sizeof(int) * (size_t)(fn->ninsts + 1));
    *last_read = arena_alloc(a, sizeof(int) * (size_t)(fn->ninsts + 1));
    for (int v = 0; v < fn->ninsts; v++)
        for (int i = 0; i < fn->insts[v].nargs; i++) {
            (*uses)[ir_arg(fn, &fn->insts[v], i)]++;
            (*last_read)[ir_arg(fn, &fn->insts[v], i)] = v;
        }
    extend_through_views(fn, *last_read);
}

/* ---- buffers ----
 *
 * The pool of free buffers is a list, `free_list`: a freed buffer goes at
 * the end, and a taken one is replaced by the last.  `take` picks the best
 * fit: the smallest free buffer that is large enough, and among those of
 * that size the one earliest in the list.  Buffers are grouped by size
 * class (the distinct sizes of the function's values, ascending); a tree
 * over the classes counts their free buffers, to find the first class at
 * or above a size that has one, and each class keeps a min-heap of
 * (position, buffer) entries, to find its earliest.  When the last buffer
 * of the list moves, it gets a new entry and the old one goes stale: an
 * entry is live while the list holds that buffer at that position.  So a
 * take costs O(log n), not a scan of every free buffer, and picks what the
 * scan would. */

typedef struct {
    int pos, buf;
} Entry;

typedef struct {
    Entry *e;
    int n, cap;
} Heap;

typedef struct {
    int64_t *size;               /* buffer -> bytes */
    int *cls;                    /* buffer -> size class */
    int n, cap, cls_cap;
    int *free_list;
    int nfree, free_cap;
    const int64_t *class_size;   /* ascending, distinct */
    int nclass, leaves;          /* leaves: a power of two >= nclass */
    int *count;                  /* tree: free buffers per class, 2 * leaves nodes */
    Heap *heap;                  /* per class */
    int strict;                  /* refuse buffers too_wasteful for a value */
} Pool;

static void heap_push(Arena *a, Heap *h, Entry x) {
    int i = h->n;
    VEC_PUSH(a, h->e, h->n, h->cap);
    for (; i > 0 && h->e[(i - 1) / 2].pos > x.pos; i = (i - 1) / 2)
        h->e[i] = h->e[(i - 1) / 2];
    h->e[i] = x;
}

static void heap_pop(Heap *h) {
    Entry x = h->e[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->e[c + 1].pos < h->e[c].pos)
            c++;
        if (h->e[c].pos >= x.pos)
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (h->n > 0)
        h->e[i] = x;
}

static void count_add(Pool *p, int c, int d) {
    for (int x = p->leaves + c; x > 0; x /= 2)
        p->count[x] += d;
}

/* The first class at or after c with a free buffer, or -1. */
static int first_free_class(const Pool *p, int c) {
    if (c >= p->nclass)
        return -1;
    int x = p->leaves + c;
    while (p->count[x] == 0) {
        while (x & 1) {              /* a right child: its parent's range ends here too */
            x /= 2;
            if (x == 0)
                return -1;
        }
        x++;
    }
    while (x < p->leaves)
        x = p->count[2 * x] > 0 ? 2 * x : 2 * x + 1;
    return x - p->leaves;
}

/* The first class whose size is at least `bytes`. */
static int class_at_least(const Pool *p, int64_t bytes) {
    int lo = 0, hi = p->nclass;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (p->class_size[mid] < bytes)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void put_free(Arena *a, Pool *p, int b) {
    heap_push(a, &p->heap[p->cls[b]], (Entry){p->nfree, b});
    count_add(p, p->cls[b], 1);
    *VEC_PUSH(a, p->free_list, p->nfree, p->free_cap) = b;
}

/* A free buffer is reused for a smaller value only while the waste is
 * small: handing a large buffer to a small value leaves the next large
 * value without one, and a new buffer costs more than the small one
 * would have (the bidirectional matmul's peak more than doubled). */
enum { REUSE_MAX_RATIO = 2, REUSE_MAX_WASTE = 4096 };

static int too_wasteful(const Pool *p, int c, int64_t bytes) {
    int64_t size = p->class_size[c];
    return size > REUSE_MAX_RATIO * bytes && size - bytes > REUSE_MAX_WASTE;
}

static int take(Arena *a, Pool *p, int64_t bytes) {
    int c = first_free_class(p, class_at_least(p, bytes));
    if (c < 0 || (p->strict && too_wasteful(p, c, bytes))) {   /* a new buffer */
        int b = p->n, m = p->n;
        *VEC_PUSH(a, p->cls, m, p->cls_cap) = class_at_least(p, bytes);
        *VEC_PUSH(a, p->size, p->n, p->cap) = bytes;
        return b;
    }
    Heap *h = &p->heap[c];
    while (h->e[0].pos >= p->nfree || p->free_list[h->e[0].pos] != h->e[0].buf)
        heap_pop(h);                         /* stale */
    Entry best = h->e[0];
    heap_pop(h);
    count_add(p, c, -1);
    int last = p->free_list[--p->nfree];
    if (best.pos != p->nfree) {              /* the last takes its place */
        p->free_list[best.pos] = last;
        heap_push(a, &p->heap[p->cls[last]], (Entry){best.pos, last});
    }
    return best.buf;
}

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static int64_t value_bytes(const Inst *in) { return shape_elems(&in->type) * dtype_size(in->type.dtype); }

static int takes_buffer(const Inst *in) {
    return !(in->op == OP_PARAMETER || in->op == OP_RETURN || in->type.dtype == DT_TUPLE || in->op == OP_DONE ||
             in->flags & (INST_FOLDED | INST_VIEW));
}

/* The size classes of fn's values, and the empty tree and heaps. */
static void pool_init(Arena *a, Pool *p, const Fn *fn) {
    int64_t *sizes = arena_alloc(a, sizeof(int64_t) * (size_t)(fn->ninsts + 1));
    int n = 0;
    for (int v = 0; v < fn->ninsts; v++)
        if (takes_buffer(&fn->insts[v]))
            sizes[n++] = value_bytes(&fn->insts[v]);
    qsort(sizes, (size_t)n, sizeof *sizes, cmp_i64);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || sizes[i] != sizes[k - 1])
            sizes[k++] = sizes[i];
    p->class_size = sizes;
    p->nclass = k;
    p->leaves = 1;
    while (p->leaves < k)
        p->leaves *= 2;
    p->count = arena_alloc(a, sizeof(int) * 2 * (size_t)p->leaves);
    p->heap = arena_alloc(a, sizeof(Heap) * (size_t)(k + 1));
}

/* The bytes of the arrays a call's results are written to (call_arrays,
 * ir.h), held for the whole call beside the buffers. */
static int64_t call_array_bytes(const Module *m, const Fn *fn, int v) {
    int64_t bytes = 0;
    for (int k = 0; k < call_arrays(m, fn, v); k++) {
        const Shape *t = call_array_type(m, fn, v, k);
        bytes += shape_elems(t) * dtype_size(t->dtype);
    }
    return bytes;
}

/* What decides where values go, besides the pool. */
typedef struct {
    int **dying;                 /* per instruction: the values it reads last */
    const int *ndying;
    const int *in_place;         /* per all-reduce start or scatter: the operand it writes in place, or -1 */
    const int *run_of;           /* per value: the concatenate it is written into, or -1 (mark_runs) */
} Placing;

/* One assignment of buffers in schedule order: each value takes a free
 * buffer when it is computed and frees its operands' after their last
 * read.  Returns the bytes of all buffers; *nbuffers their count. */
static int64_t place_buffers(Fn *fn, const Placing *pl, int strict, int *nbuffers) {
    int n = fn->ninsts;
    Arena scratch = {0};
    Pool pool = {.strict = strict};
    pool_init(&scratch, &pool, fn);
    int *run_buffer = arena_alloc(&scratch, sizeof(int) * (size_t)(n + 1));
    for (int v = 0; v < n; v++)
        run_buffer[v] = -1;
    for (int v = 0; v < n; v++) {
        Inst *in = &fn->insts[v];
        in->buffer = -1;
        if (!takes_buffer(in) && in->op != OP_DONE)
            continue;
        /* A started collective's buffer passes to its done, which frees it;
         * an accumulated operand's, or an in-place all-reduce's operand's,
         * to v; a concatenate assembled in place takes its buffer when the
         * first value written into it is computed. */
        int into = pl->in_place[v] >= 0 ? pl->in_place[v] : accumulated_operand(fn, v);
        int c = in->flags & INST_ASSEMBLED ? v : pl->run_of[v];
        if (in->op == OP_DONE)
            in->buffer = fn->insts[ir_arg(fn, in, 0)].buffer;
        else if (c >= 0)
            in->buffer = run_buffer[c] >= 0 ? run_buffer[c]
                                             : (run_buffer[c] = take(&scratch, &pool, value_bytes(&fn->insts[c])));
        else
            in->buffer = into >= 0 ? fn->insts[into].buffer : take(&scratch, &pool, value_bytes(in));
        /* Free what this instruction read last (v itself, if nothing reads
         * it), but not the buffer v holds. */
        for (int i = 0; i < pl->ndying[v]; i++) {
            int d = pl->dying[v][i];
            if (d == v || fn->insts[d].buffer != in->buffer)
                put_free(&scratch, &pool, fn->insts[d].buffer);
        }
    }
    int64_t bytes = 0;
    for (int b = 0; b < pool.n; b++)
        bytes += pool.size[b];
    *nbuffers = pool.n;
    arena_free(&scratch);
    return bytes;
}

/* For each all-reduce start and scatter whose operand (a scatter's first),
 * in a buffer, is read by it alone and not returned: that operand, whose
 * buffer the all-reduce reduces in place (the runtime allows send ==
 * recv) or the scatter adds into (sk_scatter_add copies nothing then);
 * -1 elsewhere.  A gradient's or a partial product's all-reduce then
 * needs one array, and an embedding's gradient one table of zeros. */
static int *in_place_operands(Arena *a, const Fn *fn, const int *uses, const int *last) {
    int *in_place = arena_alloc(a, sizeof(int) * (size_t)(fn->ninsts + 1));
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        int x = (in->op == OP_ALL_REDUCE && in->flags & INST_ASYNC) || (in->op == OP_SCATTER && !in->place)
                    ? ir_arg(fn, in, 0)
                    : -1;
        const Inst *xi = x >= 0 ? &fn->insts[x] : NULL;
        in_place[v] = xi && uses[x] == 1 && last[x] < fn->ninsts && (takes_buffer(xi) || xi->op == OP_DONE) &&
                              !(xi->flags & INST_ASYNC) && value_bytes(xi) == value_bytes(in)
                          ? x
                          : -1;
    }
    return in_place;
}

/* Does concatenate c's result hold each operand as one run of bytes: are
 * its dims before the concatenated one all of extent 1? */
static int runs_contiguous(const Fn *fn, const Inst *c) {
    for (int d = 0; d < ir_attr(fn, c, 0); d++)
        if (c->type.dims[d] != 1)
            return 0;
    return 1;
}

/* The elements of a row of operand p of concatenate c, a block of rows
 * lying apart in c's result: its dims from the concatenated one on. */
static int64_t block_cols(const Fn *fn, const Inst *c, const Inst *p) {
    int64_t cols = 1;
    for (int d = ir_attr(fn, c, 0); d < p->type.rank; d++)
        cols *= p->type.dims[d];
    return cols;
}

/* Is x a plain dot that can write a block whose rows have `cols`
 * elements (0: one run, any dot): do its product's rows, the runs of its
 * rhs free dims that sk_dot_strided lays at a row stride, have as many?
 * Not a dot that ends a fold: its kernel (sk_attention, ...) is not
 * sk_dot_strided. */
static int plain_dot(const Fn *fn, int x, int64_t cols) {
    const Inst *in = &fn->insts[x];
    if (in->op != OP_DOT || in->flags || in->place || ends_fold(fn, x))
        return 0;
    DotDims dd;
    dot_dims(fn, in, &dd);
    const Shape *rhs = &fn->insts[ir_arg(fn, in, 1)].type;
    int64_t n = 1;
    for (int d = in->type.rank - (rhs->rank - dd.nbatch - dd.ncontract); d < in->type.rank; d++)
        n *= in->type.dims[d];
    return !cols || n == cols;
}

/* How many values write operand p of concatenate c into its run (run[]
 * gets them), or 0 if p cannot be: a plain dot, or a collective's done
 * with its start (and the start's operand, a plain dot, if the start is an
 * all-reduce in place), read only by c.  Into a block of rows of `cols`
 * elements lying apart (0: a run), only dots write (sk_dot_strided) and
 * all-reduces in place of them (sc_start_all_reduce_strided): the other
 * collectives write runs. */
static int run_writers(const Fn *fn, const int *uses, const int *last, const int *in_place, int c, int p,
                       int64_t cols, int run[3]) {
    const Inst *in = &fn->insts[p];
    if (uses[p] != 1 || last[p] != c || in->place)
        return 0;
    if (in->op == OP_DOT) {
        run[0] = p;
        return plain_dot(fn, p, cols);
    }
    if (in->op != OP_DONE)
        return 0;
    int start = ir_arg(fn, in, 0), x = in_place[start];
    run[0] = p;
    run[1] = start;
    if (x < 0)
        return cols ? 0 : 2;
    run[2] = x;
    return plain_dot(fn, x, cols) ? 3 : 0;
}

/* Concatenates assembled in place (see the top): one whose operands are
 * runs of its result, or strided blocks of it (column tiles), every
 * operand written by values that can write there, is INST_ASSEMBLED and
 * they INST_IN_RUN.  Returns each value's concatenate (-1 for none): its
 * buffer is the concatenate's, taken when the first of them is computed. */
static int *mark_runs(Arena *a, Fn *fn, const int *uses, const int *last, const int *in_place) {
    int n = fn->ninsts, *run_of = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
    for (int v = 0; v < n; v++)
        run_of[v] = -1;
    for (int c = 0; c < n; c++) {
        Inst *in = &fn->insts[c];
        if (in->op != OP_CONCAT || in->flags || in->place)
            continue;
        /* Each operand's writers, three at most, kept until all qualify. */
        int strided = !runs_contiguous(fn, in), ok = 1;
        int *writers = arena_alloc(a, sizeof(int) * 4 * (size_t)in->nargs);
        for (int i = 0; ok && i < in->nargs; i++) {
            int p = ir_arg(fn, in, i), *w = &writers[4 * i];
            w[3] = run_writers(fn, uses, last, in_place, c, p, strided ? block_cols(fn, in, &fn->insts[p]) : 0, w);
            ok = w[3] > 0;
        }
        if (!ok)
            continue;
        in->flags |= INST_ASSEMBLED;
        for (int i = 0; i < in->nargs; i++)
            for (int k = 0; k < writers[4 * i + 3]; k++) {
                fn->insts[writers[4 * i + k]].flags |= INST_IN_RUN;
                run_of[writers[4 * i + k]] = c;
            }
    }
    return run_of;
}

/* Buffers for fn's values: the better of two greedy assignments, one that
 * hands any free buffer large enough to a value and one that refuses a
 * much larger one (too_wasteful).  Neither wins everywhere: reuse keeps
 * a plain MLP at two buffers, refusal keeps a collective matmul's big
 * accumulators from being spent on its small row blocks. */
void assign_buffers(const Module *m, Fn *fn) {
    int n = fn->ninsts;
    Arena scratch = {0};
    int *last = arena_alloc(&scratch, sizeof(int) * (size_t)(n + 1));
    for (int v = 0; v < n; v++) {
        last[v] = v;
        const Inst *in = &fn->insts[v];
        for (int i = 0; i < in->nargs; i++) {
            int a = ir_arg(fn, in, i);
            last[a] = folded_into(fn, v);   /* read where the call that computes v runs */
            if (in->op == OP_DONE)   /* the start's operand is read until the done */
                last[ir_arg(fn, &fn->insts[a], 0)] = v;
        }
    }
    const Inst *ret = &fn->insts[n - 1];
    for (int i = 0; i < ret->nargs; i++)
        last[ir_arg(fn, ret, i)] = n;        /* returned: handed to the caller */
    extend_through_views(fn, last);          /* a view's memory is its operand's */
    extend_through_broadcasts(fn, last);
    int **dying = arena_alloc(&scratch, sizeof(int *) * (size_t)(n + 1));
    int *ndying = arena_alloc(&scratch, sizeof(int) * (size_t)(n + 1)), *cap = arena_alloc(&scratch, sizeof(int) * (size_t)(n + 1));
    for (int v = 0; v < n; v++) {
        const Inst *in = &fn->insts[v];
        if ((takes_buffer(in) || in->op == OP_DONE) && last[v] < n && !(in->flags & INST_ASYNC))
            *VEC_PUSH(&scratch, dying[last[v]], ndying[last[v]], cap[last[v]]) = v;
    }
    int *uses, *last_read;
    count_reads(&scratch, fn, &uses, &last_read);
    Placing pl = {dying, ndying, in_place_operands(&scratch, fn, uses, last), NULL};
    pl.run_of = mark_runs(&scratch, fn, uses, last, pl.in_place);
    /* Reuse wins ties, and most fns: it runs last, so its buffers stay
     * unless refusal did better. */
    int nstrict, nreuse;
    int64_t strict = place_buffers(fn, &pl, 1, &nstrict);
    int64_t reuse = place_buffers(fn, &pl, 0, &nreuse);
    if (strict < reuse)
        place_buffers(fn, &pl, 1, &nstrict);
    fn->peak_bytes = strict < reuse ? strict : reuse;
    fn->nbuffers = strict < reuse ? nstrict : nreuse;
    for (int v = 0; v < n; v++)
        fn->peak_bytes += call_array_bytes(m, fn, v);
    arena_free(&scratch);
}

/* Does body instruction p (a parameter, or a view of one) have readers
 * other than operand 0 of dus that are not among anc (what dus waits for)? */
static int read_after(const Fn *body, int p, const uint8_t *anc, int dus) {
    for (int u = p + 1; u < body->ninsts; u++) {
        const Inst *in = &body->insts[u];
        for (int i = 0; i < in->nargs; i++) {
            if (ir_arg(body, in, i) != p || (u == dus && i == 0))
                continue;
            if (in->flags & INST_VIEW ? read_after(body, u, anc, dus) : !anc[u] || u == dus)
                return 1;
        }
    }
    return 0;
}

static int carried_in_place(Arena *scratch, const Fn *body, int j) {
    const Inst *ret = &body->insts[body->ninsts - 1];
    if (ret->op != OP_RETURN || j >= ret->nargs)
        return 0;
    int dus = ir_arg(body, ret, j);
    const Inst *in = &body->insts[dus];
    if (in->op != OP_DYNAMIC_UPDATE_SLICE || in->place || in->buffer < 0)
        return 0;
    for (int i = 0; i < j; i++)          /* written into the result array of its first place only */
        if (ir_arg(body, ret, i) == dus)
            return 0;
    int p = ir_arg(body, in, 0);
    if (body->insts[p].op != OP_PARAMETER || ir_attr(body, &body->insts[p], 0) != 1 + j)
        return 0;
    uint8_t *anc = arena_alloc(scratch, (size_t)body->ninsts + 1);
    anc[dus] = 1;
    for (int u = dus; u >= 0; u--)
        for (int i = 0; anc[u] && i < body->insts[u].nargs; i++)
            anc[ir_arg(body, &body->insts[u], i)] = 1;
    return !read_after(body, p, anc, dus);
}

/* Fn.carried_in_place of a scheduled loop body (loop_carried_in_place,
 * ir.h): decided once, here, for the peaks and the C that read it. */
void mark_carried_in_place(Module *m, Fn *body) {
    if (!body->loop_carried)
        return;
    Arena scratch = {0};
    body->carried_in_place = arena_alloc(m->arena, (size_t)body->loop_carried);
    for (int j = 0; j < body->loop_carried; j++)
        body->carried_in_place[j] = (uint8_t)carried_in_place(&scratch, body, j);
    arena_free(&scratch);
}

