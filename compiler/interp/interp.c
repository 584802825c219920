/* The reference interpreter's execution model (interp.h): frames, calls,
 * lockstep over devices, and moving values between global arrays and
 * per-device blocks.  What each op computes is in kernels.c.
 *
 * Metadata lives in arenas, but element buffers are malloc'd and freed
 * after their last use: an unrolled loop makes many large values that are
 * each dead a few instructions later, and keeping them all until the
 * function returns would multiply the memory a run needs. */
#include "interp.h"

#include "kernels.h"
#include "numerics.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Bounds one instruction's values on all devices together: 2^28 doubles
 * (2 GiB), so a program too big to interpret fails with a message. */
static const int64_t MAX_INST_ELEMS = (int64_t)1 << 28;

typedef struct {
    const Module *m;
    int64_t ndevices;            /* of the mesh */
    int64_t stride[MAX_AXES];    /* of each axis in the row-major device id */
    char *err;
    size_t errlen;
    int failed;                  /* the innermost failure wrote err: keep it */
} Interp;

/* One running function.  val[v] holds value v's buffers: one per device,
 * or for a call with several results, result after result, each with one
 * buffer per device. */
typedef struct {
    Interp *ip;
    const Fn *fn;
    int64_t ndev;
    int lockstep;                /* values are per-device blocks, not one global program */
    const uint8_t *active;       /* per device: runs this function (a call placed on a submesh), or NULL: all */
    double ***val;
    int64_t *nbufs;
    int *last_use;
    Arena arena;
} Frame;

static int run_fn(Interp *ip, const Fn *fn, int64_t ndev, int lockstep, const uint8_t *active, double *const *args,
                  double **results);

static int vfail(Interp *ip, const char *prefix, const char *fmt, va_list ap) {
    if (ip->failed)
        return -1;
    ip->failed = 1;
    size_t n = (size_t)snprintf(ip->err, ip->errlen, "%s", prefix);
    if (n < ip->errlen)
        vsnprintf(ip->err + n, ip->errlen - n, fmt, ap);
    return -1;
}

static int fail(Interp *ip, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Interp *ip, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(ip, "", fmt, ap);
    va_end(ap);
    return -1;
}

/* A failure at instruction v, named as the dump names it. */
static int fail_at(Frame *f, int v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(Frame *f, int v, const char *fmt, ...) {
    const Module *m = f->ip->m;
    const Inst *in = &f->fn->insts[v];
    Arena names_arena = {0};
    const char **names = ir_value_names(m, f->fn, &names_arena);
    char *prefix = in->op == OP_RETURN
                       ? arena_printf(&names_arena, "in '%s', return: ", sym_name(m->syms, f->fn->sym))
                       : arena_printf(&names_arena, "in '%s', %%%s = %s(...): ", sym_name(m->syms, f->fn->sym),
                                      names[v], op_info[in->op].name);
    va_list ap;
    va_start(ap, fmt);
    vfail(f->ip, prefix, fmt, ap);
    va_end(ap);
    arena_free(&names_arena);
    return -1;
}

static void shape_text(const Shape *s, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s[", s->dtype <= DT_COUNT ? dtype_name[s->dtype] : "?");
    for (int d = 0; d < s->rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)s->dims[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

static double *alloc_elems(Interp *ip, int64_t n) {
    double *p = calloc((size_t)(n ? n : 1), sizeof(double));
    if (!p)
        fail(ip, "out of memory (a value of %lld elements)", (long long)n);
    return p;
}

static double *copy_elems(Interp *ip, const double *src, int64_t n) {
    double *p = alloc_elems(ip, n);
    if (p)
        memcpy(p, src, sizeof(double) * (size_t)n);
    return p;
}

static void free_bufs(double **bufs, int64_t n) {
    for (int64_t i = 0; bufs && i < n; i++) {
        free(bufs[i]);
        bufs[i] = NULL;
    }
}

/* ---- global arrays and per-device blocks ---- */

static int64_t coordinate(const Interp *ip, int64_t dev, int axis) {
    return dev / ip->stride[axis] % ip->m->axis_size[axis];
}

/* Where device `dev`'s block of a value with sharding `sig` starts in the
 * global array (`start`), and how much of the block is real data (`box`):
 * blocks of an uneven dim are padded at the end.  Returns 0 when the block
 * is all padding. */
static int block_box(const Interp *ip, const Sig *sig, int64_t dev, const Shape *local, int64_t *start,
                     int64_t *box) {
    int real = 1;
    for (int d = 0; d < sig->type.rank; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(&sig->sh, d, axes);
        int64_t block = 0;
        for (int i = 0; i < n; i++)
            block = block * ip->m->axis_size[axes[i]] + coordinate(ip, dev, axes[i]);
        start[d] = block * local->dims[d];
        int64_t left = sig->type.dims[d] - start[d];
        box[d] = left < local->dims[d] ? left : local->dims[d];
        real &= box[d] > 0;
    }
    return real;
}

static int64_t offset(const int64_t *start, const int64_t *stride, int rank) {
    int64_t o = 0;
    for (int d = 0; d < rank; d++)
        o += start[d] * stride[d];
    return o;
}

/* Device d's block of `global`, zero-padded, into blocks[d]. */
static int split_value(Interp *ip, const Sig *sig, const double *global, double **blocks) {
    Shape local = shape_local(ip->m, &sig->type, &sig->sh);
    int64_t gs[MAX_RANK], ls[MAX_RANK], start[MAX_RANK], box[MAX_RANK];
    row_major_strides(&sig->type, gs);
    row_major_strides(&local, ls);
    for (int64_t dev = 0; dev < ip->ndevices; dev++) {
        if (!(blocks[dev] = alloc_elems(ip, shape_elems(&local))))
            return -1;
        if (block_box(ip, sig, dev, &local, start, box))
            copy_box(blocks[dev], ls, global + offset(start, gs, local.rank), gs, local.rank, box);
    }
    return 0;
}

/* Do two blocks agree on the box (NaN equal to NaN)? */
static int box_equal(const double *a, const double *b, const int64_t *stride, int rank, const int64_t *box) {
    if (rank == 0)
        return *a == *b || (*a != *a && *b != *b);
    for (int64_t i = 0; i < box[0]; i++)
        if (!box_equal(a + i * stride[0], b + i * stride[0], stride + 1, rank - 1, box + 1))
            return 0;
    return 1;
}

/* The global array from its blocks.  A dim not split along an axis is
 * taken from the devices at coordinate 0 of that axis.  The replication
 * check of spmd fns (and the partitioner) make the copies on the other
 * devices equal, and the interpreter checks that they are: a copy that
 * differs is a compiler bug this reference exists to catch. */
static double *assemble_value(Interp *ip, const Fn *fn, int result, double *const *blocks) {
    const Sig *sig = &fn->results[result];
    Shape local = shape_local(ip->m, &sig->type, &sig->sh);
    int64_t gs[MAX_RANK], ls[MAX_RANK], start[MAX_RANK], box[MAX_RANK];
    row_major_strides(&sig->type, gs);
    row_major_strides(&local, ls);
    double *global = alloc_elems(ip, shape_elems(&sig->type));
    for (int64_t dev = 0; global && dev < ip->ndevices; dev++) {
        int64_t owner = dev;             /* the device at coordinate 0 of the unsplit axes */
        for (int a = 0; a < ip->m->naxes; a++)
            if (!(sig->sh.known && sig->sh.dim[a] >= 0))
                owner -= coordinate(ip, dev, a) * ip->stride[a];
        if (!block_box(ip, sig, dev, &local, start, box))
            continue;
        if (owner == dev)
            copy_box(global + offset(start, gs, local.rank), gs, blocks[dev], ls, local.rank, box);
        else if (!box_equal(blocks[dev], blocks[owner], ls, local.rank, box)) {
            free(global);
            fail(ip, "result %d of '%s' should be the same on devices %lld and %lld, but they hold different values",
                 result, sym_name(ip->m->syms, fn->sym), (long long)owner, (long long)dev);
            return NULL;
        }
    }
    return global;
}

/* A global caller's call of a local function: split, run on every device,
 * assemble.  args and results have one entry per parameter / result. */
static int call_split(Interp *ip, const Fn *callee, double *const *args, double **results) {
    int64_t nd = ip->ndevices;
    Arena arena = {0};
    double **blocks = arena_alloc(&arena, sizeof(double *) * (size_t)(callee->nparams * nd + 1));
    double **local = arena_alloc(&arena, sizeof(double *) * (size_t)(callee->nresults * nd + 1));
    int rc = 0;
    for (int i = 0; i < callee->nparams && !rc; i++)
        rc = split_value(ip, &callee->params[i], args[i], blocks + i * nd);
    if (!rc)
        rc = run_fn(ip, callee, nd, 1, NULL, blocks, local);
    for (int i = 0; i < callee->nresults && !rc; i++)
        if (!(results[i] = assemble_value(ip, callee, i, local + i * nd)))
            rc = -1;
    if (rc)
        free_bufs(results, callee->nresults);
    free_bufs(blocks, callee->nparams * nd);
    free_bufs(local, callee->nresults * nd);
    arena_free(&arena);
    return rc;
}

/* ---- instructions ---- */

/* Does device d run instruction `in`?  In a per-device program, an
 * instruction placed on a submesh runs only on the devices at its
 * coordinate (docs/language.md, "Submeshes and pipelines"). */
static int runs_on(const Frame *f, const Inst *in, int64_t d) {
    if (f->active && !f->active[d])
        return 0;
    if (!in->place || !f->lockstep)
        return 1;
    const Submesh *sm = &f->ip->m->submesh[in->place - 1];
    return coordinate(f->ip, d, sm->axis) == sm->coord;
}

/* The devices that run a call placed on a submesh, or NULL for all. */
static const uint8_t *call_mask(Frame *f, const Inst *in) {
    if (!f->active && (!in->place || !f->lockstep))
        return NULL;
    uint8_t *mask = arena_alloc(&f->arena, (size_t)f->ndev + 1);
    for (int64_t d = 0; d < f->ndev; d++)
        mask[d] = (uint8_t)runs_on(f, in, d);
    return mask;
}

static int exec_parameter(Frame *f, int v, double *const *args) {
    const Inst *in = &f->fn->insts[v];
    int64_t i = ir_attr(f->fn, in, 0), n = shape_elems(&in->type);
    for (int64_t d = 0; d < f->ndev; d++) {
        double *x = f->val[v][d] = copy_elems(f->ip, args[i * f->ndev + d], n);
        if (!x)
            return -1;
        for (int64_t e = 0; e < n; e++)        /* callers' data may hold any double */
            x[e] = num_round(x[e], in->type.dtype);
    }
    return 0;
}

static int exec_return(Frame *f, int v, double **results) {
    const Inst *in = &f->fn->insts[v];
    for (int i = 0; i < in->nargs; i++) {
        int x = ir_arg(f->fn, in, i);
        for (int64_t d = 0; d < f->ndev; d++)
            if (!(results[i * f->ndev + d] = copy_elems(f->ip, f->val[x][d], shape_elems(&f->fn->insts[x].type)))) {
                free_bufs(results, in->nargs * f->ndev);
                return -1;
            }
    }
    return 0;
}

static int exec_tuple_element(Frame *f, int v) {
    const Inst *in = &f->fn->insts[v];
    int64_t i = ir_attr(f->fn, in, 0);
    double **tuple = f->val[ir_arg(f->fn, in, 0)];
    for (int64_t d = 0; d < f->ndev; d++)
        if (!(f->val[v][d] = copy_elems(f->ip, tuple[i * f->ndev + d], shape_elems(&in->type))))
            return -1;
    return 0;
}

/* A global caller passes global values; a lockstep caller passes each
 * device's blocks (to a local callee, or to an fn that then runs on each
 * device's data alone). */
static int exec_call(Frame *f, int v) {
    const Inst *in = &f->fn->insts[v];
    const Fn *callee = &f->ip->m->fns[ir_attr(f->fn, in, 0)];
    int64_t nd = f->ndev;
    double **args = arena_alloc(&f->arena, sizeof(double *) * (size_t)(in->nargs * nd + 1));
    double **res = arena_alloc(&f->arena, sizeof(double *) * (size_t)(callee->nresults * nd + 1));
    for (int i = 0; i < in->nargs; i++)
        for (int64_t d = 0; d < nd; d++)
            args[i * nd + d] = f->val[ir_arg(f->fn, in, i)][d];
    if (fn_is_local(callee) && f->lockstep && !fn_is_local(f->fn))
        return fail_at(f, v, "'%s' calls the spmd fn '%s' while running on the blocks of an spmd fn that called "
                       "it: nested per-device programs have no meaning",
                       sym_name(f->ip->m->syms, f->fn->sym), sym_name(f->ip->m->syms, callee->sym));
    int rc = fn_is_local(callee) && !f->lockstep ? call_split(f->ip, callee, args, res)
                                                  : run_fn(f->ip, callee, nd, f->lockstep, call_mask(f, in), args, res);
    if (rc)
        return fail_at(f, v, "the call failed");
    f->val[v] = res;
    f->nbufs[v] = callee->nresults * nd;
    return 0;
}

/* Collectives and axis-index run on the groups of their mesh axes. */
/* Run a loop's body trip-count times: each iteration's carried results
 * become the next one's parameters 1 ..; the loop's value is the last
 * iteration's results (with no iteration, the initial carried values).  A
 * run-time trip count is the last operand minus the first (replicated:
 * device 0's). */
static int exec_loop(Frame *f, int v) {
    const Inst *in = &f->fn->insts[v];
    const Fn *body = &f->ip->m->fns[inst_callee(f->fn, in)];
    int64_t nd = f->ndev, trips = loop_trips(f->fn, in), nres = body->nresults;
    int nc = loop_carried(f->fn, in), rc = 0;
    double **args = arena_alloc(&f->arena, sizeof(double *) * (size_t)(in->nargs * nd + 1));
    double **res = arena_alloc(&f->arena, sizeof(double *) * (size_t)(nres * nd + 1));
    double **next = arena_alloc(&f->arena, sizeof(double *) * (size_t)(nres * nd + 1));
    for (int i = 0; i < in->nargs; i++)
        for (int64_t d = 0; d < nd; d++)
            args[i * nd + d] = f->val[ir_arg(f->fn, in, i)][d];
    double first = args[0][0];
    if (trips < 0)
        trips = (int64_t)args[(in->nargs - 1) * nd][0] - (int64_t)first;
    for (int64_t d = 0; d < nd; d++)           /* the index, one per device: parameter 0 */
        if (!(args[d] = alloc_elems(f->ip, 1)))
            rc = -1;
    for (int j = 0; !rc && j < nc; j++)         /* owned copies: each iteration frees the last */
        for (int64_t d = 0; d < nd; d++)
            if (!(res[j * nd + d] = copy_elems(f->ip, args[(1 + j) * nd + d],
                                               shape_elems(&f->fn->insts[ir_arg(f->fn, in, 1 + j)].type))))
                rc = -1;
    for (int64_t t = 0; !rc && t < trips; t++) {
        for (int64_t d = 0; d < nd; d++)
            args[d][0] = first + (double)t;
        for (int j = 0; j < nc; j++)
            for (int64_t d = 0; d < nd; d++)
                args[(1 + j) * nd + d] = res[j * nd + d];
        if (run_fn(f->ip, body, nd, f->lockstep, call_mask(f, in), args, next)) {
            rc = fail_at(f, v, "iteration %lld of the loop failed", (long long)t);
            break;
        }
        free_bufs(res, (t == 0 ? nc : nres) * nd);
        memcpy(res, next, sizeof(double *) * (size_t)(nres * nd));
    }
    for (int64_t d = 0; d < nd; d++)
        free(args[d]);
    if (rc) {
        free_bufs(res, nc * nd);
        return rc;
    }
    f->val[v] = res;
    f->nbufs[v] = (trips ? nres : nc) * nd;
    return 0;
}

static int needs_groups(Op op) { return op_info[op].at_axes >= 0; }

static int make_groups(Frame *f, int v, Arena *scratch, Groups *g) {
    const Inst *in = &f->fn->insts[v];
    if (!f->lockstep || f->ndev != f->ip->ndevices)
        return fail_at(f, v, "a collective or axis-index outside a per-device program (an spmd fn)");
    int n;
    const int64_t *axes = inst_axes(f->fn, in, &n);
    int64_t *members = arena_alloc(scratch, sizeof(int64_t) * (size_t)f->ndev);
    int64_t *slot = arena_alloc(scratch, sizeof(int64_t) * (size_t)f->ndev);
    g->size = ir_replica_groups(f->ip->m, axes, n, members);
    for (int64_t i = 0; i < f->ndev; i++)
        slot[members[i]] = i;
    g->members = members;
    g->slot = slot;
    return 0;
}

/* Any op with a kernel: run it on every device before the next
 * instruction, then round each result to its dtype. */
static int exec_op(Frame *f, int v) {
    const Inst *in = &f->fn->insts[v];
    int64_t n = shape_elems(&in->type);
    if (n > MAX_INST_ELEMS / f->ndev)
        return fail_at(f, v, "%lld elements on each of %lld devices: more than the interpreter's limit of %lld in all",
                       (long long)n, (long long)f->ndev, (long long)MAX_INST_ELEMS);
    Arena scratch = {0};
    Groups g = {0, NULL, NULL};
    int rc = needs_groups((Op)in->op) ? make_groups(f, v, &scratch, &g) : 0;
    char kerr[256];
    Kernel k = {f->ip->m, f->fn, in, (double *const *const *)f->val, &g, 0, kerr, sizeof kerr};
    int round = !(op_info[in->op].flags & OPF_MOVES);
    for (int64_t d = 0; d < f->ndev && !rc; d++) {
        double *out = f->val[v][d] = alloc_elems(f->ip, n);
        k.dev = d;
        if (!out)
            rc = -1;
        else if (!runs_on(f, in, d)) {
            /* Poison: a device that reads what it never computed gets NaNs
             * into its results, and the comparison with the global program
             * fails. */
            for (int64_t e = 0; e < n; e++)
                out[e] = NAN;
            continue;
        } else if (kernel_run(&k, out))
            rc = fail_at(f, v, "%s", kerr);
        for (int64_t e = 0; !rc && round && e < n; e++)
            out[e] = num_round(out[e], in->type.dtype);
    }
    arena_free(&scratch);
    return rc;
}

static int exec_inst(Frame *f, int v, double *const *args, double **results) {
    const Inst *in = &f->fn->insts[v];
    if (in->op != OP_RETURN && !op_calls(in->op)) {
        f->val[v] = arena_alloc(&f->arena, sizeof(double *) * (size_t)f->ndev);
        f->nbufs[v] = f->ndev;
    }
    switch ((Op)in->op) {
    case OP_PARAMETER: return exec_parameter(f, v, args);
    case OP_RETURN: return exec_return(f, v, results);
    case OP_CALL: return exec_call(f, v);
    case OP_LOOP: return exec_loop(f, v);
    case OP_GET_TUPLE_ELEMENT: return exec_tuple_element(f, v);
    default: return exec_op(f, v);
    }
}

static void free_value(Frame *f, int v) {
    free_bufs(f->val[v], f->nbufs[v]);
}

/* Run fn on ndev devices (1 for a global program).  args[i * ndev + d] is
 * parameter i on device d, borrowed; results[i * ndev + d] receives result
 * i of device d, malloc'd, or nothing when the run fails. */
static int run_fn(Interp *ip, const Fn *fn, int64_t ndev, int lockstep, const uint8_t *active, double *const *args,
                  double **results) {
    Frame f = {ip, fn, ndev, lockstep, active, NULL, NULL, NULL, {0}};
    f.val = arena_alloc(&f.arena, sizeof(double **) * (size_t)(fn->ninsts + 1));
    f.nbufs = arena_alloc(&f.arena, sizeof(int64_t) * (size_t)(fn->ninsts + 1));
    f.last_use = arena_alloc(&f.arena, sizeof(int) * (size_t)(fn->ninsts + 1));
    for (int v = 0; v < fn->ninsts; v++) {
        f.last_use[v] = -1;
        for (int i = 0; i < fn->insts[v].nargs; i++)
            f.last_use[ir_arg(fn, &fn->insts[v], i)] = v;
    }
    int rc = 0;
    for (int v = 0; v < fn->ninsts && !rc; v++) {
        rc = exec_inst(&f, v, args, results);
        for (int i = 0; i < fn->insts[v].nargs; i++)      /* values dead after their last use */
            if (f.last_use[ir_arg(fn, &fn->insts[v], i)] == v)
                free_value(&f, ir_arg(fn, &fn->insts[v], i));
        if (f.last_use[v] < 0)
            free_value(&f, v);
    }
    for (int v = 0; v < fn->ninsts; v++)
        free_value(&f, v);
    arena_free(&f.arena);
    return rc;
}

/* ---- entry points ---- */

static int setup(Interp *ip, const Module *m, int fn, char *err, size_t errlen) {
    *ip = (Interp){m, 1, {0}, err, errlen, 0};
    for (int a = m->naxes - 1; a >= 0; a--) {
        ip->stride[a] = ip->ndevices;
        ip->ndevices *= m->axis_size[a];
    }
    if (errlen)
        err[0] = '\0';
    return fn >= 0 && fn < m->nfns ? 0 : fail(ip, "no function %d in the module", fn);
}

static int check_arg(Interp *ip, const Fn *fn, int i, const Shape *got, const Shape *want, const char *where) {
    if (shape_eq(got, want))
        return 0;
    char g[160], w[160];
    shape_text(got, g, sizeof g);
    shape_text(want, w, sizeof w);
    return fail(ip, "argument %d of '%s'%s is %s, but the parameter is %s", i, sym_name(ip->m->syms, fn->sym), where,
                g, w);
}

int interp_call(const Module *m, int fn, const InterpValue *args, InterpValue *results, char *err, size_t errlen) {
    Interp ip;
    if (setup(&ip, m, fn, err, errlen))
        return -1;
    const Fn *f = &m->fns[fn];
    Arena arena = {0};
    double **gargs = arena_alloc(&arena, sizeof(double *) * (size_t)(f->nparams + 1));
    double **gres = arena_alloc(&arena, sizeof(double *) * (size_t)(f->nresults + 1));
    int rc = 0;
    for (int i = 0; i < f->nparams && !rc; i++) {
        rc = check_arg(&ip, f, i, &args[i].shape, &f->params[i].type, "");
        gargs[i] = args[i].data;
    }
    if (!rc)
        rc = fn_is_local(f) ? call_split(&ip, f, gargs, gres) : run_fn(&ip, f, 1, 0, NULL, gargs, gres);
    for (int i = 0; i < f->nresults && !rc; i++)
        results[i] = (InterpValue){f->results[i].type, gres[i]};
    arena_free(&arena);
    return rc;
}

int interp_spmd(const Module *m, int fn, int64_t ndev, const InterpValue *const *args, InterpValue *const *results,
                char *err, size_t errlen) {
    Interp ip;
    if (setup(&ip, m, fn, err, errlen))
        return -1;
    const Fn *f = &m->fns[fn];
    if (ndev != ip.ndevices)
        return fail(&ip, "%lld devices given, but the mesh has %lld", (long long)ndev, (long long)ip.ndevices);
    Arena arena = {0};
    double **a = arena_alloc(&arena, sizeof(double *) * (size_t)(f->nparams * ndev + 1));
    double **r = arena_alloc(&arena, sizeof(double *) * (size_t)(f->nresults * ndev + 1));
    int rc = 0;
    for (int i = 0; i < f->nparams && !rc; i++) {
        Shape want = fn_is_local(f) ? shape_local(m, &f->params[i].type, &f->params[i].sh) : f->params[i].type;
        for (int64_t d = 0; d < ndev && !rc; d++) {
            rc = check_arg(&ip, f, i, &args[d][i].shape, &want, " on a device");
            a[i * ndev + d] = args[d][i].data;
        }
    }
    if (!rc)
        rc = run_fn(&ip, f, ndev, 1, NULL, a, r);
    for (int i = 0; i < f->nresults && !rc; i++) {
        Shape s = fn_is_local(f) ? shape_local(m, &f->results[i].type, &f->results[i].sh) : f->results[i].type;
        for (int64_t d = 0; d < ndev; d++)
            results[d][i] = (InterpValue){s, r[i * ndev + d]};
    }
    arena_free(&arena);
    return rc;
}

void interp_free_values(InterpValue *values, int n) {
    for (int i = 0; i < n; i++) {
        free(values[i].data);
        values[i].data = NULL;
    }
}
